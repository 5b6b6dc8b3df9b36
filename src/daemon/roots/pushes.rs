//! A push, routed to the Roots whose source it is: a verified webhook names a repository (its
//! `https://` and ssh URLs) and a ref; every Root that follows that ref of that repository gets
//! a pass now. The HTTP server asks; the Roots' controller does the passes (a woken root is
//! due, and kube-runtime's `reconcile_on` makes the controller look at that root now).
//! Nothing is written to the Root for a push: many pushes cost no API write.
//!
//! The flag root's Root (`weft run --root-name`) also answers requests that name no Root
//! (`POST /api/v1/sync`, a push webhook, a chart's drift): each gets the number of the pass
//! that will answer it, the next pass of that Root to start; the pass publishes its report on
//! a watch channel the waiting request reads (see [`FlagRequests`], `super::answer`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::{mpsc, watch};

use crate::api::root::{GitRefSpec, Root};
use crate::api::ResourceKey;
use crate::daemon::status::PassReport;
use crate::source::git::repository_key;

/// Pushes for the Roots' controller, shared by the HTTP server and the controller.
#[derive(Clone, Default)]
pub struct RootPushes {
    inner: Arc<Inner>,
}

/// Whether this replica holds the Lease of a root.
pub(super) type Holds = Box<dyn Fn(&ResourceKey) -> bool + Send + Sync>;
/// The replica holding a root's Lease and its hooks URL ([`super::lease::RootLeases::holder_url`]).
pub(super) type HolderOf = Box<dyn Fn(&ResourceKey) -> Option<(String, String)> + Send + Sync>;

#[derive(Default)]
struct Inner {
    /// The controller's cache of Roots (set when the controller starts).
    store: OnceLock<Store<Root>>,
    /// Wakes the controller for one root (set when the controller starts).
    wake: OnceLock<mpsc::UnboundedSender<ObjectRef<Root>>>,
    /// The roots a push (or the sync endpoint) made due, with why and when it was last asked,
    /// until their reconcile takes them.
    pending: Mutex<HashMap<ResourceKey, (Vec<String>, Instant)>>,
    /// Whether this replica holds a root's Lease (set when the controller starts).
    holds: OnceLock<Holds>,
    /// Who else holds a root's Lease, and where (set when the controller starts).
    holder_of: OnceLock<HolderOf>,
    /// The requests of the flag root's Root and their answers.
    flag: FlagRequests,
}

/// Why a pass of the flag root's Root was asked for; shown in the pass's reasons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestReason {
    /// A push webhook (`github`, `gitlab`, `generic`).
    Webhook(String),
    /// `POST /api/v1/sync` (e.g. `weft trigger --sync-token-file`).
    Api,
    /// `POST /api/v1/sync?forcePrune=true` (`weft trigger --force-prune`): the pass that answers
    /// it may prune past the fraction guard.
    ApiForcePrune,
    /// A chart's children drifted, or its `weft.io/requested-at` changed.
    Watch,
}

/// The reason a pass that answers a `forcePrune` request shows.
pub const FORCE_PRUNE_REASON: &str = "api/force-prune";

impl std::fmt::Display for RequestReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestReason::Webhook(kind) => write!(f, "webhook/{kind}"),
            RequestReason::Api => f.write_str("api"),
            RequestReason::ApiForcePrune => f.write_str(FORCE_PRUNE_REASON),
            RequestReason::Watch => f.write_str("watch"),
        }
    }
}

/// Why a request gets no pass.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("the daemon is shutting down (or on standby) and takes no new work")]
    Closed,
}

/// What the flag root's Root needs to answer a request now, besides the wake-up it was given.
#[derive(Debug, PartialEq, Eq)]
pub enum HandOver {
    /// Nothing: the controller knows the Root and this replica passes it, or a hand-over of
    /// the same pass is under way, or no flag root is served (yet).
    None,
    /// Another replica holds the Root's Lease: the pass is asked through the API server.
    Elsewhere(ResourceKey),
    /// The controller does not know the Root (yet): wait a little for it, then answer why not.
    Unknown(ResourceKey),
}

/// The pass numbers and answers of the flag root's Root: a counter and a watch channel, no
/// queue. A request gets the number the Root's next pass will take as it starts; the pass (or
/// a reconcile that passes nothing while a request waits) publishes its report under that
/// number, which answers every request numbered up to it.
pub struct FlagRequests {
    board: Mutex<Board>,
    /// The latest answered pass and its report.
    answers: watch::Sender<Option<(u64, Arc<PassReport>)>>,
}

