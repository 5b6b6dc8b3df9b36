//! Chart sources as Armada and treasuremap write them, against real servers on loopback: a git
//! source judged by the chart its `subpath` holds (openstack-helm has broken symlinks elsewhere),
//! private git chart sources fetched with the config repository's credentials, https sources
//! behind a private CA (`--ca-file`, `SSL_CERT_FILE`, `SSL_CERT_DIR`), and redirects that a git
//! chart source does not follow. Charts use Weft's template-free format: no helm is needed.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use support::chart_servers::PrivateCa;
use support::git_servers::{free_port, GitDaemon, HttpAuth, HttpGitServer, RepoHost, WorkTree};
use support::weft_cli::Weft;
use weft::api::armada::ChartSource;
use weft::api::ResourceKey;
use weft::source::chart::{self, ChartCache, ChartRequest};
use weft::source::fetch_policy::{ChartSourcePolicy, UrlAllowList};
use weft::source::Snapshot;

/// The files of a template-free chart named `name` under `dir` (`""`: the root).
fn chart(dir: &str, name: &str) -> Vec<(String, String)> {
    let at = |p: &str| {
        if dir.is_empty() {
            p.to_string()
        } else {
            format!("{dir}/{p}")
        }
    };
    vec![
        (
            at("Chart.yaml"),
            format!("name: {name}\nversion: 1.0.0\nannotations:\n  weft.io/template-format: substitution\n"),
        ),
        (
            at("templates/cm.yaml"),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  message: ${{message:=hello}}\n"),
        ),
    ]
}

fn write_chart(work: &WorkTree, dir: &str, name: &str) {
    for (path, content) in chart(dir, name) {
        work.write(&path, content);
    }
}

fn request(name: &str, source: serde_json::Value) -> ChartRequest {
    ChartRequest {
        chart: ResourceKey {
            namespace: "default".into(),
            name: name.into(),
        },
        origin: format!("{name}.yaml:1:1"),
        source: serde_json::from_value::<ChartSource>(source).unwrap(),
    }
}

fn resolve_one(
    req: ChartRequest,
    location: &str,
    cache: &ChartCache,
) -> Result<chart::ChartSources, chart::ChartSourceError> {
    chart::resolve(&[req], &Snapshot::default(), location, cache)
}

/// An ArmadaChart document whose `source` is `source` (YAML flow mapping).
fn armada_chart(name: &str, source: &str) -> String {
    format!(
        "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  release: {name}\n  namespace: demo\n  source: {source}\n  values: {{message: from-{name}}}\n"
    )
}

/// Run the weft binary with `env` (and a cache of its own under `cache`).
fn weft(args: &[&str], env: &[(&str, &Path)], cache: &Path) -> (i32, String, String) {
    let mut cmd = Weft::new(args)
        .env("XDG_CACHE_HOME", cache)
        .env("HOME", cache)
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .env_remove("WEFT_GIT_CREDENTIALS_DIR")
        .env_remove("WEFT_CA_FILE");
    for (k, v) in env {
        cmd = cmd.env(k, v);
    }
    cmd.run()
}

