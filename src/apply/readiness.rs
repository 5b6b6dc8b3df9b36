//! Armada's readiness rules (the `wait` block of an ArmadaChart) as pure functions of an object's
//! status, in the manner of Armada's `wait.py` and `kubectl rollout status`:
//!
//! - Pod: `Running` with condition `Ready=True`, or `Succeeded`. Pods owned by a Job are left to
//!   the Job rule.
//! - Job: `succeeded >= completions` (default 1); a `Failed=True` condition fails. Jobs owned by a
//!   CronJob are not waited for (they come and go on a schedule).
//! - Deployment: `observedGeneration` current, not `ProgressDeadlineExceeded`, updated replicas
//!   ≥ desired, no old replicas left, available ≥ `min_ready`.
//! - DaemonSet: `observedGeneration` current, updated ≥ desired scheduled, available ≥ `min_ready`.
//! - StatefulSet: `observedGeneration` current, ready ≥ `min_ready`, and the rollout done: with a
//!   `partition`, the replicas at or above it updated; without, `currentRevision == updateRevision`.
//!
//! `min_ready` is a count or a percentage of the desired pods, rounded up; default 100%. A count
//! larger than the desired replicas is capped at the desired count (zero replicas are ready).
//! Listing the objects and waiting with a timeout is the apply engine's part.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

pub use super::wait::Readiness;
use crate::api::armada::{
    ArmadaChartSpec, Threshold, Wait, WaitResourceType, DEFAULT_WAIT_TIMEOUT_SECS,
};
use crate::api::ObjectRef;

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

fn text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn condition<'a>(v: &'a Value, type_: &str) -> Option<&'a Value> {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

fn condition_is(v: &Value, type_: &str, status: &str) -> bool {
    condition(v, type_)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some(status)
}

