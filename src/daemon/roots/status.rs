//! A root's status as a pure function of what its reconcile found ([`Verdict`]), and its write:
//! one merge patch of `status`, made only when the status changed, and an event when the verdict
//! is new or a pass changed something.

use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use super::conflict::{self, CONFLICT};
use super::RootsError;
use crate::api::conditions::{
    set_condition, Condition, ConditionStatus, READY, RECONCILING, STALLED,
};
use crate::api::root::{InventoryCounts, PassSummary, Root, RootStatus, MAX_PASSES};
use crate::daemon::events::Note;
use crate::daemon::metrics::ROOT_KIND;
use crate::daemon::state::DaemonState;
use crate::notify::Notifier;

/// `Ready` reason of a root whose last pass applied its revision in full.
pub const SUCCEEDED: &str = "ReconciliationSucceeded";
/// `Ready` reason of a root whose last pass failed.
pub const FAILED: &str = "ReconciliationFailed";
/// `Ready` reason of a root waiting for the roots it depends on.
pub const DEPENDENCY_NOT_READY: &str = "DependencyNotReady";
/// `Stalled` reason of a root whose `dependsOn` leads back to it.
pub const DEPENDENCY_CYCLE: &str = "DependencyCycle";
/// The reason of a suspended root.
pub const SUSPENDED: &str = "Suspended";
/// The `Ready` reason of the root `weft run --repo` flags drive.
pub const FLAG_ROOT: &str = "FlagRoot";

/// What one reconcile of a root found.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// `spec.suspend`: no pass, `Ready` as it was.
    Suspended,
    /// It cannot run until its spec changes.
    Stalled { reason: String, message: String },
    /// A root it depends on is not Ready at its current revision.
    Waiting { message: String },
    /// A pass ran.
    Passed(Box<PassOutcome>),
}

/// What a pass of a root ended with.
#[derive(Clone, Debug, PartialEq)]
pub struct PassOutcome {
    /// `None`: it succeeded.
    pub failure: Option<Failure>,
    /// The revision it applied or tried (`None` when the fetch failed before one was known).
    pub revision: Option<String>,
    /// The inventory's counts after it (`None`: unknown, the pass stopped before render).
    pub inventory: Option<InventoryCounts>,
    /// Its line in `status.passes`.
    pub summary: PassSummary,
    /// Objects it created, changed or deleted.
    pub changed: usize,
    /// The `weft.io/requested-at` value it answered.
    pub requested_at: Option<String>,
    /// When the next poll is due (RFC 3339).
    pub next_poll_at: String,
    /// Objects in conflict with another Weft root: each with what is said of it (those this
    /// root holds were applied; those another root holds were not).
    pub conflicts: Vec<(String, String)>,
    /// The first pass of the root by this replica (since it started, took the root's Lease or
    /// the root was resumed): written even when it found everything as the status says.
    pub first_here: bool,
}

impl PassOutcome {
    /// A pass that succeeded, changed no object and answered no `weft.io/requested-at`: when it
    /// leaves every other field of the status as it was, it is not written (see [`record`]).
    fn quiet(&self) -> bool {
        self.failure.is_none()
            && self.changed == 0
            && self.requested_at.is_none()
            && !self.first_here
    }
}

/// Whether the status `after` the verdict is written over `before`: when it changed, unless the
/// verdict is a quiet pass and only that pass's own record changed (its line in `passes` and
/// `nextPollAt`).
fn is_written(before: &RootStatus, after: &RootStatus, verdict: &Verdict) -> bool {
    if after == before {
        return false;
    }
    if !matches!(verdict, Verdict::Passed(p) if p.quiet()) {
        return true;
    }
    let mut same = after.clone();
    same.passes.clone_from(&before.passes);
    same.next_poll_at.clone_from(&before.next_poll_at);
    same != *before
}

/// Why a pass failed: the `Ready` reason and message (and the object, when one), as the
/// daemon's pass report keeps it.
pub use crate::daemon::status::PassFailure as Failure;

fn condition(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    Condition {
        observed_generation: generation,
        ..Condition::new(type_, status, reason, message)
    }
}

