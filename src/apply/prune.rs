//! Pruning: delete what an owner applied before and no longer wants — and nothing else.
//!
//! Rules (design, "Ownership, pruning, drift"):
//! - candidates are the previous inventory minus every object desired in this pass (by any owner:
//!   an object handed from one owner to another is not a candidate);
//! - a candidate is deleted only if its live `weft.io/owner` label still names this owner *and*
//!   that label was set by Weft's own server-side apply (managedFields of manager `weft`): a label
//!   copied onto a foreign object does not make it Weft's;
//! - `weft.io/prune: disabled` protects an object; Namespaces and CRDs are pruned only with
//!   `weft.io/prune: enabled`;
//! - if an owner would lose more than `max_fraction` of its inventory, nothing at all is pruned
//!   (unless forced);
//! - [`prune`] takes a [`DesiredSet`], which only a complete render produces: there is nothing to
//!   prune against after a failed fetch, load or render;
//! - a pruned CR's own children (its `status.inventory`) are pruned first, by the same rules;
//! - deletes carry a UID precondition, so an object re-created since it was read is left alone.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::future::Future;
use std::pin::Pin;

use futures::{FutureExt, StreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions, PropagationPolicy};
use kube::Client;
use serde_json::Value;

use super::changeset::{Action, Change, ChangeSet};
use super::inventory::{ref_key, Inventory};
use super::ownership::proof_of_ownership;
use super::plan::{split_api_version, Catalog};
use super::{is_not_found, ApplyError};
use crate::api::ObjectRef;
use crate::render::order;
use crate::render::ownership::PRUNE_ANNOTATION;
use crate::render::Owner;
use crate::render::{DesiredSet, OWNER_KINDS};

/// How to prune.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// Largest fraction of one inventory a pass may prune (`--max-prune-fraction`).
    pub max_fraction: f64,
    /// Prune past the fraction guard (`--force-prune`).
    pub force: bool,
    /// Report what would be pruned, delete nothing.
    pub dry_run: bool,
    /// Deletes at the same time.
    pub concurrency: usize,
}

impl Default for PruneOptions {
    fn default() -> Self {
        PruneOptions {
            max_fraction: 0.5,
            force: false,
            dry_run: false,
            concurrency: 10,
        }
    }
}

/// The result of a prune.
#[derive(Debug, Default)]
pub struct PruneOutcome {
    pub changes: ChangeSet,
    /// Inventory entries to keep although they are not desired (not pruned yet: the guard held
    /// them back or the delete failed), per owner.
    pub kept: BTreeMap<Owner, BTreeSet<ObjectRef>>,
    pub errors: Vec<ApplyError>,
}

/// Why an object that is provably ours is still not deleted, if it is protected.
pub fn protection(kind: &str, live: &Value) -> Option<String> {
    let prune = live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(PRUNE_ANNOTATION))
        .and_then(Value::as_str);
    if prune == Some("disabled") {
        return Some(format!("{PRUNE_ANNOTATION}: disabled"));
    }
    if matches!(kind, "Namespace" | "CustomResourceDefinition") && prune != Some("enabled") {
        return Some(format!(
            "{kind}s are pruned only with {PRUNE_ANNOTATION}: enabled"
        ));
    }
    None
}

/// The prune candidates of each inventory: its entries that nobody desires any more.
pub fn candidates(
    inventories: &[Inventory],
    desired: &BTreeSet<ObjectRef>,
) -> BTreeMap<Owner, Vec<ObjectRef>> {
    let wanted: HashSet<_> = desired.iter().map(ref_key).collect();
    inventories
        .iter()
        .map(|inv| {
            let c: Vec<ObjectRef> = inv
                .entries
                .iter()
                .filter(|r| !wanted.contains(&ref_key(r)))
                .cloned()
                .collect();
            (inv.owner.clone(), c)
        })
        .collect()
}

