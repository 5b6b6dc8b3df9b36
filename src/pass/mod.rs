//! One pass of both layers: load → render → apply → prune → wait → report.
//!
//! The fetch happens before (the caller turns a URL or a directory into a [`Snapshot`]); a pass
//! that cannot load or render stops before anything is applied or pruned.
//!
//! - [`prepare`]: the single load → charts → agents' inputs → render, shared by every command;
//! - [`armada`]: Armada's semantics (chart waits, `protected`, `upgrade.pre.delete`,
//!   `driftPolicy: report`) turned into the engine's policy, and the reports of chart failures;
//! - [`helm`](mod@helm): the Helm charts rendered by helm, before the pure render;
//! - [`helm_hooks`]: Helm hooks run on a chart's install or upgrade;
//! - [`engine`]: the staged run of the generic apply engine (stages, waves, prune, inventories);
//! - [`driver`]: the one pass driver (hold suspended → takeover → engine) of `weft sync` and
//!   the daemon's sync root;
//! - [`diff`](mod@diff): `weft diff`;
//! - [`agents`]: the WeaveClouds' inputs read from the cluster.
//!
//! The result is one [`ChangeSet`] (plus the error that stopped the pass, if any).

pub mod agents;
pub mod armada;
pub mod diff;
pub mod driver;
pub mod engine;
pub mod helm;
pub mod helm_hooks;
pub mod inventories;
pub mod prepare;
pub mod shard;
pub mod suspend;
pub mod takeover;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;

use crate::api::ObjectRef;
use crate::apply::apply_policy::ApplyPolicy;
use crate::apply::changeset::{Change, ChangeSet};
use crate::apply::ApplyError;
use crate::helm::{HelmLocation, HelmRenderer};
use crate::load::{Diagnostics, LoadError};
use crate::render::{
    AgentLayer, DesiredSet, Owner, RenderError, RenderOptions, CUSTOM_RESOURCE_KINDS,
};
use crate::sops::{Decryption, SopsError};
use crate::source::chart;
use crate::source::Snapshot;
use agents::AgentBundles;
pub use diff::diff_pass;
use prepare::{prepare, ClusterInputs};

/// What every pass is configured with, once (the command's flags and the services they name):
/// built by the command line (`cli::args`), shared as `Arc<PassSettings>` by the daemon's loops,
/// never changed for one pass. What differs from pass to pass is its [`PassInput`].
#[derive(Clone, Debug)]
pub struct PassSettings {
    /// Name of the sync root (its owner id goes into every label).
    pub root_name: String,
    /// Weft's own namespace (inventories, root records, cached bundles).
    pub weft_namespace: String,
    /// Namespace of namespaced objects that do not say one (a pass of a custom resource's
    /// children puts them in its owner's instead: [`PassInput::namespace`]).
    pub default_namespace: String,
    /// Bound of each readiness wait (a pass may set its own: [`PassInput::timeout`]).
    pub timeout: Duration,
    pub max_prune_fraction: f64,
    /// `--force-prune`: every pass may prune past the fraction guard (one pass alone:
    /// [`PassInput::force_prune`]).
    pub force_prune: bool,
    /// `--allow-empty`: a render with no object at all may prune the root's whole inventory.
    pub allow_empty: bool,
    /// Calls at the same time within a stage.
    pub concurrency: usize,
    /// Time between two readiness checks.
    pub poll_interval: Duration,
    /// Where the config repository came from (a URL or a directory): relative git chart
    /// locations resolve against it.
    pub repo_location: String,
    /// Cache of fetched chart sources (default: the user's cache directory).
    pub chart_cache_dir: Option<std::path::PathBuf>,
    /// What git and tar chart locations may be (the daemon: `--allowed-chart-sources`).
    pub chart_sources: crate::source::fetch_policy::ChartSourcePolicy,
    /// How chart sources are fetched: the config repository's credentials, `--ca-file`,
    /// `--fetch-timeout`.
    pub chart_fetch: chart::FetchSettings,
    /// Renders Helm charts (`$WEFT_HELM`, else `helm` on `PATH`); shared by every pass made with
    /// these settings, so that its render cache lives across passes (an unchanged pass starts
    /// no helm).
    pub helm: Arc<HelmRenderer>,
    /// The age identities that decrypt the repository's SOPS files (a key file, a decryption
    /// Secret read when a revision is loaded).
    pub decryption: Decryption,
    /// `--target-manifest`: the ArmadaManifest that deploys (`NAME` or `NAMESPACE/NAME`).
    pub target_manifest: Option<String>,
    /// `--armada-values`: Armada override files of the repository (`armada apply --values`).
    pub armada_values: Vec<String>,
    /// `--launcher-takeover NAMESPACE/NAME`: the one WeaveCloud whose takeover may act in
    /// kube-system (see [`takeover::designated`]); `None`: none.
    pub launcher_takeover: Option<String>,
}

