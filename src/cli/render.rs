//! `weft render` and `weft validate`: the pipeline of a pass ([`prepare`]) offline — no cluster
//! inputs, the built-in agent bundle — so that what they print or reject is what `weft sync`
//! would apply or refuse.

use crate::api::owner::OwnerKind;
use std::process::ExitCode;

use clap::Args;

use crate::apply::diff::mask_secret;
use crate::pass::prepare::{prepare, Prepared};
use crate::pass::PassError;
use crate::render::{output, AgentLayer, DesiredObject, Owner};

use super::args::{AgeKeyArgs, RepoArgs};
use super::print_diagnostics;

/// The flags of `weft render`.
#[derive(Args, Debug, Clone)]
pub struct RenderArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub key: AgeKeyArgs,
    /// Print the values of Secrets' `data` and `stringData` (masked as `***` by default: they
    /// may come from SOPS-encrypted files).
    #[arg(long, env = "WEFT_SHOW_SECRETS")]
    pub show_secrets: bool,
}

/// The flags of `weft validate`.
#[derive(Args, Debug, Clone)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub key: AgeKeyArgs,
}

/// How an offline preparation ended.
enum Outcome {
    Rendered(Prepared),
    /// The repository did not load; its diagnostics are printed.
    NotLoaded,
    /// A chart source or the render failed: the error of that stage.
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

/// Read `args`' repository, then load it, fetch its charts and render it, offline. Reading the
/// repository is an `Err` (exit 2, as for every command); what the pipeline says is the outcome.
fn prepare_offline(args: &RepoArgs, key: &AgeKeyArgs) -> anyhow::Result<Outcome> {
    let chart_fetch = args.chart_fetch(args.credentials(None)?)?;
    let snapshot = args.read_snapshot(Some(chart_fetch.credentials.clone()))?;
    let settings = args.pass_settings(None, chart_fetch, key.decryption()?);
    let runtime = tokio::runtime::Runtime::new()?;
    Ok(
        match runtime.block_on(prepare(snapshot, None, AgentLayer::Included, &settings)) {
            // A chart that fails alone stops only its group in a pass; offline it is an error.
            Ok(prepared) => match prepared.set.failure_error() {
                Some(e) => {
                    print_diagnostics(&prepared.diagnostics);
                    Outcome::Failed(Box::new(e))
                }
                None => Outcome::Rendered(prepared),
            },
            Err(PassError::Load(load)) => {
                print_diagnostics(&load.0);
                Outcome::NotLoaded
            }
            // Without the words of a pass ("nothing was applied"): render and validate apply nothing.
            Err(PassError::Render(e)) => Outcome::Failed(Box::new(e)),
            Err(PassError::ChartSource(e)) => Outcome::Failed(Box::new(e)),
            Err(e) => Outcome::Failed(Box::new(e)),
        },
    )
}

/// `weft render`: print every object of the desired set as multi-document YAML, in apply order.
/// Secrets' values are masked unless `--show-secrets`.
/// Exit 1 when the repository does not load, 2 when a chart or the render fails.
pub fn render(args: RenderArgs) -> anyhow::Result<ExitCode> {
    match prepare_offline(&args.repo, &args.key)? {
        Outcome::Rendered(prepared) => {
            print_diagnostics(&prepared.diagnostics);
            let objects = if args.show_secrets {
                prepared.set.objects().to_vec()
            } else {
                masked(prepared.set.objects())
            };
            out!("{}", output::to_yaml_stream(&objects)?);
            Ok(ExitCode::SUCCESS)
        }
        Outcome::NotLoaded => Ok(ExitCode::from(1)),
        Outcome::Failed(e) => {
            errln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

/// `weft validate`: print every problem as `file:line:col: message`; exit 1 when the repository
/// does not load, or when its charts or agents do not render.
pub fn validate(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    match prepare_offline(&args.repo, &args.key)? {
        Outcome::Rendered(prepared) => {
            print_diagnostics(&prepared.diagnostics);
            // The sync root owns exactly the repository's own documents, one object each.
            let documents = prepared
                .set
                .objects()
                .iter()
                .filter(|o| {
                    matches!(
                        o.owner,
                        Owner {
                            kind: OwnerKind::Root,
                            ..
                        }
                    )
                })
                .count();
            outln!("ok: {documents} documents, no errors");
            Ok(ExitCode::SUCCESS)
        }
        Outcome::NotLoaded => Ok(ExitCode::from(1)),
        Outcome::Failed(e) => {
            errln!("error: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

/// The objects with every Secret's values masked.
fn masked(objects: &[DesiredObject]) -> Vec<DesiredObject> {
    objects
        .iter()
        .map(|o| {
            let mut o = o.clone();
            // Only Secrets change: the others are not parsed again.
            if o.kind() == "Secret" {
                o.object.edit(mask_secret);
            }
            o
        })
        .collect()
}
