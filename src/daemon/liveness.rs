//! Whether a daemon holding a Lease is alive, judged as client-go's leader election judges it:
//! by watching the Lease change over an interval of *our* monotonic clock, never by comparing its
//! `renewTime` (the holder's wall clock) with ours. A CLI on a laptop 20 s ahead after a sleep
//! would otherwise take a live daemon's Lease for expired (and race it), and one 20 s behind
//! would take a dead daemon's for fresh.
//!
//! The rule: a Lease without a holder (released on shutdown) is not live, at once; a held Lease
//! is live as soon as its record (`resourceVersion`, holder, `renewTime`) changes while we watch
//! (a live holder renews every few seconds), and dead once it stayed the same for its whole
//! `leaseDurationSeconds` (the time a candidate waits before taking it over).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use tokio::time::Instant;

/// The longest a held Lease is watched, whatever its `leaseDurationSeconds` says (a Lease written
/// by hand with a duration of a day must not hang the CLI for a day).
const MAX_OBSERVATION: Duration = Duration::from_secs(120);

/// How often a held Lease is read again while it is watched.
const POLL: Duration = Duration::from_millis(500);

/// A Lease seen held by a live holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveHolder {
    /// The Lease's name.
    pub lease: String,
    /// Its holder's identity.
    pub holder: String,
    /// How long we watched before it changed.
    pub observed: Duration,
}

/// What identifies one write of a Lease: any change means its holder (or a new one) wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    resource_version: Option<String>,
    holder: String,
    renew_time: Option<String>,
}

fn record(lease: &Lease) -> Record {
    let spec = lease.spec.as_ref();
    Record {
        resource_version: lease.resource_version(),
        holder: spec
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default(),
        renew_time: spec
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0.to_string()),
    }
}

/// How long `lease` must stay unchanged before its holder counts as gone.
fn lease_duration(lease: &Lease) -> Duration {
    let secs = lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_duration_seconds)
        .unwrap_or(15)
        .max(1);
    Duration::from_secs(u64::from(secs.unsigned_abs())).min(MAX_OBSERVATION)
}

/// The first of the Leases `read` returns that a live daemon holds, or `None` when none does.
///
/// `read` lists the Leases to judge (called again every [`POLL`]); a Lease that is absent or has
/// no holder returns at once, so the common case (no daemon, or one stopped with SIGTERM) costs
/// one read. A held Lease is watched until it changes (live: returned) or stays the same for its
/// duration (its holder is gone), up to [`MAX_OBSERVATION`].
pub async fn live_holder<F, Fut, E>(mut read: F) -> Result<Option<LiveHolder>, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Vec<Lease>, E>>,
{
    let started = Instant::now();
    // The held Leases still in question: their first record and how long to watch them.
    let mut watched: BTreeMap<String, (Record, Duration)> = read()
        .await?
        .iter()
        .map(|l| (l.name_any(), (record(l), lease_duration(l))))
        .filter(|(_, (r, _))| !r.holder.is_empty())
        .collect();
    for (name, (r, duration)) in &watched {
        tracing::info!(
            lease = %name,
            holder = %r.holder,
            seconds = duration.as_secs(),
            "the Lease is held: watching whether its holder renews it"
        );
    }
    while !watched.is_empty() {
        tokio::time::sleep(POLL).await;
        let now: BTreeMap<String, Record> = read()
            .await?
            .iter()
            .map(|l| (l.name_any(), record(l)))
            .collect();
        let elapsed = started.elapsed();
        let mut done = Vec::new();
        for (name, (first, duration)) in &watched {
            match now.get(name) {
                // Deleted or released: its holder stopped.
                None => done.push(name.clone()),
                Some(r) if r.holder.is_empty() => done.push(name.clone()),
                // Written again while we watched: someone holds it and renews it.
                Some(r) if r != first => {
                    return Ok(Some(LiveHolder {
                        lease: name.clone(),
                        holder: r.holder.clone(),
                        observed: elapsed,
                    }))
                }
                // Unchanged for a whole lease duration: a candidate would take it over now.
                Some(_) if elapsed >= *duration => done.push(name.clone()),
                Some(_) => {}
            }
        }
        for name in done {
            watched.remove(&name);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn lease(name: &str, rv: &str, holder: Option<&str>, duration: i32) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "resourceVersion": rv},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration}
        }))
        .expect("lease")
    }

    /// A reader that returns `script[i]` on its i-th call (the last one after).
    fn scripted(
        script: Vec<Vec<Lease>>,
    ) -> impl FnMut() -> std::future::Ready<Result<Vec<Lease>, ()>> {
        let calls = Arc::new(Mutex::new(0usize));
        move || {
            let mut n = calls.lock().expect("lock");
            let out = script[(*n).min(script.len() - 1)].clone();
            *n += 1;
            std::future::ready(Ok(out))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn no_lease_or_a_released_one_is_not_live_at_once() {
        let started = tokio::time::Instant::now();
        assert_eq!(live_holder(scripted(vec![vec![]])).await, Ok(None));
        let released = vec![lease("weft-leader", "1", None, 15)];
        assert_eq!(live_holder(scripted(vec![released])).await, Ok(None));
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewed_lease_is_live() {
        let script = vec![
            vec![lease("weft-leader", "1", Some("a"), 15)],
            vec![lease("weft-leader", "1", Some("a"), 15)],
            vec![lease("weft-leader", "2", Some("a"), 15)],
        ];
        let live = live_holder(scripted(script)).await.expect("read");
        assert_eq!(live.map(|l| l.holder), Some("a".to_string()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_unchanged_for_its_duration_is_dead() {
        let started = tokio::time::Instant::now();
        let script = vec![vec![lease("weft-leader", "1", Some("a"), 3)]];
        assert_eq!(live_holder(scripted(script)).await, Ok(None));
        assert!(started.elapsed() >= Duration::from_secs(3));
        assert!(started.elapsed() < Duration::from_secs(4));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_released_while_watched_is_dead() {
        let script = vec![
            vec![lease("weft-leader", "1", Some("a"), 15)],
            vec![lease("weft-leader", "2", None, 15)],
        ];
        assert_eq!(live_holder(scripted(script)).await, Ok(None));
    }
}
