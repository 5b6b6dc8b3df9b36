//! Server-side apply with field manager `weft`.
//!
//! Conflicts are forced (`force=true`): the repository is the source of truth, so a field someone
//! changed with `kubectl edit` or another manager is taken back. An owner whose drift is only
//! reported ([`ReportDrift`]) is the exception: its drifted objects (and those deleted outside)
//! are skipped with a reason instead of written. Unknown fields are errors (`fieldValidation=Strict`): a field the server silently
//! dropped would never be in Weft's field set, look drifted on every pass, and be re-applied forever.
//! The API server's own kinds refuse an unknown field in any apply, so theirs skip the strict
//! directive's second parse ([`apply_params_for`]).
//!
//! An object whose decision is [`Decision::Unchanged`] is not written at all.

use crate::api::keys::CREATE_ANNOTATION;
use futures::{FutureExt, StreamExt};
use kube::api::{DynamicObject, Patch, PatchParams, Resource, ValidationDirective};
use kube::Client;
use serde_json::Value;
use tracing::{debug, info_span, Instrument};

use std::collections::{BTreeMap, HashMap};

use super::apply_policy::ReportDrift;
use super::changeset::{Action, Change, ChangeSet};
use super::conflict::{self, Conflict};
use super::plan::{Decision, LiveState, UpdateReason};
use super::planned::PlannedObject;
use super::ref_key::ref_key;
use super::{ApplyError, FIELD_MANAGER};
use crate::render::ownership::CREATE_IF_MISSING;
use crate::render::Owner;

/// How to apply.
#[derive(Clone, Debug)]
pub struct ApplyOptions {
    /// Objects applied at the same time within a stage (`--concurrency`).
    pub concurrency: usize,
    /// Compute the changes without writing (`--dry-run`).
    pub dry_run: bool,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            concurrency: crate::apply::DEFAULT_CONCURRENCY,
            dry_run: false,
        }
    }
}

/// The patch parameters of every apply: manager `weft`, forced, strict validation.
pub fn apply_params() -> PatchParams {
    let mut pp = PatchParams::apply(FIELD_MANAGER).force();
    pp.field_validation = Some(ValidationDirective::Strict);
    pp
}

/// The patch parameters of the apply of an object of API group `group`: [`apply_params`], except
/// that an object of a group without a dot (the core group, `apps`, `batch`, `autoscaling`,
/// `policy`) is sent with `fieldValidation=Ignore`. Such a group is never a custom resource's (a
/// CustomResourceDefinition's group must contain a dot), and for the API server's own kinds the
/// typed apply refuses an unknown field whatever the directive (`.foo: field not declared in
/// schema`); what `Strict` adds there is a second, strict parse of the body as YAML, for
/// duplicate keys, which Weft's JSON bodies cannot have. That parse was a seventh of the API
/// server's CPU per applied ConfigMap (docs/benchmarks.md). Any other group keeps `Strict`: it may
/// be a custom resource whose schema preserves unknown fields, or an aggregated API server that
/// reads the directive itself.
pub fn apply_params_for(group: &str) -> PatchParams {
    let mut pp = apply_params();
    if !group.contains('.') {
        pp.field_validation = Some(ValidationDirective::Ignore);
    }
    pp
}

/// Apply one object (the caller decided it must be written). A change to an immutable field is
/// [`ApplyError::Immutable`] (see [`super::recreate`]).
///
/// The server's answer (the object as stored, `managedFields` included) is not parsed: no caller
/// reads it, and parsing it into a `DynamicObject` and converting that to a `Value` was ≈ 12 % of
/// Weft's own CPU in a first pass of 20,000 ConfigMaps (docs/benchmarks.md).
pub async fn apply_one(client: &Client, p: &PlannedObject) -> Result<(), ApplyError> {
    let namespace = p.namespaced.then_some(p.object_ref.namespace.as_str());
    let url = DynamicObject::url_path(&p.resource, namespace);
    let patch = Patch::Apply(p.desired.object.raw());
    let fail = |e| super::error::apply_error("apply", &p.object_ref, e);
    let mut req = kube::core::Request::new(url)
        .patch(
            &p.object_ref.name,
            &apply_params_for(&p.resource.group),
            &patch,
        )
        .map_err(|e| fail(kube::Error::BuildRequest(e)))?;
    req.extensions_mut().insert("patch");
    client.request_text(req).await.map_err(fail)?;
    Ok(())
}

