//! Real chart servers for the `helm` and `oci` chart sources: a Helm chart repository (an HTTP
//! file server on loopback whose `index.yaml` the real `helm repo index` wrote, with faults to
//! switch on), an OCI registry (tests/oci-registry: go-containerregistry's registry behind TLS
//! and basic auth, built by its `ensure` like helm), a private CA (openssl), and the real helm to
//! `package`, `repo index`, `registry login` and `push` with.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

/// The OCI registry binary: `$WEFT_OCI_REGISTRY` (scripts/test sets it), else built (or found in
/// the cache) by tests/oci-registry/ensure. Fails, never skips, when it cannot be built.
pub fn oci_registry_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("WEFT_OCI_REGISTRY").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oci-registry/ensure");
        let out = Command::new(&script)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// A CA and a certificate for 127.0.0.1 signed by it.
pub struct PrivateCa {
    pub dir: tempfile::TempDir,
}

impl PrivateCa {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .current_dir(d)
                .args(args)
                .stdin(Stdio::null())
                .output()
                .expect("openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec![
            "req", "-x509", "-days", "2", "-keyout", "ca.key", "-out", "ca.pem",
        ];
        ca.extend(ec);
        ca.extend([
            "-subj",
            "/CN=Weft Test Private CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(&ca);
        let mut csr = vec!["req", "-new", "-keyout", "server.key", "-out", "server.csr"];
        csr.extend(ec);
        csr.extend(["-subj", "/CN=127.0.0.1"]);
        openssl(&csr);
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "server.pem",
            "-extfile",
            "server.ext",
        ]);
        PrivateCa { dir }
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
}

/// The test OCI registry, stopped on drop.
pub struct OciRegistry {
    child: std::process::Child,
    pub host: String,
}

impl OciRegistry {
    /// TLS with `ca`'s certificate; basic auth `user`/`password` (the password through a file).
    pub fn start(ca: &PrivateCa, user: &str, password: &str) -> Self {
        Self::spawn(ca, user, password, false)
    }

    /// As [`OciRegistry::start`], but authenticating as Docker Hub and GHCR do: only bearer
    /// tokens, which its `/token` realm issues for `user`/`password` (the `Bearer realm=…,
    /// service=…,scope=…` challenge of distribution's token auth).
    pub fn start_with_token_realm(ca: &PrivateCa, user: &str, password: &str) -> Self {
        Self::spawn(ca, user, password, true)
    }

