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
//! - a pruned CR's own children (the inventory in its status) are pruned first, by the same
//!   rules;
//! - deletes carry a UID precondition, so an object re-created since it was read is left alone;
//! - a Namespace or CRD is kept while this pass desires something in it (or of its kind), or while
//!   something not the owner's lives there (unless forced); the guard counts what its delete
//!   cascades to (see [`super::cascade`]);
//! - a namespace Weft created only because it was missing (`weft.io/create: if-missing`, an
//!   Armada release namespace) is pruned only when nothing but the owner's objects lives there.

use crate::api::keys::{CREATE_ANNOTATION, FINALIZER_PREFIX, OWNER_LABEL};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::future::Future;
use std::pin::Pin;

use futures::{FutureExt, StreamExt};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions,
    PropagationPolicy,
};
use kube::Client;
use serde_json::Value;

use super::cascade::{self, Cascade};
use super::catalog::{split_api_version, Catalog};
use super::changeset::{Action, Change, ChangeSet};
use super::inventory::{read_resource, Inventory};
use super::proof::proof_of_ownership;
use super::protection::protection;
use super::ref_key::{ref_key, RefKey};
use super::{is_not_found, ApplyError};
use crate::api::ObjectRef;
use crate::render::order;
use crate::render::ownership::CREATE_IF_MISSING;
use crate::render::Owner;
use crate::render::{DesiredSet, OwnerKind};

/// How to prune.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// Largest fraction of the pass's inventories one pass may delete (`--max-prune-fraction`).
    pub max_fraction: f64,
    /// Prune past the fraction guard (`--force-prune`, `POST /api/v1/sync?forcePrune=true`).
    pub force: bool,
    /// Report what would be pruned, delete nothing.
    pub dry_run: bool,
    /// Deletes at the same time.
    pub concurrency: usize,
    /// The revision this pass applies: an inventory annotated [`FORCE_PRUNE_ANNOTATION`] with it
    /// lets this pass past the guard.
    pub revision: Option<String>,
    /// An empty desired set may prune everything (`--allow-empty`, as Argo CD's `allowEmpty`).
    pub allow_empty: bool,
    /// What this pass deleted before its prune, per owner (objects recreated for an immutable
    /// field, objects replaced by another kind of the same name): they count against the guard
    /// with the prune's own deletions.
    pub deleted_earlier: BTreeMap<Owner, usize>,
    /// The caller's kinds whose objects own children (listed in their status, where the kind's
    /// [`inventory_home`](OwnerKind::inventory_home) says; held by a `weft.io/` finalizer):
    /// pruning one prunes its children first and then releases the finalizer its controller
    /// would have. None by default: the engine knows no kind.
    pub owner_kinds: Vec<OwnerKind>,
}

impl PruneOptions {
    /// The owner kind of objects of `kind`, when the caller named it in [`Self::owner_kinds`].
    fn owner_kind(&self, kind: &str) -> Option<OwnerKind> {
        OwnerKind::from_kind(kind).filter(|k| self.owner_kinds.contains(k))
    }
}

impl Default for PruneOptions {
    fn default() -> Self {
        PruneOptions {
            max_fraction: 0.5,
            force: false,
            dry_run: false,
            concurrency: crate::apply::DEFAULT_CONCURRENCY,
            revision: None,
            allow_empty: false,
            deleted_earlier: BTreeMap::new(),
            owner_kinds: Vec::new(),
        }
    }
}

/// Deletes that the fraction guard never blocks: a small change (a chart of two objects that
/// moves namespace, say) is not a mass deletion, whatever fraction of a small owner it is.
pub const GUARD_FLOOR: usize = 10;

/// The result of a prune.
#[derive(Debug, Default)]
pub struct PruneOutcome {
    pub changes: ChangeSet,
    /// Inventory entries to keep although they are not desired (not pruned yet: the guard held
    /// them back, their kind is not served right now, or the delete failed), per owner.
    pub kept: BTreeMap<Owner, BTreeSet<ObjectRef>>,
    pub errors: Vec<ApplyError>,
}

/// Every desired object of a pass, borrowed from the references the inventories are written
/// from: the prune compares against them without a copy (a copy of the references of 100,000
/// objects is ≈ 20 MB, at the pass's memory peak).
pub type Desired<'a> = BTreeSet<&'a ObjectRef>;

