//! A config repository as a plain directory on disk (no git), removed when dropped.

use std::path::Path;

/// A config repository on disk.
pub struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    pub fn new() -> Repo {
        Repo {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write `text` to `file` (a path relative to the repository), creating its directories.
    pub fn write(&self, file: &str, text: &str) {
        let p = self.dir.path().join(file);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    pub fn remove(&self, file: &str) {
        std::fs::remove_file(self.dir.path().join(file)).expect("remove");
    }
}
