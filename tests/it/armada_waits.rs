//! Armada's deploy semantics on the real control plane (tests/control-plane; kwok nodes run the
//! pods that may run), with a small Helm chart built here and rendered by the real helm
//! (`WEFT_HELM`, else `tests/helm/ensure`):
//!
//! - a chart whose pods a ResourceQuota forbids is not ready: without `wait.resources` a pod is
//!   required, so the chart fails after its `wait.timeout`, naming its `wait.labels`, and neither
//!   the next chart of its sequenced group nor the group after it is deployed;
//! - Armada v2's `wait.resources` mapping keeps the default types it does not drop;
//! - a DaemonSet updated with `OnDelete` is ready only with `allow_async_updates: true`;
//! - pods selected on the chart's own `app.kubernetes.io/managed-by: Helm` are found and ready;
//! - `upgrade.no_hooks: true`: the install runs the chart's hook, the upgrade does not;
//! - a release namespace that does not exist is created; removing its chart prunes it only when
//!   Weft created it and nothing else lives there.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ResourceQuota};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use support::cluster::TestNamespace;
use support::helm::helm;
use support::passes::pass_logged_with_reasons as pass;
use weft::apply::changeset::Action;
use weft::helm::{HelmLocation, HelmRenderer};
use weft::pass::{PassResult, PassSettings};

const CHART: &str = "apiVersion: v2\nname: app\nversion: 0.1.0\n";
const VALUES: &str = "replicas: 1\nversion: \"1\"\nhook: false\n";
/// A Deployment that selects its pods on helm's own `managed-by` label too, as many charts do.
const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
    app.kubernetes.io/managed-by: {{ .Release.Service }}
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ .Release.Name }}
      app.kubernetes.io/managed-by: {{ .Release.Service }}
  template:
    metadata:
      labels:
        app.kubernetes.io/instance: {{ .Release.Name }}
        app.kubernetes.io/managed-by: {{ .Release.Service }}
    spec:
      containers:
        - name: app
          image: registry.example/app:{{ .Values.version }}
"#;
/// A hook that records the version it ran with.
const HOOK: &str = r#"{{- if .Values.hook }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-hook
  annotations:
    helm.sh/hook: post-install,post-upgrade
    helm.sh/hook-delete-policy: before-hook-creation
data:
  version: {{ .Values.version | quote }}
{{- end }}
"#;

fn renderer() -> Arc<HelmRenderer> {
    Arc::new(HelmRenderer::new(HelmLocation::Binary(
        helm().to_path_buf(),
    )))
}

fn options(ns: &str) -> PassSettings {
    PassSettings {
        root_name: ns.to_string(),
        weft_namespace: ns.to_string(),
        default_namespace: ns.to_string(),
        timeout: Duration::from_secs(90),
        poll_interval: Duration::from_millis(300),
        helm: renderer(),
        ..PassSettings::default()
    }
}

/// The chart and `docs` as the repository's Armada documents.
fn repo(docs: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("charts/app/Chart.yaml".to_string(), CHART.to_string()),
        ("charts/app/values.yaml".to_string(), VALUES.to_string()),
        (
            "charts/app/templates/deployment.yaml".to_string(),
            DEPLOYMENT.to_string(),
        ),
        (
            "charts/app/templates/hook.yaml".to_string(),
            HOOK.to_string(),
        ),
        ("armada.yaml".to_string(), docs.to_string()),
    ])
}

/// An ArmadaChart of the chart, in `ns`, deployed into `release_ns`; `rest` is more YAML under
/// `spec` (indented by two).
fn chart(ns: &str, name: &str, release_ns: &str, rest: &str) -> String {
    format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  release: {name}\n  namespace: {release_ns}\n  source: {{type: local, location: charts/app}}\n{rest}"
    )
}

fn group(ns: &str, name: &str, sequenced: bool, charts: &[&str]) -> String {
    format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  sequenced: {sequenced}\n  chart_group: [{}]\n",
        charts.join(", ")
    )
}

fn manifest(ns: &str, groups: &[&str]) -> String {
    format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaManifest\nmetadata: {{name: site, namespace: {ns}}}\nspec:\n  release_prefix: site\n  chart_groups: [{}]\n",
        groups.join(", ")
    )
}

fn error_text(r: &PassResult) -> String {
    r.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
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

/// A ResourceQuota that forbids every pod of `ns`.
async fn forbid_pods(client: &Client, ns: &str) {
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), ns);
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-pods"},
        "spec": {"hard": {"pods": "0"}},
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
}

