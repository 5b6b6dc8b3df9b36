//! Armada charts deployed by `weft sync` against the real control plane (tests/control-plane,
//! kwok nodes run the pods): a sequenced group chart by chart, each chart waited for by its own
//! `wait` block (`min_ready`, `wait.timeout`), a failed chart stopping its group unless it is
//! protected with `continue_processing`, and `upgrade.pre.delete` before an upgrade.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use weft::api::owner::OwnerKind;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};

use support::cluster::{self, TestNamespace};
use support::passes::pass_logged as pass;
use weft::apply::changeset::Action;
use weft::pass::{PassResult, PassSettings};

const CHART: &str =
    "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n";
const VALUES: &str = "replicas: 1\nversion: \"1\"\nnodeSelector: {}\nports: []\n";
const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: ${release.name}
  labels:
    app.kubernetes.io/instance: ${release.name}
spec:
  replicas: ${replicas}
  selector:
    matchLabels:
      app.kubernetes.io/instance: ${release.name}
  template:
    metadata:
      labels:
        app.kubernetes.io/instance: ${release.name}
    spec:
      nodeSelector: ${nodeSelector}
      containers:
        - name: app
          image: registry.example/app:${version}
          ports: ${ports}
"#;
const MIGRATE_JOB: &str = r#"apiVersion: batch/v1
kind: Job
metadata:
  name: ${release.name}-migrate
  labels:
    app.kubernetes.io/name: migrate
spec:
  template:
    metadata:
      labels:
        app.kubernetes.io/name: migrate
    spec:
      restartPolicy: Never
      nodeSelector: {weft.test/no-such-node: "true"}
      containers:
        - name: migrate
          image: registry.example/migrate:1
"#;
const SETTINGS: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: ${release.name}-settings
data:
  version: "${version}"
"#;

fn options(ns: &str) -> PassSettings {
    PassSettings {
        root_name: ns.to_string(),
        weft_namespace: ns.to_string(),
        default_namespace: ns.to_string(),
        timeout: Duration::from_secs(90),
        poll_interval: Duration::from_millis(300),
        ..PassSettings::default()
    }
}

/// A repository with the `app` chart (a Deployment, plus the migration Job and a ConfigMap when
/// `with_job`) and `docs` as its Armada documents.
fn repo(docs: &str, with_job: bool) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    files.insert("charts/app/Chart.yaml".into(), CHART.into());
    files.insert("charts/app/values.yaml".into(), VALUES.into());
    files.insert(
        "charts/app/templates/deployment.yaml".into(),
        DEPLOYMENT.into(),
    );
    if with_job {
        files.insert(
            "charts/app/templates/migrate.yaml".into(),
            MIGRATE_JOB.into(),
        );
        files.insert("charts/app/templates/settings.yaml".into(), SETTINGS.into());
    }
    files.insert("armada.yaml".into(), docs.into());
    files
}

/// An ArmadaChart of the `app` chart; `extra` is more YAML under `spec` (indented by two).
fn chart(ns: &str, name: &str, values: &str, wait: &str, extra: &str) -> String {
    format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  chart_name: app\n  release: {name}\n  namespace: {ns}\n  source: {{type: local, location: charts/app}}\n  values: {values}\n  wait:\n{wait}{extra}"
    )
}

/// The usual wait: the chart's Deployment, all replicas, a few seconds at most.
fn deployment_wait(name: &str, timeout: u32, min_ready: &str) -> String {
    format!(
        "    timeout: {timeout}\n    labels: {{app.kubernetes.io/instance: {name}}}\n    resources:\n      - type: deployment\n        min_ready: {min_ready}\n"
    )
}

fn group(ns: &str, name: &str, charts: &[&str]) -> String {
    format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  sequenced: true\n  chart_group: [{}]\n",
        charts.join(", ")
    )
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

