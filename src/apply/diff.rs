//! `weft diff`: what a sync would change, from a server-side dry-run apply of every object
//! (so defaulting, admission and conversion are the server's own), compared with the live copy.
//! Managed fields, status and fields only the server sets are stripped from both sides.

use futures::{FutureExt, StreamExt};
use kube::api::Patch;
use kube::Client;
use serde_json::Value;

use super::apply::apply_params_for;
use super::planned::PlannedObject;
use super::{is_not_found, ApplyError};
use crate::api::ObjectRef;
use crate::render::output::to_yaml;
use crate::render::DesiredObject;

/// What the diff of one object says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffChange {
    Create,
    Update,
    Prune,
}

/// One changed object and its unified diff.
#[derive(Clone, Debug)]
pub struct ObjectDiff {
    pub object: ObjectRef,
    pub change: DiffChange,
    pub text: String,
}

/// Metadata fields the server sets; they are not part of what a repository says.
const SERVER_METADATA: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
];

/// `obj` without status and server-set metadata.
pub fn normalize(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Value::Object(m) = &mut v {
        m.remove("status");
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            for k in SERVER_METADATA {
                meta.remove(*k);
            }
        }
    }
    v
}

/// What a Secret's value is shown as in a diff or a render.
pub const SECRET_MASK: &str = "***";

/// The maps of a Secret whose values are secret.
const SECRET_VALUE_FIELDS: [&str; 2] = ["data", "stringData"];

fn is_secret(obj: &Value) -> bool {
    obj.get("kind").and_then(Value::as_str) == Some("Secret")
        && obj.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// The annotation `kubectl apply` (client-side) writes: the whole object as last applied, a
/// Secret's values included.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A Secret's `kubectl apply` annotation, which repeats its values, as [`SECRET_MASK`].
fn mask_last_applied(obj: &mut Value) {
    if let Some(Value::Object(annotations)) = obj.pointer_mut("/metadata/annotations") {
        if let Some(v) = annotations.get_mut(LAST_APPLIED) {
            *v = Value::String(SECRET_MASK.to_string());
        }
    }
}

/// Replace every value of a Secret's `data` and `stringData` (and the copy of them in its
/// `kubectl apply` annotation) with [`SECRET_MASK`]; other objects are left as they are.
pub fn mask_secret(obj: &mut Value) {
    if !is_secret(obj) {
        return;
    }
    mask_last_applied(obj);
    for field in SECRET_VALUE_FIELDS {
        if let Some(Value::Object(map)) = obj.get_mut(field) {
            for v in map.values_mut() {
                *v = Value::String(SECRET_MASK.to_string());
            }
        }
    }
}

/// Mask two versions of a Secret so that a diff still shows which keys changed (as `kubectl
/// diff` does): equal values as `***`, changed ones as `*** (before)` and `*** (after)`.
fn mask_secret_pair(old: Option<&mut Value>, new: Option<&mut Value>) {
    let (old, new) = match (old, new) {
        (Some(o), Some(n)) if is_secret(o) || is_secret(n) => (o, n),
        (Some(o), None) => return mask_secret(o),
        (None, Some(n)) => return mask_secret(n),
        _ => return,
    };
    mask_last_applied(old);
    mask_last_applied(new);
    for field in SECRET_VALUE_FIELDS {
        let old_map = old.get(field).and_then(Value::as_object).cloned();
        let new_map = new.get(field).and_then(Value::as_object).cloned();
        let shown = |this: &Option<serde_json::Map<String, Value>>,
                     other: &Option<serde_json::Map<String, Value>>,
                     label: &str| {
            this.as_ref().map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        let same = other.as_ref().and_then(|o| o.get(k)) == Some(v);
                        let text = if same {
                            SECRET_MASK.to_string()
                        } else {
                            format!("{SECRET_MASK} ({label})")
                        };
                        (k.clone(), Value::String(text))
                    })
                    .collect::<serde_json::Map<_, _>>()
            })
        };
        let old_shown = shown(&old_map, &new_map, "before");
        let new_shown = shown(&new_map, &old_map, "after");
        if let (Some(m), Value::Object(o)) = (old_shown, &mut *old) {
            o.insert(field.to_string(), Value::Object(m));
        }
        if let (Some(m), Value::Object(n)) = (new_shown, &mut *new) {
            n.insert(field.to_string(), Value::Object(m));
        }
    }
}

fn yaml(v: &Value) -> String {
    to_yaml(v).unwrap_or_else(|e| format!("# cannot print: {e}\n"))
}

/// A unified diff of two normalized objects, or `None` when they are equal.
pub fn unified(
    object: &ObjectRef,
    live: Option<&Value>,
    desired: Option<&Value>,
) -> Option<String> {
    let mut old = live.map(normalize);
    let mut new = desired.map(normalize);
    // Decided on the real values, shown masked: a Secret's values never reach a diff.
    if old.as_ref().map(yaml) == new.as_ref().map(yaml) {
        return None;
    }
    mask_secret_pair(old.as_mut(), new.as_mut());
    let old = old.as_ref().map(yaml).unwrap_or_default();
    let new = new.as_ref().map(yaml).unwrap_or_default();
    let diff = similar::TextDiff::from_lines(&old, &new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("live/{object}"), &format!("desired/{object}"))
        .to_string();
    Some(text)
}

