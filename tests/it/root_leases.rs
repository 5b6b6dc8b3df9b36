//! Many roots, many replicas (issue 41 item 4) on the real control plane, with three real
//! `weft run` processes and a real git server: the replicas split twelve Root objects through a
//! Lease per root (in Weft's namespace), each root is passed once per revision by the one
//! replica that holds it, and the roots of a replica killed with SIGKILL move to the two others
//! within one lease duration (plus the rounds that notice it).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use support::cluster::{self, TestNamespace};
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::ServedRepo;
use support::manifests::configmap;
use support::wait::{wait_for, wait_timed};
use weft::api::root::Root;

const ROOTS: usize = 12;
const WITHIN: Duration = Duration::from_secs(180);
/// The replicas' `--lease-duration`: short, so a dead replica's roots move soon, yet long enough
/// that a loaded machine's late renewal does not move a live replica's roots (each root must be
/// passed by one replica per revision).
const LEASE: Duration = Duration::from_secs(8);

fn start_replica(ns: &str, flag_repo: &std::path::Path) -> Daemon {
    let mut opts = DaemonOptions::new(flag_repo.to_str().unwrap(), ns);
    opts.controllers = true;
    opts.lease_duration = "4s";
    opts.extra = vec!["--watch-namespaces".into(), ns.into()];
    Daemon::start(opts)
}

