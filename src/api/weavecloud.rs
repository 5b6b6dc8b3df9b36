//! The `WeaveCloud` custom resource (`cloud.weave.works/v1beta1`): configuration of the Weave
//! Cloud agents (flux, scope, prometheus) that Weft installs and keeps up to date.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
use super::{DriftPolicy, ObjectRef};

/// A cron expression (5 or 6 fields) or one of the `@hourly`-style macros. The loader checks
/// it fully with the cron parser; this pattern is the API server's first line of defence.
pub const CRON_PATTERN: &str =
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|(\S+\s+){4,5}\S+)$";

/// A host name or IPv4 address, optionally with `:port` — not a URL: the renderer builds
/// `https://<host>/…` and `wss://<host>/…` from it.
pub const HOSTNAME_PATTERN: &str = r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?\.?(:[0-9]{1,5})?$";

/// An absolute socket path, optionally with the `unix://` scheme.
pub const CRI_ENDPOINT_PATTERN: &str = r"^(unix://)?(/var/run/docker\.sock|/run/docker\.sock|/run/containerd/containerd\.sock|/var/run/containerd/containerd\.sock|/run/k3s/containerd/containerd\.sock|/var/snap/microk8s/common/run/containerd\.sock|/var/run/crio/crio\.sock|/run/crio/crio\.sock|/var/run/crio\.sock|/var/run/cri-dockerd\.sock|/run/cri-dockerd\.sock|/var/run/dockershim\.sock)$";

/// Desired configuration of one Weave Cloud instance; its agents run in its namespace.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cloud.weave.works",
    version = "v1beta1",
    kind = "WeaveCloud",
    namespaced,
    status = "WeaveCloudStatus",
    shortname = "wc",
    category = "weft",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.agentVersion"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WeaveCloudSpec {
    /// Settings common to every agent.
    pub general: General,
    /// The flux agent (GitOps for the cluster's workloads).
    #[serde(default)]
    pub flux: Flux,
    /// The scope agent (topology and controls).
    #[serde(default)]
    pub scope: Scope,
    /// The prometheus agent (metrics, remote-written to Weave Cloud).
    #[serde(default)]
    pub prometheus: Prometheus,
    /// What to do when a child object is changed outside Weft: `correct` (re-apply, the default)
    /// or `report` (set the `Drifted` condition and change nothing).
    #[serde(default)]
    pub drift_policy: DriftPolicy,
}

/// The platform the cluster runs on; selects platform-specific agent settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    Gke,
    Eks,
    Aks,
    Openshift,
    Minikube,
    #[default]
    Generic,
}

/// Settings common to every agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct General {
    /// The platform: gke, eks, aks, openshift, minikube or generic.
    pub environment: Environment,
    /// Follow the agent channel: install newer agent bundles on `updateSchedule`.
    #[serde(default = "default_true")]
    pub auto_update: bool,
    /// When to look for agent updates (cron, UTC).
    #[serde(default = "default_schedule")]
    #[schemars(regex(pattern = CRON_PATTERN))]
    pub update_schedule: String,
    /// A semver range the agent bundle version must satisfy (a pin), e.g. `1.x` or `>=1.2, <2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// The Weave Cloud host the agents talk to (`host` or `host:port`, not a URL).
    #[serde(default = "default_hostname")]
    #[schemars(length(min = 1), regex(pattern = HOSTNAME_PATTERN))]
    pub wc_hostname: String,
    /// Deprecated, does nothing: the launcher's own agent reported its errors with it; no agent
    /// of Weft's bundle reads it (each agent container still gets it as
    /// `WEAVE_CLOUD_REPORT_ERRORS`). A WeaveCloud that sets it `true` loads with a warning.
    #[serde(default)]
    pub wc_report_errors: bool,
    /// URL of the agent channel (`channel.yaml`, over https, file:// or git); default: the
    /// bundle built into Weft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wc_poll_url: Option<String>,
    /// The Secret (in this namespace) that holds the Weave Cloud service token; default
    /// `{name: weave-cloud, key: token}`, the Secret the launcher created.
    #[serde(default)]
    pub token_secret_ref: SecretKeyRef,
    /// Take over a cluster the Weave Cloud launcher manages: remove its `weave-agent` and the
    /// launcher objects Weft's agents replace, adopt the same-named ones (docs/migrating-from-launcher.md).
    /// `false` leaves them alone (agents may then run twice).
    #[serde(default = "default_true")]
    pub takeover: bool,
}

