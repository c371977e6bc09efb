//! The orders on SQLite (the embedded default): a file in WAL mode, a pool of connections, each
//! statement run on the blocking pool.

use std::path::{Path, PathBuf};
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{params, ErrorCode, OptionalExtension};

use super::backend::{new_claim_id, now_ms, Claim, KeyRow, StoreError, CLAIM_PASSES};

type Pool = r2d2::Pool<SqliteConnectionManager>;

/// Adds the claim's columns to a key table made before they existed (SQLite has no `ADD
/// COLUMN IF NOT EXISTS`), in one write transaction: two servers opening the same old file
/// cannot both add them.
fn add_claim_columns(c: &rusqlite::Connection) -> Result<(), StoreError> {
    c.execute_batch("BEGIN IMMEDIATE")?;
    let added = (|| {
        for (column, ty) in [("claimed_at_ms", "INTEGER"), ("claim_id", "TEXT")] {
            let present: i64 = c.query_row(
                "SELECT COUNT(*) FROM pragma_table_info('idempotency_keys') WHERE name = ?1",
                [column],
                |r| r.get(0),
            )?;
            if present == 0 {
                c.execute_batch(&format!(
                    "ALTER TABLE idempotency_keys ADD COLUMN {column} {ty}"
                ))?;
            }
        }
        Ok::<(), rusqlite::Error>(())
    })();
    match added {
        Ok(()) => c.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = c.execute_batch("ROLLBACK");
            return Err(e.into());
        }
    }
    Ok(())
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
    expires_at_ms   INTEGER NOT NULL,
    -- the claim of the request in flight: when it was made (its lease counts from then), and
    -- the token its completion must present
    claimed_at_ms   INTEGER,
    claim_id        TEXT
);
CREATE TABLE IF NOT EXISTS payments (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id  TEXT NOT NULL,
    at_ms     INTEGER NOT NULL
);
";

pub(super) struct SqliteStore {
    pool: Pool,
    path: PathBuf,
    // Keeps a temporary database alive for the server's lifetime.
    _tmp: Option<tempfile::TempDir>,
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::ConstraintViolation)
}

