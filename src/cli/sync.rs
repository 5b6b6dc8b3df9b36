//! `weft sync` (one pass against the cluster) and `weft diff` (its server-side dry-run).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Args;

use super::args::{ApplyArgs, ClusterArgs, DecryptionArgs, RepoArgs};
use super::print_diagnostics;
use super::progress::ProgressPrinter;
use crate::daemon::record;
use crate::pass::{self, PassOptions};

/// The flags of `weft sync` and `weft diff`.
#[derive(Args, Debug, Clone)]
pub struct SyncArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub apply: ApplyArgs,
    #[command(flatten)]
    pub decryption: DecryptionArgs,
    /// Print the plan (create / update / unchanged / prune per object); change nothing.
    #[arg(long, env = "WEFT_DRY_RUN")]
    pub dry_run: bool,
}

impl SyncArgs {
    fn pass_options(&self) -> PassOptions {
        PassOptions {
            dry_run: self.dry_run,
            target_manifest: self.repo.target_manifest.clone(),
            ..self
                .apply
                .pass_options(&self.cluster.namespace, self.repo.location())
        }
    }
}

/// `weft sync`: exit 0 when everything applied and became ready, 1 when the pass failed.
pub fn sync(args: SyncArgs) -> anyhow::Result<ExitCode> {
    let credentials = args.repo.credentials(args.cluster.secret_credentials()?)?;
    let chart_fetch = args.repo.chart_fetch(credentials.clone())?;
    let snapshot = args.repo.read_snapshot(Some(credentials))?;
    let mut opts = args.pass_options();
    opts.chart_fetch = chart_fetch;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, calls) = args.cluster.connect().await?;
        opts.decryption = args
            .decryption
            .decryption(&client, &args.cluster.namespace)?;
        if !opts.dry_run {
            let suspended =
                record::suspension_of(&client, &opts.weft_namespace, &opts.root_name).await;
            if let Some(why) = suspended {
                eprintln!("error: {why}");
                return Ok(ExitCode::from(1));
            }
        }
        let printer = ProgressPrinter::new(std::io::stdout().is_terminal(), opts.dry_run);
        let result = pass::run_pass(&client, snapshot, &opts, &|p| printer.observe(p)).await;
        printer.finish();
        print_diagnostics(&result.diagnostics);
        let calls = calls.snapshot();
        println!(
            "{}",
            summary_line(&result, opts.dry_run, calls.writes, calls.reads)
        );
        match &result.error {
            None => Ok(ExitCode::SUCCESS),
            // The diagnostics above are the load's errors: said once.
            Some(pass::PassError::Load(l)) => {
                eprintln!(
                    "error: {} error(s) in the repository (above); nothing was applied or pruned",
                    l.0.errors().count()
                );
                Ok(ExitCode::from(1))
            }
            Some(e) => {
                eprintln!("error: {e}");
                Ok(ExitCode::from(1))
            }
        }
    })
}

/// The last line of `weft sync`: `synced revision …` only when the pass succeeded, `sync failed
/// at revision …` otherwise (and `plan for` / `plan failed for` with `--dry-run`).
fn summary_line(result: &pass::PassResult, dry_run: bool, writes: u64, reads: u64) -> String {
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

/// `weft diff`: exit 0 no changes, 1 changes, 2 error.
pub fn diff(args: SyncArgs) -> anyhow::Result<ExitCode> {
    let credentials = args.repo.credentials(args.cluster.secret_credentials()?)?;
    let chart_fetch = args.repo.chart_fetch(credentials.clone())?;
    let snapshot = args.repo.read_snapshot(Some(credentials))?;
    let mut opts = args.pass_options();
    opts.chart_fetch = chart_fetch;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        opts.decryption = args
            .decryption
            .decryption(&client, &args.cluster.namespace)?;
        let diffs = pass::diff_pass(&client, snapshot, &opts).await?;
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
