//! Day one (issue 33): Weft installed from this repository alone, and its shipped RBAC.
//!
//! - The Helm chart at deploy/chart passes the pinned `helm lint`, and `helm template` of its
//!   defaults is deploy/'s manifests, object by object; `weft install -o yaml` prints the same
//!   objects, and with flags the same objects as the chart with the matching values.
//! - `helm install` and `weft install` into the real control plane give a Weft whose Deployment
//!   becomes available (kwok runs no image: its fake kubelets make any pod Running and Ready, so
//!   this proves the objects are accepted, admitted under Pod Security `restricted` and scheduled,
//!   not that the image starts).
//! - `weft sync` of examples-repo as a ServiceAccount bound only to the shipped tiers (the
//!   admin's kubeconfig impersonating it, as `kubectl --as` does) applies everything.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use support::cluster::{self, TestNamespace};
use support::helm::helm;
use support::rbac::Access;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    root().join("deploy/chart")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{cmd:?} failed:\n{stdout}\n{stderr}");
    stdout
}

/// The objects of a multi-document YAML stream by `Kind/namespace/name`.
fn objects(yaml: &str) -> BTreeMap<String, Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("YAML");
    docs.into_iter()
        .filter(Value::is_object)
        .map(|d| {
            let key = format!(
                "{}/{}/{}",
                d["kind"].as_str().expect("kind"),
                d["metadata"]["namespace"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().expect("name")
            );
            (key, d)
        })
        .collect()
}

/// deploy/'s manifests (every `*.yaml` directly in deploy/).
fn deploy_objects() -> BTreeMap<String, Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy"))
        .expect("deploy/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut all = BTreeMap::new();
    for f in files {
        all.extend(objects(&std::fs::read_to_string(&f).expect("read")));
    }
    all
}

fn helm_template(values: &[&str]) -> BTreeMap<String, Value> {
    let mut cmd = Command::new(helm());
    cmd.args(["template", "weft"])
        .arg(chart())
        .arg("--include-crds");
    for v in values {
        cmd.args(["--set", v]);
    }
    objects(&run(&mut cmd))
}

fn weft_install_yaml(flags: &[&str]) -> BTreeMap<String, Value> {
    objects(&run(Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["install", "-o", "yaml"])
        .args(flags)))
}

/// Equal maps, or a message naming the first objects that differ.
fn assert_same(what: &str, got: &BTreeMap<String, Value>, want: &BTreeMap<String, Value>) {
    let got_keys: Vec<_> = got.keys().collect();
    let want_keys: Vec<_> = want.keys().collect();
    assert_eq!(got_keys, want_keys, "{what}: not the same objects");
    for (k, v) in want {
        pretty_assertions::assert_eq!(&got[k], v, "{what}: {k} differs");
    }
}

#[test]
fn chart_lints_and_its_defaults_render_deploy() {
    let out = run(Command::new(helm()).arg("lint").arg(chart()));
    assert!(out.contains("0 chart(s) failed"), "{out}");
    assert!(
        !out.contains("[ERROR]") && !out.contains("[WARNING]"),
        "{out}"
    );
    let deploy = deploy_objects();
    assert_eq!(deploy.len(), 22, "{:?}", deploy.keys());
    assert_same("helm template (defaults)", &helm_template(&[]), &deploy);
    assert_same("weft install -o yaml", &weft_install_yaml(&[]), &deploy);
}

