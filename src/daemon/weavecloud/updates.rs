//! The update step of a WeaveCloud's reconcile: the agent update check runs here, after the
//! agents' own step, so that the reconcile (one per WeaveCloud at a time) is the only writer of
//! the WeaveCloud's agents and status. When the check runs is `Updater::when_due`'s business
//! (`status.nextUpdateCheck`); here, whether a check asked for over HTTP is still unanswered.

use kube::ResourceExt;

use super::Context;
use crate::api::weavecloud::{WeaveCloud, WeaveCloudStatus};

/// The update step of the reconcile: check `wc` (whose status is now `status`) when its next
/// check is due or a check was asked for over HTTP since its last one. The next check; `None`
/// without an updater or a valid schedule.
pub(super) async fn step(
    ctx: &Context,
    wc: &WeaveCloud,
    status: WeaveCloudStatus,
) -> Option<k8s_openapi::jiff::Timestamp> {
    let updater = ctx.updater.as_ref()?;
    let key = (wc.namespace().unwrap_or_default(), wc.name_any());
    let asked = ctx.state.update_requests().count();
    // A WeaveCloud first seen after a request is not checked for it, as it was not listed then.
    let (answered, first) = {
        let mut map = ctx.answered.lock().unwrap_or_else(|p| p.into_inner());
        let first = !map.contains_key(&key);
        (*map.entry(key.clone()).or_insert(asked), first)
    };
    let forced = answered < asked;
    let mut current = wc.clone();
    current.status = Some(status);
    let next = updater.when_due(&current, forced, first).await;
    if forced {
        ctx.answered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, asked);
    }
    next
}

/// Forget a deleted WeaveCloud: its versions, their metrics, and the requests it answered.
pub(super) fn forget(ctx: &Context, ns: &str, name: &str) {
    if let Some(updater) = &ctx.updater {
        updater.forget(ns, name);
    }
    ctx.answered
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(ns.to_string(), name.to_string()));
}
