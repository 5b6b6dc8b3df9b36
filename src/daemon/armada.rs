//! Armada status from a sync-root pass: the pass applies the charts' objects in waves (a
//! sequenced group's charts one after another, each waited for); this module turns its change set
//! and error into each ArmadaChart's phase (`pending`, `deployed`, `failed`), `Ready` condition
//! with `observedGeneration`, `notReady` objects, and the phases of the groups and manifests,
//! with an event on every phase change. Nothing is written when nothing changed.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource};
use serde_json::json;

use super::status::now_rfc3339;
use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaManifest, Phase};
use crate::api::conditions::{
    set_condition, Condition, ConditionStatus, READY, RECONCILING, STALLED,
};
use crate::api::ObjectRef;
use crate::apply::changeset::ChangeSet;
use crate::apply::ApplyError;
use crate::pass::SyncError;
use crate::render::DesiredSet;
use crate::render::Owner;

/// What a pass did to one chart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartOutcome {
    pub phase: Phase,
    pub reason: String,
    pub message: String,
    pub not_ready: Vec<ObjectRef>,
}

fn not_ready_objects(e: &SyncError, out: &mut BTreeMap<ObjectRef, String>) {
    match e {
        SyncError::Apply(a) => not_ready_of_apply(a, out),
        SyncError::Many(all) => all.iter().for_each(|e| not_ready_objects(e, out)),
        _ => {}
    }
}

fn not_ready_of_apply(e: &ApplyError, out: &mut BTreeMap<ObjectRef, String>) {
    match e {
        ApplyError::WaitTimeout { not_ready, .. } | ApplyError::Failed(not_ready) => {
            out.extend(not_ready.iter().cloned());
        }
        ApplyError::Many(all) => all.iter().for_each(|e| not_ready_of_apply(e, out)),
        _ => {}
    }
}

