//! The real `harness` binary: exit codes, bad input, each command end to end on loopback.

use std::path::Path;
use std::process::{Command, Output};

#[allow(dead_code)]
mod cli_support;

use cli_support::{harness, repo, server, text, write};

/// `harness run SCENARIO --format json`.
fn run_json(scenario: &Path) -> Output {
    harness()
        .arg("run")
        .arg(scenario)
        .args(["--format", "json"])
        .output()
        .unwrap()
}

#[test]
fn quickstart_passes_and_writes_every_report_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = harness()
        .args(["run"])
        .arg(repo("scenarios/quickstart.yaml"))
        .args(["--report-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("PASSED"), "{stdout}");
    for f in ["report.json", "junit.xml", "report.html", "summary.md"] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    for field in [
        "scenario",
        "passed",
        "duration_ms",
        "requests",
        "latency_ms",
        "checks",
    ] {
        assert!(report.get(field).is_some(), "report.json lacks {field}");
    }
    for field in ["sent", "completed", "errors", "retries", "by_status"] {
        assert!(
            report["requests"].get(field).is_some(),
            "requests lacks {field}"
        );
    }
    for field in ["p50", "p90", "p99", "p999", "max"] {
        assert!(
            report["latency_ms"].get(field).is_some(),
            "latency_ms lacks {field}"
        );
    }
    assert!(
        report["requests"]["retries"].as_u64().unwrap() > 0,
        "the faults made the client retry"
    );
    let junit = std::fs::read_to_string(dir.path().join("junit.xml")).unwrap();
    assert_eq!(
        junit.matches("<testcase").count(),
        report["checks"].as_array().unwrap().len()
    );
}

#[test]
fn idempotency_burst_passes_and_race_fails_naming_the_keys() {
    let out = run_json(&repo("scenarios/idempotency-burst.yaml"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["requests"]["sent"], 200);
    let burst = &r["phases"][0];
    assert!(
        burst["metrics"]["release_skew_us_max"].as_u64().is_some(),
        "release skew is reported"
    );

    let out = run_json(&repo("scenarios/idempotency-race.yaml"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let dup = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "duplicates")
        .unwrap();
    assert_eq!(dup["passed"], false);
    let keyed = dup["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["key"].is_string())
        .count();
    assert!(keyed >= 1, "evidence names the keys: {dup}");
}

#[test]
fn bad_scenarios_exit_2_with_position_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("syntax.yaml", "phases: [\n  - {name: x\n", ":2:", ""),
        ("unknown.yaml", "server: {}\nphases:\n  - name: a\n    clients: { concurrency: 1, requests: 1 }\n    request: { path: / }\n    reqest: {}\n", ":6:", "unknown field `reqest`"),
        ("type.yaml", "server: {}\nphases:\n  - name: a\n    clients: { concurrency: many, requests: 1 }\n    request: { path: / }\n", ":4:", "phases[0].clients.concurrency"),
        ("endless.yaml", "server: {}\nphases:\n  - name: a\n    clients: { concurrency: 1 }\n    request: { path: / }\n", ":4:14:", "never ends"),
        ("endless-rate.yaml", "server: {}\nphases:\n  - name: a\n    rate: { rps: 10 }\n    request: { path: / }\n", ":4:11:", "never ends"),
        ("placeholder.yaml", "server: {}\nphases:\n  - name: a\n    burst: {}\n    request: { path: \"/{{nope}}\" }\n", ":5:22: at `phases[0].request.path`", "unknown placeholder"),
        ("nothing.yaml", "phases:\n  - name: a\n    burst: {}\n    request: { path: / }\n", "", "no target"),
    ];
    for (name, body, at, what) in cases {
        let p = write(&dir, name, body);
        let out = harness().arg("run").arg(&p).output().unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{}{at}", p.display())),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(what), "{name}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{name}: one message: {stderr}"
        );
    }
    let out = harness()
        .args(["run", "/no/such/file.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = harness().args(["frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn errors_in_the_embedded_servers_config_name_their_file_place_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let rules =
        "rules:\n  - id: a\n    fault: { status: 503 }\n  - id: a\n    fault: { status: 500 }\n";
    let phase = "phases:\n  - name: p\n    clients: { concurrency: 1, requests: 1 }\n    request: { path: /x }\n";
    let inline = write(
        &dir,
        "inline.yaml",
        &format!("server:\n  rules:\n    - id: a\n      fault: {{ status: 503 }}\n    - id: a\n      fault: {{ status: 500 }}\n{phase}"),
    );
    let faults = write(&dir, "faults.yaml", rules);
    let file = write(
        &dir,
        "file.yaml",
        &format!("server_config: faults.yaml\n{phase}"),
    );
    for (scenario, expected) in [
        (
            &inline,
            format!(
                "error: {}:5:11: at `server.rules[1].id`: duplicate rule id \"a\"",
                inline.display()
            ),
        ),
        (
            &file,
            format!(
                "error: {}:4:9: at `rules[1].id`: duplicate rule id \"a\"",
                faults.display()
            ),
        ),
    ] {
        let out = harness().arg("run").arg(scenario).output().unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.starts_with(&expected), "{expected}\n{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}

#[test]
fn unreachable_target_exits_3_with_url_and_os_error() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = harness().args(["load", &url, "-n", "3"]).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&url) && stderr.contains("refused"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "s.yaml", &format!("target: {url}\nphases:\n  - name: a\n    burst: {{ size: 2 }}\n    request: {{ path: / }}\n"));
    let out = harness().arg("run").arg(&p).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&url), "{stderr}");
}

#[test]
fn load_closed_and_open_model() {
    let s = server("{}");
    let out = harness()
        .args([
            "load",
            &format!("{}/x", s.url),
            "-c",
            "4",
            "-n",
            "400",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["requests"]["sent"], 400);
    assert_eq!(r["requests"]["by_status"]["200"], 400);
    assert!(r["throughput_rps"].as_f64().unwrap() > 0.0);
    assert!(r["latency_ms"]["p99"].as_f64().unwrap() > 0.0);

    let out = harness()
        .args([
            "load",
            &format!("{}/y", s.url),
            "--rate",
            "200",
            "-z",
            "1s",
            "-m",
            "POST",
            "-H",
            "x-client-id: loader",
            "--json",
            "{\"a\":1}",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let q = &r["requests"];
    let n = |k: &str| q[k].as_u64().unwrap();
    // 200 requests due in the second: each sent, cut short at the end, or never sent because the
    // machine fell behind; how many of each depends on the machine, the sum does not.
    assert_eq!(n("sent") + n("cancelled") + n("not_started"), 200, "{q}");
    assert!(n("sent") >= 100, "{q}");
    assert!(
        r["phases"][0]["latency_intended_ms"]["p50"]
            .as_f64()
            .is_some(),
        "CO-corrected latency is reported"
    );
    // Every request the server received is journaled once it has ended.
    wait_until("the load journaled", || in_flight(&s.url) == 0);
    let journal = std::fs::read_to_string(&s.journal).unwrap();
    let last: serde_json::Value = serde_json::from_str(journal.lines().last().unwrap()).unwrap();
    assert_eq!(last["method"], "POST");
    assert_eq!(last["client_id"], "loader");
    assert_eq!(last["body_len"], 7);

    let table = harness()
        .args(["load", &format!("{}/z", s.url), "-n", "50"])
        .output()
        .unwrap();
    let (stdout, _) = text(&table);
    for col in ["p50", "p90", "p99", "p99.9", "max", "req/s"] {
        assert!(stdout.contains(col), "table lacks {col}: {stdout}");
    }
    let bad = harness()
        .args(["load", &s.url, "-H", "no-colon"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn exec_points_the_command_at_the_fault_server_and_checks_what_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(
        &dir,
        "exec.yaml",
        "server:\n  rules:\n    - { match: { path: /bad }, fault: { status: 400 } }\nchecks:\n  retry_on_4xx: {}\n",
    );
    let bin = assert_cmd::cargo::cargo_bin("harness");
    // A client that hits the fault server 20 times and takes a 400 without retrying: passes.
    let good = format!(
        "{0} load \"$HARNESS_FAULT_URL/ok\" -n 20 --format json > /dev/null && {0} load \"$HARNESS_FAULT_URL/bad\" -n 1 > /dev/null",
        bin.display()
    );
    let out = harness()
        .arg("exec")
        .arg(&scenario)
        .args(["--format", "json", "--", "sh", "-c", &good])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["exec"]["exit_code"], 0);
    assert_eq!(
        r["requests"]["sent"], 21,
        "the journal saw what the command did"
    );

    // A client that retries a 400 with the same client id: fails retry_on_4xx.
    let bad = "for i in 1 2 3; do curl -s -o /dev/null -H 'x-client-id: c1' -H 'Idempotency-Key: k1' \"$HARNESS_FAULT_URL/bad\"; done";
    let out = harness()
        .arg("exec")
        .arg(&scenario)
        .args(["--format", "json", "--", "sh", "-c", bad])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");

    // The command's own failure fails the run and is reported.
    let out = harness()
        .arg("exec")
        .arg(&scenario)
        .args(["--format", "json", "--", "sh", "-c", "exit 7"])
        .output()
        .unwrap();
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["exec"]["exit_code"], 7);
}

#[test]
fn analyze_a_journal_and_reject_a_broken_one() {
    // A long "work" window so three separately started curls certainly overlap.
    let s = server("orders: { idempotency: check-then-insert, work_delay: 2s }");
    // Three concurrent POSTs with one key against the racy implementation.
    let url = format!("{}/orders", s.url);
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                Command::new("curl")
                    .args([
                        "-s",
                        "-o",
                        "/dev/null",
                        "-X",
                        "POST",
                        "-H",
                        "Idempotency-Key: same",
                        "-d",
                        "{}",
                        &url,
                    ])
                    .status()
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    wait_until("the three POSTs journaled", || {
        control(&s.url, "health")["journaled"] == 3 && in_flight(&s.url) == 0
    });
    let dir = tempfile::tempdir().unwrap();
    let checks = write(&dir, "checks.yaml", "duplicates: {}\n");
    let out = harness()
        .arg("analyze")
        .arg(&s.journal)
        .arg("--checks")
        .arg(&checks)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["checks"][0]["name"], "duplicates");
    assert_eq!(r["checks"][0]["passed"], false);

    let broken = write(&dir, "broken.jsonl", "{\"seq\":1}\n");
    let out = harness().arg("analyze").arg(&broken).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains(&format!("{}:1:", broken.display())),
        "{stderr}"
    );
}

#[test]
fn a_header_built_from_a_captured_line_break_fails_its_attempt_and_is_never_sent() {
    let s = server("capture_headers: [x-sku]\n");
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(
        &dir,
        "capture.yaml",
        &format!(
            "target: {}\nphases:\n  - name: make\n    clients: {{ concurrency: 1, requests: 1 }}\n    request: {{ method: POST, path: /orders, headers: {{ Idempotency-Key: \"{{{{key}}}}\" }}, json: {{ sku: \"a\\r\\nx-injected: 1\", qty: 1 }} }}\n    capture: {{ sku: order.sku }}\n  - name: use\n    clients: {{ concurrency: 1, requests: 2 }}\n    request: {{ path: /orders, headers: {{ x-sku: \"{{{{var.sku}}}}\" }} }}\nchecks: {{ thresholds: {{ rules: [\"error_rate < 50%\"] }} }}\n",
            s.url
        ),
    );
    let out = run_json(&scenario);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["passed"], false, "{stdout}");
    assert_eq!(r["phases"][1]["requests"]["errors"], 2, "{stdout}");
    assert_eq!(r["errors_by_kind"]["other"], 2, "{stdout}");
    // The server saw the order being made, and no request without its header.
    wait_until("the order journaled", || {
        control(&s.url, "health")["journaled"] == 1 && in_flight(&s.url) == 0
    });
    let journal = std::fs::read_to_string(&s.journal).unwrap();
    assert_eq!(journal.lines().count(), 1, "{journal}");
    assert!(journal.contains("\"POST\""), "{journal}");
}

#[test]
fn text_from_a_journal_reaches_no_output_raw() {
    // Two orders under one key made of terminal escapes, a bell and a right-to-left override: the
    // duplicates check fails and quotes the key in every format.
    let key = r#""\u001b[2J\u001b[31mEVIL\u001b]0;pwned\u0007\u202eabc\r\n""#;
    let line = |seq: u64, order: &str| {
        format!(
            r#"{{"seq": {seq}, "t_recv_us": {t}, "t_done_us": {d}, "unix_ms": 1796163888900, "method": "POST", "path": "/orders", "query": null, "headers": {{"idempotency-key": {key}}}, "idempotency_key": {key}, "client_id": null, "body_sha256": "df80", "body_len": 19, "conn_id": {seq}, "rule": null, "fault": null, "status": 201, "outcome": "responded", "created": "{order}"}}"#,
            t = seq * 10_000,
            d = seq * 10_000 + 500,
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let journal = write(
        &dir,
        "evil.jsonl",
        &format!("{}\n{}\n", line(1, "ord_1"), line(2, "ord_2")),
    );
    let reports = dir.path().join("reports");
    let raw = ['\u{1b}', '\u{7}', '\u{202e}'];
    for format in ["table", "markdown", "json"] {
        let out = harness()
            .arg("analyze")
            .arg(&journal)
            .args(["--format", format, "--report-dir"])
            .arg(&reports)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{format}: {stdout}\n{stderr}");
        assert!(
            stdout.contains("EVIL"),
            "{format}: the key is quoted: {stdout}"
        );
        assert!(!stdout.contains(raw), "{format}: {stdout:?}");
    }
    for f in ["summary.md", "junit.xml", "report.html", "report.json"] {
        let body = std::fs::read_to_string(reports.join(f)).unwrap();
        assert!(body.contains("EVIL"), "{f}: the key is quoted");
        assert!(!body.contains(raw), "{f}: {body:?}");
    }
}

#[test]
fn report_rerenders_and_compare_gates() {
    let dir = tempfile::tempdir().unwrap();
    let out = harness()
        .arg("run")
        .arg(repo("scenarios/idempotency-burst.yaml"))
        .arg("--report-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let json = dir.path().join("report.json");
    for f in ["table", "json", "junit", "html", "markdown"] {
        let out = harness()
            .arg("report")
            .arg(&json)
            .args(["--format", f])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{f}");
        assert!(!out.stdout.is_empty(), "{f}");
    }
    let same = harness()
        .arg("report")
        .arg(&json)
        .arg("--compare")
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(
        same.status.code(),
        Some(0),
        "a run does not regress against itself"
    );
    // A copy whose duplicates check flipped to failed is a regression.
    let mut r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    r["checks"][0]["passed"] = serde_json::json!(false);
    r["checks"][0]["verdict"] = serde_json::json!("fail");
    r["passed"] = serde_json::json!(false);
    let worse = write(&dir, "worse.json", &r.to_string());
    let out = harness()
        .arg("report")
        .arg(&json)
        .arg("--compare")
        .arg(&worse)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

/// A control endpoint's JSON (`stats`, `health`).
fn control(url: &str, what: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(
        c,
        "GET /__harness/{what} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(body).unwrap()
}

/// The fault server's counters (`GET /__harness/stats`).
fn stats(url: &str) -> serde_json::Value {
    control(url, "stats")
}

/// Requests the server has received and not yet written to its journal (file included).
fn in_flight(url: &str) -> u64 {
    let h = control(url, "health");
    h["received"].as_u64().unwrap() - h["journaled"].as_u64().unwrap()
}

/// Polls `cond` until it holds; a minute is far beyond what any of these waits need.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cond() {
        assert!(std::time::Instant::now() < give_up, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn signal(child: &std::process::Child, sig: &str) {
    let kill = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
}

const STUCK: &str =
    "rules: [ { id: stuck, match: { path: /stuck }, fault: { hang: { cap: 120s } } } ]";

#[test]
fn ctrl_c_cancels_what_is_in_flight_and_reports_interrupted_with_exit_4() {
    let s = server(STUCK);
    let child = harness()
        .args([
            "load",
            &format!("{}/stuck", s.url),
            "-c",
            "2",
            "-z",
            "120s",
            "--timeout",
            "120s",
            "--format",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Both requests are hanging at the server: the load is under way, the handler installed.
    wait_until("two requests in flight", || in_flight(&s.url) == 2);
    signal(&child, "-INT");
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["interrupted"], true);
    assert_eq!(r["outcome"], "interrupted");
    assert_eq!(r["passed"], false);
    // Cut short rather than waited out (each would have taken two minutes).
    assert_eq!(r["requests"]["cancelled"], 2, "{stdout}");
    assert!(r["duration_ms"].as_u64().unwrap() < 60_000);
    // The server saw the client go.
    wait_until("both closes journaled", || in_flight(&s.url) == 0);
    assert_eq!(stats(&s.url)["by_outcome"]["client_closed"], 2);
}

#[test]
fn sigterm_still_judges_and_writes_every_report_marked_interrupted() {
    let s = server(STUCK);
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(
        &dir,
        "s.yaml",
        &format!(
            "name: long\ntarget: {}\nclient: {{ timeout: 120s, max_attempts: 1 }}\nphases:\n  - name: stuck\n    clients: {{ concurrency: 2, duration: 120s }}\n    request: {{ path: /stuck }}\n  - name: never\n    clients: {{ concurrency: 1, requests: 5 }}\n    request: {{ path: /x }}\nchecks:\n  thresholds: {{ rules: [\"error_rate < 50%\"] }}\n",
            s.url
        ),
    );
    let out_dir = dir.path().join("out");
    let child = harness()
        .arg("run")
        .arg(&scenario)
        .arg("--report-dir")
        .arg(&out_dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("two requests in flight", || in_flight(&s.url) == 2);
    signal(&child, "-TERM");
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(4), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("INTERRUPTED"), "{stdout}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(r["interrupted"], true);
    assert_eq!(r["outcome"], "interrupted");
    assert_eq!(
        r["phases"].as_array().unwrap().len(),
        1,
        "the second phase never ran"
    );
    assert_eq!(r["phases"][0]["requests"]["cancelled"], 2);
    // Nothing finished, so the error-rate rule has nothing to judge.
    assert_eq!(r["checks"][0]["verdict"], "inconclusive", "{}", r["checks"]);
    let junit = std::fs::read_to_string(out_dir.join("junit.xml")).unwrap();
    assert!(junit.contains("<testcase name=\"interrupted\""), "{junit}");
    let md = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(md.contains("INTERRUPTED"), "{md}");
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(html.contains("INTERRUPTED"));
}

#[test]
fn duration_is_a_hard_stop() {
    let s = server(STUCK);
    // Requests that would hang for two minutes end with the one-second run.
    let out = harness()
        .args([
            "load",
            &format!("{}/stuck", s.url),
            "-c",
            "2",
            "-z",
            "1s",
            "--timeout",
            "120s",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    // Nothing finished, so the error-rate rule has nothing to judge: no verdict, exit 1.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["checks"][0]["verdict"], "inconclusive", "{}", r["checks"]);
    // Nothing was answered; what was in flight at the end was cut (each worker's one request,
    // unless a stalled machine kept a worker from sending before the end).
    assert_eq!(r["requests"]["sent"], 0, "{stdout}");
    let cancelled = r["requests"]["cancelled"].as_u64().unwrap();
    assert!((1..=2).contains(&cancelled), "{stdout}");
    assert!(r["duration_ms"].as_u64().unwrap() < 60_000);
    // A rate no machine sends: the run still ends, and says how much was never sent.
    let out = harness()
        .args([
            "load",
            &format!("{}/x", s.url),
            "--rate",
            "1000000",
            "-z",
            "1s",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let q = &r["requests"];
    let n = |k: &str| q[k].as_u64().unwrap();
    assert_eq!(
        n("sent") + n("cancelled") + n("not_started"),
        1_000_000,
        "every request due is sent, cancelled or counted as never sent: {q}"
    );
    assert!(n("not_started") > 0, "{q}");
    assert!(r["duration_ms"].as_u64().unwrap() < 60_000);
}

#[test]
fn load_flags_out_of_bounds_exit_2_naming_the_bound() {
    for (args, says) in [
        (vec!["--rate", "1e12"], "at most 1000000"),
        (vec!["--rate", "0"], "more than 0"),
        (vec!["-c", "0"], "1 to 100000"),
        (vec!["-c", "10000000"], "1 to 100000"),
        (vec!["-n", "0"], "1 to 100000000"),
        (vec!["-z", "0s"], "more than 0"),
        (vec!["-z", "400d"], "at most"),
        (vec!["--timeout", "0ms"], "more than 0"),
        (vec!["--max-header-list", "100"], "give 1KiB to 16MiB"),
        (vec!["--max-header-list", "2GiB"], "give 1KiB to 16MiB"),
    ] {
        let out = harness()
            .args(["load", "http://127.0.0.1:9/"])
            .args(&args)
            .output()
            .unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn a_run_that_decides_nothing_is_no_verdict_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    // No checks at all.
    let scenario = write(
        &dir,
        "s.yaml",
        "name: unjudged\nserver: {}\nphases:\n  - name: p\n    clients: { concurrency: 1, requests: 3 }\n    request: { path: /x }\nchecks: {}\n",
    );
    let out = harness().arg("run").arg(&scenario).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("NO VERDICT"), "{stdout}");
    // Checks that could not judge: no retries to look at, no burst keys.
    let scenario = write(
        &dir,
        "t.yaml",
        "name: unjudged\nserver: {}\nphases:\n  - name: p\n    clients: { concurrency: 1, requests: 3 }\n    request: { path: /x }\nchecks: { jitter: {}, retry_after: {} }\n",
    );
    let out = run_json(&scenario);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["outcome"], "no_verdict", "{stdout}");
    assert!(r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["verdict"] == "inconclusive"));
    // An empty journal gives `analyze` nothing to judge.
    let empty = write(&dir, "empty.jsonl", "");
    let out = harness().arg("analyze").arg(&empty).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("NO VERDICT"), "{stdout}");
    // `load` is judged by its default error-rate threshold: five answers, none failed.
    let s = server("{}");
    let out = harness()
        .args(["load", &format!("{}/x", s.url), "-n", "5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

/// Ten GETs against a server with no faults, and no `checks:` section: every default check has
/// nothing to judge — nothing failed, so nothing was retried or amplified — and the run is NO
/// VERDICT, not a pass.
#[test]
fn a_run_without_faults_or_checks_is_no_verdict_not_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(
        &dir,
        "s.yaml",
        "name: ten-gets\nserver: {}\nphases:\n  - name: p\n    clients: { concurrency: 2, requests: 10 }\n    request: { path: /x }\n",
    );
    let out = run_json(&scenario);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["outcome"], "no_verdict", "{stdout}");
    assert_eq!(r["requests"]["sent"], 10);
    for c in r["checks"].as_array().unwrap() {
        assert_eq!(c["verdict"], "inconclusive", "{c}");
    }
}

/// `harness load` as a smoke gate: a service whose every answer is a failure must not pass, and
/// the report says which threshold failed; the default is documented and can be changed.
#[test]
fn load_against_a_failing_service_fails_its_default_error_rate_threshold() {
    let s = server("rules:\n  - match: { path: /x }\n    fault: { status: { code: 503 } }\n  - match: { path: /r }\n    fault: reset\n");
    for path in ["/x", "/r"] {
        let out = harness()
            .args(["load", &format!("{}{path}", s.url), "-n", "20", "-c", "2"])
            .args(["--format", "json"])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{path}: {stdout}\n{stderr}");
        let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(r["passed"], false, "{stdout}");
        let t = &r["checks"][0];
        assert_eq!(t["name"], "thresholds");
        assert_eq!(t["verdict"], "fail", "{t}");
        assert!(
            t["summary"].as_str().unwrap().contains("error_rate <= 1%"),
            "{t}"
        );
    }
    // Turned off, or loosened with a rule of the user's: the same load passes.
    for flags in [
        &["--max-error-rate", "100%"][..],
        &["--threshold", "error_rate <= 100%"][..],
    ] {
        let out = harness()
            .args(["load", &format!("{}/x", s.url), "-n", "20", "-c", "2"])
            .args(flags)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{flags:?}: {stdout}\n{stderr}");
    }
    for (flags, says) in [
        (&["--max-error-rate", "2"][..], "between 0 and 1"),
        (&["--max-error-rate", "lots"][..], "expected a percentage"),
        (&["--threshold", "p99 < 2xs"][..], "--threshold"),
    ] {
        let out = harness()
            .args(["load", &format!("{}/x", s.url), "-n", "1"])
            .args(flags)
            .output()
            .unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
}

/// Against your own service the harness has no journal: `duplicates` then counts through the
/// service (a GET per key) or its SQLite store, and fails on a key with two orders.
#[test]
fn duplicates_verify_against_an_external_service_by_url_and_by_sql() {
    let dir = tempfile::tempdir().unwrap();
    for (implementation, expect_code) in [("check-then-insert", 1), ("unique", 0)] {
        let db = dir.path().join(format!("{implementation}.sqlite"));
        let s = server(&format!(
            "orders: {{ idempotency: {implementation}, work_delay: 200ms, database: {} }}",
            db.display()
        ));
        for verify in [
            "{ url: \"/orders?idempotency_key={key}\" }".to_string(),
            format!("{{ sqlite: {}, query: \"SELECT COUNT(*) FROM orders WHERE idempotency_key = ?1\" }}", db.display()),
        ] {
            let scenario = write(
                &dir,
                "verify.yaml",
                &format!(
                    "target: {}\nphases:\n  - name: b\n    burst: {{ size: 10, rounds: 3 }}\n    request: {{ method: POST, path: /orders, headers: {{ Idempotency-Key: \"{{{{key}}}}\" }}, json: {{}} }}\nchecks:\n  duplicates: {{ verify: {verify} }}\n",
                    s.url
                ),
            );
            let out = run_json(&scenario);
            let (stdout, stderr) = text(&out);
            assert_eq!(out.status.code(), Some(expect_code), "{implementation} {verify}: {stdout}\n{stderr}");
            let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(r["checks"][0]["metrics"]["verified_keys"], 3, "{implementation} {verify}");
        }
    }
}

/// A burst round on the clock starts its members at its instant: the wait for it is no part of
/// a request's latency, nor of its timeout. Round 2 is 2 s after round 1 and the client's timeout
/// 1 s: had the members waited for the instant inside their requests, round 2 would time out and
/// every request's latency would include up to 2 s of waiting.
#[test]
fn a_timed_burst_round_waits_for_its_instant_outside_its_requests() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let scenario = write(
        &dir,
        "timed.yaml",
        "name: timed\nserver: { orders: { idempotency: unique } }\n\
         client: { timeout: 1s, max_attempts: 1 }\n\
         phases:\n  - name: rounds\n    burst: { size: 3, rounds: 2, every: 2s }\n\
         \x20   request: { method: POST, path: /orders, headers: { Idempotency-Key: \"{{key}}\" }, json: { sku: a } }\n\
         checks:\n  duplicates: {}\n",
    );
    let out = run_json(&scenario);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("a JSON report");
    assert_eq!(report["requests"]["completed"], 6, "{report}");
    assert_eq!(
        report["requests"]["errors"], 0,
        "no request timed out: {report}"
    );
    let max = report["latency_ms"]["max"].as_f64().expect("a latency max");
    assert!(
        max < 1000.0,
        "round 2's requests did not wait 2 s for their instant: max latency {max} ms"
    );
}

/// `harness merge` and `harness report` read files a user may have edited: a histogram header
/// that claims gigabytes, a histogram that disagrees with the counts beside it, counts that add
/// up past 2^64 − 1, a file far larger than any report — each is bad input (exit 2) said in
/// words, found before anything is allocated for it or any verdict is given.
#[test]
fn merge_checks_what_it_merges() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(
        &dir,
        "s.yaml",
        "name: small\nserver: {}\nphases:\n  - name: p\n    clients: { concurrency: 2, requests: 20 }\n    request: { path: /x }\n",
    );
    let out = harness()
        .arg("run")
        .arg(&scenario)
        .arg("--report-dir")
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{:?}", text(&out));
    let good: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/report.json")).unwrap())
            .unwrap();
    assert_eq!(good["requests"]["completed"], 20);
    let good_path = write(&dir, "good.json", &good.to_string());
    let merge = |edited: &serde_json::Value| {
        let p = write(&dir, "edited.json", &edited.to_string());
        harness()
            .args(["merge"])
            .arg(&good_path)
            .arg(&p)
            .output()
            .unwrap()
    };
    let refused = |out: &Output, says: &str| {
        let (stdout, stderr) = text(out);
        assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
        assert!(stderr.contains(says), "wanted {says:?}: {stderr}");
        assert!(!stderr.contains("Error {"), "a debug print: {stderr}");
        assert!(stdout.is_empty(), "no verdict: {stdout}");
    };
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);

    // A 60-character histogram whose V2 header claims a 4 GB payload.
    let mut bomb = 0x1c84_9314u32.to_be_bytes().to_vec();
    bomb.extend(0xffff_fff0u32.to_be_bytes());
    bomb.extend([0u8; 36]);
    let mut edited = good.clone();
    edited["mergeable"]["latency_hdr"] = b64(&bomb).into();
    refused(&merge(&edited), "compressed bytes follow, but 36 do");

    // A histogram of 2^62 samples beside `completed: 20`.
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
    h.record_n(1000, 1 << 62).unwrap();
    let mut edited = good.clone();
    edited["mergeable"]["latency_hdr"] = harness::metrics::encode_hdr(&h).into();
    refused(
        &merge(&edited),
        "holds 4611686018427387904 samples but it says 20",
    );

    // Counts that would wrap: 2^64 − 1 sent, plus the good report's 20.
    let mut edited = good.clone();
    edited["requests"]["sent"] = u64::MAX.into();
    refused(
        &merge(&edited),
        "requests.sent: the reports' counts add up to more than",
    );

    // A file far larger than any report, refused before it is parsed — by merge and by report.
    let big = dir.path().join("big.json");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(65 << 20).unwrap();
    let out = harness()
        .arg("merge")
        .arg(&good_path)
        .arg(&big)
        .output()
        .unwrap();
    refused(&out, "more than 64 MiB");
    let out = harness().arg("report").arg(&big).output().unwrap();
    refused(&out, "more than 64 MiB");

    // The report as the run wrote it still merges with itself.
    let out = harness()
        .args(["merge", "--format", "json"])
        .arg(&good_path)
        .arg(&good_path)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["requests"]["completed"], 40);
}

/// A server that answers every request on every connection with a 200 whose head carries one
/// header of `value_len` bytes.
fn big_header_server(value_len: usize) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = format!(
        "HTTP/1.1 200 OK\r\nx-big: {}\r\ncontent-length: 2\r\n\r\nok",
        "v".repeat(value_len)
    );
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        if stream.write_all(answer.as_bytes()).is_err() {
                            return;
                        }
                    }
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    url
}

#[test]
fn max_header_list_bounds_what_an_answer_may_carry() {
    let url = big_header_server(8 << 10);
    let load = |extra: &[&str]| {
        let out = harness()
            .args([
                "load",
                &format!("{url}/x"),
                "-c",
                "1",
                "-n",
                "3",
                "--format",
                "json",
            ])
            .args(extra)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        let r: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!("{e}: {stdout}\n{stderr}");
        });
        (out.status.code(), r)
    };
    // An 8 KiB header is within the default 64 KiB.
    let (code, r) = load(&[]);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["requests"]["by_status"]["200"], 3, "{r}");
    // Under a 4 KiB limit every answer is refused as a protocol error, and the run fails.
    let (code, r) = load(&["--max-header-list", "4KiB"]);
    assert_eq!(code, Some(1), "{r}");
    assert_eq!(r["errors_by_kind"]["protocol"], 3, "{r}");
}
