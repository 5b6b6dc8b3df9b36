//! SSH host-key checking: OpenSSH known_hosts parsed ([`KnownHosts`]), a server's key checked
//! against it ([`HostKeyCheck`]), and where the known_hosts text comes from (the credentials',
//! else the user's `~/.ssh/known_hosts`).

use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::{Credentials, CredentialsError};

/// Parsed OpenSSH known_hosts: which host keys are trusted for which hosts.
#[derive(Clone, Debug, Default)]
pub struct KnownHosts {
    entries: Vec<KnownHost>,
}

#[derive(Clone, Debug)]
struct KnownHost {
    patterns: Vec<String>,
    revoked: bool,
    key_type: String,
    key: Vec<u8>,
}

/// The outcome of checking a server's host key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostKeyCheck {
    /// A known_hosts entry for this host has this key.
    Trusted,
    /// The key is marked `@revoked`.
    Revoked,
    /// The host has entries, but none with this key: possibly a man in the middle.
    Mismatch,
    /// No entry for this host at all.
    UnknownHost,
}

impl KnownHosts {
    /// Parse known_hosts text. Hashed host names (`|1|…`) and `@cert-authority` lines are not
    /// supported and are skipped; anything else malformed is an error with its line number.
    pub fn parse(text: &str) -> Result<Self, CredentialsError> {
        let mut entries = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |message: &str| CredentialsError::KnownHosts {
                line: i + 1,
                message: message.to_string(),
            };
            let mut fields = line.split_whitespace();
            let mut first = fields.next().unwrap_or_default();
            let mut revoked = false;
            if first.starts_with('@') {
                match first {
                    "@revoked" => revoked = true,
                    "@cert-authority" => continue,
                    _ => return Err(err("unknown marker (expected @revoked or @cert-authority)")),
                }
                first = fields.next().ok_or_else(|| err("missing host pattern"))?;
            }
            if first.starts_with('|') {
                // Hashed host names need HMAC-SHA1; write known_hosts without `ssh-keyscan -H`.
                continue;
            }
            let key_type = fields.next().ok_or_else(|| err("missing key type"))?;
            let key_b64 = fields.next().ok_or_else(|| err("missing key"))?;
            let key = base64_decode(key_b64).ok_or_else(|| err("key is not valid base64"))?;
            entries.push(KnownHost {
                patterns: first.split(',').map(|p| p.to_ascii_lowercase()).collect(),
                revoked,
                key_type: key_type.to_string(),
                key,
            });
        }
        Ok(KnownHosts { entries })
    }

    /// Number of usable entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no usable entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Check the key a server at `host:port` presented. `key` is the raw key blob (as in the
    /// known_hosts base64); when the transport only gives its SHA-256, pass that as `key_sha256`.
    pub fn check(
        &self,
        host: &str,
        port: u16,
        key: Option<&[u8]>,
        key_sha256: Option<&[u8]>,
    ) -> HostKeyCheck {
        let host = host.to_ascii_lowercase();
        let name = if port == 22 {
            host.clone()
        } else {
            format!("[{host}]:{port}")
        };
        let mut seen = false;
        for entry in &self.entries {
            if !host_matches(&entry.patterns, &name) {
                continue;
            }
            seen = true;
            let same = match (key, key_sha256) {
                (Some(k), _) => k == entry.key.as_slice(),
                (None, Some(h)) => Sha256::digest(&entry.key).as_slice() == h,
                (None, None) => false,
            };
            if same && entry.revoked {
                return HostKeyCheck::Revoked;
            }
        }
        for entry in &self.entries {
            if entry.revoked || !host_matches(&entry.patterns, &name) {
                continue;
            }
            let same = match (key, key_sha256) {
                (Some(k), _) => k == entry.key.as_slice(),
                (None, Some(h)) => Sha256::digest(&entry.key).as_slice() == h,
                (None, None) => false,
            };
            if same {
                return HostKeyCheck::Trusted;
            }
        }
        if seen {
            HostKeyCheck::Mismatch
        } else {
            HostKeyCheck::UnknownHost
        }
    }

    /// Key types listed for `host:port` (for error messages).
    pub fn key_types_for(&self, host: &str, port: u16) -> Vec<String> {
        let host = host.to_ascii_lowercase();
        let name = if port == 22 {
            host
        } else {
            format!("[{host}]:{port}")
        };
        self.entries
            .iter()
            .filter(|e| !e.revoked && host_matches(&e.patterns, &name))
            .map(|e| e.key_type.clone())
            .collect()
    }
}

