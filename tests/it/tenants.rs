//! Tenants (issue 42 items 2, 3 and 5) on the real control plane, in the shape of
//! flux2-multi-tenancy (built here, nothing copied): a platform root in Weft's namespace, acting
//! as Weft, declares two tenants — each a namespace, a ServiceAccount bound to namespace admin
//! (a RoleBinding to the ClusterRole `admin`, and a Role for Weft's own kinds), and a Root that
//! runs as that account from the tenant's own repository (a real git server on loopback).
//!
//! Each tenant's repository declares, beside its application, roots that try to escape: a
//! ClusterRoleBinding, an object in the other tenant's namespace, a WeaveCloud in kube-system,
//! a Root in the other tenant's namespace, a Root with `serviceAccountName: weft`, a Root naming
//! the other tenant's account, and a WeaveCloud whose agents need ClusterRoles. Each is refused
//! as that tenant, with its reason, on that tenant's root (status and event) — by the API server,
//! or by Weft for a root that would act as more than the root that declared it — and the
//! WeaveCloud says why its agents do not run. The tenants' own roots and the platform's stay
//! Ready and keep passing at new revisions while the escapes keep failing.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use serde_json::json;

use support::cluster::{self, TestNamespace};
use support::conditions::condition;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::ServedRepo;
use support::manifests::{self, configmap, WeaveCloudYaml};
use support::rbac::{client_as, wait_until_granted, Access};
use support::wait::wait_for;
use weft::api::root::Root;
use weft::api::weavecloud::WeaveCloud;

const WITHIN: Duration = Duration::from_secs(180);

/// A tenant as the platform declares it: namespace, account, namespace admin through the
/// ClusterRole `admin`, and a Role for Weft's kinds (`admin` aggregates no custom resource).
fn tenant_rbac(ns: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: {ns}
  labels: {{weft.io/tenant: {ns}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {ns}, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {ns}-admin, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}}
subjects: [{{kind: ServiceAccount, name: {ns}, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {ns}-weft-kinds, namespace: {ns}}}
rules:
- apiGroups: [weft.io, cloud.weave.works, armada.airshipit.org, notification.weft.io]
  resources: ["*"]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {ns}-weft-kinds, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {ns}-weft-kinds}}
subjects: [{{kind: ServiceAccount, name: {ns}, namespace: {ns}}}]
"#
    )
}

/// A Root document.
fn root_doc(ns: &str, name: &str, url: &str, path: &str, account: &str) -> String {
    format!(
        "apiVersion: weft.io/v1alpha1\nkind: Root\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{url: \"{url}\"}}\n  path: {path}\n  interval: 1h\n  serviceAccountName: {account}\n"
    )
}

/// A WeaveCloud of `ns` with only flux, which `flux` turns on (its agents need ClusterRoles).
fn weavecloud(ns: &str, flux: bool) -> WeaveCloudYaml {
    manifests::weavecloud(ns)
        .name("wc")
        .auto_update(false)
        .general("takeover", "false")
        .flux_disabled(!flux)
        .flux_config()
        .only_flux()
}

/// The roots a tenant's repository declares to escape, with the reason each is refused for.
const ESCAPES: [(&str, &str); 6] = [
    ("crb", "ReconciliationFailed"),
    ("neighbour", "ReconciliationFailed"),
    ("kube-system", "ReconciliationFailed"),
    ("other-root", "ReconciliationFailed"),
    ("as-weft", "ServiceAccountNotAllowed"),
    ("as-neighbour", "ServiceAccountNotAllowed"),
];

