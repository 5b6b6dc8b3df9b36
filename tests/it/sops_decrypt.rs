//! Weft's SOPS decryption against the real tools: every fixture is made during the run by the
//! pinned `sops` and `age-keygen` (built by `tests/sops/ensure` from their Go modules), decrypted
//! by `weft::sops`, and compared with what `sops --decrypt` prints.

use crate::sops_tools;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};
use weft::sops::{self, DecryptedFile, Format, Identity, SopsError};

use sops_tools::{keygen, AgeKeyPair};

fn ids(keys: &[&AgeKeyPair]) -> Vec<Identity> {
    keys.iter()
        .flat_map(|k| sops::identities_from_key_file(&k.file).unwrap())
        .collect()
}

fn weft_decrypt(
    name: &str,
    encrypted: &str,
    keys: &[&AgeKeyPair],
) -> Result<DecryptedFile, SopsError> {
    sops::decrypt(
        name,
        encrypted.as_bytes(),
        Format::from_file_name(name),
        &ids(keys),
    )
}

/// `sops --decrypt` of a single-document file, parsed.
fn sops_json(dir: &Path, name: &str, encrypted: &str, key: &AgeKeyPair) -> Value {
    serde_json::from_str(&sops_tools::decrypt(
        dir, name, encrypted, &key.file, "json",
    ))
    .unwrap()
}

/// Flip one base64 character of the `data:` of the first ENC value on a line `key: ENC[…`.
fn flip_value(encrypted: &str, key: &str) -> String {
    let line = encrypted
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{key}: ENC[")))
        .unwrap_or_else(|| panic!("no encrypted `{key}` in\n{encrypted}"));
    let at = line.find("data:").unwrap() + "data:".len();
    let mut flipped = line.to_string();
    let replacement = if flipped.as_bytes()[at] == b'A' {
        "B"
    } else {
        "A"
    };
    flipped.replace_range(at..at + 1, replacement);
    encrypted.replacen(line, &flipped, 1)
}

const NESTED_YAML: &str = r#"app:
  name: billing
  replicas: 3
  debug: false
  ratio: 0.75
  offset: -12
  database:
    host: db.internal
    port: 5432
    password: "s3cr3t-p@ss"
    options: {ssl: true, timeout: 30}
  users:
    - name: alice
      roles: [admin, dev]
      token: tok-alice-123
    - name: bob
      roles: []
      token: tok-bob-456
  ports: [80, 443]
  motd: |
    Welcome,
    friend ✓
  empty: ""
  nothing: null
  comment_unencrypted: left in clear
"#;

#[test]
fn yaml_with_nested_maps_lists_ints_and_bools_decrypts_as_sops_does() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "k");
    let encrypted =
        sops_tools::encrypt(dir.path(), "app.yaml", NESTED_YAML, &[&key.recipient], &[]);
    assert!(
        !encrypted.contains("s3cr3t"),
        "sops left the password in clear:\n{encrypted}"
    );
    assert!(encrypted.contains("comment_unencrypted: left in clear"));

    let out = weft_decrypt("app.yaml", &encrypted, &[&key]).unwrap();
    assert_eq!(out.recipient, key.recipient);
    let expected = json!({"app": {
        "name": "billing", "replicas": 3, "debug": false, "ratio": 0.75, "offset": -12,
        "database": {"host": "db.internal", "port": 5432, "password": "s3cr3t-p@ss",
                     "options": {"ssl": true, "timeout": 30}},
        "users": [
            {"name": "alice", "roles": ["admin", "dev"], "token": "tok-alice-123"},
            {"name": "bob", "roles": [], "token": "tok-bob-456"}
        ],
        "ports": [80, 443],
        "motd": "Welcome,\nfriend ✓\n",
        "empty": "",
        "nothing": null,
        "comment_unencrypted": "left in clear"
    }});
    assert_eq!(out.documents, vec![expected.clone()]);
    assert_eq!(
        sops_json(dir.path(), "app.yaml", &encrypted, &key),
        expected
    );
}

#[test]
fn json_file_decrypts_as_sops_does() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "k");
    let clear = r#"{"user": "admin", "pin": 1234, "limits": {"cpu": 1.5, "burst": true},
                   "tags": ["a", 2, false, null, {"deep": ["x"]}], "big": 12345678901234}"#;
    let encrypted = sops_tools::encrypt(dir.path(), "creds.json", clear, &[&key.recipient], &[]);
    let out = weft_decrypt("creds.json", &encrypted, &[&key]).unwrap();
    let expected: Value = serde_json::from_str(clear).unwrap();
    assert_eq!(out.documents, vec![expected.clone()]);
    assert_eq!(
        sops_json(dir.path(), "creds.json", &encrypted, &key),
        expected
    );
}

