//! Serving a router on a listener with the bounds `axum::serve` does not offer: a connection
//! limit, a header read timeout, a write stall timeout (a client that never reads its answers),
//! and a small per-connection read buffer, with graceful shutdown (in-flight requests finish;
//! idle connections close).
//!
//! Connections past `max_connections` are not accepted: they wait in the kernel's accept queue
//! until a slot frees, so a flood of sockets costs the daemon no file descriptor and no task.
//! One peer (an IPv4 address, an IPv6 /64: [`peer_key`]) holds at most
//! `max_connections_per_peer` of those slots, and no more than its fair share of a busy port (a
//! peer holding `n` takes one more only while `n` slots stay free): its next connection is
//! accepted and closed at once, so no number of hostile clients can fill the listener and keep a
//! webhook sender waiting.
//!
//! Probes answer from a reserve no client can take (issue 48 item 5: 9 loopback peers × 32
//! keep-alives held all 256 slots, and `/healthz` timed out: a liveness restart). When every slot
//! is held, [`PROBE_RESERVE`] more connections are accepted, one per peer, each for one request
//! with a short header timeout: `GET /healthz` and `/readyz` are answered, anything else is `503`
//! and the connection closes. Holding the reserve takes as many peers as it has places, each
//! re-connecting every [`RESERVE_HEADER_TIMEOUT`].
//!
//! What crates do here: hyper (the header read timeout, the buffer bound), tokio-io-timeout (a
//! write that stalls past the request timeout fails: a client that never reads its answers),
//! tokio-util's `CancellationToken` (the stop). What is Weft's own, because no tower or
//! tower-http layer can do it: the connection limit is taken *before* `accept` (a tower
//! `ConcurrencyLimitLayer` limits requests of connections already accepted, each holding a
//! descriptor and a task), the per-peer fair share, the probes' reserve, and reads of at most
//! [`READ_CHUNK`] bytes (the head cap below).

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
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
    /// `POST /api/v1/sync?wait=true`, which waits for its pass: 408. A write to a client that
    /// does not read stalls at most this long before the connection is closed.
    pub request_timeout: Duration,
    /// Bytes of request bodies held by all requests together: 503 past it.
    pub body_budget_bytes: usize,
    /// Connections of one peer served at once on each listener (`--max-connections-per-peer`);
    /// more are closed at once.
    pub max_connections_per_peer: usize,
    /// Bytes of request bodies one peer holds at once (`--max-body-bytes-per-peer`): 503 past it.
    pub body_bytes_per_peer: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: 256,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            body_budget_bytes: 16 * 1024 * 1024,
            max_connections_per_peer: 32,
            body_bytes_per_peer: 4 * 1024 * 1024,
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

/// Who a peer is for the per-peer limits: its IPv4 address (an IPv4-mapped IPv6 address counts
/// as that IPv4 address), or the /64 of its IPv6 address (one host usually has a whole /64).
pub fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut s = v6.segments();
                s[4..].fill(0);
                IpAddr::V6(std::net::Ipv6Addr::from(s))
            }
        },
    }
}

