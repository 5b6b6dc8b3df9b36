//! Drift: has the live copy of an object moved away from what Weft applied?
//!
//! The API server records, per field manager, which fields it owns (`metadata.managedFields`).
//! When anyone else changes the value of a field Weft applied (a `kubectl edit`, a `kubectl
//! scale`, a controller), the server moves that field's ownership to them; when someone removes it,
//! it leaves Weft's set. So the live object has drifted exactly when some field of the desired
//! object is no longer in the field set of manager `weft`. This needs no value comparison, so it
//! is immune to server-side defaulting and normalisation (`0.5` → `500m`), which would otherwise
//! make every pass re-apply. Only when the server returns no managedFields at all do we fall back
//! to comparing the desired values against the live ones.

use serde_json::{Map, Value};
use std::fmt::Write as _;

use super::FIELD_MANAGER;

/// Top-level keys that are never part of an apply's field set.
const SKIP_TOP: &[&str] = &["apiVersion", "kind", "status"];
/// Metadata keys that identify the object rather than being fields of it.
const SKIP_META: &[&str] = &[
    "name",
    "namespace",
    "generateName",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "managedFields",
];

/// The first field (as a `/`-separated path) of `desired` that `live` no longer has as applied
/// by Weft, or `None` when it has not drifted.
pub fn drifted_field(desired: &Value, live: &Value) -> Option<String> {
    let managed = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array);
    match managed {
        Some(entries) if !entries.is_empty() => {
            let ours = entries.iter().find(|e| {
                e.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER)
                    && e.get("operation").and_then(Value::as_str) == Some("Apply")
                    && e.get("subresource")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .is_empty()
            });
            let Some(fields) = ours
                .and_then(|e| e.get("fieldsV1"))
                .and_then(Value::as_object)
            else {
                return Some("(no fields applied by weft)".to_string());
            };
            missing_in_fields(desired.as_object()?, fields)
        }
        _ => differs_from_live(desired, live),
    }
}

/// [`drifted_field`] from the field set of Weft's own `Apply` entry alone (`None`: the object has
/// managedFields, but none of Weft's), for a live state read as metadata.
pub fn drifted_from_fields(desired: &Value, fields: Option<&Map<String, Value>>) -> Option<String> {
    match fields {
        Some(fields) => missing_in_fields(desired.as_object()?, fields),
        None => Some("(no fields applied by weft)".to_string()),
    }
}

