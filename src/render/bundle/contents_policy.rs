//! What an agent bundle may hold. A bundle comes from a channel named by a WeaveCloud, so whoever
//! may create a WeaveCloud (or serve its channel) chooses what Weft applies with its own rights.
//! The bundle is therefore held to what agents need:
//!
//! - only the kinds agents are made of ([`ALLOWED_KINDS`], each with its API group);
//! - every rule of every (Cluster)Role is within a fixed allow-list of the agent whose files
//!   hold it ([`allowed_rules`]): what the built-in bundle's agents need, nothing more (a
//!   prometheus role that may read Secrets, or a scope role that may create pods, is refused);
//! - RBAC bindings grant only the roles of their own agent, and only to that agent's
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

/// The RBAC of the whole bundle (every agent, every environment), agent by agent.
pub(super) fn check_rbac(bundle: &Bundle) -> Result<(), BundleError> {
    for agent in Agent::ALL {
        let templates: Vec<&Template> = bundle.agent(agent).all().collect();
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
                "ClusterRole" | "Role" => check_role(agent, &t.object).map_err(fail)?,
                "ClusterRoleBinding" | "RoleBinding" => {
                    check_binding(&t.object, &service_accounts, &cluster_roles, &roles)
                        .map_err(fail)?
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// One rule of an agent's allow-list: a bundle rule is allowed when each (group, resource,
/// verb) it grants is covered by one of these (`*` in an allow-list entry covers anything; a
/// `*` in a bundle's rule is covered only by a `*`). An entry with `names` covers only a rule
/// limited to those `resourceNames`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllowedRule {
    pub groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub names: &'static [&'static str],
}

/// Non-resource URLs an agent may be granted, with their verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllowedUrls {
    pub urls: &'static [&'static str],
    pub verbs: &'static [&'static str],
}

const READ: &[&str] = &["get", "list", "watch"];
const LIST: &[&str] = &["list", "watch"];

const fn rule(
    groups: &'static [&'static str],
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
) -> AllowedRule {
    AllowedRule {
        groups,
        resources,
        verbs,
        names: &[],
    }
}

/// `use` of OpenShift's `privileged` SCC (scope's probe and prometheus' node exporter).
const PRIVILEGED_SCC: AllowedRule = AllowedRule {
    groups: &["security.openshift.io"],
    resources: &["securitycontextconstraints"],
    verbs: &["use"],
    names: &["privileged"],
};

/// flux applies whatever its git repository holds: every right, as the launcher's flux had
/// (which is why only the operator's WeaveClouds are reconciled; docs/security.md). These are
/// matched exactly ([`check_flux_rule`]): a flux role is the built-in one, never another role
/// that a `*` would cover (a role that reads every Secret and nothing else is no agent's).
const FLUX_RULES: &[AllowedRule] = &[rule(&["*"], &["*"], &["*"])];
const FLUX_URLS: &[AllowedUrls] = &[AllowedUrls {
    urls: &["*"],
    verbs: &["*"],
}];

/// scope's probes read what Scope shows; its controls delete pods, read logs and scale.
const SCOPE_RULES: &[AllowedRule] = &[
    rule(
        &[""],
        &[
            "pods",
            "pods/log",
            "replicationcontrollers",
            "services",
            "namespaces",
            "persistentvolumes",
            "persistentvolumeclaims",
            "nodes",
            "endpoints",
        ],
        READ,
    ),
    rule(&[""], &["pods"], &["delete"]),
    rule(
        &["apps"],
        &["deployments", "daemonsets", "statefulsets", "replicasets"],
        READ,
    ),
    rule(&["apps"], &["deployments/scale"], &["get", "update"]),
    rule(&["batch"], &["cronjobs", "jobs"], READ),
    rule(&["storage.k8s.io"], &["storageclasses"], READ),
    rule(
        &["snapshot.storage.k8s.io"],
        &[
            "volumesnapshots",
            "volumesnapshotdatas",
            "volumesnapshotclasses",
        ],
        READ,
    ),
    PRIVILEGED_SCC,
];

/// prometheus discovers and scrapes targets; kube-state-metrics lists what it reports on.
const PROMETHEUS_RULES: &[AllowedRule] = &[
    rule(
        &[""],
        &[
            "nodes",
            "nodes/proxy",
            "nodes/metrics",
            "services",
            "endpoints",
            "pods",
        ],
        READ,
    ),
    rule(&["discovery.k8s.io"], &["endpointslices"], READ),
    rule(
        &[""],
        &[
            "configmaps",
            "secrets",
            "nodes",
            "pods",
            "services",
            "serviceaccounts",
            "resourcequotas",
            "replicationcontrollers",
            "limitranges",
            "persistentvolumeclaims",
            "persistentvolumes",
            "namespaces",
            "endpoints",
        ],
        LIST,
    ),
    rule(
        &["apps"],
        &["statefulsets", "daemonsets", "deployments", "replicasets"],
        LIST,
    ),
    rule(&["batch"], &["cronjobs", "jobs"], LIST),
    rule(&["autoscaling"], &["horizontalpodautoscalers"], LIST),
    rule(&["policy"], &["poddisruptionbudgets"], LIST),
    rule(
        &["certificates.k8s.io"],
        &["certificatesigningrequests"],
        LIST,
    ),
    rule(
        &["storage.k8s.io"],
        &["storageclasses", "volumeattachments"],
        LIST,
    ),
    rule(
        &["admissionregistration.k8s.io"],
        &[
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
        ],
        LIST,
    ),
    rule(
        &["networking.k8s.io"],
        &["networkpolicies", "ingresses", "ingressclasses"],
        LIST,
    ),
    rule(&["coordination.k8s.io"], &["leases"], LIST),
    PRIVILEGED_SCC,
];
const PROMETHEUS_URLS: &[AllowedUrls] = &[AllowedUrls {
    urls: &["/metrics"],
    verbs: &["get"],
}];