#[tokio::test]
async fn a_sequenced_group_is_deployed_chart_by_chart() {
    let ns = TestNamespace::new("armada-seq").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let mut docs = String::new();
    for c in ["first", "second"] {
        docs.push_str(&chart(&name, c, "{}", &deployment_wait(c, 60, "1"), ""));
    }
    docs.push_str(&group(&name, "apps", &["first", "second"]));
    let (r, events) = pass(&client, &repo(&docs, false), &options(&name)).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    let first_ready = position(&events, &format!("ready Deployment/{name}/first"));
    let second_created = position(&events, &format!("created Deployment/{name}/second"));
    assert!(
        position(&events, &format!("created Deployment/{name}/first")) < first_ready,
        "{events:#?}"
    );
    assert!(first_ready < second_created, "{events:#?}");
    // The cluster agrees: the second Deployment was made after the first one was available.
    let deployments: Api<Deployment> = ns.api();
    let first = deployments.get("first").await.expect("first");
    let second = deployments.get("second").await.expect("second");
    let available_at = first
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Available" && c.status == "True")
        .and_then(|c| c.last_transition_time)
        .expect("first is Available");
    let created = second.metadata.creation_timestamp.expect("created");
    assert!(
        created.0 >= available_at.0,
        "{created:?} < {available_at:?}"
    );
    ns.delete().await;
}

/// The first Ready kwok node: a Deployment pinned to it with a host port has room for one pod.
async fn one_node(client: &Client) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .list(&Default::default())
        .await
        .expect("nodes")
        .items
        .into_iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|n| n.labels().get("kubernetes.io/hostname").cloned())
        .next()
        .expect("a Ready node")
}

#[tokio::test]
async fn min_ready_fifty_percent_passes_with_half_of_the_replicas_ready() {
    let ns = TestNamespace::new("armada-minready").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let node = one_node(&client).await;
    // Two replicas on one node, both asking for the same host port: only one can be scheduled.
    let port = 20000 + (std::process::id() % 20000);
    let values = format!(
        "{{replicas: 2, nodeSelector: {{kubernetes.io/hostname: {node}}}, ports: [{{containerPort: 8080, hostPort: {port}}}]}}"
    );
    let mut docs = chart(
        &name,
        "half",
        &values,
        &deployment_wait("half", 60, "\"50%\""),
        "",
    );
    docs.push_str(&group(&name, "apps", &["half"]));
    let (r, events) = pass(&client, &repo(&docs, false), &options(&name)).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    assert!(events.contains(&format!("ready Deployment/{name}/half")));
    let deployments: Api<Deployment> = ns.api();
    let status = deployments
        .get("half")
        .await
        .expect("half")
        .status
        .expect("status");
    assert_eq!(status.replicas, Some(2), "{status:?}");
    assert_eq!(status.available_replicas, Some(1), "{status:?}");

    // 100% of the same Deployment is not reachable: the chart times out naming it.
    let docs = chart(
        &name,
        "half",
        &values,
        &deployment_wait("half", 3, "\"100%\""),
        "",
    ) + &group(&name, "apps", &["half"]);
    let (r, _) = pass(&client, &repo(&docs, false), &options(&name)).await;
    let err = error_text(&r);
    assert!(
        err.contains(&format!(
            "ArmadaChart {name}/half did not become ready within 3s (its wait.timeout)"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "Deployment/{name}/half: 1 of 2 replicas available, 2 needed (min_ready)"
        )),
        "{err}"
    );
    ns.delete().await;
}

/// `first` never becomes ready (no node matches its selector); `after` is the next chart of the
/// sequenced group; `protected` adds `protected.continue_processing: true` to `first`.
fn stuck_group(ns: &str, protected: bool) -> String {
    let extra = if protected {
        "  protected:\n    continue_processing: true\n"
    } else {
        ""
    };
    let mut docs = chart(
        ns,
        "stuck",
        "{nodeSelector: {weft.test/no-such-node: \"true\"}}",
        &deployment_wait("stuck", 3, "1"),
        extra,
    );
    docs.push_str(&chart(
        ns,
        "after",
        "{}",
        &deployment_wait("after", 60, "1"),
        "",
    ));
    docs.push_str(&group(ns, "apps", &["stuck", "after"]));
    docs
}

#[tokio::test]
async fn a_chart_that_times_out_stops_its_group() {
    let ns = TestNamespace::new("armada-stuck").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let started = std::time::Instant::now();
    let (r, events) = pass(
        &client,
        &repo(&stuck_group(&name, false), false),
        &options(&name),
    )
    .await;
    let err = error_text(&r);
    assert!(
        err.contains(&format!(
            "ArmadaChart {name}/stuck did not become ready within 3s (its wait.timeout); the charts after it were not deployed"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "Deployment/{name}/stuck: 0 of 1 replicas available, 1 needed (min_ready)"
        )),
        "{err}"
    );
    // The chart's own timeout, not the pass's 90 s.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    // Only its ArmadaChart (the sync layer, wave 0) was applied, none of its objects.
    assert!(
        !events
            .iter()
            .any(|e| e.contains("/after") && !e.contains("ArmadaChart/")),
        "{events:#?}"
    );
    let deployments: Api<Deployment> = ns.api();
    assert!(deployments.get_opt("after").await.expect("GET").is_none());
    ns.delete().await;
}

