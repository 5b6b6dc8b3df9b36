//! `weft export`: the root's configuration and Weft's own resources as YAML, as `flux export`
//! prints Flux's: the root record (which repository and path the root syncs, and whether it is
//! suspended), then every WeaveCloud, ArmadaManifest, ArmadaChartGroup, ArmadaChart, Provider and
//! Alert — `apiVersion`, `kind`, `metadata` (name, namespace, the user's labels and annotations)
//! and `spec`, without status, server fields or Weft's ownership marks, so the output can be kept
//! in git or applied to another cluster. Read only. Exit 0, 1 when there is nothing to export, 2 on
//! an error.

use crate::api::keys::{
    APPLIED_HASH_ANNOTATION, OWNER_LABEL, OWNER_REF_ANNOTATION, REQUESTED_AT_ANNOTATION,
};
use std::process::ExitCode;

use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject};
use kube::{Api, Client, Resource};
use serde_json::{json, Map, Value};

use super::args::ClusterArgs;
use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaManifest};
use crate::api::notification::{Alert, Provider};
use crate::api::WeaveCloud;
use crate::daemon::record::{
    self, KEY_PATH, KEY_REPOSITORY, KEY_SUSPENDED, KEY_SUSPENDED_AT, KEY_SUSPEND_MESSAGE,
};
use crate::render::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// The flags of `weft export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Name of the sync root whose record is exported (`--root-name` of `weft sync` / `weft run`).
    #[arg(long, env = "WEFT_ROOT_NAME", default_value = "weft")]
    pub root_name: String,
    /// Only the resources of this namespace, as kubectl's `-n` (default: every namespace; the
    /// root record, in Weft's namespace, is always exported).
    #[arg(long = "namespace", short = 'n')]
    pub in_namespace: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// The keys of the root record that are configuration (not a pass's outcome or a request).
const RECORD_KEYS: &[&str] = &[
    KEY_REPOSITORY,
    KEY_PATH,
    KEY_SUSPENDED,
    KEY_SUSPEND_MESSAGE,
    KEY_SUSPENDED_AT,
];

/// `weft export`.
pub fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        let ns = args.in_namespace.as_deref();
        let mut docs = Vec::new();
        if let Some(record) =
            root_record(&client, &args.cluster.weft_namespace, &args.root_name).await?
        {
            docs.push(record);
        }
        docs.extend(resources::<WeaveCloud>(&client, ns).await?);
        docs.extend(resources::<ArmadaManifest>(&client, ns).await?);
        docs.extend(resources::<ArmadaChartGroup>(&client, ns).await?);
        docs.extend(resources::<ArmadaChart>(&client, ns).await?);
        docs.extend(resources::<Provider>(&client, ns).await?);
        docs.extend(resources::<Alert>(&client, ns).await?);
        if docs.is_empty() {
            errln!(
                "error: nothing to export: no root record `{}` in namespace {} and none of \
                 Weft's resources{}",
                record::record_name(&args.root_name),
                args.cluster.weft_namespace,
                ns.map(|n| format!(" in namespace {n}")).unwrap_or_default()
            );
            return Ok(ExitCode::from(1));
        }
        let mut out = String::new();
        for doc in &docs {
            out.push_str("---\n");
            out.push_str(&crate::render::output::to_yaml(doc)?);
        }
        out!("{out}");
        Ok(ExitCode::SUCCESS)
    })
}

/// The root record, with its configuration keys only.
async fn root_record(client: &Client, ns: &str, root: &str) -> anyhow::Result<Option<Value>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let Some(cm) = api.get_opt(&record::record_name(root)).await? else {
        return Ok(None);
    };
    let data: Map<String, Value> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| RECORD_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let mut metadata = json!({"name": record::record_name(root), "namespace": ns});
    if let Some(labels) = cm.metadata.labels.filter(|l| !l.is_empty()) {
        metadata["labels"] = json!(labels);
    }
    Ok(Some(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": data,
    })))
}

/// Every resource of kind `K` (none when its CRD is not installed), cleaned, sorted by
/// namespace and name.
async fn resources<K>(client: &Client, ns: Option<&str>) -> anyhow::Result<Vec<Value>>
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
        Err(e) => return Err(e.into()),
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
}
