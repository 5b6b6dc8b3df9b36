//! Notifications, in the shape of Flux's notification-controller: components of the daemon
//! [`emit`](Notifier::emit) [`Event`]s; a background dispatcher matches them to `Alert`s, reads
//! each Alert's `Provider` (and its Secret) and sends — asynchronously, deduplicated, rate-limited
//! and retried per provider — so a slow or failing receiver never slows a pass.
//!
//! - [`matching`]: which Alerts want an event (pure);
//! - [`payload`]: a Provider resolved with its Secret, and the HTTP request of each provider
//!   type (pure);
//! - [`limits`]: the dedup window, the per-provider rate limit and the retry backoff (pure);
//! - [`destination_policy`]: where notifications may go (`--allowed-notification-urls`);
//! - [`dispatch`]: the dispatcher (watch stores, per-provider senders, the status check loop);
//! - [`status`]: the Providers' and Alerts' `Ready` and its events, judged the same way by the
//!   daemon and by `weft sync`;
//! - [`root`]: the events of the sync root's passes.
//!
//! Secrets (tokens, HMAC keys, webhook URLs that carry tokens) never appear in a log line, an
//! error, a status or an event: logs name the Provider by `namespace/name`, never its address.
//! See docs/notifications.md.

pub mod destination_policy;
pub mod dispatch;
pub mod limits;
pub mod matching;
pub mod payload;
pub mod root;
pub mod sealed;
pub mod status;

use prometheus_client::metrics::counter::Counter;

use serde::Serialize;
use tokio::sync::mpsc;

pub use crate::api::notification::SourceKind;

/// How many events may wait for the dispatcher; beyond that new events are dropped (with a
/// warning) rather than block or fail the component that emits them.
pub const QUEUE_CAPACITY: usize = 1024;

/// How bad an event is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Error,
}

impl Severity {
    /// `info` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Error => "error",
        }
    }
}

/// The commit status an event sets on its revision (github, gitlab).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommitState {
    Pending,
    Success,
    Failure,
}

/// The object an event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventSource {
    pub kind: SourceKind,
    pub namespace: String,
    pub name: String,
}

