//! The locks of a cache directory: one per directory within the process (fetches of one cache
//! take turns), and the lock files a crashed fetch left behind, removed under those locks.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Delete lock files a crashed fetch left in the cache (`refs/…/x.lock`, `shallow.lock`,
/// `packed-refs.lock`, `config.lock`); libgit2 would otherwise refuse every later fetch. Safe
/// because the caller holds the cache's in-process lock and its file lock, so no other fetch of
/// this cache runs, in this process or another.
pub(super) fn remove_stale_locks(cache: &Path) {
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
pub(super) fn cache_lock(path: &Path) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    let locks = LOCKS.get_or_init(Default::default);
    let mut map = locks
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    map.entry(path.to_path_buf()).or_default().clone()
}
