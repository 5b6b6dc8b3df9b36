//! The plan: which API resource serves each desired object (discovery) and where it lives
//! (namespaced or cluster-scoped); [`live`] reads what the live copies look like and decides
//! what must be done to each (create, update, or nothing).

mod live;

pub use live::{
    decide_against, owner_selector, read_by_name, read_live, Decision, LiveState, UpdateReason,
};

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, ListParams};
use kube::Client;
use serde_json::Value;

// Re-exported: the layers above name the catalog and a planned object as parts of the plan.
pub use super::catalog::{split_api_version, Catalog};
use super::list::list_error;
pub use super::planned::PlannedObject;
use super::ApplyError;
use crate::api::ObjectRef;
use crate::render::{DesiredObject, DesiredSet, Owner};

/// Set (or remove) `metadata.namespace` of `object`.
fn set_namespace(object: &mut crate::render::Doc, namespace: Option<&str>) {
    object.edit(|v| {
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            match namespace {
                Some(ns) => meta.insert("namespace".into(), ns.into()),
                None => meta.remove("namespace"),
            };
        }
    });
}

fn origin_prefix(d: &DesiredObject) -> String {
    d.origin
        .as_ref()
        .map(|o| format!("{o}: "))
        .unwrap_or_default()
}

/// `true` when the CRD object `crd` defines `apiVersion` + `kind`.
fn crd_defines(crd: &Value, api_version: &str, kind: &str) -> bool {
    let (g, v) = split_api_version(api_version);
    crd.pointer("/spec/group").and_then(Value::as_str) == Some(g)
        && crd.pointer("/spec/names/kind").and_then(Value::as_str) == Some(kind)
        && crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .is_some_and(|vs| {
                vs.iter()
                    .any(|x| x.get("name").and_then(Value::as_str) == Some(v))
            })
}

/// The reference of every desired object, per owner, with namespaces resolved as [`resolve`]
/// does (an object whose kind the catalog does not know keeps its reference as written).
pub fn desired_refs(
    set: &DesiredSet,
    catalog: &Catalog,
    default_namespace: &str,
) -> BTreeMap<Owner, BTreeSet<ObjectRef>> {
    let mut out: BTreeMap<Owner, BTreeSet<ObjectRef>> = set
        .owners()
        .iter()
        .map(|o| (o.clone(), BTreeSet::new()))
        .collect();
    // The kind last resolved: a set's objects come kind after kind, and a lookup hashes both
    // strings (this runs twice per pass, over every object).
    let mut last: Option<(&str, &str, Option<bool>)> = None;
    for d in set.objects() {
        let mut r = d.object_ref();
        let namespaced = match last {
            Some((api_version, kind, namespaced))
                if api_version == d.api_version() && kind == d.kind() =>
            {
                namespaced
            }
            _ => {
                let namespaced = catalog
                    .resolve(d.api_version(), d.kind())
                    .map(|(_, namespaced)| *namespaced);
                last = Some((d.api_version(), d.kind(), namespaced));
                namespaced
            }
        };
        match namespaced {
            Some(true) if r.namespace.is_empty() => r.namespace = default_namespace.to_string(),
            Some(false) => r.namespace.clear(),
            _ => {}
        }
        // Every owner of the set has its entry already: no copy of the owner per object.
        match out.get_mut(&d.owner) {
            Some(refs) => {
                refs.insert(r);
            }
            None => {
                out.entry(d.owner.clone()).or_default().insert(r);
            }
        }
    }
    out
}

/// The outcome of resolving desired objects against the catalog.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Objects the cluster can take now.
    pub planned: Vec<PlannedObject>,
    /// Objects whose kind is defined by a CRD of this same pass: resolve them again after the
    /// CRD stage is applied and Established.
    pub pending_crd: Vec<DesiredObject>,
}

/// The CRD objects among `objects`.
pub fn crds_of(objects: &[DesiredObject]) -> Vec<Value> {
    objects
        .iter()
        .filter(|d| d.kind() == "CustomResourceDefinition")
        .map(|d| d.object.value())
        .collect()
}

