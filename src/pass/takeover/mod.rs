//! Takeover of a cluster the Weave Cloud launcher manages (docs/migrating-from-launcher.md).
//!
//! Before a WeaveCloud's agents are applied, the launcher's objects are looked up by their exact
//! names *and* the launcher's labels (never by a generic name alone), in the WeaveCloud's
//! namespace and, for the one WeaveCloud the operator designates with `--launcher-takeover
//! NAMESPACE/NAME` ([`designated`]), in `kube-system` (installs before 2018). No other
//! WeaveCloud reads, deletes or copies anything in `kube-system`. Then, in this order:
//! 1. `weave-agent` (Deployment, then its ClusterRoleBinding, ClusterRole, ServiceAccount) is
//!    deleted, so it stops re-applying the launcher's manifest;
//! 2. launcher workloads Weft replaces under another name (`prometheus`, `kube-state-metrics`,
//!    `prom-node-exporter`, which holds host port 9100) or another namespace (kube-system) are
//!    deleted, and same-named workloads whose selector differs from Weft's are deleted so that
//!    Weft recreates them (a selector is immutable);
//! 3. the launcher's other objects Weft does not render under that name are deleted (Services,
//!    ConfigMaps, ServiceAccounts in kube-system; the `*`-granting ClusterRoles and bindings,
//!    which Weft renders as `<name>:<namespace>`).
//!
//! Same-named objects left (Services, ServiceAccounts, the prometheus ConfigMap, Deployments
//! whose selector already fits) are adopted by the server-side apply that follows. Secrets are
//! never deleted: the `flux-git-deploy` key in kube-system is copied into the WeaveCloud's
//! namespace only during a real takeover, when the launcher's flux was found beside it (and so
//! only for the designated WeaveCloud). Standalone Scope (`weave-scope-app`) is not a launcher
//! install.

mod check;
mod decide;
pub mod live;
mod one_shot;
pub mod record;
pub mod status;
#[cfg(test)]
mod tests;

pub use one_shot::{before_pass, Planned};

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

pub(super) use super::agents::LAUNCHER_LEGACY_NAMESPACE;
use crate::apply::FIELD_MANAGER;
use crate::render::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::render::DesiredObject;

/// The launcher's own agent and the namespace it always ran in.
pub(super) const WEAVE_AGENT: &str = "weave-agent";
/// The Secret fluxd keeps its deploy key in.
pub(super) const FLUX_DEPLOY_SECRET: &str = "flux-git-deploy";
/// Standalone Scope's app: its presence means the scope objects are not the launcher's.
pub(super) const STANDALONE_SCOPE_APP: &str = "weave-scope-app";

/// Namespaced launcher agent objects: kind, name, and the `app` label they must carry.
pub(super) const LAUNCHER_AGENT_OBJECTS: &[(&str, &str, &str)] = &[
    ("Deployment", "weave-flux-agent", "weave-flux"),
    ("Deployment", "weave-flux-memcached", "weave-flux"),
    ("Service", "weave-flux-memcached", "weave-flux"),
    ("DaemonSet", "weave-scope-agent", "weave-scope"),
    ("Deployment", "weave-scope-cluster-agent", "weave-scope"),
    ("ConfigMap", "weave-cortex-agent-config", "weave-cortex"),
    // namespace `weave` (2018 on)
    ("Deployment", "prometheus", "weave-cortex"),
    ("Deployment", "kube-state-metrics", "weave-cortex"),
    ("DaemonSet", "prom-node-exporter", "weave-cortex"),
    // kube-system (before 2018)
    ("Deployment", "weave-cortex-agent", "weave-cortex"),
    ("Service", "weave-cortex-agent", "weave-cortex"),
    ("Deployment", "weave-cortex-state-metrics", "weave-cortex"),
    ("DaemonSet", "weave-cortex-node-exporter", "weave-cortex"),
];

/// The launcher's per-agent RBAC names (ServiceAccount, ClusterRole, ClusterRoleBinding), each
/// labelled only `name: <same>`.
pub(super) const LAUNCHER_RBAC: &[&str] = &["weave-flux", "weave-scope", "weave-cortex"];

