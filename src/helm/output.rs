//! helm's output → objects, each with the template it came from and its role: a CRD from a
//! chart's `crds/` directory, a hook, or a plain object.
//!
//! `helm template` writes `---\n# Source: <chart>/<path>\n<document>` for each rendered document:
//! CRDs first (with `--include-crds`; a CRD file is written as it is, so one `# Source:` may cover
//! several documents), then the plain objects, then the hooks. Hook annotations are read as helm 3
//! reads them: a comma-separated list of phases (unknown ones ignored, with a warning here), an
//! integer weight (anything else counts as 0), comma-separated delete policies.

use serde_json::Value;

use super::yaml11::{self, Spent, Yaml11Limits};
use super::HelmError;

/// The objects of one render, in helm's order, and what helm and Weft warned about.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HelmRender {
    pub objects: Vec<RenderedObject>,
    /// helm's stderr lines of a successful run, and hook annotations Weft could not read.
    pub warnings: Vec<String>,
}

/// One rendered object.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedObject {
    /// The object as JSON.
    pub value: Value,
    /// The template it came from, as helm names it (`web/templates/deployment.yaml`,
    /// `web/charts/weft-lib/templates/x.yaml`, `web/crds/widgets.yaml`).
    pub source_template: String,
    pub class: ObjectClass,
}

impl RenderedObject {
    /// `Kind/name`, for messages.
    pub fn describe(&self) -> String {
        describe(&self.value)
    }
}

/// What Weft must do with a rendered object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectClass {
    /// Apply it with the chart's other objects.
    Plain,
    /// From a chart's `crds/` directory (not templated): apply before everything else.
    Crd,
    /// A Helm hook (`helm.sh/hook`): never applied as a plain object.
    Hook(Hook),
}

/// A hook's annotations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hook {
    /// `helm.sh/hook`, in the order written, without unknown phases.
    pub phases: Vec<HookPhase>,
    /// `helm.sh/hook-weight`: hooks of a phase run in ascending weight.
    pub weight: i32,
    /// `helm.sh/hook-delete-policy` as written (empty when absent; see
    /// [`Hook::effective_delete_policies`]).
    pub delete_policies: Vec<HookDeletePolicy>,
}

impl Hook {
    /// The delete policies helm 3 applies: `before-hook-creation` when none is given.
    pub fn effective_delete_policies(&self) -> Vec<HookDeletePolicy> {
        if self.delete_policies.is_empty() {
            vec![HookDeletePolicy::BeforeHookCreation]
        } else {
            self.delete_policies.clone()
        }
    }

    /// A Helm test (`test`, or Helm 2's `test-success`).
    pub fn is_test(&self) -> bool {
        self.phases
            .iter()
            .any(|p| matches!(p, HookPhase::Test | HookPhase::TestSuccess))
    }
}

/// The phases of `helm.sh/hook`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookPhase {
    PreInstall,
    PostInstall,
    PreUpgrade,
    PostUpgrade,
    PreDelete,
    PostDelete,
    PreRollback,
    PostRollback,
    Test,
    /// Helm 2's name for `test`, still accepted by helm 3.
    TestSuccess,
}

impl HookPhase {
    /// Every phase with its annotation spelling.
    pub const ALL: [(HookPhase, &'static str); 10] = [
        (HookPhase::PreInstall, "pre-install"),
        (HookPhase::PostInstall, "post-install"),
        (HookPhase::PreUpgrade, "pre-upgrade"),
        (HookPhase::PostUpgrade, "post-upgrade"),
        (HookPhase::PreDelete, "pre-delete"),
        (HookPhase::PostDelete, "post-delete"),
        (HookPhase::PreRollback, "pre-rollback"),
        (HookPhase::PostRollback, "post-rollback"),
        (HookPhase::Test, "test"),
        (HookPhase::TestSuccess, "test-success"),
    ];

    /// The annotation spelling (`pre-install`).
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("", |(_, s)| s)
    }

