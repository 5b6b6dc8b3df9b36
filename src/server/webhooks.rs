//! The webhook handlers. Each checks, in order, what costs least: the hook is open (403), the
//! credential header is there and well-formed — for GitLab, the token itself (401) —, the body's
//! declared length (413); only then is the body read, within its cap, timeout and the shared
//! budget; then the HMAC (401), then the delivery is recorded (409 for one seen before: GitLab's
//! token is checked from its header, so its deliveries are checked before the body is read), then
//! the payload decides.
//!
//! Replay keys: GitHub's `X-GitHub-Delivery` and the signature itself (the HMAC covers only the
//! body, so a replayer could change the id header, not the body and its signature); GitLab's
//! `X-Gitlab-Event-UUID` when present; the generic hook's `X-Weft-Delivery` when present (not its
//! signature: a script may post the same body every time).

use std::net::SocketAddr;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::replay::{DeliveryKey, Replayed};
use super::signature::{self, SignatureError};
use super::MAX_HOOK_BODY_BYTES;
use super::{
    body, body_refused, error_body, forward, header_str, push_events, refused, standby, ServerState,
};
use crate::daemon::roots::answer;
use crate::daemon::roots::pushes::{RequestReason, Woken};

/// GitHub's id of a delivery.
pub const GITHUB_DELIVERY_HEADER: &str = "X-GitHub-Delivery";
/// GitLab's id of an event delivery (GitLab 14.8 and later).
pub const GITLAB_EVENT_UUID_HEADER: &str = "X-Gitlab-Event-UUID";
/// The generic hook's optional delivery id.
pub const GENERIC_DELIVERY_HEADER: &str = "X-Weft-Delivery";

fn replayed(state: &ServerState, endpoint: &str, peer: SocketAddr, r: Replayed) -> Response {
    tracing::warn!(endpoint, peer = %peer, reason = %r, "webhook refused: replayed delivery");
    state.daemon.metrics().count_request(endpoint, "replayed");
    error_body(StatusCode::CONFLICT, r.to_string())
}

fn bad_payload(state: &ServerState, endpoint: &str, e: push_events::HookError) -> Response {
    tracing::warn!(endpoint, reason = %e, "webhook refused: bad payload");
    state
        .daemon
        .metrics()
        .count_request(endpoint, "bad_request");
    error_body(StatusCode::BAD_REQUEST, e.to_string())
}

/// The delivery keys of a request: its id header (if any) and, for HMAC hooks, its signature.
fn keys<'a>(
    hook: &'static str,
    id_header: &'static str,
    headers: &'a HeaderMap,
    signature: Option<&'a [u8; 32]>,
) -> Vec<DeliveryKey<'a>> {
    let mut keys = Vec::with_capacity(2);
    if let Some(id) = headers.get(id_header).map(|v| v.as_bytes()) {
        keys.push(DeliveryKey {
            hook,
            kind: id_header,
            value: id,
        });
    }
    if let Some(sig) = signature {
        keys.push(DeliveryKey {
            hook,
            kind: "signature",
            value: sig,
        });
    }
    keys
}

/// The request a decision was made on, for a standby to forward it to the leader.
struct Origin<'a> {
    path: &'static str,
    headers: &'a HeaderMap,
    body: &'a [u8],
}

/// The Roots whose source a verified push is (their passes run now, on the leader): their
/// `namespace/name`.
fn wake_roots(state: &ServerState, body: &[u8]) -> Woken {
    let payload = push_events::payload_json(body).unwrap_or_default();
    let urls = push_events::repository_urls(&payload);
    let daemon = &state.daemon;
    daemon
        .root_pushes()
        .push(&urls, push_events::pushed_ref(&payload), |ns| {
            daemon.watch_namespaces().contains(ns)
        })
}

/// A push another replica passed on ([`forward::ROOTS_FORWARDED_HEADER`]): the Roots this
/// replica holds pass, and the answer names them (the sender asks any other through the API
/// server). Nothing else: the flag root's pass and the other replicas are the sender's.
fn pass_held_roots(state: &ServerState, endpoint: &str, body: &[u8], by: &str) -> Response {
    let here: Vec<String> = wake_roots(state, body)
        .here
        .iter()
        .map(ToString::to_string)
        .collect();
    tracing::info!(endpoint, from = by, roots = %here.join(","), "a push passed on by another replica asked the Roots held here for a pass");
    state.daemon.metrics().count_request(endpoint, "queued");
    (
        StatusCode::ACCEPTED,
        Json(json!({"status": "queued", "roots": here})),
    )
        .into_response()
}

