//! `weft suspend` / `weft resume`: freeze and unfreeze the whole sync root, as `flux suspend`
//! does. The state is recorded in the cluster (the root record, see [`crate::daemon::suspend`]),
//! so every replica, every shard and a restart obey it; a running daemon resumes with a pass.
//! A root that has no record yet is refused with the roots that do (a typo must not suspend
//! nothing and say "suspended"), unless `weft suspend --create` asks for exactly that.

use std::process::ExitCode;

use clap::Args;

use super::args::{ClusterArgs, RootObjectArgs};
use crate::daemon::{roots, suspend};

/// The flags of `weft suspend`.
#[derive(Args, Debug)]
pub struct SuspendArgs {
    /// Why (shown by `weft get root` and `/api/v1/status`).
    #[arg(long, short = 'm')]
    pub message: Option<String>,
    /// Suspend a root that has no record yet (before its first pass, so that it never runs
    /// until `weft resume`); without it, a root that is not there is an error.
    #[arg(long)]
    pub create: bool,
    #[command(flatten)]
    pub root: ResumeArgs,
}

/// The flags of `weft resume` (and the root of `weft suspend`).
#[derive(Args, Debug)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub object: RootObjectArgs,
    /// Name of the sync root (`--root-name` of `weft run`).
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    pub root_name: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `weft resume`.
pub fn resume(args: ResumeArgs) -> anyhow::Result<ExitCode> {
    suspend(
        SuspendArgs {
            message: None,
            create: false,
            root: args,
        },
        false,
    )
}

/// Record the root suspended (`true`) or resumed; exit 0 when recorded, 2 on an error (a root
/// that is not there, unless `--create`).
pub fn suspend(args: SuspendArgs, suspended: bool) -> anyhow::Result<ExitCode> {
    let message = args.message;
    let create = args.create;
    let args = args.root;
    let runtime = tokio::runtime::Runtime::new()?;
    let mut object = args.object.root(&args.cluster.weft_namespace)?;
    let named = object.is_some();
    if object.is_none() {
        // The flag root's Root object (`weft run --root-object`), when there is one: its
        // spec.suspend is the root's suspension, not the record.
        object = runtime.block_on(async {
            let (client, _) = args.cluster.connect().await?;
            let ns = &args.cluster.weft_namespace;
            let found = roots::requests::flag_root_object(&client, ns, &args.root_name).await;
            Ok::<_, anyhow::Error>(found.map(|_| (ns.clone(), args.root_name.clone())))
        })?;
    }
    if let Some((namespace, name)) = object {
        if named && create {
            anyhow::bail!(
                "--create is for the root of --root-name; create the Root {namespace}/{name} first (`weft create root`)"
            );
        }
        return runtime.block_on(async {
            let (client, _) = args.cluster.connect().await?;
            let message = message.as_deref();
            roots::requests::set_suspended(&client, &namespace, &name, suspended, message)
                .await?;
            if suspended {
                outln!("Root {namespace}/{name} suspended (spec.suspend: true): no pass runs until `weft resume root {name} -n {namespace}`");
            } else {
                outln!("Root {namespace}/{name} resumed (spec.suspend: false): a running daemon starts a pass now");
            }
            Ok(ExitCode::SUCCESS)
        });
    }
    let now = runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        if !create {
            if let Err(e) = crate::daemon::record::require(
                &client,
                &args.cluster.weft_namespace,
                &args.root_name,
            )
            .await
            {
                if suspended {
                    anyhow::bail!(
                        "{e}; `weft suspend --create` suspends a root before its first pass"
                    );
                }
                return Err(e.into());
            }
        }
        let message = suspended.then_some(message.as_deref()).flatten();
        Ok::<_, anyhow::Error>(
            suspend::write(
                &client,
                &args.cluster.weft_namespace,
                &args.root_name,
                suspended,
                message,
            )
            .await?,
        )
    })?;
    let record = crate::daemon::record::record_name(&args.root_name);
    if now.suspended {
        outln!(
            "root {} suspended (ConfigMap {}/{record}): no pass runs until `weft resume`",
            args.root_name,
            args.cluster.weft_namespace
        );
    } else {
        outln!(
            "root {} resumed (ConfigMap {}/{record}): a running daemon starts a pass now",
            args.root_name,
            args.cluster.weft_namespace
        );
    }
    Ok(ExitCode::SUCCESS)
}
