//! Agent auto-update: on each WeaveCloud's `updateSchedule` (cron, UTC), look at its agent
//! channel, pick the newest bundle `agentVersion` allows that is not marked bad, verify its
//! sha256, render, apply, and wait for the agents to be healthy. If they are not healthy within
//! the timeout, roll back to the previous bundle, mark the version bad (`status.badVersions`, not
//! retried), set `Ready=False` with the reason and emit an event.
//!
//! The bundle each WeaveCloud runs is [`AgentBundles`]: in memory, and kept in the cluster as a
//! ConfigMap in Weft's namespace (the archive, its version and digest), so a restarted Weft
//! renders the same version instead of going back to the built-in one. The WeaveCloud
//! controller renders with [`AgentBundles::active`].
//!
//! Pure parts (schedule, selection) are plain functions with unit tests; the I/O is in
//! [`Updater`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::{watch, Mutex, Notify};
use tracing::Instrument;

use crate::api::conditions::{set_condition, Condition, ConditionStatus, READY};
use crate::api::weavecloud::{WeaveCloud, WeaveCloudStatus};
use crate::load::parse_version_range;
use crate::pass::PassOptions;
use crate::render::bundle::{Bundle, BundleError};
use crate::render::weavecloud::{render_agents, AgentInputs};
use crate::render::DesiredSet;
use crate::source::channel::{
    pack_archive, sha256_hex, ChannelEntry, ChannelError, ChannelOptions, ChannelSource,
};

use crate::daemon::status::{now_rfc3339, DaemonStatus};
pub use crate::pass::agents::{
    cache_configmap_name, ActiveBundle, AgentBundles, ARCHIVE_KEY, BUILTIN_SOURCE, BUNDLE_OF_LABEL,
    DIGEST_KEY, SOURCE_KEY, VERSION_KEY,
};

/// `(namespace, name)` of a WeaveCloud.
type WcKey = (String, String);
use crate::daemon::metrics::Metrics;

/// The reason of `Ready=False` after a rollback.
pub const REASON_ROLLED_BACK: &str = "AgentUpdateRolledBack";
/// Event reasons.
pub const EVENT_UPDATED: &str = "AgentsUpdated";
pub const EVENT_REFUSED: &str = "AgentBundleRefused";
pub const EVENT_ROLLED_BACK: &str = "AgentUpdateRolledBack";
pub const EVENT_CHECK_FAILED: &str = "AgentUpdateCheckFailed";

/// Why an update check could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("`spec.general.updateSchedule` `{schedule}`: {message}")]
    Schedule { schedule: String, message: String },
    #[error("`spec.general.agentVersion` `{range}` is not a semver range: {message}")]
    Range { range: String, message: String },
    #[error("{0}")]
    Channel(#[from] ChannelError),
    #[error("agent bundle {version} from {source_url}: {error}")]
    Bundle {
        version: String,
        source_url: String,
        error: BundleError,
    },
    #[error("the built-in agent bundle: {0}")]
    Builtin(BundleError),
    #[error("cached agent bundle ConfigMap {namespace}/{name}: {message}")]
    Cache {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("{action}: {message}")]
    Kube { action: String, message: String },
    #[error(transparent)]
    Agents(#[from] crate::pass::agents::AgentsError),
}

fn kube_err(action: impl Into<String>, e: kube::Error) -> UpdateError {
    UpdateError::Kube {
        action: action.into(),
        message: crate::apply::describe(&e).0,
    }
}

// ---------------------------------------------------------------------------------------------
// Schedule and selection: pure.

/// The next time after `after` that `schedule` (cron, 5 or 6 fields or a macro, UTC) fires.
pub fn next_check(schedule: &str, after: DateTime<Utc>) -> Result<DateTime<Utc>, UpdateError> {
    let err = |message: String| UpdateError::Schedule {
        schedule: schedule.to_string(),
        message,
    };
    let cron = schedule
        .trim()
        .parse::<croner::Cron>()
        .map_err(|e| err(format!("not a valid cron expression: {e}")))?;
    cron.find_next_occurrence(&after, false)
        .map_err(|e| err(format!("never fires: {e}")))
}

/// What the channel offers a WeaveCloud.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection<'a> {
    /// The newest bundle `agentVersion` allows that is not marked bad.
    pub available: Option<&'a ChannelEntry>,
    /// The bundle to install now, if the agents should change version.
    pub target: Option<&'a ChannelEntry>,
}