/// OpenSSH pattern-list matching: `*` and `?` wildcards, `!` negation.
fn host_matches(patterns: &[String], name: &str) -> bool {
    let mut matched = false;
    for p in patterns {
        if let Some(neg) = p.strip_prefix('!') {
            if glob(neg.as_bytes(), name.as_bytes()) {
                return false;
            }
        } else if glob(p.as_bytes(), name.as_bytes()) {
            matched = true;
        }
    }
    matched
}

/// `*` (any run) and `?` (any one byte) wildcards, in O(pattern × text) at worst: on a mismatch
/// only the last `*` is retried one byte further (a recursive matcher is exponential on patterns
/// such as `*a*a*a*a*b` against a long host name, and a known_hosts file is input).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was (the pattern index after it) and the text index it has eaten to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((after, eaten)) => {
                    p = after;
                    t = eaten + 1;
                    star = Some((after, eaten + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Standard base64, padded or not (OpenSSH writes it padded; a hand-edited file may not be).
const KEY_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// A key's base64; `None` when malformed.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    base64::Engine::decode(&KEY_BASE64, s).ok()
}

/// Why there is no known_hosts text to check an SSH host key against.
#[derive(Debug, thiserror::Error)]
pub(super) enum KnownHostsError {
    #[error("{path}: {source}")]
    Unreadable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no known_hosts configured (set the `known_hosts` credential)")]
    NotConfigured,
}

/// The known_hosts text to check SSH host keys against: the credentials', else the user's
/// `~/.ssh/known_hosts`. Without either, SSH is refused rather than trusting any key.
pub(super) fn known_hosts_text(creds: &Credentials) -> Result<String, KnownHostsError> {
    if let Some(k) = &creds.known_hosts {
        return Ok(k.clone());
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match home.map(|h| h.join(".ssh/known_hosts")) {
        Some(p) if p.is_file() => {
            std::fs::read_to_string(&p).map_err(|source| KnownHostsError::Unreadable {
                path: p.display().to_string(),
                source,
            })
        }
        _ => Err(KnownHostsError::NotConfigured),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn known_hosts_matching() {
        let key =
            base64_decode("AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl")
                .unwrap();
        let kh = KnownHosts::parse(
            "# comment\n\
             [127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n\
             *.example.com,!bad.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n\
             |1|abc=|def= ssh-ed25519 AAAA\n",
        )
        .unwrap();
        assert_eq!(kh.len(), 2);
        assert_eq!(
            kh.check("127.0.0.1", 2222, Some(&key), None),
            HostKeyCheck::Trusted
        );
        assert_eq!(
            kh.check("127.0.0.1", 22, Some(&key), None),
            HostKeyCheck::UnknownHost
        );
        assert_eq!(
            kh.check("127.0.0.1", 2222, Some(b"other"), None),
            HostKeyCheck::Mismatch
        );
        assert_eq!(
            kh.check("git.example.com", 22, Some(&key), None),
            HostKeyCheck::Trusted
        );
        assert_eq!(
            kh.check("bad.example.com", 22, Some(&key), None),
            HostKeyCheck::UnknownHost
        );
        let sha = Sha256::digest(&key);
        assert_eq!(
            kh.check("127.0.0.1", 2222, None, Some(sha.as_slice())),
            HostKeyCheck::Trusted
        );
        let revoked = KnownHosts::parse(
            "@revoked [127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
        )
        .unwrap();
        assert_eq!(
            revoked.check("127.0.0.1", 2222, Some(&key), None),
            HostKeyCheck::Revoked
        );
    }

    #[test]
    fn malformed_known_hosts_names_the_line() {
        let err = KnownHosts::parse("\nhost ssh-ed25519 !!notbase64\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "known_hosts line 2: key is not valid base64"
        );
    }

    #[test]
    fn base64_round_trip() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8").unwrap(), b"hello");
        assert!(base64_decode("a$b").is_none());
    }
}
