//! A Provider resolved with its Secret, and the HTTP request each provider type makes of an
//! event. Pure: no I/O, the time is an argument.
//!
//! Nothing here puts an address, a token or a header value into an error: a Provider's address
//! may carry a token (a Slack webhook), and errors end up in logs and status.

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};
use sha2::Sha256;
use url::Url;

use super::{CommitState, Event, Severity};
use crate::api::notification::{ProviderSpec, ProviderType};

/// The longest description a commit status gets (GitHub's limit).
pub const MAX_DESCRIPTION: usize = 140;

/// The Secret keys a Provider reads.
pub const KEY_ADDRESS: &str = "address";
pub const KEY_TOKEN: &str = "token";
pub const KEY_HEADERS: &str = "headers";

/// Why a Provider cannot be used (its `Ready=False` reason and message). No variant holds an
/// address or a secret value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProviderProblem {
    #[error("Secret {name} (secretRef) does not exist in the Provider's namespace")]
    SecretNotFound { name: String },
    /// The identity the Provider's Secret is read as (Weft, or the account of the root that
    /// applied the Provider) may not read it.
    #[error("Secret {name} (secretRef) may not be read as the identity of the root that applied this Provider: {why}")]
    SecretForbidden { name: String, why: String },
    #[error("Secret {name} has no key `{key}`, which provider type {type_} needs")]
    SecretKeyMissing {
        name: String,
        key: &'static str,
        type_: &'static str,
    },
    #[error("provider type {type_} needs a Secret (secretRef) with the key `token`")]
    SecretMissing { type_: &'static str },
    #[error("no address: set spec.address or the key `address` of the Secret")]
    AddressMissing,
    #[error("the address (from {from}) is not usable: {why}")]
    InvalidAddress { from: &'static str, why: String },
    #[error("the key `headers` of Secret {name} is not a YAML map of strings")]
    BadHeaders { name: String },
    /// The operator's `--allowed-notification-urls` refuses the destination.
    #[error("{0}")]
    NotAllowed(#[from] super::destination_policy::AddressRefused),
}

impl ProviderProblem {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ProviderProblem::SecretNotFound { .. } => "SecretNotFound",
            ProviderProblem::SecretForbidden { .. } => "SecretForbidden",
            ProviderProblem::SecretKeyMissing { .. } | ProviderProblem::SecretMissing { .. } => {
                "SecretKeyMissing"
            }
            ProviderProblem::AddressMissing => "AddressMissing",
            ProviderProblem::InvalidAddress { .. } => "InvalidAddress",
            ProviderProblem::BadHeaders { .. } => "InvalidHeaders",
            ProviderProblem::NotAllowed(_) => "AddressNotAllowed",
        }
    }
}

/// Where a provider sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A webhook URL (generic, generic-hmac, slack).
    Webhook(Url),
    /// GitHub's API base (`https://api.github.com` or `<scheme>://<host>/api/v3`) and the repository.
    Github {
        api: String,
        owner: String,
        repo: String,
    },
    /// GitLab's base (`<scheme>://<host>`) and the project path (`group/sub/project`).
    Gitlab { base: String, project: String },
}

/// A Provider with its Secret read: everything needed to send.
#[derive(Clone, PartialEq, Eq)]
pub struct ResolvedProvider {
    pub type_: ProviderType,
    pub target: Target,
    /// The Secret's `token` (bearer token, API token or HMAC key).
    pub token: Option<String>,
    /// Extra headers (generic, generic-hmac), from the Secret's `headers`.
    pub headers: Vec<(String, String)>,
    pub channel: Option<String>,
    pub username: Option<String>,
}

// Never print the target or the token (`{:?}` of a resolved provider reaches no log, but a
// future one must not leak either).
impl std::fmt::Debug for ResolvedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedProvider")
            .field("type_", &self.type_)
            .finish_non_exhaustive()
    }
}

