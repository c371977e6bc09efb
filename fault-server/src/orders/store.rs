//! The built-in orders resource: `POST /orders` with Idempotency-Key semantics, `GET /orders/{id}`,
//! `POST /orders/{id}/pay`, on SQLite through a connection pool.
//!
//! Why a real database: the correct implementation relies on a UNIQUE constraint enforced with
//! locking by the storage engine. An in-memory fake serializes everything and lets the racy
//! implementation pass. Why selectable implementations: a check is only trustworthy once it has
//! been seen failing on the bug it exists for, so the server ships the bugs too.
//!
//! The semantics follow draft-ietf-httpapi-idempotency-key-header and Stripe: the first request
//! gets `201`; a retry after completion replays the stored response with `Idempotent-Replayed:
//! true` (`200` for a replayed creation); a request while the first is still in flight gets `409`
//! with `Retry-After`; the same key with a different body gets `422`; a missing key gets `400`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{params, ErrorCode, OptionalExtension};
use serde_json::json;

use crate::config::{IdempotencyImpl, OrdersConfig, PayImpl};

/// A response from the resource, with what the journal needs to know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceReply {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
    /// Id of an order this request created.
    pub created: Option<String>,
    /// True for an idempotent replay.
    pub replayed: bool,
    /// A state transition this request made.
    pub transition: Option<String>,
    /// The order the request acted on.
    pub resource: Option<String>,
}

impl ResourceReply {
    fn json(status: u16, body: serde_json::Value) -> ResourceReply {
        ResourceReply {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: Bytes::from(body.to_string()),
            created: None,
            replayed: false,
            transition: None,
            resource: None,
        }
    }

    /// An RFC 9457 problem response.
    pub fn problem(status: u16, kind: &str, title: &str, detail: String) -> ResourceReply {
        ResourceReply {
            content_type: "application/problem+json",
            ..ResourceReply::json(
                status,
                json!({ "type": format!("urn:fault-server:problem:{kind}"), "title": title, "status": status, "detail": detail }),
            )
        }
    }

    fn header(mut self, name: &'static str, value: String) -> ResourceReply {
        self.headers.push((name, value));
        self
    }
}

/// The store could not be opened or failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create a temporary database: {0}")]
    Temp(std::io::Error),
    #[error("cannot open database {path}: {source}")]
    Open { path: String, source: r2d2::Error },
    #[error("database error: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("database pool: {0}")]
    Pool(#[from] r2d2::Error),
    #[error("database task failed: {0}")]
    Task(String),
}

type Pool = r2d2::Pool<SqliteConnectionManager>;

/// The orders store and its selected implementations.
#[derive(Clone)]
pub struct Orders {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    cfg: OrdersConfig,
    path: PathBuf,
    // Keeps a temporary database alive for the server's lifetime.
    _tmp: Option<tempfile::TempDir>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS orders (
    id              TEXT PRIMARY KEY,
    -- deliberately not UNIQUE: the check-then-insert implementation must be able to race
    idempotency_key TEXT,
    status          TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    paid_at_ms      INTEGER
);
CREATE INDEX IF NOT EXISTS orders_by_key ON orders(idempotency_key);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key             TEXT NOT NULL UNIQUE,
    request_hash    TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
    response_status INTEGER,
    response_body   TEXT,
    order_id        TEXT,
    created_at_ms   INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS payments (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id  TEXT NOT NULL,
    at_ms     INTEGER NOT NULL
);
";

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn new_order_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("ord_{}", &u[..20])
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::ConstraintViolation)
}

/// What the key table says about a key, read after a failed claim.
struct KeyRow {
    request_hash: String,
    state: String,
    response_status: Option<u16>,
    response_body: Option<String>,
    order_id: Option<String>,
    expires_at_ms: i64,
}

enum Claim {
    Claimed,
    Existing(KeyRow),
}

