//! The helm step of [`prepare`](super::prepare::prepare): every Helm chart of the deployment plan
//! rendered by the real `helm template` (through one shared [`HelmRenderer`], whose cache lives as
//! long as it does), so that `render::armada` stays pure and only adds Weft's own steps.
//!
//! Per chart: the chart's files with its Armada `dependencies` (each resolved the same way) as
//! subcharts, the ArmadaChart's `values` (without Weft's own `overlays`) as the values file,
//! release `{release_prefix}-{release}`, `--namespace` = the chart's namespace, and
//! `.Capabilities` from the target cluster when there is one (its version and served API
//! versions); offline, helm's defaults (Kubernetes v1.37.0 for the pinned helm 3.22).

use crate::api::keys::LITERAL_BRACES_ANNOTATION;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use serde_json::Value;

use super::PassError;
use crate::api::armada::ArmadaChart;
use crate::api::ResourceKey;
use crate::helm::{
    Capabilities, ChartFiles, ChartFormat, ChartTree, HelmError, HelmRenderer, RenderRequest,
};
use crate::load::armada::{Loaded, MAX_DEPENDENCY_DEPTH, MAX_DEPENDENCY_TREE};
use crate::load::budget::{Budget, Exceeded, Limits};
use crate::load::{LoadedRepo, Origin};
use crate::render::armada::{
    chart_key, files_of, format_of, release_name, HelmFailures, HelmRenders,
};
use crate::render::RenderError;
use crate::source::chart::ChartSources;

/// How long one `helm template` may take.
pub const HELM_TIMEOUT: Duration = Duration::from_secs(120);

/// One Helm chart to render, as plain data (moved into the blocking task).
struct HelmJob {
    key: ResourceKey,
    origin: Origin,
    tree: ChartTree,
    release: String,
    namespace: String,
    values: Value,
    allow_literal_braces: bool,
}

/// What the helm step produced: a render per Helm chart that helm rendered, and why each other
/// Helm chart failed (it fails alone: the pass deploys the groups before it and stops there).
#[derive(Debug, Default)]
pub struct HelmOutcome {
    pub renders: HelmRenders,
    pub failures: HelmFailures,
}

/// What the cluster's `.Capabilities` are: its version and every served group/version. `None`
/// (helm's defaults) when they cannot be read; the pass reads the cluster again later anyway.
pub async fn cluster_capabilities(client: &Client) -> Capabilities {
    let mut caps = Capabilities::default();
    match client.apiserver_version().await {
        Ok(info) => caps.kube_version = Some(info.git_version),
        Err(e) => tracing::warn!(
            "reading the cluster's version for helm: {}",
            crate::api::kube_error::Text(&e)
        ),
    }
    let mut versions = BTreeSet::new();
    if let Ok(core) = client.list_core_api_versions().await {
        versions.extend(core.versions);
    }
    match client.list_api_groups().await {
        Ok(groups) => {
            for g in groups.groups {
                versions.extend(g.versions.into_iter().map(|v| v.group_version));
            }
        }
        Err(e) => tracing::warn!(
            "reading the cluster's API versions for helm: {}",
            crate::api::kube_error::Text(&e)
        ),
    }
    caps.api_versions = versions.into_iter().collect();
    caps
}

/// How many `helm template` processes run at once: one per core (each is CPU-bound Go).
fn helm_parallelism(jobs: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, jobs.max(1))
}