/// The prune candidates of each inventory: its entries that nobody desires any more.
pub fn candidates(inventories: &[Inventory], desired: &Desired) -> BTreeMap<Owner, Vec<ObjectRef>> {
    inventories
        .iter()
        .map(|inv| {
            let c: Vec<ObjectRef> = inv
                .entries
                .iter()
                .filter(|r| !desired.contains(r))
                .cloned()
                .collect();
            (inv.owner.clone(), c)
        })
        .collect()
}

/// The guard over a whole pass: `deletions` are the objects that exist, are provably the pass's
/// owners' and would be deleted (with what deleting them cascades to), per owner; `desired` is
/// how many objects the whole pass desires. Refused, unless forced — by the options, or by every
/// owner that would lose objects carrying [`FORCE_PRUNE_ANNOTATION`] with this pass's revision:
/// - any deletion when nothing at all is desired, unless `allow_empty`;
/// - more than `max_fraction` of every inventory of the pass together, except up to
///   [`GUARD_FLOOR`] deletions — which, when a sync root loses objects, must also be no more
///   than half of the inventories (the floor never lets a small root be emptied).
pub fn guard(
    inventories: &[Inventory],
    deletions: &BTreeMap<Owner, usize>,
    desired: usize,
    opts: &PruneOptions,
) -> Option<ApplyError> {
    let scopes: Vec<GuardScope> = inventories.iter().map(GuardScope::of).collect();
    guard_scoped(&scopes, deletions, desired, opts)
}

/// What the guard needs of one inventory: its owner, its size and its force-prune annotation
/// (kept by a caller that judges deletions before the prune, without the entries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardScope {
    pub owner: Owner,
    pub entries: usize,
    pub force_prune: Option<String>,
}

impl GuardScope {
    /// The scope of `inventory`.
    pub fn of(inventory: &Inventory) -> GuardScope {
        GuardScope {
            owner: inventory.owner.clone(),
            entries: inventory.entries.len(),
            force_prune: inventory.force_prune.clone(),
        }
    }
}

