//! `weft suspend` / `weft resume`: freeze and unfreeze a root, as `flux suspend` does. The state
//! is the root's Root (`spec.suspend`, with why in `weft.io/suspend-message`, see
//! [`crate::daemon::roots::requests::set_suspended`]), so every replica, every shard and a
//! restart obey it; a running daemon resumes with a pass. A root that has no Root yet is refused
//! with the roots that do (a typo must not suspend nothing and say "suspended"), unless `weft
//! suspend --create --repo …` asks for exactly that: the Root the flags of `weft run --repo …`
//! would make, suspended before its first pass.

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::Args;

use super::args::{ClusterArgs, RootObjectArgs};
use crate::api::keys::{DEFAULT_NAMESPACE_ANNOTATION, SUSPEND_MESSAGE_ANNOTATION};
use crate::daemon::roots;
use crate::daemon::roots::flag::FlagRoot;
use crate::pass::PassSettings;

/// The flags of `weft suspend`.
#[derive(Args, Debug)]
pub struct SuspendArgs {
    /// Why (shown by `weft get root` and `/api/v1/status`).
    #[arg(long, short = 'm')]
    pub message: Option<String>,
    /// Suspend a root that has no Root yet (before its first pass, so that it never runs until
    /// `weft resume`): its Root is made from `--repo` (`--ref`, `--path`) as `weft run` would
    /// make it; without it, a root that is not there is an error.
    #[arg(long, requires = "repo")]
    pub create: bool,
    /// With `--create`: the repository the root syncs (as `weft run --repo`).
    #[arg(long, requires = "create")]
    pub repo: Option<String>,
    /// With `--create`: the ref it follows (as `weft run --ref`).
    #[arg(long = "ref", requires = "create")]
    pub git_ref: Option<String>,
    /// With `--create`: the directory of the repository it syncs (as `weft run --path`).
    #[arg(long, requires = "create")]
    pub path: Option<String>,
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
            repo: None,
            git_ref: None,
            path: None,
            root: args,
        },
        false,
    )
}

/// Set the Root's `spec.suspend` (`suspended`); exit 0 when written, 2 on an error (a root
/// that is not there, unless `--create`).
pub fn suspend(args: SuspendArgs, suspended: bool) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    let weft_namespace = args.root.cluster.weft_namespace.clone();
    let named = args.root.object.root(&weft_namespace)?;
    if named.is_some() && args.create {
        anyhow::bail!(
            "--create is for the root of --root-name; create a Root with `weft create root NAME --suspend`"
        );
    }
    let flag = named.is_none();
    let (namespace, name) = named.unwrap_or((weft_namespace, args.root.root_name.clone()));
    runtime.block_on(async {
        let (client, _) = args.root.cluster.connect().await?;
        let message = args.message.as_deref();
        match roots::requests::require(&client, &namespace, &name).await {
            Ok(_) => {}
            Err(roots::requests::LookupError::Missing { .. }) if args.create => {
                create_suspended(&client, &args, &namespace, &name).await?;
                outln!("Root {namespace}/{name} created suspended (spec.suspend: true): no pass runs until `weft resume`");
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) if suspended && flag => {
                anyhow::bail!("{e}; `weft suspend --create --repo …` suspends a root before its first pass")
            }
            Err(e) => return Err(e.into()),
        }
        roots::requests::set_suspended(&client, &namespace, &name, suspended, message).await?;
        let resume = if flag {
            "`weft resume`".to_string()
        } else {
            format!("`weft resume root {name} -n {namespace}`")
        };
        if suspended {
            outln!("Root {namespace}/{name} suspended (spec.suspend: true): no pass runs until {resume}");
        } else {
            outln!("Root {namespace}/{name} resumed (spec.suspend: false): a running daemon starts a pass now");
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The Root of `--root-name` made from `--repo`, `--ref` and `--path` as `weft run` makes it
/// (see `roots::flag`), suspended, with why.
async fn create_suspended(
    client: &kube::Client,
    args: &SuspendArgs,
    namespace: &str,
    name: &str,
) -> anyhow::Result<()> {
    let repo = args.repo.clone().unwrap_or_default();
    // A local directory as `weft run --repo` names it.
    let repo_location = std::fs::canonicalize(&repo)
        .map(|p| p.display().to_string())
        .unwrap_or(repo);
    let settings = PassSettings {
        repo_location,
        weft_namespace: namespace.to_string(),
        root_name: name.to_string(),
        ..PassSettings::default()
    };
    let flags = FlagRoot::from_flags(
        &settings,
        args.git_ref.as_deref(),
        args.path.as_deref(),
        std::time::Duration::from_secs(60),
        None,
    );
    let mut root = crate::api::root::Root::new(name, flags.spec);
    root.spec.suspend = true;
    root.metadata.namespace = Some(namespace.to_string());
    let mut annotations = BTreeMap::from([(
        DEFAULT_NAMESPACE_ANNOTATION.to_string(),
        flags.default_namespace,
    )]);
    if let Some(m) = args.message.as_deref().filter(|m| !m.trim().is_empty()) {
        annotations.insert(SUSPEND_MESSAGE_ANNOTATION.to_string(), m.to_string());
    }
    root.metadata.annotations = Some(annotations);
    crate::apply::inventory::ensure_namespace(client, namespace).await?;
    roots::requests::create(client, namespace, &root)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot create the Root {namespace}/{name}: {}",
                crate::api::kube_error::Text(&e)
            )
        })?;
    Ok(())
}
