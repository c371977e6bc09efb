//! A `protocol: postgres` proxy between tokio-postgres (and libpq's `psql`) and a real
//! PostgreSQL server, over real sockets: each protocol fault as the client library and the
//! database see it — an ErrorResponse of a chosen SQLSTATE in place of a statement (the
//! database's transaction failing as it would have), a FATAL one closing the connection, a
//! refused startup, a statement or its answer held, a COMMIT forwarded and its answer lost (the
//! ambiguous commit: committed, and the client cannot know), a connection cut mid-transaction —
//! the SSLRequest answered `N`, the rules' counts and seeded draws, and bad input closed (or
//! forwarded) with a journal entry that says why. Each statement's journal entry is read back.
//!
//! The server is named by `FAULT_SERVER_TEST_DATABASE_URL` (`bash .ci/postgres` prints one);
//! without it each test says it skips, unless `HARNESS_REQUIRE_TOOLS=1`. Every test makes a
//! schema of its own and reaches it through `search_path`.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

use fault_server::{Config, FaultServer, ServerOptions};
use history::{Entry, Outcome, TcpEnd, TxControl};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

/// The test server's URL, or `None` (after saying so) when the tests are to skip.
fn base_url(test: &str) -> Option<String> {
    match std::env::var("FAULT_SERVER_TEST_DATABASE_URL") {
        Ok(u) if !u.trim().is_empty() => Some(u.trim().to_string()),
        _ => {
            assert!(
                std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
                "{test}: FAULT_SERVER_TEST_DATABASE_URL is not set and HARNESS_REQUIRE_TOOLS=1"
            );
            let _ = writeln!(
                std::io::stderr(),
                "{test}: skipped: FAULT_SERVER_TEST_DATABASE_URL is not set (`bash .ci/postgres` prints one)"
            );
            None
        }
    }
}

/// A fault server whose proxy `db` reads PostgreSQL in front of the test server, and a schema of
/// the test's own.
struct Pg {
    server: FaultServer,
    base: tokio_postgres::Config,
    schema: String,
    admin: Client,
}

impl Pg {
    /// `postgres` is the proxy's `postgres:` settings (YAML, indented under it); `seed` the
    /// server's seed.
    async fn start(test: &str, postgres: &str, seed: u64) -> Option<Pg> {
        let url = base_url(test)?;
        let base = tokio_postgres::Config::from_str(&url).expect("a PostgreSQL URL");
        let (admin, conn) = tokio_postgres::connect(&url, NoTls)
            .await
            .unwrap_or_else(|e| panic!("{test}: cannot reach the test server: {e}"));
        tokio::spawn(conn);
        let schema = format!("p_{}", uuid::Uuid::new_v4().simple());
        admin
            .batch_execute(&format!(
                "CREATE SCHEMA {schema}; CREATE TABLE {schema}.items (id serial PRIMARY KEY, name text NOT NULL UNIQUE)"
            ))
            .await
            .expect("the test's schema");
        let yaml = format!(
            "seed: {seed}\nproxies:\n  - name: db\n    listen: 127.0.0.1:0\n    upstream: \"{url}\"\n    protocol: postgres\n    postgres:\n{postgres}\n"
        );
        let cfg = Config::from_yaml(&yaml, test).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let server = FaultServer::start(cfg, ServerOptions::default())
            .await
            .expect("the server starts");
        Some(Pg {
            server,
            base,
            schema,
            admin,
        })
    }

    fn proxy(&self) -> SocketAddr {
        self.server.proxy_addr("db").expect("the proxy listens")
    }

