//! A WeaveCloud → its agent objects, from an agent [`Bundle`].
//!
//! The bundle's templates are parsed objects; every option of the WeaveCloud is applied to them
//! as an RFC 7386 merge patch or an RFC 6902 JSON patch (the `json-patch` crate), never by editing
//! YAML text. The option contract (which option becomes which argument, annotation or relabel
//! rule) is documented in `docs/agents.md`, and each clause has a unit test in `tests.rs`.
//!
//! Here: the inputs, the checks of a WeaveCloud and the assembly of its agents; [`args`]: each
//! agent's arguments from its options (and the flux arguments kept from a running agent);
//! `patches`: the patches every template, each agent container and prometheus' configuration get.

pub mod args;
mod env;
mod patches;
mod volumes;

use crate::api::keys::{CONFIG_HASH_ANNOTATION, TOKEN_HASH_ANNOTATION};
use crate::api::owner::OwnerKind;
use std::collections::BTreeMap;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::api::weavecloud::WeaveCloud;

use super::bundle::{container_index, pod_template_pointer, Agent, Bundle};
use super::{order, DesiredObject, Owner, RenderError};
use args::{cri_socket, flux_args, memcached_args, scope_args, scope_cluster_args};
pub use args::{
    extra_flux_args, flag_name, parse_flux_args, parse_memcached_args, runtime_socket,
    PRESERVABLE_FLUX_ARGS, PRESERVABLE_MEMCACHED_FLAGS,
};
pub use env::{check_flux_env, ALLOWED_ENV_SOURCES};
use patches::Context;

/// What [`TOKEN_HASH_ANNOTATION`] holds when the Secret was not read (offline `weft render`).
pub const TOKEN_HASH_OFFLINE: &str = "offline";
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

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentInputs {
    /// [`secret_data_hash`] of the token Secret; `None` → [`TOKEN_HASH_OFFLINE`].
    pub token_hash: Option<String>,
    /// Arguments of the flux agent running now (flag name without `--` → value), as
    /// [`parse_flux_args`] reads them. Only [`PRESERVABLE_FLUX_ARGS`] are used.
    pub preserved_flux_args: BTreeMap<String, String>,
    /// `-m`/`-I` of the memcached running now (flag without `-` → value), as
    /// [`parse_memcached_args`] reads them; they replace the bundle's values.
    pub preserved_memcached_args: BTreeMap<String, String>,
    /// The CRI socket of the runtime detected on the nodes ([`runtime_socket`]), used when
    /// `scope.containerRuntimeEndpoint` is unset; `None`: Docker (or not read, offline).
    pub detected_cri_socket: Option<String>,
    /// Flux flags other than [`PRESERVABLE_FLUX_ARGS`] kept from the launcher's flux
    /// (`--git-readonly`, `--sync-state=secret`, …), rendered after the generated ones unless
    /// the template or `appendArgs` sets the flag.
    pub preserved_flux_extra_args: Vec<String>,
    /// Volumes of the launcher's flux pod kept (configMap, secret, emptyDir), and their mounts.
    pub preserved_flux_volumes: Vec<Value>,
    pub preserved_flux_mounts: Vec<Value>,
    /// Env vars of the launcher's flux container kept (an `HTTPS_PROXY`, …), not the token's.
    pub preserved_flux_env: Vec<Value>,
}

/// The name of a bundle's cluster-scoped object (a ClusterRole, …) rendered for the WeaveCloud
/// in `namespace`: `<name>:<namespace>`. A namespace (a DNS label) never holds a `:`, so two
/// (name, namespace) pairs never give one name: with `<name>-<namespace>`, `weave-scope` of
/// namespace `cluster-agent-weave` and `weave-scope-cluster-agent` of namespace `weave` met.
pub fn cluster_scoped_name(name: &str, namespace: &str) -> String {
    format!("{name}:{namespace}")
}

