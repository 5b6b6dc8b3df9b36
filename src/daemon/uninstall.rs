//! `weft uninstall`: take Weft out of a cluster without leaving anything stuck.
//!
//! Weft's custom resources carry its finalizers (`weft.io/agents` on WeaveClouds,
//! `weft.io/armada-chart` on ArmadaCharts), which only a running daemon removes: once Weft is
//! gone, deleting such a resource, or its namespace, would hang for ever. Uninstalling:
//!
//! 1. refuses while a live daemon holds a Lease of Weft's namespace (it would put the finalizers
//!    back, and go on applying): stop it first;
//! 2. with `--prune`, prunes what Weft created, by the same ownership rules as a pass (an object
//!    is deleted only if its owner label was set by Weft's own apply): the children of every
//!    WeaveCloud and ArmadaChart (their `status.inventory`), then the sync root's inventory (the
//!    custom resources it applied included), and deletes Weft's own records (the root's inventory
//!    ConfigMaps, its Root, its Lease, the cached agent bundles);
//! 3. removes Weft's finalizers from every WeaveCloud and ArmadaChart, so nothing waits for it.
//!
//! Without `--prune` the objects stay and keep their labels: a later installation of the same
//! root takes them over.

use crate::api::owner::OwnerKind;
use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};

use crate::api::keys::BUNDLE_OF_LABEL;
use crate::api::root::Root;
use crate::api::ObjectRef;
use crate::apply::changeset::{Action, ChangeSet};
use crate::apply::inventory::{self, Inventory, InventorySource};
use crate::apply::plan::Catalog;
use crate::apply::prune::{prune, release_finalizers, PruneOptions};
use crate::apply::{is_not_found, ApplyError};
use crate::render::{DesiredSet, Owner};

/// What to uninstall.
#[derive(Clone, Debug)]
pub struct UninstallOptions {
    /// Weft's namespace (`--weft-namespace`).
    pub weft_namespace: String,
    /// The sync root (`--root-name`).
    pub root_name: String,
    /// Also delete what Weft created.
    pub prune: bool,
    /// Go on although a daemon seems to hold a Lease.
    pub ignore_running: bool,
    /// Deletes at the same time.
    pub concurrency: usize,
}

/// What was done.
#[derive(Debug, Default)]
pub struct UninstallReport {
    /// `Kind/namespace/name` of each resource whose Weft finalizer was removed.
    pub released: Vec<String>,
    /// What `--prune` deleted or left (and why).
    pub pruned: ChangeSet,
    /// Weft's own records deleted (`ConfigMap/ns/name`, `Lease/ns/name`).
    pub records: Vec<String>,
}

