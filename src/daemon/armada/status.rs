//! Armada status from a sync-root pass: the pass applies the charts' objects in waves (a
//! sequenced group's charts one after another, each waited for); this module turns its change set
//! and error into each ArmadaChart's phase (`pending`, `deployed`, `failed`), `Ready` condition
//! with `observedGeneration`, `notReady` objects, and the phases of the groups and manifests,
//! with an event on every phase change. Nothing is written when nothing changed.

use crate::api::owner::OwnerKind;
use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::json;

use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaGroupStatus, ArmadaManifest, Phase};
use crate::api::conditions::{
    set_condition, Condition, ConditionStatus, READY, RECONCILING, STALLED,
};
use crate::api::ObjectRef;
use crate::apply::changeset::ChangeSet;
use crate::apply::ApplyError;
use crate::daemon::events::{EventPublisher, Note};
use crate::daemon::metrics::resources::ReportedResource;
use crate::daemon::status::{now_rfc3339, OwnerStatus};
use crate::daemon::suspend;
use crate::pass::{armada, PassError};
use crate::render::DesiredSet;
use crate::render::Owner;
use crate::source::git::redact_url_passwords;

/// What a pass did to one chart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartOutcome {
    pub phase: Phase,
    pub reason: String,
    pub message: String,
    pub not_ready: Vec<ObjectRef>,
}

