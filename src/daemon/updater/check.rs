//! One update check of one WeaveCloud: read the channel, choose, fetch and verify (a bundle the
//! cache cannot keep is refused), roll out, and roll back when the agents do not become healthy.
//!
//! In the daemon a check runs inside the WeaveCloud's reconcile (kube-runtime runs one per
//! object at a time): nothing else renders, applies or prunes these agents meanwhile, so no lock
//! is taken. The flag root's pass leaves the agents to the controller (`AgentLayer::Excluded`),
//! and a Root object's WeaveClouds, whose passes render their agents, are never checked
//! (`daemon::weavecloud::trust`).

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use tracing::Instrument;

use super::select::{select, still_wanted};
use super::{
    kube_err, ActiveBundle, RolloutError, UpdateError, UpdateOutcome, UpdateReport, Updater,
    BUILTIN_SOURCE, EVENT_CHECK_FAILED, EVENT_REFUSED, EVENT_ROLLED_BACK, EVENT_UPDATED,
    REASON_ROLLED_BACK,
};
use crate::api::conditions::{set_condition, Condition, ConditionStatus, READY};
use crate::api::weavecloud::WeaveCloud;
use crate::daemon::status::now_rfc3339;
use crate::daemon::EngineRun;
use crate::load::parse_version_range;
use crate::render::bundle::Bundle;
use crate::render::weavecloud::{render_agents, AgentInputs};
use crate::render::DesiredSet;
use crate::source::channel::{ChannelEntry, ChannelSource};

/// What the channel offers one WeaveCloud.
struct Candidates {
    range: Option<semver::VersionReq>,
    /// `None`: no channel, the built-in bundle is the only candidate.
    source: Option<ChannelSource>,
    entries: Vec<ChannelEntry>,
}

/// One check in progress: the WeaveCloud and what the report needs.
struct Check<'a> {
    wc: &'a WeaveCloud,
    ns: String,
    name: String,
}

impl Check<'_> {
    fn report(
        &self,
        outcome: UpdateOutcome,
        current: &semver::Version,
        available: Option<String>,
    ) -> UpdateReport {
        UpdateReport {
            namespace: self.ns.clone(),
            name: self.name.clone(),
            current: current.to_string(),
            available,
            outcome,
        }
    }
}

impl Updater {
    /// Run one update check of `wc` now (whatever its schedule), and record the result in its
    /// status, events, metrics and the daemon status.
    pub async fn check(&self, wc: &WeaveCloud) -> UpdateReport {
        let _one_at_a_time = self.running.lock().await;
        let ns = wc.namespace().unwrap_or_default();
        let name = wc.name_any();
        let span = tracing::info_span!("agent_update", weavecloud = %format!("{ns}/{name}"));
        let check = Check {
            wc,
            ns: ns.clone(),
            name: name.clone(),
        };
        let report = match self.check_inner(&check).instrument(span).await {
            Ok(r) => r,
            Err(e) => {
                let current = self
                    .state
                    .bundles()
                    .active(&ns, &name)
                    .await
                    .map(|a| a.version().to_string())
                    .unwrap_or_default();
                UpdateReport {
                    namespace: ns.clone(),
                    name: name.clone(),
                    current,
                    available: None,
                    outcome: UpdateOutcome::Failed {
                        reason: e.to_string(),
                    },
                }
            }
        };
        match &report.outcome {
            UpdateOutcome::Failed { reason } => {
                tracing::warn!(%reason, "agent update check failed");
                self.event(wc, EventType::Warning, EVENT_CHECK_FAILED, reason.clone())
                    .await;
            }
            other => {
                tracing::info!(outcome = ?other, current = %report.current, "agent update check done")
            }
        }
        let available = report.available.clone();
        let current = report.current.clone();
        self.record_versions(&ns, &name, |v| {
            v.current = Some(current);
            if available.is_some() {
                v.available = available;
            }
        });
        report
    }

