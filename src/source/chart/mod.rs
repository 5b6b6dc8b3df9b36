//! Chart sources of Armada charts: the files of each chart directory, fetched before rendering so
//! that rendering stays pure.
//!
//! - `local`: a directory of the config repository snapshot (`location`/`subpath`); no path may
//!   leave the snapshot. Needs no I/O ([`local_files`]), so render can fall back to it.
//! - `git`: another repository, through the git source ([`super::git`]); a relative `location`
//!   (`../charts.git`) resolves against the config repository's location like a git submodule
//!   URL. Only the chart's `subpath` is read, so the chart is judged by what it holds (a broken
//!   symlink elsewhere in the repository does not refuse it). The config repository's
//!   credentials go with it to the config repository's own host (scheme, host and port); to
//!   another host only the SSH key and known_hosts (public-key authentication never hands the
//!   key over), never a password or token. Redirects are followed only on the same host. A
//!   location that resolves to a local directory which is not a git repository is read as a
//!   plain directory (development, as with `--repo DIR`).
//! - `tar`: an http(s) `.tgz`, with limits on its size, entry count and unpacked size; entries are
//!   unpacked in memory and any entry that is not a plain file or directory, or whose path is
//!   absolute or contains `..`, is refused; extension headers (PAX, GNU long names) count against
//!   the unpacked size before they are read. `reference: sha256:<hex>` pins the archive. https is
//!   verified against the system's CAs (`SSL_CERT_FILE`/`SSL_CERT_DIR` honoured), Mozilla's, and
//!   those of `--ca-file` ([`CaCertificates`]).
//!
//! Fetched sources are cached in a [`ChartCache`]: git repositories incrementally on disk (one
//! [`GitSource`] per URL and reference, so an unchanged remote is not fetched again), archives by
//! their sha256 digest (a pinned digest already in the cache is not downloaded again).
//!
//! Everything here blocks (libgit2, HTTP): async callers use `tokio::task::spawn_blocking`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::fetch_policy::{ChartSourcePolicy, SourceRefused};
use super::git::auth::Credentials;
use super::git::{self, GitError, GitSource};
use super::{Snapshot, SnapshotLimits};
use crate::api::armada::{ChartSource, SourceType};
use crate::api::ResourceKey;

mod archive;
mod git_chart;
mod helm_repository;
mod oci_registry;
mod registry_http;

pub use archive::unpack;
use archive::{cached_archive, packaged_chart, store_archive, tar_files};
pub use git_chart::credentials_for;
use git_chart::git_files;
pub use registry_http::{registries_of, DockerConfigError, RegistryAuth};

/// How many characters of an author's data (a location, a reference, an entry's name) an error
/// quotes.
const QUOTE_CHARS: usize = 200;

/// The files of one chart directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartFiles {
    /// How errors name the chart directory: `charts/web` for a local chart,
    /// `<url>@<revision>/<subpath>` for a fetched one.
    pub root: String,
    /// The git commit or `sha256:<digest>` of the archive; `None` for local and plain directories.
    pub revision: Option<String>,
    /// Files by path relative to the chart directory (`Chart.yaml`, `templates/x.yaml`).
    pub files: BTreeMap<String, Vec<u8>>,
}

impl ChartFiles {
    /// `root/path`, for error messages.
    pub fn display_path(&self, path: &str) -> String {
        if self.root.is_empty() {
            path.to_string()
        } else {
            format!("{}/{path}", self.root)
        }
    }
}

/// One chart whose files the source stage fetches: plain data, built by the caller from what it
/// loaded (see `load::armada::ArmadaDocs::chart_requests`).
#[derive(Clone, Debug, PartialEq)]
pub struct ChartRequest {
    /// The ArmadaChart's namespace/name.
    pub chart: ResourceKey,
    /// Where its `source` is written (`file:line:col`), for errors.
    pub origin: String,
    /// Its `spec.source`.
    pub source: ChartSource,
}

/// The resolved files of every chart of a repository, by ArmadaChart namespace/name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChartSources {
    pub by_chart: BTreeMap<ResourceKey, Arc<ChartFiles>>,
    /// Sources that resolved with a warning (a version that left its repository's index,
    /// kept), by chart.
    pub warnings: Vec<(ResourceKey, String)>,
    /// `helm` and `oci` sources that could not be resolved, by chart: each fails alone (its
    /// group stops there, nothing of it is applied or pruned), as a chart helm cannot render.
    pub failures: BTreeMap<ResourceKey, ChartSourceFailure>,
}

