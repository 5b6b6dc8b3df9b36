//! Armada's last mile on the real control plane (issue 49), with fixtures of the shapes an
//! Airship site has, built here:
//!
//! - a sequenced group whose first chart's pods a ResourceQuota forbids, deployed by `weft sync`
//!   from ArmadaChart CRs in a namespace that does not exist yet: the CRs' namespace is created;
//!   the failed chart is `failed` with `Ready=False` and the wait's reason, the chart after it
//!   `pending`/`Blocked` naming it (in the CRs and in `weft get charts`); the chart after it gets
//!   neither its release namespace nor its ClusterRole (each release in its own wave); what the
//!   failed pass created is in an inventory, so `weft uninstall --prune` finds it;
//! - a Helm chart whose ConfigMap carries an nginx template with literal `{{` deploys, with a
//!   warning naming the key;
//! - an Armada `--values` override file (`--armada-values`) changes the charts and groups it
//!   names, and is not read as documents of its own.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use support::cluster::TestNamespace;
use support::helm::helm;
use support::passes::pass;
use support::repo_dir::Repo;
use support::weft_cli::Weft;
use weft::api::armada::{ArmadaChart, Phase};
use weft::api::conditions::{Condition, ConditionStatus};
use weft::helm::{HelmLocation, HelmRenderer};
use weft::pass::{PassResult, PassSettings};

/// A chart in Weft's `${}` format: a Deployment, and a ClusterRole with its binding (named after
/// the test, as they are cluster-wide).
const CHART: &str =
    "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n";
const VALUES: &str = "version: \"1\"\nprefix: x\n";
const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: ${release.name}
  labels: {app.kubernetes.io/instance: "${release.name}"}
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/instance: "${release.name}"}
  template:
    metadata:
      labels: {app.kubernetes.io/instance: "${release.name}"}
    spec:
      containers:
        - name: app
          image: registry.example/app:${version}
"#;
const RBAC: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ${prefix}-${release.name}
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ${prefix}-${release.name}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: ${prefix}-${release.name}
subjects:
  - kind: ServiceAccount
    name: default
    namespace: ${release.namespace}
