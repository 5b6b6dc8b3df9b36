//! The `sops` metadata of a file (sops `stores/stores.go`): key groups, the encryption rule, the
//! MAC and `lastmodified`.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use regex::Regex;

use super::scalar;
use super::tree::Node;
use super::SopsError;

/// The top-level key sops stores its metadata under.
pub(crate) const SOPS_KEY: &str = "sops";

/// sops `MACOnlyEncryptedInitialization`: sha256("sops"), hashed first when only encrypted values
/// are in the MAC, so that the two kinds of MAC never collide.
pub(crate) const MAC_ONLY_ENCRYPTED_INITIALIZATION: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b,
    0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

/// Key types sops knows besides age, by their metadata field. Weft cannot use them.
pub(crate) const OTHER_KEY_TYPES: [&str; 6] =
    ["pgp", "kms", "gcp_kms", "azure_kv", "hc_vault", "hckms"];

/// One age recipient of the file and the data key wrapped for it (an armored age file).
#[derive(Clone, Debug)]
pub(crate) struct AgeKey {
    pub recipient: String,
    pub enc: String,
}

/// The keys of one key group.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyGroup {
    pub age: Vec<AgeKey>,
    /// Names of the other key types present (`pgp`, `kms`, …).
    pub other: Vec<String>,
}

/// Which values are encrypted: exactly one rule applies to a file.
#[derive(Clone, Debug)]
pub(crate) enum Rule {
    UnencryptedSuffix(String),
    EncryptedSuffix(String),
    UnencryptedRegex(Regex),
    EncryptedRegex(Regex),
}

