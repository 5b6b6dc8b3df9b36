//! The Armada CRDs, thresholds, label selectors and overlays.

use super::*;
use kube::CustomResourceExt;
use serde_json::json;

#[test]
fn crds_have_names_short_names_and_columns() {
    let crd = ArmadaChart::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("armadacharts.armada.airshipit.org")
    );
    assert_eq!(crd.spec.names.short_names, Some(vec!["act".to_string()]));
    let cols: Vec<_> = crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert!(
        cols.contains(&"Ready") && cols.contains(&"Phase") && cols.contains(&"Age"),
        "{cols:?}"
    );
    assert_eq!(
        ArmadaChartGroup::crd().spec.names.short_names,
        Some(vec!["acg".to_string()])
    );
    assert_eq!(
        ArmadaManifest::crd().spec.names.short_names,
        Some(vec!["amf".to_string()])
    );
    assert!(crd.spec.versions[0]
        .subresources
        .as_ref()
        .unwrap()
        .status
        .is_some());
}

#[test]
fn schema_is_structural_where_it_matters() {
    let crd = serde_json::to_value(ArmadaChart::crd()).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(
        spec["properties"]["values"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert_eq!(
        spec["properties"]["source"]["properties"]["type"]["enum"],
        json!(["local", "git", "tar", "helm", "oci"])
    );
    let min_ready =
        &spec["properties"]["wait"]["properties"]["resources"]["items"]["properties"]["min_ready"];
    assert_eq!(min_ready["x-kubernetes-int-or-string"], true, "{min_ready}");
    assert_eq!(min_ready["pattern"], MIN_READY_PATTERN);
    assert_eq!(
        spec["properties"]["wait"]["properties"]["timeout"]["minimum"],
        1.0
    );
    let required = spec["required"].as_array().unwrap();
    for f in ["release", "namespace", "source"] {
        assert!(
            required.contains(&json!(f)),
            "{f} not required: {required:?}"
        );
    }
    // No untyped node other than the free-form ones: a structural schema needs types.
    fn walk(v: &Value, path: &str, out: &mut Vec<String>) {
        if let Some(props) = v.get("properties").and_then(Value::as_object) {
            for (k, child) in props {
                let p = format!("{path}.{k}");
                if child.get("type").is_none()
                    && child.get("x-kubernetes-int-or-string").is_none()
                    && child.get("x-kubernetes-preserve-unknown-fields").is_none()
                {
                    out.push(p.clone());
                }
                walk(child, &p, out);
            }
        }
        if let Some(items) = v.get("items") {
            walk(items, &format!("{path}[]"), out);
        }
    }
    let mut untyped = Vec::new();
    walk(spec, "spec", &mut untyped);
    assert!(untyped.is_empty(), "untyped schema nodes: {untyped:?}");
}

#[test]
fn min_ready_thresholds_round_up() {
    let t = |v: Value| serde_json::from_value::<MinReady>(v).unwrap().threshold();
    assert_eq!(t(json!(3)).unwrap(), Threshold::Count(3));
    assert_eq!(t(json!("80%")).unwrap().required(3), 3); // 2.4 → 3
    assert_eq!(t(json!("50%")).unwrap().required(3), 2); // 1.5 → 2
    assert_eq!(t(json!("2")).unwrap(), Threshold::Count(2));
    assert_eq!(Threshold::default().required(4), 4);
    assert_eq!(Threshold::default().required(0), 0);
    assert!(t(json!("120%"))
        .unwrap_err()
        .to_string()
        .contains("between 0% and 100%"));
    assert!(t(json!(-1)).unwrap_err().to_string().contains("negative"));
    assert!(t(json!("most"))
        .unwrap_err()
        .to_string()
        .contains("integer or a percentage"));
}

#[test]
fn label_selectors() {
    let labels = json!({"app": "web", "tier": "front", "env": "prod"});
    let labels = labels.as_object().unwrap();
    let m = |s: &str| LabelSelector::parse(s).unwrap().matches(labels);
    assert!(m("app=web"));
    assert!(m("app==web,tier!=db"));
    assert!(m("env in (prod, staging),!legacy"));
    assert!(!m("env notin (prod)"));
    assert!(m("app"));
    assert!(!m("app=api"));
    assert!(LabelSelector::parse("env in prod")
        .unwrap_err()
        .to_string()
        .contains("parenthesised"));
    assert!(LabelSelector::parse("a=b,")
        .unwrap_err()
        .to_string()
        .contains("empty requirement"));
}

#[test]
fn overlays_parse_and_explain_mistakes() {
    let values = json!({"overlays": [
        {"target": {"kind": "Deployment", "name": "web"}, "mergePatch": {"spec": {"replicas": 3}}},
        {"target": {"labelSelector": "app=web"}, "jsonPatch": [{"op": "add", "path": "/metadata/labels/x", "value": "y"}]}
    ]});
    let o = overlays_of(values.as_object().unwrap()).unwrap();
    assert_eq!(o.len(), 2);
    assert!(o[1].json_patch.is_some());
    let both = json!({"overlays": [{"target": {"kind": "A"}, "mergePatch": {}, "jsonPatch": []}]});
    assert!(overlays_of(both.as_object().unwrap())
        .unwrap_err()
        .1
        .contains("both"));
    let untargeted = json!({"overlays": [{"target": {"namespace": "x"}, "mergePatch": {}}]});
    assert!(overlays_of(untargeted.as_object().unwrap())
        .unwrap_err()
        .1
        .contains("at least one of"));
    let typo = json!({"overlays": [{"target": {"kind": "A"}, "mergepatch": {}}]});
    let (i, msg) = overlays_of(typo.as_object().unwrap()).unwrap_err();
    assert_eq!(i, 0);
    assert!(msg.contains("mergepatch"), "{msg}");
}
