//! The orders store and the shared schedule counters on a real PostgreSQL server, with several
//! fault-server replicas sharing one database, over real sockets.
//!
//! The server is named by `FAULT_SERVER_TEST_DATABASE_URL` (`bash .ci/postgres` starts one and
//! prints it). Without it each test says that it skips and passes, unless `HARNESS_REQUIRE_TOOLS=1`,
//! when it fails. Isolation: every test makes a schema of its own, `t_<random>`, and gives the
//! servers a URL whose `options=-csearch_path%3Dt_<random>` puts their tables there, so tests
//! running in parallel never see each other's rows; the schema is dropped at the end.

mod common;

use std::collections::HashSet;
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{burst_across, journal, request_bytes, send};
use fault_server::{Config, FaultServer, ServerOptions};
use tokio_postgres::NoTls;

/// The server's URL, or `None` (after saying so) when the tests are to skip.
fn base_url(test: &str) -> Option<String> {
    match std::env::var("FAULT_SERVER_TEST_DATABASE_URL") {
        Ok(u) if !u.trim().is_empty() => Some(u.trim().to_string()),
        _ => {
            assert!(
                std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
                "{test}: FAULT_SERVER_TEST_DATABASE_URL is not set and HARNESS_REQUIRE_TOOLS=1: \
                 start PostgreSQL with `bash .ci/postgres` and export the URL it prints"
            );
            // Straight to stderr, not through the test harness's capture: a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "{test}: skipped: FAULT_SERVER_TEST_DATABASE_URL is not set (`bash .ci/postgres` prints one)"
            );
            None
        }
    }
}

/// A schema of the test's own on the test server.
struct TestDb {
    schema: String,
    /// The URL the fault servers use: their tables go to `schema`.
    url: String,
    admin: tokio_postgres::Client,
}

impl TestDb {
    async fn new(test: &str) -> Option<TestDb> {
        let base = base_url(test)?;
        let (admin, conn) = tokio_postgres::connect(&base, NoTls)
            .await
            .unwrap_or_else(|e| {
                panic!("{test}: cannot connect to FAULT_SERVER_TEST_DATABASE_URL: {e}")
            });
        tokio::spawn(conn);
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        admin
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .expect("create the test's schema");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
        Some(TestDb { schema, url, admin })
    }

    /// `SELECT COUNT(*) FROM <schema>.<rest>`.
    async fn count(&self, rest: &str) -> i64 {
        self.admin
            .query_one(&format!("SELECT COUNT(*) FROM {}.{rest}", self.schema), &[])
            .await
            .expect("count")
            .get(0)
    }

    async fn drop(self) {
        let _ = self
            .admin
            .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.schema))
            .await;
    }
}

/// Two replicas on 127.0.0.2 and 127.0.0.3 with the same config, started at the same moment (so
/// their schema creations race, as two pods' would), each serving its connections on two
/// threads of its own as the binary does (so their database connections are used from threads
/// other than the one that opened them).
async fn replicas(yaml: &str) -> [FaultServer; 2] {
    replicas_of(yaml, yaml).await
}

/// [`replicas`], each with a config of its own.
async fn replicas_of(yaml_a: &str, yaml_b: &str) -> [FaultServer; 2] {
    let cfg_a = Config::from_yaml(yaml_a, "test").expect("test config is valid");
    let cfg = Config::from_yaml(yaml_b, "test").expect("test config is valid");
    let opts = |ip: [u8; 4], id: &str| ServerOptions {
        bind: SocketAddr::from((ip, 0)),
        replica_id: Some(id.to_string()),
        threads: Some(2),
        ..ServerOptions::default()
    };
    let (a, b) = tokio::join!(
        FaultServer::start(cfg_a, opts([127, 0, 0, 2], "a")),
        FaultServer::start(cfg, opts([127, 0, 0, 3], "b")),
    );
    [a.expect("replica a starts"), b.expect("replica b starts")]
}

fn addrs(servers: &[FaultServer]) -> Vec<SocketAddr> {
    servers.iter().map(FaultServer::addr).collect()
}

