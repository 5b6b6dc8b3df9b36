//! `weft ui`: a dashboard of the roots, their inventories, the Armada charts, the WeaveClouds,
//! Weft's events and drift, served on loopback with the user's own kubeconfig, as `kubectl
//! proxy` serves the API: every read and every action is an API-server call made with the
//! user's credentials, so their RBAC decides what they see and may do. Nothing new runs in the
//! cluster and there is no login.
//!
//! Pages are rendered on the server ([`pages`], maud); every asset is embedded in the binary.
//! Read-only views work without JavaScript; with it, [`live`] pushes each re-rendered page body
//! by server-sent events when a watched resource changes. The actions ([`actions`]) are HTML
//! forms: the same API-server writes as `weft suspend` / `weft resume`, and a sync request as an
//! annotation. See docs/ui.md.
//!
//! `weft run --ui` serves the same pages read-only ([`UiConfig::read_only`]) on the daemon's
//! status listener, read with the daemon's own ServiceAccount: no forms, every request that is
//! not a `GET` answered 405 ([`Ui::read_only_pages`]).

mod actions;
mod cluster;
mod drift;
mod live;
mod pages;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use kube::Client;
use tokio::sync::watch;

use crate::apply::plan::Catalog;
use crate::apply::ApplyError;
use crate::pass::PassError;

pub use drift::DriftSource;

/// What `weft ui` serves and from where.
#[derive(Clone)]
pub struct UiConfig {
    /// Weft's namespace: the flag roots' Roots, the inventories and every root's Lease.
    pub weft_namespace: String,
    /// The repository the drift view diffs against (`weft ui PATH` / `--repo`); none: the view
    /// lists what the controllers reported as drifted.
    pub drift: Option<DriftSource>,
    /// How often a live page is re-rendered when no watched resource changed (object health in
    /// an inventory has no watch of its own).
    pub refresh: Duration,
    /// The pages only (`weft run --ui`): no forms, no token, no action routes; any method but
    /// `GET`/`HEAD` is answered 405. Served on the daemon's listener, so no loopback `Host` check.
    pub read_only: bool,
}