/// A chart whose source failed: where its `source` is written and the one-line error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartSourceFailure {
    pub origin: String,
    pub message: String,
}

impl ChartSources {
    pub fn get(&self, key: &ResourceKey) -> Option<&ChartFiles> {
        self.by_chart.get(key).map(Arc::as_ref)
    }
}

/// Limits on a fetched chart archive.
#[derive(Clone, Copy, Debug)]
pub struct ArchiveLimits {
    /// Compressed size of the download.
    pub max_archive_bytes: u64,
    /// Entries (files and directories) in the archive.
    pub max_entries: usize,
    /// Total unpacked size.
    pub max_unpacked_bytes: u64,
    /// Time for the whole download.
    pub timeout: Duration,
}

impl Default for ArchiveLimits {
    fn default() -> Self {
        ArchiveLimits {
            max_archive_bytes: 20 * 1024 * 1024,
            max_entries: 5_000,
            max_unpacked_bytes: 100 * 1024 * 1024,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Certificate authorities trusted for https chart sources besides the system's (`--ca-file`):
/// Armada's `certs` setting.
#[derive(Clone, Debug)]
pub struct CaCertificates {
    path: PathBuf,
    certificates: Vec<reqwest::Certificate>,
}

/// Why `--ca-file` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CaFileError {
    #[error("--ca-file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--ca-file {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("--ca-file {}: holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)", path.display())]
    Empty { path: PathBuf },
}

impl CaCertificates {
    /// The PEM certificates of `path` (one or more).
    pub fn load(path: &Path) -> Result<Self, CaFileError> {
        let pem = std::fs::read(path).map_err(|source| CaFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let certificates =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| CaFileError::Parse {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        if certificates.is_empty() {
            return Err(CaFileError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(CaCertificates {
            path: path.to_path_buf(),
            certificates,
        })
    }

    /// The file they came from (libgit2 is given the file: see [`git::trust_ca_file`]).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How a command fetches chart sources, from its flags: the config repository's credentials,
/// extra CAs (`--ca-file`), and the bound of one git fetch (`--fetch-timeout`).
#[derive(Clone, Debug, Default)]
pub struct FetchSettings {
    /// The config repository's credentials (see [`credentials_for`] for where they go).
    pub credentials: Credentials,
    /// `--ca-file`.
    pub ca: Option<CaCertificates>,
    /// `--fetch-timeout` for git chart sources (default [`git::DEFAULT_FETCH_TIMEOUT`]).
    pub fetch_timeout: Option<Duration>,
    /// Credentials of `helm` and `oci` sources by host (`host` or `host:port`), from the
    /// `.dockerconfigjson` beside the git credentials.
    pub registries: BTreeMap<String, RegistryAuth>,
}

/// Where fetched chart sources are kept between passes. One per process; cheap to share.
pub struct ChartCache {
    dir: PathBuf,
    credentials: Credentials,
    ca: Option<CaCertificates>,
    fetch_timeout: Duration,
    archive_limits: ArchiveLimits,
    snapshot_limits: SnapshotLimits,
    /// What git and tar locations may be (the daemon's `--allowed-chart-sources`).
    policy: ChartSourcePolicy,
    /// Credentials of chart repositories and registries by host.
    registries: BTreeMap<String, RegistryAuth>,
    /// (url, reference, subpath) → the git source that keeps the last good snapshot of that
    /// chart directory (sources of one URL share the on-disk repository).
    git: Mutex<HashMap<(String, String, String), GitSource>>,
}

impl std::fmt::Debug for ChartCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChartCache")
            .field("dir", &self.dir)
            .finish()
    }
}

impl ChartCache {
    /// A cache under `dir` (`dir/git` for repositories, `dir/tar` for archives), no credentials.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ChartCache {
            dir: dir.into(),
            credentials: Credentials::default(),
            ca: None,
            fetch_timeout: git::DEFAULT_FETCH_TIMEOUT,
            archive_limits: ArchiveLimits::default(),
            snapshot_limits: SnapshotLimits::default(),
            policy: ChartSourcePolicy::Any,
            registries: BTreeMap::new(),
            git: Mutex::new(HashMap::new()),
        }
    }
    /// What git and tar locations may be.
    pub fn with_policy(mut self, policy: ChartSourcePolicy) -> Self {
        self.policy = policy;
        self
    }
    /// The command's fetch settings: credentials, `--ca-file`, `--fetch-timeout`.
    pub fn with_settings(mut self, settings: FetchSettings) -> Self {
        self.credentials = settings.credentials;
        self.ca = settings.ca;
        self.registries = settings.registries;
        if let Some(timeout) = settings.fetch_timeout {
            self.fetch_timeout = timeout;
        }
        self
    }
    /// Limits on chart archives.
    pub fn with_archive_limits(mut self, limits: ArchiveLimits) -> Self {
        self.archive_limits = limits;
        self
    }
    /// The credentials for a chart repository or registry at `url`: by `host:port`, then `host`
    /// in the `.dockerconfigjson`; else, on the config repository's own scheme, host and port
    /// (GitLab's and Gitea's package registries beside the repository), its basic auth or token,
    /// as a git chart source there gets them ([`credentials_for`]).
    fn registry_auth(&self, url: &str, repo_location: &str) -> Option<RegistryAuth> {
        let parsed = url::Url::parse(url).ok()?;
        let host = parsed.host_str()?.to_ascii_lowercase();
        let with_port = parsed.port().map(|p| format!("{host}:{p}"));
        let listed = with_port
            .and_then(|h| self.registries.get(&h))
            .or_else(|| self.registries.get(&host))
            .cloned();
        listed.or_else(|| {
            let chart = git_chart::origin(url);
            let c = &self.credentials;
            let has = c.username.is_some() || c.bearer_token.is_some();
            (has && chart.is_some() && chart == git_chart::origin(repo_location)).then(|| {
                RegistryAuth {
                    username: c.username.clone(),
                    password: c.password.clone(),
                    token: c.bearer_token.clone(),
                }
            })
        })
    }
    /// The default for the CLI: next to the git cache (`~/.cache/weft/charts`).
    pub fn default_dir() -> PathBuf {
        let git = git::default_cache_dir();
        git.parent()
            .map(|p| p.join("charts"))
            .unwrap_or_else(|| git.join("charts"))
    }
}

/// Why a chart's source could not be resolved. Names the chart and where its `source` is written;
/// a password of any URL in it (a git or tar location, the config repository's) is redacted.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: ArmadaChart `{chart}`: {}", crate::api::redact::redact_url_passwords(&reason.to_string()))]
pub struct ChartSourceError {
    /// `file:line:col` of the chart's `source`.
    pub origin: String,
    pub chart: ResourceKey,
    pub reason: Box<SourceFailure>,
}

/// What went wrong with a chart source.
#[derive(Debug, thiserror::Error)]
pub enum SourceFailure {
    #[error("`{path}` {why}")]
    UnsafePath { path: String, why: String },
    #[error("source directory `{path}` does not exist in the config repository")]
    LocalMissing { path: String },
    #[error("{root} is not a chart: it has no Chart.yaml")]
    NotAChart { root: String },
    #[error("{0}")]
    Relative(#[from] git::RelativeLocationError),
    #[error("git source: {0}")]
    Git(#[from] GitError),
    #[error("subpath `{subpath}` does not exist in {url} at {revision}")]
    SubpathMissing {
        subpath: String,
        url: String,
        revision: String,
    },
    #[error("reading directory {path}: {message}")]
    Directory { path: String, message: String },
    #[error("tar source `{url}` must be an http:// or https:// URL")]
    NotHttp { url: String },
    #[error("downloading {url}: {message}")]
    Http { url: String, message: String },
    #[error("archive {url} is larger than {limit} bytes")]
    ArchiveTooLarge { url: String, limit: u64 },
    #[error("archive {url} unpacks to more than {limit} bytes")]
    UnpackedTooLarge { url: String, limit: u64 },
    #[error("archive {url} has more than {limit} entries")]
    TooManyEntries { url: String, limit: usize },
    #[error("archive {url}: entry `{entry}` {why}; refusing the archive")]
    BadEntry {
        url: String,
        entry: String,
        why: String,
    },
    #[error("archive {url}: {message}")]
    Archive { url: String, message: String },
    #[error("archive {url} has {actual}, but `reference` pins {expected}")]
    DigestMismatch {
        url: String,
        expected: String,
        actual: String,
    },
    #[error("{0}")]
    Refused(#[from] SourceRefused),
    #[error("tar `reference` `{reference}` must be `sha256:<64 hex digits>`")]
    BadDigest { reference: String },
    #[error("chart cache {path}: {message}")]
    Cache { path: PathBuf, message: String },
    #[error("helm repository `{url}` must be an http:// or https:// URL")]
    HelmLocation { url: String },
    #[error("a helm source needs `chart`: the chart's name in the repository's index")]
    ChartNameMissing,
    #[error("oci source `{location}` must be written `oci://host/path/chart`")]
    OciLocation { location: String },
    #[error("`version: {version}` is neither a version nor a semver range: {message}")]
    BadVersion { version: String, message: String },
    #[error("index {url} does not parse: {message}")]
    Index { url: String, message: String },
    #[error("chart `{chart}` is not in the index of {url}")]
    ChartNotInIndex { chart: String, url: String },
    #[error(
        "no version of `{chart}` in {url} satisfies `version: {version}` (the newest is {newest})"
    )]
    NoVersion {
        chart: String,
        version: String,
        url: String,
        newest: String,
    },
    #[error("{url} has {actual}, but {what} says {expected}; refusing it")]
    PublishedDigestMismatch {
        url: String,
        what: String,
        expected: String,
        actual: String,
    },
    #[error("manifest {url} holds no Helm chart layer (`application/vnd.cncf.helm.chart.content.v1.tar+gzip`): is it a chart pushed with `helm push`?")]
    NoChartLayer { url: String },
}

/// Resolve the source of every chart in `charts`. Local sources are read from `snapshot` (the
/// config repository); `repo_location` is where that repository came from (a URL or a
/// directory): relative git locations resolve against it.
pub fn resolve(
    charts: &[ChartRequest],
    snapshot: &Snapshot,
    repo_location: &str,
    cache: &ChartCache,
) -> Result<ChartSources, ChartSourceError> {
    let mut out = ChartSources::default();
    let mut memo = helm_repository::PassMemo::default();
    for chart in charts {
        let fail = |reason: SourceFailure| ChartSourceError {
            origin: chart.origin.clone(),
            chart: chart.chart.clone(),
            reason: Box::new(reason),
        };
        let memo_key = helm_repository::memo_key(&chart.source);
        if let Some((files, warning)) = memo_key.as_ref().and_then(|k| memo.charts.get(k)) {
            if let Some(w) = warning {
                out.warnings.push((
                    chart.chart.clone(),
                    format!("ArmadaChart `{}`: {w}", chart.chart),
                ));
            }
            out.by_chart.insert(chart.chart.clone(), files.clone());
            continue;
        }
        let mut warnings = Vec::new();
        let files = match chart.source.type_ {
            SourceType::Local => local_files(snapshot, &chart.source).map_err(fail)?,
            SourceType::Git => git_files(&chart.source, repo_location, cache).map_err(fail)?,
            SourceType::Tar => tar_files(&chart.source, cache).map_err(fail)?,
            SourceType::Helm | SourceType::Oci => {
                let fetched = if chart.source.type_ == SourceType::Helm {
                    helm_repository::helm_files(
                        &chart.source,
                        repo_location,
                        cache,
                        &mut memo,
                        &mut warnings,
                    )
                } else {
                    oci_registry::oci_files(&chart.source, repo_location, cache, &mut warnings)
                };
                match fetched {
                    Ok(files) => files,
                    Err(reason) => {
                        let e = fail(reason);
                        out.failures.insert(
                            chart.chart.clone(),
                            ChartSourceFailure {
                                origin: e.origin.clone(),
                                message: format!(
                                    "ArmadaChart `{}`: {}",
                                    e.chart,
                                    crate::api::redact::redact_url_passwords(&e.reason.to_string())
                                ),
                            },
                        );
                        continue;
                    }
                }
            }
        };
        let files = Arc::new(files);
        for w in &warnings {
            out.warnings.push((
                chart.chart.clone(),
                format!("ArmadaChart `{}`: {w}", chart.chart),
            ));
        }
        if let Some(key) = memo_key {
            memo.charts
                .insert(key, (files.clone(), warnings.into_iter().next()));
        }
        out.by_chart.insert(chart.chart.clone(), files);
    }
    Ok(out)
}

/// `a/./b/` → `a/b`; refuses absolute paths and `..`.
fn clean_relative(path: &str) -> Result<String, SourceFailure> {
    if path.starts_with('/') || path.contains('\\') {
        return Err(SourceFailure::UnsafePath {
            path: path.to_string(),
            why: "must be a relative path with `/` separators".to_string(),
        });
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(SourceFailure::UnsafePath {
                    path: path.to_string(),
                    why: "leaves its directory (`..`)".to_string(),
                })
            }
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}/{b}"),
    }
}

/// The files of `dir` (relative to the snapshot root) with paths relative to `dir`.
fn subtree(snapshot: &Snapshot, dir: &str) -> BTreeMap<String, Vec<u8>> {
    if dir.is_empty() {
        return snapshot.files.clone();
    }
    let prefix = format!("{dir}/");
    snapshot
        .files
        .range(prefix.clone()..)
        .take_while(|(p, _)| p.starts_with(&prefix))
        .map(|(p, c)| (p[prefix.len()..].to_string(), c.clone()))
        .collect()
}

/// The directory of a `local` chart inside the config repository (`location`/`subpath`,
/// cleaned; `""` is the root). Refuses absolute paths and `..`.
pub fn local_dir(source: &ChartSource) -> Result<String, SourceFailure> {
    Ok(join(
        &clean_relative(&source.location)?,
        &clean_relative(source.subpath.as_deref().unwrap_or(""))?,
    ))
}

/// The files of a `local` chart: `location`/`subpath` of the config repository. Pure.
pub fn local_files(snapshot: &Snapshot, source: &ChartSource) -> Result<ChartFiles, SourceFailure> {
    let dir = local_dir(source)?;
    let files = subtree(snapshot, &dir);
    if files.is_empty() {
        return Err(SourceFailure::LocalMissing { path: dir });
    }
    let root = dir;
    if !files.contains_key("Chart.yaml") {
        return Err(SourceFailure::NotAChart { root });
    }
    Ok(ChartFiles {
        root,
        revision: None,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A git location without a scheme resolves against the config repository's URL; the error
    /// (shown in logs and `/api/v1/status`) never carries that URL's password.
    #[test]
    fn a_missing_git_location_never_shows_the_repository_password() {
        let source: ChartSource = serde_json::from_value(serde_json::json!({
            "type": "git",
            "location": "charts-that-do-not-exist"
        }))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = ChartCache::new(dir.path());
        let err = git_files(
            &source,
            "https://deploy:s3cr3t-token@git.example.com/org/config.git",
            &cache,
        )
        .unwrap_err()
        .to_string();
        assert!(!err.contains("s3cr3t-token"), "{err}");
        assert!(err.contains("no such directory or repository"), "{err}");
        // Every chart source error, e.g. a tar URL with credentials.
        let err = ChartSourceError {
            origin: "armada.yaml:3:1".into(),
            chart: ResourceKey {
                namespace: "ns".into(),
                name: "web".into(),
            },
            reason: Box::new(SourceFailure::Http {
                url: "https://user:tarpass@charts.example.com/web.tgz".into(),
                message: "404".into(),
            }),
        }
        .to_string();
        assert!(
            !err.contains("tarpass") && err.contains("user:***@"),
            "{err}"
        );
    }

    fn tgz(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        for (path, content) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            // set_path refuses `..`; write the raw name to build hostile archives.
            let name = header.as_old_mut().name.as_mut();
            name[..path.len()].copy_from_slice(path.as_bytes());
            header.set_cksum();
            builder.append(&header, *content).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn unpack_reads_files_and_refuses_escapes() {
        let ok = tgz(&[
            ("web/Chart.yaml", b"name: web\n"),
            ("web/templates/a.yaml", b"a: 1\n"),
        ]);
        let files = unpack("u", &ok, ArchiveLimits::default()).unwrap();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            vec!["web/Chart.yaml", "web/templates/a.yaml"]
        );

        let evil = tgz(&[("web/../../etc/passwd", b"x")]);
        let err = unpack("u", &evil, ArchiveLimits::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("entry `web/../../etc/passwd` leaves the extraction directory"),
            "{err}"
        );

        let abs = tgz(&[("/etc/passwd", b"x")]);
        let err = unpack("u", &abs, ArchiveLimits::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("absolute path"), "{err}");
    }

    #[test]
    fn unpack_limits_entries_and_size() {
        let many: Vec<(String, Vec<u8>)> =
            (0..20).map(|i| (format!("f{i}"), b"x".to_vec())).collect();
        let refs: Vec<(&str, &[u8])> = many
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_slice()))
            .collect();
        let limits = ArchiveLimits {
            max_entries: 10,
            ..ArchiveLimits::default()
        };
        let err = unpack("u", &tgz(&refs), limits).unwrap_err().to_string();
        assert!(err.contains("more than 10 entries"), "{err}");
        let big = vec![b'a'; 4096];
        let limits = ArchiveLimits {
            max_unpacked_bytes: 1000,
            ..ArchiveLimits::default()
        };
        let err = unpack("u", &tgz(&[("big", &big)]), limits)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unpacks to more than 1000 bytes"), "{err}");
    }

    #[test]
    fn unpack_refuses_symlinks() {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        builder
            .append_link(&mut header, "link", "/etc/passwd")
            .unwrap();
        let bytes = builder.into_inner().unwrap().finish().unwrap();
        let err = unpack("u", &bytes, ArchiveLimits::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("entry `link` is not a regular file"), "{err}");
    }

    #[test]
    fn credentials_go_whole_only_to_the_config_repository_origin() {
        use crate::source::git::auth::SecretValue;
        let config = Credentials {
            identity: Some(SecretValue::new("KEY")),
            known_hosts: Some("git.example.com ssh-ed25519 AAAA".into()),
            username: Some("weft".into()),
            password: Some(SecretValue::new("pw")),
            bearer_token: Some(SecretValue::new("tok")),
            docker_config: None,
        };
        let repo = "https://git.example.com/org/config.git";
        let all = credentials_for(&config, repo, "https://GIT.example.com:443/org/charts.git");
        assert!(all.password.is_some() && all.bearer_token.is_some());
        for elsewhere in [
            "https://other.example.com/org/charts.git",
            "http://git.example.com/org/charts.git",
            "https://git.example.com:8443/org/charts.git",
            "git://git.example.com/charts.git",
            "/srv/charts",
        ] {
            let c = credentials_for(&config, repo, elsewhere);
            assert!(
                c.password.is_none() && c.bearer_token.is_none() && c.identity.is_none(),
                "{elsewhere}"
            );
        }
        let ssh = credentials_for(&config, repo, "git@other.example.com:org/charts.git");
        assert!(ssh.identity.is_some() && ssh.known_hosts.is_some());
        assert!(ssh.password.is_none() && ssh.bearer_token.is_none());
        let scp_repo = "git@git.example.com:org/config.git";
        let same = credentials_for(&config, scp_repo, "ssh://git@git.example.com:22/org/x.git");
        assert!(same.password.is_some());
    }

    #[test]
    fn local_paths_are_cleaned_and_checked() {
        assert_eq!(clean_relative("./charts//web/").unwrap(), "charts/web");
        assert!(clean_relative("../x").is_err());
        assert!(clean_relative("/abs").is_err());
        let mut snap = Snapshot::default();
        snap.files
            .insert("charts/web/Chart.yaml".into(), b"name: web".to_vec());
        snap.files
            .insert("charts/web/templates/a.yaml".into(), b"a: 1".to_vec());
        snap.files
            .insert("charts/webapp/Chart.yaml".into(), b"name: webapp".to_vec());
        let source: ChartSource = serde_json::from_value(
            serde_json::json!({"type": "local", "location": "./charts", "subpath": "web"}),
        )
        .unwrap();
        let files = local_files(&snap, &source).unwrap();
        assert_eq!(files.root, "charts/web");
        assert_eq!(
            files.files.keys().collect::<Vec<_>>(),
            vec!["Chart.yaml", "templates/a.yaml"]
        );
        let mut missing = source.clone();
        missing.subpath = Some("api".into());
        assert_eq!(
            local_files(&snap, &missing).unwrap_err().to_string(),
            "source directory `charts/api` does not exist in the config repository"
        );
    }
}