/// What the takeover found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Takeover {
    /// Deleted (`Kind/namespace/name`, with why), in the order of deletion.
    pub removed: Vec<String>,
    /// Found and left alone (`takeover: false`).
    pub left: Vec<String>,
    /// Same-named objects the apply will adopt.
    pub adopted: Vec<String>,
}

/// One launcher object found, and what to do with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub kind: &'static str,
    pub namespace: Option<String>,
    pub name: String,
    pub action: Decision,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Delete; the reason is said in the event.
    Remove(&'static str),
    /// Leave it to the server-side apply, which adopts it.
    Adopt,
}

impl Found {
    pub fn reference(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{ns}/{}", self.kind, self.name),
            None => format!("{}/{}", self.kind, self.name),
        }
    }

    /// A reference to the object, for an event's `related` field.
    pub fn object_reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(api_resource(self.kind).api_version),
            kind: Some(self.kind.to_string()),
            namespace: self.namespace.clone(),
            name: Some(self.name.clone()),
            ..Default::default()
        }
    }

    /// Deletion order: weave-agent first, then workloads, then the rest, cluster RBAC last.
    fn rank(&self) -> u8 {
        if self.name == WEAVE_AGENT {
            return match self.kind {
                "Deployment" => 0,
                _ => 1,
            };
        }
        match self.kind {
            "Deployment" | "DaemonSet" => 2,
            "ClusterRoleBinding" => 4,
            "ClusterRole" => 5,
            _ => 3,
        }
    }
}

pub fn api_resource(kind: &str) -> ApiResource {
    match kind {
        "Deployment" => ApiResource::erase::<Deployment>(&()),
        "DaemonSet" => ApiResource::erase::<DaemonSet>(&()),
        "Service" => ApiResource::erase::<Service>(&()),
        "ServiceAccount" => ApiResource::erase::<ServiceAccount>(&()),
        "ConfigMap" => ApiResource::erase::<ConfigMap>(&()),
        "Secret" => ApiResource::erase::<Secret>(&()),
        "ClusterRole" => ApiResource::erase::<ClusterRole>(&()),
        _ => ApiResource::erase::<ClusterRoleBinding>(&()),
    }
}

pub(super) fn api(client: &Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let ar = api_resource(kind);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

fn label<'a>(o: &'a DynamicObject, key: &str) -> Option<&'a str> {
    o.labels().get(key).map(String::as_str)
}

pub(super) fn managed_by_weft(o: &DynamicObject) -> bool {
    label(o, MANAGED_BY_LABEL) == Some(MANAGED_BY_VALUE)
}

/// A launcher agent object: the launcher's `app` and `weave-cloud-component` labels.
pub fn is_launcher_agent(o: &DynamicObject, app: &str) -> bool {
    let component = app.strip_prefix("weave-").unwrap_or(app);
    !managed_by_weft(o)
        && label(o, "app") == Some(app)
        && label(o, "weave-cloud-component") == Some(component)
        && label(o, "name") == Some(o.name_any().as_str())
}

/// A launcher ClusterRole: labelled `name: <same>` and granting `*` (standalone Scope's
/// `weave-scope` role is narrow).
pub fn is_launcher_cluster_role(o: &DynamicObject) -> bool {
    let grants_all = o.data["rules"].as_array().is_some_and(|rules| {
        rules.iter().any(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|a| a.contains(&json!("*")))
        })
    });
    !managed_by_weft(o) && label(o, "name") == Some(o.name_any().as_str()) && grants_all
}

/// A launcher ClusterRoleBinding: labelled `name: <same>`, bound to the role of that name, and
/// every subject a ServiceAccount of that name in one of `namespaces`.
pub fn is_launcher_binding(o: &DynamicObject, namespaces: &[&str]) -> bool {
    let name = o.name_any();
    let subjects_ok = o.data["subjects"].as_array().is_some_and(|s| {
        !s.is_empty()
            && s.iter().all(|s| {
                s["kind"] == "ServiceAccount"
                    && s["name"] == json!(name)
                    && s["namespace"]
                        .as_str()
                        .is_some_and(|ns| namespaces.contains(&ns))
            })
    });
    !managed_by_weft(o)
        && label(o, "name") == Some(name.as_str())
        && o.data["roleRef"]["name"] == json!(name)
        && subjects_ok
}

