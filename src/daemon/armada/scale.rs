//! `kubectl scale` of a chart's child, told from its managedFields.
//!
//! A write through the `scale` subresource is recorded with no time, so it cannot be ordered
//! against Weft's apply the way an edit of the main resource is. What can be told: a server-side
//! apply owns `spec.replicas` until someone else writes it, and then that writer owns it. So a
//! child whose replica count Weft's apply owned when last seen, and that another manager now owns
//! through `scale`, was scaled away from git. Remembering only the transition keeps a child whose
//! replicas are not in git (an autoscaler's or a person's to set) from queueing a pass on every
//! later event.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::ObjectMeta;

use crate::apply::FIELD_MANAGER;

/// The children (`Kind/namespace/name`) whose `spec.replicas` Weft's apply owned when last seen.
#[derive(Clone, Debug, Default)]
pub(super) struct ReplicaOwners(Arc<Mutex<HashSet<String>>>);

impl ReplicaOwners {
    /// Whether `object` was scaled away from the count Weft applied since it was last seen
    /// (and remember who owns its replicas now).
    pub(super) fn scaled_away(&self, object: &str, meta: &ObjectMeta) -> bool {
        let entries = meta.managed_fields.as_deref().unwrap_or_default();
        let weft_owns = entries
            .iter()
            .any(|m| m.manager.as_deref() == Some(FIELD_MANAGER) && owns_replicas(m));
        let scaled_by_someone = entries.iter().any(|m| {
            m.subresource.as_deref() == Some("scale")
                && !is_controller(m.manager.as_deref())
                && owns_replicas(m)
        });
        let mut owned = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let was_weft_s = if weft_owns {
            !owned.insert(object.to_string())
        } else {
            owned.remove(object)
        };
        was_weft_s && !weft_owns && scaled_by_someone
    }
}

/// The controller-manager's writes (an HPA's scale): bookkeeping, not an edit. Its manager name
/// may carry a suffix (`kube-controller-manager-ccc17bfa…`).
fn is_controller(manager: Option<&str>) -> bool {
    manager.is_some_and(|m| m.starts_with("kube-controller-manager"))
}

fn owns_replicas(m: &ManagedFieldsEntry) -> bool {
    m.fields_v1
        .as_ref()
        .and_then(|f| f.0.get("f:spec"))
        .and_then(|spec| spec.get("f:replicas"))
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(entries: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(json!({"name": "web", "managedFields": entries})).expect("meta")
    }

    fn weft_with_replicas() -> serde_json::Value {
        json!({"manager": "weft", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:selector": {}}}})
    }

    fn weft_without_replicas() -> serde_json::Value {
        json!({"manager": "weft", "operation": "Apply", "fieldsV1": {"f:spec": {"f:selector": {}}}})
    }

    fn scaled_by(manager: &str) -> serde_json::Value {
        json!({"manager": manager, "operation": "Update", "subresource": "scale", "fieldsV1": {"f:spec": {"f:replicas": {}}}})
    }

    #[test]
    fn kubectl_scale_of_what_weft_applied_is_seen_once() {
        let owners = ReplicaOwners::default();
        let o = "Deployment/demo/web";
        assert!(!owners.scaled_away(o, &meta(json!([weft_with_replicas()]))));
        let scaled = meta(json!([weft_without_replicas(), scaled_by("kubectl")]));
        assert!(owners.scaled_away(o, &scaled));
        // Later events of the same scaled child (a status update) do not ask again.
        assert!(!owners.scaled_away(o, &scaled));
        // Weft applied again: owned again, and a second scale is seen again.
        assert!(!owners.scaled_away(o, &meta(json!([weft_with_replicas()]))));
        assert!(owners.scaled_away(o, &scaled));
    }

    #[test]
    fn replicas_weft_never_applied_or_an_autoscaler_are_not_drift() {
        let owners = ReplicaOwners::default();
        let o = "Deployment/demo/web";
        // Not in git: a person's scale is theirs.
        let scaled = meta(json!([weft_without_replicas(), scaled_by("kubectl")]));
        assert!(!owners.scaled_away(o, &scaled));
        // An HPA (the controller-manager) taking the count over is no edit.
        assert!(!owners.scaled_away(o, &meta(json!([weft_with_replicas()]))));
        let hpa = meta(json!([
            weft_without_replicas(),
            scaled_by("kube-controller-manager-ccc17bfaaa6bc11c")
        ]));
        assert!(!owners.scaled_away(o, &hpa));
    }
}
