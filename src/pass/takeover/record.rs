//! What a takeover keeps from the launcher's flux, made durable (issue 29, items 2 and 3).
//!
//! Before the launcher's `weave-flux-agent` is removed, what it ran with is captured
//! ([`Record::from_launcher`]): the flux arguments Weft keeps (git settings and every other flag
//! Weft does not generate itself: `--git-readonly`, `--sync-state=secret`, `--git-user`, …), the
//! memcached `-m`/`-I`, and the pod's extra volumes and mounts (a known_hosts `ssh-config`
//! ConfigMap, …). It is written to a ConfigMap in **Weft's own namespace** (`--weft-namespace`),
//! `weft-takeover-<namespace>.<name>` ([`write`]), which no inventory lists: it survives a delete
//! and recreate of the WeaveCloud, so a recreated WeaveCloud renders flux as it ran. What cannot
//! be kept (a hostPath volume, a sidecar, an env var) is listed in the record's `dropped` key, in
//! an event and in `weft sync`'s output. [`commit_yaml`] is the `spec.flux` to commit so that the
//! repository, not the record, says it.
//!
//! Why Weft's namespace (issue 48, item 1): what Weft reads back as its own must be provably its
//! own. Anyone who may create a ConfigMap in the WeaveCloud's namespace could plant a record
//! there (labels prove nothing, and a field manager's name is not an identity), and flux runs
//! with every right in the cluster. Tenants have no rights in Weft's namespace. A record is
//! still read as input ([`validate`]): only flags, volumes and mounts a takeover may keep, within
//! bounds. A record an earlier Weft wrote in the WeaveCloud's namespace is never read; that it
//! exists is said in `status.flux.dropped` ([`legacy_notice`]).

use crate::api::keys::{OWNER_REF_ANNOTATION, TAKEOVER_RECORD_LABEL, TAKEOVER_RECORD_OF};
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use super::check::validate;
use super::check::{check_flux_arg, check_memcached_arg, check_mount, check_volume, shown};
use super::{Decision, Found, LAUNCHER_LEGACY_NAMESPACE};
use crate::api::weavecloud::{WeaveCloud, ALLOWED_FLUX_VOLUME_SOURCES};
use crate::apply::FIELD_MANAGER;
use crate::render::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::render::weavecloud::{
    extra_flux_args, parse_flux_args, parse_memcached_args, MEMCACHED_CONTAINER,
    MEMCACHED_DEPLOYMENT, PRESERVABLE_FLUX_ARGS,
};

/// The key holding the record (JSON).
const RECORD_KEY: &str = "record.json";
/// The key holding the YAML to commit.
const COMMIT_KEY: &str = "commit.yaml";
/// The Secret flux keeps its deploy key in: Weft renders its volume itself.
pub(super) const DEPLOY_KEY_SECRET: &str = "flux-git-deploy";
/// The flux Deployment of the launcher and of Weft.
const FLUX_DEPLOYMENT: &str = "weave-flux-agent";
/// The flux container of the launcher's installs in `weave` (kube-system's was `agent`, the first).
const FLUX_CONTAINER: &str = "flux-agent";

/// Bounds of a record, at capture and when it is read back: a launcher flux never came close.
pub mod bounds {
    /// Bytes of the record's JSON.
    pub const RECORD_BYTES: usize = 64 * 1024;
    /// Flux flags kept.
    pub const FLUX_ARGS: usize = 64;
    /// Bytes of one flux flag (`--flag=value`).
    pub const ARG_BYTES: usize = 1024;
    /// Volumes (and mounts) kept.
    pub const VOLUMES: usize = 16;
    /// Entries of `dropped`, and bytes of each.
    pub const DROPPED: usize = 32;
    pub const DROPPED_BYTES: usize = 512;
}

/// Why a takeover record cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("reading takeover record ConfigMap {configmap}: {}", crate::apply::describe(source).0)]
    Kube {
        configmap: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading the launcher's flux agent in {namespace}: {}", crate::apply::describe(source).0)]
    Capture {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("takeover record ConfigMap {configmap} is not a record Weft can use: {problem}; fix or delete it (docs/migrating-from-launcher.md)")]
    Invalid { configmap: String, problem: String },
}