#[tokio::test]
async fn pods_a_quota_forbids_fail_their_chart_and_stop_the_groups_after_it() {
    let ns = TestNamespace::new("waits-quota").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    forbid_pods(&client, &name).await;
    // Armada's usual chart: `wait.labels`, no `resources`.
    let wait = |release: &str| {
        format!(
            "  wait:\n    timeout: 5\n    labels: {{app.kubernetes.io/instance: site-{release}}}\n"
        )
    };
    let mut docs = String::new();
    for c in ["blocked", "after", "later"] {
        docs.push_str(&chart(&name, c, &name, &wait(c)));
    }
    docs.push_str(&group(&name, "first", true, &["blocked", "after"]));
    docs.push_str(&group(&name, "second", false, &["later"]));
    docs.push_str(&manifest(&name, &["first", "second"]));

    let start = Instant::now();
    let (r, events) = pass(&client, &repo(&docs), &options(&name)).await;
    let took = start.elapsed();
    assert!(
        !r.succeeded(),
        "a chart without pods is not ready\n{events:#?}"
    );
    let text = error_text(&r);
    assert!(
        text.contains(&format!(
            "ArmadaChart {name}/blocked did not become ready within 5s (its wait.timeout); the charts after it were not deployed"
        )),
        "{text}"
    );
    assert!(
        text.contains("no Pod with labels {app.kubernetes.io/instance=site-blocked}: are `wait.labels` correct?"),
        "{text}"
    );
    // It waited for its timeout: "no pods match" is not an answer.
    assert!(took >= Duration::from_secs(5), "{took:?}");
    // The group order gates: neither the next chart of the sequenced group nor the next group.
    let deployments: Api<Deployment> = ns.api();
    assert!(deployments.get_opt("site-blocked").await.unwrap().is_some());
    for later in ["site-after", "site-later"] {
        assert!(
            deployments.get_opt(later).await.unwrap().is_none(),
            "{later} was deployed after a chart that was not ready\n{events:#?}"
        );
    }
    ns.delete().await;
}

