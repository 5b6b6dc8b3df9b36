//! `weft uninstall` on the real control plane: it refuses while a daemon holds the Lease, removes
//! Weft's finalizers so that nothing is stuck terminating, and with `--prune` deletes what Weft
//! created (by ownership) and its own records.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use support::cluster::{self, TestNamespace};
use support::manifests::weavecloud;
use support::weft_cli::Weft;

fn weft(args: &[&str], ns: &str, repo: Option<&Path>) -> Output {
    let cmd = Weft::new(args).cluster().root(ns).env("WEFT_LOG", "warn");
    match repo {
        Some(repo) => cmd.repo(repo),
        None => cmd,
    }
    .output()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn weaveclouds(client: kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "cloud.weave.works".into(),
        version: "v1beta1".into(),
        api_version: "cloud.weave.works/v1beta1".into(),
        kind: "WeaveCloud".into(),
        plural: "weaveclouds".into(),
    };
    Api::namespaced_with(client, ns, &ar)
}

async fn add_finalizer(api: &Api<DynamicObject>) {
    api.patch(
        "wc",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["weft.io/agents"]}})),
    )
    .await
    .expect("add the finalizer a daemon would");
}

// Two threads: the fake daemon renews its Lease while the CLI runs (a blocking call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_releases_finalizers_and_prunes_what_weft_created() {
    let ns = TestNamespace::new("uninstall").await;
    let name = ns.name().to_string();
    let client = ns.client();
    cluster::install_crds(&client).await;
    let repo = tempfile::tempdir().expect("repo");
    for i in 0..3 {
        std::fs::write(
            repo.path().join(format!("cm-{i}.yaml")),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  namespace: {name}\ndata:\n  v: \"1\"\n"),
        )
        .expect("write");
    }
    std::fs::write(
        repo.path().join("wc.yaml"),
        weavecloud(&name)
            .name("wc")
            .token("weave-cloud", Some("token"))
            .only_flux()
            .yaml(),
    )
    .expect("write");
    let synced = weft(&["sync", "--timeout", "60s"], &name, Some(repo.path()));
    assert!(synced.status.success(), "{}", text(&synced));
    let wcs = weaveclouds(client.clone(), &name);
    add_finalizer(&wcs).await;

    // A daemon holds the Lease: refused, nothing changed.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &name);
    let lease_name = weft::daemon::leader::lease_name(&name);
    leases
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some(lease_name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("weft-7d9f_1".into()),
                    lease_duration_seconds: Some(60),
                    renew_time: Some(MicroTime(Timestamp::now())),
                    ..Default::default()
                }),
            },
        )
        .await
        .expect("lease");
    // It renews its Lease (a live holder is seen renewing, whatever its renewTime says).
    let renewing = {
        let leases = leases.clone();
        let lease_name = lease_name.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let renewed = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
                let _ = leases
                    .patch(&lease_name, &PatchParams::default(), &Patch::Merge(renewed))
                    .await;
            }
        })
    };
    let refused = weft(&["uninstall"], &name, None);
    renewing.abort();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("a live daemon (`weft-7d9f_1`) holds Lease"),
        "{}",
        text(&refused)
    );
    let wc = wcs.get("wc").await.expect("wc");
    assert_eq!(wc.metadata.finalizers, Some(vec!["weft.io/agents".into()]));

    // The daemon is gone (killed: its Lease is no longer renewed, and is seen unchanged for its
    // 3 s): the finalizer is removed, the objects stay.
    leases
        .patch(
            &lease_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"leaseDurationSeconds": 3}})),
        )
        .await
        .expect("stale lease");
    let out = weft(&["uninstall"], &name, None);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("WeaveCloud/{name}/wc: Weft's finalizer removed")),
        "{}",
        text(&out)
    );
    let wc = wcs.get("wc").await.expect("wc");
    assert!(wc.metadata.finalizers.unwrap_or_default().is_empty());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    assert!(cms.get_opt("cm-0").await.expect("get").is_some());

    // --prune: what Weft created goes, its records too; the namespace then deletes at once.
    add_finalizer(&wcs).await;
    let out = weft(&["uninstall", "--prune"], &name, None);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains(&format!("ConfigMap/{name}/cm-0 deleted")),
        "{said}"
    );
    assert!(
        said.contains(&format!("WeaveCloud/{name}/wc deleted")),
        "{said}"
    );
    for i in 0..3 {
        assert!(cms
            .get_opt(&format!("cm-{i}"))
            .await
            .expect("get")
            .is_none());
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &name);
    assert!(deployments
        .get_opt("weave-flux-agent")
        .await
        .expect("get")
        .is_none());
    let inventory =
        weft::apply::inventory::configmap_name(&weft::render::Owner::root(&name, &name));
    assert!(
        cms.get_opt(&inventory).await.expect("get").is_none(),
        "{said}"
    );
    assert!(leases.get_opt(&lease_name).await.expect("get").is_none());
    let deadline = Instant::now() + Duration::from_secs(30);
    while wcs.get_opt("wc").await.expect("get").is_some() {
        assert!(
            Instant::now() < deadline,
            "the WeaveCloud is stuck terminating"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete namespace");
    let deadline = Instant::now() + Duration::from_secs(60);
    while namespaces.get_opt(&name).await.expect("get").is_some() {
        assert!(
            Instant::now() < deadline,
            "namespace {name} is stuck terminating"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ns.delete().await;
}
