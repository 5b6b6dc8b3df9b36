//! YAML → `serde_json::Value` with the position of every node, built from saphyr-parser's event
//! stream so that every later error can name `file:line:col`.
//!
//! Aliases are expanded against a node budget that is checked *before* a subtree is copied, so an
//! alias bomb ("billion laughs") fails fast in bounded memory instead of exhausting the machine.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::{Map, Number, Value};

use super::budget::{self, Budget, Limits, Size};

/// A 1-based line and column in a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

impl Pos {
    fn from_span(span: &Span) -> Pos {
        Pos {
            line: span.start.line() as u32,
            col: span.start.col() as u32 + 1,
        }
    }
}

/// Where each node of a document is: JSON pointer (RFC 6901) → position of the node. For a
/// mapping entry the position is that of its key, which is where a user looks for a bad field.
#[derive(Clone, Debug, Default)]
pub struct Positions {
    map: HashMap<String, Pos>,
}

impl Positions {
    /// The position of the node at `pointer`, or of its nearest ancestor that has one.
    pub fn find(&self, pointer: &str) -> Pos {
        let mut p = pointer;
        loop {
            if let Some(pos) = self.map.get(p) {
                return *pos;
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => return self.map.get("").copied().unwrap_or_default(),
            }
        }
    }

    /// The position recorded for exactly `pointer`, if any.
    pub fn get(&self, pointer: &str) -> Option<Pos> {
        self.map.get(pointer).copied()
    }

    fn insert(&mut self, pointer: String, pos: Pos) {
        self.map.entry(pointer).or_insert(pos);
    }
}

/// One YAML document of a file.
#[derive(Clone, Debug)]
pub struct YamlDoc {
    /// The document as JSON data.
    pub value: Value,
    /// Positions of its nodes.
    pub positions: Positions,
    /// Where the document's content starts.
    pub start: Pos,
}

/// Why a file is not valid YAML.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pos}: {message}")]
pub struct YamlError {
    pub pos: Pos,
    pub message: String,
}

/// Limits that keep parsing bounded.
#[derive(Clone, Copy, Debug)]
pub struct YamlLimits {
    /// Maximum nodes copied by anchors and aliases in one file, beyond the file's own nodes.
    pub max_alias_nodes: usize,
    /// Maximum bytes of text (strings and keys) copied by anchors and aliases in one file.
    pub max_alias_bytes: usize,
    /// Maximum nesting depth.
    pub max_depth: usize,
}

impl Default for YamlLimits {
    fn default() -> Self {
        YamlLimits {
            max_alias_nodes: 100_000,
            max_alias_bytes: 16 * 1024 * 1024,
            max_depth: 256,
        }
    }
}

/// Parse every document of `text`. Empty documents are kept as `Value::Null`.
pub fn parse_documents(text: &str, limits: YamlLimits) -> Result<Vec<YamlDoc>, YamlError> {
    let mut builder = Builder {
        limits,
        anchors: HashMap::new(),
        copies: Budget::new(Limits {
            max_nodes: limits.max_alias_nodes,
            max_bytes: limits.max_alias_bytes,
            max_depth: usize::MAX,
        }),
        docs: Vec::new(),
        stack: Vec::new(),
        positions: Positions::default(),
        doc_start: Pos::default(),
    };
    let mut parser = Parser::new_from_str(text);
    while let Some(ev) = parser.next_event() {
        let (event, span) = ev.map_err(|e| YamlError {
            pos: Pos {
                line: e.marker().line() as u32,
                col: e.marker().col() as u32 + 1,
            },
            message: e.info().to_string(),
        })?;
        builder.event(event, span)?;
    }
    Ok(builder.docs)
}

enum Frame {
    Seq {
        items: Vec<Value>,
        anchor: usize,
        pointer: String,
        nodes: usize,
    },
    Map {
        map: Map<String, Value>,
        anchor: usize,
        pointer: String,
        pending_key: Option<(String, Pos)>,
        merged: Vec<Value>,
        nodes: usize,
    },
}

struct Builder {
    limits: YamlLimits,
    /// anchor id → (value, node count)
    anchors: HashMap<usize, (Value, Size)>,
    /// What anchors and aliases copied so far in this file.
    copies: Budget,
    docs: Vec<YamlDoc>,
    stack: Vec<Frame>,
    positions: Positions,
    doc_start: Pos,
}

fn escape_pointer(key: &str) -> String {
    // Almost no key needs escaping; skip the two scans-and-copies for those.
    if key.contains(['~', '/']) {
        key.replace('~', "~0").replace('/', "~1")
    } else {
        key.to_string()
    }
}

