//! What a root's pass says on the WeaveClouds it applied (issue 42 item 3). A Root object's
//! WeaveCloud is not the WeaveCloud controller's (it acts as Weft; see
//! `daemon::weavecloud::trust`): the root's own pass renders and applies its agents, as the
//! root's identity, so a tenant's WeaveCloud gets the tenant's rights, and the ClusterRoles of
//! its agents are refused by the API server. That refusal is written here on the WeaveCloud
//! itself (`Ready=False`, [`AGENTS_FAILED`], one line, and one event), beside the root's status,
//! so that whoever looks at the WeaveCloud sees why its agents do not run.

use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use super::identity::Identity;
use crate::api::conditions::{set_condition, Condition, ConditionStatus, READY};
use crate::api::owner::OwnerKind;
use crate::api::weavecloud::WeaveCloud;
use crate::api::ResourceKey;
use crate::apply::ApplyError;
use crate::daemon::state::DaemonState;
use crate::daemon::status::now_rfc3339;
use crate::pass::PassError;
use crate::render::{DesiredSet, Owner};

/// `Ready=False` reason of a Root object's WeaveCloud whose agents the API server refused (or
/// that failed otherwise).
pub const AGENTS_FAILED: &str = "AgentsFailed";
/// `Ready=True` reason of a Root object's WeaveCloud whose agents its root's pass applied.
pub const AGENTS_APPLIED: &str = "AgentsApplied";

/// The `Ready` condition of each WeaveCloud `set` holds (applied by `root` as `identity`), from
/// the pass's `error`; `None` for one the pass did not finish with (it failed elsewhere before
/// its agents were applied): its condition stays as it was.
pub fn verdicts(
    set: &DesiredSet,
    error: Option<&PassError>,
    root: &ResourceKey,
    identity: &Identity,
    revision: &str,
) -> Vec<(ResourceKey, Option<Condition>)> {
    let mut failures = Vec::new();
    if let Some(e) = error {
        leaves(e, &mut failures);
    }
    set.objects()
        .iter()
        .filter(|o| o.owner.is_root() && o.kind() == OwnerKind::WeaveCloud.as_str())
        .map(|wc| {
            let key = ResourceKey {
                namespace: wc.namespace().unwrap_or_default().to_string(),
                name: wc.name().to_string(),
            };
            let owner = Owner::resource(
                OwnerKind::WeaveCloud,
                key.namespace.clone(),
                key.name.clone(),
            );
            let agents: Vec<String> = set
                .objects()
                .iter()
                .filter(|o| o.owner == owner)
                .map(|o| o.object_ref().to_string())
                .collect();
            let failed: Vec<&String> = failures
                .iter()
                .filter(|(object, _)| agents.contains(object))
                .map(|(_, text)| text)
                .collect();
            let condition = match (failed.first(), error) {
                (Some(first), _) => {
                    let more = match failed.len() {
                        1 => String::new(),
                        n => format!(" (and {} more; see root {root})", n - 1),
                    };
                    Some(Condition::new(
                        READY,
                        ConditionStatus::False,
                        AGENTS_FAILED,
                        format!(
                            "root {root} applies its agents as {identity}, and failed: {}{more}",
                            one_line(first)
                        ),
                    ))
                }
                (None, None) => Some(Condition::new(
                    READY,
                    ConditionStatus::True,
                    AGENTS_APPLIED,
                    format!("root {root} applied its agents as {identity} at revision {revision}"),
                )),
                (None, Some(_)) => None,
            };
            (key, condition)
        })
        .collect()
}

/// Each failed object of `error` (`Kind/namespace/name`) with what went wrong.
fn leaves(error: &PassError, out: &mut Vec<(String, String)>) {
    match error {
        PassError::Apply(e) => apply_leaves(e, out),
        PassError::Many(all) => all.iter().for_each(|e| leaves(e, out)),
        _ => {}
    }
}

fn apply_leaves(error: &ApplyError, out: &mut Vec<(String, String)>) {
    match error {
        ApplyError::Api { target, .. } => out.push((target.to_string(), error.to_string())),
        ApplyError::Invalid { object, .. }
        | ApplyError::UnknownKind { object, .. }
        | ApplyError::Conflict { object, .. }
        | ApplyError::Immutable { object, .. } => out.push((object.to_string(), error.to_string())),
        ApplyError::Failed(objects)
        | ApplyError::WaitTimeout {
            not_ready: objects, ..
        } => out.extend(
            objects
                .iter()
                .map(|(o, why)| (o.to_string(), format!("{o}: {why}"))),
        ),
        ApplyError::Many(all) => all.iter().for_each(|e| apply_leaves(e, out)),
        _ => {}
    }
}

