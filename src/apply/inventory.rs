//! Inventories: what each owner applied, so that what leaves the repository can be pruned.
//!
//! - The sync root keeps a ConfigMap `weft-inventory-<owner-id>` in Weft's namespace
//!   (`--namespace`, default `weft-system`), key `inventory.json`: a sorted JSON list of object
//!   references. It carries the label `weft.io/inventory-of: <owner-id>`, not the owner label,
//!   so it is never itself in an inventory or pruned.
//! - A custom resource keeps its inventory in `status.inventory`.
//!
//! An inventory that cannot be found (deleted ConfigMap, a status rewritten without it) is rebuilt
//! from the cluster: the objects of the kinds this owner renders now that carry its owner label
//! *and* whose label was set by Weft's own server-side apply (managedFields). A copied label does
//! not pass that test, so a rebuilt inventory never holds an object that cannot be proven owned.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use super::ownership::proof_of_ownership;
use super::plan::{list_labelled, split_api_version, Catalog};
use super::{is_not_found, ApplyError, InventoryProblem, FIELD_MANAGER};
use crate::api::ObjectRef;
use crate::render::ownership::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_LABEL, OWNER_REF_ANNOTATION,
};
use crate::render::Owner;

/// The label that marks an inventory ConfigMap.
pub const INVENTORY_OF_LABEL: &str = "weft.io/inventory-of";
/// The ConfigMap key that holds the references.
pub const INVENTORY_KEY: &str = "inventory.json";

/// Where an inventory came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InventorySource {
    /// Read from its ConfigMap or CR status.
    Stored,
    /// Not found; rebuilt from owner labels (proven owned only).
    Rebuilt,
}

/// What one owner applied before this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inventory {
    pub owner: Owner,
    pub entries: BTreeSet<ObjectRef>,
    pub source: InventorySource,
    /// The revision whose pass may prune past the fraction guard: the value of
    /// [`FORCE_PRUNE_ANNOTATION`](super::prune::FORCE_PRUNE_ANNOTATION) on the inventory
    /// ConfigMap or the owner custom resource.
    pub force_prune: Option<String>,
}

/// A stored inventory: its entries and the owner's force-prune annotation.
pub type Stored = (BTreeSet<ObjectRef>, Option<String>);

fn force_prune_of(annotations: Option<&BTreeMap<String, String>>) -> Option<String> {
    annotations?
        .get(super::prune::FORCE_PRUNE_ANNOTATION)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The identity of a reference across API versions: (group, kind, namespace, name).
pub type RefKey = (String, String, String, String);

/// The identity of a reference across API versions: (group, kind, namespace, name).
pub fn ref_key(r: &ObjectRef) -> RefKey {
    (
        split_api_version(&r.api_version).0.to_string(),
        r.kind.clone(),
        r.namespace.clone(),
        r.name.clone(),
    )
}

/// The name of the sync root's inventory ConfigMap.
pub fn configmap_name(owner: &Owner) -> String {
    format!("weft-inventory-{}", owner.id())
}

fn inventory_error(owner: &Owner, problem: InventoryProblem) -> ApplyError {
    ApplyError::Inventory {
        owner: owner.reference(),
        problem,
    }
}

/// The owner CR's API, when the owner is a CR the cluster serves.
fn owner_api(
    client: &Client,
    catalog: &Catalog,
    kind: &str,
    namespace: &str,
) -> Option<Api<DynamicObject>> {
    let (ar, namespaced) = catalog.resolve_kind(None, kind)?;
    Some(if *namespaced {
        Api::namespaced_with(client.clone(), namespace, ar)
    } else {
        Api::all_with(client.clone(), ar)
    })
}

/// Read the stored inventory of `owner`; `None` when there is none.
pub async fn read_stored(
    client: &Client,
    catalog: &Catalog,
    owner: &Owner,
    weft_namespace: &str,
) -> Result<Option<Stored>, ApplyError> {
    match owner {
        Owner::SyncRoot { .. } => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
            let cm = api
                .get_opt(&configmap_name(owner))
                .await
                .map_err(|e| inventory_error(owner, InventoryProblem::Read(e)))?;
            let Some(cm) = cm else { return Ok(None) };
            let text = cm
                .data
                .as_ref()
                .and_then(|d| d.get(INVENTORY_KEY))
                .cloned()
                .unwrap_or_default();
            let entries: Vec<ObjectRef> = serde_json::from_str(&text).map_err(|source| {
                let what = format!(
                    "ConfigMap {weft_namespace}/{} key {INVENTORY_KEY}",
                    configmap_name(owner)
                );
                inventory_error(owner, InventoryProblem::Invalid { what, source })
            })?;
            let force = force_prune_of(cm.metadata.annotations.as_ref());
            Ok(Some((entries.into_iter().collect(), force)))
        }
        Owner::Resource {
            kind,
            namespace,
            name,
        } => {
            let Some(api) = owner_api(client, catalog, kind, namespace) else {
                return Ok(None);
            };
            let cr = api
                .get_opt(name)
                .await
                .map_err(|e| inventory_error(owner, InventoryProblem::Read(e)))?;
            let Some(cr) = cr else { return Ok(None) };
            let Some(inv) = cr.data.pointer("/status/inventory").cloned() else {
                return Ok(None);
            };
            let entries: Vec<ObjectRef> = serde_json::from_value(inv).map_err(|source| {
                let what = "status.inventory".to_string();
                inventory_error(owner, InventoryProblem::Invalid { what, source })
            })?;
            let force = force_prune_of(cr.metadata.annotations.as_ref());
            Ok(Some((entries.into_iter().collect(), force)))
        }
    }
}