/// Tenant `me`'s repository (at `url`): its application, and roots that try to escape into
/// `other`'s namespace, the cluster, kube-system, or another account.
fn write_tenant_repo(repo: &ServedRepo, me: &str, other: &str) -> String {
    let url = repo.url();
    let mut roots = [
        root_doc(me, "crb", &url, "escapes/crb", me),
        root_doc(me, "neighbour", &url, "escapes/neighbour", me),
        root_doc(me, "kube-system", &url, "escapes/kube-system", me),
        root_doc(me, "other-root", &url, "escapes/other-root", me),
        root_doc(me, "agents", &url, "escapes/agents", me),
        // Weft's own account's name, and the other tenant's account's name: never more than
        // the declaring root's own account.
        root_doc(me, "as-weft", &url, "escapes/harmless", "weft"),
        root_doc(me, "as-neighbour", &url, "escapes/harmless", other),
    ];
    roots.sort();
    repo.work
        .write("apps/app.yaml", configmap(me, "app", "1"))
        .write("apps/roots.yaml", roots.join("---\n"))
        .write(
            "escapes/crb/binding.yaml",
            format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {me}-escape}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{kind: ServiceAccount, name: {me}, namespace: {me}}}]\n"),
        )
        .write(
            "escapes/neighbour/cm.yaml",
            configmap(other, &format!("from-{me}"), "1"),
        )
        .write(
            "escapes/kube-system/wc.yaml",
            weavecloud("kube-system", false).name(me).yaml(),
        )
        .write(
            "escapes/other-root/root.yaml",
            root_doc(other, &format!("from-{me}"), &url, "apps", other),
        )
        .write("escapes/agents/wc.yaml", weavecloud(me, false).yaml())
        .write("escapes/harmless/cm.yaml", configmap(me, "harmless", "1"));
    let sha = repo.work.commit("tenant");
    repo.work.push();
    sha
}

async fn get_root(client: &Client, ns: &str, name: &str) -> Option<Root> {
    Api::<Root>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading Root {ns}/{name}: {e}"))
}

/// Wait until Root `ns/name` is `Ready=<status>` with `reason` (and, when given, last applied
/// `revision`); the root then.
async fn wait_root(
    client: &Client,
    d: &Daemon,
    (ns, name): (&str, &str),
    status: &str,
    reason: &str,
    revision: Option<&str>,
) -> Root {
    let what = format!("Root {ns}/{name} Ready={status} ({reason}) at {revision:?}");
    wait_for(&what, WITHIN, d, async || {
        let root = get_root(client, ns, name).await?;
        let (s, r, _) = condition(&root, "Ready")?;
        let at = root.status.as_ref()?.last_applied_revision.clone();
        let at_revision = revision.is_none_or(|rev| at.is_some_and(|a| a.contains(rev)));
        (s == status && r == reason && at_revision).then_some(root)
    })
    .await
}

/// Ask Root `ns/name` for a pass now (`weft.io/requested-at`).
async fn request_pass(client: &Client, ns: &str, name: &str) {
    let at = k8s_openapi::jiff::Timestamp::now().to_string();
    Api::<Root>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"weft.io/requested-at": at}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("requesting a pass of Root {ns}/{name}: {e}"));
}

/// The notes of the events about `name` (of any kind) in `ns` with `reason`.
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

