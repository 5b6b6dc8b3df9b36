//! The flag root's Root answers what the flag loop answered (`weft run --root-object`, issue 41
//! item 2). A request on the daemon's queue — `POST /api/v1/sync` without `?root=` (with
//! `?wait=true` too), a webhook, `weft trigger --sync-token-file` — is handed to the Root with
//! the queue's pass number (the Root is woken: no write to it); the Root's next pass, which
//! starts after the request, answers it with a pass report like the flag loop's
//! (`TriggerQueue::finish`), and `GET /api/v1/status` shows the Root's last pass, revision and
//! next poll. A reconcile that passes nothing (the Root suspended, refused, waiting for its
//! dependencies) answers with why, so a waiting caller is not left to time out.
//!
//! The Root is passed by the replica that holds its Lease; the queue is the leader's. A request
//! is answered when the two are one replica (one `weft run`, the default); when another replica
//! holds the flag root's Lease, `?wait=true` times out (504) as before: ask that Root with
//! `weft trigger root NAME --wait`, which watches its status.

use std::time::Duration;

use super::status::PassOutcome;
use crate::api::ResourceKey;
use crate::apply::changeset::ChangeSet;
use crate::daemon::root::{fill_changes, summary_of};
use crate::daemon::state::DaemonState;
use crate::daemon::status::{ChangeSummary, ObjectChange, PassReport, PassResultKind};

/// What a pass changed, as its report shows it.
pub type Changes = (ChangeSummary, Vec<ObjectChange>);

/// How long a request waits for the Root controller to know the flag root's Root (at the start
/// of a term its cache may still be filling) before it is answered with why it cannot pass.
const KNOWN_WITHIN: Duration = Duration::from_secs(10);

/// While the flag root is a Root object: hand each pass the daemon's queue is asked for to the
/// Root (see the module). Ends when the queue closes.
pub async fn forward_requests(state: DaemonState, key: ResourceKey) {
    while let Some(ticket) = state.queue().next_pass().await {
        let started = tokio::time::Instant::now();
        let mut woken = state.root_pushes().wake_ticket(&key, ticket.pass);
        while !woken && started.elapsed() < KNOWN_WITHIN {
            tokio::time::sleep(Duration::from_millis(200)).await;
            woken = state.root_pushes().wake_ticket(&key, ticket.pass);
        }
        tracing::debug!(root = %key, pass = ticket.pass, woken, "request for the flag root handed to its Root object");
        if !woken {
            // Nobody will pass it: say so now rather than let `?wait=true` time out.
            state.root_pushes().take_ticket(&key);
            let message = format!(
                "the Root {key} is not known to the Root controller (is it deleted, or is the Root CRD not served?); nothing was applied"
            );
            finish(
                &state,
                ticket.pass,
                not_passed(PassResultKind::Failed, message),
            );
        }
    }
}

/// The changes of a pass, as its report shows them.
pub fn changes_of(set: &ChangeSet) -> Changes {
    let mut report = not_passed(PassResultKind::Succeeded, String::new());
    fill_changes(&mut report, set);
    (summary_of(set), report.changes)
}

/// The flag root's Root passed: its report answers the queue's pass `ticket` (if one was
/// asked for), and the daemon's status shows it.
pub fn passed(state: &DaemonState, ticket: Option<u64>, outcome: &PassOutcome, changes: Changes) {
    let s = &outcome.summary;
    let (summary, changes) = changes;
    let report = PassReport {
        pass: ticket.unwrap_or_else(|| last_pass(state)),
        reasons: s.reasons.clone(),
        started_at: s.started_at.clone(),
        duration_seconds: s.duration_ms as f64 / 1000.0,
        revision: outcome.revision.clone(),
        result: match outcome.failure {
            None => PassResultKind::Succeeded,
            Some(ref f) if f.reason == "Abandoned" => PassResultKind::Abandoned,
            Some(_) => PassResultKind::Failed,
        },
        error: outcome.failure.as_ref().map(|f| f.message.clone()),
        head_unchanged: false,
        summary,
        changes,
        changes_omitted: 0,
    };
    // `weft_pass_*`, as the flag loop's passes (the Root's own metrics are kind `Root`'s).
    state.metrics().observe_pass(&report);
    let report = report.bounded();
    let next = outcome.next_poll_at.clone();
    state.update_status(|st| {
        if report.succeeded() {
            st.revision = report.revision.clone().or(st.revision.take());
            st.last_success_at = Some(crate::daemon::status::now_rfc3339());
        }
        st.last_pass = Some(report.clone());
        st.next_poll_at = Some(next);
        st.suspension = Default::default();
    });
    if let Some(pass) = ticket {
        finish(state, pass, report);
    }
}

/// A reconcile of the flag root's Root that passed nothing: a waiting request is answered with
/// `message` (`suspended`: the Root is suspended, as the flag loop answers a suspended root).
pub fn not_run(state: &DaemonState, key: &ResourceKey, suspended: bool, message: &str) {
    state.update_status(|st| {
        st.suspension.suspended = suspended;
    });
    let Some(pass) = state.root_pushes().take_ticket(key) else {
        return;
    };
    let kind = match suspended {
        true => PassResultKind::Suspended,
        false => PassResultKind::Failed,
    };
    finish(state, pass, not_passed(kind, message.to_string()));
}

fn finish(state: &DaemonState, pass: u64, mut report: PassReport) {
    report.pass = pass;
    state.queue().finish(pass, report);
}

/// The number of the queue's last answered pass (a pass nobody asked for shows it in the
/// status).
fn last_pass(state: &DaemonState) -> u64 {
    state.queue().last().map_or(0, |(n, _)| n)
}

/// The report of a pass that did not run.
fn not_passed(result: PassResultKind, error: String) -> PassReport {
    PassReport {
        pass: 0,
        reasons: Vec::new(),
        started_at: crate::daemon::status::now_rfc3339(),
        duration_seconds: 0.0,
        revision: None,
        result,
        error: (!error.is_empty()).then_some(error),
        head_unchanged: false,
        summary: ChangeSummary::default(),
        changes: Vec::new(),
        changes_omitted: 0,
    }
}
