//! Unit tests. The known-answer fixtures in `testdata/` were made by sops 3.13.3 for the
//! TEST-ONLY identity `testdata/kat.agekey`; `tests/it/sops_decrypt.rs` makes fresh ones with the
//! real tools on every run.

use std::collections::BTreeMap;

use serde_json::json;

use super::cipher;
use super::metadata::Rule;
use super::scalar::{self, TagKind};
use super::tree::Node;
use super::*;

const KAT_YAML: &str = include_str!("testdata/kat.enc.yaml");
const KAT_JSON: &str = include_str!("testdata/kat.enc.json");
const KAT_KEY: &str = include_str!("testdata/kat.agekey");
const KAT_RECIPIENT: &str = "age12fhfgza4vesmectl46m45jmha7txchc2wmtwpx7mkdtt2mkrm9cqv2xhup";

fn kat_identities() -> Vec<Identity> {
    identities_from_key_text(KAT_KEY, "kat.agekey").unwrap()
}

fn decrypt_yaml(text: &str) -> Result<DecryptedFile, SopsError> {
    decrypt(
        "secret.yaml",
        text.as_bytes(),
        Format::Yaml,
        &kat_identities(),
    )
}

/// Replace the only occurrence of `from` in `text`.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "`{from}` must occur once");
    text.replace(from, to)
}

/// The ENC value on the line with `key: `.
fn enc_of<'a>(text: &'a str, key: &str) -> &'a str {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{key}: ENC[")))
        .unwrap();
    line.split_once(": ").unwrap().1
}

/// Flip one character of the base64 `data:` of the value under `key`.
fn flip_data(text: &str, key: &str) -> String {
    let enc = enc_of(text, key);
    let start = enc.find("data:").unwrap() + "data:".len();
    let mut flipped = enc.to_string();
    let c = flipped.as_bytes()[start];
    let replacement = if c == b'A' { "B" } else { "A" };
    flipped.replace_range(start..start + 1, replacement);
    edit(text, enc, &flipped)
}

#[test]
fn decrypts_a_yaml_file_made_by_sops() {
    let out = decrypt_yaml(KAT_YAML).unwrap();
    assert_eq!(out.recipient, KAT_RECIPIENT);
    assert_eq!(
        out.documents,
        vec![json!({
            "name": "demo",
            "when": "2024-01-02T00:00:00Z",
            "nested": {
                "password": "hunter2",
                "port": 5432,
                "ratio": 0.25,
                "enabled": true,
                "list": ["a", 7, {"x": "y"}],
                "empty": "",
                "none": null,
                "note_unencrypted": "visible"
            }
        })]
    );
}

#[test]
fn decrypts_a_json_file_made_by_sops() {
    let out = decrypt(
        "s.json",
        KAT_JSON.as_bytes(),
        Format::Json,
        &kat_identities(),
    )
    .unwrap();
    assert_eq!(
        out.documents,
        vec![json!({"user": "admin", "pin": 1234, "tags": ["x", false]})]
    );
}

