//! Suspend and resume, as `flux suspend` / `flux resume` do:
//!
//! - **A resource**: `weft.io/suspend: "true"` on a WeaveCloud, ArmadaChart, ArmadaChartGroup or
//!   ArmadaManifest (in git or set with `kubectl annotate`). Weft still applies the resource's own
//!   document from git (that is how the annotation arrives), but nothing it owns: no apply, no
//!   drift correction, no prune (deferred: the inventory keeps every entry), no agent update, and a
//!   deleted resource keeps its finalizer until it is resumed. Its status says `Suspended=True`.
//!   A group or manifest suspends every chart it lists.
//! - **A root**: its Root's `spec.suspend` (`weft suspend` / `weft resume`, `POST
//!   /api/v1/suspend|resume`, or `kubectl edit`; the why in `weft.io/suspend-message`, one writer:
//!   `roots::requests::set_suspended`). While it is suspended no pass of it runs (a request is
//!   answered `suspended`). The flag root's suspension, as its reconcile sees it, is also kept
//!   here ([`SuspendState`]) for the WeaveCloud and ArmadaChart controllers, which then change
//!   nothing; its resumption reconciles what they held.

use std::sync::Arc;

use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::api::conditions::{now_rfc3339, Condition, ConditionStatus};

pub use crate::api::suspend::{annotated, annotated_value};
/// Whether the flag root is suspended, as its Root says (`spec.suspend`, the message of
/// `weft.io/suspend-message`, since when this replica saw it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RootSuspension {
    pub suspended: bool,
    /// Why, as given to `weft suspend --message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 time of the suspension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// The condition type of a suspended resource.
pub const SUSPENDED: &str = "Suspended";

/// The `Suspended` condition of a resource: `True` while suspended, `False` once resumed.
pub fn condition(suspended: bool, why: &str) -> Condition {
    if suspended {
        Condition {
            type_: SUSPENDED.into(),
            status: ConditionStatus::True,
            reason: "Suspended".into(),
            message: format!("{why}: Weft changes nothing it owns until it is resumed"),
            ..Default::default()
        }
    } else {
        Condition {
            type_: SUSPENDED.into(),
            status: ConditionStatus::False,
            reason: "Resumed".into(),
            message: "reconciled as usual".into(),
            ..Default::default()
        }
    }
}

/// Why the resource of `meta` is suspended, if it is: its own annotation, or the whole root.
pub fn why_suspended(root: &SuspendState, meta: &ObjectMeta) -> Option<&'static str> {
    if annotated(meta) {
        Some("weft.io/suspend is \"true\"")
    } else if root.is_suspended() {
        Some("the root is suspended (weft suspend)")
    } else {
        None
    }
}

/// Does `conditions` say `Suspended=True`?
pub fn marked(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == SUSPENDED && c.status == ConditionStatus::True)
}

/// Write the `Suspended` condition of resource `name` (status conditions `before`): `True` with
/// `why` while suspended, `False` once resumed; nothing when it already says so (or when it was
/// never suspended). `true` when written.
pub async fn mark<K>(
    api: &Api<K>,
    name: &str,
    before: &[Condition],
    why: Option<&str>,
) -> Result<bool, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if marked(before) == why.is_some() {
        return Ok(false);
    }
    let mut conditions = before.to_vec();
    crate::api::conditions::set_condition(
        &mut conditions,
        condition(why.is_some(), why.unwrap_or("")),
        &now_rfc3339(),
    );
    let patch = serde_json::json!({"status": {"conditions": conditions}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(true)
}

/// The flag root's suspension as this replica last saw it, shared by the controllers and the
/// updater. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SuspendState(Arc<watch::Sender<RootSuspension>>);

impl Default for SuspendState {
    fn default() -> Self {
        SuspendState(Arc::new(watch::channel(RootSuspension::default()).0))
    }
}

impl SuspendState {
    /// Is the root suspended?
    pub fn is_suspended(&self) -> bool {
        self.0.borrow().suspended
    }

    /// The suspension last seen.
    pub fn get(&self) -> RootSuspension {
        self.0.borrow().clone()
    }

    /// Record what the cluster says; `true` when this resumes a suspended root.
    pub fn set(&self, now: RootSuspension) -> bool {
        let mut resumed = false;
        self.0.send_if_modified(|s| {
            resumed = s.suspended && !now.suspended;
            let changed = *s != now;
            *s = now;
            changed
        });
        resumed
    }

    /// A stream that yields each time the root is resumed (for the controllers'
    /// `reconcile_all_on`).
    pub fn resumes(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        let rx = self.0.subscribe();
        futures::stream::unfold((rx, false), |(mut rx, mut was)| async move {
            loop {
                rx.changed().await.ok()?;
                let now = rx.borrow_and_update().suspended;
                let resumed = was && !now;
                was = now;
                if resumed {
                    return Some(((), (rx, was)));
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::keys::SUSPEND_ANNOTATION;
    use crate::api::suspend::suspends;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn only_true_suspends() {
        for (value, expected) in [
            (Some("true"), true),
            (Some("True"), true),
            (Some(" true "), true),
            (Some("false"), false),
            (Some("yes"), false),
            (Some(""), false),
            (None, false),
        ] {
            assert_eq!(suspends(value), expected, "{value:?}");
        }
    }

    #[test]
    fn annotations_of_metadata_and_documents() {
        let meta = ObjectMeta {
            annotations: Some(BTreeMap::from([(
                SUSPEND_ANNOTATION.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        };
        assert!(annotated(&meta));
        assert!(!annotated(&ObjectMeta::default()));
        let doc = json!({"metadata": {"name": "a", "annotations": {"weft.io/suspend": "true"}}});
        assert!(annotated_value(&doc));
        let doc = json!({"metadata": {"name": "a", "annotations": {"weft.io/suspend": "false"}}});
        assert!(!annotated_value(&doc));
        assert!(!annotated_value(&json!({"metadata": {"name": "a"}})));
    }

    #[test]
    fn conditions_say_which_way() {
        let c = condition(true, "weft.io/suspend is \"true\"");
        assert_eq!(
            (c.type_.as_str(), c.status),
            (SUSPENDED, ConditionStatus::True)
        );
        assert!(c.message.contains("weft.io/suspend"));
        let c = condition(false, "");
        assert_eq!(c.status, ConditionStatus::False);
        assert_eq!(c.reason, "Resumed");
    }
}
