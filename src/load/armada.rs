//! Armada documents: `ArmadaChart`/`ArmadaChartGroup`/`ArmadaManifest` CRs and native
//! `schema: armada/Chart/v1`-style documents (converted to the same CRs), validated against the
//! CRD schemas with `file:line:col` errors, with their references (manifest → groups → charts,
//! `dependencies`) checked, and the deployment plan (waves) derived from them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kube::CustomResourceExt;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::schema::{self, SchemaIssue};
use super::yaml::Positions;
use super::{crd_schema, Diagnostics, Origin, RawDoc};
use crate::api::armada::{
    overlays_of, ArmadaChart, ArmadaChartGroup, ArmadaManifest, SourceType, API_VERSION,
};
use crate::source::chart::ChartRequest;

/// The Armada API group and version.
pub const ARMADA_API_VERSION: &str = API_VERSION;

/// Namespace of the CRs that native documents become (Deckhand metadata has no namespace;
/// a `metadata.namespace` in a native document is honoured).
pub const NATIVE_NAMESPACE: &str = "default";

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

/// A native Armada document (`schema: armada/Chart/v1`, …).
pub fn is_native(value: &Value) -> bool {
    value
        .get("schema")
        .and_then(Value::as_str)
        .is_some_and(|s| s.starts_with("armada/"))
}

/// One of the Armada CR kinds.
pub fn is_armada_cr(api_version: &str, kind: &str) -> bool {
    api_version == ARMADA_API_VERSION
        && matches!(kind, "ArmadaChart" | "ArmadaChartGroup" | "ArmadaManifest")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Chart,
    Group,
    Manifest,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Chart => "ArmadaChart",
            Kind::Group => "ArmadaChartGroup",
            Kind::Manifest => "ArmadaManifest",
        }
    }
    fn from_kind(kind: &str) -> Option<Kind> {
        match kind {
            "ArmadaChart" => Some(Kind::Chart),
            "ArmadaChartGroup" => Some(Kind::Group),
            "ArmadaManifest" => Some(Kind::Manifest),
            _ => None,
        }
    }
}

struct Schemas {
    chart: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
    group: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
    manifest: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
}

impl Schemas {
    fn new() -> Self {
        Schemas {
            chart: crd_schema(ArmadaChart::crd()),
            group: crd_schema(ArmadaChartGroup::crd()),
            manifest: crd_schema(ArmadaManifest::crd()),
        }
    }
    fn of(
        &self,
        kind: Kind,
    ) -> &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps {
        match kind {
            Kind::Chart => &self.chart,
            Kind::Group => &self.group,
            Kind::Manifest => &self.manifest,
        }
    }
}

