//! The daemon's work, once its state is built: wait for the leader Lease, then make the flag root
//! its Root object (`roots::flag`), which answers requests that name no Root, and run (unless
//! disabled) the custom resource controllers and the agent updater; stop them in order when
//! asked: stop taking work → stop the controllers → release the Lease.
//!
//! The Root controller is not part of a term: it runs on every replica from start to stop, each
//! reconciling the roots whose own Lease it holds (`roots::lease`).
//!
//! The HTTP server is the caller's (`weft run` starts it beside the daemon with the same
//! [`DaemonState`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::leader::{LeaderElector, LeaderError, LeaseConfig};
use super::shards;
use super::shards::ShardClaim;
use super::shutdown::Shutdown;
use super::state::DaemonState;
use super::updater::{UpdateOptions, Updater};
use super::{armada, weavecloud};
use crate::pass::PassSettings;
use crate::render::shard::{shard_root_name, Shard};

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("leadership lost: {0}; stopping so that only one replica works")]
    LeadershipLost(#[source] LeaderError),
    #[error("refusing to start: {0}")]
    Claimed(#[source] Box<LeaderError>),
    #[error("leadership lost: the Lease holder task failed: {0}")]
    LeaseTask(#[source] tokio::task::JoinError),
    #[error("refusing to start: {0}")]
    FlagRoot(#[source] Box<super::roots::flag::FlagRootError>),
}

/// How the daemon works (the flags of `weft run` that are not the HTTP server's).
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// The poll timer.
    pub interval: Duration,
    pub lease_duration: Duration,
    /// How long a running pass may go on after a stop request.
    pub shutdown_grace: Duration,
    /// Identity in the Lease.
    pub identity: String,
    /// Run the custom resource controllers (WeaveCloud, ArmadaChart) and the agent updater.
    pub controllers: bool,
    /// The settings of every pass of the root, the controllers and the updater (embedded, not
    /// copied: `pass.weft_namespace` is Weft's namespace, of the Lease, inventories and cached
    /// bundles; `pass.root_name` the root's).
    pub pass: Arc<PassSettings>,
    /// Which agent channels a WeaveCloud may name (`--allowed-channels`).
    pub allowed_channels: crate::source::fetch_policy::ChannelPolicy,
    /// What this installation syncs, recorded on its Lease (see [`LeaseConfig::claim`]).
    pub claim: Option<String>,
    /// The URL of the hooks port, published on the Lease while leading.
    pub hooks_url: Option<String>,
    /// Where agent channels are cached (`--cache-dir`/channels; default under the user's cache).
    pub channel_cache_dir: Option<std::path::PathBuf>,
    /// Split the root into this many shards, one per replica (`--shards`; 1: no sharding).
    pub shards: u32,
    /// The Root controller's settings (`--root-concurrency`, the impersonation config).
    pub roots: super::roots::RootsConfig,
    /// `--switch-repository`: this daemon may switch the root to its repository (see
    /// [`LeaseConfig::switching`]).
    pub switch_repository: bool,
    /// The flag root, as the Root object the Root controller reconciles (see `roots::flag`);
    /// `None` only where no flag root is run (then the daemon runs the controllers alone).
    pub root_object: Option<super::roots::flag::FlagRoot>,
}

/// The daemon: the sync root, the controllers and the updater over one [`DaemonState`].
pub struct Daemon {
    config: DaemonConfig,
    state: DaemonState,
}

impl Daemon {
    pub fn new(config: DaemonConfig, state: DaemonState) -> Daemon {
        Daemon { config, state }
    }

    /// The state shared with the HTTP server.
    pub fn state(&self) -> &DaemonState {
        &self.state
    }

    /// Wait for the Lease, then work until `stop` is cancelled (`Ok`). Leadership lost (a Lease
    /// that could not be renewed in time, another replica that took it) ends the term: the work
    /// stops, the fence is shut, and the replica stands by for the Lease again, in the same
    /// process — an API server or etcd outage must not become a crash loop.
    pub async fn run(self, stop: CancellationToken) -> Result<(), DaemonError> {
        let Daemon { config, state } = self;
        // A first `weft run` on a cluster where Weft was never installed: its Leases, records
        // and inventories live in Weft's namespace, created here when missing.
        if let Err(e) =
            crate::apply::inventory::ensure_namespace(state.client(), &config.pass.weft_namespace)
                .await
        {
            tracing::warn!(
                "Weft's namespace {} is missing and could not be created ({e}); create it (`kubectl create namespace {}`) or run `weft install`",
                config.pass.weft_namespace,
                config.pass.weft_namespace
            );
        }
        let lease = LeaseConfig::new(
            &config.pass.weft_namespace,
            &config.identity,
            config.lease_duration,
        )
        .for_root(&config.pass.root_name)
        .claiming(config.claim.clone())
        .switching(&config.pass.root_name, config.switch_repository)
        .publishing(config.hooks_url.clone());
        // `--root-object`: a Root of another source is refused before anything is written, and
        // so is a cluster without the Root CRD. A live installation of another repository on
        // this root's Lease is said first (it names that installation).
        let flag_object = config.root_object.is_some();
        if let Some(flags) = config.root_object.as_ref() {
            match LeaderElector::new(state.client().clone(), lease.clone())
                .check_live_claim()
                .await
            {
                Err(e @ LeaderError::Claimed { .. }) => {
                    return Err(DaemonError::Claimed(Box::new(e)))
                }
                // The election says it again, and retries.
                Err(e) => tracing::debug!(error = %e, "cannot read the leader Lease yet"),
                Ok(()) => {}
            }
            super::roots::flag::check(state.client(), flags, config.switch_repository)
                .await
                .map_err(|e| DaemonError::FlagRoot(Box::new(e)))?;
        }
        // The Root controller runs on every replica, leader or not: each reconciles the roots
        // whose own Lease it holds (`roots::lease`), so several replicas work at once. With
        // `--root-object` it reconciles the flag root's Root too (the leader creates it).
        let roots = (config.controllers || flag_object).then(|| {
            let mut roots_config = config.roots.clone();
            roots_config.identity.clone_from(&config.identity);
            roots_config.lease_duration = config.lease_duration;
            roots_config.hooks_url.clone_from(&config.hooks_url);
            let ctx = super::roots::Context::new(
                state.clone(),
                Arc::clone(&config.pass),
                roots_config,
                Shutdown::new(stop.clone(), config.shutdown_grace),
            )
            .with_flag_shards(config.shards);
            tokio::spawn(super::roots::run(ctx))
        });
        let result = elect_and_lead(&config, &state, &lease, &stop).await;
        if let Some(roots) = roots {
            if result.is_ok() {
                // Stopping: the Root controller finishes (or abandons) its passes, then gives
                // its roots' Leases back.
                let wait = config.shutdown_grace + Duration::from_secs(10);
                if tokio::time::timeout(wait, roots).await.is_err() {
                    tracing::warn!("the Root controller did not stop in time; its roots' Leases expire on their own");
                }
            } else {
                roots.abort();
            }
        }
        result
    }
}

/// Stand by for the leader (or a shard's) Lease, lead, and again after a lost term, until
/// `stop`.
async fn elect_and_lead(
    config: &DaemonConfig,
    state: &DaemonState,
    lease: &LeaseConfig,
    stop: &CancellationToken,
) -> Result<(), DaemonError> {
    loop {
        let held = if config.shards > 1 {
            shards::acquire(state, lease, config.shards, stop)
                .await
                .map_err(|e| DaemonError::Claimed(Box::new(e)))?
        } else {
            let mut elector = LeaderElector::new(state.client().clone(), lease.clone())
                .with_fence(state.fence().clone());
            elector
                .acquire(stop)
                .await
                .map_err(|e| DaemonError::Claimed(Box::new(e)))?
                .then_some((elector, Shard::WHOLE))
        };
        let Some((elector, shard)) = held else {
            return Ok(());
        };
        match lead(config, state, elector, shard, stop.clone()).await {
            Term::Stopped => return Ok(()),
            Term::Refused(why) => return Err(why),
            Term::Lost(why) => {
                tracing::warn!(error = %why, "standing by for the leader Lease again");
                state.metrics().count_leadership_lost();
            }
        }
    }
}

/// How a term as leader ended.
enum Term {
    /// Asked to stop: the work finished (or was abandoned) and the Lease was released.
    Stopped,
    /// Leadership was lost: every task of the term was stopped and the fence shut.
    Lost(DaemonError),
    /// The term cannot do its work on this cluster (said in the error); the Lease was released.
    Refused(DaemonError),
}

/// One term as leader: the flag root's Root made and its requests taken, and (unless
/// disabled) the custom resource controllers and the agent updater, until `stop` or until the
/// Lease is lost.
async fn lead(
    config: &DaemonConfig,
    state: &DaemonState,
    elector: LeaderElector,
    shard: Shard,
    stop: CancellationToken,
) -> Term {
    tracing::info!(identity = %config.identity, lease = %elector.config().name, shard = shard.index, shards = shard.count, "acquired the Lease; reconciling");
    // The shard's sync-root owner: the root's own name for shard 0 (and an unsharded root).
    let mut config = config.clone();
    let base_root = config.pass.root_name.clone();
    Arc::make_mut(&mut config.pass).root_name = shard_root_name(&base_root, shard.index);
    let config = &config;
    // Requests that name no Root are answered by the flag root's Root from now on.
    state
        .root_pushes()
        .flag()
        .open(config.root_object.as_ref().map(|f| f.key.clone()));
    state.set_leader(true);
    state.set_shard(Some(ShardClaim {
        shard,
        root_name: base_root.clone(),
        weft_namespace: config.pass.weft_namespace.clone(),
    }));

    // Keep renewing until told to release (after the work has stopped), or until lost.
    let release = CancellationToken::new();
    let mut elector = elector;
    let mut holder = tokio::spawn({
        let release = release.clone();
        async move {
            let held = elector.hold(&release).await;
            (elector, held)
        }
    });
    let shutdown = Shutdown::new(stop, config.shutdown_grace);
    // The flag root is its Root object, passed by the Root controller: this term makes it one
    // (retrying while the API server refuses); requests that name no Root are its (see
    // `roots::answer`). A cluster where it cannot be one (no Root CRD, and no right to install it) ends the daemon.
    let (fatal_tx, mut fatal_rx) = tokio::sync::oneshot::channel();
    let root_task = tokio::spawn({
        let (config, state) = (config.clone(), state.clone());
        async move {
            if let Err(e) = flag_root_object(&config, &state, shard).await {
                let _ = fatal_tx.send(e);
            }
        }
    });
    let controllers = config
        .controllers
        .then(|| start_controllers(state, config, &shutdown));

    // Wait for the stop request, for the Lease holder to give up, or for a refusal.
    let mut fatal = None;
    let lost = tokio::select! {
        _ = shutdown.stopped() => None,
        joined = &mut holder => Some(match joined {
            Ok((_, Err(why))) => DaemonError::LeadershipLost(why),
            Ok((_, Ok(()))) => DaemonError::LeadershipLost(LeaderError::TakenOver),
            Err(e) => DaemonError::LeaseTask(e),
        }),
        Ok(e) = &mut fatal_rx => {
            fatal = Some(DaemonError::FlagRoot(Box::new(e)));
            None
        }
    };
    state.root_pushes().flag().close();
    if let Some(why) = lost {
        // The elector shut the fence: whatever still runs (a pass on a blocking thread, a
        // controller) can no longer write.
        state.fence().close();
        state.set_leader(false);
        state.set_shard(None);
        tracing::error!(error = %why, "leadership lost; stopping this term's work");
        root_task.abort();
        for task in controllers.into_iter().flatten() {
            task.abort();
        }
        return Term::Lost(why);
    }
    // Making the flag root's Root stops retrying once requests are closed (the Root controller
    // finishes or abandons its own pass, see `Daemon::run`).
    if root_task.await.is_err() {
        tracing::warn!("making the flag root's Root object ended abnormally");
    }
    for task in controllers.into_iter().flatten() {
        if tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .is_err()
        {
            tracing::warn!("a controller did not stop within 10s");
        }
    }
    release.cancel();
    if let Ok((mut elector, _)) = holder.await {
        elector.release().await;
    }
    state.set_leader(false);
    state.set_shard(None);
    match fatal {
        Some(e) => Term::Refused(e),
        None => Term::Stopped,
    }
}

/// Make the flag root its Root object (created from the flags and the root record when
/// missing); its key. A refusal of the API server is retried with back-off (said in the log)
/// until the term stops taking requests (`None`); a cluster without the Root CRD that this daemon may
/// not install, or a Root of another source, is an error. Sharded, every shard's holder passes its part of the
/// Root (see `roots::shard`).
async fn flag_root_object(
    config: &DaemonConfig,
    state: &DaemonState,
    shard: Shard,
) -> Result<Option<crate::api::ResourceKey>, super::roots::flag::FlagRootError> {
    use super::roots::flag::FlagRootError;
    let Some(flags) = config.root_object.as_ref() else {
        return Ok(None);
    };
    let mut delay = Duration::from_secs(1);
    loop {
        match super::roots::flag::adopt(state.client(), flags, config.switch_repository).await {
            Ok(done) => {
                tracing::info!(root = %flags.key, adopted = done.as_str(), shard = shard.index, shards = shard.count, "the flag root is reconciled as its Root object");
                if shard.count > 1 {
                    // A shard is held through its shard Lease, not the Root's: nothing else
                    // tells the controller that this replica passes the Root's part now.
                    tokio::spawn(wake_when_known(state.clone(), flags.key.clone()));
                }
                return Ok(Some(flags.key.clone()));
            }
            Err(e @ (FlagRootError::NoCrdInstalled { .. } | FlagRootError::Differs { .. })) => {
                return Err(e)
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in_seconds = delay.as_secs(), "the flag root's Root cannot be made yet; nothing of it is passed until it is");
            }
        }
        let until = tokio::time::Instant::now() + delay;
        while tokio::time::Instant::now() < until {
            if state.root_pushes().flag().is_closed() {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Ask the Root controller for a pass of `key` as soon as its cache has the Root (at most ten
/// seconds: then the Root is not served, which its reconcile would say).
async fn wake_when_known(state: DaemonState, key: crate::api::ResourceKey) {
    let start = tokio::time::Instant::now();
    while !state.root_pushes().wake(&key) && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Start the WeaveCloud controller (its reconcile checks for agent updates) and the ArmadaChart
/// controller; they run until `shutdown` says stop.
fn start_controllers(
    state: &DaemonState,
    config: &DaemonConfig,
    shutdown: &Shutdown,
) -> Vec<JoinHandle<()>> {
    let settings = &config.pass;
    let updater = Updater::new(
        state.clone(),
        UpdateOptions {
            health_timeout: settings.timeout,
            allowed_channels: config.allowed_channels.clone(),
            // Roll-outs honour --max-prune-fraction, --force-prune and --concurrency.
            pass: Arc::clone(settings),
            channel: crate::source::channel::ChannelOptions {
                git_cache_dir: config.channel_cache_dir.clone().unwrap_or_else(|| {
                    crate::source::channel::ChannelOptions::default().git_cache_dir
                }),
                ..Default::default()
            },
        },
    )
    .with_shutdown(shutdown.clone());
    let wc = weavecloud::Context::new(state.clone(), Arc::clone(settings), shutdown.clone())
        .with_updater(Arc::new(updater));
    let root = crate::render::Owner::root(&settings.weft_namespace, &settings.root_name);
    let charts = armada::Context::new(state.clone(), shutdown.clone()).for_root(root);
    vec![
        tokio::spawn(weavecloud::run(wc)),
        tokio::spawn(armada::run(charts)),
    ]
}
