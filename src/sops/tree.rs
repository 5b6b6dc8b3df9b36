//! The document of a SOPS file as sops sees it: ordered mappings (the MAC depends on document
//! order, and `serde_json::Map` sorts its keys), scalars typed as Go's yaml.v3 and encoding/json
//! type them for sops (see `scalar`), and the conversion to `serde_json::Value` at the end.

use std::collections::HashMap;
use std::fmt;

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, ScanError, Span};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::scalar::{self, ScalarError, TagKind};
use super::{Format, SopsError};

/// A value of a sops tree. `Time` holds the text Go's `time.Time.MarshalText` gives, which is
/// what sops hashes and what `sops --decrypt` prints for a YAML timestamp.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Time(String),
    Map(Branch),
    Seq(Vec<Node>),
}

/// An ordered mapping: one YAML document, or a nested mapping.
pub(crate) type Branch = Vec<(String, Node)>;

/// Limits that keep parsing a hostile file bounded (the same defaults as `load::yaml`).
const MAX_DEPTH: usize = 256;
const MAX_ALIAS_NODES: usize = 100_000;

/// Where a value is, for error messages: `stringData.password`, `spec.items[2].value`.
#[derive(Clone, Default)]
pub(crate) struct DisplayPath(String);

impl DisplayPath {
    pub(crate) fn key(&self, key: &str) -> DisplayPath {
        if self.0.is_empty() {
            DisplayPath(key.to_string())
        } else {
            DisplayPath(format!("{}.{key}", self.0))
        }
    }

    pub(crate) fn index(&self, i: usize) -> DisplayPath {
        DisplayPath(format!("{}[{i}]", self.0))
    }
}

impl fmt::Display for DisplayPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "(root)" } else { &self.0 })
    }
}

/// A line and column (both from 1) of the YAML text, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    line: usize,
    col: usize,
}

impl Position {
    fn of(marker: &Marker) -> Position {
        Position {
            line: marker.line(),
            col: marker.col() + 1,
        }
    }

    fn start(span: Span) -> Position {
        Position::of(&span.start)
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// Why the cleartext of a sops file is not a document sops can walk. Never quotes a value (it
/// may be a secret).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TreeError {
    #[error("{}: {}", Position::of(.0.marker()), .0.info())]
    Syntax(ScanError),
    #[error("unexpected end of the YAML stream")]
    UnexpectedEnd,
    #[error("{at}: unexpected YAML event")]
    UnexpectedEvent { at: Position },
    #[error("{at}: a YAML document that is a sequence (sops needs a mapping)")]
    SequenceDocument { at: Position },
    #[error("{at}: a YAML document that is a scalar (sops needs a mapping)")]
    ScalarDocument { at: Position },
    #[error("{at}: expected the end of the document")]
    ExpectedDocumentEnd { at: Position },
    #[error("{at}: nesting deeper than {max} levels")]
    TooDeep { at: Position, max: usize },
    #[error("{at}: {reason}")]
    Scalar { at: Position, reason: ScalarError },
    #[error("{at}: alias to an unknown anchor")]
    UnknownAnchor { at: Position },
    #[error("{at}: aliases expand to more than {max} nodes (an alias bomb?)")]
    AliasBomb { at: Position, max: usize },
    #[error("{at}: a mapping key that is not a scalar")]
    KeyNotScalar { at: Position },
    #[error("{at}: a mapping key that is not a string (quote it: sops supports string keys only)")]
    KeyNotString { at: Position },
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("sops only supports JSON files with a top-level object")]
    JsonNotObject,
}

