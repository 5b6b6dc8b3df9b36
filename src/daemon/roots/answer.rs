//! The flag root's Root answers what the flag loop answered (issue 41 item 2). A request that
//! names no Root — `POST /api/v1/sync` without `?root=` (with `?wait=true` too), a push webhook,
//! a chart's drift — goes straight to the Root controller's intake
//! ([`RootPushes::request`](super::pushes::RootPushes::request)): it gets the number of the
//! Root's next pass and wakes the Root (no write to it). That pass, which starts after the
//! request, answers it with a pass report like the flag loop's (published on
//! [`FlagRequests`](super::pushes::FlagRequests)), and `GET /api/v1/status` shows the Root's
//! last pass, revision and next poll. A reconcile that passes nothing (the Root suspended,
//! refused, waiting for its dependencies) answers with why, so a waiting caller is not left to
//! time out. Requests that arrive while a pass runs are answered by the next one.
//!
//! The Root is passed by the replica that holds its Lease; requests reach the leader. When the
//! leader holds it too (one `weft run`, the default) the request wakes the local controller and
//! the pass answers with what it changed. When it does not (another replica holds the Lease, or
//! nobody yet), the leader asks the Root itself, as `weft trigger --wait` does: it sets
//! `weft.io/requested-at` and watches the Root's status until a pass answers that value
//! (`lastHandledRequestedAt`), whichever replica ran it; the answer is the pass's result,
//! revision and error from that status (the per-object changes stay on the replica that
//! passed: its log and events).

use std::time::Duration;

use super::conflict::{self, CONFLICT};
use super::pushes::{HandOver, RequestError, RequestReason};
use super::requests;
use super::status::PassOutcome;
use crate::api::conditions::set_condition;
use crate::api::ResourceKey;
use crate::apply::changeset::Action;
use crate::apply::changeset::ChangeSet;
use crate::daemon::state::DaemonState;
use crate::daemon::status::{ChangeSummary, ObjectChange, PassFailure, PassReport, PassResultKind};

/// What a pass changed, as its report shows it.
pub type Changes = (ChangeSummary, Vec<ObjectChange>);

/// How long a request waits for the Root controller to know the flag root's Root (at the start
/// of a term its cache may still be filling) before it is answered with why it cannot pass.
const KNOWN_WITHIN: Duration = Duration::from_secs(10);

/// Ask for a pass of the flag root's Root (see the module): the number of the pass that will
/// answer it ([`FlagRequests::wait`](super::pushes::FlagRequests::wait)), or `Closed` while no
/// term takes work.
pub fn request(state: &DaemonState, why: &RequestReason) -> Result<u64, RequestError> {
    let (pass, hand_over) = state.root_pushes().request(why)?;
    match hand_over {
        HandOver::None => {}
        HandOver::Elsewhere(key) => {
            tokio::spawn(through_the_root(state.clone(), key));
        }
        HandOver::Unknown(key) => {
            tokio::spawn(when_known(state.clone(), key));
        }
    }
    Ok(pass)
}

/// The controller does not know the flag root's Root yet: wake it once it does (or ask another
/// replica's through the API server); after [`KNOWN_WITHIN`], answer the waiting request with
/// why nothing will pass it rather than let `?wait=true` time out.
async fn when_known(state: DaemonState, key: ResourceKey) {
    let pushes = state.root_pushes();
    let started = tokio::time::Instant::now();
    while started.elapsed() < KNOWN_WITHIN {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if pushes.held_elsewhere(&key) {
            return through_the_root(state, key).await;
        }
        if pushes.wake_for(&key, &[]) {
            tracing::debug!(root = %key, "request for the flag root handed to its Root object");
            pushes.flag().handed();
            // A request that found the Root unknown while this one was being handed over
            // joined it: this wake-up is its too.
            pushes.wake_for(&key, &[]);
            return;
        }
    }
    if let Some(pass) = pushes.flag().start_if_asked() {
        let message = format!(
            "the Root {key} is not known to the Root controller (is it deleted, or is the Root CRD not served?); nothing was applied"
        );
        pushes
            .flag()
            .answer(pass, not_passed(PassResultKind::Failed, message));
    }
}

/// How many Roots held elsewhere are asked for a pass at once.
const ASKED_AT_ONCE: usize = 8;

