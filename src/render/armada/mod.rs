//! Armada charts → desired objects. Pure: the chart files come in as a value
//! ([`ChartSources`], resolved by the source stage) and so does helm's output for Helm charts
//! ([`HelmRenders`], produced by `pass::prepare` with `helm`); local charts can also be
//! read straight from the snapshot.
//!
//! A chart is a Helm chart, rendered by the real `helm template` before this module sees it:
//! here its output gets Weft's own steps (namespace defaulting, `values.overlays`, ownership,
//! waves), its `crds/` objects stay in the set (stage 0 applies CRDs first), its hooks become
//! [`DesiredHook`]s (run by the pass only on install or upgrade), and its `test` hooks are dropped
//! with a warning.
//!
//! A chart that opts into Weft's `${}` format (`weft.io/template-format: substitution` in its
//! `Chart.yaml` annotations) is a directory with `Chart.yaml` (name, version), `values.yaml`
//! (defaults) and `templates/` of plain YAML. Rendering, with no template engine:
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

use crate::api::owner::OwnerKind;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use sha2::{Digest, Sha256};

use std::sync::Arc;

use super::{order, DesiredHook, DesiredObject, Owner, RenderError};
use crate::api::armada::{ArmadaChart, SourceType};
use crate::helm::{self, ChartFormat, HelmRender, HookPhase, ObjectClass};
use crate::load::armada::{ArmadaDocs, Loaded, ResourceKey};
use crate::load::{LoadedRepo, Origin};
use crate::source::chart::{local_files, ChartFiles, ChartSources};
use crate::source::Snapshot;
use chart::Renderer;

/// helm's output per Helm chart (by the ArmadaChart's namespace/name), from `pass::prepare`.
pub type HelmRenders = BTreeMap<ResourceKey, Arc<HelmRender>>;

/// Why helm could not render a Helm chart (by the ArmadaChart's namespace/name), from
/// `pass::prepare`: the chart fails alone.
pub type HelmFailures = BTreeMap<ResourceKey, RenderError>;

/// An Armada chart that could not be rendered. It is not an error of the whole render: as a
/// chart that does not become ready, it stops its group (the groups before it are deployed), and
/// the pass prunes nothing. Offline commands (`render`, `validate`, `diff`) report it as an error.
#[derive(Clone, Debug)]
pub struct ChartFailure {
    /// The ArmadaChart.
    pub owner: Owner,
    /// Its deployment wave: the waves before it are deployed.
    pub wave: u32,
    /// Why (naming the chart, and the template file and line for helm's errors).
    pub error: RenderError,
}

/// Every chart of the deployment plan rendered.
#[derive(Clone, Debug, Default)]
pub struct RenderedCharts {
    /// Their objects, in deployment order.
    pub objects: Vec<DesiredObject>,
    /// Their Helm hooks (run only on install or upgrade of their chart).
    pub hooks: Vec<DesiredHook>,
    /// What the user should know (a dropped test hook, helm's own warnings).
    pub warnings: Vec<(Origin, String)>,
    /// The charts that could not be rendered, in plan order.
    pub failures: Vec<ChartFailure>,
}
pub use values::{deep_merge, substitute, substitute_str, Builtins};

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

