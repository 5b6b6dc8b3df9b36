//! Agent auto-update on the real control plane, with a channel served over HTTP on 127.0.0.1:
//! a new version updates the agents; a bad digest is refused and nothing changes; a bundle whose
//! pods never become ready is rolled back and marked bad; a pinned range is respected;
//! `autoUpdate: false` changes nothing; a restarted Weft keeps the version; the WeaveCloud
//! controller keeps `status.nextUpdateCheck` and runs a check on request; a bundle too large for
//! the cache is refused before it rolls out; a check is a step of the WeaveCloud's reconcile,
//! which renders the WeaveCloud as it is and keeps a rollback's verdict.

use crate::support;
use crate::support::channel as channel_fixtures;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::Api;
use serde_json::json;

use channel_fixtures::{
    broken_bundle_files, bundle_files, flux_image, ChannelServer, Published, BUILTIN_FLUX_IMAGE,
};
use support::cluster::TestNamespace;
use support::manifests;
use weft::api::conditions::ConditionStatus;
use weft::api::weavecloud::WeaveCloud;
use weft::daemon::namespaces::WatchNamespaces;
use weft::daemon::state::DaemonState;
use weft::daemon::status::{DaemonStatus, OwnerStatus};
use weft::daemon::updater::{
    cache_configmap_name, AgentBundles, UpdateOptions, UpdateOutcome, Updater, DIGEST_KEY,
    MAX_CACHED_ARCHIVE_BYTES, REASON_ROLLED_BACK, VERSION_KEY,
};
use weft::server::{self, ServerState};
use weft::source::fetch_policy::{ChannelPolicy, UrlAllowList};

const FLUX: &str = "weave-flux-agent";

/// A namespace with the token Secret and a WeaveCloud that runs only flux (fewer pods), polls
/// `server`'s channel and has the other `general` fields (values written as YAML).
async fn weavecloud(
    prefix: &str,
    server: &ChannelServer,
    general: &[(&str, &str)],
) -> (TestNamespace, WeaveCloud) {
    let ns = TestNamespace::new(prefix).await;
    support::cluster::install_crds(&ns.client()).await;
    support::cluster::create_token_secret(&ns.client(), ns.name(), "weave-cloud", "test-token")
        .await;
    let mut wc = manifests::weavecloud(ns.name()).poll_url(&server.channel_url());
    for (key, value) in general {
        wc = wc.general(key, value);
    }
    let wc = wc.token("weave-cloud", None).only_flux().object();
    let api: Api<WeaveCloud> = ns.api();
    let wc = api.create(&PostParams::default(), &wc).await.unwrap();
    (ns, wc)
}

/// An updater with a daemon state of its own (a fresh Weft: nothing in memory).
fn updater(ns: &TestNamespace, health_timeout: Duration) -> Updater {
    updater_with(state(ns, DaemonStatus::default()), ns, health_timeout)
}

/// A daemon state that acts only on the test's namespace, as `--watch-namespaces` would: the
/// tests of this file run at once, and a scheduler watching every namespace would check (and
/// roll out) the other tests' WeaveClouds too.
fn state(ns: &TestNamespace, status: DaemonStatus) -> DaemonState {
    DaemonState::new(ns.client(), ns.name(), status)
        .with_watch_namespaces(WatchNamespaces::only([ns.name()]))
}

/// The daemon's pass settings, for the updater and the WeaveCloud controller alike.
fn settings(ns: &TestNamespace) -> Arc<weft::pass::PassSettings> {
    // The test namespace stands in for Weft's: the cached bundle goes away with it.
    Arc::new(weft::pass::PassSettings {
        weft_namespace: ns.name().to_string(),
        poll_interval: Duration::from_millis(500),
        ..Default::default()
    })
}

