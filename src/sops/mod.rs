//! SOPS: decrypt YAML and JSON files that the `sops` tool encrypted for age recipients, in Rust,
//! byte-compatible with sops v3 (read against getsops/sops `sops.go`, `aes/cipher.go`,
//! `stores/`, `age/keysource.go`).
//!
//! The format, in short: keys stay in clear; each value is `ENC[AES256_GCM,data:…,iv:…,tag:…,
//! type:…]`, sealed with the file's 32-byte data key and, as additional data, the path of
//! mapping keys leading to it joined with `:` plus a trailing `:` (list indices are not part of
//! the path). The data key is wrapped for every recipient (an armored age file per recipient).
//! The MAC is SHA-512 over the cleartext of every value in document order (only the encrypted
//! ones with `mac_only_encrypted`), upper-case hex, sealed like a value with `lastmodified` as
//! additional data. Which values are encrypted follows the one rule in the metadata
//! (`unencrypted_suffix`, default `_unencrypted`; `encrypted_suffix`; `encrypted_regex`;
//! `unencrypted_regex`).
//!
//! Cleartext never leaves this module except in the returned [`DecryptedFile`], whose `Debug`
//! is redacted; errors name files, paths of keys and public recipients only.

mod cipher;
mod keys;
mod metadata;
mod scalar;
mod secret;
mod tree;

#[cfg(test)]
mod tests;

use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha512};
use subtle::ConstantTimeEq;

pub use keys::{identities_from_key_file, identities_from_key_text, identities_from_secret_data};
pub use keys::{Identity, AGE_KEY_SUFFIX};
pub use secret::{Decryption, DecryptionSecret};

/// The syntax of a SOPS file, as sops's `--input-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// The format sops would pick for this file name: `.json` is JSON, anything else YAML
    /// (Weft only reads `.yaml`, `.yml` and `.json` manifests).
    pub fn from_file_name(name: &str) -> Format {
        if name.to_ascii_lowercase().ends_with(".json") {
            Format::Json
        } else {
            Format::Yaml
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Yaml => "YAML",
            Format::Json => "JSON",
        })
    }
}

/// Why a SOPS file could not be decrypted. Every variant names the file (or the key source) and
/// what to fix; none carries cleartext or a secret key.
#[derive(Debug, thiserror::Error)]
pub enum SopsError {
    #[error("{file}: not valid {format}: {}", cut(message, 2 * MAX_ITEM_CHARS))]
    Parse {
        file: String,
        format: Format,
        message: String,
    },
    #[error("{file}: no `sops` metadata: the file is not encrypted by sops")]
    NotEncrypted { file: String },
    #[error("{file}: invalid `sops` metadata: {}", cut(message, 2 * MAX_ITEM_CHARS))]
    Metadata { file: String, message: String },
    #[error(
        "{file}: encrypted only for {} keys, which are not supported: Weft decrypts with age \
         identities only; add an age recipient to the file (`sops updatekeys` or \
         `sops rotate --add-age`)",
        groups.join(", ")
    )]
    UnsupportedKeyGroups { file: String, groups: Vec<String> },
    #[error("{file}: {what} is not supported")]
    Unsupported { file: String, what: String },
    #[error("{}", no_matching_identity(file, *identities, recipients, other_groups))]
    NoMatchingIdentity {
        file: String,
        /// How many identities were tried.
        identities: usize,
        /// The age recipients (public keys) the file is encrypted for.
        recipients: Vec<String>,
        /// Other key groups in the file (`pgp`, `kms`, …), which Weft cannot use.
        other_groups: Vec<String>,
    },
    #[error("{file}: the data key wrapped for {} cannot be unwrapped: {}", cut(recipient, MAX_ITEM_CHARS), cut(reason, 2 * MAX_ITEM_CHARS))]
    DataKey {
        file: String,
        recipient: String,
        reason: String,
    },
    #[error(
        "{file}: the value at `{}` failed authentication: it was changed after encryption \
         (or moved from another path or file)", cut(path, 2 * MAX_ITEM_CHARS)
    )]
    ValueAuthentication { file: String, path: String },
    #[error("{file}: the value at `{}` is not a valid sops value: {}", cut(path, 2 * MAX_ITEM_CHARS), cut(reason, 2 * MAX_ITEM_CHARS))]
    MalformedValue {
        file: String,
        path: String,
        reason: String,
    },
    #[error(
        "{file}: MAC mismatch: the file was changed after encryption (a value edited, added, \
         removed or reordered, or the MAC itself); re-encrypt it with sops"
    )]
    MacMismatch { file: String },
    #[error("{file}: the value at `{}` is NaN or infinite, which JSON cannot hold", cut(path, 2 * MAX_ITEM_CHARS))]
    NotRepresentable { file: String, path: String },
    #[error("{source_name}: {message}")]
    Identity {
        /// Where the identity came from: a key file, a Secret's key, with the line.
        source_name: String,
        message: String,
    },
}

