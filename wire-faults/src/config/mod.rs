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
//!
//! The rooms: `postgres.rs` and `redis.rs` each protocol's settings, rules, faults and their
//! checks; `fault.rs` the fault forms both share (`error`, `delay`, `drop`, `reset`) and the
//! delay; `values.rs` the values a matcher or an error is written with (globs, regular
//! expressions, command names, probabilities, counts, messages), each checked as it is read;
//! `validate.rs` what is checked of a whole document, and the error that names its field.

mod fault;
mod postgres;
mod redis;
mod validate;
mod values;

use schemars::JsonSchema;
use serde::Deserialize;

pub use fault::{Delay, When};
pub use postgres::{is_sqlstate, PgError, PgFault, PgMatch, PgRule, PostgresConfig, Severity};
pub use redis::{RedisConfig, RedisError, RedisFault, RedisMatch, RedisRule};
pub(crate) use validate::rule_id;
pub use validate::Invalid;
pub use values::{Count, Counts, Names, Pattern, Probability, SqlRegex};

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

#[cfg(test)]
mod tests {
    use super::*;
    use yaml_config::Size;

    #[test]
    fn the_module_example_reads() {
        let doc = include_str!("mod.rs");
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