/// Issue 28.3: openstack-helm has dangling and escaping symlinks outside its charts
/// (`tools/deployment/baremetal/030-ceph.sh`, …) at every commit; a chart of it is judged by
/// what its `subpath` holds, and inside a chart the rules stand.
#[test]
fn a_git_chart_is_judged_by_the_chart_its_subpath_holds() {
    let host = RepoHost::new();
    let bare = host.create("openstack-helm.git");
    let work = WorkTree::new(bare.to_str().unwrap());
    write_chart(&work, "keystone", "keystone");
    // A link inside the chart to a file elsewhere in the repository is followed, as before.
    work.write("shared/values.yaml", "message: shared\n");
    work.symlink("keystone/values.yaml", "../shared/values.yaml");
    // Outside the chart: dangling (as openstack-helm's) and escaping links.
    work.symlink(
        "tools/deployment/baremetal/030-ceph.sh",
        "../component/ceph/ceph.sh",
    );
    work.symlink("tools/escape.sh", "../../../../etc/passwd");
    // Inside other charts: refused as before.
    write_chart(&work, "escaping", "escaping");
    work.symlink("escaping/templates/passwd.yaml", "../../../../etc/passwd");
    write_chart(&work, "dangling", "dangling");
    work.symlink("dangling/templates/gone.yaml", "../missing.yaml");
    let commit = work.commit("charts and tools");
    work.push();
    let daemon = GitDaemon::start(&host);
    let url = daemon.url("openstack-helm.git");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path());
    let source = |subpath: &str| serde_json::json!({"type": "git", "location": url, "subpath": subpath, "reference": "main"});

    let sources = resolve_one(request("keystone", source("keystone")), "/nowhere", &cache)
        .unwrap_or_else(|e| panic!("the chart holds nothing unsafe: {e}"));
    let files = sources.by_chart.values().next().unwrap();
    assert_eq!(files.revision.as_deref(), Some(commit.as_str()));
    assert_eq!(
        files.files.keys().collect::<Vec<_>>(),
        vec!["Chart.yaml", "templates/cm.yaml", "values.yaml"]
    );
    assert_eq!(files.files["values.yaml"], b"message: shared\n");

    let err = resolve_one(request("escaping", source("escaping")), "/nowhere", &cache)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("escaping.yaml:1:1: ArmadaChart `default/escaping`: git source: escaping/templates/passwd.yaml: symlink points outside the repository (to `../../../../etc/passwd`)"),
        "{err}"
    );
    let err = resolve_one(request("dangling", source("dangling")), "/nowhere", &cache)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "dangling/templates/gone.yaml: symlink target `../missing.yaml` does not exist"
        ),
        "{err}"
    );
    // The whole repository as the chart holds the links outside: refused, as before.
    write_chart(&work, "", "root");
    work.commit("a chart at the root");
    work.push();
    let err = resolve_one(
        request(
            "root",
            serde_json::json!({"type": "git", "location": url, "reference": "main"}),
        ),
        "/nowhere",
        &cache,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("symlink"), "{err}");
    // A subpath that is not in the repository says so.
    let err = resolve_one(request("nova", source("nova")), "/nowhere", &cache)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("subpath `nova` does not exist in git://127.0.0.1:"),
        "{err}"
    );
}

/// A server on loopback that answers every request with a redirect to `target` + its path.
fn redirector(target: String) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 8192];
            let n = stream.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]);
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
            counter.fetch_add(1, Ordering::SeqCst);
            let answer = format!(
                "HTTP/1.1 302 Found\r\nLocation: {target}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (port, hits)
}