/// Name of WeaveCloud `namespace/name`'s takeover record (in Weft's namespace):
/// `weft-takeover-<namespace>.<name>` (a namespace has no dot, so two WeaveClouds never share
/// it), or a digest of both when that is longer than a ConfigMap name may be.
pub fn record_name(namespace: &str, name: &str) -> String {
    let plain = format!("weft-takeover-{namespace}.{name}");
    if plain.len() <= 253 {
        return plain;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{namespace}/{name}").as_bytes());
    format!("weft-takeover-{}", hex::encode(&digest[..10]))
}

/// Name of the record an earlier Weft kept in the WeaveCloud's own namespace.
fn legacy_record_name(name: &str) -> String {
    format!("weft-takeover-{name}")
}

/// What was kept from the launcher's flux.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Flux arguments kept, `--flag=value` (or `--flag` alone), in the launcher's order.
    #[serde(default)]
    pub flux_args: Vec<String>,
    /// memcached `-m`/`-I`, as `-m 1024`.
    #[serde(default)]
    pub memcached_args: Vec<String>,
    /// Pod volumes of flux besides the deploy key's (configMap, secret, emptyDir only).
    #[serde(default)]
    pub volumes: Vec<Value>,
    /// Mounts of those volumes in the flux container.
    #[serde(default)]
    pub volume_mounts: Vec<Value>,
    /// Env vars of the flux container besides the token's (`HTTPS_PROXY`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<Value>,
    /// What the takeover could not keep, said to the user.
    #[serde(default)]
    pub dropped: Vec<String>,
}

/// Whether `dropped` (an entry of [`Record::dropped`]) is one `acknowledged` lists: an entry of
/// `spec.flux.acknowledgeDropped` is the start of the dropped one (`volume docker-socket`).
pub fn acknowledged(dropped: &str, acknowledged: &[String]) -> bool {
    acknowledged.iter().any(|a| {
        let a = a.trim();
        !a.is_empty()
            && (dropped == a
                || dropped
                    .strip_prefix(a)
                    .is_some_and(|rest| rest.starts_with(' ')))
    })
}

impl Record {
    pub fn is_empty(&self) -> bool {
        *self == Record::default()
    }

    /// Capture a launcher flux Deployment (`flux`, its container `container` or else the first
    /// one, as the launcher read it) and the args of its memcached.
    pub fn from_launcher(flux: &Value, container: &str, memcached_args: &[String]) -> Record {
        let mut record = Record::default();
        let pod = flux.pointer("/spec/template/spec").unwrap_or(&Value::Null);
        let containers = pod["containers"].as_array().cloned().unwrap_or_default();
        let index = containers
            .iter()
            .position(|c| c["name"] == container)
            .unwrap_or(0);
        let Some(c) = containers.get(index) else {
            return record;
        };
        let args: Vec<String> = c["args"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let preserved = parse_flux_args(&args);
        // Preservable flags in their canonical order, then every other flag as it ran.
        for flag in PRESERVABLE_FLUX_ARGS {
            if let Some(v) = preserved.get(*flag) {
                record.flux_args.push(format!("--{flag}={v}"));
            }
        }
        record.flux_args.extend(extra_flux_args(&args));
        let memcached = parse_memcached_args(memcached_args);
        record.memcached_args = memcached.iter().map(|(f, v)| format!("-{f} {v}")).collect();

        let mut kept_volumes = Vec::new();
        for v in pod["volumes"].as_array().into_iter().flatten() {
            let name = v["name"].as_str().unwrap_or_default().to_string();
            if v.pointer("/secret/secretName") == Some(&json!(DEPLOY_KEY_SECRET)) {
                continue;
            }
            let source = v
                .as_object()
                .and_then(|o| o.keys().find(|k| *k != "name").cloned())
                .unwrap_or_default();
            if ALLOWED_FLUX_VOLUME_SOURCES.contains(&source.as_str()) {
                kept_volumes.push(name);
                record.volumes.push(v.clone());
            } else {
                record.dropped.push(format!(
                    "volume {name} ({source}: only {} volumes are carried over)",
                    ALLOWED_FLUX_VOLUME_SOURCES.join(", ")
                ));
            }
        }
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let name = m["name"].as_str().unwrap_or_default();
            if kept_volumes.iter().any(|k| k == name) {
                record.volume_mounts.push(m.clone());
            }
        }
        for e in c["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or_default();
            if name == crate::render::weavecloud::TOKEN_ENV {
                continue;
            }
            // The launcher's own `--token=` was literal in kube-system: an env var with the
            // token is the only one Weft sets; any other is carried over when it can be.
            match crate::render::weavecloud::check_flux_env(e) {
                Ok(()) => record.env.push(e.clone()),
                Err(why) => record
                    .dropped
                    .push(format!("env {name} of the flux container ({why})")),
            }
        }
        for (i, other) in containers.iter().enumerate() {
            if i != index {
                let name = other["name"].as_str().unwrap_or_default();
                record
                    .dropped
                    .push(format!("container {name} of the flux pod"));
            }
        }
        record.bounded()
    }

