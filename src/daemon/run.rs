//! `weft run`: the daemon. Wires the HTTP server, leader election, the sync-root loop with its
//! poll timer, and the custom resource controllers, and shuts them down in order on SIGTERM:
//! stop taking work → finish (or abandon) the running pass → stop the controllers → release the
//! Lease → stop the HTTP server → exit 0.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;

use super::leader::{LeaderElector, LeaseConfig};
use super::root::{RootReconciler, RootSource};
use super::status::{DaemonStatus, PassReport};
use super::trigger::{TriggerQueue, TriggerReason};
use crate::daemon::metrics::Metrics;
use crate::pass::PassOptions;
use crate::server::{self, signature, ServerState};
use crate::source::git::{self, GitRef, GitSource, GitSourceSpec};

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("reading {flag} {path}: {source}")]
    SecretFile {
        flag: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{flag} {path} is empty")]
    EmptySecret { flag: &'static str, path: String },
    #[error("the repository: {0}")]
    Source(String),
    #[error(transparent)]
    Server(#[from] server::ServerError),
    #[error("the API server is not reachable: {0}")]
    Unreachable(kube::Error),
    #[error("leadership lost: {0}; stopping so that only one replica works")]
    LeadershipLost(String),
}

/// Everything `weft run` is configured with.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// A git URL or a local directory.
    pub repo: String,
    pub git_ref: Option<String>,
    pub path: Option<String>,
    /// Weft's namespace (Lease, inventories).
    pub namespace: String,
    pub interval: Duration,
    pub listen: String,
    pub sync_token_file: Option<PathBuf>,
    pub webhook_secret_file: Option<PathBuf>,
    pub pass_options: PassOptions,
    pub lease_duration: Duration,
    pub cache_dir: Option<PathBuf>,
    /// How long a running pass may go on after SIGTERM.
    pub shutdown_grace: Duration,
    /// Identity in the Lease.
    pub identity: String,
    /// Run the custom resource controllers (WeaveCloud, Armada).
    pub controllers: bool,
    /// Credentials of the config repository (`--git-secret`, or files); read once at start.
    pub credentials: crate::source::credentials::Credentials,
}

fn read_secret(
    flag: &'static str,
    path: &Option<PathBuf>,
) -> Result<Option<Arc<Vec<u8>>>, RunError> {
    let Some(path) = path else { return Ok(None) };
    match std::fs::read(path) {
        Ok(bytes) => {
            let secret = signature::secret_from_file_contents(&bytes);
            if secret.is_empty() {
                return Err(RunError::EmptySecret {
                    flag,
                    path: path.display().to_string(),
                });
            }
            Ok(Some(Arc::new(secret)))
        }
        // The install manifests mount an optional Secret: without it the endpoint is closed.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!(flag, path = %path.display(), "secret file does not exist; the endpoints that need it refuse every request (403)");
            Ok(None)
        }
        Err(source) => Err(RunError::SecretFile {
            flag,
            path: path.display().to_string(),
            source,
        }),
    }
}

fn root_source(cfg: &RunConfig) -> Result<RootSource, RunError> {
    if git::is_git_url(&cfg.repo) {
        let cache_dir = cfg.cache_dir.clone().unwrap_or_else(git::default_cache_dir);
        let mut spec = GitSourceSpec::new(cfg.repo.clone(), cache_dir);
        if let Some(r) = &cfg.git_ref {
            spec.reference = GitRef::parse(r);
        }
        spec.path = cfg.path.clone();
        spec.credentials = cfg.credentials.clone();
        let source = GitSource::new(spec).map_err(|e| RunError::Source(e.to_string()))?;
        Ok(RootSource::Git(Arc::new(Mutex::new(source))))
    } else {
        let dir = PathBuf::from(&cfg.repo);
        if !dir.is_dir() {
            return Err(RunError::Source(format!(
                "`{}` is neither a git URL nor a directory",
                cfg.repo
            )));
        }
        Ok(RootSource::Dir {
            dir,
            path: cfg.path.clone(),
        })
    }
}

/// A future that resolves on SIGTERM or SIGINT.
async fn termination_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Run the daemon until SIGTERM (`Ok`) or a fatal error.
pub async fn run(cfg: RunConfig, client: Client) -> Result<(), RunError> {
    let sync_token = read_secret("--sync-token-file", &cfg.sync_token_file)?;
    let webhook_secret = read_secret("--webhook-secret-file", &cfg.webhook_secret_file)?;
    let source = root_source(&cfg)?;
    let followed_ref = cfg.git_ref.clone().unwrap_or_else(|| "main".to_string());

    let status = Arc::new(RwLock::new(DaemonStatus {
        repo: source.display(),
        git_ref: followed_ref.clone(),
        path: cfg.path.clone(),
        identity: cfg.identity.clone(),
        ..Default::default()
    }));
    let metrics = Arc::new(Metrics::new());
    let queue = TriggerQueue::<PassReport>::new();
    let (ready_tx, ready_rx) = watch::channel(false);
    let (stop_tx, stop_rx) = watch::channel(false);

    // SIGTERM → stop.
    {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            termination_signal().await;
            tracing::info!("termination signal received: finishing the current pass, then exiting");
            let _ = stop_tx.send(true);
        });
    }

    let listener = server::bind(&cfg.listen).await?;
    tracing::info!(listen = %cfg.listen, repo = %source.display(), "weft daemon starting");
    let (server_stop_tx, server_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let update_requests = crate::daemon::updater::UpdateRequests::default();
    let server_state = ServerState {
        queue: queue.clone(),
        status: status.clone(),
        metrics: metrics.clone(),
        sync_token,
        webhook_secret,
        followed_ref,
        ready: ready_rx,
        wait_timeout: cfg.pass_options.timeout + Duration::from_secs(120),
        update_requests: update_requests.clone(),
    };
    let server_task = tokio::spawn(server::serve(listener, server_state, async move {
        let _ = server_stop_rx.await;
    }));

    client
        .apiserver_version()
        .await
        .map_err(RunError::Unreachable)?;
    let _ = ready_tx.send(true);

    let result = lead(
        &cfg,
        client,
        source,
        queue.clone(),
        status.clone(),
        metrics.clone(),
        update_requests,
        stop_rx,
    )
    .await;

    // Stopping: not ready any more, then the HTTP server (in-flight requests finish).
    let _ = ready_tx.send(false);
    queue.close();
    let _ = server_stop_tx.send(());
    match tokio::time::timeout(Duration::from_secs(5), server_task).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the HTTP server stopped with an error"),
        Ok(_) => {}
        Err(_) => tracing::warn!("the HTTP server did not stop within 5s"),
    }
    drop(stop_tx);
    if result.is_ok() {
        tracing::info!("weft daemon stopped");
    }
    result
}

