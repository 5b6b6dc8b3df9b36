//! Takeover of a Weave Cloud launcher installation by `weft run`, on the real control plane.
//!
//! Each test installs a launcher-era cluster made from the facts in
//! tests/fixtures/launcher/FACTS.md (`weave-ns.yaml`: the launcher agent and its agents in the
//! WeaveCloud's namespace; `kube-system.yaml`: the older install in kube-system), puts the seed's
//! WeaveCloud (tests/fixtures/weavecloud-seed) in a git repository served on loopback, and runs
//! the real `weft run` binary. Then it checks what a user would look at: which agents run, what
//! is gone, which arguments and data survived, the WeaveCloud's status and events, and that a
//! second daemon over the same cluster writes nothing.
//!
//! The launcher's cluster-scoped objects have fixed names (`weave-agent`, `weave-flux`, …) and
//! the WeaveCloud controller watches every namespace, so the tests of this binary take turns
//! (`ONE_AT_A_TIME`); each still has its own namespace, and removes the cluster-scoped and
//! kube-system launcher objects it made before and after it runs.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Secret};
use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};

use support::cluster::TestNamespace;
use support::conditions::condition;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::launcher::*;
use support::wait::wait_for;
use weft::api::WeaveCloud;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A git repository on loopback holding `weavecloud` (the root's only document), and its URL.
fn config_repo(weavecloud: String) -> (RepoHost, GitDaemon, String) {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write("weave/weave-cloud.yaml", weavecloud);
    work.commit("the WeaveCloud of the seed");
    work.push();
    let url = server.url("config.git");
    (host, server, url)
}

/// `weft run` as an operator migrating from the launcher runs it: the seed's WeaveCloud is the
/// one designated to take over an install in kube-system (issue 30: no other WeaveCloud acts
/// there).
fn start_daemon(url: &str, ns: &str) -> Daemon {
    Daemon::start(DaemonOptions {
        controllers: true,
        extra: vec!["--launcher-takeover".into(), format!("{ns}/weave-cloud")],
        ..DaemonOptions::new(url, ns)
    })
}

/// What kind of agent a workload runs, from its first container (image, and scope's role);
/// `None` for workloads that are no Weave Cloud agent.
fn agent_kind(pod: &PodTemplateSpec) -> Option<&'static str> {
    let c = pod.spec.as_ref()?.containers.first()?;
    let image = c.image.as_deref().unwrap_or_default();
    let args = c.args.clone().unwrap_or_default();
    let kind = if image.contains("launcher-agent") {
        "weave-agent"
    } else if image.contains("memcached") {
        "memcached"
    } else if image.contains("flux") {
        "flux"
    } else if image.contains("weaveworks/scope") {
        if args.iter().any(|a| a == "--probe.kubernetes.role=cluster") {
            "scope cluster agent"
        } else {
            "scope probe"
        }
    } else if image.contains("node-exporter") {
        "node exporter"
    } else if image.contains("kube-state-metrics") {
        "kube-state-metrics"
    } else if image.contains("prometheus") {
        "prometheus"
    } else {
        return None;
    };
    Some(kind)
}

/// Every agent workload in `namespaces`: kind of agent → `Kind/namespace/name`s.
async fn agents_running(
    client: &Client,
    namespaces: &[&str],
) -> BTreeMap<&'static str, Vec<String>> {
    let mut out: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for ns in namespaces {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
        for d in deployments
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
        {
            if let Some(k) = d.spec.as_ref().and_then(|s| agent_kind(&s.template)) {
                out.entry(k)
                    .or_default()
                    .push(format!("Deployment/{ns}/{}", d.name_any()));
            }
        }
        let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
        for d in daemonsets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
        {
            if let Some(k) = d.spec.as_ref().and_then(|s| agent_kind(&s.template)) {
                out.entry(k)
                    .or_default()
                    .push(format!("DaemonSet/{ns}/{}", d.name_any()));
            }
        }
    }
    out
}