#[tokio::test]
async fn a_protected_chart_with_continue_processing_lets_its_group_go_on_and_the_cli_fails() {
    let ns = TestNamespace::new("armada-protected").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, text) in repo(&stuck_group(&name, true), false) {
        let p = dir.path().join(file);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    let out = weft_sync(dir.path(), &name);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "ArmadaChart {name}/stuck did not become ready within 3s (its wait.timeout); it is protected with continue_processing, so the charts after it were deployed"
        )),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "Deployment/{name}/stuck: 0 of 1 replicas available"
        )),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!("ready      Deployment/{name}/after")),
        "{stdout}"
    );
    let deployments: Api<Deployment> = ns.api();
    assert!(deployments.get_opt("after").await.expect("GET").is_some());
    ns.delete().await;
}

fn weft_sync(repo: &Path, ns: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("sync")
        .arg("--repo")
        .arg(repo)
        .args(cluster::cluster().kube_args())
        .args([
            "--weft-namespace",
            ns,
            "--root-name",
            ns,
            "--timeout",
            "90s",
        ])
        .env_remove("KUBECONFIG")
        .env("WEFT_LOG", "warn")
        .output()
        .expect("run weft")
}

#[tokio::test]
async fn upgrade_pre_delete_removes_the_charts_own_job_but_not_a_foreign_one() {
    let ns = TestNamespace::new("armada-predelete").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    // The migration Job never runs (no node for it): the wait looks at the Deployment only.
    let docs = |version: &str| {
        chart(
            &name,
            "api",
            &format!("{{version: \"{version}\"}}"),
            &deployment_wait("api", 60, "1"),
            "  upgrade:\n    pre:\n      delete:\n        - type: job\n          labels:\n            app.kubernetes.io/name: migrate\n",
        ) + &group(&name, "apps", &["api"])
    };
    let (r, events) = pass(&client, &repo(&docs("1"), true), &options(&name)).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    // A first install deletes nothing.
    assert!(
        r.changes.with_action(Action::Deleted).next().is_none(),
        "{:#?}",
        r.changes
    );
    let jobs: Api<Job> = ns.api();
    let ours = jobs.get("api-migrate").await.expect("our Job");
    // A Job with the same labels that Weft does not own.
    let foreign: Job = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "foreign-migrate", "labels": {"app.kubernetes.io/name": "migrate"}},
        "spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/name": "migrate"}},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"weft.test/no-such-node": "true"},
                "containers": [{"name": "m", "image": "registry.example/migrate:1"}]}}}
    }))
    .expect("job");
    let foreign = jobs
        .create(&PostParams::default(), &foreign)
        .await
        .expect("create foreign Job");
    // And one whose owner label was copied from the chart's: selected by the labels, but not
    // proven Weft's (no apply of that label by Weft), so it is not deleted either.
    let chart_owner = weft::render::Owner::resource(OwnerKind::ArmadaChart, name.clone(), "api");
    let copied: Job = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "copied-migrate", "labels": {"app.kubernetes.io/name": "migrate",
            "weft.io/owner": chart_owner.id().0}},
        "spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/name": "migrate"}},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"weft.test/no-such-node": "true"},
                "containers": [{"name": "m", "image": "registry.example/migrate:1"}]}}}
    }))
    .expect("job");
    let copied = jobs
        .create(&PostParams::default(), &copied)
        .await
        .expect("create Job with a copied label");

    // A pass with nothing changed is not an upgrade: nothing is deleted.
    let (r, _) = pass(&client, &repo(&docs("1"), true), &options(&name)).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    assert!(r.changes.with_action(Action::Deleted).next().is_none());
    assert_eq!(
        jobs.get("api-migrate").await.expect("Job").uid(),
        ours.uid()
    );

    // The upgrade: the old migration Job is deleted first, then applied again.
    let (r, events) = pass(&client, &repo(&docs("2"), true), &options(&name)).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    let deleted: Vec<_> = r.changes.with_action(Action::Deleted).collect();
    assert_eq!(deleted.len(), 1, "{deleted:#?}");
    assert_eq!(
        deleted[0].object.to_string(),
        format!("Job/{name}/api-migrate")
    );
    assert_eq!(deleted[0].reason.as_deref(), Some("upgrade.pre.delete"));
    assert_eq!(
        deleted[0].owner.reference(),
        format!("ArmadaChart/{name}/api")
    );
    assert!(
        position(&events, &format!("deleted Job/{name}/api-migrate"))
            < position(&events, &format!("created Job/{name}/api-migrate")),
        "{events:#?}"
    );
    let again = jobs.get("api-migrate").await.expect("Job applied again");
    assert_ne!(again.uid(), ours.uid());
    assert_eq!(
        jobs.get("foreign-migrate")
            .await
            .expect("foreign Job")
            .uid(),
        foreign.uid()
    );
    assert_eq!(
        jobs.get("copied-migrate").await.expect("copied Job").uid(),
        copied.uid()
    );
    let skipped: Vec<_> = r
        .changes
        .with_action(Action::Skipped)
        .filter(|c| c.object.name == "copied-migrate")
        .collect();
    assert_eq!(skipped.len(), 1, "{:#?}", r.changes);
    assert!(
        skipped[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("not deleted by upgrade.pre.delete: ")),
        "{skipped:#?}"
    );
    ns.delete().await;
}

