//! The coalescing trigger queue of the sync root: every trigger (poll timer, webhook, sync
//! endpoint, …) asks for "a pass that starts after now". Passes never overlap; all triggers that
//! arrive while a pass runs (or before the worker picks them up) are served by one follow-up pass.
//!
//! A trigger returns a [`Ticket`] naming the pass that will serve it, so `POST /api/v1/sync?wait=true`
//! can wait for exactly that pass (or a later one) and return its result.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{watch, Notify};

/// Why a pass was asked for. Kept in the pass's log line and status.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TriggerReason {
    /// The daemon started.
    Startup,
    /// The `--interval` timer.
    Poll,
    /// A push webhook (`github`, `gitlab`, `generic`).
    Webhook(String),
    /// `POST /api/v1/sync` (e.g. `weft trigger`).
    Api,
    /// `POST /api/v1/sync?forcePrune=true` (`weft trigger --force-prune`): this pass may prune
    /// past the fraction guard.
    ApiForcePrune,
    /// A watch event on an object the sync root owns.
    Watch,
    /// The `weft.io/requested-at` annotation of the root record (`weft trigger`, see
    /// [`super::request`]).
    Requested,
    /// The root was resumed (`weft resume`, `POST /api/v1/resume`).
    Resumed,
}

impl std::fmt::Display for TriggerReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TriggerReason::Startup => f.write_str("startup"),
            TriggerReason::Poll => f.write_str("poll"),
            TriggerReason::Webhook(kind) => write!(f, "webhook/{kind}"),
            TriggerReason::Api => f.write_str("api"),
            TriggerReason::ApiForcePrune => f.write_str("api/force-prune"),
            TriggerReason::Watch => f.write_str("watch"),
            TriggerReason::Requested => f.write_str("requested"),
            TriggerReason::Resumed => f.write_str("resumed"),
        }
    }
}

/// The number of the pass that will serve a trigger. Passes are numbered from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// What the worker gets: the pass number and every reason coalesced into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassTicket {
    pub pass: u64,
    pub reasons: BTreeSet<TriggerReason>,
}

/// Why waiting for a pass ended without a result.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TriggerError {
    #[error("the daemon is shutting down and takes no new work")]
    Closed,
}

struct QueueState {
    /// Reasons waiting for the next pass; empty = nothing pending.
    pending: BTreeSet<TriggerReason>,
    /// The number the next pass will get.
    next_pass: u64,
    closed: bool,
}

/// A coalescing, single-worker trigger queue carrying pass outcomes of type `T` back to waiters.
pub struct TriggerQueue<T> {
    state: Mutex<QueueState>,
    wake_worker: Notify,
    /// The latest finished pass and its outcome.
    done_tx: watch::Sender<Option<(u64, Arc<T>)>>,
}

impl<T> TriggerQueue<T> {
    /// An empty queue; the first pass will be number 1.
    pub fn new() -> Arc<Self> {
        let (done_tx, _) = watch::channel(None);
        Arc::new(TriggerQueue {
            state: Mutex::new(QueueState {
                pending: BTreeSet::new(),
                next_pass: 1,
                closed: false,
            }),
            wake_worker: Notify::new(),
            done_tx,
        })
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A panic while holding this small lock leaves consistent data (plain field writes), so a
        // poisoned lock is safe to keep using.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ask for a pass. Returns the ticket of the pass that will serve it, or `Closed` after shutdown.
    pub fn trigger(&self, reason: TriggerReason) -> Result<Ticket, TriggerError> {
        let ticket = {
            let mut s = self.lock();
            if s.closed {
                return Err(TriggerError::Closed);
            }
            s.pending.insert(reason);
            Ticket(s.next_pass)
        };
        self.wake_worker.notify_one();
        Ok(ticket)
    }

    /// Whether a trigger is waiting for the next pass.
    pub fn has_pending(&self) -> bool {
        !self.lock().pending.is_empty()
    }

    /// For the worker: wait until something is pending and take it all as one pass. `None` once
    /// the queue is closed (pending triggers are then dropped: the daemon is stopping).
    pub async fn next_pass(&self) -> Option<PassTicket> {
        loop {
            // Register interest before checking, so a trigger between the check and the await
            // is not lost (Notify keeps one permit for notify_one anyway).
            let notified = self.wake_worker.notified();
            {
                let mut s = self.lock();
                if s.closed {
                    return None;
                }
                if !s.pending.is_empty() {
                    let reasons = std::mem::take(&mut s.pending);
                    let pass = s.next_pass;
                    s.next_pass += 1;
                    return Some(PassTicket { pass, reasons });
                }
            }
            notified.await;
        }
    }

    /// A number for a pass nobody asked for through the queue (the flag root's Root passing at
    /// its interval), so that the status numbers every pass as the root loop did; `None` while
    /// a request waits for the next number (that pass is the requester's).
    pub fn number_unasked(&self) -> Option<u64> {
        let mut s = self.lock();
        if !s.pending.is_empty() {
            return None;
        }
        let pass = s.next_pass;
        s.next_pass += 1;
        Some(pass)
    }

    /// For the worker: publish the outcome of pass `pass` to its waiters.
    pub fn finish(&self, pass: u64, outcome: T) {
        self.done_tx.send_replace(Some((pass, Arc::new(outcome))));
    }

    /// Stop taking triggers; wake the worker and every waiter.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake_worker.notify_waiters();
        self.wake_worker.notify_one();
        // Waking waiters: they re-check `closed` when the watch value "changes".
        self.done_tx.send_modify(|_| {});
    }

