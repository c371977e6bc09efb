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
//!
//! The second test is the published matrix: `harness conform` on the same libraries (and a Go and
//! a Rust client), by default and as documented, every rule's verdict against the one the
//! library's source implies (`calibration/conform.sh`, `calibration/conform-expected.tsv`).

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

/// The two suites judge timing: run by `cargo test` (threads of one process) they take turns, as
/// nextest runs each alone (.config/nextest.toml).
static ALONE: Mutex<()> = Mutex::new(());

/// Whether the pinned libraries are installed; without them a test skips, unless
/// `HARNESS_REQUIRE_TOOLS=1` (CI), where it goes on and fails.
fn libraries_installed(root: &Path, what: &str) -> bool {
    let installed = root.join(".cache/calibration/venv/bin/python").exists()
        && root.join(".cache/calibration/node/node_modules").exists();
    let required = std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() == Ok("1");
    if !installed && !required {
        eprintln!("skipping {what}: run `bash calibration/install.sh` first (.ci/run does)");
        return false;
    }
    true
}

/// The rows of an expected-verdicts file: lines that are no comment and have four fields or more.
fn expected_rows(root: &Path, file: &str) -> usize {
    std::fs::read_to_string(root.join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .lines()
        .filter(|l| !l.starts_with('#') && l.split('\t').count() >= 4)
        .count()
}

#[test]
fn every_library_gets_the_verdict_its_source_implies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if !libraries_installed(&root, "the real-client calibration") {
        return;
    }
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
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
    let rows = expected_rows(&root, "calibration/expected.tsv");
    let ok = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(ok, rows, "{stdout}");
}

#[test]
fn every_library_gets_the_scorecard_its_source_implies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if !libraries_installed(&root, "the conformance matrix of real clients") {
        return;
    }
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let harness = assert_cmd::cargo::cargo_bin("harness");
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(root.join("calibration/conform.sh"))
        .env("HARNESS", &harness)
        .current_dir(&root)
        .output()
        .expect("bash runs calibration/conform.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    println!(
        "conformance matrix: {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "calibration/conform.sh exited {:?}\n{stdout}\n{stderr}",
        out.status.code()
    );
    // Every rule of every configuration was compared (none skipped or broken).
    let rows = expected_rows(&root, "calibration/conform-expected.tsv");
    let ok = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(ok, rows, "{stdout}");
}
