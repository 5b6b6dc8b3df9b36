//! What people ask of a Root object, as Flux's `flux reconcile|suspend|resume kustomization`:
//! everything goes through the Root itself (its `spec.suspend`, its `weft.io/requested-at`
//! annotation) and its status answers. The controller in this module's parent does the work; no
//! other record, queue or request object is involved.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, Condition};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::status::ready_of;
use super::RootsError;
use crate::api::conditions::ConditionStatus;
use crate::api::keys::{REQUESTED_AT_ANNOTATION, SUSPEND_MESSAGE_ANNOTATION};
use crate::api::root::Root;

/// The field manager of these requests (never `weft`: a request is no apply of the repository).
const MANAGER: &str = "weft-cli";

fn api(client: &Client, namespace: &str) -> Api<Root> {
    Api::namespaced(client.clone(), namespace)
}

fn kube_error(
    namespace: &str,
    name: &str,
    action: &'static str,
    source: kube::Error,
) -> RootsError {
    RootsError::Kube {
        root: format!("{namespace}/{name}"),
        action,
        source,
    }
}

/// The Root `namespace/name`; an error naming it when it is not there.
pub async fn get(client: &Client, namespace: &str, name: &str) -> Result<Root, RootsError> {
    api(client, namespace)
        .get(name)
        .await
        .map_err(|e| kube_error(namespace, name, "reading it", e))
}

/// Why a command about one root cannot go on: its Root is not there.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("no root `{root}` in namespace {namespace} (no Root {namespace}/{root}): {}", known_roots(.known))]
    Missing {
        root: String,
        namespace: String,
        /// The roots that are there.
        known: Vec<String>,
    },
    #[error("cannot list the Roots of namespace {namespace}: {}", crate::api::kube_error::Text(.source))]
    Api {
        namespace: String,
        #[source]
        source: kube::Error,
    },
}

