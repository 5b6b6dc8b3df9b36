//! From a [`Snapshot`] to typed documents: YAML parsing with positions, classification
//! (WeaveCloud, Armada, plain manifests), schema validation, and `file:line:col` diagnostics.
//! Pure: no I/O, no cluster.

pub mod armada;
pub mod budget;
pub mod doc;
pub mod flux;
pub mod kustomize;
pub mod schema;
pub mod sops;
mod weavecloud;
pub mod yaml;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use kube::CustomResourceExt;
use serde_json::Value;

use crate::api::WeaveCloud;
use crate::sops::Identity as AgeIdentity;
use crate::source::Snapshot;
pub use doc::Doc;
pub use weavecloud::{bare_host_as_https, parse_update_schedule};
use weavecloud::{kebab_origin, load_weavecloud};
use yaml::{Pos, Positions, YamlLimits};

/// Where a document (or a field of it) was written.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    /// Path relative to the repository root.
    pub file: String,
    pub pos: Pos,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)
    }
}

/// A value with the place it came from.
#[derive(Clone, Debug)]
pub struct Sourced<T> {
    pub value: T,
    pub origin: Origin,
}

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

/// One problem in the repository, printed as `file:line:col: message`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Diagnostic {
    pub origin: Origin,
    pub severity: Severity,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.severity {
            Severity::Error => write!(f, "{}: {}", self.origin, self.message),
            Severity::Warning => write!(f, "{}: warning: {}", self.origin, self.message),
        }
    }
}

/// Every diagnostic of a load, errors and warnings.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn error(&mut self, origin: Origin, message: impl Into<String>) {
        self.0.push(Diagnostic {
            origin,
            severity: Severity::Error,
            message: message.into(),
        });
    }
    pub fn warning(&mut self, origin: Origin, message: impl Into<String>) {
        self.0.push(Diagnostic {
            origin,
            severity: Severity::Warning,
            message: message.into(),
        });
    }
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|d| d.severity == Severity::Error)
    }
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.severity == Severity::Error)
    }
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.severity == Severity::Warning)
    }
}

/// The load failed: the repository has errors. Nothing downstream may act on it (no prune).
#[derive(Debug, thiserror::Error)]
#[error("{} error(s) in the repository:\n{}", .0.errors().count(), .0.errors().map(|d| d.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct LoadError(pub Diagnostics);

/// A parsed document before it is typed: its data, where its nodes are, where it came from.
#[derive(Clone, Debug)]
pub struct RawDoc {
    pub value: Value,
    pub positions: Positions,
    pub origin: Origin,
}

impl RawDoc {
    /// The origin of the node at `pointer` (or its nearest ancestor).
    pub fn origin_of(&self, pointer: &str) -> Origin {
        Origin {
            file: self.origin.file.clone(),
            pos: self.positions.find(pointer),
        }
    }
}

/// Everything the repository declares, typed and validated.
#[derive(Clone, Debug, Default)]
pub struct LoadedRepo {
    /// The git commit, when the snapshot came from git.
    pub revision: Option<String>,
    /// WeaveCloud resources.
    pub weaveclouds: Vec<Sourced<WeaveCloud>>,
    /// Armada charts, groups and manifests (CRs and native documents).
    pub armada: armada::ArmadaDocs,
    /// Every other Kubernetes object, as written; compact (JSON text) from here on, so that a
    /// repository of 100,000 documents is not held as 100,000 `Value` trees (docs/scaling.md).
    pub manifests: Vec<Sourced<Doc>>,
    /// The snapshot itself, for chart directories referenced by `source.type: local`.
    pub snapshot: Arc<Snapshot>,
    /// The one budget of this load and its render: what YAML anchors and aliases copied in
    /// every file, which `${…}` substitutions and overlays go on charging (a handle on the same
    /// counts; also in `armada.budget`).
    pub budget: budget::Budget,
}