/// Why uninstalling stopped.
#[derive(Debug, thiserror::Error)]
pub enum UninstallError {
    #[error("a live daemon (`{holder}`) holds Lease {namespace}/{lease}: it would put its finalizers back. Stop it first (kubectl -n {namespace} scale deployment weft --replicas=0), or pass --ignore-running")]
    Running {
        namespace: String,
        lease: String,
        holder: String,
    },
    #[error("{action}: {}", crate::api::kube_error::Text(.source))]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error("pruning: {0}")]
    Prune(#[source] ApplyError),
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> UninstallError {
    let action = action.into();
    move |source| UninstallError::Kube { action, source }
}

/// Weft's custom resource kinds that carry its finalizers and an inventory of children.
const FINALIZED_KINDS: [(&str, &str, &str); 2] = [
    ("cloud.weave.works", "v1beta1", "WeaveCloud"),
    ("armada.airshipit.org", "v1alpha1", "ArmadaChart"),
];

/// Uninstall (see the module documentation).
pub async fn uninstall(
    client: &Client,
    opts: &UninstallOptions,
) -> Result<UninstallReport, UninstallError> {
    if !opts.ignore_running {
        refuse_if_running(client, &opts.weft_namespace).await?;
    }
    let roots = root_names(client, opts).await?;
    let owners: Vec<Owner> = roots
        .iter()
        .map(|r| Owner::root(&opts.weft_namespace, r))
        .collect();
    let mut report = UninstallReport::default();
    if opts.prune {
        let resources = finalized_resources(client, &owners).await?;
        prune_all(client, opts, &roots, &resources, &mut report).await?;
    }
    // What the prune deleted is gone; release whatever is left (and what is being deleted).
    for (ar, objects) in finalized_resources(client, &owners).await? {
        for object in &objects {
            if let Some(name) = release(client, &ar, object).await? {
                report.released.push(name);
            }
        }
    }
    Ok(report)
}

/// Whether this installation handles `object`: one of its roots (shard roots included) applied
/// it, or no root did (applied with kubectl). Another installation's resources are left to it.
fn ours(object: &DynamicObject, roots: &[Owner]) -> bool {
    match object.labels().get(crate::api::keys::OWNER_LABEL) {
        None => true,
        Some(id) => roots.iter().any(|r| *id == r.id().0),
    }
}

/// The root and, when it was sharded (`--shards N`), every shard root it had: found by their
/// shard Leases (`<leader Lease>-shard-<i>`) and their inventories.
async fn root_names(
    client: &Client,
    opts: &UninstallOptions,
) -> Result<Vec<String>, UninstallError> {
    let ns = &opts.weft_namespace;
    let base = &opts.root_name;
    let mut indexes: BTreeSet<u32> = BTreeSet::from([0]);
    let prefix = super::shards::shard_lease_name(&super::leader::lease_name(base), 0);
    let prefix = prefix.trim_end_matches('0');
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let list = leases
        .list(&ListParams::default())
        .await
        .map_err(kube_err(format!("listing the Leases of {ns}")))?;
    indexes.extend(list.items.iter().filter_map(|l| {
        l.name_any()
            .strip_prefix(prefix)
            .and_then(|i| i.parse::<u32>().ok())
    }));
    let mut names: BTreeSet<String> = indexes
        .into_iter()
        .map(|i| crate::render::shard::shard_root_name(base, i))
        .collect();
    // The shards whose Leases are gone keep their inventories.
    names.extend(
        super::tree::root_names(client, ns, base)
            .await
            .map_err(UninstallError::Prune)?,
    );
    Ok(names.into_iter().collect())
}

/// A Lease of Weft's namespace held and renewed while we watch it: a daemon is running (see
/// [`super::liveness`]: never judged by comparing its `renewTime` with our clock).
async fn refuse_if_running(client: &Client, namespace: &str) -> Result<(), UninstallError> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let live = super::liveness::live_holder(|| async {
        let list = leases
            .list(&ListParams::default())
            .await
            .map_err(kube_err(format!("listing the Leases of {namespace}")))?;
        Ok::<_, UninstallError>(
            list.items
                .into_iter()
                .filter(|l| l.name_any().starts_with("weft-leader"))
                .collect(),
        )
    })
    .await?;
    match live {
        None => Ok(()),
        Some(live) => Err(UninstallError::Running {
            namespace: namespace.to_string(),
            lease: live.lease,
            holder: live.holder,
        }),
    }
}

/// Every WeaveCloud and ArmadaChart of the cluster that this installation handles (see
/// [`ours`]), by kind (kinds whose CRD is not installed are left out).
async fn finalized_resources(
    client: &Client,
    roots: &[Owner],
) -> Result<Vec<(ApiResource, Vec<DynamicObject>)>, UninstallError> {
    let mut out = Vec::new();
    for (group, version, kind) in FINALIZED_KINDS {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let ar = match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((ar, _)) => ar,
            Err(e) if is_not_found(&e) => continue,
            Err(kube::Error::Discovery(_)) => continue,
            Err(e) => return Err(kube_err(format!("discovering {kind}"))(e)),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let items = api
            .list(&ListParams::default())
            .await
            .map_err(kube_err(format!("listing {kind}s")))?
            .items
            .into_iter()
            .filter(|o| ours(o, roots))
            .collect();
        out.push((ar, items));
    }
    Ok(out)
}

/// Remove Weft's finalizers from one resource; its `Kind/namespace/name` when it had any.
async fn release(
    client: &Client,
    ar: &ApiResource,
    object: &DynamicObject,
) -> Result<Option<String>, UninstallError> {
    let kind = object.types.as_ref().map_or("", |t| t.kind.as_str());
    let ns = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let what = format!("{kind}/{ns}/{name}");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
    let finalizers = object.finalizers();
    let version = object.resource_version();
    match release_finalizers(&api, &name, finalizers, version.as_deref()).await {
        Ok(released) => Ok(released.then_some(what)),
        Err(e) => Err(kube_err(format!("removing Weft's finalizer from {what}"))(
            e,
        )),
    }
}

/// `--prune`: the children of every finalized resource, then the root's inventory, then Weft's
/// records.
async fn prune_all(
    client: &Client,
    opts: &UninstallOptions,
    roots: &[String],
    resources: &[(ApiResource, Vec<DynamicObject>)],
    report: &mut UninstallReport,
) -> Result<(), UninstallError> {
    let prune_opts = PruneOptions {
        owner_kinds: OwnerKind::RENDERING.to_vec(),
        force: true,
        concurrency: opts.concurrency.max(1),
        ..PruneOptions::default()
    };
    let mut inventories = Vec::new();
    for object in resources.iter().flat_map(|(_, objects)| objects) {
        let kind = object.types.as_ref().map(|t| t.kind.as_str());
        let Some(kind) = kind.and_then(OwnerKind::from_kind) else {
            continue;
        };
        let owner = Owner::resource(
            kind,
            object.namespace().unwrap_or_default(),
            object.name_any(),
        );
        let entries =
            inventory::read_resource(client, &owner, object.data.pointer("/status/inventory"))
                .await
                .map_err(UninstallError::Prune)?
                .unwrap_or_default();
        inventories.push(stored(owner, entries));
    }
    prune_inventories(client, inventories, &prune_opts, report).await?;

    // Every root's inventory (each shard root has its own).
    let mut roots_inventories = Vec::new();
    for name in roots {
        let root = Owner::root(&opts.weft_namespace, name);
        let entries = inventory::read_root(client, &root, &opts.weft_namespace)
            .await
            .map_err(UninstallError::Prune)?
            .map(|(entries, _)| entries)
            .unwrap_or_default();
        roots_inventories.push(stored(root, entries));
    }
    prune_inventories(client, roots_inventories, &prune_opts, report).await?;

    // Weft's own records: each root's inventory (head and shards) and root record, its Leases
    // (the leader Lease and the shard Leases), the cached agent bundles. A custom resource's
    // inventory ConfigMaps are deleted with it (owner references).
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &opts.weft_namespace);
    let bundles = configmaps
        .list(&ListParams::default().labels(BUNDLE_OF_LABEL))
        .await
        .map_err(kube_err("listing the cached agent bundles"))?;
    let mut records = Vec::new();
    for name in roots {
        let root = Owner::root(&opts.weft_namespace, name);
        records.extend(
            inventory::root_configmaps(client, &root, &opts.weft_namespace)
                .await
                .map_err(UninstallError::Prune)?,
        );
        // The root record an older Weft kept (migrated into the Root, which `adopt` left).
        records.push(format!("weft-root-{name}"));
    }
    records.extend(bundles.items.iter().map(|c| c.name_any()));
    for name in records {
        delete_record(
            &configmaps,
            "ConfigMap",
            &opts.weft_namespace,
            &name,
            report,
        )
        .await?;
    }
    // The root's Root: what the root is now (no finalizer: it goes at once).
    let root_objects: Api<Root> = Api::namespaced(client.clone(), &opts.weft_namespace);
    delete_record(
        &root_objects,
        "Root",
        &opts.weft_namespace,
        &opts.root_name,
        report,
    )
    .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &opts.weft_namespace);
    let leader = super::leader::lease_name(&opts.root_name);
    delete_record(&leases, "Lease", &opts.weft_namespace, &leader, report).await?;
    let shard_leases = leases
        .list(&ListParams::default())
        .await
        .map_err(kube_err(format!(
            "listing the Leases of {}",
            opts.weft_namespace
        )))?;
    let prefix = super::shards::shard_lease_name(&leader, 0);
    let prefix = prefix.trim_end_matches('0');
    for lease in shard_leases.items {
        let name = lease.name_any();
        if name
            .strip_prefix(prefix)
            .is_some_and(|i| i.parse::<u32>().is_ok())
        {
            delete_record(&leases, "Lease", &opts.weft_namespace, &name, report).await?;
        }
    }
    Ok(())
}

