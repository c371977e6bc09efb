//! The library face, used as a test outside the workspace would use it: only public items of
//! `harness` (and the crates it re-exports), a fault server started by its builder, load driven
//! by `harness::workload`, verdicts asserted with the checks' own messages.
//!
//! One experiment of each kind, each with the buggy client or server and the correct one. The
//! margins are wide (backoffs of hundreds of milliseconds against a scheduling noise of a few, a
//! race window of 200 ms against a release skew of a few), so a busy machine does not change a
//! verdict.

use std::time::Duration;

use harness::checks::{CheckSpec, DuplicatesConfig, JitterConfig, RetryOn4xxConfig};
use harness::fault_server::{
    FaultServer, IdempotencyImpl, OrdersConfig, RuleConfig, StatusFault, TestServer,
};
use harness::workload::{Backoff, BackoffKind, Jitter, Policy, Request, Workload};
use serde_json::json;

/// Every request to `/inventory` is answered 503: an outage that fails the whole fleet at once.
async fn outage() -> TestServer {
    FaultServer::builder()
        .rule(
            RuleConfig::new(StatusFault::new(503))
                .id("outage")
                .path("/inventory"),
        )
        .start()
        .await
        .expect("server starts")
}

/// Four attempts, exponential backoff from 300 ms (300, 600, 1200 ms), with this jitter.
fn herd_policy(jitter: Jitter) -> Policy {
    Policy {
        max_attempts: 4,
        timeout: Duration::from_secs(5),
        backoff: Backoff {
            kind: BackoffKind::Exponential,
            base: Duration::from_millis(300),
            cap: Duration::from_secs(5),
            factor: 2.0,
        },
        jitter,
        honor_retry_after: false,
        ..Policy::default()
    }
}

/// The fleet's first failures count as one herd even when a busy machine spreads them.
fn jitter_check() -> JitterConfig {
    JitterConfig {
        together_ms: 1_000,
        ..JitterConfig::default()
    }
}

async fn herd(jitter: Jitter) -> harness::checks::CheckResult {
    let server = outage().await;
    let run = Workload::fleet(30)
        .request(Request::get("/inventory"))
        .policy(herd_policy(jitter))
        .run(&server.url())
        .await
        .expect("the fleet runs");
    assert_eq!(run.figures.sent, 120, "30 clients × 4 attempts");
    assert_eq!(run.status_count(503), 120);
    let journal = server.wait_for(120).await.expect("every attempt journaled");
    jitter_check().judge_with(&journal, &run.facts())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_without_jitter_fails_the_jitter_check() {
    herd(Jitter::None).await.assert_fails();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_with_full_jitter_passes_the_jitter_check() {
    herd(Jitter::Full).await.assert_passes();
}

/// Ten same-key POSTs released together against `orders` with this implementation; 200 ms of
/// work between the key's check and the insert is the race's window.
async fn same_key_burst(idempotency: IdempotencyImpl) -> harness::checks::CheckResult {
    let server = FaultServer::builder()
        .orders(OrdersConfig::with(idempotency).work_delay(Duration::from_millis(200)))
        .start()
        .await
        .expect("server starts");
    let run = Workload::burst(10)
        .request(
            Request::post("/orders")
                .idempotency_key()
                .json(json!({ "sku": "A-1", "qty": 1 })),
        )
        .run(&server.url())
        .await
        .expect("the burst runs");
    assert_eq!(run.figures.sent, 10);
    assert_eq!(run.keys.len(), 1, "one round, one key");
    let journal = server.wait_for(10).await.expect("every request journaled");
    assert!(journal
        .iter()
        .all(|e| e.idempotency_key.as_deref() == Some(run.keys[0].as_str())));
    DuplicatesConfig::default().judge(&journal)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_then_insert_creates_duplicates_under_a_same_key_burst() {
    let result = same_key_burst(IdempotencyImpl::CheckThenInsert).await;
    result.assert_fails();
    assert!(
        result.to_string().starts_with("duplicates: FAIL"),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_key_constraint_survives_a_same_key_burst() {
    same_key_burst(IdempotencyImpl::Unique)
        .await
        .assert_pass_verdict();
}

/// POSTs of an invalid SKU, answered 400, by a client that retries these statuses.
async fn invalid_orders(retry_statuses: Vec<u16>) -> harness::checks::CheckResult {
    let server = FaultServer::builder()
        .rule(
            RuleConfig::new(StatusFault::new(400).body("sku does not exist\n"))
                .id("invalid-sku")
                .method("POST")
                .path("/orders")
                .header("x-sku-check", "invalid"),
        )
        .start()
        .await
        .expect("server starts");
    let policy = Policy {
        max_attempts: 3,
        backoff: Backoff {
            kind: BackoffKind::Fixed,
            base: Duration::from_millis(20),
            cap: Duration::from_millis(20),
            factor: 1.0,
        },
        retry_statuses,
        ..Policy::default()
    };
    let run = Workload::clients(2, 10)
        .request(
            Request::post("/orders")
                .idempotency_key()
                .header("x-sku-check", "invalid")
                .json(json!({ "sku": "NOPE-{{seq}}" })),
        )
        .policy(policy)
        .run(&server.url())
        .await
        .expect("the clients run");
    assert_eq!(run.figures.operations, 10);
    let journal = server
        .wait_for(run.figures.sent as usize)
        .await
        .expect("every attempt journaled");
    RetryOn4xxConfig::default().judge(&journal)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_retries_a_400_fails_retry_on_4xx() {
    let result = invalid_orders(vec![400, 503]).await;
    result.assert_fails();
    assert!(!result.evidence.is_empty(), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_retry_a_400_passes_retry_on_4xx() {
    invalid_orders(vec![503]).await.assert_pass_verdict();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_workload_is_refused_with_the_field_and_the_bound() {
    let server = outage().await;
    let err = Workload::burst(0)
        .run(&server.url())
        .await
        .expect_err("a burst of 0");
    assert!(err.to_string().contains("burst.size"), "{err}");
    let err = Workload::fleet(1)
        .policy(Policy {
            max_attempts: 0,
            ..Policy::default()
        })
        .run(&server.url())
        .await
        .expect_err("no attempt at all");
    assert!(err.to_string().contains("policy.max_attempts"), "{err}");
    let err = Workload::fleet(2)
        .rounds(3, Duration::ZERO)
        .run(&server.url())
        .await
        .expect_err("rounds of a fleet");
    assert!(err.to_string().contains("a setting of a burst"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_and_a_pool_of_clients_send_what_they_say() {
    let server = FaultServer::builder().start().await.expect("server starts");
    let rate = Workload::rate(100.0, Duration::from_millis(200))
        .connections(16)
        .request(Request::get("/health-of-{{client}}"))
        .run(&server.url())
        .await
        .expect("the rate runs");
    assert_eq!(rate.figures.operations, 20, "100/s for 200 ms");
    assert_eq!(rate.figures.sent, 20);
    let clients = Workload::clients(3, 12)
        .request(Request::new("PUT", "/items/{{seq}}").body("x"))
        .run(&server.url())
        .await
        .expect("the clients run");
    assert_eq!(clients.figures.sent, 12);
    assert_eq!(clients.attempts.len(), 12);
    let journal = server.wait_for(32).await.expect("every request journaled");
    assert_eq!(journal.len(), 32);
    assert_eq!(
        journal.iter().filter(|e| e.method == "PUT").count(),
        12,
        "{journal:#?}"
    );
}
