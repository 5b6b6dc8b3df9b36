//! What a root says of the objects another Weft root holds (`apply::conflict`): a `Conflict`
//! condition on the Root (and, for the flag root, in the daemon's status), with a Warning event
//! when it changes (`status::publish`). The owner reports it on its side the same way; neither
//! pass stops at those objects.

use crate::api::conditions::{Condition, ConditionStatus};

/// The condition's type, and the reason of the condition and the event.
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

/// The conflicts of a pass: the objects held elsewhere (in its error: not applied) and those
/// held here but claimed by another root (applied), each with what is said of it.
pub fn of_pass(result: &crate::pass::PassResult) -> Conflicts {
    result
        .error
        .as_ref()
        .map(|e| e.conflicts())
        .unwrap_or_default()
        .into_iter()
        .chain(
            result
                .changes
                .conflicts
                .iter()
                .map(|(o, m)| (o, m.as_str())),
        )
        .map(|(o, m)| (o.to_string(), crate::api::redact::redact_url_passwords(m)))
        .collect()
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
