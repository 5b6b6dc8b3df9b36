//! An object kept compact: its JSON text, with its identity (and, once rendered, its applied
//! hash) read out once.
//!
//! A rendered object lives from its render until the next one (the daemon keeps the last render
//! between passes, the plan shares it). As a `serde_json::Value` a small ConfigMap takes about
//! 4.3 KB (a B-tree node per map, however few keys it holds); as JSON text the same object is a
//! few hundred bytes, so a root of 100,000 objects fits in tens of megabytes instead of half a
//! gigabyte (issue 16, docs/scaling.md). The object is parsed again only where its content is
//! needed: a drift check, a diff, an edit; it is applied as the text it holds.

use std::fmt;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::Value;

/// One object as compact JSON; cloning shares it.
#[derive(Clone)]
pub struct Doc(Arc<Inner>);

struct Inner {
    json: Box<RawValue>,
    /// Where apiVersion, kind, name, namespace and applied hash are, as byte ranges of the JSON
    /// text, which holds each of them already (a part the JSON escapes is in `spill` instead).
    /// A copy of the five in a block of their own was ≈ 100 bytes per object with the
    /// allocator's header (10 MB at 100,000 objects).
    spans: [(u32, u32); 5],
    /// Parts not found as they are in the JSON text (a quote, a backslash, a control
    /// character), one after another; empty (no allocation) for nearly every object.
    spill: Box<str>,
    /// Which parts (bit `i` for part `i`) are in `spill`.
    spilled: u8,
    /// Whether the object has a namespace and an applied hash (`None` otherwise, where an
    /// empty string is a value).
    has_namespace: bool,
    /// The render knows the applied-hash annotation, this layer does not: `false` as loaded.
    has_hash: bool,
}

const API_VERSION: usize = 0;
const KIND: usize = 1;
const NAME: usize = 2;
const NAMESPACE: usize = 3;
const HASH: usize = 4;

fn text(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

impl Doc {
    /// The object `value`, serialised.
    pub fn new(value: &Value) -> Doc {
        Doc::build(value, None)
    }

    /// The object `value` as rendered, with the applied hash the render gave it.
    pub fn rendered(value: &Value, applied_hash: Option<&str>) -> Doc {
        Doc::build(value, applied_hash)
    }

    fn build(value: &Value, applied_hash: Option<&str>) -> Doc {
        // Serialising a `Value` cannot fail (its keys are strings) and gives valid JSON.
        let json = serde_json::value::to_raw_value(value)
            .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("valid JSON"));
        let meta = value.get("metadata");
        let namespace = meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str);
        let parts = [
            text(value.get("apiVersion")),
            text(value.get("kind")),
            text(meta.and_then(|m| m.get("name"))),
            namespace.unwrap_or(""),
            applied_hash.unwrap_or(""),
        ];
        let text = json.get();
        let mut spill = String::new();
        let mut spans = [(0, 0); 5];
        let mut spilled = 0u8;
        for (i, (span, part)) in spans.iter_mut().zip(parts).enumerate() {
            // Any occurrence will do: the bytes are the same. The text is at most a few
            // megabytes (`SnapshotLimits`), so offsets fit in `u32`.
            let start = match text.find(part) {
                Some(at) => at,
                None => {
                    spilled |= 1 << i;
                    spill.push_str(part);
                    spill.len() - part.len()
                }
            };
            *span = (start as u32, (start + part.len()) as u32);
        }
        Doc(Arc::new(Inner {
            json,
            spans,
            spill: spill.into_boxed_str(),
            spilled,
            has_namespace: namespace.is_some(),
            has_hash: applied_hash.is_some(),
        }))
    }

    /// Part `i` of the identity (`API_VERSION` … `HASH`).
    fn part(&self, i: usize) -> &str {
        let (start, end) = self.0.spans[i];
        let text = if self.0.spilled & (1 << i) != 0 {
            &self.0.spill
        } else {
            self.0.json.get()
        };
        &text[start as usize..end as usize]
    }

    /// The object, parsed (a copy: edits go through [`Doc::edit`]).
    pub fn value(&self) -> Value {
        // The text was made from a `Value` by serde_json, so it parses back to the same value.
        serde_json::from_str(self.0.json.get()).unwrap_or(Value::Null)
    }

    /// The object as JSON text: what is sent to the API server.
    pub fn raw(&self) -> &RawValue {
        &self.0.json
    }

    /// Change the object: parsed, edited, serialised again (only this copy changes; it keeps its
    /// applied hash).
    pub fn edit(&mut self, f: impl FnOnce(&mut Value)) {
        let mut v = self.value();
        f(&mut v);
        *self = Doc::build(&v, self.applied_hash());
    }

    pub fn api_version(&self) -> &str {
        self.part(API_VERSION)
    }
    pub fn kind(&self) -> &str {
        self.part(KIND)
    }
    pub fn name(&self) -> &str {
        self.part(NAME)
    }
    pub fn namespace(&self) -> Option<&str> {
        self.0.has_namespace.then(|| self.part(NAMESPACE))
    }
    /// The applied hash the render gave the object.
    pub fn applied_hash(&self) -> Option<&str> {
        self.0.has_hash.then(|| self.part(HASH))
    }
}

