//! The apply engine against the real control plane (tests/control-plane): one `pass::run_pass`
//! per step, with a client that counts the API calls, so "only that object written" and "zero
//! writes" are measured, not assumed. Each test has its own namespace, sync root and inventory.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use support::cluster::{self, TestNamespace};
use support::manifests::{configmap, deployment, weavecloud};
use support::passes::{pass, snapshot};
use weft::apply::calls::CallCounts;
use weft::apply::changeset::Action;
use weft::pass::{self, PassInput, PassResult, PassSettings};
use weft::render::Owner;
use weft::source::Snapshot;

async fn counting_client() -> (Client, CallCounts) {
    cluster::counting_client().await
}

fn options(ns: &str) -> PassSettings {
    cluster::pass_settings(ns)
}

fn service(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector: {{app: {name}}}\n  ports:\n    - port: 80\n      targetPort: 8080\n"
    )
}

/// A CRD of `group` for `kind` (`plural`), one served and stored version `v1` that keeps any
/// field; `scope` is `Namespaced` or `Cluster`.
fn crd(group: &str, kind: &str, plural: &str, scope: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .expect("CRD")
}

fn assert_ok(r: &PassResult) {
    assert!(
        r.succeeded(),
        "pass failed: {}\n{:#?}",
        r.error.as_ref().map(|e| e.to_string()).unwrap_or_default(),
        r.changes
    );
}

fn actions(r: &PassResult) -> BTreeMap<String, (Action, Option<String>)> {
    r.changes
        .entries
        .iter()
        .map(|c| (c.object.to_string(), (c.action, c.reason.clone())))
        .collect()
}

async fn configmap_exists(client: &Client, ns: &str, name: &str) -> bool {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.get_opt(name).await.expect("get").is_some()
}

fn small_repo(ns: &str) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for i in 0..6 {
        files.insert(
            format!("config/cm-{i}.yaml"),
            configmap(ns, &format!("cm-{i}"), "one"),
        );
    }
    files.insert("app/deployment.yaml".into(), deployment(ns, "web", ""));
    files.insert("app/service.yaml".into(), service(ns, "web"));
    files
}

#[tokio::test]
async fn second_pass_over_an_unchanged_repository_makes_zero_writes() {
    let ns = TestNamespace::new("apply-noop").await;
    let (client, counts) = counting_client().await;
    let opts = options(ns.name());
    let files = small_repo(ns.name());

    let first = pass(&client, &files, &opts).await;
    assert_ok(&first);
    assert_eq!(first.changes.summary().created, 8, "{:#?}", first.changes);

    let before = counts.snapshot();
    let second = pass(&client, &files, &opts).await;
    assert_ok(&second);
    let used = counts.snapshot() - before;
    assert_eq!(used.writes, 0, "a no-op pass wrote: {:#?}", second.changes);
    assert_eq!(
        second.changes.summary().unchanged,
        8,
        "{:#?}",
        second.changes
    );
    assert!(!second.changes.has_changes());
    ns.delete().await;
}

/// A root of 4,100 ConfigMaps: the live state is listed in three pages of 2,000 (the next page
/// asked for while the one before is decided). Every page counts: an object deleted on the
/// second page is created again and one edited on the third is written back, nothing else.
#[tokio::test]
async fn a_no_op_pass_reads_every_page_of_a_list() {
    const OBJECTS: usize = 4100;
    let ns = TestNamespace::new("apply-pages").await;
    let n = ns.name();
    let (client, counts) = counting_client().await;
    let opts = options(n);
    let mut files = BTreeMap::new();
    for file in 0..OBJECTS / 100 {
        let docs: Vec<String> = (file * 100..(file + 1) * 100)
            .map(|i| configmap(n, &format!("cm-{i:05}"), "one"))
            .collect();
        files.insert(format!("cms/f{file:02}.yaml"), docs.join("---\n"));
    }
    let first = pass(&client, &files, &opts).await;
    assert_ok(&first);
    assert_eq!(first.changes.summary().created, OBJECTS);

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), n);
    api.delete("cm-02050", &DeleteParams::default())
        .await
        .expect("delete cm-02050");
    let edit = json!({"data": {"value": "edited"}});
    api.patch("cm-04099", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("edit cm-04099");
    let before = counts.snapshot();
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    let used = counts.snapshot() - before;
    assert_eq!(used.writes, 2, "{:#?}", r.changes.summary());
    let a = actions(&r);
    assert_eq!(a[&format!("ConfigMap/{n}/cm-02050")].0, Action::Created);
    assert_eq!(
        a[&format!("ConfigMap/{n}/cm-04099")],
        (Action::Configured, Some("drifted: /data".into()))
    );
    assert_eq!(r.changes.summary().unchanged, OBJECTS - 2);
    assert_eq!(
        api.get("cm-04099").await.expect("cm-04099").data.unwrap()["value"],
        "one"
    );
    ns.delete().await;
}

