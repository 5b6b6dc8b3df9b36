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
//! - Safe: every failure leaves [`GitSource::last_good`] untouched; a damaged cache is deleted
//!   and fetched again once; secrets never appear in errors (see [`Credentials::scrub`]).
//!
//! All of this is blocking (libgit2 is): async callers use `tokio::task::spawn_blocking`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Instant;

use git2::{
    AutotagOption, CertificateCheckStatus, Cred, CredentialType, Direction, ErrorClass,
    FetchOptions, ObjectType, Oid, Remote, RemoteCallbacks, Repository,
};
use sha2::{Digest, Sha256};

use super::credentials::{
    redact_url_passwords, Credentials, HostKeyCheck, KnownHosts, SecretValue,
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
}

impl Default for GitRef {
    fn default() -> Self {
        GitRef::Branch("main".to_string())
    }
}

impl GitRef {
    /// Interpret a `--ref` value: a 40-hex SHA is a commit, `refs/heads/X` a branch,
    /// `refs/tags/X` a tag, anything else a branch or tag name.
    pub fn parse(s: &str) -> GitRef {
        let s = s.trim();
        if s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
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
}

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
            .finish()
    }
}

impl GitSourceSpec {
    /// A spec with defaults: branch `main`, whole tree, no credentials, default limits, shallow.
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
    #[error("cannot read the git tree at commit {revision}: {message}")]
    Read { revision: String, message: String },
}

impl GitError {
    /// Whether this error means the local cache is broken (and a fresh clone may fix it).
    fn is_cache_damage(&self) -> bool {
        matches!(self, GitError::Cache { .. } | GitError::Read { .. })
    }
}

/// The result of [`GitSource::fetch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchOutcome {
    /// The wanted commit is the last good snapshot's: nothing to load or render.
    Unchanged,
    /// A new snapshot (also kept as [`GitSource::last_good`]).
    New(Snapshot),
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

/// A git repository as a source of snapshots. Keep one per URL/ref; it remembers the last good
/// snapshot across fetches. Not for concurrent use of one `cache_dir` by several processes.
pub struct GitSource {
    spec: GitSourceSpec,
    remote: RemoteUrl,
    cache_path: PathBuf,
    last_good_ref: String,
    last_good: Option<Snapshot>,
    last_good_oid: Option<Oid>,
    last_transfer: TransferStats,
}

impl fmt::Debug for GitSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitSource")
            .field("url", &self.remote.display)
            .field("reference", &self.spec.reference)
            .field("path", &self.spec.path)
            .field("cache", &self.cache_path)
            .field("last_good", &self.last_good_oid)
            .finish()
    }
}

/// Prefix of the refs that pin each source's last good commit in the cache (keeps it, tells a
/// restarted process what it had, and gives the server a `have` during negotiation).
const LAST_GOOD_REF_PREFIX: &str = "refs/weft/last-good/";

impl GitSource {
    /// Check the spec (URL, `--path`) and prepare the source; nothing is fetched yet.
    pub fn new(spec: GitSourceSpec) -> Result<Self, GitError> {
        init_libgit2();
        let remote = RemoteUrl::parse(&spec.url)?;
        if let Some(p) = &spec.path {
            let trimmed = p.trim_matches('/');
            if trimmed.split('/').any(|c| c == "..") || p.contains('\\') {
                return Err(GitError::UnsafePath {
                    path: p.clone(),
                    revision: "-".to_string(),
                    reason: "--path must stay inside the repository (no `..`)".to_string(),
                });
            }
        }
        let key = hex::encode(Sha256::digest(remote.display.as_bytes()));
        let cache_path = spec.cache_dir.join(format!("{}.git", &key[..24]));
        let which = format!("{:?}\n{:?}", spec.reference, spec.path);
        let last_good_ref = format!(
            "{LAST_GOOD_REF_PREFIX}{}",
            &hex::encode(Sha256::digest(which.as_bytes()))[..16]
        );
        Ok(GitSource {
            spec,
            remote,
            cache_path,
            last_good_ref,
            last_good: None,
            last_good_oid: None,
            last_transfer: TransferStats::default(),
        })
    }

    /// The URL with any password redacted (for logs and status).
    pub fn display_url(&self) -> &str {
        &self.remote.display
    }

    /// The bare repository used as cache.
    pub fn cache_path(&self) -> &Path {
        &self.cache_path
    }

    /// The last snapshot that was fetched and read successfully.
    pub fn last_good(&self) -> Option<&Snapshot> {
        self.last_good.as_ref()
    }

    /// What the last call to [`GitSource::fetch`] transferred.
    pub fn last_transfer(&self) -> TransferStats {
        self.last_transfer
    }

    /// The commit the remote currently has for the configured ref, by listing its refs (like
    /// `git ls-remote`; no objects are transferred). For a commit ref, the commit itself.
    ///
    /// With a bearer token this needs a fetch into the cache (libgit2 cannot send custom
    /// headers when only listing refs); it transfers nothing when the cache is up to date.
    pub fn remote_head(&self) -> Result<Oid, GitError> {
        if let GitRef::Commit(c) = &self.spec.reference {
            return parse_oid(c);
        }
        if self.spec.credentials.bearer_token.is_some() {
            let lock = cache_lock(&self.cache_path);
            let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let repo = self.open_cache()?;
            let (oid, _) = self.fetch_named_ref(&repo, &mut TransferStats::default())?;
            return Ok(oid);
        }
        let heads = self.list_remote()?;
        self.resolve_listed(&heads).map(|(oid, _)| oid)
    }

