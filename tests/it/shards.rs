//! Sharding the root across replicas (`weft run --shards N`) with real `weft run` processes, real
//! shard Leases and a git daemon on loopback: three replicas split a repository of twelve
//! top-level directories; each object is applied by exactly one shard, under that shard's owner,
//! and recorded in that shard's inventory only; a holder killed with SIGKILL is replaced by a
//! standby within the lease duration with nothing deleted; a push announced to any replica reaches
//! every shard; and changing N from 3 to 2 moves units to their new shards without deleting a
//! single object (every UID survives), and the retired shard's inventory is finished. Each test
//! runs twice: with the flag loop, and with the flag root a Root object (`--root-object`, passed
//! in parts by the shard holders, docs/roots.md), asserting the same.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::Api;

use support::cluster::TestNamespace;
use support::daemon::{github_push, Daemon, DaemonOptions};
use support::git_servers::{ServedRepo, WorkTree};
use support::manifests::configmap_with;
use weft::render::shard::{shard_of, shard_root_name};
use weft::render::Owner;

const DIRS: usize = 12;
const PER_DIR: usize = 4;

fn write_repo(work: &WorkTree, ns: &str, dirs: impl Iterator<Item = usize>, value: &str) {
    for d in dirs {
        let docs: Vec<String> = (0..PER_DIR)
            .map(|i| {
                let name = format!("t{d:02}-c{i}");
                configmap_with(ns, &name, &[("test", "shards")], &[("value", value)])
            })
            .collect();
        work.write(&format!("team-{d:02}/cms.yaml"), docs.join("---\n"));
    }
}

/// The owner id shard `index` applies under.
fn shard_owner(ns: &str, index: u32) -> String {
    Owner::root(ns, shard_root_name(ns, index)).id().0
}

/// The shard directory `dir` belongs to among `count`.
fn shard_of_dir(dir: usize, count: u32) -> u32 {
    shard_of(&format!("dir:team-{dir:02}"), count)
}

/// name → (uid, owner label, data.value) of the test's ConfigMaps.
async fn live(api: &Api<ConfigMap>) -> BTreeMap<String, (String, String, String)> {
    api.list(&ListParams::default().labels("test=shards"))
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|c| {
            let owner = c
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("weft.io/owner").cloned())
                .unwrap_or_default();
            let value = c
                .data
                .as_ref()
                .and_then(|d| d.get("value").cloned())
                .unwrap_or_default();
            (
                c.metadata.name.clone().unwrap_or_default(),
                (c.metadata.uid.clone().unwrap_or_default(), owner, value),
            )
        })
        .collect()
}

