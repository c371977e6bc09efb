//! The checks written for HTTP judge gRPC calls from the same journal: a gRPC failure is its
//! status (UNAVAILABLE) even though the HTTP status is 200, attempts are grouped by the
//! `idempotency-key` metadata (a header like any other) or by `x-client-id` and the message,
//! and a call's path is `/pkg.Service/Method`. Each check fails on its known-bad gRPC journal,
//! passes on its known-good one, and is inconclusive when nothing in it can be judged.

use checks::{
    AmplificationConfig, CheckSpec, CircuitBreakerConfig, DuplicatesConfig, JitterConfig,
    KeyStabilityConfig, Verdict,
};
use history::sample::{entry, in_arrival_order, EntryBuilder};
use history::{Entry, GrpcCode, Outcome};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const CREATE: &str = "orders.v1.Orders/CreateOrder";

fn call(seq: u64, t_ms: f64) -> EntryBuilder {
    entry(seq, t_ms).grpc(CREATE)
}

fn unavailable(b: EntryBuilder) -> EntryBuilder {
    b.grpc_status(GrpcCode::Unavailable)
}

#[test]
fn duplicates_counts_orders_created_by_grpc_calls() {
    // check-then-insert: two concurrent creates of one key both made an order.
    let bad = [
        call(1, 0.0).key("k").took(20).created("ord_1").build(),
        call(2, 1.0).key("k").took(20).created("ord_2").build(),
    ];
    DuplicatesConfig::default().judge(&bad).assert_fails();
    // A retry after a lost answer is replayed: one order.
    let good = [
        call(1, 0.0)
            .key("k")
            .created("ord_1")
            .no_response(Outcome::Dropped)
            .build(),
        call(2, 100.0)
            .key("k")
            .previous_attempts(1)
            .replayed()
            .build(),
    ];
    let r = DuplicatesConfig::default().judge(&good);
    assert_eq!(r.verdict, Verdict::Pass, "{r}");
    let nothing = [unavailable(call(1, 0.0).key("k")).build()];
    assert_eq!(
        DuplicatesConfig::default().judge(&nothing).verdict,
        Verdict::Inconclusive
    );
}

#[test]
fn key_stability_sees_a_new_key_after_a_failed_call() {
    let attempt = |seq, t, key: &str| call(seq, t).client("c").body("create-sku-1").key(key);
    let bad = [
        unavailable(attempt(1, 0.0, "k1")).build(),
        attempt(2, 200.0, "k2").created("ord_2").build(),
    ];
    let r = KeyStabilityConfig::default().judge(&bad);
    r.assert_fails();
    assert_eq!(r.evidence[0].seqs, vec![1, 2]);
    let good = [
        unavailable(attempt(1, 0.0, "k1")).build(),
        attempt(2, 200.0, "k1")
            .previous_attempts(1)
            .created("ord_1")
            .build(),
    ];
    assert_eq!(
        KeyStabilityConfig::default().judge(&good).verdict,
        Verdict::Pass
    );
    // Every call succeeded: no retry to judge. (Before gRPC failures were read from their
    // status, the bad journal above was judged this way too.)
    let ok = [attempt(1, 0.0, "k1").created("o").build()];
    assert_eq!(
        KeyStabilityConfig::default().judge(&ok).verdict,
        Verdict::Inconclusive
    );
}

/// `clients` calls failing together, each retried `retries` times after `delay(k)` ms.
fn herd(
    clients: u32,
    retries: u32,
    seed: u64,
    mut delay: impl FnMut(&mut StdRng, u32) -> f64,
) -> Vec<Entry> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut j = Vec::new();
    for c in 0..clients {
        let key = format!("k{c}");
        let mut t = c as f64 * 0.002 + rng.random::<f64>();
        for k in 0..=retries {
            let e = call(0, t).key(&key).took(1);
            let e = if k > 0 { e.previous_attempts(k) } else { e };
            let e = if k == retries {
                e.created(&format!("o{c}"))
            } else {
                unavailable(e)
            };
            j.push(e.build());
            t += 1.0 + delay(&mut rng, k + 1) + 0.1 + rng.random::<f64>() * 1.9;
        }
    }
    in_arrival_order(j)
}