const SECRET: &str = r#"apiVersion: v1
kind: Secret
metadata:
  name: db-credentials
  namespace: billing
  labels:
    app: billing
type: Opaque
data:
  password: aHVudGVyMg==
stringData:
  username: admin
  port: "5432"
  config.yaml: |
    url: postgres://db:5432
"#;

fn secret_expected() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-credentials", "namespace": "billing", "labels": {"app": "billing"}},
        "type": "Opaque",
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"username": "admin", "port": "5432", "config.yaml": "url: postgres://db:5432\n"}
    })
}

#[test]
fn encrypted_regex_secret_keeps_metadata_clear() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "k");
    let encrypted = sops_tools::encrypt(
        dir.path(),
        "secret.yaml",
        SECRET,
        &[&key.recipient],
        &["--encrypted-regex", "^(data|stringData)$"],
    );
    assert!(encrypted.contains("name: db-credentials"), "{encrypted}");
    assert!(!encrypted.contains("aHVudGVyMg=="), "{encrypted}");
    let out = weft_decrypt("secret.yaml", &encrypted, &[&key]).unwrap();
    assert_eq!(out.documents, vec![secret_expected()]);
    assert_eq!(
        sops_json(dir.path(), "secret.yaml", &encrypted, &key),
        secret_expected()
    );

    // Clear values are in the MAC: renaming the Secret in the encrypted file is refused.
    let renamed = encrypted.replacen("name: db-credentials", "name: evil", 1);
    let err = weft_decrypt("secret.yaml", &renamed, &[&key]).unwrap_err();
    assert!(matches!(err, SopsError::MacMismatch { .. }), "{err:?}");
    assert!(
        !sops_tools::try_decrypt(dir.path(), "secret.yaml", &renamed, &key.file, "json")
            .status
            .success()
    );
}

#[test]
fn every_encryption_rule_matches_sops() {
    let clear = "description: a billing secret\nlabels:\n  team: payments\npassword_secret: hunter2\nnote_unencrypted: hello\ntoken: t0k3n\n";
    let rules: &[&[&str]] = &[
        &["--unencrypted-suffix", "_unencrypted"],
        &["--encrypted-suffix", "_secret"],
        &["--unencrypted-regex", "^(description|labels)$"],
        &[
            "--encrypted-regex",
            "^(password_secret|token)$",
            "--mac-only-encrypted",
        ],
    ];
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "k");
    for rule in rules {
        let encrypted =
            sops_tools::encrypt(dir.path(), "rules.yaml", clear, &[&key.recipient], rule);
        let out = weft_decrypt("rules.yaml", &encrypted, &[&key])
            .unwrap_or_else(|e| panic!("{rule:?}: {e}\n{encrypted}"));
        let expected = sops_json(dir.path(), "rules.yaml", &encrypted, &key);
        assert_eq!(out.documents, vec![expected.clone()], "{rule:?}");
        assert_eq!(expected["password_secret"], "hunter2", "{rule:?}");
        assert_eq!(expected["labels"]["team"], "payments", "{rule:?}");
    }
}

#[test]
fn mac_only_encrypted_ignores_changes_to_clear_values_like_sops() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "k");
    let encrypted = sops_tools::encrypt(
        dir.path(),
        "secret.yaml",
        SECRET,
        &[&key.recipient],
        &[
            "--encrypted-regex",
            "^(data|stringData)$",
            "--mac-only-encrypted",
        ],
    );
    assert!(
        encrypted.contains("mac_only_encrypted: true"),
        "{encrypted}"
    );
    let relabelled = encrypted.replacen("app: billing", "app: other", 1);
    let out = weft_decrypt("secret.yaml", &relabelled, &[&key]).unwrap();
    assert_eq!(
        sops_json(dir.path(), "secret.yaml", &relabelled, &key),
        out.documents[0]
    );
    assert_eq!(out.documents[0]["metadata"]["labels"]["app"], "other");
    // Encrypted values still are: a changed one fails.
    let err =
        weft_decrypt("secret.yaml", &flip_value(&relabelled, "username"), &[&key]).unwrap_err();
    assert!(
        matches!(err, SopsError::ValueAuthentication { .. }),
        "{err:?}"
    );
}

