//! The events of the sync root's passes. Pure: the daemon hands in what a pass did.
//!
//! | when | reason | severity | commit status |
//! |---|---|---|---|
//! | a pass starts on a new revision | `Progressing` | info | pending |
//! | a pass of a new revision changed objects | `ReconciliationSucceeded` | info | success |
//! | a pass of a new revision changed nothing | (commit status only) | info | success |
//! | a pass failed (fetch, load, render, apply, prune, wait) | `ReconciliationFailed` | error | failure |
//! | a pass of an unchanged revision changed objects (drift) | `DriftCorrected` | info | — |
//!
//! A pass of an unchanged revision that changed nothing sends nothing.

use super::{CommitState, Event, EventSource, Severity};

/// The most changed objects listed in a message; the rest are counted.
pub const MAX_LISTED: usize = 20;

/// What one pass of the root did, as the notifications see it.
#[derive(Clone, Debug, Default)]
pub struct PassOutcome<'a> {
    /// The commit of the pass (for a failed load: the commit that failed to load).
    pub revision: Option<String>,
    /// A revision rendered for the first time (not the cached render of an unchanged head).
    pub new_revision: bool,
    /// Why it failed.
    pub error: Option<&'a str>,
    /// The pass was abandoned (the daemon is stopping) or did not run (the root is suspended):
    /// nothing is reported.
    pub abandoned: bool,
    /// `Kind/namespace/name action` of every object the pass changed.
    pub changes: Vec<String>,
}

/// The event of a pass that starts on a new revision.
pub fn started(root: &EventSource, revision: Option<&str>) -> Event {
    let message = match revision {
        Some(r) => format!("applying revision {r}"),
        None => "applying a new revision".to_string(),
    };
    Event::new(root.clone(), Severity::Info, "Progressing", message)
        .with_revision(revision)
        .with_commit_status(CommitState::Pending)
}

/// The events of a finished pass (none for an unchanged revision that changed nothing).
pub fn finished(root: &EventSource, pass: &PassOutcome<'_>) -> Vec<Event> {
    if pass.abandoned {
        return Vec::new();
    }
    if let Some(error) = pass.error {
        return vec![
            Event::new(root.clone(), Severity::Error, "ReconciliationFailed", error)
                .with_revision(pass.revision.as_deref())
                .with_commit_status(CommitState::Failure),
        ];
    }
    let listed = listing(&pass.changes);
    let revision = pass.revision.as_deref().unwrap_or("-");
    match (pass.new_revision, pass.changes.is_empty()) {
        (true, false) => vec![Event::new(
            root.clone(),
            Severity::Info,
            "ReconciliationSucceeded",
            format!("applied revision {revision}\n{listed}"),
        )
        .with_revision(pass.revision.as_deref())
        .with_commit_status(CommitState::Success)],
        (true, true) => {
            let mut e = Event::new(
                root.clone(),
                Severity::Info,
                "ReconciliationSucceeded",
                format!("applied revision {revision}: no changes"),
            )
            .with_revision(pass.revision.as_deref())
            .with_commit_status(CommitState::Success);
            e.status_only = true;
            vec![e]
        }
        (false, false) => vec![Event::new(
            root.clone(),
            Severity::Info,
            "DriftCorrected",
            format!("corrected drift at revision {revision}\n{listed}"),
        )
        .with_revision(pass.revision.as_deref())],
        (false, true) => Vec::new(),
    }
}

fn listing(changes: &[String]) -> String {
    let mut lines: Vec<&str> = changes
        .iter()
        .take(MAX_LISTED)
        .map(String::as_str)
        .collect();
    let more = changes.len().saturating_sub(MAX_LISTED);
    let extra = (more > 0).then(|| format!("… and {more} more"));
    if let Some(e) = &extra {
        lines.push(e);
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> EventSource {
        EventSource::root("weft-system", "weft")
    }

    #[test]
    fn a_new_revision_is_pending_then_success_with_its_changes() {
        let s = started(&root(), Some("abc1234"));
        assert_eq!(s.commit_status, Some(CommitState::Pending));
        assert_eq!(s.severity, Severity::Info);
        let done = finished(
            &root(),
            &PassOutcome {
                revision: Some("abc1234".into()),
                new_revision: true,
                changes: vec!["ConfigMap/ns/a created".into()],
                ..Default::default()
            },
        );
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].reason, "ReconciliationSucceeded");
        assert_eq!(done[0].commit_status, Some(CommitState::Success));
        assert!(done[0].message.contains("ConfigMap/ns/a created"));
        assert!(!done[0].status_only);
    }

    #[test]
    fn a_new_revision_without_changes_sets_only_the_commit_status() {
        let done = finished(
            &root(),
            &PassOutcome {
                revision: Some("abc1234".into()),
                new_revision: true,
                ..Default::default()
            },
        );
        assert_eq!(done.len(), 1);
        assert!(done[0].status_only);
        assert_eq!(done[0].commit_status, Some(CommitState::Success));
    }

    #[test]
    fn an_unchanged_pass_sends_nothing_and_drift_is_reported() {
        let quiet = PassOutcome {
            revision: Some("abc1234".into()),
            ..Default::default()
        };
        assert!(finished(&root(), &quiet).is_empty());
        let changes: Vec<String> = (0..25)
            .map(|n| format!("ConfigMap/ns/c{n} configured"))
            .collect();
        let drift = PassOutcome {
            changes,
            ..quiet.clone()
        };
        let e = &finished(&root(), &drift)[0];
        assert_eq!(e.reason, "DriftCorrected");
        assert_eq!(e.commit_status, None);
        assert!(e.message.ends_with("… and 5 more"), "{}", e.message);
        let abandoned = PassOutcome {
            abandoned: true,
            error: Some("stopping"),
            ..quiet
        };
        assert!(finished(&root(), &abandoned).is_empty());
    }

    #[test]
    fn a_failed_pass_is_an_error_with_a_failure_status() {
        let e = &finished(
            &root(),
            &PassOutcome {
                revision: Some("abc1234".into()),
                new_revision: true,
                error: Some("apps/bad.yaml:3:7: mapping values are not allowed here"),
                ..Default::default()
            },
        )[0];
        assert_eq!(e.severity, Severity::Error);
        assert_eq!(e.reason, "ReconciliationFailed");
        assert_eq!(e.commit_status, Some(CommitState::Failure));
        assert!(e.message.contains("apps/bad.yaml:3"));
    }
}
