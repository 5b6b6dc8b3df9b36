//! The flag groups shared by several commands, each defined once (as carvel kapp's
//! `*_flags.go`): where the repository is ([`RepoArgs`]), which cluster ([`ClusterArgs`]), how
//! a pass applies ([`ApplyArgs`]), and which age identities decrypt its SOPS files
//! ([`AgeKeyArgs`], [`DecryptionArgs`]). A command flattens the groups it needs; names, environment
//! variables and defaults live only here.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use kube::Client;

use crate::apply::calls::{self, CallCounts};
use crate::apply::fence::{FenceLayer, WriteFence};
use crate::daemon::namespaces::WatchNamespaces;
use crate::pass::PassSettings;
use crate::sops::{self, Decryption, DecryptionSecret, Identity};
use crate::source::chart::{CaCertificates, FetchSettings};
use crate::source::fetch_policy::{
    ChannelPolicy, ChartSourcePolicy, UrlAllowList, DEFAULT_CHANNELS, DEFAULT_CHART_SOURCES,
};
use crate::source::git::auth::{self as credentials, Credentials};
use crate::source::{self, Snapshot, SnapshotLimits};

/// Where the desired state comes from: `PATH`, `--repo`, `--ref`, `--path`.
#[derive(Args, Debug, Clone)]
pub struct RepoArgs {
    /// A checkout (directory) of the config repository.
    #[arg(value_name = "PATH", conflicts_with = "repo")]
    pub dir: Option<PathBuf>,
    /// The repository: a git URL or a local directory.
    #[arg(long, env = "WEFT_REPO")]
    pub repo: Option<String>,
    /// Branch, tag or commit SHA [default: the remote's HEAD, as `git clone`].
    #[arg(long = "ref", env = "WEFT_REF")]
    pub git_ref: Option<String>,
    /// Subdirectory of the repository that holds the configuration.
    #[arg(long, env = "WEFT_PATH")]
    pub path: Option<String>,
    /// The ArmadaManifest that deploys (`NAME` or `NAMESPACE/NAME`), as `armada apply
    /// --target-manifest`: only its groups and their charts deploy. Needed when the repository
    /// has more than one manifest.
    #[arg(long, env = "WEFT_TARGET_MANIFEST")]
    pub target_manifest: Option<String>,
    /// An Armada override file of the repository (its path under `--path`), as `armada apply
    /// --values`: its documents name charts, groups or manifests and are merged on top of them.
    /// Repeat for more, applied in order; comma-separated in WEFT_ARMADA_VALUES.
    #[arg(
        long = "armada-values",
        value_name = "FILE",
        env = "WEFT_ARMADA_VALUES",
        value_delimiter = ','
    )]
    pub armada_values: Vec<String>,
    /// The most one git fetch may take, whatever the server does (accepts and never answers,
    /// trickles): the fetch fails and the last good revision stays applied.
    #[arg(long, env = "WEFT_FETCH_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub fetch_timeout: Duration,
    /// PEM file of certificate authorities to trust for https besides the system's (which honour
    /// `SSL_CERT_FILE`/`SSL_CERT_DIR`): chart archives, git chart sources and the repository.
    #[arg(long, env = "WEFT_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

impl RepoArgs {
    /// The repository as given: `PATH`, else `--repo`.
    pub fn given(&self) -> Option<String> {
        self.dir
            .as_ref()
            .map(|d| d.display().to_string())
            .or_else(|| self.repo.clone())
    }

    /// Where the config repository came from: its URL, or its directory made absolute (relative
    /// git chart locations resolve against it).
    pub fn location(&self) -> String {
        let location = self.given().unwrap_or_default();
        std::fs::canonicalize(&location)
            .map(|p| p.display().to_string())
            .unwrap_or(location)
    }

    /// The config repository's credentials: `secret` (`--git-secret`), else the CLI's own
    /// ([`Credentials::from_env`]).
    pub fn credentials(&self, secret: Option<Credentials>) -> anyhow::Result<Credentials> {
        match secret {
            Some(c) => Ok(c),
            None => Credentials::from_env().context("reading git credentials"),
        }
    }

