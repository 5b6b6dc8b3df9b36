//! A plain local directory as a source (development, and `weft render PATH`).

use std::fs;
use std::path::{Path, PathBuf};

use super::{Snapshot, SnapshotLimits};

/// Why a directory cannot be read as a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: symlink points outside the repository (to {target}); refusing it")]
    SymlinkEscapes { path: PathBuf, target: PathBuf },
    #[error("{path}: file is {size} bytes, over the limit of {limit} bytes")]
    FileTooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error("{root}: repository has more than {limit} files")]
    TooManyFiles { root: PathBuf, limit: usize },
    #[error("{root}: repository is larger than {limit} bytes in total")]
    TooLarge { root: PathBuf, limit: u64 },
    #[error("{path}: not a directory")]
    NotADirectory { path: PathBuf },
    /// `--path` names nothing in the directory: a typo must not become an empty desired set
    /// (which would prune everything), as it is not for a git repository either.
    #[error("--path `{path}` does not exist in {root}")]
    PathNotFound { root: PathBuf, path: String },
    #[error("--path `{path}` in {root} is not a directory")]
    PathNotADirectory { root: PathBuf, path: String },
}

/// [`read_dir`] of `root`, restricted to its subdirectory `path` (`--path`) when given, which
/// must exist and be a directory.
pub fn read_dir_at(
    root: &Path,
    path: Option<&str>,
    limits: SnapshotLimits,
) -> Result<Snapshot, LocalError> {
    let Some(path) = path else {
        return read_dir(root, limits);
    };
    let trimmed = path.trim_matches('/');
    let bounded = || path.chars().take(200).collect::<String>();
    if !trimmed.is_empty() {
        match fs::metadata(root.join(trimmed)) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(LocalError::PathNotADirectory {
                    root: root.to_path_buf(),
                    path: bounded(),
                })
            }
            Err(_) => {
                return Err(LocalError::PathNotFound {
                    root: root.to_path_buf(),
                    path: bounded(),
                })
            }
        }
    }
    let snapshot = read_dir(root, limits)?;
    Ok(if trimmed.is_empty() {
        snapshot
    } else {
        snapshot.subdir(trimmed)
    })
}

/// Read every regular file under `root` (skipping `.git` and other dot-directories) into a
/// snapshot. Symlinks are followed only when they stay inside `root`.
pub fn read_dir(root: &Path, limits: SnapshotLimits) -> Result<Snapshot, LocalError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LocalError::Io { path, source }
    };
    let canonical_root = fs::canonicalize(root).map_err(io(root))?;
    if !canonical_root.is_dir() {
        return Err(LocalError::NotADirectory {
            path: root.to_path_buf(),
        });
    }
    let mut snapshot = Snapshot::default();
    let mut total: u64 = 0;
    let mut pending = vec![canonical_root.clone()];
    while let Some(dir) = pending.pop() {
        let mut entries: Vec<_> = fs::read_dir(&dir)
            .map_err(io(&dir))?
            .collect::<Result<_, _>>()
            .map_err(io(&dir))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            let file_type = entry.file_type().map_err(io(&path))?;
            let real = if file_type.is_symlink() {
                let target = fs::canonicalize(&path).map_err(io(&path))?;
                if !target.starts_with(&canonical_root) {
                    return Err(LocalError::SymlinkEscapes { path, target });
                }
                target
            } else {
                path.clone()
            };
            let meta = fs::metadata(&real).map_err(io(&path))?;
            if meta.is_dir() {
                if !file_type.is_symlink() {
                    pending.push(real);
                }
                // A symlinked directory inside the root is read through its real path already.
                continue;
            }
            if !meta.is_file() {
                continue;
            }
            if meta.len() > limits.max_file_bytes {
                return Err(LocalError::FileTooLarge {
                    path,
                    size: meta.len(),
                    limit: limits.max_file_bytes,
                });
            }
            total += meta.len();
            if total > limits.max_total_bytes {
                return Err(LocalError::TooLarge {
                    root: root.to_path_buf(),
                    limit: limits.max_total_bytes,
                });
            }
            if snapshot.files.len() >= limits.max_files {
                return Err(LocalError::TooManyFiles {
                    root: root.to_path_buf(),
                    limit: limits.max_files,
                });
            }
            let rel = path
                .strip_prefix(&canonical_root)
                .unwrap_or(&path)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let content = fs::read(&real).map_err(io(&path))?;
            snapshot.files.insert(rel, content);
        }
    }
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_files_and_skips_dot_dirs() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        fs::create_dir_all(dir.path().join(".git")).unwrap();
        fs::write(dir.path().join("a/b/x.yaml"), "x").unwrap();
        fs::write(dir.path().join(".git/config"), "y").unwrap();
        let snap = read_dir(dir.path(), SnapshotLimits::default()).unwrap();
        assert_eq!(snap.files.keys().collect::<Vec<_>>(), vec!["a/b/x.yaml"]);
        assert_eq!(snap.revision, None);
    }

    #[test]
    fn symlink_leaving_the_directory_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.yaml"), "s").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.yaml"),
            dir.path().join("link.yaml"),
        )
        .unwrap();
        let err = read_dir(dir.path(), SnapshotLimits::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("symlink points outside the repository"),
            "{err}"
        );
        assert!(err.to_string().contains("link.yaml"), "{err}");
    }

    #[test]
    fn symlink_inside_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("real.yaml"), "r").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real.yaml"), dir.path().join("link.yaml"))
            .unwrap();
        let snap = read_dir(dir.path(), SnapshotLimits::default()).unwrap();
        assert_eq!(snap.files["link.yaml"], b"r");
    }

    #[test]
    fn oversized_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("big.yaml"), vec![b'a'; 100]).unwrap();
        let limits = SnapshotLimits {
            max_file_bytes: 10,
            ..SnapshotLimits::default()
        };
        let err = read_dir(dir.path(), limits).unwrap_err();
        assert!(
            err.to_string()
                .contains("big.yaml: file is 100 bytes, over the limit of 10"),
            "{err}"
        );
    }
}
