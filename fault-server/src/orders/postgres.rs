//! The orders on PostgreSQL, for several fault-server replicas sharing one store: tokio-postgres
//! through a deadpool pool, every statement prepared once per connection.
//!
//! The statements are the SQLite ones, translated: the `unique` implementation claims its key
//! with `INSERT … ON CONFLICT (key) DO NOTHING` under the table's real `UNIQUE` constraint (a
//! concurrent claimer waits for the winner's commit, then inserts nothing and reads the winner's
//! row); `check-then-insert` is a plain `SELECT`, the work, a plain `INSERT`; the conditional pay
//! is one `UPDATE … WHERE status = 'pending'` whose row count decides. Under PostgreSQL's default
//! READ COMMITTED isolation that `UPDATE` re-checks its `WHERE` on the row a concurrent payer
//! committed, so exactly one transitions.
//!
//! The schema is created at start when missing, under a transaction-scoped advisory lock, so
//! replicas that start together do not trip over each other's `CREATE TABLE IF NOT EXISTS` (which
//! is not safe against a concurrent creation of the same table). Its tables live in the first
//! schema of the connection's `search_path`, which a URL can set (`options=-csearch_path%3D…`).
//!
//! The same database can also hold the schedule's counters (`state: shared`): one row per
//! counter, bumped with `INSERT … ON CONFLICT DO UPDATE … RETURNING` so that every replica sees
//! one sequence.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime, Timeouts};
use tokio_postgres::NoTls;

use super::backend::{new_claim_id, now_ms, Claim, KeyRow, StoreError, CLAIM_PASSES};
use crate::config::PostgresUrl;

/// Key of the advisory lock held while the schema is created ("fault-sv").
const SCHEMA_LOCK: i64 = 0x6661_756c_742d_7376;
/// The longest the schema's creation waits for a lock or a statement, in milliseconds.
const SCHEMA_WAIT_MS: u64 = 60_000;
/// The least an operation of the store is given before the database counts as not answering:
/// room for a new connection and a statement, whatever a short `statement_timeout` says.
const MIN_ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The database's clock, in milliseconds since the Unix epoch (`clock_timestamp()`: the time of
/// the statement, not of the transaction's start).
const DB_NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
/// The longest the addition of the claim's columns waits for the key table's lock, each try.
const ALTER_WAIT_MS: u64 = 1_000;
/// How many times it tries, a second apart: for about a minute.
const ALTER_TRIES: u32 = 30;

