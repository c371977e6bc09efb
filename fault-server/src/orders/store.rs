//! The built-in orders resource: `POST /orders` with Idempotency-Key semantics, `GET /orders/{id}`,
//! `POST /orders/{id}/pay`, on SQLite ([`super::sqlite`], the embedded default) or PostgreSQL
//! ([`super::postgres`], for replicas that share one store) through a connection pool.
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
//! A key held in flight longer than `claim_lease` (its request's server died, or the database
//! lost the completion) is taken over by the next request with the same key and body; the
//! completion must still find its claim's token, so the holder, if only slow, writes nothing.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::json;

use super::backend::{Claim, StoreError};
use super::postgres::{PgStore, SharedCounters};
use super::sqlite::SqliteStore;
use crate::config::{Database, IdempotencyImpl, OrdersConfig, PayImpl};

/// A response from the resource, with what the journal needs to know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceReply {
    /// The status code.
    pub status: u16,
    /// The body's `Content-Type`.
    pub content_type: &'static str,
    /// Headers besides it (`Location`, `Retry-After`, `Idempotent-Replayed`).
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Bytes,
    /// Id of an order this request created.
    pub created: Option<String>,
    /// True for an idempotent replay.
    pub replayed: bool,
    /// A state transition this request made.
    pub transition: Option<String>,
    /// The order the request acted on.
    pub resource: Option<String>,
    /// Why the store refused the request without acting on it (`store-unavailable`: the
    /// database did not answer within its timeouts); the journal records it as `rejected`.
    pub refused: Option<&'static str>,
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
            refused: None,
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

    /// The answer to a request the store failed: `503` with `Retry-After` when the database did
    /// not answer within its timeouts or could not be reached — a retry later may succeed —
    /// else `500`. The `503` is journaled `rejected: store-unavailable` when the request had no
    /// effect; not when it may have had (no answer at all, or the connection broke under a
    /// statement: a commit may have been on its way). With its key, a retry then finds what the
    /// first attempt left: its order, or its key still in progress (`409`) when the attempt's
    /// claim got through and no more did.
    pub fn store_failed(e: &StoreError, title: &str) -> ResourceReply {
        if !e.is_unavailable() {
            tracing::error!("{title}: {e}");
            return ResourceReply::problem(500, "store-error", title, e.to_string());
        }
        tracing::warn!("{title}: {e}");
        ResourceReply {
            refused: (!e.effect_unknown()).then_some("store-unavailable"),
            ..ResourceReply::problem(
                503,
                "store-unavailable",
                "The orders database did not answer in time",
                e.to_string(),
            )
        }
        .header("retry-after", "1".to_string())
    }
}

/// The orders store and its selected implementations.
#[derive(Clone)]
pub struct Orders {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    cfg: OrdersConfig,
}

/// Where the orders are. Each backend runs the same statements in its own dialect; what the
/// implementations do with them (and so every reply) is decided here, once.
enum Backend {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// Runs the same operation on whichever backend holds the orders; on PostgreSQL within the
/// store's bound on an operation ([`PgStore::bounded`]).
macro_rules! on_backend {
    ($self:expr, $s:ident => $e:expr) => {
        match &$self.inner.backend {
            Backend::Sqlite($s) => $e,
            Backend::Postgres($s) => $s.bounded(async { $e }).await,
        }
    };
}

fn new_order_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("ord_{}", &u[..20])
}

