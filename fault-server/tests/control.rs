//! The control API: schedule replacement, reset, stats, health — never journaled, never faulted.

mod common;

use std::time::Duration;

#[tokio::test]
async fn schedule_can_be_replaced_and_a_bad_one_is_refused() {
    let s = common::start("rules:\n  - { id: all, fault: { status: 503 } }\n").await;
    let c = reqwest::Client::new();
    let u = |p: &str| format!("{}{p}", s.url());
    assert_eq!(c.get(u("/x")).send().await.unwrap().status(), 503);
    // The control API is never faulted, even by a match-everything rule.
    assert_eq!(
        c.get(u("/__harness/health")).send().await.unwrap().status(),
        200
    );

    let bad = c
        .put(u("/__harness/schedule"))
        .body("rules:\n  - fault: { status: 999 }\n")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let reason = bad.text().await.unwrap();
    assert!(
        reason.contains("schedule:2:")
            && reason.contains("rules[0].fault")
            && reason.contains("out of range"),
        "{reason}"
    );
    assert_eq!(
        c.get(u("/x")).send().await.unwrap().status(),
        503,
        "the old schedule stays"
    );

    let ok = c
        .put(u("/__harness/schedule"))
        .body(r#"{"rules": [{"id": "teapot", "match": {"path": "/x"}, "fault": {"status": 418}}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(c.get(u("/x")).send().await.unwrap().status(), 418);
    assert_eq!(c.get(u("/y")).send().await.unwrap().status(), 200);

    assert!(s.settle(Duration::from_secs(5)).await);
    let stats: serde_json::Value = c
        .get(u("/__harness/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["requests"], 4);
    assert_eq!(stats["by_rule"]["all"], 2);
    assert_eq!(stats["by_rule"]["teapot"], 1);
    assert_eq!(stats["by_fault"]["status"], 3);
    assert_eq!(stats["by_status"]["418"], 1);
    assert_eq!(stats["by_outcome"]["responded"], 4);
    assert_eq!(
        s.journal().written(),
        4,
        "control requests are not journaled"
    );
}

#[tokio::test]
async fn reset_clears_journal_counters_and_store() {
    let s = common::start(
        "rules:\n  - { id: first, match: { requests: 1 }, fault: { status: 503 } }\n",
    )
    .await;
    let c = reqwest::Client::new();
    let u = |p: &str| format!("{}{p}", s.url());
    assert_eq!(c.get(u("/a")).send().await.unwrap().status(), 503);
    let r = c
        .post(u("/orders"))
        .header("idempotency-key", "k")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(
        c.post(u("/__harness/reset")).send().await.unwrap().status(),
        200
    );
    assert_eq!(s.journal().written(), 0);
    // Request numbering starts again, so `requests: 1` fires again; the key is new again.
    assert_eq!(c.get(u("/a")).send().await.unwrap().status(), 503);
    let r = c
        .post(u("/orders"))
        .header("idempotency-key", "k")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let j = common::journal(&s).await;
    assert_eq!(j.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(j[1].key_attempt, Some(1));
    let health: serde_json::Value = c
        .get(u("/__harness/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["received"], 2);
    assert_eq!(
        c.get(u("/__harness/nope")).send().await.unwrap().status(),
        404
    );
}

#[tokio::test]
async fn random_faults_are_reproducible_whatever_the_arrival_order() {
    let yaml =
        "seed: 11\nrules:\n  - { id: coin, match: { probability: 0.4 }, fault: { status: 503 } }\n";
    let outcome = |order: Vec<usize>| async move {
        let s = common::start(yaml).await;
        let c = reqwest::Client::new();
        let mut got = vec![0u16; order.len()];
        for i in order {
            got[i] = c
                .post(format!("{}/orders", s.url()))
                .header("idempotency-key", format!("key-{i}"))
                .body("{}")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
        }
        got
    };
    let forward = outcome((0..60).collect()).await;
    let backward = outcome((0..60).rev().collect()).await;
    assert_eq!(forward, backward);
    let faulted = forward.iter().filter(|s| **s == 503).count();
    assert!((10..40).contains(&faulted), "{faulted}");
}
