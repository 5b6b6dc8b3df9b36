//! `helm` chart sources (Helm chart repositories), and what they share with `oci` sources
//! ([`super::oci_registry`]): version ranges, the version last resolved, archives by digest.
//!
//! A Helm chart repository's `index.yaml` is read once per repository per pass; the `version`
//! (an exact version, a semver range as Helm writes it, or the newest release when absent) picks
//! an entry, whose archive is downloaded (relative URLs against the repository) and checked
//! against the index's `digest`.
//!
//! Fetched in Rust, not by `helm pull`, so that the fetch policy of the other chart sources holds
//! (`--allowed-chart-sources`, the archive limits, `--ca-file`, redirects only on the same host,
//! no credential in any argv). Archives are cached by digest beside the `tar` sources' (a version
//! already fetched is not downloaded again; the index or tag list is). The version each source
//! last resolved to is remembered in the cache, so that a version that disappears from the index
//! keeps the chart on what was last fetched, with a warning, rather than moving it back.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::registry_http::{client, get};
use super::{ArchiveLimits, ChartCache, ChartFiles, SourceFailure, QUOTE_CHARS};
use crate::api::armada::{ChartSource, SourceType};
use crate::source::fetch_policy::clip;

/// An index may be much larger than one chart (every version of every chart).
const INDEX_LIMIT_FACTOR: u64 = 4;

/// What one pass already read: indexes by URL, and the charts resolved, so that several
/// ArmadaCharts naming the same chart and version cost one fetch.
#[derive(Default)]
pub(super) struct PassMemo {
    indexes: HashMap<String, Arc<Index>>,
    pub(super) charts: HashMap<String, (Arc<ChartFiles>, Option<String>)>,
}

/// `index.yaml` of a chart repository: only what choosing and fetching need.
#[derive(serde::Deserialize)]
struct Index {
    #[serde(default)]
    entries: BTreeMap<String, Vec<IndexEntry>>,
}

#[derive(serde::Deserialize)]
struct IndexEntry {
    version: String,
    #[serde(default)]
    digest: Option<String>,
    #[serde(default)]
    urls: Vec<String>,
}

/// What a `version` asks for.
#[derive(Debug)]
pub(super) enum Wanted {
    /// Nothing written: the newest release (pre-releases excluded).
    Newest,
    /// One version (helm: `1.2.3`; oci: that tag).
    Exact(semver::Version),
    /// A semver range, as Helm writes them (`^1.2`, `>=1.0 <2.0`, `1.2.x`, `a || b`).
    Range(Vec<semver::VersionReq>),
}

impl Wanted {
    fn matches(&self, v: &semver::Version) -> bool {
        match self {
            Wanted::Newest => v.pre.is_empty(),
            Wanted::Exact(e) => e == v,
            Wanted::Range(any) => any.iter().any(|r| r.matches(v)),
        }
    }
}

/// A version as charts write it (`v1.2.3` too).
pub(super) fn version_of(text: &str) -> Option<semver::Version> {
    semver::Version::parse(text.trim().trim_start_matches('v')).ok()
}

