//! Scalars exactly as sops's Go code sees them, because the MAC hashes their Go text forms:
//! YAML scalars resolve as go.yaml.in/yaml/v3 `resolve()` does for a `Node.Decode` into
//! `interface{}` (YAML 1.2 booleans, base-prefixed and legacy `0777` octal ints, `_` separators,
//! timestamps as `time.Time`); values are hashed as sops's `ToBytes` formats them (`strconv.Itoa`,
//! `FormatFloat(f, 'f', -1, 64)`, `True`/`False`, `time.MarshalText`).

use base64::Engine;
use saphyr_parser::Tag;

use super::tree::Node;
use crate::source::go_yaml::yaml_style_float;

/// The tag of a YAML scalar, as far as resolution cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TagKind {
    /// No tag, or the non-specific `!`.
    None,
    Str,
    Binary,
    Int,
    Float,
    Bool,
    Null,
    Timestamp,
    /// Any other tag: yaml.v3 does not resolve it and keeps the text as a string.
    Other,
}

impl TagKind {
    pub(crate) fn from_tag(tag: Option<&Tag>) -> TagKind {
        let Some(tag) = tag else {
            return TagKind::None;
        };
        if !tag.is_yaml_core_schema() {
            return if tag.handle == "!" && tag.suffix.is_empty() {
                TagKind::None
            } else {
                TagKind::Other
            };
        }
        match tag.suffix.as_str() {
            "str" => TagKind::Str,
            "binary" => TagKind::Binary,
            "int" => TagKind::Int,
            "float" => TagKind::Float,
            "bool" => TagKind::Bool,
            "null" => TagKind::Null,
            "timestamp" => TagKind::Timestamp,
            _ => TagKind::Other,
        }
    }
}

/// A YAML scalar sops could not decode. Never quotes the text (it may be a secret).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ScalarError {
    #[error("a !!binary value that is not valid base64")]
    BinaryNotBase64,
    #[error("a !!binary value that is not UTF-8 text")]
    BinaryNotUtf8,
    #[error("a scalar that cannot be decoded as its tag {tag:?}")]
    TagMismatch { tag: TagKind },
    #[error("an integer beyond the 64-bit signed range")]
    IntegerTooLarge,
}

/// Resolve one YAML scalar. Errors never quote the text (it may be a secret).
pub(crate) fn resolve_yaml(text: &str, plain: bool, tag: TagKind) -> Result<Node, ScalarError> {
    // yaml.v3 `indicatedString`: `!!str`, or a quoted/block scalar without a specific tag.
    if tag == TagKind::Str || (!plain && tag == TagKind::None) || tag == TagKind::Other {
        return Ok(Node::Str(text.to_string()));
    }
    if tag == TagKind::Binary {
        let compact: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map_err(|_| ScalarError::BinaryNotBase64)?;
        return String::from_utf8(bytes)
            .map(Node::Str)
            .map_err(|_| ScalarError::BinaryNotUtf8);
    }
    let node = resolve_plain(text, matches!(tag, TagKind::None | TagKind::Timestamp))?;
    let ok = match (tag, &node) {
        (TagKind::None, _) => return Ok(node),
        (TagKind::Int, Node::Int(_))
        | (TagKind::Float, Node::Float(_))
        | (TagKind::Bool, Node::Bool(_))
        | (TagKind::Null, Node::Null)
        | (TagKind::Timestamp, Node::Time(_)) => true,
        // yaml.v3 turns an int tagged `!!float` into a float.
        (TagKind::Float, Node::Int(i)) => return Ok(Node::Float(*i as f64)),
        _ => false,
    };
    if ok {
        Ok(node)
    } else {
        Err(ScalarError::TagMismatch { tag })
    }
}

