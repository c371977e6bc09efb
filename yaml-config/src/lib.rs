//! YAML configuration loading whose errors name the file, the line, the column and the field.
//!
//! Why a crate of its own: the fault server's config, a scenario file, a checks file and a
//! tolerances file are all YAML written by hand, and a typo in any of them must be answered the
//! same way — one line that says where and what was expected — whichever binary reads it.
//!
//! - [`from_yaml_str`] deserializes any `serde` type and tracks the field path
//!   (`rules[2].fault.status.code`) beside libyaml's line and column.
//! - [`ConfigError::at`] builds the error for a value that parsed but makes no sense (a duplicate
//!   id, a bound exceeded); [`locate`] finds the line and column of that field in the text, so
//!   errors found after parsing carry a position too.
//! - [`check_shape`] refuses, before parsing, text nested deeper or larger than any configuration
//!   needs: libyaml reads a whole document into events before serde sees it, and a document of
//!   100,000 nested brackets keeps it busy for seconds.
//! - [`Dur`] and [`parse_duration`] read `"250ms"`, `"1.5s"`, `"2m"`, `"24h"` (a unit is
//!   required: a bare number other than 0 is refused, as it could mean ms or s); [`Size`] reads `65536` or `"64KiB"`. Their JSON Schemas ([`DURATION_PATTERN`],
//!   [`SIZE_PATTERN`]) describe the same text, so an editor flags what the loader would refuse.
//! - [`json_schema`] writes a config type's JSON Schema the way editors read it.

#![warn(missing_docs)]

use std::fmt;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// Deepest nesting of collections accepted (serde_norway stops at 128 as well).
pub const MAX_NESTING: usize = 128;
/// Longest duration accepted anywhere in a configuration.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// Largest configuration text accepted, in bytes.
pub const MAX_TEXT: usize = 16 * 1024 * 1024;
/// Widest indentation accepted, in columns.
pub const MAX_INDENT: usize = 1024;

/// A configuration that could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The YAML is malformed, a field is wrong, or a value is out of its bounds.
    #[error("{}", render_invalid(.origin, .line, .column, .field, .message))]
    Invalid {
        /// The file, or a description of where the text came from.
        origin: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// 1-based column, when known.
        column: Option<usize>,
        /// Path of the offending field, e.g. `rules[2].fault.status.code`.
        field: Option<String>,
        /// What was wrong and what was expected.
        message: String,
    },
}

impl ConfigError {
    /// An invalid value at `field` of the text named `origin`, without a position yet (see
    /// [`ConfigError::located`]).
    pub fn at(origin: &str, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let field = field.into();
        ConfigError::Invalid {
            origin: origin.to_string(),
            line: None,
            column: None,
            field: (!field.is_empty()).then_some(field),
            message: message.into(),
        }
    }

    /// The same error for a document embedded at `prefix` of another (a scenario's `server`): its
    /// field path starts with `prefix`, so [`ConfigError::located`] finds it in the outer text.
    pub fn within(self, prefix: &str) -> ConfigError {
        match self {
            ConfigError::Invalid {
                origin,
                line,
                column,
                field,
                message,
            } => ConfigError::Invalid {
                origin,
                line,
                column,
                field: Some(match field {
                    Some(f) if f.starts_with('[') => format!("{prefix}{f}"),
                    Some(f) => format!("{prefix}.{f}"),
                    None => prefix.to_string(),
                }),
                message,
            },
            other => other,
        }
    }

    /// The same error with the line and column of its field in `text`, when it had none; a field
    /// that is missing from the text is placed at its nearest enclosing one.
    pub fn located(self, text: &str) -> ConfigError {
        match self {
            ConfigError::Invalid {
                origin,
                line: None,
                column,
                field: Some(field),
                message,
            } => {
                let mut at = field.as_str();
                let pos = loop {
                    if let Some(p) = locate(text, at) {
                        break Some(p);
                    }
                    match at.rfind(['.', '[']) {
                        Some(i) if i > 0 => at = &at[..i],
                        _ => break None,
                    }
                };
                ConfigError::Invalid {
                    origin,
                    line: pos.map(|p| p.0),
                    column: pos.map(|p| p.1).or(column),
                    field: Some(field),
                    message,
                }
            }
            other => other,
        }
    }
}

