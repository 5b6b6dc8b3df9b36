//! Agent auto-update: on each WeaveCloud's `updateSchedule` (cron, UTC), look at its agent
//! channel, pick the newest bundle `agentVersion` allows that is not marked bad, verify its
//! sha256, render, apply, and wait for the agents to be healthy. If they are not healthy within
//! the timeout, roll back to the previous bundle, mark the version bad (`status.badVersions`, not
//! retried), set `Ready=False` with the reason and emit an event.
//!
//! The bundle each WeaveCloud runs is the daemon state's [`AgentBundles`]: in memory, and kept in
//! the cluster as a ConfigMap in Weft's namespace (the archive, its version and digest), so a
//! restarted Weft renders the same version instead of going back to the built-in one. The
//! WeaveCloud controller renders with [`AgentBundles::active`]. A bundle the cache cannot keep is
//! refused before anything changes.
//!
//! The updater is not a loop of its own: a check is a step of the WeaveCloud's reconcile
//! (`daemon::weavecloud`), which kube-runtime runs once per object at a time, so a roll-out and
//! its rollback never run beside another render, apply or prune of the same agents, and the
//! reconcile is requeued at the next check (`status.nextUpdateCheck`).
//!
//! - [`select`]: the pure parts (schedule, selection), with unit tests;
//! - [`check`](Updater::check): one check of one WeaveCloud;
//! - [`when_due`](Updater::when_due): the reconcile's step (a check when due or asked for).

mod check;
mod leftovers;
mod schedule;
pub mod select;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;

use crate::daemon::events::Note;
use kube::ResourceExt;
use serde_json::{json, Map, Value};
use tokio::sync::Mutex;

use super::shutdown::Shutdown;
use super::state::DaemonState;
use crate::api::weavecloud::{WeaveCloud, WeaveCloudStatus};
use crate::pass::{PassError, PassInput, PassSettings};
use crate::render::bundle::BundleError;
use crate::render::RenderError;
use crate::source::channel::{ChannelError, ChannelOptions, ChannelSource};

pub use super::rollbacks::{held_rollback, REASON_ROLLED_BACK};
pub use super::update_requests::UpdateRequests;
pub use crate::pass::agents::{
    cache_configmap_name, ActiveBundle, AgentBundles, ARCHIVE_KEY, BUILTIN_SOURCE, DIGEST_KEY,
    MAX_CACHED_ARCHIVE_BYTES, SOURCE_KEY, VERSION_KEY,
};
pub use schedule::next_and_due;
pub use select::{bundle_archive, next_check, select, Selection};

/// `(namespace, name)` of a WeaveCloud.
type WcKey = (String, String);

/// Event reasons.
pub const EVENT_UPDATED: &str = "AgentsUpdated";
pub const EVENT_REFUSED: &str = "AgentBundleRefused";
pub const EVENT_ROLLED_BACK: &str = "AgentUpdateRolledBack";
pub const EVENT_CHECK_FAILED: &str = "AgentUpdateCheckFailed";

