//! SOPS-encrypted files in the repository, decrypted while loading with the pass's age
//! identities ([`LoadOptions`](super::LoadOptions)): plain manifests, WeaveCloud and Armada
//! documents (their positions are those of the encrypted file, whose keys sops leaves in place,
//! so `file:line` still points into it), and files inside chart directories (a chart's
//! `values.yaml`), replaced in the snapshot by their cleartext for the chart render.
//!
//! A file that cannot be decrypted is an error of the load naming the file (never the
//! cleartext): nothing of the revision is applied, nothing is pruned. Decrypted values that a
//! diagnostic might quote are redacted from every message.

use std::collections::BTreeSet;

use serde_json::Value;

use super::yaml::YamlDoc;
use super::{Diagnostics, Origin};
use crate::sops::{self, Format, Identity, SopsError};
use crate::source::Snapshot;

/// What replaces a decrypted value in a diagnostic.
pub const REDACTED: &str = "<redacted>";

/// The cleartext strings of the encrypted values decrypted in one load, to keep them out of
/// every diagnostic.
#[derive(Default)]
pub struct Cleartexts {
    values: BTreeSet<String>,
}

impl Cleartexts {
    /// Remove every decrypted value from `message`, longest first (a value may contain another).
    pub fn redact(&self, message: &str) -> String {
        if self.values.is_empty() {
            return message.to_string();
        }
        let mut values: Vec<&String> = self.values.iter().collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        let mut out = message.to_string();
        for v in values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), REDACTED);
            }
        }
        out
    }

    /// Record the cleartext of every value that is encrypted in `encrypted` (a document as
    /// written) at the same place in `decrypted`. Very short values are left out: redacting
    /// `1` or `ok` would mangle messages and hide nothing.
    fn collect(&mut self, encrypted: &Value, decrypted: &Value) {
        match (encrypted, decrypted) {
            (Value::String(e), d) if e.starts_with("ENC[") => {
                let text = match d {
                    Value::String(s) => s.clone(),
                    Value::Null | Value::Bool(_) => return,
                    other => other.to_string(),
                };
                if text.chars().count() >= 3 {
                    self.values.insert(text);
                }
            }
            (Value::Object(e), Value::Object(d)) => {
                for (k, ev) in e {
                    if let Some(dv) = d.get(k) {
                        self.collect(ev, dv);
                    }
                }
            }
            (Value::Array(e), Value::Array(d)) => {
                for (ev, dv) in e.iter().zip(d) {
                    self.collect(ev, dv);
                }
            }
            _ => {}
        }
    }
}

/// The message of a file that cannot be decrypted (the diagnostic's origin names the file);
/// with no identity at all, how to give one.
fn error_message(path: &str, e: &SopsError, identities: &[Identity]) -> String {
    let full = e.to_string();
    let message = full
        .strip_prefix(path)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(&full)
        .to_string();
    if identities.is_empty() && matches!(e, SopsError::NoMatchingIdentity { .. }) {
        format!(
            "{message} (give Weft an age identity: --age-key-file / SOPS_AGE_KEY_FILE, or \
             --decryption-secret for sync, diff and run)"
        )
    } else {
        message
    }
}

fn file_origin(path: &str) -> Origin {
    Origin {
        file: path.to_string(),
        pos: super::yaml::Pos { line: 1, col: 1 },
    }
}

/// What [`decrypt_documents`] did with a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileDecryption {
    /// The file is not a SOPS file: its documents are as written.
    NotEncrypted,
    /// Its documents now hold the cleartext.
    Decrypted,
    /// It could not be decrypted; the error is in the diagnostics.
    Failed,
}

