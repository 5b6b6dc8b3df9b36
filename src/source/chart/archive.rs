//! Chart archives: the `tar` source (a `.tgz` downloaded over http(s) within its limits and
//! unpacked in memory, refusing anything that could escape or exhaust; see the module above for
//! the rules), the cache of archives by sha256 digest that every archive source shares, and
//! `helm package`'s one-directory layout.

use std::collections::BTreeMap;
use std::io::Read;

use sha2::{Digest, Sha256};

use super::{
    clean_relative, join, ArchiveLimits, CaCertificates, ChartCache, ChartFiles, SourceFailure,
    QUOTE_CHARS,
};
use crate::api::armada::ChartSource;
use crate::source::fetch_policy::clip;

pub(super) fn download(
    url: &str,
    limits: ArchiveLimits,
    ca: Option<&CaCertificates>,
) -> Result<Vec<u8>, SourceFailure> {
    let http = |message: String| SourceFailure::Http {
        url: url.to_string(),
        message: clip(&message, 500),
    };
    let mut builder = reqwest::blocking::Client::builder()
        .timeout(limits.timeout)
        .redirect(crate::source::fetch_policy::same_host_redirects());
    for certificate in ca.map(|c| c.certificates.as_slice()).unwrap_or_default() {
        builder = builder.add_root_certificate(certificate.clone());
    }
    let client = builder.build().map_err(|e| http(e.to_string()))?;
    let response = client.get(url).send().map_err(|e| {
        let mut message = crate::source::fetch_policy::describe_http_error(e);
        if message.contains("certificate") {
            message.push_str(
                " (a private CA is trusted with --ca-file, SSL_CERT_FILE or SSL_CERT_DIR)",
            );
        }
        http(message)
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(http(format!("HTTP {status}")));
    }
    if response
        .content_length()
        .is_some_and(|n| n > limits.max_archive_bytes)
    {
        return Err(SourceFailure::ArchiveTooLarge {
            url: url.to_string(),
            limit: limits.max_archive_bytes,
        });
    }
    let mut bytes = Vec::new();
    response
        .take(limits.max_archive_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| http(e.to_string()))?;
    if bytes.len() as u64 > limits.max_archive_bytes {
        return Err(SourceFailure::ArchiveTooLarge {
            url: url.to_string(),
            limit: limits.max_archive_bytes,
        });
    }
    Ok(bytes)
}

/// Unpack a `.tgz` in memory, refusing anything that could escape or exhaust. Entries are read
/// raw, so that extension headers (PAX `x`/`g`, GNU long names) are charged against
/// `max_entries` and `max_unpacked_bytes` before their data is read, like every other entry.
pub fn unpack(
    url: &str,
    bytes: &[u8],
    limits: ArchiveLimits,
) -> Result<BTreeMap<String, Vec<u8>>, SourceFailure> {
    let archive_err = |message: String| SourceFailure::Archive {
        url: url.to_string(),
        message: clip(&message, QUOTE_CHARS),
    };
    let decoder = flate2::read::GzDecoder::new(bytes);
    let mut archive = tar::Archive::new(decoder);
    let mut files = BTreeMap::new();
    let mut total: u64 = 0;
    // What the extension headers before an entry said about it.
    let mut long_path: Option<Vec<u8>> = None;
    let mut pax_size: Option<Vec<u8>> = None;
    let entries = archive
        .entries()
        .map_err(|e| archive_err(e.to_string()))?
        .raw(true);
    for (count, entry) in entries.enumerate() {
        if count >= limits.max_entries {
            return Err(SourceFailure::TooManyEntries {
                url: url.to_string(),
                limit: limits.max_entries,
            });
        }
        let mut entry = entry.map_err(|e| archive_err(e.to_string()))?;
        let kind = entry.header().entry_type();
        let size = entry
            .header()
            .entry_size()
            .map_err(|e| archive_err(e.to_string()))?;
        total = total.saturating_add(size);
        if total > limits.max_unpacked_bytes {
            return Err(SourceFailure::UnpackedTooLarge {
                url: url.to_string(),
                limit: limits.max_unpacked_bytes,
            });
        }
        let read = |entry: &mut tar::Entry<'_, flate2::read::GzDecoder<&[u8]>>| -> Result<Vec<u8>, SourceFailure> {
            let mut content = Vec::with_capacity(size.min(1 << 20) as usize);
            entry
                .take(size)
                .read_to_end(&mut content)
                .map_err(|e| archive_err(e.to_string()))?;
            Ok(content)
        };
        if kind.is_pax_local_extensions() {
            let data = read(&mut entry)?;
            for extension in tar::PaxExtensions::new(&data) {
                let extension = extension.map_err(|e| archive_err(format!("PAX header: {e}")))?;
                match extension.key_bytes() {
                    b"path" => long_path = Some(extension.value_bytes().to_vec()),
                    b"size" => pax_size = Some(extension.value_bytes().to_vec()),
                    _ => {}
                }
            }
            continue;
        }
        if kind.is_gnu_longname() {
            let mut name = read(&mut entry)?;
            while name.last() == Some(&0) {
                name.pop();
            }
            long_path = Some(name);
            continue;
        }
        if kind.is_pax_global_extensions() || kind.is_gnu_longlink() {
            // A global header (`git archive` writes the commit id in one) says nothing about a
            // file's name; a long link name belongs to a link, refused below. Charged, skipped.
            continue;
        }
        let raw_path = String::from_utf8_lossy(
            &long_path
                .take()
                .unwrap_or_else(|| entry.path_bytes().into_owned()),
        )
        .into_owned();
        let declared_size = pax_size.take();
        let bad = |why: &str| SourceFailure::BadEntry {
            url: url.to_string(),
            entry: clip(&raw_path, QUOTE_CHARS),
            why: why.to_string(),
        };
        if kind.is_dir() {
            continue;
        }
        if !kind.is_file() {
            return Err(bad(
                "is not a regular file (links and devices are not allowed)",
            ));
        }
        if declared_size.is_some_and(|d| d != size.to_string().as_bytes()) {
            // Readers that honour the PAX size and readers that do not would see different files.
            return Err(bad("has a PAX size that differs from its header's"));
        }
        if raw_path.starts_with('/') || raw_path.contains('\\') {
            return Err(bad("has an absolute path"));
        }
        let path =
            clean_relative(&raw_path).map_err(|_| bad("leaves the extraction directory (`..`)"))?;
        if path.is_empty() {
            return Err(bad("has an empty path"));
        }
        let content = read(&mut entry)?;
        files.insert(path, content);
    }
    Ok(files)
}

