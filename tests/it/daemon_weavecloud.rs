//! The WeaveCloud controller of `weft run` on the real control plane: a WeaveCloud from git gets
//! its agents; a deleted agent Deployment is recreated within seconds; a deleted token Secret
//! makes the WeaveCloud `Ready=False, reason TokenMissing` (with an event) within seconds; a
//! deleted WeaveCloud's agents are pruned by its finalizer.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use support::cluster::TestNamespace;
use support::conditions::status_reason;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::manifests::{self, WeaveCloudYaml};
use support::wait::wait_timed;
use weft::api::WeaveCloud;

const FLUX: &str = "weave-flux-agent";

/// One daemon with controllers at a time in this test binary: a WeaveCloud controller watches
/// every namespace, so two would both reconcile each other's WeaveClouds.
static ONE_CONTROLLER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const PROMETHEUS_CONFIG: &str = "weave-cortex-agent-config";

/// The WeaveCloud of these tests' repositories: autoUpdate off, flux pointed at a repository.
fn weavecloud(ns: &str) -> WeaveCloudYaml {
    manifests::weavecloud(ns)
        .auto_update(false)
        .token("weave-cloud-token", Some("token"))
        .flux_config()
}

/// A test namespace with Weft's CRDs and the token Secret, and a repository (served by `git
/// daemon`) holding its WeaveCloud.
async fn weavecloud_in_git(prefix: &str) -> (TestNamespace, Client, RepoHost, GitDaemon) {
    let ns = TestNamespace::new(prefix).await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    support::cluster::create_token_secret(&client, ns.name(), "weave-cloud-token", "s3cr3t-token")
        .await;
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write("weave/weave-cloud.yaml", weavecloud(ns.name()).yaml());
    work.commit("weave cloud");
    work.push();
    (ns, client, host, server)
}

