//! Where a daemon may fetch from. A WeaveCloud names its agent channel and an Armada chart names
//! its source, so whoever may write one of those (a tenant, a pull request) chooses a URL that
//! Weft fetches with its own network position. These rules bound that:
//!
//! - [`UrlAllowList`]: comma-separated URL prefixes (`--allowed-channels`,
//!   `--allowed-chart-sources`). A URL is normalised first (`url` crate: dot segments resolved,
//!   scheme and host lowercased, user and password dropped; scp-style `git@host:path` read as
//!   `ssh://git@host/path`), then matched on a boundary: the prefix `https://github.com/org`
//!   allows `https://github.com/org/charts.git` but not `https://github.com/org-evil/x` nor
//!   `https://github.com/org/../evil/x`.
//! - [`same_host_redirects`]: HTTP downloads (chart archives, channels, bundles) follow at most a
//!   few redirects, and only to the same host without leaving https.

use std::fmt;

/// Why a list of prefixes cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("`{entry}` is not a URL prefix (write it with its scheme, e.g. `https://github.com/org/`)")]
pub struct PrefixError {
    entry: String,
}

/// URL prefixes a fetch must match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlAllowList {
    prefixes: Vec<String>,
}

impl UrlAllowList {
    /// Prefixes as written (each with a scheme: `https://`, `ssh://git@github.com/org/`).
    pub fn new(prefixes: impl IntoIterator<Item = impl Into<String>>) -> Result<Self, PrefixError> {
        let prefixes: Vec<String> = prefixes
            .into_iter()
            .map(Into::into)
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        for p in &prefixes {
            if !p.contains("://") {
                return Err(PrefixError { entry: p.clone() });
            }
        }
        Ok(UrlAllowList { prefixes })
    }

    /// A prefix in the form URLs are matched in: without a user (`ssh://git@host/` matches as
    /// `ssh://host/`, since [`normalise`] drops the user of every URL).
    fn matchable(prefix: &str) -> String {
        let Some(at) = prefix.find("://").map(|i| i + 3) else {
            return prefix.to_string();
        };
        let authority_end = prefix[at..].find('/').map_or(prefix.len(), |i| at + i);
        match prefix[at..authority_end].rfind('@') {
            Some(user_end) => format!("{}{}", &prefix[..at], &prefix[at + user_end + 1..]),
            None => prefix.to_string(),
        }
    }

    /// A comma-separated list (the flags' and environment variables' form).
    pub fn parse(list: &str) -> Result<Self, PrefixError> {
        UrlAllowList::new(list.split(','))
    }

    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// `url` (normalised) starts with one of the prefixes, on a boundary.
    pub fn allows(&self, url: &str) -> bool {
        let Some(url) = normalise(url) else {
            return false;
        };
        self.prefixes
            .iter()
            .any(|p| matches_prefix(&url, &Self::matchable(p)))
    }
}

impl fmt::Display for UrlAllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.prefixes.join(", "))
    }
}

/// The form a URL is matched in; `None` for what is not a URL (a path, garbage).
pub fn normalise(url: &str) -> Option<String> {
    let url = url.trim();
    let (git_plus, rest) = match url.strip_prefix("git+") {
        Some(rest) => ("git+", rest),
        None => ("", url),
    };
    let rest = match super::git::scp_as_ssh_url(rest) {
        Some(ssh) => ssh,
        None => rest.to_string(),
    };
    let mut parsed = url::Url::parse(&rest).ok()?;
    if parsed.cannot_be_a_base() {
        return None;
    }
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    Some(format!("{git_plus}{parsed}"))
}

fn matches_prefix(url: &str, prefix: &str) -> bool {
    let Some(rest) = url.strip_prefix(prefix) else {
        // `https://host` as a prefix of the normalised `https://host/`.
        return format!("{prefix}/") == url;
    };
    prefix.ends_with('/')
        || rest.is_empty()
        || rest.starts_with('/')
        || rest.starts_with('?')
        || rest.starts_with('#')
}

/// What chart sources may name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ChartSourcePolicy {
    /// The CLI: whatever the user running it can reach (local directories for development).
    #[default]
    Any,
    /// The daemon (`--allowed-chart-sources`): remote URLs matching the list; never `file://`
    /// nor a path of the pod's own filesystem. `local` sources inside the config repository are
    /// always allowed.
    Remote(UrlAllowList),
}

