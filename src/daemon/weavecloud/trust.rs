//! Which WeaveClouds this installation reconciles (docs/security.md, "Who is trusted with
//! what"). A WeaveCloud makes Weft install a flux agent with every right in the cluster, read a
//! Secret and fetch a channel: it is the operator's to write, not a tenant's. So Weft reconciles
//! a WeaveCloud only when
//! - `--watch-namespaces` is set: the WeaveCloud is in one of those namespaces (the operator
//!   trusts whoever may create WeaveCloud there);
//! - otherwise: its sync root applied it from the config repository — it is listed in the stored
//!   inventory of this installation's root, or of one of its shard roots
//!   ([`AppliedByRoots`]). That inventory is in Weft's namespace, which tenants cannot write.
//!   Labels and managedFields are not asked: anyone may copy the owner label, and
//!   `kubectl apply --server-side --field-manager=weft` writes the manager name `weft`
//!   (issue 48 item 2).
//!
//! A WeaveCloud a Root object applied (its owner label and reference name a root that is not
//! one of this installation's sync roots) is left to that root's passes, which apply its agents
//! as the root's identity (a tenant's ServiceAccount) and report on it (`daemon::roots::brought`).
//!
//! A WeaveCloud nobody's root applied and that is not in a watched namespace gets
//! `Ready=False` with reason [`NOT_RECONCILED`] saying why, written once (only while it has no
//! `Ready` condition, so that two installations in one cluster never fight over it); one
//! labelled as another installation's root's is left to that installation, silently.

use kube::{Client, ResourceExt};

use crate::api::keys::OWNER_LABEL;
use crate::api::weavecloud::WeaveCloud;
use crate::apply::ownership::{AppliedByRoots, RootListing};
use crate::apply::ApplyError;
use crate::daemon::namespaces::WatchNamespaces;
use crate::daemon::state::DaemonState;
use crate::render::shard::shard_root_name;
use crate::render::Owner;

/// Condition reason (`Ready=False`, and an event): the WeaveCloud is not reconciled.
pub const NOT_RECONCILED: &str = "NotReconciled";
/// The WeaveCloud's API group.
const GROUP: &str = "cloud.weave.works";
/// Its kind.
const KIND: &str = crate::api::owner::OwnerKind::WeaveCloud.as_str();

/// What to do with one WeaveCloud.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// The operator's: reconcile it.
    Reconciled,
    /// Not the operator's: no agents, no finalizer, no update check, no metric series. `tell`:
    /// say why in its status (it does not claim to be another installation's).
    Ignored { why: String, tell: bool },
}

/// The sync roots of this installation: the root `root_name` in `weft_namespace`, and with
/// `--shards` every shard's root.
pub fn roots(state: &DaemonState, weft_namespace: &str, root_name: &str) -> Vec<Owner> {
    let count = state.shard_claim().map_or(1, |c| c.shard.count.max(1));
    (0..count)
        .map(|i| Owner::root(weft_namespace, shard_root_name(root_name, i)))
        .collect()
}

/// The proof a WeaveCloud controller (or the updater) asks: the roots' inventories, read for
/// WeaveClouds only.
pub fn applied_by_roots() -> AppliedByRoots {
    AppliedByRoots::of_kinds(&[(GROUP, KIND)])
}

/// What the roots list now, read only when the answer depends on it (no `--watch-namespaces`).
pub async fn listing(
    proof: &AppliedByRoots,
    client: &Client,
    roots: &[Owner],
    weft_namespace: &str,
    namespaces: &WatchNamespaces,
) -> Result<RootListing, ApplyError> {
    if namespaces.listed().is_some() {
        return Ok(RootListing::default());
    }
    proof.listing(client, roots, weft_namespace).await
}

