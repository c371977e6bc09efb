//! A `protocol: postgres` proxy's settings: its bounds, its rules, the faults they answer with
//! (an ErrorResponse of a SQLSTATE, a delay, a dropped answer, a reset), and what is checked of
//! them together.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use yaml_config::Size;

use super::fault::{Delay, FaultForm};
use super::validate::{check_bounds, check_ids, invalid, Invalid};
use super::values::{Counts, Message, Pattern, Probability, SqlRegex};
use super::OnViolation;

/// A `protocol: postgres` proxy's settings: its bounds and its rules.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// The longest message read whole (a Query, a Parse, a Bind with its values); DataRow and
    /// CopyData are passed on as they come, whatever their size. Default 16MiB.
    pub max_message: Size,
    /// The longest statement text journaled (normalized, cut on a character boundary). Default
    /// 2KiB.
    pub max_statement: Size,
    /// Most statements tracked at once ahead of their answers (a pipeline); past it the oldest
    /// is journaled without waiting for its transaction's end. Default 10000.
    pub max_pipeline: u32,
    /// `close` (default) or `forward`: what happens to a connection whose bytes are not
    /// PostgreSQL's protocol, or break a bound.
    pub on_violation: OnViolation,
    /// The rules, in order; the first that matches a statement decides its fault.
    pub rules: Vec<PgRule>,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            max_message: Size(16 << 20),
            max_statement: Size(2 << 10),
            max_pipeline: 10_000,
            on_violation: OnViolation::Close,
            rules: Vec::new(),
        }
    }
}

/// One rule: when it applies, and the fault.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PgRule {
    /// Its name in the journal (`rule`); `rule-N` (1-based position) when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// When it applies; an absent matcher matches every statement.
    #[serde(default, rename = "match")]
    pub matcher: PgMatch,
    /// What happens to a matching statement.
    pub fault: PgFault,
}

/// The conditions of a PostgreSQL rule; all given conditions must hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PgMatch {
    /// The statement's normalized text (comments dropped, whitespace collapsed, no trailing
    /// `;`) matches this glob, case-insensitively: `*` any run of characters, `?` one.
    #[serde(default)]
    pub statement: Option<Pattern>,
    /// The statement's normalized text matches this regular expression (Rust's `regex` syntax;
    /// `(?i)` for case-insensitive).
    #[serde(default)]
    pub statement_regex: Option<SqlRegex>,
    /// Only inside an explicit `BEGIN` … `COMMIT` block (`true`) or only outside one (`false`).
    #[serde(default)]
    pub in_block: Option<bool>,
    /// The connection's startup instead of a statement: a fault here refuses the connection
    /// (`error: { sqlstate: "53300" }`: too many connections), delays it or cuts it.
    #[serde(default)]
    pub startup: bool,
    /// The Nth connection the proxy accepted (1-based): `3`, `"1-5"`, `"10-"`, `"every 4"`.
    #[serde(default)]
    pub connections: Option<Counts>,
    /// The Nth transaction of its connection (a statement outside a block is a transaction of
    /// its own, with the statements pipelined with it before a `Sync`).
    #[serde(default)]
    pub transactions: Option<Counts>,
    /// The Nth `COMMIT` (or `END`) the proxy saw, over every connection; only COMMITs match.
    #[serde(default)]
    pub commits: Option<Counts>,
    /// The Nth `COMMIT` of its connection (`"1-2"`: the first two COMMITs of each
    /// connection); only COMMITs match.
    #[serde(default)]
    pub connection_commits: Option<Counts>,
    /// The Nth statement that reached this rule and met its other conditions.
    #[serde(default)]
    pub hits: Option<Counts>,
    /// The chance that a statement meeting every other condition matches, in [0, 1]: drawn
    /// from the seed, the rule and the statement's transaction so far (texts and values), and
    /// how many times that transaction was seen, so a run replays whatever the arrival order.
    #[serde(default)]
    pub probability: Option<Probability>,
}