/// The default of `--allowed-chart-sources`: https and ssh to any host.
pub const DEFAULT_CHART_SOURCES: &str = "https://,ssh://";

/// Why a chart source is refused by the daemon's policy.
#[derive(Debug, thiserror::Error)]
pub enum SourceRefused {
    #[error("`{url}` is a path or file:// URL: the daemon reads charts only from the config repository (`type: local`) or from remote URLs")]
    Local { url: String },
    #[error("`{url}` is not allowed by --allowed-chart-sources ({allowed})")]
    NotAllowed { url: String, allowed: String },
    #[error("`{location}` is not allowed by --allowed-chart-sources ({allowed}): an oci:// location is checked as `{checked}`")]
    OciNotAllowed {
        location: String,
        checked: String,
        allowed: String,
    },
}

impl ChartSourcePolicy {
    /// Check a resolved git or tar location.
    pub fn check(&self, url: &str) -> Result<(), SourceRefused> {
        let ChartSourcePolicy::Remote(list) = self else {
            return Ok(());
        };
        let shown = crate::api::redact::redact_url_passwords(url);
        let is_remote = normalise(url).is_some_and(|u| !u.starts_with("file:"));
        if !is_remote {
            return Err(SourceRefused::Local { url: shown });
        }
        if !list.allows(url) {
            return Err(SourceRefused::NotAllowed {
                url: shown,
                allowed: list.to_string(),
            });
        }
        Ok(())
    }
}

/// Which agent channels (`spec.general.wcPollUrl`) a WeaveCloud may name, and where the
/// bundles a channel lists may be downloaded from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelPolicy {
    /// `--allowed-channels`; `None`: [`DEFAULT_CHANNELS`], Weave Cloud's own host (never a
    /// host taken from the WeaveCloud, whose author is not the operator).
    pub allowed: Option<UrlAllowList>,
}

/// The default of `--allowed-channels`: Weave Cloud's own host (the built-in bundle needs no
/// channel at all).
pub const DEFAULT_CHANNELS: &str = "https://cloud.weave.works/";

/// A channel refused by [`ChannelPolicy`].
#[derive(Debug, thiserror::Error)]
#[error("`spec.general.wcPollUrl: {url}` is not an allowed agent channel ({allowed}); the operator allows others with --allowed-channels (WEFT_ALLOWED_CHANNELS)")]
pub struct ChannelRefused {
    pub url: String,
    pub allowed: String,
}

impl ChannelPolicy {
    fn list(&self) -> UrlAllowList {
        match &self.allowed {
            Some(list) => list.clone(),
            None => UrlAllowList {
                prefixes: vec![DEFAULT_CHANNELS.to_string()],
            },
        }
    }

    /// The allowed prefixes, as error messages show them.
    pub fn describe(&self) -> String {
        let list = self.list();
        if list.prefixes.is_empty() {
            "none".to_string()
        } else if self.allowed.is_none() {
            format!("by default only {list}")
        } else {
            list.to_string()
        }
    }

    /// Whether `url` (a channel, or a bundle a channel lists) may be fetched.
    pub fn allows(&self, url: &str) -> bool {
        self.list().allows(url)
    }

    /// Check a WeaveCloud's channel against the policy.
    pub fn check(&self, poll_url: &str) -> Result<(), ChannelRefused> {
        if self.allows(poll_url) {
            return Ok(());
        }
        Err(ChannelRefused {
            url: crate::api::redact::redact_url_passwords(poll_url.trim()),
            allowed: self.describe(),
        })
    }
}

pub use crate::api::bounded::clip;

/// Redirects an HTTP download may follow: at most 5, same host and port, never from https to
/// http. Anything else ends the download with an error that names the refused target.
pub fn same_host_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let Some(first) = attempt.previous().first().cloned() else {
            return attempt.follow();
        };
        let next = attempt.url();
        let same_host = next.host_str() == first.host_str()
            && next.port_or_known_default() == first.port_or_known_default();
        let downgrade = first.scheme() == "https" && next.scheme() != "https";
        if attempt.previous().len() > 5 {
            attempt.error("more than 5 redirects")
        } else if !same_host || downgrade {
            // Host and port: a redirect to another port of the same host is refused too, and the
            // message must say which port (issue 48 item 7).
            let to = format!(
                "{}://{}:{}",
                next.scheme(),
                next.host_str().unwrap_or_default(),
                next.port_or_known_default().unwrap_or_default()
            );
            attempt.error(format!(
                "a redirect to {to} was refused: downloads follow redirects only on the same host and port"
            ))
        } else {
            attempt.follow()
        }
    })
}

