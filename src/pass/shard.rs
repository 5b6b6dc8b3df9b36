//! The shard side of a pass (`weft run --shards N`, see [`crate::render::shard`]): what the
//! other shards want is never pruned here and stays recorded until git no longer has it, and the
//! inventories of shards that no longer exist are finished by shard 0.

use std::collections::{BTreeMap, BTreeSet};

use kube::Client;

use super::PassInput;
use crate::api::ObjectRef;
use crate::apply::inventory::{self, Inventory};
use crate::apply::plan::{self, Catalog};
use crate::apply::ApplyError;
use crate::render::Owner;

/// The objects the other shards apply now (namespaced ones that do not say one in
/// `default_namespace`).
pub fn elsewhere(
    input: &PassInput,
    catalog: &Catalog,
    default_namespace: &str,
) -> BTreeSet<ObjectRef> {
    match &input.shard {
        Some(s) => plan::desired_refs(&s.elsewhere, catalog, default_namespace)
            .into_values()
            .flatten()
            .collect(),
        None => BTreeSet::new(),
    }
}

/// The retired shards' inventories, stored in Weft's namespace `weft_namespace` (an absent one
/// is empty: nothing to finish).
pub async fn retired_inventories(
    client: &Client,
    input: &PassInput,
    weft_namespace: &str,
) -> (Vec<Inventory>, Vec<ApplyError>) {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for owner in input.shard.iter().flat_map(|s| &s.retired) {
        match inventory::read_root(client, owner, weft_namespace).await {
            Ok(Some((entries, force_prune))) => out.push(Inventory {
                owner: owner.clone(),
                entries,
                source: inventory::InventorySource::Stored,
                force_prune,
            }),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    (out, errors)
}

/// Is `owner` a retired shard's root?
pub fn is_retired(input: &PassInput, owner: &Owner) -> bool {
    input
        .shard
        .as_ref()
        .is_some_and(|s| s.retired.contains(owner))
}

/// Add to each live shard's next inventory what it had and another shard wants now: the record
/// stays until git no longer has the object (then it is pruned by whichever shard's label it
/// carries, or dropped as not ours).
pub fn keep_handed_off(
    next: &mut BTreeMap<Owner, BTreeSet<ObjectRef>>,
    inventories: &[Inventory],
    elsewhere: &BTreeSet<ObjectRef>,
    input: &PassInput,
) {
    if elsewhere.is_empty() {
        return;
    }
    for inv in inventories.iter().filter(|i| !is_retired(input, &i.owner)) {
        let handed: Vec<ObjectRef> = inv.entries.intersection(elsewhere).cloned().collect();
        if !handed.is_empty() {
            next.entry(inv.owner.clone()).or_default().extend(handed);
        }
    }
}
