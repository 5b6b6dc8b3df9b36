//! The `weft` command line: parsing and dispatch only; the work is in the library. The flag
//! groups shared by several commands are in [`args`]; each command's own flags and its small
//! driver sit in the file named after it.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

// First: its macros (`outln!`, `out!`, `errln!`) are used by every module below.
#[macro_use]
mod out;
pub mod args;
mod connect;
mod create;
mod daemon;
mod examples;
mod export;
mod get;
mod install;
pub mod progress;
mod render;
mod report;
pub mod run;
mod suspend;
mod sync;
mod sync_root;
mod tree;
mod trigger;
mod ui;
mod uninstall;
mod version;

use crate::load::Diagnostics;

#[derive(Parser, Debug)]
#[command(
    name = "weft",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("WEFT_COMMIT"), ")"),
    about = "A GitOps pull reconciler for Kubernetes",
    after_help = examples::WEFT
)]
pub(crate) struct Cli {
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
    #[command(after_help = examples::RENDER)]
    Render(render::RenderArgs),
    /// Load and validate a repository; print every problem as `file:line:col: message`; exit 1 on any error. No cluster.
    #[command(after_help = examples::VALIDATE)]
    Validate(render::ValidateArgs),
    /// Print the CustomResourceDefinitions of Weft's resources as YAML.
    #[command(after_help = examples::CRDS)]
    Crds,
    /// One pass against the cluster: fetch, render, apply, prune, wait. Exit 0 only if every
    /// object applied and became ready. `--dry-run` prints the plan.
    #[command(after_help = examples::SYNC)]
    Sync(sync::SyncArgs),
    /// Server-side dry-run against the cluster: a unified diff per changed object. Exit 0 no
    /// changes, 1 changes, 2 error.
    #[command(after_help = examples::DIFF)]
    Diff(sync::DiffArgs),
    /// The daemon: poll and sync the repository, reconcile Weft's resources, serve the HTTP API, until SIGTERM.
    #[command(after_help = examples::RUN)]
    Run(Box<daemon::RunArgs>),
    /// Ask the daemon to sync now, through the API server (as `flux reconcile`); `--wait` waits for the pass and prints its result.
    #[command(after_help = examples::TRIGGER)]
    Trigger(trigger::TriggerArgs),
    /// Weft's resources in the cluster with their Ready condition, as `flux get` shows: exit 0
    /// when all are ready, 1 when one is not (`--wait` waits first), 2 on error.
    #[command(after_help = examples::GET)]
    Get(get::GetArgs),
    /// Create a resource from flags (as `flux create`): `weft create root NAME --url …`;
    /// `--export` prints it as YAML instead of applying it.
    Create(create::CreateArgs),
    /// What the sync root holds, owner by owner, from the inventories (as `flux tree kustomization`).
    #[command(after_help = examples::TREE)]
    Tree(tree::TreeArgs),
    /// The root's configuration and Weft's resources (WeaveClouds, Armada resources, Providers,
    /// Alerts) as YAML, without status or server fields (as `flux export`).
    #[command(after_help = examples::EXPORT)]
    Export(export::ExportArgs),
    /// Freeze the sync root: no pass, no drift correction, no prune, no agent update, until
    /// `weft resume`. Recorded in the cluster, so every replica and a restart obey it.
    #[command(after_help = examples::SUSPEND)]
    Suspend(suspend::SuspendArgs),
    /// Unfreeze the sync root; a running daemon starts a pass at once.
    #[command(after_help = examples::RESUME)]
    Resume(suspend::ResumeArgs),
    /// Take Weft out of the cluster: remove its finalizers from WeaveClouds and ArmadaCharts so
    /// nothing is stuck terminating; `--prune` also deletes what it created. Stop the daemon first.
    #[command(after_help = examples::UNINSTALL)]
    Uninstall(uninstall::UninstallArgs),
    /// The client's version and commit, and the daemon's when the cluster can be reached.
    #[command(after_help = examples::VERSION)]
    Version(version::VersionArgs),
    /// Print a shell completion script (bash, zsh or fish).
    #[command(after_help = examples::COMPLETION)]
    Completion(version::CompletionArgs),
    /// A dashboard on 127.0.0.1 with your kubeconfig and RBAC, as `kubectl proxy` serves the API.
    #[command(after_help = examples::UI)]
    Ui(ui::UiArgs),
    /// Install Weft into the cluster (deploy/'s manifests, built into this binary) with
    /// server-side apply, as `flux install` does; `-o yaml` prints them instead.
    Install(Box<install::InstallArgs>),
}