/// Choose among `bundles` for agents running `current`. Only versions `range` allows (without a
/// range: any release, no pre-release) and not in `bad` are candidates. The newest candidate is
/// installed when it is newer than `current`, or when `current` itself is no longer allowed (a
/// pin moved below it): the pin wins over "never go back".
pub fn select<'a>(
    bundles: &'a [ChannelEntry],
    range: Option<&semver::VersionReq>,
    bad: &[String],
    current: &semver::Version,
) -> Selection<'a> {
    let allowed = |v: &semver::Version| match range {
        Some(r) => r.matches(v),
        None => v.pre.is_empty(),
    };
    let is_bad = |v: &semver::Version| bad.iter().any(|b| b.trim() == v.to_string());
    let available = bundles
        .iter()
        .filter(|b| allowed(&b.version) && !is_bad(&b.version))
        .max_by(|a, b| a.version.cmp(&b.version));
    let target =
        available.filter(|a| a.version > *current || (a.version != *current && !allowed(current)));
    Selection { available, target }
}

/// The `Ready` condition a reconcile must keep instead of its own healthy one: after a rollback,
/// `Ready=False` ([`REASON_ROLLED_BACK`]) stays until an update succeeds or the spec changes (a
/// new generation: the user acted, e.g. changed the pin). `None`: use the reconcile's own.
pub fn held_rollback(
    status: &WeaveCloudStatus,
    generation: Option<i64>,
    computed: &Condition,
) -> Option<Condition> {
    if computed.status != ConditionStatus::True {
        return None;
    }
    status
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .filter(|c| {
            c.reason == REASON_ROLLED_BACK
                && c.status == ConditionStatus::False
                && c.observed_generation == generation
        })
        .cloned()
}

// ---------------------------------------------------------------------------------------------
// The bundle each WeaveCloud runs, in memory and in the cluster.

/// The `Ready=False` condition of a rollback, per WeaveCloud, until an update succeeds: in
/// memory so that a reconcile that read the status before the rollback cannot lose it. Shared
/// by the updater (writer) and the WeaveCloud controller (reader).
#[derive(Clone, Debug, Default)]
pub struct Rollbacks(Arc<RwLock<HashMap<(String, String), Condition>>>);

impl Rollbacks {
    /// The `Ready` condition the WeaveCloud controller must report instead of its own healthy
    /// one after a rollback (see [`held_rollback`]); `None`: its own. Remembered rollbacks come
    /// first, then the status (after a restart).
    pub fn held_ready(
        &self,
        namespace: &str,
        name: &str,
        status: &WeaveCloudStatus,
        generation: Option<i64>,
        computed: &Condition,
    ) -> Option<Condition> {
        if computed.status != ConditionStatus::True {
            return None;
        }
        let remembered = self
            .0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(namespace.to_string(), name.to_string()))
            .filter(|c| c.observed_generation == generation)
            .cloned();
        remembered.or_else(|| held_rollback(status, generation, computed))
    }

    /// Remember (or with `None` forget) the rollback condition of WeaveCloud `namespace/name`.
    pub fn set(&self, namespace: &str, name: &str, condition: Option<Condition>) {
        let key = (namespace.to_string(), name.to_string());
        let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
        match condition {
            Some(c) => map.insert(key, c),
            None => map.remove(&key),
        };
    }
}

// ---------------------------------------------------------------------------------------------
// The update check.

/// How an update check ended for one WeaveCloud.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// The agents run the newest allowed version.
    UpToDate,
    /// `autoUpdate: false`: the channel was read (for `availableVersion`), nothing changed.
    AutoUpdateOff,
    /// The agents were updated and are healthy.
    Updated { from: String, to: String },
    /// The new bundle was refused before anything changed (digest mismatch, invalid bundle).
    Refused { version: String, reason: String },
    /// The agents did not become healthy: rolled back, the version is marked bad.
    RolledBack {
        from: String,
        to: String,
        reason: String,
    },
    /// The check could not run (channel unreachable, token Secret missing, …); nothing changed.
    Failed { reason: String },
}

/// The result of one check of one WeaveCloud.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateReport {
    pub namespace: String,
    pub name: String,
    /// The version the agents run after the check.
    pub current: String,
    /// The newest version the channel offers that `agentVersion` allows (not marked bad).
    pub available: Option<String>,
    pub outcome: UpdateOutcome,
}