/// The agents a launcher install runs and Weft replaces, one of each.
const AGENT_KINDS: &[&str] = &[
    "flux",
    "memcached",
    "scope probe",
    "scope cluster agent",
    "prometheus",
    "kube-state-metrics",
    "node exporter",
];

/// Exactly one agent of each kind, each applied by Weft, and no weave-agent.
fn assert_one_weft_agent_of_each_kind(running: &BTreeMap<&'static str, Vec<String>>) {
    assert!(
        !running.contains_key("weave-agent"),
        "weave-agent still runs: {running:?}"
    );
    for kind in AGENT_KINDS {
        assert_eq!(
            running.get(kind).map(Vec::len),
            Some(1),
            "exactly one {kind}: {running:?}"
        );
    }
}

/// `Kind/namespace/name` → resourceVersion of everything the WeaveCloud applied (its
/// inventory) and of the Secrets of `ns`; workloads by `metadata.generation` (their status
/// moves with their pods, their spec only with a write).
async fn written_state(client: &Client, wc: &WeaveCloud, ns: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let inventory = wc
        .status
        .as_ref()
        .map(|s| s.inventory.clone())
        .unwrap_or_default();
    assert!(!inventory.is_empty(), "the WeaveCloud has an inventory");
    for r in inventory {
        let v = serde_json::to_value(&r).expect("object ref");
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        let name = v["name"].as_str().unwrap_or_default().to_string();
        let object_ns = v["namespace"].as_str().filter(|s| !s.is_empty());
        let live = dynamic_api(client, &kind, object_ns)
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("{kind} {object_ns:?}/{name}: {e}"));
        let version = if matches!(kind.as_str(), "Deployment" | "DaemonSet") {
            format!("generation {:?}", live.metadata.generation)
        } else {
            live.resource_version().unwrap_or_default()
        };
        out.insert(
            format!("{kind}/{}/{name}", object_ns.unwrap_or("")),
            version,
        );
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for s in secrets
        .list(&ListParams::default())
        .await
        .expect("secrets")
        .items
    {
        out.insert(
            format!("Secret/{ns}/{}", s.name_any()),
            s.resource_version().unwrap_or_default(),
        );
    }
    out
}

