//! Roots as resources (issue 41) on the real control plane, with real `weft run` processes and
//! real git servers (`git daemon`):
//!
//! - the Root CRD: the API server refuses a bad spec naming the field (two refs, a duration
//!   written in words, a prune fraction above 1, an unknown field, a bad account name) and
//!   `kubectl get roots` shows Weft's columns;
//! - one daemon reconciles two Roots of two namespaces from two repositories, the tenant's as
//!   its own ServiceAccount, in `dependsOn` order (a failing dependency holds its dependent with
//!   a message naming it), and fills their status;
//! - a tenant's Root without an account applies nothing; with a namespace-only account, a
//!   ClusterRole in its repository is refused by the API server;
//! - a root whose Deployment never becomes available holds the roots that depend on it, with
//!   a message naming it (health gates dependents, as Flux's `wait: true`);
//! - a `dependsOn` cycle is refused naming it; `weft.io/requested-at` runs a pass; `suspend`
//!   holds one; `weft get roots` and `weft create root`.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use support::cluster::{self, TestNamespace};
use support::conditions::condition;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::ServedRepo;
use support::manifests::{configmap, deployment};
use support::wait::wait_for;
use support::weft_cli::Weft;
use weft::api::root::Root;

const WITHIN: Duration = Duration::from_secs(120);

fn roots_resource() -> ApiResource {
    ApiResource {
        group: "weft.io".into(),
        version: "v1alpha1".into(),
        api_version: "weft.io/v1alpha1".into(),
        kind: "Root".into(),
        plural: "roots".into(),
    }
}

/// Create the Root `name` in `ns` with `spec`; the API server's message when it refuses.
async fn create_root(client: &Client, ns: &str, name: &str, spec: Value) -> Result<(), String> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &roots_resource());
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "weft.io/v1alpha1",
        "kind": "Root",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .unwrap();
    // As `kubectl apply --server-side` (strict field validation, as kubectl's default).
    let pp = PatchParams::apply("weft-test").validation_strict();
    api.patch(name, &pp, &Patch::Apply(&obj))
        .await
        .map(|_| ())
        .map_err(|e| match e {
            kube::Error::Api(s) => s.message,
            other => other.to_string(),
        })
}

/// Merge-patch the Root `name` of `ns`.
async fn patch_root(client: &Client, ns: &str, name: &str, patch: Value) {
    let api: Api<Root> = Api::namespaced(client.clone(), ns);
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching Root {ns}/{name}: {e}"));
}

async fn get_root(client: &Client, ns: &str, name: &str) -> Root {
    Api::<Root>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("reading Root {ns}/{name}: {e}"))
}

/// Wait until the Root's `Ready` condition has `status` and `reason`; the root then.
async fn wait_ready(
    client: &Client,
    ns: &str,
    name: &str,
    status: &str,
    reason: &str,
    d: &Daemon,
) -> Root {
    wait_for(
        &format!("Root {ns}/{name} Ready={status} ({reason})"),
        WITHIN,
        d,
        async || {
            let root = get_root(client, ns, name).await;
            let (s, r, _) = condition(&root, "Ready")?;
            (s == status && r == reason).then_some(root)
        },
    )
    .await
}

/// The `value` key of ConfigMap `ns/name` (which must exist).
async fn configmap_value(client: &Client, ns: &str, name: &str) -> Option<String> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
        .data
        .unwrap_or_default()
        .get("value")
        .cloned()
}

async fn configmap_exists(client: &Client, ns: &str, name: &str) -> bool {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

/// A daemon whose Weft namespace is `ns` (its flag root an empty directory), with the
/// controllers on and acting only on `namespaces` (other tests' roots are not its own).
fn start_daemon(ns: &str, namespaces: &[&str], flag_repo: &std::path::Path) -> Daemon {
    let mut opts = DaemonOptions::new(flag_repo.to_str().unwrap(), ns);
    opts.controllers = true;
    opts.extra = vec!["--watch-namespaces".into(), namespaces.join(",")];
    Daemon::start(opts)
}

/// A client acting as `user` (impersonation, as the daemon does for a root's account).
async fn client_as(user: &str) -> Client {
    let c = cluster::cluster();
    let mut config = weft::apply::calls::config(Some(c.kubeconfig_path()), c.context())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).unwrap()
}

/// Wait until `user` may `verb` `resource` in `ns`, asked of the API server as that user (a
/// RoleBinding takes effect when the RBAC authorizer's cache has it).
async fn wait_allowed(user: &str, verb: &str, resource: &str, ns: &str) {
    let client = client_as(user).await;
    let api: Api<SelfSubjectAccessReview> = Api::all(client);
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.into()),
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let logs = || String::new();
    wait_for(
        &format!("{user} may {verb} {resource} in {ns}"),
        WITHIN,
        &logs,
        async || {
            let answer = api.create(&PostParams::default(), &review).await.ok()?;
            answer.status?.allowed.then_some(())
        },
    )
    .await
}

/// The ServiceAccount `name` of `ns` with every right in `ns` and none elsewhere (a namespace
/// admin), waited for.
async fn namespace_admin(client: &Client, ns: &str, name: &str) {
    let pp = PatchParams::apply("weft-test").force();
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .patch(
            name,
            &pp,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
            ),
        )
        .await
        .unwrap();
    let roles: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&()),
    );
    let role: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": ns},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }))
    .unwrap();
    roles.patch(name, &pp, &Patch::Apply(&role)).await.unwrap();
    let bindings: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::erase::<k8s_openapi::api::rbac::v1::RoleBinding>(&()),
    );
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    }))
    .unwrap();
    bindings
        .patch(name, &pp, &Patch::Apply(&binding))
        .await
        .unwrap();
    let user = format!("system:serviceaccount:{ns}:{name}");
    wait_allowed(&user, "create", "configmaps", ns).await;
}