/// The outcome of every chart of `set` in a pass that produced `changes` and `error`. Pure.
pub fn chart_outcomes(
    set: &DesiredSet,
    changes: &ChangeSet,
    error: Option<&SyncError>,
) -> BTreeMap<Owner, ChartOutcome> {
    let mut not_ready = BTreeMap::new();
    if let Some(e) = error {
        not_ready_objects(e, &mut not_ready);
    }
    let error_text = error.map(|e| e.to_string()).unwrap_or_default();
    let mut out = BTreeMap::new();
    for owner in set.owners() {
        let Owner::Resource { kind, .. } = owner else {
            continue;
        };
        if kind != "ArmadaChart" {
            continue;
        }
        let objects: Vec<ObjectRef> = set
            .objects()
            .iter()
            .filter(|o| &o.owner == owner)
            .map(|o| o.object_ref())
            .collect();
        let touched = changes.entries.iter().any(|c| &c.owner == owner);
        let mut failing: Vec<(ObjectRef, String)> = Vec::new();
        for (r, why) in &not_ready {
            if objects.iter().any(|o| {
                o.kind == r.kind
                    && o.name == r.name
                    && (o.namespace == r.namespace || o.namespace.is_empty())
            }) {
                failing.push((r.clone(), why.clone()));
            }
        }
        let applying_failed = objects.iter().any(|o| error_text.contains(&o.to_string()));
        let outcome = if error.is_none() {
            ChartOutcome {
                phase: Phase::Deployed,
                reason: "Deployed".into(),
                message: format!("{} objects applied and ready", objects.len()),
                not_ready: Vec::new(),
            }
        } else if !failing.is_empty() {
            ChartOutcome {
                phase: Phase::Failed,
                reason: "WaitFailed".into(),
                message: format!(
                    "not ready: {}",
                    failing
                        .iter()
                        .map(|(r, why)| format!("{r} ({why})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                not_ready: failing.into_iter().map(|(r, _)| r).collect(),
            }
        } else if applying_failed {
            ChartOutcome {
                phase: Phase::Failed,
                reason: "ApplyFailed".into(),
                message: error_text
                    .lines()
                    .filter(|l| objects.iter().any(|o| l.contains(&o.to_string())))
                    .collect::<Vec<_>>()
                    .join("; "),
                not_ready: Vec::new(),
            }
        } else if !touched {
            ChartOutcome {
                phase: Phase::Pending,
                reason: "Blocked".into(),
                message: "not deployed: a chart or group before it did not become ready".into(),
                not_ready: Vec::new(),
            }
        } else {
            ChartOutcome {
                phase: Phase::Deployed,
                reason: "Deployed".into(),
                message: format!("{} objects applied and ready", objects.len()),
                not_ready: Vec::new(),
            }
        };
        out.insert(owner.clone(), outcome);
    }
    out
}

/// The phase of a group (or manifest) from its members' phases.
pub fn group_phase(members: &[Option<Phase>]) -> Phase {
    if members.contains(&Some(Phase::Failed)) {
        Phase::Failed
    } else if !members.is_empty() && members.iter().all(|p| *p == Some(Phase::Deployed)) {
        Phase::Deployed
    } else {
        Phase::Pending
    }
}

fn conditions_for(
    before: &[Condition],
    ready: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Vec<Condition> {
    let now = now_rfc3339();
    let mut conds = before.to_vec();
    let status = if ready {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let with_gen = |c: Condition| Condition {
        observed_generation: generation,
        ..c
    };
    set_condition(
        &mut conds,
        with_gen(Condition::new(READY, status, reason, message)),
        &now,
    );
    set_condition(
        &mut conds,
        with_gen(Condition::new(
            RECONCILING,
            ConditionStatus::False,
            "PassFinished",
            "",
        )),
        &now,
    );
    set_condition(
        &mut conds,
        with_gen(Condition::new(STALLED, ConditionStatus::False, reason, "")),
        &now,
    );
    conds
}

async fn event<K: Resource<DynamicType = ()>>(
    recorder: &Recorder,
    obj: &K,
    warning: bool,
    reason: &str,
    note: &str,
) {
    let e = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_string(),
        note: Some(note.to_string()),
        action: "Deploy".to_string(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&e, &obj.object_ref(&())).await {
        tracing::debug!(error = %err, "cannot publish event");
    }
}

/// Mark one chart `deploying` (`Reconciling=True`) because the running pass is changing its
/// objects. The caller awaits every such write before [`record_pass`] writes the pass's outcome,
/// so a chart is never left `deploying` by a late write.
pub async fn mark_deploying(client: Client, namespace: String, name: String) {
    let api: Api<ArmadaChart> = Api::namespaced(client, &namespace);
    let Ok(Some(chart)) = api.get_opt(&name).await else {
        return;
    };
    let status = chart.status.clone().unwrap_or_default();
    if status.phase == Some(Phase::Deploying) {
        return;
    }
    let generation = chart.metadata.generation;
    let mut conditions = status.conditions.clone();
    set_condition(
        &mut conditions,
        Condition {
            observed_generation: generation,
            ..Condition::new(
                RECONCILING,
                ConditionStatus::True,
                "Deploying",
                "the sync pass is applying this chart's objects",
            )
        },
        &now_rfc3339(),
    );
    let patch = json!({"status": {"phase": Phase::Deploying, "conditions": conditions}});
    if let Err(e) = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(chart = %format!("{namespace}/{name}"), error = %e, "cannot mark ArmadaChart deploying");
    }
}

/// Write the Armada status of a pass (charts, then groups, then manifests).
pub async fn record_pass(
    client: &Client,
    recorder: &Recorder,
    set: &DesiredSet,
    changes: &ChangeSet,
    error: Option<&SyncError>,
) {
    let outcomes = chart_outcomes(set, changes, error);
    let mut phases: BTreeMap<(String, String), Phase> = BTreeMap::new();
    for (owner, outcome) in &outcomes {
        let Owner::Resource {
            namespace, name, ..
        } = owner
        else {
            continue;
        };
        phases.insert((namespace.clone(), name.clone()), outcome.phase);
        let api: Api<ArmadaChart> = Api::namespaced(client.clone(), namespace);
        let Ok(Some(chart)) = api.get_opt(name).await else {
            continue;
        };
        let before = chart.status.clone().unwrap_or_default();
        let generation = chart.metadata.generation;
        let conditions = conditions_for(
            &before.conditions,
            outcome.phase == Phase::Deployed,
            &outcome.reason,
            &outcome.message,
            generation,
        );
        let unchanged = before.phase == Some(outcome.phase)
            && before.not_ready == outcome.not_ready
            && before.observed_generation == generation
            && conditions == before.conditions;
        if unchanged {
            continue;
        }
        let patch = json!({"status": {
            "phase": outcome.phase,
            "conditions": conditions,
            "observedGeneration": generation,
            "notReady": outcome.not_ready,
        }});
        if let Err(e) = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(chart = %format!("{namespace}/{name}"), error = %e, "cannot write ArmadaChart status");
            continue;
        }
        if before.phase != Some(outcome.phase) {
            event(
                recorder,
                &chart,
                outcome.phase == Phase::Failed,
                &outcome.reason,
                &outcome.message,
            )
            .await;
        }
    }
    if outcomes.is_empty() {
        return;
    }
    // Groups and manifests named by the sync layer.
    let namespaces: BTreeSet<String> = phases.keys().map(|(ns, _)| ns.clone()).collect();
    let mut group_phases: BTreeMap<(String, String), Phase> = BTreeMap::new();
    for ns in &namespaces {
        let groups: Api<ArmadaChartGroup> = Api::namespaced(client.clone(), ns);
        let Ok(list) = groups.list(&Default::default()).await else {
            continue;
        };
        for g in list.items {
            let name = g.metadata.name.clone().unwrap_or_default();
            let members: Vec<Option<Phase>> = g
                .spec
                .chart_group
                .iter()
                .map(|c| phases.get(&(ns.clone(), c.clone())).copied())
                .collect();
            let phase = group_phase(&members);
            group_phases.insert((ns.clone(), name.clone()), phase);
            let deployed: Vec<String> = g
                .spec
                .chart_group
                .iter()
                .filter(|c| phases.get(&(ns.clone(), (*c).clone())) == Some(&Phase::Deployed))
                .cloned()
                .collect();
            let before = g.status.clone().unwrap_or_default();
            let (reason, message) = match phase {
                Phase::Deployed => ("Deployed", format!("{} charts deployed", deployed.len())),
                Phase::Failed => ("ChartFailed", "a chart of the group failed".to_string()),
                _ => (
                    "Pending",
                    format!("{} of {} charts deployed", deployed.len(), members.len()),
                ),
            };
            let conditions = conditions_for(
                &before.conditions,
                phase == Phase::Deployed,
                reason,
                &message,
                g.metadata.generation,
            );
            if before.phase == Some(phase)
                && before.deployed == deployed
                && before.conditions == conditions
                && before.observed_generation == g.metadata.generation
            {
                continue;
            }
            let patch = json!({"status": {"phase": phase, "deployed": deployed, "conditions": conditions, "observedGeneration": g.metadata.generation}});
            if let Err(e) = groups
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(group = %format!("{ns}/{name}"), error = %e, "cannot write ArmadaChartGroup status");
            } else if before.phase != Some(phase) {
                event(recorder, &g, phase == Phase::Failed, reason, &message).await;
            }
        }
        let manifests: Api<ArmadaManifest> = Api::namespaced(client.clone(), ns);
        let Ok(list) = manifests.list(&Default::default()).await else {
            continue;
        };
        for m in list.items {
            let name = m.metadata.name.clone().unwrap_or_default();
            let members: Vec<Option<Phase>> = m
                .spec
                .chart_groups
                .iter()
                .map(|g| group_phases.get(&(ns.clone(), g.clone())).copied())
                .collect();
            let phase = group_phase(&members);
            let deployed: Vec<String> = m
                .spec
                .chart_groups
                .iter()
                .filter(|g| group_phases.get(&(ns.clone(), (*g).clone())) == Some(&Phase::Deployed))
                .cloned()
                .collect();
            let before = m.status.clone().unwrap_or_default();
            let (reason, message) = match phase {
                Phase::Deployed => ("Deployed", format!("{} groups deployed", deployed.len())),
                Phase::Failed => ("GroupFailed", "a group of the manifest failed".to_string()),
                _ => (
                    "Pending",
                    format!("{} of {} groups deployed", deployed.len(), members.len()),
                ),
            };
            let conditions = conditions_for(
                &before.conditions,
                phase == Phase::Deployed,
                reason,
                &message,
                m.metadata.generation,
            );
            if before.phase == Some(phase)
                && before.deployed == deployed
                && before.conditions == conditions
                && before.observed_generation == m.metadata.generation
            {
                continue;
            }
            let patch = json!({"status": {"phase": phase, "deployed": deployed, "conditions": conditions, "observedGeneration": m.metadata.generation}});
            if let Err(e) = manifests
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(manifest = %format!("{ns}/{name}"), error = %e, "cannot write ArmadaManifest status");
            } else if before.phase != Some(phase) {
                event(recorder, &m, phase == Phase::Failed, reason, &message).await;
            }
        }
    }
}

/// A child of an ArmadaChart that was deleted, or whose latest write (outside the status
/// subresource) was not Weft's own: `(owner reference, object)`, e.g.
/// `("ArmadaChart/ns/web", "apps/v1/Deployment/ns/web")`.
fn child_drifted<K: Resource>(event: &kube::runtime::watcher::Event<K>) -> Option<(String, String)>
where
    K::DynamicType: Default,
{
    use kube::runtime::watcher::Event as W;
    let (obj, deleted) = match event {
        W::Apply(o) => (o, false),
        W::Delete(o) => (o, true),
        _ => return None,
    };
    let meta = obj.meta();
    let owner_ref = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::render::ownership::OWNER_REF_ANNOTATION))
        .filter(|r| r.starts_with("ArmadaChart/"))?
        .clone();
    let dt = K::DynamicType::default();
    let object = format!(
        "{}/{}/{}",
        K::kind(&dt),
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default()
    );
    if deleted {
        return Some((owner_ref, object));
    }
    let latest = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref().unwrap_or("").is_empty())
        .max_by(|a, b| a.time.cmp(&b.time));
    // Weft's own writes, and the controllers' bookkeeping on the main resource (the deployment
    // controller's revision annotation), are not drift.
    let drifted = latest.is_some_and(|m| {
        !matches!(
            m.manager.as_deref(),
            Some(crate::apply::FIELD_MANAGER) | Some("kube-controller-manager")
        )
    });
    drifted.then_some((owner_ref, object))
}

