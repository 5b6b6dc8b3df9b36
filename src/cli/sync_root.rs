//! `weft sync root NAME [-n NS]`: one pass of a Root object's spec — its source, path, ref,
//! credentials Secret, prune guard, timeout, target manifest, decryption and identity — as the
//! Root controller would run it, once, from the command line (the flag form `weft sync --repo
//! …` is unchanged).

use std::process::ExitCode;
use std::time::Duration;

use super::args::ClusterArgs;
use super::progress::ProgressPrinter;
use crate::api::ResourceKey;
use crate::daemon::roots::once::{self, OnceError, OnceOptions};
use crate::pass::{self, PassInput};
use clap::Args;

/// `weft sync root NAME`: the Root object whose spec is synced once.
#[derive(Args, Debug, Clone)]
pub struct SyncRootArgs {
    /// The Root's name.
    pub name: String,
    /// The Root's namespace (default: Weft's namespace, `--weft-namespace`).
    #[arg(short = 'n', long = "namespace")]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The most one git fetch may take.
    #[arg(long, env = "WEFT_FETCH_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub fetch_timeout: Duration,
    /// Print the plan; change nothing.
    #[arg(long, env = "WEFT_DRY_RUN")]
    pub dry_run: bool,
}

/// Run the pass; exit 0 when it applied everything, 1 otherwise (a suspended or missing Root
/// included: nothing applied or pruned).
pub fn sync_root(args: SyncRootArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, calls) = args.cluster.connect().await?;
        let weft_namespace = args.cluster.weft_namespace.clone();
        let key = ResourceKey {
            namespace: args.namespace.clone().unwrap_or(weft_namespace.clone()),
            name: args.name.clone(),
        };
        let options = OnceOptions {
            weft_namespace: &weft_namespace,
            kubeconfig: args.cluster.kubeconfig.as_deref(),
            context: args.cluster.context.as_deref(),
            fetch_timeout: args.fetch_timeout,
            dry_run: args.dry_run,
        };
        let prepared = match once::prepare(&client, &key, &options).await {
            Ok(p) => p,
            Err(OnceError::Refused(line)) => {
                errln!("error: {line}");
                return Ok(ExitCode::from(1));
            }
            Err(e) => return Err(anyhow::anyhow!(e)),
        };
        let input = PassInput {
            dry_run: args.dry_run,
            ..PassInput::default()
        };
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
        let printer = ProgressPrinter::new(terminal, input.dry_run);
        let result = pass::run_pass(
            &prepared.client,
            prepared.snapshot,
            &prepared.settings,
            &input,
            &|p| printer.observe(p),
        )
        .await;
        printer.finish();
        super::print_diagnostics(&result.diagnostics);
        let counts = calls.snapshot();
        // Through an account's client the calls are not counted: said as the pass's own.
        let line = super::sync::summary_line(&result, input.dry_run, counts.writes, counts.reads);
        match prepared.user {
            None => outln!("Root {key}: {line}"),
            Some(user) => {
                outln!("Root {key}, as {user}: {line} (the calls made as {user} are not counted)")
            }
        }
        for (object, message) in &result.changes.conflicts {
            errln!("warning: {object}: conflict: {message}");
        }
        match &result.error {
            None => Ok(ExitCode::SUCCESS),
            Some(e) => {
                errln!("error: {e}");
                Ok(ExitCode::from(1))
            }
        }
    })
}