struct Board {
    /// The flag root's Root, while a term serves it.
    key: Option<ResourceKey>,
    /// The number of the flag root's next pass; passes are numbered from 1.
    next: u64,
    /// Whether a request waits for pass `next`.
    asked: bool,
    /// A hand-over of pass `next` (through the API server, or waiting for the controller to
    /// know the Root) is under way: a request that joins it needs no other.
    handing: bool,
    closed: bool,
}

impl Default for FlagRequests {
    fn default() -> Self {
        FlagRequests {
            board: Mutex::new(Board {
                key: None,
                next: 1,
                asked: false,
                handing: false,
                closed: false,
            }),
            answers: watch::channel(None).0,
        }
    }
}

impl FlagRequests {
    fn board(&self) -> MutexGuard<'_, Board> {
        // Plain field writes under a small lock: a poisoned lock still holds consistent data.
        self.board.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a request waits for a pass.
    pub fn asked(&self) -> bool {
        self.board().asked
    }

    /// A pass of the flag root starts: its number (it answers every request made before).
    pub fn start(&self) -> u64 {
        let mut b = self.board();
        let pass = b.next;
        b.next += 1;
        b.asked = false;
        b.handing = false;
        pass
    }

    /// A reconcile that passes nothing: the number it answers with, if a request waits.
    pub fn start_if_asked(&self) -> Option<u64> {
        let asked = self.board().asked;
        asked.then(|| self.start())
    }

    /// The hand-over of the waiting request ended without a pass (the Root became known here):
    /// a later request that finds the Root unknown starts another.
    pub fn handed(&self) {
        self.board().handing = false;
    }

    /// Publish the report of pass `pass`; an earlier pass's never replaces a later one (a
    /// request answered through the API server may race the local pass).
    pub fn answer(&self, pass: u64, mut report: PassReport) {
        report.pass = pass;
        self.answers.send_if_modified(|last| {
            if last.as_ref().is_some_and(|(n, _)| *n >= pass) {
                return false;
            }
            *last = Some((pass, Arc::new(report)));
            true
        });
    }

    /// The latest answered pass number, 0 for none.
    pub fn last(&self) -> u64 {
        self.answers.borrow().as_ref().map_or(0, |(n, _)| *n)
    }

    /// Wait until pass `pass` (or a later one) is answered: its number and report.
    pub async fn wait(&self, pass: u64) -> Result<(u64, Arc<PassReport>), RequestError> {
        let mut rx = self.answers.subscribe();
        loop {
            if let Some((n, report)) = rx.borrow_and_update().clone() {
                if n >= pass {
                    return Ok((n, report));
                }
            }
            if self.board().closed {
                return Err(RequestError::Closed);
            }
            if rx.changed().await.is_err() {
                return Err(RequestError::Closed);
            }
        }
    }

    /// A term starts serving the flag root's Root `key` (`None`: the daemon has none); a
    /// request still waiting from the last term is served by its next pass.
    pub fn open(&self, key: Option<ResourceKey>) {
        let mut b = self.board();
        b.closed = false;
        b.handing = false;
        b.key = key;
    }

    /// The term ends (or the daemon stops): no new request; every waiting one is let go.
    pub fn close(&self) {
        self.board().closed = true;
        self.answers.send_modify(|_| {});
    }

    /// Whether [`close`](Self::close) was called (and no term opened since).
    pub fn is_closed(&self) -> bool {
        self.board().closed
    }
}

impl RootPushes {
    /// Given to the controller when it starts: the stream that makes it look at its roots.
    pub(super) fn connect(
        &self,
        store: Store<Root>,
        holds: Holds,
        holder_of: HolderOf,
    ) -> mpsc::UnboundedReceiver<ObjectRef<Root>> {
        // Unbounded: each wake-up is one small reference, sent for a request the HTTP server
        // took (within its limits) or a push's roots, and the controller takes them at once.
        let (tx, rx) = mpsc::unbounded_channel();
        // Set once per daemon: the controller starts once.
        let _ = self.inner.store.set(store);
        let _ = self.inner.wake.set(tx);
        let _ = self.inner.holds.set(holds);
        let _ = self.inner.holder_of.set(holder_of);
        rx
    }

    /// The other replica holding the Lease of `key` and the hooks URL it publishes, as this
    /// replica last saw them; `None` when nobody else holds it or its holder publishes no URL.
    pub fn holder_of(&self, key: &ResourceKey) -> Option<(String, String)> {
        self.inner.holder_of.get().and_then(|h| h(key))
    }

