//! One chart directory rendered: `Chart.yaml`, `values.yaml` merged with the ArmadaChart's
//! values, each template substituted, dependencies rendered inside their parent's release,
//! `values.overlays` applied, and every object checked (identity, namespace).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::values::{deep_merge, substitute, Builtins};
use super::{chart_key, files_of};
use crate::api::armada::{overlays_of, ArmadaChart, LabelSelector, Overlay, OverlayTarget};
use crate::api::ResourceKey;
use crate::load::armada::{ArmadaDocs, Loaded, MAX_DEPENDENCY_DEPTH};
use crate::load::budget::{Budget, Exceeded};
use crate::load::yaml::{self, Positions, YamlLimits};
use crate::load::Origin;
use crate::render::patch::{self, PatchFailure};
use crate::render::RenderError;
use crate::source::chart::{ChartFiles, ChartSources};
use crate::source::Snapshot;

/// A rendered object before ownership: the value and the template document it came from.
pub(super) struct Rendered {
    pub(super) value: Value,
    pub(super) origin: Origin,
}

pub(super) struct Renderer<'a> {
    pub(super) docs: &'a ArmadaDocs,
    pub(super) snapshot: &'a Snapshot,
    pub(super) sources: &'a ChartSources,
    pub(super) owner_chart: &'a ResourceKey,
    pub(super) release: &'a str,
    pub(super) namespace: &'a str,
    pub(super) errors: &'a mut Vec<RenderError>,
    /// What this chart's render (its dependencies and overlays included) may produce.
    pub(super) budget: Budget,
}

/// Where a chart's overlays were written (the ArmadaChart, or the chart's values.yaml).
enum OverlaySource<'a> {
    Chart(&'a Loaded<ArmadaChart>),
    ValuesFile { file: String, positions: Positions },
}

impl OverlaySource<'_> {
    fn origin(&self, i: usize) -> Origin {
        match self {
            OverlaySource::Chart(c) => c.origin_of(&format!("/values/overlays/{i}")),
            OverlaySource::ValuesFile { file, positions } => Origin {
                file: file.clone(),
                pos: positions.find(&format!("/overlays/{i}")),
            },
        }
    }
}