/// Read `version:`: Helm's (Masterminds) range syntax turned into the `semver` crate's.
pub(super) fn wanted(version: Option<&str>) -> Result<Wanted, SourceFailure> {
    let Some(text) = version.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(Wanted::Newest);
    };
    if let Some(v) = version_of(text) {
        return Ok(Wanted::Exact(v));
    }
    let bad = |message: String| SourceFailure::BadVersion {
        version: clip(text, QUOTE_CHARS),
        message,
    };
    let mut any = Vec::new();
    for alternative in text.split("||") {
        let mut parts: Vec<String> = Vec::new();
        let tokens: Vec<&str> = alternative
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
            .collect();
        let mut i = 0;
        while i < tokens.len() {
            let t = tokens[i];
            if tokens.get(i + 1) == Some(&"-") && i + 2 < tokens.len() {
                // A hyphen range: `1.0 - 2.0` is `>=1.0, <=2.0`.
                parts.push(format!(">={t}"));
                parts.push(format!("<={}", tokens[i + 2]));
                i += 3;
                continue;
            }
            if t.chars().all(|c| "<>=~^!".contains(c)) && i + 1 < tokens.len() {
                parts.push(format!("{t}{}", tokens[i + 1]));
                i += 2;
                continue;
            }
            parts.push(t.to_string());
            i += 1;
        }
        let joined = parts
            .iter()
            .map(|p| {
                p.trim_start_matches('v')
                    .replace(".x", ".*")
                    .replace(".X", ".*")
            })
            .collect::<Vec<_>>()
            .join(", ");
        if joined.is_empty() {
            return Err(bad("an empty alternative".into()));
        }
        any.push(semver::VersionReq::parse(&joined).map_err(|e| bad(e.to_string()))?);
    }
    Ok(Wanted::Range(any))
}

/// The newest of `candidates` that `wanted` accepts.
pub(super) fn choose<'a, T>(
    wanted: &Wanted,
    candidates: impl IntoIterator<Item = (&'a str, T)>,
) -> Option<(semver::Version, &'a str, T)> {
    candidates
        .into_iter()
        .filter_map(|(text, item)| version_of(text).map(|v| (v, text, item)))
        .filter(|(v, _, _)| wanted.matches(v))
        .max_by(|a, b| a.0.cmp(&b.0))
}

/// `sha256:<hex>` or `<hex>` → the lowercase hex, if it is one.
pub(super) fn sha256_hex(text: &str) -> Option<String> {
    let hex = text.trim().strip_prefix("sha256:").unwrap_or(text.trim());
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}

/// The version a source last resolved to: `(version, archive digest hex)`, kept in the cache.
fn last_record_path(cache: &ChartCache, key: &str) -> PathBuf {
    cache
        .dir
        .join("resolved")
        .join(hex::encode(&Sha256::digest(key.as_bytes())[..16]))
}

pub(super) fn read_last(cache: &ChartCache, key: &str) -> Option<(String, String)> {
    let text = std::fs::read_to_string(last_record_path(cache, key)).ok()?;
    let (version, digest) = text.trim().split_once(' ')?;
    Some((version.to_string(), digest.to_string()))
}

pub(super) fn write_last(cache: &ChartCache, key: &str, version: &str, digest: &str) {
    let path = last_record_path(cache, key);
    // Best effort: without the record only the "version disappeared" fallback is lost.
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(path, format!("{version} {digest}\n"));
}

/// The archive of `digest` (hex) from the cache, or downloaded by `fetch` and checked.
pub(super) fn archive(
    cache: &ChartCache,
    url: &str,
    digest: Option<&str>,
    what: &str,
    fetch: impl FnOnce() -> Result<Vec<u8>, SourceFailure>,
) -> Result<(Vec<u8>, String), SourceFailure> {
    if let Some(bytes) = digest.and_then(|d| super::cached_archive(cache, d)) {
        return Ok((bytes, digest.unwrap_or_default().to_string()));
    }
    let bytes = fetch()?;
    let actual = hex::encode(Sha256::digest(&bytes));
    if let Some(expected) = digest {
        if expected != actual {
            return Err(SourceFailure::PublishedDigestMismatch {
                url: crate::api::redact::redact_url_passwords(url),
                what: what.to_string(),
                expected: format!("sha256:{expected}"),
                actual: format!("sha256:{actual}"),
            });
        }
    }
    super::store_archive(cache, &actual, &bytes)?;
    Ok((bytes, actual))
}

