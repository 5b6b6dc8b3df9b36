//! What the live copies of planned objects look like, read as metadata-only lists, and what
//! must be done to each: [`Decision`] (create, update and why, or nothing), kept per object in
//! [`LiveState`].

use crate::api::keys::{OWNER_LABEL, OWNER_REF_ANNOTATION};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures::{FutureExt, StreamExt};
use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;
use serde_json::Value;

use super::PlannedObject;
use crate::api::keys::APPLIED_HASH_ANNOTATION;
use crate::api::ObjectRef;
use crate::apply::conflict::{self, Conflict};
use crate::apply::list::{
    display_ns, for_each_listed_page, for_each_metadata_page, ListedMeta, META_PAGE,
};
use crate::apply::{drift, ApplyError};
use crate::render::{Owner, OwnerId};

/// What must happen to one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// It does not exist.
    Create,
    /// It exists and must be written; the reason says why.
    Update(UpdateReason),
    /// It exists with the desired hash and has not drifted: no write.
    Unchanged,
}

/// Why an existing object is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdateReason {
    /// It carries another owner's label (or none): this owner takes it over.
    TakenOver { from: Option<String> },
    /// The desired object changed since it was applied (its applied hash differs).
    Changed,
    /// Someone else changed a field this owner applied (pointer to the first such field).
    Drifted { field: String },
    /// It exists without any owner label of this pass: adopted.
    Adopted,
}

impl std::fmt::Display for UpdateReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpdateReason::TakenOver { from } => {
                write!(
                    f,
                    "taken over from owner {}",
                    from.as_deref().unwrap_or("none")
                )
            }
            UpdateReason::Changed => f.write_str("changed"),
            UpdateReason::Drifted { field } => write!(f, "drifted: {field}"),
            UpdateReason::Adopted => f.write_str("adopted"),
        }
    }
}

/// What each planned object needs, decided from its live copy as it was listed. Only the
/// decisions are kept, never the live objects: the memory of a pass does not grow with the size
/// of the live objects (a no-op pass over 100,000 objects holds 100,000 small decisions). Keyed
/// by the planned objects' own references, borrowed: a copy of each reference as the key was
/// ≈ 270 bytes per object more at the peak of a no-op pass (27 MB at 100,000 objects).
#[derive(Clone, Debug, Default)]
pub struct LiveState<'a> {
    /// Objects found live (carrying an owner label of this pass, or adopted): their decision.
    decisions: HashMap<&'a ObjectRef, Decision>,
    /// Objects another root holds or claims (see [`conflict`]).
    conflicts: HashMap<&'a ObjectRef, Conflict>,
    /// Objects the pass's identity may not even read (the API server answered 403 to the get
    /// by name: a tenant's account and a cluster-scoped kind, or another tenant's namespace):
    /// the API server's refusal, which [`apply_batch`](crate::apply::apply::apply_batch)
    /// reports for that object instead of writing it.
    refused: HashMap<&'a ObjectRef, Box<kube::core::Status>>,
}

impl<'a> LiveState<'a> {
    /// What must happen to `p` (`Create` when it was not found).
    pub fn decide(&self, p: &PlannedObject) -> Decision {
        self.decisions
            .get(&p.object_ref)
            .cloned()
            .unwrap_or(Decision::Create)
    }

    /// Record `p`'s live copy: labelled by an owner of this pass (`live` holds at least its
    /// metadata, with `managedFields`).
    pub fn observe(&mut self, p: &'a PlannedObject, live: &Value) {
        self.decisions
            .insert(&p.object_ref, decide_against(p, live));
    }

    /// Record what a read of `p` by name gave: the live object decided, nothing for an absent
    /// one. Refused (403), that object alone is refused (a tenant's ClusterRole); the other
    /// objects of the group, and of the pass, go on (issue 42 item 3).
    fn record_read(
        &mut self,
        p: &'a PlannedObject,
        got: Result<Option<DynamicObject>, kube::Error>,
    ) -> Result<(), ApplyError> {
        match got {
            Ok(Some(live)) => {
                let live = serde_json::to_value(&live).map_err(|source| {
                    ApplyError::decode(&p.object_ref, "the live object", source)
                })?;
                self.observe(p, &live);
            }
            Ok(None) => {}
            Err(kube::Error::Api(s)) if s.code == 403 => {
                self.refused.insert(&p.object_ref, s);
            }
            Err(source) => return Err(ApplyError::api("get", &p.object_ref, source)),
        }
        Ok(())
    }