/// The objects of every chart of the deployment plan, in deployment order (Helm charts from
/// `helm`, which must hold every Helm chart of the plan that is not in `failed`). A chart that
/// cannot be rendered is a [`ChartFailure`]; the error is for what involves several charts.
pub fn render(
    repo: &LoadedRepo,
    sources: &ChartSources,
    helm: &HelmRenders,
    failed: &HelmFailures,
) -> Result<RenderedCharts, RenderError> {
    let mut out = Vec::new();
    let mut hooks = Vec::new();
    let mut warnings = Vec::new();
    let mut errors = Vec::new();
    let mut failures: Vec<ChartFailure> = Vec::new();
    let mut seen: BTreeMap<(String, String, String, String), ResourceKey> = BTreeMap::new();
    for planned in repo.armada.deployment_plan() {
        let key = chart_key(&repo.armada.charts[planned.chart]);
        let owner = Owner::resource(
            OwnerKind::ArmadaChart,
            key.namespace.clone(),
            key.name.clone(),
        );
        if failures.iter().any(|f| f.owner == owner) {
            continue;
        }
        let rendered = match failed.get(&key) {
            Some(e) => Err(vec![e.clone()]),
            None => render_chart(
                repo,
                sources,
                helm,
                planned.chart,
                planned.release_prefix.as_deref(),
                planned.wave,
            ),
        };
        match rendered {
            Ok(mut rendered) => {
                hooks.append(&mut rendered.hooks);
                warnings.append(&mut rendered.warnings);
                let chart = key;
                for o in rendered.objects {
                    let id = identity(&o);
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
            Err(e) => failures.push(ChartFailure {
                owner,
                wave: planned.wave,
                error: combine(e),
            }),
        }
    }
    if !errors.is_empty() {
        return Err(combine(errors));
    }
    order::sort(&mut out);
    Ok(RenderedCharts {
        objects: out,
        hooks,
        warnings,
        failures,
    })
}

/// The release namespaces of the deployment plan's charts that no object of `objects` (the whole
/// set: plain manifests and charts' objects) declares, as Armada's `helm install
/// --create-namespace` makes them: a Namespace owned by the first chart of the plan deployed
/// into it, created only when missing ([`CREATE_IF_MISSING`]: an existing namespace is never
/// adopted) and pruned (`weft.io/prune: enabled`) once no chart wants it, only if nothing else
/// lives there.
pub fn release_namespaces(docs: &ArmadaDocs, objects: &[DesiredObject]) -> Vec<DesiredObject> {
    use super::ownership::CREATE_IF_MISSING;
    use crate::api::keys::{CREATE_ANNOTATION, PRUNE_ANNOTATION};
    let declared: BTreeSet<&str> = objects
        .iter()
        .filter(|o| o.kind() == "Namespace" && o.api_version() == "v1")
        .map(|o| o.name())
        .collect();
    let mut wanted: BTreeMap<&str, (Owner, u32)> = BTreeMap::new();
    for planned in docs.deployment_plan() {
        let chart = &docs.charts[planned.chart];
        let ns = chart.resource.spec.namespace.as_str();
        if ns.is_empty() || declared.contains(ns) || wanted.contains_key(ns) {
            continue;
        }
        let key = chart_key(chart);
        // In the chart's wave: created when its release installs (the plan is in wave order).
        wanted.insert(
            ns,
            (
                Owner::resource(OwnerKind::ArmadaChart, key.namespace, key.name),
                planned.wave,
            ),
        );
    }
    wanted
        .into_iter()
        .map(|(ns, (owner, wave))| {
            let object = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": ns,
                    "annotations": {
                        CREATE_ANNOTATION: CREATE_IF_MISSING,
                        PRUNE_ANNOTATION: "enabled",
                    },
                },
            });
            owner.adopt(object, wave, None)
        })
        .collect()
}

/// The namespaces of the sync root's Armada resources (ArmadaChart, ArmadaChartGroup,
/// ArmadaManifest) that no object of `objects` declares: a repository of CRs in namespace
/// `armada` deploys on a fresh cluster. Like a release namespace, a Namespace created only when
/// missing (an existing one is never adopted), owned by the sync root in wave 0 (before any
/// chart), and pruned once no resource wants it, only if nothing else lives there.
pub fn resource_namespaces(objects: &[DesiredObject]) -> Vec<DesiredObject> {
    use super::ownership::CREATE_IF_MISSING;
    use crate::api::keys::{CREATE_ANNOTATION, PRUNE_ANNOTATION};
    let declared: BTreeSet<&str> = objects
        .iter()
        .filter(|o| o.kind() == "Namespace" && o.api_version() == "v1")
        .map(|o| o.name())
        .collect();
    let mut wanted: BTreeMap<&str, &Owner> = BTreeMap::new();
    for o in objects {
        let armada = o.api_version().starts_with("armada.airshipit.org/") && o.owner.is_root();
        // The cluster's own namespaces always exist.
        let system = |ns: &str| ns == "default" || ns.starts_with("kube-");
        match o.namespace() {
            Some(ns) if armada && !ns.is_empty() && !system(ns) && !declared.contains(ns) => {
                wanted.entry(ns).or_insert(&o.owner);
            }
            _ => {}
        }
    }
    wanted
        .into_iter()
        .map(|(ns, owner)| {
            let object = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": ns,
                    "annotations": {
                        CREATE_ANNOTATION: CREATE_IF_MISSING,
                        PRUNE_ANNOTATION: "enabled",
                    },
                },
            });
            owner.adopt(object, 0, None)
        })
        .collect()
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

