//! A push, routed to the Roots whose source it is: a verified webhook names a repository (its
//! `https://` and ssh URLs) and a ref; every Root that follows that ref of that repository gets
//! a pass now. The HTTP server asks; the Roots' controller does the passes (a woken root is
//! due, and kube-runtime's `reconcile_all_on` makes the controller look at its roots now).
//! Nothing is written to the Root for a push: many pushes cost no API write.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use kube::runtime::reflector::Store;
use tokio::sync::mpsc;

use crate::api::root::{GitRefSpec, Root};
use crate::api::ResourceKey;
use crate::source::git::repository_key;

/// Pushes for the Roots' controller, shared by the HTTP server and the controller.
#[derive(Clone, Default)]
pub struct RootPushes {
    inner: Arc<Inner>,
}

/// Whether this replica holds the Lease of a root.
pub(super) type Holds = Box<dyn Fn(&ResourceKey) -> bool + Send + Sync>;

#[derive(Default)]
struct Inner {
    /// The controller's cache of Roots (set when the controller starts).
    store: OnceLock<Store<Root>>,
    /// Wakes the controller (set when the controller starts).
    wake: OnceLock<mpsc::Sender<()>>,
    /// The roots a push (or the sync endpoint) made due, with why, until their reconcile
    /// takes them.
    pending: Mutex<HashMap<ResourceKey, Vec<String>>>,
    /// Whether this replica holds a root's Lease (set when the controller starts).
    holds: OnceLock<Holds>,
    /// The daemon queue's pass a root's next pass answers (the flag root's Root, see
    /// `super::answer`): the highest number asked for, until a pass takes it.
    tickets: Mutex<HashMap<ResourceKey, u64>>,
}

