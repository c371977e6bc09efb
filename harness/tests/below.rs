//! The experiments below HTTP (`scenarios/below-*.yaml`) run as their headers say: the service
//! of the `# Run:` lines (`calibration/below/`: psycopg on real PostgreSQL, redis-py on a real
//! Redis) started first, its `--bind` replaced by a free port that `harness run` is given as
//! `--upstream`, then `harness run` with the fault server in front of the service and its
//! protocol-aware proxy between the service and its database or cache; the verdict held to the
//! `# Expected:` line, the inconclusive census to the header, and the report's statements row to
//! what the proxy did.
//!
//! Needs PostgreSQL (`FAULT_SERVER_TEST_DATABASE_URL` or `DATABASE_URL`), Redis
//! (`FAULT_SERVER_TEST_REDIS_URL` or `REDIS_URL`) and the services' Python
//! (`bash calibration/below/install.sh`); a test says it skips when one is missing, and fails
//! under `HARNESS_REQUIRE_TOOLS=1`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[allow(dead_code)]
mod support;

/// Longest a scenario may take, service start and verify step included.
const SCENARIO_LIMIT: Duration = Duration::from_secs(90);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Says why a test cannot run, or fails it under `HARNESS_REQUIRE_TOOLS=1`.
fn missing(test: &str, what: &str) {
    assert!(
        std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "{test}: {what}, and HARNESS_REQUIRE_TOOLS=1 requires it"
    );
    eprintln!("{test}: skipped: {what}");
}

/// The first of these environment variables that is set.
fn env_url(test: &str, names: &[&str], how: &str) -> Option<String> {
    let url = names.iter().find_map(|n| std::env::var(n).ok());
    if url.is_none() {
        missing(test, &format!("none of {names:?} is set ({how})"));
    }
    url
}

/// The services' Python (`calibration/below/install.sh`).
fn python(test: &str) -> Option<PathBuf> {
    let p = root().join(".cache/calibration/below/venv/bin/python");
    if p.exists() {
        return Some(p);
    }
    missing(
        test,
        "the services' venv is not installed (bash calibration/below/install.sh)",
    );
    None
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("an address").to_string()
}

/// The service of the `# Run:` lines: its script and its arguments, without `--bind` (the lines
/// joined where they end in `\`, the command ending at `&`).
fn service_command(text: &str) -> (String, Vec<String>) {
    let mut joined = String::new();
    for l in text.lines().filter_map(|l| l.strip_prefix('#')) {
        match l.trim_end().strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                joined.push(' ');
            }
            None => {
                joined.push_str(l);
                joined.push('\n');
            }
        }
    }
    let line = joined
        .lines()
        .find(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.ends_with("/python"))
        })
        .expect("the Run lines start a service of calibration/below/ with the venv's python");
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.starts_with("calibration/below/") && w.ends_with(".py"))
        .expect("a script");
    let script = words[at].to_string();
    let mut args = Vec::new();
    let mut rest = words[at + 1..].iter().take_while(|w| **w != "&");
    while let Some(w) = rest.next() {
        if *w == "--bind" {
            rest.next();
        } else {
            args.push((*w).to_string());
        }
    }
    (script, args)
}

/// (expected to pass, the checks named on the Expected lines).
fn expectation(text: &str) -> (bool, Vec<String>) {
    let expected: String = text
        .lines()
        .skip_while(|l| !l.starts_with("# Expected:"))
        .take_while(|l| l.starts_with("# ") && !l.starts_with("# See "))
        .take_while(|l| {
            !l.starts_with("# Inconclusive:") && !l.starts_with("# May be inconclusive:")
        })
        .map(|l| l.trim_start_matches('#'))
        .collect::<Vec<_>>()
        .join(" ");
    let pass = expected.contains("PASS");
    assert!(pass != expected.contains("FAIL"), "{expected}");
    let names = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_string)
        .collect();
    (pass, names)
}

/// A service of `calibration/below/`, stopped when dropped.
struct Service(Child);