fn condition_message(v: &Value, type_: &str) -> String {
    condition(v, type_)
        .and_then(|c| c.get("message").or_else(|| c.get("reason")))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn not_ready(why: impl Into<String>) -> Readiness {
    Readiness::InProgress(why.into())
}

/// `observedGeneration` must have caught up with `generation` before the rest of the status
/// means anything.
fn generation_behind(v: &Value) -> Option<Readiness> {
    let generation = int(v, "/metadata/generation")?;
    let observed = int(v, "/status/observedGeneration").unwrap_or(0);
    (observed < generation).then(|| not_ready(format!("observed generation {observed} is behind generation {generation}: the controller has not seen the change yet")))
}

/// Pods that must be ready out of `desired`, capped at `desired`.
fn required(threshold: Threshold, desired: i64) -> i64 {
    let desired = desired.max(0) as u64;
    threshold.required(desired).min(desired) as i64
}

/// A Pod: `Running` and `Ready`, or `Succeeded`.
pub fn pod(v: &Value) -> Readiness {
    match text(v, "/status/phase") {
        Some("Succeeded") => Readiness::Ready,
        Some("Failed") => Readiness::Failed(format!(
            "pod failed{}",
            text(v, "/status/reason")
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        )),
        Some("Running") if condition_is(v, "Ready", "True") => Readiness::Ready,
        Some("Running") => not_ready(
            format!("running but not Ready {}", condition_message(v, "Ready"))
                .trim_end()
                .to_string(),
        ),
        phase => not_ready(format!("phase is {}", phase.unwrap_or("unknown"))),
    }
}

/// A Job: succeeded ≥ completions.
pub fn job(v: &Value) -> Readiness {
    if condition_is(v, "Failed", "True") {
        return Readiness::Failed(format!("job failed: {}", condition_message(v, "Failed")));
    }
    let completions = int(v, "/spec/completions").unwrap_or(1);
    let succeeded = int(v, "/status/succeeded").unwrap_or(0);
    // `Complete` (or, with a success policy, `SuccessCriteriaMet`) is the Job controller's own
    // verdict, e.g. for an indexed Job that succeeded by policy before all completions.
    let complete =
        condition_is(v, "Complete", "True") || condition_is(v, "SuccessCriteriaMet", "True");
    if complete || succeeded >= completions {
        Readiness::Ready
    } else {
        not_ready(format!(
            "{succeeded} of {completions} completions succeeded"
        ))
    }
}

/// A Deployment with `min_ready`.
pub fn deployment(v: &Value, threshold: Threshold) -> Readiness {
    if let Some(r) = generation_behind(v) {
        return r;
    }
    if let Some(c) = condition(v, "Progressing") {
        if c.get("reason").and_then(Value::as_str) == Some("ProgressDeadlineExceeded") {
            return Readiness::Failed(format!(
                "exceeded its progress deadline: {}",
                condition_message(v, "Progressing")
            ));
        }
    }
    let desired = int(v, "/spec/replicas").unwrap_or(1);
    let updated = int(v, "/status/updatedReplicas").unwrap_or(0);
    let total = int(v, "/status/replicas").unwrap_or(0);
    let available = int(v, "/status/availableReplicas").unwrap_or(0);
    if updated < desired {
        return not_ready(format!("{updated} of {desired} replicas updated"));
    }
    if total > updated {
        return not_ready(format!(
            "{} old replicas pending termination",
            total - updated
        ));
    }
    let need = required(threshold, desired);
    if available < need {
        return not_ready(format!(
            "{available} of {desired} replicas available, {need} needed (min_ready)"
        ));
    }
    Readiness::Ready
}

/// A DaemonSet with `min_ready`.
pub fn daemonset(v: &Value, threshold: Threshold) -> Readiness {
    if let Some(r) = generation_behind(v) {
        return r;
    }
    let desired = int(v, "/status/desiredNumberScheduled").unwrap_or(0);
    let on_delete = text(v, "/spec/updateStrategy/type") == Some("OnDelete");
    let updated = int(v, "/status/updatedNumberScheduled").unwrap_or(0);
    if !on_delete && updated < desired {
        return not_ready(format!("{updated} of {desired} pods updated"));
    }
    let available = int(v, "/status/numberAvailable").unwrap_or(0);
    let need = required(threshold, desired);
    if available < need {
        return not_ready(format!(
            "{available} of {desired} pods available, {need} needed (min_ready)"
        ));
    }
    Readiness::Ready
}

/// A StatefulSet with `min_ready`; a partitioned rollout is done when the pods at or above the
/// partition are updated.
pub fn statefulset(v: &Value, threshold: Threshold) -> Readiness {
    if let Some(r) = generation_behind(v) {
        return r;
    }
    let desired = int(v, "/spec/replicas").unwrap_or(1);
    let ready = int(v, "/status/readyReplicas").unwrap_or(0);
    let need = required(threshold, desired);
    if ready < need {
        return not_ready(format!(
            "{ready} of {desired} replicas ready, {need} needed (min_ready)"
        ));
    }
    if text(v, "/spec/updateStrategy/type") == Some("OnDelete") {
        return Readiness::Ready;
    }
    match int(v, "/spec/updateStrategy/rollingUpdate/partition").filter(|p| *p > 0) {
        Some(partition) => {
            let should = (desired - partition).max(0);
            let updated = int(v, "/status/updatedReplicas").unwrap_or(0);
            if updated < should {
                return not_ready(format!(
                    "{updated} of {should} replicas at or above partition {partition} updated"
                ));
            }
        }
        None => {
            let current = text(v, "/status/currentRevision");
            let update = text(v, "/status/updateRevision");
            if let Some(update) = update {
                if current != Some(update) {
                    let updated = int(v, "/status/updatedReplicas").unwrap_or(0);
                    return not_ready(format!("rolling update to revision {update}: {updated} of {desired} replicas updated"));
                }
            }
        }
    }
    Readiness::Ready
}

/// The readiness of one object of a wait type.
pub fn object_readiness(type_: WaitResourceType, v: &Value, threshold: Threshold) -> Readiness {
    match type_ {
        WaitResourceType::Pod => pod(v),
        WaitResourceType::Job => job(v),
        WaitResourceType::Deployment => deployment(v, threshold),
        WaitResourceType::Daemonset => daemonset(v, threshold),
        WaitResourceType::Statefulset => statefulset(v, threshold),
    }
}

fn owned_by(v: &Value, kind: &str) -> bool {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("kind").and_then(Value::as_str) == Some(kind))
        })
}

/// Objects the wait leaves out: Jobs run by a CronJob, Pods run by a Job (the Job is waited
/// for), and Helm test pods.
pub fn excluded(type_: WaitResourceType, v: &Value) -> bool {
    match type_ {
        WaitResourceType::Job => owned_by(v, "CronJob"),
        WaitResourceType::Pod => {
            owned_by(v, "Job")
                || text(v, "/metadata/annotations/helm.sh~1hook")
                    .is_some_and(|h| h.split(',').any(|h| h.trim().starts_with("test")))
        }
        _ => false,
    }
}

/// What to wait for: one entry of `wait.resources` with `wait.labels` added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitSelector {
    pub type_: WaitResourceType,
    /// All must match the object's labels.
    pub labels: BTreeMap<String, String>,
    pub threshold: Threshold,
    /// Finding no such object is "not ready" (else it is fine).
    pub required: bool,
}

