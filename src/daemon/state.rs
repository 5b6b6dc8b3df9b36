//! The daemon's one shared state, built once by `weft run` and handed to the sync-root loop, the
//! controllers, the updater and the HTTP server (as kube-rs `controller-rs` hands its `State`).
//!
//! # Who writes which WeaveCloud status field
//!
//! | field | writer |
//! |---|---|
//! | `conditions` (`Ready`, `Reconciling`, `Stalled`, `Drifted`), `observedGeneration`, `flux` | the WeaveCloud controller |
//! | `agentVersion`, `availableVersion`, `badVersions`, `nextUpdateCheck` | the updater |
//! | `inventory` | the apply engine, inside the pass of whichever of the two holds the owner's [`PassLocks`] lock |
//!
//! One exception, kept on purpose: the verdict of an agent update is the `Ready` condition
//! (`AgentsUpdated`, or `AgentUpdateRolledBack`), which the updater writes once, under the owner's
//! pass lock, and records in [`Rollbacks`]; the controller then reports that verdict instead of
//! its own healthy `Ready` until an update succeeds or the spec changes. Every writer sends a
//! merge patch of its own fields only.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kube::Client;
use tokio::sync::{watch, Notify, OwnedMutexGuard};

use super::metrics::Metrics;
use super::status::{DaemonStatus, PassReport};
use super::trigger::TriggerQueue;
use crate::api::conditions::{Condition, ConditionStatus, READY};
use crate::api::weavecloud::WeaveCloudStatus;
use crate::pass::agents::AgentBundles;
use crate::render::Owner;

/// The reason of `Ready=False` after an agent update was rolled back.
pub const REASON_ROLLED_BACK: &str = "AgentUpdateRolledBack";

/// Everything the daemon's components share. Cheap to clone: clones share the state.
#[derive(Clone)]
pub struct DaemonState {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    /// What `GET /api/v1/status` shows.
    pub status: Arc<RwLock<DaemonStatus>>,
    /// Passes of the sync root; the HTTP server and the watches trigger them.
    pub queue: Arc<TriggerQueue<PassReport>>,
    /// Agent update checks asked for over HTTP.
    pub update_requests: UpdateRequests,
    /// Kubernetes events of every component, and the notifications made of them.
    events: super::events::EventPublisher,
    /// The agent bundle each WeaveCloud runs.
    pub bundles: AgentBundles,
    /// Update verdicts the WeaveCloud controller must keep reporting.
    pub rollbacks: Rollbacks,
    /// Held around render, apply, prune and wait of one owner's objects (a roll-out through its
    /// rollback).
    pub pass_locks: PassLocks,
    /// The namespaces whose WeaveClouds and Armada resources the controllers act on
    /// (`--watch-namespaces`).
    pub namespaces: WatchNamespaces,
    /// The write fence of `client` (see [`crate::apply::fence`]): open while this replica holds
    /// a fresh leader Lease.
    pub fence: crate::apply::fence::WriteFence,
    /// The shard this replica works on during its term (`--shards N`); `None` on a standby.
    pub shard: Arc<RwLock<Option<super::shards::ShardClaim>>>,
    /// Whether the root is suspended (`weft suspend`), as last read from the cluster.
    pub suspension: super::suspend::SuspendState,
}

/// `--watch-namespaces`: the namespaces whose custom resources the controllers and the updater
/// act on. A WeaveCloud elsewhere gets no agents, no finalizer, no update check: creating one
/// in a namespace the operator did not list gives nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchNamespaces(Option<Arc<std::collections::BTreeSet<String>>>);

impl WatchNamespaces {
    /// Every namespace.
    pub fn all() -> Self {
        WatchNamespaces(None)
    }
    /// Only these (an empty list means every namespace, as the flag left empty).
    pub fn only(namespaces: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let set: std::collections::BTreeSet<String> = namespaces
            .into_iter()
            .map(Into::into)
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if set.is_empty() {
            WatchNamespaces(None)
        } else {
            WatchNamespaces(Some(Arc::new(set)))
        }
    }
    /// The namespaces listed, or `None` for every namespace.
    pub fn listed(&self) -> Option<impl Iterator<Item = &str>> {
        self.0.as_ref().map(|set| set.iter().map(String::as_str))
    }
    /// Whether the controllers act on resources of `namespace`.
    pub fn contains(&self, namespace: &str) -> bool {
        self.0.as_ref().is_none_or(|set| set.contains(namespace))
    }
}

