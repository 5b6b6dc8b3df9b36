//! Run a process with its wall clock skewed (a laptop after a sleep), through libfaketime's
//! LD_PRELOAD shim: `clock_gettime(CLOCK_REALTIME)` and friends answer `now + offset`, the
//! monotonic clock is left alone (as a real skew leaves it). `tests/git-servers/ensure-deps`
//! installs libfaketime (Debian package `faketime`) when missing.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian and Ubuntu put the shim, per architecture.
const CANDIDATES: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

fn find() -> Option<PathBuf> {
    CANDIDATES.iter().map(PathBuf::from).find(|p| p.exists())
}

/// The shim, installed by `tests/git-servers/ensure-deps` if needed (fails the test otherwise).
pub fn libfaketime() -> PathBuf {
    if let Some(p) = find() {
        return p;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/git-servers/ensure-deps");
    let status = Command::new(&script)
        .status()
        .expect("run tests/git-servers/ensure-deps");
    assert!(
        status.success(),
        "tests/git-servers/ensure-deps failed; install libfaketime (Debian: apt-get install faketime)"
    );
    find().expect("libfaketime after tests/git-servers/ensure-deps")
}

/// The environment that runs a process `offset_secs` ahead of this machine's clock (behind when
/// negative).
pub fn skewed_env(offset_secs: i64) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), libfaketime().display().to_string()),
        ("FAKETIME".into(), format!("{offset_secs:+}")),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}
