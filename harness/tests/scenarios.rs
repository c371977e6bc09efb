//! Every file in `scenarios/` runs with the outcome its header comment states.
//!
//! The header is the single source of truth: `Expected: PASS` must exit 0 with every check
//! passed; `Expected: FAIL` must exit 1, and each check named in backquotes on the Expected line(s)
//! must be among the failed ones. Every check a run leaves inconclusive is printed with its
//! reason, and must be named, with why, on an `# Inconclusive:` line (the census: no check
//! quietly decides nothing).

#[allow(dead_code)]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// (expected to pass, checks named on the Expected lines).
fn expectation(text: &str) -> (bool, Vec<String>) {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("# Expected:"));
    let mut expected = String::new();
    if let Some(first) = lines.next() {
        expected.push_str(first);
        for l in lines {
            let body = l.trim_start_matches('#').trim();
            // The Expected sentence ends at a blank comment line, a "See …" pointer or a new heading.
            let heading = body.split_once(':').is_some_and(|(h, _)| !h.contains(' '));
            if !l.starts_with("# ")
                || body.is_empty()
                || body.starts_with("See ")
                || heading
                || body.starts_with("May be inconclusive:")
            {
                break;
            }
            expected.push(' ');
            expected.push_str(body);
        }
    }
    assert!(!expected.is_empty(), "scenario lacks an `# Expected:` line");
    let pass = expected.contains("PASS");
    assert!(
        pass != expected.contains("FAIL"),
        "Expected line must say PASS or FAIL: {expected}"
    );
    let names = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| {
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        })
        .map(str::to_string)
        .collect();
    (pass, names)
}

/// Scenarios whose verdict rests on timing (500 clients, jitter measured in ms, budgets of a few
/// hundred ms of real time) run one at a time, so that two of them do not share the 2 cores and
/// each other's scheduling noise.
static TIMING_SENSITIVE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn timing_sensitive(name: &str) -> bool {
    [
        "thundering-herd",
        "total-timeout",
        "retry-amplification-deadline",
        "circuit-breaker",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

fn run(name: &str) {
    let _alone =
        timing_sensitive(name).then(|| TIMING_SENSITIVE.lock().unwrap_or_else(|e| e.into_inner()));
    let path = scenarios_dir().join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with("# "),
        "{name}: starts with a comment that says what it demonstrates"
    );
    assert!(text.contains("# Run:"), "{name}: says how to run it");
    let (pass, named) = expectation(&text);
    let out = Command::cargo_bin("harness")
        .unwrap()
        .arg("run")
        .arg(&path)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{name}: {e}\n{stdout}\n{stderr}"));
    let failed: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["passed"] == false)
        .filter_map(|c| c["name"].as_str())
        .collect();
    let summaries: Vec<String> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{}: {}", c["name"], c["summary"]))
        .collect();
    if let Err(e) = support::inconclusive_census(name, &text, &report) {
        panic!("{e}");
    }
    if pass {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name} should pass; failed: {failed:?}\n{summaries:#?}"
        );
    } else {
        assert_eq!(
            out.status.code(),
            Some(1),
            "{name} should fail\n{summaries:#?}\n{stderr}"
        );
        for n in &named {
            if report["checks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == n.as_str())
            {
                assert!(
                    failed.contains(&n.as_str()),
                    "{name}: `{n}` should fail\n{summaries:#?}"
                );
            }
        }
        assert!(!failed.is_empty());
    }
}

