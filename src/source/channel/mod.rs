//! The agent channel: a small YAML index of versioned agent bundles, and the bundles it names.
//!
//! ```yaml
//! channel: stable
//! bundles:
//!   - version: 1.1.0
//!     url: bundles/agents-1.1.0.tar.gz     # absolute, or relative to the channel
//!     sha256: 3f5c…                         # digest of that .tar.gz file
//! ```
//!
//! A channel is read over `https://`/`http://` (reqwest), from `file://`, or from a git
//! repository (`git+<git URL>[?ref=<branch|tag|sha>][#<path of channel.yaml>]`, through the git
//! source). A bundle is a `.tar.gz` of a directory laid out like `agents/`; it is downloaded with a
//! size limit, its sha256 is checked against the channel (a mismatch is refused), and it is
//! unpacked in memory with limits on entries and sizes, refusing links and any path that would
//! leave the bundle. The result is a file map, which the render stage parses into a bundle.

mod archive;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;

use super::git::{GitError, GitRef, GitSource, GitSourceSpec};
use super::{Snapshot, SnapshotLimits};
use crate::api::redact::redact_url_passwords;
pub use archive::{pack_archive, sha256_hex, unpack_archive, verify_sha256, DigestError};

/// Largest file a bundle may hold, in bytes: the unpacking here and the bundle parser of the
/// render stage (for bundles from anywhere, the built-in one included) both enforce it.
pub const MAX_BUNDLE_FILE_BYTES: usize = 1024 * 1024;

/// The channel file read from a git repository when the URL names none.
pub const DEFAULT_CHANNEL_FILE: &str = "channel.yaml";

/// Limits on what a channel and its bundles may be, so a hostile server cannot exhaust memory.
#[derive(Clone, Copy, Debug)]
pub struct ChannelLimits {
    /// Largest channel index, in bytes.
    pub max_index_bytes: u64,
    /// Largest bundle download (the `.tar.gz`), in bytes.
    pub max_archive_bytes: u64,
    /// Most entries (files and directories) in a bundle archive.
    pub max_entries: usize,
    /// Largest file inside a bundle, in bytes.
    pub max_file_bytes: u64,
    /// Largest sum of the unpacked files, in bytes.
    pub max_unpacked_bytes: u64,
}

impl Default for ChannelLimits {
    fn default() -> Self {
        ChannelLimits {
            max_index_bytes: 1024 * 1024,
            max_archive_bytes: 16 * 1024 * 1024,
            max_entries: 1000,
            max_file_bytes: MAX_BUNDLE_FILE_BYTES as u64,
            max_unpacked_bytes: 32 * 1024 * 1024,
        }
    }
}

/// How to reach channels.
#[derive(Clone, Debug)]
pub struct ChannelOptions {
    pub limits: ChannelLimits,
    /// Bound of each HTTP request.
    pub http_timeout: Duration,
    /// Where git channels are cached.
    pub git_cache_dir: PathBuf,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        ChannelOptions {
            limits: ChannelLimits::default(),
            http_timeout: Duration::from_secs(60),
            git_cache_dir: super::git::default_cache_dir().join("channels"),
        }
    }
}

/// Why a channel or bundle could not be used. URLs are shown with passwords redacted.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("`spec.general.wcPollUrl: {url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("fetching {url}: {message}")]
    Fetch { url: String, message: String },
    #[error("fetching {url}: HTTP status {status}")]
    HttpStatus { url: String, status: u16 },
    #[error("{url}: more than {limit} bytes; refusing it")]
    TooLarge { url: String, limit: u64 },
    #[error("channel {url}: {message}")]
    Index { url: String, message: String },
    #[error("channel {url}: git: {source}")]
    Git {
        url: String,
        #[source]
        source: GitError,
    },
    #[error("bundle {version} ({url}): sha256 mismatch: the channel says {expected}, the file is {actual}; refusing it")]
    DigestMismatch {
        version: String,
        url: String,
        expected: String,
        actual: String,
    },
    #[error("bundle archive {url}: {message}")]
    Archive { url: String, message: String },
}

