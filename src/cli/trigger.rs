//! `weft trigger`: ask the daemon to sync now, as `flux reconcile` does: through the API server
//! (the `weft.io/requested-at` annotation on the root's Root, which its status answers, see
//! [`crate::daemon::roots::requests`]), so only a kubeconfig is needed; or, with
//! `--sync-token-file`, through the daemon's HTTP sync endpoint.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::args::{ClusterArgs, RootObjectArgs};
use crate::daemon::roots;
use crate::daemon::status::{PassReport, PassResultKind};
use crate::server::client::{self, TriggerAnswer};
use crate::server::signature;

/// The flags of `weft trigger`.
#[derive(Args, Debug, Clone)]
pub struct TriggerArgs {
    #[command(flatten)]
    pub object: RootObjectArgs,
    /// Name of the sync root (`--root-name` of `weft run`).
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    pub root_name: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Ask over HTTP instead of the API server: the file with the bearer token (the daemon's
    /// --sync-token-file).
    #[arg(long, env = "WEFT_SYNC_TOKEN_FILE")]
    pub sync_token_file: Option<PathBuf>,
    /// With --sync-token-file: base URL of the daemon's hooks port (`weft run --hooks-listen`).
    #[arg(
        long,
        env = "WEFT_URL",
        default_value = "http://127.0.0.1:8081",
        requires = "sync_token_file"
    )]
    pub url: String,
    /// Wait for the pass that answers this request and print its result; exit 1 if it failed
    /// or the root is suspended.
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

/// `weft trigger`: exit 0 when asked (or, with --wait, when the pass succeeded), 1 when the
/// pass failed or the root is suspended, 2 when the daemon could not be asked.
pub fn trigger(args: TriggerArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    if let Some((namespace, name)) = args.object.root(&args.cluster.weft_namespace)? {
        if args.sync_token_file.is_some() || args.force_prune {
            anyhow::bail!(
                "--sync-token-file and --force-prune are for the root of --root-name; a Root object is asked through the API server"
            );
        }
        return runtime.block_on(root_object(&args, &namespace, &name));
    }
    match &args.sync_token_file {
        Some(file) => runtime.block_on(over_http(&args, file)),
        None => runtime.block_on(through_api_server(&args)),
    }
}

/// Annotate the Root object; with `--wait`, watch it until its status answers.
async fn root_object(args: &TriggerArgs, namespace: &str, name: &str) -> anyhow::Result<ExitCode> {
    let (client, _) = args.cluster.connect().await?;
    let at = roots::requests::request(&client, namespace, name).await?;
    outln!(
        "requested a pass of Root {namespace}/{name} ({}={at})",
        crate::api::keys::REQUESTED_AT_ANNOTATION
    );
    if !args.wait {
        return Ok(ExitCode::SUCCESS);
    }
    let Some(answer) =
        roots::requests::wait_answer(&client, namespace, name, &at, args.timeout).await?
    else {
        errln!(
            "Root {namespace}/{name} did not answer within {}: is a daemon (`weft run`) reconciling Roots in {namespace}?",
            humantime::format_duration(args.timeout)
        );
        return Ok(ExitCode::from(2));
    };
    if answer.root.spec.suspend {
        outln!("Root {namespace}/{name} suspended: no pass ran");
        let why = crate::api::suspend::message(&answer.root.metadata);
        errln!("{}", crate::api::suspend::root_refusal(why));
        return Ok(ExitCode::from(1));
    }
    let status = answer.root.status.clone().unwrap_or_default();
    let revision = status
        .last_attempted_revision
        .clone()
        .unwrap_or_else(|| "-".into());
    outln!(
        "Root {namespace}/{name} at revision {revision}: {}",
        answer.line
    );
    // The pass that answered: the newest of the status's passes.
    if let Some(pass) = status.passes.first() {
        outln!(
            "pass {}: revision {} in {:.1}s ({})",
            pass.result.to_lowercase(),
            pass.revision.as_deref().unwrap_or("-"),
            pass.duration_ms as f64 / 1000.0,
            pass.reasons.join(", ")
        );
        for change in &pass.changes {
            outln!("  {change}");
        }
    }
    Ok(if answer.ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The root of `--root-name`: its Root in Weft's namespace, asked as any Root is. A root that
/// is not there is named with the roots that are, before anything is written.
async fn through_api_server(args: &TriggerArgs) -> anyhow::Result<ExitCode> {
    let (client, _) = args.cluster.connect().await?;
    let ns = &args.cluster.weft_namespace;
    roots::requests::require(&client, ns, &args.root_name).await?;
    if args.force_prune {
        anyhow::bail!(
            "--force-prune: root {} is the Root {ns}/{}, whose passes keep its prune guard; raise its spec.maxPruneFraction (kubectl edit root {} -n {ns}) for the pass that must prune more, or ask the daemon over HTTP (--sync-token-file --force-prune)",
            args.root_name,
            args.root_name,
            args.root_name
        );
    }
    root_object(args, ns, &args.root_name).await
}

/// `POST /api/v1/sync` with the bearer token.
async fn over_http(args: &TriggerArgs, token_file: &PathBuf) -> anyhow::Result<ExitCode> {
    let token = std::fs::read(token_file)
        .with_context(|| format!("reading --sync-token-file {}", token_file.display()))?;
    let token = String::from_utf8_lossy(&signature::secret_from_file_contents(&token)).into_owned();
    let answer =
        client::trigger(&args.url, &token, args.wait, args.force_prune, args.timeout).await?;
    match answer {
        TriggerAnswer::Queued { pass } => {
            outln!("queued: pass {pass}");
            Ok(ExitCode::SUCCESS)
        }
        TriggerAnswer::Finished(report) => {
            let result = match report.result {
                PassResultKind::Succeeded => "succeeded",
                PassResultKind::Failed => "failed",
                PassResultKind::Abandoned => "abandoned",
                PassResultKind::Suspended => "suspended",
            };
            Ok(print_report(&report, result))
        }
    }
}

/// Print a finished pass as `pass 7 succeeded: revision … (…) in 0.1s` and its changes; the
/// exit code: 0 when it succeeded, 1 otherwise.
fn print_report(report: &PassReport, result: &str) -> ExitCode {
    let s = report.summary;
    outln!(
        "pass {} {result}: revision {} ({} created, {} configured, {} unchanged, {} pruned) in {:.1}s",
        report.pass,
        report.revision.as_deref().unwrap_or("-"),
        s.created,
        s.configured,
        s.unchanged,
        s.pruned,
        report.duration_seconds
    );
    for c in &report.changes {
        outln!("  {} {}", c.object, c.action);
    }
    match &report.error {
        None if report.succeeded() => ExitCode::SUCCESS,
        None => ExitCode::from(1),
        Some(e) => {
            errln!("{result}: {e}");
            ExitCode::from(1)
        }
    }
}
