//! The verdict of a rolled-back agent update, which the WeaveCloud's reconcile keeps reporting
//! (see [`crate::daemon::state`] for who writes which status field). It lives in the
//! WeaveCloud's status only: a restart keeps it, and no copy in memory can disagree with it.

use crate::api::conditions::{Condition, ConditionStatus, READY};
use crate::api::weavecloud::WeaveCloudStatus;

/// The reason of `Ready=False` after an agent update was rolled back.
pub const REASON_ROLLED_BACK: &str = "AgentUpdateRolledBack";

/// The `Ready` condition a reconcile must keep instead of its own healthy one: after a rollback,
/// `Ready=False` ([`REASON_ROLLED_BACK`]) stays until an update succeeds or the spec changes (a
/// new generation: the user acted, e.g. changed the pin). `None`: use the reconcile's own.
pub fn held_rollback(
    status: &WeaveCloudStatus,
    generation: Option<i64>,
    computed: &Condition,
) -> Option<Condition> {
    if computed.status != ConditionStatus::True {
        return None;
    }
    status
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .filter(|c| {
            c.reason == REASON_ROLLED_BACK
                && c.status == ConditionStatus::False
                && c.observed_generation == generation
        })
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollback_holds_ready_false_until_an_update_or_a_spec_change() {
        let rolled_back = {
            let mut c = Condition::new(
                READY,
                ConditionStatus::False,
                REASON_ROLLED_BACK,
                "1.2.0 failed",
            );
            c.observed_generation = Some(3);
            c
        };
        let status = WeaveCloudStatus {
            conditions: vec![rolled_back.clone()],
            ..Default::default()
        };
        let healthy = Condition::new(READY, ConditionStatus::True, "Reconciled", "");
        assert_eq!(held_rollback(&status, Some(3), &healthy), Some(rolled_back));
        // The user changed the spec: the reconcile's own condition.
        assert_eq!(held_rollback(&status, Some(4), &healthy), None);
        // A reconcile that is itself not ready reports its own reason.
        let failing = Condition::new(READY, ConditionStatus::False, "TokenMissing", "");
        assert_eq!(held_rollback(&status, Some(3), &failing), None);
        // After a successful update the condition is no longer the rollback's.
        let updated = WeaveCloudStatus {
            conditions: vec![Condition::new(
                READY,
                ConditionStatus::True,
                "AgentsUpdated",
                "",
            )],
            ..Default::default()
        };
        assert_eq!(held_rollback(&updated, Some(3), &healthy), None);
    }
}
