use super::*;
use crate::api::owner::OwnerKind;
use crate::api::ObjectRef;
use serde_json::json;
use std::collections::BTreeSet;

fn spec(extra: Value) -> ArmadaChartSpec {
    let mut v = json!({"release": "api", "namespace": "demo",
        "source": {"type": "local", "location": "charts/api"}});
    if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    serde_json::from_value(v).expect("spec")
}

fn chart(name: &str) -> Owner {
    Owner::resource(OwnerKind::ArmadaChart, "default", name)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_chart_failure_names_the_chart_its_objects_and_what_happened_to_its_group() {
    let owner = chart("api");
    let deploy = ObjectRef {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: "demo".into(),
        name: "demo-api".into(),
    };
    let why = NotReady {
        timed_out: Some(Duration::from_secs(5)),
        not_ready: vec![(deploy.clone(), "0 of 1 replicas available".into())],
        failed: Vec::new(),
        missing: vec!["no Job with labels {app=migrate}".into()],
    };
    let rule = wait_rule(&owner, &spec(json!({})));
    let text = failure(&owner, &rule, why.clone()).to_string();
    assert_eq!(
        text,
        "ArmadaChart default/api did not become ready within 5s (its wait.timeout); the charts after it were not deployed\n  no Job with labels {app=migrate}\ntimed out after 5s waiting for 1 object(s) to become ready:\n  Deployment/demo/demo-api: 0 of 1 replicas available"
    );
    let protected = wait_rule(
        &owner,
        &spec(json!({"protected": {"continue_processing": true}})),
    );
    let text = failure(&owner, &protected, why).to_string();
    assert!(
        text.contains(
            "it is protected with continue_processing, so the charts after it were deployed"
        ),
        "{text}"
    );
    let failed = NotReady {
        timed_out: None,
        failed: vec![(deploy, "exceeded its progress deadline".into())],
        ..Default::default()
    };
    let text = failure(&owner, &protected, failed).to_string();
    assert!(
        text.starts_with("ArmadaChart default/api failed; "),
        "{text}"
    );
    assert!(
        text.contains("Deployment/demo/demo-api: exceeded its progress deadline"),
        "{text}"
    );
}

#[test]
fn a_wait_block_becomes_selectors_with_its_labels_min_ready_and_required() {
    let s = spec(
        json!({"wait": {"timeout": 60, "labels": {"app": "api"}, "resources": [
            {"type": "deployment", "min_ready": "50%"},
            {"type": "statefulset", "labels": {"tier": "db"}, "min_ready": 2, "required": false, "allow_async_updates": true},
            {"type": "daemonset"}
        ]}}),
    );
    let rule = wait_rule(&chart("api"), &s);
    assert_eq!(rule.subject, "chart default/api");
    assert_eq!(rule.namespace, "demo");
    assert_eq!(rule.timeout, Duration::from_secs(60));
    assert!(!rule.continue_on_failure);
    assert_eq!(
        rule.selectors,
        vec![
            Selector {
                kind: "Deployment".into(),
                labels: labels(&[("app", "api")]),
                min_ready: Threshold::Percent(50),
                required: true,
                allow_async_updates: false,
            },
            Selector {
                kind: "StatefulSet".into(),
                labels: labels(&[("app", "api"), ("tier", "db")]),
                min_ready: Threshold::Count(2),
                required: false,
                allow_async_updates: true,
            },
            Selector {
                kind: "DaemonSet".into(),
                labels: labels(&[("app", "api")]),
                min_ready: Threshold::Percent(100),
                required: true,
                allow_async_updates: false,
            },
        ]
    );
    for s in &rule.selectors {
        assert!(readiness::selectable(&s.kind), "{}", s.kind);
    }
}

#[test]
fn without_resources_a_chart_waits_for_its_jobs_and_requires_pods() {
    let by_labels = spec(json!({"wait": {"labels": {"app": "api"}}}));
    let kinds: Vec<(String, bool)> = wait_rule(&chart("api"), &by_labels)
        .selectors
        .into_iter()
        .map(|s| {
            assert_eq!(s.labels, labels(&[("app", "api")]));
            (s.kind, s.required)
        })
        .collect();
    // Armada's `wait.py` for a chart without `resources`: jobs if any, pods required.
    assert_eq!(
        kinds,
        vec![("Job".to_string(), false), ("Pod".to_string(), true)]
    );
    let none = selectors(None);
    assert_eq!(none.len(), 2);
    assert!(none.iter().all(|s| s.labels.is_empty()));
    assert!(none.iter().any(|s| s.kind == "Pod" && s.required));
    // `resources: []` waits for nothing.
    let nothing: Wait = serde_json::from_value(json!({"resources": []})).expect("wait");
    assert!(selectors(Some(&nothing)).is_empty());
}

#[test]
fn min_ready_and_timeouts() {
    assert_eq!(min_ready(None), Threshold::Percent(100));
    assert_eq!(
        min_ready(Some(&spec::MinReady::Count(3))),
        Threshold::Count(3)
    );
    assert_eq!(
        min_ready(Some(&spec::MinReady::Text("80%".into()))),
        Threshold::Percent(80)
    );
    assert_eq!(
        min_ready(Some(&spec::MinReady::Text("4".into()))),
        Threshold::Count(4)
    );
    // Refused by the loader; a repository it did not check gets the default.
    assert_eq!(
        min_ready(Some(&spec::MinReady::Count(-1))),
        Threshold::Percent(100)
    );
    assert_eq!(
        min_ready(Some(&spec::MinReady::Text("most".into()))),
        Threshold::Percent(100)
    );

    assert_eq!(timeout(&spec(json!({}))), Duration::from_secs(900));
    assert_eq!(
        timeout(&spec(json!({"timeout": 120}))),
        Duration::from_secs(120)
    );
    assert_eq!(
        timeout(&spec(json!({"timeout": 120, "wait": {"timeout": 60}}))),
        Duration::from_secs(60)
    );
}

#[test]
fn upgrade_pre_delete_becomes_deletes_before_an_update() {
    let s = spec(
        json!({"wait": {"timeout": 30}, "upgrade": {"pre": {"delete": [
            {"type": "job", "labels": {"app": "migrate"}},
            {"type": "pods"},
            {"type": "CronJob", "labels": {"app": "nightly"}}
        ]}}}),
    );
    let d = pre_update_delete(&s).expect("deletes");
    assert_eq!(d.namespace, "demo");
    assert_eq!(d.timeout, Duration::from_secs(30));
    assert_eq!(d.reason, "upgrade.pre.delete");
    let targets: Vec<(&str, &str, usize)> = d
        .targets
        .iter()
        .map(|t| (t.api_version.as_str(), t.kind.as_str(), t.labels.len()))
        .collect();
    assert_eq!(
        targets,
        vec![
            ("batch/v1", "Job", 1),
            ("v1", "Pod", 0),
            ("batch/v1", "CronJob", 1)
        ]
    );
    assert_eq!(pre_update_delete(&spec(json!({}))), None);
    assert_eq!(
        pre_update_delete(&spec(json!({"upgrade": {"pre": {"delete": []}}}))),
        None
    );
}

fn chart_cr(name: &str, api_version: &str, extra: Value) -> Value {
    let mut s = json!({"release": name, "namespace": "demo",
        "source": {"type": "local", "location": "charts/app"}});
    if let (Some(m), Some(e)) = (s.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    json!({"apiVersion": api_version, "kind": "ArmadaChart",
        "metadata": {"name": name, "namespace": "default"}, "spec": s})
}

#[test]
fn the_policy_of_a_set_has_every_charts_rules() {
    let root = Owner::root("weft-system", "weft");
    let objects = vec![
        root.adopt(
            chart_cr(
                "web",
                "armada.airshipit.org/v1alpha1",
                json!({"driftPolicy": "report", "protected": {"continue_processing": true}}),
            ),
            0,
            None,
        ),
        root.adopt(
            chart_cr(
                "db",
                "armada.airshipit.org/v1alpha1",
                json!({"upgrade": {"pre": {"delete": [{"type": "job"}]}}}),
            ),
            0,
            None,
        ),
        // Another API's ArmadaChart is not Armada's.
        root.adopt(chart_cr("other", "example.com/v1", json!({})), 0, None),
        root.adopt(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "demo"}}),
            0,
            None,
        ),
    ];
    let set = DesiredSet::for_owners(objects, BTreeSet::from([root]));
    let p = policy(&set);
    assert_eq!(
        p.waits.keys().cloned().collect::<Vec<_>>(),
        vec![chart("db"), chart("web")]
    );
    assert!(p.waits[&chart("web")].continue_on_failure);
    assert!(!p.waits[&chart("db")].continue_on_failure);
    assert_eq!(
        p.report_drift.keys().cloned().collect::<Vec<_>>(),
        vec![chart("web")]
    );
    assert_eq!(p.report_drift[&chart("web")].rule, "driftPolicy: report");
    assert!(p.report_drift[&chart("web")].applied_before.is_empty());
    assert_eq!(
        p.pre_update_deletes.keys().cloned().collect::<Vec<_>>(),
        vec![chart("db")]
    );
    assert!(
        p.unwaited_kinds.is_empty(),
        "the pass adds Weft's own kinds"
    );
}

