//! What one sync-root pass did to each ArmadaChart, judged from its change set and its error:
//! `deployed` (applied and ready), `failed` (named by the pass as a chart that did not become
//! ready, could not be rendered or applied, or a hook that failed; with the wait's reason), or
//! `pending` with reason `Blocked` (its wave came after the wave where a failed chart stopped the
//! pass; the message names that chart). Pure: `weft sync`, the daemon's status writes, its
//! `/api/v1/status` and the metrics all read these outcomes, so they tell the same story.
//!
//! A chart is judged deployed by where the pass stopped, not by whether a change of its owner
//! was seen: a chart whose namespace or cluster roles were applied but whose wave never came is
//! not deployed (issue 49).

use std::collections::{BTreeMap, BTreeSet};

use crate::api::armada::Phase;
use crate::api::redact::redact_url_passwords;
use crate::api::ObjectRef;
use crate::apply::changeset::ChangeSet;
use crate::apply::ApplyError;
use crate::pass::{armada, PassError};
use crate::render::{DesiredSet, Owner};

/// What a pass did to one chart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartOutcome {
    pub phase: Phase,
    pub reason: String,
    pub message: String,
    pub not_ready: Vec<ObjectRef>,
}

/// The reason of a chart a pass did not reach.
const BLOCKED: &str = "Blocked";

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

/// The charts the pass's error names as failed (`namespace/name`), with what it says of each.
fn charts_named(e: &PassError, out: &mut BTreeMap<String, Vec<String>>) {
    match e {
        PassError::Chart { chart, summary } => {
            out.entry(chart.clone()).or_default().push(summary.clone())
        }
        PassError::Many(all) => all.iter().for_each(|e| charts_named(e, out)),
        _ => {}
    }
}

