//! The Armada custom resources (`armada.airshipit.org/v1alpha1`): `ArmadaChart` (`act`),
//! `ArmadaChartGroup` (`acg`) and `ArmadaManifest` (`amf`).
//!
//! The spec keeps the snake_case field names of Armada's document schema (`chart_name`,
//! `release`, `wait.resources[].min_ready`, …) so that an Armada user's documents map one to one.
//! Every field of Armada's v1 and v2 chart, group and manifest schemas has a place here, the
//! deprecated ones included; the loader warns about the ones Weft cannot act on (Helm tests and
//! hooks). Two spellings that a structural schema cannot express are normalised by the loader
//! before validation: `test: true|false` (v1) and the v2 map form of `wait.resources`.
//!
//! The overlays of `values.overlays` and the label selectors they target with are parsed in
//! [`overlays`].

mod overlays;

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::conditions::Condition;
use super::{DriftPolicy, ObjectRef};
pub use overlays::{overlays_of, LabelSelector, LabelSelectorError, Overlay, OverlayTarget};

/// The Armada API group.
pub const GROUP: &str = "armada.airshipit.org";
/// The API version of the Armada resources.
pub const API_VERSION: &str = "armada.airshipit.org/v1alpha1";

/// `min_ready` as a string: a count or a percentage of at most 100%.
pub const MIN_READY_PATTERN: &str = r"^([0-9]+|([0-9]|[1-9][0-9]|100)%)$";

/// Default of `wait.timeout`, in seconds (Armada's default).
pub const DEFAULT_WAIT_TIMEOUT_SECS: i64 = 900;

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "description": "Values deep-merged over the chart's values.yaml: maps merge, scalars and lists replace. `overlays` holds merge patches and JSON patches applied to the rendered objects.",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn min_ready_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "How many pods must be ready: an integer, or a percentage such as \"80%\" (rounded up). Default 100%.",
        "x-kubernetes-int-or-string": true,
        "pattern": MIN_READY_PATTERN,
    })
}

/// One chart: where its source is, the values to render it with, how to wait for it.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "armada.airshipit.org",
    version = "v1alpha1",
    kind = "ArmadaChart",
    namespaced,
    status = "ArmadaChartStatus",
    shortname = "act",
    category = "weft",
    category = "armada",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Release", type_ = "string", json_path = ".spec.release"),
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".spec.namespace",
        priority = 1
    ),
    printcolumn(name = "Revision", type_ = "string", json_path = ".status.revision"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ArmadaChartSpec {
    /// Name of the chart (Armada v1). Defaults to the name in the chart's `Chart.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart_name: Option<String>,
    /// Release name; the manifest's `release_prefix` is prepended (`{prefix}-{release}`).
    #[schemars(length(min = 1))]
    pub release: String,
    /// Namespace the chart's objects are deployed to (when a template does not set one).
    #[schemars(length(min = 1))]
    pub namespace: String,
    /// Values deep-merged over the chart's `values.yaml`; `values.overlays` patches the result.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schemars(schema_with = "free_form_object")]
    pub values: Map<String, Value>,
    /// Names of ArmadaCharts (same namespace) rendered into this chart's release as sub-charts,
    /// with `values.<their chart name>` as their values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<String>,
    /// Keep going when this chart fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected: Option<Protected>,
    /// Helm tests (accepted, not run by Weft: a warning says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<ChartTest>,
    /// Deprecated (Armada v1): use `wait.timeout`. Seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout: Option<i64>,
    /// What to wait for after the chart is applied, and for how long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<Wait>,
    /// Where the chart comes from.
    pub source: ChartSource,
    /// Deletion settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete: Option<Delete>,
    /// Install settings (Helm hooks; accepted, not acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<Install>,
    /// Upgrade actions: `pre.delete` deletes objects before the chart is upgraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<Upgrade>,
    /// What to do when a child object is changed outside Weft: `correct` (re-apply, the default)
    /// or `report` (set `status.inconsistent` and change nothing).
    #[serde(
        default,
        rename = "driftPolicy",
        skip_serializing_if = "is_default_drift"
    )]
    pub drift_policy: DriftPolicy,
}

fn is_default_drift(p: &DriftPolicy) -> bool {
    *p == DriftPolicy::Correct
}

/// `protected`: a failed protected chart with `continue_processing: true` lets its group go on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Protected {
    /// Continue with the rest of the group when this chart fails.
    #[serde(default)]
    pub continue_processing: bool,
}

/// Helm tests (v2 object form; v1's boolean `test: true` is normalised to `{enabled: true}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChartTest {
    /// Run the tests (Armada's default: true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout: Option<i64>,
    /// Options passed to Helm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<TestOptions>,
}

