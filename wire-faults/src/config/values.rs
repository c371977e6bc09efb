//! The values a matcher or an error is written with, each checked as it is read so that a
//! mistake is named with its line and column: globs, regular expressions, command names,
//! probabilities, counts and error messages.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

/// A glob: `*` any run of characters, `?` one, anything else literal. At most 1000 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(pub String);

impl JsonSchema for Pattern {
    fn schema_name() -> Cow<'static, str> {
        "WireGlob".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A glob: `*` any run of characters, `?` one, anything else literal.",
            "type": "string",
            "maxLength": 1000
        })
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() > 1000 {
            return Err(de::Error::custom(format!(
                "a pattern of {} bytes (at most 1000)",
                s.len()
            )));
        }
        Ok(Pattern(s))
    }
}

/// A regular expression over a statement's normalized text, compiled when the configuration
/// is read.
#[derive(Debug, Clone)]
pub struct SqlRegex(pub regex::Regex);

impl PartialEq for SqlRegex {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl JsonSchema for SqlRegex {
    fn schema_name() -> Cow<'static, str> {
        "SqlRegex".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A regular expression (Rust's `regex` syntax) over the statement's normalized text; `(?i)` makes it case-insensitive.",
            "type": "string",
            "maxLength": 1000
        })
    }
}

impl<'de> Deserialize<'de> for SqlRegex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() > 1000 {
            return Err(de::Error::custom(format!(
                "a regular expression of {} bytes (at most 1000)",
                s.len()
            )));
        }
        regex::RegexBuilder::new(&s)
            .size_limit(1 << 20)
            .build()
            .map(SqlRegex)
            .map_err(|e| de::Error::custom(format!("not a regular expression: {e}")))
    }
}

/// A name or a list of names (Redis commands), kept upper-case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names(pub Vec<String>);

impl JsonSchema for Names {
    fn schema_name() -> Cow<'static, str> {
        "RedisCommandNames".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A command name, or a list of them (case-insensitive).",
            "anyOf": [
                { "type": "string", "minLength": 1 },
                { "type": "array", "items": { "type": "string", "minLength": 1 }, "minItems": 1 }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        fn name<E: de::Error>(v: &str) -> Result<String, E> {
            let t = v.trim();
            if t.is_empty() || t.contains(char::is_whitespace) {
                return Err(E::custom(format!(
                    "{v:?} is not a command name (one word, e.g. GET)"
                )));
            }
            Ok(t.to_ascii_uppercase())
        }
        impl<'de> Visitor<'de> for V {
            type Value = Names;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a command name or a list of them")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Names, E> {
                Ok(Names(vec![name(v)?]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<String>()? {
                    out.push(name(&v)?);
                }
                if out.is_empty() {
                    return Err(de::Error::custom(
                        "an empty list of commands matches nothing",
                    ));
                }
                Ok(Names(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A probability in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probability(pub f64);

impl JsonSchema for Probability {
    fn schema_name() -> Cow<'static, str> {
        "WireProbability".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "number", "minimum": 0, "maximum": 1 })
    }
}

impl<'de> Deserialize<'de> for Probability {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let p = f64::deserialize(d)?;
        if !(0.0..=1.0).contains(&p) {
            return Err(de::Error::custom(format!(
                "a probability is between 0 and 1, not {p}"
            )));
        }
        Ok(Probability(p))
    }
}

/// 1-based counts: `3`, `"1-5"`, `"10-"`, `"every 4"`, or a list of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts(pub Vec<Count>);

/// One element of [`Counts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// From `first` to `last` (none: no end), both included.
    Range {
        /// The first, from 1.
        first: u64,
        /// The last, included.
        last: Option<u64>,
    },
    /// Every k-th: k, 2k, 3k, …
    Every(u64),
}

impl Counts {
    /// Whether `n` is one of them.
    pub fn contains(&self, n: u64) -> bool {
        self.0.iter().any(|c| match *c {
            Count::Range { first, last } => n >= first && last.is_none_or(|l| n <= l),
            Count::Every(k) => n > 0 && n.is_multiple_of(k),
        })
    }
}

fn count(s: &str) -> Result<Count, String> {
    let t = s.trim();
    let bad =
        || format!("{s:?} is not a count (3, \"1-5\", \"10-\" or \"every 4\"; counts start at 1)");
    let number = |x: &str| x.trim().parse::<u64>().ok().filter(|n| *n >= 1);
    let c = if let Some(k) = t.strip_prefix("every") {
        Count::Every(number(k).ok_or_else(bad)?)
    } else if let Some((a, b)) = t.split_once('-') {
        let first = number(a).ok_or_else(bad)?;
        let last = if b.trim().is_empty() {
            None
        } else {
            Some(number(b).ok_or_else(bad)?)
        };
        if last.is_some_and(|l| l < first) {
            return Err(format!("{s:?} ends before it starts"));
        }
        Count::Range { first, last }
    } else {
        let n = number(t).ok_or_else(bad)?;
        Count::Range {
            first: n,
            last: Some(n),
        }
    };
    Ok(c)
}

impl JsonSchema for Counts {
    fn schema_name() -> Cow<'static, str> {
        "WireCounts".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let one = json_schema!({
            "anyOf": [
                { "type": "integer", "minimum": 1 },
                { "type": "string", "pattern": "^\\s*(every\\s*0*[1-9][0-9]*|0*[1-9][0-9]*\\s*(-\\s*(0*[1-9][0-9]*)?)?)\\s*$" }
            ]
        });
        json_schema!({
            "description": "1-based counts: `3`, `\"1-5\"`, `\"10-\"`, `\"every 4\"`, or a list of them.",
            "anyOf": [one.clone(), { "type": "array", "items": one, "minItems": 1 }]
        })
    }
}

impl<'de> Deserialize<'de> for Counts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Counts;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a count such as 3, \"1-5\", \"10-\", \"every 4\", or a list of them")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Counts, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Counts, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Counts, E> {
                count(v).map(|c| Counts(vec![c])).map_err(E::custom)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Counts, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<StrOrNumberCount>()? {
                    out.push(count(&v.0).map_err(de::Error::custom)?);
                }
                if out.is_empty() {
                    return Err(de::Error::custom("an empty list of counts matches nothing"));
                }
                Ok(Counts(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// One count in a list, as text (a number is written as one).
struct StrOrNumberCount(String);

impl<'de> Deserialize<'de> for StrOrNumberCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StrOrNumberCount;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a count such as 3, \"1-5\", \"10-\" or \"every 4\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StrOrNumberCount, E> {
                Ok(StrOrNumberCount(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StrOrNumberCount, E> {
                Ok(StrOrNumberCount(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StrOrNumberCount, E> {
                Ok(StrOrNumberCount(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// An error message a fault sends: at most 1000 bytes, one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Message(pub(super) String);

impl JsonSchema for Message {
    fn schema_name() -> Cow<'static, str> {
        "WireErrorMessage".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An error message: one line, at most 1000 bytes.",
            "type": "string",
            "maxLength": 1000,
            "pattern": "^[^\\r\\n\\u0000]*$"
        })
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() > 1000 {
            return Err(de::Error::custom(format!(
                "a message of {} bytes (at most 1000)",
                s.len()
            )));
        }
        if s.contains(['\r', '\n', '\0']) {
            return Err(de::Error::custom(
                "a message is one line (no CR, LF or NUL: the protocols cannot carry them in an error)",
            ));
        }
        Ok(Message(s))
    }
}
