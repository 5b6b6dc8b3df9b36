//! A local repository (`file://…` or a path) is read in place, not fetched into the cache:
//! libgit2's local transport packs whole objects, so a 1 GiB blob of the repository was read
//! whole (1.07 GB at its peak) before any bound could refuse it (issue 48 item 8). Opened
//! directly, the tree reader sees each blob's size in its object header first, as it does in the
//! cache of a fetched repository, and refuses it before reading it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use git2::{Oid, Repository};

use super::super::tree::read_tree_snapshot;
use super::super::{FetchOutcome, GitError, GitRef};
use super::{parse_oid, GitSource};
use crate::source::fetch_policy::clip;

/// The directory a local URL names (`file:///srv/git/app.git`, or the path itself).
fn local_path(fetch_url: &str) -> PathBuf {
    url::Url::parse(fetch_url)
        .ok()
        .filter(|u| u.scheme() == "file")
        .and_then(|u| u.to_file_path().ok())
        .unwrap_or_else(|| PathBuf::from(fetch_url))
}

/// Every ref of `repo` and its HEAD, each peeled to its commit, as a listing of a remote has
/// them.
fn local_refs(repo: &Repository) -> BTreeMap<String, Oid> {
    let mut refs = BTreeMap::new();
    if let Ok(all) = repo.references() {
        for r in all.flatten() {
            if let (Ok(name), Ok(commit)) = (r.name(), r.peel_to_commit()) {
                refs.insert(name.to_string(), commit.id());
            }
        }
    }
    if let Ok(commit) = repo.head().and_then(|h| h.peel_to_commit()) {
        refs.insert("HEAD".to_string(), commit.id());
    }
    refs
}

impl GitSource {
    /// The local repository, opened in place.
    pub(super) fn open_local(&self) -> Result<Repository, GitError> {
        Repository::open(local_path(&self.remote.fetch_url)).map_err(|e| GitError::Unreachable {
            url: self.remote.display.clone(),
            message: clip(e.message(), 500),
        })
    }

    /// Read the configured ref of the local repository in place: nothing is copied, nothing is
    /// written into it (the last good commit is remembered in memory only).
    pub(super) fn read_local(&mut self) -> Result<FetchOutcome, GitError> {
        let repo = self.open_local()?;
        let (oid, branch) = match &self.spec.reference {
            GitRef::Commit(c) => (parse_oid(c)?, None),
            _ => self.resolve_listed(&local_refs(&repo))?,
        };
        if self.last_good_oid == Some(oid) {
            return Ok(FetchOutcome::Unchanged);
        }
        if let (Some(old), Some(branch)) = (self.last_good_oid, &branch) {
            self.check_history(&repo, old, oid, branch)?;
        }
        let snapshot = Arc::new(read_tree_snapshot(
            &repo,
            oid,
            self.spec.path.as_deref(),
            self.spec.limits,
            self.deadline.instant(),
        )?);
        self.keep_last_good(oid, &snapshot);
        Ok(FetchOutcome::New(snapshot))
    }
}
