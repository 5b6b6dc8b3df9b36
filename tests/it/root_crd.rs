//! The Root CRD on a cluster that lacks it (issue 41 item 5: today's users upgrade the binary
//! before the manifests). This area has a control plane of its own, on which nothing installs
//! Weft's CRDs before this test:
//!
//! - a daemon whose identity may not create CRDs (a Role in its namespace only) refuses to start
//!   in one line naming `roots.weft.io` and how to install it, and applies nothing;
//! - a daemon that may installs the CRD itself, and its flag root becomes the Root object.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;

use support::cluster::TestNamespace;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::ServedRepo;
use support::manifests::configmap;
use support::rbac::Access;
use weft::api::root::Root;

#[tokio::test]
async fn a_daemon_installs_the_root_crd_when_it_may_and_refuses_clearly_when_it_may_not() {
    let ns = TestNamespace::new("root-crd").await;
    let n = ns.name();
    let client = ns.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(
        crds.get_opt("roots.weft.io").await.unwrap().is_none(),
        "this area's control plane must start without the Root CRD"
    );
    let repo = ServedRepo::start();
    repo.work
        .write("apps/cm.yaml", configmap(n, "greeting", "hello"));
    repo.work.commit("one");
    repo.work.push();

    // An identity with every right in its namespace, and none cluster-wide.
    let user = format!("weft-{n}");
    let meta = |name: &str| ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(n.to_string()),
        ..Default::default()
    };
    let role = Role {
        metadata: meta("everything-here"),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["*".into()]),
            resources: Some(vec!["*".into()]),
            verbs: vec!["*".into()],
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(client.clone(), n)
        .create(&PostParams::default(), &role)
        .await
        .expect("create the Role");
    let binding = RoleBinding {
        metadata: meta("everything-here"),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "everything-here".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: user.clone(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(client.clone(), n)
        .create(&PostParams::default(), &binding)
        .await
        .expect("create the RoleBinding");
    support::rbac::wait_until_granted(
        &support::rbac::client_as(&user).await,
        &user,
        &[Access::new("create", "leases.coordination.k8s.io", Some(n))],
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = support::rbac::kubeconfig_as(&user, dir.path());

    // It may not install the CRD: it refuses to start, in one line that says what to do.
    let (code, logs) = support::daemon::run_to_exit(
        &repo.url(),
        n,
        &[
            "--no-controllers".into(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
        ],
    );
    assert_eq!(code, Some(1), "the daemon did not refuse:\n{logs}");
    let line = logs
        .lines()
        .find(|l| l.contains("refusing to start"))
        .unwrap_or_else(|| panic!("no refusal in the logs:\n{logs}"));
    for said in ["roots.weft.io", "could not install it", "weft install"] {
        assert!(line.contains(said), "{said:?} not in {line:?}");
    }
    assert!(
        !line.contains("Some(") && !line.contains("Status {"),
        "{line}"
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), n);
    assert!(
        cms.get_opt("greeting").await.unwrap().is_none(),
        "a refused daemon applied the repository"
    );
    assert!(crds.get_opt("roots.weft.io").await.unwrap().is_none());

    // With the rights to (the test's own identity), it installs the CRD and syncs as a Root.
    let mut d = Daemon::start(DaemonOptions::new(&repo.url(), n));
    d.wait_status("the first pass", Duration::from_secs(90), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    let crd = crds.get("roots.weft.io").await.expect("the Root CRD");
    assert!(
        crd.metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|f| f.manager.as_deref() == Some("weft")),
        "the CRD is Weft's own apply"
    );
    let roots: Api<Root> = Api::namespaced(client.clone(), n);
    let root = roots.get(n).await.expect("the flag root's Root");
    assert_eq!(root.spec.source.url, repo.url());
    assert!(cms.get_opt("greeting").await.unwrap().is_some());
    d.terminate();
    ns.delete().await;
}