    /// Record the claim annotation (`weft.io/claimed-by`) `claim` of `p`'s live copy: a conflict
    /// when another root claims it.
    fn note_claim(&mut self, p: &'a PlannedObject, claim: Option<&str>) {
        if let Some(claimer) = claim.and_then(|c| conflict::other_root(&p.desired.owner, c)) {
            self.conflicts
                .insert(&p.object_ref, Conflict::ClaimedBy(claimer));
        }
    }

    /// Record that `p` exists without any owner label of this pass: it will be adopted.
    pub fn observe_unlabelled(&mut self, p: &'a PlannedObject) {
        self.decisions
            .insert(&p.object_ref, Decision::Update(UpdateReason::Adopted));
    }

    /// The conflict with another root over `p`, if any.
    pub fn conflict(&self, p: &PlannedObject) -> Option<&Conflict> {
        self.conflicts.get(&p.object_ref)
    }

    /// The API server's refusal to let the pass read `p`, as the error of `p` (a `get`).
    pub fn refused(&self, p: &PlannedObject) -> Option<ApplyError> {
        self.refused
            .get(&p.object_ref)
            .map(|s| ApplyError::api("get", &p.object_ref, kube::Error::Api(s.clone())))
    }

    fn found(&self, p: &PlannedObject) -> bool {
        self.decisions.contains_key(&p.object_ref)
    }
}

/// What the drift check compares of `p`: its desired object without the fields left to other
/// managers (an autoscaler that scaled the object owns `spec.replicas` now: no drift).
fn compared(p: &PlannedObject) -> Value {
    let mut desired = p.desired.object.value();
    crate::apply::ignore::without(&mut desired, &p.ignored);
    desired
}

/// The `weft.io/owner` label value of the owner last asked for: [`Owner::id`] hashes (SHA-256)
/// a formatted reference, and the members of a group nearly always share one owner (a no-op
/// pass over 100,000 objects hashed it 100,000 times).
#[derive(Default)]
struct OwnerIds<'a> {
    last: Option<(&'a Owner, OwnerId)>,
}

impl<'a> OwnerIds<'a> {
    fn of(&mut self, owner: &'a Owner) -> &str {
        if self.last.as_ref().is_none_or(|(o, _)| *o != owner) {
            self.last = Some((owner, owner.id()));
        }
        self.last.as_ref().map_or("", |(_, id)| id.0.as_str())
    }
}

