//! What an agent bundle may hold. A bundle comes from a channel named by a WeaveCloud, so whoever
//! may create a WeaveCloud (or serve its channel) chooses what Weft applies with its own rights.
//! The bundle is therefore held to what agents need:
//!
//! - only the kinds agents are made of ([`ALLOWED_KINDS`], each with its API group);
//! - RBAC bindings grant only the bundle's own roles, and only to the bundle's own
//!   ServiceAccounts (which the renderer places in the WeaveCloud's namespace): never
//!   `cluster-admin`, never a group such as `system:authenticated`, never a user;
//! - roles do not aggregate (no `aggregationRule`, no `rbac.authorization.k8s.io/aggregate-to-*`
//!   label), since aggregation would copy an agent's rights into the cluster's `admin`, `edit` or
//!   `view` roles.
//!
//! Anything else refuses the whole bundle, with the file and line at fault.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Agent, Bundle, BundleError, Template};

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The kinds a bundle may hold, with their `apiVersion`.
pub const ALLOWED_KINDS: &[(&str, &str)] = &[
    ("v1", "ServiceAccount"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "StatefulSet"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
];

fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// One template's kind, checked on its own (at parse time).
pub(super) fn check_kind(template: &Template) -> Result<(), String> {
    let api_version = str_at(&template.object, "/apiVersion");
    let kind = template.kind();
    if ALLOWED_KINDS.contains(&(api_version, kind)) {
        return Ok(());
    }
    let allowed: Vec<String> = ALLOWED_KINDS
        .iter()
        .map(|(v, k)| format!("{k} ({v})"))
        .collect();
    Err(format!(
        "a bundle may not contain a {kind} ({api_version}): agents only get objects in their WeaveCloud's namespace and the RBAC they need; allowed: {}",
        allowed.join(", ")
    ))
}

/// The RBAC of the whole bundle (every agent, every environment).
pub(super) fn check_rbac(bundle: &Bundle) -> Result<(), BundleError> {
    let templates: Vec<&Template> = Agent::ALL
        .iter()
        .flat_map(|a| bundle.agent(*a).all())
        .collect();
    let names = |kind: &str| -> BTreeSet<&str> {
        templates
            .iter()
            .filter(|t| t.kind() == kind)
            .map(|t| t.name())
            .collect()
    };
    let service_accounts = names("ServiceAccount");
    let cluster_roles = names("ClusterRole");
    let roles = names("Role");
    for t in &templates {
        let fail = |message: String| BundleError::Template {
            path: t.file.clone(),
            pos: t.pos,
            message: format!("{} `{}`: {message}", t.kind(), t.name()),
        };
        match t.kind() {
            "ClusterRole" | "Role" => check_role(&t.object).map_err(fail)?,
            "ClusterRoleBinding" | "RoleBinding" => {
                check_binding(&t.object, &service_accounts, &cluster_roles, &roles).map_err(fail)?
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_role(role: &Value) -> Result<(), String> {
    if role.get("aggregationRule").is_some() {
        return Err("`aggregationRule` is not allowed in a bundle: an aggregated role collects rights the bundle does not declare".into());
    }
    if let Some(Value::Object(labels)) = role.pointer("/metadata/labels") {
        if let Some(label) = labels
            .keys()
            .find(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to-"))
        {
            return Err(format!(
                "label `{label}` is not allowed in a bundle: it would add the agent's rights to a cluster role that people hold"
            ));
        }
    }
    Ok(())
}

fn check_binding(
    binding: &Value,
    service_accounts: &BTreeSet<&str>,
    cluster_roles: &BTreeSet<&str>,
    roles: &BTreeSet<&str>,
) -> Result<(), String> {
    let group = str_at(binding, "/roleRef/apiGroup");
    let kind = str_at(binding, "/roleRef/kind");
    let name = str_at(binding, "/roleRef/name");
    let own = match kind {
        "ClusterRole" => cluster_roles.contains(name),
        // A ClusterRoleBinding cannot refer to a Role; the API server would refuse it anyway.
        "Role" => roles.contains(name) && binding["kind"] == "RoleBinding",
        _ => false,
    };
    if group != RBAC_GROUP || !own {
        return Err(format!(
            "`roleRef` {kind} `{name}` is not a role of this bundle: a bundle may grant only its own roles"
        ));
    }
    let subjects = binding
        .get("subjects")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if subjects.is_empty() {
        return Err("`subjects` is empty".into());
    }
    for (i, subject) in subjects.iter().enumerate() {
        let kind = str_at(subject, "/kind");
        let name = str_at(subject, "/name");
        if kind != "ServiceAccount" || !service_accounts.contains(name) {
            return Err(format!(
                "`subjects[{i}]` {kind} `{name}` is not a ServiceAccount of this bundle: a bundle may grant rights only to its own ServiceAccounts"
            ));
        }
        if subject.get("namespace").is_some() {
            return Err(format!(
                "`subjects[{i}]` sets a `namespace`: the renderer puts the bundle's ServiceAccounts in the WeaveCloud's namespace"
            ));
        }
    }
    Ok(())
}
