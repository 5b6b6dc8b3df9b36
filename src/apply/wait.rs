//! Waiting until applied objects are ready, with a timeout, by the rules of the
//! [`readiness`](super::readiness) table:
//!
//! - [`wait_ready`]: given objects, each by its kind's rule (every pod of a controller);
//! - [`wait_owner`]: an owner's [`WaitRule`]: its label selectors over the listed objects of
//!   its namespace (with their `min_ready`; a required selector that finds nothing is not
//!   ready), plus its objects of other kinds that have a status, within the rule's own timeout,
//!   until the verdict is stable.
//!
//! On timeout the error names every object that is not ready and why.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::Client;
use serde_json::Value;

use super::apply_policy::WaitRule;
use super::readiness::{self, selection, Readiness};
use super::ApplyError;
use crate::api::ObjectRef;

/// One object to wait for.
#[derive(Clone, Debug)]
pub struct WaitTarget {
    pub object: ObjectRef,
    /// Shared with the plan (one copy per kind).
    pub resource: std::sync::Arc<ApiResource>,
    pub namespaced: bool,
}

/// How to wait.
#[derive(Clone, Debug)]
pub struct WaitOptions {
    pub timeout: Duration,
    /// Time between two looks at the objects not ready yet.
    pub poll_interval: Duration,
    /// Objects read at the same time.
    pub concurrency: usize,
}

impl Default for WaitOptions {
    fn default() -> Self {
        WaitOptions {
            timeout: Duration::from_secs(300),
            poll_interval: Duration::from_secs(1),
            concurrency: crate::apply::DEFAULT_CONCURRENCY,
        }
    }
}

/// How long a failure must hold before it ends a wait: a controller's verdict may be about a
/// moment ago (an Alert applied a moment before its Provider says `ProviderNotFound`, a Provider
/// applied beside its Secret says `SecretNotFound`), and such a controller looks again when what
/// it waits for appears. A failure seen again at least this long after the first look that saw
/// it, with no other verdict between, is confirmed.
pub const FAILURE_CONFIRMATION: Duration = Duration::from_secs(2);

/// Failures seen and not confirmed yet: since when each object has looked failed.
#[derive(Debug, Default)]
struct Failing(BTreeMap<ObjectRef, Instant>);

impl Failing {
    /// One look at `object`, as the wait takes it: a failure only once it is confirmed (or the
    /// wait is out of time, `last_look`), in progress until then.
    fn judge(&mut self, object: &ObjectRef, r: Readiness, last_look: bool) -> Readiness {
        match r {
            Readiness::Failed(why) => {
                let since = *self.0.entry(object.clone()).or_insert_with(Instant::now);
                if last_look || since.elapsed() >= FAILURE_CONFIRMATION {
                    Readiness::Failed(why)
                } else {
                    Readiness::InProgress(format!("{why} (looking again to confirm)"))
                }
            }
            other => {
                self.0.remove(object);
                other
            }
        }
    }
}

async fn look(client: &Client, t: &WaitTarget) -> Readiness {
    let api: Api<DynamicObject> = if t.namespaced {
        Api::namespaced_with(client.clone(), &t.object.namespace, &*t.resource)
    } else {
        Api::all_with(client.clone(), &*t.resource)
    };
    match api.get_opt(&t.object.name).await {
        Ok(Some(obj)) => match serde_json::to_value(&obj) {
            Ok(v) => readiness::readiness(&t.object.kind, &v),
            Err(e) => Readiness::InProgress(format!("cannot read it: {e}")),
        },
        Ok(None) => Readiness::InProgress("it does not exist".into()),
        Err(e) => Readiness::InProgress(format!("cannot read it: {}", super::describe(&e).0)),
    }
}

/// Wait until every target is ready. Objects that fail (a failed Job, a Deployment past its
/// progress deadline, a custom resource's terminal `Ready=False`) end the wait at once, once the
/// failure is confirmed ([`FAILURE_CONFIRMATION`]); otherwise the wait ends at the timeout with every
/// object still not ready and its reason. `on_ready` is called as each object becomes ready.
pub async fn wait_ready(
    client: &Client,
    targets: &[WaitTarget],
    opts: &WaitOptions,
    on_ready: &(dyn Fn(&ObjectRef) + Send + Sync),
) -> Result<(), ApplyError> {
    wait_ready_reporting(client, targets, opts, on_ready, &|_| {}).await
}

