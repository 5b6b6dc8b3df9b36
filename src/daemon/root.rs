//! The sync-root reconciler: takes passes from the [`TriggerQueue`], one at a time, and runs
//! fetch → load → render → apply → prune → wait for the repository's own documents (the sync
//! layer). The custom resources' children are left to their controllers.
//!
//! The fetch first asks the remote for its head (cheap: no objects transferred); when it is
//! unchanged, load and render are skipped and the last rendered set is applied again, which
//! writes nothing unless something drifted.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use kube::Client;
use tokio::sync::watch;

use super::status::{
    now_rfc3339, ChangeSummary, DaemonStatus, ObjectChange, PassReport, PassResultKind,
};
use super::trigger::{PassTicket, TriggerQueue, TriggerReason};
use crate::apply::changeset::{Action, ChangeSet};
use crate::daemon::metrics::Metrics;
use crate::pass::{self, PassOptions, Progress};
use crate::render::DesiredSet;
use crate::render::{AgentLayer, Owner};
use crate::source::git::{FetchOutcome, GitSource};
use crate::source::{self, Snapshot, SnapshotLimits};

/// Charts marked `deploying` in one pass, and the status writes doing it.
type DeployingMarks = std::sync::Mutex<(
    std::collections::BTreeSet<Owner>,
    Vec<tokio::task::JoinHandle<()>>,
)>;

/// Why a stage of a pass failed (shown in the pass report and the log).
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("fetching {url}: {message}")]
    Fetch { url: String, message: String },
    #[error("reading {dir}: {message}")]
    Read { dir: String, message: String },
    #[error(transparent)]
    Prepare(#[from] crate::pass::SyncError),
}

/// Where the sync root's documents come from.
pub enum RootSource {
    /// A git repository (fetched incrementally into a cache).
    Git(Arc<Mutex<GitSource>>),
    /// A local directory (development): read on every pass.
    Dir { dir: PathBuf, path: Option<String> },
}

impl RootSource {
    /// The repository as shown in status and logs (passwords redacted).
    pub fn display(&self) -> String {
        match self {
            RootSource::Git(g) => g
                .lock()
                .map(|g| g.display_url().to_string())
                .unwrap_or_default(),
            RootSource::Dir { dir, .. } => dir.display().to_string(),
        }
    }

    /// Fetch: `Ok(None)` when the revision is the one we rendered last (`last`).
    async fn fetch(&self, last: Option<&Snapshot>) -> Result<Option<Snapshot>, RootError> {
        match self {
            RootSource::Git(g) => {
                let g = g.clone();
                let joined = tokio::task::spawn_blocking(move || {
                    let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
                    let url = g.display_url().to_string();
                    let outcome = g.fetch();
                    let last_good = g.last_good().cloned();
                    (url, outcome, last_good)
                })
                .await;
                let (url, outcome, last_good) = joined.map_err(|e| RootError::Fetch {
                    url: String::new(),
                    message: format!("the fetch task failed: {e}"),
                })?;
                match outcome {
                    Ok(FetchOutcome::New(s)) => Ok(Some(s)),
                    // Unchanged since the source's last good snapshot; if we never rendered it
                    // (e.g. the previous render failed and was fixed nowhere), use it anyway.
                    Ok(FetchOutcome::Unchanged) => match (last, last_good) {
                        (Some(l), Some(g)) if l.revision == g.revision => Ok(None),
                        (_, Some(g)) => Ok(Some(g)),
                        (_, None) => Ok(None),
                    },
                    Err(e) => Err(RootError::Fetch {
                        url,
                        message: e.to_string(),
                    }),
                }
            }
            RootSource::Dir { dir, path } => {
                let dir = dir.clone();
                let path = path.clone();
                let read = tokio::task::spawn_blocking(move || {
                    let s =
                        source::local::read_dir(&dir, SnapshotLimits::default()).map_err(|e| {
                            RootError::Read {
                                dir: dir.display().to_string(),
                                message: e.to_string(),
                            }
                        })?;
                    Ok::<_, RootError>(match &path {
                        Some(p) => s.subdir(p),
                        None => s,
                    })
                })
                .await
                .map_err(|e| RootError::Read {
                    dir: String::new(),
                    message: e.to_string(),
                })??;
                if last == Some(&read) {
                    Ok(None)
                } else {
                    Ok(Some(read))
                }
            }
        }
    }
}

/// The rendered sync layer of one revision, kept so an unchanged head skips load and render.
struct Rendered {
    snapshot: Snapshot,
    set: Arc<DesiredSet>,
}

/// The sync-root loop.
pub struct RootReconciler {
    pub client: Client,
    pub source: RootSource,
    pub pass_options: PassOptions,
    pub queue: Arc<TriggerQueue<PassReport>>,
    pub status: Arc<RwLock<DaemonStatus>>,
    pub metrics: Arc<Metrics>,
    /// How long a pass may go on after shutdown was asked before it is abandoned.
    pub shutdown_grace: Duration,
    rendered: Option<Rendered>,
    recorder: kube::runtime::events::Recorder,
}

