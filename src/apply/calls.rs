//! A kube [`Client`] that counts the API calls it makes, by kind of call. The no-op guarantee
//! ("a pass over an unchanged repository makes zero write calls") is checked with these counts in
//! tests and benchmarks, and `weft sync` prints them. The same layer hands every call's method,
//! answer code and latency to a [`CallObserver`] when one is set (the daemon's
//! `rest_client_*` metrics): the one place every API call of a client passes.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

// Re-exported: the classification is what the counters count by.
pub use super::fence::{classify, CallKind};
use super::fence::{FenceLayer, WriteFence};

/// Counters shared by every clone of the client.
#[derive(Clone, Debug, Default)]
pub struct CallCounts(Arc<Inner>);

#[derive(Default)]
struct Inner {
    reads: AtomicU64,
    writes: AtomicU64,
    dry_runs: AtomicU64,
    /// Told of every finished call, once set (see [`CallCounts::observe_with`]).
    observer: OnceLock<Arc<dyn CallObserver>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("reads", &self.reads)
            .field("writes", &self.writes)
            .field("dry_runs", &self.dry_runs)
            .field("observed", &self.observer.get().is_some())
            .finish()
    }
}

/// Told of every API call a client made once it is answered: its method, the HTTP status code
/// (`None` when no answer came: a connection error, a timeout, a write refused by the fence) and
/// how long the answer took (to its headers; a watch's stream is not waited for). The caller
/// decides what to make of it (the daemon: Prometheus metrics), so this layer knows no metric.
pub trait CallObserver: Send + Sync {
    fn observe(&self, method: &http::Method, code: Option<u16>, seconds: f64);
}

/// A snapshot of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallSnapshot {
    /// GET (get, list, watch, discovery).
    pub reads: u64,
    /// POST, PUT, PATCH, DELETE that change the cluster.
    pub writes: u64,
    /// Writes with `dryRun=All`: they change nothing.
    pub dry_runs: u64,
}

impl std::ops::Sub for CallSnapshot {
    type Output = CallSnapshot;
    fn sub(self, o: CallSnapshot) -> CallSnapshot {
        CallSnapshot {
            reads: self.reads.saturating_sub(o.reads),
            writes: self.writes.saturating_sub(o.writes),
            dry_runs: self.dry_runs.saturating_sub(o.dry_runs),
        }
    }
}

impl CallCounts {
    /// The counts so far.
    pub fn snapshot(&self) -> CallSnapshot {
        CallSnapshot {
            reads: self.0.reads.load(Ordering::Relaxed),
            writes: self.0.writes.load(Ordering::Relaxed),
            dry_runs: self.0.dry_runs.load(Ordering::Relaxed),
        }
    }

    /// Tell `observer` of every call from now on (by every clone of the client); the first
    /// observer set stays (`false` when one was set already).
    pub fn observe_with(&self, observer: Arc<dyn CallObserver>) -> bool {
        self.0.observer.set(observer).is_ok()
    }

    fn record(&self, method: &http::Method, query: Option<&str>) {
        let counter = match classify(method, query) {
            CallKind::Read => &self.0.reads,
            CallKind::DryRun => &self.0.dry_runs,
            CallKind::Write => &self.0.writes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The tower layer that counts.
#[derive(Clone, Debug)]
pub struct CountingLayer(pub CallCounts);

impl<S> tower::Layer<S> for CountingLayer {
    type Service = Counting<S>;
    fn layer(&self, inner: S) -> Counting<S> {
        Counting {
            inner,
            counts: self.0.clone(),
        }
    }
}

/// The service the layer wraps around the client's stack.
#[derive(Clone, Debug)]
pub struct Counting<S> {
    inner: S,
    counts: CallCounts,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> tower::Service<http::Request<B>> for Counting<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    RB: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        self.counts.record(req.method(), req.uri().query());
        let observer = self.counts.0.observer.get().cloned();
        let method = req.method().clone();
        let start = Instant::now();
        let call = self.inner.call(req);
        Box::pin(async move {
            let answer = call.await;
            if let Some(observer) = observer {
                let code = answer.as_ref().ok().map(|r| r.status().as_u16());
                observer.observe(&method, code, start.elapsed().as_secs_f64());
            }
            answer
        })
    }
}

/// Why a client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("kubeconfig {path}: {}; give --kubeconfig a readable kubeconfig file (`kubectl config view --kubeconfig {path}` checks it)", crate::api::kube_error::kubeconfig_problem(.source))]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no cluster configuration: {}; give --kubeconfig, set KUBECONFIG, or run in a pod", crate::api::kube_error::infer_text(.0))]
    Infer(#[source] kube::config::InferConfigError),
    #[error("kubeconfig: {}", crate::api::kube_error::kubeconfig_text(.0))]
    Config(#[source] kube::config::KubeconfigError),
    #[error("building the Kubernetes client: {}", crate::api::kube_error::Text(.0))]
    Client(#[source] kube::Error),
}

/// Load the cluster configuration: `--kubeconfig`/`--context` if given, otherwise the usual
/// inference (`KUBECONFIG` or `~/.kube/config`, then in-cluster).
pub async fn config(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<Config, ConnectError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| ConnectError::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(ConnectError::Config)
        }
        None if context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(ConnectError::Config),
        None => Config::infer().await.map_err(ConnectError::Infer),
    }
}

/// How long an API call may go without an answer by default (`--api-timeout`).
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(60);

/// A client for `config` whose calls are counted in the returned [`CallCounts`], with the default
/// API deadline and no write fence.
pub fn counting_client(config: Config) -> Result<(Client, CallCounts), ConnectError> {
    counting_client_with(
        config,
        FenceLayer {
            fence: WriteFence::unenforced(),
            timeout: DEFAULT_API_TIMEOUT,
        },
    )
}

/// A client for `config` whose calls are counted, each bounded and fenced by `fence`.
pub fn counting_client_with(
    config: Config,
    fence: FenceLayer,
) -> Result<(Client, CallCounts), ConnectError> {
    let counts = CallCounts::default();
    let client = ClientBuilder::try_from(config)
        .map_err(ConnectError::Client)?
        .with_layer(&fence)
        .with_layer(&CountingLayer(counts.clone()))
        .build();
    Ok((client, counts))
}

/// A client that shares `transport`'s connections (its connection pool, TLS set-up and HTTP
/// buffers), its calls counted, each bounded and fenced by `fence`. A replica builds one such
/// client per root it holds: each with a connection pool of its own kept ≈ 150 KiB of idle
/// connections' buffers and TLS state per root (heaptrack of 68 held roots, issue 47 item 4).
pub fn client_over(transport: &Client, fence: FenceLayer) -> (Client, CallCounts) {
    let counts = CallCounts::default();
    let namespace = transport.default_namespace().to_string();
    let transport = transport.clone();
    let send = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let transport = transport.clone();
        async move { transport.send(req).await.map_err(tower::BoxError::from) }
    });
    let service = tower::ServiceBuilder::new()
        .layer(CountingLayer(counts.clone()))
        .layer(fence)
        .service(send);
    (Client::new(service, namespace), counts)
}