#[test]
fn a_flipped_byte_in_a_value_fails_authentication_naming_its_path() {
    let err = decrypt_yaml(&flip_data(KAT_YAML, "password")).unwrap_err();
    assert!(
        matches!(&err, SopsError::ValueAuthentication { path, .. } if path == "nested.password"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with("secret.yaml: the value at `nested.password` failed authentication"),
        "{msg}"
    );
    assert!(!msg.contains("hunter2"));
}

#[test]
fn a_value_moved_to_another_path_fails_authentication() {
    // The path is the additional data: the same ciphertext under another key does not open.
    let password = enc_of(KAT_YAML, "password").to_string();
    let name = enc_of(KAT_YAML, "name").to_string();
    let swapped = edit(&edit(KAT_YAML, &name, "@@"), &password, &name).replace("@@", &password);
    let err = decrypt_yaml(&swapped).unwrap_err();
    assert!(
        matches!(&err, SopsError::ValueAuthentication { path, .. } if path == "name"),
        "{err:?}"
    );
}

#[test]
fn an_edited_clear_value_or_a_flipped_mac_is_a_mac_mismatch() {
    let edited = edit(
        KAT_YAML,
        "note_unencrypted: visible",
        "note_unencrypted: changed",
    );
    assert!(matches!(
        decrypt_yaml(&edited),
        Err(SopsError::MacMismatch { .. })
    ));

    let flipped = flip_data(KAT_YAML, "mac");
    let err = decrypt_yaml(&flipped).unwrap_err();
    assert!(matches!(err, SopsError::MacMismatch { .. }), "{err:?}");
    assert!(err.to_string().starts_with("secret.yaml: MAC mismatch"));
}

#[test]
fn the_mac_covers_document_order_and_removed_values() {
    let name_line = KAT_YAML.lines().next().unwrap();
    let when_line = KAT_YAML.lines().nth(1).unwrap();
    let reordered = edit(
        KAT_YAML,
        &format!("{name_line}\n{when_line}\n"),
        &format!("{when_line}\n{name_line}\n"),
    );
    assert!(matches!(
        decrypt_yaml(&reordered),
        Err(SopsError::MacMismatch { .. })
    ));

    let removed = edit(KAT_YAML, "    note_unencrypted: visible\n", "");
    assert!(matches!(
        decrypt_yaml(&removed),
        Err(SopsError::MacMismatch { .. })
    ));
}

#[test]
fn a_wrong_identity_lists_the_public_recipients_only() {
    let stranger = age::x25519::Identity::generate();
    let stranger_secret = stranger.to_string();
    let ids = identities_from_key_text(
        age::secrecy::ExposeSecret::expose_secret(&stranger_secret),
        "k",
    )
    .unwrap();
    let err = decrypt("secret.yaml", KAT_YAML.as_bytes(), Format::Yaml, &ids).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, SopsError::NoMatchingIdentity { .. }),
        "{err:?}"
    );
    assert_eq!(
        msg,
        format!(
            "secret.yaml: cannot decrypt: the age identity given does not match; the file is \
             encrypted for the age recipients {KAT_RECIPIENT}"
        )
    );
    assert!(!msg.contains("AGE-SECRET-KEY"));

    let none = decrypt("secret.yaml", KAT_YAML.as_bytes(), Format::Yaml, &[]).unwrap_err();
    assert!(
        none.to_string().contains("no age identity was given"),
        "{none}"
    );
}

#[test]
fn several_identities_are_tried_in_turn() {
    let mut ids = identities_from_key_text(
        &format!(
            "{}\n",
            age::secrecy::ExposeSecret::expose_secret(
                &age::x25519::Identity::generate().to_string()
            )
        ),
        "k",
    )
    .unwrap();
    ids.extend(kat_identities());
    let out = decrypt("s.yaml", KAT_YAML.as_bytes(), Format::Yaml, &ids).unwrap();
    assert_eq!(out.recipient, KAT_RECIPIENT);
}

#[test]
fn a_stale_recipient_field_still_decrypts_by_trying_every_identity() {
    let stale = edit(
        KAT_YAML,
        &format!("recipient: {KAT_RECIPIENT}"),
        "recipient: age1stale",
    );
    assert!(decrypt_yaml(&stale).is_ok());
}

#[test]
fn other_key_groups_are_not_supported() {
    let start = KAT_YAML.find("    age:\n").unwrap();
    let end = KAT_YAML.find("    lastmodified:").unwrap();
    let pgp = "    pgp:\n        - created_at: \"2024-01-01T00:00:00Z\"\n          enc: x\n          fp: ABCD\n";
    let mut text = KAT_YAML.to_string();
    text.replace_range(start..end, pgp);
    let err = decrypt_yaml(&text).unwrap_err();
    assert!(
        matches!(&err, SopsError::UnsupportedKeyGroups { groups, .. } if groups == &["pgp"]),
        "{err:?}"
    );
    assert!(err
        .to_string()
        .contains("encrypted only for pgp keys, which are not supported"));

    // age next to kms: age is used; without a match, the message mentions kms.
    let kms = "    kms:\n        - arn: arn:aws:kms:x\n          enc: x\n          created_at: \"2024-01-01T00:00:00Z\"\n";
    let both = edit(
        KAT_YAML,
        "    lastmodified:",
        &format!("{kms}    lastmodified:"),
    );
    assert!(decrypt_yaml(&both).is_ok());
    let err = decrypt("s.yaml", both.as_bytes(), Format::Yaml, &[]).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("(and for kms keys, which are not supported)"),
        "{err}"
    );
}

