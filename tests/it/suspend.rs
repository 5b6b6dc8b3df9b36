//! Suspend and resume on the real control plane, with real `weft run` processes and a real git
//! server (`git daemon`):
//!
//! - the root: `weft suspend` freezes it (a push and a webhook during the suspension change
//!   nothing, `weft sync` refuses, `weft get root` shows it), the API needs the sync token, and a
//!   resume over the API applies the push made during the suspension at once (nothing pruned
//!   before that); `POST /api/v1/suspend` and `weft resume` the other way round;
//! - an ArmadaChart: `weft.io/suspend` on the chart (or its group) holds its objects — a child
//!   deleted stays deleted, an object removed from git is not pruned, a deleted chart keeps its
//!   finalizer — and removing it resumes with a pass that does all of it.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use support::cluster::TestNamespace;
use support::daemon::{github_push, Daemon, DaemonOptions, SYNC_TOKEN};
use support::git_servers::ServedRepo;
use support::manifests::configmap;
use support::weft_cli::Weft;
use weft::api::armada::{ArmadaChart, Phase};

/// Run the `weft` binary with the test cluster's kubeconfig; (exit code, stdout, stderr).
fn weft(args: &[&str]) -> (i32, String, String) {
    Weft::new(args)
        .args(support::cluster::cluster().kube_args())
        .env_remove("WEFT_REPO")
        .env_remove("WEFT_ROOT_NAME")
        .run()
}

async fn value(api: &Api<ConfigMap>, name: &str) -> Option<String> {
    api.get_opt(name)
        .await
        .expect("GET configmap")
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}

