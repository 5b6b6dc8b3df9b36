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

/// Where each node of a document is, looked up by JSON pointer (RFC 6901). For a mapping entry
/// the position is that of its key, which is where a user looks for a bad field.
///
/// A tree parallel to the document, stored flat in document order: each node keeps its
/// position, the end of its subtree and, for a mapping entry, its key (in one shared string).
/// So a node costs the same whatever its depth (20 bytes plus its key), not its whole pointer:
/// memory is bounded by the input. A lookup walks the pointer's segments through the children
/// of each node. Nodes copied by an alias have no positions of their own (the alias has one).
#[derive(Clone, Debug, Default)]
pub struct Positions {
    nodes: Vec<PosNode>,
    keys: String,
}

#[derive(Clone, Copy, Debug)]
struct PosNode {
    pos: Pos,
    /// Index one past the node's last descendant.
    end: u32,
    /// Start of its key in `keys`; `key_len == SEQ_ITEM` for an item of a sequence.
    key_start: u32,
    key_len: u32,
}

const SEQ_ITEM: u32 = u32::MAX;

impl Positions {
    /// The position of the node at `pointer`, or of its nearest ancestor that has one.
    pub fn find(&self, pointer: &str) -> Pos {
        match self.walk(pointer) {
            (Some(i), _) | (None, Some(i)) => self.nodes[i].pos,
            (None, None) => Pos::default(),
        }
    }

    /// The position recorded for exactly `pointer`, if any.
    pub fn get(&self, pointer: &str) -> Option<Pos> {
        self.walk(pointer).0.map(|i| self.nodes[i].pos)
    }

    /// How many nodes have a position.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The heap memory these positions hold, in bytes.
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<PosNode>() + self.keys.capacity()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// (the node at `pointer`, the deepest ancestor found on the way).
    fn walk(&self, pointer: &str) -> (Option<usize>, Option<usize>) {
        if self.nodes.is_empty() {
            return (None, None);
        }
        let mut current = 0usize;
        if pointer.is_empty() {
            return (Some(0), Some(0));
        }
        let Some(rest) = pointer.strip_prefix('/') else {
            return (None, Some(0));
        };
        for raw in rest.split('/') {
            let segment = unescape_pointer(raw);
            match self.child(current, &segment) {
                Some(child) => current = child,
                None => return (None, Some(current)),
            }
        }
        (Some(current), Some(current))
    }

    /// The child of `parent` named `segment` (a key, or an index of a sequence).
    fn child(&self, parent: usize, segment: &str) -> Option<usize> {
        let end = self.nodes[parent].end as usize;
        let mut i = parent + 1;
        let mut ordinal = 0usize;
        let index: Option<usize> = segment.parse().ok();
        while i < end {
            let node = &self.nodes[i];
            let hit = if node.key_len == SEQ_ITEM {
                index == Some(ordinal)
            } else {
                let start = node.key_start as usize;
                self.keys.get(start..start + node.key_len as usize) == Some(segment)
            };
            if hit {
                return Some(i);
            }
            ordinal += 1;
            i = (node.end as usize).max(i + 1);
        }
        None
    }

    /// Add a node (its subtree empty so far) and return its index.
    fn push(&mut self, pos: Pos, key: Option<&str>) -> usize {
        let index = self.nodes.len();
        let (key_start, key_len) = match key {
            Some(k) => {
                let start = self.keys.len() as u32;
                self.keys.push_str(k);
                (start, k.len() as u32)
            }
            None => (0, SEQ_ITEM),
        };
        self.nodes.push(PosNode {
            pos,
            end: index as u32 + 1,
            key_start,
            key_len,
        });
        index
    }

    /// Close the subtree of node `index`: every node added since belongs to it.
    fn close(&mut self, index: usize) {
        let end = self.nodes.len() as u32;
        if let Some(node) = self.nodes.get_mut(index) {
            node.end = end;
        }
    }
}

