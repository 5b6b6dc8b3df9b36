//! Authentication of the git source.
//!
//! Credentials for the git source: an SSH identity and known_hosts, a username/password, or a
//! bearer token. They come from files (a mounted Secret, or the CLI's environment) or from a
//! Kubernetes Secret (`--git-secret NAME`). Secret values never reach a `Debug` output, a log line
//! or an error message: they are wrapped in [`SecretValue`], and [`Credentials::scrub`] removes
//! them from any text that came back from libgit2 or a server. SSH host keys are checked
//! against known_hosts ([`known_hosts`]).

mod known_hosts;

use crate::api::redact::redact_url_passwords;
use known_hosts::known_hosts_text;
pub use known_hosts::{HostKeyCheck, KnownHosts};

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use git2::{CertificateCheckStatus, Cred, CredentialType, RemoteCallbacks};

use super::url::RemoteUrl;

/// The keys of a credentials Secret (and the file names in a credentials directory).
pub const KEY_IDENTITY: &str = "identity";
/// SSH host keys, in OpenSSH `known_hosts` format.
pub const KEY_KNOWN_HOSTS: &str = "known_hosts";
/// Username for HTTPS basic auth (and SSH, when the URL has none).
pub const KEY_USERNAME: &str = "username";
/// Password for HTTPS basic auth.
pub const KEY_PASSWORD: &str = "password";
/// Token sent as `Authorization: Bearer` over HTTPS.
pub const KEY_BEARER_TOKEN: &str = "bearerToken";
/// A `kubernetes.io/dockerconfigjson` Secret's key: credentials of `helm` and `oci` chart
/// sources by registry host (see `source::chart::registries_of`).
pub const KEY_DOCKER_CONFIG: &str = ".dockerconfigjson";
/// Environment variable naming a credentials directory for the CLI (see [`Credentials::from_env`]).
pub const CREDENTIALS_DIR_ENV: &str = "WEFT_GIT_CREDENTIALS_DIR";

/// Why credentials could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("{path}: cannot read git credential file: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("git credential `{key}` is not valid UTF-8 text")]
    NotText { key: String },
    #[error("git credentials: `password` is set but `username` is not; set both for basic auth")]
    PasswordWithoutUsername,
    #[error("Secret {namespace}/{name}: cannot read it: {message}")]
    Secret {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("Secret {namespace}/{name}: no git credentials in it (keys: identity, known_hosts, username, password, bearerToken, .dockerconfigjson)")]
    EmptySecret { namespace: String, name: String },
    #[error("known_hosts line {line}: {message}")]
    KnownHosts { line: usize, message: String },
}

/// A secret string. `Debug` and `Display` print `***`; use [`SecretValue::expose`] to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wrap a secret.
    pub fn new(value: impl Into<String>) -> Self {
        SecretValue(value.into())
    }
    /// The secret itself: only for handing it to libgit2, never for printing.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Paths of credential files, each optional (the CLI / a mounted Secret).
#[derive(Clone, Debug, Default)]
pub struct CredentialFiles {
    /// SSH private key (OpenSSH or PEM format).
    pub identity: Option<PathBuf>,
    /// OpenSSH known_hosts file.
    pub known_hosts: Option<PathBuf>,
    /// File holding the username.
    pub username: Option<PathBuf>,
    /// File holding the password.
    pub password: Option<PathBuf>,
    /// File holding a bearer token.
    pub bearer_token: Option<PathBuf>,
    /// `.dockerconfigjson`: chart repository and registry credentials by host.
    pub docker_config: Option<PathBuf>,
}

impl CredentialFiles {
    /// The files of a directory laid out like a mounted Secret: `identity`, `known_hosts`,
    /// `username`, `password`, `bearerToken`; missing files are simply absent.
    pub fn in_dir(dir: &Path) -> Self {
        let file = |key: &str| {
            let p = dir.join(key);
            p.is_file().then_some(p)
        };
        CredentialFiles {
            identity: file(KEY_IDENTITY),
            known_hosts: file(KEY_KNOWN_HOSTS),
            username: file(KEY_USERNAME),
            password: file(KEY_PASSWORD),
            bearer_token: file(KEY_BEARER_TOKEN),
            docker_config: file(KEY_DOCKER_CONFIG),
        }
    }
}

