//! Client-side validation of a document against the structural OpenAPI schema of our own CRDs,
//! so `weft validate` reports what the API server would reject — with file, line and field —
//! before anything reaches a cluster. Kebab-case keys of the first WeaveCloud proposal are
//! rewritten to their camelCase field here, with a warning.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::Value;

/// One problem found at a JSON pointer of the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaIssue {
    /// RFC 6901 pointer of the offending node.
    pub pointer: String,
    /// What is wrong, naming the field.
    pub message: String,
    /// A warning (the document is still usable) rather than an error.
    pub warning: bool,
}

/// `a/b/0/c` → `a.b[0].c`, the way Kubernetes names fields in its errors.
pub fn field_path(pointer: &str) -> String {
    let mut out = String::new();
    for part in pointer.split('/').skip(1) {
        let part = part.replace("~1", "/").replace("~0", "~");
        if !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&part);
        }
    }
    out
}

/// `wc-hostname` → `wcHostname`.
pub fn kebab_to_camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The closest known name to `unknown`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(
    unknown: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = unknown.to_lowercase();
    known
        .into_iter()
        .map(|k| (strsim::jaro_winkler(&lower, &k.to_lowercase()), k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Validate `value` (at `pointer`) against `schema`, rewriting kebab-case keys in place.
pub fn validate(
    value: &mut Value,
    schema: &JSONSchemaProps,
    pointer: &str,
    out: &mut Vec<SchemaIssue>,
) {
    let field = || {
        let p = field_path(pointer);
        if p.is_empty() {
            "the document".to_string()
        } else {
            format!("`{p}`")
        }
    };
    let mut error = |pointer: &str, message: String| {
        out.push(SchemaIssue {
            pointer: pointer.to_string(),
            message,
            warning: false,
        })
    };
    if value.is_null() {
        if schema.nullable != Some(true) && schema.type_.is_some() && pointer_is_field(pointer) {
            // `field:` with no value is how YAML spells "unset"; the API server drops nulls for
            // nullable fields and rejects them for the others.
            error(
                pointer,
                format!(
                    "{} must not be empty (expected {})",
                    field(),
                    schema.type_.as_deref().unwrap_or("a value")
                ),
            );
        }
        return;
    }
    if schema.x_kubernetes_int_or_string == Some(true) {
        if !(matches!(value, Value::String(_)) || value.is_i64() || value.is_u64()) {
            error(
                pointer,
                format!(
                    "{} must be an integer or a string, not {}",
                    field(),
                    type_name(value)
                ),
            );
            return;
        }
    } else if let Some(expected) = schema.type_.as_deref() {
        let actual = type_name(value);
        let ok = actual == expected || (expected == "number" && actual == "integer");
        if !ok {
            error(
                pointer,
                format!(
                    "{} must be {} {expected}, not {actual} `{}`",
                    field(),
                    article(expected),
                    short(value)
                ),
            );
            return;
        }
    }
    if let Some(allowed) = &schema.enum_ {
        if !allowed.iter().any(|a| a.0 == *value) {
            let list: Vec<String> = allowed.iter().map(|a| short(&a.0)).collect();
            let hint = match value.as_str() {
                Some(s) => did_you_mean(s, list.iter().map(String::as_str))
                    .map(|m| format!(" (did you mean `{m}`?)"))
                    .unwrap_or_default(),
                None => String::new(),
            };
            error(
                pointer,
                format!(
                    "{} must be one of {}, not `{}`{hint}",
                    field(),
                    list.join(", "),
                    short(value)
                ),
            );
        }
    }
    if let (Some(pattern), Value::String(s)) = (&schema.pattern, &*value) {
        if let Some(re) = compiled(pattern) {
            if !re.is_match(s) {
                error(
                    pointer,
                    format!("{} `{s}` does not match the pattern `{pattern}`", field()),
                );
            }
        }
    }
    if let (Some(min), Value::String(s)) = (schema.min_length, &*value) {
        if (s.chars().count() as i64) < min {
            error(
                pointer,
                format!("{} must be at least {min} characters long", field()),
            );
        }
    }
    if let Some(min) = schema.minimum {
        if let Some(n) = value.as_f64() {
            let below = if schema.exclusive_minimum == Some(true) {
                n <= min
            } else {
                n < min
            };
            if below {
                error(
                    pointer,
                    format!(
                        "{} must be {} {min}, not {n}",
                        field(),
                        if schema.exclusive_minimum == Some(true) {
                            "greater than"
                        } else {
                            "at least"
                        }
                    ),
                );
            }
        }
    }
    match value {
        Value::Object(map) => validate_object(map, schema, pointer, out),
        Value::Array(items) => {
            if let Some(JSONSchemaPropsOrArray::Schema(item_schema)) = &schema.items {
                for (i, item) in items.iter_mut().enumerate() {
                    validate(item, item_schema, &format!("{pointer}/{i}"), out);
                }
            }
        }
        _ => {}
    }
}

/// Compile a schema pattern once per process: the same few patterns are checked against every
/// document of a repository. An invalid pattern (our own CRDs only) is skipped, not reported.
fn compiled(pattern: &str) -> Option<regex::Regex> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    map.entry(pattern.to_string())
        .or_insert_with(|| regex::Regex::new(pattern).ok())
        .clone()
}

fn pointer_is_field(pointer: &str) -> bool {
    !pointer.is_empty()
}

fn article(t: &str) -> &'static str {
    if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

fn short(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

fn validate_object(
    map: &mut serde_json::Map<String, Value>,
    schema: &JSONSchemaProps,
    pointer: &str,
    out: &mut Vec<SchemaIssue>,
) {
    let preserve = schema.x_kubernetes_preserve_unknown_fields == Some(true);
    let additional = match &schema.additional_properties {
        Some(JSONSchemaPropsOrBool::Schema(s)) => Some(s.as_ref()),
        _ => None,
    };
    if let Some(props) = &schema.properties {
        // Kebab-case keys of the first proposal → camelCase fields, with a warning.
        let renames: Vec<(String, String)> = map
            .keys()
            .filter(|k| k.contains('-') && !props.contains_key(*k))
            .map(|k| (k.clone(), kebab_to_camel(k)))
            .filter(|(_, camel)| props.contains_key(camel))
            .collect();
        for (kebab, camel) in renames {
            if map.contains_key(&camel) {
                out.push(SchemaIssue {
                    pointer: format!("{pointer}/{}", escape(&kebab)),
                    message: format!("both `{kebab}` and `{camel}` are set; write only `{camel}`"),
                    warning: false,
                });
                continue;
            }
            if let Some(v) = map.remove(&kebab) {
                map.insert(camel.clone(), v);
            }
            out.push(SchemaIssue {
                pointer: format!("{pointer}/{}", escape(&camel)),
                message: format!("`{kebab}` is the old kebab-case spelling; write `{camel}`"),
                warning: true,
            });
        }
        for (key, child) in map.iter_mut() {
            let child_pointer = format!("{pointer}/{}", escape(key));
            match props.get(key) {
                Some(child_schema) => validate(child, child_schema, &child_pointer, out),
                None if preserve => {}
                None => match additional {
                    Some(s) => validate(child, s, &child_pointer, out),
                    None => {
                        let hint = did_you_mean(key, props.keys().map(String::as_str))
                            .map(|m| format!(" (did you mean `{m}`?)"))
                            .unwrap_or_default();
                        let parent = field_path(pointer);
                        let place = if parent.is_empty() {
                            String::new()
                        } else {
                            format!(" in `{parent}`")
                        };
                        out.push(SchemaIssue {
                            pointer: child_pointer,
                            message: format!("unknown field `{key}`{place}{hint}"),
                            warning: false,
                        });
                    }
                },
            }
        }
    } else if let Some(s) = additional {
        for (key, child) in map.iter_mut() {
            validate(child, s, &format!("{pointer}/{}", escape(key)), out);
        }
    }
    for req in schema.required.iter().flatten() {
        if !map.contains_key(req) {
            let parent = field_path(pointer);
            let full = if parent.is_empty() {
                req.clone()
            } else {
                format!("{parent}.{req}")
            };
            out.push(SchemaIssue {
                pointer: pointer.to_string(),
                message: format!("missing required field `{full}`"),
                warning: false,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names() {
        assert_eq!(field_path("/spec/list/0/a~1b"), "spec.list[0].a/b");
        assert_eq!(
            kebab_to_camel("container-runtime-endpoint"),
            "containerRuntimeEndpoint"
        );
        assert_eq!(
            did_you_mean("enviroment", ["environment", "autoUpdate"]),
            Some("environment")
        );
        assert_eq!(did_you_mean("zzz", ["environment", "autoUpdate"]), None);
    }
}
