//! What the pages show, read from the API server with the user's credentials: the Roots and
//! their Leases, a root's inventory with each object's health, the Armada resources, the
//! WeaveClouds with their agents, and Weft's events.

use crate::api::keys::OWNER_LABEL;
use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use kube::api::{DynamicObject, ListParams};
use kube::core::NamespaceResourceScope;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::{Ui, UiError};
use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaManifest};
use crate::api::root::Root;
use crate::api::{ObjectRef, ResourceKey, WeaveCloud};
use crate::apply::inventory;
use crate::apply::readiness::{self, Readiness};
use crate::daemon::leader::lease_name;
use crate::daemon::roots::lease::root_lease_name;
use crate::daemon::shards::shard_lease_name;
use crate::render::{Owner, OwnerKind};

/// How many kinds of an inventory are listed at once.
const LIST_CONCURRENCY: usize = 4;

/// The most events shown.
const MAX_EVENTS: usize = 300;

/// One Root and who holds it.
#[derive(Clone, Debug)]
pub struct RootRow {
    pub root: Root,
    /// Who holds it: its Lease, or one Lease per shard for a flag root split into shards
    /// (`weft run --shards`). Empty: no replica holds it (or the Leases cannot be read).
    pub leaders: Vec<Leader>,
}

impl RootRow {
    /// `namespace/name`.
    pub fn key(&self) -> ResourceKey {
        ResourceKey {
            namespace: self.root.namespace().unwrap_or_default(),
            name: self.root.name_any(),
        }
    }
}

/// Who holds a root's Lease.
#[derive(Clone, Debug)]
pub struct Leader {
    pub lease: String,
    pub holder: String,
    pub renewed: Option<String>,
}

/// The Roots of every namespace the user may list them in (Weft's namespace alone when they may
/// not list them cluster-wide; none when the Root CRD is not served), by namespace and name,
/// each with who holds it.
pub async fn roots(ui: &Ui) -> Result<Vec<RootRow>, UiError> {
    let ns = &ui.config().weft_namespace;
    let mut roots = match Api::<Root>::all(ui.client().clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            tracing::debug!(error = %crate::api::kube_error::Text(&e), "cannot list the Roots of every namespace; listing those of Weft's");
            match Api::<Root>::namespaced(ui.client().clone(), ns)
                .list(&ListParams::default())
                .await
            {
                Ok(list) => list.items,
                Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
                Err(e) => return Err(UiError::read(format!("the Roots in {ns}"))(e)),
            }
        }
    };
    roots.sort_by_key(|r| (r.namespace(), r.name_any()));
    // Every root's Lease is in Weft's namespace. A user allowed to read the Roots but not the
    // Leases still sees the roots.
    let leases: Api<Lease> = Api::namespaced(ui.client().clone(), ns);
    let leases: BTreeMap<String, Lease> = match leases.list(&ListParams::default()).await {
        Ok(l) => l.into_iter().map(|l| (l.name_any(), l)).collect(),
        Err(e) => {
            tracing::debug!(error = %crate::api::kube_error::Text(&e), "cannot list the Leases");
            BTreeMap::new()
        }
    };
    let leader = |name: &str, lease: &Lease| {
        let spec = lease.spec.as_ref()?;
        Some(Leader {
            lease: name.to_string(),
            holder: spec.holder_identity.clone().unwrap_or_default(),
            renewed: spec.renew_time.as_ref().map(|t| t.0.to_string()),
        })
    };
    Ok(roots
        .into_iter()
        .map(|root| {
            let key = ResourceKey {
                namespace: root.namespace().unwrap_or_default(),
                name: root.name_any(),
            };
            let own = root_lease_name(&key);
            let mut leaders: Vec<Leader> = leases
                .get(&own)
                .and_then(|l| leader(&own, l))
                .into_iter()
                .collect();
            // The flag root split into shards has no Lease of its own: its shards' are
            // `<leader Lease>-shard-<i>`.
            if leaders.is_empty() && &key.namespace == ns {
                let base = lease_name(&key.name);
                leaders = (0..)
                    .map(|i| shard_lease_name(&base, i))
                    .map_while(|n| leases.get(&n).map(|l| (n, l)))
                    .filter_map(|(n, l)| leader(&n, l))
                    .collect();
            }
            RootRow { root, leaders }
        })
        .collect())
}

