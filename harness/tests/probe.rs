//! The idempotency probe against the real fault server on 127.0.0.1:0: real sockets, the real
//! SQLite store, each idempotency implementation the server offers. (The verdicts on
//! hand-written histories, for the answers the fault server never gives, are the checks' own unit
//! tests: the probe is judged by the same `duplicates` and `idempotency_semantics`.)

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fault_server::{Config, FaultServer, ServerOptions};
use harness::probe::{probe, ProbeConfig, ProbeError, ProbeOutcome};
use reports::{CheckResult, Verdict};
use serde_json::json;

async fn start(yaml: &str) -> FaultServer {
    let cfg = Config::from_yaml(yaml, "test").expect("test config is valid");
    FaultServer::start(cfg, ServerOptions::default())
        .await
        .expect("server starts")
}

/// Small rounds keep the tests fast; ten per burst is the seed's experiment.
fn config(s: &FaultServer, rounds: usize) -> ProbeConfig {
    ProbeConfig {
        rounds,
        seed: Some(7),
        ..ProbeConfig::new(format!("{}/orders", s.url()))
    }
}

fn check<'a>(o: &'a ProbeOutcome, name: &str) -> &'a CheckResult {
    o.checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}: {:#?}", o.checks))
}

/// The verify lookup's count for `key`.
fn verified(o: &ProbeOutcome, key: &str) -> Option<u64> {
    o.store
        .as_ref()?
        .counts
        .as_ref()
        .ok()?
        .iter()
        .find(|k| k.key == key)?
        .count
        .clone()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_endpoint_passes_every_check() {
    let s = start("orders: { idempotency: unique, work_delay: 5ms }").await;
    let cfg = ProbeConfig {
        body: json!({ "sku": "probe-{{round}}", "qty": 1 }),
        headers: vec![("x-client-id".into(), "probe-test".into())],
        // A path is resolved against the target.
        verify: Some("/orders?idempotency_key={key}".into()),
        ..config(&s, 6)
    };
    let o = probe(&cfg).await.expect("probe runs");
    for c in &o.checks {
        assert_eq!(c.verdict, Verdict::Pass, "{c:#?}");
    }
    assert!(o.passed());
    assert_eq!(
        o.checks.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["duplicates", "idempotency_semantics"]
    );
    let sem = check(&o, "idempotency_semantics");
    assert_eq!(sem.metrics["keys"], 6);
    assert_eq!(sem.metrics["creations"], 6);
    assert_eq!(sem.metrics["violations"], 0);
    assert_eq!(sem.metrics["weaknesses"], 0);
    assert_eq!(sem.metrics["mismatches"], 1);
    assert_eq!(sem.metrics["missing_key_requests"], 1);
    assert_eq!(
        sem.metrics["replays"].as_u64().unwrap() + sem.metrics["conflicts_409"].as_u64().unwrap(),
        6 * 9 + 1,
        "every loser and the replay got a replay or a 409"
    );
    let replay = o.follow_up(0).expect("a replay");
    assert_eq!((replay.status, replay.replayed), (Some(200), true));
    assert_eq!(o.follow_up(1).and_then(|e| e.status), Some(422));
    assert_eq!(o.follow_up(2).and_then(|e| e.status), Some(400));
    let dup = check(&o, "duplicates");
    assert_eq!(dup.metrics["keys"], 6);
    assert_eq!(dup.metrics["duplicate_keys"], 0);
    assert_eq!(dup.metrics["max_resources_per_key"], 1);
    assert_eq!(dup.metrics["verified_keys"], 6);

    assert_eq!(o.rounds.len(), 6);
    assert_eq!(o.requests_sent, 6 * 10 + 3);
    assert_eq!(o.by_status["201"], 6);
    assert_eq!(o.by_status.values().sum::<u64>(), o.requests_sent);
    assert_eq!(o.latency_ms.len() as u64, o.requests_sent);
    assert!(o.errors_by_kind.is_empty(), "{:?}", o.errors_by_kind);
    for r in &o.rounds {
        let sent = o
            .exchanges
            .iter()
            .filter(|e| e.idempotency_key.as_deref() == Some(r.key.as_str()));
        assert!(sent.count() >= 10);
        assert_eq!(verified(&o, &r.key), Some(1), "{r:#?}");
        assert_eq!(s.orders().count_for_key(&r.key).await.unwrap(), 1);
    }
    assert_eq!(
        o.release_skew_us_max,
        o.rounds.iter().map(|r| r.release_skew_us).max().unwrap()
    );

    // What the server saw: one body per round (the placeholder varies it), the extra header on
    // every request, and one key per round.
    assert!(s.settle(Duration::from_secs(10)).await);
    let journal = s.journal().entries();
    assert_eq!(
        journal.len() as u64,
        o.requests_sent + 6,
        "plus 6 verify lookups"
    );
    let mut bodies: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in journal.iter().filter(|e| e.method == "POST") {
        assert_eq!(e.client_id.as_deref(), Some("probe-test"));
        if let Some(k) = &e.idempotency_key {
            bodies
                .entry(k.clone())
                .or_default()
                .insert(e.body_sha256.clone().unwrap_or_default());
        }
    }
    assert_eq!(bodies.len(), 6);
    let first = &o.rounds[0].key;
    for (key, hashes) in &bodies {
        // Round 1's key also carried the different body.
        assert_eq!(hashes.len(), if key == first { 2 } else { 1 }, "{key}");
    }
    let per_round: BTreeSet<_> = o
        .rounds
        .iter()
        .map(|r| bodies[&r.key].iter().next().cloned())
        .collect();
    assert_eq!(per_round.len(), 6, "every round sent its own body");

    let report = serde_json::to_value(&o).expect("outcome serializes");
    for field in [
        "checks",
        "rounds",
        "exchanges",
        "requests_sent",
        "by_status",
        "release_skew_us_max",
        "latency_ms",
    ] {
        assert!(report.get(field).is_some(), "{field}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_then_insert_fails_duplicates_and_names_the_keys() {
    let s = start("orders: { idempotency: check-then-insert, work_delay: 20ms }").await;
    let cfg = ProbeConfig {
        verify: Some(format!("{}/orders?idempotency_key={{key}}", s.url())),
        ..config(&s, 6)
    };
    let o = probe(&cfg).await.expect("probe runs");
    let dup = check(&o, "duplicates");
    assert_eq!(dup.verdict, Verdict::Fail, "{dup:#?}");
    assert!(!o.passed());

    let mut in_store = BTreeMap::new();
    for r in &o.rounds {
        let n = s.orders().count_for_key(&r.key).await.unwrap();
        assert_eq!(
            verified(&o, &r.key),
            Some(n),
            "the verify lookup agrees with the store"
        );
        in_store.insert(r.key.clone(), n);
    }
    let racy: BTreeSet<&String> = in_store
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k)
        .collect();
    assert!(!racy.is_empty(), "{in_store:?}");
    let named: BTreeSet<&String> = dup.evidence.iter().filter_map(|e| e.key.as_ref()).collect();
    assert!(
        racy.iter().all(|k| named.contains(k)),
        "evidence names every key with duplicates: {named:?} / {racy:?}"
    );
    for e in dup
        .evidence
        .iter()
        .filter(|e| e.detail.starts_with("verify:"))
    {
        let key = e.key.as_ref().unwrap();
        assert!(
            e.detail
                .contains(&format!("the store holds {} resources", in_store[key])),
            "{e:?}"
        );
    }
    assert_eq!(
        dup.metrics["verified_duplicate_keys"],
        racy.len() as u64,
        "the store's word: exactly the racy keys"
    );
    assert_eq!(
        dup.metrics["max_resources_per_key_in_store"],
        *in_store.values().max().unwrap()
    );
    assert_eq!(dup.metrics["verified_keys"], 6);
    let sem = check(&o, "idempotency_semantics");
    assert_eq!(sem.verdict, Verdict::Fail, "several 201s per round");
    assert!(sem.metrics["several_creations"].as_u64().unwrap() > 0);
    assert!(
        sem.metrics["mismatch_accepted"].as_u64().unwrap() > 0,
        "check-then-insert never compares bodies"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignoring_keys_fails_duplicates() {
    let s = start("orders: { idempotency: none }").await;
    let cfg = ProbeConfig {
        require_key: false,
        ..config(&s, 3)
    };
    let o = probe(&cfg).await.expect("probe runs");
    let dup = check(&o, "duplicates");
    assert_eq!(dup.verdict, Verdict::Fail);
    assert_eq!(dup.metrics["duplicate_keys"], 3);
    assert_eq!(
        dup.metrics["max_resources_per_key"],
        10 + 2,
        "every request created, the replay and the different body of round 1 too"
    );
    assert_eq!(dup.evidence.len(), 3);
    let sem = check(&o, "idempotency_semantics");
    assert_eq!(sem.verdict, Verdict::Fail);
    assert_eq!(sem.metrics["several_creations"], 3);
    assert_eq!(sem.metrics["conflicts_409"], 0, "none lost a race");
    assert_eq!(sem.metrics["mismatch_accepted"], 1);
    assert_eq!(
        sem.metrics["missing_key_requests"], 0,
        "the key was declared optional"
    );
    assert_eq!(s.orders().count().await.unwrap(), 3 * 10 + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_to_the_losers_of_a_race_fail_semantics() {
    // Every attempt of a key after the first is answered 500 without being processed; the first
    // takes a while, so the burst's other members arrive while it is in flight.
    let s = start(
        r#"
orders: { idempotency: unique, work_delay: 300ms }
rules:
  - match: { attempts: "2-" }
    fault: { status: 500 }
"#,
    )
    .await;
    let o = probe(&config(&s, 4)).await.expect("probe runs");
    assert_eq!(check(&o, "duplicates").verdict, Verdict::Pass);
    let sem = check(&o, "idempotency_semantics");
    assert_eq!(sem.verdict, Verdict::Fail, "{sem:#?}");
    assert_eq!(sem.metrics["several_creations"], 0);
    // Each 500 is a failed race or, for a member the scheduler held back until the first had
    // finished, a failed replay; the follow-up replay is one too.
    let n = |k: &str| sem.metrics[k].as_u64().unwrap_or(0);
    assert_eq!(n("race_5xx") + n("replay_failed"), 4 * 9 + 1, "{sem:#?}");
    assert!(n("race_5xx") >= 1 && n("replay_failed") >= 1, "{sem:#?}");
    assert_eq!(o.follow_up(0).and_then(|e| e.status), Some(500));
    assert_eq!(sem.metrics["missing_key_accepted"], 0);
    assert!(sem.summary.contains("got 500"), "{}", sem.summary);
    assert!(
        sem.evidence.iter().any(|e| e
            .key
            .as_ref()
            .is_some_and(|k| o.rounds.iter().any(|r| &r.key == k))
            && e.detail.contains("racing another")),
        "{:#?}",
        sem.evidence
    );
    assert_eq!(o.by_status["500"], 4 * 9 + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losers_left_without_an_answer_fail_semantics() {
    // Attempts 2-5 of a key see a TCP reset, later ones a hang the probe gives up on after 2 s;
    // the first works for 500 ms, so the others arrive while it is in flight.
    let s = start(
        r#"
orders: { idempotency: unique, work_delay: 500ms }
rules:
  - match: { attempts: "2-5" }
    fault: reset
  - match: { attempts: "6-" }
    fault: { hang: { cap: 60s } }
"#,
    )
    .await;
    let cfg = ProbeConfig {
        timeout: Duration::from_secs(2),
        ..config(&s, 2)
    };
    let o = probe(&cfg).await.expect("probe runs");
    let sem = check(&o, "idempotency_semantics");
    assert_eq!(sem.verdict, Verdict::Fail, "{sem:#?}");
    // A loser the scheduler held back until the first had finished is a failed replay instead
    // of a failed race; the follow-up replay is one too.
    let n = |k: &str| sem.metrics[k].as_u64().unwrap_or(0);
    assert_eq!(
        n("race_no_response") + n("replay_failed"),
        2 * 9 + 1,
        "{sem:#?}"
    );
    assert!(n("race_no_response") >= 1, "{sem:#?}");
    // The replay and the different body are attempts 11 and 12: they hang too.
    assert_eq!(
        o.errors_by_kind.get("timeout"),
        Some(&(2 * 5 + 2)),
        "{o:#?}"
    );
    assert_eq!(o.errors_by_kind.get("reset"), Some(&(2 * 4)), "{o:#?}");
    assert_eq!(o.follow_up(0).map(|e| e.status), Some(None));
    assert!(n("replay_failed") >= 1);
    assert_eq!(
        o.by_status.values().sum::<u64>(),
        2 + 1,
        "two 201s, one 400"
    );
    assert_eq!(o.latency_ms.len(), 3, "latency of answered requests only");
}

#[tokio::test]
async fn unreachable_target_is_an_error_with_the_os_reason() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/orders");
    let err = probe(&ProbeConfig::new(url.clone()))
        .await
        .expect_err("nothing listens there");
    match &err {
        ProbeError::Unreachable { url: u, source } => {
            assert_eq!(u, &url);
            assert_eq!(source.kind(), std::io::ErrorKind::ConnectionRefused);
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert_eq!(err.kind(), harness::failure::FailureKind::CouldNotRun);
    assert!(err.to_string().contains(&url), "{err}");
}

#[tokio::test]
async fn bad_settings_are_refused_before_anything_is_sent() {
    for url in [
        "example.com/orders",
        "ftp://example.com/",
        "http://",
        "https://u:p@x/",
    ] {
        assert!(
            matches!(
                probe(&ProbeConfig::new(url)).await,
                Err(ProbeError::InvalidUrl { .. })
            ),
            "{url}"
        );
    }
    let base = ProbeConfig::new("http://127.0.0.1:9/orders");
    let bad = [
        ProbeConfig {
            rounds: 0,
            ..base.clone()
        },
        ProbeConfig {
            concurrency: 0,
            ..base.clone()
        },
        ProbeConfig {
            method: "NOT A METHOD".into(),
            ..base.clone()
        },
        ProbeConfig {
            verify: Some("/orders".into()),
            ..base.clone()
        },
        ProbeConfig {
            headers: vec![("Idempotency-Key".into(), "fixed".into())],
            ..base.clone()
        },
        ProbeConfig {
            sync: harness::plan::SyncMode::SinglePacket,
            ..base.clone()
        },
    ];
    for cfg in bad {
        assert!(
            matches!(probe(&cfg).await, Err(ProbeError::InvalidConfig { .. })),
            "{cfg:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_makes_the_keys_reproducible() {
    let keys = |o: ProbeOutcome| o.rounds.into_iter().map(|r| r.key).collect::<Vec<_>>();
    let mut runs = Vec::new();
    for seed in [Some(11), Some(11), None] {
        let s = start("{}").await;
        let cfg = ProbeConfig {
            concurrency: 2,
            seed,
            ..config(&s, 2)
        };
        runs.push(keys(probe(&cfg).await.expect("probe runs")));
    }
    assert_eq!(runs[0], runs[1]);
    assert_ne!(runs[0], runs[2]);
    assert_ne!(runs[0][0], runs[0][1], "a fresh key per round");
}

/// A response's trailer fields are kept in the probe's record, as the journal keeps its headers:
/// a server that answers with a chunked body and a trailer section (as gRPC-over-HTTP/1.1 bridges
/// and streaming APIs do) has its trailers in every exchange.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_are_kept_in_the_record() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // The head, then as much body as it announces.
                let (head_end, len) = loop {
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break (i + 4, len);
                    }
                };
                while buf.len() < head_end + len {
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let body = br#"{"id":"o1"}"#;
                let answer = format!(
                    "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\ntrailer: x-checksum\r\nconnection: close\r\n\r\n{:x}\r\n{}\r\n0\r\nx-checksum: sha256=abc\r\n\r\n",
                    body.len(),
                    String::from_utf8_lossy(body)
                );
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    let cfg = ProbeConfig {
        rounds: 1,
        concurrency: 2,
        seed: Some(7),
        ..ProbeConfig::new(format!("http://{addr}/orders"))
    };
    let o = probe(&cfg).await.expect("probe runs");
    let answered: Vec<_> = o
        .exchanges
        .iter()
        .filter(|e| e.status == Some(201))
        .collect();
    assert!(!answered.is_empty(), "{:#?}", o.exchanges);
    for e in answered {
        let t = e.response_trailers.as_ref().expect("trailers recorded");
        assert_eq!(
            t.get("x-checksum").map(String::as_str),
            Some("sha256=abc"),
            "{e:?}"
        );
    }
}
