//! The launcher's pre-2018 kube-system install taken over by `weft sync` (issue 44), on the real
//! control plane with the launcher's own labels and layout (tests/fixtures/launcher/
//! kube-system.yaml, tests/support/launcher.rs): a sync without `--launcher-takeover` doubles
//! no agent and says which flag to add; a flux Weft installed before the takeover was asked for
//! gets the launcher's git settings and memcached sizes; the YAML Weft says to commit is right.

use crate::support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DeleteParams;
use kube::{Api, Client};
use serde_json::Value;

use support::cluster::{create_token_secret, TestNamespace};
use support::launcher::*;

/// The seed's WeaveCloud in `n` without `flux.config` (the launcher's flux has the git
/// settings), prometheus off: its node exporter takes host port 9100 on every node, which
/// another test of the shared cluster may hold; these tests are about flux.
fn seed(n: &str) -> String {
    let seed = seed_without_flux_config(n);
    let off = seed.replace(
        "  prometheus:\n    disable: false\n",
        "  prometheus:\n    disable: true\n",
    );
    assert_ne!(seed, off, "prometheus is disabled");
    off
}

/// An empty config repository with the WeaveCloud `weavecloud` in its `weave/` folder.
fn repo_with(weavecloud: &str) -> tempfile::TempDir {
    let repo = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(repo.path().join("weave")).expect("mkdir");
    std::fs::write(repo.path().join("weave/weave-cloud.yaml"), weavecloud).expect("write");
    repo
}

/// The flux and memcached args running in `n`.
async fn flux_and_memcached(client: &Client, n: &str) -> (Vec<String>, Vec<String>) {
    let flux = deployment(client, n, "weave-flux-agent").await;
    let memcached = deployment(client, n, "weave-flux-memcached").await;
    (
        container_args(&flux.spec.expect("spec").template, "flux-agent"),
        container_args(&memcached.spec.expect("spec").template, "memcached"),
    )
}

/// Flux runs with the launcher's git settings (once each) and memcached with its sizes, and
/// nothing names kube-system, whose memcached the takeover removed.
fn assert_launcher_settings(flux: &[String], memcached: &[String], context: &str) {
    for a in LAUNCHER_GIT_ARGS {
        assert_eq!(
            flux.iter().filter(|x| x == a).count(),
            1,
            "{context}: flux runs with {a} once: {flux:?}"
        );
    }
    assert!(
        !flux.iter().any(|a| a.contains("kube-system")),
        "{context}: flux names nothing in kube-system: {flux:?}"
    );
    for m in LAUNCHER_MEMCACHED_ARGS {
        assert!(
            memcached.iter().any(|x| x == m),
            "{context}: memcached runs with {m}: {memcached:?}"
        );
    }
}

async fn cleanup(client: &Client, launcher: &[Value], ns: TestNamespace) {
    remove_weft_cluster_roles(client, ns.name()).await;
    remove_outside(client, launcher, ns.name()).await;
    ns.delete().await;
}