/// yaml.v3 `resolve("", in)` for a plain scalar.
fn resolve_plain(input: &str, allow_timestamp: bool) -> Result<Node, ScalarError> {
    let hint = match input.as_bytes().first() {
        None => b'N',
        Some(b'+' | b'-') => b'S',
        Some(b'0'..=b'9') => b'D',
        Some(b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' | b'~') => b'M',
        Some(b'.') => b'.',
        Some(_) => return Ok(Node::Str(input.to_string())),
    };
    match input {
        "true" | "True" | "TRUE" => return Ok(Node::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Node::Bool(false)),
        "" | "~" | "null" | "Null" | "NULL" => return Ok(Node::Null),
        ".nan" | ".NaN" | ".NAN" => return Ok(Node::Float(f64::NAN)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Ok(Node::Float(f64::INFINITY))
        }
        "-.inf" | "-.Inf" | "-.INF" => return Ok(Node::Float(f64::NEG_INFINITY)),
        _ => {}
    }
    match hint {
        b'.' => {
            if let Some(f) = go_parse_float(input) {
                return Ok(Node::Float(f));
            }
        }
        b'D' | b'S' => {
            if allow_timestamp {
                if let Some(t) = yaml_timestamp(input) {
                    return Ok(Node::Time(t));
                }
            }
            let plain = input.replace('_', "");
            match go_parse_int(&plain) {
                Some(IntParse::Fits(i)) => return Ok(Node::Int(i)),
                // A uint64 beyond i64: sops cannot walk such a value (Go type uint64).
                Some(IntParse::Unsigned) => return Err(ScalarError::IntegerTooLarge),
                None => {}
            }
            if yaml_style_float(&plain) {
                if let Some(f) = go_parse_float(&plain) {
                    return Ok(Node::Float(f));
                }
            }
        }
        _ => {}
    }
    Ok(Node::Str(input.to_string()))
}

enum IntParse {
    Fits(i64),
    Unsigned,
}

/// `strconv.ParseInt(s, 0, 64)`, falling back to `ParseUint` to tell a too-large value apart.
fn go_parse_int(s: &str) -> Option<IntParse> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) = if let Some(d) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        (16, d)
    } else if let Some(d) = body.strip_prefix("0b").or(body.strip_prefix("0B")) {
        (2, d)
    } else if let Some(d) = body.strip_prefix("0o").or(body.strip_prefix("0O")) {
        (8, d)
    } else if body.len() > 1 && body.starts_with('0') {
        (8, &body[1..])
    } else {
        (10, body)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if neg {
        if magnitude <= i64::MAX as u64 + 1 {
            Some(IntParse::Fits((magnitude as i64).wrapping_neg()))
        } else {
            None
        }
    } else if let Ok(i) = i64::try_from(magnitude) {
        Some(IntParse::Fits(i))
    } else if s.starts_with('+') {
        None // ParseUint takes no sign
    } else {
        Some(IntParse::Unsigned)
    }
}

/// `strconv.ParseFloat(s, 64)` for decimal text: out of range (±Inf from finite text) is an error.
pub(crate) fn go_parse_float(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    let special = matches!(
        lower.trim_start_matches(['+', '-']),
        "inf" | "infinity" | "nan"
    );
    let f: f64 = s.parse().ok()?;
    (f.is_finite() || special).then_some(f)
}

/// `strconv.ParseBool`.
pub(crate) fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `strconv.FormatFloat(f, 'f', -1, 64)`: the shortest decimal that round-trips, never with an
/// exponent — which is what Rust's `Display` for `f64` prints too, except for the infinities.
pub(crate) fn go_format_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_string()
    } else if f == f64::INFINITY {
        "+Inf".to_string()
    } else if f == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        f.to_string()
    }
}

