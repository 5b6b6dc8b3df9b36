//! helm's output read as Kubernetes reads it. `helm install` (and `kubectl apply`) turn each
//! manifest into JSON with `sigs.k8s.io/yaml`, which decodes YAML with go-yaml v2 into untyped Go
//! values and marshals them with `encoding/json`. So the scalars of a chart follow YAML 1.1 as
//! go-yaml v2 resolves them (`resolve.go`), not the YAML 1.2 core schema:
//!
//! - integers: `0555` and `0o555` are octal (365), `0x1F` hex, `0b101` binary, a leading `+`
//!   is allowed, every `_` is removed first (`1_000`); beyond 64 bits a number becomes a float;
//!   `1:30` (sexagesimal) is a string;
//! - floats: `1.5`, `.5`, `1e3`, `08` (not octal, so a float); `.inf`/`.nan` are floats that JSON
//!   cannot carry, an error here as in `encoding/json`; a float with an integral value is written
//!   as an integer (`1.0` → `1`), as `encoding/json` writes it;
//! - booleans: `y Y yes Yes YES on On ON true True TRUE` and their negatives;
//! - null: `~`, `null`, `Null`, `NULL`, empty;
//! - timestamps stay strings; `!!binary` is decoded; other tags leave the text a string;
//! - map keys become strings (`on:` → `"true"`, `1.5:` → `"1.5"`), a null key is an error;
//! - `<<` merges in document order (a later key or merge overwrites an earlier one; of a list
//!   of merged maps the first wins), and a duplicate key is accepted, the last one winning, as
//!   go-yaml v2 decodes without `strict`. Each duplicate is reported to the caller.
//!
//! Anchors and aliases are expanded within [`Yaml11Limits`], charged before anything is copied.

use std::collections::{HashMap, HashSet};

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::{Map, Value};

/// Bounds on what one helm render's output may make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Yaml11Limits {
    /// Nodes of every document of one render together, the output's own and alias copies.
    pub max_nodes: usize,
    /// Nodes copied by aliases (and anchors), over the whole render.
    pub max_alias_nodes: usize,
    /// Bytes of text copied by aliases, over the whole render.
    pub max_alias_bytes: usize,
    /// Nesting depth (CRD schemas nest deeply).
    pub max_depth: usize,
}

impl Default for Yaml11Limits {
    fn default() -> Self {
        Yaml11Limits {
            max_nodes: 2_000_000,
            max_alias_nodes: 250_000,
            max_alias_bytes: 16 * 1024 * 1024,
            max_depth: 256,
        }
    }
}

/// Why a document is not what Kubernetes could read. `line` is 1-based within the document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line} of the rendered document: {message}")]
pub struct Yaml11Error {
    pub line: u32,
    pub message: String,
}

/// A key written twice in one mapping: the last one wins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateKey {
    /// The key, cut to [`MAX_QUOTED`] characters.
    pub key: String,
    /// JSON pointer of the mapping that holds it (cut to [`MAX_QUOTED`] characters).
    pub mapping: String,
    /// 1-based line of the later occurrence, within the document.
    pub line: u32,
}

/// The most characters of a key or path that a message quotes.
pub const MAX_QUOTED: usize = 120;

/// What a render's documents have spent so far; one per render.
#[derive(Debug, Default)]
pub struct Spent {
    nodes: usize,
    alias_nodes: usize,
    alias_bytes: usize,
}

/// Parse one document of helm's output (helm's `---` separators are already split off; a text
/// holding more documents is refused). Returns the value (`Null` for an empty document) and the
/// duplicate keys met.
pub fn parse_document(
    text: &str,
    limits: &Yaml11Limits,
    spent: &mut Spent,
) -> Result<(Value, Vec<DuplicateKey>), Yaml11Error> {
    let mut builder = Builder {
        limits,
        spent,
        anchors: HashMap::new(),
        stack: Vec::new(),
        result: None,
        documents: 0,
        duplicates: Vec::new(),
    };
    let mut parser = Parser::new_from_str(text);
    while let Some(ev) = parser.next_event() {
        let (event, span) = ev.map_err(|e| Yaml11Error {
            line: e.marker().line() as u32,
            message: cut(e.info()),
        })?;
        builder.event(event, span)?;
    }
    let duplicates = builder.duplicates;
    Ok((builder.result.unwrap_or(Value::Null), duplicates))
}