impl Rule {
    /// sops `Tree.shouldBeEncrypted` for `path`, the mapping keys leading to a value.
    pub(crate) fn encrypts(&self, path: &[&str]) -> bool {
        match self {
            Rule::UnencryptedSuffix(s) => !path.iter().any(|k| k.ends_with(s.as_str())),
            Rule::EncryptedSuffix(s) => path.iter().any(|k| k.ends_with(s.as_str())),
            Rule::UnencryptedRegex(r) => !path.iter().any(|k| r.is_match(k)),
            Rule::EncryptedRegex(r) => path.iter().any(|k| r.is_match(k)),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Metadata {
    /// One group, or several for Shamir's secret sharing (refused when unwrapping).
    pub key_groups: Vec<KeyGroup>,
    pub rule: Rule,
    pub mac: String,
    /// `lastmodified` as sops formats it for the MAC's additional data.
    pub lastmodified_aad: String,
    pub mac_only_encrypted: bool,
}

/// Why the metadata cannot be used.
#[derive(Debug)]
pub(crate) enum MetadataError {
    Invalid(String),
    Unsupported(String),
}

impl MetadataError {
    pub(crate) fn into_error(self, file: &str) -> SopsError {
        match self {
            MetadataError::Invalid(message) => SopsError::Metadata {
                file: file.to_string(),
                message,
            },
            MetadataError::Unsupported(what) => SopsError::Unsupported {
                file: file.to_string(),
                what,
            },
        }
    }
}

fn invalid(message: impl Into<String>) -> MetadataError {
    MetadataError::Invalid(message.into())
}

fn field<'a>(map: &'a [(String, Node)], name: &str) -> Option<&'a Node> {
    map.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// A string field, weakly typed as sops's mapstructure decoding is (a number or bool is fine).
fn string_field(map: &[(String, Node)], name: &str) -> Result<Option<String>, MetadataError> {
    Ok(match field(map, name) {
        None | Some(Node::Null) => None,
        Some(Node::Str(s) | Node::Time(s)) => Some(s.clone()),
        Some(Node::Int(i)) => Some(i.to_string()),
        Some(Node::Float(f)) => Some(scalar::go_format_float(*f)),
        Some(Node::Bool(b)) => Some(b.to_string()),
        Some(_) => return Err(invalid(format!("`{name}` must be a string"))),
    })
}

impl Metadata {
    pub(crate) fn from_node(node: &Node) -> Result<Metadata, MetadataError> {
        let Node::Map(map) = node else {
            return Err(invalid("`sops` must be a mapping"));
        };

        let lastmodified = string_field(map, "lastmodified")?
            .ok_or_else(|| invalid("`lastmodified` is missing"))?;
        let lastmodified_aad = scalar::rfc3339_seconds(&lastmodified)
            .ok_or_else(|| invalid("`lastmodified` is not an RFC 3339 time"))?;
        // sops refuses a file without its MAC; so does Weft (never applying it as plain).
        let mac = string_field(map, "mac")?
            .filter(|m| !m.is_empty())
            .ok_or_else(|| {
                invalid("`mac` is missing: the file is not a complete sops file; re-encrypt it with sops")
            })?;
        let mac_only_encrypted = match field(map, "mac_only_encrypted") {
            None | Some(Node::Null) => false,
            Some(Node::Bool(b)) => *b,
            Some(Node::Int(i)) => *i != 0,
            Some(Node::Str(s)) => scalar::go_parse_bool(s)
                .ok_or_else(|| invalid("`mac_only_encrypted` must be a boolean"))?,
            Some(_) => return Err(invalid("`mac_only_encrypted` must be a boolean")),
        };

        for name in ["encrypted_comment_regex", "unencrypted_comment_regex"] {
            if string_field(map, name)?.is_some_and(|s| !s.is_empty()) {
                return Err(MetadataError::Unsupported(format!(
                    "`{name}` (choosing values by their comments)"
                )));
            }
        }
        let mut rules = Vec::new();
        for name in [
            "unencrypted_suffix",
            "encrypted_suffix",
            "unencrypted_regex",
            "encrypted_regex",
        ] {
            if let Some(s) = string_field(map, name)?.filter(|s| !s.is_empty()) {
                rules.push((name, s));
            }
        }
        if rules.len() > 1 {
            return Err(invalid(
                "more than one of encrypted_suffix, unencrypted_suffix, encrypted_regex, unencrypted_regex",
            ));
        }
        let regex = |name: &str, s: &str| {
            compiled(s)
                .ok_or_else(|| invalid(format!("`{name}` is not a valid regular expression")))
        };
        let rule = match rules.pop() {
            None => Rule::UnencryptedSuffix("_unencrypted".to_string()),
            Some(("unencrypted_suffix", s)) => Rule::UnencryptedSuffix(s),
            Some(("encrypted_suffix", s)) => Rule::EncryptedSuffix(s),
            Some(("unencrypted_regex", s)) => {
                Rule::UnencryptedRegex(regex("unencrypted_regex", &s)?)
            }
            Some((_, s)) => Rule::EncryptedRegex(regex("encrypted_regex", &s)?),
        };

        let top = key_group(map)?;
        let key_groups = if !top.age.is_empty() || !top.other.is_empty() {
            vec![top]
        } else {
            match field(map, "key_groups") {
                None | Some(Node::Null) => Vec::new(),
                Some(Node::Seq(groups)) => groups
                    .iter()
                    .map(|g| match g {
                        Node::Map(g) => key_group(g),
                        _ => Err(invalid("each of `key_groups` must be a mapping")),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(invalid("`key_groups` must be a list")),
            }
        };
        if key_groups
            .iter()
            .all(|g| g.age.is_empty() && g.other.is_empty())
        {
            return Err(invalid(
                "no keys found (no `age` recipients, no other key groups)",
            ));
        }

        Ok(Metadata {
            key_groups,
            rule,
            mac,
            lastmodified_aad,
            mac_only_encrypted,
        })
    }
}

/// A rule's regex, compiled once per process: a repository holds many files with the same
/// `encrypted_regex`, and compiling it was a tenth of decrypting a Secret. Bounded, since the
/// patterns come from files.
fn compiled(pattern: &str) -> Option<Regex> {
    static CACHE: LazyLock<Mutex<HashMap<String, Regex>>> = LazyLock::new(Default::default);
    const MAX_CACHED: usize = 64;
    // A poisoned lock only means another thread panicked mid-insert; the map is still usable.
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = cache.get(pattern) {
        return Some(r.clone());
    }
    let r = Regex::new(pattern).ok()?;
    if cache.len() >= MAX_CACHED {
        cache.clear();
    }
    cache.insert(pattern.to_string(), r.clone());
    Some(r)
}

fn key_group(map: &[(String, Node)]) -> Result<KeyGroup, MetadataError> {
    let mut group = KeyGroup::default();
    match field(map, "age") {
        None | Some(Node::Null) => {}
        Some(Node::Seq(entries)) => {
            for entry in entries {
                let Node::Map(entry) = entry else {
                    return Err(invalid("each `age` entry must be a mapping"));
                };
                let recipient = string_field(entry, "recipient")?
                    .ok_or_else(|| invalid("an `age` entry has no `recipient`"))?;
                let enc = string_field(entry, "enc")?.ok_or_else(|| {
                    invalid(format!("the `age` entry for {recipient} has no `enc`"))
                })?;
                group.age.push(AgeKey { recipient, enc });
            }
        }
        Some(_) => return Err(invalid("`age` must be a list")),
    }
    for name in OTHER_KEY_TYPES {
        match field(map, name) {
            None | Some(Node::Null) => {}
            Some(Node::Seq(entries)) if entries.is_empty() => {}
            Some(_) => group.other.push(name.to_string()),
        }
    }
    Ok(group)
}
