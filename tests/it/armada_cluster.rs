//! The Armada resources and chart objects against the real API server of
//! `tests/control-plane`: the CRDs accept what `examples-repo/armada` holds and reject what the
//! loader rejects (with strict field validation), every rendered chart object is a valid
//! Kubernetes object, and the readiness rules follow a real rollout on kwok nodes.

use crate::support;

use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{pinned_kind, Scope};
use kube::Client;
use serde_json::{json, Value};

use support::cluster::TestNamespace;
use weft::api::owner::OwnerKind;
use weft::pass::armada;
use weft::pass::prepare::prepare;
use weft::pass::PassSettings;
use weft::render::{AgentLayer, DesiredObject};
use weft::source::{local, SnapshotLimits};

const FIELD_MANAGER: &str = "weft-armada-test";
const WAIT: Duration = Duration::from_secs(120);

/// What `weft render examples-repo` prints: the one pipeline of every command (helm included,
/// with the pinned helm of `$WEFT_HELM`), offline.
async fn examples_objects() -> Vec<DesiredObject> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples-repo");
    let snapshot = local::read_dir(&dir, SnapshotLimits::default()).unwrap();
    let cache = tempfile::tempdir().unwrap();
    // The example's encrypted Secret (docs/secrets.md).
    let key = weft::sops::identities_from_key_file(&dir.join("TEST-ONLY-age.agekey"));
    let opts = PassSettings {
        repo_location: dir.display().to_string(),
        chart_cache_dir: Some(cache.path().to_path_buf()),
        decryption: weft::sops::Decryption {
            key_file: std::sync::Arc::new(key.unwrap()),
            secret: None,
        },
        ..PassSettings::default()
    };
    let prepared = prepare(snapshot, None, AgentLayer::Included, &opts)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    prepared.set.objects().to_vec()
}

