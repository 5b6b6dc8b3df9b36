//! One pass of both layers: load → render → apply → prune → wait → report.
//!
//! The fetch happens before (the caller turns a URL or a directory into a [`Snapshot`]); a pass
//! that cannot load or render stops before anything is applied or pruned. Apply goes in stages
//! and waves:
//! 1. cluster prerequisites (CRDs, Namespaces, cluster roles, `*Class` kinds), then a wait for
//!    them (CRDs Established) and a new discovery, so that custom resources whose CRD is in the
//!    same pass can be applied;
//! 2. every other object, wave by wave (Armada groups and sequenced charts), each wave waited for
//!    before the next starts;
//! 3. prune (only when every object applied), inventories, and the wait for the last wave.
//!
//! The result is one [`ChangeSet`] (plus the error that stopped the pass, if any).

pub mod agents;
pub mod prepare;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::Client;

use crate::api::armada::ArmadaChartSpec;
use crate::api::ObjectRef;
use crate::apply::apply::{apply_batch, ApplyOptions};
use crate::apply::changeset::{Action, Change, ChangeSet};
use crate::apply::diff::{self, DiffChange, ObjectDiff};
use crate::apply::inventory::{self, Inventory};
use crate::apply::plan::{self, Catalog, LiveState, PlannedObject};
use crate::apply::prune::{self, PruneOptions};
use crate::apply::readiness;
use crate::apply::wait::{self, ChartNotReady, ChartWait, WaitOptions, WaitTarget};
use crate::apply::ApplyError;
use crate::load::{Diagnostics, LoadError};
use crate::render::armada::OWNER_KIND as ARMADA_OWNER_KIND;
use crate::render::ownership::{APPLIED_HASH_ANNOTATION, OWNER_LABEL};
use crate::render::DesiredSet;
use crate::render::{order, AgentLayer, Owner, RenderError, RenderOptions};
use crate::source::chart;
use crate::source::Snapshot;
use agents::AgentBundles;
use prepare::{prepare, ClusterInputs};

/// Everything a pass needs besides the repository.
#[derive(Clone, Debug)]
pub struct PassOptions {
    /// Name of the sync root (its owner id goes into every label).
    pub root_name: String,
    /// Weft's own namespace (inventories).
    pub weft_namespace: String,
    /// Namespace of namespaced objects that do not say one.
    pub default_namespace: String,
    /// Bound of each readiness wait.
    pub timeout: Duration,
    pub max_prune_fraction: f64,
    pub force_prune: bool,
    /// Plan only: read the cluster, write nothing.
    pub dry_run: bool,
    /// Calls at the same time within a stage.
    pub concurrency: usize,
    /// Time between two readiness checks.
    pub poll_interval: Duration,
    /// Where the config repository came from (a URL or a directory): relative git chart
    /// locations resolve against it.
    pub repo_location: String,
    /// Cache of fetched chart sources (default: the user's cache directory).
    pub chart_cache_dir: Option<std::path::PathBuf>,
}

