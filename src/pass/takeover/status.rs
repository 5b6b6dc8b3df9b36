//! What `weft sync` writes into each WeaveCloud's status after its pass, as the WeaveCloud
//! controller writes it (issue 44 item 7): `status.flux` (the flux and memcached arguments kept
//! from the flux that ran before, and what the takeover could not keep), and, after a takeover,
//! `status.takeover.removed` and `LauncherObjects=False TakenOver`. What was kept is also said
//! in a line of the sync's output.

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::conditions::{now_rfc3339, set_condition, Condition, ConditionStatus};
use crate::api::weavecloud::{FluxStatus, WeaveCloud};
use crate::apply::changeset::{Action, ChangeSet};
use crate::pass::agents::{gather, owner_of, AgentBundles};
use crate::render::DesiredSet;

/// The condition the controller keeps about the launcher's objects, and its reason after a
/// takeover (the controller's `daemon::weavecloud` constants).
const LAUNCHER_OBJECTS: &str = "LauncherObjects";
const TAKEN_OVER: &str = "TakenOver";

/// For each WeaveCloud whose agents `set` held: write its `status.flux` (and, when `changes`
/// hold removals of its takeover, `status.takeover` and the `LauncherObjects` condition), and
/// return one line per WeaveCloud that kept arguments, for the output. Never fails: what cannot
/// be read or written is returned as a warning line.
pub async fn record_one_shot(
    client: &Client,
    weft_namespace: &str,
    launcher_takeover: Option<&str>,
    set: &DesiredSet,
    changes: &ChangeSet,
) -> Vec<String> {
    let bundles = AgentBundles::new(client.clone(), weft_namespace);
    let mut lines = Vec::new();
    for doc in set.objects().iter().filter(|o| o.kind() == "WeaveCloud") {
        let Ok(wc) = serde_json::from_value::<WeaveCloud>(doc.object.value()) else {
            continue;
        };
        let ns = wc.namespace().unwrap_or_default();
        let name = wc.name_any();
        let owner = owner_of(&ns, &name);
        if !set.owners().contains(&owner) {
            continue;
        }
        let legacy = super::designated(launcher_takeover, &ns, &name);
        let sources = match gather(client, &bundles, &wc, legacy).await {
            Ok(s) => s,
            Err(e) => {
                lines.push(format!(
                    "warning: WeaveCloud {ns}/{name}: its status was not written: {e}"
                ));
                continue;
            }
        };
        let rendered = match crate::render::weavecloud::render_agents(
            &wc,
            &sources.bundle.bundle,
            &sources.inputs,
        ) {
            Ok(r) => r,
            Err(e) => {
                lines.push(format!(
                    "warning: WeaveCloud {ns}/{name}: its status was not written: {e}"
                ));
                continue;
            }
        };
        let flux = FluxStatus {
            preserved_args: rendered.preserved_flux_args.clone(),
            preserved_memcached_args: rendered.preserved_memcached_args.clone(),
            dropped: sources.dropped.clone(),
        };
        if !flux.preserved_args.is_empty() || !flux.preserved_memcached_args.is_empty() {
            let mut line = format!("WeaveCloud {ns}/{name}: flux runs with what spec.flux leaves unset, kept from the flux that ran before:");
            if !flux.preserved_args.is_empty() {
                line.push_str(&format!(" {}", flux.preserved_args.join(" ")));
            }
            if !flux.preserved_memcached_args.is_empty() {
                line.push_str(&format!(
                    "; memcached {}",
                    flux.preserved_memcached_args.join(" ")
                ));
            }
            lines.push(line);
        }
        let removed: Vec<String> = changes
            .entries
            .iter()
            .filter(|c| {
                c.owner == owner
                    && c.action == Action::Deleted
                    && c.reason
                        .as_deref()
                        .is_some_and(|r| r.starts_with("launcher takeover"))
            })
            .map(|c| {
                if c.object.namespace.is_empty() {
                    format!("{}/{}", c.object.kind, c.object.name)
                } else {
                    format!("{}/{}/{}", c.object.kind, c.object.namespace, c.object.name)
                }
            })
            .collect();
        if let Err(e) = write(client, &wc, flux, &removed).await {
            lines.push(format!(
                "warning: WeaveCloud {ns}/{name}: its status was not written: {}",
                crate::apply::describe(&e).0
            ));
        }
    }
    lines
}

/// Merge `flux` and the takeover's `removed` into the live WeaveCloud's status.
async fn write(
    client: &Client,
    wc: &WeaveCloud,
    flux: FluxStatus,
    removed: &[String],
) -> Result<(), kube::Error> {
    let api: Api<WeaveCloud> = Api::namespaced(client.clone(), &wc.namespace().unwrap_or_default());
    let Some(live) = api.get_opt(&wc.name_any()).await? else {
        return Ok(());
    };
    let mut status = live.status.unwrap_or_default();
    status.flux = Some(flux);
    let mut patch = json!({"status": {"flux": status.flux}});
    if !removed.is_empty() {
        let mut t = status.takeover.clone().unwrap_or_default();
        for r in removed {
            if !t.removed.contains(r) {
                t.removed.push(r.clone());
            }
        }
        t.left.clear();
        let condition = Condition::new(
            LAUNCHER_OBJECTS,
            ConditionStatus::False,
            TAKEN_OVER,
            format!(
                "weft sync removed {} launcher objects (see status.takeover)",
                removed.len()
            ),
        );
        set_condition(&mut status.conditions, condition, &now_rfc3339());
        // `left` as [] (a merge patch leaves an absent list as it was).
        patch["status"]["takeover"] = json!({"removed": t.removed, "left": []});
        patch["status"]["conditions"] = json!(status.conditions);
    }
    api.patch_status(
        &wc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}
