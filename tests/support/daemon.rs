//! Running `weft run` as a real process against the test control plane, and talking to its HTTP
//! API, for the daemon integration tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::cluster;
use super::git_servers::free_port;

/// The sync token and webhook secrets every test daemon uses (one per hook, in a directory as the
/// Secret `weft-webhooks` is mounted).
pub const SYNC_TOKEN: &str = "test-sync-token";
pub const WEBHOOK_SECRET: &str = "test-webhook-secret";
pub const GITLAB_TOKEN: &str = "test-gitlab-token";
pub const GENERIC_SECRET: &str = "test-generic-secret";

/// A `weft run` process; killed (SIGKILL) when dropped if still running.
pub struct Daemon {
    child: Option<Child>,
    /// Port `http` (`--listen`): status, health, metrics.
    pub port: u16,
    /// Port `hooks` (`--hooks-listen`): webhooks and the sync endpoint.
    pub hooks_port: u16,
    pub log: PathBuf,
    dir: tempfile::TempDir,
}

/// Options of a test daemon.
pub struct DaemonOptions<'a> {
    pub repo: &'a str,
    /// Weft's namespace (Lease, inventories): the test's own namespace.
    pub namespace: &'a str,
    pub interval: &'a str,
    pub lease_duration: &'a str,
    pub controllers: bool,
    pub extra: Vec<String>,
    /// Reach the API server with this kubeconfig instead of the test cluster's (a fault proxy).
    pub kubeconfig: Option<PathBuf>,
    /// `--cache-dir` (default: a directory of the daemon's own).
    pub cache_dir: Option<PathBuf>,
    /// Run as a pod with this IP would: `POD_IP` set, the hooks port on every address (so that
    /// the URL it publishes on its Lease, `http://<ip>:<hooks port>`, reaches it).
    pub pod_ip: Option<String>,
    /// Environment variables of the daemon besides the test process's.
    pub env: Vec<(String, String)>,
}

impl<'a> DaemonOptions<'a> {
    pub fn new(repo: &'a str, namespace: &'a str) -> Self {
        DaemonOptions {
            repo,
            namespace,
            interval: "1h",
            lease_duration: "15s",
            controllers: false,
            extra: Vec::new(),
            kubeconfig: None,
            cache_dir: None,
            pod_ip: None,
            env: Vec::new(),
        }
    }
}

