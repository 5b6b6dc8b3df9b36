//! The takeover of a one-shot pass (`weft sync`, and its previews `weft sync --dry-run` and
//! `weft diff`), with the functions the WeaveCloud controller uses.

use std::collections::BTreeSet;

use kube::{Client, ResourceExt};

use super::{api_resource, carry_deploy_key, designated, desired_reference, find, record};
use super::{remove_all, Decision, Found};
use crate::api::weavecloud::WeaveCloud;
use crate::api::ObjectRef;
use crate::apply::changeset::{Action, Change};
use crate::pass::agents::owner_of;
use crate::pass::{Observer, Progress};
use crate::render::{DesiredObject, DesiredSet};

/// What the takeover of a one-shot pass did (or, with `dry_run`, would do).
#[derive(Debug, Default)]
pub struct Planned {
    /// The removals, as deleted changes of their WeaveCloud, in order; with `dry_run`, then the
    /// objects that are recreated, as created changes.
    pub changes: Vec<Change>,
    /// Desired objects whose live launcher copy the takeover removes first (a selector that
    /// cannot change): a preview shows them as created, never as an update the API server
    /// would refuse.
    pub recreated: Vec<DesiredObject>,
    /// How many launcher objects are adopted by the apply.
    pub adopted: usize,
    /// With `dry_run`: desired objects (`Kind/namespace/name`) the takeover would create before
    /// the apply (the deploy key copied out of kube-system), so that the apply adopts them: the
    /// plan shows them as configured, as the real sync reports them, not as created.
    pub copied: BTreeSet<String>,
}

/// Whether [`carry_deploy_key`] would copy the deploy key for a WeaveCloud in `namespace`
/// (read only, for a dry run).
async fn would_carry_deploy_key(
    client: &Client,
    namespace: &str,
    found: &[Found],
) -> Result<bool, kube::Error> {
    use k8s_openapi::api::core::v1::Secret;
    if namespace == super::LAUNCHER_LEGACY_NAMESPACE || !super::launcher_flux_in_kube_system(found)
    {
        return Ok(false);
    }
    let has_data = |s: &Secret| s.data.as_ref().is_some_and(|d| !d.is_empty());
    let here = kube::Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(super::FLUX_DEPLOY_SECRET)
        .await?;
    if here.is_some_and(|s| has_data(&s)) {
        return Ok(false);
    }
    let legacy = kube::Api::<Secret>::namespaced(client.clone(), super::LAUNCHER_LEGACY_NAMESPACE)
        .get_opt(super::FLUX_DEPLOY_SECRET)
        .await?;
    Ok(legacy.is_some_and(|s| has_data(&s)))
}

fn change(f: &Found, owner: &crate::render::Owner, action: Action, reason: String) -> Change {
    Change {
        object: ObjectRef {
            api_version: api_resource(f.kind).api_version,
            kind: f.kind.to_string(),
            namespace: f.namespace.clone().unwrap_or_default(),
            name: f.name.clone(),
        },
        owner: owner.clone(),
        action,
        reason: Some(reason),
    }
}

