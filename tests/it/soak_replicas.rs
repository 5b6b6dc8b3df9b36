//! Two replicas behind one "Service" (webhooks sent to either, in turn) under a steady stream of
//! pushes and webhooks: every webhook is accepted (the standby forwards it to the leader), the
//! last push is applied, and no revision is applied twice (no two replicas work at once).
//!
//! Runs `WEFT_SOAK_SECONDS` (default 120 in the suite; the 10 minutes:
//! `WEFT_SOAK_SECONDS=600 cargo test --test it soak_replicas:: -- --nocapture`).

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use support::cluster::TestNamespace;
use support::daemon::{github_push, Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::manifests::configmap;

/// `key=value` of a human log line (the value unquoted).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[start..];
    let end = rest.find(' ').unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"'))
}

/// Per revision, how many passes (of every replica) changed something when applying it.
fn applying_passes(logs: &[String]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in logs.iter().flat_map(|l| l.lines()) {
        if !line.contains("pass succeeded") {
            continue;
        }
        let n = |k| {
            field(line, k)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        if n("created") + n("configured") + n("pruned") == 0 {
            continue;
        }
        if let Some(rev) = field(line, "revision") {
            *out.entry(rev.to_string()).or_insert(0) += 1;
        }
    }
    out
}

#[test]
fn the_field_parser_reads_human_log_lines() {
    let line = "2026-12-02T11:00:00Z  INFO weft::daemon::root: pass succeeded pass=3 revision=\"abc123\" head_unchanged=false created=0 configured=1 pruned=0 unchanged=4 seconds=0.1";
    assert_eq!(field(line, "revision"), Some("abc123"));
    assert_eq!(field(line, "configured"), Some("1"));
    let counted = applying_passes(&[
        line.to_string(),
        line.replace("configured=1", "configured=0"),
    ]);
    assert_eq!(counted.get("abc123"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_under_pushes_and_webhooks_lose_nothing_and_apply_each_revision_once() {
    let seconds: u64 = std::env::var("WEFT_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let ns = TestNamespace::new("soak").await;
    let name = ns.name().to_string();
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write("cm.yaml", configmap(&name, "soak", "0"));
    work.commit("0");
    work.push();
    let url = server.url("config.git");
    // Replicas as pods of Weft's Service: a standby forwards only to its endpoints.
    let ip = support::daemon::host_ip();
    let opts = || DaemonOptions {
        lease_duration: "4s",
        pod_ip: Some(ip.clone()),
        ..DaemonOptions::new(&url, &name)
    };
    let replicas = [Daemon::start(opts()), Daemon::start(opts())];
    support::daemon::publish_endpoints(
        ns.client(),
        &name,
        &ip,
        &[replicas[0].hooks_port, replicas[1].hooks_port],
    )
    .await;
    // The first pass, on whichever replica holds the flag root's Root: its status says Ready.
    let roots: Api<weft::api::root::Root> = Api::namespaced(ns.client(), &name);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let root = roots.get_opt(&name).await.expect("get the Root");
        let ready = root
            .and_then(|r| r.status)
            .and_then(|s| weft::daemon::roots::status::ready_of(&s).cloned())
            .is_some_and(|c| c.status == weft::api::conditions::ConditionStatus::True);
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no first pass within 60 s\nlogs:\n{}\n{}",
            replicas[0].logs(),
            replicas[1].logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let api: Api<ConfigMap> = Api::namespaced(ns.client(), &name);
    let started = Instant::now();
    let mut pushes = 0usize;
    let mut refused = Vec::new();
    let mut forwarded = 0usize;
    while started.elapsed() < Duration::from_secs(seconds) {
        pushes += 1;
        work.write("cm.yaml", configmap(&name, "soak", &pushes.to_string()));
        work.commit(&pushes.to_string());
        work.push();
        // The Service picks a replica; a standby forwards to the leader.
        let to = &replicas[pushes % 2];
        let (status, body) = github_push(to, "refs/heads/main", None).await;
        if status != 202 {
            refused.push((pushes, status, body));
        }
        if !to.status().await["leader"].as_bool().unwrap_or(false) {
            forwarded += 1;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert!(refused.is_empty(), "webhooks not accepted: {refused:?}");
    // The last push is applied.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let value = api
            .get_opt("soak")
            .await
            .expect("get")
            .and_then(|c| c.data)
            .and_then(|d| d.get("value").cloned());
        if value == Some(pushes.to_string()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the last push ({pushes}) was not applied: {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let logs: Vec<String> = replicas.iter().map(Daemon::logs).collect();
    let applied = applying_passes(&logs);
    let twice: Vec<_> = applied.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "revisions applied by more than one pass: {twice:?}"
    );
    assert!(forwarded > 0, "no webhook went to the standby");
    eprintln!(
        "{seconds}s: {pushes} pushes and webhooks ({forwarded} through the standby), {} revisions applied, none twice, none lost",
        applied.len()
    );
    ns.delete().await;
}