/// Ask the Roots `keys`, which another replica holds (or nobody yet), for a pass through the API
/// server (`weft.io/requested-at`, which the holder's watch sees): what a push webhook does for
/// the roots of its repository that this replica does not pass. A few at a time, in the
/// background; a root that cannot be asked is logged and passes at its next poll.
pub fn ask_through_the_roots(state: &DaemonState, keys: Vec<ResourceKey>, why: &'static str) {
    if keys.is_empty() {
        return;
    }
    let client = state.client().clone();
    tokio::spawn(async move {
        use futures::StreamExt;
        futures::stream::iter(keys)
            .for_each_concurrent(ASKED_AT_ONCE, |key| {
                let client = client.clone();
                async move {
                    match requests::request(&client, &key.namespace, &key.name).await {
                        Ok(at) => tracing::debug!(root = %key, requested_at = %at, "{why} handed to the replica holding the root"),
                        Err(e) => tracing::warn!(root = %key, "a {why} could not be handed to the replica holding the root ({e}); it passes at its next poll, or run `weft trigger root {} -n {}`", key.name, key.namespace),
                    }
                }
            })
            .await;
    });
}

/// How long past the Root's own `spec.timeout` a request waits for its pass to be answered
/// (the Lease of a dead holder moves within one lease duration first).
const ANSWER_SLACK: Duration = Duration::from_secs(120);

/// Ask the flag root's Root for a pass through the API server (`weft.io/requested-at`) and
/// answer the waiting requests with the report of the pass its status says answered it.
async fn through_the_root(state: DaemonState, key: ResourceKey) {
    // The pass "starts" as the request is written: a request made from now on asks again.
    let pass = state.root_pushes().flag().start();
    let mut report = answered_through_the_root(&state, &key).await;
    report.pass = pass;
    tracing::debug!(root = %key, pass, succeeded = report.succeeded(), "request for the flag root answered through its Root object's status");
    shown(&state, &report);
    state.root_pushes().flag().answer(pass, report);
}

/// The report of a pass of `key` asked through the API server, as far as its status says it.
async fn answered_through_the_root(state: &DaemonState, key: &ResourceKey) -> PassReport {
    let client = state.client();
    let (ns, name) = (key.namespace.as_str(), key.name.as_str());
    let failed = |message: String| not_passed(PassResultKind::Failed, message);
    let timeout = match requests::get(client, ns, name).await {
        Ok(root) => root.spec.timeout() + ANSWER_SLACK,
        Err(e) => return failed(format!("{e}; nothing was applied")),
    };
    let at = match requests::request(client, ns, name).await {
        Ok(at) => at,
        Err(e) => return failed(format!("{e}; nothing was applied")),
    };
    match requests::wait_answer(client, ns, name, &at, timeout).await {
        Ok(Some(answer)) => report_of(&answer),
        Ok(None) => failed(format!(
            "no replica answered the request for a pass of the Root {key} within {}s (the replica holding its Lease may be down: it moves within one lease duration); see `kubectl get root {name} -n {ns}` and try again",
            timeout.as_secs()
        )),
        Err(e) => failed(e.to_string()),
    }
}

/// The report of the pass that answered a request, from the Root's status (no per-object
/// changes: the status keeps counts of the inventory only).
fn report_of(answer: &requests::Answer) -> PassReport {
    if answer.root.spec.suspend {
        let message = crate::api::suspend::message(&answer.root.metadata);
        return not_passed(
            PassResultKind::Suspended,
            crate::api::suspend::root_refusal(message),
        );
    }
    let status = answer.root.status.clone().unwrap_or_default();
    let Some(last) = status.passes.first() else {
        return not_passed(PassResultKind::Failed, answer.line.clone());
    };
    let result = match last.result.as_str() {
        "Succeeded" => PassResultKind::Succeeded,
        "Abandoned" => PassResultKind::Abandoned,
        _ => PassResultKind::Failed,
    };
    // The stage, as the Root's `Ready` condition names it; the line is the answer's.
    let stage = super::status::ready_of(&status)
        .map_or(crate::daemon::status::UNKNOWN_STAGE, |c| c.reason.as_str());
    PassReport {
        pass: 0,
        reasons: last.reasons.clone(),
        started_at: last.started_at.clone(),
        duration_seconds: last.duration_ms as f64 / 1000.0,
        revision: last.revision.clone(),
        error: (result != PassResultKind::Succeeded)
            .then(|| PassFailure::new(stage, answer.line.clone())),
        result,
        head_unchanged: false,
        summary: ChangeSummary::default(),
        changes: Vec::new(),
        changes_omitted: 0,
    }
}

/// The daemon's status shows a pass another replica ran (its metrics are that replica's).
fn shown(state: &DaemonState, report: &PassReport) {
    state.update_status(|st| {
        st.suspension.suspended = report.result == PassResultKind::Suspended;
        if report.result == PassResultKind::Suspended {
            return;
        }
        if report.succeeded() {
            st.revision = report.revision.clone().or(st.revision.take());
            st.last_success_at = Some(crate::daemon::status::now_rfc3339());
        }
        st.last_pass = Some(report.clone());
    });
}

/// The changes of a pass, as its report shows them.
pub fn changes_of(set: &ChangeSet) -> Changes {
    let mut report = not_passed(PassResultKind::Succeeded, String::new());
    fill_changes(&mut report, set);
    (summary_of(set), report.changes)
}

