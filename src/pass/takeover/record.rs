//! What a takeover keeps from the launcher's flux, made durable (issue 29, items 2 and 3).
//!
//! Before the launcher's `weave-flux-agent` is removed, what it ran with is captured
//! ([`Record::from_launcher`]): the flux arguments Weft keeps (git settings and every other flag
//! Weft does not generate itself: `--git-readonly`, `--sync-state=secret`, `--git-user`, …), the
//! memcached `-m`/`-I`, and the pod's extra volumes and mounts (a known_hosts `ssh-config`
//! ConfigMap, …). It is written to a ConfigMap Weft owns in the WeaveCloud's namespace,
//! `weft-takeover-<name>` ([`write`]), which no inventory lists: it survives a delete and
//! recreate of the WeaveCloud, so a recreated WeaveCloud renders flux as it ran. What cannot be
//! kept (a hostPath volume, a sidecar, an env var) is listed in the record's `dropped` key, in
//! an event and in `weft sync`'s output. [`commit_yaml`] is the `spec.flux` to commit so that the
//! repository, not the record, says it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Decision, Found, LAUNCHER_LEGACY_NAMESPACE};
use crate::api::weavecloud::{WeaveCloud, ALLOWED_FLUX_VOLUME_SOURCES};
use crate::apply::FIELD_MANAGER;
use crate::render::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_REF_ANNOTATION};
use crate::render::weavecloud::{
    extra_flux_args, parse_flux_args, parse_memcached_args, MEMCACHED_CONTAINER,
    MEMCACHED_DEPLOYMENT, PRESERVABLE_FLUX_ARGS,
};

/// Label on a takeover record: the WeaveCloud's name.
pub const RECORD_OF_LABEL: &str = "weft.io/takeover-record-of";
/// The key holding the record (JSON).
const RECORD_KEY: &str = "record.json";
/// The key holding the YAML to commit.
const COMMIT_KEY: &str = "commit.yaml";
/// The Secret flux keeps its deploy key in: Weft renders its volume itself.
const DEPLOY_KEY_SECRET: &str = "flux-git-deploy";
/// The flux Deployment of the launcher and of Weft.
const FLUX_DEPLOYMENT: &str = "weave-flux-agent";
/// The flux container of the launcher's installs in `weave` (kube-system's was `agent`, the first).
const FLUX_CONTAINER: &str = "flux-agent";

/// Name of WeaveCloud `name`'s takeover record (in its namespace).
pub fn record_name(name: &str) -> String {
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
    /// What the takeover could not keep, said to the user.
    #[serde(default)]
    pub dropped: Vec<String>,
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
            if name != "WEAVE_CLOUD_TOKEN" {
                record
                    .dropped
                    .push(format!("env {name} of the flux container"));
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
        record
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
        {
            continue;
        }
        append.push(a.clone());
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

/// WeaveCloud `namespace/name`'s record, if Weft wrote one.
pub async fn read(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Record>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let Some(cm) = api.get_opt(&record_name(name)).await? else {
        return Ok(None);
    };
    // Only Weft's own record, never a same-named ConfigMap someone else wrote.
    let ours = cm.labels().get(RECORD_OF_LABEL).map(String::as_str) == Some(name)
        && cm.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE);
    if !ours {
        return Ok(None);
    }
    let data = cm.data.unwrap_or_default();
    Ok(data
        .get(RECORD_KEY)
        .and_then(|j| serde_json::from_str(j).ok()))
}

/// Write `record` for `wc` (replacing an earlier one), with the YAML to commit.
pub async fn write(client: &Client, wc: &WeaveCloud, record: &Record) -> Result<(), kube::Error> {
    let ns = wc.namespace().unwrap_or_default();
    let name = wc.name_any();
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
            "name": record_name(&name),
            "namespace": ns,
            // Not the owner label: the record is in no inventory, never pruned.
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, RECORD_OF_LABEL: name},
            "annotations": {OWNER_REF_ANNOTATION: format!("WeaveCloud/{ns}/{name}")},
        },
        "data": data,
    });
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    api.patch(
        &record_name(&name),
        &PatchParams::apply(&format!("{FIELD_MANAGER}-takeover")).force(),
        &Patch::Apply(&cm),
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
pub fn notice(record: &Record, wc: &WeaveCloud) -> String {
    let ns = wc.namespace().unwrap_or_default();
    let mut out = format!(
        "kept from the launcher's flux in ConfigMap {ns}/{} (survives a delete and recreate of the WeaveCloud)",
        record_name(&wc.name_any())
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
/// the record. Returns the record, `None` when no launcher flux is removed.
pub async fn keep(
    client: &Client,
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
    write(client, wc, &record).await?;
    Ok(Some(record))
}

/// The takeover's record for `wc`: captured from the launcher's flux when the running flux is
/// not Weft's (`running` owned by another), else the one Weft wrote
/// ([`read`]); `None` for a disabled flux or without either.
pub async fn for_render(
    client: &Client,
    wc: &WeaveCloud,
    container: &str,
    running: Option<&(Vec<String>, bool)>,
    legacy: bool,
) -> Result<Option<Record>, kube::Error> {
    if wc.spec.flux.disable {
        return Ok(None);
    }
    let launcher_runs = match running {
        Some((_, ours)) => !ours,
        None => false,
    };
    if launcher_runs {
        if let Some(r) = capture(client, wc, container, legacy).await? {
            return Ok(Some(r));
        }
    }
    read(client, &wc.namespace().unwrap_or_default(), &wc.name_any()).await
}
