//! [`GitSource`]: one repository URL and ref, kept in a bare cache repository on disk, fetched
//! incrementally, with the last good snapshot remembered across fetches (and restarts, through a
//! ref in the cache).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once, OnceLock, Weak};
use std::time::{Duration, Instant};

use git2::{
    AutotagOption, Direction, ErrorClass, FetchOptions, Oid, Remote, RemoteRedirect, Repository,
};
use sha2::{Digest, Sha256};

use super::auth::{remote_callbacks, AuthState};
use super::tree::read_tree_snapshot;
use super::url::RemoteUrl;
use super::{
    FetchOutcome, GitError, GitRef, GitSourceSpec, HistoryRewrite, Redirects, TransferStats,
};
use crate::source::fetch_policy::clip;
use crate::source::Snapshot;

mod commits;
mod head;
mod listing;
mod local;
mod locks;

pub use commits::ChangedFiles;
use locks::{cache_lock, remove_stale_locks};

/// A git repository as a source of snapshots. Keep one per URL/ref; it remembers the last good
/// snapshot across fetches. Processes may share a `cache_dir`: the fetches of one cache take turns
/// (an in-process lock and a file lock, `<cache>.git.lock`).
pub struct GitSource {
    spec: GitSourceSpec,
    remote: RemoteUrl,
    cache_path: PathBuf,
    last_good_ref: String,
    /// Shared with whoever renders it, not held: once nobody uses the snapshot its files are
    /// let go, and [`GitSource::read_last_good`] reads them again from the repository (a daemon
    /// does not keep a root's files between its passes).
    last_good: Weak<Snapshot>,
    last_good_oid: Option<Oid>,
    last_transfer: TransferStats,
    /// When the running fetch must be over (see [`GitSourceSpec::fetch_timeout`]).
    deadline: Deadline,
    /// When the running fetch was asked for (before it waited for the cache's lock): a ref
    /// listing of the same remote that started since may be taken (`listing`).
    asked: Option<Instant>,
}

/// A deadline shared by the libgit2 callbacks of one fetch (an atomic, so the source stays
/// `Sync`).
#[derive(Debug, Default)]
struct Deadline(std::sync::atomic::AtomicU64);

impl Deadline {
    fn origin() -> Instant {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        *ORIGIN.get_or_init(Instant::now)
    }

    /// The deadline is `timeout` from now.
    fn start(&self, timeout: Duration) {
        let at = (Instant::now() + timeout).saturating_duration_since(Self::origin());
        let ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
        self.0.store(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// When the deadline is, if one was started.
    fn instant(&self) -> Option<Instant> {
        let ms = self.0.load(std::sync::atomic::Ordering::SeqCst);
        (ms != 0).then(|| Self::origin() + Duration::from_millis(ms))
    }

    /// Whether the deadline has passed.
    fn passed(&self) -> bool {
        let ms = self.0.load(std::sync::atomic::Ordering::SeqCst);
        ms != 0 && Self::origin().elapsed().as_millis() >= u128::from(ms)
    }
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
        init_libgit2(spec.fetch_timeout);
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
            last_good: Weak::new(),
            last_good_oid: None,
            last_transfer: TransferStats::default(),
            deadline: Deadline::default(),
            asked: None,
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
        self.deadline.start(self.spec.fetch_timeout);
        if self.lists_by_fetching() {
            let lock = cache_lock(&self.cache_path);
            let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let _across = self.lock_across_processes()?;
            let repo = self.open_cache()?;
            let (oid, _) = self.fetch_named_ref(&repo, &mut TransferStats::default())?;
            return Ok(oid);
        }
        let heads = self.list_remote()?;
        self.resolve_listed(&heads).map(|(oid, _)| oid)
    }

    /// Whether the remote's refs are learnt by a fetch rather than a ref listing: libgit2 sends
    /// custom headers (a bearer token) and honours a redirect policy only when it fetches; a
    /// listing follows any redirect of its first request.
    fn lists_by_fetching(&self) -> bool {
        self.spec.credentials.bearer_token.is_some() || self.spec.redirects == Redirects::SameHost
    }

    /// Fetch the configured ref and read its snapshot. Returns [`FetchOutcome::Unchanged`] when
    /// the remote still has the last good commit. On any error the last good snapshot stays.
    pub fn fetch(&mut self) -> Result<FetchOutcome, GitError> {
        self.fetch_since(Instant::now())
    }

    /// [`Self::fetch`] for a caller that knew it must fetch since `asked` (a request to pass, seen
    /// at that instant): a listing of the same remote with the same credentials that started
    /// since is as fresh as the request needs, and is taken instead of a new one.
    pub fn fetch_since(&mut self, asked: Instant) -> Result<FetchOutcome, GitError> {
        let started = Instant::now();
        self.asked = Some(asked.min(started));
        self.deadline.start(self.spec.fetch_timeout);
        self.last_transfer = TransferStats::default();
        // Sources of the same URL share a cache: one fetch at a time per cache, so that one never
        // sees another's lock files (or deletes a cache another is reading) as damage.
        let lock = cache_lock(&self.cache_path);
        let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // And one process at a time (`weft sync` beside `weft run` on one cache directory): only
        // the holder may take another's leftover lock files for stale.
        let _across = self.lock_across_processes()?;
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
            // Only a source that has served a snapshot has one to keep (a one-shot command's
            // source never has: it reports the error itself).
            Err(e) if self.last_good_oid.is_some() => {
                tracing::warn!(url = %self.remote.display, error = %e, "git fetch failed; keeping the last good snapshot")
            }
            Err(e) => {
                tracing::debug!(url = %self.remote.display, error = %e, "git fetch failed; no snapshot was read yet")
            }
        }
        result
    }