/// Wait for the Lease, then do the work until stopped or leadership is lost.
// The daemon's shared handles, passed one by one so each task takes only what it uses.
#[allow(clippy::too_many_arguments)]
async fn lead(
    cfg: &RunConfig,
    client: Client,
    source: RootSource,
    queue: Arc<TriggerQueue<PassReport>>,
    status: Arc<RwLock<DaemonStatus>>,
    metrics: Arc<Metrics>,
    update_requests: crate::daemon::updater::UpdateRequests,
    mut stop: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let lease = LeaseConfig::new(&cfg.namespace, &cfg.identity, cfg.lease_duration);
    let mut elector = LeaderElector::new(client.clone(), lease);
    if !elector.acquire(&mut stop).await {
        return Ok(());
    }
    tracing::info!(identity = %cfg.identity, "acquired the leader Lease; reconciling");
    metrics.set_leader(true);
    status.write().unwrap_or_else(|p| p.into_inner()).leader = true;

    // Keep renewing until told to release (after the work has stopped), or until lost.
    let (release_tx, mut release_rx) = watch::channel(false);
    let holder = tokio::spawn(async move {
        let held = elector.hold(&mut release_rx).await;
        (elector, held)
    });

    let mut root = RootReconciler::new(
        client.clone(),
        source,
        cfg.pass_options.clone(),
        queue.clone(),
        status.clone(),
        metrics.clone(),
    );
    root.shutdown_grace = cfg.shutdown_grace;
    let root_task = tokio::spawn(root.run(stop.clone()));
    let _ = queue.trigger(TriggerReason::Startup);

    let poll_task = tokio::spawn(poll(queue.clone(), status.clone(), cfg.interval));
    // Armada children's drift and `weft.io/requested-at` on Armada resources: passes within seconds.
    let armada_watch = tokio::spawn(super::armada::watch_triggers(
        client.clone(),
        queue.clone(),
        stop.clone(),
    ));
    let controllers = if cfg.controllers {
        Some(tokio::spawn(super::start_controllers(
            client.clone(),
            cfg.pass_options.clone(),
            status.clone(),
            metrics.clone(),
            update_requests,
            stop.clone(),
        )))
    } else {
        None
    };

    // Wait for SIGTERM or for the Lease holder to give up.
    let mut holder = holder;
    let lost = tokio::select! {
        _ = async { while !*stop.borrow() { if stop.changed().await.is_err() { break; } } } => None,
        joined = &mut holder => match joined {
            Ok((_, Err(why))) => Some(why),
            Ok((_, Ok(()))) => Some("the Lease holder stopped".to_string()),
            Err(e) => Some(format!("the Lease holder task failed: {e}")),
        },
    };
    queue.close();
    poll_task.abort();
    armada_watch.abort();
    if let Some(why) = lost {
        root_task.abort();
        if let Some(c) = controllers {
            c.abort();
        }
        metrics.set_leader(false);
        status.write().unwrap_or_else(|p| p.into_inner()).leader = false;
        return Err(RunError::LeadershipLost(why));
    }
    // Finish (or abandon) the running pass; the root loop ends when the closed queue is empty.
    if root_task.await.is_err() {
        tracing::warn!("the sync-root loop ended abnormally");
    }
    if let Some(c) = controllers {
        if tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .is_err()
        {
            tracing::warn!("the controllers did not stop within 10s");
        }
    }
    let _ = release_tx.send(true);
    if let Ok((mut elector, _)) = holder.await {
        elector.release().await;
    }
    metrics.set_leader(false);
    status.write().unwrap_or_else(|p| p.into_inner()).leader = false;
    Ok(())
}

/// The `--interval` timer.
async fn poll(
    queue: Arc<TriggerQueue<PassReport>>,
    status: Arc<RwLock<DaemonStatus>>,
    every: Duration,
) {
    let every = every.max(Duration::from_secs(1));
    let mut timer = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next = chrono::Utc::now() + chrono::Duration::from_std(every).unwrap_or_default();
        status
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .next_poll_at = Some(next.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        timer.tick().await;
        if queue.trigger(TriggerReason::Poll).is_err() {
            return;
        }
    }
}
