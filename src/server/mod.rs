//! The daemon's HTTP API (axum): the sync endpoint, push webhooks, status, health and metrics.
//!
//! | route | what |
//! |---|---|
//! | `POST /api/v1/sync[?wait=true][&update=true]` | bearer token; queue a pass (202), or wait for it and return its [`PassReport`](crate::daemon::status::PassReport) (200); `update=true` also starts an agent update check now |
//! | `POST /hooks/github` | `X-Hub-Signature-256` HMAC; a push to the followed ref queues a pass |
//! | `POST /hooks/gitlab` | `X-Gitlab-Token`; same |
//! | `POST /hooks/generic` | `X-Weft-Signature: sha256=<hmac>`; same (a JSON `ref` field is filtered) |
//! | `GET /api/v1/status` | [`DaemonStatus`] as JSON |
//! | `GET /healthz`, `GET /readyz` | liveness, readiness |
//! | `GET /metrics` | Prometheus text |

pub mod client;
pub mod hooks;
pub mod signature;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::watch;

use crate::daemon::state::DaemonState;
use crate::daemon::status::DaemonStatus;
use crate::daemon::trigger::TriggerReason;
use signature::SignatureError;

/// Largest webhook body accepted (GitHub caps its payloads at 25 MB, but push events of a config
/// repository are far smaller; a bigger body is refused with 413 before it is read).
pub const MAX_HOOK_BODY_BYTES: usize = 1024 * 1024;
/// Largest body of `POST /api/v1/sync` (it has none; leave room for a small JSON).
pub const MAX_SYNC_BODY_BYTES: usize = 16 * 1024;

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("the HTTP server failed: {0}")]
    Serve(std::io::Error),
}

/// What the handlers share with the daemon.
#[derive(Clone)]
pub struct ServerState {
    /// The daemon's state: its trigger queue (the sync-root loop takes passes from it), status,
    /// metrics and agent update requests.
    pub daemon: DaemonState,
    /// Bearer token of the sync endpoint (`--sync-token-file`); `None` closes the endpoint.
    pub sync_token: Option<Arc<Vec<u8>>>,
    /// Shared secret of the webhooks (`--webhook-secret-file`); `None` closes them.
    pub webhook_secret: Option<Arc<Vec<u8>>>,
    /// The ref Weft follows (`--ref`), for the webhooks' branch filter.
    pub followed_ref: String,
    /// True once the daemon is initialised (API server reachable); false again when stopping.
    pub ready: watch::Receiver<bool>,
    /// How long `?wait=true` waits for its pass.
    pub wait_timeout: Duration,
}

impl ServerState {
    fn is_leader(&self) -> bool {
        self.daemon.is_leader()
    }
}

/// The router with every route, the body limits and the shared state.
pub fn router(state: ServerState) -> Router {
    let hooks = Router::new()
        .route("/hooks/github", post(github_hook))
        .route("/hooks/gitlab", post(gitlab_hook))
        .route("/hooks/generic", post(generic_hook))
        .layer(DefaultBodyLimit::max(MAX_HOOK_BODY_BYTES));
    let api = Router::new()
        .route("/api/v1/sync", post(sync))
        .layer(DefaultBodyLimit::max(MAX_SYNC_BODY_BYTES));
    Router::new()
        .merge(hooks)
        .merge(api)
        .route("/api/v1/status", get(status))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

/// Bind `addr` (e.g. `0.0.0.0:8080`).
pub async fn bind(addr: &str) -> Result<tokio::net::TcpListener, ServerError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.to_string(),
            source,
        })
}

/// Serve until `shutdown` resolves; in-flight requests finish first.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ServerState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(ServerError::Serve)
}