#[tokio::test]
async fn changing_one_file_writes_only_that_object_and_drift_is_corrected() {
    let ns = TestNamespace::new("apply-one").await;
    let (client, counts) = counting_client().await;
    let opts = options(ns.name());
    let mut files = small_repo(ns.name());
    assert_ok(&pass(&client, &files, &opts).await);

    files.insert(
        "config/cm-3.yaml".into(),
        configmap(ns.name(), "cm-3", "two"),
    );
    let before = counts.snapshot();
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    assert_eq!((counts.snapshot() - before).writes, 1, "{:#?}", r.changes);
    let a = actions(&r);
    assert_eq!(
        a[&format!("ConfigMap/{}/cm-3", ns.name())],
        (Action::Configured, Some("changed".into()))
    );
    assert_eq!(r.changes.summary().unchanged, 7);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let live = api.get("cm-3").await.expect("cm-3");
    assert_eq!(live.data.unwrap()["value"], "two");

    // Someone edits an applied field with another field manager: that is drift, and the next
    // pass writes that one object back.
    let edit = json!({"data": {"value": "edited"}});
    api.patch("cm-1", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("edit");
    let before = counts.snapshot();
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    assert_eq!((counts.snapshot() - before).writes, 1, "{:#?}", r.changes);
    assert_eq!(
        actions(&r)[&format!("ConfigMap/{}/cm-1", ns.name())],
        (Action::Configured, Some("drifted: /data".into()))
    );
    assert_eq!(
        api.get("cm-1").await.expect("cm-1").data.unwrap()["value"],
        "one"
    );
    ns.delete().await;
}

#[tokio::test]
async fn removed_file_is_pruned_but_foreign_and_protected_objects_survive() {
    let ns = TestNamespace::new("apply-prune").await;
    let name = ns.name().to_string();
    let (client, _) = counting_client().await;
    let opts = options(&name);
    let mut files = small_repo(&name);
    files.insert(
        "config/protected.yaml".into(),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: protected\n  namespace: {name}\n  annotations:\n    weft.io/prune: disabled\ndata: {{a: b}}\n"
        ),
    );
    files.insert(
        "config/recreated.yaml".into(),
        configmap(&name, "recreated", "x"),
    );
    let first = pass(&client, &files, &opts).await;
    assert_ok(&first);

    // A foreign object with the owner labels copied from one of ours.
    let owner_id = Owner::root(&name, &name).id().0;
    let labels = json!({"app.kubernetes.io/managed-by": "weft", "weft.io/owner": owner_id});
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "foreign", "namespace": name, "labels": labels}, "data": {"mine": "yes"}});
    api.patch(
        "foreign",
        &PatchParams::apply("someone-else"),
        &Patch::Apply(&foreign),
    )
    .await
    .expect("foreign");
    // And one of ours deleted and re-created by someone else, labels copied.
    api.delete("recreated", &DeleteParams::default())
        .await
        .expect("delete");
    let again = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "recreated", "namespace": name, "labels": labels}, "data": {"mine": "yes"}});
    api.patch(
        "recreated",
        &PatchParams::apply("someone-else"),
        &Patch::Apply(&again),
    )
    .await
    .expect("recreate");

    files.remove("config/cm-5.yaml");
    files.remove("config/protected.yaml");
    files.remove("config/recreated.yaml");
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    let a = actions(&r);
    assert_eq!(
        a[&format!("ConfigMap/{name}/cm-5")].0,
        Action::Deleted,
        "{a:#?}"
    );
    assert_eq!(
        a[&format!("ConfigMap/{name}/protected")],
        (
            Action::Skipped,
            Some("not pruned: weft.io/prune: disabled".into())
        )
    );
    assert_eq!(
        a[&format!("ConfigMap/{name}/recreated")],
        (
            Action::Skipped,
            Some("not pruned: its weft.io/owner label was not set by weft (copied from another object?)".into())
        )
    );
    assert!(!a.contains_key(&format!("ConfigMap/{name}/foreign")));
    assert!(!configmap_exists(&client, &name, "cm-5").await);
    assert!(configmap_exists(&client, &name, "protected").await);
    assert!(configmap_exists(&client, &name, "recreated").await);
    assert!(configmap_exists(&client, &name, "foreign").await);
    assert!(configmap_exists(&client, &name, "cm-4").await);

    // The skipped objects left the inventory: the next pass has nothing to say about them.
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    assert!(!r.changes.has_changes(), "{:#?}", r.changes);
    assert_eq!(r.changes.summary().skipped, 0, "{:#?}", r.changes);
    ns.delete().await;
}