"#;

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ready(chart: &ArmadaChart) -> Condition {
    chart
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .cloned()
        .unwrap_or_else(|| panic!("no Ready condition: {:?}", chart.status))
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
async fn a_quota_blocked_group_tells_the_truth_and_the_chart_after_it_gets_nothing() {
    let ns = TestNamespace::new("truth").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    forbid_pods(&client, &name).await;
    // The CRs live in a namespace nobody created; `after` deploys into another.
    let crs = format!("{name}-cr");
    let after_ns = format!("{name}-after");
    let chart = |chart: &str, release_ns: &str| {
        format!(
            "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: {chart}, namespace: {crs}}}\nspec:\n  chart_name: app\n  release: {chart}\n  namespace: {release_ns}\n  source: {{type: local, location: charts/app}}\n  values: {{prefix: {name}}}\n  wait:\n    timeout: 4\n    labels: {{app.kubernetes.io/instance: site-{chart}}}\n"
        )
    };
    let repo = Repo::new();
    repo.write("charts/app/Chart.yaml", CHART);
    repo.write("charts/app/values.yaml", VALUES);
    repo.write("charts/app/templates/deployment.yaml", DEPLOYMENT);
    repo.write("charts/app/templates/rbac.yaml", RBAC);
    repo.write(
        "armada.yaml",
        &format!(
            "{}{}---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: first, namespace: {crs}}}\nspec:\n  sequenced: true\n  chart_group: [blocked, after]\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaManifest\nmetadata: {{name: site, namespace: {crs}}}\nspec:\n  release_prefix: site\n  chart_groups: [first]\n",
            chart("blocked", &name),
            chart("after", &after_ns)
        ),
    );

    let out = Weft::new(["sync", "--timeout", "60s"])
        .cluster()
        .root(&name)
        .repo(repo.path())
        .env("WEFT_LOG", "warn")
        .output();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "ArmadaChart {crs}/blocked did not become ready within 4s"
        )),
        "{said}"
    );
    assert!(
        !said.contains("not found"),
        "the CRs' namespace is created: {said}"
    );

    // The CRs' own namespace was created; the charts' status tells what happened.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(namespaces.get_opt(&crs).await.unwrap().is_some());
    let charts: Api<ArmadaChart> = Api::namespaced(client.clone(), &crs);
    let blocked = charts.get("blocked").await.unwrap();
    let status = blocked.status.clone().unwrap_or_default();
    assert_eq!(status.phase, Some(Phase::Failed), "{status:?}");
    let r = ready(&blocked);
    assert_eq!(
        (&r.status, r.reason.as_str()),
        (&ConditionStatus::False, "WaitFailed"),
        "{r:?}"
    );
    assert!(
        r.message.contains("did not become ready within 4s")
            && r.message
                .contains("no Pod with labels {app.kubernetes.io/instance=site-blocked}"),
        "{r:?}"
    );
    let after = charts.get("after").await.unwrap();
    assert_eq!(
        after.status.clone().unwrap_or_default().phase,
        Some(Phase::Pending)
    );
    let r = ready(&after);
    assert_eq!(
        (&r.status, r.reason.as_str()),
        (&ConditionStatus::False, "Blocked"),
        "{r:?}"
    );
    assert_eq!(
        r.message,
        format!("not deployed: blocked by chart {crs}/blocked (group {crs}/first), which did not become ready")
    );
    // `weft get charts` says the same.
    let got = Weft::new(["get", "charts", "-n", &crs]).cluster().output();
    let table = text(&got);
    for line in table.lines().filter(|l| l.starts_with("ArmadaChart")) {
        assert!(line.contains(" False "), "{table}");
    }
    assert!(
        table.contains("blocked") && table.contains("after"),
        "{table}"
    );

    // Each release in its own wave: the chart never reached got no namespace and no RBAC.
    let roles: Api<ClusterRole> = Api::all(client.clone());
    assert!(namespaces.get_opt(&after_ns).await.unwrap().is_none());
    assert!(roles
        .get_opt(&format!("{name}-site-after"))
        .await
        .unwrap()
        .is_none());
    let blocked_role = format!("{name}-site-blocked");
    assert!(roles.get_opt(&blocked_role).await.unwrap().is_some());
    // What the failed pass created is in the chart's inventory…
    let inventory = serde_json::to_string(&status.inventory).unwrap();
    assert!(inventory.contains(&blocked_role), "{inventory}");

    // …so `weft uninstall --prune` finds it.
    let out = Weft::new(["uninstall", "--prune"])
        .cluster()
        .root(&name)
        .env("WEFT_LOG", "warn")
        .output();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!("ClusterRole/{blocked_role} deleted")),
        "{said}"
    );
    assert!(roles.get_opt(&blocked_role).await.unwrap().is_none());
    let deployments: Api<Deployment> = ns.api();
    assert!(deployments.get_opt("site-blocked").await.unwrap().is_none());

    let _ = namespaces.delete(&crs, &DeleteParams::default()).await;
    ns.delete().await;
}

fn settings(ns: &str) -> PassSettings {
    PassSettings {
        root_name: ns.to_string(),
        weft_namespace: ns.to_string(),
        default_namespace: ns.to_string(),
        timeout: Duration::from_secs(60),
        poll_interval: Duration::from_millis(300),
        helm: Arc::new(HelmRenderer::new(HelmLocation::Binary(
            helm().to_path_buf(),
        ))),
        ..PassSettings::default()
    }
}

fn error_text(r: &PassResult) -> String {
    r.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
}