impl LoadedRepo {
    /// Number of documents loaded.
    pub fn len(&self) -> usize {
        self.weaveclouds.len() + self.armada.len() + self.manifests.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The WeaveCloud API version and kind.
pub const WEAVECLOUD_API_VERSION: &str = "cloud.weave.works/v1beta1";

fn is_yaml(path: &str) -> bool {
    path.ends_with(".yaml") || path.ends_with(".yml")
}

/// Directories holding a `Chart.yaml` are chart sources, not manifests: their templates are
/// rendered by the Armada stage, never applied as they are.
fn chart_dirs(snapshot: &Snapshot) -> Vec<String> {
    snapshot
        .files
        .keys()
        .filter_map(|p| {
            if p == "Chart.yaml" {
                Some(String::new())
            } else {
                p.strip_suffix("/Chart.yaml").map(|d| format!("{d}/"))
            }
        })
        .collect()
}

/// What a load needs besides the snapshot: an input of the pass, never read by the loader.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// The age identities that decrypt the repository's SOPS files, tried in turn.
    pub identities: Arc<Vec<AgeIdentity>>,
    /// `--target-manifest`: the ArmadaManifest that deploys (see [`armada::load_targeted`]).
    pub target_manifest: Option<String>,
    /// `--armada-values`: Armada override files of the repository, merged in order on top of
    /// the documents they name (see [`armada::overrides`]); not loaded as documents.
    pub armada_values: Vec<String>,
}

/// Whether a file may be a SOPS file (an encrypted value, or a `sops` key anywhere): its
/// documents are parsed together, as decryption needs them all.
fn may_be_sops(bytes: &[u8]) -> bool {
    crate::sops::may_be_encrypted(bytes) || bytes.windows(5).any(|w| w == b"sops:")
}

/// sops's own configuration (creation rules), not a manifest.
fn is_sops_config(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name == ".sops.yaml" || name == ".sops.yml"
}

/// Load every `*.yaml`/`*.yml` of the snapshot, without decryption keys. See [`load_with`].
pub fn load(snapshot: Arc<Snapshot>) -> Result<(LoadedRepo, Diagnostics), LoadError> {
    load_with(snapshot, &LoadOptions::default())
}

/// Load every `*.yaml`/`*.yml` of the snapshot (SOPS files decrypted with `opts`' identities).
/// Returns the typed repository and its warnings, or every error found (not just the first).
///
/// A directory holding a `Chart.yaml` is skipped only when an Armada chart names it as its
/// `local` source: a stray `Chart.yaml` gets a warning and its directory is loaded like any other,
/// so adding one can never make manifests vanish from git (and be pruned).
pub fn load_with(
    snapshot: Arc<Snapshot>,
    opts: &LoadOptions,
) -> Result<(LoadedRepo, Diagnostics), LoadError> {
    let candidates = chart_dirs(&snapshot);
    let mut loader = Loader {
        opts,
        budget: budget::Budget::default(),
        stopped: false,
        diags: Diagnostics::default(),
        cleartexts: sops::Cleartexts::default(),
        kustomize: kustomize::KustomizeFiles::of(&snapshot),
        seen: HashMap::new(),
        armada_docs: Vec::new(),
        weaveclouds: Vec::new(),
        manifests: Vec::new(),
    };
    // Outside every chart directory first: the Armada documents say which ones are charts.
    let is_override = |path: &String| opts.armada_values.contains(path);
    for (path, bytes) in snapshot.files.iter() {
        if !under_any(path, &candidates) && !is_override(path) {
            loader.file(path, bytes);
        }
    }
    let referenced = armada::local_chart_dirs(&loader.armada_docs);
    // A document that failed (an undecryptable Armada file, say) may be the chart naming a
    // directory: then no directory is called stray, every one is treated as a chart (its SOPS
    // files decrypted, their errors reported too), and the load fails on the errors found.
    let undecided = loader.diags.has_errors();
    let (charts, stray): (Vec<String>, Vec<String>) = candidates
        .into_iter()
        .partition(|dir| undecided || under_any(dir, &referenced));
    for dir in &stray {
        loader.diags.warning(
            Origin {
                file: format!("{dir}Chart.yaml"),
                pos: Pos { line: 1, col: 1 },
            },
            format!(
                "no Armada chart has `{}` as its local source, so this directory is loaded as \
                 manifests; reference it from a chart (`source.type: local`) or move it out of the \
                 synced path",
                if dir.is_empty() {
                    "."
                } else {
                    dir.trim_end_matches('/')
                }
            ),
        );
    }
    for (path, bytes) in snapshot.files.iter() {
        if under_any(path, &stray)
            && !under_any(path, &referenced)
            && !is_override(path)
            && !is_chart_metadata(path, &stray)
        {
            loader.file(path, bytes);
        }
    }
    let Loader {
        mut diags,
        mut cleartexts,
        mut armada_docs,
        weaveclouds,
        manifests,
        budget,
        ..
    } = loader;
    // Charts read their files from the repository's snapshot: encrypted ones in cleartext.
    let snapshot = match sops::decrypt_chart_files(
        &snapshot,
        &charts,
        &opts.identities,
        &mut cleartexts,
        &mut diags,
    ) {
        Some(decrypted) => Arc::new(decrypted),
        None => snapshot,
    };
    armada::overrides::hint_unpassed(&armada_docs, &mut diags);
    for path in &opts.armada_values {
        let overrides = armada::overrides::read(&snapshot, path, &mut diags);
        armada::overrides::apply(&mut armada_docs, &overrides, &mut diags);
    }
    let mut armada =
        armada::load_targeted(armada_docs, opts.target_manifest.as_deref(), &mut diags);
    armada.budget = budget.clone();
    let repo = LoadedRepo {
        revision: snapshot.revision.clone(),
        snapshot,
        weaveclouds,
        manifests,
        armada,
        budget,
    };
    check_one_weavecloud_per_namespace(&repo, &mut diags);
    for d in &mut diags.0 {
        d.message = cleartexts.redact(&d.message);
    }
    diags.0.sort();
    if diags.has_errors() {
        return Err(LoadError(diags));
    }
    Ok((repo, diags))
}

/// A chart's own description (`Chart.yaml`, `values.yaml`, `requirements.yaml` directly in a
/// chart directory of `dirs`): never a manifest, even in a chart no Armada chart names.
fn is_chart_metadata(path: &str, dirs: &[String]) -> bool {
    const METADATA: &[&str] = &["Chart.yaml", "values.yaml", "requirements.yaml"];
    dirs.iter().any(|d| {
        path.strip_prefix(d.as_str())
            .is_some_and(|rest| METADATA.contains(&rest))
    })
}

/// `path` lies in one of `dirs` (directory prefixes ending in `/`, `""` for the root).
fn under_any(path: &str, dirs: &[String]) -> bool {
    dirs.iter()
        .any(|d| d.is_empty() || path.starts_with(d.as_str()))
}

/// The most diagnostics one load collects: past them it stops reading (a file of a million
/// broken documents must not make a million messages).
pub const MAX_DIAGNOSTICS: usize = 10_000;

/// The state of one load while it goes through the files.
struct Loader<'a> {
    opts: &'a LoadOptions,
    /// The one budget of the load (and of the render after it).
    budget: budget::Budget,
    /// Too many diagnostics: the rest of the repository is not read.
    stopped: bool,
    diags: Diagnostics,
    cleartexts: sops::Cleartexts,
    /// What the repository's kustomizations name (patches, generator inputs): not manifests.
    kustomize: kustomize::KustomizeFiles,
    seen: HashMap<String, Origin>,
    armada_docs: Vec<RawDoc>,
    weaveclouds: Vec<Sourced<WeaveCloud>>,
    manifests: Vec<Sourced<Doc>>,
}