#[test]
fn jitter_judges_grpc_retries_of_calls_that_failed_together() {
    let backoff = |k: u32| 100.0 * f64::powi(2.0, k as i32 - 1);
    let bad = herd(100, 3, 1, |_, k| backoff(k));
    let r = JitterConfig::default().judge(&bad);
    r.assert_fails();
    assert!(r.summary.starts_with("no jitter"), "{r}");
    // gRFC A6's own backoff: random(0, min(initial × multiplier^(n-1), max)).
    let good = herd(200, 3, 2, |rng, k| rng.random::<f64>() * backoff(k));
    let r = JitterConfig::default().judge(&good);
    assert_eq!(r.verdict, Verdict::Pass, "{r}");
    let few = herd(10, 3, 3, |_, k| backoff(k));
    assert_eq!(
        JitterConfig::default().judge(&few).verdict,
        Verdict::Inconclusive
    );
}

/// `requests` calls of a top service, each reaching `/inventory.v1.Stock/Reserve` `per`
/// times, every bottom call answered UNAVAILABLE.
fn layered(requests: u32, per: u32, code: GrpcCode) -> Vec<Entry> {
    let mut j = Vec::new();
    for r in 0..requests {
        for i in 0..per {
            let seq = u64::from(r * per + i + 1);
            j.push(
                entry(seq, seq as f64)
                    .grpc("inventory.v1.Stock/Reserve")
                    .header("x-request-id", &format!("req-{r}"))
                    .grpc_status(code)
                    .build(),
            );
        }
    }
    j
}

#[test]
fn amplification_counts_bottom_grpc_calls_per_top_request() {
    let cfg = AmplificationConfig {
        bottom_path_prefix: Some("/inventory.v1.Stock/".into()),
        ..AmplificationConfig::default()
    };
    let r = cfg.judge(layered(3, 64, GrpcCode::Unavailable));
    r.assert_fails();
    assert_eq!(r.metrics["bottom_attempts_per_request"], 64.0);
    let r = cfg.judge(layered(3, 4, GrpcCode::Unavailable));
    assert_eq!(r.verdict, Verdict::Pass, "{r}");
    // Every bottom call succeeded (HTTP 200 and OK): nothing any layer could retry.
    let r = cfg.judge(layered(3, 1, GrpcCode::Ok));
    assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
}

/// Client `c`'s calls answered UNAVAILABLE at each time (ms), then one OK at `recover_ms`.
fn outage(times_ms: impl IntoIterator<Item = u32>, recover_ms: u32) -> Vec<Entry> {
    let mut j: Vec<Entry> = times_ms
        .into_iter()
        .map(|t| unavailable(entry(0, t).grpc("inventory.v1.Stock/Reserve").client("c")).build())
        .collect();
    j.push(
        entry(0, recover_ms)
            .grpc("inventory.v1.Stock/Reserve")
            .client("c")
            .build(),
    );
    in_arrival_order(j)
}

#[test]
fn circuit_breaker_sees_a_client_hammering_an_unavailable_service() {
    let bad = outage((0..200).map(|i| i * 50), 10_000);
    let r = CircuitBreakerConfig::default().judge(&bad);
    r.assert_fails();
    assert!(r.summary.contains("kept calling"), "{r}");
    let good = outage(
        (0..20)
            .map(|i| i * 50)
            .chain([3000, 5000, 7000, 9000, 11_000]),
        13_000,
    );
    assert_eq!(
        CircuitBreakerConfig::default().judge(&good).verdict,
        Verdict::Pass
    );
    // UNIMPLEMENTED says the service is up: no outage, nothing to judge.
    let up: Vec<Entry> = in_arrival_order(
        (0..200)
            .map(|i| {
                entry(0, i * 50)
                    .grpc("inventory.v1.Stock/Reserve")
                    .client("c")
                    .grpc_status(GrpcCode::Unimplemented)
                    .build()
            })
            .collect(),
    );
    assert_eq!(
        CircuitBreakerConfig::default().judge(&up).verdict,
        Verdict::Inconclusive
    );
}
