//! Fault tooling for the tests that prove Weft survives what production does to a controller:
//! an API proxy that can swallow requests, and a TCP server that accepts and never answers (or
//! trickles).

use std::io::Write;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use kube::Client;

use super::cluster;

/// What the proxy saw.
#[derive(Debug, Default)]
struct Seen {
    /// Arrival time of each write that is not about a Lease (POST, PUT, PATCH, DELETE).
    writes: Vec<(SystemTime, String)>,
    /// When the last Lease write was answered.
    last_lease_answer: Option<SystemTime>,
    /// Every request passed, by class.
    counts: ApiCallCounts,
}

/// The requests an [`ApiProxy`] passed, counted by class with `weft::apply::calls::classify`
/// (the classification of Weft's own counters), so any client — Weft, Flux's engine, kubectl —
/// is counted the same way from outside.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApiCallCounts {
    /// GET (LIST and WATCH included), HEAD, OPTIONS.
    pub reads: u64,
    /// POST, PUT, PATCH, DELETE without `dryRun=All`, Lease and Event writes excepted.
    pub writes: u64,
    /// Any request with `dryRun=All`.
    pub dry_runs: u64,
    /// Writes to `coordination.k8s.io` Leases (leader election).
    pub lease_writes: u64,
    /// Writes of Events (`/events` in the core group or `events.k8s.io`).
    pub event_writes: u64,
}

impl ApiCallCounts {
    /// The calls made since `earlier` (a previous reading of the same proxy).
    pub fn since(&self, earlier: &ApiCallCounts) -> ApiCallCounts {
        ApiCallCounts {
            reads: self.reads - earlier.reads,
            writes: self.writes - earlier.writes,
            dry_runs: self.dry_runs - earlier.dry_runs,
            lease_writes: self.lease_writes - earlier.lease_writes,
            event_writes: self.event_writes - earlier.event_writes,
        }
    }
}

struct Shared {
    upstream: Client,
    swallow_lease_writes: AtomicBool,
    seen: Mutex<Seen>,
    /// (trigger, target, triggered): once a write whose path contains `trigger` has passed,
    /// writes whose path contains `target` are swallowed.
    swallow_after: Mutex<Option<(String, String, bool)>>,
}