/// Whether WeaveCloud `namespace/name` may act in `kube-system` (read, remove and copy the
/// launcher's objects there): only the one the operator names with `--launcher-takeover
/// NAMESPACE/NAME` (`launcher_takeover`). A WeaveCloud is written by whoever may create one in
/// its namespace; kube-system is the cluster's, so no WeaveCloud gets it by default.
pub fn designated(launcher_takeover: Option<&str>, namespace: &str, name: &str) -> bool {
    launcher_takeover.is_some_and(|d| d.trim() == format!("{namespace}/{name}"))
}

/// The launcher's agent workloads running in kube-system that `wc`'s enabled agents would run
/// a second time (`Kind/kube-system/name`), for a WeaveCloud outside kube-system that may not
/// take them over (not [`designated`]) while `takeover` is on. Only the existence of the
/// launcher's labelled workloads is read, nothing is changed: the WeaveCloud is held and the
/// operator is told which flag takes them over (issue 44 item 2). Empty otherwise.
pub async fn launcher_agents_in_kube_system(
    client: &Client,
    wc: &crate::api::weavecloud::WeaveCloud,
    legacy: bool,
) -> Result<Vec<String>, kube::Error> {
    let ns = wc.namespace().unwrap_or_default();
    if legacy || !wc.spec.general.takeover || ns == LAUNCHER_LEGACY_NAMESPACE {
        return Ok(Vec::new());
    }
    let enabled = |app: &str| match app {
        "weave-flux" => !wc.spec.flux.disable,
        "weave-scope" => !wc.spec.scope.disable,
        _ => !wc.spec.prometheus.disable,
    };
    // Two LISTs (every reconcile of every such WeaveCloud asks), of the launcher's labels only.
    let params = kube::api::ListParams::default().labels("weave-cloud-component");
    let mut out = Vec::new();
    for kind in ["Deployment", "DaemonSet"] {
        let live = api(client, kind, Some(LAUNCHER_LEGACY_NAMESPACE))
            .list(&params)
            .await?;
        for (_, name, app) in LAUNCHER_AGENT_OBJECTS
            .iter()
            .filter(|(k, _, app)| *k == kind && enabled(app))
        {
            if live
                .items
                .iter()
                .any(|o| o.name_any() == *name && is_launcher_agent(o, app))
            {
                out.push(format!("{kind}/{LAUNCHER_LEGACY_NAMESPACE}/{name}"));
            }
        }
    }
    Ok(out)
}

/// Find the launcher's objects for a WeaveCloud in `namespace` whose desired agents are
/// `desired`, and decide for each: remove or adopt. `kube-system` (also as the WeaveCloud's own
/// namespace) is looked at only when `legacy` (the WeaveCloud is [`designated`]). The reads
/// ([`live::read`]) and the decision ([`decide::decide`]) are separate steps.
pub async fn find(
    client: &Client,
    namespace: &str,
    desired: &[DesiredObject],
    legacy: bool,
) -> Result<Vec<Found>, kube::Error> {
    let live = live::read(client, namespace, legacy).await?;
    Ok(decide::decide(&live, namespace, desired, legacy))
}

pub(super) fn remove(
    kind: &'static str,
    namespace: Option<&str>,
    name: &str,
    why: &'static str,
) -> Found {
    Found {
        kind,
        namespace: namespace.map(str::to_string),
        name: name.to_string(),
        action: Decision::Remove(why),
    }
}

