//! Unit tests of the WeaveCloud controller: pure parts, and reconciles against a scripted
//! fake API server.

use crate::api::owner::OwnerKind;
use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;

use super::agents::{drifted, has_desired_changes};
use super::*;
use crate::apply::changeset::{Change, ChangeSet};

fn cm(name: &str) -> crate::api::ObjectRef {
    crate::api::ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: "weave".into(),
        name: name.into(),
    }
}

fn change(name: &str, action: ChangeAction, reason: Option<&str>) -> Change {
    Change {
        object: cm(name),
        owner: Owner::resource(OwnerKind::WeaveCloud, "weave", "wc"),
        action,
        reason: reason.map(str::to_string),
    }
}

#[test]
fn drift_is_an_edited_field_or_a_deleted_child_not_a_spec_change() {
    let inventory: BTreeSet<_> = [cm("a"), cm("b")].into();
    let changes = ChangeSet {
        entries: vec![
            change("a", ChangeAction::Configured, Some("drifted: data.k")),
            change("b", ChangeAction::Created, None),
            change("c", ChangeAction::Unchanged, None),
        ],
        ..Default::default()
    };
    assert_eq!(
        drifted(&changes, &inventory),
        vec![
            "ConfigMap/weave/a (drifted: data.k)".to_string(),
            "ConfigMap/weave/b (deleted)".to_string()
        ]
    );
    assert!(!has_desired_changes(&changes, &inventory));
    let spec_change = ChangeSet {
        entries: vec![
            change("a", ChangeAction::Configured, Some("changed")),
            change("new", ChangeAction::Created, None),
        ],
        ..Default::default()
    };
    assert!(drifted(&spec_change, &inventory).is_empty());
    assert!(has_desired_changes(&spec_change, &inventory));
}

#[test]
fn children_map_to_their_weavecloud_by_annotation() {
    let mut d = Deployment::default();
    d.metadata.annotations = Some(
        [(
            OWNER_REF_ANNOTATION.to_string(),
            "WeaveCloud/weave/wc".to_string(),
        )]
        .into(),
    );
    let r = owner_ref_of(&d).unwrap();
    assert_eq!(r.name, "wc");
    assert_eq!(r.namespace.as_deref(), Some("weave"));
    d.metadata.annotations = Some(
        [(
            OWNER_REF_ANNOTATION.to_string(),
            "root/weft-system/weft".to_string(),
        )]
        .into(),
    );
    assert!(owner_ref_of(&d).is_none());
}

mod against_a_fake_api_server {
    use http::Method;
    use serde_json::json;

    use super::super::*;
    use crate::daemon::fixtures::{mock_client, Expect, Scenario};
    use crate::daemon::state::DaemonState;
    use crate::daemon::status::DaemonStatus;
    use crate::pass::agents::cache_configmap_name;

    fn weavecloud() -> WeaveCloud {
        serde_json::from_value(json!({
            "apiVersion": "cloud.weave.works/v1beta1",
            "kind": "WeaveCloud",
            "metadata": {
                "name": "wc",
                "namespace": "weave",
                "uid": "0000-wc",
                "generation": 2,
                "finalizers": [AGENTS_FINALIZER],
            },
            "spec": {
                "general": {
                    "environment": "generic",
                    "tokenSecretRef": {"name": "weave-cloud", "key": "token"},
                },
            },
        }))
        .expect("a WeaveCloud")
    }