/// Why a page or an action failed.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("reading {what} from the API server: {}", crate::api::kube_error::Text(.source))]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{action} through the API server: {}", crate::api::kube_error::Text(.source))]
    Write {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// A request to a Root (sync, suspend, resume) failed; the error names the Root.
    #[error(transparent)]
    Root(#[from] crate::daemon::roots::RootsError),
    #[error("the drift diff: {0}")]
    Drift(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("refused: {0}")]
    Refused(&'static str),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the UI only listens on a loopback address (it acts with your credentials and has no login), not {0}")]
    NotLoopback(SocketAddr),
}

impl From<PassError> for UiError {
    fn from(e: PassError) -> Self {
        UiError::Drift(crate::api::redact::redact_url_passwords(&e.to_string()))
    }
}

impl UiError {
    fn read(what: impl Into<String>) -> impl FnOnce(kube::Error) -> UiError {
        let what = what.into();
        move |source| UiError::Read { what, source }
    }

    fn write(action: impl Into<String>) -> impl FnOnce(kube::Error) -> UiError {
        let action = action.into();
        move |source| UiError::Write { action, source }
    }

    /// The HTTP status: the API server's own for a refused call (403 when RBAC says no).
    fn status(&self) -> StatusCode {
        let api = |e: &kube::Error| match e {
            kube::Error::Api(s) => StatusCode::from_u16(s.code).unwrap_or(StatusCode::BAD_GATEWAY),
            _ => StatusCode::BAD_GATEWAY,
        };
        match self {
            UiError::Read { source, .. }
            | UiError::Write { source, .. }
            | UiError::Root(crate::daemon::roots::RootsError::Kube { source, .. }) => api(source),
            UiError::NotFound(_) => StatusCode::NOT_FOUND,
            UiError::Refused(_) => StatusCode::FORBIDDEN,
            _ => StatusCode::BAD_GATEWAY,
        }
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = pages::error_page(status, &self);
        (status, body).into_response()
    }
}

/// The shared state of the UI's handlers. Cheap to clone.
#[derive(Clone)]
pub struct Ui {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    config: UiConfig,
    /// The per-process token every form carries: another site's page cannot post one.
    token: String,
    /// Counts changes of the watched resources; live pages re-render when it moves.
    changes: watch::Sender<u64>,
    /// Discovery, kept for a minute (the inventory page resolves every kind through it).
    catalog: tokio::sync::Mutex<Option<(Instant, Arc<Catalog>)>>,
    /// Port the server listens on, for the `Host` check.
    port: Mutex<u16>,
    /// Turns true when the server stops: the live streams end (a server waits for its open
    /// answers before it stops).
    stop: watch::Receiver<bool>,
    /// The live streams open, at most [`live::MAX_LIVE_STREAMS`], and the bodies they share.
    live: live::LiveStreams,
}

impl Ui {
    /// A UI reading the cluster through `client`.
    pub fn new(client: Client, config: UiConfig) -> Ui {
        Ui {
            inner: Arc::new(Inner {
                client,
                config,
                token: random_token(),
                changes: watch::channel(0).0,
                catalog: tokio::sync::Mutex::new(None),
                port: Mutex::new(0),
                stop: watch::channel(false).1,
                live: live::LiveStreams::default(),
            }),
        }
    }

    /// The pages read-only (`weft run --ui`), for the daemon's status listener: `config` with
    /// [`UiConfig::read_only`] set, the watches of the live pages started. Every live stream
    /// ends when `stop` turns true.
    pub fn read_only_pages(
        client: Client,
        config: UiConfig,
        stop: watch::Receiver<bool>,
    ) -> Router {
        let mut ui = Ui::new(
            client,
            UiConfig {
                read_only: true,
                ..config
            },
        );
        if let Some(inner) = Arc::get_mut(&mut ui.inner) {
            inner.stop = stop;
        }
        live::watch_cluster(ui.clone());
        ui.router()
    }

    fn client(&self) -> &Client {
        &self.inner.client
    }

    fn config(&self) -> &UiConfig {
        &self.inner.config
    }

    fn token(&self) -> &str {
        &self.inner.token
    }

    async fn catalog(&self) -> Result<Arc<Catalog>, UiError> {
        let mut cached = self.inner.catalog.lock().await;
        if let Some((at, c)) = cached.as_ref() {
            if at.elapsed() < Duration::from_secs(60) {
                return Ok(c.clone());
            }
        }
        let c = Arc::new(Catalog::discover(self.client()).await?);
        *cached = Some((Instant::now(), c.clone()));
        Ok(c)
    }

    fn read_only(&self) -> bool {
        self.inner.config.read_only
    }

    /// The router of every page, asset, action and the live stream (read-only: the action
    /// paths answer 405, as every method but `GET` does).
    pub fn router(&self) -> Router {
        let pages = Router::new()
            .route("/", get(page_roots))
            .route("/roots/{name}", get(page_root))
            .route("/root/{namespace}/{name}", get(page_root_object))
            .route("/armada", get(page_armada))
            .route("/weaveclouds", get(page_weaveclouds))
            .route("/events", get(page_events))
            .route("/drift", get(page_drift))
            .route("/live", get(live::stream))
            .route("/assets/ui.css", get(asset_css))
            .route("/assets/ui.js", get(asset_js))
            // No icon: an empty answer, not a 404 in the browser's console.
            .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }));
        let all = if self.read_only() {
            pages.route("/roots/{name}/{action}", any(read_only)).route(
                "/resources/{kind}/{namespace}/{name}/{action}",
                any(read_only),
            )
        } else {
            pages
                .route("/roots/{name}/{action}", post(actions::root_action))
                .route(
                    "/resources/{kind}/{namespace}/{name}/{action}",
                    post(actions::resource_action),
                )
        };
        all.layer(middleware::from_fn_with_state(self.clone(), guard))
            .with_state(self.clone())
    }

    /// Serve on `addr` (a loopback address) until the process ends. Prints the URL once bound.
    pub async fn serve(self, addr: SocketAddr) -> Result<(), UiError> {
        if !addr.ip().is_loopback() {
            return Err(UiError::NotLoopback(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| UiError::Listen { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| UiError::Listen { addr, source })?;
        if let Ok(mut p) = self.inner.port.lock() {
            *p = bound.port();
        }
        live::watch_cluster(self.clone());
        // Not println!: a closed stdout (`weft ui | head -1`) must not end the UI with a panic.
        let said = format!("weft ui: http://{bound}/ (Ctrl-C to stop)\n");
        let _ = std::io::Write::write_all(&mut std::io::stdout(), said.as_bytes());
        // No Nagle delay on the answers (as `server::listen` does for the daemon's ports).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, self.router())
            .await
            .map_err(|source| UiError::Listen { addr, source })
    }
}

/// 32 random bytes from the kernel, hex: the form token.
fn random_token() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        // No /dev/urandom: the clock and the address of a local are all there is; the Host and
        // Origin checks still stand in front of every form.
        let seed = format!("{:?}{:p}", Instant::now(), &bytes);
        bytes.copy_from_slice(&<sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes()));
    }
    hex::encode(bytes)
}

