//! `weft trigger`: ask a running daemon to sync now.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::server::client::{self, TriggerAnswer};
use crate::server::signature;

/// The flags of `weft trigger`.
#[derive(Args, Debug, Clone)]
pub struct TriggerArgs {
    /// Base URL of the daemon's hooks port (`weft run --hooks-listen`), where the sync endpoint is.
    #[arg(long, env = "WEFT_URL", default_value = "http://127.0.0.1:8081")]
    pub url: String,
    /// File with the bearer token (the daemon's --sync-token-file).
    #[arg(long, env = "WEFT_SYNC_TOKEN_FILE")]
    pub sync_token_file: PathBuf,
    /// Wait for the pass to finish and print its result; exit 1 if it failed.
    #[arg(long)]
    pub wait: bool,
    /// Let this one pass prune past --max-prune-fraction (after checking that the deletion is
    /// intended).
    #[arg(long)]
    pub force_prune: bool,
    /// How long to wait for the answer.
    #[arg(long, env = "WEFT_TIMEOUT", default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
}

/// `weft trigger`: exit 0 when queued (or, with --wait, when the pass succeeded), 1 when the
/// pass failed, 2 when the daemon could not be asked.
pub fn trigger(args: TriggerArgs) -> anyhow::Result<ExitCode> {
    let token = std::fs::read(&args.sync_token_file).with_context(|| {
        format!(
            "reading --sync-token-file {}",
            args.sync_token_file.display()
        )
    })?;
    let token = String::from_utf8_lossy(&signature::secret_from_file_contents(&token)).into_owned();
    let runtime = tokio::runtime::Runtime::new()?;
    let answer = runtime.block_on(client::trigger(
        &args.url,
        &token,
        args.wait,
        args.force_prune,
        args.timeout,
    ))?;
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