/// A counter of the daemon's `/metrics` (`weft_objects_total{action="applied"}` …), 0 if absent.
async fn metric(d: &Daemon, series: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", d.base()))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Delete the WeaveCloud while its daemon runs (its finalizer prunes the agents), so that the
/// namespace can go.
async fn delete_weavecloud(wcs: &Api<WeaveCloud>, d: &Daemon) {
    wcs.delete("weave-cloud", &DeleteParams::default())
        .await
        .expect("delete the WeaveCloud");
    wait_for(
        "the WeaveCloud is gone",
        Duration::from_secs(60),
        d,
        async || {
            wcs.get_opt("weave-cloud")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
}

/// The checks both takeovers share: one Weft agent of each kind in `ns` and none left in
/// `launcher_ns`, weave-agent and the launcher's `*` bindings gone, flux and memcached arguments
/// preserved, the deploy key's data unchanged, the WeaveCloud Ready with the removals in status
/// and events; then a second daemon writes nothing.
async fn check_takeover(
    client: &Client,
    ns: &str,
    launcher_ns: &str,
    expected_git_args: &[&str],
    deploy_key: &BTreeMap<String, Vec<u8>>,
    expected_removed: &[String],
    url: &str,
) {
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), ns);
    let d = start_daemon(url, ns);
    let wc = wait_for(
        "the WeaveCloud is Ready",
        Duration::from_secs(180),
        &d,
        async || {
            let wc = wcs.get("weave-cloud").await.ok()?;
            let ready = condition(&wc, "Ready")?;
            // The takeover's condition is written by the reconcile that took over, or (if a
            // later reconcile started from an older copy) by the next one.
            condition(&wc, "LauncherObjects")?;
            (ready.0 == "True" && wc.status.as_ref()?.observed_generation == wc.metadata.generation)
                .then_some(wc)
        },
    )
    .await;

    let mut namespaces = vec![ns];
    if launcher_ns != ns {
        namespaces.push(launcher_ns);
    }
    let running = agents_running(client, &namespaces).await;
    assert_one_weft_agent_of_each_kind(&running);
    for (kind, workloads) in &running {
        assert!(
            workloads[0].contains(&format!("/{ns}/")),
            "the {kind} runs in the WeaveCloud's namespace: {workloads:?}"
        );
    }
    for name in [
        "weave-flux-agent",
        "weave-flux-memcached",
        "weave-scope-cluster-agent",
    ] {
        let dep = deployment(client, ns, name).await;
        assert!(is_weft_managed(&dep.metadata), "{name} is Weft's now");
    }

    // weave-agent and the launcher's bindings to `*` on everything are gone.
    assert!(
        Api::<Deployment>::namespaced(client.clone(), ns)
            .get_opt("weave-agent")
            .await
            .expect("get")
            .is_none(),
        "Deployment weave-agent is gone"
    );
    assert!(
        dynamic_api(client, "ServiceAccount", Some(ns))
            .get_opt("weave-agent")
            .await
            .expect("get")
            .is_none(),
        "ServiceAccount weave-agent is gone"
    );
    for name in LAUNCHER_CLUSTER_NAMES {
        for kind in ["ClusterRoleBinding", "ClusterRole"] {
            assert!(
                dynamic_api(client, kind, None)
                    .get_opt(name)
                    .await
                    .expect("get")
                    .is_none(),
                "the launcher's {kind} {name} is gone"
            );
        }
    }

    // Arguments kept: flux's git settings, memcached's -m/-I.
    let flux = deployment(client, ns, "weave-flux-agent").await;
    let flux_args = container_args(&flux.spec.expect("spec").template, "flux-agent");
    for a in expected_git_args {
        assert!(
            flux_args.iter().any(|x| x == a),
            "flux keeps {a}: {flux_args:?}"
        );
    }
    let memcached = deployment(client, ns, "weave-flux-memcached").await;
    let memcached_args = container_args(&memcached.spec.expect("spec").template, "memcached");
    for a in LAUNCHER_MEMCACHED_ARGS {
        assert!(
            memcached_args.iter().any(|x| x == a),
            "memcached keeps {a}: {memcached_args:?}"
        );
    }
    assert!(
        !memcached_args.iter().any(|x| x == "-m 512" || x == "-I 5m"),
        "the bundle's defaults did not come back: {memcached_args:?}"
    );
    let status = wc.status.clone().expect("status");
    let flux_status = status.flux.clone().expect("status.flux");
    for a in LAUNCHER_MEMCACHED_ARGS {
        assert!(
            flux_status.preserved_memcached_args.iter().any(|x| x == a),
            "status.flux.preservedMemcachedArgs lists {a}: {flux_status:?}"
        );
    }

    // The deploy key's data is what fluxd wrote.
    let key = Api::<Secret>::namespaced(client.clone(), ns)
        .get("flux-git-deploy")
        .await
        .expect("the flux-git-deploy Secret");
    let data: BTreeMap<String, Vec<u8>> = key
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    assert_eq!(&data, deploy_key, "the deploy key's data is unchanged");

    // Status and events list the removals; the condition says it was taken over.
    let takeover = status.takeover.clone().expect("status.takeover");
    for r in expected_removed {
        assert!(
            takeover.removed.contains(r),
            "status.takeover.removed lists {r}: {:?}",
            takeover.removed
        );
    }
    assert!(takeover.left.is_empty(), "{takeover:?}");
    let launcher = condition(&wc, "LauncherObjects").expect("condition LauncherObjects");
    assert_eq!(
        (launcher.0.as_str(), launcher.1.as_str()),
        ("False", "TakenOver")
    );
    let notes = event_notes(client, ns, "LauncherObjectRemoved").await;
    for r in expected_removed {
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with(&format!("deleted {r}: "))),
            "an event for {r}: {notes:?}"
        );
    }
    assert!(
        !d.logs().contains("launcher-fixture-token-not-real"),
        "the token is never logged"
    );

    // A second pass changes nothing: a new daemon (a fresh root pass and WeaveCloud reconcile)
    // over the same cluster writes no object and removes nothing more.
    let before = written_state(client, &wc, ns).await;
    let removed_before = takeover.removed.clone();
    let events_before = notes.len();
    drop(d);
    let d = start_daemon(url, ns);
    wait_for(
        "the second daemon reconciled the WeaveCloud",
        Duration::from_secs(60),
        &d,
        async || {
            let done = metric(
                &d,
                "weft_reconciles_total{kind=\"WeaveCloud\",result=\"ready\"}",
            )
            .await
                >= 1.0
                && metric(&d, "weft_passes_total{result=\"succeeded\"}").await >= 1.0;
            done.then_some(())
        },
    )
    .await;
    assert_eq!(
        metric(&d, "weft_objects_total{action=\"applied\"}").await,
        0.0,
        "the second pass applied nothing\nlogs:\n{}",
        d.logs()
    );
    assert_eq!(
        metric(&d, "weft_objects_total{action=\"pruned\"}").await,
        0.0
    );
    assert!(metric(&d, "weft_objects_total{action=\"unchanged\"}").await > 0.0);
    let wc = wcs.get("weave-cloud").await.expect("wc");
    assert_eq!(
        written_state(client, &wc, ns).await,
        before,
        "no object changed in the second pass"
    );
    assert_eq!(
        wc.status.and_then(|s| s.takeover).map(|t| t.removed),
        Some(removed_before)
    );
    assert_eq!(
        event_notes(client, ns, "LauncherObjectRemoved").await.len(),
        events_before,
        "no new removal"
    );
    delete_weavecloud(&wcs, &d).await;
}

