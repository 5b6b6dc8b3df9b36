//! Readiness: one table, kind → rule, for every wait of the engine (the global wait after each
//! stage and wave, and the label-selector waits of an owner's wait rule). The rules are pure
//! functions of an object's status, in the manner of kstatus, `kubectl rollout status` and
//! Armada's `wait.py`; one file per kind family:
//!
//! - [`workloads`]: Deployment, DaemonSet, StatefulSet (with `min_ready`), ReplicaSet;
//! - [`pods`]: Pod, Job;
//! - [`cluster`]: CustomResourceDefinition, Namespace, PersistentVolumeClaim;
//! - [`generic`]: any other kind (`observedGeneration`, `Ready`/`Stalled` conditions).
//!
//! Kinds that have no status to wait for (ConfigMap, Service, RBAC, …) are in the table as
//! [`Check::Applied`]: ready as soon as they are applied. [`selection`] judges label selectors
//! (`{kind, labels, min_ready}`) against listed objects.

pub mod cluster;
pub mod generic;
pub mod pods;
pub mod selection;
pub mod workloads;

use serde_json::Value;

pub use crate::api::threshold::Threshold;

pub use selection::{judge, Selection, Selector};

/// What the status of an object says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Not yet; the reason says what is missing.
    InProgress(String),
    /// It will not become ready by waiting (a failed Job, a rollout past its deadline).
    Failed(String),
}

/// [`Threshold::required`], capped at `desired` (a count above it would never be met).
fn required_of(min_ready: Threshold, desired: i64) -> i64 {
    let desired = desired.max(0) as u64;
    min_ready.required(desired).min(desired) as i64
}

/// How the status of one kind is judged.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// No status to wait for: ready as soon as it is applied.
    Applied,
    /// Its status alone says.
    Status(fn(&Value) -> Readiness),
    /// A controller of pods: `min_ready` of them must be ready.
    Pods(fn(&Value, Threshold) -> Readiness),
}

/// Where objects of a kind are listed for a label-selector wait, and which of them such a wait
/// leaves out (e.g. Jobs run by a CronJob).
#[derive(Clone, Copy, Debug)]
pub struct Listing {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub excluded: fn(&Value) -> bool,
}

impl Listing {
    /// The API resource to list, for `kind`.
    pub fn resource(&self, kind: &str) -> kube::api::ApiResource {
        let gvk = kube::api::GroupVersionKind::gvk(self.group, self.version, kind);
        kube::api::ApiResource::from_gvk_with_plural(&gvk, self.plural)
    }
}

/// The rule of one kind.
#[derive(Clone, Copy, Debug)]
pub struct KindRule {
    pub kind: &'static str,
    pub check: Check,
    /// `Some` for kinds a label-selector wait can name.
    pub listing: Option<Listing>,
}

const fn applied(kind: &'static str) -> KindRule {
    KindRule {
        kind,
        check: Check::Applied,
        listing: None,
    }
}

const fn status(kind: &'static str, f: fn(&Value) -> Readiness) -> KindRule {
    KindRule {
        kind,
        check: Check::Status(f),
        listing: None,
    }
}

const fn listed(
    kind: &'static str,
    check: Check,
    group: &'static str,
    plural: &'static str,
    excluded: fn(&Value) -> bool,
) -> KindRule {
    KindRule {
        kind,
        check,
        listing: Some(Listing {
            group,
            version: "v1",
            plural,
            excluded,
        }),
    }
}

fn nothing_excluded(_: &Value) -> bool {
    false
}

/// The table. A kind that is not in it is judged by [`generic::conditions`].
static TABLE: &[KindRule] = &[
    // workloads.rs
    listed(
        "Deployment",
        Check::Pods(workloads::deployment),
        "apps",
        "deployments",
        nothing_excluded,
    ),
    listed(
        "DaemonSet",
        Check::Pods(workloads::daemonset),
        "apps",
        "daemonsets",
        nothing_excluded,
    ),
    listed(
        "StatefulSet",
        Check::Pods(workloads::statefulset),
        "apps",
        "statefulsets",
        nothing_excluded,
    ),
    status("ReplicaSet", workloads::replicaset),
    // pods.rs
    listed(
        "Pod",
        Check::Status(pods::pod),
        "",
        "pods",
        pods::left_to_another_rule,
    ),
    listed(
        "Job",
        Check::Status(pods::job),
        "batch",
        "jobs",
        pods::run_by_a_cronjob,
    ),
    // cluster.rs
    status("CustomResourceDefinition", cluster::crd),
    status("Namespace", cluster::namespace),
    status("PersistentVolumeClaim", cluster::pvc),
    // No status to wait for.
    applied("ConfigMap"),
    applied("Secret"),
    applied("Service"),
    applied("ServiceAccount"),
    applied("Role"),
    applied("RoleBinding"),
    applied("ClusterRole"),
    applied("ClusterRoleBinding"),
    applied("NetworkPolicy"),
    applied("LimitRange"),
    applied("ResourceQuota"),
    applied("PodDisruptionBudget"),
    applied("Ingress"),
    applied("IngressClass"),
    applied("StorageClass"),
    applied("PriorityClass"),
    applied("RuntimeClass"),
    applied("CronJob"),
    applied("Endpoints"),
    applied("EndpointSlice"),
    applied("HorizontalPodAutoscaler"),
    applied("MutatingWebhookConfiguration"),
    applied("ValidatingWebhookConfiguration"),
];