    fn parse(s: &str) -> Option<HookPhase> {
        Self::ALL
            .iter()
            .find(|(_, name)| name.eq_ignore_ascii_case(s))
            .map(|(p, _)| *p)
    }
}

/// The values of `helm.sh/hook-delete-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookDeletePolicy {
    /// Delete the previous copy before the hook is created again (helm's default).
    BeforeHookCreation,
    /// Delete the hook once it succeeded.
    HookSucceeded,
    /// Delete the hook when it failed.
    HookFailed,
}

impl HookDeletePolicy {
    fn parse(s: &str) -> Option<HookDeletePolicy> {
        match s {
            "before-hook-creation" => Some(HookDeletePolicy::BeforeHookCreation),
            "hook-succeeded" => Some(HookDeletePolicy::HookSucceeded),
            "hook-failed" => Some(HookDeletePolicy::HookFailed),
            _ => None,
        }
    }
}

const HOOK: &str = "helm.sh/hook";
const HOOK_WEIGHT: &str = "helm.sh/hook-weight";
const HOOK_DELETE_POLICY: &str = "helm.sh/hook-delete-policy";

/// Used when output comes before helm's first `# Source:` line (helm never does this).
const UNKNOWN_TEMPLATE: &str = "helm output";

/// The most duplicate keys reported one by one per render; the rest are counted.
const MAX_DUPLICATE_WARNINGS: usize = 20;

/// Split helm's output into objects; empty documents are dropped. Each document is read as
/// Kubernetes reads it (YAML 1.1 as `sigs.k8s.io/yaml` resolves it, see [`super::yaml11`]): what
/// Weft applies is what `helm install` would send. A key written twice is accepted, the last one
/// winning, with a warning naming the template and the key.
pub fn parse_manifests(stdout: &str) -> Result<HelmRender, HelmError> {
    parse_manifests_within(stdout, &Yaml11Limits::default())
}

/// [`parse_manifests`] within `limits` (one budget for every document of the render).
pub fn parse_manifests_within(
    stdout: &str,
    limits: &Yaml11Limits,
) -> Result<HelmRender, HelmError> {
    let mut render = HelmRender::default();
    let mut spent = Spent::default();
    let mut duplicates = 0usize;
    for (source, text) in split_documents(stdout) {
        let source = source.unwrap_or(UNKNOWN_TEMPLATE);
        if !has_content(&text) {
            continue;
        }
        // Messages carry no snippet of the document, which may be a Secret.
        let (value, dups) = yaml11::parse_document(&text, limits, &mut spent).map_err(|e| {
            HelmError::OutputYaml {
                template: source.to_string(),
                message: e.to_string(),
            }
        })?;
        if value.is_null() {
            continue;
        }
        check_object(&value).map_err(|reason| HelmError::NotAnObject {
            template: source.to_string(),
            reason: reason.to_string(),
        })?;
        for dup in dups {
            duplicates += 1;
            if duplicates <= MAX_DUPLICATE_WARNINGS {
                render.warnings.push(format!(
                    "{source}: {}: key `{}` appears twice in the mapping at {} (the later one at \
                     line {} of the document); the last one is used, as helm and Kubernetes do",
                    describe(&value),
                    dup.key,
                    dup.mapping,
                    dup.line
                ));
            }
        }
        let class = classify(&value, source, &mut render.warnings);
        literal_braces_in_data(&value, source, &mut render.warnings);
        render.objects.push(RenderedObject {
            value,
            source_template: source.to_string(),
            class,
        });
    }
    if duplicates > MAX_DUPLICATE_WARNINGS {
        render.warnings.push(format!(
            "{} more duplicate keys in this chart's output, each resolved the same way (the last one is used)",
            duplicates - MAX_DUPLICATE_WARNINGS
        ));
    }
    Ok(render)
}