#[tokio::test]
async fn weft_run_takes_over_a_launcher_install_in_the_weavecloud_namespace() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let launcher = launcher_objects("weave-ns.yaml", ns.name());
    remove_outside(&client, &launcher, ns.name()).await;
    install(&client, &launcher).await;
    assert_eq!(
        launcher.len(),
        24,
        "the fixture's 25 objects (FACTS.md §8) but its Namespace"
    );
    // Before: two of nothing yet, but the launcher's agents under their own names.
    let before = agents_running(&client, &[ns.name()]).await;
    assert_eq!(
        before.get("weave-agent").map(Vec::len),
        Some(1),
        "{before:?}"
    );

    // A migrating user leaves flux's git settings to the running agent: the seed's WeaveCloud
    // without its placeholder `flux.config`, so that --git-url & co. are preserved.
    let seed = seed_weavecloud(ns.name());
    let without_config = seed.replace(
        "    config:\n      git-label: label\n      git-url: url\n      git-path: path\n      git-branch: branch\n",
        "",
    );
    assert_ne!(
        seed, without_config,
        "the seed's flux.config block was dropped"
    );
    let (_host, _server, url) = config_repo(without_config);

    let n = ns.name();
    let expected_removed: Vec<String> = [
        format!("Deployment/{n}/weave-agent"),
        format!("ServiceAccount/{n}/weave-agent"),
        "ClusterRoleBinding/weave-agent".to_string(),
        "ClusterRole/weave-agent".to_string(),
        format!("Deployment/{n}/prometheus"),
        format!("Deployment/{n}/kube-state-metrics"),
        format!("DaemonSet/{n}/prom-node-exporter"),
        // Same name, but a launcher selector (immutable): recreated.
        format!("Deployment/{n}/weave-flux-agent"),
        format!("Deployment/{n}/weave-flux-memcached"),
        format!("DaemonSet/{n}/weave-scope-agent"),
        format!("Deployment/{n}/weave-scope-cluster-agent"),
        "ClusterRoleBinding/weave-flux".to_string(),
        "ClusterRole/weave-flux".to_string(),
        "ClusterRoleBinding/weave-scope".to_string(),
        "ClusterRoleBinding/weave-cortex".to_string(),
    ]
    .into();
    check_takeover(
        &client,
        n,
        n,
        LAUNCHER_GIT_ARGS,
        &deploy_key_of(&launcher),
        &expected_removed,
        &url,
    )
    .await;
    remove_outside(&client, &launcher, n).await;
    ns.delete().await;
}

