//! A namespaced Weft (issue 42 item 4) on the real control plane: `weft run --watch-namespaces`
//! as a ServiceAccount that holds rights in its own namespace only (a Role, no ClusterRole) makes
//! every list and watch in that namespace, so the API server refuses nothing: no `403` retried
//! forever in its log.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::PostParams;
use kube::Api;

use support::cluster::TestNamespace;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::rbac::{client_as, wait_until_granted, Access};
use support::wait::wait_timed;

/// A ServiceAccount `weft` in `ns` with every right in `ns` and none outside it (the tenant's
/// own Weft), live in the authorizer; its user name.
async fn namespace_only_account(ns: &TestNamespace) -> String {
    let client = ns.client();
    let name = ns.name();
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "weft"}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), name)
        .create(&PostParams::default(), &sa)
        .await
        .expect("create the ServiceAccount");
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "weft"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), name)
        .create(&PostParams::default(), &role)
        .await
        .expect("create the Role");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "weft"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "weft"},
        "subjects": [{"kind": "ServiceAccount", "name": "weft", "namespace": name}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client, name)
        .create(&PostParams::default(), &binding)
        .await
        .expect("create the RoleBinding");
    let user = format!("system:serviceaccount:{name}:weft");
    wait_until_granted(
        &client_as(&user).await,
        &user,
        &[
            Access::new("watch", "roots.weft.io", Some(name)),
            Access::new("watch", "providers.notification.weft.io", Some(name)),
            Access::new("create", "leases.coordination.k8s.io", Some(name)),
        ],
    )
    .await;
    user
}

/// The lines of `logs` in which the API server refused something.
fn refusals(logs: &str) -> Vec<&str> {
    logs.lines()
        .filter(|l| status_403(l) || l.to_lowercase().contains("forbidden"))
        .collect()
}

/// Whether `line` has the status code 403 as a word of its own (not inside a port number, as
/// in `127.0.0.1:40369`, or another number).
fn status_403(line: &str) -> bool {
    line.match_indices("403").any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + 3..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit() || c == ':' || c == '.')
            && !after.is_some_and(|c| c.is_ascii_digit())
    })
}

#[test]
fn a_port_is_no_refusal() {
    assert!(!status_403(
        "listen=127.0.0.1:40369 hooks_listen=127.0.0.1:42019"
    ));
    assert!(!status_403("took 1403 ms"));
    assert!(status_403("ApiError: forbidden (403)"));
    assert!(status_403("code=403 reason=Forbidden"));
}

/// Run `weft run --watch-namespaces <ns>` (every controller on) as `user` until it has applied
/// a ConfigMap from git, then 20 s more; the lines of its log in which the API server refused
/// something.
async fn refusals_of_a_daemon_as(ns: &TestNamespace, user: &str) -> Vec<String> {
    let client = ns.client();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::rbac::kubeconfig_as(user, dir.path());
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write(
        "app/settings.yaml",
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {}\ndata:\n  colour: blue\n",
            ns.name()
        ),
    );
    work.commit("settings");
    work.push();
    let url = server.url("config.git");

    let d = Daemon::start(DaemonOptions {
        controllers: true,
        kubeconfig: Some(kubeconfig),
        extra: vec!["--watch-namespaces".into(), ns.name().into()],
        ..DaemonOptions::new(&url, ns.name())
    });
    let configmaps: Api<ConfigMap> = Api::namespaced(client, ns.name());
    wait_timed(
        "the tenant's ConfigMap is applied",
        Duration::from_secs(60),
        &d,
        async || configmaps.get_opt("settings").await.ok().flatten(),
    )
    .await;
    // 20 s of running: a cluster-wide watch refused would be retried (and logged) many times
    // over; the controllers' watches are all started by now.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let logs = d.logs();
    drop(d);
    drop(server);
    refusals(&logs).into_iter().map(str::to_string).collect()
}

fn assert_none_refused(refused: &[String]) {
    assert!(
        refused.is_empty(),
        "{} refusals in 20 s; the first: {:#?}",
        refused.len(),
        &refused[..refused.len().min(3)]
    );
}

#[tokio::test]
async fn watch_namespaces_as_a_namespace_only_account_is_refused_nothing() {
    let ns = TestNamespace::new("namespaced-run").await;
    support::cluster::install_crds(&ns.client()).await;
    let user = namespace_only_account(&ns).await;
    assert_none_refused(&refusals_of_a_daemon_as(&ns, &user).await);
    ns.delete().await;
}