/// Diff every planned object against the cluster with a dry-run apply. `pending` are objects
/// whose CRD is not installed yet (shown as created as written).
pub async fn diff_objects(
    client: &Client,
    planned: &[PlannedObject],
    pending: &[DesiredObject],
    concurrency: usize,
) -> Result<Vec<ObjectDiff>, ApplyError> {
    let results: Vec<Result<Option<ObjectDiff>, ApplyError>> = futures::stream::iter(
        planned
            .iter()
            .map(|p| {
                async move {
                    let api = p.api(client);
                    let live = api
                        .get_opt(&p.object_ref.name)
                        .await
                        .map_err(|e| ApplyError::api("read", &p.object_ref, e))?;
                    // The dry run is sent as the apply would be.
                    let pp = apply_params_for(&p.resource.group).dry_run();
                    let to_value = |o| {
                        serde_json::to_value(o).map_err(|source| {
                            ApplyError::decode(&p.object_ref, "the object", source)
                        })
                    };
                    let dry = match api
                        .patch(
                            &p.object_ref.name,
                            &pp,
                            &Patch::Apply(p.desired.object.raw()),
                        )
                        .await
                    {
                        Ok(d) => to_value(d)?,
                        // Its namespace is created by the same pass: shown as written.
                        Err(e) if live.is_none() && is_not_found(&e) => p.desired.object.value(),
                        Err(e) => {
                            return Err(super::error::apply_error(
                                "dry-run apply",
                                &p.object_ref,
                                e,
                            ))
                        }
                    };
                    let live = live.map(to_value).transpose()?;
                    Ok(
                        unified(&p.object_ref, live.as_ref(), Some(&dry)).map(|text| ObjectDiff {
                            object: p.object_ref.clone(),
                            change: if live.is_some() {
                                DiffChange::Update
                            } else {
                                DiffChange::Create
                            },
                            text,
                        }),
                    )
                }
                .boxed()
            })
            .collect::<Vec<_>>(),
    )
    .buffered(concurrency.max(1))
    .collect()
    .await;
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(Some(d)) => out.push(d),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    if let Some(e) = ApplyError::from_list(errors) {
        return Err(e);
    }
    for d in pending {
        let object = d.object_ref();
        if let Some(text) = unified(&object, None, Some(&d.object.value())) {
            out.push(ObjectDiff {
                object,
                change: DiffChange::Create,
                text,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_fields_are_stripped_and_changes_shown() {
        let r = ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "a".into(),
            name: "c".into(),
        };
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "a", "resourceVersion": "1", "uid": "u", "managedFields": [{}]},
            "data": {"k": "old"}});
        let mut same = live.clone();
        same["metadata"]["resourceVersion"] = json!("2");
        assert_eq!(unified(&r, Some(&live), Some(&same)), None);
        let mut changed = same.clone();
        changed["data"]["k"] = json!("new");
        let text = unified(&r, Some(&live), Some(&changed)).unwrap();
        assert!(
            text.starts_with("--- live/ConfigMap/a/c\n+++ desired/ConfigMap/a/c\n"),
            "{text}"
        );
        assert!(text.contains("-  k: old\n"), "{text}");
        assert!(text.contains("+  k: new\n"), "{text}");
        assert!(!text.contains("resourceVersion"));
    }

    #[test]
    fn secret_values_are_masked_and_changed_keys_marked() {
        let r = ObjectRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: "a".into(),
            name: "s".into(),
        };
        let live = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"same": "c2FtZQ==", "old": "b2xkLXZhbHVl", "gone": "Z29uZQ=="}});
        let desired = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"same": "c2FtZQ==", "old": "bmV3LXZhbHVl", "added": "YWRkZWQ="}});
        let text = unified(&r, Some(&live), Some(&desired)).unwrap();
        for value in [
            "c2FtZQ==",
            "b2xkLXZhbHVl",
            "bmV3LXZhbHVl",
            "Z29uZQ==",
            "YWRkZWQ=",
        ] {
            assert!(!text.contains(value), "{value} in\n{text}");
        }
        assert!(text.contains("-  old: \"*** (before)\"\n"), "{text}");
        assert!(text.contains("+  old: \"*** (after)\"\n"), "{text}");
        assert!(text.contains("   same: \"***\"\n"), "{text}");
        assert!(text.contains("-  gone: "), "{text}");
        assert!(text.contains("+  added: "), "{text}");
        // Equal Secrets give no diff; a created or pruned one is masked whole.
        assert_eq!(unified(&r, Some(&live), Some(&live)), None);
        let created = unified(&r, None, Some(&desired)).unwrap();
        assert!(
            !created.contains("bmV3LXZhbHVl") && created.contains("old: \"***\""),
            "{created}"
        );
        let mut cm = desired.clone();
        cm["kind"] = json!("ConfigMap");
        mask_secret(&mut cm);
        assert_eq!(cm["data"]["old"], json!("bmV3LXZhbHVl"));
    }

    /// A Secret once applied with client-side `kubectl apply` (as the Weave Cloud launcher did)
    /// repeats its values in an annotation: masked too, live or pruned.
    #[test]
    fn a_secrets_kubectl_annotation_is_masked() {
        let r = ObjectRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: "a".into(),
            name: "s".into(),
        };
        let last = r#"{"apiVersion":"v1","data":{"token":"c2VjcmV0LXRva2Vu"},"kind":"Secret"}"#;
        let live = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s",
            "annotations": {LAST_APPLIED: last}}, "data": {"token": "c2VjcmV0LXRva2Vu"}});
        let desired = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"token": "bmV3"}});
        for text in [
            unified(&r, Some(&live), Some(&desired)).unwrap(),
            unified(&r, Some(&live), None).unwrap(),
        ] {
            assert!(!text.contains("c2VjcmV0LXRva2Vu"), "{text}");
            assert!(text.contains(LAST_APPLIED), "{text}");
        }
    }
}
