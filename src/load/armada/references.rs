//! Checks across the Armada documents that no schema can make: references between manifests,
//! groups and charts, dependency cycles, and per-chart rules (overlays, `min_ready`, local paths).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{key_of, ArmadaDocs, ResourceKey, MAX_DEPENDENCY_DEPTH, MAX_DEPENDENCY_TREE};
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
            .flat_map(|w| w.resources.iter().flatten())
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

/// Depth-first search without recursion (a chain of thousands of charts must not overflow the
/// stack). Each cycle is reported once, at the dependency entry that closes it. On the way
/// back, each chart's expanded dependency tree is measured: Armada renders a dependency once
/// per path to it, so a diamond repeated at each level doubles the tree per level. A tree
/// deeper than [`MAX_DEPENDENCY_DEPTH`] or larger than [`MAX_DEPENDENCY_TREE`] charts is
/// reported at the chart where it first passes the bound.
fn report_cycles(
    edges: &BTreeMap<ResourceKey, Vec<(ResourceKey, Origin)>>,
    diags: &mut Diagnostics,
) {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Visiting,
        /// Expanded tree: charts, depth (both saturate past their bound).
        Done {
            size: usize,
            depth: usize,
        },
    }
    let no_edges: &[(ResourceKey, Origin)] = &[];
    let deps_of = |n: &ResourceKey| edges.get(n).map(Vec::as_slice).unwrap_or(no_edges);
    let mut state: HashMap<&ResourceKey, State> = HashMap::new();
    for root in edges.keys() {
        if state.contains_key(root) {
            continue;
        }
        // (node, index of the next dependency to look at)
        let mut path: Vec<(&ResourceKey, usize)> = vec![(root, 0)];
        state.insert(root, State::Visiting);
        while let Some((node, next)) = path.last_mut() {
            let node: &ResourceKey = node;
            let deps = deps_of(node);
            if let Some((dep, at)) = deps.get(*next) {
                *next += 1;
                match state.get(dep) {
                    Some(State::Visiting) => {
                        let start = path.iter().position(|(p, _)| *p == dep).unwrap_or(0);
                        let mut names: Vec<String> = path[start..]
                            .iter()
                            .map(|(k, _)| format!("`{}`", k.name))
                            .collect();
                        names.push(format!("`{}`", dep.name));
                        if names.len() > 8 {
                            // A cycle through thousands of charts: its ends name it well enough.
                            let hidden = names.len() - 6;
                            names.splice(3..names.len() - 3, [format!("… {hidden} more …")]);
                        }
                        diags.error(
                            at.clone(),
                            format!(
                                "dependency cycle: ArmadaChart `{node}` depends on `{}`, which leads back to it ({})",
                                dep.name,
                                names.join(" → ")
                            ),
                        );
                    }
                    Some(State::Done { .. }) => {}
                    None => {
                        state.insert(dep, State::Visiting);
                        path.push((dep, 0));
                    }
                }
                continue;
            }
            // Every dependency is done (or closes a cycle, reported above): measure the tree.
            let (mut size, mut depth, mut deps_within) = (1usize, 1usize, true);
            for (dep, _) in deps {
                if let Some(State::Done { size: s, depth: d }) = state.get(dep) {
                    size = size.saturating_add(*s);
                    depth = depth.max(d + 1);
                    deps_within &= *s <= MAX_DEPENDENCY_TREE && *d <= MAX_DEPENDENCY_DEPTH;
                }
            }
            let size = size.min(MAX_DEPENDENCY_TREE + 1);
            let depth = depth.min(MAX_DEPENDENCY_DEPTH + 1);
            if deps_within && (size > MAX_DEPENDENCY_TREE || depth > MAX_DEPENDENCY_DEPTH) {
                let at = deps[0].1.clone();
                diags.error(
                    at,
                    if depth > MAX_DEPENDENCY_DEPTH {
                        format!("ArmadaChart `{node}`: dependencies nested deeper than {MAX_DEPENDENCY_DEPTH} levels")
                    } else {
                        format!("ArmadaChart `{node}`: its dependency tree expands to more than {MAX_DEPENDENCY_TREE} charts (each dependency is rendered once per path to it; is a shared dependency repeated at every level?)")
                    },
                );
            }
            state.insert(node, State::Done { size, depth });
            path.pop();
        }
    }
}