fn default_true() -> bool {
    true
}
fn default_schedule() -> String {
    "0 * * * *".to_string()
}
fn default_hostname() -> String {
    "cloud.weave.works".to_string()
}
fn default_token_key() -> String {
    "token".to_string()
}

/// A key of a Secret in the resource's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Key in the Secret's data (default `token`).
    #[serde(default = "default_token_key")]
    pub key: String,
}

impl SecretKeyRef {
    /// The launcher's token Secret: `weave-cloud`, key `token`.
    pub fn launcher() -> SecretKeyRef {
        SecretKeyRef {
            name: "weave-cloud".to_string(),
            key: default_token_key(),
        }
    }
}

impl Default for SecretKeyRef {
    fn default() -> Self {
        SecretKeyRef::launcher()
    }
}

/// The flux agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Flux {
    /// Do not run this agent (its objects are pruned).
    #[serde(default)]
    pub disable: bool,
    /// The repository flux syncs. Unset fields keep the value of an already running flux agent.
    #[serde(default)]
    pub config: FluxConfig,
    /// Extra arguments appended verbatim after the generated ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub append_args: Vec<String>,
    /// Extra volumes of the flux pod, each a Kubernetes `Volume` whose source is `configMap`,
    /// `secret` or `emptyDir` ([`ALLOWED_FLUX_VOLUME_SOURCES`]); e.g. a known_hosts ConfigMap
    /// for a private git host. A name the agent bundle uses is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "object_list")]
    pub volumes: Vec<serde_json::Value>,
    /// Mounts of `volumes` in the flux container (Kubernetes `VolumeMount`s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "object_list")]
    pub volume_mounts: Vec<serde_json::Value>,
    /// memcached's memory and item size, as `-m <size>` and `-I <size>` (`-m 1024`, `-I 8m`):
    /// they replace the bundle's values and those kept from the launcher's memcached. Nothing
    /// else is accepted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memcached_args: Vec<String>,
    /// Extra environment variables of the flux container (Kubernetes `EnvVar`s): a `value`, or a
    /// `valueFrom` with `secretKeyRef`, `configMapKeyRef` or `fieldRef`; e.g. `HTTPS_PROXY` on a
    /// proxied cluster. Not the token's variable, which Weft sets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "object_list")]
    pub env: Vec<serde_json::Value>,
    /// What the takeover of a launcher's flux may leave behind (`volume docker-socket`,
    /// `container logger`: the start of an entry of `status.flux.dropped`). Without it, a
    /// takeover that would drop something is refused and nothing is removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acknowledge_dropped: Vec<String>,
}

/// The volume sources `spec.flux.volumes` may use, and that a takeover carries over from the
/// launcher's flux: nothing of the node (no hostPath), nothing another namespace holds.
pub const ALLOWED_FLUX_VOLUME_SOURCES: &[&str] = &["configMap", "secret", "emptyDir"];

fn object_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}

/// Git settings of the flux agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxConfig {
    /// `--git-label`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_label: Option<String>,
    /// `--git-url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_url: Option<String>,
    /// `--git-path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_path: Option<String>,
    /// `--git-branch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_branch: Option<String>,
}

/// The scope agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scope {
    /// Do not run this agent (its objects are pruned).
    #[serde(default)]
    pub disable: bool,
    /// Disable controls (`--probe.no-controls=true`): scope only observes. Default `false`,
    /// as a launcher install.
    #[serde(default)]
    pub read_only: bool,
    /// Path of the container runtime socket, e.g. `/var/run/crio/crio.sock` (enables the CRI
    /// probe), optionally written `unix:///…`. It is mounted from the host into scope's
    /// privileged probe, so it must be one of the known runtime sockets
    /// ([`KNOWN_RUNTIME_SOCKETS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = CRI_ENDPOINT_PATTERN))]
    pub container_runtime_endpoint: Option<String>,
    /// Run the Kubernetes probe (`--probe.kubernetes`).
    #[serde(default = "default_true")]
    pub kubernetes_probe: bool,
    /// Extra arguments appended verbatim after the generated ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub append_args: Vec<String>,
}

