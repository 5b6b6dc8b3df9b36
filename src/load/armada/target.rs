//! Which manifest deploys, as `armada apply --target-manifest NAME` chooses it
//! (armada/handlers/manifest.py): with a target, only that manifest, its groups and their charts
//! (with their `dependencies`) are kept; every other Armada document is left out of the pass, a
//! chart or group with a warning naming it. Without a target, a repository with more than one
//! manifest is refused, as Armada refuses it ("Multiple manifests are not supported").

use std::collections::BTreeSet;

use super::{key_of, ArmadaDocs, ResourceKey};
use crate::load::schema;
use crate::load::Diagnostics;

/// The most characters of the target's name quoted in a message (it comes from a flag, but may
/// come from an environment variable set by anyone who writes the daemon's configuration).
const MAX_QUOTED: usize = 100;

/// Keep what the target manifest deploys (see the module documentation). `target` is
/// `NAME` or `NAMESPACE/NAME` of an ArmadaManifest.
pub(super) fn select_manifest(
    docs: &mut ArmadaDocs,
    target: Option<&str>,
    diags: &mut Diagnostics,
) {
    let Some(target) = target.map(str::trim).filter(|t| !t.is_empty()) else {
        refuse_several(docs, diags);
        return;
    };
    let shown: String = target.chars().take(MAX_QUOTED).collect();
    let matches = |key: &ResourceKey| match target.split_once('/') {
        Some((ns, name)) => key.namespace == ns && key.name == name,
        None => key.name == target,
    };
    let chosen: Vec<usize> = docs
        .manifests
        .iter()
        .enumerate()
        .filter(|(_, m)| matches(&key_of(&m.resource.metadata)))
        .map(|(i, _)| i)
        .collect();
    match chosen.as_slice() {
        [one] => {
            let keep = docs.manifests.swap_remove(*one);
            docs.manifests = vec![keep];
        }
        [] => {
            let names: Vec<String> = docs
                .manifests
                .iter()
                .map(|m| format!("`{}` ({})", key_of(&m.resource.metadata), m.origin))
                .collect();
            let hint = schema::did_you_mean(
                target,
                docs.manifests
                    .iter()
                    .filter_map(|m| m.resource.metadata.name.as_deref()),
            )
            .map(|m| format!(" (did you mean `{m}`?)"))
            .unwrap_or_default();
            let origin = docs
                .manifests
                .first()
                .map(|m| m.origin.clone())
                .or_else(|| docs.charts.first().map(|c| c.origin.clone()))
                .unwrap_or_default();
            let found = if names.is_empty() {
                "the repository has no ArmadaManifest".to_string()
            } else {
                format!("the manifests are {}", names.join(", "))
            };
            diags.error(
                origin,
                format!("--target-manifest `{shown}` names no ArmadaManifest: {found}{hint}; nothing is deployed"),
            );
            // The load fails; the manifests' own references would only add noise.
            docs.manifests.clear();
            return;
        }
        several => {
            let names: Vec<String> = several
                .iter()
                .map(|i| {
                    let m = &docs.manifests[*i];
                    format!("`{}` ({})", key_of(&m.resource.metadata), m.origin)
                })
                .collect();
            diags.error(
                docs.manifests[several[1]].origin.clone(),
                format!(
                    "--target-manifest `{shown}` names {} ArmadaManifests: {}; write NAMESPACE/NAME",
                    several.len(),
                    names.join(", ")
                ),
            );
            docs.manifests.clear();
            return;
        }
    }
    keep_what_the_manifest_deploys(docs, &shown, diags);
}

/// Without a target, Armada refuses more than one manifest: so does Weft, naming them and the flag.
fn refuse_several(docs: &mut ArmadaDocs, diags: &mut Diagnostics) {
    if docs.manifests.len() < 2 {
        return;
    }
    let mut manifests: Vec<_> = docs.manifests.iter().collect();
    manifests.sort_by_key(|m| key_of(&m.resource.metadata));
    let names: Vec<String> = manifests
        .iter()
        .map(|m| format!("`{}` ({})", key_of(&m.resource.metadata), m.origin))
        .collect();
    diags.error(
        manifests[1].origin.clone(),
        format!(
            "{} ArmadaManifests: {}. Armada deploys one manifest of a site (`armada apply --target-manifest`); choose it with --target-manifest NAME (or WEFT_TARGET_MANIFEST)",
            names.len(),
            names.join(", ")
        ),
    );
    // The load fails; "a group belongs to one manifest" would only repeat this.
    docs.manifests.clear();
}

/// Leave out the groups the one remaining manifest does not list and the charts that none of its
/// groups lists (nor depends on), each with a warning.
fn keep_what_the_manifest_deploys(docs: &mut ArmadaDocs, target: &str, diags: &mut Diagnostics) {
    let Some(manifest) = docs.manifests.first() else {
        return;
    };
    let mkey = key_of(&manifest.resource.metadata);
    let groups: BTreeSet<ResourceKey> = manifest
        .resource
        .spec
        .chart_groups
        .iter()
        .map(|name| ResourceKey {
            namespace: mkey.namespace.clone(),
            name: name.clone(),
        })
        .collect();
    let mut charts: BTreeSet<ResourceKey> = BTreeSet::new();
    let mut todo: Vec<ResourceKey> = docs
        .groups
        .iter()
        .filter(|g| groups.contains(&key_of(&g.resource.metadata)))
        .flat_map(|g| {
            let ns = key_of(&g.resource.metadata).namespace;
            g.resource
                .spec
                .chart_group
                .iter()
                .map(move |name| ResourceKey {
                    namespace: ns.clone(),
                    name: name.clone(),
                })
        })
        .collect();
    // Listed charts and, transitively, their dependencies (rendered inside them).
    while let Some(key) = todo.pop() {
        if !charts.insert(key.clone()) {
            continue;
        }
        if let Some(c) = docs.chart(&key.namespace, &key.name) {
            todo.extend(c.resource.spec.dependencies.iter().map(|d| ResourceKey {
                namespace: key.namespace.clone(),
                name: d.clone(),
            }));
        }
    }
    docs.groups.retain(|g| {
        let key = key_of(&g.resource.metadata);
        let kept = groups.contains(&key);
        if !kept {
            diags.warning(
                g.origin.clone(),
                format!("ArmadaChartGroup `{key}` is not deployed: the target manifest `{target}` does not list it"),
            );
        }
        kept
    });
    docs.charts.retain(|c| {
        let key = key_of(&c.resource.metadata);
        let kept = charts.contains(&key);
        if !kept {
            diags.warning(
                c.origin.clone(),
                format!("ArmadaChart `{key}` is not deployed: no chart group of the target manifest `{target}` lists it"),
            );
        }
        kept
    });
}
