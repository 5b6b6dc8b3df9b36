//! A WeaveCloud → its agent objects, from an agent [`Bundle`].
//!
//! The bundle's templates are parsed objects; every option of the WeaveCloud is applied to them
//! as an RFC 7386 merge patch or an RFC 6902 JSON patch (the `json-patch` crate), never by editing
//! YAML text. The option contract (which option becomes which argument, annotation or relabel
//! rule) is documented in `docs/agents.md`, and each clause has a unit test below.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::api::weavecloud::{Environment, PodScrapePolicy, WeaveCloud};

use super::bundle::{
    container_index, pod_template_pointer, prometheus_config_of, scrape_job_index, Agent, Bundle,
    Template, CLUSTER_SCOPED_KINDS,
};
use super::{order, DesiredObject, Owner, RenderError};

/// Pod-template annotation: hash of the token Secret's data, so that a new token rolls the agents.
pub const TOKEN_HASH_ANNOTATION: &str = "weft.io/token-hash";
/// What [`TOKEN_HASH_ANNOTATION`] holds when the Secret was not read (offline `weft render`).
pub const TOKEN_HASH_OFFLINE: &str = "offline";
/// Pod-template annotation of prometheus: hash of its rendered configuration, so that a change
/// of scrape policy or hostname restarts it (prometheus does not reload a ConfigMap by itself).
pub const CONFIG_HASH_ANNOTATION: &str = "weft.io/config-hash";
/// Environment variable that carries the token into flux and scope (from a `secretKeyRef`);
/// their arguments refer to it as `$(WEAVE_CLOUD_TOKEN)`, which the kubelet expands.
pub const TOKEN_ENV: &str = "WEAVE_CLOUD_TOKEN";
/// Environment variable with `spec.general.wcReportErrors` (`"true"`/`"false"`), on every agent container.
pub const REPORT_ERRORS_ENV: &str = "WEAVE_CLOUD_REPORT_ERRORS";
/// Where prometheus finds the token: the Secret mounted as a volume (prometheus cannot expand
/// environment variables in its configuration file).
pub const TOKEN_MOUNT_DIR: &str = "/etc/weave-cloud";
/// The file name of the token in [`TOKEN_MOUNT_DIR`].
pub const TOKEN_FILE: &str = "token";
const TOKEN_VOLUME: &str = "weave-cloud-token";
const CRI_VOLUME: &str = "cri-socket";

/// The flux arguments that are kept from a flux agent already running in the cluster when
/// `flux.config` does not set them (the ones the old launcher carried over).
pub const PRESERVABLE_FLUX_ARGS: &[&str] = &[
    "git-url",
    "git-branch",
    "git-path",
    "git-label",
    "git-poll-interval",
    "git-timeout",
    "git-set-author",
    "git-ci-skip",
    "sync-garbage-collection",
    "registry-ecr-region",
    "registry-require",
    "registry-exclude-image",
    "k8s-allow-namespace",
];

/// What the renderer needs from the cluster. Offline (`weft render`), [`AgentInputs::default`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentInputs {
    /// [`secret_data_hash`] of the token Secret; `None` → [`TOKEN_HASH_OFFLINE`].
    pub token_hash: Option<String>,
    /// Arguments of the flux agent running now (flag name without `--` → value), as
    /// [`parse_flux_args`] reads them. Only [`PRESERVABLE_FLUX_ARGS`] are used.
    pub preserved_flux_args: BTreeMap<String, String>,
}

/// The agents of one WeaveCloud.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedAgents {
    /// Every child object, labelled for the WeaveCloud, in apply order.
    pub objects: Vec<DesiredObject>,
    /// The flux arguments taken from `AgentInputs::preserved_flux_args` (`--git-url=…`), for
    /// `status.flux.preservedArgs` and an event. Empty when flux is disabled.
    pub preserved_flux_args: Vec<String>,
    /// The bundle version rendered, for `status.agentVersion`.
    pub bundle_version: semver::Version,
}

/// Render a WeaveCloud into its agent objects.
pub fn render_weavecloud(
    wc: &WeaveCloud,
    bundle: &Bundle,
    inputs: &AgentInputs,
) -> Result<Vec<DesiredObject>, RenderError> {
    render_agents(wc, bundle, inputs).map(|r| r.objects)
}

/// Render a WeaveCloud into its agent objects, with what the controller reports in status.
pub fn render_agents(
    wc: &WeaveCloud,
    bundle: &Bundle,
    inputs: &AgentInputs,
) -> Result<RenderedAgents, RenderError> {
    let name = wc.metadata.name.clone().unwrap_or_default();
    let namespace = wc.metadata.namespace.clone().unwrap_or_default();
    if namespace.is_empty() {
        return Err(RenderError::Other(format!(
            "WeaveCloud `{name}` has no `metadata.namespace`: its agents live in that namespace"
        )));
    }
    let general = &wc.spec.general;
    let hostname = check_hostname(&general.wc_hostname)
        .map_err(|m| RenderError::Other(format!("WeaveCloud `{namespace}/{name}`: {m}")))?;
    check_no_token_in_append_args(wc)
        .map_err(|m| RenderError::Other(format!("WeaveCloud `{namespace}/{name}`: {m}")))?;
    if let Some(socket) = cri_socket(wc) {
        if !socket.starts_with('/') {
            return Err(RenderError::Other(format!(
                "WeaveCloud `{namespace}/{name}`: `spec.scope.containerRuntimeEndpoint: {socket}` must be an absolute path (it is mounted from the host)"
            )));
        }
    }
    let ctx = Context {
        wc,
        bundle,
        namespace: &namespace,
        hostname,
        token_hash: inputs.token_hash.as_deref().unwrap_or(TOKEN_HASH_OFFLINE),
        cluster_roles: bundle.cluster_role_names(),
    };
    let owner = Owner::Resource {
        kind: "WeaveCloud".to_string(),
        namespace: namespace.clone(),
        name,
    };

    let mut objects = Vec::new();
    let mut preserved = Vec::new();
    for agent in Agent::ALL {
        if agent_disabled(wc, agent) {
            continue;
        }
        let templates = bundle.agent(agent);
        let agent_container = &templates.container;
        for template in templates.for_environment(general.environment) {
            let mut object = template.object.clone();
            ctx.common_patches(template, &mut object)?;
            if template.kind() == agent_container.kind && template.name() == agent_container.name {
                let (args, kept) = match agent {
                    Agent::Flux => flux_args(wc, &ctx, &inputs.preserved_flux_args),
                    Agent::Scope => (scope_args(wc, &ctx), Vec::new()),
                    Agent::Prometheus => (wc.spec.prometheus.append_args.clone(), Vec::new()),
                };
                preserved.extend(kept);
                ctx.agent_container_patches(agent, template, &mut object, &args)?;
            }
            if agent == Agent::Prometheus
                && template.kind() == "ConfigMap"
                && template.name() == bundle.prometheus_config.config_map
            {
                ctx.prometheus_config_patches(template, &mut object)?;
            }
            objects.push((agent, object));
        }
    }
    // prometheus restarts when its configuration changes: the hash of the rendered ConfigMap data.
    if let Some(config_hash) = objects
        .iter()
        .find(|(_, o)| kind_name(o) == ("ConfigMap", bundle.prometheus_config.config_map.as_str()))
        .map(|(_, o)| short_hash(o.get("data").unwrap_or(&Value::Null).to_string().as_bytes()))
    {
        let target = &bundle.prometheus.container;
        for (agent, object) in objects.iter_mut() {
            if *agent == Agent::Prometheus
                && kind_name(object) == (target.kind.as_str(), target.name.as_str())
            {
                let template = pod_template_pointer(&target.kind).unwrap_or("/spec/template");
                merge_at(
                    object,
                    template,
                    json!({"metadata": {"annotations": {CONFIG_HASH_ANNOTATION: config_hash}}}),
                );
            }
        }
    }

    let mut objects: Vec<DesiredObject> = objects
        .into_iter()
        .map(|(_, o)| owner.adopt(o, 0, None))
        .collect();
    order::sort(&mut objects);
    Ok(RenderedAgents {
        objects,
        preserved_flux_args: preserved,
        bundle_version: bundle.version.clone(),
    })
}

