//! The sync-root reconciler: takes passes from the [`TriggerQueue`], one at a time, and runs
//! fetch → load → render → apply → prune → wait for the repository's own documents (the sync
//! layer). The custom resources' children are left to their controllers.
//!
//! The fetch first asks the remote for its head (cheap: no objects transferred); when it is
//! unchanged, load and render are skipped and the last rendered set is applied again, which
//! writes nothing unless something drifted.

use std::sync::Arc;
use std::time::Instant;

pub(super) mod conflict;
mod report;
mod source;

use report::{count_early, log_outcome, suspended_message};
pub use report::{fill_changes, summary_of};
pub use source::{source_condition, OpenError, RootError, RootSource, SOURCE_READY};

use super::armada::status as armada_status;
use super::record::{self, PassEntry, PassRecord, RootOutcome, RootRecord};
use super::shards::RootShard;
use super::shutdown::Shutdown;
use super::state::DaemonState;
use super::status::{now_rfc3339, ChangeSummary, PassFailure, PassReport, PassResultKind};
use super::trigger::{PassTicket, TriggerReason};
use crate::api::conditions::set_condition;
use crate::api::redact::redact_url_passwords;
use crate::apply::changeset::Action;
use crate::pass::{driver, PassError, PassInput, PassSettings, Progress, ShardPass};
use crate::render::AgentLayer;
use crate::render::DesiredSet;
use crate::source::Snapshot;

/// The rendered sync layer of one revision, kept so an unchanged head skips load and render.
struct Rendered {
    snapshot: Arc<Snapshot>,
    /// This shard's part (the whole render when the root is not sharded).
    set: Arc<DesiredSet>,
    /// The other shards' part.
    elsewhere: Arc<DesiredSet>,
}

/// The sync-root loop.
pub struct RootReconciler {
    state: DaemonState,
    source: RootSource,
    /// The daemon's pass settings (`root_name` is this shard's root).
    settings: Arc<PassSettings>,
    /// When a running pass is abandoned after a stop request.
    shutdown: Shutdown,
    rendered: Option<Rendered>,
    /// The revision of the last successful render: what a failed pass reports as in effect,
    /// also after the pass let that render go for a new one.
    applied_revision: Option<String>,
    /// The shard this loop applies; `None`: the whole root (no retired shards looked for).
    shard: Option<RootShard>,
}

/// What a pass ends with: its report, and the revision it fetched new, if any (notifications).
pub struct PassDone {
    pub report: PassReport,
    pub fetched: Option<String>,
}

/// What the fetch and render of one pass gave.
struct Fetched {
    /// The head was unchanged: the cached render is applied again.
    unchanged: bool,
    /// What the pass applied ahead of its full render (see [`super::early`]).
    early: Vec<crate::apply::changeset::Change>,
}

/// How a pass's body ended: stopped before apply (it logged why), or applied, with the
/// conflicts with another root that its engine run found (a value of this pass, never kept).
enum Ended {
    Stopped,
    Applied(conflict::Conflicts),
}

impl Ended {
    fn conflicts(&self) -> Option<&conflict::Conflicts> {
        match self {
            Ended::Applied(c) if !c.is_empty() => Some(c),
            _ => None,
        }
    }
}

impl RootReconciler {
    pub fn new(
        state: DaemonState,
        source: RootSource,
        settings: Arc<PassSettings>,
        shutdown: Shutdown,
    ) -> Self {
        RootReconciler {
            state,
            source,
            settings,
            shutdown,
            rendered: None,
            applied_revision: None,
            shard: None,
        }
    }

    /// Apply only `shard`'s part of the root (the daemon; `settings.root_name` is already the
    /// shard's root name), and, as shard 0, finish retired shards.
    pub fn sharded(mut self, shard: RootShard) -> Self {
        self.shard = Some(shard);
        self
    }