/// `weft install --namespaced` renders Roles and RoleBindings only, and what it grants is enough
/// for the daemon it installs: run as that ServiceAccount, the API server refuses it nothing.
#[tokio::test]
async fn weft_install_namespaced_is_role_only_and_enough_for_its_daemon() {
    let ns = TestNamespace::new("namespaced-install").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let c = support::cluster::cluster();
    let install = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
            .arg("install")
            .args(c.kube_args())
            .args(["--weft-namespace", ns.name(), "--namespaced"])
            .args(extra)
            .env_remove("KUBECONFIG")
            .env("WEFT_LOG", "warn")
            .output()
            .expect("run weft install")
    };
    let out = install(&["-o", "yaml"]);
    assert!(out.status.success(), "{out:?}");
    let yaml = String::from_utf8_lossy(&out.stdout).to_string();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("YAML");
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for refused in [
        "ClusterRole",
        "ClusterRoleBinding",
        "Namespace",
        "CustomResourceDefinition",
    ] {
        assert!(!kinds.contains(&refused), "{refused} in {kinds:?}");
    }
    assert!(
        kinds.contains(&"Role") && kinds.contains(&"RoleBinding"),
        "{kinds:?}"
    );
    for d in &docs {
        assert_eq!(d["metadata"]["namespace"], ns.name(), "{d}");
    }
    let out = install(&["--no-wait"]);
    assert!(out.status.success(), "{out:?}");

    // The test daemon's --root-name is its namespace, so its Lease is `weft-leader-<ns>`: named
    // in the Role as deploy/10-rbac.yaml says to for another root name.
    let lease = format!("weft-leader-{}", ns.name());
    let roles: Api<Role> = Api::namespaced(client.clone(), ns.name());
    let mut role = roles.get("weft").await.expect("the installed Role weft");
    for rule in role.rules.iter_mut().flatten() {
        if let Some(names) = rule.resource_names.as_mut() {
            if names.iter().any(|n| n == "weft-leader") {
                names.push(lease.clone());
            }
        }
    }
    role.metadata.managed_fields = None;
    roles
        .replace("weft", &PostParams::default(), &role)
        .await
        .expect("name the test's Lease in the Role");
    let user = format!("system:serviceaccount:{}:weft", ns.name());
    wait_until_granted(
        &client_as(&user).await,
        &user,
        &[
            Access::new("watch", "roots.weft.io", Some(ns.name())),
            Access::new("update", "leases.coordination.k8s.io", Some(ns.name())).named(&lease),
            Access::new("create", "configmaps", Some(ns.name())),
        ],
    )
    .await;
    assert_none_refused(&refusals_of_a_daemon_as(&ns, &user).await);
    ns.delete().await;
}

/// One-shot `weft sync` as a ServiceAccount with rights in its own namespace only: a repository
/// of that namespace's objects (a ConfigMap, a Service, a Deployment) is applied, and a second
/// run (inventory stored) changes nothing; no cluster-wide list is needed.
#[tokio::test]
async fn weft_sync_as_a_namespace_only_account_applies_its_objects() {
    let ns = TestNamespace::new("namespaced-sync").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let user = namespace_only_account(&ns).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::rbac::kubeconfig_as(&user, dir.path());
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let n = ns.name();
    std::fs::write(
        repo.join("app.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {n}\ndata:\n  colour: blue\n---\n\
             apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {n}\nspec:\n  ports: [{{port: 80}}]\n  selector: {{app: web}}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {n}\nspec:\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers: [{{name: web, image: registry.example/web:1}}]\n"
        ),
    )
    .unwrap();
    let sync = || {
        support::weft_cli::Weft::new(["sync", "--timeout", "60s"])
            .repo(&repo)
            .args(["--kubeconfig".as_ref(), kubeconfig.as_os_str()])
            .env_remove("KUBECONFIG")
            .root(n)
            .env("WEFT_LOG", "warn")
            .run()
    };
    let (code, out, err) = sync();
    assert_eq!(code, 0, "weft sync as {user}:\n{out}\n{err}");
    let (code, out, err) = sync();
    assert_eq!(code, 0, "second weft sync as {user}:\n{out}\n{err}");
    assert!(
        !err.to_lowercase().contains("forbidden"),
        "second weft sync as {user}:\n{out}\n{err}"
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(client, n);
    assert!(configmaps.get_opt("settings").await.unwrap().is_some());
    ns.delete().await;
}

/// The same with an ArmadaChart (a local chart): its pass lists ArmadaCharts, groups and
/// manifests to hold suspended ones, in the account's namespace when it may not cluster-wide.
#[tokio::test]
async fn weft_sync_of_an_armada_chart_as_a_namespace_only_account() {
    let ns = TestNamespace::new("namespaced-armada").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let user = namespace_only_account(&ns).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::rbac::kubeconfig_as(&user, dir.path());
    let repo = dir.path().join("repo");
    let n = ns.name();
    std::fs::create_dir_all(repo.join("charts/app/templates")).unwrap();
    std::fs::write(
        repo.join("charts/app/Chart.yaml"),
        "apiVersion: v2\nname: app\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("charts/app/templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-chart\ndata:\n  colour: {{ .Values.colour | quote }}\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("app.yaml"),
        format!(
            "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: app, namespace: {n}}}\nspec:\n  chart_name: app\n  release: app\n  namespace: {n}\n  source: {{type: local, location: charts/app}}\n  values: {{colour: blue}}\n  wait: {{timeout: 30, resources: []}}\n"
        ),
    )
    .unwrap();
    let sync = || {
        support::weft_cli::Weft::new(["sync", "--timeout", "60s"])
            .repo(&repo)
            .args(["--kubeconfig".as_ref(), kubeconfig.as_os_str()])
            .env_remove("KUBECONFIG")
            .root(n)
            .env("WEFT_LOG", "warn")
            .run()
    };
    for run in ["first", "second"] {
        let (code, out, err) = sync();
        assert_eq!(code, 0, "{run} weft sync as {user}:\n{out}\n{err}");
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(client, n);
    assert!(configmaps.get_opt("from-chart").await.unwrap().is_some());
    ns.delete().await;
}