pub(super) fn tar_files(
    source: &ChartSource,
    cache: &ChartCache,
) -> Result<ChartFiles, SourceFailure> {
    let url = source.location.clone();
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(SourceFailure::NotHttp { url });
    }
    cache.policy.check(&url)?;
    let subpath = clean_relative(source.subpath.as_deref().unwrap_or(""))?;
    let pinned = match source.reference.as_deref().filter(|r| !r.is_empty()) {
        None => None,
        Some(r) => {
            let hex = r.strip_prefix("sha256:").unwrap_or("");
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(SourceFailure::BadDigest {
                    reference: clip(r, QUOTE_CHARS),
                });
            }
            Some(hex.to_ascii_lowercase())
        }
    };
    let bytes = match pinned.as_deref().and_then(|d| cached_archive(cache, d)) {
        Some(bytes) => bytes,
        None => download(&url, cache.archive_limits, cache.ca.as_ref())?,
    };
    let digest = hex::encode(Sha256::digest(&bytes));
    if let Some(expected) = &pinned {
        if *expected != digest {
            return Err(SourceFailure::DigestMismatch {
                url,
                expected: format!("sha256:{expected}"),
                actual: format!("sha256:{digest}"),
            });
        }
    }
    store_archive(cache, &digest, &bytes)?;
    let all = unpack(&url, &bytes, cache.archive_limits)?;
    let files: BTreeMap<String, Vec<u8>> = if subpath.is_empty() {
        all
    } else {
        let prefix = format!("{subpath}/");
        all.into_iter()
            .filter_map(|(p, c)| p.strip_prefix(&prefix).map(|r| (r.to_string(), c)))
            .collect()
    };
    let root = join(&format!("{url}@sha256:{}", &digest[..12]), &subpath);
    let (files, root) = packaged_chart(files, root);
    if !files.contains_key("Chart.yaml") {
        return Err(SourceFailure::NotAChart { root });
    }
    Ok(ChartFiles {
        root,
        revision: Some(format!("sha256:{digest}")),
        files,
    })
}

/// The archive of sha256 `digest` (hex) from the cache, marked as used; `None` if absent.
pub(super) fn cached_archive(cache: &ChartCache, digest: &str) -> Option<Vec<u8>> {
    let path = cache.dir.join("tar").join(format!("{digest}.tgz"));
    let bytes = std::fs::read(&path).ok()?;
    // Used now: the cache's eviction goes by last use.
    let _ = std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
    Some(bytes)
}

/// Keep an archive under its digest (hex), evicting the least recently used beyond the bounds.
pub(super) fn store_archive(
    cache: &ChartCache,
    digest: &str,
    bytes: &[u8],
) -> Result<(), SourceFailure> {
    let tar_dir = cache.dir.join("tar");
    let path = tar_dir.join(format!("{digest}.tgz"));
    if path.is_file() {
        return Ok(());
    }
    std::fs::create_dir_all(&tar_dir)
        .and_then(|()| {
            // Write then rename, so a crash never leaves a truncated archive under its digest.
            let tmp = tar_dir.join(format!(".{digest}.tmp"));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &path)
        })
        .map_err(|e| SourceFailure::Cache {
            path: path.clone(),
            message: e.to_string(),
        })?;
    crate::source::tar_cache::evict(
        &tar_dir,
        &path,
        crate::source::tar_cache::MAX_BYTES,
        crate::source::tar_cache::MAX_AGE,
    );
    Ok(())
}

/// `helm package`'s layout: the chart in one top-level directory named after it. Returns the
/// files relative to the chart and `root` extended with that directory.
pub(super) fn packaged_chart(
    mut files: BTreeMap<String, Vec<u8>>,
    mut root: String,
) -> (BTreeMap<String, Vec<u8>>, String) {
    if !files.contains_key("Chart.yaml") {
        let tops: std::collections::BTreeSet<&str> = files
            .keys()
            .filter_map(|p| p.split_once('/').map(|(t, _)| t))
            .collect();
        if let [only] = tops.into_iter().collect::<Vec<_>>().as_slice() {
            let only = only.to_string();
            if files.contains_key(&format!("{only}/Chart.yaml")) {
                let prefix = format!("{only}/");
                files = files
                    .into_iter()
                    .filter_map(|(p, c)| p.strip_prefix(&prefix).map(|r| (r.to_string(), c)))
                    .collect();
                root = join(&root, &only);
            }
        }
    }
    (files, root)
}