/// What one pass is given besides the [`PassSettings`] it shares with every other: the default
/// is a pass of the whole root that writes, with the settings' namespace, timeout and guard.
#[derive(Clone, Debug, Default)]
pub struct PassInput {
    /// The revision the pass applies (set by [`run_pass`] from its snapshot): an owner annotated
    /// `weft.io/force-prune: <this revision>` may be pruned past the fraction guard.
    pub revision: Option<String>,
    /// Plan only: read the cluster, write nothing.
    pub dry_run: bool,
    /// A pass of one shard of the root (`weft run --shards N`); `None`: the whole root.
    pub shard: Option<ShardPass>,
    /// Split the render here and apply this shard's part only, the rest being
    /// [`ShardPass::elsewhere`] (a Root's pass, which renders inside [`run_pass`]); `None`: the
    /// caller split it already, or the whole root.
    pub split: Option<crate::render::shard::Shard>,
    /// This pass alone may prune past the fraction guard (`weft trigger --force-prune`, the
    /// agents of a deleted WeaveCloud), whatever the settings' `force_prune` says.
    pub force_prune: bool,
    /// The namespace of the owner whose objects the pass applies (a WeaveCloud's agents):
    /// namespaced objects that do not say one go there; `None`: the settings'
    /// `default_namespace`.
    pub namespace: Option<String>,
    /// Bound of each readiness wait of this pass (a WeaveCloud's agents are checked, not
    /// waited for; a roll-out waits its health timeout); `None`: the settings' `timeout`.
    pub timeout: Option<Duration>,
    /// Look for no Weave Cloud launcher objects to take over: a tenant's root (finding them
    /// reads cluster-scoped objects the tenant may not read, and taking a launcher install over
    /// is the operator's to do).
    pub without_takeover: bool,
    /// Leave the WeaveClouds' agents to their controller (the daemon's flag root, as its root
    /// loop did): they are not rendered, and no launcher object is taken over here.
    pub agents_excluded: bool,
    /// The render of this very snapshot with these settings, made by an earlier pass (a
    /// [self-contained](DesiredSet::is_self_contained) one), and its diagnostics: applied again
    /// instead of loading and rendering the files again. Ignored when the pass splits a shard.
    pub rendered: Option<(Arc<DesiredSet>, Diagnostics)>,
}

impl PassInput {
    /// Namespace of this pass's namespaced objects that do not say one.
    pub fn default_namespace<'a>(&'a self, settings: &'a PassSettings) -> &'a str {
        self.namespace
            .as_deref()
            .unwrap_or(&settings.default_namespace)
    }

    /// Bound of each readiness wait of this pass.
    pub fn timeout(&self, settings: &PassSettings) -> Duration {
        self.timeout.unwrap_or(settings.timeout)
    }

    /// Whether this pass may prune past the fraction guard.
    pub fn force_prune(&self, settings: &PassSettings) -> bool {
        self.force_prune || settings.force_prune
    }
}

/// What a pass of one shard knows of the others (see [`crate::render::shard`]).
#[derive(Clone, Debug, Default)]
pub struct ShardPass {
    /// The other shards' part of the render. Never pruned by this shard, and kept in its
    /// inventories while git has them: a unit that moves to another shard keeps a record until
    /// git no longer has it, so nothing is orphaned while the new shard takes it over.
    pub elsewhere: Arc<DesiredSet>,
    /// Sync-root owners of shards that no longer exist (index ≥ N), whose inventories this pass
    /// finishes: what git still has is left to the shards that have it now, the rest is pruned,
    /// and the inventory is deleted once empty.
    pub retired: Vec<crate::render::Owner>,
}

impl Default for PassSettings {
    fn default() -> Self {
        PassSettings {
            root_name: RenderOptions::default().root_name,
            weft_namespace: "weft-system".into(),
            default_namespace: "default".into(),
            timeout: Duration::from_secs(300),
            max_prune_fraction: 0.5,
            force_prune: false,
            allow_empty: false,
            concurrency: crate::apply::DEFAULT_CONCURRENCY,
            poll_interval: Duration::from_secs(1),
            repo_location: String::new(),
            chart_cache_dir: None,
            chart_sources: Default::default(),
            chart_fetch: Default::default(),
            helm: Arc::new(HelmRenderer::new(HelmLocation::Environment)),
            decryption: Decryption::default(),
            target_manifest: None,
            armada_values: Vec::new(),
            launcher_takeover: None,
        }
    }
}

