//! A cluster set up the way the Weave Cloud launcher set it up, shared by the takeover tests:
//! the launcher's fixtures (tests/fixtures/launcher, FACTS.md) installed as its `kubectl apply`
//! did, the seed's WeaveCloud, and a one-shot `weft sync` against the test cluster.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::events::v1::Event;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube::{Api, Client};
use serde_json::Value;

pub const KUBE_SYSTEM: &str = "kube-system";
/// The launcher's cluster-scoped objects (ClusterRole and ClusterRoleBinding of each name).
pub const LAUNCHER_CLUSTER_NAMES: &[&str] =
    &["weave-agent", "weave-flux", "weave-scope", "weave-cortex"];
/// The git settings and memcached flags of both fixtures.
pub const LAUNCHER_GIT_ARGS: &[&str] = &[
    "--git-url=git@github.com:example/config.git",
    "--git-path=k8s",
    "--git-branch=prod",
    "--git-label=flux-sync",
    "--git-poll-interval=2m",
];
pub const LAUNCHER_MEMCACHED_ARGS: &[&str] = &["-m 1024", "-I 8m"];

pub fn fixture(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The objects of a launcher fixture, moved from namespace `weave` into `ns` (the Namespace
/// itself is the test's).
pub fn launcher_objects(file: &str, ns: &str) -> Vec<Value> {
    let text = fixture(&format!("tests/fixtures/launcher/{file}"))
        .replace("namespace: weave\n", &format!("namespace: {ns}\n"))
        .replace(".weave.svc.", &format!(".{ns}.svc."));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("tests/fixtures/launcher/{file}: {e}"));
    docs.into_iter()
        .filter(|d| !d.is_null() && d["kind"] != "Namespace")
        .collect()
}

/// The seed's WeaveCloud (kebab-case keys, the launcher's token Secret by default) in `ns`.
pub fn seed_weavecloud(ns: &str) -> String {
    fixture("tests/fixtures/weavecloud-seed/weave-cloud.yaml")
        .replace("  namespace: weave\n", &format!("  namespace: {ns}\n"))
}

pub fn api_resource(kind: &str) -> ApiResource {
    let (group, version, plural) = match kind {
        "ServiceAccount" => ("", "v1", "serviceaccounts"),
        "Secret" => ("", "v1", "secrets"),
        "Service" => ("", "v1", "services"),
        "ConfigMap" => ("", "v1", "configmaps"),
        "Deployment" => ("apps", "v1", "deployments"),
        "DaemonSet" => ("apps", "v1", "daemonsets"),
        "ClusterRole" => ("rbac.authorization.k8s.io", "v1", "clusterroles"),
        "ClusterRoleBinding" => ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
        other => panic!("no API resource for {other} in this test"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub fn dynamic_api(client: &Client, kind: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let ar = api_resource(kind);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// `(kind, namespace, name)` of a fixture object.
pub fn key(o: &Value) -> (String, Option<String>, String) {
    (
        o["kind"].as_str().unwrap_or_default().to_string(),
        o["metadata"]["namespace"].as_str().map(str::to_string),
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Create the objects as `kubectl apply` (client side, as the launcher ran it) would.
pub async fn install(client: &Client, objects: &[Value]) {
    let params = PostParams {
        field_manager: Some("kubectl-client-side-apply".into()),
        ..Default::default()
    };
    for o in objects {
        let (kind, ns, name) = key(o);
        let object: DynamicObject = serde_json::from_value(o.clone()).expect("fixture object");
        dynamic_api(client, &kind, ns.as_deref())
            .create(&params, &object)
            .await
            .unwrap_or_else(|e| panic!("creating launcher {kind} {ns:?}/{name}: {e}"));
    }
}

/// Remove what a launcher fixture put outside the test's namespace (cluster-scoped objects,
/// kube-system objects), so that the next test starts from a clean cluster.
pub async fn remove_outside(client: &Client, objects: &[Value], ns: &str) {
    for o in objects {
        let (kind, object_ns, name) = key(o);
        if object_ns.as_deref() == Some(ns) {
            continue;
        }
        let _ = dynamic_api(client, &kind, object_ns.as_deref())
            .delete(&name, &DeleteParams::background())
            .await;
    }
    for name in LAUNCHER_CLUSTER_NAMES {
        for kind in ["ClusterRoleBinding", "ClusterRole"] {
            let _ = dynamic_api(client, kind, None)
                .delete(name, &DeleteParams::background())
                .await;
        }
    }
}

pub fn container_args(pod: &PodTemplateSpec, container: &str) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == container))
        .and_then(|c| c.args.clone())
        .unwrap_or_else(|| panic!("no container {container} with args"))
}

pub async fn deployment(client: &Client, ns: &str, name: &str) -> Deployment {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("Deployment {ns}/{name}: {e}"))
}

pub fn is_weft_managed(meta: &kube::api::ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .is_some_and(|v| v == "weft")
}

pub async fn event_notes(client: &Client, ns: &str, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

pub fn deploy_key_of(objects: &[Value]) -> BTreeMap<String, Vec<u8>> {
    use base64::Engine;
    let secret = objects
        .iter()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == "flux-git-deploy")
        .expect("the fixture's flux-git-deploy");
    secret["data"]
        .as_object()
        .expect("data")
        .iter()
        .map(|(k, v)| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().expect("base64 text"))
                .expect("base64");
            (k.clone(), bytes)
        })
        .collect()
}

/// The launcher's objects of `weave-ns.yaml` installed in `n` (as the launcher applied them), and
/// an empty config repository with its `weave/` folder, for a one-shot `weft sync`.
pub async fn launcher_and_repo(client: &Client, n: &str) -> (Vec<Value>, tempfile::TempDir) {
    launcher_and_repo_with(client, n, |_| {}).await
}

/// [`launcher_and_repo`] with the launcher's objects edited first (a user's customisation).
pub async fn launcher_and_repo_with(
    client: &Client,
    n: &str,
    edit: impl FnOnce(&mut Vec<Value>),
) -> (Vec<Value>, tempfile::TempDir) {
    super::cluster::install_crds(client).await;
    let mut launcher = launcher_objects("weave-ns.yaml", n);
    edit(&mut launcher);
    remove_outside(client, &launcher, n).await;
    install(client, &launcher).await;
    let repo = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(repo.path().join("weave")).expect("mkdir");
    (launcher, repo)
}

pub fn weft_sync(repo: &Path, ns: &str) -> (i32, String, String) {
    weft(&["sync"], repo, ns)
}

/// `weft <command…>` over `repo` against the test cluster: exit code, stdout, stderr.
pub fn weft(command: &[&str], repo: &Path, ns: &str) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(command)
        .arg("--repo")
        .arg(repo)
        .args(super::cluster::cluster().kube_args())
        .args(["--weft-namespace", ns, "--root-name", ns])
        // `weft diff` waits for nothing and has no --timeout.
        .args(match command.first() {
            Some(&"diff") => &[][..],
            _ => &["--timeout", "120s"][..],
        })
        .env_remove("KUBECONFIG")
        .env("WEFT_LOG", "warn")
        .output()
        .expect("run weft");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The seed's placeholder `flux.config` block: a migrating user leaves flux's git settings to
/// the running agent, so tests drop it (`seed_without_flux_config`).
pub const SEED_FLUX_CONFIG: &str =
    "    config:\n      git-label: label\n      git-url: url\n      git-path: path\n      git-branch: branch\n";

/// The seed's WeaveCloud in `ns` without its `flux.config`.
pub fn seed_without_flux_config(ns: &str) -> String {
    let seed = seed_weavecloud(ns);
    let without = seed.replace(SEED_FLUX_CONFIG, "");
    assert_ne!(seed, without, "the seed's flux.config block was dropped");
    without
}

/// The part of a `weft sync` summary line after the revision: `N created, N configured, …`.
pub fn summary_counts(stdout: &str) -> String {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("synced revision") || l.starts_with("plan for revision"))
        .unwrap_or_else(|| panic!("no summary line in:\n{stdout}"));
    let counts = line.split_once(": ").map_or(line, |(_, c)| c);
    counts.split(" in ").next().unwrap_or(counts).to_string()
}