    /// How chart sources are fetched: with `credentials` (the config repository's), `--ca-file`
    /// and `--fetch-timeout`. The CA file is given to libgit2 here, for every https fetch of the
    /// process (the repository's too): call this before [`RepoArgs::read_snapshot`].
    pub fn chart_fetch(&self, credentials: Credentials) -> anyhow::Result<FetchSettings> {
        let ca = match &self.ca_file {
            Some(path) => {
                let ca = CaCertificates::load(path)?;
                source::git::trust_ca_file(path)?;
                Some(ca)
            }
            None => None,
        };
        Ok(FetchSettings {
            // Chart repositories and registries: the `.dockerconfigjson` beside the git
            // credentials (the same Secret or credentials directory).
            registries: crate::source::chart::registries_of(&credentials)?,
            credentials,
            ca,
            fetch_timeout: Some(self.fetch_timeout),
        })
    }

    /// The settings of a pass over this repository (where it is, `--target-manifest`), in
    /// `cluster`'s Weft namespace (offline, without one: the default), whose chart sources are
    /// fetched with `chart_fetch` ([`RepoArgs::chart_fetch`]) and whose SOPS files `decryption`
    /// decrypts; the rest default. The one construction of every command's settings: the pass
    /// flags are added by [`ApplyArgs::pass_settings`].
    pub fn pass_settings(
        &self,
        cluster: Option<&ClusterArgs>,
        chart_fetch: FetchSettings,
        decryption: Decryption,
    ) -> PassSettings {
        let defaults = PassSettings::default();
        PassSettings {
            weft_namespace: cluster
                .map(|c| c.weft_namespace.clone())
                .unwrap_or_else(|| defaults.weft_namespace.clone()),
            repo_location: self.location(),
            target_manifest: self.target_manifest.clone(),
            armada_values: self.armada_values.clone(),
            chart_fetch,
            decryption,
            ..defaults
        }
    }

    /// Fetch (a git URL) or read (a directory) the snapshot. A git fetch uses `credentials`, or
    /// without them the CLI's own ([`Credentials::from_env`]).
    pub fn read_snapshot(&self, credentials: Option<Credentials>) -> anyhow::Result<Snapshot> {
        if let Some(url) = self
            .repo
            .as_deref()
            .filter(|r| self.dir.is_none() && source::git::is_git_url(r))
        {
            let credentials = match credentials {
                Some(c) => c,
                None => Credentials::from_env().context("reading git credentials")?,
            };
            return Ok(source::git::fetch_snapshot(
                url,
                self.git_ref.as_deref(),
                self.path.as_deref(),
                credentials,
                self.fetch_timeout,
            )?);
        }
        let dir = match (&self.dir, &self.repo) {
            (Some(d), _) => d.clone(),
            (None, Some(r)) => PathBuf::from(r),
            (None, None) => anyhow::bail!("give a repository: a PATH or --repo URL"),
        };
        if let Some(p) = &self.path {
            source::check_relative_path(p)?;
        }
        source::local::read_dir_at(&dir, self.path.as_deref(), SnapshotLimits::default())
            .with_context(|| format!("reading {}", dir.display()))
    }
}

/// Which cluster, and Weft's own namespace there.
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: `KUBECONFIG`, `~/.kube/config`, then in-cluster).
    #[arg(long, env = "WEFT_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long, env = "WEFT_CONTEXT")]
    pub context: Option<String>,
    /// Weft's own namespace: its Lease, inventories, flag roots' Roots and secrets.
    /// (`-n/--namespace` is the namespace of the objects a command shows, as in kubectl.)
    #[arg(
        long = "weft-namespace",
        env = "WEFT_NAMESPACE",
        value_name = "NAMESPACE",
        default_value = "weft-system"
    )]
    pub weft_namespace: String,
    /// How long one API call may go without an answer before it fails (a hung API server must
    /// not hold a pass, or the leader Lease, forever).
    #[arg(long, env = "WEFT_API_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub api_timeout: Duration,
}

impl ClusterArgs {
    /// A client of the cluster whose API calls are counted and bounded by `--api-timeout`.
    pub async fn connect(&self) -> anyhow::Result<(Client, CallCounts)> {
        self.connect_fenced(WriteFence::unenforced()).await
    }

