//! The flag root becomes a Root object (issue 41 item 5, `weft run --root-object`), on the real
//! control plane with real `weft` processes:
//!
//! - a cluster Weft already manages (synced by the old path: its root record, inventory and
//!   owner labels) moves to the Root `--root-name` of Weft's namespace with zero writes to the
//!   objects it manages — a manifest without a namespace included — and nothing deleted; the
//!   record's pending `weft trigger` request is carried over and answered;
//! - the Root's spec is the root from then on: a daemon started with another `--repo` refuses
//!   to start, naming both;
//! - a suspended record makes a suspended Root; `weft sync root NAME -n NS` refuses it, and
//!   runs its spec once when resumed.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use support::cluster::{install_crds, TestNamespace};
use support::conditions::status_reason;
use support::daemon::{Daemon, DaemonOptions};
use support::manifests::configmap;
use support::repo_dir::Repo;
use support::wait::wait_for;
use support::weft_cli::Weft;
use weft::api::root::Root;

const WITHIN: Duration = Duration::from_secs(120);

/// `weft` on the test cluster, with the test's root (Weft's namespace and root name `ns`).
fn weft(ns: &str, args: &[&str]) -> (i32, String, String) {
    Weft::new(args)
        .cluster()
        .root(ns)
        .env_remove("WEFT_REPO")
        .env_remove("WEFT_ROOT_NAME")
        .run()
}

/// `weft sync root NS -n NS` (the test's Root is named as its namespace).
fn sync_root(ns: &str) -> (i32, String, String) {
    Weft::new(["sync", "root", ns, "-n", ns, "--weft-namespace", ns])
        .cluster()
        .run()
}

/// The `resourceVersion` of every ConfigMap of `ns`, and of `default/<loose>`.
async fn versions(client: &Client, ns: &str, loose: &str) -> BTreeMap<String, String> {
    let mut all: BTreeMap<String, String> = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list ConfigMaps")
        .items
        .iter()
        .filter(|c| c.name_any() != "kube-root-ca.crt")
        .map(|c| (c.name_any(), c.resource_version().unwrap_or_default()))
        .collect();
    let loose_cm = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .get(loose)
        .await
        .expect("the manifest without a namespace is in `default`");
    all.insert(
        format!("default/{loose}"),
        loose_cm.resource_version().unwrap_or_default(),
    );
    all
}

/// A repository of two ConfigMaps of `ns` and one without a namespace (`loose`).
fn repository(ns: &str, loose: &str) -> Repo {
    let repo = Repo::new();
    repo.write("a.yaml", &configmap(ns, "a", "1"));
    repo.write("b.yaml", &configmap(ns, "b", "2"));
    repo.write(
        "loose.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {loose}\ndata:\n  value: loose\n"
        ),
    );
    repo
}