#[tokio::test]
async fn the_api_server_refuses_a_bad_root_naming_the_field() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TestNamespace::new("roots-schema").await;
    let url = "https://git.example/team.git";
    for (name, spec, field) in [
        (
            "two-refs",
            json!({"source": {"url": url, "ref": {"branch": "main", "tag": "v1"}}}),
            "spec.source.ref",
        ),
        (
            "words",
            json!({"source": {"url": url}, "interval": "5 minutes"}),
            "spec.interval",
        ),
        (
            "fraction",
            json!({"source": {"url": url}, "maxPruneFraction": 2}),
            "spec.maxPruneFraction",
        ),
        (
            "unknown",
            json!({"source": {"url": url}, "intervall": "1m"}),
            "spec.intervall",
        ),
        (
            "account",
            json!({"source": {"url": url}, "serviceAccountName": "Team_A"}),
            "spec.serviceAccountName",
        ),
        ("no-source", json!({"path": "apps"}), "spec.source"),
    ] {
        let err = create_root(&client, ns.name(), name, spec)
            .await
            .expect_err(name);
        assert!(err.contains(field), "{name}: {err}");
    }
    create_root(
        &client,
        ns.name(),
        "good",
        json!({
            "source": {"url": url, "ref": {"branch": "main"}, "secretRef": {"name": "git"}},
            "path": "apps", "interval": "1h30m", "timeout": "90s", "prune": true,
            "maxPruneFraction": 0.2, "suspend": true, "dependsOn": [{"name": "infra"}],
            "serviceAccountName": "deployer", "targetManifest": "site",
            "decryption": {"provider": "sops", "secretRef": {"name": "age"}},
        }),
    )
    .await
    .expect("a good Root is accepted");

    let c = cluster::cluster();
    let out = std::process::Command::new("kubectl")
        .args(c.kube_args())
        .args(["get", "roots", "-n", ns.name()])
        .output()
        .expect("kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header: Vec<&str> = stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "REVISION", "SUSPENDED", "AGE"]
    );
    assert!(stdout.contains("good"), "{stdout}");
    ns.delete().await;
}

#[tokio::test]
async fn one_daemon_reconciles_two_roots_of_two_namespaces_in_dependency_order() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new("roots-weft").await;
    let team = TestNamespace::new("roots-team").await;
    let (w, t) = (weft_ns.name(), team.name());
    namespace_admin(&client, t, "deployer").await;

    // Root `infra` (Weft's namespace, Weft's identity) starts broken; `apps` (the team's, as
    // its account) depends on it.
    let infra = ServedRepo::start();
    infra
        .work
        .write(
            "infra.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [broken\n",
        )
        .commit("broken");
    infra.work.push();
    let apps = ServedRepo::start();
    apps.work
        .write("apps/app.yaml", configmap(t, "app-config", "one"))
        .commit("app");
    apps.work.push();

    let flag = tempfile::tempdir().unwrap();
    let d = start_daemon(w, &[w, t], flag.path());
    create_root(
        &client,
        w,
        "infra",
        json!({"source": {"url": infra.url()}, "interval": "1h"}),
    )
    .await
    .unwrap();
    create_root(
        &client,
        t,
        "apps",
        json!({
            "source": {"url": apps.url(), "ref": {"branch": "main"}},
            "path": "apps",
            "interval": "1h",
            "serviceAccountName": "deployer",
            "dependsOn": [{"name": "infra", "namespace": w}],
        }),
    )
    .await
    .unwrap();

    // A failing dependency holds its dependent, which says for whom.
    let failed = wait_ready(&client, w, "infra", "False", "ReconciliationFailed", &d).await;
    let (_, _, message) = condition(&failed, "Ready").unwrap();
    assert!(message.contains("infra.yaml"), "{message}");
    let held = wait_ready(&client, t, "apps", "False", "DependencyNotReady", &d).await;
    let (_, _, message) = condition(&held, "Ready").unwrap();
    assert!(
        message.contains(&format!("waiting for root {w}/infra")),
        "{message}"
    );
    assert!(!configmap_exists(&client, t, "app-config").await);

    // Fixed: infra is applied, then apps, as its ServiceAccount.
    infra
        .work
        .write("infra.yaml", configmap(w, "infra-config", "base"))
        .commit("fixed");
    infra.work.push();
    patch_root(
        &client,
        w,
        "infra",
        json!({"metadata": {"annotations": {"weft.io/requested-at": "fix-1"}}}),
    )
    .await;
    let infra_root = wait_ready(&client, w, "infra", "True", "ReconciliationSucceeded", &d).await;
    assert!(configmap_exists(&client, w, "infra-config").await);
    let apps_root = wait_ready(&client, t, "apps", "True", "ReconciliationSucceeded", &d).await;
    let cm = Api::<ConfigMap>::namespaced(client.clone(), t)
        .get("app-config")
        .await
        .unwrap();
    let managers: Vec<String> = cm
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(managers.contains(&"weft".to_string()), "{managers:?}");

    // The status says what happened.
    for root in [&infra_root, &apps_root] {
        let s = root.status.as_ref().unwrap();
        assert_eq!(s.observed_generation, root.metadata.generation);
        assert!(s.last_applied_revision.is_some());
        assert_eq!(s.last_applied_revision, s.last_attempted_revision);
        assert_eq!(s.inventory.as_ref().unwrap().objects, 1, "{s:?}");
        assert!(!s.passes.is_empty());
        assert_eq!(s.passes[0].result, "Succeeded");
        assert!(s.next_poll_at.is_some());
    }
    assert_eq!(
        infra_root
            .status
            .as_ref()
            .unwrap()
            .last_handled_requested_at
            .as_deref(),
        Some("fix-1")
    );
    // The team's root was applied as its account: its inventory lives in its namespace.
    assert!(d
        .logs()
        .contains(&format!("system:serviceaccount:{t}:deployer")));

    // `weft get roots`: both, Ready, exit 0.
    // `-n`: other tests' roots (not all Ready) are elsewhere.
    let (code, out, err) = Weft::new(["get", "roots", "-n", t]).cluster().run();
    assert_eq!(code, 0, "{out}{err}");
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "STATUS",
            "REVISION",
            "SUSPENDED",
            "AGE"
        ]
    );
    assert!(
        out.lines().any(|l| l.starts_with(t) && l.contains("apps")),
        "{out}"
    );
    drop(d);
    team.delete().await;
    weft_ns.delete().await;
}

