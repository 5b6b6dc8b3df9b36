//! What pruning a Namespace or a CRD would take with it.
//!
//! Deleting a Namespace deletes everything in it; deleting a CRD deletes every custom resource of
//! its kind. So a Namespace or CRD that is a prune candidate (Weft created it, and it is opted in
//! with `weft.io/prune: enabled`) is judged by its content first:
//! - it is kept while this pass still desires an object in it (a Namespace) or of its kind (a
//!   CRD): deleting it would delete what the same pass just applied — even with `--force-prune`;
//! - it is kept while something that is not this owner's lives there (a human's ConfigMap, a
//!   Gadget another tool made), unless forced;
//! - otherwise the owner's objects it holds are what the delete cascades to, and the prune guard
//!   counts them, not the one Namespace or CRD.
//!
//! Objects a controller made for another one that goes with the delete (an `ownerReference` to an
//! object in the same Namespace, or of the same CRD's kind), events, endpoints and what the
//! cluster puts in every namespace are neither a reason to keep nor counted. An ownerReference to
//! an owner that survives (a ClusterRole that is not Weft's) protects nothing: that object is
//! judged as any other, and a human's keeps the Namespace.

use std::collections::BTreeSet;

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::PartialObjectMeta;
use kube::Client;
use serde_json::Value;

use super::catalog::{split_api_version, Catalog};
use super::proof::proof_of_ownership;
use super::protection::protection;
use super::ApplyError;
use crate::api::ObjectRef;
use crate::render::Owner;

/// Objects per page of the content lists.
const PAGE: u32 = 500;

/// Why a delete that cascades to an object may not happen, whatever the flags.
const PROTECTED: &str = "is annotated weft.io/prune: disabled";

/// The judgement on one Namespace or CRD candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cascade {
    /// Keep it (and its inventory entry), for this reason.
    Keep(String),
    /// Delete it; that deletes these objects of the owner too.
    Deletes(Vec<ObjectRef>),
}

/// Judge the candidate `r` (its live copy `live`) of `owner`; `None` for any other kind.
/// `desired` is every object of this pass, `force` is `--force-prune`.
pub async fn judge(
    client: &Client,
    catalog: &Catalog,
    owner: &Owner,
    r: &ObjectRef,
    live: &Value,
    desired: &super::prune::Desired<'_>,
    force: bool,
) -> Result<Option<Cascade>, ApplyError> {
    match (split_api_version(&r.api_version).0, r.kind.as_str()) {
        ("", "Namespace") => {
            if let Some(d) = desired.iter().find(|d| d.namespace == r.name) {
                return Ok(Some(Cascade::Keep(format!(
                    "not pruned: git still declares {d} in this namespace (remove those objects from git too, or keep the namespace)"
                ))));
            }
            let mut content = Content::default();
            for ar in catalog.namespaced() {
                if matches!(ar.kind.as_str(), "Event" | "Endpoints" | "EndpointSlice") {
                    continue;
                }
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &r.name, &*ar);
                content.read(&api, owner, &ar.api_version, &ar.kind).await?;
            }
            Ok(Some(content.verdict("lives in this namespace", force)))
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            let group = live
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or("");
            let kind = live
                .pointer("/spec/names/kind")
                .and_then(Value::as_str)
                .unwrap_or("");
            if let Some(d) = desired
                .iter()
                .find(|d| d.kind == kind && split_api_version(&d.api_version).0 == group)
            {
                return Ok(Some(Cascade::Keep(format!(
                    "not pruned: git still declares {d} of this CRD's kind (remove those objects from git too, or keep the CRD)"
                ))));
            }
            let mut content = Content::default();
            // A kind the cluster does not serve (the CRD is not Established) has no objects.
            if let Some((ar, _)) = catalog.resolve_kind(Some(group), kind).cloned() {
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &*ar);
                content.read(&api, owner, &ar.api_version, &ar.kind).await?;
            }
            Ok(Some(content.verdict("is of this CRD's kind", force)))
        }
        _ => Ok(None),
    }
}

