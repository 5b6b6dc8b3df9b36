//! `helm` and `oci` chart sources: released charts where they are published.
//!
//! - `helm`: a Helm chart repository. Its `index.yaml` is read once per repository per pass; the
//!   `version` (an exact version, a semver range, or the newest release when absent) picks an
//!   entry, whose archive is downloaded (relative URLs against the repository) and checked
//!   against the index's `digest`.
//! - `oci`: `oci://host/path/chart` in an OCI registry, over the distribution API (https): a tag,
//!   a semver range over the registry's tags (`tags/list`; helm writes `+` as `_`), or the
//!   manifest's `sha256:` digest. The manifest's Helm chart layer is downloaded and checked
//!   against its digest. A `401` is answered once, with basic auth or with a token from the
//!   registry's `Bearer` realm.
//!
//! Both are fetched in Rust, not by `helm pull`, so that they keep the fetch policy of the other
//! chart sources: `--allowed-chart-sources` (an `oci://host/p` location is checked as
//! `https://host/p`), the archive limits, `--ca-file`, redirects only on the same host, and no
//! credential in any argv. Archives are cached by digest beside the `tar` sources' (a version
//! already fetched is not downloaded again; the index or tag list is). The version each source
//! last resolved to is remembered in the cache, so that a version that disappears from the
//! index keeps the chart on what was last fetched, with a warning, rather than moving it back.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::{ArchiveLimits, ChartCache, ChartFiles, SourceFailure, QUOTE_CHARS};
use crate::api::armada::{ChartSource, SourceType};
use crate::source::fetch_policy::{clip, describe_http_error, same_host_redirects};

/// The media type of the chart archive in an OCI manifest that `helm push` writes.
const HELM_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// Accept header for manifests.
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// An index may be much larger than one chart (every version of every chart).
const INDEX_LIMIT_FACTOR: u64 = 4;

/// Credentials for one chart repository or registry host. Never printed.
#[derive(Clone, Default)]
pub struct RegistryAuth {
    pub username: Option<String>,
    pub password: Option<crate::source::git::auth::SecretValue>,
    pub token: Option<crate::source::git::auth::SecretValue>,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RegistryAuth(***)")
    }
}

/// Why a `.dockerconfigjson` cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("`.dockerconfigjson` of the git credentials: {0}")]
pub struct DockerConfigError(String);