#[test]
fn two_recipients_each_key_alone_decrypts() {
    let dir = tempfile::tempdir().unwrap();
    let (alice, bob) = (keygen(dir.path(), "alice"), keygen(dir.path(), "bob"));
    let encrypted = sops_tools::encrypt(
        dir.path(),
        "secret.yaml",
        SECRET,
        &[&alice.recipient, &bob.recipient],
        &["--encrypted-regex", "^(data|stringData)$"],
    );
    for key in [&alice, &bob] {
        let out = weft_decrypt("secret.yaml", &encrypted, &[key]).unwrap();
        assert_eq!(out.recipient, key.recipient);
        assert_eq!(out.documents, vec![secret_expected()]);
        assert_eq!(
            sops_json(dir.path(), "secret.yaml", &encrypted, key),
            secret_expected()
        );
    }
    // Identities from a Flux-style decryption Secret (`*.agekey` keys), tried in turn.
    let stranger = keygen(dir.path(), "stranger");
    let mut data = BTreeMap::new();
    data.insert(
        "a-stranger.agekey".to_string(),
        std::fs::read(&stranger.file).unwrap(),
    );
    data.insert(
        "b-bob.agekey".to_string(),
        std::fs::read(&bob.file).unwrap(),
    );
    data.insert("notes.txt".to_string(), b"not a key".to_vec());
    let identities = sops::identities_from_secret_data(&data).unwrap();
    assert_eq!(identities.len(), 2);
    let out = sops::decrypt(
        "secret.yaml",
        encrypted.as_bytes(),
        Format::Yaml,
        &identities,
    )
    .unwrap();
    assert_eq!(out.recipient, bob.recipient);
}

#[test]
fn wrong_key_lists_the_recipients_public_keys_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let (alice, bob, eve) = (
        keygen(dir.path(), "alice"),
        keygen(dir.path(), "bob"),
        keygen(dir.path(), "eve"),
    );
    let encrypted = sops_tools::encrypt(
        dir.path(),
        "app.yaml",
        NESTED_YAML,
        &[&alice.recipient, &bob.recipient],
        &[],
    );
    let err = weft_decrypt("app.yaml", &encrypted, &[&eve]).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, SopsError::NoMatchingIdentity { .. }),
        "{err:?}"
    );
    assert_eq!(
        msg,
        format!(
            "app.yaml: cannot decrypt: the age identity given does not match; the file is \
             encrypted for the age recipients {}, {}",
            alice.recipient, bob.recipient
        )
    );
    for secret in [&alice.secret, &bob.secret, &eve.secret] {
        assert!(!msg.contains(secret.as_str()));
    }
    assert!(
        !msg.contains("AGE-SECRET-KEY") && !msg.contains("s3cr3t"),
        "{msg}"
    );
    assert!(
        !sops_tools::try_decrypt(dir.path(), "app.yaml", &encrypted, &eve.file, "json")
            .status
            .success()
    );
}

#[test]
fn one_flipped_byte_in_a_value_is_refused_naming_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "k");
    let encrypted =
        sops_tools::encrypt(dir.path(), "app.yaml", NESTED_YAML, &[&key.recipient], &[]);
    let tampered = flip_value(&encrypted, "password");
    let err = weft_decrypt("app.yaml", &tampered, &[&key]).unwrap_err();
    assert!(
        matches!(&err, SopsError::ValueAuthentication { path, .. } if path == "app.database.password"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with("app.yaml: the value at `app.database.password` failed authentication"),
        "{msg}"
    );
    assert!(!msg.contains("s3cr3t"), "{msg}");
    // sops itself refuses the same file.
    assert!(
        !sops_tools::try_decrypt(dir.path(), "app.yaml", &tampered, &key.file, "json")
            .status
            .success()
    );

    // A value in a list of mappings: the path names the item.
    let err = weft_decrypt("app.yaml", &flip_value(&encrypted, "token"), &[&key]).unwrap_err();
    assert!(
        matches!(&err, SopsError::ValueAuthentication { path, .. } if path == "app.users[0].token"),
        "{err:?}"
    );
}