fn error_body(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// 401 for a failed check, with a log line that says why (never the secret or presented value).
fn refused(state: &ServerState, endpoint: &str, peer: SocketAddr, err: SignatureError) -> Response {
    tracing::warn!(endpoint, peer = %peer, reason = %err, "request refused: authentication failed");
    state.daemon.metrics.count_request(endpoint, "unauthorized");
    let status = match err {
        SignatureError::NotConfigured => StatusCode::FORBIDDEN,
        _ => StatusCode::UNAUTHORIZED,
    };
    error_body(status, err.to_string())
}

fn standby(state: &ServerState, endpoint: &str) -> Response {
    state.daemon.metrics.count_request(endpoint, "standby");
    error_body(
        StatusCode::SERVICE_UNAVAILABLE,
        "this replica is on standby (another replica holds the leader Lease) or is stopping",
    )
}

#[derive(Debug, Default, Deserialize)]
struct SyncQuery {
    #[serde(default)]
    wait: Option<String>,
    /// `?update=true`: also run an agent update check of every WeaveCloud now.
    #[serde(default)]
    update: Option<String>,
}

async fn sync(
    State(state): State<ServerState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(q): Query<SyncQuery>,
    headers: HeaderMap,
    _body: Bytes,
) -> Response {
    const ENDPOINT: &str = "sync";
    if let Err(e) = signature::verify_bearer(
        state.sync_token.as_deref().map(Vec::as_slice),
        header_str(&headers, header::AUTHORIZATION.as_str()),
    ) {
        return refused(&state, ENDPOINT, peer, e);
    }
    if !state.is_leader() {
        return standby(&state, ENDPOINT);
    }
    let ticket = match state.daemon.queue.trigger(TriggerReason::Api) {
        Ok(t) => t,
        Err(_) => return standby(&state, ENDPOINT),
    };
    tracing::info!(pass = ticket.0, peer = %peer, "sync requested over the API");
    if matches!(q.update.as_deref(), Some("true") | Some("1") | Some("")) {
        tracing::info!(peer = %peer, "agent update check requested over the API");
        state.daemon.update_requests.request();
    }
    let wait = matches!(q.wait.as_deref(), Some("true") | Some("1") | Some(""));
    if !wait {
        state.daemon.metrics.count_request(ENDPOINT, "queued");
        return (
            StatusCode::ACCEPTED,
            Json(json!({"status": "queued", "pass": ticket.0})),
        )
            .into_response();
    }
    match tokio::time::timeout(state.wait_timeout, state.daemon.queue.wait(ticket)).await {
        Ok(Ok((_, report))) => {
            state.daemon.metrics.count_request(ENDPOINT, "completed");
            (StatusCode::OK, Json((*report).clone())).into_response()
        }
        Ok(Err(_)) => standby(&state, ENDPOINT),
        Err(_) => {
            state.daemon.metrics.count_request(ENDPOINT, "timeout");
            error_body(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "pass {} did not finish within {}s; it is still queued or running",
                    ticket.0,
                    state.wait_timeout.as_secs()
                ),
            )
        }
    }
}

/// Queue a pass for a verified hook, or say why not.
fn act_on_hook(state: &ServerState, endpoint: &str, decision: hooks::HookDecision) -> Response {
    match decision {
        hooks::HookDecision::Ignore(why) => {
            tracing::info!(endpoint, reason = %why, "webhook ignored");
            state.daemon.metrics.count_request(endpoint, "ignored");
            (
                StatusCode::OK,
                Json(json!({"status": "ignored", "reason": why})),
            )
                .into_response()
        }
        hooks::HookDecision::Trigger { pushed_ref } => {
            if !state.is_leader() {
                return standby(state, endpoint);
            }
            match state
                .daemon
                .queue
                .trigger(TriggerReason::Webhook(endpoint.to_string()))
            {
                Ok(ticket) => {
                    tracing::info!(
                        endpoint,
                        pushed_ref = pushed_ref.as_deref().unwrap_or("-"),
                        pass = ticket.0,
                        "webhook queued a pass"
                    );
                    state.daemon.metrics.count_request(endpoint, "queued");
                    (
                        StatusCode::ACCEPTED,
                        Json(json!({"status": "queued", "pass": ticket.0})),
                    )
                        .into_response()
                }
                Err(_) => standby(state, endpoint),
            }
        }
    }
}

fn bad_payload(state: &ServerState, endpoint: &str, e: hooks::HookError) -> Response {
    tracing::warn!(endpoint, reason = %e, "webhook refused: bad payload");
    state.daemon.metrics.count_request(endpoint, "bad_request");
    error_body(StatusCode::BAD_REQUEST, e.to_string())
}

async fn github_hook(
    State(state): State<ServerState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    const ENDPOINT: &str = "github";
    if let Err(e) = signature::verify_hmac_sha256(
        signature::GITHUB_SIGNATURE_HEADER,
        state.webhook_secret.as_deref().map(Vec::as_slice),
        header_str(&headers, signature::GITHUB_SIGNATURE_HEADER),
        &body,
    ) {
        return refused(&state, ENDPOINT, peer, e);
    }
    let payload = match hooks::payload_json(&body) {
        Ok(p) => p,
        Err(e) => return bad_payload(&state, ENDPOINT, e),
    };
    let decision = hooks::github(
        &state.followed_ref,
        header_str(&headers, "X-GitHub-Event"),
        &payload,
    );
    act_on_hook(&state, ENDPOINT, decision)
}

