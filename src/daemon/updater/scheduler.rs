//! The update scheduler: checks each WeaveCloud when its `updateSchedule` fires (and every one
//! at once on request), and keeps `status.nextUpdateCheck` and `status.agentVersion` current.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::ResourceExt;
use tokio::sync::watch;

use super::select::next_check;
use super::{kube_err, UpdateError, Updater, WcKey};
use crate::api::weavecloud::WeaveCloud;

impl Updater {
    /// The scheduler. Runs until `stop` turns true. Run it on the leader only.
    pub async fn run(&self, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                return;
            }
            let forced = self.state.update_requests().take();
            let wake_at = match self.tick(forced).await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(error = %e, "agent update scheduler: cannot list WeaveClouds");
                    None
                }
            };
            let mut sleep = self.opts.rescan_interval;
            if let Some(at) = wake_at {
                let until = Duration::try_from(at.duration_since(Timestamp::now()))
                    .unwrap_or(Duration::ZERO);
                sleep = sleep.min(until);
            }
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = self.state.update_requests().requested() => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One look at every WeaveCloud: run the checks that are due; the earliest next check.
    pub(super) async fn tick(&self, forced: bool) -> Result<Option<Timestamp>, UpdateError> {
        // With `--watch-namespaces`, one list per namespace: a Weft with a Role in each may not
        // list cluster-wide.
        let mut items = Vec::new();
        let apis = crate::apply::watch::apis::<WeaveCloud>(
            self.state.client(),
            self.state.watch_namespaces().names(),
        );
        for api in apis {
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| kube_err("listing WeaveClouds", e))?;
            items.extend(list.items);
        }
        let mut earliest: Option<Timestamp> = None;
        let mut seen = Vec::new();
        let roots = crate::daemon::weavecloud::trust::roots(
            &self.state,
            &self.opts.pass.weft_namespace,
            &self.opts.pass.root_name,
        );
        let listing = crate::daemon::weavecloud::trust::listing(
            &self.applied,
            self.state.client(),
            &roots,
            &self.opts.pass.weft_namespace,
            self.state.watch_namespaces(),
        )
        .await
        .map_err(|e| UpdateError::Trust(Box::new(e)))?;
        for wc in items {
            if wc.metadata.deletion_timestamp.is_some() {
                continue;
            }
            // Only the operator's WeaveClouds (docs/security.md); the controller says why not.
            let trust = crate::daemon::weavecloud::trust::trust(
                &wc,
                &roots,
                &listing,
                self.state.watch_namespaces(),
            );
            if trust != crate::daemon::weavecloud::trust::Trust::Reconciled {
                continue;
            }
            if !self.state.handles(
                wc.labels(),
                "WeaveCloud",
                &wc.namespace().unwrap_or_default(),
                &wc.name_any(),
            ) {
                // Another shard's (`--shards`): its holder checks it.
                continue;
            }
            if let Some(why) =
                crate::daemon::suspend::why_suspended(self.state.suspension(), &wc.metadata)
            {
                tracing::debug!(weavecloud = %format!("{}/{}", wc.namespace().unwrap_or_default(), wc.name_any()), why, "suspended: no agent update check");
                continue;
            }
            seen.push((wc.namespace().unwrap_or_default(), wc.name_any()));
            if let Some(next) = self.schedule_one(&wc, forced).await {
                earliest = Some(earliest.map_or(next, |e| e.min(next)));
            }
        }
        self.forget_others(&seen);
        Ok(earliest)
    }

    /// Check `wc` if due (or `forced`), and record its next check and the version it runs in
    /// its status. Its next check; `None` without a valid schedule.
    async fn schedule_one(&self, wc: &WeaveCloud, forced: bool) -> Option<Timestamp> {
        let ns = wc.namespace().unwrap_or_default();
        let name = wc.name_any();
        let key = (ns.clone(), name.clone());
        let schedule = wc.spec.general.update_schedule.clone();
        let known = self
            .schedule
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        let next = match known {
            Some((s, at)) if s == schedule => at,
            _ => match next_check(&schedule, Timestamp::now()) {
                Ok(at) => at,
                Err(e) => {
                    tracing::warn!(weavecloud = %format!("{ns}/{name}"), error = %e, "no agent update schedule");
                    return None;
                }
            },
        };
        let checked = forced || next <= Timestamp::now();
        let next = if checked {
            self.check(wc).await;
            next_check(&schedule, Timestamp::now()).ok()?
        } else {
            next
        };
        self.schedule
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (schedule, next));
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
        // The listed copy is current unless a check just ran: skip the read when it agrees.
        let status = wc.status.clone().unwrap_or_default();
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

    /// Forget WeaveClouds that are gone (and their metrics).
    fn forget_others(&self, seen: &[WcKey]) {
        self.schedule
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k, _| seen.contains(k));
        let gone: Vec<WcKey> = {
            let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
            let gone = versions
                .keys()
                .filter(|k| !seen.contains(k))
                .cloned()
                .collect();
            versions.retain(|k, _| seen.contains(k));
            gone
        };
        for (ns, name) in gone {
            self.state.metrics().set_agent_version(&ns, &name, None);
            self.state.metrics().set_agent_available(&ns, &name, None);
        }
    }
}