#[tokio::test]
async fn a_managed_cluster_moves_to_a_root_object_writing_none_of_its_objects() {
    let ns = TestNamespace::new("migrate").await;
    let client = ns.client();
    install_crds(&client).await;
    let name = ns.name().to_string();
    let loose = format!("loose-{name}");
    let repo = repository(&name, &loose);
    let repo_path = repo.path().to_str().unwrap().to_string();

    // The old path: a one-shot sync writes the objects and the inventory (and the root's
    // Root, which a cluster of an older Weft does not have: deleted here), and the root record
    // with the repository it synced, as the old `weft sync` wrote it (field manager
    // `weft-source`).
    let (code, out, err) = weft(&name, &["sync", "--repo", &repo_path]);
    assert_eq!(code, 0, "weft sync:\n{out}\n{err}");
    let roots: Api<Root> = Api::namespaced(client.clone(), &name);
    roots
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the Root the sync made");
    let record = format!("weft-root-{name}");
    let canonical = std::fs::canonicalize(repo.path()).unwrap();
    let records = Api::<ConfigMap>::namespaced(client.clone(), &name);
    records
        .patch(
            &record,
            &PatchParams::apply("weft-source"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": record, "labels": {"weft.io/root": name}},
                "data": {"repository": canonical.display().to_string(), "path": ""},
            })),
        )
        .await
        .expect("the root record");
    // A `weft trigger` request no daemon answered yet, as the old CLI wrote it on the record.
    let requested = "2026-12-05T01:02:03Z";
    records
        .patch(
            &record,
            &PatchParams::apply("weft-trigger"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": record, "annotations": {"weft.io/requested-at": requested}},
            })),
        )
        .await
        .expect("annotate the root record");
    let before = versions(&client, &name, &loose).await;
    assert!(
        before.contains_key("a") && before.contains_key("b"),
        "{before:?}"
    );

    let mut opts = DaemonOptions::new(&repo_path, &name);
    opts.extra = vec![
        "--root-object".into(),
        "--watch-namespaces".into(),
        name.clone(),
    ];
    let mut d = Daemon::start(opts);
    let root = wait_for(
        "the flag root's Root object Ready, having answered the record's request",
        WITHIN,
        &d,
        async || {
            let root = roots.get_opt(&name).await.ok().flatten()?;
            let status = root.status.as_ref()?;
            let ready = status_reason(&root, "Ready")?;
            (ready == ("True".into(), "ReconciliationSucceeded".into())
                && status.last_handled_requested_at.as_deref() == Some(requested))
            .then_some(root)
        },
    )
    .await;
    assert_eq!(
        root.spec.source.url,
        std::fs::canonicalize(repo.path())
            .unwrap()
            .display()
            .to_string()
    );
    assert!(!root.spec.suspend);
    assert_eq!(
        root.status
            .as_ref()
            .unwrap()
            .inventory
            .as_ref()
            .map(|i| i.objects),
        Some(3)
    );

    // Zero writes to what it manages, its inventory and the record: no resourceVersion moved,
    // nothing deleted (the object without a namespace stayed in `default`).
    let after = versions(&client, &name, &loose).await;
    assert_eq!(
        before,
        after,
        "the migration wrote or deleted an object:\n{}",
        d.logs()
    );
    d.terminate();

    // The Root is the root now: a daemon of another repository does not switch it silently.
    let other = repository(&name, &loose);
    let other_path = other.path().to_str().unwrap().to_string();
    let (code, out, err) = Weft::new(["run", "--repo", &other_path, "--root-object"])
        .args(["--listen", "127.0.0.1:0", "--hooks-listen", "127.0.0.1:0"])
        .cluster()
        .root(&name)
        .env_remove("WEFT_REPO")
        .run();
    assert_eq!(
        code, 1,
        "a daemon of another repository started:\n{out}\n{err}"
    );
    assert!(
        err.contains(&format!("refusing to start: the Root {name}/{name} syncs"))
            && err.contains("--switch-repository"),
        "{err}"
    );
    assert_eq!(before, versions(&client, &name, &loose).await);

    let _ = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .delete(&loose, &DeleteParams::default())
        .await;
}

