//! Unit tests of the ArmadaChart controller: pure parts, and reconciles against a scripted fake
//! API server.

use super::*;
use serde_json::json;

fn deployment(manager: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "demo",
            "annotations": {"weft.io/owner-ref": "ArmadaChart/demo/web"},
            "managedFields": [
                {"manager": "weft", "operation": "Apply", "time": "2026-01-01T00:00:00Z"},
                {"manager": manager, "operation": "Update", "time": "2026-01-01T00:00:01Z"}
            ]
        }
    }))
    .expect("deployment")
}

#[test]
fn a_childs_edit_by_someone_else_is_drift_of_its_chart() {
    assert!(edited_by_someone_else(&deployment("kubectl-edit").metadata));
    assert!(!edited_by_someone_else(&deployment("weft").metadata));
    assert!(!edited_by_someone_else(
        &deployment("kube-controller-manager").metadata
    ));
    let seen = Seen::default();
    let map = child_mapper::<Deployment>(seen.clone());
    let chart = map(deployment("kubectl-edit")).expect("mapped to its chart");
    assert_eq!(chart.name, "web");
    assert_eq!(chart.namespace.as_deref(), Some("demo"));
    let pending = seen.take(&("demo".into(), "web".into()));
    let touch = &pending.children["Deployment/demo/web"];
    assert!(touch.edited);
    assert_eq!(touch.resource.plural, "deployments");
    assert_eq!(
        chart_of_reference("ArmadaChart/demo/web"),
        Some(("demo".to_string(), "web".to_string()))
    );
    assert_eq!(chart_of_reference("WeaveCloud/demo/web"), None);
}

mod against_a_fake_api_server {
    use http::Method;
    use serde_json::{json, Value};

    use super::super::*;
    use crate::api::keys::OWNER_LABEL;
    use crate::daemon::fixtures::{mock_client, resource_list, Expect, Scenario};
    use crate::daemon::status::DaemonStatus;

    const CHART: &str = "/apis/armada.airshipit.org/v1alpha1/namespaces/demo/armadacharts/web";
    const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/demo/deployments";

    fn context() -> (Arc<Context>, crate::daemon::fixtures::ApiServerVerifier) {
        let (client, api) = mock_client();
        let state = DaemonState::new(client, "weft-system", DaemonStatus::default());
        let ctx = Context::new(state, crate::daemon::shutdown::Shutdown::never());
        (Arc::new(ctx), api)
    }

    fn chart(policy: &str, extra: Value) -> ArmadaChart {
        let mut v = json!({
            "apiVersion": "armada.airshipit.org/v1alpha1",
            "kind": "ArmadaChart",
            "metadata": {
                "name": "web", "namespace": "demo", "uid": "0000-web", "generation": 3,
                "finalizers": [ARMADA_CHART_FINALIZER],
            },
            "spec": {
                "release": "web", "namespace": "demo", "driftPolicy": policy,
                "source": {"type": "local", "location": "charts/web"},
            },
        });
        crate::daemon::fixtures::merge(&mut v, extra);
        serde_json::from_value(v).expect("an ArmadaChart")
    }

    fn owner(name: &str) -> String {
        Owner::resource(OwnerKind::ArmadaChart, "demo", name).id().0
    }