/// Options of Helm tests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TestOptions {
    /// Delete test pods after the tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<bool>,
}

/// `wait`: readiness of what the chart deployed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Wait {
    /// Seconds to wait for the chart to become ready (default 900).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout: Option<i64>,
    /// Labels added to every entry of `resources` (and used alone when `resources` is absent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The objects to wait for. Absent: Armada's default, the jobs matching `labels` (if any)
    /// and at least one pod matching them (required); `[]`: nothing is waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<WaitResource>>,
    /// Helm's own `--wait` (accepted, not acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<WaitNative>,
}

/// The kinds the readiness rules know.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum WaitResourceType {
    Pod,
    Job,
    Deployment,
    Daemonset,
    Statefulset,
}

impl WaitResourceType {
    /// The Kubernetes kind.
    pub fn kind(self) -> &'static str {
        match self {
            WaitResourceType::Pod => "Pod",
            WaitResourceType::Job => "Job",
            WaitResourceType::Deployment => "Deployment",
            WaitResourceType::Daemonset => "DaemonSet",
            WaitResourceType::Statefulset => "StatefulSet",
        }
    }
}

/// One kind of object to wait for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WaitResource {
    /// pod, job, deployment, daemonset or statefulset.
    #[serde(rename = "type")]
    pub type_: WaitResourceType,
    /// Labels selecting the objects (added to `wait.labels`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Controllers only: pods that must be ready, an integer or a percentage (default 100%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "min_ready_schema")]
    pub min_ready: Option<MinReady>,
    /// Armada v2: when false, finding no such object is not an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// daemonset and statefulset (Armada v2): an update whose pods are not replaced by a rolling
    /// update (`OnDelete`, a partitioned rollout) counts as ready when its `min_ready` pods are.
    /// Default false: such an update never becomes ready, as in Armada.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_async_updates: Option<bool>,
}

/// `min_ready`: a count of pods or a percentage of the desired pods.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MinReady {
    Count(i64),
    Text(String),
}

pub use super::threshold::{MinReadyError, Threshold};

impl MinReady {
    /// Parse into a [`Threshold`]; the error says what is wrong with the value.
    pub fn threshold(&self) -> Result<Threshold, MinReadyError> {
        match self {
            MinReady::Count(n) if *n >= 0 => Ok(Threshold::Count(*n as u64)),
            MinReady::Count(n) => Err(MinReadyError::Negative(*n)),
            MinReady::Text(s) => s.parse(),
        }
    }
}

impl JsonSchema for MinReady {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MinReady".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        min_ready_schema(generator)
    }
}

/// Helm's native wait.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WaitNative {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Kinds of chart source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceType {
    /// A directory of the config repository.
    Local,
    /// Another git repository (`reference`: branch, tag or commit; default `master`).
    Git,
    /// An http(s) `.tgz`.
    Tar,
    /// A chart of a Helm chart repository (`location`: the repository URL, `chart`: its name,
    /// `version`: an exact version or a semver range; default the newest).
    Helm,
    /// A chart in an OCI registry (`location`: `oci://host/path/chart`, `version`: a tag, a
    /// semver range over the tags, or `sha256:<digest>`).
    Oci,
}

/// `source`: where the chart directory is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChartSource {
    /// local, git, tar, helm or oci.
    #[serde(rename = "type")]
    pub type_: SourceType,
    /// local: a directory of the config repository; git: a repository URL (relative URLs resolve
    /// against the config repository's, like git submodules); tar: an http(s) URL.
    #[schemars(length(min = 1))]
    pub location: String,
    /// The chart directory inside `location` (default `.`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subpath: Option<String>,
    /// git: branch, tag or commit (default `master`); tar: `sha256:<hex>` pins the archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// helm: the chart's name in the repository's index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<String>,
    /// helm: an exact version or a semver range (`^1.2`, `>=1.0 <2.0`, `1.x`; default the newest
    /// release); oci: a tag, a semver range over the tags, or `sha256:<digest>` of the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Armada: an HTTP proxy for fetching (accepted, not acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_server: Option<String>,
    /// Armada: git auth method (accepted, not acted on: Weft's git credentials apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_method: Option<String>,
}

/// `delete`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Delete {
    /// Seconds to wait for the chart's objects to be deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout: Option<i64>,
}

/// `install` (Helm hooks).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Install {
    /// Accepted, not acted on: Armada runs the hooks of every install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_hooks: Option<bool>,
}