    async fn check_inner(&self, check: &Check<'_>) -> Result<UpdateReport, UpdateError> {
        let (wc, ns, name) = (check.wc, check.ns.as_str(), check.name.as_str());
        let candidates = self.candidates(wc).await?;
        let previous = self.state.bundles().active(ns, name).await?;
        let status = wc.status.clone().unwrap_or_default();
        let selection = select(
            &candidates.entries,
            candidates.range.as_ref(),
            &status.bad_versions,
            previous.version(),
        );
        let available = selection.available.map(|e| e.version.to_string());
        self.patch_status(wc, |s| s.available_version = available.clone())
            .await?;
        if !wc.spec.general.auto_update {
            let outcome = UpdateOutcome::AutoUpdateOff;
            return Ok(check.report(outcome, previous.version(), available));
        }
        let Some(target) = selection.target else {
            return Ok(check.report(UpdateOutcome::UpToDate, previous.version(), available));
        };
        // Fetch and verify; a refusal changes nothing.
        let candidate = match &candidates.source {
            None => ActiveBundle::builtin()?,
            Some(source) => match self.fetch_candidate(source, target).await {
                Ok(c) => c,
                Err(e) => {
                    let reason = e.to_string();
                    let note = format!("agent bundle {} refused: {reason}", target.version);
                    self.event(wc, EventType::Warning, EVENT_REFUSED, note)
                        .await;
                    let version = target.version.to_string();
                    let outcome = UpdateOutcome::Refused { version, reason };
                    return Ok(check.report(outcome, previous.version(), available));
                }
            },
        };
        // Render from the WeaveCloud as it is now, not from the copy the check started from: it
        // may have been edited or deleted while the channel and the bundle were fetched.
        let live = self.live_weavecloud(ns, name).await?;
        if !still_wanted(wc, &live, &target.version) {
            return Err(UpdateError::Superseded {
                version: target.version.clone(),
            });
        }
        let wc = &live;
        let inputs = self.agent_inputs(wc, &previous.bundle).await?;
        let from = previous.version().to_string();
        let to = candidate.version().to_string();
        tracing::info!(%from, %to, "updating agents");
        // The WeaveCloud controller renders with the active bundle: switch it first, so that a
        // reconcile right after the rollout does not undo it.
        self.state.bundles().set_memory(ns, name, candidate.clone());
        match self.roll_out(wc, &candidate.bundle, &inputs).await {
            Ok(()) => {
                self.roll_forward(wc, &from, &candidate).await?;
                let outcome = UpdateOutcome::Updated { from, to };
                Ok(check.report(outcome, candidate.version(), available))
            }
            Err(failure) => {
                tracing::warn!(%from, %to, reason = %failure, "agents not healthy; rolling back");
                let (message, available_after) = self
                    .roll_back(
                        wc,
                        &previous,
                        &candidate.bundle,
                        &inputs,
                        &candidates,
                        &to,
                        &failure,
                    )
                    .await?;
                let outcome = UpdateOutcome::RolledBack {
                    from: to,
                    to: from,
                    reason: message,
                };
                Ok(check.report(outcome, previous.version(), available_after))
            }
        }
    }

    /// The version range and the channel's bundles (or the built-in one without a channel).
    async fn candidates(&self, wc: &WeaveCloud) -> Result<Candidates, UpdateError> {
        let general = &wc.spec.general;
        let range = general
            .agent_version
            .as_deref()
            .filter(|r| !r.trim().is_empty())
            .map(|r| {
                parse_version_range(r).map_err(|e| UpdateError::Range {
                    range: r.to_string(),
                    message: e.to_string(),
                })
            })
            .transpose()?;
        match general
            .wc_poll_url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
        {
            Some(url) => {
                self.opts.allowed_channels.check(url)?;
                let source = self.channel(url)?;
                let channel = source.fetch_index().await?;
                Ok(Candidates {
                    range,
                    source: Some(source),
                    entries: channel.bundles,
                })
            }
            None => {
                let builtin = ActiveBundle::builtin()?;
                Ok(Candidates {
                    range,
                    source: None,
                    entries: vec![ChannelEntry {
                        version: builtin.version().clone(),
                        url: BUILTIN_SOURCE.to_string(),
                        sha256: String::new(),
                    }],
                })
            }
        }
    }

