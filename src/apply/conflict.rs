//! Two roots never fight over an object.
//!
//! An object that another Weft installation's root holds (its `weft.io/owner-ref` names a sync
//! root of another namespace or root name, whose inventory still lists it) is not adopted: the pass skips it, reports a conflict,
//! and leaves a claim on it (`weft.io/claimed-by: <this root>`, a metadata annotation written
//! with its own field manager, so it never counts as Weft's apply). The holder's next pass finds
//! the claim, reports the conflict on its side too, and removes the claim (the claimer writes it
//! again while it still declares the object). Nothing changes owner, so nothing flips.
//!
//! Moving an object to another root is explicit, per object: its document in the new root's
//! repository carries `weft.io/take-over-from: <the holder's reference>` (`root/<namespace>/<name>`).
//!
//! The shards of one root (`<root>-shard-<n>`) are one installation: no conflict between them.
//! A Namespace that two roots declare is no conflict: it is left to the root that holds it
//! (several repositories routinely declare the namespaces they deploy into).

use crate::api::keys::{CLAIM_ANNOTATION, TAKE_OVER_ANNOTATION};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::Value;

use std::collections::{HashMap, HashSet};

use super::inventory::read_root;
use super::planned::PlannedObject;
use super::ref_key::{ref_key, RefKey};
use super::{is_not_found, ApplyError};
use crate::api::ObjectRef;
use crate::render::Owner;

/// The field manager of the claim (never `weft`: a claim is no apply).
const CLAIM_MANAGER: &str = "weft-claim";

/// A conflict between two roots over one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// Another root holds the object: this pass does not write it.
    HeldBy(String),
    /// This root holds the object, another root declares it too.
    ClaimedBy(String),
}

/// The installation a root's reference belongs to: `root/<ns>/<name>` without a shard suffix.
fn installation(reference: &str) -> Option<(&str, &str)> {
    let rest = reference.strip_prefix("root/")?;
    let (ns, name) = rest.split_once('/')?;
    let base = match name.rsplit_once("-shard-") {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    };
    Some((ns, base))
}

/// `other` (an owner reference read from a live object) when it is a sync root of another
/// installation than `owner`'s; `None` when it is the same one, or when `owner` is not a sync
/// root (a custom resource's root is not known here).
pub fn other_root(owner: &Owner, other: &str) -> Option<String> {
    let mine = owner.reference();
    let mine = installation(&mine)?;
    let theirs = installation(other)?;
    (mine != theirs).then(|| other.chars().take(253).collect())
}

/// The holders (`root/<ns>/<name>`) whose inventory was read in one live read, with the keys
/// of what they list (`None`: the root has no inventory, it is gone).
pub type Holders = HashMap<String, Option<HashSet<RefKey>>>;

/// Does the root `holder` still hold `object` — its inventory (in its own Weft namespace) lists
/// it? A root that is gone (its inventory deleted, as `weft uninstall` or a deleted namespace
/// leaves it) holds nothing: its former objects may be adopted.
pub async fn still_held(
    client: &Client,
    holder: &str,
    object: &ObjectRef,
    holders: &mut Holders,
) -> Result<bool, ApplyError> {
    if !holders.contains_key(holder) {
        let listed = match holder
            .strip_prefix("root/")
            .and_then(|rest| rest.split_once('/'))
        {
            Some((ns, name)) => read_root(client, &Owner::root(ns, name), ns)
                .await?
                .map(|(entries, _)| entries.iter().map(ref_key).collect()),
            None => None,
        };
        holders.insert(holder.to_string(), listed);
    }
    Ok(holders
        .get(holder)
        .and_then(Option::as_ref)
        .is_some_and(|keys| keys.contains(&ref_key(object))))
}

/// A kind several roots may declare without a conflict: a Namespace (left to its holder).
pub fn shared_kind(p: &PlannedObject) -> bool {
    p.object_ref.kind == "Namespace" && p.object_ref.api_version == "v1"
}

/// Does the desired object say it may be taken over from `holder`?
pub fn take_over_allowed(p: &PlannedObject, holder: &str) -> bool {
    p.desired
        .object
        .value()
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(TAKE_OVER_ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|v| v.trim() == holder)
}

/// Report `conflict` over `p`, and leave (or take away) the claim on the live object; the error
/// is the report. Nothing is written in a dry run.
pub async fn settle(
    client: &Client,
    p: &PlannedObject,
    conflict: &Conflict,
    dry_run: bool,
) -> ApplyError {
    let me = p.desired.owner.reference();
    let (claim, message) = match conflict {
        Conflict::HeldBy(holder) => (
            Some(me.clone()),
            format!(
                "owned by another Weft root, {holder}; not adopted by {me}. Declare it in one repository only; to move it to {me}, annotate its document with `{TAKE_OVER_ANNOTATION}: {holder}`"
            ),
        ),
        Conflict::ClaimedBy(claimer) => (
            None,
            format!(
                "another Weft root, {claimer}, declares it too; it stays {me}'s. Declare it in one repository only"
            ),
        ),
    };
    if !dry_run {
        let api: Api<DynamicObject> = p.api(client);
        let patch = serde_json::json!({"metadata": {"annotations": {CLAIM_ANNOTATION: claim}}});
        let pp = PatchParams {
            field_manager: Some(CLAIM_MANAGER.to_string()),
            ..PatchParams::default()
        };
        match api
            .patch(&p.object_ref.name, &pp, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return ApplyError::api("mark the conflict on", &p.object_ref, e),
        }
    }
    ApplyError::Conflict {
        object: Box::new(p.object_ref.clone()),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::owner::OwnerKind;

    #[test]
    fn only_a_root_of_another_installation_conflicts() {
        let root = Owner::root("weft-system", "team-a");
        assert_eq!(
            other_root(&root, "root/weft-system/team-b").as_deref(),
            Some("root/weft-system/team-b")
        );
        assert_eq!(
            other_root(&root, "root/other-ns/team-a").as_deref(),
            Some("root/other-ns/team-a")
        );
        // Its own shards, and itself, are one installation.
        assert_eq!(other_root(&root, "root/weft-system/team-a-shard-2"), None);
        assert_eq!(other_root(&root, "root/weft-system/team-a"), None);
        // A custom resource of the same or another root: not known here.
        assert_eq!(other_root(&root, "ArmadaChart/a/c"), None);
        let chart = Owner::resource(OwnerKind::ArmadaChart, "a", "c");
        assert_eq!(other_root(&chart, "root/weft-system/team-b"), None);
    }
}