async fn configmap_exists(client: &Client, ns: &str, name: &str) -> bool {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn tenants_are_refused_their_escapes_and_stop_no_one_else() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new("tenants").await;
    let w = weft_ns.name().to_string();
    let (a, b) = (format!("{w}-a"), format!("{w}-b"));
    let flag = tempfile::tempdir().unwrap();
    let mut opts = DaemonOptions::new(flag.path().to_str().unwrap(), &w);
    opts.controllers = true;
    opts.extra = vec!["--watch-namespaces".into(), format!("{w},{a},{b}")];
    let d = Daemon::start(opts);

    // The platform's repository: first the tenants' namespaces, accounts and grants.
    let platform = ServedRepo::start();
    for t in [&a, &b] {
        platform
            .work
            .write(&format!("tenants/{t}/rbac.yaml"), tenant_rbac(t));
    }
    let first = platform.work.commit("tenants' namespaces and grants");
    platform.work.push();
    let roots: Api<Root> = Api::namespaced(client.clone(), &w);
    let spec = json!({"source": {"url": platform.url()}, "path": "tenants", "interval": "1h"});
    let doc: Root = serde_json::from_value(json!({
        "apiVersion": "weft.io/v1alpha1", "kind": "Root",
        "metadata": {"name": "platform", "namespace": w}, "spec": spec,
    }))
    .unwrap();
    roots
        .patch(
            "platform",
            &PatchParams::apply("weft-test"),
            &Patch::Apply(&doc),
        )
        .await
        .unwrap();
    let platform_root = (w.as_str(), "platform");
    wait_root(
        &client,
        &d,
        platform_root,
        "True",
        "ReconciliationSucceeded",
        Some(first.as_str()),
    )
    .await;
    for t in [&a, &b] {
        let user = format!("system:serviceaccount:{t}:{t}");
        let tenant = client_as(&user).await;
        let accesses = [
            Access::new("create", "configmaps", Some(t)),
            Access::new("create", "roots.weft.io", Some(t)),
            Access::new("create", "weaveclouds.cloud.weave.works", Some(t)),
        ];
        wait_until_granted(&tenant, &user, &accesses).await;
    }

    // Then the tenants' roots, each from the tenant's own repository, as its account.
    let repos = [ServedRepo::start(), ServedRepo::start()];
    let tenant_shas = [
        write_tenant_repo(&repos[0], &a, &b),
        write_tenant_repo(&repos[1], &b, &a),
    ];
    for (t, repo) in [(&a, &repos[0]), (&b, &repos[1])] {
        platform.work.write(
            &format!("tenants/{t}/root.yaml"),
            root_doc(t, t, &repo.url(), "apps", t),
        );
    }
    let second = platform.work.commit("tenants' roots");
    platform.work.push();
    request_pass(&client, &w, "platform").await;
    wait_root(
        &client,
        &d,
        platform_root,
        "True",
        "ReconciliationSucceeded",
        Some(second.as_str()),
    )
    .await;

    for (i, (me, other)) in [(&a, &b), (&b, &a)].into_iter().enumerate() {
        let (me, other) = (me.as_str(), other.as_str());
        let user = format!("system:serviceaccount:{me}:{me}");
        // The tenant's own root: Ready at its revision, as its account.
        wait_root(
            &client,
            &d,
            (me, me),
            "True",
            "ReconciliationSucceeded",
            Some(tenant_shas[i].as_str()),
        )
        .await;
        assert!(configmap_exists(&client, me, "app").await);
        // Every escape: refused on its own root, with the reason, in its status and an event.
        for (name, reason) in ESCAPES {
            let refused = wait_root(&client, &d, (me, name), "False", reason, None).await;
            let (_, _, message) = condition(&refused, "Ready").unwrap();
            let expected: Vec<String> = match name {
                "crb" => vec![user.clone(), "clusterrolebindings".into()],
                "neighbour" => vec![user.clone(), "configmaps".into(), other.to_string()],
                "kube-system" => vec![user.clone(), "kube-system".into()],
                "other-root" => vec![user.clone(), "roots.weft.io".into(), other.to_string()],
                "as-weft" => vec![
                    format!("declared by root {me}/{me}, which acts as {user}"),
                    format!("never as system:serviceaccount:{me}:weft"),
                ],
                _ => vec![format!("never as system:serviceaccount:{me}:{other}")],
            };
            for part in &expected {
                assert!(
                    message.contains(part.as_str()),
                    "Root {me}/{name}: {part} not in: {message}"
                );
            }
            assert!(!message.contains('\n'), "one line: {message}");
            let notes = wait_for(
                &format!("an event {reason} on Root {me}/{name}"),
                WITHIN,
                &d,
                async || {
                    let notes = event_notes(&client, me, name, reason).await;
                    (!notes.is_empty()).then_some(notes)
                },
            )
            .await;
            assert!(notes.iter().any(|n| n.contains(&expected[0])), "{notes:?}");
        }
        // Nothing of the escapes exists.
        let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        assert!(bindings
            .get_opt(&format!("{me}-escape"))
            .await
            .unwrap()
            .is_none());
        assert!(!configmap_exists(&client, other, &format!("from-{me}")).await);
        assert!(get_root(&client, other, &format!("from-{me}"))
            .await
            .is_none());
        let system: Api<WeaveCloud> = Api::namespaced(client.clone(), "kube-system");
        assert!(system.get_opt(me).await.unwrap().is_none());
        // The roots that would have acted as another account fetched and applied nothing.
        assert!(!configmap_exists(&client, me, "harmless").await);
        // The WeaveCloud without agents that need more: applied, and says by whom, as whom.
        wait_root(
            &client,
            &d,
            (me, "agents"),
            "True",
            "ReconciliationSucceeded",
            None,
        )
        .await;
    }

    // Tenant a turns on flux: its agents' ClusterRoles are refused as the tenant, and the
    // WeaveCloud says so in one line (status and event), as does the root.
    repos[0]
        .work
        .write("escapes/agents/wc.yaml", weavecloud(&a, true).yaml());
    repos[0].work.commit("flux on");
    repos[0].work.push();
    request_pass(&client, &a, "agents").await;
    let user_a = format!("system:serviceaccount:{a}:{a}");
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), &a);
    let message = wait_for(
        "WeaveCloud wc Ready=False (AgentsFailed)",
        WITHIN,
        &d,
        async || {
            let wc = wcs.get_opt("wc").await.ok()??;
            let c = wc
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (c.reason == "AgentsFailed").then_some(c.message)
        },
    )
    .await;
    for part in [
        format!("root {a}/agents applies its agents as {user_a}"),
        // Its ClusterRole or ClusterRoleBinding, whichever the API server refused first.
        "clusterrole".to_string(),
        "at the cluster scope".to_string(),
    ] {
        assert!(message.contains(&part), "{part} not in: {message}");
    }
    assert!(!message.contains('\n'), "one line: {message}");
    wait_for(
        "an event AgentsFailed on WeaveCloud wc",
        WITHIN,
        &d,
        async || {
            let notes = event_notes(&client, &a, "wc", "AgentsFailed").await;
            notes.iter().any(|n| n.contains(&user_a)).then_some(())
        },
    )
    .await;
    wait_root(
        &client,
        &d,
        (a.as_str(), "agents"),
        "False",
        "ReconciliationFailed",
        None,
    )
    .await;
    // The WeaveCloud controller (acting as Weft) left it alone: no finalizer of Weft's.
    let wc = wcs.get("wc").await.unwrap();
    assert!(wc.metadata.finalizers.unwrap_or_default().is_empty());

    // Not slowed: while the escapes keep failing, the platform and tenant b pass at new
    // revisions.
    platform
        .work
        .write("tenants/shared.yaml", configmap(&w, "shared", "2"));
    let third = platform.work.commit("a shared setting");
    platform.work.push();
    repos[1]
        .work
        .write("apps/app.yaml", configmap(&b, "app", "2"));
    let b_second = repos[1].work.commit("app 2");
    repos[1].work.push();
    request_pass(&client, &w, "platform").await;
    request_pass(&client, &b, &b).await;
    request_pass(&client, &a, "crb").await;
    wait_root(
        &client,
        &d,
        platform_root,
        "True",
        "ReconciliationSucceeded",
        Some(third.as_str()),
    )
    .await;
    wait_root(
        &client,
        &d,
        (b.as_str(), b.as_str()),
        "True",
        "ReconciliationSucceeded",
        Some(b_second.as_str()),
    )
    .await;
    wait_root(
        &client,
        &d,
        (a.as_str(), a.as_str()),
        "True",
        "ReconciliationSucceeded",
        None,
    )
    .await;
    let crb = wait_root(
        &client,
        &d,
        (a.as_str(), "crb"),
        "False",
        "ReconciliationFailed",
        None,
    )
    .await;
    assert!(crb.status.unwrap().last_applied_revision.is_none());

    drop(d);
    for t in [&a, &b] {
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .delete(t, &DeleteParams::default())
            .await;
    }
    weft_ns.delete().await;
}

