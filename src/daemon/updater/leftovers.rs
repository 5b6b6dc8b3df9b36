//! What a refused bundle may leave behind after its rollback, decided from the live object: an
//! object only it renders, or a same-named object the rollback could not restore (the API server
//! forbade writing the earlier version back, say a broader ClusterRole Weft may not escalate to)
//! and that still holds the refused bundle's version. Either is removed, so that nothing of a
//! rolled-back bundle stays (issue 48 item 3).

use serde_json::Value;

/// Whether `live` still holds the refused bundle's version of a same-named object: every field
/// the refused bundle set (`candidate`, metadata aside) is live as it set it, and the earlier
/// bundle's version (`previous`) is not. An object both bundles render alike is never it.
pub(super) fn holds_refused_version(live: &Value, candidate: &Value, previous: &Value) -> bool {
    let content = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("metadata");
            o.remove("status");
        }
        v
    };
    let (candidate, previous) = (content(candidate), content(previous));
    candidate != previous && contains(live, &candidate) && !contains(live, &previous)
}

/// Whether `live` has every field of `desired` with its value (an API server adds defaults to
/// what was applied; a list must match entry by entry, as the fields of a role's `rules` do).
fn contains(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => d
            .iter()
            .all(|(k, dv)| dv.is_null() || l.get(k).is_some_and(|lv| contains(lv, dv))),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| contains(lv, dv))
        }
        _ => live == desired,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "weave-scope:team-a", "labels": {"bundle": "x"}}, "rules": rules})
    }

    #[test]
    fn a_role_the_rollback_could_not_restore_holds_the_refused_version() {
        let broad = role(
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]),
        );
        let narrow = role(json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]));
        let mut live = narrow.clone();
        live["metadata"]["resourceVersion"] = json!("7");
        assert!(holds_refused_version(&live, &narrow, &broad));
        // Restored: the earlier version is live.
        assert!(!holds_refused_version(&broad, &narrow, &broad));
        // Both bundles render it alike: nothing of the refused one to remove.
        assert!(!holds_refused_version(&live, &narrow, &narrow));
    }

    #[test]
    fn defaults_the_api_server_adds_do_not_hide_a_version() {
        let candidate = json!({"kind": "Deployment", "spec": {"replicas": 1, "template": {"spec": {"nodeSelector": {"x": "true"}}}}});
        let previous = json!({"kind": "Deployment", "spec": {"replicas": 1, "template": {"spec": {"nodeSelector": {"x": "false"}}}}});
        let live = json!({"kind": "Deployment", "spec": {"replicas": 1, "strategy": {"type": "RollingUpdate"},
                          "template": {"spec": {"nodeSelector": {"x": "true"}, "dnsPolicy": "ClusterFirst"}}}});
        assert!(holds_refused_version(&live, &candidate, &previous));
    }
}