/// Render every Helm chart of `repo`'s deployment plan, one helm process per core. A chart that
/// fails (each error naming `ArmadaChart ns/name` and, for helm's own, the template file and
/// line) is returned among the failures, not as an error of the pass: like a chart that does not
/// become ready, it stops its group (see `pass::engine`); helm's warnings travel with each render
/// and become diagnostics in `render::armada`.
pub async fn render_helm_charts(
    repo: &LoadedRepo,
    sources: &ChartSources,
    renderer: &Arc<HelmRenderer>,
    capabilities: Option<Capabilities>,
) -> Result<HelmOutcome, PassError> {
    let (jobs, failures) = helm_jobs(repo, sources);
    let mut outcome = HelmOutcome {
        renders: HelmRenders::new(),
        failures,
    };
    if jobs.is_empty() {
        return Ok(outcome);
    }
    let renderer = Arc::clone(renderer);
    let capabilities = capabilities.unwrap_or_default();
    let results = tokio::task::spawn_blocking(move || {
        let workers = helm_parallelism(jobs.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results = std::sync::Mutex::new(Vec::with_capacity(jobs.len()));
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let mut request =
                        RenderRequest::new(&job.tree, &job.release, &job.namespace, &job.values);
                    request.capabilities = capabilities.clone();
                    request.timeout = HELM_TIMEOUT;
                    request.allow_literal_braces = job.allow_literal_braces;
                    let result = renderer
                        .render(&request)
                        .map(|o| o.render)
                        .map_err(|e| helm_error(&job.key, job.origin.clone(), &e));
                    results
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((job.key.clone(), result));
                });
            }
        });
        results.into_inner().unwrap_or_else(|p| p.into_inner())
    })
    .await
    .map_err(|e| PassError::Render(RenderError::Other(format!("helm rendering panicked: {e}"))))?;
    for (key, result) in results {
        match result {
            Ok(render) => {
                outcome.renders.insert(key, render);
            }
            Err(e) => {
                outcome.failures.insert(key, e);
            }
        }
    }
    Ok(outcome)
}

/// A helm failure as a Weft error: the chart, then helm's words (template file:line for a
/// template error, how to get helm when it is missing).
fn helm_error(key: &ResourceKey, origin: Origin, e: &HelmError) -> RenderError {
    let hint = if matches!(e, HelmError::UnrenderedAction { .. }) {
        format!(
            "; if the chart means to output `{{{{` literally (e.g. Prometheus alert templates), annotate the ArmadaChart with `{LITERAL_BRACES_ANNOTATION}: allow`"
        )
    } else {
        String::new()
    };
    RenderError::At {
        origin,
        message: format!("ArmadaChart {key}: {e}{hint}"),
    }
}

/// The Helm charts of the plan as render jobs; charts in Weft's `${}` format are left to the
/// renderer. Charts whose files cannot be read are left too: the render reports them.
fn helm_jobs(repo: &LoadedRepo, sources: &ChartSources) -> (Vec<HelmJob>, HelmFailures) {
    let mut jobs = Vec::new();
    let mut errors = HelmFailures::new();
    let mut seen = BTreeSet::new();
    for planned in repo.armada.deployment_plan() {
        let chart = &repo.armada.charts[planned.chart];
        let key = chart_key(chart);
        if !seen.insert(key.clone()) {
            continue;
        }
        let Ok(files) = files_of(&repo.snapshot, sources, chart) else {
            continue;
        };
        match format_of(&files) {
            Ok(ChartFormat::Substitution) | Err(_) => continue,
            Ok(ChartFormat::Helm(_)) => {}
        }
        let mut walk = TreeWalk::default();
        let tree = match chart_tree(repo, sources, chart, files.files, &mut walk) {
            Ok(t) => t,
            Err(message) => {
                errors.insert(
                    key.clone(),
                    RenderError::At {
                        origin: chart.origin_of("/dependencies"),
                        message: format!("ArmadaChart {key}: {message}"),
                    },
                );
                continue;
            }
        };
        let spec = &chart.resource.spec;
        let mut values = spec.values.clone();
        // Weft's own key, applied after helm (see docs/armada.md).
        values.remove("overlays");
        let allow_literal_braces = chart
            .resource
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LITERAL_BRACES_ANNOTATION))
            .is_some_and(|v| v == "allow");
        jobs.push(HelmJob {
            allow_literal_braces,
            origin: chart.origin.clone(),
            release: release_name(spec, planned.release_prefix.as_deref()),
            namespace: spec.namespace.clone(),
            values: Value::Object(values),
            tree,
            key,
        });
    }
    (jobs, errors)
}