    #[tokio::test]
    async fn a_missing_token_is_ready_false_token_missing_and_nothing_is_applied() {
        let (client, api) = mock_client();
        // The operator lists the namespace (a WeaveCloud made by hand is trusted only so).
        let state = DaemonState::new(client, "weft-system", DaemonStatus::default())
            .with_watch_namespaces(crate::daemon::namespaces::WatchNamespaces::only(["weave"]));
        let ctx = Arc::new(Context::new(
            state.clone(),
            Arc::default(),
            crate::daemon::shutdown::Shutdown::never(),
        ));
        let status_path = "/apis/cloud.weave.works/v1beta1/namespaces/weave/weaveclouds/wc/status";
        let server = api.run(
            Scenario::new()
                // The active bundle: none cached, the built-in one.
                .then(Expect::not_found(format!(
                    "/api/v1/namespaces/weft-system/configmaps/{}",
                    cache_configmap_name("weave", "wc")
                )))
                .then(Expect::not_found(
                    "/api/v1/namespaces/weave/secrets/weave-cloud",
                ))
                .then(Expect::event("weave"))
                .then(Expect::with(Method::PATCH, status_path, |seen| {
                    let status = &seen.body["status"];
                    let fields: Vec<&String> =
                        status.as_object().expect("a status").keys().collect();
                    assert_eq!(
                        fields,
                        ["conditions", "flux", "observedGeneration"],
                        "no takeover happened: status.takeover is not written (nor erased)"
                    );
                    let ready = status["conditions"]
                        .as_array()
                        .expect("conditions")
                        .iter()
                        .find(|c| c["type"] == "Ready")
                        .expect("a Ready condition");
                    assert_eq!(ready["status"], "False");
                    assert_eq!(ready["reason"], TOKEN_MISSING);
                    assert_eq!(ready["observedGeneration"], 2);
                    let stalled = status["conditions"]
                        .as_array()
                        .expect("conditions")
                        .iter()
                        .find(|c| c["type"] == "Stalled")
                        .expect("a Stalled condition");
                    assert_eq!(stalled["status"], "True");
                    json!(weavecloud())
                })),
        );
        let action = reconcile(Arc::new(weavecloud()), ctx)
            .await
            .expect("the reconcile itself succeeds");
        assert_eq!(action, Action::requeue(Duration::from_secs(60)));
        // No discovery, no apply, no prune: the scenario has no such call.
        server
            .await
            .expect("the API server saw exactly the expected calls");
        let shown = state.status_snapshot();
        let entry = &shown.owners["WeaveCloud/weave/wc"];
        assert_eq!(entry.ready, "False");
        assert_eq!(entry.reason, TOKEN_MISSING);
    }

    #[tokio::test]
    async fn a_new_weavecloud_gets_the_finalizer_first_and_nothing_else() {
        let (client, api) = mock_client();
        // The operator lists the namespace (a WeaveCloud made by hand is trusted only so).
        let state = DaemonState::new(client, "weft-system", DaemonStatus::default())
            .with_watch_namespaces(crate::daemon::namespaces::WatchNamespaces::only(["weave"]));
        let ctx = Arc::new(Context::new(
            state,
            Arc::default(),
            crate::daemon::shutdown::Shutdown::never(),
        ));
        let mut wc = weavecloud();
        wc.metadata.finalizers = None;
        let server = api.run(Scenario::new().then(Expect::with(
            Method::PATCH,
            "/apis/cloud.weave.works/v1beta1/namespaces/weave/weaveclouds/wc",
            |seen| {
                let ops = seen.body.as_array().expect("a JSON patch");
                assert!(
                    ops.iter().any(|op| op["op"] == "add"
                        && op["path"] == "/metadata/finalizers"
                        && op["value"] == json!([AGENTS_FINALIZER])),
                    "{ops:?}"
                );
                let mut done = weavecloud();
                done.metadata.finalizers = Some(vec![AGENTS_FINALIZER.to_string()]);
                json!(done)
            },
        )));
        let action = reconcile(Arc::new(wc), ctx).await.expect("reconcile");
        assert_eq!(action, Action::await_change());
        server.await.expect("only the finalizer patch");
    }