/// Adds the claim's columns to a key table made before they existed. Looked for first: `ALTER
/// TABLE` takes the table's exclusive lock even when there is nothing to add, and every claim
/// of every replica would queue behind it. When they are missing, the `ALTER` waits at most a
/// second for that lock (so live replicas' claims wait no longer than that behind it) and is
/// tried again, up to a minute.
async fn add_claim_columns(
    client: &mut deadpool_postgres::Object,
) -> Result<(), tokio_postgres::Error> {
    let present: i64 = client
        .query_one(
            "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'idempotency_keys' AND column_name IN ('claimed_at_ms', 'claim_id')",
            &[],
        )
        .await?
        .get(0);
    if present == 2 {
        return Ok(());
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let tx = client.transaction().await?;
        let altered = tx
            .batch_execute(&format!(
                "SET LOCAL lock_timeout = {ALTER_WAIT_MS}; SET LOCAL statement_timeout = {}; ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS claimed_at_ms BIGINT, ADD COLUMN IF NOT EXISTS claim_id TEXT",
                ALTER_WAIT_MS * 5
            ))
            .await;
        match altered {
            Ok(()) => return tx.commit().await,
            Err(e)
                if tries < ALTER_TRIES
                    && e.code().is_some_and(|c| {
                        *c == tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE
                            || *c == tokio_postgres::error::SqlState::QUERY_CANCELED
                    }) =>
            {
                drop(tx);
                tokio::time::sleep(Duration::from_millis(ALTER_WAIT_MS)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS orders (
    id              TEXT PRIMARY KEY,
    -- deliberately not UNIQUE: the check-then-insert implementation must be able to race
    idempotency_key TEXT,
    status          TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    paid_at_ms      BIGINT
);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key             TEXT NOT NULL UNIQUE,
    request_hash    TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
    response_status INTEGER,
    response_body   TEXT,
    order_id        TEXT,
    created_at_ms   BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL,
    -- the claim of the request in flight: when it was made, on the database's clock (its
    -- lease counts from then), and the token its completion must present
    claimed_at_ms   BIGINT,
    claim_id        TEXT
);
CREATE TABLE IF NOT EXISTS payments (
    id        BIGSERIAL PRIMARY KEY,
    order_id  TEXT NOT NULL,
    at_ms     BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS schedule_counters (
    name   TEXT PRIMARY KEY,
    value  BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS key_attempts (
    key       TEXT PRIMARY KEY,
    attempts  BIGINT NOT NULL
);
";

/// The index that finds a key's orders, made with the tables.
const ORDERS_INDEX: &str = "CREATE INDEX IF NOT EXISTS orders_by_key ON orders(idempotency_key)";

#[derive(Clone)]
pub(crate) struct PgStore {
    pool: Pool,
    /// The longest one operation may take: its wait for a connection and its statements.
    answer_within: Duration,
    /// The connection health asks `SELECT 1` on, kept apart from the pool (and opened again
    /// when it closed): whether the database answers is not whether the requests have left a
    /// connection free. A locked table holds every pooled connection in its wait while the
    /// database answers.
    health: std::sync::Arc<tokio::sync::Mutex<Option<tokio_postgres::Client>>>,
    health_cfg: std::sync::Arc<tokio_postgres::Config>,
}

impl PgStore {
    /// Connects, and creates the schema when it is missing. Every connection runs with
    /// `statement_timeout` and `lock_timeout` set, and a request waits at most
    /// `statement_timeout` for a connection of the pool: a blocked database (a lock held, a
    /// server that stopped answering) costs a request a bounded wait, answered `503`, never a
    /// hang as long as the lock.
    pub(super) async fn open(
        url: &PostgresUrl,
        pool_size: u32,
        statement_timeout: Duration,
        lock_timeout: Duration,
    ) -> Result<PgStore, StoreError> {
        let mut cfg = url.pg_config().map_err(|source| StoreError::PostgresUrl {
            url: url.redacted(),
            source,
        })?;
        if cfg.get_connect_timeout().is_none() {
            cfg.connect_timeout(Duration::from_secs(10));
        }
        let connect_timeout = cfg.get_connect_timeout().copied();
        let answer_within = statement_timeout.saturating_mul(2).max(MIN_ANSWER_WITHIN);
        // Server settings for every connection, after whatever options the URL gives. A
        // transaction left idle — its client gave up on a silent link between two statements —
        // is ended by the server within the operations' bound, and with it the row locks it
        // held (a key's completion locks the key): they would otherwise stay until the server
        // noticed the dead peer, hours later.
        let options = format!(
            "{} -c statement_timeout={} -c lock_timeout={} -c idle_in_transaction_session_timeout={}",
            cfg.get_options().unwrap_or(""),
            statement_timeout.as_millis().max(1),
            lock_timeout.as_millis().max(1),
            answer_within.as_millis(),
        );
        cfg.options(options.trim_start());
        // A connection whose peer vanished (a host lost, a failover without a reset) is closed
        // by the kernel within the operations' bound, not after minutes of retransmits, and so
        // leaves the pool (which checks each connection it hands out for being closed).
        cfg.tcp_user_timeout(answer_within);
        cfg.keepalives(true);
        cfg.keepalives_idle(answer_within);
        if cfg.get_application_name().is_none() {
            cfg.application_name("fault-server");
        }
        let health_cfg = std::sync::Arc::new(cfg.clone());
        let manager = Manager::from_config(
            cfg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size as usize)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(statement_timeout))
            .create_timeout(Some(statement_timeout.max(Duration::from_secs(1))))
            .build()
            .map_err(|e| StoreError::PoolBuild(e.to_string()))?;
        // The first connection is the server starting, not a request waiting: it gets the
        // connection's own timeout (the URL's `connect_timeout`, else 10 s), not the requests'
        // bound, so a busy database host delays the start instead of failing it.
        let first = Timeouts {
            wait: connect_timeout,
            create: connect_timeout,
            recycle: None,
        };
        let mut client = pool
            .timeout_get(&first)
            .await
            .map_err(|source| StoreError::Connect {
                url: url.redacted(),
                source,
            })?;
        let schema = async {
            let tx = client.transaction().await?;
            // Starting, not serving: another replica creating the schema holds the advisory lock
            // for as long as that takes, which a busy database can make longer than the
            // requests' `lock_timeout`. This transaction waits up to a minute instead.
            tx.batch_execute(&format!(
                "SET LOCAL lock_timeout = {SCHEMA_WAIT_MS}; SET LOCAL statement_timeout = {SCHEMA_WAIT_MS}"
            ))
            .await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
                .await?;
            tx.batch_execute(SCHEMA).await?;
            // Only when it is missing: `CREATE INDEX IF NOT EXISTS` takes the table's SHARE
            // lock before it looks, so at every start it would wait for the live replicas'
            // writes to `orders` and hold their next ones behind it. Looked for where the
            // tables are: the first schema of the `search_path`.
            let indexed: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'orders_by_key')",
                    &[],
                )
                .await?
                .get(0);
            if !indexed {
                tx.batch_execute(ORDERS_INDEX).await?;
            }
            tx.commit().await
        };
        schema.await.map_err(|source| StoreError::Schema {
            url: url.redacted(),
            source,
        })?;
        add_claim_columns(&mut client)
            .await
            .map_err(|source| StoreError::Schema {
                url: url.redacted(),
                source,
            })?;
        drop(client);
        Ok(PgStore {
            pool,
            answer_within,
            health: std::sync::Arc::default(),
            health_cfg,
        })
    }

    /// Runs one operation of the store within twice `statement_timeout` (at least 2 s) — its
    /// wait for a connection and its statements, each bounded by that timeout — else fails it
    /// with [`StoreError::NoAnswer`].
    ///
    /// Why a bound of the client's own: `statement_timeout` and `lock_timeout` are enforced by
    /// the database server, and a server that stops answering altogether (a stalled network, a
    /// frozen host) enforces nothing. Without it a request on a connection it already had waited
    /// as long as the stall.
    pub(crate) async fn bounded<T>(
        &self,
        op: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.answer_within, op).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::NoAnswer(self.answer_within)),
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// The database answers a trivial query, on health's own connection (opened when there is
    /// none, or the last one closed). Callers bound the wait.
    pub(super) async fn ping(&self) -> Result<(), StoreError> {
        let mut held = self.health.lock().await;
        if held.as_ref().is_none_or(tokio_postgres::Client::is_closed) {
            let (client, connection) = self.health_cfg.connect(NoTls).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!("health's database connection ended: {e}");
                }
            });
            *held = Some(client);
        }
        if let Some(c) = held.as_ref() {
            c.simple_query("SELECT 1").await?;
        }
        Ok(())
    }

    /// Open connections of the pool.
    pub(crate) fn connections(&self) -> usize {
        self.pool.status().size
    }

    pub(super) async fn clear(&self) -> Result<(), StoreError> {
        let c = self.client().await?;
        c.batch_execute("DELETE FROM orders; DELETE FROM idempotency_keys; DELETE FROM payments;")
            .await?;
        Ok(())
    }

    async fn count_where(&self, sql: &str, arg: Option<&str>) -> Result<u64, StoreError> {
        let c = self.client().await?;
        let st = c.prepare_cached(sql).await?;
        let row = match arg {
            Some(a) => c.query_one(&st, &[&a]).await?,
            None => c.query_one(&st, &[]).await?,
        };
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    pub(super) async fn count_for_key(&self, key: &str) -> Result<u64, StoreError> {
        self.count_where(
            "SELECT COUNT(*) FROM orders WHERE idempotency_key = $1",
            Some(key),
        )
        .await
    }

    pub(super) async fn count(&self) -> Result<u64, StoreError> {
        self.count_where("SELECT COUNT(*) FROM orders", None).await
    }

    pub(super) async fn payments_of(&self, id: &str) -> Result<u64, StoreError> {
        self.count_where(
            "SELECT COUNT(*) FROM payments WHERE order_id = $1",
            Some(id),
        )
        .await
    }

    pub(super) async fn insert_order(
        &self,
        id: &str,
        key: Option<&str>,
        order: &str,
    ) -> Result<(), StoreError> {
        let c = self.client().await?;
        let st = c
            .prepare_cached("INSERT INTO orders (id, idempotency_key, status, body, created_at_ms) VALUES ($1, $2, 'pending', $3, $4)")
            .await?;
        c.execute(&st, &[&id, &key, &order, &now_ms()]).await?;
        Ok(())
    }

    pub(super) async fn first_by_key(
        &self,
        key: &str,
    ) -> Result<Option<(String, String, String)>, StoreError> {
        let c = self.client().await?;
        let st = c
            .prepare_cached("SELECT id, status, body FROM orders WHERE idempotency_key = $1 ORDER BY created_at_ms LIMIT 1")
            .await?;
        Ok(c.query_opt(&st, &[&key])
            .await?
            .map(|r| (r.get(0), r.get(1), r.get(2))))
    }

    pub(super) async fn claim(
        &self,
        key: &str,
        hash: &str,
        ttl_ms: i64,
        lease_ms: i64,
    ) -> Result<Claim, StoreError> {
        let c = self.client().await?;
        // A claim's time is the database's: every replica judges a lease on the same clock,
        // whatever their own clocks say.
        let insert = c
            .prepare_cached(&format!("INSERT INTO idempotency_keys (key, request_hash, state, created_at_ms, claimed_at_ms, claim_id, expires_at_ms) VALUES ($1, $2, 'in_flight', $3, {DB_NOW_MS}, $4, {DB_NOW_MS} + $5) ON CONFLICT (key) DO NOTHING"))
            .await?;
        let select = c
            .prepare_cached(&format!("SELECT request_hash, state, response_status, response_body, order_id, expires_at_ms <= {DB_NOW_MS}, claim_id FROM idempotency_keys WHERE key = $1"))
            .await?;
        let expire = c
            .prepare_cached(&format!(
                "DELETE FROM idempotency_keys WHERE key = $1 AND expires_at_ms <= {DB_NOW_MS}"
            ))
            .await?;
        // Only the claim just read, and only once its lease has run out: of two retries racing
        // for it, one gets it.
        let take_over = c
            .prepare_cached(&format!("UPDATE idempotency_keys SET claim_id = $1, claimed_at_ms = {DB_NOW_MS}, expires_at_ms = {DB_NOW_MS} + $2 WHERE key = $3 AND state = 'in_flight' AND claim_id = $4 AND claimed_at_ms + $5 <= {DB_NOW_MS}"))
            .await?;
        for pass in 0..CLAIM_PASSES {
            let now = now_ms();
            let token = new_claim_id();
            if c.execute(&insert, &[&key, &hash, &now, &token, &ttl_ms])
                .await?
                == 1
            {
                return Ok(Claim::Claimed {
                    token,
                    took_over: false,
                });
            }
            let row = c.query_opt(&select, &[&key]).await?.map(|r| KeyRow {
                request_hash: r.get(0),
                state: r.get(1),
                response_status: r
                    .get::<_, Option<i32>>(2)
                    .and_then(|s| u16::try_from(s).ok()),
                response_body: r.get(3),
                order_id: r.get(4),
                expired: r.get(5),
                claim_id: r.get(6),
            });
            match row {
                Some(row) if row.expired => {
                    c.execute(&expire, &[&key]).await?;
                }
                Some(row) => {
                    if let Some(held) = row.takeover_candidate(hash) {
                        let taken = c
                            .execute(&take_over, &[&token, &ttl_ms, &key, &held, &lease_ms])
                            .await?;
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
        Err(StoreError::Task(format!(
            "could not claim idempotency key {key:?}"
        )))
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
        let mut c = self.client().await?;
        let insert = c
            .prepare_cached("INSERT INTO orders (id, idempotency_key, status, body, created_at_ms) VALUES ($1, $2, 'pending', $3, $4)")
            .await?;
        let update = c
            .prepare_cached("UPDATE idempotency_keys SET state = 'completed', response_status = 201, response_body = $1, order_id = $2 WHERE key = $3 AND state = 'in_flight' AND claim_id = $4")
            .await?;
        let tx = c.transaction().await?;
        // The key first: its row lock orders this completion against a takeover, and a key no
        // longer ours writes no order.
        if tx.execute(&update, &[&response, &id, &key, &token]).await? == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        tx.execute(&insert, &[&id, &key, &order, &now_ms()]).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Gives the key up, if it is still this claim's.
    pub(super) async fn release(&self, key: &str, token: &str) -> Result<(), StoreError> {
        let c = self.client().await?;
        c.execute(
            "DELETE FROM idempotency_keys WHERE key = $1 AND state = 'in_flight' AND claim_id = $2",
            &[&key, &token],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn get(&self, id: &str) -> Result<Option<(String, String)>, StoreError> {
        let c = self.client().await?;
        let st = c
            .prepare_cached("SELECT status, body FROM orders WHERE id = $1")
            .await?;
        Ok(c.query_opt(&st, &[&id])
            .await?
            .map(|r| (r.get(0), r.get(1))))
    }

    pub(super) async fn ids_by_key(&self, key: &str) -> Result<Vec<String>, StoreError> {
        let c = self.client().await?;
        let st = c
            .prepare_cached(
                "SELECT id FROM orders WHERE idempotency_key = $1 ORDER BY created_at_ms",
            )
            .await?;
        Ok(c.query(&st, &[&key])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    pub(super) async fn pay_conditional(
        &self,
        id: &str,
    ) -> Result<(bool, Option<String>), StoreError> {
        let mut c = self.client().await?;
        let update = c
            .prepare_cached("UPDATE orders SET status = 'paid', paid_at_ms = $1 WHERE id = $2 AND status = 'pending'")
            .await?;
        let record = c
            .prepare_cached("INSERT INTO payments (order_id, at_ms) VALUES ($1, $2)")
            .await?;
        let status = c
            .prepare_cached("SELECT status FROM orders WHERE id = $1")
            .await?;
        let tx = c.transaction().await?;
        let now = now_ms();
        let n = tx.execute(&update, &[&now, &id]).await?;
        if n == 1 {
            tx.execute(&record, &[&id, &now]).await?;
        }
        let status: Option<String> = tx.query_opt(&status, &[&id]).await?.map(|r| r.get(0));
        tx.commit().await?;
        Ok((n == 1, status))
    }

    pub(super) async fn status_of(&self, id: &str) -> Result<Option<String>, StoreError> {
        let c = self.client().await?;
        let st = c
            .prepare_cached("SELECT status FROM orders WHERE id = $1")
            .await?;
        Ok(c.query_opt(&st, &[&id]).await?.map(|r| r.get(0)))
    }

    pub(super) async fn pay_unconditional(&self, id: &str) -> Result<(), StoreError> {
        let c = self.client().await?;
        let update = c
            .prepare_cached("UPDATE orders SET status = 'paid', paid_at_ms = $1 WHERE id = $2")
            .await?;
        let record = c
            .prepare_cached("INSERT INTO payments (order_id, at_ms) VALUES ($1, $2)")
            .await?;
        let now = now_ms();
        c.execute(&update, &[&now, &id]).await?;
        c.execute(&record, &[&id, &now]).await?;
        Ok(())
    }
}

/// The schedule's counters kept in the database (`state: shared`), so that every replica
/// sharing it sees one sequence of requests, of hits per rule and of attempts per key.
#[derive(Clone)]
pub struct SharedCounters {
    store: PgStore,
}

impl SharedCounters {
    pub(crate) fn new(store: PgStore) -> SharedCounters {
        SharedCounters { store }
    }

    /// Counts one more request, and one more attempt of its key: the request's cluster-wide
    /// number and the key's attempt number, in one round trip.
    pub async fn bump_request(&self, key: Option<&str>) -> Result<(u64, Option<u32>), StoreError> {
        self.store.bounded(self.bump_request_now(key)).await
    }

    async fn bump_request_now(&self, key: Option<&str>) -> Result<(u64, Option<u32>), StoreError> {
        let c = self.store.client().await?;
        match key {
            Some(k) => {
                // Both data-modifying CTEs always run, whatever the SELECT reads; the counter
                // row is always locked before the key's row, so two requests cannot deadlock.
                let st = c
                    .prepare_cached(
                        "WITH r AS (INSERT INTO schedule_counters (name, value) VALUES ('requests', 1) \
                           ON CONFLICT (name) DO UPDATE SET value = schedule_counters.value + 1 RETURNING value), \
                         k AS (INSERT INTO key_attempts (key, attempts) VALUES ($1, 1) \
                           ON CONFLICT (key) DO UPDATE SET attempts = key_attempts.attempts + 1 RETURNING attempts) \
                         SELECT r.value, k.attempts FROM r, k",
                    )
                    .await?;
                let row = c.query_one(&st, &[&k]).await?;
                let n = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
                let a = u32::try_from(row.get::<_, i64>(1)).unwrap_or(u32::MAX);
                Ok((n, Some(a)))
            }
            None => Ok((self.bump(&c, "requests").await?, None)),
        }
    }

    /// Counts one more hit of the rule `rule`; returns its number (1 = first).
    pub async fn bump_hit(&self, rule: &str) -> Result<u64, StoreError> {
        self.store
            .bounded(async {
                let c = self.store.client().await?;
                self.bump(&c, &format!("hits:{rule}")).await
            })
            .await
    }

    async fn bump(&self, c: &deadpool_postgres::Object, name: &str) -> Result<u64, StoreError> {
        let st = c
            .prepare_cached(
                "INSERT INTO schedule_counters (name, value) VALUES ($1, 1) \
                 ON CONFLICT (name) DO UPDATE SET value = schedule_counters.value + 1 RETURNING value",
            )
            .await?;
        let row = c.query_one(&st, &[&name]).await?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    /// Forgets the rules' hit counts (a new schedule's count from zero).
    pub async fn clear_hits(&self) -> Result<(), StoreError> {
        self.store
            .bounded(async {
                let c = self.store.client().await?;
                c.execute(
                    "DELETE FROM schedule_counters WHERE name LIKE 'hits:%'",
                    &[],
                )
                .await?;
                Ok(())
            })
            .await
    }

    /// Forgets every count.
    pub async fn clear(&self) -> Result<(), StoreError> {
        self.store
            .bounded(async {
                let c = self.store.client().await?;
                c.batch_execute("DELETE FROM schedule_counters; DELETE FROM key_attempts;")
                    .await?;
                Ok(())
            })
            .await
    }
}