    /// Fetch the configured ref and read its snapshot. Returns [`FetchOutcome::Unchanged`] when
    /// the remote still has the last good commit. On any error the last good snapshot stays.
    pub fn fetch(&mut self) -> Result<FetchOutcome, GitError> {
        let started = Instant::now();
        self.last_transfer = TransferStats::default();
        // Sources of the same URL share a cache: one fetch at a time per cache, so that one never
        // sees another's lock files (or deletes a cache another is reading) as damage.
        let lock = cache_lock(&self.cache_path);
        let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let result = match self.fetch_once() {
            Err(e) if e.is_cache_damage() => {
                tracing::warn!(url = %self.remote.display, cache = %self.cache_path.display(), error = %e,
                    "git cache is damaged; deleting it and fetching again");
                self.last_transfer = TransferStats::default();
                match std::fs::remove_dir_all(&self.cache_path) {
                    Err(io) if io.kind() != std::io::ErrorKind::NotFound => Err(GitError::Cache {
                        path: self.cache_path.clone(),
                        message: format!("damaged and cannot be deleted: {io}"),
                    }),
                    _ => self.fetch_once().map_err(|retry| GitError::CacheDamaged {
                        path: self.cache_path.clone(),
                        message: e.to_string(),
                        retry: Box::new(retry),
                    }),
                }
            }
            r => r,
        };
        let elapsed = started.elapsed();
        match &result {
            Ok(FetchOutcome::Unchanged) => {
                tracing::debug!(url = %self.remote.display, elapsed = ?elapsed, "git: remote head unchanged")
            }
            Ok(FetchOutcome::New(s)) => {
                tracing::info!(url = %self.remote.display, revision = %s.revision_label(),
                files = s.files.len(), received_objects = self.last_transfer.received_objects,
                received_bytes = self.last_transfer.received_bytes, elapsed = ?elapsed, "git: fetched new revision")
            }
            Err(e) => {
                tracing::warn!(url = %self.remote.display, error = %e, "git fetch failed; keeping the last good snapshot")
            }
        }
        result
    }

    fn fetch_once(&mut self) -> Result<FetchOutcome, GitError> {
        let repo = self.open_cache()?;
        let mut stats = TransferStats::default();
        // 1. Which commit does the remote want us at? (ls-remote: refs only, no objects)
        let (oid, branch_ref) = match &self.spec.reference {
            GitRef::Commit(c) => (parse_oid(c)?, None),
            _ if self.spec.credentials.bearer_token.is_some() => {
                self.fetch_named_ref(&repo, &mut stats)?
            }
            _ => {
                let heads = self.list_remote()?;
                self.resolve_listed(&heads)?
            }
        };
        if self.last_good_oid == Some(oid) {
            self.last_transfer = stats;
            return Ok(FetchOutcome::Unchanged);
        }
        // 2. Fetch only when the cache lacks the commit (e.g. not after a restart, or a tag
        //    moved back to a commit already fetched).
        if repo.find_commit(oid).is_err() {
            match &self.spec.reference {
                GitRef::Commit(_) => self.fetch_commit(&repo, oid, &mut stats)?,
                _ => {
                    let (fetched, _) = self.fetch_named_ref(&repo, &mut stats)?;
                    if fetched != oid {
                        // The ref moved between listing and fetching: take what was fetched.
                        tracing::info!(url = %self.remote.display, listed = %oid, fetched = %fetched,
                            "git: ref moved while fetching");
                        return self.finish(&repo, fetched, branch_ref, stats);
                    }
                }
            }
        }
        self.finish(&repo, oid, branch_ref, stats)
    }

    fn finish(
        &mut self,
        repo: &Repository,
        oid: Oid,
        branch_ref: Option<String>,
        stats: TransferStats,
    ) -> Result<FetchOutcome, GitError> {
        self.last_transfer = stats;
        // 3. Force-push check: the new tip of a branch must contain the last good commit (also
        //    the one a previous process pinned in the cache).
        let previous = self
            .last_good_oid
            .or_else(|| repo.refname_to_id(&self.last_good_ref).ok());
        if let (Some(old), Some(branch)) = (previous, &branch_ref) {
            let contains = oid == old || repo.graph_descendant_of(oid, old).unwrap_or(false);
            if !contains {
                match self.spec.on_history_rewrite {
                    HistoryRewrite::Refuse => {
                        return Err(GitError::HistoryRewritten {
                            url: self.remote.display.clone(),
                            reference: branch.clone(),
                            old: old.to_string(),
                            new: oid.to_string(),
                        })
                    }
                    HistoryRewrite::Follow => {
                        tracing::warn!(url = %self.remote.display, branch = %branch,
                        old = %old, new = %oid, "git: branch history was rewritten (force-push); following the new tip")
                    }
                }
            }
        }
        // 4. Read the files from the tree at that commit.
        let snapshot = read_tree_snapshot(repo, oid, self.spec.path.as_deref(), self.spec.limits)?;
        if let Err(e) = repo.reference(&self.last_good_ref, oid, true, "weft: last good snapshot") {
            return Err(self.cache_error(&e));
        }
        self.last_good_oid = Some(oid);
        self.last_good = Some(snapshot.clone());
        Ok(FetchOutcome::New(snapshot))
    }