impl Loader<'_> {
    /// Parse, decrypt and classify the documents of one file.
    fn file(&mut self, path: &str, bytes: &[u8]) {
        // A Flux repository's files that Weft cannot honour are refused where they are.
        if flux::is_kustomization_file(path) {
            return flux::refuse_kustomization(path, &mut self.diags);
        }
        if flux::is_flux_components(path) {
            return flux::refuse_flux_components(path, &mut self.diags);
        }
        if !is_yaml(path) || is_sops_config(path) || self.stop_if_too_many(path) {
            return;
        }
        if let Some(reference) = self.kustomize.reference(path) {
            // Parsed only to say what the patch patches; a file that does not parse is still
            // the kustomization's.
            let first = std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| yaml::parse_documents(text, YamlLimits::default()).ok())
                .and_then(|docs| docs.into_iter().find(|d| !d.value.is_null()))
                .map(|d| d.value);
            return kustomize::refuse_named(path, reference, first.as_ref(), &mut self.diags);
        }
        let file_origin = Origin {
            file: path.to_string(),
            pos: Pos { line: 1, col: 1 },
        };
        let Ok(text) = std::str::from_utf8(bytes) else {
            self.diags.error(file_origin, "file is not valid UTF-8");
            return;
        };
        let limits = YamlLimits::default();
        let mut budget = self.budget.clone();
        let parse_error = |diags: &mut Diagnostics, e: yaml::YamlError| {
            diags.error(
                Origin {
                    file: path.to_string(),
                    pos: e.pos,
                },
                e.message,
            )
        };
        if !may_be_sops(bytes) {
            // Each document is classified as soon as it is parsed: a file of many documents
            // is never held whole as trees.
            let result = yaml::for_each_document(text, limits, &mut budget, |doc| {
                self.parsed(path, doc);
            });
            if let Err(e) = result {
                parse_error(&mut self.diags, e);
            }
            return;
        }
        let mut docs = match yaml::parse_documents_in(text, limits, &mut budget) {
            Ok(d) => d,
            Err(e) => return parse_error(&mut self.diags, e),
        };
        let decryption = sops::decrypt_documents(
            path,
            bytes,
            &mut docs,
            &self.opts.identities,
            &mut self.cleartexts,
            &mut self.diags,
        );
        if decryption == sops::FileDecryption::Failed {
            return;
        }
        for doc in docs {
            self.parsed(path, doc);
        }
    }

    /// Classify one parsed document of `path` (empty ones are skipped).
    fn parsed(&mut self, path: &str, doc: yaml::YamlDoc) {
        if doc.value.is_null() || self.stopped {
            return;
        }
        let raw = RawDoc {
            origin: Origin {
                file: path.to_string(),
                pos: doc.positions.get("").unwrap_or(doc.start),
            },
            value: doc.value,
            positions: doc.positions,
        };
        self.document(raw);
        self.stop_if_too_many(path);
    }

    /// Stop reading once [`MAX_DIAGNOSTICS`] were collected, with an error saying so.
    fn stop_if_too_many(&mut self, path: &str) -> bool {
        if !self.stopped && self.diags.0.len() >= MAX_DIAGNOSTICS {
            self.stopped = true;
            self.diags.error(
                Origin {
                    file: path.to_string(),
                    pos: Pos { line: 1, col: 1 },
                },
                format!(
                    "{MAX_DIAGNOSTICS} problems found; the rest of the repository was not read (fix these first)"
                ),
            );
        }
        self.stopped
    }

    fn document(&mut self, raw: RawDoc) {
        let diags = &mut self.diags;
        match &raw.value {
            Value::Null => return,
            Value::Object(_) => {}
            other => {
                diags.error(
                    raw.origin.clone(),
                    format!(
                        "a document must be a mapping (an object), not {}",
                        schema_type(other)
                    ),
                );
                return;
            }
        }
        if armada::is_native(&raw.value) {
            self.armada_docs.push(raw);
            return;
        }
        let typeless = raw.value.get("apiVersion").is_none() && raw.value.get("kind").is_none();
        if typeless && self.kustomize.beside(&raw.origin.file) {
            return kustomize::refuse_unnamed_input(&raw, diags);
        }
        let Some(identity) = identify(&raw, diags) else {
            return;
        };
        // Before the duplicate check: each cluster's directory of a Flux repository declares
        // the same Flux objects (`flux-system/apps`), each to be named as what it is.
        if flux::refuse_flux_kind(&raw, &identity.api_version, &identity.kind, diags) {
            return;
        }
        if let Some(first) = self.seen.get(&identity.key) {
            diags.error(
                raw.origin.clone(),
                format!("{} is defined twice: first at {first}", identity.display),
            );
            return;
        }
        self.seen.insert(identity.key.clone(), raw.origin.clone());
        if identity.api_version == WEAVECLOUD_API_VERSION && identity.kind == "WeaveCloud" {
            if let Some(wc) = load_weavecloud(raw, weavecloud_schema(), diags) {
                self.weaveclouds.push(wc);
            }
        } else if armada::is_armada_cr(&identity.api_version, &identity.kind) {
            self.armada_docs.push(raw);
        } else {
            let doc = Doc::new(&raw.value);
            flux::warn_unsubstituted(&raw, doc.raw().get(), diags);
            self.manifests.push(Sourced {
                value: doc,
                origin: raw.origin,
            });
        }
    }
}

