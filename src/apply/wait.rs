//! Waiting until applied objects are ready, with a timeout.
//!
//! Rules, kstatus-like: Deployment, StatefulSet, DaemonSet, Job and Pod follow the Armada rules
//! of [`super::readiness`] with `min_ready` 100% (observed generation current, rollout complete,
//! enough replicas ready, Job succeeded); a ReplicaSet needs its replicas available; a CRD must be `Established`, a Namespace `Active`, a PVC `Bound`; any other kind is
//! ready once applied unless it reports `status.observedGeneration` behind its generation or a
//! `Ready`/`Stalled` condition that says otherwise. On timeout the error names every object that
//! is not ready and why.

use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::Client;
use serde_json::Value;

use super::ApplyError;
use crate::api::armada::{Threshold, Wait, WaitResourceType};
use crate::api::ObjectRef;

/// What the status of an object says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Not yet; the reason says what is missing.
    InProgress(String),
    /// It will not become ready by waiting (a failed Job, a rollout past its deadline).
    Failed(String),
}

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

fn condition<'a>(v: &'a Value, type_: &str) -> Option<&'a Value> {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

fn condition_status<'a>(v: &'a Value, type_: &str) -> Option<&'a str> {
    condition(v, type_)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
}

fn condition_text(v: &Value, type_: &str) -> String {
    condition(v, type_)
        .map(|c| {
            let reason = c.get("reason").and_then(Value::as_str).unwrap_or("");
            let message = c.get("message").and_then(Value::as_str).unwrap_or("");
            match (reason.is_empty(), message.is_empty()) {
                (false, false) => format!("{reason}: {message}"),
                (false, true) => reason.to_string(),
                (true, false) => message.to_string(),
                (true, true) => String::new(),
            }
        })
        .unwrap_or_default()
}

/// The generation check every controller-managed kind shares.
fn generation_current(v: &Value) -> Option<Readiness> {
    let generation = int(v, "/metadata/generation")?;
    let observed = int(v, "/status/observedGeneration").unwrap_or(0);
    (observed < generation).then(|| {
        Readiness::InProgress(format!(
            "observed generation {observed} is behind generation {generation}"
        ))
    })
}

/// The readiness of a live object of `kind`.
pub fn readiness(kind: &str, v: &Value) -> Readiness {
    match kind {
        // Armada's rules (src/apply/readiness.rs), with the default `min_ready` of 100%.
        "Deployment" => armada(WaitResourceType::Deployment, v),
        "StatefulSet" => armada(WaitResourceType::Statefulset, v),
        "DaemonSet" => armada(WaitResourceType::Daemonset, v),
        "Job" => armada(WaitResourceType::Job, v),
        "Pod" => armada(WaitResourceType::Pod, v),
        "ReplicaSet" => replicaset(v),
        "CustomResourceDefinition" => match condition_status(v, "Established") {
            Some("True") => Readiness::Ready,
            _ => Readiness::InProgress(
                format!("not Established yet {}", condition_text(v, "NamesAccepted"))
                    .trim_end()
                    .to_string(),
            ),
        },
        "Namespace" => match v.pointer("/status/phase").and_then(Value::as_str) {
            Some("Active") | None => Readiness::Ready,
            Some(p) => Readiness::InProgress(format!("phase is {p}")),
        },
        "PersistentVolumeClaim" => match v.pointer("/status/phase").and_then(Value::as_str) {
            Some("Bound") => Readiness::Ready,
            Some("Lost") => Readiness::Failed("phase is Lost".into()),
            p => Readiness::InProgress(format!("phase is {}, not Bound", p.unwrap_or("unknown"))),
        },
        _ => generic(v),
    }
}

fn armada(type_: WaitResourceType, v: &Value) -> Readiness {
    super::readiness::object_readiness(type_, v, Threshold::default())
}

fn generic(v: &Value) -> Readiness {
    if v.pointer("/status/observedGeneration").is_some() {
        if let Some(r) = generation_current(v) {
            return r;
        }
    }
    if condition_status(v, "Stalled") == Some("True") {
        return Readiness::Failed(format!("Stalled: {}", condition_text(v, "Stalled")));
    }
    match condition_status(v, "Ready") {
        Some("False") if v.pointer("/status/observedGeneration").is_some() => {
            Readiness::InProgress(format!("Ready=False: {}", condition_text(v, "Ready")))
        }
        _ => Readiness::Ready,
    }
}

