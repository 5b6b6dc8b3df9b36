//! Ownership: who may be trusted to have applied an object.
//!
//! - [`proof_of_ownership`] (in [`super::proof`]): an object is Weft's to prune (or to put in a rebuilt inventory) only
//!   if its `weft.io/owner` label names the owner *and* that label was set by a server-side apply
//!   of manager `weft` (managedFields): a label copied onto a foreign object proves nothing. A
//!   field manager's name is not an identity, though — anyone may apply with
//!   `--field-manager=weft` — so this is never a reason to *act for* an object, only a check
//!   before removing one that an inventory already lists.
//! - [`AppliedByRoots`]: whether the sync root applied an object, decided from what the API
//!   server vouches for: the root's own inventory of what it applied, stored in Weft's namespace,
//!   which tenants cannot write (issue 48 item 2). This is what trusts a WeaveCloud or an
//!   ArmadaChart to be the operator's.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::{Client, ResourceExt};

use super::inventory::{self, configmap_name};
// Re-exported: the proof is part of what ownership means to the layers above.
pub use super::proof::{proof_of_ownership, NotOwned};
use super::ref_key::{ref_key, RefKey};
use super::ApplyError;
use crate::render::Owner;

/// One root's stored inventory, as last read: the head ConfigMap's `resourceVersion` and the
/// entries of the kinds asked about.
struct Listed {
    version: String,
    entries: Arc<BTreeSet<RefKey>>,
}

/// Whether an object is listed in the stored inventory of one of the sync roots: what the root
/// applied, kept in Weft's namespace (docs/security.md, "Who can write what Weft acts on"). Only
/// the entries of `kinds` are kept in memory; each question costs one read of each root's head
/// ConfigMap, and the whole inventory is read again only when that changed.
pub struct AppliedByRoots {
    /// `(API group, kind)` of the objects asked about.
    kinds: Vec<(String, String)>,
    cache: Mutex<HashMap<Owner, Listed>>,
}

/// The entries of the roots' inventories, as read by [`AppliedByRoots::listing`].
#[derive(Clone, Debug, Default)]
pub struct RootListing {
    entries: Vec<(Owner, Arc<BTreeSet<RefKey>>)>,
}

impl RootListing {
    /// The root that lists `group/kind` `namespace/name`, if one does.
    pub fn applied_by(
        &self,
        group: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<&Owner> {
        let key = (
            group.to_string(),
            kind.to_string(),
            namespace.to_string(),
            name.to_string(),
        );
        self.entries
            .iter()
            .find(|(_, listed)| listed.contains(&key))
            .map(|(owner, _)| owner)
    }

    /// A listing of `entries` per root (tests).
    pub fn of(entries: Vec<(Owner, BTreeSet<RefKey>)>) -> RootListing {
        RootListing {
            entries: entries.into_iter().map(|(o, e)| (o, Arc::new(e))).collect(),
        }
    }
}

impl AppliedByRoots {
    /// Answers about objects of `kinds`, `(API group, kind)`.
    pub fn of_kinds(kinds: &[(&str, &str)]) -> AppliedByRoots {
        AppliedByRoots {
            kinds: kinds
                .iter()
                .map(|(g, k)| (g.to_string(), k.to_string()))
                .collect(),
            cache: Mutex::default(),
        }
    }

    /// What `roots` (sync roots, whose inventories are in `weft_namespace`) list now. A root
    /// without a stored inventory lists nothing; an inventory that cannot be read is an error
    /// (nothing is trusted on a guess).
    pub async fn listing(
        &self,
        client: &Client,
        roots: &[Owner],
        weft_namespace: &str,
    ) -> Result<RootListing, ApplyError> {
        let heads: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
        let mut out = RootListing::default();
        for root in roots {
            let head =
                heads
                    .get_opt(&configmap_name(root))
                    .await
                    .map_err(|e| ApplyError::Inventory {
                        owner: root.reference(),
                        problem: super::InventoryProblem::Read(e),
                    })?;
            let Some(head) = head else {
                self.lock().remove(root);
                continue;
            };
            let version = head.resource_version().unwrap_or_default();
            let cached = self
                .lock()
                .get(root)
                .filter(|l| l.version == version)
                .map(|l| Arc::clone(&l.entries));
            let entries = match cached {
                Some(e) => e,
                None => {
                    let stored = inventory::read_root(client, root, weft_namespace)
                        .await?
                        .map(|(entries, _)| entries)
                        .unwrap_or_default();
                    let kept: BTreeSet<RefKey> = stored
                        .iter()
                        .map(ref_key)
                        .filter(|(g, k, _, _)| self.kinds.iter().any(|(kg, kk)| kg == g && kk == k))
                        .collect();
                    let kept = Arc::new(kept);
                    self.lock().insert(
                        root.clone(),
                        Listed {
                            version,
                            entries: Arc::clone(&kept),
                        },
                    );
                    kept
                }
            };
            out.entries.push((root.clone(), entries));
        }
        Ok(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Owner, Listed>> {
        // A poisoned lock only means a panic elsewhere mid-update: the cache is still usable.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}
