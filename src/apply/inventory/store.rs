//! Inventories kept in ConfigMaps ([`format`](super::format)): the sync root's, in Weft's
//! namespace, and a large custom resource's, in its own namespace. Also reads the format 1 head
//! (one ConfigMap, key [`INVENTORY_KEY`]) that Weft wrote before, so an upgrade keeps it.

use crate::api::keys::OWNER_REF_ANNOTATION;
use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde::de::Error as _;
use serde_json::{json, Value};

use super::format::{self, Damage, Encoded, CHUNK_KEY, MANIFEST_KEY};
use super::{force_prune_of, recent, Stored, INVENTORY_KEY};
use crate::api::keys::INVENTORY_OF_LABEL;
use crate::api::ObjectRef;
use crate::apply::{is_not_found, InventoryProblem, FIELD_MANAGER};
use crate::render::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::render::Owner;

/// Where one owner's ConfigMaps live.
pub struct Place<'a> {
    pub owner: &'a Owner,
    pub namespace: &'a str,
}

impl Place<'_> {
    fn head(&self) -> String {
        super::configmap_name(self.owner)
    }

    fn api(&self, client: &Client) -> Api<ConfigMap> {
        Api::namespaced(client.clone(), self.namespace)
    }

    fn selector(&self) -> String {
        format!("{INVENTORY_OF_LABEL}={}", self.owner.id())
    }

    fn invalid(&self, name: &str, reason: String) -> InventoryProblem {
        InventoryProblem::Invalid {
            what: format!("ConfigMap {}/{name}", self.namespace),
            source: serde_json::Error::custom(reason),
        }
    }

    fn damaged(&self, d: Damage) -> InventoryProblem {
        self.invalid(&d.configmap, d.reason)
    }

    fn api_error(&self, verb: &str, name: &str, source: kube::Error) -> InventoryProblem {
        let what = format!("{verb} ConfigMap {}/{name}", self.namespace);
        InventoryProblem::Api { what, source }
    }
}

/// Read the inventory stored at `place`; `None` when it has no head ConfigMap.
///
/// A writer removes the chunks it replaced after it wrote the new head, and a delete removes the
/// head first, so a reader that got a head a moment before may find a chunk it lists gone. That
/// is a race, not damage: the head is read again (it changed or is gone), a few times at most. A
/// chunk missing or corrupted under a head that did not change is damage.
pub async fn read(client: &Client, place: &Place<'_>) -> Result<Option<Stored>, InventoryProblem> {
    const ATTEMPTS: usize = 5;
    let mut attempt = 1;
    loop {
        match read_once(client, place, attempt == ATTEMPTS).await? {
            Read::Done(stored) => return Ok(stored),
            Read::Raced => attempt += 1,
        }
    }
}

/// One read of the inventory at `place`.
enum Read {
    Done(Option<Stored>),
    /// Its chunks did not match the head, and the head changed meanwhile: read again.
    Raced,
}

/// Read the inventory once; `last`: report damage even when the head changed meanwhile.
async fn read_once(
    client: &Client,
    place: &Place<'_>,
    last: bool,
) -> Result<Read, InventoryProblem> {
    let api = place.api(client);
    let head = place.head();
    let Some(cm) = api.get_opt(&head).await.map_err(InventoryProblem::Read)? else {
        return Ok(Read::Done(None));
    };
    let version = cm.metadata.resource_version.clone();
    let force = force_prune_of(cm.metadata.annotations.as_ref());
    let data = cm.data.unwrap_or_default();
    let entries = if let Some(text) = data.get(MANIFEST_KEY) {
        if let Some(entries) = recent::entries(place.namespace, &head, text) {
            return Ok(Read::Done(Some((entries, force))));
        }
        let manifest = format::parse_manifest(&head, text).map_err(|d| place.damaged(d))?;
        let mut chunks = BTreeMap::new();
        for s in &manifest.chunks {
            let chunk = api.get_opt(&s.name).await.map_err(InventoryProblem::Read)?;
            let bytes = chunk
                .and_then(|c| c.binary_data)
                .and_then(|mut b| b.remove(CHUNK_KEY))
                .map(|b| b.0);
            chunks.insert(s.name.clone(), bytes);
        }
        match format::decode(&head, &manifest, &chunks) {
            Ok(entries) => {
                recent::keep(place.namespace, &head, text, &entries);
                entries
            }
            Err(damage) => {
                let now = api.get_opt(&head).await.map_err(InventoryProblem::Read)?;
                let moved = now.is_none_or(|c| c.metadata.resource_version != version);
                if moved && !last {
                    return Ok(Read::Raced);
                }
                return Err(place.damaged(damage));
            }
        }
    } else if let Some(text) = data.get(INVENTORY_KEY) {
        // Format 1, written by Weft before inventories were chunked.
        let list: Vec<ObjectRef> =
            serde_json::from_str(text).map_err(|source| InventoryProblem::Invalid {
                what: format!("ConfigMap {}/{head} key {INVENTORY_KEY}", place.namespace),
                source,
            })?;
        list.into_iter().collect()
    } else {
        let why = format!("it has neither key {MANIFEST_KEY} nor key {INVENTORY_KEY}");
        return Err(place.invalid(&head, why));
    };
    Ok(Read::Done(Some((entries, force))))
}

