//! Operator mistakes and neighbours (issue 31), with the `weft` binary against the real control
//! plane: a `--path` typo, an emptied repository, a small root emptied under the guard's floor, a
//! Namespace or CRD removed from git while what lives in it is still declared (or not Weft's), a
//! second root declaring an object another root owns, an HPA scaling a Deployment whose
//! `spec.replicas` is in git, and a `weft sync` racing a live daemon.
//!
//! One binary, one setup: every test makes its own namespace (the root's inventory lives there
//! too, `--weft-namespace <ns> --root-name <ns>`), and runs the built `weft` as an operator would.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::{Api, ResourceExt};

use support::cluster::{self, TestNamespace};
use support::manifests::configmap;
use support::repo_dir::Repo;

/// `weft <sub> --repo <repo> <cluster> --weft-namespace <weft_ns> --root-name <root> <extra>`.
fn weft_as(sub: &str, repo: &Path, weft_ns: &str, root: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg(sub)
        .arg("--repo")
        .arg(repo)
        .args(cluster::cluster().kube_args())
        .args(["--weft-namespace", weft_ns, "--root-name", root])
        .args(extra)
        .env_remove("KUBECONFIG")
        .env("WEFT_LOG", "warn")
        .output()
        .expect("run weft")
}

/// `weft <sub>` with the root and its inventory in `ns`.
fn weft(sub: &str, repo: &Path, ns: &str, extra: &[&str]) -> Output {
    weft_as(sub, repo, ns, ns, extra)
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

async fn configmaps(client: &Client, ns: &str) -> Vec<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut names: Vec<String> = api
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|c| c.name_any())
        .filter(|n| n != "kube-root-ca.crt" && !n.starts_with("weft-"))
        .collect();
    names.sort();
    names
}

// ---- item 1: an empty path, an empty desired set, a small root ----

#[tokio::test]
async fn a_path_that_does_not_exist_is_an_error_and_prunes_nothing() {
    let ns = TestNamespace::new("ops-path").await;
    let name = ns.name().to_string();
    let repo = Repo::new();
    for n in ["a", "b", "c"] {
        repo.write(&format!("apps/{n}.yaml"), &configmap(&name, n, "one"));
    }
    let out = weft("sync", repo.path(), &name, &["--path", "apps"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // The typo of the issue: `--path appz`.
    let out = weft("sync", repo.path(), &name, &["--path", "appz"]);
    let t = text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("--path `appz` does not exist"), "{t}");
    assert!(!t.contains("deleted"), "{t}");
    assert_eq!(configmaps(&ns.client(), &name).await, ["a", "b", "c"]);

    // `weft validate --path nsx` fails too, naming the path.
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("validate")
        .arg(repo.path())
        .args(["--path", "nsx"])
        .env("WEFT_LOG", "warn")
        .output()
        .expect("run weft validate");
    let t = text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("--path `nsx` does not exist"), "{t}");
    assert!(!t.contains("ok: 0 documents"), "{t}");
    // A file is no directory either.
    let out = weft("sync", repo.path(), &name, &["--path", "apps/a.yaml"]);
    let t = text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("is not a directory"), "{t}");
    ns.delete().await;
}

