//! Helm charts deployed by Weft against the real control plane (tests/control-plane, kwok nodes
//! run the pods and complete the Jobs' pods), rendered by the pinned helm (`tests/helm/ensure`,
//! `WEFT_HELM`): the fixture chart `web` (tests/fixtures/helm) with the library chart `weft-lib`
//! as an Armada dependency.
//!
//! - the chart deploys, its `wait.labels` select its pods, its pre-install hook Job runs (and is
//!   deleted, `hook-succeeded`) before its other objects, its test Pod is never applied;
//! - Weft's objects equal `helm template`'s output for the same chart and values, apart from
//!   Weft's labels and annotations (and the namespace helm leaves out);
//! - a second pass writes nothing and starts no helm; changed values update the objects and run the
//!   pre-upgrade hook; a removed template's object is pruned;
//! - a `required` failure is reported by `validate` and `sync` with the template file and line;
//!   in a pass it fails its chart alone: the group before it is deployed, and nothing is pruned.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::ListParams;
use kube::Client;
use serde_json::Value;

use support::cluster::TestNamespace;
use support::helm::helm;
use support::passes::{pass_logged as pass, snapshot};
use weft::apply::changeset::Action;
use weft::helm::{HelmLocation, HelmRenderer};
use weft::pass::{self, PassResult, PassSettings};
use weft::render::AgentLayer;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files of a fixture chart, under `prefix` (without `crds/` unless `crds`: the CRD is
/// cluster-wide, and only one test owns it).
fn fixture(name: &str, prefix: &str, crds: bool, files: &mut BTreeMap<String, String>) {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), &rel, out);
            } else {
                out.push((rel, std::fs::read_to_string(entry.path()).unwrap()));
            }
        }
    }
    let mut found = Vec::new();
    walk(
        &root().join("tests/fixtures/helm").join(name),
        "",
        &mut found,
    );
    for (rel, content) in found {
        if !crds && rel.starts_with("crds/") {
            continue;
        }
        files.insert(format!("{prefix}/{rel}"), content);
    }
}

/// The Armada documents: `web` (Helm chart, dependency `weft-lib`) deployed by a manifest with
/// release prefix `site`, so the release is `site-web`.
fn docs(ns: &str, values: &str) -> String {
    format!(
        r#"apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChart
metadata: {{name: weft-lib, namespace: {ns}}}
spec:
  release: weft-lib
  namespace: {ns}
  source: {{type: local, location: charts/weft-lib}}
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChart
metadata: {{name: web, namespace: {ns}}}
spec:
  release: web
  namespace: {ns}
  source: {{type: local, location: charts/web}}
  dependencies: [weft-lib]
  values: {values}
  wait:
    timeout: 60
    labels: {{app.kubernetes.io/instance: site-web}}
    resources:
      - type: deployment
      - type: pod
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChartGroup
metadata: {{name: apps, namespace: {ns}}}
spec:
  chart_group: [web]
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaManifest
metadata: {{name: site, namespace: {ns}}}
spec:
  release_prefix: site
  chart_groups: [apps]
"#
    )
}

fn repo(ns: &str, values: &str, crds: bool) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    fixture("web", "charts/web", crds, &mut files);
    fixture("weft-lib", "charts/weft-lib", false, &mut files);
    files.insert("armada.yaml".into(), docs(ns, values));
    files
}

fn options(ns: &str, renderer: &Arc<HelmRenderer>) -> PassSettings {
    PassSettings {
        root_name: ns.to_string(),
        weft_namespace: ns.to_string(),
        default_namespace: ns.to_string(),
        timeout: Duration::from_secs(90),
        poll_interval: Duration::from_millis(300),
        helm: Arc::clone(renderer),
        ..PassSettings::default()
    }
}

fn error_text(r: &PassResult) -> String {
    r.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
}

fn position(events: &[String], line: &str) -> usize {
    events
        .iter()
        .position(|e| e == line)
        .unwrap_or_else(|| panic!("no `{line}` in {events:#?}"))
}

/// Writes (created, configured, deleted) of a pass.
fn writes(r: &PassResult) -> Vec<String> {
    r.changes
        .entries
        .iter()
        .filter(|c| !matches!(c.action, Action::Unchanged | Action::Skipped))
        .map(|c| format!("{} {}", c.action.done(), c.object))
        .collect()
}

