//! Relay tiers against a real fault server as the bottom: retry amplification and its fixes,
//! counted in the bottom's journal (seed exercise 2).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fault_server::{Config, FaultServer, ServerOptions};
use harness::http::{Conn, Outgoing, Reply, Target};
use harness::plan::TierSpec;
use harness::relay::{start_chain, Chain};
use history::Entry;
use http::{HeaderMap, HeaderValue, Method};
use retry_policy::{Backoff, BackoffKind, BreakerSpec, BudgetSpec, Jitter, Policy};

/// Every request answered 503 at once; `x-relay-tier` journaled so each entry names its sender.
const ALWAYS_503: &str = r#"
capture_headers: [x-relay-tier]
rules:
  - id: always-503
    fault: { status: 503 }
"#;

async fn bottom(yaml: &str) -> FaultServer {
    let cfg = Config::from_yaml(yaml, "test").expect("test config is valid");
    FaultServer::start(cfg, ServerOptions::default())
        .await
        .expect("fault server starts")
}

async fn journal(s: &FaultServer) -> Vec<Entry> {
    assert!(
        s.settle(Duration::from_secs(10)).await,
        "journal did not settle"
    );
    s.journal().entries()
}

/// `max_attempts` tries, 1 ms between them, no jitter, no Retry-After wait.
fn retrying(max_attempts: u32) -> Policy {
    Policy {
        max_attempts,
        backoff: Backoff {
            kind: BackoffKind::Fixed,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(1),
            factor: 1.0,
        },
        jitter: Jitter::None,
        ..Policy::default()
    }
}

fn tiers(policies: Vec<Policy>) -> Vec<TierSpec> {
    policies
        .into_iter()
        .enumerate()
        .map(|(i, policy)| TierSpec {
            name: format!("t{i}"),
            policy,
        })
        .collect()
}

