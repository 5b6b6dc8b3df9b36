//! The catalog: which API resources the cluster serves (discovery), by group, version and kind,
//! and whether each is namespaced. Every verb resolves objects through it; it lives apart from
//! the verbs so that none of them imports another for it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use kube::api::ApiResource;
use kube::core::discovery::v2::{APIGroupDiscoveryList, ACCEPT_AGGREGATED_DISCOVERY_V2};
use kube::discovery::{Discovery, Scope};
use kube::Client;

use super::ApplyError;
use crate::api::ObjectRef;

/// The API resources the cluster serves, from discovery.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    /// kind → (group, version, resource and whether it is namespaced) of every resource of that
    /// kind: a lookup by `&str` copies nothing (a lookup by a `(group, version, kind)` key made
    /// three `String`s, and the plan looks up every object of a pass). Each resource is shared
    /// with every planned object of the kind (one copy per kind, not per object).
    by_kind: HashMap<String, Vec<Served>>,
}

/// A resource the cluster serves: its group, its version, and the resource (and whether it is
/// namespaced).
type Served = (String, String, (Arc<ApiResource>, bool));

/// Split `group/version` (or `v1`) into group and version.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// The two aggregated discovery documents (`/api`, `/apis`) as last read, each with its ETag.
/// Every pass discovers the cluster; the API server answers an unchanged document with
/// `304 Not Modified` when asked with its ETag, and the entries parsed the last time are used
/// again. The ETag is a hash of the document, so a CRD installed since (by this root or another)
/// changes it and is seen, and two clusters with the same document share its parse safely.
static LAST_DOCUMENTS: Mutex<[Option<Document>; 2]> = Mutex::new([None, None]);

/// One aggregated discovery document, parsed: its ETag and its resources.
#[derive(Clone)]
struct Document {
    etag: String,
    resources: Arc<Vec<(Arc<ApiResource>, bool)>>,
}

/// The resources of an aggregated discovery document (`apidiscovery.k8s.io/v2`
/// `APIGroupDiscoveryList`): every version of every group, as kube's aggregated discovery reads
/// them (the group from the item's name, the kind from each resource's `responseKind`).
fn resources_of(list: APIGroupDiscoveryList) -> Vec<(Arc<ApiResource>, bool)> {
    let mut out = Vec::new();
    for group in list.items {
        let group_name = group.metadata.and_then(|m| m.name).unwrap_or_default();
        for version in group.versions {
            let version_name = version.version.unwrap_or_default();
            let api_version = if group_name.is_empty() {
                version_name.clone()
            } else {
                format!("{group_name}/{version_name}")
            };
            for r in version.resources {
                let kind = r.response_kind.and_then(|k| k.kind).unwrap_or_default();
                let namespaced = r.scope.as_deref() == Some("Namespaced");
                let ar = ApiResource {
                    group: group_name.clone(),
                    version: version_name.clone(),
                    api_version: api_version.clone(),
                    kind,
                    plural: r.resource.unwrap_or_default(),
                };
                out.push((Arc::new(ar), namespaced));
            }
        }
    }
    out.shrink_to_fit();
    out
}

/// Read one aggregated discovery document at `path`, conditionally on the ETag of the last one:
/// the document and whether it is the last one again (`304 Not Modified`). `Ok(None)` when the
/// server does not serve aggregated discovery there.
async fn read_document(
    client: &Client,
    path: &str,
    last: Option<Document>,
) -> Result<Option<(Document, bool)>, kube::Error> {
    let mut req =
        http::Request::get(path).header(http::header::ACCEPT, ACCEPT_AGGREGATED_DISCOVERY_V2);
    if let Some(last) = last.as_ref().filter(|l| !l.etag.is_empty()) {
        req = req.header(http::header::IF_NONE_MATCH, &last.etag);
    }
    let req = req
        .body(kube::client::Body::from(Vec::new()))
        .map_err(kube::Error::HttpError)?;
    let resp = client.send(req).await?;
    let status = resp.status();
    if status == http::StatusCode::NOT_MODIFIED {
        if let Some(last) = last {
            return Ok(Some((last, true)));
        }
    }
    let aggregated = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("g=apidiscovery.k8s.io"));
    if !status.is_success() || !aggregated {
        return Ok(None);
    }
    let etag = resp
        .headers()
        .get(http::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = resp.into_body().collect_bytes().await?;
    let list: APIGroupDiscoveryList =
        serde_json::from_slice(&body).map_err(kube::Error::SerdeError)?;
    let document = Document {
        etag,
        resources: Arc::new(resources_of(list)),
    };
    Ok(Some((document, false)))
}

impl Catalog {
    /// Run discovery: the two aggregated discovery documents, each read again only when the API
    /// server says it changed (see [`LAST_DOCUMENTS`]); discovery per group when the server has
    /// no aggregated discovery.
    pub async fn discover(client: &Client) -> Result<Catalog, ApplyError> {
        Ok(Catalog::discover_reusing(client).await?.0)
    }

