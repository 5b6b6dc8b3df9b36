//! Weft's resources at a glance, read from the cluster (for `weft get`): one [`Row`] per Root
//! object, WeaveCloud, ArmadaChart, ArmadaChartGroup and ArmadaManifest with its `Ready`
//! condition, what it runs (revision, agent version, chart revision, phase), whether it is
//! suspended, since when, and why when it is not ready. Read only; no daemon needed. The
//! command line chooses what to list, waits, and prints.

use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaGroupStatus, ArmadaManifest, Phase};
use crate::api::conditions::{Condition, ConditionStatus};
use crate::api::root::Root;
use crate::api::WeaveCloud;

/// The condition type a controller marks a suspended resource with.
const SUSPENDED: &str = "Suspended";

/// The kinds [`rows`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    /// Root objects (`weft.io/v1alpha1`).
    Roots,
    WeaveClouds,
    Charts,
    Groups,
    Manifests,
}

/// One resource's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// The `Ready` condition's status (`Unknown` until the controller reported one).
    pub ready: ConditionStatus,
    /// Agent version (WeaveCloud), source revision (ArmadaChart) or phase (groups, manifests).
    pub revision: String,
    /// Whether Weft leaves it alone (`weft.io/suspend`, or `weft suspend` for the root).
    pub suspended: bool,
    /// When `Ready` last changed.
    pub since: String,
    /// `reason: message` of `Ready` when it is not `True`.
    pub message: String,
}

impl Row {
    /// The row of a resource with these conditions.
    pub fn new(
        kind: &'static str,
        meta: &impl ResourceExt,
        conditions: &[Condition],
        revision: String,
    ) -> Row {
        let ready = conditions.iter().find(|c| c.type_ == "Ready");
        let status = ready.map(|c| c.status).unwrap_or_default();
        let message = match ready {
            Some(c) if c.status != ConditionStatus::True => {
                format!("{}: {}", c.reason, c.message)
            }
            None => "no Ready condition yet (not reconciled)".to_string(),
            _ => String::new(),
        };
        Row {
            kind,
            namespace: meta.namespace().unwrap_or_default(),
            name: meta.name_any(),
            ready: status,
            revision,
            suspended: crate::api::suspend::annotated(meta.meta())
                || conditions
                    .iter()
                    .any(|c| c.type_ == SUSPENDED && c.status == ConditionStatus::True),
            since: ready
                .and_then(|c| c.last_transition_time.clone())
                .unwrap_or_default(),
            message,
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready == ConditionStatus::True
    }
}

fn phase(p: Option<Phase>) -> String {
    p.map(|p| format!("{p:?}").to_lowercase())
        .unwrap_or_default()
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The objects of `api`; with `tolerant` (`get all`), a kind whose CRD is not installed (404)
/// has none instead of failing (asked for by kind, the API server's answer stands).
async fn listed<K>(api: Api<K>, tolerant: bool) -> Result<Vec<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(s)) if tolerant && s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The Root objects of `namespace` (every namespace when `None`).
pub async fn roots(client: &Client, namespace: Option<&str>) -> Result<Vec<Root>, kube::Error> {
    Ok(api::<Root>(client, namespace)
        .list(&ListParams::default())
        .await?
        .items)
}

/// The rows of the kinds in `kinds`, in that order, of `namespace` (every namespace when
/// `None`); `tolerant`: see [`listed`].
pub async fn rows(
    client: &Client,
    kinds: &[Listed],
    namespace: Option<&str>,
    tolerant: bool,
) -> Result<Vec<Row>, kube::Error> {
    let mut rows = Vec::new();
    for kind in kinds {
        match kind {
            Listed::Roots => {
                let list = listed(api::<Root>(client, namespace), tolerant).await?;
                rows.extend(list.iter().map(root_object_row));
            }
            Listed::WeaveClouds => {
                for wc in listed(api::<WeaveCloud>(client, namespace), tolerant).await? {
                    let status = wc.status.clone().unwrap_or_default();
                    let version = status.agent_version.clone().unwrap_or_default();
                    rows.push(Row::new("WeaveCloud", &wc, &status.conditions, version));
                }
            }
            Listed::Charts => {
                for c in listed(api::<ArmadaChart>(client, namespace), tolerant).await? {
                    let status = c.status.clone().unwrap_or_default();
                    let revision = status
                        .revision
                        .clone()
                        .unwrap_or_else(|| phase(status.phase));
                    rows.push(Row::new("ArmadaChart", &c, &status.conditions, revision));
                }
            }
            Listed::Groups => {
                let list = listed(api::<ArmadaChartGroup>(client, namespace), tolerant).await?;
                rows.extend(
                    list.iter()
                        .map(|g| group_row("ArmadaChartGroup", g, &g.status)),
                );
            }
            Listed::Manifests => {
                let list = listed(api::<ArmadaManifest>(client, namespace), tolerant).await?;
                rows.extend(
                    list.iter()
                        .map(|m| group_row("ArmadaManifest", m, &m.status)),
                );
            }
        }
    }
    Ok(rows)
}

/// A Root object's row.
pub fn root_object_row(r: &Root) -> Row {
    let status = r.status.clone().unwrap_or_default();
    let revision = status.last_applied_revision.clone().unwrap_or_default();
    let mut row = Row::new("Root", r, &status.conditions, revision);
    row.suspended |= r.spec.suspend;
    // Ready as it was before the suspension: why it is suspended, when that was said.
    if let (true, true, Some(why)) = (
        r.spec.suspend,
        row.message.is_empty(),
        crate::api::suspend::message(&r.metadata),
    ) {
        row.message = format!("suspended: {why}");
    }
    row
}

/// A group's or manifest's row: its phase stands for a revision.
fn group_row(
    kind: &'static str,
    meta: &impl ResourceExt,
    status: &Option<ArmadaGroupStatus>,
) -> Row {
    let status = status.clone().unwrap_or_default();
    Row::new(kind, meta, &status.conditions, phase(status.phase))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_without_a_ready_condition_is_not_ready_and_says_why() {
        let chart: ArmadaChart = serde_json::from_value(serde_json::json!({
            "apiVersion": "armada.airshipit.org/v1alpha1",
            "kind": "ArmadaChart",
            "metadata": {"name": "x", "namespace": "apps"},
            "spec": {"release": "x", "namespace": "apps", "source": {"type": "local", "location": "c"}},
        }))
        .unwrap();
        let r = Row::new("ArmadaChart", &chart, &[], String::new());
        assert!(!r.is_ready());
        assert_eq!(r.ready, ConditionStatus::Unknown);
        assert!(r.message.contains("not reconciled"), "{}", r.message);
    }
}