/// The most one pooled connection keeps as its read buffer. hyper grows a connection's read
/// buffer to the largest read it made (up to ~400 KiB) and keeps it while the connection idles
/// in the pool: a replica's pool after a round of passes held ~67 connections with ~170 KiB
/// each, 11.6 MB of its 20 MB heap (heaptrack, issue 47 item 4). TLS hands data over in records
/// of at most 16 KiB, so larger reads save little.
const READ_BUFFER_MAX: usize = 32 * 1024;

/// A client for `config` as `kube::Client::try_from` builds it (TLS, authentication, the base
/// URI, connect/read/write timeouts, retries of throttled calls) whose pooled connections keep
/// at most [`READ_BUFFER_MAX`] of read buffer each: the connections a replica's held roots
/// share ([`client_over`]). A proxy or an exec credential plugin: kube's own client.
pub fn pooled_transport(config: &Config) -> Result<Client, ConnectError> {
    use kube::client::ConfigExt;
    use tower::ServiceExt as _;
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        return Client::try_from(config.clone()).map_err(ConnectError::Client);
    }
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    // A request is not held back for the ACK of the previous segment (Nagle's algorithm), as
    // client-go's connections are not.
    http.set_nodelay(true);
    let https = config
        .rustls_https_connector_with_connector(http)
        .map_err(ConnectError::Client)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http1_max_buf_size(READ_BUFFER_MAX)
        .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer().map_err(ConnectError::Client)?)
        .layer(config.extra_headers_layer().map_err(ConnectError::Client)?)
        .service(hyper.map_err(tower::BoxError::from));
    Ok(Client::new(service, config.default_namespace.clone()))
}

/// [`config`] then [`counting_client_with`].
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    fence: FenceLayer,
) -> Result<(Client, CallCounts), ConnectError> {
    counting_client_with(config(kubeconfig, context).await?, fence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<(String, Option<u16>)>>);

    impl CallObserver for Seen {
        fn observe(&self, method: &http::Method, code: Option<u16>, seconds: f64) {
            assert!(seconds >= 0.0);
            self.0.lock().unwrap().push((method.to_string(), code));
        }
    }

    #[tokio::test]
    async fn the_observer_sees_each_call_with_its_code_or_none_for_an_error() {
        use tower::{Layer, Service, ServiceExt};
        let counts = CallCounts::default();
        let seen = Arc::new(Seen::default());
        assert!(counts.observe_with(seen.clone()));
        let inner = tower::service_fn(|req: http::Request<()>| async move {
            if req.uri().path() == "/broken" {
                return Err("connection refused");
            }
            let code: u16 = if req.method() == http::Method::GET {
                200
            } else {
                409
            };
            Ok(http::Response::builder().status(code).body(()).unwrap())
        });
        let mut svc = CountingLayer(counts.clone()).layer(inner);
        for (method, path) in [("GET", "/api"), ("PATCH", "/api/x"), ("GET", "/broken")] {
            let req = http::Request::builder()
                .method(method)
                .uri(path)
                .body(())
                .unwrap();
            let _ = svc.ready().await.unwrap().call(req).await;
        }
        assert_eq!(
            *seen.0.lock().unwrap(),
            vec![
                ("GET".to_string(), Some(200)),
                ("PATCH".to_string(), Some(409)),
                ("GET".to_string(), None),
            ]
        );
        assert_eq!(counts.snapshot().reads, 2);
        assert!(
            !counts.observe_with(Arc::new(Seen::default())),
            "the first observer stays"
        );
    }

    #[test]
    fn classifies_methods_and_dry_runs() {
        let c = CallCounts::default();
        c.record(&http::Method::GET, Some("labelSelector=a"));
        c.record(&http::Method::PATCH, Some("fieldManager=weft&force=true"));
        c.record(&http::Method::PATCH, Some("dryRun=All&fieldManager=weft"));
        c.record(&http::Method::DELETE, None);
        assert_eq!(
            c.snapshot(),
            CallSnapshot {
                reads: 1,
                writes: 2,
                dry_runs: 1
            }
        );
    }
}