impl Service {
    fn start(
        python: &Path,
        script: &str,
        args: &[String],
        bind: &str,
        env: &[(&str, &str)],
    ) -> Service {
        let mut child = Command::new(python)
            .arg(root().join(script))
            .args(["--bind", bind])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{script}: {e}"));
        if let Some(mut err) = child.stderr.take() {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = err.read_to_string(&mut s);
                eprint!("{s}");
            });
        }
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout is piped");
        BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("{script}: {e}"));
        assert!(
            line.starts_with("listening on "),
            "{script}: unexpected first line {line:?}"
        );
        Service(child)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `harness run` with these arguments and environment, stopped after [`SCENARIO_LIMIT`]: its exit
/// code and its JSON report.
fn harness_run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("run")
        .args(args)
        .args(["--format", "json"])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("harness starts");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let give_up = Instant::now() + SCENARIO_LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("harness runs") {
            break s;
        }
        if Instant::now() > give_up {
            let _ = child.kill();
            let _ = child.wait();
            panic!("harness run {args:?} took more than {SCENARIO_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}\nstdout: {stdout}\nstderr: {stderr}"));
    (status.code(), report)
}

/// Runs `scenarios/NAME.yaml` as its header says and holds it to its Expected line; the report,
/// for more.
fn run(name: &str) -> Option<Value> {
    let py = python(name)?;
    let path = root().join("scenarios").join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).expect("the scenario");
    assert!(text.starts_with("# ") && text.contains("# Run:"), "{name}");
    let (script, args) = service_command(&text);
    let (var, url) = if script.ends_with("cache.py") {
        let url = env_url(
            name,
            &["FAULT_SERVER_TEST_REDIS_URL", "REDIS_URL"],
            "`bash .ci/redis` prints one",
        )?;
        ("REDIS_URL", url)
    } else {
        let url = env_url(
            name,
            &["FAULT_SERVER_TEST_DATABASE_URL", "DATABASE_URL"],
            "`bash .ci/postgres` prints one",
        )?;
        ("DATABASE_URL", url)
    };
    let env = [(var, url.as_str())];
    let (pass, failing) = expectation(&text);
    let addr = free_addr();
    let _service = Service::start(&py, &script, &args, &addr, &env);
    let upstream = format!("http://{addr}");
    let (code, report) = harness_run(
        &[
            path.to_str().expect("a UTF-8 path"),
            "--upstream",
            &upstream,
        ],
        &env,
    );
    let verdicts: Vec<String> = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| format!("{}: {} — {}", c["name"], c["verdict"], c["summary"]))
        .collect();
    if let Err(e) = support::inconclusive_census(name, &text, &report) {
        panic!("{e}");
    }
    if pass {
        assert_eq!(code, Some(0), "{name}: {verdicts:#?}");
    } else {
        assert_eq!(code, Some(1), "{name}: {verdicts:#?}");
        assert!(
            !failing.is_empty(),
            "{name}: the Expected line names checks"
        );
        for n in &failing {
            assert!(
                report["checks"]
                    .as_array()
                    .expect("checks")
                    .iter()
                    .any(|c| c["name"] == n.as_str() && c["verdict"] == "fail"),
                "{name}: `{n}` should fail: {verdicts:#?}"
            );
        }
    }
    assert!(
        report["requests"]["sent"].as_u64().unwrap_or(0) > 0,
        "{name}: requests were sent to the service: {report}"
    );
    Some(report)
}

/// The report's statements row of proxy `proxy`.
fn statements<'a>(report: &'a Value, proxy: &str) -> &'a Value {
    report["statements"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["proxy"] == proxy))
        .unwrap_or_else(|| panic!("no statements row for {proxy}: {}", report["statements"]))
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no check {name}: {}", report["checks"]))
}

#[test]
fn db_retry_passes_the_service_that_runs_the_whole_transaction_again() {
    let Some(report) = run("below-db-retry-whole") else {
        return;
    };
    let db = statements(&report, "db");
    assert_eq!(db["protocol"], "postgres");
    assert_eq!(db["by_error"]["40001"], 3, "{db}");
    assert_eq!(db["by_fault"]["error"], 3, "{db}");
    assert!(db["committed"].as_u64().unwrap_or(0) >= 100, "{db}");
    let m = &check(&report, "db_retry")["metrics"];
    assert_eq!(m["retried_whole"], 3, "{m}");
}

