//! Replicas split the Root objects between them (issue 41 item 4): each root is held by one
//! replica through a `coordination.k8s.io/v1` Lease of its own, and a replica reconciles only
//! the roots whose Lease it holds.
//!
//! - **Where**: every Lease lives in Weft's namespace (`--weft-namespace`), never in the root's:
//!   a tenant may write Leases in its own namespace, and could then hold its root's Lease forever
//!   (blocking it) or delete it; in Weft's namespace only Weft writes (docs/security.md).
//! - **Names**: `weft-root-<namespace>.<name>` (a namespace has no dot, so no two roots share a
//!   name), `weft-root-<hash>` when that is longer than a Lease name may be; each replica also
//!   keeps `weft-replica-<hash of its identity>`, by which the others count the live replicas.
//! - **Fair share**: a replica takes free or expired root Leases while it holds fewer than
//!   `ceil(roots / live replicas) + 1`, and gives back (never a root in the middle of a pass)
//!   those above it. The `+ 1` goes while another live replica holds fewer than
//!   `floor(roots / live replicas)`: the others then give back down to `ceil` and take no more,
//!   so the freed Leases go to the one short of roots, and 200 roots on 3 replicas settle at 66
//!   to 68 each, none under 66 (with the `+ 1` alone two quick replicas could keep 68 each and
//!   leave the third 64, or 13 roots split 6, 6 and 1). A replica takes nothing on its first round (others
//!   learn it is alive first).
//! - **Expiry** is client-go's: a Lease is taken from another holder only after its renew time
//!   has stayed unchanged for its whole `leaseDurationSeconds` on *our* clock. Every write carries
//!   the Lease's resourceVersion, so two replicas racing for one root cannot both win.
//! - **Fencing**: each held root has its own [`WriteFence`], opened until `renewal sent + renew
//!   deadline` by each renewal, and its own client behind it, with which its pass, its status and
//!   its events are written: a replica that lost a root (or could not renew it in time) can no
//!   longer write for it, whatever of its pass still runs — the pass is abandoned, it fails at its
//!   next write, and the next holder passes the root from the start.

use crate::api::keys::{HOOKS_URL_ANNOTATION, LEASE_LABEL, ROOT_KEY};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;

use super::identity::Impersonation;
#[cfg(test)]
use super::lease_plan::MAX_NAME;
use super::lease_plan::{digest, first_renewal_early};
pub use super::lease_plan::{fair_share, replica_lease_name, root_lease_name, share_now, SLACK};
use crate::api::root::Root;
use crate::api::ResourceKey;
use crate::apply::fence::{FenceLayer, WriteFence};
use crate::daemon::events::EventPublisher;
use crate::daemon::leader::LeaseConfig;

/// What a replica writes a root it holds with: a client (and an event publisher, and clients
/// acting as the root's ServiceAccount) behind the root's own write fence.
#[derive(Clone)]
pub struct HeldRoot {
    pub client: Client,
    pub events: EventPublisher,
    pub impersonation: Arc<Impersonation>,
}

struct Held {
    root: HeldRoot,
    fence: WriteFence,
    lease: String,
    last_renew: Instant,
    /// How much sooner than usual the next renewal comes: [`first_renewal_early`] until the
    /// first renewal, then nothing.
    early: Duration,
}

/// The holder and renew time last seen on a Lease, and when they were first seen.
type Observed = (Option<String>, Option<MicroTime>, Instant);

#[derive(Default)]
struct Inner {
    held: HashMap<ResourceKey, Held>,
    observed: HashMap<String, Observed>,
    busy: HashSet<ResourceKey>,
    rounds: u64,
    /// The hooks URL each other replica publishes on its replica Lease, by its identity (as
    /// last listed): where a push for the roots it holds is passed on.
    replica_urls: HashMap<String, String>,
}

