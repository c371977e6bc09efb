//! The configuration of a protocol-aware proxy's rules: YAML, parsed once, validated while it is
//! parsed.
//!
//! A proxy with `protocol: postgres` reads its `postgres:` settings ([`PostgresConfig`]), one
//! with `protocol: redis` its `redis:` settings ([`RedisConfig`]); each holds its bounds and its
//! rules. A rule is written as the fault server's HTTP rules are — an `id`, a `match` whose
//! conditions must all hold, and a `fault` — and the first rule that matches wins:
//!
//! ```yaml
//! proxies:
//!   - name: db
//!     listen: 127.0.0.1:6432
//!     upstream: 127.0.0.1:5432
//!     protocol: postgres
//!     postgres:
//!       max_statement: 2KiB
//!       rules:
//!         - id: serialization-failure
//!           match: { statement: "INSERT INTO orders*", transactions: 1 }
//!           fault: { error: "40001" }
//!         - id: ambiguous-commit            # the COMMIT reaches the database, its answer does not
//!           match: { statement: COMMIT, connection_commits: "1-2" }
//!           fault: drop
//!   - name: cache
//!     listen: 127.0.0.1:6380
//!     upstream: 127.0.0.1:6379
//!     protocol: redis
//!     redis:
//!       rules:
//!         - match: { command: GET, key: "session:*", probability: 0.2 }
//!           fault: { error: LOADING }
//! ```
//!
//! Validation happens inside the `Deserialize` impls wherever it can, so that an error carries
//! the line and column of the offending value (through `yaml-config`); what needs the whole
//! document (rule ids used twice, a bound below another) is [`PostgresConfig::validate`] and
//! [`RedisConfig::validate`], which name the field. Unknown fields are errors everywhere.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use yaml_config::{Dur, Size};

/// Which protocol a proxy reads: `tcp` (bytes only), `postgres` or `redis`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProtocolName {
    /// Bytes only: TCP toxics, no statement or command is read.
    #[default]
    Tcp,
    /// PostgreSQL's protocol 3: faults per statement and transaction.
    Postgres,
    /// RESP2 and RESP3: faults per command.
    Redis,
}

/// What a proxy does with bytes that are not its protocol (or break its bounds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnViolation {
    /// Close the connection, with a journal entry that says what was wrong.
    #[default]
    Close,
    /// Journal what was wrong, then forward the connection's bytes unread (no more faults).
    Forward,
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL.

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

/// An error message a fault sends: at most 1000 bytes, one line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Message(String);

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

// ---------------------------------------------------------------------------------------------
// Redis.

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

// ---------------------------------------------------------------------------------------------
// Shared parts.

/// A fault written `drop` or `{ error: … }`: one kind, with its value when it has one.
enum FaultForm<E> {
    Error(E),
    Delay(Delay),
    Drop,
    Reset,
}

const FAULT_KINDS: &str = "`error`, `delay`, `drop` or `reset`";

impl<'de, E: Deserialize<'de>> Deserialize<'de> for FaultForm<E> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<E>(std::marker::PhantomData<E>);
        impl<'de, E: Deserialize<'de>> Visitor<'de> for V<E> {
            type Value = FaultForm<E>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a fault: {FAULT_KINDS}")
            }
            fn visit_str<Er: de::Error>(self, v: &str) -> Result<FaultForm<E>, Er> {
                match v {
                    "drop" => Ok(FaultForm::Drop),
                    "reset" => Ok(FaultForm::Reset),
                    "error" | "delay" => Err(Er::custom(format!(
                        "`{v}` needs its value: `{v}: …` (e.g. `error: \"40001\"`, `delay: 200ms`)"
                    ))),
                    other => Err(Er::custom(format!(
                        "unknown fault `{other}`, expected {FAULT_KINDS}"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FaultForm<E>, A::Error> {
                let Some(kind) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(format!(
                        "an empty fault: expected {FAULT_KINDS}"
                    )));
                };
                let fault = match kind.as_str() {
                    "error" => FaultForm::Error(map.next_value()?),
                    "delay" => FaultForm::Delay(map.next_value()?),
                    "drop" | "reset" => {
                        let _: de::IgnoredAny = map.next_value()?;
                        if kind == "drop" {
                            FaultForm::Drop
                        } else {
                            FaultForm::Reset
                        }
                    }
                    other => {
                        return Err(de::Error::custom(format!(
                            "unknown fault `{other}`, expected {FAULT_KINDS}"
                        )))
                    }
                };
                if let Some(more) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "a fault is one of {FAULT_KINDS}; `{kind}` and `{more}` are given"
                    )));
                }
                Ok(fault)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
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

/// A delay: how long, and on which side of the forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delay {
    /// How long.
    pub duration: Duration,
    /// Before the message is forwarded, or after its answer came, before it is relayed.
    pub when: When,
}

/// Which side of the forwarding a delay waits on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// The statement or command waits, then is forwarded.
    #[default]
    Before,
    /// The database answers at once; its answer waits, then is relayed (a client that gives up
    /// first does not know what happened).
    After,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DelayMap {
    /// How long: `200ms`, `1.5s`.
    duration: Dur,
    /// `before` (default) or `after`.
    #[serde(default)]
    when: When,
}