#[test]
fn weft_install_and_the_chart_agree_on_every_flag() {
    let weft = weft_install_yaml(&[
        "--image",
        "registry.example/weft:dev",
        "--weft-namespace",
        "team-a",
        "--tiers",
        "apply",
        "--repo",
        "ssh://git@example.com/config.git",
        "--ref",
        "v1.2.3",
        "--git-secret",
        "weft-git",
        "--skip-crds",
    ]);
    let chart = helm_template(&[
        "image.repository=registry.example/weft",
        "image.tag=dev",
        "namespace=team-a",
        "rbac.agents.enabled=false",
        "rbac.notifications.enabled=false",
        "repository.url=ssh://git@example.com/config.git",
        "repository.ref=v1.2.3",
        "repository.gitSecret=weft-git",
    ]);
    let chart: BTreeMap<_, _> = chart
        .into_iter()
        .filter(|(k, _)| !k.starts_with("CustomResourceDefinition/"))
        .collect();
    assert_same("weft install with flags vs the chart", &weft, &chart);
    // What changed is what the flags name.
    let d = &weft["Deployment/team-a/weft"];
    assert_eq!(
        d.pointer("/spec/template/spec/containers/0/image"),
        Some(&json!("registry.example/weft:dev"))
    );
    assert!(weft.contains_key("ClusterRole//weft-apply:team-a"));
    assert!(!weft
        .keys()
        .any(|k| k.contains("agents") || k.contains("notifications")));
    assert_eq!(
        weft["ClusterRoleBinding//weft-controller:team-a"]["subjects"][0]["namespace"],
        "team-a"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["install", "-o", "yaml", "--image", "two words"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out)
            .1
            .contains("--image: `two words` is not an image reference"),
        "{:?}",
        text(&out)
    );
}

#[test]
fn the_chart_offers_the_namespaced_installation_of_weft_install() {
    let weft = weft_install_yaml(&["--weft-namespace", "team-a", "--namespaced"]);
    let chart: BTreeMap<_, _> = helm_template(&["namespace=team-a", "namespaced=true"])
        .into_iter()
        .filter(|(k, _)| !k.starts_with("CustomResourceDefinition/"))
        .collect();
    assert_same(
        "weft install --namespaced vs the chart's namespaced=true",
        &weft,
        &chart,
    );
    // Role-only, all in team-a, watching team-a only.
    for (k, o) in &weft {
        assert!(
            !k.starts_with("Cluster") && !k.starts_with("Namespace/"),
            "{k}"
        );
        assert_eq!(o["metadata"]["namespace"], "team-a", "{k}");
    }
    assert!(
        weft.contains_key("Role/team-a/weft-apply"),
        "{:?}",
        weft.keys()
    );
    let args = &weft["Deployment/team-a/weft"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array()
            .is_some_and(|a| a.contains(&json!("--watch-namespaces=team-a"))),
        "{args}"
    );
}

/// Delete the cluster-scoped RBAC an installation into `namespace` made (`<name>:<namespace>`).
async fn delete_cluster_rbac(client: &Client, namespace: &str) {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    for tier in ["controller", "agents", "apply", "notifications"] {
        let name = format!("weft-{tier}:{namespace}");
        let _ = roles.delete(&name, &DeleteParams::default()).await;
        let _ = bindings.delete(&name, &DeleteParams::default()).await;
    }
}

/// Deletes, when dropped (a failed assertion included), the cluster-scoped RBAC an installation
/// into its namespace made: the shared cluster keeps no leftovers of a failed run.
struct ClusterRbacCleanup(String);

impl Drop for ClusterRbacCleanup {
    fn drop(&mut self) {
        let names: Vec<String> = ["controller", "agents", "apply", "notifications"]
            .iter()
            .flat_map(|t| {
                let name = format!("weft-{t}:{}", self.0);
                [
                    format!("clusterrole/{name}"),
                    format!("clusterrolebinding/{name}"),
                ]
            })
            .collect();
        let _ = Command::new("kubectl")
            .args(cluster::cluster().kube_args())
            .args(["delete", "--ignore-not-found", "--wait=false"])
            .args(&names)
            .output();
    }
}