fn no_matching_identity(
    file: &str,
    identities: usize,
    recipients: &[String],
    other_groups: &[String],
) -> String {
    let tried = match identities {
        0 => "no age identity was given".to_string(),
        1 => "the age identity given does not match".to_string(),
        n => format!("none of the {n} age identities given matches"),
    };
    let mut s = format!(
        "{file}: cannot decrypt: {tried}; the file is encrypted for the age recipients {}",
        quoted_list(recipients)
    );
    if !other_groups.is_empty() {
        s.push_str(&format!(
            " (and for {} keys, which are not supported)",
            quoted_list(other_groups)
        ));
    }
    s
}

/// The most items of a list a message names; the file may hold thousands.
const MAX_LISTED: usize = 10;
/// The most characters of one item a message quotes.
const MAX_ITEM_CHARS: usize = 100;

/// `items` joined with `, `, each cut to [`MAX_ITEM_CHARS`], at most [`MAX_LISTED`] of them
/// (distinct ones, in order) and a count of the rest: messages quote file data only up to a
/// bound.
pub(crate) fn quoted_list(items: &[String]) -> String {
    let mut shown: Vec<&str> = Vec::new();
    for item in items {
        if shown.len() == MAX_LISTED {
            break;
        }
        if !shown.contains(&item.as_str()) {
            shown.push(item);
        }
    }
    let mut out = shown
        .iter()
        .map(|i| cut(i, MAX_ITEM_CHARS))
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > shown.len() {
        out.push_str(&format!(
            " (and {} more entries)",
            items.len() - shown.len()
        ));
    }
    out
}

/// `text` cut to `max` characters, marked when cut.
pub(crate) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The cleartext of a SOPS file. `Debug` does not print the documents.
#[derive(Clone, PartialEq)]
pub struct DecryptedFile {
    /// One JSON value per document (YAML files may hold several), without the `sops` key.
    pub documents: Vec<Value>,
    /// The age recipient whose identity unwrapped the data key.
    pub recipient: String,
}

impl fmt::Debug for DecryptedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecryptedFile")
            .field(
                "documents",
                &format_args!("<{} redacted>", self.documents.len()),
            )
            .field("recipient", &self.recipient)
            .finish()
    }
}

/// What every file sops encrypted contains (at least its MAC is such a value): a cheap test that
/// tells which files may need [`decrypt`] before any parsing.
pub const ENCRYPTED_VALUE_MARKER: &[u8] = b"ENC[AES256_GCM,";

/// Whether `bytes` may be a SOPS file: it holds an encrypted value ([`ENCRYPTED_VALUE_MARKER`]).
/// A file without one is certainly not; one with it is when [`has_sops_metadata`] says so.
pub fn may_be_encrypted(bytes: &[u8]) -> bool {
    bytes
        .windows(ENCRYPTED_VALUE_MARKER.len())
        .any(|w| w == ENCRYPTED_VALUE_MARKER)
}