impl JsonSchema for Delay {
    fn schema_name() -> Cow<'static, str> {
        "WireDelay".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A delay: a duration (`200ms`), or `{ duration: 200ms, when: before | after }`.",
            "anyOf": [
                generator.subschema_for::<Dur>(),
                generator.subschema_for::<DelayMap>()
            ]
        })
    }
}

impl<'de> Deserialize<'de> for Delay {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Delay;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration (\"200ms\"), or a map with `duration` and optional `when: before | after`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Delay, E> {
                let d = Dur::deserialize(de::value::StrDeserializer::<E>::new(v))?;
                Ok(Delay {
                    duration: d.0,
                    when: When::Before,
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Delay, E> {
                let d = Dur::deserialize(de::value::U64Deserializer::<E>::new(v))?;
                Ok(Delay {
                    duration: d.0,
                    when: When::Before,
                })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Delay, E> {
                let d = Dur::deserialize(de::value::F64Deserializer::<E>::new(v))?;
                Ok(Delay {
                    duration: d.0,
                    when: When::Before,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Delay, A::Error> {
                let m = DelayMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Delay {
                    duration: m.duration.0,
                    when: m.when,
                })
            }
        }
        d.deserialize_any(V)
    }
}

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

// ---------------------------------------------------------------------------------------------
// Validation that needs the whole document.

/// A value that parsed but makes no sense with the rest: the field (relative to the proxy's
/// `postgres:` or `redis:`) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at `{field}`: {message}")]
pub struct Invalid {
    /// `rules[2].match.startup`, `max_statement`.
    pub field: String,
    /// What is wrong and what is expected.
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        message: message.into(),
    }
}

fn check_bounds(max_message: u64, max_pipeline: u32) -> Result<(), Invalid> {
    if !(1024..=1 << 30).contains(&max_message) {
        return Err(invalid(
            "max_message",
            format!("{max_message} bytes: expected 1KiB to 1GiB"),
        ));
    }
    if !(1..=1_000_000).contains(&max_pipeline) {
        return Err(invalid(
            "max_pipeline",
            format!("{max_pipeline}: expected 1 to 1000000"),
        ));
    }
    Ok(())
}

fn check_ids<'a>(ids: impl Iterator<Item = Option<&'a String>>) -> Result<(), Invalid> {
    let mut seen = std::collections::HashSet::new();
    for (i, id) in ids.enumerate() {
        if let Some(id) = id {
            if id.is_empty() {
                return Err(invalid(format!("rules[{i}].id"), "an empty id"));
            }
            if !seen.insert(id.clone()) {
                return Err(invalid(
                    format!("rules[{i}].id"),
                    format!("the id {id:?} is used by an earlier rule"),
                ));
            }
        }
    }
    Ok(())
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

/// A rule's id: its own, or `rule-N` (1-based position).
pub(crate) fn rule_id(id: Option<&String>, i: usize) -> String {
    id.cloned().unwrap_or_else(|| format!("rule-{}", i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates() {
        assert!(is_sqlstate("40001") && is_sqlstate("40P01") && is_sqlstate("XX000"));
        assert!(!is_sqlstate("4000") && !is_sqlstate("40p01") && !is_sqlstate("400011"));
    }

    #[test]
    fn the_module_example_reads() {
        let doc = include_str!("config.rs");
        let yaml: String = doc
            .lines()
            .skip_while(|l| *l != "//! ```yaml")
            .skip(1)
            .take_while(|l| *l != "//! ```")
            .map(|l| {
                format!(
                    "{}\n",
                    l.trim_start_matches("//!").strip_prefix(' ').unwrap_or("")
                )
            })
            .collect();
        // The proxy's own fields belong to the fault server; read its protocol parts here.
        #[derive(Deserialize)]
        struct Proxy {
            #[serde(default)]
            postgres: Option<PostgresConfig>,
            #[serde(default)]
            redis: Option<RedisConfig>,
            protocol: ProtocolName,
        }
        #[derive(Deserialize)]
        struct Doc {
            proxies: Vec<Proxy>,
        }
        let d: Doc =
            yaml_config::from_yaml_str(&yaml, "doc").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(d.proxies[0].protocol, ProtocolName::Postgres);
        let pg = d.proxies[0].postgres.as_ref().expect("postgres");
        pg.validate().expect("valid");
        assert_eq!(pg.max_statement, Size(2048));
        assert_eq!(
            pg.rules[0].fault,
            PgFault::Error(PgError {
                sqlstate: "40001".into(),
                message: None,
                severity: None
            })
        );
        assert_eq!(pg.rules[1].fault, PgFault::Drop);
        assert!(pg.rules[1]
            .matcher
            .connection_commits
            .as_ref()
            .is_some_and(|c| c.contains(2) && !c.contains(3)));
        let redis = d.proxies[1].redis.as_ref().expect("redis");
        assert_eq!(
            redis.rules[0].matcher.command,
            Some(Names(vec!["GET".into()]))
        );
        assert!(matches!(&redis.rules[0].fault, RedisFault::Error(e) if e.code == "LOADING"));
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

    #[test]
    fn the_schemas_are_generated() {
        let s = yaml_config::json_schema::<PostgresConfig>("postgres");
        let text = serde_json::to_string(&s).expect("json");
        assert!(
            text.contains("connection_commits") && text.contains("SqlState"),
            "{text}"
        );
        let s = yaml_config::json_schema::<RedisConfig>("redis");
        assert!(serde_json::to_string(&s)
            .expect("json")
            .contains("RedisErrorFault"));
    }
}
