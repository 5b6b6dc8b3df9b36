//! Suspended owners in a pass (`weft.io/suspend: "true"`, see `daemon::suspend`): the
//! resource documents themselves are applied as usual, but the objects of a suspended WeaveCloud
//! or ArmadaChart — or of a chart whose ArmadaChartGroup or ArmadaManifest is suspended — are
//! held out of the pass: not applied, not corrected, not pruned, their inventories untouched.
//!
//! A resource is suspended when its document in git or its live copy (`kubectl annotate`) says so.

use crate::api::owner::OwnerKind;
use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, ListParams};
use kube::core::{ObjectList, PartialObjectMeta};
use kube::{Client, Resource};

use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaManifest};
use crate::api::suspend::{annotated, annotated_value};
use crate::api::WeaveCloud;
use crate::render::{DesiredSet, Owner};

/// `(kind, namespace, name)` of a resource.
type Key = (String, String, String);

/// The owners a pass of `set` must hold because they are suspended.
pub fn suspended_owners(set: &DesiredSet, live: &BTreeSet<Key>) -> BTreeSet<Owner> {
    let mut annotated_keys: BTreeSet<Key> = live.clone();
    // Who lists whom, from the documents of the repository.
    let mut groups: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut manifests: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for o in set.objects() {
        if !matches!(
            o.owner,
            Owner {
                kind: OwnerKind::Root,
                ..
            }
        ) {
            continue;
        }
        let kind = o.kind();
        if !matches!(
            kind,
            "WeaveCloud" | "ArmadaChart" | "ArmadaChartGroup" | "ArmadaManifest"
        ) {
            continue;
        }
        let ns = o.namespace().unwrap_or("").to_string();
        let name = o.name().to_string();
        let object = o.object.value();
        if annotated_value(&object) {
            annotated_keys.insert((kind.to_string(), ns.clone(), name.clone()));
        }
        let names = |field: &str| -> Vec<String> {
            object
                .pointer(&format!("/spec/{field}"))
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        match kind {
            "ArmadaChartGroup" => {
                groups.insert((ns, name), names("chart_group"));
            }
            "ArmadaManifest" => {
                manifests.insert((ns, name), names("chart_groups"));
            }
            _ => {}
        }
    }
    let mut held = BTreeSet::new();
    let chart = |ns: &str, name: &str| Owner::resource(OwnerKind::ArmadaChart, ns, name);
    let mut suspended_groups: BTreeSet<(String, String)> = BTreeSet::new();
    for (kind, ns, name) in &annotated_keys {
        match kind.as_str() {
            "WeaveCloud" => {
                held.insert(Owner::resource(OwnerKind::WeaveCloud, ns, name));
            }
            "ArmadaChart" => {
                held.insert(chart(ns, name));
            }
            "ArmadaChartGroup" => {
                suspended_groups.insert((ns.clone(), name.clone()));
            }
            "ArmadaManifest" => {
                for g in manifests
                    .get(&(ns.clone(), name.clone()))
                    .into_iter()
                    .flatten()
                {
                    suspended_groups.insert((ns.clone(), g.clone()));
                }
            }
            _ => {}
        }
    }
    for (ns, g) in &suspended_groups {
        for c in groups.get(&(ns.clone(), g.clone())).into_iter().flatten() {
            held.insert(chart(ns, c));
        }
    }
    // Only owners that take part in this pass.
    held.retain(|o| set.owners().contains(o));
    held
}

/// The resources of the kinds a pass may hold that are annotated suspended in the cluster (one
/// metadata-only LIST per kind whose owners take part in `set`; a kind whose CRD is not installed
/// has none). An identity that may not list a kind cluster-wide (a namespaced Weft, a tenant's
/// account) lists it in the namespaces of `set`'s owners instead: only those can be held.
pub async fn live_suspended(
    client: &Client,
    set: &DesiredSet,
) -> Result<BTreeSet<Key>, kube::Error> {
    let kinds: BTreeSet<OwnerKind> = set.owners().iter().map(|o| o.kind).collect();
    let namespaces: BTreeSet<String> = set
        .owners()
        .iter()
        .filter(|o| !o.is_root() && !o.namespace.is_empty())
        .map(|o| o.namespace.to_string())
        .collect();
    let mut out = BTreeSet::new();
    if kinds.contains(&OwnerKind::WeaveCloud) {
        collect::<WeaveCloud>(client, &namespaces, &mut out).await?;
    }
    if kinds.contains(&OwnerKind::ArmadaChart) {
        collect::<ArmadaChart>(client, &namespaces, &mut out).await?;
        collect::<ArmadaChartGroup>(client, &namespaces, &mut out).await?;
        collect::<ArmadaManifest>(client, &namespaces, &mut out).await?;
    }
    Ok(out)
}

async fn collect<K>(
    client: &Client,
    namespaces: &BTreeSet<String>,
    out: &mut BTreeSet<Key>,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let items = match list_metadata::<K>(Api::all(client.clone())).await {
        Err(kube::Error::Api(e)) if e.code == 403 && !namespaces.is_empty() => {
            let mut items = Vec::new();
            for ns in namespaces {
                items.extend(list_metadata::<K>(Api::namespaced(client.clone(), ns)).await?);
            }
            items
        }
        items => items?,
    };
    for item in items
        .iter()
        .filter(|i| annotated(&i.metadata) && !from_git_only(&i.metadata))
    {
        out.insert((
            K::kind(&()).to_string(),
            item.metadata.namespace.clone().unwrap_or_default(),
            item.metadata.name.clone().unwrap_or_default(),
        ));
    }
    Ok(())
}

/// Whether a live suspend annotation is only the copy of the repository's (written by Weft's
/// apply, no other manager owns it): the document in git then decides, so that removing the
/// annotation from git resumes the resource in the pass that applies the change, not the one
/// after it (issue 44 item 5). A `kubectl annotate` or `weft suspend` is another manager's, and
/// holds the resource whatever git says.
fn from_git_only(meta: &kube::api::ObjectMeta) -> bool {
    let key = format!("f:{}", crate::api::keys::SUSPEND_ANNOTATION);
    let owners: Vec<&str> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1.as_ref().is_some_and(|f| {
                f.0.pointer("/f:metadata/f:annotations")
                    .and_then(|a| a.get(&key))
                    .is_some()
            })
        })
        .map(|m| m.manager.as_deref().unwrap_or_default())
        .collect();
    !owners.is_empty() && owners.iter().all(|m| *m == crate::apply::FIELD_MANAGER)
}

/// Every `K` of `api`, metadata only; none when the CRD is not installed.
async fn list_metadata<K>(api: Api<K>) -> Result<Vec<PartialObjectMeta<K>>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list: ObjectList<PartialObjectMeta<K>> =
        match api.list_metadata(&ListParams::default()).await {
            Ok(l) => l,
            // The CRD is not installed: nothing of that kind exists.
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
    Ok(list.items)
}

/// `set` without the owners that are suspended (in git or in the cluster), and those owners.
pub async fn hold_suspended(
    client: &Client,
    set: &DesiredSet,
) -> Result<(Option<DesiredSet>, BTreeSet<Owner>), kube::Error> {
    let live = live_suspended(client, set).await?;
    let held = suspended_owners(set, &live);
    if held.is_empty() {
        return Ok((None, held));
    }
    for o in &held {
        tracing::info!(owner = %o.reference(), "suspended: its objects are left as they are");
    }
    Ok((Some(set.without_owners(&held)), held))
}