/// Issue 42 item 3: a notification Provider a tenant's root applied reads its Secret as the
/// tenant. The tenant's account may manage its namespace's ConfigMaps and Weft's kinds but not
/// read Secrets: its Provider says so (`SecretForbidden`, naming the account), where Weft's own
/// identity would have read the Secret and called the Provider ready.
#[tokio::test]
async fn a_tenants_provider_reads_its_secret_as_the_tenant() {
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    use weft::api::notification::Provider;

    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new("tenant-secret").await;
    let w = weft_ns.name().to_string();
    let t = format!("{w}-t");
    tenant_without_secrets(&client, &t).await;
    create(
        Api::<Secret>::namespaced(client.clone(), &t),
        json!({"metadata": {"name": "hook", "namespace": t}, "stringData": {"token": "s3cret"}}),
    )
    .await;

    let repo = ServedRepo::start();
    repo.work
        .write("apps/app.yaml", configmap(&t, "app", "1"))
        .write(
            "apps/provider.yaml",
            format!("apiVersion: notification.weft.io/v1alpha1\nkind: Provider\nmetadata: {{name: hook, namespace: {t}}}\nspec:\n  type: generic\n  address: https://hooks.example.com/weft\n  secretRef: {{name: hook}}\n"),
        );
    let sha = repo.work.commit("an application and its Provider");
    repo.work.push();
    let flag = tempfile::tempdir().unwrap();
    let mut opts = DaemonOptions::new(flag.path().to_str().unwrap(), &w);
    opts.controllers = true;
    opts.extra = vec!["--watch-namespaces".into(), format!("{w},{t}")];
    let d = Daemon::start(opts);
    let doc: Root =
        serde_saphyr::from_str(&root_doc(&t, "app", &repo.url(), "apps", "deployer")).unwrap();
    Api::<Root>::namespaced(client.clone(), &t)
        .patch("app", &PatchParams::apply("weft-test"), &Patch::Apply(&doc))
        .await
        .unwrap();
    wait_root(
        &client,
        &d,
        (&t, "app"),
        "True",
        "ReconciliationSucceeded",
        Some(&sha),
    )
    .await;
    let providers: Api<Provider> = Api::namespaced(client.clone(), &t);
    let condition = wait_for("the tenant's Provider judged", WITHIN, &d, async || {
        let p = providers.get_opt("hook").await.ok()??;
        p.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")
    })
    .await;
    assert_eq!(condition.reason, "SecretForbidden", "{condition:?}");
    assert!(
        condition
            .message
            .contains(&format!("system:serviceaccount:{t}:deployer")),
        "{condition:?}"
    );
    assert!(!condition.message.contains("s3cret"), "{condition:?}");
    weft_ns.delete().await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&t, &DeleteParams::default())
        .await;
}