/// Wait until every ConfigMap of `dirs` exists with `value`, labelled by the shard of its
/// directory among `count`.
async fn wait_assigned(
    api: &Api<ConfigMap>,
    ns: &str,
    dirs: &[usize],
    count: u32,
    value: &str,
    within: Duration,
    logs: &dyn Fn() -> String,
) -> BTreeMap<String, (String, String, String)> {
    let deadline = Instant::now() + within;
    loop {
        let now = live(api).await;
        let right = dirs.iter().all(|&d| {
            (0..PER_DIR).all(|i| {
                now.get(&format!("t{d:02}-c{i}"))
                    .is_some_and(|(_, owner, v)| {
                        *owner == shard_owner(ns, shard_of_dir(d, count)) && v == value
                    })
            })
        });
        if right && now.len() == dirs.len() * PER_DIR {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "objects not assigned to their {count} shards with value {value} within {within:?}: {now:#?}\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn held(status: &serde_json::Value) -> Vec<u64> {
    status["shards"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
        .unwrap_or_default()
}

/// The shard inventory of `index` (entry names), read as any replica would.
async fn inventory_names(ns: &TestNamespace, index: u32) -> Option<BTreeSet<String>> {
    let owner = Owner::root(ns.name(), shard_root_name(ns.name(), index));
    weft::apply::inventory::read_root(&ns.client(), &owner, ns.name())
        .await
        .expect("read inventory")
        .map(|(entries, _)| entries.into_iter().map(|r| r.name).collect())
}

/// The repository, served, with every directory's ConfigMaps at value "one"; and its URL.
fn served(ns: &TestNamespace) -> (ServedRepo, String) {
    let repo = ServedRepo::start();
    write_repo(&repo.work, ns.name(), 0..DIRS, "one");
    repo.work.commit("one");
    repo.work.push();
    let url = repo.url();
    (repo, url)
}

/// The replicas' options; `object`: the flag root is a Root object (`--root-object`, passed in
/// parts by the shard holders' Root controllers), else the flag loop.
fn sharded<'a>(url: &'a str, ns: &'a str, count: u32, object: bool) -> DaemonOptions<'a> {
    // Every daemon runs the Root controller now (its flag root is a Root): it watches the
    // test's namespace only, or it would take the Roots of the tests beside it.
    let mut extra = vec![
        "--shards".into(),
        count.to_string(),
        "--watch-namespaces".into(),
        ns.into(),
    ];
    if object {
        extra.push("--root-object".into());
    }
    DaemonOptions {
        lease_duration: "4s",
        extra,
        // As pods: a holder passes a push on only to endpoints of Weft's Service.
        pod_ip: Some(support::daemon::host_ip()),
        ..DaemonOptions::new(url, ns)
    }
}

/// With `--root-object`, the flag root's Root passes the shards, not the flag loop: every
/// replica passed its part of the Root, the Root is Ready (shard 0's status), and it has no
/// root Lease (the shard Leases hold it).
async fn assert_passed_as_root_object(ns: &TestNamespace, replicas: &[&Daemon]) {
    let name = ns.name();
    let logs = || {
        replicas
            .iter()
            .map(|d| d.logs())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    let passed = format!("root pass succeeded root={name}/{name} ");
    let roots = Api::<weft::api::root::Root>::namespaced(ns.client(), name);
    support::wait::wait_for(
        "every shard holder passed its part of the Root, the Root Ready",
        Duration::from_secs(30),
        &logs,
        async || {
            let each = replicas.iter().all(|d| {
                let l = d.logs();
                l.contains("the flag root is reconciled as its Root object") && l.contains(&passed)
            });
            let status = roots.get_opt(name).await.ok()??.status?;
            let ready = status.conditions.iter().any(|c| {
                c.type_ == "Ready"
                    && c.reason == "ReconciliationSucceeded"
                    && format!("{:?}", c.status) == "True"
            });
            (each && ready).then_some(())
        },
    )
    .await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(ns.client(), name);
    let root_lease = format!("weft-root-{name}.{name}");
    assert!(
        leases.get_opt(&root_lease).await.unwrap().is_none(),
        "{}",
        logs()
    );
}

/// The endpoint controller's work: these replicas are the endpoints of Weft's Service.
async fn publish<'a>(ns: &TestNamespace, ds: impl IntoIterator<Item = &'a Daemon>) {
    let ports: Vec<u16> = ds.into_iter().map(|d| d.hooks_port).collect();
    support::daemon::publish_endpoints(ns.client(), ns.name(), &support::daemon::host_ip(), &ports)
        .await;
}

#[tokio::test]
async fn three_replicas_split_the_root_and_a_standby_replaces_a_killed_holder() {
    split_and_take_over(false).await;
}

/// The same, the flag root a Root object (`--root-object`): the same guarantees.
#[tokio::test]
async fn three_replicas_split_the_root_object_and_a_standby_replaces_a_killed_holder() {
    split_and_take_over(true).await;
}

async fn split_and_take_over(object: bool) {
    let ns = TestNamespace::new("shards").await;
    if object {
        support::cluster::install_crds(&ns.client()).await;
    }
    let (repo, url) = served(&ns);
    let work = &repo.work;
    let all: Vec<usize> = (0..DIRS).collect();
    // Every shard must have work for the test to mean anything.
    let used: BTreeSet<u32> = all.iter().map(|&d| shard_of_dir(d, 3)).collect();
    assert_eq!(used.len(), 3, "the directories do not cover the 3 shards");

    let replicas: Vec<Daemon> = (0..3)
        .map(|_| Daemon::start(sharded(&url, ns.name(), 3, object)))
        .collect();
    publish(&ns, &replicas).await;
    let logs = || {
        replicas
            .iter()
            .map(Daemon::logs)
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), ns.name());
    let before = wait_assigned(
        &api,
        ns.name(),
        &all,
        3,
        "one",
        Duration::from_secs(60),
        &logs,
    )
    .await;

    // One shard each, all three held.
    let mut holders: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, r) in replicas.iter().enumerate() {
        let s = r
            .wait_status("a shard held", Duration::from_secs(20), |s| {
                held(s).len() == 1
            })
            .await;
        assert_eq!(s["shardCount"], 3, "{s:#}");
        assert!(
            holders.insert(held(&s)[0], i).is_none(),
            "a shard held twice: {holders:?}"
        );
    }
    assert_eq!(holders.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
    if object {
        assert_passed_as_root_object(&ns, &replicas.iter().collect::<Vec<_>>()).await;
    }
    // The metrics say the same.
    let metrics = reqwest::get(format!("{}/metrics", replicas[0].base()))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body");
    let mine = held(&replicas[0].status().await)[0];
    assert!(
        metrics.contains(&format!("weft_shard_held{{shard=\"{mine}\"}} 1")),
        "{metrics}"
    );

    // Each shard's inventory holds exactly its own directories' objects.
    for index in 0..3u32 {
        let want: BTreeSet<String> = all
            .iter()
            .filter(|&&d| shard_of_dir(d, 3) == index)
            .flat_map(|&d| (0..PER_DIR).map(move |i| format!("t{d:02}-c{i}")))
            .collect();
        let got = inventory_names(&ns, index)
            .await
            .expect("a shard inventory");
        let got: BTreeSet<String> = got.into_iter().filter(|n| n.starts_with('t')).collect();
        assert_eq!(got, want, "shard {index}'s inventory");
    }

    // A standby, then SIGKILL of the holder of shard 1: the standby takes shard 1 over within
    // the 4 s lease (plus its retry period), and nothing is deleted.
    let standby = Daemon::start(sharded(&url, ns.name(), 3, object));
    publish(&ns, replicas.iter().chain([&standby])).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        held(&standby.status().await).is_empty(),
        "{}",
        standby.logs()
    );
    let victim = holders[&1];
    replicas[victim].signal("KILL");
    let killed = Instant::now();
    standby
        .wait_status("the standby takes shard 1", Duration::from_secs(20), |s| {
            held(s) == vec![1]
        })
        .await;
    let took = killed.elapsed();
    eprintln!("shard 1 taken over {took:?} after SIGKILL of its holder");
    assert!(took < Duration::from_secs(12), "takeover took {took:?}");

    // A push announced to the holder of shard 0 reaches every shard: shard 0 passes it on.
    write_repo(work, ns.name(), 0..DIRS, "two");
    work.commit("two");
    work.push();
    let (status, body) = github_push(&replicas[holders[&0]], "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");
    let after = wait_assigned(
        &api,
        ns.name(),
        &all,
        3,
        "two",
        Duration::from_secs(30),
        &|| format!("{}\n----\n{}", logs(), standby.logs()),
    )
    .await;
    assert!(
        replicas[holders[&0]]
            .logs()
            .contains("passed on to another shard"),
        "{}",
        replicas[holders[&0]].logs()
    );
    // Nothing was deleted and recreated: every UID is the one of the first pass.
    for (name, (uid, _, _)) in &before {
        assert_eq!(&after[name].0, uid, "{name} was recreated");
    }
    drop(repo);
    ns.delete().await;
}

#[tokio::test]
async fn changing_the_shard_count_moves_units_without_deleting_objects() {
    reshard(false).await;
}

/// The same, the flag root a Root object (`--root-object`).
#[tokio::test]
async fn changing_the_shard_count_of_the_root_object_moves_units_without_deleting_objects() {
    reshard(true).await;
}

async fn reshard(object: bool) {
    let ns = TestNamespace::new("reshard").await;
    if object {
        support::cluster::install_crds(&ns.client()).await;
    }
    let (repo, url) = served(&ns);
    let work = &repo.work;
    let all: Vec<usize> = (0..DIRS).collect();

    let mut three: Vec<Daemon> = (0..3)
        .map(|_| Daemon::start(sharded(&url, ns.name(), 3, object)))
        .collect();
    publish(&ns, &three).await;
    let logs3 = |ds: &[Daemon]| {
        ds.iter()
            .map(Daemon::logs)
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    let before = wait_assigned(
        &api_of(&ns),
        ns.name(),
        &all,
        3,
        "one",
        Duration::from_secs(60),
        &|| logs3(&three),
    )
    .await;
    assert!(
        inventory_names(&ns, 2).await.is_some(),
        "shard 2 has an inventory"
    );
    // Graceful stop: each replica releases its shard Lease.
    for d in &three {
        d.signal("TERM");
    }
    for d in &mut three {
        d.expect_clean_exit();
    }

    // N = 2. Units of the retired shard 2 (and any whose hash moved) are relabelled by their new
    // shard: an update, never a delete.
    let two: Vec<Daemon> = (0..2)
        .map(|_| Daemon::start(sharded(&url, ns.name(), 2, object)))
        .collect();
    publish(&ns, &two).await;
    let logs2 = || logs3(&two);
    let after = wait_assigned(
        &api_of(&ns),
        ns.name(),
        &all,
        2,
        "one",
        Duration::from_secs(60),
        &logs2,
    )
    .await;
    for (name, (uid, _, _)) in &before {
        assert_eq!(
            &after[name].0,
            uid,
            "{name} was deleted and recreated\n{}",
            logs2()
        );
    }
    if object {
        assert_passed_as_root_object(&ns, &two.iter().collect::<Vec<_>>()).await;
    }
    let moved = before
        .iter()
        .filter(|(name, (_, owner, _))| after[*name].1 != *owner)
        .count();
    assert!(moved > 0, "no unit changed shard: the test proves nothing");

    // Shard 0 finishes the retired shard 2: its inventory is deleted, nothing of it pruned.
    let deadline = Instant::now() + Duration::from_secs(30);
    while inventory_names(&ns, 2).await.is_some() {
        assert!(
            Instant::now() < deadline,
            "the retired shard's inventory stayed\n{}",
            logs2()
        );
        // Another pass of shard 0.
        for d in &two {
            let _ = github_push(d, "refs/heads/main", None).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(live(&api_of(&ns)).await.len(), DIRS * PER_DIR);

    // A directory removed from git is pruned by the shard that has it now, exactly.
    let gone = 0usize;
    work.remove(&format!("team-{gone:02}"));
    work.commit("drop team-00");
    work.push();
    let (status, body) = github_push(&two[0], "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");
    let rest: Vec<usize> = (1..DIRS).collect();
    let last = wait_assigned(
        &api_of(&ns),
        ns.name(),
        &rest,
        2,
        "one",
        Duration::from_secs(30),
        &logs2,
    )
    .await;
    for (name, (uid, _, _)) in &last {
        assert_eq!(&before[name].0, uid, "{name} was recreated");
    }

    // `weft uninstall --prune` of the sharded root: every shard's objects, inventories, root
    // records and Leases go (not only shard 0's).
    let mut two = two;
    for d in &two {
        d.signal("TERM");
    }
    for d in &mut two {
        d.expect_clean_exit();
    }
    let shard1_objects = last
        .values()
        .filter(|(_, owner, _)| *owner == shard_owner(ns.name(), 1))
        .count();
    assert!(
        shard1_objects > 0,
        "shard 1 applied nothing: the uninstall proves nothing"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "uninstall",
            "--prune",
            "--weft-namespace",
            ns.name(),
            "--root-name",
            ns.name(),
        ])
        .args(support::cluster::cluster().kube_args())
        .env_remove("WEFT_ROOT_NAME")
        .output()
        .expect("weft uninstall");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "weft uninstall --prune:\n{text}");
    assert!(
        live(&api_of(&ns)).await.is_empty(),
        "every shard's objects are pruned:\n{text}"
    );
    for index in [0, 1, 2] {
        assert!(
            inventory_names(&ns, index).await.is_none(),
            "shard {index}'s inventory is deleted:\n{text}"
        );
    }
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(ns.client(), ns.name());
    let left: Vec<String> = leases
        .list(&ListParams::default())
        .await
        .expect("list leases")
        .items
        .into_iter()
        .filter_map(|l| l.metadata.name)
        .collect();
    assert!(left.is_empty(), "Leases left: {left:?}\n{text}");
    let records = api_of(&ns)
        .list(&ListParams::default().labels("weft.io/root"))
        .await
        .expect("list root records");
    assert!(records.items.is_empty(), "root records left:\n{text}");
    drop(repo);
    ns.delete().await;
}

fn api_of(ns: &TestNamespace) -> Api<ConfigMap> {
    Api::namespaced(ns.client(), ns.name())
}