/// Parse the command line, run the command, and give the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            // A server that cannot be reached is said once, with its URL and what to check.
            let text = connect::explain(&e).unwrap_or_else(|| report::error_text(&e));
            // A URL in the chain may carry a token as its user name (`https://<token>@host`).
            let text = crate::api::redact::redact_url_passwords(&text);
            // The last net under the bound each quoted text already gets at its source.
            let text = crate::api::bounded::clip(&text, MAX_ERROR_CHARS);
            errln!("error: {text}");
            ExitCode::from(2)
        }
    }
}

/// Logs go to stderr; human logs are coloured only on a terminal, so that a log file or a
/// pipe gets no escape sequences. The filter is `WEFT_LOG`, else `RUST_LOG`, else `info`. Every
/// line passes [`redact_url_passwords`](crate::api::redact::redact_url_passwords) on its way out.
fn init_tracing(format: LogFormat) {
    let directives = log_directives(
        std::env::var("WEFT_LOG").ok(),
        std::env::var("RUST_LOG").ok(),
    );
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| RedactedStderr);
    match format {
        LogFormat::Human => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Render(args) => render::render(args),
        Command::Validate(args) => render::validate(args),
        Command::Crds => {
            out!("{}", crate::api::crds_yaml()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Sync(args) => sync::sync(args),
        Command::Diff(args) => sync::diff(args),
        Command::Run(args) => daemon::run(*args),
        Command::Trigger(args) => trigger::trigger(args),
        Command::Get(args) => get::get(args),
        Command::Create(args) => create::create(args),
        Command::Tree(args) => tree::tree(args),
        Command::Export(args) => export::export(args),
        Command::Suspend(args) => suspend::suspend(args, true),
        Command::Resume(args) => suspend::resume(args),
        Command::Uninstall(args) => uninstall::uninstall(args),
        Command::Version(args) => version::version(args),
        Command::Completion(args) => version::completion(args),
        Command::Ui(args) => ui::ui(args),
        Command::Install(args) => install::install(*args),
    }
}

/// Print the load's errors and warnings, one `file:line:col: message` per line, on stderr.
fn print_diagnostics(diags: &Diagnostics) {
    for d in &diags.0 {
        errln!("{d}");
    }
}

/// The log filter: `WEFT_LOG`, else `RUST_LOG` (what every Rust program and operator knows),
/// else `info`; an empty variable counts as unset.
fn log_directives(weft_log: Option<String>, rust_log: Option<String>) -> String {
    [weft_log, rust_log]
        .into_iter()
        .flatten()
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "info".to_string())
}

/// The most of the CLI's final error printed, in characters.
const MAX_ERROR_CHARS: usize = 16 * 1024;

/// The most of one log line written, in characters (a JSON line cut there is no longer JSON,
/// and ends in `… (N bytes in all)`).
const MAX_LOG_LINE_CHARS: usize = 16 * 1024;

/// stderr, with the password or token of every URL in a log line replaced by `***` and the line
/// cut at [`MAX_LOG_LINE_CHARS`]: the last net under the redaction and bound each message
/// already gets. The fmt layer writes one event per `write_all`, so a URL is never split between
/// two calls.
struct RedactedStderr;

impl std::io::Write for RedactedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let clean = crate::api::redact::redact_url_passwords(&text);
        let line = crate::api::bounded::clip(clean.trim_end_matches('\n'), MAX_LOG_LINE_CHARS);
        let mut out = std::io::stderr().lock();
        out.write_all(line.as_bytes())?;
        if clean.ends_with('\n') {
            out.write_all(b"\n")?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::log_directives;

    #[test]
    fn every_command_s_flags_are_consistent() {
        // clap's own check: no two flags share a name or a short, `requires` names real args.
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn weft_log_then_rust_log_then_info() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(log_directives(s("debug"), s("trace")), "debug");
        assert_eq!(log_directives(None, s("weft=trace")), "weft=trace");
        assert_eq!(log_directives(s(" "), s("warn")), "warn");
        assert_eq!(log_directives(None, None), "info");
    }
}