/// One bundle the channel offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelEntry {
    pub version: semver::Version,
    /// Where the `.tar.gz` is: resolved against the channel (absolute URL, or a path in the git
    /// repository of a git channel).
    pub url: String,
    /// Lower-case hex sha256 of the `.tar.gz`.
    pub sha256: String,
}

/// A parsed channel index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    /// The channel's name (`stable`, …).
    pub name: String,
    /// The bundles, newest version first.
    pub bundles: Vec<ChannelEntry>,
}

/// A downloaded, verified and unpacked bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedBundle {
    pub version: semver::Version,
    /// sha256 of the archive (what the channel listed).
    pub sha256: String,
    /// The archive as downloaded (kept in the cluster as the cached bundle).
    pub archive: Vec<u8>,
    /// Path → content, for `Bundle::from_files`.
    pub files: BTreeMap<String, Vec<u8>>,
}

#[derive(Deserialize)]
struct RawChannel {
    channel: Option<String>,
    #[serde(default)]
    bundles: Vec<RawEntry>,
}

#[derive(Deserialize)]
struct RawEntry {
    version: Option<String>,
    url: Option<String>,
    sha256: Option<String>,
}

/// Where a channel lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChannelLocation {
    /// `http://`, `https://` or `file://`.
    Url(url::Url),
    /// A file in a git repository.
    Git {
        url: String,
        reference: Option<GitRef>,
        path: String,
    },
}

impl ChannelLocation {
    /// Parse a `wcPollUrl`.
    pub fn parse(poll_url: &str) -> Result<ChannelLocation, ChannelError> {
        let poll_url = poll_url.trim();
        let invalid = |reason: &str| ChannelError::InvalidUrl {
            url: redact_url_passwords(poll_url),
            reason: reason.to_string(),
        };
        if let Some(rest) = poll_url.strip_prefix("git+") {
            let (rest, path) = match rest.split_once('#') {
                Some((r, p)) => (r, p.trim_matches('/').to_string()),
                None => (rest, DEFAULT_CHANNEL_FILE.to_string()),
            };
            let (url, reference) = match rest.split_once("?ref=") {
                Some((u, r)) if !r.is_empty() => (u, Some(GitRef::parse(r))),
                Some(_) => return Err(invalid("`?ref=` needs a branch, tag or commit")),
                None => (rest, None),
            };
            if url.is_empty() {
                return Err(invalid("no git URL after `git+`"));
            }
            if path.is_empty() {
                return Err(invalid(
                    "`#` must be followed by the path of the channel file",
                ));
            }
            super::check_relative_path(&path).map_err(|e| invalid(&e.to_string()))?;
            return Ok(ChannelLocation::Git {
                url: url.to_string(),
                reference,
                path,
            });
        }
        let parsed = url::Url::parse(poll_url).map_err(|e| invalid(&e.to_string()))?;
        match parsed.scheme() {
            "http" | "https" | "file" => Ok(ChannelLocation::Url(parsed)),
            other => Err(invalid(&format!(
                "scheme `{other}` is not supported (https://, http://, file:// or git+<git URL>)"
            ))),
        }
    }
}

/// A channel to read: one per `wcPollUrl`. Cheap to clone.
#[derive(Clone)]
pub struct ChannelSource {
    location: ChannelLocation,
    display: String,
    opts: ChannelOptions,
    http: reqwest::Client,
    /// The git source and the snapshot read by the last [`ChannelSource::fetch_index`].
    git: Option<Arc<Mutex<GitChannel>>>,
}

struct GitChannel {
    source: GitSource,
    snapshot: Option<Arc<Snapshot>>,
}

impl std::fmt::Debug for ChannelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelSource")
            .field("url", &self.display)
            .finish()
    }
}

