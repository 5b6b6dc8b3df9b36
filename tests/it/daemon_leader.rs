//! Leader election on a Lease with two real `weft run` processes: one works, the other stands by
//! and refuses work (503); when the leader is killed (SIGKILL, no release) the standby takes over
//! within seconds and applies what is pushed next. A leader stopped with SIGTERM releases the
//! Lease, so the standby takes over at once.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use support::cluster::TestNamespace;
use support::daemon::{github_push, Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::manifests::configmap;

async fn value(api: &Api<ConfigMap>) -> Option<String> {
    api.get_opt("leader-test")
        .await
        .expect("GET")
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}

async fn wait_value(api: &Api<ConfigMap>, want: &str, within: Duration, logs: &dyn Fn() -> String) {
    let deadline = Instant::now() + within;
    while value(api).await.as_deref() != Some(want) {
        assert!(
            Instant::now() < deadline,
            "value never became {want:?}\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn leader_of(d: &Daemon) -> bool {
    d.status().await["leader"] == true
}

#[tokio::test]
async fn the_standby_takes_over_when_the_leader_is_killed() {
    let ns = TestNamespace::new("daemon-leader").await;
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write("cm.yaml", configmap(ns.name(), "leader-test", "one"));
    work.commit("one");
    work.push();
    let url = server.url("config.git");
    // Each replica as a pod: it publishes `http://<pod IP>:<hooks port>` on the Lease.
    let ip = support::daemon::host_ip();
    let opts = || DaemonOptions {
        lease_duration: "4s",
        pod_ip: Some(ip.clone()),
        ..DaemonOptions::new(&url, ns.name())
    };
    let first = Daemon::start(opts());
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), ns.name());
    wait_value(&api, "one", Duration::from_secs(30), &|| first.logs()).await;
    first
        .wait_status("first leads", Duration::from_secs(10), |s| {
            s["leader"] == true
        })
        .await;

    let mut second = Daemon::start(opts());
    // The endpoint controller's work for Weft's Service: a standby forwards only to these.
    support::daemon::publish_endpoints(
        ns.client(),
        ns.name(),
        &ip,
        &[first.hooks_port, second.hooks_port],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!leader_of(&second).await, "two leaders:\n{}", second.logs());
    assert!(leader_of(&first).await);
    // The standby forwards work to the leader (GitHub does not retry a 503): the leader queues
    // the pass and its answer comes back through the standby.
    let before = first.status().await["lastPass"]["pass"]
        .as_u64()
        .unwrap_or(0);
    let (status, body) = github_push(&second, "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}\n{}", second.logs());
    let queued: serde_json::Value = serde_json::from_str(&body).expect("JSON answer");
    assert!(queued["pass"].as_u64().unwrap_or(0) > before, "{body}");
    first
        .wait_status(
            "the forwarded webhook's pass",
            Duration::from_secs(20),
            |s| {
                s["lastPass"]["pass"].as_u64().unwrap_or(0) > before
                    && s["lastPass"]["reasons"]
                        .as_array()
                        .is_some_and(|r| r.iter().any(|r| r == "webhook/github"))
            },
        )
        .await;
    assert!(
        second.logs().contains("forwarded to the leader"),
        "{}",
        second.logs()
    );
    // A sync request too, with its bearer token, and its `?wait=true` answer.
    let answer = reqwest::Client::new()
        .post(format!("{}/api/v1/sync?wait=true", second.hooks_base()))
        .bearer_auth(support::daemon::SYNC_TOKEN)
        .send()
        .await
        .expect("POST sync to the standby");
    assert_eq!(
        answer
            .headers()
            .get("x-weft-forwarded-to")
            .and_then(|v| v.to_str().ok()),
        first.status().await["identity"].as_str()
    );
    assert_eq!(answer.status().as_u16(), 200);
    let report: serde_json::Value =
        serde_json::from_str(&answer.text().await.expect("body")).expect("pass report");
    assert_eq!(report["result"], "succeeded", "{report}");
    let leases: Api<Lease> = Api::namespaced(ns.client(), ns.name());
    let holder = leases
        .get(&weft::daemon::leader::lease_name(ns.name()))
        .await
        .expect("lease")
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), first.status().await["identity"].as_str());

    // Kill the leader without letting it release the Lease.
    first.signal("KILL");
    let killed = Instant::now();
    second
        .wait_status("the standby takes over", Duration::from_secs(20), |s| {
            s["leader"] == true
        })
        .await;
    let took = killed.elapsed();
    eprintln!("takeover after SIGKILL of the leader: {took:?}");
    // 4s Lease: the takeover waits for it to expire, and not much longer.
    assert!(took < Duration::from_secs(12), "takeover took {took:?}");

    // The new leader does the work.
    work.write("cm.yaml", configmap(ns.name(), "leader-test", "two"));
    work.commit("two");
    work.push();
    let (status, body) = github_push(&second, "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");
    wait_value(&api, "two", Duration::from_secs(15), &|| second.logs()).await;
    let holder = leases
        .get(&weft::daemon::leader::lease_name(ns.name()))
        .await
        .expect("lease")
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(
        holder.as_deref(),
        second.status().await["identity"].as_str()
    );

    // A third replica; the leader stops gracefully and releases the Lease: the takeover does not
    // wait for the Lease to expire.
    let third = Daemon::start(DaemonOptions {
        lease_duration: "30s",
        ..DaemonOptions::new(&url, ns.name())
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!leader_of(&third).await);
    second.signal("TERM");
    let stopped = Instant::now();
    second.expect_clean_exit();
    third
        .wait_status(
            "takeover after a graceful stop",
            Duration::from_secs(10),
            |s| s["leader"] == true,
        )
        .await;
    eprintln!(
        "takeover after SIGTERM of the leader: {:?}",
        stopped.elapsed()
    );
    drop(server);
    ns.delete().await;
}