/// If the documents parsed from `path` carry SOPS metadata, replace their values with the
/// cleartext (positions are kept: sops leaves keys where they are). A failure is recorded in
/// `diags`, naming the file.
pub fn decrypt_documents(
    path: &str,
    bytes: &[u8],
    docs: &mut [YamlDoc],
    identities: &[Identity],
    cleartexts: &mut Cleartexts,
    diags: &mut Diagnostics,
) -> FileDecryption {
    // Not only files with an encrypted value: one with sops metadata but no MAC is refused.
    if !docs.iter().any(|d| sops::has_sops_metadata(&d.value)) {
        return FileDecryption::NotEncrypted;
    }
    let decrypted = match sops::decrypt(path, bytes, Format::from_file_name(path), identities) {
        Ok(d) => d,
        Err(e) => {
            diags.error(file_origin(path), error_message(path, &e, identities));
            return FileDecryption::Failed;
        }
    };
    // sops keeps every document; the loader skips nothing but empty ones, which sops drops.
    let mut targets: Vec<&mut YamlDoc> = docs.iter_mut().collect();
    if targets.len() != decrypted.documents.len() {
        targets.retain(|d| !d.value.is_null());
    }
    if targets.len() != decrypted.documents.len() {
        diags.error(
            file_origin(path),
            format!(
                "the file has {} documents but sops decrypted {}",
                targets.len(),
                decrypted.documents.len()
            ),
        );
        return FileDecryption::Failed;
    }
    for (doc, clear) in targets.into_iter().zip(decrypted.documents) {
        if let Value::Object(map) = &mut doc.value {
            map.remove("sops");
        }
        cleartexts.collect(&doc.value, &clear);
        doc.value = clear;
    }
    tracing::debug!(file = path, recipient = %decrypted.recipient, "decrypted a SOPS file");
    FileDecryption::Decrypted
}

/// Files inside chart directories (`charts`: directory prefixes, `""` for the root) that sops
/// encrypted, decrypted: `None` when there are none, else a snapshot where each holds its
/// cleartext (as JSON, which helm and the chart renderer read as YAML). Errors go to `diags`.
pub fn decrypt_chart_files(
    snapshot: &Snapshot,
    charts: &[String],
    identities: &[Identity],
    cleartexts: &mut Cleartexts,
    diags: &mut Diagnostics,
) -> Option<Snapshot> {
    let mut replaced = Vec::new();
    for (path, bytes) in &snapshot.files {
        let structured = [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| path.ends_with(ext));
        let in_chart = charts
            .iter()
            .any(|c| c.is_empty() || path.starts_with(c.as_str()));
        if !structured || !in_chart || !sops::may_be_encrypted(bytes) {
            continue;
        }
        match sops::decrypt(path, bytes, Format::from_file_name(path), identities) {
            Ok(clear) => {
                let mut text = String::new();
                for (i, doc) in clear.documents.iter().enumerate() {
                    if i > 0 {
                        text.push_str("---\n");
                    }
                    // Serialising a JSON value cannot fail (string keys, finite numbers).
                    text.push_str(&serde_json::to_string_pretty(doc).unwrap_or_default());
                    text.push('\n');
                }
                collect_file(bytes, &clear.documents, cleartexts);
                tracing::debug!(file = %path, recipient = %clear.recipient, "decrypted a SOPS chart file");
                replaced.push((path.clone(), text.into_bytes()));
            }
            // A chart file that merely mentions the marker (a template, a test value).
            Err(SopsError::NotEncrypted { .. }) => {}
            Err(e) => diags.error(file_origin(path), error_message(path, &e, identities)),
        }
    }
    if replaced.is_empty() {
        return None;
    }
    let mut out = snapshot.clone();
    for (path, text) in replaced {
        out.files.insert(path, text);
    }
    Some(out)
}

/// The encrypted values of a chart file, for redaction (the file as written, parsed again).
fn collect_file(bytes: &[u8], decrypted: &[Value], cleartexts: &mut Cleartexts) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let Ok(docs) = super::yaml::parse_documents(text, super::yaml::YamlLimits::default()) else {
        return;
    };
    let encrypted: Vec<&YamlDoc> = docs.iter().filter(|d| !d.value.is_null()).collect();
    for (e, d) in encrypted.iter().zip(decrypted) {
        cleartexts.collect(&e.value, d);
    }
}

