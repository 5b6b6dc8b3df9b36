//! Fields Weft leaves to other managers.
//!
//! - `spec.replicas` of an object a HorizontalPodAutoscaler (`autoscaling/v2`) or a KEDA
//!   ScaledObject (`keda.sh/v1alpha1`, by its `scaleTargetRef`) scales;
//! - the JSON pointers an object lists in its annotation `weft.io/ignore-fields` (comma- or
//!   newline-separated, e.g. `/spec/replicas, /metadata/annotations/example.com~1restarted`), as
//!   Argo CD's `ignoreDifferences` with `RespectIgnoreDifferences`.
//!
//! Such a field is applied with the value it has live (so the other manager's value stands and no
//! write of Weft changes it), or left out when it does not exist live. An object that does not
//! exist yet is created with the value in git.

use crate::api::keys::IGNORE_ANNOTATION;
use std::collections::{BTreeSet, HashSet};
use std::sync::{Mutex, OnceLock};

use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;
use serde_json::Value;

use super::catalog::Catalog;
use super::planned::PlannedObject;
use super::ApplyError;

const REPLICAS: &str = "/spec/replicas";
/// The kinds whose `spec.replicas` a scaler may own (others say so with the annotation).
const SCALABLE: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "ReplicaSet",
    "ReplicationController",
];
/// At most this many pointers per object, each at most this long (the annotation is git input).
const MAX_POINTERS: usize = 32;
const MAX_POINTER_LEN: usize = 256;

/// The pointers of an `weft.io/ignore-fields` value.
pub fn parse_pointers(text: &str) -> Vec<String> {
    text.split([',', '\n'])
        .map(str::trim)
        .filter(|p| p.starts_with('/') && p.len() <= MAX_POINTER_LEN)
        .take(MAX_POINTERS)
        .map(str::to_string)
        .collect()
}

/// The value at a JSON pointer.
fn get<'a>(v: &'a Value, pointer: &str) -> Option<&'a Value> {
    v.pointer(pointer)
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Set (`Some`) or remove (`None`) the value at `pointer`, creating objects on the way.
fn set(v: &mut Value, pointer: &str, value: Option<Value>) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let last = unescape(last);
    if value.is_some() {
        let mut at = &mut *v;
        for token in parent.split('/').skip(1) {
            let token = unescape(token);
            let next = match at {
                Value::Object(m) => m
                    .entry(token)
                    .or_insert_with(|| Value::Object(Default::default())),
                Value::Array(a) => match token.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                    Some(x) => x,
                    None => return,
                },
                _ => return,
            };
            at = next;
        }
        match (at, value) {
            (Value::Object(m), Some(x)) => {
                m.insert(last, x);
            }
            (Value::Array(a), Some(x)) => {
                if let Some(slot) = last.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                    *slot = x;
                }
            }
            _ => {}
        }
    } else if let Some(at) = v.pointer_mut(parent) {
        match at {
            Value::Object(m) => {
                m.remove(&last);
            }
            Value::Array(a) => {
                if let Some(i) = last.parse::<usize>().ok().filter(|i| *i < a.len()) {
                    a.remove(i);
                }
            }
            _ => {}
        }
    }
}

/// `desired` with each of `pointers` taken from `live` (or removed when `live` has none).
pub fn respect(desired: &mut Value, live: &Value, pointers: &[String]) {
    for p in pointers {
        set(desired, p, get(live, p).cloned());
    }
}

/// `desired` without any of `pointers`: what the drift check compares (a field left to another
/// manager is never drift).
pub fn without(desired: &mut Value, pointers: &[String]) {
    for p in pointers {
        set(desired, p, None);
    }
}

/// The scalers whose targets keep their live `spec.replicas`: `(apiVersion, kind, the target's
/// kind when its `scaleTargetRef` names none)`. A caller's [`Catalog`] must resolve them (those
/// not served are skipped).
pub const SCALERS: &[(&str, &str, Option<&str>)] = &[
    ("autoscaling/v2", "HorizontalPodAutoscaler", None),
    ("keda.sh/v1alpha1", "ScaledObject", Some("Deployment")),
];