impl Daemon {
    /// Start `weft run` and wait until its HTTP API answers `/healthz`.
    pub fn start(opts: DaemonOptions<'_>) -> Daemon {
        let mut dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("sync-token");
        let secret = dir.path().join("webhooks");
        std::fs::write(&token, format!("{SYNC_TOKEN}\n")).expect("write token");
        std::fs::create_dir(&secret).expect("webhooks dir");
        for (hook, value) in [
            ("github", WEBHOOK_SECRET),
            ("gitlab", GITLAB_TOKEN),
            ("generic", GENERIC_SECRET),
        ] {
            std::fs::write(secret.join(hook), format!("{value}\n")).expect("write secret");
        }
        // The ports are picked free, then bound by the child a moment later: another test (or
        // another test binary) may take one in between. A daemon that could not listen is started
        // again on other ports; any other early exit fails the test.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port();
            let hooks_port = free_port();
            let child = Self::spawn(&opts, &dir, port, hooks_port);
            let log = dir.path().join("weft.log");
            let mut d = Daemon {
                child: Some(child),
                port,
                hooks_port,
                log,
                dir,
            };
            match d.wait_healthy() {
                Ok(()) => return d,
                Err(logs) if attempt < 5 && logs.contains("Address already in use") => {
                    dir = d.take_dir();
                }
                Err(logs) => panic!("{logs}"),
            }
        }
    }

    fn spawn(
        opts: &DaemonOptions<'_>,
        dir: &tempfile::TempDir,
        port: u16,
        hooks_port: u16,
    ) -> Child {
        let token = dir.path().join("sync-token");
        let secret = dir.path().join("webhooks");
        let log = dir.path().join("weft.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
        cmd.arg("run")
            .args(["--repo", opts.repo])
            .args(["--weft-namespace", opts.namespace])
            // One sync root per test: owner ids (and so inventories) must not mix between tests.
            .args(["--root-name", opts.namespace])
            .args(["--interval", opts.interval])
            .args(["--lease-duration", opts.lease_duration])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args([
                "--hooks-listen",
                &match &opts.pod_ip {
                    Some(_) => format!("0.0.0.0:{hooks_port}"),
                    None => format!("127.0.0.1:{hooks_port}"),
                },
            ])
            .arg("--sync-token-file")
            .arg(&token)
            .arg("--webhook-secret-file")
            .arg(&secret)
            .arg("--cache-dir")
            .arg(
                opts.cache_dir
                    .clone()
                    .unwrap_or_else(|| dir.path().join("cache")),
            )
            .args(["--timeout", "60s", "--shutdown-grace", "5s"])
            .args(match &opts.kubeconfig {
                Some(path) => vec!["--kubeconfig".to_string(), path.display().to_string()],
                None => cluster::cluster().kube_args(),
            })
            .args(&opts.extra)
            .env("WEFT_LOG", "info,weft=debug")
            .env("WEFT_HELM", super::helm::helm())
            .env_remove("WEFT_REPO")
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file);
        if !opts.controllers {
            cmd.arg("--no-controllers");
        }
        match &opts.pod_ip {
            Some(ip) => cmd.env("POD_IP", ip),
            None => cmd.env_remove("POD_IP"),
        };
        cmd.spawn().expect("spawn weft run")
    }

    /// The daemon's directory, taken out of a daemon that did not start (to start it again).
    fn take_dir(mut self) -> tempfile::TempDir {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let placeholder = tempfile::tempdir().expect("tempdir");
        std::mem::replace(&mut self.dir, placeholder)
    }

    /// Wait until `/healthz` answers; the daemon's logs as the error when it exits or never does.
    fn wait_healthy(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(format!(
                        "weft run exited early ({status}):\n{}",
                        self.logs()
                    ));
                }
            }
            // Healthy, and ours: a port picked free may have been taken by another test's
            // daemon in between, whose /healthz would answer for a child that could not listen.
            let pid = self.child.as_ref().map(Child::id);
            if healthz_ok(self.port) && pid.is_some_and(|pid| status_of_pid(self.port, pid)) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "weft run did not answer /healthz within 30s:\n{}",
            self.logs()
        ))
    }

    /// `http://127.0.0.1:PORT` of port `http`: status, health, metrics.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT` of port `hooks`: webhooks and `POST /api/v1/sync` (`weft trigger`).
    pub fn hooks_base(&self) -> String {
        format!("http://127.0.0.1:{}", self.hooks_port)
    }

    /// The directory of webhook secret files (`github`, `gitlab`, `generic`), as a Secret is mounted.
    pub fn webhook_dir(&self) -> PathBuf {
        self.dir.path().join("webhooks")
    }

    /// The sync token file (for `weft trigger`).
    pub fn token_file(&self) -> PathBuf {
        self.dir.path().join("sync-token")
    }

    /// Everything the daemon logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// `GET /api/v1/status` as JSON.
    pub async fn status(&self) -> serde_json::Value {
        let text = reqwest::get(format!("{}/api/v1/status", self.base()))
            .await
            .expect("GET status")
            .text()
            .await
            .expect("status body");
        serde_json::from_str(&text).expect("status JSON")
    }

    /// Wait until `/api/v1/status` satisfies `pred`, or panic with `what` and the logs.
    pub async fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.status().await;
            if pred(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "{what} did not happen within {timeout:?}; status: {s:#}\nlogs:\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Send a signal (`TERM`, `KILL`) to the process.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Stop it as Kubernetes stops a pod (SIGTERM) and require a clean exit.
    pub fn terminate(&mut self) {
        self.signal("TERM");
        self.expect_clean_exit();
    }

    /// Wait (30 s at most) for the exit a SIGTERM asked for, and require code 0.
    pub fn expect_clean_exit(&mut self) {
        assert_eq!(
            self.wait_exit(Duration::from_secs(30)),
            Some(0),
            "after SIGTERM, weft run exits 0:\n{}",
            self.logs()
        );
    }

    /// The exit code if the process has exited (`Some(-1)` when killed by a signal), else `None`.
    pub fn exited(&mut self) -> Option<i32> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.code().unwrap_or(-1)),
            _ => None,
        }
    }

    /// Wait for the process to exit; its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return status.code();
            }
            if Instant::now() > deadline {
                panic!("weft run did not exit within {timeout:?}:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `GET /healthz` over a plain socket (no HTTP client runtime: this runs inside async tests).
/// Whether the daemon answering on `port` is process `pid` (its identity is `<host>_<pid>`).
fn status_of_pid(port: u16, pid: u32) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /api/v1/status HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let Some((_, body)) = answer.split_once("\r\n\r\n") else {
        return false;
    };
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["identity"].as_str().map(str::to_string))
        .is_some_and(|id| id.ends_with(&format!("_{pid}")))
}

fn healthz_ok(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- weft run log ({}) ---\n{}",
                self.log.display(),
                self.logs()
            );
        }
    }
}