#[test]
fn shamir_key_groups_and_comment_rules_are_refused() {
    let start = KAT_YAML.find("    age:\n").unwrap();
    let end = KAT_YAML.find("    lastmodified:").unwrap();
    let groups = "    key_groups:\n        - age: [{recipient: age1a, enc: x}]\n        - age: [{recipient: age1b, enc: y}]\n";
    let mut text = KAT_YAML.to_string();
    text.replace_range(start..end, groups);
    let err = decrypt_yaml(&text).unwrap_err();
    assert!(
        err.to_string().contains("split over 2 key groups (Shamir"),
        "{err}"
    );

    let comments = edit(
        KAT_YAML,
        "    unencrypted_suffix: _unencrypted\n",
        "    encrypted_comment_regex: sops\n",
    );
    let err = decrypt_yaml(&comments).unwrap_err();
    assert!(matches!(err, SopsError::Unsupported { .. }), "{err:?}");
}

#[test]
fn a_plain_file_is_not_encrypted() {
    let err = decrypt(
        "cm.yaml",
        b"kind: ConfigMap\n",
        Format::Yaml,
        &kat_identities(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cm.yaml: no `sops` metadata: the file is not encrypted by sops"
    );
    assert!(has_sops_metadata(&serde_yaml_like(KAT_JSON)));
    assert!(!has_sops_metadata(&json!({"sops": "x"})));
}

fn serde_yaml_like(json_text: &str) -> serde_json::Value {
    serde_json::from_str(json_text).unwrap()
}

#[test]
fn debug_output_redacts_secrets() {
    let ids = kat_identities();
    let debug = format!("{:?}", ids[0]);
    assert!(debug.contains(KAT_RECIPIENT), "{debug}");
    assert!(!debug.contains("AGE-SECRET-KEY-10"), "{debug}");
    let out = decrypt_yaml(KAT_YAML).unwrap();
    let debug = format!("{out:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
}

#[test]
fn identities_come_from_agekey_keys_of_a_secret() {
    let mut data = BTreeMap::new();
    data.insert("sops.agekey".to_string(), KAT_KEY.as_bytes().to_vec());
    data.insert("README".to_string(), b"not a key".to_vec());
    let ids = identities_from_secret_data(&data).unwrap();
    assert_eq!(ids.len(), 1);
    assert_eq!(ids[0].recipient(), KAT_RECIPIENT);

    data.insert(
        "broken.agekey".to_string(),
        b"# comment\nAGE-SECRET-KEY-1NOPE\n".to_vec(),
    );
    let err = identities_from_secret_data(&data).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Secret key `broken.agekey`, line 2: not a valid age identity (bad AGE-SECRET-KEY-1 encoding)"
    );
    assert!(!err.to_string().contains("NOPE"));
}

#[test]
fn identity_parse_errors_never_quote_the_text() {
    let err = "hunter2".parse::<Identity>().unwrap_err().to_string();
    assert!(!err.contains("hunter2"), "{err}");
    let pq = "AGE-SECRET-KEY-PQ-1QQQ"
        .parse::<Identity>()
        .unwrap_err()
        .to_string();
    assert!(pq.contains("post-quantum age identities"), "{pq}");
}

#[test]
fn key_files_skip_comments_and_blank_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.txt");
    std::fs::write(&path, format!("\n{KAT_KEY}\n\n")).unwrap();
    let ids = identities_from_key_file(&path).unwrap();
    assert_eq!(ids.len(), 1);
    let missing = identities_from_key_file(&dir.path().join("none")).unwrap_err();
    assert!(
        missing.to_string().contains("cannot read the age key file"),
        "{missing}"
    );
}

fn resolve(text: &str) -> Node {
    scalar::resolve_yaml(text, true, TagKind::None).unwrap()
}

