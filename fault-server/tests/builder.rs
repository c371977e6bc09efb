//! The server a test configures in Rust: schedule, orders, journal, reset, a replaced schedule.

use std::time::Duration;

use fault_server::{
    FaultConfig, FaultServer, IdempotencyImpl, OrdersConfig, Outcome, RuleConfig, StatusFault,
};

#[tokio::test]
async fn a_built_schedule_is_served_journaled_reset_and_replaced() {
    let server = FaultServer::builder()
        .rule(
            RuleConfig::new(
                StatusFault::new(429)
                    .retry_after(3)
                    .header("x-why", "quota"),
            )
            .id("quota")
            .path("/inventory/*")
            .requests(1),
        )
        .rule(
            RuleConfig::new(FaultConfig::Drop)
                .id("lost")
                .method("DELETE"),
        )
        .orders(OrdersConfig::with(IdempotencyImpl::Unique).work_delay(Duration::from_millis(1)))
        .wait_timeout(Duration::from_secs(5))
        .start()
        .await
        .expect("starts");
    let client = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", server.url());

    let first = client
        .get(url("/inventory/a"))
        .send()
        .await
        .expect("answered");
    assert_eq!(first.status(), 429);
    assert_eq!(first.headers()["retry-after"], "3");
    assert_eq!(first.headers()["x-why"], "quota");
    let created = client
        .post(url("/orders"))
        .header("Idempotency-Key", "k-1")
        .json(&serde_json::json!({ "sku": "A" }))
        .send()
        .await
        .expect("answered");
    assert_eq!(created.status(), 201);
    assert!(
        client.delete(url("/orders/x")).send().await.is_err(),
        "dropped"
    );

    let journal = server.wait_for(3).await.expect("three requests");
    let seen: Vec<(Option<&str>, Option<u16>, Outcome)> = journal
        .iter()
        .map(|e| (e.rule.as_deref(), e.status, e.outcome))
        .collect();
    assert_eq!(
        seen,
        vec![
            (Some("quota"), Some(429), Outcome::Responded),
            (None, Some(201), Outcome::Responded),
            (Some("lost"), None, Outcome::Dropped),
        ]
    );

    server.reset().await.expect("reset");
    assert!(server.journal().await.is_empty());
    server
        .set_rules(vec![RuleConfig::new(FaultConfig::status(503)).id("down")])
        .await
        .expect("a valid schedule");
    let down = client
        .get(url("/inventory/a"))
        .send()
        .await
        .expect("answered");
    assert_eq!(down.status(), 503);
    let journal = server
        .wait_for(1)
        .await
        .expect("one request since the reset");
    assert_eq!(
        (journal[0].seq, journal[0].rule.as_deref()),
        (1, Some("down"))
    );

    let err = server
        .set_rules(vec![RuleConfig::new(FaultConfig::Drop).path("no-slash")])
        .await
        .expect_err("a path must start with /");
    assert!(err.to_string().contains("rules[0].match.path"), "{err}");
    server.shutdown().await;
}