/// Item 2: without `--launcher-takeover`, a sync over a cluster whose launcher agents run in
/// kube-system applies nothing (no second flux, prometheus or node exporter, no wait for one
/// that can never schedule) and says in one line which flag to add; `weft diff` says the same.
#[tokio::test]
async fn without_the_flag_a_kube_system_launcher_is_not_doubled_and_the_flag_is_named() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-ks-refuse").await;
    let n = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let launcher = launcher_objects("kube-system.yaml", &n);
    remove_outside(&client, &launcher, &n).await;
    install(&client, &launcher).await;
    // kube-system installs had no token Secret (the token was literal): the user makes one.
    create_token_secret(&client, &n, "weave-cloud", "launcher-fixture-token").await;
    // prometheus on, as a launcher user has it: nothing of it may be applied either.
    let repo = repo_with(&seed_without_flux_config(&n));

    let started = std::time::Instant::now();
    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 1, "the sync fails\n{stdout}\n{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "it fails at once, not after a readiness timeout"
    );
    let line = stderr
        .lines()
        .find(|l| l.contains("launcher's agents run in kube-system"))
        .unwrap_or_else(|| panic!("the error says why:\n{stdout}\n{stderr}"));
    for part in [
        format!("WeaveCloud {n}/weave-cloud"),
        "Deployment/kube-system/weave-flux-agent".to_string(),
        "DaemonSet/kube-system/weave-cortex-node-exporter".to_string(),
        format!("--launcher-takeover {n}/weave-cloud"),
    ] {
        assert!(line.contains(&part), "{part:?} in: {line}");
    }
    for name in [
        "weave-flux-agent",
        "weave-cortex-agent",
        "weave-scope-cluster-agent",
    ] {
        assert!(
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &n)
                .get_opt(name)
                .await
                .expect("get")
                .is_none(),
            "no second {name} in {n}"
        );
    }
    assert!(
        Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), &n)
            .get_opt("weave-cortex-node-exporter")
            .await
            .expect("get")
            .is_none(),
        "no second node exporter"
    );
    let kept = deployment(&client, KUBE_SYSTEM, "weave-flux-agent").await;
    assert!(
        !is_weft_managed(&kept.metadata),
        "the launcher's flux runs on"
    );

    let (code, stdout, stderr) = weft(&["diff"], repo.path(), &n);
    assert_eq!(code, 2, "weft diff: an error\n{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("--launcher-takeover {n}/weave-cloud")),
        "{stderr}"
    );

    // Item 5: with the flag, `weft diff` takes it too and shows the takeover (exit 1), and the
    // dry run's counts are the real sync's: the deploy key the sync copies out of kube-system
    // is adopted, not created.
    let flag = format!("{n}/weave-cloud");
    let (code, stdout, stderr) = weft(&["diff", "--launcher-takeover", &flag], repo.path(), &n);
    assert_eq!(code, 1, "weft diff --launcher-takeover\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("Deployment/kube-system/weave-flux-agent"),
        "the diff shows the removal:\n{stdout}"
    );
    let (code, plan, stderr) = weft(
        &["sync", "--dry-run", "--launcher-takeover", &flag],
        repo.path(),
        &n,
    );
    assert_eq!(code, 0, "{plan}\n{stderr}");
    let key_line = plan
        .lines()
        .find(|l| l.contains(&format!("Secret/{n}/flux-git-deploy")))
        .unwrap_or_else(|| panic!("the plan shows the deploy key:\n{plan}"));
    assert!(
        !key_line.starts_with("create") && key_line.contains("adopted"),
        "{key_line}"
    );

    // Item 7: the takeover waits for the launcher's pods, not only its workloads, before
    // Weft's node exporter (host port 9100) is applied: the sync ends with it ready.
    let (code, stdout, stderr) = weft(&["sync", "--launcher-takeover", &flag], repo.path(), &n);
    assert_eq!(code, 0, "the takeover with every agent\n{stdout}\n{stderr}");
    assert_eq!(
        summary_counts(&plan),
        summary_counts(&stdout),
        "the plan's counts are the sync's:\nplan:\n{plan}\nsync:\n{stdout}"
    );
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), KUBE_SYSTEM)
        .list(&kube::api::ListParams::default().labels("weave-cloud-component"))
        .await
        .expect("pods");
    assert!(
        pods.items.is_empty(),
        "no launcher pod is left in kube-system: {:?}",
        pods.items
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );

    cleanup(&client, &launcher, ns).await;
}

