//! The daemon's HTTP API (axum on hyper), on two listeners.
//!
//! Port `hooks` (`--hooks-listen`, default `0.0.0.0:8081`): the only input Weft takes over the
//! network, every request authenticated.
//!
//! | route | what |
//! |---|---|
//! | `POST /api/v1/sync[?wait=true][&update=true][&forcePrune=true]` | bearer token; a pass of the flag root's Root (202), or wait for it and return its [`PassReport`](crate::daemon::status::PassReport) (200); `update=true` also starts an agent update check now; `forcePrune=true` lets that pass prune past `--max-prune-fraction` |
//! | `POST /api/v1/sync?root=<namespace>/<name>` | bearer token; a pass of that Root object now (202, answered in its status), 404 for a Root this daemon does not reconcile |
//! | `POST /api/v1/suspend[?message=…]`, `POST /api/v1/resume` | bearer token; set `spec.suspend` of the flag root's Root (every replica obeys it); resuming starts a pass; answers the suspension as JSON |
//! | `POST /hooks/github` | `X-Hub-Signature-256` HMAC; a push to the followed ref queues a pass |
//! | `POST /hooks/gitlab` | `X-Gitlab-Token`; same |
//! | `POST /hooks/generic` | `X-Weft-Signature: sha256=<hmac>`; same (a JSON `ref` field is filtered) |
//!
//! Port `http` (`--listen`, default `0.0.0.0:8080`): read-only, for the cluster.
//!
//! | route | what |
//! |---|---|
//! | `GET /api/v1/status` | [`DaemonStatus`] as JSON |
//! | `GET /healthz`, `GET /readyz` | liveness, readiness |
//! | `GET /metrics` | Prometheus text |
//! | `GET /`, `/roots/…`, `/armada`, … | with `weft run --ui` only: the dashboard's pages, read-only (the caller's routes, [`serve_with_pages`]) |
//!
//! Hostile clients are bounded by [`HttpLimits`]: connections per listener and per peer, header,
//! body and request timeouts ([`listen`]), body caps and one body budget with a share per peer
//! ([`body`]), and credentials in headers are checked before a body is read. On the hooks port a
//! connection is closed after any answer that is not 2xx (no unauthenticated keep-alive). Webhook deliveries are refused when replayed
//! ([`replay`]); each provider has its own secret ([`secrets`]).

pub mod body;
pub mod client;
pub mod forward;
pub mod listen;
pub mod push_events;
pub mod replay;
pub mod secrets;
pub mod signature;
mod suspend;
mod webhooks;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::daemon::roots::answer;
use crate::daemon::roots::pushes::RequestReason;
use crate::daemon::state::DaemonState;
use crate::daemon::status::DaemonStatus;
pub use body::BodyBudget;
pub use listen::HttpLimits;
pub use replay::ReplayCache;
pub use secrets::WebhookSecrets;
use signature::SignatureError;

/// Largest webhook body accepted (GitHub caps its payloads at 25 MB, but push events of a config
/// repository are far smaller; a bigger body is refused with 413 before it is buffered).
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
    /// The daemon's state: the Root controller's intake (pushes, and requests for the flag
    /// root's Root with their answers), status, metrics and agent update requests.
    pub daemon: DaemonState,
    /// The sync token and the webhook secrets; swapped whole when their files change (see
    /// [`ServerState::set_sync_token`]).
    secrets: Arc<std::sync::RwLock<Secrets>>,
    /// The ref Weft follows (`--ref`), for the webhooks' branch filter.
    pub followed_ref: String,
    /// True once the daemon is initialised (API server reachable); false again when stopping.
    pub ready: watch::Receiver<bool>,
    /// How long `?wait=true` waits for its pass.
    pub wait_timeout: Duration,
    /// Connection, timeout and body bounds.
    pub limits: HttpLimits,
    /// Bytes of bodies being read, all requests of both listeners together.
    pub body_budget: BodyBudget,
    /// Webhook deliveries seen within the replay window.
    pub deliveries: Arc<ReplayCache>,
    /// Where a standby finds the leader to forward work to; `None`: a standby answers 503.
    pub leader_link: Option<forward::LeaderLink>,
}