/// The files of a `helm` source.
pub(super) fn helm_files(
    source: &ChartSource,
    repo_location: &str,
    cache: &ChartCache,
    memo: &mut PassMemo,
    warnings: &mut Vec<String>,
) -> Result<ChartFiles, SourceFailure> {
    let repo = source.location.trim().trim_end_matches('/').to_string();
    if !(repo.starts_with("https://") || repo.starts_with("http://")) {
        return Err(SourceFailure::HelmLocation {
            url: clip(&repo, QUOTE_CHARS),
        });
    }
    cache.policy.check(&repo)?;
    let name = source
        .chart
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .ok_or(SourceFailure::ChartNameMissing)?;
    let wanted = wanted(source.version.as_deref())?;
    let limits = cache.archive_limits;
    let auth = cache.registry_auth(&repo, repo_location);
    let http = client(limits, cache).map_err(|message| SourceFailure::Http {
        url: repo.clone(),
        message,
    })?;
    let index_url = format!("{repo}/index.yaml");
    let index = match memo.indexes.get(&index_url) {
        Some(index) => index.clone(),
        None => {
            let bytes = get(
                &http,
                &index_url,
                None,
                auth.as_ref(),
                &mut None,
                limits.max_archive_bytes * INDEX_LIMIT_FACTOR,
            )?;
            let text = String::from_utf8_lossy(&bytes);
            let index: Index = serde_saphyr::from_str(&text).map_err(|e| SourceFailure::Index {
                url: crate::api::redact::redact_url_passwords(&index_url),
                message: clip(&e.to_string().replace('\n', " "), QUOTE_CHARS),
            })?;
            let index = Arc::new(index);
            memo.indexes.insert(index_url.clone(), index.clone());
            index
        }
    };
    let shown_repo = crate::api::redact::redact_url_passwords(&repo);
    let entries = index
        .entries
        .get(name)
        .ok_or_else(|| SourceFailure::ChartNotInIndex {
            chart: clip(name, QUOTE_CHARS),
            url: shown_repo.clone(),
        })?;
    let key = format!(
        "helm {repo} {name} {}",
        source.version.as_deref().unwrap_or("")
    );
    let chosen = choose(&wanted, entries.iter().map(|e| (e.version.as_str(), e)));
    let last = read_last(cache, &key);
    // The version last fetched is gone from the index and nothing as new replaces it: stay on it.
    if let Some((last_version, last_digest)) = &last {
        let gone = !entries.iter().any(|e| &e.version == last_version);
        let older = match (&chosen, version_of(last_version)) {
            (None, _) => true,
            (Some((v, _, _)), Some(l)) => *v < l,
            (Some(_), None) => false,
        };
        if gone && older {
            if let Some(bytes) = super::cached_archive(cache, last_digest) {
                warnings.push(format!(
                    "version {last_version} of chart `{name}` is no longer in the index of {shown_repo}; keeping {last_version}, last fetched{}",
                    match &chosen {
                        Some((v, _, _)) => format!(" (the newest left in range is {v})"),
                        None => String::new(),
                    }
                ));
                return files_of(&repo, name, last_version, last_digest, &bytes, limits);
            }
        }
    }
    let Some((version, version_text, entry)) = chosen else {
        let mut known: Vec<semver::Version> = entries
            .iter()
            .filter_map(|e| version_of(&e.version))
            .collect();
        known.sort();
        return Err(SourceFailure::NoVersion {
            chart: clip(name, QUOTE_CHARS),
            version: clip(source.version.as_deref().unwrap_or(""), QUOTE_CHARS),
            url: shown_repo,
            newest: known
                .last()
                .map(|v| v.to_string())
                .unwrap_or_else(|| "none".into()),
        });
    };
    let _ = version;
    let url_text = entry.urls.first().ok_or_else(|| SourceFailure::Index {
        url: crate::api::redact::redact_url_passwords(&index_url),
        message: format!("`{name}` {version_text} lists no `urls`"),
    })?;
    let url = url::Url::parse(&format!("{repo}/"))
        .and_then(|base| base.join(url_text))
        .map_err(|e| SourceFailure::Index {
            url: crate::api::redact::redact_url_passwords(&index_url),
            message: format!(
                "`{name}` {version_text}: url `{}`: {e}",
                clip(url_text, QUOTE_CHARS)
            ),
        })?
        .to_string();
    cache.policy.check(&url)?;
    let digest = entry.digest.as_deref().and_then(sha256_hex);
    let same_origin = url::Url::parse(&url).ok().map(|u| u.origin())
        == url::Url::parse(&repo).ok().map(|u| u.origin());
    let (bytes, digest) = archive(cache, &url, digest.as_deref(), "the index", || {
        // Credentials go with the archive only to the repository's own origin.
        let auth = if same_origin { auth.as_ref() } else { None };
        get(&http, &url, None, auth, &mut None, limits.max_archive_bytes)
    })?;
    write_last(cache, &key, version_text, &digest);
    files_of(&repo, name, version_text, &digest, &bytes, limits)
}