/// Connections open per peer on one listener.
#[derive(Clone, Default)]
struct PeerConnections {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One connection counted against its peer; uncounted when dropped (the connection closed).
struct PeerConnection {
    peer: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PeerConnections {
    /// Count one more connection of `ip`, unless it has `max` open already, or is past its fair
    /// share: a peer that holds `n` connections takes one more only while `free` (the slots left
    /// once this one is taken) is at least `n`. A newcomer (`n = 0`) takes any slot; peers that
    /// take every slot they can settle where each holds about as many as stay free, so there is
    /// always room for one more peer, however many peers hold connections (issue 48 item 5:
    /// 9 peers × 32 held all 256 slots).
    fn open(&self, ip: IpAddr, max: usize, free: usize) -> Option<PeerConnection> {
        let peer = peer_key(ip);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(peer).or_default();
        if *n >= max || *n > free {
            if *n == 0 {
                open.remove(&peer);
            }
            return None;
        }
        *n += 1;
        Some(PeerConnection {
            peer,
            open: self.open.clone(),
        })
    }
}

impl Drop for PeerConnection {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

/// Connections accepted beyond `max_connections` for the probes only, on the port that serves
/// them.
pub const PROBE_RESERVE: usize = 16;

/// How long a reserve connection may take to send its request's headers.
const RESERVE_HEADER_TIMEOUT: Duration = Duration::from_secs(1);

/// The paths a reserve connection is answered on: the probes of the status port.
const PROBE_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// What a reserve connection asking for anything but a probe reads.
const BUSY: &str = "every connection of this port is in use; retry later\n";

/// What a peer past its connection limit reads before its connection is closed (written without
/// waiting: if the socket cannot take it now, the client only sees the close).
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 52\r\n\r\ntoo many connections from this client; retry later\r\n";

/// The request line and headers together are refused (`431`) at this size, whole or not
/// (docs/security.md).
pub const HEAD_CAP: usize = 64 * 1024;

/// Bytes one read from a client's socket takes at most.
const READ_CHUNK: usize = 1024;

/// hyper's read buffer per connection (its minimum is 8 KiB; its default, about 400 KiB, times a
/// few hundred connections would be more than the body budget). hyper refuses a head only when
/// its buffer is full and the head has not ended, and one read may add up to the buffer's size
/// again (issue 48 item 8: a whole head of ~112 KB was read): with reads of at most
/// [`READ_CHUNK`] bytes into a buffer of `HEAD_CAP - READ_CHUNK`, no head of [`HEAD_CAP`] bytes
/// or more is ever parsed.
const READ_BUFFER_BYTES: usize = HEAD_CAP - READ_CHUNK;

/// Serve `router` on `listener` until `shutdown` is cancelled, then stop accepting, let in-flight
/// requests finish and close idle connections; returns when every connection is closed.
/// `probe_reserve` connections more are accepted for the probes only when every slot is held
/// ([`PROBE_RESERVE`] on the port that serves them, 0 elsewhere).
pub async fn serve_listener(
    name: &'static str,
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    probe_reserve: usize,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let reserve = Arc::new(Semaphore::new(probe_reserve));
    let peers = PeerConnections::default();
    let reserve_peers = PeerConnections::default();
    // Refusals are counted and logged once a second at most (a flood must not flood the log).
    let mut refused = RefusalLog::default();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(READ_BUFFER_BYTES);
    let mut probe_only = hyper::server::conn::http1::Builder::new();
    probe_only
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.min(RESERVE_HEADER_TIMEOUT))
        .keep_alive(false)
        .max_buf_size(READ_BUFFER_BYTES);
    loop {
        if shutdown.is_cancelled() {
            break;
        }
        // A slot first, then accept: past the limit, clients wait in the accept queue, except
        // for the probes' reserve.
        let (slot, reserved) = tokio::select! {
            biased;
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => (s, false),
                Err(_) => break, // closed: never happens, the semaphore is ours
            },
            s = reserve.clone().acquire_owned() => match s {
                Ok(s) => (s, true),
                Err(_) => break,
            },
            _ = shutdown.cancelled() => break,
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
            _ = shutdown.cancelled() => break,
        };
        let counted = if reserved {
            reserve_peers.open(peer.ip(), 1, usize::MAX)
        } else {
            peers.open(
                peer.ip(),
                limits.max_connections_per_peer,
                slots.available_permits(),
            )
        };
        let Some(counted) = counted else {
            // Past its share: closed now, its slot back at once.
            let _ = stream.try_write(TOO_MANY_CONNECTIONS);
            drop(stream);
            refused.count(name, peer.ip(), limits.max_connections_per_peer);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo(peer));
            let router = router.clone();
            async move {
                if reserved && !PROBE_PATHS.contains(&req.uri().path()) {
                    return Ok(busy());
                }
                // A Router is always ready; calling it without poll_ready is what axum::serve
                // does.
                router.clone().call(req).await
            }
        });
        // A client that does not read its answers is cut like one that does not send its request.
        let mut io = tokio_io_timeout::TimeoutStream::new(SmallReads(stream));
        io.set_write_timeout(Some(limits.request_timeout));
        let io = TokioIo::new(Box::pin(io));
        let conn = if reserved { &probe_only } else { &http }.serve_connection(io, svc);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _counted = counted;
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = stop.cancelled() => {
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
    let _ = reserve
        .acquire_many(u32::try_from(probe_reserve).unwrap_or(u32::MAX))
        .await;
    Ok(())
}

/// The answer of a reserve connection to anything but a probe.
fn busy() -> axum::response::Response {
    axum::response::IntoResponse::into_response((
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::CONNECTION, "close")],
        BUSY,
    ))
}