/// The status after `verdict`, from the status `before` (timestamps of unchanged conditions are
/// kept, so an unchanged verdict gives an equal status).
pub fn next_status(
    before: &RootStatus,
    generation: Option<i64>,
    verdict: &Verdict,
    now: &str,
) -> RootStatus {
    let mut s = before.clone();
    let set = |s: &mut RootStatus, type_: &str, status, reason: &str, message: &str| {
        set_condition(
            &mut s.conditions,
            condition(type_, status, reason, message, generation),
            now,
        )
    };
    let clear = |s: &mut RootStatus, type_: &str| s.conditions.retain(|c| c.type_ != type_);
    use ConditionStatus::{False, True};
    match verdict {
        Verdict::Suspended => {
            // `Ready` says what the last pass left; the reason says nothing runs now.
            set(
                &mut s,
                RECONCILING,
                False,
                SUSPENDED,
                "spec.suspend is true: nothing is fetched, applied or pruned until it is false",
            );
            clear(&mut s, STALLED);
        }
        Verdict::Stalled { reason, message } => {
            set(&mut s, READY, False, reason, message);
            set(&mut s, STALLED, True, reason, message);
            clear(&mut s, RECONCILING);
        }
        Verdict::Waiting { message } => {
            set(&mut s, READY, False, DEPENDENCY_NOT_READY, message);
            set(&mut s, RECONCILING, True, DEPENDENCY_NOT_READY, message);
            clear(&mut s, STALLED);
        }
        Verdict::Passed(p) => {
            match &p.failure {
                None => {
                    let message =
                        format!("applied revision {}", p.revision.as_deref().unwrap_or("-"));
                    set(&mut s, READY, True, SUCCEEDED, &message);
                    s.last_applied_revision.clone_from(&p.revision);
                }
                Some(f) => set(&mut s, READY, False, &f.reason, &f.message),
            }
            clear(&mut s, RECONCILING);
            clear(&mut s, STALLED);
            if p.revision.is_some() {
                s.last_attempted_revision.clone_from(&p.revision);
            }
            if p.inventory.is_some() {
                s.inventory.clone_from(&p.inventory);
            }
            if p.requested_at.is_some() {
                s.last_handled_requested_at.clone_from(&p.requested_at);
            }
            // Shown once there was a conflict, as on the flag root; it stops no pass.
            let had_conflict = s.conditions.iter().any(|c| c.type_ == CONFLICT);
            if !p.conflicts.is_empty() || had_conflict {
                let c = conflict::condition(&p.conflicts);
                set(&mut s, CONFLICT, c.status, &c.reason, &c.message);
            }
            // Only the newest pass names its changed objects: the status stays small.
            for older in &mut s.passes {
                older.changes.clear();
            }
            s.passes.insert(0, p.summary.clone());
            s.passes.truncate(MAX_PASSES);
            s.next_poll_at = Some(p.next_poll_at.clone());
        }
    }
    s.observed_generation = generation;
    s
}

/// The root's series of the per-resource metrics (kind `Root`, its namespace and name): `Ready`,
/// suspended, and the duration of a pass. The flag root's are the root loop's.
fn observe(
    state: &DaemonState,
    root: &Root,
    namespace: &str,
    verdict: &Verdict,
    after: &RootStatus,
) {
    let metrics = state.metrics().resources();
    let name = root.name_any();
    let ready = ready_of(after).map_or(ConditionStatus::Unknown, |c| c.status);
    metrics.set_ready(ROOT_KIND, namespace, &name, ready);
    metrics.set_suspended(ROOT_KIND, namespace, &name, root.spec.suspend);
    if let Verdict::Passed(p) = verdict {
        metrics.observe(
            ROOT_KIND,
            namespace,
            &name,
            p.summary.duration_ms as f64 / 1000.0,
        );
    }
}

/// The `Ready` condition of a status.
pub fn ready_of(status: &RootStatus) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == READY)
}

