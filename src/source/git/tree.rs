//! A [`Snapshot`] read from the tree of one commit: no checkout, names checked, symlinks followed
//! only inside the repository, limits on files and sizes.

use std::collections::BTreeMap;
use std::path::Path;

use git2::{ObjectType, Oid, Repository};

use super::GitError;
use crate::source::{Snapshot, SnapshotLimits};

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
                reason: reason.to_string(),
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
