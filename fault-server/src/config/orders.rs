//! `orders:` and `state:` — the built-in orders resource (its idempotency and payment
//! implementations, its timings) and its database (SQLite or PostgreSQL), and where the
//! schedule's counters live; with the bounds of each setting.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer};
use serde::Deserialize;
use yaml_config::{ConfigError, Dur};

/// Which idempotency implementation `POST /orders` uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum IdempotencyImpl {
    /// Correct: the key is claimed under a UNIQUE constraint before any work is done.
    #[default]
    Unique,
    /// The classic race: SELECT by key, do the work, INSERT — no constraint.
    CheckThenInsert,
    /// Keys are ignored; every POST creates an order.
    None,
}

/// Which implementation `POST /orders/{id}/pay` uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PayImpl {
    /// `UPDATE … WHERE status = 'pending'`: the affected row count decides.
    #[default]
    Conditional,
    /// Read the status, do the work, write unconditionally: concurrent pays both transition.
    ReadThenWrite,
}

/// Settings of the built-in orders resource.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OrdersConfig {
    /// Idempotency implementation.
    #[serde(default)]
    pub idempotency: IdempotencyImpl,
    /// Payment state-transition implementation.
    #[serde(default)]
    pub pay: PayImpl,
    /// Answer `400` to a `POST /orders` without `Idempotency-Key` (ignored by `none`).
    #[serde(default = "default_true")]
    pub require_key: bool,
    /// How long a key and its stored response are kept.
    #[serde(default = "default_key_ttl")]
    pub key_ttl: Dur,
    /// Simulated work between claiming/checking a key and writing the order (and in pay).
    #[serde(default)]
    pub work_delay: Dur,
    /// How long a key's request in flight may hold it (`unique` only). A key still in flight
    /// after that — its request's process died, or the database lost its completion — is taken
    /// over by the next request with the same key and body, which makes the order; the request
    /// that held it, if still running, then writes nothing and gets `409`. More than
    /// `work_delay`, at most `key_ttl`. Default: one minute past `work_delay`.
    #[serde(default)]
    pub claim_lease: Option<Dur>,
    /// `Retry-After` seconds sent with `409` while the key's first request is in flight.
    #[serde(default = "default_retry_after")]
    pub retry_after_s: u64,
    /// Where the orders live: an SQLite file, or a PostgreSQL server (`postgres://…`); a fresh
    /// temporary SQLite file when absent.
    #[serde(default)]
    pub database: Option<Database>,
    /// Connections in the pool.
    #[serde(default = "default_pool_size")]
    pub pool_size: u32,
    /// PostgreSQL: the longest one statement may run (`statement_timeout` on every connection),
    /// and the longest a request waits for a connection of the pool. Past it the request is
    /// answered `503` with `Retry-After` and journaled `rejected: store-unavailable`.
    #[serde(default = "default_statement_timeout")]
    pub statement_timeout: Dur,
    /// PostgreSQL: the longest a statement waits for a lock (`lock_timeout`); as above past it.
    #[serde(default = "default_lock_timeout")]
    pub lock_timeout: Dur,
}

impl Default for OrdersConfig {
    fn default() -> Self {
        OrdersConfig {
            idempotency: IdempotencyImpl::default(),
            pay: PayImpl::default(),
            require_key: true,
            key_ttl: default_key_ttl(),
            work_delay: Dur::default(),
            claim_lease: None,
            retry_after_s: default_retry_after(),
            database: None,
            pool_size: default_pool_size(),
            statement_timeout: default_statement_timeout(),
            lock_timeout: default_lock_timeout(),
        }
    }
}

impl OrdersConfig {
    /// How long a key's request in flight may hold it: `claim_lease`, else one minute past
    /// `work_delay`.
    pub fn lease(&self) -> Duration {
        self.claim_lease
            .map_or_else(|| self.work_delay.0 + Duration::from_secs(60), |d| d.0)
    }
}

fn default_true() -> bool {
    true
}

fn default_key_ttl() -> Dur {
    Dur(Duration::from_secs(24 * 3600))
}

fn default_retry_after() -> u64 {
    1
}

fn default_pool_size() -> u32 {
    16
}

fn default_statement_timeout() -> Dur {
    Dur(Duration::from_secs(5))
}

fn default_lock_timeout() -> Dur {
    Dur(Duration::from_secs(2))
}

/// Where the schedule's counters (`requests`, `hits`, `attempts`) are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StateMode {
    /// In this process: lock-free and free, but each replica counts for itself.
    #[default]
    Local,
    /// In the orders' PostgreSQL database: every replica sharing it counts together, at the cost
    /// of a database round trip per request.
    Shared,
}

/// The orders' database: `orders.database` in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// An SQLite database file (created when missing).
    Sqlite(PathBuf),
    /// A PostgreSQL server, `postgres://user:password@host:port/dbname?options…`.
    Postgres(PostgresUrl),
}

impl Database {
    /// The PostgreSQL URL, when the orders live on PostgreSQL.
    pub fn postgres(&self) -> Option<&PostgresUrl> {
        match self {
            Database::Postgres(u) => Some(u),
            Database::Sqlite(_) => None,
        }
    }
}

impl JsonSchema for Database {
    fn schema_name() -> Cow<'static, str> {
        "Database".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Where the orders live: an SQLite file path, or `postgres://user:password@host:port/dbname` (also `postgresql://`).",
            "type": "string",
            "minLength": 1,
            "pattern": "^(postgres(ql)?://.+|(?!.*://).+)$"
        })
    }
}

