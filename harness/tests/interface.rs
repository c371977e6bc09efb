//! What a stranger meets on the real binary: one name per figure in every format, the load's
//! gate said out loud, durations that carry their unit, oha's flags, a compare that cannot be
//! fooled, pointers that lead somewhere, rounded numbers and URLs refused with what is accepted.

use std::path::{Path, PathBuf};

#[allow(dead_code)]
mod cli_support;

use cli_support::{harness, repo, server, text, write, Server};

/// `text` with every run of whitespace made one space: figures aligned in columns, compared as
/// words.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The journal's entries so far (the file is written as requests are answered).
fn journal(s: &Server) -> Vec<serde_json::Value> {
    std::fs::read_to_string(&s.journal)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A scenario whose client retries 503s to success: requests fail, operations do not.
const RETRIED: &str = r#"
name: retried-to-success
seed: 3
server:
  orders: { idempotency: unique }
  rules:
    - id: first-fails
      match: { method: POST, path: /orders, attempts: "1" }
      fault: { status: { code: 503 } }
client:
  max_attempts: 3
  timeout: 2s
  backoff: { kind: exponential, base: 5ms, cap: 50ms }
  jitter: full
  key: per_operation
phases:
  - name: create
    clients: { concurrency: 4, requests: 20 }
    request:
      method: POST
      path: /orders
      headers: { Idempotency-Key: "{{key}}" }
      json: { sku: "sku-{{seq}}", qty: 1 }
checks:
  duplicates: {}
  thresholds: { rules: ["error_rate < 1%", "request_failure_rate > 40%", "transport_error_rate <= 0%"] }
"#;

/// Finding 1: attempts, operations after retries and transport errors are three figures with
/// three names, the same in the terminal, JSON, Markdown, HTML and the thresholds.
#[test]
fn each_failure_figure_has_one_name_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(&dir, "s.yaml", RETRIED);
    let out = harness()
        .arg("run")
        .arg(&scenario)
        .arg("--report-dir")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // 20 operations, each failed once with a 503, then succeeded.
    assert!(
        squeeze(&stdout)
            .contains("operation failures 0% 0 of 20 operations failed after their retries"),
        "{stdout}"
    );
    assert!(
        squeeze(&stdout)
            .contains("request failures 50% 20 of 40 requests answered 5xx or not at all"),
        "{stdout}"
    );
    assert!(
        squeeze(&stdout).contains("transport errors 0% 0 of 40 requests not answered"),
        "{stdout}"
    );
    assert!(!stdout.contains("error rate"), "no unnamed rate: {stdout}");
    // The thresholds read the same figures by their metric names.
    assert!(
        stdout.contains("error_rate < 1% (0%)")
            && stdout.contains("request_failure_rate > 40% (50%)"),
        "{stdout}"
    );
    let out_dir = dir.path().join("out");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(r["requests"]["operations"], 20);
    assert_eq!(r["requests"]["failed_operations"], 0);
    assert_eq!(r["requests"]["sent"], 40);
    let md = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(
        md.contains("| operation failures | 0% |") && md.contains("| request failures | 50% |"),
        "{md}"
    );
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    for tile in [
        "<div class=\"k\">checks failed</div>",
        "<div class=\"v\">0%</div><div class=\"k\">operation failures</div>",
        "<div class=\"v\">50%</div><div class=\"k\">request failures</div>",
        "<div class=\"k\">transport errors</div>",
    ] {
        assert!(html.contains(tile), "{tile} in the HTML tiles");
    }
    assert!(!html.contains("ERROR RATE") && !html.contains(">error rate<"));
    // --report-dir says what it wrote (finding 6).
    for f in ["report.json", "junit.xml", "report.html", "summary.md"] {
        let path = out_dir.join(f);
        assert!(
            stderr.contains(&path.display().to_string()),
            "{f}: {stderr}"
        );
    }
}