impl RootReconciler {
    pub fn new(
        client: Client,
        source: RootSource,
        pass_options: PassOptions,
        queue: Arc<TriggerQueue<PassReport>>,
        status: Arc<RwLock<DaemonStatus>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        RootReconciler {
            recorder: super::weavecloud::recorder(client.clone()),
            client,
            source,
            pass_options,
            queue,
            status,
            metrics,
            shutdown_grace: Duration::from_secs(20),
            rendered: None,
        }
    }

    fn update_status(&self, f: impl FnOnce(&mut DaemonStatus)) {
        let mut s = self.status.write().unwrap_or_else(|p| p.into_inner());
        f(&mut s);
    }

    /// Run passes until the queue is closed. A pass that is running when `stop` turns true gets
    /// `shutdown_grace` to finish, then it is abandoned (dropped between two API calls; nothing
    /// is pruned unless every apply finished, so the next pass starts from a consistent state).
    pub async fn run(mut self, stop: watch::Receiver<bool>) {
        while let Some(ticket) = self.queue.next_pass().await {
            let report = self.run_pass(ticket, stop.clone()).await;
            self.metrics.observe_pass(&report);
            self.update_status(|s| {
                if report.succeeded() {
                    s.revision = report.revision.clone().or(s.revision.take());
                    s.last_success_at = Some(now_rfc3339());
                }
                s.last_pass = Some(report.clone());
            });
            let pass = report.pass;
            self.queue.finish(pass, report);
        }
    }

