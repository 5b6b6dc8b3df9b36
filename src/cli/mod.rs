//! The `weft` command line: parsing and dispatch only; the work is in the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

pub mod progress;
pub mod run;

use crate::load::{self, Diagnostics};
use crate::render::{self, RenderOptions};
use crate::source::{self, Snapshot, SnapshotLimits};

#[derive(Parser, Debug)]
#[command(
    name = "weft",
    version,
    about = "A GitOps pull reconciler for Kubernetes"
)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, env = "WEFT_LOG_FORMAT", default_value = "human")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Load and render a repository and print every final object as multi-document YAML, in apply order. No cluster.
    Render(RepoArgs),
    /// Load and validate a repository; print every problem as `file:line:col: message`; exit 1 on any error. No cluster.
    Validate(RepoArgs),
    /// Print the CustomResourceDefinitions of Weft's resources as YAML.
    Crds,
    /// One pass against the cluster: fetch, render, apply, prune, wait. Exit 0 only if every
    /// object applied and became ready. `--dry-run` prints the plan.
    Sync(SyncArgs),
    /// Server-side dry-run against the cluster: a unified diff per changed object. Exit 0 no
    /// changes, 1 changes, 2 error.
    Diff(SyncArgs),
    /// The daemon: poll and sync the repository, reconcile Weft's resources, serve the HTTP API, until SIGTERM.
    Run(RunArgs),
    /// Ask a running daemon to sync now (`POST /api/v1/sync`); `--wait` waits for the pass and prints its result.
    Trigger(TriggerArgs),
}

/// Where the desired state comes from.
#[derive(Args, Debug, Clone)]
struct RepoArgs {
    /// A checkout (directory) of the config repository.
    #[arg(value_name = "PATH", conflicts_with = "repo")]
    dir: Option<PathBuf>,
    /// The repository: a git URL or a local directory.
    #[arg(long, env = "WEFT_REPO")]
    repo: Option<String>,
    /// Branch, tag or commit SHA.
    #[arg(long = "ref", env = "WEFT_REF")]
    git_ref: Option<String>,
    /// Subdirectory of the repository that holds the configuration.
    #[arg(long, env = "WEFT_PATH")]
    path: Option<String>,
}

/// Which cluster, and Weft's own namespace there.
#[derive(Args, Debug, Clone)]
struct ClusterArgs {
    /// Kubeconfig file (default: in-cluster, then `KUBECONFIG`).
    #[arg(long, env = "WEFT_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long, env = "WEFT_CONTEXT")]
    context: Option<String>,
    /// Weft's own namespace (inventories).
    #[arg(long, env = "WEFT_NAMESPACE", default_value = "weft-system")]
    namespace: String,
    /// Secret in Weft's namespace with the git credentials (keys `identity`, `known_hosts`,
    /// `username`, `password`, `bearerToken`). Without it: files in `WEFT_GIT_CREDENTIALS_DIR`.
    #[arg(long, env = "WEFT_GIT_SECRET")]
    git_secret: Option<String>,
}

/// `weft sync` and `weft diff`.
#[derive(Args, Debug, Clone)]
struct SyncArgs {
    #[command(flatten)]
    repo: RepoArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Bound of each readiness wait (`90s`, `5m`).
    #[arg(long, env = "WEFT_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
    /// Largest fraction of an inventory one pass may prune.
    #[arg(long, env = "WEFT_MAX_PRUNE_FRACTION", default_value_t = 0.5)]
    max_prune_fraction: f64,
    /// Prune even past --max-prune-fraction.
    #[arg(long, env = "WEFT_FORCE_PRUNE")]
    force_prune: bool,
    /// Print the plan (create / update / unchanged / prune per object); change nothing.
    #[arg(long, env = "WEFT_DRY_RUN")]
    dry_run: bool,
    /// API calls at the same time within a stage.
    #[arg(long, env = "WEFT_CONCURRENCY", default_value_t = 10)]
    concurrency: usize,
    /// Name of the sync root, part of every object's owner id. Two Weft installations that sync
    /// different repositories into one cluster need different names.
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    root_name: String,
}

/// Where the config repository came from: its URL, or its directory made absolute (relative git
/// chart locations resolve against it).
fn repo_location(args: &RepoArgs) -> String {
    let location = args
        .dir
        .as_ref()
        .map(|d| d.display().to_string())
        .or_else(|| args.repo.clone())
        .unwrap_or_default();
    std::fs::canonicalize(&location)
        .map(|p| p.display().to_string())
        .unwrap_or(location)
}

