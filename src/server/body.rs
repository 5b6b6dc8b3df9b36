//! Reading a request body without trusting the client: a cap checked before anything is buffered
//! (the declared `Content-Length`, then every chunk as it arrives), a deadline for the whole body,
//! and one budget of bytes shared by every body being read at once, so that a few hundred slow
//! uploads hold at most the budget, not a cap each. One peer (one IPv4 address, one IPv6 /64)
//! holds at most its share of that budget, so that one hostile client cannot spend all of it
//! and make every other sender's webhook a 503.
//!
//! Why not tower-http's `RequestBodyLimitLayer` or axum's `DefaultBodyLimit`: they cap one body,
//! which is two comparisons here; the shared budget, the per-peer share, the whole-body deadline
//! and the outcome each refusal is counted under (`weft_webhook_requests_total`) are what they do
//! not do, and those need the chunk loop below anyway.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a body was not read. Each maps to one status code ([`BodyError::status`]).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    /// `Content-Length` or the bytes received pass the endpoint's cap (413).
    #[error("the body is larger than this endpoint's limit of {limit} bytes")]
    TooLarge { limit: usize },
    /// The body did not arrive within the body read timeout (408).
    #[error("the body did not arrive within {}s", .0.as_secs())]
    Timeout(Duration),
    /// The bodies being read by all requests together fill the budget (503); try again later.
    #[error("the server is reading too many request bodies at once ({budget} bytes in flight); retry later")]
    Busy { budget: usize },
    /// This peer's bodies being read fill its share of the budget (503).
    #[error("this client is sending too many request bodies at once (at most {per_peer} bytes in flight per client); retry later")]
    PeerBusy { per_peer: usize },
    /// The connection failed or the framing was wrong (400).
    #[error("the body could not be read: {0}")]
    Read(String),
}

impl BodyError {
    /// The HTTP status the caller gets.
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            BodyError::Busy { .. } | BodyError::PeerBusy { .. } => StatusCode::SERVICE_UNAVAILABLE,
            BodyError::Read(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The label of `weft_webhook_requests_total{outcome}`.
    pub fn outcome(&self) -> &'static str {
        match self {
            BodyError::TooLarge { .. } => "too_large",
            BodyError::Timeout(_) => "body_timeout",
            BodyError::Busy { .. } => "busy",
            BodyError::PeerBusy { .. } => "peer_busy",
            BodyError::Read(_) => "bad_request",
        }
    }
}

/// The bytes of request bodies being read or held, all requests together, and per peer.
/// Cloning shares it.
#[derive(Clone, Debug)]
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
    total: usize,
    per_peer: usize,
    /// Bytes held per peer ([`super::listen::peer_key`]); a peer holding nothing has no entry.
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl BodyBudget {
    /// A budget of `total` bytes (at most `u32::MAX`, the semaphore's unit of acquisition), all
    /// of which one peer may hold.
    pub fn new(total: usize) -> BodyBudget {
        BodyBudget::with_per_peer(total, total)
    }

    /// A budget of `total` bytes of which one peer holds at most `per_peer`.
    pub fn with_per_peer(total: usize, per_peer: usize) -> BodyBudget {
        let total = total.min(u32::MAX as usize);
        BodyBudget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
            per_peer: per_peer.min(total),
            peers: Arc::default(),
        }
    }

    /// The whole budget in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// What one peer may hold.
    pub fn per_peer(&self) -> usize {
        self.per_peer
    }

    /// Bytes not taken by any body now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Take `n` more bytes for `peer` into `held`, or say the budget (or the peer's share) is
    /// spent. Never waits: a request that cannot be served now is refused at once instead of
    /// holding its connection.
    fn take(&self, held: &mut Option<Charge>, peer: IpAddr, n: usize) -> Result<(), BodyError> {
        if n == 0 {
            return Ok(());
        }
        let busy = BodyError::Busy { budget: self.total };
        let n32 = u32::try_from(n).map_err(|_| busy.clone())?;
        let peer = super::listen::peer_key(peer);
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        // The whole budget first (when both are spent, the server is busy for everyone), then
        // the peer's share; a permit taken for a refused chunk goes back when it drops here.
        let permit = self
            .bytes
            .clone()
            .try_acquire_many_owned(n32)
            .map_err(|_| busy)?;
        let holds = peers.get(&peer).copied().unwrap_or(0);
        if holds + n > self.per_peer {
            return Err(BodyError::PeerBusy {
                per_peer: self.per_peer,
            });
        }
        // A global fair share (issue 48 item 5: 9 peers × 4 MiB of slow bodies held the whole
        // 16 MiB, and a signed webhook waited 25 s): past `total / (peers + 1)`, a peer's bodies
        // grow only while half a peer's share of the budget stays free for someone new. (A lone
        // peer has the whole of its own share.)
        let others = peers.len() - usize::from(peers.contains_key(&peer));
        let fair = self.total / (others + 2);
        let free_after = self.bytes.available_permits();
        if others > 0 && holds + n > fair && free_after < self.per_peer / 2 {
            return Err(BodyError::PeerBusy { per_peer: fair });
        }
        *peers.entry(peer).or_default() += n;
        match held {
            Some(c) => {
                c.permit.merge(permit);
                c.bytes += n;
            }
            None => {
                *held = Some(Charge {
                    permit,
                    peer,
                    bytes: n,
                    peers: self.peers.clone(),
                })
            }
        }
        Ok(())
    }

    /// Bytes `peer` holds now.
    pub fn held_by(&self, peer: IpAddr) -> usize {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers
            .get(&super::listen::peer_key(peer))
            .copied()
            .unwrap_or(0)
    }
}