    fn fetch_once(&mut self) -> Result<FetchOutcome, GitError> {
        if self.remote.local {
            // Read in place, each blob's size checked before it is read (`cache::local`).
            return self.read_local();
        }
        let repo = self.open_cache()?;
        let mut stats = TransferStats::default();
        // 1. Which commit does the remote want us at? (ls-remote: refs only, no objects)
        let (oid, branch_ref) = match &self.spec.reference {
            GitRef::Commit(c) => (parse_oid(c)?, None),
            _ if self.lists_by_fetching() => self.fetch_named_ref(&repo, &mut stats)?,
            _ => {
                let heads = self.list_remote_since(self.asked.unwrap_or_else(Instant::now))?;
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
            self.check_history(repo, old, oid, branch)?;
        }
        // 4. Read the files from the tree at that commit.
        let snapshot = Arc::new(read_tree_snapshot(
            repo,
            oid,
            self.spec.path.as_deref(),
            self.spec.limits,
            self.deadline.instant(),
        )?);
        if let Err(e) = repo.reference(&self.last_good_ref, oid, true, "weft: last good snapshot") {
            return Err(self.cache_error(&e));
        }
        self.keep_last_good(oid, &snapshot);
        Ok(FetchOutcome::New(snapshot))
    }

    /// Take the cache's file lock (`<cache>.lock`, an `flock` held until the returned file is
    /// dropped, released by the kernel if the process dies), waiting at most the fetch's
    /// deadline for another process that holds it.
    /// The force-push check: the new tip `oid` of `branch` must contain `old`, the last good
    /// commit, unless the spec follows rewritten history (then a warning says so).
    fn check_history(
        &self,
        repo: &Repository,
        old: Oid,
        oid: Oid,
        branch: &str,
    ) -> Result<(), GitError> {
        let contains = oid == old || repo.graph_descendant_of(oid, old).unwrap_or(false);
        if contains {
            return Ok(());
        }
        match self.spec.on_history_rewrite {
            HistoryRewrite::Refuse => Err(GitError::HistoryRewritten {
                url: self.remote.display.clone(),
                reference: branch.to_string(),
                old: old.to_string(),
                new: oid.to_string(),
            }),
            HistoryRewrite::Follow => {
                tracing::warn!(url = %self.remote.display, branch = %branch,
                old = %old, new = %oid, "git: branch history was rewritten (force-push); following the new tip");
                Ok(())
            }
        }
    }

    fn lock_across_processes(&self) -> Result<std::fs::File, GitError> {
        let path = self.cache_path.with_extension("git.lock");
        let cache_error = |message: String| GitError::Cache {
            path: path.clone(),
            message,
        };
        std::fs::create_dir_all(&self.spec.cache_dir)
            .map_err(|e| cache_error(format!("cannot create the cache directory: {e}")))?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| cache_error(format!("cannot open the cache's lock file: {e}")))?;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(std::fs::TryLockError::WouldBlock) if !self.deadline.passed() => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(GitError::Timeout {
                        url: self.remote.display.clone(),
                        timeout: self.spec.fetch_timeout,
                    })
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(cache_error(format!("cannot lock the cache: {e}")))
                }
            }
        }
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
        let message = self
            .spec
            .credentials
            .scrub(e.message(), &self.remote.secrets());
        let path = self.cache_path.clone();
        if super::is_no_space(&message) {
            return GitError::NoSpace { path, message };
        }
        GitError::Cache { path, message }
    }

    /// Connect to the remote for fetching (credentials, host keys and the deadline as a fetch
    /// has them) and hand the connection to `read`: what `ls-remote`-like reads share.
    fn with_connection<T>(
        &self,
        read: impl FnOnce(
            &git2::RemoteConnection<'_, '_, '_>,
            &RefCell<AuthState>,
        ) -> Result<T, GitError>,
    ) -> Result<T, GitError> {
        let mut remote = Remote::create_detached(self.remote.fetch_url.as_str())
            .map_err(|e| self.transport_error(&e, None))?;
        let auth = RefCell::new(AuthState::default());
        let mut callbacks = remote_callbacks(&self.spec.credentials, &self.remote, &auth);
        self.bounded(&mut callbacks);
        let connection = remote
            .connect_auth(Direction::Fetch, Some(callbacks), None)
            .map_err(|e| self.transport_error(&e, Some(&auth)))?;
        read(&connection, &auth)
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
            // The server resolves its symbolic HEAD for the fetch, as for `git clone`; `main`
            // when HEAD is unborn (not advertised), as the listing does.
            GitRef::Head => vec![
                (
                    "HEAD".to_string(),
                    "refs/remotes/origin/HEAD".to_string(),
                    true,
                ),
                (
                    "refs/heads/main".to_string(),
                    "refs/remotes/origin/main".to_string(),
                    true,
                ),
            ],
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
        if self.spec.redirects == Redirects::SameHost {
            super::redirect::refuse_a_redirect(
                &self.remote.fetch_url,
                &self.remote.display,
                self.spec.fetch_timeout,
            )?;
        }
        let mut remote = repo
            .remote_anonymous(&self.remote.fetch_url)
            .map_err(|e| self.transport_error(&e, None))?;
        let auth = RefCell::new(AuthState::default());
        let mut options = FetchOptions::new();
        let mut callbacks = remote_callbacks(&self.spec.credentials, &self.remote, &auth);
        self.bounded(&mut callbacks);
        options.remote_callbacks(callbacks);
        options.download_tags(AutotagOption::None);
        options.update_fetchhead(false);
        if self.spec.redirects == Redirects::SameHost {
            options.follow_redirects(RemoteRedirect::None);
        }
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

    /// Make libgit2 give up once the fetch's deadline has passed: its progress callbacks run
    /// while data arrives (a trickle included); a silent server is cut by the read timeout set in
    /// [`init_libgit2`].
    fn bounded<'a>(&'a self, callbacks: &mut git2::RemoteCallbacks<'a>) {
        let deadline = &self.deadline;
        callbacks.transfer_progress(move |_| !deadline.passed());
        callbacks.sideband_progress(move |_| !deadline.passed());
    }

    /// Turn a libgit2 error into a [`GitError`], with every secret scrubbed.
    fn transport_error(&self, e: &git2::Error, auth: Option<&RefCell<AuthState>>) -> GitError {
        let url = self.remote.display.clone();
        if self.deadline.passed() {
            return GitError::Timeout {
                url,
                timeout: self.spec.fetch_timeout,
            };
        }
        if super::is_no_space(e.message()) {
            return self.cache_error(e);
        }
        // The text may quote what the server said (a redirect's target, say): bounded.
        let message = clip(
            &self
                .spec
                .credentials
                .scrub(e.message(), &self.remote.secrets()),
            500,
        );
        if self.spec.redirects == Redirects::SameHost && message.contains("cannot redirect from") {
            return GitError::RedirectRefused { url, message };
        }
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

fn parse_oid(s: &str) -> Result<Oid, GitError> {
    Oid::from_str(s).map_err(|_| GitError::InvalidUrl {
        url: s.to_string(),
        reason: "not a commit SHA".to_string(),
    })
}

/// Set libgit2's global network timeouts once, so an unreachable server fails in seconds
/// instead of hanging a pass, and a server that goes silent fails within `fetch_timeout` (at
/// most 120 s per read; the first source's timeout sets it for the process, which has one
/// `--fetch-timeout`).
fn init_libgit2(fetch_timeout: Duration) {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let read = fetch_timeout.min(Duration::from_secs(120));
        let read_ms = i32::try_from(read.as_millis()).unwrap_or(120_000).max(1);
        // SAFETY: these set process-global libgit2 options; `Once` makes this the only writer,
        // and it runs before this module starts any libgit2 network operation.
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(10_000.min(read_ms));
            let _ = git2::opts::set_server_timeout_in_milliseconds(read_ms);
        }
    });
}