/// Parse the command line, run the command, and give the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_tracing(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("WEFT_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Sync(args) => sync_command(args),
        Command::Diff(args) => diff_command(args),
        Command::Run(args) => run_command(args),
        Command::Trigger(args) => trigger_command(args),
        Command::Crds => {
            print!("{}", crate::api::crds_yaml()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate(args) => {
            let snapshot = read_snapshot(&args)?;
            match load::load(Arc::new(snapshot)) {
                Ok((repo, diags)) => {
                    print_diagnostics(&diags);
                    println!("ok: {} documents, no errors", repo.len());
                    Ok(ExitCode::SUCCESS)
                }
                Err(load::LoadError(diags)) => {
                    print_diagnostics(&diags);
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Render(args) => {
            let snapshot = read_snapshot(&args)?;
            let (repo, diags) = match load::load(Arc::new(snapshot)) {
                Ok(r) => r,
                Err(load::LoadError(diags)) => {
                    print_diagnostics(&diags);
                    return Ok(ExitCode::from(1));
                }
            };
            print_diagnostics(&diags);
            // Chart sources (git, tar) are fetched here so that render stays pure; relative git
            // locations resolve against where the config repository came from.
            let location = args
                .dir
                .as_ref()
                .map(|d| d.display().to_string())
                .or_else(|| args.repo.clone())
                .unwrap_or_default();
            let location = std::fs::canonicalize(&location)
                .map(|p| p.display().to_string())
                .unwrap_or(location);
            let cache = source::chart::ChartCache::new(source::chart::ChartCache::default_dir());
            let charts = source::chart::resolve(&repo, &location, &cache)?;
            let objects =
                render::render_all_with_charts(&repo, &charts, &RenderOptions::default())?;
            print!("{}", render::output::to_yaml_stream(&objects)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_diagnostics(diags: &Diagnostics) {
    for d in &diags.0 {
        eprintln!("{d}");
    }
}

fn read_snapshot(args: &RepoArgs) -> anyhow::Result<Snapshot> {
    read_snapshot_with(args, None)
}

/// The git credentials of `--git-secret` (read from the cluster once), or `None` without it.
fn secret_credentials(
    cluster: &ClusterArgs,
) -> anyhow::Result<Option<source::credentials::Credentials>> {
    let Some(name) = &cluster.git_secret else {
        return Ok(None);
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) =
            crate::apply::calls::connect(cluster.kubeconfig.as_deref(), cluster.context.as_deref())
                .await?;
        let creds = source::credentials::from_kube_secret(client, &cluster.namespace, name)
            .await
            .with_context(|| {
                format!(
                    "reading git credentials from Secret {}/{name}",
                    cluster.namespace
                )
            })?;
        Ok(Some(creds))
    })
}

/// Like [`read_snapshot`], with the credentials of `--git-secret` when given.
fn read_snapshot_with(
    args: &RepoArgs,
    credentials: Option<source::credentials::Credentials>,
) -> anyhow::Result<Snapshot> {
    if let Some(url) = args
        .repo
        .as_deref()
        .filter(|r| args.dir.is_none() && source::git::is_git_url(r))
    {
        let credentials = match credentials {
            Some(c) => c,
            None => {
                source::credentials::Credentials::from_env().context("reading git credentials")?
            }
        };
        return Ok(source::git::fetch_snapshot(
            url,
            args.git_ref.as_deref(),
            args.path.as_deref(),
            credentials,
        )?);
    }
    let dir = match (&args.dir, &args.repo) {
        (Some(d), _) => d.clone(),
        (None, Some(r)) => PathBuf::from(r),
        (None, None) => anyhow::bail!("give a repository: a PATH or --repo URL"),
    };
    let snapshot = source::local::read_dir(&dir, SnapshotLimits::default())
        .with_context(|| format!("reading {}", dir.display()))?;
    Ok(match &args.path {
        Some(p) => {
            source::check_relative_path(p).map_err(anyhow::Error::msg)?;
            snapshot.subdir(p)
        }
        None => snapshot,
    })
}

fn pass_options(args: &SyncArgs) -> crate::pass::PassOptions {
    crate::pass::PassOptions {
        weft_namespace: args.cluster.namespace.clone(),
        timeout: args.timeout,
        max_prune_fraction: args.max_prune_fraction,
        force_prune: args.force_prune,
        dry_run: args.dry_run,
        concurrency: args.concurrency.max(1),
        root_name: args.root_name.clone(),
        repo_location: repo_location(&args.repo),
        ..crate::pass::PassOptions::default()
    }
}

/// `weft sync`: exit 0 when everything applied and became ready, 1 when the pass failed.
fn sync_command(args: SyncArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    let snapshot = read_snapshot_with(&args.repo, secret_credentials(&args.cluster)?)?;
    let opts = pass_options(&args);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, calls) = crate::apply::calls::connect(
            args.cluster.kubeconfig.as_deref(),
            args.cluster.context.as_deref(),
        )
        .await?;
        let printer = progress::ProgressPrinter::new(std::io::stdout().is_terminal(), opts.dry_run);
        let result = crate::pass::run_pass(&client, snapshot, &opts, &|p| printer.observe(p)).await;
        printer.finish();
        print_diagnostics(&result.diagnostics);
        let calls = calls.snapshot();
        println!(
            "{} revision {}: {} in {:.1?} ({} API writes, {} reads)",
            if opts.dry_run { "plan for" } else { "synced" },
            result.revision,
            result.changes.summary(),
            result.duration,
            calls.writes,
            calls.reads
        );
        match &result.error {
            None => Ok(ExitCode::SUCCESS),
            Some(e) => {
                eprintln!("error: {e}");
                Ok(ExitCode::from(1))
            }
        }
    })
}

/// `weft diff`: exit 0 no changes, 1 changes, 2 error.
fn diff_command(args: SyncArgs) -> anyhow::Result<ExitCode> {
    let snapshot = read_snapshot_with(&args.repo, secret_credentials(&args.cluster)?)?;
    let opts = pass_options(&args);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) = crate::apply::calls::connect(
            args.cluster.kubeconfig.as_deref(),
            args.cluster.context.as_deref(),
        )
        .await?;
        let diffs = crate::pass::diff_pass(&client, snapshot, &opts).await?;
        for d in &diffs {
            print!("{}", d.text);
        }
        if diffs.is_empty() {
            eprintln!("no changes");
            Ok(ExitCode::SUCCESS)
        } else {
            eprintln!("{} object(s) would change", diffs.len());
            Ok(ExitCode::from(1))
        }
    })
}

