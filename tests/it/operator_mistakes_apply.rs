//! Operator mistakes in the apply (issue 31, items 6 and 7), with the `weft` binary against the
//! real control plane: a change to an immutable field (refused with the object and the field,
//! recreated only when the document allows it, within the prune guard), a kind change under the
//! same name (the old object pruned before the new one is created, within the guard), and a
//! readiness wait that ends at once on a terminal `Ready=False`.
//!
//! Every test makes its own namespace; the root and its inventory live there too
//! (`--weft-namespace <ns> --root-name <ns>`).

use crate::support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};

use support::cluster::{self, TestNamespace};
use support::manifests::configmap;
use support::repo_dir::Repo;
use support::weft_cli::Weft;

/// `weft sync` of `repo` with the root and its inventory in `ns`.
fn sync(repo: &Path, ns: &str, extra: &[&str]) -> Output {
    Weft::new(["sync"])
        .repo(repo)
        .cluster()
        .root(ns)
        .args(extra)
        .env("WEFT_LOG", "warn")
        .output()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `n` ConfigMaps beside the objects under test, so that the guard's small-root rule does not
/// decide for them.
fn bystanders(repo: &Repo, ns: &str, n: usize) {
    for i in 0..n {
        repo.write(
            &format!("bystanders/cm-{i:02}.yaml"),
            &configmap(ns, &format!("bystander-{i:02}"), "x"),
        );
    }
}

fn deployment(ns: &str, app: &str, recreate: bool) -> String {
    let annotations = if recreate {
        "\n  annotations:\n    weft.io/recreate: allowed"
    } else {
        ""
    };
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {ns}{annotations}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {app}}}
  template:
    metadata:
      labels: {{app: {app}}}
    spec:
      containers:
        - name: web
          image: registry.example/web:1
"#
    )
}

/// The UID and selector label `app` of Deployment `web`.
async fn web(client: &Client, ns: &str) -> (String, String) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = api.get("web").await.expect("Deployment web");
    let app = d
        .spec
        .and_then(|s| s.selector.match_labels)
        .and_then(|l| l.get("app").cloned())
        .unwrap_or_default();
    (d.metadata.uid.unwrap_or_default(), app)
}

// ---- item 6: immutable fields ----

#[tokio::test]
async fn an_immutable_field_is_named_and_recreated_only_when_the_document_allows_it() {
    let ns = TestNamespace::new("ops-immutable").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = Repo::new();
    bystanders(&repo, &name, 3);
    repo.write("web.yaml", &deployment(&name, "web", false));
    let out = sync(repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (uid, app) = web(&client, &name).await;
    assert_eq!(app, "web");

    // The selector changes in git: refused, naming the object and the field; nothing written.
    repo.write("web.yaml", &deployment(&name, "web-v2", false));
    let out = sync(repo.path(), &name, &[]);
    let t = text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains(&format!(
            "Deployment/{name}/web: cannot be changed in place: spec.selector is immutable"
        )),
        "{t}"
    );
    assert!(t.contains("weft.io/recreate: allowed"), "{t}");
    assert_eq!(web(&client, &name).await, (uid.clone(), "web".to_string()));

    // Annotated: deleted, gone, created again with the new selector.
    repo.write("web.yaml", &deployment(&name, "web-v2", true));
    let out = sync(repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let deleted = t
        .find(&format!(
            "deleted    Deployment/{name}/web (to recreate it: spec.selector is immutable"
        ))
        .unwrap_or_else(|| panic!("no delete line: {t}"));
    let created = t
        .find(&format!(
            "created    Deployment/{name}/web (recreated: spec.selector is immutable)"
        ))
        .unwrap_or_else(|| panic!("no create line: {t}"));
    assert!(deleted < created, "{t}");
    let (new_uid, app) = web(&client, &name).await;
    assert_ne!(new_uid, uid, "a new object");
    assert_eq!(app, "web-v2");
    ns.delete().await;
}

fn immutable_configmap(ns: &str, name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations:\n    weft.io/recreate: allowed\nimmutable: true\ndata:\n  value: {value}\n"
    )
}