/// A reqwest error with its causes (`error following redirect: a redirect to … was refused`),
/// without the URL it was given (callers name the URL, with its password redacted).
pub fn describe_http_error(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    crate::api::redact::redact_url_passwords(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_on_a_boundary_after_normalisation() {
        let list =
            UrlAllowList::parse("https://github.com/org, ssh://git@gitlab.example/").unwrap();
        for ok in [
            "https://github.com/org/charts.git",
            "https://github.com/org",
            "https://GitHub.com/org/x",
            "https://user:secret@github.com/org/x",
            "git@gitlab.example:team/charts.git",
            "ssh://git@gitlab.example/team/charts.git",
        ] {
            assert!(list.allows(ok), "{ok}");
        }
        for refused in [
            "https://github.com/org-evil/x",
            "https://github.com/org/../evil/x",
            "https://github.com/org%2F..%2F/x",
            "http://github.com/org/x",
            "https://github.com.evil.example/org/x",
            "https://github.com@evil.example/org/x",
            "file:///etc/passwd",
            "/etc/passwd",
            "../charts",
            "",
        ] {
            assert!(!list.allows(refused), "{refused}");
        }
    }

    #[test]
    fn a_prefix_needs_a_scheme() {
        let err = UrlAllowList::parse("https://ok/, github.com/org").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`github.com/org` is not a URL prefix (write it with its scheme, e.g. `https://github.com/org/`)"
        );
        assert!(UrlAllowList::parse(" , ").unwrap().prefixes().is_empty());
    }

    #[test]
    fn the_daemon_never_reads_paths_or_file_urls() {
        let policy = ChartSourcePolicy::Remote(
            UrlAllowList::new(["https://", "ssh://", "file://"]).unwrap(),
        );
        for local in ["/", "/etc", "file:///etc", "../charts", "charts"] {
            let err = policy.check(local).unwrap_err().to_string();
            assert!(err.contains("is a path or file:// URL"), "{local}: {err}");
        }
        let strict = ChartSourcePolicy::Remote(UrlAllowList::parse(DEFAULT_CHART_SOURCES).unwrap());
        assert!(strict.check("https://charts.example/web-1.0.tgz").is_ok());
        assert!(strict.check("git@github.com:org/charts.git").is_ok());
        let err = strict
            .check("http://user:pw@10.0.0.1:8080/x")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "`http://user:***@10.0.0.1:8080/x` is not allowed by --allowed-chart-sources (https://, ssh://)"
        );
        assert!(ChartSourcePolicy::Any.check("/etc").is_ok());
    }

    #[test]
    fn channels_default_to_the_weave_cloud_host_not_to_a_field_of_the_weavecloud() {
        let default = ChannelPolicy::default();
        assert!(default
            .check("https://cloud.weave.works/k8s/agents/channel.yaml")
            .is_ok());
        for refused in [
            "https://evil.example/channel.yaml",
            "http://cloud.weave.works/channel.yaml",
            "file:///var/run/secrets/kubernetes.io/serviceaccount/token",
            "file:///etc/hostname",
            "git+https://cloud.weave.works/x.git",
            "https://cloud.weave.works.evil.example/c.yaml",
        ] {
            let err = default.check(refused).unwrap_err().to_string();
            assert!(
                err.contains(
                    "is not an allowed agent channel (by default only https://cloud.weave.works/)"
                ),
                "{err}"
            );
            assert!(!default.allows(refused), "{refused}");
        }
        let listed = ChannelPolicy {
            allowed: Some(UrlAllowList::parse("http://127.0.0.1:8080/").unwrap()),
        };
        assert!(listed.check("http://127.0.0.1:8080/channel.yaml").is_ok());
        // The same port only: a bundle URL elsewhere on the host is refused.
        assert!(!listed.allows("http://127.0.0.1:8081/bundle.tar.gz"));
        assert!(listed
            .check("https://cloud.weave.works/channel.yaml")
            .is_err());
    }

    #[test]
    fn git_plus_channel_urls_keep_their_marker() {
        let list = UrlAllowList::parse("git+https://github.com/weaveworks/").unwrap();
        assert!(list.allows("git+https://github.com/weaveworks/channel.git#channel.yaml"));
        assert!(!list.allows("https://github.com/weaveworks/channel.yaml"));
    }
}