/// This replica's root Leases (shared by the Lease loop and the reconciles).
pub struct RootLeases {
    api: Api<Lease>,
    namespace: String,
    identity: String,
    timing: LeaseConfig,
    /// The cluster configuration each held root's client is built from; `None` (a daemon built
    /// without one, in tests): the daemon's own client, fenced by the leader Lease.
    cluster: Option<Arc<kube::Config>>,
    api_timeout: Duration,
    /// The daemon's client and events, for the fallback above.
    own: (Client, EventPublisher, WriteFence),
    /// The connections every held root's client shares (built from `cluster` on first use,
    /// unfenced: each held root's client fences its own writes on top of it).
    transport: Mutex<Option<Client>>,
    /// A root held otherwise (the sharded flag root's, by its shard Leases): no Lease for it.
    unleased: Option<ResourceKey>,
    /// This daemon's flag root: the only root marked as a flag root's Root
    /// ([`super::requests::marked_flag_root`]) it takes a Lease for.
    flag_root: Option<ResourceKey>,
    /// The URL of this replica's hooks port, published on its replica Lease so that the replica
    /// a push reaches passes it on for the roots held here ([`RootLeases::holder_url`]).
    hooks_url: Option<String>,
    inner: Mutex<Inner>,
}

/// Marks a root as in the middle of a pass: it is not given back to balance the split.
pub struct Busy<'a> {
    leases: &'a RootLeases,
    key: ResourceKey,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.leases.lock().busy.remove(&self.key);
    }
}