/// Wait until the Deployment `weft` in `namespace` has its replica available.
async fn wait_available(client: &Client, namespace: &str) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let d = api.get("weft").await.expect("Deployment weft");
        let available = d.status.as_ref().and_then(|s| s.available_replicas);
        if available == Some(1) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Deployment {namespace}/weft not available: {:?}",
            d.status
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn helm_install_of_the_chart_gives_an_available_weft() {
    let ns = TestNamespace::new("install-helm").await;
    let client = ns.client();
    let c = cluster::cluster();
    // The release is stored in the test namespace; Weft's namespace is made by the chart.
    let weft_ns = format!("{}-weft", ns.name());
    let _cleanup = ClusterRbacCleanup(weft_ns.clone());
    let mut install = Command::new(helm());
    install
        .args(["install", "weft"])
        .arg(chart())
        .args(["--namespace", ns.name(), "--kubeconfig"])
        .arg(c.kubeconfig_path())
        .args(["--set", &format!("namespace={weft_ns}")])
        .args(["--set", "image.tag=test"]);
    if let Some(context) = c.context() {
        install.args(["--kube-context", context]);
    }
    let out = run(&mut install);
    assert!(out.contains("STATUS: deployed"), "{out}");
    let namespace = Api::<Namespace>::all(client.clone())
        .get(&weft_ns)
        .await
        .expect("the chart's namespace");
    assert_eq!(
        namespace.metadata.labels.as_ref().expect("labels")["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    wait_available(&client, &weft_ns).await;
    let role = Api::<ClusterRole>::all(client.clone())
        .get(&format!("weft-apply:{weft_ns}"))
        .await
        .expect("the apply tier");
    assert!(role.rules.iter().flatten().any(|r| r
        .resources
        .iter()
        .flatten()
        .any(|x| x == "alerts")));

    let mut uninstall = Command::new(helm());
    uninstall
        .args([
            "uninstall",
            "weft",
            "--namespace",
            ns.name(),
            "--kubeconfig",
        ])
        .arg(c.kubeconfig_path());
    if let Some(context) = c.context() {
        uninstall.args(["--kube-context", context]);
    }
    run(&mut uninstall);
    let left = Api::<ClusterRole>::all(client.clone())
        .get_opt(&format!("weft-apply:{weft_ns}"))
        .await
        .expect("read");
    assert!(left.is_none(), "helm uninstall left the apply tier");
    delete_cluster_rbac(&client, &weft_ns).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&weft_ns, &DeleteParams::background())
        .await;
    ns.delete().await;
}

fn weft_install(c: &cluster::Cluster, flags: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("install")
        .args(c.kube_args())
        .args(flags)
        .env_remove("KUBECONFIG")
        .env("WEFT_LOG", "warn")
        .output()
        .expect("run weft install")
}

#[tokio::test]
async fn weft_install_applies_waits_and_a_second_run_changes_nothing() {
    let ns = TestNamespace::new("install-cli").await;
    let client = ns.client();
    let c = cluster::cluster();
    let weft_ns = format!("{}-weft", ns.name());
    let _cleanup = ClusterRbacCleanup(weft_ns.clone());
    // CRDs are shared by every test in this cluster: this one leaves them alone (`--skip-crds`)
    // and only lets the API server check them (`--dry-run` below).
    let flags = [
        "--weft-namespace",
        &weft_ns,
        "--image",
        "registry.example/weft:test",
        "--skip-crds",
        "--timeout",
        "2m",
    ];
    let out = weft_install(c, &flags);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for line in [
        format!("created    Namespace/{weft_ns}"),
        format!("created    ClusterRole/weft-apply:{weft_ns}"),
        format!("created    Deployment/{weft_ns}/weft"),
        format!("ready      Deployment/{weft_ns}/weft"),
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no `{line}` in:\n{stdout}"
        );
    }
    let d = Api::<Deployment>::namespaced(client.clone(), &weft_ns)
        .get("weft")
        .await
        .expect("Deployment");
    let pod = d.spec.expect("spec").template.spec.expect("pod");
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("registry.example/weft:test")
    );

    let out = weft_install(c, &flags);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let changed: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("created") || l.starts_with("configured"))
        .collect();
    assert!(changed.is_empty(), "a second install changed:\n{stdout}");
    assert!(stdout.contains(&format!("unchanged  Deployment/{weft_ns}/weft")));

    // The whole set, CRDs included, checked by the API server and not stored.
    let out = weft_install(
        c,
        &["--weft-namespace", &weft_ns, "--dry-run", "--timeout", "1m"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("CustomResourceDefinition/weaveclouds.cloud.weave.works"),
        "{stdout}"
    );
    assert!(stdout.contains("dry run: 22 object(s) checked"), "{stdout}");
    let d = Api::<Deployment>::namespaced(client.clone(), &weft_ns)
        .get("weft")
        .await
        .expect("Deployment");
    assert_eq!(
        d.spec.expect("spec").template.spec.expect("pod").containers[0]
            .image
            .as_deref(),
        Some("registry.example/weft:test"),
        "a dry run changed the Deployment"
    );

    delete_cluster_rbac(&client, &weft_ns).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&weft_ns, &DeleteParams::background())
        .await;
    ns.delete().await;
}

