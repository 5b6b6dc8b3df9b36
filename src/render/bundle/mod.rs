//! The agent bundle: a versioned set of agent manifest templates (flux + memcached, scope,
//! prometheus + kube-state-metrics + node-exporter) with an index, `bundle.yaml`.
//!
//! One bundle is built into the binary (the `agents/` directory, embedded with `include_str!`),
//! so Weft works offline; a bundle fetched from a channel arrives as a map of path → bytes and is
//! parsed by the same [`Bundle::from_files`]. Parsing checks everything the renderer relies on
//! (every file named by the index exists and is YAML, every object has a kind and a name, the
//! agent containers and the prometheus configuration exist), so a bad bundle is refused before
//! anything is rendered, with the file and line at fault.
//!
//! The layout and the option contract are documented in `docs/agents.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::weavecloud::Environment;
use crate::load::yaml::{parse_documents, Pos, YamlLimits};

mod contents_policy;
pub use contents_policy::ALLOWED_KINDS;

/// The index file at the root of a bundle.
pub const INDEX_FILE: &str = "bundle.yaml";

/// Largest file a bundle may hold: agent manifests are a few kilobytes; anything much bigger
/// is not a bundle. Defined by the source stage, which unpacks fetched bundles with that limit.
pub use crate::source::channel::MAX_BUNDLE_FILE_BYTES as MAX_FILE_BYTES;

/// Kinds that have no namespace. The renderer makes their names unique per WeaveCloud.
pub const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "StorageClass",
    "RuntimeClass",
    "SecurityContextConstraints",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

/// The built-in bundle's files, relative to `agents/`.
const BUILTIN_FILES: &[(&str, &str)] = &[
    (INDEX_FILE, include_str!("../../../agents/bundle.yaml")),
    (
        "flux/rbac.yaml",
        include_str!("../../../agents/flux/rbac.yaml"),
    ),
    (
        "flux/memcached.yaml",
        include_str!("../../../agents/flux/memcached.yaml"),
    ),
    (
        "flux/flux.yaml",
        include_str!("../../../agents/flux/flux.yaml"),
    ),
    (
        "scope/rbac.yaml",
        include_str!("../../../agents/scope/rbac.yaml"),
    ),
    (
        "scope/scope.yaml",
        include_str!("../../../agents/scope/scope.yaml"),
    ),
    (
        "scope/cluster-agent.yaml",
        include_str!("../../../agents/scope/cluster-agent.yaml"),
    ),
    (
        "scope/openshift.yaml",
        include_str!("../../../agents/scope/openshift.yaml"),
    ),
    (
        "prometheus/rbac.yaml",
        include_str!("../../../agents/prometheus/rbac.yaml"),
    ),
    (
        "prometheus/config.yaml",
        include_str!("../../../agents/prometheus/config.yaml"),
    ),
    (
        "prometheus/prometheus.yaml",
        include_str!("../../../agents/prometheus/prometheus.yaml"),
    ),
    (
        "prometheus/kube-state-metrics.yaml",
        include_str!("../../../agents/prometheus/kube-state-metrics.yaml"),
    ),
    (
        "prometheus/node-exporter.yaml",
        include_str!("../../../agents/prometheus/node-exporter.yaml"),
    ),
    (
        "prometheus/openshift.yaml",
        include_str!("../../../agents/prometheus/openshift.yaml"),
    ),
];

/// Why a bundle was refused. Every message names the bundle file (and line) to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("the bundle has no {INDEX_FILE} at its root")]
    MissingIndex,
    #[error("{file}: {message}")]
    Index { file: String, message: String },
    #[error("{INDEX_FILE}: `{field}` names `{path}`, which is not in the bundle")]
    MissingFile { field: String, path: String },
    #[error("{path}: {size} bytes is more than the {MAX_FILE_BYTES} bytes a bundle file may have")]
    TooLarge { path: String, size: usize },
    #[error("{path}: not UTF-8 text")]
    NotText { path: String },
    #[error("{path}:{pos}: {message}")]
    Template {
        path: String,
        pos: Pos,
        message: String,
    },
}

