//! `values.overlays` of an ArmadaChart: patches on the rendered objects, and the Kubernetes
//! label selectors that pick their targets.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One overlay of `values.overlays`: a patch on the rendered objects matched by `target`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Overlay {
    /// Which rendered objects the patch applies to (at least one must match).
    pub target: OverlayTarget,
    /// RFC 7386 JSON merge patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_patch: Option<Value>,
    /// RFC 6902 JSON patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_patch: Option<json_patch::Patch>,
}

/// Selects rendered objects by kind, name, namespace and labels; unset fields match anything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OverlayTarget {
    /// `group/version` or `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A Kubernetes label selector string: `app=web,tier!=db,env in (a,b),!legacy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

/// Parse `values.overlays` (if any). Errors name the overlay by index.
pub fn overlays_of(values: &Map<String, Value>) -> Result<Vec<Overlay>, (usize, String)> {
    let Some(list) = values.get("overlays") else {
        return Ok(Vec::new());
    };
    let Value::Array(items) = list else {
        return Err((0, "`values.overlays` must be a list".to_string()));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let overlay: Overlay = serde_json::from_value(item.clone())
            .map_err(|e| (i, format!("`values.overlays[{i}]`: {e}")))?;
        match (&overlay.merge_patch, &overlay.json_patch) {
            (Some(_), Some(_)) => {
                return Err((
                    i,
                    format!(
                        "`values.overlays[{i}]` has both `mergePatch` and `jsonPatch`; give one"
                    ),
                ))
            }
            (None, None) => {
                return Err((
                    i,
                    format!("`values.overlays[{i}]` needs `mergePatch` or `jsonPatch`"),
                ))
            }
            _ => {}
        }
        let t = &overlay.target;
        if t.kind.is_none() && t.name.is_none() && t.label_selector.is_none() {
            return Err((
                i,
                format!("`values.overlays[{i}].target` must give at least one of `kind`, `name`, `labelSelector`"),
            ));
        }
        if let Some(sel) = &t.label_selector {
            LabelSelector::parse(sel).map_err(|e| {
                (
                    i,
                    format!("`values.overlays[{i}].target.labelSelector`: {e}"),
                )
            })?;
        }
        out.push(overlay);
    }
    Ok(out)
}

/// A label selector that is not in the string syntax of `kubectl -l`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LabelSelectorError {
    #[error("empty requirement in `{selector}`")]
    EmptyRequirement { selector: String },
    #[error("unbalanced `)` in `{selector}`")]
    UnbalancedClose { selector: String },
    #[error("unbalanced `(` in `{selector}`")]
    UnbalancedOpen { selector: String },
    #[error("`{values}` must be a parenthesised list such as `(a,b)`")]
    NotAList { values: String },
    #[error("`{key}` is not a valid label key")]
    InvalidKey { key: String },
}

/// A parsed Kubernetes label selector (the string syntax of `kubectl -l`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl LabelSelector {
    /// Parse `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
    pub fn parse(text: &str) -> Result<LabelSelector, LabelSelectorError> {
        let mut reqs = Vec::new();
        for part in split_selector(text)? {
            let part = part.trim();
            if part.is_empty() {
                return Err(LabelSelectorError::EmptyRequirement {
                    selector: text.to_string(),
                });
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(check_key(key.trim())?)
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(check_key(k.trim())?, v.trim().to_string())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(check_key(k.trim())?, v.trim().to_string())
            } else if let Some((k, rest)) = split_word(part, " notin ") {
                Requirement::NotIn(check_key(k)?, set_values(rest)?)
            } else if let Some((k, rest)) = split_word(part, " in ") {
                Requirement::In(check_key(k)?, set_values(rest)?)
            } else {
                Requirement::Exists(check_key(part)?)
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Does an object with `labels` match?
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Split on commas that are not inside parentheses.
fn split_selector(text: &str) -> Result<Vec<&str>, LabelSelectorError> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(LabelSelectorError::UnbalancedClose {
                        selector: text.to_string(),
                    });
                }
            }
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(LabelSelectorError::UnbalancedOpen {
            selector: text.to_string(),
        });
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn split_word<'a>(part: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    part.find(word)
        .map(|i| (part[..i].trim(), part[i + word.len()..].trim()))
}

fn set_values(rest: &str) -> Result<Vec<String>, LabelSelectorError> {
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| LabelSelectorError::NotAList {
            values: rest.to_string(),
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn check_key(key: &str) -> Result<String, LabelSelectorError> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(key.to_string())
    } else {
        Err(LabelSelectorError::InvalidKey {
            key: key.to_string(),
        })
    }
}
