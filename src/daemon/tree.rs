//! What a root holds, read from the cluster (for `weft tree`): the root's inventory (its
//! ConfigMaps in the root's namespace, one set per shard root), and under each owner it applied
//! (a WeaveCloud, an ArmadaChart, …) that owner's own inventory, where its kind keeps it. Read
//! only; no daemon needed. The command line prints it; what went wrong reading an owner stays a
//! typed error in the tree until then.

use std::collections::BTreeSet;

use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::{Api, Client};

use crate::api::ObjectRef;
use crate::apply::{inventory, ApplyError};
use crate::render::shard::shard_root_name;
use crate::render::{Owner, OwnerKind};

/// One object of the tree, and what it holds when it is an owner.
#[derive(Debug)]
pub struct Node {
    /// `Kind/namespace/name` (`Kind/name` when cluster-scoped; `Root/<namespace>/<name>`).
    pub object: String,
    /// What it applied, when it is an owner with an inventory.
    pub children: Vec<Node>,
    /// Why its inventory is not shown, when it is an owner whose inventory is not.
    pub note: Option<Note>,
}

/// Why an owner's inventory is not in the tree.
#[derive(Debug)]
pub enum Note {
    /// Owners inside owners deeper than [`MAX_DEPTH`].
    TooDeep,
    /// The owner has recorded none (it has not passed, or it is gone).
    NotRecorded,
    /// Reading it failed.
    Unreadable(OwnedError),
}

/// A failure to read an owner's inventory.
#[derive(Debug)]
pub enum OwnedError {
    /// Reading the owner object.
    Read(kube::Error),
    /// Reading its inventory.
    Inventory(ApplyError),
}

/// Owners inside owners go this deep at most (Weft's own nest one level: root → chart).
pub const MAX_DEPTH: usize = 8;

/// The tree of each of `roots` (root names in `ns`) that has an inventory, in order.
pub async fn root_trees(
    client: &Client,
    ns: &str,
    roots: &[String],
) -> Result<Vec<Node>, ApplyError> {
    let mut trees = Vec::new();
    for root in roots {
        let owner = Owner::root(ns, root.clone());
        if let Some((entries, _)) = inventory::read_root(client, &owner, ns).await? {
            let mut seen = BTreeSet::new();
            let children = nodes(client, &entries, &mut seen, 1).await;
            trees.push(Node {
                object: format!("Root/{ns}/{root}"),
                children,
                note: None,
            });
        }
    }
    Ok(trees)
}

/// The root and its shard roots (`<root>-shard-<i>`, see `render::shard`), in order: each
/// shard of a sharded Root keeps its inventory under its own owner name, so the shards are
/// the inventories there are, up to the first missing one.
pub async fn root_names(client: &Client, ns: &str, root: &str) -> Result<Vec<String>, ApplyError> {
    let mut names = vec![root.to_string()];
    for index in 1.. {
        let shard = shard_root_name(root, index);
        let owner = Owner::root(ns, shard.clone());
        if inventory::read_root(client, &owner, ns).await?.is_none() {
            break;
        }
        names.push(shard);
    }
    Ok(names)
}

/// Every root in `ns`: its Roots.
pub async fn all_roots(client: &Client, ns: &str) -> Result<Vec<String>, kube::Error> {
    crate::daemon::roots::requests::names(client, ns).await
}

/// The nodes of `entries`, each owner among them with its own inventory below it.
async fn nodes(
    client: &Client,
    entries: &BTreeSet<ObjectRef>,
    seen: &mut BTreeSet<ObjectRef>,
    depth: usize,
) -> Vec<Node> {
    let mut out = Vec::new();
    for entry in entries {
        let mut node = Node {
            object: entry.to_string(),
            children: Vec::new(),
            note: None,
        };
        let kind = OwnerKind::from_kind(&entry.kind)
            .filter(|k| k.renders_children() && seen.insert(entry.clone()));
        if let Some(kind) = kind {
            match owned(client, kind, entry).await {
                Ok(Some(children)) if depth < MAX_DEPTH => {
                    node.children = Box::pin(nodes(client, &children, seen, depth + 1)).await;
                }
                Ok(Some(_)) => node.note = Some(Note::TooDeep),
                Ok(None) => node.note = Some(Note::NotRecorded),
                Err(e) => node.note = Some(Note::Unreadable(e)),
            }
        }
        out.push(node);
    }
    out
}

/// The inventory of the owner custom resource `entry` (`None`: it has none, or is gone).
async fn owned(
    client: &Client,
    kind: OwnerKind,
    entry: &ObjectRef,
) -> Result<Option<BTreeSet<ObjectRef>>, OwnedError> {
    let (group, version) = match entry.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", entry.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &entry.kind);
    // Weft's owner kinds are namespaced and pluralised regularly (`armadacharts`, `weaveclouds`).
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &entry.namespace, &resource);
    let Some(cr) = api.get_opt(&entry.name).await.map_err(OwnedError::Read)? else {
        return Ok(None);
    };
    let owner = Owner::resource(kind, &entry.namespace, &entry.name);
    let status = kind.inventory_home().find(&cr.data);
    inventory::read_resource(client, &owner, status)
        .await
        .map_err(OwnedError::Inventory)
}
