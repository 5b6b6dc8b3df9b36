//! The waits of the engine run: one wave (each owner by its own rule, the rest by the readiness
//! table), and any objects by the readiness table and `--timeout`.

use super::super::{PassError, Progress};
use super::Engine;
use crate::api::ObjectRef;
use crate::apply::apply_policy::WaitRule;
use crate::apply::plan::PlannedObject;
use crate::apply::wait::{self, WaitOptions, WaitTarget};
use crate::apply::ApplyError;
use crate::render::Owner;

impl Engine<'_> {
    /// Whether the API server refused `p` in this pass (it is not waited for).
    fn was_refused(&self, p: &PlannedObject) -> bool {
        self.refused.iter().any(|e| e.is_about(&p.object_ref))
    }

    /// The last wave's objects its wait after the prune reads: those of a kind with a readiness
    /// rule and those of an owner with a wait rule. The rest (all of a root of ConfigMaps) is
    /// let go before the prune, the pass's memory peak.
    pub(super) fn to_wait_for(&self, mut last: Vec<PlannedObject>) -> Vec<PlannedObject> {
        last.retain(|p| {
            self.policy.waits_for(&p.object_ref.kind)
                || self.policy.waits.contains_key(&p.desired.owner)
        });
        last.shrink_to_fit();
        last
    }

    /// Wait for one wave: objects of an owner with a wait rule by that rule (all such owners of
    /// the wave at once, each with its own timeout), every other object by the readiness table
    /// and `--timeout`. A failed owner whose rule says to continue goes to `deferred`; any other
    /// failure is returned and stops the pass.
    pub(super) async fn wait_wave(&mut self, objects: &[PlannedObject]) -> Result<(), PassError> {
        if self.input.dry_run {
            return Ok(());
        }
        // What the API server refused does not exist: nothing to wait for.
        let kept: Vec<PlannedObject>;
        let objects = if objects.iter().any(|p| self.was_refused(p)) {
            kept = objects
                .iter()
                .filter(|p| !self.was_refused(p))
                .cloned()
                .collect();
            &kept[..]
        } else {
            objects
        };
        let ruled: Vec<(&Owner, &WaitRule, Vec<WaitTarget>)> = Self::owners_of(objects)
            .into_iter()
            .filter_map(|owner| {
                let rule = self.policy.waits.get(owner)?;
                // The owner's objects the rule's selectors cannot name, that have a status.
                let extra = objects
                    .iter()
                    .filter(|p| &p.desired.owner == owner)
                    .filter(|p| {
                        let kind = &p.object_ref.kind;
                        self.policy.waits_for(kind) && !crate::apply::readiness::selectable(kind)
                    })
                    .map(wait_target)
                    .collect();
                Some((owner, rule, extra))
            })
            .collect();
        let plain: Vec<&PlannedObject> = objects
            .iter()
            .filter(|p| !self.policy.waits.contains_key(&p.desired.owner))
            .collect();
        if !ruled.is_empty() {
            let subjects: Vec<&str> = ruled.iter().map(|(_, r, _)| r.subject.as_str()).collect();
            (self.observer)(Progress::Phase {
                message: format!("waiting for {}", subjects.join(", ")),
                objects: 0,
            });
        }
        let observer = self.observer;
        let client = self.client;
        let poll = self.settings.poll_interval;
        let on_ready = |r: &ObjectRef| observer(Progress::Ready(r));
        let on_pending = |p: &[(ObjectRef, String)]| observer(Progress::Waiting(p));
        let owner_results = futures::future::join_all(ruled.iter().map(|(_, rule, extra)| {
            wait::wait_owner_reporting(client, rule, extra, poll, &on_ready, &on_pending)
        }));
        let (owner_results, plain_result) = futures::join!(owner_results, self.wait(plain));
        let mut stop = Vec::new();
        if let Err(e) = plain_result {
            stop.push(PassError::Apply(e));
        }
        let mut deferred = Vec::new();
        for ((owner, rule, _), r) in ruled.iter().zip(owner_results) {
            let Err(why) = r else { continue };
            let e = (self.describe_failure)(owner, rule, why);
            if rule.continue_on_failure {
                deferred.push(e);
            } else {
                stop.push(e);
            }
        }
        self.deferred.append(&mut deferred);
        PassError::from_list(stop).map_or(Ok(()), Err)
    }

    /// Wait for `objects` by the readiness table and `--timeout`.
    pub(super) async fn wait<'p>(
        &self,
        objects: impl IntoIterator<Item = &'p PlannedObject>,
    ) -> Result<(), ApplyError> {
        if self.input.dry_run {
            return Ok(());
        }
        let targets: Vec<WaitTarget> = objects
            .into_iter()
            .filter(|p| self.policy.waits_for(&p.object_ref.kind) && !self.was_refused(p))
            .map(wait_target)
            .collect();
        if targets.is_empty() {
            return Ok(());
        }
        (self.observer)(Progress::Phase {
            message: format!("waiting for {} object(s) to become ready", targets.len()),
            objects: targets.len(),
        });
        let wait_opts = WaitOptions {
            timeout: self.timeout(),
            poll_interval: self.settings.poll_interval,
            concurrency: self.settings.concurrency,
        };
        let observer = self.observer;
        wait::wait_ready_reporting(
            self.client,
            &targets,
            &wait_opts,
            &|r| observer(Progress::Ready(r)),
            &|p| observer(Progress::Waiting(p)),
        )
        .await
    }
}

fn wait_target(p: &PlannedObject) -> WaitTarget {
    WaitTarget {
        object: p.object_ref.clone(),
        resource: p.resource.clone(),
        namespaced: p.namespaced,
    }
}