impl Renderer<'_> {
    fn error(&mut self, origin: Origin, message: String) {
        self.errors.push(RenderError::At {
            origin,
            message: format!("ArmadaChart `{}`: {message}", self.owner_chart),
        });
    }

    /// Render `chart` (or, with `parent_values`, a dependency of the chart being rendered).
    /// Returns its objects (dependencies included) and its merged values.
    pub(super) fn chart(
        &mut self,
        chart: &Loaded<ArmadaChart>,
        files: &ChartFiles,
        parent_values: Option<&Value>,
        visiting: &mut BTreeSet<ResourceKey>,
    ) -> Option<(Vec<Rendered>, Value)> {
        let key = chart_key(chart);
        if !visiting.insert(key.clone()) {
            // The loader rejects cycles; this only guards against a repository it did not check.
            self.error(
                chart.origin_of("/dependencies"),
                format!("dependency cycle through `{key}`"),
            );
            return None;
        }
        // The loader bounds depth and tree size too; this keeps the recursion bounded whatever
        // it is given.
        if visiting.len() > MAX_DEPENDENCY_DEPTH {
            self.error(
                chart.origin_of("/dependencies"),
                format!("dependencies nested deeper than {MAX_DEPENDENCY_DEPTH} levels"),
            );
            visiting.remove(&key);
            return None;
        }
        let rendered = self.chart_body(chart, files, parent_values, visiting, &key);
        visiting.remove(&key);
        rendered
    }

    fn chart_body(
        &mut self,
        chart: &Loaded<ArmadaChart>,
        files: &ChartFiles,
        parent_values: Option<&Value>,
        visiting: &mut BTreeSet<ResourceKey>,
        key: &ResourceKey,
    ) -> Option<(Vec<Rendered>, Value)> {
        let meta = self.chart_yaml(files)?;
        let (defaults, values_positions) = self.values_yaml(files)?;
        let chart_name = chart
            .resource
            .spec
            .chart_name
            .clone()
            .unwrap_or_else(|| meta.name.clone());
        let mut values = defaults;
        deep_merge(
            &mut values,
            &Value::Object(chart.resource.spec.values.clone()),
        );
        if let Some(from_parent) = parent_values.and_then(|p| p.get(&chart_name)) {
            deep_merge(&mut values, from_parent);
        }
        let builtins = Builtins {
            release_name: self.release.to_string(),
            release_namespace: self.namespace.to_string(),
            chart_name: meta.name.clone(),
            chart_version: meta.version.clone(),
        };
        let mut objects = Vec::new();
        for (path, bytes) in files.files.range("templates/".to_string()..) {
            if !path.starts_with("templates/") {
                break;
            }
            if !(path.ends_with(".yaml") || path.ends_with(".yml")) {
                continue;
            }
            self.template(files, path, bytes, &values, &builtins, &mut objects);
        }
        for dep in &chart.resource.spec.dependencies {
            let dep_key = ResourceKey {
                namespace: key.namespace.clone(),
                name: dep.clone(),
            };
            let Some(dep_chart) = self.docs.charts.iter().find(|c| chart_key(c) == dep_key) else {
                self.error(
                    chart.origin_of("/dependencies"),
                    format!(
                        "dependency `{dep}` is not an ArmadaChart in namespace `{}`",
                        key.namespace
                    ),
                );
                continue;
            };
            let dep_files = match files_of(self.snapshot, self.sources, dep_chart) {
                Ok(f) => f,
                Err(e) => {
                    self.errors.push(e);
                    continue;
                }
            };
            if let Some((mut dep_objects, _)) =
                self.chart(dep_chart, &dep_files, Some(&values), visiting)
            {
                objects.append(&mut dep_objects);
            }
        }
        let overlay_source = if chart.resource.spec.values.contains_key("overlays") {
            OverlaySource::Chart(chart)
        } else {
            OverlaySource::ValuesFile {
                file: files.display_path("values.yaml"),
                positions: values_positions,
            }
        };
        self.overlays(&values, &overlay_source, &mut objects);
        Some((objects, values))
    }

    fn chart_yaml(&mut self, files: &ChartFiles) -> Option<ChartMeta> {
        let file = files.display_path("Chart.yaml");
        let origin = |pos| Origin {
            file: file.clone(),
            pos,
        };
        let Some(bytes) = files.files.get("Chart.yaml") else {
            self.error(
                origin(Default::default()),
                "the chart has no Chart.yaml".to_string(),
            );
            return None;
        };
        let doc = match parse_one(bytes, &mut self.budget) {
            Ok(d) => d,
            Err((pos, message)) => {
                self.error(origin(pos), message);
                return None;
            }
        };
        let Some(name) = doc
            .0
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            self.error(
                origin(doc.1.find("/name")),
                "Chart.yaml needs a `name`".to_string(),
            );
            return None;
        };
        let version = match doc.0.get("version") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => String::new(),
        };
        Some(ChartMeta {
            name: name.to_string(),
            version,
        })
    }

    fn values_yaml(&mut self, files: &ChartFiles) -> Option<(Value, Positions)> {
        let Some(bytes) = files.files.get("values.yaml") else {
            return Some((Value::Object(Map::new()), Positions::default()));
        };
        let file = files.display_path("values.yaml");
        match parse_one(bytes, &mut self.budget) {
            Ok((Value::Null, p)) => Some((Value::Object(Map::new()), p)),
            Ok((v @ Value::Object(_), p)) => Some((v, p)),
            Ok((_, p)) => {
                self.error(
                    Origin {
                        file,
                        pos: p.find(""),
                    },
                    "values.yaml must be a mapping".to_string(),
                );
                None
            }
            Err((pos, message)) => {
                self.error(Origin { file, pos }, message);
                None
            }
        }
    }

    fn template(
        &mut self,
        files: &ChartFiles,
        path: &str,
        bytes: &[u8],
        values: &Value,
        builtins: &Builtins,
        out: &mut Vec<Rendered>,
    ) {
        let file = files.display_path(path);
        let Ok(text) = std::str::from_utf8(bytes) else {
            self.error(
                Origin {
                    file,
                    pos: Default::default(),
                },
                "template is not valid UTF-8".to_string(),
            );
            return;
        };
        // Aliases in a chart's templates spend the render's one budget (shared with the load).
        let docs = match yaml::parse_documents_in(text, YamlLimits::default(), &mut self.budget) {
            Ok(d) => d,
            Err(e) => {
                self.error(Origin { file, pos: e.pos }, e.message);
                return;
            }
        };
        for doc in docs {
            if doc.value.is_null() {
                continue;
            }
            let origin_at = |pointer: &str| Origin {
                file: file.clone(),
                pos: doc.positions.find(pointer),
            };
            let mut value = doc.value;
            let mut problems = Vec::new();
            let _ = substitute(
                &mut value,
                String::new(),
                values,
                builtins,
                &mut self.budget,
                &mut problems,
            );
            if !problems.is_empty() {
                for (pointer, message) in problems {
                    self.error(origin_at(&pointer), message);
                }
                continue;
            }
            let origin = origin_at("");
            // Every rendered object counts: a dependency diamond renders its charts once per
            // path, and the budget is what stops 2^depth renders.
            if let Err(e) = self.budget.copy(&value, 0) {
                self.error(
                    origin,
                    format!("rendering this object {e} (see docs/security.md)"),
                );
                return;
            }
            match check_object(&mut value, self.namespace) {
                Ok(()) => out.push(Rendered { value, origin }),
                Err((pointer, message)) => self.error(origin_at(&pointer), message),
            }
        }
    }

    /// The ArmadaChart's own `values.overlays` on a Helm chart's objects.
    pub(super) fn chart_overlays(&mut self, chart: &Loaded<ArmadaChart>, objects: &mut [Rendered]) {
        let values = Value::Object(chart.resource.spec.values.clone());
        self.overlays(&values, &OverlaySource::Chart(chart), objects);
    }

    fn overlays(&mut self, values: &Value, source: &OverlaySource<'_>, objects: &mut [Rendered]) {
        let Some(map) = values.as_object() else {
            return;
        };
        let overlays = match overlays_of(map) {
            Ok(o) => o,
            Err((i, message)) => {
                self.error(source.origin(i), message);
                return;
            }
        };
        for (i, overlay) in overlays.iter().enumerate() {
            let mut matched = 0;
            for o in objects.iter_mut() {
                if !target_matches(&overlay.target, &o.value) {
                    continue;
                }
                matched += 1;
                if let Err(message) = apply_overlay(overlay, &mut o.value, &mut self.budget) {
                    let name = o
                        .value
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    let kind = o
                        .value
                        .get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    self.error(
                        source.origin(i),
                        format!("`values.overlays[{i}]` on {kind} `{name}`: {message}"),
                    );
                }
            }
            if matched == 0 {
                self.error(
                    source.origin(i),
                    format!(
                        "`values.overlays[{i}]` matches no rendered object (target {})",
                        describe_target(&overlay.target)
                    ),
                );
            }
        }
    }
}