fn filtered_root(desired: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in desired {
        if SKIP_TOP.contains(&k.as_str()) {
            continue;
        }
        if k == "metadata" {
            if let Value::Object(meta) = v {
                let m: Map<String, Value> = meta
                    .iter()
                    .filter(|(mk, _)| !SKIP_META.contains(&mk.as_str()))
                    .map(|(mk, mv)| (mk.clone(), mv.clone()))
                    .collect();
                out.insert(k.clone(), Value::Object(m));
            }
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    out
}

/// The first desired field (top-level `apiVersion`, `kind`, `status` and the identifying
/// metadata left out) missing from Weft's field set `fields`. Walked in place, with one path
/// buffer: a no-op pass asks this of every object it lists.
fn missing_in_fields(desired: &Map<String, Value>, fields: &Map<String, Value>) -> Option<String> {
    let mut path = String::new();
    let mut key = String::new();
    let top = desired.iter().filter(|(k, v)| {
        !SKIP_TOP.contains(&k.as_str()) && (k.as_str() != "metadata" || v.is_object())
    });
    for (k, v) in top {
        if k != "metadata" {
            if let Some(p) = check_entry(k, v, fields, &mut path, &mut key) {
                return Some(p);
            }
            continue;
        }
        let Value::Object(meta) = v else { continue };
        let kept = || {
            meta.iter()
                .filter(|(mk, _)| !SKIP_META.contains(&mk.as_str()))
        };
        // As a map of its kept keys: nothing kept is an empty map, which carries no field.
        if kept().next().is_none() {
            continue;
        }
        let Some(node) = fields.get("f:metadata") else {
            return Some("/metadata".to_string());
        };
        let node = node.as_object().filter(|n| !n.is_empty());
        let Some(node) = node else { continue };
        path.push_str("/metadata");
        for (mk, mv) in kept() {
            if let Some(p) = check_entry(mk, mv, node, &mut path, &mut key) {
                return Some(p);
            }
        }
        path.clear();
    }
    None
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn check_map(
    desired: &Map<String, Value>,
    fields: &Map<String, Value>,
    path: &mut String,
) -> Option<String> {
    let mut key = String::new();
    for (k, v) in desired {
        if let Some(p) = check_entry(k, v, fields, path, &mut key) {
            return Some(p);
        }
    }
    None
}

/// The desired field `k` with value `v` under `path`, against the field set node `fields` of
/// that level (`key`: a buffer for its `f:` key). `path` is as it was on return, unless a
/// missing field's path is returned.
fn check_entry(
    k: &str,
    v: &Value,
    fields: &Map<String, Value>,
    path: &mut String,
    key: &mut String,
) -> Option<String> {
    // Nulls and empty containers carry no field the server would record.
    if is_empty(v) {
        return None;
    }
    let len = path.len();
    path.push('/');
    path.push_str(k);
    key.clear();
    key.push_str("f:");
    key.push_str(k);
    let found = match fields.get(key.as_str()) {
        None => Some(path.clone()),
        Some(node) => check_value(v, node, path),
    };
    path.truncate(len);
    found
}

fn check_value(v: &Value, node: &Value, path: &mut String) -> Option<String> {
    let empty = Map::new();
    let node = node.as_object().unwrap_or(&empty);
    // A leaf node owns the whole value: an atomic map or struct (a Service's `selector`, a
    // Deployment's `spec.selector`, a `roleRef`) or an atomic list.
    if node.is_empty() {
        return None;
    }
    match v {
        Value::Object(m) => check_map(m, node, path),
        Value::Array(items) => {
            // An atomic list is owned as a whole: its node has no per-element children.
            let per_element = node
                .keys()
                .any(|k| k.starts_with("k:") || k.starts_with("v:") || k.starts_with("i:"));
            if !per_element {
                return None;
            }
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                // Writing into a String cannot fail.
                let _ = write!(path, "/{i}");
                let found = match item {
                    Value::Object(m) => match element_node(m, node) {
                        Some(child) => check_map(m, child, path),
                        None => Some(path.clone()),
                    },
                    Value::Array(_) | Value::Null => None,
                    scalar => {
                        let key =
                            format!("v:{}", serde_json::to_string(scalar).unwrap_or_default());
                        (!node.contains_key(&key) && !set_contains_loose(node, scalar))
                            .then(|| path.clone())
                    }
                };
                path.truncate(len);
                if found.is_some() {
                    return found;
                }
            }
            None
        }
        _ => None,
    }
}

/// The `k:{…}` child of an associative list whose key fields match the desired element. A key
/// field missing from the desired element was defaulted by the server (a port's `protocol`).
fn element_node<'a>(
    item: &Map<String, Value>,
    node: &'a Map<String, Value>,
) -> Option<&'a Map<String, Value>> {
    for (key, child) in node {
        let Some(json) = key.strip_prefix("k:") else {
            continue;
        };
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(json) else {
            continue;
        };
        let matches = keys
            .iter()
            .all(|(kk, kv)| item.get(kk).is_none_or(|dv| loose_eq(dv, kv)));
        if matches {
            return child.as_object();
        }
    }
    None
}

fn set_contains_loose(node: &Map<String, Value>, scalar: &Value) -> bool {
    node.keys().any(|k| {
        k.strip_prefix("v:")
            .and_then(|j| serde_json::from_str::<Value>(j).ok())
            .is_some_and(|v| loose_eq(scalar, &v))
    })
}

/// Equality that tolerates the server's int-or-string and number spelling.
fn loose_eq(a: &Value, b: &Value) -> bool {
    if a == b {
        return true;
    }
    match (a, b) {
        (Value::Number(x), Value::String(y)) | (Value::String(y), Value::Number(x)) => {
            x.to_string() == *y
        }
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => false,
    }
}

/// Fallback without managedFields: every desired value must be in the live object (the live
/// object may have more: defaults, other managers' fields).
fn differs_from_live(desired: &Value, live: &Value) -> Option<String> {
    let d = desired.as_object()?;
    let root = filtered_root(d);
    subset(&Value::Object(root), live, "")
}

