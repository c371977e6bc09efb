//! The checks on clients this project did not write: fleets of real retry libraries (Python
//! `backoff`, `stamina`; Node `p-retry`, `ky`, `exponential-backoff`; plain event-loop loops) and
//! the real gRPC clients (grpcio, @grpc/grpc-js, under their own retry and hedging policies) run
//! under the real `harness exec`, each check's verdict against the one the library's own source
//! implies (`calibration/expected.tsv`, reasons and citations in `calibration/RESULTS.md`).
//!
//! The libraries are installed, pinned, by `calibration/install.sh` (`.ci/run` calls it) into
//! `.cache/calibration/`. Without them this test says that it skips, unless
//! `HARNESS_REQUIRE_TOOLS=1` (CI), where a missing install is a failure.
//!
//! It prints every verdict and how long the suite took (`-- --nocapture` shows it): the cases whose
//! verdicts do not rest on timing run several at a time, the others one at a time (run.sh).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

#[test]
fn every_library_gets_the_verdict_its_source_implies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let installed = root.join(".cache/calibration/venv/bin/python").exists()
        && root.join(".cache/calibration/node/node_modules").exists();
    let required = std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() == Ok("1");
    if !installed && !required {
        eprintln!(
            "skipping the real-client calibration: run `bash calibration/install.sh` first (.ci/run does)"
        );
        return;
    }
    let harness = assert_cmd::cargo::cargo_bin("harness");
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(root.join("calibration/run.sh"))
        .env("HARNESS", &harness)
        .current_dir(&root)
        .output()
        .expect("bash runs calibration/run.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    println!(
        "real-client calibration: {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "calibration/run.sh exited {:?}\n{stdout}\n{stderr}",
        out.status.code()
    );
    // Every expected verdict was compared (none skipped or broken).
    let expected = std::fs::read_to_string(root.join("calibration/expected.tsv"))
        .expect("calibration/expected.tsv");
    let rows = expected
        .lines()
        .filter(|l| !l.starts_with('#') && l.split('\t').count() >= 4)
        .count();
    let ok = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(ok, rows, "{stdout}");
}
