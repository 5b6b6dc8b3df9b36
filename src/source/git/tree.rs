//! A [`Snapshot`] read from the tree of one commit: no checkout, names checked, symlinks followed
//! only inside the repository, limits on files and sizes — and on the walk itself, since a
//! crafted commit is a graph, not a directory: a few kilobytes of trees that name the same
//! subtree many times describe billions of entries (a "tree bomb").

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use git2::{ObjectType, Oid, Repository};

use super::GitError;
use crate::source::fetch_policy::clip;
use crate::source::{Snapshot, SnapshotLimits};

/// Tree entries one snapshot may examine, per file it may hold ([`SnapshotLimits::max_files`]):
/// every entry counts — directories, skipped dot-files and submodules too — so a tree that
/// names one subtree many times is refused after this many, whatever its leaves are.
pub const TREE_ENTRIES_PER_FILE: usize = 4;
/// Longest path of a file in a snapshot (Linux's `PATH_MAX`): no checkout could hold a longer one.
pub const MAX_PATH_BYTES: usize = 4096;
/// Largest symlink blob that is read as a link target (`PATH_MAX` again); its size is read from
/// the object header before the blob.
pub const MAX_SYMLINK_TARGET_BYTES: usize = 4096;
/// How many characters of a name or a link target (data of whoever wrote the commit) an error
/// message quotes.
pub const QUOTE_CHARS: usize = 200;
/// Entries between two looks at the clock (the fetch's deadline also bounds the read).
const DEADLINE_CHECK_EVERY: usize = 1024;