    /// The client's configuration through the proxy, in the test's schema.
    fn through(&self) -> tokio_postgres::Config {
        // A new configuration: `host` and `port` add to a configuration's lists.
        let mut c = tokio_postgres::Config::new();
        if let Some(u) = self.base.get_user() {
            c.user(u);
        }
        if let Some(p) = self.base.get_password() {
            c.password(p);
        }
        if let Some(d) = self.base.get_dbname() {
            c.dbname(d);
        }
        let at = self.proxy();
        c.host("127.0.0.1")
            .port(at.port())
            .options(format!("-c search_path={}", self.schema))
            .connect_timeout(Duration::from_secs(10));
        c
    }

    /// A client through the proxy.
    async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        let (client, conn) = self.through().connect(NoTls).await?;
        tokio::spawn(conn);
        Ok(client)
    }

    /// Rows of `items` named `name`, asked of the database directly.
    async fn count(&self, name: &str) -> i64 {
        self.admin
            .query_one(
                &format!("SELECT count(*) FROM {}.items WHERE name = $1", self.schema),
                &[&name],
            )
            .await
            .expect("count")
            .get(0)
    }

    /// The journal once `connections` proxied connections have ended (within 10 s): their
    /// entries and their statements'.
    async fn journal(&self, connections: usize) -> Vec<Entry> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.server.settle(Duration::from_secs(2)).await;
            let j = self.server.journal().entries();
            let n = j.iter().filter(|e| e.tcp.is_some()).count();
            if n >= connections || Instant::now() > deadline {
                assert!(n >= connections, "{n} of {connections} connections: {j:#?}");
                return j;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let schema = self.schema.clone();
        let admin = &self.admin;
        // Best effort: a schema left behind holds one empty table.
        let _ = futures_lite_block(admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")));
    }
}

/// Runs a future to its end on the current runtime's thread (a drop cannot await).
fn futures_lite_block<F: std::future::Future>(f: F) -> Option<F::Output> {
    let handle = tokio::runtime::Handle::try_current().ok()?;
    Some(tokio::task::block_in_place(|| handle.block_on(f)))
}

/// The statements journaled, in `seq` order.
fn statements(j: &[Entry]) -> Vec<&Entry> {
    j.iter().filter(|e| e.postgres().is_some()).collect()
}

/// The statement entry whose text is `text`.
fn statement<'a>(j: &'a [Entry], text: &str) -> &'a Entry {
    j.iter()
        .find(|e| {
            e.postgres()
                .and_then(|s| s.statement.as_deref())
                .is_some_and(|s| s == text)
        })
        .unwrap_or_else(|| panic!("no statement {text:?} in {j:#?}"))
}