/// Why an update check could not do its work, or why a bundle was refused.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("`spec.general.updateSchedule` `{schedule}`: {message}")]
    Schedule { schedule: String, message: String },
    #[error("`spec.general.agentVersion` `{range}` is not a semver range: {message}")]
    Range { range: String, message: String },
    #[error("{0}")]
    Channel(#[from] ChannelError),
    #[error("{0}")]
    ChannelRefused(#[from] crate::source::fetch_policy::ChannelRefused),
    #[error("bundle {version}: `url: {url}` is not allowed by --allowed-channels ({allowed}): the channel's bundles are fetched only from where a channel may be; nothing was fetched")]
    BundleUrlRefused {
        version: semver::Version,
        url: String,
        allowed: String,
    },
    #[error("agent bundle {version} from {source_url}: {error}")]
    Bundle {
        version: String,
        source_url: String,
        #[source]
        error: BundleError,
    },
    #[error("the channel lists it as {listed}, but its bundle.yaml says version {actual}")]
    VersionMismatch {
        listed: semver::Version,
        actual: semver::Version,
    },
    #[error("{action}: {}", crate::apply::describe(source).0)]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Agents(#[from] crate::pass::agents::AgentsError),
    #[error(
        "reading the root's inventory, which says which WeaveClouds the operator applied: {0}"
    )]
    Trust(#[source] Box<crate::apply::ApplyError>),
    #[error("WeaveCloud {namespace}/{name} was deleted during the check: nothing rolled out")]
    Gone { namespace: String, name: String },
    #[error("the WeaveCloud changed while bundle {version} was fetched (autoUpdate, agentVersion, wcPollUrl or badVersions): it is not rolled out; the next check decides again")]
    Superseded { version: semver::Version },
    #[error("applying agent bundle {version}: {source}")]
    Rollout {
        version: semver::Version,
        #[source]
        source: Box<RolloutError>,
    },
}

/// Why agents rendered with a bundle did not roll out healthy.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("{0}")]
    Render(#[from] RenderError),
    #[error("{0}")]
    Pass(#[from] PassError),
    #[error("{0}")]
    Agents(#[from] crate::pass::agents::AgentsError),
    #[error("the rollout was abandoned: the daemon is stopping")]
    Abandoned,
}

fn kube_err(action: impl Into<String>, source: kube::Error) -> UpdateError {
    UpdateError::Kube {
        action: action.into(),
        source,
    }
}

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
    /// How long the agents have to become healthy after an update before it is rolled back.
    pub health_timeout: Duration,
    /// How channels are reached.
    pub channel: ChannelOptions,
    /// Which channels a WeaveCloud may name (`--allowed-channels`).
    pub allowed_channels: crate::source::fetch_policy::ChannelPolicy,
    /// The daemon's pass settings (`weft run`'s `--max-prune-fraction`, `--force-prune`,
    /// `--concurrency` …): roll-outs and rollbacks run the engine with them; `weft_namespace`
    /// holds the cached bundles.
    pub pass: Arc<PassSettings>,
}

impl UpdateOptions {
    /// The input of a roll-out or rollback of agents in `namespace` (run with the daemon's
    /// [`pass`](Self::pass) settings): their namespace, the health timeout, and writes.
    pub fn rollout_input(&self, namespace: &str) -> PassInput {
        PassInput {
            namespace: Some(namespace.to_string()),
            timeout: Some(self.health_timeout),
            ..PassInput::default()
        }
    }
}

impl Default for UpdateOptions {
    fn default() -> Self {
        UpdateOptions {
            health_timeout: Duration::from_secs(300),
            channel: ChannelOptions::default(),
            allowed_channels: Default::default(),
            pass: Arc::default(),
        }
    }
}

/// Versions of one WeaveCloud, for `GET /api/v1/status` and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentVersions {
    pub current: Option<String>,
    pub available: Option<String>,
    pub next_update_check: Option<String>,
}

/// Runs update checks: as a step of a WeaveCloud's reconcile ([`Updater::when_due`]: on schedule,
/// or on request through the state's [`UpdateRequests`]), or directly ([`Updater::check`]).
pub struct Updater {
    state: DaemonState,
    opts: UpdateOptions,
    /// Running rollouts are abandoned the grace period after a stop request.
    shutdown: Shutdown,
    /// One channel source per URL, so a git channel keeps its cache.
    channels: std::sync::Mutex<HashMap<String, ChannelSource>>,
    /// Checks of different WeaveClouds never overlap (a check applies agents and waits for
    /// their health): a limit on the work at once, not a lock between writers (each
    /// WeaveCloud's reconcile is its only writer).
    running: Mutex<()>,
    versions: std::sync::Mutex<HashMap<WcKey, AgentVersions>>,
}

