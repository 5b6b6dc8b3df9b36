//! Deletes before an update ([`PreUpdateDelete`]): when an owner's objects are about to be
//! updated (one of them exists, is this owner's, and was applied from another render), the
//! objects its rule selects (kind and labels, in a namespace) that carry this owner's label set by
//! Weft's own apply (managedFields, as for a prune) are deleted with their UID as precondition,
//! and the verb waits until they are gone. A first install deletes nothing.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::Client;

use super::apply_policy::{DeleteTarget, PreUpdateDelete};
use super::catalog::Catalog;
use super::changeset::{Action, Change};
use super::plan::{Decision, LiveState, UpdateReason};
use super::planned::PlannedObject;
use super::proof::proof_of_ownership;
use super::{is_not_found, ApplyError};
use crate::api::keys::OWNER_LABEL;
use crate::api::ObjectRef;
use crate::render::Owner;

/// How to delete.
#[derive(Clone, Debug)]
pub struct DeleteOptions {
    /// Report what would be deleted, delete nothing.
    pub dry_run: bool,
    /// Time between two looks at an object that is going away.
    pub poll_interval: Duration,
}

/// Is `owner` being updated: does one of its `objects` exist as this owner's, applied from
/// another render? (`live` is read for these objects.)
pub fn is_update(live: &LiveState<'_>, owner: &Owner, objects: &[PlannedObject]) -> bool {
    objects
        .iter()
        .filter(|p| &p.desired.owner == owner)
        .any(|p| live.decide(p) == Decision::Update(UpdateReason::Changed))
}

/// The label selector of a target, restricted to `owner`'s objects.
fn selector(target: &DeleteTarget, owner: &Owner) -> String {
    let mut parts: Vec<String> = target
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    parts.push(format!("{OWNER_LABEL}={}", owner.id()));
    parts.join(",")
}

/// Delete what `rule` selects for `owner` and wait until it is gone. Every deleted object gets
/// a change (action `Deleted`, the rule's reason). A target whose kind the cluster does not
/// serve is skipped (nothing of it can exist).
pub async fn delete_before_update(
    client: &Client,
    catalog: &Catalog,
    owner: &Owner,
    rule: &PreUpdateDelete,
    opts: &DeleteOptions,
    on_change: &(dyn Fn(&Change) + Send + Sync),
) -> Result<Vec<Change>, ApplyError> {
    let mut changes = Vec::new();
    for target in &rule.targets {
        let Some((ar, _)) = catalog.resolve(&target.api_version, &target.kind).cloned() else {
            continue;
        };
        let selector = selector(target, owner);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &rule.namespace, &*ar);
        let listed = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|source| {
                let what = format!("{} in {} ({selector})", target.kind, rule.namespace);
                ApplyError::list(what, source)
            })?;
        for item in listed.items {
            let Some(name) = item.metadata.name.clone() else {
                continue;
            };
            let object = ObjectRef {
                api_version: target.api_version.clone(),
                kind: target.kind.clone(),
                namespace: rule.namespace.clone(),
                name,
            };
            // The label selected it; only Weft's own apply of that label makes it this owner's
            // (a label copied onto a foreign object does not), as for a prune.
            let live = serde_json::to_value(&item).unwrap_or_default();
            let (action, reason) = match proof_of_ownership(&live, owner) {
                Err(why) => (
                    Action::Skipped,
                    format!("not deleted by {}: {why}", rule.reason),
                ),
                Ok(()) => {
                    if !opts.dry_run {
                        let uid = item.metadata.uid.clone();
                        let why = format!("deleted by {} but still there", rule.reason);
                        let gone = Gone {
                            timeout: rule.timeout,
                            poll_interval: opts.poll_interval,
                            why: &why,
                        };
                        delete_and_wait(&api, &object, uid, &gone).await?;
                    }
                    (Action::Deleted, rule.reason.clone())
                }
            };
            let c = Change {
                object,
                owner: owner.clone(),
                action,
                reason: Some(reason),
            };
            on_change(&c);
            changes.push(c);
        }
    }
    Ok(changes)
}

/// How long a deleted object may take to be gone, and what to say if it is not.
pub(crate) struct Gone<'a> {
    pub timeout: Duration,
    pub poll_interval: Duration,
    /// The wait error's reason (`deleted by upgrade.pre.delete but still there`).
    pub why: &'a str,
}

/// Delete the object read with `uid` (a precondition: one re-created since is left alone) and
/// wait until that one is gone.
pub(crate) async fn delete_and_wait(
    api: &Api<DynamicObject>,
    object: &ObjectRef,
    uid: Option<String>,
    gone: &Gone<'_>,
) -> Result<(), ApplyError> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(&object.name, &params).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        // 409: the UID changed, so the object we read is gone already.
        Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
        Err(e) => return Err(ApplyError::api("delete", object, e)),
    }
    let deadline = Instant::now() + gone.timeout;
    loop {
        match api.get_opt(&object.name).await {
            Ok(None) => return Ok(()),
            Ok(Some(now)) if now.metadata.uid != uid => return Ok(()),
            Ok(Some(_)) if Instant::now() < deadline => {
                tokio::time::sleep(gone.poll_interval).await
            }
            Ok(Some(_)) => {
                return Err(ApplyError::WaitTimeout {
                    timeout: gone.timeout,
                    not_ready: vec![(object.clone(), gone.why.to_string())],
                })
            }
            Err(e) => return Err(ApplyError::api("read", object, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::owner::OwnerKind;
    use std::collections::BTreeMap;

    #[test]
    fn the_selector_is_restricted_to_the_owner() {
        let owner = Owner::resource(OwnerKind::ArmadaChart, "demo", "api");
        let target = DeleteTarget {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            labels: BTreeMap::from([("app".to_string(), "migrate".to_string())]),
        };
        assert_eq!(
            selector(&target, &owner),
            format!("app=migrate,weft.io/owner={}", owner.id())
        );
    }
}