    /// The update from `from` is healthy: keep the bundle, end a rollback's `Ready=False`, say
    /// so.
    async fn roll_forward(
        &self,
        wc: &WeaveCloud,
        from: &str,
        candidate: &ActiveBundle,
    ) -> Result<(), UpdateError> {
        let ns = wc.namespace().unwrap_or_default();
        let name = wc.name_any();
        let to = candidate.version().to_string();
        self.state.bundles().persist(&ns, &name, candidate).await?;
        let now = now_rfc3339();
        let generation = wc.metadata.generation;
        let message = format!("agents updated from bundle {from} to {to} and healthy");
        self.patch_status(wc, |s| {
            s.agent_version = Some(to.clone());
            // Ends a rollback's `Ready=False` (see `held_rollback`).
            let mut c = Condition::new(READY, ConditionStatus::True, EVENT_UPDATED, message);
            c.observed_generation = generation;
            set_condition(&mut s.conditions, c, &now);
        })
        .await?;
        let note = format!("agents updated from bundle {from} to {to}");
        self.event(wc, EventType::Normal, EVENT_UPDATED, note).await;
        Ok(())
    }

    /// The update is not healthy: roll back to `previous`, mark `bad` bad, hold `Ready=False`.
    /// Returns the rollback's message and what is available after it.
    #[allow(clippy::too_many_arguments)]
    async fn roll_back(
        &self,
        wc: &WeaveCloud,
        previous: &ActiveBundle,
        candidate: &Bundle,
        inputs: &AgentInputs,
        candidates: &Candidates,
        bad: &str,
        failure: &RolloutError,
    ) -> Result<(String, Option<String>), UpdateError> {
        let ns = wc.namespace().unwrap_or_default();
        let name = wc.name_any();
        let from = previous.version().to_string();
        self.state
            .bundles()
            .set_memory(&ns, &name, previous.clone());
        let rollback = self.roll_out(wc, &previous.bundle, inputs).await;
        let mut message = format!(
            "agent bundle {bad} did not become healthy: {failure}; rolled back to {from} and marked {bad} bad"
        );
        if let Err(e) = &rollback {
            message.push_str(&format!(
                "; the rollback to {from} is not healthy either: {e}"
            ));
        }
        // Nothing of the refused bundle stays: what it brought that the previous one does not
        // have (a role, a binding …) is deleted, whatever the rollback's prune could judge.
        for problem in self
            .remove_leftovers(wc, candidate, &previous.bundle, inputs)
            .await
        {
            message.push_str(&format!("; {problem}"));
        }
        let status = wc.status.clone().unwrap_or_default();
        let bad_versions = [status.bad_versions.clone(), vec![bad.to_string()]].concat();
        let available_after = select(
            &candidates.entries,
            candidates.range.as_ref(),
            &bad_versions,
            previous.version(),
        )
        .available
        .map(|e| e.version.to_string());
        let mut condition = Condition::new(
            READY,
            ConditionStatus::False,
            REASON_ROLLED_BACK,
            message.clone(),
        );
        condition.observed_generation = wc.metadata.generation;
        let now = now_rfc3339();
        self.patch_status(wc, |s| {
            if !s.bad_versions.iter().any(|b| b == bad) {
                s.bad_versions.push(bad.to_string());
            }
            s.agent_version = Some(from.clone());
            s.available_version = available_after.clone();
            set_condition(&mut s.conditions, condition.clone(), &now);
        })
        .await?;
        self.event(wc, EventType::Warning, EVENT_ROLLED_BACK, message.clone())
            .await;
        Ok((message, available_after))
    }