/// What a Namespace holds, or a CRD's kind has.
#[derive(Default)]
struct Content {
    /// The owner's objects: what the delete cascades to.
    owned: Vec<ObjectRef>,
    /// The first object that is not the owner's (and, when it has ownerReferences, why they do
    /// not make it a controller's).
    foreign: Option<(ObjectRef, String)>,
    /// The first of the owner's objects that is protected (`weft.io/prune: disabled`).
    protected: Option<ObjectRef>,
    /// The UIDs of every object listed: the owners that go with the delete.
    uids: BTreeSet<String>,
    /// Objects with ownerReferences, judged once every list is read: made for an owner that goes
    /// with the delete they are that owner's business; made for one that survives (a ClusterRole,
    /// an object elsewhere) they are judged as any other object.
    dependents: Vec<Dependent>,
}

/// An object with ownerReferences, as [`Content::classify`] would judge it without them.
struct Dependent {
    owners: Vec<(String, String)>,
    r: ObjectRef,
    ours: bool,
    protected: bool,
}

impl Content {
    /// Read one list, page by page (metadata only).
    async fn read(
        &mut self,
        api: &Api<DynamicObject>,
        owner: &Owner,
        api_version: &str,
        kind: &str,
    ) -> Result<(), ApplyError> {
        let mut lp = ListParams::default().limit(PAGE);
        loop {
            let page = match api.list_metadata(&lp).await {
                Ok(p) => p,
                // Not listable (create-only review kinds): nothing of it lives anywhere.
                Err(kube::Error::Api(e)) if matches!(e.code, 404 | 405) => return Ok(()),
                Err(source) => {
                    return Err(ApplyError::list(
                        format!("the {kind}s a prune would delete"),
                        source,
                    ))
                }
            };
            for item in page.items {
                self.classify(item, owner, api_version, kind);
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp = lp.continue_token(&token),
                None => return Ok(()),
            }
        }
    }

    fn classify(
        &mut self,
        item: PartialObjectMeta<DynamicObject>,
        owner: &Owner,
        api_version: &str,
        kind: &str,
    ) {
        // Weft's own label, set by Weft's apply (managedFields), not a label copied by hand.
        let meta = serde_json::to_value(&item.metadata).unwrap_or(Value::Null);
        let live = serde_json::json!({ "metadata": meta });
        let ours = proof_of_ownership(&live, owner).is_ok();
        let protected = protection(kind, &live).is_some() && kind != "Namespace";
        let m = item.metadata;
        if let Some(uid) = m.uid {
            self.uids.insert(uid);
        }
        let name = m.name.unwrap_or_default();
        let built_in = matches!(
            (kind, name.as_str()),
            ("ServiceAccount", "default") | ("ConfigMap", "kube-root-ca.crt")
        );
        if m.deletion_timestamp.is_some() || built_in {
            return;
        }
        let r = ObjectRef {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: m.namespace.unwrap_or_default(),
            name,
        };
        let owners: Vec<(String, String)> = m
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .map(|o| (o.uid, format!("{}/{}", o.kind, o.name)))
            .collect();
        if !owners.is_empty() {
            self.dependents.push(Dependent {
                owners,
                r,
                ours,
                protected,
            });
            return;
        }
        self.count(r, ours, protected, String::new());
    }

    fn count(&mut self, r: ObjectRef, ours: bool, protected: bool, note: String) {
        if ours && protected {
            self.protected.get_or_insert(r);
        } else if ours {
            self.owned.push(r);
        } else if self.foreign.is_none() {
            self.foreign = Some((r, note));
        }
    }

    /// Judge the objects with ownerReferences, now that every owner that goes is known: one whose
    /// owners all survive the delete (a ClusterRole that is not Weft's) is protected by none of
    /// them, and counts as what it is (a human's object keeps the Namespace).
    fn settle(&mut self) {
        for d in std::mem::take(&mut self.dependents) {
            if d.owners.iter().any(|(uid, _)| self.uids.contains(uid)) {
                continue;
            }
            let names: Vec<&str> = d.owners.iter().map(|(_, n)| n.as_str()).collect();
            let note = format!(
                "; its ownerReference to {} does not protect it: that owner is not deleted with it",
                names.join(", ")
            );
            self.count(d.r, d.ours, d.protected, note);
        }
    }