#[tokio::test]
async fn an_empty_desired_set_prunes_nothing_without_allow_empty() {
    let ns = TestNamespace::new("ops-empty").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = Repo::new();
    for n in ["a", "b", "c"] {
        repo.write(&format!("{n}.yaml"), &configmap(&name, n, "one"));
    }
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for n in ["a", "b", "c"] {
        repo.remove(&format!("{n}.yaml"));
    }
    repo.write("README.md", "nothing here any more\n");

    let out = weft("sync", repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("desired set is empty"), "{t}");
    assert!(t.contains("--allow-empty"), "{t}");
    assert_eq!(configmaps(&client, &name).await, ["a", "b", "c"]);
    // Still refused on the next pass: the inventory kept every entry.
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(configmaps(&client, &name).await, ["a", "b", "c"]);

    let out = weft("sync", repo.path(), &name, &["--allow-empty"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(configmaps(&client, &name).await.is_empty());
    ns.delete().await;
}

#[tokio::test]
async fn the_guard_floor_never_lets_a_small_root_lose_more_than_half() {
    let ns = TestNamespace::new("ops-small").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = Repo::new();
    for n in ["a", "b", "c", "d"] {
        repo.write(&format!("{n}.yaml"), &configmap(&name, n, "one"));
    }
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // 3 of 4: under the floor of 10, but more than half of a small root.
    for n in ["b", "c", "d"] {
        repo.remove(&format!("{n}.yaml"));
    }
    let out = weft("sync", repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("refusing to prune 3 of the 4 objects"), "{t}");
    assert_eq!(configmaps(&client, &name).await, ["a", "b", "c", "d"]);
    // Half is allowed: put one back, 2 of 4 go.
    repo.write("b.yaml", &configmap(&name, "b", "one"));
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(configmaps(&client, &name).await, ["a", "b"]);
    // And --force-prune, once, lets more than half go.
    repo.write("c.yaml", &configmap(&name, "c", "one"));
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    repo.remove("b.yaml");
    repo.remove("c.yaml");
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(configmaps(&client, &name).await, ["a", "b", "c"]);
    let out = weft("sync", repo.path(), &name, &["--force-prune"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(configmaps(&client, &name).await, ["a"]);
    ns.delete().await;
}

// ---- item 4: a Namespace or CRD removed from git ----

fn namespace_doc(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  annotations:\n    weft.io/prune: enabled\n")
}

/// `n` ConfigMaps in the root's own namespace, so that the root is large enough for the guard's
/// floor and the tests below see only the Namespace/CRD rules.
fn bystanders(repo: &Repo, ns: &str, n: usize) {
    for i in 0..n {
        repo.write(
            &format!("bystanders/cm-{i:02}.yaml"),
            &configmap(ns, &format!("bystander-{i:02}"), "x"),
        );
    }
}

async fn namespace_exists(client: &Client, name: &str) -> bool {
    use k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(client.clone());
    match api.get_opt(name).await.expect("get namespace") {
        Some(n) => n.metadata.deletion_timestamp.is_none(),
        None => false,
    }
}

async fn delete_namespace(client: &Client, name: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(client.clone());
    let _ = api.delete(name, &Default::default()).await;
}

#[tokio::test]
async fn a_namespace_removed_from_git_is_kept_while_git_declares_its_objects_or_a_human_owns_some()
{
    let ns = TestNamespace::new("ops-nsprune").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let fg = format!("{name}-fg");
    let repo = Repo::new();
    bystanders(&repo, &name, 20);
    repo.write("fg/namespace.yaml", &namespace_doc(&fg));
    for i in 0..5 {
        repo.write(
            &format!("fg/cm-{i}.yaml"),
            &configmap(&fg, &format!("cm-{i}"), "v"),
        );
    }
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // A human's ConfigMap and Secret in the namespace.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &fg);
    let human: ConfigMap = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "human"}, "data": {"k": "v"}}),
    )
    .expect("configmap");
    cms.create(&Default::default(), &human)
        .await
        .expect("create");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &fg);
    let secret = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "human"}, "stringData": {"k": "v"}}),
    )
    .expect("secret");
    secrets
        .create(&Default::default(), &secret)
        .await
        .expect("create");

    // Only the Namespace's document goes: its 5 ConfigMaps are still declared.
    repo.remove("fg/namespace.yaml");
    let out = weft("sync", repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains(&format!(
            "skipped    Namespace/{fg} (not pruned: git still declares"
        )),
        "{t}"
    );
    assert!(namespace_exists(&client, &fg).await, "{t}");
    assert_eq!(
        configmaps(&client, &fg).await,
        ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4", "human"]
    );
    // The next pass does the same (the namespace stays in the inventory), and does not fail.
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // The ConfigMaps go too: the human's objects still keep the namespace.
    for i in 0..5 {
        repo.remove(&format!("fg/cm-{i}.yaml"));
    }
    let out = weft("sync", repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("is not this owner's"), "{t}");
    assert!(namespace_exists(&client, &fg).await, "{t}");
    assert_eq!(configmaps(&client, &fg).await, ["human"]);
    assert!(secrets.get_opt("human").await.expect("get").is_some());

    // --force-prune overrides that once.
    let out = weft("sync", repo.path(), &name, &["--force-prune"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains(&format!("deleted    Namespace/{fg}")), "{t}");
    assert!(!namespace_exists(&client, &fg).await, "{t}");
    delete_namespace(&client, &fg).await;
    ns.delete().await;
}

