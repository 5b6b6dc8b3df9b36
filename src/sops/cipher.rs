//! Values: `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]` opened with the data key (sops
//! `aes/cipher.go`), the walk over a document that decrypts them and feeds the MAC (sops
//! `Tree.Decrypt`).

use aes_gcm::aead::consts::{U12, U32};
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes256;
use aes_gcm::{AesGcm, Nonce};
use base64::Engine;
use sha2::{Digest, Sha512};
use zeroize::Zeroizing;

use super::metadata::Rule;
use super::scalar;
use super::tree::{Branch, DisplayPath, Node};
use super::SopsError;

/// The parts of `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`, split exactly as sops's pattern
/// `^ENC\[AES256_GCM,data:(.+),iv:(.+),tag:(.+),type:(.+)\]` matches in Go: anchored at the start
/// only, within the first line, every group greedy (the longest that lets the rest match).
/// By hand rather than with that regex: capturing groups make it the slowest step of a Secret.
pub(crate) fn split_enc(value: &str) -> Option<[&str; 4]> {
    let rest = value.strip_prefix("ENC[AES256_GCM,data:")?;
    let line = rest.split('\n').next().unwrap_or(rest);
    let mut parts = [""; 4];
    greedy(line, &[",iv:", ",tag:", ",type:"], &mut parts).then_some(parts)
}

/// `(.+)SEP…(.+)\]` with greedy groups: try each group's end from the last candidate back.
fn greedy<'a>(s: &'a str, seps: &[&str], parts: &mut [&'a str]) -> bool {
    let Some((sep, more)) = seps.split_first() else {
        return match s.rfind(']') {
            Some(end) if end >= 1 => {
                parts[0] = &s[..end];
                true
            }
            _ => false,
        };
    };
    let mut search = s.len();
    while let Some(at) = s[..search].rfind(sep) {
        if at >= 1 && greedy(&s[at + sep.len()..], more, &mut parts[1..]) {
            parts[0] = &s[..at];
            return true;
        }
        if at == 0 {
            break;
        }
        // Next: the occurrences that start before this one.
        search = at + sep.len() - 1;
    }
    false
}

/// AES-256-GCM with the file's data key. sops writes 32-byte IVs (GHASH-derived counter); a
/// 12-byte IV is accepted too, as Go's `NewGCMWithNonceSize(len(iv))` would.
pub(crate) struct DataKeyCipher {
    iv32: AesGcm<Aes256, U32>,
    iv12: AesGcm<Aes256, U12>,
}

/// Why one value could not be opened.
pub(crate) enum ValueError {
    /// Not an `ENC[…]` value, bad base64, unknown type, or an IV of another size.
    Malformed(&'static str),
    /// GCM authentication failed: a changed value, another path, or another data key.
    Authentication,
}

impl DataKeyCipher {
    pub(crate) fn new(key: &[u8]) -> Result<DataKeyCipher, &'static str> {
        let bad = |_| "the data key is not 32 bytes";
        Ok(DataKeyCipher {
            iv32: AesGcm::new_from_slice(key).map_err(bad)?,
            iv12: AesGcm::new_from_slice(key).map_err(bad)?,
        })
    }

    /// Open one value; returns the cleartext bytes and the sops type name.
    fn open<'v>(
        &self,
        value: &'v str,
        aad: &[u8],
    ) -> Result<(Zeroizing<Vec<u8>>, &'v str), ValueError> {
        let [data, iv, tag, kind] =
            split_enc(value).ok_or(ValueError::Malformed("expected an ENC[AES256_GCM,…] value"))?;
        let b64 = |part: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(part)
                .map_err(|_| ValueError::Malformed("invalid base64 in the ENC[…] value"))
        };
        let (mut sealed, iv, tag) = (b64(data)?, b64(iv)?, b64(tag)?);
        // Go's gcm.Open takes the last 16 bytes of data||tag as the tag, as aes-gcm does.
        sealed.extend_from_slice(&tag);
        let payload = Payload { msg: &sealed, aad };
        let clear = match iv.len() {
            32 => self.iv32.decrypt(Nonce::<U32>::from_slice(&iv), payload),
            12 => self.iv12.decrypt(Nonce::<U12>::from_slice(&iv), payload),
            _ => return Err(ValueError::Malformed("an IV of unsupported length")),
        }
        .map_err(|_| ValueError::Authentication)?;
        Ok((Zeroizing::new(clear), kind))
    }

    /// The stored MAC, opened with `lastmodified` as additional data.
    pub(crate) fn decrypt_mac(&self, mac: &str, lastmodified: &str) -> Result<String, ValueError> {
        let (clear, kind) = self.open(mac, lastmodified.as_bytes())?;
        if kind != "str" {
            return Err(ValueError::Malformed("the MAC is not a string"));
        }
        String::from_utf8(clear.to_vec()).map_err(|_| ValueError::Malformed("the MAC is not text"))
    }
}