    /// Open (or create) the bare cache repository. A cache that exists but cannot be opened is
    /// reported as damage, so that [`GitSource::fetch`] deletes and re-creates it.
    fn open_cache(&self) -> Result<Repository, GitError> {
        if self.cache_path.exists() {
            remove_stale_locks(&self.cache_path);
            let repo = Repository::open_bare(&self.cache_path).map_err(|e| self.cache_error(&e))?;
            self.check_cache(&repo)?;
            return Ok(repo);
        }
        std::fs::create_dir_all(&self.spec.cache_dir).map_err(|e| GitError::Cache {
            path: self.spec.cache_dir.clone(),
            message: format!("cannot create the cache directory: {e}"),
        })?;
        // Initialise beside the final path and rename, so a crash never leaves half a repository.
        let tmp = self
            .cache_path
            .with_extension(format!("tmp{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        Repository::init_bare(&tmp).map_err(|e| self.cache_error(&e))?;
        std::fs::rename(&tmp, &self.cache_path).map_err(|e| GitError::Cache {
            path: self.cache_path.clone(),
            message: format!("cannot create: {e}"),
        })?;
        Repository::open_bare(&self.cache_path).map_err(|e| self.cache_error(&e))
    }

    /// Cheap integrity checks before trusting the cache: the shallow-boundary file lists
    /// commit ids, and the last good commit and its root tree are readable.
    fn check_cache(&self, repo: &Repository) -> Result<(), GitError> {
        let damaged = |message: String| GitError::Cache {
            path: self.cache_path.clone(),
            message,
        };
        let shallow = self.cache_path.join("shallow");
        if shallow.exists() {
            let text = std::fs::read(&shallow)
                .map_err(|e| damaged(format!("cannot read `shallow`: {e}")))?;
            let valid = String::from_utf8(text)
                .map(|t| {
                    t.lines()
                        .all(|l| l.trim().len() == 40 && Oid::from_str(l.trim()).is_ok())
                })
                .unwrap_or(false);
            if !valid {
                return Err(damaged(
                    "the `shallow` file does not list commit ids".to_string(),
                ));
            }
        }
        if let Ok(oid) = repo.refname_to_id(&self.last_good_ref) {
            repo.find_commit(oid).and_then(|c| c.tree()).map_err(|e| {
                damaged(format!(
                    "last good commit {oid} is unreadable: {}",
                    e.message()
                ))
            })?;
        }
        Ok(())
    }

    fn cache_error(&self, e: &git2::Error) -> GitError {
        GitError::Cache {
            path: self.cache_path.clone(),
            message: self
                .spec
                .credentials
                .scrub(e.message(), &self.remote.secrets()),
        }
    }

    /// `git ls-remote`: the remote's refs and the commits they point to (annotated tags peeled).
    fn list_remote(&self) -> Result<BTreeMap<String, Oid>, GitError> {
        let mut remote = Remote::create_detached(self.remote.fetch_url.as_str())
            .map_err(|e| self.transport_error(&e, None))?;
        let auth = RefCell::new(AuthState::default());
        let callbacks = self.callbacks(&auth);
        let connection = remote
            .connect_auth(Direction::Fetch, Some(callbacks), None)
            .map_err(|e| self.transport_error(&e, Some(&auth)))?;
        let mut refs = BTreeMap::new();
        let mut peeled = BTreeMap::new();
        for head in connection
            .list()
            .map_err(|e| self.transport_error(&e, Some(&auth)))?
        {
            match head.name().strip_suffix("^{}") {
                Some(tag) => {
                    peeled.insert(tag.to_string(), head.oid());
                }
                None => {
                    refs.insert(head.name().to_string(), head.oid());
                }
            }
        }
        refs.extend(peeled);
        Ok(refs)
    }

    /// Pick the configured ref from a ref listing: (commit, branch name if it is a branch).
    fn resolve_listed(
        &self,
        refs: &BTreeMap<String, Oid>,
    ) -> Result<(Oid, Option<String>), GitError> {
        let (branch, tag) = match &self.spec.reference {
            GitRef::Branch(b) => (Some(b), None),
            GitRef::Tag(t) => (None, Some(t)),
            GitRef::Name(n) => (Some(n), Some(n)),
            GitRef::Commit(c) => return Ok((parse_oid(c)?, None)),
        };
        if let Some(b) = branch {
            if let Some(oid) = refs.get(&format!("refs/heads/{b}")) {
                return Ok((*oid, Some(b.clone())));
            }
        }
        if let Some(t) = tag {
            if let Some(oid) = refs.get(&format!("refs/tags/{t}")) {
                return Ok((*oid, None));
            }
        }
        Err(self.missing_ref(refs))
    }

    fn missing_ref(&self, refs: &BTreeMap<String, Oid>) -> GitError {
        let wanted_tags = matches!(self.spec.reference, GitRef::Tag(_));
        let prefix = if wanted_tags {
            "refs/tags/"
        } else {
            "refs/heads/"
        };
        let names: Vec<&str> = refs
            .keys()
            .filter_map(|r| r.strip_prefix(prefix))
            .take(10)
            .collect();
        let available = if refs.is_empty() {
            " (the repository is empty)".to_string()
        } else if names.is_empty() {
            String::new()
        } else {
            let what = if wanted_tags { "tags" } else { "branches" };
            format!(" (its {what}: {})", names.join(", "))
        };
        GitError::MissingRef {
            url: self.remote.display.clone(),
            reference: self.spec.reference.to_string(),
            available,
        }
    }

    /// Fetch the configured branch/tag into the cache; returns the fetched commit and the
    /// branch name when it is a branch.
    fn fetch_named_ref(
        &self,
        repo: &Repository,
        stats: &mut TransferStats,
    ) -> Result<(Oid, Option<String>), GitError> {
        let candidates: Vec<(String, String, bool)> = match &self.spec.reference {
            GitRef::Branch(b) => vec![(
                format!("refs/heads/{b}"),
                format!("refs/remotes/origin/{b}"),
                true,
            )],
            GitRef::Tag(t) => vec![(format!("refs/tags/{t}"), format!("refs/tags/{t}"), false)],
            GitRef::Name(n) => vec![
                (
                    format!("refs/heads/{n}"),
                    format!("refs/remotes/origin/{n}"),
                    true,
                ),
                (format!("refs/tags/{n}"), format!("refs/tags/{n}"), false),
            ],
            GitRef::Commit(c) => return Ok((parse_oid(c)?, None)),
        };
        let refspecs: Vec<String> = candidates
            .iter()
            .map(|(src, dst, _)| format!("+{src}:{dst}"))
            .collect();
        let before: Vec<Option<Oid>> = candidates
            .iter()
            .map(|(_, dst, _)| repo.refname_to_id(dst).ok())
            .collect();
        // libgit2 leaves a local ref alone when the remote lacks it, so delete the local copies
        // first to tell "fetched" from "left over" (they are restored below on failure).
        for (_, dst, _) in &candidates {
            if let Ok(mut r) = repo.find_reference(dst) {
                let _ = r.delete();
            }
        }
        let result = self.run_fetch(repo, &refspecs, true, stats);
        let found = candidates.iter().find_map(|(_, dst, is_branch)| {
            let oid = repo.refname_to_id(dst).ok()?;
            let name = dst.rsplit_once("origin/").map(|(_, b)| b.to_string());
            Some((oid, if *is_branch { name } else { None }))
        });
        match (result, found) {
            (Ok(()), Some((oid, branch))) => {
                let commit = repo
                    .find_object(oid, None)
                    .and_then(|o| o.peel_to_commit())
                    .map_err(|e| self.cache_error(&e))?;
                Ok((commit.id(), branch))
            }
            (result, _) => {
                for ((_, dst, _), old) in candidates.iter().zip(before) {
                    if let Some(old) = old {
                        let _ = repo.reference(dst, old, true, "weft: restore after failed fetch");
                    }
                }
                result?;
                Err(self
                    .missing_ref(&BTreeMap::new())
                    .with_available(" (not found when fetching)"))
            }
        }
    }

    /// Fetch a commit by SHA: first all branches and tags (works with every server), then the
    /// SHA itself (servers that allow fetching any reachable commit).
    fn fetch_commit(
        &self,
        repo: &Repository,
        oid: Oid,
        stats: &mut TransferStats,
    ) -> Result<(), GitError> {
        self.run_fetch(
            repo,
            &[
                "+refs/heads/*:refs/remotes/origin/*".to_string(),
                "+refs/tags/*:refs/tags/*".to_string(),
            ],
            // Full history: the commit may be any ancestor of a branch or tag.
            false,
            stats,
        )?;
        if repo.find_commit(oid).is_ok() {
            return Ok(());
        }
        let direct = self.run_fetch(repo, &[format!("+{oid}:refs/weft/commit")], false, stats);
        if direct.is_ok() && repo.find_commit(oid).is_ok() {
            return Ok(());
        }
        Err(GitError::MissingRef {
            url: self.remote.display.clone(),
            reference: self.spec.reference.to_string(),
            available: " (no branch or tag of the remote contains it)".to_string(),
        })
    }

    /// One libgit2 fetch with our credentials and host-key check.
    fn run_fetch(
        &self,
        repo: &Repository,
        refspecs: &[String],
        allow_shallow: bool,
        stats: &mut TransferStats,
    ) -> Result<(), GitError> {
        let mut remote = repo
            .remote_anonymous(&self.remote.fetch_url)
            .map_err(|e| self.transport_error(&e, None))?;
        let auth = RefCell::new(AuthState::default());
        let mut options = FetchOptions::new();
        options.remote_callbacks(self.callbacks(&auth));
        options.download_tags(AutotagOption::None);
        options.update_fetchhead(false);
        // Shallow only into an empty cache: later fetches then send `have`s for what the cache
        // holds and receive just the new objects, and the history check below stays exact.
        let shallow = self.spec.shallow
            && allow_shallow
            && !self.remote.local
            && repo
                .references()
                .map(|mut r| r.next().is_none())
                .unwrap_or(false);
        if shallow {
            options.depth(1);
        }
        let header;
        if let Some(token) = &self.spec.credentials.bearer_token {
            header = format!("Authorization: Bearer {}", token.expose());
            options.custom_headers(&[header.as_str()]);
        }
        let specs: Vec<&str> = refspecs.iter().map(String::as_str).collect();
        let result = remote.fetch(&specs, Some(&mut options), None);
        let progress = remote.stats();
        stats.fetched = true;
        stats.shallow |= shallow;
        stats.received_objects += progress.received_objects();
        stats.received_bytes += progress.received_bytes();
        result.map_err(|e| self.transport_error(&e, Some(&auth)))
    }

    fn callbacks<'a>(&'a self, auth: &'a RefCell<AuthState>) -> RemoteCallbacks<'a> {
        let creds = &self.spec.credentials;
        let remote = &self.remote;
        let mut cb = RemoteCallbacks::new();
        // With a progress callback libgit2 also counts received bytes (see TransferStats).
        cb.transfer_progress(|_| true);
        cb.credentials(move |_url, username_from_url, allowed| {
            let mut state = auth.borrow_mut();
            let user = username_from_url
                .map(str::to_string)
                .or_else(|| remote.username.clone())
                .or_else(|| creds.username.clone());
            if allowed.contains(CredentialType::USERNAME) {
                return Cred::username(user.as_deref().unwrap_or("git"));
            }
            if allowed.contains(CredentialType::SSH_KEY) && !state.tried_ssh_key {
                state.tried_ssh_key = true;
                if let Some(key) = &creds.identity {
                    return Cred::ssh_key_from_memory(
                        user.as_deref().unwrap_or("git"),
                        None,
                        key.expose(),
                        None,
                    );
                }
            }
            let password = remote.password.as_ref().or(creds.password.as_ref());
            if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) && !state.tried_password {
                state.tried_password = true;
                if let (Some(u), Some(p)) = (user.as_deref(), password) {
                    return Cred::userpass_plaintext(u, p.expose());
                }
            }
            // Nothing (more) to offer: the server refused what we sent, or we have nothing.
            let message = if state.tried_ssh_key && creds.identity.is_some() {
                "the server refused the SSH key (identity)".to_string()
            } else if state.tried_password && password.is_some() {
                "the server refused the username/password".to_string()
            } else if allowed.contains(CredentialType::SSH_KEY) {
                "the server wants an SSH key and no identity is configured".to_string()
            } else if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
                if creds.bearer_token.is_some() {
                    "the server refused the bearer token".to_string()
                } else {
                    "the server wants a username and password and none are configured".to_string()
                }
            } else {
                "no supported authentication method".to_string()
            };
            state.failure = Some(message.clone());
            Err(git2::Error::from_str(&message))
        });
        cb.certificate_check(move |cert, host| {
            let Some(hostkey) = cert.as_hostkey() else {
                // TLS: libgit2's own verification against the system trust store.
                return Ok(CertificateCheckStatus::CertificatePassthrough);
            };
            let port = remote.port.unwrap_or(22);
            let fail = |message: String| {
                auth.borrow_mut().host_key_failure = Some((host.to_string(), message.clone()));
                Err(git2::Error::from_str(&format!("SSH host key of {host} not trusted: {message}")))
            };
            let known = match known_hosts_text(creds) {
                Ok(text) => text,
                Err(message) => return fail(message),
            };
            let known = match KnownHosts::parse(&known) {
                Ok(k) => k,
                Err(e) => return fail(e.to_string()),
            };
            let key_type = hostkey.hostkey_type().map(|t| t.name()).unwrap_or("unknown");
            match known.check(host, port, hostkey.hostkey(), hostkey.hash_sha256().map(|h| h.as_slice())) {
                HostKeyCheck::Trusted => Ok(CertificateCheckStatus::CertificateOk),
                HostKeyCheck::Revoked => fail(format!("its {key_type} key is marked @revoked in known_hosts")),
                HostKeyCheck::Mismatch => fail(format!(
                    "it presented a {key_type} key that does not match known_hosts (known key types: {}); possible man in the middle",
                    known.key_types_for(host, port).join(", ")
                )),
                HostKeyCheck::UnknownHost => fail(format!(
                    "no known_hosts entry for {}",
                    if port == 22 { host.to_string() } else { format!("[{host}]:{port}") }
                )),
            }
        });
        cb
    }

