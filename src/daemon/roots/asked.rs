//! When a root's pass was asked for: the remote's refs a pass uses must have been listed since
//! then (`crate::source::git::GitSource::fetch_since`), and a listing another root of the same
//! repository started since is as good as its own.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use kube::ResourceExt;

use super::depends;
use crate::api::keys::REQUESTED_AT_ANNOTATION;
use crate::api::root::Root;
use crate::api::ResourceKey;

/// When this replica's watch first saw each root's `requested-at` value: a pass that answers
/// only that request needs a ref listing started since then, not since its own start (many
/// roots of one repository requested at once then share one listing, see
/// [`crate::source::git::GitSource::fetch_since`]). Kept for every root the watch sees, held
/// here or not (a Lease taken later still answers a request seen before), until the watch sees
/// it deleted.
#[derive(Default)]
pub(crate) struct RequestsSeen(Mutex<HashMap<ResourceKey, (String, Instant)>>);

impl RequestsSeen {
    /// The watch saw `root` now.
    pub(super) fn saw(&self, root: &Root) {
        let key = depends::key_of(root);
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if root.metadata.deletion_timestamp.is_some() {
            seen.remove(&key);
            return;
        }
        let Some(value) = requested_at(root) else {
            seen.remove(&key);
            return;
        };
        if seen.get(&key).is_none_or(|(v, _)| *v != value) {
            seen.insert(key, (value, Instant::now()));
        }
    }

    /// The watch saw `root` deleted.
    pub(super) fn forget(&self, root: &Root) {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.remove(&depends::key_of(root));
    }

    /// When the request `value` of `key` was first seen; `None` if it was not.
    pub(crate) fn since(&self, key: &ResourceKey, value: &str) -> Option<Instant> {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(key).filter(|(v, _)| v == value).map(|(_, at)| *at)
    }
}

/// The root's `weft.io/requested-at` annotation.
pub(super) fn requested_at(root: &Root) -> Option<String> {
    root.annotations().get(REQUESTED_AT_ANNOTATION).cloned()
}

/// What a pass was asked for beside the root itself.
#[derive(Clone, Copy)]
pub(super) struct Asked {
    /// `POST /api/v1/sync?forcePrune=true`: past the prune guard, this pass only.
    pub force_prune: bool,
    /// The remote's refs must be listed since this instant (see
    /// [`super::repository::RootSource::fetch`]).
    pub since: Instant,
}

/// Why a pass runs.
pub(super) struct Why {
    /// As its status shows them (`requested`, `spec`, `push`, `poll`, …).
    pub reasons: Vec<String>,
    /// The `weft.io/requested-at` value it answers.
    pub requested: Option<String>,
    /// The remote's refs must have been listed since then (`None`: since the pass started).
    pub since: Option<Instant>,
}

/// Since when a pass for `reasons` needs the remote's refs listed: the latest moment this
/// replica learnt of one of them — the watch saw the request (`requested_seen`), a push
/// webhook or the sync endpoint asked (`pushed`, at `pushed_at`) — since whatever was pushed
/// before that is in any listing started after it. `None` (as of the pass's start) when a reason
/// has no such moment: a poll, a changed spec, a resumption, dependencies now ready.
pub(super) fn listed_since(
    reasons: &[String],
    pushed: &[String],
    pushed_at: Option<Instant>,
    requested_seen: impl FnOnce() -> Option<Instant>,
) -> Option<Instant> {
    let mut since = None;
    if reasons.iter().any(|r| r == "requested") {
        since = Some(requested_seen()?);
    }
    if !pushed.is_empty() {
        since = since.max(Some(pushed_at?));
    }
    let timed = |r: &String| r == "requested" || pushed.contains(r);
    reasons.iter().all(timed).then_some(since).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn strings(of: &[&str]) -> Vec<String> {
        of.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_pass_needs_the_remote_as_of_its_latest_timed_reason_or_of_its_start() {
        let seen = Instant::now();
        let pushed_at = seen + Duration::from_millis(40);
        let push = strings(&["push"]);
        // A request alone: as of when the watch saw it; unseen: as of the start.
        assert_eq!(
            listed_since(&strings(&["requested"]), &[], None, || Some(seen)),
            Some(seen)
        );
        assert_eq!(
            listed_since(&strings(&["requested"]), &[], None, || None),
            None
        );
        // A push alone, or with a request seen before it: as of the push.
        assert_eq!(
            listed_since(&push, &push, Some(pushed_at), || None),
            Some(pushed_at)
        );
        assert_eq!(
            listed_since(
                &strings(&["requested", "push"]),
                &push,
                Some(pushed_at),
                || { Some(seen) }
            ),
            Some(pushed_at)
        );
        // Any untimed reason: as of the start.
        for other in ["poll", "spec", "resumed", "dependencies"] {
            let reasons = strings(&["requested", "push", other]);
            assert_eq!(
                listed_since(&reasons, &push, Some(pushed_at), || Some(seen)),
                None,
                "{other}"
            );
        }
        assert_eq!(listed_since(&[], &[], None, || Some(seen)), None);
    }

    #[test]
    fn a_request_is_timed_from_when_its_value_was_first_seen_until_the_root_is_deleted() {
        let root = |value: Option<&str>| {
            let mut r = Root::of_repository("team", "apps", "https://git.example/a.git");
            r.metadata.annotations =
                value.map(|v| [(REQUESTED_AT_ANNOTATION.to_string(), v.to_string())].into());
            r
        };
        let key = ResourceKey {
            namespace: "team".into(),
            name: "apps".into(),
        };
        let seen = RequestsSeen::default();
        seen.saw(&root(None));
        assert_eq!(seen.since(&key, "1"), None);
        seen.saw(&root(Some("1")));
        let first = seen.since(&key, "1").expect("seen");
        // Seen again (a status update, a relist): still the first time.
        std::thread::sleep(Duration::from_millis(2));
        seen.saw(&root(Some("1")));
        assert_eq!(seen.since(&key, "1"), Some(first));
        assert_eq!(seen.since(&key, "2"), None);
        // A new value: its own time.
        seen.saw(&root(Some("2")));
        assert!(seen.since(&key, "2").expect("seen") > first);
        assert_eq!(seen.since(&key, "1"), None);
        seen.forget(&root(Some("2")));
        assert_eq!(seen.since(&key, "2"), None);
    }
}
