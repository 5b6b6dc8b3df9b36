//! The `weft` command line: parsing and wiring only; the work is in the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

use weft::load::{self, Diagnostics};
use weft::render::{self, RenderOptions};
use weft::source::{self, Snapshot, SnapshotLimits};

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

fn main() -> ExitCode {
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
        Command::Crds => {
            print!("{}", weft::api::crds_yaml()?);
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
            let objects = render::render_all(&repo, &RenderOptions::default())?;
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