    /// [`connect`](Self::connect), with writes allowed only while `fence` is open (the daemon:
    /// while it holds a fresh leader Lease). A context the kubeconfig lacks is refused with the
    /// contexts it has; the server's URL is kept to explain a connection error.
    pub async fn connect_fenced(&self, fence: WriteFence) -> anyhow::Result<(Client, CallCounts)> {
        let layer = FenceLayer {
            fence,
            timeout: self.api_timeout.max(Duration::from_secs(1)),
        };
        let config = match calls::config(self.kubeconfig.as_deref(), self.context.as_deref()).await
        {
            Ok(c) => c,
            Err(e) => {
                if let Some(wanted) = self.context.as_deref() {
                    let known = super::connect::contexts(self.kubeconfig.as_deref());
                    if !known.iter().any(|k| k == wanted) {
                        anyhow::bail!(
                            "{}",
                            super::connect::missing_context(wanted, self.kubeconfig.as_deref())
                        );
                    }
                }
                return Err(e.into());
            }
        };
        super::connect::remember_server(&config.cluster_url.to_string());
        Ok(calls::counting_client_with(config, layer)?)
    }
}

/// The git credentials kept in Weft's namespace (the commands that fetch the repository).
#[derive(Args, Debug, Clone, Default)]
pub struct GitSecretArgs {
    /// Secret in Weft's namespace with the git credentials (keys `identity`, `known_hosts`,
    /// `username`, `password`, `bearerToken`). Without it: files in `WEFT_GIT_CREDENTIALS_DIR`.
    #[arg(long, env = "WEFT_GIT_SECRET")]
    pub git_secret: Option<String>,
}

impl GitSecretArgs {
    /// The git credentials of `--git-secret` (read from `cluster` once), or `None` without it.
    pub fn secret_credentials(&self, cluster: &ClusterArgs) -> anyhow::Result<Option<Credentials>> {
        let Some(name) = &self.git_secret else {
            return Ok(None);
        };
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(async {
            let (client, _) = cluster.connect().await?;
            let creds = credentials::from_kube_secret(client, &cluster.weft_namespace, name)
                .await
                // The error names the Secret.
                .context("reading git credentials")?;
            Ok(Some(creds))
        })
    }
}

/// How a pass applies, prunes and waits (`weft sync`, `weft diff`, `weft run`).
#[derive(Args, Debug, Clone)]
pub struct ApplyArgs {
    /// Bound of each readiness wait (`90s`, `5m`).
    #[arg(long, env = "WEFT_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Largest fraction of the pass's inventories one pass may prune (0 to 1); deleting up to
    /// 10 objects is never refused.
    #[arg(long, env = "WEFT_MAX_PRUNE_FRACTION", default_value_t = 0.5, value_parser = parse_fraction)]
    pub max_prune_fraction: f64,
    /// Prune even past --max-prune-fraction (for `weft run`: every pass; prefer the one-shot
    /// `weft trigger --force-prune`).
    #[arg(long, env = "WEFT_FORCE_PRUNE")]
    pub force_prune: bool,
    /// Let a repository (or `--path`) that renders no object at all prune everything the root
    /// applied (as Argo CD's `allowEmpty`); without it such a pass prunes nothing and fails.
    #[arg(long, env = "WEFT_ALLOW_EMPTY")]
    pub allow_empty: bool,
    /// API calls at the same time within a stage.
    #[arg(long, env = "WEFT_CONCURRENCY", default_value_t = crate::apply::DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    /// Name of the sync root, part of every object's owner id. Two Weft installations that sync
    /// different repositories into one cluster need different names.
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    pub root_name: String,
    /// The one WeaveCloud (`NAMESPACE/NAME`) whose launcher takeover may act in kube-system
    /// (read, remove and copy the launcher's objects there, installs before 2018). Default: none;
    /// no other WeaveCloud touches kube-system (docs/migrating-from-launcher.md).
    #[arg(long, env = "WEFT_LAUNCHER_TAKEOVER", value_parser = parse_weavecloud_ref)]
    pub launcher_takeover: Option<String>,
}

/// `NAMESPACE/NAME` of a WeaveCloud.
pub(crate) fn parse_weavecloud_ref(text: &str) -> Result<String, String> {
    let text = text.trim();
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(text.to_string())
        }
        _ => Err(format!(
            "`{}` is not NAMESPACE/NAME of a WeaveCloud",
            text.chars().take(100).collect::<String>()
        )),
    }
}

/// A fraction from 0 to 1 (NaN would disarm a comparison, so it is refused).
fn parse_fraction(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("`{text}` is not a fraction from 0 to 1"));
    }
    Ok(v)
}