#[test]
fn a_chart_wait_judges_its_pods_and_leaves_job_pods_to_the_job() {
    let live = vec![
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "api-1", "namespace": "demo", "labels": {"app": "api"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "migrate-x", "namespace": "demo", "labels": {"app": "api"},
            "ownerReferences": [{"kind": "Job", "name": "migrate"}]}, "status": {"phase": "Failed"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "demo", "labels": {"app": "other"}},
            "status": {"phase": "Pending"}}),
    ];
    let wait: Wait = serde_json::from_value(json!({"labels": {"app": "api"}})).expect("wait");
    let r = chart_readiness(Some(&wait), &live);
    assert!(r.is_ready(), "{r:?}");
    assert_eq!(r.ready.len(), 1);
    // No pod matches: not ready (Armada times out on it), and the reason names the labels.
    let r = chart_readiness(Some(&wait), &live[1..2]);
    assert!(!r.is_ready(), "{r:?}");
    assert_eq!(
        r.missing,
        vec!["no Pod with labels {app=api}: are `wait.labels` correct? Does `wait.resources` need to exclude `type: pod`?"]
    );
    let empty: Wait = serde_json::from_value(json!({"resources": []})).expect("wait");
    assert!(chart_readiness(Some(&empty), &[]).is_ready());
}