    /// Within [`bounds`], each entry as [`validate`] wants it: what is not is moved to
    /// `dropped` (so a capture always reads back).
    fn bounded(mut self) -> Record {
        let mut dropped = std::mem::take(&mut self.dropped);
        let mut args = Vec::new();
        for a in std::mem::take(&mut self.flux_args) {
            match check_flux_arg(&a) {
                Ok(()) if args.len() < bounds::FLUX_ARGS => args.push(a),
                Ok(()) => dropped.push(format!(
                    "flag {} (more than {} flags)",
                    shown(&a),
                    bounds::FLUX_ARGS
                )),
                Err(why) => dropped.push(format!("flag {} ({why})", shown(&a))),
            }
        }
        self.flux_args = args;
        let memcached = std::mem::take(&mut self.memcached_args);
        for m in memcached {
            match check_memcached_arg(&m) {
                Ok(()) => self.memcached_args.push(m),
                Err(why) => dropped.push(format!("memcached {} ({why})", shown(&m))),
            }
        }
        let mut names = Vec::new();
        for v in std::mem::take(&mut self.volumes) {
            let name = v["name"].as_str().unwrap_or_default().to_string();
            match check_volume(&v) {
                Ok(()) if self.volumes.len() < bounds::VOLUMES => {
                    names.push(name);
                    self.volumes.push(v);
                }
                Ok(()) => dropped.push(format!(
                    "volume {} (more than {} volumes)",
                    shown(&name),
                    bounds::VOLUMES
                )),
                Err(why) => dropped.push(format!("volume {} ({why})", shown(&name))),
            }
        }
        for m in std::mem::take(&mut self.volume_mounts) {
            let name = m["name"].as_str().unwrap_or_default().to_string();
            match check_mount(&m, &names) {
                Ok(()) if self.volume_mounts.len() < bounds::VOLUMES => self.volume_mounts.push(m),
                Ok(()) => dropped.push(format!("mount of volume {}", shown(&name))),
                Err(why) => dropped.push(format!("mount of volume {} ({why})", shown(&name))),
            }
        }
        for e in std::mem::take(&mut self.env) {
            let name = e["name"].as_str().unwrap_or_default().to_string();
            match crate::render::weavecloud::check_flux_env(&e) {
                Ok(()) if self.env.len() < bounds::VOLUMES => self.env.push(e),
                Ok(()) => dropped.push(format!(
                    "env {} (more than {} env vars)",
                    shown(&name),
                    bounds::VOLUMES
                )),
                Err(why) => dropped.push(format!("env {} ({why})", shown(&name))),
            }
        }
        // Mounts name kept volumes only; a volume whose mount was dropped stays unused.
        dropped.truncate(bounds::DROPPED);
        self.dropped = dropped.into_iter().map(|d| shown(&d)).collect();
        self
    }

    /// The flux flags other than [`PRESERVABLE_FLUX_ARGS`] (they render after the generated
    /// ones, as `appendArgs` do).
    pub fn extra_flux_args(&self) -> Vec<String> {
        extra_flux_args(&self.flux_args)
    }
}