/// One of the three agents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Agent {
    Flux,
    Scope,
    Prometheus,
}

impl Agent {
    /// Every agent, in render order.
    pub const ALL: [Agent; 3] = [Agent::Flux, Agent::Scope, Agent::Prometheus];

    /// The agent's key in `bundle.yaml` and in the WeaveCloud spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Agent::Flux => "flux",
            Agent::Scope => "scope",
            Agent::Prometheus => "prometheus",
        }
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One object of the bundle, as parsed, with where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    /// The object (apiVersion, kind, metadata.name, …), without a namespace.
    pub object: Value,
    /// Bundle file it came from.
    pub file: String,
    /// Where in that file.
    pub pos: Pos,
}

impl Template {
    pub fn kind(&self) -> &str {
        self.object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    pub fn name(&self) -> &str {
        self.object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    /// `file:line:col`, for error messages.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.pos)
    }
}

/// A container of an agent that receives the token and generated arguments: the agent's own
/// container (the first of [`AgentTemplates::containers`], which also gets `appendArgs`), or
/// another one of the same agent (scope's cluster agent beside its per-node probe).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerRef {
    /// Kind of the workload (`Deployment`, `DaemonSet`, …).
    pub kind: String,
    /// Name of the workload.
    pub name: String,
    /// Name of the container in its pod template.
    pub container: String,
}

/// Where prometheus' configuration lives and which scrape job `podScrapePolicy` governs.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrometheusConfigRef {
    /// Name of the ConfigMap.
    pub config_map: String,
    /// Key of the ConfigMap's data that holds `prometheus.yml`.
    pub key: String,
    /// `job_name` of the scrape job that discovers pods.
    pub pods_job: String,
}

/// The templates of one agent.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentTemplates {
    /// Objects rendered on every platform.
    pub templates: Vec<Template>,
    /// Extra objects per environment (`openshift`, …), keyed by the environment's name.
    pub environments: BTreeMap<String, Vec<Template>>,
    /// The containers Weft configures, never empty: the agent's own container first (generated
    /// arguments, the arguments kept from a running agent, `appendArgs`), then any others
    /// (the token, the target, the agent's shared flags; see docs/agents.md).
    pub containers: Vec<ContainerRef>,
}

impl AgentTemplates {
    /// The agent's own container (the first of [`AgentTemplates::containers`]).
    pub fn container(&self) -> &ContainerRef {
        // `from_files` refuses an agent without a container, and nothing else builds one.
        &self.containers[0]
    }

    /// The position of `kind`/`name` among the configured workloads (0: the agent's own).
    pub fn container_of(&self, kind: &str, name: &str) -> Option<(usize, &ContainerRef)> {
        self.containers
            .iter()
            .enumerate()
            .find(|(_, c)| c.kind == kind && c.name == name)
    }

    /// The templates rendered for `environment`: the common ones, then the environment's.
    pub fn for_environment(&self, environment: Environment) -> impl Iterator<Item = &Template> {
        let extra = self.environments.get(&environment_name(environment));
        self.templates.iter().chain(extra.into_iter().flatten())
    }

    /// Every template, whatever the environment.
    pub fn all(&self) -> impl Iterator<Item = &Template> {
        self.templates
            .iter()
            .chain(self.environments.values().flatten())
    }
}

/// A parsed, checked agent bundle.
#[derive(Clone, Debug, PartialEq)]
pub struct Bundle {
    /// The bundle's version (`bundle.yaml` `version`), what `status.agentVersion` reports.
    pub version: semver::Version,
    pub flux: AgentTemplates,
    pub scope: AgentTemplates,
    pub prometheus: AgentTemplates,
    /// Where prometheus' configuration is.
    pub prometheus_config: PrometheusConfigRef,
    /// sha256 over the index and the files it names (path and content), hex: two bundles with
    /// the same digest render the same objects.
    pub digest: String,
}

