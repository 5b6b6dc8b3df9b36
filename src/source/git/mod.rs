//! The git source: fetch a repository with libgit2 into an on-disk cache and read a [`Snapshot`]
//! from the git tree of the fetched commit (no checkout, so no half-written working tree).
//!
//! - URLs: `https://`/`http://` (basic auth or bearer token), `ssh://` and scp-style
//!   (`user@host:path`, `[user@host:port]:path`; key + known_hosts), `git://`, `file://` and
//!   local repository paths.
//! - Cheap polls: [`GitSource::fetch`] first lists the remote refs (like `git ls-remote`); when the
//!   wanted commit is the last good one it returns [`FetchOutcome::Unchanged`] without fetching.
//! - Incremental: the cache keeps all objects; the first fetch is shallow (depth 1) and later
//!   fetches download only the commits and objects the cache lacks.
//! - Lean: the last good snapshot is shared with whoever renders it, not held; once nobody
//!   holds it, [`GitSource::read_last_good`] reads its commit again from the cache (a daemon keeps
//!   no root's files between passes).
//! - Safe: every failure leaves [`GitSource::last_good`] untouched; a damaged cache is deleted
//!   and fetched again once; secrets never appear in errors (see [`Credentials::scrub`]).
//!
//! The parts: [`url`] (remote URLs, scp-style addresses, relative locations), [`auth`]
//! (credentials, known_hosts, libgit2's credential and host-key callbacks), [`cache`] (the
//! [`GitSource`]: the bare cache repository and the fetches into it), [`tree`] (a snapshot read
//! from a commit's tree).
//!
//! All of this is blocking (libgit2 is): async callers use `tokio::task::spawn_blocking`.

pub mod auth;
mod cache;
mod redirect;
pub mod system_ca;
mod tree;
mod url;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::api::redact::redact_url_passwords;
use auth::Credentials;
pub use cache::{ChangedFiles, GitSource};
pub use tree::read_tree_snapshot;
pub use url::{
    is_git_url, repository_key, resolve_relative_location, scp_as_ssh_url, RelativeLocationError,
};

use super::{Snapshot, SnapshotLimits};

/// Which commit of the repository to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GitRef {
    /// The tip of a branch.
    Branch(String),
    /// A tag (lightweight or annotated; annotated tags are peeled to their commit).
    Tag(String),
    /// A full 40-hex commit SHA.
    Commit(String),
    /// A name that is a branch or a tag (a branch wins), as given by `--ref NAME`.
    Name(String),
    /// The remote's `HEAD`: its default branch, whatever it is named, as `git clone` checks out
    /// when no branch is given. Resolved on every fetch, so a changed default branch is followed.
    Head,
}

impl Default for GitRef {
    /// The remote's HEAD, as `git clone`: a repository whose default branch is `master` or
    /// `trunk` is synced without `--ref`.
    fn default() -> Self {
        GitRef::Head
    }
}

impl GitRef {
    /// Interpret a `--ref` value: a 40-hex SHA is a commit, `refs/heads/X` a branch,
    /// `refs/tags/X` a tag, `HEAD` the remote's HEAD, anything else a branch or tag name.
    pub fn parse(s: &str) -> GitRef {
        let s = s.trim();
        if s == "HEAD" {
            GitRef::Head
        } else if s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            GitRef::Commit(s.to_ascii_lowercase())
        } else if let Some(b) = s.strip_prefix("refs/heads/") {
            GitRef::Branch(b.to_string())
        } else if let Some(t) = s.strip_prefix("refs/tags/") {
            GitRef::Tag(t.to_string())
        } else {
            GitRef::Name(s.to_string())
        }
    }
}

impl fmt::Display for GitRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GitRef::Branch(b) => write!(f, "branch `{b}`"),
            GitRef::Tag(t) => write!(f, "tag `{t}`"),
            GitRef::Commit(c) => write!(f, "commit {c}"),
            GitRef::Name(n) => write!(f, "ref `{n}`"),
            GitRef::Head => write!(f, "the remote's HEAD (its default branch)"),
        }
    }
}

