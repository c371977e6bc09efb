//! What several integration tests share: the executables of the workspace's examples (the
//! webhooks crate's tests include this file too).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The executable of example `name` (any workspace crate's), built by cargo if it is not up to
/// date, once per test process.
///
/// `CARGO_BIN_EXE_*` exists only for `[[bin]]` targets, and `cargo test --test X` builds no
/// example (a plain `cargo test` builds its own crate's). So the test asks cargo: `cargo build
/// --example NAME --message-format=json` is a no-op when the example is up to date, and its
/// `compiler-artifact` message names the executable wherever the target directory and profile
/// put it (`CARGO_TARGET_DIR`, `build.target-dir`, `--release`) — no guessed paths. `env!("CARGO")`
/// is the cargo running this test, and the build lock is free while tests run.
pub fn example_exe(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    built
        .entry(name.to_string())
        .or_insert_with(|| build(name))
        .clone()
}

fn build(name: &str) -> PathBuf {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "--quiet",
        // The whole workspace, as `cargo test --workspace` resolves its features: then the
        // example that build made is fresh, where `-p` would build its crates again.
        "--workspace",
        "--example",
        name,
        "--message-format=json",
    ]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    without_crate_env(&mut cmd);
    let out = cmd.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "building example {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reports example {name}'s executable"))
}

/// Removes what cargo sets for a crate it builds or tests (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`,
/// …) from the environment `cmd` inherits. Build scripts watch some of them (ring's, through
/// `rerun-if-env-changed`, watches `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME`): a cargo started
/// with a test's values would find ring stale, build it and all that depends on it again, and
/// leave it stale for the next plain cargo command.
fn without_crate_env(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let per_crate = name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
            || matches!(
                name,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_MANIFEST_LINKS"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
                    | "OUT_DIR"
            );
        if per_crate {
            cmd.env_remove(name);
        }
    }
}

/// The checks a scenario's header states as inconclusive, with why: `# Inconclusive: `name`
/// (why); `other` (why)`, the sentence going on over the comment lines that follow it (as the
/// `# Expected:` sentence does).
#[allow(dead_code)]
pub fn stated_inconclusive(header: &str) -> Vec<String> {
    stated(header, "# Inconclusive:")
}

/// The checks a scenario's header says may be inconclusive, with why: `# May be inconclusive:
/// `name` (why)` — a check whose data depends on what a correct client chose to do (a breaker
/// that stops the retries a check would judge), decided in some runs and not in others.
#[allow(dead_code)]
pub fn possibly_inconclusive(header: &str) -> Vec<String> {
    stated(header, "# May be inconclusive:")
}

fn stated(header: &str, heading: &str) -> Vec<String> {
    let mut lines = header.lines().skip_while(|l| !l.starts_with(heading));
    let mut stated = String::new();
    if let Some(first) = lines.next() {
        stated.push_str(first);
        for l in lines {
            let body = l.trim_start_matches('#').trim();
            let heading = body.split_once(':').is_some_and(|(h, _)| !h.contains(' '));
            if !l.starts_with("# ") || body.is_empty() || heading {
                break;
            }
            stated.push(' ');
            stated.push_str(body);
        }
    }
    stated
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_string)
        .collect()
}

/// The inconclusive census of one run: every check `report` left inconclusive, with its reason,
/// must be stated in the scenario's `header` (see [`stated_inconclusive`], or
/// [`possibly_inconclusive`]), and every check stated inconclusive there must be. Err lists what disagrees, each with the check's summary.
#[allow(dead_code)]
pub fn inconclusive_census(
    name: &str,
    header: &str,
    report: &serde_json::Value,
) -> Result<(), String> {
    let stated = stated_inconclusive(header);
    let possibly = possibly_inconclusive(header);
    let checks = report["checks"].as_array().cloned().unwrap_or_default();
    let inconclusive: Vec<(String, String)> = checks
        .iter()
        .filter(|c| c["verdict"] == "inconclusive")
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("?").to_string(),
                c["summary"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    for (check, why) in &inconclusive {
        println!("{name}: {check} inconclusive: {why}");
    }
    let mut wrong = Vec::new();
    for (check, why) in &inconclusive {
        if !stated.contains(check) && !possibly.contains(check) {
            wrong.push(format!(
                "`{check}` is inconclusive but the header does not say so \
                 (`# Inconclusive: `{check}` (why)`): {why}"
            ));
        }
    }
    for check in &stated {
        if !inconclusive.iter().any(|(c, _)| c == check) {
            let got = checks
                .iter()
                .find(|c| c["name"] == check.as_str())
                .map(|c| format!("{}: {}", c["verdict"], c["summary"]))
                .unwrap_or_else(|| "not run".into());
            wrong.push(format!(
                "the header states `{check}` inconclusive, but it is {got}"
            ));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: {}", wrong.join("\n")))
    }
}