impl Default for PassOptions {
    fn default() -> Self {
        PassOptions {
            root_name: RenderOptions::default().root_name,
            weft_namespace: "weft-system".into(),
            default_namespace: "default".into(),
            timeout: Duration::from_secs(300),
            max_prune_fraction: 0.5,
            force_prune: false,
            dry_run: false,
            concurrency: 10,
            poll_interval: Duration::from_secs(1),
            repo_location: String::new(),
            chart_cache_dir: None,
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
}

/// Receives progress.
pub type Observer<'o> = dyn Fn(Progress<'_>) + Send + Sync + 'o;

/// What stopped a pass.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
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
    /// [`SyncError::Many`]) by the wait error that names its objects, so that views which look
    /// for not-ready objects find them.
    #[error("ArmadaChart {chart} {summary}")]
    Chart { chart: String, summary: String },
    /// The cluster inputs of a WeaveCloud's agents could not be read; nothing was applied or
    /// pruned.
    #[error("reading the agents' inputs, nothing was applied or pruned: {0}")]
    Agents(#[source] agents::AgentsError),
    /// Several things failed (e.g. an apply error and an inventory error).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Many(Vec<SyncError>),
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
    pub error: Option<SyncError>,
    pub duration: Duration,
}

impl PassResult {
    pub fn succeeded(&self) -> bool {
        self.error.is_none()
    }
}

/// Run one pass over `snapshot`.
pub async fn run_pass(
    client: &Client,
    snapshot: Snapshot,
    opts: &PassOptions,
    observer: &Observer<'_>,
) -> PassResult {
    let start = Instant::now();
    let revision = snapshot.revision_label();
    let mut result = PassResult {
        revision,
        diagnostics: Diagnostics::default(),
        changes: ChangeSet::default(),
        error: None,
        duration: Duration::ZERO,
    };
    observer(Progress::Phase {
        message: format!("loading revision {}", result.revision),
        objects: 0,
    });
    let bundles = AgentBundles::new(client.clone(), opts.weft_namespace.clone());
    let cluster = ClusterInputs {
        client,
        bundles: &bundles,
    };
    let prepared = match prepare(snapshot, Some(cluster), AgentLayer::Included, opts).await {
        Ok(p) => p,
        Err(e) => {
            if let SyncError::Load(l) = &e {
                result.diagnostics = l.0.clone();
            }
            result.error = Some(e);
            result.duration = start.elapsed();
            return result;
        }
    };
    result.diagnostics = prepared.diagnostics;
    let set = prepared.set;
    let (changes, error) = reconcile(client, &set, opts, observer).await;
    result.changes = changes;
    result.error = error;
    result.duration = start.elapsed();
    result
}

/// [`plan::resolve`] against the CRDs of this pass, and, if a kind is still unknown, against the
/// CRDs in the cluster too (a CRD created just before the pass is not served at once).
async fn resolve_set(
    client: &Client,
    objects: &[crate::render::DesiredObject],
    set: &DesiredSet,
    catalog: &Catalog,
    default_namespace: &str,
) -> Result<plan::Resolved, ApplyError> {
    let mut crds = plan::crds_of(set.objects());
    match plan::resolve(objects, &crds, catalog, default_namespace) {
        Ok(r) => Ok(r),
        Err(ApplyError::UnknownKind { .. }) | Err(ApplyError::Many(_)) => {
            crds.extend(plan::cluster_crds(client).await?);
            plan::resolve(objects, &crds, catalog, default_namespace)
        }
        Err(e) => Err(e),
    }
}

fn wait_target(p: &PlannedObject) -> WaitTarget {
    WaitTarget {
        object: p.object_ref.clone(),
        resource: p.resource.clone(),
        namespaced: p.namespaced,
    }
}

/// Kinds that have no status to wait for: ready as soon as they are applied.
fn needs_wait(kind: &str) -> bool {
    !matches!(
        kind,
        "ConfigMap"
            | "Secret"
            | "Service"
            | "ServiceAccount"
            | "Role"
            | "RoleBinding"
            | "ClusterRole"
            | "ClusterRoleBinding"
            | "NetworkPolicy"
            | "LimitRange"
            | "ResourceQuota"
            | "PodDisruptionBudget"
            | "Ingress"
            | "IngressClass"
            | "StorageClass"
            | "PriorityClass"
            | "RuntimeClass"
            | "CronJob"
            | "Endpoints"
            | "EndpointSlice"
            | "HorizontalPodAutoscaler"
            | "MutatingWebhookConfiguration"
            | "ValidatingWebhookConfiguration"
            // Weft's own resources: their children are waited for (chart waves, the WeaveCloud
            // controller); waiting on the CR's `Ready` here would hold the sync root behind a
            // controller's verdict (e.g. `TokenMissing`, a failed chart) until the timeout.
            | "WeaveCloud"
            | "ArmadaChart"
            | "ArmadaChartGroup"
            | "ArmadaManifest"
    )
}

struct Engine<'a> {
    client: &'a Client,
    opts: &'a PassOptions,
    observer: &'a Observer<'a>,
    changes: ChangeSet,
    /// The spec of every ArmadaChart of the pass (from the CRs in the desired set), by owner.
    charts: BTreeMap<Owner, ArmadaChartSpec>,
    /// Failures of protected charts (`continue_processing: true`): the pass went on, but they
    /// are reported at the end.
    deferred: Vec<SyncError>,
}

/// The spec of every ArmadaChart in `set` (the CRs the sync layer applies), by the owner its
/// objects carry. A chart whose CR is not in the set is waited for by the global rules.
fn chart_specs(set: &DesiredSet) -> BTreeMap<Owner, ArmadaChartSpec> {
    set.objects()
        .iter()
        .filter(|o| o.kind() == ARMADA_OWNER_KIND && o.api_version().starts_with("armada."))
        .filter_map(|o| {
            let spec: ArmadaChartSpec =
                serde_json::from_value(o.object.get("spec")?.clone()).ok()?;
            Some((
                Owner::Resource {
                    kind: ARMADA_OWNER_KIND.to_string(),
                    namespace: o.namespace().unwrap_or("").to_string(),
                    name: o.name().to_string(),
                },
                spec,
            ))
        })
        .collect()
}