async fn chain(policies: Vec<Policy>, bottom: &FaultServer) -> Chain {
    start_chain(tiers(policies), &bottom.url(), &Default::default(), 7)
        .await
        .expect("chain starts")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// One top request: `POST /work` with a JSON body, a key, a request id and `extra` headers.
async fn top(url: &str, n: u32, extra: &[(&'static str, String)]) -> (Reply, Duration) {
    let target = Arc::new(Target::parse(url).expect("chain URL parses"));
    let mut conn = Conn::new(target);
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert(
        "idempotency-key",
        HeaderValue::from_str(&format!("key-{n}")).expect("header value"),
    );
    headers.insert(
        "x-request-id",
        HeaderValue::from_str(&format!("req-{n}")).expect("header value"),
    );
    for (name, value) in extra {
        headers.insert(*name, HeaderValue::from_str(value).expect("header value"));
    }
    let req = Outgoing {
        method: Method::POST,
        uri: "/work?x=1".to_string(),
        headers,
        body: Bytes::from(format!("{{\"n\":{n}}}")),
    };
    let t0 = Instant::now();
    let reply = conn
        .send(req, Duration::from_secs(30))
        .await
        .expect("the top tier answers");
    (reply, t0.elapsed())
}

#[tokio::test]
async fn three_tiers_retrying_three_times_each_send_64_calls_to_the_bottom() {
    let server = bottom(ALWAYS_503).await;
    let chain = chain(vec![retrying(4), retrying(4), retrying(4)], &server).await;
    let (reply, took) = top(&chain.url(), 1, &[]).await;
    assert_eq!(
        reply.status.as_u16(),
        503,
        "the bottom's answer comes back up"
    );
    let entries = journal(&server).await;
    eprintln!(
        "3 tiers x 4 attempts: {} bottom calls in {took:?}",
        entries.len()
    );
    assert_eq!(entries.len(), 64);

    // Everything the bottom saw was forwarded faithfully by the innermost tier.
    let body_sha = entries[0].body_sha256.clone();
    for e in &entries {
        assert_eq!(e.method, "POST");
        assert_eq!(e.path, "/work");
        assert_eq!(e.query.as_deref(), Some("x=1"));
        assert_eq!(e.body_sha256, body_sha);
        assert_eq!(e.body_len, 7);
        assert_eq!(e.idempotency_key.as_deref(), Some("key-1"));
        assert_eq!(
            e.headers.get("x-request-id").map(String::as_str),
            Some("req-1")
        );
        assert_eq!(
            e.headers.get("x-relay-tier").map(String::as_str),
            Some("t2")
        );
        assert!(!e.headers.contains_key("x-deadline"), "no deadline was set");
    }

    let stats = chain.stats();
    let got: Vec<(u64, u64, u64)> = stats
        .iter()
        .map(|s| (s.received, s.attempts, s.retries))
        .collect();
    assert_eq!(got, [(1, 4, 3), (4, 16, 12), (16, 64, 48)], "{stats:?}");
    chain.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn four_tiers_send_256_calls_to_the_bottom() {
    let server = bottom(ALWAYS_503).await;
    let chain = chain(vec![retrying(4); 4], &server).await;
    let (reply, took) = top(&chain.url(), 1, &[]).await;
    assert_eq!(reply.status.as_u16(), 503);
    let entries = journal(&server).await;
    eprintln!(
        "4 tiers x 4 attempts: {} bottom calls in {took:?}",
        entries.len()
    );
    assert_eq!(entries.len(), 256);
    assert_eq!(chain.stats()[3].attempts, 256);
    chain.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn retrying_at_the_innermost_tier_only_sends_4_calls() {
    let server = bottom(ALWAYS_503).await;
    let chain = chain(vec![retrying(1), retrying(1), retrying(4)], &server).await;
    let (reply, _) = top(&chain.url(), 1, &[]).await;
    assert_eq!(reply.status.as_u16(), 503);
    let entries = journal(&server).await;
    eprintln!("retry at one layer: {} bottom calls", entries.len());
    assert_eq!(entries.len(), 4);
    chain.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_retry_budget_per_tier_caps_the_volume() {
    let server = bottom(ALWAYS_503).await;
    let budgeted = Policy {
        budget: Some(BudgetSpec::Ratio {
            ratio: 0.1,
            reserve: 0.0,
        }),
        ..retrying(4)
    };
    let chain = chain(vec![budgeted; 3], &server).await;
    // 12, not 10: ten deposits of 0.1 add up to 0.999…, one token short of the first retry.
    let requests = 12;
    for n in 0..requests {
        let (reply, _) = top(&chain.url(), n, &[]).await;
        assert_eq!(reply.status.as_u16(), 503);
    }
    let entries = journal(&server).await;
    eprintln!(
        "budget 10% per tier: {} bottom calls for {requests} top requests (768 without); {:?}",
        entries.len(),
        chain.stats()
    );
    assert!(entries.len() < 20, "{} bottom calls", entries.len());
    let stats = chain.stats();
    assert!(stats.iter().all(|s| s.budget_refusals > 0), "{stats:?}");
    assert!(
        stats.iter().any(|s| s.retries > 0),
        "a budget caps retries, it does not forbid them: {stats:?}"
    );
    chain.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_propagated_deadline_stops_every_tier_in_time() {
    // The fault server has no "wait, then 503" fault (a delay is followed by the normal response),
    // so the slow failure is a hang capped at 500 ms: no response, then the connection closes — a
    // transient failure every tier retries. Without deadlines the chain would make 64 such calls
    // (32 s); with a 1.5 s deadline it makes a handful and answers at the deadline.
    let server = bottom(
        r#"
capture_headers: [x-relay-tier]
rules:
  - id: slow-failure
    fault: { hang: { cap: 500ms } }
"#,
    )
    .await;
    let chain = chain(vec![retrying(4); 3], &server).await;
    let deadline = now_ms() + 1500;
    let (reply, took) = top(&chain.url(), 1, &[("x-deadline", deadline.to_string())]).await;
    let entries = journal(&server).await;
    eprintln!(
        "deadline 1.5 s: top answered {} in {took:?}; {} bottom calls, last at deadline{:+} ms; {:?}",
        reply.status,
        entries.len(),
        entries.iter().map(|e| e.unix_ms as i64 - deadline as i64).max().unwrap_or(0),
        chain.stats()
    );
    assert_eq!(reply.status.as_u16(), 504);
    // At the deadline, not after 64 slow calls; the slack is for a loaded machine.
    assert!(
        took < Duration::from_secs(5),
        "the top answered after {took:?}"
    );
    // Each tier keeps a small margin for its answer, so an upper tier may have a few
    // milliseconds left for one more short call: a handful of calls, not 64.
    assert!(
        !entries.is_empty() && entries.len() <= 6,
        "{}",
        entries.len()
    );
    for e in &entries {
        // A call decided just before the deadline may arrive a little after it on a loaded
        // machine; what is exact is the deadline it carries (below).
        assert!(
            e.unix_ms <= deadline + 1000,
            "a call reached the bottom {} ms after the deadline",
            e.unix_ms - deadline
        );
        // The absolute deadline travels down, each tier keeping at most 10 ms for its answer.
        let passed: u64 = e
            .headers
            .get("x-deadline")
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!(
            passed <= deadline && passed >= deadline - 30,
            "deadline passed down: {} ms before the top's",
            deadline as i64 - passed as i64
        );
    }
    chain.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_deadline_already_gone_is_answered_504_without_calling_down() {
    let server = bottom(ALWAYS_503).await;
    let chain = chain(vec![retrying(4); 3], &server).await;
    let gone = now_ms() - 1;
    let (reply, _) = top(&chain.url(), 1, &[("x-deadline", gone.to_string())]).await;
    assert_eq!(reply.status.as_u16(), 504);
    assert!(journal(&server).await.is_empty());
    let stats = chain.stats();
    assert_eq!((stats[0].answered_504, stats[0].attempts), (1, 0));
    assert_eq!(stats[1].received, 0);

    let (bad, _) = top(&chain.url(), 2, &[("x-deadline", "soon".to_string())]).await;
    assert_eq!(bad.status.as_u16(), 400, "a deadline that is not unix ms");
    chain.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_tier_with_deadline_header_starts_the_deadline_from_its_total_timeout() {
    let server = bottom(ALWAYS_503).await;
    let top_policy = Policy {
        total_timeout: Some(Duration::from_millis(400)),
        deadline_header: true,
        ..retrying(1)
    };
    let chain = chain(vec![top_policy, retrying(1)], &server).await;
    let before = now_ms();
    let (reply, _) = top(&chain.url(), 1, &[]).await;
    let after = now_ms();
    assert_eq!(reply.status.as_u16(), 503);
    let entries = journal(&server).await;
    assert_eq!(entries.len(), 1);
    let sent: u64 = entries[0]
        .headers
        .get("x-deadline")
        .and_then(|v| v.parse().ok())
        .expect("the bottom sees x-deadline");
    assert!(
        // 400 ms from when the top tier read the request (between `before` and `after`), less
        // each of the two tiers' margin for its answer (at most 10 ms each).
        (before + 375..=after + 400).contains(&sent),
        "deadline {} ms after the request",
        sent as i64 - before as i64
    );
    chain.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_breaker_per_tier_stops_the_multiplication() {
    let server = bottom(ALWAYS_503).await;
    let with_breaker = Policy {
        breaker: Some(BreakerSpec {
            failure_ratio: 0.5,
            min_requests: 4,
            window: Duration::from_secs(10),
            open_for: Duration::from_secs(2),
            half_open_probes: 1,
        }),
        ..retrying(4)
    };
    let chain = chain(vec![with_breaker; 3], &server).await;
    let requests = 20;
    for n in 0..requests {
        let (reply, _) = top(&chain.url(), n, &[]).await;
        assert_eq!(reply.status.as_u16(), 503);
    }
    let entries = journal(&server).await;
    let stats = chain.stats();
    eprintln!(
        "breaker per tier: {} bottom calls for {requests} top requests (1280 without); {stats:?}",
        entries.len()
    );
    assert!(entries.len() <= 20, "{} bottom calls", entries.len());
    assert!(stats[0].breaker_rejections > 0, "{stats:?}");
    chain.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_caller_that_gives_up_cancels_the_tiers_below() {
    let server = bottom(
        r#"
rules:
  - id: slow-failure
    fault: { hang: { cap: 2s } }
"#,
    )
    .await;
    let chain = chain(vec![retrying(4); 3], &server).await;
    let target = Arc::new(Target::parse(&chain.url()).expect("chain URL parses"));
    let mut conn = Conn::new(target);
    let req = Outgoing {
        method: Method::GET,
        uri: "/work".to_string(),
        headers: HeaderMap::new(),
        body: Bytes::new(),
    };
    let gave_up = conn.send(req, Duration::from_millis(150)).await;
    assert!(gave_up.is_err(), "the top request times out");
    // Without cancellation the innermost tier would go on for 64 slow calls (about 2 minutes).
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    while chain.stats().iter().any(|s| s.cancelled == 0) {
        assert!(
            std::time::Instant::now() < give_up,
            "not every tier abandoned its call: {:?}",
            chain.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let entries = journal(&server).await;
    eprintln!(
        "caller gave up at 150 ms (bottom hangs 2 s): {} bottom calls; {:?}",
        entries.len(),
        chain.stats()
    );
    assert!(entries.len() <= 2, "{} bottom calls", entries.len());
    let cancelled: Vec<u64> = chain.stats().iter().map(|s| s.cancelled).collect();
    assert_eq!(cancelled, [1, 1, 1], "every tier abandoned its call down");
    chain.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_tier_forwards_a_body_that_is_not_text_byte_for_byte() {
    let server = bottom("rules: []").await;
    let c = chain(vec![retrying(1), retrying(1)], &server).await;
    let body: Vec<u8> = (0..=255u8).rev().collect();
    let mut conn = Conn::new(Arc::new(Target::parse(&c.url()).expect("chain URL parses")));
    let req = Outgoing {
        method: Method::PUT,
        uri: "/blob".to_string(),
        headers: HeaderMap::new(),
        body: Bytes::from(body.clone()),
    };
    let reply = conn
        .send(req, Duration::from_secs(10))
        .await
        .expect("the top tier answers");
    assert_eq!(reply.status.as_u16(), 200);
    let j = journal(&server).await;
    assert_eq!(j.len(), 1);
    assert_eq!(j[0].body_len, 256);
    use sha2::Digest;
    let expected: String = sha2::Sha256::digest(&body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(j[0].body_sha256.as_deref(), Some(expected.as_str()));
    c.shutdown().await;
}
