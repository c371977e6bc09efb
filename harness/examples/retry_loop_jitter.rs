//! A hand-written retry loop, judged by the `jitter` check.
//!
//! Thirty clients call `GET /inventory` during an outage (every request answered `503`) and
//! retry with exponential backoff: 200, 400, 800 ms. Without jitter every client waits exactly
//! as long as every other, so each retry wave is as tall as the first failure — the thundering
//! herd — and the check fails, naming the synchronized waves. With full jitter (a wait drawn
//! from 0 to the backoff) the same loop passes.
//!
//! Run: `cargo run -p harness --example retry_loop_jitter` (also run by `cargo test`).

use std::time::Duration;

use harness::checks::{CheckResult, CheckSpec, JitterConfig};
use harness::fault_server::{FaultServer, RuleConfig, StatusFault};

const CLIENTS: usize = 30;
const ATTEMPTS: u32 = 4;

/// One client's call, retried on a 5xx or a transport error with exponential backoff from
/// 200 ms; with `jitter`, each wait is drawn uniformly from zero to the backoff.
async fn fetch_inventory(client: &reqwest::Client, url: &str, id: usize, jitter: bool) {
    for attempt in 1..=ATTEMPTS {
        let ok = client
            .get(url)
            .header("x-client-id", format!("c{id}"))
            .send()
            .await
            .is_ok_and(|r| !r.status().is_server_error());
        if ok || attempt == ATTEMPTS {
            return;
        }
        let backoff = Duration::from_millis(200) * 2u32.pow(attempt - 1);
        let wait = if jitter {
            backoff.mul_f64(rand::random::<f64>())
        } else {
            backoff
        };
        tokio::time::sleep(wait).await;
    }
}

/// Runs the fleet against an outage and judges the journal.
async fn herd(jitter: bool) -> CheckResult {
    let server = FaultServer::builder()
        .rule(RuleConfig::new(StatusFault::new(503)).path("/inventory"))
        .start()
        .await
        .expect("the fault server starts");
    let url = format!("{}/inventory", server.url());
    let client = reqwest::Client::new();
    let mut fleet = tokio::task::JoinSet::new();
    for id in 0..CLIENTS {
        let (client, url) = (client.clone(), url.clone());
        fleet.spawn(async move { fetch_inventory(&client, &url, id, jitter).await });
    }
    fleet.join_all().await;
    let journal = server
        .wait_for(CLIENTS * ATTEMPTS as usize)
        .await
        .expect("every attempt journaled");
    // The clients' first failures count as one herd even when a busy machine spreads them.
    let check = JitterConfig {
        together_ms: 1_000,
        ..JitterConfig::default()
    };
    check.judge(&journal)
}

#[tokio::main]
async fn main() {
    println!("without jitter:\n{}\n", herd(false).await);
    println!("with full jitter:\n{}", herd(true).await);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_loop_without_jitter_fails_and_with_jitter_passes() {
        herd(false).await.assert_fails();
        herd(true).await.assert_passes();
    }
}