/// The rule of `kind`, if the table has one.
pub fn rule(kind: &str) -> Option<&'static KindRule> {
    TABLE.iter().find(|r| r.kind == kind)
}

/// `false` for kinds with nothing to wait for (ready once applied).
pub fn needs_wait(kind: &str) -> bool {
    !matches!(rule(kind).map(|r| r.check), Some(Check::Applied))
}

/// Whether a label-selector wait can name `kind` (the engine lists it).
pub fn selectable(kind: &str) -> bool {
    rule(kind).is_some_and(|r| r.listing.is_some())
}

/// The readiness of a live object of `kind`, every pod of a controller required.
pub fn readiness(kind: &str, v: &Value) -> Readiness {
    readiness_with(kind, v, Threshold::default())
}

/// The readiness of a live object of `kind`, `min_ready` of a controller's pods required.
pub fn readiness_with(kind: &str, v: &Value, min_ready: Threshold) -> Readiness {
    match rule(kind).map(|r| r.check) {
        Some(Check::Applied) => Readiness::Ready,
        Some(Check::Status(f)) => f(v),
        Some(Check::Pods(f)) => f(v, min_ready),
        None => generic::conditions(v),
    }
}

/// Objects of `kind` that a label-selector wait leaves out (Jobs run by a CronJob, Pods run by a
/// Job, Helm test pods).
pub fn excluded(kind: &str, v: &Value) -> bool {
    rule(kind)
        .and_then(|r| r.listing)
        .is_some_and(|l| (l.excluded)(v))
}

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

fn condition_status<'a>(v: &'a Value, type_: &str) -> Option<&'a str> {
    condition(v, type_)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
}

/// A condition's message, else its reason.
fn condition_message(v: &Value, type_: &str) -> String {
    condition(v, type_)
        .and_then(|c| c.get("message").or_else(|| c.get("reason")))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// A condition's `reason: message` (either alone when the other is empty).
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

/// `(observed, generation)` when `status.observedGeneration` has not caught up with
/// `metadata.generation` (the rest of the status then means nothing yet).
fn generation_behind(v: &Value) -> Option<(i64, i64)> {
    let generation = int(v, "/metadata/generation")?;
    let observed = int(v, "/status/observedGeneration").unwrap_or(0);
    (observed < generation).then_some((observed, generation))
}

fn owned_by(v: &Value, kind: &str) -> bool {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("kind").and_then(Value::as_str) == Some(kind))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::threshold::MinReadyError;
    use serde_json::json;

    #[test]
    fn min_ready_parses_counts_and_percentages() {
        assert_eq!("3".parse(), Ok(Threshold::Count(3)));
        assert_eq!("80%".parse(), Ok(Threshold::Percent(80)));
        assert_eq!(
            "101%".parse::<Threshold>().unwrap_err().to_string(),
            "`min_ready` `101%` must be a percentage between 0% and 100%"
        );
        assert_eq!(
            "many".parse::<Threshold>(),
            Err(MinReadyError::NotANumber("many".into()))
        );
        // 80% of 4 = 3.2 → 4; a count above the desired pods is capped.
        assert_eq!(Threshold::Percent(80).required(4), 4);
        assert_eq!(Threshold::Percent(75).required(4), 3);
        assert_eq!(required_of(Threshold::Count(5), 2), 2);
        assert_eq!(Threshold::default(), Threshold::Percent(100));
    }

    #[test]
    fn the_table_has_one_rule_per_kind() {
        let mut kinds: Vec<&str> = TABLE.iter().map(|r| r.kind).collect();
        let all = kinds.len();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), all, "a kind is in the table twice");
    }

    #[test]
    fn kinds_without_status_are_not_waited_for() {
        assert!(!needs_wait("ConfigMap"));
        assert!(!needs_wait("ClusterRoleBinding"));
        assert!(needs_wait("Deployment"));
        assert!(needs_wait("CustomResourceDefinition"));
        assert!(needs_wait("Widget"), "an unknown kind may have a status");
        assert_eq!(
            readiness(
                "ConfigMap",
                &json!({"status": {"conditions": [{"type": "Stalled", "status": "True"}]}})
            ),
            Readiness::Ready
        );
    }

    #[test]
    fn selectable_kinds_are_the_listed_ones() {
        for kind in ["Pod", "Job", "Deployment", "DaemonSet", "StatefulSet"] {
            assert!(selectable(kind), "{kind}");
        }
        for kind in ["ReplicaSet", "ConfigMap", "PersistentVolumeClaim", "Widget"] {
            assert!(!selectable(kind), "{kind}");
        }
        let jobs = rule("Job").and_then(|r| r.listing).unwrap().resource("Job");
        assert_eq!(
            (jobs.api_version.as_str(), jobs.plural.as_str()),
            ("batch/v1", "jobs")
        );
        let pods = rule("Pod").and_then(|r| r.listing).unwrap().resource("Pod");
        assert_eq!(pods.api_version, "v1");
    }
}