struct Identity {
    api_version: String,
    kind: String,
    key: String,
    display: String,
}

/// apiVersion, kind and metadata.name must be present strings.
fn identify(raw: &RawDoc, diags: &mut Diagnostics) -> Option<Identity> {
    let mut field = |pointer: &str, name: &str| -> Option<String> {
        match raw.value.pointer(pointer) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(other) if !other.is_null() => {
                diags.error(
                    raw.origin_of(pointer),
                    format!("`{name}` must be a string, not {}", schema_type(other)),
                );
                None
            }
            _ => {
                diags.error(
                    raw.origin_of(pointer),
                    format!("missing required field `{name}`"),
                );
                None
            }
        }
    };
    let api_version = field("/apiVersion", "apiVersion");
    let kind = field("/kind", "kind");
    let name = field("/metadata/name", "metadata.name");
    let (api_version, kind, name) = (api_version?, kind?, name?);
    let namespace = raw
        .value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    // Quoted in messages: cut to a bound (the names are the repository's, unchecked yet).
    let display = if namespace.is_empty() {
        format!("{} `{}`", yaml::quoted(&kind), yaml::quoted(&name))
    } else {
        format!(
            "{} `{}/{}`",
            yaml::quoted(&kind),
            yaml::quoted(&namespace),
            yaml::quoted(&name)
        )
    };
    Some(Identity {
        key: format!("{group}|{kind}|{namespace}|{name}"),
        api_version,
        kind,
        display,
    })
}