/// [`decide_against`] from the live object's metadata as listed (with managedFields): no copy of
/// it is made, and only weft's own field set is parsed. `owner_id` is the label value of
/// `p`'s owner.
fn decide_meta(p: &PlannedObject, meta: &ListedMeta, owner_id: &str) -> Decision {
    if meta.owner.as_deref() != Some(owner_id) {
        return Decision::Update(UpdateReason::TakenOver {
            from: meta.owner.clone(),
        });
    }
    if meta.annotations.applied_hash.as_deref() != p.desired_hash() {
        return Decision::Update(UpdateReason::Changed);
    }
    // A field set the server sent is JSON; one that is not an object counts as none.
    let fields: Option<serde_json::Map<String, Value>> = meta
        .managed_fields
        .ours
        .as_ref()
        .and_then(|f| serde_json::from_str(f.get()).ok());
    match drift::drifted_from_fields(&compared(p), fields.as_ref()) {
        Some(field) => Decision::Update(UpdateReason::Drifted { field }),
        None => Decision::Unchanged,
    }
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// The decision for `p` against its live copy `live` (carrying an owner label of the pass).
pub fn decide_against(p: &PlannedObject, live: &Value) -> Decision {
    let live_hash = annotation(live, APPLIED_HASH_ANNOTATION);
    let live_owner = live
        .pointer("/metadata/labels")
        .and_then(|l| l.get(OWNER_LABEL))
        .and_then(Value::as_str);
    if live_owner != Some(p.desired.owner.id().0.as_str()) {
        return Decision::Update(UpdateReason::TakenOver {
            from: live_owner.map(str::to_string),
        });
    }
    if live_hash != p.desired_hash() {
        return Decision::Update(UpdateReason::Changed);
    }
    match drift::drifted_field(&compared(p), live) {
        Some(field) => Decision::Update(UpdateReason::Drifted { field }),
        None => Decision::Unchanged,
    }
}

/// The names of every object of `api`, each with the owner reference (`weft.io/owner-ref`) of
/// the Weft owner that labelled it, if one did.
async fn list_holders(
    api: &Api<DynamicObject>,
    what: &str,
) -> Result<HashMap<String, Option<String>>, ApplyError> {
    let mut out = HashMap::new();
    for_each_metadata_page(api, ListParams::default().limit(META_PAGE), what, |items| {
        for m in items.into_iter().map(|i| i.metadata) {
            let labelled = m
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(OWNER_LABEL));
            let holder = m
                .annotations
                .and_then(|mut a| a.remove(OWNER_REF_ANNOTATION))
                .filter(|_| labelled);
            if let Some(name) = m.name {
                out.insert(name, holder);
            }
        }
        Ok(())
    })
    .await?;
    Ok(out)
}

/// A label selector matching any of `owners` (each owner's label value is a hash: computed
/// once per owner, not once per object of a group that shares one).
pub fn owner_selector<'a>(owners: impl IntoIterator<Item = &'a Owner>) -> String {
    let owners: BTreeSet<&Owner> = owners.into_iter().collect();
    let ids: BTreeSet<String> = owners.into_iter().map(|o| o.id().0).collect();
    format!(
        "{OWNER_LABEL} in ({})",
        ids.into_iter().collect::<Vec<_>>().join(",")
    )
}

/// Read the live state of `planned`: one labelled, metadata-only list per (resource,
/// namespace), taken page by page (500 objects) and reduced to decisions at once, and one
/// metadata-only list of names where some object was not found, to tell "absent" from "not ours
/// yet". Metadata is enough: the owner label, the applied hash and the field ownership
/// (`managedFields`) decide. Only an object the server returns without `managedFields` is read
/// whole, for the value comparison of [`drift::drifted_field`].
pub async fn read_live<'a>(
    client: &Client,
    planned: &'a [PlannedObject],
    concurrency: usize,
) -> Result<LiveState<'a>, ApplyError> {
    // (group, version, plural, namespace) → objects
    let mut groups: BTreeMap<(String, String, String, String), Vec<&'a PlannedObject>> =
        BTreeMap::new();
    for p in planned {
        groups
            .entry((
                p.resource.group.clone(),
                p.resource.version.clone(),
                p.resource.plural.clone(),
                p.object_ref.namespace.clone(),
            ))
            .or_default()
            .push(p);
    }
    let results: Vec<Result<LiveState<'a>, ApplyError>> = futures::stream::iter(
        groups
            .into_values()
            .map(|members| read_group(client, members).boxed())
            .collect::<Vec<_>>(),
    )
    .buffer_unordered(concurrency.max(1))
    .collect()
    .await;
    let mut out = LiveState::default();
    for r in results {
        let r = r?;
        // The first group's state is taken whole (a root of one kind in one namespace has only
        // that one): its decisions are not hashed again into another map.
        if out.decisions.is_empty() && out.conflicts.is_empty() && out.refused.is_empty() {
            out = r;
            continue;
        }
        out.decisions.extend(r.decisions);
        out.conflicts.extend(r.conflicts);
        out.refused.extend(r.refused);
    }
    Ok(out)
}