/// A plain-HTTP proxy on loopback in front of the test API server: it forwards every request
/// with the cluster's admin credentials (kube's `Client::send`), records the writes it passes,
/// and on demand swallows Lease writes (accepts them and never answers), as a network partition
/// between one replica and the API server would.
pub struct ApiProxy {
    shared: Arc<Shared>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl ApiProxy {
    /// Start the proxy on the current tokio runtime (use a multi-threaded test runtime).
    pub async fn start() -> ApiProxy {
        let upstream = cluster::client().await;
        let shared = Arc::new(Shared {
            upstream,
            swallow_lease_writes: AtomicBool::new(false),
            seen: Mutex::new(Seen::default()),
            swallow_after: Mutex::new(None),
        });
        let std = StdListener::bind("127.0.0.1:0").expect("bind proxy");
        std.set_nonblocking(true).expect("nonblocking");
        let addr = std.local_addr().expect("addr");
        // No Nagle delay (Go's servers and `kubectl proxy` set TCP_NODELAY; axum::serve does
        // not): a streamed LIST page written in pieces waited for the client's delayed ACK,
        // which added ≈ 2 s to a no-op pass over 100,000 objects.
        let listener = axum::serve::ListenerExt::tap_io(
            tokio::net::TcpListener::from_std(std).expect("tokio listener"),
            |tcp| {
                let _ = tcp.set_nodelay(true);
            },
        );
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        let mut f = std::fs::File::create(&kubeconfig).expect("kubeconfig");
        write!(
            f,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://{addr}\nusers:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: proxy\ncurrent-context: proxy\n"
        )
        .expect("write kubeconfig");
        ApiProxy {
            shared,
            kubeconfig,
            _dir: dir,
            task,
        }
    }

    /// A kubeconfig that reaches the API server through this proxy.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Swallow Lease writes from now on (`true`), or forward them again.
    pub fn swallow_lease_writes(&self, on: bool) {
        self.shared.swallow_lease_writes.store(on, Ordering::SeqCst);
    }

    /// Once a write whose path contains `trigger` has passed, swallow every write whose path
    /// contains `target` (e.g. the inventory write that follows an apply).
    pub fn swallow_after(&self, trigger: &str, target: &str) {
        *self.shared.swallow_after.lock().unwrap() =
            Some((trigger.to_string(), target.to_string(), false));
    }

    /// Whether the `swallow_after` trigger has passed.
    pub fn triggered(&self) -> bool {
        matches!(
            *self.shared.swallow_after.lock().unwrap(),
            Some((_, _, true))
        )
    }

    /// The writes passed so far (arrival time, `METHOD path`), Lease writes excepted.
    pub fn writes(&self) -> Vec<(SystemTime, String)> {
        self.shared.seen.lock().unwrap().writes.clone()
    }

    /// When the API server last answered a Lease write that came through the proxy.
    pub fn last_lease_answer(&self) -> Option<SystemTime> {
        self.shared.seen.lock().unwrap().last_lease_answer
    }

    /// Forget the writes recorded so far (a long benchmark would keep every one of them).
    #[allow(dead_code)] // only benches/scale.rs calls it; no test runs long enough to need it
    pub fn clear_writes(&self) {
        self.shared.seen.lock().unwrap().writes.clear();
    }

    /// Every request passed so far, by class (a request is counted when it arrives).
    pub fn counts(&self) -> ApiCallCounts {
        self.shared.seen.lock().unwrap().counts
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let lease = path.starts_with("/apis/coordination.k8s.io/");
    let write = !matches!(
        parts.method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    );
    if lease && write && shared.swallow_lease_writes.load(Ordering::SeqCst) {
        // Accepted, never answered: the client must give up on its own.
        std::future::pending::<()>().await;
    }
    if write {
        let swallow = match &mut *shared.swallow_after.lock().unwrap() {
            Some((_, target, true)) => path.contains(target.as_str()),
            Some((trigger, _, fired)) if path.contains(trigger.as_str()) => {
                *fired = true;
                false
            }
            _ => false,
        };
        if swallow {
            std::future::pending::<()>().await;
        }
    }
    {
        use weft::apply::calls::{classify, CallKind};
        let event = path.contains("/events");
        let mut seen = shared.seen.lock().unwrap();
        let counts = &mut seen.counts;
        match classify(&parts.method, parts.uri.query()) {
            CallKind::Read => counts.reads += 1,
            CallKind::DryRun => counts.dry_runs += 1,
            CallKind::Write if lease => counts.lease_writes += 1,
            CallKind::Write if event => counts.event_writes += 1,
            CallKind::Write => counts.writes += 1,
        }
        if write && !lease {
            let what = format!("{} {path}", parts.method);
            seen.writes.push((SystemTime::now(), what));
        }
    }
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return (http::StatusCode::BAD_REQUEST, "unreadable body").into_response();
    };
    let mut out = http::Request::builder()
        .method(parts.method.clone())
        .uri(path);
    for (name, value) in &parts.headers {
        if name != http::header::HOST && name != http::header::AUTHORIZATION {
            out = out.header(name, value);
        }
    }
    let out = out
        .body(kube::client::Body::from(bytes.to_vec()))
        .expect("request");
    match shared.upstream.send(out).await {
        Ok(resp) => {
            if lease && write {
                shared.seen.lock().unwrap().last_lease_answer = Some(SystemTime::now());
            }
            resp.map(axum::body::Body::new).into_response()
        }
        Err(e) => (http::StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// How a [`SilentServer`] treats a connection.
#[derive(Clone, Copy, Debug)]
pub enum Silence {
    /// Send one byte of an HTTP answer whose headers never end every `Duration`, for ever.
    Trickle(Duration),
}

/// A TCP server on loopback that accepts connections and then never answers (or trickles), as a
/// git server behind a broken load balancer does. Stops when dropped.
pub struct SilentServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl SilentServer {
    pub fn start(mode: Silence) -> SilentServer {
        let listener = StdListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        {
                            let Silence::Trickle(every) = mode;
                            let mut conn = conn.try_clone().expect("clone");
                            let flag = flag.clone();
                            std::thread::spawn(move || {
                                // The status line, then one header that never ends.
                                let head = b"HTTP/1.1 200 OK\r\nX-Trickle: ";
                                for b in head.iter().chain(std::iter::repeat(&b'a')) {
                                    if flag.load(Ordering::SeqCst) || conn.write_all(&[*b]).is_err()
                                    {
                                        return;
                                    }
                                    std::thread::sleep(every);
                                }
                            });
                        }
                        held.push(conn);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        SilentServer { port, stop }
    }

    /// `http://127.0.0.1:PORT/<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A TCP relay on loopback in front of a server (a git server, say) that can be switched to
/// swallow new connections: accepted, never forwarded, never answered.
pub struct TcpRelay {
    pub port: u16,
    hang: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl TcpRelay {
    pub fn start(upstream: SocketAddr) -> TcpRelay {
        let listener = StdListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let hang = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, st) = (hang.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut swallowed = Vec::new();
            while !st.load(Ordering::SeqCst) {
                let Ok((conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let _ = conn.set_nonblocking(false);
                if h.load(Ordering::SeqCst) {
                    swallowed.push(conn);
                    continue;
                }
                let Ok(up) = std::net::TcpStream::connect(upstream) else {
                    continue;
                };
                let (mut a_in, mut a_out) = (conn.try_clone().expect("clone"), conn);
                let (mut b_in, mut b_out) = (up.try_clone().expect("clone"), up);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut a_in, &mut b_out);
                    let _ = b_out.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut b_in, &mut a_out);
                    let _ = a_out.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        TcpRelay { port, hang, stop }
    }

    /// Swallow new connections from now on (`true`), or relay them again.
    pub fn hang(&self, on: bool) {
        self.hang.store(on, Ordering::SeqCst);
    }
}

impl Drop for TcpRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A process of this test binary's control plane (`tests/control-plane/up` records one pid per
/// process in `DIR/pids/NAME.pid`), to kill and start again, or to pause and resume, for real.
/// Only a control plane this binary started can be hurt: against `WEFT_TEST_KUBECONFIG` the
/// fault tests fail (they never skip).
pub struct Component {
    dir: PathBuf,
    pub name: &'static str,
}

impl Component {
    /// `etcd`, `kube-apiserver`, `kube-controller-manager`, `kube-scheduler` or `kwok`.
    pub fn of(name: &'static str) -> Component {
        let dir = cluster::cluster()
            .dir()
            .unwrap_or_else(|| {
                panic!(
                    "fault tests need the control plane this test binary starts, not {}",
                    cluster::KUBECONFIG_ENV
                )
            })
            .to_path_buf();
        Component { dir, name }
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join("pids").join(format!("{}.pid", self.name))
    }

    pub fn pid(&self) -> u32 {
        std::fs::read_to_string(self.pid_file())
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid")
    }

    fn signal(&self, sig: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{sig}"), self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} {} failed", self.name);
    }

    /// SIGKILL the process and wait until it is gone; its command line, to start it again.
    pub fn kill(&self) -> Vec<std::ffi::OsString> {
        use std::os::unix::ffi::OsStrExt;
        let pid = self.pid();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
        let argv: Vec<std::ffi::OsString> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| std::ffi::OsStr::from_bytes(a).to_os_string())
            .collect();
        self.signal("KILL");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Gone, or a zombie waiting for its parent.
            if state.is_empty() || state.split(' ').nth(2) == Some("Z") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} did not die",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        argv
    }

    /// Start the process again with `argv` (as `kill` returned it), logging where it logged, and
    /// record its pid so that the control plane's `down` stops it.
    pub fn start(&self, argv: &[std::ffi::OsString]) {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.dir.join("logs").join(format!("{}.log", self.name)))
            .expect("log");
        let mut child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("restarting {}: {e}", self.name));
        std::fs::write(self.pid_file(), format!("{}\n", child.id())).expect("pid file");
        // Reaped when it exits (`down` stops it at the end), so no zombie is left.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
    }

    /// SIGSTOP: the process hangs, its connections stay open.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("CONT");
    }
}

/// Wait until the API server answers `/readyz` with `ok`.
pub async fn wait_api_ready(within: Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let client = cluster::client().await;
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("request");
        if let Ok(Ok(text)) =
            tokio::time::timeout(Duration::from_secs(3), client.request_text(request)).await
        {
            if text.trim() == "ok" {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the API server was not ready again within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A tmpfs of `size` (e.g. `512k`) mounted on a fresh directory, unmounted when dropped: a small
/// disk to fill. Needs the right to mount (root, as CI runs): without it the test fails, it never
/// skips.
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    pub fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs for the disk-full test failed (it needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fill the disk: a file grown until the disk says it is full.
    pub fn fill(&self) -> PathBuf {
        let filler = self.dir.path().join("filler");
        let mut f = std::fs::File::create(&filler).expect("filler");
        let chunk = vec![0xa5u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
