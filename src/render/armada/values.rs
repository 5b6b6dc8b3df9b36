//! Chart values: deep merge, the built-in values (`release.*`, `chart.*`), and `${path}` /
//! `${path:=default}` placeholder substitution.

use std::borrow::Cow;
use std::ops::ControlFlow;

use serde_json::Value;

use crate::load::budget::{pointer_depth, Budget, Exceeded};
use crate::load::yaml::{self, YamlLimits};

/// Deep merge: maps merge key by key, everything else (scalars, lists, null) replaces.
pub fn deep_merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        deep_merge(existing, v)
                    }
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Values every chart can use besides its own.
#[derive(Clone, Debug, Default)]
pub struct Builtins {
    pub release_name: String,
    pub release_namespace: String,
    pub chart_name: String,
    pub chart_version: String,
}

impl Builtins {
    fn lookup(&self, path: &str) -> Option<Value> {
        let s = |v: &str| Some(Value::String(v.to_string()));
        match path {
            "release.name" => s(&self.release_name),
            "release.namespace" => s(&self.release_namespace),
            "chart.name" => s(&self.chart_name),
            "chart.version" => s(&self.chart_version),
            _ => None,
        }
    }
}

fn lookup<'v>(values: &'v Value, builtins: &Builtins, path: &str) -> Option<Cow<'v, Value>> {
    if let Some(v) = builtins.lookup(path) {
        return Some(Cow::Owned(v));
    }
    let mut node = values;
    for part in path.split('.') {
        node = match node {
            Value::Object(m) => m.get(part)?,
            Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(Cow::Borrowed(node))
}

fn valid_path(path: &str) -> bool {
    !path.is_empty()
        && path.split('.').all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

/// Replace placeholders in every string of `value` (not in mapping keys). Problems are
/// collected as (pointer, message). What substitution produces (whole values copied, text
/// written) is charged to `budget`; once it is spent, the rest of `value` is left alone, the
/// placeholder that passed it is the one problem reported, and the walk breaks.
pub fn substitute(
    value: &mut Value,
    pointer: String,
    values: &Value,
    builtins: &Builtins,
    budget: &mut Budget,
    problems: &mut Vec<(String, String)>,
) -> ControlFlow<()> {
    match value {
        Value::String(s) if s.contains('$') => {
            let depth = pointer_depth(&pointer);
            match substitute_at(s, values, builtins, budget, depth) {
                Ok(v) => *value = v,
                Err(e) => {
                    let spent = matches!(e, PlaceholderError::Budget { .. });
                    problems.push((pointer, e.to_string()));
                    if spent {
                        return ControlFlow::Break(());
                    }
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute(
                    item,
                    format!("{pointer}/{i}"),
                    values,
                    builtins,
                    budget,
                    problems,
                )?;
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let child = format!("{pointer}/{}", k.replace('~', "~0").replace('/', "~1"));
                substitute(v, child, values, builtins, budget, problems)?;
            }
        }
        _ => {}
    }
    ControlFlow::Continue(())
}

/// Why a `${…}` placeholder could not be substituted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderError {
    #[error(
        "unterminated placeholder `{0}`: a `${{` needs a `}}` (write `$${{` for a literal `${{`)"
    )]
    Unterminated(String),
    #[error("`${{{0}}}` is not a placeholder: write `${{path.to.value}}` or `${{path.to.value:=default}}` (or `$${{` for a literal `${{`)")]
    NotAPlaceholder(String),
    #[error("unresolved placeholder `${{{inner}}}`: no value at `{path}` and no default")]
    Unresolved { inner: String, path: String },
    #[error("placeholder `${{{inner}}}` is a {what} and cannot be written inside a string; make it the whole value")]
    NotAScalar { inner: String, what: &'static str },
    #[error("substitution of `${{{inner}}}` {source} (see docs/security.md)")]
    Budget {
        inner: String,
        #[source]
        source: Exceeded,
    },
}

/// Substitute one string. A string that is exactly one placeholder becomes the value itself
/// (number, boolean, list, mapping…); otherwise values are written into the text. What it
/// produces is charged to `budget`.
pub fn substitute_str(
    s: &str,
    values: &Value,
    builtins: &Builtins,
    budget: &mut Budget,
) -> Result<Value, PlaceholderError> {
    substitute_at(s, values, builtins, budget, 0)
}

/// [`substitute_str`] for a string `at_depth` levels below its document's root.
fn substitute_at(
    s: &str,
    values: &Value,
    builtins: &Builtins,
    budget: &mut Budget,
    at_depth: usize,
) -> Result<Value, PlaceholderError> {
    let over = |inner: &str, source| PlaceholderError::Budget {
        inner: inner.to_string(),
        source,
    };
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
            continue;
        }
        let Some(body) = tail.strip_prefix("${") else {
            out.push('$');
            rest = &tail[1..];
            continue;
        };
        let Some(close) = body.find('}') else {
            return Err(PlaceholderError::Unterminated(tail.to_string()));
        };
        let inner = &body[..close];
        let (path, default) = match inner.split_once(":=") {
            Some((p, d)) => (p.trim(), Some(d)),
            None => (inner.trim(), None),
        };
        if !valid_path(path) {
            return Err(PlaceholderError::NotAPlaceholder(inner.to_string()));
        }
        let whole = out.is_empty() && at == 0 && close + 1 == body.len();
        let found = lookup(values, builtins, path);
        if let Some(v) = &found {
            // Charged before the copy is made: a refused `${big}` never clones.
            budget.copy(v, at_depth).map_err(|e| over(inner, e))?;
        }
        let value = match (found, default) {
            (Some(v), _) => v.into_owned(),
            (None, Some(d)) if whole => parse_default(d),
            (None, Some(d)) => Value::String(d.to_string()),
            (None, None) => {
                return Err(PlaceholderError::Unresolved {
                    inner: inner.to_string(),
                    path: path.to_string(),
                })
            }
        };
        if whole {
            return Ok(value);
        }
        match value {
            Value::String(v) => out.push_str(&v),
            Value::Null => {}
            Value::Bool(b) => out.push_str(&b.to_string()),
            Value::Number(n) => out.push_str(&n.to_string()),
            Value::Array(_) | Value::Object(_) => {
                return Err(PlaceholderError::NotAScalar {
                    inner: inner.to_string(),
                    what: if value.is_array() { "list" } else { "mapping" },
                })
            }
        }
        rest = &body[close + 1..];
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

/// A whole-scalar default is read as a YAML scalar (`2` → 2, `true` → true, `x` → "x").
fn parse_default(d: &str) -> Value {
    if d.trim().is_empty() {
        return Value::String(String::new());
    }
    match yaml::parse_documents(d, YamlLimits::default()) {
        Ok(docs) if docs.len() == 1 => match &docs[0].value {
            v @ (Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Null) => v.clone(),
            _ => Value::String(d.to_string()),
        },
        _ => Value::String(d.to_string()),
    }
}
