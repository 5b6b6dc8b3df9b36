//! `weft sync` (one pass against the cluster) and `weft diff` (its server-side dry-run).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::args::{ApplyArgs, ClusterArgs, DecryptionArgs, GitSecretArgs, RepoArgs, WriterArgs};
use super::print_diagnostics;
use super::progress::ProgressPrinter;
use crate::api::conditions::now_rfc3339;
use crate::apply::diff::DiffChange;
use crate::daemon::armada::status as armada_status;
use crate::daemon::events::EventPublisher;
use crate::daemon::roots::flag::FlagRoot;
use crate::daemon::roots::once::{self, FlagSyncError, FlagSyncPass};
use crate::notify::Notifier;
use crate::pass::{self, PassInput, PassSettings};
use crate::sops::Decryption;
use crate::source::chart::FetchSettings;

/// How a command's result is printed: for people (`text`, the default), or as one JSON or YAML
/// document on stdout (progress then goes to stderr).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
    Yaml,
}

impl Output {
    /// Print `value` as JSON or YAML (nothing for `text`).
    pub fn print(self, value: &serde_json::Value) -> anyhow::Result<()> {
        match self {
            Output::Text => {}
            Output::Json => outln!("{}", serde_json::to_string_pretty(value)?),
            Output::Yaml => out!("{}", serde_saphyr::to_string(value)?),
        }
        Ok(())
    }
}

/// The flags of `weft sync`.
#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SyncArgs {
    /// `weft sync root NAME [-n NS]`: one pass of a Root object's spec instead of the flags'.
    #[command(subcommand)]
    pub target: Option<SyncTarget>,
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
    pub writer: WriterArgs,
    /// Print the plan (create / update / unchanged / prune per object); change nothing.
    #[arg(long, env = "WEFT_DRY_RUN")]
    pub dry_run: bool,
    /// Output: `text`, or the result as `json` / `yaml` on stdout (progress goes to stderr).
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: Output,
}

/// The flags of `weft diff`: the repository, the cluster and the root; nothing about pruning or
/// waiting, which a diff does not do.
#[derive(Args, Debug, Clone)]
pub struct DiffArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub git: GitSecretArgs,
    #[command(flatten)]
    pub decryption: DecryptionArgs,
    /// Name of the sync root (part of every object's owner id), as `weft sync --root-name`.
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    pub root_name: String,
    /// API calls at the same time.
    #[arg(long, env = "WEFT_CONCURRENCY", default_value_t = crate::apply::DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    /// Output: unified diffs (`text`), or `json` / `yaml` (per object: `object`, `change`, `diff`).
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: Output,
    /// The one WeaveCloud (`NAMESPACE/NAME`) whose launcher takeover may act in kube-system, as
    /// `weft sync --launcher-takeover`: the diff shows that takeover.
    #[arg(long, env = "WEFT_LAUNCHER_TAKEOVER", value_parser = super::args::parse_weavecloud_ref)]
    pub launcher_takeover: Option<String>,
}

impl DiffArgs {
    /// The settings of `weft diff`: the repository's, with the root and the concurrency.
    fn pass_settings(&self, chart_fetch: FetchSettings, decryption: Decryption) -> PassSettings {
        PassSettings {
            concurrency: self.concurrency.max(1),
            root_name: self.root_name.clone(),
            launcher_takeover: self.launcher_takeover.clone(),
            ..self
                .repo
                .pass_settings(Some(&self.cluster), chart_fetch, decryption)
        }
    }
}

/// What `weft sync` syncs when not its flags' repository.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum SyncTarget {
    /// One pass of the Root object NAME (its source, path, ref, identity), as the daemon runs it.
    Root(super::sync_root::SyncRootArgs),
}