impl EventSource {
    /// The sync root `name` (`--root-name`), whose objects live in `namespace` (Weft's).
    pub fn root(namespace: &str, name: &str) -> EventSource {
        EventSource {
            kind: SourceKind::Root,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// A custom resource of `kind` (by its name, e.g. `ArmadaChart`); `None` for a kind Weft
    /// sends no notifications about.
    pub fn resource(kind: &str, namespace: &str, name: &str) -> Option<EventSource> {
        Some(EventSource {
            kind: SourceKind::parse(kind)?,
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

impl std::fmt::Display for EventSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// One thing that happened, as Weft reports it to the outside world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Event {
    pub source: EventSource,
    pub severity: Severity,
    /// One CamelCase word, e.g. `ReconciliationFailed`.
    pub reason: String,
    /// What happened, for a person (URL passwords redacted when the event is made).
    pub message: String,
    /// The git commit the event is about, when known.
    pub revision: Option<String>,
    /// The commit status this event sets on `revision` (github, gitlab).
    pub commit_status: Option<CommitState>,
    /// Only a commit status: webhook and chat providers skip it (the success of a revision that
    /// changed nothing).
    pub status_only: bool,
}

impl Event {
    /// An event of `severity` about `source`.
    pub fn new(
        source: EventSource,
        severity: Severity,
        reason: &str,
        message: impl AsRef<str>,
    ) -> Event {
        Event {
            source,
            severity,
            reason: reason.to_string(),
            message: crate::api::redact::redact_url_passwords(message.as_ref()),
            revision: None,
            commit_status: None,
            status_only: false,
        }
    }

    /// An event made from a Kubernetes event of a custom resource (`warning`: severity error);
    /// `None` for a kind Weft sends no notifications about.
    pub fn from_kube(
        kind: &str,
        namespace: &str,
        name: &str,
        warning: bool,
        reason: &str,
        note: &str,
    ) -> Option<Event> {
        let severity = if warning {
            Severity::Error
        } else {
            Severity::Info
        };
        Some(Event::new(
            EventSource::resource(kind, namespace, name)?,
            severity,
            reason,
            note,
        ))
    }

    /// The same event about `revision`.
    pub fn with_revision(mut self, revision: Option<&str>) -> Event {
        self.revision = revision.map(str::to_string);
        self
    }

    /// The same event, setting commit status `state` on its revision.
    pub fn with_commit_status(mut self, state: CommitState) -> Event {
        self.commit_status = Some(state);
        self
    }
}

/// Counts of what happened to emitted events; clones share the counts (the daemon registers
/// them as metrics).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Dropped because a queue (the dispatcher's, or a provider's) was full.
    pub dropped: Counter,
    /// Requests a provider accepted.
    pub sent: Counter,
    /// Deliveries given up after every retry (or refused for good, or whose Provider cannot be used).
    pub failed: Counter,
}

/// The handle components emit events with. Cheap to clone; [`emit`](Notifier::emit) never
/// blocks and never fails.
#[derive(Clone, Debug)]
pub struct Notifier {
    queue: Option<mpsc::Sender<Event>>,
    counters: Counters,
}

impl Notifier {
    /// A notifier that sends nothing (tests, one-shot commands).
    pub fn disabled() -> Notifier {
        Notifier {
            queue: None,
            counters: Counters::default(),
        }
    }

    /// A notifier counting into `counters`, and the receiving end its dispatcher reads.
    pub fn channel(counters: Counters) -> (Notifier, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        (
            Notifier {
                queue: Some(tx),
                counters,
            },
            rx,
        )
    }

    /// Queue `event` for the dispatcher; when the queue is full it is dropped with a warning.
    pub fn emit(&self, event: Event) {
        let Some(queue) = &self.queue else { return };
        match queue.try_send(event) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(e)) => {
                self.counters.dropped.inc();
                tracing::warn!(source = %e.source, reason = %e.reason, "notification queue full; event dropped");
            }
            // The dispatcher stopped (the daemon is shutting down).
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Queue every event of `events`.
    pub fn emit_all(&self, events: impl IntoIterator<Item = Event>) {
        for e in events {
            self.emit(e);
        }
    }

    /// [`emit`](Self::emit) when there is an event (see [`Event::from_kube`]).
    pub fn emit_some(&self, event: Option<Event>) {
        if let Some(e) = event {
            self.emit(e);
        }
    }

    /// What happened to the emitted events so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: usize) -> Event {
        Event::new(
            EventSource::root("weft-system", "weft"),
            Severity::Info,
            "Test",
            format!("event {n}"),
        )
    }

    #[tokio::test]
    async fn emit_never_blocks_and_drops_when_the_queue_is_full() {
        let (notifier, mut rx) = Notifier::channel(Counters::default());
        for n in 0..QUEUE_CAPACITY + 5 {
            notifier.emit(event(n));
        }
        assert_eq!(notifier.counters().dropped.get(), 5);
        assert_eq!(rx.recv().await.map(|e| e.message), Some("event 0".into()));
        // Room again.
        notifier.emit(event(9999));
        assert_eq!(notifier.counters().dropped.get(), 5);
        drop(rx);
        // A stopped dispatcher: still no error, no panic.
        notifier.emit(event(1));
        Notifier::disabled().emit(event(2));
    }

    #[test]
    fn messages_are_redacted_when_the_event_is_made() {
        let e = Event::new(
            EventSource::root("ns", "weft"),
            Severity::Error,
            "ReconciliationFailed",
            "fetching https://user:hunter2@git.example.com/repo.git: refused",
        );
        assert!(!e.message.contains("hunter2"), "{}", e.message);
    }

    #[test]
    fn kube_events_of_other_kinds_are_not_notifications() {
        assert!(Event::from_kube("ConfigMap", "ns", "x", false, "R", "m").is_none());
        let e = Event::from_kube("ArmadaChart", "ns", "web", true, "WaitFailed", "m").unwrap();
        assert_eq!(e.severity, Severity::Error);
        assert_eq!(e.source.kind, SourceKind::ArmadaChart);
    }
}