#[tokio::test]
async fn agents_follow_their_weavecloud_child_deletion_token_deletion_and_finalizer() {
    let _one = ONE_CONTROLLER.lock().await;
    let (ns, client, _host, server) = weavecloud_in_git("daemon-wc").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns.name());
    // A flux agent installed before Weft (by the old launcher), with arguments the WeaveCloud
    // leaves unset: they are kept.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns.name());
    let foreign: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": FLUX, "labels": {"name": FLUX}},
        "spec": {
            "selector": {"matchLabels": {"name": FLUX}},
            // No strategy: the API server defaults it to RollingUpdate with a `rollingUpdate`
            // block owned by this foreign manager, which Weft's apply must cope with.
            "template": {
                "metadata": {"labels": {"name": FLUX}},
                "spec": {"containers": [{
                    "name": "flux-agent",
                    "image": "docker.io/fluxcd/flux:1.20.0",
                    "args": ["--git-url=git@old.example.com:legacy.git", "--git-poll-interval=3m", "--k8s-allow-namespace=apps"]
                }]}
            }
        }
    }))
    .expect("foreign flux");
    deployments
        .create(&PostParams::default(), &foreign)
        .await
        .expect("create the old flux agent");

    let url = server.url("config.git");
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&url, ns.name())
    });

    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), ns.name());
    let (flux, _) = wait_timed(
        "the flux agent is applied",
        Duration::from_secs(60),
        &d,
        async || {
            let d = deployments.get_opt(FLUX).await.ok().flatten()?;
            (d.metadata
                .labels
                .as_ref()?
                .get("app.kubernetes.io/managed-by")?
                == "weft")
                .then_some(d)
        },
    )
    .await;
    let args = flux
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].args.clone().unwrap_or_default())
        .unwrap_or_default();
    assert!(
        args.iter()
            .any(|a| a == "--git-url=git@example.com:org/cluster.git"),
        "spec.flux.config.gitUrl wins over the running agent's: {args:?}"
    );
    assert!(
        args.iter().any(|a| a == "--git-poll-interval=3m")
            && args.iter().any(|a| a == "--k8s-allow-namespace=apps"),
        "unset fields keep the running agent's values: {args:?}"
    );
    assert!(!args.iter().any(|a| a.contains("legacy.git")), "{args:?}");
    let events: Api<Event> = Api::namespaced(client.clone(), ns.name());
    wait_timed(
        "status.flux.preservedArgs and a FluxArgsPreserved event",
        Duration::from_secs(20),
        &d,
        async || {
            let wc = wcs.get("weave-cloud").await.ok()?;
            let kept = wc.status?.flux?.preserved_args;
            let list = events.list(&ListParams::default()).await.ok()?;
            let event = list.items.iter().any(|e| {
                e.reason.as_deref() == Some("FluxArgsPreserved")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("--git-poll-interval=3m"))
            });
            (kept.contains(&"--git-poll-interval=3m".to_string()) && event).then_some(())
        },
    )
    .await;
    let first_uid = flux.metadata.uid.clone();
    wait_timed(
        "status.observedGeneration and the finalizer",
        Duration::from_secs(30),
        &d,
        async || {
            let wc = wcs.get("weave-cloud").await.ok()?;
            let ok = wc.status.as_ref()?.observed_generation == wc.metadata.generation
                && wc
                    .metadata
                    .finalizers
                    .as_ref()?
                    .iter()
                    .any(|f| f == "weft.io/agents");
            ok.then_some(())
        },
    )
    .await;

    // An edited field of a child (kubectl edit) → restored within seconds.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let config = configmaps
        .get(PROMETHEUS_CONFIG)
        .await
        .expect("prometheus config");
    let original = config
        .data
        .as_ref()
        .and_then(|d| d.get("prometheus.yml"))
        .cloned()
        .expect("prometheus.yml");
    configmaps
        .patch(
            PROMETHEUS_CONFIG,
            &PatchParams::apply("kubectl-edit").force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": PROMETHEUS_CONFIG},
                "data": {"prometheus.yml": "edited: by hand\n"}
            })),
        )
        .await
        .expect("edit the prometheus config");
    let (_, took) = wait_timed(
        "the edited field is restored",
        Duration::from_secs(20),
        &d,
        async || {
            let c = configmaps.get(PROMETHEUS_CONFIG).await.ok()?;
            (c.data?.get("prometheus.yml")? == &original).then_some(())
        },
    )
    .await;
    eprintln!("edited child restored after {took:?}");

    // kubectl delete of a child → recreated within seconds (the poll interval is an hour).
    deployments
        .delete(FLUX, &DeleteParams::default())
        .await
        .expect("delete flux");
    let (_, took) = wait_timed(
        "the deleted flux agent is recreated",
        Duration::from_secs(20),
        &d,
        async || {
            let again = deployments.get_opt(FLUX).await.ok().flatten()?;
            (again.metadata.uid != first_uid && again.metadata.deletion_timestamp.is_none())
                .then_some(())
        },
    )
    .await;
    eprintln!("deleted child recreated after {took:?}");

    // A new token → the agents roll (their pod templates carry the token Secret's hash).
    let token_hash = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(weft::api::keys::TOKEN_HASH_ANNOTATION).cloned())
    };
    let before =
        token_hash(&deployments.get(FLUX).await.expect("flux")).expect("token hash annotation");
    secrets
        .patch(
            "weave-cloud-token",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"token": "rotated-token"}})),
        )
        .await
        .expect("rotate the token");
    let (_, took) = wait_timed(
        "the agents roll with the new token",
        Duration::from_secs(20),
        &d,
        async || {
            let h = token_hash(&deployments.get(FLUX).await.ok()?)?;
            (h != before).then_some(())
        },
    )
    .await;
    eprintln!("token changed → agents rolled after {took:?}");

    // The token Secret deleted → Ready=False, TokenMissing, within seconds, and an event.
    secrets
        .delete("weave-cloud-token", &DeleteParams::default())
        .await
        .expect("delete token");
    let (_, took) = wait_timed(
        "Ready=False TokenMissing",
        Duration::from_secs(20),
        &d,
        async || {
            let wc = wcs.get("weave-cloud").await.ok()?;
            (status_reason(&wc, "Ready") == Some(("False".into(), "TokenMissing".into())))
                .then_some(())
        },
    )
    .await;
    eprintln!("token Secret deleted → TokenMissing after {took:?}");
    wait_timed(
        "a TokenMissing event",
        Duration::from_secs(10),
        &d,
        async || {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some("TokenMissing"))
                .then_some(())
        },
    )
    .await;
    let wc = wcs.get("weave-cloud").await.expect("wc");
    let ready = wc
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .cloned()
        .expect("Ready");
    assert!(
        ready.message.contains("weave-cloud-token"),
        "{}",
        ready.message
    );
    assert_eq!(ready.observed_generation, wc.metadata.generation);
    assert!(
        !d.logs().contains("s3cr3t-token"),
        "the token is never logged"
    );

    // Deleting the WeaveCloud prunes its agents (finalizer), then lets it go.
    wcs.delete("weave-cloud", &DeleteParams::default())
        .await
        .expect("delete wc");
    wait_timed(
        "the agents are pruned and the WeaveCloud is gone",
        Duration::from_secs(30),
        &d,
        async || {
            let gone = wcs.get_opt("weave-cloud").await.ok()?.is_none();
            let flux_gone = deployments
                .get_opt(FLUX)
                .await
                .ok()?
                .is_none_or(|d| d.metadata.deletion_timestamp.is_some());
            (gone && flux_gone).then_some(())
        },
    )
    .await;
    drop(server);
    ns.delete().await;
}

