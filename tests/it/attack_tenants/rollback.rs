//! Issue 48 item 3's last gap: a refused bundle whose earlier version Weft may not write back
//! leaves nothing of itself. Weft runs as its ServiceAccount under deploy/'s RBAC, scope's role
//! left out of its `escalate` rule (an operator who did not list it): the refused bundle narrows
//! scope's ClusterRole to rules Weft holds, so Weft may write it, but not the broader one before.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use serde_json::json;

use super::{
    as_weft_with_deploy_rbac_unlisted, broken_bundle_files, create_weavecloud, fresh, updater,
    ChannelServer, Published, FLUX,
};
use crate::support;
use support::cluster::TestNamespace;
use weft::daemon::namespaces::WatchNamespaces;
use weft::daemon::state::DaemonState;
use weft::daemon::status::DaemonStatus;
use weft::daemon::updater::{UpdateOptions, UpdateOutcome, Updater};
use weft::source::fetch_policy::{ChannelPolicy, UrlAllowList};

/// Scope's rules that Weft (deploy/12-rbac-apply.yaml) does not hold: the refused bundle drops
/// them, and restoring them needs `escalate`.
const NOT_HELD: [&str; 5] = [
    "  - apiGroups: ['']\n    resources: [pods, pods/log, replicationcontrollers, services, namespaces, persistentvolumes, persistentvolumeclaims, nodes, endpoints]\n    verbs: [get, list, watch]\n",
    "  - apiGroups: [apps]\n    resources: [deployments, daemonsets, statefulsets, replicasets]\n    verbs: [get, list, watch]\n",
    "  - apiGroups: [apps]\n    resources: [deployments/scale]\n    verbs: [get, update]\n",
    "  - apiGroups: [storage.k8s.io]\n    resources: [storageclasses]\n    verbs: [get, list, watch]\n",
    "  - apiGroups: [snapshot.storage.k8s.io]\n    resources: [volumesnapshots, volumesnapshotdatas, volumesnapshotclasses]\n    verbs: [get, list, watch]\n",
];

#[tokio::test]
async fn a_scope_role_the_rollback_may_not_restore_keeps_nothing_of_the_refused_bundle() {
    let server = ChannelServer::start();
    let mut files = broken_bundle_files("1.2.0");
    let mut rbac = String::from_utf8(files["scope/rbac.yaml"].clone()).unwrap();
    for rule in NOT_HELD {
        assert!(
            rbac.contains(rule),
            "agents/scope/rbac.yaml changed: adapt the test"
        );
        rbac = rbac.replacen(rule, "", 1);
    }
    files.insert("scope/rbac.yaml".into(), rbac.into_bytes());
    server.publish(&[Published::new("1.2.0", &files)]);

    let ns = TestNamespace::new("attack-rollback-scope").await;
    let admin = ns.client();
    support::cluster::install_crds(&admin).await;
    create_weavecloud(
        &admin,
        ns.name(),
        "weave-cloud",
        json!({"general": {"wcPollUrl": server.channel_url(), "autoUpdate": true},
               "scope": {"disable": false}}),
    )
    .await;
    // The built-in agents, scope's broad role among them, applied as the operator installed them.
    updater(&ns, &server.url(""), Duration::from_secs(60))
        .apply_active(&fresh(&ns).await)
        .await
        .expect("the built-in agents");
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let scope_role = format!("weave-scope:{}", ns.name());
    let before = roles.get(&scope_role).await.expect("scope's role").rules;
    assert_eq!(before.as_ref().map(Vec::len), Some(7), "{before:?}");

    let (weft, _cleanup) =
        as_weft_with_deploy_rbac_unlisted(&admin, ns.name(), &["weave-scope"]).await;
    let state = DaemonState::new(weft, ns.name(), DaemonStatus::default())
        .with_watch_namespaces(WatchNamespaces::only([ns.name()]));
    let as_weft = Updater::new(
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
    let report = as_weft.check(&fresh(&ns).await).await;
    let UpdateOutcome::RolledBack { reason, .. } = &report.outcome else {
        panic!("expected a rollback, got {:?}", report.outcome);
    };
    eprintln!("rolled back: {reason}");
    // The refused bundle's narrow role is not what scope runs with: the earlier one is back, or
    // (Weft may not write it) the role is gone and the WeaveCloud says so.
    let after = roles.get_opt(&scope_role).await.unwrap();
    if let Some(role) = &after {
        assert_eq!(
            role.rules, before,
            "scope's role is the refused bundle's after its rollback"
        );
    }
    assert!(
        after.is_some() || reason.contains(&format!("removed ClusterRole/{scope_role}")),
        "the message says scope's role was removed: {reason}"
    );
    // Nor does flux run the refused bundle's pod: restored, or (the rollback stopped at the role
    // it could not restore) removed until the earlier bundle can be applied.
    if let Some(flux) = ns.api::<Deployment>().get_opt(FLUX).await.unwrap() {
        let selector = flux.spec.unwrap().template.spec.unwrap().node_selector;
        assert!(
            selector.as_ref().is_none_or(|s| s.is_empty()),
            "flux runs the refused bundle's pod: {selector:?}"
        );
    }
    ns.delete().await;
}