/// 405: the read-only pages take no action (`weft run --ui`).
async fn read_only() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET, HEAD")],
        "these pages are read-only (weft run --ui); act with `weft ui`, which uses your own kubeconfig\n",
    )
        .into_response()
}

/// Every request: the `Host` must be this loopback listener (a DNS-rebinding page has another
/// name), a state-changing request must come from this origin; every answer forbids framing and
/// any script or style not served here. Read-only pages take `GET` and `HEAD` only and check no
/// `Host`: they act for no one, and whoever reaches the listener may read them anyway.
async fn guard(State(ui): State<Ui>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let answer = checked_request(&ui, request, next).await;
    tracing::debug!(%method, %path, status = answer.status().as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "answered");
    answer
}

/// [`guard`]'s checks, then the request's handler.
async fn checked_request(ui: &Ui, request: Request, next: Next) -> Response {
    // The drift view runs a diff (a fetch, a render, a dry run per object) for whoever opens it:
    // never for another site's page, link or image (issue 48 item 8).
    if request.uri().path() == "/drift" && from_another_site(&request) {
        return UiError::Refused("a request from another site").into_response();
    }
    if ui.read_only() {
        let method = request.method();
        if method != axum::http::Method::GET && method != axum::http::Method::HEAD {
            return read_only().await;
        }
        return with_headers(next.run(request).await);
    }
    let port = ui.inner.port.lock().map(|p| *p).unwrap_or(0);
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !loopback_host(host, port) {
        return UiError::Refused("the Host header does not name this loopback listener")
            .into_response();
    }
    if request.method() != axum::http::Method::GET {
        let origin = request
            .headers()
            .get(header::ORIGIN)
            .and_then(|h| h.to_str().ok());
        let same = origin.is_none_or(|o| {
            o.strip_prefix("http://")
                .is_some_and(|h| loopback_host(h, port))
        });
        if !same || from_another_site(&request) {
            return UiError::Refused("a request from another site").into_response();
        }
    }
    with_headers(next.run(request).await)
}

/// Whether the browser says the request comes from another site's page (`Sec-Fetch-Site`
/// other than `same-origin`, or `none` for an address typed or bookmarked).
fn from_another_site(request: &Request) -> bool {
    request
        .headers()
        .get("sec-fetch-site")
        .and_then(|h| h.to_str().ok())
        .is_some_and(|s| s != "same-origin" && s != "none")
}

/// The headers of every answer: only this UI's own script and style, no framing.
fn with_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        // Not `no-referrer`: with it a browser sends `Origin: null` on the UI's own forms.
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Is `host` (a `Host` header) this listener: `127.0.0.1`, `localhost` or `[::1]` with `port`?
fn loopback_host(host: &str, port: u16) -> bool {
    let Some((name, p)) = host.rsplit_once(':') else {
        return false;
    };
    p.parse::<u16>().ok() == Some(port) && matches!(name, "127.0.0.1" | "localhost" | "[::1]")
}

/// The views, one per page; the live stream names the one it renders by its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum View {
    Roots,
    Root(String),
    /// A Root object: namespace, name.
    RootObject(String, String),
    Armada,
    WeaveClouds,
    Events,
    Drift(Option<String>),
}

