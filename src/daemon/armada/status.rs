//! Armada status from a sync-root pass: the pass applies the charts' objects in waves (a
//! sequenced group's charts one after another, each waited for); this module turns its change set
//! and error into each ArmadaChart's phase (`pending`, `deployed`, `failed`), `Ready` condition
//! with `observedGeneration`, `notReady` objects, and the phases of the groups and manifests,
//! with an event on every phase change. Nothing is written when nothing changed.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::json;

use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaGroupStatus, ArmadaManifest, Phase};
use crate::api::conditions::{
    set_condition, Condition, ConditionStatus, READY, RECONCILING, STALLED,
};
use crate::apply::changeset::ChangeSet;
use crate::daemon::events::{EventPublisher, Note};
use crate::daemon::metrics::resources::ReportedResource;
use crate::daemon::status::{now_rfc3339, OwnerStatus};
use crate::daemon::suspend;
use crate::pass::PassError;
use crate::render::DesiredSet;
use crate::render::Owner;

pub use super::outcomes::{chart_outcomes, ChartOutcome};

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
    // A chart that takes part in a pass is not suspended (any more).
    if crate::api::suspend::marked(&conds) {
        set_condition(&mut conds, crate::api::suspend::condition(false, ""), &now);
    }
    conds
}

/// The phase of each chart, by `(namespace, name)`.
pub type ChartPhases = BTreeMap<(String, String), Phase>;

/// Mark the suspended charts of a pass `Suspended=True` (once: a chart already marked is not
/// written again); their phases as they stand, which their groups and manifests count as is.
pub async fn record_suspended(client: &Client, held: &BTreeSet<Owner>) -> ChartPhases {
    let mut phases = ChartPhases::new();
    for (namespace, name) in held.iter().filter_map(Owner::as_chart) {
        let api: Api<ArmadaChart> = Api::namespaced(client.clone(), namespace);
        let Ok(Some(chart)) = api.get_opt(name).await else {
            continue;
        };
        let status = chart.status.unwrap_or_default();
        if let Some(phase) = status.phase {
            phases.insert((namespace.to_string(), name.to_string()), phase);
        }
        let before = status.conditions;
        let why = "weft.io/suspend is \"true\" on the chart, its group or its manifest";
        if let Err(e) = suspend::mark(&api, name, &before, Some(why)).await {
            tracing::warn!(chart = %format!("{namespace}/{name}"), error = %crate::api::kube_error::Text(&e), "cannot mark ArmadaChart suspended");
        }
    }
    phases
}

pub(crate) async fn event<K: Resource<DynamicType = ()>>(
    events: &EventPublisher,
    obj: &K,
    warning: bool,
    reason: &str,
    text: &str,
) {
    events
        .publish(
            obj,
            Note {
                warning,
                reason,
                action: "Deploy",
                text,
                related: None,
            },
        )
        .await;
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
        tracing::warn!(chart = %format!("{namespace}/{name}"), error = %crate::api::kube_error::Text(&e), "cannot mark ArmadaChart deploying");
    }
}

/// Write the Armada status of a pass (charts, then groups, then manifests).
pub async fn record_pass(
    client: &Client,
    events: &EventPublisher,
    set: &DesiredSet,
    changes: &ChangeSet,
    error: Option<&PassError>,
    held: &ChartPhases,
) -> Vec<ReportedResource> {
    let mut reported = Vec::new();
    let outcomes = chart_outcomes(set, changes, error);
    if outcomes.is_empty() {
        return reported;
    }
    // Suspended charts count for their groups as they stand.
    let mut phases = held.clone();
    for (owner, outcome) in &outcomes {
        let Some((namespace, name)) = owner.as_chart() else {
            continue;
        };
        phases.insert((namespace.to_string(), name.to_string()), outcome.phase);
        // The source it was deployed from (`1.2.0@sha256:…`); a chart that failed keeps the
        // revision it last deployed.
        let revision = (outcome.phase == Phase::Deployed)
            .then(|| {
                set.chart_revision(&crate::api::ResourceKey {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })
            })
            .flatten();
        record_chart(client, events, namespace, name, outcome, revision).await;
    }
    // Groups and manifests named by the sync layer.
    let namespaces: BTreeSet<String> = phases.keys().map(|(ns, _)| ns.clone()).collect();
    for ns in &namespaces {
        let group_phases =
            record_aggregates::<ArmadaChartGroup>(client, events, ns, &phases, &mut reported).await;
        record_aggregates::<ArmadaManifest>(client, events, ns, &group_phases, &mut reported).await;
    }
    reported
}

