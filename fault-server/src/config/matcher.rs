//! `match:` — when a rule applies: method, path, headers, a time window, the Nth request, hit or
//! attempt, a probability, a gRPC method; the value types that read themselves (paths,
//! probabilities; counts are `crate::counts`, shared with the TCP proxies) and their bounds.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use yaml_config::Dur;

use crate::counts::{CountSpec, Counts};

/// The conditions of a rule; all given conditions must hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// HTTP method(s), case-insensitive.
    #[serde(default)]
    pub method: Option<OneOrMany<String>>,
    /// Exact path, or a glob: `*` within a segment, `**` across segments.
    #[serde(default)]
    pub path: Option<PathPattern>,
    /// Path prefix.
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// Headers that must have exactly these values (names case-insensitive).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers that must be present, whatever their value.
    #[serde(default)]
    pub headers_present: Vec<String>,
    /// Only from this long after the schedule was installed.
    #[serde(default)]
    pub from: Option<Dur>,
    /// Only until this long after the schedule was installed.
    #[serde(default)]
    pub until: Option<Dur>,
    /// The Nth request the server received (1-based), e.g. `3`, `"1-5"`, `"10-"`, `"every 4"`.
    #[serde(default)]
    pub requests: Option<Counts>,
    /// The Nth request that reached this rule and met its other conditions.
    #[serde(default)]
    pub hits: Option<Counts>,
    /// The Nth attempt of the same Idempotency-Key (requests without a key never match).
    #[serde(default)]
    pub attempts: Option<Counts>,
    /// Chance that a request meeting every other condition matches, in [0, 1].
    #[serde(default)]
    pub probability: Option<Probability>,
    /// Only gRPC calls of this method, `pkg.Service/Method`, or a glob of it (`pkg.Service/*`,
    /// `**` for every gRPC call); a request that is not a gRPC call never matches.
    #[serde(default)]
    pub grpc_method: Option<GrpcMethodPattern>,
    /// Only the Nth attempt of a gRPC call, as the call counts them: 1 + its
    /// `grpc-previous-rpc-attempts` (1 when it carries none). A request that is not a gRPC call
    /// never matches.
    #[serde(default)]
    pub grpc_attempts: Option<Counts>,
}

/// A gRPC method name, `pkg.Service/Method`, or a glob of one: `*` within the service or the
/// method name, `**` across both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcMethodPattern(pub String);

impl JsonSchema for GrpcMethodPattern {
    fn schema_name() -> Cow<'static, str> {
        "GrpcMethodPattern".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A gRPC method, `pkg.Service/Method`, or a glob of one: `*` within the service or the method name, `**` across both.",
            "type": "string",
            "minLength": 1
        })
    }
}

impl<'de> Deserialize<'de> for GrpcMethodPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(GrpcMethodPattern(s.trim_start_matches('/').to_string()))
    }
}

/// A probability in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probability(pub f64);

impl JsonSchema for Probability {
    fn schema_name() -> Cow<'static, str> {
        "Probability".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A probability, from 0 to 1.",
            "type": "number",
            "minimum": 0,
            "maximum": 1
        })
    }
}

impl<'de> Deserialize<'de> for Probability {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        f64::deserialize(d).map(Probability)
    }
}

/// A single value or a list of values.
#[derive(Debug, Clone, PartialEq)]
pub struct OneOrMany<T>(pub Vec<T>);

impl JsonSchema for OneOrMany<String> {
    fn schema_name() -> Cow<'static, str> {
        "OneOrManyStrings".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A string or a list of strings.",
            "anyOf": [
                { "type": "string" },
                { "type": "array", "items": { "type": "string" } }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for OneOrMany<String> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OneOrMany<String>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(OneOrMany(vec![v.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<String>()? {
                    out.push(v);
                }
                Ok(OneOrMany(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A path pattern: exact, or a glob with `*` (within a segment) and `**` (any depth).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern(pub String);

/// A request's path never holds whitespace or control characters (the request line would not
/// parse), so a matcher holding one could never match.
pub(super) fn check_request_path(s: &str) -> Result<(), String> {
    match s.chars().find(|c| c.is_whitespace() || c.is_control()) {
        Some(c) => Err(format!(
            "path {s:?} holds {c:?}, which no request's path can hold, so it would never match; write it percent-encoded as requests carry it (%20 for a space)"
        )),
        None => Ok(()),
    }
}

/// A request path as a matcher may name it: from `/`, no whitespace or control character (see
/// [`check_request_path`]).
const REQUEST_PATH_PATTERN: &str = r"^/[^\s\u0000-\u001f\u007f-\u009f]*$";

impl JsonSchema for PathPattern {
    fn schema_name() -> Cow<'static, str> {
        "PathPattern".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An exact path, or a glob: `/orders/*` (one segment), `/api/**` (any depth). Percent-encoded as requests carry it.",
            "type": "string",
            "pattern": REQUEST_PATH_PATTERN
        })
    }
}

impl<'de> Deserialize<'de> for PathPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(PathPattern)
    }
}

/// The bounds of a matcher's values, each checked in one place: by `rule_bounds` on every rule a
/// file, the control API or the builder gives (and a count's while it is read).
pub(super) mod bounds {
    use super::CountSpec;

    /// A probability in [0, 1].
    pub(crate) fn probability(p: f64) -> Result<(), String> {
        if (0.0..=1.0).contains(&p) {
            Ok(())
        } else {
            Err(format!(
                "probability {p} is out of range (expected a number from 0 to 1)"
            ))
        }
    }

    /// A path pattern starts with `/`.
    pub(crate) fn path(p: &str) -> Result<(), String> {
        if p.starts_with('/') {
            Ok(())
        } else {
            Err(format!(
                "path {p:?} must start with '/' (e.g. \"/orders\" or \"/orders/*\")"
            ))
        }
    }

    /// A gRPC method pattern: `pkg.Service/Method` (a leading `/` allowed), globs allowed.
    pub(crate) fn grpc_method(p: &str) -> Result<(), String> {
        let name = p.strip_prefix('/').unwrap_or(p);
        let ok = name
            .split_once('/')
            .is_some_and(|(s, m)| !s.is_empty() && !m.is_empty() && !m.contains('/'))
            || name.contains("**");
        if !ok || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "gRPC method {p:?} is not `pkg.Service/Method` (globs: `pkg.Service/*`, `**` for every call)"
            ));
        }
        Ok(())
    }

    /// A list of counts is not empty.
    pub(crate) fn counts(specs: &[CountSpec]) -> Result<(), &'static str> {
        if specs.is_empty() {
            Err("an empty list of counts never matches")
        } else {
            Ok(())
        }
    }

    /// Counts start at 1, and a range's end is not before its start.
    pub(crate) fn count_spec(s: CountSpec) -> bool {
        s.is_valid()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::parse_count_spec;

    #[test]
    fn counts() {
        let c = Counts(vec![
            parse_count_spec("1-2").unwrap(),
            parse_count_spec("every 5").unwrap(),
        ]);
        assert!(c.contains(1) && c.contains(2) && !c.contains(3) && c.contains(10));
        assert!(Counts(vec![parse_count_spec("4-").unwrap()]).contains(1000));
        assert!(parse_count_spec("0").is_err());
        assert!(parse_count_spec("every 0").is_err());
    }
}
