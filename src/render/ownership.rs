//! Ownership labels and annotations: how Weft recognises what it applied and may prune.

use crate::api::keys::{APPLIED_HASH_ANNOTATION, OWNER_LABEL, OWNER_REF_ANNOTATION};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::sync::Arc;

pub use crate::api::owner::OwnerKind;
use crate::load::Origin;

use super::DesiredObject;

/// `app.kubernetes.io/managed-by: weft` on every applied object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY_VALUE: &str = "weft";
/// The value of [`CREATE_ANNOTATION`](crate::api::keys::CREATE_ANNOTATION).
pub const CREATE_IF_MISSING: &str = "if-missing";
/// `weft.io/requested-at` on a CR asks for a reconcile now.
/// Helm's hook annotation. An object carrying it is a hook that a pass runs on an install or
/// upgrade (pass::helm_hooks) and never an inventory entry: helm does not manage hooks as release
/// objects, so a hook kept by its delete policy (keystone's `pre-install` fernet-keys Secret,
/// `hook-delete-policy: hook-failed`) must outlive the pass that ran it.
pub const HELM_HOOK_ANNOTATION: &str = "helm.sh/hook";

/// Who applied an object: a typed key, the kind of owner and its namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// What kind of owner.
    pub kind: OwnerKind,
    /// A root's namespace (for the root of `weft run`'s flags, Weft's own namespace: two
    /// installations in different namespaces never share an owner id, even with the default
    /// root name), or the custom resource's. Shared (`Arc`): every desired object, planned
    /// object and change of a pass names its owner, and copies of the two strings were ≈ 200
    /// bytes per object (20 MB at 100,000 objects).
    pub namespace: Arc<str>,
    /// The root's or the custom resource's name.
    pub name: Arc<str>,
}

/// The short hash that goes into the `weft.io/owner` label.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(pub String);

impl std::fmt::Display for OwnerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Owner {
    /// The root `name` of namespace `namespace`.
    pub fn root(namespace: impl AsRef<str>, name: impl AsRef<str>) -> Owner {
        Owner::resource(OwnerKind::Root, namespace, name)
    }

    /// The owner of kind `kind` named `namespace/name`.
    pub fn resource(kind: OwnerKind, namespace: impl AsRef<str>, name: impl AsRef<str>) -> Owner {
        Owner {
            kind,
            namespace: Arc::from(namespace.as_ref()),
            name: Arc::from(name.as_ref()),
        }
    }

    /// Whether the owner is a root.
    pub fn is_root(&self) -> bool {
        self.kind == OwnerKind::Root
    }

    /// `(namespace, name)` when the owner is an ArmadaChart.
    pub fn as_chart(&self) -> Option<(&str, &str)> {
        (self.kind == OwnerKind::ArmadaChart).then_some((&self.namespace, &self.name))
    }

    /// Readable form: `root/weft-system/weft` or `WeaveCloud/weave/weave-cloud`.
    pub fn reference(&self) -> String {
        format!(
            "{}/{}/{}",
            self.kind.reference_prefix(),
            self.namespace,
            self.name
        )
    }

    /// The label value: the first 20 hex digits of sha256(reference). Label values are limited
    /// to 63 characters and a reference may be longer; the hash also makes a label copied from
    /// another object useless without the inventory entry that goes with it.
    pub fn id(&self) -> OwnerId {
        let digest = Sha256::digest(self.reference().as_bytes());
        OwnerId(hex::encode(&digest[..10]))
    }

    /// The owner a readable reference names (`root/<ns>/<name>`, `WeaveCloud/<ns>/<name>`), if
    /// it names one.
    pub fn from_reference(reference: &str) -> Option<Owner> {
        let mut parts = reference.splitn(3, '/');
        let (prefix, namespace, name) = (parts.next()?, parts.next()?, parts.next()?);
        let kind = OwnerKind::ALL
            .into_iter()
            .find(|k| k.reference_prefix() == prefix)?;
        (!namespace.is_empty() && !name.is_empty() && !name.contains('/'))
            .then(|| Owner::resource(kind, namespace, name))
    }

    /// The owner whose pass applied an object with these `labels` and `annotations`: the
    /// readable `weft.io/owner-ref`, when the `weft.io/owner` label is its hash. Anyone who may
    /// edit the object may write both, so this is a claim, never a proof: use it only where
    /// believing it can take rights away (a root's child acts as its parent or less), never
    /// where it grants any.
    pub fn claimed_by(
        labels: &std::collections::BTreeMap<String, String>,
        annotations: &std::collections::BTreeMap<String, String>,
    ) -> Option<Owner> {
        let owner = Owner::from_reference(annotations.get(OWNER_REF_ANNOTATION)?)?;
        (labels.get(OWNER_LABEL) == Some(&owner.id().0)).then_some(owner)
    }