fn updater_with(state: DaemonState, ns: &TestNamespace, health_timeout: Duration) -> Updater {
    let opts = UpdateOptions {
        pass: settings(ns),
        health_timeout,
        // The channels are plain-http servers on loopback, not `https://<wcHostname>/`: allowed
        // as an operator would with --allowed-channels (the refusal has its own tests).
        allowed_channels: ChannelPolicy {
            allowed: Some(UrlAllowList::parse("http://").expect("prefix")),
        },
        ..Default::default()
    };
    Updater::new(state, opts)
}

async fn fresh(ns: &TestNamespace) -> WeaveCloud {
    let api: Api<WeaveCloud> = ns.api();
    api.get("weave-cloud").await.unwrap()
}

async fn flux(ns: &TestNamespace) -> Deployment {
    let api: Api<Deployment> = ns.api();
    api.get(FLUX).await.unwrap()
}

fn image_of(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone()
        .unwrap()
}

fn node_selector_of(d: &Deployment) -> Option<std::collections::BTreeMap<String, String>> {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .node_selector
        .clone()
}

fn available(d: &Deployment) -> bool {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
        })
        && d.status.as_ref().and_then(|s| s.available_replicas) == Some(1)
}

/// Event reasons recorded for the WeaveCloud (events.k8s.io), waiting a moment for them.
async fn has_event(ns: &TestNamespace, reason: &str) -> Vec<String> {
    let api: Api<Event> = ns.api();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let notes: Vec<String> = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect();
        if !notes.is_empty() || Instant::now() > deadline {
            return notes;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn cached(ns: &TestNamespace) -> Option<ConfigMap> {
    let api: Api<ConfigMap> = ns.api();
    api.get_opt(&cache_configmap_name(ns.name(), "weave-cloud"))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_new_version_in_the_channel_updates_the_agents() {
    let server = ChannelServer::start();
    server.publish(&[Published::new("1.1.0", &bundle_files("1.1.0"))]);
    let (ns, wc) = weavecloud("update-new", &server, &[]).await;
    let updater = updater(&ns, Duration::from_secs(120));

    // First install: the built-in bundle.
    assert_eq!(
        updater.apply_active(&wc).await.unwrap().to_string(),
        "1.0.0"
    );
    assert_eq!(image_of(&flux(&ns).await), BUILTIN_FLUX_IMAGE);

    let report = updater.check(&fresh(&ns).await).await;
    assert_eq!(
        report.outcome,
        UpdateOutcome::Updated {
            from: "1.0.0".into(),
            to: "1.1.0".into()
        }
    );
    assert_eq!(report.current, "1.1.0");
    let d = flux(&ns).await;
    assert_eq!(image_of(&d), flux_image("1.1.0"));
    assert!(
        available(&d),
        "the health gate passed, so flux is available"
    );

    let status = fresh(&ns).await.status.unwrap();
    assert_eq!(status.agent_version.as_deref(), Some("1.1.0"));
    assert_eq!(status.available_version.as_deref(), Some("1.1.0"));
    assert!(status.bad_versions.is_empty());

    let cm = cached(&ns)
        .await
        .expect("the chosen bundle is kept in a ConfigMap");
    let data = cm.data.unwrap();
    assert_eq!(data[VERSION_KEY], "1.1.0");
    let archive = &cm.binary_data.unwrap()["bundle.tar.gz"].0;
    assert_eq!(data[DIGEST_KEY], channel_fixtures::sha256(archive));

    let notes = has_event(&ns, "AgentsUpdated").await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("from bundle 1.0.0 to 1.1.0")),
        "{notes:?}"
    );

    // Checked again: nothing newer, nothing written.
    let generation = flux(&ns).await.metadata.generation;
    let again = updater.check(&fresh(&ns).await).await;
    assert_eq!(again.outcome, UpdateOutcome::UpToDate);
    assert_eq!(flux(&ns).await.metadata.generation, generation);
    ns.delete().await;
}

#[tokio::test]
async fn a_bundle_with_a_wrong_digest_is_refused_and_nothing_changes() {
    let server = ChannelServer::start();
    server.publish(&[Published::new("1.1.0", &bundle_files("1.1.0")).with_wrong_digest()]);
    let (ns, wc) = weavecloud("update-digest", &server, &[]).await;
    let updater = updater(&ns, Duration::from_secs(120));
    updater.apply_active(&wc).await.unwrap();
    let before = flux(&ns).await;

    let report = updater.check(&fresh(&ns).await).await;
    match &report.outcome {
        UpdateOutcome::Refused { version, reason } => {
            assert_eq!(version, "1.1.0");
            assert!(reason.contains("sha256 mismatch"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(report.current, "1.0.0");
    let after = flux(&ns).await;
    assert_eq!(after.metadata.generation, before.metadata.generation);
    assert_eq!(image_of(&after), BUILTIN_FLUX_IMAGE);
    assert!(cached(&ns).await.is_none(), "nothing was cached");
    let status = fresh(&ns).await.status.unwrap_or_default();
    assert_ne!(status.agent_version.as_deref(), Some("1.1.0"));
    let notes = has_event(&ns, "AgentBundleRefused").await;
    assert!(
        notes.iter().any(|n| n.contains("sha256 mismatch")),
        "{notes:?}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_bundle_whose_agents_never_become_ready_is_rolled_back_and_marked_bad() {
    let server = ChannelServer::start();
    server.publish(&[
        Published::new("1.1.0", &bundle_files("1.1.0")),
        Published::new("1.2.0", &broken_bundle_files("1.2.0")),
    ]);
    let (ns, wc) = weavecloud("update-rollback", &server, &[]).await;
    let updater = updater(&ns, Duration::from_secs(20));
    updater.apply_active(&wc).await.unwrap();

    let report = updater.check(&fresh(&ns).await).await;
    match &report.outcome {
        UpdateOutcome::RolledBack { from, to, reason } => {
            assert_eq!((from.as_str(), to.as_str()), ("1.2.0", "1.0.0"));
            assert!(
                reason.contains(FLUX),
                "the reason names what was not ready: {reason}"
            );
        }
        other => panic!("expected a rollback, got {other:?}"),
    }
    // Back on the previous bundle, and healthy again.
    let api: Api<Deployment> = ns.api();
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(api, FLUX, |d: Option<&Deployment>| d.is_some_and(available)),
    )
    .await
    .expect("flux available again after the rollback")
    .unwrap();
    let d = flux(&ns).await;
    assert_eq!(image_of(&d), BUILTIN_FLUX_IMAGE);
    assert_eq!(node_selector_of(&d), None);

    let status = fresh(&ns).await.status.unwrap();
    assert_eq!(status.bad_versions, vec!["1.2.0".to_string()]);
    assert_eq!(status.agent_version.as_deref(), Some("1.0.0"));
    assert_eq!(status.available_version.as_deref(), Some("1.1.0"));
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    assert_eq!(ready.reason, REASON_ROLLED_BACK);
    assert!(ready.message.contains("1.2.0"), "{}", ready.message);
    assert!(
        cached(&ns).await.is_none(),
        "the broken bundle was not kept"
    );
    let notes = has_event(&ns, "AgentUpdateRolledBack").await;
    assert!(
        notes.iter().any(|n| n.contains("rolled back to 1.0.0")),
        "{notes:?}"
    );

    // The bad version is not retried: the next check takes the newest good one.
    let next = updater.check(&fresh(&ns).await).await;
    assert_eq!(
        next.outcome,
        UpdateOutcome::Updated {
            from: "1.0.0".into(),
            to: "1.1.0".into()
        }
    );
    assert_eq!(image_of(&flux(&ns).await), flux_image("1.1.0"));
    let status = fresh(&ns).await.status.unwrap();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::True, "AgentsUpdated"),
        "a successful update ends the rollback's Ready=False"
    );
    let last = updater.check(&fresh(&ns).await).await;
    assert_eq!(last.outcome, UpdateOutcome::UpToDate);
    ns.delete().await;
}

#[tokio::test]
async fn a_pinned_range_is_respected_and_auto_update_off_changes_nothing() {
    let server = ChannelServer::start();
    server.publish(&[
        Published::new("1.1.0", &bundle_files("1.1.0")),
        Published::new("2.0.0", &bundle_files("2.0.0")),
    ]);
    let (ns, wc) = weavecloud("update-pin", &server, &[("agentVersion", "\"1.x\"")]).await;
    let updater = updater(&ns, Duration::from_secs(120));
    updater.apply_active(&wc).await.unwrap();
    let report = updater.check(&fresh(&ns).await).await;
    assert_eq!(
        report.outcome,
        UpdateOutcome::Updated {
            from: "1.0.0".into(),
            to: "1.1.0".into()
        }
    );
    assert_eq!(report.available.as_deref(), Some("1.1.0"));
    assert_eq!(image_of(&flux(&ns).await), flux_image("1.1.0"));
    assert_eq!(
        fresh(&ns)
            .await
            .status
            .unwrap()
            .available_version
            .as_deref(),
        Some("1.1.0")
    );
    assert_eq!(
        updater.check(&fresh(&ns).await).await.outcome,
        UpdateOutcome::UpToDate
    );

    // Unpinned but autoUpdate off: 2.0.0 is shown as available and not installed.
    let api: Api<WeaveCloud> = ns.api();
    api.patch(
        "weave-cloud",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"general": {"agentVersion": null, "autoUpdate": false}}})),
    )
    .await
    .unwrap();
    let generation = flux(&ns).await.metadata.generation;
    let off = updater.check(&fresh(&ns).await).await;
    assert_eq!(off.outcome, UpdateOutcome::AutoUpdateOff);
    assert_eq!(off.current, "1.1.0");
    assert_eq!(off.available.as_deref(), Some("2.0.0"));
    assert_eq!(flux(&ns).await.metadata.generation, generation);
    assert_eq!(
        fresh(&ns)
            .await
            .status
            .unwrap()
            .available_version
            .as_deref(),
        Some("2.0.0")
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_restarted_weft_keeps_the_version_from_the_cluster() {
    let server = ChannelServer::start();
    server.publish(&[Published::new("1.1.0", &bundle_files("1.1.0"))]);
    let (ns, wc) = weavecloud("update-restart", &server, &[]).await;
    {
        let first = updater(&ns, Duration::from_secs(120));
        first.apply_active(&wc).await.unwrap();
        let r = first.check(&fresh(&ns).await).await;
        assert_eq!(r.current, "1.1.0", "{:?}", r.outcome);
    }
    // The channel goes away; a new Weft (nothing in memory) starts.
    drop(server);
    let generation = flux(&ns).await.metadata.generation;
    let second = updater(&ns, Duration::from_secs(120));
    let active = second
        .bundles()
        .active(ns.name(), "weave-cloud")
        .await
        .unwrap();
    assert_eq!(active.version().to_string(), "1.1.0");
    assert_eq!(
        second
            .apply_active(&fresh(&ns).await)
            .await
            .unwrap()
            .to_string(),
        "1.1.0"
    );
    let d = flux(&ns).await;
    assert_eq!(image_of(&d), flux_image("1.1.0"));
    assert_eq!(d.metadata.generation, generation, "nothing to change");
    // An unreachable channel is a failed check, not a change.
    let r = second.check(&fresh(&ns).await).await;
    assert!(
        matches!(&r.outcome, UpdateOutcome::Failed { reason } if reason.contains("channel.yaml")),
        "{:?}",
        r.outcome
    );
    assert_eq!(r.current, "1.1.0");
    assert_eq!(image_of(&flux(&ns).await), flux_image("1.1.0"));

    // A cache whose archive does not match its recorded digest is not used.
    let cms: Api<ConfigMap> = ns.api();
    cms.patch(
        &cache_configmap_name(ns.name(), "weave-cloud"),
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {DIGEST_KEY: "0".repeat(64)}})),
    )
    .await
    .unwrap();
    let third = AgentBundles::new(ns.client(), ns.name());
    let active = third.active(ns.name(), "weave-cloud").await.unwrap();
    assert_eq!(active.version().to_string(), "1.0.0", "the built-in bundle");
    ns.delete().await;
}