/// Parse every YAML document as sops's YAML store does (`stores/yaml`): each document is a
/// mapping (an empty document is an empty mapping); aliases are expanded; keys are strings.
/// Comments are not read: they are neither hashed nor needed for values (sops encrypts them as
/// `type:comment`, which only the comment regexes, refused by `metadata`, would make matter).
pub(crate) fn parse_yaml(text: &str) -> Result<Vec<Branch>, TreeError> {
    let mut reader = YamlReader {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        alias_nodes: 0,
    };
    let mut branches = Vec::new();
    loop {
        let (event, span) = reader.next()?;
        match event {
            Event::StreamStart | Event::Nothing => {}
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                reader.anchors.clear();
                let (event, span) = reader.next()?;
                let node = reader.node(event, span, 0)?;
                branches.push(match node {
                    Node::Map(branch) => branch,
                    Node::Null => Vec::new(),
                    Node::Seq(_) => {
                        return Err(TreeError::SequenceDocument {
                            at: Position::start(span),
                        })
                    }
                    _ => {
                        return Err(TreeError::ScalarDocument {
                            at: Position::start(span),
                        })
                    }
                });
                match reader.next()? {
                    (Event::DocumentEnd, _) => {}
                    (_, span) => {
                        return Err(TreeError::ExpectedDocumentEnd {
                            at: Position::start(span),
                        })
                    }
                }
            }
            _ => {
                return Err(TreeError::UnexpectedEvent {
                    at: Position::start(span),
                })
            }
        }
    }
    Ok(branches)
}

struct YamlReader<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    /// anchor id → (node, its node count)
    anchors: HashMap<usize, (Node, usize)>,
    alias_nodes: usize,
}

impl<'a> YamlReader<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), TreeError> {
        match self.parser.next_event() {
            Some(Ok(ev)) => Ok(ev),
            Some(Err(e)) => Err(TreeError::Syntax(e)),
            None => Err(TreeError::UnexpectedEnd),
        }
    }

    fn node(&mut self, event: Event<'a>, span: Span, depth: usize) -> Result<Node, TreeError> {
        if depth >= MAX_DEPTH {
            return Err(TreeError::TooDeep {
                at: Position::start(span),
                max: MAX_DEPTH,
            });
        }
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let kind = TagKind::from_tag(tag.as_deref());
                let node = scalar::resolve_yaml(&text, style == ScalarStyle::Plain, kind).map_err(
                    |reason| TreeError::Scalar {
                        at: Position::start(span),
                        reason,
                    },
                )?;
                if anchor > 0 {
                    self.anchors.insert(anchor, (node.clone(), 1));
                }
                Ok(node)
            }
            Event::Alias(id) => {
                let (node, count) =
                    self.anchors
                        .get(&id)
                        .cloned()
                        .ok_or_else(|| TreeError::UnknownAnchor {
                            at: Position::start(span),
                        })?;
                self.alias_nodes += count;
                if self.alias_nodes > MAX_ALIAS_NODES {
                    return Err(TreeError::AliasBomb {
                        at: Position::start(span),
                        max: MAX_ALIAS_NODES,
                    });
                }
                Ok(node)
            }
            Event::SequenceStart(anchor, _) => {
                let mut items = Vec::new();
                let mut count = 1;
                loop {
                    let (event, span) = self.next()?;
                    if matches!(event, Event::SequenceEnd) {
                        break;
                    }
                    let item = self.node(event, span, depth + 1)?;
                    count += node_count(&item);
                    items.push(item);
                }
                let node = Node::Seq(items);
                if anchor > 0 {
                    self.anchors.insert(anchor, (node.clone(), count));
                }
                Ok(node)
            }
            Event::MappingStart(anchor, _) => {
                let mut branch = Vec::new();
                let mut count = 1;
                loop {
                    let (event, key_span) = self.next()?;
                    if matches!(event, Event::MappingEnd) {
                        break;
                    }
                    // yaml.v3 decodes keys like values; sops accepts only string keys.
                    let key = match self.node(event, key_span, depth + 1)? {
                        Node::Str(key) => key,
                        Node::Map(_) | Node::Seq(_) => {
                            return Err(TreeError::KeyNotScalar {
                                at: Position::start(key_span),
                            })
                        }
                        _ => {
                            return Err(TreeError::KeyNotString {
                                at: Position::start(key_span),
                            })
                        }
                    };
                    let (event, span) = self.next()?;
                    let value = self.node(event, span, depth + 1)?;
                    count += 1 + node_count(&value);
                    branch.push((key, value));
                }
                let node = Node::Map(branch);
                if anchor > 0 {
                    self.anchors.insert(anchor, (node.clone(), count));
                }
                Ok(node)
            }
            _ => Err(TreeError::UnexpectedEvent {
                at: Position::start(span),
            }),
        }
    }
}