/// What sops writes into the `sops` mapping of a file it encrypted; one of them is enough to
/// call a document a SOPS file.
const METADATA_FIELDS: &[&str] = &[
    "mac",
    "lastmodified",
    "version",
    "age",
    "pgp",
    "kms",
    "gcp_kms",
    "azure_kv",
    "hc_vault",
    "key_groups",
];

/// Whether a parsed document carries SOPS metadata: a top-level `sops` mapping with one of the
/// fields sops writes there (its `mac`, `lastmodified`, `version`, a key group). A document that
/// does must be decrypted and verified, or refused: a `sops` mapping without a `mac` is not
/// applied as a plain manifest.
pub fn has_sops_metadata(document: &Value) -> bool {
    document
        .get(metadata::SOPS_KEY)
        .and_then(Value::as_object)
        .is_some_and(|m| METADATA_FIELDS.iter().any(|f| m.contains_key(*f)))
}

/// Decrypt the SOPS file `file` (a name for errors) with the first of `identities` that matches
/// one of its age recipients, verify every value and the MAC, and return its documents without
/// the `sops` key. Pure: no I/O, no logging.
pub fn decrypt(
    file: &str,
    bytes: &[u8],
    format: Format,
    identities: &[Identity],
) -> Result<DecryptedFile, SopsError> {
    let parse_err = |message: String| SopsError::Parse {
        file: file.to_string(),
        format,
        message,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| parse_err(format!("not UTF-8: {e}")))?;
    let mut branches = match format {
        Format::Yaml => tree::parse_yaml(text),
        Format::Json => tree::parse_json(text),
    }
    .map_err(|e| parse_err(e.to_string()))?;

    // As sops's ExtractMetadata: the metadata of the first document counts; every document
    // carries a copy, removed from all.
    let mut found = None;
    for (i, branch) in branches.iter_mut().enumerate() {
        if let Some(at) = branch.iter().position(|(k, _)| k == metadata::SOPS_KEY) {
            let (_, node) = branch.remove(at);
            if i == 0 {
                found = Some(node);
            }
        }
    }
    let Some(meta) = found else {
        return Err(SopsError::NotEncrypted {
            file: file.to_string(),
        });
    };
    let meta = metadata::Metadata::from_node(&meta).map_err(|e| e.into_error(file))?;

    let unwrapped = keys::unwrap_data_key(&meta.key_groups, identities)
        .map_err(|e| e.into_error(file, identities.len(), &meta.key_groups))?;
    let cipher =
        cipher::DataKeyCipher::new(&unwrapped.data_key).map_err(|reason| SopsError::DataKey {
            file: file.to_string(),
            recipient: unwrapped.recipient.clone(),
            reason: reason.to_string(),
        })?;

    let mut mac = Sha512::new();
    if meta.mac_only_encrypted {
        mac.update(metadata::MAC_ONLY_ENCRYPTED_INITIALIZATION);
    }
    for branch in &mut branches {
        cipher::decrypt_branch(
            branch,
            &cipher,
            &meta.rule,
            meta.mac_only_encrypted,
            &mut mac,
        )
        .map_err(|e| e.into_error(file))?;
    }
    let computed = hex::encode_upper(mac.finalize());
    let stored = cipher
        .decrypt_mac(&meta.mac, &meta.lastmodified_aad)
        .map_err(|_| SopsError::MacMismatch {
            file: file.to_string(),
        })?;
    if !bool::from(stored.as_bytes().ct_eq(computed.as_bytes())) {
        return Err(SopsError::MacMismatch {
            file: file.to_string(),
        });
    }

    let documents = branches
        .into_iter()
        .map(|branch| tree::branch_to_value(branch, format))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.into_error(file, format))?;
    Ok(DecryptedFile {
        documents,
        recipient: unwrapped.recipient,
    })
}
