//! A real Kubernetes control plane for integration tests.
//!
//! One control plane per test binary: the first call to [`cluster`] (or [`client`],
//! [`kubeconfig_path`], [`TestNamespace::new`]) either
//! - uses the cluster named by `WEFT_TEST_KUBECONFIG` (a kubeconfig path; `WEFT_TEST_CONTEXT`
//!   optionally picks a context), so the suite can run against kind or a real cluster, or
//! - runs `tests/control-plane/up` (etcd, kube-apiserver, controller-manager, scheduler, kwok,
//!   built from Go modules) in `target/tmp/weft-control-plane-PID`, and stops it when the test
//!   process exits (an `atexit` hook runs `down`; a watchdog started by `up --watch-pid` also runs
//!   `down` if the process dies without exiting normally).
//!
//! If the control plane cannot be started, every test that asks for it panics with the reason:
//! cluster tests never skip silently.
//!
//! Each call to [`client`] builds a new `kube::Client`: a client is bound to the tokio runtime it
//! was made in, and every `#[tokio::test]` has its own runtime.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Environment variable: use this kubeconfig instead of starting a control plane.
pub const KUBECONFIG_ENV: &str = "WEFT_TEST_KUBECONFIG";
/// Environment variable: the context of `WEFT_TEST_KUBECONFIG` to use (default: its current one).
pub const CONTEXT_ENV: &str = "WEFT_TEST_CONTEXT";
/// Environment variable: when set to `1`, keep the started control plane's directory (logs,
/// etcd data) after the tests instead of deleting it.
pub const KEEP_ENV: &str = "WEFT_TEST_KEEP_CLUSTER";
/// Label put on every namespace made by [`TestNamespace`], to find leftovers.
pub const TEST_NAMESPACE_LABEL: &str = "weft.test/namespace";

/// The control plane this test binary uses.
#[derive(Debug)]
pub struct Cluster {
    kubeconfig: PathBuf,
    context: Option<String>,
    /// The `up` directory when this process started the control plane (and so stops it).
    started_dir: Option<PathBuf>,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The shared control plane, started on first use. Panics with the reason if it cannot be started.
pub fn cluster() -> &'static Cluster {
    match CLUSTER.get_or_init(start) {
        Ok(cluster) => cluster,
        Err(reason) => panic!("the test control plane is not available: {reason}"),
    }
}

/// Path of the kubeconfig of the shared control plane (for running the `weft` binary against it).
pub fn kubeconfig_path() -> &'static Path {
    cluster().kubeconfig_path()
}

/// A new client for the shared control plane, bound to the current tokio runtime.
pub async fn client() -> Client {
    cluster().client().await
}

impl Cluster {
    /// Path of this cluster's kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The kubeconfig context to use (`None`: the file's current context).
    pub fn context(&self) -> Option<&str> {
        self.context.as_deref()
    }

    /// Whether this process started the control plane (as opposed to `WEFT_TEST_KUBECONFIG`).
    pub fn is_local(&self) -> bool {
        self.started_dir.is_some()
    }

    /// The directory of a control plane started by this process: `logs/`, `pids/`, `pki/`, `env`.
    pub fn dir(&self) -> Option<&Path> {
        self.started_dir.as_deref()
    }

    /// Arguments that point `weft` (or kubectl) at this cluster: `--kubeconfig P [--context C]`.
    pub fn kube_args(&self) -> Vec<String> {
        let mut args = vec![
            "--kubeconfig".to_string(),
            self.kubeconfig.display().to_string(),
        ];
        if let Some(context) = &self.context {
            args.push("--context".to_string());
            args.push(context.clone());
        }
        args
    }

    /// A new client for this cluster, bound to the current tokio runtime. Panics on failure.
    pub async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("reading kubeconfig {}: {e}", self.kubeconfig.display()));
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let config = Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .unwrap_or_else(|e| panic!("loading kubeconfig {}: {e}", self.kubeconfig.display()));
        Client::try_from(config).unwrap_or_else(|e| panic!("building a kube client: {e}"))
    }
}

fn control_plane_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/control-plane")
        .join(name)
}

const DIR_PREFIX: &str = "weft-control-plane-";

