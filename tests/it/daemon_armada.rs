//! Armada in `weft run`: a sequenced group whose second chart never becomes ready. The first
//! chart is deployed, the second fails (its Deployment named in `status.notReady`), the third is
//! never started (`pending`, reason `Blocked`, its message naming `stuck` and its group), and
//! the group is `failed` — all in the charts' status, written from the daemon's pass, with
//! events. Helm charts in the daemon: rendered with the cluster's `.Capabilities`, and a chart
//! helm cannot render fails alone (`RenderFailed`). A chart another Root object declared: its
//! child's drift wakes that Root, not the flag root.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::Api;

use support::cluster::TestNamespace;
use support::daemon::{github_push, Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::wait::{wait_for, wait_timed};
use weft::api::armada::{ArmadaChart, ArmadaChartGroup, Phase};
use weft::api::root::Root;

/// How long a Root's pass may take to show.
const WITHIN: Duration = Duration::from_secs(120);

/// Each daemon's controllers watch every namespace, so two daemons at once would react to each
/// other's charts (finalizers, drift): the tests of this file run one daemon at a time.
static ONE_DAEMON: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const TEMPLATE: &str = r#"apiVersion: apps/v1
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
      nodeSelector: ${nodeSelector}
      containers:
        - name: app
          image: registry.example/app:1
"#;

fn chart(ns: &str, name: &str, node_selector: &str, timeout: u32) -> String {
    format!(
        r#"---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChart
metadata: {{name: {name}, namespace: {ns}}}
spec:
  chart_name: app
  release: {name}
  namespace: {ns}
  source: {{type: local, location: charts/app}}
  values:
    nodeSelector: {node_selector}
  wait:
    timeout: {timeout}
    labels: {{app.kubernetes.io/instance: "{name}"}}
    resources:
      - type: deployment
"#
    )
}

/// A test namespace with Weft's CRDs, and an empty config repository served by git daemon.
struct Fixture {
    ns: TestNamespace,
    client: kube::Client,
    _host: RepoHost,
    server: GitDaemon,
    work: WorkTree,
}

impl Fixture {
    async fn new(prefix: &str) -> Fixture {
        let ns = TestNamespace::new(prefix).await;
        let client = ns.client();
        support::cluster::install_crds(&client).await;
        let host = RepoHost::new();
        let bare = host.create("config.git");
        let server = GitDaemon::start(&host);
        let work = WorkTree::new(&bare.display().to_string());
        Fixture {
            ns,
            client,
            _host: host,
            server,
            work,
        }
    }
}

async fn chart_phase(api: &Api<ArmadaChart>, name: &str) -> Option<Phase> {
    api.get(name).await.ok()?.status?.phase
}

#[tokio::test]
async fn a_failed_chart_stops_its_sequenced_group_and_every_phase_shows_it() {
    let _one = ONE_DAEMON.lock().await;
    let Fixture {
        ns,
        client,
        _host,
        server,
        work,
    } = Fixture::new("daemon-armada").await;
    work.write(
        "charts/app/Chart.yaml",
        "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n",
    );
    work.write("charts/app/values.yaml", "nodeSelector: {}\n");
    work.write("charts/app/templates/deployment.yaml", TEMPLATE);
    let mut docs = String::new();
    docs.push_str(&chart(ns.name(), "first", "{}", 60));
    // No node has this label: the pod is never scheduled, the chart never ready.
    docs.push_str(&chart(
        ns.name(),
        "stuck",
        "{weft.test/no-such-node: \"true\"}",
        5,
    ));
    docs.push_str(&chart(ns.name(), "third", "{}", 60));
    docs.push_str(&format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: apps, namespace: {}}}\nspec:\n  sequenced: true\n  chart_group: [first, stuck, third]\n",
        ns.name()
    ));
    work.write("armada.yaml", docs);
    work.commit("charts");
    work.push();
    let url = server.url("config.git");
    let d = Daemon::start(DaemonOptions {
        // The chart children's drift watch is the ArmadaChart controller's.
        controllers: true,
        ..DaemonOptions::new(&url, ns.name())
    });

    let charts: Api<ArmadaChart> = Api::namespaced(client.clone(), ns.name());
    let deadline = Instant::now() + Duration::from_secs(90);
    // While the pass waits for `stuck` (its wait.timeout), the chart shows `deploying`.
    let mut stuck_seen_deploying = false;
    loop {
        let phases = (
            chart_phase(&charts, "first").await,
            chart_phase(&charts, "stuck").await,
            chart_phase(&charts, "third").await,
        );
        stuck_seen_deploying |= phases.1 == Some(Phase::Deploying);
        if phases
            == (
                Some(Phase::Deployed),
                Some(Phase::Failed),
                Some(Phase::Pending),
            )
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "phases are {phases:?}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        stuck_seen_deploying,
        "`stuck` was never seen deploying\n{}",
        d.logs()
    );
    let stuck = charts
        .get("stuck")
        .await
        .expect("stuck")
        .status
        .expect("status");
    assert_eq!(stuck.not_ready.len(), 1, "{stuck:?}");
    assert_eq!(stuck.not_ready[0].kind, "Deployment");
    assert_eq!(stuck.not_ready[0].name, "stuck");
    let ready = stuck
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(format!("{:?}", ready.status), "False");
    assert!(
        ready.message.contains("Deployment/") && ready.message.contains("stuck"),
        "{}",
        ready.message
    );
    assert!(ready.observed_generation.is_some());
    let third = charts
        .get("third")
        .await
        .expect("third")
        .status
        .expect("status");
    let ready = third
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(ready.reason, "Blocked");
    // It names what blocked it: the chart before it, and that chart's group.
    assert_eq!(
        ready.message,
        format!(
            "not deployed: blocked by chart {ns}/stuck (group {ns}/apps), which did not become ready",
            ns = ns.name()
        )
    );
    // The third chart was never started: its Deployment does not exist.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns.name());
    assert!(
        deployments.get_opt("third").await.expect("GET").is_none(),
        "chart N+1 must not start before chart N is ready"
    );
    assert!(deployments.get_opt("first").await.expect("GET").is_some());
    let groups: Api<ArmadaChartGroup> = Api::namespaced(client.clone(), ns.name());
    // Groups are written after their charts.
    let deadline = Instant::now() + Duration::from_secs(10);
    let group = loop {
        let status = groups.get("apps").await.expect("group").status;
        if let Some(st) = status.filter(|s| s.phase.is_some()) {
            break st;
        }
        assert!(Instant::now() < deadline, "no group status\n{}", d.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(group.phase, Some(Phase::Failed));
    assert_eq!(group.deployed, vec!["first".to_string()]);
    // The group's status is written during the pass; the pass report when it ends.
    let report = d
        .wait_status("the pass is reported", Duration::from_secs(30), |s| {
            !s["lastPass"]["result"].is_null()
        })
        .await;
    assert_eq!(report["lastPass"]["result"], "failed", "{report:#}");
    let owner = &report["owners"][format!("ArmadaChart/{}/stuck", ns.name())];
    assert_eq!(owner["ready"], "False", "{report:#}");
    assert_eq!(owner["version"], "failed", "{report:#}");

    // A chart's child deleted with kubectl → recreated within seconds (the poll interval is an
    // hour): the daemon watches chart children and queues a pass.
    let uid = deployments.get("first").await.expect("first").metadata.uid;
    deployments
        .delete("first", &Default::default())
        .await
        .expect("delete");
    let start = Instant::now();
    loop {
        if let Some(again) = deployments.get_opt("first").await.expect("GET") {
            if again.metadata.uid != uid && again.metadata.deletion_timestamp.is_none() {
                break;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "not recreated\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("deleted chart child recreated after {:?}", start.elapsed());
    drop(server);
    ns.delete().await;
}

fn unsequenced_chart(ns: &str, name: &str, drift_policy: &str) -> String {
    format!(
        r#"---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChart
metadata: {{name: {name}, namespace: {ns}}}
spec:
  chart_name: app
  release: {name}
  namespace: {ns}
  driftPolicy: {drift_policy}
  source: {{type: local, location: charts/app}}
  values:
    nodeSelector: {{}}
"#
    )
}

async fn replicas(api: &Api<Deployment>, name: &str) -> Option<i32> {
    api.get_opt(name).await.ok()??.spec?.replicas
}

/// `driftPolicy: report` leaves an edited or deleted child alone and marks the chart
/// `inconsistent` with a `Drifted` condition naming it; `correct` restores the edit; a chart
/// deleted with kubectl has its children pruned by its finalizer before it goes.
#[tokio::test]
async fn drift_is_reported_or_corrected_per_chart_and_a_deleted_chart_takes_its_children() {
    let _one = ONE_DAEMON.lock().await;
    let Fixture {
        ns,
        client,
        _host,
        server,
        work,
    } = Fixture::new("daemon-armada-drift").await;
    work.write(
        "charts/app/Chart.yaml",
        "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n",
    );
    work.write("charts/app/values.yaml", "nodeSelector: {}\n");
    work.write("charts/app/templates/deployment.yaml", TEMPLATE);
    let mut docs = String::new();
    docs.push_str(&unsequenced_chart(ns.name(), "fixed", "correct"));
    docs.push_str(&unsequenced_chart(ns.name(), "watched", "report"));
    docs.push_str(&unsequenced_chart(ns.name(), "doomed", "correct"));
    docs.push_str(&format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: apps, namespace: {}}}\nspec:\n  sequenced: false\n  chart_group: [fixed, watched, doomed]\n",
        ns.name()
    ));
    work.write("armada.yaml", docs);
    work.commit("charts");
    work.push();
    let url = server.url("config.git");
    let d = Daemon::start(DaemonOptions {
        // The ArmadaChart controller (finalizer, drift) runs only with the controllers.
        controllers: true,
        ..DaemonOptions::new(&url, ns.name())
    });

    let charts: Api<ArmadaChart> = Api::namespaced(client.clone(), ns.name());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns.name());
    // Every chart deployed and carrying the finalizer.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut done = true;
        for name in ["fixed", "watched", "doomed"] {
            let c = charts.get_opt(name).await.expect("GET chart");
            let deployed =
                c.as_ref().and_then(|c| c.status.as_ref()?.phase) == Some(Phase::Deployed);
            let finalized = c.as_ref().is_some_and(|c| {
                c.metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == "weft.io/armada-chart")
            });
            done &= deployed && finalized && replicas(&deployments, name).await == Some(1);
        }
        if done {
            break;
        }
        if Instant::now() >= deadline {
            let list = charts.list(&Default::default()).await.expect("list");
            let state: Vec<_> = list
                .items
                .iter()
                .map(|c| {
                    (
                        c.metadata.name.clone(),
                        c.metadata.finalizers.clone(),
                        c.status.as_ref().and_then(|s| s.phase),
                    )
                })
                .collect();
            panic!("charts not deployed: {state:?}\n{}", d.logs());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    let two = serde_json::json!({"spec": {"replicas": 2}});
    // report: the edit stays and the chart says so.
    deployments
        .patch("watched", &edit, &Patch::Merge(&two))
        .await
        .expect("edit watched");
    let start = Instant::now();
    let drifted = loop {
        let st = charts
            .get("watched")
            .await
            .expect("watched")
            .status
            .unwrap_or_default();
        let cond = st.conditions.iter().find(|c| c.type_ == "Drifted").cloned();
        if let Some(c) = cond.filter(|_| st.inconsistent) {
            break c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no drift reported: {st:?}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(format!("{:?}", drifted.status), "True");
    assert!(
        drifted
            .message
            .contains(&format!("Deployment/{}/watched", ns.name())),
        "{}",
        drifted.message
    );

    // correct: the same edit is restored within seconds (this pass must leave `watched` alone).
    deployments
        .patch("fixed", &edit, &Patch::Merge(&two))
        .await
        .expect("edit fixed");
    let start = Instant::now();
    while replicas(&deployments, "fixed").await != Some(1) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "edit of a correct-policy child not restored\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("edited chart child restored after {:?}", start.elapsed());

    // correct: `kubectl scale` (a write through the scale subresource) is restored within
    // seconds too, not at the next poll (issue 40 item 9).
    let scale = PatchParams {
        field_manager: Some("kubectl".into()),
        ..Default::default()
    };
    deployments
        .patch_scale(
            "fixed",
            &scale,
            &Patch::Merge(&serde_json::json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale fixed");
    let start = Instant::now();
    while replicas(&deployments, "fixed").await != Some(1) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "a kubectl scale of a correct-policy child not restored\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("scaled chart child restored after {:?}", start.elapsed());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        replicas(&deployments, "watched").await,
        Some(2),
        "a report-policy child was corrected\n{}",
        d.logs()
    );

    // report: a deleted child is not recreated.
    deployments
        .delete("watched", &Default::default())
        .await
        .expect("delete watched");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        deployments.get_opt("watched").await.expect("GET").is_none(),
        "a report-policy child was recreated\n{}",
        d.logs()
    );
    let st = charts
        .get("watched")
        .await
        .expect("watched")
        .status
        .unwrap_or_default();
    assert!(st.inconsistent);

    // The finalizer: kubectl delete of a chart prunes its Deployment, then the chart goes.
    let deployment_uid = deployments
        .get("doomed")
        .await
        .expect("doomed")
        .metadata
        .uid;
    assert!(deployment_uid.is_some());
    charts
        .delete("doomed", &Default::default())
        .await
        .expect("delete chart");
    let start = Instant::now();
    loop {
        let chart_gone = charts.get_opt("doomed").await.expect("GET").is_none();
        let child_gone = deployments
            .get_opt("doomed")
            .await
            .expect("GET")
            .is_none_or(|dep| dep.metadata.uid != deployment_uid);
        if chart_gone && child_gone {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "chart gone: {chart_gone}, child gone: {child_gone}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "deleted chart and its children gone after {:?}",
        start.elapsed()
    );
    // Nothing else of the charts was touched.
    assert!(deployments.get_opt("fixed").await.expect("GET").is_some());

    // A chart removed from git: the sync root prunes it, and its Deployment goes with it.
    let mut docs = String::new();
    docs.push_str(&unsequenced_chart(ns.name(), "watched", "report"));
    docs.push_str(&unsequenced_chart(ns.name(), "doomed", "correct"));
    docs.push_str(&format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: apps, namespace: {}}}\nspec:\n  sequenced: false\n  chart_group: [watched, doomed]\n",
        ns.name()
    ));
    work.write("armada.yaml", docs);
    work.commit("drop the chart fixed");
    work.push();
    let (status, body) = github_push(&d, "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");
    let start = Instant::now();
    loop {
        let chart_gone = charts.get_opt("fixed").await.expect("GET").is_none();
        let child_gone = deployments.get_opt("fixed").await.expect("GET").is_none();
        if chart_gone && child_gone {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "chart gone: {chart_gone}, child gone: {child_gone}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The report chart's deleted child was not recreated by this pass either.
    assert!(
        deployments.get_opt("watched").await.expect("GET").is_none(),
        "{}",
        d.logs()
    );
    drop(server);
    ns.delete().await;
}

/// A Helm chart printing what helm knows of the cluster, and one whose `required` value is
/// missing, in two groups of a manifest: the first deploys with the control plane's version in
/// `.Capabilities`, the second fails alone with helm's template file and line in its status.
/// The first has no pods: as in Armada it says so (`wait.resources: []`), else its wait would
/// require one.
#[tokio::test]
async fn helm_charts_in_the_daemon_see_the_cluster_and_fail_alone() {
    let _one = ONE_DAEMON.lock().await;
    let Fixture {
        ns,
        client,
        _host,
        server,
        work,
    } = Fixture::new("daemon-helm").await;
    work.write(
        "charts/caps/Chart.yaml",
        "apiVersion: v2\nname: caps\nversion: 1.0.0\n",
    );
    work.write(
        "charts/caps/templates/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  kube: {{ .Capabilities.KubeVersion.Version | quote }}\n  leases: {{ .Capabilities.APIVersions.Has \"coordination.k8s.io/v1\" | quote }}\n",
    );
    work.write(
        "charts/needy/Chart.yaml",
        "apiVersion: v2\nname: needy\nversion: 1.0.0\n",
    );
    work.write(
        "charts/needy/templates/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: needy\ndata:\n  x: {{ required \"needy.value is required\" .Values.value | quote }}\n",
    );
    let n = ns.name();
    work.write(
        "armada.yaml",
        format!(
            "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: caps, namespace: {n}}}\nspec:\n  release: caps\n  namespace: {n}\n  source: {{type: local, location: charts/caps}}\n  wait: {{resources: []}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: needy, namespace: {n}}}\nspec:\n  release: needy\n  namespace: {n}\n  source: {{type: local, location: charts/needy}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: first, namespace: {n}}}\nspec:\n  chart_group: [caps]\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: second, namespace: {n}}}\nspec:\n  chart_group: [needy]\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaManifest\nmetadata: {{name: site, namespace: {n}}}\nspec:\n  release_prefix: site\n  chart_groups: [first, second]\n"
        ),
    );
    work.commit("helm charts");
    work.push();
    let url = server.url("config.git");
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&url, n)
    });

    let charts: Api<ArmadaChart> = Api::namespaced(client.clone(), n);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let phases = (
            chart_phase(&charts, "caps").await,
            chart_phase(&charts, "needy").await,
        );
        if phases == (Some(Phase::Deployed), Some(Phase::Failed)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "phases are {phases:?}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // `.Capabilities` are the control plane's, not helm's offline default (v1.37.0).
    let version = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/control-plane/KUBERNETES_VERSION"),
    )
    .expect("KUBERNETES_VERSION");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), n);
    let caps = config_maps
        .get("site-caps")
        .await
        .expect("site-caps")
        .data
        .expect("data");
    assert_eq!(caps["kube"], version.trim(), "{caps:?}");
    assert_eq!(caps["leases"], "true", "{caps:?}");
    // `needy` failed alone: its status names helm's template and line; nothing of it exists.
    let needy = charts
        .get("needy")
        .await
        .expect("needy")
        .status
        .expect("status");
    let ready = needy
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(ready.reason, "RenderFailed", "{ready:?}");
    assert!(
        ready.message.contains("needy/templates/cm.yaml:6:")
            && ready.message.contains("needy.value is required"),
        "{}",
        ready.message
    );
    assert!(config_maps.get_opt("needy").await.expect("GET").is_none());
    // The charts' status is written during the pass, its report when it ends.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let report = d.status().await;
        if report["lastPass"]["result"] == "failed" {
            break;
        }
        assert!(Instant::now() < deadline, "{report:#}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(server);
    ns.delete().await;
}