/// The rules a role of `agent` may hold: what the built-in bundle's agent needs.
pub fn allowed_rules(agent: Agent) -> (&'static [AllowedRule], &'static [AllowedUrls]) {
    match agent {
        Agent::Flux => (FLUX_RULES, FLUX_URLS),
        Agent::Scope => (SCOPE_RULES, &[]),
        Agent::Prometheus => (PROMETHEUS_RULES, PROMETHEUS_URLS),
    }
}

fn covers(allowed: &[&str], wanted: &str) -> bool {
    allowed.contains(&"*") || allowed.contains(&wanted)
}

fn strings<'a>(rule: &'a Value, key: &str) -> Result<Vec<&'a str>, String> {
    match rule.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| format!("`{key}` must be a list of strings"))
            })
            .collect(),
        Some(_) => Err(format!("`{key}` must be a list of strings")),
    }
}

/// Whether `rule` (one entry of a role's `rules`) is within `agent`'s allow-list; `Err` names
/// the first right that is not.
pub fn check_rule(agent: Agent, rule: &Value) -> Result<(), String> {
    if agent == Agent::Flux {
        return check_flux_rule(rule);
    }
    let (allowed, urls) = allowed_rules(agent);
    let groups = strings(rule, "apiGroups")?;
    let resources = strings(rule, "resources")?;
    let verbs = strings(rule, "verbs")?;
    let names = strings(rule, "resourceNames")?;
    let urls_wanted = strings(rule, "nonResourceURLs")?;
    for group in &groups {
        for resource in &resources {
            for verb in &verbs {
                let ok = allowed.iter().any(|a| {
                    covers(a.groups, group)
                        && covers(a.resources, resource)
                        && covers(a.verbs, verb)
                        && (a.names.is_empty()
                            || (!names.is_empty() && names.iter().all(|n| a.names.contains(n))))
                });
                if !ok {
                    let group = if group.is_empty() { "core" } else { group };
                    return Err(format!(
                        "grants `{verb}` on `{resource}` (API group {group}), which the {agent} agent does not need: a bundle's roles may hold only what the built-in agents need (docs/security.md)"
                    ));
                }
            }
        }
    }
    for url in &urls_wanted {
        for verb in &verbs {
            if !urls
                .iter()
                .any(|a| covers(a.urls, url) && covers(a.verbs, verb))
            {
                return Err(format!(
                    "grants `{verb}` on the non-resource URL `{url}`, which the {agent} agent does not need: a bundle's roles may hold only what the built-in agents need (docs/security.md)"
                ));
            }
        }
    }
    Ok(())
}

/// A flux rule is one of the built-in flux role's two rules, exactly: `*` on `*` (every API
/// group, resource and verb, no resource names) or `*` on every non-resource URL. flux's `*`
/// allow-list would cover any narrower rule too, which no built-in flux needs: a bundle that
/// asks for one is a bundle made to use flux's ServiceAccount for something else (issue 48
/// item 2).
fn check_flux_rule(rule: &Value) -> Result<(), String> {
    let groups = strings(rule, "apiGroups")?;
    let resources = strings(rule, "resources")?;
    let verbs = strings(rule, "verbs")?;
    let names = strings(rule, "resourceNames")?;
    let urls = strings(rule, "nonResourceURLs")?;
    let all = |list: &[&str]| list == ["*"];
    let every_resource = all(&groups) && all(&resources) && all(&verbs) && names.is_empty();
    let every_url =
        groups.is_empty() && resources.is_empty() && names.is_empty() && all(&urls) && all(&verbs);
    if (every_resource && urls.is_empty()) || every_url {
        return Ok(());
    }
    let verb = verbs.first().copied().unwrap_or("");
    let what = match (resources.first(), urls.first()) {
        (Some(resource), _) => {
            let group = groups.first().copied().unwrap_or("");
            let group = if group.is_empty() { "core" } else { group };
            format!("`{verb}` on `{resource}` (API group {group})")
        }
        (None, Some(url)) => format!("`{verb}` on the non-resource URL `{url}`"),
        (None, None) => "nothing".to_string(),
    };
    Err(format!(
        "grants {what}, which is not the built-in flux role: a bundle's flux roles may hold only the built-in flux role's rules, `*` on `*` and `*` on every non-resource URL, exactly (docs/security.md)"
    ))
}

fn check_role(agent: Agent, role: &Value) -> Result<(), String> {
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
    let rules = match role.get("rules") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(rules)) => rules,
        Some(_) => return Err("`rules` must be a list".into()),
    };
    for (i, rule) in rules.iter().enumerate() {
        check_rule(agent, rule).map_err(|e| format!("`rules[{i}]` {e}"))?;
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
            "`roleRef` {kind} `{name}` is not a role of this agent in the bundle: a bundle may grant only an agent's own roles, to that agent's ServiceAccounts"
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
                "`subjects[{i}]` {kind} `{name}` is not a ServiceAccount of this agent in the bundle: a bundle may grant rights only to the agent's own ServiceAccounts"
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