    fn verdict(mut self, where_: &str, force: bool) -> Cascade {
        self.settle();
        if let Some(p) = self.protected {
            return Cascade::Keep(format!(
                "not pruned: {p} {where_} and {PROTECTED} (it would be deleted with it)"
            ));
        }
        match self.foreign {
            Some((f, note)) if !force => Cascade::Keep(format!(
                "not pruned: {f} {where_} and is not this owner's (it would be deleted with it{note}); delete or move it, or allow it once with --force-prune"
            )),
            _ => Cascade::Deletes(self.owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::keys::OWNER_LABEL;
    use serde_json::json;

    fn owner() -> Owner {
        Owner::root("weft-system", "weft")
    }

    /// As Weft's apply leaves it when `ours`; else with the same label set by hand.
    fn item(name: &str, ours: bool, owner_refs: bool) -> PartialObjectMeta<DynamicObject> {
        let labels = json!({OWNER_LABEL: owner().id().0});
        let manager = if ours { "weft" } else { "kubectl" };
        let operation = if ours { "Apply" } else { "Update" };
        let mut meta = json!({"name": name, "namespace": "fg", "labels": labels, "uid": format!("uid-{name}"),
            "managedFields": [{"manager": manager, "operation": operation, "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:weft.io/owner": {}}}}}]});
        if owner_refs {
            meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "uid-r"}]);
        }
        PartialObjectMeta {
            types: None,
            metadata: serde_json::from_value(meta).expect("meta"),
            _phantom: Default::default(),
        }
    }

    #[test]
    fn the_owners_objects_cascade_and_anything_else_keeps_it() {
        let o = owner();
        let mut c = Content::default();
        c.classify(item("mine", true, false), &o, "v1", "ConfigMap");
        // A Pod of a ReplicaSet in the namespace goes with it: neither counted nor foreign.
        c.classify(item("pod", false, true), &o, "v1", "Pod");
        c.classify(item("r", false, false), &o, "apps/v1", "ReplicaSet");
        c.settle();
        assert_eq!(c.foreign.as_ref().map(|f| f.0.name.as_str()), Some("r"));
        c.foreign = None;
        c.classify(
            item("kube-root-ca.crt", false, false),
            &o,
            "v1",
            "ConfigMap",
        );
        assert_eq!(c.foreign, None);
        assert_eq!(c.owned.len(), 1);
        assert!(c.dependents.is_empty());
        // The owner's label copied by hand does not make a human's Secret Weft's.
        c.classify(item("human", false, false), &o, "v1", "Secret");
        let Cascade::Keep(why) = Content {
            owned: c.owned.clone(),
            foreign: c.foreign.clone(),
            ..Content::default()
        }
        .verdict("lives in this namespace", false) else {
            panic!("kept");
        };
        assert!(
            why.contains("Secret/fg/human lives in this namespace"),
            "{why}"
        );
        assert_eq!(
            c.verdict("lives in this namespace", true),
            Cascade::Deletes(vec![ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "fg".into(),
                name: "mine".into()
            }])
        );
    }

    #[test]
    fn a_protected_object_of_the_owner_keeps_it_even_when_forced() {
        let o = owner();
        let mut c = Content::default();
        let mut p = item("keep-me", true, false);
        p.metadata.annotations =
            Some([("weft.io/prune".to_string(), "disabled".to_string())].into());
        c.classify(p, &o, "v1", "ConfigMap");
        let Cascade::Keep(why) = c.verdict("lives in this namespace", true) else {
            panic!("kept");
        };
        assert!(why.contains("ConfigMap/fg/keep-me lives in this namespace and is annotated weft.io/prune: disabled"), "{why}");
    }

    #[test]
    fn an_owner_reference_to_an_owner_that_survives_protects_nothing() {
        let o = owner();
        let mut c = Content::default();
        c.classify(item("mine", true, false), &o, "v1", "ConfigMap");
        let mut human = item("human", false, false);
        human.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "name": "someone-elses", "uid": "uid-cluster-role"}))
        .expect("ref")]);
        c.classify(human, &o, "v1", "ConfigMap");
        let Cascade::Keep(why) = c.verdict("lives in this namespace", false) else {
            panic!("kept");
        };
        assert!(
            why.contains("ConfigMap/fg/human lives in this namespace and is not this owner's"),
            "{why}"
        );
        assert!(
            why.contains("its ownerReference to ClusterRole/someone-elses does not protect it"),
            "{why}"
        );
    }
}