/// The daemon's HTTP server (real axum on 127.0.0.1) sharing the daemon state (status, metrics
/// and the update request handle) with the updater; returns its base URL and a stop handle.
/// The daemon's HTTP server on loopback: (base of port `http`, base of port `hooks`, stop).
async fn http_server(daemon: DaemonState) -> (String, String, tokio::sync::oneshot::Sender<()>) {
    let (_ready_tx, ready) = tokio::sync::watch::channel(true);
    let state = ServerState::new(daemon, "main", ready, Duration::from_secs(5));
    state.set_sync_token(Some(Arc::new(b"sync-token".to_vec())));
    let listeners = server::Listeners::bind("127.0.0.1:0", "127.0.0.1:0")
        .await
        .unwrap();
    // The sync endpoint is on the hooks port; status and metrics on the http port.
    let base = format!("http://{}", listeners.http.local_addr().unwrap());
    let hooks = format!("http://{}", listeners.hooks.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server::serve(listeners, state, async move {
        let _ = rx.await;
        // Keep the ready sender alive as long as the server.
        drop(_ready_tx);
    }));
    (base, hooks, tx)
}

#[tokio::test]
async fn the_scheduler_shows_the_next_check_and_the_sync_endpoint_runs_one() {
    let server = ChannelServer::start();
    server.publish(&[Published::new("1.1.0", &bundle_files("1.1.0"))]);
    // Once a year: the update must come from the request, not the schedule.
    let (ns, wc) = weavecloud(
        "update-schedule",
        &server,
        &[("updateSchedule", "\"0 0 1 1 *\"")],
    )
    .await;
    let owner_key = format!("WeaveCloud/{}/weave-cloud", ns.name());
    let state = state(
        &ns,
        DaemonStatus {
            leader: true,
            ..Default::default()
        },
    );
    // The WeaveCloud controller's entry, which the updater fills with versions.
    state.update_status(|s| {
        s.set_owner(OwnerStatus {
            kind: "WeaveCloud".into(),
            namespace: ns.name().into(),
            name: "weave-cloud".into(),
            ready: "True".into(),
            ..Default::default()
        })
    });
    let updater = Arc::new(updater_with(state.clone(), &ns, Duration::from_secs(120)));
    let (base, hooks, http_stop) = http_server(state.clone()).await;
    updater.apply_active(&wc).await.unwrap();
    // The WeaveCloud controller, whose reconcile runs the update checks (as `weft run` runs it).
    let stop = tokio_util::sync::CancellationToken::new();
    let ctx = weft::daemon::weavecloud::Context::new(
        state.clone(),
        settings(&ns),
        weft::daemon::shutdown::Shutdown::new(stop.clone(), Duration::from_secs(5)),
    )
    .with_updater(updater.clone());
    let runner = tokio::spawn(weft::daemon::weavecloud::run(ctx));
    let api: Api<WeaveCloud> = ns.api();
    let next = tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(api.clone(), "weave-cloud", |w: Option<&WeaveCloud>| {
            w.and_then(|w| w.status.as_ref())
                .is_some_and(|s| s.next_update_check.is_some())
        }),
    )
    .await
    .expect("status.nextUpdateCheck is set")
    .unwrap()
    .unwrap()
    .status
    .unwrap()
    .next_update_check
    .unwrap();
    let expected_year = k8s_openapi::jiff::Timestamp::now()
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
        .year()
        + 1;
    assert_eq!(next, format!("{expected_year}-01-01T00:00:00Z"));
    assert_eq!(
        image_of(&flux(&ns).await),
        BUILTIN_FLUX_IMAGE,
        "not due yet"
    );

    let http = reqwest::Client::new();
    let resp = http
        .post(format!("{hooks}/api/v1/sync?update=true"))
        .bearer_auth("sync-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202, "{:?}", resp.text().await);
    let d: Api<Deployment> = ns.api();
    let want = flux_image("1.1.0");
    tokio::time::timeout(
        Duration::from_secs(120),
        await_condition(d, FLUX, move |d: Option<&Deployment>| {
            d.is_some_and(|d| image_of(d) == want)
        }),
    )
    .await
    .expect("the requested check updated the agents")
    .unwrap();
    // The check ends after the health gate; then its versions are recorded.
    let deadline = Instant::now() + Duration::from_secs(120);
    let shown = loop {
        let body = http
            .get(format!("{base}/api/v1/status"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let s: serde_json::Value = serde_json::from_str(&body).unwrap();
        let owner = s["owners"][&owner_key].clone();
        if owner["version"] == "1.1.0" || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let owner = &shown["owners"][&owner_key];
    assert_eq!(owner["version"], "1.1.0", "{shown}");
    assert_eq!(owner["availableVersion"], "1.1.0", "{shown}");
    assert_eq!(owner["nextUpdateCheck"], next.as_str(), "{shown}");
    assert_eq!(shown["nextUpdateCheck"], next.as_str(), "{shown}");
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let labels = format!(
        "namespace=\"{}\",name=\"weave-cloud\",version=\"1.1.0\"",
        ns.name()
    );
    assert!(
        text.contains(&format!("weft_agent_bundle_version{{{labels}}} 1")),
        "{text}"
    );
    assert!(
        text.contains(&format!("weft_agent_bundle_available{{{labels}}} 1")),
        "{text}"
    );
    let v = &updater.versions()[&format!("{}/weave-cloud", ns.name())];
    assert_eq!(v.current.as_deref(), Some("1.1.0"));
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), runner)
        .await
        .expect("the controller stops")
        .unwrap();
    let _ = http_stop.send(());
    // The controller's finalizer: nothing prunes the agents of a deleted namespace.
    api.patch(
        "weave-cloud",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    ns.delete().await;
}

/// `n` bytes gzip cannot shrink (xorshift), so that an archive really is that large.
fn incompressible(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn a_bundle_the_cache_cannot_keep_is_refused_before_it_rolls_out() {
    // Issue 15: such a bundle used to roll out and then fail to be kept, so a restart took the
    // agents back to the cached version and the next check updated them again.
    let mut files = bundle_files("1.1.0");
    files.insert(
        "padding.bin".into(),
        incompressible(MAX_CACHED_ARCHIVE_BYTES),
    );
    let big = Published::new("1.1.0", &files);
    let size = big.archive.len();
    assert!(size > MAX_CACHED_ARCHIVE_BYTES, "{size}");
    let server = ChannelServer::start();
    server.publish(&[big]);
    let (ns, wc) = weavecloud("update-too-big", &server, &[]).await;
    let updater = updater(&ns, Duration::from_secs(120));
    updater.apply_active(&wc).await.unwrap();
    let before = flux(&ns).await;

    let report = updater.check(&fresh(&ns).await).await;
    let expected = format!(
        "agent bundle 1.1.0 is {size} bytes as an archive, more than the {MAX_CACHED_ARCHIVE_BYTES} bytes"
    );
    match &report.outcome {
        UpdateOutcome::Refused { version, reason } => {
            assert_eq!(version, "1.1.0");
            assert!(reason.contains(&expected), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(report.current, "1.0.0");
    let after = flux(&ns).await;
    assert_eq!(after.metadata.generation, before.metadata.generation);
    assert_eq!(image_of(&after), BUILTIN_FLUX_IMAGE, "nothing rolled out");
    assert!(cached(&ns).await.is_none(), "nothing was cached");
    let status = fresh(&ns).await.status.unwrap_or_default();
    assert_ne!(status.agent_version.as_deref(), Some("1.1.0"));
    assert!(status.bad_versions.is_empty(), "refused, not marked bad");
    let notes = has_event(&ns, "AgentBundleRefused").await;
    assert!(notes.iter().any(|n| n.contains(&expected)), "{notes:?}");
    // What the agents run survives a restart: the same version.
    let restarted = AgentBundles::new(ns.client(), ns.name());
    let active = restarted.active(ns.name(), "weave-cloud").await.unwrap();
    assert_eq!(active.version().to_string(), report.current);
    ns.delete().await;
}

/// Wait until `task` is done, at most `secs`.
async fn finished<T>(task: tokio::task::JoinHandle<T>, secs: u64) -> T {
    tokio::time::timeout(Duration::from_secs(secs), task)
        .await
        .expect("finished in time")
        .expect("no panic")
}

#[tokio::test]
async fn a_roll_out_renders_the_weavecloud_as_it_is_then_and_nothing_for_a_deleted_one() {
    let server = ChannelServer::start();
    server.publish(&[Published::new("1.1.0", &bundle_files("1.1.0"))]);
    let (ns, wc) = weavecloud("update-live", &server, &[]).await;
    let updater = updater(&ns, Duration::from_secs(120));
    updater.apply_active(&wc).await.unwrap();

    // The check starts from this copy; the WeaveCloud is edited after it was read.
    let stale = fresh(&ns).await;
    let api: Api<WeaveCloud> = ns.api();
    api.patch(
        "weave-cloud",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"flux": {"config": {"gitBranch": "live-branch"}}}})),
    )
    .await
    .unwrap();
    let report = updater.check(&stale).await;
    assert_eq!(
        report.outcome,
        UpdateOutcome::Updated {
            from: "1.0.0".into(),
            to: "1.1.0".into()
        }
    );
    let d = flux(&ns).await;
    assert_eq!(image_of(&d), flux_image("1.1.0"));
    let args = d.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(
        args.iter().any(|a| a == "--git-branch=live-branch"),
        "rendered from the WeaveCloud as it is, not the copy the check started from: {args:?}"
    );

    // Deleted after the copy the check starts from was read (a finalizer keeps it while it is
    // being deleted): nothing is rolled out for it.
    server.publish(&[
        Published::new("1.1.0", &bundle_files("1.1.0")),
        Published::new("1.2.0", &bundle_files("1.2.0")),
    ]);
    let hold = |f: serde_json::Value| json!({"metadata": {"finalizers": f}});
    api.patch(
        "weave-cloud",
        &PatchParams::default(),
        &Patch::Merge(hold(json!(["example.com/hold"]))),
    )
    .await
    .unwrap();
    let copy = fresh(&ns).await;
    api.delete("weave-cloud", &Default::default())
        .await
        .unwrap();
    let requests = server.requests();
    let report = updater.check(&copy).await;
    assert!(
        server.requests() >= requests + 2,
        "the channel and the bundle were fetched: the check stopped at the live WeaveCloud"
    );
    match &report.outcome {
        UpdateOutcome::Failed { reason } => {
            assert!(reason.contains("was deleted during the check"), "{reason}")
        }
        other => panic!("expected a failed check, got {other:?}"),
    }
    assert_eq!(image_of(&flux(&ns).await), flux_image("1.1.0"));
    assert_eq!(
        cached(&ns).await.unwrap().data.unwrap()[VERSION_KEY],
        "1.1.0"
    );
    api.patch(
        "weave-cloud",
        &PatchParams::default(),
        &Patch::Merge(hold(json!(null))),
    )
    .await
    .unwrap();
    ns.delete().await;
}

#[tokio::test]
async fn the_weavecloud_reconcile_runs_the_roll_out_and_its_rollback_and_keeps_the_verdict() {
    use weft::api::keys::AGENTS_FINALIZER;
    use weft::daemon::shutdown::Shutdown;
    use weft::daemon::weavecloud::{self, Context};
    let server = ChannelServer::start();
    server.publish(&[Published::new("1.2.0", &broken_bundle_files("1.2.0"))]);
    let (ns, wc) = weavecloud("update-ctl", &server, &[]).await;
    let state = state(&ns, DaemonStatus::default());
    let updater = Arc::new(updater_with(state.clone(), &ns, Duration::from_secs(10)));
    updater.apply_active(&wc).await.unwrap();
    let api: Api<WeaveCloud> = ns.api();
    let finalizers = |f: serde_json::Value| json!({"metadata": {"finalizers": f}});
    api.patch(
        "weave-cloud",
        &PatchParams::default(),
        &Patch::Merge(finalizers(json!([AGENTS_FINALIZER]))),
    )
    .await
    .unwrap();
    let ctx = Arc::new(
        Context::new(state.clone(), settings(&ns), Shutdown::never()).with_updater(updater.clone()),
    );
    // A first reconcile: the agents, and the next check (not due).
    weavecloud::reconcile(Arc::new(fresh(&ns).await), ctx.clone())
        .await
        .expect("the first reconcile succeeded");
    let before_check = fresh(&ns).await;
    assert!(before_check
        .status
        .as_ref()
        .is_some_and(|s| s.next_update_check.is_some()));

    // A check asked for over HTTP: the next reconcile runs it.
    state.update_requests().request();
    let reconcile = {
        let (ctx, wc) = (ctx.clone(), Arc::new(before_check.clone()));
        tokio::spawn(async move {
            weavecloud::reconcile(wc, ctx)
                .await
                .map_err(|e| e.to_string())
        })
    };
    // The roll-out has begun: 1.2.0's flux Deployment is applied, its pod never ready.
    let deployments: Api<Deployment> = ns.api();
    let broken = flux_image("1.2.0");
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(deployments, FLUX, move |d: Option<&Deployment>| {
            d.is_some_and(|d| image_of(d) == broken)
        }),
    )
    .await
    .expect("the roll-out applied 1.2.0")
    .unwrap();
    finished(reconcile, 180)
        .await
        .expect("the reconcile succeeded");
    // Rolled back to the earlier bundle, 1.2.0 marked bad, and the verdict in the status.
    assert_eq!(image_of(&flux(&ns).await), BUILTIN_FLUX_IMAGE);
    let ready_reason = |wc: &WeaveCloud| {
        wc.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.reason.clone())
    };
    let status = fresh(&ns).await.status.unwrap();
    assert_eq!(status.bad_versions, vec!["1.2.0".to_string()]);
    assert_eq!(
        ready_reason(&fresh(&ns).await).as_deref(),
        Some(REASON_ROLLED_BACK)
    );

    // A reconcile from a copy older than the rollback (a watch event not yet delivered) keeps
    // the verdict: the status decides, and nothing in memory. Its conditions are emptied, so
    // that it must write (a copy that matched what it computes would write nothing).
    let mut stale = before_check;
    if let Some(s) = stale.status.as_mut() {
        s.conditions.clear();
    }
    weavecloud::reconcile(Arc::new(stale), ctx.clone())
        .await
        .expect("the reconcile from a stale copy succeeded");
    assert_eq!(
        ready_reason(&fresh(&ns).await).as_deref(),
        Some(REASON_ROLLED_BACK)
    );
    // So does a restarted Weft (a fresh context and state).
    let fresh_state = DaemonState::new(ns.client(), ns.name(), DaemonStatus::default())
        .with_watch_namespaces(WatchNamespaces::only([ns.name()]));
    let restarted = Arc::new(Context::new(fresh_state, settings(&ns), Shutdown::never()));
    weavecloud::reconcile(Arc::new(fresh(&ns).await), restarted)
        .await
        .expect("the restarted reconcile succeeded");
    assert_eq!(
        ready_reason(&fresh(&ns).await).as_deref(),
        Some(REASON_ROLLED_BACK)
    );
    api.patch(
        "weave-cloud",
        &PatchParams::default(),
        &Patch::Merge(finalizers(json!(null))),
    )
    .await
    .unwrap();
    ns.delete().await;
}