/// Whether any file of `snapshot` may be a SOPS file: when none is, a pass needs no identities
/// (and reads no decryption Secret).
pub fn needs_decryption(snapshot: &Snapshot) -> bool {
    snapshot.files.iter().any(|(path, bytes)| {
        [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| path.ends_with(ext))
            && sops::may_be_encrypted(bytes)
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::load::{load_with, LoadOptions};
    use crate::sops::identities_from_key_text;

    /// A file made by the real sops 3.13.3 for the TEST-ONLY identity next to it.
    const KAT_YAML: &str = include_str!("../sops/testdata/kat.enc.yaml");
    const KAT_KEY: &str = include_str!("../sops/testdata/kat.agekey");
    const KAT_RECIPIENT: &str = "age12fhfgza4vesmectl46m45jmha7txchc2wmtwpx7mkdtt2mkrm9cqv2xhup";

    fn with_key() -> LoadOptions {
        LoadOptions {
            identities: Arc::new(identities_from_key_text(KAT_KEY, "kat.agekey").unwrap()),
            ..LoadOptions::default()
        }
    }

    fn snapshot(files: &[(&str, &str)]) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            revision: None,
            files: files
                .iter()
                .map(|(p, t)| (p.to_string(), t.as_bytes().to_vec()))
                .collect(),
        })
    }

    fn chart_repo() -> Arc<Snapshot> {
        snapshot(&[
            (
                "charts/c/Chart.yaml",
                "apiVersion: v2\nname: c\nversion: 0.1.0\n",
            ),
            ("charts/c/values.yaml", KAT_YAML),
            // The chart directory is a chart because a chart names it.
            (
                "armada.yaml",
                "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: c, namespace: default}\nspec:\n  release: c\n  namespace: default\n  source: {type: local, location: charts/c}\n",
            ),
            (
                "charts/c/templates/cm.yaml",
                "kind: ConfigMap # ENC[AES256_GCM, in a comment\n",
            ),
        ])
    }

    #[test]
    fn an_encrypted_chart_file_is_replaced_by_its_cleartext() {
        let (repo, _) = load_with(chart_repo(), &with_key()).unwrap();
        let text = std::str::from_utf8(&repo.snapshot.files["charts/c/values.yaml"]).unwrap();
        let docs = crate::load::yaml::parse_documents(text, Default::default()).unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].value["nested"]["password"], json!("hunter2"));
        assert_eq!(docs[0].value["nested"]["port"], json!(5432));
        assert!(docs[0].value.get("sops").is_none());
        // A file that only mentions the marker is left alone.
        assert_eq!(
            repo.snapshot.files["charts/c/templates/cm.yaml"],
            chart_repo().files["charts/c/templates/cm.yaml"]
        );
    }

    #[test]
    fn without_a_matching_identity_the_load_fails_naming_the_file_and_recipient() {
        let err = load_with(chart_repo(), &LoadOptions::default()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("charts/c/values.yaml:1:1: cannot decrypt: no age identity was given"),
            "{text}"
        );
        assert!(text.contains(KAT_RECIPIENT), "{text}");
        assert!(text.contains("--age-key-file"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[test]
    fn an_encrypted_manifest_is_decrypted_with_the_positions_of_the_encrypted_file() {
        let snap = snapshot(&[("apps/x.yaml", KAT_YAML)]);
        // Decrypted (no decryption error), then checked as any document: the KAT file has no
        // apiVersion, which is reported inside the file.
        let err = load_with(snap.clone(), &with_key()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("apps/x.yaml:1:1: missing required field `apiVersion`"),
            "{text}"
        );
        assert!(!text.contains("cannot decrypt"), "{text}");
        let tampered = KAT_YAML.replacen("data:HwFcWQ==", "data:HwFcWA==", 1);
        let err = load_with(snapshot(&[("apps/x.yaml", &tampered)]), &with_key()).unwrap_err();
        assert!(
            err.to_string()
                .contains("apps/x.yaml:1:1: the value at `name` failed authentication"),
            "{err}"
        );
    }

    #[test]
    fn a_sops_looking_file_without_a_mac_is_refused_not_applied_as_plain() {
        // sops metadata (recipients, lastmodified) but the MAC removed, and no encrypted value
        // left: before, the file was loaded as a plain ConfigMap, `sops` key and all.
        let stripped = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default}\n\
            data: {password: hunter2}\nsops:\n  age:\n    - recipient: age1x\n      enc: x\n\
            \x20 lastmodified: \"2024-01-01T00:00:00Z\"\n  version: 3.9.0\n";
        let err = load_with(snapshot(&[("apps/cm.yaml", stripped)]), &with_key()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("apps/cm.yaml:1:1"), "{text}");
        assert!(text.contains("`mac` is missing"), "{text}");
        // A document whose `sops` is not sops metadata stays a plain document.
        assert!(!sops::has_sops_metadata(
            &json!({"sops": {"enabled": true}})
        ));
    }

    #[test]
    fn decrypted_values_are_redacted_from_messages() {
        let mut c = Cleartexts::default();
        c.collect(
            &json!({"a": "ENC[AES256_GCM,x]", "b": "plain", "l": ["ENC[AES256_GCM,y]", "ENC[AES256_GCM,z]"], "n": "ENC[AES256_GCM,n]"}),
            &json!({"a": "hunter2", "b": "plain", "l": ["hunter2-long", "ok"], "n": 123456}),
        );
        assert_eq!(
            c.redact("`hunter2-long` and `hunter2`, plain, ok, 123456"),
            "`<redacted>` and `<redacted>`, plain, ok, <redacted>"
        );
    }
}