impl Orders {
    /// Opens (creating if needed) the database and the pool.
    pub fn open(cfg: &OrdersConfig) -> Result<Orders, StoreError> {
        let (path, tmp) = match &cfg.database {
            Some(p) => (p.clone(), None),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("fault-server-db-")
                    .tempdir()
                    .map_err(StoreError::Temp)?;
                (dir.path().join("orders.sqlite"), Some(dir))
            }
        };
        // WAL is a property of the file: set it (and the schema) once, on one connection, before
        // the pool opens its connections concurrently — changing the journal mode from several
        // connections at once fails with SQLITE_BUSY instead of waiting.
        {
            let c = rusqlite::Connection::open(&path)?;
            c.execute_batch("PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL;")?;
            c.execute_batch(SCHEMA)?;
        }
        let manager = SqliteConnectionManager::file(&path).with_init(|c| {
            c.execute_batch("PRAGMA busy_timeout = 10000; PRAGMA synchronous = NORMAL;")
        });
        let pool = r2d2::Pool::builder()
            .max_size(cfg.pool_size)
            .min_idle(Some(cfg.pool_size.min(4)))
            .connection_timeout(Duration::from_secs(30))
            .build(manager)
            .map_err(|source| StoreError::Open {
                path: path.display().to_string(),
                source,
            })?;
        Ok(Orders {
            inner: Arc::new(Inner {
                pool,
                cfg: cfg.clone(),
                path,
                _tmp: tmp,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &std::path::Path {
        &self.inner.path
    }

    /// The configuration in force.
    pub fn config(&self) -> &OrdersConfig {
        &self.inner.cfg
    }

    /// Runs blocking database work on the blocking pool with a pooled connection.
    async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut rusqlite::Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let pool = self.inner.pool.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = pool.get()?;
            f(&mut conn)
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// Empties every table.
    pub async fn clear(&self) -> Result<(), StoreError> {
        self.db(|c| {
            c.execute_batch(
                "DELETE FROM orders; DELETE FROM idempotency_keys; DELETE FROM payments;",
            )?;
            Ok(())
        })
        .await
    }

    /// Number of orders stored under `key` (for verification).
    pub async fn count_for_key(&self, key: &str) -> Result<u64, StoreError> {
        let key = key.to_string();
        self.db(move |c| {
            Ok(c.query_row(
                "SELECT COUNT(*) FROM orders WHERE idempotency_key = ?1",
                [key],
                |r| r.get::<_, i64>(0),
            )? as u64)
        })
        .await
    }

    /// Number of orders.
    pub async fn count(&self) -> Result<u64, StoreError> {
        self.db(|c| {
            Ok(c.query_row("SELECT COUNT(*) FROM orders", [], |r| r.get::<_, i64>(0))? as u64)
        })
        .await
    }

    /// Number of recorded payments (transitions to paid) of an order.
    pub async fn payments_of(&self, id: &str) -> Result<u64, StoreError> {
        let id = id.to_string();
        self.db(move |c| {
            Ok(c.query_row(
                "SELECT COUNT(*) FROM payments WHERE order_id = ?1",
                [id],
                |r| r.get::<_, i64>(0),
            )? as u64)
        })
        .await
    }

    /// `POST /orders`.
    pub async fn create(
        &self,
        key: Option<String>,
        body: Bytes,
        body_hash: String,
    ) -> ResourceReply {
        let cfg = &self.inner.cfg;
        let order: serde_json::Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return ResourceReply::problem(
                    400,
                    "invalid-body",
                    "Request body is not JSON",
                    e.to_string(),
                )
            }
        };
        let key = match (cfg.idempotency, key) {
            (IdempotencyImpl::None, _) => None,
            (_, Some(k)) if !k.is_empty() => Some(k),
            (_, _) if cfg.require_key => {
                return ResourceReply::problem(
                    400,
                    "idempotency-key-missing",
                    "Idempotency-Key header required",
                    "POST /orders creates an order; send an Idempotency-Key header so a retry cannot create a second one".into(),
                )
            }
            (_, _) => None,
        };
        let result = match (cfg.idempotency, key) {
            (IdempotencyImpl::Unique, Some(k)) => self.create_unique(k, order, body_hash).await,
            (IdempotencyImpl::CheckThenInsert, Some(k)) => {
                self.create_check_then_insert(k, order).await
            }
            (_, k) => self.insert_order(k, order).await,
        };
        result.unwrap_or_else(|e| {
            tracing::error!("POST /orders failed: {e}");
            ResourceReply::problem(
                500,
                "store-error",
                "The order could not be stored",
                e.to_string(),
            )
        })
    }

    async fn insert_order(
        &self,
        key: Option<String>,
        order: serde_json::Value,
    ) -> Result<ResourceReply, StoreError> {
        let id = new_order_id();
        let body = order_json(&id, "pending", &order);
        let id2 = id.clone();
        self.db(move |c| {
            c.execute(
                "INSERT INTO orders (id, idempotency_key, status, body, created_at_ms) VALUES (?1, ?2, 'pending', ?3, ?4)",
                params![id2, key, order.to_string(), now_ms()],
            )?;
            Ok(())
        })
        .await?;
        Ok(created_reply(&id, body))
    }

    /// The seed's race: look, work, insert. Concurrent requests all see "not there".
    async fn create_check_then_insert(
        &self,
        key: String,
        order: serde_json::Value,
    ) -> Result<ResourceReply, StoreError> {
        let k = key.clone();
        let existing = self
            .db(move |c| {
                Ok(c.query_row(
                    "SELECT id, status, body FROM orders WHERE idempotency_key = ?1 ORDER BY created_at_ms LIMIT 1",
                    [k],
                    |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)),
                )
                .optional()?)
            })
            .await?;
        if let Some((id, status, stored)) = existing {
            let stored: serde_json::Value =
                serde_json::from_str(&stored).unwrap_or(serde_json::Value::Null);
            return Ok(replay_reply(
                200,
                order_json(&id, &status, &stored),
                Some(id),
            ));
        }
        self.work().await;
        self.insert_order(Some(key), order).await
    }