/// Issue 43, item 4: an ownerReference protects an object only when its owner goes with the
/// Namespace; a human's ConfigMap that points to a ClusterRole that survives keeps the Namespace.
#[tokio::test]
async fn a_human_object_owned_by_a_cluster_role_that_survives_keeps_its_namespace() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let ns = TestNamespace::new("ops-nsowned").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let fg = format!("{name}-fg");
    let repo = Repo::new();
    bystanders(&repo, &name, 20);
    repo.write("fg/namespace.yaml", &namespace_doc(&fg));
    repo.write("fg/cm-0.yaml", &configmap(&fg, "cm-0", "v"));
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // Someone else's ClusterRole, and a person's ConfigMap in the namespace that names it as
    // its owner.
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role_name = format!("{name}-someone-elses");
    let role: ClusterRole =
        serde_json::from_value(serde_json::json!({"metadata": {"name": role_name}}))
            .expect("cluster role");
    let role = roles
        .create(&Default::default(), &role)
        .await
        .expect("create the ClusterRole");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &fg);
    let human: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "human", "ownerReferences": [{
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "name": role_name, "uid": role.metadata.uid.clone().expect("uid")}]},
        "data": {"k": "v"}
    }))
    .expect("configmap");
    cms.create(&Default::default(), &human)
        .await
        .expect("create");

    // The namespace and its objects leave git: Weft's ConfigMap goes, the namespace stays, and
    // the pass says why.
    repo.remove("fg/namespace.yaml");
    repo.remove("fg/cm-0.yaml");
    let out = weft("sync", repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains(&format!("skipped    Namespace/{fg}")), "{t}");
    assert!(
        t.contains(&format!(
            "ConfigMap/{fg}/human lives in this namespace and is not this owner's"
        )),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "ownerReference to ClusterRole/{role_name} does not protect it"
        )),
        "{t}"
    );
    assert!(namespace_exists(&client, &fg).await, "{t}");
    assert_eq!(configmaps(&client, &fg).await, ["human"]);

    delete_namespace(&client, &fg).await;
    let _ = roles.delete(&role_name, &Default::default()).await;
    ns.delete().await;
}

fn crd_doc(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.{group}
  annotations:
    weft.io/prune: enabled
spec:
  group: {group}
  scope: Namespaced
  names: {{kind: Gadget, plural: gadgets, singular: gadget, listKind: GadgetList}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#
    )
}

fn gadget(group: &str, ns: &str, name: &str) -> String {
    format!("apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  size: 1\n")
}

#[tokio::test]
async fn a_crd_removed_from_git_is_kept_while_its_objects_are_declared_or_not_wefts() {
    use kube::api::{ApiResource, DynamicObject};
    use kube::core::GroupVersionKind;
    let ns = TestNamespace::new("ops-crdprune").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let group = format!("{name}.weft.test");
    let repo = Repo::new();
    bystanders(&repo, &name, 20);
    repo.write("crd.yaml", &crd_doc(&group));
    repo.write("g1.yaml", &gadget(&group, &name, "g1"));
    repo.write("g2.yaml", &gadget(&group, &name, "g2"));
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1", "Gadget"),
        "gadgets",
    );
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &name, &ar);
    let mut human = DynamicObject::new("human", &ar);
    human.data = serde_json::json!({"spec": {"size": 2}});
    gadgets
        .create(&Default::default(), &human)
        .await
        .expect("a human's Gadget");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let crd_name = format!("gadgets.{group}");

    // The CRD's document goes, its Gadgets stay in git.
    repo.remove("crd.yaml");
    let out = weft("sync", repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("git still declares"), "{t}");
    assert!(crds.get_opt(&crd_name).await.expect("get").is_some(), "{t}");

    // The Gadgets go too: the human's Gadget keeps the CRD.
    repo.remove("g1.yaml");
    repo.remove("g2.yaml");
    let out = weft("sync", repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains(&format!(
            "Gadget/{name}/human is of this CRD's kind and is not this owner's"
        )),
        "{t}"
    );
    assert!(crds.get_opt(&crd_name).await.expect("get").is_some(), "{t}");
    assert!(gadgets.get_opt("human").await.expect("get").is_some());
    assert!(gadgets.get_opt("g1").await.expect("get").is_none());

    // Once the human's Gadget is gone, the CRD is pruned.
    gadgets
        .delete("human", &Default::default())
        .await
        .expect("delete");
    let out = weft("sync", repo.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains(&format!("deleted    CustomResourceDefinition/{crd_name}")),
        "{t}"
    );
    let _ = crds.delete(&crd_name, &Default::default()).await;
    ns.delete().await;
}