/// The live state of `planned` read object by object (a GET each, `concurrency` at a time): for
/// a few objects of a large root (the early apply of a push), where a LIST of their kind would
/// page through every object the root holds in the namespace. A live object is decided as a
/// listed one is (another root's owner label: taken over; another root's claim: a conflict);
/// one that is not there is to be created; one the identity may not read is refused. Another
/// root's hold is not looked into further here: the early apply leaves a taken-over object to
/// the full pass.
pub async fn read_by_name<'a>(
    client: &Client,
    planned: &'a [PlannedObject],
    concurrency: usize,
) -> Result<LiveState<'a>, ApplyError> {
    // Boxed and collected before the stream, as `read_live`'s: with a closure inside the stream
    // type, rustc cannot prove the daemon's pass future `Send`.
    let reads: Vec<(
        &'a PlannedObject,
        Result<Option<DynamicObject>, kube::Error>,
    )> = futures::stream::iter(
        planned
            .iter()
            .map(|p| async move { (p, p.api(client).get_opt(&p.object_ref.name).await) }.boxed())
            .collect::<Vec<_>>(),
    )
    .buffer_unordered(concurrency.max(1))
    .collect()
    .await;
    let mut state = LiveState::default();
    for (p, got) in reads {
        if let Ok(Some(live)) = &got {
            let claim = live
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::api::keys::CLAIM_ANNOTATION));
            state.note_claim(p, claim.map(String::as_str));
        }
        state.record_read(p, got)?;
    }
    Ok(state)
}