fn render_invalid(
    origin: &str,
    line: &Option<usize>,
    column: &Option<usize>,
    field: &Option<String>,
    message: &str,
) -> String {
    let mut s = origin.to_string();
    if let Some(l) = line {
        s.push_str(&format!(":{l}"));
        if let Some(c) = column {
            s.push_str(&format!(":{c}"));
        }
    }
    s.push_str(": ");
    if let Some(f) = field {
        s.push_str(&format!("at `{f}`: "));
    }
    s.push_str(message);
    s
}

/// Deserializes YAML text into `T`, tracking the field path; `origin` names the text in errors.
/// An empty document means "all defaults".
pub fn from_yaml_str<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &str,
) -> Result<T, ConfigError> {
    check_shape(text, origin)?;
    let text = if text.trim().is_empty() { "{}" } else { text };
    let de = serde_norway::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let loc = inner.location();
        let mut message = inner.to_string();
        // serde_norway appends " at line L column C"; the location is reported separately.
        if let Some(i) = message.find(" at line ") {
            message.truncate(i);
        }
        // It also prefixes its own path ("rules[0]: …"); the full path is reported separately.
        if let Some((head, rest)) = message.split_once(": ") {
            if !head.is_empty() && !head.contains(char::is_whitespace) {
                message = rest.to_string();
            }
        }
        ConfigError::Invalid {
            origin: origin.to_string(),
            line: loc.as_ref().map(|l| l.line()),
            column: loc.as_ref().map(|l| l.column()),
            field: (field != "." && !field.is_empty()).then_some(field),
            message,
        }
    })
}

/// Refuses text larger than [`MAX_TEXT`], nested deeper than [`MAX_NESTING`] (flow brackets and
/// block sequence dashes on one line) or indented wider than [`MAX_INDENT`] — cheaply, before
/// libyaml reads it.
pub fn check_shape(text: &str, origin: &str) -> Result<(), ConfigError> {
    let fail = |line: usize, column: usize, message: String| ConfigError::Invalid {
        origin: origin.to_string(),
        line: Some(line),
        column: Some(column),
        field: None,
        message,
    };
    if text.len() > MAX_TEXT {
        return Err(fail(
            1,
            1,
            format!(
                "the document is {} bytes; at most {MAX_TEXT} are accepted",
                text.len()
            ),
        ));
    }
    let mut flow = 0usize;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        if indent > MAX_INDENT {
            return Err(fail(
                n + 1,
                indent + 1,
                format!("indented {indent} columns; at most {MAX_INDENT} are accepted"),
            ));
        }
        // Block sequences opened on one line: `- - - x`.
        let mut rest = &line[indent..];
        let mut dashes = 0usize;
        while let Some(r) = rest.strip_prefix("- ") {
            dashes += 1;
            rest = r.trim_start_matches(' ');
        }
        let mut quote: Option<char> = None;
        let mut prev = ' ';
        for (col, c) in line.char_indices() {
            match quote {
                Some(q) => {
                    if c == q {
                        quote = None;
                    }
                }
                None => match c {
                    '#' if prev == ' ' || prev == '\t' || col == 0 => break,
                    '"' | '\'' if flow > 0 || matches!(prev, ' ' | ':' | '[' | '{' | ',') => {
                        quote = Some(c)
                    }
                    '[' | '{' => flow += 1,
                    ']' | '}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            if flow + dashes > MAX_NESTING {
                return Err(fail(
                    n + 1,
                    col + 1,
                    format!("nested more than {MAX_NESTING} levels deep"),
                ));
            }
            prev = c;
        }
        if dashes > MAX_NESTING {
            return Err(fail(
                n + 1,
                indent + 1,
                format!("nested more than {MAX_NESTING} levels deep"),
            ));
        }
    }
    Ok(())
}

/// The 1-based line and column of the value at `path` (`phases[0].clients.concurrency`, as
/// [`ConfigError::Invalid::field`] spells it) in `text`, when the path exists there.
pub fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let segments = parse_path(path)?;
    if check_shape(text, "").is_err() {
        return None;
    }
    let de = serde_norway::Deserializer::from_str(text);
    match (Walk { path: &segments }).deserialize(de) {
        Ok(()) => None,
        Err(e) if e.to_string().contains(FOUND) => {
            e.location().map(|l| inside(text, l.line(), l.column()))
        }
        Err(_) => None,
    }
}

