//! One Armada document typed: an `ArmadaChart`/`ArmadaChartGroup`/`ArmadaManifest` CR, or a
//! native document (`schema: armada/Chart/v1`, …) converted to one, checked against the CRD's
//! schema, with the old spellings normalised and the fields Weft cannot act on warned about.

use kube::CustomResourceExt;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::{
    Loaded, ResourceKey, AIRSHIPIT_V1, ARMADA_API_VERSION, KELEUSTES_FIELDS, NATIVE_NAMESPACE,
};
use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaManifest};
use crate::load::schema::{self, SchemaIssue};
use crate::load::yaml::Positions;
use crate::load::{crd_schema, Diagnostics, Origin, RawDoc};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    Chart,
    Group,
    Manifest,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Chart => "ArmadaChart",
            Kind::Group => "ArmadaChartGroup",
            Kind::Manifest => "ArmadaManifest",
        }
    }
    pub(super) fn from_kind(kind: &str) -> Option<Kind> {
        match kind {
            "ArmadaChart" => Some(Kind::Chart),
            "ArmadaChartGroup" => Some(Kind::Group),
            "ArmadaManifest" => Some(Kind::Manifest),
            _ => None,
        }
    }
}

pub(super) struct Schemas {
    chart: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
    group: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
    manifest: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
}

