//! The dedup window, the per-provider rate limit and the retry backoff. Pure: every method takes
//! the current [`Instant`].

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use super::Event;

/// How long the same event (source, reason, message, revision, commit state) is not sent again
/// to the same provider (Flux's event rate limit is 5 minutes too).
pub const DEDUP_WINDOW: Duration = Duration::from_secs(5 * 60);

/// The most distinct events remembered; when full, the oldest are forgotten first.
pub const DEDUP_CAPACITY: usize = 10_000;

/// Events seen recently, per provider.
#[derive(Debug)]
pub struct Dedup {
    window: Duration,
    seen: HashMap<u64, Instant>,
}

impl Dedup {
    pub fn new(window: Duration) -> Dedup {
        Dedup {
            window,
            seen: HashMap::new(),
        }
    }

    /// `true` the first time `event` is offered for `provider` within the window (it is then
    /// remembered), `false` for a repeat. Commit statuses of different states are different
    /// events; so are events of different revisions.
    pub fn first(&mut self, provider: &str, event: &Event, now: Instant) -> bool {
        let key = key(provider, event);
        if let Some(at) = self.seen.get(&key) {
            if now.saturating_duration_since(*at) < self.window {
                return false;
            }
        }
        if self.seen.len() >= DEDUP_CAPACITY {
            let window = self.window;
            self.seen
                .retain(|_, at| now.saturating_duration_since(*at) < window);
            if self.seen.len() >= DEDUP_CAPACITY {
                // All recent: forget the oldest half rather than grow without bound.
                let mut ages: Vec<Instant> = self.seen.values().copied().collect();
                ages.sort();
                let cut = ages[ages.len() / 2];
                self.seen.retain(|_, at| *at > cut);
            }
        }
        self.seen.insert(key, now);
        true
    }
}

fn key(provider: &str, e: &Event) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    provider.hash(&mut h);
    e.source.hash(&mut h);
    e.reason.hash(&mut h);
    e.message.hash(&mut h);
    e.revision.hash(&mut h);
    e.commit_status.hash(&mut h);
    e.status_only.hash(&mut h);
    h.finish()
}

/// A token bucket: at most `burst` requests at once, refilled at `per_second`.
#[derive(Debug)]
pub struct RateLimit {
    burst: f64,
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl RateLimit {
    pub fn new(burst: u32, per_second: f64, now: Instant) -> RateLimit {
        RateLimit {
            burst: f64::from(burst.max(1)),
            per_second: per_second.max(0.001),
            tokens: f64::from(burst.max(1)),
            at: now,
        }
    }

    /// Take a token: `Duration::ZERO` when one was free, otherwise how long to wait before it
    /// is (the token is taken now either way: the caller sleeps, then sends).
    pub fn take(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.at = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.per_second)
        }
    }
}

/// How a delivery is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Attempts in all (the first one included).
    pub attempts: u32,
    /// The wait after the first failure; doubled after each further one.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for Backoff {
    /// 5 attempts, 1 s, 2 s, 4 s, 8 s apart: given up about 15 s (plus the requests' time)
    /// after the first one.
    fn default() -> Self {
        Backoff {
            attempts: 5,
            first: Duration::from_secs(1),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The wait after failed attempt `attempt` (1-based), or `None` when that was the last.
    pub fn after(&self, attempt: u32) -> Option<Duration> {
        if attempt >= self.attempts {
            return None;
        }
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        Some(self.first.saturating_mul(factor).min(self.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::{CommitState, EventSource, Severity};

    fn ev(message: &str, state: Option<CommitState>) -> Event {
        let mut e = Event::new(
            EventSource::root("ns", "weft"),
            Severity::Info,
            "R",
            message,
        )
        .with_revision(Some("abc1234"));
        e.commit_status = state;
        e
    }

    #[test]
    fn the_same_event_is_sent_once_per_window_and_provider() {
        let t0 = Instant::now();
        let mut d = Dedup::new(Duration::from_secs(300));
        assert!(d.first("ns/p", &ev("m", None), t0));
        assert!(!d.first("ns/p", &ev("m", None), t0 + Duration::from_secs(299)));
        assert!(d.first("ns/other", &ev("m", None), t0), "another provider");
        assert!(d.first("ns/p", &ev("m2", None), t0), "another message");
        assert!(d.first("ns/p", &ev("m", None), t0 + Duration::from_secs(301)));
    }

    #[test]
    fn commit_states_are_not_deduplicated_across_states() {
        let t0 = Instant::now();
        let mut d = Dedup::new(Duration::from_secs(300));
        assert!(d.first("p", &ev("m", Some(CommitState::Pending)), t0));
        assert!(d.first("p", &ev("m", Some(CommitState::Success)), t0));
        assert!(!d.first("p", &ev("m", Some(CommitState::Success)), t0));
        let mut other_rev = ev("m", Some(CommitState::Success));
        other_rev.revision = Some("def5678".into());
        assert!(d.first("p", &other_rev, t0));
    }

    #[test]
    fn dedup_memory_is_bounded() {
        let t0 = Instant::now();
        let mut d = Dedup::new(Duration::from_secs(300));
        for n in 0..DEDUP_CAPACITY + 10 {
            d.first(
                "p",
                &ev(&n.to_string(), None),
                t0 + Duration::from_millis(n as u64),
            );
        }
        assert!(d.seen.len() <= DEDUP_CAPACITY);
    }

    #[test]
    fn the_rate_limit_allows_a_burst_then_spaces_requests() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(3, 2.0, t0);
        for _ in 0..3 {
            assert_eq!(r.take(t0), Duration::ZERO);
        }
        assert_eq!(r.take(t0), Duration::from_millis(500));
        assert_eq!(r.take(t0), Duration::from_millis(1000));
        // Refilled after a while, never above the burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(r.take(later), Duration::ZERO);
        }
        assert!(r.take(later) > Duration::ZERO);
    }

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let b = Backoff::default();
        let waits: Vec<Option<Duration>> = (1..=5).map(|a| b.after(a)).collect();
        assert_eq!(
            waits,
            vec![
                Some(Duration::from_secs(1)),
                Some(Duration::from_secs(2)),
                Some(Duration::from_secs(4)),
                Some(Duration::from_secs(8)),
                None
            ]
        );
        let long = Backoff {
            attempts: 40,
            first: Duration::from_secs(1),
            max: Duration::from_secs(30),
        };
        assert_eq!(long.after(39), Some(Duration::from_secs(30)));
    }
}