impl DaemonState {
    /// A fresh state; agent bundles are cached in `weft_namespace`.
    pub fn new(client: Client, weft_namespace: &str, status: DaemonStatus) -> DaemonState {
        DaemonState {
            events: super::events::EventPublisher::new(
                client.clone(),
                crate::notify::Notifier::disabled(),
            ),
            bundles: AgentBundles::new(client.clone(), weft_namespace.to_string()),
            client,
            metrics: Arc::new(Metrics::new()),
            status: Arc::new(RwLock::new(status)),
            queue: TriggerQueue::new(),
            update_requests: UpdateRequests::default(),
            rollbacks: Rollbacks::default(),
            pass_locks: PassLocks::default(),
            namespaces: WatchNamespaces::all(),
            fence: Default::default(),
            shard: Default::default(),
            suspension: Default::default(),
        }
    }

    /// Send notifications through `notifier` (its dispatcher started by the caller).
    pub fn with_notifier(mut self, notifier: crate::notify::Notifier) -> DaemonState {
        self.events = self.events.with_notifier(notifier);
        self
    }

    /// Publishes Kubernetes events (bounded and redacted) and their notifications.
    pub fn events(&self) -> &super::events::EventPublisher {
        &self.events
    }

    /// Notifications (Providers and Alerts); disabled unless `weft run` starts its dispatcher.
    pub fn notifier(&self) -> &crate::notify::Notifier {
        self.events.notifier()
    }

    /// The write fence `client` was built with.
    pub fn with_fence(mut self, fence: crate::apply::fence::WriteFence) -> DaemonState {
        self.fence = fence;
        self
    }

    /// Act only on custom resources of these namespaces.
    pub fn with_watch_namespaces(mut self, namespaces: WatchNamespaces) -> DaemonState {
        self.namespaces = namespaces;
        self
    }

    /// Change the daemon status.
    pub fn update_status(&self, f: impl FnOnce(&mut DaemonStatus)) {
        // Plain field writes: a panic while holding the lock leaves consistent data.
        let mut s = self.status.write().unwrap_or_else(|p| p.into_inner());
        f(&mut s);
    }

    /// A copy of the daemon status.
    pub fn status_snapshot(&self) -> DaemonStatus {
        self.status
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Record the root's suspension as read from the cluster (status included); `true` when
    /// this resumes a suspended root.
    pub fn set_suspension(&self, now: super::record::RootSuspension) -> bool {
        self.update_status(|s| s.suspension = now.clone());
        self.suspension.set(now)
    }

    /// The root's suspension as the root record says now (see [`super::suspend::follow`]):
    /// kept, and a pass started when this resumes the root. `false` once the queue is closed.
    pub fn suspension_seen(&self, root_name: &str, now: super::record::RootSuspension) -> bool {
        let suspended = now.suspended;
        if self.set_suspension(now) {
            tracing::info!(root = %root_name, "the root was resumed; starting a pass");
            return self
                .queue
                .trigger(super::trigger::TriggerReason::Resumed)
                .is_ok();
        }
        if suspended {
            tracing::debug!(root = %root_name, "the root is suspended");
        }
        true
    }

    /// Whether this replica holds the leader Lease.
    pub fn is_leader(&self) -> bool {
        self.status.read().map(|s| s.leader).unwrap_or(false)
    }

    /// Record leadership in metrics and status.
    pub fn set_leader(&self, leader: bool) {
        self.metrics.set_leader(leader);
        self.update_status(|s| s.leader = leader);
    }

    /// Record the shard this replica holds for a term (`None` when the term ends): status,
    /// metrics, and which custom resources the controllers act on.
    pub fn set_shard(&self, claim: Option<super::shards::ShardClaim>) {
        let held: Vec<u32> = claim.iter().map(|c| c.shard.index).collect();
        self.metrics.set_shards(&held);
        self.update_status(|s| s.shards = held.clone());
        *self.shard.write().unwrap_or_else(|p| p.into_inner()) = claim;
    }

    /// The label selector of the custom resources' children: objects labelled by Weft, except
    /// those of this root's sync-root owners (every shard's), which no controller looks at.
    pub fn children_selector(&self) -> String {
        use crate::render::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_LABEL};
        let base = format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}");
        let claim = self.shard.read().unwrap_or_else(|p| p.into_inner()).clone();
        match claim {
            Some(c) => {
                let ids: Vec<String> = (0..c.shard.count.max(1))
                    .map(|j| c.owner_of(j).id().0)
                    .collect();
                format!("{base},{OWNER_LABEL} notin ({})", ids.join(","))
            }
            None => base,
        }
    }

    /// Whether this replica acts on the custom resource (see [`super::shards::ShardClaim::handles`]); `true`
    /// when it holds no shard claim (an unsharded root: the controllers run only while leading).
    pub fn handles(
        &self,
        labels: &BTreeMap<String, String>,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> bool {
        self.shard
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_none_or(|c| c.handles(labels, kind, namespace, name))
    }
}

