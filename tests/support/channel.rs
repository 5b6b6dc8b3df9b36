//! Agent channel fixtures: bundles built from `agents/` at test time with a changed version (and
//! optionally a change that keeps their pods from ever becoming ready), packed as the `.tar.gz`
//! a channel serves, and a real HTTP server on 127.0.0.1 that serves a channel of them.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use axum::Router;
use sha2::{Digest, Sha256};

/// The flux image of the built-in bundle; fixtures put the bundle version into its tag, so a
/// test sees which bundle the agents run.
pub const BUILTIN_FLUX_IMAGE: &str = "docker.io/fluxcd/flux:1.25.4";

/// The flux image a fixture bundle of `version` renders.
pub fn flux_image(version: &str) -> String {
    format!("{BUILTIN_FLUX_IMAGE}-bundle.{version}")
}

/// Every file of the `agents/` directory, path relative to it.
pub fn agents_files() -> BTreeMap<String, Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents");
    let mut out = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

fn replace_in(files: &mut BTreeMap<String, Vec<u8>>, path: &str, from: &str, to: &str) {
    let text = String::from_utf8(files[path].clone()).unwrap();
    assert!(text.contains(from), "{path} does not contain {from:?}");
    files.insert(path.to_string(), text.replacen(from, to, 1).into_bytes());
}

/// The built-in bundle as version `version`, its flux image tagged with the version.
pub fn bundle_files(version: &str) -> BTreeMap<String, Vec<u8>> {
    let mut files = agents_files();
    let index = String::from_utf8(files["bundle.yaml"].clone()).unwrap();
    let line = index
        .lines()
        .find(|l| l.starts_with("version:"))
        .expect("agents/bundle.yaml has a `version:` line")
        .to_string();
    replace_in(
        &mut files,
        "bundle.yaml",
        &line,
        &format!("version: {version}"),
    );
    replace_in(
        &mut files,
        "flux/flux.yaml",
        &format!("image: {BUILTIN_FLUX_IMAGE}\n"),
        &format!("image: {}\n", flux_image(version)),
    );
    files
}

/// Label a node would need for the broken bundle's flux pod; no node has it.
pub const UNSCHEDULABLE_SELECTOR: &str = "weft.test/no-such-node";

/// A bundle whose flux pod never becomes ready: its nodeSelector matches no node.
pub fn broken_bundle_files(version: &str) -> BTreeMap<String, Vec<u8>> {
    let mut files = bundle_files(version);
    replace_in(
        &mut files,
        "flux/flux.yaml",
        "      serviceAccountName: weave-flux\n",
        &format!(
            "      serviceAccountName: weave-flux\n      nodeSelector:\n        {UNSCHEDULABLE_SELECTOR}: \"true\"\n"
        ),
    );
    files
}

/// Files inside one top-level directory, as `tar czf agents-1.1.0.tar.gz agents/` makes them.
pub fn in_directory(dir: &str, files: BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    files
        .into_iter()
        .map(|(p, c)| (format!("{dir}/{p}"), c))
        .collect()
}

/// A `.tar.gz` of the files.
pub fn pack(files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    weft::source::channel::pack_archive(files).expect("packing a bundle")
}

/// Hex sha256.
pub fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One bundle to list in a channel.
pub struct Published {
    pub version: String,
    /// Path on the server (relative URL in the channel).
    pub path: String,
    pub archive: Vec<u8>,
    /// What the channel says the digest is (normally the archive's).
    pub sha256: String,
}

impl Published {
    /// A bundle listed with its true digest, at `bundles/agents-VERSION.tar.gz`.
    pub fn new(version: &str, files: &BTreeMap<String, Vec<u8>>) -> Published {
        let archive = pack(&in_directory("agents", files.clone()));
        Published {
            version: version.to_string(),
            path: format!("bundles/agents-{version}.tar.gz"),
            sha256: sha256(&archive),
            archive,
        }
    }

    /// The same bundle listed with a digest that is not the archive's.
    pub fn with_wrong_digest(mut self) -> Published {
        self.sha256 = sha256(b"some other archive");
        self
    }
}

#[derive(Clone, Default)]
struct Served {
    files: Arc<RwLock<HashMap<String, Vec<u8>>>>,
    requests: Arc<AtomicUsize>,
}

/// A channel served over HTTP on 127.0.0.1 (a real axum server on its own thread).
pub struct ChannelServer {
    addr: SocketAddr,
    served: Served,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

async fn serve_file(State(s): State<Served>, uri: Uri) -> impl IntoResponse {
    s.requests.fetch_add(1, Ordering::SeqCst);
    let path = uri.path().trim_start_matches('/').to_string();
    match s.files.read().unwrap().get(&path) {
        Some(bytes) => (StatusCode::OK, bytes.clone()),
        None => (StatusCode::NOT_FOUND, b"not found".to_vec()),
    }
}

impl ChannelServer {
    /// Start serving (nothing published yet).
    pub fn start() -> ChannelServer {
        let served = Served::default();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .fallback(serve_file)
            .with_state(served.clone());
        // Its own runtime: each #[tokio::test] has its own, and the server must outlive none.
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = rx.await;
                    })
                    .await
                    .unwrap();
            });
        });
        ChannelServer {
            addr,
            served,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{}", self.addr, path.trim_start_matches('/'))
    }

    /// The channel's URL (what `wcPollUrl` says).
    pub fn channel_url(&self) -> String {
        self.url("channel.yaml")
    }

    /// Serve `bytes` at `path`.
    pub fn put(&self, path: &str, bytes: Vec<u8>) {
        self.served
            .files
            .write()
            .unwrap()
            .insert(path.trim_start_matches('/').to_string(), bytes);
    }

    /// Serve these bundles and a `channel.yaml` listing them (relative URLs).
    pub fn publish(&self, bundles: &[Published]) {
        let mut channel = String::from("channel: test\nbundles:\n");
        for b in bundles {
            self.put(&b.path, b.archive.clone());
            channel.push_str(&format!(
                "  - version: {}\n    url: {}\n    sha256: {}\n",
                b.version, b.path, b.sha256
            ));
        }
        self.put("channel.yaml", channel.into_bytes());
    }

    /// Requests served so far.
    pub fn requests(&self) -> usize {
        self.served.requests.load(Ordering::SeqCst)
    }
}

impl Drop for ChannelServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
