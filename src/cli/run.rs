//! `weft run`: builds the daemon's one state, starts the HTTP server and the daemon beside it,
//! and shuts them down in order on SIGTERM: stop taking work → finish (or abandon) the running
//! pass → stop the controllers → release the Lease → stop the HTTP server → exit 0.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;

use crate::daemon::roots::repository::{OpenError, RootSource};
use crate::daemon::run::{Daemon, DaemonConfig, DaemonError};
use crate::daemon::state::DaemonState;
use crate::daemon::status::DaemonStatus;
use crate::server::{self, signature, ServerState, WebhookSecrets};

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
    #[error(transparent)]
    WebhookSecrets(#[from] server::secrets::SecretsError),
    #[error(transparent)]
    Source(#[from] OpenError),
    #[error(transparent)]
    Server(#[from] server::ServerError),
    #[error("the API server is not reachable: {}", crate::api::kube_error::Text(.0))]
    Unreachable(#[source] kube::Error),
    #[error(transparent)]
    Daemon(#[from] DaemonError),
}

/// Everything `weft run` is configured with.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// `--fetch-timeout`.
    pub fetch_timeout: Duration,
    /// The write fence the client was built with (see [`crate::apply::fence`]).
    pub fence: crate::apply::fence::WriteFence,
    /// A git URL or a local directory.
    pub repo: String,
    pub git_ref: Option<String>,
    pub path: Option<String>,
    pub listen: String,
    /// Address of the webhooks and the sync endpoint.
    pub hooks_listen: String,
    /// Weft's Service: where a standby may forward to (`--service-name`).
    pub service_name: String,
    /// Bounds of the HTTP server.
    pub http_limits: server::HttpLimits,
    pub sync_token_file: Option<PathBuf>,
    pub webhook_secret_file: Option<PathBuf>,
    /// The daemon's own settings, built once from the flags (its Lease claim and hooks URL are
    /// filled in when the server is bound).
    pub daemon: DaemonConfig,
    pub cache_dir: Option<PathBuf>,
    /// Credentials of the config repository (`--git-secret`, or files); read once at start.
    pub credentials: crate::source::git::auth::Credentials,
    /// Whose custom resources the controllers act on, which channels and chart sources they
    /// may name.
    pub trust: super::args::Trust,
    /// `--ui`: the dashboard's pages, read-only, on the status listener (`--listen`).
    pub ui: bool,
}

/// How often the secret files are read again.
pub const SECRET_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// Read the sync token and webhook secret files every [`SECRET_RELOAD_INTERVAL`] and swap what
/// changed into the server's state: a rotated Secret takes effect within a minute (the kubelet's
/// update of a mounted Secret) plus this interval, and the old values stop working at once. A
/// file that cannot be read (or is empty) keeps the values in use, with a warning.
async fn reload_secrets(
    state: ServerState,
    sync_token_file: Option<PathBuf>,
    webhook_secret_file: Option<PathBuf>,
) {
    let mut timer = tokio::time::interval(SECRET_RELOAD_INTERVAL);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A file that is not there (an optional Secret not created) is not read again: nothing to
    // rotate, and no warning every few seconds.
    let exists = |p: &Option<PathBuf>| p.as_ref().is_some_and(|p| p.exists());
    loop {
        timer.tick().await;
        if exists(&sync_token_file) {
            match read_secret("--sync-token-file", &sync_token_file) {
                Ok(token) => {
                    if state.set_sync_token(token) {
                        tracing::info!("the sync token changed in its file; the new one is in use");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the sync token again; keeping the one in use")
                }
            }
        }
        if let Some(path) = webhook_secret_file.as_ref().filter(|p| p.exists()) {
            match WebhookSecrets::load(path) {
                Ok(hooks) => {
                    let open = hooks.open_hooks();
                    if state.set_webhooks(hooks) {
                        tracing::info!(
                            open = ?open,
                            "the webhook secrets changed in their files; the new ones are in use (the other hooks are closed)"
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the webhook secrets again; keeping the ones in use")
                }
            }
        }
    }
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

/// What this installation syncs, as recorded on its Lease: the repository (password redacted)
/// and `--path`. The ref is left out: following another branch of the same repository is the
/// same installation.
fn claim(cfg: &RunConfig) -> String {
    let repo = crate::api::redact::redact_url_passwords(&cfg.repo);
    match cfg.path.as_deref().map(|p| p.trim_matches('/')) {
        Some(path) if !path.is_empty() => format!("{repo}//{path}"),
        _ => repo,
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

/// Start the notifications' dispatcher (Providers and Alerts of the watched namespaces); when it
/// cannot start, the daemon runs without notifications and says so.
fn start_notifications(
    client: &Client,
    cfg: &RunConfig,
    state: &DaemonState,
) -> crate::notify::Notifier {
    let config = crate::notify::dispatch::DispatchConfig {
        namespaces: cfg
            .trust
            .watch_namespaces
            .listed()
            .map(|l| l.map(str::to_string).collect()),
        policy: cfg.trust.notification_urls.clone(),
        // A tenant's root's Provider reads its Secret as the tenant (issue 42 item 3).
        secrets_as: Some(crate::notify::dispatch::SecretsAs(std::sync::Arc::new(
            crate::daemon::roots::identity::AppliedAs::new(
                client.clone(),
                state.fence().clone(),
                &cfg.daemon.pass.weft_namespace,
                &cfg.daemon.pass.root_name,
                &cfg.daemon.roots,
            ),
        ))),
        weft_namespace: Some(cfg.daemon.pass.weft_namespace.clone()),
        ..Default::default()
    };
    let counters = state.metrics().notifications.clone();
    // The dispatcher's tasks end with the process.
    let (notifier, _tasks) = crate::notify::dispatch::start(client.clone(), config, counters);
    notifier
}

/// Run the daemon until SIGTERM (`Ok`) or a fatal error. Every API call of `client` (counted in
/// `calls`) shows in the daemon's `rest_client_*` metrics.
pub async fn run(
    cfg: RunConfig,
    client: Client,
    calls: crate::apply::calls::CallCounts,
) -> Result<(), RunError> {
    let sync_token = read_secret("--sync-token-file", &cfg.sync_token_file)?;
    let webhooks = match &cfg.webhook_secret_file {
        Some(path) => WebhookSecrets::load(path)?,
        None => WebhookSecrets::none(),
    };
    let source = RootSource::open(
        &cfg.repo,
        cfg.git_ref.as_deref(),
        cfg.path.as_deref(),
        cfg.cache_dir.clone(),
        cfg.credentials.clone(),
        cfg.fetch_timeout,
    )?;
    // Without --ref the remote's HEAD is followed (GitRef::Head): the webhooks' filter is the
    // branch it points to now; when that cannot be told, "HEAD" lets every branch push trigger
    // a (cheap) poll.
    let followed_ref = match &cfg.git_ref {
        Some(r) => r.clone(),
        // A directory has no branch: the filter stays what it was before HEAD was followed.
        None if source.is_directory() => "main".to_string(),
        None => source
            .default_branch()
            .await
            .unwrap_or_else(|| "HEAD".to_string()),
    };
    let state = DaemonState::new(
        client.clone(),
        &cfg.daemon.pass.weft_namespace,
        DaemonStatus {
            repo: source.display(),
            git_ref: followed_ref.clone(),
            path: cfg.path.clone(),
            identity: cfg.daemon.identity.clone(),
            shard_count: cfg.daemon.shards,
            ..Default::default()
        },
    )
    .with_watch_namespaces(cfg.trust.watch_namespaces.clone())
    .with_fence(cfg.fence.clone())
    .with_sealed_events();
    if let Some(observer) = state.metrics().api_call_observer() {
        calls.observe_with(observer);
    }
    let state = state
        .clone()
        .with_notifier(start_notifications(&client, &cfg, &state));
    let (ready_tx, ready_rx) = watch::channel(false);
    let stop = tokio_util::sync::CancellationToken::new();

    // SIGTERM → stop.
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            termination_signal().await;
            tracing::info!("termination signal received: finishing the current pass, then exiting");
            stop.cancel();
        });
    }

    let listeners = server::Listeners::bind(&cfg.listen, &cfg.hooks_listen).await?;
    tracing::info!(listen = %cfg.listen, hooks_listen = %cfg.hooks_listen, repo = %source.display(), "weft daemon starting");
    let (server_stop_tx, server_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server_state = ServerState::with_limits(
        state.clone(),
        followed_ref,
        ready_rx,
        cfg.daemon.pass.timeout + Duration::from_secs(120),
        cfg.http_limits,
    );
    server_state.set_sync_token(sync_token);
    if let Some(path) = &cfg.webhook_secret_file {
        tracing::info!(path = %path.display(), open = ?webhooks.open_hooks(), "webhook secrets loaded; the other hooks are closed");
    }
    server_state.set_webhooks(webhooks);
    // Rotated secrets (a mounted Secret is updated in place) take effect without a restart.
    tokio::spawn(reload_secrets(
        server_state.clone(),
        cfg.sync_token_file.clone(),
        cfg.webhook_secret_file.clone(),
    ));
    // A standby forwards webhooks and sync requests to the leader's published hooks URL.
    let hooks_url = crate::server::forward::advertised_hooks_url(
        &cfg.hooks_listen,
        std::env::var("POD_IP").ok().as_deref(),
    );
    server_state.leader_link = Some(
        crate::server::forward::LeaderLink::new(
            client.clone(),
            &cfg.daemon.pass.weft_namespace,
            &crate::daemon::leader::lease_name(&cfg.daemon.pass.root_name),
            &cfg.daemon.identity,
        )
        .with_shards(cfg.daemon.shards)
        .with_service(&cfg.service_name),
    );
    // `--ui`: the dashboard read-only beside the status routes, read with the daemon's own
    // client (its writes are fenced; the pages make none); its live streams end with the server.
    let (pages_stop_tx, pages_stop_rx) = watch::channel(false);
    let pages = cfg.ui.then(|| {
        tracing::info!(listen = %cfg.listen, "the dashboard is served read-only on the status listener (--ui)");
        crate::ui::Ui::read_only_pages(
            client.clone(),
            crate::ui::UiConfig {
                weft_namespace: cfg.daemon.pass.weft_namespace.clone(),
                drift: None,
                refresh: Duration::from_secs(10),
                read_only: true,
            },
            pages_stop_rx,
        )
    });
    let server_task = tokio::spawn(server::serve_with_pages(
        listeners,
        server_state,
        pages,
        async move {
            let _ = server_stop_rx.await;
            let _ = pages_stop_tx.send(true);
        },
    ));

    client
        .apiserver_version()
        .await
        .map_err(RunError::Unreachable)?;
    let _ = ready_tx.send(true);
    let probe = tokio::spawn(crate::daemon::health::probe_api_server(
        state.clone(),
        crate::daemon::health::PROBE_INTERVAL,
    ));

    let daemon = Daemon::new(
        DaemonConfig {
            claim: Some(claim(&cfg)),
            hooks_url: hooks_url.clone(),
            ..cfg.daemon.clone()
        },
        state.clone(),
    );
    let result = daemon.run(stop).await;

    // Stopping: not ready any more, then the HTTP server (in-flight requests finish).
    probe.abort();
    let _ = ready_tx.send(false);
    state.root_pushes().flag().close();
    let _ = server_stop_tx.send(());
    match tokio::time::timeout(Duration::from_secs(5), server_task).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the HTTP server stopped with an error"),
        Ok(_) => {}
        Err(_) => tracing::warn!("the HTTP server did not stop within 5s"),
    }
    if result.is_ok() {
        tracing::info!("weft daemon stopped");
    }
    Ok(result?)
}
