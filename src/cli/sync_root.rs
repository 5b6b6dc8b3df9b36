//! `weft sync root NAME [-n NS]`: one pass of a Root object's spec — its source, path, ref,
//! credentials Secret, prune guard, timeout, target manifest, decryption and identity — as the
//! Root controller would run it, once, from the command line (the flag form `weft sync --repo
//! …` is unchanged).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::args::ClusterArgs;
use super::progress::ProgressPrinter;
use crate::api::root::Root;
use crate::api::ResourceKey;
use crate::daemon::root::RootSource;
use crate::daemon::roots::identity::{identity_of, Identity};
use crate::daemon::roots::reconcile::root_settings;
use crate::daemon::roots::source::credentials_of;
use crate::pass::{self, PassInput, PassSettings};

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
        let api: Api<Root> = Api::namespaced(client.clone(), &key.namespace);
        let root = match api.get_opt(&key.name).await {
            Ok(Some(root)) => root,
            Ok(None) => {
                errln!("error: no Root {key} (`weft get roots -A` lists the roots); nothing was applied or pruned");
                return Ok(ExitCode::from(1));
            }
            Err(e) => {
                errln!(
                    "error: reading the Root {key}: {}; nothing was applied or pruned",
                    crate::api::kube_error::Text(&e)
                );
                return Ok(ExitCode::from(1));
            }
        };
        if root.spec.suspend && !args.dry_run {
            errln!("error: the Root {key} is suspended; nothing was applied or pruned (`weft resume root {} -n {}` first)", key.name, key.namespace);
            return Ok(ExitCode::from(1));
        }
        if let Some(range) = root.spec.source.git_ref.as_ref().and_then(|r| r.semver.as_ref()) {
            errln!("error: the Root {key} follows a semver range of tags (`{range}`), which `weft sync root` does not resolve; `weft trigger root {} -n {}` asks the daemon for a pass", key.name, key.namespace);
            return Ok(ExitCode::from(1));
        }
        let identity = match identity_of(&root, &key.namespace, &weft_namespace, None) {
            Ok(i) => i,
            Err(refused) => {
                errln!("error: the Root {key}: {}; nothing was applied or pruned", refused.message);
                return Ok(ExitCode::from(1));
            }
        };
        // A root with an account acts as it here too: every call of the pass impersonates it.
        let pass_client = match identity.user() {
            None => client.clone(),
            Some(user) => {
                let mut config = crate::apply::calls::config(
                    args.cluster.kubeconfig.as_deref(),
                    args.cluster.context.as_deref(),
                )
                .await?;
                config.auth_info.impersonate = Some(user);
                kube::Client::try_from(config)?
            }
        };
        let secret = match &root.spec.source.secret_ref {
            None => None,
            Some(r) => {
                let secrets: Api<Secret> = Api::namespaced(pass_client.clone(), &key.namespace);
                match secrets.get(&r.name).await {
                    Ok(s) => Some((r.name.clone(), s)),
                    Err(e) => {
                        errln!(
                            "error: reading the credentials Secret {}/{}: {}; nothing was applied or pruned",
                            key.namespace,
                            r.name,
                            crate::api::kube_error::Text(&e)
                        );
                        return Ok(ExitCode::from(1));
                    }
                }
            }
        };
        let credentials = credentials_of(&secret, &key).map_err(|f| anyhow::anyhow!(f.message))?;
        let git_ref = root.spec.source.git_ref.as_ref().and_then(|r| r.as_flag());
        let source = RootSource::open(
            &root.spec.source.url,
            git_ref.as_deref(),
            root.spec.path.as_deref(),
            Some(
                crate::source::git::default_cache_dir()
                    .join("roots")
                    .join(&key.namespace)
                    .join(&key.name),
            ),
            credentials,
            args.fetch_timeout,
        )
        .map_err(|e| anyhow::anyhow!("the Root {key}'s source: {e}"))?;
        let snapshot = match source.fetch(None).await {
            Ok(Some(s)) => s,
            Ok(None) => anyhow::bail!("the Root {key}'s repository gave no revision"),
            Err(e) => anyhow::bail!("fetching the Root {key}'s repository: {e}"),
        };
        let base = PassSettings {
            weft_namespace: weft_namespace.clone(),
            ..PassSettings::default()
        };
        let own = identity == Identity::Weft;
        let settings = root_settings(&base, &root, &key, own, &pass_client);
        let input = PassInput {
            dry_run: args.dry_run,
            ..PassInput::default()
        };
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
        let printer = ProgressPrinter::new(terminal, input.dry_run);
        let result = pass::run_pass(
            &pass_client,
            crate::source::Snapshot::clone(&snapshot),
            &settings,
            &input,
            &|p| printer.observe(p),
        )
        .await;
        printer.finish();
        super::print_diagnostics(&result.diagnostics);
        let counts = calls.snapshot();
        // Through an account's client the calls are not counted: said as the pass's own.
        let line = super::sync::summary_line(&result, input.dry_run, counts.writes, counts.reads);
        match identity.user() {
            None => outln!("Root {key}: {line}"),
            Some(user) => outln!("Root {key}, as {user}: {line} (the calls made as {user} are not counted)"),
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