impl RootLeases {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        events: EventPublisher,
        fence: WriteFence,
        namespace: &str,
        identity: &str,
        lease_duration: Duration,
        cluster: Option<kube::Config>,
        api_timeout: Duration,
    ) -> RootLeases {
        RootLeases {
            api: Api::namespaced(client.clone(), namespace),
            namespace: namespace.to_string(),
            identity: identity.to_string(),
            timing: LeaseConfig::new(namespace, identity, lease_duration),
            cluster: cluster.map(Arc::new),
            api_timeout,
            own: (client, events, fence),
            transport: Mutex::default(),
            unleased: None,
            flag_root: None,
            hooks_url: None,
            inner: Mutex::default(),
        }
    }

    /// Hold no Lease for `key` (a root another mechanism holds).
    pub fn without(mut self, key: Option<ResourceKey>) -> RootLeases {
        self.unleased = key;
        self
    }

    /// This daemon's flag root (`--root-name` in Weft's namespace): another installation's
    /// flag root is that installation's, however many Wefts see it.
    pub fn with_flag_root(mut self, key: ResourceKey) -> RootLeases {
        self.flag_root = Some(key);
        self
    }

    /// Publish `url` (this replica's hooks port) on the replica Lease.
    pub fn publishing(mut self, url: Option<String>) -> RootLeases {
        self.hooks_url = url;
        self
    }

    /// The replica holding `key`'s Lease and the hooks URL it publishes, as the last round saw
    /// them; `None` when this replica holds it, nobody does, or its holder publishes no URL.
    pub fn holder_url(&self, key: &ResourceKey) -> Option<(String, String)> {
        let inner = self.lock();
        let (holder, _, _) = inner.observed.get(&root_lease_name(key))?;
        let holder = holder
            .as_ref()
            .filter(|h| !h.is_empty() && **h != self.identity)?;
        let url = inner.replica_urls.get(holder)?;
        Some((holder.clone(), url.clone()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How often the Leases are looked at (and held ones renewed).
    pub fn retry_period(&self) -> Duration {
        self.timing.retry_period
    }

    /// The writers of `key` while this replica holds its Lease; `None`: another replica's root.
    pub fn held(&self, key: &ResourceKey) -> Option<HeldRoot> {
        self.lock().held.get(key).map(|h| h.root.clone())
    }

    /// Mark `key` as passing until the guard drops.
    pub fn busy(&self, key: &ResourceKey) -> Busy<'_> {
        self.lock().busy.insert(key.clone());
        Busy {
            leases: self,
            key: key.clone(),
        }
    }

    /// How many roots this replica holds.
    pub fn count(&self) -> usize {
        self.lock().held.len()
    }

    /// Look at the Leases every retry period until `stop` fires, then give every held root back.
    pub async fn run(
        self: Arc<Self>,
        store: Store<Root>,
        taken: mpsc::UnboundedSender<ObjectRef<Root>>,
        mut stop: tokio::sync::oneshot::Receiver<()>,
    ) {
        loop {
            if let Err(e) = self.round(&store, &taken).await {
                tracing::warn!(namespace = %self.namespace, error = %crate::api::kube_error::Text(&e), "cannot read or write the roots' Leases; retrying");
            }
            self.expire_unrenewed();
            tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep(self.timing.retry_period) => {}
            }
        }
        self.release_all().await;
    }

    /// Close the fence of every root whose renewal is overdue: its Lease may be another's soon.
    fn expire_unrenewed(&self) {
        let mut inner = self.lock();
        let deadline = self.timing.renew_deadline;
        let lost: Vec<ResourceKey> = inner
            .held
            .iter()
            .filter(|(_, h)| h.last_renew.elapsed() >= deadline)
            .map(|(k, _)| k.clone())
            .collect();
        for key in lost {
            if let Some(h) = inner.held.remove(&key) {
                h.fence.close();
                tracing::warn!(root = %key, lease = %h.lease, "could not renew the root's Lease in time; this replica stops reconciling it");
            }
        }
    }

    /// One round: say this replica is alive, renew what it holds, give back what is above its
    /// share, take free or expired Leases up to its share.
    async fn round(
        &self,
        store: &Store<Root>,
        taken: &mpsc::UnboundedSender<ObjectRef<Root>>,
    ) -> Result<(), kube::Error> {
        self.renew_replica().await?;
        let leases = self
            .api
            .list(&ListParams::default().labels(LEASE_LABEL))
            .await?;
        let by_name: BTreeMap<String, Lease> = leases
            .items
            .into_iter()
            .map(|l| (l.name_any(), l))
            .collect();
        let live = self.live_replicas(&by_name).await;
        self.lock().replica_urls = by_name
            .values()
            .filter(|l| is_replica(l))
            .filter_map(|l| {
                let holder = l.spec.as_ref()?.holder_identity.clone()?;
                let url = l.annotations().get(HOOKS_URL_ANNOTATION)?;
                (!url.is_empty() && holder != self.identity).then(|| (holder, url.clone()))
            })
            .collect();
        // Every root Lease is observed every round, whether or not this replica has room to take
        // one: expiry counts from when a renew time was first seen, and a Lease first looked at
        // only once a dead replica's share freed room here would wait a whole duration more (the
        // dead replica's 64 roots moved after 32.8 s with a 15 s Lease, issue 41 item 4).
        for (name, lease) in by_name.iter().filter(|(_, l)| !is_replica(l)) {
            let spec = lease.spec.as_ref();
            let holder = spec.and_then(|s| s.holder_identity.clone());
            self.observe(name, holder, spec.and_then(|s| s.renew_time.clone()));
        }
        let mut roots: Vec<ResourceKey> = store
            .state()
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .filter(|r| {
                !super::requests::marked_flag_root(r)
                    || self.flag_root.as_ref() == Some(&super::depends::key_of(r))
            })
            .map(|r| super::depends::key_of(r))
            .filter(|k| self.unleased.as_ref() != Some(k))
            .collect();
        roots.sort();
        let fewest_other = self.fewest_other(&by_name, &roots, &live);
        let share = share_now(roots.len(), live.len(), fewest_other);
        let live = live.len();
        let first = {
            let mut inner = self.lock();
            inner.rounds += 1;
            inner.rounds == 1
        };
        self.renew_held(&by_name, &roots).await;
        self.give_back(share).await;
        if first {
            return Ok(());
        }
        // Replicas start at different points of the list, so they seldom race for one Lease.
        let offset = usize::from(digest(&self.identity).as_bytes()[0]) % roots.len().max(1);
        let room = share.saturating_sub(self.count());
        let free: Vec<(ResourceKey, String)> = roots
            .iter()
            .cycle()
            .skip(offset)
            .take(roots.len())
            .filter(|key| !self.lock().held.contains_key(*key))
            .map(|key| (key.clone(), root_lease_name(key)))
            .filter(|(_, name)| self.is_free(name, by_name.get(name)))
            .take(room)
            .collect();
        // All at once (16 in flight), as the renewals: taken one after another, a dead replica's
        // 68 roots took the two others 34 s under load where the Lease is 15 s (issue 41 item 4).
        let listed = &by_name;
        let takes = futures::stream::iter(free.into_iter().map(|(key, name)| async move {
            let result = self.take(&key, &name, listed.get(&name)).await;
            (key, name, result)
        }))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
        for (key, name, result) in takes {
            match result {
                Ok(true) => {
                    tracing::info!(root = %key, lease = %name, share, replicas = live, "took the root's Lease; reconciling it");
                    let _ = taken.send(ObjectRef::new(&key.name).within(&key.namespace));
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(root = %key, lease = %name, error = %crate::api::kube_error::Text(&e), "cannot take the root's Lease")
                }
            }
        }
        Ok(())
    }

    /// How many of `roots` the live replica holding fewest of them holds, this one left out
    /// (`None`: no other replica is alive).
    fn fewest_other(
        &self,
        listed: &BTreeMap<String, Lease>,
        roots: &[ResourceKey],
        live: &BTreeSet<String>,
    ) -> Option<usize> {
        let mut holding: BTreeMap<&str, usize> = live
            .iter()
            .filter(|i| **i != self.identity)
            .map(|i| (i.as_str(), 0))
            .collect();
        for key in roots {
            let holder = listed
                .get(&root_lease_name(key))
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.holder_identity.as_deref());
            if let Some(n) = holder.and_then(|h| holding.get_mut(h)) {
                *n += 1;
            }
        }
        holding.into_values().min()
    }

    /// Whether the Lease `name` may be taken: absent, released, or not renewed for its whole
    /// duration since we first saw its current renew time.
    fn is_free(&self, name: &str, lease: Option<&Lease>) -> bool {
        let Some(lease) = lease else { return true };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let Some(holder) = holder else { return true };
        if holder == self.identity {
            // Ours from an earlier term that we no longer count as held: retake it.
            return true;
        }
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.timing.lease_duration);
        self.observe(name, Some(holder), spec.renew_time).elapsed() >= duration
    }

    /// When the current holder and renew time of `name` were first seen.
    fn observe(&self, name: &str, holder: Option<String>, renew: Option<MicroTime>) -> Instant {
        let mut inner = self.lock();
        match inner.observed.get(name) {
            Some((h, r, at)) if *h == holder && *r == renew => *at,
            _ => {
                let at = Instant::now();
                inner.observed.insert(name.to_string(), (holder, renew, at));
                at
            }
        }
    }

    fn spec(&self, acquire: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.timing.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquire.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    fn meta(&self, name: &str, kind: &str, root: Option<&ResourceKey>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some([(LEASE_LABEL.to_string(), kind.to_string())].into()),
            annotations: root.map(|k| [(ROOT_KEY.to_string(), k.to_string())].into()),
            ..Default::default()
        }
    }

    /// Create or take over the Lease `name` of `key` (with its resourceVersion): `Ok(false)`
    /// when another replica won the race.
    async fn take(
        &self,
        key: &ResourceKey,
        name: &str,
        existing: Option<&Lease>,
    ) -> Result<bool, kube::Error> {
        let sent = Instant::now();
        let written = match existing {
            None => {
                let lease = Lease {
                    metadata: self.meta(name, "root", Some(key)),
                    spec: Some(self.spec(None, 0)),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(old) => {
                let mut lease = old.clone();
                let transitions = old
                    .spec
                    .as_ref()
                    .and_then(|s| s.lease_transitions)
                    .unwrap_or(0);
                lease.spec = Some(self.spec(None, transitions + 1));
                self.api.replace(name, &PostParams::default(), &lease).await
            }
        };
        match written {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(false),
            Err(e) => return Err(e),
        }
        let fence = WriteFence::closed();
        fence.open_until(sent + self.timing.renew_deadline);
        let root = match self.writers(&fence) {
            Ok(root) => root,
            Err(e) => {
                tracing::error!(root = %key, error = %e, "cannot build a client for the root; giving its Lease back");
                self.release(name).await;
                return Ok(false);
            }
        };
        self.lock().held.insert(
            key.clone(),
            Held {
                root,
                fence,
                lease: name.to_string(),
                last_renew: sent,
                early: first_renewal_early(self.timing.lease_duration / 3, name),
            },
        );
        Ok(true)
    }

    /// A client, an event publisher and impersonation behind `fence`.
    fn writers(&self, fence: &WriteFence) -> Result<HeldRoot, crate::apply::calls::ConnectError> {
        let (own, events, own_fence) = &self.own;
        let Some(config) = &self.cluster else {
            return Ok(HeldRoot {
                client: own.clone(),
                events: events.clone(),
                impersonation: Arc::new(Impersonation::new(
                    None,
                    own_fence.clone(),
                    self.api_timeout,
                )),
            });
        };
        let layer = FenceLayer {
            fence: fence.clone(),
            timeout: self.api_timeout,
        };
        let transport = {
            let mut transport = self.transport.lock().unwrap_or_else(|p| p.into_inner());
            match &*transport {
                Some(t) => t.clone(),
                None => {
                    let t = crate::apply::calls::pooled_transport(config)?;
                    transport.insert(t).clone()
                }
            }
        };
        let (client, _) = crate::apply::calls::client_over(&transport, layer);
        Ok(HeldRoot {
            events: events.with_client(client.clone()),
            impersonation: Arc::new(Impersonation::new(
                Some(Arc::clone(config)),
                fence.clone(),
                self.api_timeout,
            )),
            client,
        })
    }

    /// Renew every held Lease (its resourceVersion as listed); a Lease another replica holds
    /// now, or of a root that is gone, is dropped at once.
    async fn renew_held(&self, listed: &BTreeMap<String, Lease>, roots: &[ResourceKey]) {
        let held: Vec<(ResourceKey, String)> = self
            .lock()
            .held
            .iter()
            .map(|(k, h)| (k.clone(), h.lease.clone()))
            .collect();
        // A third of the duration between renewals: the fence stays open for two thirds, so a
        // failed renewal is tried again a few times before the fence shuts.
        let every = self.timing.lease_duration / 3;
        let mut due = Vec::new();
        for (key, name) in held {
            let ours = listed.get(&name).filter(|l| {
                l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                    == Some(self.identity.as_str())
            });
            let Some(lease) = ours else {
                self.drop_root(&key, "another replica holds its Lease now");
                continue;
            };
            if roots.binary_search(&key).is_err() {
                self.drop_root(&key, "the root is gone");
                self.release(&name).await;
                continue;
            }
            let is_due = self
                .lock()
                .held
                .get(&key)
                .is_none_or(|h| h.last_renew.elapsed() + h.early >= every);
            if !is_due {
                continue;
            }
            let mut renewed = lease.clone();
            let old = lease.spec.clone().unwrap_or_default();
            renewed.spec = Some(LeaseSpec {
                renew_time: Some(MicroTime(Timestamp::now())),
                ..old
            });
            due.push((key, name, renewed));
        }
        // All at once (16 in flight): one after another, a loaded API server made the last
        // renewals of a replica holding dozens of roots miss the renew deadline.
        let renewals =
            futures::stream::iter(due.into_iter().map(|(key, name, renewed)| async move {
                let sent = Instant::now();
                let result = self
                    .api
                    .replace(&name, &PostParams::default(), &renewed)
                    .await;
                (key, name, sent, result)
            }))
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
        for (key, name, sent, result) in renewals {
            match result {
                Ok(_) => {
                    if let Some(h) = self.lock().held.get_mut(&key) {
                        h.fence.open_until(sent + self.timing.renew_deadline);
                        h.last_renew = sent;
                        h.early = Duration::ZERO;
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    self.drop_root(&key, "its Lease changed under this replica")
                }
                Err(e) => {
                    tracing::warn!(root = %key, lease = %name, error = %crate::api::kube_error::Text(&e), "cannot renew the root's Lease; retrying")
                }
            }
        }
    }

    /// Stop reconciling `key`: its fence shuts, so whatever of its pass still runs writes nothing.
    fn drop_root(&self, key: &ResourceKey, why: &str) {
        if let Some(h) = self.lock().held.remove(key) {
            h.fence.close();
            tracing::warn!(root = %key, lease = %h.lease, "this replica stops reconciling the root: {why}");
        }
    }

    /// Give back the roots above `share` that are not in the middle of a pass.
    async fn give_back(&self, share: usize) {
        let extra: Vec<(ResourceKey, String)> = {
            let inner = self.lock();
            let over = inner.held.len().saturating_sub(share);
            let mut idle: Vec<(ResourceKey, String)> = inner
                .held
                .iter()
                .filter(|(k, _)| !inner.busy.contains(*k))
                .map(|(k, h)| (k.clone(), h.lease.clone()))
                .collect();
            idle.sort();
            idle.into_iter().rev().take(over).collect()
        };
        for (key, name) in extra {
            if let Some(h) = self.lock().held.remove(&key) {
                h.fence.close();
            }
            self.release(&name).await;
            tracing::info!(root = %key, lease = %name, share, "gave the root's Lease back to even out the replicas' shares");
        }
    }

    /// Clear our holder from the Lease `name` (with its resourceVersion), so another replica
    /// takes it at once.
    async fn release(&self, name: &str) {
        let Ok(Some(mut lease)) = self.api.get_opt(name).await else {
            return;
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        lease.spec = Some(spec);
        if let Err(e) = self.api.replace(name, &PostParams::default(), &lease).await {
            tracing::warn!(lease = name, error = %crate::api::kube_error::Text(&e), "cannot give the root's Lease back; it expires on its own");
        }
    }

    /// Shutdown: give every root back and delete this replica's own Lease.
    async fn release_all(&self) {
        let held: Vec<(ResourceKey, Held)> = self.lock().held.drain().collect();
        for (_, h) in &held {
            h.fence.close();
        }
        for (_, h) in held {
            self.release(&h.lease).await;
        }
        let _ = self
            .api
            .delete(
                &replica_lease_name(&self.identity),
                &DeleteParams::default(),
            )
            .await;
        tracing::info!("gave back every root's Lease");
    }

    /// Say this replica is alive: create or renew `weft-replica-<hash>`.
    async fn renew_replica(&self) -> Result<(), kube::Error> {
        let name = replica_lease_name(&self.identity);
        match self.api.get_opt(&name).await? {
            None => {
                let mut metadata = self.meta(&name, "replica", None);
                metadata.annotations = self.replica_annotations(BTreeMap::new());
                let lease = Lease {
                    metadata,
                    spec: Some(self.spec(None, 0)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                let acquire = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
                lease.spec = Some(self.spec(acquire, 0));
                let annotations = lease.metadata.annotations.take().unwrap_or_default();
                lease.metadata.annotations = self.replica_annotations(annotations);
                self.api
                    .replace(&name, &PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
        }
    }

    /// The replica Lease's annotations: `annotations` with this replica's hooks URL, or without
    /// one when it publishes none (a predecessor's does not linger).
    fn replica_annotations(
        &self,
        mut annotations: BTreeMap<String, String>,
    ) -> Option<BTreeMap<String, String>> {
        match &self.hooks_url {
            Some(url) => annotations.insert(HOOKS_URL_ANNOTATION.to_string(), url.clone()),
            None => annotations.remove(HOOKS_URL_ANNOTATION),
        };
        (!annotations.is_empty()).then_some(annotations)
    }

    /// The identities of the replicas whose own Lease is fresh (this one included); the Leases
    /// of replicas dead for two lease durations are deleted (their resourceVersion as a
    /// precondition).
    async fn live_replicas(&self, listed: &BTreeMap<String, Lease>) -> BTreeSet<String> {
        let own = replica_lease_name(&self.identity);
        let mut live = BTreeSet::from([self.identity.clone()]);
        for (name, lease) in listed {
            if name == &own || !is_replica(lease) {
                continue;
            }
            let spec = lease.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.clone();
            let seen = self.observe(name, holder.clone(), spec.renew_time);
            let duration = self.timing.lease_duration;
            if seen.elapsed() < duration {
                live.extend(holder.filter(|h| !h.is_empty()));
            } else if seen.elapsed() >= duration * 2 {
                let pre = DeleteParams {
                    preconditions: Some(Preconditions {
                        resource_version: lease.resource_version(),
                        uid: None,
                    }),
                    ..Default::default()
                };
                if self.api.delete(name, &pre).await.is_ok() {
                    tracing::info!(lease = %name, "deleted the Lease of a replica gone for two lease durations");
                    self.lock().observed.remove(name);
                }
            }
        }
        live
    }
}

fn is_replica(lease: &Lease) -> bool {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LEASE_LABEL))
        .is_some_and(|v| v == "replica")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> ResourceKey {
        ResourceKey {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn two_roots_never_share_a_lease_name() {
        // `a-b/c` and `a/b-c` would both be `weft-root-a-b-c` with a dash between.
        assert_ne!(
            root_lease_name(&key("a-b", "c")),
            root_lease_name(&key("a", "b-c"))
        );
        assert_eq!(
            root_lease_name(&key("team-a", "apps")),
            "weft-root-team-a.apps"
        );
        let long = "x".repeat(250);
        let hashed = root_lease_name(&key("team-a", &long));
        assert!(
            hashed.len() <= MAX_NAME && hashed.starts_with("weft-root-"),
            "{hashed}"
        );
        assert_ne!(hashed, root_lease_name(&key("team-b", &long)));
    }

    #[test]
    fn roots_taken_together_are_renewed_in_different_rounds() {
        // The bench's 200 roots, taken in one round: the round of each one's first renewal, as
        // `renew_held` checks it every retry period (`lease_duration / 7`).
        let lease = Duration::from_secs(15);
        let (every, retry) = (lease / 3, LeaseConfig::new("w", "me", lease).retry_period);
        let mut rounds = [0usize; 4];
        for i in 0..200 {
            let name = root_lease_name(&key(&format!("bench-b{i:03}"), &format!("b{i:03}")));
            let early = first_renewal_early(every, &name);
            assert!(early < every, "{name}: {early:?}");
            let first = (1..=3u32).find(|k| retry * *k + early >= every).unwrap();
            rounds[first as usize] += 1;
        }
        // A third or so in each of the three rounds, none empty (all in round 3 without it).
        assert!(
            rounds[1..].iter().all(|&n| (45..=90).contains(&n)),
            "{rounds:?}"
        );
    }

    #[test]
    fn two_hundred_roots_split_evenly_over_three_replicas() {
        assert_eq!(fair_share(200, 3), 68);
        assert!(fair_share(200, 3) * 3 >= 200);
        // One replica dies: the two others can hold every root.
        assert!(fair_share(200, 2) * 2 >= 200);
        assert_eq!(fair_share(12, 3), 5);
        assert_eq!(fair_share(0, 3), 1);
        assert_eq!(fair_share(5, 0), 6);
    }

    #[test]
    fn the_slack_goes_while_another_replica_is_short_of_roots() {
        // Thirteen roots on three replicas: six each at most, five while one holds under four.
        assert_eq!(share_now(13, 3, Some(1)), 5);
        assert_eq!(share_now(13, 3, Some(3)), 5);
        assert_eq!(share_now(13, 3, Some(4)), 6);
        // Alone, or with nobody short: the slack stays.
        assert_eq!(share_now(13, 1, None), 14);
        assert_eq!(share_now(200, 3, Some(66)), 68);
        assert_eq!(share_now(200, 3, Some(64)), 67);
        // A replica that just joined holds none: the others come down to an even split's ceiling.
        assert_eq!(share_now(12, 3, Some(0)), 4);
        assert_eq!(share_now(0, 3, Some(0)), 1);
    }
}