/// Why a Namespace that Weft creates only when missing ([`CREATE_IF_MISSING`]) is left as it is:
/// it exists and no owner of this pass labelled it, so Weft did not create it (an existing
/// namespace is never adopted, so never pruned).
fn not_created_by_weft(p: &PlannedObject, decision: &Decision) -> Option<String> {
    let unlabelled = matches!(
        decision,
        Decision::Update(UpdateReason::Adopted | UpdateReason::TakenOver { from: None })
    );
    // Only such objects are parsed again (a pass of 100,000 objects reads none of them).
    if !unlabelled || p.object_ref.kind != "Namespace" {
        return None;
    }
    let if_missing = p
        .desired
        .object
        .value()
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(CREATE_ANNOTATION))
        .and_then(Value::as_str)
        == Some(CREATE_IF_MISSING);
    if_missing.then(|| {
        format!("exists and Weft did not create it: left as it is ({CREATE_ANNOTATION}: {CREATE_IF_MISSING})")
    })
}

/// Objects whose apply futures exist at once in [`apply_batch`].
const APPLY_CHUNK: usize = 1000;

/// Apply a set of objects that may go to the cluster at the same time (one stage of one wave),
/// at most `opts.concurrency` at once. Every object gets an entry in the change set, failed ones
/// are returned as errors (the others are still applied: one bad object does not hide the rest).
/// The objects of an owner in `report_drift` that drifted (or were deleted outside) are skipped,
/// with the reason. `on_change` is called as each object is done (progress output).
pub async fn apply_batch(
    client: &Client,
    objects: &[PlannedObject],
    live: &LiveState<'_>,
    opts: &ApplyOptions,
    report_drift: &BTreeMap<Owner, ReportDrift>,
    on_change: &(dyn Fn(&Change) + Send + Sync),
) -> (ChangeSet, Vec<ApplyError>) {
    let mut changes = ChangeSet::default();
    // One entry per object: no room doubled past it (100,000 changes are ≈ 20 MB).
    changes.entries.reserve_exact(objects.len());
    let mut errors = Vec::new();
    // A chunk of futures at a time: each boxed future is a few KiB, and 100,000 of them made
    // up front would weigh more than the objects themselves.
    for chunk in objects.chunks(APPLY_CHUNK) {
        let results: Vec<Result<(Change, Option<ApplyError>), ApplyError>> = futures::stream::iter(
            chunk
        .iter()
        .map(|p| {
            let span = info_span!("apply", owner = %p.desired.owner.reference(), kind = %p.object_ref.kind, name = %p.object_ref.name);
            async move {
                // An object the identity may not read is not written either: the API server's
                // refusal is its error.
                if let Some(refused) = live.refused(p) {
                    return Err(refused);
                }
                let decision = live.decide(p);
                // An existing object Weft creates only when missing is not Weft's to write: it
                // stays as it is, which is no change at all.
                let kept = not_created_by_weft(p, &decision);
                let kept_as_it_is = kept.is_some();
                let skip = kept.or_else(|| {
                    report_drift
                        .get(&p.desired.owner)
                        .and_then(|r| r.skip_reason(&decision, &ref_key(&p.object_ref)))
                });
                let (action, reason) = match (&decision, skip) {
                    (_, Some(why)) if kept_as_it_is => (Action::Unchanged, Some(why)),
                    (_, Some(why)) => (Action::Skipped, Some(why)),
                    (Decision::Create, None) => (Action::Created, None),
                    (Decision::Update(why), None) => (Action::Configured, Some(why.to_string())),
                    (Decision::Unchanged, None) => (Action::Unchanged, None),
                };
                // Another root's object is not written; this root's claimed one is (and both
                // say so).
                let conflict = live.conflict(p);
                let (action, reason) = match conflict {
                    // Several repositories routinely declare one Namespace: it is left to the
                    // root that holds it, which is no change and no conflict.
                    Some(Conflict::HeldBy(holder)) if conflict::shared_kind(p) => (
                        Action::Unchanged,
                        Some(format!("held by {holder}, which declares it too: left as it is")),
                    ),
                    Some(c @ Conflict::HeldBy(holder)) => {
                        let e = conflict::settle(client, p, c, opts.dry_run).await;
                        on_change(&Change {
                            object: p.object_ref.clone(),
                            owner: p.desired.owner.clone(),
                            action: Action::Skipped,
                            reason: Some(format!("conflict: owned by {holder}")),
                        });
                        return Err(e);
                    }
                    _ => (action, reason),
                };
                let write = matches!(action, Action::Created | Action::Configured);
                if write && !opts.dry_run {
                    apply_one(client, p).await?;
                }
                // This root's object, applied as any other; the other root's claim is reported
                // on this root too, and stops nothing here (issue 41 item 6).
                let reported = match conflict.filter(|_| !conflict::shared_kind(p)) {
                    Some(c @ Conflict::ClaimedBy(_)) => {
                        Some(conflict::settle(client, p, c, opts.dry_run).await)
                    }
                    _ => None,
                };
                debug!(?action, "applied");
                let change = Change {
                    object: p.object_ref.clone(),
                    owner: p.desired.owner.clone(),
                    action,
                    reason,
                };
                on_change(&change);
                Ok((change, reported))
            }
            .instrument(span)
            // Boxed as `Send` and collected before the stream: with a closure inside the stream
            // type, rustc cannot prove a pass's future `Send` (higher-ranked lifetimes), and the
            // daemon spawns passes. The futures are lazy, so the concurrency bound still holds.
            .boxed()
        })
        .collect::<Vec<_>>(),
        )
        .buffer_unordered(opts.concurrency.max(1))
        .collect()
        .await;
        for r in results {
            match r {
                Ok((c, None)) => changes.push(c),
                Ok((c, Some(reported))) => {
                    changes.push(c);
                    match reported {
                        ApplyError::Conflict { object, message } => {
                            changes.conflicts.push((*object, message))
                        }
                        // The claim could not be taken away: an API error about that object.
                        other => errors.push(other),
                    }
                }
                Err(e) => errors.push(e),
            }
        }
    }
    // Completion order is random; report in apply order. Each change's position is looked up
    // once (a linear search per comparison made a batch of 12,000 objects take minutes to sort;
    // a tree lookup per comparison was 2 % of a no-op pass over 100,000 objects).
    let mut order: HashMap<&crate::api::ObjectRef, usize> = HashMap::with_capacity(objects.len());
    for (i, p) in objects.iter().enumerate() {
        order.entry(&p.object_ref).or_insert(i);
    }
    changes
        .entries
        .sort_by_cached_key(|c| order.get(&c.object).copied().unwrap_or(usize::MAX));
    (changes, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_force_conflicts_with_manager_weft_and_strict_validation() {
        let pp = apply_params();
        assert!(pp.force);
        assert_eq!(pp.field_manager.as_deref(), Some("weft"));
        assert!(matches!(
            pp.field_validation,
            Some(ValidationDirective::Strict)
        ));
        assert!(!pp.dry_run);
    }

    #[test]
    fn only_groups_without_a_dot_skip_strict_validation() {
        for group in ["", "apps", "batch", "policy"] {
            let pp = apply_params_for(group);
            assert!(
                matches!(pp.field_validation, Some(ValidationDirective::Ignore)),
                "{group}"
            );
            assert!(pp.force);
            assert_eq!(pp.field_manager.as_deref(), Some("weft"));
        }
        for group in [
            "weft.io",
            "armada.airshipit.org",
            "rbac.authorization.k8s.io",
        ] {
            let pp = apply_params_for(group);
            assert!(
                matches!(pp.field_validation, Some(ValidationDirective::Strict)),
                "{group}"
            );
        }
    }
}
