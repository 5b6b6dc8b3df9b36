//! Status conditions shared by every Weft custom resource (`Ready`, `Reconciling`, `Stalled`,
//! `Drifted`), shaped like `metav1.Condition` so `kubectl wait --for=condition=Ready` works.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition type: the resource's children are applied and healthy.
pub const READY: &str = "Ready";
/// Condition type: a reconcile is in progress.
pub const RECONCILING: &str = "Reconciling";
/// Condition type: reconciling cannot make progress without a change from the user.
pub const STALLED: &str = "Stalled";
/// Condition type: live children differ from the desired state (drift policy `report`).
pub const DRIFTED: &str = "Drifted";

/// One status condition, as `metav1.Condition`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// One CamelCase word saying why, e.g. `TokenMissing`.
    pub reason: String,
    /// Human-readable detail.
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The `metadata.generation` this condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The status of a condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

impl std::fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        })
    }
}

impl Condition {
    /// A condition with the given type, status, reason and message, and no timestamps yet.
    pub fn new(
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message: message.into(),
            last_transition_time: None,
            observed_generation: None,
        }
    }
}

/// Insert or replace `new` in `conditions` by type (its message with URL passwords redacted and
/// bounded, [`super::bounded::message`]), keeping the old transition time when the
/// status did not change (as `meta.SetStatusCondition` does), and stamping `now` otherwise.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition, now: &str) {
    // A condition is read by anyone who may read the resource: no password of a URL in it, and
    // no more of someone else's text than a person reads (a 16 MiB chart error made the status
    // write itself fail, 413, so that nobody saw it).
    new.message = super::bounded::message(&new.message);
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            new.last_transition_time = if old.status == new.status {
                old.last_transition_time.clone()
            } else {
                Some(now.to_string())
            };
            *old = new;
        }
        None => {
            new.last_transition_time = Some(now.to_string());
            conditions.push(new);
        }
    }
}

/// Now, as RFC 3339 UTC with seconds precision (the format of every time Weft shows, and of a
/// condition's `lastTransitionTime`).
pub fn now_rfc3339() -> String {
    format!("{:.0}", k8s_openapi::jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_changes_only_with_status() {
        let mut conds = Vec::new();
        set_condition(
            &mut conds,
            Condition::new(READY, ConditionStatus::False, "A", ""),
            "t1",
        );
        set_condition(
            &mut conds,
            Condition::new(READY, ConditionStatus::False, "B", "m"),
            "t2",
        );
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].reason, "B");
        assert_eq!(conds[0].last_transition_time.as_deref(), Some("t1"));
        set_condition(
            &mut conds,
            Condition::new(READY, ConditionStatus::True, "C", ""),
            "t3",
        );
        assert_eq!(conds[0].last_transition_time.as_deref(), Some("t3"));
    }
}
