//! `weft tree` and `weft export` against the real control plane, after a real `weft sync`: the
//! tree reads the root's inventory ConfigMaps and the ArmadaChart's own inventory (root → owner →
//! objects); export prints the root record's configuration and Weft's resources without status,
//! server fields or ownership marks, as YAML that parses back.

use crate::support;

use kube::api::PostParams;
use kube::Api;
use serde_json::{json, Value};

use support::cluster::{self, TestNamespace};
use support::weft_cli::Weft;
use weft::api::notification::{Alert, Provider};

const CHART: &str =
    "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n";
const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${release.name}-settings\ndata:\n  mode: fast\n";

/// A repository with a plain ConfigMap and an ArmadaChart (template-free chart: one ConfigMap).
fn repo(ns: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = [
        ("charts/app/Chart.yaml", CHART.to_string()),
        ("charts/app/templates/settings.yaml", SETTINGS.to_string()),
        (
            "plain.yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n  namespace: {ns}\ndata:\n  a: \"1\"\n"
            ),
        ),
        (
            "armada.yaml",
            format!(
                "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata:\n  name: app\n  namespace: {ns}\n  labels: {{team: payments}}\nspec:\n  chart_name: app\n  release: app\n  namespace: {ns}\n  source: {{type: local, location: charts/app}}\n  wait: {{timeout: 60, resources: []}}\n"
            ),
        ),
    ];
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    dir
}

fn weft(ns: &str, args: &[&str]) -> (i32, String, String) {
    Weft::new(args).cluster().root(ns).run()
}

/// Parse `weft export`'s output back, one value per document.
fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("{e}:\n{yaml}"))
}

#[tokio::test]
async fn tree_and_export_show_what_a_sync_left_in_the_cluster() {
    let ns = TestNamespace::new("tree").await;
    let client = ns.client();
    cluster::install_crds(&client).await;
    let n = ns.name().to_string();
    let dir = repo(&n);

    let repo_path = dir.path().to_str().expect("utf-8 path");
    let (code, out, err) = weft(&n, &["sync", "--repo", repo_path, "--timeout", "90s"]);
    assert_eq!(code, 0, "{out}\n{err}");

    // The one-shot sync wrote the chart's phase and Ready condition: `weft get` shows them
    // without a daemon (before, READY was Unknown and PHASE empty).
    let (code, out, err) = Weft::new(["get", "charts", "-n", &n]).cluster().run();
    assert_eq!(code, 0, "{out}\n{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("ArmadaChart"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("True") && row.contains("deployed"), "{out}");

    // The root holds the chart, the plain ConfigMap and the namespace its ArmadaChart CRs live
    // in (created if missing, issue 49 item 4; it is also the chart's release namespace, which
    // the chart then leaves to the root); the chart holds what it rendered.
    let (code, out, err) = weft(&n, &["tree"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        out,
        format!(
            "Root/{n}/{n}\n\
             ├── ArmadaChart/{n}/app\n\
             │   └── ConfigMap/{n}/app-settings\n\
             ├── ConfigMap/{n}/plain\n\
             └── Namespace/{n}\n"
        ),
        "{err}"
    );
    let (code, out, err) = weft(&n, &["tree", "-o", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let tree: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(tree["object"], json!(format!("Root/{n}/{n}")));
    assert_eq!(
        tree["children"][0]["children"][0]["object"],
        json!(format!("ConfigMap/{n}/app-settings"))
    );

    // A root that never synced: exit 1, and the roots that did are named.
    let (code, out, err) = Weft::new(["tree", "--weft-namespace", &n, "--root-name", "nope"])
        .cluster()
        .run();
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("root nope has no inventory"), "{err}");
    assert!(
        err.contains(&format!("the roots in namespace {n}: {n}")),
        "{err}"
    );

    // Export: the record's configuration, the chart as written, a Provider and an Alert.
    let providers: Api<Provider> = ns.api();
    let provider: Provider = serde_json::from_value(json!({
        "apiVersion": "notification.weft.io/v1alpha1", "kind": "Provider",
        "metadata": {"name": "hook", "namespace": n},
        "spec": {"type": "generic", "address": "http://127.0.0.1:9/hook"},
    }))
    .expect("Provider");
    providers
        .create(&PostParams::default(), &provider)
        .await
        .expect("create Provider");
    let alerts: Api<Alert> = ns.api();
    let alert: Alert = serde_json::from_value(json!({
        "apiVersion": "notification.weft.io/v1alpha1", "kind": "Alert",
        "metadata": {"name": "all", "namespace": n},
        "spec": {"providerRef": {"name": "hook"}, "eventSources": [{"kind": "ArmadaChart", "name": "*"}]},
    }))
    .expect("Alert");
    alerts
        .create(&PostParams::default(), &alert)
        .await
        .expect("create Alert");

    let (code, out, err) = weft(&n, &["export", "-n", &n]);
    assert_eq!(code, 0, "{out}\n{err}");
    let docs = documents(&out);
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        vec!["ConfigMap", "ArmadaChart", "Provider", "Alert"],
        "{out}"
    );
    let record = &docs[0];
    assert_eq!(record["metadata"]["name"], json!(format!("weft-root-{n}")));
    let canonical = std::fs::canonicalize(dir.path()).expect("canonical");
    assert_eq!(
        record["data"]["repository"],
        json!(canonical.display().to_string()),
        "{out}"
    );
    // Outcome keys are state, not configuration.
    assert!(record["data"].get("ready").is_none(), "{out}");
    let chart = &docs[1];
    assert_eq!(
        chart["metadata"]["labels"],
        json!({"team": "payments"}),
        "{out}"
    );
    assert_eq!(chart["spec"]["release"], json!("app"));
    assert!(chart.get("status").is_none(), "{out}");
    for doc in &docs {
        let meta = doc["metadata"].as_object().expect("metadata");
        for server_field in [
            "uid",
            "resourceVersion",
            "managedFields",
            "creationTimestamp",
        ] {
            assert!(!meta.contains_key(server_field), "{server_field} in {doc}");
        }
        let labels = doc["metadata"]["labels"].as_object();
        assert!(
            labels.is_none_or(|l| !l.contains_key("weft.io/owner")),
            "{doc}"
        );
    }
    assert_eq!(docs[2]["spec"]["type"], json!("generic"));
    assert_eq!(docs[3]["spec"]["providerRef"]["name"], json!("hook"));

    ns.delete().await;
}