fn schema_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The WeaveCloud CRD's schema, built on the first WeaveCloud document of the process and kept
/// for the next loads: a daemon whose repositories hold none never builds it (with the Armada
/// schemas, 0.43 MB that an idle daemon held, measured with heaptrack).
fn weavecloud_schema(
) -> &'static k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps {
    static SCHEMA: std::sync::OnceLock<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
    > = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| crd_schema(WeaveCloud::crd()))
}

/// The openAPI schema of a CRD's first version.
pub fn crd_schema(
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps {
    crd.spec
        .versions
        .into_iter()
        .next()
        .and_then(|v| v.schema)
        .and_then(|s| s.open_api_v3_schema)
        .unwrap_or_default()
}

/// Validate `raw` against a CRD schema and report every issue with its position. Returns the
/// (kebab-case-normalised) value when there were no errors.
pub fn validate_against(
    mut raw: RawDoc,
    schema: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
    diags: &mut Diagnostics,
) -> Option<RawDoc> {
    let mut issues = Vec::new();
    // apiVersion/kind/metadata are checked by `identify`; validate everything else.
    if let Value::Object(map) = &mut raw.value {
        for (key, child) in map.iter_mut() {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            let pointer = format!("/{key}");
            match schema.properties.as_ref().and_then(|p| p.get(key)) {
                Some(s) => schema::validate(child, s, &pointer, &mut issues),
                None => issues.push(schema::SchemaIssue {
                    pointer,
                    message: format!("unknown field `{key}`"),
                    warning: false,
                }),
            }
        }
        for req in schema.required.iter().flatten() {
            if !map.contains_key(req) {
                issues.push(schema::SchemaIssue {
                    pointer: String::new(),
                    message: format!("missing required field `{req}`"),
                    warning: false,
                });
            }
        }
    }
    let mut ok = true;
    for issue in issues {
        // Positions were recorded under the original (kebab-case) keys.
        let origin = raw.origin_of(&issue.pointer);
        let origin = if issue.warning {
            kebab_origin(&raw, &issue.pointer).unwrap_or(origin)
        } else {
            origin
        };
        if issue.warning {
            diags.warning(origin, issue.message);
        } else {
            ok = false;
            diags.error(origin, issue.message);
        }
    }
    ok.then_some(raw)
}

/// Parse an `agentVersion` constraint: semver ranges (`>=1.2, <2`), and `1.x` / `1.2.x` wildcards.
pub fn parse_version_range(range: &str) -> Result<semver::VersionReq, semver::Error> {
    let normalised = range.replace(".x", ".*").replace(".X", ".*");
    semver::VersionReq::parse(&normalised)
}

fn check_one_weavecloud_per_namespace(repo: &LoadedRepo, diags: &mut Diagnostics) {
    let mut by_ns: HashMap<&str, &Origin> = HashMap::new();
    for wc in &repo.weaveclouds {
        let ns = wc.value.metadata.namespace.as_deref().unwrap_or("");
        if let Some(first) = by_ns.insert(ns, &wc.origin) {
            diags.error(
                wc.origin.clone(),
                format!("a second WeaveCloud in namespace `{ns}` (first at {first}); one WeaveCloud per namespace"),
            );
        }
    }
}

#[cfg(test)]
mod tests;
