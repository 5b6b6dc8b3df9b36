//! Two roots, one object (issue 31, item 2), seen from a daemon: `weft run` whose repository
//! declares an object another root holds does not take it, and reports the conflict on its own
//! root — its Root's `Ready` reason `Conflict`, a `Conflict` condition in the daemon's status and
//! the Root's, a Warning event `Conflict` on the Root — until the object leaves its repository.
//!
//! A CLI whose clock is skewed (issue 43, item 2): `weft sync` and `weft uninstall` judge whether
//! a daemon is live by watching its Lease renew, not by comparing its `renewTime` with their own
//! clock, so 20 s ahead or behind they neither race a live daemon nor wait on a stopped one.
//! Real control plane, real git server (`git daemon` on loopback), the `weft` binary.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::{Api, Client};

use support::cluster::TestNamespace;
use support::conditions::condition;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::manifests::configmap;
use support::skewed_clock::skewed_env;
use support::wait::wait_for;
use support::weft_cli::Weft;
use weft::api::root::Root;

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

async fn value(client: &Client, ns: &str, name: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.get_opt(name)
        .await
        .expect("get ConfigMap")
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}

/// The flag root's Root `root` (in Weft's namespace `ns`): its `Ready` reason and message.
async fn ready(client: &Client, ns: &str, root: &str) -> Option<(String, String)> {
    let api: Api<Root> = Api::namespaced(client.clone(), ns);
    let root = api.get_opt(root).await.expect("get Root")?;
    condition(&root, "Ready").map(|(_, reason, message)| (reason, message))
}

/// The Root's `Conflict` condition: (status, message).
async fn conflict_condition(client: &Client, ns: &str, root: &str) -> Option<(String, String)> {
    let api: Api<Root> = Api::namespaced(client.clone(), ns);
    let root = api.get_opt(root).await.expect("get Root")?;
    condition(&root, "Conflict").map(|(status, _, message)| (status, message))
}

/// The Warning events `Conflict` about the Root `root`.
async fn conflict_events(client: &Client, ns: &str, root: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("Conflict")
                && e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("Root") && r.name.as_deref() == Some(root)
                })
        })
        .collect()
}

#[tokio::test]
async fn a_daemon_reports_an_object_another_root_holds_on_its_root_and_never_takes_it() {
    let ns = TestNamespace::new("ops-conflict-daemon").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let root_a = format!("{name}-a");

    // Root A (a `weft sync` of a directory) holds cm-0001.
    let a = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        a.path().join("cm.yaml"),
        configmap(&name, "cm-0001", "from-a"),
    )
    .expect("write");
    let out = Weft::new(["sync"])
        .repo(a.path())
        .cluster()
        .args([
            "--weft-namespace",
            name.as_str(),
            "--root-name",
            root_a.as_str(),
        ])
        .env("WEFT_LOG", "warn")
        .output();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // The daemon's root (named as its namespace) declares it too, and one object of its own.
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write("cm.yaml", configmap(&name, "cm-0001", "from-b"));
    work.write("own.yaml", configmap(&name, "only-b", "b"));
    work.commit("b");
    work.push();
    let url = server.url("config.git");
    let mut opts = DaemonOptions::new(&url, &name);
    opts.interval = "2s";
    let d = Daemon::start(opts);

    let status = d
        .wait_status(
            "a pass that meets the conflict",
            Duration::from_secs(60),
            // The condition is published while the pass runs, its result when it ends: wait
            // for both (a clean clone's CI read the status in between).
            |s| {
                s["lastPass"]["result"] == "failed"
                    && s["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Conflict" && c["status"] == "True")
                    })
            },
        )
        .await;
    let holder = format!("root/{name}/{root_a}");
    let conditions = status["conditions"].to_string();
    assert!(
        conditions.contains(&format!("ConfigMap/{name}/cm-0001")),
        "{conditions}"
    );
    assert!(conditions.contains(&holder), "{conditions}");
    assert_eq!(status["lastPass"]["result"], "failed", "{status:#}");

    // The Root says Conflict (its `Ready` reason), with the object and its holder.
    let (reason, message) = wait_for(
        "the Root's Ready reason Conflict",
        Duration::from_secs(30),
        &|| d.logs(),
        async || {
            ready(&client, &name, &name)
                .await
                .filter(|(r, _)| r == "Conflict")
        },
    )
    .await;
    assert_eq!(reason, "Conflict");
    assert!(
        message.contains(&format!(
            "ConfigMap/{name}/cm-0001: conflict: owned by another Weft root, {holder}"
        )),
        "{message}"
    );
    // Its `Conflict` condition too, as the daemon's status.
    let (status, message) = conflict_condition(&client, &name, &name)
        .await
        .expect("the Root's Conflict condition");
    assert_eq!(status, "True", "{message}");
    assert!(
        message.contains(&format!("ConfigMap/{name}/cm-0001")) && message.contains(&holder),
        "{message}"
    );

    // A Warning event on the Root, through the event publisher.
    let events = wait_for(
        "a Warning event Conflict on the Root",
        Duration::from_secs(30),
        &|| d.logs(),
        async || Some(conflict_events(&client, &name, &name).await).filter(|e| !e.is_empty()),
    )
    .await;
    let note = events[0].note.clone().unwrap_or_default();
    assert!(
        note.contains(&format!("ConfigMap/{name}/cm-0001")),
        "{note}"
    );

    // Never taken: A's value stays through several passes; B's own object is applied.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        value(&client, &name, "cm-0001").await.as_deref(),
        Some("from-a")
    );
    assert_eq!(value(&client, &name, "only-b").await.as_deref(), Some("b"));

    // Resolved in B's repository: the condition turns False, the Root Ready again.
    work.remove("cm.yaml");
    work.commit("leave cm-0001 to a");
    work.push();
    d.wait_status("the conflict resolved", Duration::from_secs(60), |s| {
        s["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Conflict" && c["status"] == "False")
        })
    })
    .await;
    let (reason, _) = wait_for(
        "the Root's Ready reason ReconciliationSucceeded",
        Duration::from_secs(30),
        &|| d.logs(),
        async || {
            ready(&client, &name, &name)
                .await
                .filter(|(r, _)| r == "ReconciliationSucceeded")
        },
    )
    .await;
    assert_eq!(reason, "ReconciliationSucceeded");
    let (status, message) = conflict_condition(&client, &name, &name)
        .await
        .expect("the Root's Conflict condition");
    assert_eq!(status, "False", "{message}");
    assert_eq!(
        value(&client, &name, "cm-0001").await.as_deref(),
        Some("from-a")
    );
    drop(d);
    ns.delete().await;
}

