//! What `weft export` prints, read from the cluster: the root's configuration (its Root's
//! repository, path and suspension, as the root record document of older Weft), then
//! every WeaveCloud, ArmadaManifest, ArmadaChartGroup, ArmadaChart, Provider and Alert as the
//! user wrote it (`apiVersion`, `kind`, `metadata` without Weft's marks, `spec`). The command
//! line turns it into YAML.

use crate::api::keys::{
    APPLIED_HASH_ANNOTATION, OWNER_LABEL, OWNER_REF_ANNOTATION, REQUESTED_AT_ANNOTATION,
};

use kube::api::{ApiResource, DynamicObject};
use kube::{Api, Client, Resource};
use serde_json::{json, Map, Value};

use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaManifest};
use crate::api::keys::ROOT_KEY;
use crate::api::notification::{Alert, Provider};
use crate::api::redact::redact_url_passwords;
use crate::api::root::Root;
use crate::api::WeaveCloud;
use crate::render::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// The name of the root record ConfigMap of `root` that `weft export` prints (the form an
/// older Weft kept a root's configuration in; a daemon creating the Root takes its suspension
/// over, see `daemon::roots::flag`).
fn record_name(root: &str) -> String {
    format!("weft-root-{root}")
}

/// The documents to export: the record of `root` (its Root in `weft_namespace`, if there is
/// one), then
/// Weft's resources of namespace `ns` (every namespace when `None`), each kind sorted.
pub async fn documents(
    client: &Client,
    weft_namespace: &str,
    root: &str,
    ns: Option<&str>,
) -> Result<Vec<Value>, kube::Error> {
    let mut docs = Vec::new();
    if let Some(record) = root_record(client, weft_namespace, root).await? {
        docs.push(record);
    }
    docs.extend(resources::<WeaveCloud>(client, ns).await?);
    docs.extend(resources::<ArmadaManifest>(client, ns).await?);
    docs.extend(resources::<ArmadaChartGroup>(client, ns).await?);
    docs.extend(resources::<ArmadaChart>(client, ns).await?);
    docs.extend(resources::<Provider>(client, ns).await?);
    docs.extend(resources::<Alert>(client, ns).await?);
    Ok(docs)
}

/// The configuration of the root `root` (its Root in `ns`: repository, path, suspension) as
/// the root record document; `None` when there is no such Root (or no Root CRD).
async fn root_record(client: &Client, ns: &str, root: &str) -> Result<Option<Value>, kube::Error> {
    let api: Api<Root> = Api::namespaced(client.clone(), ns);
    let found = match api.get_opt(root).await {
        Ok(found) => found,
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(e) => return Err(e),
    };
    Ok(found.map(|r| record_document(ns, root, &r)))
}

/// The record document of the Root `r`: its configuration keys only (no pass outcome).
fn record_document(ns: &str, root: &str, r: &Root) -> Value {
    let mut data = Map::new();
    data.insert(
        "repository".into(),
        json!(redact_url_passwords(&r.spec.source.url)),
    );
    data.insert(
        "path".into(),
        json!(r.spec.path.as_deref().unwrap_or("").trim_matches('/')),
    );
    data.insert("suspended".into(), json!(r.spec.suspend.to_string()));
    if let Some(why) = crate::api::suspend::message(&r.metadata).filter(|_| r.spec.suspend) {
        data.insert("suspendMessage".into(), json!(why));
    }
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": record_name(root), "namespace": ns, "labels": {ROOT_KEY: root}},
        "data": data,
    })
}

/// Every resource of kind `K` (none when its CRD is not installed), cleaned, sorted by
/// namespace and name.
async fn resources<K>(client: &Client, ns: Option<&str>) -> Result<Vec<Value>, kube::Error>
where
    K: Resource<DynamicType = ()>,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let list = match api.list(&Default::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut docs: Vec<(String, String, Value)> = list
        .into_iter()
        .map(|o| {
            let namespace = o.metadata.namespace.clone().unwrap_or_default();
            let name = o.metadata.name.clone().unwrap_or_default();
            (namespace, name, cleaned(&resource, o))
        })
        .collect();
    docs.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    Ok(docs.into_iter().map(|(_, _, d)| d).collect())
}

