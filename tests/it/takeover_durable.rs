//! What a launcher user configured survives the takeover, its previews tell the truth, and the
//! way back works (issue 29, items 2 to 5), on the real control plane with a cluster set up the
//! way the launcher set it up (tests/support/launcher.rs, tests/fixtures/launcher/FACTS.md).

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DeleteParams;
use kube::Api;
use serde_json::{json, Value};

use support::cluster::TestNamespace;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::launcher::*;
use weft::api::WeaveCloud;

/// The flags a launcher user added to flux after scaling weave-agent to 0 (the two-element
/// `--git-user weave-flux` as a user wrote it).
const CUSTOM_FLAGS: &[&str] = &[
    "--git-readonly",
    "--sync-state=secret",
    "--manifest-generation=true",
    "--git-user",
    "weave-flux",
    "--git-email=flux@example.com",
    "--registry-disable-scanning",
    "--sync-interval=10m",
];
/// The same flags as Weft renders them: one element each.
const CUSTOM_FLAGS_RENDERED: &[&str] = &[
    "--git-readonly",
    "--sync-state=secret",
    "--manifest-generation=true",
    "--git-user=weave-flux",
    "--git-email=flux@example.com",
    "--registry-disable-scanning",
    "--sync-interval=10m",
];

/// The launcher's flux with the customisations: the flags, a known_hosts `ssh-config`
/// ConfigMap mounted at /root/.ssh (a private git host), and a hostPath volume Weft cannot
/// carry over; plus the user's known_hosts ConfigMap itself.
fn customise(n: &str) -> impl FnOnce(&mut Vec<Value>) + '_ {
    move |objects: &mut Vec<Value>| {
        let flux = objects
            .iter_mut()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "weave-flux-agent")
            .expect("the launcher's flux");
        let pod = &mut flux["spec"]["template"]["spec"];
        let args = pod["containers"][0]["args"].as_array_mut().expect("args");
        args.extend(CUSTOM_FLAGS.iter().map(|a| json!(a)));
        // A proxied cluster: flux reaches its git host through the proxy.
        pod["containers"][0]["env"]
            .as_array_mut()
            .expect("env")
            .push(json!({"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"}));
        pod["containers"][0]["volumeMounts"]
            .as_array_mut()
            .expect("mounts")
            .extend([
                json!({"name": "ssh-config", "mountPath": "/root/.ssh"}),
                json!({"name": "docker-socket", "mountPath": "/var/run/docker.sock"}),
            ]);
        pod["volumes"].as_array_mut().expect("volumes").extend([
            json!({"name": "ssh-config", "configMap": {"name": "flux-ssh-config", "defaultMode": 256}}),
            json!({"name": "docker-socket", "hostPath": {"path": "/var/run/docker.sock"}}),
        ]);
        objects.push(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "flux-ssh-config", "namespace": n},
            "data": {"known_hosts": "git.internal ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeHostKeyForTheTestOnly\n"},
        }));
    }
}

/// The seed's WeaveCloud in `n`, flux's git settings left to the running agent, prometheus off:
/// its node exporter takes host port 9100 on every node, which another WeaveCloud of the shared
/// test cluster may hold; these tests are about flux.
fn seed(n: &str) -> String {
    let seed = seed_without_flux_config(n);
    let off = seed.replace(
        "  prometheus:\n    disable: false\n",
        "  prometheus:\n    disable: true\n",
    );
    assert_ne!(seed, off, "prometheus is disabled");
    off
}

