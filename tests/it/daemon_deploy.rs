//! The install manifests: `kubectl apply -f deploy/` against the real control plane creates every
//! object (Namespace, CRDs, ServiceAccount, RBAC, Deployment, Service), and the Deployment is
//! what the design asks for (probes, resources, non-root, read-only root filesystem).

use crate::support;

use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;

use support::cluster;
use support::rbac::Access;

#[tokio::test]
async fn kubectl_apply_of_deploy_creates_everything() {
    let c = cluster::cluster();
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let out = Command::new("kubectl")
        .args(c.kube_args())
        .args(["apply", "-f"])
        .arg(&deploy)
        .output()
        .expect("run kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl apply failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "namespace/weft-system",
        "serviceaccount/weft",
        "role.rbac.authorization.k8s.io/weft",
        "rolebinding.rbac.authorization.k8s.io/weft",
        "clusterrole.rbac.authorization.k8s.io/weft-controller",
        "clusterrole.rbac.authorization.k8s.io/weft-apply",
        "clusterrolebinding.rbac.authorization.k8s.io/weft-controller",
        "clusterrolebinding.rbac.authorization.k8s.io/weft-apply",
        "clusterrole.rbac.authorization.k8s.io/weft-agents",
        "clusterrolebinding.rbac.authorization.k8s.io/weft-agents",
        "clusterrole.rbac.authorization.k8s.io/weft-notifications",
        "clusterrolebinding.rbac.authorization.k8s.io/weft-notifications",
        "customresourcedefinition.apiextensions.k8s.io/providers.notification.weft.io",
        "customresourcedefinition.apiextensions.k8s.io/alerts.notification.weft.io",
        "networkpolicy.networking.k8s.io/weft",
        "deployment.apps/weft",
        "service/weft",
        "customresourcedefinition.apiextensions.k8s.io/weaveclouds.cloud.weave.works",
        "customresourcedefinition.apiextensions.k8s.io/roots.weft.io",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected} missing from:\n{stdout}"
        );
    }

    let client = cluster::client().await;
    let ns = "weft-system";
    Api::<Namespace>::all(client.clone())
        .get(ns)
        .await
        .expect("namespace");
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .get("weft")
        .await
        .expect("sa");
    Api::<Role>::namespaced(client.clone(), ns)
        .get("weft")
        .await
        .expect("role");
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .get("weft")
        .await
        .expect("rolebinding");
    for name in ["weft-controller", "weft-agents", "weft-apply"] {
        Api::<ClusterRole>::all(client.clone())
            .get(name)
            .await
            .expect("clusterrole");
        Api::<ClusterRoleBinding>::all(client.clone())
            .get(name)
            .await
            .expect("clusterrolebinding");
    }
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in weft::api::crds() {
        let name = crd.metadata.name.expect("name");
        crds.get(&name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name}: {e}"));
    }
    let svc = Api::<Service>::namespaced(client.clone(), ns)
        .get("weft")
        .await
        .expect("service");
    // Two ports, named as the NetworkPolicy names them: `http` (metrics, health, status) and
    // `hooks` (webhooks, sync), each to the container port of the same name.
    let ports: Vec<(String, i32, String)> = svc
        .spec
        .and_then(|s| s.ports)
        .expect("ports")
        .into_iter()
        .map(|p| {
            let target = match p.target_port {
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s)) => s,
                other => format!("{other:?}"),
            };
            (p.name.unwrap_or_default(), p.port, target)
        })
        .collect();
    assert_eq!(
        ports,
        vec![
            ("http".to_string(), 8080, "http".to_string()),
            ("hooks".to_string(), 8081, "hooks".to_string())
        ]
    );

    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("weft")
        .await
        .expect("deployment");
    let pod = d.spec.expect("spec").template.spec.expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some("weft"));
    assert_eq!(
        pod.security_context
            .as_ref()
            .and_then(|s| s.run_as_non_root),
        Some(true)
    );
    let container = &pod.containers[0];
    assert_eq!(container.args.as_ref().expect("args")[0], "run");
    let container_ports: Vec<(Option<String>, i32)> = container
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone(), p.container_port))
        .collect();
    assert_eq!(
        container_ports,
        vec![(Some("http".into()), 8080), (Some("hooks".into()), 8081)]
    );
    // The per-provider webhook secrets are a directory: the Secret weft-webhooks, mounted.
    assert!(container
        .args
        .iter()
        .flatten()
        .any(|a| a == "--webhook-secret-file=/etc/weft/webhooks"));
    assert!(pod.volumes.iter().flatten().any(|v| v
        .secret
        .as_ref()
        .and_then(|s| s.secret_name.as_deref())
        == Some("weft-webhooks")));
    let sc = container
        .security_context
        .as_ref()
        .expect("container securityContext");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(
        probe_path(&container.liveness_probe).as_deref(),
        Some("/healthz")
    );
    assert_eq!(
        probe_path(&container.readiness_probe).as_deref(),
        Some("/readyz")
    );
    let resources = container.resources.as_ref().expect("resources");
    assert!(resources
        .requests
        .as_ref()
        .is_some_and(|r| r.contains_key("memory")));
    assert!(resources
        .limits
        .as_ref()
        .is_some_and(|r| r.contains_key("memory")));

    // The bindings just applied reach the RBAC authorizer a moment later: wait until the
    // account, asking itself, has a grant of each (issue 40 item 10), then ask the table.
    let account = "system:serviceaccount:weft-system:weft";
    support::rbac::wait_until_granted(
        &support::rbac::client_as(account).await,
        account,
        &[
            Access::new("create", "leases.coordination.k8s.io", Some("weft-system")),
            Access::new("list", "weaveclouds.cloud.weave.works", None),
            Access::new("escalate", "clusterroles.rbac.authorization.k8s.io", None)
                .named("weave-flux:weave"),
            Access::new("create", "deployments.apps", Some("weave")),
            Access::new("patch", "providers.notification.weft.io", Some("weave"))
                .subresource("status"),
        ],
    )
    .await;
    // What the installed ServiceAccount may do, asked of the API server's own RBAC authorizer.
    let can_i = |args: &[&str]| -> bool {
        let out = Command::new("kubectl")
            .args(c.kube_args())
            .args([
                "auth",
                "can-i",
                "--as=system:serviceaccount:weft-system:weft",
            ])
            .args(args)
            .output()
            .expect("kubectl auth can-i");
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            answer == "yes" || answer == "no",
            "kubectl auth can-i {args:?}: {answer}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        answer == "yes"
    };
    // Issue 14: the install is not cluster-admin in disguise.
    for (args, allowed) in [
        // The agents' own roles, by name, in the launcher's namespace.
        (&["escalate", "clusterroles/weave-flux:weave"][..], true),
        (&["bind", "clusterroles/weave-scope:weave"][..], true),
        // Anything else: no escalate, no bind, no wildcard.
        (&["bind", "clusterroles/cluster-admin"][..], false),
        (&["escalate", "clusterroles/cluster-admin"][..], false),
        (&["escalate", "clusterroles/my-own-role"][..], false),
        (&["bind", "roles/admin", "-n", "default"][..], false),
        (&["*", "*"][..], false),
        (&["impersonate", "users"][..], false),
        (&["impersonate", "groups"][..], false),
        // Issue 41: a Root's pass is made as its own ServiceAccount; roots are read, their
        // status written, never created or deleted by Weft.
        (
            &["impersonate", "serviceaccounts", "-n", "team-a"][..],
            true,
        ),
        (&["watch", "roots.weft.io", "-A"][..], true),
        (
            &[
                "patch",
                "roots.weft.io",
                "--subresource=status",
                "-n",
                "team-a",
            ][..],
            true,
        ),
        (&["delete", "roots.weft.io", "-n", "team-a"][..], false),
        // What it needs.
        (&["create", "leases", "-n", "weft-system"][..], true),
        (
            &["update", "leases/weft-leader", "-n", "weft-system"][..],
            true,
        ),
        // The Root Leases and replica Leases of its own namespace (names not known in
        // advance), and no Lease of any other namespace.
        (
            &["update", "leases/weft-root-team-a.app", "-n", "weft-system"][..],
            true,
        ),
        (&["update", "leases/anything", "-n", "default"][..], false),
        (
            &["delete", "leases/anything", "-n", "kube-system"][..],
            false,
        ),
        // Issue 30: shard 0 lists the Leases; a standby checks the leader against the endpoints.
        (&["list", "leases", "-n", "weft-system"][..], true),
        (
            &[
                "list",
                "endpointslices.discovery.k8s.io",
                "-n",
                "weft-system",
            ][..],
            true,
        ),
        (&["list", "leases", "-n", "default"][..], false),
        (
            &[
                "patch",
                "weaveclouds.cloud.weave.works/status",
                "-n",
                "weave",
            ][..],
            true,
        ),
        (&["create", "deployments", "-n", "weave"][..], true),
        (&["create", "rolebindings", "-n", "default"][..], true),
    ] {
        assert_eq!(can_i(args), allowed, "can-i {args:?}");
    }

    // Applying again changes nothing.
    let again = Command::new("kubectl")
        .args(c.kube_args())
        .args(["apply", "-f"])
        .arg(&deploy)
        .output()
        .expect("kubectl");
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success());
    assert!(
        !stdout.contains("created") && !stdout.contains("configured"),
        "{stdout}"
    );
}