/// What to do when a branch no longer contains the last good commit (it was force-pushed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HistoryRewrite {
    /// Use the new tip, with a warning in the log (what `git pull --force` users expect).
    #[default]
    Follow,
    /// Refuse the new tip with [`GitError::HistoryRewritten`]; the last good snapshot stays.
    Refuse,
}

/// Everything that defines a git source. Its `Debug` output redacts a password in the URL (and
/// the credentials print as `***`).
#[derive(Clone)]
pub struct GitSourceSpec {
    /// The repository URL (a password inside it is used for auth and redacted everywhere else).
    pub url: String,
    /// Branch, tag or commit.
    pub reference: GitRef,
    /// Subdirectory of the repository to read (`--path`); `None` for the whole tree.
    pub path: Option<String>,
    /// Credentials for the remote.
    pub credentials: Credentials,
    /// Directory for the cache; each URL gets its own bare repository below it.
    pub cache_dir: PathBuf,
    /// Limits on the snapshot.
    pub limits: SnapshotLimits,
    /// Make the first fetch into an empty cache shallow (depth 1). Later fetches are incremental.
    pub shallow: bool,
    /// What to do with a force-pushed branch.
    pub on_history_rewrite: HistoryRewrite,
    /// The most one fetch (or ref listing) may take, whatever the server does: a server that
    /// accepts and never answers, or trickles, fails the fetch when it is over (`--fetch-timeout`).
    /// It bounds the read of the snapshot from the fetched tree too.
    pub fetch_timeout: Duration,
    /// Which HTTP redirects the fetch follows.
    pub redirects: Redirects,
}

/// Which HTTP redirects a git fetch follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Redirects {
    /// As git does by default (`http.followRedirects=initial`): any redirect of the first request.
    #[default]
    Initial,
    /// Only to the same host (libgit2 compares host names), never from https to http: a remote
    /// someone else chose (a chart source) cannot send Weft to another host.
    SameHost,
}

/// The default of [`GitSourceSpec::fetch_timeout`].
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(300);

impl fmt::Debug for GitSourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitSourceSpec")
            .field("url", &redact_url_passwords(&self.url))
            .field("reference", &self.reference)
            .field("path", &self.path)
            .field("credentials", &self.credentials)
            .field("cache_dir", &self.cache_dir)
            .field("limits", &self.limits)
            .field("shallow", &self.shallow)
            .field("on_history_rewrite", &self.on_history_rewrite)
            .field("fetch_timeout", &self.fetch_timeout)
            .field("redirects", &self.redirects)
            .finish()
    }
}

impl GitSourceSpec {
    /// A spec with defaults: the remote's HEAD, whole tree, no credentials, default limits, shallow.
    pub fn new(url: impl Into<String>, cache_dir: impl Into<PathBuf>) -> Self {
        GitSourceSpec {
            url: url.into(),
            reference: GitRef::default(),
            path: None,
            credentials: Credentials::default(),
            cache_dir: cache_dir.into(),
            limits: SnapshotLimits::default(),
            shallow: true,
            on_history_rewrite: HistoryRewrite::default(),
            fetch_timeout: DEFAULT_FETCH_TIMEOUT,
            redirects: Redirects::default(),
        }
    }
}

