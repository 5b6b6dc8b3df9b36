//! Extra volumes of the flux pod: `spec.flux.volumes`/`volumeMounts`, and those a takeover kept
//! from the launcher's flux (a known_hosts ConfigMap for a private git host, …).

use serde_json::{json, Value};

use super::super::bundle::{container_index, pod_template_pointer, ContainerRef};
use super::AgentInputs;
use crate::api::weavecloud::{WeaveCloud, ALLOWED_FLUX_VOLUME_SOURCES};

/// The one source of a volume (`configMap`, `hostPath`, …), if it has exactly one.
fn source(volume: &Value) -> Option<&str> {
    let o = volume.as_object()?;
    let mut keys = o.keys().filter(|k| *k != "name");
    let first = keys.next()?;
    keys.next().is_none().then_some(first.as_str())
}

/// Check `spec.flux.volumes` and `volumeMounts`: each volume named, with one allowed source;
/// each mount naming one of them (or a volume of the template), with a `mountPath`.
fn check_spec(wc: &WeaveCloud, template_volumes: &[String]) -> Result<(), String> {
    let flux = &wc.spec.flux;
    let mut names: Vec<&str> = Vec::new();
    for (i, v) in flux.volumes.iter().enumerate() {
        let Some(name) = v["name"].as_str().filter(|n| !n.is_empty()) else {
            return Err(format!("`spec.flux.volumes[{i}]` has no `name`"));
        };
        if template_volumes.iter().any(|t| t == name) || names.contains(&name) {
            return Err(format!(
                "`spec.flux.volumes[{i}]`: the name `{name}` is already used by the flux pod"
            ));
        }
        match source(v) {
            Some(s) if ALLOWED_FLUX_VOLUME_SOURCES.contains(&s) => {}
            other => {
                return Err(format!(
                    "`spec.flux.volumes[{i}]` (`{name}`): the source must be one of {} (found {})",
                    ALLOWED_FLUX_VOLUME_SOURCES.join(", "),
                    other.map_or("none or several".to_string(), |s| format!("`{s}`"))
                ))
            }
        }
        names.push(name);
    }
    for (i, m) in flux.volume_mounts.iter().enumerate() {
        let name = m["name"].as_str().unwrap_or_default();
        if !names.contains(&name) && !template_volumes.iter().any(|t| t == name) {
            return Err(format!(
                "`spec.flux.volumeMounts[{i}]` mounts `{name}`, which is no volume of `spec.flux.volumes`"
            ));
        }
        if m["mountPath"].as_str().is_none_or(str::is_empty) {
            return Err(format!("`spec.flux.volumeMounts[{i}]` has no `mountPath`"));
        }
    }
    Ok(())
}

/// Add `spec.flux.volumes` and the volumes the takeover kept (`inputs`) to the flux pod, and
/// their mounts to its container `target`. The spec wins over a kept volume of the same name; a
/// kept volume whose name the template uses, or whose mount path is taken, is left out.
pub(super) fn add_flux_volumes(
    wc: &WeaveCloud,
    inputs: &AgentInputs,
    target: &ContainerRef,
    object: &mut Value,
) -> Result<(), String> {
    let pod = pod_template_pointer(&target.kind).unwrap_or("/spec/template");
    let Some(index) = container_index(object, &target.kind, &target.container) else {
        return Ok(());
    };
    let names = |list: Option<&Value>, key: &str| -> Vec<String> {
        list.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v[key].as_str().map(str::to_string))
            .collect()
    };
    let template_volumes = names(object.pointer(&format!("{pod}/spec/volumes")), "name");
    check_spec(wc, &template_volumes)?;
    let flux = &wc.spec.flux;
    let mut volumes: Vec<Value> = flux.volumes.clone();
    let mut mounts: Vec<Value> = flux.volume_mounts.clone();
    let c = format!("{pod}/spec/containers/{index}");
    let mut paths = names(object.pointer(&format!("{c}/volumeMounts")), "mountPath");
    paths.extend(names(Some(&json!(mounts)), "mountPath"));
    for v in &inputs.preserved_flux_volumes {
        let name = v["name"].as_str().unwrap_or_default();
        let taken = template_volumes.iter().any(|t| t == name)
            || volumes.iter().any(|s| s["name"] == json!(name));
        if taken || !source(v).is_some_and(|s| ALLOWED_FLUX_VOLUME_SOURCES.contains(&s)) {
            continue;
        }
        volumes.push(v.clone());
        for m in &inputs.preserved_flux_mounts {
            let path = m["mountPath"].as_str().unwrap_or_default();
            if m["name"] == json!(name) && !paths.iter().any(|p| p == path) {
                paths.push(path.to_string());
                mounts.push(m.clone());
            }
        }
    }
    if volumes.is_empty() {
        return Ok(());
    }
    let Some(spec) = object.pointer_mut(&format!("{pod}/spec")) else {
        return Ok(());
    };
    match spec["volumes"].as_array_mut() {
        Some(list) => list.extend(volumes),
        None => spec["volumes"] = json!(volumes),
    }
    if let Some(container) = spec["containers"].get_mut(index) {
        match container["volumeMounts"].as_array_mut() {
            Some(list) => list.extend(mounts),
            None => container["volumeMounts"] = json!(mounts),
        }
    }
    Ok(())
}
