//! `weft tree`: what a sync root holds, as `flux tree kustomization` shows: the root's inventory
//! (its sharded ConfigMaps in Weft's namespace, one set per shard root), and under each owner it
//! applied (a WeaveCloud, an ArmadaChart, …) that owner's own inventory (its `status.inventory`,
//! or the ConfigMaps it moved to), down to `Kind/namespace/name`, read by `daemon::tree`; this
//! file parses the flags and prints. Read only; no daemon needed.
//! Exit 0, 1 when the root has no inventory (it never synced, or the name is wrong: the roots
//! that exist are named), 2 on an error.

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::args::{ClusterArgs, RootObjectArgs};
use crate::daemon::tree;

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

/// One object of the tree as printed, and what it holds when it is an owner.
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

impl Node {
    /// The tree `read` as a person reads it: each note said in words.
    fn from_read(read: tree::Node) -> Node {
        Node {
            object: read.object,
            children: read.children.into_iter().map(Node::from_read).collect(),
            note: read.note.map(|note| match note {
                tree::Note::TooDeep => "nested too deep; not shown".to_string(),
                tree::Note::NotRecorded => "no inventory recorded yet".to_string(),
                tree::Note::Unreadable(e) => {
                    let e = match e {
                        tree::OwnedError::Read(e) => anyhow::Error::new(e),
                        tree::OwnedError::Inventory(e) => anyhow::Error::new(e),
                    };
                    format!("inventory not readable: {}", super::report::error_text(&e))
                }
            }),
        }
    }
}

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
                (ns, tree::root_names(&client, ns, &args.root_name).await?)
            }
        };
        let trees: Vec<Node> = tree::root_trees(&client, ns, &roots)
            .await?
            .into_iter()
            .map(Node::from_read)
            .collect();
        if let (true, Some((namespace, name))) = (trees.is_empty(), &object) {
            errln!("error: Root {namespace}/{name} has no inventory yet: it has not passed (see `weft get roots -n {namespace}`)");
            return Ok(ExitCode::from(1));
        }
        if trees.is_empty() {
            let known = tree::all_roots(&client, ns).await.unwrap_or_default();
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
