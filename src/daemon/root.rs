//! The sync-root reconciler: takes passes from the [`TriggerQueue`], one at a time, and runs
//! fetch → load → render → apply → prune → wait for the repository's own documents (the sync
//! layer). The custom resources' children are left to their controllers.
//!
//! The fetch first asks the remote for its head (cheap: no objects transferred); when it is
//! unchanged, load and render are skipped and the last rendered set is applied again, which
//! writes nothing unless something drifted.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use tokio::task::JoinHandle;

use super::armada::status as armada_status;
use super::record::{self, RootOutcome, RootRecord};
use super::shards;
use super::state::{DaemonState, Shutdown};
use super::status::{now_rfc3339, ChangeSummary, ObjectChange, PassReport, PassResultKind};
use super::trigger::{PassTicket, TriggerReason};
use super::EngineRun;
use crate::api::conditions::{set_condition, Condition, ConditionStatus};
use crate::apply::changeset::{Action, ChangeSet};
use crate::pass::{PassOptions, Progress, ShardPass};
use crate::render::shard::Shard;
use crate::render::DesiredSet;
use crate::render::{AgentLayer, Owner};
use crate::source::git::auth::Credentials;
use crate::source::git::redact_url_passwords;
use crate::source::git::{self, FetchOutcome, GitError, GitRef, GitSource, GitSourceSpec};
use crate::source::{self, Snapshot, SnapshotLimits};

/// Why a stage of a pass failed (shown in the pass report and the log).
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("fetching {url}: {source}")]
    Fetch {
        url: String,
        #[source]
        source: GitError,
    },
    #[error("reading {dir}: {source}")]
    Read {
        dir: String,
        #[source]
        source: source::local::LocalError,
    },
    /// The blocking fetch or read task panicked.
    #[error("reading the repository: the task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    #[error(transparent)]
    Prepare(#[from] crate::pass::PassError),
}

/// Why the repository cannot be followed at all.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the repository: {0}")]
    Git(#[source] GitError),
    #[error("the repository: `{0}` is neither a git URL nor a directory")]
    NotFound(String),
}

/// The root condition that says whether the repository can be fetched.
pub const SOURCE_READY: &str = "SourceReady";

/// Where the sync root's documents come from. Clones share the git source (and its cache).
#[derive(Clone)]
pub enum RootSource {
    /// A git repository (fetched incrementally into a cache), its URL as shown (passwords
    /// redacted) and its fetch deadline: both readable while a fetch holds the source.
    Git {
        source: Arc<Mutex<GitSource>>,
        url: String,
        timeout: Duration,
    },
    /// A local directory (development): read on every pass.
    Dir { dir: PathBuf, path: Option<String> },
}

impl RootSource {
    /// Follow `repo` (a git URL, or a local directory) at `git_ref` (default: the remote's
    /// `main`), under `path`; git repositories are cached in `cache_dir`.
    pub fn open(
        repo: &str,
        git_ref: Option<&str>,
        path: Option<&str>,
        cache_dir: Option<PathBuf>,
        credentials: Credentials,
        fetch_timeout: Duration,
    ) -> Result<RootSource, OpenError> {
        if git::is_git_url(repo) {
            let cache_dir = cache_dir.unwrap_or_else(git::default_cache_dir);
            let mut spec = GitSourceSpec::new(repo.to_string(), cache_dir);
            if let Some(r) = git_ref {
                spec.reference = GitRef::parse(r);
            }
            spec.path = path.map(str::to_string);
            spec.credentials = credentials;
            spec.fetch_timeout = fetch_timeout;
            let timeout = spec.fetch_timeout;
            let source = GitSource::new(spec).map_err(OpenError::Git)?;
            Ok(RootSource::Git {
                url: source.display_url().to_string(),
                source: Arc::new(Mutex::new(source)),
                timeout,
            })
        } else {
            let dir = PathBuf::from(repo);
            if !dir.is_dir() {
                return Err(OpenError::NotFound(repo.to_string()));
            }
            Ok(RootSource::Dir {
                dir,
                path: path.map(str::to_string),
            })
        }
    }