fn not_ready_objects(e: &PassError, out: &mut BTreeMap<ObjectRef, String>) {
    match e {
        PassError::Apply(a) => not_ready_of_apply(a, out),
        PassError::Many(all) => all.iter().for_each(|e| not_ready_objects(e, out)),
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
    error: Option<&PassError>,
) -> BTreeMap<Owner, ChartOutcome> {
    let mut not_ready = BTreeMap::new();
    if let Some(e) = error {
        not_ready_objects(e, &mut not_ready);
    }
    let error_text = error
        .map(|e| redact_url_passwords(&e.to_string()))
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for owner in set.owners() {
        if owner.kind != OwnerKind::ArmadaChart {
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
        let render_failure = set.failures().iter().find(|f| &f.owner == owner);
        let outcome = if let Some(f) = render_failure {
            ChartOutcome {
                phase: Phase::Failed,
                reason: "RenderFailed".into(),
                message: redact_url_passwords(&f.error.to_string()),
                not_ready: Vec::new(),
            }
        } else if error.is_none() {
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
            // Named below, once every chart's outcome is known.
            ChartOutcome {
                phase: Phase::Pending,
                reason: BLOCKED.into(),
                message: String::new(),
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
    if let Some(e) = error {
        let message = armada::blocked_message(set, &blockers(set, &out, &not_ready, e));
        out.values_mut()
            .filter(|o| o.reason == BLOCKED)
            .for_each(|o| o.message = message.clone());
    }
    out
}

/// The reason of a chart a pass did not reach.
const BLOCKED: &str = "Blocked";

/// What kept the charts a pass did not reach from being deployed: the charts that failed (but
/// those protected with `continue_processing`, after which the pass went on), else the
/// objects of no chart that did not become ready (a plain manifest of the sync root in an
/// earlier wave), else the pass's error itself.
fn blockers(
    set: &DesiredSet,
    outcomes: &BTreeMap<Owner, ChartOutcome>,
    not_ready: &BTreeMap<ObjectRef, String>,
    error: &PassError,
) -> Vec<armada::Blocker> {
    let protected: BTreeSet<Owner> = armada::chart_specs(set)
        .into_iter()
        .filter(|(_, spec)| {
            spec.protected
                .as_ref()
                .is_some_and(|p| p.continue_processing)
        })
        .map(|(owner, _)| owner)
        .collect();
    let charts: Vec<armada::Blocker> = outcomes
        .iter()
        .filter(|(owner, o)| o.phase == Phase::Failed && !protected.contains(owner))
        .map(|(owner, o)| armada::Blocker::Chart {
            chart: owner.clone(),
            how: match o.reason.as_str() {
                "RenderFailed" => "could not be rendered",
                "ApplyFailed" => "could not be applied",
                _ => "did not become ready",
            },
        })
        .collect();
    if !charts.is_empty() {
        return charts;
    }
    let of_a_chart = |r: &ObjectRef| {
        set.objects().iter().any(|o| {
            let d = o.object_ref();
            o.owner.kind == OwnerKind::ArmadaChart
                && d.kind == r.kind
                && d.name == r.name
                && (d.namespace == r.namespace || d.namespace.is_empty())
        })
    };
    let objects: Vec<armada::Blocker> = not_ready
        .iter()
        .filter(|(r, _)| !of_a_chart(r))
        .map(|(r, why)| armada::Blocker::Object {
            object: r.to_string(),
            why: redact_url_passwords(why),
        })
        .collect();
    if !objects.is_empty() {
        return objects;
    }
    let text = redact_url_passwords(&error.to_string());
    vec![armada::Blocker::Pass(
        text.lines().next().unwrap_or_default().to_string(),
    )]
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
    // A chart that takes part in a pass is not suspended (any more).
    if suspend::marked(&conds) {
        set_condition(&mut conds, suspend::condition(false, ""), &now);
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
        record_chart(client, events, namespace, name, outcome).await;
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
        && conditions == before.conditions;
    if unchanged {
        return;
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
            suspended: suspend::annotated(item.meta()),
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
        namespace: owner.namespace.clone(),
        name: owner.name.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::changeset::{Action, Change};
    use crate::render::Owner;
    use serde_json::json;

    fn chart(name: &str) -> Owner {
        Owner::resource(OwnerKind::ArmadaChart, "default", name)
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
            ..Default::default()
        };
        let api_ref = changes.entries[1].object.clone();
        let error = PassError::Apply(ApplyError::WaitTimeout {
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
        assert_eq!(
            out[&chart("web")].message,
            "not deployed: blocked by chart default/api, which did not become ready"
        );
    }

    /// Issue 40: a Blocked chart always says what blocks it — the chart (and its group) that
    /// failed, else the object of no chart that did not become ready, else the pass's error.
    #[test]
    fn a_blocked_chart_names_what_blocks_it() {
        let group = Owner::root("weft-system", "weft").adopt(
            json!({"apiVersion": "armada.airshipit.org/v1alpha1", "kind": "ArmadaChartGroup",
                "metadata": {"name": "backend", "namespace": "default"},
                "spec": {"sequenced": true, "chart_group": ["db", "api"]}}),
            0,
            None,
        );
        let mut objects = set().objects().to_vec();
        objects.push(group);
        let owners = [
            Owner::root("weft-system", "weft"),
            chart("db"),
            chart("api"),
            chart("web"),
        ];
        let grouped = DesiredSet::for_owners(objects, owners.into());
        let db_only = ChangeSet {
            entries: vec![applied(&chart("db"), "StatefulSet", "db")],
            ..Default::default()
        };
        // A chart of a group failed its wait (as `pass::armada::failure` reports it).
        let api = ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "demo".into(),
            name: "api".into(),
        };
        let mut changes = db_only.clone();
        changes
            .entries
            .push(applied(&chart("api"), "Deployment", "api"));
        let error = PassError::Many(vec![
            PassError::Chart {
                chart: "default/api".into(),
                summary: "did not become ready within 5s (its wait.timeout); the charts after it were not deployed".into(),
            },
            PassError::Apply(ApplyError::WaitTimeout {
                timeout: std::time::Duration::from_secs(5),
                not_ready: vec![(api, "0 of 1 replicas available".into())],
            }),
        ]);
        let out = chart_outcomes(&grouped, &changes, Some(&error));
        assert_eq!(
            out[&chart("web")].message,
            "not deployed: blocked by chart default/api (group default/backend), which did not become ready"
        );

        // An object of the sync root, in an earlier wave, that did not become ready.
        let provider = ObjectRef {
            api_version: "notification.weft.io/v1alpha1".into(),
            kind: "Provider".into(),
            namespace: "apps".into(),
            name: "slack".into(),
        };
        let error = PassError::Apply(ApplyError::Failed(vec![(
            provider,
            "Ready=False: SecretNotFound: Secret slack-webhook (secretRef) does not exist".into(),
        )]));
        let out = chart_outcomes(&set(), &ChangeSet::default(), Some(&error));
        for c in ["db", "api", "web"] {
            assert_eq!(out[&chart(c)].reason, "Blocked");
            assert_eq!(
                out[&chart(c)].message,
                "not deployed: blocked by Provider/apps/slack, which did not become ready \
                 (Ready=False: SecretNotFound: Secret slack-webhook (secretRef) does not exist)"
            );
        }

        // Anything else: the pass's own error, its first line.
        let error = PassError::Suspended("the root weft is suspended (weft suspend)\nmore".into());
        let out = chart_outcomes(&set(), &db_only, Some(&error));
        assert_eq!(
            out[&chart("api")].message,
            "not deployed: blocked by the pass, which stopped before it: the root weft is suspended (weft suspend)"
        );
        // Never the old words that named nothing.
        assert!(out
            .values()
            .all(|o| !o.message.contains("a chart or group before it")));
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
}