/// The finalizer that makes Weft prune a deleted ArmadaChart's children.
pub const FINALIZER: &str = "weft.io/armada-chart";

/// What an Armada watch event asks for.
enum Signal {
    /// Queue a sync-root pass.
    Pass(&'static str),
    /// A chart's child drifted: `(owner reference, object)`.
    Drift(String, String),
    /// An ArmadaChart was seen (finalizer bookkeeping).
    Chart(Box<ArmadaChart>),
}

fn chart_of_reference(r: &str) -> Option<(String, String)> {
    let mut parts = r.splitn(3, '/');
    (parts.next()? == "ArmadaChart").then_some(())?;
    Some((parts.next()?.to_string(), parts.next()?.to_string()))
}

/// A child of a chart drifted. With `driftPolicy: report` mark the chart `inconsistent` with a
/// `Drifted` condition naming the object and change nothing; a chart being deleted (its
/// finalizer is pruning the children) is left alone; otherwise a pass corrects it. Returns
/// whether a pass is wanted.
async fn on_drift(client: &Client, recorder: &Recorder, owner_ref: &str, object: &str) -> bool {
    let Some((ns, name)) = chart_of_reference(owner_ref) else {
        return false;
    };
    let api: Api<ArmadaChart> = Api::namespaced(client.clone(), &ns);
    let chart = match api.get_opt(&name).await {
        Ok(Some(c)) => c,
        // Gone (pruned from git): its children go with it.
        Ok(None) => return false,
        Err(e) => {
            tracing::warn!(chart = %format!("{ns}/{name}"), error = %e, "cannot read ArmadaChart; queueing a pass");
            return true;
        }
    };
    if chart.metadata.deletion_timestamp.is_some() {
        return false;
    }
    if chart.spec.drift_policy != crate::api::DriftPolicy::Report {
        return true;
    }
    let before = chart.status.clone().unwrap_or_default();
    let message = format!("changed outside Weft (driftPolicy: report, not corrected): {object}");
    let mut conditions = before.conditions.clone();
    set_condition(
        &mut conditions,
        Condition {
            observed_generation: chart.metadata.generation,
            ..Condition::new(
                crate::api::conditions::DRIFTED,
                ConditionStatus::True,
                "Drifted",
                &message,
            )
        },
        &now_rfc3339(),
    );
    if before.inconsistent && conditions == before.conditions {
        return false;
    }
    let patch = json!({"status": {"inconsistent": true, "conditions": conditions}});
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(chart = %format!("{ns}/{name}"), %object, "drift reported, not corrected");
            event(recorder, &chart, true, "Drifted", &message).await;
        }
        Err(e) => {
            tracing::warn!(chart = %format!("{ns}/{name}"), error = %e, "cannot write ArmadaChart status")
        }
    }
    false
}

