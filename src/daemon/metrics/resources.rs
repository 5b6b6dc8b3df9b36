//! Per-resource metrics in the shape of Flux's (`gotk_reconcile_duration_seconds`,
//! `gotk_reconcile_condition`, `gotk_suspend_status`), labelled `kind`, `name`, `namespace`:
//! the sync root (kind `Root`, in Weft's namespace), every WeaveCloud and every ArmadaChart this
//! replica reconciles, and the Armada groups and manifests whose status its passes write.
//! docs/daemon.md maps Flux's names to these.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::{labels, pass_buckets, Labels};
use crate::api::conditions::{Condition, ConditionStatus, READY};

/// The kind label of a root (as `weft get` names its rows).
pub const ROOT_KIND: &str = crate::api::owner::OwnerKind::Root.as_str();

/// The statuses a condition gauge has a series for (one of them 1, the others 0), as Flux's.
const STATUSES: [(ConditionStatus, &str); 3] = [
    (ConditionStatus::True, "True"),
    (ConditionStatus::False, "False"),
    (ConditionStatus::Unknown, "Unknown"),
];

/// The per-resource families.
#[derive(Clone)]
pub struct ResourceMetrics {
    duration: Family<Labels, Histogram>,
    condition: Family<Labels, Gauge>,
    suspended: Family<Labels, Gauge>,
    /// The resources the last [`ResourceMetrics::replace_reported`] set: (kind, namespace, name).
    reported: Arc<Mutex<BTreeSet<(String, String, String)>>>,
    /// Resources forgotten while a reconcile of theirs was timed: that reconcile's timer records
    /// nothing when it ends (the deletion's own reconcile would bring the series back).
    forgotten: Arc<Mutex<BTreeSet<Labels>>>,
}

/// The Ready state of a resource that no controller reconciles but whose status a pass writes
/// (an ArmadaChartGroup or ArmadaManifest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedResource {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub ready: ConditionStatus,
    pub suspended: bool,
}

fn resource(kind: &str, namespace: &str, name: &str) -> Labels {
    labels(&[("kind", kind), ("name", name), ("namespace", namespace)])
}

fn condition_labels(kind: &str, namespace: &str, name: &str, type_: &str, status: &str) -> Labels {
    labels(&[
        ("kind", kind),
        ("name", name),
        ("namespace", namespace),
        ("type", type_),
        ("status", status),
    ])
}

impl ResourceMetrics {
    /// Register the families in `registry` (prefixed `weft_` there).
    pub fn register(registry: &mut Registry) -> ResourceMetrics {
        let duration =
            Family::<Labels, Histogram>::new_with_constructor(|| Histogram::new(pass_buckets()));
        registry.register_with_unit(
            "reconcile_duration",
            "Duration of each resource's reconciles (the root's passes, WeaveCloud and ArmadaChart reconciles), as gotk_reconcile_duration_seconds",
            Unit::Seconds,
            duration.clone(),
        );
        let condition = Family::<Labels, Gauge>::default();
        registry.register(
            "reconcile_condition",
            "The Ready condition of each resource: 1 on the series of its current status (True, False, Unknown), 0 on the others, as gotk_reconcile_condition",
            condition.clone(),
        );
        let suspended = Family::<Labels, Gauge>::default();
        registry.register(
            "suspend_status",
            "1 while Weft leaves the resource alone (weft.io/suspend, or weft suspend for the root and everything under it), as gotk_suspend_status",
            suspended.clone(),
        );
        ResourceMetrics {
            duration,
            condition,
            suspended,
            reported: Arc::default(),
            forgotten: Arc::default(),
        }
    }

    /// Record one reconcile of a resource that took `seconds`.
    pub fn observe(&self, kind: &str, namespace: &str, name: &str, seconds: f64) {
        self.duration
            .get_or_create(&resource(kind, namespace, name))
            .observe(seconds);
    }

    /// The resource's `Ready` condition is `status` now.
    pub fn set_ready(&self, kind: &str, namespace: &str, name: &str, status: ConditionStatus) {
        for (s, text) in STATUSES {
            self.condition
                .get_or_create(&condition_labels(kind, namespace, name, READY, text))
                .set(i64::from(s == status));
        }
    }

    /// The resource's `Ready` condition as `conditions` say (`Unknown` without one).
    pub fn set_ready_from(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        conditions: &[Condition],
    ) {
        let status = conditions
            .iter()
            .find(|c| c.type_ == READY)
            .map(|c| c.status)
            .unwrap_or_default();
        self.set_ready(kind, namespace, name, status);
    }

    /// Whether Weft leaves the resource alone now.
    pub fn set_suspended(&self, kind: &str, namespace: &str, name: &str, suspended: bool) {
        self.suspended
            .get_or_create(&resource(kind, namespace, name))
            .set(i64::from(suspended));
    }

    /// The resource is deleted: every series of it goes, its duration histogram included (a
    /// tenant who creates and deletes resources must not grow `/metrics` for ever: issue 48
    /// item 4), and a reconcile of it still being timed records nothing.
    pub fn forget(&self, kind: &str, namespace: &str, name: &str) {
        self.forget_gauges(kind, namespace, name);
        let labels = resource(kind, namespace, name);
        self.duration.remove(&labels);
        lock(&self.forgotten).insert(labels);
    }

    /// The condition and suspend series of a resource no pass reports any more.
    fn forget_gauges(&self, kind: &str, namespace: &str, name: &str) {
        for (_, text) in STATUSES {
            self.condition
                .remove(&condition_labels(kind, namespace, name, READY, text));
        }
        self.suspended.remove(&resource(kind, namespace, name));
    }

    /// Set the gauges of the resources a pass reported (`now`), and remove the series of those
    /// the previous call reported and this one does not (deleted, or no longer in a namespace
    /// the pass deploys to).
    pub fn replace_reported(&self, now: &[ReportedResource]) {
        let keys: BTreeSet<(String, String, String)> = now
            .iter()
            .map(|r| (r.kind.clone(), r.namespace.clone(), r.name.clone()))
            .collect();
        for r in now {
            self.set_ready(&r.kind, &r.namespace, &r.name, r.ready);
            self.set_suspended(&r.kind, &r.namespace, &r.name, r.suspended);
        }
        // A poisoned lock only means a panic elsewhere mid-update: the set is still usable.
        let mut before = self
            .reported
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (kind, namespace, name) in before.difference(&keys) {
            self.forget_gauges(kind, namespace, name);
        }
        *before = keys;
    }

    /// A timer that records a reconcile of the resource when it is dropped (every exit of the
    /// reconcile, `?` included).
    pub fn timer(&self, kind: &str, namespace: &str, name: &str) -> ReconcileTimer {
        let labels = resource(kind, namespace, name);
        // A resource of this name reconciled again (re-created) is measured again.
        lock(&self.forgotten).remove(&labels);
        ReconcileTimer {
            metrics: self.clone(),
            labels,
            start: Instant::now(),
        }
    }
}

/// A poisoned lock only means a panic elsewhere mid-update: the set is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// See [`ResourceMetrics::timer`].
pub struct ReconcileTimer {
    metrics: ResourceMetrics,
    labels: Labels,
    start: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        if lock(&self.metrics.forgotten).remove(&self.labels) {
            return;
        }
        self.metrics
            .duration
            .get_or_create(&self.labels)
            .observe(self.start.elapsed().as_secs_f64());
    }
}
