//! `weft version` and `weft completion`: what runs where, and shell completions.

use std::process::ExitCode;

use clap::{Args, CommandFactory};

use super::args::ClusterArgs;
use crate::daemon::leader::{build_version, lease_name, published};

/// The flags of `weft version`.
#[derive(Args, Debug)]
pub struct VersionArgs {
    /// Only the client's version: do not ask the cluster.
    #[arg(long)]
    pub client: bool,
    /// Name of the sync root whose daemon is asked (`--root-name` of `weft run`).
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    pub root_name: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Print the client's version and commit, then the daemon's (from its leader Lease) when the
/// cluster can be reached. Exit 0 either way: an unreachable daemon is reported, not an error.
pub fn version(args: VersionArgs) -> anyhow::Result<ExitCode> {
    outln!("client: weft {}", build_version());
    if args.client {
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Runtime::new()?;
    let daemon = runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        let name = lease_name(&args.root_name);
        let published = published(&client, &args.cluster.weft_namespace, &args.root_name).await?;
        Ok::<_, anyhow::Error>(match published {
            None => format!(
                "no daemon: no Lease {}/{name} (is `weft run` deployed with this root and namespace?)",
                args.cluster.weft_namespace
            ),
            Some(p) => {
                let holder = p.holder.unwrap_or_else(|| "no holder".to_string());
                let version = p
                    .version
                    .unwrap_or_else(|| "unknown (a release before 0.1.0 publishes none)".into());
                format!("weft {version}, leader {holder}")
            }
        })
    });
    match daemon {
        Ok(text) => outln!("daemon: {text}"),
        // One line, the cause said once: the daemon's version is unknown, and why.
        Err(e) => super::out::line(&format!(
            "daemon: version not read: {}",
            super::connect::explain(&e).unwrap_or_else(|| super::report::error_text(&e))
        )),
    }
    Ok(ExitCode::SUCCESS)
}

/// The shells `weft completion` writes for.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// The flags of `weft completion`.
#[derive(Args, Debug)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Write the completion script of `shell` on stdout.
pub fn completion(args: CompletionArgs) -> anyhow::Result<ExitCode> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut command = super::Cli::command();
    // Into memory first: clap_complete panics on a write error (a closed pipe, `| head`).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "weft", &mut script);
    super::out::write(&String::from_utf8_lossy(&script));
    Ok(ExitCode::SUCCESS)
}
