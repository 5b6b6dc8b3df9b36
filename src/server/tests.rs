//! The HTTP server on loopback: routes per port, authentication before bodies, limits, replays.

use std::io::{Read, Write};
use std::time::Instant;

use super::*;
use crate::daemon::status::{ChangeSummary, PassReport, PassResultKind};

const GITHUB_SECRET: &[u8] = b"github-secret";
const GITLAB_TOKEN: &str = "gitlab-token";
const GENERIC_SECRET: &[u8] = b"generic-secret";

struct Running {
    /// Port `http`: status, health, metrics.
    base: String,
    /// Port `hooks`: webhooks and sync.
    hooks: String,
    hooks_addr: SocketAddr,
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

async fn start_with(leader: bool, webhooks: WebhookSecrets, limits: HttpLimits) -> Running {
    let (ready_tx, ready) = watch::channel(true);
    let status = DaemonStatus {
        leader,
        git_ref: "main".into(),
        ..Default::default()
    };
    let (client, _api) = crate::daemon::fixtures::mock_client();
    let state = ServerState::with_limits(
        DaemonState::new(client, "weft-system", status),
        "main",
        ready,
        Duration::from_secs(5),
        limits,
    );
    state.set_sync_token(Some(Arc::new(b"sync-token".to_vec())));
    state.set_webhooks(webhooks);
    let listeners = Listeners::bind("127.0.0.1:0", "127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listeners.http.local_addr().unwrap());
    let hooks_addr = listeners.hooks.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let s = state.clone();
    tokio::spawn(async move {
        serve(listeners, s, async {
            let _ = stop_rx.await;
        })
        .await
    });
    Running {
        base,
        hooks: format!("http://{hooks_addr}"),
        hooks_addr,
        state,
        _ready_tx: ready_tx,
        stop: Some(stop_tx),
    }
}

fn per_hook_secrets() -> WebhookSecrets {
    WebhookSecrets::per_hook(
        Some(GITHUB_SECRET.to_vec()),
        Some(GITLAB_TOKEN.as_bytes().to_vec()),
        Some(GENERIC_SECRET.to_vec()),
    )
}

async fn start(leader: bool) -> Running {
    start_with(leader, per_hook_secrets(), HttpLimits::default()).await
}

/// Stands in for the flag root's Root: once a request waits for a pass, one starts; its number.
async fn a_pass_starts(daemon: &crate::daemon::state::DaemonState) -> u64 {
    let flag = daemon.root_pushes().flag();
    while !flag.asked() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    flag.start()
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
        changes_omitted: 0,
    }
}

async fn github_post(srv: &Running, delivery: &str, body: &[u8], secret: &[u8]) -> (u16, String) {
    let resp = reqwest::Client::new()
        .post(format!("{}/hooks/github", srv.hooks))
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", delivery)
        .header("X-Hub-Signature-256", signature::sign(secret, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Send `head` on a raw connection to `addr` and read what comes back until the server closes
/// or `wait` passes. Blocking: run in `spawn_blocking`.
/// A blocking connection to `addr` from the loopback address `127.0.0.<host>`: every slot of a
/// port can be held only by several peers (one peer gets its fair share, not all).
async fn connect_from(host: u8, addr: SocketAddr) -> std::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from(([127, 0, 0, host], 0)))
        .unwrap();
    let stream = socket.connect(addr).await.unwrap().into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
}

fn raw_exchange(addr: SocketAddr, head: String, wait: Duration) -> (String, Duration) {
    let started = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test]
async fn github_push_with_a_good_signature_queues_one_pass_and_a_replay_is_409() {
    let srv = start(true).await;
    let body = br#"{"ref":"refs/heads/main","after":"abc"}"#;
    let (status, text) = github_post(&srv, "d-1", body, GITHUB_SECRET).await;
    assert_eq!(status, 202, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "queued");
    assert!(srv.state.daemon.root_pushes().flag().asked());

    // The same delivery again.
    let (status, text) = github_post(&srv, "d-1", body, GITHUB_SECRET).await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("X-GitHub-Delivery"), "{text}");
    // A captured delivery with a fresh id header: the signature gives it away.
    let (status, text) = github_post(&srv, "d-2", body, GITHUB_SECRET).await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("signature"), "{text}");
    // Issue 48 item 8: a known id with a wrong signature is refused for its signature (401),
    // not answered 409, which told anyone which delivery ids Weft has seen.
    let (status, text) = github_post(&srv, "d-1", body, b"not-the-secret").await;
    assert_eq!(status, 401, "{text}");
    // Another push is another delivery.
    let other = br#"{"ref":"refs/heads/main","after":"def"}"#;
    assert_eq!(github_post(&srv, "d-3", other, GITHUB_SECRET).await.0, 202);
}

