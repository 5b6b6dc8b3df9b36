//! `weft sync --git-secret NAME`: the credentials of a private repository come from a Secret in
//! Weft's namespace of the real cluster, and never show in the output.

use crate::support;

use std::process::{Command, Output};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

use support::cluster::{self, TestNamespace};
use support::git_servers::{HttpAuth, HttpGitServer, RepoHost, WorkTree};

const PASSWORD: &str = "s3cret-Pa55word";

fn weft_sync(url: &str, ns: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("sync")
        .args(["--repo", url])
        .args(cluster::cluster().kube_args())
        .args(["--weft-namespace", ns, "--root-name", ns])
        .args(extra)
        .env_remove("KUBECONFIG")
        .env_remove("WEFT_GIT_CREDENTIALS_DIR")
        // No ~/.ssh keys or other ambient credentials either.
        .env("HOME", "/nonexistent")
        .env("WEFT_LOG", "warn")
        .output()
        .expect("run weft")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_repository_syncs_with_the_credentials_of_the_secret() {
    let ns = TestNamespace::new("gitsecret").await;
    let host = RepoHost::new();
    host.create("private.git");
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: Some(("weft".into(), PASSWORD.into())),
            bearer: None,
        },
    );
    let work = WorkTree::new(&host.path("private.git").display().to_string());
    work.write(
        "cm.yaml",
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-private-repo\n  namespace: {}\ndata:\n  a: b\n",
            ns.name()
        ),
    );
    work.commit("private config");
    work.push();
    let url = server.url("private.git");

    // Without credentials the fetch is refused, the error says so, and nothing is applied.
    let out = weft_sync(&url, ns.name(), &[]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{all}");
    assert!(
        all.to_lowercase().contains("auth"),
        "expected an authentication error: {all}"
    );
    let cms: Api<ConfigMap> = ns.api();
    assert!(cms
        .get_opt("from-private-repo")
        .await
        .expect("get")
        .is_none());

    // With the Secret in Weft's namespace, the same sync succeeds.
    let secrets: Api<Secret> = ns.api();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "git-creds"},
        "stringData": {"username": "weft", "password": PASSWORD}
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let out = weft_sync(&url, ns.name(), &["--git-secret", "git-creds"]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(
        !all.contains(PASSWORD),
        "the password leaked into the output: {all}"
    );
    let cm = cms
        .get("from-private-repo")
        .await
        .expect("applied from the private repository");
    assert_eq!(cm.data.expect("data")["a"], "b");

    // A Secret that does not exist is a clear error naming it.
    let out = weft_sync(&url, ns.name(), &["--git-secret", "missing"]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{all}");
    assert!(all.contains("missing"), "{all}");
    ns.delete().await;
}
