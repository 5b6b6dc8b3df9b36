//! Inventories: what each owner applied, so that what leaves the repository can be pruned.
//!
//! - The sync root keeps its inventory in ConfigMaps in Weft's namespace (`--namespace`, default
//!   `weft-system`): a head `weft-inventory-<owner-id>` with a manifest, and content-named chunks
//!   `weft-inventory-<owner-id>-<n>-<digest>` with the gzip-compressed sorted JSON list of object
//!   references ([`format`]); there is no size cap. They carry the label
//!   `weft.io/inventory-of: <owner-id>`, not the owner label, so they are never themselves in an
//!   inventory or pruned. A head of format 1 (key `inventory.json`, the plain list) is still read.
//! - A custom resource keeps its inventory in a field of its status while its JSON stays under
//!   [`STATUS_BYTES`]; a larger one (a chart of 20,000 objects) is kept in the same ConfigMap
//!   format in the resource's own namespace, owned by it (garbage-collected with it), and the
//!   status field is then empty.
//!
//! Which of the two an owner uses, and which status field, is the caller's policy, given with
//! each owner ([`InventoryHome`], from its kind): the engine names no kind and no field.
//!
//! A stored inventory that cannot be read back exactly (a missing chunk, a digest or count
//! mismatch, undecodable data) is an error naming the ConfigMap, which stops the pass before any
//! prune: it is never taken for an empty inventory.
//!
//! An inventory that cannot be found (deleted ConfigMap, a status rewritten without it) is rebuilt
//! from the cluster: the objects of the kinds this owner renders now that carry its owner label
//! *and* whose label was set by Weft's own server-side apply (managedFields). A copied label does
//! not pass that test, so a rebuilt inventory never holds an object that cannot be proven owned.

pub mod format;
mod recent;
mod store;

use crate::api::keys::OWNER_LABEL;
use crate::api::owner::InventoryHome;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use super::catalog::Catalog;
use super::list::list_labelled;
use super::proof::proof_of_ownership;
// Re-exported: the layers above compare inventory entries by it.
pub use super::ref_key::{ref_key, ref_key_of, RefKey};
use super::{is_not_found, ApplyError, InventoryProblem, FIELD_MANAGER};
use crate::api::ObjectRef;
use crate::render::ownership::{HELM_HOOK_ANNOTATION, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::render::Owner;

/// The key of a format 1 head ConfigMap that held the references (read, no longer written).
pub const INVENTORY_KEY: &str = "inventory.json";
/// Largest status inventory of a custom resource, as JSON: well under the 1.5 MiB an API
/// request may carry with the rest of the status. Above it, the inventory goes to ConfigMaps.
pub const STATUS_BYTES: usize = 256 * 1024;

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
    /// [`FORCE_PRUNE_ANNOTATION`](crate::api::keys::FORCE_PRUNE_ANNOTATION) on the inventory
    /// ConfigMap or the owner custom resource.
    pub force_prune: Option<String>,
}

/// A stored inventory: its entries and the owner's force-prune annotation.
pub type Stored = (BTreeSet<ObjectRef>, Option<String>);

fn force_prune_of(annotations: Option<&BTreeMap<String, String>>) -> Option<String> {
    annotations?
        .get(crate::api::keys::FORCE_PRUNE_ANNOTATION)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
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
        Api::namespaced_with(client.clone(), namespace, &**ar)
    } else {
        Api::all_with(client.clone(), &**ar)
    })
}

/// The status field `owner` keeps its inventory in, as a person reads it (`status.inventory`).
fn status_field(owner: &Owner) -> String {
    owner.kind.inventory_home().field().unwrap_or_default()
}

/// Where a custom resource owner's inventory ConfigMaps are: its own namespace; `None` for a
/// cluster-scoped resource, which keeps its inventory in its status only.
fn resource_place(owner: &Owner) -> Option<store::Place<'_>> {
    let in_status = matches!(owner.kind.inventory_home(), InventoryHome::Status(_));
    (in_status && !owner.namespace.is_empty()).then_some(store::Place {
        owner,
        namespace: &owner.namespace,
    })
}