/// One async lock per owner: the WeaveCloud controller and the updater hold it around render,
/// apply, prune and wait of that owner's objects (the updater: a whole roll-out with its
/// rollback), so they never run passes for the same owner at once. Nothing holds two owners'
/// locks; the updater takes its own one-check-at-a-time lock before this one, never after.
#[derive(Clone, Debug, Default)]
pub struct PassLocks(Arc<Mutex<BTreeMap<Owner, Arc<tokio::sync::Mutex<()>>>>>);

impl PassLocks {
    /// Wait for `owner`'s lock.
    pub async fn lock(&self, owner: &Owner) -> OwnedMutexGuard<()> {
        let lock = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(owner.clone())
            .or_default()
            .clone();
        lock.lock_owned().await
    }

    /// Forget a deleted owner's lock, unless someone holds it or waits for it: a pass that got
    /// the old lock after a new one was made for the same owner (a WeaveCloud deleted and
    /// created again) would run beside the holder of the new one.
    pub fn forget(&self, owner: &Owner) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Holders and waiters each keep a clone; `lock` clones under this same map lock, so no
        // one can start waiting between the count and the removal.
        if map.get(owner).is_some_and(|l| Arc::strong_count(l) == 1) {
            map.remove(owner);
        }
    }
}

/// A handle to ask the update scheduler for a check of every WeaveCloud now; held by the HTTP
/// server (`POST /api/v1/sync?update=true`). Requests made while a check runs coalesce into one.
#[derive(Clone, Debug, Default)]
pub struct UpdateRequests {
    notify: Arc<Notify>,
    pending: Arc<AtomicBool>,
}

impl UpdateRequests {
    /// Ask for a check now.
    pub fn request(&self) {
        self.pending.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Whether a check was asked for since the last call.
    pub fn take(&self) -> bool {
        self.pending.swap(false, Ordering::SeqCst)
    }

    /// Resolves at the next request.
    pub async fn requested(&self) {
        self.notify.notified().await
    }
}

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

/// The `Ready=False` condition of a rollback, per WeaveCloud, until an update succeeds: in
/// memory so that a reconcile that read the status before the rollback cannot lose it. The
/// updater writes it, the WeaveCloud controller reads it.
#[derive(Clone, Debug, Default)]
pub struct Rollbacks(Arc<RwLock<HashMap<(String, String), Condition>>>);

impl Rollbacks {
    /// The `Ready` condition the WeaveCloud controller must report instead of its own healthy
    /// one after a rollback (see [`held_rollback`]); `None`: its own. Remembered rollbacks come
    /// first, then the status (after a restart).
    pub fn held_ready(
        &self,
        namespace: &str,
        name: &str,
        status: &WeaveCloudStatus,
        generation: Option<i64>,
        computed: &Condition,
    ) -> Option<Condition> {
        if computed.status != ConditionStatus::True {
            return None;
        }
        let remembered = self
            .0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(namespace.to_string(), name.to_string()))
            .filter(|c| c.observed_generation == generation)
            .cloned();
        remembered.or_else(|| held_rollback(status, generation, computed))
    }

    /// Remember (or with `None` forget) the rollback condition of WeaveCloud `namespace/name`.
    pub fn set(&self, namespace: &str, name: &str, condition: Option<Condition>) {
        let key = (namespace.to_string(), name.to_string());
        let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
        match condition {
            Some(c) => map.insert(key, c),
            None => map.remove(&key),
        };
    }
}