impl Orders {
    /// Opens (creating if needed) the database, its schema and the pool: SQLite (a file, or a
    /// fresh temporary one) or PostgreSQL, as `orders.database` says.
    pub async fn open(cfg: &OrdersConfig) -> Result<Orders, StoreError> {
        let backend = match &cfg.database {
            Some(Database::Postgres(url)) => Backend::Postgres(
                PgStore::open(
                    url,
                    cfg.pool_size,
                    cfg.statement_timeout.0,
                    cfg.lock_timeout.0,
                )
                .await?,
            ),
            Some(Database::Sqlite(path)) => {
                let (path, size) = (path.clone(), cfg.pool_size);
                Backend::Sqlite(
                    tokio::task::spawn_blocking(move || SqliteStore::open(Some(&path), size))
                        .await
                        .map_err(|e| StoreError::Task(e.to_string()))??,
                )
            }
            None => {
                let size = cfg.pool_size;
                Backend::Sqlite(
                    tokio::task::spawn_blocking(move || SqliteStore::open(None, size))
                        .await
                        .map_err(|e| StoreError::Task(e.to_string()))??,
                )
            }
        };
        Ok(Orders {
            inner: Arc::new(Inner {
                backend,
                cfg: cfg.clone(),
            }),
        })
    }

    /// The SQLite database file, when the orders are on SQLite.
    pub fn path(&self) -> Option<&std::path::Path> {
        match &self.inner.backend {
            Backend::Sqlite(s) => Some(s.path()),
            Backend::Postgres(_) => None,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &OrdersConfig {
        &self.inner.cfg
    }

    /// The schedule's counters in the orders' database, when it is PostgreSQL.
    pub fn shared_counters(&self) -> Option<SharedCounters> {
        match &self.inner.backend {
            Backend::Postgres(p) => Some(SharedCounters::new(p.clone())),
            Backend::Sqlite(_) => None,
        }
    }

    /// Open database connections, when the pool says (PostgreSQL).
    pub fn database_connections(&self) -> Option<usize> {
        match &self.inner.backend {
            Backend::Postgres(p) => Some(p.connections()),
            Backend::Sqlite(_) => None,
        }
    }

    /// Whether the database answers now: on PostgreSQL a connection of the pool and a
    /// `SELECT 1` within `within`; SQLite, a file of this process, always does. The reason when
    /// it does not.
    pub async fn reachable(&self, within: std::time::Duration) -> Result<(), String> {
        match &self.inner.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(p) => match tokio::time::timeout(within, p.ping()).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {within:?}")),
            },
        }
    }

    /// Which database holds the orders: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match &self.inner.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Empties every table of the orders (on PostgreSQL: the tables this server uses).
    pub async fn clear(&self) -> Result<(), StoreError> {
        on_backend!(self, s => s.clear().await)
    }

    /// Number of orders stored under `key` (for verification).
    pub async fn count_for_key(&self, key: &str) -> Result<u64, StoreError> {
        on_backend!(self, s => s.count_for_key(key).await)
    }

    /// Number of orders.
    pub async fn count(&self) -> Result<u64, StoreError> {
        on_backend!(self, s => s.count().await)
    }

    /// Number of recorded payments (transitions to paid) of an order.
    pub async fn payments_of(&self, id: &str) -> Result<u64, StoreError> {
        on_backend!(self, s => s.payments_of(id).await)
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
        result.unwrap_or_else(|e| ResourceReply::store_failed(&e, "The order could not be stored"))
    }

    async fn insert_order(
        &self,
        key: Option<String>,
        order: serde_json::Value,
    ) -> Result<ResourceReply, StoreError> {
        let id = new_order_id();
        let body = order_json(&id, "pending", &order);
        let order = order.to_string();
        on_backend!(self, s => s.insert_order(&id, key.as_deref(), &order).await)?;
        Ok(created_reply(&id, body))
    }

