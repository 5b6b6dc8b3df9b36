//! age identities — from a key file (`--age-key-file`, `SOPS_AGE_KEY_FILE`) or a Secret's
//! `*.agekey` keys, as Flux's kustomize-controller reads them — and unwrapping a file's data key.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::str::FromStr;

use zeroize::Zeroizing;

use super::metadata::{AgeKey, KeyGroup};
use super::SopsError;

/// Keys of a decryption Secret whose values hold age identities (Flux's `DecryptionAgeExt`).
pub const AGE_KEY_SUFFIX: &str = ".agekey";

/// An age X25519 identity (`AGE-SECRET-KEY-1…`). `Debug` shows only its public recipient.
#[derive(Clone)]
pub struct Identity {
    secret: age::x25519::Identity,
    recipient: String,
}

impl Identity {
    /// The public key (`age1…`) files are encrypted to for this identity.
    pub fn recipient(&self) -> &str {
        &self.recipient
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("recipient", &self.recipient)
            .field("secret", &format_args!("AGE-SECRET-KEY-1<redacted>"))
            .finish()
    }
}

impl FromStr for Identity {
    type Err = SopsError;

    /// Parse one identity; the error never quotes the text.
    fn from_str(s: &str) -> Result<Identity, SopsError> {
        parse_identity(s.trim()).map_err(|message| SopsError::Identity {
            source_name: "age identity".to_string(),
            message: message.to_string(),
        })
    }
}

fn parse_identity(s: &str) -> Result<Identity, &'static str> {
    if s.starts_with("AGE-SECRET-KEY-PQ-1") {
        return Err("post-quantum age identities (AGE-SECRET-KEY-PQ-1…) are not supported; use an X25519 identity (age-keygen without -pq)");
    }
    if s.starts_with("AGE-PLUGIN-") {
        return Err("age plugin identities are not supported");
    }
    if !s.starts_with("AGE-SECRET-KEY-1") {
        return Err("not an age identity (expected a line starting with AGE-SECRET-KEY-1)");
    }
    let secret = age::x25519::Identity::from_str(s)
        .map_err(|_| "not a valid age identity (bad AGE-SECRET-KEY-1 encoding)")?;
    let recipient = secret.to_public().to_string();
    Ok(Identity { secret, recipient })
}

/// Identities from the text of a key file: one per line, blank lines and `#` comments skipped
/// (age-keygen's output as it is; sops `parseIdentities`). `source` names the text in errors.
pub fn identities_from_key_text(text: &str, source: &str) -> Result<Vec<Identity>, SopsError> {
    let mut identities = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        identities.push(parse_identity(line).map_err(|message| SopsError::Identity {
            source_name: format!("{source}, line {}", i + 1),
            message: message.to_string(),
        })?);
    }
    Ok(identities)
}

/// Identities from a key file on disk (`--age-key-file`, `SOPS_AGE_KEY_FILE`).
pub fn identities_from_key_file(path: &Path) -> Result<Vec<Identity>, SopsError> {
    let source = path.display().to_string();
    let io_err = |e: std::io::Error| SopsError::Identity {
        source_name: source.clone(),
        message: format!("cannot read the age key file: {e}"),
    };
    let mut text = Zeroizing::new(String::new());
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(io_err)?;
    identities_from_key_text(&text, &source)
}