#[tokio::test]
async fn a_suspended_record_makes_a_suspended_root_and_weft_sync_root_runs_its_spec_once() {
    let ns = TestNamespace::new("migrate-suspend").await;
    let client = ns.client();
    install_crds(&client).await;
    let name = ns.name().to_string();
    let loose = format!("loose-{name}");
    let repo = repository(&name, &loose);
    let repo_path = repo.path().to_str().unwrap().to_string();
    let (code, out, err) = weft(&name, &["sync", "--repo", &repo_path]);
    assert_eq!(code, 0, "weft sync:\n{out}\n{err}");
    let (code, out, err) = weft(&name, &["suspend", "--message", "freeze"]);
    assert_eq!(code, 0, "weft suspend:\n{out}\n{err}");

    let mut opts = DaemonOptions::new(&repo_path, &name);
    opts.extra = vec![
        "--root-object".into(),
        "--watch-namespaces".into(),
        name.clone(),
    ];
    let mut d = Daemon::start(opts);
    let roots: Api<Root> = Api::namespaced(client.clone(), &name);
    wait_for(
        "the Root, suspended as its record",
        WITHIN,
        &d,
        async || {
            let root = roots.get_opt(&name).await.ok().flatten()?;
            (root.spec.suspend
                && status_reason(&root, "Reconciling")
                    == Some(("False".into(), "Suspended".into())))
            .then_some(())
        },
    )
    .await;
    d.terminate();

    // One-shot from the Root's spec: refused while suspended, then applies what was added.
    repo.write("c.yaml", &configmap(&name, "c", "3"));
    let (code, out, err) = sync_root(&name);
    assert_eq!(code, 1, "weft sync root of a suspended Root:\n{out}\n{err}");
    assert!(
        err.contains("is suspended") && err.contains("nothing was applied"),
        "{err}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    assert!(cms.get_opt("c").await.unwrap().is_none());
    roots
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .expect("resume the Root");
    let (code, out, err) = sync_root(&name);
    assert_eq!(code, 0, "weft sync root:\n{out}\n{err}");
    assert!(
        out.contains(&format!("Root {name}/{name}: synced")),
        "{out}"
    );
    assert!(cms.get_opt("c").await.unwrap().is_some(), "{out}\n{err}");
    // The manifest without a namespace stays in `default` (the Root's annotation), not moved.
    assert!(cms.get_opt(&loose).await.unwrap().is_none(), "{out}");
    assert!(Api::<ConfigMap>::namespaced(client.clone(), "default")
        .get_opt(&loose)
        .await
        .unwrap()
        .is_some());
    let _ = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .delete(&loose, &DeleteParams::default())
        .await;
}

/// A template-free chart (no helm): one ConfigMap whose `version` comes from the values.
const CHART: &str =
    "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n";
const VALUES: &str = "version: \"1\"\n";
const TEMPLATE: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${release.name}\ndata:\n  version: \"${version}\"\n";

#[tokio::test]
async fn a_roots_armada_values_are_merged_over_the_charts_they_name() {
    let ns = TestNamespace::new("migrate-values").await;
    let client = ns.client();
    install_crds(&client).await;
    let name = ns.name().to_string();
    let repo = Repo::new();
    repo.write("charts/app/Chart.yaml", CHART);
    repo.write("charts/app/values.yaml", VALUES);
    repo.write("charts/app/templates/cm.yaml", TEMPLATE);
    repo.write(
        "armada.yaml",
        &format!(
            "---\nschema: armada/Chart/v1\nmetadata: {{schema: metadata/Document/v1, name: api}}\ndata:\n  chart_name: app\n  release: api\n  namespace: {name}\n  source: {{type: local, location: charts/app}}\n  values: {{}}\n  wait: {{timeout: 30, resources: []}}\n---\nschema: armada/ChartGroup/v1\nmetadata: {{schema: metadata/Document/v1, name: apps}}\ndata:\n  chart_group: [api]\n---\nschema: armada/Manifest/v1\nmetadata: {{schema: metadata/Document/v1, name: site}}\ndata:\n  release_prefix: site\n  chart_groups: [apps]\n"
        ),
    );
    repo.write(
        "site/override.yaml",
        "---\nschema: armada/Chart/v1\nmetadata: {schema: metadata/Document/v1, name: api}\ndata:\n  values: {version: \"2\"}\n",
    );
    let roots: Api<Root> = Api::namespaced(client.clone(), &name);
    let root: Root = serde_json::from_value(json!({
        "apiVersion": "weft.io/v1alpha1", "kind": "Root",
        "metadata": {"name": name, "namespace": name},
        "spec": {
            "source": {"url": repo.path().to_str().unwrap()},
            "armadaValues": ["site/override.yaml"],
        },
    }))
    .unwrap();
    roots
        .patch(
            &name,
            &PatchParams::apply("weft-test").validation_strict(),
            &Patch::Apply(&root),
        )
        .await
        .expect("the API server takes spec.armadaValues");

    let (code, out, err) = sync_root(&name);
    assert_eq!(code, 0, "weft sync root:\n{out}\n{err}");
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &name)
        .get("site-api")
        .await
        .unwrap_or_else(|e| panic!("the chart's ConfigMap: {e}\n{out}\n{err}"));
    assert_eq!(
        cm.data
            .unwrap_or_default()
            .get("version")
            .map(String::as_str),
        Some("2"),
        "the override file named by spec.armadaValues was merged"
    );
}
