//! Armada charts → desired objects. Pure: the chart files come in as a value
//! ([`ChartSources`], resolved by the source stage); local charts can also be read straight from
//! the snapshot.
//!
//! A chart is a directory with `Chart.yaml` (name, version), `values.yaml` (defaults) and
//! `templates/` of plain YAML. Rendering, with no template engine:
//! 1. values = `values.yaml` deep-merged with the ArmadaChart's `values` (maps merge, scalars and
//!    lists replace);
//! 2. `${path.to.value}` / `${path.to.value:=default}` in template strings are replaced from the
//!    values (plus `release.name`, `release.namespace`, `chart.name`, `chart.version`); a
//!    placeholder that is the whole scalar keeps the value's type; `$${` writes a literal `${`;
//! 3. `values.overlays` (RFC 7386 merge patches and RFC 6902 JSON patches on targets) are
//!    applied in order.
//!
//! Objects are owned by their ArmadaChart and carry the chart's deployment wave.
//!
//! Here: the plan's charts rendered and owned; `chart`: one chart directory rendered
//! (`Chart.yaml`, values, templates, dependencies, overlays, object checks); [`values`]: values
//! merging and placeholder substitution.

mod chart;
pub mod values;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{order, DesiredObject, Owner, RenderError};
use crate::api::armada::{ArmadaChart, SourceType};
use crate::load::armada::{ArmadaDocs, Loaded, ResourceKey};
use crate::load::{LoadedRepo, Origin};
use crate::source::chart::{local_files, ChartFiles, ChartSources};
use crate::source::Snapshot;
use chart::Renderer;
pub use values::{deep_merge, substitute, substitute_str, Builtins};

/// The owner kind of chart objects.
pub const OWNER_KIND: &str = "ArmadaChart";

/// The Armada CRs of the repository (native documents converted) as sync-layer documents.
pub fn sync_documents(docs: &ArmadaDocs) -> Result<Vec<(Value, Origin)>, RenderError> {
    let mut out = Vec::with_capacity(docs.len());
    let ser = |v: Result<Value, serde_json::Error>, origin: &Origin| {
        v.map_err(|e| RenderError::At {
            origin: origin.clone(),
            message: format!("cannot serialise Armada resource: {e}"),
        })
    };
    for m in &docs.manifests {
        out.push((
            ser(serde_json::to_value(&m.resource), &m.origin)?,
            m.origin.clone(),
        ));
    }
    for g in &docs.groups {
        out.push((
            ser(serde_json::to_value(&g.resource), &g.origin)?,
            g.origin.clone(),
        ));
    }
    for c in &docs.charts {
        out.push((
            ser(serde_json::to_value(&c.resource), &c.origin)?,
            c.origin.clone(),
        ));
    }
    Ok(out)
}

/// The objects of every chart of the deployment plan, in deployment order.
pub fn render(
    repo: &LoadedRepo,
    sources: &ChartSources,
) -> Result<Vec<DesiredObject>, RenderError> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let mut seen: BTreeMap<(String, String, String, String), ResourceKey> = BTreeMap::new();
    for planned in repo.armada.deployment_plan() {
        match render_chart(
            repo,
            sources,
            planned.chart,
            planned.release_prefix.as_deref(),
            planned.wave,
        ) {
            Ok(rendered) => {
                let chart = chart_key(&repo.armada.charts[planned.chart]);
                for o in rendered.objects {
                    let id = identity(&o.object);
                    if let Some(other) = seen.get(&id) {
                        errors.push(RenderError::At {
                            origin: o.origin.clone().unwrap_or_default(),
                            message: format!(
                                "{} `{}` is rendered by ArmadaChart `{chart}` and by ArmadaChart `{other}`; an object belongs to one chart",
                                o.kind(),
                                o.name()
                            ),
                        });
                        continue;
                    }
                    seen.insert(id, chart.clone());
                    out.push(o);
                }
            }
            Err(mut e) => errors.append(&mut e),
        }
    }
    if !errors.is_empty() {
        return Err(combine(errors));
    }
    order::sort(&mut out);
    Ok(out)
}