fn gvk_of(object: &Value) -> GroupVersionKind {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

/// Server-side apply (strict field validation) into `namespace`; returns the API server's answer.
async fn apply(
    client: &Client,
    namespace: &str,
    mut object: Value,
    dry_run: bool,
) -> Result<Value, kube::Error> {
    let gvk = gvk_of(&object);
    let (resource, caps): (ApiResource, _) = pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => {
            object["metadata"]["namespace"] = json!(namespace);
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let mut params = PatchParams::apply(FIELD_MANAGER).validation_strict();
    if dry_run {
        params = params.dry_run();
    }
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let applied = api.patch(&name, &params, &Patch::Apply(&object)).await?;
    Ok(serde_json::to_value(applied).unwrap_or(Value::Null))
}

#[tokio::test]
async fn armada_resources_and_chart_objects_are_accepted_and_readiness_follows_a_rollout() {
    let ns = TestNamespace::new("armada").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let objects = examples_objects().await;

    let crs: Vec<&DesiredObject> = objects
        .iter()
        .filter(|o| o.kind().starts_with("Armada"))
        .collect();
    assert_eq!(
        crs.len(),
        7,
        "4 charts (demo-lib is the library dependency of api and web), 2 groups, 1 manifest"
    );
    for o in &crs {
        apply(&client, ns.name(), o.object.value(), false)
            .await
            .unwrap_or_else(|e| panic!("the API server refused {} {}: {e}", o.kind(), o.name()));
    }
    // The stored chart keeps the free-form values (preserve-unknown-fields) and the int-or-string.
    let charts = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        ns.name(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("armada.airshipit.org", "v1alpha1", "ArmadaChart"),
            "armadacharts",
        ),
    );
    let api_chart = serde_json::to_value(charts.get("api").await.unwrap()).unwrap();
    assert_eq!(
        api_chart["spec"]["values"]["overlays"][1]["jsonPatch"][0]["value"],
        "cache,metrics"
    );
    assert_eq!(
        api_chart["spec"]["wait"]["resources"][0]["min_ready"],
        "50%"
    );
    let web_chart = serde_json::to_value(charts.get("web").await.unwrap()).unwrap();
    assert_eq!(web_chart["spec"]["wait"]["resources"][0]["min_ready"], 1);

    let children: Vec<&DesiredObject> = objects
        .iter()
        .filter(|o| o.owner.kind == OwnerKind::ArmadaChart)
        .collect();
    assert_eq!(children.len(), 9, "the charts' objects, test Pods dropped");
    for o in &children {
        apply(&client, ns.name(), o.object.value(), true)
            .await
            .unwrap_or_else(|e| panic!("the API server refused {} {}: {e}", o.kind(), o.name()));
    }

    // Deploy the web chart's Deployment for real and follow it with the chart's own wait rules.
    let web = children
        .iter()
        .find(|o| o.kind() == "Deployment" && o.name() == "demo-web")
        .unwrap();
    apply(&client, ns.name(), web.object.value(), false)
        .await
        .unwrap();
    let wait: weft::api::armada::Wait =
        serde_json::from_value(web_chart["spec"]["wait"].clone()).unwrap();
    let deployments = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        ns.name(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        ),
    );
    let deadline = Instant::now() + WAIT;
    let mut seen_not_ready = false;
    loop {
        let live = serde_json::to_value(deployments.get("demo-web").await.unwrap()).unwrap();
        let result = armada::chart_readiness(Some(&wait), std::slice::from_ref(&live));
        assert!(!result.has_failed(), "{result:?}");
        if result.is_ready() {
            assert_eq!(result.ready.len(), 1);
            assert!(
                live["status"]["availableReplicas"].as_i64().unwrap_or(0) >= 1,
                "{}",
                live["status"]
            );
            break;
        }
        seen_not_ready = true;
        assert!(
            Instant::now() < deadline,
            "demo-web not ready within {WAIT:?}: {result:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        seen_not_ready,
        "a Deployment just created cannot be ready at once: the rules would be too lax"
    );
    ns.delete().await;
}

#[tokio::test]
async fn the_api_server_rejects_what_the_loader_rejects() {
    let ns = TestNamespace::new("armada-invalid").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let chart = |wait: Value, source_type: &str| {
        json!({
            "apiVersion": "armada.airshipit.org/v1alpha1", "kind": "ArmadaChart",
            "metadata": {"name": "c"},
            "spec": {"release": "c", "namespace": "demo", "source": {"type": source_type, "location": "charts/c"}, "wait": wait}
        })
    };
    for good in [
        json!({"resources": [{"type": "deployment", "min_ready": "80%"}]}),
        json!({"timeout": 30, "resources": [{"type": "job", "min_ready": 2}]}),
    ] {
        apply(&client, ns.name(), chart(good.clone(), "local"), true)
            .await
            .unwrap_or_else(|e| panic!("{good} refused: {e}"));
    }
    let bad = [
        (
            chart(
                json!({"resources": [{"type": "deployment", "min_ready": "most"}]}),
                "local",
            ),
            "min_ready",
        ),
        (
            chart(
                json!({"resources": [{"type": "deployment", "min_ready": "120%"}]}),
                "local",
            ),
            "min_ready",
        ),
        (chart(json!({}), "svn"), "spec.source.type"),
        (chart(json!({"timeout": 0}), "local"), "spec.wait.timeout"),
        (
            chart(json!({"resources": [{"type": "replicaset"}]}), "local"),
            "type",
        ),
        (chart(json!({"tiemout": 5}), "local"), "tiemout"),
    ];
    for (object, field) in bad {
        match apply(&client, ns.name(), object.clone(), true).await {
            Ok(_) => panic!("the API server accepted {}", object["spec"]),
            Err(kube::Error::Api(e)) => {
                // Server-side apply reports a field missing from the schema as a 500 "field not
                // declared in schema"; the other violations as 422 Invalid.
                assert!(matches!(e.code, 400 | 422 | 500), "{e:?}");
                assert!(e.message.contains(field), "{field} not in: {}", e.message);
            }
            Err(e) => panic!("{e}"),
        }
    }
    ns.delete().await;
}