/// How long running work may go on once the daemon is asked to stop, and the signal itself.
#[derive(Clone, Debug)]
pub struct Shutdown {
    stop: watch::Receiver<bool>,
    grace: Duration,
}

impl Shutdown {
    pub fn new(stop: watch::Receiver<bool>, grace: Duration) -> Shutdown {
        Shutdown { stop, grace }
    }

    /// Never asked to stop (tests, one-shot tools).
    pub fn never() -> Shutdown {
        let (tx, stop) = watch::channel(false);
        // Dropping the sender: `stopped` then never resolves (see there).
        drop(tx);
        Shutdown {
            stop,
            grace: Duration::ZERO,
        }
    }

    /// Whether the daemon was asked to stop.
    pub fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// The stop signal.
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.stop.clone()
    }

    /// Resolves when the daemon is asked to stop.
    pub async fn stopped(&self) {
        let mut stop = self.stop.clone();
        while !*stop.borrow_and_update() {
            if stop.changed().await.is_err() {
                // The sender is gone: nobody can ask us to stop any more.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves the grace period after the daemon was asked to stop: running work is then
    /// abandoned (dropped between two API calls).
    pub async fn abandoned(&self) {
        self.stopped().await;
        tokio::time::sleep(self.grace).await;
    }

    /// The grace period.
    pub fn grace(&self) -> Duration {
        self.grace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_pass_lock_of_one_owner_excludes_only_that_owner() {
        let locks = PassLocks::default();
        let a = Owner::Resource {
            kind: "WeaveCloud".into(),
            namespace: "a".into(),
            name: "wc".into(),
        };
        let b = Owner::Resource {
            kind: "WeaveCloud".into(),
            namespace: "b".into(),
            name: "wc".into(),
        };
        let held = locks.lock(&a).await;
        let other = tokio::time::timeout(Duration::from_millis(50), locks.lock(&b)).await;
        assert!(other.is_ok(), "another owner's lock is free");
        let same = tokio::time::timeout(Duration::from_millis(50), locks.lock(&a)).await;
        assert!(same.is_err(), "the same owner's lock is held");
        drop(held);
        let again = tokio::time::timeout(Duration::from_millis(50), locks.lock(&a)).await;
        assert!(again.is_ok());
    }

    #[tokio::test]
    async fn forgetting_a_lock_someone_waits_for_keeps_excluding_them() {
        let locks = PassLocks::default();
        let a = Owner::Resource {
            kind: "WeaveCloud".into(),
            namespace: "a".into(),
            name: "wc".into(),
        };
        // The WeaveCloud's cleanup holds the lock while the updater waits for it.
        let cleanup = locks.lock(&a).await;
        let (acquired_tx, acquired) = tokio::sync::oneshot::channel();
        let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
        let updater = {
            let locks = locks.clone();
            let a = a.clone();
            tokio::spawn(async move {
                let _held = locks.lock(&a).await;
                acquired_tx.send(()).unwrap();
                let _ = release.await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(cleanup);
        locks.forget(&a);
        acquired.await.expect("the waiting updater gets the lock");
        // A reconcile of a WeaveCloud of the same name must still wait for the updater.
        let again = tokio::time::timeout(Duration::from_millis(50), locks.lock(&a)).await;
        assert!(again.is_err(), "the updater still holds the owner's lock");
        release_tx.send(()).unwrap();
        updater.await.unwrap();
        // Nobody holds or waits any more: forgotten for good.
        locks.forget(&a);
        assert!(locks.0.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn shutdown_abandons_after_the_grace_period() {
        let (tx, rx) = watch::channel(false);
        let s = Shutdown::new(rx, Duration::from_millis(30));
        let early = tokio::time::timeout(Duration::from_millis(30), s.abandoned()).await;
        assert!(early.is_err(), "not asked to stop yet");
        tx.send(true).unwrap();
        assert!(s.is_stopping());
        let t = std::time::Instant::now();
        s.abandoned().await;
        assert!(t.elapsed() >= Duration::from_millis(30));
        let never = Shutdown::never();
        let r = tokio::time::timeout(Duration::from_millis(30), never.abandoned()).await;
        assert!(r.is_err());
    }

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
