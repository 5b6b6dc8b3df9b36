//! SOPS-encrypted files through the whole pipeline, with fixtures made during the run by the
//! pinned `sops` and `age-keygen` (`tests/sops/ensure`): `weft sync` of an encrypted Secret on
//! the real control plane gives the cleartext; a wrong key, no key or a tampered value stops the
//! pass with an error naming the file and nothing is pruned; `weft diff` and `weft render` mask
//! Secrets (`--show-secrets` shows them); an encrypted Armada chart values file reaches the real
//! helm in cleartext; `weft run --decryption-secret` picks a rotated key up without a restart.
//! No cleartext and no private key ever appears in an output, a log or the status.

use crate::sops_tools;
use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;

use sops_tools::{keygen, AgeKeyPair};
use support::cluster::TestNamespace;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::manifests::configmap;
use support::weft_cli::Weft;

/// A value no test could have by chance, so that finding it in an output is a leak.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{prefix}-{:x}-{nanos:x}", std::process::id())
}

fn base64(text: &str) -> String {
    support::git_servers::base64_encode(text.as_bytes())
}

/// A Secret with a `stringData` password and a `data` token, as a user writes it before
/// `sops --encrypt --encrypted-regex '^(data|stringData)$'`.
fn secret_yaml(ns: &str, password: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: {ns}\ntype: Opaque\n\
         stringData:\n  password: {password}\ndata:\n  token: {}\n",
        base64(token)
    )
}

/// `sops --encrypt` (Flux's usual rule: only `data` and `stringData` encrypted) in a scratch
/// directory, so that the cleartext never sits in the repository.
fn encrypt_secret(scratch: &Path, cleartext: &str, recipients: &[&str]) -> String {
    sops_tools::encrypt(
        scratch,
        "db.yaml",
        cleartext,
        recipients,
        &["--encrypted-regex", "^(data|stringData)$"],
    )
}

/// Flip one base64 character of the `data:` of the ENC value on the line `key: ENC[…`.
fn flip_value(encrypted: &str, key: &str) -> String {
    let line = encrypted
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{key}: ENC[")))
        .unwrap_or_else(|| panic!("no encrypted `{key}` in\n{encrypted}"));
    let at = line.find("data:").unwrap() + "data:".len();
    let mut flipped = line.to_string();
    let c = if flipped.as_bytes()[at] == b'A' {
        "B"
    } else {
        "A"
    };
    flipped.replace_range(at..at + 1, c);
    encrypted.replacen(line, &flipped, 1)
}

fn write(dir: &Path, file: &str, text: &str) {
    let p = dir.join(file);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// `weft <sub> --repo DIR` against the test cluster, sync root and inventory in `ns`; no
/// `SOPS_AGE_KEY_FILE` from the caller's environment.
fn weft(sub: &str, repo: &Path, ns: &str, extra: &[&str]) -> Output {
    Weft::new([sub])
        .repo(repo)
        .cluster()
        .root(ns)
        .args(extra)
        .env_remove("SOPS_AGE_KEY_FILE")
        .env_remove("WEFT_DECRYPTION_SECRET")
        .env("WEFT_LOG", "info")
        .output()
}

/// `weft <args>` offline, with `env` set.
fn weft_offline(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.args(args)
        .env_remove("SOPS_AGE_KEY_FILE")
        .env("WEFT_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run weft")
}

fn out_text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn leak_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// None of `secrets` (cleartexts, their base64, private keys) is in `text`.
fn assert_no_leak(what: &str, text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!s.is_empty());
        assert!(!text.contains(s), "{what} leaks `{s}`:\n{text}");
    }
}

async fn secret_data(api: &Api<Secret>, name: &str) -> Option<BTreeMap<String, String>> {
    api.get_opt(name).await.expect("GET secret").map(|s| {
        s.data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect()
    })
}

fn expected(password: &str, token: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([
        ("password".to_string(), password.to_string()),
        ("token".to_string(), token.to_string()),
    ]))
}

