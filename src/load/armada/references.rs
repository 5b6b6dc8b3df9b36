//! Checks across the Armada documents that no schema can make: references between manifests,
//! groups and charts, dependency cycles, and per-chart rules (overlays, `min_ready`, local paths).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{key_of, ArmadaDocs, ResourceKey};
use crate::api::armada::{overlays_of, SourceType};
use crate::load::schema;
use crate::load::{Diagnostics, Origin};

/// Per-chart checks the schema cannot make: overlays, `min_ready` values, local paths.
pub(super) fn check_charts(docs: &ArmadaDocs, diags: &mut Diagnostics) {
    for c in &docs.charts {
        let spec = &c.resource.spec;
        if let Err((i, message)) = overlays_of(&spec.values) {
            diags.error(c.origin_of(&format!("/values/overlays/{i}")), message);
        }
        for (i, r) in spec
            .wait
            .iter()
            .flat_map(|w| w.resources.iter())
            .enumerate()
        {
            if let Some(Err(e)) = r.min_ready.as_ref().map(|m| m.threshold()) {
                diags.error(
                    c.origin_of(&format!("/wait/resources/{i}/min_ready")),
                    e.to_string(),
                );
            }
        }
        let deletes = spec
            .upgrade
            .iter()
            .flat_map(|u| u.pre.iter())
            .flat_map(|p| p.delete.iter());
        for (i, action) in deletes.enumerate() {
            if action.target().is_none() {
                let hint = schema::did_you_mean(&action.type_, ["pod", "job", "cronjob"])
                    .map(|m| format!(" (did you mean `{m}`?)"))
                    .unwrap_or_default();
                diags.error(
                    c.origin_of(&format!("/upgrade/pre/delete/{i}/type")),
                    format!(
                        "`{}` `{}` cannot be deleted before an upgrade: the types are pod, job and cronjob{hint}",
                        c.field_name(&format!("/upgrade/pre/delete/{i}/type")),
                        action.type_
                    ),
                );
            }
        }
        let source = &spec.source;
        if source.type_ == SourceType::Local {
            if let Err(message) =
                crate::source::check_relative_path(source.location.trim_start_matches("./"))
            {
                diags.error(
                    c.origin_of("/source/location"),
                    format!("`{}`: {message}", c.field_name("/source/location")),
                );
            }
        }
        if let Some(sub) = &source.subpath {
            if let Err(message) = crate::source::check_relative_path(sub.trim_start_matches("./")) {
                diags.error(
                    c.origin_of("/source/subpath"),
                    format!("`{}`: {message}", c.field_name("/source/subpath")),
                );
            }
        }
    }
}

