//! Any kind the table does not know (custom resources above all), kstatus-like: ready once
//! applied, unless it reports a `status.observedGeneration` behind its generation, a
//! `Stalled=True` condition (fails), or `Ready=False` once its controller observed it.

use serde_json::Value;

use super::{condition_status, condition_text, generation_behind, Readiness};

/// The readiness of an object of a kind without a rule of its own.
pub fn conditions(v: &Value) -> Readiness {
    let observed = v.pointer("/status/observedGeneration").is_some();
    if observed {
        if let Some((observed, generation)) = generation_behind(v) {
            return Readiness::InProgress(format!(
                "observed generation {observed} is behind generation {generation}"
            ));
        }
    }
    if condition_status(v, "Stalled") == Some("True") {
        return Readiness::Failed(format!("Stalled: {}", condition_text(v, "Stalled")));
    }
    match condition_status(v, "Ready") {
        Some("False") if observed => {
            Readiness::InProgress(format!("Ready=False: {}", condition_text(v, "Ready")))
        }
        _ => Readiness::Ready,
    }
}

#[cfg(test)]
mod tests {
    use super::super::readiness;
    use super::*;
    use serde_json::json;

    #[test]
    fn other_kinds_are_ready_once_applied_unless_they_say_otherwise() {
        assert_eq!(readiness("Widget", &json!({"spec": {}})), Readiness::Ready);
        let stalled = json!({"status": {"conditions": [{"type": "Stalled", "status": "True", "reason": "Bad"}]}});
        assert_eq!(
            readiness("Widget", &stalled),
            Readiness::Failed("Stalled: Bad".into())
        );
        let not_ready = json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "False", "reason": "Waiting", "message": "for a volume"}]}});
        assert_eq!(
            conditions(&not_ready),
            Readiness::InProgress("Ready=False: Waiting: for a volume".into())
        );
        let behind = json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}});
        assert_eq!(
            conditions(&behind),
            Readiness::InProgress("observed generation 2 is behind generation 3".into())
        );
        // Without observedGeneration, `Ready=False` may be stale: not waited for.
        let unobserved = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        assert_eq!(conditions(&unobserved), Readiness::Ready);
    }
}