/// `upgrade`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Upgrade {
    /// Armada v1: `true` runs none of the chart's Helm hooks on an upgrade (an install still
    /// runs them, as in Armada).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_hooks: Option<bool>,
    /// Actions before an upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre: Option<UpgradePre>,
    /// Actions after an upgrade (Armada v1; accepted, not acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post: Option<UpgradePost>,
    /// Helm upgrade options (accepted, not acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<UpgradeOptions>,
}

/// `upgrade.pre`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UpgradePre {
    /// Objects deleted (by type and labels, in the chart's namespace) before an upgrade.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete: Vec<HookAction>,
    /// Armada v1 (accepted, not acted on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub update: Vec<HookAction>,
    /// Armada v1 (accepted, not acted on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub create: Vec<HookAction>,
}

/// `upgrade.post`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UpgradePost {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub create: Vec<HookAction>,
}

/// `upgrade.options`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UpgradeOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recreate_pods: Option<bool>,
    /// Armada v2's place of `upgrade.no_hooks`: `true` runs no Helm hook on an upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_hooks: Option<bool>,
}

impl Upgrade {
    /// `upgrade.no_hooks` (v1) or `upgrade.options.no_hooks` (v2): an upgrade runs no hook.
    pub fn no_hooks(&self) -> bool {
        self.no_hooks == Some(true) || self.options.as_ref().and_then(|o| o.no_hooks) == Some(true)
    }
}

/// One upgrade action: objects of a type, selected by labels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HookAction {
    /// Armada v1: a name (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Object type: pod, job or cronjob.
    #[serde(rename = "type")]
    #[schemars(length(min = 1))]
    pub type_: String,
    /// Labels selecting the objects.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl HookAction {
    /// The `(apiVersion, kind)` of the objects this action selects: `pod`, `job` and `cronjob`
    /// as in Armada (any case, singular or plural). `None` for a type Weft does not know.
    pub fn target(&self) -> Option<(&'static str, &'static str)> {
        match self.type_.to_ascii_lowercase().trim_end_matches('s') {
            "pod" => Some(("v1", "Pod")),
            "job" => Some(("batch/v1", "Job")),
            "cronjob" => Some(("batch/v1", "CronJob")),
            _ => None,
        }
    }
}

/// Where a chart is in its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    #[default]
    Pending,
    Deploying,
    Deployed,
    Failed,
}

/// Observed state of an ArmadaChart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArmadaChartStatus {
    /// `Ready`, `Reconciling`, `Stalled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// pending → deploying → deployed, or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The chart source revision applied (git commit or archive digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// sha256 of the values the chart was last applied with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_values_checksum: Option<String>,
    /// Live children differ from what was applied (drift policy `report`).
    #[serde(default)]
    pub inconsistent: bool,
    /// Objects that were not ready when the wait ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_ready: Vec<ObjectRef>,
    /// The objects this chart applied (its inventory, for pruning).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<ObjectRef>,
}

/// A group of charts deployed together, or one after another when `sequenced`.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "armada.airshipit.org",
    version = "v1alpha1",
    kind = "ArmadaChartGroup",
    namespaced,
    status = "ArmadaGroupStatus",
    shortname = "acg",
    category = "weft",
    category = "armada",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Sequenced", type_ = "boolean", json_path = ".spec.sequenced"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ArmadaChartGroupSpec {
    /// Names of the ArmadaCharts (same namespace) of this group, in order.
    #[schemars(length(min = 1))]
    pub chart_group: Vec<String>,
    /// Deploy the charts one after another, each ready before the next starts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sequenced: bool,
    /// What the group is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Armada: the group's name (informational; `metadata.name` is what references use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Deprecated (Armada v1): run Helm tests of the group's charts (accepted, not acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_charts: Option<bool>,
}

/// Observed state of an ArmadaChartGroup or ArmadaManifest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArmadaGroupStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// pending → deploying → deployed, or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Members deployed so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployed: Vec<String>,
}

/// The groups to deploy, in order, and the prefix of every release.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "armada.airshipit.org",
    version = "v1alpha1",
    kind = "ArmadaManifest",
    namespaced,
    status = "ArmadaGroupStatus",
    shortname = "amf",
    category = "weft",
    category = "armada",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Prefix", type_ = "string", json_path = ".spec.release_prefix"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ArmadaManifestSpec {
    /// Prepended to every release of the manifest's charts: `{release_prefix}-{release}`.
    pub release_prefix: String,
    /// Names of the ArmadaChartGroups (same namespace), deployed one after another.
    #[schemars(length(min = 1))]
    pub chart_groups: Vec<String>,
}

#[cfg(test)]
mod tests;