    /// Turn a libgit2 error into a [`GitError`], with every secret scrubbed.
    fn transport_error(&self, e: &git2::Error, auth: Option<&RefCell<AuthState>>) -> GitError {
        let url = self.remote.display.clone();
        let message = self
            .spec
            .credentials
            .scrub(e.message(), &self.remote.secrets());
        if let Some(auth) = auth {
            let state = auth.borrow();
            if let Some((host, message)) = &state.host_key_failure {
                return GitError::HostKey {
                    host: host.clone(),
                    message: message.clone(),
                };
            }
            if let Some(failure) = &state.failure {
                return GitError::Authentication {
                    url,
                    message: failure.clone(),
                };
            }
        }
        if e.code() == git2::ErrorCode::Auth
            || message.contains("status code: 401")
            || message.contains("status code: 403")
        {
            return GitError::Authentication { url, message };
        }
        match e.class() {
            // "failed to connect …: Connection refused" is an Os-class error.
            ErrorClass::Net
            | ErrorClass::Os
            | ErrorClass::Ssl
            | ErrorClass::Ssh
            | ErrorClass::Http => GitError::Unreachable { url, message },
            ErrorClass::Odb
            | ErrorClass::Zlib
            | ErrorClass::Indexer
            | ErrorClass::Object
            | ErrorClass::Repository => GitError::Cache {
                path: self.cache_path.clone(),
                message,
            },
            _ => GitError::Fetch { url, message },
        }
    }
}

