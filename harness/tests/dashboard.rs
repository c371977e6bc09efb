//! `--dashboard`: the live page and its event stream, read over a real socket while the real
//! binary runs a load against a real fault server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[allow(dead_code)]
mod cli_support;

use cli_support::{harness, server};

/// The dashboard's URL from the line `harness` prints on stderr at start.
fn dashboard_url(stderr: &mut impl BufRead) -> String {
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(url) = line.trim().strip_prefix("dashboard: ") {
            return url.to_string();
        }
        seen.push_str(&line);
    }
    panic!("no `dashboard: URL` line on stderr: {seen}");
}

/// `harness ARGS` started with its output piped, and the dashboard URL it printed; the rest of
/// its stderr is drained on a thread, so the run never blocks on it.
fn start_with_dashboard(args: &[&str]) -> (std::process::Child, String) {
    let mut child = harness()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let url = dashboard_url(&mut stderr);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
    });
    (child, url)
}

/// `host:port` of `http://host:port/`.
fn authority(url: &str) -> &str {
    url.trim_start_matches("http://").trim_end_matches('/')
}

/// A GET over a fresh connection: the status line and headers, and the body as read to the end.
fn get(url: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(authority(url)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
        authority(url)
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (head.to_string(), body.to_string())
}

#[test]
fn the_dashboard_streams_snapshots_that_grow_and_ends_with_the_final_report() {
    let s = server("{}");
    let (child, url) = start_with_dashboard(&[
        "load",
        &format!("{}/d", s.url),
        "-c",
        "4",
        "-z",
        "3s",
        "--dashboard",
        "--format",
        "json",
    ]);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    // The page is one self-contained document that reads /events.
    let (head, page) = get(&url, "/");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/html"),
        "{head}"
    );
    assert!(page.contains("new EventSource(\"/events\")"), "{page}");
    for outside in ["src=\"http", "href=\"http", "//cdn"] {
        assert!(
            !page.contains(outside),
            "the page loads {outside}…: it must stand alone"
        );
    }

    // The event stream: snapshots as the load runs, then the last one with the report, then
    // the end of the stream (read_to_string returns).
    let (head, events) = get(&url, "/events");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{head}"
    );
    let snapshots: Vec<serde_json::Value> = events
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let running: Vec<&serde_json::Value> = snapshots
        .iter()
        .filter(|s| s["state"] == "running")
        .collect();
    assert!(
        running.len() >= 2,
        "a snapshot a second over a 3 s load: {snapshots:?}"
    );
    let seqs: Vec<u64> = snapshots
        .iter()
        .map(|s| s["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // The attempts counted only grow, and some were counted before the end.
    let attempts = |s: &serde_json::Value| {
        s["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["attempts"].as_u64().unwrap())
            .sum::<u64>()
    };
    let counts: Vec<u64> = snapshots.iter().map(attempts).collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    assert!(
        running.iter().any(|s| attempts(s) > 0),
        "no attempt counted while the load ran: {counts:?}"
    );
    assert!(
        running
            .iter()
            .any(|s| s["phases"][0]["latency_ms"]["p99"].as_f64().unwrap_or(0.0) > 0.0),
        "no latency while the load ran"
    );

    // The last snapshot: done, and its report is the one printed.
    let last = snapshots.last().unwrap();
    assert_eq!(last["state"], "done");
    assert_eq!(last["report"]["requests"], report["requests"]);
    assert_eq!(last["report"]["outcome"], report["outcome"]);
    assert_eq!(last["phases"][0]["state"], "done");
    assert_eq!(last["phases"][0]["name"], "load");
    // The ended phase shows the figures the report has: its answers and its latency.
    let phase = &last["phases"][0];
    assert_eq!(
        phase["by_outcome"]["200"],
        report["requests"]["by_status"]["200"]
    );
    assert_eq!(phase["latency_ms"], report["latency_ms"]);
    assert!(last["series"].as_array().unwrap().len() >= 2);
}

#[test]
fn a_dashboard_address_that_is_not_one_is_refused_before_the_load() {
    let s = server("{}");
    let out = harness()
        .args(["load", &s.url, "-n", "1", "--dashboard", "localhost:x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--dashboard \"localhost:x\": expected an IP address or IP:PORT"),
        "{stderr}"
    );
}

/// An address some other process listens on is the user's to change: bad input, exit 2, and no
/// request sent.
#[test]
fn a_dashboard_address_in_use_is_bad_input_before_the_load() {
    let s = server("{}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = harness()
        .args(["load", &s.url, "-n", "5", "--dashboard", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("--dashboard {addr}: cannot listen there"))
            && stderr.contains("give another port"),
        "{stderr}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let journal = std::fs::read_to_string(&s.journal).unwrap_or_default();
    assert!(journal.trim().is_empty(), "nothing was sent: {journal}");
}

#[test]
fn a_reader_that_never_reads_does_not_hold_the_run_and_the_server_side_is_shown() {
    // A scenario run with its embedded fault server, which slows half the requests; one client
    // opens the event stream and never reads it, another reads it to the end. The run still
    // ends, passes and prints its report, and the snapshots show the server's faults by rule.
    let dir = tempfile::tempdir().unwrap();
    let scenario = cli_support::write(
        &dir,
        "s.yaml",
        "name: live\nserver:\n  rules:\n    - { id: slow, match: { probability: 0.5 }, fault: { delay: { uniform: [1ms, 2ms] } } }\nphases:\n  - name: steady\n    clients: { concurrency: 2, duration: 2s }\n    request: { path: /x }\nchecks:\n  thresholds: { rules: [\"error_rate < 1%\"] }\n",
    );
    let scenario = scenario.to_str().unwrap();
    let (child, url) = start_with_dashboard(&[
        "run",
        "--dashboard",
        "127.0.0.1",
        "--format",
        "json",
        scenario,
    ]);
    let mut idle = TcpStream::connect(authority(&url)).unwrap();
    write!(idle, "GET /events HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let reader = std::thread::spawn(move || get(&url, "/events").1);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["scenario"], "live");
    let sent = report["requests"]["sent"].as_u64().unwrap();
    assert!(sent > 0);
    drop(idle);

    let events = reader.join().unwrap();
    let last: serde_json::Value = serde_json::from_str(
        events
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .next_back()
            .expect("the reader got snapshots"),
    )
    .unwrap();
    assert_eq!(last["state"], "done");
    let server = &last["server"];
    let journaled = server["requests"].as_u64().unwrap();
    let slowed = server["by_rule"]["slow"].as_u64().unwrap_or(0);
    assert!(journaled > 0 && journaled <= sent, "{server}");
    assert!(slowed > 0 && slowed < journaled, "{server}");
}

/// Debian's `chromium` on PATH; None (with a message) without it, unless
/// `HARNESS_REQUIRE_TOOLS=1` (CI), where its absence fails the test.
fn chromium() -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "chromium is not on PATH, and HARNESS_REQUIRE_TOOLS=1"
        );
        println!("skipping: chromium not found on PATH (Debian's chromium package runs this test)");
    }
    found
}

/// Headless Chromium on `url` with `args`, its stdout to `out`; killed after a minute.
fn run_chromium(
    bin: &std::path::Path,
    scratch: &std::path::Path,
    args: &[String],
    url: &str,
    out: &std::path::Path,
) {
    let profile = tempfile::tempdir_in(scratch).unwrap();
    let mut child = std::process::Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("chromium {args:?} did not finish within a minute");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The text of the element with `id` in a DOM dump.
fn element_text<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the page"));
    let start = at + dom[at..].find('>').unwrap() + 1;
    let end = start + dom[start..].find('<').unwrap();
    &dom[start..end]
}

#[test]
fn chromium_watches_the_figures_move_and_end_on_the_report() {
    let Some(bin) = chromium() else { return };
    let s = server("{}");
    let (child, url) = start_with_dashboard(&[
        "load",
        &format!("{}/live", s.url),
        "-c",
        "2",
        "-z",
        "5s",
        "--dashboard",
        "--format",
        "json",
    ]);
    // The page opens its event stream while the load runs. Under a virtual-time budget Chromium
    // runs the page's handler as each snapshot arrives, and dumps the DOM once the stream has
    // ended after the last one (the budget, far longer than the load, is only a bound).
    let tmp = tempfile::tempdir().unwrap();
    let dom_file = tmp.path().join("dom.html");
    run_chromium(
        &bin,
        tmp.path(),
        &[
            "--dump-dom".to_string(),
            "--virtual-time-budget=30000".to_string(),
        ],
        &url,
        &dom_file,
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let dom = std::fs::read_to_string(&dom_file).unwrap();

    // The figures moved while the page watched: several snapshots, several attempt totals.
    let received: u64 = element_text(&dom, "received").parse().unwrap();
    assert!(received >= 3, "snapshots the page received: {received}");
    let shown_at = dom
        .find("data-attempts-shown=\"")
        .expect("the page kept the totals it showed");
    let shown: Vec<u64> = dom[shown_at + 21..]
        .split('"')
        .next()
        .unwrap()
        .split(' ')
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(shown.windows(2).all(|w| w[0] <= w[1]), "{shown:?}");
    assert!(
        shown
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            >= 2,
        "the totals never changed: {shown:?}"
    );
    assert!(
        dom.matches("<rect").count() >= 2,
        "the chart has a bar a second"
    );

    // At the end the page shows the report's figures and verdict.
    let sent = report["requests"]["sent"].as_u64().unwrap();
    assert_eq!(element_text(&dom, "state"), "done");
    assert_eq!(element_text(&dom, "attempts"), sent.to_string());
    assert_eq!(shown.last(), Some(&sent));
    assert_eq!(
        element_text(&dom, "ops"),
        report["requests"]["operations"].to_string()
    );
    assert_eq!(element_text(&dom, "inflight"), "0", "every operation ended");
    assert_eq!(
        element_text(&dom, "verdict"),
        format!(
            "PASSED: {sent} requests sent, {} answered",
            report["requests"]["completed"]
        )
    );
}

/// The `harness_*` metric names in `text` (a PromQL expression, or anything else).
fn harness_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("harness_") {
        // Not the tail of another name (`fault_server_…harness_` has none, but be exact).
        let boundary = at == 0
            || !rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if boundary {
            names.push(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    names
}

/// `/metrics` while a retrying load runs: every family it exports is in
/// `harness::live::metrics::ALL` with its kind and help, the operations in flight never exceed
/// the clients and are none at the end, and the counters end on the report's figures. Then
/// `deploy/grafana/dashboard.json` queries every harness metric and no other `harness_*` name,
/// and every name it queries is the harness's or the fault server's.
#[test]
fn the_metrics_a_scrape_reads_are_the_snapshot_s_and_the_grafana_dashboard_queries_them() {
    use harness::live::metrics::ALL;
    let dir = tempfile::tempdir().unwrap();
    let scenario = cli_support::write(
        &dir,
        "s.yaml",
        "name: scraped\nserver:\n  rules:\n    - { id: flaky, match: { probability: 0.3 }, fault: { status: 503 } }\n    - { id: slow, fault: { delay: { fixed: 5ms } } }\nclient: { max_attempts: 3, backoff: { kind: exponential, base: 1ms, cap: 2ms } }\nphases:\n  - name: steady\n    clients: { concurrency: 3, duration: 3s }\n    request: { path: /x }\nchecks:\n  thresholds: { rules: [\"error_rate < 60%\"] }\n",
    );
    let (child, url) = start_with_dashboard(&[
        "run",
        "--dashboard",
        "127.0.0.1",
        "--format",
        "json",
        scenario.to_str().unwrap(),
    ]);
    let value = |text: &str, series: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    };
    let mut scrapes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (head, text) = get(&url, "/metrics");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/openmetrics-text"),
            "{head}"
        );
        let running = value(
            &text,
            "harness_phase_running{phase=\"steady\",kind=\"clients\"}",
        );
        if running == Some(1.0) {
            let flying = value(&text, "harness_in_flight_operations{phase=\"steady\"}");
            assert!(flying.is_some_and(|n| n <= 3.0), "{text}");
            scrapes.push(text);
        }
        if scrapes.len() >= 2 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(600));
    }
    assert!(!scrapes.is_empty(), "no scrape while the phase ran");
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    // Every family a scrape has is in the list, with its kind and help.
    let text = scrapes.last().unwrap();
    let mut seen = 0;
    for line in text.lines() {
        let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|l| l.split_once(' '))
        else {
            continue;
        };
        let m = ALL
            .iter()
            .find(|m| format!("harness_{}", m.name) == name)
            .unwrap_or_else(|| panic!("{name} is exported but not in live::metrics::ALL"));
        assert_eq!(kind, m.kind.name(), "{name}");
        assert!(
            text.contains(&format!("# HELP {name} {}", m.help)),
            "{text}"
        );
        seen += 1;
    }
    assert!(seen >= 6, "{text}");
    assert!(
        value(
            text,
            "harness_attempts_total{phase=\"steady\",outcome=\"200\"}"
        )
        .is_some_and(|n| n > 0.0),
        "{text}"
    );
    assert!(
        value(
            text,
            "harness_attempt_latency_seconds{phase=\"steady\",quantile=\"0.5\"}"
        )
        .is_some_and(|s| s >= 0.004),
        "the 5 ms delay, in seconds: {text}"
    );
    assert!(
        value(
            text,
            "harness_retries_total{phase=\"steady\",attempt=\"2\"}"
        )
        .is_some_and(|n| n > 0.0),
        "a 503 in three is retried: {text}"
    );
    // A scrape while running counted no more than the run sent in the end.
    let counted: f64 = text
        .lines()
        .filter(|l| l.starts_with("harness_attempts_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let sent = report["requests"]["sent"].as_f64().unwrap();
    assert!(counted > 0.0 && counted <= sent, "{counted} of {sent}");

    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/dashboard.json");
    let raw = std::fs::read_to_string(&path).expect("deploy/grafana/dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&raw).expect("the dashboard is JSON");
    let mut queried = std::collections::BTreeSet::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().expect("a PromQL expression");
            queried.extend(harness_names(expr));
            let ours = expr.contains("harness_") || expr.contains("fault_server_");
            assert!(
                ours,
                "{}: {expr} queries neither the harness nor the fault server",
                p["title"]
            );
        }
    }
    queried.extend(harness_names(&dashboard["templating"].to_string()));
    let exported: std::collections::BTreeSet<String> = ALL.iter().map(|m| m.series()).collect();
    let unknown: Vec<_> = queried.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries metrics the harness does not export: {unknown:?}"
    );
    let missing: Vec<_> = exported.difference(&queried).collect();
    assert!(missing.is_empty(), "exported, on no panel: {missing:?}");
}

