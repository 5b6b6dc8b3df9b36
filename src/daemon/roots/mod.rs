//! The Root controller (issue 41): roots as custom resources (`weft.io/v1alpha1` `Root`), one
//! kube-runtime `Controller` reconciling each — never two reconciles of one root at once, a
//! bounded number of roots at once (`--root-concurrency`), a requeue at the root's
//! `spec.interval`, exponential back-off after a failed pass.
//!
//! - [`reconcile`](mod@reconcile): what one reconcile decides (flag root, suspend, identity,
//!   `dependsOn`, whether a pass is due) and the pass itself (fetch → `pass::run_pass`);
//! - [`status`]: the root's status as a function of what the reconcile found, written only
//!   when it changed, and its events;
//! - [`depends`]: `dependsOn` readiness and cycles, pure;
//! - [`identity`]: whom a root's pass acts as (Weft, or its ServiceAccount by impersonation),
//!   and a root another root declared acting as that root's identity at most;
//! - [`brought`]: what a root's pass says on the WeaveClouds it applied (their agents are
//!   applied by the pass, as the root's identity).
//! - [`lease`]: which roots this replica reconciles (a Lease per root, split between replicas).
//! - [`ahead`]: the flag root's Root applies a push's changed objects before its full pass.
//! - [`source`]: a root's git source, its credentials and semver tags.
//! - [`repository`]: the fetch of a source (a git cache per root, or a local directory).
//! - [`conflict`]: what a root says of the objects another root holds.
//! - [`legacy`]: the root record of a Weft from before Roots, read to carry a cluster over.
//! - [`answer`]: the flag root's Root answering requests that name no Root (`?wait=true`, the
//!   status).
//! - [`once`]: one pass of a Root outside the controller (`weft sync root NAME`).
//!
//! The root the `weft run --repo` flags drive (`--root-name` in Weft's namespace) is a Root object
//! too ([`flag`]: created from the flags when missing): this controller reconciles it like any
//! other root.

pub mod ahead;
pub mod answer;
mod asked;
pub mod brought;
pub mod conflict;
pub mod depends;
pub mod flag;
pub mod identity;
pub mod lease;
mod lease_plan;
pub mod legacy;
pub mod once;
pub mod pushes;
pub mod reconcile;
pub mod repository;
pub mod requests;
pub mod settings;
pub mod shard;
pub mod source;
pub mod status;
pub mod waiting;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::GroupVersionKind;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;

use super::shutdown::Shutdown;
use super::state::DaemonState;
use crate::api::root::Root;
use crate::api::ResourceKey;
use crate::pass::PassSettings;
use repository::RootSource;

/// How the Root controller works (`weft run` flags).
#[derive(Clone, Debug)]
pub struct RootsConfig {
    /// Roots reconciled at the same time (`--root-concurrency`).
    pub concurrency: u16,
    /// The daemon's cluster configuration, from which clients acting as a root's
    /// ServiceAccount are built; `None`: roots with `serviceAccountName` cannot run.
    pub cluster: Option<kube::Config>,
    /// The deadline of each API call (`--api-timeout`).
    pub api_timeout: Duration,
    /// Where the roots' repositories are cached (one directory per root under it).
    pub git_cache_dir: Option<PathBuf>,
    /// The deadline of one fetch (`--fetch-timeout`).
    pub fetch_timeout: Duration,
    /// The account of its own namespace a Root without `serviceAccountName` acts as
    /// (`--default-service-account`).
    pub default_service_account: Option<String>,
    /// Whether a Root's `dependsOn` may name another namespace's root
    /// (`--no-cross-namespace-refs` says no).
    pub cross_namespace_refs: bool,
    /// This replica's identity on the roots' Leases (the leader Lease's).
    pub identity: String,
    /// How long a root's Lease stays valid without renewal (`--lease-duration`).
    pub lease_duration: Duration,
    /// The git credentials of the flag root's Root when its spec names no Secret: the
    /// daemon's own, from the files of `WEFT_GIT_CREDENTIALS_DIR` (read once at start, as the
    /// flag loop reads them). No other root ever uses them.
    pub flag_credentials: Option<crate::source::git::auth::Credentials>,
    /// Where the flag root's Root caches its repository: the flag loop's cache
    /// (`<cache-dir>/git`; `None`: the default cache directory), so the migration fetches
    /// incrementally into the cache the loop filled and the cache stays where operators sized it.
    pub flag_cache_dir: Option<PathBuf>,
    /// The URL of this replica's hooks port (the leader Lease's), published on its replica
    /// Lease: the replica a push reaches passes it on here for the roots this one holds.
    pub hooks_url: Option<String>,
}