fn replicaset(v: &Value) -> Readiness {
    if let Some(r) = generation_current(v) {
        return r;
    }
    let want = int(v, "/spec/replicas").unwrap_or(1);
    let available = int(v, "/status/availableReplicas").unwrap_or(0);
    if available < want {
        return Readiness::InProgress(format!("{available} of {want} replicas available"));
    }
    Readiness::Ready
}

/// One object to wait for.
#[derive(Clone, Debug)]
pub struct WaitTarget {
    pub object: ObjectRef,
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// How to wait.
#[derive(Clone, Debug)]
pub struct WaitOptions {
    pub timeout: Duration,
    /// Time between two looks at the objects not ready yet.
    pub poll_interval: Duration,
    /// Objects read at the same time.
    pub concurrency: usize,
}

impl Default for WaitOptions {
    fn default() -> Self {
        WaitOptions {
            timeout: Duration::from_secs(300),
            poll_interval: Duration::from_secs(1),
            concurrency: 10,
        }
    }
}

async fn look(client: &Client, t: &WaitTarget) -> Readiness {
    let api: Api<DynamicObject> = if t.namespaced {
        Api::namespaced_with(client.clone(), &t.object.namespace, &t.resource)
    } else {
        Api::all_with(client.clone(), &t.resource)
    };
    match api.get_opt(&t.object.name).await {
        Ok(Some(obj)) => match serde_json::to_value(&obj) {
            Ok(v) => readiness(&t.object.kind, &v),
            Err(e) => Readiness::InProgress(format!("cannot read it: {e}")),
        },
        Ok(None) => Readiness::InProgress("it does not exist".into()),
        Err(e) => Readiness::InProgress(format!("cannot read it: {}", super::describe(&e).0)),
    }
}

/// Wait until every target is ready. Objects that fail (a failed Job, a Deployment past its
/// progress deadline) end the wait at once; otherwise the wait ends at the timeout with every
/// object still not ready and its reason. `on_ready` is called as each object becomes ready.
pub async fn wait_ready(
    client: &Client,
    targets: &[WaitTarget],
    opts: &WaitOptions,
    on_ready: &(dyn Fn(&ObjectRef) + Send + Sync),
) -> Result<(), ApplyError> {
    let start = Instant::now();
    let mut pending: Vec<&WaitTarget> = targets.iter().collect();
    loop {
        let looks: Vec<(&WaitTarget, Readiness)> = futures::stream::iter(
            pending
                .iter()
                .copied()
                .map(|t| async move { (t, look(client, t).await) }.boxed())
                .collect::<Vec<_>>(),
        )
        .buffered(opts.concurrency.max(1))
        .collect()
        .await;
        let mut still = Vec::new();
        let mut failed = Vec::new();
        let mut reasons = Vec::new();
        for (t, r) in looks {
            match r {
                Readiness::Ready => on_ready(&t.object),
                Readiness::InProgress(why) => {
                    still.push(t);
                    reasons.push((t.object.clone(), why));
                }
                Readiness::Failed(why) => failed.push((t.object.clone(), why)),
            }
        }
        if !failed.is_empty() {
            return Err(ApplyError::Failed(failed));
        }
        if still.is_empty() {
            return Ok(());
        }
        if start.elapsed() >= opts.timeout {
            return Err(ApplyError::WaitTimeout {
                timeout: opts.timeout,
                not_ready: reasons,
            });
        }
        pending = still;
        let left = opts.timeout.saturating_sub(start.elapsed());
        tokio::time::sleep(opts.poll_interval.min(left)).await;
    }
}

/// One ArmadaChart's wait, by the chart's own rules: its `wait` block (Armada's selectors and
/// `min_ready`, see [`super::readiness`]) over the pods, jobs and controllers of its namespace,
/// plus the kstatus-like rules of this module for the chart's objects of other kinds that have a
/// status (a PVC, a custom resource), all bounded by the chart's `wait.timeout`.
#[derive(Clone, Debug)]
pub struct ChartWait {
    /// `namespace/name` of the ArmadaChart.
    pub chart: String,
    /// The chart's release namespace, where the `wait` selectors look.
    pub namespace: String,
    pub wait: Option<Wait>,
    pub timeout: Duration,
    /// The chart's objects outside the wait block's types that still have a status to wait for.
    pub others: Vec<WaitTarget>,
}

/// Why a chart is not ready.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChartNotReady {
    /// `Some(timeout)` when the wait ran out of time; `None` when something failed for good.
    pub timed_out: Option<Duration>,
    /// Objects not ready yet, with why.
    pub not_ready: Vec<(ObjectRef, String)>,
    /// Objects that will not become ready by waiting (a failed Job, a rollout past its deadline).
    pub failed: Vec<(ObjectRef, String)>,
    /// Required selectors that found nothing (and listing errors), described.
    pub missing: Vec<String>,
}