fn flux_pod(d: &Deployment) -> &k8s_openapi::api::core::v1::PodSpec {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

/// Flux as the launcher user had it: git settings, memcached flags, every custom flag once, and
/// the known_hosts ConfigMap mounted where ssh reads it.
async fn assert_flux_as_the_user_had_it(client: &kube::Client, n: &str, context: &str) {
    let flux = deployment(client, n, "weave-flux-agent").await;
    assert!(is_weft_managed(&flux.metadata), "{context}: flux is Weft's");
    let args = container_args(&flux.spec.clone().expect("spec").template, "flux-agent");
    for a in LAUNCHER_GIT_ARGS.iter().chain(CUSTOM_FLAGS_RENDERED) {
        assert_eq!(
            args.iter().filter(|x| x == a).count(),
            1,
            "{context}: flux runs with {a} once: {args:?}"
        );
    }
    let pod = flux_pod(&flux);
    let volumes = pod.volumes.clone().unwrap_or_default();
    let ssh = volumes
        .iter()
        .find(|v| v.name == "ssh-config")
        .unwrap_or_else(|| panic!("{context}: the known_hosts volume: {volumes:?}"));
    assert_eq!(
        ssh.config_map.as_ref().map(|c| c.name.as_str()),
        Some("flux-ssh-config")
    );
    let env = pod.containers[0].env.clone().unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e.name == "HTTPS_PROXY"
                && e.value.as_deref() == Some("http://proxy.internal:3128")),
        "{context}: flux keeps its proxy: {env:?}"
    );
    assert!(
        !volumes.iter().any(|v| v.host_path.is_some()),
        "{context}: no hostPath volume carried over: {volumes:?}"
    );
    let mounts = pod.containers[0].volume_mounts.clone().unwrap_or_default();
    assert!(
        mounts
            .iter()
            .any(|m| m.name == "ssh-config" && m.mount_path == "/root/.ssh"),
        "{context}: known_hosts at /root/.ssh: {mounts:?}"
    );
    assert!(
        mounts.iter().any(|m| m.name == "git-key"),
        "{context}: the deploy key stays mounted: {mounts:?}"
    );
    let memcached = deployment(client, n, "weave-flux-memcached").await;
    let m = container_args(&memcached.spec.expect("spec").template, "memcached");
    for a in LAUNCHER_MEMCACHED_ARGS {
        assert!(
            m.iter().any(|x| x == a),
            "{context}: memcached keeps {a}: {m:?}"
        );
    }
}