#[tokio::test]
async fn takeover_false_leaves_every_launcher_object_in_place() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-off").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let launcher = launcher_objects("weave-ns.yaml", ns.name());
    remove_outside(&client, &launcher, ns.name()).await;
    install(&client, &launcher).await;
    let identity = |o: &DynamicObject| {
        (
            o.uid(),
            if o.data.get("spec").is_some() && o.data.pointer("/spec/template").is_some() {
                format!("generation {:?}", o.metadata.generation)
            } else {
                o.resource_version().unwrap_or_default()
            },
        )
    };
    let mut before = BTreeMap::new();
    for o in &launcher {
        let (kind, object_ns, name) = key(o);
        let live = dynamic_api(&client, &kind, object_ns.as_deref())
            .get(&name)
            .await
            .expect("installed");
        before.insert((kind, object_ns, name), identity(&live));
    }

    let seed =
        seed_weavecloud(ns.name()).replace("  general:\n", "  general:\n    takeover: false\n");
    let (_host, _server, url) = config_repo(seed);
    let d = start_daemon(&url, ns.name());
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), ns.name());
    let (message, left) = wait_for(
        "LauncherObjects=True, TakeoverDisabled",
        Duration::from_secs(120),
        &d,
        async || {
            let wc = wcs.get("weave-cloud").await.ok()?;
            let (status, reason, message) = condition(&wc, "LauncherObjects")?;
            let left = wc.status?.takeover?.left;
            (status == "True" && reason == "TakeoverDisabled").then_some((message, left))
        },
    )
    .await;
    assert!(
        message.contains("may run beside Weft's") && message.contains("weave-agent"),
        "the condition says why agents may be doubled: {message}"
    );
    assert!(
        left.contains(&format!("Deployment/{}/weave-agent", ns.name())),
        "status.takeover.left: {left:?}"
    );
    assert!(
        !event_notes(&client, ns.name(), "TakeoverDisabled")
            .await
            .is_empty(),
        "a TakeoverDisabled event"
    );
    // Let a few more reconciles run (the agents are not ready: Weft requeues), then look.
    tokio::time::sleep(Duration::from_secs(10)).await;
    for ((kind, object_ns, name), was) in &before {
        let live = dynamic_api(&client, kind, object_ns.as_deref())
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{kind} {object_ns:?}/{name} is still there: {e}"));
        assert_eq!(
            &identity(&live),
            was,
            "{kind} {object_ns:?}/{name} is untouched"
        );
        assert!(
            !is_weft_managed(&live.metadata),
            "{kind} {name} was not adopted"
        );
    }
    assert!(
        event_notes(&client, ns.name(), "LauncherObjectRemoved")
            .await
            .is_empty(),
        "nothing removed"
    );
    delete_weavecloud(&wcs, &d).await;
    remove_outside(&client, &launcher, ns.name()).await;
    ns.delete().await;
}

