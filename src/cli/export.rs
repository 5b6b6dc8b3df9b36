//! `weft export`: the root's configuration and Weft's own resources as YAML, as `flux export`
//! prints Flux's: the root's configuration (which repository and path its Root syncs, and
//! whether it is suspended, as the root record document `weft-root-<name>`), then every
//! WeaveCloud, ArmadaManifest, ArmadaChartGroup, ArmadaChart, Provider and Alert — `apiVersion`,
//! `kind`, `metadata` (name, namespace, the user's labels and annotations) and `spec`, without
//! status, server fields or Weft's ownership marks, so the output can be kept in git or applied
//! to another cluster (read by `daemon::export`; this file parses the flags and
//! prints). Read only. Exit 0, 1 when there is nothing to export, 2 on an error.

use std::process::ExitCode;

use clap::Args;

use super::args::ClusterArgs;
use crate::daemon::export;

/// The flags of `weft export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Name of the sync root whose configuration is exported (`--root-name` of `weft sync` /
    /// `weft run`: its Root in Weft's namespace).
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    pub root_name: String,
    /// Only the resources of this namespace, as kubectl's `-n` (default: every namespace; the
    /// root's configuration, from its Root in Weft's namespace, is always exported).
    #[arg(long = "namespace", short = 'n')]
    pub in_namespace: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `weft export`.
pub fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        let ns = args.in_namespace.as_deref();
        let docs =
            export::documents(&client, &args.cluster.weft_namespace, &args.root_name, ns).await?;
        if docs.is_empty() {
            errln!(
                "error: nothing to export: no Root `{}` in namespace {} and none of \
                 Weft's resources{}",
                args.root_name,
                args.cluster.weft_namespace,
                ns.map(|n| format!(" in namespace {n}")).unwrap_or_default()
            );
            return Ok(ExitCode::from(1));
        }
        let mut out = String::new();
        for doc in &docs {
            out.push_str("---\n");
            out.push_str(&crate::render::output::to_yaml(doc)?);
        }
        out!("{out}");
        Ok(ExitCode::SUCCESS)
    })
}