/// Issue 30.7: a git chart source on an allowed host that redirects to a host outside
/// `--allowed-chart-sources` is not followed there (libgit2 follows the first request's
/// redirects anywhere by default, and its listing of refs always did).
#[test]
fn git_chart_sources_do_not_follow_redirects_to_other_hosts() {
    let host = RepoHost::new();
    let bare = host.create("charts.git");
    let work = WorkTree::new(bare.to_str().unwrap());
    write_chart(&work, "web", "web");
    work.commit("web");
    work.push();
    let git = HttpGitServer::start(&host, HttpAuth::default());
    // The same server under another host name: outside the allow-list below.
    let (port, hits) = redirector(format!("http://localhost:{}", git.port));
    let allowed = format!("http://127.0.0.1:{port}/");
    let policy = ChartSourcePolicy::Remote(UrlAllowList::parse(&allowed).unwrap());
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path()).with_policy(policy);
    let req = request(
        "web",
        serde_json::json!({"type": "git", "location": format!("http://127.0.0.1:{port}/charts.git"), "subpath": "web", "reference": "main"}),
    );
    let err = resolve_one(req, "https://git.example.com/config.git", &cache)
        .expect_err("a redirect to a host outside the allow-list is not followed")
        .to_string();
    assert!(hits.load(Ordering::SeqCst) >= 1, "the redirector was asked");
    assert!(
        git.requests().is_empty(),
        "the other host was reached: {:?}",
        git.requests()
    );
    assert!(
        err.contains("answered with a redirect that is not followed")
            && err.contains(&format!("302 to http://localhost:{}/charts.git/", git.port)),
        "{err}"
    );
    println!("refused: {err}");

    // Issue 48 item 7: another port of the same host (libgit2 compares host names only).
    let (port, _) = redirector(format!("http://127.0.0.1:{}", git.port));
    let allowed = format!("http://127.0.0.1:{port}/");
    let policy = ChartSourcePolicy::Remote(UrlAllowList::parse(&allowed).unwrap());
    let cache = ChartCache::new(cache_dir.path().join("port")).with_policy(policy);
    let req = request(
        "web",
        serde_json::json!({"type": "git", "location": format!("http://127.0.0.1:{port}/charts.git"), "subpath": "web", "reference": "main"}),
    );
    let err = resolve_one(req, "https://git.example.com/config.git", &cache)
        .expect_err("a redirect to another port of the same host is not followed")
        .to_string();
    assert!(
        git.requests().is_empty(),
        "the other port was reached: {:?}",
        git.requests()
    );
    assert!(
        err.contains(&format!("302 to http://127.0.0.1:{}/charts.git/", git.port)),
        "{err}"
    );

    // The same repository without the redirect: fetched (the server itself is fine).
    let direct = ChartCache::new(cache_dir.path().join("direct"));
    let req = request(
        "web",
        serde_json::json!({"type": "git", "location": git.url("charts.git"), "subpath": "web", "reference": "main"}),
    );
    resolve_one(req, "/nowhere", &direct).unwrap_or_else(|e| panic!("{e}"));
}

/// Issue 28.8: a private git chart source beside a private config repository is fetched with the
/// config repository's credentials (through the CLI, which reads them), and no password goes to
/// another host.
#[test]
fn private_git_chart_sources_use_the_config_repository_credentials() {
    let host = RepoHost::new();
    let charts = host.create("charts.git");
    let chart_work = WorkTree::new(charts.to_str().unwrap());
    write_chart(&chart_work, "web", "web");
    chart_work.commit("web");
    chart_work.push();
    let config = host.create("config.git");
    let config_work = WorkTree::new(config.to_str().unwrap());
    config_work.write(
        "web.yaml",
        armada_chart(
            "web",
            "{type: git, location: ../charts.git, subpath: web, reference: main}",
        ),
    );
    config_work.commit("a private chart beside the config");
    config_work.push();
    let password = "chart-s3cret-pass";
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: Some(("weft".into(), password.into())),
            bearer: None,
        },
    );
    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("username"), "weft\n").unwrap();
    std::fs::write(creds.path().join("password"), format!("{password}\n")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let repo = server.url("config.git");
    let env = [("WEFT_GIT_CREDENTIALS_DIR", creds.path())];
    let (code, out, err) = weft(
        &["render", "--repo", &repo, "--ref", "main"],
        &env,
        cache.path(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("kind: ConfigMap") && out.contains("message: from-web"),
        "{out}"
    );

    // The same repository under another host name: no password is sent there.
    config_work.write(
        "web.yaml",
        armada_chart(
            "web",
            &format!(
                "{{type: git, location: 'http://localhost:{}/charts.git', subpath: web, reference: main}}",
                server.port
            ),
        ),
    );
    config_work.commit("the chart on another host");
    config_work.push();
    let (code, _, err) = weft(
        &["render", "--repo", &repo, "--ref", "main"],
        &env,
        cache.path(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "authentication to http://localhost:{}/charts.git failed",
            server.port
        )),
        "{err}"
    );
    assert!(!err.contains(password), "{err}");
}

/// What these tests do with the private CA (`support::chart_servers::PrivateCa`): hand it to
/// libgit2 as a directory, and put TLS with its certificate in front of a plain server.
trait CaServing {
    fn ca_dir(&self) -> PathBuf;
    fn serve_tls(&self, backend: u16) -> TlsFront;
}