/// What a PostgreSQL rule does.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PgFault {
    /// Answer with an ErrorResponse of this SQLSTATE instead of running the statement: the
    /// database's transaction fails as it would have (a block becomes failed, an implicit one
    /// is rolled back). `error: "40001"` or `error: { sqlstate, message, severity }`; a FATAL
    /// error closes the connection after it.
    Error(PgError),
    /// Hold the statement before forwarding it (`when: before`, the default) or hold its
    /// answer (`when: after`): `delay: 200ms` or `delay: { duration: 200ms, when: after }`.
    Delay(Delay),
    /// Forward the statement, let the database answer, and close the client's connection
    /// before the answer reaches it: on a COMMIT, the ambiguous commit (the journal says
    /// whether the database committed).
    Drop,
    /// Close the connection before the statement is forwarded: the statement never runs and
    /// an open transaction is rolled back by the database.
    Reset,
}

/// An ErrorResponse a fault answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgError {
    /// The SQLSTATE: `40001` serialization_failure, `40P01` deadlock_detected, `57P01`
    /// admin_shutdown, `53300` too_many_connections, `23505` unique_violation, any other.
    pub sqlstate: String,
    /// The message; PostgreSQL's own for the codes above when absent.
    pub message: Option<String>,
    /// `ERROR` or `FATAL`; FATAL for 57P01, 57P02, 57P03 and 53300 when absent.
    pub severity: Option<Severity>,
}

/// An error's severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Severity {
    /// The statement failed; the connection stays.
    Error,
    /// The session ends: the connection is closed after the error.
    Fatal,
}

impl PgError {
    /// The severity it is sent with.
    pub fn severity(&self) -> Severity {
        self.severity.unwrap_or(
            if matches!(
                self.sqlstate.as_str(),
                "57P01" | "57P02" | "57P03" | "53300"
            ) {
                Severity::Fatal
            } else {
                Severity::Error
            },
        )
    }

    /// The message it is sent with.
    pub fn message(&self) -> &str {
        if let Some(m) = &self.message {
            return m;
        }
        match self.sqlstate.as_str() {
            "40001" => "could not serialize access due to concurrent update",
            "40P01" => "deadlock detected",
            "57P01" => "terminating connection due to administrator command",
            "57P02" => "terminating connection due to crash of another server process",
            "57P03" => "the database system is starting up",
            "53300" => "sorry, too many clients already",
            "23505" => "duplicate key value violates unique constraint",
            "08006" => "connection failure",
            _ => "a fault injected by the proxy",
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PgErrorMap {
    /// The SQLSTATE, five digits or upper-case letters (not class 00, 01 or 02).
    sqlstate: SqlState,
    /// The message; PostgreSQL's own for the well-known codes when absent.
    #[serde(default)]
    message: Option<Message>,
    /// `ERROR` or `FATAL` (FATAL closes the connection).
    #[serde(default)]
    severity: Option<Severity>,
}

impl JsonSchema for PgError {
    fn schema_name() -> Cow<'static, str> {
        "PgErrorFault".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An ErrorResponse: a SQLSTATE (`\"40001\"`), or `{ sqlstate, message, severity }`.",
            "anyOf": [
                generator.subschema_for::<SqlState>(),
                generator.subschema_for::<PgErrorMap>()
            ]
        })
    }
}