    /// A live Deployment labelled (by Weft's own apply) for chart `owner`.
    fn child(name: &str, owner_id: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": name, "namespace": "demo", "uid": format!("uid-{name}"),
                "labels": {OWNER_LABEL: owner_id},
                "managedFields": [{
                    "manager": "weft", "operation": "Apply", "apiVersion": "apps/v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {format!("f:{OWNER_LABEL}"): {}}}},
                }],
            },
        })
    }

    fn inventory_ref(name: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": name})
    }

    #[tokio::test]
    async fn cleanup_deletes_only_children_with_its_owner_label_then_removes_the_finalizer() {
        let (ctx, api) = context();
        let deleting = chart(
            "correct",
            json!({
                "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"inventory": [inventory_ref("web"), inventory_ref("taken")]},
            }),
        );
        let gone = json!(deleting);
        let server = api.run(
            Scenario::new()
                // Is a suspended group holding it? (No group lists it: no manifest is read.)
                .then(Expect::call(
                    Method::GET,
                    "/apis/armada.airshipit.org/v1alpha1/namespaces/demo/armadachartgroups",
                    json!({"apiVersion": "armada.airshipit.org/v1alpha1", "kind": "ArmadaChartGroupList", "metadata": {}, "items": []}),
                ))
                // One discovery call for the one group version of the inventory.
                .then(Expect::call(
                    Method::GET,
                    "/apis/apps/v1",
                    resource_list("apps/v1", &[("Deployment", "deployments", true)]),
                ))
                .then_any_order(vec![
                    Expect::call(
                        Method::GET,
                        format!("{DEPLOYMENTS}/web"),
                        child("web", &owner("web")),
                    ),
                    // Taken over by another chart since: not this chart's to delete.
                    Expect::call(
                        Method::GET,
                        format!("{DEPLOYMENTS}/taken"),
                        child("taken", &owner("other")),
                    ),
                    Expect::with(Method::DELETE, format!("{DEPLOYMENTS}/web"), |seen| {
                        assert_eq!(
                            seen.body["preconditions"]["uid"], "uid-web",
                            "{}",
                            seen.body
                        );
                        child("web", &owner("web"))
                    }),
                ])
                .then(Expect::event("demo"))
                .then(Expect::with(Method::PATCH, CHART, move |seen| {
                    let ops = seen.body.as_array().expect("a JSON patch");
                    assert!(
                        ops.iter().any(
                            |op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0"
                        ),
                        "{ops:?}"
                    );
                    gone
                })),
        );
        let action = reconcile(Arc::new(deleting), ctx.clone())
            .await
            .expect("cleanup");
        assert_eq!(action, Action::await_change());
        let seen = server.await.expect("exactly the expected calls");
        let deleted: Vec<&str> = seen
            .iter()
            .filter(|s| s.method == Method::DELETE)
            .map(|s| s.path.as_str())
            .collect();
        assert_eq!(deleted, [format!("{DEPLOYMENTS}/web")]);
        assert!(
            !ctx.state.root_pushes().flag().asked(),
            "a deleted chart wants no pass"
        );
    }

    #[tokio::test]
    async fn a_deleted_child_of_a_correct_chart_queues_one_sync_pass_and_writes_nothing() {
        let (ctx, api) = context();
        let seen = ctx.seen.clone();
        let map = child_mapper::<Deployment>(seen);
        // The child's last write was Weft's: only reading it back tells a deletion.
        let last = serde_json::from_value::<Deployment>(json!({
            "metadata": {
                "name": "web", "namespace": "demo",
                "annotations": {OWNER_REF_ANNOTATION: "ArmadaChart/demo/web"},
            },
        }))
        .expect("a Deployment");
        assert!(map(last).is_some());
        let server = api.run(Scenario::new().then(Expect::not_found(format!("{DEPLOYMENTS}/web"))));
        let action = reconcile(Arc::new(chart("correct", json!({}))), ctx.clone())
            .await
            .expect("apply");
        assert_eq!(action, Action::await_change());
        server.await.expect("only the read of the child");
        assert!(
            ctx.state.root_pushes().flag().asked(),
            "a pass restores the child"
        );
    }

    #[tokio::test]
    async fn drift_of_a_report_chart_is_reported_not_corrected() {
        let (ctx, api) = context();
        let map = child_mapper::<Deployment>(ctx.seen.clone());
        let edited = serde_json::from_value::<Deployment>(json!({
            "metadata": {
                "name": "web", "namespace": "demo",
                "annotations": {OWNER_REF_ANNOTATION: "ArmadaChart/demo/web"},
                "managedFields": [
                    {"manager": "weft", "operation": "Apply", "time": "2026-01-01T00:00:00Z"},
                    {"manager": "kubectl-edit", "operation": "Update", "time": "2026-01-01T00:00:01Z"},
                ],
            },
        }))
        .expect("a Deployment");
        assert!(map(edited).is_some());
        let report = chart("report", json!({}));
        let live = json!(report);
        let patched = live.clone();
        let server = api.run(
            Scenario::new()
                .then(Expect::call(Method::GET, CHART, live))
                .then(Expect::with(
                    Method::PATCH,
                    format!("{CHART}/status"),
                    |seen| {
                        let status = &seen.body["status"];
                        assert_eq!(status["inconsistent"], true);
                        let drifted = status["conditions"]
                            .as_array()
                            .expect("conditions")
                            .iter()
                            .find(|c| c["type"] == "Drifted")
                            .expect("a Drifted condition")
                            .clone();
                        assert_eq!(drifted["status"], "True");
                        assert!(
                            drifted["message"]
                                .as_str()
                                .is_some_and(|m| m.contains("Deployment/demo/web")),
                            "{drifted}"
                        );
                        patched
                    },
                ))
                .then(Expect::event("demo")),
        );
        reconcile(Arc::new(report), ctx.clone())
            .await
            .expect("apply");
        server.await.expect("exactly the expected calls");
        assert!(
            !ctx.state.root_pushes().flag().asked(),
            "report: nothing is corrected"
        );
    }

    #[tokio::test]
    async fn a_new_requested_at_queues_a_pass_but_its_first_sighting_does_not() {
        let (ctx, api) = context();
        let server = api.run(Scenario::new());
        let at = |v: &str| {
            chart(
                "correct",
                json!({"metadata": {"annotations": {REQUESTED_AT_ANNOTATION: v}}}),
            )
        };
        reconcile(Arc::new(at("1")), ctx.clone())
            .await
            .expect("apply");
        assert!(
            !ctx.state.root_pushes().flag().asked(),
            "startup only records it"
        );
        reconcile(Arc::new(at("1")), ctx.clone())
            .await
            .expect("apply");
        assert!(!ctx.state.root_pushes().flag().asked());
        reconcile(Arc::new(at("2")), ctx.clone())
            .await
            .expect("apply");
        assert!(ctx.state.root_pushes().flag().asked());
        server.await.expect("no API call at all");
    }
}