fn stored(owner: Owner, entries: BTreeSet<ObjectRef>) -> Inventory {
    Inventory {
        owner,
        entries,
        source: InventorySource::Stored,
        force_prune: None,
    }
}

/// Prune every entry of `inventories` (nothing is desired any more).
async fn prune_inventories(
    client: &Client,
    inventories: Vec<Inventory>,
    opts: &PruneOptions,
    report: &mut UninstallReport,
) -> Result<(), UninstallError> {
    let inventories: Vec<Inventory> = inventories
        .into_iter()
        .filter(|i| !i.entries.is_empty())
        .collect();
    if inventories.is_empty() {
        return Ok(());
    }
    let entries: BTreeSet<ObjectRef> = inventories
        .iter()
        .flat_map(|i| i.entries.iter().cloned())
        .collect();
    let catalog: Catalog = Catalog::of_kinds(client, &entries)
        .await
        .map_err(kube_err("discovering the kinds to prune"))?;
    let owners = inventories.iter().map(|i| i.owner.clone()).collect();
    let outcome = prune(
        client,
        &catalog,
        &DesiredSet::for_owners(Vec::new(), owners),
        &BTreeSet::new(),
        &inventories,
        opts,
        &|c| tracing::info!(object = %c.object, action = c.action.done(), reason = c.reason.as_deref().unwrap_or(""), "uninstall"),
    )
    .await;
    report.pruned.extend(outcome.changes);
    match outcome.errors.into_iter().next() {
        Some(e) => Err(UninstallError::Prune(e)),
        None => Ok(()),
    }
}