/// Items 2 and 3: `weft sync` keeps every flag and the known_hosts volume of a customised
/// launcher flux, says before it deletes anything what it kept, what it could not keep and the
/// YAML to commit, and records it in a ConfigMap that survives a delete and recreate of the
/// WeaveCloud: flux comes back with its git settings, flags, volume and memcached flags.
#[tokio::test]
async fn a_customised_launcher_flux_keeps_flags_and_known_hosts_across_a_recreate() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-durable").await;
    let n = ns.name().to_string();
    let client = ns.client();
    let (launcher, repo) = launcher_and_repo_with(&client, &n, customise(&n)).await;
    std::fs::write(repo.path().join("weave/weave-cloud.yaml"), seed(&n)).expect("write");

    // Issue 44 item 4: the hostPath volume cannot be carried over: without the WeaveCloud's
    // acknowledgement, nothing is taken over and the sync fails saying what to write.
    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 1, "the takeover is refused\n{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "the launcher's flux has what Weft cannot carry over: volume docker-socket (hostPath"
        ) && stderr.contains("spec.flux.acknowledgeDropped: [\"volume docker-socket\"]"),
        "{stderr}"
    );
    let agent = deployment(&client, &n, "weave-agent").await;
    assert!(!is_weft_managed(&agent.metadata), "nothing was taken over");
    let acknowledged = seed(&n).replace(
        "  flux:\n",
        "  flux:\n    acknowledgeDropped: [\"volume docker-socket\"]\n",
    );
    assert_ne!(acknowledged, seed(&n));
    std::fs::write(repo.path().join("weave/weave-cloud.yaml"), &acknowledged).expect("write");

    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 0, "weft sync succeeds\n{stdout}\n{stderr}");
    // Said before the first deletion: where the record is, what was not kept, what to commit.
    let lines: Vec<&str> = stdout.lines().collect();
    let notice = lines
        .iter()
        .position(|l| l.contains("kept from the launcher's flux in ConfigMap"))
        .unwrap_or_else(|| panic!("the sync says what it kept:\n{stdout}"));
    let first_deletion = lines
        .iter()
        .position(|l| l.starts_with("deleted"))
        .expect("deletions");
    assert!(notice < first_deletion, "said before deleting:\n{stdout}");
    assert!(
        lines[notice].contains(&format!("{n}/weft-takeover-{n}.weave-cloud"))
            && lines[notice].contains("not kept: volume docker-socket (hostPath"),
        "{}",
        lines[notice]
    );
    for part in [
        "commit this to the WeaveCloud:",
        "gitUrl: git@github.com:example/config.git",
        "gitBranch: prod",
        "- --git-readonly",
        "- --git-user=weave-flux",
        "name: flux-ssh-config",
        "mountPath: /root/.ssh",
        "name: HTTPS_PROXY",
    ] {
        assert!(
            stdout.contains(part),
            "the YAML to commit has {part:?}:\n{stdout}"
        );
    }
    assert_flux_as_the_user_had_it(&client, &n, "after the takeover").await;
    let record = Api::<ConfigMap>::namespaced(client.clone(), &n)
        .get(&format!("weft-takeover-{n}.weave-cloud"))
        .await
        .expect("the takeover record");
    let commit = record
        .data
        .unwrap_or_default()
        .remove("commit.yaml")
        .unwrap_or_default();
    assert!(
        commit.contains("gitUrl: git@github.com:example/config.git"),
        "{commit}"
    );

    // Delete and recreate the WeaveCloud, its agents gone as its finalizer prunes them: the
    // record brings flux back as it ran.
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), &n);
    wcs.delete("weave-cloud", &DeleteParams::default())
        .await
        .expect("delete the WeaveCloud");
    for name in ["weave-flux-agent", "weave-flux-memcached"] {
        Api::<Deployment>::namespaced(client.clone(), &n)
            .delete(name, &DeleteParams::background())
            .await
            .expect("prune");
    }
    for _ in 0..60 {
        let gone = wcs.get_opt("weave-cloud").await.expect("get").is_none()
            && Api::<Deployment>::namespaced(client.clone(), &n)
                .get_opt("weave-flux-agent")
                .await
                .expect("get")
                .is_none();
        if gone {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("launcher takeover"),
        "nothing left to take over:\n{stdout}"
    );
    assert_flux_as_the_user_had_it(&client, &n, "after a delete and recreate").await;

    remove_weft_cluster_roles(&client, &n).await;
    remove_outside(&client, &launcher, &n).await;
    ns.delete().await;
}

/// Item 5: on a launcher cluster `weft diff` shows the takeover (exit 1, not 2 on the immutable
/// selector of weave-flux-agent) and `weft sync --dry-run` plans it with the counts the real
/// sync then reports; neither changes anything.
#[tokio::test]
async fn previews_show_the_planned_takeover_with_the_counts_of_the_real_sync() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-preview").await;
    let n = ns.name().to_string();
    let client = ns.client();
    let (launcher, repo) = launcher_and_repo(&client, &n).await;
    std::fs::write(repo.path().join("weave/weave-cloud.yaml"), seed(&n)).expect("write");

    let (code, stdout, stderr) = weft(&["diff"], repo.path(), &n);
    assert_eq!(
        code, 1,
        "weft diff: changes, not an error\n{stdout}\n{stderr}"
    );
    for object in [
        format!("Deployment/{n}/weave-agent"),
        format!("Deployment/{n}/prometheus"),
        format!("Deployment/{n}/weave-flux-agent"),
    ] {
        assert!(
            stdout.contains(&object),
            "the diff shows {object}:\n{stdout}"
        );
    }

    let (code, plan, stderr) = weft(&["sync", "--dry-run"], repo.path(), &n);
    assert_eq!(code, 0, "{plan}\n{stderr}");
    let planned_removals: Vec<&str> = plan
        .lines()
        .filter(|l| l.starts_with("prune") && l.contains("launcher takeover"))
        .collect();
    assert!(
        plan.lines().any(|l| l.starts_with("create")
            && l.contains(&format!("Deployment/{n}/weave-flux-agent"))
            && l.contains("recreated after the launcher takeover")),
        "the plan recreates flux:\n{plan}"
    );
    assert!(
        plan.contains("would take over: kept from the launcher's flux"),
        "the plan says what would be kept:\n{plan}"
    );
    // Nothing changed: weave-agent still runs, no record was written.
    let agent = deployment(&client, &n, "weave-agent").await;
    assert!(!is_weft_managed(&agent.metadata));
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &n)
        .get_opt(&format!("weft-takeover-{n}.weave-cloud"))
        .await
        .expect("get")
        .is_none());

    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let removals: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("deleted") && l.contains("launcher takeover"))
        .collect();
    assert_eq!(
        planned_removals.len(),
        removals.len(),
        "plan:\n{plan}\nsync:\n{stdout}"
    );
    assert_eq!(
        summary_counts(&plan),
        summary_counts(&stdout),
        "the plan's counts are the sync's:\nplan:\n{plan}\nsync:\n{stdout}"
    );

    remove_weft_cluster_roles(&client, &n).await;
    remove_outside(&client, &launcher, &n).await;
    ns.delete().await;
}