fn identity(o: &DesiredObject) -> (String, String, String, String) {
    let group = o
        .api_version()
        .rsplit_once('/')
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    (
        group,
        o.kind().to_string(),
        o.namespace().unwrap_or("").to_string(),
        o.name().to_string(),
    )
}

/// The namespace/name of an ArmadaChart.
pub fn chart_key(c: &Loaded<ArmadaChart>) -> ResourceKey {
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
    /// Its Helm hooks (not test hooks), owned by the ArmadaChart.
    pub hooks: Vec<DesiredHook>,
    /// Dropped test hooks, hooks Weft does not run, helm's warnings.
    pub warnings: Vec<(Origin, String)>,
    /// The release name (`{prefix}-{release}`).
    pub release: String,
    /// sha256 of the merged values (for `status.appliedValuesChecksum`).
    pub values_checksum: String,
    /// The source revision (git commit or archive digest), when fetched.
    pub revision: Option<String>,
}

/// The release name of a chart: `{release_prefix}-{release}`, or the release without a prefix.
pub fn release_name(spec: &crate::api::armada::ArmadaChartSpec, prefix: Option<&str>) -> String {
    match prefix.filter(|p| !p.is_empty()) {
        Some(p) => format!("{p}-{}", spec.release),
        None => spec.release.clone(),
    }
}

/// The format of a chart's files: a Helm chart unless it opts into Weft's `${}` format.
pub fn format_of(files: &ChartFiles) -> Result<ChartFormat, helm::HelmError> {
    // `chart_format` reads only `Chart.yaml`, `*.tpl` names and templates.
    helm::chart_format(&helm::ChartFiles {
        files: files
            .files
            .iter()
            .filter(|(p, _)| {
                p.as_str() == "Chart.yaml" || p.ends_with(".tpl") || p.starts_with("templates/")
            })
            .map(|(p, c)| (p.clone(), c.clone()))
            .collect(),
    })
}

