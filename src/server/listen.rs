//! Serving a router on a listener with the bounds `axum::serve` does not offer: a connection
//! limit, a header read timeout, and a small per-connection read buffer, with graceful shutdown
//! (in-flight requests finish; idle connections close).
//!
//! Connections past `max_connections` are not accepted: they wait in the kernel's accept queue
//! until a slot frees, so a flood of sockets costs the daemon no file descriptor and no task.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::Service;

use super::body::BodyLimit;

/// The bounds of the HTTP server, per listener (connections) or across both (body budget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections served at once on each listener (`--max-connections`).
    pub max_connections: usize,
    /// A client must send a request's headers within this (`--http-header-timeout`); it also
    /// closes a keep-alive connection that stays idle that long.
    pub header_read_timeout: Duration,
    /// A request's body must arrive within this (`--http-body-timeout`): 408.
    pub body_read_timeout: Duration,
    /// A request must be answered within this (`--http-request-timeout`), except
    /// `POST /api/v1/sync?wait=true`, which waits for its pass: 408.
    pub request_timeout: Duration,
    /// Bytes of request bodies held by all requests together: 503 past it.
    pub body_budget_bytes: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: 256,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            body_budget_bytes: 16 * 1024 * 1024,
        }
    }
}

impl HttpLimits {
    /// The body limit of an endpoint whose largest body is `max_bytes`.
    pub fn body(&self, max_bytes: usize) -> BodyLimit {
        BodyLimit {
            max_bytes,
            timeout: self.body_read_timeout.min(self.request_timeout),
        }
    }
}

/// hyper's read buffer per connection (its minimum is 8 KiB; its default, about 400 KiB, times a
/// few hundred connections would be more than the body budget). Request headers must fit in it.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Serve `router` on `listener` until `shutdown` turns true, then stop accepting, let in-flight
/// requests finish and close idle connections; returns when every connection is closed.
pub async fn serve_listener(
    name: &'static str,
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(READ_BUFFER_BYTES);
    loop {
        if *shutdown.borrow_and_update() {
            break;
        }
        // A slot first, then accept: past the limit, clients wait in the accept queue.
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => break, // closed: never happens, the semaphore is ours
            },
            _ = shutdown.changed() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: the process is out of descriptors; back off a little
                    // rather than spin, and keep serving the connections we have.
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo(peer));
            // A Router is always ready; calling it without poll_ready is what axum::serve does.
            router.clone().call(req)
        });
        let conn = http.serve_connection(TokioIo::new(stream), svc);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = stopped(stop) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                // Timeouts of slow clients and resets land here: normal on a public port.
                tracing::debug!(listener = name, peer = %peer, error = %e, "connection closed with an error");
            }
        });
    }
    drop(listener);
    // Every connection holds a slot: all slots back means all connections closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
    Ok(())
}

/// Resolves once `stop` is true (never, if its sender is gone without saying so).
async fn stopped(mut stop: watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}
