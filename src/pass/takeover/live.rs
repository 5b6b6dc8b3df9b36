//! The read step of the takeover: every object [`super::decide`] looks at, read once.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use kube::Client;

use super::{api, FLUX_DEPLOY_SECRET, LAUNCHER_AGENT_OBJECTS, LAUNCHER_RBAC, STANDALONE_SCOPE_APP};
use super::{LAUNCHER_LEGACY_NAMESPACE, WEAVE_AGENT};

/// `(kind, namespace, name)` of an object read.
pub type Key = (&'static str, Option<String>, String);

/// The launcher-related objects of a WeaveCloud's namespace (and of kube-system, for the
/// designated WeaveCloud) as the API server had them: each looked-up object that exists.
#[derive(Clone, Debug, Default)]
pub struct Live {
    objects: BTreeMap<Key, DynamicObject>,
}

impl Live {
    /// Objects by `(kind, namespace, name)`; for unit tests of the decision and for callers
    /// that read the cluster another way.
    pub fn from_objects(objects: impl IntoIterator<Item = (Key, DynamicObject)>) -> Live {
        Live {
            objects: objects.into_iter().collect(),
        }
    }

    /// The object `kind` `namespace/name`, if it exists.
    pub fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<&DynamicObject> {
        self.objects
            .iter()
            .find(|((k, ns, n), _)| *k == kind && ns.as_deref() == namespace && n == name)
            .map(|(_, o)| o)
    }

    async fn read(
        &mut self,
        client: &Client,
        kind: &'static str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<bool, kube::Error> {
        let found = api(client, kind, namespace).get_opt(name).await?;
        let exists = found.is_some();
        if let Some(o) = found {
            self.objects
                .insert((kind, namespace.map(str::to_string), name.to_string()), o);
        }
        Ok(exists)
    }
}

/// The namespaces a WeaveCloud in `namespace` looks at: its own, and kube-system when it is
/// the designated one (`legacy`); none for a WeaveCloud in kube-system that is not designated.
pub fn namespaces(namespace: &str, legacy: bool) -> Vec<&str> {
    if namespace == LAUNCHER_LEGACY_NAMESPACE && !legacy {
        return Vec::new();
    }
    let mut out = vec![namespace];
    if namespace != LAUNCHER_LEGACY_NAMESPACE && legacy {
        out.push(LAUNCHER_LEGACY_NAMESPACE);
    }
    out
}

/// Read what the decision needs: each object once (issue 32: the standalone-scope Deployment
/// was read twice). weave-agent's RBAC is read only when its Deployment exists, the deploy key
/// only beside a flux Deployment: a cluster without the launcher costs one read per name.
pub async fn read(client: &Client, namespace: &str, legacy: bool) -> Result<Live, kube::Error> {
    let mut live = Live::default();
    let namespaces = namespaces(namespace, legacy);
    if namespaces.is_empty() {
        return Ok(live);
    }
    if live
        .read(client, "Deployment", Some(namespace), WEAVE_AGENT)
        .await?
    {
        let agent = live
            .get("Deployment", Some(namespace), WEAVE_AGENT)
            .cloned();
        let account = agent.as_ref().map_or(
            WEAVE_AGENT.to_string(),
            super::decide::agent_service_account,
        );
        live.read(client, "ServiceAccount", Some(namespace), &account)
            .await?;
        live.read(client, "ClusterRoleBinding", None, WEAVE_AGENT)
            .await?;
        live.read(client, "ClusterRole", None, WEAVE_AGENT).await?;
        // The Helm chart's variant names its RBAC after the release (`<release>-weave-cloud`).
        if let Some(name) = agent.as_ref().and_then(super::decide::helm_fullname) {
            live.read(client, "ClusterRoleBinding", None, &name).await?;
            live.read(client, "ClusterRole", None, &name).await?;
        }
    }
    for ns in &namespaces {
        live.read(client, "Deployment", Some(ns), STANDALONE_SCOPE_APP)
            .await?;
        for (kind, name, _) in LAUNCHER_AGENT_OBJECTS {
            live.read(client, kind, Some(ns), name).await?;
        }
        for name in LAUNCHER_RBAC {
            live.read(client, "ServiceAccount", Some(ns), name).await?;
        }
    }
    if live
        .get("Deployment", Some(namespace), "weave-flux-agent")
        .is_some()
    {
        live.read(client, "Secret", Some(namespace), FLUX_DEPLOY_SECRET)
            .await?;
    }
    for name in LAUNCHER_RBAC {
        live.read(client, "ClusterRoleBinding", None, name).await?;
        live.read(client, "ClusterRole", None, name).await?;
    }
    Ok(live)
}