    /// The repository as shown in status and logs (passwords redacted).
    pub fn display(&self) -> String {
        match self {
            RootSource::Git { url, .. } => url.clone(),
            RootSource::Dir { dir, .. } => dir.display().to_string(),
        }
    }

    /// Fetch: `Ok(None)` when the revision is the one we rendered last (`last`).
    async fn fetch(&self, last: Option<&Snapshot>) -> Result<Option<Arc<Snapshot>>, RootError> {
        match self {
            RootSource::Git {
                source: g,
                url,
                timeout,
            } => {
                let (g, timeout) = (g.clone(), *timeout);
                let fetching = tokio::task::spawn_blocking(move || {
                    // A fetch still stuck in a server that never ends its answer holds the
                    // source: this pass fails at once instead of queueing behind it.
                    let mut g = match g.try_lock() {
                        Ok(g) => g,
                        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                        Err(std::sync::TryLockError::WouldBlock) => return None,
                    };
                    let url = g.display_url().to_string();
                    let outcome = g.fetch();
                    let last_good = g.last_good().cloned();
                    Some((url, outcome, last_good))
                });
                // libgit2 honours the deadline while data flows and cuts a silent server; this
                // bounds what it cannot see (a ref advertisement that never ends).
                let overrun = || RootError::Fetch {
                    url: url.clone(),
                    source: GitError::Timeout {
                        url: url.clone(),
                        timeout,
                    },
                };
                let (url, outcome, last_good) =
                    match tokio::time::timeout(timeout + Duration::from_secs(5), fetching).await {
                        Ok(joined) => match joined.map_err(RootError::Task)? {
                            Some(done) => done,
                            None => return Err(overrun()),
                        },
                        Err(_) => return Err(overrun()),
                    };
                match outcome {
                    Ok(FetchOutcome::New(s)) => Ok(Some(s)),
                    // Unchanged since the source's last good snapshot; if we never rendered it
                    // (e.g. the previous render failed and was fixed nowhere), use it anyway.
                    Ok(FetchOutcome::Unchanged) => match (last, last_good) {
                        (Some(l), Some(g)) if l.revision == g.revision => Ok(None),
                        (_, Some(g)) => Ok(Some(g)),
                        (_, None) => Ok(None),
                    },
                    Err(source) => Err(RootError::Fetch { url, source }),
                }
            }
            RootSource::Dir { dir, path } => {
                let dir = dir.clone();
                let path = path.clone();
                let read = tokio::task::spawn_blocking(move || {
                    let s = source::local::read_dir(&dir, SnapshotLimits::default()).map_err(
                        |source| RootError::Read {
                            dir: dir.display().to_string(),
                            source,
                        },
                    )?;
                    Ok::<_, RootError>(match &path {
                        Some(p) => s.subdir(p),
                        None => s,
                    })
                })
                .await
                .map_err(RootError::Task)??;
                if last == Some(&read) {
                    Ok(None)
                } else {
                    Ok(Some(Arc::new(read)))
                }
            }
        }
    }
}

/// The rendered sync layer of one revision, kept so an unchanged head skips load and render.
struct Rendered {
    snapshot: Arc<Snapshot>,
    /// This shard's part (the whole render when the root is not sharded).
    set: Arc<DesiredSet>,
    /// The other shards' part.
    elsewhere: Arc<DesiredSet>,
}

/// The shard a root loop works on (`--shards`).
#[derive(Clone, Debug)]
pub struct RootShard {
    pub shard: Shard,
    /// The root's own name (`--root-name`): shard 0 applies under it.
    pub root_name: String,
    /// The root's leader Lease (shard Leases are named after it).
    pub leader_lease: String,
    /// A look found no shard Lease at or above the count: none can appear during this term
    /// (changing the count restarts the replicas), so passes stop looking.
    settled: bool,
}