    fn spawn(ca: &PrivateCa, user: &str, password: &str, token: bool) -> Self {
        let password_file = ca.dir.path().join(format!("registry-password-{token}"));
        std::fs::write(&password_file, password).unwrap();
        let mut child = Command::new(oci_registry_binary())
            .args(["-listen", "127.0.0.1:0", "-user", user])
            .args(if token { &["-token"][..] } else { &[][..] })
            .arg("-password-file")
            .arg(&password_file)
            .arg("-cert")
            .arg(ca.dir.path().join("server.pem"))
            .arg("-key")
            .arg(ca.dir.path().join("server.key"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("oci-registry");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let host = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("oci-registry said `{line}`"))
            .to_string();
        OciRegistry { child, host }
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the chart repository answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    None,
    /// Every request answers this status.
    Status(u16),
    /// Requests are read and never answered.
    Hang,
    /// `index.yaml` answers this body.
    Index(String),
    /// A request for the path `from` answers `302 Found` with `Location: to`.
    Redirect {
        from: String,
        to: String,
    },
}

/// A chart repository: the files of `dir` over plain HTTP on loopback.
pub struct ChartRepo {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub fault: Arc<Mutex<Fault>>,
    /// Paths requested, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl ChartRepo {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let fault = Arc::new(Mutex::new(Fault::None));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (f, r) = (fault.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (root, f, r) = (root.clone(), f.clone(), r.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 8192];
                    let n = stream.read(&mut buf).unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]).to_string();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    r.lock().unwrap().push(path.clone());
                    let fault = f.lock().unwrap().clone();
                    if let Fault::Redirect { from, to } = &fault {
                        if *from == path {
                            let head = format!(
                                "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            );
                            let _ = stream.write_all(head.as_bytes());
                            return;
                        }
                    }
                    let (status, body) = match fault {
                        Fault::Hang => {
                            std::thread::sleep(std::time::Duration::from_secs(120));
                            return;
                        }
                        Fault::Status(s) => (s, b"fault".to_vec()),
                        Fault::Index(text) if path == "/index.yaml" => (200, text.into_bytes()),
                        _ => match std::fs::read(root.join(path.trim_start_matches('/'))) {
                            Ok(body) => (200, body),
                            Err(_) => (404, b"not found".to_vec()),
                        },
                    };
                    let head = format!(
                        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes());
                    let _ = stream.write_all(&body);
                });
            }
        });
        ChartRepo {
            dir,
            port,
            fault,
            requests,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Package `name` `version` into the repository and index it again with the real helm.
    pub fn publish(&self, name: &str, version: &str) -> PathBuf {
        let tgz = package(name, version, self.dir.path());
        self.reindex();
        tgz
    }

    /// Remove a version and index again.
    pub fn unpublish(&self, name: &str, version: &str) {
        std::fs::remove_file(self.dir.path().join(format!("{name}-{version}.tgz"))).unwrap();
        self.reindex();
    }

    pub fn reindex(&self) {
        helm_ok(
            &[
                "repo",
                "index",
                &self.dir.path().display().to_string(),
                "--url",
                &self.url(),
            ],
            None,
        );
    }

    /// How many requests asked for `path` so far.
    pub fn count(&self, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    }
}

/// Helm with its config, cache and registry login in a directory of its own.
fn helm_home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

pub fn helm_ok(args: &[&str], stdin: Option<&str>) -> String {
    let home = helm_home();
    let mut child = Command::new(super::helm::helm())
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("HELM_REGISTRY_CONFIG", home.join("registry.json"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("helm");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `helm package` a chart `name` `version` whose ConfigMap `{{ .Release.Name }}` says which
/// version it came from, into `dest`.
pub fn package(name: &str, version: &str, dest: &Path) -> PathBuf {
    let src = tempfile::tempdir().unwrap();
    let chart = src.path().join(name);
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: {version}\n"),
    )
    .unwrap();
    std::fs::write(chart.join("values.yaml"), "greeting: hello\n").unwrap();
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  chartVersion: {{ .Chart.Version | quote }}\n  greeting: {{ .Values.greeting | quote }}\n",
    )
    .unwrap();
    helm_ok(
        &[
            "package",
            &chart.display().to_string(),
            "-d",
            &dest.display().to_string(),
        ],
        None,
    );
    dest.join(format!("{name}-{version}.tgz"))
}

/// `helm registry login` then `helm push`; returns the manifest digest helm printed.
pub fn push(
    registry: &OciRegistry,
    ca: &PrivateCa,
    user: &str,
    password: &str,
    tgz: &Path,
) -> String {
    let ca_file = ca.ca_file().display().to_string();
    helm_ok(
        &[
            "registry",
            "login",
            &registry.host,
            "--username",
            user,
            "--password-stdin",
            "--ca-file",
            &ca_file,
        ],
        Some(password),
    );
    let out = helm_ok(
        &[
            "push",
            &tgz.display().to_string(),
            &format!("oci://{}/charts", registry.host),
            "--ca-file",
            &ca_file,
        ],
        None,
    );
    out.lines()
        .find_map(|l| l.strip_prefix("Digest: "))
        .unwrap_or_else(|| panic!("helm push printed no digest: {out}"))
        .trim()
        .to_string()
}

/// A `.dockerconfigjson` with basic auth for `host`.
pub fn docker_config(host: &str, user: &str, password: &str) -> String {
    let mut auths = BTreeMap::new();
    auths.insert(
        host.to_string(),
        serde_json::json!({"username": user, "password": password}),
    );
    serde_json::json!({ "auths": auths }).to_string()
}
