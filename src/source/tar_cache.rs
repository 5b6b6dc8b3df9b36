//! The chart tar cache's bound: archives are kept by their digest under `<chart cache>/tar`,
//! and without eviction it would only grow (every version of every chart ever used).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Most bytes of archives the tar cache keeps.
pub const MAX_BYTES: u64 = 256 * 1024 * 1024;
/// Archives not used for this long leave the tar cache.
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Keep the tar cache bounded: archives unused for `max_age` go, then the least recently used
/// until the rest fit in `max_bytes`; `keep` (the archive just stored) always stays, and so do
/// files that are not archives. Best effort: a file that cannot be removed is left.
pub fn evict(dir: &Path, keep: &Path, max_bytes: u64, max_age: Duration) {
    let now = SystemTime::now();
    let mut archives: Vec<(SystemTime, u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tgz") && p != keep)
        .filter_map(|p| {
            let meta = std::fs::metadata(&p).ok()?;
            Some((meta.modified().ok()?, meta.len(), p))
        })
        .collect();
    archives.sort();
    let mut total: u64 = std::fs::metadata(keep).map_or(0, |m| m.len())
        + archives.iter().map(|(_, len, _)| len).sum::<u64>();
    for (used, len, path) in archives {
        let old = now.duration_since(used).unwrap_or_default() > max_age;
        if !old && total <= max_bytes {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            tracing::info!(archive = %path.display(), "chart tar cache: evicted");
            total = total.saturating_sub(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(dir: &Path, name: &str, bytes: usize, age: Duration) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, vec![0u8; bytes]).unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(SystemTime::now() - age).unwrap();
        p
    }

    #[test]
    fn old_archives_go_then_the_least_recently_used_until_the_rest_fit() {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(24 * 3600);
        let stale = archive(dir.path(), "stale.tgz", 10, 8 * day);
        let oldest = archive(dir.path(), "a.tgz", 100, 3 * day);
        let older = archive(dir.path(), "b.tgz", 100, 2 * day);
        let recent = archive(dir.path(), "c.tgz", 100, day);
        let kept = archive(dir.path(), "new.tgz", 100, Duration::ZERO);
        let other = dir.path().join("notes.txt");
        std::fs::write(&other, "not an archive").unwrap();
        // 400 bytes of fresh archives, room for 250: the two least recently used go.
        evict(dir.path(), &kept, 250, 7 * day);
        assert!(!stale.exists(), "unused for longer than the age limit");
        assert!(!oldest.exists() && !older.exists());
        assert!(recent.exists() && kept.exists() && other.exists());
        // Within bounds: nothing more goes.
        evict(dir.path(), &kept, 250, 7 * day);
        assert!(recent.exists());
        // The archive just stored stays even when it alone is over the limit.
        evict(dir.path(), &kept, 10, 7 * day);
        assert!(kept.exists() && !recent.exists());
    }
}
