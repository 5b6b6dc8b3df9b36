//! The catalog: which API resources the cluster serves (discovery), by group, version and kind,
//! and whether each is namespaced. Every verb resolves objects through it; it lives apart from
//! the verbs so that none of them imports another for it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use kube::api::ApiResource;
use kube::discovery::{Discovery, Scope};
use kube::Client;

use super::ApplyError;
use crate::api::ObjectRef;

/// The API resources the cluster serves, from discovery.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    /// (group, version, kind) → resource and whether it is namespaced.
    /// Shared with every planned object of the kind (one copy per kind, not per object).
    by_gvk: HashMap<(String, String, String), (Arc<ApiResource>, bool)>,
}

/// Split `group/version` (or `v1`) into group and version.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

impl Catalog {
    /// Run discovery (aggregated discovery when the server has it, per group otherwise).
    pub async fn discover(client: &Client) -> Result<Catalog, ApplyError> {
        let discovery = match Discovery::new(client.clone()).run_aggregated().await {
            Ok(d) => d,
            Err(_) => Discovery::new(client.clone())
                .run()
                .await
                .map_err(ApplyError::Discovery)?,
        };
        let mut by_gvk = HashMap::new();
        for group in discovery.groups() {
            for version in group.versions() {
                for (ar, caps) in group.versioned_resources(version) {
                    let namespaced = caps.scope == Scope::Namespaced;
                    by_gvk.insert(
                        (ar.group.clone(), ar.version.clone(), ar.kind.clone()),
                        (Arc::new(ar), namespaced),
                    );
                }
            }
        }
        Ok(Catalog { by_gvk })
    }

    /// The API resources of the kinds `refs` name: one discovery call per kind's group version,
    /// not a discovery of the whole cluster (an ArmadaChart's prune, the early apply of a push,
    /// `weft uninstall`). A kind the cluster does not serve is left out: its objects cannot
    /// exist, and the caller says so when it meets one.
    pub async fn of_kinds(
        client: &Client,
        refs: &BTreeSet<ObjectRef>,
    ) -> Result<Catalog, kube::Error> {
        let kinds: BTreeSet<(&str, &str)> = refs
            .iter()
            .map(|r| (r.api_version.as_str(), r.kind.as_str()))
            .collect();
        let mut resources = Vec::new();
        for (api_version, kind) in kinds {
            let (group, version) = split_api_version(api_version);
            let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok((ar, caps)) => resources.push((ar, caps.scope == Scope::Namespaced)),
                Err(e) if super::is_not_found(&e) => {}
                Err(kube::Error::Discovery(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Catalog::from_entries(resources))
    }

    /// A catalog from explicit entries (for tests of the pure parts).
    pub fn from_entries(entries: impl IntoIterator<Item = (ApiResource, bool)>) -> Catalog {
        Catalog {
            by_gvk: entries
                .into_iter()
                .map(|(ar, ns)| {
                    (
                        (ar.group.clone(), ar.version.clone(), ar.kind.clone()),
                        (Arc::new(ar), ns),
                    )
                })
                .collect(),
        }
    }

    /// The resource serving `apiVersion` + `kind`.
    pub fn resolve(&self, api_version: &str, kind: &str) -> Option<&(Arc<ApiResource>, bool)> {
        let (g, v) = split_api_version(api_version);
        self.by_gvk
            .get(&(g.to_string(), v.to_string(), kind.to_string()))
    }

    /// Every namespaced resource the cluster serves, one version per group and kind.
    pub fn namespaced(&self) -> Vec<Arc<ApiResource>> {
        let mut by_kind: BTreeMap<(&str, &str), &Arc<ApiResource>> = BTreeMap::new();
        for ((g, _, k), (ar, namespaced)) in &self.by_gvk {
            if *namespaced {
                by_kind.entry((g.as_str(), k.as_str())).or_insert(ar);
            }
        }
        by_kind.into_values().cloned().collect()
    }

    /// The resource of a kind in any group and version (inventory entries of a CRD whose version
    /// changed, owner CRs known only by kind). Prefers the given group.
    pub fn resolve_kind(
        &self,
        group: Option<&str>,
        kind: &str,
    ) -> Option<&(Arc<ApiResource>, bool)> {
        let mut candidates: Vec<_> = self
            .by_gvk
            .iter()
            .filter(|((g, _, k), _)| k == kind && group.is_none_or(|want| want == g))
            .collect();
        candidates.sort_by(|a, b| a.0.cmp(b.0));
        candidates.first().map(|(_, v)| *v)
    }
}