struct ChartMeta {
    name: String,
    version: String,
}

fn parse_one(
    bytes: &[u8],
    budget: &mut Budget,
) -> Result<(Value, Positions), (crate::load::yaml::Pos, String)> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| (Default::default(), "file is not valid UTF-8".to_string()))?;
    let mut docs = yaml::parse_documents_in(text, YamlLimits::default(), budget)
        .map_err(|e| (e.pos, e.message))?;
    docs.retain(|d| !d.value.is_null());
    match docs.len() {
        0 => Ok((Value::Null, Positions::default())),
        1 => {
            let d = docs.remove(0);
            Ok((d.value, d.positions))
        }
        _ => Err((docs[1].start, "expected one YAML document".to_string())),
    }
}

/// Kinds that are cluster-scoped, so they get no namespace by default.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "PriorityLevelConfiguration",
    "FlowSchema",
    "CertificateSigningRequest",
];

/// Every object needs apiVersion, kind and metadata.name; namespaced kinds without a namespace
/// get the chart's.
pub(super) fn check_object(value: &mut Value, namespace: &str) -> Result<(), (String, String)> {
    let Value::Object(map) = value else {
        return Err((
            String::new(),
            "a template document must be a mapping (a Kubernetes object)".to_string(),
        ));
    };
    for (pointer, field) in [("/apiVersion", "apiVersion"), ("/kind", "kind")] {
        match map.get(&pointer[1..]) {
            Some(Value::String(s)) if !s.is_empty() => {}
            _ => {
                return Err((
                    pointer.to_string(),
                    format!("rendered object has no `{field}`"),
                ))
            }
        }
    }
    match map.get("metadata").and_then(|m| m.get("name")) {
        Some(Value::String(s)) if !s.is_empty() => {}
        _ => {
            return Err((
                "/metadata".to_string(),
                "rendered object has no `metadata.name`".to_string(),
            ))
        }
    }
    let kind = map
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !CLUSTER_SCOPED.contains(&kind.as_str()) {
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            let has = meta
                .get("namespace")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if !has {
                meta.insert("namespace".into(), Value::String(namespace.to_string()));
            }
        }
    }
    Ok(())
}