/// Whether `wc` is reconciled by the installation whose roots are `roots` (listing `listing`),
/// watching `namespaces`.
pub fn trust(
    wc: &WeaveCloud,
    roots: &[Owner],
    listing: &RootListing,
    namespaces: &WatchNamespaces,
) -> Trust {
    let namespace = wc.namespace().unwrap_or_default();
    let label = wc.labels().get(OWNER_LABEL);
    // Labelled as another installation's: that one says why, if anything.
    let tell = label.is_none_or(|l| roots.iter().any(|r| &r.id().0 == l));
    // A Root object's (issue 42 item 3): that root's passes apply its agents as the root's
    // identity (a tenant's ServiceAccount) and say on it what the API server refused; this
    // controller, acting as Weft, leaves it alone even in a watched namespace. Believing the
    // claim only takes work away from Weft's identity, so a forged one gains nothing.
    if let Some(owner) = Owner::claimed_by(wc.labels(), wc.annotations())
        .filter(|o| o.is_root() && !roots.contains(o))
    {
        return Trust::Ignored {
            why: format!(
                "applied by root {}/{}: that root's passes apply its agents, as the root's own identity",
                owner.namespace, owner.name
            ),
            tell: false,
        };
    }
    if namespaces.listed().is_some() {
        if namespaces.contains(&namespace) {
            return Trust::Reconciled;
        }
        return Trust::Ignored {
            why: format!(
                "not reconciled: namespace {namespace} is not one of the namespaces the operator lets Weft reconcile WeaveClouds in (--watch-namespaces); see docs/security.md"
            ),
            tell: label.is_none(),
        };
    }
    if listing
        .applied_by(GROUP, KIND, &namespace, &wc.name_any())
        .is_some()
    {
        return Trust::Reconciled;
    }
    Trust::Ignored {
        why: "not reconciled: Weft reconciles only the WeaveClouds its root applied from the config repository (listed in the root's inventory), or, with --watch-namespaces, those in the namespaces the operator lists; a WeaveCloud created in the cluster is not the operator's, whatever its labels or field managers say. See docs/security.md".to_string(),
        tell,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wc(namespace: &str, labels: serde_json::Value, managed: serde_json::Value) -> WeaveCloud {
        serde_json::from_value(json!({
            "apiVersion": "cloud.weave.works/v1beta1",
            "kind": "WeaveCloud",
            "metadata": {"name": "wc", "namespace": namespace, "labels": labels, "managedFields": managed},
            "spec": {"general": {"environment": "generic"}}
        }))
        .expect("a WeaveCloud")
    }

    fn listing(entries: &[(&Owner, &str, &str)]) -> RootListing {
        let mut per_root: std::collections::BTreeMap<Owner, std::collections::BTreeSet<_>> =
            Default::default();
        for (owner, ns, name) in entries {
            per_root.entry((*owner).clone()).or_default().insert((
                GROUP.to_string(),
                KIND.to_string(),
                ns.to_string(),
                name.to_string(),
            ));
        }
        RootListing::of(per_root.into_iter().collect())
    }

    fn applied_by_weft() -> serde_json::Value {
        json!([{"manager": "weft", "operation": "Apply", "apiVersion": "cloud.weave.works/v1beta1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:weft.io/owner": {}}}}}])
    }

    #[test]
    fn only_the_root_s_own_or_the_watched_namespaces_weaveclouds_are_reconciled() {
        let root = Owner::root("weft-system", "weft");
        let shard = Owner::root("weft-system", "weft-shard-1");
        let roots = [root.clone(), shard.clone()];
        let all = WatchNamespaces::all();
        // Listed in the root's (or a shard root's) inventory: reconciled, whatever its labels.
        for owner in [&root, &shard] {
            let ours = wc(
                "team-a",
                json!({OWNER_LABEL: owner.id().0}),
                applied_by_weft(),
            );
            let listed = listing(&[(owner, "team-a", "wc")]);
            assert_eq!(trust(&ours, &roots, &listed, &all), Trust::Reconciled);
        }
        let nothing = RootListing::default();
        // Created by hand: ignored, and told so.
        let tenant = wc("team-a", json!({}), json!([]));
        assert!(matches!(
            trust(&tenant, &roots, &nothing, &all),
            Trust::Ignored { tell: true, .. }
        ));
        // The root's label, applied with `--field-manager=weft` (issue 48 item 2): the manager's
        // name is not an identity; not in the inventory, so ignored, and told so.
        let forged = wc(
            "team-a",
            json!({OWNER_LABEL: root.id().0}),
            applied_by_weft(),
        );
        assert!(matches!(
            trust(&forged, &roots, &nothing, &all),
            Trust::Ignored { tell: true, .. }
        ));
        // Another WeaveCloud of the same namespace is listed: not this one.
        let other_listed = listing(&[(&root, "team-a", "another")]);
        assert!(matches!(
            trust(&forged, &roots, &other_listed, &all),
            Trust::Ignored { .. }
        ));
        // Another installation's: left to it, silently.
        let other = Owner::root("weft-system", "other");
        let theirs = wc(
            "team-a",
            json!({OWNER_LABEL: other.id().0}),
            applied_by_weft(),
        );
        assert!(matches!(
            trust(&theirs, &roots, &nothing, &all),
            Trust::Ignored { tell: false, .. }
        ));
        // A tenant's Root object applied it: left to that root's passes, silently, even in a
        // watched namespace (the controller would act as Weft).
        let tenant_root = Owner::root("team-a", "apps");
        let tenants = wc(
            "team-a",
            json!({OWNER_LABEL: tenant_root.id().0}),
            json!([]),
        );
        let mut tenants = tenants;
        tenants.annotations_mut().insert(
            crate::api::keys::OWNER_REF_ANNOTATION.into(),
            tenant_root.reference(),
        );
        for namespaces in [&all, &WatchNamespaces::only(["team-a"])] {
            match trust(&tenants, &roots, &nothing, namespaces) {
                Trust::Ignored { why, tell } => {
                    assert!(!tell);
                    assert!(why.contains("applied by root team-a/apps"), "{why}");
                }
                other => panic!("{other:?}"),
            }
        }
        // --watch-namespaces: the listed namespaces' WeaveClouds, whoever created them.
        let listed = WatchNamespaces::only(["team-a"]);
        assert_eq!(trust(&tenant, &roots, &nothing, &listed), Trust::Reconciled);
        let elsewhere = wc("team-b", json!({}), json!([]));
        match trust(&elsewhere, &roots, &nothing, &listed) {
            Trust::Ignored { why, tell } => {
                assert!(tell);
                assert!(why.contains("namespace team-b is not one of"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