/// One pass of `weft sync`: the takeover the WeaveCloud controller does ([`find`],
/// [`record::keep`], [`carry_deploy_key`], [`remove_all`]; kube-system only for the WeaveCloud
/// named by `launcher_takeover`; the record in Weft's namespace `weft_namespace`), for every WeaveCloud whose agents `set` holds, before they are
/// applied. What is kept from the launcher's flux (and what is not) is said through `observer`
/// before anything is deleted. Returns the set to apply and what was done. With `dry_run`
/// nothing is written: the same objects are found, and the plan says what would be removed,
/// recreated and adopted. A WeaveCloud with `takeover: false` keeps the launcher's objects:
/// they are logged, and its same-named agents are left out of the set (as the controller does),
/// so nothing is applied over them.
pub async fn before_pass(
    client: &Client,
    weft_namespace: &str,
    set: DesiredSet,
    launcher_takeover: Option<&str>,
    dry_run: bool,
    observer: &Observer<'_>,
) -> Result<(DesiredSet, Planned), kube::Error> {
    let weaveclouds: Vec<WeaveCloud> = set
        .objects()
        .iter()
        .filter(|o| o.kind() == "WeaveCloud")
        .filter_map(|o| serde_json::from_value(o.object.value()).ok())
        .collect();
    let mut planned = Planned::default();
    let mut left = BTreeSet::new();
    let mut recreated = BTreeSet::new();
    for wc in &weaveclouds {
        let ns = wc.namespace().unwrap_or_default();
        let owner = owner_of(&ns, &wc.name_any());
        if !set.owners().contains(&owner) {
            continue;
        }
        let desired: Vec<DesiredObject> = set
            .objects()
            .iter()
            .filter(|o| o.owner == owner)
            .cloned()
            .collect();
        let legacy = designated(launcher_takeover, &ns, &wc.name_any());
        let found = find(client, &ns, &desired, legacy).await?;
        if !wc.spec.general.takeover {
            for f in &found {
                tracing::warn!(weavecloud = %owner.reference(), object = %f.reference(), "spec.general.takeover is false: the launcher's object is left in place, so its agent may run beside Weft's");
                left.insert(f.reference());
            }
            continue;
        }
        planned.adopted += found.iter().filter(|f| f.action == Decision::Adopt).count();
        for f in &found {
            if matches!(f.action, Decision::Remove(_))
                && desired
                    .iter()
                    .any(|d| desired_reference(d) == f.reference())
            {
                recreated.insert(f.reference());
            }
        }
        if dry_run {
            if would_carry_deploy_key(client, &ns, &found).await? {
                planned.adopted += 1;
                planned
                    .copied
                    .insert(format!("Secret/{ns}/{}", super::FLUX_DEPLOY_SECRET));
            }
            if record::removes_launcher_flux(&found) && !wc.spec.flux.disable {
                if let Some(r) = record::capture(client, wc, "flux-agent", legacy).await? {
                    let message = format!(
                        "WeaveCloud {} would take over: {}",
                        owner.reference(),
                        record::notice(&r, weft_namespace, wc)
                    );
                    observer(Progress::Phase {
                        message,
                        objects: 0,
                    });
                }
            }
            for f in &found {
                if let Decision::Remove(why) = f.action {
                    planned.changes.push(change(
                        f,
                        &owner,
                        Action::Deleted,
                        format!("launcher takeover: {why}"),
                    ));
                }
            }
            continue;
        }
        // What the launcher's flux ran with is recorded, and said, before it goes.
        if let Some(r) = record::keep(client, weft_namespace, wc, &found, legacy).await? {
            let message = format!(
                "WeaveCloud {}: {}",
                owner.reference(),
                record::notice(&r, weft_namespace, wc)
            );
            observer(Progress::Phase {
                message,
                objects: 0,
            });
        }
        if carry_deploy_key(client, &ns, &found).await? {
            planned.adopted += 1;
            tracing::info!(weavecloud = %owner.reference(), "takeover: copied the flux deploy key from kube-system");
        }
        for (reference, why) in remove_all(client, &found).await? {
            let Some(f) = found.iter().find(|f| f.reference() == reference) else {
                continue;
            };
            planned.changes.push(change(
                f,
                &owner,
                Action::Deleted,
                format!("launcher takeover: {why}"),
            ));
        }
    }
    let mut kept = Vec::new();
    for d in set.objects() {
        let reference = desired_reference(d);
        if left.contains(&reference) {
            continue;
        }
        if dry_run && recreated.contains(&reference) {
            planned.recreated.push(d.clone());
            planned.changes.push(Change {
                object: ObjectRef {
                    api_version: d.api_version().to_string(),
                    kind: d.kind().to_string(),
                    namespace: d.namespace().unwrap_or_default().to_string(),
                    name: d.name().to_string(),
                },
                owner: d.owner.clone(),
                action: Action::Created,
                reason: Some("recreated after the launcher takeover".to_string()),
            });
            continue;
        }
        kept.push(d.clone());
    }
    if left.is_empty() && planned.recreated.is_empty() {
        return Ok((set, planned));
    }
    let hooks = set.hooks().to_vec();
    let set = DesiredSet::for_owners(kept, set.owners().clone()).with_hooks(hooks);
    Ok((set, planned))
}