impl RootPushes {
    /// Given to the controller when it starts: the stream that makes it look at its roots.
    pub(super) fn connect(&self, store: Store<Root>, holds: Holds) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel(1);
        // Set once per daemon: the controller starts once.
        let _ = self.inner.store.set(store);
        let _ = self.inner.wake.set(tx);
        let _ = self.inner.holds.set(holds);
        rx
    }

    /// Whether the controller knows the Root `key` and another replica holds its Lease (or
    /// nobody yet): a pass asked for here would not run here (see `super::answer`).
    pub fn held_elsewhere(&self, key: &ResourceKey) -> bool {
        let (Some(store), Some(holds)) = (self.inner.store.get(), self.inner.holds.get()) else {
            return false;
        };
        let known = store
            .get(&kube::runtime::reflector::ObjectRef::new(&key.name).within(&key.namespace))
            .is_some();
        known && !holds(key)
    }

    /// Why `key` was made due (`push`, `api`, the daemon queue's reasons), if it was (taken:
    /// the next push makes it due again).
    pub(super) fn take(&self, key: &ResourceKey) -> Vec<String> {
        self.pending().remove(key).unwrap_or_default()
    }

    /// Add `why` to the reasons `key` is due for.
    fn due(&self, key: &ResourceKey, why: &str) {
        let mut pending = self.pending();
        let reasons = pending.entry(key.clone()).or_default();
        if !reasons.iter().any(|r| r == why) {
            reasons.push(why.to_string());
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<ResourceKey, Vec<String>>> {
        self.inner.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ask for a pass of the Root `key` now (`POST /api/v1/sync?root=ns/name`); `false` when the
    /// controller has not started or has no such Root.
    pub fn wake(&self, key: &ResourceKey) -> bool {
        self.wake_for(key, &["api".to_string()])
    }

    /// [`wake`](Self::wake), the pass saying `reasons` (the daemon queue's: `webhook/github`,
    /// `resumed`, …).
    fn wake_for(&self, key: &ResourceKey, reasons: &[String]) -> bool {
        let Some(store) = self.inner.store.get() else {
            return false;
        };
        let known = store
            .get(&kube::runtime::reflector::ObjectRef::new(&key.name).within(&key.namespace))
            .is_some();
        if known {
            for why in reasons {
                self.due(key, why);
            }
            if let Some(wake) = self.inner.wake.get() {
                let _ = wake.try_send(());
            }
        }
        known
    }

    /// Ask for a pass of the Root `key` now that answers the daemon queue's pass `pass` (and
    /// every earlier one): [`wake`](Self::wake), the ticket kept until [`take_ticket`]
    /// (Self::take_ticket).
    pub fn wake_ticket(&self, key: &ResourceKey, pass: u64, reasons: &[String]) -> bool {
        {
            let mut tickets = self.inner.tickets.lock().unwrap_or_else(|p| p.into_inner());
            let kept = tickets.entry(key.clone()).or_default();
            *kept = (*kept).max(pass);
        }
        self.wake_for(key, reasons)
    }

    /// The queue's pass the pass of `key` about to start answers, if one was asked for (taken:
    /// a pass that starts later answers the next one).
    pub fn take_ticket(&self, key: &ResourceKey) -> Option<u64> {
        self.inner
            .tickets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key)
    }

    /// A push of `pushed_ref` (`None`: the hook did not say) to the repository named by any of
    /// `urls`: the Roots (of `namespaces`, when given) that follow it, woken; their
    /// `namespace/name`, sorted. None when the controller has not started.
    pub fn push(
        &self,
        urls: &[String],
        pushed_ref: Option<&str>,
        namespaces: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let Some(store) = self.inner.store.get() else {
            return Vec::new();
        };
        let pushed: HashSet<String> = urls.iter().filter_map(|u| repository_key(u)).collect();
        if pushed.is_empty() {
            return Vec::new();
        }
        let mut woken: Vec<ResourceKey> = store
            .state()
            .iter()
            .filter(|r| !r.spec.suspend)
            .filter(|r| repository_key(&r.spec.source.url).is_some_and(|k| pushed.contains(&k)))
            .filter(|r| pushed_ref.is_none_or(|p| follows(r.spec.source.git_ref.as_ref(), p)))
            .map(|r| super::depends::key_of(r))
            .filter(|k| namespaces(&k.namespace))
            .collect();
        woken.sort();
        if woken.is_empty() {
            return Vec::new();
        }
        for key in &woken {
            self.due(key, "push");
        }
        if let Some(wake) = self.inner.wake.get() {
            // Full: a wake-up is already waiting, and it will see these roots too.
            let _ = wake.try_send(());
        }
        woken.iter().map(ToString::to_string).collect()
    }
}

/// Whether a root following `spec` (none: the remote's HEAD, some branch) may have moved with a
/// push of `pushed` (`refs/heads/main`, `refs/tags/v1.2.0`). A commit never moves; a semver
/// range may move with any tag.
pub fn follows(spec: Option<&GitRefSpec>, pushed: &str) -> bool {
    let Some(spec) = spec else {
        return pushed.starts_with("refs/heads/");
    };
    if let Some(branch) = &spec.branch {
        return pushed.strip_prefix("refs/heads/") == Some(branch.as_str());
    }
    if let Some(tag) = &spec.tag {
        return pushed.strip_prefix("refs/tags/") == Some(tag.as_str());
    }
    if spec.semver.is_some() {
        return pushed.starts_with("refs/tags/");
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_moves_the_roots_that_follow_its_ref() {
        let branch = |b: &str| GitRefSpec {
            branch: Some(b.into()),
            ..GitRefSpec::default()
        };
        assert!(follows(None, "refs/heads/trunk"));
        assert!(!follows(None, "refs/tags/v1"));
        assert!(follows(Some(&branch("main")), "refs/heads/main"));
        assert!(!follows(Some(&branch("main")), "refs/heads/main2"));
        assert!(!follows(Some(&branch("main")), "refs/tags/main"));
        let tag = GitRefSpec {
            tag: Some("v1".into()),
            ..GitRefSpec::default()
        };
        assert!(follows(Some(&tag), "refs/tags/v1"));
        assert!(!follows(Some(&tag), "refs/tags/v2"));
        let semver = GitRefSpec {
            semver: Some(">=1".into()),
            ..GitRefSpec::default()
        };
        assert!(follows(Some(&semver), "refs/tags/v2"));
        let commit = GitRefSpec {
            commit: Some("0".repeat(40)),
            ..GitRefSpec::default()
        };
        assert!(!follows(Some(&commit), "refs/heads/main"));
    }

    #[test]
    fn a_pass_answers_the_highest_ticket_asked_for_once() {
        let pushes = RootPushes::default();
        let key = ResourceKey {
            namespace: "weft-system".into(),
            name: "weft".into(),
        };
        // Before the controller starts nothing is woken, but the ticket waits for a pass.
        assert!(!pushes.wake_ticket(&key, 3, &[]));
        assert!(!pushes.wake_ticket(&key, 2, &[]));
        assert_eq!(pushes.take_ticket(&key), Some(3));
        assert_eq!(pushes.take_ticket(&key), None);
    }

    #[test]
    fn before_the_controller_starts_a_push_wakes_nothing() {
        let pushes = RootPushes::default();
        assert!(pushes
            .push(&["https://h/o/r.git".into()], None, |_| true)
            .is_empty());
    }
}