/// Rebuild a lost inventory: objects of `kinds` (the resources this owner renders) that carry the
/// owner's label and were labelled by Weft's own apply.
pub async fn rebuild(
    client: &Client,
    owner: &Owner,
    kinds: &[(ApiResource, bool)],
) -> Result<BTreeSet<ObjectRef>, ApplyError> {
    let selector = format!("{OWNER_LABEL}={}", owner.id());
    let mut out = BTreeSet::new();
    for (ar, _) in kinds {
        for live in list_labelled(client, ar, None, &selector).await? {
            if proof_of_ownership(&live, owner).is_ok() {
                out.insert(ObjectRef {
                    api_version: ar.api_version.clone(),
                    kind: ar.kind.clone(),
                    namespace: live
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    name: live
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                });
            }
        }
    }
    Ok(out)
}

/// The previous inventory of `owner`: stored, or rebuilt when lost.
pub async fn read(
    client: &Client,
    catalog: &Catalog,
    owner: &Owner,
    weft_namespace: &str,
    kinds: &[(ApiResource, bool)],
) -> Result<Inventory, ApplyError> {
    if let Some((entries, force_prune)) =
        read_stored(client, catalog, owner, weft_namespace).await?
    {
        return Ok(Inventory {
            owner: owner.clone(),
            entries,
            source: InventorySource::Stored,
            force_prune,
        });
    }
    let entries = rebuild(client, owner, kinds).await?;
    Ok(Inventory {
        owner: owner.clone(),
        entries,
        source: InventorySource::Rebuilt,
        force_prune: None,
    })
}

