//! Armada charts rendered by the real `helm template` (Helm v3), as Armada and Argo CD do.
//!
//! The data path of one render, each step in its own file:
//!
//! - [`format`]: whether a chart is a Helm chart or opts into Weft's `${}` format
//!   ([`chart_format`], marker [`TEMPLATE_FORMAT_ANNOTATION`](crate::api::keys::TEMPLATE_FORMAT_ANNOTATION));
//! - [`assemble`]: the chart directory as Armada's chart builder makes it (dependencies copied under
//!   `charts/<name in their Chart.yaml>`);
//! - [`binary`]: finding helm (`$WEFT_HELM`, else `helm` on `PATH`) and running it with a timeout;
//! - [`failure`]: helm's error text → template file, line and column;
//! - [`output`]: helm's multi-document output → objects classified as plain, CRD or hook, each
//!   read as Kubernetes reads it ([`yaml11`]: YAML 1.1 scalars as `sigs.k8s.io/yaml` resolves them);
//! - [`cache`]: renders keyed by everything that can change helm's output;
//! - [`renderer`]: [`HelmRenderer`], which ties them together.
//!
//! Everything that starts a process blocks: async callers use `tokio::task::spawn_blocking`.
//! Values may hold secrets: they are written to a private temporary file for helm and never logged
//! (`RenderRequest`'s `Debug` leaves them out).

pub mod assemble;
pub mod binary;
pub mod cache;
pub mod failure;
pub mod format;
pub mod output;
pub mod renderer;
pub mod yaml11;

use crate::api::keys::TEMPLATE_FORMAT_ANNOTATION;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use binary::{locate_helm, HelmLocation, ProcessLimits};
pub use cache::RenderKey;
pub use failure::{parse_helm_failure, HelmFailure, TemplateLocation};
pub use format::{chart_format, ChartFormat, HelmEvidence};
pub use output::{
    parse_manifests, HelmRender, Hook, HookDeletePolicy, HookPhase, ObjectClass, RenderedObject,
};
pub use renderer::{Capabilities, HelmRenderer, RenderOutcome, RenderRequest};

/// The files of one chart directory, as the chart source produced them (source and `subpath`
/// already resolved): path relative to the chart directory (`Chart.yaml`, `templates/x.yaml`),
/// `/`-separated → content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChartFiles {
    pub files: BTreeMap<String, Vec<u8>>,
}

impl ChartFiles {
    /// Files from `(path, content)` pairs.
    pub fn from_pairs<P: Into<String>, C: Into<Vec<u8>>>(
        pairs: impl IntoIterator<Item = (P, C)>,
    ) -> Self {
        ChartFiles {
            files: pairs
                .into_iter()
                .map(|(p, c)| (p.into(), c.into()))
                .collect(),
        }
    }
}

/// A chart with its Armada `dependencies`, each resolved to its own tree (Armada builds
/// dependencies recursively).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartTree {
    /// The chart's own files.
    pub chart: Arc<ChartFiles>,
    /// Armada's `dependencies`, resolved. `None` when the field is absent: the chart's own
    /// `charts/` directory is used as it is. `Some` (even empty) replaces the chart's `charts/`
    /// directory by exactly these charts, as Armada's chart builder does.
    pub dependencies: Option<Vec<ChartTree>>,
}

impl ChartTree {
    /// A chart without Armada `dependencies`.
    pub fn new(chart: impl Into<Arc<ChartFiles>>) -> Self {
        ChartTree {
            chart: chart.into(),
            dependencies: None,
        }
    }

    /// The chart with Armada `dependencies` (replacing its `charts/` directory).
    pub fn with_dependencies(mut self, dependencies: Vec<ChartTree>) -> Self {
        self.dependencies = Some(dependencies);
        self
    }
}

/// Where to get helm, appended to every "helm not found" error.
pub const HOW_TO_GET_HELM: &str = "for development run `tests/helm/ensure` (it builds the pinned \
helm and prints its path) and set WEFT_HELM to that path; in a container use the image built from \
deploy/Containerfile, which ships helm; otherwise install Helm v3 and set WEFT_HELM to its path";

/// Why a chart could not be rendered with helm. Callers add which chart it was.
#[derive(Debug, thiserror::Error)]
pub enum HelmError {
    #[error(
        "helm not found: WEFT_HELM is not set and there is no `helm` on PATH; {HOW_TO_GET_HELM}"
    )]
    NotFound,

    #[error("WEFT_HELM is {path}, which {reason}; {HOW_TO_GET_HELM}")]
    BadWeftHelm { path: PathBuf, reason: String },

    #[error("helm at {path} {reason}; {HOW_TO_GET_HELM}")]
    BadBinary { path: PathBuf, reason: String },

    #[error("could not start helm ({path}): {source}")]
    Launch {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("`{path} version --short` failed: {message}")]
    Version { path: PathBuf, message: String },

    #[error("helm template failed: {0}")]
    Template(HelmFailure),

    #[error("helm did not finish within {}s and was stopped", .after.as_secs_f64())]
    Timeout { after: Duration },

    #[error("{variable} is `{value}`: expected {expected}")]
    BadLimit {
        variable: String,
        value: String,
        expected: String,
    },

    #[error("helm was stopped at its limit of {limit}: a template does unbounded work (raise the limit if the chart really needs more)")]
    ResourceLimit { limit: String },

    #[error("helm wrote more than {limit} bytes of output")]
    OutputTooLarge { limit: usize },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    #[error("chart file path `{path}`: {reason}")]
    BadPath { path: String, reason: String },

    #[error("dependency chart {index} (of {parent}): {reason}")]
    Dependency {
        /// 1-based position in the Armada `dependencies` list.
        index: usize,
        /// `the chart`, or `dependency <name>` for a dependency's own dependencies.
        parent: String,
        reason: String,
    },

    #[error(
        "two dependencies are both named `{name}` in their Chart.yaml (each goes to charts/{name})"
    )]
    DuplicateDependency { name: String },

    #[error("release name `{name}`: {reason}")]
    BadRelease { name: String, reason: String },

    #[error("namespace `{name}`: {reason}")]
    BadNamespace { name: String, reason: String },

    #[error("capabilities: `{value}` {reason}")]
    BadCapability { value: String, reason: String },

    #[error("values must be a mapping (or null), not {found}")]
    BadValues { found: &'static str },

    #[error("Chart.yaml: annotation {TEMPLATE_FORMAT_ANNOTATION} is `{value}`; use `substitution` (Weft's `${{}}` format) or `helm`")]
    UnknownTemplateFormat { value: String },

    #[error("Chart.yaml opts into Weft's `${{}}` format ({TEMPLATE_FORMAT_ANNOTATION}: substitution), but {file} is Helm template syntax ({evidence}); remove the annotation to render the chart with helm, or remove the Helm syntax")]
    FormatConflict { file: String, evidence: String },

    #[error("{template}: helm's output is not valid YAML: {message}")]
    OutputYaml { template: String, message: String },

    #[error("{template}: rendered a document that is not a Kubernetes object: {reason}")]
    NotAnObject { template: String, reason: String },

    #[error("{template}: the rendered object {object} still contains `{{{{` at {pointer}; an unrendered template action must never reach the cluster")]
    UnrenderedAction {
        template: String,
        object: String,
        pointer: String,
    },
}