/// Why a chart's finalizer could not run.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError {
    #[error("ArmadaChart {namespace}/{name}: {action}: {message}")]
    Kube {
        namespace: String,
        name: String,
        action: &'static str,
        message: String,
    },
    #[error("ArmadaChart {namespace}/{name}: pruning its children: {message}")]
    Prune {
        namespace: String,
        name: String,
        message: String,
    },
}

/// The finalizer of one chart: add it to a live chart; on a deleted chart prune the children
/// of its inventory (only those that still carry its owner label), then remove it.
async fn finalize(
    client: &Client,
    recorder: &Recorder,
    chart: &ArmadaChart,
) -> Result<(), FinalizerError> {
    let ns = chart.metadata.namespace.clone().unwrap_or_default();
    let name = chart.metadata.name.clone().unwrap_or_default();
    let kube_err = |action: &'static str, e: kube::Error| FinalizerError::Kube {
        namespace: ns.clone(),
        name: name.clone(),
        action,
        message: e.to_string(),
    };
    let api: Api<ArmadaChart> = Api::namespaced(client.clone(), &ns);
    let finalizers = chart.metadata.finalizers.clone().unwrap_or_default();
    let ours = finalizers.iter().any(|f| f == FINALIZER);
    if chart.metadata.deletion_timestamp.is_none() {
        if ours {
            return Ok(());
        }
        let mut next = finalizers;
        next.push(FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": next, "resourceVersion": chart.metadata.resource_version}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| kube_err("adding the finalizer", e))?;
        tracing::debug!(chart = %format!("{ns}/{name}"), "finalizer added");
        return Ok(());
    }
    if !ours {
        return Ok(());
    }
    let owner = Owner::Resource {
        kind: "ArmadaChart".into(),
        namespace: ns.clone(),
        name: name.clone(),
    };
    let entries: BTreeSet<ObjectRef> = chart
        .status
        .as_ref()
        .map(|s| s.inventory.iter().cloned().collect())
        .unwrap_or_default();
    if !entries.is_empty() {
        let prune_err = |message: String| FinalizerError::Prune {
            namespace: ns.clone(),
            name: name.clone(),
            message,
        };
        let catalog = crate::apply::plan::Catalog::discover(client)
            .await
            .map_err(|e| prune_err(e.to_string()))?;
        let inventory = crate::apply::inventory::Inventory {
            owner: owner.clone(),
            entries,
            source: crate::apply::inventory::InventorySource::Stored,
        };
        let opts = crate::apply::prune::PruneOptions {
            force: true,
            ..Default::default()
        };
        let outcome = crate::apply::prune::prune(
            client,
            &catalog,
            &DesiredSet::for_owners(Vec::new(), [owner.clone()].into()),
            &BTreeSet::new(),
            &[inventory],
            &opts,
            &|_| {},
        )
        .await;
        if !outcome.errors.is_empty() {
            let message = outcome
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            return Err(prune_err(message));
        }
        let pruned = outcome
            .changes
            .entries
            .iter()
            .filter(|c| c.action == crate::apply::changeset::Action::Deleted)
            .map(|c| c.object.to_string())
            .collect::<Vec<_>>();
        let note = format!(
            "chart deleted; pruned {} children: {}",
            pruned.len(),
            pruned.join(", ")
        );
        tracing::info!(chart = %format!("{ns}/{name}"), "{note}");
        event(recorder, chart, false, "Pruned", &note).await;
    }
    let rest: Vec<String> = finalizers.into_iter().filter(|f| f != FINALIZER).collect();
    let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": chart.metadata.resource_version}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if crate::apply::is_not_found(&e) => Ok(()),
        Err(e) => Err(kube_err("removing the finalizer", e)),
    }
}

