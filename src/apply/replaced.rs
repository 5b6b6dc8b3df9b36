//! A kind change under the same name: an owner applied `ConfigMap/shop/settings` before and now
//! desires `Secret/shop/settings` instead. Left to the usual order, the new object would be
//! created in its wave and the old one pruned at the end of the pass, so both would exist for a
//! while (and a pass that fails in between would leave both). Instead the old object is pruned
//! first, by the prune's rules (provably the owner's, not protected; its UID as precondition),
//! waited for until gone, and only then is the new one created. The caller counts these deletes
//! against the prune guard before it asks for them.
//!
//! [`find`] is pure: a replacement is an entry of an owner's previous inventory that nobody
//! desires any more, whose namespace and name a desired object of the same owner now has with
//! another group or kind. Whether the new object exists already is asked of the cluster
//! ([`new_exists`]; the write-ahead lists it before it is created, so the inventory cannot say):
//! if it does, the old one is a plain prune (a Role removed beside its ServiceAccount of the same
//! name). Namespaces, CRDs and Weft's own custom resources are left to the prune (their delete
//! takes what lives in them).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kube::Client;

use super::catalog::Catalog;
use super::changeset::{Action, Change};
use super::delete::{delete_and_wait, Gone};
use super::inventory::Inventory;
use super::planned::PlannedObject;
use super::proof::proof_of_ownership;
use super::protection::protection;
use super::recreate::RecreateOptions;
use super::ref_key::{ref_key, ref_key_of};
use super::ApplyError;
use crate::api::ObjectRef;
use crate::render::{order, Owner, OwnerKind};

/// An object of one kind replaced by an object of another kind under the same name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replacement {
    pub owner: Owner,
    /// In the owner's previous inventory, desired no more.
    pub old: ObjectRef,
    /// Desired now by the same owner, same namespace and name.
    pub new: ObjectRef,
}

/// Left to the prune: what deleting takes other objects with it.
fn left_to_prune(kind: &str, owner_kinds: &[OwnerKind]) -> bool {
    order::stage(kind) == 0 || OwnerKind::from_kind(kind).is_some_and(|k| owner_kinds.contains(&k))
}

/// The replacements of a pass: `previous` are the owners' inventories before this pass,
/// `desired` every object the pass desires, per owner, namespaces resolved.
pub fn find(
    previous: &[Inventory],
    desired: &BTreeMap<Owner, BTreeSet<ObjectRef>>,
    owner_kinds: &[OwnerKind],
) -> Vec<Replacement> {
    // Every desired object by namespace and name (borrowed: a large pass copies no string).
    let mut by_name: HashMap<(&str, &str), Vec<(&Owner, &ObjectRef)>> = HashMap::new();
    for (owner, refs) in desired {
        for r in refs {
            by_name
                .entry((r.namespace.as_str(), r.name.as_str()))
                .or_default()
                .push((owner, r));
        }
    }
    let mut out = Vec::new();
    for inv in previous {
        for old in &inv.entries {
            let Some(named) = by_name.get(&(old.namespace.as_str(), old.name.as_str())) else {
                continue;
            };
            let old_key = ref_key_of(old);
            if left_to_prune(&old.kind, owner_kinds)
                || named.iter().any(|(_, r)| ref_key_of(r) == old_key)
            {
                continue;
            }
            for (owner, new) in named {
                if *owner == &inv.owner && !left_to_prune(&new.kind, owner_kinds) {
                    out.push(Replacement {
                        owner: inv.owner.clone(),
                        old: old.clone(),
                        new: (*new).clone(),
                    });
                }
            }
        }
    }
    out
}

/// Prune the old object of `r` and wait until it is gone. Returns its change (`Deleted`), or
/// `None` when it is gone already, not provably the owner's, protected, or of a kind the
/// cluster does not serve right now: the prune at the end of the pass judges it then, as any
/// object that left git.
pub async fn prune_old(
    client: &Client,
    catalog: &Catalog,
    r: &Replacement,
    opts: &RecreateOptions,
) -> Result<Option<Change>, ApplyError> {
    let old = &r.old;
    let Some((ar, namespaced)) = catalog.resolve(&old.api_version, &old.kind).cloned() else {
        return Ok(None);
    };
    let api: kube::Api<kube::api::DynamicObject> = if namespaced {
        kube::Api::namespaced_with(client.clone(), &old.namespace, &*ar)
    } else {
        kube::Api::all_with(client.clone(), &*ar)
    };
    let Some(live) = api
        .get_opt(&old.name)
        .await
        .map_err(|e| ApplyError::api("read", old, e))?
    else {
        return Ok(None);
    };
    let uid = live.metadata.uid.clone();
    let value = serde_json::to_value(&live)
        .map_err(|source| ApplyError::decode(old, "the live object", source))?;
    if proof_of_ownership(&value, &r.owner).is_err() || protection(&old.kind, &value).is_some() {
        return Ok(None);
    }
    let gone = Gone {
        timeout: opts.timeout,
        poll_interval: opts.poll_interval,
        why: "pruned before its replacement is created, but still there (a finalizer?)",
    };
    delete_and_wait(&api, old, uid, &gone).await?;
    Ok(Some(Change {
        object: old.clone(),
        owner: r.owner.clone(),
        action: Action::Deleted,
        reason: Some(format!(
            "replaced by {} (another kind under the same name): pruned before it is created",
            r.new
        )),
    }))
}

