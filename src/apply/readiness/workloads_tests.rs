use super::super::readiness;
use super::*;
use serde_json::json;

const ALL: Threshold = Threshold::Percent(100);

fn deploy(replicas: i64, status: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "demo", "generation": 4, "labels": {"app": "api"}},
        "spec": {"replicas": replicas, "progressDeadlineSeconds": 600},
        "status": status,
    })
}

fn in_progress(r: Readiness) -> String {
    match r {
        Readiness::InProgress(why) => why,
        other => panic!("expected in progress, got {other:?}"),
    }
}

#[test]
fn deployment_rollout_and_min_ready() {
    let done = deploy(
        4,
        json!({"observedGeneration": 4, "replicas": 4, "updatedReplicas": 4, "readyReplicas": 4, "availableReplicas": 4,
        "conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}),
    );
    assert_eq!(deployment(&done, ALL), Readiness::Ready);
    assert_eq!(readiness("Deployment", &done), Readiness::Ready);

    let three_available = deploy(
        4,
        json!({"observedGeneration": 4, "replicas": 4, "updatedReplicas": 4, "availableReplicas": 3}),
    );
    assert_eq!(
        in_progress(deployment(&three_available, ALL)),
        "3 of 4 replicas available, 4 needed (min_ready)"
    );
    // 75% of 4 = 3; 80% of 4 = 3.2 → 4 (rounded up).
    assert_eq!(
        deployment(&three_available, Threshold::Percent(75)),
        Readiness::Ready
    );
    assert!(matches!(
        deployment(&three_available, Threshold::Percent(80)),
        Readiness::InProgress(_)
    ));
    assert_eq!(
        deployment(&three_available, Threshold::Count(3)),
        Readiness::Ready
    );

    let rolling = deploy(
        4,
        json!({"observedGeneration": 4, "replicas": 5, "updatedReplicas": 2, "availableReplicas": 4,
        "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]}),
    );
    assert_eq!(
        in_progress(deployment(&rolling, ALL)),
        "2 of 4 replicas updated"
    );
    let old_left = deploy(
        4,
        json!({"observedGeneration": 4, "replicas": 5, "updatedReplicas": 4, "availableReplicas": 4}),
    );
    assert_eq!(
        in_progress(deployment(&old_left, ALL)),
        "1 old replicas pending termination"
    );
}

#[test]
fn deployment_progress_deadline_exceeded_fails() {
    let stuck = deploy(
        2,
        json!({"observedGeneration": 4, "replicas": 3, "updatedReplicas": 1, "availableReplicas": 2,
        "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
            "message": "ReplicaSet \"api-7d9f\" has timed out progressing."}]}),
    );
    match deployment(&stuck, ALL) {
        Readiness::Failed(why) => assert!(
            why.contains("progress deadline") && why.contains("has timed out progressing"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn observed_generation_behind_is_not_ready_even_with_good_counts() {
    let stale = deploy(
        2,
        json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}),
    );
    assert_eq!(
        in_progress(deployment(&stale, ALL)),
        "observed generation 3 is behind generation 4: the controller has not seen the change yet"
    );
    let no_status = deploy(2, json!({}));
    assert!(in_progress(deployment(&no_status, ALL)).contains("observed generation 0"));
}

#[test]
fn zero_replicas_are_ready() {
    let zero = deploy(0, json!({"observedGeneration": 4}));
    assert_eq!(deployment(&zero, ALL), Readiness::Ready);
    assert_eq!(
        deployment(&zero, Threshold::Count(2)),
        Readiness::Ready,
        "a count above the desired replicas is capped"
    );
    let ds = json!({"kind": "DaemonSet", "metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 0}});
    assert_eq!(daemonset(&ds, ALL), Readiness::Ready);
    let sts = json!({"kind": "StatefulSet", "metadata": {"generation": 1}, "spec": {"replicas": 0},
        "status": {"observedGeneration": 1, "replicas": 0, "currentRevision": "db-1", "updateRevision": "db-1"}});
    assert_eq!(statefulset(&sts, ALL), Readiness::Ready);
}

#[test]
fn daemonset_rules() {
    let ds = |updated: i64, available: i64| {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "generation": 2},
            "spec": {"updateStrategy": {"type": "RollingUpdate"}},
            "status": {"observedGeneration": 2, "desiredNumberScheduled": 5, "currentNumberScheduled": 5,
                "updatedNumberScheduled": updated, "numberReady": available, "numberAvailable": available}})
    };
    assert_eq!(daemonset(&ds(5, 5), ALL), Readiness::Ready);
    assert_eq!(
        in_progress(daemonset(&ds(3, 5), ALL)),
        "3 of 5 pods updated"
    );
    assert_eq!(
        in_progress(readiness("DaemonSet", &ds(5, 3))),
        "3 of 5 pods available, 5 needed (min_ready)"
    );
    assert_eq!(
        daemonset(&ds(5, 4), Threshold::Percent(80)),
        Readiness::Ready
    );
    assert!(matches!(
        daemonset(&ds(5, 3), Threshold::Percent(61)),
        Readiness::InProgress(_)
    )); // 3.05 → 4
}

fn sts(partition: Option<i64>, status: Value) -> Value {
    let mut strategy = json!({"type": "RollingUpdate"});
    if let Some(p) = partition {
        strategy["rollingUpdate"] = json!({"partition": p});
    }
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "demo", "generation": 3},
        "spec": {"replicas": 5, "updateStrategy": strategy}, "status": status})
}

