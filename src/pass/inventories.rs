//! The previous inventories a pass reads: every owner's before the apply (the write-ahead), and
//! again for the prune — except the sync root's, which only the pass itself writes, so the first
//! read (as the write-ahead left it) is reused: a no-op pass over a 100,000-object root reads and
//! decompresses its inventory once.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::ApiResource;
use kube::Client;

use crate::apply::inventory::{self, Inventory};
use crate::apply::plan::Catalog;
use crate::apply::ApplyError;
use crate::render::{DesiredSet, Owner};

/// The previous inventory of every owner of `set`, and the errors of those that could not be
/// read.
pub async fn read_inventories(
    client: &Client,
    set: &DesiredSet,
    catalog: &Catalog,
    weft_namespace: &str,
) -> (Vec<Inventory>, Vec<ApplyError>) {
    read_reusing(client, set, catalog, weft_namespace, Vec::new()).await
}

/// [`read_inventories`], taking an owner's inventory from `known` when it is there (read earlier
/// in the same pass, as stored since).
pub async fn read_reusing(
    client: &Client,
    set: &DesiredSet,
    catalog: &Catalog,
    weft_namespace: &str,
    known: Vec<Inventory>,
) -> (Vec<Inventory>, Vec<ApplyError>) {
    let mut known: BTreeMap<Owner, Inventory> =
        known.into_iter().map(|i| (i.owner.clone(), i)).collect();
    let mut inventories = Vec::new();
    let mut errors = Vec::new();
    for owner in set.owners() {
        if let Some(inv) = known.remove(owner) {
            inventories.push(inv);
            continue;
        }
        // What a rebuild lists, found only if the stored inventory is missing: a walk of every
        // object of the set (a kind lookup and a namespace copy each) was 6 % of a no-op pass's
        // CPU at 100,000 objects.
        let scope = || {
            (
                owner_kinds(set, owner, catalog),
                owner_namespaces(set, owner),
            )
        };
        match inventory::read(client, catalog, owner, weft_namespace, scope).await {
            Ok(inv) => inventories.push(inv),
            Err(e) => errors.push(e),
        }
    }
    (inventories, errors)
}

/// The namespaces an owner renders into now (where a rebuild looks when it may not list
/// cluster-wide).
fn owner_namespaces(set: &DesiredSet, owner: &Owner) -> BTreeSet<String> {
    set.objects()
        .iter()
        .filter(|d| &d.owner == owner)
        .filter_map(|d| {
            d.namespace()
                .filter(|ns| !ns.is_empty())
                .map(str::to_string)
        })
        .collect()
}

/// The resources an owner renders now (for an inventory rebuild).
fn owner_kinds(set: &DesiredSet, owner: &Owner, catalog: &Catalog) -> Vec<(ApiResource, bool)> {
    let mut seen = BTreeMap::new();
    for d in set.objects().iter().filter(|d| &d.owner == owner) {
        if let Some((ar, namespaced)) = catalog.resolve(d.api_version(), d.kind()) {
            seen.entry((ar.group.clone(), ar.kind.clone()))
                .or_insert(((**ar).clone(), *namespaced));
        }
    }
    seen.into_values().collect()
}