    /// Add the ownership labels and annotations to `object` and wrap it.
    pub fn adopt(&self, mut object: Value, wave: u32, origin: Option<Origin>) -> DesiredObject {
        label_object(&mut object, self);
        let hash = object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(APPLIED_HASH_ANNOTATION))
            .and_then(Value::as_str);
        DesiredObject {
            object: super::Doc::rendered(&object, hash),
            owner: self.clone(),
            wave,
            origin,
        }
    }
}

fn child_map<'a>(parent: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let entry = parent
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(m) => m,
        // Just made an object above.
        _ => unreachable!("entry was set to an object"),
    }
}

/// Set the ownership labels and annotations, and the applied hash of everything else.
pub fn label_object(object: &mut Value, owner: &Owner) {
    let Value::Object(root) = object else { return };
    {
        let meta = child_map(root, "metadata");
        let labels = child_map(meta, "labels");
        labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
        labels.insert(OWNER_LABEL.into(), owner.id().0.into());
        let annotations = child_map(meta, "annotations");
        annotations.insert(OWNER_REF_ANNOTATION.into(), owner.reference().into());
        annotations.remove(APPLIED_HASH_ANNOTATION);
    }
    let hash = desired_hash(object);
    if let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.insert(APPLIED_HASH_ANNOTATION.into(), hash.into());
    }
}

/// Hash of a desired object without its applied-hash annotation: serde_json maps are sorted, so
/// the serialisation (and the hash) is canonical.
pub fn desired_hash(object: &Value) -> String {
    let has_hash = object
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(APPLIED_HASH_ANNOTATION));
    if has_hash {
        let mut copy = object.clone();
        if let Some(a) = copy
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            a.remove(APPLIED_HASH_ANNOTATION);
        }
        hash_value(&copy)
    } else {
        hash_value(object)
    }
}

/// sha256 of the JSON serialisation, streamed into the hasher (no intermediate buffer: this
/// runs once per desired object on every pass).
fn hash_value(value: &Value) -> String {
    struct HashWriter(Sha256);
    impl std::io::Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = HashWriter(Sha256::new());
    // Writing a Value to an infallible writer cannot fail (its map keys are strings).
    let _ = serde_json::to_writer(&mut w, value);
    hex::encode(&w.0.finalize()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn adopt_adds_labels_annotations_and_a_stable_hash() {
        let owner = Owner::root("weft-system", "weft");
        let obj = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"x":"y"}}});
        let d = owner.adopt(obj.clone(), 0, None);
        let v = d.object.value();
        let labels = &v["metadata"]["labels"];
        assert_eq!(labels["x"], "y");
        assert_eq!(labels[MANAGED_BY_LABEL], "weft");
        assert_eq!(labels[OWNER_LABEL], owner.id().0.as_str());
        assert_eq!(
            v["metadata"]["annotations"][OWNER_REF_ANNOTATION],
            "root/weft-system/weft"
        );
        let hash = v["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
            .as_str()
            .unwrap()
            .to_string();
        // Re-adopting the already labelled object gives the same hash.
        let again = owner.adopt(d.object.value(), 0, None);
        assert_eq!(again.object.applied_hash(), Some(hash.as_str()));
        assert_eq!(d.object.applied_hash(), Some(hash.as_str()));
        // A change of content changes it.
        let mut changed = obj;
        changed["data"] = json!({"k": "v"});
        let c = owner.adopt(changed, 0, None);
        assert_ne!(c.object.applied_hash(), Some(hash.as_str()));
    }

    #[test]
    fn owner_ids_differ_per_owner() {
        let a = Owner::resource(OwnerKind::WeaveCloud, "a", "wc");
        let b = Owner::resource(OwnerKind::WeaveCloud, "b", "wc");
        assert_ne!(a.id(), b.id());
        assert_eq!(a.id().0.len(), 20);
    }

    #[test]
    fn an_owner_is_read_back_from_its_reference_and_label() {
        let root = Owner::root("team-a", "apps");
        assert_eq!(Owner::from_reference(&root.reference()), Some(root.clone()));
        let wc = Owner::resource(OwnerKind::WeaveCloud, "weave", "wc");
        assert_eq!(Owner::from_reference(&wc.reference()), Some(wc));
        assert_eq!(Owner::from_reference("root/team-a"), None);
        assert_eq!(Owner::from_reference("Deployment/a/b"), None);
        let labels = [(OWNER_LABEL.to_string(), root.id().0)].into();
        let annotations = [(OWNER_REF_ANNOTATION.to_string(), root.reference())].into();
        assert_eq!(Owner::claimed_by(&labels, &annotations), Some(root));
        // A reference whose hash is not the label names nobody.
        let other = [(
            OWNER_REF_ANNOTATION.to_string(),
            "root/team-b/apps".to_string(),
        )]
        .into();
        assert_eq!(Owner::claimed_by(&labels, &other), None);
    }
}