// The index, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Index {
    version: String,
    agents: IndexAgents,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexAgents {
    flux: IndexAgent,
    scope: IndexAgent,
    prometheus: IndexAgent,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexAgent {
    files: Vec<String>,
    /// One container (every bundle before the second one existed) …
    #[serde(default)]
    container: Option<ContainerRef>,
    /// … or several, the agent's own first.
    #[serde(default)]
    containers: Vec<ContainerRef>,
    #[serde(default)]
    environments: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    config: Option<PrometheusConfigRef>,
}

/// The name an environment has in the CRD and in `bundle.yaml` (`openshift`, `gke`, …).
pub fn environment_name(environment: Environment) -> String {
    match serde_json::to_value(environment) {
        Ok(Value::String(s)) => s,
        // A unit enum variant always serialises to a string.
        _ => format!("{environment:?}").to_lowercase(),
    }
}

impl Bundle {
    /// The bundle built into Weft (`agents/`). Parsed once; an error here is a defect of the
    /// release, and a unit test keeps it from happening.
    pub fn builtin() -> Result<&'static Bundle, BundleError> {
        static BUILTIN: OnceLock<Result<Bundle, BundleError>> = OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                let files = BUILTIN_FILES
                    .iter()
                    .map(|(path, text)| (path.to_string(), text.as_bytes().to_vec()))
                    .collect();
                Bundle::from_files(files)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Parse and check a bundle from its files (path relative to the bundle root → content).
    /// Paths may start with `./`, and the whole bundle may sit in one top-level directory (as
    /// in a `.tar.gz` of `agents/`). Files the index does not name are ignored.
    pub fn from_files(files: BTreeMap<String, Vec<u8>>) -> Result<Bundle, BundleError> {
        let files = normalise_paths(files)?;
        let index_bytes = files.get(INDEX_FILE).ok_or(BundleError::MissingIndex)?;
        let index_text = text_of(INDEX_FILE, index_bytes)?;
        let index: Index = serde_saphyr::from_str(index_text).map_err(|e| BundleError::Index {
            file: INDEX_FILE.to_string(),
            message: e.to_string(),
        })?;
        let version =
            semver::Version::parse(index.version.trim()).map_err(|e| BundleError::Index {
                file: INDEX_FILE.to_string(),
                message: format!(
                    "`version: {}` is not a semantic version: {e}",
                    index.version
                ),
            })?;

        let mut digest = Sha256::new();
        digest_file(&mut digest, INDEX_FILE, index_bytes);
        let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut load_agent = |agent: Agent,
                              spec: &IndexAgent|
         -> Result<AgentTemplates, BundleError> {
            let field = format!("agents.{agent}.files");
            let templates = load_files(&files, &field, &spec.files, &mut digest, &mut seen)?;
            let mut environments = BTreeMap::new();
            for (env, env_files) in &spec.environments {
                let known: Result<Environment, _> =
                    serde_json::from_value(Value::String(env.clone()));
                if known.is_err() {
                    return Err(BundleError::Index {
                        file: INDEX_FILE.to_string(),
                        message: format!(
                            "`agents.{agent}.environments.{env}`: unknown environment (one of gke, eks, aks, openshift, minikube, generic)"
                        ),
                    });
                }
                let field = format!("agents.{agent}.environments.{env}");
                environments.insert(
                    env.clone(),
                    load_files(&files, &field, env_files, &mut digest, &mut seen)?,
                );
            }
            let containers = match (&spec.container, spec.containers.as_slice()) {
                (Some(one), []) => vec![one.clone()],
                (None, [_, ..]) => spec.containers.clone(),
                (Some(_), [_, ..]) => {
                    return Err(BundleError::Index {
                        file: INDEX_FILE.to_string(),
                        message: format!(
                            "`agents.{agent}`: write either `container` or `containers`, not both"
                        ),
                    })
                }
                (None, []) => {
                    return Err(BundleError::Index {
                        file: INDEX_FILE.to_string(),
                        message: format!(
                            "`agents.{agent}`: `container` (or a non-empty `containers`) is missing: it names the container Weft configures"
                        ),
                    })
                }
            };
            let templates = AgentTemplates {
                templates,
                environments,
                containers,
            };
            check_container(agent, &templates)?;
            if spec.config.is_some() && agent != Agent::Prometheus {
                return Err(BundleError::Index {
                    file: INDEX_FILE.to_string(),
                    message: format!(
                        "`agents.{agent}.config`: only the prometheus agent has a `config`"
                    ),
                });
            }
            Ok(templates)
        };
        let flux = load_agent(Agent::Flux, &index.agents.flux)?;
        let scope = load_agent(Agent::Scope, &index.agents.scope)?;
        let prometheus = load_agent(Agent::Prometheus, &index.agents.prometheus)?;
        let prometheus_config = index.agents.prometheus.config.clone().ok_or_else(|| BundleError::Index {
            file: INDEX_FILE.to_string(),
            message: "`agents.prometheus.config` is missing: it names the ConfigMap, key and pods scrape job of prometheus".to_string(),
        })?;
        check_prometheus_config(&prometheus, &prometheus_config)?;

        let bundle = Bundle {
            version,
            flux,
            scope,
            prometheus,
            prometheus_config,
            digest: hex::encode(digest.finalize()),
        };
        contents_policy::check_rbac(&bundle)?;
        Ok(bundle)
    }

    /// The templates of one agent.
    pub fn agent(&self, agent: Agent) -> &AgentTemplates {
        match agent {
            Agent::Flux => &self.flux,
            Agent::Scope => &self.scope,
            Agent::Prometheus => &self.prometheus,
        }
    }

    /// Names of every ClusterRole of the bundle (all agents, all environments): bindings that
    /// refer to one of these refer to the renamed, per-WeaveCloud copy.
    pub fn cluster_role_names(&self) -> BTreeSet<String> {
        Agent::ALL
            .iter()
            .flat_map(|a| self.agent(*a).all())
            .filter(|t| t.kind() == "ClusterRole")
            .map(|t| t.name().to_string())
            .collect()
    }
}

fn digest_file(digest: &mut Sha256, path: &str, bytes: &[u8]) {
    // Length-prefixed, so that moving bytes between a path and a content changes the digest.
    digest.update((path.len() as u64).to_be_bytes());
    digest.update(path.as_bytes());
    digest.update((bytes.len() as u64).to_be_bytes());
    digest.update(bytes);
}

fn text_of<'a>(path: &str, bytes: &'a [u8]) -> Result<&'a str, BundleError> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(BundleError::TooLarge {
            path: path.to_string(),
            size: bytes.len(),
        });
    }
    std::str::from_utf8(bytes).map_err(|_| BundleError::NotText {
        path: path.to_string(),
    })
}

