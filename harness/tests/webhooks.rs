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

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scenario(name: &str) -> PathBuf {
    root().join("scenarios").join(format!("{name}.yaml"))
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
    if let Err(e) = support::inconclusive_census(name, &text, &report) {
        panic!("{e}");
    }
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
    /// The example consumer in `mode`.
    fn start(style: &str, secret: &str, mode: &str) -> Consumer {
        let mut cmd = Command::new(consumer_exe());
        cmd.args([
            "--bind",
            "127.0.0.1:0",
            "--style",
            style,
            "--secret",
            secret,
        ])
        .args(["--mode", mode]);
        Consumer::spawn(cmd)
    }

    /// The calibration consumer (`calibration/webhooks/consumer.py`) verifying with `library`,
    /// in `mode`, its SQLite database in `dir`.
    fn python(python: &Path, library: &str, mode: &str, secret: &str, dir: &Path) -> Consumer {
        let mut cmd = Command::new(python);
        cmd.arg(root().join("calibration/webhooks/consumer.py"))
            .args(["--library", library, "--mode", mode, "--secret", secret])
            .arg("--db")
            .arg(dir.join(format!("{library}-{mode}.sqlite")));
        Consumer::spawn(cmd)
    }

    /// Starts `cmd`, a consumer that prints `listening on URL` first.
    fn spawn(mut cmd: Command) -> Consumer {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
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
/// (`--spacing together`, `single-packet`): a consumer that deduplicates under a UNIQUE constraint takes each event
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
        "--spacing",
        "together",
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

/// The calibration libraries' Python (`calibration/install.sh`), or `None` (after saying why)
/// when they are not installed, unless `HARNESS_REQUIRE_TOOLS=1`.
fn calibration_python() -> Option<PathBuf> {
    let python = root().join(".cache/calibration/venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "the calibration libraries are not installed and HARNESS_REQUIRE_TOOLS=1: run \
         `bash calibration/install.sh`"
    );
    eprintln!(
        "skipping the provider libraries' consumers: run `bash calibration/install.sh` first"
    );
    None
}

/// `harness deliver` as a user first runs it against duplicates: every value but the style,
/// the secret and the shares at its default (100 events, two copies, the default spacing and
/// redelivery, seed 1).
fn default_duplicates(style: &'static str, secret: &'static str) -> Vec<&'static str> {
    vec![
        "--style",
        style,
        "--secret",
        secret,
        "--duplicates",
        "0.5",
        "--forged",
        "0.2",
        "--verify",
        "/effects/{event_id}",
    ]
}

/// The libraries' consumers: (library, style, secret).
const LIBRARIES: [(&str, &str, &str); 3] = [
    ("svix", "standard-webhooks", SW_SECRET),
    ("standardwebhooks", "standard-webhooks", SW_SECRET),
    ("stripe", "stripe", STRIPE_SECRET),
];

/// A default `--duplicates` run decides `duplicate_ack` against consumers written with the
/// providers' own verification libraries (svix, standardwebhooks, stripe) that deduplicate under
/// a UNIQUE constraint: part of the copies go after the first was acknowledged, as a provider's
/// redelivery does, and each of those is judged; the copies sent together still race.
#[test]
fn a_default_duplicates_run_decides_against_provider_library_consumers() {
    let Some(python) = calibration_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (library, style, secret) in LIBRARIES {
        let c = Consumer::python(&python, library, "correct", secret, dir.path());
        let url = format!("{}/webhook", c.url);
        let (code, report) = report_of(deliver(&url, &default_duplicates(style, secret)));
        let v = verdicts(&report);
        assert_eq!(code, Some(0), "{library}: {v:#?}");
        for name in [
            "effects_once",
            "forged_rejected",
            "duplicate_ack",
            "ack_latency",
        ] {
            assert_eq!(check(&report, name)["verdict"], "pass", "{library}: {v:#?}");
        }
        let m = &report["phases"][0]["metrics"];
        let (together, after) = (
            m["copies_together"].as_u64().unwrap_or(0),
            m["copies_after_ack"].as_u64().unwrap_or(0),
        );
        assert!(together > 0 && after > 0, "{library}: {m:#}");
        assert_eq!(m["spacing"], "mixed", "{library}: {m:#}");
        let extra = m["genuine_copies"].as_u64().unwrap_or(0) - m["events"].as_u64().unwrap_or(0);
        assert_eq!(together + after, extra, "{library}: {m:#}");
        // Every copy sent after the acknowledgement was judged (a copy of a burst that left
        // late, after the other's answer, is judged too), and answered 2xx.
        let dup = &check(&report, "duplicate_ack")["metrics"];
        let judged = dup["redeliveries"].as_u64().unwrap_or(0);
        assert!(judged >= after, "{library}: {dup:#}");
        assert_eq!(dup["acknowledged"], judged, "{library}: {dup:#}");
        // Nothing was reordered: the check that cannot decide says which flag would let it.
        let ordering = check(&report, "ordering");
        assert_eq!(ordering["verdict"], "inconclusive");
        let why = ordering["summary"].as_str().unwrap_or_default();
        assert!(why.contains("give `--reorder F`"), "{why}");
    }
}

/// The same default run against the same library's consumer when it gets duplicates wrong:
/// `naive` takes the effect of every copy (`effects_once` fails, its duplicates acknowledged:
/// `duplicate_ack` passes), `dup-409` answers a copy of a processed event 409 — caught with no
/// redelivery at all, by the copies sent after the acknowledgement alone.
#[test]
fn a_default_duplicates_run_fails_provider_library_consumers_that_get_duplicates_wrong() {
    let Some(python) = calibration_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (library, style, secret) = LIBRARIES[2];
    let naive = Consumer::python(&python, library, "naive", secret, dir.path());
    let (code, report) = report_of(deliver(
        &format!("{}/webhook", naive.url),
        &default_duplicates(style, secret),
    ));
    let v = verdicts(&report);
    assert_eq!(code, Some(1), "{v:#?}");
    let effects = check(&report, "effects_once");
    assert_eq!(effects["verdict"], "fail", "{v:#?}");
    let m = &report["phases"][0]["metrics"];
    // Every duplicated event, whichever way its copies went, took an effect per copy.
    assert_eq!(
        effects["metrics"]["duplicated"], m["duplicated_events"],
        "{m:#}"
    );
    assert_eq!(check(&report, "duplicate_ack")["verdict"], "pass", "{v:#?}");

    let (library, style, secret) = LIBRARIES[0];
    let conflict = Consumer::python(&python, library, "dup-409", secret, dir.path());
    let mut args = default_duplicates(style, secret);
    args.extend(["--redeliver", "none"]);
    let (code, report) = report_of(deliver(&format!("{}/webhook", conflict.url), &args));
    let v = verdicts(&report);
    assert_eq!(code, Some(1), "{v:#?}");
    let dup = check(&report, "duplicate_ack");
    assert_eq!(dup["verdict"], "fail", "{v:#?}");
    let why = dup["summary"].as_str().unwrap_or_default();
    assert!(
        why.contains("a copy delivered after that got a 409"),
        "{why}"
    );
    let after = report["phases"][0]["metrics"]["copies_after_ack"]
        .as_u64()
        .unwrap_or(0);
    let conflicts = dup["metrics"]["by_status_409"].as_u64().unwrap_or(0);
    assert!(after > 0 && conflicts >= after, "{dup:#}");
    assert_eq!(check(&report, "effects_once")["verdict"], "pass", "{v:#?}");
}

/// A check that cannot decide says which flag would let it: a bare run (no shares, no verify
/// URLs) decides `ack_latency` alone, and each other check names its flag; copies sent only
/// together leave `duplicate_ack` nothing to judge, and it names `--spacing`.
#[test]
fn an_inconclusive_delivery_check_names_the_flag_that_would_decide_it() {
    let c = Consumer::start("stripe", STRIPE_SECRET, "unique");
    let url = format!("{}/webhook", c.url);
    let bare = [
        "--style",
        "stripe",
        "--secret",
        STRIPE_SECRET,
        "--events",
        "20",
    ];
    let (code, report) = report_of(deliver(&url, &bare));
    let v = verdicts(&report);
    assert_eq!(code, Some(0), "{v:#?}");
    assert_eq!(check(&report, "ack_latency")["verdict"], "pass");
    for (name, flag) in [
        ("effects_once", "give `--verify URL_WITH_{event_id}`"),
        ("forged_rejected", "give `--forged F`"),
        ("duplicate_ack", "give `--duplicates F`"),
        ("ordering", "give `--reorder F`"),
    ] {
        let r = check(&report, name);
        assert_eq!(r["verdict"], "inconclusive", "{name}: {r:#}");
        let why = r["summary"].as_str().unwrap_or_default();
        assert!(why.contains(flag), "{name}: {why}");
    }

    let mut together = bare.to_vec();
    together.extend(["--duplicates", "1", "--spacing", "together"]);
    let (_, report) = report_of(deliver(&url, &together));
    let dup = check(&report, "duplicate_ack");
    assert_eq!(dup["verdict"], "inconclusive", "{dup:#}");
    let why = dup["summary"].as_str().unwrap_or_default();
    assert!(why.contains("leave `--spacing` at `mixed`"), "{why}");
    let m = &report["phases"][0]["metrics"];
    assert_eq!(
        (
            m["copies_together"].as_u64(),
            m["copies_after_ack"].as_u64()
        ),
        (Some(20), Some(0)),
        "{m:#}"
    );

    let mut reordered = bare.to_vec();
    reordered.extend(["--reorder", "1"]);
    let (_, report) = report_of(deliver(&url, &reordered));
    let why = check(&report, "ordering")["summary"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        why.contains("give `--verify-state URL_WITH_{subject}`"),
        "{why}"
    );
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