#[test]
fn db_retry_fails_the_service_that_gives_up() {
    let Some(report) = run("below-db-retry-none") else {
        return;
    };
    let m = &check(&report, "db_retry")["metrics"];
    assert_eq!(m["not_retried"], 3, "{m}");
    assert_eq!(
        report["requests"]["by_status"]["503"], 3,
        "{}",
        report["requests"]
    );
}

#[test]
fn an_ambiguous_commit_duplicates_the_order_of_the_service_that_inserts_again() {
    let Some(report) = run("below-ambiguous-commit-reinsert") else {
        return;
    };
    let db = statements(&report, "db");
    let ambiguous = db["committed_unanswered"].as_u64().unwrap_or(0);
    assert!(ambiguous >= 10, "every fifth COMMIT of at least 60: {db}");
    assert_eq!(db["by_fault"]["drop"].as_u64(), Some(ambiguous), "{db}");
    // The journal saw one 201 per key; the system of record holds two orders for some.
    let m = &check(&report, "duplicates")["metrics"];
    assert_eq!(m["duplicate_keys"], 0, "{m}");
    assert!(
        m["verified_duplicate_keys"].as_u64().unwrap_or(0) >= 1,
        "{m}"
    );
    let db_retry = check(&report, "db_retry");
    assert_eq!(db_retry["verdict"], "pass", "{db_retry:#}");
}

#[test]
fn an_ambiguous_commit_leaves_one_order_with_the_service_that_keys_the_row() {
    let Some(report) = run("below-ambiguous-commit-keyed") else {
        return;
    };
    let db = statements(&report, "db");
    assert!(
        db["committed_unanswered"].as_u64().unwrap_or(0) >= 10,
        "{db}"
    );
    // The retry's INSERT found the order the lost COMMIT had written.
    assert!(db["by_error"]["23505"].as_u64().unwrap_or(0) >= 10, "{db}");
    let m = &check(&report, "db_retry")["metrics"];
    assert!(m["permanent_failures"].as_u64().unwrap_or(0) >= 10, "{m}");
    assert_eq!(m["permanent_retried"], 0, "{m}");
}

#[test]
fn cache_fallback_passes_the_service_that_treats_a_failing_cache_as_a_miss() {
    let Some(report) = run("below-cache-miss") else {
        return;
    };
    let cache = statements(&report, "cache");
    assert_eq!(cache["protocol"], "redis");
    assert!(
        cache["by_error"]["LOADING"].as_u64().unwrap_or(0) >= 10,
        "{cache}"
    );
    assert!(
        cache["by_error"]["READONLY"].as_u64().unwrap_or(0) >= 1,
        "{cache}"
    );
    assert_eq!(
        report["requests"]["by_status"]["200"], 80,
        "{}",
        report["requests"]
    );
}

#[test]
fn cache_fallback_fails_the_service_that_fails_its_request() {
    let Some(report) = run("below-cache-fail") else {
        return;
    };
    let m = &check(&report, "cache_fallback")["metrics"];
    assert!(m["failed"].as_u64().unwrap_or(0) >= 10, "{m}");
}

#[test]
fn the_run_lines_name_the_service_and_its_arguments() {
    let text = "# Run:\n#   export DATABASE_URL=postgres://h@x/h\n#   venv/bin/python calibration/below/orders.py --bind 127.0.0.1:1 \\\n#     --via 127.0.0.1:2 --retry whole &\n#   cargo run -p harness -- run x.yaml\n";
    let (script, args) = service_command(text);
    assert_eq!(script, "calibration/below/orders.py");
    assert_eq!(args, ["--via", "127.0.0.1:2", "--retry", "whole"]);
    let (pass, names) = expectation(
        "# Expected: FAIL (exit 1): `duplicates` finds\n# more. (db_retry passes)\n# See x.\n",
    );
    assert!(!pass);
    assert_eq!(names, ["duplicates"]);
}