/// What a wait still waits for after one look: every object not ready yet, and why.
pub type OnPending<'a> = dyn Fn(&[(ObjectRef, String)]) + Send + Sync + 'a;

/// [`wait_ready`], also telling `on_pending` after each look what is still not ready and why
/// (so that a user watching a long wait sees what it waits for).
pub async fn wait_ready_reporting(
    client: &Client,
    targets: &[WaitTarget],
    opts: &WaitOptions,
    on_ready: &(dyn Fn(&ObjectRef) + Send + Sync),
    on_pending: &OnPending<'_>,
) -> Result<(), ApplyError> {
    let start = Instant::now();
    let mut pending: Vec<&WaitTarget> = targets.iter().collect();
    let mut failing = Failing::default();
    loop {
        let looks: Vec<(&WaitTarget, Readiness)> = futures::stream::iter(
            pending
                .iter()
                .copied()
                .map(|t| async move { (t, look(client, t).await) }.boxed())
                .collect::<Vec<_>>(),
        )
        .buffered(opts.concurrency.max(1))
        .collect()
        .await;
        let mut still = Vec::new();
        let mut failed = Vec::new();
        let mut reasons = Vec::new();
        let last_look = start.elapsed() >= opts.timeout;
        for (t, r) in looks {
            match failing.judge(&t.object, r, last_look) {
                Readiness::Ready => on_ready(&t.object),
                Readiness::InProgress(why) => {
                    still.push(t);
                    reasons.push((t.object.clone(), why));
                }
                Readiness::Failed(why) => failed.push((t.object.clone(), why)),
            }
        }
        if !failed.is_empty() {
            return Err(ApplyError::Failed(failed));
        }
        if still.is_empty() {
            return Ok(());
        }
        if start.elapsed() >= opts.timeout {
            return Err(ApplyError::WaitTimeout {
                timeout: opts.timeout,
                not_ready: reasons,
            });
        }
        on_pending(&reasons);
        pending = still;
        let left = opts.timeout.saturating_sub(start.elapsed());
        tokio::time::sleep(opts.poll_interval.min(left)).await;
    }
}

/// Why an owner is not ready by its [`WaitRule`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NotReady {
    /// `Some(timeout)` when the wait ran out of time; `None` when something failed for good.
    pub timed_out: Option<Duration>,
    /// Objects not ready yet, with why.
    pub not_ready: Vec<(ObjectRef, String)>,
    /// Objects that will not become ready by waiting (a failed Job, a rollout past its deadline).
    pub failed: Vec<(ObjectRef, String)>,
    /// Required selectors that found nothing (and listing errors), described.
    pub missing: Vec<String>,
}

/// The live objects of every kind the rule's selectors name, in its namespace, with
/// `apiVersion` and `kind` set (list items do not carry them), and what could not be listed.
async fn list_for_rule(client: &Client, rule: &WaitRule) -> (Vec<Value>, Vec<String>) {
    let kinds: BTreeSet<&str> = rule.selectors.iter().map(|s| s.kind.as_str()).collect();
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for kind in kinds {
        let Some(listing) = readiness::rule(kind).and_then(|r| r.listing) else {
            errors.push(format!(
                "cannot wait for {kind} by labels: the readiness table cannot list it"
            ));
            continue;
        };
        let ar = listing.resource(kind);
        let labels = selection::common_labels(&rule.selectors, kind)
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut lp = ListParams::default();
        if !labels.is_empty() {
            lp = lp.labels(&labels);
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &rule.namespace, &ar);
        match api.list(&lp).await {
            Ok(list) => {
                for item in list.items {
                    if let Ok(mut v) = serde_json::to_value(&item) {
                        v["apiVersion"] = Value::String(ar.api_version.clone());
                        v["kind"] = Value::String(ar.kind.clone());
                        out.push(v);
                    }
                }
            }
            Err(e) => errors.push(format!(
                "cannot list {} in {}: {}",
                ar.plural,
                rule.namespace,
                super::describe(&e).0
            )),
        }
    }
    (out, errors)
}