/// Issue 14 item 6: a second installation that syncs another repository into the same root (same
/// namespace, same `--root-name`) used to take turns with the first, each pruning the other's
/// objects. It now refuses to start while the first one lives, and says why.
#[tokio::test]
async fn an_installation_of_another_repository_refuses_to_share_a_live_root() {
    let ns = TestNamespace::new("daemon-claim").await;
    let host = RepoHost::new();
    let server = GitDaemon::start(&host);
    for repo in ["mine.git", "theirs.git"] {
        let bare = host.create(repo);
        let work = WorkTree::new(&bare.display().to_string());
        work.write("cm.yaml", configmap(ns.name(), "leader-test", repo));
        work.commit("one");
        work.push();
    }
    let mine = server.url("mine.git");
    let first = Daemon::start(DaemonOptions {
        lease_duration: "30s",
        ..DaemonOptions::new(&mine, ns.name())
    });
    // Leading and done with its first pass: the check below that nothing else was applied
    // must not race the first apply.
    first
        .wait_status("first leads and applied", Duration::from_secs(30), |s| {
            s["leader"] == true && s["lastPass"]["result"] == "succeeded"
        })
        .await;
    let leases: Api<Lease> = Api::namespaced(ns.client(), ns.name());
    let lease = leases
        .get(&weft::daemon::leader::lease_name(ns.name()))
        .await
        .expect("lease");
    assert_eq!(
        lease.metadata.annotations.unwrap_or_default()[weft::api::keys::SOURCE_ANNOTATION],
        mine
    );

    // The other repository, same root: refused, exit 1, nothing applied.
    let theirs = server.url("theirs.git");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("run")
        .args([
            "--repo",
            &theirs,
            "--weft-namespace",
            ns.name(),
            "--root-name",
            ns.name(),
        ])
        .args(["--listen", "127.0.0.1:0", "--lease-duration", "30s"])
        .args(support::cluster::cluster().kube_args())
        .env_remove("WEFT_REPO")
        .env("WEFT_HOOKS_LISTEN", "127.0.0.1:0")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("weft run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("refusing to start"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "a live installation that syncs `{mine}` (this one syncs `{theirs}`)"
        )),
        "{stderr}"
    );
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), ns.name());
    assert_eq!(value(&api).await.as_deref(), Some("mine.git"));

    // A replica of the same installation stands by, as before.
    let replica = Daemon::start(DaemonOptions {
        lease_duration: "30s",
        ..DaemonOptions::new(&mine, ns.name())
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!leader_of(&replica).await, "{}", replica.logs());
    drop(server);
    ns.delete().await;
}