/// An object without what Weft adds: its labels and annotations, and the namespace helm leaves
/// to `--namespace`.
fn without_weft(mut v: Value) -> Value {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("namespace");
        for key in ["labels", "annotations"] {
            if let Some(map) = meta.get_mut(key).and_then(Value::as_object_mut) {
                map.retain(|k, _| {
                    !k.starts_with("weft.io/") && k != "app.kubernetes.io/managed-by"
                });
                if map.is_empty() {
                    meta.remove(key);
                }
            }
        }
    }
    v
}

/// `helm template` of the fixture chart with `values`, as a user would run it: the library
/// chart copied under `charts/`. Hooks and the test Pod are left out (Weft applies them apart).
fn helm_template(release: &str, ns: &str, values: &Value) -> BTreeMap<String, Value> {
    let dir = tempfile::tempdir().unwrap();
    let mut files = BTreeMap::new();
    fixture("web", "web", true, &mut files);
    fixture("weft-lib", "web/charts/weft-lib", false, &mut files);
    for (rel, content) in &files {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let values_file = dir.path().join("values.json");
    std::fs::write(&values_file, values.to_string()).unwrap();
    let out = Command::new(helm())
        .args(["template", release])
        .arg(dir.path().join("web"))
        .arg(format!("--namespace={ns}"))
        .arg(format!("--values={}", values_file.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut objects = BTreeMap::new();
    for doc in text.split("\n---") {
        let v: Value = match serde_saphyr::from_str(doc) {
            Ok(v) => v,
            Err(_) => continue,
        };
        if v.is_null() || v.pointer("/metadata/annotations/helm.sh~1hook").is_some() {
            continue;
        }
        let key = format!(
            "{}/{}",
            v["kind"].as_str().unwrap(),
            v["metadata"]["name"].as_str().unwrap()
        );
        objects.insert(key, v);
    }
    objects
}

#[tokio::test]
async fn a_helm_chart_with_a_library_dependency_deploys_upgrades_and_prunes() {
    let ns = TestNamespace::new("helm-sync").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let renderer = Arc::new(HelmRenderer::new(HelmLocation::Binary(
        helm().to_path_buf(),
    )));
    let opts = options(&name, &renderer);
    let values = r#"{image: {repository: registry.example/web, tag: "1.0"}, replicaCount: 2}"#;
    let mut files = repo(&name, values, false);

    // 1. Install: the pre-install hook Job first (waited for, then deleted), then the objects.
    let (r, events) = pass(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    let hook = format!("Job/{name}/site-web-migrate");
    let hook_created = position(&events, &format!("created {hook}"));
    let hook_ready = position(&events, &format!("ready {hook}"));
    let hook_deleted = position(&events, &format!("deleted {hook}"));
    let deployment_created = position(&events, &format!("created Deployment/{name}/site-web"));
    assert!(
        hook_created < hook_ready && hook_ready < hook_deleted && hook_deleted < deployment_created,
        "{events:#?}"
    );
    // The chart's wait.labels select its pods: each became ready before the pass ended.
    let pods: kube::Api<Pod> = ns.api();
    let selected = pods
        .list(&ListParams::default().labels("app.kubernetes.io/instance=site-web"))
        .await
        .unwrap();
    let running: Vec<_> = selected
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("site-web-"))
        })
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect();
    assert_eq!(running.len(), 2, "{:#?}", selected.items);
    assert!(
        events
            .iter()
            .any(|e| e.starts_with(&format!("ready Pod/{name}/site-web-"))),
        "{events:#?}"
    );
    // The test hook is never applied, and the run hook is gone (hook-succeeded).
    assert!(pods.get_opt("site-web-test").await.unwrap().is_none());
    let jobs: kube::Api<Job> = ns.api();
    assert!(jobs.get_opt("site-web-migrate").await.unwrap().is_none());
    assert!(
        r.diagnostics
            .0
            .iter()
            .any(|d| d.to_string().contains("test hook Pod/site-web-test")),
        "{:?}",
        r.diagnostics.0
    );

    // 2. Weft's objects are helm's, apart from Weft's labels and annotations.
    let prepared = pass::prepare::prepare(snapshot(&files), None, AgentLayer::Included, &opts)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let weft_objects: BTreeMap<String, Value> = prepared
        .set
        .objects()
        .iter()
        .filter(|o| !o.owner.is_root() && &*o.owner.name == "web")
        // The release namespace (created only when missing, as `helm install
        // --create-namespace` does) is not in helm's template output.
        .filter(|o| o.kind() != "Namespace")
        .map(|o| {
            (
                format!("{}/{}", o.kind(), o.name()),
                without_weft(o.object.value()),
            )
        })
        .collect();
    let values_json: Value = serde_json::json!({"image": {"repository": "registry.example/web", "tag": "1.0"}, "replicaCount": 2});
    let helm_objects = helm_template("site-web", &name, &values_json);
    let helm_objects: BTreeMap<String, Value> = helm_objects
        .into_iter()
        .filter(|(k, _)| !k.starts_with("CustomResourceDefinition/"))
        .collect();
    assert_eq!(
        weft_objects.keys().collect::<Vec<_>>(),
        helm_objects.keys().collect::<Vec<_>>()
    );
    for (k, helm_object) in &helm_objects {
        pretty_assertions::assert_eq!(&weft_objects[k], helm_object, "{k}");
    }

    // 3. A second pass: no write, no helm process.
    let launched = renderer.launches();
    let (r, events) = pass(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    assert_eq!(writes(&r), Vec::<String>::new(), "{events:#?}");
    assert_eq!(
        renderer.launches(),
        launched,
        "the second pass started helm"
    );

    // 4. Changed values: the objects are updated and the pre-upgrade hook runs first.
    let changed = r#"{image: {repository: registry.example/web, tag: "1.0"}, replicaCount: 3, config: {greeting: hi}}"#;
    files = repo(&name, changed, false);
    let (r, events) = pass(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    let hook_created = position(&events, &format!("created {hook}"));
    let configured = position(&events, &format!("configured Deployment/{name}/site-web"));
    assert!(hook_created < configured, "{events:#?}");
    let deployments: kube::Api<Deployment> = ns.api();
    let d = deployments.get("site-web").await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(3));
    let config: kube::Api<ConfigMap> = ns.api();
    let cm = config.get("site-web").await.unwrap();
    assert_eq!(cm.data.unwrap()["greeting"], "hi");

    // 5. A removed template: its object is pruned.
    files.remove("charts/web/templates/service.yaml");
    let (r, events) = pass(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    position(&events, &format!("deleted Service/{name}/site-web"));
    let services: kube::Api<Service> = ns.api();
    assert!(services.get_opt("site-web").await.unwrap().is_none());
    // No hook ran for a pass whose only change was a prune.
    assert!(!events.contains(&format!("created {hook}")), "{events:#?}");
    ns.delete().await;
}

/// `repo` with a group `base` before `apps`: chart `early` (the same chart, release `early`,
/// with `early_values`) deployed before `web`.
fn two_groups(ns: &str, early_values: &str, web_values: &str) -> BTreeMap<String, String> {
    let mut files = repo(ns, web_values, false);
    let early = format!(
        r#"apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChart
metadata: {{name: early, namespace: {ns}}}
spec:
  release: early
  namespace: {ns}
  source: {{type: local, location: charts/web}}
  dependencies: [weft-lib]
  values: {early_values}
  wait:
    timeout: 60
    labels: {{app.kubernetes.io/instance: site-early}}
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChartGroup
metadata: {{name: base, namespace: {ns}}}
spec:
  chart_group: [early]
---
"#
    );
    let docs = files.get_mut("armada.yaml").unwrap();
    *docs = format!(
        "{early}{}",
        docs.replace("chart_groups: [apps]", "chart_groups: [base, apps]")
    );
    files
}

#[tokio::test]
async fn a_required_value_missing_fails_its_chart_alone_and_is_reported_by_validate() {
    let ns = TestNamespace::new("helm-required").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let renderer = Arc::new(HelmRenderer::new(HelmLocation::Binary(
        helm().to_path_buf(),
    )));
    let opts = options(&name, &renderer);
    let image = "image: {repository: registry.example/web}";

    // 1. Both groups deploy.
    let good = two_groups(&name, &format!("{{{image}}}"), &format!("{{{image}}}"));
    let (r, events) = pass(&client, &good, &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));

    // 2. A null removes the chart's default, as in Helm: `required` fails for `web` only. The
    //    group before it is still deployed (its changed greeting applied), `web` keeps what it
    //    had, and nothing is pruned.
    let files = two_groups(
        &name,
        &format!("{{{image}, config: {{greeting: bonjour}}}}"),
        &format!("{{{image}, config: {{greeting: null}}}}"),
    );
    let (r, events) = pass(&client, &files, &opts).await;
    let text = error_text(&r);
    assert!(!r.succeeded(), "{events:#?}");
    assert!(
        text.contains(&format!("ArmadaChart {name}/web could not be rendered")),
        "{text}"
    );
    assert!(
        text.contains("web/templates/configmap.yaml:8:")
            && text.contains("config.greeting is required"),
        "{text}"
    );
    assert!(text.contains("nothing was pruned"), "{text}");
    let written = writes(&r);
    assert!(
        written.contains(&format!("configured ConfigMap/{name}/site-early-web")),
        "{written:#?}"
    );
    // The only deletion is the upgraded `early`'s hook Job (`hook-succeeded`): nothing pruned,
    // nothing of `web` written.
    let deleted: Vec<&String> = written
        .iter()
        .filter(|w| w.starts_with("deleted"))
        .collect();
    assert_eq!(
        deleted,
        vec![&format!("deleted Job/{name}/site-early-web-migrate")],
        "{written:#?}"
    );
    assert!(
        written.iter().all(|w| !w.contains("/site-web")),
        "{written:#?}"
    );
    let config_maps: kube::Api<ConfigMap> = ns.api();
    let early = config_maps.get("site-early-web").await.unwrap();
    assert_eq!(early.data.unwrap()["greeting"], "bonjour");
    let web = config_maps.get("site-web").await.unwrap();
    assert_eq!(web.data.unwrap()["greeting"], "hello");
    let deployments: kube::Api<Deployment> = ns.api();
    deployments.get("site-web").await.unwrap();

    // `weft validate`, offline, says the same and exits 1.
    let dir = tempfile::tempdir().unwrap();
    for (rel, content) in &files {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("validate")
        .arg(dir.path())
        .env("WEFT_HELM", helm())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(all.contains(&format!("ArmadaChart {name}/web")), "{all}");
    assert!(all.contains("web/templates/configmap.yaml:8:"), "{all}");

    // Without helm, the chart's error says how to get it.
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("validate")
        .arg(dir.path())
        .env("WEFT_HELM", "/nonexistent/helm")
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains(&format!("ArmadaChart {name}/web")), "{all}");
    assert!(all.contains("tests/helm/ensure"), "{all}");
    ns.delete().await;
}

/// The CRD of the `scalars` fixture's `ScalarProbe`: it keeps whatever it is given, so what the
/// API server stores is exactly the JSON the client sent.
async fn install_scalar_probe_crd(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    use kube::runtime::wait::{await_condition, conditions};
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "scalarprobes.weft.test"},
        "spec": {
            "group": "weft.test",
            "scope": "Namespaced",
            "names": {"plural": "scalarprobes", "singular": "scalarprobe", "kind": "ScalarProbe"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    }))
    .unwrap();
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    api.patch(
        "scalarprobes.weft.test",
        &PatchParams::apply("weft-test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(
            api,
            "scalarprobes.weft.test",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("CRD established")
    .unwrap();
}

/// An object as the API server stores it, as JSON.
async fn stored(client: &Client, ns: &str, api_version: &str, kind: &str, name: &str) -> Value {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client.clone(), ns, &resource);
    let object = api.get(name).await.unwrap();
    serde_json::to_value(object).unwrap()
}

#[tokio::test]
async fn yaml_1_1_scalars_deploy_as_helm_install_stores_them() {
    // The same chart twice: installed by the real `helm install` into one namespace, deployed
    // by Weft into another. What the API server stores must be the same: openstack-helm's
    // `defaultMode: 0555` is 365 (not 555.0, which the API server refuses), data strings stay
    // strings, and every other YAML 1.1 form reads as Kubernetes' client reads it.
    let by_helm = TestNamespace::new("scalars-helm").await;
    let by_weft = TestNamespace::new("scalars-weft").await;
    let client = by_weft.client();
    support::cluster::install_crds(&client).await;
    install_scalar_probe_crd(&client).await;

    let chart = root().join("tests/fixtures/helm/scalars");
    let home = tempfile::tempdir().unwrap();
    let cluster = support::cluster::cluster();
    let mut install = Command::new(helm());
    install
        .args(["install", "scalars"])
        .arg(&chart)
        .arg(format!("--namespace={}", by_helm.name()))
        .arg(format!(
            "--kubeconfig={}",
            cluster.kubeconfig_path().display()
        ));
    if let Some(context) = cluster.context() {
        install.arg(format!("--kube-context={context}"));
    }
    for (var, dir) in [
        ("HELM_CACHE_HOME", "cache"),
        ("HELM_CONFIG_HOME", "config"),
        ("HELM_DATA_HOME", "data"),
    ] {
        install.env(var, home.path().join(dir));
    }
    let out = install.output().unwrap();
    assert!(
        out.status.success(),
        "helm install: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let ns = by_weft.name().to_string();
    let mut files = BTreeMap::new();
    fixture("scalars", "charts/scalars", false, &mut files);
    files.insert(
        "armada.yaml".into(),
        format!(
            r#"apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChart
metadata: {{name: scalars, namespace: {ns}}}
spec:
  release: scalars
  namespace: {ns}
  source: {{type: local, location: charts/scalars}}
  wait: {{timeout: 60}}
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChartGroup
metadata: {{name: apps, namespace: {ns}}}
spec:
  chart_group: [scalars]
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaManifest
metadata: {{name: site, namespace: {ns}}}
spec:
  release_prefix: site
  chart_groups: [apps]
"#
        ),
    );
    let renderer = Arc::new(HelmRenderer::new(HelmLocation::Binary(
        helm().to_path_buf(),
    )));
    let opts = options(&ns, &renderer);
    let (r, events) = pass(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    let warnings: Vec<String> = r.diagnostics.warnings().map(|w| w.to_string()).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("key `twice` appears twice in the mapping at /data")),
        "{warnings:#?}"
    );

    let both = |path: &'static str| {
        let (helm_ns, weft_ns) = (by_helm.name().to_string(), ns.clone());
        let client = client.clone();
        async move {
            let (api_version, kind, pointer) = match path {
                "probe" => ("weft.test/v1", "ScalarProbe", "/spec"),
                "deployment" => ("apps/v1", "Deployment", "/spec"),
                _ => ("v1", "ConfigMap", "/data"),
            };
            let a = stored(&client, &helm_ns, api_version, kind, "scalars").await;
            let b = stored(&client, &weft_ns, api_version, kind, "scalars").await;
            (
                a.pointer(pointer).cloned().unwrap_or(Value::Null),
                b.pointer(pointer).cloned().unwrap_or(Value::Null),
            )
        }
    };
    let (helm_probe, weft_probe) = both("probe").await;
    assert_eq!(weft_probe, helm_probe);
    assert_eq!(helm_probe["integers"]["octal"], serde_json::json!(365));
    let (helm_data, weft_data) = both("configmap").await;
    assert_eq!(weft_data, helm_data);
    assert_eq!(weft_data["mode"], serde_json::json!("0555"));
    let (helm_spec, weft_spec) = both("deployment").await;
    for pointer in [
        "/replicas",
        "/revisionHistoryLimit",
        "/progressDeadlineSeconds",
        "/template/spec/automountServiceAccountToken",
        "/template/spec/terminationGracePeriodSeconds",
        "/template/spec/containers/0/tty",
        "/template/spec/volumes",
    ] {
        assert_eq!(
            weft_spec.pointer(pointer),
            helm_spec.pointer(pointer),
            "{pointer}"
        );
    }
    let modes: Vec<Value> = weft_spec["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.pointer("/configMap/defaultMode")
                .or_else(|| v.pointer("/secret/defaultMode"))
                .cloned()
                .unwrap()
        })
        .collect();
    assert_eq!(modes, [365, 292, 256]);
    println!(
        "stored by helm install and by weft alike: defaultMode 0555 → 365, 0444 → 292, 0o400 → 256"
    );
    by_helm.delete().await;
    by_weft.delete().await;
}