// ---- item 2: two roots, one object ----

/// The value and the owner label of ConfigMap `name`.
async fn value_and_owner(client: &Client, ns: &str, name: &str) -> (String, String) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = api.get(name).await.expect("get");
    (
        cm.data
            .unwrap_or_default()
            .get("value")
            .cloned()
            .unwrap_or_default(),
        cm.metadata
            .labels
            .unwrap_or_default()
            .get("weft.io/owner-ref")
            .cloned()
            .unwrap_or_else(|| {
                cm.metadata
                    .annotations
                    .unwrap_or_default()
                    .get("weft.io/owner-ref")
                    .cloned()
                    .unwrap_or_default()
            }),
    )
}

#[tokio::test]
async fn two_roots_never_fight_over_an_object_and_both_report_the_conflict() {
    let ns = TestNamespace::new("ops-tworoots").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let (root_a, root_b) = (format!("{name}-a"), format!("{name}-b"));
    let (ref_a, ref_b) = (
        format!("root/{name}/{root_a}"),
        format!("root/{name}/{root_b}"),
    );
    let a = Repo::new();
    a.write("cm.yaml", &configmap(&name, "cm-0001", "from-a"));
    let b = Repo::new();
    b.write("cm.yaml", &configmap(&name, "cm-0001", "from-b"));
    b.write("own.yaml", &configmap(&name, "only-b", "b"));
    // A Namespace both declare: left to its holder, no conflict.
    let shared_ns = format!("{name}-shared");
    let ns_doc = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {shared_ns}\n");
    a.write("ns.yaml", &ns_doc);
    b.write("ns.yaml", &ns_doc);
    let out = weft_as("sync", a.path(), &name, &root_a, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    for round in 0..3 {
        let out = weft_as("sync", b.path(), &name, &root_b, &[]);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(1), "round {round}: {t}");
        assert!(
            t.contains(&format!(
                "ConfigMap/{name}/cm-0001: conflict: owned by another Weft root, {ref_a}; not adopted"
            )),
            "{t}"
        );
        assert!(t.contains("weft.io/take-over-from"), "{t}");
        assert!(
            t.contains(&format!(
                "unchanged  Namespace/{shared_ns} (held by {ref_a}, which declares it too: left as it is)"
            )),
            "{t}"
        );
        assert!(
            !t.contains(&format!("Namespace/{shared_ns}: conflict")),
            "{t}"
        );
        assert_eq!(
            value_and_owner(&client, &name, "cm-0001").await,
            ("from-a".to_string(), ref_a.clone())
        );
        // The holder's pass goes on with everything else (issue 41 item 6): a new object of
        // this round is created, and it succeeds, saying what B claims.
        a.write(
            &format!("new-{round}.yaml"),
            &configmap(&name, &format!("only-a-{round}"), "a"),
        );
        let out = weft_as("sync", a.path(), &name, &root_a, &[]);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(0), "round {round}: {t}");
        assert!(
            t.contains(&format!(
                "warning: ConfigMap/{name}/cm-0001: conflict: another Weft root, {ref_b}, declares it too"
            )),
            "{t}"
        );
        assert_eq!(
            value_and_owner(&client, &name, "cm-0001").await,
            ("from-a".to_string(), ref_a.clone())
        );
        assert_eq!(
            value_and_owner(&client, &name, &format!("only-a-{round}")).await,
            ("a".to_string(), ref_a.clone())
        );
    }
    // B's own object is applied all the same.
    assert_eq!(
        configmaps(&client, &name).await,
        ["cm-0001", "only-a-0", "only-a-1", "only-a-2", "only-b"]
    );

    // An explicit, per-object take-over moves it to B, once; A then reports the conflict, and
    // does not take it back.
    b.write(
        "cm.yaml",
        &format!(
            "{}metadata:\n  name: cm-0001\n  namespace: {name}\n  annotations:\n    weft.io/take-over-from: {ref_a}\n",
            "apiVersion: v1\nkind: ConfigMap\ndata:\n  value: from-b\n"
        ),
    );
    let out = weft_as("sync", b.path(), &name, &root_b, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        value_and_owner(&client, &name, "cm-0001").await,
        ("from-b".to_string(), ref_b.clone())
    );
    let out = weft_as("sync", a.path(), &name, &root_a, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!("owned by another Weft root, {ref_b}")),
        "{t}"
    );
    assert_eq!(
        value_and_owner(&client, &name, "cm-0001").await,
        ("from-b".to_string(), ref_b.clone())
    );
    delete_namespace(&client, &shared_ns).await;
    ns.delete().await;
}

