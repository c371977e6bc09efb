//! A `protocol: redis` proxy's settings: its bounds, its rules, the faults they answer with (a
//! RESP error, a delay, a dropped reply, a reset), and what is checked of them together.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use yaml_config::Size;

use super::fault::{Delay, FaultForm};
use super::validate::{check_bounds, check_ids, invalid, Invalid};
use super::values::{Counts, Message, Names, Pattern, Probability};
use super::OnViolation;

/// A `protocol: redis` proxy's settings: its bounds and its rules.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// The longest command read whole (replies are passed on as they come, whatever their
    /// size). Default 16MiB.
    pub max_message: Size,
    /// The longest key journaled. Default 256B.
    pub max_key: Size,
    /// Most commands tracked at once ahead of their replies (a pipeline). Default 10000.
    pub max_pipeline: u32,
    /// `close` (default) or `forward`: what happens to a connection whose bytes are not RESP,
    /// or break a bound.
    pub on_violation: OnViolation,
    /// The rules, in order; the first that matches a command decides its fault.
    pub rules: Vec<RedisRule>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            max_message: Size(16 << 20),
            max_key: Size(256),
            max_pipeline: 10_000,
            on_violation: OnViolation::Close,
            rules: Vec::new(),
        }
    }
}

/// One Redis rule.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisRule {
    /// Its name in the journal (`rule`); `rule-N` (1-based position) when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// When it applies; an absent matcher matches every command.
    #[serde(default, rename = "match")]
    pub matcher: RedisMatch,
    /// What happens to a matching command.
    pub fault: RedisFault,
}

/// The conditions of a Redis rule; all given conditions must hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisMatch {
    /// The command's name, or a list of names (case-insensitive): `GET`, `[SET, DEL]`.
    #[serde(default)]
    pub command: Option<Names>,
    /// The command's first key matches this glob (case-sensitive, as keys are): `*` any run of
    /// characters, `?` one. A command without a key never matches.
    #[serde(default)]
    pub key: Option<Pattern>,
    /// The Nth connection the proxy accepted (1-based).
    #[serde(default)]
    pub connections: Option<Counts>,
    /// The Nth command of its connection.
    #[serde(default)]
    pub commands: Option<Counts>,
    /// The Nth command that reached this rule and met its other conditions.
    #[serde(default)]
    pub hits: Option<Counts>,
    /// The chance that a command meeting every other condition matches, in [0, 1]: drawn from
    /// the seed, the rule, the command with its arguments, and how many times that command was
    /// seen.
    #[serde(default)]
    pub probability: Option<Probability>,
}

/// What a Redis rule does.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RedisFault {
    /// Answer with this error instead of forwarding the command: `error: LOADING`, or `{ code,
    /// message, to }` (`to: host:port` for MOVED and ASK).
    Error(RedisError),
    /// Hold the command before forwarding it, or hold its reply (`when: after`).
    Delay(Delay),
    /// Forward the command, let Redis reply, and close the client's connection before the
    /// reply reaches it.
    Drop,
    /// Close the connection before the command is forwarded.
    Reset,
}

/// A RESP error a fault answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisError {
    /// The error's code, its first word: `LOADING`, `BUSY`, `READONLY`, `TRYAGAIN`, `MOVED`,
    /// `ASK`, `OOM`, or another (then with a `message`).
    pub code: String,
    /// The text after the code; Redis's own for the codes above when absent.
    pub message: Option<String>,
    /// Where the slot is served, `host:port`: MOVED and ASK say it.
    pub to: Option<String>,
}

impl RedisError {
    /// The codes whose message Redis's own is, when none is given.
    pub const KNOWN: [&'static str; 7] = [
        "LOADING", "BUSY", "READONLY", "TRYAGAIN", "MOVED", "ASK", "OOM",
    ];
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RedisErrorMap {
    /// The code: `LOADING`, `BUSY`, `READONLY`, `TRYAGAIN`, `MOVED`, `ASK`, `OOM`, or another
    /// upper-case word.
    code: String,
    /// The text after the code; needed for a code Redis has no message for here.
    #[serde(default)]
    message: Option<Message>,
    /// `host:port` the slot moved to (MOVED, ASK).
    #[serde(default)]
    to: Option<String>,
}

fn redis_error(
    code: &str,
    message: Option<String>,
    to: Option<String>,
) -> Result<RedisError, String> {
    let code = code.trim();
    if code.is_empty()
        || code.len() > 32
        || !code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "{code:?} is not an error code (an upper-case word such as LOADING, BUSY, READONLY, TRYAGAIN, MOVED, ASK or OOM)"
        ));
    }
    let known = RedisError::KNOWN.contains(&code);
    if !known && message.is_none() {
        return Err(format!(
            "the error code {code} needs a `message` (only {} have Redis's own)",
            RedisError::KNOWN.join(", ")
        ));
    }
    let redirect = code == "MOVED" || code == "ASK";
    match (&to, redirect) {
        (None, true) => {
            return Err(format!(
                "a {code} error names where the slot is served: `to: host:port`"
            ))
        }
        (Some(_), false) => return Err(format!("`to` is for MOVED and ASK errors, not {code}")),
        (Some(t), true) => {
            let ok = t.rsplit_once(':').is_some_and(|(h, p)| {
                !h.is_empty() && !h.contains(char::is_whitespace) && p.parse::<u16>().is_ok()
            });
            if !ok {
                return Err(format!("`to: {t}` is not host:port"));
            }
        }
        (None, false) => {}
    }
    Ok(RedisError {
        code: code.to_string(),
        message,
        to,
    })
}

