//! A `tar` chart source's archive: downloaded over http(s) within its limits and unpacked in
//! memory, refusing anything that could escape or exhaust (see the module above for the rules).

use std::collections::BTreeMap;
use std::io::Read;

use super::{clean_relative, ArchiveLimits, CaCertificates, SourceFailure, QUOTE_CHARS};
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