/// Every name a manifest, group or chart refers to must exist (same namespace); a chart is in at
/// most one group and a group in at most one manifest (the release prefix would be ambiguous);
/// `dependencies` have no cycle.
pub(super) fn check_references(docs: &ArmadaDocs, diags: &mut Diagnostics) {
    let chart_names: BTreeMap<String, Vec<&str>> =
        names_by_namespace(docs.charts.iter().map(|c| &c.resource.metadata));
    let group_names: BTreeMap<String, Vec<&str>> =
        names_by_namespace(docs.groups.iter().map(|g| &g.resource.metadata));
    let missing = |names: &BTreeMap<String, Vec<&str>>, ns: &str, name: &str| -> Option<String> {
        let list = names.get(ns).cloned().unwrap_or_default();
        if list.contains(&name) {
            return None;
        }
        Some(
            schema::did_you_mean(name, list.iter().copied())
                .map(|m| format!(" (did you mean `{m}`?)"))
                .unwrap_or_default(),
        )
    };

    let mut group_of_chart: HashMap<ResourceKey, (ResourceKey, Origin)> = HashMap::new();
    for g in &docs.groups {
        let gkey = key_of(&g.resource.metadata);
        let mut in_this = BTreeSet::new();
        for (i, name) in g.resource.spec.chart_group.iter().enumerate() {
            let at = g.origin_of(&format!("/chart_group/{i}"));
            if let Some(hint) = missing(&chart_names, &gkey.namespace, name) {
                diags.error(
                    at,
                    format!("ArmadaChartGroup `{gkey}` lists chart `{name}`, but there is no ArmadaChart `{name}` in namespace `{}`{hint}", gkey.namespace),
                );
                continue;
            }
            if !in_this.insert(name.clone()) {
                diags.error(
                    at,
                    format!("ArmadaChartGroup `{gkey}` lists chart `{name}` twice"),
                );
                continue;
            }
            let ckey = ResourceKey {
                namespace: gkey.namespace.clone(),
                name: name.clone(),
            };
            if let Some((other, other_at)) = group_of_chart.get(&ckey) {
                diags.error(
                    at,
                    format!("ArmadaChart `{ckey}` is listed by ArmadaChartGroup `{gkey}` and by ArmadaChartGroup `{other}` (at {other_at}); a chart belongs to one group"),
                );
                continue;
            }
            group_of_chart.insert(
                ckey,
                (gkey.clone(), g.origin_of(&format!("/chart_group/{i}"))),
            );
        }
    }

    let mut manifest_of_group: HashMap<ResourceKey, (ResourceKey, Origin)> = HashMap::new();
    for m in &docs.manifests {
        let mkey = key_of(&m.resource.metadata);
        let mut in_this = BTreeSet::new();
        for (i, name) in m.resource.spec.chart_groups.iter().enumerate() {
            let at = m.origin_of(&format!("/chart_groups/{i}"));
            if let Some(hint) = missing(&group_names, &mkey.namespace, name) {
                diags.error(
                    at,
                    format!("ArmadaManifest `{mkey}` lists chart group `{name}`, but there is no ArmadaChartGroup `{name}` in namespace `{}`{hint}", mkey.namespace),
                );
                continue;
            }
            if !in_this.insert(name.clone()) {
                diags.error(
                    at,
                    format!("ArmadaManifest `{mkey}` lists chart group `{name}` twice"),
                );
                continue;
            }
            let gkey = ResourceKey {
                namespace: mkey.namespace.clone(),
                name: name.clone(),
            };
            if let Some((other, other_at)) = manifest_of_group.get(&gkey) {
                diags.error(
                    at,
                    format!("ArmadaChartGroup `{gkey}` is listed by ArmadaManifest `{mkey}` and by ArmadaManifest `{other}` (at {other_at}); a group belongs to one manifest"),
                );
                continue;
            }
            manifest_of_group.insert(gkey, (mkey.clone(), at));
        }
    }

    // Dependencies: dangling names, then cycles.
    let mut edges: BTreeMap<ResourceKey, Vec<(ResourceKey, Origin)>> = BTreeMap::new();
    for c in &docs.charts {
        let ckey = key_of(&c.resource.metadata);
        let mut deps = Vec::new();
        for (i, name) in c.resource.spec.dependencies.iter().enumerate() {
            let at = c.origin_of(&format!("/dependencies/{i}"));
            if let Some(hint) = missing(&chart_names, &ckey.namespace, name) {
                diags.error(
                    at,
                    format!("ArmadaChart `{ckey}` depends on `{name}`, but there is no ArmadaChart `{name}` in namespace `{}`{hint}", ckey.namespace),
                );
                continue;
            }
            deps.push((
                ResourceKey {
                    namespace: ckey.namespace.clone(),
                    name: name.clone(),
                },
                at,
            ));
        }
        edges.insert(ckey, deps);
    }
    report_cycles(&edges, diags);
}

fn names_by_namespace<'a>(
    metas: impl Iterator<Item = &'a kube::api::ObjectMeta>,
) -> BTreeMap<String, Vec<&'a str>> {
    let mut out: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for m in metas {
        out.entry(m.namespace.clone().unwrap_or_default())
            .or_default()
            .push(m.name.as_deref().unwrap_or(""));
    }
    out
}

/// Depth-first search; each cycle is reported once, at the dependency entry that closes it.
fn report_cycles(
    edges: &BTreeMap<ResourceKey, Vec<(ResourceKey, Origin)>>,
    diags: &mut Diagnostics,
) {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Visiting,
        Done,
    }
    fn visit(
        node: &ResourceKey,
        edges: &BTreeMap<ResourceKey, Vec<(ResourceKey, Origin)>>,
        state: &mut HashMap<ResourceKey, State>,
        path: &mut Vec<ResourceKey>,
        diags: &mut Diagnostics,
    ) {
        state.insert(node.clone(), State::Visiting);
        path.push(node.clone());
        for (dep, at) in edges.get(node).map(Vec::as_slice).unwrap_or(&[]) {
            match state.get(dep) {
                Some(State::Visiting) => {
                    let start = path.iter().position(|p| p == dep).unwrap_or(0);
                    let mut names: Vec<String> = path[start..]
                        .iter()
                        .map(|k| format!("`{}`", k.name))
                        .collect();
                    names.push(format!("`{}`", dep.name));
                    diags.error(
                        at.clone(),
                        format!(
                            "dependency cycle: ArmadaChart `{node}` depends on `{}`, which leads back to it ({})",
                            dep.name,
                            names.join(" → ")
                        ),
                    );
                }
                Some(State::Done) => {}
                None => visit(dep, edges, state, path, diags),
            }
        }
        path.pop();
        state.insert(node.clone(), State::Done);
    }
    let mut state = HashMap::new();
    for node in edges.keys() {
        if !state.contains_key(node) {
            visit(node, edges, &mut state, &mut Vec::new(), diags);
        }
    }
}