/// Queue a pass for a verified hook (a standby forwards it to the leader), or say why not.
/// Besides the flag root, every Root whose source the push is gets a pass now.
async fn act_on_hook(
    state: &ServerState,
    endpoint: &str,
    decision: push_events::HookDecision,
    origin: Origin<'_>,
) -> Response {
    let onward = forward::Forward {
        endpoint,
        method: Method::POST,
        path_and_query: origin.path,
        headers: origin.headers,
        body: Bytes::copy_from_slice(origin.body),
        timeout: state.limits.request_timeout,
    };
    if let Some(by) = forward::roots_forwarded_by(origin.headers) {
        return pass_held_roots(state, endpoint, origin.body, &by);
    }
    // The leader decides for the Roots as for the flag root.
    if !state.is_leader() {
        let forwarded = forward::to_leader(state, onward).await;
        return forwarded.unwrap_or_else(|| standby(state, endpoint));
    }
    let woken = wake_roots(state, origin.body);
    let roots = woken.names();
    if !roots.is_empty() {
        tracing::info!(endpoint, roots = %roots.join(","), "webhook asked the Roots of its repository for a pass");
    }
    // The roots other replicas hold pass there: the push is passed on to their holders (or,
    // when it cannot be, they are asked through the API server).
    forward::to_root_holders(state, onward.clone(), woken.elsewhere, "push");
    match decision {
        push_events::HookDecision::Ignore(why) if roots.is_empty() => {
            tracing::info!(endpoint, reason = %why, "webhook ignored");
            state.daemon.metrics().count_request(endpoint, "ignored");
            (
                StatusCode::OK,
                Json(json!({"status": "ignored", "reason": why})),
            )
                .into_response()
        }
        push_events::HookDecision::Ignore(why) => {
            state.daemon.metrics().count_request(endpoint, "queued");
            (
                StatusCode::ACCEPTED,
                Json(json!({"status": "queued", "roots": roots, "reason": why})),
            )
                .into_response()
        }
        push_events::HookDecision::Trigger { pushed_ref } => {
            forward::to_other_shards(state, onward);
            match answer::request(&state.daemon, &RequestReason::Webhook(endpoint.to_string())) {
                Ok(pass) => {
                    tracing::info!(
                        endpoint,
                        pushed_ref = pushed_ref.as_deref().unwrap_or("-"),
                        pass,
                        "webhook queued a pass"
                    );
                    state.daemon.metrics().count_request(endpoint, "queued");
                    (
                        StatusCode::ACCEPTED,
                        Json(json!({"status": "queued", "pass": pass, "roots": roots})),
                    )
                        .into_response()
                }
                Err(_) => standby(state, endpoint),
            }
        }
    }
}

/// What differs between the HMAC hooks.
#[derive(Clone, Copy)]
struct HmacHook {
    endpoint: &'static str,
    signature_header: &'static str,
    id_header: &'static str,
    /// Whether the signature itself identifies a delivery (GitHub: yes, every push body differs;
    /// generic: no, a script may send the same body every time).
    signature_is_key: bool,
}

const GITHUB: HmacHook = HmacHook {
    endpoint: "github",
    signature_header: signature::GITHUB_SIGNATURE_HEADER,
    id_header: GITHUB_DELIVERY_HEADER,
    signature_is_key: true,
};

const GENERIC: HmacHook = HmacHook {
    endpoint: "generic",
    signature_header: signature::GENERIC_SIGNATURE_HEADER,
    id_header: GENERIC_DELIVERY_HEADER,
    signature_is_key: false,
};

/// An HMAC hook (GitHub, generic): the body read and verified, the delivery recorded.
async fn verified_hmac_body(
    state: &ServerState,
    hook: HmacHook,
    key: &super::secrets::HookKey,
    peer: SocketAddr,
    headers: &HeaderMap,
    body: Body,
) -> Result<body::BufferedBody, Response> {
    let HmacHook {
        endpoint,
        signature_header: sig_header,
        id_header,
        signature_is_key,
    } = hook;
    let secret = key.key().map_err(|why| {
        refused(
            state,
            endpoint,
            peer,
            SignatureError::Closed(why.to_string()),
        )
    })?;
    let given = signature::parse_hmac_header(sig_header, header_str(headers, sig_header))
        .map_err(|e| refused(state, endpoint, peer, e))?;
    let limit = state.limits.body(MAX_HOOK_BODY_BYTES);
    body::check_declared(headers, limit).map_err(|e| body_refused(state, endpoint, peer, e))?;
    let keys = keys(
        endpoint,
        id_header,
        headers,
        signature_is_key.then_some(&given),
    );
    // Whether the delivery was seen is said only to whoever signed it: answering 409 before the
    // HMAC told anyone which delivery ids are known (issue 48 item 8).
    let bytes = body::read(body, headers, limit, &state.body_budget, peer.ip())
        .await
        .map_err(|e| body_refused(state, endpoint, peer, e))?;
    signature::verify_hmac_digest(sig_header, secret, &given, &bytes)
        .map_err(|e| refused(state, endpoint, peer, e))?;
    // Only a verified delivery is remembered: a forger cannot fill the cache.
    state
        .deliveries
        .record(&keys, Instant::now())
        .map_err(|r| replayed(state, endpoint, peer, r))?;
    Ok(bytes)
}

