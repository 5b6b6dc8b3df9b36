//! Replayed webhook deliveries: the ids (and signatures) of verified deliveries seen within a
//! window, in a cache bounded in entries. A delivery seen again within the window is refused.
//!
//! Only digests are stored (SHA-256 of the provider and the id), so an entry is 32 bytes however
//! long the header a client sent, and a cache of 10,000 entries stays under a megabyte.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// How long a delivery id is remembered.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(3600);
/// How many delivery ids are remembered at most; the oldest is forgotten first.
pub const REPLAY_CAPACITY: usize = 10_000;

type Key = [u8; 32];

/// One thing that identifies a delivery: which hook, what kind of id (`delivery`, `signature`),
/// and the value.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryKey<'a> {
    pub hook: &'static str,
    pub kind: &'static str,
    pub value: &'a [u8],
}

impl DeliveryKey<'_> {
    fn digest(&self) -> Key {
        let mut h = Sha256::new();
        for part in [self.hook.as_bytes(), self.kind.as_bytes(), self.value] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        h.finalize().into()
    }
}

/// A delivery was seen before within the window.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("this delivery ({kind}) was already received within the last {}s; a replay is refused", .window.as_secs())]
pub struct Replayed {
    pub kind: &'static str,
    pub window: Duration,
}

#[derive(Default)]
struct Seen {
    at: HashMap<Key, Instant>,
    /// Insertion order, for expiry and eviction (an entry is recorded once: a key seen again
    /// is refused, not refreshed).
    order: VecDeque<(Key, Instant)>,
}

/// Deliveries seen recently, shared by every request.
pub struct ReplayCache {
    seen: Mutex<Seen>,
    window: Duration,
    capacity: usize,
}

impl Default for ReplayCache {
    fn default() -> Self {
        ReplayCache::new(REPLAY_WINDOW, REPLAY_CAPACITY)
    }
}

impl ReplayCache {
    /// A cache that remembers up to `capacity` deliveries for `window` each.
    pub fn new(window: Duration, capacity: usize) -> ReplayCache {
        ReplayCache {
            seen: Mutex::new(Seen::default()),
            window,
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        // A panic while holding this lock cannot leave the maps inconsistent in a way that
        // matters (worst case an entry is in one and not the other): keep serving.
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn expire(&self, seen: &mut Seen, now: Instant) {
        while let Some((key, at)) = seen.order.front().copied() {
            if now.saturating_duration_since(at) < self.window {
                break;
            }
            seen.order.pop_front();
            seen.at.remove(&key);
        }
    }

    /// Whether any of `keys` was seen within the window (a check before reading a body; it
    /// records nothing).
    pub fn check(&self, keys: &[DeliveryKey<'_>], now: Instant) -> Result<(), Replayed> {
        let mut seen = self.lock();
        self.expire(&mut seen, now);
        for k in keys {
            if seen.at.contains_key(&k.digest()) {
                return Err(Replayed {
                    kind: k.kind,
                    window: self.window,
                });
            }
        }
        Ok(())
    }

    /// Record a verified delivery: refused if any of `keys` was seen within the window (checked
    /// and recorded under one lock, so of two concurrent copies exactly one passes).
    pub fn record(&self, keys: &[DeliveryKey<'_>], now: Instant) -> Result<(), Replayed> {
        let digests: Vec<(Key, &'static str)> = keys.iter().map(|k| (k.digest(), k.kind)).collect();
        let mut seen = self.lock();
        self.expire(&mut seen, now);
        if let Some((_, kind)) = digests.iter().find(|(d, _)| seen.at.contains_key(d)) {
            return Err(Replayed {
                kind,
                window: self.window,
            });
        }
        for (d, _) in digests {
            if seen.at.insert(d, now).is_none() {
                seen.order.push_back((d, now));
            }
            while seen.order.len() > self.capacity {
                if let Some((old, _)) = seen.order.pop_front() {
                    seen.at.remove(&old);
                }
            }
        }
        Ok(())
    }

    /// How many deliveries are remembered now.
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(value: &str) -> DeliveryKey<'_> {
        DeliveryKey {
            hook: "github",
            kind: "X-GitHub-Delivery",
            value: value.as_bytes(),
        }
    }

    #[test]
    fn a_delivery_seen_again_within_the_window_is_refused() {
        let cache = ReplayCache::new(Duration::from_secs(3600), 100);
        let t0 = Instant::now();
        assert_eq!(cache.check(&[id("a")], t0), Ok(()));
        assert_eq!(cache.record(&[id("a")], t0), Ok(()));
        let again = cache.record(&[id("a")], t0 + Duration::from_secs(3599));
        assert_eq!(
            again,
            Err(Replayed {
                kind: "X-GitHub-Delivery",
                window: Duration::from_secs(3600)
            })
        );
        assert!(cache
            .check(&[id("a")], t0 + Duration::from_secs(10))
            .is_err());
        assert!(again
            .unwrap_err()
            .to_string()
            .contains("already received within the last 3600s"));
        // After the window it is a new delivery.
        assert_eq!(
            cache.record(&[id("a")], t0 + Duration::from_secs(3600)),
            Ok(())
        );
    }

    #[test]
    fn the_same_id_of_another_hook_is_another_delivery() {
        let cache = ReplayCache::default();
        let now = Instant::now();
        cache.record(&[id("x")], now).unwrap();
        let gitlab = DeliveryKey {
            hook: "gitlab",
            kind: "X-Gitlab-Event-UUID",
            value: b"x",
        };
        assert_eq!(cache.record(&[gitlab], now), Ok(()));
    }

    #[test]
    fn any_known_key_refuses_and_a_refused_delivery_records_nothing() {
        let cache = ReplayCache::default();
        let now = Instant::now();
        let sig = |v: &'static str| DeliveryKey {
            hook: "github",
            kind: "signature",
            value: v.as_bytes(),
        };
        cache.record(&[id("1"), sig("s1")], now).unwrap();
        // A fresh id with a captured signature: still a replay.
        assert_eq!(
            cache.record(&[id("2"), sig("s1")], now).unwrap_err().kind,
            "signature"
        );
        // ... and id "2" was not recorded by the refused attempt.
        assert_eq!(cache.record(&[id("2"), sig("s2")], now), Ok(()));
    }

    #[test]
    fn the_cache_is_bounded_and_forgets_the_oldest_first() {
        let cache = ReplayCache::new(Duration::from_secs(3600), 10_000);
        let now = Instant::now();
        for i in 0..10_500 {
            cache.record(&[id(&i.to_string())], now).unwrap();
        }
        assert_eq!(cache.len(), 10_000);
        // The first 500 were evicted; the rest are remembered.
        assert_eq!(cache.check(&[id("0")], now), Ok(()));
        assert_eq!(cache.check(&[id("499")], now), Ok(()));
        assert!(cache.check(&[id("500")], now).is_err());
        assert!(cache.check(&[id("10499")], now).is_err());
    }

    #[test]
    fn expired_entries_leave_the_cache() {
        let cache = ReplayCache::new(Duration::from_secs(60), 100);
        let t0 = Instant::now();
        for i in 0..50 {
            cache.record(&[id(&i.to_string())], t0).unwrap();
        }
        cache
            .record(&[id("late")], t0 + Duration::from_secs(61))
            .unwrap();
        assert_eq!(cache.len(), 1);
    }
}
