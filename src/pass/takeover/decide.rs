//! The decision step of the takeover, pure: from what [`super::live::read`] found, which objects
//! are the launcher's and what happens to each (remove, with why, or adopt).

use serde_json::{json, Value};

use super::live::{namespaces, Live};
use super::{
    is_launcher_agent, is_launcher_binding, is_launcher_cluster_role, managed_by_weft, remove,
    Decision, Found, FLUX_DEPLOY_SECRET, LAUNCHER_AGENT_OBJECTS, LAUNCHER_RBAC,
    STANDALONE_SCOPE_APP, WEAVE_AGENT,
};
use crate::render::DesiredObject;

/// The selector of a workload (`spec.selector`).
fn selector(object: &Value) -> Option<&Value> {
    object.pointer("/spec/selector")
}

fn label<'a>(o: &'a kube::api::DynamicObject, key: &str) -> Option<&'a str> {
    o.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// The ServiceAccount weave-agent runs as (`weave-agent`, or what the Helm chart named it).
pub(super) fn agent_service_account(agent: &kube::api::DynamicObject) -> String {
    agent
        .data
        .pointer("/spec/template/spec/serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(WEAVE_AGENT)
        .to_string()
}

/// The name the `weave-cloud` Helm chart gave weave-agent's ClusterRole and binding, from the
/// Deployment's chart labels (`app: weave-cloud`, `release: R`): `R` when it holds
/// `weave-cloud`, else `R-weave-cloud` (the chart's `fullname`); `None` without them.
pub(super) fn helm_fullname(agent: &kube::api::DynamicObject) -> Option<String> {
    if label(agent, "app") != Some(HELM_CHART) {
        return None;
    }
    let release = label(agent, "release").filter(|r| !r.is_empty())?;
    let name = if release.contains(HELM_CHART) {
        release.to_string()
    } else {
        format!("{release}-{HELM_CHART}")
    };
    Some(
        name.chars()
            .take(63)
            .collect::<String>()
            .trim_end_matches('-')
            .to_string(),
    )
}

/// The chart the launcher's agent was also installed with.
const HELM_CHART: &str = "weave-cloud";

/// The Helm chart's ClusterRole or binding of `release`: its chart labels, and, for a binding,
/// bound to the role of its name and to `account` in `namespace` only; for a role, granting `*`.
fn is_helm_rbac(
    o: &kube::api::DynamicObject,
    release: &str,
    account: &str,
    namespace: &str,
) -> bool {
    if managed_by_weft(o)
        || label(o, "app") != Some(HELM_CHART)
        || label(o, "release") != Some(release)
    {
        return false;
    }
    let name = o.metadata.name.clone().unwrap_or_default();
    if o.data.get("roleRef").is_some() {
        let subjects_ok = o.data["subjects"].as_array().is_some_and(|s| {
            !s.is_empty()
                && s.iter().all(|s| {
                    s["kind"] == "ServiceAccount"
                        && s["name"] == json!(account)
                        && s["namespace"] == json!(namespace)
                })
        });
        return o.data["roleRef"]["name"] == json!(name) && subjects_ok;
    }
    o.data["rules"].as_array().is_some_and(|rules| {
        rules.iter().any(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|a| a.contains(&json!("*")))
        })
    })
}