/// The value of [`TOKEN_HASH_ANNOTATION`] for a Secret's data: sha256 over the sorted keys and
/// values, first 16 bytes in hex. Any change of the Secret's data changes it.
pub fn secret_data_hash(data: &BTreeMap<String, Vec<u8>>) -> String {
    let mut h = Sha256::new();
    for (k, v) in data {
        h.update((k.len() as u64).to_be_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_be_bytes());
        h.update(v);
    }
    hex::encode(&h.finalize()[..16])
}

/// Flux flags that take a list: repeated values add up (pflag `StringSlice`).
const LIST_FLUX_ARGS: &[&str] = &[
    "git-path",
    "registry-ecr-region",
    "registry-require",
    "registry-exclude-image",
    "k8s-allow-namespace",
];
/// Flux flags that are booleans: `--flag` alone means true and never takes the next word.
const BOOL_FLUX_ARGS: &[&str] = &["git-set-author", "git-ci-skip", "sync-garbage-collection"];

/// The flag name of an argument (`--git-url=x` → `git-url`), if it is a flag.
fn flag_name(arg: &str) -> Option<&str> {
    let flag = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'))?;
    let name = flag.split_once('=').map_or(flag, |(k, _)| k);
    (!name.is_empty()).then_some(name)
}

/// Read the preservable arguments of a running flux container (`--git-url=…` or
/// `--git-url …`), with flux's own parsing rules: a repeated list flag (`--git-path`,
/// `--k8s-allow-namespace`, …) collects its values, joined with commas (which flux accepts); a
/// repeated scalar flag keeps its last value. Other arguments are ignored.
pub fn parse_flux_args(args: &[String]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        let (key, value) = match flag.split_once('=') {
            Some((k, v)) => (k, v.to_string()),
            None if BOOL_FLUX_ARGS.contains(&flag) => (flag, "true".to_string()),
            None if PRESERVABLE_FLUX_ARGS.contains(&flag) => match args.get(i) {
                // `--flag value`, as pflag reads it.
                Some(next) => {
                    i += 1;
                    (flag, next.clone())
                }
                None => continue,
            },
            None => continue,
        };
        if !PRESERVABLE_FLUX_ARGS.contains(&key) {
            continue;
        }
        match out.get_mut(key) {
            Some(v) if LIST_FLUX_ARGS.contains(&key) => {
                v.push(',');
                v.push_str(&value);
            }
            _ => {
                out.insert(key.to_string(), value);
            }
        }
    }
    out
}

fn agent_disabled(wc: &WeaveCloud, agent: Agent) -> bool {
    match agent {
        Agent::Flux => wc.spec.flux.disable,
        Agent::Scope => wc.spec.scope.disable,
        Agent::Prometheus => wc.spec.prometheus.disable,
    }
}

/// Flags that carry the Weave Cloud token (flux `--token`, scope `--probe.token` and its old
/// name `--service-token`): Weft passes the token from the Secret, and a token in `appendArgs`
/// would be written into the manifest.
const TOKEN_FLAGS: &[&str] = &["token", "probe.token", "service-token"];

fn check_no_token_in_append_args(wc: &WeaveCloud) -> Result<(), String> {
    let lists = [
        ("flux", &wc.spec.flux.append_args),
        ("scope", &wc.spec.scope.append_args),
        ("prometheus", &wc.spec.prometheus.append_args),
    ];
    for (agent, args) in lists {
        if let Some(flag) = args
            .iter()
            .filter_map(|a| flag_name(a))
            .find(|f| TOKEN_FLAGS.contains(f))
        {
            return Err(format!(
                "`spec.{agent}.appendArgs` sets `--{flag}`: the token must not be written into a manifest; \
                 Weft passes it from the Secret named by `spec.general.tokenSecretRef`"
            ));
        }
    }
    Ok(())
}

/// `wcHostname` is a host (optionally `:port`): it goes into `https://…` and `wss://…` URLs.
fn check_hostname(hostname: &str) -> Result<&str, String> {
    let h = hostname.trim();
    let bad =
        h.is_empty() || h.contains("://") || h.contains('/') || h.contains(char::is_whitespace);
    if bad {
        return Err(format!(
            "`spec.general.wcHostname: {hostname}` must be a host name such as `cloud.weave.works`, not a URL"
        ));
    }
    Ok(h)
}

/// flux: token, `--connect`, the git settings (or the preserved ones), then `appendArgs`.
fn flux_args(
    wc: &WeaveCloud,
    ctx: &Context,
    preserved: &BTreeMap<String, String>,
) -> (Vec<String>, Vec<String>) {
    let flux = &wc.spec.flux;
    let config = &flux.config;
    let mut args = vec![
        format!("--token=$({TOKEN_ENV})"),
        format!("--connect=wss://{}/api/flux", ctx.hostname),
    ];
    let configured: BTreeMap<&str, &str> = [
        ("git-url", &config.git_url),
        ("git-branch", &config.git_branch),
        ("git-path", &config.git_path),
        ("git-label", &config.git_label),
    ]
    .into_iter()
    .filter_map(|(flag, v)| v.as_deref().filter(|v| !v.is_empty()).map(|v| (flag, v)))
    .collect();
    // A flag the user sets in appendArgs is theirs: not carried over from the running agent
    // (it would also come back from the running agent's args at every reconcile).
    let appended: BTreeSet<&str> = flux
        .append_args
        .iter()
        .filter_map(|a| flag_name(a))
        .collect();
    let mut kept = Vec::new();
    for flag in PRESERVABLE_FLUX_ARGS {
        if let Some(value) = configured.get(flag) {
            args.push(format!("--{flag}={value}"));
        } else if appended.contains(flag) {
            continue;
        } else if let Some(value) = preserved.get(*flag) {
            let arg = format!("--{flag}={value}");
            kept.push(arg.clone());
            args.push(arg);
        }
    }
    args.extend(flux.append_args.iter().cloned());
    (args, kept)
}