/// Git credentials. All fields optional: an empty value fetches public repositories.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    /// SSH private key.
    pub identity: Option<SecretValue>,
    /// SSH host keys the server must present (OpenSSH known_hosts text). Not secret.
    pub known_hosts: Option<String>,
    /// Username (HTTPS basic auth; SSH user when the URL has none).
    pub username: Option<String>,
    /// Password (HTTPS basic auth).
    pub password: Option<SecretValue>,
    /// Bearer token (HTTPS `Authorization: Bearer`).
    pub bearer_token: Option<SecretValue>,
    /// `.dockerconfigjson` text: credentials of chart repositories and OCI registries by host.
    pub docker_config: Option<SecretValue>,
}

impl Credentials {
    /// Read credentials from files. Trailing newlines of username, password and token are
    /// dropped (files written with `echo` have one).
    pub fn from_files(files: &CredentialFiles) -> Result<Self, CredentialsError> {
        let read = |path: &Option<PathBuf>| -> Result<Option<Vec<u8>>, CredentialsError> {
            match path {
                None => Ok(None),
                Some(p) => std::fs::read(p)
                    .map(Some)
                    .map_err(|source| CredentialsError::Io {
                        path: p.clone(),
                        source,
                    }),
            }
        };
        let mut data = BTreeMap::new();
        for (path, key) in [
            (&files.identity, KEY_IDENTITY),
            (&files.known_hosts, KEY_KNOWN_HOSTS),
            (&files.username, KEY_USERNAME),
            (&files.password, KEY_PASSWORD),
            (&files.bearer_token, KEY_BEARER_TOKEN),
            (&files.docker_config, KEY_DOCKER_CONFIG),
        ] {
            if let Some(bytes) = read(path)? {
                data.insert(key.to_string(), bytes);
            }
        }
        Self::from_secret_data(&data)
    }

    /// Credentials from a directory laid out like a mounted Secret (see [`CredentialFiles::in_dir`]).
    pub fn from_dir(dir: &Path) -> Result<Self, CredentialsError> {
        Self::from_files(&CredentialFiles::in_dir(dir))
    }

    /// Credentials from the `data` of a Kubernetes Secret (keys `identity`, `known_hosts`,
    /// `username`, `password`, `bearerToken`; other keys are ignored).
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Self, CredentialsError> {
        let text = |key: &str| -> Result<Option<String>, CredentialsError> {
            match data.get(key) {
                None => Ok(None),
                Some(bytes) => String::from_utf8(bytes.clone()).map(Some).map_err(|_| {
                    CredentialsError::NotText {
                        key: key.to_string(),
                    }
                }),
            }
        };
        let trimmed = |v: Option<String>| {
            v.map(|s| s.trim_end_matches(['\n', '\r']).to_string())
                .filter(|s| !s.is_empty())
        };
        let creds = Credentials {
            identity: text(KEY_IDENTITY)?
                .filter(|s| !s.trim().is_empty())
                .map(SecretValue),
            known_hosts: text(KEY_KNOWN_HOSTS)?.filter(|s| !s.trim().is_empty()),
            username: trimmed(text(KEY_USERNAME)?),
            password: trimmed(text(KEY_PASSWORD)?).map(SecretValue),
            bearer_token: trimmed(text(KEY_BEARER_TOKEN)?).map(SecretValue),
            docker_config: trimmed(text(KEY_DOCKER_CONFIG)?).map(SecretValue),
        };
        if creds.password.is_some() && creds.username.is_none() {
            return Err(CredentialsError::PasswordWithoutUsername);
        }
        if let Some(kh) = &creds.known_hosts {
            KnownHosts::parse(kh)?;
        }
        Ok(creds)
    }

    /// Credentials for the CLI: the directory named by `WEFT_GIT_CREDENTIALS_DIR` (laid out like
    /// a mounted Secret) when set; otherwise none, except that SSH falls back to the user's
    /// `~/.ssh/id_ed25519`, `id_ecdsa` or `id_rsa` (and `~/.ssh/known_hosts`, see the git source).
    pub fn from_env() -> Result<Self, CredentialsError> {
        let mut creds = match std::env::var_os(CREDENTIALS_DIR_ENV) {
            Some(dir) if !dir.is_empty() => Self::from_dir(Path::new(&dir))?,
            _ => Credentials::default(),
        };
        if creds.identity.is_none() {
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let keys = ["id_ed25519", "id_ecdsa", "id_rsa"];
            if let Some(key) = home.and_then(|h| {
                keys.iter()
                    .map(|k| h.join(".ssh").join(k))
                    .find(|p| p.is_file())
            }) {
                let text = std::fs::read_to_string(&key)
                    .map_err(|source| CredentialsError::Io { path: key, source })?;
                creds.identity = Some(SecretValue(text));
            }
        }
        Ok(creds)
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.identity.is_none()
            && self.known_hosts.is_none()
            && self.username.is_none()
            && self.password.is_none()
            && self.bearer_token.is_none()
            && self.docker_config.is_none()
    }