/// The `spec.flux` to commit so that the repository says what the record keeps: `config` for
/// the git settings `wc` leaves unset, `appendArgs` for the other flags, `volumes` and
/// `volumeMounts`. Empty when there is nothing to commit.
pub fn commit_yaml(record: &Record, wc: &WeaveCloud) -> String {
    let flux = &wc.spec.flux;
    let ns = wc.namespace().unwrap_or_default();
    // What the bundle's flux template generates itself (`--memcached-hostname`, …) is not to
    // be committed: in `appendArgs` it would win over the bundle's, and the launcher's value
    // names what the takeover removes (kube-system's memcached Service). The built-in bundle
    // says which flags those are; a channel's bundle keeps the same flux template flags.
    let generated = crate::render::bundle::Bundle::builtin()
        .map(crate::render::weavecloud::flux_template_flags)
        .unwrap_or_default();
    let preserved = parse_flux_args(&record.flux_args);
    let mut config = serde_json::Map::new();
    let mut append: Vec<String> = Vec::new();
    for (flag, field, set) in [
        ("git-url", "gitUrl", &flux.config.git_url),
        ("git-branch", "gitBranch", &flux.config.git_branch),
        ("git-path", "gitPath", &flux.config.git_path),
        ("git-label", "gitLabel", &flux.config.git_label),
    ] {
        if let (None, Some(v)) = (set, preserved.get(flag)) {
            config.insert(field.to_string(), json!(v));
        }
    }
    let appended: Vec<&str> = flux
        .append_args
        .iter()
        .filter_map(|a| crate::render::weavecloud::flag_name(a))
        .collect();
    for a in &record.flux_args {
        let flag = crate::render::weavecloud::flag_name(a).unwrap_or_default();
        if ["git-url", "git-branch", "git-path", "git-label"].contains(&flag)
            || appended.contains(&flag)
            || generated.iter().any(|g| g == flag)
        {
            continue;
        }
        // What the launcher's flux named in kube-system exists, after the takeover, in the
        // WeaveCloud's namespace.
        append.push(a.replace(
            &format!(".{LAUNCHER_LEGACY_NAMESPACE}.svc"),
            &format!(".{ns}.svc"),
        ));
    }
    let mut spec_flux = serde_json::Map::new();
    if !config.is_empty() {
        spec_flux.insert("config".into(), Value::Object(config));
    }
    if !append.is_empty() {
        let mut all = flux.append_args.clone();
        all.extend(append);
        spec_flux.insert("appendArgs".into(), json!(all));
    }
    let names = |list: &[Value]| -> Vec<String> {
        list.iter()
            .filter_map(|v| v["name"].as_str().map(str::to_string))
            .collect()
    };
    let have = names(&flux.volumes);
    let volumes: Vec<&Value> = record
        .volumes
        .iter()
        .filter(|v| !have.iter().any(|h| v["name"] == json!(h)))
        .collect();
    if !volumes.is_empty() {
        let mut all = flux.volumes.clone();
        all.extend(volumes.into_iter().cloned());
        spec_flux.insert("volumes".into(), json!(all));
        let mut mounts = flux.volume_mounts.clone();
        mounts.extend(record.volume_mounts.iter().cloned());
        spec_flux.insert("volumeMounts".into(), json!(mounts));
    }
    let env: Vec<&Value> = record
        .env
        .iter()
        .filter(|e| !flux.env.iter().any(|s| s["name"] == e["name"]))
        .collect();
    if !env.is_empty() {
        let mut all = flux.env.clone();
        all.extend(env.into_iter().cloned());
        spec_flux.insert("env".into(), json!(all));
    }
    // memcached's `-m`/`-I`, so that deleting the record afterwards changes nothing.
    let set_memcached = parse_memcached_args(&flux.memcached_args);
    let missing: Vec<&String> = record
        .memcached_args
        .iter()
        .filter(|m| {
            parse_memcached_args(std::slice::from_ref(*m))
                .keys()
                .all(|k| !set_memcached.contains_key(k))
        })
        .collect();
    if !missing.is_empty() {
        let mut all = flux.memcached_args.clone();
        all.extend(missing.into_iter().cloned());
        spec_flux.insert("memcachedArgs".into(), json!(all));
    }
    if spec_flux.is_empty() {
        return String::new();
    }
    let doc = json!({"spec": {"flux": spec_flux}});
    serde_saphyr::to_string(&doc).unwrap_or_else(|_| doc.to_string())
}

/// The launcher's flux Deployment and its memcached's args, as they run now (in the
/// WeaveCloud's namespace, else, for the designated WeaveCloud, in kube-system), captured.
/// `None` when no launcher flux runs.
pub async fn capture(
    client: &Client,
    wc: &WeaveCloud,
    container: &str,
    legacy: bool,
) -> Result<Option<Record>, kube::Error> {
    let ns = wc.namespace().unwrap_or_default();
    let mut namespaces = vec![ns.as_str()];
    if legacy && ns != LAUNCHER_LEGACY_NAMESPACE {
        namespaces.push(LAUNCHER_LEGACY_NAMESPACE);
    }
    for n in namespaces {
        let api: Api<Deployment> = Api::namespaced(client.clone(), n);
        let Some(flux) = api.get_opt(FLUX_DEPLOYMENT).await? else {
            continue;
        };
        let labels = flux.labels();
        if labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
            || labels.get("app").map(String::as_str) != Some("weave-flux")
        {
            continue;
        }
        let memcached = api
            .get_opt(MEMCACHED_DEPLOYMENT)
            .await?
            .and_then(|d| d.spec?.template.spec)
            .and_then(|p| {
                let i = p
                    .containers
                    .iter()
                    .position(|c| c.name == MEMCACHED_CONTAINER)
                    .unwrap_or(0);
                p.containers.into_iter().nth(i)?.args
            })
            .unwrap_or_default();
        let value = serde_json::to_value(&flux).unwrap_or(Value::Null);
        return Ok(Some(Record::from_launcher(&value, container, &memcached)));
    }
    Ok(None)
}