/// scope: token, probe flags, `appendArgs`, then the target. The target is positional and scope
/// parses flags with Go's `flag` package, which stops at the first positional argument: so it
/// must stay last, and `appendArgs` go just before it.
fn scope_args(wc: &WeaveCloud, ctx: &Context) -> Vec<String> {
    let scope = &wc.spec.scope;
    let mut args = vec![
        format!("--probe.token=$({TOKEN_ENV})"),
        format!("--probe.kubernetes={}", scope.kubernetes_probe),
    ];
    if scope.read_only {
        args.push("--probe.no-controls=true".to_string());
    }
    if let Some(endpoint) = cri_socket(wc) {
        args.push("--probe.cri=true".to_string());
        args.push(format!("--probe.cri.endpoint=unix://{endpoint}"));
    }
    args.extend(scope.append_args.iter().cloned());
    args.push(format!("https://{}", ctx.hostname));
    args
}

/// The container runtime socket path, without a `unix://` a user may have written.
fn cri_socket(wc: &WeaveCloud) -> Option<String> {
    let endpoint = wc.spec.scope.container_runtime_endpoint.as_deref()?.trim();
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    (!path.is_empty()).then(|| path.to_string())
}

fn kind_name(object: &Value) -> (&str, &str) {
    (
        object.get("kind").and_then(Value::as_str).unwrap_or(""),
        object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or(""),
    )
}

fn short_hash(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..16])
}

/// RFC 7386 merge of `patch` into the node at `pointer` (which must exist or is created).
fn merge_at(object: &mut Value, pointer: &str, patch: Value) {
    let mut wrapped = patch;
    for segment in pointer
        .split('/')
        .skip(1)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        let key = segment.replace("~1", "/").replace("~0", "~");
        wrapped = json!({ key: wrapped });
    }
    json_patch::merge(object, &wrapped);
}

/// JSON pointer escaping of one reference token (RFC 6901).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

struct Context<'a> {
    wc: &'a WeaveCloud,
    bundle: &'a Bundle,
    namespace: &'a str,
    hostname: &'a str,
    token_hash: &'a str,
    cluster_roles: BTreeSet<String>,
}