/// Why a fetch failed. Every message is safe to log: URLs are shown with passwords redacted and
/// secret values are scrubbed from text that came from libgit2 or the server.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("invalid git URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("cannot reach {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("fetching {url} did not finish within {}s (--fetch-timeout): the server accepted the connection but did not answer in time; the last good revision stays applied", .timeout.as_secs())]
    Timeout { url: String, timeout: Duration },
    #[error("authentication to {url} failed: {message}")]
    Authentication { url: String, message: String },
    #[error("SSH host key of {host} not trusted: {message}")]
    HostKey { host: String, message: String },
    #[error("{reference} not found in {url}{available}")]
    MissingRef {
        url: String,
        reference: String,
        available: String,
    },
    #[error("{reference} of {url} was force-pushed: the new tip {new} does not contain the last good commit {old}; refusing it (history rewrite policy: refuse)")]
    HistoryRewritten {
        url: String,
        reference: String,
        old: String,
        new: String,
    },
    #[error("fetching {url} failed: {message}")]
    Fetch { url: String, message: String },
    #[error("git cache {path}: {message}")]
    Cache { path: PathBuf, message: String },
    /// The disk of the cache is full. Not damage: the cache is kept (deleting it would mean a
    /// whole clone once space returns), and the next fetch simply tries again.
    #[error("the git cache {path} is out of disk space ({message}); the last good revision stays applied: free space in the cache directory (--cache-dir), or give it more")]
    NoSpace { path: PathBuf, message: String },
    #[error(
        "git cache {path} is damaged ({message}); deleted it, but fetching again failed: {retry}"
    )]
    CacheDamaged {
        path: PathBuf,
        message: String,
        retry: Box<GitError>,
    },
    #[error("--path `{path}` does not exist at commit {revision}")]
    PathNotFound { path: String, revision: String },
    #[error("--path `{path}` at commit {revision} is not a directory")]
    PathNotADirectory { path: String, revision: String },
    #[error("{path}: unsafe path in the repository at commit {revision}: {reason}")]
    UnsafePath {
        path: String,
        revision: String,
        reason: String,
    },
    #[error("{path}: symlink points outside the repository (to `{target}`) at commit {revision}; refusing it")]
    SymlinkEscapes {
        path: String,
        target: String,
        revision: String,
    },
    #[error("{path}: symlink target `{target}` does not exist at commit {revision}")]
    DanglingSymlink {
        path: String,
        target: String,
        revision: String,
    },
    #[error("{path}: file is {size} bytes, over the limit of {limit} bytes (commit {revision})")]
    FileTooLarge {
        path: String,
        size: u64,
        limit: u64,
        revision: String,
    },
    #[error("repository has more than {limit} files at commit {revision}")]
    TooManyFiles { limit: usize, revision: String },
    #[error("repository is larger than {limit} bytes in total at commit {revision}")]
    TooLarge { limit: u64, revision: String },
    #[error("the trees of commit {revision} hold more than {limit} entries (a tree that names the same subtree many times?); refusing it")]
    TooManyTreeEntries { limit: usize, revision: String },
    #[error("reading the files of commit {revision} did not finish within --fetch-timeout ({examined} tree entries in {elapsed:.1?}); the last good revision stays applied")]
    ReadTimeout {
        elapsed: Duration,
        examined: usize,
        revision: String,
    },
    #[error("--ca-file {path}: cannot load it as PEM CA certificates: {message}")]
    CaFile { path: PathBuf, message: String },
    #[error("{url} answered with a redirect that is not followed ({message}): git chart sources follow no redirect; use the URL it points to, if the operator allows it")]
    RedirectRefused { url: String, message: String },
    #[error("cannot read the git tree at commit {revision}: {message}")]
    Read { revision: String, message: String },
}

/// Whether an error text is the OS saying the disk is full (ENOSPC, or EDQUOT).
pub fn is_no_space(message: &str) -> bool {
    message.contains("No space left on device") || message.contains("Disk quota exceeded")
}

impl GitError {
    /// Whether this error means the local cache is broken (and a fresh clone may fix it).
    fn is_cache_damage(&self) -> bool {
        match self {
            // A full disk is not damage: deleting the cache would only cost a clone later.
            GitError::Cache { message, .. } | GitError::Read { message, .. } => {
                !is_no_space(message)
            }
            _ => false,
        }
    }
}

/// The result of [`GitSource::fetch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchOutcome {
    /// The wanted commit is the last good snapshot's: nothing to load or render.
    Unchanged,
    /// A new snapshot (also [`GitSource::last_good`] while somebody holds it: the same one).
    New(Arc<Snapshot>),
}

/// What the last network fetch transferred (all zero when no fetch was needed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Objects received from the server.
    pub received_objects: usize,
    /// Bytes received from the server.
    pub received_bytes: usize,
    /// Whether a fetch (download negotiation) ran at all, beyond listing refs.
    pub fetched: bool,
    /// Whether that fetch was shallow.
    pub shallow: bool,
}

impl GitError {
    /// The same missing ref, with `text` in place of the list of what the remote has.
    fn with_available(self, text: &str) -> GitError {
        match self {
            GitError::MissingRef { url, reference, .. } => GitError::MissingRef {
                url,
                reference,
                available: text.to_string(),
            },
            other => other,
        }
    }
}

