//! The commits a source fetched, read again from its repository: the last good snapshot once
//! nobody holds it any more, and what changed between two commits (their trees compared, no
//! file read) for the daemon's early apply of a push.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use git2::{Oid, Repository};

use super::super::tree::read_tree_snapshot;
use super::super::GitError;
use super::{parse_oid, GitSource};
use crate::source::Snapshot;

/// What [`GitSource::changed_files`] found between two commits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangedFiles {
    /// The files added or modified, as a snapshot names them.
    pub files: BTreeSet<String>,
    /// Whether one of them lay in a directory that held a `Chart.yaml` at the older commit.
    pub in_chart: bool,
}

impl GitSource {
    /// The last snapshot that was fetched and read successfully (read again from the repository
    /// when nobody holds it any more); `None` before the first, or when it could not be read
    /// again (then the next fetch reads its commit anew).
    pub fn last_good(&mut self) -> Option<Arc<Snapshot>> {
        self.read_last_good().ok().flatten()
    }

    /// The commit of the last good snapshot, without reading it.
    pub fn last_good_revision(&self) -> Option<String> {
        self.last_good_oid.map(|o| o.to_string())
    }

    /// [`GitSource::last_good`], and why it could not be read again. A commit the repository no
    /// longer has (a cache deleted by another process) is forgotten: the next fetch reads the
    /// wanted commit anew instead of answering `Unchanged`.
    pub fn read_last_good(&mut self) -> Result<Option<Arc<Snapshot>>, GitError> {
        if let Some(held) = self.last_good.upgrade() {
            return Ok(Some(held));
        }
        let Some(oid) = self.last_good_oid else {
            return Ok(None);
        };
        match self.read_commit(oid) {
            Ok(snapshot) => {
                self.last_good = Arc::downgrade(&snapshot);
                Ok(Some(snapshot))
            }
            Err(e) => {
                self.last_good_oid = None;
                Err(e)
            }
        }
    }

    /// What changed from commit `old` to commit `new` (both fetched by this source), under
    /// `--path`, by comparing their trees (no file is read): the files added or modified, paths
    /// as a snapshot has them (dot-files left out, as a snapshot leaves them), and whether any of
    /// them lay in a directory that held a `Chart.yaml` at `old`. `None` when more than `max`
    /// files changed.
    pub fn changed_files(
        &self,
        old: &str,
        new: &str,
        max: usize,
    ) -> Result<Option<ChangedFiles>, GitError> {
        let repo = self.open_for_reading()?;
        let read_err = |e: git2::Error| GitError::Read {
            revision: new.to_string(),
            message: e.message().to_string(),
        };
        let tree_at = |revision: &str| -> Result<git2::Tree<'_>, GitError> {
            let root = repo
                .find_commit(parse_oid(revision)?)
                .and_then(|c| c.tree())
                .map_err(read_err)?;
            match self.spec.path.as_deref().map(|p| p.trim_matches('/')) {
                None | Some("") | Some(".") => Ok(root),
                Some(path) => {
                    let entry =
                        root.get_path(Path::new(path))
                            .map_err(|_| GitError::PathNotFound {
                                path: path.to_string(),
                                revision: revision.to_string(),
                            })?;
                    repo.find_tree(entry.id()).map_err(read_err)
                }
            }
        };
        let (old_tree, new_tree) = (tree_at(old)?, tree_at(new)?);
        let diff = repo
            .diff_tree_to_tree(Some(&old_tree), Some(&new_tree), None)
            .map_err(read_err)?;
        let mut files = BTreeSet::new();
        for delta in diff.deltas() {
            if delta.status() == git2::Delta::Deleted {
                continue;
            }
            let Some(path) = delta.new_file().path().and_then(|p| p.to_str()) else {
                continue;
            };
            if path.split('/').any(|c| c.starts_with('.')) {
                continue;
            }
            files.insert(path.to_string());
            if files.len() > max {
                return Ok(None);
            }
        }
        let held_chart = |dir: &str| {
            let chart = if dir.is_empty() {
                "Chart.yaml".to_string()
            } else {
                format!("{dir}/Chart.yaml")
            };
            old_tree.get_path(Path::new(&chart)).is_ok()
        };
        let in_chart = files.iter().any(|p| {
            let mut dir = p.as_str();
            while let Some((parent, _)) = dir.rsplit_once('/') {
                if held_chart(parent) {
                    return true;
                }
                dir = parent;
            }
            held_chart("")
        });
        Ok(Some(ChangedFiles { files, in_chart }))
    }

    /// The repository this source reads from: its cache, or a local repository in place.
    fn open_for_reading(&self) -> Result<Repository, GitError> {
        if self.remote.local {
            self.open_local()
        } else {
            Repository::open_bare(&self.cache_path).map_err(|e| self.cache_error(&e))
        }
    }

    /// Read the files of commit `oid` (under `--path`) from the cache, or in place for a local
    /// repository, with the same bounds as a fetch's.
    fn read_commit(&self, oid: Oid) -> Result<Arc<Snapshot>, GitError> {
        let repo = self.open_for_reading()?;
        Ok(Arc::new(read_tree_snapshot(
            &repo,
            oid,
            self.spec.path.as_deref(),
            self.spec.limits,
            None,
        )?))
    }

    /// Keep `snapshot` as the last good one (not held: see the field).
    pub(super) fn keep_last_good(&mut self, oid: Oid, snapshot: &Arc<Snapshot>) {
        self.last_good_oid = Some(oid);
        self.last_good = Arc::downgrade(snapshot);
    }
}