/// The chart repository and registry credentials of a `.dockerconfigjson` (`{"auths": {HOST:
/// {"username", "password"} | {"auth": base64("user:password")} | {"identitytoken"} |
/// {"registrytoken"}}}`), by `host` or `host:port` (a scheme or path in the key is dropped).
pub fn registries_of(
    credentials: &crate::source::git::auth::Credentials,
) -> Result<BTreeMap<String, RegistryAuth>, DockerConfigError> {
    use crate::source::git::auth::SecretValue;
    let mut out = BTreeMap::new();
    let Some(text) = credentials.docker_config.as_ref() else {
        return Ok(out);
    };
    // serde_json's messages quote no input, so the error never shows a password.
    let config: serde_json::Value = serde_json::from_str(text.expose())
        .map_err(|e| DockerConfigError(format!("not JSON: {e}")))?;
    let auths = config
        .get("auths")
        .and_then(|a| a.as_object())
        .ok_or_else(|| DockerConfigError("no `auths` object".into()))?;
    for (key, entry) in auths {
        let host = key
            .split_once("://")
            .map_or(key.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let field = |name: &str| {
            entry
                .get(name)
                .and_then(|v| v.as_str())
                .filter(|v| !v.is_empty())
        };
        let mut auth = RegistryAuth {
            username: field("username").map(str::to_string),
            password: field("password").map(SecretValue::new),
            token: field("registrytoken")
                .or(field("identitytoken"))
                .map(SecretValue::new),
        };
        if let Some(encoded) = field("auth") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    DockerConfigError(format!(
                        "`auths.{host}.auth` is not base64 of `user:password`"
                    ))
                })?;
            let (user, password) = decoded.split_once(':').ok_or_else(|| {
                DockerConfigError(format!(
                    "`auths.{host}.auth` is not base64 of `user:password`"
                ))
            })?;
            auth.username = Some(user.to_string());
            auth.password = Some(SecretValue::new(password));
        }
        out.insert(host, auth);
    }
    Ok(out)
}

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
fn version_of(text: &str) -> Option<semver::Version> {
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
fn choose<'a, T>(
    wanted: &Wanted,
    candidates: impl IntoIterator<Item = (&'a str, T)>,
) -> Option<(semver::Version, &'a str, T)> {
    candidates
        .into_iter()
        .filter_map(|(text, item)| version_of(text).map(|v| (v, text, item)))
        .filter(|(v, _, _)| wanted.matches(v))
        .max_by(|a, b| a.0.cmp(&b.0))
}

/// An HTTP client within the cache's policy: each request bounded by the archive time limit
/// and `--fetch-timeout`, whichever is shorter; `--ca-file`; same-host redirects.
fn client(limits: ArchiveLimits, cache: &ChartCache) -> Result<reqwest::blocking::Client, String> {
    let mut builder = reqwest::blocking::Client::builder()
        .timeout(limits.timeout.min(cache.fetch_timeout))
        .redirect(same_host_redirects());
    for certificate in cache
        .ca
        .as_ref()
        .map(|c| c.certificates.as_slice())
        .unwrap_or_default()
    {
        builder = builder.add_root_certificate(certificate.clone());
    }
    builder.build().map_err(|e| e.to_string())
}

/// GET `url` with `auth` (answering one 401 challenge), reading at most `limit` bytes.
fn get(
    http: &reqwest::blocking::Client,
    url: &str,
    accept: Option<&str>,
    auth: Option<&RegistryAuth>,
    token: &mut Option<String>,
    limit: u64,
) -> Result<Vec<u8>, SourceFailure> {
    let shown = crate::api::redact::redact_url_passwords(url);
    let fail = |message: String| SourceFailure::Http {
        url: shown.clone(),
        message: clip(&message, 500),
    };
    let send = |authorization: Option<String>| {
        let mut request = http.get(url);
        if let Some(accept) = accept {
            request = request.header(reqwest::header::ACCEPT, accept);
        }
        if let Some(value) = authorization {
            request = request.header(reqwest::header::AUTHORIZATION, value);
        }
        request.send().map_err(|e| {
            let mut message = describe_http_error(e);
            if message.contains("certificate") {
                message.push_str(
                    " (a private CA is trusted with --ca-file, SSL_CERT_FILE or SSL_CERT_DIR)",
                );
            }
            fail(message)
        })
    };
    let basic = auth.and_then(|a| {
        let user = a.username.as_deref()?;
        let password = a.password.as_ref().map(|p| p.expose()).unwrap_or("");
        Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        ))
    });
    let first = match (token.as_ref(), auth.and_then(|a| a.token.as_ref())) {
        (Some(t), _) => Some(format!("Bearer {t}")),
        (None, Some(t)) => Some(format!("Bearer {}", t.expose())),
        (None, None) => basic.clone(),
    };
    let mut response = send(first)?;
    if response.status() == reqwest::StatusCode::UNAUTHORIZED {
        let challenge = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let retry = if let Some(params) = challenge.strip_prefix("Bearer ") {
            let fetched = bearer_token(http, params, basic.clone(), &fail)?;
            *token = Some(fetched.clone());
            Some(format!("Bearer {fetched}"))
        } else {
            basic.clone()
        };
        if retry.is_some() {
            response = send(retry)?;
        }
    }
    let status = response.status();
    if !status.is_success() {
        let hint = if status == reqwest::StatusCode::UNAUTHORIZED {
            if auth.is_some() {
                " (the credentials for this host were refused)"
            } else {
                " (no credentials for this host: add it to the `.dockerconfigjson` of the git credentials Secret)"
            }
        } else {
            ""
        };
        return Err(fail(format!("HTTP {status}{hint}")));
    }
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(SourceFailure::ArchiveTooLarge {
            url: shown.clone(),
            limit,
        });
    }
    let mut bytes = Vec::new();
    response
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > limit {
        return Err(SourceFailure::ArchiveTooLarge { url: shown, limit });
    }
    Ok(bytes)
}