/// Write one chart's outcome, unless its status already says so.
async fn record_chart(
    client: &Client,
    events: &EventPublisher,
    namespace: &str,
    name: &str,
    outcome: &ChartOutcome,
    revision: Option<&str>,
) {
    let api: Api<ArmadaChart> = Api::namespaced(client.clone(), namespace);
    let Ok(Some(chart)) = api.get_opt(name).await else {
        return;
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
        && conditions == before.conditions
        && revision.is_none_or(|r| before.revision.as_deref() == Some(r));
    if unchanged {
        return;
    }
    let mut patch = json!({"status": {
        "phase": outcome.phase,
        "conditions": conditions,
        "observedGeneration": generation,
        "notReady": outcome.not_ready,
    }});
    if let Some(r) = revision {
        patch["status"]["revision"] = json!(r);
    }
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(chart = %format!("{namespace}/{name}"), error = %crate::api::kube_error::Text(&e), "cannot write ArmadaChart status");
        return;
    }
    if before.phase != Some(outcome.phase) {
        event(
            events,
            &chart,
            outcome.phase == Phase::Failed,
            &outcome.reason,
            &outcome.message,
        )
        .await;
    }
}

/// The phase of an aggregate (group or manifest) of `members` (chart or group names), with the
/// members deployed, and the reason and message of its `Ready` condition.
struct Aggregate {
    phase: Phase,
    deployed: Vec<String>,
    reason: &'static str,
    message: String,
}

fn aggregate(
    namespace: &str,
    members: &[String],
    phases: &BTreeMap<(String, String), Phase>,
    what: &str,
    failed_reason: &'static str,
) -> Aggregate {
    let member_phases: Vec<Option<Phase>> = members
        .iter()
        .map(|m| phases.get(&(namespace.to_string(), m.clone())).copied())
        .collect();
    let phase = group_phase(&member_phases);
    let deployed: Vec<String> = members
        .iter()
        .filter(|m| phases.get(&(namespace.to_string(), (*m).clone())) == Some(&Phase::Deployed))
        .cloned()
        .collect();
    let (reason, message) = match phase {
        Phase::Deployed => ("Deployed", format!("{} {what}s deployed", deployed.len())),
        Phase::Failed => (
            failed_reason,
            match what {
                "chart" => "a chart of the group failed".to_string(),
                _ => "a group of the manifest failed".to_string(),
            },
        ),
        _ => (
            "Pending",
            format!(
                "{} of {} {what}s deployed",
                deployed.len(),
                member_phases.len()
            ),
        ),
    };
    Aggregate {
        phase,
        deployed,
        reason,
        message,
    }
}

/// A resource whose phase aggregates its members' (an ArmadaChartGroup of charts, an
/// ArmadaManifest of groups).
trait Aggregated:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + serde::Serialize
{
    /// What a member is, in messages (`chart`, `group`).
    const MEMBER: &'static str;
    /// The reason of its `Ready` condition when a member failed.
    const FAILED_REASON: &'static str;
    fn members(&self) -> &[String];
    fn group_status(&self) -> Option<&ArmadaGroupStatus>;
}