impl ChannelSource {
    /// Prepare a channel source; nothing is fetched yet.
    pub fn new(poll_url: &str, opts: ChannelOptions) -> Result<ChannelSource, ChannelError> {
        let location = ChannelLocation::parse(poll_url)?;
        let display = redact_url_passwords(poll_url.trim());
        let http = reqwest::Client::builder()
            .timeout(opts.http_timeout)
            .redirect(crate::source::fetch_policy::same_host_redirects())
            .user_agent(concat!("weft/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ChannelError::Fetch {
                url: display.clone(),
                message: format!("cannot build an HTTP client: {e}"),
            })?;
        let git = match &location {
            ChannelLocation::Git { url, reference, .. } => {
                let mut spec = GitSourceSpec::new(url.clone(), opts.git_cache_dir.clone());
                if let Some(r) = reference {
                    spec.reference = r.clone();
                }
                spec.limits = SnapshotLimits {
                    max_files: 10_000,
                    max_file_bytes: opts.limits.max_archive_bytes,
                    max_total_bytes: 256 * 1024 * 1024,
                };
                let source = GitSource::new(spec).map_err(|source| ChannelError::Git {
                    url: display.clone(),
                    source,
                })?;
                Some(Arc::new(Mutex::new(GitChannel {
                    source,
                    snapshot: None,
                })))
            }
            ChannelLocation::Url(_) => None,
        };
        Ok(ChannelSource {
            location,
            display,
            opts,
            http,
            git,
        })
    }

    /// The channel URL with passwords redacted.
    pub fn display_url(&self) -> &str {
        &self.display
    }

    /// Fetch and parse the channel index.
    pub async fn fetch_index(&self) -> Result<Channel, ChannelError> {
        let text = match &self.location {
            ChannelLocation::Url(url) => {
                self.read_url(url, self.opts.limits.max_index_bytes).await?
            }
            ChannelLocation::Git { path, .. } => {
                let snapshot = self.fetch_git().await?;
                snapshot
                    .files
                    .get(path)
                    .cloned()
                    .ok_or_else(|| ChannelError::Index {
                        url: self.display.clone(),
                        message: format!(
                            "no file `{path}` in the repository at {}",
                            snapshot.revision_label()
                        ),
                    })?
            }
        };
        let text = String::from_utf8(text).map_err(|_| ChannelError::Index {
            url: self.display.clone(),
            message: "not UTF-8 text".into(),
        })?;
        parse_channel(&text, &self.display, |u| self.resolve(u))
    }

    /// Download a bundle the channel listed, verify its sha256 and unpack it.
    pub async fn fetch_bundle(&self, entry: &ChannelEntry) -> Result<FetchedBundle, ChannelError> {
        let shown = redact_url_passwords(&entry.url);
        let archive = match &self.location {
            ChannelLocation::Url(_) => {
                let url = url::Url::parse(&entry.url).map_err(|e| ChannelError::Index {
                    url: self.display.clone(),
                    message: format!("bundle {}: `url: {shown}`: {e}", entry.version),
                })?;
                self.read_url(&url, self.opts.limits.max_archive_bytes)
                    .await?
            }
            ChannelLocation::Git { .. } => {
                let snapshot = self.git_snapshot().await?;
                snapshot
                    .files
                    .get(&entry.url)
                    .cloned()
                    .ok_or_else(|| ChannelError::Fetch {
                        url: shown.clone(),
                        message: format!(
                            "no such file in the channel's repository at {}",
                            snapshot.revision_label()
                        ),
                    })?
            }
        };
        verify_sha256(&archive, &entry.sha256).map_err(|DigestError::Mismatch { actual }| {
            ChannelError::DigestMismatch {
                version: entry.version.to_string(),
                url: shown.clone(),
                expected: entry.sha256.clone(),
                actual,
            }
        })?;
        let limits = self.opts.limits;
        let unpack_url = shown.clone();
        let (archive, files) = tokio::task::spawn_blocking(move || {
            let files = unpack_archive(&archive, &limits, &unpack_url);
            (archive, files)
        })
        .await
        .map_err(|e| ChannelError::Archive {
            url: shown.clone(),
            message: format!("unpacking panicked: {e}"),
        })?;
        Ok(FetchedBundle {
            version: entry.version.clone(),
            sha256: entry.sha256.clone(),
            archive,
            files: files?,
        })
    }

