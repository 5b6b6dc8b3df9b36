//! The pass report of the sync root: its view of a change set, the objects applied early, what
//! a suspended root says, and the log line of a finished pass.

use crate::apply::changeset::{Action, ChangeSet};
use crate::daemon::status::{ChangeSummary, ObjectChange, PassReport};

/// The objects a pass applied ahead of its full render are its changes too: the full pass found
/// them unchanged, the report says `configured` (so `weft trigger --wait` and notifications show
/// what the push changed).
pub(super) fn count_early(report: &mut PassReport, early: Vec<crate::apply::changeset::Change>) {
    for c in early {
        let object = c.object.to_string();
        if report.changes.iter().any(|c| c.object == object) {
            continue;
        }
        report.summary.configured += 1;
        report.summary.unchanged = report.summary.unchanged.saturating_sub(1);
        let why = c.reason.unwrap_or_else(|| "changed".into());
        report.changes.push(ObjectChange {
            object,
            action: c.action.done().to_string(),
            reason: Some(format!("{why} (applied ahead of the full pass)")),
        });
    }
}

/// What a pass of a suspended root says.
pub(super) fn suspended_message(s: &crate::daemon::record::RootSuspension) -> String {
    let mut text = String::from("the root is suspended");
    if let Some(since) = &s.since {
        text.push_str(&format!(" since {since}"));
    }
    if let Some(m) = &s.message {
        text.push_str(&format!(" ({m})"));
    }
    text.push_str("; nothing was fetched, applied or pruned (resume with `weft resume`)");
    text
}

/// The log line of a finished pass.
pub(super) fn log_outcome(report: &PassReport) {
    let pass = report.pass;
    match &report.error {
        None => tracing::info!(
            pass,
            revision = report.revision.as_deref().unwrap_or("-"),
            head_unchanged = report.head_unchanged,
            created = report.summary.created,
            configured = report.summary.configured,
            pruned = report.summary.pruned,
            unchanged = report.summary.unchanged,
            seconds = report.duration_seconds,
            "pass succeeded"
        ),
        Some(e) => {
            tracing::warn!(pass, revision = report.revision.as_deref().unwrap_or("-"), error = %e, "pass failed")
        }
    }
}

/// The report's view of a change set.
pub fn fill_changes(report: &mut PassReport, changes: &ChangeSet) {
    let s = changes.summary();
    report.summary = summary_of(changes);
    debug_assert_eq!(report.summary.unchanged, s.unchanged as u64);
    report.changes = changes
        .entries
        .iter()
        .filter(|c| c.action != Action::Unchanged)
        .map(|c| ObjectChange {
            object: c.object.to_string(),
            action: c.action.done().to_string(),
            reason: c.reason.clone(),
        })
        .collect();
}

/// Counts per action of a change set.
pub fn summary_of(changes: &ChangeSet) -> ChangeSummary {
    let s = changes.summary();
    ChangeSummary {
        created: s.created as u64,
        configured: s.configured as u64,
        unchanged: s.unchanged as u64,
        pruned: s.deleted as u64,
        skipped: s.skipped as u64,
    }
}