#[tokio::test]
async fn a_v2_wait_mapping_waits_for_every_type_it_does_not_drop() {
    let ns = TestNamespace::new("waits-v2").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    forbid_pods(&client, &name).await;
    // `pod: false` and `daemonset: false` drop those types; the Deployment is still waited for
    // (Armada v2's default entry for a type the mapping does not name, not required).
    let docs = format!(
        r#"schema: armada/Chart/v2
metadata: {{schema: metadata/Document/v1, name: blocked, namespace: {name}}}
data:
  release: blocked
  namespace: {name}
  source: {{type: local, location: charts/app}}
  wait:
    timeout: 4
    labels: {{app.kubernetes.io/instance: site-blocked}}
    resources:
      pod: false
      daemonset: false
---
schema: armada/ChartGroup/v2
metadata: {{schema: metadata/Document/v1, name: first, namespace: {name}}}
data:
  chart_group: [blocked]
---
schema: armada/Manifest/v2
metadata: {{schema: metadata/Document/v1, name: site, namespace: {name}}}
data:
  release_prefix: site
  chart_groups: [first]
"#
    );
    let (r, events) = pass(&client, &repo(&docs), &options(&name)).await;
    assert!(!r.succeeded(), "{events:#?}");
    let text = error_text(&r);
    assert!(
        text.contains(&format!(
            "ArmadaChart {name}/blocked did not become ready within 4s"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("Deployment/{name}/site-blocked: ")),
        "the Deployment is waited for by the v2 default: {text}"
    );
    assert!(!text.contains("no Pod"), "`pod: false` drops pods: {text}");
    ns.delete().await;
}

#[tokio::test]
async fn helm_labelled_pods_are_waited_for_and_an_upgrade_with_no_hooks_runs_none() {
    let ns = TestNamespace::new("waits-hooks").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let docs = |version: &str| {
        let mut d = chart(
            &name,
            "web",
            &name,
            &format!(
                "  values: {{hook: true, version: \"{version}\"}}\n  upgrade:\n    no_hooks: true\n  wait:\n    timeout: 60\n    labels: {{app.kubernetes.io/managed-by: Helm, app.kubernetes.io/instance: site-web}}\n"
            ),
        );
        d.push_str(&group(&name, "first", true, &["web"]));
        d.push_str(&manifest(&name, &["first"]));
        d
    };
    let opts = options(&name);

    // Install: the pods keep helm's `managed-by: Helm` (Weft labels the Deployment itself), so
    // the chart's `wait.labels` find them; the post-install hook runs.
    let (r, events) = pass(&client, &repo(&docs("1")), &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    assert!(
        events
            .iter()
            .any(|e| e.starts_with(&format!("ready Pod/{name}/site-web-"))),
        "{events:#?}"
    );
    let pods: Api<Pod> = ns.api();
    let helm_pods = pods
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=Helm"))
        .await
        .unwrap();
    assert_eq!(helm_pods.items.len(), 1, "{:#?}", helm_pods.items);
    let deployments: Api<Deployment> = ns.api();
    let labels = deployments
        .get("site-web")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "weft");
    let config_maps: Api<ConfigMap> = ns.api();
    let hook_version = || async {
        config_maps
            .get("site-web-hook")
            .await
            .unwrap()
            .data
            .unwrap()["version"]
            .clone()
    };
    assert_eq!(hook_version().await, "1", "{events:#?}");

    // Nothing changed: nothing written.
    let (r, events) = pass(&client, &repo(&docs("1")), &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    assert_eq!(writes(&r), Vec::<String>::new());

    // Upgrade with `upgrade.no_hooks: true`: the objects change, no hook runs.
    let (r, events) = pass(&client, &repo(&docs("2")), &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    assert!(
        writes(&r).contains(&format!("configured Deployment/{name}/site-web")),
        "{events:#?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| e.contains("site-web-hook") || e.contains(" hook)")),
        "no hook runs on this upgrade: {events:#?}"
    );
    assert_eq!(hook_version().await, "1");
    ns.delete().await;
}

#[tokio::test]
async fn a_missing_release_namespace_is_created_and_pruned_only_when_weft_made_it_and_it_is_empty()
{
    let ns = TestNamespace::new("waits-ns").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let (ns_a, ns_b) = (format!("{name}-a"), format!("{name}-b"));
    let wait = |release: &str| {
        format!("  wait:\n    timeout: 60\n    labels: {{app.kubernetes.io/instance: site-{release}}}\n")
    };
    let docs = |charts: &[(&str, &str)]| {
        let mut d = String::new();
        for (c, release_ns) in charts {
            d.push_str(&chart(&name, c, release_ns, &wait(c)));
        }
        let names: Vec<&str> = charts.iter().map(|(c, _)| *c).collect();
        d.push_str(&group(&name, "first", false, &names));
        d.push_str(&manifest(&name, &["first"]));
        d
    };
    let all = docs(&[("a", &ns_a), ("b", &ns_b), ("c", &name)]);
    let opts = options(&name);
    let namespaces: Api<Namespace> = Api::all(client.clone());

    // 1. The missing namespaces are created, Weft's; the existing one is left as it is.
    let (r, events) = pass(&client, &repo(&all), &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    for created in [&ns_a, &ns_b] {
        let live = namespaces.get(created).await.unwrap();
        let labels = live.metadata.labels.unwrap_or_default();
        assert_eq!(labels["app.kubernetes.io/managed-by"], "weft");
        assert!(labels.contains_key("weft.io/owner"));
        assert_eq!(
            live.metadata.annotations.unwrap_or_default()["weft.io/create"],
            "if-missing"
        );
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), created);
        assert!(deployments
            .get_opt(&format!("site-{}", &created[created.len() - 1..]))
            .await
            .unwrap()
            .is_some());
    }
    let existing = namespaces.get(&name).await.unwrap();
    assert!(
        !existing
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("weft.io/owner"),
        "an existing namespace is never adopted"
    );
    assert!(!existing
        .metadata
        .annotations
        .unwrap_or_default()
        .contains_key("weft.io/create"));

    // 2. Nothing changed: nothing written.
    let (r, events) = pass(&client, &repo(&all), &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    assert_eq!(writes(&r), Vec::<String>::new());

    // 3. Someone keeps notes in b's namespace; charts a and b leave git.
    let notes: Api<ConfigMap> = Api::namespaced(client.clone(), &ns_b);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "notes"}})).unwrap();
    notes.create(&PostParams::default(), &cm).await.unwrap();
    let only_c = docs(&[("c", &name)]);
    let (r, events) = pass(
        &client,
        &repo(&only_c),
        &PassSettings {
            force_prune: true,
            ..opts.clone()
        },
    )
    .await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    // a's namespace held only a's objects: pruned.
    let gone = namespaces
        .get_opt(&ns_a)
        .await
        .unwrap()
        .is_none_or(|n| n.metadata.deletion_timestamp.is_some());
    assert!(gone, "{events:#?}");
    assert!(
        events.contains(&format!("deleted Namespace/{ns_a}")),
        "{events:#?}"
    );
    // b's holds someone's ConfigMap: kept, and the pass says why.
    let kept = namespaces.get(&ns_b).await.unwrap();
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert!(
        events
            .iter()
            .any(|e| e.starts_with(&format!("skipped Namespace/{ns_b}"))
                && e.contains("ConfigMap/notes lives there too")),
        "{events:#?}"
    );
    // The existing namespace of chart c is untouched.
    assert!(namespaces
        .get(&name)
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_none());

    for extra in [&ns_a, &ns_b] {
        let _ = namespaces.delete(extra, &DeleteParams::default()).await;
    }
    ns.delete().await;
}