/// What a look at an owner's objects saw: every object its selectors judged (kind, namespace,
/// name) with its `resourceVersion`.
type Seen = Vec<(String, String, String, String)>;

/// Tells a stable "ready" from a passing one, as Armada's `wait.py` waits again when the objects
/// were modified while it watched: ready is stable when two looks in a row find everything
/// ready and the same objects at the same versions.
#[derive(Debug, Default)]
struct Stability {
    /// The last look, when it found everything ready.
    ready_before: Option<Seen>,
}

impl Stability {
    /// Record a look; `true` when it confirms the one before.
    fn settled(&mut self, all_ready: bool, seen: Seen) -> bool {
        if !all_ready {
            self.ready_before = None;
            return false;
        }
        if self.ready_before.as_ref() == Some(&seen) {
            return true;
        }
        self.ready_before = Some(seen);
        false
    }
}

fn fingerprint(rule: &WaitRule, live: &[Value]) -> Seen {
    let field = |v: &Value, p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut seen: Vec<_> = live
        .iter()
        .filter(|v| {
            rule.selectors
                .iter()
                .any(|s| s.matches(v) && !readiness::excluded(&s.kind, v))
        })
        .map(|v| {
            (
                field(v, "/kind"),
                field(v, "/metadata/namespace"),
                field(v, "/metadata/name"),
                field(v, "/metadata/resourceVersion"),
            )
        })
        .collect();
    seen.sort();
    seen
}

/// Wait until an owner is ready by its own rule; `extra` are its objects outside the selectors'
/// kinds that still have a status to wait for. Returns at once when something failed for good;
/// otherwise at the rule's timeout with every object not ready and why (and every required
/// selector that found nothing). `on_ready` is called once per object that is ready.
///
/// Readiness is re-checked until stable, as Armada's `wait.py` does (it waits again when the
/// objects were modified while it watched): the owner is ready when two looks, a poll interval
/// apart, find everything ready and the same objects at the same `resourceVersion`. A pod that
/// a controller creates a moment after the others, or one that turns ready and fails again,
/// keeps the wait going.
pub async fn wait_owner(
    client: &Client,
    rule: &WaitRule,
    extra: &[WaitTarget],
    poll_interval: Duration,
    on_ready: &(dyn Fn(&ObjectRef) + Send + Sync),
) -> Result<(), NotReady> {
    wait_owner_reporting(client, rule, extra, poll_interval, on_ready, &|_| {}).await
}