#[test]
fn a_flipped_mac_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "k");
    for name in ["app.yaml", "creds.json"] {
        let (clear, mac_key) = if name.ends_with(".json") {
            (r#"{"user": "admin", "pin": 1234}"#, "\"mac\"")
        } else {
            (NESTED_YAML, "mac")
        };
        let encrypted = sops_tools::encrypt(dir.path(), name, clear, &[&key.recipient], &[]);
        let tampered = if name.ends_with(".json") {
            let at = encrypted.find("\"mac\": \"ENC[AES256_GCM,data:").unwrap()
                + "\"mac\": \"ENC[AES256_GCM,data:".len();
            let mut t = encrypted.clone();
            let replacement = if t.as_bytes()[at] == b'A' { "B" } else { "A" };
            t.replace_range(at..at + 1, replacement);
            t
        } else {
            flip_value(&encrypted, mac_key)
        };
        let err = weft_decrypt(name, &tampered, &[&key]).unwrap_err();
        assert!(
            matches!(err, SopsError::MacMismatch { .. }),
            "{name}: {err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("{name}: MAC mismatch")),
            "{err}"
        );
        assert!(
            !sops_tools::try_decrypt(dir.path(), name, &tampered, &key.file, "json")
                .status
                .success()
        );
    }
}

#[test]
fn several_yaml_documents_decrypt_together() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "k");
    let second = SECRET.replace("db-credentials", "api-token");
    let encrypted = sops_tools::encrypt(
        dir.path(),
        "secrets.yaml",
        &format!("{SECRET}---\n{second}"),
        &[&key.recipient],
        &["--encrypted-regex", "^(data|stringData)$"],
    );
    let out = weft_decrypt("secrets.yaml", &encrypted, &[&key]).unwrap();
    let printed = sops_tools::decrypt(dir.path(), "secrets.yaml", &encrypted, &key.file, "yaml");
    let sops_docs: Vec<Value> = serde_saphyr::from_multiple(&printed).unwrap();
    assert_eq!(out.documents, sops_docs);
    assert_eq!(out.documents.len(), 2);
    assert_eq!(out.documents[1]["metadata"]["name"], "api-token");
}

#[test]
fn yaml_scalar_types_round_trip_like_sops() {
    // Scalars whose Go types differ from their text: the MAC hashes the Go text forms.
    let clear = "octal: 0755\nhex: 0x1F\nunderscored: 1_000\nexp: 1.5e3\nsmall: 0.000001\nday: 2024-03-01\n\
                 stamp: 2001-12-14t21:59:43.10-05:00\nyes_is_text: yes\nquoted: \"true\"\nbinary: !!binary aGVsbG8=\n\
                 clear_unencrypted: {when: 2024-03-01, n: 0x10, f: 2.50}\n";
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "k");
    let encrypted = sops_tools::encrypt(dir.path(), "types.yaml", clear, &[&key.recipient], &[]);
    let out = weft_decrypt("types.yaml", &encrypted, &[&key])
        .unwrap_or_else(|e| panic!("{e}\n{encrypted}"));
    let printed = sops_tools::decrypt(dir.path(), "types.yaml", &encrypted, &key.file, "json");
    let expected: Value = serde_json::from_str(&printed).unwrap();
    // JSON cannot tell 1500.0 from 1500: compare numbers by value.
    assert_eq!(
        normalize(&out.documents[0]),
        normalize(&expected),
        "sops printed {printed}"
    );
    assert_eq!(out.documents[0]["octal"], 493);
    assert_eq!(out.documents[0]["stamp"], "2001-12-14T21:59:43.1-05:00");
}

fn normalize(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64().unwrap()),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), normalize(v))).collect())
        }
        other => other.clone(),
    }
}

#[test]
fn yaml_merge_keys_are_applied_like_in_plain_files() {
    // sops keeps `<<` as a key (prints it back as `!!merge <<`); Weft merges it, as its loader
    // does for plain YAML.
    let clear = "base: &base {user: app, pass: p1}\nprod:\n  <<: *base\n  pass: p2\n";
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "k");
    let encrypted = sops_tools::encrypt(dir.path(), "merge.yaml", clear, &[&key.recipient], &[]);
    assert!(encrypted.contains("!!merge <<:"), "{encrypted}");
    let out = weft_decrypt("merge.yaml", &encrypted, &[&key]).unwrap();
    assert_eq!(
        out.documents,
        vec![json!({"base": {"user": "app", "pass": "p1"}, "prod": {"user": "app", "pass": "p2"}})]
    );
    // sops's own view, with `<<` as a plain key.
    let printed = sops_json(dir.path(), "merge.yaml", &encrypted, &key);
    assert_eq!(printed["prod"]["<<"], json!({"user": "app", "pass": "p1"}));
}