/// The replacements whose new object is among `objects` (one batch about to be applied), each
/// with its new object.
pub fn due<'r, 'p>(
    replacements: &'r [Replacement],
    objects: &'p [PlannedObject],
) -> Vec<(&'r Replacement, &'p PlannedObject)> {
    if replacements.is_empty() {
        return Vec::new();
    }
    let by_key: HashMap<_, &PlannedObject> = objects
        .iter()
        .map(|p| (ref_key(&p.object_ref), p))
        .collect();
    replacements
        .iter()
        .filter_map(|r| by_key.get(&ref_key(&r.new)).map(|p| (r, *p)))
        .collect()
}

/// Does the new object of a replacement exist already (then the old one is a plain prune)?
pub async fn new_exists(client: &Client, new: &PlannedObject) -> Result<bool, ApplyError> {
    new.api(client)
        .get_opt(&new.object_ref.name)
        .await
        .map(|o| o.is_some())
        .map_err(|e| ApplyError::api("read", &new.object_ref, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::inventory::InventorySource;

    fn r(api_version: &str, kind: &str, ns: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn root() -> Owner {
        Owner::root("weft-system", "weft")
    }

    fn inventory(owner: Owner, entries: &[ObjectRef]) -> Inventory {
        Inventory {
            owner,
            entries: entries.iter().cloned().collect(),
            source: InventorySource::Stored,
            force_prune: None,
        }
    }

    #[test]
    fn a_kind_change_under_the_same_name_is_a_replacement() {
        let cm = r("v1", "ConfigMap", "shop", "settings");
        let secret = r("v1", "Secret", "shop", "settings");
        let other = r("v1", "ConfigMap", "shop", "other");
        let previous = [inventory(root(), &[cm.clone(), other.clone()])];
        let desired = BTreeMap::from([(root(), BTreeSet::from([secret.clone(), other.clone()]))]);
        assert_eq!(
            find(&previous, &desired, &OwnerKind::RENDERING),
            vec![Replacement {
                owner: root(),
                old: cm.clone(),
                new: secret.clone()
            }]
        );
    }

    #[test]
    fn what_is_still_desired_or_was_there_before_is_no_replacement() {
        let cm = r("v1", "ConfigMap", "shop", "settings");
        let secret = r("v1", "Secret", "shop", "settings");
        // Both desired: a ServiceAccount, Role and RoleBinding share names all the time.
        let previous = [inventory(root(), std::slice::from_ref(&cm))];
        let both = BTreeMap::from([(root(), BTreeSet::from([cm.clone(), secret.clone()]))]);
        assert!(find(&previous, &both, &OwnerKind::RENDERING).is_empty());
        // A new API version of the same kind is the same object.
        let v2 = r("v2", "ConfigMap", "shop", "settings");
        let moved = BTreeMap::from([(root(), BTreeSet::from([v2]))]);
        assert!(find(&previous, &moved, &OwnerKind::RENDERING).is_empty());
        // Another owner's object of that name: not this owner's replacement.
        let chart = Owner::resource(OwnerKind::ArmadaChart, "shop", "web");
        let previous = [inventory(root(), std::slice::from_ref(&cm))];
        let elsewhere = BTreeMap::from([(chart, BTreeSet::from([secret.clone()]))]);
        assert!(find(&previous, &elsewhere, &OwnerKind::RENDERING).is_empty());
        // Another namespace: not the same name.
        let there =
            BTreeMap::from([(root(), BTreeSet::from([r("v1", "Secret", "b", "settings")]))]);
        assert!(find(&previous, &there, &OwnerKind::RENDERING).is_empty());
        // A Namespace is left to the prune (its delete takes what lives in it).
        let ns = r("v1", "Namespace", "", "shop");
        let previous = [inventory(root(), std::slice::from_ref(&ns))];
        let crd_named_alike = BTreeMap::from([(
            root(),
            BTreeSet::from([r("example.com/v1", "Gadget", "", "shop")]),
        )]);
        assert!(find(&previous, &crd_named_alike, &OwnerKind::RENDERING).is_empty());
    }
}
