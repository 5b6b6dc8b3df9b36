//! `weft run`: the daemon's flags, turned into its configuration. The wiring itself (HTTP server,
//! leader election, root loop, controllers) is in [`super::run`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::args::{ApplyArgs, ClusterArgs, DecryptionArgs, GitSecretArgs, RepoArgs, TrustArgs};
use super::run::{self as wiring, RunConfig};
use crate::daemon::leader;
use crate::daemon::run::DaemonConfig;
use crate::pass::PassSettings;
use crate::sops::Decryption;

/// The flags of `weft run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub git: GitSecretArgs,
    #[command(flatten)]
    pub apply: ApplyArgs,
    #[command(flatten)]
    pub decryption: DecryptionArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    /// How often to check the repository for a new revision (`30s`, `1m`, `5m`).
    #[arg(long, env = "WEFT_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Address of the read-only HTTP API: status, health, metrics (port `http`).
    #[arg(long, env = "WEFT_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: String,
    /// Address of the webhooks and `POST /api/v1/sync` (port `hooks`).
    #[arg(long, env = "WEFT_HOOKS_LISTEN", default_value = "0.0.0.0:8081")]
    pub hooks_listen: String,
    /// File with the bearer token of `POST /api/v1/sync` (without it the endpoint is closed).
    #[arg(long, env = "WEFT_SYNC_TOKEN_FILE")]
    pub sync_token_file: Option<PathBuf>,
    /// The webhook secrets: a directory with files `github`, `gitlab`, `generic` (a missing one
    /// closes that hook), or one file whose secret keys the GitHub and generic HMACs (GitLab,
    /// whose token travels in plaintext, is then closed).
    #[arg(long, env = "WEFT_WEBHOOK_SECRET_FILE")]
    pub webhook_secret_file: Option<PathBuf>,
    /// Connections served at once on each HTTP listener; more wait in the accept queue.
    #[arg(long, env = "WEFT_MAX_CONNECTIONS", default_value = "256", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Connections one client (an IPv4 address, an IPv6 /64) may hold at once on each HTTP
    /// listener; more are answered 503 and closed. Behind a proxy that does not keep the client's
    /// address, the proxy is one client: raise this to --max-connections.
    #[arg(long, env = "WEFT_MAX_CONNECTIONS_PER_PEER", default_value = "32", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_peer: u32,
    /// Bytes of request bodies one client may have in flight at once (of the 16 MiB all clients
    /// share); past it, 503.
    #[arg(long, env = "WEFT_MAX_BODY_BYTES_PER_PEER", default_value = "4194304", value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_body_bytes_per_peer: u64,
    /// Weft's Service in its namespace: a standby forwards webhooks and sync requests only to
    /// a leader whose hooks URL is one of this Service's endpoints.
    #[arg(long, env = "WEFT_SERVICE_NAME", default_value = crate::server::forward::DEFAULT_SERVICE_NAME)]
    pub service_name: String,
    /// A client must send a request's headers within this (also the idle keep-alive limit).
    #[arg(long, env = "WEFT_HTTP_HEADER_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub http_header_timeout: Duration,
    /// A request's body must arrive within this (408).
    #[arg(long, env = "WEFT_HTTP_BODY_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub http_body_timeout: Duration,
    /// A request must be answered within this (408), `POST /api/v1/sync?wait=true` excepted.
    #[arg(long, env = "WEFT_HTTP_REQUEST_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub http_request_timeout: Duration,
    /// How long the leader Lease, and each Root's Lease, stays valid without renewal (a standby
    /// takes over the leader's work, and the other replicas a dead replica's roots, after this).
    #[arg(long, env = "WEFT_LEASE_DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    /// How long a running pass may go on after SIGTERM before it is abandoned.
    #[arg(long, env = "WEFT_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// Directory of every cache: `DIR/git` (the config repository), `DIR/charts` (chart
    /// sources: git and tar), `DIR/channels` (agent channels). Default: under
    /// `$XDG_CACHE_HOME/weft`.
    #[arg(long, env = "WEFT_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Split the repository into N shards, each applied by one replica holding the shard's
    /// Lease (run N or more replicas). Units — each top-level directory of plain manifests, the
    /// Armada deployment plan as a whole — go to shards by a stable hash; 1: no sharding.
    #[arg(long, env = "WEFT_SHARDS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub shards: u32,
    /// Roots (`Root` objects) reconciled at the same time.
    #[arg(long, env = "WEFT_ROOT_CONCURRENCY", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub root_concurrency: u16,
    /// The ServiceAccount (of its own namespace) a Root without `serviceAccountName` acts as;
    /// without it such a Root outside Weft's namespace is refused. Roots in Weft's namespace
    /// without one act as Weft.
    #[arg(long, env = "WEFT_DEFAULT_SERVICE_ACCOUNT", value_name = "NAME")]
    pub default_service_account: Option<String>,
    /// Refuse a Root whose `dependsOn` names a root of another namespace (default: true with
    /// --default-service-account, false without).
    #[arg(long, env = "WEFT_NO_CROSS_NAMESPACE_REFS", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub no_cross_namespace_refs: Option<bool>,
    /// Do not run the WeaveCloud and Armada controllers (sync the repository only).
    #[arg(long, env = "WEFT_NO_CONTROLLERS")]
    pub no_controllers: bool,
    /// Confirm that this root switches to another source than its Root's (what the new source
    /// lacks is pruned, within the prune guard). Without it, a daemon of another source refuses
    /// to start, as `weft sync` refuses. Needed once: the flags' source is then the Root's.
    #[arg(long)]
    pub switch_repository: bool,
    /// Accepted for compatibility, and does nothing: the flag root is always its Root object
    /// (`--root-name` in Weft's namespace), created from these flags (and its root record) when
    /// missing, then reconciled by the Root controller (docs/migrating.md).
    #[arg(long, env = "WEFT_ROOT_OBJECT", hide = true)]
    pub root_object: bool,
    /// Serve the dashboard's pages read-only on the status listener (`--listen`), read with
    /// Weft's ServiceAccount: whoever reaches that port sees them (docs/ui.md). Off by default.
    #[arg(long, env = "WEFT_UI")]
    pub ui: bool,
}