/// The snapshots' checks while a scenario runs and at its end: `(running snapshots' checks, the
/// last snapshot's checks, the report, the exit code)`.
fn watch_checks(
    rules: &str,
) -> (
    Vec<serde_json::Value>,
    serde_json::Value,
    serde_json::Value,
    Option<i32>,
) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = cli_support::write(
        &dir,
        "s.yaml",
        &format!(
            "name: gated\nserver:\n  rules:\n{rules}    - {{ id: slow, fault: {{ delay: {{ fixed: 2ms }} }} }}\nclient: {{ max_attempts: 1 }}\nphases:\n  - name: steady\n    clients: {{ concurrency: 2, duration: 3s }}\n    request: {{ path: /x, headers: {{ Idempotency-Key: \"{{{{key}}}}\" }} }}\nchecks:\n  duplicates: {{}}\n  thresholds: {{ rules: [\"error_rate < 1%\"] }}\n"
        ),
    );
    let (child, url) = start_with_dashboard(&[
        "run",
        "--dashboard",
        "127.0.0.1",
        "--format",
        "json",
        scenario.to_str().unwrap(),
    ]);
    let events = get(&url, "/events").1;
    let out = child.wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let snapshots: Vec<serde_json::Value> = events
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    // The first snapshot may come before the scenario's checks are known (none listed); one
    // taken when a handful of operations had ended may rightly read them all successful, so
    // only snapshots with at least 20 ended are kept (all 20 answered, one in two failing:
    // one chance in a million).
    let running = snapshots
        .iter()
        .filter(|s| s["state"] == "running")
        .filter(|s| s["checks"].as_array().is_some_and(|c| !c.is_empty()))
        .filter(|s| s["phases"][0]["operations_done"].as_u64().unwrap_or(0) >= 20)
        .map(|s| s["checks"].clone())
        .collect();
    let last = snapshots.last().expect("snapshots")["checks"].clone();
    (running, last, report, out.status.code())
}