/// A DaemonSet whose pods are replaced only when someone deletes them.
const DAEMONSET: &str = r#"apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .Release.Name }}
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  updateStrategy:
    type: OnDelete
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ .Release.Name }}
  template:
    metadata:
      labels:
        app.kubernetes.io/instance: {{ .Release.Name }}
    spec:
      containers:
        - name: agent
          image: registry.example/agent:{{ .Values.version }}
"#;

#[tokio::test]
async fn an_on_delete_update_is_ready_only_with_allow_async_updates() {
    let ns = TestNamespace::new("waits-async").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let files = |version: &str, allow: bool| {
        let mut f = BTreeMap::from([
            (
                "charts/agent/Chart.yaml".to_string(),
                "apiVersion: v2\nname: agent\nversion: 0.1.0\n".to_string(),
            ),
            (
                "charts/agent/templates/daemonset.yaml".to_string(),
                DAEMONSET.to_string(),
            ),
        ]);
        let mut docs = format!(
            "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: agent, namespace: {name}}}\nspec:\n  release: agent\n  namespace: {name}\n  source: {{type: local, location: charts/agent}}\n  values: {{version: \"{version}\"}}\n  wait:\n    timeout: 4\n    labels: {{app.kubernetes.io/instance: site-agent}}\n    resources:\n      - type: daemonset\n        allow_async_updates: {allow}\n"
        );
        docs.push_str(&group(&name, "first", true, &["agent"]));
        docs.push_str(&manifest(&name, &["first"]));
        f.insert("armada.yaml".to_string(), docs);
        f
    };
    let opts = options(&name);

    // The install is no update: ready once its pods are.
    let (r, events) = pass(&client, &files("1", false), &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));

    // An update that leaves the old pods running: never ready, as in Armada.
    let (r, events) = pass(&client, &files("2", false), &opts).await;
    assert!(!r.succeeded(), "{events:#?}");
    let text = error_text(&r);
    assert!(
        text.contains(&format!(
            "DaemonSet/{name}/site-agent: async update not allowed: update strategy type is OnDelete"
        )),
        "{text}"
    );

    // Allowed: judged by its pods (all available, old or new), so ready.
    let (r, events) = pass(&client, &files("3", true), &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    ns.delete().await;
}

/// keystone's shape: a `pre-install` hook Secret kept by its delete policy (`hook-failed`,
/// `helm.sh/resource-policy: keep`) beside a plain Secret of the same chart. The hook outlives
/// the pass that ran it: a chart's inventory rebuilt from its labelled objects (the chart has
/// Secrets, so Secrets are listed) must not count the hook, or the prune deleted it at once.
#[tokio::test]
async fn a_hook_kept_by_its_delete_policy_is_not_pruned_with_the_chart_s_own_secrets() {
    let ns = TestNamespace::new("waits-kept-hook").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let templates = r#"apiVersion: v1
kind: Secret
metadata:
  name: {{ .Release.Name }}-fernet-keys
  annotations:
    "helm.sh/hook": pre-install
    "helm.sh/hook-delete-policy": hook-failed
    "helm.sh/resource-policy": keep
type: Opaque
data: {}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ .Release.Name }}-db-password
type: Opaque
stringData:
  password: not-a-secret
"#;
    let mut docs = chart(&name, "ks", &name, "  wait: {resources: []}\n");
    docs.push_str(&group(&name, "identity", true, &["ks"]));
    docs.push_str(&manifest(&name, &["identity"]));
    let files = BTreeMap::from([
        ("charts/app/Chart.yaml".to_string(), CHART.to_string()),
        (
            "charts/app/templates/secrets.yaml".to_string(),
            templates.to_string(),
        ),
        ("armada.yaml".to_string(), docs),
    ]);
    let opts = options(&name);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = ns.api();

    let (r, events) = pass(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    assert!(
        events.contains(&format!(
            "created Secret/{name}/site-ks-fernet-keys (pre-install hook)"
        )),
        "{events:#?}"
    );
    assert!(
        !events.iter().any(|e| e.starts_with("deleted ")),
        "nothing is pruned on an install: {events:#?}"
    );
    assert!(secrets
        .get_opt("site-ks-fernet-keys")
        .await
        .unwrap()
        .is_some());
    assert!(secrets
        .get_opt("site-ks-db-password")
        .await
        .unwrap()
        .is_some());

    // The next pass changes nothing, runs no hook and still keeps it.
    let (r, events) = pass(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    assert_eq!(writes(&r), Vec::<String>::new(), "{events:#?}");
    assert!(secrets
        .get_opt("site-ks-fernet-keys")
        .await
        .unwrap()
        .is_some());
    ns.delete().await;
}