/// Issue 42 item 3: an ArmadaChart a tenant's root applied is rendered and applied as the
/// tenant. Its chart's ClusterRole is refused by the API server as the tenant's account, on the
/// tenant's root, and never exists; acting as Weft, the pass would have created it.
#[tokio::test]
async fn a_tenants_armada_chart_is_applied_as_the_tenant() {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::ClusterRole;

    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new("tenant-armada").await;
    let w = weft_ns.name().to_string();
    let t = format!("{w}-t");
    tenant_without_secrets(&client, &t).await;
    let repo = ServedRepo::start();
    repo.work
        .write(
            "apps/charts/app/Chart.yaml",
            "apiVersion: v2\nname: app\nversion: 0.1.0\n",
        )
        .write(
            "apps/charts/app/templates/settings.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\ndata: {a: b}\n",
        )
        .write(
            "apps/charts/app/templates/escape.yaml",
            format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {t}-escape\nrules: []\n"),
        )
        .write(
            "apps/armada.yaml",
            format!("apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: app, namespace: {t}}}\nspec:\n  release: app\n  namespace: {t}\n  source: {{type: local, location: charts/app}}\n  wait: {{timeout: 30, resources: []}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: g, namespace: {t}}}\nspec:\n  chart_group: [app]\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaManifest\nmetadata: {{name: site, namespace: {t}}}\nspec:\n  release_prefix: site\n  chart_groups: [g]\n"),
        );
    repo.work.commit("a chart that brings a ClusterRole");
    repo.work.push();
    let flag = tempfile::tempdir().unwrap();
    let mut opts = DaemonOptions::new(flag.path().to_str().unwrap(), &w);
    opts.controllers = true;
    opts.extra = vec!["--watch-namespaces".into(), format!("{w},{t}")];
    let d = Daemon::start(opts);
    let doc: Root =
        serde_saphyr::from_str(&root_doc(&t, "app", &repo.url(), "apps", "deployer")).unwrap();
    Api::<Root>::namespaced(client.clone(), &t)
        .patch("app", &PatchParams::apply("weft-test"), &Patch::Apply(&doc))
        .await
        .unwrap();
    let root = wait_root(
        &client,
        &d,
        (&t, "app"),
        "False",
        "ReconciliationFailed",
        None,
    )
    .await;
    let (_, _, message) = condition(&root, "Ready").unwrap();
    assert!(message.contains(&format!("{t}-escape")), "{message}");
    assert!(
        message.contains(&format!("system:serviceaccount:{t}:deployer")),
        "{message}"
    );
    let escaped = Api::<ClusterRole>::all(client.clone())
        .get_opt(&format!("{t}-escape"))
        .await
        .unwrap();
    assert!(escaped.is_none(), "the chart's ClusterRole exists");
    weft_ns.delete().await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&t, &DeleteParams::default())
        .await;
}