/// `weft run`.
#[derive(Args, Debug, Clone)]
struct RunArgs {
    #[command(flatten)]
    repo: RepoArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// How often to check the repository for a new revision (`30s`, `1m`, `5m`).
    #[arg(long, env = "WEFT_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    interval: std::time::Duration,
    /// Address of the HTTP API (webhooks, sync, status, health, metrics).
    #[arg(long, env = "WEFT_LISTEN", default_value = "0.0.0.0:8080")]
    listen: String,
    /// File with the bearer token of `POST /api/v1/sync` (without it the endpoint is closed).
    #[arg(long, env = "WEFT_SYNC_TOKEN_FILE")]
    sync_token_file: Option<PathBuf>,
    /// File with the shared secret of the webhooks (without it they are closed).
    #[arg(long, env = "WEFT_WEBHOOK_SECRET_FILE")]
    webhook_secret_file: Option<PathBuf>,
    /// Bound of each readiness wait (`90s`, `5m`).
    #[arg(long, env = "WEFT_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
    /// Largest fraction of an inventory one pass may prune.
    #[arg(long, env = "WEFT_MAX_PRUNE_FRACTION", default_value_t = 0.5)]
    max_prune_fraction: f64,
    /// Prune even past --max-prune-fraction.
    #[arg(long, env = "WEFT_FORCE_PRUNE")]
    force_prune: bool,
    /// API calls at the same time within a stage.
    #[arg(long, env = "WEFT_CONCURRENCY", default_value_t = 10)]
    concurrency: usize,
    /// How long the leader Lease stays valid without renewal (a standby takes over after this).
    #[arg(long, env = "WEFT_LEASE_DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    lease_duration: std::time::Duration,
    /// How long a running pass may go on after SIGTERM before it is abandoned.
    #[arg(long, env = "WEFT_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    shutdown_grace: std::time::Duration,
    /// Directory of the git cache (default: `$XDG_CACHE_HOME/weft/git`).
    #[arg(long, env = "WEFT_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Do not run the WeaveCloud and Armada controllers (sync the repository only).
    #[arg(long, env = "WEFT_NO_CONTROLLERS")]
    no_controllers: bool,
    /// Name of the sync root, part of every object's owner id. Two Weft installations that sync
    /// different repositories into one cluster need different names.
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    root_name: String,
}