    #[tokio::test]
    async fn a_weavecloud_the_root_did_not_apply_is_told_why_and_gets_nothing_else() {
        let (client, api) = mock_client();
        // The default: no --watch-namespaces, only the root's WeaveClouds.
        let state = DaemonState::new(client, "weft-system", DaemonStatus::default());
        let ctx = Arc::new(Context::new(
            state,
            Arc::default(),
            crate::daemon::shutdown::Shutdown::never(),
        ));
        let mut wc = weavecloud();
        wc.metadata.finalizers = None;
        let status_path = "/apis/cloud.weave.works/v1beta1/namespaces/weave/weaveclouds/wc/status";
        // The root's inventory, where the trust decision reads what the root applied: none.
        let inventory =
            "/api/v1/namespaces/weft-system/configmaps/weft-inventory-3e4238a6073eb7731dea";
        let server = api.run(
            Scenario::new()
                .then(Expect::not_found(inventory))
                .then(Expect::with(Method::PATCH, status_path, |seen| {
                    let conditions = seen.body["status"]["conditions"]
                        .as_array()
                        .expect("conditions");
                    assert_eq!(conditions.len(), 1, "{conditions:?}");
                    assert_eq!(conditions[0]["type"], "Ready");
                    assert_eq!(conditions[0]["status"], "False");
                    assert_eq!(conditions[0]["reason"], NOT_RECONCILED);
                    json!(weavecloud())
                }))
                .then(Expect::event("weave")),
        );
        let action = reconcile(Arc::new(wc.clone()), ctx.clone())
            .await
            .expect("reconcile");
        assert_eq!(action, Action::await_change());
        server
            .await
            .expect("a status patch and an event: no finalizer, no Secret read, no apply");
        // Said once: with a Ready condition there, nothing is written again.
        let (client, api) = mock_client();
        let ctx = Arc::new(Context::new(
            DaemonState::new(client, "weft-system", DaemonStatus::default()),
            Arc::default(),
            crate::daemon::shutdown::Shutdown::never(),
        ));
        let mut told = wc;
        told.status = Some(crate::api::weavecloud::WeaveCloudStatus {
            conditions: vec![crate::api::conditions::Condition::new(
                crate::api::conditions::READY,
                crate::api::conditions::ConditionStatus::False,
                NOT_RECONCILED,
                "not reconciled",
            )],
            ..Default::default()
        });
        let server = api.run(Scenario::new().then(Expect::not_found(inventory)));
        reconcile(Arc::new(told), ctx).await.expect("reconcile");
        server
            .await
            .expect("no call but the inventory read: nothing written");
    }
}

/// A `takeover: false` reconcile's status, then a reconcile with takeover that found no launcher
/// object (removed by hand or by `weft sync`): no stale `LauncherObjects=True` beside `Ready`,
/// no stale `status.takeover.left` (issue 29, item 6). A reconcile that never reached the
/// takeover (`launcher_checked: false`) leaves them as they are.
#[test]
fn a_reconcile_that_finds_no_launcher_object_clears_what_takeover_false_wrote() {
    use crate::api::weavecloud::TakeoverStatus;
    let mut before = WeaveCloudStatus::default();
    set_condition(
        &mut before.conditions,
        Condition::new(
            LAUNCHER_OBJECTS,
            ConditionStatus::True,
            TAKEOVER_DISABLED,
            "left: Deployment/weave/weave-agent",
        ),
        "2026-01-01T00:00:00Z",
    );
    before.takeover = Some(TakeoverStatus {
        removed: Vec::new(),
        left: vec!["Deployment/weave/weave-agent".into()],
    });
    let outcome = |checked: bool| Outcome {
        ready: Condition::new(READY, ConditionStatus::True, "Reconciled", "ready"),
        stalled: Condition::new("Stalled", ConditionStatus::False, "Reconciled", ""),
        drifted: None,
        agent_version: None,
        preserved: None,
        objects: 1,
        requeue: std::time::Duration::from_secs(600),
        reconciling: false,
        takeover: None,
        launcher_checked: checked,
    };
    let after = next_status(&before, &outcome(true), Some(2), "2026-01-02T00:00:00Z");
    let launcher = after
        .conditions
        .iter()
        .find(|c| c.type_ == LAUNCHER_OBJECTS)
        .expect("the condition");
    assert_eq!(
        (launcher.status, launcher.reason.as_str()),
        (ConditionStatus::False, NONE_LEFT)
    );
    assert!(after.takeover.expect("takeover").left.is_empty());

    // After a takeover by `weft sync` (removals recorded): TakenOver.
    before.takeover.as_mut().expect("takeover").removed =
        vec!["Deployment/weave/weave-agent".into()];
    let after = next_status(&before, &outcome(true), Some(2), "2026-01-02T00:00:00Z");
    let launcher = after
        .conditions
        .iter()
        .find(|c| c.type_ == LAUNCHER_OBJECTS)
        .expect("condition");
    assert_eq!(launcher.reason, TAKEN_OVER);

    let unchanged = next_status(&before, &outcome(false), Some(2), "2026-01-02T00:00:00Z");
    assert_eq!(unchanged.takeover, before.takeover);
    assert!(unchanged
        .conditions
        .iter()
        .any(|c| c.type_ == LAUNCHER_OBJECTS && c.reason == TAKEOVER_DISABLED));
}