/// Tests that install the launcher's fixed cluster-scoped names take turns within a binary.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Weft's per-namespace cluster roles of namespace `n` (no controller ran: no finalizer
/// removes them), removed.
pub async fn remove_weft_cluster_roles(client: &Client, n: &str) {
    use kube::ResourceExt;
    for kind in ["ClusterRoleBinding", "ClusterRole"] {
        let api = dynamic_api(client, kind, None);
        for o in api
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=weft"))
            .await
            .expect("list")
            .items
        {
            if o.name_any().ends_with(&format!(":{n}")) {
                let _ = api.delete(&o.name_any(), &DeleteParams::background()).await;
            }
        }
    }
}

/// Rollback step 2 (docs/migrating-from-launcher.md), as `kubectl replace --force` of the
/// documented jq program does: Deployment `name` (Weft's flux or memcached) deleted and created
/// again in the launcher's shape (its four labels on the object, the selector and the pod
/// template; no Weft label or annotation), with the same pod spec, so its args stay.
pub async fn hand_back(client: &Client, ns: &str, name: &str, role: &str) {
    let api: Api<DynamicObject> = dynamic_api(client, "Deployment", Some(ns));
    let live = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let labels = serde_json::json!({"name": name, "app": "weave-flux",
        "weave-cloud-component": "flux", "weave-flux-component": role});
    let mut spec = live.data["spec"].clone();
    spec["selector"] = serde_json::json!({"matchLabels": labels});
    spec["template"]["metadata"]["labels"] = labels.clone();
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": spec,
    }))
    .expect("hand-back object");
    api.delete(name, &DeleteParams::foreground())
        .await
        .expect("replace --force: delete");
    for _ in 0..120 {
        if api.get_opt(name).await.expect("get").is_none() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let params = PostParams {
        field_manager: Some("kubectl-replace".into()),
        ..Default::default()
    };
    api.create(&params, &object)
        .await
        .expect("replace --force: create");
}

