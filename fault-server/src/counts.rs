//! The schedule's count language: `3`, `"1-5"`, `"10-"`, `"every 4"`, or a list of them — the
//! Nth request, hit, attempt, or (for the TCP proxies) connection.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

/// A set of 1-based counts: `3`, `"1-5"`, `"10-"`, `"every 4"`, or a list of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts(pub Vec<CountSpec>);

/// One element of [`Counts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountSpec {
    /// From `lo` to `hi` inclusive; `hi` absent means no upper bound.
    Range {
        /// The first count, from 1.
        lo: u64,
        /// The last count, included; none for no end.
        hi: Option<u64>,
    },
    /// Every k-th: k, 2k, 3k, …
    Every(u64),
}

impl CountSpec {
    /// Counts start at 1, and a range's end is not before its start.
    pub fn is_valid(self) -> bool {
        match self {
            CountSpec::Range { lo, hi } => lo >= 1 && hi.is_none_or(|h| h >= lo),
            CountSpec::Every(k) => k >= 1,
        }
    }
}

impl Counts {
    /// Whether `n` is in the set.
    pub fn contains(&self, n: u64) -> bool {
        self.0.iter().any(|s| match *s {
            CountSpec::Range { lo, hi } => n >= lo && hi.is_none_or(|h| n <= h),
            CountSpec::Every(k) => n.is_multiple_of(k),
        })
    }
}

/// Parses one count spec.
pub fn parse_count_spec(s: &str) -> Result<CountSpec, String> {
    let t = s.trim();
    let bad = || {
        format!("invalid count {s:?} (expected e.g. 3, \"1-5\", \"10-\" or \"every 4\"; counts start at 1)")
    };
    let spec = if let Some(k) = t.strip_prefix("every") {
        CountSpec::Every(k.trim().parse().map_err(|_| bad())?)
    } else if let Some((a, b)) = t.split_once('-') {
        let lo: u64 = a.trim().parse().map_err(|_| bad())?;
        let hi = if b.trim().is_empty() {
            None
        } else {
            Some(b.trim().parse::<u64>().map_err(|_| bad())?)
        };
        CountSpec::Range { lo, hi }
    } else {
        let n: u64 = t.parse().map_err(|_| bad())?;
        CountSpec::Range { lo: n, hi: Some(n) }
    };
    if !spec.is_valid() {
        return Err(bad());
    }
    Ok(spec)
}

/// One count as text: `3`, `"1-5"`, `"10-"`, `"every 4"` (counts start at 1; the parser checks
/// that a range does not end before it starts).
const COUNT_PATTERN: &str = r"^\s*(every\s*[1-9][0-9]*|0*[1-9][0-9]*\s*(-\s*([0-9]+)?)?)\s*$";

impl JsonSchema for Counts {
    fn schema_name() -> Cow<'static, str> {
        "Counts".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let one = json_schema!({
            "anyOf": [
                { "type": "integer", "minimum": 1 },
                { "type": "string", "pattern": COUNT_PATTERN }
            ]
        });
        json_schema!({
            "description": "1-based counts: `3`, `\"1-5\"`, `\"10-\"`, `\"every 4\"`, or a list of them.",
            "anyOf": [
                one.clone(),
                { "type": "array", "items": one, "minItems": 1 }
            ]
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
                parse_count_spec(v)
                    .map(|s| Counts(vec![s]))
                    .map_err(E::custom)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Counts, A::Error> {
                let mut out = Vec::new();
                while let Some(one) = seq.next_element::<Counts>()? {
                    out.extend(one.0);
                }
                Ok(Counts(out))
            }
        }
        d.deserialize_any(V)
    }
}