/// A decryption Secret holding `keys` (`NAME.agekey` → the key file as age-keygen wrote it).
fn key_secret(ns: &str, keys: &[(&str, &AgeKeyPair)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("sops-age".into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        data: Some(
            keys.iter()
                .map(|(name, k)| {
                    (
                        format!("{name}.agekey"),
                        ByteString(std::fs::read(&k.file).unwrap()),
                    )
                })
                .collect(),
        ),
        ..Default::default()
    }
}

#[tokio::test]
async fn sync_applies_the_cleartext_and_an_undecryptable_file_stops_the_pass_before_prune() {
    let ns = TestNamespace::new("sops-sync").await;
    let name = ns.name().to_string();
    let secrets: Api<Secret> = ns.api();
    let configmaps: Api<ConfigMap> = ns.api();
    let scratch = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    let right = keygen(scratch.path(), "right");
    let wrong = keygen(scratch.path(), "wrong");
    let password = unique("pw");
    let token = unique("tok");
    let encrypted = encrypt_secret(
        scratch.path(),
        &secret_yaml(&name, &password, &token),
        &[&right.recipient],
    );
    assert!(!encrypted.contains(&password), "{encrypted}");
    write(
        repo.path(),
        "apps/keep.yaml",
        &configmap(&name, "keep", "plain"),
    );
    write(repo.path(), "apps/db.enc.yaml", &encrypted);
    let right_file = right.file.to_str().unwrap();
    let wrong_file = wrong.file.to_str().unwrap();
    let mut leaks = vec![
        password.clone(),
        base64(&password),
        token.clone(),
        base64(&token),
        right.secret.clone(),
        wrong.secret.clone(),
    ];

    // 1. The right key: the Secret in the cluster holds the cleartext.
    let out = weft("sync", repo.path(), &name, &["--age-key-file", right_file]);
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        secret_data(&secrets, "db").await,
        expected(&password, &token)
    );
    assert_no_leak("weft sync", &text, &leak_refs(&leaks));

    // 2. keep.yaml removed, but the pass cannot decrypt: it fails naming the file and the
    //    recipient it needs, and prunes nothing.
    std::fs::remove_file(repo.path().join("apps/keep.yaml")).unwrap();
    let out = weft("sync", repo.path(), &name, &["--age-key-file", wrong_file]);
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("apps/db.enc.yaml"), "{text}");
    assert!(text.contains(&right.recipient), "{text}");
    assert!(text.contains("does not match"), "{text}");
    assert_no_leak("a wrong key's error", &text, &leak_refs(&leaks));
    assert!(configmaps.get_opt("keep").await.unwrap().is_some());

    // 3. No key at all: the error says how to give one.
    let out = weft("sync", repo.path(), &name, &[]);
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("apps/db.enc.yaml") && text.contains("no age identity was given"),
        "{text}"
    );
    assert!(text.contains("--age-key-file"), "{text}");
    assert!(configmaps.get_opt("keep").await.unwrap().is_some());

    // 4. A flipped byte in an encrypted value: refused, nothing pruned, Secret unchanged.
    write(
        repo.path(),
        "apps/db.enc.yaml",
        &flip_value(&encrypted, "password"),
    );
    let out = weft("sync", repo.path(), &name, &["--age-key-file", right_file]);
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("apps/db.enc.yaml") && text.contains("failed authentication"),
        "{text}"
    );
    assert_no_leak("a tampered file's error", &text, &leak_refs(&leaks));
    assert!(configmaps.get_opt("keep").await.unwrap().is_some());
    assert_eq!(
        secret_data(&secrets, "db").await,
        expected(&password, &token)
    );

    // 5. A new password: `weft diff` shows that the Secret changes, never its values.
    let password2 = unique("pw2");
    leaks.extend([password2.clone(), base64(&password2)]);
    let encrypted2 = encrypt_secret(
        scratch.path(),
        &secret_yaml(&name, &password2, &token),
        &[&right.recipient],
    );
    write(repo.path(), "apps/db.enc.yaml", &encrypted2);
    let out = weft("diff", repo.path(), &name, &["--age-key-file", right_file]);
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(&format!("Secret/{name}/db")), "{text}");
    assert!(
        text.contains("*** (before)") && text.contains("*** (after)"),
        "{text}"
    );
    assert_no_leak("weft diff", &text, &leak_refs(&leaks));

    // 6. The key from a decryption Secret in Weft's namespace: the pass succeeds, so now
    //    keep.yaml's ConfigMap is pruned and the Secret holds the new password.
    secrets
        .create(
            &PostParams::default(),
            &key_secret(&name, &[("right", &right)]),
        )
        .await
        .unwrap();
    let out = weft(
        "sync",
        repo.path(),
        &name,
        &["--decryption-secret", "sops-age"],
    );
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_no_leak("weft sync --decryption-secret", &text, &leak_refs(&leaks));
    assert_eq!(
        secret_data(&secrets, "db").await,
        expected(&password2, &token)
    );
    assert!(configmaps.get_opt("keep").await.unwrap().is_none());

    // 7. A decryption Secret that does not exist is an error of the pass that names it.
    let out = weft("sync", repo.path(), &name, &["--decryption-secret", "nope"]);
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(&format!("Secret {name}/nope")), "{text}");
    ns.delete().await;
}

