//! The orders resource under real concurrency, on the real SQLite database.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{burst, exchange, journal, request_bytes, start};

const ROUNDS: usize = 25;

async fn rounds_of_ten(yaml: &str) -> (Vec<u64>, fault_server::FaultServer) {
    let s = start(yaml).await;
    let mut orders_per_round = Vec::new();
    for round in 0..ROUNDS {
        let key = format!("round-{round}");
        let body = format!(r#"{{"sku":"A{round}","qty":1}}"#);
        let replies = burst(s.addr(), 10, |_| {
            request_bytes("POST", "/orders", Some(&key), &body)
        })
        .await;
        assert!(
            replies.iter().all(|r| r.status < 500),
            "no 5xx to the losers: {replies:?}"
        );
        orders_per_round.push(s.orders().count_for_key(&key).await.unwrap());
    }
    (orders_per_round, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_never_creates_two_orders_for_one_key() {
    let (counts, s) = rounds_of_ten("orders: { idempotency: unique, work_delay: 5ms }").await;
    assert!(counts.iter().all(|c| *c == 1), "{counts:?}");
    let j = journal(&s).await;
    assert_eq!(j.len(), ROUNDS * 10);
    // Per key: exactly one 201 carrying the created id; the rest are 409 (in flight) or 200 replays.
    let mut by_key: HashMap<&str, Vec<&history::Entry>> = HashMap::new();
    for e in &j {
        by_key
            .entry(e.idempotency_key.as_deref().unwrap())
            .or_default()
            .push(e);
    }
    for (key, es) in by_key {
        let created: Vec<_> = es.iter().filter_map(|e| e.created.as_deref()).collect();
        assert_eq!(created.len(), 1, "{key}");
        assert!(
            es.iter().all(|e| matches!(e.status, Some(201 | 200 | 409))),
            "{key}"
        );
        assert_eq!(es.iter().filter(|e| e.status == Some(201)).count(), 1);
        let attempts: Vec<u32> = {
            let mut a: Vec<u32> = es.iter().filter_map(|e| e.key_attempt).collect();
            a.sort();
            a
        };
        assert_eq!(attempts, (1..=10).collect::<Vec<_>>());
    }
    assert_eq!(
        s.orders().count().await.unwrap(),
        ROUNDS as u64,
        "journal `created` agrees with the database"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_then_insert_races_into_duplicates() {
    let (counts, s) =
        rounds_of_ten("orders: { idempotency: check-then-insert, work_delay: 100ms }").await;
    // How many rounds race depends on how the machine schedules ten requests in 100 ms; that
    // they can race, and that every duplicate is counted, does not.
    let racy = counts.iter().filter(|c| **c > 1).count();
    assert!(racy >= 1, "no duplicates in {ROUNDS} rounds: {counts:?}");
    let j = journal(&s).await;
    let created = j.iter().filter(|e| e.created.is_some()).count() as u64;
    assert_eq!(
        created,
        s.orders().count().await.unwrap(),
        "journal `created` agrees with the database"
    );
    assert_eq!(created, counts.iter().sum::<u64>());
}

#[tokio::test]
async fn idempotency_semantics() {
    // The first request works for 3 s: a second one sent a second later finds it in flight,
    // however slowly the machine runs.
    let s = start("orders: { idempotency: unique, work_delay: 3s, retry_after_s: 2 }").await;
    let post = |key: Option<&'static str>, body: &'static str| {
        let addr = s.addr();
        async move {
            let c = tokio::net::TcpStream::connect(addr).await.unwrap();
            exchange(c, &request_bytes("POST", "/orders", key, body))
                .await
                .unwrap()
        }
    };
    // A second request while the first is in flight: 409 + Retry-After.
    let first = tokio::spawn(post(Some("k"), r#"{"sku":"A"}"#));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let concurrent = post(Some("k"), r#"{"sku":"A"}"#).await;
    assert_eq!(concurrent.status, 409);
    assert_eq!(concurrent.header("retry-after"), Some("2"));
    assert_eq!(
        concurrent.header("content-type"),
        Some("application/problem+json")
    );
    let first = first.await.unwrap();
    assert_eq!(first.status, 201);
    let id = first.json()["id"].as_str().unwrap().to_string();
    assert_eq!(
        first.header("location"),
        Some(format!("/orders/{id}").as_str())
    );
    // After completion: a replay of the stored body, 200, flagged.
    let replay = post(Some("k"), r#"{"sku":"A"}"#).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, first.body);
    // Same key, different body: 422 problem.
    let other = post(Some("k"), r#"{"sku":"B"}"#).await;
    assert_eq!(other.status, 422);
    assert_eq!(other.json()["status"], 422);
    // Missing key: 400. Not JSON: 400.
    assert_eq!(post(None, r#"{"sku":"A"}"#).await.status, 400);
    assert_eq!(post(Some("j"), "not json").await.status, 400);
    // GET by id and by key.
    let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    let got = exchange(c, &request_bytes("GET", &format!("/orders/{id}"), None, ""))
        .await
        .unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.json()["order"]["sku"], "A");
    let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    let listed = exchange(
        c,
        &request_bytes("GET", "/orders?idempotency_key=k", None, ""),
    )
    .await
    .unwrap();
    assert_eq!(listed.json()["count"], 1);
    assert_eq!(s.orders().count().await.unwrap(), 1);
}

#[tokio::test]
async fn keys_expire() {
    let s = start("orders: { idempotency: unique, key_ttl: 3s }").await;
    let post = || async {
        let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
        exchange(c, &request_bytes("POST", "/orders", Some("ttl"), "{}"))
            .await
            .unwrap()
            .status
    };
    assert_eq!(post().await, 201);
    assert_eq!(post().await, 200);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(post().await, 201, "an expired key is a new key");
    assert_eq!(s.orders().count_for_key("ttl").await.unwrap(), 2);
}

#[tokio::test]
async fn key_optional_and_none_impl() {
    let s = start("orders: { idempotency: unique, require_key: false }").await;
    let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    assert_eq!(
        exchange(c, &request_bytes("POST", "/orders", None, "{}"))
            .await
            .unwrap()
            .status,
        201
    );
    let s = start("orders: { idempotency: none }").await;
    for _ in 0..3 {
        let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
        assert_eq!(
            exchange(c, &request_bytes("POST", "/orders", Some("same"), "{}"))
                .await
                .unwrap()
                .status,
            201
        );
    }
    assert_eq!(s.orders().count().await.unwrap(), 3, "`none` ignores keys");
}

async fn pay_race(pay: &str) -> (Vec<u16>, u64, Vec<history::Entry>) {
    let s = start(&format!("orders: {{ pay: {pay}, work_delay: 200ms }}")).await;
    let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    let created = exchange(c, &request_bytes("POST", "/orders", Some("p"), "{}"))
        .await
        .unwrap();
    let id = created.json()["id"].as_str().unwrap().to_string();
    let path = format!("/orders/{id}/pay");
    let replies = burst(s.addr(), 10, |_| request_bytes("POST", &path, None, "")).await;
    // And a sequential repeat afterwards: a no-op, reported, not an error.
    let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    let again = exchange(c, &request_bytes("POST", &path, None, ""))
        .await
        .unwrap();
    assert_eq!(again.status, 200);
    assert!(again.json()["transition"].is_null());
    let payments = s.orders().payments_of(&id).await.unwrap();
    (
        replies.iter().map(|r| r.status).collect(),
        payments,
        journal(&s).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_pay_transitions_once() {
    let (statuses, payments, j) = pay_race("conditional").await;
    assert!(statuses.iter().all(|s| *s == 200));
    assert_eq!(payments, 1);
    assert_eq!(j.iter().filter(|e| e.transition.is_some()).count(), 1);
    assert!(j
        .iter()
        .filter(|e| e.path.ends_with("/pay"))
        .all(|e| e.resource.is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_then_write_pay_transitions_many_times() {
    let (_, payments, j) = pay_race("read-then-write").await;
    assert!(
        payments > 1,
        "the race should charge more than once, got {payments}"
    );
    assert_eq!(
        j.iter().filter(|e| e.transition.is_some()).count() as u64,
        payments
    );
}

#[tokio::test]
async fn unknown_order_is_404() {
    let s = start("{}").await;
    let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    assert_eq!(
        exchange(c, &request_bytes("GET", "/orders/nope", None, ""))
            .await
            .unwrap()
            .status,
        404
    );
    let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    assert_eq!(
        exchange(c, &request_bytes("POST", "/orders/nope/pay", None, ""))
            .await
            .unwrap()
            .status,
        404
    );
    let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    assert_eq!(
        exchange(c, &request_bytes("DELETE", "/orders", None, ""))
            .await
            .unwrap()
            .status,
        405
    );
}

/// One `POST /orders` on a connection of its own.
async fn post_order(addr: std::net::SocketAddr, key: &str, body: &str) -> common::Raw {
    let c = tokio::net::TcpStream::connect(addr).await.unwrap();
    exchange(c, &request_bytes("POST", "/orders", Some(key), body))
        .await
        .unwrap()
}

/// The state of `key` in the key table of the SQLite file `db`, if it is there.
fn key_state(db: &std::path::Path, key: &str) -> Option<String> {
    let c = rusqlite::Connection::open(db).ok()?;
    c.query_row(
        "SELECT state FROM idempotency_keys WHERE key = ?1",
        [key],
        |r| r.get(0),
    )
    .ok()
}

/// Waits (up to 20 s) until `key` is in flight in the SQLite file `db`.
async fn claimed(db: &std::path::Path, key: &str) {
    for _ in 0..400 {
        if key_state(db, key).as_deref() == Some("in_flight") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{key} was never claimed");
}

#[tokio::test]
async fn a_lapsed_claim_is_taken_over_and_its_holder_writes_nothing() {
    // Two servers on one database. On the slow one a request works 6.5 s; on the other, 4 s
    // under a lease of 4.5 s. A retry there 4.7 s after the first request's claim takes the key
    // over, and is still working when the first completes (6.5 s): the first, whose claim is no
    // longer current, writes nothing; the retry makes the order (at 8.7 s).
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("orders.sqlite");
    let slow = start(&format!(
        "orders: {{ idempotency: unique, work_delay: 6500ms, database: {db:?} }}"
    ))
    .await;
    let quick = start(&format!(
        "orders: {{ idempotency: unique, work_delay: 4s, claim_lease: 4500ms, database: {db:?} }}"
    ))
    .await;
    let first = tokio::spawn(post_order(slow.addr(), "lapse", r#"{"sku":"A"}"#));
    claimed(&db, "lapse").await;
    let since = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(4700)).await;
    // Another body is still another request: no takeover, whatever the lease.
    let other = post_order(quick.addr(), "lapse", r#"{"sku":"B"}"#).await;
    assert_eq!(other.status, 422, "{other:?}");
    let sent_within = since.elapsed();
    let retry = tokio::spawn(post_order(quick.addr(), "lapse", r#"{"sku":"A"}"#));
    let (first, retry) = (first.await.unwrap(), retry.await.unwrap());
    // Either the retry took the key over (the first then lost its claim), or — only when the
    // machine stalled for a second or more — the first completed before the retry's claim and
    // the retry got its replay. Without takeover the retry would get 409; without the fence
    // the first would get 201 while the retry worked.
    match (first.status, retry.status) {
        (409, 201) => assert!(
            first.body.contains("no longer current"),
            "the problem says why: {}",
            first.body
        ),
        (201, 200) => eprintln!(
            "the retry (sent {sent_within:?} after the claim) came after the first completed: checked the replay only"
        ),
        other => panic!("first {first:?}, retry {retry:?}: {other:?}"),
    }
    assert_eq!(
        quick.orders().count_for_key("lapse").await.unwrap(),
        1,
        "first {first:?}, retry {retry:?}"
    );
    let made = if retry.status == 201 { &retry } else { &first };
    let replay = post_order(quick.addr(), "lapse", r#"{"sku":"A"}"#).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.json()["id"], made.json()["id"]);
    let mut created: Vec<String> = journal(&slow)
        .await
        .into_iter()
        .filter_map(|e| e.created)
        .collect();
    created.extend(journal(&quick).await.into_iter().filter_map(|e| e.created));
    assert_eq!(created, [made.json()["id"].as_str().unwrap().to_string()]);
}

#[test]
fn a_claim_left_by_a_killed_server_is_taken_over_after_its_lease() {
    use common::binary;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("orders.sqlite");
    // The first server works an hour per request; the next one, on the same database, lets a
    // claim be held a second.
    let config =
        |orders: &str| format!("orders: {{ idempotency: unique, {orders}, database: {db:?} }}\n");
    let body = r#"{"sku":"A"}"#;
    let post = format!(
        "POST /orders HTTP/1.0\r\nhost: x\r\nidempotency-key: crash\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let first = binary::start(&config("work_delay: 1h"));
    let addr = first.addr;
    {
        let post = post.clone();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(post.as_bytes()).unwrap();
            let _ = s.read_to_end(&mut Vec::new());
        });
    }
    // The claim is in once the database has the key in flight. (Not asked with a second
    // request: past the lease, that one would take the key over itself.)
    let claimed = (0..400).any(|_| {
        let held = key_state(&db, "crash").as_deref() == Some("in_flight");
        if !held {
            std::thread::sleep(Duration::from_millis(50));
        }
        held
    });
    assert!(claimed, "the first request never claimed the key");
    // The server dies with the key in flight; the next one opens the same database.
    drop(first);
    let second = binary::start(&config("claim_lease: 1s"));
    std::thread::sleep(Duration::from_millis(1200));
    let taken = second.request(post.as_bytes());
    assert!(
        taken.starts_with("HTTP/1.0 201"),
        "answer: {taken:?}\nthe second server's log:\n{}",
        second.log()
    );
    assert!(second.log().contains("taken over"), "{}", second.log());
    let listed = second.get("/orders?idempotency_key=crash");
    assert!(listed.contains(r#""count":1"#), "{listed}");
}

#[tokio::test]
async fn a_key_table_from_before_claim_tokens_gets_them_and_keeps_its_old_keys_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("orders.sqlite");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    {
        // The key table as it was before claims had tokens, with a key left in flight two
        // minutes ago by a server of then.
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch(
            "CREATE TABLE idempotency_keys (
                key TEXT NOT NULL UNIQUE, request_hash TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
                response_status INTEGER, response_body TEXT, order_id TEXT,
                created_at_ms INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL);",
        )
        .unwrap();
        // What the server keys a request's body by: its SHA-256, in hex.
        let hash = {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(br#"{"sku":"A"}"#))
        };
        c.execute(
            "INSERT INTO idempotency_keys (key, request_hash, state, created_at_ms, expires_at_ms) VALUES ('old', ?1, 'in_flight', ?2, ?3)",
            rusqlite::params![hash, now - 120_000, now + 86_400_000],
        )
        .unwrap();
    }
    let s = start(&format!(
        "orders: {{ idempotency: unique, claim_lease: 1s, database: {db:?} }}"
    ))
    .await;
    // A server of then completes without a token, so its key is never taken over: it expires
    // after key_ttl, as it did.
    let old = post_order(s.addr(), "old", r#"{"sku":"A"}"#).await;
    assert_eq!(old.status, 409, "{old:?}");
    assert_eq!(s.orders().count_for_key("old").await.unwrap(), 0);
    // The table has its new columns: new keys are claimed and completed under tokens.
    let new = post_order(s.addr(), "new", r#"{"sku":"A"}"#).await;
    assert_eq!(new.status, 201, "{new:?}");
    let c = rusqlite::Connection::open(&db).unwrap();
    let token: Option<String> = c
        .query_row(
            "SELECT claim_id FROM idempotency_keys WHERE key = 'new'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(token.map(|t| t.len()), Some(32));
}