pub(super) fn target_matches(t: &OverlayTarget, o: &Value) -> bool {
    let s = |p: &str| o.pointer(p).and_then(Value::as_str);
    let eq =
        |want: &Option<String>, got: Option<&str>| want.as_deref().is_none_or(|w| Some(w) == got);
    if !(eq(&t.api_version, s("/apiVersion"))
        && eq(&t.kind, s("/kind"))
        && eq(&t.name, s("/metadata/name"))
        && eq(&t.namespace, s("/metadata/namespace")))
    {
        return false;
    }
    match &t.label_selector {
        None => true,
        Some(sel) => {
            let empty = Map::new();
            let labels = o
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            LabelSelector::parse(sel).is_ok_and(|s| s.matches(labels))
        }
    }
}

fn describe_target(t: &OverlayTarget) -> String {
    let mut parts = Vec::new();
    for (k, v) in [
        ("apiVersion", &t.api_version),
        ("kind", &t.kind),
        ("name", &t.name),
        ("namespace", &t.namespace),
        ("labelSelector", &t.label_selector),
    ] {
        if let Some(v) = v {
            parts.push(format!("{k}={v}"));
        }
    }
    parts.join(" ")
}

/// Why an overlay could not be applied to an object.
#[derive(Debug, thiserror::Error)]
enum OverlayError {
    #[error(transparent)]
    Patch(#[from] PatchFailure),
    #[error("the merge patch would exceed the render budget: it {0} (see docs/security.md)")]
    MergeBudget(#[source] Exceeded),
}

/// Apply an overlay, charging `budget` for what it adds (see [`crate::render::patch`]).
fn apply_overlay(
    overlay: &Overlay,
    object: &mut Value,
    budget: &mut Budget,
) -> Result<(), OverlayError> {
    if let Some(p) = &overlay.merge_patch {
        patch::merge_within(object, p, budget).map_err(OverlayError::MergeBudget)?;
    }
    if let Some(p) = &overlay.json_patch {
        patch::apply_within(object, p, budget)?;
    }
    Ok(())
}