impl From<Value> for Doc {
    fn from(v: Value) -> Doc {
        Doc::new(&v)
    }
}

impl PartialEq for Doc {
    fn eq(&self, other: &Doc) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.json.get() == other.0.json.get()
    }
}

impl fmt::Debug for Doc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.json.get())
    }
}

impl fmt::Display for Doc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.json.get())
    }
}

impl serde::Serialize for Doc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.json.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_doc_keeps_the_object_and_reads_its_identity_once() {
        let v = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "annotations": {"weft.io/applied-hash": "h1"}},
            "data": {"k": "v", "n": 1.5},
        });
        assert_eq!(Doc::new(&v).applied_hash(), None, "as loaded");
        let d = Doc::rendered(&v, Some("h1"));
        assert_eq!(d.value(), v);
        assert_eq!(
            (d.api_version(), d.kind(), d.name(), d.namespace()),
            ("v1", "ConfigMap", "a", Some("n"))
        );
        assert_eq!(d.applied_hash(), Some("h1"));
        assert_eq!(serde_json::to_value(&d).unwrap(), v, "sent as it is");
        assert!(d.raw().get().len() < 200, "{}", d.raw().get().len());
    }

    #[test]
    fn an_edit_changes_only_that_copy_and_its_identity() {
        let a =
            Doc::new(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}));
        let mut b = a.clone();
        b.edit(|v| v["metadata"]["namespace"] = json!("x"));
        assert_eq!(a.namespace(), None);
        assert_eq!(b.namespace(), Some("x"));
        assert_ne!(a, b);
        let c = Doc::new(&json!({"kind": 3}));
        assert_eq!((c.kind(), c.name(), c.api_version()), ("", "", ""));
    }

    #[test]
    fn a_part_the_json_escapes_is_kept_apart() {
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a\"b\\c", "namespace": "n\u{1}"}});
        let d = Doc::rendered(&v, Some("h"));
        assert_eq!(
            (
                d.api_version(),
                d.kind(),
                d.name(),
                d.namespace(),
                d.applied_hash()
            ),
            ("v1", "ConfigMap", "a\"b\\c", Some("n\u{1}"), Some("h"))
        );
        assert_eq!(d.value(), v);
    }

    #[test]
    fn an_empty_namespace_or_hash_is_a_value_not_an_absence() {
        let v = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ""}});
        let d = Doc::rendered(&v, Some(""));
        assert_eq!(
            (
                d.api_version(),
                d.kind(),
                d.name(),
                d.namespace(),
                d.applied_hash()
            ),
            ("apps/v1", "Deployment", "web", Some(""), Some(""))
        );
        let e = Doc::rendered(
            &json!({"kind": "Namespace", "metadata": {"name": "a"}}),
            None,
        );
        assert_eq!(
            (e.name(), e.namespace(), e.applied_hash()),
            ("a", None, None)
        );
    }
}
