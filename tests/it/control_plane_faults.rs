//! The control plane itself fails under a running `weft run`: the API server is killed in the
//! middle of a pass and started again on the same etcd; etcd hangs for 30 s. Weft must fail the
//! pass cleanly, prune nothing in between, keep its inventory consistent, stay up (no crash
//! loop), say so in `/readyz`, and recover by itself.
//!
//! This binary has a control plane of its own (one per test binary), and its tests take turns:
//! each hurts the control plane for everyone.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::Api;

use support::cluster::TestNamespace;
use support::daemon::{Daemon, DaemonOptions, SYNC_TOKEN};
use support::faults::{wait_api_ready, Component};
use support::git_servers::ServedRepo;
use support::manifests::configmap;

/// One fault at a time.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
        .lock()
        .await
}

async fn request_sync(d: &Daemon) -> u16 {
    match reqwest::Client::new()
        .post(format!("{}/api/v1/sync", d.hooks_base()))
        .bearer_auth(SYNC_TOKEN)
        .timeout(Duration::from_secs(5))
        .send()
        .await
    {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// How many passes the daemon counted failed (`weft_passes_total{result="failed"}`).
async fn failed_passes(d: &Daemon) -> u64 {
    let body = reqwest::get(format!("{}/metrics", d.base()))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the metrics");
    body.lines()
        .find(|l| l.starts_with("weft_passes_total{result=\"failed\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Names and values of the ConfigMaps Weft applied in `ns` (the inventory excepted).
async fn applied(api: &Api<ConfigMap>) -> Vec<(String, String)> {
    let list = api
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=weft"))
        .await
        .expect("list");
    list.items
        .into_iter()
        .filter(|c| {
            !c.metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .starts_with("weft-inventory-")
        })
        .map(|c| {
            let value = c
                .data
                .and_then(|d| d.get("value").cloned())
                .unwrap_or_default();
            (c.metadata.name.unwrap_or_default(), value)
        })
        .collect()
}

async fn inventory(api: &Api<ConfigMap>, ns: &str) -> BTreeSet<String> {
    let owner = weft::render::Owner::root(ns, ns);
    let (entries, _) = weft::apply::inventory::read_root(&api.clone().into_client(), &owner, ns)
        .await
        .expect("read the inventory")
        .expect("an inventory");
    entries.into_iter().map(|e| e.name).collect()
}

fn count(logs: &str, what: &str) -> usize {
    logs.matches(what).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_killed_mid_pass_loses_nothing_and_prunes_nothing_early() {
    let _turn = serial().await;
    let ns = TestNamespace::new("fault-apiserver").await;
    let name = ns.name().to_string();
    let repo = ServedRepo::start();
    let work = &repo.work;
    for i in 0..400 {
        work.write(
            &format!("cm/c{i}.yaml"),
            configmap(&name, &format!("c{i}"), "v1"),
        );
    }
    for i in 0..20 {
        work.write(
            &format!("old/o{i}.yaml"),
            configmap(&name, &format!("o{i}"), "v1"),
        );
    }
    work.commit("v1");
    work.push();
    let url = repo.url();
    let d = Daemon::start(DaemonOptions {
        extra: vec!["--api-timeout".into(), "10s".into()],
        ..DaemonOptions::new(&url, &name)
    });
    d.wait_status("the first pass", Duration::from_secs(120), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    let first = d.status().await["lastPass"]["pass"].as_u64().expect("pass");

    // The next commit changes every object, removes 20 and adds 30.
    for i in 0..400 {
        work.write(
            &format!("cm/c{i}.yaml"),
            configmap(&name, &format!("c{i}"), "v2"),
        );
    }
    for i in 0..20 {
        work.remove(&format!("old/o{i}.yaml"));
    }
    for i in 0..30 {
        work.write(
            &format!("new/n{i}.yaml"),
            configmap(&name, &format!("n{i}"), "v2"),
        );
    }
    work.commit("v2");
    work.push();
    let changed_before = count(&d.logs(), "object changed");
    let failed_before = failed_passes(&d).await;
    assert_eq!(request_sync(&d).await, 202);
    // Kill the API server as soon as the pass has begun to write.
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&d.logs(), "object changed") == changed_before {
        assert!(
            Instant::now() < deadline,
            "the pass never wrote:\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let apiserver = Component::of("kube-apiserver");
    let argv = apiserver.kill();
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    apiserver.start(&argv);
    wait_api_ready(Duration::from_secs(120)).await;
    eprintln!("the API server was back after {:?}", killed.elapsed());

    // The interrupted pass failed, cleanly (counted failed, not lost: the status's last pass
    // may already be the next term's, which can succeed before this looks); the daemon is up.
    d.wait_status("the interrupted pass", Duration::from_secs(120), |s| {
        s["lastPass"]["pass"].as_u64().unwrap_or(0) > first
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while failed_passes(&d).await <= failed_before {
        assert!(
            Instant::now() < deadline,
            "the interrupted pass was not reported failed:\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), &name);
    let live = applied(&api).await;
    let names: BTreeSet<String> = live.iter().map(|(n, _)| n.clone()).collect();
    for i in 0..20 {
        assert!(
            names.contains(&format!("o{i}")),
            "o{i} was pruned by a pass that did not finish"
        );
    }
    // Everything live is in the inventory: nothing orphaned.
    let recorded = inventory(&api, &name).await;
    for n in &names {
        assert!(
            recorded.contains(n),
            "{n} exists but is not in the inventory"
        );
    }

    // The next pass completes the work: every object at v2, the removed ones pruned exactly.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        d.wait_status("leading again", Duration::from_secs(60), |s| {
            s["leader"] == true
        })
        .await;
        let before = d.status().await["lastPass"]["pass"].as_u64().unwrap_or(0);
        assert_eq!(request_sync(&d).await, 202);
        let s = d
            .wait_status("the next pass", Duration::from_secs(120), |s| {
                s["lastPass"]["pass"].as_u64().unwrap_or(0) > before
            })
            .await;
        if s["lastPass"]["result"] == "succeeded" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no pass succeeded after the restart: {s}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let live = applied(&api).await;
    assert_eq!(live.len(), 430, "{live:?}");
    assert!(live.iter().all(|(_, v)| v == "v2"), "{live:?}");
    assert!(live.iter().all(|(n, _)| !n.starts_with('o')));
    let recorded = inventory(&api, &name).await;
    let names: BTreeSet<String> = live.into_iter().map(|(n, _)| n).collect();
    assert_eq!(recorded, names);
    ns.delete().await;
}

async fn readyz(d: &Daemon) -> (u16, String) {
    match reqwest::Client::new()
        .get(format!("{}/readyz", d.base()))
        .timeout(Duration::from_secs(5))
        .send()
        .await
    {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_hung_for_30s_makes_weft_unready_not_dead_and_it_recovers_alone() {
    let _turn = serial().await;
    let ns = TestNamespace::new("fault-etcd").await;
    let name = ns.name().to_string();
    let repo = ServedRepo::start();
    let work = &repo.work;
    work.write("cm.yaml", configmap(&name, "etcd-test", "v1"));
    work.commit("v1");
    work.push();
    let url = repo.url();
    let interval = Duration::from_secs(5);
    let mut d = Daemon::start(DaemonOptions {
        interval: "5s",
        extra: vec!["--api-timeout".into(), "5s".into()],
        ..DaemonOptions::new(&url, &name)
    });
    d.wait_status("the first pass", Duration::from_secs(60), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    assert_eq!(readyz(&d).await.0, 200);

    let etcd = Component::of("etcd");
    etcd.pause();
    let paused = Instant::now();
    // A change pushed during the outage.
    work.write("cm.yaml", configmap(&name, "etcd-test", "v2"));
    work.commit("v2");
    work.push();
    let mut unready = None;
    while paused.elapsed() < Duration::from_secs(30) {
        let (code, body) = readyz(&d).await;
        if code == 503 && unready.is_none() {
            assert!(
                body.contains("ApiServerReady") || body.contains("Unreachable"),
                "{body}"
            );
            unready = Some(paused.elapsed());
        }
        assert_eq!(
            d.exited(),
            None,
            "weft run exited during the outage:\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    etcd.resume();
    let resumed = Instant::now();
    let unready = unready.expect("/readyz never turned false while etcd was hung");
    eprintln!("/readyz turned 503 {unready:?} after etcd hung");

    let api: Api<ConfigMap> = Api::namespaced(ns.client(), &name);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let value =
            match tokio::time::timeout(Duration::from_secs(5), api.get_opt("etcd-test")).await {
                Ok(Ok(Some(c))) => c.data.and_then(|d| d.get("value").cloned()),
                _ => None,
            };
        if value.as_deref() == Some("v2") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the change was never applied:\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let recovered = resumed.elapsed();
    eprintln!("the change pushed during the outage was applied {recovered:?} after etcd returned (interval {interval:?})");
    let deadline = Instant::now() + Duration::from_secs(30);
    while readyz(&d).await.0 != 200 {
        assert!(Instant::now() < deadline, "/readyz stayed 503");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(d.exited(), None, "{}", d.logs());
    // Within one interval of etcd's return, plus the Lease's retry (its renewals failed while
    // etcd hung, so the replica stood by and takes it again).
    assert!(
        recovered < interval + Duration::from_secs(20),
        "recovery took {recovered:?}"
    );
    ns.delete().await;
}