/// Decide, for a WeaveCloud in `namespace` whose desired agents are `desired`, what to do with
/// each launcher object of `live`: remove or adopt. kube-system is looked at only when `legacy`
/// (the WeaveCloud is [`super::designated`]). Sorted in deletion order.
pub fn decide(live: &Live, namespace: &str, desired: &[DesiredObject], legacy: bool) -> Vec<Found> {
    let mut found = Vec::new();
    let namespaces = namespaces(namespace, legacy);
    if namespaces.is_empty() {
        return found;
    }
    let desired_of = |kind: &str, name: &str| {
        desired
            .iter()
            .find(|d| d.kind() == kind && d.name() == name && d.namespace() == Some(namespace))
    };

    // 1. weave-agent: only ever in the namespace the launcher installed (never kube-system).
    if let Some(d) = live.get("Deployment", Some(namespace), WEAVE_AGENT) {
        let selects_agent =
            d.data.pointer("/spec/selector/matchLabels") == Some(&json!({"name": WEAVE_AGENT}));
        if selects_agent && !managed_by_weft(d) {
            let why = "the launcher's agent";
            found.push(remove("Deployment", Some(namespace), WEAVE_AGENT, why));
            let account = agent_service_account(d);
            if live
                .get("ServiceAccount", Some(namespace), &account)
                .is_some_and(|sa| !managed_by_weft(sa))
            {
                found.push(remove("ServiceAccount", Some(namespace), &account, why));
            }
            // Installed with the `weave-cloud` Helm chart: its RBAC is named after the release.
            if let (Some(name), Some(release)) = (helm_fullname(d), label(d, "release")) {
                let binding = live.get("ClusterRoleBinding", None, &name);
                let bound = binding.is_some_and(|b| is_helm_rbac(b, release, &account, namespace));
                if bound {
                    found.push(remove("ClusterRoleBinding", None, &name, why));
                }
                if live.get("ClusterRole", None, &name).is_some_and(|r| {
                    is_helm_rbac(r, release, &account, namespace) && (bound || binding.is_none())
                }) {
                    found.push(remove("ClusterRole", None, &name, why));
                }
            }
            if live
                .get("ClusterRoleBinding", None, WEAVE_AGENT)
                .is_some_and(|b| is_launcher_binding(b, &[namespace]))
            {
                found.push(remove("ClusterRoleBinding", None, WEAVE_AGENT, why));
            }
            if live
                .get("ClusterRole", None, WEAVE_AGENT)
                .is_some_and(is_launcher_cluster_role)
            {
                found.push(remove("ClusterRole", None, WEAVE_AGENT, why));
            }
        }
    }

    // 2. the agents, in this namespace and in kube-system.
    for ns in &namespaces {
        let standalone_scope = live
            .get("Deployment", Some(ns), STANDALONE_SCOPE_APP)
            .is_some();
        let here = *ns == namespace;
        for (kind, name, app) in LAUNCHER_AGENT_OBJECTS {
            if standalone_scope && *app == "weave-scope" {
                continue;
            }
            let Some(o) = live.get(kind, Some(ns), name) else {
                continue;
            };
            if !is_launcher_agent(o, app) {
                continue;
            }
            let action = match (here, desired_of(kind, name)) {
                (false, _) => {
                    Decision::Remove("replaced by Weft's agent in the WeaveCloud's namespace")
                }
                (true, None) => Decision::Remove("replaced by Weft's agent under another name"),
                (true, Some(d))
                    if matches!(*kind, "Deployment" | "DaemonSet")
                        && selector(&o.data) != selector(&d.object.value()) =>
                {
                    Decision::Remove("recreated by Weft: its selector cannot change")
                }
                (true, Some(_)) => Decision::Adopt,
            };
            found.push(Found {
                kind,
                namespace: Some(ns.to_string()),
                name: name.to_string(),
                action,
            });
        }
        for name in LAUNCHER_RBAC {
            if standalone_scope && *name == "weave-scope" {
                continue;
            }
            let Some(sa) = live.get("ServiceAccount", Some(ns), name) else {
                continue;
            };
            if managed_by_weft(sa) || label(sa, "name") != Some(name) {
                continue;
            }
            let action = if here && desired_of("ServiceAccount", name).is_some() {
                Decision::Adopt
            } else {
                Decision::Remove("replaced by Weft's agent in the WeaveCloud's namespace")
            };
            found.push(Found {
                kind: "ServiceAccount",
                namespace: Some(ns.to_string()),
                name: name.to_string(),
                action,
            });
        }
    }

    // The deploy key next to a launcher flux in this namespace: adopted with takeover (its data
    // is never written), left alone without it like the flux that mounts it.
    let launcher_flux_here = found.iter().any(|f| {
        f.kind == "Deployment"
            && f.name == "weave-flux-agent"
            && f.namespace.as_deref() == Some(namespace)
    });
    if launcher_flux_here
        && desired_of("Secret", FLUX_DEPLOY_SECRET).is_some()
        && live
            .get("Secret", Some(namespace), FLUX_DEPLOY_SECRET)
            .is_some_and(|k| !managed_by_weft(k))
    {
        found.push(Found {
            kind: "Secret",
            namespace: Some(namespace.to_string()),
            name: FLUX_DEPLOY_SECRET.to_string(),
            action: Decision::Adopt,
        });
    }

    // 3. the launcher's cluster-wide roles (`*` on everything): Weft's are `<name>:<namespace>`.
    let scope_standalone_here = live
        .get("Deployment", Some(namespace), STANDALONE_SCOPE_APP)
        .is_some();
    for name in LAUNCHER_RBAC {
        if scope_standalone_here && *name == "weave-scope" {
            continue;
        }
        let binding = live.get("ClusterRoleBinding", None, name);
        let bound = binding.is_some_and(|b| is_launcher_binding(b, &namespaces));
        if bound {
            let why = "replaced by Weft's per-namespace binding";
            found.push(remove("ClusterRoleBinding", None, name, why));
        }
        // Only a role whose binding is the launcher's (or gone): never one another tool binds.
        if live
            .get("ClusterRole", None, name)
            .is_some_and(|r| is_launcher_cluster_role(r) && (bound || binding.is_none()))
        {
            let why = "replaced by Weft's per-namespace role";
            found.push(remove("ClusterRole", None, name, why));
        }
    }
    found.sort_by_key(Found::rank);
    found
}
