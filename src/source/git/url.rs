//! Remote URLs: what libgit2 gets (no password), what humans see (password redacted), scp-style
//! addresses, and relative locations resolved like git submodule URLs.

use std::path::Path;

use super::auth::SecretValue;
use super::GitError;
use crate::api::redact::redact_url_passwords;

/// A remote URL taken apart: what libgit2 gets, what humans see, and the secrets it carried.
#[derive(Clone, Debug)]
pub(super) struct RemoteUrl {
    /// The URL handed to libgit2, without a password.
    pub(super) fetch_url: String,
    /// For logs, errors and the cache key: password replaced by `***`.
    pub(super) display: String,
    pub(super) username: Option<String>,
    pub(super) password: Option<SecretValue>,
    pub(super) port: Option<u16>,
    /// `file://` or a path: libgit2's local transport, which cannot fetch shallow.
    pub(super) local: bool,
}

impl RemoteUrl {
    pub(super) fn parse(given: &str) -> Result<Self, GitError> {
        let invalid = |reason: &str| GitError::InvalidUrl {
            url: redact_url_passwords(given),
            reason: reason.to_string(),
        };
        if given.contains("://") {
            let mut url = url::Url::parse(given).map_err(|e| invalid(&e.to_string()))?;
            match url.scheme() {
                "http" | "https" | "ssh" | "git" | "file" => {}
                other => {
                    return Err(invalid(&format!(
                        "unsupported scheme `{other}` (use https, ssh, git or file)"
                    )))
                }
            }
            let username = (!url.username().is_empty()).then(|| percent_decode(url.username()));
            let password = url.password().map(|p| SecretValue::new(percent_decode(p)));
            let port = url.port();
            if password.is_some() {
                let _ = url.set_password(None);
            }
            let local = url.scheme() == "file";
            let fetch_url = url.to_string();
            // Redacted whether the secret is a password or a token used as the user name
            // (`https://<token>@github.com`): this is what logs, errors and status show.
            let display = match &password {
                Some(_) => redact_url_passwords(given),
                None => redact_url_passwords(&fetch_url),
            };
            return Ok(RemoteUrl {
                fetch_url,
                display,
                username,
                password,
                port,
                local,
            });
        }
        if let Some(scp) = ScpUrl::parse(given) {
            return Ok(RemoteUrl {
                fetch_url: given.to_string(),
                display: given.to_string(),
                username: scp.user,
                password: None,
                port: scp.port,
                local: false,
            });
        }
        let path = Path::new(given);
        if path.is_absolute() || given.starts_with('.') {
            return Ok(RemoteUrl {
                fetch_url: given.to_string(),
                display: given.to_string(),
                username: None,
                password: None,
                port: None,
                local: true,
            });
        }
        Err(invalid(
            "expected https://, ssh://, git://, file://, user@host:path or a path",
        ))
    }