impl ServerState {
    /// A state with every endpoint closed (no token, no webhook secret) and default limits; set
    /// `sync_token` and `webhooks` to open them.
    pub fn new(
        daemon: DaemonState,
        followed_ref: impl Into<String>,
        ready: watch::Receiver<bool>,
        wait_timeout: Duration,
    ) -> ServerState {
        ServerState::with_limits(
            daemon,
            followed_ref,
            ready,
            wait_timeout,
            HttpLimits::default(),
        )
    }

    /// [`ServerState::new`] with other limits.
    pub fn with_limits(
        daemon: DaemonState,
        followed_ref: impl Into<String>,
        ready: watch::Receiver<bool>,
        wait_timeout: Duration,
        limits: HttpLimits,
    ) -> ServerState {
        ServerState {
            daemon,
            secrets: Arc::new(std::sync::RwLock::new(Secrets {
                sync_token: None,
                webhooks: WebhookSecrets::none(),
            })),
            followed_ref: followed_ref.into(),
            ready,
            wait_timeout,
            body_budget: BodyBudget::with_per_peer(
                limits.body_budget_bytes,
                limits.body_bytes_per_peer,
            ),
            limits,
            deliveries: Arc::new(ReplayCache::default()),
            leader_link: None,
        }
    }

    fn is_leader(&self) -> bool {
        self.daemon.is_leader()
    }

    fn secrets(&self) -> std::sync::RwLockReadGuard<'_, Secrets> {
        self.secrets.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The bearer token of the sync endpoint (`--sync-token-file`); `None` closes the endpoint.
    pub fn sync_token(&self) -> Option<Arc<Vec<u8>>> {
        self.secrets().sync_token.clone()
    }

    /// The webhooks' secrets, one per provider (`--webhook-secret-file`).
    pub fn webhooks(&self) -> WebhookSecrets {
        self.secrets().webhooks.clone()
    }

    /// Use this sync token from now on (every clone of this state sees it); whether it changed.
    pub fn set_sync_token(&self, token: Option<Arc<Vec<u8>>>) -> bool {
        let mut s = self.secrets.write().unwrap_or_else(|p| p.into_inner());
        let changed = s.sync_token != token;
        s.sync_token = token;
        changed
    }

    /// Use these webhook secrets from now on (every clone of this state sees them); whether they
    /// changed.
    pub fn set_webhooks(&self, webhooks: WebhookSecrets) -> bool {
        let mut s = self.secrets.write().unwrap_or_else(|p| p.into_inner());
        let changed = s.webhooks != webhooks;
        s.webhooks = webhooks;
        changed
    }
}

/// The credentials the endpoints check.
#[derive(Debug)]
struct Secrets {
    sync_token: Option<Arc<Vec<u8>>>,
    webhooks: WebhookSecrets,
}

/// The routes of port `hooks`: webhooks and the sync endpoint.
pub fn hooks_router(state: ServerState) -> Router {
    let timeout = state.limits.request_timeout;
    Router::new()
        .route("/hooks/github", post(webhooks::github))
        .route("/hooks/gitlab", post(webhooks::gitlab))
        .route("/hooks/generic", post(webhooks::generic))
        .layer(middleware::from_fn_with_state(
            timeout,
            whole_request_timeout,
        ))
        // Not under the request timeout: `?wait=true` waits for a pass (bounded by
        // `wait_timeout`); its body read has the body timeout.
        .route("/api/v1/sync", post(sync))
        .route("/api/v1/suspend", post(suspend::suspend_root))
        .route("/api/v1/resume", post(suspend::resume_root))
        .layer(middleware::map_response(close_unless_accepted))
        .with_state(state)
}