async fn journals(servers: &[FaultServer]) -> Vec<history::Entry> {
    let mut all = Vec::new();
    for s in servers {
        all.extend(journal(s).await);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_gives_one_order_per_key_across_replicas() {
    let Some(db) = TestDb::new("unique_gives_one_order_per_key_across_replicas").await else {
        return;
    };
    let servers = replicas(&format!(
        "orders: {{ idempotency: unique, work_delay: 20ms, database: \"{}\" }}",
        db.url
    ))
    .await;
    let addrs = addrs(&servers);
    const ROUNDS: usize = 8;
    for round in 0..ROUNDS {
        let key = format!("round-{round}");
        let body = format!(r#"{{"sku":"A{round}","qty":1}}"#);
        let replies = burst_across(&addrs, 10, |_| {
            request_bytes("POST", "/orders", Some(&key), &body)
        })
        .await;
        let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
        assert!(
            statuses.iter().all(|s| matches!(s, 201 | 200 | 409)),
            "{statuses:?}"
        );
        let created: Vec<_> = replies.iter().filter(|r| r.status == 201).collect();
        assert_eq!(created.len(), 1, "one creation per key: {statuses:?}");
        let id = created[0].json()["id"].as_str().unwrap().to_string();
        for r in &replies {
            match r.status {
                200 => {
                    assert_eq!(r.header("idempotent-replayed"), Some("true"));
                    assert_eq!(r.body, created[0].body, "a replay is the stored response");
                    assert_eq!(r.header("location"), Some(format!("/orders/{id}").as_str()));
                }
                409 => {
                    assert_eq!(r.header("retry-after"), Some("1"));
                    assert_eq!(r.header("content-type"), Some("application/problem+json"));
                }
                _ => {}
            }
        }
        assert_eq!(
            servers[0].orders().count_for_key(&key).await.unwrap(),
            1,
            "{key}"
        );
        // Both replicas see the one order.
        for a in &addrs {
            let got = send(
                *a,
                &request_bytes("GET", &format!("/orders/{id}"), None, ""),
            )
            .await;
            assert_eq!(got.status, 200);
        }
    }
    assert_eq!(db.count("orders").await, ROUNDS as i64);
    let j = journals(&servers).await;
    assert_eq!(j.iter().filter(|e| e.method == "POST").count(), ROUNDS * 10);
    let created: HashSet<&str> = j.iter().filter_map(|e| e.created.as_deref()).collect();
    assert_eq!(
        created.len(),
        ROUNDS,
        "the journals agree with the database"
    );
    for s in servers {
        s.shutdown().await;
    }
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_then_insert_races_into_duplicates_across_replicas() {
    let Some(db) = TestDb::new("check_then_insert_races_into_duplicates_across_replicas").await
    else {
        return;
    };
    // Each request looks, then works 500 ms, then inserts: a burst whose requests all look
    // before the first of them inserts creates several orders. How many rounds race depends on
    // the machine; that one can, and that every duplicate is counted, does not.
    let servers = replicas(&format!(
        "orders: {{ idempotency: check-then-insert, work_delay: 1500ms, database: \"{}\" }}",
        db.url
    ))
    .await;
    let addrs = addrs(&servers);
    const ROUNDS: usize = 5;
    let mut counts = Vec::new();
    for round in 0..ROUNDS {
        let key = format!("round-{round}");
        let replies = burst_across(&addrs, 10, |_| {
            request_bytes("POST", "/orders", Some(&key), r#"{"sku":"A"}"#)
        })
        .await;
        assert!(
            replies.iter().all(|r| matches!(r.status, 201 | 200)),
            "{:?}",
            replies.iter().map(|r| r.status).collect::<Vec<_>>()
        );
        let n = servers[1].orders().count_for_key(&key).await.unwrap();
        assert_eq!(
            n,
            replies.iter().filter(|r| r.status == 201).count() as u64,
            "every 201 made one order"
        );
        counts.push(n);
    }
    assert!(
        counts.iter().any(|c| *c > 1),
        "no duplicates in {ROUNDS} rounds: {counts:?}"
    );
    let j = journals(&servers).await;
    let created = j.iter().filter(|e| e.created.is_some()).count() as i64;
    assert_eq!(created, db.count("orders").await);
    assert_eq!(created as u64, counts.iter().sum::<u64>());
    for s in servers {
        s.shutdown().await;
    }
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_ignores_the_key_and_creates_an_order_per_request_across_replicas() {
    let Some(db) =
        TestDb::new("none_ignores_the_key_and_creates_an_order_per_request_across_replicas").await
    else {
        return;
    };
    // No idempotency at all: every request creates, same key or not, on either replica.
    let servers = replicas(&format!(
        "orders: {{ idempotency: none, database: \"{}\" }}",
        db.url
    ))
    .await;
    let addrs = addrs(&servers);
    const ROUNDS: usize = 3;
    let mut ids = HashSet::new();
    for round in 0..ROUNDS {
        let key = format!("round-{round}");
        let replies = burst_across(&addrs, 10, |_| {
            request_bytes("POST", "/orders", Some(&key), r#"{"sku":"A","qty":1}"#)
        })
        .await;
        let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
        assert!(statuses.iter().all(|s| *s == 201), "{key}: {statuses:?}");
        for r in &replies {
            assert_eq!(r.header("idempotent-replayed"), None, "{key}: no replay");
            let id = r.json()["id"].as_str().unwrap().to_string();
            assert!(ids.insert(id), "{key}: every request its own order");
        }
        // The key is not stored, so the store finds no order by it.
        assert_eq!(servers[0].orders().count_for_key(&key).await.unwrap(), 0);
    }
    assert_eq!(ids.len(), ROUNDS * 10);
    assert_eq!(db.count("orders").await, (ROUNDS * 10) as i64);
    assert_eq!(
        db.count("orders WHERE idempotency_key IS NULL").await,
        (ROUNDS * 10) as i64
    );
    assert_eq!(db.count("idempotency_keys").await, 0);
    // Both replicas serve every order, whichever of them created it.
    for id in &ids {
        for a in &addrs {
            let got = send(
                *a,
                &request_bytes("GET", &format!("/orders/{id}"), None, ""),
            )
            .await;
            assert_eq!(got.status, 200, "{id} from {a}");
        }
    }
    // The journals hold the key as sent and one created order per request, none replayed.
    let j = journals(&servers).await;
    let posts: Vec<&history::Entry> = j.iter().filter(|e| e.method == "POST").collect();
    assert_eq!(posts.len(), ROUNDS * 10);
    assert!(posts
        .iter()
        .all(|e| e.idempotency_key.is_some() && e.created.is_some() && !e.replayed));
    let created: HashSet<&str> = posts.iter().filter_map(|e| e.created.as_deref()).collect();
    assert_eq!(
        created.len(),
        ROUNDS * 10,
        "the journals agree with the database"
    );
    for s in servers {
        s.shutdown().await;
    }
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_semantics_across_replicas() {
    let Some(db) = TestDb::new("idempotency_semantics_across_replicas").await else {
        return;
    };
    let servers = replicas(&format!(
        "orders: {{ idempotency: unique, work_delay: 3s, retry_after_s: 2, database: \"{}\" }}",
        db.url
    ))
    .await;
    let [a, b] = [servers[0].addr(), servers[1].addr()];
    let post = |addr, key: Option<&'static str>, body: &'static str| async move {
        send(addr, &request_bytes("POST", "/orders", key, body)).await
    };
    let first = tokio::spawn(post(a, Some("k"), r#"{"sku":"A"}"#));
    // The first request's claim is in the database: from now until its work ends, the key is in
    // flight for every replica.
    let deadline = Instant::now() + Duration::from_secs(30);
    while db.count("idempotency_keys WHERE state = 'in_flight'").await == 0 {
        assert!(
            Instant::now() < deadline,
            "the first request never claimed its key"
        );
        tokio::task::yield_now().await;
    }
    let concurrent = post(b, Some("k"), r#"{"sku":"A"}"#).await;
    assert_eq!(concurrent.status, 409, "{}", concurrent.body);
    assert_eq!(concurrent.header("retry-after"), Some("2"));
    let first = first.await.unwrap();
    assert_eq!(first.status, 201);
    let replay = post(b, Some("k"), r#"{"sku":"A"}"#).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, first.body);
    assert_eq!(post(a, Some("k"), r#"{"sku":"B"}"#).await.status, 422);
    assert_eq!(post(b, None, "{}").await.status, 400);
    let listed = send(
        b,
        &request_bytes("GET", "/orders?idempotency_key=k", None, ""),
    )
    .await;
    assert_eq!(listed.json()["count"], 1);
    assert_eq!(
        send(a, &request_bytes("GET", "/orders/nope", None, ""))
            .await
            .status,
        404
    );
    // A reset clears the orders of this server's tables.
    let reset = send(a, &request_bytes("POST", "/__harness/reset", None, "")).await;
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(db.count("orders").await, 0);
    assert_eq!(db.count("idempotency_keys").await, 0);
    for s in servers {
        s.shutdown().await;
    }
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_claim_is_taken_over_across_replicas_and_its_holder_writes_nothing() {
    let test = "a_lapsed_claim_is_taken_over_across_replicas_and_its_holder_writes_nothing";
    let Some(db) = TestDb::new(test).await else {
        return;
    };
    // The key table as it was before claims had tokens, with a key a replica of then left in
    // flight two minutes ago.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let hash = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(br#"{"sku":"A"}"#))
    };
    db.admin
        .batch_execute(&format!(
            "CREATE TABLE {0}.idempotency_keys (
                key TEXT NOT NULL UNIQUE, request_hash TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
                response_status INTEGER, response_body TEXT, order_id TEXT,
                created_at_ms BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL);
             INSERT INTO {0}.idempotency_keys (key, request_hash, state, created_at_ms, expires_at_ms)
                VALUES ('gone', '{hash}', 'in_flight', {1}, {2});",
            db.schema,
            now - 120_000,
            now + 86_400_000
        ))
        .await
        .expect("the old key table");
    // Replica a works 6.5 s per request; replica b 4 s, under a lease of 4.5 s. A retry on b
    // 4.7 s after a's claim takes the key over and is still working when a's request completes.
    let servers = replicas_of(
        &format!(
            "orders: {{ idempotency: unique, work_delay: 6500ms, database: \"{}\" }}",
            db.url
        ),
        &format!(
            "orders: {{ idempotency: unique, work_delay: 4s, claim_lease: 4500ms, database: \"{}\" }}",
            db.url
        ),
    )
    .await;
    let columns: i64 = db
        .admin
        .query_one(
            "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'idempotency_keys' AND column_name IN ('claimed_at_ms', 'claim_id')",
            &[&db.schema],
        )
        .await
        .expect("the columns")
        .get(0);
    assert_eq!(columns, 2, "the old key table got the claim's columns");
    let [a, b] = [servers[0].addr(), servers[1].addr()];
    let post = |addr, key: &'static str| async move {
        send(
            addr,
            &request_bytes("POST", "/orders", Some(key), r#"{"sku":"A"}"#),
        )
        .await
    };
    // A replica of then completes without a token: its key is never taken over.
    let gone = post(b, "gone").await;
    assert_eq!(gone.status, 409, "the old replica's key: {gone:?}");
    let first = tokio::spawn(post(a, "lapse"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while db
        .count("idempotency_keys WHERE key = 'lapse' AND state = 'in_flight'")
        .await
        == 0
    {
        assert!(
            Instant::now() < deadline,
            "the first request never claimed its key"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let since = Instant::now();
    tokio::time::sleep(Duration::from_millis(4700)).await;
    let sent_within = since.elapsed();
    let retry = tokio::spawn(post(b, "lapse"));
    let (first, retry) = (first.await.unwrap(), retry.await.unwrap());
    // Either the retry took the key over (the first then lost its claim), or — only when the
    // machine stalled for a second or more — the first completed before the retry's claim and
    // the retry got its replay. Without takeover the retry would get 409; without the fence
    // the first would get 201 while the retry worked.
    match (first.status, retry.status) {
        (409, 201) => {}
        (201, 200) => eprintln!(
            "the retry (sent {sent_within:?} after the claim) came after the first completed: checked the replay only"
        ),
        other => panic!("first {first:?}, retry {retry:?}: {other:?}"),
    }
    assert_eq!(db.count("orders WHERE idempotency_key = 'lapse'").await, 1);
    assert_eq!(db.count("orders WHERE idempotency_key = 'gone'").await, 0);
    let created: Vec<_> = journals(&servers)
        .await
        .into_iter()
        .filter_map(|e| e.created)
        .collect();
    assert_eq!(created.len(), 1, "{created:?}");
    for s in servers {
        s.shutdown().await;
    }
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_columns_are_added_once_a_reader_lets_go_of_the_old_table() {
    let test = "the_claim_columns_are_added_once_a_reader_lets_go_of_the_old_table";
    let Some(db) = TestDb::new(test).await else {
        return;
    };
    db.admin
        .batch_execute(&format!(
            "CREATE TABLE {}.idempotency_keys (
                key TEXT NOT NULL UNIQUE, request_hash TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
                response_status INTEGER, response_body TEXT, order_id TEXT,
                created_at_ms BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL);",
            db.schema
        ))
        .await
        .expect("the old key table");
    // A long read of the old table (a report, a dump) holds a lock the ALTER must wait for;
    // the server's statements are bounded at 500 ms, less than the ALTER's wait for the lock.
    let base = base_url(test).expect("a database");
    let (reader, conn) = tokio_postgres::connect(&base, NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    reader
        .batch_execute(&format!(
            "BEGIN; SELECT COUNT(*) FROM {}.idempotency_keys",
            db.schema
        ))
        .await
        .expect("the reader's lock");
    let started = Instant::now();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        reader.batch_execute("COMMIT").await.expect("commit");
        reader
    });
    let s = FaultServer::start(
        Config::from_yaml(
            &format!(
                "orders: {{ idempotency: unique, statement_timeout: 500ms, database: \"{}\" }}",
                db.url
            ),
            "test",
        )
        .expect("test config is valid"),
        ServerOptions::default(),
    )
    .await
    .expect("the server starts once the reader is done");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it waited for the reader"
    );
    drop(release.await);
    let made = send(
        s.addr(),
        &request_bytes("POST", "/orders", Some("k"), r#"{"sku":"A"}"#),
    )
    .await;
    assert_eq!(made.status, 201, "{made:?}");
    assert_eq!(
        db.count("idempotency_keys WHERE claim_id IS NOT NULL")
            .await,
        1
    );
    s.shutdown().await;
    db.drop().await;
}

#[tokio::test]
async fn the_pool_is_a_metric_on_postgresql() {
    let test = "the_pool_is_a_metric_on_postgresql";
    let Some(db) = TestDb::new(test).await else {
        return;
    };
    let s = common::start(&format!("orders: {{ database: \"{}\" }}", db.url)).await;
    let text = reqwest::get(format!("{}/__harness/metrics", s.url()))
        .await
        .expect("the metrics")
        .text()
        .await
        .expect("their text");
    s.shutdown().await;
    db.drop().await;
    // The one metric only some servers export (control.rs checks the others).
    let m = fault_server::metrics::DATABASE_CONNECTIONS;
    assert!(!m.always);
    assert!(
        text.contains(&format!("# TYPE fault_server_{} gauge", m.name))
            && text.contains(&format!("\n{} ", m.series())),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_starts_beside_a_write_in_progress_without_holding_writes_behind_it() {
    let test = "a_replica_starts_beside_a_write_in_progress_without_holding_writes_behind_it";
    let Some(db) = TestDb::new(test).await else {
        return;
    };
    let yaml = format!("orders: {{ database: \"{}\" }}", db.url);
    let a = common::start(&yaml).await;
    let (indexes,): (i64,) = {
        let r = db
            .admin
            .query_one(
                "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'orders_by_key'",
                &[&db.schema],
            )
            .await
            .expect("the index is looked up");
        (r.get(0),)
    };
    assert_eq!(indexes, 1, "the first start made the index");
    // A write to `orders` in progress on another connection (a replica's order being made), held
    // open until the new replica has started, or for at most 30 s.
    let (writer, conn) = tokio_postgres::connect(&db.url, NoTls)
        .await
        .expect("the writer's connection");
    tokio::spawn(conn);
    writer
        .batch_execute(
            "BEGIN; INSERT INTO orders (id, idempotency_key, status, body, created_at_ms) VALUES ('w', 'w', 'pending', '{}', 0)",
        )
        .await
        .expect("the write in progress");
    let started = tokio::time::timeout(
        Duration::from_secs(30),
        FaultServer::start(
            Config::from_yaml(&yaml, "test").expect("test config is valid"),
            ServerOptions {
                bind: SocketAddr::from(([127, 0, 0, 3], 0)),
                ..ServerOptions::default()
            },
        ),
    )
    .await;
    let b = started
        .expect("the replica starts while the write is still in progress")
        .expect("the replica starts");
    // And the first replica's writes go on beside the open transaction.
    let made = send(
        a.addr(),
        &request_bytes("POST", "/orders", Some("beside"), r#"{"sku":"B"}"#),
    )
    .await;
    assert_eq!(made.status, 201, "{made:?}");
    writer.batch_execute("COMMIT").await.expect("commit");
    let made = send(
        b.addr(),
        &request_bytes("POST", "/orders", Some("after"), r#"{"sku":"B"}"#),
    )
    .await;
    assert_eq!(made.status, 201, "{made:?}");
    b.shutdown().await;
    db.drop().await;
}

async fn pay_race(db: &TestDb, pay: &str) -> (Vec<u16>, u64, Vec<history::Entry>) {
    // Ten payers of one row wait on each other's row lock in turn: on a loaded machine the last
    // can wait longer than the default `lock_timeout` (2 s). The bounds here are generous: the
    // test is about which payer wins, not how slow a database may be.
    let servers = replicas(&format!(
        "orders: {{ pay: {pay}, work_delay: 1500ms, lock_timeout: 30s, statement_timeout: 30s, database: \"{}\" }}",
        db.url
    ))
    .await;
    let addrs = addrs(&servers);
    let created = send(addrs[0], &request_bytes("POST", "/orders", Some("p"), "{}")).await;
    let id = created.json()["id"].as_str().unwrap().to_string();
    let path = format!("/orders/{id}/pay");
    let replies = burst_across(&addrs, 10, |_| request_bytes("POST", &path, None, "")).await;
    let again = send(addrs[1], &request_bytes("POST", &path, None, "")).await;
    assert_eq!(again.status, 200);
    assert!(again.json()["transition"].is_null());
    let payments = servers[0].orders().payments_of(&id).await.unwrap();
    let j = journals(&servers).await;
    for s in servers {
        s.shutdown().await;
    }
    (replies.iter().map(|r| r.status).collect(), payments, j)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_modes_across_replicas() {
    let Some(db) = TestDb::new("pay_modes_across_replicas").await else {
        return;
    };
    let (statuses, payments, j) = pay_race(&db, "conditional").await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(payments, 1, "conditional: one transition");
    assert_eq!(j.iter().filter(|e| e.transition.is_some()).count(), 1);
    db.drop().await;

    let Some(db) = TestDb::new("pay_modes_across_replicas").await else {
        return;
    };
    let (statuses, payments, j) = pay_race(&db, "read-then-write").await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert!(
        payments > 1,
        "read-then-write: the race should charge more than once"
    );
    assert_eq!(
        j.iter().filter(|e| e.transition.is_some()).count() as u64,
        payments
    );
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_counters_fire_the_configured_number_of_times_in_total() {
    let Some(db) =
        TestDb::new("shared_counters_fire_the_configured_number_of_times_in_total").await
    else {
        return;
    };
    let servers = replicas(&format!(
        r#"
state: shared
orders: {{ database: "{}" }}
rules:
  - id: every-fourth
    match: {{ path: /nth, requests: "every 4" }}
    fault: {{ status: 502 }}
  - id: three-hits
    match: {{ path: /flaky, hits: "1-3" }}
    fault: {{ status: 503 }}
  - id: first-two-attempts
    match: {{ method: POST, path: /orders, attempts: "1-2" }}
    fault: {{ status: 500 }}
"#,
        db.url
    ))
    .await;
    let addrs = addrs(&servers);

    // Requests numbered across both replicas: the 4th, 8th and 12th are faulted.
    let mut nth = Vec::new();
    for i in 0..12 {
        nth.push(
            send(addrs[i % 2], &request_bytes("GET", "/nth", None, ""))
                .await
                .status,
        );
    }
    assert_eq!(
        nth,
        [200, 200, 200, 502, 200, 200, 200, 502, 200, 200, 200, 502]
    );

    // Hits counted across both replicas: three in total, whoever receives them.
    let mut faulted = 0;
    for _ in 0..3 {
        let replies = burst_across(&addrs, 10, |_| request_bytes("GET", "/flaky", None, "")).await;
        faulted += replies.iter().filter(|r| r.status == 503).count();
        assert!(
            replies.iter().all(|r| matches!(r.status, 503 | 200)),
            "{replies:?}"
        );
    }
    assert_eq!(
        faulted, 3,
        "`hits: 1-3` fires three times among all replicas"
    );

    // A key's attempts counted across both replicas.
    let mut attempts = Vec::new();
    for i in 0..4 {
        attempts.push(
            send(
                addrs[i % 2],
                &request_bytes("POST", "/orders", Some("k"), r#"{"sku":"A"}"#),
            )
            .await
            .status,
        );
    }
    assert_eq!(attempts, [500, 500, 201, 200]);

    let j = journals(&servers).await;
    let mut key_attempts: Vec<u32> = j
        .iter()
        .filter(|e| e.idempotency_key.as_deref() == Some("k"))
        .filter_map(|e| e.key_attempt)
        .collect();
    key_attempts.sort();
    assert_eq!(
        key_attempts,
        [1, 2, 3, 4],
        "the journal has the cluster's numbers"
    );
    assert_eq!(
        j.iter()
            .filter(|e| e.rule.as_deref() == Some("three-hits"))
            .count(),
        3
    );
    assert!(
        j.iter().any(|e| e.replica.as_deref() == Some("a"))
            && j.iter().any(|e| e.replica.as_deref() == Some("b"))
    );

    // A reset starts every count again, for every replica.
    let reset = send(
        addrs[1],
        &request_bytes("POST", "/__harness/reset", None, ""),
    )
    .await;
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(db.count("schedule_counters").await, 0);
    let replies = burst_across(&addrs, 4, |_| request_bytes("GET", "/flaky", None, "")).await;
    assert_eq!(replies.iter().filter(|r| r.status == 503).count(), 3);
    for s in servers {
        s.shutdown().await;
    }
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_named_without_its_password() {
    // Needs no server: port 1 on loopback refuses at once.
    let cfg = Config::from_yaml(
        "orders: { database: \"postgres://harness:s3cret@127.0.0.1:1/harness\" }",
        "test",
    )
    .unwrap();
    let err = match FaultServer::start(cfg, ServerOptions::default()).await {
        Ok(_) => panic!("started without a database"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(
            "cannot connect to the orders database postgres://harness@127.0.0.1:1/harness"
        ),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
}

/// A second connection that holds ACCESS EXCLUSIVE on the tables a creation writes, in a
/// transaction the caller ends (`ROLLBACK`).
async fn lock_order_tables(db: &TestDb) -> tokio_postgres::Client {
    let (locker, conn) = tokio_postgres::connect(&db.url, NoTls)
        .await
        .expect("the locking connection");
    tokio::spawn(conn);
    locker
        .batch_execute("BEGIN; LOCK TABLE idempotency_keys, orders IN ACCESS EXCLUSIVE MODE;")
        .await
        .expect("the lock");
    locker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_table_is_answered_503_with_retry_after_not_waited_on() {
    let Some(db) =
        TestDb::new("a_locked_table_is_answered_503_with_retry_after_not_waited_on").await
    else {
        return;
    };
    let server = common::start(&format!(
        "orders: {{ database: \"{}\", lock_timeout: 300ms, statement_timeout: 2s }}",
        db.url
    ))
    .await;
    let locker = lock_order_tables(&db).await;
    // Twenty concurrent creations, more than the pool's sixteen connections. The lock is held
    // until every one has its answer, which the timeouts (300 ms, 2 s) bound to seconds: well
    // within twenty, the test's bound for "not held as long as the lock".
    let replies = tokio::time::timeout(
        Duration::from_secs(20),
        common::burst(server.addr(), 20, |i| {
            request_bytes(
                "POST",
                "/orders",
                Some(&format!("locked-{i}")),
                r#"{"sku":"L"}"#,
            )
        }),
    )
    .await;
    locker.batch_execute("ROLLBACK").await.expect("unlock");
    let replies = replies.expect("every request is answered while the lock is held");
    let mut lock_timeouts = 0;
    for r in &replies {
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
        assert_eq!(
            r.json()["type"],
            "urn:fault-server:problem:store-unavailable",
            "{r:?}"
        );
        // The answer says which bound gave out: the lock's, or the wait for a connection.
        let detail = r.json()["detail"].as_str().unwrap_or_default().to_string();
        assert!(
            detail.contains("lock timeout") || detail.contains("database pool"),
            "{detail}"
        );
        lock_timeouts += usize::from(detail.contains("canceling statement due to lock timeout"));
    }
    assert!(lock_timeouts > 0, "{replies:?}");
    let j = journal(&server).await;
    assert_eq!(j.len(), 20);
    for e in &j {
        assert_eq!(e.outcome, history::Outcome::Rejected, "{e:?}");
        assert_eq!(e.rejected.as_deref(), Some("store-unavailable"));
        assert_eq!(e.status, Some(503));
        assert_eq!(e.created, None);
    }
    // Unlocked, the same keys create their orders: the refused attempts left nothing behind.
    let again = send(
        server.addr(),
        &request_bytes("POST", "/orders", Some("locked-0"), r#"{"sku":"L"}"#),
    )
    .await;
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(db.count("orders").await, 1);
    db.drop().await;
}

/// A TCP relay to the database that the test can cut and restore: what a database restart or a
/// partition looks like to the server. Or freeze: the connections stay open and nothing goes
/// through them, what a stalled link or a frozen host looks like.
struct Cuttable {
    addr: SocketAddr,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: std::sync::Arc<tokio::sync::Notify>,
    frozen: tokio::sync::watch::Sender<bool>,
}

/// Copies `from` to `to`, holding what it read while `frozen` says so.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while *frozen.borrow_and_update() {
            if frozen.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Cuttable {
    async fn to(target: SocketAddr) -> Cuttable {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the relay");
        let addr = listener.local_addr().expect("its address");
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let cut = std::sync::Arc::new(tokio::sync::Notify::new());
        let (frozen, _) = tokio::sync::watch::channel(false);
        {
            let (up, cut, frozen) = (up.clone(), cut.clone(), frozen.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if !up.load(Ordering::SeqCst) {
                        continue; // dropped: refused
                    }
                    let (cut, frozen) = (cut.clone(), frozen.clone());
                    tokio::spawn(async move {
                        let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                            return;
                        };
                        let (client_rx, client_tx) = client.into_split();
                        let (server_rx, server_tx) = server.into_split();
                        tokio::select! {
                            () = pump(client_rx, server_tx, frozen.subscribe()) => {}
                            () = pump(server_rx, client_tx, frozen.subscribe()) => {}
                            () = cut.notified() => {}
                        }
                    });
                }
            });
        }
        Cuttable {
            addr,
            up,
            cut,
            frozen,
        }
    }

    /// A relay to the test's database.
    async fn before(db: &TestDb) -> Cuttable {
        let cfg: tokio_postgres::Config = db.url.parse().expect("the test URL parses");
        let port = cfg.get_ports().first().copied().unwrap_or(5432);
        Cuttable::to(SocketAddr::from(([127, 0, 0, 1], port))).await
    }

    fn freeze(&self, frozen: bool) {
        self.frozen.send_replace(frozen);
    }

    /// The server's URL for the database `url`, through this relay.
    fn url_for(&self, url: &str) -> String {
        let (creds, rest) = url.split_once('@').expect("a URL with credentials");
        let (_, path) = rest.split_once('/').expect("a database name");
        format!("{creds}@{}/{path}", self.addr)
    }

    fn set(&self, up: bool) {
        self.up.store(up, std::sync::atomic::Ordering::SeqCst);
        if !up {
            self.cut.notify_waiters();
        }
    }
}

async fn health(addr: SocketAddr) -> serde_json::Value {
    let raw = send(
        addr,
        b"GET /__harness/health HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        raw.status, 200,
        "health answers 200 whatever the store: {raw:?}"
    );
    raw.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_degraded_while_the_store_cannot_be_reached() {
    let Some(db) = TestDb::new("health_says_degraded_while_the_store_cannot_be_reached").await
    else {
        return;
    };
    let relay = Cuttable::before(&db).await;
    let via = relay.url_for(&db.url);
    let server = common::start(&format!(
        "orders: {{ database: \"{via}\", statement_timeout: 1s }}"
    ))
    .await;
    let h = health(server.addr()).await;
    assert_eq!(h["status"], "ok", "{h}");
    assert_eq!(h["store"]["status"], "ok", "{h}");

    relay.set(false);
    let h = health(server.addr()).await;
    assert_eq!(h["status"], "degraded", "{h}");
    assert_eq!(h["store"]["status"], "unreachable", "{h}");
    let refused = send(
        server.addr(),
        &request_bytes("POST", "/orders", Some("cut-1"), r#"{"sku":"C"}"#),
    )
    .await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"));

    relay.set(true);
    let mut h = health(server.addr()).await;
    for _ in 0..100 {
        if h["status"] == "ok" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        h = health(server.addr()).await;
    }
    assert_eq!(h["status"], "ok", "recovered without a restart: {h}");
    let created = send(
        server.addr(),
        &request_bytes("POST", "/orders", Some("cut-2"), r#"{"sku":"C"}"#),
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    db.drop().await;
}

/// Sends `bytes` again while it is answered `503` with `Retry-After` (as a client that honours
/// it would), up to twenty times: the database's connections may take a moment to come back.
async fn send_until_served(addr: SocketAddr, bytes: &[u8]) -> common::Raw {
    let mut reply = send(addr, bytes).await;
    for _ in 0..20 {
        if reply.status != 503 || reply.header("retry-after").is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        reply = send(addr, bytes).await;
    }
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_stops_answering_costs_a_bounded_wait_not_a_hang() {
    let Some(db) =
        TestDb::new("a_database_that_stops_answering_costs_a_bounded_wait_not_a_hang").await
    else {
        return;
    };
    let relay = Cuttable::before(&db).await;
    let server = common::start(&format!(
        "orders: {{ database: \"{}\", statement_timeout: 1s }}",
        relay.url_for(&db.url)
    ))
    .await;
    // The pool's connection is open and idle: the next request takes it, no connect to wait on.
    let first = send(
        server.addr(),
        &request_bytes("POST", "/orders", Some("stall-0"), r#"{"sku":"S"}"#),
    )
    .await;
    assert_eq!(first.status, 201, "{first:?}");

    // The link stalls: the database's own timeouts cannot fire, as nothing reaches it.
    relay.freeze(true);
    let stalled = tokio::time::timeout(
        Duration::from_secs(30),
        send(
            server.addr(),
            &request_bytes("POST", "/orders", Some("stall-1"), r#"{"sku":"S"}"#),
        ),
    )
    .await
    .expect("answered while the database does not answer, not held for the stall");
    assert_eq!(stalled.status, 503, "{stalled:?}");
    assert_eq!(stalled.header("retry-after"), Some("1"), "{stalled:?}");
    let detail = stalled.json()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(detail.contains("no answer within 2s"), "{detail}");
    let j = journal(&server).await;
    let e = j.last().expect("the stalled request's entry");
    assert_eq!(e.status, Some(503), "{e:?}");
    // Its effect is not known (a commit may have been sent): not journaled as a refusal.
    assert_eq!(e.outcome, history::Outcome::Responded, "{e:?}");
    assert_eq!(e.rejected, None, "{e:?}");
    let h = health(server.addr()).await;
    assert_eq!(h["status"], "degraded", "{h}");

    // The link comes back and what was held goes through: the first attempt's claim of its key
    // reaches the database after the server gave up on it. The key is then held as in progress
    // (until `key_ttl`), never released behind a request's back: a retry is told so (`409`),
    // and no second order is made for it. Other keys are served at once.
    relay.freeze(false);
    let mut landed = 0;
    for _ in 0..200 {
        landed = db.count("idempotency_keys WHERE key = 'stall-1'").await;
        if landed == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(landed, 1, "the held claim reached the database");
    let again = send_until_served(
        server.addr(),
        &request_bytes("POST", "/orders", Some("stall-1"), r#"{"sku":"S"}"#),
    )
    .await;
    assert_eq!(again.status, 409, "{again:?}");
    assert_eq!(
        again.json()["type"],
        "urn:fault-server:problem:request-in-progress",
        "{again:?}"
    );
    let other = send_until_served(
        server.addr(),
        &request_bytes("POST", "/orders", Some("stall-2"), r#"{"sku":"S"}"#),
    )
    .await;
    assert_eq!(other.status, 201, "{other:?}");
    assert!(db.count("orders WHERE idempotency_key = 'stall-1'").await <= 1);
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_starting_while_another_creates_the_schema_waits_for_it() {
    let Some(db) =
        TestDb::new("a_replica_starting_while_another_creates_the_schema_waits_for_it").await
    else {
        return;
    };
    // Another replica's schema creation, slow: its advisory lock ("fault-sv") held 2 s, far
    // longer than the requests' lock_timeout.
    let (other, conn) = tokio_postgres::connect(&db.url, NoTls)
        .await
        .expect("the other replica's connection");
    tokio::spawn(conn);
    other
        .batch_execute("BEGIN; SELECT pg_advisory_xact_lock(7377306773275636598);")
        .await
        .expect("the schema lock");
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        other.batch_execute("COMMIT").await.expect("released");
    });
    let cfg = Config::from_yaml(
        &format!(
            "orders: {{ database: \"{}\", lock_timeout: 300ms }}",
            db.url
        ),
        "test",
    )
    .expect("test config is valid");
    let server = FaultServer::start(cfg, ServerOptions::default())
        .await
        .expect("the replica starts once the schema is free, not at its lock_timeout");
    release.await.expect("the other replica commits");
    let created = send(
        server.addr(),
        &request_bytes("POST", "/orders", Some("late-start"), r#"{"sku":"L"}"#),
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_stays_ok_while_a_lock_holds_every_pooled_connection() {
    let Some(db) = TestDb::new("health_stays_ok_while_a_lock_holds_every_pooled_connection").await
    else {
        return;
    };
    let server = common::start(&format!(
        "orders: {{ database: \"{}\", pool_size: 4, lock_timeout: 4s, statement_timeout: 5s }}",
        db.url
    ))
    .await;
    let locker = lock_order_tables(&db).await;
    // Eight creations for four pooled connections: every connection waits on the lock.
    let addr = server.addr();
    let burst = tokio::spawn(async move {
        common::burst(addr, 8, |i| {
            request_bytes(
                "POST",
                "/orders",
                Some(&format!("held-{i}")),
                r#"{"sku":"H"}"#,
            )
        })
        .await
    });
    let mut waiting = false;
    for _ in 0..100 {
        let (n,): (i64,) = {
            // Asked on another connection: the locker's transaction would see one snapshot.
            let row = db
                .admin
                .query_one(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = 'fault-server'",
                    &[],
                )
                .await
                .expect("pg_stat_activity");
            (row.get(0),)
        };
        if n >= 4 {
            waiting = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(waiting, "the pool's four connections wait on the lock");
    // The database answers: health says so, from a connection of its own.
    let h = health(server.addr()).await;
    assert_eq!(h["status"], "ok", "{h}");
    assert_eq!(h["store"]["status"], "ok", "{h}");
    locker.batch_execute("ROLLBACK").await.expect("unlock");
    let replies = tokio::time::timeout(Duration::from_secs(30), burst)
        .await
        .expect("answered once the lock is gone")
        .expect("the burst");
    assert!(
        replies.iter().all(|r| matches!(r.status, 201 | 503)),
        "{replies:?}"
    );
    db.drop().await;
}