/// This process's control plane directory: `target/tmp/weft-control-plane-PID`.
fn own_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{DIR_PREFIX}{}", std::process::id()))
}

/// Removes control plane directories whose test process is gone (it was killed; its watchdog
/// stopped the processes but leaves the files), and this pid's own leftover from an earlier
/// process. `down` first, in case a watchdog did not run: it only signals processes whose command
/// line names that directory.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(env!("CARGO_TARGET_TMPDIR")) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let alive = Path::new("/proc").join(pid).exists();
        if alive && pid != std::process::id().to_string() {
            continue;
        }
        let _ = Command::new(control_plane_script("down"))
            .arg(entry.path())
            .stdin(Stdio::null())
            .output();
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

fn start() -> Result<Cluster, String> {
    let context = std::env::var(CONTEXT_ENV).ok().filter(|c| !c.is_empty());
    if let Some(path) = std::env::var_os(KUBECONFIG_ENV).filter(|p| !p.is_empty()) {
        let kubeconfig = PathBuf::from(path);
        if !kubeconfig.is_file() {
            return Err(format!(
                "{KUBECONFIG_ENV}={} is not a file",
                kubeconfig.display()
            ));
        }
        return Ok(Cluster {
            kubeconfig,
            context,
            started_dir: None,
        });
    }

    remove_stale_dirs();
    let dir = own_dir();
    let up = control_plane_script("up");
    let started = Instant::now();
    let output = Command::new(&up)
        .arg(&dir)
        .arg("--watch-pid")
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run {}: {e}", up.display()))?;
    // Register the stop hook even if `up` failed half-way (it stops what it started, but be sure).
    register_stop_at_exit();
    if !output.status.success() {
        return Err(format!(
            "{} {} failed ({}) after {:.0?}:\n{}\nSet {KUBECONFIG_ENV} to run the tests against an existing cluster.",
            up.display(),
            dir.display(),
            output.status,
            started.elapsed(),
            String::from_utf8_lossy(&output.stderr).trim_end()
        ));
    }
    let kubeconfig = dir.join("kubeconfig");
    if !kubeconfig.is_file() {
        return Err(format!(
            "{} succeeded but wrote no {}",
            up.display(),
            kubeconfig.display()
        ));
    }
    eprintln!(
        "weft tests: control plane up in {:.1?} ({})",
        started.elapsed(),
        kubeconfig.display()
    );
    Ok(Cluster {
        kubeconfig,
        context: None,
        started_dir: Some(dir),
    })
}

// Statics are never dropped in Rust, so a guard value cannot stop the control plane; libtest
// ends the process with `exit()`, which runs C `atexit` handlers.
unsafe extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::os::raw::c_int;
}

fn register_stop_at_exit() {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        // SAFETY: `stop_at_exit` is a plain `extern "C" fn()` that never unwinds (see below).
        let rc = unsafe { atexit(stop_at_exit) };
        if rc != 0 {
            eprintln!("weft tests: atexit failed; the watchdog will stop the control plane");
        }
    });
}

