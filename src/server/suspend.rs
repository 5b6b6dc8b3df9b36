//! `POST /api/v1/suspend[?message=…]` and `POST /api/v1/resume` (bearer token, like the sync
//! endpoint): set the flag root's Root's `spec.suspend` (with why in `weft.io/suspend-message`,
//! see [`crate::daemon::roots::requests::set_suspended`]), as `weft suspend` / `weft resume` do,
//! so every replica and every shard obeys it; resuming also asks for a pass now. A standby passes
//! the request on to the holders.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::{body, body_refused, error_body, forward, header_str, refused, signature, standby};
use super::{ServerState, MAX_SYNC_BODY_BYTES};
use crate::daemon::roots::requests;

#[derive(Debug, Default, Deserialize)]
pub(super) struct SuspendQuery {
    /// Why (shown by `weft get root` and the status).
    #[serde(default)]
    message: Option<String>,
}

pub(super) async fn suspend_root(
    state: State<ServerState>,
    peer: ConnectInfo<SocketAddr>,
    Query(q): Query<SuspendQuery>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    set_suspension(state, peer, uri, headers, body, true, q.message).await
}

pub(super) async fn resume_root(
    state: State<ServerState>,
    peer: ConnectInfo<SocketAddr>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    set_suspension(state, peer, uri, headers, body, false, None).await
}

async fn set_suspension(
    State(state): State<ServerState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
    suspended: bool,
    message: Option<String>,
) -> Response {
    let endpoint = if suspended { "suspend" } else { "resume" };
    if let Err(e) = signature::verify_bearer(
        state.sync_token().as_deref().map(Vec::as_slice),
        header_str(&headers, header::AUTHORIZATION.as_str()),
    ) {
        return refused(&state, endpoint, peer, e);
    }
    let limit = state.limits.body(MAX_SYNC_BODY_BYTES);
    let bytes = match body::read(body, &headers, limit, &state.body_budget, peer.ip()).await {
        Ok(b) => b,
        Err(e) => return body_refused(&state, endpoint, peer, e),
    };
    let claim = state.daemon.shard_claim();
    let Some(claim) = claim.filter(|_| state.is_leader()) else {
        let onward = forward::Forward {
            endpoint,
            method: axum::http::Method::POST,
            path_and_query: uri.path_and_query().map_or(uri.path(), |p| p.as_str()),
            headers: &headers,
            body: axum::body::Bytes::copy_from_slice(&bytes),
            timeout: Duration::from_secs(30),
        };
        let forwarded = forward::to_leader(&state, onward).await;
        return forwarded.unwrap_or_else(|| standby(&state, endpoint));
    };
    let (ns, root) = (&claim.weft_namespace, &claim.root_name);
    let message = message.filter(|m| suspended && !m.trim().is_empty());
    match requests::set_suspended(
        state.daemon.client(),
        ns,
        root,
        suspended,
        message.as_deref(),
    )
    .await
    {
        Ok(()) => {
            tracing::info!(peer = %peer, root = %root, suspended, "root {endpoint}ed over the API");
            state.daemon.metrics().count_request(endpoint, "done");
            // The suspension as `spec.suspend` and `weft.io/suspend-message` now hold it (the
            // Root's controller reads them; resuming asked it for a pass).
            let mut answer = json!({"suspended": suspended});
            if suspended {
                answer["since"] = json!(crate::daemon::status::now_rfc3339());
                if let Some(m) = message {
                    answer["message"] = json!(m);
                }
            }
            (StatusCode::OK, Json(answer)).into_response()
        }
        Err(e) => {
            state.daemon.metrics().count_request(endpoint, "error");
            error_body(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{e}; the root's suspension is unchanged"),
            )
        }
    }
}