/// One fetch for the CLI (`weft render --repo URL [--ref REF] [--path DIR]`): the snapshot of
/// `reference` (default: the remote's HEAD, as `git clone`), cached under [`default_cache_dir`].
pub fn fetch_snapshot(
    url: &str,
    reference: Option<&str>,
    path: Option<&str>,
    credentials: Credentials,
    fetch_timeout: Duration,
) -> Result<Snapshot, GitError> {
    let mut spec = GitSourceSpec::new(url, default_cache_dir());
    spec.fetch_timeout = fetch_timeout;
    if let Some(r) = reference {
        spec.reference = GitRef::parse(r);
    }
    spec.path = path.map(str::to_string);
    spec.credentials = credentials;
    let mut source = GitSource::new(spec)?;
    let url = source.display_url().to_string();
    // libgit2 keeps the deadline while data flows and cuts a silent server; a thread bounds what
    // it cannot see (headers that never end). A fetch past it is left behind: the command ends.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let fetched = source.fetch().map(|outcome| match outcome {
            FetchOutcome::New(snapshot) => Some(snapshot),
            // A new source has no last good snapshot, so this is not expected; answer it anyway.
            FetchOutcome::Unchanged => source.last_good(),
        });
        // The source lets its snapshot go before it is sent: the caller takes the files
        // instead of copying them.
        drop(source);
        let _ = tx.send(fetched);
    });
    let overrun = || GitError::Timeout {
        url: url.clone(),
        timeout: fetch_timeout,
    };
    let snapshot = rx
        .recv_timeout(fetch_timeout + Duration::from_secs(2))
        .map_err(|_| overrun())??
        .ok_or_else(|| GitError::Fetch {
            url,
            message: "no snapshot was read".to_string(),
        })?;
    Ok(Arc::unwrap_or_clone(snapshot))
}

/// Trust the PEM certificates of `file` for every https fetch of this process, in addition to
/// the system's (libgit2's CA setting is process-wide: the config repository and git chart
/// sources alike). For `--ca-file`.
pub fn trust_ca_file(file: &std::path::Path) -> Result<(), GitError> {
    // SAFETY: libgit2 adds the file to its process-global OpenSSL context; git2 initialises
    // libgit2 first. Called from the CLI before any fetch starts, so no TLS handshake reads the
    // store while it changes.
    unsafe { git2::opts::set_ssl_cert_file(file) }.map_err(|e| GitError::CaFile {
        path: file.to_path_buf(),
        message: e.message().to_string(),
    })
}

/// A cache directory for the CLI: `$XDG_CACHE_HOME/weft/git`, else `~/.cache/weft/git`, else
/// a directory under the system temp dir.
pub fn default_cache_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("weft/git");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".cache/weft/git");
    }
    std::env::temp_dir().join("weft-git-cache")
}

#[cfg(test)]
mod tests {
    use super::*;
    use auth::SecretValue;
    #[test]
    fn refs_are_parsed() {
        assert_eq!(GitRef::parse("main"), GitRef::Name("main".into()));
        assert_eq!(
            GitRef::parse("refs/heads/dev"),
            GitRef::Branch("dev".into())
        );
        assert_eq!(GitRef::parse("refs/tags/v1"), GitRef::Tag("v1".into()));
        let sha = "0123456789ABCDEF0123456789abcdef01234567";
        assert_eq!(GitRef::parse(sha), GitRef::Commit(sha.to_ascii_lowercase()));
        assert_eq!(GitRef::parse("0123456"), GitRef::Name("0123456".into()));
        assert_eq!(GitRef::parse("HEAD"), GitRef::Head);
        assert_eq!(GitRef::default(), GitRef::Head);
    }

    #[test]
    fn spec_debug_output_hides_the_url_password() {
        let mut spec = GitSourceSpec::new("https://bob:hunter2@h/x.git", "/tmp/c");
        spec.credentials.password = Some(SecretValue::new("other-secret"));
        let shown = format!("{spec:?}");
        assert!(shown.contains("https://bob:***@h/x.git"), "{shown}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("other-secret"),
            "{shown}"
        );
    }
}