#[tokio::test]
async fn a_forged_delivery_does_not_enter_the_replay_cache() {
    let srv = start(true).await;
    let body = br#"{"ref":"refs/heads/main","after":"abc"}"#;
    // A forger guesses the next id first: refused, and the id stays free.
    let (status, _) = github_post(&srv, "d-9", body, b"wrong").await;
    assert_eq!(status, 401);
    assert!(srv.state.deliveries.is_empty());
    assert_eq!(github_post(&srv, "d-9", body, GITHUB_SECRET).await.0, 202);
}

#[tokio::test]
async fn each_hook_has_its_own_secret() {
    let srv = start(true).await;
    let body = br#"{"ref":"refs/heads/main"}"#;
    let c = reqwest::Client::new();
    // GitHub's secret does not sign generic deliveries, nor the GitLab token GitHub's.
    let resp = c
        .post(format!("{}/hooks/generic", srv.hooks))
        .header("X-Weft-Signature", signature::sign(GITHUB_SECRET, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let (status, _) = github_post(&srv, "x", body, GITLAB_TOKEN.as_bytes()).await;
    assert_eq!(status, 401);
    let resp = c
        .post(format!("{}/hooks/generic", srv.hooks))
        .header("X-Weft-Signature", signature::sign(GENERIC_SECRET, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    // The generic hook may post the same body again (no delivery id: not a replay) ...
    let resp = c
        .post(format!("{}/hooks/generic", srv.hooks))
        .header("X-Weft-Signature", signature::sign(GENERIC_SECRET, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    // ... but one with an X-Weft-Delivery id is refused the second time.
    for expected in [202, 409] {
        let resp = c
            .post(format!("{}/hooks/generic", srv.hooks))
            .header("X-Weft-Signature", signature::sign(GENERIC_SECRET, body))
            .header("X-Weft-Delivery", "ci-run-17")
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), expected);
    }
}

#[tokio::test]
async fn a_single_secret_closes_gitlab_with_the_reason() {
    let srv = start_with(
        true,
        WebhookSecrets::single(b"shared".to_vec()),
        HttpLimits::default(),
    )
    .await;
    let resp = reqwest::Client::new()
        .post(format!("{}/hooks/gitlab", srv.hooks))
        .header("X-Gitlab-Event", "Push Hook")
        .header("X-Gitlab-Token", "shared")
        .body(r#"{"ref":"refs/heads/main"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let text = resp.text().await.unwrap();
    assert!(text.contains("plaintext"), "{text}");
    assert!(!srv.state.daemon.root_pushes().flag().asked());
    let body = br#"{"ref":"refs/heads/main"}"#;
    assert_eq!(github_post(&srv, "1", body, b"shared").await.0, 202);
}

#[tokio::test]
async fn gitlab_token_and_event_uuid() {
    let srv = start(true).await;
    let c = reqwest::Client::new();
    let post = |token: &'static str, uuid: &'static str| {
        c.post(format!("{}/hooks/gitlab", srv.hooks))
            .header("X-Gitlab-Event", "Push Hook")
            .header("X-Gitlab-Token", token)
            .header("X-Gitlab-Event-UUID", uuid)
            .body(r#"{"ref":"refs/heads/main"}"#)
            .send()
    };
    assert_eq!(post("nope", "u-1").await.unwrap().status(), 401);
    assert_eq!(post(GITLAB_TOKEN, "u-1").await.unwrap().status(), 202);
    let resp = post(GITLAB_TOKEN, "u-1").await.unwrap();
    assert_eq!(resp.status(), 409);
    assert!(resp.text().await.unwrap().contains("X-Gitlab-Event-UUID"));
}

#[tokio::test]
async fn a_bad_signature_is_401_and_queues_nothing() {
    let srv = start(true).await;
    let body = br#"{"ref":"refs/heads/main"}"#;
    let c = reqwest::Client::new();
    let (status, text) = github_post(&srv, "1", body, b"wrong-secret").await;
    assert_eq!(status, 401);
    assert!(text.contains("does not match"), "{text}");
    let resp = c
        .post(format!("{}/hooks/generic", srv.hooks))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert!(resp.text().await.unwrap().contains("X-Weft-Signature"));
    assert!(!srv.state.daemon.root_pushes().flag().asked());
}

#[tokio::test]
async fn a_push_to_another_branch_is_ignored() {
    let srv = start(true).await;
    let body = br#"{"ref":"refs/heads/feature","object_kind":"push"}"#;
    let resp = reqwest::Client::new()
        .post(format!("{}/hooks/gitlab", srv.hooks))
        .header("X-Gitlab-Event", "Push Hook")
        .header("X-Gitlab-Token", GITLAB_TOKEN)
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(v["status"], "ignored");
    assert!(!srv.state.daemon.root_pushes().flag().asked());
}

#[tokio::test]
async fn an_oversized_body_is_413_and_one_just_under_is_accepted() {
    let srv = start(true).await;
    let body = vec![b' '; MAX_HOOK_BODY_BYTES + 1];
    let resp = reqwest::Client::new()
        .post(format!("{}/hooks/generic", srv.hooks))
        .header("X-Weft-Signature", signature::sign(GENERIC_SECRET, &body))
        .body(body)
        .send()
        .await;
    // The server answers before the body is sent; the client may see the 413 or a reset.
    if let Ok(resp) = resp {
        assert_eq!(resp.status(), 413);
    }
    assert!(!srv.state.daemon.root_pushes().flag().asked());
    let body = vec![b' '; MAX_HOOK_BODY_BYTES - 1];
    let resp = reqwest::Client::new()
        .post(format!("{}/hooks/generic", srv.hooks))
        .header("X-Weft-Signature", signature::sign(GENERIC_SECRET, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    assert_eq!(
        srv.state.body_budget.available(),
        srv.state.body_budget.total()
    );
}

#[tokio::test]
async fn credentials_in_headers_are_refused_before_the_body_is_read() {
    let srv = start(true).await;
    let addr = srv.hooks_addr;
    // Ten megabytes announced, not a byte sent: the answer comes at once.
    for head in [
        "POST /hooks/gitlab HTTP/1.1\r\nHost: x\r\nX-Gitlab-Event: Push Hook\r\nX-Gitlab-Token: wrong\r\nContent-Length: 10000000\r\n\r\n",
        "POST /api/v1/sync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Length: 10000000\r\n\r\n",
        // HMAC hooks cannot verify without the body, but a body over the cap is refused unread.
        "POST /hooks/github HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256=0000000000000000000000000000000000000000000000000000000000000000\r\nContent-Length: 10000000\r\n\r\n",
    ] {
        let (answer, took) = tokio::task::spawn_blocking(move || {
            raw_exchange(addr, head.to_string(), Duration::from_secs(5))
        })
        .await
        .unwrap();
        let expected = if head.contains("github") { "413" } else { "401" };
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {expected}")),
            "{head}: {answer}"
        );
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
    assert_eq!(
        srv.state.body_budget.available(),
        srv.state.body_budget.total()
    );
}

fn short_limits() -> HttpLimits {
    HttpLimits {
        max_connections: 4,
        header_read_timeout: Duration::from_millis(500),
        body_read_timeout: Duration::from_millis(700),
        request_timeout: Duration::from_secs(2),
        body_budget_bytes: 64 * 1024,
        ..HttpLimits::default()
    }
}

#[tokio::test]
async fn slow_headers_and_slow_bodies_are_cut() {
    let srv = start_with(true, per_hook_secrets(), short_limits()).await;
    let addr = srv.hooks_addr;
    // Headers never finished: the connection is closed after the header timeout.
    let (answer, took) = tokio::task::spawn_blocking(move || {
        raw_exchange(
            addr,
            "POST /hooks/github HTTP/1.1\r\nHost: x\r\n".into(),
            Duration::from_secs(5),
        )
    })
    .await
    .unwrap();
    assert!(took < Duration::from_secs(3), "{took:?} {answer}");
    // A body that never comes: 408 after the body timeout.
    let head = format!(
        "POST /hooks/github HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256={}\r\nContent-Length: 100\r\n\r\n0123456789",
        "0".repeat(64)
    );
    let (answer, took) =
        tokio::task::spawn_blocking(move || raw_exchange(addr, head, Duration::from_secs(5)))
            .await
            .unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(
        srv.state.body_budget.available(),
        srv.state.body_budget.total()
    );
}

#[tokio::test]
async fn the_body_budget_is_shared_by_all_requests() {
    let srv = start_with(true, per_hook_secrets(), short_limits()).await;
    let addr = srv.hooks_addr;
    let sig = format!("sha256={}", "0".repeat(64));
    // One slow upload holds 60 KiB of the 64 KiB budget ...
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    slow.write_all(
        format!(
            "POST /hooks/github HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: {sig}\r\nContent-Length: 200000\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    slow.write_all(&vec![b'a'; 60 * 1024]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while srv.state.body_budget.available() > 4 * 1024 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ... so the next body does not fit: 503.
    let body = vec![b'b'; 8 * 1024];
    let resp = reqwest::Client::new()
        .post(format!("{}/hooks/generic", srv.hooks))
        .header("X-Weft-Signature", signature::sign(GENERIC_SECRET, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(resp
        .text()
        .await
        .unwrap()
        .contains("too many request bodies"));
    drop(slow);
    // Cut by the body timeout (or the close), the slow upload gives its share back.
    let deadline = Instant::now() + Duration::from_secs(3);
    while srv.state.body_budget.available() < srv.state.body_budget.total() {
        assert!(Instant::now() < deadline, "the budget was not released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_refused_request_closes_its_connection() {
    let srv = start(true).await;
    let head = format!(
        "POST /hooks/github HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256={}\r\nContent-Length: 2\r\n\r\n{{}}",
        "0".repeat(64)
    );
    let addr = srv.hooks_addr;
    // Keep-alive is HTTP/1.1's default: only the server's close ends the read before 5 s.
    let (answer, took) =
        tokio::task::spawn_blocking(move || raw_exchange(addr, head, Duration::from_secs(5)))
            .await
            .unwrap();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(
        took < Duration::from_secs(4),
        "the connection stayed open: {took:?}"
    );
}

#[tokio::test]
async fn one_client_gets_its_share_of_connections_and_another_is_still_served() {
    let limits = HttpLimits {
        max_connections: 8,
        max_connections_per_peer: 2,
        ..short_limits()
    };
    let srv = start_with(true, per_hook_secrets(), limits).await;
    let addr: SocketAddr = srv.base.trim_start_matches("http://").parse().unwrap();
    let from = |ip: &str| {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
        socket
    };
    // 127.0.0.2 holds its two ...
    let _held = [
        from("127.0.0.2").connect(addr).await.unwrap(),
        from("127.0.0.2").connect(addr).await.unwrap(),
    ];
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ... its third is answered 503 and closed at once ...
    let mut third = from("127.0.0.2").connect(addr).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(2),
        tokio::io::AsyncReadExt::read_to_end(&mut third, &mut answer),
    )
    .await
    .expect("closed at once")
    .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too many connections"), "{answer}");
    // ... and 127.0.0.1 is served meanwhile.
    let resp = reqwest::get(format!("{}/healthz", srv.base)).await.unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn connections_past_the_limit_get_only_the_probes() {
    let srv = start_with(true, per_hook_secrets(), short_limits()).await;
    let addr: SocketAddr = srv.base.trim_start_matches("http://").parse().unwrap();
    // Four idle connections of four peers take every slot of port `http` ...
    let mut idle = Vec::new();
    for host in 2..6 {
        idle.push(connect_from(host, addr).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ... the next connection is the probes' reserve: anything else is 503 at once.
    let resp = reqwest::get(format!("{}/metrics", srv.base)).await.unwrap();
    assert_eq!(resp.status(), 503);
    // The other listener has its own slots.
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/sync", srv.hooks))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    drop(idle);
}

#[tokio::test]
async fn sync_needs_the_bearer_token_and_wait_returns_the_pass_report() {
    let srv = start(true).await;
    let c = reqwest::Client::new();
    let resp = c
        .post(format!("{}/api/v1/sync", srv.hooks))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = c
        .post(format!("{}/api/v1/sync", srv.hooks))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert!(!srv.state.daemon.root_pushes().flag().asked());

    // The flag root's Root, standing in: one pass answers the request.
    let daemon = srv.state.daemon.clone();
    tokio::spawn(async move {
        let pass = a_pass_starts(&daemon).await;
        daemon.root_pushes().flag().answer(pass, report(pass));
    });
    let resp = c
        .post(format!("{}/api/v1/sync?wait=true", srv.hooks))
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
async fn a_standby_that_cannot_reach_the_leader_answers_503() {
    let srv = start(false).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/sync", srv.hooks))
        .bearer_auth("sync-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(!srv.state.daemon.root_pushes().flag().asked());
}

#[tokio::test]
async fn each_port_serves_its_own_routes() {
    let srv = start(true).await;
    let c = reqwest::Client::new();
    let resp = c
        .post(format!("{}/api/v1/sync", srv.base))
        .bearer_auth("sync-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.text().await.unwrap().contains("--hooks-listen"));
    let resp = c
        .post(format!("{}/hooks/github", srv.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    for path in ["/metrics", "/healthz", "/api/v1/status"] {
        let resp = c.get(format!("{}{path}", srv.hooks)).send().await.unwrap();
        assert_eq!(resp.status(), 404, "{path} on the hooks port");
    }
    assert!(!srv.state.daemon.root_pushes().flag().asked());
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

#[tokio::test]
async fn shutdown_lets_an_in_flight_request_finish() {
    let mut srv = start(true).await;
    let daemon = srv.state.daemon.clone();
    let hooks = srv.hooks.clone();
    let waiting = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{hooks}/api/v1/sync?wait=true"))
            .bearer_auth("sync-token")
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    let pass = a_pass_starts(&daemon).await;
    // Stop the server while the request waits; then the pass finishes.
    if let Some(stop) = srv.stop.take() {
        let _ = stop.send(());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    daemon.root_pushes().flag().answer(pass, report(pass));
    assert_eq!(waiting.await.unwrap().unwrap(), 200);
}

#[tokio::test]
async fn a_client_that_never_reads_its_answers_is_cut() {
    let srv = start_with(true, per_hook_secrets(), short_limits()).await;
    let addr: SocketAddr = srv.base.trim_start_matches("http://").parse().unwrap();
    // Every slot of port `http` pipelines requests for the metrics and never reads: the socket
    // buffers fill, then hyper can neither write nor read.
    let request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(20_000);
    let mut stuck = Vec::new();
    for host in 2..6 {
        let mut s = connect_from(host, addr).await;
        let request = request.clone();
        stuck.push(std::thread::spawn(move || {
            let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
            let _ = s.write_all(&request);
            // Keep the connection open, unread, until the server gives up on it.
            std::thread::sleep(Duration::from_secs(8));
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The next client is served once the write stall timeout (2 s here) frees a slot.
    let started = Instant::now();
    let resp = tokio::time::timeout(
        Duration::from_secs(6),
        reqwest::get(format!("{}/healthz", srv.base)),
    )
    .await
    .expect("a slot was freed by the write stall timeout")
    .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(6));
    for t in stuck {
        let _ = t.join();
    }
}

/// Issue 48 item 5: peers holding every slot of the status port made `/healthz` time out (a
/// liveness restart). The probes answer from a reserve; nothing else does.
#[tokio::test]
async fn probes_answer_while_every_slot_is_held() {
    let limits = HttpLimits {
        max_connections: 4,
        max_connections_per_peer: 4,
        header_read_timeout: Duration::from_secs(8),
        ..HttpLimits::default()
    };
    let srv = start_with(true, per_hook_secrets(), limits).await;
    let addr: SocketAddr = srv.base.trim_start_matches("http://").parse().unwrap();
    // Four idle connections of four peers, each holding a slot until its header timeout.
    let mut held = Vec::new();
    for host in 2..6 {
        held.push(connect_from(host, addr).await);
    }
    // Let the server accept them all (each accept is one loop turn).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ask = |path: &str| {
        let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        tokio::task::spawn_blocking(move || raw_exchange(addr, head, Duration::from_secs(6)))
    };
    let (answer, took) = ask("/healthz").await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{took:?}: {answer}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    let (answer, _) = ask("/api/v1/status").await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("every connection of this port is in use"),
        "{answer}"
    );
    drop(held);
}

/// Issue 48 item 5: 9 peers × 32 keep-alives held all 256 slots of a port, and a tenth client
/// (a webhook sender, a scrape) waited for a header timeout. Each peer now gets its fair share of
/// a busy port, so one more always gets in.
#[tokio::test]
async fn nine_peers_holding_all_they_can_leave_room_for_a_tenth() {
    let limits = HttpLimits {
        header_read_timeout: Duration::from_secs(30),
        ..HttpLimits::default()
    };
    let srv = start_with(true, per_hook_secrets(), limits).await;
    let addr: SocketAddr = srv.base.trim_start_matches("http://").parse().unwrap();
    let mut held = Vec::new();
    for host in 2..11 {
        for _ in 0..limits.max_connections_per_peer {
            held.push(connect_from(host, addr).await);
        }
    }
    // Let the server accept (or refuse) every one of them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let head = "GET /api/v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string();
    let (answer, took) =
        tokio::task::spawn_blocking(move || raw_exchange(addr, head, Duration::from_secs(10)))
            .await
            .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{took:?}: {answer}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    drop(held);
}