impl Default for RootsConfig {
    fn default() -> Self {
        RootsConfig {
            concurrency: 4,
            cluster: None,
            api_timeout: crate::apply::calls::DEFAULT_API_TIMEOUT,
            git_cache_dir: None,
            fetch_timeout: Duration::from_secs(120),
            default_service_account: None,
            cross_namespace_refs: true,
            identity: super::leader::default_identity(),
            lease_duration: Duration::from_secs(15),
            flag_credentials: None,
            flag_cache_dir: None,
            hooks_url: None,
        }
    }
}

/// Why a reconcile of a root failed (retried with exponential back-off).
#[derive(Debug, thiserror::Error)]
pub enum RootsError {
    #[error("Root {root}: {action}: {}", crate::apply::describe(.source).0)]
    Kube {
        root: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    /// The pass failed; its status says why.
    #[error("Root {root}: {message}")]
    Pass { root: String, message: String },
    /// Watching the root for an answer failed.
    #[error("Root {root}: waiting for its answer: {message}")]
    Wait { root: String, message: String },
}

/// The shortest and longest wait after a failed pass.
const BACKOFF_MIN: Duration = Duration::from_secs(5);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// How often a root waiting for its dependencies looks again.
pub const DEPENDENCY_RETRY: Duration = Duration::from_secs(5);

/// What the controller remembers of one root between reconciles (lost on restart: then every
/// root passes once, which writes nothing where nothing drifted).
#[derive(Default)]
struct Memory {
    /// When the next pass is due.
    due: Option<Instant>,
    /// Failed passes in a row.
    failures: u32,
    /// The root's source, and what it was opened from.
    source: Option<(source::SourceKey, RootSource)>,
    /// What is kept of the last snapshot fetched (an unchanged head applies it again): its
    /// revision, for a git source.
    last: Option<repository::LastFetched>,
    /// What the last pass rendered from it, applied again by a pass of the same revision,
    /// generation and default namespace when it is self-contained (plain manifests and
    /// overlays); the flag root's Root keeps any render, for the early apply of a push
    /// ([`ahead`]).
    rendered: Option<Rendered>,
}

/// A pass's render kept in a root's [`Memory`].
struct Rendered {
    set: Arc<crate::render::DesiredSet>,
    diagnostics: crate::load::Diagnostics,
    /// The Root's `metadata.generation` it was rendered for.
    generation: Option<i64>,
    /// The namespace of its manifests without one (a Root's annotation may name it, which
    /// moves no generation).
    default_namespace: String,
}

/// What the controller shares between reconciles.
pub struct Context {
    state: DaemonState,
    /// The daemon's pass settings; each root's pass starts from them.
    settings: Arc<PassSettings>,
    config: RootsConfig,
    shutdown: Shutdown,
    /// The root the `weft run` flags drive (`--root-name` in Weft's namespace).
    flag_root: ResourceKey,
    /// `--shards N`: the flag root's Root is passed in parts, one per shard Lease holder.
    flag_shards: u32,
    store: Option<Store<Root>>,
    /// The roots this replica holds (set when the controller starts).
    leases: Option<Arc<lease::RootLeases>>,
    memory: Mutex<HashMap<ResourceKey, Memory>>,
    /// When this replica first saw each root's current request to pass (its `requested-at`).
    seen: Arc<asked::RequestsSeen>,
}

impl Context {
    pub fn new(
        state: DaemonState,
        settings: Arc<PassSettings>,
        config: RootsConfig,
        shutdown: Shutdown,
    ) -> Context {
        Context {
            flag_root: ResourceKey {
                namespace: settings.weft_namespace.clone(),
                name: settings.root_name.clone(),
            },
            flag_shards: 1,
            state,
            settings,
            config,
            shutdown,
            store: None,
            leases: None,
            memory: Mutex::default(),
            seen: Arc::default(),
        }
    }

