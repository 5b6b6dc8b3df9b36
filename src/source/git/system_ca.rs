//! libgit2's OpenSSL and the system's CA certificates.
//!
//! When libgit2 starts, its OpenSSL context reads the system's whole CA bundle (`SSL_CERT_FILE`,
//! which git2 points at the bundle it finds) and keeps every certificate parsed for the life of
//! the process: 1.1 MB, measured with heaptrack on an idle `weft run` (docs/benchmarks.md, idle
//! memory), close to half of its heap — even when no repository is fetched over https. The same
//! context also looks certificates up in the system's certificate directory, one at a time, by
//! the hash of the issuer a handshake needs (OpenSSL's "hashed directory", the `XXXXXXXX.0` links
//! that `update-ca-certificates` and `openssl rehash` make, as on Debian, Ubuntu and the
//! distroless images built on them).
//!
//! So, when that directory is hashed and the operator named no bundle of their own, libgit2 is
//! started with an empty file in place of the bundle: its handshakes find their CA in the
//! directory on demand, and the trust is the same (the directory holds the bundle's
//! certificates). Everything else — the environment that child processes (helm) and the HTTP
//! clients read — is left as git2 sets it. Where the directory is not hashed, nothing changes.

use std::path::Path;

const CERT_FILE: &str = "SSL_CERT_FILE";
const CERT_DIR: &str = "SSL_CERT_DIR";

/// Start libgit2 (and its OpenSSL context) reading CA certificates on demand where it can (see
/// the module). Call first thing in `main`, before any thread starts: it changes environment
/// variables for the duration of the start.
pub fn start_libgit2() {
    if std::env::var_os(CERT_FILE).is_some() {
        // The operator's bundle: OpenSSL reads it as they asked.
        return;
    }
    let probed = openssl_probe::probe();
    let Some(dir) = probed.cert_dir.filter(|d| is_hashed(d)) else {
        return;
    };
    // SAFETY: called from `main` before any other thread exists, so nothing reads the
    // environment while it changes.
    unsafe {
        std::env::set_var(CERT_FILE, "/dev/null");
        std::env::set_var(CERT_DIR, &dir);
    }
    // Any git2 call starts libgit2 once per process; this one sets what is already the default.
    git2::opts::enable_caching(true);
    // SAFETY: as above; still no other thread.
    unsafe {
        match &probed.cert_file {
            Some(file) => std::env::set_var(CERT_FILE, file),
            None => std::env::remove_var(CERT_FILE),
        }
    }
}

/// Whether `dir` holds OpenSSL's hash links (`5ad8a5d6.0`): certificates can be looked up there
/// one at a time.
fn is_hashed(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries
        .filter_map(Result::ok)
        .any(|e| is_hash_name(&e.file_name().to_string_lossy()))
}

/// `XXXXXXXX.N`: eight hex digits, a dot and a number.
fn is_hash_name(name: &str) -> bool {
    let Some((hash, n)) = name.split_once('.') else {
        return false;
    };
    hash.len() == 8
        && hash.bytes().all(|b| b.is_ascii_hexdigit())
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_links_are_recognised() {
        assert!(is_hash_name("5ad8a5d6.0"));
        assert!(is_hash_name("002c0b4f.12"));
        assert!(!is_hash_name("ca-certificates.crt"));
        assert!(!is_hash_name("5ad8a5d6.pem"));
        assert!(!is_hash_name("5ad8a5d.0"));
        assert!(!is_hash_name("5ad8a5dz.0"));
        assert!(!is_hash_name("5ad8a5d6."));
    }

    #[test]
    fn a_directory_is_hashed_only_with_a_hash_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), "").unwrap();
        assert!(!is_hashed(dir.path()));
        std::fs::write(dir.path().join("5ad8a5d6.0"), "").unwrap();
        assert!(is_hashed(dir.path()));
        assert!(!is_hashed(&dir.path().join("missing")));
    }
}
