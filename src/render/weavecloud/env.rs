//! Environment variables of the flux container: `spec.flux.env`, and those a takeover kept from
//! the launcher's flux (an `HTTPS_PROXY` a proxied cluster needs to reach its git host, …).

use serde_json::{json, Value};

use super::super::bundle::{container_index, pod_template_pointer, ContainerRef};
use super::{AgentInputs, TOKEN_ENV};
use crate::api::weavecloud::WeaveCloud;

/// The `valueFrom` sources an env var of flux may use: nothing of the node, nothing of another
/// namespace.
pub const ALLOWED_ENV_SOURCES: &[&str] = &["secretKeyRef", "configMapKeyRef", "fieldRef"];

/// Whether `env` is an env var Weft may give flux: a `name` (a C identifier-like name, never the
/// token's, which Weft sets), and either a string `value` (at most 1 KiB) or a `valueFrom` with
/// one of [`ALLOWED_ENV_SOURCES`]; nothing else.
pub fn check_flux_env(env: &Value) -> Result<(), String> {
    let Some(object) = env.as_object() else {
        return Err("not an object".into());
    };
    if let Some(key) = object
        .keys()
        .find(|k| !["name", "value", "valueFrom"].contains(&k.as_str()))
    {
        return Err(format!("`{key}` is not an env var field"));
    }
    let name = object
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name_ok = !name.is_empty()
        && name.len() <= 256
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
    if !name_ok {
        return Err("its name is not an environment variable name".into());
    }
    if name == TOKEN_ENV {
        return Err(format!("{TOKEN_ENV} is set by Weft"));
    }
    match (object.get("value"), object.get("valueFrom")) {
        (Some(Value::String(v)), None) if v.len() <= 1024 => Ok(()),
        (Some(Value::String(_)), None) => Err("its value is longer than 1024 bytes".into()),
        (None, Some(Value::Object(from))) => match from.keys().collect::<Vec<_>>().as_slice() {
            [source] if ALLOWED_ENV_SOURCES.contains(&source.as_str()) => Ok(()),
            _ => Err(format!(
                "its valueFrom must be one of {}",
                ALLOWED_ENV_SOURCES.join(", ")
            )),
        },
        _ => Err("it needs a string `value` or a `valueFrom`".into()),
    }
}

/// Add `spec.flux.env` and the env vars the takeover kept (`inputs`) to flux's container
/// `target`. The spec wins over a kept var of the same name; a name the template's container
/// already sets is refused in the spec and left out of the kept ones.
pub(super) fn add_flux_env(
    wc: &WeaveCloud,
    inputs: &AgentInputs,
    target: &ContainerRef,
    object: &mut Value,
) -> Result<(), String> {
    let flux = &wc.spec.flux;
    if flux.env.is_empty() && inputs.preserved_flux_env.is_empty() {
        return Ok(());
    }
    let Some(index) = container_index(object, &target.kind, &target.container) else {
        return Ok(());
    };
    let pod = pod_template_pointer(&target.kind).unwrap_or("/spec/template");
    let pointer = format!("{pod}/spec/containers/{index}/env");
    let mut env: Vec<Value> = object
        .pointer(&pointer)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut names: Vec<String> = env
        .iter()
        .filter_map(|e| e["name"].as_str().map(str::to_string))
        .collect();
    for (i, e) in flux.env.iter().enumerate() {
        check_flux_env(e).map_err(|why| format!("`spec.flux.env[{i}]`: {why}"))?;
        let name = e["name"].as_str().unwrap_or_default().to_string();
        if names.contains(&name) {
            return Err(format!(
                "`spec.flux.env[{i}]`: `{name}` is already set in the flux container"
            ));
        }
        names.push(name);
        env.push(e.clone());
    }
    for e in &inputs.preserved_flux_env {
        let name = e["name"].as_str().unwrap_or_default().to_string();
        if check_flux_env(e).is_err() || names.contains(&name) {
            continue;
        }
        names.push(name);
        env.push(e.clone());
    }
    if let Some(container) = object.pointer_mut(&format!("{pod}/spec/containers/{index}")) {
        container["env"] = json!(env);
    }
    Ok(())
}