/// Write `verdict` into `root`'s status when it changes it, and publish an event when the
/// `Ready` verdict is new or a pass changed objects. Returns the status written (or kept).
///
/// A quiet pass ([`PassOutcome::quiet`]) that would change nothing but its own line in
/// `passes` and `nextPollAt` is not written, as Flux's Kustomization writes nothing on a
/// reconcile that finds nothing to do: a no-op pass makes no write at all (issue 47). The
/// daemon keeps it (`/api/v1/status`, metrics, the log).
pub async fn record(
    state: &DaemonState,
    held: &super::lease::HeldRoot,
    root: &Root,
    verdict: &Verdict,
) -> Result<RootStatus, RootsError> {
    let before = root.status.clone().unwrap_or_default();
    let now = crate::daemon::status::now_rfc3339();
    let after = next_status(&before, root.metadata.generation, verdict, &now);
    let namespace = root.namespace().unwrap_or_default();
    observe(state, root, &namespace, verdict, &after);
    if !is_written(&before, &after, verdict) {
        return Ok(before);
    }
    // Behind the root's own fence: a replica that lost the root's Lease writes no status.
    let api: Api<Root> = Api::namespaced(held.client.clone(), &namespace);
    api.patch_status(
        &root.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": after })),
    )
    .await
    .map_err(|source| RootsError::Kube {
        root: format!("{namespace}/{}", root.name_any()),
        action: "writing its status",
        source,
    })?;
    let was = ready_of(&before).map(|c| (c.status, c.reason.clone(), c.message.clone()));
    let is = ready_of(&after).map(|c| (c.status, c.reason.clone(), c.message.clone()));
    let conflict_of = |s: &RootStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CONFLICT)
            .map(|c| (c.status, c.message.clone()))
    };
    let conflict_now = after.conditions.iter().find(|c| c.type_ == CONFLICT);
    if let (Some(c), true) = (conflict_now, conflict_of(&before) != conflict_of(&after)) {
        let note = Note {
            warning: c.status == ConditionStatus::True,
            reason: &c.reason,
            action: "Reconcile",
            text: &c.message,
            related: None,
        };
        held.events.publish(root, note).await;
    }
    let changed = matches!(verdict, Verdict::Passed(p) if p.changed > 0);
    if let (Some(ready), true) = (ready_of(&after), was != is || changed) {
        let text = match verdict {
            Verdict::Passed(p) if p.changed > 0 && p.failure.is_none() => {
                format!("{}: {} objects changed", ready.message, p.changed)
            }
            _ => ready.message.clone(),
        };
        let note = Note {
            warning: ready.status == ConditionStatus::False,
            reason: &ready.reason,
            action: "Reconcile",
            text: &text,
            related: None,
        };
        // A pass sends its own notifications (`notify::root`: the revision, its commit status,
        // the changed objects), as the flag loop did; its `Ready` event is only the event.
        match verdict {
            Verdict::Passed(_) => {
                let quiet = held.events.clone().with_notifier(Notifier::disabled());
                quiet.publish(root, note).await;
            }
            _ => held.events.publish(root, note).await,
        }
    }
    Ok(after)
}