    /// The flag root's shard count (`--shards`).
    pub fn with_flag_shards(mut self, shards: u32) -> Context {
        self.flag_shards = shards.max(1);
        self
    }

    /// Whether `key` is the flag root's Root split into shards: each shard Lease's holder
    /// passes its part (see [`shard`]), and no root Lease is held for it.
    pub(super) fn flag_sharded(&self, key: &ResourceKey) -> bool {
        *key == self.flag_root && self.flag_shards > 1
    }

    fn with_memory<T>(&self, key: &ResourceKey, f: impl FnOnce(&mut Memory) -> T) -> T {
        let mut all = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        f(all.entry(key.clone()).or_default())
    }

    /// The time until `key`'s next pass is due; `None`: due now.
    fn remaining(&self, key: &ResourceKey) -> Option<Duration> {
        self.with_memory(key, |m| m.due)
            .and_then(|due| due.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }

    /// A pass succeeded: the next one is due after `interval`.
    fn succeeded(&self, key: &ResourceKey, interval: Duration) {
        self.with_memory(key, |m| {
            m.failures = 0;
            m.due = Some(Instant::now() + interval);
        });
    }

    /// A pass failed: the next one is due after an exponential back-off (5s, 10s, 20s, … at
    /// most the interval and five minutes); returns it.
    fn failed(&self, key: &ResourceKey, interval: Duration) -> Duration {
        self.with_memory(key, |m| {
            m.failures = m.failures.saturating_add(1);
            let delay = backoff(m.failures, interval);
            m.due = Some(Instant::now() + delay);
            delay
        })
    }

    /// The writers of `key` while this replica holds its Lease; `None`: another replica's.
    fn held(&self, key: &ResourceKey) -> Option<(lease::HeldRoot, lease::Busy<'_>)> {
        let leases = self.leases.as_ref()?;
        if self.flag_sharded(key) {
            return shard::held(&self.state, self.config.api_timeout)
                .map(|h| (h, leases.busy(key)));
        }
        let held = leases.held(key)?;
        Some((held, leases.busy(key)))
    }

    fn forget(&self, key: &ResourceKey) {
        self.memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// The wait after the `failures`-th failed pass in a row.
pub fn backoff(failures: u32, interval: Duration) -> Duration {
    let doubled = BACKOFF_MIN.saturating_mul(1u32 << failures.saturating_sub(1).min(10));
    doubled.min(BACKOFF_MAX).min(interval.max(BACKOFF_MIN))
}

/// The Root kind, as discovery names it.
fn gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("weft.io", "v1alpha1", "Root")
}

/// Wait until the API server serves the Root CRD (checked every 2 s: the leader installs it when
/// it is missing, see `flag::adopt`), then run the controller until the daemon is asked to stop.
pub async fn run(mut ctx: Context) {
    let client = ctx.state.client().clone();
    let shutdown = ctx.shutdown.clone();
    let mut announced = false;
    // The leader installs the Root CRD for the flag root's Root (`flag::adopt`) moments after
    // the start: look soon, then less and less often.
    let mut wait = Duration::from_secs(1);
    loop {
        match kube::discovery::pinned_kind(&client, &gvk()).await {
            Ok(_) => break,
            Err(e) => {
                if !announced {
                    tracing::info!(error = %crate::apply::describe(&e).0, "the Root CRD is not served yet; the Root controller starts once it is (the leader installs it, or `kubectl apply --server-side -f deploy/crds.yaml`)");
                    announced = true;
                }
            }
        }
        tokio::select! {
            _ = shutdown.stopped() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(Duration::from_secs(30));
    }
    let concurrency = ctx.config.concurrency.max(1);
    // With `--watch-namespaces`, one watch per namespace: a Weft with only a Role in each gets
    // no cluster-wide list (and no 403 retried forever).
    let (reader, writer) = kube::runtime::reflector::store();
    let seen = Arc::clone(&ctx.seen);
    let roots = crate::apply::watch::watch_in::<Root>(
        &client,
        ctx.state.watch_namespaces().names(),
        watcher::Config::default(),
    )
    .reflect(writer)
    .inspect(move |event| match event {
        Ok(watcher::Event::Apply(root) | watcher::Event::InitApply(root)) => seen.saw(root),
        Ok(watcher::Event::Delete(root)) => seen.forget(root),
        _ => {}
    })
    .touched_objects();
    let controller = Controller::for_stream(roots, reader).with_config(
        kube::runtime::controller::Config::default()
            .debounce(Duration::from_millis(300))
            .concurrency(concurrency),
    );
    ctx.store = Some(controller.store());
    // Which roots this replica reconciles: those whose Lease it holds; a Lease taken makes its
    // root reconcile at once.
    let unleased = ctx
        .flag_sharded(&ctx.flag_root)
        .then(|| ctx.flag_root.clone());
    let leases = Arc::new(
        lease::RootLeases::new(
            client.clone(),
            ctx.state.events().clone(),
            ctx.state.fence().clone(),
            &ctx.settings.weft_namespace,
            &ctx.config.identity,
            ctx.config.lease_duration,
            ctx.config.cluster.clone(),
            ctx.config.api_timeout,
        )
        .without(unleased)
        .with_flag_root(ctx.flag_root.clone())
        .publishing(ctx.config.hooks_url.clone()),
    );
    ctx.leases = Some(Arc::clone(&leases));
    let (taken_tx, taken_rx) = tokio::sync::mpsc::unbounded_channel();
    let (stop_leases, leases_stopped) = tokio::sync::oneshot::channel();
    let lease_task =
        tokio::spawn(Arc::clone(&leases).run(controller.store(), taken_tx, leases_stopped));
    let taken = futures::stream::unfold(taken_rx, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    // A push, a sync request or a chart's drift makes the controller look at the roots it made
    // due, each alone: a burst of 200 requests is 200 reconciles, not 200 times every root.
    let holding = Arc::clone(&leases);
    let (state, sharded) = (
        ctx.state.clone(),
        ctx.flag_sharded(&ctx.flag_root)
            .then(|| ctx.flag_root.clone()),
    );
    let holds: pushes::Holds = Box::new(move |key| match &sharded {
        Some(flag) if flag == key => state.shard_claim().is_some(),
        _ => holding.held(key).is_some(),
    });
    let located = Arc::clone(&leases);
    let holder_of: pushes::HolderOf = Box::new(move |key| located.holder_url(key));
    let pushes = ctx
        .state
        .root_pushes()
        .connect(controller.store(), holds, holder_of);
    let pushes =
        futures::stream::unfold(
            pushes,
            |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
        );
    tracing::info!(
        concurrency,
        "reconciling the Roots whose Lease this replica holds"
    );
    controller
        .reconcile_on(pushes)
        .reconcile_on(taken)
        .graceful_shutdown_on(async move { shutdown.stopped().await })
        .run(reconcile::reconcile, error_policy, Arc::new(ctx))
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "Root controller event");
            }
        })
        .await;
    // The running passes finished (or were abandoned): give the roots to the other replicas.
    let _ = stop_leases.send(());
    if lease_task.await.is_err() {
        tracing::warn!("the roots' Lease task ended abnormally; their Leases expire on their own");
    }
}

/// After a failed reconcile: wait the back-off the reconcile recorded (or the shortest).
fn error_policy(root: Arc<Root>, err: &RootsError, ctx: Arc<Context>) -> Action {
    let key = depends::key_of(&root);
    tracing::warn!(root = %key, error = %err, "Root reconcile failed; retrying");
    ctx.state
        .metrics()
        .count_reconcile(crate::daemon::metrics::ROOT_KIND, "error");
    let wait = ctx.remaining(&key).unwrap_or_else(|| {
        let interval = root.spec.interval();
        ctx.failed(&key, interval)
    });
    Action::requeue(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_five_seconds_up_to_the_interval_or_five_minutes() {
        let hour = Duration::from_secs(3600);
        let waits: Vec<u64> = (1..=8).map(|f| backoff(f, hour).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff(5, Duration::from_secs(30)), Duration::from_secs(30));
        assert_eq!(backoff(1, Duration::from_secs(1)), BACKOFF_MIN);
        assert_eq!(backoff(u32::MAX, hour), BACKOFF_MAX);
    }
}
