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

use crate::api::conditions::{now_rfc3339, Condition};

use crate::api::suspend::{annotated, condition, marked};
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

/// Why the resource of `meta` is suspended, if it is: its own annotation, or the whole root.
pub fn why_suspended(root: &SuspendState, meta: &ObjectMeta) -> Option<&'static str> {
    why_suspended_under(root.is_suspended(), meta)
}

/// [`why_suspended`] for a resource of a root that is suspended or not (`root_suspended`): a
/// Root object's, whose `spec.suspend` says so.
pub fn why_suspended_under(root_suspended: bool, meta: &ObjectMeta) -> Option<&'static str> {
    if annotated(meta) {
        Some("weft.io/suspend is \"true\"")
    } else if root_suspended {
        Some("the root is suspended (weft suspend)")
    } else {
        None
    }
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