/// [`guard`] over inventories known by their [`GuardScope`].
pub fn guard_scoped(
    inventories: &[GuardScope],
    deletions: &BTreeMap<Owner, usize>,
    desired: usize,
    opts: &PruneOptions,
) -> Option<ApplyError> {
    let count: usize = deletions.values().sum();
    let total: usize = inventories.iter().map(|i| i.entries).sum();
    if opts.force || count == 0 {
        return None;
    }
    let owners = || {
        deletions
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(o, n)| format!("{n} of {}", o.reference()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let allowed_by_annotation = opts.revision.as_deref().is_some_and(|rev| {
        deletions.iter().filter(|(_, n)| **n > 0).all(|(owner, _)| {
            inventories
                .iter()
                .find(|i| &i.owner == owner)
                .and_then(|i| i.force_prune.as_deref())
                .is_some_and(|allowed| revision_allows(allowed, rev))
        })
    });
    // Only a sync root's render can be empty by mistake (a custom resource whose agents are all
    // disabled desires nothing on purpose).
    let root_loses = deletions.iter().any(|(o, n)| *n > 0 && o.is_root());
    if desired == 0 && root_loses {
        if opts.allow_empty || allowed_by_annotation {
            return None;
        }
        return Some(ApplyError::EmptyDesiredSet {
            count,
            owners: owners(),
            revision: opts.revision.clone(),
        });
    }
    if total == 0 {
        return None;
    }
    let fraction = count as f64 / total as f64;
    // Written so that a NaN limit (refused by the flag parser anyway) keeps the guard on.
    if fraction <= opts.max_fraction {
        return None;
    }
    if count <= GUARD_FLOOR && (count * 2 <= total || !root_loses) {
        return None;
    }
    if allowed_by_annotation {
        return None;
    }
    Some(ApplyError::PruneGuard {
        count,
        total,
        owners: owners(),
        percent: fraction * 100.0,
        limit: opts.max_fraction * 100.0,
        revision: opts.revision.clone(),
    })
}

/// Whether the annotation value `allowed` names `revision`: the whole commit SHA, or an
/// abbreviation of at least 7 characters as `git log --oneline` prints it.
fn revision_allows(allowed: &str, revision: &str) -> bool {
    allowed == revision || (allowed.len() >= 7 && revision.starts_with(allowed))
}

/// What [`survey`] found out about one candidate.
enum Survey {
    /// Provably ours and unprotected: delete it (with this UID as precondition), after its own
    /// children if it is an owner custom resource.
    Delete {
        api: Api<DynamicObject>,
        uid: Option<String>,
        live: Value,
        /// The owner's objects its delete takes with it (a Namespace's, a CRD's).
        cascade: Vec<ObjectRef>,
    },
    /// It leaves the inventory (gone, not ours, protected), with this change to report.
    Drop(Option<Change>),
    /// It stays in the inventory (its kind is not served right now), with this change to report.
    Keep(Change),
}

/// Prune the objects of `inventories` that `desired` (every object of this complete render, with
/// its namespace resolved — see [`super::plan::desired_refs`]) no longer holds.
pub async fn prune(
    client: &Client,
    catalog: &Catalog,
    _complete_render: &DesiredSet,
    desired: &Desired<'_>,
    inventories: &[Inventory],
    opts: &PruneOptions,
    on_change: &(dyn Fn(&Change) + Send + Sync),
) -> PruneOutcome {
    let candidates: Vec<(Owner, ObjectRef)> = candidates(inventories, desired)
        .into_iter()
        .flat_map(|(o, refs)| refs.into_iter().map(move |r| (o.clone(), r)))
        .collect();
    let mut outcome = PruneOutcome::default();
    let report = |outcome: &mut PruneOutcome, c: Change| {
        on_change(&c);
        outcome.changes.push(c);
    };

    // First find out which candidates would really be deleted: only those count for the guard.
    let surveyed: Vec<(Owner, ObjectRef, Result<Survey, ApplyError>)> =
        futures::stream::iter(candidates.into_iter().map(|(owner, r)| async move {
            let s = survey(client, catalog, &owner, &r, desired, opts.force).await;
            (owner, r, s)
        }))
        .buffer_unordered(opts.concurrency.max(1))
        .collect()
        .await;
    let mut work: Vec<(Owner, ObjectRef, Deletion)> = Vec::new();
    // What each owner would lose, cascades included (each object once).
    let mut lost: BTreeMap<Owner, HashSet<RefKey>> = BTreeMap::new();
    for (owner, r, s) in surveyed {
        match s {
            Ok(Survey::Delete {
                api,
                uid,
                live,
                cascade,
            }) => {
                let lost = lost.entry(owner.clone()).or_default();
                lost.insert(ref_key(&r));
                lost.extend(cascade.iter().map(ref_key));
                work.push((owner, r, (api, uid, live)));
            }
            Ok(Survey::Drop(change)) => change.into_iter().for_each(|c| report(&mut outcome, c)),
            Ok(Survey::Keep(change)) => {
                outcome.kept.entry(owner).or_default().insert(r);
                report(&mut outcome, change);
            }
            Err(e) => {
                outcome.kept.entry(owner).or_default().insert(r);
                outcome.errors.push(e);
            }
        }
    }
    let mut deletions: BTreeMap<Owner, usize> =
        lost.into_iter().map(|(o, refs)| (o, refs.len())).collect();
    // What the pass deleted already counts too, when it prunes more.
    if !work.is_empty() {
        for (owner, n) in &opts.deleted_earlier {
            *deletions.entry(owner.clone()).or_default() += n;
        }
    }
    if let Some(refused) = guard(inventories, &deletions, desired.len(), opts) {
        for (owner, r, ..) in work {
            outcome.kept.entry(owner).or_default().insert(r);
        }
        outcome.errors.push(refused);
        return outcome;
    }

    // Reverse apply order: workloads before the Namespaces and CRDs they live in.
    work.sort_by_key(|(_, r, ..)| {
        std::cmp::Reverse((order::stage(&r.kind), order::kind_rank(&r.kind)))
    });
    let (later, stage0): (Vec<_>, Vec<_>) = work
        .into_iter()
        .partition(|(_, r, ..)| order::stage(&r.kind) != 0);
    for batch in [later, stage0] {
        let results: Vec<(Owner, ObjectRef, Result<Vec<Change>, ApplyError>)> =
            futures::stream::iter(batch.into_iter().map(|(owner, r, deletion)| {
                async move {
                    let res = delete_surveyed(
                        client.clone(),
                        catalog.clone(),
                        owner.clone(),
                        r.clone(),
                        deletion,
                        opts.clone(),
                        desired,
                    )
                    .await;
                    (owner, r, res)
                }
                .boxed()
            }))
            .buffer_unordered(opts.concurrency.max(1))
            .collect()
            .await;
        for (owner, r, res) in results {
            match res {
                Ok(changes) => changes.into_iter().for_each(|c| report(&mut outcome, c)),
                Err(e) => {
                    outcome.kept.entry(owner).or_default().insert(r);
                    outcome.errors.push(e);
                }
            }
        }
    }
    outcome
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What deleting a surveyed object takes: its API, its UID (the precondition) and the object read.
type Deletion = (Api<DynamicObject>, Option<String>, Value);

/// The API of `r`'s kind, if the cluster serves it.
fn api_for(client: &Client, catalog: &Catalog, r: &ObjectRef) -> Option<Api<DynamicObject>> {
    let (ar, namespaced) = catalog
        .resolve(&r.api_version, &r.kind)
        .or_else(|| catalog.resolve_kind(Some(split_api_version(&r.api_version).0), &r.kind))
        .cloned()?;
    Some(if namespaced {
        Api::namespaced_with(client.clone(), &r.namespace, &*ar)
    } else {
        Api::all_with(client.clone(), &*ar)
    })
}

/// Read one candidate and decide what pruning it means.
async fn survey(
    client: &Client,
    catalog: &Catalog,
    owner: &Owner,
    r: &ObjectRef,
    desired: &Desired<'_>,
    force: bool,
) -> Result<Survey, ApplyError> {
    let skipped = |why: String| Change {
        object: r.clone(),
        owner: owner.clone(),
        action: Action::Skipped,
        reason: Some(why),
    };
    // An aggregated API that is down for a minute must not make Weft forget what it owns.
    let unserved = || {
        Survey::Keep(skipped(format!(
            "not pruned yet: the cluster does not serve kind {} ({}) right now; kept in the inventory",
            r.kind, r.api_version
        )))
    };
    let Some(api) = api_for(client, catalog, r) else {
        return Ok(unserved());
    };
    let live = match api.get_opt(&r.name).await {
        Ok(Some(l)) => l,
        // Already gone: nothing to do, and it leaves the inventory.
        Ok(None) => return Ok(Survey::Drop(None)),
        // A 404 that is not the object's (reason `NotFound`) is the path's: the kind stopped
        // being served after discovery was read (a CRD version switched off a moment ago).
        Err(e) if is_not_found(&e) => return Ok(unserved()),
        Err(e) => return Err(ApplyError::api("read", r, e)),
    };
    let uid = live.metadata.uid.clone();
    let live = serde_json::to_value(&live)
        .map_err(|source| ApplyError::decode(r, "the live object", source))?;
    if let Err(why) = proof_of_ownership(&live, owner) {
        return Ok(Survey::Drop(Some(skipped(format!("not pruned: {why}")))));
    }
    if let Some(why) = protection(&r.kind, &live) {
        return Ok(Survey::Drop(Some(skipped(format!("not pruned: {why}")))));
    }
    if created_if_missing(&live) && r.kind == "Namespace" && r.api_version == "v1" {
        if let Some(resident) = resident_of_namespace(client, catalog, &r.name, owner).await {
            return Ok(Survey::Keep(skipped(format!(
                "not pruned: Weft created this namespace, but {resident} lives there too"
            ))));
        }
    }
    let cascade = match cascade::judge(client, catalog, owner, r, &live, desired, force).await? {
        Some(Cascade::Keep(why)) => return Ok(Survey::Keep(skipped(why))),
        Some(Cascade::Deletes(objects)) => objects,
        None => Vec::new(),
    };
    Ok(Survey::Delete {
        api,
        uid,
        live,
        cascade,
    })
}

/// Is `live` an object Weft creates only when missing (a release namespace)?
fn created_if_missing(live: &Value) -> bool {
    live.pointer("/metadata/annotations")
        .and_then(|a| a.get(CREATE_ANNOTATION))
        .and_then(Value::as_str)
        == Some(CREATE_IF_MISSING)
}

/// An object in namespace `ns` that is not `owner`'s (nor made by a controller for an owner in
/// that namespace, nor what the cluster puts in every namespace, nor already being deleted), described; or why the
/// namespace's content cannot be told. `None`: only `owner`'s objects live there, and the
/// namespace may go with them.
async fn resident_of_namespace(
    client: &Client,
    catalog: &Catalog,
    ns: &str,
    owner: &Owner,
) -> Option<String> {
    let not_owner = format!("{OWNER_LABEL}!={}", owner.id().0);
    for ar in catalog.namespaced() {
        if matches!(ar.kind.as_str(), "Event") {
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &*ar);
        let lp = ListParams::default().labels(&not_owner).limit(50);
        let list = match api.list(&lp).await {
            Ok(l) => l,
            // Not listable (e.g. create-only review kinds): nothing of it lives anywhere.
            Err(kube::Error::Api(e)) if matches!(e.code, 404 | 405) => continue,
            Err(e) => {
                return Some(format!(
                    "its {} cannot be listed ({}), so it may hold something",
                    ar.plural,
                    super::describe(&e).0
                ))
            }
        };
        for item in list.items {
            let m = &item.metadata;
            let name = m.name.as_deref().unwrap_or("");
            // Made by a controller for an owner that goes with the namespace (a namespaced one,
            // so in this namespace); an owner that survives (a ClusterRole) protects nothing.
            let made_for_one = m.owner_references.as_ref().is_some_and(|refs| {
                refs.iter().any(|o| {
                    catalog
                        .resolve(&o.api_version, &o.kind)
                        .is_some_and(|(_, namespaced)| *namespaced)
                })
            });
            let built_in = matches!(
                (ar.kind.as_str(), name),
                ("ServiceAccount", "default") | ("ConfigMap", "kube-root-ca.crt")
            );
            if m.deletion_timestamp.is_none() && !made_for_one && !built_in {
                return Some(format!("{}/{name}", ar.kind));
            }
        }
    }
    None
}

/// Prune one object of `owner` (a child of a pruned owner custom resource): survey it, then
/// delete it if that is what the survey says.
fn prune_child<'a>(
    client: Client,
    catalog: Catalog,
    owner: Owner,
    r: ObjectRef,
    opts: PruneOptions,
    desired: &'a Desired<'a>,
) -> BoxFuture<'a, Result<Vec<Change>, ApplyError>> {
    Box::pin(async move {
        match survey(&client, &catalog, &owner, &r, desired, opts.force).await? {
            Survey::Delete { api, uid, live, .. } => {
                delete_surveyed(client, catalog, owner, r, (api, uid, live), opts, desired).await
            }
            Survey::Drop(change) => Ok(change.into_iter().collect()),
            Survey::Keep(change) => Ok(vec![change]),
        }
    })
}

/// Remove Weft's finalizers (those named with [`FINALIZER_PREFIX`]) from the object `name` of
/// `api` whose `finalizers` and `resource_version` were just read, guarded by that version;
/// others' finalizers stay. `Ok(true)` when it wrote; `Ok(false)` when there was nothing of
/// Weft's, or the object is gone.
pub async fn release_finalizers(
    api: &Api<DynamicObject>,
    name: &str,
    finalizers: &[String],
    resource_version: Option<&str>,
) -> Result<bool, kube::Error> {
    if !finalizers.iter().any(|f| f.starts_with(FINALIZER_PREFIX)) {
        return Ok(false);
    }
    let kept: Vec<&String> = finalizers
        .iter()
        .filter(|f| !f.starts_with(FINALIZER_PREFIX))
        .collect();
    let patch = serde_json::json!({"metadata": {
        "finalizers": kept,
        "resourceVersion": resource_version,
    }});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Delete a surveyed object (its own children first, if it is an owner custom resource), with its
/// UID as precondition: an object re-created since it was read is left alone.
fn delete_surveyed<'a>(
    client: Client,
    catalog: Catalog,
    owner: Owner,
    r: ObjectRef,
    (api, uid, live): Deletion,
    opts: PruneOptions,
    desired: &'a Desired<'a>,
) -> BoxFuture<'a, Result<Vec<Change>, ApplyError>> {
    Box::pin(async move {
        let mut changes = Vec::new();
        if let Some(kind) = opts.owner_kind(&r.kind) {
            let child_owner = Owner::resource(kind, &r.namespace, &r.name);
            let status = kind.inventory_home().find(&live);
            if let Some(children) = read_resource(&client, &child_owner, status).await? {
                for child in children {
                    let pruned = prune_child(
                        client.clone(),
                        catalog.clone(),
                        child_owner.clone(),
                        child,
                        opts.clone(),
                        desired,
                    );
                    changes.extend(pruned.await?);
                }
            }
            // Its children are pruned: that was the job of Weft's finalizer on it, which only a
            // running daemon would remove (`weft sync` alone would leave it Terminating).
            if !opts.dry_run {
                let finalizers: Vec<String> = live
                    .pointer("/metadata/finalizers")
                    .cloned()
                    .and_then(|f| serde_json::from_value(f).ok())
                    .unwrap_or_default();
                let version = live
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str);
                release_finalizers(&api, &r.name, &finalizers, version)
                    .await
                    .map_err(|e| ApplyError::api("release the finalizer of", &r, e))?;
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
#[path = "prune_tests.rs"]
mod tests;