/// The interval a Root created by `weft sync` polls at: `weft run`'s default (`--interval`).
const DEFAULT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// `weft sync`: exit 0 when everything applied and became ready, 1 when the pass failed.
pub fn sync(args: SyncArgs) -> anyhow::Result<ExitCode> {
    if let Some(SyncTarget::Root(root)) = args.target {
        return super::sync_root::sync_root(root);
    }
    let credentials = args
        .repo
        .credentials(args.git.secret_credentials(&args.cluster)?)?;
    let chart_fetch = args.repo.chart_fetch(credentials.clone())?;
    let snapshot = args.repo.read_snapshot(Some(credentials))?;
    // One thread: a pass's async work (building, sending and reading its requests) is light
    // beside the API server's, and its heavy steps (the render, helm, SOPS) run on blocking
    // threads anyway. With the two workers of the default runtime the threads woke each other
    // for every request: a first pass of 20,000 objects spent 1.4–1.8 s in the kernel (futex and
    // eventfd wake-ups) where one thread spends 0.5 s, CPU taken from the API server beside it
    // (docs/benchmarks.md, "Item 1: the ceiling of a pass that applies").
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let machine = args.output != Output::Text;
    runtime.block_on(async {
        let (client, calls) = args.cluster.connect().await?;
        let decryption = args
            .decryption
            .decryption(&client, &args.cluster.weft_namespace)?;
        let settings = args
            .apply
            .pass_settings(&args.repo, &args.cluster, chart_fetch, decryption);
        let input = PassInput {
            dry_run: args.dry_run,
            ..PassInput::default()
        };
        let flags = FlagRoot::from_flags(
            &settings,
            args.repo.git_ref.as_deref(),
            args.repo.path.as_deref(),
            DEFAULT_INTERVAL,
            args.git.git_secret.as_deref(),
        );
        if !input.dry_run {
            // Its own connection: the Root is no call of the pass (a no-op pass says 0 writes).
            let (root_client, _) = args.cluster.connect().await?;
            let (switch, ignore_leader) =
                (args.writer.switch_repository, args.writer.ignore_leader);
            match once::check_flag_sync(&root_client, &flags, switch, ignore_leader).await {
                Ok(_) => {}
                Err(FlagSyncError::Suspended(why)) => {
                    errln!("error: {why}");
                    return Ok(ExitCode::from(1));
                }
                Err(why) => {
                    errln!("error: {why}; nothing was applied or pruned");
                    return Ok(ExitCode::from(1));
                }
            }
        }
        let started_at = now_rfc3339();
        let terminal = if machine {
            std::io::stderr().is_terminal()
        } else {
            std::io::stdout().is_terminal()
        };
        let mut printer = ProgressPrinter::new(terminal, input.dry_run);
        if machine {
            printer = printer.on_stderr();
        }
        let result = pass::run_pass(&client, snapshot, &settings, &input, &|p| {
            printer.observe(p)
        })
        .await;
        printer.finish();
        print_diagnostics(&result.diagnostics);
        let calls = calls.snapshot();
        let line = summary_line(&result, input.dry_run, calls.writes, calls.reads);
        // Applied as this root's, and declared by another root too: said, and no failure.
        for (object, message) in &result.changes.conflicts {
            errln!("warning: {object}: conflict: {message}");
        }
        if machine {
            errln!("{line}");
            args.output.print(&sync_document(
                &result,
                input.dry_run,
                calls.writes,
                calls.reads,
            ))?;
        } else {
            outln!("{line}");
        }
        if !input.dry_run {
            record_statuses(&client, &settings, &result, machine).await;
            let (root_client, _) = args.cluster.connect().await?;
            let pass = FlagSyncPass {
                result: &result,
                started_at,
            };
            let switch = args.writer.switch_repository;
            if let Err(e) = once::record_flag_sync(&root_client, &flags, switch, &pass).await {
                errln!(
                    "warning: the root {} was synced but its Root was not written (`weft get root` shows the previous outcome): {e}",
                    settings.root_name
                );
            }
        }
        match &result.error {
            None => Ok(ExitCode::SUCCESS),
            // The diagnostics above are the load's errors: said once.
            Some(pass::PassError::Load(l)) => {
                errln!(
                    "error: {} error(s) in the repository (above); nothing was applied or pruned",
                    l.0.errors().count()
                );
                Ok(ExitCode::from(1))
            }
            Some(e) => {
                errln!("error: {e}");
                Ok(ExitCode::from(1))
            }
        }
    })
}