/// Items 1 and 3: a first `weft sync` ran before the launcher's kube-system agents were there
/// to see (or before this Weft refused to double them), so Weft's own flux runs without git
/// flags. The takeover then gives flux the launcher's git settings and memcached sizes, and
/// later syncs keep them. The YAML the takeover says to commit names nothing the takeover
/// removed, doubles nothing the bundle generates and holds memcached's sizes: committing it,
/// then deleting the record, changes nothing.
#[tokio::test]
async fn a_flux_weft_ran_before_the_kube_system_takeover_gets_the_launchers_settings() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-ks-late").await;
    let n = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let launcher = launcher_objects("kube-system.yaml", &n);
    remove_outside(&client, &launcher, &n).await;
    // kube-system installs had no token Secret (the token was literal): the user makes one.
    create_token_secret(&client, &n, "weave-cloud", "launcher-fixture-token").await;
    let repo = repo_with(&seed(&n));

    // 1. Weft first, without the flag: its flux has no git settings.
    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 0, "the first sync\n{stdout}\n{stderr}");
    let (flux, _) = flux_and_memcached(&client, &n).await;
    assert!(!flux.iter().any(|a| a.starts_with("--git-url")), "{flux:?}");

    // 2. The launcher's kube-system agents, then the takeover.
    install(&client, &launcher).await;
    let flag = format!("{n}/weave-cloud");
    let takeover = ["sync", "--launcher-takeover", flag.as_str()];
    let (code, stdout, stderr) = weft(&takeover, repo.path(), &n);
    assert_eq!(code, 0, "the takeover\n{stdout}\n{stderr}");
    assert!(stdout.contains("kept from the launcher's flux"), "{stdout}");
    let (flux, memcached) = flux_and_memcached(&client, &n).await;
    assert_launcher_settings(&flux, &memcached, "after the takeover");
    // Item 7: the sync says what flux kept and writes the WeaveCloud's status as the
    // controller would.
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("kept from the flux that ran before:")
                && l.contains("--git-url=git@github.com:example/config.git")
                && l.contains("memcached -m 1024")),
        "{stdout}"
    );
    let wc = Api::<weft::api::WeaveCloud>::namespaced(client.clone(), &n)
        .get("weave-cloud")
        .await
        .expect("the WeaveCloud");
    let status = wc.status.expect("a status");
    let preserved = status.flux.expect("status.flux").preserved_args;
    assert!(
        preserved.contains(&"--git-url=git@github.com:example/config.git".to_string()),
        "{preserved:?}"
    );
    assert!(
        status.takeover.is_some_and(|t| t
            .removed
            .contains(&format!("Deployment/{KUBE_SYSTEM}/weave-flux-agent"))),
        "status.takeover.removed"
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "LauncherObjects" && c.reason == "TakenOver"),
        "{:?}",
        status.conditions
    );
    assert!(
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), KUBE_SYSTEM)
            .get_opt("weave-flux-agent")
            .await
            .expect("get")
            .is_none(),
        "the launcher's flux is gone"
    );

    // 3. Later syncs, with the flag or without it, keep them.
    for command in [&takeover[..], &["sync"][..]] {
        let (code, stdout, stderr) = weft(command, repo.path(), &n);
        assert_eq!(code, 0, "{command:?}\n{stdout}\n{stderr}");
        let (again, again_memcached) = flux_and_memcached(&client, &n).await;
        assert_launcher_settings(&again, &again_memcached, &format!("{command:?}"));
    }

    // 4. Commit what the takeover said, delete the record: nothing changes.
    let records: Api<ConfigMap> = Api::namespaced(client.clone(), &n);
    let record_name = format!("weft-takeover-{n}.weave-cloud");
    let commit = records
        .get(&record_name)
        .await
        .expect("the takeover record")
        .data
        .unwrap_or_default()
        .remove("commit.yaml")
        .unwrap_or_default();
    for absent in ["kube-system", "memcached-hostname", "memcached-service"] {
        assert!(!commit.contains(absent), "no {absent} in:\n{commit}");
    }
    assert!(commit.contains("memcachedArgs"), "{commit}");
    let (before, before_memcached) = flux_and_memcached(&client, &n).await;
    let mut wc: Value = serde_saphyr::from_str(&seed(&n)).expect("the seed");
    let committed: Value = serde_saphyr::from_str(&commit).expect("commit.yaml");
    for (key, value) in committed["spec"]["flux"].as_object().expect("spec.flux") {
        wc["spec"]["flux"][key] = value.clone();
    }
    // The seed spells its keys in kebab-case: the committed camelCase ones replace its own.
    wc["spec"]["flux"]
        .as_object_mut()
        .expect("flux")
        .remove("append-args");
    std::fs::write(
        repo.path().join("weave/weave-cloud.yaml"),
        serde_saphyr::to_string(&wc).expect("YAML"),
    )
    .expect("write");
    records
        .delete(&record_name, &DeleteParams::default())
        .await
        .expect("delete the record");
    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 0, "after the commit\n{stdout}\n{stderr}");
    let (after, after_memcached) = flux_and_memcached(&client, &n).await;
    assert_eq!(before, after, "flux is unchanged by the commit");
    assert_eq!(
        before_memcached, after_memcached,
        "memcached is unchanged by the commit"
    );

    cleanup(&client, &launcher, ns).await;
}