impl View {
    /// The view of a page path (`/roots/weft`, `/drift?object=…`), as the live stream is asked.
    fn parse(path: &str) -> Option<View> {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        Some(match path {
            "/" => View::Roots,
            "/armada" => View::Armada,
            "/weaveclouds" => View::WeaveClouds,
            "/events" => View::Events,
            "/drift" => View::Drift(
                url::form_urlencoded::parse(query.as_bytes())
                    .find(|(k, _)| k == "object")
                    .map(|(_, v)| v.into_owned()),
            ),
            p if p.starts_with("/root/") => {
                let (ns, name) = p.strip_prefix("/root/")?.split_once('/')?;
                if ns.is_empty() || name.is_empty() || name.contains('/') {
                    return None;
                }
                View::RootObject(ns.to_string(), name.to_string())
            }
            p => {
                let name = p.strip_prefix("/roots/")?;
                if name.is_empty() || name.contains('/') {
                    return None;
                }
                View::Root(name.to_string())
            }
        })
    }
}

/// A page: the view's body inside the layout.
async fn page(ui: &Ui, view: View) -> Response {
    match pages::main(ui, &view).await {
        Ok(body) => pages::layout(ui, &view, body).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn page_roots(State(ui): State<Ui>) -> Response {
    page(&ui, View::Roots).await
}

async fn page_root(State(ui): State<Ui>, Path(name): Path<String>) -> Response {
    page(&ui, View::Root(name)).await
}

async fn page_root_object(
    State(ui): State<Ui>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    page(&ui, View::RootObject(namespace, name)).await
}

async fn page_armada(State(ui): State<Ui>) -> Response {
    page(&ui, View::Armada).await
}

async fn page_weaveclouds(State(ui): State<Ui>) -> Response {
    page(&ui, View::WeaveClouds).await
}

async fn page_events(State(ui): State<Ui>) -> Response {
    page(&ui, View::Events).await
}

#[derive(serde::Deserialize)]
struct DriftQuery {
    object: Option<String>,
}

async fn page_drift(State(ui): State<Ui>, Query(q): Query<DriftQuery>) -> Response {
    page(&ui, View::Drift(q.object.filter(|o| !o.is_empty()))).await
}

const CSS: &str = include_str!("assets/ui.css");
const JS: &str = include_str!("assets/ui.js");

async fn asset_css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        CSS,
    )
        .into_response()
}

async fn asset_js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        JS,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_are_parsed_from_page_paths() {
        assert_eq!(View::parse("/"), Some(View::Roots));
        assert_eq!(View::parse("/roots/weft"), Some(View::Root("weft".into())));
        assert_eq!(
            View::parse("/root/team-a/apps"),
            Some(View::RootObject("team-a".into(), "apps".into()))
        );
        assert_eq!(View::parse("/root/team-a"), None);
        assert_eq!(View::parse("/root/team-a/apps/x"), None);
        assert_eq!(View::parse("/roots/"), None);
        assert_eq!(View::parse("/roots/a/b"), None);
        assert_eq!(
            View::parse("/drift?object=ConfigMap%2Fa"),
            Some(View::Drift(Some("ConfigMap/a".into())))
        );
        assert_eq!(View::parse("/nope"), None);
    }

    #[test]
    fn only_this_loopback_listener_is_a_host() {
        assert!(loopback_host("127.0.0.1:9292", 9292));
        assert!(loopback_host("localhost:9292", 9292));
        assert!(loopback_host("[::1]:9292", 9292));
        assert!(!loopback_host("127.0.0.1:9293", 9292));
        assert!(!loopback_host("evil.example:9292", 9292));
        assert!(!loopback_host("127.0.0.1", 9292));
    }

    /// Issue 48 item 8: another site's page could make the browser open the drift view (a diff
    /// per visit).
    #[tokio::test]
    async fn the_drift_view_is_not_opened_for_another_site() {
        use tower::ServiceExt;
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let ui = Ui::new(
            kube::Client::try_from(config).expect("client"),
            UiConfig {
                weft_namespace: "weft".into(),
                drift: None,
                refresh: Duration::from_secs(5),
                read_only: false,
            },
        );
        let get = |site: &str| {
            axum::http::Request::get("/drift")
                .header(header::HOST, "127.0.0.1:0")
                .header("sec-fetch-site", site)
                .body(axum::body::Body::empty())
                .expect("a request")
        };
        let answer = ui
            .router()
            .oneshot(get("cross-site"))
            .await
            .expect("answer");
        assert_eq!(answer.status(), StatusCode::FORBIDDEN);
        let answer = ui
            .router()
            .oneshot(get("same-origin"))
            .await
            .expect("answer");
        assert_ne!(answer.status(), StatusCode::FORBIDDEN);
    }

    #[test]
    fn tokens_are_random() {
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