    /// Run passes until the queue is closed. A pass that is running when the daemon is asked to
    /// stop gets the shutdown grace period to finish, then it is abandoned.
    pub async fn run(mut self) {
        while let Some(ticket) = self.state.queue().next_pass().await {
            let PassDone { report, fetched } = self.run_pass(ticket).await;
            let outcome = report.notification(fetched.as_deref());
            self.state
                .notifier()
                .emit_all(crate::notify::root::finished(&self.notified(), &outcome));
            self.state.metrics().observe_pass(&report);
            let o = &self.settings;
            self.state
                .metrics()
                .observe_root_pass(&o.weft_namespace, &o.root_name, &report);
            // Kept bounded from here on (status, sync answers): the full list of changes was
            // for the notifications and metrics above.
            let report = report.bounded();
            self.state.update_status(|s| {
                if report.succeeded() {
                    s.revision = report.revision.clone().or(s.revision.take());
                    s.last_success_at = Some(now_rfc3339());
                }
                s.last_pass = Some(report.clone());
            });
            let pass = report.pass;
            self.state.queue().finish(pass, report);
        }
    }

    /// One pass: fetch, and if new, load and render; then apply, prune and wait.
    pub async fn run_pass(&mut self, ticket: PassTicket) -> PassDone {
        let reasons: Vec<String> = ticket
            .reasons
            .iter()
            .map(TriggerReason::to_string)
            .collect();
        tracing::info!(pass = ticket.pass, reasons = %reasons.join(","), "pass started");
        let start = Instant::now();
        let mut report = PassReport {
            pass: ticket.pass,
            reasons,
            started_at: now_rfc3339(),
            duration_seconds: 0.0,
            revision: None,
            result: PassResultKind::Failed,
            error: None,
            head_unchanged: false,
            summary: ChangeSummary::default(),
            changes: Vec::new(),
            changes_omitted: 0,
        };
        let mut fetched = None;
        let ended = self
            .pass_body(ticket, &mut report, &mut fetched, start)
            .await;
        // The one exit of every pass.
        report.duration_seconds = start.elapsed().as_secs_f64();
        if let Ended::Applied(_) = ended {
            log_outcome(&report);
        }
        PassDone { report, fetched }
    }

    /// The pass without its bookkeeping: read the record; unless suspended, run the pass and
    /// record its outcome.
    async fn pass_body(
        &mut self,
        ticket: PassTicket,
        report: &mut PassReport,
        fetched: &mut Option<String>,
        started: Instant,
    ) -> Ended {
        let record = match self.read_record().await {
            Ok(record) => record,
            Err(e) => {
                let text = format!(
                    "cannot read the root record (is the root suspended?): {}",
                    crate::api::kube_error::Text(&e)
                );
                tracing::warn!(pass = ticket.pass, error = %text, "pass failed before fetch; nothing was applied or pruned");
                report.error = Some(PassFailure::new("Failed", text));
                return Ended::Stopped;
            }
        };
        let (ns, own) = (&self.settings.weft_namespace, &self.settings.root_name);
        let metrics = self.state.metrics();
        metrics.set_root_suspended(ns, own, record.suspension.suspended);
        if let Some(suspension) = record.suspension.suspended.then_some(&record.suspension) {
            // The root stays as ready as its last pass left it (what `weft get root` shows).
            metrics.set_root_ready(ns, own, record.outcome.as_ref().map(|o| o.ready));
            tracing::info!(
                pass = ticket.pass,
                "the root is suspended; nothing was fetched, applied or pruned"
            );
            report.result = PassResultKind::Suspended;
            report.error = Some(PassFailure::new("Suspended", suspended_message(suspension)));
            return Ended::Stopped;
        }
        let ended = self.run_unsuspended(ticket, report, fetched).await;
        self.record_outcome(&record, report, started, ended.conflicts())
            .await;
        if let Some(conflicts) = ended.conflicts() {
            let o = &self.settings;
            conflict::publish(&self.state, &o.weft_namespace, &o.root_name, conflicts).await;
        }
        // What the pass allocated (a render, its plan, pages of listed metadata) is freed by now.
        crate::mem::release_free_memory();
        ended
    }

