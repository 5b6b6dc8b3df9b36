//! `POST /api/v1/suspend[?message=…]` and `POST /api/v1/resume` (bearer token, like the sync
//! endpoint): record the root's suspension in the cluster (see [`crate::daemon::suspend`]), so
//! every replica and every shard obeys it. A standby passes the request on to the holders.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::{body, body_refused, error_body, forward, header_str, refused, signature, standby};
use super::{ServerState, MAX_SYNC_BODY_BYTES};
use crate::daemon::suspend;
use crate::daemon::trigger::TriggerReason;

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
    record(state, peer, uri, headers, body, true, q.message).await
}

pub(super) async fn resume_root(
    state: State<ServerState>,
    peer: ConnectInfo<SocketAddr>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    record(state, peer, uri, headers, body, false, None).await
}

async fn record(
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
    // When the flag root is a Root object its spec.suspend is the root's suspension; else the
    // loop's record holds it.
    let client = state.daemon.client();
    let (ns, root) = (&claim.weft_namespace, &claim.root_name);
    let flag_object = crate::daemon::roots::requests::flag_root_object(client, ns, root)
        .await
        .is_some();
    let message = message.as_deref();
    let written = if flag_object {
        crate::daemon::roots::requests::set_suspended(client, ns, root, suspended, message)
            .await
            .map(|()| crate::daemon::record::RootSuspension {
                suspended,
                message: message.filter(|_| suspended).map(str::to_string),
                since: suspended.then(crate::daemon::status::now_rfc3339),
            })
            .map_err(|e| e.to_string())
    } else {
        suspend::write(client, ns, root, suspended, message)
            .await
            .map_err(|e| e.to_string())
    };
    match written {
        Ok(now) => {
            tracing::info!(peer = %peer, root = %root, suspended, "root {endpoint}ed over the API");
            // The loop holds its root's suspension in memory; a Root's is its spec, which its
            // controller reads.
            if !flag_object && state.daemon.set_suspension(now.clone()) {
                let _ = state.daemon.queue().trigger(TriggerReason::Resumed);
            }
            state.daemon.metrics().count_request(endpoint, "done");
            (StatusCode::OK, Json(now)).into_response()
        }
        Err(e) => {
            state.daemon.metrics().count_request(endpoint, "error");
            error_body(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot record the root's suspension: {e}"),
            )
        }
    }
}