/// The selectors of a chart's `wait` block; without `resources`, its pods and jobs matching
/// `wait.labels` (none required to exist), as Armada does.
pub fn selectors(wait: Option<&Wait>) -> Vec<WaitSelector> {
    let base = wait.map(|w| w.labels.clone()).unwrap_or_default();
    let resources = wait.map(|w| w.resources.as_slice()).unwrap_or(&[]);
    if resources.is_empty() {
        return [WaitResourceType::Pod, WaitResourceType::Job]
            .into_iter()
            .map(|type_| WaitSelector {
                type_,
                labels: base.clone(),
                threshold: Threshold::default(),
                required: false,
            })
            .collect();
    }
    resources
        .iter()
        .map(|r| {
            let mut labels = base.clone();
            labels.extend(r.labels.clone());
            WaitSelector {
                type_: r.type_,
                labels,
                // The loader rejected invalid values; the default covers a repository it did not check.
                threshold: r
                    .min_ready
                    .as_ref()
                    .and_then(|m| m.threshold().ok())
                    .unwrap_or_default(),
                required: r.required.unwrap_or(true),
            }
        })
        .collect()
}

fn matches(selector: &WaitSelector, v: &Value) -> bool {
    if v.get("kind").and_then(Value::as_str) != Some(selector.type_.kind()) {
        return false;
    }
    let labels = v.pointer("/metadata/labels").and_then(Value::as_object);
    selector.labels.iter().all(|(k, want)| {
        labels.and_then(|l| l.get(k)).and_then(Value::as_str) == Some(want.as_str())
    })
}

fn object_ref(v: &Value) -> ObjectRef {
    ObjectRef {
        api_version: text(v, "/apiVersion").unwrap_or("").to_string(),
        kind: text(v, "/kind").unwrap_or("").to_string(),
        namespace: text(v, "/metadata/namespace").unwrap_or("").to_string(),
        name: text(v, "/metadata/name").unwrap_or("").to_string(),
    }
}

/// The readiness of a chart: every selector against the live objects of the chart's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChartReadiness {
    /// Objects that are ready.
    pub ready: Vec<ObjectRef>,
    /// Objects not ready yet, with why.
    pub not_ready: Vec<(ObjectRef, String)>,
    /// Objects that will not become ready by waiting.
    pub failed: Vec<(ObjectRef, String)>,
    /// Required selectors that matched nothing, described.
    pub missing: Vec<String>,
}

impl ChartReadiness {
    /// Everything the wait asks for is ready.
    pub fn is_ready(&self) -> bool {
        self.not_ready.is_empty() && self.failed.is_empty() && self.missing.is_empty()
    }
    /// Something failed: waiting longer will not help.
    pub fn has_failed(&self) -> bool {
        !self.failed.is_empty()
    }
}

/// Evaluate a chart's `wait` against `live` (objects of any kind, e.g. everything listed in the
/// chart's namespace). An object matched by several selectors is judged by each.
pub fn chart_readiness(wait: Option<&Wait>, live: &[Value]) -> ChartReadiness {
    let mut out = ChartReadiness::default();
    for selector in selectors(wait) {
        let mut found = 0;
        for v in live
            .iter()
            .filter(|v| matches(&selector, v) && !excluded(selector.type_, v))
        {
            found += 1;
            match object_readiness(selector.type_, v, selector.threshold) {
                Readiness::Ready => out.ready.push(object_ref(v)),
                Readiness::InProgress(why) => out.not_ready.push((object_ref(v), why)),
                Readiness::Failed(why) => out.failed.push((object_ref(v), why)),
            }
        }
        if found == 0 && selector.required {
            let labels: Vec<String> = selector
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            out.missing.push(format!(
                "no {} with labels {{{}}}",
                selector.type_.kind(),
                labels.join(",")
            ));
        }
    }
    out
}

/// How long a chart may take to become ready: `wait.timeout`, else the deprecated `timeout`,
/// else 900 s.
pub fn timeout(spec: &ArmadaChartSpec) -> Duration {
    let secs = spec
        .wait
        .as_ref()
        .and_then(|w| w.timeout)
        .or(spec.timeout)
        .unwrap_or(DEFAULT_WAIT_TIMEOUT_SECS);
    Duration::from_secs(secs.max(1) as u64)
}