impl RootShard {
    pub fn new(shard: Shard, root_name: String, leader_lease: String) -> Self {
        RootShard {
            shard,
            root_name,
            leader_lease,
            settled: false,
        }
    }

    /// The shards to finish (shard 0 only): their Leases exist, no live replica holds them, and
    /// their index is at or above the shard count. A failed look is logged and retried next pass;
    /// once a look finds no such Lease at all, later passes of the term make no call.
    async fn retired(&mut self, client: &Client, weft_namespace: &str) -> Vec<Owner> {
        if self.shard.index != 0 || self.settled {
            return Vec::new();
        }
        match shards::retired_roots(
            client,
            &self.leader_lease,
            &self.root_name,
            weft_namespace,
            self.shard.count,
        )
        .await
        {
            Ok(retired) => {
                self.settled = !retired.any;
                retired.free
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the shard Leases; retired shards are finished later");
                Vec::new()
            }
        }
    }
}

/// The sync-root loop.
pub struct RootReconciler {
    state: DaemonState,
    source: RootSource,
    pass_options: PassOptions,
    /// When a running pass is abandoned after a stop request.
    shutdown: Shutdown,
    rendered: Option<Rendered>,
    /// The revision of the last successful render: what a failed pass reports as in effect,
    /// also after the pass let that render go for a new one.
    applied_revision: Option<String>,
    /// The shard this loop applies; `None`: the whole root (no retired shards looked for).
    shard: Option<RootShard>,
    /// The revision the running pass fetched new, if any (notifications).
    fetched: Option<String>,
    /// The phases of the charts the running pass holds because they are suspended.
    held_phases: armada_status::ChartPhases,
    /// What the running pass applied ahead of its full render (see [`super::early`]).
    early: Vec<crate::api::ObjectRef>,
}

impl RootReconciler {
    pub fn new(
        state: DaemonState,
        source: RootSource,
        pass_options: PassOptions,
        shutdown: Shutdown,
    ) -> Self {
        RootReconciler {
            state,
            source,
            pass_options,
            shutdown,
            rendered: None,
            applied_revision: None,
            shard: None,
            fetched: None,
            held_phases: Default::default(),
            early: Vec::new(),
        }
    }

    /// Apply only `shard`'s part of the root (the daemon; `pass_options.root_name` is already the
    /// shard's root name), and, as shard 0, finish retired shards.
    pub fn sharded(mut self, shard: RootShard) -> Self {
        self.shard = Some(shard);
        self
    }

    /// Run passes until the queue is closed. A pass that is running when the daemon is asked to
    /// stop gets the shutdown grace period to finish, then it is abandoned.
    pub async fn run(mut self) {
        while let Some(ticket) = self.state.queue.next_pass().await {
            let report = self.run_pass(ticket).await;
            let outcome = report.notification(self.fetched.as_deref());
            self.state
                .notifier()
                .emit_all(crate::notify::root::finished(&self.notified(), &outcome));
            self.state.metrics.observe_pass(&report);
            self.state.update_status(|s| {
                if report.succeeded() {
                    s.revision = report.revision.clone().or(s.revision.take());
                    s.last_success_at = Some(now_rfc3339());
                }
                s.last_pass = Some(report.clone());
            });
            let pass = report.pass;
            self.state.queue.finish(pass, report);
        }
    }

