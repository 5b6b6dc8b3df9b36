//! Armada's override documents (`armada apply --values override.yaml`): YAML documents that name
//! a chart, group or manifest of the repository and carry part of its body, merged on top of it
//! before the documents are typed and checked — as Armada merges them:
//!
//! - a document is named by its kind (`schema: armada/Chart/v1`, or `kind: ArmadaChart`) and
//!   `metadata.name` (and `metadata.namespace`, when it says one);
//! - its `data` (or `spec`) is merged into the named document's: mappings merge key by key, a
//!   string given for a list becomes the list of its comma-separated items, anything else
//!   replaces;
//! - files apply in the order given, documents in file order; a document that names nothing of
//!   the repository changes nothing (Armada ignores it too) and is warned about.
//!
//! The override files themselves are not loaded as documents of the repository.

use serde_json::{Map, Value};

use super::documents::Kind;
use crate::load::yaml::{self, YamlLimits};
use crate::load::{Diagnostics, Origin, Pos, RawDoc};
use crate::source::Snapshot;

/// The documents of the override file `path` of `snapshot`; a missing or unreadable file is an
/// error (nothing deploys without the overrides the operator asked for).
pub fn read(snapshot: &Snapshot, path: &str, diags: &mut Diagnostics) -> Vec<RawDoc> {
    let origin = |pos| Origin {
        file: path.to_string(),
        pos,
    };
    let Some(bytes) = snapshot.files.get(path) else {
        diags.error(
            origin(Pos { line: 1, col: 1 }),
            format!("Armada override file `{path}` (--armada-values) is not in the repository; give its path from the repository's root"),
        );
        return Vec::new();
    };
    let Ok(text) = std::str::from_utf8(bytes) else {
        diags.error(origin(Pos { line: 1, col: 1 }), "file is not valid UTF-8");
        return Vec::new();
    };
    match yaml::parse_documents(text, YamlLimits::default()) {
        Ok(docs) => docs
            .into_iter()
            .filter(|d| !d.value.is_null())
            .map(|d| RawDoc {
                origin: origin(d.positions.get("").unwrap_or(d.start)),
                value: d.value,
                positions: d.positions,
            })
            .collect(),
        Err(e) => {
            diags.error(origin(e.pos), e.message);
            Vec::new()
        }
    }
}

/// What an override or a document is: its kind, name and namespace (if it says one).
fn identity(value: &Value) -> Option<(Kind, &str, Option<&str>)> {
    let kind = match value.get("schema").and_then(Value::as_str) {
        Some(schema) => match schema.split('/').collect::<Vec<_>>().as_slice() {
            ["armada", "Chart", _] => Kind::Chart,
            ["armada", "ChartGroup", _] => Kind::Group,
            ["armada", "Manifest", _] => Kind::Manifest,
            _ => return None,
        },
        None => Kind::from_kind(value.get("kind").and_then(Value::as_str)?)?,
    };
    let name = value.pointer("/metadata/name").and_then(Value::as_str)?;
    let namespace = value.pointer("/metadata/namespace").and_then(Value::as_str);
    Some((kind, name, namespace))
}

/// The body of a document: `data` (native and airshipit v1 documents) or `spec`.
fn body_key(value: &Value) -> &'static str {
    if value.get("data").is_some() || value.get("spec").is_none() {
        "data"
    } else {
        "spec"
    }
}

/// Merge every override into the document it names (see the module documentation).
pub fn apply(docs: &mut [RawDoc], overrides: &[RawDoc], diags: &mut Diagnostics) {
    for o in overrides {
        let Some((kind, name, namespace)) = identity(&o.value) else {
            diags.error(
                o.origin.clone(),
                "an Armada override document names the document it changes by `schema` (armada/Chart/v1, armada/ChartGroup/v1, armada/Manifest/v1) or `kind`, and `metadata.name`",
            );
            continue;
        };
        let Some(changes) = o.value.get(body_key(&o.value)).and_then(Value::as_object) else {
            diags.error(
                o.origin.clone(),
                format!(
                    "the Armada override of {} `{name}` has no `data` mapping to merge",
                    kind.name()
                ),
            );
            continue;
        };
        let target = docs.iter_mut().find(|d| {
            identity(&d.value).is_some_and(|(k, n, ns)| {
                k == kind && n == name && namespace.is_none_or(|want| ns == Some(want))
            })
        });
        let Some(target) = target else {
            diags.warning(
                o.origin.clone(),
                format!(
                    "the Armada override names {} `{name}`, which the repository does not have; it changes nothing",
                    kind.name()
                ),
            );
            continue;
        };
        let key = body_key(&target.value);
        let Some(map) = target.value.as_object_mut() else {
            continue;
        };
        let body = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
        merge(body, changes);
    }
}

