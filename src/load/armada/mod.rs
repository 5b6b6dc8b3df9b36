//! Armada documents: `ArmadaChart`/`ArmadaChartGroup`/`ArmadaManifest` CRs and native
//! `schema: armada/Chart/v1`-style documents (converted to the same CRs), validated against the
//! CRD schemas with `file:line:col` errors, with their references (manifest → groups → charts,
//! `dependencies`) checked, and the deployment plan (waves) derived from them.
//!
//! Here: the loaded types, the deployment plan and [`load`]; `documents`: one document typed
//! (a CR, or a native document converted to one) and checked against its CRD schema;
//! `references`: the checks across documents (references, dependency cycles, per-chart rules).

mod documents;
pub mod overrides;
mod references;
mod target;

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::yaml::Positions;
use super::{schema, Diagnostics, Origin, RawDoc};
use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaManifest, API_VERSION};
use crate::source::chart::ChartRequest;
use documents::{doc_key, load_cr, load_native, typed, Kind, Schemas};
use references::{check_charts, check_references};

/// The Armada API group and version.
pub const ARMADA_API_VERSION: &str = API_VERSION;

/// Namespace of the CRs that native documents become (Deckhand metadata has no namespace;
/// a `metadata.namespace` in a native document is honoured).
pub const NATIVE_NAMESPACE: &str = "default";

/// Deepest chain of Armada `dependencies` from one chart (a chart alone is 1).
pub const MAX_DEPENDENCY_DEPTH: usize = 32;
/// Most charts in one chart's expanded dependency tree (a chart alone is 1; a dependency
/// reached by two paths counts twice, as Armada renders it twice).
pub const MAX_DEPENDENCY_TREE: usize = 256;

/// A typed Armada resource with where it was written.
#[derive(Clone, Debug)]
pub struct Loaded<T> {
    /// The resource (native documents converted to the CR).
    pub resource: T,
    /// Where the document starts.
    pub origin: Origin,
    /// Positions of the document's nodes.
    pub positions: Positions,
    /// `/spec` for a CR, `/data` for a native document: where the spec fields are.
    pub spec_pointer: &'static str,
    /// `armada/Chart/v1` etc. for a native document.
    pub native_schema: Option<String>,
}

impl<T> Loaded<T> {
    /// The origin of a spec field, e.g. `/values/overlays/0` → `file:line:col` of that node.
    pub fn origin_of(&self, spec_field: &str) -> Origin {
        Origin {
            file: self.origin.file.clone(),
            pos: self
                .positions
                .find(&format!("{}{spec_field}", self.spec_pointer)),
        }
    }
    /// How a spec field is called in the document as written: `spec.x` or `data.x`.
    pub fn field_name(&self, spec_field: &str) -> String {
        schema::field_path(&format!("{}{spec_field}", self.spec_pointer))
    }
}

pub use crate::api::ResourceKey;