impl CaServing for PrivateCa {
    /// A directory holding only the CA (for `SSL_CERT_DIR`).
    fn ca_dir(&self) -> PathBuf {
        let dir = self.dir.path().join("certs");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(self.ca_file(), dir.join("weft-test-ca.pem")).unwrap();
        dir
    }

    /// TLS with the CA-signed certificate in front of the plain HTTP server on `backend`.
    fn serve_tls(&self, backend: u16) -> TlsFront {
        let port = free_port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/git-servers/tls-proxy.py");
        let child = Command::new("python3")
            .arg(script)
            .arg(port.to_string())
            .arg(backend.to_string())
            .arg(self.dir.path().join("server.pem"))
            .arg(self.dir.path().join("server.key"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 tls-proxy.py");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "tls-proxy.py did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        TlsFront { child, port }
    }
}

struct TlsFront {
    child: std::process::Child,
    port: u16,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-file HTTP server on loopback.
fn serve(body: Vec<u8>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let head = format!("HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    port
}

/// `helm package`'s layout: the chart in a top-level directory named after it.
fn packaged(name: &str) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (path, content) in chart(name, name) {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, path, content.as_bytes())
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// Issue 28.8: https chart sources behind a private CA, as Armada reaches them with its `certs`
/// setting: a tar archive (rustls) and a git repository (libgit2), trusted through `--ca-file`,
/// and the archive through `SSL_CERT_FILE` or `SSL_CERT_DIR` too.
#[test]
fn https_chart_sources_behind_a_private_ca() {
    let ca = PrivateCa::new();
    let tar_front = ca.serve_tls(serve(packaged("web")));
    let host = RepoHost::new();
    let bare = host.create("charts.git");
    let work = WorkTree::new(bare.to_str().unwrap());
    write_chart(&work, "api", "api");
    work.commit("api");
    work.push();
    let git = HttpGitServer::start(&host, HttpAuth::default());
    let git_front = ca.serve_tls(git.port);

    let sites = tempfile::tempdir().unwrap();
    let tar_site = sites.path().join("tar");
    std::fs::create_dir_all(&tar_site).unwrap();
    std::fs::write(
        tar_site.join("web.yaml"),
        armada_chart(
            "web",
            &format!(
                "{{type: tar, location: 'https://127.0.0.1:{}/web-1.0.0.tgz'}}",
                tar_front.port
            ),
        ),
    )
    .unwrap();
    let git_site = sites.path().join("git");
    std::fs::create_dir_all(&git_site).unwrap();
    std::fs::write(
        git_site.join("api.yaml"),
        armada_chart(
            "api",
            &format!(
                "{{type: git, location: 'https://127.0.0.1:{}/charts.git', subpath: api, reference: main}}",
                git_front.port
            ),
        ),
    )
    .unwrap();
    let tar_site = tar_site.to_str().unwrap();
    let git_site = git_site.to_str().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let ca_file = ca.ca_file();
    let ca_file = ca_file.to_str().unwrap();

    for (what, args, env) in [
        (
            "--ca-file",
            vec!["render", "--ca-file", ca_file, tar_site],
            vec![],
        ),
        (
            "SSL_CERT_FILE",
            vec!["render", tar_site],
            vec![("SSL_CERT_FILE", ca.ca_file())],
        ),
        (
            "SSL_CERT_DIR",
            vec!["render", tar_site],
            vec![("SSL_CERT_DIR", ca.ca_dir())],
        ),
        (
            "--ca-file (git)",
            vec!["render", "--ca-file", ca_file, git_site],
            vec![],
        ),
    ] {
        let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, v.as_path())).collect();
        let (code, out, err) = weft(&args, &env, cache.path());
        assert_eq!(code, 0, "{what}: {err}");
        assert!(out.contains("kind: ConfigMap"), "{what}: {out}");
    }
    // Not trusted: refused, saying how to trust it.
    let (code, _, err) = weft(&["render", tar_site], &[], cache.path());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("certificate")
            && err
                .contains("a private CA is trusted with --ca-file, SSL_CERT_FILE or SSL_CERT_DIR"),
        "{err}"
    );
    let (code, _, err) = weft(&["render", git_site], &[], cache.path());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("certificate"), "{err}");