/// Render one chart of `repo.armada.charts`.
pub fn render_chart(
    repo: &LoadedRepo,
    sources: &ChartSources,
    helm: &HelmRenders,
    index: usize,
    release_prefix: Option<&str>,
    wave: u32,
) -> Result<RenderedChart, Vec<RenderError>> {
    let docs = &repo.armada;
    let chart = &docs.charts[index];
    let key = chart_key(chart);
    let spec = &chart.resource.spec;
    let release = release_name(spec, release_prefix);
    let files = files_of(&repo.snapshot, sources, chart).map_err(|e| vec![e])?;
    let owner = Owner::resource(
        OwnerKind::ArmadaChart,
        key.namespace.clone(),
        key.name.clone(),
    );
    if let Some(render) = helm.get(&key) {
        return from_helm(docs, chart, &files, render, &owner, release, wave);
    }
    match format_of(&files) {
        Ok(ChartFormat::Substitution) => {}
        Ok(ChartFormat::Helm(evidence)) => {
            return Err(vec![RenderError::At {
                origin: chart.origin.clone(),
                message: format!(
                    "ArmadaChart {key}: a Helm chart ({evidence}) that was not rendered with helm; it is rendered by `weft render`, `validate`, `sync` and the daemon, which run helm"
                ),
            }])
        }
        Err(e) => {
            return Err(vec![RenderError::At {
                origin: Origin {
                    file: files.display_path("Chart.yaml"),
                    pos: Default::default(),
                },
                message: format!("ArmadaChart {key}: {e}"),
            }])
        }
    }
    let mut errors = Vec::new();
    let mut ctx = Renderer {
        docs,
        snapshot: &repo.snapshot,
        sources,
        owner_chart: &key,
        release: &release,
        namespace: &spec.namespace,
        errors: &mut errors,
        budget: docs.budget.clone(),
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
    let mut objects: Vec<DesiredObject> = objects
        .into_iter()
        .map(|o| owner.adopt(o.value, wave, Some(o.origin)))
        .collect();
    order::sort(&mut objects);
    Ok(RenderedChart {
        objects,
        hooks: Vec::new(),
        warnings: Vec::new(),
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

/// A Helm chart's render: helm's objects with Weft's own steps (namespace defaulting, the
/// ArmadaChart's `values.overlays`, ownership, the chart's wave); hooks apart; test hooks and
/// hooks of phases Weft does not run dropped with a warning.
fn from_helm(
    docs: &ArmadaDocs,
    chart: &Loaded<ArmadaChart>,
    files: &ChartFiles,
    render: &HelmRender,
    owner: &Owner,
    release: String,
    wave: u32,
) -> Result<RenderedChart, Vec<RenderError>> {
    let key = chart_key(chart);
    let spec = &chart.resource.spec;
    let mut errors = Vec::new();
    let mut warnings: Vec<(Origin, String)> = render
        .warnings
        .iter()
        .map(|w| {
            (
                chart.origin.clone(),
                format!("ArmadaChart {key}: helm: {w}"),
            )
        })
        .collect();
    let mut plain = Vec::new();
    let mut hooks = Vec::new();
    for o in &render.objects {
        // helm names templates `<chart name>/templates/x.yaml`; errors name the chart directory.
        let template = o
            .source_template
            .split_once('/')
            .map_or(o.source_template.as_str(), |(_, rest)| rest);
        let origin = Origin {
            file: files.display_path(template),
            pos: Default::default(),
        };
        let mut value = o.value.clone();
        if let Err((pointer, message)) = chart::check_object(&mut value, &spec.namespace) {
            errors.push(RenderError::At {
                origin,
                message: format!("ArmadaChart {key}: {} {pointer}: {message}", o.describe()),
            });
            continue;
        }
        match &o.class {
            ObjectClass::Plain | ObjectClass::Crd => plain.push(chart::Rendered { value, origin }),
            ObjectClass::Hook(hook) if hook.is_test() => warnings.push((
                origin,
                format!(
                    "ArmadaChart {key}: test hook {} ({template}) is not applied: Weft runs no Helm tests",
                    o.describe()
                ),
            )),
            ObjectClass::Hook(hook) => {
                let run: Vec<HookPhase> = hook
                    .phases
                    .iter()
                    .copied()
                    .filter(|p| crate::render::RUN_HOOK_PHASES.contains(p))
                    .collect();
                if run.is_empty() {
                    let phases: Vec<&str> = hook.phases.iter().map(|p| p.as_str()).collect();
                    warnings.push((
                        origin,
                        format!(
                            "ArmadaChart {key}: {} hook {} ({template}) is not run: Weft runs only pre-/post-install and pre-/post-upgrade hooks",
                            phases.join(","),
                            o.describe()
                        ),
                    ));
                    continue;
                }
                let mut hook = hook.clone();
                hook.phases = run;
                hooks.push((value, origin, hook));
            }
        }
    }
    let mut renderer = Renderer {
        docs,
        snapshot: &Snapshot::default(),
        sources: &ChartSources::default(),
        owner_chart: &key,
        release: &release,
        namespace: &spec.namespace,
        errors: &mut errors,
        budget: docs.budget.clone(),
    };
    renderer.chart_overlays(chart, &mut plain);
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut objects: Vec<DesiredObject> = plain
        .into_iter()
        .map(|o| owner.adopt(o.value, wave, Some(o.origin)))
        .collect();
    order::sort(&mut objects);
    let hooks = hooks
        .into_iter()
        .map(|(value, origin, hook)| DesiredHook {
            object: owner.adopt(value, wave, Some(origin)),
            hook,
        })
        .collect();
    Ok(RenderedChart {
        objects,
        hooks,
        warnings,
        release,
        values_checksum: values_checksum(&Value::Object(spec.values.clone())),
        revision: files.revision.clone(),
    })
}

/// The files of a chart: fetched by the source stage, or (local charts) read from the snapshot.
pub fn files_of(
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
                    SourceType::Helm => "helm",
                    SourceType::Oci => "oci",
                    _ => "tar",
                }
            ),
        }),
    }
}

#[cfg(test)]
mod tests;