/// On the hooks port a connection stays open only after a request that was accepted (2xx): a
/// client that failed its credential, sent a bad request or asked for a path that does not
/// exist is answered and closed, so unauthenticated clients cannot park keep-alive connections.
async fn close_unless_accepted(mut resp: Response) -> Response {
    if !resp.status().is_success() {
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// The routes of port `http`: status, health, metrics. The hooks' paths answer 404 with a hint.
pub fn http_router(state: ServerState) -> Router {
    let timeout = state.limits.request_timeout;
    Router::new()
        .route("/api/v1/status", get(status))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/api/v1/sync", any(on_the_hooks_port))
        .route("/hooks/{*hook}", any(on_the_hooks_port))
        .layer(middleware::from_fn_with_state(
            timeout,
            whole_request_timeout,
        ))
        .with_state(state)
}

/// The two listeners of the server.
pub struct Listeners {
    /// Port `http` (`--listen`).
    pub http: TcpListener,
    /// Port `hooks` (`--hooks-listen`).
    pub hooks: TcpListener,
}

impl Listeners {
    /// Bind both addresses.
    pub async fn bind(http: &str, hooks: &str) -> Result<Listeners, ServerError> {
        Ok(Listeners {
            http: bind(http).await?,
            hooks: bind(hooks).await?,
        })
    }
}

/// Bind `addr` (e.g. `0.0.0.0:8080`).
pub async fn bind(addr: &str) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.to_string(),
            source,
        })
}

/// Serve both listeners until `shutdown` resolves; then stop accepting, let in-flight requests
/// finish and return once every connection is closed.
pub async fn serve(
    listeners: Listeners,
    state: ServerState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    serve_with_pages(listeners, state, None, shutdown).await
}

/// [`serve`], with `pages` (read-only routes of the caller's, `weft run --ui`) beside the
/// routes of port `http`. They keep their own layers: the request timeout of port `http` is not
/// theirs (a live page holds its answer open).
pub async fn serve_with_pages(
    listeners: Listeners,
    state: ServerState,
    pages: Option<Router>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let stop_token = tokio_util::sync::CancellationToken::new();
    let limits = state.limits;
    let mut http_routes = http_router(state.clone());
    if let Some(pages) = pages {
        http_routes = http_routes.merge(pages);
    }
    // The probes are on port `http`: only it keeps a reserve for them.
    let http = listen::serve_listener(
        "http",
        listeners.http,
        http_routes,
        limits,
        listen::PROBE_RESERVE,
        stop_token.clone(),
    );
    let hooks = listen::serve_listener(
        "hooks",
        listeners.hooks,
        hooks_router(state),
        limits,
        0,
        stop_token.clone(),
    );
    let stop = async move {
        shutdown.await;
        stop_token.cancel();
    };
    let (http, hooks, ()) = tokio::join!(http, hooks, stop);
    http.and(hooks).map_err(ServerError::Serve)
}

/// 408 for a request not answered within `limit`. Not tower-http's `TimeoutLayer`: its 408 has
/// no body and keeps the connection; this one says what happened and closes the connection.
async fn whole_request_timeout(
    State(limit): State<Duration>,
    req: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => {
            let mut resp = error_body(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request was not completed within {}s", limit.as_secs()),
            );
            resp.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
            resp
        }
    }
}

async fn on_the_hooks_port() -> Response {
    error_body(
        StatusCode::NOT_FOUND,
        "POST /api/v1/sync and /hooks/* are served on the hooks port (--hooks-listen, default 8081), not on this one",
    )
}

