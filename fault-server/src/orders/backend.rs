//! What the store and its backends say to each other: the rows a database step returns
//! ([`KeyRow`], [`Claim`]), the one error type of every backend ([`StoreError`]) and the clock the
//! expiry times are read from.
//!
//! Why a module of its own: the store (`store.rs`) picks a backend and calls it, and each backend
//! (`sqlite.rs`, `postgres.rs`) answers in these types. Kept here, below both, the arrows run one
//! way — store → backend → these types — so a backend can be read, and changed, without the
//! store's replies in mind, and the store never sees a dialect.

use std::time::{SystemTime, UNIX_EPOCH};

/// The store could not be opened or failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The temporary SQLite file could not be made.
    #[error("cannot create a temporary database: {0}")]
    Temp(std::io::Error),
    /// The SQLite file could not be opened.
    #[error("cannot open database {path}: {source}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        source: r2d2::Error,
    },
    /// An SQLite statement failed.
    #[error("database error: {0}")]
    Sql(#[from] rusqlite::Error),
    /// No SQLite connection could be had from the pool.
    #[error("database pool: {0}")]
    Pool(#[from] r2d2::Error),
    /// The blocking task that ran a statement failed.
    #[error("database task failed: {0}")]
    Task(String),
    /// The PostgreSQL URL could not be read.
    #[error("invalid PostgreSQL URL {url}: {source}")]
    PostgresUrl {
        /// The URL, without its password.
        url: String,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// The PostgreSQL server could not be reached.
    #[error("cannot connect to the orders database {url}: {source}")]
    Connect {
        /// The URL, without its password.
        url: String,
        /// Why.
        source: deadpool_postgres::PoolError,
    },
    /// The orders' tables could not be created.
    #[error("cannot create the orders schema in {url}: {}", pg_detail(source))]
    Schema {
        /// The URL, without its password.
        url: String,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// A PostgreSQL statement failed.
    #[error("database error: {}", pg_detail(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// The PostgreSQL server gave no answer at all within the operation's bound (a stalled link
    /// or a frozen host: no timeout of the server's own can fire). Whether the operation took
    /// effect is not known.
    #[error("the orders database gave no answer within {0:?}; whether the operation took effect is not known")]
    NoAnswer(std::time::Duration),
    /// No PostgreSQL connection could be had from the pool.
    #[error("database pool: {0}")]
    PostgresPool(#[from] deadpool_postgres::PoolError),
    /// The PostgreSQL pool could not be built.
    #[error("database pool: {0}")]
    PoolBuild(String),
}

impl StoreError {
    /// Whether the operation may have taken effect though it failed: the database gave no
    /// answer at all ([`StoreError::NoAnswer`]), or the connection broke under a statement — a
    /// COMMIT may have been on its way. Answered `503` like an unavailable store, but not
    /// journaled as a refusal.
    pub fn effect_unknown(&self) -> bool {
        match self {
            StoreError::NoAnswer(_) => true,
            StoreError::Postgres(e) => {
                e.is_closed()
                    || std::error::Error::source(e)
                        .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
            }
            _ => false,
        }
    }

    /// Whether the database did not answer in time or could not be reached — a pool wait, a
    /// statement or a lock that timed out, a connection refused or lost — rather than refusing
    /// the statement itself. Such a request had no effect (a timed-out statement is rolled
    /// back), unless [`StoreError::effect_unknown`] says otherwise.
    pub fn is_unavailable(&self) -> bool {
        use tokio_postgres::error::SqlState;
        match self {
            StoreError::PostgresPool(_) | StoreError::Pool(_) | StoreError::NoAnswer(_) => true,
            StoreError::Postgres(e) => {
                e.is_closed()
                    || e.code().is_some_and(|c| {
                        *c == SqlState::QUERY_CANCELED
                            || *c == SqlState::LOCK_NOT_AVAILABLE
                            || *c == SqlState::ADMIN_SHUTDOWN
                            || *c == SqlState::CANNOT_CONNECT_NOW
                    })
                    || std::error::Error::source(e)
                        .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
            }
            _ => false,
        }
    }
}

/// What PostgreSQL said, not just that it said something: `tokio_postgres::Error` displays a
/// server's error as `db error`, with the message (`canceling statement due to lock timeout`) and
/// its code in its source.
fn pg_detail(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} (SQLSTATE {})", db.message(), db.code().code());
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// Milliseconds since the Unix epoch: the time keys are stamped and expired with.
pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What the key table says about a key, read after a failed claim.
pub(super) struct KeyRow {
    pub(super) request_hash: String,
    pub(super) state: String,
    pub(super) response_status: Option<u16>,
    pub(super) response_body: Option<String>,
    pub(super) order_id: Option<String>,
    pub(super) expires_at_ms: i64,
    /// When the key's request in flight claimed it (or took it over): the claim's stamp, which
    /// its completion must still find. A row written before the column existed has its
    /// creation time here.
    pub(super) claimed_at_ms: i64,
}

impl KeyRow {
    /// Whether the request in flight has held the key for `lease_ms` and more: it died, or the
    /// database lost its completion. A retry of the same request may take the key over.
    pub(super) fn lapsed(&self, hash: &str, now_ms: i64, lease_ms: i64) -> bool {
        self.state == "in_flight"
            && self.request_hash == hash
            && self.claimed_at_ms.saturating_add(lease_ms) <= now_ms
    }

    /// The stamp a takeover writes: now, and later than the stamp it replaces whatever the
    /// clocks of the replicas say, so the request it replaces can never complete.
    pub(super) fn next_stamp(&self, now_ms: i64) -> i64 {
        now_ms.max(self.claimed_at_ms.saturating_add(1))
    }
}

/// What claiming a key found: the key was free (or its claim had lapsed) and is now this
/// request's, under the stamp its completion must present; or it was taken.
pub(super) enum Claim {
    Claimed {
        /// The claim's stamp (`claimed_at_ms`).
        stamp: i64,
        /// The key was in flight under a claim that had lapsed, and was taken over.
        took_over: bool,
    },
    Existing(KeyRow),
}
