//! Where a root's documents come from ([`RootSource`]: a git repository fetched incrementally,
//! or a local directory read on every pass), and the errors of fetching it.
//!
//! The fetch first asks the remote for its head (cheap: no objects transferred) and says
//! whether the revision is another than the one fetched last.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::conditions::{Condition, ConditionStatus};
use crate::daemon::early::{self, PreviousFiles};
use crate::source::git::auth::Credentials;
use crate::source::git::{self, FetchOutcome, GitError, GitRef, GitSource, GitSourceSpec};
use crate::source::{self, Snapshot, SnapshotLimits};

/// Why a stage of a pass failed (shown in the pass report and the log).
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("fetching {url}: {source}")]
    Fetch {
        url: String,
        #[source]
        source: GitError,
    },
    #[error("reading {dir}: {source}")]
    Read {
        dir: String,
        #[source]
        source: source::local::LocalError,
    },
    #[error("fetching {url}: the repository gave no revision")]
    NoRevision { url: String },
    /// The blocking fetch or read task panicked.
    #[error("reading the repository: the task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    #[error(transparent)]
    Prepare(#[from] crate::pass::PassError),
}

/// What a root's memory keeps of the snapshot it fetched last: a git source's revision (the
/// source reads the files again from its cache when a pass needs them, so no root's files are
/// held between its passes), or a directory's files (compared with the directory's next time).
#[derive(Clone, Debug)]
pub enum LastFetched {
    Revision(String),
    Files(Arc<Snapshot>),
}

/// What [`RootSource::fetch`] gives: the snapshot to pass, and whether it is another than the
/// one fetched last.
pub struct Fetched {
    pub snapshot: Arc<Snapshot>,
    pub new: bool,
}

/// Why the repository cannot be followed at all.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the repository: {0}")]
    Git(#[source] GitError),
    #[error("the repository: `{0}` is neither a git URL nor a directory")]
    NotFound(String),
}

/// The root condition that says whether the repository can be fetched.
pub const SOURCE_READY: &str = "SourceReady";

/// The flag root's `SourceReady` condition after a fetch (`failed`: why it failed, if it did):
/// shown in the daemon's status, and by `/readyz` while false.
pub fn source_condition(failed: Option<&RootError>) -> Condition {
    match failed {
        None => Condition {
            type_: SOURCE_READY.into(),
            status: ConditionStatus::True,
            reason: "Fetched".into(),
            message: "the repository was fetched".into(),
            ..Default::default()
        },
        Some(e) => Condition {
            type_: SOURCE_READY.into(),
            status: ConditionStatus::False,
            reason: match e {
                RootError::Fetch {
                    source: GitError::Timeout { .. },
                    ..
                } => "FetchTimeout".into(),
                _ => "FetchFailed".into(),
            },
            message: format!("{e}; the last good revision stays applied"),
            ..Default::default()
        },
    }
}

/// Where the sync root's documents come from. Clones share the git source (and its cache).
#[derive(Clone)]
pub enum RootSource {
    /// A git repository (fetched incrementally into a cache), its URL as shown (passwords
    /// redacted) and its fetch deadline: both readable while a fetch holds the source.
    Git {
        source: Arc<Mutex<GitSource>>,
        url: String,
        timeout: Duration,
    },
    /// A local directory (development): read on every pass.
    Dir { dir: PathBuf, path: Option<String> },
}

impl RootSource {
    /// Follow `repo` (a git URL, or a local directory) at `git_ref` (default: the remote's
    /// HEAD, as `git clone`), under `path`; git repositories are cached in `cache_dir`.
    pub fn open(
        repo: &str,
        git_ref: Option<&str>,
        path: Option<&str>,
        cache_dir: Option<PathBuf>,
        credentials: Credentials,
        fetch_timeout: Duration,
    ) -> Result<RootSource, OpenError> {
        if git::is_git_url(repo) {
            let cache_dir = cache_dir.unwrap_or_else(git::default_cache_dir);
            let mut spec = GitSourceSpec::new(repo.to_string(), cache_dir);
            if let Some(r) = git_ref {
                spec.reference = GitRef::parse(r);
            }
            spec.path = path.map(str::to_string);
            spec.credentials = credentials;
            spec.fetch_timeout = fetch_timeout;
            let timeout = spec.fetch_timeout;
            let source = GitSource::new(spec).map_err(OpenError::Git)?;
            Ok(RootSource::Git {
                url: source.display_url().to_string(),
                source: Arc::new(Mutex::new(source)),
                timeout,
            })
        } else {
            let dir = PathBuf::from(repo);
            if !dir.is_dir() {
                return Err(OpenError::NotFound(repo.to_string()));
            }
            Ok(RootSource::Dir {
                dir,
                path: path.map(str::to_string),
            })
        }
    }

