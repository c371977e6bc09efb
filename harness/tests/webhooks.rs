//! The webhook sender end to end: `harness exec` and `harness deliver` playing a provider against
//! the example consumer (`webhooks/examples/consumer.rs`, a real process with a real SQLite
//! system of record) over real sockets, and each delivery check failing on the consumer that gets
//! its part wrong and passing on the one that gets it right.
//!
//! The `scenarios/webhooks-*.yaml` files are run as their headers say: the consumer's arguments
//! are read from the `# Run:` lines (its `--bind` replaced by a free port, given to the harness
//! as `--target`), the verdict from the `# Expected:` line.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

mod support;

/// The example consumer's executable (`webhooks/examples/consumer.rs`).
fn consumer_exe() -> PathBuf {
    support::example_exe("consumer")
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("an address").to_string()
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(format!("{name}.yaml"))
}

/// Words as a shell splits them (double quotes group, nothing else is special here).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut any) = (false, false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

/// The consumer's arguments on the scenario's `# Run:` lines, without its `--bind`.
fn consumer_args(text: &str) -> Vec<String> {
    let (all, after) = text
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| words(l.trim_start_matches('#')))
        .find_map(|w| {
            let at = w.iter().position(|w| w.ends_with("examples/consumer"))?;
            Some((w, at))
        })
        .expect("the Run lines start the example consumer");
    let mut args = Vec::new();
    let mut rest = all[after + 1..].iter();
    while let Some(w) = rest.next() {
        if w == "--bind" {
            rest.next();
        } else {
            args.push(w.clone());
        }
    }
    args
}

/// (expected to pass, the checks named on the Expected line as failing).
fn expectation(text: &str) -> (bool, Vec<String>) {
    let expected: String = text
        .lines()
        .skip_while(|l| !l.starts_with("# Expected:"))
        .take_while(|l| l.starts_with('#'))
        .take_while(|l| !l.trim_start_matches('#').trim().is_empty())
        .map(|l| l.trim_start_matches('#'))
        .collect::<Vec<_>>()
        .join(" ");
    let pass = expected.contains("PASS");
    assert!(pass != expected.contains("FAIL"), "{expected}");
    let names = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    (pass, names)
}

/// A harness command's exit code and its JSON report.
fn report_of(out: std::process::Output) -> (Option<i32>, Value) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{e}\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

/// Each check's (verdict, summary).
fn verdicts(report: &Value) -> Vec<(String, String, String)> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                c["verdict"].as_str().unwrap_or_default().to_string(),
                c["summary"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {}", report["checks"]))
}

/// Runs `scenarios/NAME.yaml` under `harness exec` with the consumer its header names, and
/// holds it to its Expected line; the report, for more.
fn run_scenario(name: &str) -> Value {
    let path = scenario(name);
    let text = std::fs::read_to_string(&path).expect("the scenario");
    assert!(text.starts_with("# ") && text.contains("# Run:"), "{name}");
    let (pass, failing) = expectation(&text);
    let addr = free_addr();
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("exec")
        .arg(&path)
        .args(["--target", &format!("http://{addr}")])
        .args(["--format", "json", "--"])
        .arg(consumer_exe())
        .args(["--bind", &addr])
        .args(consumer_args(&text))
        .output()
        .expect("harness runs");
    let (code, report) = report_of(out);
    let v = verdicts(&report);
    if pass {
        assert_eq!(code, Some(0), "{name}: {v:#?}");
        // Every check judged and passed: none merely found nothing to judge.
        for (check, verdict, summary) in &v {
            assert_eq!(verdict, "pass", "{name}: {check}: {summary}");
        }
    } else {
        assert_eq!(code, Some(1), "{name}: {v:#?}");
        assert!(
            !failing.is_empty(),
            "{name}: the Expected line names checks"
        );
        for n in &failing {
            assert!(
                v.iter().any(|(c, verdict, _)| c == n && verdict == "fail"),
                "{name}: `{n}` should fail: {v:#?}"
            );
        }
    }
    assert!(
        report["requests"]["sent"].as_u64().unwrap_or(0) > 0,
        "{name}: deliveries were sent"
    );
    report
}

#[test]
fn every_check_passes_on_the_unique_consumer() {
    let report = run_scenario("webhooks-unique");
    let phase = &report["phases"][0]["metrics"];
    // The chaos the checks judged really happened, and every attempt reached the journal.
    for figure in [
        "duplicated_events",
        "forged_deliveries",
        "reversed_subjects",
        "answers_dropped",
        "redeliveries",
    ] {
        assert!(phase[figure].as_u64().unwrap_or(0) > 0, "{figure}: {phase}");
    }
    assert_eq!(
        check(&report, "forged_rejected")["metrics"]["forged"],
        phase["forged_deliveries"]
    );
    assert_eq!(
        check(&report, "effects_once")["metrics"]["events"],
        phase["events"]
    );
    assert_eq!(report["requests"]["sent"], phase["deliveries"]);
}

#[test]
fn effects_once_and_ordering_fail_on_the_naive_consumer() {
    let report = run_scenario("webhooks-naive");
    // It verifies signatures: the forgeries were refused.
    assert_eq!(check(&report, "forged_rejected")["verdict"], "pass");
}

#[test]
fn effects_once_fails_on_select_then_insert_under_concurrent_copies() {
    run_scenario("webhooks-select-then-insert");
}

