//! `weft create root NAME`: a Root object from flags, as `flux create kustomization`: printed
//! as YAML with `--export`, else server-side applied (the API server checks it against the
//! Root schema, so a bad interval or two refs are refused with the field named).

use std::process::ExitCode;

use clap::{ArgGroup, Args, Subcommand};
use kube::ResourceExt;

use super::args::ClusterArgs;
use crate::api::root::{GitRefSpec, GitSource, LocalReference, Root, RootReference, RootSpec};

#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(subcommand)]
    pub what: CreateWhat,
}

#[derive(Subcommand, Debug)]
pub enum CreateWhat {
    /// A Root: a repository, a ref and a path Weft keeps the cluster equal to.
    Root(CreateRootArgs),
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("git_ref").args(["branch", "tag", "semver", "commit"])))]
pub struct CreateRootArgs {
    /// The Root's name.
    pub name: String,
    /// The Root's namespace.
    #[arg(long = "namespace", short = 'n', default_value = "default")]
    pub in_namespace: String,
    /// The git repository (`https://…`, `ssh://…`, `git://…`).
    #[arg(long)]
    pub url: String,
    /// Follow this branch (default: the remote's HEAD).
    #[arg(long)]
    pub branch: Option<String>,
    /// Follow this tag.
    #[arg(long)]
    pub tag: Option<String>,
    /// Follow the highest tag in this semver range.
    #[arg(long)]
    pub semver: Option<String>,
    /// Stay at this commit (40 hex digits).
    #[arg(long)]
    pub commit: Option<String>,
    /// The directory inside the repository.
    #[arg(long)]
    pub path: Option<String>,
    /// How often the repository is polled (`1m`, `5m`, `1h`).
    #[arg(long)]
    pub interval: Option<String>,
    /// How long one pass may take.
    #[arg(long)]
    pub timeout: Option<String>,
    /// The ServiceAccount of the namespace the Root's passes act as (required outside Weft's
    /// namespace).
    #[arg(long = "service-account")]
    pub service_account: Option<String>,
    /// The Secret of the namespace with the repository's credentials.
    #[arg(long = "secret-ref")]
    pub secret_ref: Option<String>,
    /// Roots that must be Ready first (`NAME` or `NAMESPACE/NAME`; repeat or comma-separate).
    #[arg(long = "depends-on", value_delimiter = ',')]
    pub depends_on: Vec<String>,
    /// Create it suspended.
    #[arg(long)]
    pub suspend: bool,
    /// Print the Root as YAML instead of applying it.
    #[arg(long)]
    pub export: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

impl CreateRootArgs {
    /// The Root the flags describe.
    pub fn root(&self) -> Root {
        let git_ref = GitRefSpec {
            branch: self.branch.clone(),
            tag: self.tag.clone(),
            commit: self.commit.clone(),
            semver: self.semver.clone(),
        };
        let mut root = Root::new(
            &self.name,
            RootSpec {
                source: GitSource {
                    url: self.url.clone(),
                    git_ref: (git_ref != GitRefSpec::default()).then_some(git_ref),
                    secret_ref: self.secret_ref.clone().map(|name| LocalReference { name }),
                },
                path: self.path.clone(),
                interval: self.interval.clone(),
                timeout: self.timeout.clone(),
                suspend: self.suspend,
                depends_on: self
                    .depends_on
                    .iter()
                    .map(|d| match d.split_once('/') {
                        Some((ns, name)) => RootReference {
                            name: name.to_string(),
                            namespace: Some(ns.to_string()),
                        },
                        None => RootReference {
                            name: d.clone(),
                            namespace: None,
                        },
                    })
                    .collect(),
                service_account_name: self.service_account.clone(),
                ..Default::default()
            },
        );
        root.metadata.namespace = Some(self.in_namespace.clone());
        root
    }
}

/// `weft create …`.
pub fn create(args: CreateArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        CreateWhat::Root(args) => create_root(args),
    }
}

fn create_root(args: CreateRootArgs) -> anyhow::Result<ExitCode> {
    let root = args.root();
    if args.export {
        print!("---\n{}", serde_saphyr::to_string(&root)?);
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        let applied = crate::daemon::roots::requests::create(&client, &args.in_namespace, &root)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "Root {}/{}: {}",
                    args.in_namespace,
                    args.name,
                    crate::apply::describe(&e).0
                )
            })?;
        println!(
            "Root {}/{} applied (generation {})",
            args.in_namespace,
            applied.name_any(),
            applied.metadata.generation.unwrap_or_default()
        );
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        what: CreateWhat,
    }

    fn parse(args: &[&str]) -> Result<CreateRootArgs, clap::Error> {
        let mut all = vec!["weft", "root"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).map(|c| match c.what {
            CreateWhat::Root(r) => r,
        })
    }

    #[test]
    fn the_flags_make_the_root_flux_create_would() {
        let args = parse(&[
            "apps",
            "-n",
            "team-a",
            "--url",
            "https://git.example/a.git",
            "--branch",
            "main",
            "--path",
            "clusters/prod",
            "--interval",
            "5m",
            "--service-account",
            "deployer",
            "--depends-on",
            "infra,platform/crds",
        ])
        .unwrap();
        let root = serde_json::to_value(args.root()).unwrap();
        assert_eq!(
            root,
            serde_json::json!({
                "apiVersion": "weft.io/v1alpha1",
                "kind": "Root",
                "metadata": {"name": "apps", "namespace": "team-a"},
                "spec": {
                    "source": {"url": "https://git.example/a.git", "ref": {"branch": "main"}},
                    "path": "clusters/prod",
                    "interval": "5m",
                    "suspend": false,
                    "dependsOn": [{"name": "infra"}, {"name": "crds", "namespace": "platform"}],
                    "serviceAccountName": "deployer"
                }
            })
        );
    }

    #[test]
    fn two_refs_at_once_are_refused() {
        let err = parse(&[
            "apps",
            "--url",
            "https://git.example/a.git",
            "--branch",
            "main",
            "--tag",
            "v1",
        ])
        .err()
        .unwrap();
        assert!(err.to_string().contains("--tag"), "{err}");
    }
}