    /// Whether the controller knows the Root `key` and another replica holds its Lease (or
    /// nobody yet): a pass asked for here would not run here (see `super::answer`).
    pub fn held_elsewhere(&self, key: &ResourceKey) -> bool {
        let Some(holds) = self.inner.holds.get() else {
            return false;
        };
        self.root(key).is_some() && !holds(key)
    }

    /// Why `key` was made due (`push`, `api`, a request's reasons), if it was (taken:
    /// the next push makes it due again).
    pub(super) fn take(&self, key: &ResourceKey) -> Vec<String> {
        self.take_timed(key).0
    }

    /// [`take`](Self::take), with when the last of them was asked for (`None`: none was): a
    /// remote listed since then has every push they tell of.
    pub(super) fn take_timed(&self, key: &ResourceKey) -> (Vec<String>, Option<Instant>) {
        match self.pending().remove(key) {
            Some((reasons, at)) => (reasons, Some(at)),
            None => (Vec::new(), None),
        }
    }

    /// Add `why` to the reasons `key` is due for, asked for now.
    fn due(&self, key: &ResourceKey, why: &str) {
        let mut pending = self.pending();
        let (reasons, at) = pending
            .entry(key.clone())
            .or_insert_with(|| (Vec::new(), Instant::now()));
        *at = Instant::now();
        if !reasons.iter().any(|r| r == why) {
            reasons.push(why.to_string());
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<ResourceKey, (Vec<String>, Instant)>> {
        self.inner.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ask for a pass of the Root `key` now (`POST /api/v1/sync?root=ns/name`); `false` when the
    /// controller has not started or has no such Root.
    pub fn wake(&self, key: &ResourceKey) -> bool {
        self.wake_for(key, &["api".to_string()])
    }

    /// [`wake`](Self::wake), the pass saying `reasons` as well.
    pub(super) fn wake_for(&self, key: &ResourceKey, reasons: &[String]) -> bool {
        let known = self.root(key).is_some();
        if known {
            for why in reasons {
                self.due(key, why);
            }
            self.look_at(key);
        }
        known
    }

    /// Make the controller look at the root `key` now (nothing before it starts).
    fn look_at(&self, key: &ResourceKey) {
        if let Some(wake) = self.inner.wake.get() {
            let _ = wake.send(ObjectRef::new(&key.name).within(&key.namespace));
        }
    }

    /// The Root `key` as the controller's cache has it (`None`: not known, or not started).
    pub fn root(&self, key: &ResourceKey) -> Option<Arc<Root>> {
        self.inner
            .store
            .get()?
            .get(&ObjectRef::new(&key.name).within(&key.namespace))
    }

    /// Ask for a pass of the Root `key` on this replica, the pass saying `why` (a chart's drift:
    /// `watch`); `false` when this replica would not pass it (another holds its Lease, or the
    /// controller does not know it): then it is asked through the API server.
    pub fn wake_here(&self, key: &ResourceKey, why: &RequestReason) -> bool {
        !self.held_elsewhere(key) && self.wake_for(key, &[why.to_string()])
    }

    /// The requests of the flag root's Root and their answers.
    pub fn flag(&self) -> &FlagRequests {
        &self.inner.flag
    }

    /// Ask for a pass of the flag root's Root (a request that names no Root): the number of the
    /// pass that will answer it, and what else it needs (see `super::answer::request`). The
    /// Root is woken when this replica passes it; its reasons wait for that pass.
    pub fn request(&self, why: &RequestReason) -> Result<(u64, HandOver), RequestError> {
        let (pass, key) = {
            let mut b = self.inner.flag.board();
            if b.closed {
                return Err(RequestError::Closed);
            }
            b.asked = true;
            (b.next, b.key.clone())
        };
        let Some(key) = key else {
            return Ok((pass, HandOver::None));
        };
        let elsewhere = self.held_elsewhere(&key);
        if !elsewhere {
            // Kept for the Root's next pass even while the controller does not know it yet.
            self.due(&key, &why.to_string());
            if self.wake_for(&key, &[]) {
                return Ok((pass, HandOver::None));
            }
        }
        let mut b = self.inner.flag.board();
        if b.handing || b.next != pass {
            // Joined a hand-over under way, or a pass started since: it answers this request.
            return Ok((pass, HandOver::None));
        }
        b.handing = true;
        Ok(match elsewhere {
            true => (pass, HandOver::Elsewhere(key)),
            false => (pass, HandOver::Unknown(key)),
        })
    }

    /// The reasons given for the flag root's pass about to start, with its number (taken:
    /// requests made from now on are for the next pass).
    pub(super) fn start_flag_pass(&self, key: &ResourceKey) -> (u64, Vec<String>) {
        let pass = self.inner.flag.start();
        (pass, self.take(key))
    }

    /// A push of `pushed_ref` (`None`: the hook did not say) to the repository named by any of
    /// `urls`: the Roots (of `namespaces`, when given) that follow it, those this replica holds
    /// woken, the others to be asked through the API server. None when the controller has not
    /// started.
    pub fn push(
        &self,
        urls: &[String],
        pushed_ref: Option<&str>,
        namespaces: impl Fn(&str) -> bool,
    ) -> Woken {
        let Some(store) = self.inner.store.get() else {
            return Woken::default();
        };
        let pushed: HashSet<String> = urls.iter().filter_map(|u| repository_key(u)).collect();
        if pushed.is_empty() {
            return Woken::default();
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
        let (elsewhere, here): (Vec<ResourceKey>, Vec<ResourceKey>) =
            woken.into_iter().partition(|k| self.held_elsewhere(k));
        for key in &here {
            self.due(key, "push");
            self.look_at(key);
        }
        Woken { here, elsewhere }
    }
}

/// The Roots a push is for: those this replica holds (woken here), and those another replica
/// holds or nobody holds yet (asked through the API server, `answer::ask_through_the_roots`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Woken {
    pub here: Vec<ResourceKey>,
    pub elsewhere: Vec<ResourceKey>,
}

impl Woken {
    pub fn is_empty(&self) -> bool {
        self.here.is_empty() && self.elsewhere.is_empty()
    }

    /// Every Root the push is for, as `namespace/name`, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .here
            .iter()
            .chain(&self.elsewhere)
            .map(ToString::to_string)
            .collect();
        all.sort();
        all
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

    fn report() -> PassReport {
        serde_json::from_value(serde_json::json!({
            "pass": 0, "reasons": [], "startedAt": "2026-01-01T00:00:00Z",
            "durationSeconds": 0.0, "result": "succeeded",
            "summary": {"created": 0, "configured": 0, "unchanged": 0, "pruned": 0, "skipped": 0},
            "changes": []
        }))
        .expect("a report")
    }

    #[tokio::test]
    async fn a_request_is_answered_by_the_next_pass_to_start_not_the_running_one() {
        let pushes = RootPushes::default();
        let flag = pushes.flag();
        // Requests before a pass starts share its number.
        let (a, _) = pushes.request(&RequestReason::Api).unwrap();
        let (b, _) = pushes.request(&RequestReason::Watch).unwrap();
        assert_eq!((a, b), (1, 1));
        let running = flag.start();
        assert_eq!(running, 1);
        assert!(!flag.asked());
        // Two requests while pass 1 runs: both are pass 2's.
        let (c, _) = pushes.request(&RequestReason::Api).unwrap();
        let (d, _) = pushes.request(&RequestReason::Api).unwrap();
        assert_eq!((c, d), (2, 2));
        let waiter = tokio::spawn({
            let pushes = pushes.clone();
            async move { pushes.flag().wait(c).await }
        });
        flag.answer(running, report());
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "pass 1 started before the request");
        let next = flag.start();
        flag.answer(next, report());
        let (n, r) = waiter.await.unwrap().unwrap();
        assert_eq!((n, r.pass), (2, 2));
        // An earlier answer never replaces a later one.
        flag.answer(1, report());
        assert_eq!(flag.last(), 2);
        assert_eq!(flag.start_if_asked(), None, "nobody waits");
    }

    #[tokio::test]
    async fn close_refuses_requests_and_lets_waiters_go() {
        let pushes = RootPushes::default();
        let (pass, _) = pushes.request(&RequestReason::Api).unwrap();
        let waiter = tokio::spawn({
            let pushes = pushes.clone();
            async move { pushes.flag().wait(pass).await }
        });
        tokio::task::yield_now().await;
        pushes.flag().close();
        assert_eq!(
            pushes.request(&RequestReason::Api).unwrap_err(),
            RequestError::Closed
        );
        assert_eq!(waiter.await.unwrap().unwrap_err(), RequestError::Closed);
        pushes.flag().open(None);
        assert!(
            pushes.flag().asked(),
            "a request stays for the next term's pass"
        );
    }

    #[test]
    fn before_the_controller_starts_a_push_wakes_nothing() {
        let pushes = RootPushes::default();
        assert_eq!(
            pushes.push(&["https://h/o/r.git".into()], None, |_| true),
            Woken::default()
        );
    }
}
