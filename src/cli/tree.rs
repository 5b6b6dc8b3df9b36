//! `weft tree`: what a sync root holds, as `flux tree kustomization` shows: the root's inventory
//! (its sharded ConfigMaps in Weft's namespace, one set per shard root), and under each owner it
//! applied (a WeaveCloud, an ArmadaChart, …) that owner's own inventory (its `status.inventory`,
//! or the ConfigMaps it moved to), down to `Kind/namespace/name`. Read only; no daemon needed.
//! Exit 0, 1 when the root has no inventory (it never synced, or the name is wrong: the roots
//! that exist are named), 2 on an error.

use crate::api::keys::ROOT_KEY;
use std::collections::BTreeSet;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use super::args::{ClusterArgs, RootObjectArgs};
use crate::api::ObjectRef;
use crate::apply::inventory;
use crate::daemon::record::root_of_record;
use crate::render::{Owner, OwnerKind};

/// The flags of `weft tree`.
#[derive(Args, Debug)]
pub struct TreeArgs {
    #[command(flatten)]
    pub object: RootObjectArgs,
    /// Name of the sync root (`--root-name` of `weft sync` / `weft run`).
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    pub root_name: String,
    /// Output format: an indented tree, or the same tree as JSON.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: TreeOutput,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TreeOutput {
    Text,
    Json,
}

/// One object of the tree, and what it holds when it is an owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// `Kind/namespace/name` (`Kind/name` when cluster-scoped; `Root/<namespace>/<name>`).
    pub object: String,
    /// What it applied, when it is an owner with an inventory.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Node>,
    /// Why its inventory is not shown (an owner whose inventory is missing or unreadable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Owners inside owners go this deep at most (Weft's own nest one level: root → chart).
const MAX_DEPTH: usize = 8;

/// `weft tree`.
pub fn tree(args: TreeArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        let object = args.object.root(&args.cluster.weft_namespace)?;
        // A Root object keeps its inventory in its own namespace, without shards.
        let (ns, roots) = match &object {
            Some((namespace, name)) => {
                crate::daemon::roots::requests::get(&client, namespace, name).await?;
                (namespace, vec![name.clone()])
            }
            None => {
                let ns = &args.cluster.weft_namespace;
                (ns, root_names(&client, ns, &args.root_name).await?)
            }
        };
        let mut trees = Vec::new();
        for root in &roots {
            let owner = Owner::root(ns.clone(), root.clone());
            if let Some((entries, _)) = inventory::read_root(&client, &owner, ns).await? {
                let mut seen = BTreeSet::new();
                let children = nodes(&client, &entries, &mut seen, 1).await;
                trees.push(Node {
                    object: format!("Root/{ns}/{root}"),
                    children,
                    note: None,
                });
            }
        }
        if let (true, Some((namespace, name))) = (trees.is_empty(), &object) {
            errln!("error: Root {namespace}/{name} has no inventory yet: it has not passed (see `weft get roots -n {namespace}`)");
            return Ok(ExitCode::from(1));
        }
        if trees.is_empty() {
            let known = all_roots(&client, ns).await.unwrap_or_default();
            let known = if known.is_empty() {
                format!("no root has synced in namespace {ns}")
            } else {
                format!("the roots in namespace {ns}: {}", known.join(", "))
            };
            errln!(
                "error: root {} has no inventory in namespace {ns} (--root-name, \
                 --weft-namespace); {known}",
                args.root_name
            );
            return Ok(ExitCode::from(1));
        }
        match args.output {
            TreeOutput::Text => {
                for t in &trees {
                    out!("{}", render_text(t));
                }
            }
            TreeOutput::Json => {
                let doc = if trees.len() == 1 {
                    serde_json::to_value(&trees[0])?
                } else {
                    serde_json::to_value(&trees)?
                };
                outln!("{}", serde_json::to_string_pretty(&doc)?);
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The root and its shard roots, from their root records (a root synced before records
/// existed has none: then the root alone).
async fn root_names(client: &Client, ns: &str, root: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let selector = format!("{ROOT_KEY}={root}");
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels(&selector))
        .await?
        .iter()
        .filter_map(|cm| root_of_record(&cm.name_any()).map(str::to_string))
        .collect();
    if !names.iter().any(|n| n == root) {
        names.push(root.to_string());
    }
    // The base root first, then its shards in order.
    names.sort_by_key(|n| (n != root, n.clone()));
    Ok(names)
}

/// Every base root recorded in `ns`.
async fn all_roots(client: &Client, ns: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let roots: BTreeSet<String> = api
        .list(&ListParams::default().labels(ROOT_KEY))
        .await?
        .iter()
        .filter_map(|cm| cm.labels().get(ROOT_KEY).cloned())
        .collect();
    Ok(roots.into_iter().collect())
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
                Ok(Some(_)) => node.note = Some("nested too deep; not shown".into()),
                Ok(None) => node.note = Some("no inventory recorded yet".into()),
                Err(e) => {
                    node.note = Some(format!(
                        "inventory not readable: {}",
                        super::report::error_text(&e)
                    ))
                }
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
) -> anyhow::Result<Option<BTreeSet<ObjectRef>>> {
    let (group, version) = match entry.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", entry.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &entry.kind);
    // Weft's owner kinds are namespaced and pluralised regularly (`armadacharts`, `weaveclouds`).
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &entry.namespace, &resource);
    let Some(cr) = api.get_opt(&entry.name).await? else {
        return Ok(None);
    };
    let owner = Owner::resource(kind, &entry.namespace, &entry.name);
    let status = cr.data.pointer("/status/inventory");
    Ok(inventory::read_resource(client, &owner, status).await?)
}

/// The tree as text, with the box-drawing guides of `flux tree` and `tree(1)`.
pub fn render_text(root: &Node) -> String {
    let mut out = format!("{}\n", root.object);
    if let Some(note) = &root.note {
        out.push_str(&format!("  ({note})\n"));
    }
    branch(&root.children, "", &mut out);
    out
}

fn branch(children: &[Node], prefix: &str, out: &mut String) {
    for (i, child) in children.iter().enumerate() {
        let last = i + 1 == children.len();
        let (joint, below) = if last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        out.push_str(&format!("{prefix}{joint}{}", child.object));
        if let Some(note) = &child.note {
            out.push_str(&format!(" ({note})"));
        }
        out.push('\n');
        branch(&child.children, &format!("{prefix}{below}"), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(object: &str) -> Node {
        Node {
            object: object.into(),
            children: Vec::new(),
            note: None,
        }
    }

    #[test]
    fn the_text_tree_draws_each_owner_under_its_parent() {
        let tree = Node {
            object: "Root/weft-system/weft".into(),
            children: vec![
                Node {
                    object: "ArmadaChart/demo/api".into(),
                    children: vec![
                        leaf("ConfigMap/demo/demo-api"),
                        leaf("Service/demo/demo-api"),
                    ],
                    note: None,
                },
                Node {
                    object: "ArmadaChart/demo/web".into(),
                    children: Vec::new(),
                    note: Some("no inventory recorded yet".into()),
                },
                leaf("Namespace/demo"),
            ],
            note: None,
        };
        assert_eq!(
            render_text(&tree),
            "Root/weft-system/weft\n\
             ├── ArmadaChart/demo/api\n\
             │   ├── ConfigMap/demo/demo-api\n\
             │   └── Service/demo/demo-api\n\
             ├── ArmadaChart/demo/web (no inventory recorded yet)\n\
             └── Namespace/demo\n"
        );
    }
}