    /// Resolve a bundle `url` of the channel: absolute as is, relative against the channel.
    fn resolve(&self, url: &str) -> Result<String, BundleUrlError> {
        match &self.location {
            ChannelLocation::Url(base) => {
                let joined = base.join(url)?;
                match joined.scheme() {
                    "http" | "https" | "file" => Ok(joined.to_string()),
                    other => Err(BundleUrlError::UnsupportedScheme {
                        scheme: other.to_string(),
                    }),
                }
            }
            ChannelLocation::Git { path, .. } => {
                if url.contains("://") {
                    return Err(BundleUrlError::UrlInGitChannel);
                }
                let dir = Path::new(path).parent().unwrap_or(Path::new(""));
                join_inside(dir, url)
            }
        }
    }

    async fn read_url(&self, url: &url::Url, limit: u64) -> Result<Vec<u8>, ChannelError> {
        let shown = redact_url_passwords(url.as_str());
        if url.scheme() == "file" {
            let path = url.to_file_path().map_err(|_| ChannelError::Fetch {
                url: shown.clone(),
                message: "not a local file path".into(),
            })?;
            let read_url = shown.clone();
            return tokio::task::spawn_blocking(move || read_file_limited(&path, limit, &read_url))
                .await
                .map_err(|e| ChannelError::Fetch {
                    url: shown,
                    message: e.to_string(),
                })?;
        }
        let fetch_err = |e: reqwest::Error| ChannelError::Fetch {
            url: shown.clone(),
            // reqwest's message names the URL it was given; ours has the password removed.
            message: crate::source::fetch_policy::describe_http_error(e),
        };
        let mut response = self.http.get(url.clone()).send().await.map_err(fetch_err)?;
        if !response.status().is_success() {
            return Err(ChannelError::HttpStatus {
                url: shown,
                status: response.status().as_u16(),
            });
        }
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(ChannelError::TooLarge { url: shown, limit });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(fetch_err)? {
            if body.len() as u64 + chunk.len() as u64 > limit {
                return Err(ChannelError::TooLarge { url: shown, limit });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Fetch the git channel (incrementally) and keep its snapshot for the bundles.
    async fn fetch_git(&self) -> Result<Arc<Snapshot>, ChannelError> {
        let Some(git) = self.git.clone() else {
            return Err(ChannelError::Index {
                url: self.display.clone(),
                message: "not a git channel".into(),
            });
        };
        let display = self.display.clone();
        tokio::task::spawn_blocking(move || {
            let mut g = git.lock().unwrap_or_else(|p| p.into_inner());
            let outcome = g.source.fetch().map_err(|source| ChannelError::Git {
                url: display.clone(),
                source,
            })?;
            let snapshot = match outcome {
                super::git::FetchOutcome::New(s) => s,
                super::git::FetchOutcome::Unchanged => {
                    g.source.last_good().ok_or_else(|| ChannelError::Index {
                        url: display.clone(),
                        message: "the git source reported no change but holds no snapshot".into(),
                    })?
                }
            };
            g.snapshot = Some(snapshot.clone());
            Ok(snapshot)
        })
        .await
        .map_err(|e| ChannelError::Index {
            url: self.display.clone(),
            message: format!("git fetch panicked: {e}"),
        })?
    }

    /// The snapshot of the last index fetch (fetching it if there was none).
    async fn git_snapshot(&self) -> Result<Arc<Snapshot>, ChannelError> {
        if let Some(git) = &self.git {
            let g = git.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = &g.snapshot {
                return Ok(s.clone());
            }
        }
        self.fetch_git().await
    }
}

/// Why a bundle `url` of a channel names no bundle the channel may fetch.
#[derive(Debug, thiserror::Error)]
pub enum BundleUrlError {
    #[error(transparent)]
    Invalid(#[from] url::ParseError),
    #[error("scheme `{scheme}` is not supported")]
    UnsupportedScheme { scheme: String },
    #[error("a git channel names its bundles by paths inside its repository")]
    UrlInGitChannel,
    #[error("`{path}` must be relative to the channel file in the repository")]
    AbsolutePath { path: String },
    #[error("`{path}` leaves the repository")]
    LeavesRepository { path: String },
}

/// Read a local file of at most `limit` bytes; `shown` is its URL for the error.
fn read_file_limited(path: &Path, limit: u64, shown: &str) -> Result<Vec<u8>, ChannelError> {
    let io_err = |e: std::io::Error| ChannelError::Fetch {
        url: shown.to_string(),
        message: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(io_err)?;
    let mut out = Vec::new();
    file.take(limit + 1).read_to_end(&mut out).map_err(io_err)?;
    if out.len() as u64 > limit {
        return Err(ChannelError::TooLarge {
            url: shown.to_string(),
            limit,
        });
    }
    Ok(out)
}

/// Join a relative path to a directory inside a repository, refusing anything that leaves it.
fn join_inside(dir: &Path, rel: &str) -> Result<String, BundleUrlError> {
    let mut parts: Vec<String> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if rel.starts_with('/') {
        return Err(BundleUrlError::AbsolutePath {
            path: rel.to_string(),
        });
    }
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(BundleUrlError::LeavesRepository {
                        path: rel.to_string(),
                    });
                }
            }
            p => parts.push(p.to_string()),
        }
    }
    Ok(parts.join("/"))
}

/// Parse a channel index; `resolve` turns each bundle `url` into an absolute location (its
/// error is shown after the field and the url).
pub fn parse_channel<E: std::error::Error>(
    text: &str,
    channel_url: &str,
    resolve: impl Fn(&str) -> Result<String, E>,
) -> Result<Channel, ChannelError> {
    let err = |message: String| ChannelError::Index {
        url: channel_url.to_string(),
        message,
    };
    let raw: RawChannel = serde_saphyr::from_str(text).map_err(|e| err(e.to_string()))?;
    let name = raw
        .channel
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| err("`channel` (the channel's name) is missing".into()))?;
    let mut seen = BTreeSet::new();
    let mut bundles = Vec::with_capacity(raw.bundles.len());
    for (i, b) in raw.bundles.into_iter().enumerate() {
        let field = |f: &str| format!("`bundles[{i}].{f}`");
        let version = b
            .version
            .ok_or_else(|| err(format!("{} is missing", field("version"))))?;
        let version = semver::Version::parse(version.trim()).map_err(|e| {
            err(format!(
                "{} `{version}` is not a semantic version: {e}",
                field("version")
            ))
        })?;
        if !seen.insert(version.clone()) {
            return Err(err(format!(
                "{}: version {version} is listed twice",
                field("version")
            )));
        }
        let url = b
            .url
            .filter(|u| !u.trim().is_empty())
            .ok_or_else(|| err(format!("{} is missing", field("url"))))?;
        let url = resolve(url.trim()).map_err(|e| {
            err(format!(
                "{} `{}`: {e}",
                field("url"),
                redact_url_passwords(&url)
            ))
        })?;
        let sha256 = b
            .sha256
            .ok_or_else(|| err(format!("{} is missing", field("sha256"))))?
            .trim()
            .to_ascii_lowercase();
        if sha256.len() != 64 || !sha256.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(err(format!(
                "{} must be 64 hexadecimal digits (the sha256 of the .tar.gz), not `{sha256}`",
                field("sha256")
            )));
        }
        bundles.push(ChannelEntry {
            version,
            url,
            sha256,
        });
    }
    bundles.sort_by(|a, b| b.version.cmp(&a.version));
    Ok(Channel { name, bundles })
}

#[cfg(test)]
mod tests;