#[tokio::test]
async fn literal_braces_in_a_config_map_deploy_with_a_warning() {
    let ns = TestNamespace::new("truth-braces").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    // The shape of a chart that ships its ingress controller's nginx template as a file.
    let nginx = "{{ range $server := .Servers }}\nserver {{ $server.Hostname }};\n{{ end }}\n";
    let files = BTreeMap::from([
        (
            "charts/db/Chart.yaml",
            "apiVersion: v2\nname: db\nversion: 0.1.0\n".to_string(),
        ),
        ("charts/db/files/nginx.tmpl", nginx.to_string()),
        (
            "charts/db/templates/configmap-ingress-etc.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-ingress-etc\ndata:\n  nginx.tmpl: |\n{{ .Files.Get \"files/nginx.tmpl\" | indent 4 }}\n".to_string(),
        ),
        (
            "armada.yaml",
            format!("---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: db, namespace: {name}}}\nspec:\n  release: db\n  namespace: {name}\n  source: {{type: local, location: charts/db}}\n  wait: {{timeout: 30, resources: []}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: g, namespace: {name}}}\nspec:\n  chart_group: [db]\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaManifest\nmetadata: {{name: site, namespace: {name}}}\nspec:\n  release_prefix: site\n  chart_groups: [g]\n"),
        ),
    ]);
    let r = pass(&client, &files, &settings(&name)).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    let cms: Api<ConfigMap> = ns.api();
    let cm = cms.get("site-db-ingress-etc").await.unwrap();
    assert_eq!(cm.data.unwrap()["nginx.tmpl"], nginx);
    let warnings: Vec<String> = r
        .set
        .as_ref()
        .expect("a set")
        .warnings()
        .iter()
        .map(|(_, w)| w.clone())
        .collect();
    assert!(
        warnings.iter().any(|w| w
            .contains("ConfigMap/site-db-ingress-etc: data key `nginx.tmpl` keeps a literal `{{`")),
        "{warnings:#?}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn armada_values_override_documents_change_the_charts_they_name() {
    let ns = TestNamespace::new("truth-values").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    // Native Armada documents, as a site keeps them; the override file as Armada's examples
    // shape it: part of a chart's `data`, and a group's list given as a comma-separated string.
    let chart = |chart: &str| {
        format!("---\nschema: armada/Chart/v1\nmetadata: {{schema: metadata/Document/v1, name: {chart}}}\ndata:\n  chart_name: app\n  release: {chart}\n  namespace: {name}\n  source: {{type: local, location: charts/app}}\n  values: {{prefix: {name}}}\n  wait: {{timeout: 30, resources: []}}\n")
    };
    let mut docs = chart("api");
    docs.push_str(&chart("web"));
    docs.push_str("---\nschema: armada/ChartGroup/v1\nmetadata: {schema: metadata/Document/v1, name: apps}\ndata:\n  chart_group: [api]\n---\nschema: armada/Manifest/v1\nmetadata: {schema: metadata/Document/v1, name: site}\ndata:\n  release_prefix: site\n  chart_groups: [apps]\n");
    let overrides = "---\nschema: armada/Chart/v1\nmetadata: {schema: metadata/Document/v1, name: api}\ndata:\n  values: {version: \"2\"}\n---\nschema: armada/ChartGroup/v1\nmetadata: {schema: metadata/Document/v1, name: apps}\ndata:\n  chart_group: api,web\n";
    let files = BTreeMap::from([
        ("charts/app/Chart.yaml", CHART.to_string()),
        ("charts/app/values.yaml", VALUES.to_string()),
        (
            "charts/app/templates/deployment.yaml",
            DEPLOYMENT.to_string(),
        ),
        ("armada.yaml", docs),
        ("site/override.yaml", overrides.to_string()),
    ]);
    let opts = PassSettings {
        armada_values: vec!["site/override.yaml".into()],
        ..settings(&name)
    };
    let r = pass(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    let deployments: Api<Deployment> = ns.api();
    let image = |d: Deployment| {
        d.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .clone()
            .unwrap()
    };
    assert_eq!(
        image(deployments.get("site-api").await.unwrap()),
        "registry.example/app:2"
    );
    // The group's list, overridden by a string, now deploys `web` too (with its own values).
    assert_eq!(
        image(deployments.get("site-web").await.unwrap()),
        "registry.example/app:1"
    );

    // An override file that is not in the repository is an error, and nothing is applied.
    let opts = PassSettings {
        armada_values: vec!["site/missing.yaml".into()],
        ..settings(&name)
    };
    let r = pass(&client, &files, &opts).await;
    assert!(
        error_text(&r).contains(
            "Armada override file `site/missing.yaml` (--armada-values) is not in the repository"
        ),
        "{}",
        error_text(&r)
    );
    ns.delete().await;
}

/// In `weft run`: the quota-blocked chart is `failed` (not `deployed` with `Ready=False`), the
/// chart after it `pending`/`Blocked` (never `Ready=True`), the daemon's status says the same,
/// and the pass's wait for the blocked chart is logged at info level while it lasts.
#[tokio::test]
async fn the_daemon_tells_the_truth_and_says_what_it_waits_for() {
    use support::daemon::{Daemon, DaemonOptions};
    use support::git_servers::{GitDaemon, RepoHost, WorkTree};

    let ns = TestNamespace::new("truth-daemon").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    forbid_pods(&client, &name).await;
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write("charts/app/Chart.yaml", CHART);
    work.write("charts/app/values.yaml", VALUES);
    work.write("charts/app/templates/deployment.yaml", DEPLOYMENT);
    let chart = |chart: &str| {
        format!(
            "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: {chart}, namespace: {name}}}\nspec:\n  chart_name: app\n  release: {chart}\n  namespace: {name}\n  source: {{type: local, location: charts/app}}\n  wait:\n    timeout: 9\n    labels: {{app.kubernetes.io/instance: {chart}}}\n"
        )
    };
    work.write(
        "armada.yaml",
        format!(
            "{}{}---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: first, namespace: {name}}}\nspec:\n  sequenced: true\n  chart_group: [blocked, after]\n",
            chart("blocked"),
            chart("after")
        ),
    );
    work.commit("charts");
    work.push();
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&server.url("config.git"), &name)
    });
    let report = d
        .wait_status("the pass is reported", Duration::from_secs(60), |s| {
            !s["lastPass"]["result"].is_null()
        })
        .await;
    assert_eq!(report["lastPass"]["result"], "failed", "{report:#}");
    let charts: Api<ArmadaChart> = ns.api();
    let blocked = charts.get("blocked").await.unwrap();
    assert_eq!(
        blocked.status.clone().unwrap_or_default().phase,
        Some(Phase::Failed),
        "{}",
        d.logs()
    );
    assert_eq!(ready(&blocked).status, ConditionStatus::False);
    let after = charts.get("after").await.unwrap();
    assert_eq!(
        after.status.clone().unwrap_or_default().phase,
        Some(Phase::Pending)
    );
    assert_eq!(
        (ready(&after).status, ready(&after).reason),
        (ConditionStatus::False, "Blocked".to_string())
    );
    for (chart, version) in [("blocked", "failed"), ("after", "pending")] {
        let owner = &report["owners"][format!("ArmadaChart/{name}/{chart}")];
        assert_eq!(owner["ready"], "False", "{report:#}");
        assert_eq!(owner["version"], version, "{report:#}");
    }
    // The wait said what it waited for, at info level, while it lasted.
    let logs = d.logs();
    assert!(
        logs.lines().any(|l| l.contains(" INFO ")
            && l.contains(&format!("waiting for chart {name}/blocked: "))
            && l.contains("s so far; nothing it waits for exists yet")),
        "{logs}"
    );
    drop(d);
    drop(server);
    ns.delete().await;
}