/// A message on one line (a status condition and an event are read by a person).
fn one_line(text: &str) -> String {
    text.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Write each verdict whose condition changed on its WeaveCloud, as Weft (the status is Weft's
/// bookkeeping, not the tenant's work), with an event when its reason or message changed. A
/// WeaveCloud that does not exist (its apply was refused) is skipped.
pub async fn report(state: &DaemonState, verdicts: Vec<(ResourceKey, Option<Condition>)>) {
    for (key, condition) in verdicts {
        let Some(condition) = condition else { continue };
        let api: Api<WeaveCloud> = Api::namespaced(state.client().clone(), &key.namespace);
        let wc = match api.get_opt(&key.name).await {
            Ok(Some(wc)) => wc,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(weavecloud = %key, error = %crate::api::kube_error::Text(&e), "cannot read the WeaveCloud to write its agents' outcome");
                continue;
            }
        };
        let mut conditions = wc
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let unchanged = conditions.iter().any(|c| {
            c.type_ == READY
                && c.status == condition.status
                && c.reason == condition.reason
                && c.message == condition.message
                && c.observed_generation == wc.metadata.generation
        });
        if unchanged {
            continue;
        }
        let mut c = condition.clone();
        c.observed_generation = wc.metadata.generation;
        set_condition(&mut conditions, c, &now_rfc3339());
        let patch = json!({"status": {"conditions": conditions, "observedGeneration": wc.metadata.generation}});
        if let Err(e) = api
            .patch_status(
                &wc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::warn!(weavecloud = %key, error = %crate::api::kube_error::Text(&e), "cannot write the WeaveCloud's agents' outcome");
            continue;
        }
        let note = crate::daemon::events::Note {
            warning: condition.status != ConditionStatus::True,
            reason: &condition.reason,
            action: "Reconcile",
            text: &condition.message,
            related: None,
        };
        state.events().publish(&wc, note).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ObjectRef;
    use serde_json::json;

    fn set() -> DesiredSet {
        let root = Owner::root("team-a", "agents");
        let agents = Owner::resource(OwnerKind::WeaveCloud, "team-a", "wc");
        let wc = json!({"apiVersion": "cloud.weave.works/v1beta1", "kind": "WeaveCloud",
            "metadata": {"name": "wc", "namespace": "team-a"}});
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "weave-flux"}});
        DesiredSet::for_owners(
            vec![root.adopt(wc, 0, None), agents.adopt(role, 0, None)],
            [root, agents].into(),
        )
    }

    fn key() -> ResourceKey {
        ResourceKey {
            namespace: "team-a".into(),
            name: "agents".into(),
        }
    }

    fn tenant() -> Identity {
        Identity::ServiceAccount {
            namespace: "team-a".into(),
            name: "team-a".into(),
        }
    }

    #[test]
    fn a_refused_agent_is_said_on_its_weavecloud_in_one_line() {
        let refused = ApplyError::Failed(vec![(
            ObjectRef {
                api_version: "rbac.authorization.k8s.io/v1".into(),
                kind: "ClusterRole".into(),
                namespace: String::new(),
                name: "weave-flux".into(),
            },
            "forbidden:\ngrant it".into(),
        )]);
        let error = PassError::Many(vec![PassError::Apply(ApplyError::Many(vec![refused]))]);
        let verdicts = verdicts(&set(), Some(&error), &key(), &tenant(), "abc");
        assert_eq!(verdicts.len(), 1);
        let (wc, condition) = &verdicts[0];
        assert_eq!(wc.to_string(), "team-a/wc");
        let c = condition.as_ref().expect("a verdict");
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::False, AGENTS_FAILED)
        );
        assert_eq!(
            c.message,
            "root team-a/agents applies its agents as system:serviceaccount:team-a:team-a, and failed: ClusterRole/weave-flux: forbidden:; grant it"
        );
    }

    #[test]
    fn applied_agents_say_so_and_a_failure_elsewhere_says_nothing() {
        let verdicts_ok = verdicts(&set(), None, &key(), &tenant(), "abc");
        let c = verdicts_ok[0].1.as_ref().expect("a verdict");
        assert_eq!(c.reason, AGENTS_APPLIED);
        assert!(c.message.contains("at revision abc"), "{}", c.message);
        let elsewhere = PassError::Chart {
            chart: "held".into(),
            summary: String::new(),
        };
        let verdicts_elsewhere = verdicts(&set(), Some(&elsewhere), &key(), &tenant(), "abc");
        assert!(verdicts_elsewhere[0].1.is_none());
    }
}