fn error_body(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// 401 (403 for a closed endpoint) for a failed check, with a log line that says why (never the
/// secret or the presented value).
fn refused(state: &ServerState, endpoint: &str, peer: SocketAddr, err: SignatureError) -> Response {
    tracing::warn!(endpoint, peer = %peer, reason = %err, "request refused: authentication failed");
    let (status, outcome) = match err {
        SignatureError::NotConfigured | SignatureError::Closed(_) => {
            (StatusCode::FORBIDDEN, "closed")
        }
        _ => (StatusCode::UNAUTHORIZED, "unauthorized"),
    };
    state.daemon.metrics().count_request(endpoint, outcome);
    error_body(status, err.to_string())
}

/// The answer to a body that could not be read; the connection is closed after it (the rest of
/// the body is not read).
fn body_refused(
    state: &ServerState,
    endpoint: &str,
    peer: SocketAddr,
    err: body::BodyError,
) -> Response {
    tracing::warn!(endpoint, peer = %peer, reason = %err, "request refused: body not read");
    state
        .daemon
        .metrics()
        .count_request(endpoint, err.outcome());
    let mut resp = error_body(err.status(), err.to_string());
    resp.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    resp
}

fn standby(state: &ServerState, endpoint: &str) -> Response {
    state.daemon.metrics().count_request(endpoint, "standby");
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
    /// `?forcePrune=true`: the pass may prune past `--max-prune-fraction`, once.
    #[serde(default, rename = "forcePrune")]
    force_prune: Option<String>,
    /// `?root=<namespace>/<name>`: a pass of that Root object instead of the flag root.
    #[serde(default)]
    root: Option<String>,
}

/// A query flag given as `?flag`, `?flag=true` or `?flag=1`.
fn flag(value: Option<&str>) -> bool {
    matches!(value, Some("true") | Some("1") | Some(""))
}

async fn sync(
    State(state): State<ServerState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(q): Query<SyncQuery>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    const ENDPOINT: &str = "sync";
    // The token is in the headers: a wrong one is refused before a byte of the body is read.
    if let Err(e) = signature::verify_bearer(
        state.sync_token().as_deref().map(Vec::as_slice),
        header_str(&headers, header::AUTHORIZATION.as_str()),
    ) {
        return refused(&state, ENDPOINT, peer, e);
    }
    // The endpoint takes no body; one is read (within its cap) only to keep the connection usable.
    let limit = state.limits.body(MAX_SYNC_BODY_BYTES);
    let bytes = match body::read(body, &headers, limit, &state.body_budget, peer.ip()).await {
        Ok(b) => b,
        Err(e) => return body_refused(&state, ENDPOINT, peer, e),
    };
    let path = uri.path_and_query().map_or("/api/v1/sync", |p| p.as_str());
    let onward = forward::Forward {
        endpoint: ENDPOINT,
        method: axum::http::Method::POST,
        path_and_query: path,
        headers: &headers,
        body: axum::body::Bytes::copy_from_slice(&bytes),
        timeout: state.wait_timeout + Duration::from_secs(5),
    };
    if let (Some(by), Some(root)) = (forward::roots_forwarded_by(&headers), &q.root) {
        // Passed on by the replica that took it: pass the Root if it is held here, nothing else.
        return pass_held_root(&state, root, &by);
    }
    if !state.is_leader() {
        let forwarded = forward::to_leader(&state, onward).await;
        return forwarded.unwrap_or_else(|| standby(&state, ENDPOINT));
    }
    if let Some(root) = q.root.as_deref() {
        return sync_root_object(&state, peer, root, &q, onward);
    }
    forward::to_other_shards(&state, onward);
    // A request of the flag root's Root: the number of its next pass, which carries the
    // request's reasons (`forcePrune`) and whose report answers `?wait=true`
    // (`daemon::roots::answer`).
    let force_prune = flag(q.force_prune.as_deref());
    let reason = match force_prune {
        true => RequestReason::ApiForcePrune,
        false => RequestReason::Api,
    };
    let pass = match answer::request(&state.daemon, &reason) {
        Ok(pass) => pass,
        Err(_) => return standby(&state, ENDPOINT),
    };
    tracing::info!(pass, peer = %peer, force_prune, "sync requested over the API");
    if flag(q.update.as_deref()) {
        tracing::info!(peer = %peer, "agent update check requested over the API");
        state.daemon.update_requests().request();
    }
    let wait = flag(q.wait.as_deref());
    if !wait {
        state.daemon.metrics().count_request(ENDPOINT, "queued");
        return (
            StatusCode::ACCEPTED,
            Json(json!({"status": "queued", "pass": pass})),
        )
            .into_response();
    }
    let answered = state.daemon.root_pushes().flag().wait(pass);
    match tokio::time::timeout(state.wait_timeout, answered).await {
        Ok(Ok((_, report))) => {
            state.daemon.metrics().count_request(ENDPOINT, "completed");
            (StatusCode::OK, Json((*report).clone())).into_response()
        }
        Ok(Err(_)) => standby(&state, ENDPOINT),
        Err(_) => {
            state.daemon.metrics().count_request(ENDPOINT, "timeout");
            error_body(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "pass {} did not finish within {}s; it is still queued or running",
                    pass,
                    state.wait_timeout.as_secs()
                ),
            )
        }
    }
}