/// Wait (bounded) until `probe` gives a value; the daemon's logs on a timeout.
async fn wait_until<T>(what: &str, d: &Daemon, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..480 {
        if let Some(v) = probe().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{what} did not happen within 120s\nlogs:\n{}", d.logs());
}

/// Item 4: the takeover adopts the launcher's `weave-flux` ServiceAccount; a user's
/// flux-helm-operator runs as it. Deleting the WeaveCloud prunes Weft's agents but keeps that
/// account (released, said in a `ServiceAccountKept` event): the operator stays authorised.
#[tokio::test]
async fn deleting_the_weavecloud_keeps_a_service_account_another_workload_runs_as() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-sa").await;
    let n = ns.name().to_string();
    let client = ns.client();
    // A customised launcher flux: what the controller cannot keep is in status.flux.dropped.
    let (launcher, _dir) = launcher_and_repo_with(&client, &n, customise(&n)).await;
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    // What cannot be carried over (the hostPath volume) is acknowledged (issue 44 item 4).
    let acknowledged = seed(&n).replace(
        "  flux:\n",
        "  flux:\n    acknowledgeDropped: [\"volume docker-socket\"]\n",
    );
    work.write("weave/weave-cloud.yaml", acknowledged);
    work.commit("the WeaveCloud");
    work.push();
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&server.url("config.git"), &n)
    });
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), &n);
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &n);
    wait_until(
        "the launcher's weave-flux account is adopted",
        &d,
        async || {
            let wc = wcs.get_opt("weave-cloud").await.ok()??;
            let listed = wc
                .status?
                .inventory
                .iter()
                .any(|r| r.kind == "ServiceAccount" && r.name == "weave-flux");
            let sa = accounts.get_opt("weave-flux").await.ok()??;
            (listed && is_weft_managed(&sa.metadata)).then_some(())
        },
    )
    .await;
    // The controller's takeover recorded the launcher's flux and said so; status lists what it
    // could not keep.
    let dropped = wait_until("status.flux.dropped", &d, async || {
        let flux = wcs.get_opt("weave-cloud").await.ok()??.status?.flux?;
        (!flux.dropped.is_empty()).then_some(flux.dropped)
    })
    .await;
    assert!(
        dropped
            .iter()
            .any(|x| x.starts_with("volume docker-socket (hostPath")),
        "{dropped:?}"
    );
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &n)
        .get_opt(&format!("weft-takeover-{n}.weave-cloud"))
        .await
        .expect("get")
        .is_some());
    let preserved = event_notes(&client, &n, "TakeoverPreserved").await;
    assert!(
        preserved
            .iter()
            .any(|x| x.contains("gitUrl: git@github.com:example/config.git")),
        "a TakeoverPreserved event with the YAML to commit: {preserved:?}"
    );
    // The user's Helm operator, as Weave Cloud users ran it: as the weave-flux account.
    let operator: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "flux-helm-operator", "namespace": n},
        "spec": {"selector": {"matchLabels": {"name": "flux-helm-operator"}},
            "template": {"metadata": {"labels": {"name": "flux-helm-operator"}},
                "spec": {"serviceAccountName": "weave-flux",
                    "containers": [{"name": "flux-helm-operator", "image": "docker.io/weaveworks/helm-operator:0.10.1"}]}}}
    }))
    .expect("operator");
    Api::<Deployment>::namespaced(client.clone(), &n)
        .create(&Default::default(), &operator)
        .await
        .expect("create the operator");

    wcs.delete("weave-cloud", &DeleteParams::default())
        .await
        .expect("delete the WeaveCloud");
    wait_until("the WeaveCloud is gone", &d, async || {
        wcs.get_opt("weave-cloud")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let sa = accounts
        .get_opt("weave-flux")
        .await
        .expect("get")
        .expect("the account the operator runs as is kept");
    assert!(
        !is_weft_managed(&sa.metadata),
        "released: {:?}",
        sa.metadata.labels
    );
    assert!(
        Api::<Deployment>::namespaced(client.clone(), &n)
            .get_opt("weave-flux-agent")
            .await
            .expect("get")
            .is_none(),
        "Weft's flux is pruned"
    );
    assert!(
        accounts
            .get_opt("weave-scope")
            .await
            .expect("get")
            .is_none(),
        "an account no other workload uses is pruned"
    );
    let notes = event_notes(&client, &n, "ServiceAccountKept").await;
    assert!(
        notes.iter().any(|x| x.contains(&format!(
            "ServiceAccount/{n}/weave-flux (used by Deployment/flux-helm-operator)"
        ))),
        "{notes:?}"
    );
    drop(d);
    remove_outside(&client, &launcher, &n).await;
    ns.delete().await;
}

/// Item 4: the rollback of docs/migrating-from-launcher.md, then a pass of the launcher's agent
/// emulated as it works (git settings read only from the running `weave-flux-agent`'s
/// `containers[0]`, manifests applied with `kubectl apply`): the launcher's flux comes back with
/// the git settings and memcached flags, and no apply fails on an immutable selector.
#[tokio::test]
async fn the_documented_rollback_restores_the_launcher_with_flux_git_settings() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-rollback").await;
    let n = ns.name().to_string();
    let client = ns.client();
    let (launcher, repo) = launcher_and_repo(&client, &n).await;
    std::fs::write(repo.path().join("weave/weave-cloud.yaml"), seed(&n)).expect("write");
    let (code, stdout, stderr) = weft_sync(repo.path(), &n);
    assert_eq!(code, 0, "the takeover\n{stdout}\n{stderr}");

    // 1. Weft is stopped (no daemon runs here); the WeaveCloud is removed without a prune.
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), &n);
    wcs.patch(
        "weave-cloud",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the finalizer");
    wcs.delete("weave-cloud", &DeleteParams::default())
        .await
        .expect("delete the WeaveCloud");
    // 2. flux and memcached handed back in the launcher's shape (`kubectl replace --force`).
    hand_back(&client, &n, "weave-flux-agent", "agent").await;
    hand_back(&client, &n, "weave-flux-memcached", "memcached").await;
    // 3. Weft's other agents removed.
    for kind in ["Deployment", "DaemonSet"] {
        let api = dynamic_api(&client, kind, Some(&n));
        let weft = api
            .list(&kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=weft"))
            .await
            .expect("list")
            .items;
        for o in weft {
            let name = o.metadata.name.clone().unwrap_or_default();
            assert_ne!(name, "weave-flux-agent", "handed back, no longer Weft's");
            api.delete(&name, &DeleteParams::foreground())
                .await
                .expect("delete");
        }
    }
    // A foreground delete returns before the object is gone (its pods go first): the launcher
    // is applied once they are, as `kubectl delete` (which waits) would have it.
    for kind in ["Deployment", "DaemonSet"] {
        let api = dynamic_api(&client, kind, Some(&n));
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let left = api
                .list(&kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=weft"))
                .await
                .expect("list")
                .items;
            if left.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "Weft's {kind}s not gone within 120 s: {:?}",
                left.iter()
                    .map(|o| o.metadata.name.clone())
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    // 4. The launcher re-applied: its agent's pass.
    let errors = launcher_pass(&client, &n, &launcher).await;
    assert!(errors.is_empty(), "the launcher's apply: {errors:#?}");

    let flux = deployment(&client, &n, "weave-flux-agent").await;
    assert!(!is_weft_managed(&flux.metadata));
    let selector = flux
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default();
    assert_eq!(selector.len(), 4, "the launcher's selector: {selector:?}");
    let args = container_args(&flux.spec.expect("spec").template, "flux-agent");
    for a in LAUNCHER_GIT_ARGS {
        assert_eq!(
            args.iter().filter(|x| x == a).count(),
            1,
            "the launcher's flux keeps {a}: {args:?}"
        );
    }
    let memcached = deployment(&client, &n, "weave-flux-memcached").await;
    let m = container_args(&memcached.spec.expect("spec").template, "memcached");
    for a in LAUNCHER_MEMCACHED_ARGS {
        assert!(m.iter().any(|x| x == a), "memcached keeps {a}: {m:?}");
    }
    let agent = deployment(&client, &n, "weave-agent").await;
    assert!(!is_weft_managed(&agent.metadata), "weave-agent is back");

    // 3 (cluster roles) and 5, as the documented commands do (issue 44 item 6).
    for kind in ["ClusterRoleBinding", "ClusterRole"] {
        for name in [
            "weave-flux",
            "weave-scope",
            "weave-cortex",
            "weave-scope-cluster-agent",
            "weave-cortex-kube-state-metrics",
        ] {
            let _ = dynamic_api(&client, kind, None)
                .delete(&format!("{name}:{n}"), &DeleteParams::background())
                .await;
        }
    }
    for (kind, names) in [
        (
            "Service",
            &["weave-cortex-agent", "weave-cortex-kube-state-metrics"][..],
        ),
        (
            "ServiceAccount",
            &[
                "weave-cortex-kube-state-metrics",
                "weave-cortex-node-exporter",
                "weave-scope-cluster-agent",
            ][..],
        ),
    ] {
        for name in names {
            let _ = dynamic_api(&client, kind, Some(&n))
                .delete(name, &DeleteParams::background())
                .await;
        }
    }
    let unmark = json!({"metadata": {
        "labels": {"app.kubernetes.io/managed-by": null, "weft.io/owner": null},
        "annotations": {"weft.io/owner-ref": null, "weft.io/applied-hash": null, "weft.io/prune": null},
    }});
    for kind in ["ServiceAccount", "Service", "ConfigMap", "Secret"] {
        let api = dynamic_api(&client, kind, Some(&n));
        for o in api
            .list(&kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=weft"))
            .await
            .expect("list")
            .items
        {
            let name = o.metadata.name.clone().unwrap_or_default();
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&unmark),
            )
            .await
            .expect("label-, annotate-");
        }
    }
    let _ = Api::<ConfigMap>::namespaced(client.clone(), &n)
        .delete(
            &format!("weft-takeover-{n}.weave-cloud"),
            &DeleteParams::default(),
        )
        .await;
    let mut left = Vec::new();
    for kind in [
        "Deployment",
        "DaemonSet",
        "Service",
        "ServiceAccount",
        "ConfigMap",
        "Secret",
    ] {
        for o in dynamic_api(&client, kind, Some(&n))
            .list(&kube::api::ListParams::default())
            .await
            .expect("list")
            .items
        {
            let marked = o.metadata.labels.iter().flatten().any(|(k, v)| {
                k.starts_with("weft.io/") || (k == "app.kubernetes.io/managed-by" && v == "weft")
            }) || o
                .metadata
                .annotations
                .iter()
                .flatten()
                .any(|(k, _)| k.starts_with("weft.io/"));
            let name = o.metadata.name.clone().unwrap_or_default();
            let orphan = matches!(
                name.as_str(),
                "weave-cortex-agent"
                    | "weave-cortex-kube-state-metrics"
                    | "weave-cortex-node-exporter"
                    | "weave-scope-cluster-agent"
            ) && matches!(kind, "Service" | "ServiceAccount");
            // Weft's own records (inventories, the root's record) live in Weft's namespace,
            // which is the test's own here: not what the rollback removes.
            let weft_own = name.starts_with("weft-") && !name.starts_with("weft-takeover-");
            if (marked && !weft_own) || orphan || name.starts_with("weft-takeover-") {
                left.push(format!("{kind}/{name}"));
            }
        }
    }
    for kind in ["ClusterRoleBinding", "ClusterRole"] {
        for o in dynamic_api(&client, kind, None)
            .list(&kube::api::ListParams::default())
            .await
            .expect("list")
            .items
        {
            let name = o.metadata.name.clone().unwrap_or_default();
            if name.ends_with(&format!(":{n}")) {
                left.push(format!("{kind}/{name}"));
            }
        }
    }
    assert!(left.is_empty(), "nothing of Weft is left: {left:?}");
    let key = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &n)
        .get("flux-git-deploy")
        .await
        .expect("the deploy key stays");
    assert!(
        key.data.is_some_and(|d| !d.is_empty()),
        "the deploy key keeps its data"
    );

    remove_weft_cluster_roles(&client, &n).await;
    remove_outside(&client, &launcher, &n).await;
    ns.delete().await;
}

/// Item 6: `takeover: false` writes `LauncherObjects=True TakeoverDisabled` and
/// `status.takeover.left`; once the launcher is removed by hand and `takeover` is true, neither
/// is left beside `Ready=True`.
#[tokio::test]
async fn takeover_false_then_true_leaves_no_stale_launcher_status() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ns = TestNamespace::new("takeover-flip").await;
    let n = ns.name().to_string();
    let client = ns.client();
    let (launcher, _dir) = launcher_and_repo(&client, &n).await;
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    let off = seed(&n).replace("  general:\n", "  general:\n    takeover: false\n");
    work.write("weave/weave-cloud.yaml", off);
    work.commit("takeover: false");
    work.push();
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        interval: "3s",
        ..DaemonOptions::new(&server.url("config.git"), &n)
    });
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), &n);
    wait_until("LauncherObjects=True TakeoverDisabled", &d, async || {
        let wc = wcs.get_opt("weave-cloud").await.ok()??;
        let status = wc.status?;
        let c = status
            .conditions
            .iter()
            .find(|c| c.type_ == "LauncherObjects")?;
        (c.reason == "TakeoverDisabled" && !status.takeover?.left.is_empty()).then_some(())
    })
    .await;
    // The user removes the launcher by hand (keeping the token and the deploy key), then lets
    // Weft take over.
    for o in &launcher {
        let (kind, object_ns, name) = key(o);
        if kind == "Secret" {
            continue;
        }
        let _ = dynamic_api(&client, &kind, object_ns.as_deref())
            .delete(&name, &DeleteParams::background())
            .await;
    }
    work.write("weave/weave-cloud.yaml", seed(&n));
    work.commit("takeover: true");
    work.push();
    let status = wait_until("Ready=True", &d, async || {
        let wc = wcs.get_opt("weave-cloud").await.ok()??;
        let status = wc.status?;
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
        // Generation 2: the WeaveCloud with `takeover: true`.
        (ready.status == weft::api::conditions::ConditionStatus::True
            && wc.metadata.generation >= Some(2)
            && status.observed_generation == wc.metadata.generation)
            .then_some(status)
    })
    .await;
    let launcher_condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "LauncherObjects")
        .expect("the condition");
    assert_eq!(
        (
            format!("{:?}", launcher_condition.status),
            launcher_condition.reason.as_str()
        ),
        ("False".to_string(), "NoLauncherObjects"),
        "{status:?}"
    );
    assert!(
        status.takeover.as_ref().is_none_or(|t| t.left.is_empty()),
        "no stale status.takeover.left: {:?}",
        status.takeover
    );
    // The daemon re-applies the WeaveCloud from git every 3s: stop it, then let the namespace
    // go without the finalizer.
    drop(d);
    wcs.patch(
        "weave-cloud",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the finalizer");
    remove_weft_cluster_roles(&client, &n).await;
    remove_outside(&client, &launcher, &n).await;
    ns.delete().await;
}