/// Settings of the updater.
#[derive(Clone, Debug)]
pub struct UpdateOptions {
    /// Weft's namespace (cached bundles, inventories).
    pub weft_namespace: String,
    /// How long the agents have to become healthy after an update before it is rolled back.
    pub health_timeout: Duration,
    /// Time between two readiness checks.
    pub poll_interval: Duration,
    /// How channels are reached.
    pub channel: ChannelOptions,
    /// Upper bound of the scheduler's sleep (it also wakes for each WeaveCloud's next check).
    pub rescan_interval: Duration,
}

impl Default for UpdateOptions {
    fn default() -> Self {
        UpdateOptions {
            weft_namespace: "weft-system".to_string(),
            health_timeout: Duration::from_secs(300),
            poll_interval: Duration::from_secs(1),
            channel: ChannelOptions::default(),
            // One LIST of WeaveClouds: a new one gets its `nextUpdateCheck` within seconds.
            rescan_interval: Duration::from_secs(10),
        }
    }
}

/// A handle to ask the scheduler for an update check of every WeaveCloud now; held by the HTTP
/// server (`POST /api/v1/sync?update=true`). Requests made while a check runs coalesce into one.
#[derive(Clone, Debug, Default)]
pub struct UpdateRequests {
    notify: Arc<Notify>,
    pending: Arc<std::sync::atomic::AtomicBool>,
}

impl UpdateRequests {
    /// Ask for a check now.
    pub fn request(&self) {
        self.pending
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Whether a check was asked for since the last call.
    fn take(&self) -> bool {
        self.pending
            .swap(false, std::sync::atomic::Ordering::SeqCst)
    }
}

/// Versions of one WeaveCloud, for `GET /api/v1/status` and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentVersions {
    pub current: Option<String>,
    pub available: Option<String>,
    pub next_update_check: Option<String>,
}

/// Runs update checks: on schedule ([`Updater::run`]), on request ([`Updater::request_check`]),
/// or directly ([`Updater::check`]).
pub struct Updater {
    client: Client,
    bundles: AgentBundles,
    rollbacks: Rollbacks,
    opts: UpdateOptions,
    recorder: Recorder,
    /// One channel source per URL, so a git channel keeps its cache.
    channels: std::sync::Mutex<HashMap<String, ChannelSource>>,
    /// Checks never overlap (a check applies agents and waits).
    running: Mutex<()>,
    /// Per WeaveCloud: its schedule and the next time it fires.
    schedule: std::sync::Mutex<HashMap<WcKey, (String, DateTime<Utc>)>>,
    versions: std::sync::Mutex<HashMap<WcKey, AgentVersions>>,
    requests: UpdateRequests,
    metrics: Option<Arc<Metrics>>,
    status: Option<Arc<RwLock<DaemonStatus>>>,
}

impl Updater {
    pub fn new(client: Client, bundles: AgentBundles, opts: UpdateOptions) -> Updater {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "weft".to_string(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Updater {
            client,
            bundles,
            rollbacks: Rollbacks::default(),
            opts,
            recorder,
            channels: Default::default(),
            running: Mutex::new(()),
            schedule: Default::default(),
            versions: Default::default(),
            requests: UpdateRequests::default(),
            metrics: None,
            status: None,
        }
    }

    /// Report versions into the daemon's metrics and status as well.
    pub fn with_daemon(
        mut self,
        metrics: Arc<Metrics>,
        status: Arc<RwLock<DaemonStatus>>,
    ) -> Updater {
        self.metrics = Some(metrics);
        self.status = Some(status);
        self
    }

    /// The bundle store this updater changes.
    pub fn bundles(&self) -> &AgentBundles {
        &self.bundles
    }

    /// The rollbacks this updater records (the WeaveCloud controller reports them).
    pub fn rollbacks(&self) -> &Rollbacks {
        &self.rollbacks
    }

    /// Take check requests from `requests` (the handle the HTTP server holds), instead of a
    /// handle of its own.
    pub fn with_requests(mut self, requests: UpdateRequests) -> Updater {
        self.requests = requests;
        self
    }

    /// Ask the scheduler to check every WeaveCloud now (`POST /api/v1/sync?update=true`).
    pub fn request_check(&self) {
        self.requests.request();
    }

    /// Current, available and next-check per WeaveCloud (`namespace/name`).
    pub fn versions(&self) -> BTreeMap<String, AgentVersions> {
        self.versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((ns, n), v)| (format!("{ns}/{n}"), v.clone()))
            .collect()
    }

