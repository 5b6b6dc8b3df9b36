//! HTTP to chart repositories and OCI registries, for the `helm` and `oci` sources: the
//! credentials of each host (from a `.dockerconfigjson`), one client within the fetch policy
//! (`--ca-file`, the time bound, redirects only on the same host), and a GET that answers one
//! `401` challenge — with basic auth, or with a token from the registry's `Bearer` realm.
//! No credential reaches an error, a log or an argv.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;

use base64::Engine as _;

use super::{ArchiveLimits, ChartCache, SourceFailure};
use crate::source::fetch_policy::{
    clip, describe_http_error, same_host_redirects, ChartSourcePolicy,
};

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

/// An HTTP client within the cache's policy, and that policy (a registry's token realm must
/// satisfy `--allowed-chart-sources` too).
pub(super) struct Http {
    client: reqwest::blocking::Client,
    policy: ChartSourcePolicy,
}

/// An HTTP client within the cache's policy: each request bounded by the archive time limit
/// and `--fetch-timeout`, whichever is shorter; `--ca-file`; same-host redirects.
pub(super) fn client(limits: ArchiveLimits, cache: &ChartCache) -> Result<Http, String> {
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
    Ok(Http {
        client: builder.build().map_err(|e| e.to_string())?,
        policy: cache.policy.clone(),
    })
}

/// GET `url` with `auth` (answering one 401 challenge), reading at most `limit` bytes.
pub(super) fn get(
    http: &Http,
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
        let mut request = http.client.get(url);
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
            let fetched = bearer_token(http, url, params, basic.clone(), &fail)?;
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

/// The `key="value"` parameters of a challenge; a quoted value may hold commas
/// (`scope="repository:org/app:pull,push"`).
fn challenge_params(params: &str) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    let mut rest = params.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => match quoted.find('"') {
                Some(end) => (&quoted[..end], &quoted[end + 1..]),
                None => (quoted, ""),
            },
            None => match after.find(',') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            },
        };
        fields.insert(key, value.trim().to_string());
        rest = next.trim_start().trim_start_matches(',');
    }
    fields
}

/// A registry token from the `Bearer realm="…",service="…",scope="…"` challenge that `url`
/// answered. The realm is fetched within `--allowed-chart-sources`, and never over http from an
/// https registry: the registry's credentials go there.
fn bearer_token(
    http: &Http,
    url: &str,
    params: &str,
    basic: Option<String>,
    fail: &dyn Fn(String) -> SourceFailure,
) -> Result<String, SourceFailure> {
    let fields = challenge_params(params);
    let realm = fields
        .get("realm")
        .ok_or_else(|| fail("HTTP 401 with a Bearer challenge that names no realm".into()))?;
    let mut realm_url =
        url::Url::parse(realm).map_err(|e| fail(format!("the token realm is not a URL: {e}")))?;
    if url.starts_with("https://") && realm_url.scheme() != "https" {
        return Err(fail(format!(
            "HTTP 401; the token realm {} is not https, refusing to send credentials there",
            crate::api::redact::redact_url_passwords(realm)
        )));
    }
    http.policy
        .check(realm_url.as_str())
        .map_err(|e| fail(format!("HTTP 401; the token realm: {e}")))?;
    for key in ["service", "scope"] {
        if let Some(v) = fields.get(key) {
            realm_url.query_pairs_mut().append_pair(key, v);
        }
    }
    let mut request = http.client.get(realm_url.as_str());
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn challenge_parameters_keep_commas_inside_quotes() {
        let p = challenge_params(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:org/app:pull,push""#,
        );
        assert_eq!(p["realm"], "https://auth.example/token");
        assert_eq!(p["service"], "registry.example");
        assert_eq!(p["scope"], "repository:org/app:pull,push");
        let bare = challenge_params("realm=https://a/t, Service=s");
        assert_eq!(bare["realm"], "https://a/t");
        assert_eq!(bare["service"], "s");
    }
}