#[test]
fn statefulset_rollout_with_and_without_partition() {
    let done = sts(
        None,
        json!({"observedGeneration": 3, "replicas": 5, "readyReplicas": 5, "currentReplicas": 5, "updatedReplicas": 5,
        "currentRevision": "db-6f7", "updateRevision": "db-6f7"}),
    );
    assert_eq!(statefulset(&done, ALL), Readiness::Ready);
    let rolling = sts(
        None,
        json!({"observedGeneration": 3, "replicas": 5, "readyReplicas": 5, "currentReplicas": 3, "updatedReplicas": 2,
        "currentRevision": "db-6f7", "updateRevision": "db-8a1"}),
    );
    assert_eq!(
        in_progress(readiness("StatefulSet", &rolling)),
        "rolling update to revision db-8a1: 2 of 5 replicas updated"
    );
    // Partition 3: only ordinals 3 and 4 are updated; the revisions stay different for good.
    let partitioned_done = sts(
        Some(3),
        json!({"observedGeneration": 3, "replicas": 5, "readyReplicas": 5, "currentReplicas": 3, "updatedReplicas": 2,
        "currentRevision": "db-6f7", "updateRevision": "db-8a1"}),
    );
    assert_eq!(statefulset(&partitioned_done, ALL), Readiness::Ready);
    let partitioned_rolling = sts(
        Some(3),
        json!({"observedGeneration": 3, "replicas": 5, "readyReplicas": 5, "currentReplicas": 4, "updatedReplicas": 1,
        "currentRevision": "db-6f7", "updateRevision": "db-8a1"}),
    );
    assert_eq!(
        in_progress(statefulset(&partitioned_rolling, ALL)),
        "1 of 2 replicas at or above partition 3 updated"
    );
    let not_enough_ready = sts(
        None,
        json!({"observedGeneration": 3, "replicas": 5, "readyReplicas": 3,
        "currentRevision": "db-6f7", "updateRevision": "db-6f7"}),
    );
    assert_eq!(
        in_progress(statefulset(&not_enough_ready, ALL)),
        "3 of 5 replicas ready, 5 needed (min_ready)"
    );
    assert_eq!(
        statefulset(&not_enough_ready, Threshold::Percent(60)),
        Readiness::Ready
    );
}

#[test]
fn replicaset_needs_every_replica_available() {
    let rs = |available: i64| {
        json!({"metadata": {"generation": 2}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 2, "availableReplicas": available}})
    };
    assert_eq!(readiness("ReplicaSet", &rs(3)), Readiness::Ready);
    assert_eq!(
        in_progress(readiness("ReplicaSet", &rs(1))),
        "1 of 3 replicas available"
    );
    let behind = json!({"metadata": {"generation": 3}, "spec": {"replicas": 1}, "status": {"observedGeneration": 2}});
    assert_eq!(
        in_progress(replicaset(&behind)),
        "observed generation 2 is behind generation 3"
    );
}

#[test]
fn async_updates_are_refused_unless_allowed() {
    let ds = |generation: i64, strategy: &str| {
        json!({"kind": "DaemonSet", "metadata": {"generation": generation},
            "spec": {"updateStrategy": {"type": strategy}},
            "status": {"observedGeneration": generation}})
    };
    // A first install is never an async update.
    assert_eq!(async_update_refused("DaemonSet", &ds(1, "OnDelete")), None);
    assert_eq!(
        async_update_refused("DaemonSet", &ds(2, "RollingUpdate")),
        None
    );
    assert!(async_update_refused("DaemonSet", &ds(2, "OnDelete"))
        .is_some_and(|w| w.contains("update strategy type is OnDelete")));
    let sts = json!({"kind": "StatefulSet", "spec": {"replicas": 3,
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}},
        "status": {"observedGeneration": 4}});
    assert!(async_update_refused("StatefulSet", &sts)
        .is_some_and(|w| w.contains("partitioned rollout")));
    assert_eq!(async_update_refused("Deployment", &ds(5, "OnDelete")), None);

    // In a label-selector wait: refused (not ready) unless the selector allows it.
    let mut live = ds(3, "OnDelete");
    live["apiVersion"] = json!("apps/v1");
    live["metadata"]["name"] = json!("agent");
    live["status"] = json!({"observedGeneration": 3, "desiredNumberScheduled": 1,
        "updatedNumberScheduled": 0, "numberAvailable": 1});
    let mut selector = super::super::Selector {
        kind: "DaemonSet".into(),
        labels: Default::default(),
        min_ready: ALL,
        required: true,
        allow_async_updates: false,
    };
    let strict = super::super::judge(std::slice::from_ref(&selector), std::slice::from_ref(&live));
    assert!(!strict.is_ready(), "{strict:?}");
    assert!(strict.not_ready[0]
        .1
        .starts_with("async update not allowed"));
    selector.allow_async_updates = true;
    assert!(super::super::judge(&[selector], &[live]).is_ready());
}