/// `line` and `column` kept inside `text`: the parser places an empty document (blank text, or
/// only spaces) at the start of a line after the last one, where no editor can go; that is the
/// end of the text's last line.
fn inside(text: &str, line: usize, column: usize) -> (usize, usize) {
    let width = |l: &str| l.chars().count();
    let lines = text.split('\n').count();
    if line > lines {
        let last = text.rsplit('\n').next().map_or(0, width);
        return (lines, last + 1);
    }
    let line = line.max(1);
    let here = text.split('\n').nth(line - 1).map_or(0, width);
    (line, column.clamp(1, here + 1))
}

const FOUND: &str = "\u{0}found";

#[derive(Debug, PartialEq)]
enum Segment {
    Key(String),
    Index(usize),
}

fn parse_path(path: &str) -> Option<Vec<Segment>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            out.push(Segment::Key(name.to_string()));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            out.push(Segment::Index(r[..end].parse().ok()?));
            rest = &r[end + 1..];
        }
    }
    Some(out)
}

/// Walks a document along a path and stops with a [`FOUND`] error at its end, which serde_norway
/// marks with the position of the value it was reading.
struct Walk<'a> {
    path: &'a [Segment],
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        while let Some(key) = map.next_key::<KeyText>()? {
            let hit = match first {
                Segment::Key(k) => key.0 == *k,
                Segment::Index(i) => key.0 == i.to_string(),
            };
            if hit {
                return map.next_value_seed(Walk { path: rest });
            }
            map.next_value::<de::IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        let Segment::Index(target) = first else {
            return Ok(());
        };
        for _ in 0..*target {
            if seq.next_element::<de::IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Walk { path: rest }).map(|_| ())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.leaf()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.leaf()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Walk<'_> {
    fn leaf<E: de::Error>(self) -> Result<(), E> {
        if self.path.is_empty() {
            Err(E::custom(FOUND))
        } else {
            Ok(())
        }
    }
}

/// A mapping key of any scalar type, as text.
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<KeyText, E> {
                Ok(KeyText(String::new()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration: `"250ms"`, `"1.5s"`, `"2m"`, `"24h"`, or `0`. A bare number other than 0 is
/// refused: `backoff: { base: 200 }` could mean 200 ms or 200 s, and the wrong guess hangs a run
/// or hides a timeout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

/// The message for a duration written as a bare number.
pub fn unitless_duration(v: impl fmt::Display) -> String {
    format!("`{v}`: a duration needs a unit, e.g. `{v}ms` or `{v}s`")
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration with its unit, such as \"250ms\", \"1.5s\" or \"2m\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                match v {
                    0 => Ok(Dur(Duration::ZERO)),
                    v => Err(E::custom(unitless_duration(v))),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom("a duration cannot be negative")),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                if v == 0.0 {
                    Ok(Dur(Duration::ZERO))
                } else {
                    Err(E::custom(unitless_duration(v)))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map_err(E::custom).and_then(bounded)
            }
        }
        d.deserialize_any(V)
    }
}

/// The JSON Schema of a config type, as an editor's YAML support reads it: draft-07 (the draft
/// `yaml-language-server` and most editors know best), the fields' doc comments as descriptions,
/// `title` on top. Both binaries' config files get theirs from here, so they read alike.
pub fn json_schema<T: schemars::JsonSchema>(title: &str) -> schemars::Schema {
    let mut schema = schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<T>();
    schema.insert("title".into(), title.into());
    schema
}

/// The text a duration string may hold, as a regular expression: `0`, a number with a fraction
/// and one of `us`, `ms`, `s`, `m`, `h`, or whole numbers each with a unit (`1h 30m`, `2days`).
/// The loader's bound (at most 366 days) is not a pattern; the schema's description says it.
pub const DURATION_PATTERN: &str = r"^\s*(0|\d*\.\d*\s*(us|µs|ms|s|m|h)|(\d+\s*(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)\s*)+)\s*$";