    /// The seed's race: look, work, insert. Concurrent requests all see "not there".
    async fn create_check_then_insert(
        &self,
        key: String,
        order: serde_json::Value,
    ) -> Result<ResourceReply, StoreError> {
        let existing = on_backend!(self, s => s.first_by_key(&key).await)?;
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
        let cfg = &self.inner.cfg;
        let ttl_ms = cfg.key_ttl.0.as_millis() as i64;
        let lease_ms = cfg.lease().as_millis() as i64;
        let claim = on_backend!(self, s => s.claim(&key, &hash, ttl_ms, lease_ms).await)?;
        let row = match claim {
            Claim::Claimed { token, took_over } => {
                if took_over {
                    tracing::warn!(
                        "key {key:?}: its request in flight held it past claim_lease ({:?}); taken over by this retry",
                        cfg.lease()
                    );
                }
                return self.complete_claimed(key, token, order).await;
            }
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
        token: String,
        order: serde_json::Value,
    ) -> Result<ResourceReply, StoreError> {
        self.work().await;
        let id = new_order_id();
        let body = order_json(&id, "pending", &order);
        let order = order.to_string();
        let done = on_backend!(self, s => s.complete(&key, &token, &id, &order, &body).await);
        match done {
            Ok(true) => Ok(created_reply(&id, body)),
            // The key is no longer under our claim: a retry took it over, and makes the order.
            Ok(false) => Ok(ResourceReply::problem(
                409,
                "request-in-progress",
                "A request with this Idempotency-Key is in progress",
                format!(
                    "this request's claim on key {key:?} is no longer current (held longer than claim_lease, {:?}, and taken over by a retry, or expired after key_ttl); it wrote no order: retry after the delay in Retry-After for the key's answer",
                    self.inner.cfg.lease()
                ),
            )
            .header("retry-after", self.inner.cfg.retry_after_s.to_string())),
            Err(e) => {
                // Release the key so a retry can succeed instead of getting 409 until the
                // claim lapses — unless the database gave no answer: then the release would
                // wait its whole bound on the same silence, and the transaction it would wait
                // behind may still commit.
                if !matches!(e, StoreError::NoAnswer(_)) {
                    let _ = on_backend!(self, s => s.release(&key, &token).await);
                }
                Err(e)
            }
        }
    }

    async fn work(&self) {
        let d = self.inner.cfg.work_delay.0;
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }

    /// `GET /orders/{id}`.
    pub async fn get(&self, id: String) -> ResourceReply {
        let row = on_backend!(self, s => s.get(&id).await);
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
            Err(e) => ResourceReply::store_failed(&e, "The order could not be read"),
        };
        reply.resource = Some(id);
        reply
    }

    /// `GET /orders?idempotency_key=K`: the orders stored under a key, for verification.
    pub async fn list_by_key(&self, key: String) -> ResourceReply {
        match on_backend!(self, s => s.ids_by_key(&key).await) {
            Ok(ids) => ResourceReply::json(
                200,
                json!({ "idempotency_key": key, "count": ids.len(), "ids": ids }),
            ),
            Err(e) => ResourceReply::store_failed(&e, "The orders could not be listed"),
        }
    }

    /// `POST /orders/{id}/pay`: pending → paid, once.
    pub async fn pay(&self, id: String) -> ResourceReply {
        let result = match self.inner.cfg.pay {
            PayImpl::Conditional => self.pay_conditional(&id).await,
            PayImpl::ReadThenWrite => self.pay_read_then_write(&id).await,
        };
        let mut reply = result
            .unwrap_or_else(|e| ResourceReply::store_failed(&e, "The payment could not be stored"));
        reply.resource = Some(id);
        reply
    }

    /// The guard is in the WHERE clause; the affected row count says whether this was the one.
    async fn pay_conditional(&self, id: &str) -> Result<ResourceReply, StoreError> {
        self.work().await;
        let (changed, status) = on_backend!(self, s => s.pay_conditional(id).await)?;
        Ok(pay_reply(id, changed, status))
    }

    /// The bug: read, work, write unconditionally. Two concurrent pays both see `pending`.
    async fn pay_read_then_write(&self, id: &str) -> Result<ResourceReply, StoreError> {
        let status = on_backend!(self, s => s.status_of(id).await)?;
        if status.as_deref() != Some("pending") {
            return Ok(pay_reply(id, false, status));
        }
        self.work().await;
        on_backend!(self, s => s.pay_unconditional(id).await)?;
        Ok(pay_reply(id, true, Some("paid".into())))
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