// ---- issue 43, item 2: a daemon's liveness is not judged on the CLI's clock ----

/// `weft <args>` of the root `ns` (from `repo`), its wall clock `skew` seconds off this machine's.
fn skewed(args: &[&str], ns: &str, repo: Option<&Path>, skew: i64) -> Output {
    let mut cmd = Weft::new(args).cluster().root(ns).env("WEFT_LOG", "warn");
    if let Some(repo) = repo {
        cmd = cmd.repo(repo);
    }
    for (key, value) in skewed_env(skew) {
        cmd = cmd.env(&key, value);
    }
    cmd.output()
}

async fn uid(client: &Client, ns: &str, name: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.get_opt(name)
        .await
        .expect("get ConfigMap")
        .and_then(|c| c.metadata.uid)
}

#[tokio::test]
async fn a_skewed_cli_clock_neither_races_a_live_daemon_nor_waits_for_a_stopped_one() {
    let ns = TestNamespace::new("ops-skew").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = tempfile::tempdir().expect("tempdir");
    for n in ["a", "b"] {
        std::fs::write(
            repo.path().join(format!("{n}.yaml")),
            configmap(&name, n, "git"),
        )
        .expect("write");
    }
    let mut d = Daemon::start(DaemonOptions::new(
        repo.path().to_str().expect("utf-8 path"),
        &name,
    ));
    wait_for(
        "the daemon's first pass",
        Duration::from_secs(60),
        &|| d.logs(),
        async || value(&client, &name, "b").await,
    )
    .await;
    let uids = (
        uid(&client, &name, "a").await,
        uid(&client, &name, "b").await,
    );

    // A laptop 20 s ahead (after a sleep) or 20 s behind: the daemon renews its Lease, so it is
    // live, whatever the CLI's clock says of its renewTime.
    for skew in [20, -20] {
        // 20 s behind, the control plane's fresh certificates are not valid yet: wait until they
        // are (a dry run neither writes nor asks about the Lease).
        wait_for(
            "certificates valid on the skewed clock",
            Duration::from_secs(90),
            &|| d.logs(),
            async || {
                let out = skewed(&["sync", "--dry-run"], &name, Some(repo.path()), skew);
                out.status.success().then_some(())
            },
        )
        .await;
        let out = skewed(&["sync"], &name, Some(repo.path()), skew);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(1), "clock {skew:+}s: {t}");
        assert!(
            t.contains("is led by a live daemon"),
            "clock {skew:+}s: {t}"
        );
        let out = skewed(&["uninstall", "--prune"], &name, None, skew);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "clock {skew:+}s: {t}");
        assert!(t.contains("a live daemon (`"), "clock {skew:+}s: {t}");
        assert_eq!(
            (
                uid(&client, &name, "a").await,
                uid(&client, &name, "b").await
            ),
            uids,
            "clock {skew:+}s: the daemon's objects were touched\n{t}"
        );
    }

    // Stopped (SIGTERM releases the Lease): both proceed at once, whatever their clock.
    d.signal("TERM");
    d.wait_exit(Duration::from_secs(60));
    let out = skewed(&["sync"], &name, Some(repo.path()), 20);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = skewed(&["uninstall", "--prune"], &name, None, -20);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(value(&client, &name, "a").await, None, "{}", text(&out));
    ns.delete().await;
}