/// WeaveCloud `namespace/name`'s record, read from Weft's namespace `weft_namespace` (the only
/// place one is read from), validated ([`validate`]). `None` without one; an error for a record
/// that names another WeaveCloud, cannot be parsed or holds what a takeover never keeps.
pub async fn read(
    client: &Client,
    weft_namespace: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<Record>, RecordError> {
    let configmap_name = record_name(namespace, name);
    let configmap = format!("{weft_namespace}/{configmap_name}");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
    let cm = api
        .get_opt(&configmap_name)
        .await
        .map_err(|source| RecordError::Kube {
            configmap: configmap.clone(),
            source,
        })?;
    let Some(cm) = cm else {
        return Ok(None);
    };
    let invalid = |problem: String| RecordError::Invalid {
        configmap: configmap.clone(),
        problem,
    };
    let of = cm
        .annotations()
        .get(TAKEOVER_RECORD_OF)
        .map(String::as_str)
        .unwrap_or_default();
    if of != format!("{namespace}/{name}") {
        return Err(invalid(format!(
            "its annotation {TAKEOVER_RECORD_OF} is `{}`, not `{namespace}/{name}`",
            shown(of)
        )));
    }
    let data = cm.data.unwrap_or_default();
    let Some(json) = data.get(RECORD_KEY) else {
        return Err(invalid(format!("it has no key {RECORD_KEY}")));
    };
    if json.len() > bounds::RECORD_BYTES {
        return Err(invalid(format!(
            "key {RECORD_KEY} is {} bytes, more than {}",
            json.len(),
            bounds::RECORD_BYTES
        )));
    }
    let record: Record = serde_json::from_str(json)
        .map_err(|e| invalid(format!("key {RECORD_KEY} is not a record: {e}")))?;
    validate(&record).map_err(invalid)?;
    Ok(Some(record))
}

/// What a record an earlier Weft kept in the WeaveCloud's namespace (`weft-takeover-<name>`
/// with its labels) gets: not read — anyone who may create a ConfigMap there could have
/// written it — but said, once per render, in `status.flux.dropped`. `None` without one.
pub async fn legacy_notice(
    client: &Client,
    weft_namespace: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, RecordError> {
    let legacy = legacy_record_name(name);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = api
        .get_opt(&legacy)
        .await
        .map_err(|source| RecordError::Kube {
            configmap: format!("{namespace}/{legacy}"),
            source,
        })?;
    let labelled = cm.is_some_and(|cm| {
        cm.labels().get(TAKEOVER_RECORD_OF).map(String::as_str) == Some(name)
            && cm.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
    });
    Ok(labelled.then(|| {
        format!(
            "takeover record {namespace}/{legacy} (not read: records in the WeaveCloud's namespace may be written by anyone who can create ConfigMaps there; commit its commit.yaml to the WeaveCloud, or move it to {weft_namespace}/{} as docs/migrating-from-launcher.md says)",
            record_name(namespace, name)
        )
    }))
}

/// Write `record` for `wc` (replacing an earlier one) in Weft's namespace `weft_namespace`,
/// with the YAML to commit. The namespace is created when missing (a first `weft sync`).
pub async fn write(
    client: &Client,
    weft_namespace: &str,
    wc: &WeaveCloud,
    record: &Record,
) -> Result<(), kube::Error> {
    let ns = wc.namespace().unwrap_or_default();
    let name = wc.name_any();
    let configmap = record_name(&ns, &name);
    let mut data = BTreeMap::new();
    data.insert(
        RECORD_KEY.to_string(),
        serde_json::to_string(record).unwrap_or_default(),
    );
    data.insert(COMMIT_KEY.to_string(), commit_yaml(record, wc));
    let cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap,
            "namespace": weft_namespace,
            // Not the owner label: the record is in no inventory, never pruned.
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, TAKEOVER_RECORD_LABEL: "true"},
            "annotations": {
                OWNER_REF_ANNOTATION: format!("WeaveCloud/{ns}/{name}"),
                TAKEOVER_RECORD_OF: format!("{ns}/{name}"),
            },
        },
        "data": data,
    });
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
    let pp = PatchParams::apply(&format!("{FIELD_MANAGER}-takeover")).force();
    match api.patch(&configmap, &pp, &Patch::Apply(&cm)).await {
        Err(e) if crate::apply::is_not_found(&e) => {
            ensure_namespace(client, weft_namespace).await?;
            api.patch(&configmap, &pp, &Patch::Apply(&cm)).await?;
        }
        other => {
            other?;
        }
    }
    Ok(())
}