/// A registry token from the `Bearer realm="…",service="…",scope="…"` challenge.
fn bearer_token(
    http: &reqwest::blocking::Client,
    params: &str,
    basic: Option<String>,
    fail: &dyn Fn(String) -> SourceFailure,
) -> Result<String, SourceFailure> {
    let mut fields = HashMap::new();
    for part in params.split(',') {
        if let Some((k, v)) = part.trim().split_once('=') {
            fields.insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
        }
    }
    let realm = fields
        .get("realm")
        .ok_or_else(|| fail("HTTP 401 with a Bearer challenge that names no realm".into()))?;
    let mut url =
        url::Url::parse(realm).map_err(|e| fail(format!("the token realm is not a URL: {e}")))?;
    for key in ["service", "scope"] {
        if let Some(v) = fields.get(key) {
            url.query_pairs_mut().append_pair(key, v);
        }
    }
    let mut request = http.get(url.as_str());
    if let Some(b) = basic {
        request = request.header(reqwest::header::AUTHORIZATION, b);
    }
    let response = request
        .send()
        .map_err(|e| fail(format!("token request: {}", describe_http_error(e))))?;
    if !response.status().is_success() {
        return Err(fail(format!(
            "HTTP 401; the token realm answered HTTP {}",
            response.status()
        )));
    }
    let mut text = Vec::new();
    response
        .take(1024 * 1024)
        .read_to_end(&mut text)
        .map_err(|e| fail(format!("token response: {e}")))?;
    let body: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| fail(format!("token response is not JSON: {e}")))?;
    body.get("token")
        .or_else(|| body.get("access_token"))
        .and_then(|t| t.as_str())
        .map(str::to_string)
        .ok_or_else(|| fail("the token realm's answer holds no token".into()))
}

/// `sha256:<hex>` or `<hex>` → the lowercase hex, if it is one.
fn sha256_hex(text: &str) -> Option<String> {
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

fn read_last(cache: &ChartCache, key: &str) -> Option<(String, String)> {
    let text = std::fs::read_to_string(last_record_path(cache, key)).ok()?;
    let (version, digest) = text.trim().split_once(' ')?;
    Some((version.to_string(), digest.to_string()))
}

fn write_last(cache: &ChartCache, key: &str, version: &str, digest: &str) {
    let path = last_record_path(cache, key);
    // Best effort: without the record only the "version disappeared" fallback is lost.
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(path, format!("{version} {digest}\n"));
}

/// The archive of `digest` (hex) from the cache, or downloaded by `fetch` and checked.
fn archive(
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
    let auth = cache.registry_auth(&repo);
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
fn files_of(
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

/// The files of an `oci` source.
pub(super) fn oci_files(
    source: &ChartSource,
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
    cache.policy.check(&https)?;
    let name = path.rsplit('/').next().unwrap_or(path);
    let base = format!("https://{host}/v2/{path}");
    let limits = cache.archive_limits;
    let auth = cache.registry_auth(&https);
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
    fn docker_config_credentials_by_host() {
        use crate::source::git::auth::{Credentials, SecretValue};
        let credentials = Credentials {
            docker_config: Some(SecretValue::new(
                r#"{"auths": {"https://Registry.example:5000/v1/": {"auth": "dTpwdw=="}, "charts.example": {"username": "a", "password": "b"}, "ghcr.io": {"registrytoken": "t"}}}"#,
            )),
            ..Credentials::default()
        };
        let all = registries_of(&credentials).unwrap();
        let r = &all["registry.example:5000"];
        assert_eq!(r.username.as_deref(), Some("u"));
        assert_eq!(r.password.as_ref().map(|p| p.expose()), Some("pw"));
        assert_eq!(all["charts.example"].username.as_deref(), Some("a"));
        assert_eq!(all["ghcr.io"].token.as_ref().map(|t| t.expose()), Some("t"));
        let bad = Credentials {
            docker_config: Some(SecretValue::new(r#"{"auths": {"h": {"auth": "secret!"}}}"#)),
            ..Credentials::default()
        };
        let err = registries_of(&bad).unwrap_err().to_string();
        assert!(
            err.contains("`auths.h.auth` is not base64") && !err.contains("secret!"),
            "{err}"
        );
    }

    #[test]
    fn digests_are_read_with_or_without_their_algorithm() {
        let hex = "a".repeat(64);
        assert_eq!(sha256_hex(&format!("sha256:{hex}")), Some(hex.clone()));
        assert_eq!(sha256_hex(&hex.to_uppercase()), Some(hex));
        assert_eq!(sha256_hex("sha256:abc"), None);
    }
}