/// The inventory ConfigMaps of the sync root.
fn root_place<'a>(owner: &'a Owner, weft_namespace: &'a str) -> store::Place<'a> {
    store::Place {
        owner,
        namespace: weft_namespace,
    }
}

/// Read the sync root's stored inventory; `None` when there is none.
pub async fn read_root(
    client: &Client,
    owner: &Owner,
    weft_namespace: &str,
) -> Result<Option<Stored>, ApplyError> {
    store::read(client, &root_place(owner, weft_namespace))
        .await
        .map_err(|e| inventory_error(owner, e))
}

/// The entries of a custom resource owner's inventory, given its status field (`None` when the
/// status has none; [`InventoryHome::find`]): the status list, or the ConfigMaps it moved to when it grew large.
pub async fn read_resource(
    client: &Client,
    owner: &Owner,
    status_inventory: Option<&Value>,
) -> Result<Option<BTreeSet<ObjectRef>>, ApplyError> {
    let listed: Option<Vec<ObjectRef>> = status_inventory
        .map(|v| serde_json::from_value(v.clone()))
        .transpose()
        .map_err(|source| {
            let what = status_field(owner);
            inventory_error(owner, InventoryProblem::Invalid { what, source })
        })?;
    if let Some(list) = listed.as_ref().filter(|l| !l.is_empty()) {
        return Ok(Some(list.iter().cloned().collect()));
    }
    if let Some(place) = resource_place(owner) {
        if let Some((entries, _)) = store::read(client, &place)
            .await
            .map_err(|e| inventory_error(owner, e))?
        {
            return Ok(Some(entries));
        }
    }
    Ok(listed.map(|_| BTreeSet::new()))
}

/// Read the stored inventory of `owner`; `None` when there is none.
pub async fn read_stored(
    client: &Client,
    catalog: &Catalog,
    owner: &Owner,
    weft_namespace: &str,
) -> Result<Option<Stored>, ApplyError> {
    let Owner {
        kind,
        namespace,
        name,
    } = owner;
    match kind.inventory_home() {
        InventoryHome::ConfigMaps => read_root(client, owner, weft_namespace).await,
        home @ InventoryHome::Status(_) => {
            let Some(api) = owner_api(client, catalog, kind.as_str(), namespace) else {
                return Ok(None);
            };
            let cr = api
                .get_opt(name)
                .await
                .map_err(|e| inventory_error(owner, InventoryProblem::Read(e)))?;
            let Some(cr) = cr else { return Ok(None) };
            let Some(entries) = read_resource(client, owner, home.find(&cr.data)).await? else {
                return Ok(None);
            };
            let force = force_prune_of(cr.metadata.annotations.as_ref());
            Ok(Some((entries, force)))
        }
    }
}