#[tokio::test]
async fn weft_run_takes_over_an_older_install_in_kube_system() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-ks").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let launcher = launcher_objects("kube-system.yaml", ns.name());
    assert!(
        launcher.iter().all(|o| o["metadata"]["namespace"]
            .as_str()
            .is_none_or(|n| n == KUBE_SYSTEM)),
        "the kube-system fixture lives in kube-system"
    );
    remove_outside(&client, &launcher, ns.name()).await;
    install(&client, &launcher).await;
    // kube-system installs had no token Secret (the token was literal): the user makes one.
    let token = "launcher-fixture-token-not-real";
    support::cluster::create_token_secret(&client, ns.name(), "weave-cloud", token).await;

    // The seed as it is: its `flux.config` wins over the running agent's, what it leaves unset
    // (the poll interval) is kept.
    let (_host, _server, url) = config_repo(seed_weavecloud(ns.name()));
    let n = ns.name();
    let ks = KUBE_SYSTEM;
    let expected_removed: Vec<String> = [
        format!("Deployment/{ks}/weave-flux-agent"),
        format!("Deployment/{ks}/weave-flux-memcached"),
        format!("Service/{ks}/weave-flux-memcached"),
        format!("DaemonSet/{ks}/weave-scope-agent"),
        format!("ConfigMap/{ks}/weave-cortex-agent-config"),
        format!("Deployment/{ks}/weave-cortex-agent"),
        format!("Service/{ks}/weave-cortex-agent"),
        format!("Deployment/{ks}/weave-cortex-state-metrics"),
        format!("DaemonSet/{ks}/weave-cortex-node-exporter"),
        format!("ServiceAccount/{ks}/weave-flux"),
        format!("ServiceAccount/{ks}/weave-scope"),
        format!("ServiceAccount/{ks}/weave-cortex"),
        "ClusterRoleBinding/weave-flux".to_string(),
        "ClusterRole/weave-flux".to_string(),
        "ClusterRoleBinding/weave-cortex".to_string(),
    ]
    .into();
    check_takeover(
        &client,
        n,
        ks,
        &[
            "--git-url=url",
            "--git-branch=branch",
            "--git-path=path",
            "--git-label=label",
            "--git-poll-interval=2m",
        ],
        &deploy_key_of(&launcher),
        &expected_removed,
        &url,
    )
    .await;
    // kube-system's deploy key is copied, never removed.
    let kept = Api::<Secret>::namespaced(client.clone(), ks)
        .get_opt("flux-git-deploy")
        .await
        .expect("get");
    assert!(kept.is_some(), "kube-system's flux-git-deploy is kept");
    let agents_left = agents_running(&client, &[ks]).await;
    assert!(
        agents_left.is_empty(),
        "no agent left in kube-system: {agents_left:?}"
    );
    remove_outside(&client, &launcher, n).await;
    ns.delete().await;
}