/// Type and check the Armada documents.
pub fn load(docs: Vec<RawDoc>, diags: &mut Diagnostics) -> ArmadaDocs {
    // Generating the CRD schemas takes milliseconds; once per process is enough.
    static SCHEMAS: std::sync::OnceLock<Schemas> = std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(Schemas::new);
    let mut out = ArmadaDocs::default();
    let mut seen: HashMap<(Kind, ResourceKey), Origin> = HashMap::new();
    for raw in docs {
        let loaded = if is_native(&raw.value) {
            load_native(raw, schemas, diags)
        } else {
            load_cr(raw, schemas, diags)
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
    check_charts(&out, diags);
    check_references(&out, diags);
    out
}

/// A document converted to the CR shape, not yet typed.
struct Doc {
    value: Value,
    origin: Origin,
    positions: Positions,
    spec_pointer: &'static str,
    native_schema: Option<String>,
}

fn doc_key(doc: &Doc) -> ResourceKey {
    let s = |p: &str| {
        doc.value
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    ResourceKey {
        namespace: s("/metadata/namespace"),
        name: s("/metadata/name"),
    }
}

fn typed<T: DeserializeOwned>(doc: Doc, diags: &mut Diagnostics) -> Option<Loaded<T>> {
    match serde_json::from_value::<T>(doc.value) {
        Ok(resource) => Some(Loaded {
            resource,
            origin: doc.origin,
            positions: doc.positions,
            spec_pointer: doc.spec_pointer,
            native_schema: doc.native_schema,
        }),
        Err(e) => {
            // The schema accepted it, so this is a shape the schema cannot express.
            diags.error(doc.origin, format!("invalid Armada document: {e}"));
            None
        }
    }
}

fn load_cr(mut raw: RawDoc, schemas: &Schemas, diags: &mut Diagnostics) -> Option<(Kind, Doc)> {
    let kind = Kind::from_kind(raw.value.get("kind").and_then(Value::as_str).unwrap_or(""))?;
    if raw
        .value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        diags.error(
            raw.origin_of("/metadata"),
            format!("an {} must set `metadata.namespace`", kind.name()),
        );
        return None;
    }
    if let Some(spec) = raw.value.get_mut("spec") {
        let file = raw.origin.file.clone();
        normalise(kind, spec, &mut |pointer: &str, message: String| {
            diags.warning(
                Origin {
                    file: file.clone(),
                    pos: raw.positions.find(&format!("/spec{pointer}")),
                },
                format!("{message} (the API server only accepts the new form)"),
            )
        });
    }
    let raw = super::validate_against(raw, schemas.of(kind), diags)?;
    let doc = Doc {
        value: raw.value,
        origin: raw.origin,
        positions: raw.positions,
        spec_pointer: "/spec",
        native_schema: None,
    };
    warn_unacted(kind, &doc, diags);
    Some((kind, doc))
}

fn load_native(raw: RawDoc, schemas: &Schemas, diags: &mut Diagnostics) -> Option<(Kind, Doc)> {
    let schema_name = raw
        .value
        .get("schema")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let parts: Vec<&str> = schema_name.split('/').collect();
    let kind = match parts.as_slice() {
        ["armada", "Chart", "v1" | "v2"] => Kind::Chart,
        ["armada", "ChartGroup", "v1" | "v2"] => Kind::Group,
        ["armada", "Manifest", "v1" | "v2"] => Kind::Manifest,
        _ => {
            diags.error(
                raw.origin_of("/schema"),
                format!("unknown Armada document schema `{schema_name}`: expected armada/Chart/v1, armada/Chart/v2, armada/ChartGroup/v1, armada/ChartGroup/v2, armada/Manifest/v1 or armada/Manifest/v2"),
            );
            return None;
        }
    };
    let mut ok = true;
    let Value::Object(map) = &raw.value else {
        return None;
    };
    for key in map.keys() {
        if !matches!(key.as_str(), "schema" | "metadata" | "data") {
            let hint = schema::did_you_mean(key, ["schema", "metadata", "data"])
                .map(|m| format!(" (did you mean `{m}`?)"))
                .unwrap_or_default();
            diags.error(
                raw.origin_of(&format!("/{key}")),
                format!("unknown field `{key}` in an Armada document: only `schema`, `metadata` and `data`{hint}"),
            );
            ok = false;
        }
    }
    let name = match raw.value.pointer("/metadata/name") {
        Some(Value::String(n)) if is_dns_subdomain(n) => Some(n.clone()),
        Some(Value::String(n)) => {
            diags.error(
                raw.origin_of("/metadata/name"),
                format!("`metadata.name` `{n}` cannot name a Kubernetes resource: use lowercase letters, digits, `-` and `.` (at most 253 characters)"),
            );
            None
        }
        _ => {
            diags.error(
                raw.origin_of("/metadata"),
                "missing required field `metadata.name`",
            );
            None
        }
    };
    let namespace = match raw.value.pointer("/metadata/namespace") {
        Some(Value::String(ns)) if !ns.is_empty() => ns.clone(),
        _ => NATIVE_NAMESPACE.to_string(),
    };
    if raw.value.pointer("/metadata/substitutions").is_some() {
        diags.warning(
            raw.origin_of("/metadata/substitutions"),
            "Deckhand substitutions are not performed by Weft; `metadata.substitutions` is ignored",
        );
    }
    if raw.value.pointer("/metadata/layeringDefinition/abstract") == Some(&Value::Bool(true)) {
        diags.warning(
            raw.origin_of("/metadata/layeringDefinition"),
            "Deckhand layering is not performed by Weft: this abstract document is deployed as it is",
        );
    }
    let mut data = match raw.value.get("data") {
        Some(Value::Object(d)) => Value::Object(d.clone()),
        Some(_) => {
            diags.error(raw.origin_of("/data"), "`data` must be a mapping");
            return None;
        }
        None => {
            diags.error(raw.origin.clone(), "missing required field `data`");
            return None;
        }
    };
    normalise(kind, &mut data, &mut |pointer: &str, message: String| {
        diags.warning(raw.origin_of(&format!("/data{pointer}")), message)
    });
    let mut issues: Vec<SchemaIssue> = Vec::new();
    if let Some(spec_schema) = schemas
        .of(kind)
        .properties
        .as_ref()
        .and_then(|p| p.get("spec"))
    {
        schema::validate(&mut data, spec_schema, "/data", &mut issues);
    }
    for issue in issues {
        let origin = raw.origin_of(&issue.pointer);
        if issue.warning {
            diags.warning(origin, issue.message);
        } else {
            ok = false;
            diags.error(origin, issue.message);
        }
    }
    let name = name?;
    if !ok {
        return None;
    }
    let mut metadata = json!({"name": name, "namespace": namespace});
    if let Some(Value::Object(labels)) = raw.value.pointer("/metadata/labels") {
        metadata["labels"] = Value::Object(labels.clone());
    }
    let value = json!({
        "apiVersion": ARMADA_API_VERSION,
        "kind": kind.name(),
        "metadata": metadata,
        "spec": data,
    });
    let doc = Doc {
        value,
        origin: raw.origin,
        positions: raw.positions,
        spec_pointer: "/data",
        native_schema: Some(schema_name),
    };
    warn_unacted(kind, &doc, diags);
    Some((kind, doc))
}

fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Rewrite the two spellings a structural schema cannot express into the CRD's form:
/// v1's `test: true|false` → `test: {enabled: …}`, and v2's map form of `wait.resources`
/// (`{deployment: {labels…}, job: [{…}, {…}]}`) → a list of `{type, …}`.
fn normalise(kind: Kind, spec: &mut Value, note: &mut dyn FnMut(&str, String)) {
    if kind != Kind::Chart {
        return;
    }
    if let Some(Value::Bool(b)) = spec.get("test").cloned() {
        spec["test"] = json!({"enabled": b});
        note(
            "/test",
            format!("`test: {b}` is the deprecated Armada v1 form of `test: {{enabled: {b}}}`"),
        );
    }
    if let Some(Value::Object(by_type)) = spec.pointer("/wait/resources").cloned() {
        let mut list = Vec::new();
        for (type_, entry) in by_type {
            let entries = match entry {
                Value::Array(items) => items,
                other => vec![other],
            };
            for e in entries {
                let mut e = match e {
                    Value::Object(m) => m,
                    Value::Null => Map::new(),
                    other => {
                        // Leave it for the schema to report.
                        list.push(other);
                        continue;
                    }
                };
                e.insert("type".to_string(), Value::String(type_.clone()));
                list.push(Value::Object(e));
            }
        }
        spec["wait"]["resources"] = Value::Array(list);
        note("/wait/resources", "`wait.resources` as a mapping by type (Armada v2) was converted to the list form `[{type, labels, min_ready}]`".to_string());
    }
}

/// Warn about fields Weft accepts but does not act on (Helm tests and hooks, Helm options).
fn warn_unacted(kind: Kind, doc: &Doc, diags: &mut Diagnostics) {
    let spec = doc.value.get("spec").cloned().unwrap_or(Value::Null);
    let mut warn = |pointer: &str, why: &str| {
        if spec.pointer(pointer).is_some() {
            let field = schema::field_path(&format!("{}{pointer}", doc.spec_pointer));
            diags.warning(
                Origin {
                    file: doc.origin.file.clone(),
                    pos: doc
                        .positions
                        .find(&format!("{}{pointer}", doc.spec_pointer)),
                },
                format!("`{field}` is accepted but ignored: {why}"),
            );
        }
    };
    match kind {
        Kind::Chart => {
            if spec.pointer("/test/enabled") != Some(&Value::Bool(false)) {
                warn("/test", "Weft does not run Helm tests");
            }
            warn("/install", "Weft does not run Helm hooks");
            warn("/upgrade/no_hooks", "Weft does not run Helm hooks");
            warn(
                "/upgrade/options",
                "Helm upgrade options do not apply to server-side apply",
            );
            warn(
                "/upgrade/pre/update",
                "only `upgrade.pre.delete` actions are performed",
            );
            warn(
                "/upgrade/pre/create",
                "only `upgrade.pre.delete` actions are performed",
            );
            warn(
                "/upgrade/post",
                "only `upgrade.pre.delete` actions are performed",
            );
            warn(
                "/wait/native",
                "Weft waits with its own readiness rules, not Helm's `--wait`",
            );
            warn(
                "/source/proxy_server",
                "Weft fetches without a per-chart proxy",
            );
            warn("/source/auth_method", "Weft's own git credentials are used");
            if spec.get("timeout").is_some() {
                let field = schema::field_path(&format!("{}/timeout", doc.spec_pointer));
                diags.warning(
                    Origin { file: doc.origin.file.clone(), pos: doc.positions.find(&format!("{}/timeout", doc.spec_pointer)) },
                    format!("`{field}` is deprecated: write `wait.timeout` (used as the wait timeout when `wait.timeout` is not set)"),
                );
            }
        }
        Kind::Group => warn("/test_charts", "Weft does not run Helm tests"),
        Kind::Manifest => {}
    }
}

/// Per-chart checks the schema cannot make: overlays, `min_ready` values, local paths.
fn check_charts(docs: &ArmadaDocs, diags: &mut Diagnostics) {
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
            if let Some(Err(message)) = r.min_ready.as_ref().map(|m| m.threshold()) {
                diags.error(
                    c.origin_of(&format!("/wait/resources/{i}/min_ready")),
                    message,
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
fn check_references(docs: &ArmadaDocs, diags: &mut Diagnostics) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::yaml::{parse_documents, YamlLimits};
    use crate::load::Severity;

    fn raw_docs(file: &str, text: &str) -> Vec<RawDoc> {
        parse_documents(text, YamlLimits::default())
            .unwrap()
            .into_iter()
            .filter(|d| !d.value.is_null())
            .map(|d| RawDoc {
                origin: Origin {
                    file: file.to_string(),
                    pos: d.positions.get("").unwrap_or(d.start),
                },
                value: d.value,
                positions: d.positions,
            })
            .collect()
    }

    fn load_text(text: &str) -> (ArmadaDocs, Diagnostics) {
        let mut diags = Diagnostics::default();
        let docs = load(raw_docs("armada.yaml", text), &mut diags);
        diags.0.sort();
        (docs, diags)
    }

    fn errors(d: &Diagnostics) -> Vec<String> {
        d.0.iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| d.to_string())
            .collect()
    }
    fn warnings(d: &Diagnostics) -> Vec<String> {
        d.0.iter()
            .filter(|d| d.severity == Severity::Warning)
            .map(|d| d.to_string())
            .collect()
    }

    const NATIVE: &str = r#"
schema: armada/Manifest/v1
metadata: {schema: metadata/Document/v1, name: site}
data:
  release_prefix: demo
  chart_groups: [infra, apps]
---
schema: armada/ChartGroup/v1
metadata: {schema: metadata/Document/v1, name: infra}
data:
  description: infrastructure
  chart_group: [db]
---
schema: armada/ChartGroup/v2
metadata: {schema: metadata/Document/v1, name: apps}
data:
  sequenced: true
  chart_group: [api, web]
---
schema: armada/Chart/v1
metadata: {schema: metadata/Document/v1, name: db}
data:
  chart_name: db
  release: db
  namespace: demo
  test: false
  source: {type: local, location: charts/db, subpath: .}
  dependencies: []
---
schema: armada/Chart/v2
metadata: {schema: metadata/Document/v1, name: api}
data:
  release: api
  namespace: demo
  wait:
    timeout: 120
    resources:
      deployment: {labels: {app: api}, min_ready: 50%}
      job: [{labels: {app: migrate}}]
  source: {type: git, location: ../charts-repo, subpath: api, reference: main}
---
schema: armada/Chart/v2
metadata: {schema: metadata/Document/v1, name: web}
data:
  release: web
  namespace: demo
  source: {type: local, location: charts/web}
"#;

    #[test]
    fn native_documents_become_crs_and_a_plan() {
        let (docs, diags) = load_text(NATIVE);
        assert!(errors(&diags).is_empty(), "{:?}", diags.0);
        assert_eq!(
            (docs.charts.len(), docs.groups.len(), docs.manifests.len()),
            (3, 2, 1)
        );
        let api = docs.chart("default", "api").unwrap();
        let res = &api.resource.spec.wait.as_ref().unwrap().resources;
        assert_eq!(res.len(), 2);
        assert_eq!(
            res[0].type_,
            crate::api::armada::WaitResourceType::Deployment
        );
        assert_eq!(api.native_schema.as_deref(), Some("armada/Chart/v2"));
        let w = warnings(&diags);
        assert!(
            w.iter()
                .any(|w| w.contains("wait.resources") && w.starts_with("armada.yaml:")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|w| w.contains("`test: false` is the deprecated")),
            "{w:?}"
        );
        let plan = docs.deployment_plan();
        let order: Vec<(String, u32, Option<String>)> = plan
            .iter()
            .map(|p| {
                (
                    docs.charts[p.chart].resource.metadata.name.clone().unwrap(),
                    p.wave,
                    p.release_prefix.clone(),
                )
            })
            .collect();
        assert_eq!(
            order,
            vec![
                ("db".to_string(), 1, Some("demo".to_string())),
                ("api".to_string(), 2, Some("demo".to_string())),
                ("web".to_string(), 3, Some("demo".to_string())),
            ]
        );
    }

    #[test]
    fn unknown_and_bad_fields_name_file_line_and_field() {
        let (_, diags) = load_text(
            "schema: armada/Chart/v1\nmetadata: {name: db}\ndata:\n  release: db\n  namespace: demo\n  relase_prefix: x\n  wait: {timeout: 0}\n  source: {type: svn, location: x}\n",
        );
        let e = errors(&diags);
        assert!(
            e.iter().any(|e| e.starts_with("armada.yaml:6:3:")
                && e.contains("unknown field `relase_prefix` in `data`")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.starts_with("armada.yaml:7:")
                && e.contains("`data.wait.timeout` must be at least 1")),
            "{e:?}"
        );
        assert!(e.iter().any(|e| e.contains("`data.source.type` must be one of local, git, tar, not `svn`")), "{e:?}");
    }

    #[test]
    fn min_ready_must_be_a_count_or_percentage() {
        let cr = |min_ready: &str| {
            format!(
                "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: a, namespace: n}}\nspec:\n  release: a\n  namespace: n\n  source: {{type: local, location: c}}\n  wait:\n    resources:\n      - type: deployment\n        min_ready: {min_ready}\n"
            )
        };
        let (_, d) = load_text(&cr("\"80%\""));
        assert!(errors(&d).is_empty(), "{:?}", d.0);
        let (_, d) = load_text(&cr("2"));
        assert!(errors(&d).is_empty(), "{:?}", d.0);
        let (_, d) = load_text(&cr("most"));
        let e = errors(&d);
        assert!(
            e.iter().any(|e| e.starts_with("armada.yaml:11:9:")
                && e.contains("min_ready")
                && e.contains("pattern")),
            "{e:?}"
        );
        let (_, d) = load_text(&cr("\"150%\""));
        assert!(!errors(&d).is_empty());
        let (_, d) = load_text(&cr("-1"));
        assert!(
            errors(&d)
                .iter()
                .any(|e| e.contains("must not be negative")),
            "{:?}",
            d.0
        );
    }

    #[test]
    fn dangling_references_name_both_ends() {
        let (_, diags) = load_text(
            "schema: armada/Manifest/v1\nmetadata: {name: m}\ndata: {release_prefix: p, chart_groups: [grup]}\n---\nschema: armada/ChartGroup/v1\nmetadata: {name: group}\ndata: {chart_group: [web, ghost]}\n---\nschema: armada/Chart/v2\nmetadata: {name: web}\ndata: {release: web, namespace: x, dependencies: [lib], source: {type: local, location: c}}\n",
        );
        let e = errors(&diags);
        assert!(e.iter().any(|e| e.starts_with("armada.yaml:3:") && e.contains("ArmadaManifest `default/m` lists chart group `grup`, but there is no ArmadaChartGroup `grup`") && e.contains("did you mean `group`")), "{e:?}");
        assert!(
            e.iter().any(|e| e.starts_with("armada.yaml:7:")
                && e.contains("lists chart `ghost`, but there is no ArmadaChart `ghost`")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.contains(
                "ArmadaChart `default/web` depends on `lib`, but there is no ArmadaChart `lib`"
            )),
            "{e:?}"
        );
    }

    #[test]
    fn dependency_cycles_are_errors() {
        let chart = |name: &str, deps: &str| {
            format!("---\nschema: armada/Chart/v2\nmetadata: {{name: {name}}}\ndata: {{release: {name}, namespace: x, dependencies: [{deps}], source: {{type: local, location: c}}}}\n")
        };
        let text = format!(
            "{}{}{}{}",
            chart("a", "b"),
            chart("b", "c"),
            chart("c", "a"),
            chart("d", "d")
        );
        let (_, diags) = load_text(&text);
        let e = errors(&diags);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e.iter()
                .any(|e| e.contains("dependency cycle") && e.contains("`a` → `b` → `c` → `a`")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|e| e.contains("ArmadaChart `default/d` depends on `d`")),
            "{e:?}"
        );
    }

    #[test]
    fn a_chart_in_two_groups_and_duplicates_are_errors() {
        let text = "schema: armada/ChartGroup/v1\nmetadata: {name: g1}\ndata: {chart_group: [a]}\n---\nschema: armada/ChartGroup/v1\nmetadata: {name: g2}\ndata: {chart_group: [a]}\n---\nschema: armada/Chart/v2\nmetadata: {name: a}\ndata: {release: a, namespace: x, source: {type: local, location: c}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: a, namespace: default}\nspec: {release: a, namespace: x, source: {type: local, location: c}}\n";
        let (_, diags) = load_text(text);
        let e = errors(&diags);
        assert!(
            e.iter().any(|e| e.contains(
                "is listed by ArmadaChartGroup `default/g2` and by ArmadaChartGroup `default/g1`"
            )),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.starts_with("armada.yaml:13:")
                && e.contains("ArmadaChart `default/a` is defined twice: first at armada.yaml:9:")),
            "{e:?}"
        );
    }

    #[test]
    fn fields_weft_cannot_act_on_are_warnings() {
        let text = "schema: armada/Chart/v1\nmetadata: {name: a}\ndata:\n  chart_name: a\n  release: a\n  namespace: x\n  timeout: 100\n  test: {enabled: true, options: {cleanup: true}}\n  install: {no_hooks: false}\n  upgrade:\n    no_hooks: false\n    pre:\n      delete: [{type: job, labels: {app: a}}]\n      create: [{type: pod}]\n    options: {force: true}\n  wait: {native: {enabled: true}}\n  source: {type: git, location: https://example.com/r.git, subpath: a, proxy_server: p, auth_method: ssh}\n---\nschema: armada/ChartGroup/v1\nmetadata: {name: g}\ndata: {chart_group: [a], test_charts: true}\n";
        let (docs, diags) = load_text(text);
        assert!(errors(&diags).is_empty(), "{:?}", diags.0);
        let w = warnings(&diags);
        for (line, field) in [
            (7, "`data.timeout` is deprecated"),
            (8, "`data.test` is accepted but ignored"),
            (9, "`data.install`"),
            (11, "`data.upgrade.no_hooks`"),
            (14, "`data.upgrade.pre.create`"),
            (15, "`data.upgrade.options`"),
            (16, "`data.wait.native`"),
            (17, "`data.source.proxy_server`"),
            (17, "`data.source.auth_method`"),
            (21, "`data.test_charts`"),
        ] {
            assert!(
                w.iter()
                    .any(|w| w.starts_with(&format!("armada.yaml:{line}:")) && w.contains(field)),
                "{field} at {line}: {w:?}"
            );
        }
        let up = docs.charts[0].resource.spec.upgrade.as_ref().unwrap();
        assert_eq!(up.pre.as_ref().unwrap().delete[0].type_, "job");
    }

    #[test]
    fn upgrade_delete_types_are_checked() {
        let (_, d) = load_text("schema: armada/Chart/v2\nmetadata: {name: a}\ndata:\n  release: a\n  namespace: x\n  source: {type: local, location: c}\n  upgrade:\n    pre:\n      delete:\n        - {type: job, labels: {a: b}}\n        - {type: deployment}\n");
        let e = errors(&d);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("armada.yaml:11:12:")
                && e[0]
                    .contains("`data.upgrade.pre.delete[1].type` `deployment` cannot be deleted"),
            "{e:?}"
        );
    }

    #[test]
    fn local_paths_may_not_leave_the_repository() {
        let (_, d) = load_text("schema: armada/Chart/v2\nmetadata: {name: a}\ndata: {release: a, namespace: x, source: {type: local, location: ../other, subpath: x}}\n");
        assert!(
            errors(&d).iter().any(
                |e| e.contains("`data.source.location`") && e.contains("leaves the repository")
            ),
            "{:?}",
            d.0
        );
        let (_, d) = load_text("schema: armada/Chart/v2\nmetadata: {name: a}\ndata: {release: a, namespace: x, source: {type: git, location: ../other, subpath: ../../x}}\n");
        assert!(
            errors(&d)
                .iter()
                .any(|e| e.contains("`data.source.subpath`")),
            "{:?}",
            d.0
        );
    }

    #[test]
    fn unknown_schema_and_bad_names() {
        let (_, d) = load_text("schema: armada/Chart/v3\nmetadata: {name: a}\ndata: {}\n---\nschema: armada/Chart/v1\nmetadata: {name: My_Chart}\ndata: {release: a, namespace: x, source: {type: local, location: c}}\n");
        let e = errors(&d);
        assert!(
            e.iter().any(|e| e.starts_with("armada.yaml:1:")
                && e.contains("unknown Armada document schema `armada/Chart/v3`")),
            "{e:?}"
        );
        assert!(e.iter().any(|e| e.contains("`metadata.name` `My_Chart` cannot name a Kubernetes resource")), "{e:?}");
    }

    #[test]
    fn plan_puts_lone_groups_and_charts_after_manifests_and_skips_dependency_only_charts() {
        let text = "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {name: g, namespace: n}\nspec: {chart_group: [a, b]}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: a, namespace: n}\nspec: {release: a, namespace: n, source: {type: local, location: c}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: b, namespace: n}\nspec: {release: b, namespace: n, dependencies: [lib], source: {type: local, location: c}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: lib, namespace: n}\nspec: {release: lib, namespace: n, source: {type: local, location: c}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: solo, namespace: n}\nspec: {release: solo, namespace: n, source: {type: local, location: c}}\n";
        let (docs, d) = load_text(text);
        assert!(errors(&d).is_empty(), "{:?}", d.0);
        let plan: Vec<(String, u32)> = docs
            .deployment_plan()
            .iter()
            .map(|p| {
                (
                    docs.charts[p.chart].resource.metadata.name.clone().unwrap(),
                    p.wave,
                )
            })
            .collect();
        assert_eq!(
            plan,
            vec![("a".into(), 1), ("b".into(), 1), ("solo".into(), 2)]
        );
    }
}