impl ApplyArgs {
    /// The settings of a pass with these flags over `repo` in `cluster` (the rest as
    /// [`RepoArgs::pass_settings`]): `weft sync` and `weft run`.
    pub fn pass_settings(
        &self,
        repo: &RepoArgs,
        cluster: &ClusterArgs,
        chart_fetch: FetchSettings,
        decryption: Decryption,
    ) -> PassSettings {
        PassSettings {
            timeout: self.timeout,
            max_prune_fraction: self.max_prune_fraction,
            force_prune: self.force_prune,
            allow_empty: self.allow_empty,
            concurrency: self.concurrency.max(1),
            root_name: self.root_name.clone(),
            launcher_takeover: self.launcher_takeover.clone(),
            ..repo.pass_settings(Some(cluster), chart_fetch, decryption)
        }
    }
}

/// Who may write a root (`weft sync`): not beside a live daemon, not from another source than
/// its Root's, unless told (see `daemon::roots::once::check_flag_sync`).
#[derive(Args, Debug, Clone, Default)]
pub struct WriterArgs {
    /// Sync even though a live daemon leads this root (its leader Lease is held and fresh).
    /// Prefer `weft trigger`, which asks the daemon to run the pass.
    #[arg(long, env = "WEFT_IGNORE_LEADER")]
    pub ignore_leader: bool,
    /// Confirm that this root switches to another source than its Root's (written into the
    /// Root; what the new source lacks is pruned, within the prune guard).
    #[arg(long)]
    pub switch_repository: bool,
}

/// Age identities from a key file: the offline commands' (`render`, `validate`) only source.
#[derive(Args, Debug, Clone, Default)]
pub struct AgeKeyArgs {
    /// File of age identities (`AGE-SECRET-KEY-1…` lines, as age-keygen writes them) that decrypt
    /// the repository's SOPS files; several are tried in turn.
    #[arg(long, env = "SOPS_AGE_KEY_FILE")]
    pub age_key_file: Option<PathBuf>,
}

impl AgeKeyArgs {
    /// The key file's identities (none without `--age-key-file`).
    pub fn identities(&self) -> anyhow::Result<Arc<Vec<Identity>>> {
        let Some(file) = &self.age_key_file else {
            return Ok(Arc::default());
        };
        let identities = sops::identities_from_key_file(file)?;
        if identities.is_empty() {
            anyhow::bail!("{}: holds no age identity", file.display());
        }
        Ok(Arc::new(identities))
    }

    /// The decryption of an offline pass: the key file only.
    pub fn decryption(&self) -> anyhow::Result<Decryption> {
        Ok(Decryption {
            key_file: self.identities()?,
            secret: None,
        })
    }
}

/// Age identities for the commands that reach the cluster (`sync`, `diff`, `run`): a key file
/// and a Secret in Weft's namespace.
#[derive(Args, Debug, Clone, Default)]
pub struct DecryptionArgs {
    #[command(flatten)]
    pub key: AgeKeyArgs,
    /// Secret in Weft's namespace whose keys ending in `.agekey` hold age identities (as Flux's
    /// kustomize-controller reads them). Read when a revision with SOPS files is loaded, so a
    /// rotated key is used without a restart.
    #[arg(long, env = "WEFT_DECRYPTION_SECRET")]
    pub decryption_secret: Option<String>,
}

impl DecryptionArgs {
    /// The decryption of a pass in Weft's namespace `namespace`: the key file's identities, read
    /// now, and the Secret, read through `client` when a pass needs it.
    pub fn decryption(&self, client: &Client, namespace: &str) -> anyhow::Result<Decryption> {
        Ok(Decryption {
            key_file: self.key.identities()?,
            secret: self
                .decryption_secret
                .as_deref()
                .map(|name| Arc::new(DecryptionSecret::new(client.clone(), namespace, name))),
        })
    }
}