impl GitError {
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

#[derive(Default)]
struct AuthState {
    tried_ssh_key: bool,
    tried_password: bool,
    failure: Option<String>,
    host_key_failure: Option<(String, String)>,
}

/// The known_hosts text to check SSH host keys against: the credentials', else the user's
/// `~/.ssh/known_hosts`. Without either, SSH is refused rather than trusting any key.
fn known_hosts_text(creds: &Credentials) -> Result<String, String> {
    if let Some(k) = &creds.known_hosts {
        return Ok(k.clone());
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match home.map(|h| h.join(".ssh/known_hosts")) {
        Some(p) if p.is_file() => {
            std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
        }
        _ => Err("no known_hosts configured (set the `known_hosts` credential)".to_string()),
    }
}

fn parse_oid(s: &str) -> Result<Oid, GitError> {
    Oid::from_str(s).map_err(|_| GitError::InvalidUrl {
        url: s.to_string(),
        reason: "not a commit SHA".to_string(),
    })
}

/// Delete lock files a crashed fetch left in the cache (`refs/…/x.lock`, `shallow.lock`,
/// `packed-refs.lock`, `config.lock`); libgit2 would otherwise refuse every later fetch. Safe
/// because the caller holds the cache's lock and a cache belongs to one process.
fn remove_stale_locks(cache: &Path) {
    let remove_if_lock = |path: &Path| {
        if path.extension().is_some_and(|e| e == "lock") {
            tracing::warn!(file = %path.display(), "git: removing a stale lock file from the cache");
            let _ = std::fs::remove_file(path);
        }
    };
    // The cache root (files only), then everything below refs/.
    for entry in std::fs::read_dir(cache).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            remove_if_lock(&entry.path());
        }
    }
    let mut pending = vec![cache.join("refs")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(entry.path());
            } else {
                remove_if_lock(&entry.path());
            }
        }
    }
}

/// The process-wide lock of one cache directory.
fn cache_lock(path: &Path) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    let locks = LOCKS.get_or_init(Default::default);
    let mut map = locks
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    map.entry(path.to_path_buf()).or_default().clone()
}

/// Set libgit2's global network timeouts once, so an unreachable server fails in seconds
/// instead of hanging a pass.
fn init_libgit2() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // SAFETY: these set process-global libgit2 options; `Once` makes this the only writer,
        // and it runs before this module starts any libgit2 network operation.
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(10_000);
            let _ = git2::opts::set_server_timeout_in_milliseconds(120_000);
        }
    });
}

