//! `oci` chart sources: a chart in an OCI registry, as `helm push` put it there, over the
//! distribution API (https): a tag, a semver range over the registry's tags (`tags/list`; helm
//! writes `+` as `_`), or the manifest's `sha256:` digest. The manifest's Helm chart layer is
//! downloaded and checked against its digest. A `401` is answered as
//! [`super::registry_http::get`] says (basic auth, or a token from the registry's `Bearer` realm).

use sha2::{Digest, Sha256};

use super::helm_repository::{
    archive, choose, files_of, read_last, sha256_hex, version_of, wanted, write_last,
};
use super::registry_http::{client, get};
use super::{ChartCache, ChartFiles, SourceFailure, QUOTE_CHARS};
use crate::api::armada::ChartSource;
use crate::source::fetch_policy::{clip, SourceRefused};

/// The media type of the chart archive in an OCI manifest that `helm push` writes.
const HELM_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// Accept header for manifests.
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// The files of an `oci` source.
pub(super) fn oci_files(
    source: &ChartSource,
    repo_location: &str,
    cache: &ChartCache,
    warnings: &mut Vec<String>,
) -> Result<ChartFiles, SourceFailure> {
    let location = source.location.trim().trim_end_matches('/');
    let bad_location = || SourceFailure::OciLocation {
        location: clip(location, QUOTE_CHARS),
    };
    let rest = location.strip_prefix("oci://").ok_or_else(bad_location)?;
    let (host, path) = rest.split_once('/').ok_or_else(bad_location)?;
    if host.is_empty() || path.is_empty() || host.contains('@') {
        return Err(bad_location());
    }
    let https = format!("https://{rest}");
    // Refused as written (`oci://host:port/path`), saying how it was checked.
    cache.policy.check(&https).map_err(|e| match e {
        SourceRefused::NotAllowed { url, allowed } => SourceRefused::OciNotAllowed {
            location: clip(location, QUOTE_CHARS),
            checked: url,
            allowed,
        },
        e => e,
    })?;
    let name = path.rsplit('/').next().unwrap_or(path);
    let base = format!("https://{host}/v2/{path}");
    let limits = cache.archive_limits;
    let auth = cache.registry_auth(&https, repo_location);
    let http = client(limits, cache).map_err(|message| SourceFailure::Http {
        url: https.clone(),
        message,
    })?;
    let mut token = None;
    let version = source.version.as_deref().map(str::trim).unwrap_or("");
    let key = format!("oci {location} {version}");
    // The reference to fetch, and the version it stands for.
    let (reference, shown_version) = if let Some(hex) =
        sha256_hex(version).filter(|_| version.starts_with("sha256:"))
    {
        (format!("sha256:{hex}"), String::new())
    } else if version_of(version).is_some() {
        (version.replace('+', "_"), version.to_string())
    } else {
        match wanted(Some(version).filter(|v| !v.is_empty())) {
            // Not a version nor a range: a plain tag (`stable`).
            Err(_) => (version.to_string(), version.to_string()),
            Ok(wanted) => {
                let body = get(
                    &http,
                    &format!("{base}/tags/list?n=10000"),
                    Some("application/json"),
                    auth.as_ref(),
                    &mut token,
                    limits.max_archive_bytes,
                )?;
                let tags: Vec<String> = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("tags").cloned())
                    .and_then(|t| serde_json::from_value(t).ok())
                    .unwrap_or_default();
                let as_versions: Vec<(String, String)> = tags
                    .iter()
                    .map(|t| (t.replace('_', "+"), t.clone()))
                    .collect();
                let chosen = choose(&wanted, as_versions.iter().map(|(v, t)| (v.as_str(), t)));
                match chosen {
                    Some((_, v, tag)) => (tag.clone(), v.to_string()),
                    None => {
                        if let Some((last_version, last_digest)) = read_last(cache, &key) {
                            if let Some(bytes) = super::cached_archive(cache, &last_digest) {
                                warnings.push(format!(
                                    "no tag of {location} satisfies `{version}` any more; keeping {last_version}, last fetched"
                                ));
                                let mut files = files_of(
                                    location,
                                    name,
                                    &last_version,
                                    &last_digest,
                                    &bytes,
                                    limits,
                                )?;
                                files.root = format!("{location}:{last_version}");
                                return Ok(files);
                            }
                        }
                        let mut known: Vec<semver::Version> = as_versions
                            .iter()
                            .filter_map(|(v, _)| version_of(v))
                            .collect();
                        known.sort();
                        return Err(SourceFailure::NoVersion {
                            chart: clip(name, QUOTE_CHARS),
                            version: clip(version, QUOTE_CHARS),
                            url: location.to_string(),
                            newest: known
                                .last()
                                .map(|v| v.to_string())
                                .unwrap_or_else(|| "none".into()),
                        });
                    }
                }
            }
        }
    };
    let manifest_url = format!("{base}/manifests/{reference}");
    let manifest = get(
        &http,
        &manifest_url,
        Some(OCI_MANIFEST),
        auth.as_ref(),
        &mut token,
        limits.max_archive_bytes,
    )?;
    let manifest_digest = hex::encode(Sha256::digest(&manifest));
    if let Some(pinned) = reference.strip_prefix("sha256:") {
        if pinned != manifest_digest {
            return Err(SourceFailure::PublishedDigestMismatch {
                url: manifest_url,
                what: "`version`".into(),
                expected: reference.clone(),
                actual: format!("sha256:{manifest_digest}"),
            });
        }
    }
    let parsed: serde_json::Value =
        serde_json::from_slice(&manifest).map_err(|e| SourceFailure::Http {
            url: manifest_url.clone(),
            message: format!("the manifest is not JSON: {e}"),
        })?;
    let layer = parsed
        .get("layers")
        .and_then(|l| l.as_array())
        .and_then(|layers| {
            layers
                .iter()
                .find(|l| l.get("mediaType").and_then(|m| m.as_str()) == Some(HELM_LAYER))
        })
        .ok_or_else(|| SourceFailure::NoChartLayer {
            url: manifest_url.clone(),
        })?;
    let layer_digest = layer
        .get("digest")
        .and_then(|d| d.as_str())
        .and_then(sha256_hex)
        .ok_or_else(|| SourceFailure::NoChartLayer {
            url: manifest_url.clone(),
        })?;
    let blob_url = format!("{base}/blobs/sha256:{layer_digest}");
    let (bytes, _) = archive(
        cache,
        &blob_url,
        Some(&layer_digest),
        "the manifest",
        || {
            get(
                &http,
                &blob_url,
                None,
                auth.as_ref(),
                &mut token,
                limits.max_archive_bytes,
            )
        },
    )?;
    // The chart's own version, when the reference was a digest.
    let mut files = files_of(
        location,
        name,
        &shown_version,
        &manifest_digest,
        &bytes,
        limits,
    )?;
    let chart_version = if shown_version.is_empty() {
        chart_version(&files).unwrap_or_default()
    } else {
        shown_version
    };
    write_last(cache, &key, &chart_version, &layer_digest);
    files.root = format!("{location}:{chart_version}");
    files.revision = Some(format!("{chart_version}@sha256:{manifest_digest}"));
    Ok(files)
}

/// `version:` of the chart's Chart.yaml.
fn chart_version(files: &ChartFiles) -> Option<String> {
    let text = String::from_utf8_lossy(files.files.get("Chart.yaml")?).to_string();
    text.lines()
        .find_map(|l| l.strip_prefix("version:"))
        .map(|v| v.trim().trim_matches(['"', '\'']).to_string())
}