/// A chart applied by a Root object (not the daemon's flag root): a hand edit of its child asks
/// THAT Root for a pass (its interval is an hour), which restores the child and says `watch`
/// in its reasons (issue 41 item 2).
#[tokio::test]
async fn a_chart_of_another_root_drifts_and_that_root_passes() {
    let _one = ONE_DAEMON.lock().await;
    let Fixture {
        ns,
        client,
        _host,
        server,
        work,
    } = Fixture::new("daemon-armada-root").await;
    let n = ns.name();
    work.write(
        "charts/app/Chart.yaml",
        "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n",
    );
    work.write("charts/app/values.yaml", "nodeSelector: {}\n");
    work.write("charts/app/templates/deployment.yaml", TEMPLATE);
    let mut docs = unsequenced_chart(n, "tenant", "correct");
    docs.push_str(&format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: apps, namespace: {n}}}\nspec:\n  sequenced: false\n  chart_group: [tenant]\n"
    ));
    work.write("armada.yaml", docs);
    work.commit("charts");
    work.push();
    // The flag root follows an empty directory: the Root `charts` declares the chart.
    let flag = tempfile::tempdir().expect("tempdir");
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(flag.path().to_str().expect("utf-8 path"), n)
    });
    let roots: Api<Root> = Api::namespaced(client.clone(), n);
    let root: Root = serde_json::from_value(serde_json::json!({
        "apiVersion": "weft.io/v1alpha1",
        "kind": "Root",
        "metadata": {"name": "charts", "namespace": n},
        "spec": {"source": {"url": server.url("config.git")}, "interval": "1h"},
    }))
    .expect("a Root");
    roots
        .create(&Default::default(), &root)
        .await
        .expect("create Root");

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), n);
    let passes = wait_for(
        "the Root's pass deploys the chart",
        WITHIN,
        &d,
        async || {
            let root = roots.get("charts").await.ok()?;
            let status = root.status?;
            let ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && format!("{:?}", c.status) == "True");
            (ready && replicas(&deployments, "tenant").await == Some(1))
                .then_some(status.passes.len())
        },
    )
    .await;

    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    deployments
        .patch(
            "tenant",
            &edit,
            &Patch::Merge(&serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("edit tenant");
    // Restored by a pass of the Root `charts` asked for by the chart's drift, not its poll.
    let (pass, _) = wait_timed("the edited child restored", WITHIN, &d, async || {
        if replicas(&deployments, "tenant").await != Some(1) {
            return None;
        }
        let status = roots.get("charts").await.ok()?.status?;
        let newest = status.passes.first()?.clone();
        (status.passes.len() > passes && newest.reasons.iter().any(|r| r == "watch"))
            .then_some(newest)
    })
    .await;
    assert_eq!(pass.result, "Succeeded", "{pass:?}\n{}", d.logs());
    assert!(
        d.logs().contains(&format!("Root {n}/charts")),
        "the chart controller did not name the Root it asked\n{}",
        d.logs()
    );
    drop(d);
    drop(server);
    ns.delete().await;
}