/// A remote URL taken apart: what libgit2 gets, what humans see, and the secrets it carried.
#[derive(Clone, Debug)]
struct RemoteUrl {
    /// The URL handed to libgit2, without a password.
    fetch_url: String,
    /// For logs, errors and the cache key: password replaced by `***`.
    display: String,
    username: Option<String>,
    password: Option<SecretValue>,
    port: Option<u16>,
    /// `file://` or a path: libgit2's local transport, which cannot fetch shallow.
    local: bool,
}

impl RemoteUrl {
    fn parse(given: &str) -> Result<Self, GitError> {
        let invalid = |reason: &str| GitError::InvalidUrl {
            url: redact_url_passwords(given),
            reason: reason.to_string(),
        };
        if given.contains("://") {
            let mut url = url::Url::parse(given).map_err(|e| invalid(&e.to_string()))?;
            match url.scheme() {
                "http" | "https" | "ssh" | "git" | "file" => {}
                other => {
                    return Err(invalid(&format!(
                        "unsupported scheme `{other}` (use https, ssh, git or file)"
                    )))
                }
            }
            let username = (!url.username().is_empty()).then(|| percent_decode(url.username()));
            let password = url.password().map(|p| SecretValue::new(percent_decode(p)));
            let port = url.port();
            if password.is_some() {
                let _ = url.set_password(None);
            }
            let local = url.scheme() == "file";
            let fetch_url = url.to_string();
            let display = match &password {
                Some(_) => redact_url_passwords(given),
                None => fetch_url.clone(),
            };
            return Ok(RemoteUrl {
                fetch_url,
                display,
                username,
                password,
                port,
                local,
            });
        }
        if let Some(scp) = ScpUrl::parse(given) {
            return Ok(RemoteUrl {
                fetch_url: given.to_string(),
                display: given.to_string(),
                username: scp.user,
                password: None,
                port: scp.port,
                local: false,
            });
        }
        let path = Path::new(given);
        if path.is_absolute() || given.starts_with('.') {
            return Ok(RemoteUrl {
                fetch_url: given.to_string(),
                display: given.to_string(),
                username: None,
                password: None,
                port: None,
                local: true,
            });
        }
        Err(invalid(
            "expected https://, ssh://, git://, file://, user@host:path or a path",
        ))
    }

