//! Weft's Kubernetes events, published in one place: every note is redacted (the password of any
//! URL, see [`crate::api::redact`]) and bounded to [`MAX_EVENT_NOTE`] bytes on a character
//! boundary before it leaves Weft, whichever controller publishes it. Each event is also offered
//! to the notifier (Providers and Alerts), which redacts its message itself and bounds it by its
//! own limits (`notify::limits`).
//!
//! Each event is sealed (`notify::sealed`): its `reportingInstance` carries an HMAC, keyed with
//! the Secret `weft-event-key` in Weft's namespace (made by the first Weft that needs it), over
//! what the event says, so that the UI shows as Weft's only the events Weft wrote, not one a
//! tenant wrote with `reportingComponent: weft`.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};

pub use crate::notify::sealed::read_key;
use crate::notify::sealed::SealedRecorders;

use crate::notify::Notifier;

/// The largest note published, in bytes, the ellipsis of a cut note included. The API server
/// refuses a note longer than 1 kB; events are read by anyone who may read events in the
/// namespace, so a note also never carries more than this of an error's text.
pub const MAX_EVENT_NOTE: usize = 1000;

/// What marks a note that was cut.
const CUT: char = '…';

/// `text` as a note: URL passwords redacted, then at most [`MAX_EVENT_NOTE`] bytes, cut on a
/// character boundary and ended with `…` when it was longer.
pub fn note(text: &str) -> String {
    let mut note = crate::api::redact::redact_url_passwords(text);
    if note.len() > MAX_EVENT_NOTE {
        let mut end = MAX_EVENT_NOTE - CUT.len_utf8();
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push(CUT);
    }
    note
}

/// Publishes Weft's events. Cheap to clone.
#[derive(Clone)]
pub struct EventPublisher {
    recorders: SealedRecorders,
    notifier: Notifier,
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventPublisher").finish_non_exhaustive()
    }
}

/// One event: what happened to the object, as the recorder files it.
#[derive(Clone, Debug)]
pub struct Note<'a> {
    /// A `Warning` (and a notification of severity error) rather than `Normal`.
    pub warning: bool,
    pub reason: &'a str,
    /// What Weft was doing (`Deploy`, `Reconcile`, `AgentUpdate`).
    pub action: &'a str,
    pub text: &'a str,
    /// A related object: the recorder keeps one event series per regarding/related pair and
    /// reason, so events of one reason about different objects need it.
    pub related: Option<ObjectReference>,
}

impl EventPublisher {
    /// Events as the controller `weft` (instance: the pod's name), notifications through
    /// `notifier`.
    pub fn new(client: Client, notifier: Notifier) -> EventPublisher {
        EventPublisher {
            recorders: SealedRecorders::new(client),
            notifier,
        }
    }

    /// The same publisher, sealing its events with the key of Weft's namespace `namespace`
    /// (`notify::sealed`).
    pub fn sealed_in(mut self, namespace: &str) -> EventPublisher {
        self.recorders = self.recorders.sealed_in(namespace);
        self
    }

    /// The same publisher (its seal, its notifier), writing events with `client`.
    pub fn with_client(&self, client: Client) -> EventPublisher {
        EventPublisher {
            recorders: self.recorders.with_client(client),
            notifier: self.notifier.clone(),
        }
    }

    /// The same publisher, notifying through `notifier`.
    pub fn with_notifier(mut self, notifier: Notifier) -> EventPublisher {
        self.notifier = notifier;
        self
    }

    /// The notifier events are offered to.
    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// Publish `event` about `obj` and offer it to the notifier. A failure to publish is logged;
    /// it never fails the caller.
    pub async fn publish<K: Resource<DynamicType = ()>>(&self, obj: &K, event: Note<'_>) {
        let kind = K::kind(&());
        let namespace = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        self.notifier.emit_some(crate::notify::Event::from_kube(
            &kind,
            &namespace,
            &name,
            event.warning,
            event.reason,
            event.text,
        ));
        let e = Event {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: event.reason.to_string(),
            note: Some(note(event.text)),
            action: event.action.to_string(),
            secondary: event.related,
        };
        if let Err(err) = self.recorders.publish(&e, &obj.object_ref(&())).await {
            tracing::warn!(kind = %kind, object = %format!("{namespace}/{name}"), reason = event.reason, error = %crate::api::kube_error::Text(&err), "cannot publish event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_note_is_kept_whole() {
        assert_eq!(note("chart deployed"), "chart deployed");
        let exactly = "x".repeat(MAX_EVENT_NOTE);
        assert_eq!(note(&exactly), exactly);
    }

    #[test]
    fn a_long_note_is_cut_to_the_bound_on_a_character_boundary() {
        // ASCII: cut to the bound, the ellipsis included.
        let long = "y".repeat(10 * MAX_EVENT_NOTE);
        let n = note(&long);
        assert_eq!(n.len(), MAX_EVENT_NOTE);
        assert!(n.ends_with(CUT));
        // Four-byte characters (1,000 of them are 4,000 bytes): never more than the bound in
        // bytes, never half a character.
        let wide = "𝄞".repeat(MAX_EVENT_NOTE);
        let n = note(&wide);
        assert!(n.len() <= MAX_EVENT_NOTE, "{}", n.len());
        assert!(n.len() > MAX_EVENT_NOTE - 4 - CUT.len_utf8(), "{}", n.len());
        assert!(n.trim_end_matches(CUT).chars().all(|c| c == '𝄞'));
        // Two-byte characters at an odd offset.
        let mixed = format!("a{}", "é".repeat(MAX_EVENT_NOTE));
        let n = note(&mixed);
        assert!(n.len() <= MAX_EVENT_NOTE && n.ends_with(CUT), "{}", n.len());
    }

    #[test]
    fn a_note_is_redacted_before_it_is_cut() {
        let secret = "https://deploy:hunter2@git.example.com/org/repo.git";
        let n = note(&format!("cannot fetch {secret}: denied"));
        assert_eq!(
            n,
            "cannot fetch https://deploy:***@git.example.com/org/repo.git: denied"
        );
        // A password past the bound is not half-shown either: redaction comes first.
        let late = format!("{} https://u:topsecretpassword@h/x", "z".repeat(960));
        let n = note(&late);
        assert!(!n.contains("topsec"), "{n}");
        assert!(n.len() <= MAX_EVENT_NOTE);
        // A token used as the user name of an https URL.
        assert!(!note("https://ghp_abcdef@github.com/o/r").contains("ghp_"));
    }
}