impl JsonSchema for RedisError {
    fn schema_name() -> Cow<'static, str> {
        "RedisErrorFault".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A RESP error: a code (`LOADING`, `BUSY`, `READONLY`, `TRYAGAIN`, `OOM`), or `{ code, message, to }` (`to: host:port` for MOVED and ASK).",
            "anyOf": [
                { "type": "string", "enum": ["LOADING", "BUSY", "READONLY", "TRYAGAIN", "OOM"] },
                generator.subschema_for::<RedisErrorMap>()
            ]
        })
    }
}

impl<'de> Deserialize<'de> for RedisError {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RedisError;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an error code such as LOADING, or a map with `code` and optional `message` and `to`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RedisError, E> {
                redis_error(v, None, None).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RedisError, A::Error> {
                let m = RedisErrorMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                redis_error(&m.code, m.message.map(|m| m.0), m.to).map_err(de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for RedisFault {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match FaultForm::<RedisError>::deserialize(d)? {
            FaultForm::Error(e) => RedisFault::Error(e),
            FaultForm::Delay(x) => RedisFault::Delay(x),
            FaultForm::Drop => RedisFault::Drop,
            FaultForm::Reset => RedisFault::Reset,
        })
    }
}

impl RedisConfig {
    /// Reads and validates `redis:` settings on their own; `origin` names the text in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<RedisConfig, yaml_config::ConfigError> {
        let cfg: RedisConfig = yaml_config::from_yaml_str(text, origin)?;
        cfg.validate()
            .map_err(|e| yaml_config::ConfigError::at(origin, e.field, e.message).located(text))?;
        Ok(cfg)
    }

    /// What serde could not check: the bounds together and rule ids.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_bounds(self.max_message.0, self.max_pipeline)?;
        if !(1..=self.max_message.0).contains(&self.max_key.0) {
            return Err(invalid(
                "max_key",
                format!(
                    "{} bytes: expected 1 byte to max_message ({} bytes)",
                    self.max_key.0, self.max_message.0
                ),
            ));
        }
        check_ids(self.rules.iter().map(|r| r.id.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_errors_say_what_they_need() {
        let err = |y: &str| {
            RedisConfig::from_yaml(y, "r.yaml")
                .expect_err("invalid")
                .to_string()
        };
        let e = err("rules:\n  - fault: { error: MOVED }\n");
        assert!(e.contains("`to: host:port`"), "{e}");
        let e = err("rules:\n  - fault: { error: { code: NOPE } }\n");
        assert!(e.contains("needs a `message`"), "{e}");
        let e = err("rules:\n  - fault: { error: loading }\n");
        assert!(e.contains("not an error code"), "{e}");
        let e = err("rules:\n  - fault: { error: { code: MOVED, to: nowhere } }\n");
        assert!(e.contains("not host:port"), "{e}");
        let e = err("rules:\n  - match: { command: [] }\n    fault: drop\n");
        assert!(e.contains("empty list"), "{e}");
        let ok = RedisConfig::from_yaml(
            "rules:\n  - match: { command: [get, mget], key: \"user:*\", commands: [1, \"every 5\"] }\n    fault: { error: { code: MOVED, to: \"127.0.0.1:7001\" } }\n",
            "r.yaml",
        )
        .expect("valid");
        assert_eq!(
            ok.rules[0].matcher.command,
            Some(Names(vec!["GET".into(), "MGET".into()]))
        );
        assert!(ok.rules[0]
            .matcher
            .commands
            .as_ref()
            .is_some_and(|c| c.contains(1) && c.contains(10) && !c.contains(2)));
    }
}