/// Identities from the data of a decryption Secret: every key ending in `.agekey` holds one or
/// more identities (in key order), as Flux's kustomize-controller reads them. Other keys are
/// ignored; no `.agekey` key gives an empty list.
pub fn identities_from_secret_data(
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<Identity>, SopsError> {
    let mut identities = Vec::new();
    for (key, value) in data.iter().filter(|(k, _)| k.ends_with(AGE_KEY_SUFFIX)) {
        let source = format!("Secret key `{key}`");
        let text = std::str::from_utf8(value).map_err(|_| SopsError::Identity {
            source_name: source.clone(),
            message: "not UTF-8 text".to_string(),
        })?;
        identities.extend(identities_from_key_text(text, &source)?);
    }
    Ok(identities)
}

/// The data key of a file, and which recipient's identity unwrapped it.
pub(crate) struct Unwrapped {
    pub data_key: Zeroizing<Vec<u8>>,
    pub recipient: String,
}

pub(crate) enum UnwrapError {
    /// Only key types Weft cannot use.
    Unsupported(Vec<String>),
    /// Several key groups: the data key is split with Shamir's secret sharing.
    Shamir(usize),
    NoMatch,
    /// An identity matched a recipient but its wrapped key is broken.
    Corrupt {
        recipient: String,
        reason: String,
    },
}

impl UnwrapError {
    pub(crate) fn into_error(
        self,
        file: &str,
        identities: usize,
        groups: &[KeyGroup],
    ) -> SopsError {
        let file = file.to_string();
        match self {
            UnwrapError::Unsupported(groups) => SopsError::UnsupportedKeyGroups { file, groups },
            UnwrapError::Shamir(n) => SopsError::Unsupported {
                file,
                what: format!("a data key split over {n} key groups (Shamir's secret sharing)"),
            },
            UnwrapError::NoMatch => {
                let group = groups.first().cloned().unwrap_or_default();
                SopsError::NoMatchingIdentity {
                    file,
                    identities,
                    recipients: group.age.into_iter().map(|k| k.recipient).collect(),
                    other_groups: group.other,
                }
            }
            UnwrapError::Corrupt { recipient, reason } => SopsError::DataKey {
                file,
                recipient,
                reason,
            },
        }
    }
}

/// Unwrap the data key with the identities. An identity whose recipient is named in the file is
/// tried on that entry first (one X25519 operation per file in the common case); then every
/// identity on every entry, as sops does, in case a `recipient` field is stale.
pub(crate) fn unwrap_data_key(
    groups: &[KeyGroup],
    identities: &[Identity],
) -> Result<Unwrapped, UnwrapError> {
    let group = match groups {
        [group] => group,
        _ => return Err(UnwrapError::Shamir(groups.len())),
    };
    if group.age.is_empty() {
        return Err(UnwrapError::Unsupported(group.other.clone()));
    }
    let mut corrupt = None;
    for key in &group.age {
        for identity in identities.iter().filter(|i| i.recipient == key.recipient) {
            match unwrap_one(key, std::slice::from_ref(identity)) {
                Ok(data_key) => {
                    return Ok(Unwrapped {
                        data_key,
                        recipient: key.recipient.clone(),
                    })
                }
                Err(Some(reason)) => corrupt = Some((key.recipient.clone(), reason)),
                Err(None) => {}
            }
        }
    }
    for key in &group.age {
        if let Ok(data_key) = unwrap_one(key, identities) {
            return Ok(Unwrapped {
                data_key,
                recipient: key.recipient.clone(),
            });
        }
    }
    match corrupt {
        Some((recipient, reason)) => Err(UnwrapError::Corrupt { recipient, reason }),
        None => Err(UnwrapError::NoMatch),
    }
}

/// The largest `enc` of one `age` entry read (sops writes about 400 bytes: one X25519 stanza).
pub(crate) const MAX_ENC_BYTES: usize = 16 * 1024;

/// Decrypt one armored age file; `Err(None)` when no identity matches, `Err(Some(reason))` when
/// the file is broken.
fn unwrap_one(key: &AgeKey, identities: &[Identity]) -> Result<Zeroizing<Vec<u8>>, Option<String>> {
    if identities.is_empty() {
        return Err(None);
    }
    // age reads a header again for each line it adds (quadratic in its stanzas): an entry is
    // bounded before age sees it. sops writes one stanza per entry, well under 1 KiB.
    if key.enc.len() > MAX_ENC_BYTES {
        return Err(Some(format!(
            "the wrapped data key is {} bytes, more than the {MAX_ENC_BYTES} bytes sops ever writes for one recipient",
            key.enc.len()
        )));
    }
    let armored = age::armor::ArmoredReader::new(key.enc.as_bytes());
    let decryptor = age::Decryptor::new_buffered(armored).map_err(|e| Some(e.to_string()))?;
    let mut reader = decryptor
        .decrypt(identities.iter().map(|i| &i.secret as &dyn age::Identity))
        .map_err(|e| match e {
            age::DecryptError::NoMatchingKeys => None,
            e => Some(e.to_string()),
        })?;
    let mut data_key = Zeroizing::new(Vec::with_capacity(32));
    reader
        .read_to_end(&mut data_key)
        .map_err(|e| Some(e.to_string()))?;
    if data_key.len() != 32 {
        return Err(Some(format!(
            "the data key has {} bytes, not 32",
            data_key.len()
        )));
    }
    Ok(data_key)
}
