//! Issue 48 item 6: no hot loops from what tenants write, measured on the real control plane
//! with the daemon running behind an API proxy that counts what it asks.
//!
//! - a WeaveCloud whose agents partly fail to apply (a ResourceQuota in its namespace refuses
//!   its Deployments and Service, several objects at once) writes its status when it changes,
//!   not on every reconcile: its failures are listed in one order;
//! - 32 `--ui` live streams open while a tenant annotates their own (ignored) WeaveCloud every
//!   0.45 s add no API reads per annotation and stream.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, watcher};
use kube::Api;
use serde_json::json;

use super::{config_repo, config_repo_with, create_weavecloud, remove_flux_rbac, tenant_of};
use crate::support;
use crate::support::conditions::ready;
use support::cluster::{create_token_secret, TestNamespace};
use support::daemon::{Daemon, DaemonOptions};
use support::faults::ApiProxy;
use support::manifests::weavecloud;
use support::wait::wait_for;
use weft::api::WeaveCloud;

/// How long the writes of a settled WeaveCloud are counted.
const WINDOW: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weavecloud_whose_agents_partly_fail_writes_its_status_only_when_it_changes() {
    let weft_ns = TestNamespace::new("attack-loop").await;
    let admin = weft_ns.client();
    support::cluster::install_crds(&admin).await;
    let agents = TestNamespace::new("attack-loop-wc").await;
    let n = agents.name().to_string();
    create_token_secret(&agents.client(), &n, "weave-cloud-token", "operator-token").await;
    // Whoever may write ResourceQuotas in the namespace refuses the agents' Deployments and
    // Service: several of the agents' objects fail together, the others apply.
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-workloads"},
        "spec": {"hard": {"count/deployments.apps": "0", "services": "0"}},
    }))
    .unwrap();
    agents
        .api::<ResourceQuota>()
        .create(&PostParams::default(), &quota)
        .await
        .expect("the ResourceQuota");
    let wc = weavecloud(&n)
        .auto_update(false)
        .token("weave-cloud-token", Some("token"))
        .only_flux()
        .yaml();
    let (_host, _server, url) = config_repo_with(&[("weave/weave-cloud.yaml", wc)]);
    let proxy = ApiProxy::start().await;
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        kubeconfig: Some(proxy.kubeconfig().to_path_buf()),
        ..DaemonOptions::new(&url, weft_ns.name())
    });
    let wcs: Api<WeaveCloud> = agents.api();
    let failed = wait_for(
        "the WeaveCloud says its agents failed to apply",
        Duration::from_secs(120),
        &|| d.logs(),
        async || {
            let wc = wcs.get("weave-cloud").await.ok()?;
            ready(&wc)
                .filter(|(status, reason, _)| status == "False" && reason == "ReconcileFailed")
        },
    )
    .await;
    eprintln!("Ready: {failed:?}");

    // From now on, every write of the WeaveCloud is a new resourceVersion on its watch.
    let mut versions = watcher(
        wcs.clone(),
        watcher::Config::default().fields("metadata.name=weave-cloud"),
    )
    .boxed();
    let status_path = format!("/namespaces/{n}/weaveclouds/weave-cloud/status");
    let status_writes = || {
        proxy
            .writes()
            .iter()
            // `METHOD path?query`: the query (fieldManager, …) is not the path.
            .filter(|(_, w)| {
                w.split('?')
                    .next()
                    .is_some_and(|p| p.ends_with(&status_path))
            })
            .count()
    };
    let writes_before = status_writes();
    let start = Instant::now();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(left) = WINDOW.checked_sub(start.elapsed()) {
        match tokio::time::timeout(left, versions.next()).await {
            Ok(Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)))) => {
                seen.insert(o.metadata.resource_version.unwrap_or_default());
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    let writes = status_writes() - writes_before;
    let last = wcs.get("weave-cloud").await.expect("the WeaveCloud");
    eprintln!(
        "over {WINDOW:?}: {} resourceVersions of the WeaveCloud, {writes} status writes by Weft; Ready {:?}",
        seen.len(),
        ready(&last)
    );
    let (_, _, message) = ready(&last).expect("a Ready condition");
    assert!(
        message.contains('\n') || message.matches("weave-flux").count() >= 2,
        "the agents fail in several objects, which is what can be listed in any order: {message}"
    );
    // The first is the version the watch starts from; a settled WeaveCloud is not rewritten.
    assert!(
        seen.len() <= 2 && writes <= 1,
        "a WeaveCloud whose agents keep failing the same way was rewritten {writes} times in {WINDOW:?} ({} resourceVersions)",
        seen.len()
    );
    drop(d);
    let _ = wcs
        .patch(
            "weave-cloud",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    remove_flux_rbac(&admin, &n).await;
    agents.delete().await;
    weft_ns.delete().await;
}

/// Open `count` live streams of the WeaveClouds page on `d`; returns those answered 200, each
/// once it sent its first body.
async fn open_live_streams(d: &Daemon, count: usize) -> (Vec<reqwest::Response>, usize) {
    let http = reqwest::Client::new();
    let mut open = Vec::new();
    let mut refused = 0;
    for _ in 0..count {
        let mut r = http
            .get(format!("{}/live?path=/weaveclouds", d.base()))
            .send()
            .await
            .expect("GET /live");
        if r.status() != reqwest::StatusCode::OK {
            refused += 1;
            continue;
        }
        let mut got = String::new();
        while !got.contains("event: main") {
            let chunk = tokio::time::timeout(Duration::from_secs(30), r.chunk())
                .await
                .expect("the first body within 30 s")
                .expect("a live stream")
                .expect("a live stream still open");
            got.push_str(&String::from_utf8_lossy(&chunk));
        }
        open.push(r);
    }
    (open, refused)
}

/// Annotate the tenant's WeaveCloud every 0.45 s for `window`; returns the count.
async fn annotate_for(wcs: &Api<WeaveCloud>, window: Duration) -> usize {
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < window {
        n += 1;
        wcs.patch(
            "tenant-wc",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"tenant/note": n.to_string()}}})),
        )
        .await
        .expect("the tenant annotates their WeaveCloud");
        tokio::time::sleep(Duration::from_millis(450)).await;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_streams_do_not_multiply_api_reads_when_a_tenant_annotates() {
    let weft_ns = TestNamespace::new("attack-live").await;
    let admin = weft_ns.client();
    support::cluster::install_crds(&admin).await;
    let tenant_ns = TestNamespace::new("attack-live-t").await;
    let tenant = tenant_of(&tenant_ns).await;
    create_weavecloud(&tenant, tenant_ns.name(), "tenant-wc", json!({})).await;
    let (_host, _server, url) = config_repo(weft_ns.name());
    let proxy = ApiProxy::start().await;
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        kubeconfig: Some(proxy.kubeconfig().to_path_buf()),
        extra: vec!["--ui".into()],
        ..DaemonOptions::new(&url, weft_ns.name())
    });
    let wcs: Api<WeaveCloud> = Api::namespaced(tenant.clone(), tenant_ns.name());
    wait_for(
        "the tenant's WeaveCloud is ignored, and says so",
        Duration::from_secs(60),
        &|| d.logs(),
        async || {
            let wc = wcs.get("tenant-wc").await.ok()?;
            ready(&wc).filter(|(_, reason, _)| reason == "NotReconciled")
        },
    )
    .await;
    wait_for(
        "the root's first pass",
        Duration::from_secs(60),
        &|| d.logs(),
        async || {
            let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
                admin.clone(),
                weft_ns.name(),
            );
            cms.get_opt("operator").await.ok().flatten()
        },
    )
    .await;

    // The same window and annotations, first with no page open, then with 32 live streams.
    let window = Duration::from_secs(10);
    let before = proxy.counts();
    let quiet_annotations = annotate_for(&wcs, window).await;
    let quiet = proxy.counts().since(&before);
    let (streams, refused) = open_live_streams(&d, 32).await;
    let before = proxy.counts();
    let annotations = annotate_for(&wcs, window).await;
    let watched = proxy.counts().since(&before);
    eprintln!(
        "{quiet_annotations} annotations, no live page: {} reads; {annotations} annotations, {} live streams ({refused} refused): {} reads",
        quiet.reads,
        streams.len(),
        watched.reads
    );
    assert!(!streams.is_empty(), "some live streams are open");
    // A page re-rendered on its refresh (10 s) reads the cluster a few times; one read per
    // annotation and stream would be hundreds.
    assert!(
        watched.reads <= quiet.reads + 60,
        "{annotations} annotations of an ignored WeaveCloud with {} live streams open made {} API reads, {} without",
        streams.len(),
        watched.reads,
        quiet.reads
    );
    drop(streams);
    drop(d);
    tenant_ns.delete().await;
    weft_ns.delete().await;
}
