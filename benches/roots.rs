//! Many roots on three replicas next to one large root (issue 41 item 4), in one run against the
//! test control plane with three real `weft run` replicas and a `git daemon` on loopback:
//! - `WEFT_BENCH_ROOTS` (200) Root objects of `WEFT_BENCH_OBJECTS` (50) ConfigMaps each, split by
//!   the replicas through a Lease per root (the default 15 s Lease, or `WEFT_BENCH_LEASE`): the
//!   first pass of all (from the first Root created until every one is Ready), a no-op round
//!   (every root requested once through `weft.io/requested-at`, until each handled it), the
//!   memory per root (the three replicas' RSS with the roots minus their RSS with none, divided
//!   by the number of roots: fixed costs a replica pays once it holds any root are in it), the
//!   memory each further root adds (then `WEFT_BENCH_MORE` (100) roots more are created and passed
//!   twice like the first: the RSS they add, divided by their number), and the time to move a
//!   killed replica's roots (SIGKILL, until each of its roots is held by one of the two others
//!   and passed by its new holder);
//! - then one Root of `WEFT_BENCH_BIG` (10,000) ConfigMaps (a repository of its own, `big.git`) on the two
//!   surviving replicas: its first pass and a no-op pass, the same way.
//!
//! The no-op round and the large root's no-op pass are measured a second way too: asked by one
//! GitHub push of their repository sent to one replica, which the leader passes on over HTTP to
//! the replicas holding the roots (the replicas run as pods would, with `POD_IP` and their
//! hooks ports published as endpoints of Weft's Service): until each root logged its pass. The
//! no-op round is measured a third way: a `POST /api/v1/sync?root=` for each root, 8 at a time,
//! spread over the three replicas (the leader passes each on to the root's holder).
//!
//! The CPU seconds of the no-op round and of the large root's no-op pass are printed per process:
//! each replica, the git daemon (with its `upload-pack`s), this bench, and the API server and
//! etcd when the kubeconfig lies in a `tests/control-plane/up DIR` (`WEFT_TEST_KUBECONFIG=
//! DIR/kubeconfig`), and the requests the API server served in them, per verb and resource, by
//! its own count (`/metrics`).
//!
//! Every root's ConfigMaps go into the bench's namespace (beside the Root objects), or with
//! `WEFT_BENCH_LAYOUT=namespace-per-root` each root's into a namespace of its own (a tenant
//! each): a root's LIST by its owner label then scans its own namespace, not all 10,000 objects.
//!
//! `WEFT_BENCH_ROOT_CONCURRENCY` passes `--root-concurrency` to the replicas (their default when
//! unset). `WEFT_BENCH_BEFORE_NOOP`, a shell command, is started 2 s before the no-op round with
//! the replicas' process ids in `$PIDS` (to attach a profiler:
//! `perf record -F 300 --call-graph dwarf -o /tmp/round.perf -p ${PIDS// /,} -- sleep 8`).
//!
//! Run: `cargo bench --bench roots` (release) or, without a release build,
//! `cargo bench --profile dev --bench roots` (starts the control plane of tests/control-plane,
//! or uses `WEFT_TEST_KUBECONFIG`). Each phase gives up after `WEFT_BENCH_PHASE_SECS` (600) and
//! says which roots were not done.

// The test support modules, at the crate root (they refer to each other through `super::`).
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
#[path = "../tests/support/wait.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod wait;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use cluster::TestNamespace;
use daemon::{Daemon, DaemonOptions};
use git_servers::ServedRepo;
use manifests::configmap;
use wait::wait_timed;
use weft::api::conditions::ConditionStatus;
use weft::api::root::Root;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// `VmRSS` of process `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// What `VmRSS` is made of for process `pid`: `RssAnon` (the heap, thread stacks and other
/// anonymous maps), `RssFile` (the binary and libraries as far as read) in KiB, and `Threads`.
fn rss_parts(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    format!(
        "anonymous {:.1} MiB, file {:.1} MiB, {} threads",
        mib(field("RssAnon:")),
        mib(field("RssFile:")),
        field("Threads:")
    )
}