    /// The secrets the URL carried, to scrub from messages.
    pub(super) fn secrets(&self) -> Vec<&SecretValue> {
        self.password.iter().collect()
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 3 <= bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// scp-style `[user@]host:path` or `[[user@]host:port]:path`.
struct ScpUrl {
    user: Option<String>,
    host: String,
    port: Option<u16>,
    path: String,
}

impl ScpUrl {
    fn parse(s: &str) -> Option<ScpUrl> {
        if s.contains("://") || s.starts_with('/') || s.starts_with('.') {
            return None;
        }
        let (authority, path, bracketed) = if let Some(rest) = s.strip_prefix('[') {
            let (inside, after) = rest.split_once(']')?;
            (inside, after.strip_prefix(':')?, true)
        } else {
            let (a, p) = s.split_once(':')?;
            (a, p, false)
        };
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, authority),
        };
        let (host, port) = match (bracketed, hostport.rsplit_once(':')) {
            (true, Some((h, p))) => (h, Some(p.parse().ok()?)),
            _ => (hostport, None),
        };
        if host.is_empty() || host.contains('/') || path.is_empty() {
            return None;
        }
        Some(ScpUrl {
            user,
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    fn format(&self) -> String {
        let user = self
            .user
            .as_deref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        match self.port {
            Some(p) => format!("[{user}{}:{p}]:{}", self.host, self.path),
            None => format!("{user}{}:{}", self.host, self.path),
        }
    }
}

/// An scp-style location (`git@host:org/repo.git`) written as the `ssh://` URL git reads it as
/// (`ssh://git@host/org/repo.git`); `None` when `location` is not scp-style.
pub fn scp_as_ssh_url(location: &str) -> Option<String> {
    let scp = ScpUrl::parse(location)?;
    let user = scp.user.map(|u| format!("{u}@")).unwrap_or_default();
    let port = scp.port.map(|p| format!(":{p}")).unwrap_or_default();
    let path = scp.path.trim_start_matches('/');
    Some(format!("ssh://{user}{}{port}/{path}", scp.host))
}

/// What names one repository whatever the protocol it is reached by: `host/path` with the host
/// in lower case, without user, port, scheme, a trailing `/` or `.git`. A push webhook names a
/// repository by its `https://` and `ssh` URLs; a root may follow it by either:
/// `https://GitHub.com/org/app.git`, `ssh://git@github.com/org/app` and `git@github.com:org/app`
/// are one repository. `None` for a local directory or a URL without a host.
pub fn repository_key(location: &str) -> Option<String> {
    let url = match scp_as_ssh_url(location) {
        Some(ssh) => url::Url::parse(&ssh).ok()?,
        None => url::Url::parse(location).ok()?,
    };
    if url.scheme() == "file" {
        return None;
    }
    let host = url.host_str()?.to_ascii_lowercase();
    let path = url.path().trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path).trim_matches('/');
    (!path.is_empty()).then(|| format!("{host}/{path}"))
}

/// Whether `repo` (a `--repo` value) names a git remote rather than a local directory:
/// a URL with a scheme, or scp-style `user@host:path` that is not an existing local path.
pub fn is_git_url(repo: &str) -> bool {
    if repo.contains("://") {
        return true;
    }
    ScpUrl::parse(repo).is_some() && !Path::new(repo).exists()
}

/// Why a relative `location` cannot be resolved.
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve git location `{location}` relative to `{base}`: {reason}")]
pub struct RelativeLocationError {
    location: String,
    base: String,
    reason: String,
}

/// Resolve a git `location` the way git resolves relative submodule URLs: a location starting
/// with `./` or `../` is taken relative to the config repository `base` (a URL, scp-style
/// address or local directory); `../charts.git` next to `https://h/org/config.git` is
/// `https://h/org/charts.git`. Any other location is returned unchanged.
pub fn resolve_relative_location(
    base: &str,
    location: &str,
) -> Result<String, RelativeLocationError> {
    if !(location.starts_with("./")
        || location.starts_with("../")
        || location == "."
        || location == "..")
    {
        return Ok(location.to_string());
    }
    let err = |reason: &str| RelativeLocationError {
        location: location.to_string(),
        base: redact_url_passwords(base),
        reason: reason.to_string(),
    };
    // Split the base into a fixed prefix (scheme + authority) and a path to edit.
    let (prefix, path, scp) = if let Some(idx) = base.find("://") {
        let after = &base[idx + 3..];
        let slash = after.find('/').unwrap_or(after.len());
        (
            base[..idx + 3 + slash].to_string(),
            after[slash..].to_string(),
            None,
        )
    } else if let Some(scp) = ScpUrl::parse(base).filter(|_| !Path::new(base).exists()) {
        (String::new(), scp.path.clone(), Some(scp))
    } else {
        (String::new(), base.to_string(), None)
    };
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    for part in location.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(err("too many `..`: it climbs above the root of the base"));
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    let path = if absolute {
        format!("/{joined}")
    } else {
        joined
    };
    Ok(match scp {
        Some(mut s) => {
            if path.is_empty() {
                return Err(err("no path left"));
            }
            s.path = path;
            s.format()
        }
        None if prefix.is_empty() && path.is_empty() => ".".to_string(),
        None => format!("{prefix}{path}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_repository_has_one_key_by_any_protocol() {
        let key = Some("github.com/org/app".to_string());
        for url in [
            "https://GitHub.com/org/app.git",
            "https://token@github.com/org/app/",
            "ssh://git@github.com/org/app",
            "ssh://git@github.com:22/org/app.git",
            "git@github.com:org/app.git",
            "git://github.com/org/app",
        ] {
            assert_eq!(repository_key(url), key, "{url}");
        }
        assert_ne!(repository_key("https://github.com/org/app2"), key);
        assert_ne!(repository_key("https://gitlab.com/org/app"), key);
        assert_eq!(repository_key("file:///srv/git/app.git"), None);
        assert_eq!(repository_key("/srv/git/app"), None);
    }

    #[test]
    fn url_passwords_are_removed_before_libgit2_sees_them() {
        let u = RemoteUrl::parse("https://bob:s%40cret@example.com/org/repo.git").unwrap();
        assert_eq!(u.fetch_url, "https://bob@example.com/org/repo.git");
        assert_eq!(u.display, "https://bob:***@example.com/org/repo.git");
        assert_eq!(u.password.unwrap().expose(), "s@cret");
        assert_eq!(u.username.as_deref(), Some("bob"));
    }

    #[test]
    fn a_token_used_as_the_user_name_is_not_shown() {
        let u = RemoteUrl::parse("https://ghp_S3cretToken@example.com/org/repo.git").unwrap();
        assert_eq!(
            u.fetch_url,
            "https://ghp_S3cretToken@example.com/org/repo.git"
        );
        assert_eq!(u.display, "https://***@example.com/org/repo.git");
        let ssh = RemoteUrl::parse("ssh://git@example.com/org/repo.git").unwrap();
        assert_eq!(ssh.display, "ssh://git@example.com/org/repo.git");
    }

    #[test]
    fn scp_style_urls() {
        let s = ScpUrl::parse("git@github.com:org/repo.git").unwrap();
        assert_eq!(
            (s.user.as_deref(), s.host.as_str(), s.port, s.path.as_str()),
            (Some("git"), "github.com", None, "org/repo.git")
        );
        let s = ScpUrl::parse("[git@127.0.0.1:2222]:/srv/repo.git").unwrap();
        assert_eq!(
            (s.user.as_deref(), s.host.as_str(), s.port, s.path.as_str()),
            (Some("git"), "127.0.0.1", Some(2222), "/srv/repo.git")
        );
        assert_eq!(s.format(), "[git@127.0.0.1:2222]:/srv/repo.git");
        assert!(ScpUrl::parse("/abs/path").is_none());
        assert!(ScpUrl::parse("./rel:x").is_none());
        assert!(is_git_url("git@h:x.git"));
        assert!(is_git_url("file:///tmp/x"));
        assert!(!is_git_url("examples-repo"));
    }

    #[test]
    fn unsupported_scheme_is_a_clear_error() {
        let err = RemoteUrl::parse("ftp://u:pw@h/x").unwrap_err().to_string();
        assert!(err.contains("unsupported scheme `ftp`"), "{err}");
        assert!(!err.contains("pw@"), "{err}");
    }

    #[test]
    fn relative_locations_resolve_like_submodule_urls() {
        let r = |b, l| resolve_relative_location(b, l).unwrap();
        assert_eq!(
            r("https://h/org/config.git", "../charts.git"),
            "https://h/org/charts.git"
        );
        assert_eq!(
            r("https://h/org/config.git/", "../charts.git"),
            "https://h/org/charts.git"
        );
        assert_eq!(
            r("https://h/org/config.git", "./sub"),
            "https://h/org/config.git/sub"
        );
        assert_eq!(
            r("ssh://git@h:2222/org/config.git", "../../other/c.git"),
            "ssh://git@h:2222/other/c.git"
        );
        assert_eq!(
            r("git@h:org/config.git", "../charts.git"),
            "git@h:org/charts.git"
        );
        assert_eq!(
            r("[git@h:2222]:/srv/config.git", "../charts.git"),
            "[git@h:2222]:/srv/charts.git"
        );
        assert_eq!(r("/srv/git/config", "../charts"), "/srv/git/charts");
        assert_eq!(r("examples-repo", "../charts"), "charts");
        assert_eq!(r("work/config", "../charts"), "work/charts");
        assert_eq!(
            r("https://h/org/config.git", "https://other/x.git"),
            "https://other/x.git"
        );
        let err = resolve_relative_location("https://h/config.git", "../../x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("too many `..`"), "{err}");
    }
}