    /// [`Catalog::discover`], and how many of the two aggregated documents the API server
    /// answered as unchanged since the last discovery of this process (0 without aggregated
    /// discovery).
    pub async fn discover_reusing(client: &Client) -> Result<(Catalog, usize), ApplyError> {
        let last = LAST_DOCUMENTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let [core, groups] = last;
        let read = futures::future::try_join(
            read_document(client, "/api", core),
            read_document(client, "/apis", groups),
        )
        .await;
        if let Ok((Some((core, core_same)), Some((groups, groups_same)))) = read {
            let reused = usize::from(core_same) + usize::from(groups_same);
            let catalog = Catalog::of_shared(
                core.resources
                    .iter()
                    .chain(groups.resources.iter())
                    .cloned(),
            );
            *LAST_DOCUMENTS.lock().unwrap_or_else(|e| e.into_inner()) = [Some(core), Some(groups)];
            return Ok((catalog, reused));
        }
        // No aggregated discovery (or it failed): discovery group by group.
        let discovery = Discovery::new(client.clone())
            .run()
            .await
            .map_err(ApplyError::Discovery)?;
        let entries = discovery.groups().flat_map(|group| {
            group.versions().flat_map(move |version| {
                group
                    .versioned_resources(version)
                    .into_iter()
                    .map(|(ar, caps)| (ar, caps.scope == Scope::Namespaced))
            })
        });
        Ok((Catalog::from_entries(entries), 0))
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
        Catalog::of_shared(entries.into_iter().map(|(ar, ns)| (Arc::new(ar), ns)))
    }

    /// A catalog of resources already shared (a discovery document's, kept between passes).
    fn of_shared(entries: impl IntoIterator<Item = (Arc<ApiResource>, bool)>) -> Catalog {
        let mut by_kind: HashMap<String, Vec<Served>> = HashMap::new();
        for (ar, ns) in entries {
            let served = by_kind.entry(ar.kind.clone()).or_default();
            // One resource per group and version, the last given (as a map by the three kept).
            served.retain(|(g, v, _)| *g != ar.group || *v != ar.version);
            served.push((ar.group.clone(), ar.version.clone(), (ar, ns)));
        }
        Catalog { by_kind }
    }

    /// Every resource the catalog holds, with its group and kind.
    fn entries(&self) -> impl Iterator<Item = (&str, &str, &(Arc<ApiResource>, bool))> {
        self.by_kind.iter().flat_map(|(k, served)| {
            served
                .iter()
                .map(move |(g, _, entry)| (g.as_str(), k.as_str(), entry))
        })
    }

    /// The resource serving `apiVersion` + `kind`.
    pub fn resolve(&self, api_version: &str, kind: &str) -> Option<&(Arc<ApiResource>, bool)> {
        let (g, v) = split_api_version(api_version);
        self.by_kind
            .get(kind)?
            .iter()
            .find(|(group, version, _)| group == g && version == v)
            .map(|(_, _, entry)| entry)
    }

    /// Every namespaced resource the cluster serves, one version per group and kind.
    pub fn namespaced(&self) -> Vec<Arc<ApiResource>> {
        let mut by_kind: BTreeMap<(&str, &str), &Arc<ApiResource>> = BTreeMap::new();
        for (g, k, (ar, namespaced)) in self.entries() {
            if *namespaced {
                by_kind.entry((g, k)).or_insert(ar);
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
        self.by_kind
            .get(kind)?
            .iter()
            .filter(|(g, _, _)| group.is_none_or(|want| want == g))
            .min_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)))
            .map(|(_, _, entry)| entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape the API server answers on `/apis` with the aggregated discovery `Accept`.
    fn document() -> APIGroupDiscoveryList {
        serde_json::from_value(serde_json::json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {},
            "items": [
                {"metadata": {"name": "example.io"}, "versions": [
                    {"version": "v2", "resources": [
                        {"resource": "widgets", "scope": "Namespaced",
                         "responseKind": {"group": "example.io", "version": "v2", "kind": "Widget"},
                         "verbs": ["get", "list"],
                         "subresources": [{"subresource": "status",
                             "responseKind": {"group": "example.io", "version": "v2", "kind": "Widget"},
                             "verbs": ["get"]}]},
                        {"resource": "gizmos", "scope": "Cluster",
                         "responseKind": {"group": "example.io", "version": "v2", "kind": "Gizmo"},
                         "verbs": ["get"]}
                    ]},
                    {"version": "v1", "resources": [
                        {"resource": "widgets", "scope": "Namespaced",
                         "responseKind": {"group": "example.io", "version": "v1", "kind": "Widget"},
                         "verbs": ["get"]}
                    ]}
                ]},
                {"metadata": {"name": ""}, "versions": [
                    {"version": "v1", "resources": [
                        {"resource": "configmaps", "scope": "Namespaced",
                         "responseKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                         "verbs": ["get"]}
                    ]}
                ]}
            ]
        }))
        .expect("an aggregated discovery document")
    }

    #[test]
    fn an_aggregated_document_gives_every_version_of_every_kind_with_its_scope() {
        let catalog = Catalog::from_entries(
            resources_of(document())
                .into_iter()
                .map(|(ar, ns)| ((*ar).clone(), ns)),
        );
        let (widget, namespaced) = catalog.resolve("example.io/v2", "Widget").expect("v2");
        assert_eq!(
            (
                widget.plural.as_str(),
                widget.api_version.as_str(),
                *namespaced
            ),
            ("widgets", "example.io/v2", true)
        );
        assert!(catalog.resolve("example.io/v1", "Widget").is_some());
        let (gizmo, namespaced) = catalog.resolve("example.io/v2", "Gizmo").expect("gizmo");
        assert_eq!((gizmo.plural.as_str(), *namespaced), ("gizmos", false));
        let (cm, namespaced) = catalog.resolve("v1", "ConfigMap").expect("core");
        assert_eq!(
            (
                cm.group.as_str(),
                cm.api_version.as_str(),
                cm.plural.as_str(),
                *namespaced
            ),
            ("", "v1", "configmaps", true)
        );
        // Subresources are not kinds of their own.
        assert_eq!(resources_of(document()).len(), 4);
    }
}