/// `small_repo` and 20 more ConfigMaps `bulk-<i>` (28 objects).
fn bulk_repo(ns: &str) -> BTreeMap<String, String> {
    let mut files = small_repo(ns);
    for i in 0..20 {
        files.insert(
            format!("bulk/bulk-{i}.yaml"),
            configmap(ns, &format!("bulk-{i}"), "one"),
        );
    }
    files
}

fn without_bulk(files: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    files
        .iter()
        .filter(|(k, _)| !k.starts_with("bulk/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A pass over `files` as git revision `revision`.
async fn pass_at(
    client: &Client,
    files: &BTreeMap<String, String>,
    revision: &str,
    opts: &PassSettings,
) -> PassResult {
    let snapshot = Snapshot {
        revision: Some(revision.to_string()),
        ..snapshot(files)
    };
    pass::run_pass(client, snapshot, opts, &PassInput::default(), &|_| {}).await
}

#[tokio::test]
async fn the_prune_guard_stops_a_mass_deletion_and_each_override_allows_it_once() {
    let ns = TestNamespace::new("apply-guard").await;
    let name = ns.name().to_string();
    let (client, _) = counting_client().await;
    let opts = options(&name);
    let files = bulk_repo(&name);
    let rev1 = "1111111111111111111111111111111111111111";
    let rev2 = "2222222222222222222222222222222222222222";
    assert_ok(&pass_at(&client, &files, rev1, &opts).await);

    // 20 of the pass's 28 objects: refused, nothing deleted, and the error says how to allow it.
    let r = pass_at(&client, &without_bulk(&files), rev2, &opts).await;
    let err = r
        .error
        .as_ref()
        .expect("the guard must stop the pass")
        .to_string();
    assert!(
        err.contains("refusing to prune 20 of the 28 objects in this pass's inventories"),
        "{err}"
    );
    assert!(
        err.contains(&format!("weft.io/force-prune: {rev2}")),
        "{err}"
    );
    assert_eq!(r.changes.summary().deleted, 0, "{:#?}", r.changes);
    assert!(configmap_exists(&client, &name, "bulk-0").await);

    // A small change in the same state is never blocked: one object leaves git, bulk stays.
    let mut one_less = files.clone();
    one_less.remove("config/cm-5.yaml");
    let r = pass_at(&client, &one_less, rev2, &opts).await;
    assert_ok(&r);
    assert_eq!(r.changes.summary().deleted, 1, "{:#?}", r.changes);

    // The annotation allows the revision it names, and no other.
    let inventories: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let inventory = weft::apply::inventory::configmap_name(&Owner::root(&name, &name));
    let annotate =
        |value: &str| json!({"metadata": {"annotations": {"weft.io/force-prune": value}}});
    inventories
        .patch(
            &inventory,
            &PatchParams::default(),
            &Patch::Merge(annotate(&rev1[..7])),
        )
        .await
        .expect("annotate");
    let r = pass_at(&client, &without_bulk(&one_less), rev2, &opts).await;
    assert!(
        r.error.is_some(),
        "an annotation for another revision allowed the pass"
    );
    assert!(configmap_exists(&client, &name, "bulk-0").await);
    inventories
        .patch(
            &inventory,
            &PatchParams::default(),
            &Patch::Merge(annotate(&rev2[..8])),
        )
        .await
        .expect("annotate");
    let r = pass_at(&client, &without_bulk(&one_less), rev2, &opts).await;
    assert_ok(&r);
    assert_eq!(r.changes.summary().deleted, 20, "{:#?}", r.changes);
    assert!(!configmap_exists(&client, &name, "bulk-0").await);

    // The bulk comes back; 15 of it are deleted by hand, then it leaves git: only the 5 that
    // still exist would be deleted, and that small change passes the guard.
    let back = pass_at(&client, &files, rev1, &opts).await;
    assert_ok(&back);
    for i in 0..15 {
        inventories
            .delete(&format!("bulk-{i}"), &DeleteParams::default())
            .await
            .expect("delete by hand");
    }
    let r = pass_at(&client, &without_bulk(&files), "3333333", &opts).await;
    assert_ok(&r);
    assert_eq!(r.changes.summary().deleted, 5, "{:#?}", r.changes);

    // --force-prune (the one-shot `weft trigger --force-prune` sets it for one pass).
    assert_ok(&pass_at(&client, &files, rev1, &opts).await);
    let forced = PassSettings {
        force_prune: true,
        ..opts.clone()
    };
    let r = pass_at(&client, &without_bulk(&files), "4444444", &forced).await;
    assert_ok(&r);
    assert_eq!(r.changes.summary().deleted, 20, "{:#?}", r.changes);
    ns.delete().await;
}

/// A kind that is not served for a while (an aggregated API down, a CRD version switched off)
/// keeps its objects in the inventory: they are pruned once it is served again.
#[tokio::test]
async fn an_unserved_kind_keeps_its_objects_in_the_inventory() {
    let ns = TestNamespace::new("apply-unserved").await;
    let name = ns.name().to_string();
    let (client, _) = counting_client().await;
    let opts = options(&name);
    let group = format!("{name}.weft.test");
    let crd_name = format!("gizmos.{group}");
    let crd = crd(&group, "Gizmo", "gizmos", "Namespaced");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let served = |on: bool| {
        json!({"spec": {"versions": [{"name": "v1", "served": on, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
    };
    crds.patch(
        &crd_name,
        &PatchParams::apply("weft-test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("CRD created outside Weft");
    let mut files = small_repo(&name);
    files.insert(
        "gizmo.yaml".into(),
        format!("apiVersion: {group}/v1\nkind: Gizmo\nmetadata:\n  name: g\n  namespace: {name}\n"),
    );
    // The CRD needs a moment to be established (and discovery to serve it: a minute at most,
    // however loaded the machine). A timeout shows the last pass's error.
    let within = Duration::from_secs(60);
    let last = std::sync::Mutex::new(String::new());
    let last_error = || {
        format!(
            "(no daemon: the passes run in this test) last pass: {}",
            last.lock().unwrap()
        )
    };
    support::wait::wait_for(
        "the Gizmo applied once its CRD is served",
        within,
        &last_error,
        async || {
            let r = pass(&client, &files, &opts).await;
            *last.lock().unwrap() = r.error.as_ref().map(|e| e.to_string()).unwrap_or_default();
            r.succeeded().then_some(())
        },
    )
    .await;

    crds.patch(
        &crd_name,
        &PatchParams::default(),
        &Patch::Merge(served(false)),
    )
    .await
    .expect("stop serving");
    files.remove("gizmo.yaml");
    let gizmo = format!("Gizmo/{name}/g");
    // Discovery may lag the CRD change for a moment; wait until the pass sees the kind gone.
    let why = support::wait::wait_for(
        "a pass seeing the Gizmo's kind unserved",
        within,
        &last_error,
        async || {
            let r = pass(&client, &files, &opts).await;
            assert_ok(&r);
            match actions(&r).get(&gizmo).cloned() {
                Some((Action::Skipped, Some(why))) => Some(why),
                other => {
                    assert!(
                        other.is_none(),
                        "the gizmo was pruned while its kind was still served: {:#?}",
                        r.changes
                    );
                    None
                }
            }
        },
    )
    .await;
    assert!(why.contains("kept in the inventory"), "{why}");

    crds.patch(
        &crd_name,
        &PatchParams::default(),
        &Patch::Merge(served(true)),
    )
    .await
    .expect("serve again");
    support::wait::wait_for(
        "the Gizmo pruned once its kind is served again",
        within,
        &last_error,
        async || {
            let r = pass(&client, &files, &opts).await;
            assert_ok(&r);
            (actions(&r).get(&gizmo).map(|a| a.0) == Some(Action::Deleted)).then_some(())
        },
    )
    .await;
    crds.delete(&crd_name, &DeleteParams::default())
        .await
        .expect("delete CRD");
    ns.delete().await;
}

#[tokio::test]
async fn nothing_is_pruned_after_a_load_or_render_error() {
    let ns = TestNamespace::new("apply-broken").await;
    let name = ns.name().to_string();
    let (client, counts) = counting_client().await;
    let opts = options(&name);
    let mut files = small_repo(&name);
    assert_ok(&pass(&client, &files, &opts).await);

    // cm-5 leaves the repository in the same commit that breaks a file.
    files.remove("config/cm-5.yaml");
    files.insert(
        "config/broken.yaml".into(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n".into(),
    );
    let before = counts.snapshot();
    let r = pass(&client, &files, &opts).await;
    let err = r
        .error
        .as_ref()
        .expect("a broken file fails the pass")
        .to_string();
    assert!(err.contains("config/broken.yaml"), "{err}");
    assert_eq!((counts.snapshot() - before).writes, 0);
    assert!(r.changes.is_empty());
    assert!(configmap_exists(&client, &name, "cm-5").await);

    // A render error: a chart whose local source is not in the repository.
    files.remove("config/broken.yaml");
    files.insert(
        "armada/chart.yaml".into(),
        format!(
            "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata:\n  name: missing\n  namespace: {name}\nspec:\n  chart_name: missing\n  release: missing\n  namespace: {name}\n  source:\n    type: local\n    location: charts/does-not-exist\n"
        ),
    );
    let before = counts.snapshot();
    let r = pass(&client, &files, &opts).await;
    let err = r
        .error
        .as_ref()
        .expect("a render error fails the pass")
        .to_string();
    assert!(err.contains("nothing was applied or pruned"), "{err}");
    assert_eq!((counts.snapshot() - before).writes, 0);
    assert!(configmap_exists(&client, &name, "cm-5").await);
    ns.delete().await;
}

#[tokio::test]
async fn a_lost_inventory_is_rebuilt_from_labels_weft_set() {
    let ns = TestNamespace::new("apply-lost").await;
    let name = ns.name().to_string();
    let (client, _) = counting_client().await;
    let opts = options(&name);
    let mut files = small_repo(&name);
    assert_ok(&pass(&client, &files, &opts).await);
    let owner = Owner::root(&name, &name);
    let owner_id = owner.id().0;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "foreign", "namespace": name, "labels": {"weft.io/owner": owner_id}}, "data": {}});
    api.patch(
        "foreign",
        &PatchParams::apply("someone-else"),
        &Patch::Apply(&foreign),
    )
    .await
    .expect("foreign");
    api.delete(
        &weft::apply::inventory::configmap_name(&owner),
        &DeleteParams::default(),
    )
    .await
    .expect("delete the inventory");

    files.remove("config/cm-0.yaml");
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    assert_eq!(
        actions(&r)[&format!("ConfigMap/{name}/cm-0")].0,
        Action::Deleted
    );
    assert!(!configmap_exists(&client, &name, "cm-0").await);
    assert!(configmap_exists(&client, &name, "foreign").await);
    assert!(
        configmap_exists(
            &client,
            &name,
            &weft::apply::inventory::configmap_name(&owner)
        )
        .await
    );
    ns.delete().await;
}

/// Issue 14 item 6: two installations with the default `--root-name` in different namespaces
/// used to share one owner id, so one whose inventory was lost adopted (and pruned) the other's
/// objects. The root identity now includes Weft's namespace.
#[tokio::test]
async fn two_installations_with_the_same_root_name_never_adopt_each_other_s_objects() {
    let a_ns = TestNamespace::new("apply-inst-a").await;
    let b_ns = TestNamespace::new("apply-inst-b").await;
    let (a, b) = (a_ns.name().to_string(), b_ns.name().to_string());
    let (client, _) = counting_client().await;
    let opts_a = PassSettings {
        root_name: "weft".into(),
        ..options(&a)
    };
    let opts_b = PassSettings {
        root_name: "weft".into(),
        force_prune: true,
        ..options(&b)
    };
    assert_ne!(
        Owner::root(&a, "weft").id(),
        Owner::root(&b, "weft").id(),
        "the same root name in two namespaces must be two owners"
    );
    assert_ok(&pass(&client, &small_repo(&a), &opts_a).await);
    // Installation B has never stored an inventory: it is rebuilt from the cluster, and must not
    // find A's objects; with --force-prune and a repository of its own, it prunes none of them.
    let mut b_files = BTreeMap::new();
    b_files.insert("config/b.yaml".to_string(), configmap(&b, "b-only", "x"));
    let r = pass(&client, &b_files, &opts_b).await;
    assert_ok(&r);
    assert!(
        !actions(&r)
            .values()
            .any(|(action, _)| *action == Action::Deleted),
        "B pruned something: {:?}",
        actions(&r)
    );
    for i in 0..6 {
        assert!(configmap_exists(&client, &a, &format!("cm-{i}")).await);
    }
    a_ns.delete().await;
    b_ns.delete().await;
}

/// A namespaced CRD of version `v1` as a repository file, whose `spec` has one integer field
/// `size` (and no other: its schema preserves no unknown field).
fn sized_crd(group: &str, kind: &str, plural: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{kind: {kind}, plural: {plural}}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {{type: integer}}
"#
    )
}

/// The custom resources of `group/v1` `kind` in `namespace`.
fn custom_api(
    client: &Client,
    namespace: &str,
    group: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(client.clone(), namespace, &ar)
}

#[tokio::test]
async fn a_crd_and_its_custom_resources_in_one_pass() {
    let ns = TestNamespace::new("apply-crd").await;
    let name = ns.name().to_string();
    let (client, counts) = counting_client().await;
    let opts = options(&name);
    // A group of its own, so that parallel tests and reruns do not meet.
    let group = format!("{name}.weft.test");
    let crd_name = format!("gadgets.{group}");
    let mut files = BTreeMap::new();
    files.insert(
        "crd.yaml".to_string(),
        sized_crd(&group, "Gadget", "gadgets"),
    );
    for i in 0..3 {
        files.insert(
            format!("gadgets/g{i}.yaml"),
            format!("apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: g{i}\n  namespace: {name}\nspec:\n  size: {i}\n"),
        );
    }
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    assert_eq!(r.changes.summary().created, 4, "{:#?}", r.changes);
    let gadgets = custom_api(&client, &name, &group, "Gadget", "gadgets");
    let g2 = gadgets.get("g2").await.expect("g2");
    assert_eq!(g2.data["spec"]["size"], 2);

    let before = counts.snapshot();
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    assert_eq!((counts.snapshot() - before).writes, 0, "{:#?}", r.changes);

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(&crd_name, &DeleteParams::default())
        .await
        .expect("delete CRD");
    ns.delete().await;
}

/// An unknown field is an error naming the object and the field, and saying it is the document's
/// to fix, for a kind of the API server's own (applied with `fieldValidation=Ignore`: the typed
/// apply refuses the field whatever the directive) and for a custom resource (`Strict`).
#[tokio::test]
async fn an_unknown_field_is_an_error_for_a_builtin_kind_and_a_custom_resource() {
    let ns = TestNamespace::new("apply-fields").await;
    let name = ns.name().to_string();
    let (client, _) = counting_client().await;
    let opts = options(&name);
    let group = format!("{name}.weft.test");
    let crd_name = format!("gizmos.{group}");
    let mut files = BTreeMap::new();
    files.insert("crd.yaml".to_string(), sized_crd(&group, "Gizmo", "gizmos"));
    assert_ok(&pass(&client, &files, &opts).await);
    files.insert(
        "bad/cm.yaml".into(),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: odd\n  namespace: {name}\ndata:\n  a: b\nextra: x\n"),
    );
    files.insert(
        "bad/gizmo.yaml".into(),
        format!("apiVersion: {group}/v1\nkind: Gizmo\nmetadata:\n  name: odd\n  namespace: {name}\nspec:\n  size: 1\n  colour: red\n"),
    );
    let r = pass(&client, &files, &opts).await;
    let err = r.error.as_ref().expect("unknown fields").to_string();
    assert!(err.contains(&format!("ConfigMap/{name}/odd")), "{err}");
    assert!(
        err.contains(".extra: field not declared in schema"),
        "{err}"
    );
    assert!(err.contains(&format!("Gizmo/{name}/odd")), "{err}");
    assert!(
        err.contains(".spec.colour: field not declared in schema"),
        "{err}"
    );
    assert!(!err.contains("check its health"), "{err}");
    assert!(err.contains("correct its name or remove it"), "{err}");
    assert!(!configmap_exists(&client, &name, "odd").await);
    let gizmos = custom_api(&client, &name, &group, "Gizmo", "gizmos");
    assert!(gizmos.get_opt("odd").await.expect("get").is_none());
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(&crd_name, &DeleteParams::default())
        .await
        .expect("delete CRD");
    ns.delete().await;
}

#[tokio::test]
async fn an_unknown_kind_is_a_clear_error_naming_the_file() {
    let ns = TestNamespace::new("apply-unknown").await;
    let name = ns.name().to_string();
    let (client, counts) = counting_client().await;
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    files.insert(
        "widgets/w.yaml".into(),
        format!("apiVersion: nowhere.example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: {name}\n"),
    );
    let before = counts.snapshot();
    let r = pass(&client, &files, &options(&name)).await;
    let err = r.error.as_ref().expect("unknown kind").to_string();
    assert!(
        err.contains(&format!(
            "widgets/w.yaml:1:1: Widget/{name}/w: the cluster has no kind `Widget` in `nowhere.example.com/v1`"
        )),
        "{err}"
    );
    // Only the inventory of this (empty) pass may have been written.
    assert!((counts.snapshot() - before).writes <= 2);
    ns.delete().await;
}

#[tokio::test]
async fn a_deployment_that_cannot_become_ready_times_out_naming_it() {
    let ns = TestNamespace::new("apply-stuck").await;
    let name = ns.name().to_string();
    let (client, _) = counting_client().await;
    let opts = PassSettings {
        timeout: Duration::from_secs(8),
        ..options(&name)
    };
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    // No node has this label: the pod is never scheduled.
    files.insert(
        "stuck.yaml".into(),
        deployment(
            &name,
            "stuck",
            "      nodeSelector: {weft.test/no-such-node: \"true\"}\n",
        ),
    );
    files.insert("fine.yaml".into(), configmap(&name, "fine", "x"));
    let r = pass(&client, &files, &opts).await;
    let err = r.error.as_ref().expect("timeout").to_string();
    assert!(
        err.contains("timed out after 8s waiting for 1 object(s) to become ready"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "Deployment/{name}/stuck: 0 of 1 replicas available"
        )),
        "{err}"
    );
    assert!(!err.contains("fine"), "{err}");
    ns.delete().await;
}

/// A WeaveCloud removed from git takes its agents with it: the sync root prunes the CR, and first
/// the children in the CR's `status.inventory`, by the same ownership rules.
#[tokio::test]
async fn a_removed_weavecloud_takes_its_children_with_it() {
    let ns = TestNamespace::new("apply-cascade").await;
    let name = ns.name().to_string();
    let (client, _) = counting_client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in weft::api::crds() {
        crds.patch(
            &kube::ResourceExt::name_any(&crd),
            &PatchParams::apply("weft-test").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("install CRD");
    }
    let opts = options(&name);
    let mut files = small_repo(&name);
    files.insert(
        "weave/wc.yaml".into(),
        weavecloud(&name)
            .name("wc")
            .token("weave-cloud", Some("token"))
            .only_flux()
            .yaml(),
    );
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    let flux = format!("Deployment/{name}/weave-flux-agent");
    assert_eq!(actions(&r)[&flux].0, Action::Created, "{:#?}", r.changes);
    let child = r
        .changes
        .entries
        .iter()
        .find(|c| c.object.to_string() == flux)
        .expect("flux");
    assert_eq!(child.owner.reference(), format!("WeaveCloud/{name}/wc"));
    let cluster_roles: Vec<String> = r
        .changes
        .entries
        .iter()
        .filter(|c| c.object.kind == "ClusterRole")
        .map(|c| c.object.name.clone())
        .collect();
    assert!(!cluster_roles.is_empty(), "{:#?}", r.changes);

    // A daemon that once ran put its finalizer on the WeaveCloud; none runs now (`weft sync`
    // alone). The pass prunes the children itself, so it releases the finalizer: the WeaveCloud
    // must not stay Terminating for a daemon that never comes.
    let wc_ar = ApiResource {
        group: "cloud.weave.works".into(),
        version: "v1beta1".into(),
        api_version: "cloud.weave.works/v1beta1".into(),
        kind: "WeaveCloud".into(),
        plural: "weaveclouds".into(),
    };
    let wcs: Api<DynamicObject> = Api::namespaced_with(client.clone(), &name, &wc_ar);
    wcs.patch(
        "wc",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["weft.io/agents", "example.com/keep"]}})),
    )
    .await
    .expect("add finalizers");
    files.remove("weave/wc.yaml");
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    let a = actions(&r);
    assert_eq!(
        a[&format!("WeaveCloud/{name}/wc")].0,
        Action::Deleted,
        "{a:#?}"
    );
    // Only Weft's finalizer went: another controller's stays, and holds the object.
    let left = wcs
        .get("wc")
        .await
        .expect("still held by the other finalizer");
    assert_eq!(
        left.metadata.finalizers,
        Some(vec!["example.com/keep".to_string()])
    );
    assert!(left.metadata.deletion_timestamp.is_some());
    wcs.patch(
        "wc",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("drop the other finalizer");
    assert_eq!(a[&flux].0, Action::Deleted, "{a:#?}");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &name);
    assert!(deployments
        .get_opt("weave-flux-agent")
        .await
        .expect("get")
        .is_none());
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    for role in &cluster_roles {
        assert!(
            roles.get_opt(role).await.expect("get").is_none(),
            "ClusterRole {role} left behind"
        );
    }
    ns.delete().await;
}

/// Namespaces are pruned only with `weft.io/prune: enabled`; an object that already existed
/// without Weft's labels is adopted (written once, then owned like the others).
#[tokio::test]
async fn namespaces_need_an_opt_in_to_be_pruned_and_existing_objects_are_adopted() {
    let ns = TestNamespace::new("apply-nsprune").await;
    let name = ns.name().to_string();
    let (client, _) = counting_client().await;
    let opts = options(&name);
    let kept = format!("{name}-kept");
    let gone = format!("{name}-gone");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let existing = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "existing", "namespace": name}, "data": {"value": "old"}});
    api.patch(
        "existing",
        &PatchParams::apply("kubectl"),
        &Patch::Apply(&existing),
    )
    .await
    .expect("existing");

    let mut files = small_repo(&name);
    files.insert("existing.yaml".into(), configmap(&name, "existing", "new"));
    files.insert(
        "ns/kept.yaml".into(),
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {kept}\n"),
    );
    files.insert(
        "ns/gone.yaml".into(),
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {gone}\n  annotations:\n    weft.io/prune: enabled\n"),
    );
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    assert_eq!(
        actions(&r)[&format!("ConfigMap/{name}/existing")],
        (Action::Configured, Some("adopted".into()))
    );
    assert_eq!(
        api.get("existing").await.expect("existing").data.unwrap()["value"],
        "new"
    );

    files.remove("ns/kept.yaml");
    files.remove("ns/gone.yaml");
    let r = pass(&client, &files, &opts).await;
    assert_ok(&r);
    let a = actions(&r);
    assert_eq!(
        a[&format!("ConfigMap/{name}/existing")].0,
        Action::Unchanged
    );
    assert_eq!(
        a[&format!("Namespace/{kept}")],
        (
            Action::Skipped,
            Some("not pruned: Namespaces are pruned only with weft.io/prune: enabled".into())
        )
    );
    assert_eq!(a[&format!("Namespace/{gone}")].0, Action::Deleted, "{a:#?}");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let kept_ns = namespaces.get_opt(&kept).await.expect("get");
    assert!(kept_ns.is_some_and(|n| n.metadata.deletion_timestamp.is_none()));
    let gone_ns = namespaces.get_opt(&gone).await.expect("get");
    assert!(gone_ns.is_none_or(|n| n.metadata.deletion_timestamp.is_some()));
    let _ = namespaces.delete(&kept, &DeleteParams::default()).await;
    ns.delete().await;
}