impl Context<'_> {
    /// Apply an RFC 6902 patch, naming the template on failure (a bundle that does not fit
    /// the renderer).
    fn json_patch(
        &self,
        template: &Template,
        object: &mut Value,
        ops: Value,
    ) -> Result<(), RenderError> {
        let patch: json_patch::Patch = serde_json::from_value(ops).map_err(|e| {
            RenderError::Other(format!(
                "agent bundle {}: {} {} ({}): invalid patch: {e}",
                self.bundle.version,
                template.kind(),
                template.name(),
                template.location()
            ))
        })?;
        json_patch::patch(object, &patch).map_err(|e| {
            RenderError::Other(format!(
                "agent bundle {}: cannot render {} `{}` ({}): {e}",
                self.bundle.version,
                template.kind(),
                template.name(),
                template.location()
            ))
        })
    }

    /// Namespace (or a per-WeaveCloud name for cluster-scoped objects), bindings, token hash,
    /// platform adjustments: what every object of every agent gets.
    fn common_patches(&self, template: &Template, object: &mut Value) -> Result<(), RenderError> {
        let ns = self.namespace;
        let kind = template.kind();
        if CLUSTER_SCOPED_KINDS.contains(&kind) {
            // Two WeaveClouds (two namespaces) must not fight over one ClusterRole.
            json_patch::merge(
                object,
                &json!({"metadata": {"name": format!("{}-{ns}", template.name())}}),
            );
        } else {
            json_patch::merge(object, &json!({"metadata": {"namespace": ns}}));
        }
        if kind == "ClusterRoleBinding" || kind == "RoleBinding" {
            let mut ops = Vec::new();
            let subjects = object
                .get("subjects")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (i, s) in subjects.iter().enumerate() {
                if s.get("kind").and_then(Value::as_str) == Some("ServiceAccount") {
                    ops.push(json!({"op": "add", "path": format!("/subjects/{i}/namespace"), "value": ns}));
                }
            }
            let role_kind = object.pointer("/roleRef/kind").and_then(Value::as_str);
            let role_name = object
                .pointer("/roleRef/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if role_kind == Some("ClusterRole") && self.cluster_roles.contains(role_name) {
                ops.push(json!({"op": "replace", "path": "/roleRef/name", "value": format!("{role_name}-{ns}")}));
            }
            self.json_patch(template, object, Value::Array(ops))?;
        }
        if let Some(pod) = pod_template_pointer(kind) {
            if object.pointer(pod).is_some() {
                merge_at(
                    object,
                    pod,
                    json!({"metadata": {"annotations": {TOKEN_HASH_ANNOTATION: self.token_hash}}}),
                );
                if self.wc.spec.general.environment == Environment::Openshift {
                    self.openshift_pod_patches(template, object, pod)?;
                }
            }
        }
        Ok(())
    }

    /// OpenShift's `restricted` SCC assigns each namespace its own UID range: a fixed
    /// `runAsUser`/`runAsGroup`/`fsGroup` is refused. Drop them from unprivileged pods and let
    /// the SCC choose (privileged pods are admitted by the `privileged` SCC the bundle grants).
    fn openshift_pod_patches(
        &self,
        template: &Template,
        object: &mut Value,
        pod: &str,
    ) -> Result<(), RenderError> {
        let spec = format!("{pod}/spec");
        let containers = object
            .pointer(&format!("{spec}/containers"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let privileged =
            |c: &Value| c.pointer("/securityContext/privileged") == Some(&Value::Bool(true));
        if containers.iter().any(privileged) {
            return Ok(());
        }
        let mut ops = Vec::new();
        for field in ["runAsUser", "runAsGroup", "fsGroup"] {
            let path = format!("{spec}/securityContext/{field}");
            if object.pointer(&path).is_some() {
                ops.push(json!({"op": "remove", "path": path}));
            }
        }
        for (i, _) in containers.iter().enumerate() {
            for field in ["runAsUser", "runAsGroup"] {
                let path = format!("{spec}/containers/{i}/securityContext/{field}");
                if object.pointer(&path).is_some() {
                    ops.push(json!({"op": "remove", "path": path}));
                }
            }
        }
        self.json_patch(template, object, Value::Array(ops))
    }

    /// The agent's own container: arguments appended after the template's, the token from the
    /// Secret, `wcReportErrors`; for scope the CRI socket, for prometheus the token volume.
    fn agent_container_patches(
        &self,
        agent: Agent,
        template: &Template,
        object: &mut Value,
        args: &[String],
    ) -> Result<(), RenderError> {
        let target = &self.bundle.agent(agent).container;
        let pod = pod_template_pointer(&target.kind).unwrap_or("/spec/template");
        let index = container_index(object, &target.kind, &target.container).ok_or_else(|| {
            RenderError::Other(format!(
                "agent bundle {}: {} `{}` ({}) has no container `{}`",
                self.bundle.version,
                target.kind,
                target.name,
                template.location(),
                target.container
            ))
        })?;
        let c = format!("{pod}/spec/containers/{index}");
        let secret = &self.wc.spec.general.token_secret_ref;
        let mut ops = Vec::new();
        if object.pointer(&format!("{c}/args")).is_none() {
            ops.push(json!({"op": "add", "path": format!("{c}/args"), "value": []}));
        }
        for arg in args {
            ops.push(json!({"op": "add", "path": format!("{c}/args/-"), "value": arg}));
        }
        if object.pointer(&format!("{c}/env")).is_none() {
            ops.push(json!({"op": "add", "path": format!("{c}/env"), "value": []}));
        }
        if agent != Agent::Prometheus {
            ops.push(json!({"op": "add", "path": format!("{c}/env/-"), "value": {
                "name": TOKEN_ENV,
                "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}},
            }}));
        }
        ops.push(json!({"op": "add", "path": format!("{c}/env/-"), "value": {
            "name": REPORT_ERRORS_ENV,
            "value": self.wc.spec.general.wc_report_errors.to_string(),
        }}));

        let mut volume = None;
        if agent == Agent::Scope {
            if let Some(socket) = cri_socket(self.wc) {
                // With a CRI runtime there is no Docker: switch the Docker probe off (as the
                // launcher's CRI manifests did) and drop the Docker socket mount, whose host
                // path would not exist. Removals go last-index-first so indexes stay valid.
                let template_args = object
                    .pointer(&format!("{c}/args"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (i, a) in template_args.iter().enumerate() {
                    if a.as_str().is_some_and(|a| a.starts_with("--probe.docker=")) {
                        ops.insert(0, json!({"op": "replace", "path": format!("{c}/args/{i}"), "value": "--probe.docker=false"}));
                    }
                }
                let is_docker_socket = |v: &Value| {
                    v.pointer("/hostPath/path")
                        .and_then(Value::as_str)
                        .is_some_and(|p| p.ends_with("/docker.sock"))
                };
                let volumes = object
                    .pointer(&format!("{pod}/spec/volumes"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let docker_volumes: Vec<String> = volumes
                    .iter()
                    .filter(|v| is_docker_socket(v))
                    .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect();
                let mounts = object
                    .pointer(&format!("{c}/volumeMounts"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (i, m) in mounts.iter().enumerate().rev() {
                    if m.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| docker_volumes.iter().any(|d| d == n))
                    {
                        ops.push(json!({"op": "remove", "path": format!("{c}/volumeMounts/{i}")}));
                    }
                }
                for (i, v) in volumes.iter().enumerate().rev() {
                    if is_docker_socket(v) {
                        ops.push(
                            json!({"op": "remove", "path": format!("{pod}/spec/volumes/{i}")}),
                        );
                    }
                }
                volume = Some((
                    json!({"name": CRI_VOLUME, "hostPath": {"path": socket, "type": "Socket"}}),
                    json!({"name": CRI_VOLUME, "mountPath": socket}),
                ));
            }
        }
        if agent == Agent::Prometheus {
            volume = Some((
                json!({"name": TOKEN_VOLUME, "secret": {
                    "secretName": secret.name,
                    "items": [{"key": secret.key, "path": TOKEN_FILE}],
                }}),
                json!({"name": TOKEN_VOLUME, "mountPath": TOKEN_MOUNT_DIR, "readOnly": true}),
            ));
        }
        if let Some((vol, mount)) = volume {
            if object.pointer(&format!("{pod}/spec/volumes")).is_none() {
                ops.push(json!({"op": "add", "path": format!("{pod}/spec/volumes"), "value": []}));
            }
            ops.push(json!({"op": "add", "path": format!("{pod}/spec/volumes/-"), "value": vol}));
            if object.pointer(&format!("{c}/volumeMounts")).is_none() {
                ops.push(json!({"op": "add", "path": format!("{c}/volumeMounts"), "value": []}));
            }
            ops.push(json!({"op": "add", "path": format!("{c}/volumeMounts/-"), "value": mount}));
        }
        self.json_patch(template, object, Value::Array(ops))
    }

    /// prometheus.yml: remote write to `https://<wcHostname>/api/prom/push` with the mounted
    /// token, and the `podScrapePolicy` rule first in the pods job's relabel rules.
    fn prometheus_config_patches(
        &self,
        template: &Template,
        object: &mut Value,
    ) -> Result<(), RenderError> {
        let cfg_ref = &self.bundle.prometheus_config;
        let mut config = prometheus_config_of(template, &cfg_ref.key)
            .map_err(|e| RenderError::Other(e.to_string()))?;
        let job = scrape_job_index(&config, &cfg_ref.pods_job).ok_or_else(|| {
            RenderError::Other(format!(
                "{}: `data.{}` has no scrape job `{}`",
                template.location(),
                cfg_ref.key,
                cfg_ref.pods_job
            ))
        })?;
        let rule = match self.wc.spec.prometheus.pod_scrape_policy {
            PodScrapePolicy::OptIn => json!({
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                "action": "keep",
                "regex": "true",
            }),
            PodScrapePolicy::OptOut => json!({
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                "action": "drop",
                "regex": "false",
            }),
        };
        let relabel = format!("/scrape_configs/{job}/relabel_configs");
        let mut ops = vec![
            json!({"op": "replace", "path": "/remote_write/0/url", "value": format!("https://{}/api/prom/push", self.hostname)}),
            json!({"op": "add", "path": "/remote_write/0/basic_auth", "value": {
                "password_file": format!("{TOKEN_MOUNT_DIR}/{TOKEN_FILE}"),
            }}),
        ];
        if config.pointer(&relabel).is_none() {
            ops.push(json!({"op": "add", "path": relabel, "value": []}));
        }
        ops.push(json!({"op": "add", "path": format!("{relabel}/0"), "value": rule}));
        self.json_patch(template, &mut config, Value::Array(ops))?;
        let text = super::output::to_yaml(&config).map_err(|e| {
            RenderError::Other(format!(
                "{}: cannot write prometheus' configuration: {e}",
                template.location()
            ))
        })?;
        self.json_patch(
            template,
            object,
            json!([{"op": "replace", "path": format!("/data/{}", escape(&cfg_ref.key)), "value": text}]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::ownership::{OWNER_LABEL, OWNER_REF_ANNOTATION};

    const EXAMPLE: &str = r#"
apiVersion: cloud.weave.works/v1beta1
kind: WeaveCloud
metadata: {name: weave-cloud, namespace: weave}
spec:
  general:
    environment: gke
    autoUpdate: true
    updateSchedule: "0 * * * *"
    agentVersion: "1.x"
    wcHostname: cloud.weave.works
    wcReportErrors: false
    tokenSecretRef: {name: weave-cloud, key: token}
  flux:
    disable: false
    config: {gitLabel: label, gitUrl: url, gitPath: path, gitBranch: branch}
    appendArgs: []
  scope:
    disable: false
    readOnly: true
    containerRuntimeEndpoint: /var/run/crio.sock
    kubernetesProbe: true
    appendArgs: []
  prometheus:
    disable: false
    podScrapePolicy: optIn
    appendArgs: []
"#;

    fn example() -> WeaveCloud {
        serde_saphyr::from_str(EXAMPLE).unwrap()
    }

    fn render_with(wc: &WeaveCloud, inputs: &AgentInputs) -> RenderedAgents {
        render_agents(wc, Bundle::builtin().unwrap(), inputs).unwrap()
    }

    fn render(wc: &WeaveCloud) -> Vec<DesiredObject> {
        render_with(wc, &AgentInputs::default()).objects
    }

    fn find<'a>(objs: &'a [DesiredObject], kind: &str, name: &str) -> &'a Value {
        &objs
            .iter()
            .find(|o| o.kind() == kind && o.name() == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .object
    }

    fn container<'a>(obj: &'a Value, name: &str) -> &'a Value {
        obj.pointer("/spec/template/spec/containers")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
    }

    fn args(obj: &Value, name: &str) -> Vec<String> {
        container(obj, name)["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    }

    fn flux_args_of(objs: &[DesiredObject]) -> Vec<String> {
        args(find(objs, "Deployment", "weave-flux-agent"), "flux-agent")
    }
    fn scope_args_of(objs: &[DesiredObject]) -> Vec<String> {
        args(find(objs, "DaemonSet", "weave-scope-agent"), "scope-agent")
    }
    fn prometheus_yml(objs: &[DesiredObject]) -> Value {
        let text = find(objs, "ConfigMap", "weave-cortex-agent-config")["data"]["prometheus.yml"]
            .as_str()
            .unwrap();
        serde_saphyr::from_str(text).unwrap()
    }
    fn pods_job_rules(objs: &[DesiredObject]) -> Vec<Value> {
        let config = prometheus_yml(objs);
        let jobs = config["scrape_configs"].as_array().unwrap();
        let pods = jobs
            .iter()
            .find(|j| j["job_name"] == "kubernetes-pods")
            .unwrap();
        pods["relabel_configs"].as_array().unwrap().clone()
    }
    fn names(objs: &[DesiredObject]) -> Vec<String> {
        objs.iter()
            .map(|o| format!("{}/{}", o.kind(), o.name()))
            .collect()
    }

    // ---- flux ----

    #[test]
    fn flux_gets_its_git_settings_connect_url_and_token_reference() {
        let objs = render(&example());
        let a = flux_args_of(&objs);
        let tail: Vec<&str> = a
            .iter()
            .map(String::as_str)
            .skip_while(|a| !a.starts_with("--token"))
            .collect();
        assert_eq!(
            tail,
            vec![
                "--token=$(WEAVE_CLOUD_TOKEN)",
                "--connect=wss://cloud.weave.works/api/flux",
                "--git-url=url",
                "--git-branch=branch",
                "--git-path=path",
                "--git-label=label",
            ]
        );
        // The template's own arguments come first, untouched.
        assert_eq!(a[0], "--memcached-hostname=weave-flux-memcached");
    }

    #[test]
    fn unset_flux_config_fields_are_omitted() {
        let mut wc = example();
        wc.spec.flux.config = Default::default();
        wc.spec.flux.config.git_url = Some("git@github.com:org/repo".into());
        wc.spec.flux.config.git_branch = Some(String::new());
        let a = flux_args_of(&render(&wc));
        assert!(a.contains(&"--git-url=git@github.com:org/repo".to_string()));
        for flag in ["--git-branch", "--git-path", "--git-label"] {
            assert!(!a.iter().any(|x| x.starts_with(flag)), "{flag} in {a:?}");
        }
    }

    #[test]
    fn running_flux_args_fill_unset_fields_and_are_reported() {
        let mut wc = example();
        wc.spec.flux.config.git_path = None;
        wc.spec.flux.config.git_label = None;
        let running: Vec<String> = [
            "--token=secret-from-old-manifest",
            "--git-url=git@old:repo",
            "--git-path=k8s",
            "--git-path=apps",
            "--git-poll-interval",
            "5m",
            "--k8s-allow-namespace=default",
            "--connect=wss://old/api/flux",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let inputs = AgentInputs {
            token_hash: None,
            preserved_flux_args: parse_flux_args(&running),
        };
        let r = render_with(&wc, &inputs);
        let a = flux_args_of(&r.objects);
        // Configured wins over running; unset is taken from the running agent.
        assert!(a.contains(&"--git-url=url".to_string()));
        assert!(!a.contains(&"--git-url=git@old:repo".to_string()));
        assert!(a.contains(&"--git-path=k8s,apps".to_string()));
        assert!(a.contains(&"--git-poll-interval=5m".to_string()));
        assert!(a.contains(&"--k8s-allow-namespace=default".to_string()));
        // The old token and connect URL are never carried over.
        assert!(!a
            .iter()
            .any(|x| x.contains("secret-from-old-manifest") || x.contains("wss://old")));
        assert_eq!(
            r.preserved_flux_args,
            vec![
                "--git-path=k8s,apps",
                "--git-poll-interval=5m",
                "--k8s-allow-namespace=default"
            ]
        );
    }

    #[test]
    fn nothing_is_preserved_when_flux_is_disabled() {
        let mut wc = example();
        wc.spec.flux.disable = true;
        wc.spec.flux.config = Default::default();
        let inputs = AgentInputs {
            token_hash: None,
            preserved_flux_args: BTreeMap::from([("git-url".to_string(), "u".to_string())]),
        };
        assert!(render_with(&wc, &inputs).preserved_flux_args.is_empty());
    }

    #[test]
    fn memcached_runs_alongside_flux() {
        let objs = render(&example());
        let names = names(&objs);
        assert!(names.contains(&"Deployment/weave-flux-memcached".to_string()));
        assert!(names.contains(&"Service/weave-flux-memcached".to_string()));
    }

    // ---- scope ----

    #[test]
    fn scope_read_only_adds_no_controls_and_false_leaves_it_out() {
        let mut wc = example();
        assert!(scope_args_of(&render(&wc)).contains(&"--probe.no-controls=true".to_string()));
        wc.spec.scope.read_only = false;
        let a = scope_args_of(&render(&wc));
        assert!(
            !a.iter().any(|x| x.starts_with("--probe.no-controls")),
            "{a:?}"
        );
    }

    #[test]
    fn scope_container_runtime_endpoint_enables_cri_and_mounts_the_socket() {
        let mut wc = example();
        let objs = render(&wc);
        let a = scope_args_of(&objs);
        assert!(a.contains(&"--probe.cri=true".to_string()));
        assert!(a.contains(&"--probe.cri.endpoint=unix:///var/run/crio.sock".to_string()));
        let ds = find(&objs, "DaemonSet", "weave-scope-agent");
        let volumes = ds
            .pointer("/spec/template/spec/volumes")
            .unwrap()
            .as_array()
            .unwrap();
        assert!(volumes.contains(&json!({"name": "cri-socket", "hostPath": {"path": "/var/run/crio.sock", "type": "Socket"}})));
        let mounts = container(ds, "scope-agent")["volumeMounts"]
            .as_array()
            .unwrap();
        assert!(mounts.contains(&json!({"name": "cri-socket", "mountPath": "/var/run/crio.sock"})));
        // No Docker with a CRI runtime: the Docker probe is off and its socket is not mounted.
        assert!(a.contains(&"--probe.docker=false".to_string()));
        assert!(!a.contains(&"--probe.docker=true".to_string()));
        assert!(!ds.to_string().contains("docker.sock"));

        // A user who wrote the unix:// scheme gets the same, not unix://unix://.
        wc.spec.scope.container_runtime_endpoint =
            Some("unix:///run/containerd/containerd.sock".into());
        assert!(scope_args_of(&render(&wc))
            .contains(&"--probe.cri.endpoint=unix:///run/containerd/containerd.sock".to_string()));

        wc.spec.scope.container_runtime_endpoint = None;
        let objs = render(&wc);
        assert!(!scope_args_of(&objs)
            .iter()
            .any(|x| x.starts_with("--probe.cri")));
        let ds = find(&objs, "DaemonSet", "weave-scope-agent");
        assert!(!ds.to_string().contains("cri-socket"));
        assert!(ds.to_string().contains("/var/run/docker.sock"));
        assert!(scope_args_of(&objs).contains(&"--probe.docker=true".to_string()));
    }

    #[test]
    fn scope_kubernetes_probe_true_and_false() {
        let mut wc = example();
        assert!(scope_args_of(&render(&wc)).contains(&"--probe.kubernetes=true".to_string()));
        wc.spec.scope.kubernetes_probe = false;
        let a = scope_args_of(&render(&wc));
        assert!(a.contains(&"--probe.kubernetes=false".to_string()));
        assert!(!a.contains(&"--probe.kubernetes=true".to_string()));
    }

    #[test]
    fn scope_reports_to_the_weave_cloud_hostname_as_its_last_argument() {
        let mut wc = example();
        wc.spec.general.wc_hostname = "frontend.dev.weave.works".into();
        let a = scope_args_of(&render(&wc));
        assert_eq!(a.last().unwrap(), "https://frontend.dev.weave.works");
    }

    #[test]
    fn disabled_scope_renders_no_scope_object_at_all() {
        let mut wc = example();
        wc.spec.scope.disable = true;
        let objs = render(&wc);
        for o in &objs {
            assert!(!o.name().contains("scope"), "{} {}", o.kind(), o.name());
            let component = o.object.pointer("/metadata/labels/weave-cloud-component");
            assert_ne!(component, Some(&json!("scope")));
        }
        assert!(names(&objs).contains(&"Deployment/weave-flux-agent".to_string()));
    }

    #[test]
    fn disabled_flux_and_prometheus_render_none_of_their_objects() {
        let mut wc = example();
        wc.spec.flux.disable = true;
        wc.spec.prometheus.disable = true;
        let objs = render(&wc);
        for o in &objs {
            let component = o
                .object
                .pointer("/metadata/labels/weave-cloud-component")
                .and_then(Value::as_str);
            assert_eq!(component, Some("scope"), "{} {}", o.kind(), o.name());
        }
        assert!(!objs.is_empty());
    }

    // ---- prometheus ----

    #[test]
    fn opt_in_keeps_only_pods_annotated_true() {
        let objs = render(&example());
        let rules = pods_job_rules(&objs);
        assert_eq!(
            rules[0],
            json!({"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"], "action": "keep", "regex": "true"})
        );
        assert!(!rules
            .iter()
            .any(|r| r["action"] == "drop" && r["regex"] == "false"));
    }

    #[test]
    fn opt_out_drops_only_pods_annotated_false() {
        let mut wc = example();
        wc.spec.prometheus.pod_scrape_policy = PodScrapePolicy::OptOut;
        let rules = pods_job_rules(&render(&wc));
        assert_eq!(
            rules[0],
            json!({"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"], "action": "drop", "regex": "false"})
        );
        let scrape_rules: Vec<_> = rules
            .iter()
            .filter(|r| {
                r["source_labels"]
                    == json!(["__meta_kubernetes_pod_annotation_prometheus_io_scrape"])
            })
            .collect();
        assert_eq!(
            scrape_rules.len(),
            1,
            "no keep rule left under optOut: {rules:?}"
        );
    }

    #[test]
    fn prometheus_remote_writes_to_the_weave_cloud_hostname_with_the_mounted_token() {
        let mut wc = example();
        wc.spec.general.wc_hostname = "cloud.example.com:8443".into();
        let objs = render(&wc);
        let config = prometheus_yml(&objs);
        assert_eq!(
            config["remote_write"][0]["url"],
            "https://cloud.example.com:8443/api/prom/push"
        );
        assert_eq!(
            config["remote_write"][0]["basic_auth"]["password_file"],
            "/etc/weave-cloud/token"
        );
        let dep = find(&objs, "Deployment", "weave-cortex-agent");
        let volumes = dep
            .pointer("/spec/template/spec/volumes")
            .unwrap()
            .as_array()
            .unwrap();
        assert!(volumes.contains(&json!({"name": "weave-cloud-token", "secret": {"secretName": "weave-cloud", "items": [{"key": "token", "path": "token"}]}})));
        let mounts = container(dep, "prometheus")["volumeMounts"]
            .as_array()
            .unwrap();
        assert!(mounts.contains(
            &json!({"name": "weave-cloud-token", "mountPath": "/etc/weave-cloud", "readOnly": true})
        ));
    }

    #[test]
    fn a_change_of_prometheus_config_changes_its_pod_template() {
        let hash = |objs: &[DesiredObject]| {
            find(objs, "Deployment", "weave-cortex-agent")
                .pointer("/spec/template/metadata/annotations/weft.io~1config-hash")
                .unwrap()
                .clone()
        };
        let mut wc = example();
        let before = hash(&render(&wc));
        wc.spec.prometheus.pod_scrape_policy = PodScrapePolicy::OptOut;
        assert_ne!(before, hash(&render(&wc)));
    }

    #[test]
    fn kube_state_metrics_and_node_exporter_come_with_prometheus() {
        let names = names(&render(&example()));
        assert!(names.contains(&"Deployment/weave-cortex-kube-state-metrics".to_string()));
        assert!(names.contains(&"DaemonSet/weave-cortex-node-exporter".to_string()));
    }

    // ---- appendArgs ----

    #[test]
    fn append_args_come_last_and_in_order() {
        let mut wc = example();
        wc.spec.flux.append_args = vec![
            "--registry-disable-scanning".into(),
            "--git-poll-interval=1m".into(),
        ];
        wc.spec.prometheus.append_args =
            vec!["--log.level=debug".into(), "--web.enable-lifecycle".into()];
        wc.spec.scope.append_args = vec!["--probe.docker=false".into(), "--weave=false".into()];
        let objs = render(&wc);
        let flux = flux_args_of(&objs);
        assert_eq!(
            flux[flux.len() - 2..],
            ["--registry-disable-scanning", "--git-poll-interval=1m"]
        );
        let prom = args(
            find(&objs, "Deployment", "weave-cortex-agent"),
            "prometheus",
        );
        assert_eq!(
            prom[prom.len() - 2..],
            ["--log.level=debug", "--web.enable-lifecycle"]
        );
        // scope: after every generated flag, before only the positional target.
        let scope = scope_args_of(&objs);
        assert_eq!(
            scope[scope.len() - 3..],
            [
                "--probe.docker=false",
                "--weave=false",
                "https://cloud.weave.works"
            ]
        );
    }

    // ---- token ----

    #[test]
    fn the_token_comes_only_from_the_secret() {
        let mut wc = example();
        wc.spec.general.token_secret_ref.name = "wc-credentials".into();
        wc.spec.general.token_secret_ref.key = "service-token".into();
        let objs = render(&wc);
        for (kind, name, c) in [
            ("Deployment", "weave-flux-agent", "flux-agent"),
            ("DaemonSet", "weave-scope-agent", "scope-agent"),
        ] {
            let env = container(find(&objs, kind, name), c)["env"]
                .as_array()
                .unwrap()
                .clone();
            assert!(env.contains(&json!({"name": "WEAVE_CLOUD_TOKEN", "valueFrom": {"secretKeyRef": {"name": "wc-credentials", "key": "service-token"}}})), "{name}");
        }
        let dep = find(&objs, "Deployment", "weave-cortex-agent");
        assert_eq!(
            dep.pointer("/spec/template/spec/volumes/2/secret/secretName")
                .unwrap(),
            "wc-credentials"
        );
        // No object refers to a Secret in any other way, and no env var carries a literal token.
        for o in &objs {
            let text = o.object.to_string();
            assert!(!text.contains("password\":"), "{}", o.name());
            assert!(
                !text.contains("\"WEAVE_CLOUD_TOKEN\",\"value\""),
                "{}",
                o.name()
            );
        }
    }

    #[test]
    fn a_token_from_an_old_manifest_never_appears_in_the_output() {
        let secret = "eyJhbGciOi-the-real-service-token";
        let inputs = AgentInputs {
            token_hash: Some(secret_data_hash(&BTreeMap::from([(
                "token".to_string(),
                secret.as_bytes().to_vec(),
            )]))),
            preserved_flux_args: parse_flux_args(&[
                format!("--token={secret}"),
                "--git-url=u".to_string(),
            ]),
        };
        let objs = render_with(&example(), &inputs).objects;
        let all = super::super::output::to_yaml_stream(&objs).unwrap();
        assert!(!all.contains(secret));
        assert!(!all.contains("the-real-service-token"));
    }

    #[test]
    fn every_pod_template_carries_the_token_hash() {
        let inputs = AgentInputs {
            token_hash: Some(secret_data_hash(&BTreeMap::from([(
                "token".to_string(),
                b"t1".to_vec(),
            )]))),
            ..Default::default()
        };
        let expected = inputs.token_hash.clone().unwrap();
        let objs = render_with(&example(), &inputs).objects;
        let mut workloads = 0;
        for o in &objs {
            if let Some(pod) = pod_template_pointer(o.kind()) {
                workloads += 1;
                let got = o
                    .object
                    .pointer(&format!("{pod}/metadata/annotations/weft.io~1token-hash"));
                assert_eq!(got, Some(&json!(expected)), "{} {}", o.kind(), o.name());
            }
        }
        assert_eq!(workloads, 6);
        // Offline, the annotation says the Secret was not read.
        let offline = render(&example());
        let flux = find(&offline, "Deployment", "weave-flux-agent");
        assert_eq!(
            flux.pointer("/spec/template/metadata/annotations/weft.io~1token-hash")
                .unwrap(),
            "offline"
        );
    }

    #[test]
    fn the_secret_hash_follows_the_secret_data() {
        let a = secret_data_hash(&BTreeMap::from([("token".to_string(), b"t1".to_vec())]));
        let b = secret_data_hash(&BTreeMap::from([("token".to_string(), b"t2".to_vec())]));
        let c = secret_data_hash(&BTreeMap::from([("token2".to_string(), b"t1".to_vec())]));
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 32);
    }

    // ---- general ----

    #[test]
    fn report_errors_reaches_every_agent_container() {
        let mut wc = example();
        wc.spec.general.wc_report_errors = true;
        let objs = render(&wc);
        for (kind, name, c) in [
            ("Deployment", "weave-flux-agent", "flux-agent"),
            ("DaemonSet", "weave-scope-agent", "scope-agent"),
            ("Deployment", "weave-cortex-agent", "prometheus"),
        ] {
            let env = container(find(&objs, kind, name), c)["env"]
                .as_array()
                .unwrap()
                .clone();
            assert!(
                env.contains(&json!({"name": "WEAVE_CLOUD_REPORT_ERRORS", "value": "true"})),
                "{name}"
            );
        }
    }

    #[test]
    fn children_are_owned_by_the_weavecloud_and_live_in_its_namespace() {
        let objs = render(&example());
        let owner = Owner::Resource {
            kind: "WeaveCloud".into(),
            namespace: "weave".into(),
            name: "weave-cloud".into(),
        };
        for o in &objs {
            assert_eq!(o.owner, owner);
            assert_eq!(
                o.object["metadata"]["labels"][OWNER_LABEL],
                owner.id().0.as_str()
            );
            assert_eq!(
                o.object["metadata"]["annotations"][OWNER_REF_ANNOTATION],
                "WeaveCloud/weave/weave-cloud"
            );
            if CLUSTER_SCOPED_KINDS.contains(&o.kind()) {
                assert_eq!(o.namespace(), None, "{}", o.name());
                assert!(o.name().ends_with("-weave"), "{}", o.name());
            } else {
                assert_eq!(o.namespace(), Some("weave"), "{} {}", o.kind(), o.name());
            }
        }
    }

    #[test]
    fn bindings_point_at_this_namespace_and_the_renamed_cluster_roles() {
        let mut wc = example();
        wc.metadata.namespace = Some("team-a".into());
        let objs = render(&wc);
        let crb = find(&objs, "ClusterRoleBinding", "weave-flux-team-a");
        assert_eq!(crb["roleRef"]["name"], "weave-flux-team-a");
        assert_eq!(
            crb["subjects"][0],
            json!({"kind": "ServiceAccount", "name": "weave-flux", "namespace": "team-a"})
        );
        find(&objs, "ClusterRole", "weave-flux-team-a");
    }

    #[test]
    fn two_weaveclouds_in_two_namespaces_do_not_share_an_object() {
        let a = render(&example());
        let mut wc = example();
        wc.metadata.namespace = Some("weave-staging".into());
        let b = render(&wc);
        for o in &a {
            assert!(
                !b.iter().any(|p| p.object_ref() == o.object_ref()),
                "{}",
                o.object_ref()
            );
        }
    }

    #[test]
    fn openshift_grants_the_privileged_scc_and_drops_fixed_uids() {
        let mut wc = example();
        wc.spec.general.environment = Environment::Openshift;
        let objs = render(&wc);
        let rb = find(&objs, "RoleBinding", "weave-scope-scc");
        assert_eq!(rb["roleRef"]["name"], "weave-scope-scc-weave");
        assert_eq!(rb["subjects"][0]["namespace"], "weave");
        find(&objs, "ClusterRole", "weave-cortex-scc-weave");
        let memcached = find(&objs, "Deployment", "weave-flux-memcached");
        let sc = memcached
            .pointer("/spec/template/spec/securityContext")
            .unwrap();
        assert_eq!(sc, &json!({"runAsNonRoot": true}));
        let prom = find(&objs, "Deployment", "weave-cortex-agent");
        assert!(prom
            .pointer("/spec/template/spec/securityContext/fsGroup")
            .is_none());

        // Elsewhere: no SCC objects, and the images' fixed UIDs stay.
        let objs = render(&example());
        assert!(!names(&objs).iter().any(|n| n.contains("scc")));
        let memcached = find(&objs, "Deployment", "weave-flux-memcached");
        assert_eq!(
            memcached.pointer("/spec/template/spec/securityContext/runAsUser"),
            Some(&json!(11211))
        );
    }

    #[test]
    fn a_url_as_hostname_is_refused() {
        let mut wc = example();
        wc.spec.general.wc_hostname = "https://cloud.weave.works".into();
        let err =
            render_agents(&wc, Bundle::builtin().unwrap(), &AgentInputs::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "WeaveCloud `weave/weave-cloud`: `spec.general.wcHostname: https://cloud.weave.works` must be a host name such as `cloud.weave.works`, not a URL"
        );
    }

    #[test]
    fn output_is_in_apply_order_and_deterministic() {
        let a = render(&example());
        let b = render(&example());
        assert_eq!(a, b);
        let first_workload = a
            .iter()
            .position(|o| pod_template_pointer(o.kind()).is_some())
            .unwrap();
        let last_account = a
            .iter()
            .rposition(|o| o.kind() == "ServiceAccount")
            .unwrap();
        assert!(last_account < first_workload);
        assert_eq!(a[0].kind(), "ClusterRole");
    }

    /// Golden files: `tests/golden/weavecloud/<case>.input.yaml` rendered offline with the
    /// built-in bundle must equal `<case>.yaml`. `UPDATE_GOLDEN=1 cargo test --lib
    /// render::weavecloud` rewrites them (review the diff before committing).
    #[test]
    fn golden_files() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/weavecloud");
        let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
        let mut cases = 0;
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for input in entries {
            let Some(case) = input
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".input.yaml"))
            else {
                continue;
            };
            cases += 1;
            let wc: WeaveCloud =
                serde_saphyr::from_str(&std::fs::read_to_string(&input).unwrap()).unwrap();
            let objs = render(&wc);
            let got = super::super::output::to_yaml_stream(&objs).unwrap();
            let golden = dir.join(format!("{case}.yaml"));
            if update {
                std::fs::write(&golden, &got).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
                    golden.display()
                )
            });
            if got != want {
                let diff = similar::TextDiff::from_lines(&want, &got);
                panic!(
                    "{case}: rendered objects differ from {} (UPDATE_GOLDEN=1 to accept):\n{}",
                    golden.display(),
                    diff.unified_diff()
                        .context_radius(3)
                        .header("golden", "rendered")
                );
            }
        }
        assert!(cases >= 2, "golden cases found: {cases}");
    }

    #[test]
    fn parse_flux_args_reads_both_forms_and_ignores_the_rest() {
        let args: Vec<String> = [
            "--git-url",
            "git@x:y",
            "--git-ci-skip",
            "--git-branch=main",
            "--token=t",
            "-git-label=l",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let got = parse_flux_args(&args);
        assert_eq!(
            got,
            BTreeMap::from([
                ("git-url".to_string(), "git@x:y".to_string()),
                ("git-ci-skip".to_string(), "true".to_string()),
                ("git-branch".to_string(), "main".to_string()),
                ("git-label".to_string(), "l".to_string()),
            ])
        );
    }
    #[test]
    fn repeated_flux_flags_follow_flux_parsing() {
        let args: Vec<String> = [
            "--git-poll-interval=1m",
            "--git-poll-interval=2m",
            "--k8s-allow-namespace=a",
            "--k8s-allow-namespace",
            "b",
            "--git-ci-skip",
            "positional",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let got = parse_flux_args(&args);
        // A scalar flag keeps its last value (a comma list would not be a duration).
        assert_eq!(got["git-poll-interval"], "2m");
        assert_eq!(got["k8s-allow-namespace"], "a,b");
        // A boolean flag never takes the next word.
        assert_eq!(got["git-ci-skip"], "true");
    }

    #[test]
    fn a_flag_in_append_args_is_not_also_preserved() {
        let mut wc = example();
        wc.spec.flux.append_args = vec!["--git-poll-interval=2m".into()];
        let inputs = AgentInputs {
            token_hash: None,
            preserved_flux_args: BTreeMap::from([
                ("git-poll-interval".to_string(), "1m".to_string()),
                ("git-timeout".to_string(), "30s".to_string()),
            ]),
        };
        let r = render_with(&wc, &inputs);
        let a = flux_args_of(&r.objects);
        assert!(!a.contains(&"--git-poll-interval=1m".to_string()), "{a:?}");
        assert_eq!(a.last().unwrap(), "--git-poll-interval=2m");
        assert_eq!(r.preserved_flux_args, vec!["--git-timeout=30s"]);
        // Rendering again from the agent this produced keeps the same arguments: no drift loop.
        let again = AgentInputs {
            token_hash: None,
            preserved_flux_args: parse_flux_args(&a),
        };
        assert_eq!(flux_args_of(&render_with(&wc, &again).objects), a);
    }
    /// The CRD pattern (what the API server and `weft validate` check) and the renderer agree
    /// on what a hostname is.
    #[test]
    fn the_crd_hostname_pattern_and_the_renderer_agree() {
        let re = regex::Regex::new(crate::api::weavecloud::HOSTNAME_PATTERN).unwrap();
        for good in [
            "cloud.weave.works",
            "cloud.weave.works.",
            "cloud.example.com:8443",
            "10.0.0.1:443",
            "localhost",
        ] {
            assert!(re.is_match(good), "{good}");
            assert!(check_hostname(good).is_ok(), "{good}");
        }
        for bad in [
            "https://cloud.weave.works",
            "cloud.weave.works/api",
            "",
            "cloud weave",
            "-x",
        ] {
            assert!(!re.is_match(bad), "{bad}");
        }
        for bad in [
            "https://cloud.weave.works",
            "cloud.weave.works/api",
            "",
            "cloud weave",
        ] {
            assert!(check_hostname(bad).is_err(), "{bad}");
        }
    }
    #[test]
    fn a_token_in_append_args_is_refused() {
        for (set, flag) in [
            (
                (|wc: &mut WeaveCloud| wc.spec.flux.append_args = vec!["--token=abc".into()])
                    as fn(&mut WeaveCloud),
                "--token",
            ),
            (
                |wc: &mut WeaveCloud| {
                    wc.spec.scope.append_args = vec!["--service-token=abc".into()]
                },
                "--service-token",
            ),
            (
                |wc: &mut WeaveCloud| {
                    wc.spec.scope.append_args = vec!["--probe.token".into(), "abc".into()]
                },
                "--probe.token",
            ),
        ] {
            let mut wc = example();
            set(&mut wc);
            let err = render_agents(&wc, Bundle::builtin().unwrap(), &AgentInputs::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!(
                    "appendArgs` sets `{flag}`: the token must not be written into a manifest"
                )),
                "{err}"
            );
            assert!(
                !err.contains("abc"),
                "the error must not echo the token: {err}"
            );
        }
    }
    #[test]
    fn a_relative_container_runtime_endpoint_is_refused_by_the_crd_and_the_renderer() {
        let re = regex::Regex::new(crate::api::weavecloud::CRI_ENDPOINT_PATTERN).unwrap();
        for good in [
            "/var/run/crio.sock",
            "unix:///run/containerd/containerd.sock",
        ] {
            assert!(re.is_match(good), "{good}");
        }
        for bad in [
            "var/run/crio.sock",
            "unix://var/run/crio.sock",
            "tcp://10.0.0.1:2375",
            "",
        ] {
            assert!(!re.is_match(bad), "{bad}");
        }
        let mut wc = example();
        wc.spec.scope.container_runtime_endpoint = Some("run/crio.sock".into());
        let err =
            render_agents(&wc, Bundle::builtin().unwrap(), &AgentInputs::default()).unwrap_err();
        assert!(
            err.to_string().contains(
                "`spec.scope.containerRuntimeEndpoint: run/crio.sock` must be an absolute path"
            ),
            "{err}"
        );
    }
}