/// CPU seconds (user + system) process `pid` used so far, with those of its children it waited
/// for (a `git daemon`'s `upload-pack`s); 0 when it is gone.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) in parentheses: utime is the
    // 14th field of the line, the 12th after it; stime, cutime, cstime follow.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = after
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum();
    // USER_HZ is 100 on Linux.
    ticks as f64 / 100.0
}

/// The API server's own count of the requests it served, and the seconds it took over them, per
/// verb and resource (`apiserver_request_total`, `apiserver_request_duration_seconds_sum` of its
/// `/metrics`); empty when the metrics cannot be read.
async fn served(client: &Client) -> BTreeMap<(String, String), (f64, f64)> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.unwrap_or_default();
    let label = |line: &str, name: &str| -> String {
        let key = format!("{name}=\"");
        line.split_once(&key)
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(v, _)| v.to_string())
            .unwrap_or_default()
    };
    let mut out: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        let (count, secs) = if line.starts_with("apiserver_request_total{") {
            (true, false)
        } else if line.starts_with("apiserver_request_duration_seconds_sum{") {
            (false, true)
        } else {
            continue;
        };
        let value: f64 = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0);
        let mut resource = label(line, "resource");
        let sub = label(line, "subresource");
        if !sub.is_empty() {
            resource = format!("{resource}/{sub}");
        }
        let entry = out.entry((label(line, "verb"), resource)).or_default();
        if count {
            entry.0 += value;
        }
        if secs {
            entry.1 += value;
        }
    }
    out
}

