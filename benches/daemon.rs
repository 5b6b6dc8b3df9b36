//! The daemon (`weft run`) against the test API server and a `git daemon` on loopback:
//! - latency from `git push` + a GitHub webhook to the object applied in the cluster, over
//!   repeated pushes (p50, p95, max);
//! - resident memory (VmRSS) of an idle daemon, and of one managing 5,000 objects (after the first
//!   pass, and after a no-op pass over them).
//!
//! The daemon runs as deployed, with the custom resource controllers (their watches included).
//!
//! Run: `cargo bench --bench daemon` (starts the control plane of tests/control-plane, or uses
//! `WEFT_TEST_KUBECONFIG`). `WEFT_BENCH_PUSHES` (default 30), `WEFT_BENCH_OBJECTS` (default 5000).

// The test support modules, at the crate root (daemon.rs refers to `super::cluster`).
#[path = "../tests/support/cluster.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod cluster;
#[path = "../tests/support/daemon.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod daemon;
#[path = "../tests/support/git_servers.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod git_servers;
#[path = "../tests/support/helm.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod helm;
#[path = "../tests/support/manifests.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod manifests;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use daemon::{github_push, Daemon, DaemonOptions};
use git_servers::{GitDaemon, RepoHost, WorkTree};
use manifests::configmap;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

async fn namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.to_string());
    for _ in 0..100 {
        if api.create(&PostParams::default(), &ns).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("cannot create namespace {name}");
}

/// Weft's CRDs (as `kubectl apply -f deploy/` installs them), so the controllers' watches run.
async fn install_crds(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in weft::api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply("weft-bench").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("CRD {name}: {e}"));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
}

async fn wait_value(api: &Api<ConfigMap>, name: &str, want: &str, d: &Daemon) -> Duration {
    let start = Instant::now();
    loop {
        let v = api
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|c| c.data)
            .and_then(|d| d.get("value").cloned());
        if v.as_deref() == Some(want) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{name} never became {want}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn latency(client: &kube::Client, pushes: usize) -> (Vec<Duration>, u64) {
    let ns = "weft-bench-daemon-latency";
    namespace(client, ns).await;
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write("cm.yaml", configmap(ns, "latency", "0"));
    work.commit("0");
    work.push();
    let url = server.url("config.git");
    // As deployed: with the custom resource controllers and their watches.
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&url, ns)
    });
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    wait_value(&api, "latency", "0", &d).await;
    d.wait_status("first pass", Duration::from_secs(30), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = rss_kib(d.pid());
    let mut out = Vec::new();
    for i in 1..=pushes {
        let value = i.to_string();
        work.write("cm.yaml", configmap(ns, "latency", &value));
        work.commit(&value);
        // The clock starts before the push: push + webhook + fetch + apply.
        let start = Instant::now();
        work.push();
        let (status, body) = github_push(&d, "refs/heads/main", None).await;
        assert_eq!(status, 202, "{body}");
        wait_value(&api, "latency", &value, &d).await;
        out.push(start.elapsed());
    }
    drop(d);
    drop(server);
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::default())
        .await;
    (out, idle)
}

async fn memory_with_objects(client: &kube::Client, objects: usize) -> (u64, u64, f64, f64) {
    let ns = "weft-bench-daemon-objects";
    namespace(client, ns).await;
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    for chunk in 0..objects.div_ceil(500) {
        let mut text = String::new();
        for i in chunk * 500..((chunk + 1) * 500).min(objects) {
            text.push_str("---\n");
            text.push_str(&configmap(ns, &format!("cm-{i:05}"), &i.to_string()));
        }
        work.write(&format!("objects/part-{chunk:03}.yaml"), text);
    }
    work.commit("objects");
    work.push();
    let url = server.url("config.git");
    let d = Daemon::start(DaemonOptions {
        extra: vec!["--concurrency".into(), "20".into()],
        controllers: true,
        ..DaemonOptions::new(&url, ns)
    });
    let s = d
        .wait_status(
            "first pass over the objects",
            Duration::from_secs(900),
            |s| s["lastPass"]["pass"] == 1,
        )
        .await;
    assert_eq!(s["lastPass"]["result"], "succeeded", "{s:#}");
    let first_seconds = s["lastPass"]["durationSeconds"].as_f64().unwrap_or(0.0);
    let after_first = rss_kib(d.pid());
    // A no-op pass (webhook, head unchanged): every object is read, none written.
    let (status, _) = github_push(&d, "refs/heads/main", None).await;
    assert_eq!(status, 202);
    let s = d
        .wait_status("no-op pass", Duration::from_secs(600), |s| {
            s["lastPass"]["pass"] == 2
        })
        .await;
    assert_eq!(
        s["lastPass"]["summary"]["unchanged"], objects as u64,
        "{s:#}"
    );
    let noop_seconds = s["lastPass"]["durationSeconds"].as_f64().unwrap_or(0.0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_noop = rss_kib(d.pid());
    drop(d);
    drop(server);
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::default())
        .await;
    (after_first, after_noop, first_seconds, noop_seconds)
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; this harness takes no arguments.
    let pushes = env_usize("WEFT_BENCH_PUSHES", 30);
    let objects = env_usize("WEFT_BENCH_OBJECTS", 5000);
    let client = cluster::client().await;
    install_crds(&client).await;

    let (mut lat, idle) = latency(&client, pushes).await;
    lat.sort();
    println!("daemon: push + webhook → applied, {} pushes", lat.len());
    println!(
        "  p50 {:.0} ms   p95 {:.0} ms   max {:.0} ms",
        percentile(&lat, 0.50).as_secs_f64() * 1000.0,
        percentile(&lat, 0.95).as_secs_f64() * 1000.0,
        lat.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    );
    println!(
        "daemon: resident memory idle (1 object): {:.1} MiB",
        idle as f64 / 1024.0
    );
    let (first, noop, first_s, noop_s) = memory_with_objects(&client, objects).await;
    println!(
        "daemon: {objects} objects: first pass {first_s:.1} s, RSS after it {:.1} MiB; no-op pass {noop_s:.1} s, RSS after it {:.1} MiB",
        first as f64 / 1024.0,
        noop as f64 / 1024.0
    );
}