/// Resolve `spec` with the data of its Secret (`None`: the Secret does not exist, or none is
/// named).
pub fn resolve(
    spec: &ProviderSpec,
    secret: Option<&BTreeMap<String, Vec<u8>>>,
) -> Result<ResolvedProvider, ProviderProblem> {
    let type_ = spec.type_;
    let secret_name = spec.secret_ref.as_ref().map(|r| r.name.clone());
    let data = match (&secret_name, secret) {
        (Some(name), None) => return Err(ProviderProblem::SecretNotFound { name: name.clone() }),
        (_, data) => data,
    };
    let text = |key: &str| {
        data.and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(v).trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let token = text(KEY_TOKEN);
    if type_.needs_token() && token.is_none() {
        return Err(match secret_name {
            Some(name) => ProviderProblem::SecretKeyMissing {
                name,
                key: KEY_TOKEN,
                type_: type_.as_str(),
            },
            None => ProviderProblem::SecretMissing {
                type_: type_.as_str(),
            },
        });
    }
    let (address, from) = match text(KEY_ADDRESS) {
        Some(a) => (a, "the Secret"),
        None => match spec
            .address
            .as_deref()
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            Some(a) => (a.to_string(), "spec.address"),
            None => return Err(ProviderProblem::AddressMissing),
        },
    };
    let invalid = |why: &str| ProviderProblem::InvalidAddress {
        from,
        why: why.to_string(),
    };
    let url = Url::parse(&address).map_err(|_| invalid("not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid("not an http(s) URL with a host"));
    }
    let target = match type_ {
        ProviderType::Github => github_target(&url).map_err(&invalid)?,
        ProviderType::Gitlab => gitlab_target(&url).map_err(&invalid)?,
        _ => Target::Webhook(url),
    };
    let headers = match (type_, text(KEY_HEADERS)) {
        (ProviderType::Generic | ProviderType::GenericHmac, Some(yaml)) => {
            let map: BTreeMap<String, String> =
                serde_saphyr::from_str(&yaml).map_err(|_| ProviderProblem::BadHeaders {
                    name: secret_name.clone().unwrap_or_default(),
                })?;
            map.into_iter().collect()
        }
        _ => Vec::new(),
    };
    Ok(ResolvedProvider {
        type_,
        target,
        token,
        headers,
        channel: spec.channel.clone().filter(|c| !c.is_empty()),
        username: spec.username.clone().filter(|u| !u.is_empty()),
    })
}

impl Target {
    /// The URL requests go to (the API base for GitHub and GitLab), for the destination policy.
    pub fn destination(&self) -> &str {
        match self {
            Target::Webhook(url) => url.as_str(),
            Target::Github { api, .. } => api,
            Target::Gitlab { base, .. } => base,
        }
    }
}

/// `scheme://host[:port]` of `url`, without credentials or path.
fn origin(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// The repository path of a repository URL: its segments without a trailing `.git`.
fn repo_segments(url: &Url) -> Vec<String> {
    let mut segments: Vec<String> = url
        .path_segments()
        .map(|s| s.filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    if let Some(last) = segments.last_mut() {
        if let Some(stripped) = last.strip_suffix(".git") {
            *last = stripped.to_string();
        }
    }
    segments
}

/// GitHub: `https://github.com/org/repo` → `https://api.github.com`; any other host (GitHub
/// Enterprise) → `<scheme>://<host[:port]>/api/v3`.
pub fn github_target(url: &Url) -> Result<Target, &'static str> {
    let segments = repo_segments(url);
    let [owner, repo] = segments.as_slice() else {
        return Err("a GitHub repository URL is https://<host>/<owner>/<repository>");
    };
    let host = url.host_str().unwrap_or_default();
    let api = if host == "github.com" || host == "www.github.com" {
        "https://api.github.com".to_string()
    } else {
        format!("{}/api/v3", origin(url))
    };
    Ok(Target::Github {
        api,
        owner: owner.clone(),
        repo: repo.clone(),
    })
}

/// GitLab: `https://gitlab.com/group/sub/project` → base `https://gitlab.com`, project
/// `group/sub/project`.
pub fn gitlab_target(url: &Url) -> Result<Target, &'static str> {
    let segments = repo_segments(url);
    if segments.len() < 2 {
        return Err("a GitLab project URL is https://<host>/<group>/<project>");
    }
    Ok(Target::Gitlab {
        base: origin(url),
        project: segments.join("/"),
    })
}

/// One HTTP request to a provider. Its URL and headers may hold secrets: never log them.
#[derive(Clone, PartialEq, Eq)]
pub struct Outbound {
    pub url: Url,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("bytes", &self.body.len())
            .finish_non_exhaustive()
    }
}

