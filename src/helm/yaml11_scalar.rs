//! go-yaml v2's `resolve` (`resolve.go`) for one scalar, and what `sigs.k8s.io/yaml` and
//! `encoding/json` make of the result: a JSON value, or a JSON object key. See [`super`].

use base64::Engine;
use saphyr_parser::{ScalarStyle, Tag};
use serde_json::{Number, Value};

use super::cut;
use crate::source::go_yaml::yaml_style_float;

/// A scalar as go-yaml v2 resolves it, before it becomes JSON.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
}

const CORE: &str = "tag:yaml.org,2002:";

pub(super) fn is_core(tag: &Tag, name: &str) -> bool {
    tag.handle == CORE && tag.suffix == name
}

/// go-yaml v2's `resolve` for a scalar node, as decoded into `interface{}`.
pub(super) fn resolve(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Result<Scalar, String> {
    let core = tag.filter(|t| t.handle == CORE).map(|t| t.suffix.as_str());
    match (tag, core) {
        // An untagged quoted or block scalar is a string.
        (None, _) if style != ScalarStyle::Plain => Ok(Scalar::Str(text.to_string())),
        (None, _) => Ok(resolve_plain(text, None)),
        (Some(_), Some("str")) => Ok(Scalar::Str(text.to_string())),
        (Some(_), Some("binary")) => {
            let cleaned: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
            let data = base64::engine::general_purpose::STANDARD
                .decode(cleaned.as_bytes())
                .map_err(|_| "!!binary value contains invalid base64 data".to_string())?;
            Ok(Scalar::Str(String::from_utf8_lossy(&data).into_owned()))
        }
        (Some(_), Some(t @ ("bool" | "int" | "float" | "null" | "timestamp"))) => {
            let resolved = resolve_plain(text, Some(t));
            let got = match &resolved {
                Scalar::Null => "null",
                Scalar::Bool(_) => "bool",
                Scalar::Int(_) | Scalar::Uint(_) => "int",
                Scalar::Float(_) => "float",
                Scalar::Str(_) if t == "timestamp" && looks_like_timestamp(text) => "timestamp",
                Scalar::Str(_) => "str",
            };
            match (t, got) {
                (t, g) if t == g => Ok(resolved),
                ("float", "int") => Ok(match resolved {
                    Scalar::Int(i) => Scalar::Float(i as f64),
                    Scalar::Uint(u) => Scalar::Float(u as f64),
                    other => other,
                }),
                _ => Err(format!("cannot decode !!{got} `{}` as a !!{t}", cut(text))),
            }
        }
        // Any other tag (`!foo`, `!!set`): not resolvable, the text stays a string.
        _ => Ok(Scalar::Str(text.to_string())),
    }
}

/// go-yaml v2's timestamp test, as far as it matters here: four digits and a `-`.
fn looks_like_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() > 4 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
}

