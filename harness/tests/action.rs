//! `action.yml`, the composite GitHub Action, run as a runner runs it: each step's script under
//! `bash --noprofile --norc -eo pipefail`, its `env:` with the `${{ … }}` expressions the action
//! uses filled in, `GITHUB_OUTPUT` and `GITHUB_STEP_SUMMARY` as files that are read back after.
//! A stand-in `cargo` (it records its arguments and installs the checkout's `harness`) and
//! `curl` (it serves a release's files, or answers 404) play the network; the harness it runs is
//! the real one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_norway::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is in the workspace")
        .to_path_buf()
}

fn action() -> Value {
    let text = std::fs::read_to_string(root().join("action.yml")).expect("action.yml");
    serde_norway::from_str(&text).expect("action.yml is YAML")
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => String::new(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// A stand-in runner for one use of the action.
struct Runner {
    dir: PathBuf,
    inputs: BTreeMap<String, String>,
    repository: String,
    action_ref: String,
    steps: BTreeMap<String, BTreeMap<String, String>>,
    summary: PathBuf,
    release: Option<PathBuf>,
}

/// What one step did.
struct Step {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Runner {
    fn new(name: &str, inputs: &[(&str, &str)]) -> Runner {
        let dir =
            std::env::temp_dir().join(format!("harness-action-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tools")).expect("a temporary directory");
        std::fs::create_dir_all(dir.join("temp")).expect("a temporary directory");
        // The workspace the user's job checked out: the repository's scenarios.
        std::os::unix::fs::symlink(root().join("scenarios"), dir.join("scenarios"))
            .expect("symlink");
        let action = action();
        let mut all = BTreeMap::new();
        for (k, spec) in action["inputs"].as_mapping().expect("inputs") {
            all.insert(text(k), spec.get("default").map(text).unwrap_or_default());
        }
        for (k, v) in inputs {
            assert!(all.contains_key(*k), "action.yml has no input {k}");
            all.insert(k.to_string(), v.to_string());
        }
        write_tool(
            &dir.join("tools/cargo"),
            &format!(
                r#"#!/usr/bin/env bash
echo "$*" >> "{log}"
root=""
while [ $# -gt 0 ]; do [ "$1" = --root ] && root="$2"; shift; done
mkdir -p "$root/bin"
ln -sf "{harness}" "$root/bin/harness"
"#,
                log = dir.join("cargo.log").display(),
                harness = env!("CARGO_BIN_EXE_harness"),
            ),
        );
        let summary = dir.join("summary.md");
        std::fs::write(&summary, "earlier steps' summary\n").expect("summary file");
        Runner {
            dir,
            inputs: all,
            repository: String::new(),
            action_ref: "main".into(),
            steps: BTreeMap::new(),
            summary,
            release: None,
        }
    }

    /// Serves the files in `dir` as the release's downloads; without it every download is a 404.
    fn serve_release(&mut self, dir: PathBuf) {
        self.release = Some(dir);
    }

    fn curl(&self) {
        let serve = match &self.release {
            Some(d) => format!(r#"cp "{}/$(basename "$url")" "$out""#, d.display()),
            None => "echo \"curl: (22) The requested URL returned error: 404\" >&2; exit 22".into(),
        };
        write_tool(
            &self.dir.join("tools/curl"),
            &format!(
                r#"#!/usr/bin/env bash
out=""; url=""
while [ $# -gt 0 ]; do
  case "$1" in -o) out="$2"; shift ;; http*) url="$1" ;; esac
  shift
done
echo "$url" >> "{log}"
{serve}
"#,
                log = self.dir.join("curl.log").display()
            ),
        );
    }

    fn expression(&self, e: &str) -> String {
        let e = e.trim();
        if let Some(name) = e.strip_prefix("inputs.") {
            return self
                .inputs
                .get(name)
                .cloned()
                .unwrap_or_else(|| panic!("input {name}"));
        }
        if let Some(rest) = e.strip_prefix("steps.") {
            let (id, out) = rest.split_once(".outputs.").expect("steps.ID.outputs.NAME");
            return self
                .steps
                .get(id)
                .and_then(|o| o.get(out))
                .cloned()
                .unwrap_or_default();
        }
        match e {
            "github.action_path" => root().display().to_string(),
            "github.action_repository" => self.repository.clone(),
            "github.action_ref" => self.action_ref.clone(),
            "runner.temp" => self.dir.join("temp").display().to_string(),
            other => panic!("action.yml uses ${{{{ {other} }}}}, which this runner does not know"),
        }
    }

    fn fill(&self, s: &str) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find("${{") {
            out.push_str(&rest[..i]);
            let end = rest[i..].find("}}").expect("an expression ends") + i;
            out.push_str(&self.expression(&rest[i + 3..end]));
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }

    /// Runs the step with this id, as the runner would.
    fn step(&mut self, id: &str) -> Step {
        self.curl();
        let action = action();
        let steps = action["runs"]["steps"].as_sequence().expect("steps");
        let step = steps
            .iter()
            .find(|s| s.get("id").map(text).as_deref() == Some(id))
            .unwrap_or_else(|| panic!("no step {id}"));
        assert_eq!(text(&step["shell"]), "bash");
        let script = text(&step["run"]);
        assert!(
            !script.contains("${{"),
            "step {id}: expressions belong in env:, not in the script"
        );
        let output = self.dir.join(format!("output-{id}"));
        std::fs::write(&output, "").expect("output file");
        let file = self.dir.join(format!("step-{id}.sh"));
        std::fs::write(&file, &script).expect("script file");
        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-eo", "pipefail"])
            .arg(&file)
            .current_dir(&self.dir)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.dir.join("tools").display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("GITHUB_OUTPUT", &output)
            .env("GITHUB_STEP_SUMMARY", &self.summary)
            .env("CI", "true");
        if let Some(env) = step.get("env").and_then(|e| e.as_mapping()) {
            for (k, v) in env {
                cmd.env(text(k), self.fill(&text(v)));
            }
        }
        let out = cmd.output().expect("bash runs");
        let mut outputs = BTreeMap::new();
        for line in std::fs::read_to_string(&output).expect("outputs").lines() {
            let (k, v) = line.split_once('=').expect("NAME=VALUE");
            outputs.insert(k.to_string(), v.to_string());
        }
        self.steps.insert(id.to_string(), outputs);
        Step {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The action's outputs, as the job sees them after the steps.
    fn outputs(&self) -> BTreeMap<String, String> {
        let action = action();
        action["outputs"]
            .as_mapping()
            .expect("outputs")
            .iter()
            .map(|(k, v)| (text(k), self.fill(&text(&v["value"]))))
            .collect()
    }

    fn log(&self, tool: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{tool}.log"))).unwrap_or_default()
    }

    fn summary(&self) -> String {
        std::fs::read_to_string(&self.summary).expect("summary")
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write_tool(path: &Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, script).expect("a tool");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("executable");
}

fn ok(step: &Step, what: &str) {
    assert_eq!(
        step.code, 0,
        "{what}\nstdout:\n{}\nstderr:\n{}",
        step.stdout, step.stderr
    );
}

#[test]
fn a_passing_scenario_passes_with_its_summary_and_outputs() {
    let mut r = Runner::new("pass", &[("scenario", "scenarios/idempotency-burst.yaml")]);
    let install = r.step("install");
    ok(&install, "install");
    // No version: the action's own checkout is built.
    let cargo = r.log("cargo");
    assert!(
        cargo.contains(&format!(
            "install --locked --profile dist --path {}/harness --root ",
            root().display()
        )),
        "{cargo}"
    );
    assert_eq!(r.log("curl"), "", "no version, no release to look for");
    let run = r.step("run");
    ok(&run, "run");
    let out = r.outputs();
    assert_eq!(out["outcome"], "passed");
    assert_eq!(out["exit-code"], "0");
    assert_eq!(out["report-dir"], "harness-report");
    assert_eq!(out["report-json"], "harness-report/report.json");
    assert_eq!(out["junit"], "harness-report/junit.xml");
    assert_eq!(out["html"], "harness-report/report.html");
    assert_eq!(out["summary"], "harness-report/summary.md");
    for f in ["report.json", "junit.xml", "report.html", "summary.md"] {
        assert!(r.dir.join("harness-report").join(f).is_file(), "{f}");
    }
    // The summary is appended to what earlier steps wrote, as the harness wrote it.
    let written =
        std::fs::read_to_string(r.dir.join("harness-report/summary.md")).expect("summary.md");
    assert_eq!(r.summary(), format!("earlier steps' summary\n{written}"));
    assert!(written.contains("idempotency"), "{written}");
}

#[test]
fn a_failing_check_fails_the_step_with_the_harness_exit_code() {
    let mut r = Runner::new(
        "fail",
        &[
            ("scenario", "scenarios/idempotency-race.yaml"),
            ("report-dir", "out"),
            ("args", "--seed 7 --format json"),
        ],
    );
    ok(&r.step("install"), "install");
    let run = r.step("run");
    assert_eq!(
        run.code, 1,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    // `args` reached the harness: --format json printed the report object.
    let printed: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    assert_eq!(printed["seed"], 7);
    let out = r.outputs();
    assert_eq!(out["outcome"], "failed");
    assert_eq!(out["exit-code"], "1");
    assert_eq!(out["junit"], "out/junit.xml");
    let junit = std::fs::read_to_string(r.dir.join("out/junit.xml")).expect("junit.xml");
    assert!(junit.contains("duplicates"), "{junit}");
    assert!(r.summary().contains("duplicates"), "{}", r.summary());
}

#[test]
fn a_target_input_becomes_the_target_flag() {
    // Nothing listens on port 9 of the loopback: the run cannot be carried out (exit 3), and says
    // which URL it could not reach — the one the input gave.
    let mut r = Runner::new(
        "target",
        &[
            ("scenario", "scenarios/idempotency-burst.yaml"),
            ("target", "http://127.0.0.1:9"),
        ],
    );
    ok(&r.step("install"), "install");
    let run = r.step("run");
    assert_eq!(
        run.code, 3,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    assert!(run.stderr.contains("127.0.0.1:9"), "{}", run.stderr);
}

#[test]
fn a_bad_scenario_is_an_error_with_no_report() {
    let mut r = Runner::new("bad", &[("scenario", "scenarios/no-such-file.yaml")]);
    ok(&r.step("install"), "install");
    let run = r.step("run");
    assert_eq!(run.code, 2, "stderr:\n{}", run.stderr);
    assert!(run.stderr.contains("no-such-file.yaml"), "{}", run.stderr);
    let out = r.outputs();
    assert_eq!(out["outcome"], "error");
    assert_eq!(out["exit-code"], "2");
    assert_eq!(out["report-json"], "");
    assert_eq!(out["summary"], "");
    assert!(
        r.summary().contains("exited 2 before writing a report"),
        "{}",
        r.summary()
    );
}

/// A release directory holding `harness-TRIPLE.tar.gz` (a `harness` that runs the checkout's)
/// and its checksum, `good` or not.
fn release(r: &Runner, good: bool) -> PathBuf {
    let dir = r.dir.join("release");
    let stage = r.dir.join("stage");
    std::fs::create_dir_all(&dir).expect("release dir");
    std::fs::create_dir_all(&stage).expect("stage dir");
    write_tool(
        &stage.join("harness"),
        &format!(
            "#!/bin/sh\nexec \"{}\" \"$@\"\n",
            env!("CARGO_BIN_EXE_harness")
        ),
    );
    let asset = "harness-x86_64-unknown-linux-gnu.tar.gz";
    let tar = Command::new("tar")
        .args(["-czf"])
        .arg(dir.join(asset))
        .args(["-C"])
        .arg(&stage)
        .arg("harness")
        .status()
        .expect("tar runs");
    assert!(tar.success());
    let sum = Command::new("sha256sum")
        .arg(dir.join(asset))
        .output()
        .expect("sha256sum runs");
    let mut line = String::from_utf8_lossy(&sum.stdout).into_owned();
    if !good {
        line = format!("{}{}", "0".repeat(64), &line[64..]);
    }
    std::fs::write(dir.join(format!("{asset}.sha256")), line).expect("checksum");
    dir
}

fn on_x86_64_linux() -> bool {
    std::env::consts::OS == "linux" && std::env::consts::ARCH == "x86_64"
}

#[test]
fn a_version_with_a_release_binary_installs_that_binary() {
    if !on_x86_64_linux() {
        eprintln!("skipped: the stand-in release is an x86_64 Linux one");
        return;
    }
    let mut r = Runner::new(
        "release",
        &[
            ("scenario", "scenarios/idempotency-burst.yaml"),
            ("version", "v1.2.3"),
        ],
    );
    r.repository = "example/chaos-harness".into();
    let dir = release(&r, true);
    r.serve_release(dir);
    let install = r.step("install");
    ok(&install, "install");
    assert!(
        install.stdout.contains("the release's binary"),
        "{}",
        install.stdout
    );
    assert_eq!(r.log("cargo"), "", "nothing built");
    assert!(
        r.log("curl").contains(
            "https://github.com/example/chaos-harness/releases/download/v1.2.3/harness-x86_64-unknown-linux-gnu.tar.gz"
        ),
        "{}",
        r.log("curl")
    );
    let bin = &r.steps["install"]["harness"];
    assert!(
        bin.ends_with("/bin/harness") && Path::new(bin).is_file(),
        "{bin}"
    );
    // The installed binary is the one the run step uses.
    ok(&r.step("run"), "run");
    assert_eq!(r.outputs()["outcome"], "passed");
}

#[test]
fn the_release_the_action_was_used_at_is_installed_when_it_has_a_binary() {
    if !on_x86_64_linux() {
        eprintln!("skipped: the stand-in release is an x86_64 Linux one");
        return;
    }
    let mut r = Runner::new(
        "action-ref",
        &[("scenario", "scenarios/idempotency-burst.yaml")],
    );
    r.repository = "example/chaos-harness".into();
    r.action_ref = "v2.0.1".into();
    let dir = release(&r, true);
    r.serve_release(dir);
    let install = r.step("install");
    ok(&install, "install");
    assert!(
        install
            .stdout
            .contains("harness v2.0.1: the release's binary"),
        "{}",
        install.stdout
    );
    assert!(
        r.log("curl").contains("/releases/download/v2.0.1/"),
        "{}",
        r.log("curl")
    );
    assert_eq!(r.log("cargo"), "", "nothing built");
}

#[test]
fn a_release_binary_whose_checksum_differs_is_refused() {
    if !on_x86_64_linux() {
        eprintln!("skipped: the stand-in release is an x86_64 Linux one");
        return;
    }
    let mut r = Runner::new(
        "checksum",
        &[
            ("scenario", "scenarios/idempotency-burst.yaml"),
            ("version", "v1.2.3"),
        ],
    );
    r.repository = "example/chaos-harness".into();
    let dir = release(&r, false);
    r.serve_release(dir);
    let install = r.step("install");
    assert_ne!(install.code, 0, "{}", install.stdout);
    assert!(
        install.stdout.contains("does not match its .sha256"),
        "{}",
        install.stdout
    );
    assert!(!r.dir.join("temp/chaos-harness/bin/harness").exists());
    assert_eq!(r.log("cargo"), "");
}

#[test]
fn a_version_without_a_release_binary_is_built_from_the_repository() {
    let cases = [
        ("v1.2.3", "--tag v1.2.3"),
        ("0123abcd", "--rev 0123abcd"),
        ("main", "--branch main"),
    ];
    for (version, flag) in cases {
        let mut r = Runner::new(
            &format!("source-{version}"),
            &[
                ("scenario", "scenarios/idempotency-burst.yaml"),
                ("version", version),
            ],
        );
        r.repository = "example/chaos-harness".into();
        let install = r.step("install");
        ok(&install, version);
        assert!(
            install.stdout.contains("building from source"),
            "{}",
            install.stdout
        );
        let cargo = r.log("cargo");
        assert!(
            cargo.starts_with(&format!(
                "install --locked --profile dist --git https://github.com/example/chaos-harness {flag} --root "
            )) && cargo.trim_end().ends_with(" harness"),
            "{version}: {cargo}"
        );
    }
}

#[test]
fn a_version_with_no_repository_to_fetch_it_from_is_an_error() {
    let mut r = Runner::new(
        "norepo",
        &[
            ("scenario", "scenarios/idempotency-burst.yaml"),
            ("version", "v1.2.3"),
        ],
    );
    let install = r.step("install");
    assert_eq!(install.code, 2);
    assert!(
        install.stdout.contains("needs the action's repository"),
        "{}",
        install.stdout
    );
    assert_eq!(r.log("cargo"), "");
}