    fn record_versions(&self, ns: &str, name: &str, f: impl FnOnce(&mut AgentVersions)) {
        let v = {
            let mut map = self.versions.lock().unwrap_or_else(|p| p.into_inner());
            let entry = map.entry((ns.to_string(), name.to_string())).or_default();
            f(entry);
            entry.clone()
        };
        if let Some(m) = &self.metrics {
            m.set_agent_version(ns, name, v.current.as_deref());
            m.set_agent_available(ns, name, v.available.as_deref());
        }
        if let Some(status) = &self.status {
            let mut s = status.write().unwrap_or_else(|p| p.into_inner());
            let key = format!("WeaveCloud/{ns}/{name}");
            if let Some(mut owner) = s.owners.get(&key).cloned() {
                if v.current.is_some() {
                    owner.version = v.current.clone();
                }
                owner.available_version = v.available.clone();
                owner.next_update_check = v.next_update_check.clone();
                s.set_owner(owner);
            }
        }
    }

    fn channel(&self, url: &str) -> Result<ChannelSource, UpdateError> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = map.get(url) {
            return Ok(c.clone());
        }
        let c = ChannelSource::new(url, self.opts.channel.clone())?;
        map.insert(url.to_string(), c.clone());
        Ok(c)
    }

    async fn event(&self, wc: &WeaveCloud, type_: EventType, reason: &str, note: String) {
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: "AgentUpdate".to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &wc.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "cannot publish event");
        }
    }

    /// Run one update check of `wc` now (whatever its schedule), and record the result in its
    /// status, events, metrics and the daemon status.
    pub async fn check(&self, wc: &WeaveCloud) -> UpdateReport {
        let _one_at_a_time = self.running.lock().await;
        let ns = wc.namespace().unwrap_or_default();
        let name = wc.name_any();
        let span = tracing::info_span!("agent_update", weavecloud = %format!("{ns}/{name}"));
        let report = match self.check_inner(wc, &ns, &name).instrument(span).await {
            Ok(r) => r,
            Err(e) => {
                let current = self
                    .bundles
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

    async fn check_inner(
        &self,
        wc: &WeaveCloud,
        ns: &str,
        name: &str,
    ) -> Result<UpdateReport, UpdateError> {
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
        let previous = self.bundles.active(ns, name).await?;
        let status = wc.status.clone().unwrap_or_default();
        let report =
            |outcome: UpdateOutcome, current: &semver::Version, available: Option<String>| {
                UpdateReport {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                    current: current.to_string(),
                    available,
                    outcome,
                }
            };

        // The candidates: the channel's bundles, or the built-in one without a channel.
        let builtin = ActiveBundle::builtin()?;
        let (source, entries) = match general
            .wc_poll_url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
        {
            Some(url) => {
                let source = self.channel(url)?;
                let channel = source.fetch_index().await?;
                (Some(source), channel.bundles)
            }
            None => (
                None,
                vec![ChannelEntry {
                    version: builtin.version().clone(),
                    url: BUILTIN_SOURCE.to_string(),
                    sha256: String::new(),
                }],
            ),
        };
        let selection = select(
            &entries,
            range.as_ref(),
            &status.bad_versions,
            previous.version(),
        );
        let available = selection.available.map(|e| e.version.to_string());
        self.patch_status(wc, |s| {
            s.available_version = available.clone();
        })
        .await?;
        if !general.auto_update {
            return Ok(report(
                UpdateOutcome::AutoUpdateOff,
                previous.version(),
                available,
            ));
        }
        let Some(target) = selection.target else {
            return Ok(report(
                UpdateOutcome::UpToDate,
                previous.version(),
                available,
            ));
        };

        // Fetch and verify; a refusal changes nothing.
        let candidate = match &source {
            None => builtin,
            Some(source) => match self.fetch_candidate(source, target).await {
                Ok(c) => c,
                Err(reason) => {
                    self.event(
                        wc,
                        EventType::Warning,
                        EVENT_REFUSED,
                        format!("agent bundle {} refused: {reason}", target.version),
                    )
                    .await;
                    return Ok(report(
                        UpdateOutcome::Refused {
                            version: target.version.to_string(),
                            reason,
                        },
                        previous.version(),
                        available,
                    ));
                }
            },
        };

        let inputs = self.agent_inputs(wc, &previous.bundle).await?;
        let from = previous.version().to_string();
        let to = candidate.version().to_string();
        tracing::info!(%from, %to, "updating agents");
        // The WeaveCloud controller renders with the active bundle: switch it first, so that a
        // reconcile during the rollout does not undo it.
        self.bundles.set_memory(ns, name, candidate.clone());
        match self.roll_out(wc, &candidate.bundle, &inputs).await {
            Ok(()) => {
                self.bundles.persist(ns, name, &candidate).await?;
                self.rollbacks.set(ns, name, None);
                let now = now_rfc3339();
                let generation = wc.metadata.generation;
                let message = format!("agents updated from bundle {from} to {to} and healthy");
                self.patch_status(wc, |s| {
                    s.agent_version = Some(to.clone());
                    // Ends a rollback's `Ready=False` (see `held_rollback`).
                    let mut c = Condition::new(
                        READY,
                        ConditionStatus::True,
                        EVENT_UPDATED,
                        message.clone(),
                    );
                    c.observed_generation = generation;
                    set_condition(&mut s.conditions, c, &now);
                })
                .await?;
                self.event(
                    wc,
                    EventType::Normal,
                    EVENT_UPDATED,
                    format!("agents updated from bundle {from} to {to}"),
                )
                .await;
                Ok(report(
                    UpdateOutcome::Updated { from, to },
                    candidate.version(),
                    available,
                ))
            }
            Err(failure) => {
                tracing::warn!(%from, %to, reason = %failure, "agents not healthy; rolling back");
                self.bundles.set_memory(ns, name, previous.clone());
                let rollback = self.roll_out(wc, &previous.bundle, &inputs).await;
                let mut message = format!(
                    "agent bundle {to} did not become healthy: {failure}; rolled back to {from} and marked {to} bad"
                );
                if let Err(e) = &rollback {
                    message.push_str(&format!(
                        "; the rollback to {from} is not healthy either: {e}"
                    ));
                }
                let now = now_rfc3339();
                let bad = to.clone();
                let available_after = select(
                    &entries,
                    range.as_ref(),
                    &[status.bad_versions.clone(), vec![bad.clone()]].concat(),
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
                self.rollbacks.set(ns, name, Some(condition.clone()));
                self.patch_status(wc, |s| {
                    if !s.bad_versions.contains(&bad) {
                        s.bad_versions.push(bad.clone());
                    }
                    s.agent_version = Some(from.clone());
                    s.available_version = available_after.clone();
                    set_condition(&mut s.conditions, condition.clone(), &now);
                })
                .await?;
                self.event(wc, EventType::Warning, EVENT_ROLLED_BACK, message.clone())
                    .await;
                Ok(report(
                    UpdateOutcome::RolledBack {
                        from: to,
                        to: from,
                        reason: message,
                    },
                    previous.version(),
                    available_after,
                ))
            }
        }
    }

    /// Download, verify and parse one bundle; the error says why it is refused.
    async fn fetch_candidate(
        &self,
        source: &ChannelSource,
        entry: &ChannelEntry,
    ) -> Result<ActiveBundle, String> {
        let fetched = source
            .fetch_bundle(entry)
            .await
            .map_err(|e| e.to_string())?;
        let bundle = Bundle::from_files(fetched.files).map_err(|e| {
            UpdateError::Bundle {
                version: entry.version.to_string(),
                source_url: source.display_url().to_string(),
                error: e,
            }
            .to_string()
        })?;
        if bundle.version != entry.version {
            return Err(format!(
                "the channel lists it as {}, but its bundle.yaml says version {}",
                entry.version, bundle.version
            ));
        }
        Ok(ActiveBundle {
            bundle: Arc::new(bundle),
            archive: Some(Arc::new(fetched.archive)),
            sha256: Some(fetched.sha256),
            source: source.display_url().to_string(),
        })
    }

    /// What the renderer needs from the cluster, read as `weft sync` and the WeaveCloud
    /// controller read it (one function, so all render the same objects).
    async fn agent_inputs(
        &self,
        wc: &WeaveCloud,
        running: &Bundle,
    ) -> Result<AgentInputs, UpdateError> {
        Ok(crate::pass::agents::inputs(&self.client, wc, running)
            .await?
            .0)
    }

    /// Render `wc` with its active bundle, apply, prune and wait for the agents' health: what
    /// the agents should be without an update (a first install, or after a restart).
    pub async fn apply_active(&self, wc: &WeaveCloud) -> Result<semver::Version, UpdateError> {
        let ns = wc.namespace().unwrap_or_default();
        let active = self.bundles.active(&ns, &wc.name_any()).await?;
        let inputs = self.agent_inputs(wc, &active.bundle).await?;
        self.roll_out(wc, &active.bundle, &inputs)
            .await
            .map_err(|message| UpdateError::Kube {
                action: format!("applying agent bundle {}", active.version()),
                message,
            })?;
        Ok(active.version().clone())
    }

    /// Render `wc` with `bundle`, apply, prune and wait for health with the apply engine.
    async fn roll_out(
        &self,
        wc: &WeaveCloud,
        bundle: &Bundle,
        inputs: &AgentInputs,
    ) -> Result<(), String> {
        let ns = wc.namespace().unwrap_or_default();
        let rendered = render_agents(wc, bundle, inputs).map_err(|e| e.to_string())?;
        let owner = crate::pass::agents::owner_of(&ns, &wc.name_any());
        let set = DesiredSet::for_owners(rendered.objects, [owner].into());
        let opts = PassOptions {
            weft_namespace: self.opts.weft_namespace.clone(),
            default_namespace: ns,
            timeout: self.opts.health_timeout,
            poll_interval: self.opts.poll_interval,
            ..PassOptions::default()
        };
        // Detached: the engine's future cannot be proven `Send`, and the scheduler is spawned.
        let done = crate::daemon::reconcile_detached(
            self.client.clone(),
            Arc::new(set),
            opts,
            Arc::new(|_| {}),
            std::future::pending(),
        )
        .await?;
        match done {
            Some((_changes, None)) => Ok(()),
            Some((_changes, Some(e))) => Err(e.to_string()),
            None => Err("the rollout was cancelled".to_string()),
        }
    }

    /// Read-modify-write of the update fields of `wc`'s status (merge patch of those fields).
    async fn patch_status(
        &self,
        wc: &WeaveCloud,
        edit: impl FnOnce(&mut WeaveCloudStatus),
    ) -> Result<(), UpdateError> {
        let ns = wc.namespace().unwrap_or_default();
        let name = wc.name_any();
        let api: Api<WeaveCloud> = Api::namespaced(self.client.clone(), &ns);
        let live = api
            .get_status(&name)
            .await
            .map_err(|e| kube_err(format!("reading WeaveCloud {ns}/{name}"), e))?;
        let before = live.status.unwrap_or_default();
        let mut after = before.clone();
        edit(&mut after);
        if after == before {
            return Ok(());
        }
        let patch = json!({"status": {
            "agentVersion": after.agent_version,
            "availableVersion": after.available_version,
            "badVersions": after.bad_versions,
            "nextUpdateCheck": after.next_update_check,
            "conditions": after.conditions,
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| kube_err(format!("writing the status of WeaveCloud {ns}/{name}"), e))?;
        Ok(())
    }

    /// The scheduler: checks each WeaveCloud when its `updateSchedule` fires (and every one at
    /// once after [`Updater::request_check`]), and keeps `status.nextUpdateCheck` current. Runs
    /// until `stop` turns true. Run it on the leader only.
    pub async fn run(&self, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                return;
            }
            let forced = self.requests.take();
            let wake_at = match self.tick(forced).await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(error = %e, "agent update scheduler: cannot list WeaveClouds");
                    None
                }
            };
            let now = Utc::now();
            let mut sleep = self.opts.rescan_interval;
            if let Some(at) = wake_at {
                let until = (at - now).to_std().unwrap_or(Duration::ZERO);
                sleep = sleep.min(until);
            }
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = self.requests.notify.notified() => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One look at every WeaveCloud: run the checks that are due; the earliest next check.
    async fn tick(&self, forced: bool) -> Result<Option<DateTime<Utc>>, UpdateError> {
        let api: Api<WeaveCloud> = Api::all(self.client.clone());
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| kube_err("listing WeaveClouds", e))?;
        let mut earliest: Option<DateTime<Utc>> = None;
        let mut seen = Vec::new();
        for wc in list.items {
            if wc.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let ns = wc.namespace().unwrap_or_default();
            let name = wc.name_any();
            let key = (ns.clone(), name.clone());
            seen.push(key.clone());
            let schedule = wc.spec.general.update_schedule.clone();
            let now = Utc::now();
            let known = self
                .schedule
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                .cloned();
            let next = match known {
                Some((s, at)) if s == schedule => at,
                _ => match next_check(&schedule, now) {
                    Ok(at) => at,
                    Err(e) => {
                        tracing::warn!(weavecloud = %format!("{ns}/{name}"), error = %e, "no agent update schedule");
                        continue;
                    }
                },
            };
            let checked = forced || next <= now;
            let next = if checked {
                self.check(&wc).await;
                match next_check(&schedule, Utc::now()) {
                    Ok(at) => at,
                    Err(_) => continue,
                }
            } else {
                next
            };
            self.schedule
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, (schedule, next));
            let shown = next.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            self.record_versions(&ns, &name, |v| v.next_update_check = Some(shown.clone()));
            // The listed copy is current unless a check just ran: skip the read when it agrees.
            let recorded = wc
                .status
                .as_ref()
                .and_then(|s| s.next_update_check.as_deref());
            if !checked && recorded == Some(shown.as_str()) {
                earliest = Some(earliest.map_or(next, |e| e.min(next)));
                continue;
            }
            if let Err(e) = self
                .patch_status(&wc, |s| s.next_update_check = Some(shown.clone()))
                .await
            {
                tracing::warn!(weavecloud = %format!("{ns}/{name}"), error = %e, "cannot record nextUpdateCheck");
            }
            earliest = Some(earliest.map_or(next, |e| e.min(next)));
        }
        // Forget WeaveClouds that are gone (and their metrics).
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
        if let Some(m) = &self.metrics {
            for (ns, name) in gone {
                m.set_agent_version(&ns, &name, None);
                m.set_agent_available(&ns, &name, None);
            }
        }
        Ok(earliest)
    }
}

/// Pack a bundle's files into the archive a channel serves (deterministic), with its sha256.
pub fn bundle_archive(files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<(Vec<u8>, String)> {
    let archive = pack_archive(files)?;
    let digest = sha256_hex(&archive);
    Ok((archive, digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::channel::{unpack_archive, ChannelLimits};
    use chrono::TimeZone;

    fn entry(v: &str) -> ChannelEntry {
        ChannelEntry {
            version: semver::Version::parse(v).unwrap(),
            url: format!("https://h/{v}.tar.gz"),
            sha256: "0".repeat(64),
        }
    }

    fn v(s: &str) -> semver::Version {
        semver::Version::parse(s).unwrap()
    }

    fn versions(sel: &Selection<'_>) -> (Option<String>, Option<String>) {
        (
            sel.available.map(|e| e.version.to_string()),
            sel.target.map(|e| e.version.to_string()),
        )
    }

    fn pair(a: Option<&str>, t: Option<&str>) -> (Option<String>, Option<String>) {
        (a.map(str::to_string), t.map(str::to_string))
    }

    #[test]
    fn the_schedule_is_evaluated_in_utc() {
        let at = Utc.with_ymd_and_hms(2026, 3, 1, 10, 15, 30).unwrap();
        assert_eq!(
            next_check("0 * * * *", at).unwrap(),
            Utc.with_ymd_and_hms(2026, 3, 1, 11, 0, 0).unwrap()
        );
        assert_eq!(
            next_check("30 2 * * *", at).unwrap(),
            Utc.with_ymd_and_hms(2026, 3, 2, 2, 30, 0).unwrap()
        );
        assert_eq!(
            next_check("@daily", at).unwrap(),
            Utc.with_ymd_and_hms(2026, 3, 2, 0, 0, 0).unwrap()
        );
        // Six fields: seconds first.
        assert_eq!(
            next_check("*/10 * * * * *", at).unwrap(),
            Utc.with_ymd_and_hms(2026, 3, 1, 10, 15, 40).unwrap()
        );
        // Exactly on an occurrence: the next one, not now again.
        let on = Utc.with_ymd_and_hms(2026, 3, 1, 11, 0, 0).unwrap();
        assert_eq!(
            next_check("0 * * * *", on).unwrap(),
            Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
        );
        let e = next_check("every hour", at).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "`spec.general.updateSchedule` `every hour`: not a valid cron expression"
            ),
            "{e}"
        );
    }

    #[test]
    fn the_newest_allowed_bundle_is_chosen() {
        let all = [
            entry("1.0.0"),
            entry("1.2.0"),
            entry("1.1.0"),
            entry("2.0.0"),
        ];
        let s = select(&all, None, &[], &v("1.0.0"));
        assert_eq!(versions(&s), pair(Some("2.0.0"), Some("2.0.0")));
        let pin = parse_version_range("1.x").unwrap();
        let s = select(&all, Some(&pin), &[], &v("1.0.0"));
        assert_eq!(versions(&s), pair(Some("1.2.0"), Some("1.2.0")));
        let s = select(&all, Some(&pin), &[], &v("1.2.0"));
        assert_eq!(versions(&s), pair(Some("1.2.0"), None));
    }

    #[test]
    fn bad_versions_are_skipped() {
        let all = [entry("1.0.0"), entry("1.1.0"), entry("1.2.0")];
        let s = select(&all, None, &["1.2.0".to_string()], &v("1.0.0"));
        assert_eq!(versions(&s), pair(Some("1.1.0"), Some("1.1.0")));
        let s = select(
            &all,
            None,
            &["1.2.0".to_string(), "1.1.0".to_string()],
            &v("1.0.0"),
        );
        assert_eq!(versions(&s), pair(Some("1.0.0"), None));
    }

    #[test]
    fn never_downgrade_unless_the_pin_says_so() {
        let all = [entry("1.0.0"), entry("1.1.0")];
        // Running 1.3.0 (from an older channel state): nothing newer, stay.
        let s = select(&all, None, &[], &v("1.3.0"));
        assert_eq!(versions(&s), pair(Some("1.1.0"), None));
        // A pin below the running version moves the agents down to the pin.
        let pin = parse_version_range("~1.0").unwrap();
        let s = select(&all, Some(&pin), &[], &v("1.3.0"));
        assert_eq!(versions(&s), pair(Some("1.0.0"), Some("1.0.0")));
        // Nothing allowed at all: stay on what runs.
        let pin = parse_version_range(">=3").unwrap();
        let s = select(&all, Some(&pin), &[], &v("1.0.0"));
        assert_eq!(versions(&s), pair(None, None));
    }

    #[test]
    fn prereleases_need_a_range_that_asks_for_them() {
        let all = [entry("1.0.0"), entry("1.1.0-rc.1")];
        let s = select(&all, None, &[], &v("1.0.0"));
        assert_eq!(versions(&s), pair(Some("1.0.0"), None));
        let pin = parse_version_range(">=1.1.0-rc.0").unwrap();
        let s = select(&all, Some(&pin), &[], &v("1.0.0"));
        assert_eq!(versions(&s), pair(Some("1.1.0-rc.1"), Some("1.1.0-rc.1")));
    }

    #[test]
    fn a_rollback_holds_ready_false_until_an_update_or_a_spec_change() {
        let rolled_back = {
            let mut c = Condition::new(
                READY,
                ConditionStatus::False,
                REASON_ROLLED_BACK,
                "1.2.0 failed",
            );
            c.observed_generation = Some(3);
            c
        };
        let status = WeaveCloudStatus {
            conditions: vec![rolled_back.clone()],
            ..Default::default()
        };
        let healthy = Condition::new(READY, ConditionStatus::True, "Reconciled", "");
        assert_eq!(held_rollback(&status, Some(3), &healthy), Some(rolled_back));
        // The user changed the spec: the reconcile's own condition.
        assert_eq!(held_rollback(&status, Some(4), &healthy), None);
        // A reconcile that is itself not ready reports its own reason.
        let failing = Condition::new(READY, ConditionStatus::False, "TokenMissing", "");
        assert_eq!(held_rollback(&status, Some(3), &failing), None);
        // After a successful update the condition is no longer the rollback's.
        let updated = WeaveCloudStatus {
            conditions: vec![Condition::new(
                READY,
                ConditionStatus::True,
                EVENT_UPDATED,
                "",
            )],
            ..Default::default()
        };
        assert_eq!(held_rollback(&updated, Some(3), &healthy), None);
    }

    #[test]
    fn cache_names_are_per_weavecloud_and_valid() {
        let a = cache_configmap_name("weave", "weave-cloud");
        let b = cache_configmap_name("weave2", "weave-cloud");
        assert_ne!(a, b);
        assert!(a.len() <= 63 && a.starts_with("weft-agent-bundle-"), "{a}");
    }

    #[test]
    fn a_bundle_archive_digest_matches_its_bytes() {
        let files: BTreeMap<String, Vec<u8>> =
            [("bundle.yaml".to_string(), b"version: 1.0.0\n".to_vec())].into();
        let (archive, digest) = bundle_archive(&files).unwrap();
        assert_eq!(digest, sha256_hex(&archive));
        assert_eq!(
            unpack_archive(&archive, &ChannelLimits::default(), "t").unwrap(),
            files
        );
    }
}
