//! The update step of a WeaveCloud's reconcile: check for an update when
//! `status.nextUpdateCheck` has passed (or when a check was asked for over HTTP), and keep
//! `status.nextUpdateCheck` and `status.agentVersion` current. The reconcile is requeued at the
//! next check, so there is no scheduler: the status says when, and a restart keeps it.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::select::next_check;
use super::{UpdateError, Updater};
use crate::api::weavecloud::WeaveCloud;

/// When the next check of a WeaveCloud on `schedule` is, and whether one is due `now`.
/// `recorded` is its `status.nextUpdateCheck`: kept while `schedule` fires then (a changed
/// schedule starts again from `now`); without one, the first check is the schedule's next time.
pub fn next_and_due(
    schedule: &str,
    recorded: Option<&str>,
    now: Timestamp,
) -> Result<(Timestamp, bool), UpdateError> {
    let fresh = next_check(schedule, now)?;
    let recorded = recorded
        .and_then(|r| r.parse::<Timestamp>().ok())
        .filter(|at| {
            at.checked_sub(SignedDuration::from_secs(1))
                .ok()
                .and_then(|before| next_check(schedule, before).ok())
                == Some(*at)
        });
    Ok(match recorded {
        Some(at) => (at, at <= now),
        None => (fresh, false),
    })
}

impl Updater {
    /// Check `wc` if due (or `forced`), and record its next check and the version it runs in
    /// its status. Its next check (the reconcile requeues then); `None` without a valid
    /// schedule. On the `first` reconcile of `wc` in this process the schedule starts from now
    /// (after a restart the first check is the next occurrence, not an immediate one).
    pub async fn when_due(&self, wc: &WeaveCloud, forced: bool, first: bool) -> Option<Timestamp> {
        let ns = wc.namespace().unwrap_or_default();
        let name = wc.name_any();
        let schedule = wc.spec.general.update_schedule.clone();
        let status = wc.status.clone().unwrap_or_default();
        let recorded = status.next_update_check.as_deref().filter(|_| !first);
        let (next, due) = match next_and_due(&schedule, recorded, Timestamp::now()) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(weavecloud = %format!("{ns}/{name}"), error = %e, "no agent update schedule");
                return None;
            }
        };
        let checked = forced || due;
        let next = if checked {
            self.check(wc).await;
            next_check(&schedule, Timestamp::now()).ok()?
        } else {
            next
        };
        let shown = format!("{next:.0}");
        self.record_versions(&ns, &name, |v| v.next_update_check = Some(shown.clone()));
        // The version it runs: the active bundle (after a check, the check wrote it).
        let running = match self.state.bundles().active(&ns, &name).await {
            Ok(a) => Some(a.version().to_string()),
            Err(e) => {
                tracing::debug!(weavecloud = %format!("{ns}/{name}"), error = %e, "active agent bundle unknown");
                None
            }
        };
        // The reconcile's copy is current unless a check just ran: skip the read when it agrees.
        let agrees = status.next_update_check.as_deref() == Some(shown.as_str())
            && (running.is_none() || status.agent_version == running);
        if checked || !agrees {
            let patched = self
                .patch_status(wc, |s| {
                    s.next_update_check = Some(shown.clone());
                    if running.is_some() {
                        s.agent_version = running.clone();
                    }
                })
                .await;
            if let Err(e) = patched {
                tracing::warn!(weavecloud = %format!("{ns}/{name}"), error = %e, "cannot record nextUpdateCheck");
            }
        }
        Some(next)
    }

    /// Forget a deleted WeaveCloud's versions (and their metrics).
    pub fn forget(&self, ns: &str, name: &str) {
        self.versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(ns.to_string(), name.to_string()));
        self.state.metrics().set_agent_version(ns, name, None);
        self.state.metrics().set_agent_available(ns, name, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> Timestamp {
        text.parse().expect("a time")
    }

    #[test]
    fn the_next_check_is_the_recorded_one_while_the_schedule_fires_then() {
        let now = utc("2026-12-05T10:30:00Z");
        let hourly = "0 * * * *";
        let at = |h: u8, m: u8| utc(&format!("2026-12-05T{h:02}:{m:02}:00Z"));
        // First sight: the schedule's next time, not a check now.
        assert_eq!(next_and_due(hourly, None, now).unwrap(), (at(11, 0), false));
        // Recorded and not yet reached.
        let r = Some("2026-12-05T11:00:00Z");
        assert_eq!(next_and_due(hourly, r, now).unwrap(), (at(11, 0), false));
        // Recorded and passed: due.
        let r = Some("2026-12-05T10:00:00Z");
        assert_eq!(next_and_due(hourly, r, now).unwrap(), (at(10, 0), true));
        // The schedule changed: a recorded time it does not fire at starts again from now.
        let r = Some("2026-12-05T10:00:00Z");
        let yearly = "0 0 1 1 *";
        let next_year = utc("2027-01-01T00:00:00Z");
        assert_eq!(next_and_due(yearly, r, now).unwrap(), (next_year, false));
        // Not a time at all: from now.
        assert_eq!(
            next_and_due(hourly, Some("soon"), now).unwrap(),
            (at(11, 0), false)
        );
        assert!(next_and_due("not cron", None, now).is_err());
    }
}
