//! A pass stopped by a conflict with another Weft root (`apply::conflict`), reported on this
//! root: the root record's reason `Conflict` (so `weft get root` says it), a `Conflict` condition
//! in the daemon's status, and a Warning event `Conflict` on the root record, through the one
//! event publisher. The other root reports it on its side the same way (its pass fails too).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::super::events::Note;
use super::super::record;
use super::super::state::DaemonState;
use crate::api::conditions::{Condition, ConditionStatus};

/// The record's reason, the condition's type and the event's reason.
pub const CONFLICT: &str = "Conflict";

/// The objects of a pass in conflict with another root, each with what it says.
pub type Conflicts = Vec<(String, String)>;

/// What is said of `conflicts`: how many, and each object with its message (at most 5).
pub fn summary(conflicts: &Conflicts) -> String {
    const SHOWN: usize = 5;
    let mut lines: Vec<String> = conflicts
        .iter()
        .take(SHOWN)
        .map(|(object, message)| format!("{object}: {message}"))
        .collect();
    if conflicts.len() > SHOWN {
        lines.push(format!("and {} more", conflicts.len() - SHOWN));
    }
    format!(
        "{} object(s) in conflict with another Weft root: {}",
        conflicts.len(),
        lines.join("; ")
    )
}

/// The `Conflict` condition of the daemon's status after a pass that found `conflicts`.
pub fn condition(conflicts: &Conflicts) -> Condition {
    if conflicts.is_empty() {
        Condition::new(
            CONFLICT,
            ConditionStatus::False,
            "NoConflict",
            "no object is in conflict with another Weft root",
        )
    } else {
        Condition::new(
            CONFLICT,
            ConditionStatus::True,
            CONFLICT,
            summary(conflicts),
        )
    }
}

/// A Warning event `Conflict` on the root record `weft-root-<root>` (it exists: the pass's
/// outcome was just written to it). An event series is kept per reason, so a conflict that
/// lasts counts up instead of piling up events.
pub async fn publish(
    state: &DaemonState,
    weft_namespace: &str,
    root_name: &str,
    conflicts: &Conflicts,
) {
    let api: Api<ConfigMap> = Api::namespaced(state.client().clone(), weft_namespace);
    let name = record::record_name(root_name);
    match api.get_opt(&name).await {
        Ok(Some(record)) => {
            let text = summary(conflicts);
            let note = Note {
                warning: true,
                reason: CONFLICT,
                action: "Reconcile",
                text: &text,
                related: None,
            };
            state.events().publish(&record, note).await;
        }
        Ok(None) => tracing::warn!(record = %name, "no root record to report the conflict on"),
        Err(e) => {
            tracing::warn!(record = %name, error = %crate::api::kube_error::Text(&e), "cannot read the root record to report the conflict on")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_the_objects_and_stays_short() {
        let conflicts: Conflicts = (0..7)
            .map(|i| {
                (
                    format!("ConfigMap/x/cm-{i}"),
                    "owned by another Weft root, root/x/a".to_string(),
                )
            })
            .collect();
        let text = summary(&conflicts);
        assert!(
            text.starts_with("7 object(s) in conflict with another Weft root"),
            "{text}"
        );
        assert!(
            text.contains("ConfigMap/x/cm-4: owned by another Weft root, root/x/a"),
            "{text}"
        );
        assert!(!text.contains("cm-5"), "{text}");
        assert!(text.ends_with("; and 2 more"), "{text}");
        assert_eq!(condition(&conflicts).status, ConditionStatus::True);
        assert_eq!(condition(&Vec::new()).status, ConditionStatus::False);
    }
}