/// Rebuild a lost inventory: objects of `kinds` (the resources this owner renders) that carry the
/// owner's label and were labelled by Weft's own apply, except Helm hooks (see
/// [`HELM_HOOK_ANNOTATION`]: a hook is run, never inventoried, so never pruned).
///
/// Each kind is listed cluster-wide; an identity that may not (a namespaced Weft, a tenant's
/// ServiceAccount: a Role in each namespace) lists a namespaced kind in `namespaces` instead (the
/// namespaces the owner's objects are in now), so a leftover in a namespace it no longer renders
/// into is not found (docs/security.md); a cluster-scoped kind it may not list is not looked for.
pub async fn rebuild(
    client: &Client,
    owner: &Owner,
    kinds: &[(ApiResource, bool)],
    namespaces: &BTreeSet<String>,
) -> Result<BTreeSet<ObjectRef>, ApplyError> {
    let selector = format!("{OWNER_LABEL}={}", owner.id());
    let mut out = BTreeSet::new();
    for (ar, namespaced) in kinds {
        let listed = match list_labelled(client, ar, None, &selector).await {
            Err(ApplyError::Api {
                source: kube::Error::Api(s),
                ..
            }) if s.code == 403 && *namespaced && !namespaces.is_empty() => {
                let mut listed = Vec::new();
                for ns in namespaces {
                    listed.extend(list_labelled(client, ar, Some(ns), &selector).await?);
                }
                listed
            }
            // A cluster-scoped kind it may not list: none found, so none pruned (the safe
            // side: a rebuild that finds less prunes less).
            Err(ApplyError::Api {
                source: kube::Error::Api(s),
                ..
            }) if s.code == 403 && !*namespaced => Vec::new(),
            listed => listed?,
        };
        for live in listed {
            let hook = live
                .pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .is_some_and(|a| a.contains_key(HELM_HOOK_ANNOTATION));
            if !hook && proof_of_ownership(&live, owner).is_ok() {
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

/// The previous inventory of `owner`: stored, or rebuilt when lost (`rebuild_scope` gives the
/// kinds and namespaces a rebuild lists; it is asked for only then).
pub async fn read(
    client: &Client,
    catalog: &Catalog,
    owner: &Owner,
    weft_namespace: &str,
    rebuild_scope: impl FnOnce() -> (Vec<(ApiResource, bool)>, BTreeSet<String>),
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
    let (kinds, namespaces) = rebuild_scope();
    let entries = rebuild(client, owner, &kinds, &namespaces).await?;
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
        // all have a status inventory), or a deleted CR's finalizer has nothing to prune.
        let store_rebuilt = previous.source == InventorySource::Rebuilt
            && (owner.kind.inventory_home() == InventoryHome::ConfigMaps || !entries.is_empty());
        if !store_rebuilt {
            return Ok(false);
        }
    }
    let Owner {
        kind,
        namespace,
        name,
    } = owner;
    match kind.inventory_home() {
        InventoryHome::ConfigMaps => {
            ensure_namespace(client, weft_namespace)
                .await
                .map_err(|e| inventory_error(owner, e))?;
            store::write(client, &root_place(owner, weft_namespace), entries, None)
                .await
                .map_err(|e| inventory_error(owner, e))?;
            Ok(true)
        }
        InventoryHome::Status(_) => {
            let Some(api) = owner_api(client, catalog, kind.as_str(), namespace) else {
                return Err(inventory_error(
                    owner,
                    InventoryProblem::UnknownKind(kind.to_string()),
                ));
            };
            write_resource(client, &api, owner, name, entries)
                .await
                .map_err(|e| inventory_error(owner, e))
        }
    }
}

/// A custom resource's inventory as the JSON list of its status field, and whether it fits
/// there (within [`STATUS_BYTES`]); a larger one goes to ConfigMaps.
pub fn status_list(entries: &BTreeSet<ObjectRef>) -> Result<(Value, bool), InventoryProblem> {
    let list: Vec<&ObjectRef> = entries.iter().collect();
    let size = serde_json::to_vec(&list)
        .map_err(InventoryProblem::Encode)?
        .len();
    let json = serde_json::to_value(&list).map_err(InventoryProblem::Encode)?;
    Ok((json, size <= STATUS_BYTES))
}

/// Write a custom resource's inventory where it fits ([`status_list`]; a cluster-scoped one
/// always in its status); `false` when the resource is
/// gone. The ConfigMaps are written before the status that stops naming its entries, and deleted
/// only after the status holds them, so a failure half-way leaves a readable inventory.
async fn write_resource(
    client: &Client,
    api: &Api<DynamicObject>,
    owner: &Owner,
    name: &str,
    entries: &BTreeSet<ObjectRef>,
) -> Result<bool, InventoryProblem> {
    let written = |r: Result<DynamicObject, kube::Error>| match r {
        Ok(_) => Ok(true),
        // The CR is gone (pruned in this pass): nothing to record.
        Err(e) if is_not_found(&e) => Ok(false),
        Err(source) => Err(InventoryProblem::Api {
            what: format!("writing {}", status_field(owner)),
            source,
        }),
    };
    let patch_status = |list: Value| async move {
        let patch = owner.kind.inventory_home().patch(list).unwrap_or_default();
        written(
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await,
        )
    };
    let (list, fits) = status_list(entries)?;
    match resource_place(owner) {
        Some(place) if !fits => {
            let Some(cr) = api.get_opt(name).await.map_err(InventoryProblem::Read)? else {
                return Ok(false);
            };
            let types = cr.types.clone().unwrap_or_default();
            let refs = json!([{
                "apiVersion": types.api_version, "kind": types.kind,
                "name": name, "uid": cr.metadata.uid,
            }]);
            store::write(client, &place, entries, Some(refs)).await?;
            patch_status(json!([])).await
        }
        place => {
            if !patch_status(list).await? {
                return Ok(false);
            }
            if let Some(place) = &place {
                store::delete(client, place).await?;
            }
            Ok(true)
        }
    }
}

/// The names of every ConfigMap of the sync root's inventory (for `weft uninstall`).
pub async fn root_configmaps(
    client: &Client,
    owner: &Owner,
    weft_namespace: &str,
) -> Result<Vec<String>, ApplyError> {
    store::names(client, &root_place(owner, weft_namespace))
        .await
        .map_err(|e| inventory_error(owner, e))
}

/// Delete the sync root's inventory ConfigMaps (a retired shard's, once empty).
pub async fn remove_root(
    client: &Client,
    owner: &Owner,
    weft_namespace: &str,
) -> Result<(), ApplyError> {
    store::delete(client, &root_place(owner, weft_namespace))
        .await
        .map_err(|e| inventory_error(owner, e))
}

/// Create Weft's namespace if it does not exist (a first `weft sync` on a cluster where Weft was
/// never installed), labelled as `weft install` labels it. A caller that may not read Namespaces
/// (a tenant's one-shot sync into its own namespace) goes on: the write that needs the namespace
/// says whether it is there.
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<(), InventoryProblem> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.get_opt(name).await {
        Ok(Some(_)) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(()),
        Ok(None) => {
            let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {
                MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                "app.kubernetes.io/name": "weft",
                "app.kubernetes.io/part-of": "weft",
            }}});
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
/// `desired` is taken, not copied: at the end of a pass of 100,000 objects each copy of the
/// desired references is ≈ 20 MB more at the pass's peak.
pub fn next_inventories(
    desired: BTreeMap<Owner, BTreeSet<ObjectRef>>,
    kept: &BTreeMap<Owner, BTreeSet<ObjectRef>>,
) -> BTreeMap<Owner, BTreeSet<ObjectRef>> {
    let mut out = desired;
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
    use crate::api::owner::OwnerKind;

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
    fn a_large_custom_resource_inventory_leaves_the_status_for_configmaps() {
        let chart = |n: usize| -> BTreeSet<ObjectRef> {
            (0..n)
                .map(|i| r("v1", "ConfigMap", "charts", &format!("object-{i:05}")))
                .collect()
        };
        let (list, fits) = status_list(&chart(100)).unwrap();
        assert!(fits);
        assert_eq!(list.as_array().unwrap().len(), 100);
        // An ArmadaChart of 20,000 objects would not fit in a status update.
        let big = chart(20_000);
        let (list, fits) = status_list(&big).unwrap();
        assert!(!fits);
        assert!(serde_json::to_vec(&list).unwrap().len() > STATUS_BYTES);
        // The limit is on the size: the largest list that fits, and one more entry.
        let per = serde_json::to_vec(&chart(1)).unwrap().len() - 1;
        let most = (STATUS_BYTES - 1) / per;
        assert!(status_list(&chart(most)).unwrap().1);
        assert!(!status_list(&chart(most + 1)).unwrap().1);
        // Stored in ConfigMaps, it reads back exactly, under the ConfigMap size limit.
        let owner = Owner::resource(OwnerKind::ArmadaChart, "charts", "big");
        let head = configmap_name(&owner);
        let e = format::encode(&head, &big, format::CHUNK_BYTES).unwrap();
        assert!(e.chunks.iter().all(|s| s.data.len() <= format::CHUNK_BYTES));
        let chunks = e
            .chunks
            .iter()
            .map(|s| (s.name.clone(), Some(s.data.clone())))
            .collect();
        assert_eq!(format::decode(&head, &e.manifest, &chunks).unwrap(), big);
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
        let next = next_inventories(desired, &kept);
        assert_eq!(next[&root].len(), 2);
        assert_eq!(
            configmap_name(&root),
            format!("weft-inventory-{}", root.id())
        );
    }
}