    /// The pass of a root that is not suspended.
    async fn run_unsuspended(
        &mut self,
        ticket: PassTicket,
        report: &mut PassReport,
        fetched: &mut Option<String>,
    ) -> Ended {
        let early = match self.prepare(fetched).await {
            Ok(f) => {
                report.head_unchanged = f.unchanged;
                f.early
            }
            Err(e) => {
                // Status and logs never show a password of a URL inside an error.
                let text = redact_url_passwords(&e.to_string());
                tracing::warn!(pass = ticket.pass, error = %text, "pass failed before apply; nothing was applied or pruned");
                report.error = Some(PassFailure::new("Failed", text));
                report.revision = self.applied_revision.clone();
                return Ended::Stopped;
            }
        };
        let Some(rendered) = &self.rendered else {
            report.error = Some(PassFailure::new("Failed", "nothing was fetched yet"));
            return Ended::Stopped;
        };
        report.revision = rendered
            .snapshot
            .revision
            .clone()
            .or(Some("local".to_string()));
        if self.shutdown.is_stopping() {
            report.result = PassResultKind::Abandoned;
            report.error = Some(PassFailure::new(
                "Abandoned",
                "the daemon is stopping; the pass was abandoned before apply",
            ));
            return Ended::Stopped;
        }
        let set = rendered.set.clone();
        let elsewhere = rendered.elsewhere.clone();
        let shard_pass = match &mut self.shard {
            Some(shard) => {
                let retired = shard
                    .retired(self.state.client(), &self.settings.weft_namespace)
                    .await;
                (shard.shard.count > 1 || !retired.is_empty())
                    .then_some(ShardPass { elsewhere, retired })
            }
            None => None,
        };
        let input = PassInput {
            revision: rendered.snapshot.revision.clone(),
            // `weft trigger --force-prune` allows this one pass past the prune guard.
            force_prune: ticket.reasons.contains(&TriggerReason::ApiForcePrune),
            shard: shard_pass,
            ..PassInput::default()
        };
        let ended = self.apply(set, &input, report).await;
        if let Ended::Applied(_) = ended {
            count_early(report, early);
        }
        ended
    }

    /// The root record (own outcome) and the suspension, which a shard reads from its base
    /// root's record (one suspension for every shard).
    async fn read_record(&self) -> Result<RootRecord, kube::Error> {
        let ns = &self.settings.weft_namespace;
        let own = &self.settings.root_name;
        let mut record = record::read(self.state.client(), ns, own).await?;
        let base = self.base_root();
        if base != own {
            record.suspension = record::read(self.state.client(), ns, base)
                .await?
                .suspension;
        }
        self.state.set_suspension(record.suspension.clone());
        Ok(record)
    }

    /// The root's own name (shard 0's).
    fn base_root(&self) -> &str {
        self.shard
            .as_ref()
            .map(|s| s.root_name.as_str())
            .unwrap_or(&self.settings.root_name)
    }

    /// Write the pass's outcome, this pass among the last ones and the next poll to the root
    /// record: one write per pass that ran (an abandoned one says nothing new).
    async fn record_outcome(
        &self,
        before: &RootRecord,
        report: &PassReport,
        started: Instant,
        conflicts: Option<&conflict::Conflicts>,
    ) {
        let outcome = match report.result {
            PassResultKind::Succeeded => RootOutcome {
                ready: true,
                reason: "Succeeded".into(),
                message: match conflicts {
                    None => format!(
                        "applied revision {}",
                        report.revision.as_deref().unwrap_or("-")
                    ),
                    Some(c) => format!(
                        "applied revision {}; {}",
                        report.revision.as_deref().unwrap_or("-"),
                        conflict::summary(c)
                    ),
                },
                revision: report.revision.clone(),
            },
            PassResultKind::Failed => RootOutcome {
                ready: false,
                // Another root's object: said so, as `weft get root` shows the reason.
                reason: match conflicts {
                    Some(_) => conflict::CONFLICT.into(),
                    None => "Failed".into(),
                },
                message: report
                    .error
                    .as_ref()
                    .map(|e| e.message.clone())
                    .unwrap_or_default(),
                revision: report.revision.clone(),
            },
            PassResultKind::Abandoned | PassResultKind::Suspended => return,
        };
        let entry = PassEntry {
            pass: report.pass,
            reasons: report.reasons.clone(),
            started_at: report.started_at.clone(),
            // The pass's duration but for this write.
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            result: outcome.reason.clone(),
            revision: report.revision.clone(),
        };
        let next_poll_at = self.state.next_poll_at();
        let written = PassRecord::after(before, outcome, entry, next_poll_at);
        let shard = self.shard.as_ref().map(|s| s.shard.index).unwrap_or(0);
        if let Err(e) = record::write_pass(
            self.state.client(),
            &self.settings.weft_namespace,
            &self.settings.root_name,
            self.base_root(),
            shard,
            &written,
        )
        .await
        {
            tracing::warn!(error = %crate::api::kube_error::Text(&e), "cannot write the root record; `weft get root` shows the previous outcome");
        }
    }