/// Health gates dependents, as Flux's `wait: true` (issue 41 item 3): a root whose Deployment
/// never becomes available fails its pass at the readiness wait, and the root that depends on it
/// waits, naming it and why; once the Deployment can run, both are Ready, in order.
#[tokio::test]
async fn an_unhealthy_object_holds_the_roots_that_depend_on_its_root() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TestNamespace::new("roots-health").await;
    let n = ns.name();
    // No node has this label: the Deployment's pod is never scheduled.
    let stuck = "      nodeSelector: {weft.test/no-such-node: \"true\"}\n";
    let base = ServedRepo::start();
    base.work
        .write("base/web.yaml", deployment(n, "web", stuck))
        .commit("unschedulable");
    base.work.push();
    let app = ServedRepo::start();
    app.work
        .write("app/app.yaml", configmap(n, "app-config", "one"))
        .commit("app");
    app.work.push();

    let flag = tempfile::tempdir().unwrap();
    let d = start_daemon(n, &[n], flag.path());
    create_root(
        &client,
        n,
        "base",
        json!({"source": {"url": base.url()}, "path": "base", "interval": "1h", "timeout": "10s"}),
    )
    .await
    .unwrap();
    create_root(
        &client,
        n,
        "app",
        json!({
            "source": {"url": app.url()},
            "path": "app",
            "interval": "1h",
            "dependsOn": [{"name": "base"}],
        }),
    )
    .await
    .unwrap();

    let failed = wait_ready(&client, n, "base", "False", "ReconciliationFailed", &d).await;
    let (_, _, message) = condition(&failed, "Ready").unwrap();
    assert!(
        message.contains(&format!("Deployment/{n}/web: 0 of 1 replicas available")),
        "{message}"
    );
    // Held, naming the root it waits for and why (once it saw base's failed pass: before, it
    // says base was not reconciled yet).
    let message = wait_for("app held by base's failed wait", WITHIN, &d, async || {
        let root = get_root(&client, n, "app").await;
        let (status, reason, message) = condition(&root, "Ready")?;
        (status == "False" && reason == "DependencyNotReady" && message.contains("replicas"))
            .then_some(message)
    })
    .await;
    assert!(
        message.starts_with("waiting for root base: it is not Ready"),
        "{message}"
    );
    assert!(message.contains("0 of 1 replicas available"), "{message}");
    assert!(!configmap_exists(&client, n, "app-config").await);

    // The Deployment can run now: base passes its wait, then app is applied.
    base.work
        .write("base/web.yaml", deployment(n, "web", ""))
        .commit("schedulable");
    base.work.push();
    patch_root(
        &client,
        n,
        "base",
        json!({"metadata": {"annotations": {"weft.io/requested-at": "fixed"}}}),
    )
    .await;
    wait_ready(&client, n, "base", "True", "ReconciliationSucceeded", &d).await;
    wait_ready(&client, n, "app", "True", "ReconciliationSucceeded", &d).await;
    assert_eq!(
        configmap_value(&client, n, "app-config").await.as_deref(),
        Some("one")
    );
    drop(d);
    ns.delete().await;
}

#[tokio::test]
async fn a_tenant_root_acts_only_as_its_own_account() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new("roots-weft-id").await;
    let team = TestNamespace::new("roots-tenant").await;
    let (w, t) = (weft_ns.name(), team.name());
    let repo = ServedRepo::start();
    let role = format!("{t}-escalated");
    repo.work
        .write("app.yaml", configmap(t, "tenant-config", "one"))
        .write(
            "role.yaml",
            format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {role}\nrules:\n  - apiGroups: ['*']\n    resources: ['*']\n    verbs: ['*']\n"
            ),
        )
        .commit("tenant");
    repo.work.push();
    let flag = tempfile::tempdir().unwrap();
    let d = start_daemon(w, &[w, t], flag.path());

    // Without an account: refused, nothing fetched or applied.
    create_root(&client, t, "mine", json!({"source": {"url": repo.url()}}))
        .await
        .unwrap();
    let refused = wait_ready(&client, t, "mine", "False", "ServiceAccountRequired", &d).await;
    let (stalled, _, _) = condition(&refused, "Stalled").unwrap();
    assert_eq!(stalled, "True");
    assert!(!configmap_exists(&client, t, "tenant-config").await);
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    assert!(cluster_roles.get_opt(&role).await.unwrap().is_none());

    // With a namespace-only account: the API server refuses the ClusterRole, naming it.
    namespace_admin(&client, t, "deployer").await;
    patch_root(
        &client,
        t,
        "mine",
        json!({"spec": {"serviceAccountName": "deployer"}}),
    )
    .await;
    let failed = wait_ready(&client, t, "mine", "False", "ReconciliationFailed", &d).await;
    // Refused when the pass reads the cluster-scoped kind its repository declares, as the
    // account (the engine lists ClusterRoles before it applies one).
    let (_, _, message) = condition(&failed, "Ready").unwrap();
    assert!(message.contains("clusterroles"), "{message}");
    assert!(message.contains("forbidden"), "{message}");
    assert!(
        message.contains(&format!("system:serviceaccount:{t}:deployer")),
        "{message}"
    );
    assert!(cluster_roles.get_opt(&role).await.unwrap().is_none());
    drop(d);
    team.delete().await;
    weft_ns.delete().await;
}