fn state_of<'a>(checks: &'a serde_json::Value, name: &str) -> &'a str {
    checks
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .and_then(|c| c["state"].as_str())
        .unwrap_or_else(|| panic!("no {name} in {checks}"))
}

/// While the run goes, `thresholds` is judged on the figures so far — failing as soon as a
/// service that fails one request in two has answered enough, passing for a healthy one — and
/// the checks that read the journal are pending; the last snapshot holds the report's verdicts.
#[test]
fn the_thresholds_are_judged_as_the_run_goes_and_the_end_is_the_report_s() {
    let (running, last, report, code) =
        watch_checks("    - { id: flaky, match: { probability: 0.5 }, fault: { status: 503 } }\n");
    assert_eq!(code, Some(1), "{report}");
    let states: Vec<&str> = running.iter().map(|c| state_of(c, "thresholds")).collect();
    assert!(states.contains(&"fail"), "{states:?}");
    assert!(!states.contains(&"pass"), "{states:?}");
    assert!(running
        .iter()
        .all(|c| state_of(c, "duplicates") == "pending"));
    let failing = running
        .iter()
        .find(|c| state_of(c, "thresholds") == "fail")
        .unwrap();
    let summary = failing
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "thresholds"))
        .and_then(|c| c["summary"].as_str())
        .unwrap_or_default();
    assert!(summary.starts_with("so far: "), "{failing}");
    assert!(summary.contains("error_rate < 1% is"), "{failing}");
    // The end: the report's checks, verdict for verdict.
    let verdicts: Vec<(String, String)> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].to_string(), c["verdict"].to_string()))
        .collect();
    let ended: Vec<(String, String)> = last
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].to_string(), c["state"].to_string()))
        .collect();
    assert_eq!(ended, verdicts);
    assert_eq!(state_of(&last, "thresholds"), "fail");

    let (running, last, report, code) = watch_checks("");
    assert_eq!(code, Some(0), "{report}");
    let states: Vec<&str> = running.iter().map(|c| state_of(c, "thresholds")).collect();
    assert!(states.contains(&"pass"), "{states:?}");
    assert!(!states.contains(&"fail"), "{states:?}");
    assert_eq!(state_of(&last, "thresholds"), "pass");
}

