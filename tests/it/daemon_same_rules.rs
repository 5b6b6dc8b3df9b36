//! The daemon's fast paths obey the rules of the full pass: the early apply of a push
//! (`src/daemon/early.rs`) is the pass's apply, only sooner (another root's object, an
//! autoscaler's replicas, `weft.io/ignore-fields`), and a daemon from another repository than the
//! one its root records refuses to switch it without `--switch-repository`, as `weft sync` does.
//! On the real control plane, with a served git repository, through a push (the poll) and a
//! webhook.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use support::cluster::TestNamespace;
use support::daemon::{github_push, Daemon, DaemonOptions};
use support::git_servers::ServedRepo;
use support::manifests::configmap;
use support::weft_cli::Weft;

const OWNER_LABEL: &str = "weft.io/owner";
const OWNER_REF: &str = "weft.io/owner-ref";

/// How a pushed commit reaches the daemon.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// The poll timer notices it.
    Poll,
    /// A GitHub push webhook announces it.
    Webhook,
}

/// Push what the work tree holds, announce it `via`, and wait for the pass that applied it (its
/// status).
async fn push_and_wait(
    repo: &ServedRepo,
    d: &Daemon,
    message: &str,
    via: Via,
) -> serde_json::Value {
    let commit = repo.work.commit(message);
    repo.work.push();
    if let Via::Webhook = via {
        let (status, body) = github_push(d, "refs/heads/main", None).await;
        assert_eq!(status, 202, "{body}");
    }
    let s = d
        .wait_status(
            &format!("the pass of {message} ({via:?})"),
            Duration::from_secs(60),
            // After a poll, the pass that fetched it (a later poll finds the head unchanged);
            // after a webhook, a poll that came during its pass runs right after it, so any.
            |s| {
                (s["lastPass"]["headUnchanged"] == false || matches!(via, Via::Webhook))
                    && s["lastPass"]["revision"]
                        .as_str()
                        .is_some_and(|r| !r.is_empty() && commit.trim().starts_with(r))
            },
        )
        .await;
    if let Via::Poll = via {
        assert!(
            s["lastPass"]["reasons"].to_string().contains("poll"),
            "{s:#}"
        );
    }
    s
}

/// The number of early applies the daemon logged, and their log lines.
fn early_lines(d: &Daemon) -> Vec<String> {
    d.logs()
        .lines()
        .filter(|l| l.contains("applied the pushed changes ahead of the full pass"))
        .map(str::to_string)
        .collect()
}

/// What identifies who holds an object and what it holds: uid, owner label, owner reference,
/// data.
fn holding(cm: &ConfigMap) -> (String, Option<String>, Option<String>, Option<String>) {
    (
        cm.uid().unwrap_or_default(),
        cm.labels().get(OWNER_LABEL).cloned(),
        cm.annotations().get(OWNER_REF).cloned(),
        cm.data.as_ref().and_then(|d| d.get("value").cloned()),
    )
}

/// (a) A push to a root's repository that changes an object another root holds does not write
/// it early (the old early apply took it over within 3 s: data, owner label and reference), and
/// the holder's next sync still succeeds; the root's own changed object still goes out early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_apply_leaves_another_roots_object_alone() {
    let ns = TestNamespace::new("early-owner").await;
    let n = ns.name();
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), n);

    // Root `first` holds `shared`: a one-shot sync of a directory.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("shared.yaml"),
        configmap(n, "shared", "first"),
    )
    .expect("write");
    let first_sync = || {
        Weft::new(["sync"])
            .repo(dir.path())
            .cluster()
            .args(["--weft-namespace", n, "--root-name", "first"])
            .run()
    };
    let (code, out, err) = first_sync();
    assert_eq!(code, 0, "{out}{err}");
    let held = holding(&api.get("shared").await.expect("shared"));
    assert_eq!(held.3.as_deref(), Some("first"));

    // The daemon's root declares it too, beside an object of its own.
    let repo = ServedRepo::start();
    repo.work
        .write("apps/shared.yaml", configmap(n, "shared", "second-1"))
        .write("apps/own.yaml", configmap(n, "own", "v1"));
    repo.work.commit("v1");
    repo.work.push();
    let d = Daemon::start(DaemonOptions {
        interval: "2s",
        ..DaemonOptions::new(&repo.url(), n)
    });
    let s = d
        .wait_status("the first pass", Duration::from_secs(60), |s| {
            s["lastPass"]["pass"].as_u64().is_some_and(|p| p >= 1)
        })
        .await;
    assert_eq!(s["lastPass"]["result"], "failed", "{s:#}");
    assert!(
        s["lastPass"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("owned by another Weft root"),
        "{s:#}"
    );

    for (i, via) in [(2, Via::Poll), (3, Via::Webhook)] {
        // Both files change: the other root's object and this root's own.
        repo.work
            .write(
                "apps/shared.yaml",
                configmap(n, "shared", &format!("second-{i}")),
            )
            .write("apps/own.yaml", configmap(n, "own", &format!("v{i}")));
        let s = push_and_wait(&repo, &d, &format!("v{i}"), via).await;
        assert_eq!(s["lastPass"]["result"], "failed", "{s:#}");
        let own = api.get("own").await.expect("own");
        assert_eq!(
            own.data.and_then(|d| d.get("value").cloned()).as_deref(),
            Some(format!("v{i}").as_str()),
            "{via:?}"
        );
        assert_eq!(
            holding(&api.get("shared").await.expect("shared")),
            held,
            "{via:?}: another root's object was written\n{}",
            d.logs()
        );
        let early = early_lines(&d);
        assert_eq!(early.len(), i - 1, "{via:?}:\n{}", d.logs());
        assert!(
            early[i - 2].contains("objects=1 files=2"),
            "{via:?}: only this root's own object goes out early:\n{}",
            d.logs()
        );
    }
    // The holder still holds it: its sync reports the other root's claim, not a takeover.
    let (_, out, err) = first_sync();
    assert!(
        out.contains("declares it too") || err.contains("declares it too"),
        "{out}{err}"
    );
    assert!(
        !format!("{out}{err}").contains("owned by another Weft root"),
        "{out}{err}"
    );
    assert_eq!(holding(&api.get("shared").await.expect("shared")), held);
    drop(d);
    ns.delete().await;
}