    /// Whether the repository is a local directory (no git, so no branch).
    pub fn is_directory(&self) -> bool {
        matches!(self, RootSource::Dir { .. })
    }

    /// The branch the remote's HEAD points to, for the webhooks' branch filter of a root that
    /// follows the remote's HEAD (no `--ref`); `None` when it cannot be told (a local directory,
    /// a detached HEAD, a remote that cannot be reached now): then every branch push triggers.
    pub async fn default_branch(&self) -> Option<String> {
        let RootSource::Git {
            source, timeout, ..
        } = self
        else {
            return None;
        };
        let source = source.clone();
        let asking = tokio::task::spawn_blocking(move || {
            let g = source
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            g.remote_default_branch()
        });
        match tokio::time::timeout(*timeout, asking).await {
            Ok(Ok(Ok(branch))) => branch,
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %e, "cannot tell the remote's default branch; webhooks for every branch trigger a pass");
                None
            }
            _ => None,
        }
    }

    /// The remote's tags; an error for a local directory, or when the remote cannot be listed.
    pub async fn remote_tags(&self) -> Result<Vec<String>, String> {
        let RootSource::Git {
            source, timeout, ..
        } = self
        else {
            return Err("a local directory has no tags to choose from".into());
        };
        let source = source.clone();
        let listing = tokio::task::spawn_blocking(move || {
            let g = source
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            g.remote_tags()
        });
        match tokio::time::timeout(*timeout, listing).await {
            Ok(Ok(Ok(tags))) => Ok(tags),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(e)) => Err(format!("listing the tags failed: {e}")),
            Err(_) => Err(format!(
                "listing the tags took longer than {}s",
                timeout.as_secs()
            )),
        }
    }

    /// The repository as shown in status and logs (passwords redacted).
    pub fn display(&self) -> String {
        match self {
            RootSource::Git { url, .. } => url.clone(),
            RootSource::Dir { dir, .. } => dir.display().to_string(),
        }
    }

    /// Fetch: the snapshot to pass, and whether it is another than `last` (what the root's
    /// memory kept of the one fetched before). An unchanged git head is read again from the
    /// source's cache unless a pass still holds it, or `keeps_render` (the root keeps a render
    /// of `last` that the pass applies again): then its files are not read, and the snapshot
    /// names the revision with no files. The remote's refs are as of `since` or later: a
    /// listing of the same remote and credentials that started since may be taken
    /// (`GitSource::fetch_since`).
    pub(crate) async fn fetch(
        &self,
        last: Option<&LastFetched>,
        since: Instant,
        keeps_render: bool,
    ) -> Result<Fetched, RootError> {
        match self {
            RootSource::Git {
                source: g,
                url,
                timeout,
            } => {
                let (g, timeout) = (g.clone(), *timeout);
                let rendered_revision = match last {
                    Some(LastFetched::Revision(r)) if keeps_render => Some(r.clone()),
                    _ => None,
                };
                let fetching = tokio::task::spawn_blocking(move || {
                    // A fetch still stuck in a server that never ends its answer holds the
                    // source: this pass fails at once instead of queueing behind it.
                    let mut g = match g.try_lock() {
                        Ok(g) => g,
                        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                        Err(std::sync::TryLockError::WouldBlock) => return None,
                    };
                    let url = g.display_url().to_string();
                    let outcome = match g.fetch_since(since) {
                        Ok(FetchOutcome::New(s)) => Ok(Some((s, true))),
                        // Unchanged since the source's last good snapshot; if we never rendered
                        // it (e.g. the previous render failed and was fixed nowhere), it is new.
                        Ok(FetchOutcome::Unchanged) => match rendered_revision {
                            Some(r) if g.last_good_revision().as_deref() == Some(r.as_str()) => {
                                tracing::debug!(url = %url, revision = %r, "the head is unchanged and the root keeps its render: its files are not read again");
                                let named = Snapshot {
                                    revision: Some(r),
                                    files: Default::default(),
                                };
                                Ok(Some((Arc::new(named), false)))
                            }
                            _ => g.read_last_good().map(|s| s.map(|s| (s, false))),
                        },
                        Err(e) => Err(e),
                    };
                    Some((url, outcome))
                });
                // libgit2 honours the deadline while data flows and cuts a silent server; this
                // bounds what it cannot see (a ref advertisement that never ends).
                let overrun = || RootError::Fetch {
                    url: url.clone(),
                    source: GitError::Timeout {
                        url: url.clone(),
                        timeout,
                    },
                };
                let (url, outcome) =
                    match tokio::time::timeout(timeout + Duration::from_secs(5), fetching).await {
                        Ok(joined) => match joined.map_err(RootError::Task)? {
                            Some(done) => done,
                            None => return Err(overrun()),
                        },
                        Err(_) => return Err(overrun()),
                    };
                match outcome {
                    Ok(Some((snapshot, fetched))) => {
                        let rendered = matches!(last, Some(LastFetched::Revision(r))
                            if snapshot.revision.as_ref() == Some(r));
                        Ok(Fetched {
                            new: fetched || !rendered,
                            snapshot,
                        })
                    }
                    Ok(None) => Err(RootError::NoRevision { url }),
                    Err(source) => Err(RootError::Fetch { url, source }),
                }
            }
            RootSource::Dir { dir, path } => {
                let dir = dir.clone();
                let path = path.clone();
                let read = tokio::task::spawn_blocking(move || {
                    source::local::read_dir_at(&dir, path.as_deref(), SnapshotLimits::default())
                        .map_err(|source| RootError::Read {
                            dir: dir.display().to_string(),
                            source,
                        })
                })
                .await
                .map_err(RootError::Task)??;
                match last {
                    Some(LastFetched::Files(l)) if **l == read => Ok(Fetched {
                        snapshot: Arc::clone(l),
                        new: false,
                    }),
                    _ => Ok(Fetched {
                        snapshot: Arc::new(read),
                        new: true,
                    }),
                }
            }
        }
    }

    /// What a root's memory keeps of `snapshot`, fetched from this source.
    pub(crate) fn remember(&self, snapshot: &Arc<Snapshot>) -> LastFetched {
        match (self, &snapshot.revision) {
            (RootSource::Git { .. }, Some(revision)) => LastFetched::Revision(revision.clone()),
            _ => LastFetched::Files(Arc::clone(snapshot)),
        }
    }

    /// What changed since the snapshot `last` names, for the early apply of a push that
    /// brought `next`: a git source compares the two commits' trees (no file of the previous
    /// revision is read again), a directory's previous files are compared with the new ones.
    /// `None`, said in the log, when it cannot be told.
    pub(crate) async fn changes(
        &self,
        last: &LastFetched,
        next: &Snapshot,
    ) -> Option<PreviousFiles> {
        let (source, old, new) = match (self, last, &next.revision) {
            (_, LastFetched::Files(files), _) => {
                return Some(PreviousFiles::Snapshot(Arc::clone(files)))
            }
            (RootSource::Git { source, .. }, LastFetched::Revision(old), Some(new)) => {
                (source.clone(), old.clone(), new.clone())
            }
            _ => return None,
        };
        let comparing = tokio::task::spawn_blocking(move || {
            let g = source
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            g.changed_files(&old, &new, early::MAX_FILES)
                .inspect_err(|e| {
                    tracing::warn!(url = %g.display_url(), revision = %old, error = %e,
                        "cannot compare the previous revision with the new one; the push is applied by the full pass only")
                })
                .ok()
        });
        comparing.await.ok().flatten().map(PreviousFiles::Changed)
    }
}