/// What an object's status says, as the pass's waits judge it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    Ready,
    Progressing(String),
    Failed(String),
    /// In the inventory, not in the cluster.
    Missing,
    /// Its kind is not served, or cannot be listed with the user's RBAC.
    Unknown(String),
}

impl Health {
    pub fn word(&self) -> &'static str {
        match self {
            Health::Ready => "ready",
            Health::Progressing(_) => "progressing",
            Health::Failed(_) => "failed",
            Health::Missing => "missing",
            Health::Unknown(_) => "unknown",
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            Health::Progressing(r) | Health::Failed(r) | Health::Unknown(r) => r,
            _ => "",
        }
    }

    fn of(r: Readiness) -> Health {
        match r {
            Readiness::Ready => Health::Ready,
            Readiness::InProgress(why) => Health::Progressing(why),
            Readiness::Failed(why) => Health::Failed(why),
        }
    }
}

/// One inventory entry and its health.
#[derive(Clone, Debug)]
pub struct Item {
    pub object: ObjectRef,
    pub health: Health,
    /// Its controller (`Kind/name` of the owner reference marked controller), if any.
    pub controller: Option<String>,
}

/// A root's inventory: each entry with its health, in the inventory's order (sorted by
/// reference). `None` when the root has no stored inventory.
pub async fn inventory(ui: &Ui, root: &str) -> Result<Option<Vec<Item>>, UiError> {
    let ns = &ui.config().weft_namespace;
    let owner = Owner::root(ns.clone(), root);
    let Some((entries, _)) = inventory::read_root(ui.client(), &owner, ns).await? else {
        return Ok(None);
    };
    Ok(Some(items_of(ui, &owner, entries).await?))
}

/// What a Root object holds: the Root, its inventory (`None`: none stored yet) with each
/// entry's health, and for each ArmadaChart or WeaveCloud it applied, that one's objects.
pub struct RootObjectView {
    pub root: Root,
    pub items: Option<Vec<Item>>,
    pub children: Vec<(ObjectRef, Vec<Item>)>,
}