/// The flag root's Root passed: its report (numbered `pass` as it started) answers the requests
/// made before it started, and the daemon's status shows it.
pub fn passed(state: &DaemonState, pass: u64, outcome: &PassOutcome, changes: Changes) {
    let s = &outcome.summary;
    let (summary, changes) = changes;
    let report = PassReport {
        pass,
        reasons: s.reasons.clone(),
        started_at: s.started_at.clone(),
        duration_seconds: s.duration_ms as f64 / 1000.0,
        revision: outcome.revision.clone(),
        result: match outcome.failure {
            None => PassResultKind::Succeeded,
            Some(ref f) if f.reason == "Abandoned" => PassResultKind::Abandoned,
            Some(_) => PassResultKind::Failed,
        },
        error: outcome.failure.clone(),
        head_unchanged: false,
        summary,
        changes,
        changes_omitted: 0,
    };
    // `weft_pass_*`, as the flag loop's passes (the Root's own metrics are kind `Root`'s).
    state.metrics().observe_pass(&report);
    let report = report.bounded();
    let next = outcome.next_poll_at.clone();
    // A pass that rendered and applied says its conflicts with another root in the daemon's
    // `Conflict` condition, as the flag loop did: shown once there was one, False when resolved.
    let applied = outcome.inventory.is_some();
    let now = crate::daemon::status::now_rfc3339();
    state.update_status(|st| {
        if applied
            && (!outcome.conflicts.is_empty() || st.conditions.iter().any(|c| c.type_ == CONFLICT))
        {
            set_condition(
                &mut st.conditions,
                conflict::condition(&outcome.conflicts),
                &now,
            );
        }
        if report.succeeded() {
            st.revision = report.revision.clone().or(st.revision.take());
            st.last_success_at = Some(crate::daemon::status::now_rfc3339());
        }
        st.last_pass = Some(report.clone());
        st.next_poll_at = Some(next);
        st.suspension = Default::default();
    });
    state.root_pushes().flag().answer(pass, report);
}

/// The flag root's Root is suspended: the daemon's status says so, with why.
pub fn suspended(state: &DaemonState, message: Option<&str>) {
    let before = state.suspension().get();
    let since = match before.suspended && before.message.as_deref() == message {
        true => before.since,
        false => Some(crate::daemon::status::now_rfc3339()),
    };
    // The daemon's status and the controllers' view (a WeaveCloud or chart of a suspended root
    // is held, see `daemon::suspend::why_suspended`).
    state.set_suspension(crate::daemon::suspend::RootSuspension {
        suspended: true,
        message: message.map(str::to_string),
        since,
    });
}

/// The flag root's Root is not suspended (a reconcile that goes on to pass it): the controllers
/// take up what they held, once, when this resumes it.
pub fn not_suspended(state: &DaemonState) {
    if state.set_suspension(Default::default()) {
        tracing::info!(
            "the flag root was resumed; its WeaveClouds and charts are reconciled again"
        );
    }
}

/// A reconcile of the flag root's Root that passed nothing: a waiting request is answered with
/// `message` (`suspended`: the Root is suspended, as the flag loop answers a suspended root).
pub fn not_run(state: &DaemonState, suspended: bool, message: &str) {
    state.update_status(|st| {
        st.suspension.suspended = suspended;
    });
    let Some(pass) = state.root_pushes().flag().start_if_asked() else {
        return;
    };
    let kind = match suspended {
        true => PassResultKind::Suspended,
        false => PassResultKind::Failed,
    };
    state
        .root_pushes()
        .flag()
        .answer(pass, not_passed(kind, message.to_string()));
}

/// The report of a pass that did not run (`error`: why, empty for none).
fn not_passed(result: PassResultKind, error: String) -> PassReport {
    let stage = match result {
        PassResultKind::Suspended => super::status::SUSPENDED,
        PassResultKind::Abandoned => "Abandoned",
        PassResultKind::Succeeded | PassResultKind::Failed => super::status::FAILED,
    };
    PassReport {
        pass: 0,
        reasons: Vec::new(),
        started_at: crate::daemon::status::now_rfc3339(),
        duration_seconds: 0.0,
        revision: None,
        result,
        error: (!error.is_empty()).then(|| PassFailure::new(stage, error)),
        head_unchanged: false,
        summary: ChangeSummary::default(),
        changes: Vec::new(),
        changes_omitted: 0,
    }
}

/// The report's view of a change set.
fn fill_changes(report: &mut PassReport, changes: &ChangeSet) {
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
fn summary_of(changes: &ChangeSet) -> ChangeSummary {
    let s = changes.summary();
    ChangeSummary {
        created: s.created as u64,
        configured: s.configured as u64,
        unchanged: s.unchanged as u64,
        pruned: s.deleted as u64,
        skipped: s.skipped as u64,
    }
}