    /// Take work again after [`close`](Self::close) (a new term as leader); what was pending
    /// stays pending.
    pub fn reopen(&self) {
        self.lock().closed = false;
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The latest finished pass number and its outcome.
    pub fn last(&self) -> Option<(u64, Arc<T>)> {
        self.done_tx.borrow().clone()
    }

    /// Wait until the pass of `ticket` (or a later one) has finished and return its outcome.
    pub async fn wait(&self, ticket: Ticket) -> Result<(u64, Arc<T>), TriggerError> {
        let mut rx = self.done_tx.subscribe();
        loop {
            if let Some((pass, outcome)) = rx.borrow_and_update().clone() {
                if pass >= ticket.0 {
                    return Ok((pass, outcome));
                }
            }
            if self.is_closed() {
                return Err(TriggerError::Closed);
            }
            if rx.changed().await.is_err() {
                return Err(TriggerError::Closed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn triggers_before_the_worker_takes_them_coalesce_into_one_pass() {
        let q = TriggerQueue::<u32>::new();
        let a = q.trigger(TriggerReason::Poll).unwrap();
        let b = q.trigger(TriggerReason::Webhook("github".into())).unwrap();
        let c = q.trigger(TriggerReason::Poll).unwrap();
        assert_eq!(a, Ticket(1));
        assert_eq!(a, b);
        assert_eq!(b, c);
        let t = q.next_pass().await.unwrap();
        assert_eq!(t.pass, 1);
        assert_eq!(
            t.reasons.into_iter().collect::<Vec<_>>(),
            vec![TriggerReason::Poll, TriggerReason::Webhook("github".into())]
        );
        assert!(!q.has_pending());
    }

    #[tokio::test]
    async fn triggers_during_a_pass_make_exactly_one_follow_up_pass() {
        let q = TriggerQueue::<&'static str>::new();
        q.trigger(TriggerReason::Startup).unwrap();
        let first = q.next_pass().await.unwrap();
        // While pass 1 "runs", three triggers arrive: they are all for pass 2.
        let tickets: Vec<_> = (0..3)
            .map(|_| q.trigger(TriggerReason::Api).unwrap())
            .collect();
        assert!(tickets.iter().all(|t| *t == Ticket(2)));
        q.finish(first.pass, "one");
        let second = q.next_pass().await.unwrap();
        assert_eq!(second.pass, 2);
        q.finish(second.pass, "two");
        // Nothing more is pending: the worker would block.
        let third = tokio::time::timeout(Duration::from_millis(50), q.next_pass()).await;
        assert!(third.is_err(), "no third pass without a new trigger");
    }

    #[tokio::test]
    async fn a_waiter_gets_the_pass_that_started_after_its_trigger_not_the_running_one() {
        let q = TriggerQueue::<&'static str>::new();
        q.trigger(TriggerReason::Startup).unwrap();
        let running = q.next_pass().await.unwrap();
        let ticket = q.trigger(TriggerReason::Api).unwrap();
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.wait(ticket).await })
        };
        q.finish(running.pass, "stale");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiter.is_finished(),
            "the running pass started before the trigger"
        );
        let next = q.next_pass().await.unwrap();
        q.finish(next.pass, "fresh");
        let (pass, outcome) = waiter.await.unwrap().unwrap();
        assert_eq!(pass, 2);
        assert_eq!(*outcome, "fresh");
    }

    #[tokio::test]
    async fn the_worker_sleeps_until_a_trigger_arrives() {
        let q = TriggerQueue::<()>::new();
        let worker = {
            let q = q.clone();
            tokio::spawn(async move { q.next_pass().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!worker.is_finished());
        q.trigger(TriggerReason::Poll).unwrap();
        let t = tokio::time::timeout(Duration::from_secs(1), worker)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(t.unwrap().pass, 1);
    }

    #[tokio::test]
    async fn close_refuses_new_triggers_and_releases_worker_and_waiters() {
        let q = TriggerQueue::<()>::new();
        let ticket = q.trigger(TriggerReason::Api).unwrap();
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.wait(ticket).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        q.close();
        assert_eq!(q.trigger(TriggerReason::Poll), Err(TriggerError::Closed));
        assert_eq!(q.next_pass().await, None);
        let r = tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.unwrap_err(), TriggerError::Closed);
    }
}
