//! The project's own synthetic journal (`harness/examples/gen_journal.rs`: 64 clients retrying
//! with full jitter on a 50 ms base, lost responses, replays, payments) is what a well-behaved
//! fleet makes: `harness analyze` passes every check that has something to judge on it, `jitter`
//! among them. BENCHMARKS.md times `analyze` on it; its verdicts must be the right ones too.

#[allow(dead_code)]
mod support;

use std::process::Command;

#[test]
fn analyze_passes_every_check_on_the_synthetic_journal() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let journal = dir.path().join("j.jsonl");
    let made = Command::new(support::example_exe("gen_journal"))
        .arg(&journal)
        .arg("20000")
        .status()
        .expect("gen_journal runs");
    assert!(made.success());
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("analyze")
        .arg(&journal)
        .args(["--format", "json"])
        .output()
        .expect("harness runs");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    let checks = report["checks"].as_array().expect("checks");
    let verdict = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| (c["verdict"].clone(), c["summary"].clone()))
            .unwrap_or_else(|| panic!("no check {name}"))
    };
    assert_eq!(out.status.code(), Some(0), "{checks:#?}");
    for name in [
        "jitter",
        "duplicates",
        "key_stability",
        "idempotency_semantics",
    ] {
        let (v, summary) = verdict(name);
        assert_eq!(v, "pass", "{name}: {summary}");
    }
    assert!(checks.iter().all(|c| c["verdict"] != "fail"), "{checks:#?}");
}