    /// Replace every secret value (and every secret given in `extra`) inside `text` with `***`.
    /// Used on every message that came from libgit2 or a server before it becomes an error.
    pub fn scrub(&self, text: &str, extra: &[&SecretValue]) -> String {
        let mut out = redact_url_passwords(text);
        let secrets = [&self.password, &self.bearer_token, &self.identity];
        for s in secrets.into_iter().flatten().chain(extra.iter().copied()) {
            if s.expose().len() >= 3 {
                out = out.replace(s.expose(), "***");
            }
        }
        out
    }
}

/// Read credentials from the Kubernetes Secret `namespace/name` (`--git-secret NAME`).
pub async fn from_kube_secret(
    client: kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Credentials, CredentialsError> {
    use k8s_openapi::api::core::v1::Secret;
    let api: kube::Api<Secret> = kube::Api::namespaced(client, namespace);
    let secret = api.get(name).await.map_err(|e| CredentialsError::Secret {
        namespace: namespace.to_string(),
        name: name.to_string(),
        // kube errors carry the API status message, never the Secret's data.
        message: crate::api::kube_error::text(&e),
    })?;
    let data = crate::api::secret_bytes(secret);
    let creds = Credentials::from_secret_data(&data)?;
    if creds.is_empty() {
        return Err(CredentialsError::EmptySecret {
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    }
    Ok(creds)
}

/// What happened during authentication of one connection, for the error message.
#[derive(Default)]
pub(super) struct AuthState {
    tried_ssh_key: bool,
    tried_password: bool,
    /// Why the server refused us (the callback's own words).
    pub(super) failure: Option<String>,
    /// (host, why) of an SSH host key that was not trusted.
    pub(super) host_key_failure: Option<(String, String)>,
}

/// libgit2's callbacks for one connection: credentials (SSH key, then username/password; a
/// refusal is recorded in `auth` so that the error says what was refused) and the SSH host-key
/// check against known_hosts (TLS certificates are left to libgit2).
pub(super) fn remote_callbacks<'a>(
    creds: &'a Credentials,
    remote: &'a RemoteUrl,
    auth: &'a RefCell<AuthState>,
) -> RemoteCallbacks<'a> {
    let mut cb = RemoteCallbacks::new();
    // With a progress callback libgit2 also counts received bytes (see TransferStats).
    cb.transfer_progress(|_| true);
    cb.credentials(move |_url, username_from_url, allowed| {
        let mut state = auth.borrow_mut();
        let user = username_from_url
            .map(str::to_string)
            .or_else(|| remote.username.clone())
            .or_else(|| creds.username.clone());
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(user.as_deref().unwrap_or("git"));
        }
        if allowed.contains(CredentialType::SSH_KEY) && !state.tried_ssh_key {
            state.tried_ssh_key = true;
            if let Some(key) = &creds.identity {
                return Cred::ssh_key_from_memory(
                    user.as_deref().unwrap_or("git"),
                    None,
                    key.expose(),
                    None,
                );
            }
        }
        let password = remote.password.as_ref().or(creds.password.as_ref());
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) && !state.tried_password {
            state.tried_password = true;
            if let (Some(u), Some(p)) = (user.as_deref(), password) {
                return Cred::userpass_plaintext(u, p.expose());
            }
        }
        // Nothing (more) to offer: the server refused what we sent, or we have nothing.
        let message = if state.tried_ssh_key && creds.identity.is_some() {
            "the server refused the SSH key (identity)".to_string()
        } else if state.tried_password && password.is_some() {
            "the server refused the username/password".to_string()
        } else if allowed.contains(CredentialType::SSH_KEY) {
            "the server wants an SSH key and no identity is configured".to_string()
        } else if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            if creds.bearer_token.is_some() {
                "the server refused the bearer token".to_string()
            } else {
                "the server wants a username and password and none are configured".to_string()
            }
        } else {
            "no supported authentication method".to_string()
        };
        state.failure = Some(message.clone());
        Err(git2::Error::from_str(&message))
    });
    cb.certificate_check(move |cert, host| {
        let Some(hostkey) = cert.as_hostkey() else {
            // TLS: libgit2's own verification against the system trust store.
            return Ok(CertificateCheckStatus::CertificatePassthrough);
        };
        let port = remote.port.unwrap_or(22);
        let fail = |message: String| {
            auth.borrow_mut().host_key_failure = Some((host.to_string(), message.clone()));
            Err(git2::Error::from_str(&format!("SSH host key of {host} not trusted: {message}")))
        };
        let known = match known_hosts_text(creds) {
            Ok(text) => text,
            Err(e) => return fail(e.to_string()),
        };
        let known = match KnownHosts::parse(&known) {
            Ok(k) => k,
            Err(e) => return fail(e.to_string()),
        };
        let key_type = hostkey.hostkey_type().map(|t| t.name()).unwrap_or("unknown");
        match known.check(host, port, hostkey.hostkey(), hostkey.hash_sha256().map(|h| h.as_slice())) {
            HostKeyCheck::Trusted => Ok(CertificateCheckStatus::CertificateOk),
            HostKeyCheck::Revoked => fail(format!("its {key_type} key is marked @revoked in known_hosts")),
            HostKeyCheck::Mismatch => fail(format!(
                "it presented a {key_type} key that does not match known_hosts (known key types: {}); possible man in the middle",
                known.key_types_for(host, port).join(", ")
            )),
            HostKeyCheck::UnknownHost => fail(format!(
                "no known_hosts entry for {}",
                if port == 22 { host.to_string() } else { format!("[{host}]:{port}") }
            )),
        }
    });
    cb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_secrets() {
        let mut data = BTreeMap::new();
        data.insert("username".to_string(), b"alice\n".to_vec());
        data.insert("password".to_string(), b"hunter2-very-secret\n".to_vec());
        data.insert("bearerToken".to_string(), b"tok-abcdef".to_vec());
        data.insert(
            "identity".to_string(),
            b"-----BEGIN OPENSSH PRIVATE KEY-----\nxyz\n".to_vec(),
        );
        let creds = Credentials::from_secret_data(&data).unwrap();
        assert_eq!(creds.username.as_deref(), Some("alice"));
        assert_eq!(
            creds.password.as_ref().unwrap().expose(),
            "hunter2-very-secret"
        );
        let shown = format!("{creds:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("tok-abcdef"), "{shown}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("alice"), "{shown}");
    }

    #[test]
    fn password_without_username_is_refused() {
        let mut data = BTreeMap::new();
        data.insert("password".to_string(), b"pw".to_vec());
        let err = Credentials::from_secret_data(&data).unwrap_err();
        assert!(err.to_string().contains("`username` is not"), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
    }

    #[test]
    fn files_in_a_directory_like_a_mounted_secret() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("username"), "bob\n").unwrap();
        std::fs::write(dir.path().join("password"), "s3cret\n").unwrap();
        let creds = Credentials::from_dir(dir.path()).unwrap();
        assert_eq!(creds.username.as_deref(), Some("bob"));
        assert_eq!(creds.password.unwrap().expose(), "s3cret");
        assert!(creds.identity.is_none());
    }

    #[test]
    fn url_passwords_are_redacted() {
        assert_eq!(
            redact_url_passwords("failed: https://bob:s3cret@example.com/r.git: 401"),
            "failed: https://bob:***@example.com/r.git: 401"
        );
        assert_eq!(redact_url_passwords("ssh://git@h:22/x"), "ssh://git@h:22/x");
        assert_eq!(
            redact_url_passwords("https://h/x and http://u:p@q"),
            "https://h/x and http://u:***@q"
        );
        // A password with `@` in it: userinfo ends at the last `@` of the authority.
        assert_eq!(
            redact_url_passwords("https://u:a@b@h/x"),
            "https://u:***@h/x"
        );
    }

    #[test]
    fn scrub_removes_every_secret_value() {
        let creds = Credentials {
            password: Some(SecretValue::new("hunter2")),
            bearer_token: Some(SecretValue::new("tok123")),
            ..Default::default()
        };
        assert_eq!(
            creds.scrub("bad hunter2 and tok123", &[]),
            "bad *** and ***"
        );
    }
}
