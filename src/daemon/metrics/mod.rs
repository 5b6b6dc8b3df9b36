//! Prometheus metrics of the daemon (`GET /metrics`): Weft's own, every name prefixed `weft_`
//! (the per-resource ones in [`resources`]); and, in the daemon ([`Metrics::for_process`]), the
//! standard unprefixed ones every client library exports: `process_*` and the runtime's
//! ([`process`]), and the API client's `rest_client_*` ([`rest_client`]).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::api::conditions::ConditionStatus;
use crate::daemon::status::{PassReport, PassResultKind};

pub mod process;
pub mod resources;
pub mod rest_client;

pub use resources::{ReconcileTimer, ResourceMetrics, ROOT_KIND};

type Labels = Vec<(String, String)>;

/// The daemon's metrics. Cheap to update from any task.
pub struct Metrics {
    /// What happened to notifications (counted by the dispatcher, `weft_notifications_*_total`).
    pub notifications: crate::notify::Counters,
    registry: Registry,
    pass_duration: Family<Labels, Histogram>,
    passes: Family<Labels, Counter>,
    objects: Family<Labels, Counter>,
    git_fetch_duration: Histogram,
    last_success: Gauge<f64, AtomicU64>,
    agent_bundle: Family<Labels, Gauge>,
    /// The version currently exported per WeaveCloud, to drop the old series on a change.
    agent_versions: Mutex<HashMap<(String, String), String>>,
    agent_available: Family<Labels, Gauge>,
    agent_available_versions: Mutex<HashMap<(String, String), String>>,
    webhooks: Family<Labels, Counter>,
    leader: Gauge,
    leadership_lost: Counter,
    shard_held: Family<Labels, Gauge>,
    reconciles: Family<Labels, Counter>,
    /// Per resource, as Flux's: reconcile durations, `Ready` and suspend gauges.
    resources: ResourceMetrics,
    /// The standard unprefixed metrics (process, runtime, API client); only in the daemon.
    standard: Option<Standard>,
}

/// The registry of the standard metrics and the API client's families.
struct Standard {
    registry: Registry,
    rest_client: Arc<rest_client::RestClientMetrics>,
}

