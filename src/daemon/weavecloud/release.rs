//! Before a deleted WeaveCloud's agents are pruned: its ServiceAccounts that another workload
//! runs as are released, not deleted (issue 29, item 4). A takeover adopts the launcher's
//! `weave-flux` account, and a user's flux-helm-operator may run as it: deleting it would leave
//! that workload Unauthorized.

use crate::api::keys::{OWNER_LABEL, OWNER_REF_ANNOTATION};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::weavecloud::WeaveCloud;
use crate::render::ownership::MANAGED_BY_LABEL;
use crate::render::Owner;

/// A workload: `Kind/name`, its `weft.io/owner` label, its pod template.
type Workload = (String, Option<String>, PodTemplateSpec);

/// The workloads of namespace `ns`.
async fn workloads(client: &Client, ns: &str) -> Result<Vec<Workload>, kube::Error> {
    let lp = ListParams::default();
    let mut out = Vec::new();
    let owner =
        |labels: &std::collections::BTreeMap<String, String>| labels.get(OWNER_LABEL).cloned();
    for d in Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items
    {
        let o = owner(d.labels());
        if let Some(s) = d.spec {
            out.push((
                format!("Deployment/{}", d.metadata.name.unwrap_or_default()),
                o,
                s.template,
            ));
        }
    }
    for d in Api::<DaemonSet>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items
    {
        let o = owner(d.labels());
        if let Some(s) = d.spec {
            out.push((
                format!("DaemonSet/{}", d.metadata.name.unwrap_or_default()),
                o,
                s.template,
            ));
        }
    }
    for d in Api::<StatefulSet>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items
    {
        let o = owner(d.labels());
        if let Some(s) = d.spec {
            out.push((
                format!("StatefulSet/{}", d.metadata.name.unwrap_or_default()),
                o,
                s.template,
            ));
        }
    }
    for c in Api::<CronJob>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items
    {
        let o = owner(c.labels());
        let template = c.spec.job_template.spec.map(|j| j.template);
        if let Some(t) = template {
            out.push((
                format!("CronJob/{}", c.metadata.name.unwrap_or_default()),
                o,
                t,
            ));
        }
    }
    Ok(out)
}

/// The ServiceAccounts of `wc`'s inventory that a workload not applied by `owner` runs as:
/// their Weft ownership (owner label, managed-by label, owner-ref annotation) is removed, so
/// that the prune that follows keeps them. Returns `ServiceAccount/ns/name (used by …)`.
pub(super) async fn release_shared_service_accounts(
    client: &Client,
    wc: &WeaveCloud,
    owner: &Owner,
) -> Result<Vec<String>, kube::Error> {
    let accounts: Vec<(String, String)> = wc
        .status
        .as_ref()
        .map(|s| s.inventory.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|r| r.kind == "ServiceAccount")
        .map(|r| (r.namespace.clone(), r.name.clone()))
        .collect();
    let mut released = Vec::new();
    let id = owner.id().0;
    let mut cache: Option<(String, Vec<Workload>)> = None;
    for (ns, name) in accounts {
        if cache.as_ref().is_none_or(|(n, _)| *n != ns) {
            cache = Some((ns.clone(), workloads(client, &ns).await?));
        }
        let Some((_, all)) = &cache else { continue };
        let users: Vec<&str> = all
            .iter()
            .filter(|(_, o, _)| o.as_deref() != Some(id.as_str()))
            .filter(|(_, _, t)| {
                t.spec
                    .as_ref()
                    .and_then(|s| s.service_account_name.as_deref())
                    .is_some_and(|sa| sa == name)
            })
            .map(|(w, _, _)| w.as_str())
            .collect();
        if users.is_empty() {
            continue;
        }
        let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), &ns);
        let patch = json!({"metadata": {
            "labels": {OWNER_LABEL: null, MANAGED_BY_LABEL: null},
            "annotations": {OWNER_REF_ANNOTATION: null},
        }});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => released.push(format!(
                "ServiceAccount/{ns}/{name} (used by {})",
                users.join(", ")
            )),
            Err(e) if crate::apply::is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(released)
}