/// The Armada charts' (and their groups' and manifests') phases and `Ready` conditions from this
/// one-shot pass, as the daemon writes them after its passes: `weft get` and `kubectl get act`
/// show READY and PHASE after a `weft sync` without a daemon. After the summary's count of API
/// writes: these are the status's, not the pass's (a second pass that changes nothing writes
/// none either way, as an unchanged status is not written again).
///
/// Its notification Providers and Alerts too, judged as the daemon judges them: one that cannot
/// be used (a missing Secret) is `Ready=False` with an event and a warning here, and fails
/// nothing.
async fn record_statuses(
    client: &kube::Client,
    settings: &PassSettings,
    result: &pass::PassResult,
    machine: bool,
) {
    let Some(set) = &result.set else { return };
    // Each WeaveCloud's status as its controller writes it, and what its flux kept.
    for line in pass::takeover::status::record_one_shot(
        client,
        &settings.weft_namespace,
        settings.launcher_takeover.as_deref(),
        set,
        &result.changes,
    )
    .await
    {
        // `-o json|yaml` keeps stdout for its one document.
        if machine || line.starts_with("warning:") {
            errln!("{line}");
        } else {
            outln!("{line}");
        }
    }
    for unusable in
        crate::notify::status::record_applied(client, &settings.weft_namespace, set).await
    {
        errln!("warning: {unusable}");
    }
    let events = EventPublisher::new(client.clone(), Notifier::disabled())
        .sealed_in(&settings.weft_namespace);
    armada_status::record_pass(
        client,
        &events,
        set,
        &result.changes,
        result.error.as_ref(),
        &armada_status::ChartPhases::default(),
    )
    .await;
}

/// The last line of `weft sync`: `synced revision …` only when the pass succeeded, `sync failed
/// at revision …` otherwise (and `plan for` / `plan failed for` with `--dry-run`).
pub(super) fn summary_line(
    result: &pass::PassResult,
    dry_run: bool,
    writes: u64,
    reads: u64,
) -> String {
    let verb = match (dry_run, result.succeeded()) {
        (true, true) => "plan for",
        (true, false) => "plan failed for",
        (false, true) => "synced",
        (false, false) => "sync failed at",
    };
    format!(
        "{verb} revision {}: {} in {:.1?} ({writes} API writes, {reads} reads)",
        result.revision,
        result.changes.summary(),
        result.duration,
    )
}

/// `weft sync -o json|yaml`: the pass as one document.
fn sync_document(
    result: &pass::PassResult,
    dry_run: bool,
    writes: u64,
    reads: u64,
) -> serde_json::Value {
    let s = result.changes.summary();
    let changes: Vec<serde_json::Value> = result
        .changes
        .entries
        .iter()
        .map(|c| {
            json!({
                "object": c.object.to_string(),
                "action": if dry_run { c.action.planned() } else { c.action.done() },
                "owner": c.owner.reference(),
                "reason": c.reason,
            })
        })
        .collect();
    json!({
        "revision": result.revision,
        "dryRun": dry_run,
        "result": if result.succeeded() { "succeeded" } else { "failed" },
        "error": result.error.as_ref().map(|e| e.to_string()),
        "diagnostics": result.diagnostics.0.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
        "summary": {
            "created": s.created, "configured": s.configured, "unchanged": s.unchanged,
            "deleted": s.deleted, "skipped": s.skipped,
        },
        "changes": changes,
        "conflicts": result.changes.conflicts.iter().map(|(o, m)| json!({"object": o.to_string(), "message": m})).collect::<Vec<_>>(),
        "durationSeconds": result.duration.as_secs_f64(),
        "apiWrites": writes,
        "apiReads": reads,
    })
}

/// `weft diff`: exit 0 no changes, 1 changes, 2 error.
pub fn diff(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let credentials = args
        .repo
        .credentials(args.git.secret_credentials(&args.cluster)?)?;
    let chart_fetch = args.repo.chart_fetch(credentials.clone())?;
    let snapshot = args.repo.read_snapshot(Some(credentials))?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        let decryption = args
            .decryption
            .decryption(&client, &args.cluster.weft_namespace)?;
        let settings = args.pass_settings(chart_fetch, decryption);
        let diffs = pass::diff_pass(&client, snapshot, &settings, &PassInput::default()).await?;
        match args.output {
            Output::Text => diffs.iter().for_each(|d| out!("{}", d.text)),
            machine => {
                let doc: Vec<serde_json::Value> = diffs
                    .iter()
                    .map(|d| {
                        json!({
                            "object": d.object.to_string(),
                            "change": match d.change {
                                DiffChange::Create => "create",
                                DiffChange::Update => "update",
                                DiffChange::Prune => "prune",
                            },
                            "diff": d.text,
                        })
                    })
                    .collect();
                machine.print(&serde_json::Value::Array(doc))?;
            }
        }
        if diffs.is_empty() {
            errln!("no changes");
            Ok(ExitCode::SUCCESS)
        } else {
            errln!("{} object(s) would change", diffs.len());
            Ok(ExitCode::from(1))
        }
    })
}