/// A key of a mapping, or the `<<` merge key.
enum Key {
    Merge,
    Name(String),
}

enum Frame {
    Seq {
        items: Vec<Value>,
        anchor: usize,
    },
    Map {
        map: Map<String, Value>,
        anchor: usize,
        key: Option<(Key, u32)>,
        /// Keys that came from `<<` merges and were not written since: writing one is an
        /// override, not a duplicate.
        merged: HashSet<String>,
    },
}

/// An anchored node, kept for its aliases: a scalar keeps its type for use as a key.
enum Anchored {
    Scalar(Scalar),
    Tree(Value, usize, usize),
}

struct Builder<'a> {
    limits: &'a Yaml11Limits,
    spent: &'a mut Spent,
    anchors: HashMap<usize, Anchored>,
    stack: Vec<Frame>,
    result: Option<Value>,
    documents: usize,
    duplicates: Vec<DuplicateKey>,
}

fn line_of(span: &Span) -> u32 {
    span.start.line() as u32
}

impl Builder<'_> {
    fn fail(line: u32, message: impl Into<String>) -> Yaml11Error {
        Yaml11Error {
            line,
            message: message.into(),
        }
    }

    fn charge_nodes(&mut self, nodes: usize, line: u32) -> Result<(), Yaml11Error> {
        self.spent.nodes = self.spent.nodes.saturating_add(nodes);
        if self.spent.nodes > self.limits.max_nodes {
            return Err(Self::fail(
                line,
                format!(
                    "helm's output would hold more than {} YAML nodes; refusing to read further",
                    self.limits.max_nodes
                ),
            ));
        }
        Ok(())
    }

    fn charge_copy(&mut self, nodes: usize, bytes: usize, line: u32) -> Result<(), Yaml11Error> {
        self.spent.alias_nodes = self.spent.alias_nodes.saturating_add(nodes);
        self.spent.alias_bytes = self.spent.alias_bytes.saturating_add(bytes);
        if self.spent.alias_nodes > self.limits.max_alias_nodes {
            return Err(Self::fail(
                line,
                format!(
                    "YAML anchors and aliases would copy more than {} nodes (an alias bomb?)",
                    self.limits.max_alias_nodes
                ),
            ));
        }
        if self.spent.alias_bytes > self.limits.max_alias_bytes {
            return Err(Self::fail(
                line,
                format!(
                    "YAML anchors and aliases would copy more than {} bytes of text (an alias bomb?)",
                    self.limits.max_alias_bytes
                ),
            ));
        }
        self.charge_nodes(nodes, line)
    }

    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), Yaml11Error> {
        let line = line_of(&span);
        match event {
            Event::StreamStart | Event::StreamEnd | Event::Nothing | Event::DocumentEnd => Ok(()),
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(Self::fail(line, "a second document where one was expected"));
                }
                Ok(())
            }
            Event::Scalar(text, style, anchor, tag) => {
                self.charge_nodes(1, line)?;
                let key_position = matches!(self.stack.last(), Some(Frame::Map { key: None, .. }));
                if key_position
                    && text == "<<"
                    && style == ScalarStyle::Plain
                    && tag.as_deref().is_none_or(|t| is_core(t, "merge"))
                {
                    return self.set_key(Key::Merge, line);
                }
                let scalar =
                    resolve(&text, style, tag.as_deref()).map_err(|m| Self::fail(line, m))?;
                if anchor > 0 {
                    self.anchors
                        .insert(anchor, Anchored::Scalar(scalar.clone()));
                }
                if key_position {
                    let key = key_string(&scalar).map_err(|m| Self::fail(line, m))?;
                    return self.set_key(Key::Name(key), line);
                }
                let value = to_json(scalar).map_err(|m| Self::fail(line, m))?;
                self.attach(value, line)
            }
            Event::Alias(id) => {
                let key_position = matches!(self.stack.last(), Some(Frame::Map { key: None, .. }));
                let (nodes, bytes, scalar) = match self.anchors.get(&id) {
                    None => return Err(Self::fail(line, "alias refers to an unknown anchor")),
                    Some(Anchored::Scalar(s)) => {
                        let bytes = match s {
                            Scalar::Str(s) => s.len(),
                            _ => 0,
                        };
                        (1, bytes, Some(s.clone()))
                    }
                    Some(Anchored::Tree(_, nodes, bytes)) => (*nodes, *bytes, None),
                };
                // Charge before cloning: a refused alias never copies.
                self.charge_copy(nodes, bytes, line)?;
                let value = match (scalar, key_position) {
                    (Some(s), true) => {
                        let key = key_string(&s).map_err(|m| Self::fail(line, m))?;
                        return self.set_key(Key::Name(key), line);
                    }
                    (None, true) => {
                        return Err(Self::fail(line, "a mapping key must be a scalar"));
                    }
                    (Some(s), false) => to_json(s).map_err(|m| Self::fail(line, m))?,
                    (None, false) => match self.anchors.get(&id) {
                        Some(Anchored::Tree(v, _, _)) => v.clone(),
                        _ => return Err(Self::fail(line, "alias refers to an unknown anchor")),
                    },
                };
                self.attach(value, line)
            }
            Event::SequenceStart(anchor, _) => {
                self.open(line)?;
                self.stack.push(Frame::Seq {
                    items: Vec::new(),
                    anchor,
                });
                Ok(())
            }
            Event::MappingStart(anchor, _) => {
                self.open(line)?;
                self.stack.push(Frame::Map {
                    map: Map::new(),
                    anchor,
                    key: None,
                    merged: HashSet::new(),
                });
                Ok(())
            }
            Event::SequenceEnd => match self.stack.pop() {
                Some(Frame::Seq { items, anchor }) => {
                    let value = Value::Array(items);
                    self.anchor(anchor, &value, line)?;
                    self.attach(value, line)
                }
                _ => Err(Self::fail(line, "unbalanced sequence end")),
            },
            Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Map { map, anchor, .. }) => {
                    let value = Value::Object(map);
                    self.anchor(anchor, &value, line)?;
                    self.attach(value, line)
                }
                _ => Err(Self::fail(line, "unbalanced mapping end")),
            },
        }
    }

    fn open(&mut self, line: u32) -> Result<(), Yaml11Error> {
        if matches!(self.stack.last(), Some(Frame::Map { key: None, .. })) {
            // go-yaml v2: "invalid map key".
            return Err(Self::fail(line, "a mapping key must be a scalar"));
        }
        if self.stack.len() >= self.limits.max_depth {
            return Err(Self::fail(
                line,
                format!("YAML nesting deeper than {} levels", self.limits.max_depth),
            ));
        }
        self.charge_nodes(1, line)
    }

    /// Keep a copy of an anchored collection for its aliases, charged like an alias.
    fn anchor(&mut self, id: usize, value: &Value, line: u32) -> Result<(), Yaml11Error> {
        if id == 0 {
            return Ok(());
        }
        let (nodes, bytes) = measure(value);
        self.charge_copy(nodes, bytes, line)?;
        self.anchors
            .insert(id, Anchored::Tree(value.clone(), nodes, bytes));
        Ok(())
    }

    fn set_key(&mut self, key: Key, line: u32) -> Result<(), Yaml11Error> {
        if let Some(Frame::Map { key: slot, .. }) = self.stack.last_mut() {
            *slot = Some((key, line));
        }
        Ok(())
    }

    /// Attach a finished value to its parent, or make it the document.
    fn attach(&mut self, value: Value, line: u32) -> Result<(), Yaml11Error> {
        let duplicate = match self.stack.last() {
            Some(Frame::Map {
                map,
                merged,
                key: Some((Key::Name(k), key_line)),
                ..
            }) if map.contains_key(k) && !merged.contains(k) => Some(DuplicateKey {
                key: cut(k),
                mapping: cut(&pointer_of(&self.stack[..self.stack.len() - 1])),
                line: *key_line,
            }),
            _ => None,
        };
        if let Some(d) = duplicate {
            self.duplicates.push(d);
        }
        match self.stack.last_mut() {
            None => {
                self.result = Some(value);
                Ok(())
            }
            Some(Frame::Seq { items, .. }) => {
                items.push(value);
                Ok(())
            }
            Some(Frame::Map {
                map, key, merged, ..
            }) => match key.take() {
                Some((Key::Name(k), _)) => {
                    merged.remove(&k);
                    map.insert(k, value);
                    Ok(())
                }
                Some((Key::Merge, _)) => merge(map, merged, value).map_err(|m| Self::fail(line, m)),
                None => Err(Self::fail(line, "a mapping key must be a scalar")),
            },
        }
    }
}

