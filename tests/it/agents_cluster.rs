//! The built-in agent bundle against a real API server (tests/control-plane): every object a
//! WeaveCloud renders is accepted with strict field validation (an unknown or misspelt field in a
//! template fails here), and the agents' workloads roll out on kwok nodes.

use crate::support;
use weft::api::keys::TOKEN_HASH_ANNOTATION;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::ByteString;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::discovery::{pinned_kind, Scope};
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use serde_json::Value;

use support::cluster::TestNamespace;
use weft::api::WeaveCloud;
use weft::render::bundle::Bundle;
use weft::render::weavecloud::{render_agents, secret_data_hash, AgentInputs};
use weft::render::DesiredObject;

const FIELD_MANAGER: &str = "weft-agents-test";
const WAIT: Duration = Duration::from_secs(180);

fn golden_input(case: &str, namespace: &str) -> WeaveCloud {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/golden/weavecloud/{case}.input.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut wc: WeaveCloud =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    wc.metadata.namespace = Some(namespace.to_string());
    wc
}

fn gvk_of(object: &Value) -> GroupVersionKind {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

/// Server-side apply every object (strict field validation); returns the cluster-scoped ones
/// for cleanup.
async fn apply_all(
    client: &Client,
    namespace: &str,
    objects: &[DesiredObject],
    dry_run: bool,
) -> Vec<(ApiResource, String)> {
    let mut cluster_scoped = Vec::new();
    for o in objects {
        let gvk = gvk_of(&o.object.value());
        let (resource, caps) = pinned_kind(client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("discovering {gvk:?}: {e}"));
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => {
                assert_eq!(o.namespace(), Some(namespace), "{} {}", o.kind(), o.name());
                Api::namespaced_with(client.clone(), namespace, &resource)
            }
            Scope::Cluster => {
                assert_eq!(o.namespace(), None, "{} {}", o.kind(), o.name());
                cluster_scoped.push((resource.clone(), o.name().to_string()));
                Api::all_with(client.clone(), &resource)
            }
        };
        let mut params = PatchParams::apply(FIELD_MANAGER).validation_strict();
        if dry_run {
            params = params.dry_run();
        }
        api.patch(o.name(), &params, &Patch::Apply(o.object.raw()))
            .await
            .unwrap_or_else(|e| panic!("the API server refused {} {}: {e}", o.kind(), o.name()));
    }
    cluster_scoped
}

async fn delete_cluster_scoped(client: &Client, objects: Vec<(ApiResource, String)>) {
    for (resource, name) in objects {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => panic!("deleting {} {name}: {e}", resource.kind),
        }
    }
}

#[tokio::test]
async fn the_design_example_is_accepted_and_its_agents_roll_out() {
    let ns = TestNamespace::new("agents").await;
    let client = ns.client();
    let token: BTreeMap<String, Vec<u8>> =
        BTreeMap::from([("token".to_string(), b"test-service-token".to_vec())]);
    let secrets: Api<Secret> = ns.api();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("weave-cloud".into()),
            ..Default::default()
        },
        data: Some(
            token
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                .collect(),
        ),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating the token Secret");

    let wc = golden_input("design-example", ns.name());
    let inputs = AgentInputs {
        token_hash: Some(secret_data_hash(&token)),
        ..Default::default()
    };
    let rendered =
        render_agents(&wc, Bundle::builtin().expect("built-in bundle"), &inputs).expect("render");
    let cluster_scoped = apply_all(&client, ns.name(), &rendered.objects, false).await;
    assert!(
        cluster_scoped.iter().all(|(_, n)| n.ends_with(ns.name())),
        "{cluster_scoped:?}"
    );

    let deployments: Api<Deployment> = ns.api();
    for name in [
        "weave-flux-agent",
        "weave-flux-memcached",
        "weave-cortex-agent",
        "weave-cortex-kube-state-metrics",
    ] {
        let available = |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Available" && c.status == "True")
        };
        let waited =
            tokio::time::timeout(WAIT, await_condition(deployments.clone(), name, available)).await;
        if waited.is_err() {
            let status = deployments.get(name).await.ok().and_then(|d| d.status);
            panic!("Deployment {name} not Available within {WAIT:?}: {status:?}");
        }
    }
    let daemonsets: Api<DaemonSet> = ns.api();
    for name in ["weave-scope-agent", "weave-cortex-node-exporter"] {
        let ready = |d: Option<&DaemonSet>| {
            d.and_then(|d| d.status.as_ref()).is_some_and(|s| {
                s.desired_number_scheduled > 0 && s.number_ready == s.desired_number_scheduled
            })
        };
        let waited =
            tokio::time::timeout(WAIT, await_condition(daemonsets.clone(), name, ready)).await;
        if waited.is_err() {
            let status = daemonsets.get(name).await.ok().and_then(|d| d.status);
            panic!("DaemonSet {name} not ready within {WAIT:?}: {status:?}");
        }
    }

    // What the kubelet gets: the flux pod reads the token from the Secret and carries its hash.
    let pods: Api<Pod> = ns.api();
    let flux_pods = pods
        .list(&ListParams::default().labels("name=weave-flux-agent"))
        .await
        .expect("listing pods");
    let pod = flux_pods.items.first().expect("a flux pod");
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get(TOKEN_HASH_ANNOTATION),
        inputs.token_hash.as_ref()
    );
    let pod_json = serde_json::to_value(pod).expect("pod as JSON");
    assert!(!pod_json.to_string().contains("test-service-token"));
    let container = &pod_json["spec"]["containers"][0];
    let env = container["env"].as_array().expect("env");
    assert!(env.iter().any(|e| e["name"] == "WEAVE_CLOUD_TOKEN"
        && e["valueFrom"]["secretKeyRef"]["name"] == "weave-cloud"
        && e["valueFrom"]["secretKeyRef"]["key"] == "token"));

    delete_cluster_scoped(&client, cluster_scoped).await;
    ns.delete().await;
}

#[tokio::test]
async fn the_openshift_rendering_is_accepted_by_the_api_server() {
    let ns = TestNamespace::new("agents-openshift").await;
    let client = ns.client();
    let wc = golden_input("openshift-opt-out", ns.name());
    let rendered = render_agents(
        &wc,
        Bundle::builtin().expect("built-in bundle"),
        &AgentInputs::default(),
    )
    .expect("render");
    assert!(rendered
        .objects
        .iter()
        .any(|o| o.kind() == "RoleBinding" && o.name() == "weave-scope-scc"));
    // Dry run: validated and admitted by the API server, nothing stored, nothing to clean up.
    apply_all(&client, ns.name(), &rendered.objects, true).await;
    ns.delete().await;
}