/// The memcached Deployment of the flux agent and its container, whose `-m`/`-I` are kept.
pub const MEMCACHED_DEPLOYMENT: &str = "weave-flux-memcached";
/// The container of [`MEMCACHED_DEPLOYMENT`].
pub const MEMCACHED_CONTAINER: &str = "memcached";

/// The agents of one WeaveCloud.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedAgents {
    /// Every child object, labelled for the WeaveCloud, in apply order.
    pub objects: Vec<DesiredObject>,
    /// The flux arguments taken from `AgentInputs::preserved_flux_args` (`--git-url=…`), for
    /// `status.flux.preservedArgs` and an event. Empty when flux is disabled.
    pub preserved_flux_args: Vec<String>,
    /// The memcached arguments taken from `AgentInputs::preserved_memcached_args` (`-m 512`).
    pub preserved_memcached_args: Vec<String>,
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
    let cri = cri_socket(wc, inputs.detected_cri_socket.as_deref());
    if let Some(socket) = &cri {
        if crate::api::weavecloud::known_runtime_socket(socket).is_none() {
            return Err(RenderError::Other(format!(
                "WeaveCloud `{namespace}/{name}`: `spec.scope.containerRuntimeEndpoint: {socket}` {}",
                RUNTIME_SOCKET_RULE
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
        cri,
    };
    let owner = Owner::resource(OwnerKind::WeaveCloud, namespace.clone(), name);

    // memcached's `-m`/`-I`: the spec's win over those kept from a running memcached.
    let mut memcached_flags = inputs.preserved_memcached_args.clone();
    for (i, arg) in wc.spec.flux.memcached_args.iter().enumerate() {
        let parsed = args::parse_spec_memcached_arg(arg).ok_or_else(|| {
            RenderError::Other(format!(
                "WeaveCloud `{namespace}/{}`: `spec.flux.memcachedArgs[{i}]: {arg}` is not `-m <size>` or `-I <size>` (a number with an optional k, m or g): remove it or write it so",
                owner_name(wc)
            ))
        })?;
        memcached_flags.extend(parsed);
    }
    let mut objects = Vec::new();
    let mut preserved = Vec::new();
    let mut preserved_memcached = Vec::new();
    for agent in Agent::ALL {
        if agent_disabled(wc, agent) {
            continue;
        }
        let templates = bundle.agent(agent);
        for template in templates.for_environment(general.environment) {
            let mut object = template.object.clone();
            ctx.common_patches(template, &mut object)?;
            if agent == Agent::Flux
                && template.kind() == "Deployment"
                && template.name() == MEMCACHED_DEPLOYMENT
                && !memcached_flags.is_empty()
            {
                preserved_memcached.extend(memcached_patch(&mut object, &memcached_flags));
            }
            match templates.container_of(template.kind(), template.name()) {
                Some((0, target)) => {
                    let (args, kept) = match agent {
                        Agent::Flux => {
                            flux_args(wc, &ctx, inputs, &template_flags(&object, target))
                        }
                        Agent::Scope => (scope_args(wc, &ctx), Vec::new()),
                        Agent::Prometheus => (wc.spec.prometheus.append_args.clone(), Vec::new()),
                    };
                    preserved.extend(kept);
                    ctx.agent_container_patches(agent, target, true, template, &mut object, &args)?;
                    if agent == Agent::Flux {
                        env::add_flux_env(wc, inputs, target, &mut object).map_err(|m| {
                            RenderError::Other(format!(
                                "WeaveCloud `{namespace}/{}`: {m}",
                                owner_name(wc)
                            ))
                        })?;
                        volumes::add_flux_volumes(wc, inputs, target, &mut object).map_err(
                            |m| {
                                RenderError::Other(format!(
                                    "WeaveCloud `{namespace}/{}`: {m}",
                                    owner_name(wc)
                                ))
                            },
                        )?;
                    }
                }
                Some((_, target)) => {
                    let args = match agent {
                        Agent::Scope => scope_cluster_args(wc, &ctx),
                        Agent::Flux | Agent::Prometheus => Vec::new(),
                    };
                    ctx.agent_container_patches(
                        agent,
                        target,
                        false,
                        template,
                        &mut object,
                        &args,
                    )?;
                }
                None => {}
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
        let target = bundle.prometheus.container();
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
        preserved_memcached_args: preserved_memcached,
        bundle_version: bundle.version.clone(),
    })
}

fn owner_name(wc: &WeaveCloud) -> &str {
    wc.metadata.name.as_deref().unwrap_or_default()
}

/// The flag names the bundle's flux template gives its flux container (`memcached-hostname`,
/// …): what a takeover must not ask to commit, since the bundle generates them already.
pub fn flux_template_flags(bundle: &Bundle) -> Vec<String> {
    let target = bundle.flux.container();
    bundle
        .agent(Agent::Flux)
        .templates
        .iter()
        .filter(|t| t.kind() == target.kind && t.name() == target.name)
        .flat_map(|t| template_flags(&t.object, target))
        .collect()
}

/// The flag names the bundle's template already gives container `target` (`memcached-hostname`, …).
fn template_flags(object: &Value, target: &super::bundle::ContainerRef) -> Vec<String> {
    let Some(index) = container_index(object, &target.kind, &target.container) else {
        return Vec::new();
    };
    let pod = pod_template_pointer(&target.kind).unwrap_or("/spec/template");
    object
        .pointer(&format!("{pod}/spec/containers/{index}/args"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().and_then(flag_name).map(str::to_string))
        .collect()
}

/// Replace `-m`/`-I` in the memcached container's args with the preserved values; the
/// preserved args, for status. A template without that container is left as it is.
fn memcached_patch(object: &mut Value, preserved: &BTreeMap<String, String>) -> Vec<String> {
    let Some(index) = container_index(object, "Deployment", MEMCACHED_CONTAINER) else {
        return Vec::new();
    };
    let pointer = format!("/spec/template/spec/containers/{index}/args");
    let current: Vec<String> = object
        .pointer(&pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let (args, kept) = memcached_args(&current, preserved);
    if let Some(slot) = object.pointer_mut(&format!("/spec/template/spec/containers/{index}")) {
        slot["args"] = json!(args);
    }
    kept
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

/// Why a `containerRuntimeEndpoint` is refused (shared with the loader's file:line error).
pub const RUNTIME_SOCKET_RULE: &str = "is not a known container runtime socket: it is mounted from the host into scope's privileged probe, so only the standard sockets of Docker, containerd, CRI-O and cri-dockerd are accepted (see docs/agents.md)";

/// Why a WeaveCloud's spec cannot be rendered (checked before any agent is).
#[derive(Debug, thiserror::Error)]
enum SpecError {
    #[error("`spec.{agent}.appendArgs` sets `--{flag}`: the token must not be written into a manifest; Weft passes it from the Secret named by `spec.general.tokenSecretRef`")]
    TokenInAppendArgs { agent: &'static str, flag: String },
    #[error(
        "`spec.general.wcHostname: {0}` must be a host name such as `cloud.weave.works`, not a URL"
    )]
    HostnameNotAHost(String),
}

fn check_no_token_in_append_args(wc: &WeaveCloud) -> Result<(), SpecError> {
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
            return Err(SpecError::TokenInAppendArgs {
                agent,
                flag: flag.to_string(),
            });
        }
    }
    Ok(())
}

/// `wcHostname` is a host (optionally `:port`): it goes into `https://…` and `wss://…` URLs.
fn check_hostname(hostname: &str) -> Result<&str, SpecError> {
    let h = hostname.trim();
    let bad =
        h.is_empty() || h.contains("://") || h.contains('/') || h.contains(char::is_whitespace);
    if bad {
        return Err(SpecError::HostnameNotAHost(hostname.to_string()));
    }
    Ok(h)
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

#[cfg(test)]
mod tests;