/// Namespace `t` with the account `deployer`, which may manage the namespace's ConfigMaps and
/// events and Weft's, notification and Armada kinds, and read its own Namespace, and nothing
/// else (no Secrets, nothing cluster-wide); returns once the API server's authorizer says so.
async fn tenant_without_secrets(client: &Client, t: &str) {
    let rules = json!([
        {"apiGroups": [""], "resources": ["configmaps", "events"], "verbs": ["*"]},
        // As the ClusterRole `admin` bound in a namespace allows: its own Namespace.
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["*"]},
        {"apiGroups": ["weft.io", "notification.weft.io", "armada.airshipit.org"], "resources": ["*"], "verbs": ["*"]},
    ]);
    let granted = [
        "configmaps",
        "providers.notification.weft.io",
        "armadacharts.armada.airshipit.org",
    ];
    tenant_with_role(client, t, "no-secrets", rules, &granted).await;
}

/// Namespace `t` with the account `deployer`, bound to the Role `role` of `rules` there and to
/// nothing else; returns once the API server's authorizer lets it create each of `granted`.
async fn tenant_with_role(
    client: &Client,
    t: &str,
    role: &str,
    rules: serde_json::Value,
    granted: &[&str],
) {
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    create(
        Api::<Namespace>::all(client.clone()),
        json!({"metadata": {"name": t}}),
    )
    .await;
    create(
        Api::<ServiceAccount>::namespaced(client.clone(), t),
        json!({"metadata": {"name": "deployer", "namespace": t}}),
    )
    .await;
    create(
        Api::<Role>::namespaced(client.clone(), t),
        json!({"metadata": {"name": role, "namespace": t}, "rules": rules}),
    )
    .await;
    create(
        Api::<RoleBinding>::namespaced(client.clone(), t),
        json!({"metadata": {"name": role, "namespace": t},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": t}]}),
    )
    .await;
    let user = format!("system:serviceaccount:{t}:deployer");
    let tenant = client_as(&user).await;
    let accesses: Vec<Access> = granted
        .iter()
        .map(|resource| Access::new("create", resource, Some(t)))
        .collect();
    wait_until_granted(&tenant, &user, &accesses).await;
}

/// Create `doc` (JSON) with `api`, as the test's admin.
async fn create<K>(api: Api<K>, doc: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(
        &kube::api::PostParams::default(),
        &serde_json::from_value(doc).unwrap(),
    )
    .await
    .unwrap();
}

/// Issue 42 item 3, first pass: a tenant root whose first commit brings a new WeaveCloud with
/// flux on. The WeaveCloud is namespaced and the tenant may create it: it is created, though its
/// agents' ClusterRole and ClusterRoleBinding (cluster-scoped, applied in an earlier stage) are
/// refused as the tenant; the refusal is said on the WeaveCloud (`Ready=False`, `AgentsFailed`,
/// an event) naming the refused object and the tenant's account, and on the root; and the rest
/// of the pass went on (the tenant's ConfigMap, the agents' Deployment). Before, the refusal
/// stopped the pass at its first stage and the WeaveCloud never existed.
#[tokio::test]
async fn a_tenants_new_weavecloud_is_created_and_says_its_agents_were_refused() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Namespace, Secret};

    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new("tenant-wc").await;
    let w = weft_ns.name().to_string();
    let t = format!("{w}-t");
    tenant_admin(&client, &t).await;
    create(
        Api::<Secret>::namespaced(client.clone(), &t),
        json!({"metadata": {"name": "weave-cloud", "namespace": t}, "stringData": {"token": "t0ken"}}),
    )
    .await;
    let repo = ServedRepo::start();
    repo.work
        .write("apps/app.yaml", configmap(&t, "app", "1"))
        .write("apps/wc.yaml", weavecloud(&t, true).yaml());
    repo.work
        .commit("an application and a WeaveCloud with flux");
    repo.work.push();
    let flag = tempfile::tempdir().unwrap();
    let mut opts = DaemonOptions::new(flag.path().to_str().unwrap(), &w);
    opts.controllers = true;
    opts.extra = vec!["--watch-namespaces".into(), format!("{w},{t}")];
    let d = Daemon::start(opts);
    let doc: Root =
        serde_saphyr::from_str(&root_doc(&t, "app", &repo.url(), "apps", "deployer")).unwrap();
    Api::<Root>::namespaced(client.clone(), &t)
        .patch("app", &PatchParams::apply("weft-test"), &Patch::Apply(&doc))
        .await
        .unwrap();
    let user = format!("system:serviceaccount:{t}:deployer");

    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), &t);
    let message = wait_for(
        "the new WeaveCloud wc Ready=False (AgentsFailed)",
        WITHIN,
        &d,
        async || {
            let wc = wcs.get_opt("wc").await.ok()??;
            let c = wc
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (c.reason == "AgentsFailed").then_some(c.message)
        },
    )
    .await;
    for part in [
        format!("root {t}/app applies its agents as {user}"),
        format!("ClusterRole/weave-flux:{t}"),
        format!("User \"{user}\" cannot get resource \"clusterroles\""),
        "at the cluster scope".to_string(),
        // The ClusterRoleBinding too.
        format!("(and 1 more; see root {t}/app)"),
    ] {
        assert!(message.contains(&part), "{part} not in: {message}");
    }
    assert!(!message.contains('\n'), "one line: {message}");
    wait_for(
        "an event AgentsFailed on WeaveCloud wc",
        WITHIN,
        &d,
        async || {
            let notes = event_notes(&client, &t, "wc", "AgentsFailed").await;
            notes
                .iter()
                .any(|n| n.contains(&user) && n.contains("ClusterRole/weave-flux"))
                .then_some(())
        },
    )
    .await;
    let root = wait_root(
        &client,
        &d,
        (&t, "app"),
        "False",
        "ReconciliationFailed",
        None,
    )
    .await;
    let (_, _, root_message) = condition(&root, "Ready").unwrap();
    for part in [
        "ClusterRole/weave-flux",
        "ClusterRoleBinding/weave-flux",
        &user,
    ] {
        assert!(root_message.contains(part), "{part} not in: {root_message}");
    }
    // One refused object stopped nothing else: the tenant's own objects and the agents'
    // namespaced ones were applied, as the tenant.
    assert!(configmap_exists(&client, &t, "app").await);
    let agent = Api::<Deployment>::namespaced(client.clone(), &t)
        .get_opt("weave-flux-agent")
        .await
        .unwrap();
    assert!(
        agent.is_some(),
        "the flux agent's Deployment was not applied"
    );
    // The WeaveCloud controller (acting as Weft) left it alone: no finalizer of Weft's.
    let wc = wcs.get("wc").await.unwrap();
    assert!(wc.metadata.finalizers.unwrap_or_default().is_empty());
    drop(d);
    weft_ns.delete().await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&t, &DeleteParams::default())
        .await;
}

