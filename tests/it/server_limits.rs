//! The real `weft run` daemon against a few hundred hostile clients on loopback (each from its
//! own address, 127.0.1.x: a few hundred peers): slowloris
//! headers, slow bodies, oversized `Content-Length`, wrong tokens with huge bodies announced.
//! Legitimate requests (health on port `http`, signed webhooks on port `hooks`) keep being
//! answered; slow clients are cut after the header and body timeouts; the daemon's memory
//! (VmRSS) and open file descriptors stay bounded and the descriptors come back afterwards.
//!
//! `cargo test --test it server_limits:: -- --nocapture` prints the measured figures
//! (docs/security.md records them).

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::cluster::TestNamespace;
use support::daemon::{github_push, Daemon, DaemonOptions};

const SLOWLORIS: usize = 200;
const SLOW_BODIES: usize = 100;
const OVERSIZED: usize = 50;
const WRONG_TOKENS: usize = 20;
/// Each slow body sends this much at once, then trickles (100 × 64 KiB stays under the 16 MiB
/// body budget, so legitimate webhooks still fit).
const SLOW_BODY_PREFIX: usize = 64 * 1024;
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const BODY_TIMEOUT: Duration = Duration::from_secs(3);
const MAX_CONNECTIONS: usize = 256;

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("proc fd")
        .count()
}

/// What happened to a hostile client.
#[derive(Debug)]
struct Cut {
    /// When the server closed the connection or answered, from the connection's start; `None`:
    /// still open when the client gave up.
    after: Option<Duration>,
    /// The first bytes of the answer, if any.
    answer: String,
}

/// Client `n`'s own loopback address (127.0.1.1, 127.0.1.2, …): a few hundred clients are a
/// few hundred peers, as on a network, each well under the per-peer limits (tests/it/attack_server.rs
/// covers one peer with many connections).
fn client_address(n: usize) -> SocketAddr {
    let (hi, lo) = (1 + n / 250, 1 + n % 250);
    format!("127.0.{hi}.{lo}:0").parse().unwrap()
}