#[cfg(test)]
mod tests {
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
        assert_eq!(in_progress(deployment(&stale, ALL)), "observed generation 3 is behind generation 4: the controller has not seen the change yet");
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
            in_progress(daemonset(&ds(5, 3), ALL)),
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
            in_progress(statefulset(&rolling, ALL)),
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
    fn pods_and_jobs() {
        let running_ready = json!({"kind": "Pod", "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(pod(&running_ready), Readiness::Ready);
        let running = json!({"kind": "Pod", "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "containers with unready status: [api]"}]}});
        assert_eq!(
            in_progress(pod(&running)),
            "running but not Ready containers with unready status: [api]"
        );
        assert_eq!(
            pod(&json!({"kind": "Pod", "status": {"phase": "Succeeded"}})),
            Readiness::Ready
        );
        assert_eq!(
            in_progress(pod(&json!({"kind": "Pod", "status": {"phase": "Pending"}}))),
            "phase is Pending"
        );
        assert!(
            matches!(pod(&json!({"kind": "Pod", "status": {"phase": "Failed", "reason": "Evicted"}})), Readiness::Failed(w) if w == "pod failed: Evicted")
        );

        let job_done =
            json!({"kind": "Job", "spec": {"completions": 3}, "status": {"succeeded": 3}});
        assert_eq!(job(&job_done), Readiness::Ready);
        assert_eq!(
            in_progress(job(
                &json!({"kind": "Job", "spec": {"completions": 3}, "status": {"succeeded": 1, "active": 2}})
            )),
            "1 of 3 completions succeeded"
        );
        let failed = json!({"kind": "Job", "status": {"failed": 6, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}});
        assert!(matches!(job(&failed), Readiness::Failed(w) if w.contains("backoff limit")));
        let by_policy = json!({"kind": "Job", "spec": {"completions": 5, "completionMode": "Indexed"},
            "status": {"succeeded": 1, "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}});
        assert_eq!(job(&by_policy), Readiness::Ready);
    }

    fn chart_wait(v: Value) -> Wait {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn chart_readiness_selects_by_type_and_labels_and_skips_cronjob_jobs() {
        let live = vec![
            deploy(
                2,
                json!({"observedGeneration": 4, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}),
            ),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate", "namespace": "demo", "labels": {"app": "api"}},
                "spec": {"completions": 1}, "status": {"succeeded": 1}}),
            // Run by a CronJob and still going: not part of the chart's readiness.
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nightly-2900", "namespace": "demo", "labels": {"app": "api"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "u"}]},
                "spec": {"completions": 1}, "status": {"active": 1}}),
            // Another app's deployment: not selected.
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "other", "namespace": "demo", "generation": 1, "labels": {"app": "other"}},
                "spec": {"replicas": 1}, "status": {"observedGeneration": 1}}),
        ];
        let wait = chart_wait(
            json!({"labels": {"app": "api"}, "resources": [{"type": "deployment", "min_ready": "50%"}, {"type": "job"}]}),
        );
        let r = chart_readiness(Some(&wait), &live);
        assert!(r.is_ready(), "{r:?}");
        let names: Vec<&str> = r.ready.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, vec!["api", "migrate"]);

        let strict = chart_wait(
            json!({"labels": {"app": "api"}, "resources": [{"type": "deployment"}, {"type": "statefulset"}]}),
        );
        let r = chart_readiness(Some(&strict), &live);
        assert!(!r.is_ready());
        assert_eq!(r.not_ready[0].0.to_string(), "Deployment/demo/api");
        assert_eq!(
            r.not_ready[0].1,
            "1 of 2 replicas available, 2 needed (min_ready)"
        );
        assert_eq!(r.missing, vec!["no StatefulSet with labels {app=api}"]);

        let optional = chart_wait(
            json!({"labels": {"app": "api"}, "resources": [{"type": "statefulset", "required": false}]}),
        );
        assert!(chart_readiness(Some(&optional), &live).is_ready());
    }

    #[test]
    fn default_wait_is_pods_and_jobs_by_labels_and_job_pods_are_left_to_the_job() {
        let live = vec![
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "api-1", "namespace": "demo", "labels": {"app": "api"}},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "migrate-x", "namespace": "demo", "labels": {"app": "api"},
                "ownerReferences": [{"kind": "Job", "name": "migrate"}]}, "status": {"phase": "Failed"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "demo", "labels": {"app": "other"}},
                "status": {"phase": "Pending"}}),
        ];
        let wait = chart_wait(json!({"labels": {"app": "api"}}));
        let r = chart_readiness(Some(&wait), &live);
        assert!(r.is_ready(), "{r:?}");
        assert_eq!(r.ready.len(), 1);
        assert!(
            chart_readiness(None, &[]).is_ready(),
            "no wait block and nothing deployed: nothing to wait for"
        );
        let failing = vec![
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crash", "namespace": "demo"}, "status": {"phase": "Failed", "reason": "Error"}}),
        ];
        let r = chart_readiness(None, &failing);
        assert!(r.has_failed() && !r.is_ready());
    }

    #[test]
    fn timeouts() {
        let spec = |v: Value| -> ArmadaChartSpec {
            let mut base = json!({"release": "a", "namespace": "n", "source": {"type": "local", "location": "c"}});
            base.as_object_mut()
                .unwrap()
                .extend(v.as_object().unwrap().clone());
            serde_json::from_value(base).unwrap()
        };
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
}