/// A YAML timestamp as yaml.v3 parses it (layouts `2006-1-2T15:4:5.999999999Z07:00`, the same
/// with `t`, `2006-1-2 15:4:5.999999999` in UTC, `2006-1-2`), returned as Go's
/// `time.Time.MarshalText` writes it (RFC 3339 with nanoseconds, trailing zeros trimmed).
pub(crate) fn yaml_timestamp(s: &str) -> Option<String> {
    let b = s.as_bytes();
    // Quick check of yaml.v3: four digits and a dash.
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return None;
    }
    let mut p = Cursor { b, i: 5 };
    let year: u32 = s[..4].parse().ok()?;
    let month = p.num(1, 2)?;
    p.lit(b'-')?;
    let day = p.num(1, 2)?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let date = format!("{year:04}-{month:02}-{day:02}");
    if p.done() {
        return Some(format!("{date}T00:00:00Z"));
    }
    let zoned = match p.peek()? {
        b'T' | b't' => true,
        b' ' => false,
        _ => return None,
    };
    p.i += 1;
    let hour = p.num(1, 2)?;
    p.lit(b':')?;
    let min = p.num(1, 2)?;
    p.lit(b':')?;
    let sec = p.num(1, 2)?;
    if hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    let mut nanos = 0u32;
    if matches!(p.peek(), Some(b'.' | b',')) && p.b.get(p.i + 1).is_some_and(u8::is_ascii_digit) {
        p.i += 1;
        let start = p.i;
        while p.peek().is_some_and(|c| c.is_ascii_digit()) {
            p.i += 1;
        }
        // Go keeps nine digits and drops the rest.
        let digits = &s[start..p.i.min(start + 9)];
        nanos = format!("{digits:0<9}").parse().ok()?;
    }
    let zone = if zoned {
        match p.peek()? {
            b'Z' => {
                p.i += 1;
                "Z".to_string()
            }
            sign @ (b'+' | b'-') => {
                p.i += 1;
                let hh = p.fixed2()?;
                p.lit(b':')?;
                let mm = p.fixed2()?;
                if hh > 24 || mm > 60 {
                    return None;
                }
                if hh == 0 && mm == 0 {
                    "Z".to_string() // Go prints a zero offset as Z
                } else {
                    format!("{}{hh:02}:{mm:02}", sign as char)
                }
            }
            _ => return None,
        }
    } else {
        "Z".to_string()
    };
    if !p.done() {
        return None;
    }
    let frac = if nanos == 0 {
        String::new()
    } else {
        format!(".{nanos:09}").trim_end_matches('0').to_string()
    };
    Some(format!("{date}T{hour:02}:{min:02}:{sec:02}{frac}{zone}"))
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn done(&self) -> bool {
        self.i == self.b.len()
    }
    fn lit(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }
    /// Between `min` and `max` digits (Go's non-padded layout fields read one or two).
    fn num(&mut self, min: usize, max: usize) -> Option<u32> {
        let start = self.i;
        while self.i - start < max && self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        if self.i - start < min {
            return None;
        }
        std::str::from_utf8(&self.b[start..self.i])
            .ok()?
            .parse()
            .ok()
    }
    fn fixed2(&mut self) -> Option<u32> {
        self.num(2, 2)
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Go's `t.Format(time.RFC3339)` of `time.Parse(time.RFC3339, s)`: how sops turns
/// `lastmodified` into the MAC's additional data (fractional seconds dropped, a zero offset
/// written `Z`).
pub(crate) fn rfc3339_seconds(s: &str) -> Option<String> {
    // RFC 3339: a date, a time and an offset (`Z` or numeric), nothing else.
    let pieces = k8s_openapi::jiff::fmt::temporal::Pieces::parse(s).ok()?;
    if pieces.time_zone_annotation().is_some() {
        return None;
    }
    // `Z`, `+00:00` and `-00:00` are all a zero offset, as for Go.
    let offset = pieces.offset()?.to_numeric_offset().seconds();
    let t = pieces.date().to_datetime(pieces.time()?);
    let zone = if offset == 0 {
        "Z".to_string()
    } else {
        let sign = if offset < 0 { '-' } else { '+' };
        let abs = offset.unsigned_abs();
        format!("{sign}{:02}:{:02}", abs / 3600, (abs % 3600) / 60)
    };
    Some(format!("{}{zone}", t.strftime("%Y-%m-%dT%H:%M:%S")))
}