/// Connect from client `n`'s address, send `first`, then one byte of `trickle` every 500 ms
/// until the server answers or closes (or `give_up` passes).
async fn hostile(n: usize, addr: SocketAddr, first: Vec<u8>, trickle: &'static [u8]) -> Cut {
    let give_up = Duration::from_secs(25);
    let started = Instant::now();
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(client_address(n))
        .expect("bind a loopback address");
    let mut s = socket.connect(addr).await.expect("connect");
    if s.write_all(&first).await.is_err() {
        return Cut {
            after: Some(started.elapsed()),
            answer: String::new(),
        };
    }
    let mut buf = [0u8; 64];
    let mut i = 0;
    loop {
        tokio::select! {
            r = s.read(&mut buf) => {
                let n = r.unwrap_or(0);
                return Cut {
                    after: Some(started.elapsed()),
                    answer: String::from_utf8_lossy(&buf[..n]).into_owned(),
                };
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                if started.elapsed() > give_up {
                    return Cut { after: None, answer: String::new() };
                }
                if !trickle.is_empty() {
                    let b = &trickle[i % trickle.len()..=i % trickle.len()];
                    i += 1;
                    if s.write_all(b).await.is_err() {
                        return Cut { after: Some(started.elapsed()), answer: String::new() };
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_are_cut_and_memory_and_descriptors_stay_bounded() {
    let ns = TestNamespace::new("server-limits").await;
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        repo.path().join("greeting.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\n  namespace: {}\ndata:\n  value: hi\n",
            ns.name()
        ),
    )
    .unwrap();
    let mut opts = DaemonOptions::new(repo.path().to_str().unwrap(), ns.name());
    opts.extra = vec![
        "--http-header-timeout".into(),
        format!("{}s", HEADER_TIMEOUT.as_secs()),
        "--http-body-timeout".into(),
        format!("{}s", BODY_TIMEOUT.as_secs()),
        "--max-connections".into(),
        MAX_CONNECTIONS.to_string(),
    ];
    let d = Daemon::start(opts);
    d.wait_status("the first pass", Duration::from_secs(30), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    let pid = d.pid();
    let hooks: SocketAddr = format!("127.0.0.1:{}", d.hooks_port).parse().unwrap();

    // Warm up the paths the legitimate requests take, then take the baseline.
    for _ in 0..3 {
        let (status, body) = github_push(&d, "refs/heads/elsewhere", None).await;
        assert_eq!(status, 200, "{body}");
        reqwest::get(format!("{}/healthz", d.base())).await.unwrap();
    }
    let rss_before = proc_status_kib(pid, "VmRSS:");
    let fds_before = open_fds(pid);

    // The attack.
    let attack_started = Instant::now();
    let mut clients = Vec::new();
    let sig = format!("sha256={}", "0".repeat(64));
    for _ in 0..SLOWLORIS {
        let head = b"POST /hooks/github HTTP/1.1\r\nHost: weft\r\nX-Slow: ".to_vec();
        let n = clients.len();
        clients.push((
            "slowloris",
            tokio::spawn(hostile(n, hooks, head, b"aaaaaaaaaaaaaaaaaaaaaa")),
        ));
    }
    for _ in 0..SLOW_BODIES {
        let mut first = format!(
            "POST /hooks/github HTTP/1.1\r\nHost: weft\r\nX-GitHub-Event: push\r\nX-Hub-Signature-256: {sig}\r\nContent-Length: 1000000\r\n\r\n"
        )
        .into_bytes();
        first.extend(std::iter::repeat_n(b'{', SLOW_BODY_PREFIX));
        let n = clients.len();
        clients.push(("slow body", tokio::spawn(hostile(n, hooks, first, b" "))));
    }
    for _ in 0..OVERSIZED {
        let first = format!(
            "POST /hooks/github HTTP/1.1\r\nHost: weft\r\nX-Hub-Signature-256: {sig}\r\nContent-Length: 100000000\r\n\r\n"
        )
        .into_bytes();
        let n = clients.len();
        clients.push(("oversized", tokio::spawn(hostile(n, hooks, first, b"x"))));
    }
    for _ in 0..WRONG_TOKENS {
        let first = b"POST /api/v1/sync HTTP/1.1\r\nHost: weft\r\nAuthorization: Bearer guess\r\nContent-Length: 10000000\r\n\r\n".to_vec();
        let n = clients.len();
        clients.push(("wrong token", tokio::spawn(hostile(n, hooks, first, b"x"))));
    }

    // Meanwhile: legitimate requests, and the daemon's memory and descriptors.
    let mut rss_peak = rss_before;
    let mut fds_peak = fds_before;
    let mut health_worst = Duration::ZERO;
    let mut hook_worst = Duration::ZERO;
    let mut legit = 0;
    while clients.iter().any(|(_, c)| !c.is_finished()) {
        let t = Instant::now();
        let health = tokio::time::timeout(
            Duration::from_secs(5),
            reqwest::get(format!("{}/healthz", d.base())),
        )
        .await
        .expect("/healthz answered within 5s during the attack")
        .expect("/healthz");
        assert_eq!(health.status(), 200);
        health_worst = health_worst.max(t.elapsed());
        let t = Instant::now();
        let (status, body) = tokio::time::timeout(
            Duration::from_secs(15),
            github_push(&d, "refs/heads/elsewhere", None),
        )
        .await
        .expect("a signed webhook answered within 15s during the attack");
        assert_eq!(
            status, 200,
            "a legitimate webhook during the attack: {body}"
        );
        hook_worst = hook_worst.max(t.elapsed());
        legit += 1;
        rss_peak = rss_peak.max(proc_status_kib(pid, "VmRSS:"));
        fds_peak = fds_peak.max(open_fds(pid));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            attack_started.elapsed() < Duration::from_secs(40),
            "the attack outlived every timeout"
        );
    }
    let attack = attack_started.elapsed();

    // Every hostile client was cut, each kind the way it should be.
    let mut worst = std::collections::BTreeMap::<&str, Duration>::new();
    for (kind, c) in clients {
        let cut = c.await.unwrap();
        let after = cut
            .after
            .unwrap_or_else(|| panic!("a {kind} client was never cut: {cut:?}"));
        match kind {
            "oversized" => assert!(cut.answer.starts_with("HTTP/1.1 413"), "{cut:?}"),
            "wrong token" => assert!(cut.answer.starts_with("HTTP/1.1 401"), "{cut:?}"),
            "slow body" => assert!(
                cut.answer.starts_with("HTTP/1.1 408") || cut.answer.is_empty(),
                "{cut:?}"
            ),
            _ => {}
        }
        let w = worst.entry(kind).or_default();
        *w = (*w).max(after);
    }
    // Slow clients are held at most their timeout once accepted; past the connection limit they
    // first wait for a slot, so the bound is two rounds.
    assert!(
        worst["slowloris"] <= 2 * (HEADER_TIMEOUT + BODY_TIMEOUT) + Duration::from_secs(3),
        "{worst:?}"
    );
    assert!(
        worst["slow body"] <= 2 * (HEADER_TIMEOUT + BODY_TIMEOUT) + Duration::from_secs(3),
        "{worst:?}"
    );

    // Descriptors: at most one per connection slot of the hooks port above the baseline (plus a
    // few for the legitimate requests), and all given back.
    assert!(
        fds_peak <= fds_before + MAX_CONNECTIONS + 16,
        "fds {fds_before} → {fds_peak}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let fds_after = loop {
        let n = open_fds(pid);
        if n <= fds_before + 8 || Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        fds_after <= fds_before + 8,
        "fds {fds_before} → {fds_after} after the attack"
    );
    // Memory: the body budget (16 MiB) and the read buffers (64 KiB per connection) bound what
    // the attack can make the daemon hold; 48 MiB over the baseline is a failure.
    let grown_kib = rss_peak.saturating_sub(rss_before);
    assert!(
        grown_kib < 48 * 1024,
        "VmRSS {rss_before} kB → {rss_peak} kB"
    );
    let hwm = proc_status_kib(pid, "VmHWM:");
    println!(
        "server_limits: {} hostile clients ({SLOWLORIS} slowloris, {SLOW_BODIES} slow bodies of 64 KiB, {OVERSIZED} oversized, {WRONG_TOKENS} wrong tokens) over {:.1}s; \
         VmRSS {rss_before} kB -> peak {rss_peak} kB (+{grown_kib} kB), VmHWM {hwm} kB; fds {fds_before} -> peak {fds_peak} -> {fds_after}; \
         {legit} legitimate rounds, worst /healthz {:?}, worst signed webhook {:?}; cut after (worst) {:?}",
        SLOWLORIS + SLOW_BODIES + OVERSIZED + WRONG_TOKENS,
        attack.as_secs_f64(),
        health_worst,
        hook_worst,
        worst
    );
    let logs = d.logs();
    assert!(
        !logs.contains(support::daemon::WEBHOOK_SECRET) && !logs.contains("guess"),
        "no secret or presented token in the log"
    );
    ns.delete().await;
}