/// `(kind, namespace, name)` of every object a scaler in `namespaces` scales.
async fn scaled_targets(
    client: &Client,
    catalog: &Catalog,
    namespaces: &BTreeSet<String>,
) -> Result<HashSet<(String, String, String)>, ApplyError> {
    let mut out = HashSet::new();
    for &(api_version, kind, default_kind) in SCALERS {
        let Some((ar, _)) = catalog.resolve(api_version, kind).cloned() else {
            continue;
        };
        for ns in namespaces {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &*ar);
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|source| ApplyError::list(format!("{kind}s in namespace {ns}"), source))?;
            for scaler in list.items {
                let target = scaler.data.pointer("/spec/scaleTargetRef");
                let name = target.and_then(|t| t.get("name")).and_then(Value::as_str);
                let kind = target
                    .and_then(|t| t.get("kind"))
                    .and_then(Value::as_str)
                    .or(default_kind);
                if let (Some(kind), Some(name)) = (kind, name) {
                    out.insert((kind.to_string(), ns.clone(), name.to_string()));
                }
            }
        }
    }
    Ok(out)
}

/// Warn once per process about each object whose fields are left to a scaler.
fn warn_once(key: String, message: impl FnOnce() -> String) {
    static WARNED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let warned = WARNED.get_or_init(Default::default);
    // A poisoned lock only means another thread panicked mid-insert: warning again is harmless.
    let first = match warned.lock() {
        Ok(mut w) => w.insert(key),
        Err(_) => true,
    };
    if first {
        tracing::warn!("{}", message());
    }
}

/// The pointers `p` leaves to other managers, from its annotation (without reading the object
/// when its text does not mention the annotation).
fn annotated(p: &PlannedObject) -> Vec<String> {
    if !p.desired.object.raw().get().contains(IGNORE_ANNOTATION) {
        return Vec::new();
    }
    p.desired
        .object
        .value()
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(IGNORE_ANNOTATION))
        .and_then(Value::as_str)
        .map(parse_pointers)
        .unwrap_or_default()
}

/// Give every planned object that another manager shares (see the module) the live values of
/// the shared fields.
pub async fn respect_other_managers(
    client: &Client,
    catalog: &Catalog,
    planned: &mut [PlannedObject],
) -> Result<(), ApplyError> {
    let namespaces: BTreeSet<String> = planned
        .iter()
        .filter(|p| SCALABLE.contains(&p.object_ref.kind.as_str()))
        .map(|p| p.object_ref.namespace.clone())
        .collect();
    let targets = if namespaces.is_empty() {
        HashSet::new()
    } else {
        scaled_targets(client, catalog, &namespaces).await?
    };
    for p in planned.iter_mut() {
        let mut pointers = annotated(p);
        let r = &p.object_ref;
        let scaled = targets.contains(&(r.kind.clone(), r.namespace.clone(), r.name.clone()));
        if scaled {
            warn_once(format!("{r}"), || {
                format!("{r}: an autoscaler scales it; its spec.replicas is left to the autoscaler (the value in git is used only to create it)")
            });
            if !pointers.iter().any(|x| x == REPLICAS) {
                pointers.push(REPLICAS.to_string());
            }
        }
        if pointers.is_empty() {
            continue;
        }
        let live = match p.api(client).get_opt(&r.name).await {
            Ok(Some(l)) => l,
            // Not there yet: created as git has it.
            Ok(None) => continue,
            Err(e) => return Err(ApplyError::api("read", r, e)),
        };
        let live = serde_json::to_value(&live)
            .map_err(|source| ApplyError::decode(r, "the live object", source))?;
        p.desired.object.edit(|v| respect(v, &live, &pointers));
        // Another manager's field is never drift either (see `plan::live`).
        p.ignored = pointers;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_are_parsed_and_bounded() {
        assert_eq!(
            parse_pointers("/spec/replicas, /data/a~1b\n nope ,"),
            ["/spec/replicas", "/data/a~1b"]
        );
        let many = vec!["/a"; 100].join(",");
        assert_eq!(parse_pointers(&many).len(), MAX_POINTERS);
    }

    #[test]
    fn live_values_replace_the_desired_ones_and_absent_ones_are_left_out() {
        let mut desired =
            json!({"spec": {"replicas": 2, "x": 1}, "data": {"a/b": "git", "c": "git"}});
        let live = json!({"spec": {"replicas": 7}, "data": {"a/b": "live"}});
        respect(
            &mut desired,
            &live,
            &[
                "/spec/replicas".into(),
                "/data/a~1b".into(),
                "/data/c".into(),
                "/new/field".into(),
            ],
        );
        assert_eq!(
            desired,
            json!({"spec": {"replicas": 7, "x": 1}, "data": {"a/b": "live"}})
        );
    }
}
