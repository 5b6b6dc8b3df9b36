//! `weft uninstall`: remove Weft's finalizers (and with `--prune`, what Weft created), so that
//! nothing is stuck terminating once Weft is gone. The work is in [`crate::daemon::uninstall`].

use std::process::ExitCode;

use clap::Args;

use super::args::ClusterArgs;
use crate::daemon::uninstall::{self, UninstallOptions};

/// The flags of `weft uninstall`.
#[derive(Args, Debug)]
pub struct UninstallArgs {
    /// Also delete what Weft created (by its ownership labels, as a prune does) and its own
    /// records (inventory, the root's Root, Lease, cached agent bundles).
    #[arg(long)]
    pub prune: bool,
    /// Name of the sync root whose objects `--prune` deletes.
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    pub root_name: String,
    /// Go on although a daemon seems to hold a Lease of Weft's namespace.
    #[arg(long)]
    pub ignore_running: bool,
    /// Deletes at the same time.
    #[arg(long, default_value_t = crate::apply::DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Exit 0 when done, 2 on an error (a running daemon, or with `--prune` a root that is not
/// there, included).
pub fn uninstall(args: UninstallArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    let report = runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        if args.prune {
            // What `--prune` deletes is the root's: a root that is not there is an error that
            // names the roots that are, not an uninstall that prunes nothing.
            let ns = &args.cluster.weft_namespace;
            crate::daemon::roots::requests::require(&client, ns, &args.root_name).await?;
        }
        let opts = UninstallOptions {
            weft_namespace: args.cluster.weft_namespace.clone(),
            root_name: args.root_name.clone(),
            prune: args.prune,
            ignore_running: args.ignore_running,
            concurrency: args.concurrency,
        };
        Ok::<_, anyhow::Error>(uninstall::uninstall(&client, &opts).await?)
    })?;
    for c in &report.pruned.entries {
        outln!("{c}");
    }
    for r in &report.records {
        outln!("{r} deleted");
    }
    for name in &report.released {
        outln!("{name}: Weft's finalizer removed");
    }
    outln!(
        "uninstalled: {} finalizer(s) removed, {} object(s) pruned, {} record(s) deleted",
        report.released.len(),
        uninstall::deleted(&report),
        report.records.len()
    );
    Ok(ExitCode::SUCCESS)
}
