//! An idempotent handler under a same-key burst: the built-in orders resource, correct.
//!
//! Five rounds of ten `POST /orders` released together, the ten of a round sharing one
//! Idempotency-Key — a user's double click, a retry racing its original. The `unique`
//! implementation claims the key under a UNIQUE constraint before any work, so one request of a
//! round creates the order and the others are told `409` (in flight, with Retry-After) or given
//! the stored response: `duplicates` and `idempotency_semantics` pass. Swap in
//! `IdempotencyImpl::CheckThenInsert` (SELECT, work, INSERT) and `duplicates` fails.
//!
//! Run: `cargo run -p harness --example idempotent_orders` (also run by `cargo test`).

use std::time::Duration;

use harness::checks::{CheckResult, CheckSpec, DuplicatesConfig, IdempotencySemanticsConfig};
use harness::fault_server::{FaultServer, IdempotencyImpl, OrdersConfig};
use harness::workload::{Request, Workload};

/// Same-key bursts against the orders resource with this implementation; returns the verdicts
/// of `duplicates` and `idempotency_semantics`.
async fn same_key_bursts(idempotency: IdempotencyImpl) -> [CheckResult; 2] {
    let server = FaultServer::builder()
        // 100 ms of work between claiming the key and writing the order: the race's window.
        .orders(OrdersConfig::with(idempotency).work_delay(Duration::from_millis(100)))
        .start()
        .await
        .expect("the fault server starts");
    let run = Workload::burst(10)
        .rounds(5, Duration::from_millis(20))
        .request(
            Request::post("/orders")
                .idempotency_key()
                .json(serde_json::json!({ "sku": "A-{{round}}", "qty": 1 })),
        )
        .run(&server.url())
        .await
        .expect("the bursts run");
    let journal = server
        .wait_for(run.figures.sent as usize)
        .await
        .expect("every request journaled");
    [
        DuplicatesConfig::default().judge(&journal),
        IdempotencySemanticsConfig::default().judge(&journal),
    ]
}

#[tokio::main]
async fn main() {
    for result in same_key_bursts(IdempotencyImpl::Unique).await {
        println!("{result}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_unique_constraint_passes_the_same_key_burst() {
        for result in same_key_bursts(IdempotencyImpl::Unique).await {
            result.assert_pass_verdict();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn check_then_insert_does_not() {
        let [duplicates, _] = same_key_bursts(IdempotencyImpl::CheckThenInsert).await;
        duplicates.assert_fails();
    }
}
