//! A namespaced Weft (issue 42 item 4) on the real control plane: `weft run --watch-namespaces`
//! as a ServiceAccount that holds rights in its own namespace only (a Role, no ClusterRole) makes
//! every list and watch in that namespace, so the API server refuses nothing: no `403` retried
//! forever in its log.

mod support;

use std::path::{Path, PathBuf};
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

/// The test cluster's kubeconfig, acting as `user` (`as:`, as `kubectl --as` does), at a path
/// in `dir`.
async fn kubeconfig_as(user: &str, dir: &Path) -> PathBuf {
    let c = support::cluster::cluster();
    let mut kubeconfig =
        kube::config::Kubeconfig::read_from(c.kubeconfig_path()).expect("kubeconfig");
    for named in &mut kubeconfig.auth_infos {
        if let Some(info) = named.auth_info.as_mut() {
            info.impersonate = Some(user.to_string());
        }
    }
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kubeconfig).unwrap()).expect("write kubeconfig");
    path
}

/// The lines of `logs` in which the API server refused something.
fn refusals(logs: &str) -> Vec<&str> {
    logs.lines()
        .filter(|l| l.contains("403") || l.to_lowercase().contains("forbidden"))
        .collect()
}

#[tokio::test]
async fn watch_namespaces_as_a_namespace_only_account_is_refused_nothing() {
    let ns = TestNamespace::new("namespaced-run").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let user = namespace_only_account(&ns).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig_as(&user, dir.path()).await;

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

    // Every controller on (Roots, WeaveClouds, ArmadaCharts, Providers and Alerts).
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        kubeconfig: Some(kubeconfig),
        extra: vec!["--watch-namespaces".into(), ns.name().into()],
        ..DaemonOptions::new(&url, ns.name())
    });
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
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
    let refused = refusals(&logs);
    assert!(
        refused.is_empty(),
        "{} refusals in 20 s; the first: {:#?}",
        refused.len(),
        &refused[..refused.len().min(5)]
    );
    drop(d);
    drop(server);
    ns.delete().await;
}