/// Connections refused for their peer's limit, logged at most once a second with how many.
#[derive(Default)]
struct RefusalLog {
    since_last: u64,
    last: Option<std::time::Instant>,
}

impl RefusalLog {
    fn count(&mut self, listener: &str, peer: IpAddr, max: usize) {
        self.since_last += 1;
        let now = std::time::Instant::now();
        if self
            .last
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            tracing::warn!(
                listener,
                peer = %peer,
                refused = self.since_last,
                max_per_peer = max,
                "connections refused: the client has too many open (--max-connections-per-peer, or its share of a busy port)"
            );
            self.since_last = 0;
            self.last = Some(now);
        }
    }
}

/// A socket read [`READ_CHUNK`] bytes at a time at most (see [`READ_BUFFER_BYTES`]); writes
/// pass through.
struct SmallReads<T>(T);

impl<T: AsyncRead + Unpin> AsyncRead for SmallReads<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let mut chunk = [0u8; READ_CHUNK];
        let n = buf.remaining().min(READ_CHUNK);
        let mut small = ReadBuf::new(&mut chunk[..n]);
        match Pin::new(&mut self.get_mut().0).poll_read(cx, &mut small) {
            Poll::Ready(Ok(())) => {
                buf.put_slice(small.filled());
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for SmallReads<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_ipv4_addresses_and_ipv6_slash_64s() {
        let k = |s: &str| peer_key(s.parse().unwrap()).to_string();
        assert_eq!(k("10.0.0.7"), "10.0.0.7");
        assert_eq!(k("::ffff:10.0.0.7"), "10.0.0.7");
        assert_eq!(k("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::");
    }

    #[test]
    fn a_peer_gets_its_share_of_connections_and_gets_them_back() {
        let peers = PeerConnections::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = peers.open(a, 2, 100).unwrap();
        let _second = peers.open(a, 2, 100).unwrap();
        assert!(peers.open(a, 2, 100).is_none());
        assert!(
            peers.open(b, 2, 100).is_some(),
            "another peer is not limited by a's"
        );
        drop(first);
        assert!(peers.open(a, 2, 100).is_some());
    }

    #[test]
    fn a_peer_takes_no_more_than_its_share_of_a_busy_port_and_a_newcomer_always_gets_in() {
        let peers = PeerConnections::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| peers.open(a, 32, 10).unwrap()).collect();
        assert!(
            peers.open(a, 32, 2).is_none(),
            "3 held, 2 free: past its share"
        );
        assert!(peers.open(a, 32, 3).is_some(), "3 held, 3 free: its share");
        let newcomer = peers.open(b, 32, 0);
        assert!(newcomer.is_some(), "a newcomer takes the last slot");
        assert!(peers.open(b, 32, 0).is_none(), "and no more than its share");
        drop((held, newcomer));
    }

    /// Sends `head` on a fresh connection and reads what comes back (an answer, or nothing when
    /// the server closed with bytes unread).
    async fn send_head(addr: std::net::SocketAddr, head: Vec<u8>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = stream.write_all(&head).await;
        let mut answer = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }

    #[tokio::test]
    async fn no_request_head_of_64_kib_or_more_reaches_a_handler_whole_or_not() {
        let called = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = called.clone();
        let router = Router::new().route(
            "/",
            axum::routing::get(move || {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { "ok" }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(serve_listener(
            "test",
            listener,
            router,
            HttpLimits::default(),
            0,
            stop,
        ));
        let head = |total: usize| {
            let start = "GET / HTTP/1.1\r\nHost: weft\r\nConnection: close\r\nX-Pad: ";
            let end = "\r\n\r\n";
            let pad = "a".repeat(total - start.len() - end.len());
            format!("{start}{pad}{end}").into_bytes()
        };
        let fits = send_head(addr, head(60 * 1024)).await;
        assert!(fits.starts_with("HTTP/1.1 200"), "{fits:?}");
        assert_eq!(called.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Whole heads, sent at once: before, hyper's buffer could grow past its limit in one
        // read and a head of ~112 KB was parsed and handled.
        for total in [HEAD_CAP, HEAD_CAP + 1, 100 * 1024, 112 * 1024] {
            let answer = send_head(addr, head(total)).await;
            assert!(
                answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
                "{total} B: {answer:?}"
            );
        }
        assert_eq!(
            called.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "no head of {HEAD_CAP} B or more reached the handler"
        );
    }
}
