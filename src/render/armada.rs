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

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{order, DesiredObject, Owner, RenderError};
use crate::api::armada::{
    overlays_of, ArmadaChart, LabelSelector, Overlay, OverlayTarget, SourceType,
};
use crate::load::armada::{ArmadaDocs, Loaded, ResourceKey};
use crate::load::yaml::{self, Positions, YamlLimits};
use crate::load::{LoadedRepo, Origin};
use crate::source::chart::{local_files, ChartFiles, ChartSources};
use crate::source::Snapshot;

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

/// A rendered object before ownership: the value and the template document it came from.
struct Rendered {
    value: Value,
    origin: Origin,
}

struct Renderer<'a> {
    docs: &'a ArmadaDocs,
    snapshot: &'a Snapshot,
    sources: &'a ChartSources,
    owner_chart: &'a ResourceKey,
    release: &'a str,
    namespace: &'a str,
    errors: &'a mut Vec<RenderError>,
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
    fn chart(
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
        visiting.remove(&key);
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
        let doc = match parse_one(bytes) {
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
        match parse_one(bytes) {
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
        let docs = match yaml::parse_documents(text, YamlLimits::default()) {
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
            substitute(&mut value, String::new(), values, builtins, &mut problems);
            if !problems.is_empty() {
                for (pointer, message) in problems {
                    self.error(origin_at(&pointer), message);
                }
                continue;
            }
            let origin = origin_at("");
            match check_object(&mut value, self.namespace) {
                Ok(()) => out.push(Rendered { value, origin }),
                Err((pointer, message)) => self.error(origin_at(&pointer), message),
            }
        }
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
                if let Err(message) = apply_overlay(overlay, &mut o.value) {
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

fn parse_one(bytes: &[u8]) -> Result<(Value, Positions), (crate::load::yaml::Pos, String)> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| (Default::default(), "file is not valid UTF-8".to_string()))?;
    let mut docs =
        yaml::parse_documents(text, YamlLimits::default()).map_err(|e| (e.pos, e.message))?;
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

/// Deep merge: maps merge key by key, everything else (scalars, lists, null) replaces.
pub fn deep_merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        deep_merge(existing, v)
                    }
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Values every chart can use besides its own.
#[derive(Clone, Debug, Default)]
pub struct Builtins {
    pub release_name: String,
    pub release_namespace: String,
    pub chart_name: String,
    pub chart_version: String,
}

impl Builtins {
    fn lookup(&self, path: &str) -> Option<Value> {
        let s = |v: &str| Some(Value::String(v.to_string()));
        match path {
            "release.name" => s(&self.release_name),
            "release.namespace" => s(&self.release_namespace),
            "chart.name" => s(&self.chart_name),
            "chart.version" => s(&self.chart_version),
            _ => None,
        }
    }
}

fn lookup(values: &Value, builtins: &Builtins, path: &str) -> Option<Value> {
    if let Some(v) = builtins.lookup(path) {
        return Some(v);
    }
    let mut node = values;
    for part in path.split('.') {
        node = match node {
            Value::Object(m) => m.get(part)?,
            Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(node.clone())
}

fn valid_path(path: &str) -> bool {
    !path.is_empty()
        && path.split('.').all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

/// Replace placeholders in every string of `value` (not in mapping keys). Problems are
/// collected as (pointer, message).
pub fn substitute(
    value: &mut Value,
    pointer: String,
    values: &Value,
    builtins: &Builtins,
    problems: &mut Vec<(String, String)>,
) {
    match value {
        Value::String(s) if s.contains('$') => match substitute_str(s, values, builtins) {
            Ok(v) => *value = v,
            Err(message) => problems.push((pointer, message)),
        },
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute(item, format!("{pointer}/{i}"), values, builtins, problems);
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let child = format!("{pointer}/{}", k.replace('~', "~0").replace('/', "~1"));
                substitute(v, child, values, builtins, problems);
            }
        }
        _ => {}
    }
}

/// Substitute one string. A string that is exactly one placeholder becomes the value itself
/// (number, boolean, list, mapping…); otherwise values are written into the text.
pub fn substitute_str(s: &str, values: &Value, builtins: &Builtins) -> Result<Value, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
            continue;
        }
        let Some(body) = tail.strip_prefix("${") else {
            out.push('$');
            rest = &tail[1..];
            continue;
        };
        let Some(close) = body.find('}') else {
            return Err(format!("unterminated placeholder `{tail}`: a `${{` needs a `}}` (write `$${{` for a literal `${{`)"));
        };
        let inner = &body[..close];
        let (path, default) = match inner.split_once(":=") {
            Some((p, d)) => (p.trim(), Some(d)),
            None => (inner.trim(), None),
        };
        if !valid_path(path) {
            return Err(format!("`${{{inner}}}` is not a placeholder: write `${{path.to.value}}` or `${{path.to.value:=default}}` (or `$${{` for a literal `${{`)"));
        }
        let whole = out.is_empty() && at == 0 && close + 1 == body.len();
        let found = lookup(values, builtins, path);
        let value = match (found, default) {
            (Some(v), _) => v,
            (None, Some(d)) if whole => parse_default(d),
            (None, Some(d)) => Value::String(d.to_string()),
            (None, None) => {
                return Err(format!(
                    "unresolved placeholder `${{{inner}}}`: no value at `{path}` and no default"
                ))
            }
        };
        if whole {
            return Ok(value);
        }
        match value {
            Value::String(v) => out.push_str(&v),
            Value::Null => {}
            Value::Bool(b) => out.push_str(&b.to_string()),
            Value::Number(n) => out.push_str(&n.to_string()),
            Value::Array(_) | Value::Object(_) => {
                return Err(format!(
                    "placeholder `${{{inner}}}` is a {} and cannot be written inside a string; make it the whole value",
                    if value.is_array() { "list" } else { "mapping" }
                ))
            }
        }
        rest = &body[close + 1..];
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

/// A whole-scalar default is read as a YAML scalar (`2` → 2, `true` → true, `x` → "x").
fn parse_default(d: &str) -> Value {
    if d.trim().is_empty() {
        return Value::String(String::new());
    }
    match yaml::parse_documents(d, YamlLimits::default()) {
        Ok(docs) if docs.len() == 1 => match &docs[0].value {
            v @ (Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Null) => v.clone(),
            _ => Value::String(d.to_string()),
        },
        _ => Value::String(d.to_string()),
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
fn check_object(value: &mut Value, namespace: &str) -> Result<(), (String, String)> {
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

fn target_matches(t: &OverlayTarget, o: &Value) -> bool {
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

fn apply_overlay(overlay: &Overlay, object: &mut Value) -> Result<(), String> {
    if let Some(p) = &overlay.merge_patch {
        json_patch::merge(object, p);
    }
    if let Some(p) = &overlay.json_patch {
        json_patch::patch(object, p).map_err(|e| format!("JSON patch failed: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b() -> Builtins {
        Builtins {
            release_name: "demo-web".into(),
            release_namespace: "apps".into(),
            chart_name: "web".into(),
            chart_version: "1.2.0".into(),
        }
    }

    #[test]
    fn whole_placeholders_keep_their_type() {
        let values =
            json!({"replicas": 3, "debug": true, "ports": [80, 443], "image": {"tag": "1.0"}});
        let sub = |s: &str| substitute_str(s, &values, &b());
        assert_eq!(sub("${replicas}").unwrap(), json!(3));
        assert_eq!(sub("${debug}").unwrap(), json!(true));
        assert_eq!(sub("${ports}").unwrap(), json!([80, 443]));
        assert_eq!(sub("${ports.1}").unwrap(), json!(443));
        assert_eq!(sub("${missing:=5}").unwrap(), json!(5));
        assert_eq!(sub("${missing:=false}").unwrap(), json!(false));
        assert_eq!(sub("${missing:=}").unwrap(), json!(""));
        assert_eq!(sub("${missing:=text here}").unwrap(), json!("text here"));
        assert_eq!(sub("${release.name}").unwrap(), json!("demo-web"));
    }

    #[test]
    fn embedded_placeholders_become_text() {
        let values = json!({"image": {"repo": "nginx", "tag": 1.27}, "n": null});
        let sub = |s: &str| substitute_str(s, &values, &b());
        assert_eq!(
            sub("${image.repo}:${image.tag}").unwrap(),
            json!("nginx:1.27")
        );
        assert_eq!(sub("x-${missing:=5}").unwrap(), json!("x-5"));
        assert_eq!(sub("a${n}b").unwrap(), json!("ab"));
        assert_eq!(
            sub("echo $${HOME} costs $5").unwrap(),
            json!("echo ${HOME} costs $5")
        );
        assert_eq!(
            sub("${chart.name}-${chart.version}").unwrap(),
            json!("web-1.2.0")
        );
        assert!(sub("x ${image}")
            .unwrap_err()
            .contains("is a mapping and cannot be written inside a string"));
    }

    #[test]
    fn unresolved_and_malformed_placeholders_are_errors() {
        let values = json!({});
        let sub = |s: &str| substitute_str(s, &values, &b());
        assert_eq!(
            sub("${image.tag}").unwrap_err(),
            "unresolved placeholder `${image.tag}`: no value at `image.tag` and no default"
        );
        assert!(sub("${oops")
            .unwrap_err()
            .contains("unterminated placeholder"));
        assert!(sub("${a b}").unwrap_err().contains("is not a placeholder"));
    }

    #[test]
    fn deep_merge_merges_maps_and_replaces_the_rest() {
        let mut base = json!({"a": {"x": 1, "y": [1, 2]}, "b": 1, "c": {"k": "v"}});
        deep_merge(
            &mut base,
            &json!({"a": {"y": [3], "z": true}, "b": {"now": "map"}, "c": null}),
        );
        assert_eq!(
            base,
            json!({"a": {"x": 1, "y": [3], "z": true}, "b": {"now": "map"}, "c": null})
        );
    }

    #[test]
    fn namespaced_objects_get_the_release_namespace() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        check_object(&mut cm, "apps").unwrap();
        assert_eq!(cm["metadata"]["namespace"], "apps");
        let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}});
        check_object(&mut ns, "apps").unwrap();
        assert!(ns["metadata"].get("namespace").is_none());
        let mut other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}});
        check_object(&mut other, "apps").unwrap();
        assert_eq!(other["metadata"]["namespace"], "x");
        let mut nameless = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
        assert_eq!(
            check_object(&mut nameless, "apps").unwrap_err().1,
            "rendered object has no `metadata.name`"
        );
    }

    #[test]
    fn overlay_targets() {
        let o = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "apps", "labels": {"app": "web"}}});
        let t = |v: Value| serde_json::from_value::<OverlayTarget>(v).unwrap();
        assert!(target_matches(
            &t(json!({"kind": "Deployment", "name": "web"})),
            &o
        ));
        assert!(target_matches(
            &t(json!({"labelSelector": "app=web", "namespace": "apps"})),
            &o
        ));
        assert!(!target_matches(
            &t(json!({"kind": "Deployment", "namespace": "other"})),
            &o
        ));
        assert!(!target_matches(
            &t(json!({"labelSelector": "app!=web"})),
            &o
        ));
        assert!(target_matches(
            &t(json!({"apiVersion": "apps/v1", "kind": "Deployment"})),
            &o
        ));
    }

    fn repo(files: &[(&str, &str)]) -> LoadedRepo {
        let mut snap = Snapshot::default();
        for (p, c) in files {
            snap.files.insert(p.to_string(), c.as_bytes().to_vec());
        }
        match crate::load::load(std::sync::Arc::new(snap)) {
            Ok((r, _)) => r,
            Err(e) => panic!("{e}"),
        }
    }

    const LIB_CHART: &[(&str, &str)] = &[
        ("charts/lib/Chart.yaml", "name: lib\nversion: 0.1.0\n"),
        ("charts/lib/values.yaml", "size: small\n"),
        (
            "charts/lib/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${release.name}-lib\ndata:\n  size: ${size}\n",
        ),
        ("charts/app/Chart.yaml", "name: app\nversion: 1.0.0\n"),
        (
            "charts/app/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${release.name}\ndata:\n  mode: ${mode:=fast}\n",
        ),
    ];

    fn chart_doc(name: &str, extra: &str) -> String {
        format!("---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  release: {name}\n  namespace: ns\n  source: {{type: local, location: charts/{name}}}\n{extra}")
    }

    #[test]
    fn dependencies_render_inside_the_parent_release_with_the_parents_values() {
        let charts = format!(
            "{}{}",
            chart_doc(
                "app",
                "  dependencies: [lib]\n  values:\n    lib: {size: large}\n"
            ),
            chart_doc("lib", "")
        );
        let mut files = LIB_CHART.to_vec();
        files.push(("armada.yaml", &charts));
        let repo = repo(&files);
        let objects = render(&repo, &ChartSources::default()).unwrap();
        let names: Vec<(&str, &str)> = objects
            .iter()
            .map(|o| {
                (
                    o.name(),
                    o.object["data"]
                        .as_object()
                        .unwrap()
                        .values()
                        .next()
                        .unwrap()
                        .as_str()
                        .unwrap(),
                )
            })
            .collect();
        // `lib` is only a dependency: it is rendered once, inside `app`, with app's values.lib.
        assert_eq!(names, vec![("app", "fast"), ("app-lib", "large")]);
        assert!(objects.iter().all(|o| o.owner
            == Owner::Resource {
                kind: "ArmadaChart".into(),
                namespace: "default".into(),
                name: "app".into()
            }));
    }

    #[test]
    fn overlay_errors_point_at_the_overlay() {
        let overlays = "  values:\n    overlays:\n      - target: {kind: Deployment}\n        mergePatch: {spec: {}}\n      - target: {kind: ConfigMap}\n        jsonPatch: [{op: replace, path: /data/missing, value: x}]\n";
        let charts = chart_doc("app", overlays);
        let mut files = LIB_CHART.to_vec();
        files.push(("armada.yaml", &charts));
        let err = render(&repo(&files), &ChartSources::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("armada.yaml:11:9: ArmadaChart `default/app`: `values.overlays[0]` matches no rendered object (target kind=Deployment)"), "{err}");
        assert!(err.contains("armada.yaml:13:9: ArmadaChart `default/app`: `values.overlays[1]` on ConfigMap `app`: JSON patch failed"), "{err}");
    }

    #[test]
    fn two_charts_rendering_the_same_object_is_an_error() {
        let charts = format!(
            "{}{}",
            chart_doc("app", "  release: same\n"),
            chart_doc("lib", "")
        );
        let charts = charts.replace("  release: app\n", "");
        let mut files = LIB_CHART.to_vec();
        files.push((
            "charts/lib/templates/dup.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: same\n",
        ));
        files.push(("armada.yaml", &charts));
        let err = render(&repo(&files), &ChartSources::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("ConfigMap `same` is rendered by ArmadaChart `default/lib` and by ArmadaChart `default/app`"), "{err}");
    }

    #[test]
    fn git_charts_need_resolved_sources() {
        let charts = chart_doc("app", "").replace(
            "{type: local, location: charts/app}",
            "{type: git, location: https://example.com/charts.git}",
        );
        let mut files = LIB_CHART.to_vec();
        files.push(("armada.yaml", &charts));
        let err = render(&repo(&files), &ChartSources::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("its git source was not fetched"), "{err}");
    }
}