#[tokio::test]
async fn weft_install_dry_run_on_a_fresh_cluster_lists_everything_and_stores_nothing() {
    // Weft's namespace does not exist, as on a cluster where Weft was never installed: the
    // API server cannot check the objects of a namespace a dry run does not create, so they are
    // listed as such, and the dry run exits 0 (issue 40 item 2).
    let ns = TestNamespace::new("install-fresh").await;
    let client = ns.client();
    let weft_ns = format!("{}-weft", ns.name());
    let out = weft_install(
        cluster::cluster(),
        &["--weft-namespace", &weft_ns, "--skip-crds", "--dry-run"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l == format!("created    Namespace/{weft_ns}")),
        "{stdout}"
    );
    let unchecked = format!(
        "created    Deployment/{weft_ns}/weft (not checked by the API server: namespace {weft_ns} does not exist yet)"
    );
    assert!(stdout.lines().any(|l| l == unchecked), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("created    ClusterRole/") && !l.contains("not checked")),
        "cluster-scoped objects are checked by the API server:\n{stdout}"
    );
    assert!(
        stdout.contains("in namespaces this install would create not checked, none stored"),
        "{stdout}"
    );
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(&weft_ns)
            .await
            .expect("GET namespace")
            .is_none(),
        "a dry run created {weft_ns}"
    );
    ns.delete().await;
}

/// deploy/'s RBAC for a ServiceAccount `weft` in `ns`: the Role and every ClusterRole with their
/// rules as shipped, the cluster-scoped ones named `<name>:<ns>` (as `weft install --namespace`
/// names them), every binding to that ServiceAccount.
fn shipped_rbac(ns: &str) -> Vec<Value> {
    let out = run(Command::new(env!("CARGO_BIN_EXE_weft")).args([
        "install",
        "-o",
        "yaml",
        "--skip-crds",
        "--weft-namespace",
        ns,
    ]));
    objects(&out)
        .into_values()
        .filter(|o| {
            o["apiVersion"] == "rbac.authorization.k8s.io/v1" || o["kind"] == "ServiceAccount"
        })
        .collect()
}

/// A kubeconfig of the test cluster whose user impersonates `user` (kubeconfig's `as`).
fn impersonating_kubeconfig(dir: &Path, user: &str) -> PathBuf {
    let c = cluster::cluster();
    let text = std::fs::read_to_string(c.kubeconfig_path()).expect("kubeconfig");
    let mut config: Value = serde_saphyr::from_str(&text).expect("kubeconfig YAML");
    for u in config["users"].as_array_mut().expect("users") {
        u["user"]["as"] = user.into();
    }
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_json::to_string(&config).expect("json")).expect("write");
    path
}