/// The documents of a YAML stream, each with the `# Source:` line that opens it; a document
/// without one belongs to the previous source (the further documents of a CRD file).
fn split_documents(stream: &str) -> Vec<(Option<&str>, String)> {
    let mut docs = Vec::new();
    let mut source = None; // the source in effect
    let mut current_source = None;
    let mut current = String::new();
    let mut fresh = true; // no line of the current document yet
    for line in stream.split_inclusive('\n') {
        if let Some(rest) = separator(line) {
            docs.push((current_source, std::mem::take(&mut current)));
            current_source = source;
            fresh = true;
            let rest = rest.trim();
            if !rest.is_empty() {
                // `--- {a: 1}` or `--- # comment`: the rest of the line is the document's.
                current.push_str(rest);
                current.push('\n');
                fresh = false;
            }
            continue;
        }
        if fresh {
            if let Some(s) = line.trim_end().strip_prefix("# Source: ") {
                source = Some(s.trim());
                current_source = source;
                fresh = false;
                continue;
            }
        }
        fresh = false;
        current.push_str(line);
    }
    docs.push((current_source, current));
    docs
}

/// The rest of a `---` document separator line, or `None` if `line` is not one.
fn separator(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("---")?;
    match rest.chars().next() {
        None => Some(rest),
        Some(c) if c.is_whitespace() => Some(rest),
        _ => None,
    }
}

/// Whether a document has anything but blank lines and comments.
fn has_content(text: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#')
    })
}

/// Why one document of helm's output is not a Kubernetes object.
#[derive(Debug, thiserror::Error)]
enum NotAnObject {
    #[error("a YAML {0} instead of a mapping")]
    NotAMapping(&'static str),
    #[error("`{0}` is missing or not a string")]
    MissingField(&'static str),
}

fn check_object(value: &Value) -> Result<(), NotAnObject> {
    let Some(map) = value.as_object() else {
        return Err(NotAnObject::NotAMapping(json_type(value)));
    };
    for field in ["apiVersion", "kind"] {
        match map.get(field) {
            Some(Value::String(s)) if !s.is_empty() => {}
            _ => return Err(NotAnObject::MissingField(field)),
        }
    }
    Ok(())
}

pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "sequence",
        Value::Object(_) => "mapping",
    }
}

fn describe(value: &Value) -> String {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("?");
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .or_else(|| {
            value
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
        })
        .unwrap_or("?");
    format!("{kind}/{name}")
}

/// Whether `source` is in the `crds/` directory of the chart or of one of its subcharts
/// (`web/crds/x.yaml`, `web/charts/lib/crds/x.yaml`).
fn is_crd_source(source: &str) -> bool {
    let mut parts = source.split('/').skip(1); // the chart name
    loop {
        match parts.next() {
            Some("charts") => {
                parts.next(); // the subchart's directory
            }
            Some("crds") => return true,
            _ => return false,
        }
    }
}

fn classify(value: &Value, source: &str, warnings: &mut Vec<String>) -> ObjectClass {
    if is_crd_source(source) {
        return ObjectClass::Crd;
    }
    let annotation = |key: &str| -> Option<String> {
        match value.pointer("/metadata/annotations")?.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    };
    let Some(phases) = annotation(HOOK) else {
        return ObjectClass::Plain;
    };
    let object = describe(value);
    let mut hook = Hook {
        phases: Vec::new(),
        weight: 0,
        delete_policies: Vec::new(),
    };
    for phase in phases.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match HookPhase::parse(phase) {
            Some(p) if !hook.phases.contains(&p) => hook.phases.push(p),
            Some(_) => {}
            None => warnings.push(format!(
                "{source}: {object}: unknown hook phase `{phase}` in {HOOK} is ignored, as helm does"
            )),
        }
    }
    if let Some(weight) = annotation(HOOK_WEIGHT) {
        match weight.trim().parse() {
            Ok(w) => hook.weight = w,
            Err(_) => warnings.push(format!(
                "{source}: {object}: {HOOK_WEIGHT} `{weight}` is not an integer; weight 0 is used, as helm does"
            )),
        }
    }
    if let Some(policies) = annotation(HOOK_DELETE_POLICY) {
        for policy in policies.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match HookDeletePolicy::parse(policy) {
                Some(p) if !hook.delete_policies.contains(&p) => hook.delete_policies.push(p),
                Some(_) => {}
                None => warnings.push(format!(
                    "{source}: {object}: unknown {HOOK_DELETE_POLICY} `{policy}` is ignored"
                )),
            }
        }
    }
    ObjectClass::Hook(hook)
}

