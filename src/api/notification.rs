//! The notification resources (`notification.weft.io/v1alpha1`), in the shape of Flux's
//! notification-controller: a `Provider` says where and how to send (a webhook, Slack, a commit
//! status API), an `Alert` says which events go to which Provider. See docs/notifications.md.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;

/// The API group of the notification resources.
pub const GROUP: &str = "notification.weft.io";

/// How a Provider delivers an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderType {
    /// `POST` the event as JSON (Flux's event shape) to `address`; a `token` in the Secret is
    /// sent as `Authorization: Bearer`, `headers` as extra headers.
    Generic,
    /// As `generic`, signed: `X-Signature: sha256=<HMAC-SHA256 of the body>` keyed by the
    /// Secret's `token`.
    GenericHmac,
    /// A Slack incoming webhook (`address`, usually from the Secret: it carries a token).
    Slack,
    /// GitHub commit statuses of the applied revision; `address` is the repository URL.
    Github,
    /// GitLab commit statuses of the applied revision; `address` is the project URL.
    Gitlab,
}

impl ProviderType {
    /// The name written in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderType::Generic => "generic",
            ProviderType::GenericHmac => "generic-hmac",
            ProviderType::Slack => "slack",
            ProviderType::Github => "github",
            ProviderType::Gitlab => "gitlab",
        }
    }

    /// Whether the Secret's `token` is required.
    pub fn needs_token(self) -> bool {
        matches!(
            self,
            ProviderType::GenericHmac | ProviderType::Github | ProviderType::Gitlab
        )
    }
}

/// A reference to an object of the same namespace by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalRef {
    /// Name of the object (in the referring resource's namespace).
    #[schemars(length(min = 1))]
    pub name: String,
}

/// Where and how to send notifications.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "notification.weft.io",
    version = "v1alpha1",
    kind = "Provider",
    namespaced,
    status = "NotificationStatus",
    category = "weft",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSpec {
    /// `generic`, `generic-hmac`, `slack`, `github` or `gitlab`.
    #[serde(rename = "type")]
    pub type_: ProviderType,
    /// The webhook URL (generic, slack) or the repository URL (github, gitlab). The Secret's
    /// `address` key, when present, overrides it (use it when the URL carries a token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Slack channel (overrides the webhook's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Slack user name the messages are posted as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// A Secret in this namespace with the keys `address`, `token` and (generic) `headers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalRef>,
    /// Send nothing while true.
    #[serde(default)]
    pub suspend: bool,
}

/// The minimum severity an Alert forwards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SeverityFilter {
    /// Every event.
    #[default]
    Info,
    /// Only errors.
    Error,
}

/// The kinds of object Weft emits events about.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum SourceKind {
    /// The sync root (the repository's own documents), named by `--root-name`.
    Root,
    WeaveCloud,
    ArmadaChart,
    ArmadaChartGroup,
    ArmadaManifest,
}

impl SourceKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Root => "Root",
            SourceKind::WeaveCloud => "WeaveCloud",
            SourceKind::ArmadaChart => "ArmadaChart",
            SourceKind::ArmadaChartGroup => "ArmadaChartGroup",
            SourceKind::ArmadaManifest => "ArmadaManifest",
        }
    }

    /// The kind from its name (`None` for a kind Weft sends no notifications about).
    pub fn parse(kind: &str) -> Option<SourceKind> {
        [
            SourceKind::Root,
            SourceKind::WeaveCloud,
            SourceKind::ArmadaChart,
            SourceKind::ArmadaChartGroup,
            SourceKind::ArmadaManifest,
        ]
        .into_iter()
        .find(|k| k.as_str() == kind)
    }

    /// The `apiVersion` shown in payloads (`weft.io/v1alpha1` for the root, which is not a
    /// resource of the API server).
    pub fn api_version(self) -> &'static str {
        match self {
            SourceKind::Root => "weft.io/v1alpha1",
            SourceKind::WeaveCloud => "cloud.weave.works/v1beta1",
            _ => "armada.airshipit.org/v1alpha1",
        }
    }
}

/// Which objects' events an Alert forwards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventSourceRef {
    /// `Root`, `WeaveCloud`, `ArmadaChart`, `ArmadaChartGroup` or `ArmadaManifest`.
    pub kind: SourceKind,
    /// The object's name; `*` is any name, and `*` inside a name matches any run of characters.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The object's namespace; default: the Alert's own (for `Root`: any, unless given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Which events go to which Provider.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "notification.weft.io",
    version = "v1alpha1",
    kind = "Alert",
    namespaced,
    status = "NotificationStatus",
    category = "weft",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AlertSpec {
    /// The Provider (in this namespace) the events are sent to.
    pub provider_ref: LocalRef,
    /// `info` (default): every event; `error`: only errors.
    #[serde(default)]
    pub event_severity: SeverityFilter,
    /// The objects whose events are forwarded.
    #[schemars(length(min = 1))]
    pub event_sources: Vec<EventSourceRef>,
    /// Regular expressions: an event whose message matches one is not sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclusion_list: Vec<String>,
    /// A short text added to every event's metadata (`summary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Send nothing while true.
    #[serde(default)]
    pub suspend: bool,
}

/// Observed state of a Provider or an Alert.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationStatus {
    /// `Ready`: whether the spec can be acted on, and if not, why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
