//! Real git servers on loopback for tests and benchmarks: `git daemon` (git://), `git
//! http-backend` behind a small HTTP server with basic/bearer auth (http://), and OpenSSH's
//! `sshd` with its own host key and a test user key (ssh://). Plus helpers to make bare
//! repositories and push commits to them with the git CLI.
//!
//! Every server is stopped when its value is dropped. `sshd` comes from Debian's
//! openssh-server: `tests/git-servers/ensure-deps` installs it when missing (as root).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Run a git command, panicking with its output on failure; returns stdout (trimmed).
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=Weft Test",
            "-c",
            "user.email=test@weft.invalid",
        ])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "protocol.file.allow=always",
        ])
        .args([
            "-c",
            "advice.detachedHead=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap_or_else(|e| panic!("cannot run git {args:?}: {e}"));
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Make sure git, git-daemon, git-http-backend and sshd are installed (runs
/// `tests/git-servers/ensure-deps`, which apt-installs them as root).
pub fn ensure_deps() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if Path::new("/usr/sbin/sshd").exists()
            && Path::new("/usr/lib/git-core/git-http-backend").exists()
        {
            return;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/git-servers/ensure-deps");
        let status = Command::new(&script)
            .status()
            .expect("run tests/git-servers/ensure-deps");
        assert!(
            status.success(),
            "tests/git-servers/ensure-deps failed; install git and openssh-server"
        );
    });
}

/// A directory of bare repositories that the servers export.
pub struct RepoHost {
    dir: tempfile::TempDir,
}

impl Default for RepoHost {
    fn default() -> Self {
        Self::new()
    }
}

impl RepoHost {
    pub fn new() -> Self {
        RepoHost {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// The directory holding the repositories.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Create the bare repository `name` (e.g. `config.git`) with `main` as default branch.
    pub fn create(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        git(
            self.dir.path(),
            &["init", "-q", "--bare", "-b", "main", name],
        );
        // Let tests fetch any commit by SHA and push over git:// and http://.
        git(&path, &["config", "uploadpack.allowAnySHA1InWant", "true"]);
        git(&path, &["config", "http.receivepack", "true"]);
        git(&path, &["config", "daemon.receivepack", "true"]);
        path
    }

    /// The bare repository `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A working clone used to commit and push to a bare repository with the git CLI.
pub struct WorkTree {
    dir: tempfile::TempDir,
}

impl WorkTree {
    /// A new, empty work tree whose `origin` is `remote` (a path or URL), on branch `main`.
    pub fn new(remote: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        git(dir.path(), &["init", "-q", "-b", "main"]);
        git(dir.path(), &["remote", "add", "origin", remote]);
        WorkTree { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write a file (creating directories).
    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> &Self {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, content).expect("write");
        self
    }

    /// Create a symlink `rel` → `target` (target as written in the link).
    pub fn symlink(&self, rel: &str, target: &str) -> &Self {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::os::unix::fs::symlink(target, p).expect("symlink");
        self
    }

    pub fn remove(&self, rel: &str) -> &Self {
        git(self.dir.path(), &["rm", "-q", "-r", rel]);
        self
    }

    /// Commit everything; returns the commit SHA.
    pub fn commit(&self, message: &str) -> String {
        git(self.dir.path(), &["add", "-A"]);
        git(
            self.dir.path(),
            &["commit", "-q", "--allow-empty", "-m", message],
        );
        git(self.dir.path(), &["rev-parse", "HEAD"])
    }

    /// Push `main` (and tags) to origin.
    pub fn push(&self) {
        git(self.dir.path(), &["push", "-q", "origin", "main", "--tags"]);
    }

    /// Push a branch to origin.
    pub fn push_branch(&self, branch: &str) {
        git(
            self.dir.path(),
            &["push", "-q", "origin", &format!("HEAD:refs/heads/{branch}")],
        );
    }

    /// Force-push `main` (after rewriting history).
    pub fn force_push(&self) {
        git(
            self.dir.path(),
            &["push", "-q", "--force", "origin", "main"],
        );
    }

    /// Run any git command in the work tree.
    pub fn git(&self, args: &[&str]) -> String {
        git(self.dir.path(), args)
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; a small race is acceptable in tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before listening: {status}");
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    panic!("{what} did not listen on port {port} within 15s");
}

/// `git daemon` serving a [`RepoHost`] over git:// (push enabled).
pub struct GitDaemon {
    child: Child,
    pub port: u16,
}

impl GitDaemon {
    pub fn start(host: &RepoHost) -> Self {
        ensure_deps();
        let port = free_port();
        // Run git-daemon itself: `git daemon` would run it as a grandchild that outlives a kill.
        let exec_path = Command::new("git")
            .arg("--exec-path")
            .output()
            .expect("git --exec-path")
            .stdout;
        let daemon = PathBuf::from(String::from_utf8_lossy(&exec_path).trim()).join("git-daemon");
        let mut child = Command::new(daemon)
            .args([
                "--reuseaddr",
                "--export-all",
                "--enable=receive-pack",
                "--informative-errors",
            ])
            .arg(format!("--base-path={}", host.root().display()))
            .arg("--listen=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(host.root())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn git daemon");
        wait_for_port(port, &mut child, "git daemon");
        GitDaemon { child, port }
    }

    /// The git:// URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }

    /// The `git-daemon` process (its reaped `upload-pack` children's CPU counts in its own).
    #[allow(dead_code)] // read by benches/roots.rs only
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How the HTTP server authenticates.
#[derive(Clone, Debug, Default)]
pub struct HttpAuth {
    /// Required basic-auth user and password.
    pub basic: Option<(String, String)>,
    /// Accepted bearer token.
    pub bearer: Option<String>,
}

/// `git http-backend` (CGI) behind an axum server on loopback, with optional auth. Every
/// request is recorded as `METHOD /path?query` (see [`HttpGitServer::requests`]).
pub struct HttpGitServer {
    pub port: u16,
    requests: Arc<Mutex<Vec<String>>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct HttpState {
    root: PathBuf,
    auth: HttpAuth,
    requests: Arc<Mutex<Vec<String>>>,
}

impl HttpGitServer {
    pub fn start(host: &RepoHost, auth: HttpAuth) -> Self {
        ensure_deps();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(HttpState {
            root: host.root().to_path_buf(),
            auth,
            requests: requests.clone(),
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                let app = axum::Router::new().fallback(handle).with_state(state);
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = rx.await;
                    })
                    .await;
            });
        });
        HttpGitServer {
            port,
            requests,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    /// The http:// URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// The requests served so far (`GET /config.git/info/refs?service=git-upload-pack`, …).
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("lock").clone()
    }

    /// Forget the recorded requests.
    pub fn clear_requests(&self) {
        self.requests.lock().expect("lock").clear();
    }
}

impl Drop for HttpGitServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn handle(
    axum::extract::State(state): axum::extract::State<Arc<HttpState>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::http::{header, HeaderValue, StatusCode};
    use axum::response::IntoResponse;

    let (parts, body) = request.into_parts();
    let query = parts.uri.query().unwrap_or("").to_string();
    let path = parts.uri.path().to_string();
    state.requests.lock().expect("lock").push(format!(
        "{} {}{}",
        parts.method,
        path,
        if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        }
    ));

    let authorization = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut user = String::new();
    if state.auth.basic.is_some() || state.auth.bearer.is_some() {
        let basic_ok = state.auth.basic.as_ref().and_then(|(u, p)| {
            (authorization == format!("Basic {}", base64_encode(format!("{u}:{p}").as_bytes())))
                .then(|| u.clone())
        });
        let bearer_ok =
            state.auth.bearer.as_ref().and_then(|t| {
                (authorization == format!("Bearer {t}")).then(|| "token".to_string())
            });
        match basic_ok.or(bearer_ok) {
            Some(u) => user = u,
            None => {
                let mut resp =
                    (StatusCode::UNAUTHORIZED, "authentication required\n").into_response();
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"git\""),
                );
                return resp;
            }
        }
    }

    // A Helm chart repository beside the repositories, behind the same auth (as GitLab and
    // Gitea serve packages): `index.yaml` and `.tgz` files under the root are served as they are.
    if parts.method == axum::http::Method::GET
        && (path.ends_with("/index.yaml") || path.ends_with(".tgz"))
        && !path.contains("..")
    {
        if let Ok(bytes) = std::fs::read(state.root.join(path.trim_start_matches('/'))) {
            return (StatusCode::OK, bytes).into_response();
        }
    }

    let body = match axum::body::to_bytes(body, 1 << 30).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("body: {e}\n")).into_response(),
    };
    let header_str = |name: header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env("GIT_PROJECT_ROOT", &state.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", &path)
        .env("QUERY_STRING", &query)
        .env("CONTENT_TYPE", header_str(header::CONTENT_TYPE))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if !user.is_empty() {
        cmd.env("REMOTE_USER", &user);
    }
    let encoding = header_str(header::CONTENT_ENCODING);
    if !encoding.is_empty() {
        cmd.env("HTTP_CONTENT_ENCODING", encoding);
    }
    if let Some(p) = parts
        .headers
        .get("git-protocol")
        .and_then(|v| v.to_str().ok())
    {
        cmd.env("GIT_PROTOCOL", p);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("spawn: {e}\n")).into_response()
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        let _ = stdin.write_all(&body).await;
    }
    let out = match child.wait_with_output().await {
        Ok(o) => o,
        Err(e) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("cgi: {e}\n")).into_response()
        }
    };
    // CGI output: headers, a blank line, the body.
    let raw = out.stdout;
    let (head_end, body_start) = match find(&raw, b"\r\n\r\n") {
        Some(i) => (i, i + 4),
        None => match find(&raw, b"\n\n") {
            Some(i) => (i, i + 2),
            None => {
                return (
                    StatusCode::BAD_GATEWAY,
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                )
                    .into_response()
            }
        },
    };
    let mut builder = axum::http::Response::builder().status(StatusCode::OK);
    for line in String::from_utf8_lossy(&raw[..head_end]).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value
                .split_whitespace()
                .next()
                .and_then(|c| c.parse::<u16>().ok())
                .unwrap_or(500);
            builder = builder.status(code);
        } else {
            builder = builder.header(name.trim(), value);
        }
    }
    builder
        .body(axum::body::Body::from(raw[body_start..].to_vec()))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// OpenSSH `sshd` on a loopback port with its own host key; the current user may log in with