/// Delete one of Weft's own records, if it is there.
async fn delete_record<K>(
    api: &Api<K>,
    kind: &str,
    namespace: &str,
    name: &str,
    report: &mut UninstallReport,
) -> Result<(), UninstallError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            report.records.push(format!("{kind}/{namespace}/{name}"));
            Ok(())
        }
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(kube_err(format!("deleting {kind} {namespace}/{name}"))(e)),
    }
}

/// The number of objects `--prune` deleted.
pub fn deleted(report: &UninstallReport) -> usize {
    report
        .pruned
        .entries
        .iter()
        .filter(|c| c.action == Action::Deleted)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_finalized_kinds_are_weft_s_resources() {
        let crds = crate::api::crds();
        for (group, version, kind) in FINALIZED_KINDS {
            assert!(
                crds.iter().any(|c| c.spec.group == group
                    && c.spec.names.kind == kind
                    && c.spec.versions.iter().any(|v| v.name == version)),
                "{group}/{version} {kind} is not one of Weft's CRDs"
            );
        }
        for f in [
            crate::api::keys::ARMADA_CHART_FINALIZER,
            crate::api::keys::AGENTS_FINALIZER,
        ] {
            assert!(f.starts_with(crate::api::keys::FINALIZER_PREFIX), "{f}");
        }
    }
}