/// The live state of one (resource, namespace) group of planned objects.
async fn read_group<'a>(
    client: &Client,
    members: Vec<&'a PlannedObject>,
) -> Result<LiveState<'a>, ApplyError> {
    let first = members[0];
    let api = first.api(client);
    let selector = owner_selector(members.iter().map(|p| &p.desired.owner));
    let what = format!(
        "{} in {}",
        first.resource.plural,
        display_ns(&first.object_ref.namespace)
    );
    let wanted: HashMap<&str, &'a PlannedObject> = members
        .iter()
        .map(|p| (p.object_ref.name.as_str(), *p))
        .collect();
    let mut state = LiveState::default();
    state.decisions.reserve(members.len());
    // Objects listed without managedFields: read whole afterwards.
    let mut whole: Vec<&'a PlannedObject> = Vec::new();
    let mut ids = OwnerIds::default();
    let lp = ListParams::default().labels(&selector).limit(META_PAGE);
    let listed = for_each_listed_page(&api, lp, &what, |items| {
        for meta in items {
            let Some(p) = meta.name.as_deref().and_then(|n| wanted.get(n).copied()) else {
                continue;
            };
            if !meta.managed_fields.any {
                whole.push(p);
                continue;
            }
            state.note_claim(p, meta.annotations.claimed_by.as_deref());
            let decision = decide_meta(p, &meta, ids.of(&p.desired.owner));
            state.decisions.insert(&p.object_ref, decision);
        }
        Ok(())
    })
    .await;
    let by_name = match listed {
        // An identity that may not list the kind here (a namespaced Weft, a tenant's account:
        // a Namespace is listed cluster-wide, but a Role of that namespace lets it be read by
        // name): every member is read by name instead.
        Err(ApplyError::Api {
            source: kube::Error::Api(s),
            ..
        }) if s.code == 403 => {
            state = LiveState::default();
            whole = members.clone();
            true
        }
        listed => {
            listed?;
            false
        }
    };
    for p in whole {
        let got = api.get_opt(&p.object_ref.name).await;
        state.record_read(p, got)?;
    }
    // Read by name, an absent member is absent: the list of every name would be refused too.
    if !by_name && members.iter().any(|p| !state.found(p)) {
        let holders = list_holders(&api, &what).await?;
        let mut roots = conflict::Holders::new();
        for p in &members {
            if state.found(p) {
                continue;
            }
            let Some(holder) = holders.get(&p.object_ref.name) else {
                continue;
            };
            state.observe_unlabelled(p);
            let other = holder
                .as_deref()
                .and_then(|h| conflict::other_root(&p.desired.owner, h))
                .filter(|h| !conflict::take_over_allowed(p, h));
            let Some(other) = other else { continue };
            if conflict::still_held(client, &other, &p.object_ref, &mut roots).await? {
                state
                    .conflicts
                    .insert(&p.object_ref, Conflict::HeldBy(other));
            }
        }
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::plan::{resolve, Catalog};
    use crate::render::DesiredObject;
    use kube::api::ApiResource;
    use serde_json::json;

    fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: if group.is_empty() {
                version.into()
            } else {
                format!("{group}/{version}")
            },
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    fn catalog() -> Catalog {
        Catalog::from_entries([
            (ar("", "v1", "ConfigMap", "configmaps"), true),
            (ar("", "v1", "Namespace", "namespaces"), false),
            (
                ar(
                    "apiextensions.k8s.io",
                    "v1",
                    "CustomResourceDefinition",
                    "customresourcedefinitions",
                ),
                false,
            ),
        ])
    }

    fn obj(v: Value) -> DesiredObject {
        Owner::root("weft-system", "weft").adopt(v, 0, None)
    }

    #[test]
    fn decisions_from_hash_owner_and_drift() {
        let d = obj(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}, "data": {"k": "v"}}),
        );
        let r = resolve(std::slice::from_ref(&d), &[], &catalog(), "default").unwrap();
        let p = &r.planned[0];
        let mut live = LiveState::default();
        assert_eq!(live.decide(p), Decision::Create);
        live.observe_unlabelled(p);
        assert_eq!(live.decide(p), Decision::Update(UpdateReason::Adopted));
        // The live copy as the server returns it after weft applied it.
        let mut l = d.object.value();
        l["metadata"]["managedFields"] = json!([{"manager": "weft", "operation": "Apply", "fieldsV1": {
            "f:data": {"f:k": {}},
            "f:metadata": {"f:labels": {"f:app.kubernetes.io/managed-by": {}, "f:weft.io/owner": {}},
                           "f:annotations": {"f:weft.io/owner-ref": {}, "f:weft.io/applied-hash": {}}}
        }}]);
        live.observe(p, &l);
        assert_eq!(live.decide(p), Decision::Unchanged);
        // Only the metadata, as a metadata-only list returns it, decides the same.
        live.observe(p, &json!({"metadata": l["metadata"].clone()}));
        assert_eq!(live.decide(p), Decision::Unchanged);
        let meta =
            |v: &Value| -> ListedMeta { serde_json::from_str(&v["metadata"].to_string()).unwrap() };
        let mut ids = OwnerIds::default();
        let id = ids.of(&p.desired.owner).to_string();
        assert_eq!(id, p.desired.owner.id().0);
        assert_eq!(decide_meta(p, &meta(&l), &id), Decision::Unchanged);
        // Another owner's label: taken over.
        let other = Owner::resource(crate::render::OwnerKind::Root, "other", "root");
        assert_ne!(ids.of(&other), id);
        assert_eq!(ids.of(&other), other.id().0);
        assert_eq!(
            decide_meta(p, &meta(&l), ids.of(&other)),
            Decision::Update(UpdateReason::TakenOver {
                from: Some(id.clone())
            })
        );
        // Someone edited data.k: the field left weft's set (and with it, its only parent).
        let mut edited = l.clone();
        edited["metadata"]["managedFields"][0]["fieldsV1"]
            .as_object_mut()
            .unwrap()
            .remove("f:data");
        live.observe(p, &edited);
        assert_eq!(decide_meta(p, &meta(&edited), &id), live.decide(p));
        assert_eq!(
            live.decide(p),
            Decision::Update(UpdateReason::Drifted {
                field: "/data".into()
            })
        );
        // The repository changed: another hash.
        let mut old = l;
        old["metadata"]["annotations"][APPLIED_HASH_ANNOTATION] = json!("0000");
        live.observe(p, &old);
        assert_eq!(decide_meta(p, &meta(&old), &id), live.decide(p));
        assert_eq!(live.decide(p), Decision::Update(UpdateReason::Changed));
    }

    #[test]
    fn owner_selector_lists_every_owner_once() {
        let a = Owner::root("weft-system", "weft");
        let s = owner_selector([&a, &a]);
        assert_eq!(s, format!("weft.io/owner in ({})", a.id()));
    }
}