fn node_count(node: &Node) -> usize {
    match node {
        Node::Map(b) => 1 + b.iter().map(|(_, v)| 1 + node_count(v)).sum::<usize>(),
        Node::Seq(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        _ => 1,
    }
}

/// Parse a JSON file as sops's JSON store does: one top-level object; integers that fit an i64
/// are ints, every other number a float (Go's `json.Number` → `int` or `float64`).
pub(crate) fn parse_json(text: &str) -> Result<Vec<Branch>, TreeError> {
    let node: JsonNode = serde_json::from_str(text)?;
    match node.0 {
        Node::Map(branch) => Ok(vec![branch]),
        _ => Err(TreeError::JsonNotObject),
    }
}

struct JsonNode(Node);

impl<'de> Deserialize<'de> for JsonNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor).map(JsonNode)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        // Go: json.Number.Int64 fails beyond i64, then Float64.
        Ok(i64::try_from(v).map_or(Node::Float(v as f64), Node::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(JsonNode(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut branch = Vec::new();
        while let Some((key, JsonNode(value))) = map.next_entry::<String, JsonNode>()? {
            branch.push((key, value));
        }
        Ok(Node::Map(branch))
    }
}

/// Why a decrypted tree is not a JSON document.
pub(crate) enum ConvertError {
    DuplicateKey { path: DisplayPath, key: String },
    BadMerge { path: DisplayPath },
    NotRepresentable { path: DisplayPath },
}

impl ConvertError {
    pub(crate) fn into_error(self, file: &str, format: Format) -> SopsError {
        let parse = |message: String| SopsError::Parse {
            file: file.to_string(),
            format,
            message,
        };
        match self {
            ConvertError::DuplicateKey { path, key } => {
                parse(format!("duplicate key `{key}` in the mapping at `{path}`"))
            }
            ConvertError::BadMerge { path } => parse(format!(
                "the `<<` merge key at `{path}` needs a mapping or a list of mappings"
            )),
            ConvertError::NotRepresentable { path } => SopsError::NotRepresentable {
                file: file.to_string(),
                path: path.to_string(),
            },
        }
    }
}

/// One document as a JSON object. For YAML, `<<` merge keys are applied as Weft's loader applies
/// them to plain files (explicit keys win, earlier sources over later ones): sops keeps `<<` as an
/// ordinary key (it is one for the MAC and the paths) and prints it back as `!!merge <<`.
pub(crate) fn branch_to_value(branch: Branch, format: Format) -> Result<Value, ConvertError> {
    let convert = Convert {
        merge_keys: format == Format::Yaml,
    };
    convert.map(branch, &DisplayPath::default())
}

struct Convert {
    merge_keys: bool,
}

impl Convert {
    fn map(&self, branch: Branch, path: &DisplayPath) -> Result<Value, ConvertError> {
        let mut map = Map::new();
        let mut merged = Vec::new();
        for (key, node) in branch {
            let value = self.value(node, &path.key(&key))?;
            if self.merge_keys && key == "<<" {
                merged.push(value);
                continue;
            }
            if map.contains_key(&key) {
                return Err(ConvertError::DuplicateKey {
                    path: path.clone(),
                    key,
                });
            }
            map.insert(key, value);
        }
        for source in merged {
            let sources = match source {
                Value::Array(items) => items,
                other => vec![other],
            };
            for source in sources {
                let Value::Object(source) = source else {
                    return Err(ConvertError::BadMerge { path: path.clone() });
                };
                for (k, v) in source {
                    map.entry(k).or_insert(v);
                }
            }
        }
        Ok(Value::Object(map))
    }

    fn value(&self, node: Node, path: &DisplayPath) -> Result<Value, ConvertError> {
        Ok(match node {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(b),
            Node::Int(i) => Value::Number(i.into()),
            Node::Float(f) => Value::Number(
                Number::from_f64(f)
                    .ok_or_else(|| ConvertError::NotRepresentable { path: path.clone() })?,
            ),
            Node::Str(s) | Node::Time(s) => Value::String(s),
            Node::Map(branch) => self.map(branch, path)?,
            Node::Seq(items) => Value::Array(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| self.value(item, &path.index(i)))
                    .collect::<Result<_, _>>()?,
            ),
        })
    }
}