/// A chart's Namespace that a chart of an earlier wave deploys into is still created before that
/// wave (only the namespaces and cluster objects no earlier wave needs wait for their release).
#[tokio::test]
async fn a_namespace_an_earlier_wave_needs_comes_before_it() {
    let ns = TestNamespace::new("truth-shared").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let shared = format!("{name}-shared");
    let format = "annotations: {weft.io/template-format: substitution}\n";
    let chart = |chart: &str, location: &str| {
        format!("---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: {chart}, namespace: {name}}}\nspec:\n  release: {chart}\n  namespace: {shared}\n  source: {{type: local, location: {location}}}\n  values: {{shared: {shared}}}\n  wait: {{timeout: 30, resources: []}}\n")
    };
    let files = BTreeMap::from([
        ("charts/cm/Chart.yaml", format!("name: cm\nversion: 1.0.0\n{format}")),
        (
            "charts/cm/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${release.name}\ndata: {a: b}\n".to_string(),
        ),
        ("charts/ns/Chart.yaml", format!("name: ns\nversion: 1.0.0\n{format}")),
        ("charts/ns/values.yaml", "shared: x\n".to_string()),
        (
            "charts/ns/templates/ns.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ${shared}\n".to_string(),
        ),
        (
            "armada.yaml",
            format!(
                "{}{}---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: g, namespace: {name}}}\nspec:\n  sequenced: true\n  chart_group: [early, late]\n",
                chart("early", "charts/cm"),
                chart("late", "charts/ns")
            ),
        ),
    ]);
    let r = pass(&client, &files, &settings(&name)).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &shared);
    assert!(cms.get_opt("early").await.unwrap().is_some());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&shared, &DeleteParams::default()).await;
    ns.delete().await;
}
