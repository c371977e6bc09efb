//! The services of the experiments below HTTP (`calibration/below/`), each variant run against a
//! real PostgreSQL or Redis and shown to behave as its documentation says; and, where only
//! something between the service and its database can make the failure (a COMMIT whose answer is
//! lost, a `-LOADING`), through a minimal relay that drives the `wire-faults` sessions — whose journal
//! the `db_retry` and `cache_fallback` checks then judge.
//!
//! Needs PostgreSQL (`FAULT_SERVER_TEST_DATABASE_URL` or `DATABASE_URL`: `bash .ci/postgres`
//! prints one), `redis-server`, and the services' venv (`bash calibration/below/install.sh`); a
//! test says it skips when one is missing, and fails under `HARNESS_REQUIRE_TOOLS=1`.

mod below_support;

use std::sync::Arc;

use below_support::*;
use checks::{CacheFallbackConfig, CheckSpec, DbRetryConfig};
use history::{Outcome, TxControl};
use wire_faults::config::{PostgresConfig, RedisConfig};
use wire_faults::pg::PgProxy;
use wire_faults::resp::RedisProxy;
use wire_faults::Draw;

fn no_draw() -> Arc<dyn Draw> {
    Arc::new(|_: &str, _: &str, _: u64| 0.0)
}

/// A schema of the test's own, dropped at the end.
struct Schema<'a> {
    python: &'a std::path::Path,
    url: &'a str,
    name: String,
}

impl<'a> Schema<'a> {
    fn new(python: &'a std::path::Path, url: &'a str, test: &str) -> Schema<'a> {
        let name = format!("below_{test}_{}", std::process::id());
        sql(
            python,
            url,
            &format!("DROP SCHEMA IF EXISTS {name} CASCADE"),
        );
        Schema { python, url, name }
    }
}

impl Drop for Schema<'_> {
    fn drop(&mut self) {
        sql(
            self.python,
            self.url,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name),
        );
    }
}

fn order(port: u16, key: &str, sku: &str) -> (u16, String) {
    http(
        port,
        "POST",
        "/orders",
        &[
            ("content-type", "application/json"),
            ("idempotency-key", key),
        ],
        &format!("{{\"sku\": \"{sku}\", \"qty\": 1}}"),
    )
}

fn count(port: u16, key: &str) -> u64 {
    let (status, body) = http(port, "GET", &format!("/orders/count?key={key}"), &[], "");
    assert_eq!(status, 200, "{body}");
    let n = body
        .split("\"count\":")
        .nth(1)
        .and_then(|r| r.trim().trim_end_matches('}').trim().parse().ok());
    n.unwrap_or_else(|| panic!("no count in {body}"))
}

/// The first UPDATE of stock for sku `contended` fails with a real 40001 raised by the server
/// (a trigger counting with a sequence, which a rollback does not undo).
fn contend_once(python: &std::path::Path, url: &str, schema: &str) {
    sql(
        python,
        url,
        &format!(
            "CREATE SEQUENCE {schema}.faults;
             CREATE FUNCTION {schema}.fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.sku = 'contended' AND nextval('{schema}.faults') = 1 THEN
                 RAISE EXCEPTION 'could not serialize access due to concurrent update'
                   USING ERRCODE = '40001';
               END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER fail_once BEFORE UPDATE ON {schema}.stock
               FOR EACH ROW EXECUTE FUNCTION {schema}.fail_once();
             INSERT INTO {schema}.stock VALUES ('contended', 100), ('calm', 100);"
        ),
    );
}

#[test]
fn the_orders_service_retries_a_serialization_failure_as_its_mode_says() {
    const T: &str = "orders_modes";
    let (Some(url), Some(py)) = (database(T), python(T)) else {
        return;
    };
    for (mode, status, orders) in [
        // The whole transaction again: the order is made once.
        ("whole", 201, 1),
        // No retry: the client is told, nothing is made.
        ("none", 503, 0),
        // Only the failed UPDATE again: the client is told 201, and the order was never made.
        ("statement", 201, 0),
    ] {
        let schema = Schema::new(&py, &url, &format!("{T}_{mode}"));
        let svc = Service::start(
            &py,
            "orders.py",
            &[
                "--database",
                &url,
                "--schema",
                &schema.name,
                "--retry",
                mode,
                "--key",
                "unique",
            ],
        );
        contend_once(&py, &url, &schema.name);
        let (s, body) = order(svc.port, "k1", "contended");
        assert_eq!(s, status, "{mode}: {body}");
        assert_eq!(count(svc.port, "k1"), orders, "{mode}");
        // Without contention every mode makes its order once.
        let (s, body) = order(svc.port, "k2", "calm");
        assert_eq!((s, count(svc.port, "k2")), (201, 1), "{mode}: {body}");
    }
}