fn deployment(ns: &str, release: &str, image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {ns}
  labels: {{release: "{release}"}}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
        - name: app
          image: registry.example/app:{image}
"#
    )
}

fn settings(ns: &str, value: &str, other: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\n  annotations:\n    weft.io/ignore-fields: /data/value\ndata:\n  value: \"{value}\"\n  other: \"{other}\"\n"
    )
}

/// (b) and (c): a push that changes a Deployment an HPA scales keeps the HPA's replicas (the old
/// early apply set git's value back within 0.5 s: an image bump cut capacity), and a field listed
/// in `weft.io/ignore-fields` keeps its other manager's value; the rest of each object goes out
/// early. No pass calls the autoscaler's replicas drift, and the status says why each object
/// changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_apply_keeps_an_autoscalers_replicas_and_ignored_fields() {
    let ns = TestNamespace::new("early-hpa").await;
    let n = ns.name();
    let client = ns.client();
    let repo = ServedRepo::start();
    repo.work
        .write("apps/web.yaml", deployment(n, "1", "1"))
        .write("apps/settings.yaml", settings(n, "git-1", "git-1"));
    repo.work.commit("v1");
    repo.work.push();
    let d = Daemon::start(DaemonOptions {
        interval: "2s",
        ..DaemonOptions::new(&repo.url(), n)
    });
    d.wait_status("the first pass", Duration::from_secs(60), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;

    // An HPA (min = max = 3, so a real controller agrees with the scale below), and the scale it
    // makes through the scale subresource.
    let hpa = serde_json::json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": n},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 3, "maxReplicas": 3,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                     "target": {"type": "Utilization", "averageUtilization": 50}}}]}
    });
    let hpas: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        n,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler"),
            "horizontalpodautoscalers",
        ),
    );
    hpas.create(
        &Default::default(),
        &serde_json::from_value(hpa).expect("hpa"),
    )
    .await
    .expect("create the HPA");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), n);
    deployments
        .patch_scale(
            "web",
            &PatchParams {
                field_manager: Some("hpa-test".into()),
                ..Default::default()
            },
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale");
    // Another controller owns settings' data.value.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), n);
    cms.patch(
        "settings",
        &PatchParams {
            field_manager: Some("someone-else".into()),
            ..Default::default()
        },
        &Patch::Merge(serde_json::json!({"data": {"value": "theirs"}})),
    )
    .await
    .expect("patch");

    // Polls after the scale: the autoscaler's replicas are never drift (they used to be logged
    // `configured (drifted: /spec/replicas)`, and re-applied, after each scale).
    let pass = d.status().await["lastPass"]["pass"].as_u64().unwrap_or(0);
    d.wait_status("two polls after the scale", Duration::from_secs(30), |s| {
        s["lastPass"]["pass"]
            .as_u64()
            .is_some_and(|p| p >= pass + 2)
    })
    .await;
    assert!(
        !d.logs().contains("drifted: /spec/replicas"),
        "an autoscaler's replicas called drift:\n{}",
        d.logs()
    );

    for (i, via) in [(2, Via::Poll), (3, Via::Webhook)] {
        // A label and an image: the replicas in git stay 1; git changes the ignored field too.
        repo.work
            .write(
                "apps/web.yaml",
                deployment(n, &i.to_string(), &i.to_string()),
            )
            .write(
                "apps/settings.yaml",
                settings(n, &format!("git-{i}"), &format!("git-{i}")),
            );
        let s = push_and_wait(&repo, &d, &format!("v{i}"), via).await;
        assert_eq!(s["lastPass"]["result"], "succeeded", "{s:#}");
        let web = deployments.get("web").await.expect("web");
        assert_eq!(web.labels().get("release"), Some(&i.to_string()), "{via:?}");
        assert_eq!(
            web.spec.as_ref().and_then(|s| s.replicas),
            Some(3),
            "{via:?}: the autoscaler's replicas were set back to git's\n{}",
            d.logs()
        );
        let data = cms
            .get("settings")
            .await
            .expect("get")
            .data
            .unwrap_or_default();
        assert_eq!(
            data.get("value").map(String::as_str),
            Some("theirs"),
            "{via:?}"
        );
        assert_eq!(
            data.get("other").map(String::as_str),
            Some(format!("git-{i}").as_str()),
            "{via:?}"
        );
        let early = early_lines(&d);
        assert_eq!(early.len(), i - 1, "{via:?}:\n{}", d.logs());
        assert!(early[i - 2].contains("objects=2 files=2"), "{}", d.logs());
        // The status says why each object changed (the pass that fetched the revision: after a
        // webhook, the poll pass that follows it may be the last one).
        if let Via::Webhook = via {
            continue;
        }
        let changes = s["lastPass"]["changes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            changes.iter().any(|c| c["object"]
                .as_str()
                .is_some_and(|o| o.contains("Deployment") && o.ends_with("/web"))
                && c["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("changed"))),
            "{s:#}"
        );
    }
    // A few more polls: the autoscaler's replicas are never drift.
    let pass = d.status().await["lastPass"]["pass"].as_u64().unwrap_or(0);
    d.wait_status("two more passes", Duration::from_secs(30), |s| {
        s["lastPass"]["pass"]
            .as_u64()
            .is_some_and(|p| p >= pass + 2)
    })
    .await;
    assert!(
        !d.logs().contains("drifted: /spec/replicas"),
        "an autoscaler's replicas called drift:\n{}",
        d.logs()
    );
    drop(d);
    ns.delete().await;
}

/// The values of the ConfigMaps `cm-*` of `ns`, by name.
async fn values(api: &Api<ConfigMap>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = api
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter(|c| c.name_any().starts_with("cm-"))
        .map(|c| {
            let v = c
                .data
                .and_then(|d| d.get("value").cloned())
                .unwrap_or_default();
            (c.metadata.name.unwrap_or_default(), v)
        })
        .collect();
    out.sort();
    out
}

/// Item 3: after a rollout (SIGTERM released the Lease), a daemon of another repository (a fork
/// that lacks an object) does not switch the root without a word: it refuses to start and says
/// to pass `--switch-repository`, as `weft sync` does; with it, it switches once, and the root
/// records the new repository (the same daemon starts again without the flag).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_of_another_repository_switches_the_root_only_when_told() {
    let ns = TestNamespace::new("switch-repo").await;
    let n = ns.name();
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), n);
    let original = ServedRepo::start();
    for i in 0..5 {
        original.work.write(
            &format!("apps/cm-{i}.yaml"),
            configmap(n, &format!("cm-{i}"), "original"),
        );
    }
    original.work.commit("five");
    original.work.push();
    let mut d = Daemon::start(DaemonOptions::new(&original.url(), n));
    d.wait_status("the first pass", Duration::from_secs(60), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    d.terminate();
    let before = values(&api).await;
    assert_eq!(before.len(), 5);

    // A fork with four of the five objects, each changed.
    let fork = ServedRepo::start();
    for i in 0..4 {
        fork.work.write(
            &format!("apps/cm-{i}.yaml"),
            configmap(n, &format!("cm-{i}"), "fork"),
        );
    }
    fork.work.commit("four");
    fork.work.push();
    let (code, logs) =
        support::daemon::run_to_exit(&fork.url(), n, &support::cluster::cluster().kube_args());
    assert_eq!(code, Some(1), "the fork's daemon did not refuse:\n{logs}");
    assert!(logs.contains("refusing to start"), "{logs}");
    assert!(logs.contains("--switch-repository"), "{logs}");
    assert!(
        logs.contains(&format!("the root {n} syncs ")),
        "the line names the root:\n{logs}"
    );
    assert_eq!(values(&api).await, before, "nothing changed or was pruned");

    // Told: the root switches, once.
    let mut d = Daemon::start(DaemonOptions {
        extra: vec!["--switch-repository".into()],
        ..DaemonOptions::new(&fork.url(), n)
    });
    d.wait_status("the switched pass", Duration::from_secs(60), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    let after: Vec<(String, String)> = (0..4)
        .map(|i| (format!("cm-{i}"), "fork".to_string()))
        .collect();
    assert_eq!(values(&api).await, after, "{}", d.logs());
    d.terminate();

    // The root records the fork now: its daemon starts without the flag, and `weft sync` of
    // the original repository is the one refused.
    let d = Daemon::start(DaemonOptions::new(&fork.url(), n));
    d.wait_status("a pass without the flag", Duration::from_secs(60), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    drop(d);
    let (code, out, err) = Weft::new(["sync", "--repo", &original.url(), "--ignore-leader"])
        .cluster()
        .root(n)
        .run();
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("--switch-repository"), "{err}");
    assert_eq!(values(&api).await, after);
    ns.delete().await;
}