/// Why a chart's dependency tree could not be built.
#[derive(Debug, thiserror::Error)]
enum TreeError {
    #[error("dependency cycle through `{0}`")]
    Cycle(ResourceKey),
    #[error("dependency `{dep}` is not an ArmadaChart in namespace `{namespace}`")]
    NotAChart { dep: String, namespace: String },
    #[error("dependencies nested deeper than {MAX_DEPENDENCY_DEPTH} levels")]
    TooDeep,
    #[error("the dependency tree expands to more than {MAX_DEPENDENCY_TREE} charts")]
    TooManyCharts,
    #[error("the dependency tree's files {0} (see docs/security.md)")]
    TooLarge(#[source] Exceeded),
    #[error("dependency `{dep}`: {source}")]
    Files {
        dep: String,
        #[source]
        source: RenderError,
    },
}

/// What building one chart's tree has taken so far: the charts on the current path, the
/// charts built, the bytes of their files (a dependency reached by two paths is copied twice).
struct TreeWalk {
    visiting: BTreeSet<ResourceKey>,
    charts: usize,
    files: Budget,
}

impl Default for TreeWalk {
    /// Chart files are input, not produce: a tree may copy up to 64 MiB of them (a chart with
    /// large CRDs or dashboards, times the paths to it).
    fn default() -> Self {
        TreeWalk {
            visiting: BTreeSet::new(),
            charts: 0,
            files: Budget::new(Limits {
                max_bytes: 64 * 1024 * 1024,
                ..Limits::default()
            }),
        }
    }
}

/// A chart with its Armada `dependencies` (ArmadaCharts of the same namespace, by name), each
/// built the same way, as Armada's chart builder does. The loader bounds the tree's depth and
/// size; the walk checks both again, and the bytes copied, whatever it is given.
fn chart_tree(
    repo: &LoadedRepo,
    sources: &ChartSources,
    chart: &Loaded<ArmadaChart>,
    files: BTreeMap<String, Vec<u8>>,
    walk: &mut TreeWalk,
) -> Result<ChartTree, TreeError> {
    let key = chart_key(chart);
    if walk.visiting.len() >= MAX_DEPENDENCY_DEPTH {
        return Err(TreeError::TooDeep);
    }
    walk.charts += 1;
    if walk.charts > MAX_DEPENDENCY_TREE {
        return Err(TreeError::TooManyCharts);
    }
    walk.files
        .bytes(files.values().map(Vec::len).sum())
        .map_err(TreeError::TooLarge)?;
    if !walk.visiting.insert(key.clone()) {
        return Err(TreeError::Cycle(key));
    }
    let tree = ChartTree::new(ChartFiles { files });
    let deps = &chart.resource.spec.dependencies;
    if deps.is_empty() {
        walk.visiting.remove(&key);
        return Ok(tree);
    }
    let mut built = Vec::with_capacity(deps.len());
    for dep in deps {
        let dep_key = ResourceKey {
            namespace: key.namespace.clone(),
            name: dep.clone(),
        };
        let Some(dep_chart) = repo.armada.charts.iter().find(|c| chart_key(c) == dep_key) else {
            return Err(TreeError::NotAChart {
                dep: dep.clone(),
                namespace: key.namespace.clone(),
            });
        };
        let dep_files =
            files_of(&repo.snapshot, sources, dep_chart).map_err(|source| TreeError::Files {
                dep: dep.clone(),
                source,
            })?;
        built.push(chart_tree(repo, sources, dep_chart, dep_files.files, walk)?);
    }
    walk.visiting.remove(&key);
    Ok(tree.with_dependencies(built))
}
