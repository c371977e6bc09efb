//! The checks on clients this project did not write: fleets of real retry libraries (Python
//! `backoff`, `stamina`; Node `p-retry`, `ky`, `exponential-backoff`; plain event-loop loops) run
//! under the real `harness exec`, each check's verdict against the one the library's own source
//! implies (`calibration/expected.tsv`, reasons and citations in `calibration/RESULTS.md`).
//!
//! The libraries are installed, pinned, by `calibration/install.sh` (`.ci/run` calls it) into
//! `.cache/calibration/`. Without them this test says that it skips, unless
//! `HARNESS_REQUIRE_TOOLS=1` (CI), where a missing install is a failure.

use std::path::Path;
use std::process::Command;

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
    let out = Command::new("bash")
        .arg(root.join("calibration/run.sh"))
        .env("HARNESS", &harness)
        .current_dir(&root)
        .output()
        .expect("bash runs calibration/run.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
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