impl Default for Scope {
    fn default() -> Self {
        Scope {
            disable: false,
            read_only: false,
            container_runtime_endpoint: None,
            kubernetes_probe: true,
            append_args: Vec::new(),
        }
    }
}

/// Which pods prometheus scrapes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PodScrapePolicy {
    /// Only pods annotated `prometheus.io/scrape: "true"`.
    OptIn,
    /// Every pod except those annotated `prometheus.io/scrape: "false"` (the default, as a
    /// launcher install).
    #[default]
    OptOut,
}

/// The prometheus agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Prometheus {
    /// Do not run this agent (its objects are pruned).
    #[serde(default)]
    pub disable: bool,
    /// `optIn` or `optOut` (default, as a launcher install).
    #[serde(default)]
    pub pod_scrape_policy: PodScrapePolicy,
    /// Extra arguments appended verbatim after the generated ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub append_args: Vec<String>,
}

/// Observed state of a WeaveCloud.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeaveCloudStatus {
    /// `Ready`, `Reconciling`, `Stalled`, `Drifted`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The agent bundle version running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// The newest bundle version the channel offers that `agentVersion` allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_version: Option<String>,
    /// Versions that failed their health gate and are not retried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad_versions: Vec<String>,
    /// Next time the channel is checked (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_update_check: Option<String>,
    /// What Weft learnt from an already running flux agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux: Option<FluxStatus>,
    /// What the takeover of a launcher-managed cluster did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takeover: Option<TakeoverStatus>,
    /// The objects this WeaveCloud applied (its inventory, for pruning).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<ObjectRef>,
}

/// Flux-specific status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxStatus {
    /// Arguments kept from the flux agent that ran before Weft (`--git-url=…`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preserved_args: Vec<String>,
    /// memcached arguments kept from the memcached that ran before Weft (`-m 512`, `-I 5m`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preserved_memcached_args: Vec<String>,
    /// What the takeover could not keep from the launcher's flux (a hostPath volume, a sidecar,
    /// an env var): to be carried over by hand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

/// What Weft did to the launcher's objects (docs/migrating-from-launcher.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TakeoverStatus {
    /// Launcher objects deleted (`Kind/namespace/name`): `weave-agent` and its RBAC, objects
    /// Weft replaces under another name or namespace, and same-named workloads recreated
    /// because their selector cannot change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// Launcher objects found and left alone because `spec.general.takeover` is false.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<String>,
}

/// The container runtime sockets `spec.scope.containerRuntimeEndpoint` may name: the standard
/// paths of Docker, containerd (also k3s's and microk8s's), CRI-O and cri-dockerd. Anything else is
/// refused, because the path is mounted from the host into a privileged pod: a WeaveCloud must not
/// be a way to mount `/` or `/etc`.
pub const KNOWN_RUNTIME_SOCKETS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/run/k3s/containerd/containerd.sock",
    "/var/snap/microk8s/common/run/containerd.sock",
    "/var/run/crio/crio.sock",
    "/run/crio/crio.sock",
    "/var/run/crio.sock",
    "/var/run/cri-dockerd.sock",
    "/run/cri-dockerd.sock",
    "/var/run/dockershim.sock",
];

/// `containerRuntimeEndpoint` as a socket path (without `unix://`), if it is a known one.
pub fn known_runtime_socket(endpoint: &str) -> Option<&'static str> {
    let e = endpoint.trim();
    let path = e.strip_prefix("unix://").unwrap_or(e);
    KNOWN_RUNTIME_SOCKETS.iter().copied().find(|s| *s == path)
}

/// Whether `arg` is an entry `spec.flux.memcachedArgs` accepts: `-m <size>` or `-I <size>`, a
/// size being digits with an optional `k`, `m` or `g`.
pub fn is_memcached_size_arg(arg: &str) -> bool {
    let Some((flag, value)) = arg.trim().split_once(' ') else {
        return false;
    };
    let value = value.trim();
    let digits = value.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G']);
    ["-m", "-I"].contains(&flag)
        && !digits.is_empty()
        && digits.len() <= 12
        && digits.bytes().all(|b| b.is_ascii_digit())
        && value.len() <= digits.len() + 1
}