#[tokio::test]
async fn shipped_tiers_apply_the_examples_repo() {
    let ns = TestNamespace::new("install-rbac").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let _cleanup = ClusterRbacCleanup(name.clone());
    cluster::install_crds(&client).await;
    let pp = PatchParams::apply("weft-test").force();
    for o in shipped_rbac(&name) {
        let kind = o["kind"].as_str().expect("kind");
        let object_name = o["metadata"]["name"].as_str().expect("name");
        match kind {
            "ServiceAccount" => {
                ns.api::<ServiceAccount>()
                    .patch(object_name, &pp, &Patch::Apply(&o))
                    .await
                    .expect("ServiceAccount");
            }
            "Role" | "RoleBinding" => {
                let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                    "rbac.authorization.k8s.io",
                    "v1",
                    kind,
                ));
                Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), &name, &ar)
                    .patch(object_name, &pp, &Patch::Apply(&o))
                    .await
                    .unwrap_or_else(|e| panic!("{kind}: {e}"));
            }
            _ => {
                let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                    "rbac.authorization.k8s.io",
                    "v1",
                    kind,
                ));
                Api::<kube::api::DynamicObject>::all_with(client.clone(), &ar)
                    .patch(object_name, &pp, &Patch::Apply(&o))
                    .await
                    .unwrap_or_else(|e| panic!("{kind}: {e}"));
            }
        }
    }
    // The example's Provider is Ready only once its HMAC Secret exists (the example's comment
    // says to create it): as an operator would, before the sync.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "demo"}})).expect("ns"),
        )
        .await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "ops-webhook-hmac", "namespace": "demo"},
        "stringData": {"token": "test-only"}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), "demo")
        .patch("ops-webhook-hmac", &pp, &Patch::Apply(&secret))
        .await
        .expect("hmac secret");
    // A Provider left by an earlier run keeps the status some other daemon wrote (its allow-list,
    // not this test's): the sync must create it afresh.
    let providers = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        "demo",
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "notification.weft.io",
            "v1alpha1",
            "Provider",
        )),
    );
    let _ = providers
        .delete("ops-webhook", &DeleteParams::default())
        .await;
    // A control plane without a storage provisioner (the test one, local or shared): a volume
    // for the redis chart's claim.
    let classes = Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("storage classes");
    if classes.items.is_empty() {
        let pv: PersistentVolume = serde_json::from_value(json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": format!("{name}-pv")},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/weft-test-pv"}}}))
        .expect("pv");
        Api::<PersistentVolume>::all(client.clone())
            .patch(&format!("{name}-pv"), &pp, &Patch::Apply(&pv))
            .await
            .expect("PV");
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let user = format!("system:serviceaccount:{name}:weft");
    // Each tier's binding is live in the authorizer before the account acts (issue 40 item 10).
    support::rbac::wait_until_granted(
        &support::rbac::client_as(&user).await,
        &user,
        &[
            Access::new("create", "configmaps", Some(&name)),
            Access::new("list", "weaveclouds.cloud.weave.works", None),
            Access::new("create", "clusterroles.rbac.authorization.k8s.io", None),
            Access::new("create", "deployments.apps", Some("demo")),
            Access::new("patch", "providers.notification.weft.io", Some("demo"))
                .subresource("status"),
            // A push or a sync request handed to the replica holding another namespace's Root
            // (its `weft.io/requested-at`, docs/daemon.md).
            Access::new("patch", "roots.weft.io", Some("demo")),
        ],
    )
    .await;
    let kubeconfig = impersonating_kubeconfig(dir.path(), &user);
    let sync = |repo: &Path, root_name: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
        cmd.arg("sync")
            .arg("--repo")
            .arg(repo)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "--weft-namespace",
                &name,
                "--root-name",
                root_name,
                "--timeout",
                "3m",
            ])
            .env_remove("KUBECONFIG")
            .env(
                "SOPS_AGE_KEY_FILE",
                root().join("examples-repo/TEST-ONLY-age.agekey"),
            )
            .env("WEFT_LOG", "warn");
        if let Some(context) = cluster::cluster().context() {
            cmd.args(["--context", context]);
        }
        cmd.output().expect("weft sync")
    };
    let out = sync(&root().join("examples-repo"), &name);
    let (stdout, stderr) = text(&out);
    assert!(!stderr.contains("forbidden"), "{stdout}\n{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for line in [
        "Provider/demo/ops-webhook",
        "Alert/demo/failures",
        "Deployment/demo/demo-web",
        "WeaveCloud/weave/weave-cloud",
    ] {
        assert!(stdout.contains(line), "no {line} in:\n{stdout}");
    }
    // A HorizontalPodAutoscaler, as most charts ship one (examples-repo holds none).
    let repo = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        repo.path().join("hpa.yaml"),
        format!(
            "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: web\n  namespace: {name}\n\
             spec:\n  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n  minReplicas: 1\n  maxReplicas: 3\n"
        ),
    )
    .expect("write");
    let out = sync(repo.path(), &format!("{name}-hpa"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("created    HorizontalPodAutoscaler/{name}/web")),
        "{stdout}"
    );

    // Every write was the ServiceAccount's: the example's objects name it as their manager.
    let provider = providers
        .get("ops-webhook")
        .await
        .expect("Provider applied");
    assert!(provider
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|f| f.manager.as_deref() == Some("weft")));

    delete_cluster_rbac(&client, &name).await;
    let _ = Api::<PersistentVolume>::all(client.clone())
        .delete(&format!("{name}-pv"), &DeleteParams::default())
        .await;
    for n in ["demo", "weave"] {
        let _ = namespaces.delete(n, &DeleteParams::default()).await;
    }
    ns.delete().await;
}