/// Every CRD in the cluster (for kinds whose CRD was just created and is not served yet).
pub async fn cluster_crds(client: &Client) -> Result<Vec<Value>, ApplyError> {
    let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| list_error("customresourcedefinitions", e))?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect())
}

/// Resolve every desired object; an unknown kind is an error unless one of `crds` (CRDs of this
/// pass, or CRDs in the cluster that are not served yet) defines it.
/// Namespaced objects without a namespace go to `default_namespace`.
pub fn resolve(
    objects: &[DesiredObject],
    crds: &[Value],
    catalog: &Catalog,
    default_namespace: &str,
) -> Result<Resolved, ApplyError> {
    let mut out = Resolved::default();
    out.planned.reserve_exact(objects.len());
    let mut errors = Vec::new();
    for d in objects {
        let object = d.object_ref();
        if d.api_version().is_empty() || d.kind().is_empty() || d.name().is_empty() {
            errors.push(ApplyError::Invalid {
                origin: origin_prefix(d),
                object: Box::new(object),
                message: "an object needs apiVersion, kind and metadata.name".into(),
            });
            continue;
        }
        match catalog.resolve(d.api_version(), d.kind()) {
            Some((ar, namespaced)) => {
                let mut desired = d.clone();
                let mut object_ref = object;
                if *namespaced {
                    if object_ref.namespace.is_empty() {
                        object_ref.namespace = default_namespace.to_string();
                        set_namespace(&mut desired.object, Some(default_namespace));
                    }
                } else {
                    object_ref.namespace.clear();
                    if desired.namespace().is_some() {
                        set_namespace(&mut desired.object, None);
                    }
                }
                out.planned.push(PlannedObject {
                    desired,
                    resource: ar.clone(),
                    namespaced: *namespaced,
                    object_ref,
                    ignored: Vec::new(),
                });
            }
            None => {
                let defined_here = crds
                    .iter()
                    .any(|c| crd_defines(c, d.api_version(), d.kind()));
                if defined_here {
                    out.pending_crd.push(d.clone());
                } else {
                    errors.push(ApplyError::UnknownKind {
                        origin: origin_prefix(d),
                        object: Box::new(object),
                        api_version: d.api_version().to_string(),
                        kind: d.kind().to_string(),
                    });
                }
            }
        }
    }
    match errors.len() {
        0 => Ok(out),
        1 => Err(errors.remove(0)),
        _ => Err(ApplyError::Many(errors)),
    }
}
#[cfg(test)]
mod tests {
    use super::*;
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
    fn namespaces_are_filled_in_and_removed_by_scope() {
        let objs = vec![
            obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})),
            obj(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "namespace": "x"}}),
            ),
        ];
        let r = resolve(&objs, &crds_of(&objs), &catalog(), "default").unwrap();
        assert_eq!(r.planned[0].object_ref.to_string(), "ConfigMap/default/c");
        assert_eq!(
            r.planned[0].desired.object.value()["metadata"]["namespace"],
            "default"
        );
        assert_eq!(r.planned[1].object_ref.to_string(), "Namespace/n");
        assert!(r.planned[1].desired.object.value()["metadata"]
            .get("namespace")
            .is_none());
    }

    #[test]
    fn unknown_kind_is_an_error_unless_its_crd_is_in_the_pass() {
        let widget = obj(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "a"}}),
        );
        let err = resolve(std::slice::from_ref(&widget), &[], &catalog(), "default").unwrap_err();
        assert_eq!(
            err.to_string(),
            "Widget/a/w: the cluster has no kind `Widget` in `example.com/v1` (no CRD for it is installed or part of this pass)"
        );
        let crd = obj(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced",
                     "versions": [{"name": "v1", "served": true, "storage": true}]}
        }));
        let all = vec![crd, widget];
        let r = resolve(&all, &crds_of(&all), &catalog(), "default").unwrap();
        assert_eq!(r.planned.len(), 1);
        assert_eq!(r.pending_crd.len(), 1);
        assert_eq!(r.pending_crd[0].name(), "w");
    }
}