/// The names of every ConfigMap at `place` that belongs to the owner's inventory (head and
/// chunks, referenced or not), with their chunk's digest when they hold one.
async fn list(
    client: &Client,
    place: &Place<'_>,
) -> Result<BTreeMap<String, Option<String>>, InventoryProblem> {
    let lp = ListParams::default().labels(&place.selector());
    let listed = place.api(client).list(&lp).await.map_err(|source| {
        let what = format!(
            "listing ConfigMaps {} in {}",
            place.selector(),
            place.namespace
        );
        InventoryProblem::Api { what, source }
    })?;
    Ok(listed
        .items
        .into_iter()
        .map(|cm| {
            let digest = cm
                .binary_data
                .as_ref()
                .and_then(|b| b.get(CHUNK_KEY))
                .map(|b| format::digest(&b.0));
            (cm.name_any(), digest)
        })
        .collect())
}

/// The names of every ConfigMap of the owner's inventory at `place` (for `weft uninstall`).
pub async fn names(client: &Client, place: &Place<'_>) -> Result<Vec<String>, InventoryProblem> {
    Ok(list(client, place).await?.into_keys().collect())
}

/// Store `entries` at `place`: the chunks that do not exist yet, then the head, then delete the
/// chunks the head no longer names. `owner_references` go on every ConfigMap (a custom
/// resource's inventory is deleted with it).
pub async fn write(
    client: &Client,
    place: &Place<'_>,
    entries: &BTreeSet<ObjectRef>,
    owner_references: Option<Value>,
) -> Result<(), InventoryProblem> {
    let head = place.head();
    let Encoded { manifest, chunks } =
        format::encode(&head, entries, format::CHUNK_BYTES).map_err(InventoryProblem::Encode)?;
    let existing = list(client, place).await?;
    let api = place.api(client);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let metadata = |name: &str| {
        let mut m = json!({
            "name": name,
            "namespace": place.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, INVENTORY_OF_LABEL: place.owner.id().0},
            "annotations": {OWNER_REF_ANNOTATION: place.owner.reference()},
        });
        if let Some(refs) = &owner_references {
            m["ownerReferences"] = refs.clone();
        }
        m
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    for (chunk, r) in chunks.iter().zip(&manifest.chunks) {
        if existing.get(&chunk.name) == Some(&Some(r.sha256.clone())) {
            continue;
        }
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(&chunk.name),
            "binaryData": {CHUNK_KEY: b64.encode(&chunk.data)},
        });
        api.patch(&chunk.name, &pp, &Patch::Apply(&cm))
            .await
            .map_err(|e| place.api_error("writing", &chunk.name, e))?;
    }
    let text = serde_json::to_string(&manifest).map_err(InventoryProblem::Encode)?;
    // The head's fields are all Weft's: a format 1 `inventory.json` it applied goes away here.
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": metadata(&head),
        "data": {MANIFEST_KEY: text},
    });
    // Forgotten first: a head whose write failed may or may not hold the new manifest.
    recent::forget(place.namespace, &head);
    api.patch(&head, &pp, &Patch::Apply(&cm))
        .await
        .map_err(|e| place.api_error("writing", &head, e))?;
    recent::keep(place.namespace, &head, &text, entries);
    let keep: BTreeSet<&str> = manifest.chunks.iter().map(|s| s.name.as_str()).collect();
    for name in existing.keys() {
        if name != &head && !keep.contains(name.as_str()) {
            // The inventory is stored: an old chunk left behind is removed by the next write.
            if let Err(e) = delete_one(&api, name).await {
                tracing::warn!(configmap = %format!("{}/{name}", place.namespace), "removing an old inventory chunk: {}", crate::api::kube_error::Text(&e));
            }
        }
    }
    Ok(())
}

async fn delete_one(api: &Api<ConfigMap>, name: &str) -> Result<(), kube::Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Delete every ConfigMap of the owner's inventory at `place` (it moved to the owner's status).
pub async fn delete(client: &Client, place: &Place<'_>) -> Result<(), InventoryProblem> {
    let api = place.api(client);
    let head = place.head();
    recent::forget(place.namespace, &head);
    let mut names: Vec<String> = list(client, place).await?.into_keys().collect();
    // The head first: a head never names a chunk that is gone.
    names.sort_by_key(|n| n != &head);
    for name in names {
        delete_one(&api, &name)
            .await
            .map_err(|e| place.api_error("deleting", &name, e))?;
    }
    Ok(())
}