impl Schemas {
    pub(super) fn new() -> Self {
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

/// A document converted to the CR shape, not yet typed.
pub(super) struct Doc {
    value: Value,
    pub(super) origin: Origin,
    positions: Positions,
    spec_pointer: &'static str,
    native_schema: Option<String>,
}

pub(super) fn doc_key(doc: &Doc) -> ResourceKey {
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

pub(super) fn typed<T: DeserializeOwned>(doc: Doc, diags: &mut Diagnostics) -> Option<Loaded<T>> {
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

pub(super) fn load_cr(
    mut raw: RawDoc,
    schemas: &Schemas,
    diags: &mut Diagnostics,
) -> Option<(Kind, Doc)> {
    let kind = Kind::from_kind(raw.value.get("kind").and_then(Value::as_str).unwrap_or(""))?;
    // Documents of the other Armada operators: `armada.airshipit.org/v1` (airshipit) is read as
    // Weft's version; the keleustes operator's extra fields are dropped with a warning, and its
    // documents may leave out the namespace (it defaults as for a native document).
    let api_version = raw
        .value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if api_version == AIRSHIPIT_V1
        && raw.value.get("spec").is_none()
        && raw.value.get("data").is_some()
    {
        return load_data_form(raw, kind, schemas, diags);
    }
    if api_version != ARMADA_API_VERSION {
        if let Some(map) = raw.value.as_object_mut() {
            map.insert(
                "apiVersion".into(),
                Value::String(ARMADA_API_VERSION.into()),
            );
        }
    }
    for field in KELEUSTES_FIELDS {
        let removed = raw
            .value
            .get_mut("spec")
            .and_then(Value::as_object_mut)
            .and_then(|spec| spec.remove(*field));
        if removed.is_some() {
            diags.warning(
                raw.origin_of(&format!("/spec/{field}")),
                format!(
                    "`spec.{field}` (an armada-operator field) is ignored: Weft deploys every chart it is given"
                ),
            );
        }
    }
    if raw
        .value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        if let Some(meta) = raw.value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("namespace".into(), Value::String(NATIVE_NAMESPACE.into()));
        }
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
    let raw = crate::load::validate_against(raw, schemas.of(kind), diags)?;
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

pub(super) fn load_native(
    raw: RawDoc,
    schemas: &Schemas,
    diags: &mut Diagnostics,
) -> Option<(Kind, Doc)> {
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
            let shown: String = schema_name.chars().take(MAX_QUOTED).collect();
            let message = if parts.first() == Some(&"armada") {
                format!("unknown Armada document schema `{shown}`: expected {ARMADA_SCHEMAS}")
            } else {
                format!(
                    "unsupported document schema `{shown}`: this is a Pegleg/Deckhand document, \
                     and Weft reads only Armada's own ({ARMADA_SCHEMAS}) and Kubernetes \
                     objects (`apiVersion`, `kind`). Weft performs no Deckhand layering, \
                     substitution or secret storage: render the site first (`pegleg site render`) \
                     and keep the armada/* documents, or move this file out of the synced path"
                )
            };
            diags.error(raw.origin_of("/schema"), message);
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
            let n: String = n.chars().take(MAX_QUOTED).collect();
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
    let Some(name) = name else {
        // Still check `data`, so every error of the document shows at once.
        let _ = spec_from_data(&raw, kind, schemas, diags);
        return None;
    };
    let mut metadata = json!({"name": name, "namespace": namespace});
    for field in ["labels", "annotations"] {
        match string_map(&raw, field, diags) {
            Ok(Some(map)) => metadata[field] = Value::Object(map),
            Ok(None) => {}
            Err(()) => ok = false,
        }
    }
    let data = spec_from_data(&raw, kind, schemas, diags)?;
    if !ok {
        return None;
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

/// `metadata.<field>` (labels, annotations) of a document: a mapping of strings, or an error
/// naming the entry that is not one.
fn string_map(
    raw: &RawDoc,
    field: &str,
    diags: &mut Diagnostics,
) -> Result<Option<Map<String, Value>>, ()> {
    let pointer = format!("/metadata/{field}");
    match raw.value.pointer(&pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => {
            let mut ok = true;
            for (key, value) in map {
                if !value.is_string() {
                    let key_shown: String = key.chars().take(MAX_QUOTED).collect();
                    diags.error(
                        raw.origin_of(&format!("{pointer}/{}", pointer_escape(key))),
                        format!("`metadata.{field}.{key_shown}` must be a string (quote it)"),
                    );
                    ok = false;
                }
            }
            if ok {
                Ok(Some(map.clone()))
            } else {
                Err(())
            }
        }
        Some(_) => {
            diags.error(
                raw.origin_of(&pointer),
                format!("`metadata.{field}` must be a mapping of strings"),
            );
            Err(())
        }
    }
}

fn pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The schemas of Armada's own documents.
const ARMADA_SCHEMAS: &str = "armada/Chart/v1, armada/Chart/v2, armada/ChartGroup/v1, armada/ChartGroup/v2, armada/Manifest/v1 or armada/Manifest/v2";

/// The most characters of a document's own text quoted in a message.
const MAX_QUOTED: usize = 100;

/// `data` of a native document (or of an airshipit `v1` CR, which keeps its spec there) as a
/// CR's spec: normalised and checked against the CRD's spec schema, positions from `/data`.
fn spec_from_data(
    raw: &RawDoc,
    kind: Kind,
    schemas: &Schemas,
    diags: &mut Diagnostics,
) -> Option<Value> {
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
    if raw.value.get("schema").and_then(Value::as_str) == Some("armada/Chart/v2") {
        v2_default_waits(&mut data);
    }
    let mut ok = true;
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
    ok.then_some(data)
}

/// The airshipit armada-operator's own `armada.airshipit.org/v1` ArmadaChart, which keeps its
/// spec under `data:` (its Go type: `Spec ArmadaChartSpec json:"data"`): read as written, its
/// operator-only fields dropped with a warning.
fn load_data_form(
    mut raw: RawDoc,
    kind: Kind,
    schemas: &Schemas,
    diags: &mut Diagnostics,
) -> Option<(Kind, Doc)> {
    let mut ok = true;
    if let Value::Object(map) = &raw.value {
        for key in map.keys() {
            if !matches!(
                key.as_str(),
                "apiVersion" | "kind" | "metadata" | "data" | "status"
            ) {
                let hint = schema::did_you_mean(key, ["metadata", "data"])
                    .map(|m| format!(" (did you mean `{m}`?)"))
                    .unwrap_or_default();
                let shown: String = key.chars().take(MAX_QUOTED).collect();
                diags.error(
                    raw.origin_of(&format!("/{}", pointer_escape(key))),
                    format!("unknown field `{shown}` in an {AIRSHIPIT_V1} {} (its spec is `data`){hint}", kind.name()),
                );
                ok = false;
            }
        }
    }
    let mut dropped = Vec::new();
    if let Some(data) = raw.value.get_mut("data") {
        drop_operator_fields(data, &mut dropped);
    }
    for (pointer, field) in dropped {
        diags.warning(
            raw.origin_of(&format!("/data{pointer}")),
            format!(
                "`data.{field}` (an armada-operator field) is ignored: Weft does not act on it"
            ),
        );
    }
    let data = spec_from_data(&raw, kind, schemas, diags)?;
    if !ok {
        return None;
    }
    let mut metadata = match raw.value.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    if metadata
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        metadata.insert("namespace".into(), Value::String(NATIVE_NAMESPACE.into()));
    }
    let value = json!({
        "apiVersion": ARMADA_API_VERSION,
        "kind": kind.name(),
        "metadata": metadata,
        "spec": data,
    });
    let doc = Doc {
        value,
        origin: std::mem::take(&mut raw.origin),
        positions: std::mem::take(&mut raw.positions),
        spec_pointer: "/data",
        native_schema: None,
    };
    warn_unacted(kind, &doc, diags);
    Some((kind, doc))
}

/// The fields of the airshipit operator's `v1` ArmadaChart that neither Armada's schemas nor
/// Weft have: removed from `data`, each listed as (pointer, field path).
fn drop_operator_fields(data: &mut Value, dropped: &mut Vec<(String, String)>) {
    if let Some(pre) = data
        .pointer_mut("/upgrade/pre")
        .and_then(Value::as_object_mut)
    {
        for field in ["cleanup", "update_crd"] {
            if pre.remove(field).is_some() {
                dropped.push((
                    format!("/upgrade/pre/{field}"),
                    format!("upgrade.pre.{field}"),
                ));
            }
        }
    }
    if let Some(resources) = data
        .pointer_mut("/wait/resources")
        .and_then(Value::as_array_mut)
    {
        for (i, r) in resources.iter_mut().enumerate() {
            let Some(r) = r.as_object_mut() else { continue };
            for field in ["namespace", "condition", "delay"] {
                if r.remove(field).is_some() {
                    dropped.push((
                        format!("/wait/resources/{i}/{field}"),
                        format!("wait.resources[{i}].{field}"),
                    ));
                }
            }
        }
    }
}

pub(super) fn is_dns_subdomain(name: &str) -> bool {
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
pub(super) fn normalise(kind: Kind, spec: &mut Value, note: &mut dyn FnMut(&str, String)) {
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
        spec["wait"]["resources"] = Value::Array(armada_v2_waits(&by_type));
        note("/wait/resources", "`wait.resources` as a mapping by type (Armada v2) was converted to the list form `[{type, labels, min_ready, required}]`: Armada's default entry (`required: false`) for every type not listed, none for a type set to `false`".to_string());
    }
}

/// Armada v2's resource types, in the order its `wait.py` waits for them (jobs first: they may
/// initialise what the others need).
const V2_WAIT_TYPES: [&str; 5] = ["job", "daemonset", "statefulset", "deployment", "pod"];

/// Armada v2's `wait.resources` mapping as the list it stands for (`ChartWait.get_resources_list`):
/// every type of [`V2_WAIT_TYPES`] with `required: false`, unless the mapping names it: `false`
/// drops the type, a mapping or a list of mappings replaces its entry (so `required` is true
/// unless it says otherwise, as in Armada). Types Armada does not know are kept for the schema
/// to report.
pub(super) fn armada_v2_waits(by_type: &Map<String, Value>) -> Vec<Value> {
    let mut list = Vec::new();
    let push = |type_: &str, entry: &Value, list: &mut Vec<Value>| {
        let entries = match entry {
            Value::Array(items) => items.clone(),
            other => vec![other.clone()],
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
            e.insert("type".to_string(), Value::String(type_.to_string()));
            list.push(Value::Object(e));
        }
    };
    for type_ in V2_WAIT_TYPES {
        match by_type.get(type_) {
            None => list.push(json!({"type": type_, "required": false})),
            Some(Value::Bool(false)) => {}
            Some(entry) => push(type_, entry, &mut list),
        }
    }
    for (type_, entry) in by_type {
        if !V2_WAIT_TYPES.contains(&type_.as_str()) && entry != &Value::Bool(false) {
            push(type_, entry, &mut list);
        }
    }
    list
}

/// An `armada/Chart/v2` document without `wait.resources` waits as Armada v2 does: every
/// resource type, none required (the CRD's own default, for an absent `resources`, is v1's).
pub(super) fn v2_default_waits(data: &mut Value) {
    if data.pointer("/wait/resources").is_some() {
        return;
    }
    let Value::Object(map) = data else { return };
    let wait = map
        .entry("wait".to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(wait) = wait {
        wait.insert(
            "resources".to_string(),
            Value::Array(armada_v2_waits(&Map::new())),
        );
    }
}

/// Warn about fields Weft accepts but does not act on (Helm tests and hooks, Helm options).
pub(super) fn warn_unacted(kind: Kind, doc: &Doc, diags: &mut Diagnostics) {
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
            warn(
                "/install/no_hooks",
                "Armada runs the Helm hooks of every install (`upgrade.no_hooks` applies to upgrades)",
            );
            for option in ["force", "recreate_pods"] {
                warn(
                    &format!("/upgrade/options/{option}"),
                    "Helm upgrade options do not apply to server-side apply",
                );
            }
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