#[tokio::test]
async fn cycles_requests_and_suspend() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TestNamespace::new("roots-cycle").await;
    let n = ns.name();
    let repo = ServedRepo::start();
    repo.work
        .write("z/one.yaml", configmap(n, "one", "1"))
        .write("w/w.yaml", configmap(n, "w-config", "w"))
        .commit("one");
    repo.work.push();
    let flag = tempfile::tempdir().unwrap();
    let d = start_daemon(n, &[n], flag.path());
    let spec = |deps: Value| json!({"source": {"url": repo.url()}, "path": "z", "interval": "1h", "dependsOn": deps});

    // A cycle is refused, naming it.
    create_root(&client, n, "x", spec(json!([{"name": "y"}])))
        .await
        .unwrap();
    create_root(&client, n, "y", spec(json!([{"name": "x"}])))
        .await
        .unwrap();
    let x = wait_ready(&client, n, "x", "False", "DependencyCycle", &d).await;
    let (stalled, _, message) = condition(&x, "Stalled").unwrap();
    assert_eq!(stalled, "True");
    assert!(message.contains("x -> y -> x"), "{message}");

    // A requested-at runs a pass now (the interval is an hour).
    create_root(&client, n, "z", spec(json!([]))).await.unwrap();
    let z = wait_ready(&client, n, "z", "True", "ReconciliationSucceeded", &d).await;
    let passes = z.status.as_ref().unwrap().passes.len();
    repo.work
        .write("z/two.yaml", configmap(n, "two", "2"))
        .commit("two");
    repo.work.push();
    patch_root(
        &client,
        n,
        "z",
        json!({"metadata": {"annotations": {"weft.io/requested-at": "now-1"}}}),
    )
    .await;
    let z = wait_for("z answered now-1", WITHIN, &d, async || {
        let z = get_root(&client, n, "z").await;
        (z.status.as_ref()?.last_handled_requested_at.as_deref() == Some("now-1")).then_some(z)
    })
    .await;
    assert_eq!(z.status.as_ref().unwrap().passes.len(), passes + 1);
    assert!(configmap_exists(&client, n, "two").await);

    // Suspended: a request runs nothing, Ready stays as it was, the reason says why.
    patch_root(&client, n, "z", json!({"spec": {"suspend": true}})).await;
    wait_for("z suspended", WITHIN, &d, async || {
        let z = get_root(&client, n, "z").await;
        let (_, reason, _) = condition(&z, "Reconciling")?;
        (reason == "Suspended").then_some(())
    })
    .await;
    repo.work
        .write("z/three.yaml", configmap(n, "three", "3"))
        .commit("three");
    repo.work.push();
    let suspended_lines = |logs: &str| {
        logs.lines()
            .filter(|l| l.contains("the root is suspended") && l.contains(&format!("{n}/z")))
            .count()
    };
    let seen = suspended_lines(&d.logs());
    let z_before = get_root(&client, n, "z").await;
    patch_root(
        &client,
        n,
        "z",
        json!({"metadata": {"annotations": {"weft.io/requested-at": "now-2"}}}),
    )
    .await;
    // The daemon reconciled the annotated root and ran nothing.
    wait_for("the suspended root's reconcile", WITHIN, &d, async || {
        (suspended_lines(&d.logs()) > seen).then_some(())
    })
    .await;
    let z = get_root(&client, n, "z").await;
    assert_eq!(condition(&z, "Ready").unwrap().0, "True");
    assert_ne!(
        z.status
            .as_ref()
            .unwrap()
            .last_handled_requested_at
            .as_deref(),
        Some("now-2")
    );
    assert_eq!(z.status, z_before.status);
    assert!(!configmap_exists(&client, n, "three").await);
    // Resumed: the request is answered and the push applied.
    patch_root(&client, n, "z", json!({"spec": {"suspend": false}})).await;
    wait_for("z answered now-2 after resume", WITHIN, &d, async || {
        let z = get_root(&client, n, "z").await;
        (z.status.as_ref()?.last_handled_requested_at.as_deref() == Some("now-2")).then_some(())
    })
    .await;
    assert!(configmap_exists(&client, n, "three").await);

    // `weft create root --export` prints what `weft create root` applies.
    let (code, out, err) = Weft::new([
        "create",
        "root",
        "w",
        "-n",
        n,
        "--url",
        &repo.url(),
        "--branch",
        "main",
        "--interval",
        "1h",
        "--export",
    ])
    .run();
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("kind: Root") && out.contains("branch: main"),
        "{out}"
    );
    let (code, out, err) = Weft::new([
        "create",
        "root",
        "w",
        "-n",
        n,
        "--url",
        &repo.url(),
        "--branch",
        "main",
        "--interval",
        "1h",
        "--path",
        "w",
    ])
    .cluster()
    .run();
    assert_eq!(code, 0, "{out}{err}");
    wait_ready(&client, n, "w", "True", "ReconciliationSucceeded", &d).await;
    assert!(configmap_exists(&client, n, "w-config").await);
    let (code, out, err) = Weft::new([
        "create",
        "root",
        "bad",
        "-n",
        n,
        "--url",
        &repo.url(),
        "--interval",
        "5 minutes",
    ])
    .cluster()
    .run();
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("spec.interval"), "{err}");
    drop(d);
    ns.delete().await;
}