/// The Root `namespace/name` and everything it holds, read now.
pub async fn root_object(ui: &Ui, namespace: &str, name: &str) -> Result<RootObjectView, UiError> {
    let api: Api<Root> = Api::namespaced(ui.client().clone(), namespace);
    let root = api
        .get_opt(name)
        .await
        .map_err(UiError::read(format!("the Root {namespace}/{name}")))?
        .ok_or_else(|| UiError::NotFound(format!("no Root {namespace}/{name}")))?;
    let owner = Owner::root(namespace, name);
    let Some((entries, _)) = inventory::read_root(ui.client(), &owner, namespace).await? else {
        return Ok(RootObjectView {
            root,
            items: None,
            children: Vec::new(),
        });
    };
    let items = items_of(ui, &owner, entries).await?;
    let mut children = Vec::new();
    let catalog = ui.catalog().await?;
    for item in &items {
        let Some(kind) = OwnerKind::from_kind(&item.object.kind).filter(|k| k.renders_children())
        else {
            continue;
        };
        let Some((ar, _)) = catalog
            .resolve(&item.object.api_version, &item.object.kind)
            .cloned()
        else {
            continue;
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(ui.client().clone(), &item.object.namespace, &*ar);
        let Ok(Some(cr)) = api.get_opt(&item.object.name).await else {
            continue;
        };
        let child = Owner::resource(kind, &item.object.namespace, &item.object.name);
        let held =
            inventory::read_resource(ui.client(), &child, cr.data.pointer("/status/inventory"))
                .await?
                .unwrap_or_default();
        children.push((item.object.clone(), items_of(ui, &child, held).await?));
    }
    Ok(RootObjectView {
        root,
        items: Some(items),
        children,
    })
}

/// The entries of `owner`'s inventory, each with its health (by one labelled LIST per kind).
async fn items_of(
    ui: &Ui,
    owner: &Owner,
    entries: impl IntoIterator<Item = ObjectRef>,
) -> Result<Vec<Item>, UiError> {
    let catalog = ui.catalog().await?;
    let selector = format!("{OWNER_LABEL}={}", owner.id());
    let mut by_kind: BTreeMap<(String, String), Vec<ObjectRef>> = BTreeMap::new();
    for e in entries {
        by_kind
            .entry((e.api_version.clone(), e.kind.clone()))
            .or_default()
            .push(e);
    }
    let listed: Vec<Vec<Item>> =
        futures::stream::iter(by_kind.into_iter().map(|((api_version, kind), refs)| {
            let catalog = catalog.clone();
            let selector = selector.clone();
            async move {
                let Some((ar, _)) = catalog.resolve(&api_version, &kind).cloned() else {
                    let why = format!("{api_version} {kind} is not served");
                    return unknown(refs, &why);
                };
                let api: Api<DynamicObject> = Api::all_with(ui.client().clone(), &*ar);
                let lp = ListParams::default().labels(&selector).limit(LIST_PAGE);
                // Kinds with nothing to wait for only need to exist: their metadata is enough.
                let live = if readiness::needs_wait(&kind) {
                    list_health(&api, lp, &kind).await
                } else {
                    list_present(&api, lp).await
                };
                match live {
                    Ok(mut live) => refs
                        .into_iter()
                        .map(|r| {
                            let (health, controller) = live
                                .remove(&(r.namespace.clone(), r.name.clone()))
                                .unwrap_or((Health::Missing, None));
                            Item {
                                object: r,
                                health,
                                controller,
                            }
                        })
                        .collect(),
                    Err(e) => unknown(refs, &format!("cannot list {kind}: {e}")),
                }
            }
        }))
        .buffer_unordered(LIST_CONCURRENCY)
        .collect()
        .await;
    let mut items: Vec<Item> = listed.into_iter().flatten().collect();
    items.sort_by(|a, b| {
        (&a.object.namespace, &a.object.kind, &a.object.name).cmp(&(
            &b.object.namespace,
            &b.object.kind,
            &b.object.name,
        ))
    });
    Ok(items)
}

/// The listed objects of one kind: (namespace, name) → health and controller.
type Live = BTreeMap<(String, String), (Health, Option<String>)>;

/// Objects per LIST page: a page is held in memory at a time (its JSON and its objects), not the
/// whole kind.
const LIST_PAGE: u32 = 1000;

/// The objects of one kind matching `lp`, judged by the readiness table, page by page.
async fn list_health(
    api: &Api<DynamicObject>,
    mut lp: ListParams,
    kind: &str,
) -> Result<Live, kube::Error> {
    let mut live = Live::new();
    loop {
        let page = api.list(&lp).await?;
        for o in page.items {
            let value = serde_json::to_value(&o).unwrap_or_default();
            let health = Health::of(readiness::readiness(kind, &value));
            live.insert(key(&o.metadata), (health, controller(&o.metadata)));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(live),
        }
    }
}

/// The objects of one kind matching `lp` (metadata only: they are ready once they exist).
async fn list_present(api: &Api<DynamicObject>, mut lp: ListParams) -> Result<Live, kube::Error> {
    let mut live = Live::new();
    loop {
        let page = api.list_metadata(&lp).await?;
        for o in page.items {
            live.insert(key(&o.metadata), (Health::Ready, controller(&o.metadata)));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(live),
        }
    }
}

fn unknown(refs: Vec<ObjectRef>, why: &str) -> Vec<Item> {
    refs.into_iter()
        .map(|object| Item {
            object,
            health: Health::Unknown(why.to_string()),
            controller: None,
        })
        .collect()
}

fn key(meta: &kube::api::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

fn controller(meta: &kube::api::ObjectMeta) -> Option<String> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("{}/{}", o.kind, o.name))
}

/// Every resource of kind `K` in the cluster; none when its CRD is not installed.
async fn list_all<K>(ui: &Ui, what: &str) -> Result<Vec<K>, UiError>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(ui.client().clone());
    match api.list(&ListParams::default()).await {
        Ok(l) => Ok(l.items),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(UiError::read(what)(e)),
    }
}

/// The Armada resources of the cluster.
pub struct Armada {
    pub manifests: Vec<ArmadaManifest>,
    pub groups: Vec<ArmadaChartGroup>,
    pub charts: Vec<ArmadaChart>,
}

pub async fn armada(ui: &Ui) -> Result<Armada, UiError> {
    let (manifests, groups, charts) = futures::try_join!(
        list_all::<ArmadaManifest>(ui, "the ArmadaManifests"),
        list_all::<ArmadaChartGroup>(ui, "the ArmadaChartGroups"),
        list_all::<ArmadaChart>(ui, "the ArmadaCharts"),
    )?;
    Ok(Armada {
        manifests,
        groups,
        charts,
    })
}

/// One agent workload of a WeaveCloud.
#[derive(Clone, Debug)]
pub struct Agent {
    pub object: ObjectRef,
    pub images: Vec<String>,
    pub health: Health,
}

