//! Which WeaveClouds this installation reconciles (docs/security.md, "Who is trusted with
//! what"). A WeaveCloud makes Weft install a flux agent with every right in the cluster, read a
//! Secret and fetch a channel: it is the operator's to write, not a tenant's. So Weft reconciles
//! a WeaveCloud only when
//! - `--watch-namespaces` is set: the WeaveCloud is in one of those namespaces (the operator
//!   trusts whoever may create WeaveClouds there);
//! - otherwise: its sync root applied it from the config repository (its `weft.io/owner` label
//!   names this installation's root, or one of its shard roots, and was set by Weft's own
//!   server-side apply — the proof prune asks for, [`proof_of_ownership`]).
//!
//! A WeaveCloud nobody's root applied and that is not in a watched namespace gets
//! `Ready=False` with reason [`NOT_RECONCILED`] saying why, written once (only while it has no
//! `Ready` condition, so that two installations in one cluster never fight over it); one that
//! another installation's root applied is left to that installation, silently.

use kube::ResourceExt;
use serde_json::json;

use crate::api::weavecloud::WeaveCloud;
use crate::apply::ownership::proof_of_ownership;
use crate::daemon::namespaces::WatchNamespaces;
use crate::daemon::state::DaemonState;
use crate::render::ownership::OWNER_LABEL;
use crate::render::shard::shard_root_name;
use crate::render::Owner;

/// Condition reason (`Ready=False`, and an event): the WeaveCloud is not reconciled.
pub const NOT_RECONCILED: &str = "NotReconciled";

/// What to do with one WeaveCloud.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// The operator's: reconcile it.
    Reconciled,
    /// Not the operator's: no agents, no finalizer, no update check. `tell`: say why in its
    /// status (nobody's root applied it).
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

/// Whether `wc` is reconciled by the installation whose roots are `roots`, watching
/// `namespaces`.
pub fn trust(wc: &WeaveCloud, roots: &[Owner], namespaces: &WatchNamespaces) -> Trust {
    let namespace = wc.namespace().unwrap_or_default();
    let labelled = wc.labels().contains_key(OWNER_LABEL);
    if namespaces.listed().is_some() {
        if namespaces.contains(&namespace) {
            return Trust::Reconciled;
        }
        return Trust::Ignored {
            why: format!(
                "not reconciled: namespace {namespace} is not one of the namespaces the operator lets Weft reconcile WeaveClouds in (--watch-namespaces); see docs/security.md"
            ),
            tell: !labelled,
        };
    }
    let meta = json!({"metadata": wc.metadata});
    if roots.iter().any(|r| proof_of_ownership(&meta, r).is_ok()) {
        return Trust::Reconciled;
    }
    Trust::Ignored {
        why: "not reconciled: Weft reconciles only the WeaveClouds it applies from its config repository (or, with --watch-namespaces, those in the namespaces the operator lists); a WeaveCloud created in the cluster is not the operator's. See docs/security.md".to_string(),
        tell: !labelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(namespace: &str, labels: serde_json::Value, managed: serde_json::Value) -> WeaveCloud {
        serde_json::from_value(json!({
            "apiVersion": "cloud.weave.works/v1beta1",
            "kind": "WeaveCloud",
            "metadata": {"name": "wc", "namespace": namespace, "labels": labels, "managedFields": managed},
            "spec": {"general": {"environment": "generic"}}
        }))
        .expect("a WeaveCloud")
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
        // Applied by the root (or a shard's root): reconciled.
        for owner in [&root, &shard] {
            let ours = wc(
                "team-a",
                json!({OWNER_LABEL: owner.id().0}),
                applied_by_weft(),
            );
            assert_eq!(trust(&ours, &roots, &all), Trust::Reconciled);
        }
        // Created by hand: ignored, and told so.
        let tenant = wc("team-a", json!({}), json!([]));
        assert!(matches!(
            trust(&tenant, &roots, &all),
            Trust::Ignored { tell: true, .. }
        ));
        // The root's label copied by a tenant (kubectl's manager): ignored.
        let copied = wc(
            "team-a",
            json!({OWNER_LABEL: root.id().0}),
            json!([{"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {"f:weft.io/owner": {}}}}}]),
        );
        assert!(matches!(
            trust(&copied, &roots, &all),
            Trust::Ignored { tell: false, .. }
        ));
        // Another installation's: left to it, silently.
        let other = Owner::root("weft-system", "other");
        let theirs = wc(
            "team-a",
            json!({OWNER_LABEL: other.id().0}),
            applied_by_weft(),
        );
        assert!(matches!(
            trust(&theirs, &roots, &all),
            Trust::Ignored { tell: false, .. }
        ));
        // --watch-namespaces: the listed namespaces' WeaveClouds, whoever created them.
        let listed = WatchNamespaces::only(["team-a"]);
        assert_eq!(trust(&tenant, &roots, &listed), Trust::Reconciled);
        let elsewhere = wc("team-b", json!({}), json!([]));
        match trust(&elsewhere, &roots, &listed) {
            Trust::Ignored { why, tell } => {
                assert!(tell);
                assert!(why.contains("namespace team-b is not one of"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