// ---- item 3: other managers' fields ----

fn deployment(ns: &str, name: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: app
          image: registry.example/app:1
"#
    )
}

#[tokio::test]
async fn an_hpa_keeps_its_replicas_and_listed_fields_are_left_to_their_manager() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams};
    let ns = TestNamespace::new("ops-hpa").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = Repo::new();
    repo.write("web.yaml", &deployment(&name, "web", 2));
    repo.write(
        "settings.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {name}\n  annotations:\n    weft.io/ignore-fields: /data/value\ndata:\n  value: git\n  other: git\n"
        ),
    );
    let out = weft("sync", repo.path(), &name, &["--timeout", "60s"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // An HPA (min = max = 4, so the real controller agrees with the scale below), and the scale
    // it makes through the scale subresource.
    let hpa = serde_json::json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": name},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 4, "maxReplicas": 4,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                     "target": {"type": "Utilization", "averageUtilization": 50}}}]}
    });
    let hpas: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &name,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler"),
            "horizontalpodautoscalers",
        ),
    );
    hpas.create(
        &Default::default(),
        &serde_json::from_value(hpa).expect("hpa"),
    )
    .await
    .expect("create the HPA");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &name);
    deployments
        .patch_scale(
            "web",
            &PatchParams {
                field_manager: Some("hpa-test".into()),
                ..Default::default()
            },
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale");
    let generation = |d: Deployment| (d.metadata.generation, d.spec.and_then(|s| s.replicas));
    let before = generation(deployments.get("web").await.expect("get"));
    assert_eq!(before.1, Some(4));

    // Another controller owns settings' data.value.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    cms.patch(
        "settings",
        &PatchParams {
            field_manager: Some("someone-else".into()),
            ..Default::default()
        },
        &Patch::Merge(serde_json::json!({"data": {"value": "theirs"}})),
    )
    .await
    .expect("patch");
    // Git changes the ignored field and the rest: only the rest follows git.
    repo.write(
        "settings.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {name}\n  annotations:\n    weft.io/ignore-fields: /data/value\ndata:\n  value: git-2\n  other: git-2\n"
        ),
    );

    let mut warnings = 0;
    for _ in 0..3 {
        let out = weft("sync", repo.path(), &name, &["--timeout", "60s"]);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(0), "{t}");
        warnings += t
            .matches("its spec.replicas is left to the autoscaler")
            .count();
        assert_eq!(
            generation(deployments.get("web").await.expect("get")),
            before,
            "{t}"
        );
    }
    assert!(warnings >= 1, "no warning about the HPA");
    let data = cms
        .get("settings")
        .await
        .expect("get")
        .data
        .unwrap_or_default();
    assert_eq!(data.get("value").map(String::as_str), Some("theirs"));
    assert_eq!(data.get("other").map(String::as_str), Some("git-2"));
    ns.delete().await;
}

// ---- item 5: one writer per root, one repository per root ----