/// Read the files of the tree at `commit` (below `path`, if given) into a snapshot, refusing
/// unsafe names, symlinks that leave the repository, and anything over `limits`; past
/// `deadline` (the fetch's, `--fetch-timeout`) the read stops with [`GitError::ReadTimeout`].
pub fn read_tree_snapshot(
    repo: &Repository,
    commit: Oid,
    path: Option<&str>,
    limits: SnapshotLimits,
    deadline: Option<Instant>,
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
    let base: Vec<&str> = path
        .map(|p| {
            p.split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .collect()
        })
        .unwrap_or_default();
    let base = base.join("/");
    let start = if base.is_empty() {
        root.clone()
    } else {
        let entry = root
            .get_path(Path::new(&base))
            .map_err(|_| GitError::PathNotFound {
                path: clip(&base, QUOTE_CHARS),
                revision: revision.clone(),
            })?;
        if entry.kind() != Some(ObjectType::Tree) {
            return Err(GitError::PathNotADirectory {
                path: clip(&base, QUOTE_CHARS),
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
    let max_entries = limits.max_files.saturating_mul(TREE_ENTRIES_PER_FILE);
    let started = Instant::now();
    let mut examined: usize = 0;
    // Depth-first over (repo-relative dir, snapshot-relative dir, tree).
    let mut pending = vec![(base.clone(), String::new(), start)];
    while let Some((repo_dir, rel_dir, tree)) = pending.pop() {
        for entry in tree.iter() {
            examined += 1;
            if examined > max_entries {
                return Err(GitError::TooManyTreeEntries {
                    limit: max_entries,
                    revision: revision.clone(),
                });
            }
            if examined.is_multiple_of(DEADLINE_CHECK_EVERY)
                && deadline.is_some_and(|d| Instant::now() >= d)
            {
                return Err(GitError::ReadTimeout {
                    elapsed: started.elapsed(),
                    examined,
                    revision: revision.clone(),
                });
            }
            let name = String::from_utf8_lossy(entry.name_bytes());
            let repo_path = join(&repo_dir, &name);
            let unsafe_path = |reason: String| GitError::UnsafePath {
                path: clip(&repo_path, QUOTE_CHARS),
                revision: revision.clone(),
                reason,
            };
            check_entry_name(&name).map_err(|reason| unsafe_path(reason.to_string()))?;
            if name.starts_with('.') {
                // Like a local directory: dot-files and dot-directories (.git, .github) are not config.
                continue;
            }
            if repo_path.len() > MAX_PATH_BYTES {
                return Err(unsafe_path(format!(
                    "the path is {} bytes long, over the limit of {MAX_PATH_BYTES}",
                    repo_path.len()
                )));
            }
            let rel_path = join(&rel_dir, &name);
            match entry.filemode() {
                0o040000 => {
                    let sub = repo.find_tree(entry.id()).map_err(read_err)?;
                    pending.push((repo_path, rel_path, sub));
                }
                0o120000 => {
                    if let Some(blob) = reader.resolve_symlink(&repo_path, entry.id())? {
                        reader.add_file(&repo_path, rel_path, blob)?;
                    }
                }
                0o160000 => {
                    tracing::debug!(path = %clip(&repo_path, QUOTE_CHARS), "git: skipping submodule");
                }
                _ => reader.add_file(&repo_path, rel_path, entry.id())?,
            }
        }
    }
    Ok(reader.snapshot)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Why a tree entry name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum EntryNameError {
    #[error("empty file name")]
    Empty,
    #[error("path component `{0}` (`..` and `.` would leave or alias the directory)")]
    Dots(String),
    #[error("file name contains a path separator")]
    Separator,
}

/// A tree entry name must be one path component (a crafted tree object can hold anything).
fn check_entry_name(name: &str) -> Result<(), EntryNameError> {
    if name.is_empty() {
        return Err(EntryNameError::Empty);
    }
    if name == ".." || name == "." {
        return Err(EntryNameError::Dots(name.to_string()));
    }
    if name.contains('/') || name.contains('\\') || name.contains('\0') {
        return Err(EntryNameError::Separator);
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

    fn add_file(&mut self, repo_path: &str, rel: String, blob: Oid) -> Result<(), GitError> {
        let (size, _) = self.odb.read_header(blob).map_err(|e| self.read_err(e))?;
        let size = size as u64;
        if size > self.limits.max_file_bytes {
            return Err(GitError::FileTooLarge {
                path: clip(repo_path, QUOTE_CHARS),
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

    /// The target of a symlink blob, its size checked before it is read.
    fn link_target(&self, link_path: &str, blob: Oid) -> Result<String, GitError> {
        let (size, _) = self.odb.read_header(blob).map_err(|e| self.read_err(e))?;
        if size > MAX_SYMLINK_TARGET_BYTES {
            return Err(GitError::UnsafePath {
                path: clip(link_path, QUOTE_CHARS),
                revision: self.revision.to_string(),
                reason: format!(
                    "symlink target is {size} bytes, over the limit of {MAX_SYMLINK_TARGET_BYTES}"
                ),
            });
        }
        let blob = self.repo.find_blob(blob).map_err(|e| self.read_err(e))?;
        Ok(String::from_utf8_lossy(blob.content()).into_owned())
    }

    /// Follow a symlink (and symlink chains) inside the commit's tree. Returns the blob it
    /// points to, or `None` for a link to a directory (read through its real path, as for a
    /// local directory).
    fn resolve_symlink(&self, link_path: &str, link_blob: Oid) -> Result<Option<Oid>, GitError> {
        let mut current_path: Vec<String> = link_path.split('/').map(str::to_string).collect();
        let mut current_blob = link_blob;
        for _ in 0..16 {
            let shown = current_path.join("/");
            let target = self.link_target(&shown, current_blob)?;
            let escapes = || GitError::SymlinkEscapes {
                path: clip(&shown, QUOTE_CHARS),
                target: clip(&target, QUOTE_CHARS),
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
                    path: clip(&shown, QUOTE_CHARS),
                    target: clip(&target, QUOTE_CHARS),
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
            path: clip(link_path, QUOTE_CHARS),
            revision: self.revision.to_string(),
            reason: "symlink chain longer than 16 links".to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_checked() {
        assert!(check_entry_name("ok.yaml").is_ok());
        assert!(check_entry_name("..")
            .unwrap_err()
            .to_string()
            .contains("`..`"));
        assert!(check_entry_name("a/b").is_err());
    }
}