/// A chart archive's files and how errors and status name it.
pub(super) fn files_of(
    location: &str,
    name: &str,
    version: &str,
    digest: &str,
    bytes: &[u8],
    limits: ArchiveLimits,
) -> Result<ChartFiles, SourceFailure> {
    let shown = crate::api::redact::redact_url_passwords(location);
    let root = format!("{shown}/{name}@{version}");
    let all = super::unpack(&root, bytes, limits)?;
    let (files, root) = super::packaged_chart(all, root);
    if !files.contains_key("Chart.yaml") {
        return Err(SourceFailure::NotAChart { root });
    }
    Ok(ChartFiles {
        root,
        revision: Some(format!("{version}@sha256:{digest}")),
        files,
    })
}

/// The memo key of a source: the same chart and version asked twice is fetched once.
pub(super) fn memo_key(source: &ChartSource) -> Option<String> {
    match source.type_ {
        SourceType::Helm | SourceType::Oci => Some(format!(
            "{:?} {} {} {}",
            source.type_,
            source.location.trim(),
            source.chart.as_deref().unwrap_or(""),
            source.version.as_deref().unwrap_or("")
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(range: &str, versions: &[&str]) -> Option<String> {
        let wanted = wanted(Some(range)).unwrap();
        choose(&wanted, versions.iter().map(|v| (*v, ()))).map(|(v, _, _)| v.to_string())
    }

    #[test]
    fn ranges_are_read_as_helm_writes_them() {
        let all = ["1.0.0", "1.2.0", "1.10.1", "2.0.0", "2.1.0-rc.1", "v3.0.0"];
        assert_eq!(pick("1.2.0", &all).as_deref(), Some("1.2.0"));
        assert_eq!(pick("^1.0", &all).as_deref(), Some("1.10.1"));
        assert_eq!(pick(">=1.0 <2.0", &all).as_deref(), Some("1.10.1"));
        assert_eq!(pick(">= 1.0, < 1.5", &all).as_deref(), Some("1.2.0"));
        assert_eq!(pick("1.2.x", &all).as_deref(), Some("1.2.0"));
        assert_eq!(pick("~1.2 || ^3", &all).as_deref(), Some("3.0.0"));
        assert_eq!(pick("1.0 - 1.5", &all).as_deref(), Some("1.2.0"));
        assert_eq!(pick("^2", &all).as_deref(), Some("2.0.0"));
        assert_eq!(pick("^4", &all), None);
        let newest = choose(&Wanted::Newest, all.iter().map(|v| (*v, ())));
        assert_eq!(
            newest.map(|(v, _, _)| v.to_string()).as_deref(),
            Some("3.0.0")
        );
        let err = wanted(Some(">=banana")).unwrap_err().to_string();
        assert!(err.contains("`version: >=banana`"), "{err}");
    }

    #[test]
    fn digests_are_read_with_or_without_their_algorithm() {
        let hex = "a".repeat(64);
        assert_eq!(sha256_hex(&format!("sha256:{hex}")), Some(hex.clone()));
        assert_eq!(sha256_hex(&hex.to_uppercase()), Some(hex));
        assert_eq!(sha256_hex("sha256:abc"), None);
    }
}