/// Finding 2: `harness load` says which gate it applies, and the figure it gates on.
#[test]
fn load_prints_its_default_gate() {
    let s = server("rules:\n  - match: { path: /x }\n    fault: { status: { code: 503 } }\n");
    let out = harness()
        .args(["load", &format!("{}/x", s.url), "-n", "10", "-c", "2"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("note: gate: operation failures <= 1%")
            && stdout.contains("`--max-error-rate 100%` turns it off"),
        "{stdout}"
    );
    assert!(
        squeeze(&stdout).contains("operation failures 100% 10 of 10 operations"),
        "{stdout}"
    );
    // A rule of the user's replaces the default, and the note goes with it.
    let out = harness()
        .args(["load", &format!("{}/x", s.url), "-n", "4", "-c", "2"])
        .args(["--threshold", "error_rate <= 100%"])
        .output()
        .unwrap();
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("note: gate:"), "{stdout}");
    let doc = std::fs::read_to_string(repo("docs/src/reference/exit-codes.md")).unwrap();
    assert!(
        doc.contains("operation failures ≤ 1 %") && !doc.contains("which has no checks, exits 0"),
        "the exit codes page documents the gate"
    );
}

/// Finding 3: a duration without its unit is refused, with its place; flags take the same
/// syntax everywhere.
#[test]
fn a_duration_needs_its_unit() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(&dir, "s.yaml", &RETRIED.replace("base: 5ms", "base: 200"));
    let out = harness().arg("run").arg(&scenario).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("s.yaml:")
            && stderr.contains("backoff.base")
            && stderr.contains("`200`: a duration needs a unit, e.g. `200ms` or `200s`"),
        "{stderr}"
    );
    // The fault server's own config reads durations the same way.
    let scenario = write(
        &dir,
        "f.yaml",
        "name: f\nserver:\n  rules:\n    - match: { path: /x }\n      fault: { delay: 2 }\n",
    );
    let out = harness().arg("run").arg(&scenario).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("f.yaml:5:") && stderr.contains("`2`: a duration needs a unit"),
        "{stderr}"
    );
    // The simulation's durations are flags like every other: with a unit.
    let out = harness()
        .args([
            "simulate",
            "herd",
            "--backoff",
            "100ms",
            "--window",
            "250ms",
        ])
        .args(["--clients", "20", "--jitter", "full"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("from 0.1 s doubling"), "{stdout}");
    let out = harness()
        .args(["simulate", "herd", "--backoff", "1"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("a duration needs a unit"), "{stderr}");
}

/// Finding 4: oha's short flags: `-d` is the body, `-z` the duration, `-q` the rate.
#[test]
fn load_speaks_ohas_flags() {
    let s = server("capture_headers: [content-type]\nrules: []\n");
    let dir = tempfile::tempdir().unwrap();
    let body = write(&dir, "body.txt", "from a file");
    for args in [
        vec!["-n", "3", "-m", "POST", "-d", "hello", "-T", "text/plain"],
        vec!["-n", "3", "-m", "POST", "-D", body.to_str().unwrap()],
        vec!["-z", "300ms", "-q", "20"],
    ] {
        let out = harness()
            .args(["load", &format!("{}/orders", s.url)])
            .args(&args)
            .args(["--format", "json"])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stdout}\n{stderr}");
        let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert!(r["requests"]["sent"].as_u64().unwrap() >= 1, "{args:?}");
    }
    // The bodies reached the server as given, with the content type asked for.
    let posts: Vec<serde_json::Value> = journal(&s)
        .into_iter()
        .filter(|e| e["method"] == "POST")
        .collect();
    let lens: Vec<u64> = posts
        .iter()
        .filter_map(|e| e["body_len"].as_u64())
        .collect();
    assert_eq!(lens.iter().filter(|&&l| l == 5).count(), 3, "{lens:?}");
    assert_eq!(lens.iter().filter(|&&l| l == 11).count(), 3, "{lens:?}");
    assert!(
        posts
            .iter()
            .any(|e| e["headers"]["content-type"] == "text/plain"),
        "{posts:?}"
    );
    // `-d 10s` is a body, and the output says where the duration went.
    let out = harness()
        .args(["load", &format!("{}/", s.url), "-n", "1", "-d", "10s"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(stderr.contains("the load's duration is -z"), "{stderr}");
    // A body given twice is refused.
    let out = harness()
        .args([
            "load",
            &format!("{}/", s.url),
            "-n",
            "1",
            "-d",
            "a",
            "--json",
            "{}",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

fn quick_report(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    let out_dir = dir.path().join(name);
    let out = harness()
        .arg("run")
        .arg(repo("scenarios/idempotency-burst.yaml"))
        .arg("--report-dir")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    out_dir.join("report.json")
}

/// Finding 5: a new run that judged less, or another scenario, cannot pass as no regression.
#[test]
fn compare_cannot_be_fooled_by_a_run_that_judged_less() {
    let dir = tempfile::tempdir().unwrap();
    let base = quick_report(&dir, "base");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    let compare = |new: &Path, extra: &[&str]| {
        let out = harness()
            .arg("report")
            .arg(&base)
            .arg("--compare")
            .arg(new)
            .args(extra)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        (out.status.code(), format!("{stdout}\n{stderr}"))
    };
    // Checks deleted.
    let mut fewer = r.clone();
    let first = fewer["checks"][0]["name"].as_str().unwrap().to_string();
    fewer["checks"].as_array_mut().unwrap().truncate(0);
    let fewer_path = write(&dir, "fewer.json", &fewer.to_string());
    let (code, out) = compare(&fewer_path, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("check {first}")) && out.contains("missing in the new run"),
        "{out}"
    );
    let (code, out) = compare(&fewer_path, &["--allow-missing"]);
    assert_eq!(code, Some(0), "{out}");
    // A check the baseline decided that the new run could not.
    let mut undecided = r.clone();
    undecided["checks"][0]["verdict"] = serde_json::json!("inconclusive");
    let path = write(&dir, "undecided.json", &undecided.to_string());
    let (code, out) = compare(&path, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("to inconclusive"), "{out}");
    // Another scenario: not a baseline.
    let mut other = r.clone();
    other["scenario"] = serde_json::json!("something-else");
    let path = write(&dir, "other.json", &other.to_string());
    let (code, out) = compare(&path, &[]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("different scenarios") && out.contains("--force"),
        "{out}"
    );
    let (code, out) = compare(&path, &["--force"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("warning: the reports are of different scenarios"),
        "{out}"
    );
}

/// Findings 6 and 7: "N more" counts every finding and says where they are; numbers a person
/// reads are rounded, JSON keeps them whole.
#[test]
fn pointers_count_every_finding_and_numbers_are_rounded() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(
        &dir,
        "race.yaml",
        &std::fs::read_to_string(repo("scenarios/idempotency-race.yaml"))
            .unwrap()
            .replace("checks:", "checks:\n  max_evidence: 4"),
    );
    let out = harness()
        .arg("run")
        .arg(&scenario)
        .arg("--report-dir")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out/report.json")).unwrap())
            .unwrap();
    let dup = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "duplicates")
        .unwrap();
    let kept = dup["evidence"].as_array().unwrap().len() as u64;
    let total = dup["findings"]
        .as_u64()
        .expect("findings counted past the bound");
    assert!(kept == 4 && total > kept, "{dup}");
    let md = std::fs::read_to_string(dir.path().join("out/summary.md")).unwrap();
    let more = format!(
        "… and {} more findings, not kept (checks.max_evidence keeps more than 4)",
        total - 4
    );
    assert!(md.replace("\\_", "_").contains(&more), "{more} in\n{md}");
    // The terminal shows three and counts every other finding, not only the kept ones.
    let flat: String = stdout
        .chars()
        .filter(|c| !"│┆".contains(*c))
        .collect::<String>();
    assert!(
        squeeze(&flat).contains(&format!("… and {} more: 1 of them in", total - 3)),
        "{stdout}"
    );
    // JUnit properties and the HTML metrics show three significant digits.
    let junit = std::fs::read_to_string(dir.path().join("out/junit.xml")).unwrap();
    let long = regex_like_long_float(&junit);
    assert!(long.is_none(), "a raw float in junit.xml: {long:?}");
}

/// A number with more than six digits after its decimal point, if the text has one.
fn regex_like_long_float(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i < b.len() && b[i] == b'.' {
                let dot = i;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                if i - dot - 1 > 6 {
                    return Some(text[start..i].to_string());
                }
            }
        } else {
            i += 1;
        }
    }
    None
}

/// Finding 10: a port out of range and a scheme the command does not take are bad input.
#[test]
fn urls_are_refused_with_what_is_accepted() {
    let out = harness()
        .args(["load", "http://localhost:99999/", "-n", "1"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("port 99999: expected a port from 1 to 65535"),
        "{stderr}"
    );
    let out = harness()
        .args(["load", "ftp://127.0.0.1:21/", "-n", "1"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for scheme in ["http://", "https://", "grpc://", "grpcs://"] {
        assert!(stderr.contains(scheme), "{scheme}: {stderr}");
    }
}

/// Finding 9: explained labels; an analysis of journals says their span, not a run time.
#[test]
fn labels_say_what_they_count() {
    let s = server("rules: []\n");
    let out = harness()
        .args(["load", &format!("{}/", s.url), "-q", "50", "-z", "300ms"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("load (from its scheduled time)"),
        "{stdout}"
    );
    assert!(stdout.contains("coordinated omission"), "{stdout}");
    assert!(!stdout.contains("intended start"), "{stdout}");
    let out = harness().arg("analyze").arg(&s.journal).output().unwrap();
    let (stdout, _) = text(&out);
    assert!(stdout.contains(", journals spanning "), "{stdout}");
    assert!(!stdout.contains("journal.jsonl in "), "{stdout}");
}

/// Every option line of a help text: (short, long, value name).
fn options(help: &str) -> Vec<(Option<char>, String, Option<String>)> {
    let mut out = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        if !t.starts_with('-') || line.len() - t.len() < 2 {
            continue;
        }
        let mut words = t.split_whitespace();
        let mut short = None;
        let mut first = words.next().unwrap_or("");
        if first.len() == 3 && first.ends_with(',') && !first.starts_with("--") {
            short = first.chars().nth(1);
            first = words.next().unwrap_or("");
        }
        let Some(long) = first.strip_prefix("--") else {
            continue;
        };
        let value = words
            .next()
            .filter(|w| w.starts_with('<'))
            .map(|w| w.trim_end_matches("...").to_string());
        out.push((short, long.to_string(), value));
    }
    out
}

/// Finding 8: the same flag has the same value name in every subcommand, a short flag means one
/// thing, and the global flags are written once, briefly.
#[test]
fn help_is_consistent_across_subcommands() {
    let subcommands = [
        &["run"][..],
        &["merge"],
        &["exec"],
        &["load"],
        &["idempotency"],
        &["deliver"],
        &["audit"],
        &["init"],
        &["simulate", "herd"],
        &["analyze"],
        &["report"],
    ];
    let mut value_names: std::collections::BTreeMap<String, Vec<(String, String)>> =
        Default::default();
    let mut shorts: std::collections::BTreeMap<char, Vec<(String, String)>> = Default::default();
    for sub in subcommands {
        let out = harness().args(sub).arg("--help").output().unwrap();
        let (help, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{sub:?}: {stderr}");
        assert!(
            !help.contains("=]"),
            "{sub:?}: an empty env value shown: {help}"
        );
        let name = sub.join(" ");
        for (short, long, value) in options(&help) {
            if let Some(v) = value {
                value_names
                    .entry(long.clone())
                    .or_default()
                    .push((name.clone(), v));
            }
            if let Some(c) = short {
                shorts.entry(c).or_default().push((name.clone(), long));
            }
        }
        if matches!(
            sub,
            ["init"] | ["merge"] | ["report"] | ["analyze"] | ["simulate", "herd"]
        ) {
            for flag in ["--http2", "--streams", "--source-addr"] {
                assert!(
                    !help.contains(flag),
                    "{name} shows {flag}, which it does not use"
                );
            }
        }
        let threads = help
            .lines()
            .find(|l| l.contains("--threads"))
            .unwrap_or_default();
        assert!(
            threads.len() < 200,
            "{name}: --threads is a paragraph in every subcommand: {threads}"
        );
    }
    for (long, seen) in &value_names {
        let first = &seen[0].1;
        let odd: Vec<_> = seen.iter().filter(|(_, v)| v != first).collect();
        assert!(
            odd.is_empty(),
            "--{long} is {first} in {} but {odd:?}",
            seen[0].0
        );
    }
    for (c, seen) in &shorts {
        let first = &seen[0].1;
        let odd: Vec<_> = seen.iter().filter(|(_, l)| l != first).collect();
        assert!(
            odd.is_empty(),
            "-{c} is --{first} in {} but {odd:?}",
            seen[0].0
        );
    }
    // The per-request timeouts share one default.
    for sub in [&["load"][..], &["idempotency"], &["audit"]] {
        let out = harness().args(sub).arg("--help").output().unwrap();
        let (help, _) = text(&out);
        assert!(help.contains("[default: 10s]"), "{sub:?}: {help}");
    }
}
