//! One pipeline: `weft sync` renders exactly what `weft run` renders. A cluster whose flux agent
//! was installed by the old launcher (with `--git-url`/`--git-path` the WeaveCloud leaves unset)
//! is taken over by `weft run`; a `weft sync` of the same repository afterwards makes zero API
//! writes and keeps the preserved flux arguments.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::PostParams;
use kube::Api;

use support::cluster::{create_token_secret, install_crds, TestNamespace};
use support::daemon::{weft_bin, Daemon, DaemonOptions};
use support::manifests::weavecloud;
use weft::api::WeaveCloud;

const FLUX: &str = "weave-flux-agent";

fn flux_args(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.iter().find(|c| c.name == "flux-agent"))
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn weft_sync_of_a_repository_weft_run_manages_writes_nothing() {
    let ns = TestNamespace::new("sync-after-run").await;
    let client = ns.client();
    install_crds(&client).await;

    // The launcher's token Secret and its flux agent, with git settings set by hand.
    create_token_secret(&client, ns.name(), "weave-cloud", "launcher-token").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns.name());
    let launcher_flux: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": FLUX, "labels": {"name": FLUX}},
        "spec": {
            "selector": {"matchLabels": {"name": FLUX}},
            "template": {
                "metadata": {"labels": {"name": FLUX}},
                "spec": {"containers": [{
                    "name": "flux-agent",
                    "image": "docker.io/weaveworks/flux:1.4.2",
                    "args": [
                        "--git-url=git@github.com:example/config.git",
                        "--git-path=k8s",
                        "--git-branch=prod"
                    ]
                }]}
            }
        }
    }))
    .expect("launcher flux");
    deployments
        .create(&PostParams::default(), &launcher_flux)
        .await
        .expect("create the launcher's flux agent");

    // The repository: a WeaveCloud that leaves flux's git settings unset, and a plain object.
    let repo = tempfile::tempdir().expect("repo dir");
    std::fs::write(
        repo.path().join("weave-cloud.yaml"),
        weavecloud(ns.name())
            .auto_update(false)
            .token("weave-cloud", Some("token"))
            .yaml(),
    )
    .expect("write WeaveCloud");
    std::fs::write(
        repo.path().join("settings.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {}\ndata:\n  mode: production\n",
            ns.name()
        ),
    )
    .expect("write ConfigMap");
    let repo_dir = repo.path().display().to_string();

    let mut d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&repo_dir, ns.name())
    });
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), ns.name());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = wcs
            .get_opt("weave-cloud")
            .await
            .ok()
            .flatten()
            .is_some_and(|wc| {
                wc.status.is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && format!("{:?}", c.status) == "True")
                })
            });
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the WeaveCloud did not become Ready under weft run:\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let taken_over = deployments.get(FLUX).await.expect("flux agent");
    let args = flux_args(&taken_over);
    for kept in [
        "--git-url=git@github.com:example/config.git",
        "--git-path=k8s",
    ] {
        assert!(
            args.iter().any(|a| a == kept),
            "weft run keeps {kept}: {args:?}"
        );
    }
    d.terminate();

    // The same repository with the CLI: the same render, so nothing to write.
    let out = Command::new(weft_bin())
        .arg("sync")
        .args(["--repo", &repo_dir])
        .args(["--weft-namespace", ns.name(), "--root-name", ns.name()])
        .args(["--timeout", "60s"])
        .args(support::cluster::cluster().kube_args())
        .env_remove("WEFT_REPO")
        .output()
        .expect("run weft sync");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "weft sync failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("(0 API writes,"),
        "weft sync of a repository weft run manages must write nothing:\n{stdout}\n{stderr}"
    );
    let after = deployments.get(FLUX).await.expect("flux agent");
    assert_eq!(
        flux_args(&after),
        args,
        "weft sync keeps the preserved flux arguments"
    );
    ns.delete().await;
}