/// A value that failed, and where.
pub(crate) struct WalkError {
    path: DisplayPath,
    error: ValueError,
}

impl WalkError {
    pub(crate) fn into_error(self, file: &str) -> SopsError {
        let (file, path) = (file.to_string(), self.path.to_string());
        match self.error {
            ValueError::Authentication => SopsError::ValueAuthentication { file, path },
            ValueError::Malformed(reason) => SopsError::MalformedValue {
                file,
                path,
                reason: reason.to_string(),
            },
        }
    }
}

/// Decrypt the values of one document in place, in document order, hashing each cleartext into
/// `mac` as sops's `Tree.Decrypt` does.
pub(crate) fn decrypt_branch(
    branch: &mut Branch,
    cipher: &DataKeyCipher,
    rule: &Rule,
    mac_only_encrypted: bool,
    mac: &mut Sha512,
) -> Result<(), WalkError> {
    let mut walk = Walk {
        cipher,
        rule,
        mac_only_encrypted,
        mac,
        keys: Vec::new(),
    };
    walk.branch(branch, &DisplayPath::default())
}

struct Walk<'a> {
    cipher: &'a DataKeyCipher,
    rule: &'a Rule,
    mac_only_encrypted: bool,
    mac: &'a mut Sha512,
    /// The mapping keys down to the current value: the additional data and the rule's input.
    /// List indices are not part of it, as in sops.
    keys: Vec<String>,
}

impl Walk<'_> {
    fn branch(&mut self, branch: &mut Branch, path: &DisplayPath) -> Result<(), WalkError> {
        for (key, node) in branch.iter_mut() {
            self.keys.push(key.clone());
            let result = self.node(node, &path.key(key));
            self.keys.pop();
            result?;
        }
        Ok(())
    }

    fn node(&mut self, node: &mut Node, path: &DisplayPath) -> Result<(), WalkError> {
        match node {
            Node::Map(branch) => self.branch(branch, path),
            Node::Seq(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.node(item, &path.index(i))?;
                }
                Ok(())
            }
            // sops leaves nil alone: neither decrypted nor hashed.
            Node::Null => Ok(()),
            leaf => {
                let keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
                let encrypted = self.rule.encrypts(&keys);
                if encrypted {
                    let fail = |error| WalkError {
                        path: path.clone(),
                        error,
                    };
                    let Node::Str(text) = &*leaf else {
                        return Err(fail(ValueError::Malformed(
                            "expected an encrypted string, found a plain value",
                        )));
                    };
                    // sops encrypts an empty string to an empty string.
                    if !text.is_empty() {
                        let aad = format!("{}:", keys.join(":"));
                        let (clear, kind) = self.cipher.open(text, aad.as_bytes()).map_err(fail)?;
                        *leaf = typed(&clear, kind).map_err(|r| fail(ValueError::Malformed(r)))?;
                    }
                }
                if !self.mac_only_encrypted || encrypted {
                    hash_leaf(self.mac, leaf);
                }
                Ok(())
            }
        }
    }
}

/// sops `ToBytes`: the text of a value the MAC hashes.
fn hash_leaf(mac: &mut Sha512, node: &Node) {
    match node {
        Node::Str(s) | Node::Time(s) => mac.update(s.as_bytes()),
        Node::Int(i) => mac.update(i.to_string().as_bytes()),
        Node::Float(f) => mac.update(scalar::go_format_float(*f).as_bytes()),
        Node::Bool(true) => mac.update(b"True"),
        Node::Bool(false) => mac.update(b"False"),
        Node::Null | Node::Map(_) | Node::Seq(_) => {}
    }
}

/// Restore a value's type from its cleartext, as sops's `Cipher.Decrypt` does.
fn typed(clear: &[u8], kind: &str) -> Result<Node, &'static str> {
    let text = || std::str::from_utf8(clear).map_err(|_| "the cleartext is not UTF-8 text");
    Ok(match kind {
        "str" | "bytes" => Node::Str(text()?.to_string()),
        "int" => Node::Int(
            text()?
                .parse()
                .map_err(|_| "a type:int value that is not an integer")?,
        ),
        "float" => Node::Float(
            scalar::go_parse_float(text()?).ok_or("a type:float value that is not a number")?,
        ),
        "bool" => Node::Bool(
            scalar::go_parse_bool(text()?).ok_or("a type:bool value that is not a boolean")?,
        ),
        "time" => Node::Time(
            scalar::yaml_timestamp(text()?)
                .ok_or("a type:time value that is not an RFC 3339 time")?,
        ),
        "comment" => return Err("a type:comment value where a value belongs"),
        _ => return Err("an unknown type"),
    })
}