    /// Delete the objects `candidate` renders for `wc` that `previous` does not, and those both
    /// render that still hold `candidate`'s version after the rollback (its restore was refused:
    /// see `leftovers`), when they are provably this WeaveCloud's (its owner label, set by
    /// Weft's apply). Returns what could not be removed, and the same-named objects removed.
    async fn remove_leftovers(
        &self,
        wc: &WeaveCloud,
        candidate: &Bundle,
        previous: &Bundle,
        inputs: &AgentInputs,
    ) -> Vec<String> {
        let key = |o: &crate::render::DesiredObject| {
            (
                o.api_version().to_string(),
                o.kind().to_string(),
                o.namespace().map(str::to_string),
                o.name().to_string(),
            )
        };
        let (Ok(new), Ok(old)) = (
            render_agents(wc, candidate, inputs),
            render_agents(wc, previous, inputs),
        ) else {
            return Vec::new();
        };
        let kept: std::collections::BTreeMap<_, _> = old
            .objects
            .iter()
            .map(|o| (key(o), o.object.value()))
            .collect();
        let owner =
            crate::pass::agents::owner_of(&wc.namespace().unwrap_or_default(), &wc.name_any());
        let mut problems = Vec::new();
        for object in &new.objects {
            let (api_version, kind, namespace, name) = key(object);
            // A same-named object both bundles render goes only when the rollback left the
            // refused bundle's version in place (it could not write the earlier one back).
            let earlier = kept.get(&(
                api_version.clone(),
                kind.clone(),
                namespace.clone(),
                name.clone(),
            ));
            if earlier.is_some_and(|e| *e == object.object.value()) {
                continue;
            }
            let (group, version) = api_version
                .split_once('/')
                .unwrap_or(("", api_version.as_str()));
            let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                group, version, &kind,
            ));
            let api: Api<kube::api::DynamicObject> = match &namespace {
                Some(ns) => Api::namespaced_with(self.state.client().clone(), ns, &ar),
                None => Api::all_with(self.state.client().clone(), &ar),
            };
            let shown = match &namespace {
                Some(ns) => format!("{kind}/{ns}/{name}"),
                None => format!("{kind}/{name}"),
            };
            let live = match api.get_opt(&name).await {
                Ok(Some(live)) => live,
                Ok(None) => continue,
                Err(e) => {
                    problems.push(format!(
                        "could not read {shown} to remove it: {}",
                        crate::api::kube_error::Text(&e)
                    ));
                    continue;
                }
            };
            let proven = serde_json::to_value(&live)
                .ok()
                .is_some_and(|v| crate::apply::ownership::proof_of_ownership(&v, &owner).is_ok());
            if !proven {
                continue;
            }
            if let Some(earlier) = earlier {
                let live = serde_json::to_value(&live).unwrap_or_default();
                if !super::leftovers::holds_refused_version(&live, &object.object.value(), earlier)
                {
                    continue;
                }
            }
            match api
                .delete(&name, &kube::api::DeleteParams::background())
                .await
            {
                Ok(_) => {
                    tracing::info!(object = %shown, "rollback: removed an object of the refused bundle");
                    if earlier.is_some() {
                        // Said in the message: the agent runs without it until its earlier
                        // version can be applied.
                        problems.push(format!(
                            "removed {shown}, which still held the refused bundle's version (its earlier version could not be written back)"
                        ));
                    }
                }
                Err(e) if crate::apply::is_not_found(&e) => {}
                Err(e) => problems.push(format!(
                    "could not remove {shown}: {}",
                    crate::api::kube_error::Text(&e)
                )),
            }
        }
        problems
    }

    /// WeaveCloud `ns/name` as the API server has it; [`UpdateError::Gone`] when it is deleted
    /// or being deleted.
    async fn live_weavecloud(&self, ns: &str, name: &str) -> Result<WeaveCloud, UpdateError> {
        let api: Api<WeaveCloud> = Api::namespaced(self.state.client().clone(), ns);
        let live = api
            .get_opt(name)
            .await
            .map_err(|e| kube_err(format!("reading WeaveCloud {ns}/{name}"), e))?;
        live.filter(|w| w.metadata.deletion_timestamp.is_none())
            .ok_or_else(|| UpdateError::Gone {
                namespace: ns.to_string(),
                name: name.to_string(),
            })
    }

    /// Download, verify and parse one bundle, and check that the cache can keep it (rolling out
    /// a bundle that cannot be kept would let a restart go back to an older version); the error
    /// says why it is refused.
    async fn fetch_candidate(
        &self,
        source: &ChannelSource,
        entry: &ChannelEntry,
    ) -> Result<ActiveBundle, UpdateError> {
        // A channel names its bundles: each URL passes the policy its channel passed, or a
        // channel could send Weft to a file of its pod or a port the operator never allowed.
        // (A git channel's bundles are paths inside its repository.)
        if entry.url.contains("://") && !self.opts.allowed_channels.allows(&entry.url) {
            return Err(UpdateError::BundleUrlRefused {
                version: entry.version.clone(),
                url: crate::api::redact::redact_url_passwords(&entry.url)
                    .chars()
                    .take(200)
                    .collect(),
                allowed: self.opts.allowed_channels.describe(),
            });
        }
        let fetched = source.fetch_bundle(entry).await?;
        let bundle = Bundle::from_files(fetched.files).map_err(|error| UpdateError::Bundle {
            version: entry.version.to_string(),
            source_url: source.display_url().to_string(),
            error,
        })?;
        if bundle.version != entry.version {
            return Err(UpdateError::VersionMismatch {
                listed: entry.version.clone(),
                actual: bundle.version,
            });
        }
        let candidate = ActiveBundle {
            bundle: Arc::new(bundle),
            archive: Some(Arc::new(fetched.archive)),
            sha256: Some(fetched.sha256),
            source: source.display_url().to_string(),
        };
        candidate.check_cacheable()?;
        Ok(candidate)
    }

    /// What the renderer needs from the cluster, read as `weft sync` and the WeaveCloud
    /// controller read it (one function, so all render the same objects).
    async fn agent_inputs(
        &self,
        wc: &WeaveCloud,
        running: &Bundle,
    ) -> Result<AgentInputs, UpdateError> {
        let legacy = crate::pass::takeover::designated(
            self.opts.pass.launcher_takeover.as_deref(),
            &wc.namespace().unwrap_or_default(),
            &wc.name_any(),
        );
        Ok(crate::pass::agents::inputs(
            self.state.client(),
            &self.opts.pass.weft_namespace,
            wc,
            running,
            legacy,
        )
        .await?
        .0)
    }

    /// Render `wc` with its active bundle, apply, prune and wait for the agents' health: what
    /// the agents should be without an update (a first install, or after a restart).
    pub async fn apply_active(&self, wc: &WeaveCloud) -> Result<semver::Version, UpdateError> {
        let ns = wc.namespace().unwrap_or_default();
        let name = wc.name_any();
        let active = self.state.bundles().active(&ns, &name).await?;
        let inputs = self.agent_inputs(wc, &active.bundle).await?;
        self.roll_out(wc, &active.bundle, &inputs)
            .await
            .map_err(|source| UpdateError::Rollout {
                version: active.version().clone(),
                source: Box::new(source),
            })?;
        Ok(active.version().clone())
    }

    /// Render `wc` with `bundle`, apply, prune and wait for health with the apply engine.
    async fn roll_out(
        &self,
        wc: &WeaveCloud,
        bundle: &Bundle,
        inputs: &AgentInputs,
    ) -> Result<(), RolloutError> {
        let ns = wc.namespace().unwrap_or_default();
        let rendered = render_agents(wc, bundle, inputs)?;
        let owner = crate::pass::agents::owner_of(&ns, &wc.name_any());
        let known: std::collections::BTreeSet<crate::api::ObjectRef> = wc
            .status
            .as_ref()
            .map(|s| s.inventory.iter().cloned().collect())
            .unwrap_or_default();
        crate::pass::agents::check_not_owned_by_another(
            self.state.client(),
            &owner,
            &rendered.objects,
            &known,
        )
        .await?;
        let set = DesiredSet::for_owners(rendered.objects, [owner].into());
        let input = self.opts.rollout_input(&ns);
        let run = crate::daemon::run_engine(
            self.state.client(),
            &set,
            &self.opts.pass,
            &input,
            &|_| {},
            &self.shutdown,
        )
        .await;
        match run {
            EngineRun::Finished(_, None) => Ok(()),
            EngineRun::Finished(_, Some(e)) => Err(e.into()),
            EngineRun::Abandoned => Err(RolloutError::Abandoned),
        }
    }
}