/// The orders service behind a PostgreSQL-aware relay that loses the first COMMIT's answer.
fn ambiguous_commit(test: &str, key: &str) -> Option<(u16, u64, Vec<history::Entry>)> {
    let (Some(url), Some(py)) = (database(test), python(test)) else {
        return None;
    };
    let schema = Schema::new(&py, &url, test);
    let cfg = PostgresConfig::from_yaml(
        "rules:\n  - { id: lose-commit, match: { statement: COMMIT, commits: 1 }, fault: drop }\n",
        test,
    )
    .expect("valid");
    let journal = Journal::new();
    let relay = pg_relay(
        PgProxy::new("db", &cfg, no_draw()),
        upstream(&url),
        Arc::clone(&journal),
    );
    let svc = Service::start(
        &py,
        "orders.py",
        &[
            "--database",
            &via(&url, relay),
            "--schema",
            &schema.name,
            "--retry",
            "whole",
            "--key",
            key,
        ],
    );
    let (status, body) = order(svc.port, "k1", "widget");
    assert!(status < 300, "{body}");
    let n = count(svc.port, "k1");
    drop(svc);
    Some((status, n, journal.entries()))
}

#[test]
fn after_an_ambiguous_commit_the_unkeyed_service_inserts_the_order_twice() {
    let Some((status, orders, journal)) = ambiguous_commit("ambiguous_unkeyed", "none") else {
        return;
    };
    assert_eq!(status, 201);
    assert_eq!(orders, 2, "the committed order and its re-insertion");
    // The journal knows what the service could not: the lost COMMIT committed.
    let commit = journal
        .iter()
        .find(|e| e.fault.as_deref() == Some("drop"))
        .expect("the dropped COMMIT is journaled");
    assert_eq!(commit.outcome, Outcome::Dropped);
    let s = commit.postgres().expect("a statement");
    assert_eq!(
        (s.control, s.tag.as_deref(), s.committed),
        (Some(TxControl::Commit), Some("COMMIT"), Some(true))
    );
    // Retrying after a lost connection is what db_retry asks for; the duplicate is the keys'
    // concern (duplicates with verify).
    let r = DbRetryConfig::default().judge(&journal);
    r.assert_passes();
    assert_eq!(r.metrics["retried_whole"], 1, "{r}");
}

#[test]
fn after_an_ambiguous_commit_the_keyed_service_finds_its_order() {
    let Some((status, orders, journal)) = ambiguous_commit("ambiguous_keyed", "unique") else {
        return;
    };
    assert_eq!(status, 200, "the key's order, found by its retry");
    assert_eq!(orders, 1);
    let unique = journal
        .iter()
        .filter_map(|e| e.postgres())
        .find(|s| s.sqlstate.as_deref() == Some("23505"));
    assert!(unique.is_some(), "the retry's INSERT met the UNIQUE key");
}

/// The orders service behind a relay that answers the first stock UPDATE with 40001.
fn injected_serialization_failure(test: &str, mode: &str) -> Option<Vec<history::Entry>> {
    let (Some(url), Some(py)) = (database(test), python(test)) else {
        return None;
    };
    let schema = Schema::new(&py, &url, test);
    let cfg = PostgresConfig::from_yaml(
        "rules:\n  - { id: serialize, match: { statement: \"UPDATE stock*\", hits: 1 }, fault: { error: \"40001\" } }\n",
        test,
    )
    .expect("valid");
    let journal = Journal::new();
    let relay = pg_relay(
        PgProxy::new("db", &cfg, no_draw()),
        upstream(&url),
        Arc::clone(&journal),
    );
    let svc = Service::start(
        &py,
        "orders.py",
        &[
            "--database",
            &via(&url, relay),
            "--schema",
            &schema.name,
            "--retry",
            mode,
            "--key",
            "unique",
        ],
    );
    let (status, body) = order(svc.port, "k1", "widget");
    assert_eq!(status, 201, "{body}");
    drop(svc);
    Some(journal.entries())
}