    /// Apply, prune and wait for `set`, and record the outcome in `report`, the Armada
    /// resources' status and the daemon status.
    async fn apply(
        &mut self,
        set: Arc<DesiredSet>,
        input: &PassInput,
        report: &mut PassReport,
    ) -> Ended {
        let pass = report.pass;
        // Charts whose objects this pass changes are marked `deploying` as it goes; the writes
        // are awaited before the pass's outcome is recorded (see `armada::status::mark_deploying`).
        let deploying = armada_status::DeployingMarks::default();
        let waits = crate::daemon::roots::waiting::WaitLog::new(pass);
        let observer = |p: Progress<'_>| match p {
            Progress::Phase { message, objects } => {
                waits.phase(&message);
                tracing::debug!(pass, objects, "{message}")
            }
            Progress::Change(c) if c.action != Action::Unchanged => {
                tracing::info!(pass, object = %c.object, owner = %c.owner.reference(), action = c.action.done(), reason = c.reason.as_deref().unwrap_or(""), "object changed");
                deploying.mark(self.state.client(), &c.owner);
            }
            Progress::Change(_) => {}
            Progress::Ready(r) => tracing::debug!(pass, object = %r, "ready"),
            Progress::Waiting(still) => waits.waiting(still),
        };
        // Suspended Armada charts (and their groups' and manifests' charts) are held out.
        let client = &self.state.client();
        let outcome = driver::drive(
            client,
            set,
            &self.settings,
            input,
            &observer,
            false,
            |held| async move { armada_status::record_suspended(client, &held).await },
            self.shutdown.abandoned(),
        )
        .await;
        let (set, changes, error, held_phases) = match outcome {
            driver::Outcome::Unheld(e) => {
                report.error = Some(PassFailure::new(
                    "Failed",
                    format!(
                    "cannot tell which resources are suspended: {}; nothing was applied or pruned",
                    crate::api::kube_error::Text(&e)
                ),
                ));
                return Ended::Stopped;
            }
            // Never: the daemon's root leaves the launcher to the WeaveCloud controller.
            driver::Outcome::Takeover(e) => {
                report.error = Some(PassFailure::new(
                    "Failed",
                    PassError::Takeover(e).to_string(),
                ));
                return Ended::Stopped;
            }
            driver::Outcome::Abandoned => {
                report.result = PassResultKind::Abandoned;
                report.error = Some(PassFailure::new(
                    "Abandoned",
                    format!(
                        "the daemon is stopping; the pass was abandoned after {}s of grace",
                        self.shutdown.grace().as_secs()
                    ),
                ));
                return Ended::Applied(Vec::new());
            }
            driver::Outcome::Finished {
                set,
                changes,
                error,
                held,
            } => (set, changes, error, held),
        };
        let set = &*set;
        fill_changes(report, &changes);
        deploying.written().await;
        // The Armada charts' phases are views of this pass; so are the groups' and manifests'
        // gauges (no controller reconciles those).
        let reported = armada_status::record_pass(
            self.state.client(),
            self.state.events(),
            set,
            &changes,
            error.as_ref(),
            &held_phases,
        )
        .await;
        self.state.metrics().resources().replace_reported(&reported);
        let outcomes = armada_status::chart_outcomes(set, &changes, error.as_ref());
        self.state.update_status(|s| {
            for (owner, o) in &outcomes {
                if let Some(status) = armada_status::owner_status(set, owner, o) {
                    s.set_owner(status);
                }
            }
        });
        // Held elsewhere (in the error: not applied) and held here (applied, claimed by another).
        let conflicts: conflict::Conflicts = error
            .as_ref()
            .map(|e| e.conflicts())
            .unwrap_or_default()
            .into_iter()
            .chain(changes.conflicts.iter().map(|(o, m)| (o, m.as_str())))
            .map(|(o, m)| (o.to_string(), redact_url_passwords(m)))
            .collect();
        let now = now_rfc3339();
        self.state.update_status(|s| {
            // Shown once there was a conflict; until then the status does not mention it.
            if !conflicts.is_empty() || s.conditions.iter().any(|c| c.type_ == conflict::CONFLICT) {
                set_condition(&mut s.conditions, conflict::condition(&conflicts), &now);
            }
        });
        match error {
            None => report.result = PassResultKind::Succeeded,
            Some(e) => {
                let text = redact_url_passwords(&e.to_string());
                report.error = Some(PassFailure::new("Failed", text).about(e.object()));
            }
        }
        Ended::Applied(conflicts)
    }

    /// The root's `SourceReady` condition (shown in the status, and by `/readyz` while false):
    /// why the repository cannot be fetched, if it cannot.
    fn record_source(&self, failed: Option<&RootError>) {
        let condition = source_condition(failed);
        let now = now_rfc3339();
        self.state
            .update_status(|s| set_condition(&mut s.conditions, condition, &now));
    }

    /// The root as notifications name it.
    fn notified(&self) -> crate::notify::EventSource {
        let o = &self.settings;
        crate::notify::EventSource::root(&o.weft_namespace, &o.root_name)
    }

    /// Fetch and, when the revision is new, load and render it; `fetched` is set to a revision
    /// fetched new as soon as it is known (a pass whose render then fails still names it).
    async fn prepare(&mut self, fetched: &mut Option<String>) -> Result<Fetched, RootError> {
        let mut early = Vec::new();
        let t = Instant::now();
        let new = self
            .source
            .fetch(self.rendered.as_ref().map(|r| &*r.snapshot))
            .await;
        self.state
            .metrics()
            .observe_git_fetch(t.elapsed().as_secs_f64());
        self.record_source(new.as_ref().err());
        let Some(snapshot) = new? else {
            return Ok(Fetched {
                unchanged: self.rendered.is_some(),
                early,
            });
        };
        // The previous render is let go before the new one is built (both at once were ≈ 100 MB
        // more at the peak of such a pass at 100,000 objects). If the new render fails, none is
        // kept and the next pass renders its head again, as it would anyway (a head other than
        // the rendered one is always rendered); the failed pass reports the revision in effect.
        let previous = self.rendered.take();
        if let Some(r) = &previous {
            // A few changed manifest files: their changed objects go out before the full render.
            let previous = super::early::Previous {
                snapshot: &r.snapshot,
                set: &r.set,
                elsewhere: &r.elsewhere,
            };
            early = super::early::changed_first(
                self.state.client(),
                previous,
                &snapshot,
                &self.settings,
            )
            .await;
        }
        drop(previous);
        fetched.clone_from(&snapshot.revision);
        let started = crate::notify::root::started(&self.notified(), fetched.as_deref());
        self.state.notifier().emit(started);
        // The WeaveClouds' agents are left to their controller, which renders them with the
        // same function and the cluster's inputs; the cluster is still read for the Helm
        // charts' `.Capabilities`.
        let cluster = crate::pass::prepare::ClusterInputs {
            client: self.state.client(),
            bundles: self.state.bundles(),
        };
        let prepared = crate::pass::prepare::prepare(
            Arc::clone(&snapshot),
            Some(cluster),
            AgentLayer::Excluded,
            &self.settings,
        )
        .await?;
        for d in &prepared.diagnostics.0 {
            tracing::warn!("{d}");
        }
        let (set, elsewhere) = match &self.shard {
            Some(shard) if shard.shard.count > 1 => prepared.set.split_shard(shard.shard),
            _ => (prepared.set, DesiredSet::default()),
        };
        self.applied_revision = snapshot.revision.clone();
        self.rendered = Some(Rendered {
            snapshot,
            set: Arc::new(set),
            elsewhere: Arc::new(elsewhere),
        });
        Ok(Fetched {
            unchanged: false,
            early,
        })
    }
}