/// The request `provider` makes of `event` (with the Alert's `summary`) at `now`; `None` when
/// this provider type skips the event: commit-status providers act only on events that carry a
/// revision and a commit state, webhook and chat providers skip status-only events.
pub fn request(
    provider: &ResolvedProvider,
    event: &Event,
    summary: Option<&str>,
    now: Timestamp,
) -> Option<Outbound> {
    match &provider.target {
        Target::Webhook(url) => {
            if event.status_only {
                return None;
            }
            let (body, mut headers) = match provider.type_ {
                ProviderType::Slack => (slack_body(provider, event, summary), Vec::new()),
                _ => {
                    let mut headers = provider.headers.clone();
                    if provider.type_ == ProviderType::Generic {
                        if let Some(t) = &provider.token {
                            headers.push(("Authorization".into(), format!("Bearer {t}")));
                        }
                    }
                    (generic_body(event, summary, now), headers)
                }
            };
            let body = serde_json::to_vec(&body).ok()?;
            if provider.type_ == ProviderType::GenericHmac {
                let key = provider.token.as_deref().unwrap_or_default();
                headers.push((
                    "X-Signature".into(),
                    format!("sha256={}", hmac_sha256_hex(key.as_bytes(), &body)),
                ));
            }
            headers.push(("Content-Type".into(), "application/json".into()));
            Some(Outbound {
                url: url.clone(),
                headers,
                body,
            })
        }
        Target::Github { api, owner, repo } => {
            let (sha, state) = commit(event)?;
            let state = match state {
                CommitState::Pending => "pending",
                CommitState::Success => "success",
                CommitState::Failure => "failure",
            };
            let body = json!({
                "state": state,
                "context": context(event),
                "description": description(&event.message),
            });
            let token = provider.token.as_deref().unwrap_or_default();
            Some(Outbound {
                url: Url::parse(&format!("{api}/repos/{owner}/{repo}/statuses/{sha}")).ok()?,
                headers: vec![
                    ("Authorization".into(), format!("token {token}")),
                    ("Accept".into(), "application/vnd.github+json".into()),
                    ("Content-Type".into(), "application/json".into()),
                ],
                body: serde_json::to_vec(&body).ok()?,
            })
        }
        Target::Gitlab { base, project } => {
            let (sha, state) = commit(event)?;
            let state = match state {
                CommitState::Pending => "pending",
                CommitState::Success => "success",
                CommitState::Failure => "failed",
            };
            let body = json!({
                "state": state,
                "name": context(event),
                "description": description(&event.message),
            });
            let id: String = url::form_urlencoded::byte_serialize(project.as_bytes()).collect();
            let token = provider.token.as_deref().unwrap_or_default();
            Some(Outbound {
                url: Url::parse(&format!("{base}/api/v4/projects/{id}/statuses/{sha}")).ok()?,
                headers: vec![
                    ("PRIVATE-TOKEN".into(), token.to_string()),
                    ("Content-Type".into(), "application/json".into()),
                ],
                body: serde_json::to_vec(&body).ok()?,
            })
        }
    }
}

/// The revision and commit state of an event, when it has both and the revision is a commit id.
fn commit(event: &Event) -> Option<(&str, CommitState)> {
    let sha = event.revision.as_deref()?;
    let is_sha = (7..=64).contains(&sha.len()) && sha.bytes().all(|b| b.is_ascii_hexdigit());
    Some((sha, event.commit_status?)).filter(|_| is_sha)
}

/// `weft/<kind>/<name>`: the commit status context (GitHub) or name (GitLab).
fn context(event: &Event) -> String {
    format!("weft/{}/{}", event.source.kind.as_str(), event.source.name)
}

/// The message cut to [`MAX_DESCRIPTION`] characters.
pub fn description(message: &str) -> String {
    let first_line = message.lines().next().unwrap_or_default();
    if first_line.chars().count() <= MAX_DESCRIPTION {
        return first_line.to_string();
    }
    let mut cut: String = first_line.chars().take(MAX_DESCRIPTION - 1).collect();
    cut.push('…');
    cut
}

/// Flux's event shape (`eventv1.Event`).
pub fn generic_body(event: &Event, summary: Option<&str>, now: Timestamp) -> Value {
    let mut metadata = serde_json::Map::new();
    if let Some(r) = &event.revision {
        metadata.insert("revision".into(), Value::String(r.clone()));
    }
    if let Some(s) = summary {
        metadata.insert("summary".into(), Value::String(s.to_string()));
    }
    json!({
        "involvedObject": {
            "kind": event.source.kind.as_str(),
            "namespace": event.source.namespace,
            "name": event.source.name,
            "apiVersion": event.source.kind.api_version(),
        },
        "severity": event.severity.as_str(),
        "timestamp": format!("{now:.0}"),
        "message": event.message,
        "reason": event.reason,
        "metadata": metadata,
        "reportingController": "weft",
    })
}

/// A Slack message: one attachment coloured by severity.
pub fn slack_body(provider: &ResolvedProvider, event: &Event, summary: Option<&str>) -> Value {
    let mut fields = Vec::new();
    if let Some(r) = &event.revision {
        fields.push(json!({"title": "revision", "value": r, "short": false}));
    }
    if let Some(s) = summary {
        fields.push(json!({"title": "summary", "value": s, "short": false}));
    }
    let color = match event.severity {
        Severity::Info => "good",
        Severity::Error => "danger",
    };
    let mut body = json!({
        "attachments": [{
            "color": color,
            "author_name": event.source.to_string(),
            "title": event.reason,
            "text": event.message,
            "mrkdwn_in": ["text"],
            "fields": fields,
        }],
    });
    if let Some(c) = &provider.channel {
        body["channel"] = Value::String(c.clone());
    }
    if let Some(u) = &provider.username {
        body["username"] = Value::String(u.clone());
    }
    body
}

/// Lower-case hex HMAC-SHA256 of `body` keyed by `key` (Flux's `X-Signature`).
pub fn hmac_sha256_hex(key: &[u8], body: &[u8]) -> String {
    // HMAC takes keys of any length: `new_from_slice` cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return String::new();
    };
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
#[path = "payload_tests.rs"]
mod tests;