fn subset(d: &Value, l: &Value, path: &str) -> Option<String> {
    match (d, l) {
        (Value::Object(dm), Value::Object(lm)) => {
            for (k, dv) in dm {
                if is_empty(dv) {
                    continue;
                }
                let here = format!("{path}/{k}");
                match lm.get(k) {
                    Some(lv) => {
                        if let Some(p) = subset(dv, lv, &here) {
                            return Some(p);
                        }
                    }
                    None => return Some(here),
                }
            }
            None
        }
        (Value::Array(da), Value::Array(la)) => {
            if da.len() != la.len() {
                return Some(path.to_string());
            }
            da.iter()
                .zip(la)
                .enumerate()
                .find_map(|(i, (dv, lv))| subset(dv, lv, &format!("{path}/{i}")))
        }
        (dv, lv) if loose_eq(dv, lv) => None,
        _ => Some(path.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn live_with(fields: Value, extra: Value) -> Value {
        let mut live = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n", "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {}}},
                {"manager": "weft", "operation": "Apply", "fieldsV1": fields}
            ]}
        });
        if let (Value::Object(l), Value::Object(e)) = (&mut live, extra) {
            l.extend(e);
        }
        live
    }

    fn desired() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n", "labels": {"weft.io/owner": "abc"}},
            "spec": {
                "replicas": 2,
                "template": {"spec": {"containers": [
                    {"name": "web", "image": "nginx:1", "args": ["--a"], "ports": [{"containerPort": 80}]}
                ]}}
            }
        })
    }

    fn full_fields() -> Value {
        json!({
            "f:metadata": {"f:labels": {"f:weft.io/owner": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"web\"}": {
                        ".": {}, "f:name": {}, "f:image": {}, "f:args": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}
                    }
                }}}
            }
        })
    }

    #[test]
    fn all_fields_owned_means_no_drift_even_with_defaults_in_live() {
        let live = live_with(
            full_fields(),
            json!({"spec": {"replicas": 2, "progressDeadlineSeconds": 600}}),
        );
        assert_eq!(drifted_field(&desired(), &live), None);
    }

    #[test]
    fn a_field_taken_by_another_manager_is_drift() {
        let mut fields = full_fields();
        fields["f:spec"]
            .as_object_mut()
            .unwrap()
            .remove("f:replicas");
        let live = live_with(fields, json!({}));
        assert_eq!(
            drifted_field(&desired(), &live).as_deref(),
            Some("/spec/replicas")
        );
    }

    #[test]
    fn a_changed_list_element_key_is_drift() {
        let mut d = desired();
        d["spec"]["template"]["spec"]["containers"][0]["name"] = json!("api");
        let live = live_with(full_fields(), json!({}));
        assert_eq!(
            drifted_field(&d, &live).as_deref(),
            Some("/spec/template/spec/containers/0")
        );
    }

    #[test]
    fn atomic_maps_are_owned_whole() {
        let d = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"selector": {"app": "x"}, "ports": [{"port": 80, "targetPort": 8080}]}});
        let fields = json!({"f:spec": {"f:selector": {}, "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:targetPort": {}}}}});
        let live = json!({"metadata": {"managedFields": [{"manager": "weft", "operation": "Apply", "fieldsV1": fields}]}});
        assert_eq!(drifted_field(&d, &live), None);
    }

    #[test]
    fn no_weft_entry_is_drift() {
        let live = json!({"metadata": {"managedFields": [
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:spec": {}}}
        ]}});
        assert!(drifted_field(&desired(), &live).is_some());
    }

    #[test]
    fn set_lists_and_empty_values() {
        let d = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "x", "finalizers": ["a/b"], "annotations": {}}});
        let fields = json!({"f:metadata": {"f:finalizers": {".": {}, "v:\"a/b\"": {}}}});
        let live = json!({"metadata": {"managedFields": [{"manager": "weft", "operation": "Apply", "fieldsV1": fields}]}});
        assert_eq!(drifted_field(&d, &live), None);
        let d2 = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "x", "finalizers": ["c/d"]}});
        assert_eq!(
            drifted_field(&d2, &live).as_deref(),
            Some("/metadata/finalizers/0")
        );
    }

    #[test]
    fn value_fallback_without_managed_fields() {
        let d = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
        let same = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "uid": "u"}, "data": {"k": "v"}});
        let edited = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "w"}});
        assert_eq!(drifted_field(&d, &same), None);
        assert_eq!(drifted_field(&d, &edited).as_deref(), Some("/data/k"));
    }
}