#[test]
fn plain_scalars_resolve_as_go_yaml_v3() {
    assert_eq!(resolve("true"), Node::Bool(true));
    assert_eq!(resolve("yes"), Node::Str("yes".into()));
    assert_eq!(resolve("on"), Node::Str("on".into()));
    assert_eq!(resolve("~"), Node::Null);
    assert_eq!(resolve(""), Node::Null);
    assert_eq!(resolve("0x1F"), Node::Int(31));
    assert_eq!(resolve("0o17"), Node::Int(15));
    assert_eq!(resolve("0755"), Node::Int(493));
    assert_eq!(resolve("08"), Node::Float(8.0));
    assert_eq!(resolve("1_000"), Node::Int(1000));
    assert_eq!(resolve("-0b101"), Node::Int(-5));
    assert_eq!(resolve("+12"), Node::Int(12));
    assert_eq!(resolve("1e3"), Node::Float(1000.0));
    assert_eq!(resolve(".5"), Node::Float(0.5));
    assert_eq!(resolve("1e400"), Node::Str("1e400".into()));
    assert_eq!(resolve("1.2.3"), Node::Str("1.2.3".into()));
    assert_eq!(resolve("-.inf"), Node::Float(f64::NEG_INFINITY));
    assert_eq!(
        resolve("2024-1-2"),
        Node::Time("2024-01-02T00:00:00Z".into())
    );
    assert_eq!(resolve("<<"), Node::Str("<<".into()));
    assert!(scalar::resolve_yaml("18446744073709551615", true, TagKind::None).is_err());
    assert_eq!(
        scalar::resolve_yaml("5", false, TagKind::None).unwrap(),
        Node::Str("5".into())
    );
    assert_eq!(
        scalar::resolve_yaml("5", true, TagKind::Str).unwrap(),
        Node::Str("5".into())
    );
    assert_eq!(
        scalar::resolve_yaml("5", true, TagKind::Float).unwrap(),
        Node::Float(5.0)
    );
    assert_eq!(
        scalar::resolve_yaml("5", false, TagKind::Other).unwrap(),
        Node::Str("5".into())
    );
    assert_eq!(
        scalar::resolve_yaml("aGk=", true, TagKind::Binary).unwrap(),
        Node::Str("hi".into())
    );
    let err = scalar::resolve_yaml("s3cret", true, TagKind::Int)
        .unwrap_err()
        .to_string();
    assert!(!err.contains("s3cret"), "{err}");
}

#[test]
fn timestamps_format_as_go_marshal_text() {
    let t = scalar::yaml_timestamp;
    assert_eq!(
        t("2001-12-14t21:59:43.10-05:00").as_deref(),
        Some("2001-12-14T21:59:43.1-05:00")
    );
    assert_eq!(
        t("2001-12-14 21:59:43.123456789123").as_deref(),
        Some("2001-12-14T21:59:43.123456789Z")
    );
    assert_eq!(
        t("2002-12-14T1:2:3+00:00").as_deref(),
        Some("2002-12-14T01:02:03Z")
    );
    assert_eq!(t("2023-02-29"), None);
    assert_eq!(t("2024-02-29").as_deref(), Some("2024-02-29T00:00:00Z"));
    assert_eq!(t("2024-01-02T10:00:00"), None); // no zone with T: yaml.v3 keeps a string
    assert_eq!(t("2024-01-02 10:00:00 +01:00"), None);
    assert_eq!(
        scalar::rfc3339_seconds("2026-12-01T03:49:04.123+00:00").as_deref(),
        Some("2026-12-01T03:49:04Z")
    );
    assert_eq!(
        scalar::rfc3339_seconds("2026-12-01T03:49:04-07:30").as_deref(),
        Some("2026-12-01T03:49:04-07:30")
    );
}

#[test]
fn numbers_and_booleans_use_go_text_forms() {
    assert_eq!(scalar::go_format_float(0.25), "0.25");
    assert_eq!(scalar::go_format_float(1000.0), "1000");
    assert_eq!(scalar::go_format_float(1e21), "1000000000000000000000");
    assert_eq!(scalar::go_format_float(1e-7), "0.0000001");
    assert_eq!(scalar::go_format_float(f64::INFINITY), "+Inf");
    assert_eq!(scalar::go_parse_float("+Inf"), Some(f64::INFINITY));
    assert!(scalar::go_parse_float("NaN").is_some_and(f64::is_nan));
    assert_eq!(scalar::go_parse_bool("T"), Some(true));
    assert_eq!(scalar::go_parse_bool("yes"), None);
}