impl Updater {
    pub fn new(state: DaemonState, opts: UpdateOptions) -> Updater {
        Updater {
            state,
            opts,
            shutdown: Shutdown::never(),
            channels: Default::default(),
            running: Mutex::new(()),
            versions: Default::default(),
        }
    }

    /// Abandon running rollouts when `shutdown` says so.
    pub fn with_shutdown(mut self, shutdown: Shutdown) -> Updater {
        self.shutdown = shutdown;
        self
    }

    /// The bundle store this updater changes.
    pub fn bundles(&self) -> &AgentBundles {
        self.state.bundles()
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

    /// Change the versions known of WeaveCloud `ns/name`, and show them in metrics and in the
    /// daemon status (in the entry the WeaveCloud controller made).
    fn record_versions(&self, ns: &str, name: &str, f: impl FnOnce(&mut AgentVersions)) {
        let v = {
            let mut map = self.versions.lock().unwrap_or_else(|p| p.into_inner());
            let entry = map.entry((ns.to_string(), name.to_string())).or_default();
            f(entry);
            entry.clone()
        };
        let metrics = self.state.metrics();
        metrics.set_agent_version(ns, name, v.current.as_deref());
        metrics.set_agent_available(ns, name, v.available.as_deref());
        self.state.update_status(|s| {
            let key = format!("WeaveCloud/{ns}/{name}");
            if let Some(mut owner) = s.owners.get(&key).cloned() {
                if v.current.is_some() {
                    owner.version = v.current.clone();
                }
                owner.available_version = v.available.clone();
                owner.next_update_check = v.next_update_check.clone();
                s.set_owner(owner);
            }
        });
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
        let event = Note {
            warning: type_ == EventType::Warning,
            reason,
            action: "AgentUpdate",
            text: &note,
            related: None,
        };
        self.state.events().publish(wc, event).await;
    }

    /// Read-modify-write of the update check's fields of `wc`'s status: a merge patch of the fields
    /// `edit` changed, nothing else (see `daemon::state` for who writes which field).
    async fn patch_status(
        &self,
        wc: &WeaveCloud,
        edit: impl FnOnce(&mut WeaveCloudStatus),
    ) -> Result<(), UpdateError> {
        let ns = wc.namespace().unwrap_or_default();
        let name = wc.name_any();
        let api: Api<WeaveCloud> = Api::namespaced(self.state.client().clone(), &ns);
        let live = api
            .get_status(&name)
            .await
            .map_err(|e| kube_err(format!("reading WeaveCloud {ns}/{name}"), e))?;
        let before = live.status.unwrap_or_default();
        let mut after = before.clone();
        edit(&mut after);
        let changed = changed_fields(&before, &after);
        if changed.is_empty() {
            return Ok(());
        }
        let patch = json!({ "status": changed });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| kube_err(format!("writing the status of WeaveCloud {ns}/{name}"), e))?;
        Ok(())
    }
}

/// The updater's status fields that differ between `before` and `after`, as merge-patch values
/// (`null` removes one).
fn changed_fields(before: &WeaveCloudStatus, after: &WeaveCloudStatus) -> Map<String, Value> {
    let mut out = Map::new();
    let mut field = |key: &str, b: Value, a: Value| {
        if a != b {
            out.insert(key.to_string(), a);
        }
    };
    field(
        "agentVersion",
        json!(before.agent_version),
        json!(after.agent_version),
    );
    field(
        "availableVersion",
        json!(before.available_version),
        json!(after.available_version),
    );
    field(
        "badVersions",
        json!(before.bad_versions),
        json!(after.bad_versions),
    );
    field(
        "nextUpdateCheck",
        json!(before.next_update_check),
        json!(after.next_update_check),
    );
    // The update verdict (`Ready`); see `daemon::state`.
    field(
        "conditions",
        json!(before.conditions),
        json!(after.conditions),
    );
    out
}