impl Aggregated for ArmadaChartGroup {
    const MEMBER: &'static str = "chart";
    const FAILED_REASON: &'static str = "ChartFailed";
    fn members(&self) -> &[String] {
        &self.spec.chart_group
    }
    fn group_status(&self) -> Option<&ArmadaGroupStatus> {
        self.status.as_ref()
    }
}

impl Aggregated for ArmadaManifest {
    const MEMBER: &'static str = "group";
    const FAILED_REASON: &'static str = "GroupFailed";
    fn members(&self) -> &[String] {
        &self.spec.chart_groups
    }
    fn group_status(&self) -> Option<&ArmadaGroupStatus> {
        self.status.as_ref()
    }
}

/// Write the phase of every `K` of `ns` from its members' `phases`, unless its status already
/// says so (an event on every phase change); the phases written.
async fn record_aggregates<K: Aggregated>(
    client: &Client,
    events: &EventPublisher,
    ns: &str,
    phases: &BTreeMap<(String, String), Phase>,
    reported: &mut Vec<ReportedResource>,
) -> BTreeMap<(String, String), Phase> {
    let mut out = BTreeMap::new();
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let Ok(list) = api.list(&Default::default()).await else {
        return out;
    };
    for item in list.items {
        let name = item.meta().name.clone().unwrap_or_default();
        let a = aggregate(ns, item.members(), phases, K::MEMBER, K::FAILED_REASON);
        out.insert((ns.to_string(), name.clone()), a.phase);
        reported.push(ReportedResource {
            kind: K::kind(&()).into_owned(),
            namespace: ns.to_string(),
            name: name.clone(),
            ready: if a.phase == Phase::Deployed {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            suspended: crate::api::suspend::annotated(item.meta()),
        });
        let before = item.group_status().cloned().unwrap_or_default();
        let generation = item.meta().generation;
        let conditions = conditions_for(
            &before.conditions,
            a.phase == Phase::Deployed,
            a.reason,
            &a.message,
            generation,
        );
        if before.phase == Some(a.phase)
            && before.deployed == a.deployed
            && before.conditions == conditions
            && before.observed_generation == generation
        {
            continue;
        }
        let patch = json!({"status": {"phase": a.phase, "deployed": a.deployed, "conditions": conditions, "observedGeneration": generation}});
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(kind = %K::kind(&()), object = %format!("{ns}/{name}"), error = %crate::api::kube_error::Text(&e), "cannot write status");
        } else if before.phase != Some(a.phase) {
            event(
                events,
                &item,
                a.phase == Phase::Failed,
                a.reason,
                &a.message,
            )
            .await;
        }
    }
    out
}

/// A chart's entry in the daemon status (`GET /api/v1/status`), from a pass's outcome.
pub fn owner_status(set: &DesiredSet, owner: &Owner, o: &ChartOutcome) -> Option<OwnerStatus> {
    if owner.is_root() {
        return None;
    }
    Some(OwnerStatus {
        kind: owner.kind.to_string(),
        namespace: owner.namespace.to_string(),
        name: owner.name.to_string(),
        ready: if o.phase == Phase::Deployed {
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
    })
}

/// Charts marked `deploying` in one pass, and the status writes doing it.
#[derive(Default)]
pub struct DeployingMarks(std::sync::Mutex<(BTreeSet<Owner>, Vec<tokio::task::JoinHandle<()>>)>);

impl DeployingMarks {
    /// Mark `owner` deploying (once per pass) if it is an ArmadaChart.
    pub fn mark(&self, client: &Client, owner: &Owner) {
        let Some((namespace, name)) = owner.as_chart() else {
            return;
        };
        let mut marks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if marks.0.insert(owner.clone()) {
            let write = mark_deploying(client.clone(), namespace.to_string(), name.to_string());
            marks.1.push(tokio::spawn(write));
        }
    }

    /// Wait for every mark written.
    pub async fn written(&self) {
        let writes = std::mem::take(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()).1);
        for write in writes {
            let _ = write.await;
        }
    }
}
