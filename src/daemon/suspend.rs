//! Suspend and resume, as `flux suspend` / `flux resume` do:
//!
//! - **A resource**: `weft.io/suspend: "true"` on a WeaveCloud, ArmadaChart, ArmadaChartGroup or
//!   ArmadaManifest (in git or set with `kubectl annotate`). Weft still applies the resource's own
//!   document from git (that is how the annotation arrives), but nothing it owns: no apply, no
//!   drift correction, no prune (deferred: the inventory keeps every entry), no agent update, and a
//!   deleted resource keeps its finalizer until it is resumed. Its status says `Suspended=True`.
//!   A group or manifest suspends every chart it lists.
//! - **The root**: `weft suspend` / `weft resume` (or `POST /api/v1/suspend|resume`) record the
//!   state in the root's record ConfigMap (`weft-root-<root name>` in Weft's namespace), so every
//!   replica, every shard and a restart obey it. While the root is suspended no pass runs (a
//!   trigger is answered with a `suspended` report), and the controllers and the updater change
//!   nothing. Resuming starts a pass at once.
//!
//! The record ConfigMap also holds the root's last pass outcome (see [`super::record`]): the
//! suspend keys are written by field manager `weft-suspend`, the outcome by `weft`, so server-side
//! apply keeps each writer's keys apart.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::Client;
use tokio::sync::watch;

use super::record::{
    record_labels, record_name, RootSuspension, KEY_SUSPENDED, KEY_SUSPENDED_AT,
    KEY_SUSPEND_MESSAGE, SUSPEND_MANAGER,
};
use crate::api::conditions::{now_rfc3339, Condition, ConditionStatus};

pub use crate::api::suspend::{annotated, annotated_value};
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

/// Record that root `root_name` is suspended (with `message`) or resumed. Server-side apply by
/// [`SUSPEND_MANAGER`]: the pass outcome keys of the same record are left alone.
pub async fn write(
    client: &Client,
    weft_namespace: &str,
    root_name: &str,
    suspended: bool,
    message: Option<&str>,
) -> Result<RootSuspension, kube::Error> {
    let mut data = BTreeMap::from([(KEY_SUSPENDED.to_string(), suspended.to_string())]);
    let since = suspended.then(now_rfc3339);
    if suspended {
        if let Some(m) = message.filter(|m| !m.trim().is_empty()) {
            data.insert(KEY_SUSPEND_MESSAGE.into(), m.to_string());
        }
        data.insert(KEY_SUSPENDED_AT.into(), since.clone().unwrap_or_default());
    }
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(record_name(root_name)),
            namespace: Some(weft_namespace.to_string()),
            labels: Some(record_labels(root_name)),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
    let pp = PatchParams::apply(SUSPEND_MANAGER).force();
    let written = api
        .patch(&record_name(root_name), &pp, &Patch::Apply(&cm))
        .await?;
    Ok(RootSuspension::from_data(written.data.as_ref()))
}

/// The root's suspension as this replica last saw it, shared by the root loop, the controllers,
/// the updater and the HTTP server. Cheap to clone.
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

/// Follow the root record of `root_name` while this replica works, handing each suspension
/// seen to `seen` (the daemon state keeps it and starts a pass when the root is resumed); stops
/// when `seen` returns `false`, or when aborted.
pub async fn follow(
    client: Client,
    weft_namespace: String,
    root_name: String,
    seen: impl Fn(RootSuspension) -> bool,
) {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    use kube::runtime::WatchStreamExt;
    let api: Api<ConfigMap> = Api::namespaced(client, &weft_namespace);
    let config =
        watcher::Config::default().fields(&format!("metadata.name={}", record_name(&root_name)));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    let mut seen_in_list = false;
    while let Some(event) = events.next().await {
        let now = match event {
            Ok(Event::Apply(cm)) | Ok(Event::InitApply(cm)) => {
                seen_in_list = true;
                RootSuspension::from_data(cm.data.as_ref())
            }
            Ok(Event::Delete(_)) => RootSuspension::default(),
            Ok(Event::Init) => {
                seen_in_list = false;
                continue;
            }
            Ok(Event::InitDone) if !seen_in_list => RootSuspension::default(),
            Ok(Event::InitDone) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "watching the root record; retrying");
                continue;
            }
        };
        if !seen(now) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::keys::SUSPEND_ANNOTATION;
    use crate::api::suspend::suspends;
    use serde_json::json;

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
    fn the_record_reads_back() {
        assert_eq!(RootSuspension::from_data(None), RootSuspension::default());
        let data = BTreeMap::from([
            (KEY_SUSPENDED.to_string(), "true".to_string()),
            (KEY_SUSPEND_MESSAGE.to_string(), "incident 42".to_string()),
            (
                KEY_SUSPENDED_AT.to_string(),
                "2026-12-02T10:00:00Z".to_string(),
            ),
            ("revision".to_string(), "abc".to_string()),
        ]);
        let s = RootSuspension::from_data(Some(&data));
        assert!(s.suspended);
        assert_eq!(s.message.as_deref(), Some("incident 42"));
        assert_eq!(s.since.as_deref(), Some("2026-12-02T10:00:00Z"));
        let data = BTreeMap::from([(KEY_SUSPENDED.to_string(), "false".to_string())]);
        assert!(!RootSuspension::from_data(Some(&data)).suspended);
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