/// What the daemon's custom resources may reach (`weft run`): whose WeaveClouds and Armada
/// resources it acts on, which agent channels and chart sources they may name. See
/// docs/security.md.
#[derive(Args, Debug, Clone, Default)]
pub struct TrustArgs {
    /// Namespaces whose WeaveClouds and Armada resources the controllers act on, whoever
    /// created them (comma-separated). Default: only the WeaveClouds the root applied from the
    /// config repository, and the root's Armada resources in every namespace.
    #[arg(long, env = "WEFT_WATCH_NAMESPACES", value_delimiter = ',')]
    pub watch_namespaces: Vec<String>,
    /// URL prefixes a WeaveCloud's `wcPollUrl`, and every bundle `url` its channel lists, may
    /// name (comma-separated). Default: Weave Cloud's own host only (no channel at all uses the
    /// built-in bundle); never a host taken from the WeaveCloud.
    #[arg(long, env = "WEFT_ALLOWED_CHANNELS", default_value = DEFAULT_CHANNELS)]
    pub allowed_channels: String,
    /// URL prefixes git and tar chart sources may name (comma-separated). Never `file://` nor a
    /// path of the pod's filesystem; `type: local` charts in the config repository are always
    /// allowed.
    #[arg(long, env = "WEFT_ALLOWED_CHART_SOURCES", default_value = DEFAULT_CHART_SOURCES)]
    pub allowed_chart_sources: String,
    /// URL prefixes notification Provider addresses may name (comma-separated). Default: https
    /// to any host; loopback and link-local hosts only when a prefix names that host
    /// (`http://127.0.0.1:9000/`).
    #[arg(long, env = "WEFT_ALLOWED_NOTIFICATION_URLS")]
    pub allowed_notification_urls: Option<String>,
}

/// The daemon's trust settings, checked.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    pub watch_namespaces: WatchNamespaces,
    pub allowed_channels: ChannelPolicy,
    pub chart_sources: ChartSourcePolicy,
    pub notification_urls: crate::notify::destination_policy::NotificationPolicy,
}

impl TrustArgs {
    /// The settings, or an error naming the flag whose prefix is not a URL prefix.
    pub fn trust(&self) -> anyhow::Result<Trust> {
        let allowed_channels = ChannelPolicy {
            allowed: Some(
                UrlAllowList::parse(&self.allowed_channels).context("--allowed-channels")?,
            ),
        };
        let chart_sources = ChartSourcePolicy::Remote(
            UrlAllowList::parse(&self.allowed_chart_sources).context("--allowed-chart-sources")?,
        );
        let notification_urls = self
            .allowed_notification_urls
            .as_deref()
            .map(crate::notify::destination_policy::NotificationPolicy::parse)
            .transpose()
            .context("--allowed-notification-urls")?
            .unwrap_or_default();
        Ok(Trust {
            watch_namespaces: WatchNamespaces::only(self.watch_namespaces.iter().cloned()),
            allowed_channels,
            chart_sources,
            notification_urls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_fraction;

    #[test]
    fn fractions_are_numbers_from_zero_to_one() {
        assert_eq!(parse_fraction("0.5"), Ok(0.5));
        assert_eq!(parse_fraction("1"), Ok(1.0));
        assert_eq!(parse_fraction("0"), Ok(0.0));
        for bad in ["NaN", "nan", "-0.1", "1.5", "inf", "half"] {
            assert!(parse_fraction(bad).is_err(), "{bad} accepted");
        }
    }
}

/// A Root object named on the command line, as kubectl and flux name an object by kind and
/// name: `weft trigger root apps -n team-a`.
#[derive(Args, Debug, Clone, Default)]
pub struct RootObjectArgs {
    /// `root NAME`: the Root object NAME (`weft.io/v1alpha1`) instead of the root of
    /// `--root-name`.
    #[arg(value_names = ["root", "NAME"], num_args = 2)]
    pub object: Vec<String>,
    /// The Root's namespace (with `root NAME`; default: Weft's namespace, `--weft-namespace`).
    #[arg(short = 'n', long = "namespace", requires = "object")]
    pub namespace: Option<String>,
}

impl RootObjectArgs {
    /// The Root named, `(namespace, name)`, or `None` when none is; an error when the kind is
    /// not a root's.
    pub fn root(&self, weft_namespace: &str) -> anyhow::Result<Option<(String, String)>> {
        let [kind, name] = self.object.as_slice() else {
            return Ok(None);
        };
        if !matches!(kind.as_str(), "root" | "roots" | "rt" | "Root") {
            anyhow::bail!(
                "unknown kind {:?}: name a Root object as `root NAME [-n NAMESPACE]`",
                kind.chars().take(40).collect::<String>()
            );
        }
        let namespace = self.namespace.as_deref().unwrap_or(weft_namespace);
        Ok(Some((namespace.to_string(), name.clone())))
    }
}
