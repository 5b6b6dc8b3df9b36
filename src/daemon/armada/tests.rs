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