fn manifest(ns: &str, name: &str, groups: &[&str]) -> String {
    format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaManifest\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  release_prefix: site\n  chart_groups: [{}]\n",
        groups.join(", ")
    )
}

/// A site with two manifests over the same groups, as treasuremap's `full-site` and
/// `cluster-bootstrap`: without `--target-manifest` the pass is refused (as Armada refuses it)
/// and nothing is applied; with it, only the target's groups deploy, in its order, and the chart
/// that only the other manifest's group lists is not deployed (nor is its CR applied), with a
/// warning naming it. Choosing the other manifest later deploys that chart and prunes what the
/// new target does not list.
#[tokio::test]
async fn the_target_manifest_deploys_only_its_groups() {
    let ns = TestNamespace::new("armada-target").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let mut docs = String::new();
    for c in ["db", "identity", "ingress"] {
        docs.push_str(&chart(
            &name,
            c,
            "{}",
            &deployment_wait(&format!("site-{c}"), 60, "1"),
            "",
        ));
    }
    docs.push_str(&group(&name, "infra", &["db"]));
    docs.push_str(&group(&name, "apps", &["identity"]));
    docs.push_str(&group(&name, "edge", &["ingress"]));
    docs.push_str(&manifest(&name, "full-site", &["infra", "apps"]));
    docs.push_str(&manifest(&name, "cluster-bootstrap", &["infra", "edge"]));
    let files = repo(&docs, false);
    let deployments: Api<Deployment> = ns.api();

    let (r, events) = pass(&client, &files, &options(&name)).await;
    assert!(!r.succeeded(), "{events:#?}");
    assert!(
        error_text(&r).contains("choose it with --target-manifest NAME"),
        "{}",
        error_text(&r)
    );
    assert!(events.is_empty(), "{events:#?}");

    let full_site = PassSettings {
        target_manifest: Some("full-site".into()),
        ..options(&name)
    };
    let (r, events) = pass(&client, &files, &full_site).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    let db_ready = position(&events, &format!("ready Deployment/{name}/site-db"));
    let identity_created = position(&events, &format!("created Deployment/{name}/site-identity"));
    assert!(db_ready < identity_created, "{events:#?}");
    assert!(deployments.get_opt("site-ingress").await.unwrap().is_none());
    let charts: Api<weft::api::armada::ArmadaChart> = ns.api();
    assert!(charts.get_opt("ingress").await.unwrap().is_none());
    assert!(
        r.diagnostics.0.iter().any(|d| d.to_string().contains(&format!(
            "ArmadaChart `{name}/ingress` is not deployed: no chart group of the target manifest `full-site` lists it"
        ))),
        "{:#?}",
        r.diagnostics.0
    );

    let bootstrap = PassSettings {
        target_manifest: Some("cluster-bootstrap".into()),
        ..options(&name)
    };
    let (r, events) = pass(&client, &files, &bootstrap).await;
    assert!(r.succeeded(), "{}\n{events:#?}", error_text(&r));
    assert!(deployments.get_opt("site-ingress").await.unwrap().is_some());
    position(&events, &format!("deleted Deployment/{name}/site-identity"));
    ns.delete().await;
}