fn chart_name(owner: &Owner) -> String {
    match owner {
        Owner::Resource {
            namespace, name, ..
        } => format!("{namespace}/{name}"),
        Owner::SyncRoot { name } => name.clone(),
    }
}

/// A chart's failure as the pass reports it: a line naming the chart (and what happened to its
/// group), then the objects not ready or failed, each with why.
fn chart_failure(owner: &Owner, spec: &ArmadaChartSpec, why: ChartNotReady) -> SyncError {
    let continued = spec
        .protected
        .as_ref()
        .is_some_and(|p| p.continue_processing);
    let mut summary = match why.timed_out {
        Some(t) => format!(
            "did not become ready within {}s (its wait.timeout)",
            t.as_secs()
        ),
        None => "failed".to_string(),
    };
    summary.push_str(if continued {
        "; it is protected with continue_processing, so the charts after it were deployed"
    } else {
        "; the charts after it were not deployed"
    });
    for m in &why.missing {
        summary.push_str(&format!("\n  {m}"));
    }
    let mut all = vec![SyncError::Chart {
        chart: chart_name(owner),
        summary,
    }];
    if !why.failed.is_empty() {
        all.push(SyncError::Apply(ApplyError::Failed(why.failed)));
    }
    if !why.not_ready.is_empty() {
        all.push(SyncError::Apply(ApplyError::WaitTimeout {
            timeout: why.timed_out.unwrap_or_default(),
            not_ready: why.not_ready,
        }));
    }
    SyncError::Many(all)
}

fn applied_hash(v: &serde_json::Value) -> Option<&str> {
    v.pointer("/metadata/annotations")
        .and_then(|a| a.get(APPLIED_HASH_ANNOTATION))
        .and_then(serde_json::Value::as_str)
}