    /// Correct: claim the key under the UNIQUE constraint first, then work, then complete.
    async fn create_unique(
        &self,
        key: String,
        order: serde_json::Value,
        hash: String,
    ) -> Result<ResourceReply, StoreError> {
        let ttl_ms = self.inner.cfg.key_ttl.0.as_millis() as i64;
        let (k, h) = (key.clone(), hash.clone());
        let claim = self
            .db(move |c| {
                // Two passes: the second after clearing an expired row for this key.
                for _ in 0..2 {
                    let now = now_ms();
                    match c.execute(
                        "INSERT INTO idempotency_keys (key, request_hash, state, created_at_ms, expires_at_ms) VALUES (?1, ?2, 'in_flight', ?3, ?4)",
                        params![k, h, now, now + ttl_ms],
                    ) {
                        Ok(_) => return Ok(Claim::Claimed),
                        Err(e) if is_unique_violation(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                    let row = c
                        .query_row(
                            "SELECT request_hash, state, response_status, response_body, order_id, expires_at_ms FROM idempotency_keys WHERE key = ?1",
                            [&k],
                            |r| {
                                Ok(KeyRow {
                                    request_hash: r.get(0)?,
                                    state: r.get(1)?,
                                    response_status: r.get(2)?,
                                    response_body: r.get(3)?,
                                    order_id: r.get(4)?,
                                    expires_at_ms: r.get(5)?,
                                })
                            },
                        )
                        .optional()?;
                    match row {
                        Some(row) if row.expires_at_ms <= now => {
                            c.execute(
                                "DELETE FROM idempotency_keys WHERE key = ?1 AND expires_at_ms <= ?2",
                                params![k, now],
                            )?;
                        }
                        Some(row) => return Ok(Claim::Existing(row)),
                        // Deleted between our INSERT and SELECT (expiry by another request): retry.
                        None => {}
                    }
                }
                Err(StoreError::Task(format!("could not claim idempotency key {k:?}")))
            })
            .await?;

        let row = match claim {
            Claim::Claimed => return self.complete_claimed(key, order).await,
            Claim::Existing(row) => row,
        };
        if row.request_hash != hash {
            return Ok(ResourceReply::problem(
                422,
                "idempotency-key-reused",
                "Idempotency-Key reused with a different request",
                format!("key {key:?} was first used with a different request body; use a new key for a new request"),
            ));
        }
        if row.state == "in_flight" {
            return Ok(ResourceReply::problem(
                409,
                "request-in-progress",
                "A request with this Idempotency-Key is in progress",
                format!("the first request with key {key:?} has not completed; retry after the delay in Retry-After"),
            )
            .header("retry-after", self.inner.cfg.retry_after_s.to_string()));
        }
        let status = match row.response_status {
            Some(201) | None => 200,
            Some(s) => s,
        };
        Ok(replay_reply(
            status,
            row.response_body.unwrap_or_default(),
            row.order_id,
        ))
    }

    async fn complete_claimed(
        &self,
        key: String,
        order: serde_json::Value,
    ) -> Result<ResourceReply, StoreError> {
        self.work().await;
        let id = new_order_id();
        let body = order_json(&id, "pending", &order);
        let (id2, body2, k) = (id.clone(), body.clone(), key.clone());
        let done = self
            .db(move |c| {
                let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                tx.execute(
                    "INSERT INTO orders (id, idempotency_key, status, body, created_at_ms) VALUES (?1, ?2, 'pending', ?3, ?4)",
                    params![id2, k, order.to_string(), now_ms()],
                )?;
                tx.execute(
                    "UPDATE idempotency_keys SET state = 'completed', response_status = 201, response_body = ?1, order_id = ?2 WHERE key = ?3",
                    params![body2, id2, k],
                )?;
                tx.commit()?;
                Ok(())
            })
            .await;
        if let Err(e) = done {
            // Release the key so a retry can succeed instead of getting 409 forever.
            let k = key.clone();
            let _ = self
                .db(move |c| {
                    Ok(c.execute(
                        "DELETE FROM idempotency_keys WHERE key = ?1 AND state = 'in_flight'",
                        [k],
                    )?)
                })
                .await;
            return Err(e);
        }
        Ok(created_reply(&id, body))
    }

    async fn work(&self) {
        let d = self.inner.cfg.work_delay.0;
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }

    /// `GET /orders/{id}`.
    pub async fn get(&self, id: String) -> ResourceReply {
        let i = id.clone();
        let row = self
            .db(move |c| {
                Ok(
                    c.query_row("SELECT status, body FROM orders WHERE id = ?1", [i], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                    })
                    .optional()?,
                )
            })
            .await;
        let mut reply = match row {
            Ok(Some((status, body))) => {
                let body: serde_json::Value =
                    serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
                ResourceReply {
                    body: Bytes::from(order_json(&id, &status, &body)),
                    ..ResourceReply::json(200, json!(null))
                }
            }
            Ok(None) => not_found(&id),
            Err(e) => ResourceReply::problem(
                500,
                "store-error",
                "The order could not be read",
                e.to_string(),
            ),
        };
        reply.resource = Some(id);
        reply
    }

    /// `GET /orders?idempotency_key=K`: the orders stored under a key, for verification.
    pub async fn list_by_key(&self, key: String) -> ResourceReply {
        let k = key.clone();
        let rows = self
            .db(move |c| {
                let mut st = c.prepare(
                    "SELECT id FROM orders WHERE idempotency_key = ?1 ORDER BY created_at_ms",
                )?;
                let ids = st
                    .query_map([k], |r| r.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(ids)
            })
            .await;
        match rows {
            Ok(ids) => ResourceReply::json(
                200,
                json!({ "idempotency_key": key, "count": ids.len(), "ids": ids }),
            ),
            Err(e) => ResourceReply::problem(
                500,
                "store-error",
                "The orders could not be listed",
                e.to_string(),
            ),
        }
    }

    /// `POST /orders/{id}/pay`: pending → paid, once.
    pub async fn pay(&self, id: String) -> ResourceReply {
        let result = match self.inner.cfg.pay {
            PayImpl::Conditional => self.pay_conditional(id.clone()).await,
            PayImpl::ReadThenWrite => self.pay_read_then_write(id.clone()).await,
        };
        let mut reply = result.unwrap_or_else(|e| {
            ResourceReply::problem(
                500,
                "store-error",
                "The payment could not be stored",
                e.to_string(),
            )
        });
        reply.resource = Some(id);
        reply
    }

    /// The guard is in the WHERE clause; the affected row count says whether this was the one.
    async fn pay_conditional(&self, id: String) -> Result<ResourceReply, StoreError> {
        self.work().await;
        let i = id.clone();
        let (changed, status) = self
            .db(move |c| {
                let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let now = now_ms();
                let n = tx.execute(
                    "UPDATE orders SET status = 'paid', paid_at_ms = ?1 WHERE id = ?2 AND status = 'pending'",
                    params![now, i],
                )?;
                if n == 1 {
                    tx.execute("INSERT INTO payments (order_id, at_ms) VALUES (?1, ?2)", params![i, now])?;
                }
                let status: Option<String> = tx
                    .query_row("SELECT status FROM orders WHERE id = ?1", [&i], |r| r.get(0))
                    .optional()?;
                tx.commit()?;
                Ok((n == 1, status))
            })
            .await?;
        Ok(pay_reply(&id, changed, status))
    }

    /// The bug: read, work, write unconditionally. Two concurrent pays both see `pending`.
    async fn pay_read_then_write(&self, id: String) -> Result<ResourceReply, StoreError> {
        let i = id.clone();
        let status: Option<String> = self
            .db(move |c| {
                Ok(
                    c.query_row("SELECT status FROM orders WHERE id = ?1", [i], |r| r.get(0))
                        .optional()?,
                )
            })
            .await?;
        if status.as_deref() != Some("pending") {
            return Ok(pay_reply(&id, false, status));
        }
        self.work().await;
        let i = id.clone();
        self.db(move |c| {
            let now = now_ms();
            c.execute(
                "UPDATE orders SET status = 'paid', paid_at_ms = ?1 WHERE id = ?2",
                params![now, i],
            )?;
            c.execute(
                "INSERT INTO payments (order_id, at_ms) VALUES (?1, ?2)",
                params![i, now],
            )?;
            Ok(())
        })
        .await?;
        Ok(pay_reply(&id, true, Some("paid".into())))
    }
}

fn order_json(id: &str, status: &str, order: &serde_json::Value) -> String {
    json!({ "id": id, "status": status, "order": order }).to_string()
}

fn created_reply(id: &str, body: String) -> ResourceReply {
    ResourceReply {
        body: Bytes::from(body),
        created: Some(id.to_string()),
        resource: Some(id.to_string()),
        ..ResourceReply::json(201, json!(null))
    }
    .header("location", format!("/orders/{id}"))
}

fn replay_reply(status: u16, body: String, id: Option<String>) -> ResourceReply {
    let mut r = ResourceReply {
        body: Bytes::from(body),
        replayed: true,
        resource: id.clone(),
        ..ResourceReply::json(status, json!(null))
    }
    .header("idempotent-replayed", "true".into());
    if let Some(id) = id {
        r = r.header("location", format!("/orders/{id}"));
    }
    r
}

fn not_found(id: &str) -> ResourceReply {
    ResourceReply::problem(
        404,
        "not-found",
        "No such order",
        format!("there is no order {id:?}"),
    )
}

fn pay_reply(id: &str, changed: bool, status: Option<String>) -> ResourceReply {
    match status {
        None => not_found(id),
        Some(status) if changed => ResourceReply {
            transition: Some("pending->paid".into()),
            ..ResourceReply::json(
                200,
                json!({ "id": id, "status": status, "transition": "pending->paid" }),
            )
        },
        Some(status) => ResourceReply::json(
            200,
            json!({ "id": id, "status": status, "transition": null, "note": format!("order is already {status}; nothing changed") }),
        ),
    }
}