impl<'de> Deserialize<'de> for Database {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return PostgresUrl::parse(&s)
                .map(Database::Postgres)
                .map_err(de::Error::custom);
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(de::Error::custom(format!(
                "unsupported database URL scheme `{scheme}://`: give an SQLite file path or a `postgres://user:password@host:port/dbname` URL"
            )));
        }
        if s.is_empty() {
            return Err(de::Error::custom(
                "empty database: give an SQLite file path or a `postgres://` URL, or leave it out for a temporary SQLite file",
            ));
        }
        Ok(Database::Sqlite(PathBuf::from(s)))
    }
}

/// A PostgreSQL connection URL, checked when the config is read. Shown (in `Debug`, in errors)
/// without its password.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    url: String,
}

impl PostgresUrl {
    /// Checks `url` as tokio-postgres reads it and that it names a host.
    pub fn parse(url: &str) -> Result<PostgresUrl, String> {
        let me = PostgresUrl {
            url: url.to_string(),
        };
        let cfg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| format!("invalid PostgreSQL URL {}: {e}", me.redacted()))?;
        if cfg.get_hosts().is_empty() {
            return Err(format!(
                "invalid PostgreSQL URL {}: no host; give postgres://user:password@host:port/dbname",
                me.redacted()
            ));
        }
        Ok(me)
    }

    /// The URL as given, password included: for connecting only.
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// The client configuration.
    pub fn pg_config(&self) -> Result<tokio_postgres::Config, tokio_postgres::Error> {
        self.url.parse()
    }

    /// The URL without its password (in the user info or a `password=` parameter), for messages.
    pub fn redacted(&self) -> String {
        redact_url(&self.url)
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// `scheme://user:secret@host/db?password=secret` → `scheme://user@host/db?password=***`.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match base.find('/') {
        Some(i) => base.split_at(i),
        None => (base, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{user}@{hosts}")
        }
        None => authority.to_string(),
    };
    let mut out = format!("{scheme}://{authority}{path}");
    if let Some(q) = query {
        let q: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&q.join("&"));
    }
    out
}

/// The bounds of the orders' settings, each stated in its message.
pub fn validate_orders(o: &OrdersConfig, origin: &str) -> Result<(), ConfigError> {
    for (field, d) in [
        ("statement_timeout", o.statement_timeout),
        ("lock_timeout", o.lock_timeout),
    ] {
        if d.0 < Duration::from_millis(1) || d.0 > Duration::from_secs(3600) {
            return Err(ConfigError::at(
                origin,
                format!("orders.{field}"),
                format!("{:?}; give 1ms to 1h", d.0),
            ));
        }
    }
    if let Some(lease) = o.claim_lease {
        let (work, ttl) = (o.work_delay.0, o.key_ttl.0);
        if lease.0 <= work || lease.0 > ttl {
            return Err(ConfigError::at(
                    origin,
                    "orders.claim_lease",
                    format!(
                        "{:?}; give more than work_delay ({work:?}: a retry would take over every request still working, and none would finish) and at most key_ttl ({ttl:?}: the key expires first)",
                        lease.0
                    ),
                ));
        }
    }
    if o.pool_size == 0 || o.pool_size > 256 {
        return Err(ConfigError::at(
            origin,
            "orders.pool_size",
            format!("{} connections; give 1 to 256", o.pool_size),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::*;

    #[test]
    fn databases_and_shared_state() {
        let cfg = Config::from_yaml(
            "state: shared\norders: { database: \"postgres://u:secret@db.example:5433/orders?password=hidden\" }\n",
            "cfg",
        )
        .unwrap();
        assert_eq!(cfg.state, StateMode::Shared);
        let url = cfg.orders.database.as_ref().unwrap().postgres().unwrap();
        assert_eq!(
            url.redacted(),
            "postgres://u@db.example:5433/orders?password=***"
        );
        assert!(!format!("{cfg:?}").contains("secret") && !format!("{cfg:?}").contains("hidden"));
        let cfg = Config::from_yaml("orders: { database: /tmp/o.sqlite }\n", "cfg").unwrap();
        assert_eq!(
            cfg.orders.database,
            Some(Database::Sqlite(PathBuf::from("/tmp/o.sqlite")))
        );
        let err = Config::from_yaml(
            "seed: 1\nstate: shared\norders: { database: /tmp/o.sqlite }\n",
            "cfg",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("cfg:2:") && err.contains("at `state`"),
            "{err}"
        );
        assert!(err.contains("PostgreSQL"), "{err}");
        let err = Config::from_yaml("state: shared\n", "cfg")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cfg:1:"), "{err}");
        let err = Config::from_yaml(
            "orders:\n  database: \"postgres://u:pw@h:notaport/db\"\n",
            "cfg",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("cfg:2:"), "{err}");
        assert!(
            err.contains("invalid PostgreSQL URL postgres://u@h:notaport/db"),
            "{err}"
        );
        assert!(!err.contains("pw"), "{err}");
        let err = Config::from_yaml("orders: { database: \"mysql://h/db\" }\n", "cfg")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unsupported database URL scheme"), "{err}");
        let err = Config::from_yaml("state: global\n", "cfg")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant `global`"), "{err}");
    }
}