impl Builder {
    /// The pointer the next value gets, given the current stack top.
    fn child_pointer(&self) -> Option<String> {
        match self.stack.last() {
            None => Some(String::new()),
            Some(Frame::Seq { items, pointer, .. }) => Some(format!("{pointer}/{}", items.len())),
            Some(Frame::Map {
                pending_key: Some((k, _)),
                pointer,
                ..
            }) => Some(format!("{pointer}/{}", escape_pointer(k))),
            Some(Frame::Map {
                pending_key: None, ..
            }) => None, // this value is a key
        }
    }

    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), YamlError> {
        let pos = Pos::from_span(&span);
        match event {
            Event::StreamStart | Event::StreamEnd | Event::Nothing | Event::DocumentEnd => Ok(()),
            Event::DocumentStart(_) => {
                self.positions = Positions::default();
                self.anchors.clear();
                self.doc_start = pos;
                Ok(())
            }
            Event::Scalar(text, style, anchor, tag) => {
                let value =
                    resolve_scalar(&text, style, tag.as_deref().map(|t| t.suffix.as_str()), pos)?;
                if anchor > 0 {
                    self.anchor(anchor, &value, pos)?;
                }
                self.push_value(value, 1, pos)
            }
            Event::Alias(id) => {
                let size = match self.anchors.get(&id) {
                    Some((_, size)) => *size,
                    None => {
                        return Err(YamlError {
                            pos,
                            message: "alias refers to an unknown anchor".into(),
                        })
                    }
                };
                // Charge before cloning: a refused alias never copies.
                self.charge_copy(size, pos)?;
                let value = self.anchors[&id].0.clone();
                self.push_value(value, size.nodes, pos)
            }
            Event::SequenceStart(anchor, _) => {
                self.check_depth(pos)?;
                let pointer = self.child_pointer().unwrap_or_default();
                self.record(pos);
                self.stack.push(Frame::Seq {
                    items: Vec::new(),
                    anchor,
                    pointer,
                    nodes: 1,
                });
                Ok(())
            }
            Event::MappingStart(anchor, _) => {
                self.check_depth(pos)?;
                let pointer = self.child_pointer().unwrap_or_default();
                self.record(pos);
                self.stack.push(Frame::Map {
                    map: Map::new(),
                    anchor,
                    pointer,
                    pending_key: None,
                    merged: Vec::new(),
                    nodes: 1,
                });
                Ok(())
            }
            Event::SequenceEnd => match self.stack.pop() {
                Some(Frame::Seq {
                    items,
                    anchor,
                    nodes,
                    ..
                }) => {
                    let value = Value::Array(items);
                    if anchor > 0 {
                        self.anchor(anchor, &value, pos)?;
                    }
                    self.attach(value, nodes, pos)
                }
                _ => Err(YamlError {
                    pos,
                    message: "unbalanced sequence end".into(),
                }),
            },
            Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Map {
                    mut map,
                    anchor,
                    merged,
                    nodes,
                    ..
                }) => {
                    // `<<` merge keys: explicit keys win, earlier merge sources win over later ones.
                    for source in merged {
                        let sources = match source {
                            Value::Array(items) => items,
                            other => vec![other],
                        };
                        for src in sources {
                            let Value::Object(src) = src else {
                                return Err(YamlError {
                                    pos,
                                    message: "`<<` merge key needs a mapping or a list of mappings"
                                        .into(),
                                });
                            };
                            for (k, v) in src {
                                map.entry(k).or_insert(v);
                            }
                        }
                    }
                    let value = Value::Object(map);
                    if anchor > 0 {
                        self.anchor(anchor, &value, pos)?;
                    }
                    self.attach(value, nodes, pos)
                }
                _ => Err(YamlError {
                    pos,
                    message: "unbalanced mapping end".into(),
                }),
            },
        }
    }

    /// Keep a copy of an anchored collection for its aliases. The copy is charged to the alias
    /// budget like an alias: anchors nested in anchors would otherwise copy each subtree once
    /// per enclosing anchor (a file of nested anchors costs depth × size without one alias).
    fn anchor(&mut self, id: usize, value: &Value, pos: Pos) -> Result<(), YamlError> {
        let size = budget::measure(value, self.copies.limits());
        self.charge_copy(size, pos)?;
        self.anchors.insert(id, (value.clone(), size));
        Ok(())
    }

    fn charge_copy(&mut self, size: Size, pos: Pos) -> Result<(), YamlError> {
        self.copies
            .nodes(size.nodes)
            .and_then(|()| self.copies.bytes(size.bytes))
            .map_err(|e| YamlError {
                pos,
                message: format!("YAML anchors and aliases {e} (an alias bomb?)"),
            })
    }

    fn check_depth(&self, pos: Pos) -> Result<(), YamlError> {
        if self.stack.len() >= self.limits.max_depth {
            return Err(YamlError {
                pos,
                message: format!("YAML nesting deeper than {} levels", self.limits.max_depth),
            });
        }
        Ok(())
    }

    fn record(&mut self, pos: Pos) {
        if let Some(pointer) = self.child_pointer() {
            // For mapping values the key's position was recorded already; keep it.
            self.positions.insert(pointer, pos);
        }
    }

    /// A scalar or alias: either a mapping key or a value.
    fn push_value(&mut self, value: Value, nodes: usize, pos: Pos) -> Result<(), YamlError> {
        if let Some(Frame::Map {
            pending_key: pending @ None,
            pointer,
            map,
            ..
        }) = self.stack.last_mut()
        {
            let key = match value {
                Value::String(s) => s,
                Value::Null => "null".to_string(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                _ => {
                    return Err(YamlError {
                        pos,
                        message: "a mapping key must be a scalar".into(),
                    })
                }
            };
            if key != "<<" && map.contains_key(&key) {
                return Err(YamlError {
                    pos,
                    message: format!("duplicate key `{key}` in the same mapping"),
                });
            }
            let child = format!("{pointer}/{}", escape_pointer(&key));
            self.positions.insert(child, pos);
            *pending = Some((key, pos));
            return Ok(());
        }
        self.record(pos);
        self.attach(value, nodes, pos)
    }

    /// Attach a finished value to its parent (or finish the document).
    fn attach(&mut self, value: Value, child_nodes: usize, _pos: Pos) -> Result<(), YamlError> {
        match self.stack.last_mut() {
            None => {
                self.docs.push(YamlDoc {
                    value,
                    positions: std::mem::take(&mut self.positions),
                    start: self.doc_start,
                });
            }
            Some(Frame::Seq { items, nodes, .. }) => {
                items.push(value);
                *nodes += child_nodes;
            }
            Some(Frame::Map {
                map,
                pending_key,
                merged,
                nodes,
                ..
            }) => {
                // Only reached with a pending key: keys go through `push_value`.
                if let Some((key, _)) = pending_key.take() {
                    if key == "<<" {
                        merged.push(value);
                    } else {
                        map.insert(key, value);
                    }
                    *nodes += child_nodes;
                }
            }
        }
        Ok(())
    }
}