impl Engine<'_> {
    fn apply_options(&self) -> ApplyOptions {
        ApplyOptions {
            concurrency: self.opts.concurrency,
            dry_run: self.opts.dry_run,
        }
    }

    async fn apply(&mut self, objects: &[PlannedObject], label: &str) -> Result<(), ApplyError> {
        if objects.is_empty() {
            return Ok(());
        }
        (self.observer)(Progress::Phase {
            message: format!("applying {label}"),
            objects: objects.len(),
        });
        let live: LiveState = plan::read_live(self.client, objects, self.opts.concurrency).await?;
        let observer = self.observer;
        // A chart with `driftPolicy: report`: an object edited outside Weft is left as it is
        // (the daemon reports it as `inconsistent`); a changed desired object is still applied.
        // An object of its inventory that is gone was deleted outside Weft: not recreated either.
        let mut applied_before: BTreeSet<(String, String, String, String)> = BTreeSet::new();
        for (owner, spec) in self.charts_of(objects) {
            if spec.drift_policy != crate::api::DriftPolicy::Report {
                continue;
            }
            let Owner::Resource {
                namespace, name, ..
            } = &owner
            else {
                continue;
            };
            let api: Api<crate::api::armada::ArmadaChart> =
                Api::namespaced(self.client.clone(), namespace);
            if let Ok(Some(chart)) = api.get_opt(name).await {
                for r in chart.status.map(|s| s.inventory).unwrap_or_default() {
                    applied_before.insert(inventory::ref_key(&r));
                }
            }
        }
        let report = |p: &PlannedObject| -> Option<&'static str> {
            let policy = self.charts.get(&p.desired.owner)?.drift_policy;
            if policy != crate::api::DriftPolicy::Report {
                return None;
            }
            match live.decide(p) {
                plan::Decision::Update(plan::UpdateReason::Drifted { .. }) => {
                    Some("drifted, not corrected (driftPolicy: report)")
                }
                plan::Decision::Create
                    if applied_before.contains(&inventory::ref_key(&p.object_ref)) =>
                {
                    Some("deleted outside Weft, not recreated (driftPolicy: report)")
                }
                _ => None,
            }
        };
        let (kept, objects): (Vec<&PlannedObject>, Vec<&PlannedObject>) =
            objects.iter().partition(|p| report(p).is_some());
        for p in kept {
            let c = Change {
                object: p.object_ref.clone(),
                owner: p.desired.owner.clone(),
                action: Action::Skipped,
                reason: report(p).map(str::to_string),
            };
            observer(Progress::Change(&c));
            self.changes.push(c);
        }
        let objects: Vec<PlannedObject> = objects.into_iter().cloned().collect();
        let objects = objects.as_slice();
        let (changes, mut errors) =
            apply_batch(self.client, objects, &live, &self.apply_options(), &|c| {
                observer(Progress::Change(c))
            })
            .await;
        self.changes.extend(changes);
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(ApplyError::Many(errors)),
        }
    }

    /// The chart owners among `objects`, with their specs.
    fn charts_of(&self, objects: &[PlannedObject]) -> Vec<(Owner, ArmadaChartSpec)> {
        let owners: BTreeSet<&Owner> = objects.iter().map(|p| &p.desired.owner).collect();
        owners
            .into_iter()
            .filter_map(|o| self.charts.get(o).map(|s| (o.clone(), s.clone())))
            .collect()
    }

    /// `upgrade.pre.delete` of every chart in `objects` that is being upgraded: one of its objects
    /// exists, is this chart's, and was applied from a different render (applied hash). Deletes
    /// the listed objects (type and labels, in the chart's namespace) that carry this chart's
    /// owner label, and waits until they are gone; a first install deletes nothing.
    async fn pre_upgrade_deletes(
        &mut self,
        objects: &[PlannedObject],
        catalog: &Catalog,
    ) -> Result<(), ApplyError> {
        for (owner, spec) in self.charts_of(objects) {
            let actions = spec
                .upgrade
                .as_ref()
                .and_then(|u| u.pre.as_ref())
                .map(|p| p.delete.clone())
                .unwrap_or_default();
            if actions.is_empty() {
                continue;
            }
            let mine: Vec<PlannedObject> = objects
                .iter()
                .filter(|p| p.desired.owner == owner)
                .cloned()
                .collect();
            let live = plan::read_live(self.client, &mine, self.opts.concurrency).await?;
            let id = owner.id().0;
            let upgrading = mine.iter().any(|p| {
                live.owned.get(&p.object_ref).is_some_and(|l| {
                    l.pointer("/metadata/labels")
                        .and_then(|x| x.get(OWNER_LABEL))
                        .and_then(serde_json::Value::as_str)
                        == Some(id.as_str())
                        && applied_hash(l) != p.desired_hash()
                })
            });
            if !upgrading {
                continue;
            }
            let timeout = readiness::timeout(&spec);
            for action in &actions {
                // The loader refuses types without a target; skip rather than guess.
                let Some((api_version, kind)) = action.target() else {
                    continue;
                };
                let Some((ar, _)) = catalog.resolve(api_version, kind).cloned() else {
                    continue;
                };
                let mut selector: Vec<String> = action
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                selector.push(format!("{OWNER_LABEL}={id}"));
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), &spec.namespace, &ar);
                let listed = api
                    .list(&ListParams::default().labels(&selector.join(",")))
                    .await
                    .map_err(|e| ApplyError::Api {
                        verb: "list",
                        object: format!("{kind} in {} ({})", spec.namespace, selector.join(",")),
                        message: crate::apply::describe(&e).0,
                        code: crate::apply::describe(&e).1,
                    })?;
                for item in listed.items {
                    let Some(name) = item.metadata.name.clone() else {
                        continue;
                    };
                    let object = ObjectRef {
                        api_version: api_version.to_string(),
                        kind: kind.to_string(),
                        namespace: spec.namespace.clone(),
                        name: name.clone(),
                    };
                    if !self.opts.dry_run {
                        match api.delete(&name, &DeleteParams::background()).await {
                            Ok(_) => {}
                            Err(kube::Error::Api(s)) if s.code == 404 => {}
                            Err(e) => return Err(ApplyError::api("delete", &object, e)),
                        }
                        let deadline = Instant::now() + timeout;
                        loop {
                            match api.get_opt(&name).await {
                                Ok(None) => break,
                                Ok(Some(_)) if Instant::now() < deadline => {
                                    tokio::time::sleep(self.opts.poll_interval).await
                                }
                                Ok(Some(_)) => {
                                    return Err(ApplyError::WaitTimeout {
                                        timeout,
                                        not_ready: vec![(
                                            object,
                                            "deleted by upgrade.pre.delete but still there".into(),
                                        )],
                                    })
                                }
                                Err(e) => return Err(ApplyError::api("read", &object, e)),
                            }
                        }
                    }
                    let c = Change {
                        object,
                        owner: owner.clone(),
                        action: Action::Deleted,
                        reason: Some("upgrade.pre.delete".into()),
                    };
                    (self.observer)(Progress::Change(&c));
                    self.changes.push(c);
                }
            }
        }
        Ok(())
    }

    /// Wait for one wave: objects of an ArmadaChart by the chart's rules (all charts of the wave
    /// at once, each with its own timeout), every other object by the global rules and
    /// `--timeout`. A failed protected chart (`continue_processing: true`) goes to `deferred`;
    /// any other failure is returned and stops the pass.
    async fn wait_wave(&mut self, objects: &[PlannedObject]) -> Result<(), SyncError> {
        if self.opts.dry_run {
            return Ok(());
        }
        let charts = self.charts_of(objects);
        let charted: BTreeSet<&Owner> = charts.iter().map(|(o, _)| o).collect();
        let plain: Vec<PlannedObject> = objects
            .iter()
            .filter(|p| !charted.contains(&p.desired.owner))
            .cloned()
            .collect();
        let waits: Vec<(Owner, ArmadaChartSpec, ChartWait)> = charts
            .iter()
            .map(|(owner, spec)| {
                let others = objects
                    .iter()
                    .filter(|p| &p.desired.owner == owner)
                    .filter(|p| {
                        needs_wait(&p.object_ref.kind) && !wait::is_wait_kind(&p.object_ref.kind)
                    })
                    .map(wait_target)
                    .collect();
                let w = ChartWait {
                    chart: chart_name(owner),
                    namespace: spec.namespace.clone(),
                    wait: spec.wait.clone(),
                    timeout: readiness::timeout(spec),
                    others,
                };
                (owner.clone(), spec.clone(), w)
            })
            .collect();
        if !waits.is_empty() {
            (self.observer)(Progress::Phase {
                message: format!(
                    "waiting for chart(s) {}",
                    waits
                        .iter()
                        .map(|(_, _, w)| w.chart.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                objects: 0,
            });
        }
        let observer = self.observer;
        let client = self.client;
        let poll = self.opts.poll_interval;
        let on_ready = |r: &ObjectRef| observer(Progress::Ready(r));
        let chart_results = futures::future::join_all(
            waits
                .iter()
                .map(|(_, _, w)| wait::wait_chart(client, w, poll, &on_ready)),
        );
        let plain_result = self.wait(&plain);
        let (chart_results, plain_result) = futures::join!(chart_results, plain_result);
        let mut stop = Vec::new();
        if let Err(e) = plain_result {
            stop.push(SyncError::Apply(e));
        }
        for ((owner, spec, _), r) in waits.iter().zip(chart_results) {
            let Err(why) = r else { continue };
            let protected = spec
                .protected
                .as_ref()
                .is_some_and(|p| p.continue_processing);
            let e = chart_failure(owner, spec, why);
            if protected {
                self.deferred.push(e);
            } else {
                stop.push(e);
            }
        }
        match stop.len() {
            0 => Ok(()),
            1 => Err(stop.remove(0)),
            _ => Err(SyncError::Many(stop)),
        }
    }

    async fn wait(&self, objects: &[PlannedObject]) -> Result<(), ApplyError> {
        if self.opts.dry_run {
            return Ok(());
        }
        let targets: Vec<WaitTarget> = objects
            .iter()
            .filter(|p| needs_wait(&p.object_ref.kind))
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
            timeout: self.opts.timeout,
            poll_interval: self.opts.poll_interval,
            concurrency: self.opts.concurrency,
        };
        let observer = self.observer;
        wait::wait_ready(self.client, &targets, &wait_opts, &|r| {
            observer(Progress::Ready(r))
        })
        .await
    }
}