#[tokio::test]
async fn drift_policy_report_sets_drifted_and_changes_nothing() {
    let _one = ONE_CONTROLLER.lock().await;
    let ns = TestNamespace::new("daemon-wc-report").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    support::cluster::create_token_secret(&client, ns.name(), "weave-cloud-token", "t").await;
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write(
        "weave/weave-cloud.yaml",
        weavecloud(ns.name())
            .yaml()
            .replace("spec:\n", "spec:\n  driftPolicy: report\n"),
    );
    work.commit("weave cloud, report drift");
    work.push();
    let url = server.url("config.git");
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&url, ns.name())
    });
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), ns.name());
    wait_timed(
        "the agents are applied",
        Duration::from_secs(60),
        &d,
        async || {
            let wc = wcs.get("weave-cloud").await.ok()?;
            (!wc.status?.inventory.is_empty()).then_some(())
        },
    )
    .await;
    configmaps
        .patch(
            PROMETHEUS_CONFIG,
            &PatchParams::apply("kubectl-edit").force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": PROMETHEUS_CONFIG},
                "data": {"prometheus.yml": "edited: by hand\n"}
            })),
        )
        .await
        .expect("edit the prometheus config");
    let (message, took) = wait_timed("Drifted=True", Duration::from_secs(20), &d, async || {
        let wc = wcs.get("weave-cloud").await.ok()?;
        let c = wc
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Drifted")?;
        (format!("{:?}", c.status) == "True").then_some(c.message)
    })
    .await;
    eprintln!("drift reported after {took:?}");
    assert!(message.contains(PROMETHEUS_CONFIG), "{message}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let live = configmaps.get(PROMETHEUS_CONFIG).await.expect("configmap");
    assert_eq!(
        live.data
            .as_ref()
            .and_then(|d| d.get("prometheus.yml"))
            .map(String::as_str),
        Some("edited: by hand\n"),
        "driftPolicy: report changes nothing"
    );
    // Let the finalizer run while the daemon is up, so the namespace can go.
    wcs.delete("weave-cloud", &DeleteParams::default())
        .await
        .expect("delete wc");
    wait_timed(
        "the WeaveCloud is gone",
        Duration::from_secs(30),
        &d,
        async || {
            wcs.get_opt("weave-cloud")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    drop(server);
    ns.delete().await;
}

fn suspended_status(wc: &WeaveCloud) -> Option<String> {
    wc.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Suspended")
        .map(|c| format!("{:?}", c.status))
}

/// `weft.io/suspend: "true"` on a WeaveCloud: `Suspended=True`, a deleted agent stays deleted,
/// a deleted WeaveCloud keeps its finalizer and its agents; removing the annotation recreates
/// the agent, and then lets the deletion finish (agents pruned).
#[tokio::test]
async fn a_suspended_weavecloud_is_left_alone_until_it_is_resumed() {
    let _one = ONE_CONTROLLER.lock().await;
    let (ns, client, _host, server) = weavecloud_in_git("daemon-wc-suspend").await;
    let url = server.url("config.git");
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&url, ns.name())
    });
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), ns.name());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns.name());
    wait_timed("the flux agent", Duration::from_secs(60), &d, async || {
        deployments.get_opt(FLUX).await.ok().flatten()
    })
    .await;

    let annotate = async |value: Option<&str>| {
        let patch = serde_json::json!({"metadata": {"annotations": {"weft.io/suspend": value}}});
        wcs.patch(
            "weave-cloud",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("annotate the WeaveCloud");
    };
    annotate(Some("true")).await;
    wait_timed("Suspended=True", Duration::from_secs(20), &d, async || {
        let wc = wcs.get("weave-cloud").await.ok()?;
        (suspended_status(&wc).as_deref() == Some("True")).then_some(())
    })
    .await;
    deployments
        .delete(FLUX, &DeleteParams::default())
        .await
        .expect("delete flux");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        deployments.get_opt(FLUX).await.unwrap().is_none(),
        "a suspended WeaveCloud's deleted agent stays deleted\nlogs:\n{}",
        d.logs()
    );

    annotate(None).await;
    let (_, took) = wait_timed(
        "the agent is recreated on resume",
        Duration::from_secs(30),
        &d,
        async || deployments.get_opt(FLUX).await.ok().flatten(),
    )
    .await;
    eprintln!("resumed → agent recreated after {took:?}");
    wait_timed("Suspended=False", Duration::from_secs(20), &d, async || {
        let wc = wcs.get("weave-cloud").await.ok()?;
        (suspended_status(&wc).as_deref() == Some("False")).then_some(())
    })
    .await;

    // Deleted while suspended: the finalizer and the agents stay until it is resumed.
    annotate(Some("true")).await;
    wait_timed(
        "Suspended=True again",
        Duration::from_secs(20),
        &d,
        async || {
            let wc = wcs.get("weave-cloud").await.ok()?;
            (suspended_status(&wc).as_deref() == Some("True")).then_some(())
        },
    )
    .await;
    wcs.delete("weave-cloud", &DeleteParams::default())
        .await
        .expect("delete wc");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let wc = wcs.get_opt("weave-cloud").await.unwrap();
    assert!(
        wc.is_some_and(|w| w.metadata.deletion_timestamp.is_some()),
        "a suspended WeaveCloud being deleted waits"
    );
    assert!(deployments.get_opt(FLUX).await.unwrap().is_some());
    annotate(None).await;
    wait_timed(
        "the resumed deletion finishes",
        Duration::from_secs(60),
        &d,
        async || {
            let gone = wcs.get_opt("weave-cloud").await.ok()?.is_none();
            let pruned = deployments.get_opt(FLUX).await.ok()?.is_none();
            (gone && pruned).then_some(())
        },
    )
    .await;
    drop(server);
    ns.delete().await;
}