/// Strip `./`, and a single top-level directory when the index is only found inside one.
fn normalise_paths(
    files: BTreeMap<String, Vec<u8>>,
) -> Result<BTreeMap<String, Vec<u8>>, BundleError> {
    let files: BTreeMap<String, Vec<u8>> = files
        .into_iter()
        .map(|(path, bytes)| (path.trim_start_matches("./").to_string(), bytes))
        .collect();
    if files.contains_key(INDEX_FILE) {
        return Ok(files);
    }
    let prefixes: Vec<String> = files
        .keys()
        .filter_map(|p| p.strip_suffix(INDEX_FILE))
        .filter(|prefix| prefix.ends_with('/') && prefix.matches('/').count() == 1)
        .map(str::to_string)
        .collect();
    match prefixes.as_slice() {
        [prefix] => Ok(files
            .into_iter()
            .filter_map(|(path, bytes)| {
                path.strip_prefix(prefix.as_str())
                    .map(|p| (p.to_string(), bytes))
            })
            .collect()),
        _ => Err(BundleError::MissingIndex),
    }
}

fn load_files(
    files: &BTreeMap<String, Vec<u8>>,
    field: &str,
    paths: &[String],
    digest: &mut Sha256,
    seen: &mut BTreeMap<(String, String), String>,
) -> Result<Vec<Template>, BundleError> {
    let mut out = Vec::new();
    for path in paths {
        let bytes = files.get(path).ok_or_else(|| BundleError::MissingFile {
            field: field.to_string(),
            path: path.clone(),
        })?;
        digest_file(digest, path, bytes);
        for template in parse_templates(path, text_of(path, bytes)?)? {
            let key = (template.kind().to_string(), template.name().to_string());
            if let Some(first) = seen.get(&key) {
                return Err(BundleError::Template {
                    path: template.file.clone(),
                    pos: template.pos,
                    message: format!("{} `{}` is already defined at {first}", key.0, key.1),
                });
            }
            seen.insert(key, template.location());
            out.push(template);
        }
    }
    Ok(out)
}

