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
    /// The key's time is up (`expires_at_ms` passed): it is a new key.
    pub(super) expired: bool,
    /// The claim of the request in flight: the token its completion must still find. `None`
    /// for a key claimed by a server from before claims had tokens — that server completes
    /// without one, so such a key is never taken over; it expires after `key_ttl` as it did.
    pub(super) claim_id: Option<String>,
}

impl KeyRow {
    /// The claim a retry of the same request may take over once its lease has lapsed (which
    /// the database decides, on the claim's own clock): the key is in flight, under a token,
    /// for the same body.
    pub(super) fn takeover_candidate(&self, hash: &str) -> Option<&str> {
        (self.state == "in_flight" && self.request_hash == hash)
            .then_some(self.claim_id.as_deref())
            .flatten()
    }
}

/// Passes a claim makes at most: the key is read again after clearing an expired row for it,
/// or after losing its takeover to another request (which may have completed it since).
pub(super) const CLAIM_PASSES: u32 = 3;

/// A claim's token: what its completion and its release must present, so that a request whose
/// claim was taken over (or expired and was claimed again) can neither write nor remove
/// anything under the key.
pub(super) fn new_claim_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// What claiming a key found: the key was free (or its claim had lapsed) and is now this
/// request's, under the token its completion must present; or it was taken.
pub(super) enum Claim {
    Claimed {
        /// The claim's token (`claim_id`).
        token: String,
        /// The key was in flight under a claim whose lease had lapsed, and was taken over.
        took_over: bool,
    },
    Existing(KeyRow),
}