#[tokio::test]
async fn weft_sync_takes_over_in_its_one_pass_too() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-sync").await;
    let n = ns.name().to_string();
    let client = ns.client();
    let (launcher, repo) = launcher_and_repo(&client, &n).await;
    let seed = seed_weavecloud(&n).replace(
        "    config:\n      git-label: label\n      git-url: url\n      git-path: path\n      git-branch: branch\n",
        "",
    );
    std::fs::write(repo.path().join("weave/weave-cloud.yaml"), seed).expect("write");

    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 0, "weft sync succeeds\n{stdout}\n{stderr}");
    for removed in [
        format!("Deployment/{n}/weave-agent"),
        "ClusterRoleBinding/weave-agent".to_string(),
        format!("DaemonSet/{n}/prom-node-exporter"),
        format!("Deployment/{n}/prometheus"),
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(&removed) && l.contains("launcher takeover")),
            "sync reports the removal of {removed}:\n{stdout}"
        );
    }
    let running = agents_running(&client, &[&n]).await;
    assert_one_weft_agent_of_each_kind(&running);
    let flux = deployment(&client, &n, "weave-flux-agent").await;
    let flux_args = container_args(&flux.spec.expect("spec").template, "flux-agent");
    for a in LAUNCHER_GIT_ARGS {
        assert!(
            flux_args.iter().any(|x| x == a),
            "flux keeps {a}: {flux_args:?}"
        );
    }
    let memcached = deployment(&client, &n, "weave-flux-memcached").await;
    let memcached_args = container_args(&memcached.spec.expect("spec").template, "memcached");
    for a in LAUNCHER_MEMCACHED_ARGS {
        assert!(memcached_args.iter().any(|x| x == a), "{memcached_args:?}");
    }
    let key: BTreeMap<String, Vec<u8>> = Api::<Secret>::namespaced(client.clone(), &n)
        .get("flux-git-deploy")
        .await
        .expect("deploy key")
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    assert_eq!(
        key,
        deploy_key_of(&launcher),
        "the deploy key's data is unchanged"
    );

    // The next sync finds nothing to take over and changes nothing.
    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(!stdout.contains("launcher takeover"), "{stdout}");
    assert!(
        stdout.contains(" 0 created, 0 configured, ") && stdout.contains(" 0 deleted"),
        "a second sync writes nothing:\n{stdout}"
    );

    // No controller ran, so no finalizer holds the namespace; remove Weft's per-namespace roles.
    for kind in ["ClusterRoleBinding", "ClusterRole"] {
        let api = dynamic_api(&client, kind, None);
        for o in api
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=weft"))
            .await
            .expect("list")
            .items
        {
            if o.name_any().ends_with(&format!(":{n}")) {
                let _ = api.delete(&o.name_any(), &DeleteParams::background()).await;
            }
        }
    }
    remove_outside(&client, &launcher, &n).await;
    ns.delete().await;
}

/// `weft.io/suspend: "true"` on a WeaveCloud holds it before any takeover, in `weft sync` as in
/// `weft run`: the one-shot pass took the launcher's objects over (17 deleted) and applied no
/// agent for a suspended WeaveCloud, leaving nothing running (issue 29, item 1).
#[tokio::test]
async fn weft_sync_takes_nothing_over_for_a_suspended_weavecloud() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-suspended").await;
    let n = ns.name().to_string();
    let client = ns.client();
    let (launcher, repo) = launcher_and_repo(&client, &n).await;
    let seed = seed_weavecloud(&n).replace(
        "metadata:\n  name: weave-cloud\n",
        "metadata:\n  name: weave-cloud\n  annotations:\n    weft.io/suspend: \"true\"\n",
    );
    assert!(seed.contains("weft.io/suspend"), "{seed}");
    std::fs::write(repo.path().join("weave/weave-cloud.yaml"), seed).expect("write");

    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 0, "weft sync succeeds\n{stdout}\n{stderr}");
    assert!(
        !stdout.contains("launcher takeover") && !stdout.lines().any(|l| l.starts_with("deleted")),
        "a suspended WeaveCloud takes nothing over:\n{stdout}"
    );
    for o in &launcher {
        let (kind, namespace, name) = key(o);
        let live = dynamic_api(&client, &kind, namespace.as_deref())
            .get_opt(&name)
            .await
            .expect("get");
        assert!(live.is_some(), "{kind}/{name} is left as it is:\n{stdout}");
    }
    let launcher_agent = deployment(&client, &n, "weave-agent").await;
    assert!(!is_weft_managed(&launcher_agent.metadata));
    // Resumed in git (issue 44 item 5): the very next sync takes over, not the one after it
    // (the live copy's annotation came from git, and git no longer says it).
    let resumed = seed_weavecloud(&n);
    std::fs::write(repo.path().join("weave/weave-cloud.yaml"), resumed).expect("write");
    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 0, "the resumed sync\n{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("deleted")
            && l.contains(&format!("Deployment/{n}/weave-agent"))),
        "one sync after the resume takes over:\n{stdout}"
    );
    remove_weft_cluster_roles(&client, &n).await;
    remove_outside(&client, &launcher, &n).await;
    ns.delete().await;
}
