//! Realistic reports shared by the renderer tests.
//!
//! Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;

use reports::model::{AttemptDelays, Exec, Latency, Phase, Requests, Series, Timeline};
use reports::{CheckResult, Evidence, Outcome, Report, Verdict, SCHEMA_VERSION};

/// Window width of the sample timelines, as in Exercise 1.
pub const WINDOW_MS: f64 = 250.0;
/// Windows of the sample timeline: 32 s of 250 ms.
pub const WINDOWS: usize = 128;
/// Where the retry waves of 500 clients without jitter land: t = 1, 3, 7, 15, 31 s.
pub const WAVE_WINDOWS: [usize; 5] = [4, 12, 28, 60, 124];

/// Only retries, counted in 250 ms windows: 500 clients, five attempts, no jitter. Each wave is
/// mostly 503 with a few successes, injected drops and client timeouts.
pub fn sawtooth_timeline() -> Timeline {
    let mut s201 = vec![0; WINDOWS];
    let mut s503 = vec![0; WINDOWS];
    let mut drop = vec![0; WINDOWS];
    let mut timeout = vec![0; WINDOWS];
    for w in WAVE_WINDOWS {
        s201[w] = 50;
        s503[w] = 440;
        drop[w] = 6;
        timeout[w] = 4;
    }
    Timeline {
        window_ms: WINDOW_MS,
        series: vec![
            Series {
                label: "201".into(),
                counts: s201,
            },
            Series {
                label: "503".into(),
                counts: s503,
            },
            Series {
                label: "fault:drop".into(),
                counts: drop,
            },
            Series {
                label: "error:timeout".into(),
                counts: timeout,
            },
        ],
    }
}

/// Retry delays of 500 clients with exponential backoff and no jitter: every client waits exactly
/// 1, 2, 4, 8, 16 s.
pub fn delays_without_jitter() -> Vec<AttemptDelays> {
    (0..5)
        .map(|i| AttemptDelays {
            attempt: i + 2,
            delays_ms: vec![1000.0 * f64::from(1u32 << i); 500],
            ..AttemptDelays::default()
        })
        .collect()
}

/// The same backoff with full jitter, U(0, d), drawn from a fixed sequence so tests are stable.
pub fn delays_with_full_jitter() -> Vec<AttemptDelays> {
    (0..5)
        .map(|i| {
            let d = 1000.0 * f64::from(1u32 << i);
            AttemptDelays {
                attempt: i + 2,
                delays_ms: (0..500)
                    .map(|k| d * f64::from((k * 37) % 500) / 500.0)
                    .collect(),
                ..AttemptDelays::default()
            }
        })
        .collect()
}

fn latency(p50: f64, p90: f64, p99: f64, p999: f64, max: f64, count: u64) -> Latency {
    Latency {
        p50,
        p90,
        p99,
        p999,
        max,
        mean: p50 * 1.2,
        count,
    }
}

