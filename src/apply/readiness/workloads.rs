//! Controllers of pods: Deployment, DaemonSet, StatefulSet (with `min_ready`, as Armada and
//! `kubectl rollout status` judge them) and ReplicaSet.
//!
//! - Deployment: `observedGeneration` current, not `ProgressDeadlineExceeded`, updated replicas
//!   ≥ desired, no old replicas left, available ≥ `min_ready`.
//! - DaemonSet: `observedGeneration` current, updated ≥ desired scheduled, available ≥ `min_ready`.
//! - StatefulSet: `observedGeneration` current, ready ≥ `min_ready`, and the rollout done: with a
//!   `partition`, the replicas at or above it updated; without, `currentRevision == updateRevision`.
//! - ReplicaSet: `observedGeneration` current, every replica available.

use serde_json::Value;

use super::{
    condition, condition_message, generation_behind, int, required_of, text, Readiness, Threshold,
};

fn not_ready(why: impl Into<String>) -> Readiness {
    Readiness::InProgress(why.into())
}

/// The generation check of a controller: its status means nothing until it saw the change.
fn controller_behind(v: &Value) -> Option<Readiness> {
    generation_behind(v).map(|(observed, generation)| {
        not_ready(format!("observed generation {observed} is behind generation {generation}: the controller has not seen the change yet"))
    })
}

/// A Deployment with `min_ready`.
pub fn deployment(v: &Value, min_ready: Threshold) -> Readiness {
    if let Some(r) = controller_behind(v) {
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
    let need = required_of(min_ready, desired);
    if available < need {
        return not_ready(format!(
            "{available} of {desired} replicas available, {need} needed (min_ready)"
        ));
    }
    Readiness::Ready
}

/// A DaemonSet with `min_ready`.
pub fn daemonset(v: &Value, min_ready: Threshold) -> Readiness {
    if let Some(r) = controller_behind(v) {
        return r;
    }
    let desired = int(v, "/status/desiredNumberScheduled").unwrap_or(0);
    let on_delete = text(v, "/spec/updateStrategy/type") == Some("OnDelete");
    let updated = int(v, "/status/updatedNumberScheduled").unwrap_or(0);
    if !on_delete && updated < desired {
        return not_ready(format!("{updated} of {desired} pods updated"));
    }
    let available = int(v, "/status/numberAvailable").unwrap_or(0);
    let need = required_of(min_ready, desired);
    if available < need {
        return not_ready(format!(
            "{available} of {desired} pods available, {need} needed (min_ready)"
        ));
    }
    Readiness::Ready
}

/// A StatefulSet with `min_ready`; a partitioned rollout is done when the pods at or above the
/// partition are updated.
pub fn statefulset(v: &Value, min_ready: Threshold) -> Readiness {
    if let Some(r) = controller_behind(v) {
        return r;
    }
    let desired = int(v, "/spec/replicas").unwrap_or(1);
    let ready = int(v, "/status/readyReplicas").unwrap_or(0);
    let need = required_of(min_ready, desired);
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
            if let Some(update) = text(v, "/status/updateRevision") {
                if current != Some(update) {
                    let updated = int(v, "/status/updatedReplicas").unwrap_or(0);
                    return not_ready(format!("rolling update to revision {update}: {updated} of {desired} replicas updated"));
                }
            }
        }
    }
    Readiness::Ready
}

/// Why an update of a DaemonSet or StatefulSet is refused when asynchronous updates are not
/// allowed (Armada's `allow_async_updates: false`, its default): once the controller saw an
/// update (`observedGeneration > 1`), a strategy other than `RollingUpdate`, or a StatefulSet's
/// partitioned rollout, leaves pods on the old revision for as long as nobody deletes them, so
/// the update never becomes ready. `None` for every other kind and for a first install.
pub fn async_update_refused(kind: &str, v: &Value) -> Option<String> {
    if !matches!(kind, "DaemonSet" | "StatefulSet") {
        return None;
    }
    if int(v, "/status/observedGeneration").unwrap_or(0) <= 1 {
        return None;
    }
    let strategy = text(v, "/spec/updateStrategy/type").unwrap_or("");
    if strategy != "RollingUpdate" {
        return Some(format!(
            "async update not allowed: update strategy type is {} (set `allow_async_updates: true` to wait for it anyway)",
            if strategy.is_empty() { "unset" } else { strategy }
        ));
    }
    let partitioned = kind == "StatefulSet"
        && int(v, "/spec/replicas").unwrap_or(1) > 0
        && int(v, "/spec/updateStrategy/rollingUpdate/partition").unwrap_or(0) > 0;
    partitioned.then(|| {
        "async update not allowed: partitioned rollout (set `allow_async_updates: true` to wait for it anyway)".to_string()
    })
}

/// A ReplicaSet: every replica available.
pub fn replicaset(v: &Value) -> Readiness {
    if let Some((observed, generation)) = generation_behind(v) {
        return not_ready(format!(
            "observed generation {observed} is behind generation {generation}"
        ));
    }
    let want = int(v, "/spec/replicas").unwrap_or(1);
    let available = int(v, "/status/availableReplicas").unwrap_or(0);
    if available < want {
        return not_ready(format!("{available} of {want} replicas available"));
    }
    Readiness::Ready
}

#[cfg(test)]
#[path = "workloads_tests.rs"]
mod tests;
