//! Two guards on every API call of the daemon's client, as a tower layer under kube's
//! [`Client`](kube::Client):
//!
//! - **A deadline**: a call whose response has not begun within `--api-timeout` fails, so a hung
//!   API server (or a proxy that swallows requests) cannot hold a pass, or a Lease renewal,
//!   forever. kube's own client has no read timeout by default. A watch answers its headers at
//!   once, so the deadline does not cut a long watch.
//! - **A write fence** ([`WriteFence`]): a replica may write only while its leader Lease is
//!   fresh. The elector opens the fence until `renewal sent + renew deadline` after each
//!   successful renewal; once that moment passes without another renewal every write (POST, PUT,
//!   PATCH, DELETE; dry runs and the Lease itself excepted) is refused here, before it leaves the
//!   process, whatever task or blocking thread makes it. Another replica takes the Lease only
//!   after it has seen no renewal for the whole lease duration, which is longer than the renew
//!   deadline: the writes of the old leader have stopped by then.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Why a call was refused before it was sent, or given up.
#[derive(Debug, thiserror::Error)]
pub enum CallRefused {
    #[error("write refused: this replica's Lease (the leader's, or the root's it writes for) was not renewed in time; another replica may hold it now")]
    NotLeader,
    #[error("the API server did not answer within {}s (--api-timeout)", .0.as_secs())]
    Timeout(Duration),
}

/// Whether this process may write to the cluster now. Clones share the state.
#[derive(Clone, Debug)]
pub struct WriteFence(Arc<FenceState>);

#[derive(Debug)]
struct FenceState {
    /// `false`: every write passes (`weft sync`, tests): no election takes place.
    enforced: AtomicBool,
    origin: Instant,
    /// Writes pass until `origin` + this many milliseconds.
    open_until_ms: AtomicU64,
}

impl WriteFence {
    /// A fence that lets every write through: a one-shot command elects no leader.
    pub fn unenforced() -> WriteFence {
        WriteFence(Arc::new(FenceState {
            enforced: AtomicBool::new(false),
            origin: Instant::now(),
            open_until_ms: AtomicU64::new(0),
        }))
    }

    /// A closed fence: no write passes until [`open_until`](Self::open_until) (the daemon, before
    /// it holds the leader Lease).
    pub fn closed() -> WriteFence {
        let fence = WriteFence::unenforced();
        fence.0.enforced.store(true, Ordering::SeqCst);
        fence
    }

    /// Let writes pass until `deadline` (never shortens an open fence: renewals may finish out of
    /// order).
    pub fn open_until(&self, deadline: Instant) {
        let ms = deadline
            .saturating_duration_since(self.0.origin)
            .as_millis()
            .try_into()
            .unwrap_or(u64::MAX);
        self.0.open_until_ms.fetch_max(ms, Ordering::SeqCst);
    }

    /// Refuse every write from now on (leadership lost or given up).
    pub fn close(&self) {
        self.0.enforced.store(true, Ordering::SeqCst);
        self.0.open_until_ms.store(0, Ordering::SeqCst);
    }

    /// Whether a write may be sent now.
    pub fn allows_writes(&self) -> bool {
        if !self.0.enforced.load(Ordering::SeqCst) {
            return true;
        }
        let now = self.0.origin.elapsed().as_millis();
        now < u128::from(self.0.open_until_ms.load(Ordering::SeqCst))
    }
}

impl Default for WriteFence {
    fn default() -> Self {
        WriteFence::unenforced()
    }
}

/// Whether a request changes the cluster and is not the election itself.
fn is_fenced(method: &http::Method, uri: &http::Uri) -> bool {
    let lease = uri.path().starts_with("/apis/coordination.k8s.io/");
    classify(method, uri.query()) == CallKind::Write && !lease
}

/// The layer: [`CallRefused::NotLeader`] for a write past the fence, [`CallRefused::Timeout`]
/// for a call that gets no answer within `timeout`.
#[derive(Clone, Debug)]
pub struct FenceLayer {
    pub fence: WriteFence,
    pub timeout: Duration,
}

impl<S> tower::Layer<S> for FenceLayer {
    type Service = Fenced<S>;
    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`FenceLayer`].
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    layer: FenceLayer,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for Fenced<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Error: From<CallRefused>,
    S::Response: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if is_fenced(req.method(), req.uri()) && !self.layer.fence.allows_writes() {
            tracing::warn!(method = %req.method(), path = req.uri().path(), "write refused: this replica no longer holds the Lease this write depends on");
            return Box::pin(async { Err(CallRefused::NotLeader.into()) });
        }
        let timeout = self.layer.timeout;
        let call = self.inner.call(req);
        Box::pin(async move {
            match tokio::time::timeout(timeout, call).await {
                Ok(answer) => answer,
                Err(_) => Err(CallRefused::Timeout(timeout).into()),
            }
        })
    }
}

/// What an API call does to the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// GET, HEAD, OPTIONS (get, list, watch, discovery).
    Read,
    /// A write with `dryRun=All`: it changes nothing.
    DryRun,
    /// POST, PUT, PATCH, DELETE that change the cluster.
    Write,
}

/// Classify a call by its method and query (shared by the counters and the write fence).
pub fn classify(method: &http::Method, query: Option<&str>) -> CallKind {
    if matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    ) {
        CallKind::Read
    } else if query.is_some_and(|q| q.split('&').any(|kv| kv == "dryRun=All")) {
        CallKind::DryRun
    } else {
        CallKind::Write
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unenforced_fence_lets_everything_through() {
        assert!(WriteFence::unenforced().allows_writes());
    }

    #[test]
    fn a_fence_opens_until_its_deadline_and_closes_at_once_when_told() {
        let f = WriteFence::closed();
        assert!(!f.allows_writes());
        f.open_until(Instant::now() + Duration::from_secs(60));
        assert!(f.allows_writes());
        // A late renewal that finished with an earlier deadline does not shorten it.
        f.open_until(Instant::now());
        assert!(f.allows_writes());
        f.close();
        assert!(!f.allows_writes());
        f.open_until(Instant::now() - Duration::from_millis(1));
        assert!(!f.allows_writes(), "a deadline in the past opens nothing");
    }

    #[test]
    fn reads_dry_runs_and_the_lease_are_not_fenced() {
        let uri = |s: &str| s.parse::<http::Uri>().unwrap();
        let m = |s: &str| s.parse::<http::Method>().unwrap();
        assert!(!is_fenced(
            &m("GET"),
            &uri("/api/v1/namespaces/a/configmaps")
        ));
        assert!(!is_fenced(
            &m("PATCH"),
            &uri("/api/v1/namespaces/a/configmaps/x?dryRun=All&fieldManager=weft")
        ));
        assert!(!is_fenced(
            &m("PUT"),
            &uri("/apis/coordination.k8s.io/v1/namespaces/a/leases/weft-leader")
        ));
        assert!(is_fenced(
            &m("PATCH"),
            &uri("/api/v1/namespaces/a/configmaps/x?fieldManager=weft&force=true")
        ));
        assert!(is_fenced(
            &m("DELETE"),
            &uri("/api/v1/namespaces/a/configmaps/x")
        ));
        assert!(is_fenced(&m("POST"), &uri("/api/v1/namespaces/a/events")));
    }
}