fn statuses(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// A failed thundering-herd run: the jitter and thresholds checks fail, the others pass (one of them
/// weakly, one inconclusively).
pub fn sample() -> Report {
    let jitter = CheckResult::new(
        "jitter",
        Verdict::Fail,
        "retry delays have no jitter: all 500 clients retried at the same instant on every attempt",
    )
    .metric("clients", 500)
    .metric("peak_per_window", 500)
    .metric("spread_ratio", 0.0)
    .evidence(Evidence {
        detail: "attempt 2: 500 retries, every delay exactly 1000 ms".into(),
        key: None,
        seqs: (501..=520).collect(),
    })
    .evidence(Evidence {
        detail: "attempt 3: 500 retries, every delay exactly 2000 ms".into(),
        key: None,
        seqs: vec![1001, 1002, 1003],
    })
    .evidence(Evidence {
        detail: "attempt 4: 500 retries, every delay exactly 4000 ms".into(),
        key: None,
        seqs: vec![1501, 1502],
    })
    .evidence(Evidence {
        detail: "attempt 5: 500 retries, every delay exactly 8000 ms".into(),
        key: None,
        seqs: vec![2001],
    })
    .evidence(Evidence {
        detail: "attempt 6: 500 retries, every delay exactly 16000 ms".into(),
        key: None,
        seqs: vec![2501],
    });
    let thresholds = CheckResult::new(
        "thresholds",
        Verdict::Fail,
        "p99 latency 1520 ms is above the limit of 500 ms",
    )
    .metric("p99_ms", 1520.0)
    .metric("limit_ms", 500.0)
    .evidence(Evidence {
        detail: "slowest request, answered after the injected delay".into(),
        key: Some("order-7f3a".into()),
        seqs: vec![2044],
    });
    let duplicates = CheckResult::new(
        "duplicates",
        Verdict::Pass,
        "every Idempotency-Key created at most one order (500 keys, 500 orders)",
    )
    .metric("keys", 500)
    .metric("orders", 500);
    let retry_on_4xx = CheckResult::new(
        "retry_on_4xx",
        Verdict::Pass,
        "no request that got a 4xx other than 408/409/429 was retried",
    );
    let amplification = CheckResult::new(
        "amplification",
        Verdict::Weak,
        "retries were 80% of traffic; within the budget of 400% but close to it",
    )
    .metric("retry_ratio", 0.8);
    let retry_after = CheckResult::new(
        "retry_after",
        Verdict::Inconclusive,
        "no response carried Retry-After, so there was nothing to honour",
    );

    Report {
        schema_version: SCHEMA_VERSION,
        scenario: "thundering-herd-no-jitter".into(),
        outcome: Some(Outcome::Failed),
        interrupted: false,
        started_unix_ms: 1_764_493_140_000,
        duration_ms: 31_480,
        from_journal: false,
        target: Some("http://127.0.0.1:8080/orders".into()),
        seed: Some(42),
        time_scale: 1.0,
        requests: Requests {
            sent: 2_500,
            completed: 2_450,
            errors: 50,
            retries: 2_000,
            by_status: statuses(&[("201", 250), ("503", 2_200)]),
            by_grpc_status: Default::default(),
            late_starts: 0,
            cancelled: 0,
            not_started: 0,
            abandoned: 0,
            operations: None,
            failed_operations: None,
        },
        latency_ms: latency(2.1, 4.8, 1_520.0, 2_010.0, 2_950.5, 2_450),
        throughput_rps: 77.8,
        errors_by_kind: statuses(&[("timeout", 20), ("closed", 30)]),
        phases: vec![
            Phase {
                name: "incident".into(),
                kind: "burst".into(),
                duration_ms: 1_000,
                requests: Requests {
                    sent: 500,
                    completed: 500,
                    errors: 0,
                    retries: 0,
                    by_status: statuses(&[("503", 500)]),
                    by_grpc_status: Default::default(),
                    late_starts: 0,
                    cancelled: 0,
                    not_started: 0,
                    abandoned: 0,
                    operations: None,
                    failed_operations: None,
                },
                latency_ms: latency(1.9, 3.5, 6.0, 9.0, 12.0, 500),
                latency_intended_ms: None,
                throughput_rps: 500.0,
                metrics: [("release_skew_us_max".to_string(), 180.into())]
                    .into_iter()
                    .collect(),
            },
            Phase {
                name: "retry-storm".into(),
                kind: "fleet".into(),
                duration_ms: 30_480,
                requests: Requests {
                    sent: 2_000,
                    completed: 1_950,
                    errors: 50,
                    retries: 2_000,
                    by_status: statuses(&[("201", 250), ("503", 1_700)]),
                    by_grpc_status: Default::default(),
                    late_starts: 0,
                    cancelled: 0,
                    not_started: 0,
                    abandoned: 0,
                    operations: None,
                    failed_operations: None,
                },
                latency_ms: latency(2.2, 5.0, 1_600.0, 2_100.0, 2_950.5, 1_950),
                latency_intended_ms: Some(latency(2.5, 9.0, 1_800.0, 2_400.0, 3_100.0, 1_950)),
                throughput_rps: 64.0,
                metrics: BTreeMap::new(),
            },
        ],
        checks: vec![
            jitter,
            duplicates,
            retry_on_4xx,
            amplification,
            retry_after,
            thresholds,
        ],
        timeline: Some(sawtooth_timeline()),
        retry_delays: delays_without_jitter(),
        exec: None,
        shard: None,
        mergeable: None,
        notes: Vec::new(),
        operations: Vec::new(),
        connections: Vec::new(),
        statements: Vec::new(),
        conformance: None,
    }
}

/// A run where every check passed, with jittered retries.
pub fn passing_sample() -> Report {
    let mut r = sample();
    r.scenario = "thundering-herd-full-jitter".into();
    r.outcome = Some(Outcome::Passed);
    r.checks.retain(|c| c.verdict != Verdict::Fail);
    r.retry_delays = delays_with_full_jitter();
    r
}

/// The sample, with connections through two TCP proxies (one name an attempt at markup).
pub fn with_connections() -> Report {
    let mut r = sample();
    r.connections = vec![
        reports::model::ProxyConnections {
            proxy: "<b>pg</b>".into(),
            connections: 2,
            upstream_unreached: 1,
            by_end: statuses(&[("closed", 1), ("refused", 1)]),
            bytes_up: 10,
            bytes_down: 20,
            by_toxic: BTreeMap::new(),
        },
        reports::model::ProxyConnections {
            proxy: "redis".into(),
            connections: 7,
            upstream_unreached: 0,
            by_end: statuses(&[("closed", 5), ("timed_out", 2)]),
            bytes_up: 700,
            bytes_down: 14_000,
            by_toxic: statuses(&[("latency_downstream", 7), ("timeout_upstream", 2)]),
        },
    ];
    r
}

/// The sample, with statements through a PostgreSQL-aware proxy (its name an attempt at
/// markup) and commands through a Redis-aware one.
pub fn with_statements() -> Report {
    let mut r = sample();
    r.statements = vec![
        reports::model::ProxyStatements {
            proxy: "<b>db</b>".into(),
            protocol: "postgres".into(),
            statements: 40,
            by_fault: statuses(&[("drop", 2), ("error", 3)]),
            by_outcome: statuses(&[("dropped", 2), ("responded", 38)]),
            by_error: statuses(&[("40001", 3)]),
            committed: 9,
            not_committed: 3,
            committed_unanswered: 2,
        },
        reports::model::ProxyStatements {
            proxy: "cache".into(),
            protocol: "redis".into(),
            statements: 12,
            by_fault: statuses(&[("error", 4)]),
            by_outcome: statuses(&[("responded", 12)]),
            by_error: statuses(&[("LOADING", 4)]),
            ..Default::default()
        },
    ];
    r
}

/// A run that did nothing: no requests, no checks, no charts.
pub fn empty() -> Report {
    Report {
        schema_version: SCHEMA_VERSION,
        scenario: "empty".into(),
        outcome: Some(Outcome::Passed),
        interrupted: false,
        started_unix_ms: 0,
        duration_ms: 0,
        from_journal: false,
        target: None,
        seed: None,
        time_scale: 1.0,
        requests: Requests::default(),
        latency_ms: Latency::default(),
        throughput_rps: 0.0,
        errors_by_kind: BTreeMap::new(),
        phases: Vec::new(),
        checks: Vec::new(),
        timeline: None,
        retry_delays: Vec::new(),
        exec: None,
        shard: None,
        mergeable: None,
        notes: Vec::new(),
        operations: Vec::new(),
        connections: Vec::new(),
        statements: Vec::new(),
        conformance: None,
    }
}

/// A report whose every string is an attempt at markup injection.
pub fn hostile() -> Report {
    let mut r = sample();
    r.scenario = "<script>alert('scenario')</script>".into();
    r.target = Some("http://x/\"><img src=x onerror=alert(1)>".into());
    r.checks[0].summary = "a | b <b>bold</b> & \"quoted\" ]]> \u{1b}[31m\u{7}\u{202e}".into();
    r.checks[0].evidence[0].detail = "</td></tr><script>alert('evidence')</script>".into();
    r.checks[0].evidence[0].key = Some("key'\"<>&".into());
    r.checks[0]
        .metrics
        .insert("<i>metric</i>".into(), "<svg onload=alert(1)>".into());
    r.phases[0].name = "<iframe src=//evil>".into();
    r.exec = Some(Exec {
        command: vec!["sh".into(), "-c".into(), "echo <x> | cat".into()],
        exit_code: Some(3),
    });
    if let Some(t) = r.timeline.as_mut() {
        t.series[1].label = "<script>503</script>".into();
    }
    r
}

/// An audit of an orders API: a correct keyed create, a racy one that created seven orders from
/// one burst, an unkeyed create a retry doubles, a DELETE, and an operation the API refused.
pub fn audit_sample() -> Report {
    use reports::model::{AuditedOperation, OperationVerdict, ProbeKind};
    let op = |method: &str, path: &str, id: &str, probe, verdict, summary: &str| AuditedOperation {
        method: method.into(),
        path: path.into(),
        operation_id: id.into(),
        key_header: None,
        key_support: "none".into(),
        probe,
        verdict,
        summary: summary.into(),
        creations: String::new(),
        replay: String::new(),
        mismatch: String::new(),
        missing_key: String::new(),
        evidence: Vec::new(),
        checks: Vec::new(),
        request: None,
        requests_sent: 0,
    };
    let keyed = |id: &str, verdict, creations: &str, summary: &str| {
        let mut o = op("POST", "/orders", id, ProbeKind::Keyed, verdict, summary);
        o.key_header = Some("Idempotency-Key".into());
        o.key_support = "declared, required".into();
        o.creations = creations.into();
        o.replay = "200, same resource".into();
        o.mismatch = "422".into();
        o.missing_key = "400".into();
        o
    };
    let good = keyed(
        "createOrder",
        OperationVerdict::Pass,
        "1",
        "every key created one order",
    );
    let mut racy = keyed(
        "createOrderRacy",
        OperationVerdict::Fail,
        "max 7 (20 of 20 keys)",
        "20 of 20 keys created more than one resource",
    );
    racy.path = "/racy-orders".into();
    racy.evidence = vec![Evidence {
        detail: "key created 7 resources: o-1, o-2, o-3, o-4, o-5, o-6, o-7".into(),
        key: Some("probe-0000000000000001-1".into()),
        seqs: vec![1, 2, 3, 4, 5, 6, 7],
    }];
    racy.checks = vec![CheckResult::new(
        "duplicates",
        Verdict::Fail,
        "20 of 20 keys created more than one resource",
    )];
    racy.request = Some("POST /racy-orders HTTP/1.1\r\nIdempotency-Key: k\r\n\r\n{}".into());
    let mut unkeyed = op(
        "POST",
        "/notes",
        "createNote",
        ProbeKind::LostResponse,
        OperationVerdict::Fail,
        "not safe to retry: a retry after a lost response created a second note",
    );
    unkeyed.creations = "2".into();
    unkeyed.evidence = vec![Evidence {
        detail: "lost response, then the retry answered 201 with n-2: the list grew by 2".into(),
        key: None,
        seqs: vec![1, 2],
    }];
    let delete = op(
        "DELETE",
        "/orders/{id}",
        "deleteOrder",
        ProbeKind::Repeat,
        OperationVerdict::Pass,
        "a repeated DELETE answered 404, never 5xx",
    );
    let mut refused = op(
        "PUT",
        "/admin/{id}",
        "putAdmin",
        ProbeKind::None,
        OperationVerdict::Inconclusive,
        "could not build a valid request: the API answered 401 (the document asks for -H 'Authorization: Bearer <token>')",
    );
    refused.evidence = vec![Evidence {
        detail: "PUT /admin/1 answered 401: {\"error\":\"unauthorized\"}".into(),
        key: None,
        seqs: vec![],
    }];
    let mut r = sample();
    r.scenario = "audit http://127.0.0.1:8080".into();
    r.checks = Vec::new();
    r.phases = Vec::new();
    r.timeline = None;
    r.retry_delays = Vec::new();
    r.outcome = Some(Outcome::Failed);
    r.operations = vec![good, racy, unkeyed, delete, refused];
    r
}

/// `harness conform`'s scorecard: a client that retries a 400 and has no breaker.
pub fn scorecard_sample() -> Report {
    use reports::model::{ConformCase, ConformRule, Conformance, RuleVerdict};
    let rule = |id: &str, case: &str, check: &str, verdict, figure: &str| ConformRule {
        id: id.into(),
        title: format!("the rule {id}"),
        source: "RFC 9110".into(),
        case: case.into(),
        check: check.into(),
        required: false,
        verdict,
        figure: figure.into(),
        evidence: if verdict == RuleVerdict::Fail {
            vec![Evidence {
                detail: "k-1 retried after 400: attempt 2 (seq 2) followed seq 1".into(),
                key: Some("k-1".into()),
                seqs: vec![1, 2],
            }]
        } else {
            Vec::new()
        },
    };
    let mut r = empty();
    r.scenario = "conform http".into();
    r.outcome = Some(Outcome::Failed);
    r.duration_ms = 21_400;
    r.conformance = Some(Conformance {
        suite: "http".into(),
        command: vec!["python3".into(), "adapter.py".into()],
        rules: vec![
            rule(
                "transient-retried",
                "first-two-503",
                "transient_retried",
                RuleVerdict::Pass,
                "all 30 operations whose first attempt failed transiently were retried",
            ),
            rule(
                "no-retry-4xx",
                "first-400",
                "retry_on_4xx",
                RuleVerdict::Fail,
                "10 retries after a non-retryable 4xx",
            ),
            rule(
                "jitter",
                "first-two-503",
                "jitter",
                RuleVerdict::Weak,
                "±12 % around 200 ms: proportional jitter",
            ),
            rule(
                "retry-after",
                "retry-after-2s",
                "retry_after",
                RuleVerdict::Inconclusive,
                "not enough data",
            ),
            rule(
                "breaker",
                "outage-10s",
                "circuit_breaker",
                RuleVerdict::NotPresent,
                "not present: kept calling",
            ),
        ],
        cases: vec![ConformCase {
            name: "first-400".into(),
            about: "the first attempt of every key answered 400".into(),
            calls: 10,
            requests: 20,
            exit_code: Some(0),
            duration_ms: 700,
            problem: None,
        }],
    });
    r
}