async fn gitlab_hook(
    State(state): State<ServerState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    const ENDPOINT: &str = "gitlab";
    if let Err(e) = signature::verify_token(
        signature::GITLAB_TOKEN_HEADER,
        state.webhook_secret.as_deref().map(Vec::as_slice),
        header_str(&headers, signature::GITLAB_TOKEN_HEADER),
    ) {
        return refused(&state, ENDPOINT, peer, e);
    }
    let payload = match hooks::payload_json(&body) {
        Ok(p) => p,
        Err(e) => return bad_payload(&state, ENDPOINT, e),
    };
    let decision = hooks::gitlab(
        &state.followed_ref,
        header_str(&headers, "X-Gitlab-Event"),
        &payload,
    );
    act_on_hook(&state, ENDPOINT, decision)
}

async fn generic_hook(
    State(state): State<ServerState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    const ENDPOINT: &str = "generic";
    if let Err(e) = signature::verify_hmac_sha256(
        signature::GENERIC_SIGNATURE_HEADER,
        state.webhook_secret.as_deref().map(Vec::as_slice),
        header_str(&headers, signature::GENERIC_SIGNATURE_HEADER),
        &body,
    ) {
        return refused(&state, ENDPOINT, peer, e);
    }
    // The generic hook's body is free-form: only a JSON object with a `ref` is filtered.
    let payload = hooks::payload_json(&body).unwrap_or(serde_json::Value::Null);
    let decision = hooks::generic(&state.followed_ref, &payload);
    act_on_hook(&state, ENDPOINT, decision)
}

