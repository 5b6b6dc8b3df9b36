//! Bundle archives: sha256 digests, the in-memory unpacking of a downloaded `.tar.gz` (with
//! limits, refusing links and escaping paths), and the deterministic packing of a bundle.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Component;

use sha2::{Digest, Sha256};

use super::{ChannelError, ChannelLimits};

/// Lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A bundle whose sha256 is not the one its channel lists; shows the actual digest.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error("{actual}")]
    Mismatch { actual: String },
}

/// Check `bytes` against the expected hex digest; on a mismatch, the actual digest.
pub fn verify_sha256(bytes: &[u8], expected: &str) -> Result<(), DigestError> {
    let actual = sha256_hex(bytes);
    // Both are public digests: no need for a constant-time comparison.
    if actual.eq_ignore_ascii_case(expected.trim()) {
        Ok(())
    } else {
        Err(DigestError::Mismatch { actual })
    }
}

/// The longest path a bundle file may have, in bytes.
const MAX_PATH_BYTES: usize = 4096;

/// Unpack a bundle `.tar.gz` in memory: regular files only (directories are skipped; links,
/// devices and anything else refused), no absolute path and no `..`, within `limits`.
pub fn unpack_archive(
    archive: &[u8],
    limits: &ChannelLimits,
    url: &str,
) -> Result<BTreeMap<String, Vec<u8>>, ChannelError> {
    let err = |message: String| ChannelError::Archive {
        url: url.to_string(),
        message,
    };
    // Bound the decompressed stream as a whole: a small archive may inflate enormously.
    let budget = limits
        .max_unpacked_bytes
        .saturating_add(limits.max_entries as u64 * 1024 + 1024 * 1024);
    let gz = flate2::read::GzDecoder::new(archive).take(budget);
    let mut tar = tar::Archive::new(gz);
    let entries = tar
        .entries()
        .map_err(|e| err(format!("not a tar archive: {e}")))?;
    let mut files = BTreeMap::new();
    let mut total: u64 = 0;
    for (n, entry) in entries.enumerate() {
        if n >= limits.max_entries {
            return Err(err(format!(
                "more than {} entries; refusing it",
                limits.max_entries
            )));
        }
        let mut entry = entry.map_err(|e| err(format!("not a valid .tar.gz: {e}")))?;
        let path = entry
            .path()
            .map_err(|e| err(format!("entry {n}: unreadable path: {e}")))?
            .into_owned();
        // The name is the archive author's: quoted clipped, so that no name makes an error (a
        // status field, an event, a log line, the CLI's output) as large as itself.
        let shown = crate::source::fetch_policy::clip(&path.display().to_string(), 200);
        // As a git snapshot's paths (source::git::tree): no bundle needs a longer one, and the
        // files' names are quoted by every later error.
        if path.as_os_str().len() > MAX_PATH_BYTES {
            return Err(err(format!(
                "`{shown}`: a path of {} bytes is longer than the {MAX_PATH_BYTES} a bundle path may have",
                path.as_os_str().len()
            )));
        }
        let mut parts = Vec::new();
        for c in path.components() {
            match c {
                Component::Normal(p) => parts.push(
                    p.to_str()
                        .ok_or_else(|| err(format!("`{shown}`: path is not UTF-8")))?
                        .to_string(),
                ),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(err(format!("`{shown}`: path leaves the bundle (`..`)")))
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(err(format!("`{shown}`: absolute path")))
                }
            }
        }
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        if kind.is_pax_global_extensions()
            || kind.is_pax_local_extensions()
            || kind.is_gnu_longname()
        {
            continue;
        }
        if !kind.is_file() {
            return Err(err(format!(
                "`{shown}`: a {} is not allowed in a bundle (regular files only)",
                entry_kind_name(kind)
            )));
        }
        if parts.is_empty() {
            return Err(err(format!("entry {n}: empty path")));
        }
        let size = entry.header().size().unwrap_or(u64::MAX);
        if size > limits.max_file_bytes {
            return Err(err(format!(
                "`{shown}`: {size} bytes is more than the {} a bundle file may have",
                limits.max_file_bytes
            )));
        }
        total = total.saturating_add(size);
        if total > limits.max_unpacked_bytes {
            return Err(err(format!(
                "more than {} bytes unpacked; refusing it",
                limits.max_unpacked_bytes
            )));
        }
        let mut content = Vec::with_capacity(size as usize);
        (&mut entry)
            .take(limits.max_file_bytes + 1)
            .read_to_end(&mut content)
            .map_err(|e| err(format!("`{shown}`: {e}")))?;
        let key = parts.join("/");
        if files.insert(key, content).is_some() {
            return Err(err(format!("`{shown}` appears twice")));
        }
    }
    Ok(files)
}

fn entry_kind_name(kind: tar::EntryType) -> &'static str {
    if kind.is_symlink() {
        "symbolic link"
    } else if kind.is_hard_link() {
        "hard link"
    } else if kind.is_character_special() || kind.is_block_special() {
        "device"
    } else if kind.is_fifo() {
        "FIFO"
    } else {
        "special entry"
    }
}

/// Pack files (path → content) into a deterministic `.tar.gz` (sorted paths, fixed mode and
/// time): what a channel serves, and how the chosen bundle is kept in the cluster.
pub fn pack_archive(files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, path, content.as_slice())?;
    }
    tar.into_inner()?.finish()
}