    // `weft validate` takes the flag too; a file that holds no certificate is named.
    let (code, out, err) = weft(
        &["validate", "--ca-file", ca_file, tar_site],
        &[],
        cache.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    let not_pem = sites.path().join("not.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let (code, _, err) = weft(
        &["validate", "--ca-file", not_pem.to_str().unwrap(), tar_site],
        &[],
        cache.path(),
    );
    assert_ne!(code, 0);
    assert!(err.contains("holds no PEM certificate"), "{err}");
}

/// Issue 28.8 in the daemon: `weft run --git-secret` fetches a private config repository and the
/// private git chart source beside it with the same credentials, and the chart's objects reach
/// the cluster (before, the chart source was fetched with none and the pass failed).
#[tokio::test]
async fn the_daemon_fetches_private_git_charts_with_its_git_secret() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::PostParams;
    use support::cluster::TestNamespace;
    use support::daemon::{Daemon, DaemonOptions};

    let ns = TestNamespace::new("chart-creds").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let host = RepoHost::new();
    let charts = host.create("charts.git");
    let chart_work = WorkTree::new(charts.to_str().unwrap());
    write_chart(&chart_work, "web", "web");
    chart_work.commit("web");
    chart_work.push();
    let config = host.create("config.git");
    let config_work = WorkTree::new(config.to_str().unwrap());
    config_work.write(
        "armada.yaml",
        format!(
            "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  release: web\n  namespace: {ns}\n  source: {{type: git, location: ../charts.git, subpath: web, reference: main}}\n  values: {{message: private}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: apps, namespace: {ns}}}\nspec:\n  chart_group: [web]\n",
            ns = ns.name()
        ),
    );
    config_work.commit("a private chart");
    config_work.push();
    let password = "daemon-s3cret";
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: Some(("weft".into(), password.into())),
            bearer: None,
        },
    );
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "git-creds"},
        "stringData": {"username": "weft", "password": password}
    }))
    .unwrap();
    kube::Api::<Secret>::namespaced(client.clone(), ns.name())
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let url = server.url("config.git");
    let d = Daemon::start(DaemonOptions {
        extra: vec![
            "--git-secret".into(),
            "git-creds".into(),
            "--allowed-chart-sources".into(),
            format!("http://127.0.0.1:{}/", server.port),
        ],
        ..DaemonOptions::new(&url, ns.name())
    });
    let configmaps = kube::Api::<ConfigMap>::namespaced(client.clone(), ns.name());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        if let Ok(cm) = configmaps.get("web").await {
            let data = cm.data.unwrap_or_default();
            assert_eq!(data.get("message").map(String::as_str), Some("private"));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the chart's ConfigMap did not appear within 90 s:\n{}",
            d.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    assert!(!d.logs().contains(password), "the password reached the log");
    drop(d);
    ns.delete().await;
}

/// The raw tar reader keeps what `helm package` writes: a file name longer than ustar's 100
/// bytes travels in a PAX `path` header (Go's archive/tar), and names the file after it.
#[test]
fn a_chart_packaged_by_helm_with_a_long_file_name_unpacks() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("web");
    for (path, content) in chart("", "web") {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    let long = format!("templates/{}.yaml", "f".repeat(130));
    std::fs::write(
        dir.join(&long),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: long}\n",
    )
    .unwrap();
    let out = Command::new(support::helm::helm())
        .arg("package")
        .arg(&dir)
        .arg("-d")
        .arg(work.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(work.path().join("web-1.0.0.tgz")).unwrap();
    let files = chart::unpack(
        "https://charts.example/web-1.0.0.tgz",
        &bytes,
        Default::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        files.contains_key(&format!("web/{long}")),
        "{:?}",
        files.keys()
    );
    assert!(files.contains_key("web/Chart.yaml"), "{:?}", files.keys());
}