/// The workload kinds an agent runs as.
const AGENT_KINDS: [&str; 3] = ["Deployment", "DaemonSet", "StatefulSet"];

/// The WeaveClouds, each with its agents (the workloads of its inventory).
pub async fn weaveclouds(ui: &Ui) -> Result<Vec<(WeaveCloud, Vec<Agent>)>, UiError> {
    let clouds = list_all::<WeaveCloud>(ui, "the WeaveClouds").await?;
    if clouds.is_empty() {
        return Ok(Vec::new());
    }
    let catalog = ui.catalog().await?;
    let mut out = Vec::new();
    for wc in clouds {
        let inventory = wc
            .status
            .as_ref()
            .map(|s| s.inventory.clone())
            .unwrap_or_default();
        let workloads = inventory
            .into_iter()
            .filter(|r| AGENT_KINDS.contains(&r.kind.as_str()));
        let mut agents = Vec::new();
        for r in workloads {
            let Some((ar, _)) = catalog.resolve(&r.api_version, &r.kind).cloned() else {
                continue;
            };
            let api: Api<DynamicObject> =
                Api::namespaced_with(ui.client().clone(), &r.namespace, &*ar);
            let (images, health) = match api.get_opt(&r.name).await {
                Ok(Some(o)) => {
                    let v = serde_json::to_value(&o).unwrap_or_default();
                    (images(&v), Health::of(readiness::readiness(&r.kind, &v)))
                }
                Ok(None) => (Vec::new(), Health::Missing),
                Err(e) => (
                    Vec::new(),
                    Health::Unknown(format!(
                        "cannot read it: {}",
                        crate::api::kube_error::Text(&e)
                    )),
                ),
            };
            agents.push(Agent {
                object: r,
                images,
                health,
            });
        }
        out.push((wc, agents));
    }
    Ok(out)
}

fn images(workload: &serde_json::Value) -> Vec<String> {
    workload
        .pointer("/spec/template/spec/containers")
        .and_then(serde_json::Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("image").and_then(serde_json::Value::as_str))
                .map(str::to_string)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        })
        .unwrap_or_default()
}

/// The events Weft reported, newest first: those with `reportingComponent: weft` whose seal
/// checks with the key in Weft's namespace (`notify::sealed`). Anyone who may create an Event
/// may write `reportingComponent: weft` and any note (issue 48 item 8); none of those shows.
pub async fn events(ui: &Ui) -> Result<Vec<Event>, UiError> {
    let ns = &ui.config().weft_namespace;
    let key = crate::daemon::events::read_key(ui.client(), ns)
        .await
        .map_err(UiError::read(format!(
            "Secret {ns}/{} (the key that tells Weft's events from others')",
            crate::api::event_seal::KEY_SECRET
        )))?;
    // No key yet: no Weft has published an event.
    let Some(key) = key else {
        return Ok(Vec::new());
    };
    let api: Api<Event> = Api::all(ui.client().clone());
    let lp = ListParams::default().fields("reportingComponent=weft");
    let mut list = api
        .list(&lp)
        .await
        .map_err(UiError::read("the events"))?
        .items;
    list.retain(|e| is_weft_s(e, &key));
    list.sort_by_cached_key(|e| std::cmp::Reverse(event_time(e)));
    list.truncate(MAX_EVENTS);
    Ok(list)
}

/// Whether `e` carries the seal Weft's key makes of what it says.
fn is_weft_s(e: &Event, key: &[u8]) -> bool {
    let o = &e.involved_object;
    let fields = crate::api::event_seal::SealedFields {
        kind: o.kind.as_deref().unwrap_or_default(),
        namespace: o.namespace.as_deref().unwrap_or_default(),
        name: o.name.as_deref().unwrap_or_default(),
        uid: o.uid.as_deref().unwrap_or_default(),
        type_: e.type_.as_deref().unwrap_or_default(),
        reason: e.reason.as_deref().unwrap_or_default(),
        action: e.action.as_deref().unwrap_or_default(),
        note: e.message.as_deref().unwrap_or_default(),
    };
    e.reporting_instance
        .as_deref()
        .is_some_and(|i| crate::api::event_seal::is_sealed(i, key, &fields))
}

/// When an event last happened (RFC 3339), whichever of its times is set.
pub fn event_time(e: &Event) -> String {
    e.last_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| e.first_timestamp.as_ref().map(|t| t.0.to_string()))
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
        })
        .unwrap_or_default()
}