/// What the user wrote: identity, labels and annotations that are not Weft's marks, the spec.
fn cleaned(resource: &ApiResource, object: DynamicObject) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(object.metadata.name));
    if let Some(ns) = &object.metadata.namespace {
        metadata.insert("namespace".into(), json!(ns));
    }
    let labels: Map<String, Value> = object
        .metadata
        .labels
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, v)| !is_weft_label(k, v))
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    let annotations: Map<String, Value> = object
        .metadata
        .annotations
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !is_weft_annotation(k))
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    let mut out = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": metadata,
    });
    if let Some(spec) = object.data.get("spec") {
        out["spec"] = spec.clone();
    }
    out
}

/// The labels Weft's apply adds (ownership), not the user's.
fn is_weft_label(key: &str, value: &str) -> bool {
    key == OWNER_LABEL || (key == MANAGED_BY_LABEL && value == MANAGED_BY_VALUE)
}

/// The annotations Weft's apply or `kubectl apply` add, and requests of `weft trigger`.
fn is_weft_annotation(key: &str) -> bool {
    [
        OWNER_REF_ANNOTATION,
        APPLIED_HASH_ANNOTATION,
        REQUESTED_AT_ANNOTATION,
        crate::api::keys::FORCE_PRUNE_AT,
        "kubectl.kubernetes.io/last-applied-configuration",
    ]
    .contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exported_resource_keeps_what_the_user_wrote_and_drops_weft_marks() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "armada.airshipit.org/v1alpha1",
            "kind": "ArmadaChart",
            "metadata": {
                "name": "api", "namespace": "demo", "uid": "u-1", "resourceVersion": "7",
                "creationTimestamp": "2026-12-04T00:00:00Z",
                "managedFields": [{"manager": "weft"}],
                "labels": {OWNER_LABEL: "abc", MANAGED_BY_LABEL: MANAGED_BY_VALUE, "team": "payments"},
                "annotations": {APPLIED_HASH_ANNOTATION: "h", "weft.io/suspend": "true"},
            },
            "spec": {"release": "api"},
            "status": {"phase": "deployed"},
        }))
        .unwrap();
        let resource = ApiResource::erase::<ArmadaChart>(&());
        assert_eq!(
            cleaned(&resource, object),
            json!({
                "apiVersion": "armada.airshipit.org/v1alpha1",
                "kind": "ArmadaChart",
                "metadata": {
                    "name": "api", "namespace": "demo",
                    "labels": {"team": "payments"},
                    "annotations": {"weft.io/suspend": "true"},
                },
                "spec": {"release": "api"},
            })
        );
    }

    #[test]
    fn a_roots_configuration_is_exported_as_its_record_without_passwords_or_outcome() {
        let mut root: Root = serde_json::from_value(json!({
            "apiVersion": "weft.io/v1alpha1", "kind": "Root",
            "metadata": {"name": "weft", "namespace": "weft-system",
                "annotations": {"weft.io/suspend-message": "incident 42"}},
            "spec": {"source": {"url": "https://u:secret@git.example/c.git"}, "path": "/apps/", "suspend": true},
            "status": {"lastAppliedRevision": "abc"},
        }))
        .unwrap();
        let doc = record_document("weft-system", "weft", &root);
        assert_eq!(doc["metadata"]["name"], json!("weft-root-weft"));
        assert_eq!(doc["metadata"]["labels"], json!({ROOT_KEY: "weft"}));
        assert!(!doc["data"]["repository"]
            .as_str()
            .unwrap()
            .contains("secret"));
        assert_eq!(doc["data"]["path"], json!("apps"));
        assert_eq!(doc["data"]["suspended"], json!("true"));
        assert_eq!(doc["data"]["suspendMessage"], json!("incident 42"));
        assert!(doc["data"].get("revision").is_none(), "{doc}");
        root.spec.suspend = false;
        let doc = record_document("weft-system", "weft", &root);
        assert!(doc["data"].get("suspendMessage").is_none(), "{doc}");
    }
}