/// The value of `weft.io/requested-at` on an Armada resource.
fn requested_at<K: Resource>(obj: &K) -> Option<String> {
    obj.meta()
        .annotations
        .as_ref()?
        .get(crate::render::ownership::REQUESTED_AT_ANNOTATION)
        .cloned()
}

/// Watches that turn Armada events into sync-root passes (the pass has the chart sources): a
/// chart's child deleted or edited outside Weft (drift, corrected by the pass within seconds), and
/// a new `weft.io/requested-at` annotation on an ArmadaChart, ArmadaChartGroup or ArmadaManifest.
/// Runs until `stop` turns true.
pub async fn watch_triggers(
    client: Client,
    queue: std::sync::Arc<super::trigger::TriggerQueue<super::status::PassReport>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use futures::stream::{BoxStream, StreamExt};
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    use kube::runtime::watcher::{self, Event as W};
    use kube::runtime::WatchStreamExt;
    let recorder = super::weavecloud::recorder(client.clone());

    let children = watcher::Config::default().labels(&format!(
        "{}={}",
        crate::render::ownership::MANAGED_BY_LABEL,
        crate::render::ownership::MANAGED_BY_VALUE
    ));
    fn drift_stream<K>(api: Api<K>, cfg: watcher::Config) -> BoxStream<'static, Option<Signal>>
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
        K::DynamicType: Default,
    {
        // Backoff: a kind the cluster does not serve (yet) must not make a hot retry loop.
        watcher::watcher(api, cfg)
            .default_backoff()
            .map(|e| {
                let (owner, object) = child_drifted(&e.ok()?)?;
                Some(Signal::Drift(owner, object))
            })
            .boxed()
    }
    fn request_stream<K>(api: Api<K>, charts: bool) -> BoxStream<'static, Option<Signal>>
    where
        K: Resource
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .flat_map(move |e| {
                let mut out: Vec<Option<Signal>> = Vec::new();
                if let Err(err) = &e {
                    tracing::debug!(error = %err, "Armada watch error");
                }
                if let Ok(W::Apply(o) | W::InitApply(o)) = e {
                    if charts {
                        // Finalizer bookkeeping for every chart seen.
                        if let Ok(chart) =
                            serde_json::to_value(&o).and_then(serde_json::from_value::<ArmadaChart>)
                        {
                            out.push(Some(Signal::Chart(Box::new(chart))));
                        }
                    }
                    let key = format!(
                        "{}/{}",
                        o.meta().namespace.clone().unwrap_or_default(),
                        o.meta().name.clone().unwrap_or_default()
                    );
                    if let Some(value) = requested_at(&o) {
                        let previous = seen.insert(key, value.clone());
                        // The first sighting (startup) only records the value.
                        if previous.is_some_and(|p| p != value) {
                            out.push(Some(Signal::Pass("requested-at")));
                        }
                    }
                }
                futures::stream::iter(out)
            })
            .boxed()
    }
    let streams: Vec<BoxStream<'static, Option<Signal>>> = vec![
        drift_stream(Api::<Deployment>::all(client.clone()), children.clone()),
        drift_stream(Api::<StatefulSet>::all(client.clone()), children.clone()),
        drift_stream(Api::<DaemonSet>::all(client.clone()), children.clone()),
        drift_stream(Api::<Job>::all(client.clone()), children.clone()),
        drift_stream(Api::<Service>::all(client.clone()), children.clone()),
        drift_stream(Api::<ConfigMap>::all(client.clone()), children),
        request_stream(Api::<ArmadaChart>::all(client.clone()), true),
        request_stream(Api::<ArmadaChartGroup>::all(client.clone()), false),
        request_stream(Api::<ArmadaManifest>::all(client.clone()), false),
    ];
    let mut events = futures::stream::select_all(streams);
    loop {
        tokio::select! {
            _ = stop.changed() => if *stop.borrow() { return },
            next = events.next() => match next {
                None => return,
                Some(Some(Signal::Pass(why))) => {
                    tracing::info!(reason = %why, "Armada watch event: queueing a sync-root pass");
                    if queue.trigger(super::trigger::TriggerReason::Watch).is_err() {
                        return;
                    }
                }
                Some(Some(Signal::Drift(owner, object))) => {
                    if on_drift(&client, &recorder, &owner, &object).await {
                        tracing::info!(%owner, %object, "chart child drifted: queueing a sync-root pass");
                        if queue.trigger(super::trigger::TriggerReason::Watch).is_err() {
                            return;
                        }
                    }
                }
                Some(Some(Signal::Chart(chart))) => {
                    let (client, recorder) = (client.clone(), recorder.clone());
                    // Off the loop: a prune must not hold up the other watches. A failure is
                    // retried with a growing delay until it succeeds or the chart is gone.
                    tokio::spawn(async move {
                        let mut chart = *chart;
                        let mut delay = std::time::Duration::from_secs(1);
                        loop {
                            match finalize(&client, &recorder, &chart).await {
                                Ok(()) => return,
                                Err(e) => tracing::warn!(error = %e, "ArmadaChart finalizer failed; retrying"),
                            }
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(std::time::Duration::from_secs(60));
                            let api: Api<ArmadaChart> = Api::namespaced(
                                client.clone(),
                                &chart.metadata.namespace.clone().unwrap_or_default(),
                            );
                            match api.get_opt(&chart.metadata.name.clone().unwrap_or_default()).await {
                                Ok(Some(c)) => chart = c,
                                Ok(None) => return,
                                Err(_) => {}
                            }
                        }
                    });
                }
                Some(None) => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::changeset::{Action, Change};
    use crate::render::Owner;
    use serde_json::json;

    fn chart(name: &str) -> Owner {
        Owner::Resource {
            kind: "ArmadaChart".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn set() -> DesiredSet {
        let objs = vec![
            chart("db").adopt(json!({"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"db","namespace":"demo"}}), 0, None),
            chart("api").adopt(json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"api","namespace":"demo"}}), 1, None),
            chart("web").adopt(json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"demo"}}), 2, None),
        ];
        DesiredSet::for_owners(objs, [chart("db"), chart("api"), chart("web")].into())
    }

    fn applied(owner: &Owner, kind: &str, name: &str) -> Change {
        Change {
            object: ObjectRef {
                api_version: "apps/v1".into(),
                kind: kind.into(),
                namespace: "demo".into(),
                name: name.into(),
            },
            owner: owner.clone(),
            action: Action::Created,
            reason: None,
        }
    }

    #[test]
    fn a_chart_that_times_out_fails_and_the_charts_after_it_stay_pending() {
        let changes = ChangeSet {
            entries: vec![
                applied(&chart("db"), "StatefulSet", "db"),
                applied(&chart("api"), "Deployment", "api"),
            ],
        };
        let api_ref = changes.entries[1].object.clone();
        let error = SyncError::Apply(ApplyError::WaitTimeout {
            timeout: std::time::Duration::from_secs(900),
            not_ready: vec![(api_ref.clone(), "0 of 1 replicas available".into())],
        });
        let out = chart_outcomes(&set(), &changes, Some(&error));
        assert_eq!(out[&chart("db")].phase, Phase::Deployed);
        assert_eq!(out[&chart("api")].phase, Phase::Failed);
        assert_eq!(out[&chart("api")].not_ready, vec![api_ref]);
        assert!(
            out[&chart("api")].message.contains("0 of 1 replicas"),
            "{}",
            out[&chart("api")].message
        );
        assert_eq!(out[&chart("web")].phase, Phase::Pending);
        assert_eq!(out[&chart("web")].reason, "Blocked");
    }

    #[test]
    fn a_successful_pass_deploys_every_chart_and_groups_follow_their_members() {
        let out = chart_outcomes(&set(), &ChangeSet::default(), None);
        assert!(out.values().all(|o| o.phase == Phase::Deployed));
        assert_eq!(
            group_phase(&[Some(Phase::Deployed), Some(Phase::Deployed)]),
            Phase::Deployed
        );
        assert_eq!(
            group_phase(&[Some(Phase::Deployed), Some(Phase::Failed)]),
            Phase::Failed
        );
        assert_eq!(group_phase(&[Some(Phase::Deployed), None]), Phase::Pending);
    }

    fn deployment(manager: &str) -> k8s_openapi::api::apps::v1::Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "demo",
                "annotations": {"weft.io/owner-ref": "ArmadaChart/demo/web"},
                "managedFields": [
                    {"manager": "weft", "operation": "Apply", "time": "2026-01-01T00:00:00Z"},
                    {"manager": manager, "operation": "Update", "time": "2026-01-01T00:00:01Z"}
                ]
            }
        }))
        .expect("deployment")
    }

    #[test]
    fn a_childs_edit_by_someone_else_or_its_deletion_is_drift_of_its_chart() {
        use kube::runtime::watcher::Event as W;
        let drift = child_drifted(&W::Apply(deployment("kubectl-edit")));
        assert_eq!(
            drift,
            Some((
                "ArmadaChart/demo/web".to_string(),
                "Deployment/demo/web".to_string()
            ))
        );
        assert_eq!(child_drifted(&W::Apply(deployment("weft"))), None);
        assert!(child_drifted(&W::Delete(deployment("weft"))).is_some());
        assert_eq!(
            chart_of_reference("ArmadaChart/demo/web"),
            Some(("demo".to_string(), "web".to_string()))
        );
        assert_eq!(chart_of_reference("WeaveCloud/demo/web"), None);
    }
}