/// One line of what the pass said of a chart (its summary, then the lines under it).
fn one_line(summaries: &[String]) -> String {
    summaries
        .iter()
        .flat_map(|s| s.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The deployment wave of a chart: its objects' (the first), else its render failure's.
fn wave_of(set: &DesiredSet, owner: &Owner) -> Option<u32> {
    set.objects()
        .iter()
        .filter(|o| &o.owner == owner)
        .map(|o| o.wave)
        .min()
        .or_else(|| {
            set.failures()
                .iter()
                .find(|f| &f.owner == owner)
                .map(|f| f.wave)
        })
}

fn deployed(objects: usize) -> ChartOutcome {
    ChartOutcome {
        phase: Phase::Deployed,
        reason: "Deployed".into(),
        message: format!("{objects} objects applied and ready"),
        not_ready: Vec::new(),
    }
}

/// The outcome of `owner` if the pass failed it: rendered, named by the error, with objects not
/// ready, or with objects the error says could not be applied.
fn failure(
    set: &DesiredSet,
    owner: &Owner,
    objects: &[ObjectRef],
    named: &BTreeMap<String, Vec<String>>,
    not_ready: &BTreeMap<ObjectRef, String>,
    error_text: &str,
) -> Option<ChartOutcome> {
    if let Some(f) = set.failures().iter().find(|f| &f.owner == owner) {
        return Some(ChartOutcome {
            phase: Phase::Failed,
            reason: "RenderFailed".into(),
            message: redact_url_passwords(&f.error.to_string()),
            not_ready: Vec::new(),
        });
    }
    let failing: Vec<(&ObjectRef, &String)> = not_ready
        .iter()
        .filter(|(r, _)| {
            objects.iter().any(|o| {
                o.kind == r.kind
                    && o.name == r.name
                    && (o.namespace == r.namespace || o.namespace.is_empty())
            })
        })
        .collect();
    let said = owner
        .as_chart()
        .and_then(|(ns, name)| named.get(&format!("{ns}/{name}")));
    if said.is_some() || !failing.is_empty() {
        let mut parts = Vec::new();
        if let Some(said) = said {
            parts.push(redact_url_passwords(&one_line(said)));
        }
        if !failing.is_empty() {
            parts.push(format!(
                "not ready: {}",
                failing
                    .iter()
                    .map(|(r, why)| format!("{r} ({})", redact_url_passwords(why)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        return Some(ChartOutcome {
            phase: Phase::Failed,
            reason: "WaitFailed".into(),
            message: parts.join("; "),
            not_ready: failing.into_iter().map(|(r, _)| r.clone()).collect(),
        });
    }
    let lines: Vec<&str> = error_text
        .lines()
        .filter(|l| objects.iter().any(|o| l.contains(&o.to_string())))
        .collect();
    (!lines.is_empty()).then(|| ChartOutcome {
        phase: Phase::Failed,
        reason: "ApplyFailed".into(),
        message: lines.join("; "),
        not_ready: Vec::new(),
    })
}

/// The charts of `set` protected with `continue_processing`: the pass went on after them.
fn protected(set: &DesiredSet) -> BTreeSet<Owner> {
    armada::chart_specs(set)
        .into_iter()
        .filter(|(_, spec)| {
            spec.protected
                .as_ref()
                .is_some_and(|p| p.continue_processing)
        })
        .map(|(owner, _)| owner)
        .collect()
}

/// The outcome of every chart of `set` in a pass that produced `changes` and `error`. Pure.
pub fn chart_outcomes(
    set: &DesiredSet,
    changes: &ChangeSet,
    error: Option<&PassError>,
) -> BTreeMap<Owner, ChartOutcome> {
    let mut not_ready = BTreeMap::new();
    let mut named = BTreeMap::new();
    if let Some(e) = error {
        not_ready_objects(e, &mut not_ready);
        charts_named(e, &mut named);
    }
    let error_text = error
        .map(|e| redact_url_passwords(&e.to_string()))
        .unwrap_or_default();
    let charts: Vec<&Owner> = set
        .owners()
        .iter()
        .filter(|o| o.as_chart().is_some())
        .collect();
    let objects_of = |owner: &Owner| -> Vec<ObjectRef> {
        set.objects()
            .iter()
            .filter(|o| &o.owner == owner)
            .map(|o| o.object_ref())
            .collect()
    };
    let mut out = BTreeMap::new();
    if error.is_some() {
        for owner in &charts {
            let objects = objects_of(owner);
            if let Some(f) = failure(set, owner, &objects, &named, &not_ready, &error_text) {
                out.insert((*owner).clone(), f);
            }
        }
    }
    // Where the pass stopped: the first wave of a failed chart it did not go on after.
    let protected = protected(set);
    let stop = out
        .keys()
        .filter(|o| !protected.contains(*o))
        .filter_map(|o| wave_of(set, o))
        .min();
    for owner in charts {
        if out.contains_key(owner) {
            continue;
        }
        let objects = objects_of(owner).len();
        let touched = changes.entries.iter().any(|c| &c.owner == owner);
        let reached = match (error, stop, wave_of(set, owner)) {
            (None, ..) => true,
            // Before the stop, or beside the failed chart in its wave (waited for with it).
            (Some(_), Some(stop), Some(wave)) => wave < stop || (wave == stop && touched),
            // Stopped elsewhere (a plain object, the pass itself): its wave was applied or not.
            _ => touched,
        };
        let outcome = if reached {
            deployed(objects)
        } else {
            // Named below, once every chart's outcome is known.
            ChartOutcome {
                phase: Phase::Pending,
                reason: BLOCKED.into(),
                message: String::new(),
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
    let protected = protected(set);
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
            o.owner.as_chart().is_some()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::changeset::{Action, Change};
    use crate::daemon::armada::status::group_phase;
    use crate::render::Owner;
    use serde_json::json;

    fn chart(name: &str) -> Owner {
        Owner::resource(crate::api::owner::OwnerKind::ArmadaChart, "default", name)
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
        let unheld = || {
            let status = kube::core::Status::failure("roots are forbidden", "Forbidden");
            PassError::Unheld(kube::Error::Api(Box::new(status.with_code(403))))
        };
        let first = unheld().to_string();
        assert!(!first.contains('\n'), "{first}");
        let error = PassError::Many(vec![unheld(), unheld()]);
        let out = chart_outcomes(&set(), &db_only, Some(&error));
        assert_eq!(
            out[&chart("api")].message,
            format!("not deployed: blocked by the pass, which stopped before it: {first}")
        );
        // Never the old words that named nothing.
        assert!(out
            .values()
            .all(|o| !o.message.contains("a chart or group before it")));
    }

    /// Issue 49 item 1: a chart whose pods a quota forbids is named by the pass (no object of it
    /// is "not ready": there is none), and the chart after it, whose namespace the pass applied
    /// before it stopped, was not deployed.
    #[test]
    fn a_chart_named_by_the_pass_fails_and_the_next_wave_is_blocked_whatever_was_touched() {
        let namespace = chart("api").adopt(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "api-ns"}}),
            1,
            None,
        );
        let mut objects = set().objects().to_vec();
        objects.push(namespace.clone());
        let set = DesiredSet::for_owners(objects, [chart("db"), chart("api"), chart("web")].into());
        let changes = ChangeSet {
            entries: vec![
                applied(&chart("db"), "StatefulSet", "db"),
                Change {
                    object: namespace.object_ref(),
                    owner: chart("api"),
                    action: Action::Created,
                    reason: None,
                },
            ],
            ..Default::default()
        };
        let error = PassError::Chart {
            chart: "default/db".into(),
            summary: "did not become ready within 5s (its wait.timeout); the charts after it were not deployed\n  no Pod with labels {app=db}: are `wait.labels` correct?".into(),
        };
        let out = chart_outcomes(&set, &changes, Some(&error));
        let db = &out[&chart("db")];
        assert_eq!(
            (db.phase, db.reason.as_str()),
            (Phase::Failed, "WaitFailed")
        );
        assert_eq!(
            db.message,
            "did not become ready within 5s (its wait.timeout); the charts after it were not deployed; no Pod with labels {app=db}: are `wait.labels` correct?"
        );
        for c in ["api", "web"] {
            let o = &out[&chart(c)];
            assert_eq!(
                (o.phase, o.reason.as_str()),
                (Phase::Pending, "Blocked"),
                "{c}"
            );
            assert_eq!(
                o.message,
                "not deployed: blocked by chart default/db, which did not become ready"
            );
        }
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