/// The fraction guard: an error per owner that would lose too much of its inventory.
pub fn guard(
    inventories: &[Inventory],
    candidates: &BTreeMap<Owner, Vec<ObjectRef>>,
    opts: &PruneOptions,
) -> Vec<ApplyError> {
    if opts.force {
        return Vec::new();
    }
    let mut out = Vec::new();
    for inv in inventories {
        let count = candidates.get(&inv.owner).map_or(0, Vec::len);
        let total = inv.entries.len();
        if count == 0 || total == 0 {
            continue;
        }
        let fraction = count as f64 / total as f64;
        if fraction > opts.max_fraction {
            out.push(ApplyError::PruneGuard {
                owner: inv.owner.reference(),
                count,
                total,
                percent: fraction * 100.0,
                limit: opts.max_fraction * 100.0,
            });
        }
    }
    out
}

/// Prune the objects of `inventories` that `desired` (every object of this complete render, with
/// its namespace resolved — see [`super::plan::desired_refs`]) no longer holds.
pub async fn prune(
    client: &Client,
    catalog: &Catalog,
    _complete_render: &DesiredSet,
    desired: &BTreeSet<ObjectRef>,
    inventories: &[Inventory],
    opts: &PruneOptions,
    on_change: &(dyn Fn(&Change) + Send + Sync),
) -> PruneOutcome {
    let candidates = candidates(inventories, desired);
    let mut outcome = PruneOutcome::default();
    let guard_errors = guard(inventories, &candidates, opts);
    if !guard_errors.is_empty() {
        for (owner, refs) in candidates {
            outcome.kept.entry(owner).or_default().extend(refs);
        }
        outcome.errors = guard_errors;
        return outcome;
    }
    // Reverse apply order: workloads before the Namespaces and CRDs they live in.
    let mut work: Vec<(Owner, ObjectRef)> = candidates
        .into_iter()
        .flat_map(|(o, refs)| refs.into_iter().map(move |r| (o.clone(), r)))
        .collect();
    work.sort_by_key(|(_, r)| {
        std::cmp::Reverse((order::stage(&r.kind), order::kind_rank(&r.kind)))
    });
    let batches = [
        work.iter()
            .filter(|(_, r)| order::stage(&r.kind) != 0)
            .collect::<Vec<_>>(),
        work.iter()
            .filter(|(_, r)| order::stage(&r.kind) == 0)
            .collect::<Vec<_>>(),
    ];
    for batch in batches {
        let results: Vec<(Owner, ObjectRef, Result<Vec<Change>, ApplyError>)> =
            futures::stream::iter(
                batch
                    .into_iter()
                    .map(|(owner, r)| {
                        async move {
                            let res =
                                prune_one(client, catalog, owner.clone(), r.clone(), opts.clone())
                                    .await;
                            (owner.clone(), r.clone(), res)
                        }
                        .boxed()
                    })
                    .collect::<Vec<_>>(),
            )
            .buffer_unordered(opts.concurrency.max(1))
            .collect()
            .await;
        for (owner, r, res) in results {
            match res {
                Ok(changes) => {
                    for c in changes {
                        on_change(&c);
                        outcome.changes.push(c);
                    }
                }
                Err(e) => {
                    outcome.kept.entry(owner).or_default().insert(r);
                    outcome.errors.push(e);
                }
            }
        }
    }
    outcome
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Prune one object of `owner` (and first its own children, if it is an owner CR).
fn prune_one(
    client: &Client,
    catalog: &Catalog,
    owner: Owner,
    r: ObjectRef,
    opts: PruneOptions,
) -> BoxFuture<Result<Vec<Change>, ApplyError>> {
    let client = client.clone();
    let catalog = catalog.clone();
    Box::pin(async move {
        let skipped = |why: String| Change {
            object: r.clone(),
            owner: owner.clone(),
            action: Action::Skipped,
            reason: Some(why),
        };
        let resolved = catalog
            .resolve(&r.api_version, &r.kind)
            .or_else(|| catalog.resolve_kind(Some(split_api_version(&r.api_version).0), &r.kind));
        let Some((ar, namespaced)) = resolved.cloned() else {
            return Ok(vec![skipped(format!(
                "the cluster no longer serves kind {} ({})",
                r.kind, r.api_version
            ))]);
        };
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), &r.namespace, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        let live = match api.get_opt(&r.name).await {
            Ok(Some(l)) => l,
            // Already gone: nothing to do, and it leaves the inventory.
            Ok(None) => return Ok(Vec::new()),
            Err(e) => return Err(ApplyError::api("read", &r, e)),
        };
        let uid = live.metadata.uid.clone();
        let live_value = serde_json::to_value(&live).map_err(|source| ApplyError::Decode {
            object: r.to_string(),
            what: "the live object",
            source,
        })?;
        if let Err(why) = proof_of_ownership(&live_value, &owner) {
            return Ok(vec![skipped(format!("not pruned: {why}"))]);
        }
        if let Some(why) = protection(&r.kind, &live_value) {
            return Ok(vec![skipped(format!("not pruned: {why}"))]);
        }
        let mut changes = Vec::new();
        if OWNER_KINDS.contains(&r.kind.as_str()) {
            if let Some(children) = live_value.pointer("/status/inventory").cloned() {
                let children: Vec<ObjectRef> = serde_json::from_value(children).unwrap_or_default();
                let child_owner = Owner::Resource {
                    kind: r.kind.clone(),
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                };
                for child in children {
                    changes.extend(
                        prune_one(&client, &catalog, child_owner.clone(), child, opts.clone())
                            .await?,
                    );
                }
            }
        }
        if !opts.dry_run {
            let dp = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                preconditions: Some(Preconditions {
                    uid,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&r.name, &dp).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(changes),
                Err(e) => return Err(ApplyError::api("delete", &r, e)),
            }
        }
        changes.push(Change {
            object: r.clone(),
            owner: owner.clone(),
            action: Action::Deleted,
            reason: None,
        });
        Ok(changes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::inventory::InventorySource;
    use serde_json::json;

    fn r(kind: &str, ns: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn root() -> Owner {
        Owner::root("weft-system", "weft")
    }

    fn live(labels: Value, annotations: Value, managed: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels, "annotations": annotations, "managedFields": managed}})
    }

    #[test]
    fn protections() {
        let plain = live(json!({}), json!({}), json!([]));
        assert_eq!(protection("ConfigMap", &plain), None);
        assert_eq!(
            protection(
                "ConfigMap",
                &live(json!({}), json!({PRUNE_ANNOTATION: "disabled"}), json!([]))
            )
            .as_deref(),
            Some("weft.io/prune: disabled")
        );
        assert!(protection("Namespace", &plain).is_some());
        assert!(protection("CustomResourceDefinition", &plain).is_some());
        assert_eq!(
            protection(
                "Namespace",
                &live(json!({}), json!({PRUNE_ANNOTATION: "enabled"}), json!([]))
            ),
            None
        );
    }

    #[test]
    fn candidates_and_the_fraction_guard() {
        let inv = Inventory {
            owner: root(),
            entries: BTreeSet::from([
                r("ConfigMap", "a", "1"),
                r("ConfigMap", "a", "2"),
                r("ConfigMap", "a", "3"),
            ]),
            source: InventorySource::Stored,
        };
        let desired = BTreeSet::from([r("ConfigMap", "a", "1"), r("ConfigMap", "a", "2")]);
        let c = candidates(std::slice::from_ref(&inv), &desired);
        assert_eq!(c[&root()], vec![r("ConfigMap", "a", "3")]);
        assert!(guard(std::slice::from_ref(&inv), &c, &PruneOptions::default()).is_empty());

        let nothing = BTreeSet::new();
        let c = candidates(std::slice::from_ref(&inv), &nothing);
        let errs = guard(std::slice::from_ref(&inv), &c, &PruneOptions::default());
        assert_eq!(
            errs[0].to_string(),
            "refusing to prune 3 of 3 objects of root/weft-system/weft (100% > 50% allowed by --max-prune-fraction); nothing was pruned. Check the repository, or rerun with --force-prune"
        );
        let forced = PruneOptions {
            force: true,
            ..PruneOptions::default()
        };
        assert!(guard(std::slice::from_ref(&inv), &c, &forced).is_empty());
    }
}