/// The text a size string may hold, as a regular expression: a number and an optional unit.
pub const SIZE_PATTERN: &str = r"^\s*(\d+\.?\d*|\.\d+)\s*(B|KiB|MiB|GiB|KB|kB|MB|GB)?\s*$";

impl schemars::JsonSchema for Dur {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A duration with its unit: \"250ms\", \"1.5s\", \"2m\", \"1h 30m\", \"24h\" (or 0); at most 366 days. A bare number is refused: it could mean ms or s.",
            "anyOf": [
                { "type": "string", "pattern": DURATION_PATTERN },
                { "type": "integer", "const": 0 }
            ]
        })
    }
}

impl schemars::JsonSchema for Size {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A size in bytes: a number, or \"64KiB\", \"10MiB\", \"1GiB\" (KB, MB, GB: powers of 1000).",
            "anyOf": [
                { "type": "string", "pattern": SIZE_PATTERN },
                { "type": "integer", "minimum": 0 }
            ]
        })
    }
}

/// A duration within [`MAX_DURATION`].
fn bounded<E: de::Error>(d: Duration) -> Result<Dur, E> {
    if d > MAX_DURATION {
        return Err(E::custom(format!(
            "{}s is longer than the longest duration accepted, 366 days",
            d.as_secs()
        )));
    }
    Ok(Dur(d))
}

impl serde::Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", self.0.as_secs_f64() * 1000.0))
    }
}

/// A size in bytes: a number, or `"64KiB"`, `"10MiB"`, `"1GiB"` (also `KB`, `MB`, `GB` as powers
/// of 1000).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as 65536, \"64KiB\", \"10MiB\" or \"1GiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Parses `"512"`, `"64KiB"`, `"10MiB"`, `"1GiB"`, `"10MB"`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?} (expected e.g. 65536, \"64KiB\", \"10MiB\")"))?;
    let mult: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        other => {
            return Err(format!(
                "unknown unit {other:?} in size {s:?} (use B, KiB, MiB, GiB, KB, MB or GB)"
            ))
        }
    };
    let bytes = n * mult;
    if !(bytes.is_finite() && bytes >= 0.0 && bytes <= u64::MAX as f64) {
        return Err(format!("size {s:?} is out of range"));
    }
    Ok(bytes as u64)
}

/// Parses `"250ms"`, `"1.5s"`, `"2m"`, `"1h30m"`, `"0"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.parse::<f64>().is_ok() {
        return Err(unitless_duration(t));
    }
    // humantime does not take fractions ("1.5s"); handle a single fractional unit here.
    if let Some((num, unit)) = split_fraction(t) {
        let scale = match unit {
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "us" | "µs" => 1e-6,
            _ => {
                return Err(format!(
                    "unknown unit in duration {s:?} (use us, ms, s, m or h)"
                ))
            }
        };
        return Duration::try_from_secs_f64(num * scale)
            .map_err(|_| format!("invalid duration {s:?}"));
    }
    humantime::parse_duration(t).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => format!(
            "{s} is longer than the longest duration accepted, {} days",
            MAX_DURATION.as_secs() / 86_400
        ),
        e => format!("invalid duration {s:?}: {e} (expected e.g. \"250ms\", \"1.5s\", \"2m\")"),
    })
}