/// The GitLab hook: its token is a header, so a wrong one is refused before a byte of the body
/// is read; the body read, the delivery recorded.
async fn verified_token_body(
    state: &ServerState,
    peer: SocketAddr,
    headers: &HeaderMap,
    body: Body,
) -> Result<body::BufferedBody, Response> {
    const ENDPOINT: &str = "gitlab";
    let hooks = state.webhooks();
    let secret = hooks.gitlab.key().map_err(|why| {
        refused(
            state,
            ENDPOINT,
            peer,
            SignatureError::Closed(why.to_string()),
        )
    })?;
    signature::verify_token(
        signature::GITLAB_TOKEN_HEADER,
        Some(secret),
        header_str(headers, signature::GITLAB_TOKEN_HEADER),
    )
    .map_err(|e| refused(state, ENDPOINT, peer, e))?;
    let limit = state.limits.body(MAX_HOOK_BODY_BYTES);
    body::check_declared(headers, limit).map_err(|e| body_refused(state, ENDPOINT, peer, e))?;
    let keys = keys(ENDPOINT, GITLAB_EVENT_UUID_HEADER, headers, None);
    state
        .deliveries
        .check(&keys, Instant::now())
        .map_err(|r| replayed(state, ENDPOINT, peer, r))?;
    let bytes = body::read(body, headers, limit, &state.body_budget, peer.ip())
        .await
        .map_err(|e| body_refused(state, ENDPOINT, peer, e))?;
    state
        .deliveries
        .record(&keys, Instant::now())
        .map_err(|r| replayed(state, ENDPOINT, peer, r))?;
    Ok(bytes)
}

/// A verified push hook's body: parsed as JSON, turned into a decision, acted on.
async fn on_push(
    state: &ServerState,
    endpoint: &str,
    path: &'static str,
    headers: &HeaderMap,
    verified: Result<body::BufferedBody, Response>,
    decide: impl FnOnce(&serde_json::Value) -> push_events::HookDecision,
) -> Response {
    let bytes = match verified {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let decision = match push_events::payload_json(&bytes) {
        Ok(payload) => decide(&payload),
        Err(e) => return bad_payload(state, endpoint, e),
    };
    let origin = Origin {
        path,
        headers,
        body: &bytes,
    };
    act_on_hook(state, endpoint, decision, origin).await
}

pub(super) async fn github(
    State(state): State<ServerState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let hooks = state.webhooks();
    let key = &hooks.github;
    let verified = verified_hmac_body(&state, GITHUB, key, peer, &headers, body).await;
    let decide = |payload: &serde_json::Value| {
        let event = header_str(&headers, "X-GitHub-Event");
        push_events::github(&state.followed_ref, event, payload)
    };
    on_push(
        &state,
        GITHUB.endpoint,
        "/hooks/github",
        &headers,
        verified,
        decide,
    )
    .await
}

pub(super) async fn gitlab(
    State(state): State<ServerState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let verified = verified_token_body(&state, peer, &headers, body).await;
    let decide = |payload: &serde_json::Value| {
        let event = header_str(&headers, "X-Gitlab-Event");
        push_events::gitlab(&state.followed_ref, event, payload)
    };
    on_push(
        &state,
        "gitlab",
        "/hooks/gitlab",
        &headers,
        verified,
        decide,
    )
    .await
}

pub(super) async fn generic(
    State(state): State<ServerState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let hooks = state.webhooks();
    let key = &hooks.generic;
    let bytes = match verified_hmac_body(&state, GENERIC, key, peer, &headers, body).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    // The generic hook's body is free-form: only a JSON object with a `ref` is filtered.
    let payload = push_events::payload_json(&bytes).unwrap_or(serde_json::Value::Null);
    let origin = Origin {
        path: "/hooks/generic",
        headers: &headers,
        body: &bytes,
    };
    let decision = push_events::generic(&state.followed_ref, &payload);
    act_on_hook(&state, GENERIC.endpoint, decision, origin).await
}