/// The pinned helm: `$WEFT_HELM` (scripts/test sets it), else built by `tests/helm/ensure`.
fn helm() -> PathBuf {
    if let Some(p) = std::env::var_os("WEFT_HELM").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helm/ensure");
    let out = Command::new(&script)
        .output()
        .expect("tests/helm/ensure runs");
    assert!(
        out.status.success(),
        "tests/helm/ensure failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

const CHART_TEMPLATE: &str = r#"apiVersion: v1
kind: Secret
metadata:
  name: vault-creds
stringData:
  user: {{ .Values.user | quote }}
  password: {{ .Values.password | quote }}
"#;

/// A repository with an encrypted Secret manifest, an Armada chart whose `values.yaml` is
/// encrypted (all its values), an encrypted ArmadaChart and an encrypted WeaveCloud, all for
/// `recipient`.
struct ChartRepoValues<'a> {
    password: &'a str,
    chart_pw: &'a str,
    armada_user: &'a str,
    git_url: &'a str,
}

fn chart_repo(scratch: &Path, repo: &Path, recipient: &str, v: &ChartRepoValues<'_>) {
    let ChartRepoValues {
        password,
        chart_pw,
        armada_user,
        git_url,
    } = v;
    write(
        repo,
        "apps/db.enc.yaml",
        &encrypt_secret(
            scratch,
            &secret_yaml("default", password, "t0ken"),
            &[recipient],
        ),
    );
    write(
        repo,
        "charts/vault/Chart.yaml",
        "apiVersion: v2\nname: vault\nversion: 0.1.0\n",
    );
    write(repo, "charts/vault/templates/secret.yaml", CHART_TEMPLATE);
    let values = sops_tools::encrypt(
        scratch,
        "values.yaml",
        &format!("user: vault-admin\npassword: {chart_pw}\n"),
        &[recipient],
        &[],
    );
    write(repo, "charts/vault/values.yaml", &values);
    // The ArmadaChart itself encrypted (its `values` only): they override the chart's `user`.
    let armada = sops_tools::encrypt(
        scratch,
        "vault-chart.yaml",
        &format!(
            "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata:\n  name: vault\n  \
             namespace: default\nspec:\n  chart_name: vault\n  release: vault\n  namespace: vault\n  \
             source:\n    type: local\n    location: charts/vault\n  values:\n    user: {armada_user}\n"
        ),
        &[recipient],
        &["--encrypted-regex", "^values$"],
    );
    write(repo, "armada/vault.yaml", &armada);
    // A WeaveCloud with its flux git URL encrypted.
    let weavecloud = sops_tools::encrypt(
        scratch,
        "wc.yaml",
        &format!(
            "apiVersion: cloud.weave.works/v1beta1\nkind: WeaveCloud\nmetadata:\n  name: wc\n  \
             namespace: weave\nspec:\n  general:\n    environment: gke\n    \
             tokenSecretRef: {{name: weave-cloud}}\n  flux:\n    config:\n      gitUrl: {git_url}\n"
        ),
        &[recipient],
        &["--encrypted-regex", "^gitUrl$"],
    );
    write(repo, "weave/wc.yaml", &weavecloud);
}

#[test]
fn render_masks_secrets_unless_asked_and_a_chart_values_file_reaches_helm_in_cleartext() {
    let scratch = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    let key = keygen(scratch.path(), "k");
    let other = keygen(scratch.path(), "other");
    let password = unique("pw");
    let chart_pw = unique("chartpw");
    let armada_user = unique("armada-user");
    let git_url = format!("ssh://git@{}.example.com/config.git", unique("host"));
    chart_repo(
        scratch.path(),
        repo.path(),
        &key.recipient,
        &ChartRepoValues {
            password: &password,
            chart_pw: &chart_pw,
            armada_user: &armada_user,
            git_url: &git_url,
        },
    );
    let helm = helm();
    let dir = repo.path().to_str().unwrap();
    let env: [(&str, &Path); 1] = [("WEFT_HELM", &helm)];
    let leaks = [
        password.as_str(),
        chart_pw.as_str(),
        &base64(&password),
        &base64(&chart_pw),
        key.secret.as_str(),
        other.secret.as_str(),
    ];

    // Masked by default: the objects are there, their values are not.
    let key_file = key.file.to_str().unwrap();
    let out = weft_offline(&["render", "--age-key-file", key_file, dir], &env);
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("name: db") && text.contains("name: vault-creds"),
        "{text}"
    );
    assert!(
        text.contains("password: '***'") || text.contains("password: \"***\""),
        "{text}"
    );
    assert_no_leak("weft render", &text, &leaks);

    // --show-secrets: the manifest's cleartext, and helm's output from the decrypted values.
    let out = weft_offline(
        &["render", "--show-secrets", "--age-key-file", key_file, dir],
        &env,
    );
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(&password), "{text}");
    assert!(text.contains(&chart_pw), "{text}");
    // The encrypted ArmadaChart's values reached helm; the chart's own `user` is overridden.
    assert!(text.contains(&armada_user), "{text}");
    assert!(!text.contains("vault-admin"), "{text}");
    // The encrypted WeaveCloud's git URL is in the flux agent's arguments (not a Secret: shown
    // as it is, see docs/secrets.md).
    assert!(text.contains(&format!("--git-url={git_url}")), "{text}");
    assert!(!text.contains("ENC[AES256_GCM"), "{text}");

    // SOPS_AGE_KEY_FILE works as --age-key-file does.
    let env_key: [(&str, &Path); 2] = [("WEFT_HELM", &helm), ("SOPS_AGE_KEY_FILE", &key.file)];
    let out = weft_offline(&["validate", dir], &env_key);
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("ok: "), "{text}");

    // Without the key, validate names both files and the recipient, and leaks nothing.
    let other_file = other.file.to_str().unwrap();
    let out = weft_offline(&["validate", "--age-key-file", other_file, dir], &env);
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("apps/db.enc.yaml:1:1: "), "{text}");
    assert!(text.contains("charts/vault/values.yaml:1:1: "), "{text}");
    assert!(text.contains("armada/vault.yaml:1:1: "), "{text}");
    assert!(text.contains("weave/wc.yaml:1:1: "), "{text}");
    assert!(text.contains(&key.recipient), "{text}");
    assert_no_leak("weft validate with a wrong key", &text, &leaks);
}