#[test]
fn db_retry_passes_the_whole_retry_and_fails_the_statement_retry_on_real_traffic() {
    let Some(whole) = injected_serialization_failure("injected_whole", "whole") else {
        return;
    };
    let failed = whole
        .iter()
        .find(|e| e.fault.as_deref() == Some("error"))
        .and_then(|e| e.postgres())
        .expect("the injected error is journaled");
    assert_eq!(failed.sqlstate.as_deref(), Some("40001"));
    let r = DbRetryConfig::default().judge(&whole);
    r.assert_passes();
    assert_eq!(r.metrics["retried_whole"], 1, "{r}");

    let Some(statement) = injected_serialization_failure("injected_statement", "statement") else {
        return;
    };
    let r = DbRetryConfig::default().judge(&statement);
    r.assert_fails();
    assert_eq!(r.metrics["retried_partly"], 1, "{r}");
}

#[test]
fn the_cache_service_treats_a_failing_cache_as_its_mode_says() {
    const T: &str = "cache_modes";
    let Some(py) = python(T) else { return };
    let Some(primary) = RedisServer::start(T, &[]) else {
        return;
    };
    // A replica refuses writes with -READONLY: the write-back after a miss fails.
    let Some(replica) =
        RedisServer::start(T, &["--replicaof", "127.0.0.1", &primary.port.to_string()])
    else {
        return;
    };
    let nowhere = format!("redis://127.0.0.1:{}/0", free_port());
    for (redis, what) in [(replica.url(), "READONLY"), (nowhere, "connection refused")] {
        for (mode, status) in [("miss", 200), ("fail", 503)] {
            let svc = Service::start(&py, "cache.py", &["--redis", &redis, "--on-error", mode]);
            let (s, body) = http(svc.port, "GET", "/products/7", &[], "");
            assert_eq!(s, status, "{mode} with {what}: {body}");
        }
    }
    // A sound cache: a miss from the store, then a hit.
    let svc = Service::start(
        &py,
        "cache.py",
        &["--redis", &primary.url(), "--on-error", "fail"],
    );
    let (_, first) = http(svc.port, "GET", "/products/3", &[], "");
    let (_, second) = http(svc.port, "GET", "/products/3", &[], "");
    assert!(
        first.contains("\"store\"") && second.contains("\"cache\""),
        "{first} {second}"
    );
}

#[test]
fn cache_fallback_judges_both_services_behind_a_loading_cache() {
    const T: &str = "cache_loading";
    let Some(py) = python(T) else { return };
    let Some(redis) = RedisServer::start(T, &[]) else {
        return;
    };
    let cfg = RedisConfig::from_yaml(
        "rules:\n  - { id: loading, match: { command: GET, key: \"product:*\" }, fault: { error: LOADING } }\n",
        T,
    )
    .expect("valid");
    for (mode, status) in [("miss", 200), ("fail", 503)] {
        let journal = Journal::new();
        let relay = redis_relay(
            RedisProxy::new("cache", &cfg, no_draw()),
            ([127, 0, 0, 1], redis.port).into(),
            Arc::clone(&journal),
        );
        let url = format!("redis://{relay}/0");
        let svc = Service::start(&py, "cache.py", &["--redis", &url, "--on-error", mode]);
        for n in 1..=3 {
            let (s, body) = http_journaled(&journal, svc.port, &format!("/products/{n}"));
            assert_eq!(s, status, "{mode}: {body}");
        }
        drop(svc);
        let entries = journal.entries();
        let loading = entries
            .iter()
            .filter(|e| {
                e.redis()
                    .is_some_and(|c| c.error.as_deref() == Some("LOADING"))
            })
            .count();
        assert_eq!(loading, 3, "every GET was answered -LOADING by the relay");
        let answer = CacheFallbackConfig::default().judge(&entries);
        let fail: CacheFallbackConfig =
            serde_json::from_str("{\"expect\": \"fail\"}").expect("config");
        let fail = fail.judge(&entries);
        if mode == "miss" {
            answer.assert_passes();
            fail.assert_fails();
        } else {
            answer.assert_fails();
            fail.assert_passes();
        }
        assert_eq!(answer.metrics["requests_judged"], 3, "{answer}");
    }
}