/// The inventory counts of a rendered set: the root's own objects, and the children of the
/// resources it applies (their controllers' objects).
pub fn inventory_counts(set: &crate::render::DesiredSet) -> InventoryCounts {
    let own = set
        .objects()
        .iter()
        .filter(|o| o.owner.kind == crate::api::owner::OwnerKind::Root)
        .count();
    InventoryCounts {
        objects: own as u64,
        children: (set.objects().len() - own) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passed(failure: Option<Failure>, revision: &str, started: &str) -> Verdict {
        Verdict::Passed(Box::new(PassOutcome {
            failure,
            revision: Some(revision.into()),
            inventory: Some(InventoryCounts {
                objects: 3,
                children: 1,
            }),
            summary: PassSummary {
                reasons: vec!["poll".into()],
                started_at: started.into(),
                duration_ms: 10,
                result: "Succeeded".into(),
                revision: Some(revision.into()),
                changes: Vec::new(),
            },
            changed: 1,
            requested_at: None,
            next_poll_at: "2026-01-01T00:01:00Z".into(),
            conflicts: Vec::new(),
            first_here: false,
        }))
    }

    #[test]
    fn a_good_pass_makes_the_root_ready_at_its_revision() {
        let s = next_status(
            &RootStatus::default(),
            Some(2),
            &passed(None, "main@sha1:1", "t0"),
            "t0",
        );
        let ready = ready_of(&s).unwrap();
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::True, SUCCEEDED)
        );
        assert_eq!(ready.message, "applied revision main@sha1:1");
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(s.last_applied_revision.as_deref(), Some("main@sha1:1"));
        assert_eq!(s.last_attempted_revision.as_deref(), Some("main@sha1:1"));
        assert_eq!(s.inventory.as_ref().unwrap().objects, 3);
        assert_eq!(s.passes.len(), 1);
        assert_eq!(s.next_poll_at.as_deref(), Some("2026-01-01T00:01:00Z"));
    }

    #[test]
    fn a_failed_pass_keeps_the_applied_revision_and_names_the_attempted_one() {
        let good = good_at_r1();
        let failure = Failure::new(FAILED, "ConfigMap t/x: forbidden");
        let s = next_status(&good, Some(1), &passed(Some(failure), "r2", "t1"), "t1");
        assert_eq!(s.last_applied_revision.as_deref(), Some("r1"));
        assert_eq!(s.last_attempted_revision.as_deref(), Some("r2"));
        let ready = ready_of(&s).unwrap();
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::False, FAILED)
        );
        assert_eq!(s.passes[0].started_at, "t1");
    }

    /// The status after one good pass of revision `r1` (generation 1).
    fn good_at_r1() -> RootStatus {
        next_status(
            &RootStatus::default(),
            Some(1),
            &passed(None, "r1", "t0"),
            "t0",
        )
    }

    /// `passed` as a pass that changed nothing.
    fn quiet(revision: &str, started: &str) -> Verdict {
        let mut v = passed(None, revision, started);
        if let Verdict::Passed(p) = &mut v {
            p.changed = 0;
        }
        v
    }

    #[test]
    fn a_pass_that_finds_everything_as_recorded_is_not_written() {
        let good = good_at_r1();
        let noop = quiet("r1", "t1");
        let after = next_status(&good, Some(1), &noop, "t1");
        assert_eq!(after.passes[0].started_at, "t1");
        assert!(!is_written(&good, &after, &noop), "a no-op writes nothing");

        // Written: a new revision, a new generation, a request answered, objects changed, a
        // failure, this replica's first pass.
        let new_revision = quiet("r2", "t1");
        let after = next_status(&good, Some(1), &new_revision, "t1");
        assert!(is_written(&good, &after, &new_revision));
        let after = next_status(&good, Some(2), &noop, "t1");
        assert!(is_written(&good, &after, &noop));
        for change in [
            |p: &mut PassOutcome| p.requested_at = Some("now".into()),
            |p: &mut PassOutcome| p.changed = 1,
            |p: &mut PassOutcome| {
                p.failure = Some(Failure::new(FAILED, "ConfigMap t/x: forbidden"))
            },
            |p: &mut PassOutcome| p.first_here = true,
        ] {
            let mut v = quiet("r1", "t1");
            if let Verdict::Passed(p) = &mut v {
                change(p);
            }
            let after = next_status(&good, Some(1), &v, "t1");
            assert!(is_written(&good, &after, &v), "{v:?}");
        }
        // The same failure again: the pass is written (a failed pass is never quiet).
        let failed = |started: &str| {
            let f = Failure::new(FAILED, "ConfigMap t/x: forbidden");
            let mut v = passed(Some(f), "r1", started);
            if let Verdict::Passed(p) = &mut v {
                p.changed = 0;
            }
            v
        };
        let once = next_status(&good, Some(1), &failed("t1"), "t1");
        let twice = next_status(&once, Some(1), &failed("t2"), "t2");
        assert!(is_written(&once, &twice, &failed("t2")));
    }

    #[test]
    fn passes_keep_the_last_ten_newest_first() {
        let mut s = RootStatus::default();
        for i in 0..15 {
            s = next_status(&s, Some(1), &passed(None, "r", &format!("t{i}")), "now");
        }
        assert_eq!(s.passes.len(), MAX_PASSES);
        assert_eq!(s.passes[0].started_at, "t14");
        assert_eq!(s.passes[9].started_at, "t5");
    }

    #[test]
    fn an_unchanged_verdict_gives_an_equal_status() {
        let waiting = Verdict::Waiting {
            message: "waiting for root a: does not exist".into(),
        };
        let once = next_status(&RootStatus::default(), Some(1), &waiting, "t0");
        let twice = next_status(&once, Some(1), &waiting, "t1");
        assert_eq!(once, twice);
    }

    #[test]
    fn suspend_leaves_ready_as_it_was() {
        let good = good_at_r1();
        let s = next_status(&good, Some(2), &Verdict::Suspended, "t1");
        assert_eq!(ready_of(&s), ready_of(&good));
        let reconciling = s
            .conditions
            .iter()
            .find(|c| c.type_ == RECONCILING)
            .unwrap();
        assert_eq!(reconciling.reason, SUSPENDED);
        assert_eq!(s.observed_generation, Some(2));
    }

    #[test]
    fn stalled_then_fixed_clears_stalled() {
        let stalled = Verdict::Stalled {
            reason: DEPENDENCY_CYCLE.into(),
            message: "dependsOn forms a cycle: a -> b -> a".into(),
        };
        let s = next_status(&RootStatus::default(), Some(1), &stalled, "t0");
        assert!(s
            .conditions
            .iter()
            .any(|c| c.type_ == STALLED && c.status == ConditionStatus::True));
        let s = next_status(&s, Some(2), &passed(None, "r1", "t1"), "t1");
        assert!(!s.conditions.iter().any(|c| c.type_ == STALLED));
    }
}