/// Every replica's logs, for a timeout's message.
fn all_logs<'a>(replicas: &'a [&'a Daemon]) -> impl Fn() -> String + 'a {
    move || {
        replicas
            .iter()
            .map(|d| format!("--- replica {} ---\n{}", d.pid(), d.logs()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Holder identity of each of the twelve roots' Leases (by the root's name), from the Leases
/// themselves. The replicas' flag root is a Root of Weft's namespace too (named as the
/// namespace), split with the others; it is not one of the twelve, so it is left out.
async fn holders(client: &Client, ns: &str) -> BTreeMap<String, String> {
    let twelve = root_names();
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    leases
        .list(&ListParams::default().labels("weft.io/lease=root"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| {
            let root = l.annotations().get("weft.io/root")?.clone();
            let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((root.rsplit('/').next().unwrap().to_string(), holder))
        })
        .filter(|(root, _)| twelve.contains(root))
        .collect()
}

/// How many root Leases each replica (its pid) holds, the replicas' flag root's included: what
/// a replica counts when it weighs its share.
async fn holdings(client: &Client, ns: &str) -> BTreeMap<u32, usize> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let mut by: BTreeMap<u32, usize> = BTreeMap::new();
    for lease in leases
        .list(&ListParams::default().labels("weft.io/lease=root"))
        .await
        .unwrap()
        .items
    {
        if let Some(holder) = lease.spec.and_then(|s| s.holder_identity) {
            if !holder.is_empty() {
                *by.entry(pid_of(&holder)).or_default() += 1;
            }
        }
    }
    by
}

/// Wait until the split has settled on `replicas` and each of the twelve roots was passed at
/// `commit` by the replica that holds it: all thirteen roots (the flag root's too) held, none
/// by another process, no replica above `ceil + 1`, and none above `ceil` while another holds
/// fewer than `floor` (`roots::lease::share_now`, whose balancing then still moves roots). A
/// root that moves is passed by its new holder; after this, a revision is passed once per root.
async fn wait_settled(
    client: &Client,
    ns: &str,
    replicas: &[&Daemon],
    commit: &str,
) -> BTreeMap<String, String> {
    let pids: BTreeSet<u32> = replicas.iter().map(|d| d.pid()).collect();
    let n = pids.len();
    let total = ROOTS + 1;
    let (ceil, floor) = (total.div_ceil(n), total / n);
    wait_for(
        &format!("the split settled on {n} replicas, each root passed at {commit} by its holder"),
        WITHIN,
        &all_logs(replicas),
        async || {
            let by = holdings(client, ns).await;
            let counts: Vec<usize> = pids
                .iter()
                .map(|p| by.get(p).copied().unwrap_or(0))
                .collect();
            let held = counts.iter().sum::<usize>();
            let (most, least) = (*counts.iter().max()?, *counts.iter().min()?);
            if held != total || most > ceil + 1 || (most > ceil && least < floor) {
                return None;
            }
            let split = holders(client, ns).await;
            let passes = passes_at(replicas, ns, commit);
            let passed = split.len() == ROOTS
                && split.iter().all(|(root, holder)| {
                    passes
                        .get(root)
                        .is_some_and(|by| by.contains(&pid_of(holder)))
                });
            passed.then_some(split)
        },
    )
    .await
}

/// The replica (its pid) an identity `host_pid` names.
fn pid_of(identity: &str) -> u32 {
    identity.rsplit('_').next().unwrap().parse().unwrap()
}

fn root_names() -> Vec<String> {
    (0..ROOTS).map(|i| format!("r{i:02}")).collect()
}

/// Write revision `value` of every root's ConfigMap; the commit.
fn write_all(repo: &ServedRepo, ns: &str, value: &str) -> String {
    for name in root_names() {
        repo.work.write(
            &format!("{name}/cm.yaml"),
            configmap(ns, &format!("cm-{name}"), value),
        );
    }
    let commit = repo.work.commit(value);
    repo.work.push();
    commit
}

/// Ask every root for a pass now (`weft.io/requested-at`, as `weft trigger`).
async fn request_all(client: &Client, ns: &str, token: &str) {
    let api: Api<Root> = Api::namespaced(client.clone(), ns);
    for name in root_names() {
        let patch = json!({"metadata": {"annotations": {"weft.io/requested-at": token}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
}

/// Wait until every root is Ready at `commit` and its ConfigMap says `value`.
async fn wait_all_applied(
    client: &Client,
    ns: &str,
    commit: &str,
    value: &str,
    logs: &impl support::wait::Logs,
) {
    let roots: Api<Root> = Api::namespaced(client.clone(), ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("all {ROOTS} roots applied {value}"),
        WITHIN,
        logs,
        async || {
            for name in root_names() {
                let root = roots.get(&name).await.ok()?;
                let status = root.status?;
                if !status
                    .last_applied_revision
                    .is_some_and(|r| r.contains(commit))
                {
                    return None;
                }
                let cm = maps.get_opt(&format!("cm-{name}")).await.ok()??;
                if cm.data?.get("value")? != value {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

/// How many times each replica passed each root at `commit` (from its logs).
fn passes_at(replicas: &[&Daemon], ns: &str, commit: &str) -> BTreeMap<String, Vec<u32>> {
    let mut by_root: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for d in replicas {
        for line in d.logs().lines() {
            if !line.contains("root pass succeeded") || !line.contains(commit) {
                continue;
            }
            for name in root_names() {
                if line.contains(&format!("root={ns}/{name} ")) {
                    by_root.entry(name).or_default().push(d.pid());
                }
            }
        }
    }
    by_root
}

/// The twelve Roots, one directory of `repo` each, polled hourly (a pass comes from a request
/// or a push).
async fn create_roots(client: &Client, ns: &str, repo: &ServedRepo) {
    let roots: Api<Root> = Api::namespaced(client.clone(), ns);
    for name in root_names() {
        let root: Root = serde_json::from_value(json!({
            "apiVersion": "weft.io/v1alpha1",
            "kind": "Root",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"source": {"url": repo.url()}, "path": name, "interval": "1h"},
        }))
        .unwrap();
        roots.create(&Default::default(), &root).await.unwrap();
    }
}

/// A Weft namespace `prefix-…` and a repository with revision `one` of every root's directory:
/// the client, the namespace, the repository and its commit.
async fn set_up(prefix: &str) -> (Client, TestNamespace, ServedRepo, String) {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new(prefix).await;
    let repo = ServedRepo::start();
    let one = write_all(&repo, weft_ns.name(), "one");
    (client, weft_ns, repo, one)
}

/// Wait until `count` replicas say they are alive (their replica Leases).
async fn wait_replicas(client: &Client, ns: &str, count: usize, logs: &impl support::wait::Logs) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("{count} replica Leases"),
        WITHIN,
        logs,
        async || {
            let n = leases
                .list(&ListParams::default().labels("weft.io/lease=replica"))
                .await
                .ok()?
                .items
                .len();
            (n == count).then_some(())
        },
    )
    .await;
}

/// A push webhook sent to the leader passes every Root of its repository, those another
/// replica holds too, each by its holder, once: passed on to the holder over HTTP (no Root
/// written), or, when the holder's published URL is not an endpoint of Weft's Service, asked
/// through their `weft.io/requested-at`. `POST /api/v1/sync?root=` takes the same way to the
/// replica holding the Root it names.
#[tokio::test]
async fn a_push_or_a_sync_request_reaches_the_roots_another_replica_holds() {
    let (client, weft_ns, repo, one) = set_up("root-push").await;
    let ns = weft_ns.name();
    let flag = tempfile::tempdir().unwrap();
    // As pods: each publishes `http://<ip>:<hooks port>` on its replica Lease.
    let ip = support::daemon::host_ip();
    let start = || {
        let mut opts = DaemonOptions::new(flag.path().to_str().unwrap(), ns);
        opts.controllers = true;
        opts.lease_duration = "4s";
        opts.extra = vec!["--watch-namespaces".into(), ns.into()];
        opts.pod_ip = Some(ip.clone());
        Daemon::start(opts)
    };
    let a = start();
    let b = start();
    let everyone = [&a, &b];
    let logs = all_logs(&everyone);
    support::daemon::publish_endpoints(client.clone(), ns, &ip, &[a.hooks_port, b.hooks_port])
        .await;
    wait_replicas(&client, ns, 2, &logs).await;
    create_roots(&client, ns, &repo).await;
    wait_all_applied(&client, ns, &one, "one", &logs).await;
    // Both replicas hold some of the twelve (6 or 7 of the 13 each, once settled).
    let split = wait_settled(&client, ns, &everyone, &one).await;
    let by: BTreeSet<u32> = split.values().map(|h| pid_of(h)).collect();
    assert_eq!(by.len(), 2, "{split:?}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    // The leader Lease of the replicas' flag root (`weft-leader-<root name>`).
    let leader = wait_for("a leader", WITHIN, &logs, async || {
        let lease = leases.get_opt(&format!("weft-leader-{ns}")).await.ok()??;
        let pid = pid_of(&lease.spec?.holder_identity?);
        everyone.iter().find(|d| d.pid() == pid).copied()
    })
    .await;

    let other = everyone.iter().find(|d| d.pid() != leader.pid()).unwrap();
    let roots: Api<Root> = Api::namespaced(client.clone(), ns);
    // The twelve Roots of the pushed repository. The replicas' flag root's Root is left out: a
    // push also asks the flag root for a pass (as the flag loop did), and when the replica
    // holding its Lease is not the leader that request goes through its `weft.io/requested-at`
    // (roots.md, "requests that name no Root"), which depends on how the Leases fell.
    let twelve = root_names();
    let asked = async || -> BTreeSet<String> {
        let listed = roots.list(&ListParams::default()).await.unwrap().items;
        listed
            .iter()
            .filter(|r| r.annotations().contains_key("weft.io/requested-at"))
            .map(|r| r.name_any())
            .filter(|n| twelve.contains(n))
            .collect()
    };
    assert_eq!(asked().await, BTreeSet::new(), "no Root was asked yet");

    // Passed on over HTTP: every root passes once, by its holder, and no Root is written to ask.
    let pushed = push_and_wait(&client, ns, &repo, leader, &everyone, &split, "pushed").await;
    assert_eq!(
        asked().await,
        BTreeSet::new(),
        "a push that could be passed on wrote to Roots"
    );
    assert!(
        other
            .logs()
            .contains("a push passed on by another replica asked the Roots held here"),
        "{}",
        other.logs()
    );

    // The sync endpoint naming a Root, sent to either replica: the replica holding the Root
    // passes it (reason `api`), and no Root is written to ask. Before, the leader marked a Root
    // another replica holds as due on itself, answered 202, and nothing passed it.
    let asked_rev = write_all(&repo, ns, "asked");
    let split = holders(&client, ns).await;
    let held_by = |pid: u32| {
        split
            .iter()
            .find(|(_, h)| pid_of(h) == pid)
            .map(|(r, _)| r.clone())
            .unwrap()
    };
    let (theirs, ours) = (held_by(other.pid()), held_by(leader.pid()));
    for (to, root) in [(leader, &theirs), (*other, &ours)] {
        let (code, body) = support::daemon::sync_root_of(to, &format!("{ns}/{root}")).await;
        assert_eq!(code, 202, "{body}");
    }
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for root in [&theirs, &ours] {
        wait_for(
            &format!("root {root} passed at the sync endpoint's request"),
            WITHIN,
            &logs,
            async || {
                let cm = maps.get_opt(&format!("cm-{root}")).await.ok()??;
                (cm.data?.get("value")? == "asked").then_some(())
            },
        )
        .await;
    }
    let passes = passes_at(&everyone, ns, &asked_rev);
    assert_eq!(passes.get(&theirs), Some(&vec![other.pid()]), "{passes:?}");
    assert_eq!(passes.get(&ours), Some(&vec![leader.pid()]), "{passes:?}");
    assert_eq!(
        asked().await,
        BTreeSet::new(),
        "a sync request that could be passed on wrote to Roots"
    );
    assert!(
        other
            .logs()
            .contains("a sync request passed on by another replica asked the Root held here"),
        "{}",
        other.logs()
    );
    // The other roots were not asked: they pass at the next push.

    // The holder's URL is no endpoint of Weft's Service any more: its roots are asked through
    // the API server, and pass all the same.
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), ns);
    slices
        .delete("weft-test", &Default::default())
        .await
        .unwrap();
    // A listing of the endpoints vouches for an address for 2 s (`server::forward`'s
    // `ENDPOINTS_FRESH`: a burst of requests lists them once); the leader's last one was made
    // for the sync requests above. Waited out: a time the code promises, not a race.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let split = holders(&client, ns).await;
    let third = push_and_wait(&client, ns, &repo, leader, &everyone, &split, "third").await;
    let theirs: BTreeSet<String> = split
        .iter()
        .filter(|(_, h)| pid_of(h) == other.pid())
        .map(|(r, _)| r.clone())
        .collect();
    let written = asked().await;
    assert!(
        !theirs.is_empty() && theirs.is_subset(&written),
        "the other replica's roots {theirs:?}, asked through their Root: {written:?} (at {pushed}, then {third})"
    );

    // Passed on again, a push of the same revision: every root passes once more and changes
    // nothing, and no Root is written — not its status either, also where an answered
    // `weft.io/requested-at` stays on the Root (every pass of such a Root wrote its status).
    support::daemon::publish_endpoints(client.clone(), ns, &ip, &[a.hooks_port, b.hooks_port])
        .await;
    let versions = async || -> BTreeMap<String, String> {
        let listed = roots.list(&ListParams::default()).await.unwrap().items;
        listed
            .iter()
            .filter(|r| twelve.contains(&r.name_any()))
            .map(|r| (r.name_any(), r.resource_version().unwrap_or_default()))
            .collect()
    };
    let before = versions().await;
    let payload = json!({"ref": "refs/heads/main", "repository": {"clone_url": repo.url()}});
    let (code, answer) = support::daemon::github_push_of(leader, payload, None).await;
    assert_eq!(code, 202, "{answer}");
    wait_for(
        "every root passed a second time at the same revision",
        WITHIN,
        &logs,
        async || {
            let passes = passes_at(&everyone, ns, &third);
            root_names()
                .iter()
                .all(|n| passes.get(n).is_some_and(|p| p.len() == 2))
                .then_some(())
        },
    )
    .await;
    let after = versions().await;
    // On a failure, what the written Roots say: a daemon of another test that watches every
    // namespace reconciles these Roots too (and finds them Stalled, as roots outside its
    // namespace without a ServiceAccount): its writes are not this test's replicas'.
    let mut said = Vec::new();
    if after != before {
        for r in roots.list(&ListParams::default()).await.unwrap().items {
            let ready = support::conditions::ready(&r)
                .map_or("no Ready condition".into(), |(_, reason, message)| {
                    format!("Ready {reason}: {message}")
                });
            said.push(format!("{}: {ready}", r.name_any()));
        }
    }
    assert_eq!(
        after,
        before,
        "a push that changed nothing wrote to Roots:\n{}",
        said.join("\n")
    );
}

/// Write revision `value` of every root, send its push to `leader`, and wait until every root
/// applied it, each passed once by the replica holding it (`split`: before the push). Returns
/// the commit.
async fn push_and_wait(
    client: &Client,
    ns: &str,
    repo: &ServedRepo,
    leader: &Daemon,
    everyone: &[&Daemon],
    split: &BTreeMap<String, String>,
    value: &str,
) -> String {
    let pushed = write_all(repo, ns, value);
    let payload = json!({"ref": "refs/heads/main", "repository": {"clone_url": repo.url()}});
    let (code, answer) = support::daemon::github_push_of(leader, payload, None).await;
    assert_eq!(code, 202, "{answer}");
    wait_all_applied(client, ns, &pushed, value, &all_logs(everyone)).await;
    let passes = passes_at(everyone, ns, &pushed);
    let now = holders(client, ns).await;
    for name in root_names() {
        let by = passes.get(&name).cloned().unwrap_or_default();
        assert_eq!(
            by,
            vec![pid_of(&now[&name])],
            "root {name}: passes at {pushed} by replicas {by:?}, Lease held by {} (before the push: {})",
            now[&name],
            split[&name]
        );
    }
    // Some of them were held by the replica the push did not reach.
    assert!(
        split.values().any(|h| pid_of(h) != leader.pid()),
        "{split:?}"
    );
    pushed
}

#[tokio::test]
async fn three_replicas_split_twelve_roots_and_take_over_a_killed_ones() {
    let (client, weft_ns, repo, one) = set_up("root-leases").await;
    let ns = weft_ns.name();

    let flag = tempfile::tempdir().unwrap();
    let a = start_replica(ns, flag.path());
    let b = start_replica(ns, flag.path());
    wait_replicas(&client, ns, 2, &all_logs(&[&a, &b])).await;
    create_roots(&client, ns, &repo).await;
    wait_all_applied(&client, ns, &one, "one", &all_logs(&[&a, &b])).await;
    // The two split the thirteen roots (the twelve and the flag root's): 7 and 6.
    wait_settled(&client, ns, &[&a, &b], &one).await;

    // A third replica joins: the two give back down to an even split's ceiling (5) while it is
    // short of roots, and it takes what they free. With a share's slack alone they kept 6 each
    // and left it 1 (the split 6, 6 and 1 failed this test in CI, when the third was slow).
    let mut c = start_replica(ns, flag.path());
    let everyone = [&a, &b, &c];
    let logs = all_logs(&everyone);
    wait_replicas(&client, ns, 3, &logs).await;
    // Every root held by one replica, the roots spread over all three, none above its share.
    let split = wait_settled(&client, ns, &everyone, &one).await;
    assert_eq!(split.len(), ROOTS, "{split:?}");
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for holder in split.values() {
        *counts.entry(pid_of(holder)).or_default() += 1;
    }
    let pids: BTreeSet<u32> = everyone.iter().map(|d| d.pid()).collect();
    assert_eq!(
        counts.keys().copied().collect::<BTreeSet<_>>(),
        pids,
        "{split:?}"
    );
    // A replica's share (`roots::lease::fair_share`) counts every root of the namespace: the
    // twelve and the flag root's Root.
    let share = (ROOTS + 1).div_ceil(3) + 1;
    assert!(counts.values().all(|&n| n <= share), "{counts:?}");

    // A new revision: each root is passed once, by the replica that holds its Lease.
    let two = write_all(&repo, ns, "two");
    request_all(&client, ns, "two").await;
    wait_all_applied(&client, ns, &two, "two", &logs).await;
    let split = holders(&client, ns).await;
    let passes = passes_at(&everyone, ns, &two);
    for name in root_names() {
        let by = passes.get(&name).cloned().unwrap_or_default();
        assert_eq!(
            by,
            vec![pid_of(&split[&name])],
            "root {name}: passes at {two} by replicas {by:?}, Lease held by {}",
            split[&name]
        );
    }

    // kill -9 one replica: its roots move to the two others within one lease duration (plus
    // the rounds in which they notice it).
    drop(logs);
    let dead = c.pid();
    let theirs: Vec<String> = split
        .iter()
        .filter(|(_, h)| pid_of(h) == dead)
        .map(|(r, _)| r.clone())
        .collect();
    assert!(!theirs.is_empty());
    let before_kill: BTreeMap<String, String> = {
        let roots: Api<Root> = Api::namespaced(client.clone(), ns);
        let mut last = BTreeMap::new();
        for name in &theirs {
            let status = roots.get(name).await.unwrap().status.unwrap();
            last.insert(
                name.clone(),
                status.passes.first().unwrap().started_at.clone(),
            );
        }
        last
    };
    c.signal("KILL");
    // Killed by the signal: no exit code (and it gave nothing back).
    assert_eq!(c.wait_exit(Duration::from_secs(10)), None);
    let survivors = [&a, &b];
    let (moved, took) = wait_timed(
        "the killed replica's roots held by the others",
        WITHIN,
        &all_logs(&survivors),
        async || {
            let now = holders(&client, ns).await;
            let all_alive = now.len() == ROOTS && now.values().all(|h| pid_of(h) != dead);
            all_alive.then_some(now)
        },
    )
    .await;
    // About the lease duration and two rounds (one to see the renew time stand still, one to
    // take it; a round is a seventh of the duration): 4.0 s measured with a 4 s Lease. The
    // bound only says the roots move within a few lease durations (it failed at 8.5 s against a
    // tighter bound on a loaded CI machine); speed is a benchmark's figure, not a test's.
    let bound = LEASE * 3 + Duration::from_secs(10);
    println!("the killed replica's roots moved in {took:?}");
    assert!(took <= bound, "took {took:?} (bound {bound:?}): {moved:?}");

    // Taking a root passes it (its new holder never did): wait for those passes, and for the
    // split of the two to settle, so the next revision is passed once, on request.
    let roots: Api<Root> = Api::namespaced(client.clone(), ns);
    wait_for(
        "the moved roots passed by their new holders",
        WITHIN,
        &all_logs(&survivors),
        async || {
            for name in &theirs {
                let status = roots.get(name).await.ok()?.status?;
                let last = status.passes.first()?.started_at.clone();
                if Some(&last) == before_kill.get(name) {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    wait_settled(&client, ns, &survivors, &two).await;

    // The moved roots are reconciled by their new holders: a new revision, each once.
    let three = write_all(&repo, ns, "three");
    request_all(&client, ns, "three").await;
    wait_all_applied(&client, ns, &three, "three", &all_logs(&survivors)).await;
    let split = holders(&client, ns).await;
    let passes = passes_at(&survivors, ns, &three);
    for name in root_names() {
        let by = passes.get(&name).cloned().unwrap_or_default();
        assert_eq!(by, vec![pid_of(&split[&name])], "root {name}: {by:?}");
    }
}