extern "C" fn stop_at_exit() {
    // Must not unwind across the C boundary: catch everything.
    let _ = std::panic::catch_unwind(|| {
        let dir = match CLUSTER.get() {
            Some(Ok(Cluster {
                started_dir: Some(dir),
                ..
            })) => dir.clone(),
            // `up` failed: its directory holds the logs the panic message points at; `up` already
            // stopped what it started, `down` makes sure.
            Some(Err(_)) | None => {
                let dir = own_dir();
                if dir.exists() {
                    let _ = Command::new(control_plane_script("down"))
                        .arg(&dir)
                        .stdin(Stdio::null())
                        .output();
                }
                return;
            }
            Some(Ok(_)) => return,
        };
        let down = Command::new(control_plane_script("down"))
            .arg(&dir)
            .stdin(Stdio::null())
            .output();
        match down {
            Ok(out) if out.status.success() => {
                if std::env::var(KEEP_ENV).as_deref() == Ok("1") {
                    eprintln!("weft tests: control plane stopped; kept {}", dir.display());
                } else {
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
            Ok(out) => eprintln!(
                "weft tests: stopping the control plane in {} failed:\n{}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("weft tests: could not run down for {}: {e}", dir.display()),
        }
    });
}

/// A namespace of its own for one test: created (and its `default` ServiceAccount awaited, so
/// pods can be created at once) by [`TestNamespace::new`], deleted by [`TestNamespace::delete`]
/// or, if the test ends otherwise (a panic), when the value is dropped.
pub struct TestNamespace {
    name: String,
    client: Client,
    deleted: bool,
}

impl TestNamespace {
    /// Creates `weft-test-<prefix>-<pid>-<n>` (made DNS-safe) on the shared cluster.
    pub async fn new(prefix: &str) -> TestNamespace {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut clean: String = prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        clean.truncate(30);
        let name = format!(
            "weft-test-{}-{:x}-{n}",
            clean.trim_matches('-'),
            std::process::id()
        )
        .replace("--", "-");
        let client = client().await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(TEST_NAMESPACE_LABEL.to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating test namespace {name}: {e}"));

        // The ServiceAccount admission plugin rejects pods until the controller manager has made
        // the namespace's `default` ServiceAccount.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match accounts.get_opt("default").await {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Ok(None) => panic!("namespace {name}: no default ServiceAccount after 60s"),
                Err(e) => panic!("namespace {name}: reading the default ServiceAccount: {e}"),
            }
        }
        TestNamespace {
            name,
            client,
            deleted: false,
        }
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A client for the shared cluster (the one that made this namespace).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// `Api<K>` for a namespaced kind in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Deletes the namespace (does not wait for its finalization). Panics if the API server
    /// refuses.
    pub async fn delete(mut self) {
        self.deleted = true;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        match namespaces
            .delete(&self.name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => panic!("deleting test namespace {}: {e}", self.name),
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        // Drop cannot await, and the test's runtime may be the current thread: delete from a
        // thread with its own runtime and client.
        let name = self.name.clone();
        let deleter = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async move {
                let client = match CLUSTER.get() {
                    Some(Ok(cluster)) => cluster.client().await,
                    _ => return None,
                };
                let namespaces: Api<Namespace> = Api::all(client);
                namespaces
                    .delete(&name, &DeleteParams::background())
                    .await
                    .ok()?;
                Some(())
            })
        });
        let _ = deleter.join();
    }
}

/// Install Weft's CRDs (as `kubectl apply -f deploy/` would) and wait until each is Established.
/// Idempotent: server-side apply with a fixed manager, so every test may call it.
pub async fn install_crds(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    use kube::runtime::wait::{await_condition, conditions};
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in weft::api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply("weft-test").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("applying CRD {name}: {e}"));
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not Established within 60s"))
        .unwrap_or_else(|e| panic!("watching CRD {name}: {e}"));
    }
}

/// The Secret `ns`/`name` holding `token` under the key `token`: what a WeaveCloud's
/// `tokenSecretRef` (and the launcher's install) points at.
pub async fn create_token_secret(client: &Client, ns: &str, name: &str, token: &str) {
    let mut secret = k8s_openapi::api::core::v1::Secret::default();
    secret.metadata.name = Some(name.into());
    secret.string_data = Some([("token".to_string(), token.to_string())].into());
    Api::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("creating the token Secret {ns}/{name}: {e}"));
}

/// A client for the test cluster whose API calls are counted (so "zero writes" is measured).
pub async fn counting_client() -> (Client, weft::apply::calls::CallCounts) {
    let c = cluster();
    let config = weft::apply::calls::config(Some(c.kubeconfig_path()), c.context())
        .await
        .expect("kubeconfig");
    weft::apply::calls::counting_client(config).expect("client")
}

/// The options of a test's pass: its own namespace for the sync root, the inventory and the
/// objects that name none; a 90 s readiness bound.
pub fn pass_settings(ns: &str) -> weft::pass::PassSettings {
    weft::pass::PassSettings {
        root_name: ns.to_string(),
        weft_namespace: ns.to_string(),
        default_namespace: ns.to_string(),
        timeout: Duration::from_secs(90),
        poll_interval: Duration::from_millis(300),
        ..weft::pass::PassSettings::default()
    }
}