/// `sha256=<hex>` HMAC of `body` under the test webhook secret.
pub fn github_signature(body: &[u8]) -> String {
    weft::server::signature::sign(WEBHOOK_SECRET.as_bytes(), body)
}

/// POST a GitHub push event for `git_ref` to the daemon; returns (status, body).
pub async fn github_push(d: &Daemon, git_ref: &str, signature: Option<String>) -> (u16, String) {
    let payload = serde_json::json!({
        "ref": git_ref,
        "after": "0000000000000000000000000000000000000000",
    });
    github_push_of(d, payload, signature).await
}

/// POST GitHub's `push` event with `payload` (given a fresh `delivery` id, as each of GitHub's
/// deliveries has its own id and body: a copy would be a replay, 409) to the daemon's webhook,
/// signed with the test secret unless `signature` is given; the status and body.
pub async fn github_push_of(
    d: &Daemon,
    mut payload: serde_json::Value,
    signature: Option<String>,
) -> (u16, String) {
    let delivery = delivery_id();
    payload["delivery"] = serde_json::Value::String(delivery.clone());
    let body = payload.to_string();
    let sig = signature.unwrap_or_else(|| github_signature(body.as_bytes()));
    let r = reqwest::Client::new()
        .post(format!("{}/hooks/github", d.hooks_base()))
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", &delivery)
        .header("X-Hub-Signature-256", sig)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .expect("POST /hooks/github");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

/// `POST /api/v1/sync?root=<root>` (`namespace/name`) to the daemon's hooks port with the test
/// sync token; the status and body.
pub async fn sync_root_of(d: &Daemon, root: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/sync?root={root}", d.hooks_base()))
        .bearer_auth(SYNC_TOKEN)
        .send()
        .await
        .expect("POST /api/v1/sync?root=");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

/// A fresh delivery id, as GitHub sends one per delivery.
pub fn delivery_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A non-loopback IPv4 address of this machine: what a test daemon uses as its pod IP, since an
/// EndpointSlice may not hold a loopback address.
pub fn host_ip() -> String {
    let out = Command::new("hostname")
        .arg("-I")
        .output()
        .expect("run hostname -I");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
        .find(|a| !a.is_loopback() && !a.is_link_local())
        .map(|a| a.to_string())
        .expect("this machine has a non-loopback IPv4 address (hostname -I)")
}

/// What the endpoint controller does for Weft's pods: the Service `weft` in `namespace`, and an
/// EndpointSlice listing `ip` at these hooks ports. A standby forwards only to such an endpoint.
pub async fn publish_endpoints(client: kube::Client, namespace: &str, ip: &str, ports: &[u16]) {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::{Api, Patch, PatchParams};
    let pp = PatchParams::apply("weft-test").force();
    let service: Service = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "weft", "namespace": namespace},
        "spec": {"ports": [{"name": "hooks", "port": 8081}]},
    }))
    .expect("Service");
    Api::<Service>::namespaced(client.clone(), namespace)
        .patch("weft", &pp, &Patch::Apply(&service))
        .await
        .expect("apply Service weft");
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": "weft-test", "namespace": namespace,
            "labels": {"kubernetes.io/service-name": "weft"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
        "ports": ports.iter().map(|p| serde_json::json!({"name": format!("hooks-{p}"), "port": p, "protocol": "TCP"})).collect::<Vec<_>>(),
    }))
    .expect("EndpointSlice");
    Api::<EndpointSlice>::namespaced(client, namespace)
        .patch("weft-test", &pp, &Patch::Apply(&slice))
        .await
        .expect("apply EndpointSlice");
}

/// The path of the `weft` binary.
pub fn weft_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_weft"))
}

/// Run `weft run` of `repo` for the root `ns` in Weft's namespace `ns` (listening on free
/// ports), with `extra` arguments — a daemon expected to stop by itself: a refusal at start —
/// with its cache in a temporary directory, and wait up to 60 s for it to exit: its exit code
/// (`None` when it was still running and was killed) and everything it logged.
pub fn run_to_exit(repo: &str, ns: &str, extra: &[String]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("weft.log");
    let file = std::fs::File::create(&log).expect("log");
    let mut child = Command::new(weft_bin())
        .arg("run")
        .args(["--repo", repo, "--weft-namespace", ns, "--root-name", ns])
        .args(["--listen", "127.0.0.1:0", "--hooks-listen", "127.0.0.1:0"])
        .args(["--lease-duration", "15s"])
        .args(extra)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .env_remove("WEFT_REPO")
        .env("WEFT_HELM", super::helm::helm())
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .spawn()
        .expect("weft run");
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (code, std::fs::read_to_string(&log).unwrap_or_default())
}