/// The Lease of root `root` in `ns` as a daemon leaves it: while `live`, held and renewed every
/// second by a task of this test (abort the handle returned to stop it, as a kill -9 would);
/// else released (no holder), as a daemon stopped with SIGTERM leaves it.
async fn daemon_lease(
    client: &Client,
    ns: &str,
    root: &str,
    live: bool,
    source: &str,
) -> Option<tokio::task::JoinHandle<()>> {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Patch, PatchParams};
    let name = format!("weft-leader-{root}");
    // A MicroTime (six digits of fraction, as the API server wants it).
    let now = || {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        serde_json::to_value(MicroTime(k8s_openapi::jiff::Timestamp::now())).expect("time")
    };
    let holder = live.then_some("weft-7d9f-abcde");
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"weft.io/source": source}},
        "spec": {"leaseDurationSeconds": 15, "renewTime": now(), "acquireTime": now()}
    }))
    .expect("lease");
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    api.patch(
        &name,
        &PatchParams::apply("lease-test").force(),
        &Patch::Apply(&lease),
    )
    .await
    .expect("the Lease");
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"holderIdentity": holder}})),
    )
    .await
    .expect("the Lease's holder");
    live.then(|| {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                let renewed = serde_json::json!({"spec": {"renewTime": now()}});
                if let Err(e) = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(renewed))
                    .await
                {
                    eprintln!("renewing the fake daemon's Lease: {e}");
                }
            }
        })
    })
}

// Two threads: the fake daemon renews its Lease while the CLI runs (a blocking call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_beside_a_live_daemon_or_from_another_repository_is_refused() {
    let ns = TestNamespace::new("ops-writer").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let a = Repo::new();
    for n in ["a1", "a2", "shared"] {
        a.write(&format!("{n}.yaml"), &configmap(&name, n, "a"));
    }
    let b = Repo::new();
    for n in ["b1", "shared"] {
        b.write(&format!("{n}.yaml"), &configmap(&name, n, "b"));
    }
    let a_dir = std::fs::canonicalize(a.path()).expect("canonical");

    // A live daemon leads the root: the CLI does not race it.
    let renewing = daemon_lease(&client, &name, &name, true, &a_dir.display().to_string()).await;
    let out = weft("sync", a.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("is led by a live daemon"), "{t}");
    assert!(t.contains("weft trigger"), "{t}");
    assert!(configmaps(&client, &name).await.is_empty(), "{t}");
    // A dry run writes nothing: allowed.
    let out = weft("sync", a.path(), &name, &["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // The override.
    let out = weft("sync", a.path(), &name, &["--ignore-leader"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(configmaps(&client, &name).await, ["a1", "a2", "shared"]);

    // The daemon is gone (it released its Lease): the CLI may write, but not from another
    // repository, which would prune a1 and a2 (2 of 4: within the guard).
    renewing.expect("renewing").abort();
    daemon_lease(&client, &name, &name, false, &a_dir.display().to_string()).await;
    let out = weft("sync", a.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = weft("sync", b.path(), &name, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("--switch-repository"), "{t}");
    assert_eq!(configmaps(&client, &name).await, ["a1", "a2", "shared"]);
    let out = weft("sync", b.path(), &name, &["--switch-repository"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(configmaps(&client, &name).await, ["b1", "shared"]);
    // The root records b now: a is the other repository.
    let out = weft("sync", a.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let roots: Api<weft::api::root::Root> = Api::namespaced(client.clone(), &name);
    let root = roots.get(&name).await.expect("the root's Root");
    let b_dir = std::fs::canonicalize(b.path()).expect("canonical");
    assert_eq!(
        root.spec.source.url.as_str(),
        b_dir.to_str().expect("utf-8")
    );

    // Only a daemon's Lease claim, no record: still checked.
    let c = TestNamespace::new("ops-writer-claim").await;
    let cname = c.name().to_string();
    daemon_lease(
        &client,
        &cname,
        &cname,
        false,
        "https://git.example/team/config//apps",
    )
    .await;
    let out = weft("sync", a.path(), &cname, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("syncs https://git.example/team/config"), "{t}");
    c.delete().await;
    ns.delete().await;
}