#[test]
fn the_encryption_rule_looks_at_every_key_of_the_path() {
    let suffix = Rule::UnencryptedSuffix("_unencrypted".into());
    assert!(suffix.encrypts(&["a", "b"]));
    assert!(!suffix.encrypts(&["a_unencrypted", "b"]));
    let regex = Rule::EncryptedRegex(regex::Regex::new("^(data|stringData)$").unwrap());
    assert!(regex.encrypts(&["stringData", "password"]));
    assert!(!regex.encrypts(&["metadata", "name"]));
    assert!(!regex.encrypts(&["metadata", "xdata"]));
}

#[test]
fn yaml_structure_errors_name_the_position_only() {
    let err = decrypt("s.yaml", b"- a\n- b\n", Format::Yaml, &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "s.yaml: not valid YAML: 1:1: a YAML document that is a sequence (sops needs a mapping)"
    );
    let err = decrypt("s.yaml", b"a: 1\n1: secret\n", Format::Yaml, &[]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("s.yaml: not valid YAML: 2:1: a mapping key that is not a string"),
        "{err}"
    );
    let err = decrypt("s.json", b"[1]", Format::Json, &[]).unwrap_err();
    assert!(err.to_string().contains("top-level object"), "{err}");
}

#[test]
fn several_yaml_documents_share_the_first_metadata() {
    // sops writes the metadata into every document; the first one counts.
    let two = format!("{KAT_YAML}---\n{KAT_YAML}");
    let err = decrypt_yaml(&two).unwrap_err();
    // The second copy's values were sealed under the same paths but the MAC covers one copy.
    assert!(matches!(err, SopsError::MacMismatch { .. }), "{err:?}");
}

#[test]
fn enc_values_split_as_sops_regex_matches_them() {
    // The Go pattern, for comparison: Rust's regex has the same leftmost-first greedy semantics.
    let pattern =
        regex::Regex::new(r"^ENC\[AES256_GCM,data:(.+),iv:(.+),tag:(.+),type:(.+)\]").unwrap();
    for value in [
        "ENC[AES256_GCM,data:YQ==,iv:aXY=,tag:dGFn,type:str]",
        "ENC[AES256_GCM,data:a,iv:b,iv:c,tag:d,type:str]",
        "ENC[AES256_GCM,data:a,iv:b,tag:c,type:str],iv:x,tag:y,type:int]",
        "ENC[AES256_GCM,data:a,iv:b,tag:c,type:str] trailing",
        "ENC[AES256_GCM,data:a,iv:b,tag:c,type:s]t]\nmore]",
        "ENC[AES256_GCM,data:,iv:b,tag:c,type:str]",
        "ENC[AES256_GCM,data:a,iv:b,tag:c,type:]",
        "ENC[AES256_GCM,data:a,iv:b\n,tag:c,type:str]",
        "ENC[AES256_GCM,data:a,iv:,iv:b,tag:c,type:str]",
        "plain",
    ] {
        let expected = pattern
            .captures(value)
            .map(|c| [1, 2, 3, 4].map(|i| c.get(i).unwrap().as_str()));
        assert_eq!(cipher::split_enc(value), expected, "{value}");
    }
}

#[test]
fn messages_list_recipients_and_quote_paths_only_up_to_a_bound() {
    let many: Vec<String> = (0..48_000)
        .map(|_| format!("age1{}", "x".repeat(500)))
        .collect();
    let err = SopsError::NoMatchingIdentity {
        file: "s.yaml".into(),
        identities: 1,
        recipients: many,
        other_groups: Vec::new(),
    };
    let text = err.to_string();
    assert!(text.len() < 400, "{}", text.len());
    assert!(text.ends_with("(and 47999 more entries)"), "{text}");
    let err = SopsError::ValueAuthentication {
        file: "s.yaml".into(),
        path: "k".repeat(100_000),
    };
    assert!(err.to_string().len() < 400);
    assert_eq!(quoted_list(&["a".into(), "b".into()]), "a, b");
}