/// [`SshServer::user_key`]. Repositories are addressed by absolute path.
pub struct SshServer {
    child: Child,
    dir: tempfile::TempDir,
    pub port: u16,
    /// The login user (the user running the tests).
    pub user: String,
    /// Log of sshd (for debugging failed tests).
    log: PathBuf,
}

impl SshServer {
    pub fn start() -> Self {
        ensure_deps();
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for key in ["host_ed25519", "user_key", "other_key"] {
            let status = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "weft-test", "-f"])
                .arg(d.join(key))
                .status()
                .expect("ssh-keygen");
            assert!(status.success(), "ssh-keygen failed");
        }
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).expect("authorized_keys");
        let user = String::from_utf8(Command::new("id").arg("-un").output().expect("id").stdout)
            .expect("utf8")
            .trim()
            .to_string();
        let is_root = user == "root";
        if is_root {
            // sshd's privilege separation directory; Debian creates it only from its service.
            let _ = std::fs::create_dir_all("/run/sshd");
        }
        let port = free_port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nPidFile {pid}\nAuthorizedKeysFile {ak}\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             StrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\nAllowUsers {user}\n\
             LogLevel VERBOSE\nMaxStartups 100\nMaxAuthTries 6\nSetEnv PATH=/usr/local/bin:/usr/bin:/bin\n",
            host = d.join("host_ed25519").display(),
            pid = d.join("sshd.pid").display(),
            ak = d.join("authorized_keys").display(),
        );
        std::fs::write(d.join("sshd_config"), config).expect("sshd_config");
        let log = d.join("sshd.log");
        let mut child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("spawn /usr/sbin/sshd (run tests/git-servers/ensure-deps as root)");
        wait_for_port(port, &mut child, "sshd");
        SshServer {
            child,
            dir,
            port,
            user,
            log,
        }
    }

    /// The private key the server accepts for [`SshServer::user`].
    pub fn user_key(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("user_key")).expect("user key")
    }

    /// A valid private key that the server does not accept.
    pub fn other_key(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("other_key")).expect("other key")
    }

    /// Revoke the user key: from now on only [`SshServer::other_key`] is accepted.
    pub fn accept_only_other_key(&self) {
        std::fs::copy(
            self.dir.path().join("other_key.pub"),
            self.dir.path().join("authorized_keys"),
        )
        .expect("authorized_keys");
    }

    /// Accept [`SshServer::user_key`] again (the state after [`SshServer::start`]).
    pub fn accept_user_key(&self) {
        std::fs::copy(
            self.dir.path().join("user_key.pub"),
            self.dir.path().join("authorized_keys"),
        )
        .expect("authorized_keys");
    }

    /// A known_hosts line trusting this server's host key at its port.
    pub fn known_hosts(&self) -> String {
        let public =
            std::fs::read_to_string(self.dir.path().join("host_ed25519.pub")).expect("host key");
        let mut fields = public.split_whitespace();
        let kind = fields.next().expect("key type");
        let key = fields.next().expect("key");
        format!("[127.0.0.1]:{} {kind} {key}\n", self.port)
    }

    /// A known_hosts line for this host and port with some other key (a "man in the middle").
    pub fn wrong_known_hosts(&self) -> String {
        let public =
            std::fs::read_to_string(self.dir.path().join("other_key.pub")).expect("other key");
        let mut fields = public.split_whitespace();
        let kind = fields.next().expect("key type");
        let key = fields.next().expect("key");
        format!("[127.0.0.1]:{} {kind} {key}\n", self.port)
    }

    /// `ssh://user@127.0.0.1:port/abs/path`.
    pub fn url(&self, repo: &Path) -> String {
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            self.user,
            self.port,
            repo.display()
        )
    }

    /// scp-style `[user@127.0.0.1:port]:/abs/path`.
    pub fn scp_url(&self, repo: &Path) -> String {
        format!("[{}@127.0.0.1:{}]:{}", self.user, self.port, repo.display())
    }

    /// sshd's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for SshServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// TLS in front of an [`HttpGitServer`] (`tests/git-servers/tls-proxy.py`, python3's ssl), with a