fn unescape_pointer(segment: &str) -> std::borrow::Cow<'_, str> {
    if segment.contains('~') {
        segment.replace("~1", "/").replace("~0", "~").into()
    } else {
        segment.into()
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
    /// Maximum nodes copied by anchors and aliases, beyond the input's own, when the parse has
    /// a budget of its own ([`parse_documents`]); a load charges its one budget instead.
    pub max_alias_nodes: usize,
    /// Maximum bytes of text (strings and keys) copied by anchors and aliases, likewise.
    pub max_alias_bytes: usize,
    /// Maximum nesting depth.
    pub max_depth: usize,
    /// Maximum nodes of one document, its own and copied: a Kubernetes object is at most about
    /// 1.5 MiB (etcd's request limit), far fewer nodes than this.
    pub max_document_nodes: usize,
    /// Maximum documents in one file (empty ones included).
    pub max_documents: usize,
}

impl Default for YamlLimits {
    fn default() -> Self {
        YamlLimits {
            max_alias_nodes: 100_000,
            max_alias_bytes: 16 * 1024 * 1024,
            max_depth: 256,
            max_document_nodes: 1_000_000,
            max_documents: 100_000,
        }
    }
}

/// Parse every document of `text` with a budget of its own (`limits`' alias bounds). Empty
/// documents are kept as `Value::Null`.
pub fn parse_documents(text: &str, limits: YamlLimits) -> Result<Vec<YamlDoc>, YamlError> {
    let mut budget = Budget::new(Limits {
        max_nodes: limits.max_alias_nodes,
        max_bytes: limits.max_alias_bytes,
        max_depth: usize::MAX,
    });
    parse_documents_in(text, limits, &mut budget)
}

/// Parse every document of `text`, charging what anchors and aliases copy to `budget` (shared
/// by a whole load and render). Empty documents are kept as `Value::Null`.
pub fn parse_documents_in(
    text: &str,
    limits: YamlLimits,
    budget: &mut Budget,
) -> Result<Vec<YamlDoc>, YamlError> {
    let mut docs = Vec::new();
    for_each_document(text, limits, budget, |doc| docs.push(doc))?;
    Ok(docs)
}

/// Parse `text` one document at a time, handing each to `each` as soon as it is complete, so
/// that a file of many documents is never held whole as trees.
pub fn for_each_document(
    text: &str,
    limits: YamlLimits,
    budget: &mut Budget,
    each: impl FnMut(YamlDoc),
) -> Result<(), YamlError> {
    let mut builder = Builder {
        limits,
        anchors: HashMap::new(),
        copies: budget,
        each,
        documents: 0,
        document_nodes: 0,
        stack: Vec::new(),
        positions: Positions::default(),
        pending: None,
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
    Ok(())
}

enum Frame {
    Seq {
        items: Vec<Value>,
        anchor: usize,
        /// Its node in the positions tree.
        node: usize,
        nodes: usize,
    },
    Map {
        map: Map<String, Value>,
        anchor: usize,
        node: usize,
        pending_key: Option<(String, Pos)>,
        merged: Vec<Value>,
        nodes: usize,
    },
}

struct Builder<'b, F> {
    limits: YamlLimits,
    /// anchor id → (value, node count)
    anchors: HashMap<usize, (Value, Size)>,
    /// What anchors and aliases copy, charged to the load's budget.
    copies: &'b mut Budget,
    each: F,
    documents: usize,
    /// Nodes of the current document, own and copied.
    document_nodes: usize,
    stack: Vec<Frame>,
    positions: Positions,
    /// The positions node made for a mapping key, which its value takes.
    pending: Option<usize>,
    doc_start: Pos,
}

/// A key or scalar cut to a bound, for messages: they quote the input only so far.
pub fn quoted(key: &str) -> String {
    const MAX: usize = 120;
    match key.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &key[..at]),
        None => key.to_string(),
    }
}