async fn status(State(state): State<ServerState>) -> Response {
    let status: DaemonStatus = state.daemon.status_snapshot();
    Json(status).into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<ServerState>) -> Response {
    if *state.ready.borrow() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

async fn metrics_text(State(state): State<ServerState>) -> Response {
    match state.daemon.metrics.render() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => error_body(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::status::{ChangeSummary, PassReport, PassResultKind};

    struct Running {
        base: String,
        state: ServerState,
        _ready_tx: watch::Sender<bool>,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
    }

    impl Drop for Running {
        fn drop(&mut self) {
            if let Some(s) = self.stop.take() {
                let _ = s.send(());
            }
        }
    }

    async fn start(leader: bool) -> Running {
        let (ready_tx, ready) = watch::channel(true);
        let status = DaemonStatus {
            leader,
            git_ref: "main".into(),
            ..Default::default()
        };
        let (client, _api) = crate::daemon::fixtures::mock_client();
        let state = ServerState {
            daemon: DaemonState::new(client, "weft-system", status),
            sync_token: Some(Arc::new(b"sync-token".to_vec())),
            webhook_secret: Some(Arc::new(b"hook-secret".to_vec())),
            followed_ref: "main".into(),
            ready,
            wait_timeout: Duration::from_secs(5),
        };
        let listener = bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let s = state.clone();
        tokio::spawn(async move {
            serve(listener, s, async {
                let _ = stop_rx.await;
            })
            .await
        });
        Running {
            base,
            state,
            _ready_tx: ready_tx,
            stop: Some(stop_tx),
        }
    }

    fn report(pass: u64) -> PassReport {
        PassReport {
            pass,
            reasons: vec!["api".into()],
            started_at: "2026-01-01T00:00:00Z".into(),
            duration_seconds: 0.1,
            revision: Some("abc123".into()),
            result: PassResultKind::Succeeded,
            error: None,
            head_unchanged: false,
            summary: ChangeSummary::default(),
            changes: vec![],
        }
    }

    #[tokio::test]
    async fn github_push_with_a_good_signature_queues_one_pass() {
        let srv = start(true).await;
        let body = br#"{"ref":"refs/heads/main","after":"abc"}"#;
        let resp = reqwest::Client::new()
            .post(format!("{}/hooks/github", srv.base))
            .header("X-GitHub-Event", "push")
            .header("X-Hub-Signature-256", signature::sign(b"hook-secret", body))
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202);
        let v: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        assert_eq!(v["status"], "queued");
        assert!(srv.state.daemon.queue.has_pending());
    }

    #[tokio::test]
    async fn a_bad_signature_is_401_and_queues_nothing() {
        let srv = start(true).await;
        let body = br#"{"ref":"refs/heads/main"}"#;
        let c = reqwest::Client::new();
        let resp = c
            .post(format!("{}/hooks/github", srv.base))
            .header("X-GitHub-Event", "push")
            .header(
                "X-Hub-Signature-256",
                signature::sign(b"wrong-secret", body),
            )
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
        let text = resp.text().await.unwrap();
        assert!(text.contains("does not match"), "{text}");
        let resp = c
            .post(format!("{}/hooks/gitlab", srv.base))
            .header("X-Gitlab-Event", "Push Hook")
            .header("X-Gitlab-Token", "nope")
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
        let resp = c
            .post(format!("{}/hooks/generic", srv.base))
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
        assert!(resp.text().await.unwrap().contains("X-Weft-Signature"));
        assert!(!srv.state.daemon.queue.has_pending());
    }

    #[tokio::test]
    async fn a_push_to_another_branch_is_ignored() {
        let srv = start(true).await;
        let body = br#"{"ref":"refs/heads/feature","object_kind":"push"}"#;
        let resp = reqwest::Client::new()
            .post(format!("{}/hooks/gitlab", srv.base))
            .header("X-Gitlab-Event", "Push Hook")
            .header("X-Gitlab-Token", "hook-secret")
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let v: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        assert_eq!(v["status"], "ignored");
        assert!(!srv.state.daemon.queue.has_pending());
    }

    #[tokio::test]
    async fn an_oversized_body_is_413_before_any_work() {
        let srv = start(true).await;
        let body = vec![b' '; MAX_HOOK_BODY_BYTES + 1];
        let resp = reqwest::Client::new()
            .post(format!("{}/hooks/generic", srv.base))
            .header("X-Weft-Signature", signature::sign(b"hook-secret", &body))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 413);
        assert!(!srv.state.daemon.queue.has_pending());
        // Just under the limit is accepted.
        let body = vec![b' '; MAX_HOOK_BODY_BYTES - 1];
        let resp = reqwest::Client::new()
            .post(format!("{}/hooks/generic", srv.base))
            .header("X-Weft-Signature", signature::sign(b"hook-secret", &body))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202);
    }

    #[tokio::test]
    async fn sync_needs_the_bearer_token_and_wait_returns_the_pass_report() {
        let srv = start(true).await;
        let c = reqwest::Client::new();
        let resp = c
            .post(format!("{}/api/v1/sync", srv.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
        let resp = c
            .post(format!("{}/api/v1/sync", srv.base))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
        assert!(!srv.state.daemon.queue.has_pending());

        // A worker that serves one pass.
        let q = srv.state.daemon.queue.clone();
        tokio::spawn(async move {
            let t = q.next_pass().await.unwrap();
            q.finish(t.pass, report(t.pass));
        });
        let resp = c
            .post(format!("{}/api/v1/sync?wait=true", srv.base))
            .bearer_auth("sync-token")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let r: PassReport = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        assert_eq!(r.pass, 1);
        assert_eq!(r.revision.as_deref(), Some("abc123"));
    }

    #[tokio::test]
    async fn a_standby_replica_refuses_work_with_503() {
        let srv = start(false).await;
        let resp = reqwest::Client::new()
            .post(format!("{}/api/v1/sync", srv.base))
            .bearer_auth("sync-token")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 503);
        assert!(!srv.state.daemon.queue.has_pending());
    }

    #[tokio::test]
    async fn status_health_and_metrics_answer() {
        let srv = start(true).await;
        let c = reqwest::Client::new();
        let s = c
            .get(format!("{}/api/v1/status", srv.base))
            .send()
            .await
            .unwrap();
        let s: serde_json::Value = serde_json::from_str(&s.text().await.unwrap()).unwrap();
        assert_eq!(s["leader"], true);
        assert_eq!(s["ref"], "main");
        assert_eq!(
            c.get(format!("{}/healthz", srv.base))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        assert_eq!(
            c.get(format!("{}/readyz", srv.base))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        let text = c
            .get(format!("{}/metrics", srv.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            text.contains("# TYPE weft_git_fetch_duration_seconds histogram"),
            "{text}"
        );
        assert!(text.contains("# TYPE weft_leader gauge"), "{text}");
    }
}