/// The args of `containers[0]` of the Deployment labelled `name=<name>` in `ns`, split on
/// spaces, as the launcher's agent reads them (agent/flux.go `getFluxConfig`: `kubectl get
/// deploy -l name=… -o jsonpath=…containers[0].args[*]`, then `strings.Split(…, " ")`).
async fn launcher_reads(client: &Client, ns: &str, name: &str) -> Vec<String> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default().labels(&format!("name={name}")))
        .await
        .expect("list");
    list.items
        .iter()
        .filter(|d| {
            d.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("name"))
                .map(String::as_str)
                == Some(name)
        })
        .filter_map(|d| {
            d.spec
                .as_ref()?
                .template
                .spec
                .as_ref()?
                .containers
                .first()?
                .args
                .clone()
        })
        .flatten()
        .collect::<Vec<_>>()
        .join(" ")
        .split(' ')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// One pass of the launcher's agent over `objects` (the fixture's agents in `ns`): read flux's
/// git settings and memcached's `-m`/`-I` from the running Deployments, put them into the
/// manifests (as the generator did from the query parameters), and apply every object as
/// `kubectl apply` does (created if absent, else patched), going on after an error as the
/// agent does. Returns the errors, `Kind/name: error`.
pub async fn launcher_pass(client: &Client, ns: &str, objects: &[Value]) -> Vec<String> {
    const GIT_FLAGS: &[&str] = &[
        "git-url",
        "git-path",
        "git-branch",
        "git-label",
        "git-poll-interval",
    ];
    let flux: Vec<String> = launcher_reads(client, ns, "weave-flux-agent")
        .await
        .into_iter()
        .filter(|a| GIT_FLAGS.iter().any(|f| a.starts_with(&format!("--{f}="))))
        .collect();
    let memcached = launcher_reads(client, ns, "weave-flux-memcached").await;
    let mem_flag = |flag: &str| -> Option<String> {
        let i = memcached.iter().position(|a| a == flag)?;
        memcached.get(i + 1).map(|v| format!("{flag} {v}"))
    };
    let mut errors = Vec::new();
    let params = PostParams {
        field_manager: Some("kubectl-client-side-apply".into()),
        ..Default::default()
    };
    for o in objects {
        let mut o = o.clone();
        let (kind, object_ns, name) = key(&o);
        if kind == "Deployment" && name == "weave-flux-agent" {
            let args = o["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array_mut()
                .expect("flux args");
            args.retain(|a| {
                !GIT_FLAGS.iter().any(|f| {
                    a.as_str()
                        .is_some_and(|a| a.starts_with(&format!("--{f}=")))
                })
            });
            args.extend(flux.iter().map(|a| Value::from(a.as_str())));
        }
        if kind == "Deployment" && name == "weave-flux-memcached" {
            let args = o["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array_mut()
                .expect("memcached args");
            for (flag, value) in [("-m", mem_flag("-m")), ("-I", mem_flag("-I"))] {
                if let Some(v) = value {
                    for a in args.iter_mut() {
                        if a.as_str()
                            .is_some_and(|s| s.starts_with(&format!("{flag} ")))
                        {
                            *a = Value::from(v.as_str());
                        }
                    }
                }
            }
        }
        let api = dynamic_api(client, &kind, object_ns.as_deref());
        let result = match api.get_opt(&name).await {
            Ok(None) => {
                let object: DynamicObject = serde_json::from_value(o).expect("object");
                api.create(&params, &object).await.map(|_| ())
            }
            Ok(Some(_)) => {
                // kubectl's strategic merge keeps only the given keys of `spec.strategy`
                // (`retainKeys`): a Recreate strategy drops the live rollingUpdate.
                if o.pointer("/spec/strategy/type") == Some(&Value::from("Recreate")) {
                    o["spec"]["strategy"]["rollingUpdate"] = Value::Null;
                }
                api.patch(
                    &name,
                    &kube::api::PatchParams {
                        field_manager: Some("kubectl-client-side-apply".into()),
                        ..Default::default()
                    },
                    &kube::api::Patch::Merge(&o),
                )
                .await
                .map(|_| ())
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            errors.push(format!("{kind}/{name}: {e}"));
        }
    }
    errors
}