/// Store `entries` as the inventory of `owner`, unless it is already stored exactly so (a no-op
/// pass writes nothing). Returns whether it wrote.
pub async fn write(
    client: &Client,
    catalog: &Catalog,
    owner: &Owner,
    weft_namespace: &str,
    entries: &BTreeSet<ObjectRef>,
    previous: &Inventory,
) -> Result<bool, ApplyError> {
    if &previous.entries == entries {
        // Unchanged. A rebuilt sync-root inventory is stored once (its ConfigMap was lost); a
        // rebuilt CR inventory that equals the new one is not re-written: a CR whose status
        // schema has no `inventory` field would otherwise be written on every pass, and its
        // next rebuild gives the same answer.
        // A CR's inventory is read after its objects were applied, so on a CR's first
        // reconcile the rebuild already finds them all: store it once then too (Weft's CRs
        // all have `status.inventory`), or a deleted CR's finalizer has nothing to prune.
        let store_rebuilt = previous.source == InventorySource::Rebuilt
            && (matches!(owner, Owner::SyncRoot { .. }) || !entries.is_empty());
        if !store_rebuilt {
            return Ok(false);
        }
    }
    let list: Vec<&ObjectRef> = entries.iter().collect();
    let text = serde_json::to_string(&list)
        .map_err(|e| inventory_error(owner, InventoryProblem::Encode(e)))?;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    match owner {
        Owner::SyncRoot { .. } => {
            ensure_namespace(client, weft_namespace)
                .await
                .map_err(|e| inventory_error(owner, e))?;
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
            let cm = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": configmap_name(owner),
                    "namespace": weft_namespace,
                    "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, INVENTORY_OF_LABEL: owner.id().0},
                    "annotations": {OWNER_REF_ANNOTATION: owner.reference()},
                },
                "data": {INVENTORY_KEY: text},
            });
            api.patch(&configmap_name(owner), &pp, &Patch::Apply(&cm))
                .await
                .map_err(|source| {
                    let what = format!(
                        "writing ConfigMap {weft_namespace}/{}",
                        configmap_name(owner)
                    );
                    inventory_error(owner, InventoryProblem::Api { what, source })
                })?;
        }
        Owner::Resource {
            kind,
            namespace,
            name,
        } => {
            let Some(api) = owner_api(client, catalog, kind, namespace) else {
                return Err(inventory_error(
                    owner,
                    InventoryProblem::UnknownKind(kind.clone()),
                ));
            };
            let patch = json!({"status": {"inventory": list}});
            match api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                // The CR is gone (pruned in this pass): nothing to record.
                Err(e) if is_not_found(&e) => return Ok(false),
                Err(source) => {
                    let what = "writing status.inventory".to_string();
                    return Err(inventory_error(
                        owner,
                        InventoryProblem::Api { what, source },
                    ));
                }
            }
        }
    }
    Ok(true)
}

/// Create Weft's namespace if it does not exist.
async fn ensure_namespace(client: &Client, name: &str) -> Result<(), InventoryProblem> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.get_opt(name).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => {
            let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}}});
            api.patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&ns),
            )
            .await
            .map(|_| ())
            .map_err(|source| InventoryProblem::Api {
                what: format!("creating namespace {name}"),
                source,
            })
        }
        Err(source) => Err(InventoryProblem::Api {
            what: format!("reading namespace {name}"),
            source,
        }),
    }
}

/// The new inventory of each owner: what it wants now, plus what it had and could not prune yet
/// (the prune guard held it back, or a delete failed) so that a later pass still prunes it.
pub fn next_inventories(
    desired: &BTreeMap<Owner, BTreeSet<ObjectRef>>,
    kept: &BTreeMap<Owner, BTreeSet<ObjectRef>>,
) -> BTreeMap<Owner, BTreeSet<ObjectRef>> {
    let mut out = desired.clone();
    for (owner, refs) in kept {
        out.entry(owner.clone())
            .or_default()
            .extend(refs.iter().cloned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(api_version: &str, kind: &str, ns: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn ref_key_ignores_the_version() {
        assert_eq!(
            ref_key(&r("apps/v1", "Deployment", "a", "d")),
            ref_key(&r("apps/v1beta2", "Deployment", "a", "d"))
        );
        assert_ne!(
            ref_key(&r("v1", "ConfigMap", "a", "d")),
            ref_key(&r("v1", "ConfigMap", "b", "d"))
        );
    }

    #[test]
    fn next_inventory_keeps_what_could_not_be_pruned() {
        let root = Owner::root("weft-system", "weft");
        let desired = BTreeMap::from([(
            root.clone(),
            BTreeSet::from([r("v1", "ConfigMap", "a", "x")]),
        )]);
        let kept = BTreeMap::from([(
            root.clone(),
            BTreeSet::from([r("v1", "ConfigMap", "a", "old")]),
        )]);
        let next = next_inventories(&desired, &kept);
        assert_eq!(next[&root].len(), 2);
        assert_eq!(
            configmap_name(&root),
            format!("weft-inventory-{}", root.id())
        );
    }
}