fn wait_resource(type_: WaitResourceType) -> ApiResource {
    let (group, version, plural) = match type_ {
        WaitResourceType::Pod => ("", "v1", "pods"),
        WaitResourceType::Job => ("batch", "v1", "jobs"),
        WaitResourceType::Deployment => ("apps", "v1", "deployments"),
        WaitResourceType::Daemonset => ("apps", "v1", "daemonsets"),
        WaitResourceType::Statefulset => ("apps", "v1", "statefulsets"),
    };
    let gvk = kube::api::GroupVersionKind::gvk(group, version, type_.kind());
    ApiResource::from_gvk_with_plural(&gvk, plural)
}

/// The kinds a chart's `wait` block judges (its objects of these kinds are left to it).
pub fn is_wait_kind(kind: &str) -> bool {
    matches!(
        kind,
        "Pod" | "Job" | "Deployment" | "DaemonSet" | "StatefulSet"
    )
}

/// The live objects of every type the chart's selectors name, in its namespace, with
/// `apiVersion` and `kind` set (list items do not carry them).
async fn list_for_chart(client: &Client, w: &ChartWait) -> (Vec<Value>, Vec<String>) {
    let types: std::collections::BTreeSet<WaitResourceType> =
        super::readiness::selectors(w.wait.as_ref())
            .iter()
            .map(|s| s.type_)
            .collect();
    let base = w
        .wait
        .as_ref()
        .map(|w| {
            w.labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let mut lp = kube::api::ListParams::default();
    if !base.is_empty() {
        lp = lp.labels(&base);
    }
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for type_ in types {
        let ar = wait_resource(type_);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &w.namespace, &ar);
        match api.list(&lp).await {
            Ok(list) => {
                for item in list.items {
                    if let Ok(mut v) = serde_json::to_value(&item) {
                        v["apiVersion"] = Value::String(ar.api_version.clone());
                        v["kind"] = Value::String(ar.kind.clone());
                        out.push(v);
                    }
                }
            }
            Err(e) => errors.push(format!(
                "cannot list {} in {}: {}",
                ar.plural,
                w.namespace,
                super::describe(&e).0
            )),
        }
    }
    (out, errors)
}

/// Wait until the chart is ready by its own rules. Returns at once when something failed for
/// good; otherwise at the chart's timeout with every object not ready and why (and every
/// required selector that found nothing). `on_ready` is called once per object that is ready.
pub async fn wait_chart(
    client: &Client,
    w: &ChartWait,
    poll_interval: Duration,
    on_ready: &(dyn Fn(&ObjectRef) + Send + Sync),
) -> Result<(), ChartNotReady> {
    let start = Instant::now();
    let mut reported: std::collections::BTreeSet<ObjectRef> = Default::default();
    loop {
        let (live, list_errors) = list_for_chart(client, w).await;
        let judged = super::readiness::chart_readiness(w.wait.as_ref(), &live);
        let mut state = ChartNotReady {
            timed_out: None,
            not_ready: judged.not_ready,
            failed: judged.failed,
            missing: judged.missing,
        };
        state.missing.extend(list_errors);
        let mut ready = judged.ready;
        for t in &w.others {
            match look(client, t).await {
                Readiness::Ready => ready.push(t.object.clone()),
                Readiness::InProgress(why) => state.not_ready.push((t.object.clone(), why)),
                Readiness::Failed(why) => state.failed.push((t.object.clone(), why)),
            }
        }
        for r in ready {
            // An object judged by two selectors is ready only if both say so.
            if !state.not_ready.iter().any(|(o, _)| o == &r)
                && !state.failed.iter().any(|(o, _)| o == &r)
                && reported.insert(r.clone())
            {
                on_ready(&r);
            }
        }
        if !state.failed.is_empty() {
            return Err(state);
        }
        if state.not_ready.is_empty() && state.missing.is_empty() {
            return Ok(());
        }
        if start.elapsed() >= w.timeout {
            state.timed_out = Some(w.timeout);
            return Err(state);
        }
        let left = w.timeout.saturating_sub(start.elapsed());
        tokio::time::sleep(poll_interval.min(left)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deployment_rules() {
        let ready = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}});
        assert_eq!(readiness("Deployment", &ready), Readiness::Ready);
        let behind = json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}});
        assert!(
            matches!(readiness("Deployment", &behind), Readiness::InProgress(m) if m.starts_with("observed generation 2 is behind generation 3"))
        );
        let unavailable = json!({"metadata": {"generation": 1}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}});
        assert!(
            matches!(readiness("Deployment", &unavailable), Readiness::InProgress(m) if m.starts_with("1 of 2 replicas available"))
        );
        let deadline = json!({"metadata": {"generation": 1}, "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"x\" has timed out progressing."}]}});
        assert!(
            matches!(readiness("Deployment", &deadline), Readiness::Failed(m) if m.contains("progress deadline"))
        );
        let zero = json!({"metadata": {"generation": 1}, "spec": {"replicas": 0}, "status": {"observedGeneration": 1}});
        assert_eq!(readiness("Deployment", &zero), Readiness::Ready);
    }

    #[test]
    fn job_crd_namespace_pvc_pod() {
        assert_eq!(
            readiness(
                "Job",
                &json!({"spec": {"completions": 1}, "status": {"succeeded": 1}})
            ),
            Readiness::Ready
        );
        assert!(matches!(
            readiness(
                "Job",
                &json!({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}})
            ),
            Readiness::Failed(_)
        ));
        assert_eq!(
            readiness(
                "CustomResourceDefinition",
                &json!({"status": {"conditions": [{"type": "Established", "status": "True"}]}})
            ),
            Readiness::Ready
        );
        assert!(matches!(
            readiness("CustomResourceDefinition", &json!({})),
            Readiness::InProgress(_)
        ));
        assert_eq!(
            readiness("Namespace", &json!({"status": {"phase": "Active"}})),
            Readiness::Ready
        );
        assert_eq!(
            readiness(
                "PersistentVolumeClaim",
                &json!({"status": {"phase": "Pending"}})
            ),
            Readiness::InProgress("phase is Pending, not Bound".into())
        );
        assert_eq!(
            readiness(
                "Pod",
                &json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
            ),
            Readiness::Ready
        );
    }

    #[test]
    fn statefulset_and_daemonset() {
        let rolling = json!({"metadata": {"generation": 1}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 1, "readyReplicas": 2, "currentRevision": "a", "updateRevision": "b"}});
        assert!(
            matches!(readiness("StatefulSet", &rolling), Readiness::InProgress(m) if m.starts_with("rolling update to revision b"))
        );
        let partitioned = json!({"metadata": {"generation": 1}, "spec": {"replicas": 3, "updateStrategy": {"rollingUpdate": {"partition": 2}}},
            "status": {"observedGeneration": 1, "readyReplicas": 3, "updatedReplicas": 1, "currentRevision": "a", "updateRevision": "b"}});
        assert_eq!(readiness("StatefulSet", &partitioned), Readiness::Ready);
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 2}});
        assert!(
            matches!(readiness("DaemonSet", &ds), Readiness::InProgress(m) if m.starts_with("2 of 3 pods available"))
        );
    }

    #[test]
    fn other_kinds_are_ready_once_applied_unless_they_say_otherwise() {
        assert_eq!(
            readiness("ConfigMap", &json!({"data": {}})),
            Readiness::Ready
        );
        let stalled = json!({"status": {"conditions": [{"type": "Stalled", "status": "True", "reason": "Bad"}]}});
        assert!(matches!(
            readiness("WeaveCloud", &stalled),
            Readiness::Failed(_)
        ));
    }
}