/// The events of `kind` `name` in `ns` with `reason`: their notes.
async fn event_notes(client: &Client, ns: &str, name: &str, reason: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

// Issue 41 item 6: an object declared by two roots stays with its owner, is reported on both,
// and the owner's passes go on with every other object (new objects created, drift corrected).
#[tokio::test]
async fn a_root_declaring_another_roots_object_stops_neither_root() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new("roots-conflict").await;
    let w = weft_ns.name();
    let owner = ServedRepo::start();
    owner
        .work
        .write("shared.yaml", configmap(w, "shared", "owner"))
        .write("own.yaml", configmap(w, "own-a", "a"))
        .commit("owner");
    owner.work.push();
    let second = ServedRepo::start();
    second
        .work
        .write("shared.yaml", configmap(w, "shared", "second"))
        .write("own.yaml", configmap(w, "own-b", "b"))
        .commit("second");
    second.work.push();

    let flag = tempfile::tempdir().unwrap();
    let d = start_daemon(w, &[w], flag.path());
    create_root(
        &client,
        w,
        "owner",
        json!({"source": {"url": owner.url()}, "interval": "1h"}),
    )
    .await
    .unwrap();
    wait_ready(&client, w, "owner", "True", "ReconciliationSucceeded", &d).await;
    create_root(
        &client,
        w,
        "second",
        json!({"source": {"url": second.url()}, "interval": "1h"}),
    )
    .await
    .unwrap();

    // The second root: not Ready, its reason Conflict, naming the object and its holder; its
    // own object is applied all the same; the shared one is untouched.
    let refused = wait_ready(&client, w, "second", "False", "Conflict", &d).await;
    let (status, _, message) = condition(&refused, "Conflict").expect("a Conflict condition");
    assert_eq!(status, "True");
    assert!(
        message.contains(&format!("ConfigMap/{w}/shared"))
            && message.contains(&format!("root/{w}/owner")),
        "{message}"
    );
    assert!(configmap_exists(&client, w, "own-b").await);
    let value = async |name: &str| configmap_value(&client, w, name).await;
    assert_eq!(value("shared").await.as_deref(), Some("owner"));

    // The owner goes on: a new object of its repository is created, drift of its own is
    // corrected, and it is Ready, with the conflict reported on it too.
    owner
        .work
        .write("new.yaml", configmap(w, "new-a", "a"))
        .commit("new object");
    owner.work.push();
    Api::<ConfigMap>::namespaced(client.clone(), w)
        .patch(
            "own-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"value": "drifted"}})),
        )
        .await
        .unwrap();
    patch_root(
        &client,
        w,
        "owner",
        json!({"metadata": {"annotations": {"weft.io/requested-at": "after-claim"}}}),
    )
    .await;
    let kept = wait_for("the owner's pass after the claim", WITHIN, &d, async || {
        let root = get_root(&client, w, "owner").await;
        let handled = root.status.as_ref()?.last_handled_requested_at.clone();
        (handled.as_deref() == Some("after-claim")).then_some(root)
    })
    .await;
    let (ready, reason, _) = condition(&kept, "Ready").unwrap();
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("True", "ReconciliationSucceeded")
    );
    let (status, _, message) = condition(&kept, "Conflict").expect("a Conflict condition");
    assert_eq!(status, "True");
    assert!(
        message.contains(&format!("ConfigMap/{w}/shared"))
            && message.contains(&format!("root/{w}/second")),
        "{message}"
    );
    assert!(configmap_exists(&client, w, "new-a").await);
    assert_eq!(value("own-a").await.as_deref(), Some("a"));
    assert_eq!(value("shared").await.as_deref(), Some("owner"));

    // Both roots carry a Warning event Conflict.
    for root in ["owner", "second"] {
        let notes = wait_for(
            &format!("a Conflict event on {root}"),
            WITHIN,
            &d,
            async || {
                Some(event_notes(&client, w, root, "Conflict").await).filter(|n| !n.is_empty())
            },
        )
        .await;
        assert!(
            notes[0].contains(&format!("ConfigMap/{w}/shared")),
            "{notes:?}"
        );
    }
    drop(d);
    weft_ns.delete().await;
}