#[tokio::test]
async fn run_with_a_decryption_secret_picks_up_a_rotated_key_without_restart() {
    let ns = TestNamespace::new("sops-run").await;
    let name = ns.name().to_string();
    let secrets: Api<Secret> = ns.api();
    let scratch = tempfile::tempdir().unwrap();
    let old = keygen(scratch.path(), "old");
    let new = keygen(scratch.path(), "new");
    let password = unique("pw");
    let password2 = unique("pw2");
    let token = unique("tok");
    let leaks = [
        password.clone(),
        password2.clone(),
        base64(&password),
        base64(&password2),
        token.clone(),
        base64(&token),
        old.secret.clone(),
        new.secret.clone(),
    ];

    secrets
        .create(&PostParams::default(), &key_secret(&name, &[("old", &old)]))
        .await
        .unwrap();
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write(
        "apps/db.enc.yaml",
        encrypt_secret(
            scratch.path(),
            &secret_yaml(&name, &password, &token),
            &[&old.recipient],
        ),
    );
    work.commit("encrypted db secret");
    work.push();
    let url = server.url("config.git");
    let mut opts = DaemonOptions::new(&url, &name);
    opts.interval = "1s";
    opts.extra = vec!["--decryption-secret".into(), "sops-age".into()];
    let d = Daemon::start(opts);

    wait_for_secret(&secrets, expected(&password, &token), &d).await;

    // Rotation: the file is re-encrypted for the new key only and pushed; then the Secret is
    // updated to hold only the new key. The daemon keeps running.
    work.write(
        "apps/db.enc.yaml",
        encrypt_secret(
            scratch.path(),
            &secret_yaml(&name, &password2, &token),
            &[&new.recipient],
        ),
    );
    let sha = work.commit("rotate the key");
    work.push();
    // Until the Secret is updated, passes over the new revision fail naming the file.
    d.wait_status(
        "a pass that cannot decrypt the new revision",
        Duration::from_secs(30),
        |s| {
            s["lastPass"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("apps/db.enc.yaml") && e.contains(&new.recipient))
        },
    )
    .await;
    assert_eq!(
        secret_data(&secrets, "db").await,
        expected(&password, &token)
    );
    secrets
        .replace(
            "sops-age",
            &PostParams::default(),
            &key_secret(&name, &[("new", &new)]),
        )
        .await
        .unwrap();
    wait_for_secret(&secrets, expected(&password2, &token), &d).await;
    let status = d
        .wait_status("the new revision synced", Duration::from_secs(30), |s| {
            s["revision"] == sha.as_str() && s["lastPass"]["result"] == "succeeded"
        })
        .await;

    let logs = d.logs();
    assert!(
        logs.matches("decryption keys read").count() >= 2,
        "the Secret was not read again after it changed:\n{logs}"
    );
    let leak_refs: Vec<&str> = leaks.iter().map(String::as_str).collect();
    assert_no_leak("the daemon's logs", &logs, &leak_refs);
    assert_no_leak("/api/v1/status", &status.to_string(), &leak_refs);
    ns.delete().await;
}

async fn wait_for_secret(
    secrets: &Api<Secret>,
    want: Option<BTreeMap<String, String>>,
    d: &Daemon,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = secret_data(secrets, "db").await;
        if now == want {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "Secret db did not get the expected data within 60s\nlogs:\n{}",
                d.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