/// `abort_on_fail`: a service that fails one request in two stops a minute-long phase soon
/// after `abort_after_ms`, without `--dashboard` (the thresholds are judged as the run goes all
/// the same); the run fails, is not an interruption, and its note and its `thresholds` say which
/// rule stopped it and when. Without the flag the same run goes its whole length (shortened here
/// by the test's own limit: it is not stopped before it).
#[test]
fn a_failing_threshold_with_abort_on_fail_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = |abort: bool, secs: u32| {
        cli_support::write(
            &dir,
            &format!("s{abort}.yaml"),
            &format!(
                "name: gate\nserver:\n  rules:\n    - {{ id: flaky, match: {{ probability: 0.5 }}, fault: {{ status: 503 }} }}\nclient: {{ max_attempts: 1 }}\nphases:\n  - name: steady\n    clients: {{ concurrency: 2, duration: {secs}s }}\n    request: {{ path: /x }}\nchecks:\n  thresholds: {{ rules: [\"p99 < 10s\", \"error_rate < 1%\"], abort_on_fail: {abort}, abort_after_ms: 1500 }}\n"
            ),
        )
    };
    let out = harness()
        .args(["run", "--format", "json"])
        .arg(scenario(true, 60))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        r["interrupted"], false,
        "stopped by a rule, not by the user"
    );
    assert_eq!(r["outcome"], "failed");
    let ms = r["duration_ms"].as_u64().unwrap();
    assert!(
        (1500..45_000).contains(&ms),
        "stopped after 1.5 s, long before 60 s: {ms} ms"
    );
    let note = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.starts_with("the thresholds stopped the run at "))
        .unwrap_or_else(|| panic!("no note: {}", r["notes"]));
    assert!(
        note.contains("(abort_on_fail): 1 of 2 thresholds failed: error_rate < 1% is"),
        "{note}"
    );
    let at: f64 = note["the thresholds stopped the run at ".len()..]
        .split(' ')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert!(at >= 1.5, "{note}");
    let t = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "thresholds")
        .unwrap();
    assert_eq!(t["verdict"], "fail");
    assert!(t["summary"].as_str().unwrap().starts_with(note), "{t}");

    // The same failing run without the flag is not stopped: it runs its phase out.
    let out = harness()
        .args(["run", "--format", "json"])
        .arg(scenario(false, 3))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        r["duration_ms"].as_u64().unwrap() >= 3000,
        "{}",
        r["duration_ms"]
    );
    assert!(
        !r["notes"].to_string().contains("stopped the run"),
        "{}",
        r["notes"]
    );
}

/// `harness load --abort-on-fail`: the default error-rate gate, failing against a service that
/// fails one request in two, stops a minute-long load soon after `--abort-after`; the load
/// fails and says why. `--abort-after` alone is refused.
#[test]
fn a_load_with_abort_on_fail_stops_when_its_gate_fails() {
    let s =
        server("rules:\n  - { id: flaky, match: { probability: 0.5 }, fault: { status: 503 } }\n");
    let url = format!("{}/x", s.url);
    let out = harness()
        .args(["load", &url, "-c", "2", "-z", "60s", "--abort-on-fail"])
        .args(["--abort-after", "1s", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["interrupted"], false);
    let ms = r["duration_ms"].as_u64().unwrap();
    assert!((1000..45_000).contains(&ms), "{ms} ms");
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("the thresholds stopped the load at ")
            && notes.contains("(--abort-on-fail): 1 of 1 thresholds failed: error_rate <= 1% is"),
        "{notes}"
    );
    assert_eq!(r["checks"][0]["name"], "thresholds");
    assert_eq!(r["checks"][0]["verdict"], "fail");

    let out = harness()
        .args(["load", &url, "-n", "1", "--abort-after", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--abort-on-fail"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