/// Every object of one file; `kind: List` documents are expanded into their items.
fn parse_templates(path: &str, text: &str) -> Result<Vec<Template>, BundleError> {
    let docs = parse_documents(text, YamlLimits::default()).map_err(|e| BundleError::Template {
        path: path.to_string(),
        pos: e.pos,
        message: e.message,
    })?;
    let mut out = Vec::new();
    for doc in docs {
        if doc.value.is_null() {
            continue;
        }
        let at = |pointer: &str| doc.positions.find(pointer);
        if doc.value.get("kind").and_then(Value::as_str) == Some("List") {
            let items = doc
                .value
                .get("items")
                .and_then(Value::as_array)
                .ok_or_else(|| BundleError::Template {
                    path: path.to_string(),
                    pos: at(""),
                    message: "a `kind: List` needs an `items` list".to_string(),
                })?;
            for (i, item) in items.iter().enumerate() {
                out.push(check_template(
                    path,
                    item.clone(),
                    at(&format!("/items/{i}")),
                )?);
            }
        } else {
            out.push(check_template(path, doc.value, at(""))?);
        }
    }
    Ok(out)
}

fn check_template(path: &str, object: Value, pos: Pos) -> Result<Template, BundleError> {
    let fail = |message: String| BundleError::Template {
        path: path.to_string(),
        pos,
        message,
    };
    if !object.is_object() {
        return Err(fail(
            "a bundle document must be a Kubernetes object (a mapping)".to_string(),
        ));
    }
    for (pointer, field) in [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
    ] {
        match object.pointer(pointer).and_then(Value::as_str) {
            Some(s) if !s.is_empty() => {}
            _ => return Err(fail(format!("missing `{field}`"))),
        }
    }
    let template = Template {
        object,
        file: path.to_string(),
        pos,
    };
    contents_policy::check_kind(&template).map_err(fail)?;
    if template.object.pointer("/metadata/namespace").is_some() {
        return Err(fail(format!(
            "{} `{}` sets `metadata.namespace`: bundle objects have none, they are rendered into the WeaveCloud's namespace",
            template.kind(),
            template.name()
        )));
    }
    Ok(template)
}

