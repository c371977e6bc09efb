//! A reqwest client, tested against a 503 and a dropped response.
//!
//! The client creates an order with an Idempotency-Key and retries, under the same key, a 5xx or
//! a request that got no response. The fault server answers its first attempt `503`, processes
//! its second and drops the response (the order really is created: the lost response of the
//! exactly-once argument), and lets the third through — which the orders resource answers with
//! the stored creation, replayed. The journal shows all three, and that one order was created.
//!
//! Run: `cargo run -p fault-server --example reqwest_client` (also run by `cargo test`).

use std::time::Duration;

use fault_server::{FaultConfig, FaultServer, RuleConfig, StatusFault, TestServer};

/// Creates an order, retrying a 5xx or a lost response up to three more times, same key.
async fn create_order(
    client: &reqwest::Client,
    base: &str,
    key: &str,
) -> Result<reqwest::Response, reqwest::Error> {
    let mut attempt = 1;
    loop {
        let sent = client
            .post(format!("{base}/orders"))
            .header("Idempotency-Key", key)
            .json(&serde_json::json!({ "sku": "A-1", "qty": 1 }))
            .send()
            .await;
        let retry = match &sent {
            Ok(r) => r.status().is_server_error(),
            Err(_) => true,
        };
        if !retry || attempt == 4 {
            return sent;
        }
        tokio::time::sleep(Duration::from_millis(20 * attempt)).await;
        attempt += 1;
    }
}

/// A server whose first attempt of a key gets a 503, and whose second is processed, then dropped.
async fn flaky_orders() -> TestServer {
    FaultServer::builder()
        .rule(
            RuleConfig::new(StatusFault::new(503).retry_after(1))
                .id("unavailable")
                .attempts(1),
        )
        .rule(RuleConfig::new(FaultConfig::Drop).id("lost").attempts(2))
        .start()
        .await
        .expect("the fault server starts")
}

/// The experiment: what the client got, and what the server saw.
async fn run() -> (u16, Option<String>, Vec<fault_server::Entry>) {
    let server = flaky_orders().await;
    let client = reqwest::Client::new();
    let response = create_order(&client, &server.url(), "order-key-1")
        .await
        .expect("the third attempt gets an answer");
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let journal = server.wait_for(3).await.expect("three attempts journaled");
    (status, replayed, journal)
}

#[tokio::main]
async fn main() {
    let (status, replayed, journal) = run().await;
    println!("the client got {status} (Idempotent-Replayed: {replayed:?})");
    for e in &journal {
        println!(
            "seq {}: rule {:?}, status {:?}, outcome {}, created {:?}",
            e.seq,
            e.rule,
            e.status,
            e.outcome.as_str(),
            e.created
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fault_server::Outcome;

    #[tokio::test]
    async fn retries_through_a_503_and_a_lost_response_create_one_order() {
        let (status, replayed, journal) = run().await;
        // The order the dropped attempt created, replayed: 200 for a replayed creation.
        assert_eq!(status, 200);
        assert_eq!(replayed.as_deref(), Some("true"));
        let seen: Vec<(Option<&str>, Option<u16>, Outcome)> = journal
            .iter()
            .map(|e| (e.rule.as_deref(), e.status, e.outcome))
            .collect();
        assert_eq!(
            seen,
            vec![
                (Some("unavailable"), Some(503), Outcome::Responded),
                (Some("lost"), None, Outcome::Dropped),
                (None, Some(200), Outcome::Responded),
            ]
        );
        let created: Vec<_> = journal.iter().filter_map(|e| e.created.as_ref()).collect();
        assert_eq!(created.len(), 1, "one order for one key: {journal:#?}");
    }
}