/// Bytes charged to the budget and to one peer's share, given back when dropped.
#[derive(Debug)]
struct Charge {
    permit: OwnedSemaphorePermit,
    peer: IpAddr,
    bytes: usize,
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = peers.get_mut(&self.peer) {
            *held = held.saturating_sub(self.bytes);
            if *held == 0 {
                peers.remove(&self.peer);
            }
        }
        // The permit goes back to the semaphore right after, when its field drops.
    }
}

/// A body read whole; its bytes stay charged to the budget until it is dropped.
#[derive(Debug)]
pub struct BufferedBody {
    bytes: Vec<u8>,
    _charge: Option<Charge>,
}

impl std::ops::Deref for BufferedBody {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// How a body may be read: its cap and its deadline.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit {
    /// Largest body, in bytes.
    pub max_bytes: usize,
    /// How long the whole body may take to arrive, from the first attempt to read it.
    pub timeout: Duration,
}

/// The declared `Content-Length`, if any and well-formed (hyper refuses a malformed one earlier).
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Refuse a body whose declared length passes the cap, before a byte of it is read.
pub fn check_declared(headers: &HeaderMap, limit: BodyLimit) -> Result<(), BodyError> {
    match declared_length(headers) {
        Some(n) if n > limit.max_bytes as u64 => Err(BodyError::TooLarge {
            limit: limit.max_bytes,
        }),
        _ => Ok(()),
    }
}