/// Whether `value` is a ConfigMap: its `data` is read by the workload, which is often a template
/// engine of its own (an nginx or Go template, a Prometheus or Alertmanager configuration), so a
/// `{{` there is the workload's, as Helm and Armada deploy it: warned about, not refused.
fn is_config_map(value: &Value) -> bool {
    value.get("kind").and_then(Value::as_str) == Some("ConfigMap")
        && value.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// A warning for each key of a ConfigMap's `data` whose value contains `{{` (see
/// [`is_config_map`]).
fn literal_braces_in_data(value: &Value, source: &str, warnings: &mut Vec<String>) {
    if !is_config_map(value) {
        return;
    }
    let Some(data) = value.get("data").and_then(Value::as_object) else {
        return;
    };
    for (key, item) in data {
        if item.as_str().is_some_and(|s| s.contains("{{")) {
            warnings.push(format!(
                "{source}: {}: data key `{key}` keeps a literal `{{{{`; applied as it is, for the workload that reads it (its own template engine); if the chart meant a Helm action there, it was not rendered",
                describe(value)
            ));
        }
    }
}

/// Refuse objects in which a key or string still contains `{{`: Weft never sends an unrendered
/// template action to the cluster. (A chart that means to output `{{` literally, e.g. in
/// Prometheus rule annotations, is refused too; see `RenderRequest::allow_literal_braces`.)
/// The values of a ConfigMap's `data` are the exception: see [`is_config_map`].
pub fn reject_template_actions(objects: &[RenderedObject]) -> Result<(), HelmError> {
    for object in objects {
        let found = match object.value.as_object() {
            Some(map) if is_config_map(&object.value) => map
                .iter()
                .filter(|(key, _)| key.as_str() != "data")
                .find_map(|(key, item)| {
                    let mut pointer = format!("/{}", key.replace('~', "~0").replace('/', "~1"));
                    if key.contains("{{") {
                        Some(pointer)
                    } else {
                        find_braces(item, &mut pointer)
                    }
                })
                .or_else(|| {
                    // Keys of `data` are names, never the workload's template; only string
                    // values are the workload's.
                    let data = map.get("data").and_then(Value::as_object)?;
                    data.iter().find_map(|(k, item)| {
                        let mut pointer =
                            format!("/data/{}", k.replace('~', "~0").replace('/', "~1"));
                        if k.contains("{{") {
                            Some(pointer)
                        } else if item.is_string() {
                            None
                        } else {
                            find_braces(item, &mut pointer)
                        }
                    })
                }),
            _ => find_braces(&object.value, &mut String::new()),
        };
        if let Some(pointer) = found {
            return Err(HelmError::UnrenderedAction {
                template: object.source_template.clone(),
                object: object.describe(),
                pointer,
            });
        }
    }
    Ok(())
}

/// The JSON pointer of the first key or string containing `{{`.
fn find_braces(value: &Value, pointer: &mut String) -> Option<String> {
    match value {
        Value::String(s) if s.contains("{{") => Some(pointer_or_root(pointer)),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let len = pointer.len();
            pointer.push_str(&format!("/{i}"));
            let found = find_braces(item, pointer);
            pointer.truncate(len);
            found
        }),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            let len = pointer.len();
            pointer.push('/');
            pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
            let found = if key.contains("{{") {
                Some(pointer.clone())
            } else {
                find_braces(item, pointer)
            };
            pointer.truncate(len);
            found
        }),
        _ => None,
    }
}

fn pointer_or_root(pointer: &str) -> String {
    if pointer.is_empty() {
        "/".to_string()
    } else {
        pointer.to_string()
    }
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