impl<'de> Deserialize<'de> for PgError {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PgError;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a SQLSTATE such as \"40001\", or a map with `sqlstate` and optional `message` and `severity`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PgError, E> {
                Ok(PgError {
                    sqlstate: sqlstate(v).map_err(E::custom)?,
                    message: None,
                    severity: None,
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PgError, E> {
                self.visit_str(&format!("{v:05}"))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PgError, A::Error> {
                let m = PgErrorMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(PgError {
                    sqlstate: m.sqlstate.0,
                    message: m.message.map(|m| m.0),
                    severity: m.severity,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A SQLSTATE, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SqlState(String);

/// Whether `s` is a SQLSTATE: five characters, digits or upper-case ASCII letters.
pub fn is_sqlstate(s: &str) -> bool {
    s.len() == 5
        && s.bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
}

fn sqlstate(v: &str) -> Result<String, String> {
    if !is_sqlstate(v) {
        return Err(format!(
            "{v:?} is not a SQLSTATE (five digits or upper-case letters, e.g. \"40001\" or \"40P01\")"
        ));
    }
    if matches!(&v[..2], "00" | "01" | "02") {
        return Err(format!(
            "SQLSTATE {v} is of class {} (success, warning or no data): not an error",
            &v[..2]
        ));
    }
    Ok(v.to_string())
}

impl JsonSchema for SqlState {
    fn schema_name() -> Cow<'static, str> {
        "SqlState".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A SQLSTATE: five digits or upper-case letters, not of class 00, 01 or 02 (`40001`, `40P01`, `57P01`, `53300`, `23505`).",
            "type": "string",
            "pattern": "^(?!0[012])[0-9A-Z]{5}$"
        })
    }
}

impl<'de> Deserialize<'de> for SqlState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = StrOrNumber::deserialize(d)?;
        sqlstate(&s.0).map(SqlState).map_err(de::Error::custom)
    }
}

/// A string, or a number written as one (`sqlstate: 40001` in YAML is a number).
struct StrOrNumber(String);

impl<'de> Deserialize<'de> for StrOrNumber {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StrOrNumber;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StrOrNumber, E> {
                Ok(StrOrNumber(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StrOrNumber, E> {
                Ok(StrOrNumber(format!("{v:05}")))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for PgFault {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match FaultForm::<PgError>::deserialize(d)? {
            FaultForm::Error(e) => PgFault::Error(e),
            FaultForm::Delay(x) => PgFault::Delay(x),
            FaultForm::Drop => PgFault::Drop,
            FaultForm::Reset => PgFault::Reset,
        })
    }
}

impl PostgresConfig {
    /// Reads and validates `postgres:` settings on their own (a test, a fuzzer); `origin` names
    /// the text in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<PostgresConfig, yaml_config::ConfigError> {
        let cfg: PostgresConfig = yaml_config::from_yaml_str(text, origin)?;
        cfg.validate()
            .map_err(|e| yaml_config::ConfigError::at(origin, e.field, e.message).located(text))?;
        Ok(cfg)
    }

    /// What serde could not check: the bounds together, rule ids, conditions that contradict.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_bounds(self.max_message.0, self.max_pipeline)?;
        if !(16..=self.max_message.0).contains(&self.max_statement.0) {
            return Err(invalid(
                "max_statement",
                format!(
                    "{} bytes: expected 16 bytes to max_message ({} bytes)",
                    self.max_statement.0, self.max_message.0
                ),
            ));
        }
        check_ids(self.rules.iter().map(|r| r.id.as_ref()))?;
        for (i, r) in self.rules.iter().enumerate() {
            let m = &r.matcher;
            if m.startup {
                let statement_only = [
                    ("statement", m.statement.is_some()),
                    ("statement_regex", m.statement_regex.is_some()),
                    ("in_block", m.in_block.is_some()),
                    ("transactions", m.transactions.is_some()),
                    ("commits", m.commits.is_some()),
                    ("connection_commits", m.connection_commits.is_some()),
                ];
                if let Some((name, _)) = statement_only.iter().find(|(_, set)| *set) {
                    return Err(invalid(
                        format!("rules[{i}].match.{name}"),
                        "a startup rule matches a connection's startup, which has no statement: leave this out or drop `startup: true`",
                    ));
                }
                if r.fault == PgFault::Drop {
                    return Err(invalid(
                        format!("rules[{i}].fault"),
                        "`drop` withholds a statement's answer; a startup has none to withhold (use `reset`, or an error such as `53300`)",
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::When;

    #[test]
    fn sqlstates() {
        assert!(is_sqlstate("40001") && is_sqlstate("40P01") && is_sqlstate("XX000"));
        assert!(!is_sqlstate("4000") && !is_sqlstate("40p01") && !is_sqlstate("400011"));
    }

    fn pg_err(yaml: &str) -> String {
        PostgresConfig::from_yaml(yaml, "proxy.yaml")
            .expect_err("invalid")
            .to_string()
    }

    #[test]
    fn faults_read_in_every_form() {
        let cfg = PostgresConfig::from_yaml(
            r#"
rules:
  - fault: reset
  - fault: { error: { sqlstate: 57P01 } }
  - fault: { error: { sqlstate: 23505, message: "duplicate order", severity: ERROR } }
  - fault: { delay: 250ms }
  - fault: { delay: { duration: 1s, when: after } }
  - match: { startup: true, connections: "every 3" }
    fault: { error: "53300" }
"#,
            "t",
        )
        .expect("valid");
        let f: Vec<&PgFault> = cfg.rules.iter().map(|r| &r.fault).collect();
        assert_eq!(*f[0], PgFault::Reset);
        let PgFault::Error(e) = f[1] else { panic!() };
        assert_eq!(
            (e.severity(), e.message()),
            (
                Severity::Fatal,
                "terminating connection due to administrator command"
            )
        );
        let PgFault::Error(e) = f[2] else { panic!() };
        assert_eq!(
            (e.sqlstate.as_str(), e.severity(), e.message()),
            ("23505", Severity::Error, "duplicate order")
        );
        assert_eq!(
            *f[3],
            PgFault::Delay(Delay {
                duration: Duration::from_millis(250),
                when: When::Before
            })
        );
        assert_eq!(
            *f[4],
            PgFault::Delay(Delay {
                duration: Duration::from_secs(1),
                when: When::After
            })
        );
        let PgFault::Error(e) = f[5] else { panic!() };
        assert_eq!(e.severity(), Severity::Fatal);
    }

    #[test]
    fn mistakes_are_named_with_their_place() {
        let e = pg_err("rules:\n  - fault: { error: \"4000\" }\n");
        assert!(
            e.starts_with("proxy.yaml:2:")
                && e.contains("rules[0].fault")
                && e.contains("not a SQLSTATE"),
            "{e}"
        );
        let e = pg_err("rules:\n  - fault: { error: \"00000\" }\n");
        assert!(e.contains("not an error"), "{e}");
        let e = pg_err("rules:\n  - match: { statment: COMMIT }\n    fault: drop\n");
        assert!(
            e.contains("rules[0].match") && e.contains("statment"),
            "{e}"
        );
        let e = pg_err("rules:\n  - match: { statement_regex: \"(unclosed\" }\n    fault: drop\n");
        assert!(
            e.contains("statement_regex") && e.contains("not a regular expression"),
            "{e}"
        );
        let e = pg_err("rules:\n  - match: { transactions: \"3-1\" }\n    fault: drop\n");
        assert!(e.contains("ends before it starts"), "{e}");
        let e = pg_err("rules:\n  - match: { probability: 1.5 }\n    fault: drop\n");
        assert!(e.contains("between 0 and 1"), "{e}");
        let e =
            pg_err("rules:\n  - match: { startup: true, statement: COMMIT }\n    fault: reset\n");
        assert!(
            e.starts_with("proxy.yaml:2:")
                && e.contains("rules[0].match.statement")
                && e.contains("startup"),
            "{e}"
        );
        let e = pg_err("max_statement: 1MiB\nmax_message: 64KiB\n");
        assert!(e.contains("max_statement"), "{e}");
        let e = pg_err("rules:\n  - { id: a, fault: drop }\n  - { id: a, fault: reset }\n");
        assert!(
            e.contains("rules[1].id") && e.contains("earlier rule"),
            "{e}"
        );
        let e = pg_err("rules:\n  - fault: { delay: { duration: 1s, when: later } }\n");
        assert!(e.contains("later"), "{e}");
        let e =
            pg_err("rules:\n  - fault: { error: { sqlstate: 40001, message: \"two\\nlines\" } }\n");
        assert!(e.contains("one line"), "{e}");
    }
}