fn known_roots(known: &[String]) -> String {
    if known.is_empty() {
        "there is no root there (a root is made by its first `weft sync` or `weft run` pass, or \
         `weft create root`; check --weft-namespace)"
            .to_string()
    } else {
        format!(
            "the roots there are {} (check --root-name or WEFT_ROOT_NAME)",
            known
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// The names of the Roots in `namespace`, sorted; none when the API server does not serve
/// Roots (no CRD: no root was ever made there).
pub async fn names(client: &Client, namespace: &str) -> Result<Vec<String>, kube::Error> {
    match api(client, namespace).list(&Default::default()).await {
        Ok(list) => {
            let mut names: Vec<String> = list.items.iter().map(ResourceExt::name_any).collect();
            names.sort();
            Ok(names)
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The Root `namespace/name`; when it is not there, an error naming the roots that are.
/// Commands about one root ask this first, so that a wrong name is an error, not a new object.
pub async fn require(client: &Client, namespace: &str, name: &str) -> Result<Root, LookupError> {
    let lookup = |source| LookupError::Api {
        namespace: namespace.to_string(),
        source,
    };
    let found = match api(client, namespace).get_opt(name).await {
        Ok(found) => found,
        // No CRD: no Root anywhere.
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(e) => return Err(lookup(e)),
    };
    match found {
        Some(root) => Ok(root),
        None => Err(LookupError::Missing {
            root: name.to_string(),
            namespace: namespace.to_string(),
            known: names(client, namespace).await.map_err(lookup)?,
        }),
    }
}

/// Apply `root` in `namespace` as `weft create root` does (field manager `weft`, forced, the
/// server's strict field validation): the Root as the server stored it.
pub async fn create(client: &Client, namespace: &str, root: &Root) -> Result<Root, kube::Error> {
    let params = PatchParams::apply("weft").force().validation_strict();
    api(client, namespace)
        .patch(&root.name_any(), &params, &Patch::Apply(root))
        .await
}

/// Whether `root` was made from a `weft run`'s flags (it carries `weft.io/default-namespace`):
/// the installation whose flag root it is reconciles it, no other Weft that sees it.
pub fn marked_flag_root(root: &Root) -> bool {
    root.annotations()
        .contains_key(crate::api::keys::DEFAULT_NAMESPACE_ANNOTATION)
}

/// Set `spec.suspend` of the Root `namespace/name` (a merge patch: the rest of the spec stays
/// whoever's it is), with why in `weft.io/suspend-message` (see `api::suspend`; a suspension
/// without one, and a resume, remove it). Resuming also asks for a pass now, as `flux resume`
/// does. The one place a root's suspension is written.
pub async fn set_suspended(
    client: &Client,
    namespace: &str,
    name: &str,
    suspend: bool,
    message: Option<&str>,
) -> Result<(), RootsError> {
    let message = message.filter(|m| suspend && !m.trim().is_empty());
    let mut patch = json!({
        "spec": {"suspend": suspend},
        "metadata": {"annotations": {SUSPEND_MESSAGE_ANNOTATION: message}},
    });
    if !suspend {
        patch["metadata"]["annotations"][REQUESTED_AT_ANNOTATION] = json!(now());
    }
    merge(client, namespace, name, &patch, "setting spec.suspend").await
}

/// Merge-patch the Root `namespace/name` (it must exist: a typo is an error, not a new object).
async fn merge(
    client: &Client,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
    action: &'static str,
) -> Result<(), RootsError> {
    get(client, namespace, name).await?;
    let pp = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    api(client, namespace)
        .patch(name, &pp, &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| kube_error(namespace, name, action, e))
}

/// Ask for a pass of the Root `namespace/name` now: a new `weft.io/requested-at` value, which
/// is returned (its status's `lastHandledRequestedAt` answers it).
pub async fn request(client: &Client, namespace: &str, name: &str) -> Result<String, RootsError> {
    let at = now();
    let patch = json!({"metadata": {"annotations": {REQUESTED_AT_ANNOTATION: at}}});
    merge(client, namespace, name, &patch, "annotating it").await?;
    Ok(at)
}

/// Whether the Root answered the request `at` (or is suspended, which answers nothing).
fn answered(at: String) -> impl Condition<Root> {
    move |root: Option<&Root>| {
        root.is_some_and(|r| {
            r.spec.suspend
                || r.status
                    .as_ref()
                    .and_then(|s| s.last_handled_requested_at.as_deref())
                    == Some(at.as_str())
        })
    }
}

/// How a request was answered.
pub struct Answer {
    /// The root as it answered.
    pub root: Root,
    /// `Ready=True` after the pass (and not suspended).
    pub ready: bool,
    /// One line: the `Ready` reason and message, or why nothing ran.
    pub line: String,
}

/// Wait (watching the Root) until it answers the request `at`, at most `timeout`.
pub async fn wait_answer(
    client: &Client,
    namespace: &str,
    name: &str,
    at: &str,
    timeout: Duration,
) -> Result<Option<Answer>, RootsError> {
    let waited = tokio::time::timeout(
        timeout,
        await_condition(api(client, namespace), name, answered(at.to_string())),
    )
    .await;
    let Ok(found) = waited else {
        return Ok(None);
    };
    let root = found
        .map_err(|e| RootsError::Wait {
            root: format!("{namespace}/{name}"),
            message: e.to_string(),
        })?
        .ok_or_else(|| RootsError::Wait {
            root: format!("{namespace}/{name}"),
            message: "it was deleted while the request waited".into(),
        })?;
    if root.spec.suspend {
        return Ok(Some(Answer {
            line: "it is suspended (spec.suspend): nothing ran; `weft resume root` first".into(),
            ready: false,
            root,
        }));
    }
    let status = root.status.clone().unwrap_or_default();
    let (ready, line) = match ready_of(&status) {
        Some(c) => (
            c.status == ConditionStatus::True,
            format!("Ready={} ({}): {}", c.status, c.reason, c.message),
        ),
        None => (false, "no Ready condition yet".into()),
    };
    Ok(Some(Answer { root, ready, line }))
}

/// A request value: the time, to the nanosecond (two requests in one second still differ).
fn now() -> String {
    format!("{:.9}", k8s_openapi::jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_root_names_its_root_and_the_roots_there() {
        let missing = LookupError::Missing {
            root: "wfet".into(),
            namespace: "weft-system".into(),
            known: vec!["tenant-a".into(), "weft".into()],
        };
        assert_eq!(
            missing.to_string(),
            "no root `wfet` in namespace weft-system (no Root weft-system/wfet): the roots there are `tenant-a`, `weft` (check --root-name or WEFT_ROOT_NAME)"
        );
        let none = LookupError::Missing {
            root: "weft".into(),
            namespace: "fresh".into(),
            known: Vec::new(),
        };
        assert!(
            none.to_string().contains("there is no root there"),
            "{none}"
        );
    }
}