/// Delete `found` (its removals, in order), waiting until each workload and its pods are gone
/// so that a recreated one starts clean and host port 9100 is free (a node exporter's old pod
/// holds the port until it has terminated, after its DaemonSet is gone). Returns what was
/// deleted.
pub async fn remove_all(
    client: &Client,
    found: &[Found],
) -> Result<Vec<(String, &'static str)>, kube::Error> {
    let mut removed = Vec::new();
    for f in found {
        let Decision::Remove(why) = f.action else {
            continue;
        };
        let api = api(client, f.kind, f.namespace.as_deref());
        let workload = matches!(f.kind, "Deployment" | "DaemonSet");
        // The pods are found by the workload's selector, read before it goes.
        let selector = if workload {
            api.get_opt(&f.name).await?.and_then(|o| {
                let labels = o.data.pointer("/spec/selector/matchLabels")?.as_object()?;
                let pairs: Vec<String> = labels
                    .iter()
                    .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
                    .collect();
                (!pairs.is_empty()).then(|| pairs.join(","))
            })
        } else {
            None
        };
        match api.delete(&f.name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if crate::apply::is_not_found(&e) => continue,
            Err(e) => return Err(e),
        }
        // Background deletion removes the object itself at once unless it has finalizers; wait
        // (bounded) so that the apply does not meet a terminating object.
        for _ in 0..60 {
            if api.get_opt(&f.name).await?.is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if let (Some(selector), Some(ns)) = (selector, f.namespace.as_deref()) {
            wait_for_pods_gone(client, ns, &selector, &f.reference()).await?;
        }
        tracing::info!(object = %f.reference(), reason = why, "takeover: deleted a launcher object");
        removed.push((f.reference(), why));
    }
    Ok(removed)
}

/// Wait (bounded: a pod a lost node holds never goes) until no pod of `selector` is left in
/// `namespace`, terminating ones included.
async fn wait_for_pods_gone(
    client: &Client,
    namespace: &str,
    selector: &str,
    workload: &str,
) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = kube::api::ListParams::default().labels(selector);
    for _ in 0..240 {
        if pods.list_metadata(&params).await?.items.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tracing::warn!(
        workload,
        "takeover: the launcher's pods did not terminate within 120 s; going on"
    );
    Ok(())
}

/// Whether `found` holds the launcher's flux agent in kube-system: a real launcher install
/// there, whose deploy key the takeover carries over.
pub fn launcher_flux_in_kube_system(found: &[Found]) -> bool {
    found.iter().any(|f| {
        f.kind == "Deployment"
            && f.name == "weave-flux-agent"
            && f.namespace.as_deref() == Some(LAUNCHER_LEGACY_NAMESPACE)
    })
}

/// The deploy key must survive a move out of kube-system: during a real takeover (the
/// launcher's flux is among `found`, which holds kube-system objects only for the designated
/// WeaveCloud), when the WeaveCloud's namespace has no `flux-git-deploy` data and kube-system's
/// launcher copy has some, copy it (kube-system's Secret is left as it is). Never otherwise: a
/// WeaveCloud is no reason to hand anyone kube-system's key. Returns whether it copied.
pub async fn carry_deploy_key(
    client: &Client,
    namespace: &str,
    found: &[Found],
) -> Result<bool, kube::Error> {
    if namespace == LAUNCHER_LEGACY_NAMESPACE || !launcher_flux_in_kube_system(found) {
        return Ok(false);
    }
    let here: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let has_data = |s: &Secret| s.data.as_ref().is_some_and(|d| !d.is_empty());
    if here
        .get_opt(FLUX_DEPLOY_SECRET)
        .await?
        .is_some_and(|s| has_data(&s))
    {
        return Ok(false);
    }
    let legacy: Api<Secret> = Api::namespaced(client.clone(), LAUNCHER_LEGACY_NAMESPACE);
    let Some(old) = legacy.get_opt(FLUX_DEPLOY_SECRET).await? else {
        return Ok(false);
    };
    // Only the launcher's flux has this Secret in kube-system next to its flux Deployment.
    if !has_data(&old) {
        return Ok(false);
    }
    let data: BTreeMap<_, _> = old.data.unwrap_or_default();
    // A separate field manager: this data is fluxd's, never Weft's to change or remove.
    let patch = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": FLUX_DEPLOY_SECRET, "namespace": namespace},
        "data": data,
    });
    here.patch(
        FLUX_DEPLOY_SECRET,
        &PatchParams::apply(&format!("{FIELD_MANAGER}-takeover")),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(true)
}

/// `Kind/namespace/name` of a desired object, as [`Found::reference`] writes it.
pub fn desired_reference(d: &DesiredObject) -> String {
    match d.namespace() {
        Some(ns) => format!("{}/{ns}/{}", d.kind(), d.name()),
        None => format!("{}/{}", d.kind(), d.name()),
    }
}