fn split_fraction(t: &str) -> Option<(f64, &str)> {
    let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = t.split_at(end);
    if !num.contains('.') {
        return None;
    }
    num.parse::<f64>().ok().map(|n| (n, unit.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        name: String,
        #[serde(default)]
        items: Vec<Item>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        size: u32,
        #[serde(default)]
        every: Option<Dur>,
    }

    #[test]
    fn errors_name_origin_line_column_and_field() {
        let err = from_yaml_str::<Doc>("name: a\nitems:\n  - size: ten\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("f.yaml:3:"), "{err}");
        assert!(err.contains("at `items[0].size`"), "{err}");
        let err = from_yaml_str::<Doc>("name: a\nbogus: 1\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("f.yaml:2:1:"), "{err}");
        assert!(err.contains("unknown field `bogus`"), "{err}");
    }

    #[test]
    fn locate_finds_the_value_at_a_path() {
        let text = "name: a\nitems:\n  - size: 1\n  - { size: 2, every: 5s }\n";
        assert_eq!(locate(text, "name"), Some((1, 7)));
        assert_eq!(locate(text, "items[0].size"), Some((3, 11)));
        assert_eq!(locate(text, "items[1].every"), Some((4, 23)));
        assert_eq!(locate(text, "items[1]"), Some((4, 5)));
        assert_eq!(locate(text, "items[7].size"), None);
        assert_eq!(locate(text, "nothing"), None);
        // An empty document is found at the end of its last line, not on a line after it.
        assert_eq!(locate(" ", ""), Some((1, 2)));
        assert_eq!(locate("", ""), Some((1, 1)));
    }

    #[test]
    fn an_error_found_after_parsing_gets_its_position() {
        let text = "name: a\nitems:\n  - size: 0\n";
        let err = ConfigError::at("f.yaml", "items[0].size", "must be at least 1").located(text);
        assert_eq!(
            err.to_string(),
            "f.yaml:3:11: at `items[0].size`: must be at least 1"
        );
    }

    #[test]
    fn an_error_of_an_embedded_document_is_placed_in_the_outer_one() {
        let text = "name: a\ninner:\n  items:\n    - size: 0\n";
        let err = ConfigError::at("f.yaml", "items[0].size", "must be at least 1")
            .within("inner")
            .located(text);
        assert_eq!(
            err.to_string(),
            "f.yaml:4:13: at `inner.items[0].size`: must be at least 1"
        );
    }

    #[test]
    fn a_missing_field_is_placed_at_its_enclosing_one() {
        let text = "name: a\nitems:\n  - { size: 1 }\n";
        let err = ConfigError::at("f", "items[0].every", "give `every`").located(text);
        assert_eq!(err.to_string(), "f:3:5: at `items[0].every`: give `every`");
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let deep = format!("name: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        let started = std::time::Instant::now();
        let err = from_yaml_str::<Doc>(&deep, "deep").unwrap_err().to_string();
        assert!(err.contains("nested more than 128 levels"), "{err}");
        assert!(err.starts_with("deep:1:"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let dashes = format!("items:\n{}x\n", "- ".repeat(200));
        let err = from_yaml_str::<Doc>(&dashes, "d").unwrap_err().to_string();
        assert!(err.contains("nested more than 128"), "{err}");
        // Brackets inside quotes and comments are text, not nesting.
        let quoted = format!("name: \"{}\" # {}\n", "[".repeat(500), "{".repeat(500));
        assert!(from_yaml_str::<Doc>(&quoted, "q").is_ok());
    }

    #[test]
    fn a_duration_longer_than_a_year_is_refused_with_its_position() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct T {
            d: Dur,
        }
        let err = from_yaml_str::<T>("d: 400d\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t:1:4:") && err.contains("366 days"),
            "{err}"
        );
        assert!(from_yaml_str::<T>("d: 365d\n", "t").is_ok());
    }

    #[test]
    fn a_duration_without_its_unit_is_refused_with_its_position() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct T {
            d: Dur,
        }
        for text in ["d: 200\n", "d: 1.5\n", "d: \"200\"\n"] {
            let err = from_yaml_str::<T>(text, "t").unwrap_err().to_string();
            assert!(
                err.starts_with("t:1:4:") && err.contains("a duration needs a unit, e.g. `"),
                "{text}: {err}"
            );
        }
        assert!(from_yaml_str::<T>("d: 0\n", "t").is_ok());
        assert!(from_yaml_str::<T>("d: 200ms\n", "t").is_ok());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("10MiB").unwrap(), 10 << 20);
        assert_eq!(parse_size("1.5GB").unwrap(), 1_500_000_000);
        assert!(parse_size("ten").is_err());
        assert!(parse_size("5 parsecs").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86400));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("soon").is_err());
        assert_eq!(
            parse_duration("200"),
            Err("`200`: a duration needs a unit, e.g. `200ms` or `200s`".to_string())
        );
        assert!(parse_duration("0.5").is_err());
        assert!(parse_duration("1.5parsecs").is_err());
    }
}