/// Namespace `t` with the account `deployer`, admin of that namespace (every namespaced kind,
/// Weft's and Weave Cloud's included) and of nothing cluster-wide; returns once the API
/// server's authorizer says so.
async fn tenant_admin(client: &Client, t: &str) {
    let rules = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    let granted = [
        "configmaps",
        "deployments.apps",
        "weaveclouds.cloud.weave.works",
    ];
    tenant_with_role(client, t, "admin", rules, &granted).await;
}

/// Issue 42 item 1: a tenant's root reads its Secrets — the git credentials and the SOPS keys —
/// as the tenant. The account may not read Secrets: each root says so, naming the account and
/// the Secret, where Weft's own identity would have read both.
#[tokio::test]
async fn a_tenants_root_reads_its_credentials_and_keys_as_the_tenant() {
    use k8s_openapi::api::core::v1::{Namespace, Secret};

    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let weft_ns = TestNamespace::new("tenant-creds").await;
    let w = weft_ns.name().to_string();
    let t = format!("{w}-t");
    tenant_without_secrets(&client, &t).await;
    for (name, key) in [("git", "password"), ("keys", "identity.agekey")] {
        create(
            Api::<Secret>::namespaced(client.clone(), &t),
            json!({"metadata": {"name": name, "namespace": t},
                "stringData": {"username": "tenant", key: "s3cret"}}),
        )
        .await;
    }
    let repo = ServedRepo::start();
    repo.work
        .write("apps/app.yaml", configmap(&t, "app", "1"))
        .write(
            "sops/secret.enc.yaml",
            include_str!("../../src/sops/testdata/kat.enc.yaml"),
        );
    repo.work.commit("an application and an encrypted file");
    repo.work.push();
    let flag = tempfile::tempdir().unwrap();
    let mut opts = DaemonOptions::new(flag.path().to_str().unwrap(), &w);
    opts.controllers = true;
    opts.extra = vec!["--watch-namespaces".into(), format!("{w},{t}")];
    let d = Daemon::start(opts);
    let user = format!("system:serviceaccount:{t}:deployer");
    let roots = Api::<Root>::namespaced(client.clone(), &t);
    // One root names a credentials Secret, the other a decryption Secret.
    let creds: Root = serde_saphyr::from_str(
        &root_doc(&t, "creds", &repo.url(), "apps", "deployer").replace(
            "  source: {url: ",
            "  source: {secretRef: {name: git}, url: ",
        ),
    )
    .unwrap();
    let sops: Root = serde_saphyr::from_str(&format!(
        "{}  decryption: {{provider: sops, secretRef: {{name: keys}}}}\n",
        root_doc(&t, "sops", &repo.url(), "sops", "deployer")
    ))
    .unwrap();
    assert!(creds.spec.source.secret_ref.is_some());
    for root in [creds, sops] {
        let name = root.metadata.name.clone().unwrap();
        roots
            .patch(
                &name,
                &PatchParams::apply("weft-test"),
                &Patch::Apply(&root),
            )
            .await
            .unwrap();
    }
    for (name, reason, secret) in [
        ("creds", "SecretNotReadable", "git"),
        ("sops", "ReconciliationFailed", "keys"),
    ] {
        let root = wait_root(&client, &d, (&t, name), "False", reason, None).await;
        let (_, _, message) = condition(&root, "Ready").unwrap();
        for part in [
            format!("User \"{user}\" cannot get resource \"secrets\""),
            format!("\"{secret}\""),
        ] {
            assert!(
                message.contains(&part),
                "Root {name}: {part} not in: {message}"
            );
        }
        assert!(!message.contains("s3cret"), "{message}");
    }
    // Nothing of the root whose credentials could not be read was applied.
    assert!(!configmap_exists(&client, &t, "app").await);
    drop(d);
    weft_ns.delete().await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&t, &DeleteParams::default())
        .await;
}