#[test]
fn forged_rejected_fails_on_the_consumer_that_does_not_verify() {
    let report = run_scenario("webhooks-no-verify");
    assert!(
        check(&report, "forged_rejected")["metrics"]["took_effect"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "the forgeries took effect in its database"
    );
}

#[test]
fn duplicate_ack_fails_on_the_consumer_that_answers_500_to_a_duplicate() {
    let report = run_scenario("webhooks-dup-500");
    // It deduplicates: the effects are right, the answers are not.
    assert_eq!(check(&report, "effects_once")["verdict"], "pass");
}

#[test]
fn ack_latency_fails_on_the_consumer_that_works_before_it_answers() {
    run_scenario("webhooks-slow-ack");
}

/// A consumer process on a free port; killed when dropped.
struct Consumer {
    child: Child,
    url: String,
}

impl Consumer {
    fn start(style: &str, secret: &str, mode: &str) -> Consumer {
        let mut child = Command::new(consumer_exe())
            .args([
                "--bind",
                "127.0.0.1:0",
                "--style",
                style,
                "--secret",
                secret,
            ])
            .args(["--mode", mode])
            .stdout(Stdio::piped())
            .spawn()
            .expect("the consumer starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("its stdout"))
            .read_line(&mut line)
            .expect("it says where it listens");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("{line:?}"))
            .to_string();
        Consumer { child, url }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn deliver(url: &str, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("deliver")
        .arg(url)
        .args(["--format", "json"])
        .args(extra)
        .output()
        .expect("harness runs")
}

const STRIPE_SECRET: &str = "whsec_cliExampleSecret";

const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn chaos() -> Vec<&'static str> {
    vec![
        "--style",
        "stripe",
        "--secret",
        STRIPE_SECRET,
        "--events",
        "30",
        "--duplicates",
        "0.3",
        "--reorder",
        "0.5",
        "--forged",
        "0.2",
        "--lost-ack",
        "0.1",
        "--redeliver",
        "100ms,200ms,400ms",
        "--verify",
        "/effects/{event_id}",
        "--verify-state",
        "/state/{subject}",
        "--seed",
        "9",
    ]
}

#[test]
fn harness_deliver_gates_on_the_consumer() {
    let good = Consumer::start("stripe", STRIPE_SECRET, "unique");
    let (code, report) = report_of(deliver(&format!("{}/webhook", good.url), &chaos()));
    let v = verdicts(&report);
    assert_eq!(code, Some(0), "{v:#?}");
    let names: Vec<&str> = v.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "effects_once",
            "forged_rejected",
            "duplicate_ack",
            "ack_latency",
            "ordering"
        ]
    );
    assert!(v.iter().all(|(_, verdict, _)| verdict == "pass"), "{v:#?}");

    let bad = Consumer::start("stripe", STRIPE_SECRET, "naive");
    let (code, report) = report_of(deliver(&format!("{}/webhook", bad.url), &chaos()));
    assert_eq!(code, Some(1), "{:#?}", verdicts(&report));
    for name in ["effects_once", "ordering"] {
        assert_eq!(check(&report, name)["verdict"], "fail", "{name}");
    }
}

/// Over HTTP/2 (prior knowledge), every copy of a duplicated event goes out in one packet
/// (`single-packet`): a consumer that deduplicates under a UNIQUE constraint takes each event
/// once, one that looks the id up before it writes takes the copies that raced it.
#[test]
fn harness_deliver_over_http2_releases_copies_in_one_packet() {
    let args = [
        "--http2",
        "--style",
        "standard-webhooks",
        "--secret",
        SW_SECRET,
        "--events",
        "8",
        "--duplicates",
        "1",
        "--copies",
        "4",
        "--sync",
        "single-packet",
        "--verify",
        "/effects/{event_id}",
    ];
    let good = Consumer::start("standard-webhooks", SW_SECRET, "unique");
    let (code, report) = report_of(deliver(&format!("{}/webhook", good.url), &args));
    let v = verdicts(&report);
    assert_eq!(code, Some(0), "{v:#?}");
    assert_eq!(check(&report, "effects_once")["verdict"], "pass", "{v:#?}");
    let m = &report["phases"][0]["metrics"];
    assert_eq!(m["sync"], "single-packet", "{m:#}");
    assert_eq!(m["duplicated_events"], 8, "{m:#}");
    assert_eq!(m["acknowledged_copies"], 32, "{m:#}");

    let racy = Consumer::start("standard-webhooks", SW_SECRET, "select-then-insert");
    let (code, report) = report_of(deliver(&format!("{}/webhook", racy.url), &args));
    assert_eq!(code, Some(1), "{:#?}", verdicts(&report));
    assert_eq!(check(&report, "effects_once")["verdict"], "fail");
}

#[test]
fn harness_deliver_exit_codes_for_bad_input_and_an_unreachable_consumer() {
    let url = format!("http://{}/webhook", free_addr());
    let out = deliver(
        &url,
        &[
            "--style",
            "stripe",
            "--secret",
            "whsec_x",
            "--duplicates",
            "1.5",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--duplicates"), "{err}");
    let out = deliver(&url, &["--style", "paypal", "--secret", "x"]);
    assert_eq!(out.status.code(), Some(2));
    // Nothing listens on the port.
    let out = deliver(
        &url,
        &["--style", "github", "--secret", "x", "--events", "3"],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_run_lines_are_read_as_a_shell_would() {
    assert_eq!(
        consumer_args(
            "#     target/debug/examples/consumer --bind 127.0.0.1:1 --secret \"It's a Secret\" --mode x\n"
        ),
        ["--secret", "It's a Secret", "--mode", "x"]
    );
    let (pass, names) = expectation("# Expected: FAIL (exit 1): `a` and\n# `b_c`.\nname: x\n");
    assert!(!pass);
    assert_eq!(names, ["a", "b_c"]);
}
