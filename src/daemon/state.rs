//! The daemon's one shared state, built once by `weft run` and handed to the sync-root loop, the
//! controllers and the HTTP server (as kube-rs `controller-rs` hands its `State`).
//!
//! # Who writes which WeaveCloud status field
//!
//! One writer: the WeaveCloud's reconcile (`daemon::weavecloud`), which kube-runtime runs once
//! per object at a time. The agent update check is a step of that reconcile, not a second
//! writer; each step sends a merge patch of its own fields only.
//!
//! | field | written by the reconcile's step |
//! |---|---|
//! | `conditions` (`Ready`, `Reconciling`, `Stalled`, `Drifted`, `LauncherObjects`), `observedGeneration`, `flux`, `takeover` | the agents' reconcile |
//! | `inventory` | the apply engine, in the agents' reconcile or in an update's roll-out |
//! | `agentVersion`, `availableVersion`, `badVersions`, `nextUpdateCheck`, and the update's verdict in `Ready` (`AgentsUpdated`, `AgentUpdateRolledBack`) | the update check ([`crate::daemon::updater`]) |
//!
//! The verdict of a rolled-back update stays in `status` (so a restart keeps it): the agents'
//! reconcile reports it instead of its own healthy `Ready` until an update succeeds or the spec
//! changes ([`held_rollback`](crate::daemon::rollbacks::held_rollback)).

use crate::api::keys::OWNER_LABEL;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use kube::Client;

use super::metrics::Metrics;
use super::namespaces::WatchNamespaces;
use super::status::DaemonStatus;
use super::update_requests::UpdateRequests;
use crate::pass::agents::AgentBundles;

/// Everything the daemon's components share. Cheap to clone: clones share the state.
#[derive(Clone)]
pub struct DaemonState {
    client: Client,
    metrics: Arc<Metrics>,
    /// What `GET /api/v1/status` shows.
    status: Arc<RwLock<DaemonStatus>>,
    /// Agent update checks asked for over HTTP (a trigger of the WeaveCloud controller).
    update_requests: UpdateRequests,
    /// Kubernetes events of every component, and the notifications made of them.
    events: super::events::EventPublisher,
    /// The agent bundle each WeaveCloud runs.
    bundles: AgentBundles,
    /// The namespaces whose WeaveClouds and Armada resources the controllers act on
    /// (`--watch-namespaces`).
    namespaces: WatchNamespaces,
    /// The write fence of `client` (see [`crate::apply::fence`]): open while this replica holds
    /// a fresh leader Lease.
    fence: crate::apply::fence::WriteFence,
    /// The shard this replica works on during its term (`--shards N`); `None` on a standby.
    shard: Arc<RwLock<Option<super::shards::ShardClaim>>>,
    /// Whether the root is suspended (`weft suspend`), as last read from the cluster.
    suspension: super::suspend::SuspendState,
    /// Weft's own namespace (the root's, in metrics).
    weft_namespace: Arc<str>,
    /// Pushes the HTTP server routes to the Roots whose source they are, and requests for
    /// passes of the flag root's Root with their answers.
    root_pushes: super::roots::pushes::RootPushes,
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
            metrics: Arc::new(Metrics::for_process()),
            status: Arc::new(RwLock::new(status)),
            update_requests: UpdateRequests::default(),
            namespaces: WatchNamespaces::all(),
            fence: Default::default(),
            shard: Default::default(),
            suspension: Default::default(),
            weft_namespace: weft_namespace.into(),
            root_pushes: Default::default(),
        }
    }

    /// Pushes for the Roots' controller (webhooks route them to the Roots they are for).
    pub fn root_pushes(&self) -> &super::roots::pushes::RootPushes {
        &self.root_pushes
    }

    /// Weft's own namespace.
    pub fn weft_namespace(&self) -> &str {
        &self.weft_namespace
    }

    /// The Kubernetes client (its writes pass the write fence).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The daemon's Prometheus metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Agent update checks asked for over HTTP.
    pub fn update_requests(&self) -> &UpdateRequests {
        &self.update_requests
    }

    /// The agent bundle each WeaveCloud runs.
    pub fn bundles(&self) -> &AgentBundles {
        &self.bundles
    }

    /// The namespaces whose custom resources the controllers act on (`--watch-namespaces`).
    pub fn watch_namespaces(&self) -> &WatchNamespaces {
        &self.namespaces
    }

    /// The write fence of the client: open while this replica holds a fresh leader Lease.
    pub fn fence(&self) -> &crate::apply::fence::WriteFence {
        &self.fence
    }

    /// The shard this replica works on during its term; `None` on a standby or unsharded.
    pub fn shard_claim(&self) -> Option<super::shards::ShardClaim> {
        self.shard.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the root is suspended, as last read from the cluster.
    pub fn suspension(&self) -> &super::suspend::SuspendState {
        &self.suspension
    }

    /// Seal every event published (`notify::sealed`) with the key in Weft's namespace, as the
    /// daemon does so that the UI can tell Weft's events from others'. Without it (tests that
    /// drive a controller in process) events are published unsealed.
    pub fn with_sealed_events(mut self) -> DaemonState {
        self.events = self.events.sealed_in(&self.weft_namespace);
        self
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

    /// The next poll (RFC 3339) as the poll timer set it, without copying the whole status.
    pub fn next_poll_at(&self) -> Option<String> {
        self.status
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .next_poll_at
            .clone()
    }

    /// Record the root's suspension as read from the cluster (status included); `true` when
    /// this resumes a suspended root.
    pub fn set_suspension(&self, now: super::suspend::RootSuspension) -> bool {
        self.update_status(|s| s.suspension = now.clone());
        self.suspension.set(now)
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
        use crate::render::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
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