/// fresh self-signed certificate for 127.0.0.1. Clients trust it through `SSL_CERT_FILE`.
pub struct TlsProxy {
    child: Child,
    dir: tempfile::TempDir,
    pub port: u16,
}

impl TlsProxy {
    pub fn start(backend_port: u16) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args([
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(dir.path().join("key.pem"))
            .arg("-out")
            .arg(dir.path().join("cert.pem"))
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(status.success(), "openssl req failed");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/git-servers/tls-proxy.py");
        let port = free_port();
        let mut child = Command::new("python3")
            .arg(script)
            .arg(port.to_string())
            .arg(backend_port.to_string())
            .arg(dir.path().join("cert.pem"))
            .arg(dir.path().join("key.pem"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn python3 tls-proxy.py");
        wait_for_port(port, &mut child, "tls-proxy.py");
        TlsProxy { child, dir, port }
    }

    /// The https:// URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        format!("https://127.0.0.1:{}/{name}", self.port)
    }

    /// The server's certificate (PEM), to trust with `SSL_CERT_FILE`.
    pub fn cert_file(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A repository `config.git` served by `git daemon`, with a work tree to push to it: what most
/// daemon tests start with.
pub struct ServedRepo {
    /// The directory the server serves from: kept (and removed) with the server.
    _host: RepoHost,
    pub server: GitDaemon,
    pub work: WorkTree,
}

impl ServedRepo {
    pub fn start() -> ServedRepo {
        let host = RepoHost::new();
        let bare = host.create("config.git");
        let server = GitDaemon::start(&host);
        let work = WorkTree::new(&bare.display().to_string());
        ServedRepo {
            _host: host,
            server,
            work,
        }
    }

    /// The git:// URL of `config.git`.
    pub fn url(&self) -> String {
        self.server.url("config.git")
    }
}