/// The JSON pointer of the node being built under `frames` (for messages).
fn pointer_of(frames: &[Frame]) -> String {
    let mut pointer = String::new();
    for frame in frames {
        match frame {
            Frame::Seq { items, .. } => pointer.push_str(&format!("/{}", items.len())),
            Frame::Map {
                key: Some((Key::Name(k), _)),
                ..
            } => {
                pointer.push('/');
                pointer.push_str(&k.replace('~', "~0").replace('/', "~1"));
            }
            Frame::Map { .. } => pointer.push_str("/<<"),
        }
        if pointer.len() > MAX_QUOTED * 4 {
            break;
        }
    }
    if pointer.is_empty() {
        "/".to_string()
    } else {
        pointer
    }
}

/// go-yaml v2's merge: the merged map's keys overwrite those already set (keys written after
/// `<<` overwrite them in turn); of a list of maps, the first wins (applied last).
fn merge(
    map: &mut Map<String, Value>,
    merged: &mut HashSet<String>,
    value: Value,
) -> Result<(), String> {
    let want_map = || "map merge requires map or sequence of maps as the value".to_string();
    let sources = match value {
        Value::Object(source) => vec![source],
        Value::Array(items) => {
            let mut sources = Vec::with_capacity(items.len());
            // Earlier maps take precedence: applied last.
            for item in items.into_iter().rev() {
                match item {
                    Value::Object(source) => sources.push(source),
                    _ => return Err(want_map()),
                }
            }
            sources
        }
        _ => return Err(want_map()),
    };
    for source in sources {
        for (k, v) in source {
            if !map.contains_key(&k) {
                merged.insert(k.clone());
            }
            map.insert(k, v);
        }
    }
    Ok(())
}

/// Nodes and text bytes of a value, without recursion.
fn measure(value: &Value) -> (usize, usize) {
    let (mut nodes, mut bytes) = (0usize, 0usize);
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        nodes += 1;
        match v {
            Value::String(s) => bytes += s.len(),
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => {
                for (k, item) in map {
                    bytes += k.len();
                    stack.push(item);
                }
            }
            _ => {}
        }
    }
    (nodes, bytes)
}

/// `text` cut to [`MAX_QUOTED`] characters, marked when cut.
pub fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[path = "yaml11_scalar.rs"]
mod scalar;
#[cfg(test)]
use scalar::go_format_float_key;
use scalar::{is_core, key_string, resolve, to_json, Scalar};

#[cfg(test)]
#[path = "yaml11_tests.rs"]
mod tests;