async fn wait_until<T>(
    what: &str,
    within: Duration,
    d: &Daemon,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        if start.elapsed() > within {
            panic!(
                "{what} did not happen within {within:?}\nlogs:\n{}",
                d.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn post(d: &Daemon, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new().post(format!("{}{path}", d.hooks_base()));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("POST");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The root row of `weft get root -o json`.
fn root_row(ns: &str) -> Value {
    let (code, out, err) = weft(&["get", "root", "--weft-namespace", ns, "-o", "json"]);
    assert!(
        code == 0 || code == 1,
        "weft get root: {code}\n{out}\n{err}"
    );
    let rows: Vec<Value> = serde_json::from_str(&out).expect("rows JSON");
    let row = rows
        .into_iter()
        .find(|r| r["name"] == ns)
        .unwrap_or_else(|| panic!("no root row named {ns}:\n{out}"));
    assert_eq!(
        code == 0,
        row["ready"] == "True",
        "exit code follows readiness: {row}"
    );
    row
}

#[tokio::test]
async fn a_suspended_root_changes_nothing_and_resuming_applies_the_push_made_meanwhile() {
    let ns = TestNamespace::new("suspend-root").await;
    let n = ns.name();
    let repo = ServedRepo::start();
    repo.work
        .write("apps/greeting.yaml", configmap(n, "greeting", "one"));
    repo.work.write("apps/old.yaml", configmap(n, "old", "x"));
    let first = repo.work.commit("one");
    repo.work.push();
    let url = repo.url();
    let d = Daemon::start(DaemonOptions::new(&url, n));
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), n);
    d.wait_status("the first pass", Duration::from_secs(60), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    assert_eq!(value(&api, "greeting").await.as_deref(), Some("one"));
    let row = root_row(n);
    assert_eq!(row["kind"], "Root");
    assert_eq!(
        (&row["ready"], &row["suspended"]),
        (&json!("True"), &json!(false))
    );
    assert_eq!(row["revision"], first.as_str());

    // Suspend from the command line: recorded in the cluster, seen by the daemon.
    let (code, out, err) = weft(&[
        "suspend",
        "--weft-namespace",
        n,
        "--root-name",
        n,
        "--message",
        "incident 42",
    ]);
    assert_eq!(code, 0, "weft suspend:\n{out}\n{err}");
    d.wait_status(
        "the daemon sees the suspension",
        Duration::from_secs(10),
        |s| s["suspension"]["suspended"] == true,
    )
    .await;

    // A push during the suspension: the webhook is accepted, the pass changes nothing.
    repo.work
        .write("apps/greeting.yaml", configmap(n, "greeting", "two"));
    repo.work.remove("apps/old.yaml");
    repo.work.write("apps/new.yaml", configmap(n, "new", "y"));
    let second = repo.work.commit("two");
    repo.work.push();
    let (status, body) = github_push(&d, "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");
    let (status, report) = post(&d, "/api/v1/sync?wait=true", Some(SYNC_TOKEN)).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["result"], "suspended", "{report}");
    assert!(
        report["error"]
            .as_str()
            .unwrap_or("")
            .contains("incident 42"),
        "{report}"
    );
    assert_eq!(value(&api, "greeting").await.as_deref(), Some("one"));
    assert!(
        value(&api, "old").await.is_some(),
        "nothing is pruned while suspended"
    );
    assert!(
        value(&api, "new").await.is_none(),
        "nothing is applied while suspended"
    );
    let row = root_row(n);
    assert_eq!(row["suspended"], true, "{row}");
    assert_eq!(row["revision"], first.as_str(), "{row}");
    // A one-shot sync refuses too.
    let (code, out, err) = weft(&[
        "sync",
        "--repo",
        &url,
        "--weft-namespace",
        n,
        "--root-name",
        n,
        "--timeout",
        "30s",
    ]);
    assert_eq!(code, 1, "weft sync of a suspended root:\n{out}\n{err}");
    assert!(
        err.contains("suspended") && err.contains("incident 42"),
        "{err}"
    );
    assert_eq!(value(&api, "greeting").await.as_deref(), Some("one"));

    // Resume over the API: the sync token is required; resuming starts a pass by itself.
    let (status, _) = post(&d, "/api/v1/resume", None).await;
    assert_eq!(status, 401);
    let (status, _) = post(&d, "/api/v1/resume", Some("wrong-token")).await;
    assert_eq!(status, 401);
    assert_eq!(value(&api, "greeting").await.as_deref(), Some("one"));
    let (status, body) = post(&d, "/api/v1/resume", Some(SYNC_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["suspended"], false, "{body}");
    wait_until(
        "the push made during the suspension is applied",
        Duration::from_secs(20),
        &d,
        async || (value(&api, "greeting").await.as_deref() == Some("two")).then_some(()),
    )
    .await;
    let s = d
        .wait_status("the resumed pass", Duration::from_secs(10), |s| {
            s["revision"] == second.as_str() && s["lastPass"]["result"] == "succeeded"
        })
        .await;
    assert!(
        s["lastPass"]["reasons"].to_string().contains("resumed"),
        "{s:#}"
    );
    assert!(value(&api, "new").await.is_some());
    assert!(
        value(&api, "old").await.is_none(),
        "the deferred prune happened"
    );
    let row = root_row(n);
    assert_eq!(
        (&row["ready"], &row["suspended"]),
        (&json!("True"), &json!(false))
    );
    assert_eq!(row["revision"], second.as_str());

    // The other way round: suspend over the API, resume from the command line.
    let (status, body) = post(&d, "/api/v1/suspend?message=maintenance", Some(SYNC_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["suspended"], true, "{body}");
    let root = Api::<weft::api::root::Root>::namespaced(ns.client(), n)
        .get(n)
        .await
        .expect("the flag root's Root");
    assert!(root.spec.suspend);
    assert_eq!(
        weft::api::suspend::message(&root.metadata),
        Some("maintenance")
    );
    repo.work
        .write("apps/greeting.yaml", configmap(n, "greeting", "three"));
    repo.work.commit("three");
    repo.work.push();
    let (_, report) = post(&d, "/api/v1/sync?wait=true", Some(SYNC_TOKEN)).await;
    assert_eq!(report["result"], "suspended", "{report}");
    assert_eq!(value(&api, "greeting").await.as_deref(), Some("two"));
    let (code, out, err) = weft(&["resume", "--weft-namespace", n, "--root-name", n]);
    assert_eq!(code, 0, "weft resume:\n{out}\n{err}");
    wait_until(
        "the push is applied after weft resume",
        Duration::from_secs(20),
        &d,
        async || (value(&api, "greeting").await.as_deref() == Some("three")).then_some(()),
    )
    .await;
    ns.delete().await;
}

const TEMPLATE: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: ${release.name}
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
          image: registry.example/app:1
"#;

const EXTRA: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: ${release.name}-extra
data:
  value: "x"
"#;

fn armada(ns: &str) -> String {
    format!(
        r#"---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChart
metadata: {{name: web, namespace: {ns}}}
spec:
  chart_name: app
  release: web
  namespace: {ns}
  source: {{type: local, location: charts/app}}
  values: {{}}
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChartGroup
metadata: {{name: apps, namespace: {ns}}}
spec:
  sequenced: false
  chart_group: [web]
"#
    )
}

fn suspended_condition(chart: &ArmadaChart) -> Option<String> {
    chart
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Suspended")
        .map(|c| format!("{:?}", c.status))
}

/// Wait until the chart `web`'s `Suspended` condition is `status`.
async fn wait_chart_suspended(charts: &Api<ArmadaChart>, status: &str, d: &Daemon) {
    wait_until(
        &format!("the chart says Suspended={status}"),
        Duration::from_secs(20),
        d,
        async || {
            let c = charts.get_opt("web").await.ok()??;
            (suspended_condition(&c).as_deref() == Some(status)).then_some(())
        },
    )
    .await;
}

async fn annotate<K>(api: &Api<K>, name: &str, value: Option<&str>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {"annotations": {"weft.io/suspend": value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate");
}

#[tokio::test]
async fn a_suspended_chart_keeps_its_objects_as_they_are_until_it_is_resumed() {
    let ns = TestNamespace::new("suspend-chart").await;
    let n = ns.name();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let repo = ServedRepo::start();
    repo.work.write(
        "charts/app/Chart.yaml",
        "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n",
    );
    repo.work
        .write("charts/app/templates/deployment.yaml", TEMPLATE);
    repo.work.write("charts/app/templates/extra.yaml", EXTRA);
    repo.work.write("armada.yaml", armada(n));
    repo.work.commit("charts");
    repo.work.push();
    let url = repo.url();
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&url, n)
    });
    let charts: Api<ArmadaChart> = Api::namespaced(client.clone(), n);
    let groups: Api<weft::api::armada::ArmadaChartGroup> = Api::namespaced(client.clone(), n);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), n);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), n);
    wait_until(
        "the chart is deployed",
        Duration::from_secs(90),
        &d,
        async || {
            let c = charts.get_opt("web").await.ok()??;
            (c.status?.phase == Some(Phase::Deployed)).then_some(())
        },
    )
    .await;
    assert!(configmaps.get_opt("web-extra").await.unwrap().is_some());

    // Suspend the chart with kubectl: a pass marks it Suspended.
    annotate(&charts, "web", Some("true")).await;
    wait_chart_suspended(&charts, "True", &d).await;
    // Its child deleted: not recreated (the controller neither corrects nor queues).
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the chart's Deployment");
    // An object removed from the chart in git: not pruned.
    repo.work.remove("charts/app/templates/extra.yaml");
    repo.work.commit("no extra");
    repo.work.push();
    let (status, report) = post(&d, "/api/v1/sync?wait=true", Some(SYNC_TOKEN)).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["result"], "succeeded", "{report}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        deployments.get_opt("web").await.unwrap().is_none(),
        "a suspended chart's deleted child stays deleted\nlogs:\n{}",
        d.logs()
    );
    assert!(
        configmaps.get_opt("web-extra").await.unwrap().is_some(),
        "a suspended chart's prune is deferred"
    );
    let group = groups.get("apps").await.expect("the group");
    assert_eq!(
        group.status.and_then(|s| s.phase),
        Some(Phase::Deployed),
        "a suspended chart counts for its group as it stands"
    );
    let (_, out, _) = weft(&["get", "charts", "-n", n, "-o", "json"]);
    let rows: Vec<Value> = serde_json::from_str(&out).expect("rows");
    assert_eq!(rows[0]["suspended"], true, "{out}");

    // Resume: one pass recreates the child and does the deferred prune.
    annotate(&charts, "web", None).await;
    wait_until(
        "the chart's child is recreated",
        Duration::from_secs(30),
        &d,
        async || deployments.get_opt("web").await.ok()?.map(|_| ()),
    )
    .await;
    wait_until(
        "the deferred prune",
        Duration::from_secs(30),
        &d,
        async || {
            configmaps
                .get_opt("web-extra")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    wait_chart_suspended(&charts, "False", &d).await;

    // Its group suspended: the chart is held too.
    annotate(&groups, "apps", Some("true")).await;
    wait_chart_suspended(&charts, "True", &d).await;
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the chart's Deployment");
    // A deleted chart keeps its finalizer (and its children) while suspended.
    annotate(&charts, "web", Some("true")).await;
    annotate(&groups, "apps", None).await;
    repo.work.write("armada.yaml", "");
    repo.work.commit("no charts");
    repo.work.push();
    charts
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the chart");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let chart = charts.get_opt("web").await.unwrap();
    assert!(
        chart.is_some_and(|c| c.metadata.deletion_timestamp.is_some()),
        "a suspended chart being deleted waits for its resume"
    );
    annotate(&charts, "web", None).await;
    wait_until(
        "the resumed chart is deleted",
        Duration::from_secs(30),
        &d,
        async || charts.get_opt("web").await.ok()?.is_none().then_some(()),
    )
    .await;
    ns.delete().await;
}

/// The value of the chart `web`'s `weft_suspend_status` gauge on the daemon's `/metrics`.
async fn chart_suspend_gauge(d: &Daemon, ns: &str) -> Option<String> {
    let body = reqwest::get(format!("{}/metrics", d.base()))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    body.lines()
        .filter(|l| l.starts_with("weft_suspend_status{"))
        .filter(|l| l.contains("kind=\"ArmadaChart\"") && l.contains("name=\"web\""))
        .find(|l| l.contains(&format!("namespace=\"{ns}\"")))
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_string)
}