#[tokio::test]
async fn a_recreate_counts_against_the_prune_guard() {
    // A root of one object: recreating it deletes all of it, which the guard refuses for a
    // small root, as it would refuse pruning it.
    let ns = TestNamespace::new("ops-recreate-guard").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = Repo::new();
    repo.write("frozen.yaml", &immutable_configmap(&name, "frozen", "one"));
    let out = sync(repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let uid = api.get("frozen").await.expect("frozen").metadata.uid;

    repo.write("frozen.yaml", &immutable_configmap(&name, "frozen", "two"));
    let out = sync(repo.path(), &name, &[]);
    let t = text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains(&format!(
            "ConfigMap/{name}/frozen: cannot be changed in place"
        )),
        "{t}"
    );
    assert!(
        t.contains("not recreated although annotated `weft.io/recreate: allowed`: the prune guard refused the delete: refusing to prune 1 of the 1 objects"),
        "{t}"
    );
    let live = api.get("frozen").await.expect("frozen");
    assert_eq!(live.metadata.uid, uid, "{t}");
    assert_eq!(live.data.unwrap_or_default()["value"], "one");

    // The one-shot override lets it through.
    let out = sync(repo.path(), &name, &["--force-prune"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let live = api.get("frozen").await.expect("frozen");
    assert_ne!(live.metadata.uid, uid, "{t}");
    assert_eq!(live.data.unwrap_or_default()["value"], "two");
    ns.delete().await;
}

fn secret(ns: &str, name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {ns}\nstringData:\n  value: {value}\n")
}

#[tokio::test]
async fn a_kind_change_under_the_same_name_prunes_the_old_before_creating_the_new() {
    let ns = TestNamespace::new("ops-kindchange").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = Repo::new();
    bystanders(&repo, &name, 3);
    repo.write("settings.yaml", &configmap(&name, "settings", "plain"));
    let out = sync(repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    repo.write("settings.yaml", &secret(&name, "settings", "hidden"));
    let out = sync(repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let deleted = t
        .find(&format!(
            "deleted    ConfigMap/{name}/settings (replaced by Secret/{name}/settings"
        ))
        .unwrap_or_else(|| panic!("no prune of the ConfigMap: {t}"));
    let created = t
        .find(&format!("created    Secret/{name}/settings"))
        .unwrap_or_else(|| panic!("no create of the Secret: {t}"));
    assert!(deleted < created, "the old one first: {t}");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &name);
    assert!(cms.get_opt("settings").await.expect("get").is_none());
    assert!(secrets.get_opt("settings").await.expect("get").is_some());
    ns.delete().await;
}

/// Issue 43, item 5: nothing is replaced in a pass whose apply fails.
#[tokio::test]
async fn a_kind_change_in_a_pass_whose_apply_fails_replaces_nothing() {
    let ns = TestNamespace::new("ops-kindfail").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = Repo::new();
    bystanders(&repo, &name, 3);
    repo.write("x.yaml", &configmap(&name, "x", "plain"));
    let out = sync(repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &name);
    let uid = cms.get("x").await.expect("x").metadata.uid;

    // `x` becomes a Secret, and the same commit adds an object the API server refuses (a key
    // that is not a valid ConfigMap key).
    repo.write("x.yaml", &secret(&name, "x", "hidden"));
    repo.write(
        "bad.yaml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  namespace: {name}\ndata:\n  \"not a key!\": v\n"),
    );
    let out = sync(repo.path(), &name, &[]);
    let t = text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(t.contains(&format!("ConfigMap/{name}/bad")), "{t}");
    assert!(
        t.contains(&format!(
            "Secret/{name}/x (not created: it replaces ConfigMap/{name}/x only in a pass whose other objects applied"
        )),
        "{t}"
    );
    let live = cms.get_opt("x").await.expect("get");
    assert_eq!(
        live.and_then(|c| c.metadata.uid),
        uid,
        "the ConfigMap x was replaced: {t}"
    );
    assert!(secrets.get_opt("x").await.expect("get").is_none(), "{t}");

    // Fixed: the next pass replaces it.
    repo.remove("bad.yaml");
    let out = sync(repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains(&format!(
            "deleted    ConfigMap/{name}/x (replaced by Secret/{name}/x"
        )),
        "{t}"
    );
    assert!(cms.get_opt("x").await.expect("get").is_none(), "{t}");
    assert!(secrets.get_opt("x").await.expect("get").is_some(), "{t}");
    ns.delete().await;
}

#[tokio::test]
async fn kind_changes_are_judged_by_the_prune_guard() {
    // Twelve ConfigMaps become Secrets: 12 deletions of the 24 entries the write-ahead holds,
    // past a guard of 30 %.
    let ns = TestNamespace::new("ops-kindguard").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = Repo::new();
    for i in 0..12 {
        repo.write(
            &format!("s-{i:02}.yaml"),
            &configmap(&name, &format!("s-{i:02}"), "v"),
        );
    }
    let out = sync(repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for i in 0..12 {
        repo.write(
            &format!("s-{i:02}.yaml"),
            &secret(&name, &format!("s-{i:02}"), "v"),
        );
    }
    let guard = ["--max-prune-fraction", "0.3"];
    let out = sync(repo.path(), &name, &guard);
    let t = text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("refusing to prune 12 of the 24 objects"), "{t}");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &name);
    for i in 0..12 {
        let n = format!("s-{i:02}");
        assert!(cms.get_opt(&n).await.expect("get").is_some(), "{n}: {t}");
        assert!(
            secrets.get_opt(&n).await.expect("get").is_none(),
            "{n}: {t}"
        );
    }

    let out = sync(
        repo.path(),
        &name,
        &["--max-prune-fraction", "0.3", "--force-prune"],
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    for i in 0..12 {
        let n = format!("s-{i:02}");
        assert!(cms.get_opt(&n).await.expect("get").is_none(), "{n}: {t}");
        assert!(
            secrets.get_opt(&n).await.expect("get").is_some(),
            "{n}: {t}"
        );
    }
    ns.delete().await;
}

// ---- item 7: terminal conditions fail fast ----

/// A running `weft sync`, killed if the test fails before it ends.
struct Running(Option<std::process::Child>);

impl Running {
    fn child(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("running")
    }
    fn output(mut self) -> Output {
        self.0
            .take()
            .expect("running")
            .wait_with_output()
            .expect("output")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn widget_crd(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {{status: {{}}}}
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#
    )
}

fn widget(group: &str, ns: &str, size: u32) -> String {
    format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: {ns}\nspec:\n  size: {size}\n")
}

/// Set Widget `w`'s status: observed at `observed`, `Ready=False` for `reason`.
async fn widget_status(api: &Api<DynamicObject>, observed: i64, reason: &str, message: &str) {
    let status = serde_json::json!({"status": {"observedGeneration": observed, "conditions": [{
        "type": "Ready", "status": "False", "reason": reason, "message": message,
        "lastTransitionTime": "2026-12-04T00:00:00Z"}]}});
    api.patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch status");
}

#[tokio::test]
async fn a_terminal_ready_false_ends_the_wait_at_once_and_transient_reasons_keep_waiting() {
    let ns = TestNamespace::new("ops-terminal").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let group = format!("{name}.weft.test");
    let repo = Repo::new();
    bystanders(&repo, &name, 3);
    repo.write("crd.yaml", &widget_crd(&group));
    let out = sync(repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // A Widget its controller works on (generation 1, Progressing).
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &name, &ar);
    let mut w = DynamicObject::new("w", &ar);
    w.data = serde_json::json!({"spec": {"size": 1}});
    widgets
        .create(&Default::default(), &w)
        .await
        .expect("create Widget");
    widget_status(&widgets, 1, "Progressing", "starting").await;

    // Weft applies a new spec (generation 2) and waits for it, for up to 5 minutes.
    repo.write("widget.yaml", &widget(&group, &name, 2));
    let started = Instant::now();
    let mut child = Running(Some(
        Command::new(env!("CARGO_BIN_EXE_weft"))
            .arg("sync")
            .arg("--repo")
            .arg(repo.path())
            .args(cluster::cluster().kube_args())
            .args([
                "--weft-namespace",
                name.as_str(),
                "--root-name",
                name.as_str(),
            ])
            .args(["--timeout", "5m"])
            .env_remove("KUBECONFIG")
            .env("WEFT_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn weft sync"),
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let live = widgets.get("w").await.expect("Widget");
        if live.metadata.generation == Some(2) {
            break;
        }
        assert!(Instant::now() < deadline, "weft did not apply the Widget");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // At generation 2, a transient reason keeps the wait going.
    widget_status(&widgets, 2, "Progressing", "rolling out").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        child.child().try_wait().expect("try_wait").is_none(),
        "the wait ended on a transient reason"
    );
    // A terminal one ends it at once, with the reason and message.
    widget_status(&widgets, 2, "SecretNotFound", "secret slack-url not found").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.child().try_wait().expect("try_wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "weft sync still waits 60 s after a terminal Ready=False"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = child.output();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!(
            "Widget/{name}/w: Ready=False: SecretNotFound: secret slack-url not found"
        )),
        "{t}"
    );
    assert!(!t.contains("timed out"), "{t}");
    assert!(started.elapsed() < Duration::from_secs(150), "{t}");

    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let _ = widgets.delete("w", &Default::default()).await;
    let _ = crds
        .delete(&format!("widgets.{group}"), &Default::default())
        .await;
    ns.delete().await;
}