/// An untagged plain scalar (or one tagged with a resolvable type).
fn resolve_plain(text: &str, tag: Option<&str>) -> Scalar {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Scalar::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Scalar::Bool(false)
        }
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        _ => {}
    }
    let Some(first) = text.bytes().next() else {
        return Scalar::Null;
    };
    match first {
        b'.' => go_parse_float_dot(text)
            .map(Scalar::Float)
            .unwrap_or_else(|| Scalar::Str(text.to_string())),
        b'0'..=b'9' | b'+' | b'-' => {
            if tag.is_none_or(|t| t == "timestamp") && looks_like_timestamp(text) {
                // A timestamp decoded into `interface{}` is kept as its text.
                return Scalar::Str(text.to_string());
            }
            let plain: String = text.chars().filter(|c| *c != '_').collect();
            match go_parse_int(&plain) {
                Ok(i) => return Scalar::Int(i),
                Err(_) => {
                    if let Ok(u) = go_parse_uint(&plain) {
                        return Scalar::Uint(u);
                    }
                }
            }
            if yaml_style_float(&plain) {
                if let Some(f) = go_parse_float(&plain) {
                    return Scalar::Float(f);
                }
            }
            if let Some(bin) = plain.strip_prefix("-0b") {
                if let Ok(i) = i64::from_str_radix(&format!("-{bin}"), 2) {
                    return Scalar::Int(i);
                }
            }
            Scalar::Str(text.to_string())
        }
        _ => Scalar::Str(text.to_string()),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum GoParseError {
    Syntax,
    Range,
}

/// Go's `strconv.ParseUint(s, 0, 64)` (underscores already removed): `0x`, `0o`, `0b` prefixes
/// and a leading `0` for octal; no sign.
fn go_parse_uint(s: &str) -> Result<u64, GoParseError> {
    if s.is_empty() {
        return Err(GoParseError::Syntax);
    }
    let b = s.as_bytes();
    let (radix, digits) =
        if b[0] == b'0' && b.len() >= 3 && matches!(b[1] | 0x20, b'b' | b'o' | b'x') {
            let radix = match b[1] | 0x20 {
                b'b' => 2,
                b'o' => 8,
                _ => 16,
            };
            (radix, &s[2..])
        } else if b[0] == b'0' {
            (8, &s[1..])
        } else {
            (10, s)
        };
    let mut n: u64 = 0;
    for c in digits.chars() {
        let d = c.to_digit(radix).ok_or(GoParseError::Syntax)?;
        n = n
            .checked_mul(u64::from(radix))
            .and_then(|n| n.checked_add(u64::from(d)))
            .ok_or(GoParseError::Range)?;
    }
    Ok(n)
}

/// Go's `strconv.ParseInt(s, 0, 64)`: an optional sign, then [`go_parse_uint`].
fn go_parse_int(s: &str) -> Result<i64, GoParseError> {
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let un = go_parse_uint(rest)?;
    const CUTOFF: u64 = 1 << 63;
    if !neg && un >= CUTOFF || neg && un > CUTOFF {
        return Err(GoParseError::Range);
    }
    Ok(if neg {
        (un as i64).wrapping_neg()
    } else {
        un as i64
    })
}

/// Go's `strconv.ParseFloat` of a decimal literal: out of range (±Inf) is an error.
fn go_parse_float(s: &str) -> Option<f64> {
    let f: f64 = s.parse().ok()?;
    f.is_finite().then_some(f)
}

/// Go's `strconv.ParseFloat` of a text starting with `.` (`.5`, `.5e3`, `.5_0`).
fn go_parse_float_dot(s: &str) -> Option<f64> {
    // Underscores only between digits, as Go's `underscoreOK`.
    let b = s.as_bytes();
    for (i, c) in b.iter().enumerate() {
        if *c == b'_' {
            let digit = |j: Option<&u8>| j.is_some_and(u8::is_ascii_digit);
            if !(i > 0 && digit(b.get(i - 1)) && digit(b.get(i + 1))) {
                return None;
            }
        }
    }
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    if !yaml_style_float(&plain) {
        return None;
    }
    go_parse_float(&plain)
}

/// A resolved scalar as `encoding/json` writes it.
pub(super) fn to_json(scalar: Scalar) -> Result<Value, String> {
    Ok(match scalar {
        Scalar::Null => Value::Null,
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::Number(i.into()),
        Scalar::Uint(u) => Value::Number(u.into()),
        Scalar::Float(f) => float_to_json(f)?,
        Scalar::Str(s) => Value::String(s),
    })
}

/// `encoding/json` writes a float without a fraction as an integer (`1e3` → `1000`); NaN and
/// infinities it refuses ("json: unsupported value").
fn float_to_json(f: f64) -> Result<Value, String> {
    if !f.is_finite() {
        return Err(format!(
            "`{}` cannot be carried in JSON: Kubernetes' YAML reader (sigs.k8s.io/yaml) refuses it too",
            go_format_float_key(f)
        ));
    }
    if f.fract() == 0.0 && f.abs() < 1e21 {
        if f >= i64::MIN as f64 && f < i64::MAX as f64 {
            return Ok(Value::Number((f as i64).into()));
        }
        if f >= 0.0 && f < u64::MAX as f64 {
            return Ok(Value::Number((f as u64).into()));
        }
    }
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| format!("`{f}` cannot be carried in JSON"))
}

/// A map key as `sigs.k8s.io/yaml` converts it to a JSON object key.
pub(super) fn key_string(scalar: &Scalar) -> Result<String, String> {
    match scalar {
        Scalar::Str(s) => Ok(s.clone()),
        Scalar::Int(i) => Ok(i.to_string()),
        Scalar::Bool(b) => Ok(b.to_string()),
        Scalar::Float(f) => Ok(go_format_float_key(*f)),
        Scalar::Uint(u) => Err(format!(
            "map key {u} is an unsigned 64-bit integer, which Kubernetes' YAML reader (sigs.k8s.io/yaml) refuses as a key"
        )),
        Scalar::Null => Err(
            "a null map key (`~`, `null` or empty): Kubernetes' YAML reader (sigs.k8s.io/yaml) refuses it; quote it"
                .to_string(),
        ),
    }
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 32)`, with `.inf`/`.nan` spelled as YAML does.
pub(super) fn go_format_float_key(f: f64) -> String {
    if f.is_nan() {
        return ".nan".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.to_string();
    }
    let single = f as f32;
    // Rust's `{:e}` gives the shortest digits that round-trip, as Go's precision -1 does.
    let e = format!("{single:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if neg { "-" } else { "" };
    if single == 0.0 {
        return format!("{sign}0");
    }
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    // Fixed notation with exactly the significant digits.
    let point = exp + 1; // digits before the decimal point
    let text = if point <= 0 {
        format!("0.{}{}", "0".repeat((-point) as usize), digits)
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{text}")
}
