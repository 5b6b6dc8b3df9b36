//! Cluster prerequisites: a CRD must be `Established`, a Namespace `Active`, a
//! PersistentVolumeClaim `Bound` (`Lost` fails).

use serde_json::Value;

use super::{condition_status, condition_text, text, Readiness};

/// A CustomResourceDefinition: `Established`.
pub fn crd(v: &Value) -> Readiness {
    match condition_status(v, "Established") {
        Some("True") => Readiness::Ready,
        _ => Readiness::InProgress(
            format!("not Established yet {}", condition_text(v, "NamesAccepted"))
                .trim_end()
                .to_string(),
        ),
    }
}

/// A Namespace: `Active` (or no phase yet).
pub fn namespace(v: &Value) -> Readiness {
    match text(v, "/status/phase") {
        Some("Active") | None => Readiness::Ready,
        Some(p) => Readiness::InProgress(format!("phase is {p}")),
    }
}

/// A PersistentVolumeClaim: `Bound`.
pub fn pvc(v: &Value) -> Readiness {
    match text(v, "/status/phase") {
        Some("Bound") => Readiness::Ready,
        Some("Lost") => Readiness::Failed("phase is Lost".into()),
        p => Readiness::InProgress(format!("phase is {}, not Bound", p.unwrap_or("unknown"))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::readiness;
    use super::*;
    use serde_json::json;

    #[test]
    fn crds_namespaces_and_claims() {
        assert_eq!(
            readiness(
                "CustomResourceDefinition",
                &json!({"status": {"conditions": [{"type": "Established", "status": "True"}]}})
            ),
            Readiness::Ready
        );
        assert_eq!(
            crd(
                &json!({"status": {"conditions": [{"type": "NamesAccepted", "status": "False", "reason": "NameConflict"}]}})
            ),
            Readiness::InProgress("not Established yet NameConflict".into())
        );
        assert_eq!(
            readiness("Namespace", &json!({"status": {"phase": "Active"}})),
            Readiness::Ready
        );
        assert_eq!(
            namespace(&json!({"status": {"phase": "Terminating"}})),
            Readiness::InProgress("phase is Terminating".into())
        );
        assert_eq!(
            readiness(
                "PersistentVolumeClaim",
                &json!({"status": {"phase": "Pending"}})
            ),
            Readiness::InProgress("phase is Pending, not Bound".into())
        );
        assert_eq!(
            pvc(&json!({"status": {"phase": "Lost"}})),
            Readiness::Failed("phase is Lost".into())
        );
        assert_eq!(
            pvc(&json!({"status": {"phase": "Bound"}})),
            Readiness::Ready
        );
    }
}
