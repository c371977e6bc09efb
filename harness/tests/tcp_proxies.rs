//! A scenario's TCP proxies under the real `harness` binary: `harness exec` starts a service
//! pointed at its cache through the embedded fault server's proxy (`HARNESS_PROXY_CACHE_ADDR`),
//! the phases load the service, and the run judges its HTTP behaviour while the cache is
//! degraded; the report counts the proxy's connections beside the requests. `harness analyze`
//! counts a journal's connections the same way and leaves them out of the checks.
//!
//! The service (`tests/services/cache_service.py`) needs python3, and its cache a real Redis
//! (`bash .ci/redis`, read from `FAULT_SERVER_TEST_REDIS_URL`); without them the exec test says
//! that it skips, unless `HARNESS_REQUIRE_TOOLS=1` (CI), where a missing one is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;

fn harness() -> Command {
    Command::cargo_bin("harness").unwrap()
}

fn here(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn redis_or_skip() -> Option<String> {
    let redis = std::env::var("FAULT_SERVER_TEST_REDIS_URL").ok();
    let python = Command::new("python3").arg("--version").output().is_ok();
    match (redis, python) {
        (Some(r), true) => Some(
            r.trim_start_matches("redis://")
                .trim_end_matches('/')
                .to_string(),
        ),
        _ => {
            let why = "needs python3 and a Redis: export FAULT_SERVER_TEST_REDIS_URL=\"$(bash .ci/redis)\"";
            assert!(
                std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
                "{why}"
            );
            eprintln!("skipping the cache service under harness exec: {why}");
            None
        }
    }
}

/// The scenario: the service's cache behind proxy `cache`, with `toxics`.
fn scenario(dir: &Path, port: u16, redis: &str, toxics: &str) -> PathBuf {
    let text = format!(
        r#"name: cache-degraded
seed: 1
server:
  proxies:
    - name: cache
      listen: 127.0.0.1:0
      upstream: "{redis}"
      toxics: {toxics}
target: http://127.0.0.1:{port}
phases:
  - name: browse
    clients: {{ concurrency: 2, requests: 20 }}
    request: {{ method: GET, path: /item }}
checks:
  thresholds: {{ rules: ["error_rate < 1%"] }}
"#
    );
    let p = dir.join(format!("scenario-{port}.yaml"));
    std::fs::write(&p, text).unwrap();
    p
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `harness exec` of the scenario with the service: exit code and the JSON report.
fn exec(scenario: &Path, port: u16) -> (i32, serde_json::Value) {
    let out = harness()
        .arg("exec")
        .arg(scenario)
        .args(["--format", "json", "--wait", "20s", "--"])
        .arg("python3")
        .arg(here("tests/services/cache_service.py"))
        .arg(port.to_string())
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not a JSON report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

#[test]
fn exec_judges_a_service_whose_cache_is_degraded_by_a_toxic() {
    let Some(redis) = redis_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();

    let port = free_port();
    let healthy = scenario(dir.path(), port, &redis, "[]");
    let (code, report) = exec(&healthy, port);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["requests"]["by_status"]["200"], 20, "{report:#}");
    // A connection is counted once it ended: the last ones may still be closing when the run
    // is judged.
    assert_eq!(report["connections"][0]["proxy"], "cache");
    let n = report["connections"][0]["connections"]
        .as_u64()
        .unwrap_or(0);
    assert!((1..=20).contains(&n), "{report:#}");

    // Every cache answer 1 s late: the service's 300 ms budget runs out, it answers 503.
    let port = free_port();
    let slow = scenario(
        dir.path(),
        port,
        &redis,
        "[{ type: latency, attributes: { latency: 1000 } }]",
    );
    let (code, report) = exec(&slow, port);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["requests"]["by_status"]["503"], 20, "{report:#}");
    let thresholds = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "thresholds")
        .unwrap();
    assert_eq!(thresholds["verdict"], "fail", "{thresholds:#}");
    let n = report["connections"][0]["by_toxic"]["latency_downstream"]
        .as_u64()
        .unwrap_or(0);
    assert!((1..=20).contains(&n), "{report:#}");
}

#[test]
fn analyze_counts_a_journals_connections_and_judges_only_its_requests() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = String::new();
    let mut seq = 0;
    for i in 0..5u64 {
        seq += 1;
        let mut e = history::sample::entry(seq, i as f64 * 10.0)
            .status(201)
            .build();
        e.idempotency_key = Some(format!("k{i}"));
        e.created = Some(format!("o{i}"));
        lines.push_str(&serde_json::to_string(&e).unwrap());
        lines.push('\n');
        seq += 1;
        let mut c = history::sample::connection(seq, i as f64 * 10.0, "redis");
        c.outcome = history::Outcome::Reset;
        if let Some(t) = c.tcp.as_deref_mut() {
            t.end = history::TcpEnd::Reset;
        }
        lines.push_str(&serde_json::to_string(&c).unwrap());
        lines.push('\n');
    }
    let journal = dir.path().join("journal.jsonl");
    std::fs::write(&journal, lines).unwrap();
    let out = harness()
        .arg("analyze")
        .arg(&journal)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["requests"]["sent"], 5, "{report:#}");
    assert_eq!(report["requests"]["errors"], 0, "{report:#}");
    assert_eq!(report["connections"][0]["connections"], 5);
    assert_eq!(report["connections"][0]["by_end"]["reset"], 5);
}