/// [`wait_owner`], also telling `on_pending` after each look what is still not ready and why
/// (a required selector that found nothing is named by its description).
pub async fn wait_owner_reporting(
    client: &Client,
    rule: &WaitRule,
    extra: &[WaitTarget],
    poll_interval: Duration,
    on_ready: &(dyn Fn(&ObjectRef) + Send + Sync),
    on_pending: &OnPending<'_>,
) -> Result<(), NotReady> {
    let start = Instant::now();
    let mut reported: BTreeSet<ObjectRef> = BTreeSet::new();
    let mut stability = Stability::default();
    let mut failing = Failing::default();
    let mut confirmed_late = false;
    loop {
        let (live, list_errors) = list_for_rule(client, rule).await;
        let judged = readiness::judge(&rule.selectors, &live);
        let mut state = NotReady {
            timed_out: None,
            not_ready: judged.not_ready,
            failed: judged.failed,
            missing: judged.missing,
        };
        state.missing.extend(list_errors);
        let mut ready = judged.ready;
        let last_look = start.elapsed() >= rule.timeout;
        for t in extra {
            match failing.judge(&t.object, look(client, t).await, last_look) {
                Readiness::Ready => ready.push(t.object.clone()),
                Readiness::InProgress(why) => state.not_ready.push((t.object.clone(), why)),
                Readiness::Failed(why) => state.failed.push((t.object.clone(), why)),
            }
        }
        for r in &ready {
            // An object judged by two selectors is ready only if both say so.
            if !state.not_ready.iter().any(|(o, _)| o == r)
                && !state.failed.iter().any(|(o, _)| o == r)
                && reported.insert(r.clone())
            {
                on_ready(r);
            }
        }
        if !state.failed.is_empty() {
            return Err(state);
        }
        let all_ready = state.not_ready.is_empty() && state.missing.is_empty();
        let timed_out = start.elapsed() >= rule.timeout;
        let settled = stability.settled(all_ready, fingerprint(rule, &live));
        if all_ready {
            if rule.selectors.is_empty() || settled {
                return Ok(());
            }
            if timed_out {
                // Ready at the deadline: one more look says whether it holds.
                if confirmed_late {
                    state.not_ready = ready
                        .into_iter()
                        .map(|r| {
                            (
                                r,
                                "ready, but changed since the last look (not stable)".to_string(),
                            )
                        })
                        .collect();
                    state.timed_out = Some(rule.timeout);
                    return Err(state);
                }
                confirmed_late = true;
                tokio::time::sleep(poll_interval).await;
                continue;
            }
        }
        if timed_out {
            state.timed_out = Some(rule.timeout);
            return Err(state);
        }
        // Also when only a required selector found nothing (an empty list): the wait goes on.
        if !state.not_ready.is_empty() || !state.missing.is_empty() {
            on_pending(&state.not_ready);
        }
        let left = rule.timeout.saturating_sub(start.elapsed());
        tokio::time::sleep(poll_interval.min(left)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(objects: &[(&str, &str)]) -> Seen {
        objects
            .iter()
            .map(|(name, version)| {
                (
                    "Pod".to_string(),
                    "demo".to_string(),
                    name.to_string(),
                    version.to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn a_failure_ends_a_wait_only_when_a_later_look_confirms_it() {
        let object = ObjectRef {
            api_version: "notification.weft.io/v1alpha1".into(),
            kind: "Alert".into(),
            namespace: "demo".into(),
            name: "failures".into(),
        };
        let failed = || Readiness::Failed("Ready=False: ProviderNotFound".into());
        let mut f = Failing::default();
        // First seen: looked at again, not yet a failure.
        assert_eq!(
            f.judge(&object, failed(), false),
            Readiness::InProgress(
                "Ready=False: ProviderNotFound (looking again to confirm)".into()
            )
        );
        // It turned ready in between: forgotten, so the next failure starts over.
        assert_eq!(f.judge(&object, Readiness::Ready, false), Readiness::Ready);
        assert!(matches!(
            f.judge(&object, failed(), false),
            Readiness::InProgress(_)
        ));
        // Held since long enough: confirmed.
        f.0.insert(object.clone(), Instant::now() - FAILURE_CONFIRMATION);
        assert_eq!(f.judge(&object, failed(), false), failed());
        // Out of time: a failure is a failure.
        let mut f = Failing::default();
        assert_eq!(f.judge(&object, failed(), true), failed());
    }

    #[test]
    fn ready_counts_only_when_a_second_look_finds_the_same() {
        let mut s = Stability::default();
        // One pod ready: not yet; its sibling appears (the ReplicaSet made it a moment later).
        assert!(!s.settled(true, seen(&[("api-1", "10")])));
        assert!(!s.settled(true, seen(&[("api-1", "10"), ("api-2", "11")])));
        // The same two, unchanged: stable.
        assert!(s.settled(true, seen(&[("api-1", "10"), ("api-2", "11")])));

        // Ready, then modified (a new resourceVersion): look again.
        let mut s = Stability::default();
        assert!(!s.settled(true, seen(&[("api-1", "10")])));
        assert!(!s.settled(true, seen(&[("api-1", "12")])));
        assert!(s.settled(true, seen(&[("api-1", "12")])));

        // A look that is not ready starts over.
        let mut s = Stability::default();
        assert!(!s.settled(true, seen(&[("api-1", "10")])));
        assert!(!s.settled(false, seen(&[("api-1", "10")])));
        assert!(!s.settled(true, seen(&[("api-1", "10")])));
        assert!(s.settled(true, seen(&[("api-1", "10")])));
    }
}