/// A hint on each Armada document that names the same chart, group or manifest as an earlier one
/// (the load reports it as an error: fields missing, or defined twice): it may be an override file
/// that was not given with `--armada-values`.
pub fn hint_unpassed(docs: &[RawDoc], diags: &mut Diagnostics) {
    let mut first: std::collections::HashMap<(Kind, &str, Option<&str>), &Origin> =
        std::collections::HashMap::new();
    let mut hinted = std::collections::BTreeSet::new();
    for d in docs {
        let Some(id) = identity(&d.value) else {
            continue;
        };
        match first.get(&id) {
            None => {
                first.insert(id, &d.origin);
            }
            Some(earlier) if hinted.insert(d.origin.file.clone()) => diags.warning(
                d.origin.clone(),
                format!(
                    "{} `{}` is also defined at {earlier}; if `{}` holds overrides (`armada apply --values`), give it with `--armada-values {}`, or move it out of the synced path",
                    id.0.name(),
                    id.1,
                    d.origin.file,
                    d.origin.file
                ),
            ),
            Some(_) => {}
        }
    }
}

/// Armada's merge of an override into a body: mappings key by key, a string for a list becomes
/// its comma-separated items, anything else replaces.
fn merge(into: &mut Value, changes: &Map<String, Value>) {
    if !into.is_object() {
        *into = Value::Object(Map::new());
    }
    let Some(map) = into.as_object_mut() else {
        return;
    };
    for (key, change) in changes {
        match change {
            Value::Object(inner) => {
                let slot = map
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                merge(slot, inner);
            }
            Value::String(s) if map.get(key).is_some_and(Value::is_array) => {
                let items = s
                    .split(',')
                    .map(|i| Value::String(i.trim().to_string()))
                    .collect();
                map.insert(key.clone(), Value::Array(items));
            }
            other => {
                map.insert(key.clone(), other.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(value: Value) -> RawDoc {
        RawDoc {
            value,
            positions: Default::default(),
            origin: Origin {
                file: "site.yaml".into(),
                pos: Pos { line: 1, col: 1 },
            },
        }
    }

    #[test]
    fn overrides_merge_into_the_named_documents_as_armada_merges_them() {
        let mut docs = vec![
            doc(
                json!({"schema": "armada/Chart/v1", "metadata": {"schema": "metadata/Document/v1", "name": "api"},
                "data": {"release": "api", "values": {"replicas": 1, "image": {"tag": "a"}}, "wait": {"timeout": 100}}}),
            ),
            doc(
                json!({"schema": "armada/ChartGroup/v1", "metadata": {"name": "apps"},
                "data": {"chart_group": ["api"]}}),
            ),
            doc(
                json!({"apiVersion": "armada.airshipit.org/v1alpha1", "kind": "ArmadaChart",
                "metadata": {"name": "web", "namespace": "site"}, "spec": {"release": "web"}}),
            ),
        ];
        let overrides = vec![
            doc(
                json!({"schema": "armada/Chart/v1", "metadata": {"name": "api"},
                "data": {"values": {"image": {"tag": "b"}}, "wait": {"timeout": 300}}}),
            ),
            doc(
                json!({"schema": "armada/ChartGroup/v1", "metadata": {"name": "apps"},
                "data": {"chart_group": "api, web"}}),
            ),
            doc(json!({"kind": "ArmadaChart", "metadata": {"name": "web"},
                "spec": {"values": {"x": 1}}})),
            doc(json!({"schema": "armada/Chart/v1", "metadata": {"name": "nothing"}, "data": {}})),
        ];
        let mut diags = Diagnostics::default();
        apply(&mut docs, &overrides, &mut diags);
        assert_eq!(
            docs[0].value["data"],
            json!({"release": "api", "values": {"replicas": 1, "image": {"tag": "b"}}, "wait": {"timeout": 300}})
        );
        assert_eq!(docs[1].value["data"]["chart_group"], json!(["api", "web"]));
        assert_eq!(
            docs[2].value["spec"],
            json!({"release": "web", "values": {"x": 1}})
        );
        assert!(!diags.has_errors());
        assert_eq!(diags.0.len(), 1, "{:?}", diags.0);
        assert!(
            diags.0[0].message.contains("ArmadaChart `nothing`"),
            "{:?}",
            diags.0
        );
    }
}