/// Discovery is read again only when the API server says a document changed (each pass
/// discovers the cluster; an unchanged document is answered `304 Not Modified` and its last
/// parse used again), and a CRD installed since is still seen.
#[tokio::test]
async fn discovery_is_reused_while_unchanged_and_a_new_crd_is_seen_at_once() {
    use weft::apply::plan::Catalog;
    let client = cluster::client().await;
    let ns = TestNamespace::new("discovery").await;
    // Back to back, the second discovery finds both documents unchanged (another test may
    // install a CRD in between: a few tries).
    let mut reused = Vec::new();
    for _ in 0..10 {
        Catalog::discover(&client).await.expect("discovery");
        let (_, n) = Catalog::discover_reusing(&client).await.expect("discovery");
        reused.push(n);
        if n == 2 {
            break;
        }
    }
    assert_eq!(
        reused.last(),
        Some(&2),
        "documents reused in each try: {reused:?}"
    );

    let group = format!("{}.weft.test", ns.name());
    let crd = crd(&group, "Sprocket", "sprockets", "Cluster");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&Default::default(), &crd).await.expect("CRD");
    let api_version = format!("{group}/v1");
    // The API server publishes the kind in its discovery once the CRD is Established; from
    // then on the next discovery must see it (the cached document is not the new one).
    let (ar, namespaced) = support::wait::wait_for(
        "the new CRD's kind in discovery",
        Duration::from_secs(60),
        &|| String::from("(no daemon: Catalog::discover in this test)"),
        async || {
            let catalog = Catalog::discover(&client).await.ok()?;
            catalog.resolve(&api_version, "Sprocket").cloned()
        },
    )
    .await;
    assert_eq!((ar.plural.as_str(), namespaced), ("sprockets", false));
    crds.delete(&format!("sprockets.{group}"), &DeleteParams::default())
        .await
        .expect("delete CRD");
    ns.delete().await;
}