impl<F: FnMut(YamlDoc)> Builder<'_, F> {
    /// The positions node of the value that starts now (made for it unless it is a mapping
    /// value, whose key made it), or `None` for a mapping key.
    fn value_node(&mut self, pos: Pos) -> Option<usize> {
        match self.stack.last() {
            None => Some(self.positions.push(pos, None)),
            Some(Frame::Seq { .. }) => Some(self.positions.push(pos, None)),
            Some(Frame::Map {
                pending_key: Some(_),
                ..
            }) => self.pending.take(),
            Some(Frame::Map {
                pending_key: None, ..
            }) => None,
        }
    }

    fn count(&mut self, nodes: usize, pos: Pos) -> Result<(), YamlError> {
        self.document_nodes = self.document_nodes.saturating_add(nodes);
        if self.document_nodes > self.limits.max_document_nodes {
            return Err(YamlError {
                pos,
                message: format!(
                    "a document of more than {} YAML nodes; refusing to read further",
                    self.limits.max_document_nodes
                ),
            });
        }
        Ok(())
    }

    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), YamlError> {
        let pos = Pos::from_span(&span);
        match event {
            Event::StreamStart | Event::StreamEnd | Event::Nothing | Event::DocumentEnd => Ok(()),
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > self.limits.max_documents {
                    return Err(YamlError {
                        pos,
                        message: format!(
                            "more than {} documents in one file; refusing to read further",
                            self.limits.max_documents
                        ),
                    });
                }
                self.positions = Positions::default();
                self.pending = None;
                self.anchors.clear();
                self.document_nodes = 0;
                self.doc_start = pos;
                Ok(())
            }
            Event::Scalar(text, style, anchor, tag) => {
                self.count(1, pos)?;
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
                self.count(size.nodes, pos)?;
                let value = self.anchors[&id].0.clone();
                self.push_value(value, size.nodes, pos)
            }
            Event::SequenceStart(anchor, _) => {
                self.check_depth(pos)?;
                self.count(1, pos)?;
                let Some(node) = self.value_node(pos) else {
                    return Err(YamlError {
                        pos,
                        message: "a mapping key must be a scalar".into(),
                    });
                };
                self.stack.push(Frame::Seq {
                    items: Vec::new(),
                    anchor,
                    node,
                    nodes: 1,
                });
                Ok(())
            }
            Event::MappingStart(anchor, _) => {
                self.check_depth(pos)?;
                self.count(1, pos)?;
                let Some(node) = self.value_node(pos) else {
                    return Err(YamlError {
                        pos,
                        message: "a mapping key must be a scalar".into(),
                    });
                };
                self.stack.push(Frame::Map {
                    map: Map::new(),
                    anchor,
                    node,
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
                    node,
                    nodes,
                }) => {
                    self.positions.close(node);
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
                    node,
                    merged,
                    nodes,
                    ..
                }) => {
                    self.positions.close(node);
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

    /// A scalar or alias: either a mapping key or a value.
    fn push_value(&mut self, value: Value, nodes: usize, pos: Pos) -> Result<(), YamlError> {
        if let Some(Frame::Map {
            pending_key: pending @ None,
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
                    message: format!("duplicate key `{}` in the same mapping", quoted(&key)),
                });
            }
            self.pending = Some(self.positions.push(pos, Some(&key)));
            *pending = Some((key, pos));
            return Ok(());
        }
        self.value_node(pos);
        self.attach(value, nodes, pos)
    }

    /// Attach a finished value to its parent (or finish the document).
    fn attach(&mut self, value: Value, child_nodes: usize, _pos: Pos) -> Result<(), YamlError> {
        match self.stack.last_mut() {
            None => {
                let doc = YamlDoc {
                    value,
                    positions: std::mem::take(&mut self.positions),
                    start: self.doc_start,
                };
                (self.each)(doc);
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
        message: format!("`{}` is not a valid {what}", quoted(text)),
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
    fn positions_cost_the_same_at_any_depth() {
        // The shape of issue 30's 146 KB file: long keys nested deep, many leaves at the
        // bottom. Storing each node's whole pointer made this gigabytes.
        let key = "k".repeat(400);
        let depth = 200;
        let mut text = String::new();
        for i in 0..depth {
            text.push_str(&format!("{}{key}{i}:\n", "  ".repeat(i)));
        }
        for j in 0..2000 {
            text.push_str(&format!("{}l{j}: {j}\n", "  ".repeat(depth)));
        }
        let d = one(&text);
        assert_eq!(d.positions.len(), depth + 2000 + 1);
        let per_input_byte = d.positions.heap_bytes() as f64 / text.len() as f64;
        println!(
            "{} bytes of YAML: {} nodes, positions {} bytes ({per_input_byte:.2} per input byte)",
            text.len(),
            d.positions.len(),
            d.positions.heap_bytes()
        );
        assert!(per_input_byte < 2.0, "{per_input_byte}");
        // Lookups by pointer still work, for errors.
        let pointer: String = (0..depth).map(|i| format!("/{key}{i}")).collect();
        assert_eq!(
            d.positions.get(&format!("{pointer}/l1999")),
            Some(Pos {
                line: (depth + 2000) as u32,
                col: 2 * depth as u32 + 1
            })
        );
        assert_eq!(
            d.positions.find(&format!("{pointer}/missing/deeper")).line,
            depth as u32
        );
    }

    #[test]
    fn escaped_pointer_segments_and_sequences_inside_mappings() {
        let d = one("a/b:\n  - x\n  - {c~d: 1}\n");
        assert_eq!(
            d.positions.get("/a~1b/1/c~0d"),
            Some(Pos { line: 3, col: 6 })
        );
        assert_eq!(d.positions.get("/a~1b/2"), None);
        assert_eq!(d.positions.get(""), Some(Pos { line: 1, col: 1 }));
    }

    #[test]
    fn a_load_budget_is_shared_by_every_file() {
        // Each file is within the limits alone; the shared budget refuses the fifth.
        let text = format!("a: &a [{}]\nb: [*a, *a, *a]\n", vec!["x"; 1000].join(", "));
        let mut budget = Budget::new(Limits {
            max_nodes: 16_000,
            max_bytes: usize::MAX,
            max_depth: usize::MAX,
        });
        let results: Vec<bool> = (0..5)
            .map(|_| parse_documents_in(&text, YamlLimits::default(), &mut budget).is_ok())
            .collect();
        assert_eq!(results, [true, true, true, false, false]);
    }

    #[test]
    fn documents_and_their_nodes_are_bounded() {
        let limits = YamlLimits {
            max_documents: 1000,
            ..YamlLimits::default()
        };
        let err = parse_documents(&"---\n".repeat(5000), limits).unwrap_err();
        assert!(err.message.contains("more than 1000 documents"), "{err}");
        let limits = YamlLimits {
            max_document_nodes: 1000,
            ..YamlLimits::default()
        };
        let text = format!("a: [{}]\n", vec!["[]"; 2000].join(","));
        let err = parse_documents(&text, limits).unwrap_err();
        assert!(err.message.contains("more than 1000 YAML nodes"), "{err}");
        // Streaming hands documents over one by one.
        let mut seen = 0;
        for_each_document(
            "a: 1\n---\nb: 2\n",
            YamlLimits::default(),
            &mut Budget::default(),
            |_| seen += 1,
        )
        .unwrap();
        assert_eq!(seen, 2);
    }

    #[test]
    fn a_collection_as_a_mapping_key_is_an_error() {
        let err = parse_documents("? [a]\n: x\n", YamlLimits::default()).unwrap_err();
        assert!(err.message.contains("key must be a scalar"), "{err}");
    }

    #[test]
    fn messages_quote_the_input_only_up_to_a_bound() {
        let long = "9".repeat(100_000);
        let err =
            parse_documents(&format!("a: !!float x{long}\n"), YamlLimits::default()).unwrap_err();
        assert!(err.message.len() < 300, "{}", err.message.len());
        let key = "k".repeat(1000);
        let err = parse_documents(
            &format!("? {key}\n: 1\n? {key}\n: 2\n"),
            YamlLimits::default(),
        )
        .unwrap_err();
        assert!(err.message.len() < 300, "{}", err.message.len());
    }

    #[test]
    fn syntax_errors_have_positions() {
        let err = parse_documents("a: [1, 2\nb: 3\n", YamlLimits::default()).unwrap_err();
        assert!(err.pos.line >= 1, "{err}");
    }
}
