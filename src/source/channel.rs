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

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::git::auth::redact_url_passwords;
use super::git::{GitError, GitRef, GitSource, GitSourceSpec};
use super::{Snapshot, SnapshotLimits};

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
    snapshot: Option<Snapshot>,
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
        verify_sha256(&archive, &entry.sha256).map_err(|actual| ChannelError::DigestMismatch {
            version: entry.version.to_string(),
            url: shown.clone(),
            expected: entry.sha256.clone(),
            actual,
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
    fn resolve(&self, url: &str) -> Result<String, String> {
        match &self.location {
            ChannelLocation::Url(base) => {
                let joined = base.join(url).map_err(|e| e.to_string())?;
                match joined.scheme() {
                    "http" | "https" | "file" => Ok(joined.to_string()),
                    other => Err(format!("scheme `{other}` is not supported")),
                }
            }
            ChannelLocation::Git { path, .. } => {
                if url.contains("://") {
                    return Err(
                        "a git channel names its bundles by paths inside its repository".into(),
                    );
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
            return tokio::task::spawn_blocking(move || read_file_limited(&path, limit))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r)
                .map_err(|message| {
                    if message == TOO_LARGE {
                        ChannelError::TooLarge { url: shown, limit }
                    } else {
                        ChannelError::Fetch {
                            url: shown,
                            message,
                        }
                    }
                });
        }
        let fetch_err = |e: reqwest::Error| ChannelError::Fetch {
            url: shown.clone(),
            // reqwest's message names the URL it was given; ours has the password removed.
            message: redact_url_passwords(&e.without_url().to_string()),
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
    async fn fetch_git(&self) -> Result<Snapshot, ChannelError> {
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
                    g.source
                        .last_good()
                        .cloned()
                        .ok_or_else(|| ChannelError::Index {
                            url: display.clone(),
                            message: "the git source reported no change but holds no snapshot"
                                .into(),
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
    async fn git_snapshot(&self) -> Result<Snapshot, ChannelError> {
        if let Some(git) = &self.git {
            let g = git.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = &g.snapshot {
                return Ok(s.clone());
            }
        }
        self.fetch_git().await
    }
}

const TOO_LARGE: &str = "too large";

fn read_file_limited(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    if out.len() as u64 > limit {
        return Err(TOO_LARGE.to_string());
    }
    Ok(out)
}

/// Join a relative path to a directory inside a repository, refusing anything that leaves it.
fn join_inside(dir: &Path, rel: &str) -> Result<String, String> {
    let mut parts: Vec<String> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if rel.starts_with('/') {
        return Err(format!(
            "`{rel}` must be relative to the channel file in the repository"
        ));
    }
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!("`{rel}` leaves the repository"));
                }
            }
            p => parts.push(p.to_string()),
        }
    }
    Ok(parts.join("/"))
}

/// Parse a channel index; `resolve` turns each bundle `url` into an absolute location.
pub fn parse_channel(
    text: &str,
    channel_url: &str,
    resolve: impl Fn(&str) -> Result<String, String>,
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

/// Lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Check `bytes` against the expected hex digest; on a mismatch, the actual digest.
pub fn verify_sha256(bytes: &[u8], expected: &str) -> Result<(), String> {
    let actual = sha256_hex(bytes);
    // Both are public digests: no need for a constant-time comparison.
    if actual.eq_ignore_ascii_case(expected.trim()) {
        Ok(())
    } else {
        Err(actual)
    }
}

/// Unpack a bundle `.tar.gz` in memory: regular files only (directories are skipped; links,
/// devices and anything else refused), no absolute path and no `..`, within `limits`.
pub fn unpack_archive(
    archive: &[u8],
    limits: &ChannelLimits,
    url: &str,
) -> Result<BTreeMap<String, Vec<u8>>, ChannelError> {
    let err = |message: String| ChannelError::Archive {
        url: url.to_string(),
        message,
    };
    // Bound the decompressed stream as a whole: a small archive may inflate enormously.
    let budget = limits
        .max_unpacked_bytes
        .saturating_add(limits.max_entries as u64 * 1024 + 1024 * 1024);
    let gz = flate2::read::GzDecoder::new(archive).take(budget);
    let mut tar = tar::Archive::new(gz);
    let entries = tar
        .entries()
        .map_err(|e| err(format!("not a tar archive: {e}")))?;
    let mut files = BTreeMap::new();
    let mut total: u64 = 0;
    for (n, entry) in entries.enumerate() {
        if n >= limits.max_entries {
            return Err(err(format!(
                "more than {} entries; refusing it",
                limits.max_entries
            )));
        }
        let mut entry = entry.map_err(|e| err(format!("not a valid .tar.gz: {e}")))?;
        let path = entry
            .path()
            .map_err(|e| err(format!("entry {n}: unreadable path: {e}")))?
            .into_owned();
        let shown = path.display().to_string();
        let mut parts = Vec::new();
        for c in path.components() {
            match c {
                Component::Normal(p) => parts.push(
                    p.to_str()
                        .ok_or_else(|| err(format!("`{shown}`: path is not UTF-8")))?
                        .to_string(),
                ),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(err(format!("`{shown}`: path leaves the bundle (`..`)")))
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(err(format!("`{shown}`: absolute path")))
                }
            }
        }
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        if kind.is_pax_global_extensions()
            || kind.is_pax_local_extensions()
            || kind.is_gnu_longname()
        {
            continue;
        }
        if !kind.is_file() {
            return Err(err(format!(
                "`{shown}`: a {} is not allowed in a bundle (regular files only)",
                entry_kind_name(kind)
            )));
        }
        if parts.is_empty() {
            return Err(err(format!("entry {n}: empty path")));
        }
        let size = entry.header().size().unwrap_or(u64::MAX);
        if size > limits.max_file_bytes {
            return Err(err(format!(
                "`{shown}`: {size} bytes is more than the {} a bundle file may have",
                limits.max_file_bytes
            )));
        }
        total = total.saturating_add(size);
        if total > limits.max_unpacked_bytes {
            return Err(err(format!(
                "more than {} bytes unpacked; refusing it",
                limits.max_unpacked_bytes
            )));
        }
        let mut content = Vec::with_capacity(size as usize);
        (&mut entry)
            .take(limits.max_file_bytes + 1)
            .read_to_end(&mut content)
            .map_err(|e| err(format!("`{shown}`: {e}")))?;
        let key = parts.join("/");
        if files.insert(key.clone(), content).is_some() {
            return Err(err(format!("`{key}` appears twice")));
        }
    }
    Ok(files)
}

fn entry_kind_name(kind: tar::EntryType) -> &'static str {
    if kind.is_symlink() {
        "symbolic link"
    } else if kind.is_hard_link() {
        "hard link"
    } else if kind.is_character_special() || kind.is_block_special() {
        "device"
    } else if kind.is_fifo() {
        "FIFO"
    } else {
        "special entry"
    }
}

/// Pack files (path → content) into a deterministic `.tar.gz` (sorted paths, fixed mode and
/// time): what a channel serves, and how the chosen bundle is kept in the cluster.
pub fn pack_archive(files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, path, content.as_slice())?;
    }
    tar.into_inner()?.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
            .collect()
    }

    fn http_resolver(base: &str) -> impl Fn(&str) -> Result<String, String> {
        let base = url::Url::parse(base).unwrap();
        move |u: &str| {
            base.join(u)
                .map(|j| j.to_string())
                .map_err(|e| e.to_string())
        }
    }

    const DIGEST: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    #[test]
    fn a_channel_is_parsed_sorted_newest_first_with_relative_urls_resolved() {
        let text = format!(
            "channel: stable\nbundles:\n  - {{version: 1.0.0, url: b/a-1.0.0.tar.gz, sha256: {DIGEST}}}\n  - {{version: 1.2.0, url: 'https://cdn.example/a-1.2.0.tar.gz', sha256: {}}}\n",
            DIGEST.to_uppercase()
        );
        let ch = parse_channel(
            &text,
            "https://h/x/channel.yaml",
            http_resolver("https://h/x/channel.yaml"),
        )
        .unwrap();
        assert_eq!(ch.name, "stable");
        assert_eq!(ch.bundles[0].version.to_string(), "1.2.0");
        assert_eq!(ch.bundles[0].url, "https://cdn.example/a-1.2.0.tar.gz");
        assert_eq!(ch.bundles[0].sha256, DIGEST);
        assert_eq!(ch.bundles[1].url, "https://h/x/b/a-1.0.0.tar.gz");
    }

    #[test]
    fn channel_errors_name_the_field() {
        let parse = |t: &str| {
            parse_channel(t, "https://h/c.yaml", http_resolver("https://h/c.yaml"))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            parse("bundles: []\n"),
            "channel https://h/c.yaml: `channel` (the channel's name) is missing"
        );
        let e = parse(&format!(
            "channel: s\nbundles:\n  - {{version: one, url: a, sha256: {DIGEST}}}\n"
        ));
        assert!(
            e.starts_with(
                "channel https://h/c.yaml: `bundles[0].version` `one` is not a semantic version"
            ),
            "{e}"
        );
        let e = parse("channel: s\nbundles:\n  - {version: 1.0.0, url: a, sha256: abc}\n");
        assert_eq!(e, "channel https://h/c.yaml: `bundles[0].sha256` must be 64 hexadecimal digits (the sha256 of the .tar.gz), not `abc`");
        let e = parse(&format!("channel: s\nbundles:\n  - {{version: 1.0.0, url: a, sha256: {DIGEST}}}\n  - {{version: 1.0.0, url: b, sha256: {DIGEST}}}\n"));
        assert!(
            e.contains("`bundles[1].version`: version 1.0.0 is listed twice"),
            "{e}"
        );
        let e = parse(&format!(
            "channel: s\nbundles:\n  - {{version: 1.0.0, sha256: {DIGEST}}}\n"
        ));
        assert!(e.ends_with("`bundles[0].url` is missing"), "{e}");
    }

    #[test]
    fn poll_urls_are_parsed() {
        assert!(matches!(
            ChannelLocation::parse("https://h/c.yaml").unwrap(),
            ChannelLocation::Url(_)
        ));
        assert!(matches!(
            ChannelLocation::parse("file:///srv/c.yaml").unwrap(),
            ChannelLocation::Url(_)
        ));
        assert_eq!(
            ChannelLocation::parse("git+https://h/agents.git?ref=stable#channels/c.yaml").unwrap(),
            ChannelLocation::Git {
                url: "https://h/agents.git".into(),
                reference: Some(GitRef::Name("stable".into())),
                path: "channels/c.yaml".into()
            }
        );
        assert_eq!(
            ChannelLocation::parse("git+file:///srv/agents").unwrap(),
            ChannelLocation::Git {
                url: "file:///srv/agents".into(),
                reference: None,
                path: DEFAULT_CHANNEL_FILE.into()
            }
        );
        let e = ChannelLocation::parse("ftp://h/c.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("scheme `ftp` is not supported"), "{e}");
        let e = ChannelLocation::parse("git+https://h/a.git#../x.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("leaves the repository"), "{e}");
        let e = ChannelLocation::parse("gopher://user:hunter2@h/c.yaml")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn git_bundle_paths_are_relative_to_the_channel_file_and_stay_inside() {
        assert_eq!(
            join_inside(Path::new("channels"), "../bundles/a.tar.gz").unwrap(),
            "bundles/a.tar.gz"
        );
        assert_eq!(
            join_inside(Path::new(""), "./a.tar.gz").unwrap(),
            "a.tar.gz"
        );
        assert!(join_inside(Path::new("channels"), "../../a.tar.gz").is_err());
        assert!(join_inside(Path::new(""), "/etc/passwd").is_err());
    }

    #[test]
    fn the_digest_check_refuses_a_mismatch_and_reports_the_actual_digest() {
        let data = b"bundle bytes";
        let good = sha256_hex(data);
        assert_eq!(verify_sha256(data, &good), Ok(()));
        assert_eq!(verify_sha256(data, &good.to_uppercase()), Ok(()));
        assert_eq!(verify_sha256(data, DIGEST), Err(good.clone()));
        assert_eq!(verify_sha256(b"bundle bytez", &good).unwrap_err().len(), 64);
    }

    #[test]
    fn an_archive_round_trips_and_is_deterministic() {
        let f = files(&[
            ("agents/bundle.yaml", "version: 1.0.0\n"),
            ("agents/flux/a.yaml", "x: 1\n"),
        ]);
        let a = pack_archive(&f).unwrap();
        assert_eq!(a, pack_archive(&f).unwrap());
        let back = unpack_archive(&a, &ChannelLimits::default(), "u").unwrap();
        assert_eq!(back, f);
    }

    fn raw_archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        build(&mut tar);
        let raw = tar.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &raw).unwrap();
        gz.finish().unwrap()
    }

    /// A header whose name is written raw, bypassing tar's own path checks (as a hostile
    /// archive would be).
    fn raw_header(name: &str, kind: tar::EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_size(size);
        h.set_mode(0o644);
        h.set_entry_type(kind);
        h.set_cksum();
        h
    }

    #[test]
    fn paths_that_leave_the_bundle_are_refused() {
        for name in ["../evil.yaml", "a/../../evil.yaml", "/etc/evil.yaml"] {
            let a = raw_archive(|t| {
                let h = raw_header(name, tar::EntryType::Regular, 2);
                t.append(&h, &b"x\n"[..]).unwrap();
            });
            let e = unpack_archive(&a, &ChannelLimits::default(), "u")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("leaves the bundle") || e.contains("absolute path"),
                "{name}: {e}"
            );
        }
    }

    #[test]
    fn links_are_refused() {
        let a = raw_archive(|t| {
            let mut h = raw_header("agents/bundle.yaml", tar::EntryType::Symlink, 0);
            h.set_link_name("/etc/passwd").unwrap();
            h.set_cksum();
            t.append(&h, std::io::empty()).unwrap();
        });
        let e = unpack_archive(&a, &ChannelLimits::default(), "u")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "bundle archive u: `agents/bundle.yaml`: a symbolic link is not allowed in a bundle (regular files only)"
        );
    }

    #[test]
    fn size_and_entry_limits_are_enforced() {
        let limits = ChannelLimits {
            max_entries: 3,
            max_file_bytes: 10,
            max_unpacked_bytes: 15,
            ..Default::default()
        };
        let many = pack_archive(&files(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")])).unwrap();
        assert!(unpack_archive(&many, &limits, "u")
            .unwrap_err()
            .to_string()
            .contains("more than 3 entries"));
        let big = pack_archive(&files(&[("a", "0123456789abc")])).unwrap();
        assert!(unpack_archive(&big, &limits, "u")
            .unwrap_err()
            .to_string()
            .contains("`a`: 13 bytes is more than the 10"));
        let total = pack_archive(&files(&[("a", "0123456789"), ("b", "0123456789")])).unwrap();
        assert!(unpack_archive(&total, &limits, "u")
            .unwrap_err()
            .to_string()
            .contains("more than 15 bytes unpacked"));
        assert!(unpack_archive(b"not gzip", &limits, "u").is_err());
    }

    #[tokio::test]
    async fn a_file_channel_is_read_and_its_bundle_verified() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = files(&[("bundle.yaml", "version: 2.0.0\n")]);
        let archive = pack_archive(&bundle).unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        std::fs::write(dir.path().join("b/a.tar.gz"), &archive).unwrap();
        let channel = format!(
            "channel: test\nbundles:\n  - {{version: 2.0.0, url: b/a.tar.gz, sha256: {}}}\n  - {{version: 2.1.0, url: b/a.tar.gz, sha256: {DIGEST}}}\n",
            sha256_hex(&archive)
        );
        std::fs::write(dir.path().join("channel.yaml"), channel).unwrap();
        let url = url::Url::from_file_path(dir.path().join("channel.yaml")).unwrap();
        let src = ChannelSource::new(url.as_str(), ChannelOptions::default()).unwrap();
        let ch = src.fetch_index().await.unwrap();
        assert_eq!(ch.bundles.len(), 2);
        let good = src.fetch_bundle(&ch.bundles[1]).await.unwrap();
        assert_eq!(good.files, bundle);
        assert_eq!(good.archive, archive);
        let bad = src.fetch_bundle(&ch.bundles[0]).await.unwrap_err();
        assert!(
            matches!(&bad, ChannelError::DigestMismatch { version, .. } if version == "2.1.0"),
            "{bad}"
        );
        assert!(bad.to_string().contains("sha256 mismatch"), "{bad}");
    }
}