fn code(e: &tokio_postgres::Error) -> Option<&SqlState> {
    e.as_db_error().map(|d| d.code())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_fault_answers_its_sqlstate_and_the_database_fails_the_transaction_as_it_would() {
    let rules = r#"      rules:
        - { id: serialize, match: { statement: "INSERT INTO items*", in_block: true }, fault: { error: "40001" } }
        - { id: deadlock, match: { statement: "UPDATE items*" }, fault: { error: 40P01 } }
        - { id: unique, match: { statement: "DELETE FROM items*" }, fault: { error: { sqlstate: "23505", message: "duplicate order" } } }
        - { id: custom, match: { statement: "SELECT 'custom'" }, fault: { error: { sqlstate: "XX001", message: "data corrupted" } } }"#;
    let Some(pg) = Pg::start("errors", rules, 1).await else {
        return;
    };
    let c = pg.connect().await.expect("connect through the proxy");
    // In a block: the INSERT is refused with 40001, and the database's own transaction is failed
    // as it would have been — the next statement of the block is refused by the database.
    c.batch_execute("BEGIN").await.unwrap();
    let e = c
        .execute("INSERT INTO items (name) VALUES ($1)", &[&"a"])
        .await
        .expect_err("40001");
    assert_eq!(code(&e), Some(&SqlState::T_R_SERIALIZATION_FAILURE), "{e}");
    let e = c
        .query("SELECT 1", &[])
        .await
        .expect_err("in a failed block");
    assert_eq!(code(&e), Some(&SqlState::IN_FAILED_SQL_TRANSACTION), "{e}");
    c.batch_execute("ROLLBACK").await.unwrap();
    // Outside a block, an UPDATE refused with 40P01 never ran.
    c.execute("INSERT INTO items (name) VALUES ('b')", &[])
        .await
        .unwrap();
    let e = c
        .execute("UPDATE items SET name = 'c' WHERE name = 'b'", &[])
        .await
        .expect_err("40P01");
    assert_eq!(code(&e), Some(&SqlState::T_R_DEADLOCK_DETECTED), "{e}");
    let e = c
        .execute("DELETE FROM items WHERE name = 'b'", &[])
        .await
        .expect_err("23505");
    let db = e.as_db_error().expect("a database error");
    assert_eq!(
        (db.code(), db.message()),
        (&SqlState::UNIQUE_VIOLATION, "duplicate order")
    );
    let e = c.simple_query("SELECT 'custom'").await.expect_err("XX001");
    assert_eq!(code(&e), Some(&SqlState::DATA_CORRUPTED), "{e}");
    // The connection goes on; nothing refused reached the database.
    c.query_one("SELECT 1", &[]).await.unwrap();
    assert_eq!((pg.count("a").await, pg.count("b").await), (0, 1));
    drop(c);

    let j = pg.journal(1).await;
    let insert = statement(&j, "INSERT INTO items (name) VALUES ($1)");
    let s = insert.postgres().unwrap();
    assert_eq!(
        (
            insert.rule.as_deref(),
            insert.fault.as_deref(),
            insert.forwarded
        ),
        (Some("serialize"), Some("error"), false)
    );
    assert_eq!(
        (s.sqlstate.as_deref(), s.block, s.tx),
        (Some("40001"), true, 1)
    );
    assert!(
        s.params.is_some(),
        "a digest of the values, never the values"
    );
    let rollback = statement(&j, "ROLLBACK");
    assert_eq!(
        rollback.postgres().unwrap().committed,
        Some(false),
        "{rollback:#?}"
    );
    let update = statement(&j, "UPDATE items SET name = 'c' WHERE name = 'b'");
    assert_eq!(
        update.postgres().unwrap().sqlstate.as_deref(),
        Some("40P01")
    );
    assert_eq!(
        update.postgres().unwrap().committed,
        Some(false),
        "an implicit transaction that failed did not commit"
    );
    // Every `seq` handed out came back: the statements and the connection, 1 to n.
    let seqs: Vec<u64> = j.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=j.len() as u64).collect::<Vec<_>>());
    assert!(statements(&j)
        .iter()
        .all(|e| e.conn_id == j.last().unwrap().conn_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_error_closes_the_connection_after_it() {
    let rules = r#"      rules:
        - { id: shutdown, match: { statement: "SELECT 'bye'" }, fault: { error: 57P01 } }"#;
    let Some(pg) = Pg::start("fatal", rules, 1).await else {
        return;
    };
    let c = pg.connect().await.unwrap();
    let e = c.simple_query("SELECT 'bye'").await.expect_err("57P01");
    assert_eq!(code(&e), Some(&SqlState::ADMIN_SHUTDOWN), "{e}");
    let db = e.as_db_error().unwrap();
    assert_eq!(db.severity(), "FATAL");
    let after = c.simple_query("SELECT 1").await;
    assert!(after.is_err() && c.is_closed(), "the connection is gone");
    let j = pg.journal(1).await;
    let conn = j.iter().find(|e| e.tcp.is_some()).unwrap();
    assert_eq!(
        conn.tcp.as_ref().map(|t| (t.end, t.toxic.as_deref())),
        Some((TcpEnd::Cut, Some("postgres")))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_rule_refuses_a_connection_with_too_many_connections() {
    let rules = r#"      rules:
        - { id: full, match: { startup: true, connections: 1 }, fault: { error: "53300" } }"#;
    let Some(pg) = Pg::start("startup", rules, 1).await else {
        return;
    };
    let e = pg
        .connect()
        .await
        .expect_err("the first connection is refused");
    assert_eq!(code(&e), Some(&SqlState::TOO_MANY_CONNECTIONS), "{e}");
    let c = pg.connect().await.expect("the second is not");
    c.query_one("SELECT 1", &[]).await.unwrap();
    drop(c);
    let j = pg.journal(2).await;
    let refused = statements(&j)[0].postgres().unwrap();
    assert!(refused.startup, "{refused:#?}");
    assert_eq!(refused.sqlstate.as_deref(), Some("53300"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_holds_the_statement_or_its_answer_and_nothing_else() {
    let rules = r#"      rules:
        - { id: before, match: { statement: "SELECT 'before'" }, fault: { delay: 300ms } }
        - { id: after, match: { statement: "SELECT 'after'" }, fault: { delay: { duration: 300ms, when: after } } }"#;
    let Some(pg) = Pg::start("delay", rules, 1).await else {
        return;
    };
    let c = pg.connect().await.unwrap();
    let other = pg.connect().await.unwrap();
    for text in ["SELECT 'before'", "SELECT 'after'"] {
        let t = Instant::now();
        // Another connection is not held meanwhile.
        let (held, free) = tokio::join!(c.simple_query(text), async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let t = Instant::now();
            other.simple_query("SELECT 2").await.unwrap();
            t.elapsed()
        });
        held.unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "{text}: {:?}",
            t.elapsed()
        );
        assert!(
            free < Duration::from_millis(250),
            "{text}: the other connection waited {free:?}"
        );
    }
    // Not the next statement.
    let t = Instant::now();
    c.simple_query("SELECT 3").await.unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    drop((c, other));
    let j = pg.journal(2).await;
    for text in ["SELECT 'before'", "SELECT 'after'"] {
        let e = statement(&j, text);
        assert_eq!(e.fault.as_deref(), Some("delay"));
        assert!(e.t_done_us - e.t_recv_us >= 300_000, "{e:#?}");
        // The database's own time: the statement was forwarded after the hold, or answered
        // before its answer was held.
        assert!(e.upstream_us.is_some_and(|u| u < 250_000), "{e:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_commit_committed_and_the_client_cannot_know() {
    let rules = r#"      rules:
        - { id: lose-commit, match: { statement: COMMIT, commits: 1 }, fault: drop }"#;
    let Some(pg) = Pg::start("ambiguous", rules, 1).await else {
        return;
    };
    let c = pg.connect().await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    c.execute("INSERT INTO items (name) VALUES ($1)", &[&"order-1"])
        .await
        .unwrap();
    let e = c.batch_execute("COMMIT").await.expect_err("no answer");
    assert!(
        e.as_db_error().is_none() && c.is_closed(),
        "the connection closed without an answer: {e}"
    );
    // The database committed it.
    assert_eq!(pg.count("order-1").await, 1);
    // The next COMMIT is not the first: it is answered.
    let c = pg.connect().await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    c.execute("INSERT INTO items (name) VALUES ('order-2')", &[])
        .await
        .unwrap();
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(pg.count("order-2").await, 1);
    drop(c);
    let j = pg.journal(2).await;
    let commits: Vec<&Entry> = statements(&j)
        .into_iter()
        .filter(|e| e.postgres().unwrap().control == Some(TxControl::Commit))
        .collect();
    let lost = commits[0];
    let s = lost.postgres().unwrap();
    assert_eq!(
        (lost.outcome, lost.fault.as_deref(), lost.forwarded),
        (Outcome::Dropped, Some("drop"), true)
    );
    assert_eq!(
        (s.tag.as_deref(), s.committed),
        (Some("COMMIT"), Some(true)),
        "the journal knows what the client could not"
    );
    assert_eq!(commits[1].postgres().unwrap().committed, Some(true));
    assert_eq!(commits[1].outcome, Outcome::Responded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_cuts_the_connection_and_the_open_transaction_is_rolled_back() {
    let rules = r#"      rules:
        - { id: cut, match: { statement: "UPDATE items*" }, fault: reset }"#;
    let Some(pg) = Pg::start("reset", rules, 1).await else {
        return;
    };
    let c = pg.connect().await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    c.execute("INSERT INTO items (name) VALUES ('half')", &[])
        .await
        .unwrap();
    let e = c
        .execute("UPDATE items SET name = 'whole'", &[])
        .await
        .expect_err("cut");
    assert!(e.as_db_error().is_none() && c.is_closed(), "{e}");
    // The database rolls back a transaction whose connection is gone (soon after).
    let deadline = Instant::now() + Duration::from_secs(5);
    while pg.count("half").await != 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pg.count("half").await, 0);
    let j = pg.journal(1).await;
    let cut = statement(&j, "UPDATE items SET name = 'whole'");
    assert_eq!(
        (
            cut.outcome,
            cut.forwarded,
            cut.postgres().unwrap().committed
        ),
        (Outcome::Reset, false, Some(false))
    );
    let conn = j.iter().find(|e| e.tcp.is_some()).unwrap();
    assert_eq!(conn.tcp.as_ref().unwrap().end, TcpEnd::Reset);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_count_transactions_and_commits_per_connection() {
    let rules = r#"      rules:
        - { id: second-tx, match: { statement: "SELECT 'x'", transactions: 2 }, fault: { error: "40001" } }
        - { id: first-commits, match: { statement: COMMIT, connection_commits: "1-2" }, fault: { error: "40001" } }"#;
    let Some(pg) = Pg::start("counts", rules, 1).await else {
        return;
    };
    for _ in 0..2 {
        let c = pg.connect().await.unwrap();
        let mut failed = Vec::new();
        for i in 1..=3 {
            if c.simple_query("SELECT 'x'").await.is_err() {
                failed.push(i);
            }
        }
        assert_eq!(failed, [2], "the second transaction of each connection");
        let mut failed = Vec::new();
        for i in 1..=3 {
            c.batch_execute("BEGIN").await.unwrap();
            c.simple_query("SELECT 1").await.unwrap();
            if c.batch_execute("COMMIT").await.is_err() {
                failed.push(i);
            }
            // A failed COMMIT closes its block: the database answered ROLLBACK in its place.
            let _ = c.batch_execute("ROLLBACK").await;
        }
        assert_eq!(failed, [1, 2], "the first two COMMITs of each connection");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probability_rule_faults_the_same_statements_in_every_run_with_the_seed() {
    let rules = r#"      rules:
        - { id: coin, match: { statement: "SELECT $1::int", probability: 0.5 }, fault: { error: "40001" } }"#;
    let mut runs = Vec::new();
    for seed in [7, 7, 8] {
        let Some(pg) = Pg::start("probability", rules, seed).await else {
            return;
        };
        let c = pg.connect().await.unwrap();
        let mut failed = Vec::new();
        for i in 0..24i32 {
            if c.query_one("SELECT $1::int", &[&i]).await.is_err() {
                failed.push(i);
            }
        }
        drop(c);
        let j = pg.journal(1).await;
        for e in statements(&j) {
            if e.fault.is_some() {
                assert!(e.draw.is_some_and(|d| d < 0.5), "{e:#?}");
            }
        }
        runs.push(failed);
    }
    assert_eq!(runs[0], runs[1], "same seed, same statements");
    assert_ne!(runs[0], runs[2], "another seed, others");
    assert!((4..=20).contains(&runs[0].len()), "{:?}", runs[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_statements_are_faulted_one_by_one_in_their_places() {
    let rules = r#"      rules:
        - { id: middle, match: { statement: "SELECT 'two'::text" }, fault: { error: "40001" } }"#;
    let Some(pg) = Pg::start("pipeline", rules, 1).await else {
        return;
    };
    let c = pg.connect().await.unwrap();
    // tokio-postgres sends the three queries before the first answer.
    let (one, two, three) = tokio::join!(
        c.query_one("SELECT 'one'::text", &[]),
        c.query_one("SELECT 'two'::text", &[]),
        c.query_one("SELECT 'three'::text", &[]),
    );
    assert_eq!(one.unwrap().get::<_, String>(0), "one");
    assert_eq!(
        code(&two.unwrap_err()),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE)
    );
    assert_eq!(three.unwrap().get::<_, String>(0), "three");
    drop(c);
    let j = pg.journal(1).await;
    // In the order they reached the proxy (each was prepared first, in its own round trip).
    let mut texts: Vec<(String, Option<String>)> = statements(&j)
        .iter()
        .map(|e| {
            let s = e.postgres().unwrap();
            (s.statement.clone().unwrap_or_default(), s.sqlstate.clone())
        })
        .collect();
    texts.sort();
    assert_eq!(
        texts,
        [
            ("SELECT 'one'::text".to_string(), None),
            ("SELECT 'three'::text".to_string(), None),
            ("SELECT 'two'::text".to_string(), Some("40001".to_string())),
        ]
    );
}

/// `psql` (libpq) through the proxy with an `sslmode`: whether it connected, and what it said.
fn psql(pg: &Pg, sslmode: &str, port: u16) -> Option<(bool, String)> {
    let url = base_url("psql")?;
    let base = tokio_postgres::Config::from_str(&url).ok()?;
    let user = base.get_user().unwrap_or("postgres").to_string();
    let password = base
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let db = base.get_dbname().unwrap_or(&user).to_string();
    let out = std::process::Command::new("psql")
        .arg(format!(
            "host=127.0.0.1 port={port} user={user} dbname={db} sslmode={sslmode} connect_timeout=10"
        ))
        .args(["-At", "-c", "SELECT 'plain:' || NOT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"])
        .env("PGPASSWORD", password)
        .output()
        .ok()?;
    let _ = pg;
    Some((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssl_request_is_answered_n_and_libpq_goes_on_in_plaintext() {
    let Some(pg) = Pg::start("ssl", "      rules: []", 1).await else {
        return;
    };
    if std::process::Command::new("psql")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "psql is missing and HARNESS_REQUIRE_TOOLS=1"
        );
        eprintln!("ssl: skipped: psql is missing");
        return;
    }
    let port = pg.proxy().port();
    // `prefer` asks for TLS first: the proxy's `N` sends it on in the clear, through the rules.
    let (ok, said) = tokio::task::block_in_place(|| psql(&pg, "prefer", port)).unwrap();
    assert!(ok && said.trim() == "plain:true", "{said}");
    // `require` takes no for an answer only by failing: the proxy refused TLS.
    let (ok, said) = tokio::task::block_in_place(|| psql(&pg, "require", port)).unwrap();
    assert!(!ok && said.contains("does not support SSL"), "{said}");
    let j = pg.journal(2).await;
    assert!(
        statements(&j).iter().any(|e| e
            .postgres()
            .unwrap()
            .statement
            .as_deref()
            .is_some_and(|s| s.contains("pg_stat_ssl"))),
        "the plaintext session's statement was read: {j:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_speaking_something_else_is_closed_with_a_journal_entry_that_says_so() {
    let Some(pg) = Pg::start("http", "      rules: []", 1).await else {
        return;
    };
    let mut s = tokio::net::TcpStream::connect(pg.proxy()).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0))),
        "closed with nothing sent: {read:?} {buf:?}"
    );
    let j = pg.journal(1).await;
    let v = statements(&j)[0];
    assert_eq!(
        (v.outcome, v.rejected.as_deref()),
        (Outcome::Rejected, Some("client-protocol"))
    );
    let why = v.postgres().unwrap().violation.clone().unwrap();
    assert!(why.contains("such as HTTP"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_closed_or_forwarded_unread_as_configured() {
    let big = format!("SELECT '{}'", "x".repeat(4000));
    for (mode, forwarded) in [("close", false), ("forward", true)] {
        let settings = format!(
            "      max_message: 1KiB\n      max_statement: 512B\n      on_violation: {mode}\n      rules: []"
        );
        let Some(pg) = Pg::start("oversized", &settings, 1).await else {
            return;
        };
        let c = pg.connect().await.unwrap();
        c.simple_query("SELECT 'small'").await.unwrap();
        let r = c.simple_query(&big).await;
        assert_eq!(r.is_ok(), forwarded, "{mode}: {r:?}");
        if forwarded {
            // Unread from here on, and still served.
            c.simple_query("SELECT 'later'").await.unwrap();
        }
        drop(c);
        let j = pg.journal(1).await;
        let texts: Vec<Option<String>> = statements(&j)
            .iter()
            .map(|e| e.postgres().unwrap().statement.clone())
            .collect();
        assert_eq!(texts, [Some("SELECT 'small'".to_string()), None], "{mode}");
        let v = statements(&j)[1].postgres().unwrap();
        assert!(
            v.violation
                .as_deref()
                .is_some_and(|v| v.contains("larger than the limit of 1024 bytes")),
            "{v:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_cut_by_the_close_and_a_statement_over_the_bound_are_journaled_as_such() {
    let Some(pg) = Pg::start("truncated", "      max_statement: 16B\n      rules: []", 1).await
    else {
        return;
    };
    let c = pg.connect().await.unwrap();
    c.simple_query("SELECT 'a rather long statement'")
        .await
        .unwrap();
    drop(c);
    // A startup message, then half of a Query, then the close.
    let mut s = tokio::net::TcpStream::connect(pg.proxy()).await.unwrap();
    let mut startup = Vec::new();
    let params = b"user\0nobody\0\0";
    startup.extend_from_slice(&((8 + params.len()) as u32).to_be_bytes());
    startup.extend_from_slice(&196_608u32.to_be_bytes());
    startup.extend_from_slice(params);
    s.write_all(&startup).await.unwrap();
    s.write_all(b"Q\x00\x00\x00\x40SELECT").await.unwrap();
    s.shutdown().await.unwrap();
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut sink)).await;
    let j = pg.journal(2).await;
    let long = statements(&j)[0].postgres().unwrap();
    assert_eq!(
        (long.statement.as_deref(), long.truncated),
        (Some("SELECT 'a rather"), true)
    );
    let cut = statements(&j)
        .into_iter()
        .find_map(|e| e.postgres().unwrap().violation.clone())
        .expect("the cut message is journaled");
    assert!(cut.contains("closed in the middle of message Q"), "{cut}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_is_journaled_when_its_answer_comes_while_its_connection_stays_open() {
    let Some(pg) = Pg::start("open", "      rules: []", 1).await else {
        return;
    };
    // A pooled connection: open, idle between transactions, never closed while the journal is
    // read — as a service's pool keeps it.
    let c = pg.connect().await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    c.execute("INSERT INTO items (name) VALUES ($1)", &[&"kept-open"])
        .await
        .unwrap();
    c.batch_execute("COMMIT").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let commit = loop {
        pg.server.settle(Duration::from_secs(1)).await;
        let j = pg.server.journal().entries();
        let commit = statements(&j)
            .into_iter()
            .find(|e| e.postgres().unwrap().control == Some(TxControl::Commit))
            .cloned();
        match commit {
            Some(e) => break e,
            None if Instant::now() > deadline => {
                panic!("the COMMIT answered to an open connection is not journaled: {j:#?}")
            }
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert_eq!(commit.postgres().unwrap().committed, Some(true));
    assert!(!c.is_closed());
}
