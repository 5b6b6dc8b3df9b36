//! Custom resource types and shared API vocabulary. No I/O here.

// kube's `printcolumn(name = .., type_ = ..)` repeats key names across columns, which clippy
// mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod armada;
pub mod bounded;
pub mod conditions;
pub mod event_seal;
pub mod keys;
pub mod kube_error;
pub mod notification;
pub mod owner;
pub mod redact;
pub mod root;
pub mod suspend;
pub mod threshold;
pub mod weavecloud;

use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use root::Root;
pub use weavecloud::WeaveCloud;

/// What a controller does about a child object changed outside Weft.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DriftPolicy {
    /// Re-apply the desired state.
    #[default]
    Correct,
    /// Report the drift in status and change nothing.
    Report,
}

/// A reference to one applied object, as kept in inventories.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace; empty for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// `namespace/name` of a namespaced resource (an ArmadaChart, a group, a manifest).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Secret's `data` as bytes by key (what every reader of a Secret in Weft wants).
pub fn secret_bytes(
    secret: k8s_openapi::api::core::v1::Secret,
) -> std::collections::BTreeMap<String, Vec<u8>> {
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

/// Every CRD Weft defines, in the order `weft crds` prints them.
pub fn crds(
) -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    vec![
        WeaveCloud::crd(),
        armada::ArmadaChart::crd(),
        armada::ArmadaChartGroup::crd(),
        armada::ArmadaManifest::crd(),
        notification::Provider::crd(),
        notification::Alert::crd(),
        root::Root::crd(),
    ]
}

/// The CRDs as a multi-document YAML stream (what `weft crds` prints and `deploy/crds.yaml` holds).
pub fn crds_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}
