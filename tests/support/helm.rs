//! The pinned helm of the tests: `$WEFT_HELM` (scripts/test sets it), else built (or found in
//! the cache) by `tests/helm/ensure`. Tests that render Helm charts fail, never skip, when it
//! cannot be built.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The absolute path of the pinned helm (resolved once per test binary).
pub fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        if let Some(p) = std::env::var_os("WEFT_HELM").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helm/ensure");
        let out = Command::new(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed ({}): the pinned helm is required by these tests\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        assert!(
            path.is_file(),
            "{} printed `{}`",
            script.display(),
            path.display()
        );
        path
    })
}