/// Resolve a scalar by the YAML 1.2 core schema (what Kubernetes users expect: `true`, `10`,
/// `1.5`, `null`), honouring quotes and `!!str`-style tags.
fn resolve_scalar(
    text: &str,
    style: ScalarStyle,
    tag: Option<&str>,
    pos: Pos,
) -> Result<Value, YamlError> {
    let bad = |what: &str| YamlError {
        pos,
        message: format!("`{text}` is not a valid {what}"),
    };
    match tag {
        Some("str") => return Ok(Value::String(text.to_string())),
        Some("int") => {
            return parse_int(text)
                .map(Value::Number)
                .ok_or_else(|| bad("integer"))
        }
        Some("float") => return parse_float(text).ok_or_else(|| bad("float")),
        Some("bool") => {
            return parse_bool(text)
                .map(Value::Bool)
                .ok_or_else(|| bad("boolean"))
        }
        Some("null") => return Ok(Value::Null),
        _ => {}
    }
    if style != ScalarStyle::Plain {
        return Ok(Value::String(text.to_string()));
    }
    if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
        return Ok(Value::Null);
    }
    if let Some(b) = parse_bool(text) {
        return Ok(Value::Bool(b));
    }
    if let Some(n) = parse_int(text) {
        return Ok(Value::Number(n));
    }
    if let Some(f) = parse_float(text) {
        return Ok(f);
    }
    Ok(Value::String(text.to_string()))
}

fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