impl RunArgs {
    /// The daemon's configuration; reads the git credentials (`--git-secret`, else files) once.
    fn config(&self) -> anyhow::Result<RunConfig> {
        let Some(repo) = self.repo.given() else {
            anyhow::bail!("give a repository: --repo URL (or a PATH)");
        };
        let credentials = self
            .repo
            .credentials(self.git.secret_credentials(&self.cluster)?)?;
        let trust = self.trust.trust()?;
        let pass = PassSettings {
            chart_sources: trust.chart_sources.clone(),
            chart_cache_dir: self.cache_dir.as_ref().map(|d| d.join("charts")),
            ..self.apply.pass_settings(
                &self.repo,
                &self.cluster,
                // Git chart sources beside the config repository are as private as it is.
                self.repo.chart_fetch(credentials.clone())?,
                // Set by `run` once it has a client (the decryption Secret is read through it).
                Decryption::default(),
            )
        };
        let allowed_channels = trust.allowed_channels.clone();
        let root_object = Some(crate::daemon::roots::flag::FlagRoot::from_flags(
            &pass,
            self.repo.git_ref.as_deref(),
            self.repo.path.as_deref(),
            self.interval,
            self.git.git_secret.as_deref(),
        ));
        let flag_credentials = self.git.git_secret.is_none().then(|| credentials.clone());
        Ok(RunConfig {
            trust,
            credentials,
            ui: self.ui,
            repo: repo.clone(),
            git_ref: self.repo.git_ref.clone(),
            fetch_timeout: self.repo.fetch_timeout,
            path: self.repo.path.clone(),
            listen: self.listen.clone(),
            hooks_listen: self.hooks_listen.clone(),
            service_name: self.service_name.clone(),
            http_limits: crate::server::HttpLimits {
                max_connections: self.max_connections as usize,
                header_read_timeout: self.http_header_timeout,
                body_read_timeout: self.http_body_timeout,
                request_timeout: self.http_request_timeout,
                max_connections_per_peer: self.max_connections_per_peer as usize,
                body_bytes_per_peer: usize::try_from(self.max_body_bytes_per_peer)
                    .unwrap_or(usize::MAX),
                ..Default::default()
            },
            sync_token_file: self.sync_token_file.clone(),
            webhook_secret_file: self.webhook_secret_file.clone(),
            cache_dir: self.cache_dir.as_ref().map(|d| d.join("git")),
            daemon: DaemonConfig {
                interval: self.interval,
                lease_duration: self.lease_duration,
                shutdown_grace: self.shutdown_grace,
                identity: leader::default_identity(),
                controllers: !self.no_controllers,
                pass: Arc::new(pass),
                allowed_channels,
                claim: None,
                hooks_url: None,
                channel_cache_dir: self.cache_dir.as_ref().map(|d| d.join("channels")),
                shards: self.shards,
                switch_repository: self.switch_repository,
                root_object,
                roots: crate::daemon::roots::RootsConfig {
                    concurrency: self.root_concurrency,
                    cluster: None,
                    api_timeout: self.cluster.api_timeout,
                    git_cache_dir: self.cache_dir.as_ref().map(|d| d.join("roots")),
                    fetch_timeout: self.repo.fetch_timeout,
                    default_service_account: self.default_service_account.clone(),
                    cross_namespace_refs: !self
                        .no_cross_namespace_refs
                        .unwrap_or(self.default_service_account.is_some()),
                    // The roots' Leases: this replica's identity and the leader Lease's timing.
                    identity: leader::default_identity(),
                    lease_duration: self.lease_duration,
                    // With --git-secret the flag root's Root names that Secret instead.
                    flag_credentials,
                    flag_cache_dir: self.cache_dir.as_ref().map(|d| d.join("git")),
                    // Set with the leader Lease's (`weft run`, from `--hooks-listen`).
                    hooks_url: None,
                },
            },
            // Closed until this replica holds the leader Lease.
            fence: crate::apply::fence::WriteFence::closed(),
        })
    }
}

/// `weft run`: exit 0 after SIGTERM, 1 when leadership is lost or the daemon fails.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut config = args.config()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(async {
        let (client, calls) = args.cluster.connect_fenced(config.fence.clone()).await?;
        // Roots with `serviceAccountName` act as it: clients built from the same configuration.
        config.daemon.roots.cluster = crate::apply::calls::config(
            args.cluster.kubeconfig.as_deref(),
            args.cluster.context.as_deref(),
        )
        .await
        .ok();
        // The Secret is read again on every revision loaded (see docs/secrets.md).
        Arc::make_mut(&mut config.daemon.pass).decryption = args
            .decryption
            .decryption(&client, &args.cluster.weft_namespace)?;
        wiring::run(config, client, calls)
            .await
            .map_err(anyhow::Error::from)
    });
    // Whatever the daemon left running (a watch, an HTTP connection) is not waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            errln!("error: {}", super::report::error_text(&e));
            Ok(ExitCode::from(1))
        }
    }
}