macro_rules! scenarios {
    ($($test:ident => $file:literal),* $(,)?) => {
        $(#[test] fn $test() { run($file); })*

        #[test]
        fn every_scenario_file_is_tested() {
            // Run through `harness exec` with the example service, in tests/example_service.rs,
            // with the example webhook consumer (webhooks-*), in tests/webhooks.rs, and beside
            // the services below HTTP (below-*), in tests/below.rs.
            let elsewhere = [
                "below-db-retry-whole",
                "below-db-retry-none",
                "below-ambiguous-commit-reinsert",
                "below-ambiguous-commit-keyed",
                "below-cache-miss",
                "below-cache-fail",
                "ci-gate-example",
                "proxy-example",
                "webhooks-unique",
                "webhooks-naive",
                "webhooks-select-then-insert",
                "webhooks-no-verify",
                "webhooks-dup-500",
                "webhooks-slow-ack",
            ];
            let listed = [$($file),*];
            for entry in std::fs::read_dir(scenarios_dir()).unwrap() {
                let p = entry.unwrap().path();
                if p.extension().is_some_and(|e| e == "yaml") {
                    let stem = p.file_stem().unwrap().to_string_lossy().to_string();
                    assert!(
                        listed.contains(&stem.as_str()) || elsewhere.contains(&stem.as_str()),
                        "scenarios/{stem}.yaml has no test"
                    );
                }
            }
        }
    };
}

scenarios! {
    quickstart => "quickstart",
    idempotency_burst => "idempotency-burst",
    idempotency_burst_last_byte => "idempotency-burst-last-byte",
    idempotency_burst_single_packet => "idempotency-burst-single-packet",
    idempotency_race => "idempotency-race",
    idempotency_lost_response => "idempotency-lost-response",
    idempotency_lost_response_new_key => "idempotency-lost-response-new-key",
    thundering_herd_none => "thundering-herd-none",
    thundering_herd_full => "thundering-herd-full",
    thundering_herd_equal => "thundering-herd-equal",
    thundering_herd_decorrelated => "thundering-herd-decorrelated",
    retry_on_4xx => "retry-on-4xx",
    state_transition => "state-transition",
    state_transition_race => "state-transition-race",
    retry_after => "retry-after",
    retry_after_honored => "retry-after-honored",
    circuit_breaker => "circuit-breaker",
    circuit_breaker_with_breaker => "circuit-breaker-with-breaker",
    total_timeout => "total-timeout",
    total_timeout_bounded => "total-timeout-bounded",
    latency_slo => "latency-slo",
    retry_amplification_3 => "retry-amplification-3",
    retry_amplification_4 => "retry-amplification-4",
    retry_amplification_innermost => "retry-amplification-innermost",
    retry_amplification_budget => "retry-amplification-budget",
    retry_amplification_deadline => "retry-amplification-deadline",
    retry_amplification_breaker => "retry-amplification-breaker",
    grpc_non_retryable => "grpc-non-retryable",
    grpc_non_retryable_retried => "grpc-non-retryable-retried",
    grpc_pushback => "grpc-pushback",
    grpc_pushback_ignored => "grpc-pushback-ignored",
    grpc_committed => "grpc-committed",
    grpc_committed_retried => "grpc-committed-retried",
    grpc_attempts => "grpc-attempts",
    grpc_attempts_uncapped => "grpc-attempts-uncapped",
    grpc_hedging => "grpc-hedging",
    grpc_hedging_duplicates => "grpc-hedging-duplicates",
}

#[test]
fn expectation_parsing() {
    let (pass, names) = expectation("# x\n# Expected: FAIL (exit 1): `key_stability` finds retries, `duplicates` finds\n# the operations.\nname: x\n");
    assert!(!pass);
    assert_eq!(names, ["key_stability", "duplicates"]);
    let (pass, _) = expectation("# Expected: PASS (exit 0).\n");
    assert!(pass);
}

#[test]
fn the_census_holds_a_run_to_its_inconclusive_line() {
    let header = "# x\n# Expected: PASS (exit 0).\n# Inconclusive: `retry_after` (no Retry-After was\n# sent), `jitter` (too few retries).\nname: x\n";
    assert_eq!(
        support::stated_inconclusive(header),
        ["retry_after", "jitter"]
    );
    let report = |verdicts: &[(&str, &str)]| {
        serde_json::json!({ "checks": verdicts.iter().map(|(n, v)| serde_json::json!({
            "name": n, "verdict": v, "summary": format!("{n} said {v}")
        })).collect::<Vec<_>>() })
    };
    let stated = report(&[("retry_after", "inconclusive"), ("jitter", "inconclusive")]);
    assert!(support::inconclusive_census("x", header, &stated).is_ok());
    // An inconclusive check the header does not name fails the census, with its reason.
    let unstated = report(&[("duplicates", "inconclusive")]);
    let err = support::inconclusive_census("x", "# Expected: PASS\n", &unstated).unwrap_err();
    assert!(err.contains("`duplicates` is inconclusive") && err.contains("duplicates said"));
    // A check the header names that decided fails it too.
    let decided = report(&[("retry_after", "pass"), ("jitter", "inconclusive")]);
    let err = support::inconclusive_census("x", header, &decided).unwrap_err();
    assert!(err.contains("states `retry_after` inconclusive"), "{err}");
}