/// The Root a `?root=<namespace>/<name>` names, if it is of a namespace this daemon watches.
fn named_root(state: &ServerState, root: &str) -> Option<crate::api::ResourceKey> {
    let (namespace, name) = root.split_once('/')?;
    let watched = !namespace.is_empty()
        && !name.is_empty()
        && state.daemon.watch_namespaces().contains(namespace);
    watched.then(|| crate::api::ResourceKey {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// `POST /api/v1/sync?root=<namespace>/<name>`: a pass of that Root now (202), answered in its
/// status; `wait`, `update` and `forcePrune` are for the flag root. A Root another replica
/// holds passes there: the request is passed on to its holder over HTTP, as a push is (or,
/// when it cannot be, asked through the Root's `weft.io/requested-at`).
fn sync_root_object(
    state: &ServerState,
    peer: SocketAddr,
    root: &str,
    q: &SyncQuery,
    onward: forward::Forward<'_>,
) -> Response {
    const ENDPOINT: &str = "sync";
    if q.wait.is_some() || q.update.is_some() || q.force_prune.is_some() {
        return error_body(
            StatusCode::BAD_REQUEST,
            "wait, update and forcePrune are for the flag root; a Root's answer is its status (`weft trigger root NAME -n NS --wait`)",
        );
    }
    let shown = crate::api::bounded::clip(root, 253);
    let Some(key) = named_root(state, root) else {
        return error_body(
            StatusCode::BAD_REQUEST,
            format!("root={shown}: name a Root as <namespace>/<name> of a namespace this daemon watches"),
        );
    };
    let pushes = state.daemon.root_pushes();
    if pushes.held_elsewhere(&key) {
        tracing::info!(root = %key, peer = %peer, "a pass of a Root another replica holds requested over the API; passing the request on");
        forward::to_root_holders(state, onward, vec![key.clone()], "sync request");
    } else if !pushes.wake(&key) {
        state.daemon.metrics().count_request(ENDPOINT, "not_found");
        return error_body(
            StatusCode::NOT_FOUND,
            format!("no Root {shown} is reconciled here (`weft get roots -A` lists them)"),
        );
    } else {
        tracing::info!(root = %key, peer = %peer, "a pass of a Root requested over the API");
    }
    state.daemon.metrics().count_request(ENDPOINT, "queued");
    (
        StatusCode::ACCEPTED,
        Json(json!({"status": "queued", "root": key.to_string()})),
    )
        .into_response()
}

/// A `?root=` request another replica passed on ([`forward::ROOTS_FORWARDED_HEADER`]): the Root
/// passes here if this replica holds it, and the answer's `roots` names it (empty when not: the
/// sender then asks it through the API server). Nothing else: no forward, no Root written.
fn pass_held_root(state: &ServerState, root: &str, by: &str) -> Response {
    const ENDPOINT: &str = "sync";
    let pushes = state.daemon.root_pushes();
    let here: Vec<String> = named_root(state, root)
        .filter(|key| pushes.wake_here(key, &RequestReason::Api))
        .map(|key| key.to_string())
        .into_iter()
        .collect();
    tracing::info!(from = by, roots = %here.join(","), "a sync request passed on by another replica asked the Root held here for a pass");
    state.daemon.metrics().count_request(ENDPOINT, "queued");
    (
        StatusCode::ACCEPTED,
        Json(json!({"status": "queued", "roots": here})),
    )
        .into_response()
}

async fn status(State(state): State<ServerState>) -> Response {
    let status: DaemonStatus = state.daemon.status_snapshot();
    Json(status).into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready: the API server answered at start and answers its `/readyz` now, and the repository can
/// be fetched; otherwise the body says why (the status's `ApiServerReady` and `SourceReady`
/// conditions).
async fn readyz(State(state): State<ServerState>) -> Response {
    if !*state.ready.borrow() {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response();
    }
    let status = state.daemon.status_snapshot();
    let source = status.conditions.iter().find(|c| {
        [
            crate::daemon::roots::repository::SOURCE_READY,
            crate::daemon::health::API_SERVER_READY,
        ]
        .contains(&c.type_.as_str())
            && c.status == crate::api::conditions::ConditionStatus::False
    });
    match source {
        Some(c) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}: {}\n", c.reason, c.message),
        )
            .into_response(),
        None => (StatusCode::OK, "ready\n").into_response(),
    }
}

async fn metrics_text(State(state): State<ServerState>) -> Response {
    match state.daemon.metrics().render() {
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