impl SqliteStore {
    /// Opens (creating if needed) the file at `path`, or a fresh temporary one.
    pub(super) fn open(path: Option<&Path>, pool_size: u32) -> Result<SqliteStore, StoreError> {
        let (path, tmp) = match path {
            Some(p) => (p.to_path_buf(), None),
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
            add_claim_columns(&c)?;
        }
        let manager = SqliteConnectionManager::file(&path).with_init(|c| {
            c.execute_batch("PRAGMA busy_timeout = 10000; PRAGMA synchronous = NORMAL;")
        });
        let pool = r2d2::Pool::builder()
            .max_size(pool_size)
            .min_idle(Some(pool_size.min(4)))
            .connection_timeout(Duration::from_secs(30))
            .build(manager)
            .map_err(|source| StoreError::Open {
                path: path.display().to_string(),
                source,
            })?;
        Ok(SqliteStore {
            pool,
            path,
            _tmp: tmp,
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Runs blocking database work on the blocking pool with a pooled connection.
    async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut rusqlite::Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = pool.get()?;
            f(&mut conn)
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
    }

    pub(super) async fn clear(&self) -> Result<(), StoreError> {
        self.db(|c| {
            c.execute_batch(
                "DELETE FROM orders; DELETE FROM idempotency_keys; DELETE FROM payments;",
            )?;
            Ok(())
        })
        .await
    }

    async fn count_where(&self, sql: &'static str, arg: Option<String>) -> Result<u64, StoreError> {
        self.db(move |c| {
            let n: i64 = match arg {
                Some(a) => c.query_row(sql, [a], |r| r.get(0))?,
                None => c.query_row(sql, [], |r| r.get(0))?,
            };
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }

    pub(super) async fn count_for_key(&self, key: &str) -> Result<u64, StoreError> {
        self.count_where(
            "SELECT COUNT(*) FROM orders WHERE idempotency_key = ?1",
            Some(key.to_string()),
        )
        .await
    }

    pub(super) async fn count(&self) -> Result<u64, StoreError> {
        self.count_where("SELECT COUNT(*) FROM orders", None).await
    }

    pub(super) async fn payments_of(&self, id: &str) -> Result<u64, StoreError> {
        self.count_where(
            "SELECT COUNT(*) FROM payments WHERE order_id = ?1",
            Some(id.to_string()),
        )
        .await
    }

    pub(super) async fn insert_order(
        &self,
        id: &str,
        key: Option<&str>,
        order: &str,
    ) -> Result<(), StoreError> {
        let (id, key, order) = (id.to_string(), key.map(str::to_string), order.to_string());
        self.db(move |c| {
            c.execute(
                "INSERT INTO orders (id, idempotency_key, status, body, created_at_ms) VALUES (?1, ?2, 'pending', ?3, ?4)",
                params![id, key, order, now_ms()],
            )?;
            Ok(())
        })
        .await
    }

    pub(super) async fn first_by_key(
        &self,
        key: &str,
    ) -> Result<Option<(String, String, String)>, StoreError> {
        let k = key.to_string();
        self.db(move |c| {
            Ok(c.query_row(
                "SELECT id, status, body FROM orders WHERE idempotency_key = ?1 ORDER BY created_at_ms LIMIT 1",
                [k],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)),
            )
            .optional()?)
        })
        .await
    }

    pub(super) async fn claim(
        &self,
        key: &str,
        hash: &str,
        ttl_ms: i64,
        lease_ms: i64,
    ) -> Result<Claim, StoreError> {
        let (k, h) = (key.to_string(), hash.to_string());
        self.db(move |c| {
            for pass in 0..CLAIM_PASSES {
                let now = now_ms();
                let token = new_claim_id();
                match c.execute(
                    "INSERT INTO idempotency_keys (key, request_hash, state, created_at_ms, claimed_at_ms, claim_id, expires_at_ms) VALUES (?1, ?2, 'in_flight', ?3, ?3, ?4, ?5)",
                    params![k, h, now, token, now + ttl_ms],
                ) {
                    Ok(_) => {
                        return Ok(Claim::Claimed {
                            token,
                            took_over: false,
                        })
                    }
                    Err(e) if is_unique_violation(&e) => {}
                    Err(e) => return Err(e.into()),
                }
                let row = c
                    .query_row(
                        "SELECT request_hash, state, response_status, response_body, order_id, expires_at_ms <= ?2, claim_id FROM idempotency_keys WHERE key = ?1",
                        params![k, now],
                        |r| {
                            Ok(KeyRow {
                                request_hash: r.get(0)?,
                                state: r.get(1)?,
                                response_status: r.get(2)?,
                                response_body: r.get(3)?,
                                order_id: r.get(4)?,
                                expired: r.get(5)?,
                                claim_id: r.get(6)?,
                            })
                        },
                    )
                    .optional()?;
                match row {
                    Some(row) if row.expired => {
                        c.execute(
                            "DELETE FROM idempotency_keys WHERE key = ?1 AND expires_at_ms <= ?2",
                            params![k, now],
                        )?;
                    }
                    Some(row) => {
                        // Taken over only if it is still the claim just read and its lease has
                        // run out: of two retries racing for it, one gets it.
                        if let Some(held) = row.takeover_candidate(&h) {
                            let taken = c.execute(
                                "UPDATE idempotency_keys SET claim_id = ?1, claimed_at_ms = ?2, expires_at_ms = ?3 WHERE key = ?4 AND state = 'in_flight' AND claim_id = ?5 AND claimed_at_ms + ?6 <= ?2",
                                params![token, now, now + ttl_ms, k, held, lease_ms],
                            )?;
                            if taken == 1 {
                                return Ok(Claim::Claimed {
                                    token,
                                    took_over: true,
                                });
                            }
                            if pass + 1 < CLAIM_PASSES {
                                continue;
                            }
                        }
                        return Ok(Claim::Existing(row));
                    }
                    // Deleted between our INSERT and SELECT (expiry by another request): retry.
                    None => {}
                }
            }
            Err(StoreError::Task(format!("could not claim idempotency key {k:?}")))
        })
        .await
    }

    /// Writes the order and completes its key, if the key is still this claim's (`token`):
    /// `false`, and nothing written, when it is not (a retry took it over).
    pub(super) async fn complete(
        &self,
        key: &str,
        token: &str,
        id: &str,
        order: &str,
        response: &str,
    ) -> Result<bool, StoreError> {
        let (k, token, id, order, response) = (
            key.to_string(),
            token.to_string(),
            id.to_string(),
            order.to_string(),
            response.to_string(),
        );
        self.db(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let ours = tx.execute(
                "UPDATE idempotency_keys SET state = 'completed', response_status = 201, response_body = ?1, order_id = ?2 WHERE key = ?3 AND state = 'in_flight' AND claim_id = ?4",
                params![response, id, k, token],
            )?;
            if ours == 0 {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO orders (id, idempotency_key, status, body, created_at_ms) VALUES (?1, ?2, 'pending', ?3, ?4)",
                params![id, k, order, now_ms()],
            )?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    /// Gives the key up, if it is still this claim's.
    pub(super) async fn release(&self, key: &str, token: &str) -> Result<(), StoreError> {
        let (k, token) = (key.to_string(), token.to_string());
        self.db(move |c| {
            c.execute(
                "DELETE FROM idempotency_keys WHERE key = ?1 AND state = 'in_flight' AND claim_id = ?2",
                params![k, token],
            )?;
            Ok(())
        })
        .await
    }

    pub(super) async fn get(&self, id: &str) -> Result<Option<(String, String)>, StoreError> {
        let i = id.to_string();
        self.db(move |c| {
            Ok(
                c.query_row("SELECT status, body FROM orders WHERE id = ?1", [i], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })
                .optional()?,
            )
        })
        .await
    }

    pub(super) async fn ids_by_key(&self, key: &str) -> Result<Vec<String>, StoreError> {
        let k = key.to_string();
        self.db(move |c| {
            let mut st = c.prepare(
                "SELECT id FROM orders WHERE idempotency_key = ?1 ORDER BY created_at_ms",
            )?;
            let ids = st
                .query_map([k], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ids)
        })
        .await
    }

    pub(super) async fn pay_conditional(
        &self,
        id: &str,
    ) -> Result<(bool, Option<String>), StoreError> {
        let i = id.to_string();
        self.db(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let now = now_ms();
            let n = tx.execute(
                "UPDATE orders SET status = 'paid', paid_at_ms = ?1 WHERE id = ?2 AND status = 'pending'",
                params![now, i],
            )?;
            if n == 1 {
                tx.execute(
                    "INSERT INTO payments (order_id, at_ms) VALUES (?1, ?2)",
                    params![i, now],
                )?;
            }
            let status: Option<String> = tx
                .query_row("SELECT status FROM orders WHERE id = ?1", [&i], |r| r.get(0))
                .optional()?;
            tx.commit()?;
            Ok((n == 1, status))
        })
        .await
    }

    pub(super) async fn status_of(&self, id: &str) -> Result<Option<String>, StoreError> {
        let i = id.to_string();
        self.db(move |c| {
            Ok(
                c.query_row("SELECT status FROM orders WHERE id = ?1", [i], |r| r.get(0))
                    .optional()?,
            )
        })
        .await
    }

    pub(super) async fn pay_unconditional(&self, id: &str) -> Result<(), StoreError> {
        let i = id.to_string();
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
        .await
    }
}
