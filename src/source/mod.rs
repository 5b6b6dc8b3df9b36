//! Where desired state comes from: a git repository (see `git`) or a local directory, read into
//! an immutable [`Snapshot`] that the loader consumes. All fetching lives in this module.

pub mod channel;
pub mod chart;
pub mod fetch_policy;
pub mod git;
pub mod go_yaml;
pub mod local;
pub mod tar_cache;

use std::collections::BTreeMap;

/// Limits on what a snapshot may hold, so a hostile or broken repository cannot exhaust memory.
#[derive(Clone, Copy, Debug)]
pub struct SnapshotLimits {
    /// Maximum number of files.
    pub max_files: usize,
    /// Maximum size of one file, in bytes.
    pub max_file_bytes: u64,
    /// Maximum size of all files together, in bytes.
    pub max_total_bytes: u64,
}

impl Default for SnapshotLimits {
    fn default() -> Self {
        SnapshotLimits {
            max_files: 50_000,
            max_file_bytes: 8 * 1024 * 1024,
            // The daemon holds a snapshot (and, while it renders, more) in a container limited to
            // 512 MiB: a snapshot as large as the container could never fit.
            max_total_bytes: 128 * 1024 * 1024,
        }
    }
}

/// The files of a config repository at one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The git commit the files were read from; `None` for a plain local directory.
    pub revision: Option<String>,
    /// Files by path relative to the repository (or `--path`) root, `/`-separated.
    pub files: BTreeMap<String, Vec<u8>>,
}

impl Snapshot {
    /// A short, human label for the revision (`local` for a directory).
    pub fn revision_label(&self) -> String {
        match &self.revision {
            Some(r) => r.chars().take(12).collect(),
            None => "local".to_string(),
        }
    }

    /// The snapshot restricted to the subdirectory `dir`, with paths made relative to it.
    pub fn subdir(&self, dir: &str) -> Snapshot {
        let prefix = format!("{}/", dir.trim_matches('/'));
        Snapshot {
            revision: self.revision.clone(),
            files: self
                .files
                .iter()
                .filter_map(|(p, c)| {
                    p.strip_prefix(&prefix)
                        .map(|rest| (rest.to_string(), c.clone()))
                })
                .collect(),
        }
    }
}

/// Why a repository-relative path was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path `{0}` must be relative and use `/`")]
    NotRelative(String),
    #[error("path `{0}` leaves the repository (`..`)")]
    LeavesRepository(String),
}

/// Check a repository-relative path: no absolute paths, no `..`, no empty components.
pub fn check_relative_path(path: &str) -> Result<(), PathError> {
    if path.starts_with('/') || path.contains('\\') {
        return Err(PathError::NotRelative(path.to_string()));
    }
    for part in path.split('/') {
        if part == ".." {
            return Err(PathError::LeavesRepository(path.to_string()));
        }
    }
    Ok(())
}