/// Create Weft's namespace, labelled as Weft's, unless it exists.
async fn ensure_namespace(client: &Client, name: &str) -> Result<(), kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}}});
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&ns),
    )
    .await?;
    Ok(())
}

/// Whether `found` removes the launcher's flux (so its settings must be recorded first).
pub fn removes_launcher_flux(found: &[Found]) -> bool {
    found.iter().any(|f| {
        f.kind == "Deployment"
            && f.name == FLUX_DEPLOYMENT
            && matches!(f.action, Decision::Remove(_))
    })
}

/// What a takeover tells the user about `record` (an event's note, a line of `weft sync`'s
/// output): where the record is, what was dropped, and the YAML to commit.
pub fn notice(record: &Record, weft_namespace: &str, wc: &WeaveCloud) -> String {
    let ns = wc.namespace().unwrap_or_default();
    let mut out = format!(
        "kept from the launcher's flux in ConfigMap {weft_namespace}/{} (survives a delete and recreate of the WeaveCloud)",
        record_name(&ns, &wc.name_any())
    );
    if !record.dropped.is_empty() {
        out.push_str(&format!("; not kept: {}", record.dropped.join(", ")));
    }
    let yaml = commit_yaml(record, wc);
    if !yaml.is_empty() {
        out.push_str("; commit this to the WeaveCloud:\n");
        out.push_str(&yaml);
    }
    out
}

/// Before a takeover removes the launcher's flux (`found`): capture what it runs with and write
/// the record in Weft's namespace `weft_namespace`. Returns the record, `None` when no launcher
/// flux is removed.
pub async fn keep(
    client: &Client,
    weft_namespace: &str,
    wc: &WeaveCloud,
    found: &[Found],
    legacy: bool,
) -> Result<Option<Record>, kube::Error> {
    if wc.spec.flux.disable || !removes_launcher_flux(found) {
        return Ok(None);
    }
    let Some(record) = capture(client, wc, FLUX_CONTAINER, legacy).await? else {
        return Ok(None);
    };
    write(client, weft_namespace, wc, &record).await?;
    Ok(Some(record))
}

/// The takeover's record for `wc`: captured from the launcher's flux when the running flux is
/// not Weft's (`running` owned by another), else the one Weft wrote in its namespace
/// `weft_namespace` ([`read`]); `None` for a disabled flux or without either. A record an
/// earlier Weft left in the WeaveCloud's namespace is not read: it is named in `dropped`
/// ([`legacy_notice`]).
pub async fn for_render(
    client: &Client,
    weft_namespace: &str,
    wc: &WeaveCloud,
    container: &str,
    running: Option<&(Vec<String>, bool)>,
    legacy: bool,
) -> Result<Option<Record>, RecordError> {
    if wc.spec.flux.disable {
        return Ok(None);
    }
    let ns = wc.namespace().unwrap_or_default();
    let name = wc.name_any();
    let launcher_runs = match running {
        Some((_, ours)) => !ours,
        None => false,
    };
    if launcher_runs {
        let captured = capture(client, wc, container, legacy)
            .await
            .map_err(|source| RecordError::Capture {
                namespace: ns.clone(),
                source,
            })?;
        if let Some(r) = captured {
            return Ok(Some(r));
        }
    }
    if let Some(r) = read(client, weft_namespace, &ns, &name).await? {
        return Ok(Some(r));
    }
    Ok(legacy_notice(client, weft_namespace, &ns, &name)
        .await?
        .map(|note| Record {
            dropped: vec![note],
            ..Record::default()
        }))
}
