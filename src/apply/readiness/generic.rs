//! Any kind the table does not know (custom resources above all), kstatus-like: ready once
//! applied, unless it reports a `status.observedGeneration` behind its generation, a
//! `Stalled=True` condition (fails), or `Ready=False` once its controller observed it.
//!
//! A `Ready=False` condition at the current generation whose reason is not a transient one
//! ([`TRANSIENT_REASONS`]: the controller is still working) is terminal: the wait ends at once
//! with the condition's reason and message (a Provider whose Secret is missing will not become
//! ready by waiting out `--timeout`).

use serde_json::Value;

use super::{condition, condition_status, condition_text, generation_behind, int, Readiness};

/// `Ready=False` reasons that say the controller is still working on it: waited for. Any other
/// reason at the current generation fails the wait at once. (Flux's, Crossplane's, cert-manager's
/// and Cluster API's "in progress" reasons; an empty reason says nothing and is waited for too.)
pub const TRANSIENT_REASONS: &[&str] = &[
    "Progressing",
    "ProgressingWithRetry",
    "Reconciling",
    "ReconciliationInProgress",
    "DependencyNotReady",
    "DependenciesNotReady",
    "Pending",
    "Waiting",
    "Initializing",
    "Creating",
    "Updating",
    "Deleting",
    "Provisioning",
    "Installing",
    "Upgrading",
    "InProgress",
    "Unknown",
];

/// Is a `Ready=False` reason transient (waited for)?
pub fn transient(reason: &str) -> bool {
    reason.is_empty() || TRANSIENT_REASONS.contains(&reason)
}

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
    if condition_status(v, "Ready") != Some("False") {
        return Readiness::Ready;
    }
    // The condition's own observedGeneration, when it has one, says which spec it is about.
    let ready = condition(v, "Ready");
    let condition_generation = ready.and_then(|c| c.get("observedGeneration")?.as_i64());
    let generation = int(v, "/metadata/generation");
    if let (Some(seen), Some(generation)) = (condition_generation, generation) {
        if seen < generation {
            return Readiness::InProgress(format!(
                "Ready=False is about generation {seen}, behind generation {generation}"
            ));
        }
    }
    if !observed && condition_generation.is_none() {
        // Without an observed generation, `Ready=False` may be stale: not waited for.
        return Readiness::Ready;
    }
    let reason = ready
        .and_then(|c| c.get("reason"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let why = format!("Ready=False: {}", condition_text(v, "Ready"));
    if transient(reason) {
        Readiness::InProgress(why)
    } else {
        Readiness::Failed(why)
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

    #[test]
    fn a_terminal_ready_false_at_the_current_generation_fails_at_once() {
        let at = |generation: i64, observed: i64, reason: &str| {
            json!({"metadata": {"generation": generation}, "status": {"observedGeneration": observed,
                "conditions": [{"type": "Ready", "status": "False", "reason": reason,
                                "message": "secret 'slack-url' not found"}]}})
        };
        assert_eq!(
            conditions(&at(2, 2, "SecretNotFound")),
            Readiness::Failed("Ready=False: SecretNotFound: secret 'slack-url' not found".into())
        );
        // Transient reasons keep the wait going.
        for reason in ["Progressing", "Reconciling", "DependencyNotReady", ""] {
            assert!(
                matches!(conditions(&at(2, 2, reason)), Readiness::InProgress(_)),
                "{reason}"
            );
        }
        // A verdict about an older generation is not terminal: the controller has not seen
        // the new spec yet.
        assert!(matches!(
            conditions(&at(3, 2, "SecretNotFound")),
            Readiness::InProgress(_)
        ));
        let stale_condition = json!({"metadata": {"generation": 3}, "status": {
            "conditions": [{"type": "Ready", "status": "False", "reason": "SecretNotFound",
                            "observedGeneration": 2}]}});
        assert_eq!(
            conditions(&stale_condition),
            Readiness::InProgress("Ready=False is about generation 2, behind generation 3".into())
        );
        // The condition's own observedGeneration is enough to trust it.
        let current_condition = json!({"metadata": {"generation": 3}, "status": {
            "conditions": [{"type": "Ready", "status": "False", "reason": "InvalidSpec",
                            "observedGeneration": 3}]}});
        assert_eq!(
            conditions(&current_condition),
            Readiness::Failed("Ready=False: InvalidSpec".into())
        );
    }
}