    /// One pass: fetch, and if new, load and render; then apply, prune and wait.
    pub async fn run_pass(
        &mut self,
        ticket: PassTicket,
        mut stop: watch::Receiver<bool>,
    ) -> PassReport {
        let reasons: Vec<String> = ticket
            .reasons
            .iter()
            .map(TriggerReason::to_string)
            .collect();
        tracing::info!(pass = ticket.pass, reasons = %reasons.join(","), "pass started");
        let started_at = now_rfc3339();
        let start = Instant::now();
        let mut report = PassReport {
            pass: ticket.pass,
            reasons,
            started_at,
            duration_seconds: 0.0,
            revision: None,
            result: PassResultKind::Failed,
            error: None,
            head_unchanged: false,
            summary: ChangeSummary::default(),
            changes: Vec::new(),
        };
        match self.prepare().await {
            Ok(unchanged) => report.head_unchanged = unchanged,
            Err(e) => {
                tracing::warn!(pass = ticket.pass, error = %e, "pass failed before apply; nothing was applied or pruned");
                report.error = Some(e.to_string());
                report.revision = self
                    .rendered
                    .as_ref()
                    .and_then(|r| r.snapshot.revision.clone());
                report.duration_seconds = start.elapsed().as_secs_f64();
                return report;
            }
        }
        let Some(rendered) = &self.rendered else {
            report.error = Some("nothing was fetched yet".to_string());
            return report;
        };
        report.revision = rendered
            .snapshot
            .revision
            .clone()
            .or(Some("local".to_string()));
        if *stop.borrow() {
            report.result = PassResultKind::Abandoned;
            report.error =
                Some("the daemon is stopping; the pass was abandoned before apply".into());
            report.duration_seconds = start.elapsed().as_secs_f64();
            return report;
        }
        let pass = ticket.pass;
        // Charts whose objects this pass changes are marked `deploying` as it goes; the writes
        // are awaited before the pass's outcome is recorded (see `armada::mark_deploying`).
        let deploying: Arc<DeployingMarks> = Arc::default();
        let marks = deploying.clone();
        let mark_client = self.client.clone();
        let runtime = tokio::runtime::Handle::current();
        let observer: Arc<pass::Observer<'static>> = Arc::new(move |p: Progress<'_>| match p {
            Progress::Phase { message, objects } => tracing::debug!(pass, objects, "{message}"),
            Progress::Change(c) if c.action != Action::Unchanged => {
                tracing::info!(pass, object = %c.object, owner = %c.owner.reference(), action = c.action.done(), reason = c.reason.as_deref().unwrap_or(""), "object changed");
                if let Owner::Resource {
                    kind,
                    namespace: ns,
                    name,
                } = &c.owner
                {
                    if kind != crate::render::armada::OWNER_KIND {
                        return;
                    }
                    let mut marks = marks.lock().unwrap_or_else(|p| p.into_inner());
                    if marks.0.insert(c.owner.clone()) {
                        let write = super::armada::mark_deploying(
                            mark_client.clone(),
                            ns.to_string(),
                            name.to_string(),
                        );
                        marks.1.push(runtime.spawn(write));
                    }
                }
            }
            Progress::Change(_) => {}
            Progress::Ready(r) => tracing::debug!(pass, object = %r, "ready"),
        });
        let grace = self.shutdown_grace;
        let stopping = async move {
            while !*stop.borrow() {
                if stop.changed().await.is_err() {
                    // The sender is gone: nobody can ask us to stop any more.
                    std::future::pending::<()>().await;
                }
            }
            tokio::time::sleep(grace).await;
        };
        let set = rendered.set.clone();
        let outcome = super::reconcile_detached(
            self.client.clone(),
            set.clone(),
            self.pass_options.clone(),
            observer,
            stopping,
        )
        .await;
        report.duration_seconds = start.elapsed().as_secs_f64();
        match outcome {
            Err(e) => report.error = Some(e),
            Ok(None) => {
                report.result = PassResultKind::Abandoned;
                report.error = Some(format!(
                    "the daemon is stopping; the pass was abandoned after {}s of grace",
                    grace.as_secs()
                ));
            }
            Ok(Some((changes, error))) => {
                fill_changes(&mut report, &changes);
                let writes =
                    std::mem::take(&mut deploying.lock().unwrap_or_else(|p| p.into_inner()).1);
                for write in writes {
                    let _ = write.await;
                }
                // The Armada charts' phases are views of this pass.
                super::armada::record_pass(
                    &self.client,
                    &self.recorder,
                    &set,
                    &changes,
                    error.as_ref(),
                )
                .await;
                let outcomes = super::armada::chart_outcomes(&set, &changes, error.as_ref());
                self.update_status(|s| {
                    for (owner, o) in &outcomes {
                        let Owner::Resource {
                            kind,
                            namespace,
                            name,
                        } = owner
                        else {
                            continue;
                        };
                        s.set_owner(super::status::OwnerStatus {
                            kind: kind.clone(),
                            namespace: namespace.clone(),
                            name: name.clone(),
                            ready: if o.phase == crate::api::armada::Phase::Deployed {
                                "True"
                            } else {
                                "False"
                            }
                            .into(),
                            reason: o.reason.clone(),
                            message: o.message.clone(),
                            version: serde_json::to_value(o.phase)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_string)),
                            objects: set.objects().iter().filter(|d| &d.owner == owner).count(),
                            ..Default::default()
                        });
                    }
                });
                match error {
                    None => report.result = PassResultKind::Succeeded,
                    Some(e) => report.error = Some(e.to_string()),
                }
            }
        }
        match &report.error {
            None => tracing::info!(
                pass,
                revision = report.revision.as_deref().unwrap_or("-"),
                head_unchanged = report.head_unchanged,
                created = report.summary.created,
                configured = report.summary.configured,
                pruned = report.summary.pruned,
                unchanged = report.summary.unchanged,
                seconds = report.duration_seconds,
                "pass succeeded"
            ),
            Some(e) => {
                tracing::warn!(pass, revision = report.revision.as_deref().unwrap_or("-"), error = %e, "pass failed")
            }
        }
        report
    }

    /// Fetch and, when the revision is new, load and render it. `Ok(true)` when the head was
    /// unchanged (the cached render is used).
    async fn prepare(&mut self) -> Result<bool, RootError> {
        let t = Instant::now();
        let fetched = self
            .source
            .fetch(self.rendered.as_ref().map(|r| &r.snapshot))
            .await;
        self.metrics.observe_git_fetch(t.elapsed().as_secs_f64());
        let Some(snapshot) = fetched? else {
            return Ok(self.rendered.is_some());
        };
        // The WeaveClouds' agents are left to their controller, which renders them with the
        // same function and the cluster's inputs.
        let prepared = crate::pass::prepare::prepare(
            snapshot.clone(),
            None,
            AgentLayer::Excluded,
            &self.pass_options,
        )
        .await?;
        for d in &prepared.diagnostics.0 {
            tracing::warn!("{d}");
        }
        let rendered = prepared.set;
        self.rendered = Some(Rendered {
            snapshot,
            set: Arc::new(rendered),
        });
        Ok(false)
    }
}

/// The report's view of a change set.
pub fn fill_changes(report: &mut PassReport, changes: &ChangeSet) {
    let s = changes.summary();
    report.summary = summary_of(changes);
    debug_assert_eq!(report.summary.unchanged, s.unchanged as u64);
    report.changes = changes
        .entries
        .iter()
        .filter(|c| c.action != Action::Unchanged)
        .map(|c| ObjectChange {
            object: c.object.to_string(),
            action: c.action.done().to_string(),
        })
        .collect();
}

/// Counts per action of a change set.
pub fn summary_of(changes: &ChangeSet) -> ChangeSummary {
    let s = changes.summary();
    ChangeSummary {
        created: s.created as u64,
        configured: s.configured as u64,
        unchanged: s.unchanged as u64,
        pruned: s.deleted as u64,
        skipped: s.skipped as u64,
    }
}