    fn secrets(&self) -> Vec<&SecretValue> {
        self.password.iter().collect()
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 3 <= bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// scp-style `[user@]host:path` or `[[user@]host:port]:path`.
struct ScpUrl {
    user: Option<String>,
    host: String,
    port: Option<u16>,
    path: String,
}

impl ScpUrl {
    fn parse(s: &str) -> Option<ScpUrl> {
        if s.contains("://") || s.starts_with('/') || s.starts_with('.') {
            return None;
        }
        let (authority, path, bracketed) = if let Some(rest) = s.strip_prefix('[') {
            let (inside, after) = rest.split_once(']')?;
            (inside, after.strip_prefix(':')?, true)
        } else {
            let (a, p) = s.split_once(':')?;
            (a, p, false)
        };
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, authority),
        };
        let (host, port) = match (bracketed, hostport.rsplit_once(':')) {
            (true, Some((h, p))) => (h, Some(p.parse().ok()?)),
            _ => (hostport, None),
        };
        if host.is_empty() || host.contains('/') || path.is_empty() {
            return None;
        }
        Some(ScpUrl {
            user,
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    fn format(&self) -> String {
        let user = self
            .user
            .as_deref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        match self.port {
            Some(p) => format!("[{user}{}:{p}]:{}", self.host, self.path),
            None => format!("{user}{}:{}", self.host, self.path),
        }
    }
}

/// Whether `repo` (a `--repo` value) names a git remote rather than a local directory:
/// a URL with a scheme, or scp-style `user@host:path` that is not an existing local path.
pub fn is_git_url(repo: &str) -> bool {
    if repo.contains("://") {
        return true;
    }
    ScpUrl::parse(repo).is_some() && !Path::new(repo).exists()
}

/// Why a relative `location` cannot be resolved.
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve git location `{location}` relative to `{base}`: {reason}")]
pub struct RelativeLocationError {
    location: String,
    base: String,
    reason: String,
}

/// Resolve a git `location` the way git resolves relative submodule URLs: a location starting
/// with `./` or `../` is taken relative to the config repository `base` (a URL, scp-style
/// address or local directory); `../charts.git` next to `https://h/org/config.git` is
/// `https://h/org/charts.git`. Any other location is returned unchanged.
pub fn resolve_relative_location(
    base: &str,
    location: &str,
) -> Result<String, RelativeLocationError> {
    if !(location.starts_with("./")
        || location.starts_with("../")
        || location == "."
        || location == "..")
    {
        return Ok(location.to_string());
    }
    let err = |reason: &str| RelativeLocationError {
        location: location.to_string(),
        base: redact_url_passwords(base),
        reason: reason.to_string(),
    };
    // Split the base into a fixed prefix (scheme + authority) and a path to edit.
    let (prefix, path, scp) = if let Some(idx) = base.find("://") {
        let after = &base[idx + 3..];
        let slash = after.find('/').unwrap_or(after.len());
        (
            base[..idx + 3 + slash].to_string(),
            after[slash..].to_string(),
            None,
        )
    } else if let Some(scp) = ScpUrl::parse(base).filter(|_| !Path::new(base).exists()) {
        (String::new(), scp.path.clone(), Some(scp))
    } else {
        (String::new(), base.to_string(), None)
    };
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    for part in location.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(err("too many `..`: it climbs above the root of the base"));
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    let path = if absolute {
        format!("/{joined}")
    } else {
        joined
    };
    Ok(match scp {
        Some(mut s) => {
            if path.is_empty() {
                return Err(err("no path left"));
            }
            s.path = path;
            s.format()
        }
        None if prefix.is_empty() && path.is_empty() => ".".to_string(),
        None => format!("{prefix}{path}"),
    })
}

/// Read the files of the tree at `commit` (below `path`, if given) into a snapshot, refusing
/// unsafe names, symlinks that leave the repository, and anything over `limits`.
pub fn read_tree_snapshot(
    repo: &Repository,
    commit: Oid,
    path: Option<&str>,
    limits: SnapshotLimits,
) -> Result<Snapshot, GitError> {
    let revision = commit.to_string();
    let read_err = |e: git2::Error| GitError::Read {
        revision: revision.clone(),
        message: e.message().to_string(),
    };
    let root = repo
        .find_commit(commit)
        .and_then(|c| c.tree())
        .map_err(read_err)?;
    let base: Vec<String> = path
        .map(|p| {
            p.split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let start = if base.is_empty() {
        root.clone()
    } else {
        let entry =
            root.get_path(Path::new(&base.join("/")))
                .map_err(|_| GitError::PathNotFound {
                    path: base.join("/"),
                    revision: revision.clone(),
                })?;
        if entry.kind() != Some(ObjectType::Tree) {
            return Err(GitError::PathNotADirectory {
                path: base.join("/"),
                revision: revision.clone(),
            });
        }
        repo.find_tree(entry.id()).map_err(read_err)?
    };
    let odb = repo.odb().map_err(read_err)?;
    let mut reader = TreeReader {
        repo,
        odb,
        root: &root,
        revision: &revision,
        limits,
        total: 0,
        snapshot: Snapshot {
            revision: Some(revision.clone()),
            files: BTreeMap::new(),
        },
    };
    // Depth-first over (repo-relative dir, snapshot-relative dir, tree).
    let mut pending = vec![(base.clone(), Vec::<String>::new(), start)];
    while let Some((repo_dir, rel_dir, tree)) = pending.pop() {
        for entry in tree.iter() {
            let name = String::from_utf8_lossy(entry.name_bytes()).into_owned();
            let repo_path = join(&repo_dir, &name);
            check_entry_name(&name).map_err(|reason| GitError::UnsafePath {
                path: repo_path.clone(),
                revision: revision.clone(),
                reason,
            })?;
            if name.starts_with('.') {
                // Like a local directory: dot-files and dot-directories (.git, .github) are not config.
                continue;
            }
            let mut child_repo = repo_dir.clone();
            child_repo.push(name.clone());
            let mut child_rel = rel_dir.clone();
            child_rel.push(name.clone());
            match entry.filemode() {
                0o040000 => {
                    let sub = repo.find_tree(entry.id()).map_err(read_err)?;
                    pending.push((child_repo, child_rel, sub));
                }
                0o120000 => {
                    if let Some(blob) = reader.resolve_symlink(&child_repo, entry.id())? {
                        reader.add_file(&child_repo, child_rel.join("/"), blob)?;
                    }
                }
                0o160000 => {
                    tracing::debug!(path = %repo_path, "git: skipping submodule");
                }
                _ => reader.add_file(&child_repo, child_rel.join("/"), entry.id())?,
            }
        }
    }
    Ok(reader.snapshot)
}

fn join(dir: &[String], name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{}/{name}", dir.join("/"))
    }
}

/// A tree entry name must be one path component (a crafted tree object can hold anything).
fn check_entry_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty file name".to_string());
    }
    if name == ".." || name == "." {
        return Err(format!(
            "path component `{name}` (`..` and `.` would leave or alias the directory)"
        ));
    }
    if name.contains('/') || name.contains('\\') || name.contains('\0') {
        return Err("file name contains a path separator".to_string());
    }
    Ok(())
}

struct TreeReader<'r> {
    repo: &'r Repository,
    odb: git2::Odb<'r>,
    root: &'r git2::Tree<'r>,
    revision: &'r str,
    limits: SnapshotLimits,
    total: u64,
    snapshot: Snapshot,
}

impl TreeReader<'_> {
    fn read_err(&self, e: git2::Error) -> GitError {
        GitError::Read {
            revision: self.revision.to_string(),
            message: e.message().to_string(),
        }
    }

    fn add_file(&mut self, repo_path: &[String], rel: String, blob: Oid) -> Result<(), GitError> {
        let path = repo_path.join("/");
        let (size, _) = self.odb.read_header(blob).map_err(|e| self.read_err(e))?;
        let size = size as u64;
        if size > self.limits.max_file_bytes {
            return Err(GitError::FileTooLarge {
                path,
                size,
                limit: self.limits.max_file_bytes,
                revision: self.revision.to_string(),
            });
        }
        if self.snapshot.files.len() >= self.limits.max_files {
            return Err(GitError::TooManyFiles {
                limit: self.limits.max_files,
                revision: self.revision.to_string(),
            });
        }
        self.total += size;
        if self.total > self.limits.max_total_bytes {
            return Err(GitError::TooLarge {
                limit: self.limits.max_total_bytes,
                revision: self.revision.to_string(),
            });
        }
        let content = self
            .repo
            .find_blob(blob)
            .map_err(|e| self.read_err(e))?
            .content()
            .to_vec();
        self.snapshot.files.insert(rel, content);
        Ok(())
    }

