//! The webhook secrets, one per provider (`--webhook-secret-file`).
//!
//! GitLab sends its token in plaintext (`X-Gitlab-Token`): whoever sees one delivery (a proxy log,
//! GitLab's webhook page) has it. GitHub and the generic hook send only an HMAC of the body. So
//! the GitLab token must never be the HMAC key of the others, or a leaked GitLab token would forge
//! GitHub deliveries. `--webhook-secret-file` is therefore either
//! - a directory with files `github`, `gitlab`, `generic` (each optional: a missing one closes that
//!   hook) — the keys of the Secret `weft-webhooks` mounted there; or
//! - one file: its secret is the HMAC key of GitHub and the generic hook, and the GitLab hook is
//!   closed (403, saying why).

use std::path::Path;
use std::sync::Arc;

use super::signature::secret_from_file_contents;

/// The three webhook providers.
pub const HOOKS: [&str; 3] = ["github", "gitlab", "generic"];

/// Why the webhook secrets could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("reading --webhook-secret-file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("--webhook-secret-file {path} is empty")]
    Empty { path: String },
    #[error("--webhook-secret-file {dir}: the `gitlab` secret equals the `{other}` secret; GitLab's token travels in plaintext, so it must differ from the HMAC keys (generate another with `openssl rand -hex 32`)")]
    SharedGitlabToken { dir: String, other: &'static str },
}

/// One hook's key, or why the hook is closed.
#[derive(Clone, PartialEq, Eq)]
pub enum HookKey {
    Configured(Arc<Vec<u8>>),
    Closed(String),
}

// Never print a secret, not even in a Debug dump of the server state.
impl std::fmt::Debug for HookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HookKey::Configured(_) => f.write_str("Configured(***)"),
            HookKey::Closed(why) => f.debug_tuple("Closed").field(why).finish(),
        }
    }
}

impl HookKey {
    /// The key, or the reason the hook is closed (the 403's text).
    pub fn key(&self) -> Result<&[u8], &str> {
        match self {
            HookKey::Configured(k) => Ok(k),
            HookKey::Closed(why) => Err(why),
        }
    }

    fn closed(why: impl Into<String>) -> HookKey {
        HookKey::Closed(why.into())
    }
}

/// The keys of the three hooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSecrets {
    pub github: HookKey,
    pub gitlab: HookKey,
    pub generic: HookKey,
}

impl WebhookSecrets {
    /// Every hook closed: no `--webhook-secret-file`.
    pub fn none() -> WebhookSecrets {
        let why = "no webhook secret is configured (--webhook-secret-file), so this hook is closed";
        WebhookSecrets {
            github: HookKey::closed(why),
            gitlab: HookKey::closed(why),
            generic: HookKey::closed(why),
        }
    }

    /// One secret for the HMAC hooks (GitHub, generic); GitLab closed.
    pub fn single(secret: Vec<u8>) -> WebhookSecrets {
        let key = HookKey::Configured(Arc::new(secret));
        WebhookSecrets {
            github: key.clone(),
            generic: key,
            gitlab: HookKey::closed(
                "--webhook-secret-file is a single file, which serves the GitHub and generic HMACs only: GitLab's token travels in plaintext, so it needs its own secret (make --webhook-secret-file a directory with a `gitlab` file, e.g. the key `gitlab` of the Secret weft-webhooks)",
            ),
        }
    }

    /// Each hook with its own secret (`None`: closed, the directory has no such file).
    pub fn per_hook(
        github: Option<Vec<u8>>,
        gitlab: Option<Vec<u8>>,
        generic: Option<Vec<u8>>,
    ) -> WebhookSecrets {
        let key = |name: &str, s: Option<Vec<u8>>| {
            match s {
            Some(s) => HookKey::Configured(Arc::new(s)),
            None => HookKey::closed(format!(
                "the webhook secret directory (--webhook-secret-file) has no `{name}` file, so this hook is closed"
            )),
        }
        };
        WebhookSecrets {
            github: key("github", github),
            gitlab: key("gitlab", gitlab),
            generic: key("generic", generic),
        }
    }