// Issue 41 item 8: `weft tree|trigger|suspend|resume root NAME -n NS` act on a Root object, and
// the metrics carry kind `Root` with its namespace and name.
#[tokio::test]
async fn the_cli_names_a_root_object_and_the_metrics_carry_it() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TestNamespace::new("roots-cli").await;
    let n = ns.name();
    let repo = ServedRepo::start();
    repo.work
        .write("app/one.yaml", configmap(n, "one", "1"))
        .commit("one");
    repo.work.push();
    let flag = tempfile::tempdir().unwrap();
    let d = start_daemon(n, &[n], flag.path());
    create_root(
        &client,
        n,
        "app",
        json!({"source": {"url": repo.url()}, "path": "app", "interval": "1h"}),
    )
    .await
    .unwrap();
    wait_ready(&client, n, "app", "True", "ReconciliationSucceeded", &d).await;
    let weft = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["-n", n]);
        Weft::new(all).cluster().run()
    };

    // trigger --wait: a pass of the new revision, answered by the Root's status.
    repo.work
        .write("app/two.yaml", configmap(n, "two", "2"))
        .commit("two");
    repo.work.push();
    let (code, out, err) = weft(&["trigger", "root", "app", "--wait", "--timeout", "2m"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("requested a pass of Root {n}/app")),
        "{out}"
    );
    assert!(
        out.contains("Ready=True (ReconciliationSucceeded)"),
        "{out}"
    );
    assert!(configmap_exists(&client, n, "two").await);

    // tree: the Root's inventory, from its own namespace.
    let (code, out, err) = weft(&["tree", "root", "app"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("Root/{n}/app")), "{out}");
    assert!(out.contains(&format!("ConfigMap/{n}/one")), "{out}");
    assert!(out.contains(&format!("ConfigMap/{n}/two")), "{out}");
    // An unknown Root is named, and not taken for the flag root.
    let (code, out, err) = weft(&["tree", "root", "nope"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains(&format!("Root {n}/nope")), "{err}");
    let (code, _, err) = weft(&["tree", "widget", "app"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown kind \"widget\""), "{err}");

    // suspend: spec.suspend, and a request then runs nothing (exit 1, saying why).
    let (code, out, err) = weft(&["suspend", "root", "app"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(get_root(&client, n, "app").await.spec.suspend);
    let (code, out, err) = weft(&["trigger", "root", "app", "--wait", "--timeout", "1m"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("suspended"), "{out}");

    // resume: spec.suspend false and a pass now.
    repo.work
        .write("app/three.yaml", configmap(n, "three", "3"))
        .commit("three");
    repo.work.push();
    let (code, out, err) = weft(&["resume", "root", "app"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!get_root(&client, n, "app").await.spec.suspend);
    wait_for("the pass after resume", WITHIN, &d, async || {
        configmap_exists(&client, n, "three").await.then_some(())
    })
    .await;

    // The metrics: the Root's Ready and suspended series, by kind, namespace and name.
    let metrics = wait_for("the Root's metrics", WITHIN, &d, async || {
        let text = reqwest::get(format!("{}/metrics", d.base()))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let ready = format!("kind=\"Root\",name=\"app\",namespace=\"{n}\"");
        text.lines()
            .any(|l| {
                l.contains(&ready)
                    && l.contains("type=\"Ready\"")
                    && l.contains("status=\"True\"")
                    && l.ends_with(" 1")
            })
            .then_some(text)
    })
    .await;
    assert!(
        metrics.lines().any(|l| l.contains("suspend_status")
            && l.contains("kind=\"Root\"")
            && l.contains(&format!("namespace=\"{n}\""))),
        "{metrics}"
    );
    drop(d);
    ns.delete().await;
}

// Issue 41 item 2: a push webhook names its repository; every Root whose source it is passes
// now (the interval is an hour), and a Root of another repository does not.
#[tokio::test]
async fn a_push_webhook_passes_the_roots_whose_source_it_is() {
    use support::daemon::github_push_of;
    use support::git_servers::{GitDaemon, RepoHost, WorkTree};
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TestNamespace::new("roots-push").await;
    let n = ns.name();
    let host = RepoHost::new();
    let server = {
        host.create("team/app.git");
        host.create("team/other.git");
        GitDaemon::start(&host)
    };
    let (app_url, other_url) = (server.url("team/app.git"), server.url("team/other.git"));
    let app = WorkTree::new(&app_url);
    app.write("one.yaml", configmap(n, "app-one", "1"))
        .commit("one");
    app.push();
    let other = WorkTree::new(&other_url);
    other
        .write("one.yaml", configmap(n, "other-one", "1"))
        .commit("one");
    other.push();
    let flag = tempfile::tempdir().unwrap();
    let d = start_daemon(n, &[n], flag.path());
    for (name, url) in [("app", &app_url), ("other", &other_url)] {
        create_root(
            &client,
            n,
            name,
            json!({"source": {"url": url, "ref": {"branch": "main"}}, "interval": "1h"}),
        )
        .await
        .unwrap();
        wait_ready(&client, n, name, "True", "ReconciliationSucceeded", &d).await;
    }
    let passes = |root: &Root| root.status.as_ref().map_or(0, |s| s.passes.len());
    let other_before = passes(&get_root(&client, n, "other").await);

    // Both repositories move; GitHub tells of the app's (by its ssh and https URLs).
    app.write("two.yaml", configmap(n, "app-two", "2"))
        .commit("two");
    app.push();
    other
        .write("two.yaml", configmap(n, "other-two", "2"))
        .commit("two");
    other.push();
    let payload = json!({
        "ref": "refs/heads/main",
        "repository": {
            "clone_url": app_url.replace("git://", "https://"),
            "ssh_url": format!("git@127.0.0.1:team/app.git"),
        },
    });
    let (code, answer) = github_push_of(&d, payload, None).await;
    assert_eq!(code, 202, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["roots"], json!([format!("{n}/app")]), "{answer}");

    // The app's Root passes now, saying why; the other's does not.
    let app_root = wait_for("the app's pass after the push", WITHIN, &d, async || {
        configmap_exists(&client, n, "app-two")
            .await
            .then_some(())?;
        let root = get_root(&client, n, "app").await;
        (root
            .status
            .as_ref()?
            .passes
            .first()?
            .reasons
            .contains(&"push".to_string()))
        .then_some(root)
    })
    .await;
    assert_eq!(
        condition(&app_root, "Ready").map(|c| c.1).as_deref(),
        Some("ReconciliationSucceeded")
    );
    assert!(!configmap_exists(&client, n, "other-two").await);
    assert_eq!(passes(&get_root(&client, n, "other").await), other_before);

    // The sync endpoint names a Root: it passes now (reason api); an unknown one is 404.
    let sync = async |root: &str| support::daemon::sync_root_of(&d, root).await;
    let (code, body) = sync(&format!("{n}/other")).await;
    assert_eq!(code, 202, "{body}");
    wait_for(
        "the other's pass asked over the API",
        WITHIN,
        &d,
        async || {
            configmap_exists(&client, n, "other-two")
                .await
                .then_some(())?;
            let root = get_root(&client, n, "other").await;
            (root
                .status
                .as_ref()?
                .passes
                .first()?
                .reasons
                .contains(&"api".to_string()))
            .then_some(())
        },
    )
    .await;
    let (code, body) = sync(&format!("{n}/nope")).await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains(&format!("no Root {n}/nope")), "{body}");
    drop(d);
    ns.delete().await;
}

/// Tag the work tree's HEAD `tag`.
fn tag(work: &support::git_servers::WorkTree, tag: &str) {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(work.path())
        .args(["tag", tag])
        .output()
        .unwrap();
    assert!(out.status.success(), "git tag {tag}");
}

// Issue 41 item 1: `ref.semver` follows the highest tag its range admits, and moves when a
// newer one is pushed; a range nothing satisfies says so, a bad range is refused.
#[tokio::test]
async fn a_semver_ref_follows_the_highest_tag_in_range() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TestNamespace::new("roots-semver").await;
    let n = ns.name();
    let repo = ServedRepo::start();
    for (version, value) in [("v1.0.0", "1.0"), ("v1.1.0", "1.1"), ("v2.0.0", "2.0")] {
        repo.work
            .write("release.yaml", configmap(n, "release", value))
            .commit(version);
        tag(&repo.work, version);
    }
    repo.work.push();
    let flag = tempfile::tempdir().unwrap();
    let d = start_daemon(n, &[n], flag.path());
    let spec = |range: &str| json!({"source": {"url": repo.url(), "ref": {"semver": range}}, "interval": "1h"});
    create_root(&client, n, "app", spec(">=1.0.0 <2.0.0"))
        .await
        .unwrap();
    wait_ready(&client, n, "app", "True", "ReconciliationSucceeded", &d).await;
    let value = async || configmap_value(&client, n, "release").await;
    assert_eq!(value().await.as_deref(), Some("1.1"));

    // A newer tag in range: the next pass applies it.
    repo.work
        .write("release.yaml", configmap(n, "release", "1.2"))
        .commit("v1.2.0");
    tag(&repo.work, "v1.2.0");
    repo.work.push();
    patch_root(
        &client,
        n,
        "app",
        json!({"metadata": {"annotations": {"weft.io/requested-at": "v1.2"}}}),
    )
    .await;
    wait_for("release 1.2 applied", WITHIN, &d, async || {
        (value().await.as_deref() == Some("1.2")).then_some(())
    })
    .await;

    // Nothing in range: not Ready, naming the range and the tags; a bad range is Stalled.
    create_root(&client, n, "future", spec(">=3"))
        .await
        .unwrap();
    let future = wait_ready(&client, n, "future", "False", "NoMatchingTag", &d).await;
    let (_, _, message) = condition(&future, "Ready").unwrap();
    assert!(
        message.contains(">=3") && message.contains("v2.0.0"),
        "{message}"
    );
    create_root(&client, n, "bad", spec("one point two"))
        .await
        .unwrap();
    let bad = wait_ready(&client, n, "bad", "False", "InvalidSemver", &d).await;
    assert_eq!(
        condition(&bad, "Stalled").map(|c| c.0).as_deref(),
        Some("True")
    );
    assert_eq!(value().await.as_deref(), Some("1.2"));
    drop(d);
    ns.delete().await;
}

// Issue 42 items 1 and 2: `--default-service-account` gives a Root without an account that
// account of its own namespace (a ClusterRole in its repository is then refused by the API
// server), and `dependsOn` across namespaces is refused under it.
#[tokio::test]
async fn a_default_account_and_no_cross_namespace_refs() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new("roots-default-sa").await;
    let team = TestNamespace::new("roots-default-team").await;
    let (w, t) = (weft_ns.name(), team.name());
    namespace_admin(&client, t, "tenant").await;
    let repo = ServedRepo::start();
    repo.work
        .write("apps/app.yaml", configmap(t, "tenant-config", "1"))
        .write(
            "cluster/role.yaml",
            format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {t}-escape\nrules: []\n"),
        )
        .commit("tenant");
    repo.work.push();
    let flag = tempfile::tempdir().unwrap();
    let mut opts = DaemonOptions::new(flag.path().to_str().unwrap(), w);
    opts.controllers = true;
    opts.extra = vec![
        "--watch-namespaces".into(),
        format!("{w},{t}"),
        "--default-service-account".into(),
        "tenant".into(),
    ];
    let d = Daemon::start(opts);
    let spec = |path: &str| json!({"source": {"url": repo.url()}, "path": path, "interval": "1h"});
    create_root(&client, t, "apps", spec("apps")).await.unwrap();
    wait_ready(&client, t, "apps", "True", "ReconciliationSucceeded", &d).await;
    assert!(configmap_exists(&client, t, "tenant-config").await);
    assert!(d
        .logs()
        .contains(&format!("system:serviceaccount:{t}:tenant")));

    // The same account may not create a ClusterRole: refused by the API server, on this root.
    create_root(&client, t, "escape", spec("cluster"))
        .await
        .unwrap();
    let refused = wait_ready(&client, t, "escape", "False", "ReconciliationFailed", &d).await;
    let (_, _, message) = condition(&refused, "Ready").unwrap();
    assert!(message.contains("clusterroles"), "{message}");
    let roles: Api<ClusterRole> = Api::all(client.clone());
    assert!(roles
        .get_opt(&format!("{t}-escape"))
        .await
        .unwrap()
        .is_none());

    // dependsOn a root of another namespace: refused, naming it.
    let mut cross = spec("apps");
    cross["dependsOn"] = json!([{"name": "infra", "namespace": w}]);
    create_root(&client, t, "cross", cross).await.unwrap();
    let stalled = wait_ready(&client, t, "cross", "False", "CrossNamespaceRef", &d).await;
    let (_, _, message) = condition(&stalled, "Stalled").unwrap();
    assert!(message.contains(&format!("{w}/infra")), "{message}");
    drop(d);
    team.delete().await;
    weft_ns.delete().await;
}

/// Roots of one repository requested at once, or woken by one push webhook, share the remote's
/// ref listing (one listing started after every request was seen serves them all), and each
/// still sees the commit pushed before its request.
#[tokio::test]
async fn roots_of_one_repository_requested_at_once_share_a_ref_listing_made_since() {
    use support::git_servers::{HttpAuth, HttpGitServer, RepoHost, WorkTree};
    const ROOTS: usize = 6;
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TestNamespace::new("roots-listing").await;
    let n = ns.name();
    let host = RepoHost::new();
    host.create("config.git");
    let server = HttpGitServer::start(&host, HttpAuth::default());
    let url = server.url("config.git");
    let work = WorkTree::new(&host.path("config.git").display().to_string());
    // A file with a ConfigMap `r<i>-<name>` in each root's directory, committed and pushed.
    let commit_all = |name: &str| {
        for i in 0..ROOTS {
            let cm = configmap(n, &format!("r{i}-{name}"), name);
            work.write(&format!("r{i}/{name}.yaml"), cm);
        }
        work.commit(name);
        work.push();
    };
    commit_all("one");
    let flag = tempfile::tempdir().unwrap();
    let d = start_daemon(n, &[n], flag.path());
    let names: Vec<String> = (0..ROOTS).map(|i| format!("r{i}")).collect();
    for name in &names {
        let spec = json!({"source": {"url": url}, "path": name, "interval": "1h"});
        create_root(&client, n, name, spec).await.unwrap();
    }
    for name in &names {
        wait_ready(&client, n, name, "True", "ReconciliationSucceeded", &d).await;
    }
    let request_all = async |token: &str| {
        let patch = json!({"metadata": {"annotations": {"weft.io/requested-at": token}}});
        futures::future::join_all(
            names
                .iter()
                .map(|name| patch_root(&client, n, name, patch.clone())),
        )
        .await;
        for name in &names {
            wait_for(
                &format!("Root {name} answered {token}"),
                WITHIN,
                &d,
                async || {
                    let root = get_root(&client, n, name).await;
                    (root.status.as_ref()?.last_handled_requested_at.as_deref() == Some(token))
                        .then_some(())
                },
            )
            .await;
        }
    };
    // Over HTTP a ref listing is a `GET info/refs` alone; a fetch is one followed by a `POST
    // git-upload-pack` (each root has a cache of its own, and fetches a new commit into it).
    let listings = || {
        let requests = server.requests();
        let count = |what: &str| requests.iter().filter(|r| r.contains(what)).count();
        let listed = count("/info/refs") - count("POST /config.git/git-upload-pack");
        (listed, requests.join("\n"))
    };
    // Some listing was made, and fewer than one per root.
    let shared = || {
        let (listed, all) = listings();
        assert!(listed >= 1, "no ref listing at all:\n{all}");
        assert!(
            listed < ROOTS,
            "{listed} ref listings for {ROOTS} roots:\n{all}"
        );
    };

    // A push, then a request of every root: each pass sees the push (its listing started
    // after the request was seen), in fewer listings than roots.
    commit_all("two");
    server.clear_requests();
    request_all("after-push").await;
    for i in 0..ROOTS {
        assert!(
            configmap_exists(&client, n, &format!("r{i}-two")).await,
            "Root r{i} passed without the commit pushed before its request"
        );
    }
    shared();

    // Nothing new: the roots' requests share listings again, nothing is fetched.
    server.clear_requests();
    request_all("again").await;
    shared();

    // A push webhook for the repository: every root passes the pushed commit (each listing
    // started after the webhook arrived), in fewer listings than roots.
    commit_all("three");
    server.clear_requests();
    let payload = json!({"ref": "refs/heads/main", "repository": {"clone_url": url}});
    let (code, answer) = support::daemon::github_push_of(&d, payload, None).await;
    assert_eq!(code, 202, "{answer}");
    for i in 0..ROOTS {
        wait_for(
            &format!("Root r{i} applied the push"),
            WITHIN,
            &d,
            async || {
                configmap_exists(&client, n, &format!("r{i}-three"))
                    .await
                    .then_some(())
            },
        )
        .await;
    }
    shared();
    ns.delete().await;
}

/// Issue 47 item 4: a Root's pass of an unchanged revision applies its last render again (its
/// files are neither read nor rendered), and still restores what drifted; a new spec or a new
/// revision is rendered.
#[tokio::test]
async fn a_root_applies_its_last_render_again_until_its_revision_or_spec_changes() {
    const AGAIN: &str = "applying the last render again";
    const UNREAD: &str = "its files are not read again";
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TestNamespace::new("roots-again").await;
    let n = ns.name();
    let repo = ServedRepo::start();
    // `a` names no namespace (the root's own), `b` names it.
    let unplaced = |value: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\ndata: {{value: \"{value}\"}}\n")
    };
    repo.work
        .write("app/a.yaml", unplaced("1"))
        .write("app/b.yaml", configmap(n, "b", "1"))
        .commit("one");
    repo.work.push();
    let flag = tempfile::tempdir().unwrap();
    let d = start_daemon(n, &[n], flag.path());
    let spec = json!({"source": {"url": repo.url()}, "path": "app", "interval": "1h"});
    create_root(&client, n, "app", spec).await.unwrap();
    wait_ready(&client, n, "app", "True", "ReconciliationSucceeded", &d).await;
    let again = || d.logs().matches(AGAIN).count();
    assert_eq!(again(), 0, "the first pass renders\n{}", d.logs());
    // A pass that applies the last render again does not read the head's files from the cache
    // either (1,000 files at 100,000 objects: a twentieth of such a no-op's CPU).
    let unread = || d.logs().matches(UNREAD).count();
    // Ask for a pass with `more` of the Root in the same write (a change of the Root alone
    // could start a pass of its own), until it answered, Ready.
    let request_with = async |token: &str, more: Value| {
        let mut patch = json!({"metadata": {"annotations": {"weft.io/requested-at": token}}});
        patch
            .as_object_mut()
            .unwrap()
            .extend(more.as_object().cloned().unwrap_or_default());
        patch_root(&client, n, "app", patch).await;
        wait_for(
            &format!("Root app answered {token}"),
            WITHIN,
            &d,
            async || {
                let root = get_root(&client, n, "app").await;
                let status = root.status.as_ref()?;
                let ready = condition(&root, "Ready").is_some_and(|(s, _, _)| s == "True");
                (status.last_handled_requested_at.as_deref() == Some(token) && ready).then_some(())
            },
        )
        .await;
    };
    let request = async |token: &str| request_with(token, json!({})).await;

    // The same revision: the last render, applied again, restores a deleted object.
    Api::<ConfigMap>::namespaced(client.clone(), n)
        .delete("b", &Default::default())
        .await
        .expect("delete b");
    request("same").await;
    assert!(configmap_exists(&client, n, "b").await, "{}", d.logs());
    assert_eq!(again(), 1, "{}", d.logs());
    assert_eq!(unread(), 1, "{}", d.logs());

    // Another spec (a new generation): rendered again.
    request_with("respecified", json!({"spec": {"timeout": "3m"}})).await;
    assert_eq!(configmap_value(&client, n, "a").await.as_deref(), Some("1"));
    assert_eq!(again(), 1, "{}", d.logs());
    assert_eq!(unread(), 1, "a new spec reads the files\n{}", d.logs());

    // A new revision is rendered.
    repo.work.write("app/a.yaml", unplaced("2")).commit("two");
    repo.work.push();
    request("new").await;
    assert_eq!(configmap_value(&client, n, "a").await.as_deref(), Some("2"));
    assert_eq!(again(), 1, "{}", d.logs());
    assert_eq!(unread(), 1, "{}", d.logs());

    // And kept: the next pass of it applies it again, without reading its files.
    request("kept").await;
    assert_eq!(again(), 2, "{}", d.logs());
    assert_eq!(unread(), 2, "{}", d.logs());
    ns.delete().await;
}