/// Several render errors as one (each on its own line).
fn combine(mut errors: Vec<RenderError>) -> RenderError {
    if errors.len() == 1 {
        return errors.remove(0);
    }
    RenderError::Other(
        errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

fn identity(o: &Value) -> (String, String, String, String) {
    let s = |p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let group = s("/apiVersion")
        .rsplit_once('/')
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    (
        group,
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name"),
    )
}

fn chart_key(c: &Loaded<ArmadaChart>) -> ResourceKey {
    ResourceKey {
        namespace: c.resource.metadata.namespace.clone().unwrap_or_default(),
        name: c.resource.metadata.name.clone().unwrap_or_default(),
    }
}

/// One rendered chart.
#[derive(Clone, Debug)]
pub struct RenderedChart {
    /// Its objects, owned by the ArmadaChart, in apply order.
    pub objects: Vec<DesiredObject>,
    /// The release name (`{prefix}-{release}`).
    pub release: String,
    /// sha256 of the merged values (for `status.appliedValuesChecksum`).
    pub values_checksum: String,
    /// The source revision (git commit or archive digest), when fetched.
    pub revision: Option<String>,
}

/// Render one chart of `repo.armada.charts`.
pub fn render_chart(
    repo: &LoadedRepo,
    sources: &ChartSources,
    index: usize,
    release_prefix: Option<&str>,
    wave: u32,
) -> Result<RenderedChart, Vec<RenderError>> {
    let docs = &repo.armada;
    let chart = &docs.charts[index];
    let key = chart_key(chart);
    let spec = &chart.resource.spec;
    let release = match release_prefix.filter(|p| !p.is_empty()) {
        Some(p) => format!("{p}-{}", spec.release),
        None => spec.release.clone(),
    };
    let files = files_of(&repo.snapshot, sources, chart).map_err(|e| vec![e])?;
    let mut errors = Vec::new();
    let mut ctx = Renderer {
        docs,
        snapshot: &repo.snapshot,
        sources,
        owner_chart: &key,
        release: &release,
        namespace: &spec.namespace,
        errors: &mut errors,
    };
    let rendered = ctx.chart(chart, &files, None, &mut BTreeSet::new());
    if !errors.is_empty() {
        return Err(errors);
    }
    let Some((objects, values)) = rendered else {
        return Err(vec![RenderError::Other(format!(
            "ArmadaChart `{key}` could not be rendered"
        ))]);
    };
    let owner = Owner::Resource {
        kind: OWNER_KIND.to_string(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    };
    let mut objects: Vec<DesiredObject> = objects
        .into_iter()
        .map(|o| owner.adopt(o.value, wave, Some(o.origin)))
        .collect();
    order::sort(&mut objects);
    Ok(RenderedChart {
        objects,
        release,
        values_checksum: values_checksum(&values),
        revision: files.revision.clone(),
    })
}

/// sha256 (hex) of values: serde_json maps are sorted, so the serialisation is canonical.
pub fn values_checksum(values: &Value) -> String {
    let bytes = serde_json::to_vec(values).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

fn files_of(
    snapshot: &Snapshot,
    sources: &ChartSources,
    chart: &Loaded<ArmadaChart>,
) -> Result<ChartFiles, RenderError> {
    let key = chart_key(chart);
    if let Some(files) = sources.get(&key) {
        return Ok(files.clone());
    }
    match chart.resource.spec.source.type_ {
        SourceType::Local => local_files(snapshot, &chart.resource.spec.source).map_err(|e| RenderError::At {
            origin: chart.origin_of("/source"),
            message: format!("ArmadaChart `{key}`: {e}"),
        }),
        other => Err(RenderError::At {
            origin: chart.origin_of("/source"),
            message: format!(
                "ArmadaChart `{key}`: its {} source was not fetched (chart sources are resolved by the source stage before rendering)",
                match other {
                    SourceType::Git => "git",
                    _ => "tar",
                }
            ),
        }),
    }
}

#[cfg(test)]
mod tests;