fn parse_int(text: &str) -> Option<Number> {
    let (neg, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (radix, body) = if let Some(h) = digits.strip_prefix("0x") {
        (16, h)
    } else if let Some(o) = digits.strip_prefix("0o") {
        (8, o)
    } else {
        (10, digits)
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(body, radix).ok()?;
    if neg {
        let v = i64::try_from(magnitude).ok()?;
        Some(Number::from(-v))
    } else {
        Some(Number::from(magnitude))
    }
}

fn parse_float(text: &str) -> Option<Value> {
    let t = text.strip_prefix('+').unwrap_or(text);
    let body = t.strip_prefix('-').unwrap_or(t);
    // YAML core schema float: digits with a dot and/or exponent; no bare words like `inf`.
    let ok = !body.is_empty()
        && body
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'))
        && body
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '.')
        && body.chars().any(|c| c.is_ascii_digit());
    if !ok {
        return None;
    }
    let f: f64 = t.parse().ok()?;
    Number::from_f64(f).map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(text: &str) -> YamlDoc {
        let mut docs = parse_documents(text, YamlLimits::default()).unwrap();
        assert_eq!(docs.len(), 1);
        docs.remove(0)
    }

    #[test]
    fn scalars_follow_the_core_schema() {
        let d = one(
            "a: 1\nb: '1'\nc: true\nd: ~\ne: 1.5\nf: yes\ng: 0x1f\nh: -3\ni: !!str 5\nj: 1.2.3\n",
        );
        assert_eq!(
            d.value,
            json!({"a":1,"b":"1","c":true,"d":null,"e":1.5,"f":"yes","g":31,"h":-3,"i":"5","j":"1.2.3"})
        );
    }

    #[test]
    fn positions_point_at_keys_and_items() {
        let d = one("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  list:\n    - a\n    - b\n");
        assert_eq!(
            d.positions.get("/metadata/name"),
            Some(Pos { line: 4, col: 3 })
        );
        assert_eq!(
            d.positions.get("/data/list/1"),
            Some(Pos { line: 8, col: 7 })
        );
        assert_eq!(
            d.positions.find("/data/list/1/missing"),
            Pos { line: 8, col: 7 }
        );
    }

    #[test]
    fn multiple_documents_and_empty_ones() {
        let docs = parse_documents("a: 1\n---\n---\nb: 2\n", YamlLimits::default()).unwrap();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[1].value, Value::Null);
        assert_eq!(docs[2].start.line, 3);
        assert_eq!(docs[2].positions.get("/b"), Some(Pos { line: 4, col: 1 }));
    }

    #[test]
    fn aliases_and_merge_keys() {
        let d = one("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\nlist: &l [1, 2]\ncopy: *l\n");
        assert_eq!(d.value["other"], json!({"x":1,"y":3}));
        assert_eq!(d.value["copy"], json!([1, 2]));
    }

    #[test]
    fn duplicate_keys_are_an_error_with_position() {
        let err = parse_documents("a: 1\nb: 2\na: 3\n", YamlLimits::default()).unwrap_err();
        assert_eq!(err.pos, Pos { line: 3, col: 1 });
        assert!(err.message.contains("duplicate key `a`"), "{err}");
    }

    #[test]
    fn alias_bomb_fails_fast() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = format!("*a{}", i - 1);
            let items = [prev.as_str(); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{items}]\n"));
        }
        let start = std::time::Instant::now();
        let err = parse_documents(&text, YamlLimits::default()).unwrap_err();
        assert!(err.message.contains("alias bomb"), "{err}");
        // 10^12 nodes if expanded; refusing must not take long (a generous bound, not a benchmark).
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn nested_anchors_are_charged_like_aliases() {
        // No alias at all: 200 nested anchored lists around 1,000 scalars would copy 200,000
        // nodes if each anchor's copy were free.
        let depth = 200;
        let mut text = String::new();
        for i in 0..depth {
            text.push_str(&format!("{}- &n{i}\n", "  ".repeat(i)));
        }
        for j in 0..1000 {
            text.push_str(&format!("{}- {j}\n", "  ".repeat(depth)));
        }
        let err = parse_documents(&text, YamlLimits::default()).unwrap_err();
        assert!(err.message.contains("anchors and aliases"), "{err}");
        assert!(err.pos.line >= 1, "{err}");
    }

    #[test]
    fn a_long_string_aliased_many_times_is_refused_by_bytes() {
        // 1 MiB aliased 100 times: few nodes, 100 MiB of text.
        let mut text = format!("s: &s {}\nl: [", "x".repeat(1 << 20));
        text.push_str(&vec!["*s"; 100].join(", "));
        text.push_str("]\n");
        let err = parse_documents(&text, YamlLimits::default()).unwrap_err();
        assert!(err.message.contains("bytes"), "{err}");
        assert_eq!(err.pos.line, 2, "{err}");
    }

    #[test]
    fn syntax_errors_have_positions() {
        let err = parse_documents("a: [1, 2\nb: 3\n", YamlLimits::default()).unwrap_err();
        assert!(err.pos.line >= 1, "{err}");
    }
}