/// Read `body` from `peer` whole, within `limit` and the shared `budget`. Every chunk is charged
/// to the budget (and the peer's share) before it is kept, and the cap is checked before it is
/// kept, so at no point does a request hold more than the cap, a peer more than its share, nor
/// all requests more than the budget.
pub async fn read(
    body: Body,
    headers: &HeaderMap,
    limit: BodyLimit,
    budget: &BodyBudget,
    peer: IpAddr,
) -> Result<BufferedBody, BodyError> {
    check_declared(headers, limit)?;
    let deadline = tokio::time::Instant::now() + limit.timeout;
    let mut stream = body.into_data_stream();
    let mut bytes: Vec<u8> = Vec::new();
    let mut charge = None;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .map_err(|_| BodyError::Timeout(limit.timeout))?;
        let chunk = match next {
            None => break,
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => return Err(BodyError::Read(e.to_string())),
        };
        if bytes.len() + chunk.len() > limit.max_bytes {
            return Err(BodyError::TooLarge {
                limit: limit.max_bytes,
            });
        }
        // Charged before it is kept, exactly: the vector grows to what it holds, no more (a
        // doubling would charge bytes no client sent, and refuse bodies that fit).
        budget.take(&mut charge, peer, chunk.len())?;
        bytes.reserve_exact(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    Ok(BufferedBody {
        bytes,
        _charge: charge,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn limit(max_bytes: usize) -> BodyLimit {
        BodyLimit {
            max_bytes,
            timeout: Duration::from_secs(5),
        }
    }

    fn headers_with_length(n: u64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, n.to_string().parse().unwrap());
        h
    }

    /// A body that yields `chunks`, then (if `then_stall`) never ends.
    fn chunked(chunks: Vec<&'static [u8]>, then_stall: bool) -> Body {
        let items = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c))),
        );
        if then_stall {
            Body::from_stream(items.chain(futures::stream::pending()))
        } else {
            Body::from_stream(items)
        }
    }

    #[tokio::test]
    async fn a_body_within_the_cap_is_read_and_charged_until_dropped() {
        let budget = BodyBudget::new(1024);
        let body = read(
            chunked(vec![b"hello ", b"world"], false),
            &HeaderMap::new(),
            limit(100),
            &budget,
            PEER,
        )
        .await
        .unwrap();
        assert_eq!(&*body, b"hello world");
        assert!(budget.available() <= 1024 - 11, "{}", budget.available());
        drop(body);
        assert_eq!(budget.available(), 1024);
    }

    #[tokio::test]
    async fn a_declared_length_over_the_cap_is_refused_before_reading() {
        let budget = BodyBudget::new(1024);
        // A body that never ends: reading it would hang; the declared length decides first.
        let err = read(
            chunked(vec![], true),
            &headers_with_length(101),
            limit(100),
            &budget,
            PEER,
        )
        .await
        .unwrap_err();
        assert_eq!(err, BodyError::TooLarge { limit: 100 });
        assert_eq!(err.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(budget.available(), 1024);
    }

    #[tokio::test]
    async fn a_stream_passing_the_cap_is_cut_at_the_chunk_that_passes_it() {
        let budget = BodyBudget::new(1024);
        let err = read(
            chunked(vec![&[b'a'; 60], &[b'b'; 60]], true),
            &HeaderMap::new(),
            limit(100),
            &budget,
            PEER,
        )
        .await
        .unwrap_err();
        assert_eq!(err, BodyError::TooLarge { limit: 100 });
        assert_eq!(budget.available(), 1024, "the partial body is released");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_does_not_arrive_in_time_is_a_timeout() {
        let budget = BodyBudget::new(1024);
        let err = read(
            chunked(vec![b"slow"], true),
            &HeaderMap::new(),
            limit(100),
            &budget,
            PEER,
        )
        .await
        .unwrap_err();
        assert_eq!(err, BodyError::Timeout(Duration::from_secs(5)));
        assert_eq!(err.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(budget.available(), 1024);
    }

    #[tokio::test]
    async fn the_budget_is_shared_and_a_request_past_it_is_busy() {
        let budget = BodyBudget::new(100);
        let first = read(
            chunked(vec![&[b'a'; 80]], false),
            &HeaderMap::new(),
            limit(100),
            &budget,
            PEER,
        )
        .await
        .unwrap();
        let err = read(
            chunked(vec![&[b'b'; 40]], false),
            &HeaderMap::new(),
            limit(100),
            &budget,
            PEER,
        )
        .await
        .unwrap_err();
        assert_eq!(err, BodyError::Busy { budget: 100 });
        assert_eq!(err.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(first);
        let second = read(
            chunked(vec![&[b'b'; 40]], false),
            &HeaderMap::new(),
            limit(100),
            &budget,
            PEER,
        )
        .await
        .unwrap();
        assert_eq!(second.len(), 40);
    }

    #[tokio::test]
    async fn growth_is_charged_so_held_memory_never_passes_the_budget() {
        // Many small chunks: each is charged before the vector grows to hold it.
        let budget = BodyBudget::new(1000);
        let chunks: Vec<&'static [u8]> = vec![&[b'x'; 10]; 50];
        let body = read(
            chunked(chunks, false),
            &HeaderMap::new(),
            limit(1000),
            &budget,
            PEER,
        )
        .await
        .unwrap();
        assert_eq!(body.len(), 500);
        assert!(1000 - budget.available() >= body.bytes.capacity());
    }

    #[tokio::test]
    async fn one_peer_holds_at_most_its_share_and_others_still_fit() {
        let budget = BodyBudget::with_per_peer(100, 40);
        let hostile = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 9));
        let first = read(
            chunked(vec![&[b'a'; 30]], false),
            &HeaderMap::new(),
            limit(100),
            &budget,
            hostile,
        )
        .await
        .unwrap();
        let err = read(
            chunked(vec![&[b'b'; 20]], false),
            &HeaderMap::new(),
            limit(100),
            &budget,
            hostile,
        )
        .await
        .unwrap_err();
        assert_eq!(err, BodyError::PeerBusy { per_peer: 40 });
        assert_eq!(err.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            budget.held_by(hostile),
            30,
            "the refused body gave its bytes back"
        );
        // Another peer still has the rest of the budget.
        let other = read(
            chunked(vec![&[b'c'; 40]], false),
            &HeaderMap::new(),
            limit(100),
            &budget,
            PEER,
        )
        .await
        .unwrap();
        assert_eq!(other.len(), 40);
        drop(first);
        assert_eq!(budget.held_by(hostile), 0);
        assert_eq!(budget.available(), 60);
    }

    /// Issue 48 item 5: many peers, each within its share, held the whole budget together.
    #[test]
    fn many_peers_leave_room_for_one_more() {
        let budget = BodyBudget::with_per_peer(160, 40);
        let peers: Vec<IpAddr> = (1..=9)
            .map(|i| IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, i)))
            .collect();
        let mut held: Vec<Option<Charge>> = peers.iter().map(|_| None).collect();
        // Slow bodies, a byte at a time from each in turn, until every one is refused.
        let mut growing = true;
        while growing {
            growing = false;
            for (p, h) in peers.iter().zip(held.iter_mut()) {
                growing |= budget.take(h, *p, 1).is_ok();
            }
        }
        let mut newcomer = None;
        budget
            .take(&mut newcomer, PEER, 10)
            .expect("a signed webhook still fits");
    }

    #[test]
    fn an_ipv6_peer_is_its_slash_64() {
        let budget = BodyBudget::with_per_peer(100, 10);
        let mut held = None;
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::7".parse().unwrap();
        budget.take(&mut held, a, 6).unwrap();
        assert_eq!(
            budget.take(&mut held, b, 6).unwrap_err(),
            BodyError::PeerBusy { per_peer: 10 }
        );
        assert_eq!(budget.held_by(b), 6);
    }
}