/// An info-style gauge: one series set to 1 per WeaveCloud, labelled with its current version;
/// the series of the previous version (remembered in `known`) is removed.
fn set_version_gauge(
    family: &Family<Labels, Gauge>,
    known: &Mutex<HashMap<(String, String), String>>,
    namespace: &str,
    name: &str,
    version: Option<&str>,
) {
    let mut known = known.lock().unwrap_or_else(|p| p.into_inner());
    let key = (namespace.to_string(), name.to_string());
    if let Some(old) = known.remove(&key) {
        family.remove(&labels(&[
            ("namespace", namespace),
            ("name", name),
            ("version", &old),
        ]));
    }
    if let Some(v) = version {
        family
            .get_or_create(&labels(&[
                ("namespace", namespace),
                ("name", name),
                ("version", v),
            ]))
            .set(1);
        known.insert(key, v.to_string());
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn pass_buckets() -> Vec<f64> {
    vec![
        0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0,
    ]
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Register every metric in a fresh registry.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("weft");
        let pass_duration =
            Family::<Labels, Histogram>::new_with_constructor(|| Histogram::new(pass_buckets()));
        registry.register_with_unit(
            "pass_duration",
            "Duration of sync-root passes, by result",
            Unit::Seconds,
            pass_duration.clone(),
        );
        let passes = Family::<Labels, Counter>::default();
        registry.register("passes", "Sync-root passes, by result", passes.clone());
        let objects = Family::<Labels, Counter>::default();
        registry.register(
            "objects",
            "Objects handled by passes and reconciles, by action (applied, pruned, unchanged)",
            objects.clone(),
        );
        let git_fetch_duration = Histogram::new(vec![
            0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ]);
        registry.register_with_unit(
            "git_fetch_duration",
            "Duration of git head checks and fetches",
            Unit::Seconds,
            git_fetch_duration.clone(),
        );
        let last_success = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "last_success_timestamp_seconds",
            "Unix time of the last successful sync-root pass",
            last_success.clone(),
        );
        let agent_bundle = Family::<Labels, Gauge>::default();
        registry.register(
            "agent_bundle_version",
            "The agent bundle version each WeaveCloud runs (value 1, version in a label)",
            agent_bundle.clone(),
        );
        let agent_available = Family::<Labels, Gauge>::default();
        registry.register(
            "agent_bundle_available",
            "The newest agent bundle version the channel offers each WeaveCloud within its agentVersion range (value 1, version in a label)",
            agent_available.clone(),
        );
        let webhooks = Family::<Labels, Counter>::default();
        registry.register(
            "webhook_requests",
            "Webhook and sync requests, by endpoint and outcome",
            webhooks.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 when this replica holds the leader Lease",
            leader.clone(),
        );
        let leadership_lost = Counter::default();
        registry.register(
            "leadership_lost",
            "Terms as leader that ended because the Lease could not be renewed or was taken",
            leadership_lost.clone(),
        );
        let shard_held = Family::<Labels, Gauge>::default();
        registry.register(
            "shard_held",
            "1 for the shard this replica holds (`--shards N`; shard 0 of 1 for the leader of an unsharded root), none on a standby",
            shard_held.clone(),
        );
        let reconciles = Family::<Labels, Counter>::default();
        registry.register(
            "reconciles",
            "Custom resource reconciles, by kind and result",
            reconciles.clone(),
        );
        let notifications = crate::notify::Counters::default();
        registry.register(
            "notifications_sent",
            "Notification requests a provider accepted",
            notifications.sent.clone(),
        );
        registry.register(
            "notifications_failed",
            "Notifications given up (after every retry, refused, or the Provider unusable)",
            notifications.failed.clone(),
        );
        registry.register(
            "notifications_dropped",
            "Notifications dropped because a queue was full",
            notifications.dropped.clone(),
        );
        let resources = ResourceMetrics::register(&mut registry);
        Metrics {
            resources,
            standard: None,
            notifications,
            registry,
            pass_duration,
            passes,
            objects,
            git_fetch_duration,
            last_success,
            agent_bundle,
            agent_versions: Mutex::new(HashMap::new()),
            agent_available,
            agent_available_versions: Mutex::new(HashMap::new()),
            webhooks,
            leader,
            leadership_lost,
            shard_held,
            reconciles,
        }
    }

    /// [`Metrics::new`] plus the standard unprefixed metrics of this process: `process_*`, the
    /// tokio runtime's, and `rest_client_*` (fed through [`Metrics::api_call_observer`]).
    pub fn for_process() -> Self {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(process::ProcessCollector));
        let rest_client = Arc::new(rest_client::RestClientMetrics::register(&mut registry));
        Metrics {
            standard: Some(Standard {
                registry,
                rest_client,
            }),
            ..Metrics::new()
        }
    }

    /// What the kube client's counting layer tells of every API call
    /// ([`crate::apply::calls::CallCounts::observe_with`]); `None` without the standard metrics.
    pub fn api_call_observer(&self) -> Option<Arc<dyn crate::apply::calls::CallObserver>> {
        let s = self.standard.as_ref()?;
        Some(s.rest_client.clone())
    }

    /// Per-resource reconcile durations and `Ready`/suspend gauges.
    pub fn resources(&self) -> &ResourceMetrics {
        &self.resources
    }

    /// Record a finished pass of root `root` (in Weft's namespace `namespace`) as a resource: its
    /// duration, and its `Ready` condition when the pass decided it (a suspended pass leaves it as
    /// the record says, see [`Metrics::set_root_ready`]).
    pub fn observe_root_pass(&self, namespace: &str, root: &str, report: &PassReport) {
        self.resources
            .observe(ROOT_KIND, namespace, root, report.duration_seconds);
        let status = match report.result {
            PassResultKind::Succeeded => ConditionStatus::True,
            PassResultKind::Failed => ConditionStatus::False,
            PassResultKind::Abandoned => ConditionStatus::Unknown,
            PassResultKind::Suspended => return,
        };
        self.resources.set_ready(ROOT_KIND, namespace, root, status);
    }

    /// The root's `Ready` condition as its record says (`None`: no pass recorded yet).
    pub fn set_root_ready(&self, namespace: &str, root: &str, ready: Option<bool>) {
        let status = match ready {
            Some(true) => ConditionStatus::True,
            Some(false) => ConditionStatus::False,
            None => ConditionStatus::Unknown,
        };
        self.resources.set_ready(ROOT_KIND, namespace, root, status);
    }

    /// Whether root `root` is suspended (`weft suspend`).
    pub fn set_root_suspended(&self, namespace: &str, root: &str, suspended: bool) {
        self.resources
            .set_suspended(ROOT_KIND, namespace, root, suspended);
    }

    /// Record a finished sync-root pass.
    pub fn observe_pass(&self, report: &PassReport) {
        let result = match report.result {
            PassResultKind::Succeeded => "succeeded",
            PassResultKind::Failed => "failed",
            PassResultKind::Abandoned => "abandoned",
            PassResultKind::Suspended => "suspended",
        };
        let l = labels(&[("result", result)]);
        self.pass_duration
            .get_or_create(&l)
            .observe(report.duration_seconds);
        self.passes.get_or_create(&l).inc();
        self.count_objects(
            report.summary.applied(),
            report.summary.pruned,
            report.summary.unchanged,
        );
        if report.succeeded() {
            self.last_success
                .set(k8s_openapi::jiff::Timestamp::now().as_millisecond() as f64 / 1000.0);
        }
    }

    /// Add objects applied, pruned and left unchanged (by a pass or a CR reconcile).
    pub fn count_objects(&self, applied: u64, pruned: u64, unchanged: u64) {
        for (action, n) in [
            ("applied", applied),
            ("pruned", pruned),
            ("unchanged", unchanged),
        ] {
            self.objects
                .get_or_create(&labels(&[("action", action)]))
                .inc_by(n);
        }
    }

    /// Record how long a git head check or fetch took.
    pub fn observe_git_fetch(&self, seconds: f64) {
        self.git_fetch_duration.observe(seconds);
    }

    /// Record the agent bundle version of a WeaveCloud (`None` once it is deleted).
    pub fn set_agent_version(&self, namespace: &str, name: &str, version: Option<&str>) {
        set_version_gauge(
            &self.agent_bundle,
            &self.agent_versions,
            namespace,
            name,
            version,
        );
    }

    /// Record the newest agent bundle version available to a WeaveCloud (`None`: none known).
    pub fn set_agent_available(&self, namespace: &str, name: &str, version: Option<&str>) {
        set_version_gauge(
            &self.agent_available,
            &self.agent_available_versions,
            namespace,
            name,
            version,
        );
    }

    /// Count a webhook or sync request by endpoint and outcome.
    pub fn count_request(&self, endpoint: &str, outcome: &str) {
        self.webhooks
            .get_or_create(&labels(&[("endpoint", endpoint), ("outcome", outcome)]))
            .inc();
    }

    /// Count a custom resource reconcile.
    pub fn count_reconcile(&self, kind: &str, result: &str) {
        self.reconciles
            .get_or_create(&labels(&[("kind", kind), ("result", result)]))
            .inc();
    }

    /// Whether this replica leads.
    /// A term as leader ended with the Lease lost.
    pub fn count_leadership_lost(&self) {
        self.leadership_lost.inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The shards this replica holds now (one at most; none on a standby).
    pub fn set_shards(&self, held: &[u32]) {
        self.shard_held.clear();
        for i in held {
            self.shard_held
                .get_or_create(&labels(&[("shard", &i.to_string())]))
                .set(1);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        encode_registry(&mut out, &self.registry)?;
        if let Some(s) = &self.standard {
            encode_registry(&mut out, &s.registry)?;
        }
        encode_eof(&mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::status::ChangeSummary;

    #[test]
    fn a_pass_shows_in_every_pass_metric() {
        let m = Metrics::new();
        m.observe_pass(&PassReport {
            pass: 1,
            reasons: vec!["poll".into()],
            started_at: "2026-01-01T00:00:00Z".into(),
            duration_seconds: 0.3,
            revision: Some("abc".into()),
            result: PassResultKind::Succeeded,
            error: None,
            head_unchanged: false,
            summary: ChangeSummary {
                created: 2,
                configured: 1,
                unchanged: 7,
                pruned: 1,
                skipped: 0,
            },
            changes: vec![],
            changes_omitted: 0,
        });
        m.observe_git_fetch(0.02);
        m.set_agent_version("weave", "wc", Some("1.2.0"));
        m.set_agent_version("weave", "wc", Some("1.3.0"));
        let text = m.render().unwrap();
        assert!(
            text.contains("weft_pass_duration_seconds_count{result=\"succeeded\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("weft_objects_total{action=\"applied\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("weft_objects_total{action=\"pruned\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("weft_objects_total{action=\"unchanged\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("weft_git_fetch_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("weft_last_success_timestamp_seconds "),
            "{text}"
        );
        assert!(text.contains("version=\"1.3.0\"} 1"), "{text}");
        assert!(
            !text.contains("version=\"1.2.0\""),
            "old version series dropped: {text}"
        );
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            assert!(line.starts_with("weft_"), "unprefixed metric: {line}");
        }
    }

    #[test]
    fn resources_show_flux_shaped_series_and_the_process_ones_unprefixed() {
        let m = Metrics::for_process();
        m.resources()
            .set_ready("WeaveCloud", "weave", "wc", ConditionStatus::False);
        m.resources()
            .set_suspended("WeaveCloud", "weave", "wc", true);
        drop(m.resources().timer("ArmadaChart", "apps", "db"));
        m.set_root_suspended("weft-system", "weft", true);
        m.set_root_ready("weft-system", "weft", None);
        m.api_call_observer()
            .expect("the daemon's metrics observe API calls")
            .observe(&http::Method::PATCH, Some(409), 0.01);
        let text = m.render().unwrap();
        for series in [
            "weft_reconcile_condition{kind=\"WeaveCloud\",name=\"wc\",namespace=\"weave\",type=\"Ready\",status=\"False\"} 1",
            "weft_reconcile_condition{kind=\"WeaveCloud\",name=\"wc\",namespace=\"weave\",type=\"Ready\",status=\"True\"} 0",
            "weft_reconcile_condition{kind=\"Root\",name=\"weft\",namespace=\"weft-system\",type=\"Ready\",status=\"Unknown\"} 1",
            "weft_suspend_status{kind=\"WeaveCloud\",name=\"wc\",namespace=\"weave\"} 1",
            "weft_suspend_status{kind=\"Root\",name=\"weft\",namespace=\"weft-system\"} 1",
            "weft_reconcile_duration_seconds_count{kind=\"ArmadaChart\",name=\"db\",namespace=\"apps\"} 1",
            "rest_client_requests_total{code=\"409\",method=\"PATCH\"} 1",
            "rest_client_request_duration_seconds_count{verb=\"PATCH\"} 1",
            "process_open_fds ",
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        // Deleted (issue 48 item 4): every series goes, the duration histogram's too, and the
        // deletion's own reconcile, timed when it began, brings none back.
        let deleting = m.resources().timer("WeaveCloud", "weave", "wc");
        m.resources().forget("WeaveCloud", "weave", "wc");
        drop(deleting);
        let text = m.render().unwrap();
        assert!(!text.contains("name=\"wc\""), "{text}");
        drop(m.resources().timer("WeaveCloud", "weave", "wc"));
        assert!(
            m.render().unwrap().contains("weft_reconcile_duration_seconds_count{kind=\"WeaveCloud\",name=\"wc\",namespace=\"weave\"} 1"),
            "a re-created resource is measured again"
        );
        m.resources().forget("WeaveCloud", "weave", "wc");
        // Armada groups and manifests: what a pass reports replaces what the last one did.
        let group = |name: &str, ready| resources::ReportedResource {
            kind: "ArmadaChartGroup".into(),
            namespace: "apps".into(),
            name: name.into(),
            ready,
            suspended: false,
        };
        m.resources().replace_reported(&[
            group("infra", ConditionStatus::True),
            group("web", ConditionStatus::False),
        ]);
        let text = m.render().unwrap();
        assert!(text.contains("weft_reconcile_condition{kind=\"ArmadaChartGroup\",name=\"web\",namespace=\"apps\",type=\"Ready\",status=\"False\"} 1"), "{text}");
        assert!(text.contains("weft_suspend_status{kind=\"ArmadaChartGroup\",name=\"infra\",namespace=\"apps\"} 0"), "{text}");
        m.resources()
            .replace_reported(&[group("infra", ConditionStatus::True)]);
        let text = m.render().unwrap();
        assert!(!text.contains("name=\"web\""), "{text}");
        assert!(text.contains("weft_reconcile_condition{kind=\"ArmadaChartGroup\",name=\"infra\",namespace=\"apps\",type=\"Ready\",status=\"True\"} 1"), "{text}");
        assert!(Metrics::new().api_call_observer().is_none());
    }
}