/// `weft trigger`.
#[derive(Args, Debug, Clone)]
struct TriggerArgs {
    /// Base URL of the daemon's HTTP API.
    #[arg(long, env = "WEFT_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// File with the bearer token (the daemon's --sync-token-file).
    #[arg(long, env = "WEFT_SYNC_TOKEN_FILE")]
    sync_token_file: PathBuf,
    /// Wait for the pass to finish and print its result; exit 1 if it failed.
    #[arg(long)]
    wait: bool,
    /// How long to wait for the answer.
    #[arg(long, env = "WEFT_TIMEOUT", default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
}

/// `weft run`: exit 0 after SIGTERM, 1 when leadership is lost or the daemon fails.
fn run_command(args: RunArgs) -> anyhow::Result<ExitCode> {
    let repo = match (&args.repo.dir, &args.repo.repo) {
        (Some(d), _) => d.display().to_string(),
        (None, Some(r)) => r.clone(),
        (None, None) => anyhow::bail!("give a repository: --repo URL (or a PATH)"),
    };
    let credentials = match secret_credentials(&args.cluster)? {
        Some(c) => c,
        None => source::credentials::Credentials::from_env().context("reading git credentials")?,
    };
    let config = run::RunConfig {
        credentials,
        repo: repo.clone(),
        git_ref: args.repo.git_ref.clone(),
        path: args.repo.path.clone(),
        namespace: args.cluster.namespace.clone(),
        interval: args.interval,
        listen: args.listen.clone(),
        sync_token_file: args.sync_token_file.clone(),
        webhook_secret_file: args.webhook_secret_file.clone(),
        pass_options: crate::pass::PassOptions {
            weft_namespace: args.cluster.namespace.clone(),
            timeout: args.timeout,
            max_prune_fraction: args.max_prune_fraction,
            force_prune: args.force_prune,
            concurrency: args.concurrency.max(1),
            root_name: args.root_name.clone(),
            repo_location: repo.clone(),
            ..crate::pass::PassOptions::default()
        },
        lease_duration: args.lease_duration,
        cache_dir: args.cache_dir.clone(),
        shutdown_grace: args.shutdown_grace,
        identity: crate::daemon::leader::default_identity(),
        controllers: !args.no_controllers,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(async {
        let (client, _) = crate::apply::calls::connect(
            args.cluster.kubeconfig.as_deref(),
            args.cluster.context.as_deref(),
        )
        .await?;
        run::run(config, client).await.map_err(anyhow::Error::from)
    });
    // An abandoned pass may still hold a blocking thread: do not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("error: {e:#}");
            Ok(ExitCode::from(1))
        }
    }
}

/// `weft trigger`: exit 0 when queued (or, with --wait, when the pass succeeded), 1 when the
/// pass failed, 2 when the daemon could not be asked.
fn trigger_command(args: TriggerArgs) -> anyhow::Result<ExitCode> {
    use crate::server::client::{self, TriggerAnswer};
    let token = std::fs::read(&args.sync_token_file).with_context(|| {
        format!(
            "reading --sync-token-file {}",
            args.sync_token_file.display()
        )
    })?;
    let token =
        String::from_utf8_lossy(&crate::server::signature::secret_from_file_contents(&token))
            .into_owned();
    let runtime = tokio::runtime::Runtime::new()?;
    let answer = runtime.block_on(client::trigger(&args.url, &token, args.wait, args.timeout))?;
    match answer {
        TriggerAnswer::Queued { pass } => {
            println!("queued: pass {pass}");
            Ok(ExitCode::SUCCESS)
        }
        TriggerAnswer::Finished(report) => {
            let s = report.summary;
            println!(
                "pass {} {}: revision {} ({} created, {} configured, {} unchanged, {} pruned) in {:.1}s",
                report.pass,
                if report.succeeded() { "succeeded" } else { "failed" },
                report.revision.as_deref().unwrap_or("-"),
                s.created,
                s.configured,
                s.unchanged,
                s.pruned,
                report.duration_seconds
            );
            for c in &report.changes {
                println!("  {} {}", c.object, c.action);
            }
            match &report.error {
                None => Ok(ExitCode::SUCCESS),
                Some(e) => {
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(1))
                }
            }
        }
    }
}