/// Item 5: `takeover: false`, then `true`, under `weft run`: the takeover removes the
/// launcher's objects and the condition says `TakenOver` beside the list of removals, never
/// `NoLauncherObjects` (a reconcile queued before the takeover's status write read an older
/// copy of the WeaveCloud).
#[tokio::test]
async fn takeover_false_then_true_under_weft_run_says_taken_over() {
    use support::daemon::{Daemon, DaemonOptions};
    use support::git_servers::{GitDaemon, RepoHost, WorkTree};
    use weft::api::WeaveCloud;

    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-flip-taken").await;
    let n = ns.name().to_string();
    let client = ns.client();
    let (launcher, _dir) = launcher_and_repo(&client, &n).await;
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    let on = seed(&n);
    let off = on.replace("  general:\n", "  general:\n    takeover: false\n");
    work.write("weave/weave-cloud.yaml", off);
    work.commit("takeover: false");
    work.push();
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        interval: "3s",
        ..DaemonOptions::new(&server.url("config.git"), &n)
    });
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), &n);
    async fn wait_until(
        wcs: &Api<WeaveCloud>,
        d: &Daemon,
        what: &str,
        probe: &dyn Fn(&WeaveCloud) -> bool,
    ) -> WeaveCloud {
        for _ in 0..480 {
            if let Ok(Some(wc)) = wcs.get_opt("weave-cloud").await {
                if probe(&wc) {
                    return wc;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
        panic!("{what} did not happen within 120 s\nlogs:\n{}", d.logs());
    }
    let reason = |wc: &WeaveCloud, type_: &str| -> Option<String> {
        wc.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.reason.clone())
    };
    wait_until(&wcs, &d, "LauncherObjects=True TakeoverDisabled", &|wc| {
        reason(wc, "LauncherObjects").as_deref() == Some("TakeoverDisabled")
    })
    .await;
    work.write("weave/weave-cloud.yaml", on);
    work.commit("takeover: true");
    work.push();
    let wc = wait_until(&wcs, &d, "Ready=True at generation 2", &|wc| {
        let status = wc.status.as_ref();
        reason(wc, "Ready").is_some()
            && status.is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Ready" && c.status == weft::api::conditions::ConditionStatus::True
                })
            })
            && wc.metadata.generation >= Some(2)
            && status.and_then(|s| s.observed_generation) == wc.metadata.generation
    })
    .await;
    let status = wc.status.expect("status");
    let removed = status.takeover.clone().unwrap_or_default().removed;
    assert!(
        removed.contains(&format!("Deployment/{n}/weave-agent")),
        "{removed:?}"
    );
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "LauncherObjects")
        .expect("the condition");
    assert_eq!(condition.reason, "TakenOver", "{status:?}");
    drop(d);
    wcs.patch(
        "weave-cloud",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the finalizer");
    cleanup(&client, &launcher, ns).await;
}