    /// Follow a symlink (and symlink chains) inside the commit's tree. Returns the blob it
    /// points to, or `None` for a link to a directory (read through its real path, as for a
    /// local directory).
    fn resolve_symlink(
        &self,
        link_path: &[String],
        link_blob: Oid,
    ) -> Result<Option<Oid>, GitError> {
        let mut current_path = link_path.to_vec();
        let mut current_blob = link_blob;
        for _ in 0..16 {
            let target_blob = self
                .repo
                .find_blob(current_blob)
                .map_err(|e| self.read_err(e))?;
            let target = String::from_utf8_lossy(target_blob.content()).into_owned();
            let shown = current_path.join("/");
            let escapes = || GitError::SymlinkEscapes {
                path: shown.clone(),
                target: target.clone(),
                revision: self.revision.to_string(),
            };
            if target.starts_with('/') || target.contains('\\') {
                return Err(escapes());
            }
            let mut resolved: Vec<String> =
                current_path[..current_path.len().saturating_sub(1)].to_vec();
            for part in target.split('/') {
                match part {
                    "" | "." => {}
                    ".." => {
                        if resolved.pop().is_none() {
                            return Err(escapes());
                        }
                    }
                    p => resolved.push(p.to_string()),
                }
            }
            if resolved.is_empty() {
                return Ok(None);
            }
            let entry = self
                .root
                .get_path(Path::new(&resolved.join("/")))
                .map_err(|_| GitError::DanglingSymlink {
                    path: shown.clone(),
                    target: target.clone(),
                    revision: self.revision.to_string(),
                })?;
            match entry.filemode() {
                0o040000 => return Ok(None),
                0o120000 => {
                    current_path = resolved;
                    current_blob = entry.id();
                }
                0o160000 => return Ok(None),
                _ => return Ok(Some(entry.id())),
            }
        }
        Err(GitError::UnsafePath {
            path: link_path.join("/"),
            revision: self.revision.to_string(),
            reason: "symlink chain longer than 16 links".to_string(),
        })
    }
}

/// One fetch for the CLI (`weft render --repo URL [--ref REF] [--path DIR]`): the snapshot of
/// `reference` (default branch `main`), cached under [`default_cache_dir`].
pub fn fetch_snapshot(
    url: &str,
    reference: Option<&str>,
    path: Option<&str>,
    credentials: Credentials,
) -> Result<Snapshot, GitError> {
    let mut spec = GitSourceSpec::new(url, default_cache_dir());
    if let Some(r) = reference {
        spec.reference = GitRef::parse(r);
    }
    spec.path = path.map(str::to_string);
    spec.credentials = credentials;
    let mut source = GitSource::new(spec)?;
    match source.fetch()? {
        FetchOutcome::New(snapshot) => Ok(snapshot),
        // A new source has no last good snapshot, so this is not expected; answer it anyway.
        FetchOutcome::Unchanged => source.last_good().cloned().ok_or_else(|| GitError::Fetch {
            url: source.display_url().to_string(),
            message: "no snapshot was read".to_string(),
        }),
    }
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
    }

    #[test]
    fn url_passwords_are_removed_before_libgit2_sees_them() {
        let u = RemoteUrl::parse("https://bob:s%40cret@example.com/org/repo.git").unwrap();
        assert_eq!(u.fetch_url, "https://bob@example.com/org/repo.git");
        assert_eq!(u.display, "https://bob:***@example.com/org/repo.git");
        assert_eq!(u.password.unwrap().expose(), "s@cret");
        assert_eq!(u.username.as_deref(), Some("bob"));
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

    #[test]
    fn scp_style_urls() {
        let s = ScpUrl::parse("git@github.com:org/repo.git").unwrap();
        assert_eq!(
            (s.user.as_deref(), s.host.as_str(), s.port, s.path.as_str()),
            (Some("git"), "github.com", None, "org/repo.git")
        );
        let s = ScpUrl::parse("[git@127.0.0.1:2222]:/srv/repo.git").unwrap();
        assert_eq!(
            (s.user.as_deref(), s.host.as_str(), s.port, s.path.as_str()),
            (Some("git"), "127.0.0.1", Some(2222), "/srv/repo.git")
        );
        assert_eq!(s.format(), "[git@127.0.0.1:2222]:/srv/repo.git");
        assert!(ScpUrl::parse("/abs/path").is_none());
        assert!(ScpUrl::parse("./rel:x").is_none());
        assert!(is_git_url("git@h:x.git"));
        assert!(is_git_url("file:///tmp/x"));
        assert!(!is_git_url("examples-repo"));
    }

    #[test]
    fn unsupported_scheme_is_a_clear_error() {
        let err = RemoteUrl::parse("ftp://u:pw@h/x").unwrap_err().to_string();
        assert!(err.contains("unsupported scheme `ftp`"), "{err}");
        assert!(!err.contains("pw@"), "{err}");
    }

    #[test]
    fn relative_locations_resolve_like_submodule_urls() {
        let r = |b, l| resolve_relative_location(b, l).unwrap();
        assert_eq!(
            r("https://h/org/config.git", "../charts.git"),
            "https://h/org/charts.git"
        );
        assert_eq!(
            r("https://h/org/config.git/", "../charts.git"),
            "https://h/org/charts.git"
        );
        assert_eq!(
            r("https://h/org/config.git", "./sub"),
            "https://h/org/config.git/sub"
        );
        assert_eq!(
            r("ssh://git@h:2222/org/config.git", "../../other/c.git"),
            "ssh://git@h:2222/other/c.git"
        );
        assert_eq!(
            r("git@h:org/config.git", "../charts.git"),
            "git@h:org/charts.git"
        );
        assert_eq!(
            r("[git@h:2222]:/srv/config.git", "../charts.git"),
            "[git@h:2222]:/srv/charts.git"
        );
        assert_eq!(r("/srv/git/config", "../charts"), "/srv/git/charts");
        assert_eq!(r("examples-repo", "../charts"), "charts");
        assert_eq!(r("work/config", "../charts"), "work/charts");
        assert_eq!(
            r("https://h/org/config.git", "https://other/x.git"),
            "https://other/x.git"
        );
        let err = resolve_relative_location("https://h/config.git", "../../x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("too many `..`"), "{err}");
    }

    #[test]
    fn entry_names_are_checked() {
        assert!(check_entry_name("ok.yaml").is_ok());
        assert!(check_entry_name("..").unwrap_err().contains("`..`"));
        assert!(check_entry_name("a/b").is_err());
    }
}