    /// Load `--webhook-secret-file`: a directory of per-hook files or one file (see the module
    /// documentation). A path that does not exist closes every hook (the install manifests mount
    /// an optional Secret), with a warning.
    pub fn load(path: &Path) -> Result<WebhookSecrets, SecretsError> {
        let shown = path.display().to_string();
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(path = %shown, "--webhook-secret-file does not exist; every webhook refuses requests (403)");
                return Ok(WebhookSecrets::none());
            }
            Err(source) => {
                return Err(SecretsError::Read {
                    path: shown,
                    source,
                })
            }
        };
        if !meta.is_dir() {
            return Ok(WebhookSecrets::single(read_one(path)?.ok_or_else(
                || SecretsError::Read {
                    path: shown.clone(),
                    source: std::io::ErrorKind::NotFound.into(),
                },
            )?));
        }
        let github = read_one(&path.join("github"))?;
        let gitlab = read_one(&path.join("gitlab"))?;
        let generic = read_one(&path.join("generic"))?;
        if let Some(token) = &gitlab {
            for (other, key) in [("github", &github), ("generic", &generic)] {
                if key.as_ref() == Some(token) {
                    return Err(SecretsError::SharedGitlabToken { dir: shown, other });
                }
            }
        }
        Ok(WebhookSecrets::per_hook(github, gitlab, generic))
    }

    /// The hooks these secrets open (for the log line written when they are loaded or change:
    /// the files are read again every few seconds, and an unchanged set says nothing).
    pub fn open_hooks(&self) -> Vec<&'static str> {
        HOOKS
            .iter()
            .zip([&self.github, &self.gitlab, &self.generic])
            .filter(|(_, k)| k.key().is_ok())
            .map(|(n, _)| *n)
            .collect()
    }
}

/// A secret file's secret; `None` when it does not exist. Empty is an error: an empty HMAC key
/// or token would be guessable.
fn read_one(path: &Path) -> Result<Option<Vec<u8>>, SecretsError> {
    let shown = || path.display().to_string();
    match std::fs::read(path) {
        Ok(bytes) => {
            let secret = secret_from_file_contents(&bytes);
            if secret.is_empty() {
                return Err(SecretsError::Empty { path: shown() });
            }
            Ok(Some(secret))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SecretsError::Read {
            path: shown(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, value: &str) {
        std::fs::write(dir.join(name), value).unwrap();
    }

    #[test]
    fn a_single_file_keys_the_hmac_hooks_and_closes_gitlab() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "secret", "s3cret\n");
        let s = WebhookSecrets::load(&dir.path().join("secret")).unwrap();
        assert_eq!(s.github.key().unwrap(), b"s3cret");
        assert_eq!(s.generic.key().unwrap(), b"s3cret");
        let why = s.gitlab.key().unwrap_err();
        assert!(
            why.contains("plaintext") && why.contains("`gitlab`"),
            "{why}"
        );
    }

    #[test]
    fn a_directory_gives_each_hook_its_own_key_and_closes_the_missing_ones() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "github", "gh\n");
        write(dir.path(), "gitlab", "gl");
        // What a Secret volume also holds: ignored.
        write(dir.path(), "..data", "x");
        let s = WebhookSecrets::load(dir.path()).unwrap();
        assert_eq!(s.github.key().unwrap(), b"gh");
        assert_eq!(s.gitlab.key().unwrap(), b"gl");
        let why = s.generic.key().unwrap_err();
        assert!(why.contains("no `generic` file"), "{why}");
    }

    #[test]
    fn a_gitlab_token_equal_to_an_hmac_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "generic", "same\n");
        write(dir.path(), "gitlab", "same");
        let err = WebhookSecrets::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("`gitlab` secret equals the `generic` secret"),
            "{err}"
        );
        assert!(!err.contains("same"), "the secret is not shown: {err}");
    }

    #[test]
    fn an_empty_file_is_an_error_and_a_missing_path_closes_everything() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "github", " \n");
        let err = WebhookSecrets::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("github") && err.contains("is empty"), "{err}");
        let s = WebhookSecrets::load(&dir.path().join("nothing-here")).unwrap();
        for k in [&s.github, &s.gitlab, &s.generic] {
            assert!(k.key().unwrap_err().contains("no webhook secret"));
        }
    }

    #[test]
    fn debug_output_never_shows_a_key() {
        let s = WebhookSecrets::single(b"topsecret".to_vec());
        let shown = format!("{s:?}");
        assert!(!shown.contains("topsecret"), "{shown}");
        assert!(shown.contains("Configured(***)"), "{shown}");
    }
}