#[tokio::test]
async fn a_forbidden_apply_is_said_once() {
    let ns = TestNamespace::new("install-forbidden").await;
    let name = ns.name().to_string();
    let client = ns.client();
    cluster::install_crds(&client).await;
    // A ServiceAccount with Weft's base tier only (its own namespace): no right on Alerts.
    let pp = PatchParams::apply("weft-test").force();
    for o in shipped_rbac(&name).into_iter().filter(|o| {
        matches!(
            o["kind"].as_str(),
            Some("ServiceAccount" | "Role" | "RoleBinding")
        )
    }) {
        let kind = o["kind"].as_str().expect("kind").to_string();
        let ar = match kind.as_str() {
            "ServiceAccount" => kube::api::ApiResource::erase::<ServiceAccount>(&()),
            _ => kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                "rbac.authorization.k8s.io",
                "v1",
                &kind,
            )),
        };
        Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), &name, &ar)
            .patch(
                o["metadata"]["name"].as_str().expect("name"),
                &pp,
                &Patch::Apply(&o),
            )
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
    let repo = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        repo.path().join("alert.yaml"),
        format!(
            "apiVersion: notification.weft.io/v1alpha1\nkind: Alert\nmetadata: {{name: a1, namespace: {name}}}\n\
             spec:\n  providerRef: {{name: p1}}\n  eventSources: [{{kind: ArmadaChart, name: \"*\"}}]\n"
        ),
    )
    .expect("write");
    let user = format!("system:serviceaccount:{name}:weft");
    support::rbac::wait_until_granted(
        &support::rbac::client_as(&user).await,
        &user,
        &[Access::new("create", "configmaps", Some(&name))],
    )
    .await;
    let kubeconfig = impersonating_kubeconfig(repo.path(), &user);
    for command in ["diff", "sync"] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
        cmd.arg(command)
            .arg("--repo")
            .arg(repo.path().join("alert.yaml").parent().expect("dir"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--weft-namespace", &name, "--root-name", &name])
            .env_remove("KUBECONFIG")
            .env("WEFT_LOG", "warn");
        if let Some(context) = cluster::cluster().context() {
            cmd.args(["--context", context]);
        }
        let out = cmd.output().expect("weft");
        let (stdout, stderr) = text(&out);
        assert_ne!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        assert_eq!(
            stderr.matches("is forbidden").count(),
            1,
            "weft {command}: the forbidden error once:\n{stderr}"
        );
    }
    ns.delete().await;
}