#[tokio::test]
async fn a_suspended_flag_root_holds_its_charts_in_the_controller_too() {
    let ns = TestNamespace::new("suspend-flag-root").await;
    let n = ns.name();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let repo = ServedRepo::start();
    repo.work.write(
        "charts/app/Chart.yaml",
        "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n",
    );
    repo.work
        .write("charts/app/templates/deployment.yaml", TEMPLATE);
    repo.work.write("armada.yaml", armada(n));
    repo.work.commit("charts");
    repo.work.push();
    let url = repo.url();
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&url, n)
    });
    let charts: Api<ArmadaChart> = Api::namespaced(client.clone(), n);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), n);
    let roots: Api<weft::api::root::Root> = Api::namespaced(client.clone(), n);
    wait_until(
        "the chart is deployed",
        Duration::from_secs(90),
        &d,
        async || {
            let c = charts.get_opt("web").await.ok()??;
            (c.status?.phase == Some(Phase::Deployed)).then_some(())
        },
    )
    .await;

    // The flag root suspended on its Root (as `weft suspend` or `kubectl edit` does), and seen
    // suspended by its reconcile.
    let suspend = |on: bool| json!({"spec": {"suspend": on}});
    roots
        .patch(n, &PatchParams::default(), &Patch::Merge(&suspend(true)))
        .await
        .expect("suspend the flag root's Root");
    wait_until(
        "the Root says it is suspended",
        Duration::from_secs(30),
        &d,
        async || {
            let root = roots.get_opt(n).await.ok()??;
            root.status?
                .conditions
                .iter()
                .any(|c| c.reason == "Suspended")
                .then_some(())
        },
    )
    .await;
    // A child of the chart deleted: the chart controller's reconcile (its suspend gauge says
    // it ran) holds the chart too, and does not ask for a pass that would recreate it.
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the chart's Deployment");
    wait_until(
        "the chart controller says the chart is suspended",
        Duration::from_secs(30),
        &d,
        async || chart_suspend_gauge(&d, n).await.filter(|v| v == "1"),
    )
    .await;
    assert!(
        deployments.get_opt("web").await.unwrap().is_none(),
        "a chart of a suspended root keeps its deleted child deleted\nlogs:\n{}",
        d.logs()
    );

    // Resumed: the chart is reconciled again, and its deleted child comes back.
    roots
        .patch(n, &PatchParams::default(), &Patch::Merge(&suspend(false)))
        .await
        .expect("resume the flag root's Root");
    wait_until(
        "the chart's child is recreated after the resume",
        Duration::from_secs(30),
        &d,
        async || deployments.get_opt("web").await.ok()?.map(|_| ()),
    )
    .await;
    ns.delete().await;
}
