//! `weft ui`: the dashboard on loopback, with the user's kubeconfig (see [`crate::ui`]).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::args::{ClusterArgs, DecryptionArgs, GitSecretArgs, RepoArgs};
use crate::pass::PassSettings;
use crate::ui::{DriftSource, Ui, UiConfig};

/// The flags of `weft ui`.
#[derive(Args, Debug)]
pub struct UiArgs {
    /// Address to serve on: loopback only (the UI acts with your credentials and has no login).
    #[arg(long, env = "WEFT_UI_LISTEN", default_value = "127.0.0.1:9292")]
    pub listen: SocketAddr,
    /// Port on 127.0.0.1 (instead of `--listen`); 0 picks a free one.
    #[arg(long, conflicts_with = "listen")]
    pub port: Option<u16>,
    /// How often a live page is re-rendered when nothing it watches changed (object health).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub refresh: Duration,
    /// The root the drift view's dry-run is for (`--root-name` of `weft run`).
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    pub root_name: String,
    /// The repository the drift view diffs against (optional; `PATH` or `--repo`).
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub git: GitSecretArgs,
    #[command(flatten)]
    pub decryption: DecryptionArgs,
}

/// `weft ui`: serve until interrupted; exit 2 when it cannot start.
pub fn ui(args: UiArgs) -> anyhow::Result<ExitCode> {
    let addr = match args.port {
        Some(p) => SocketAddr::from(([127, 0, 0, 1], p)),
        None => args.listen,
    };
    let drift = match args.repo.given() {
        None => None,
        Some(_) => {
            let credentials = args
                .repo
                .credentials(args.git.secret_credentials(&args.cluster)?)?;
            let chart_fetch = args.repo.chart_fetch(credentials.clone())?;
            let repo = args.repo.clone();
            let read = move || {
                repo.read_snapshot(Some(credentials.clone()))
                    .map_err(|e| format!("{e:#}"))
            };
            Some((chart_fetch, Arc::new(read)))
        }
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        let drift = match drift {
            None => None,
            Some((chart_fetch, read)) => Some(DriftSource {
                location: crate::api::redact::redact_url_passwords(&args.repo.location()),
                read,
                settings: Arc::new(PassSettings {
                    root_name: args.root_name.clone(),
                    ..args.repo.pass_settings(
                        Some(&args.cluster),
                        chart_fetch,
                        args.decryption
                            .decryption(&client, &args.cluster.weft_namespace)?,
                    )
                }),
            }),
        };
        let config = UiConfig {
            weft_namespace: args.cluster.weft_namespace.clone(),
            drift,
            refresh: args.refresh.max(Duration::from_secs(1)),
            read_only: false,
        };
        Ui::new(client, config).serve(addr).await?;
        Ok(ExitCode::SUCCESS)
    })
}