/// The JSON pointer of the pod template of a workload kind.
pub fn pod_template_pointer(kind: &str) -> Option<&'static str> {
    match kind {
        "Deployment" | "DaemonSet" | "StatefulSet" | "ReplicaSet" | "Job" => Some("/spec/template"),
        "CronJob" => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

/// Index of the container named `name` in a workload's pod template.
pub fn container_index(object: &Value, kind: &str, name: &str) -> Option<usize> {
    let template = pod_template_pointer(kind)?;
    object
        .pointer(&format!("{template}/spec/containers"))?
        .as_array()?
        .iter()
        .position(|c| c.get("name").and_then(Value::as_str) == Some(name))
}

fn check_container(agent: Agent, templates: &AgentTemplates) -> Result<(), BundleError> {
    let mut seen = BTreeSet::new();
    for (i, c) in templates.containers.iter().enumerate() {
        let field = if templates.containers.len() == 1 {
            format!("agents.{agent}.container")
        } else {
            format!("agents.{agent}.containers[{i}]")
        };
        let fail = |message: String| BundleError::Index {
            file: INDEX_FILE.to_string(),
            message: format!("`{field}`: {message}"),
        };
        if pod_template_pointer(&c.kind).is_none() {
            return Err(fail(format!(
                "{} is not a workload kind with a pod template",
                c.kind
            )));
        }
        if !seen.insert((c.kind.as_str(), c.name.as_str())) {
            return Err(fail(format!(
                "{} `{}` is named twice: one configured container per workload",
                c.kind, c.name
            )));
        }
        let workload = templates
            .templates
            .iter()
            .find(|t| t.kind() == c.kind && t.name() == c.name)
            .ok_or_else(|| fail(format!("no {} `{}` in the agent's files", c.kind, c.name)))?;
        if container_index(&workload.object, &c.kind, &c.container).is_none() {
            return Err(fail(format!(
                "{} `{}` ({}) has no container `{}`",
                c.kind,
                c.name,
                workload.location(),
                c.container
            )));
        }
    }
    Ok(())
}

/// Parse prometheus' configuration out of the ConfigMap template.
pub fn prometheus_config_of(template: &Template, key: &str) -> Result<Value, BundleError> {
    let text = template
        .object
        .pointer(&format!(
            "/data/{}",
            key.replace('~', "~0").replace('/', "~1")
        ))
        .and_then(Value::as_str)
        .ok_or_else(|| BundleError::Template {
            path: template.file.clone(),
            pos: template.pos,
            message: format!("ConfigMap `{}` has no data key `{key}`", template.name()),
        })?;
    let docs = parse_documents(text, YamlLimits::default()).map_err(|e| BundleError::Template {
        path: template.file.clone(),
        pos: template.pos,
        message: format!("`data.{key}` is not valid YAML: {e}"),
    })?;
    match docs.into_iter().next() {
        Some(doc) if doc.value.is_object() => Ok(doc.value),
        _ => Err(BundleError::Template {
            path: template.file.clone(),
            pos: template.pos,
            message: format!("`data.{key}` must hold one YAML mapping (prometheus' configuration)"),
        }),
    }
}

/// Index of the scrape job named `job` in a prometheus configuration.
pub fn scrape_job_index(config: &Value, job: &str) -> Option<usize> {
    config
        .get("scrape_configs")?
        .as_array()?
        .iter()
        .position(|j| j.get("job_name").and_then(Value::as_str) == Some(job))
}

fn check_prometheus_config(
    prometheus: &AgentTemplates,
    cfg: &PrometheusConfigRef,
) -> Result<(), BundleError> {
    let config_map = prometheus
        .templates
        .iter()
        .find(|t| t.kind() == "ConfigMap" && t.name() == cfg.config_map)
        .ok_or_else(|| BundleError::Index {
            file: INDEX_FILE.to_string(),
            message: format!(
                "`agents.prometheus.config`: no ConfigMap `{}` in the agent's files",
                cfg.config_map
            ),
        })?;
    let config = prometheus_config_of(config_map, &cfg.key)?;
    let fail = |message: String| BundleError::Template {
        path: config_map.file.clone(),
        pos: config_map.pos,
        message,
    };
    if scrape_job_index(&config, &cfg.pods_job).is_none() {
        return Err(fail(format!(
            "`data.{}` has no scrape job `{}`",
            cfg.key, cfg.pods_job
        )));
    }
    if !config
        .pointer("/remote_write/0")
        .is_some_and(Value::is_object)
    {
        return Err(fail(format!(
            "`data.{}` needs a `remote_write` entry: weft points it at Weave Cloud",
            cfg.key
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