/// Progress of a pass, for a progress bar or log lines.
#[derive(Debug)]
pub enum Progress<'a> {
    /// A phase starts; `objects` is how many objects it handles.
    Phase { message: String, objects: usize },
    /// One object was applied, left unchanged, pruned or skipped.
    Change(&'a Change),
    /// One object became ready.
    Ready(&'a ObjectRef),
    /// A wait looked again: these objects are still not ready, and why (sent after every look,
    /// about once a second; a view throttles it).
    Waiting(&'a [(ObjectRef, String)]),
}

/// Receives progress.
pub type Observer<'o> = dyn Fn(Progress<'_>) + Send + Sync + 'o;

/// What stopped a pass.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The repository did not load; nothing was applied or pruned.
    #[error("{0}")]
    Load(#[from] LoadError),
    /// The repository did not render; nothing was applied or pruned.
    #[error("render failed, nothing was applied or pruned: {0}")]
    Render(#[from] RenderError),
    /// A chart source could not be fetched; nothing was applied or pruned.
    #[error("chart source, nothing was applied or pruned: {0}")]
    ChartSource(#[source] chart::ChartSourceError),
    /// Applying, pruning or waiting failed.
    #[error("{0}")]
    Apply(#[from] ApplyError),
    /// An ArmadaChart did not become ready. In a pass result it is followed (inside the same
    /// [`PassError::Many`]) by the wait error that names its objects, so that views which look
    /// for not-ready objects find them (see [`armada::failure`]).
    #[error("ArmadaChart {chart} {summary}")]
    Chart { chart: String, summary: String },
    /// The cluster inputs of a WeaveCloud's agents could not be read; nothing was applied or
    /// pruned.
    #[error("reading the agents' inputs, nothing was applied or pruned: {0}")]
    Agents(#[source] agents::AgentsError),
    /// The launcher's objects could not be taken over (docs/migrating-from-launcher.md);
    /// nothing was applied or pruned.
    #[error("taking over the Weave Cloud launcher's objects, nothing was applied or pruned: {}", crate::apply::describe(.0).0)]
    Takeover(#[source] kube::Error),
    /// The age identities could not be read (the decryption Secret, …); nothing was applied or
    /// pruned.
    #[error("decryption keys, nothing was applied or pruned: {0}")]
    Decryption(#[source] SopsError),
    /// Which resources are suspended could not be read (`weft suspend`): nothing was applied or
    /// pruned.
    #[error("cannot tell which resources are suspended, nothing was applied or pruned: {}", crate::api::kube_error::Text(.0))]
    Unheld(#[source] kube::Error),
    /// A step of the pass that runs on a blocking thread (the loader, the chart fetch) panicked
    /// or was cancelled: a defect of Weft, not of the repository; nothing was applied or pruned.
    #[error("{step} failed, nothing was applied or pruned: {source}")]
    Task {
        step: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    /// Several things failed (e.g. an apply error and an inventory error).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Many(Vec<PassError>),
}

impl PassError {
    /// The conflicts with another Weft root that stopped the pass (`apply::conflict`): each
    /// object with what it says.
    pub fn conflicts(&self) -> Vec<(&ObjectRef, &str)> {
        match self {
            PassError::Apply(e) => e.conflicts(),
            PassError::Many(all) => all.iter().flat_map(PassError::conflicts).collect(),
            _ => Vec::new(),
        }
    }

    /// The one object this error is about, when it names exactly one (see
    /// [`ApplyError::object`]).
    pub fn object(&self) -> Option<&ObjectRef> {
        match self {
            PassError::Apply(e) => e.object(),
            PassError::Many(all) if all.len() == 1 => all[0].object(),
            _ => None,
        }
    }

    /// One error for a list of them: `None` for none, the error itself for one, [`Many`](Self::Many) otherwise.
    pub fn from_list(mut errors: Vec<PassError>) -> Option<PassError> {
        // In the order of their text, whatever order concurrent work finished in (see
        // `ApplyError::from_list`).
        errors.sort_by_cached_key(ToString::to_string);
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(PassError::Many(errors)),
        }
    }
}

/// The outcome of a pass.
#[derive(Debug)]
pub struct PassResult {
    /// The revision that was synced (`local` for a directory).
    pub revision: String,
    /// Warnings of the load.
    pub diagnostics: Diagnostics,
    /// Every change, in order.
    pub changes: ChangeSet,
    /// What stopped the pass; `None` when everything applied and became ready.
    pub error: Option<PassError>,
    pub duration: Duration,
    /// The desired set the pass drove (`None` when the load or render failed): the caller
    /// writes the owners' statuses from it (`weft sync`: the Armada charts' phases).
    pub set: Option<Arc<DesiredSet>>,
    /// The suspended owners the pass held out (`weft.io/suspend`): the caller marks them.
    pub held: BTreeSet<Owner>,
}

impl PassResult {
    pub fn succeeded(&self) -> bool {
        self.error.is_none()
    }
}

/// Run one pass over `snapshot` with `settings` and `input` (whose revision is the snapshot's).
/// Whether the root may run at all (`weft suspend`) is the caller's decision, made before
/// (`daemon::record::suspension_of` for `weft sync`): the pass holds out suspended resources only.
pub async fn run_pass(
    client: &Client,
    snapshot: impl Into<Arc<Snapshot>>,
    settings: &PassSettings,
    input: &PassInput,
    observer: &Observer<'_>,
) -> PassResult {
    let start = Instant::now();
    // Shared, not copied: a daemon keeps the snapshot beside the pass (its root's last).
    let snapshot: Arc<Snapshot> = snapshot.into();
    let revision = snapshot.revision_label();
    observer(Progress::Phase {
        message: format!("loading revision {revision}"),
        objects: 0,
    });
    let (diagnostics, changes, error, set, held) =
        sync_pass(client, snapshot, settings, input, observer).await;
    // The one exit of every pass.
    PassResult {
        revision,
        diagnostics,
        changes,
        error,
        duration: start.elapsed(),
        set,
        held,
    }
}

/// What a pass's body gives [`run_pass`]: its diagnostics, changes, error, the set it applied
/// and the suspended owners it held out.
type Passed = (
    Diagnostics,
    ChangeSet,
    Option<PassError>,
    Option<Arc<DesiredSet>>,
    BTreeSet<Owner>,
);

/// The body of [`run_pass`]: prepare (load → render) with the agents' layer, then [`driver::drive`].
async fn sync_pass(
    client: &Client,
    snapshot: Arc<Snapshot>,
    settings: &PassSettings,
    input: &PassInput,
    observer: &Observer<'_>,
) -> Passed {
    let mut input = input.clone();
    input.revision.clone_from(&snapshot.revision);
    let bundles = AgentBundles::new(client.clone(), settings.weft_namespace.clone());
    let cluster = ClusterInputs {
        client,
        bundles: &bundles,
    };
    let layer = match input.agents_excluded {
        true => AgentLayer::Excluded,
        false => AgentLayer::Included,
    };
    let reused = input
        .rendered
        .take()
        .filter(|(set, _)| set.is_self_contained() && input.split.is_none());
    if let Some((set, diagnostics)) = reused {
        // The files are not read again: the render stands for them.
        drop(snapshot);
        observer(Progress::Phase {
            message: "the revision and the settings are unchanged: applying the last render again"
                .into(),
            objects: set.objects().len(),
        });
        return drive_set(client, set, settings, &input, observer, diagnostics).await;
    }
    let prepared = match prepare(snapshot, Some(cluster), layer, settings).await {
        Ok(prepared) => prepared,
        Err(e) => {
            let diagnostics = match &e {
                PassError::Load(l) => l.0.clone(),
                _ => Diagnostics::default(),
            };
            return (
                diagnostics,
                ChangeSet::default(),
                Some(e),
                None,
                BTreeSet::new(),
            );
        }
    };
    let diagnostics = prepared.diagnostics;
    // Suspended WeaveClouds and Armada charts are held out first: a suspended WeaveCloud's
    // launcher objects are left as they are, not taken over (as the WeaveCloud controller does
    // before it applies agents: no doubled agents).
    let set = match input.split.filter(|s| s.count > 1) {
        Some(shard) => {
            let (mine, elsewhere) = prepared.set.split_shard(shard);
            let mut part = input.shard.take().unwrap_or_default();
            part.elsewhere = Arc::new(elsewhere);
            input.shard = Some(part);
            Arc::new(mine)
        }
        None => Arc::new(prepared.set),
    };
    drive_set(client, set, settings, &input, observer, diagnostics).await
}

/// The rest of [`sync_pass`]: the engine over the rendered `set`.
async fn drive_set(
    client: &Client,
    set: Arc<DesiredSet>,
    settings: &PassSettings,
    input: &PassInput,
    observer: &Observer<'_>,
    diagnostics: Diagnostics,
) -> Passed {
    let outcome = driver::drive(
        client,
        set,
        settings,
        input,
        observer,
        !input.without_takeover && !input.agents_excluded,
        |held| async move { held },
        std::future::pending(),
    )
    .await;
    let none = BTreeSet::new;
    let (changes, error, set, held) = match outcome {
        driver::Outcome::Finished {
            set,
            changes,
            error,
            held,
        } => (changes, error, Some(set), held),
        driver::Outcome::Unheld(e) => (
            ChangeSet::default(),
            Some(PassError::Unheld(e)),
            None,
            none(),
        ),
        driver::Outcome::Takeover(e) => (
            ChangeSet::default(),
            Some(PassError::Takeover(e)),
            None,
            none(),
        ),
        // Never: `weft sync` gives the driver no stop.
        driver::Outcome::Abandoned => (ChangeSet::default(), None, None, none()),
    };
    (diagnostics, changes, error, set, held)
}

/// The engine policy of a complete render: Armada's rules for its charts, and Weft's own custom
/// resources not waited for (their children are waited for: chart waves, the WeaveCloud
/// controller; waiting on a CR's `Ready` would hold the sync root behind a controller's verdict,
/// e.g. `TokenMissing` or a failed chart, until the timeout).
///
/// Nor are Weft's notification resources (`Provider`, `Alert`): their `Ready` says whether a
/// notification can be sent (a missing Secret, an unknown Provider), which must never hold back
/// a deployment (docs/notifications.md). The engine's list is by kind, so a kind is left out
/// only when every object of that kind in the set is Weft's: another API group's `Provider`
/// is still waited for by its conditions.
pub fn policy(set: &DesiredSet) -> ApplyPolicy {
    let mut policy = armada::policy(set);
    policy
        .unwaited_kinds
        .extend(CUSTOM_RESOURCE_KINDS.iter().map(|k| k.to_string()));
    policy
        .unwaited_kinds
        .extend(notification_kinds_of(set).map(str::to_string));
    // Nor the Roots a root declares (a platform's tenants): a tenant's root that fails is the
    // tenant's alone, never the declaring root's (issue 42 item 5). Another group's `Root`
    // is still waited for.
    let mut roots = set
        .objects()
        .iter()
        .filter(|o| o.kind() == "Root")
        .peekable();
    if roots.peek().is_some() && roots.all(|o| o.api_version() == ROOT_API_VERSION) {
        policy.unwaited_kinds.insert("Root".to_string());
    }
    policy
}

/// The API version of Weft's `Root`.
const ROOT_API_VERSION: &str = "weft.io/v1alpha1";

/// The kinds of Weft's notification resources that `set` holds, and only those of its kinds
/// whose every object is in `notification.weft.io`.
fn notification_kinds_of(set: &DesiredSet) -> impl Iterator<Item = &'static str> + '_ {
    use crate::api::notification::GROUP;
    ["Provider", "Alert"].into_iter().filter(move |kind| {
        let mut objects = set
            .objects()
            .iter()
            .filter(|o| o.kind() == *kind)
            .peekable();
        objects.peek().is_some()
            && objects.all(|o| o.api_version().split('/').next() == Some(GROUP))
    })
}

/// Apply, prune and wait for one complete render. Used by `weft sync` and by the controllers.
pub async fn reconcile(
    client: &Client,
    set: &DesiredSet,
    settings: &PassSettings,
    input: &PassInput,
    observer: &Observer<'_>,
) -> (ChangeSet, Option<PassError>) {
    engine::Engine::new(
        client,
        settings,
        input,
        observer,
        policy(set),
        armada::failure,
    )
    .run(set)
    .await
}

/// Compile-time check: a pass can be spawned on the multi-threaded runtime (`tokio::spawn`
/// needs a `Send` future; see the comment in `apply::apply::apply_batch`).
#[allow(dead_code)]
fn _pass_futures_are_send(
    client: Client,
    set: std::sync::Arc<DesiredSet>,
    settings: Arc<PassSettings>,
    input: PassInput,
    snapshot: Snapshot,
) {
    let c2 = client.clone();
    let (s2, i2) = (settings.clone(), input.clone());
    tokio::spawn(async move {
        let _ = reconcile(&client, &set, &settings, &input, &|_| {}).await;
    });
    tokio::spawn(async move {
        let _ = run_pass(&c2, snapshot, &s2, &i2, &|_| {}).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn configmap(namespace: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn weft_s_own_resources_are_not_waited_for() {
        let root = crate::render::Owner::root("weft-system", "weft");
        let p = policy(&DesiredSet::for_owners(Vec::new(), BTreeSet::from([root])));
        for kind in [
            "WeaveCloud",
            "ArmadaChart",
            "ArmadaChartGroup",
            "ArmadaManifest",
            "ConfigMap",
        ] {
            assert!(!p.waits_for(kind), "{kind}");
        }
        assert!(p.waits_for("Deployment"));
        assert!(p.waits_for("CustomResourceDefinition"));
    }

    #[test]
    fn one_error_or_many() {
        assert!(PassError::from_list(Vec::new()).is_none());
        let one = PassError::from_list(vec![PassError::Chart {
            chart: "a/b".into(),
            summary: "failed".into(),
        }]);
        assert!(matches!(one, Some(PassError::Chart { .. })));
        let two = PassError::from_list(vec![
            PassError::Apply(ApplyError::Failed(Vec::new())),
            PassError::Apply(ApplyError::Failed(Vec::new())),
        ]);
        assert!(matches!(two, Some(PassError::Many(v)) if v.len() == 2));
    }

    /// Issue 48 item 6: concurrent applies fail in any order; the message (and so the status
    /// that quotes it) is the same whatever the order.
    #[test]
    fn many_errors_read_the_same_whatever_order_they_came_in() {
        let failed = |name: &str| ApplyError::Conflict {
            object: Box::new(configmap("ns", name)),
            message: "owned by another root".into(),
        };
        let text = |order: &[&str]| {
            let apply = ApplyError::from_list(order.iter().map(|n| failed(n)).collect());
            let pass =
                PassError::from_list(order.iter().map(|n| PassError::Apply(failed(n))).collect());
            (apply.unwrap().to_string(), pass.unwrap().to_string())
        };
        assert_eq!(text(&["a", "b", "c"]), text(&["c", "a", "b"]));
    }

    #[test]
    fn notification_resources_are_not_waited_for_but_other_groups_kinds_are() {
        let root = crate::render::Owner::root("weft-system", "weft");
        let object = |api_version: &str, kind: &str, name: &str| {
            root.adopt(
                serde_json::json!({"apiVersion": api_version, "kind": kind,
                    "metadata": {"name": name, "namespace": "apps"}}),
                0,
                None,
            )
        };
        let set = |objects| DesiredSet::for_owners(objects, [root.clone()].into());
        // A Provider whose Secret is missing is Ready=False: that must not hold the pass.
        let p = policy(&set(vec![
            object("notification.weft.io/v1alpha1", "Provider", "slack"),
            object("notification.weft.io/v1alpha1", "Alert", "failures"),
            object("apps/v1", "Deployment", "web"),
        ]));
        assert!(!p.waits_for("Provider"));
        assert!(!p.waits_for("Alert"));
        assert!(p.waits_for("Deployment"));
        assert!(!p.waits_for("ArmadaChart"));
        // Another group's `Provider` keeps its wait, even beside one of Weft's.
        let p = policy(&set(vec![
            object("notification.weft.io/v1alpha1", "Provider", "slack"),
            object("pkg.crossplane.io/v1", "Provider", "aws"),
        ]));
        assert!(p.waits_for("Provider"));
    }

    #[test]
    fn the_conflicts_of_a_pass_are_found_wherever_they_are() {
        let conflict = |name: &str| ApplyError::Conflict {
            object: Box::new(configmap("x", name)),
            message: format!("owned by another Weft root ({name})"),
        };
        let e = PassError::Many(vec![
            PassError::Apply(ApplyError::Many(vec![
                conflict("a"),
                ApplyError::Failed(Vec::new()),
            ])),
            PassError::Apply(conflict("b")),
            PassError::Chart {
                chart: "a/b".into(),
                summary: "failed".into(),
            },
        ]);
        let objects: Vec<String> = e.conflicts().iter().map(|(o, _)| o.to_string()).collect();
        assert_eq!(objects, ["ConfigMap/x/a", "ConfigMap/x/b"]);
        assert!(PassError::Apply(ApplyError::Failed(Vec::new()))
            .conflicts()
            .is_empty());
    }
}