    /// One pass: fetch, and if new, load and render; then apply, prune and wait.
    pub async fn run_pass(&mut self, ticket: PassTicket) -> PassReport {
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
        };
        let record = match self.read_record().await {
            Ok(record) => record,
            Err(e) => {
                let text = format!("cannot read the root record (is the root suspended?): {e}");
                tracing::warn!(pass = ticket.pass, error = %text, "pass failed before fetch; nothing was applied or pruned");
                report.error = Some(text);
                report.duration_seconds = start.elapsed().as_secs_f64();
                return report;
            }
        };
        if let Some(suspension) = record.suspension.suspended.then_some(&record.suspension) {
            tracing::info!(
                pass = ticket.pass,
                "the root is suspended; nothing was fetched, applied or pruned"
            );
            report.result = PassResultKind::Suspended;
            report.error = Some(suspended_message(suspension));
            report.duration_seconds = start.elapsed().as_secs_f64();
            return report;
        }
        let report = self.run_unsuspended(ticket, report, start).await;
        self.record_outcome(&record, &report).await;
        // What the pass allocated (a render, its plan, pages of listed metadata) is freed by now.
        crate::mem::release_free_memory();
        report
    }

    /// The pass of a root that is not suspended.
    async fn run_unsuspended(
        &mut self,
        ticket: PassTicket,
        mut report: PassReport,
        start: Instant,
    ) -> PassReport {
        match self.prepare().await {
            Ok(unchanged) => report.head_unchanged = unchanged,
            Err(e) => {
                // Status and logs never show a password of a URL inside an error.
                let text = redact_url_passwords(&e.to_string());
                tracing::warn!(pass = ticket.pass, error = %text, "pass failed before apply; nothing was applied or pruned");
                report.error = Some(text);
                report.revision = self.applied_revision.clone();
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
        if self.shutdown.is_stopping() {
            report.result = PassResultKind::Abandoned;
            report.error =
                Some("the daemon is stopping; the pass was abandoned before apply".into());
            report.duration_seconds = start.elapsed().as_secs_f64();
            return report;
        }
        let mut set = rendered.set.clone();
        let elsewhere = rendered.elsewhere.clone();
        // Suspended Armada charts (and their groups' and manifests' charts) are held out.
        match crate::pass::suspend::hold_suspended(&self.state.client, &set).await {
            Ok((held_set, held)) => {
                if let Some(held_set) = held_set {
                    set = Arc::new(held_set);
                }
                self.held_phases = armada_status::record_suspended(&self.state.client, &held).await;
            }
            Err(e) => {
                report.error = Some(format!(
                    "cannot tell which resources are suspended: {e}; nothing was applied or pruned"
                ));
                report.duration_seconds = start.elapsed().as_secs_f64();
                return report;
            }
        }
        let shard_pass = match &mut self.shard {
            Some(shard) => {
                let retired = shard
                    .retired(&self.state.client, &self.pass_options.weft_namespace)
                    .await;
                (shard.shard.count > 1 || !retired.is_empty())
                    .then_some(ShardPass { elsewhere, retired })
            }
            None => None,
        };
        // `weft trigger --force-prune` allows this one pass past the prune guard.
        let opts = PassOptions {
            revision: rendered.snapshot.revision.clone(),
            force_prune: self.pass_options.force_prune
                || ticket.reasons.contains(&TriggerReason::ApiForcePrune),
            shard: shard_pass,
            ..self.pass_options.clone()
        };
        self.apply(&set, &opts, &mut report).await;
        count_early(&mut report, std::mem::take(&mut self.early));
        report.duration_seconds = start.elapsed().as_secs_f64();
        log_outcome(&report);
        report
    }

    /// The root record (own outcome) and the suspension, which a shard reads from its base
    /// root's record (one suspension for every shard).
    async fn read_record(&self) -> Result<RootRecord, kube::Error> {
        let ns = &self.pass_options.weft_namespace;
        let own = &self.pass_options.root_name;
        let mut record = record::read(&self.state.client, ns, own).await?;
        let base = self.base_root();
        if base != own {
            record.suspension = record::read(&self.state.client, ns, base).await?.suspension;
        }
        self.state.set_suspension(record.suspension.clone());
        Ok(record)
    }

    /// The root's own name (shard 0's).
    fn base_root(&self) -> &str {
        self.shard
            .as_ref()
            .map(|s| s.root_name.as_str())
            .unwrap_or(&self.pass_options.root_name)
    }

    /// Write the pass's outcome to the root record when it differs from what `before` says (a
    /// no-op pass writes nothing; an abandoned one says nothing new).
    async fn record_outcome(&self, before: &RootRecord, report: &PassReport) {
        let outcome = match report.result {
            PassResultKind::Succeeded => RootOutcome {
                ready: true,
                reason: "Succeeded".into(),
                message: format!(
                    "applied revision {}",
                    report.revision.as_deref().unwrap_or("-")
                ),
                revision: report.revision.clone(),
            },
            PassResultKind::Failed => RootOutcome {
                ready: false,
                reason: "Failed".into(),
                message: report.error.clone().unwrap_or_default(),
                revision: report.revision.clone(),
            },
            PassResultKind::Abandoned | PassResultKind::Suspended => return,
        };
        if before.outcome.as_ref() == Some(&outcome) {
            return;
        }
        let shard = self.shard.as_ref().map(|s| s.shard.index).unwrap_or(0);
        if let Err(e) = record::write_outcome(
            &self.state.client,
            &self.pass_options.weft_namespace,
            &self.pass_options.root_name,
            self.base_root(),
            shard,
            &outcome,
        )
        .await
        {
            tracing::warn!(error = %e, "cannot write the root record; `weft get root` shows the previous outcome");
        }
    }

    /// Apply, prune and wait for `set`, and record the outcome in `report`, the Armada
    /// resources' status and the daemon status.
    async fn apply(&self, set: &DesiredSet, opts: &PassOptions, report: &mut PassReport) {
        let pass = report.pass;
        // Charts whose objects this pass changes are marked `deploying` as it goes; the writes
        // are awaited before the pass's outcome is recorded (see `armada::status::mark_deploying`).
        let deploying = DeployingMarks::default();
        let observer = |p: Progress<'_>| match p {
            Progress::Phase { message, objects } => tracing::debug!(pass, objects, "{message}"),
            Progress::Change(c) if c.action != Action::Unchanged => {
                tracing::info!(pass, object = %c.object, owner = %c.owner.reference(), action = c.action.done(), reason = c.reason.as_deref().unwrap_or(""), "object changed");
                deploying.mark(&self.state.client, &c.owner);
            }
            Progress::Change(_) => {}
            Progress::Ready(r) => tracing::debug!(pass, object = %r, "ready"),
            Progress::Waiting(_) => {}
        };
        let outcome =
            super::run_engine(&self.state.client, set, opts, &observer, &self.shutdown).await;
        let (changes, error) = match outcome {
            EngineRun::Abandoned => {
                report.result = PassResultKind::Abandoned;
                report.error = Some(format!(
                    "the daemon is stopping; the pass was abandoned after {}s of grace",
                    self.shutdown.grace().as_secs()
                ));
                return;
            }
            EngineRun::Finished(changes, error) => (changes, error),
        };
        fill_changes(report, &changes);
        deploying.written().await;
        // The Armada charts' phases are views of this pass.
        armada_status::record_pass(
            &self.state.client,
            self.state.events(),
            set,
            &changes,
            error.as_ref(),
            &self.held_phases,
        )
        .await;
        let outcomes = armada_status::chart_outcomes(set, &changes, error.as_ref());
        self.state.update_status(|s| {
            for (owner, o) in &outcomes {
                if let Some(status) = armada_status::owner_status(set, owner, o) {
                    s.set_owner(status);
                }
            }
        });
        match error {
            None => report.result = PassResultKind::Succeeded,
            Some(e) => report.error = Some(redact_url_passwords(&e.to_string())),
        }
    }

    /// Fetch and, when the revision is new, load and render it. `Ok(true)` when the head was
    /// unchanged (the cached render is used).
    /// The root's `SourceReady` condition (shown in the status, and by `/readyz` while false):
    /// why the repository cannot be fetched, if it cannot.
    fn record_source(&self, failed: Option<&RootError>) {
        let condition = match failed {
            None => Condition {
                type_: SOURCE_READY.into(),
                status: ConditionStatus::True,
                reason: "Fetched".into(),
                message: "the repository was fetched".into(),
                ..Default::default()
            },
            Some(e) => Condition {
                type_: SOURCE_READY.into(),
                status: ConditionStatus::False,
                reason: match e {
                    RootError::Fetch {
                        source: GitError::Timeout { .. },
                        ..
                    } => "FetchTimeout".into(),
                    _ => "FetchFailed".into(),
                },
                message: format!("{e}; the last good revision stays applied"),
                ..Default::default()
            },
        };
        let now = now_rfc3339();
        self.state
            .update_status(|s| set_condition(&mut s.conditions, condition, &now));
    }

    /// The root as notifications name it.
    fn notified(&self) -> crate::notify::EventSource {
        let o = &self.pass_options;
        crate::notify::EventSource::root(&o.weft_namespace, &o.root_name)
    }

    async fn prepare(&mut self) -> Result<bool, RootError> {
        self.fetched = None;
        self.early.clear();
        let t = Instant::now();
        let fetched = self
            .source
            .fetch(self.rendered.as_ref().map(|r| &*r.snapshot))
            .await;
        self.state
            .metrics
            .observe_git_fetch(t.elapsed().as_secs_f64());
        self.record_source(fetched.as_ref().err());
        let Some(snapshot) = fetched? else {
            return Ok(self.rendered.is_some());
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
            self.early = super::early::changed_first(
                &self.state.client,
                previous,
                &snapshot,
                &self.pass_options,
            )
            .await;
        }
        drop(previous);
        self.fetched = snapshot.revision.clone();
        let started = crate::notify::root::started(&self.notified(), self.fetched.as_deref());
        self.state.notifier().emit(started);
        // The WeaveClouds' agents are left to their controller, which renders them with the
        // same function and the cluster's inputs; the cluster is still read for the Helm
        // charts' `.Capabilities`.
        let cluster = crate::pass::prepare::ClusterInputs {
            client: &self.state.client,
            bundles: &self.state.bundles,
        };
        let prepared = crate::pass::prepare::prepare(
            Arc::clone(&snapshot),
            Some(cluster),
            AgentLayer::Excluded,
            &self.pass_options,
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
        Ok(false)
    }
}

/// The objects a pass applied ahead of its full render are its changes too: the full pass found
/// them unchanged, the report says `configured` (so `weft trigger --wait` and notifications show
/// what the push changed).
fn count_early(report: &mut PassReport, early: Vec<crate::api::ObjectRef>) {
    for r in early {
        let object = r.to_string();
        if report.changes.iter().any(|c| c.object == object) {
            continue;
        }
        report.summary.configured += 1;
        report.summary.unchanged = report.summary.unchanged.saturating_sub(1);
        report.changes.push(ObjectChange {
            object,
            action: "configured".to_string(),
        });
    }
}

/// What a pass of a suspended root says.
fn suspended_message(s: &super::record::RootSuspension) -> String {
    let mut text = String::from("the root is suspended");
    if let Some(since) = &s.since {
        text.push_str(&format!(" since {since}"));
    }
    if let Some(m) = &s.message {
        text.push_str(&format!(" ({m})"));
    }
    text.push_str("; nothing was fetched, applied or pruned (resume with `weft resume`)");
    text
}

/// The log line of a finished pass.
fn log_outcome(report: &PassReport) {
    let pass = report.pass;
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
}

/// Charts marked `deploying` in one pass, and the status writes doing it.
#[derive(Default)]
struct DeployingMarks(std::sync::Mutex<(BTreeSet<Owner>, Vec<JoinHandle<()>>)>);

impl DeployingMarks {
    /// Mark `owner` deploying (once per pass) if it is an ArmadaChart.
    fn mark(&self, client: &Client, owner: &Owner) {
        let Some((namespace, name)) = owner.as_chart() else {
            return;
        };
        let mut marks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if marks.0.insert(owner.clone()) {
            let write = armada_status::mark_deploying(
                client.clone(),
                namespace.to_string(),
                name.to_string(),
            );
            marks.1.push(tokio::spawn(write));
        }
    }

    /// Wait for every mark written.
    async fn written(&self) {
        let writes = std::mem::take(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()).1);
        for write in writes {
            let _ = write.await;
        }
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