/// What the API server served since `before`, the busiest first, as one line.
fn served_since(
    before: &BTreeMap<(String, String), (f64, f64)>,
    after: &BTreeMap<(String, String), (f64, f64)>,
) -> String {
    let mut rows: Vec<(String, f64, f64)> = after
        .iter()
        .map(|((verb, resource), (n, secs))| {
            let (n0, s0) = before
                .get(&(verb.clone(), resource.clone()))
                .copied()
                .unwrap_or_default();
            (format!("{verb} {resource}"), n - n0, secs - s0)
        })
        .filter(|(_, n, _)| *n >= 1.0)
        .collect();
    rows.sort_by(|a, b| b.2.total_cmp(&a.2));
    if rows.is_empty() {
        return "(the API server's metrics could not be read)".into();
    }
    rows.iter()
        .map(|(what, n, secs)| format!("{what} {n:.0} ({:.0} ms)", secs * 1000.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The processes whose CPU a round costs: the replicas, the git daemon, and the control plane's
/// API server and etcd when the kubeconfig is in a `tests/control-plane/up` directory (its
/// `pids/`).
struct CpuMeter {
    processes: Vec<(String, u32)>,
}

impl CpuMeter {
    fn new(replicas: &[(&str, u32)], git_daemon: u32) -> Self {
        let mut processes: Vec<(String, u32)> =
            replicas.iter().map(|(n, p)| (n.to_string(), *p)).collect();
        processes.push(("git daemon".into(), git_daemon));
        let dir = cluster::kubeconfig_path().parent().map(|d| d.join("pids"));
        for name in ["kube-apiserver", "etcd"] {
            let pid = dir
                .as_ref()
                .and_then(|d| std::fs::read_to_string(d.join(format!("{name}.pid"))).ok())
                .and_then(|p| p.trim().parse().ok());
            if let Some(pid) = pid {
                processes.push((name.into(), pid));
            }
        }
        processes.push(("this bench".into(), std::process::id()));
        CpuMeter { processes }
    }

    fn read(&self) -> Vec<f64> {
        self.processes.iter().map(|(_, p)| cpu_secs(*p)).collect()
    }

    /// What each process used since `before`, as one line.
    fn since(&self, before: &[f64]) -> String {
        // A process gone since (the killed replica) reads 0: it used nothing of this span.
        let used: Vec<f64> = self
            .read()
            .iter()
            .zip(before)
            .map(|(n, b)| (n - b).max(0.0))
            .collect();
        let mut parts: Vec<String> = self
            .processes
            .iter()
            .zip(&used)
            .filter(|(_, u)| **u > 0.0)
            .map(|((name, _), u)| format!("{name} {u:.2} s"))
            .collect();
        let total: f64 = used.iter().sum();
        parts.push(format!("all {total:.2} s"));
        parts.join(", ")
    }
}

/// Holder identity (`host_pid`) of each root's Lease, by the root's name.
async fn holders(client: &Client, ns: &str) -> BTreeMap<String, String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let Ok(list) = leases
        .list(&ListParams::default().labels("weft.io/lease=root"))
        .await
    else {
        return BTreeMap::new();
    };
    list.items
        .into_iter()
        .filter_map(|l| {
            let root = l.annotations().get("weft.io/root")?.clone();
            let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((root.rsplit('/').next()?.to_string(), holder))
        })
        .collect()
}

/// The replica (its pid) an identity `host_pid` names.
fn pid_of(identity: &str) -> u32 {
    identity
        .rsplit('_')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

fn root(ns: &str, name: &str, url: &str, token: &str) -> Root {
    serde_json::from_value(json!({
        "apiVersion": "weft.io/v1alpha1",
        "kind": "Root",
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"weft.io/requested-at": token}},
        "spec": {"source": {"url": url}, "path": name, "interval": "1h"},
    }))
    .expect("root")
}

/// Ask every one of `names` for a pass, 32 requests at a time (one after another, 200 requests
/// took the bench 2.3 s: more than the round itself).
async fn request(roots: &Api<Root>, names: &[String], token: &str) {
    use futures::StreamExt as _;
    let patch = json!({"metadata": {"annotations": {"weft.io/requested-at": token}}});
    let patch = &patch;
    futures::stream::iter(names)
        .map(|name| async move {
            roots
                .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .expect("request a pass");
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
}

/// Wait until every one of `names` handled the request `token` and is Ready; how long it took.
/// Watched, not polled: a poll lists every Root with its status again and again, and those
/// lists cost the API server a tenth of its CPU over a round (by its own profile), the same
/// two cores the round is timed on.
async fn wait_handled(
    roots: &Api<Root>,
    names: &[String],
    token: &str,
    within: Duration,
    logs: &impl wait::Logs,
) -> Duration {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let what = format!("{} roots passed for request {token}", names.len());
    let wanted: std::collections::BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let handled = |r: &Root| {
        r.status.as_ref().is_some_and(|s| {
            s.last_handled_requested_at.as_deref() == Some(token)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == ConditionStatus::True)
        })
    };
    let start = Instant::now();
    let mut done = std::collections::BTreeSet::new();
    let mut events = std::pin::pin!(watcher::watcher(roots.clone(), watcher::Config::default()));
    let watching = async {
        while let Some(event) = events.next().await {
            let root = match event {
                Ok(Event::Apply(r) | Event::InitApply(r)) => r,
                _ => continue,
            };
            let name = root.name_any();
            if wanted.contains(name.as_str()) && handled(&root) {
                done.insert(name);
                if done.len() == wanted.len() {
                    return;
                }
            }
        }
    };
    if tokio::time::timeout(within, watching).await.is_err() {
        panic!(
            "{what} did not happen within {within:?} ({} of {} did)\nlogs:\n{}",
            done.len(),
            wanted.len(),
            logs.logs()
        );
    }
    let took = start.elapsed();
    eprintln!("{what}: after {took:.1?}");
    took
}

/// The start time of each root's last pass (from its status), by name.
async fn last_pass_started(roots: &Api<Root>) -> BTreeMap<String, String> {
    let Ok(list) = roots.list(&ListParams::default()).await else {
        return BTreeMap::new();
    };
    list.items
        .into_iter()
        .filter_map(|r| {
            let started = r.status.as_ref()?.passes.first()?.started_at.clone();
            Some((r.name_any(), started))
        })
        .collect()
}

/// Send one GitHub push of `url` to `to` and wait until each of `names` logged a pass since
/// (on any of `replicas`); how long it took.
async fn push_round(
    replicas: &[&Daemon],
    to: &Daemon,
    url: &str,
    ns: &str,
    names: &[String],
    within: Duration,
) -> Duration {
    let payload = json!({"ref": "refs/heads/main", "repository": {"clone_url": url}});
    logged_round(replicas, ns, names, within, "a push", async || {
        let (code, answer) = daemon::github_push_of(to, payload, None).await;
        assert_eq!(code, 202, "the push was not queued: {answer}");
    })
    .await
}

/// Ask each of `names` for a pass with `POST /api/v1/sync?root=`, 8 requests at a time, spread
/// over `replicas` in turn as a Service spreads them, and wait until each logged a pass since;
/// how long it took. (Here the bench and the replicas share one address, and a replica accepts
/// 32 connections of one address: the bench's, the standbys' forwards to the leader and the
/// leader's pass-ons to the holders all count against it.)
async fn sync_round(
    replicas: &[&Daemon],
    ns: &str,
    names: &[String],
    within: Duration,
) -> Duration {
    use futures::StreamExt;
    let http = reqwest::Client::new();
    logged_round(
        replicas,
        ns,
        names,
        within,
        "a sync request each",
        async || {
            futures::stream::iter(names.iter().enumerate())
                .for_each_concurrent(8, |(i, name)| {
                    let url = format!(
                        "{}/api/v1/sync?root={ns}/{name}",
                        replicas[i % replicas.len()].hooks_base()
                    );
                    let http = http.clone();
                    async move {
                        let r = http
                            .post(url)
                            .bearer_auth(daemon::SYNC_TOKEN)
                            .send()
                            .await
                            .expect("sync request");
                        let code = r.status().as_u16();
                        let body = r.text().await.unwrap_or_default();
                        assert_eq!(code, 202, "root {name} was not queued: {body}");
                    }
                })
                .await;
        },
    )
    .await
}

/// Run `ask` and wait until each of `names` logged a pass since it started (on any of
/// `replicas`); how long it took. A log is read from where it ended before `ask`, every 20 ms.
async fn logged_round(
    replicas: &[&Daemon],
    ns: &str,
    names: &[String],
    within: Duration,
    what: &str,
    ask: impl AsyncFnOnce(),
) -> Duration {
    use std::io::{Read, Seek, SeekFrom};
    let mut logs: Vec<(std::fs::File, String)> = replicas
        .iter()
        .map(|d| {
            let mut f = std::fs::File::open(&d.log).expect("replica log");
            f.seek(SeekFrom::End(0)).expect("seek");
            (f, String::new())
        })
        .collect();
    let wanted: BTreeMap<String, &String> = names
        .iter()
        .map(|n| (format!("root={ns}/{n} "), n))
        .collect();
    let mut done = std::collections::BTreeSet::new();
    let start = Instant::now();
    ask().await;
    while done.len() < names.len() {
        assert!(
            start.elapsed() < within,
            "{} of {} roots passed after {what} within {within:?}",
            done.len(),
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        for (f, rest) in &mut logs {
            let mut read = String::new();
            f.read_to_string(&mut read).expect("read log");
            rest.push_str(&read);
            // Whole lines only; a line being written stays for the next read.
            let end = rest.rfind('\n').map_or(0, |i| i + 1);
            for line in rest[..end].lines() {
                if !line.contains("root pass succeeded") {
                    continue;
                }
                if let Some(at) = line.find("root=") {
                    let end = line[at..].find(' ').map_or(line.len(), |e| at + e + 1);
                    if let Some(name) = wanted.get(&line[at..end]) {
                        done.insert(*name);
                    }
                }
            }
            rest.drain(..end);
        }
    }
    let took = start.elapsed();
    eprintln!(
        "{} roots passed after {what}: after {took:.1?}",
        names.len()
    );
    took
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::main]
async fn main() {
    let count = env_usize("WEFT_BENCH_ROOTS", 200);
    let more = env_usize("WEFT_BENCH_MORE", 100);
    let objects = env_usize("WEFT_BENCH_OBJECTS", 50);
    let big = env_usize("WEFT_BENCH_BIG", 10_000);
    let lease = std::env::var("WEFT_BENCH_LEASE").unwrap_or_else(|_| "15s".into());
    let within = Duration::from_secs(env_usize("WEFT_BENCH_PHASE_SECS", 600) as u64);

    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new("bench-roots").await;
    let ns = weft_ns.name();
    let repo = ServedRepo::start();
    let all_names: Vec<String> = (0..count + more).map(|i| format!("b{i:03}")).collect();
    let (names, added) = all_names.split_at(count);
    // Where each root's objects go: the bench's namespace, or one namespace per root (a tenant
    // each, `WEFT_BENCH_LAYOUT=namespace-per-root`).
    let spread = std::env::var("WEFT_BENCH_LAYOUT").as_deref() == Ok("namespace-per-root");
    let home = |name: &str| -> String {
        if spread {
            format!("{ns}-{name}")
        } else {
            ns.to_string()
        }
    };
    let mut homes: Vec<String> = Vec::new();
    if spread {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        for name in &all_names {
            let home = home(name);
            let it = serde_json::from_value(json!({"metadata": {"name": home}})).expect("ns");
            namespaces
                .create(&Default::default(), &it)
                .await
                .expect("namespace");
            homes.push(home);
        }
    }
    for name in &all_names {
        let home = home(name);
        let docs: Vec<String> = (0..objects)
            .map(|j| configmap(&home, &format!("{name}-{j:03}"), "one"))
            .collect();
        repo.work
            .write(&format!("{name}/objects.yaml"), docs.join("\n---\n"));
    }
    repo.work.commit("bench");
    repo.work.push();
    // The large root: 100 ConfigMaps a file, in a repository of its own, `big.git` (a push to
    // it is for the large root alone: a repository is known by its host and path, without the
    // port, so not another `config.git`).
    let big_host = git_servers::RepoHost::new();
    let big_bare = big_host.create("big.git");
    let big_server = git_servers::GitDaemon::start(&big_host);
    let big_work = git_servers::WorkTree::new(&big_bare.display().to_string());
    let big_url = big_server.url("big.git");
    for f in 0..big.div_ceil(100) {
        let docs: Vec<String> = (f * 100..((f + 1) * 100).min(big))
            .map(|j| configmap(ns, &format!("big-{j:05}"), "one"))
            .collect();
        big_work.write(&format!("big/part-{f:03}.yaml"), docs.join("\n---\n"));
    }
    big_work.commit("bench");
    big_work.push();

    // The flag root is an empty directory: the replicas reconcile the Root objects only.
    let flag = tempfile::tempdir().expect("tempdir");
    // As pods: each replica publishes `http://<ip>:<hooks port>` on its Leases, and the leader
    // passes a push on to the replicas holding its roots there (an endpoint of Weft's Service).
    let ip = daemon::host_ip();
    let start = || {
        let mut opts = DaemonOptions::new(flag.path().to_str().expect("utf-8"), ns);
        opts.pod_ip = Some(ip.clone());
        opts.controllers = true;
        opts.lease_duration = &lease;
        opts.extra = vec!["--watch-namespaces".into(), ns.into()];
        // What an installation logs (the tests' `weft=debug` wrote lines per pass and object
        // that showed in the replicas' profile), as the scale bench's daemon.
        opts.env = vec![("WEFT_LOG".into(), "info".into())];
        if let Ok(n) = std::env::var("WEFT_BENCH_ROOT_CONCURRENCY") {
            opts.extra.extend(["--root-concurrency".into(), n]);
        }
        Daemon::start(opts)
    };
    let a = start();
    let b = start();
    let mut c = start();
    daemon::publish_endpoints(
        client.clone(),
        ns,
        &ip,
        &[a.hooks_port, b.hooks_port, c.hooks_port],
    )
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let no_logs = || String::from("(the replicas' logs are not kept in the benchmark's output)");
    wait_timed("three replica Leases", within, &no_logs, async || {
        let n = leases
            .list(&ListParams::default().labels("weft.io/lease=replica"))
            .await
            .ok()?
            .items
            .len();
        (n == 3).then_some(())
    })
    .await;
    let idle: Vec<u64> = [&a, &b, &c].iter().map(|d| rss_kib(d.pid())).collect();
    let idle_parts: Vec<String> = [&a, &b, &c].iter().map(|d| rss_parts(d.pid())).collect();
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    let roots: Api<Root> = Api::namespaced(client.clone(), ns);
    let created = Instant::now();
    for name in names {
        let r = root(ns, name, &repo.url(), "first");
        roots.create(&Default::default(), &r).await.expect("create");
    }
    wait_handled(&roots, names, "first", within, &no_logs).await;
    let first = created.elapsed();

    let meter = CpuMeter::new(
        &[
            ("replica 0", a.pid()),
            ("replica 1", b.pid()),
            ("replica 2", c.pid()),
        ],
        repo.server.pid(),
    );
    // A profiler to attach to the replicas for the round: `$PIDS` names them.
    let profiler = std::env::var("WEFT_BENCH_BEFORE_NOOP").ok().map(|cmd| {
        let pids = format!("{} {} {}", a.pid(), b.pid(), c.pid());
        std::process::Command::new("bash")
            .args(["-c", &cmd])
            .env("PIDS", pids)
            .spawn()
            .expect("WEFT_BENCH_BEFORE_NOOP")
    });
    if profiler.is_some() {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let served_before = served(&client).await;
    let cpu_before = meter.read();
    let asked = Instant::now();
    request(&roots, names, "noop").await;
    wait_handled(&roots, names, "noop", within, &no_logs).await;
    let noop = asked.elapsed();
    let noop_cpu = meter.since(&cpu_before);
    let noop_served = served_since(&served_before, &served(&client).await);
    println!("CPU of the no-op round: {noop_cpu}");
    println!("requests the API server served in the round (count, time spent): {noop_served}");
    if let Some(mut p) = profiler {
        let _ = p.wait();
    }
    // The same round asked by one push of the roots' repository, sent to one replica: nothing
    // is written to the Roots (a quiet pass writes no status), so the passes are read from
    // the replicas' logs.
    let replicas = [&a, &b, &c];
    let served_before = served(&client).await;
    let cpu_before = meter.read();
    let pushed_round = push_round(&replicas, &a, &repo.url(), ns, names, within).await;
    let push_cpu = meter.since(&cpu_before);
    let push_served = served_since(&served_before, &served(&client).await);
    println!("CPU of the push round: {push_cpu}");
    println!("requests the API server served in the push round (count, time spent): {push_served}");
    // And asked root by root over HTTP, `POST /api/v1/sync?root=`: each request reaches the
    // leader, which passes it on to the root's holder; nothing is written to the Roots either.
    let served_before = served(&client).await;
    let cpu_before = meter.read();
    let synced_round = sync_round(&replicas, ns, names, within).await;
    let sync_cpu = meter.since(&cpu_before);
    let sync_served = served_since(&served_before, &served(&client).await);
    println!("CPU of the sync-request round: {sync_cpu}");
    println!("requests the API server served in the sync-request round (count, time spent): {sync_served}");
    let mut held = holders(&client, ns).await;
    // The bench's roots only: the flag root's Root (the replicas' `--root-name`) has a Lease too.
    held.retain(|r, _| names.contains(r));
    let per = |d: &Daemon| held.values().filter(|h| pid_of(h) == d.pid()).count();
    let with_roots: Vec<(u64, usize)> = [&a, &b, &c]
        .iter()
        .map(|d| (rss_kib(d.pid()), per(d)))
        .collect();
    let with_parts: Vec<String> = [&a, &b, &c].iter().map(|d| rss_parts(d.pid())).collect();
    let idle_total: u64 = idle.iter().sum();
    let roots_total: u64 = with_roots.iter().map(|(r, _)| r).sum();
    let per_root = roots_total.saturating_sub(idle_total) as f64 / count.max(1) as f64;
    // Printed now too: a later phase that gives up does not lose them.
    for (i, ((rss, n), base)) in with_roots.iter().zip(&idle).enumerate() {
        println!(
            "replica {i}: {n} roots, RSS {:.1} MiB with them ({}), {:.1} MiB with none ({})",
            mib(*rss),
            with_parts[i],
            mib(*base),
            idle_parts[i]
        );
    }
    println!("memory per root: {per_root:.0} KiB");

    // Each further root: `more` roots added to the running replicas, passed twice as the first
    // were; the RSS they add over that of the `count`, divided by their number.
    for name in added {
        let r = root(ns, name, &repo.url(), "first");
        roots.create(&Default::default(), &r).await.expect("create");
    }
    wait_handled(&roots, added, "first", within, &no_logs).await;
    request(&roots, added, "noop").await;
    wait_handled(&roots, added, "noop", within, &no_logs).await;
    let mut held_more = holders(&client, ns).await;
    held_more.retain(|r, _| all_names.contains(r));
    let per_more = |d: &Daemon| held_more.values().filter(|h| pid_of(h) == d.pid()).count();
    let with_more: Vec<(u64, usize)> = [&a, &b, &c]
        .iter()
        .map(|d| (rss_kib(d.pid()), per_more(d)))
        .collect();
    let more_total: u64 = with_more.iter().map(|(r, _)| r).sum();
    let per_added = more_total as f64 - roots_total as f64;
    let per_added = per_added / more.max(1) as f64;
    println!(
        "memory each further root adds: {per_added:.0} KiB ({} roots more: RSS of the 3 replicas {:.1} MiB, {:.1} MiB with {count})",
        more,
        mib(more_total),
        mib(roots_total)
    );

    // Kill one replica: until each of its roots is held by another and passed by it.
    let dead = c.pid();
    let theirs: Vec<String> = held_more
        .iter()
        .filter(|(_, h)| pid_of(h) == dead)
        .map(|(r, _)| r.clone())
        .collect();
    let before = last_pass_started(&roots).await;
    c.signal("KILL");
    c.wait_exit(Duration::from_secs(10));
    let killed = Instant::now();
    let (_, held_after) = wait_timed(
        "the killed replica's roots held by the others",
        within,
        &no_logs,
        async || {
            let now = holders(&client, ns).await;
            all_names
                .iter()
                .all(|r| now.get(r).is_some_and(|h| pid_of(h) != dead))
                .then_some(())
        },
    )
    .await;
    wait_timed(
        "the killed replica's roots passed by their new holders",
        within,
        &no_logs,
        async || {
            let now = last_pass_started(&roots).await;
            theirs
                .iter()
                .all(|r| now.contains_key(r) && now.get(r) != before.get(r))
                .then_some(())
        },
    )
    .await;
    let reconciled_after = killed.elapsed();

    // One large root on the two replicas left.
    let big_name = vec!["big".to_string()];
    let created = Instant::now();
    roots
        .create(&Default::default(), &root(ns, "big", &big_url, "first"))
        .await
        .expect("create big");
    wait_handled(&roots, &big_name, "first", within, &no_logs).await;
    let big_first = created.elapsed();
    let served_before = served(&client).await;
    let cpu_before = meter.read();
    let asked = Instant::now();
    request(&roots, &big_name, "noop").await;
    wait_handled(&roots, &big_name, "noop", within, &no_logs).await;
    let big_noop = asked.elapsed();
    let big_noop_cpu = meter.since(&cpu_before);
    let big_served = served_since(&served_before, &served(&client).await);
    let cpu_before = meter.read();
    let survivors = [&a, &b];
    let big_push = push_round(&survivors, &a, &big_url, ns, &big_name, within).await;
    let big_push_cpu = meter.since(&cpu_before);
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    println!(
        "\n{count} roots x {objects} ConfigMaps on 3 replicas (Lease {lease}), {}; load average before {}, after {}",
        if spread {
            "a namespace per root"
        } else {
            "all in one namespace"
        },
        load_before.trim(),
        load_after.trim()
    );
    println!("| what | {count} roots × {objects} objects, 3 replicas |");
    println!("|---|---:|");
    println!("| first pass of all | {:.1} s |", first.as_secs_f64());
    println!("| no-op round | {:.1} s |", noop.as_secs_f64());
    println!("| CPU of the no-op round | {noop_cpu} |");
    println!("| requests served in the round (count, time) | {noop_served} |");
    println!(
        "| no-op round asked by one push | {:.2} s |",
        pushed_round.as_secs_f64()
    );
    println!("| CPU of the push round | {push_cpu} |");
    println!("| requests served in the push round (count, time) | {push_served} |");
    println!(
        "| no-op round asked by a `POST /api/v1/sync?root=` each | {:.2} s |",
        synced_round.as_secs_f64()
    );
    println!("| CPU of the sync-request round | {sync_cpu} |");
    println!("| requests served in the sync-request round (count, time) | {sync_served} |");
    println!(
        "| memory per root | {per_root:.0} KiB (RSS of the 3 replicas {:.1} MiB with the roots, {:.1} MiB with none) |",
        mib(roots_total),
        mib(idle_total)
    );
    println!(
        "| memory each further root adds | {per_added:.0} KiB ({more} roots added: RSS of the 3 replicas {:.1} MiB, {:.1} MiB before) |",
        mib(more_total),
        mib(roots_total)
    );
    for (i, (rss, n)) in with_more.iter().enumerate() {
        println!("replica {i}: {n} roots, RSS {:.1} MiB", mib(*rss));
    }
    println!(
        "| a killed replica's {} roots moved | held by the others after {:.1} s, passed by them after {:.1} s |",
        theirs.len(),
        held_after.as_secs_f64(),
        reconciled_after.as_secs_f64()
    );
    for (i, ((rss, n), base)) in with_roots.iter().zip(&idle).enumerate() {
        println!(
            "replica {i}: {n} roots, RSS {:.1} MiB with them ({}), {:.1} MiB with none ({})",
            mib(*rss),
            with_parts[i],
            mib(*base),
            idle_parts[i]
        );
    }
    println!("\none root of {big} ConfigMaps on 2 replicas:");
    println!("| first pass | {:.1} s |", big_first.as_secs_f64());
    println!("| no-op pass | {:.1} s |", big_noop.as_secs_f64());
    println!("| CPU of the no-op pass | {big_noop_cpu} |");
    println!("| requests served in the pass (count, time) | {big_served} |");
    println!(
        "| no-op pass asked by a push | {:.2} s |",
        big_push.as_secs_f64()
    );
    println!("| CPU of the push's pass | {big_push_cpu} |");
    println!(
        "\nround ÷ large root's no-op: asked through the Roots {:.1}, by a push {:.1}, by a sync request each {:.1}",
        noop.as_secs_f64() / big_noop.as_secs_f64().max(1e-9),
        pushed_round.as_secs_f64() / big_push.as_secs_f64().max(1e-9),
        synced_round.as_secs_f64() / big_push.as_secs_f64().max(1e-9)
    );
    drop((a, b));
    weft_ns.delete().await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for home in homes {
        let _ = namespaces.delete(&home, &Default::default()).await;
    }
}