fn key_of(meta: &kube::api::ObjectMeta) -> ResourceKey {
    ResourceKey {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// Armada documents of the repository, typed and checked.
#[derive(Clone, Debug, Default)]
pub struct ArmadaDocs {
    pub charts: Vec<Loaded<ArmadaChart>>,
    pub groups: Vec<Loaded<ArmadaChartGroup>>,
    pub manifests: Vec<Loaded<ArmadaManifest>>,
    /// The load's budget, which the charts' render goes on charging (a handle on the same
    /// counts: one budget bounds the whole load and render, see [`crate::load::budget`]).
    pub budget: crate::load::budget::Budget,
}

impl ArmadaDocs {
    pub fn len(&self) -> usize {
        self.charts.len() + self.groups.len() + self.manifests.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The chart `name` in `namespace`.
    pub fn chart(&self, namespace: &str, name: &str) -> Option<&Loaded<ArmadaChart>> {
        self.charts.iter().find(|c| {
            c.resource.metadata.namespace.as_deref() == Some(namespace)
                && c.resource.metadata.name.as_deref() == Some(name)
        })
    }
    /// What the source stage needs to fetch every chart's files: its key, where its `source`
    /// is written, and the source.
    pub fn chart_requests(&self) -> Vec<ChartRequest> {
        self.charts
            .iter()
            .map(|c| ChartRequest {
                chart: key_of(&c.resource.metadata),
                origin: c.origin_of("/source").to_string(),
                source: c.resource.spec.source.clone(),
            })
            .collect()
    }
    /// Index of a chart by key.
    pub fn chart_index(&self, key: &ResourceKey) -> Option<usize> {
        self.charts
            .iter()
            .position(|c| key_of(&c.resource.metadata) == *key)
    }

    /// The deployment plan: every chart that is deployed on its own, with its wave and release
    /// prefix. Waves start at 1 (wave 0 is the sync layer): each manifest (by namespace/name)
    /// deploys its groups in order; an unsequenced group's charts share one wave, a sequenced
    /// group's charts get one wave each, in order. Groups that no manifest lists follow, then
    /// charts that no group lists and no chart depends on (in one wave). Charts that are only
    /// dependencies are rendered inside the charts that depend on them.
    pub fn deployment_plan(&self) -> Vec<PlannedChart> {
        let mut plan = Vec::new();
        let mut wave = 1u32;
        let mut grouped: BTreeSet<ResourceKey> = BTreeSet::new();
        let mut listed_groups: BTreeSet<ResourceKey> = BTreeSet::new();
        let deploy_group = |g: &Loaded<ArmadaChartGroup>,
                            prefix: Option<&str>,
                            manifest: Option<&ResourceKey>,
                            plan: &mut Vec<PlannedChart>,
                            wave: &mut u32,
                            grouped: &mut BTreeSet<ResourceKey>| {
            let gkey = key_of(&g.resource.metadata);
            let mut any = false;
            for name in &g.resource.spec.chart_group {
                let key = ResourceKey {
                    namespace: gkey.namespace.clone(),
                    name: name.clone(),
                };
                let Some(chart) = self.chart_index(&key) else {
                    continue;
                };
                grouped.insert(key);
                plan.push(PlannedChart {
                    chart,
                    wave: *wave,
                    release_prefix: prefix.filter(|p| !p.is_empty()).map(str::to_string),
                    group: Some(gkey.clone()),
                    manifest: manifest.cloned(),
                });
                any = true;
                if g.resource.spec.sequenced {
                    *wave += 1;
                }
            }
            if any && !g.resource.spec.sequenced {
                *wave += 1;
            }
        };
        let mut manifests: Vec<&Loaded<ArmadaManifest>> = self.manifests.iter().collect();
        manifests.sort_by_key(|m| key_of(&m.resource.metadata));
        for m in manifests {
            let mkey = key_of(&m.resource.metadata);
            for gname in &m.resource.spec.chart_groups {
                let gkey = ResourceKey {
                    namespace: mkey.namespace.clone(),
                    name: gname.clone(),
                };
                let Some(g) = self
                    .groups
                    .iter()
                    .find(|g| key_of(&g.resource.metadata) == gkey)
                else {
                    continue;
                };
                listed_groups.insert(gkey);
                deploy_group(
                    g,
                    Some(&m.resource.spec.release_prefix),
                    Some(&mkey),
                    &mut plan,
                    &mut wave,
                    &mut grouped,
                );
            }
        }
        let mut groups: Vec<&Loaded<ArmadaChartGroup>> = self
            .groups
            .iter()
            .filter(|g| !listed_groups.contains(&key_of(&g.resource.metadata)))
            .collect();
        groups.sort_by_key(|g| key_of(&g.resource.metadata));
        for g in groups {
            deploy_group(g, None, None, &mut plan, &mut wave, &mut grouped);
        }
        let dependencies: BTreeSet<ResourceKey> = self
            .charts
            .iter()
            .flat_map(|c| {
                let ns = c.resource.metadata.namespace.clone().unwrap_or_default();
                c.resource
                    .spec
                    .dependencies
                    .iter()
                    .map(move |d| ResourceKey {
                        namespace: ns.clone(),
                        name: d.clone(),
                    })
            })
            .collect();
        let mut alone: Vec<(ResourceKey, usize)> = self
            .charts
            .iter()
            .enumerate()
            .map(|(i, c)| (key_of(&c.resource.metadata), i))
            .filter(|(k, _)| !grouped.contains(k) && !dependencies.contains(k))
            .collect();
        alone.sort();
        for (_, chart) in alone {
            plan.push(PlannedChart {
                chart,
                wave,
                release_prefix: None,
                group: None,
                manifest: None,
            });
        }
        plan
    }
}

/// One chart of the deployment plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedChart {
    /// Index into [`ArmadaDocs::charts`].
    pub chart: usize,
    /// Deployment wave (1-based; a later wave starts when the earlier one is ready).
    pub wave: u32,
    /// The manifest's `release_prefix`, if any and not empty.
    pub release_prefix: Option<String>,
    /// The group that lists the chart.
    pub group: Option<ResourceKey>,
    /// The manifest that lists the group.
    pub manifest: Option<ResourceKey>,
}

/// A native Armada document (`schema: armada/Chart/v1`, …), or another Deckhand-style document
/// (`schema: pegleg/…`, `deckhand/…`, with `metadata.schema: metadata/Document/v1`): the loader
/// of Armada documents reads the first and reports the others as an unsupported schema, naming
/// file and line, instead of as a Kubernetes object without `apiVersion`.
pub fn is_native(value: &Value) -> bool {
    let Some(schema) = value.get("schema").and_then(Value::as_str) else {
        return false;
    };
    if schema.starts_with("armada/") {
        return true;
    }
    if value.get("apiVersion").is_some() || value.get("kind").is_some() {
        return false;
    }
    let deckhand_metadata = value
        .pointer("/metadata/schema")
        .and_then(Value::as_str)
        .is_some_and(|s| s.starts_with("metadata/"));
    // `<namespace>/<Kind>/v<N>`, as every Deckhand schema is named.
    let parts: Vec<&str> = schema.split('/').collect();
    let deckhand_name = parts.len() == 3
        && parts[2]
            .strip_prefix('v')
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
    deckhand_metadata || deckhand_name
}

/// An Armada document of Armada's own schemas (`schema: armada/…`).
fn is_armada_schema(value: &Value) -> bool {
    value
        .get("schema")
        .and_then(Value::as_str)
        .is_some_and(|s| s.starts_with("armada/"))
}

/// The airshipit armada-operator's version, whose ArmadaChart keeps its spec under `data:`.
pub const AIRSHIPIT_V1: &str = "armada.airshipit.org/v1";

/// `apiVersion`s of other Armada operators whose documents Weft reads as its own: the current
/// airshipit armada-operator (`v1`); the keleustes operator's `v1alpha1` is Weft's own version.
pub const COMPATIBLE_API_VERSIONS: &[&str] = &[AIRSHIPIT_V1];

/// Fields of the keleustes armada-operator's `v1alpha1` specs that Weft accepts and ignores, with
/// a warning (they drive that operator's own state machine).
pub const KELEUSTES_FIELDS: &[&str] = &["target_state", "admin_state", "revisionHistoryLimit"];

/// One of the Armada CR kinds (Weft's `v1alpha1`, or a compatible operator's version).
pub fn is_armada_cr(api_version: &str, kind: &str) -> bool {
    (api_version == ARMADA_API_VERSION || COMPATIBLE_API_VERSIONS.contains(&api_version))
        && matches!(kind, "ArmadaChart" | "ArmadaChartGroup" | "ArmadaManifest")
}

/// The config-repository directories that Armada charts among `docs` (raw, before typing) read
/// as `local` sources, each ending in `/` (`""` for the repository root). A chart whose source is
/// malformed is left out here; typing reports it.
pub fn local_chart_dirs(docs: &[RawDoc]) -> Vec<String> {
    let mut dirs = BTreeSet::new();
    for raw in docs {
        let pointer = if is_armada_schema(&raw.value)
            || (raw.value.get("spec").is_none() && raw.value.get("data").is_some())
        {
            "/data/source"
        } else {
            "/spec/source"
        };
        let Some(source) = raw.value.pointer(pointer) else {
            continue;
        };
        let Ok(source) = serde_json::from_value::<crate::api::armada::ChartSource>(source.clone())
        else {
            continue;
        };
        if source.type_ != crate::api::armada::SourceType::Local {
            continue;
        }
        if let Ok(dir) = crate::source::chart::local_dir(&source) {
            dirs.insert(if dir.is_empty() {
                dir
            } else {
                format!("{dir}/")
            });
        }
    }
    dirs.into_iter().collect()
}

/// Type and check the Armada documents, without a target manifest (see [`load_targeted`]).
pub fn load(docs: Vec<RawDoc>, diags: &mut Diagnostics) -> ArmadaDocs {
    load_targeted(docs, None, diags)
}

/// Type and check the Armada documents. `target_manifest` (`--target-manifest`, as `armada
/// apply`'s) selects the manifest that deploys: the other manifests, the groups it does not list
/// and the charts none of its groups lists are left out (the charts and groups with a warning).
/// Without one, more than one manifest is an error, as in Armada.
pub fn load_targeted(
    docs: Vec<RawDoc>,
    target_manifest: Option<&str>,
    diags: &mut Diagnostics,
) -> ArmadaDocs {
    // Generating the CRD schemas takes milliseconds; once per process is enough, and only when a
    // repository holds Armada documents (with the WeaveCloud schema, 0.43 MB an idle daemon held).
    static SCHEMAS: std::sync::OnceLock<Schemas> = std::sync::OnceLock::new();
    let mut out = ArmadaDocs::default();
    let mut seen: HashMap<(Kind, ResourceKey), Origin> = HashMap::new();
    for raw in docs {
        let loaded = if is_native(&raw.value) {
            load_native(raw, SCHEMAS.get_or_init(Schemas::new), diags)
        } else {
            load_cr(raw, SCHEMAS.get_or_init(Schemas::new), diags)
        };
        let Some((kind, doc)) = loaded else { continue };
        let key = doc_key(&doc);
        if let Some(first) = seen.get(&(kind, key.clone())) {
            diags.error(
                doc.origin.clone(),
                format!("{} `{key}` is defined twice: first at {first}", kind.name()),
            );
            continue;
        }
        seen.insert((kind, key), doc.origin.clone());
        match kind {
            Kind::Chart => out.charts.extend(typed(doc, diags)),
            Kind::Group => out.groups.extend(typed(doc, diags)),
            Kind::Manifest => out.manifests.extend(typed(doc, diags)),
        }
    }
    target::select_manifest(&mut out, target_manifest, diags);
    check_charts(&out, diags);
    check_references(&out, diags);
    out
}

#[cfg(test)]
mod tests;