/// Apply, prune and wait for one complete render. Used by `weft sync` and by the controllers.
pub async fn reconcile(
    client: &Client,
    set: &DesiredSet,
    opts: &PassOptions,
    observer: &Observer<'_>,
) -> (ChangeSet, Option<SyncError>) {
    let mut engine = Engine {
        client,
        opts,
        observer,
        changes: ChangeSet::default(),
        charts: chart_specs(set),
        deferred: Vec::new(),
    };
    let error = match reconcile_inner(&mut engine, set).await {
        Ok(()) => None,
        Err(errors) if errors.len() == 1 => errors.into_iter().next(),
        Err(errors) => Some(SyncError::Many(errors)),
    };
    (engine.changes, error)
}

async fn reconcile_inner(engine: &mut Engine<'_>, set: &DesiredSet) -> Result<(), Vec<SyncError>> {
    let one = |e: ApplyError| vec![SyncError::Apply(e)];
    let opts = engine.opts;
    let client = engine.client;
    let mut catalog = Catalog::discover(client).await.map_err(one)?;
    // Inventories are written whatever happens below, so that objects created by a pass that
    // failed half-way are still known to the next pass; only pruning needs a pass that applied
    // everything.
    let applied = apply_phase(engine, set, &mut catalog).await;
    let mut errors = Vec::new();
    let last = match applied {
        Ok(last) => Some(last),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let desired_refs = plan::desired_refs(set, &catalog, &opts.default_namespace);
    let all_desired: BTreeSet<ObjectRef> = desired_refs.values().flatten().cloned().collect();
    let mut inventories: Vec<Inventory> = Vec::new();
    for owner in set.owners() {
        let kinds = owner_kinds(set, owner, &catalog);
        match inventory::read(client, &catalog, owner, &opts.weft_namespace, &kinds).await {
            Ok(inv) => inventories.push(inv),
            Err(e) => errors.push(SyncError::Apply(e)),
        }
    }
    if inventories.len() < set.owners().len() {
        errors.append(&mut engine.deferred);
        // Without every inventory, prune cannot be judged (the guard is per inventory).
        return Err(errors);
    }
    let outcome = if last.is_some() {
        prune_phase(engine, set, &catalog, &all_desired, &inventories).await
    } else {
        // Nothing is pruned after a failed apply: keep every old entry for the next pass.
        let mut kept = BTreeMap::new();
        for (owner, refs) in prune::candidates(&inventories, &all_desired) {
            kept.insert(owner, refs.into_iter().collect::<BTreeSet<_>>());
        }
        prune::PruneOutcome {
            kept,
            ..Default::default()
        }
    };
    engine.changes.extend(outcome.changes);
    errors.extend(outcome.errors.into_iter().map(SyncError::Apply));
    if !opts.dry_run {
        let next = inventory::next_inventories(&desired_refs, &outcome.kept);
        for inv in &inventories {
            let entries = next.get(&inv.owner).cloned().unwrap_or_default();
            if let Err(e) = inventory::write(
                client,
                &catalog,
                &inv.owner,
                &opts.weft_namespace,
                &entries,
                inv,
            )
            .await
            {
                errors.push(SyncError::Apply(e));
            }
        }
    }
    if let Some(last) = last {
        if let Err(e) = engine.wait_wave(&last).await {
            errors.push(e);
        }
    }
    errors.append(&mut engine.deferred);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

async fn prune_phase(
    engine: &mut Engine<'_>,
    set: &DesiredSet,
    catalog: &Catalog,
    all_desired: &BTreeSet<ObjectRef>,
    inventories: &[Inventory],
) -> prune::PruneOutcome {
    let opts = engine.opts;
    (engine.observer)(Progress::Phase {
        message: "pruning".into(),
        objects: 0,
    });
    let prune_opts = PruneOptions {
        max_fraction: opts.max_prune_fraction,
        force: opts.force_prune,
        dry_run: opts.dry_run,
        concurrency: opts.concurrency,
    };
    let observer = engine.observer;
    prune::prune(
        engine.client,
        catalog,
        set,
        all_desired,
        inventories,
        &prune_opts,
        &|c| observer(Progress::Change(c)),
    )
    .await
}

/// Stages and waves; returns the objects of the last wave (waited for after the prune).
async fn apply_phase(
    engine: &mut Engine<'_>,
    set: &DesiredSet,
    catalog: &mut Catalog,
) -> Result<Vec<PlannedObject>, SyncError> {
    let rest = apply_stages(engine, set, catalog).await?;
    apply_waves(engine, rest, catalog).await
}

/// Stage 0, then the desired objects that wait for it, in order (stage 1 is done by the caller).
async fn apply_stages(
    engine: &mut Engine<'_>,
    set: &DesiredSet,
    catalog: &mut Catalog,
) -> Result<Vec<PlannedObject>, ApplyError> {
    let opts = engine.opts;
    let client = engine.client;
    let resolved =
        resolve_set(client, set.objects(), set, catalog, &opts.default_namespace).await?;

    // Stage 0: cluster prerequisites, then CRDs established and a fresh discovery.
    let (stage0, mut rest): (Vec<PlannedObject>, Vec<PlannedObject>) = resolved
        .planned
        .into_iter()
        .partition(|p| order::stage(&p.object_ref.kind) == 0);
    engine
        .apply(
            &stage0,
            "cluster prerequisites (CRDs, Namespaces, cluster roles, classes)",
        )
        .await?;
    engine.wait(&stage0).await?;
    if !resolved.pending_crd.is_empty() {
        if opts.dry_run {
            for d in &resolved.pending_crd {
                let c = Change {
                    object: d.object_ref(),
                    owner: d.owner.clone(),
                    action: Action::Created,
                    reason: Some("its CRD is created in this pass".into()),
                };
                (engine.observer)(Progress::Change(&c));
                engine.changes.push(c);
            }
        } else {
            // Discovery can trail an Established CRD by a moment.
            let deadline = Instant::now() + opts.timeout;
            loop {
                *catalog = Catalog::discover(client).await?;
                match resolve_set(
                    client,
                    &resolved.pending_crd,
                    set,
                    catalog,
                    &opts.default_namespace,
                )
                .await
                {
                    Ok(r) if r.pending_crd.is_empty() => {
                        rest.extend(r.planned);
                        break;
                    }
                    Ok(r) if Instant::now() >= deadline => {
                        let first = &r.pending_crd[0];
                        return Err(ApplyError::UnknownKind {
                            origin: String::new(),
                            object: first.object_ref().to_string(),
                            api_version: first.api_version().to_string(),
                            kind: first.kind().to_string(),
                        });
                    }
                    Ok(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                    Err(e) => return Err(e),
                }
            }
            order_planned(&mut rest);
        }
    }
    Ok(rest)
}

/// Stage 1, wave by wave: `upgrade.pre.delete` of the wave's charts, apply, wait (each chart by
/// its own rules). The last wave is waited for after the prune.
async fn apply_waves(
    engine: &mut Engine<'_>,
    rest: Vec<PlannedObject>,
    catalog: &Catalog,
) -> Result<Vec<PlannedObject>, SyncError> {
    let waves: BTreeSet<u32> = rest.iter().map(|p| p.desired.wave).collect();
    let last_wave = waves.iter().next_back().copied();
    let mut last: Vec<PlannedObject> = Vec::new();
    for wave in &waves {
        let objects: Vec<PlannedObject> = rest
            .iter()
            .filter(|p| p.desired.wave == *wave)
            .cloned()
            .collect();
        let label = if waves.len() > 1 {
            format!("wave {wave}")
        } else {
            "objects".to_string()
        };
        engine.pre_upgrade_deletes(&objects, catalog).await?;
        engine.apply(&objects, &label).await?;
        if Some(*wave) == last_wave {
            last = objects;
        } else {
            engine.wait_wave(&objects).await?;
        }
    }

    Ok(last)
}

/// The resources an owner renders now (for an inventory rebuild).
fn owner_kinds(
    set: &DesiredSet,
    owner: &Owner,
    catalog: &Catalog,
) -> Vec<(kube::api::ApiResource, bool)> {
    let mut seen = BTreeMap::new();
    for d in set.objects().iter().filter(|d| &d.owner == owner) {
        if let Some((ar, namespaced)) = catalog.resolve(d.api_version(), d.kind()) {
            seen.entry((ar.group.clone(), ar.kind.clone()))
                .or_insert((ar.clone(), *namespaced));
        }
    }
    seen.into_values().collect()
}

fn order_planned(objects: &mut [PlannedObject]) {
    objects.sort_by(|a, b| {
        let key = |p: &PlannedObject| (p.desired.wave, order::kind_rank(&p.object_ref.kind));
        key(a)
            .cmp(&key(b))
            .then_with(|| a.object_ref.cmp(&b.object_ref))
    });
}

/// `weft diff`: the unified diff of every object a pass would change, from a server-side
/// dry-run, plus every object a pass would prune. Writes nothing.
pub async fn diff_pass(
    client: &Client,
    snapshot: Snapshot,
    opts: &PassOptions,
) -> Result<Vec<ObjectDiff>, SyncError> {
    let bundles = AgentBundles::new(client.clone(), opts.weft_namespace.clone());
    let cluster = ClusterInputs {
        client,
        bundles: &bundles,
    };
    let set = prepare(snapshot, Some(cluster), AgentLayer::Included, opts)
        .await?
        .set;
    let catalog = Catalog::discover(client).await?;
    let resolved = resolve_set(
        client,
        set.objects(),
        &set,
        &catalog,
        &opts.default_namespace,
    )
    .await?;
    let mut out = diff::diff_objects(
        client,
        &resolved.planned,
        &resolved.pending_crd,
        opts.concurrency,
    )
    .await?;
    let desired_refs = plan::desired_refs(&set, &catalog, &opts.default_namespace);
    let all_desired: BTreeSet<ObjectRef> = desired_refs.values().flatten().cloned().collect();
    let mut inventories = Vec::new();
    for owner in set.owners() {
        let kinds = owner_kinds(&set, owner, &catalog);
        inventories
            .push(inventory::read(client, &catalog, owner, &opts.weft_namespace, &kinds).await?);
    }
    let prune_opts = PruneOptions {
        max_fraction: opts.max_prune_fraction,
        force: true,
        dry_run: true,
        concurrency: opts.concurrency,
    };
    let outcome = prune::prune(
        client,
        &catalog,
        &set,
        &all_desired,
        &inventories,
        &prune_opts,
        &|_| {},
    )
    .await;
    if let Some(e) = outcome.errors.into_iter().next() {
        return Err(SyncError::Apply(e));
    }
    for c in outcome.changes.with_action(Action::Deleted) {
        let Some((ar, namespaced)) = catalog
            .resolve(&c.object.api_version, &c.object.kind)
            .cloned()
        else {
            continue;
        };
        let api: kube::Api<kube::api::DynamicObject> = if namespaced {
            kube::Api::namespaced_with(client.clone(), &c.object.namespace, &ar)
        } else {
            kube::Api::all_with(client.clone(), &ar)
        };
        let live = api
            .get_opt(&c.object.name)
            .await
            .map_err(|e| SyncError::Apply(ApplyError::api("read", &c.object, e)))?;
        let live = live.and_then(|l| serde_json::to_value(l).ok());
        if let Some(text) = diff::unified(&c.object, live.as_ref(), None) {
            out.push(ObjectDiff {
                object: c.object.clone(),
                change: DiffChange::Prune,
                text,
            });
        }
    }
    Ok(out)
}

/// Compile-time check: a pass can be spawned on the multi-threaded runtime (`tokio::spawn`
/// needs a `Send` future; see the comment in `apply::apply::apply_batch`).
#[allow(dead_code)]
fn _pass_futures_are_send(
    client: Client,
    set: std::sync::Arc<DesiredSet>,
    opts: PassOptions,
    snapshot: Snapshot,
) {
    let c2 = client.clone();
    let o2 = opts.clone();
    tokio::spawn(async move {
        let _ = reconcile(&client, &set, &opts, &|_| {}).await;
    });
    tokio::spawn(async move {
        let _ = run_pass(&c2, snapshot, &o2, &|_| {}).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: serde_json::Value) -> ArmadaChartSpec {
        let mut v = serde_json::json!({"release": "api", "namespace": "demo",
            "source": {"type": "local", "location": "charts/api"}});
        if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        serde_json::from_value(v).expect("spec")
    }

    #[test]
    fn a_chart_failure_names_the_chart_its_objects_and_what_happened_to_its_group() {
        let owner = Owner::Resource {
            kind: "ArmadaChart".into(),
            namespace: "default".into(),
            name: "api".into(),
        };
        let deploy = ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "demo".into(),
            name: "demo-api".into(),
        };
        let why = ChartNotReady {
            timed_out: Some(Duration::from_secs(5)),
            not_ready: vec![(deploy.clone(), "0 of 1 replicas available".into())],
            failed: Vec::new(),
            missing: vec!["no Job with labels {app=migrate}".into()],
        };
        let text = chart_failure(&owner, &spec(serde_json::json!({})), why.clone()).to_string();
        assert_eq!(
            text,
            "ArmadaChart default/api did not become ready within 5s (its wait.timeout); the charts after it were not deployed\n  no Job with labels {app=migrate}\ntimed out after 5s waiting for 1 object(s) to become ready:\n  Deployment/demo/demo-api: 0 of 1 replicas available"
        );
        let protected = spec(serde_json::json!({"protected": {"continue_processing": true}}));
        let text = chart_failure(&owner, &protected, why).to_string();
        assert!(
            text.contains(
                "it is protected with continue_processing, so the charts after it were deployed"
            ),
            "{text}"
        );
        let failed = ChartNotReady {
            timed_out: None,
            failed: vec![(deploy, "exceeded its progress deadline".into())],
            ..Default::default()
        };
        let text = chart_failure(&owner, &protected, failed).to_string();
        assert!(
            text.starts_with("ArmadaChart default/api failed; "),
            "{text}"
        );
        assert!(
            text.contains("Deployment/demo/demo-api: exceeded its progress deadline"),
            "{text}"
        );
    }

    #[test]
    fn kinds_without_status_are_not_waited_for() {
        assert!(!needs_wait("ConfigMap"));
        assert!(needs_wait("Deployment"));
        assert!(needs_wait("CustomResourceDefinition"));
        assert!(!needs_wait("WeaveCloud"));
        assert!(!needs_wait("ArmadaChart"));
    }
}
