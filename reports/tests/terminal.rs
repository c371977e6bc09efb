//! The terminal renderer: what a person reads after `harness run`.

mod common;

use reports::render_terminal;

#[test]
fn leads_with_the_verdict_and_scenario() {
    let out = render_terminal(&common::sample(), false);
    let first = out.lines().next().unwrap();
    assert!(first.starts_with("FAILED"), "{first}");
    assert!(first.contains("thundering-herd-no-jitter"), "{first}");
    assert!(first.contains("31.5 s"), "{first}");
    assert!(first.contains("2 of 6 checks failed"), "{first}");
    assert!(first.contains("seed 42"), "{first}");

    let ok = render_terminal(&common::passing_sample(), false);
    assert!(ok.starts_with("PASSED"), "{ok}");
}

#[test]
fn shows_checks_with_their_evidence() {
    let out = render_terminal(&common::sample(), false);
    for name in [
        "jitter",
        "duplicates",
        "retry_on_4xx",
        "amplification",
        "retry_after",
        "thresholds",
    ] {
        assert!(out.contains(name), "check {name} missing:\n{out}");
    }
    for verdict in ["fail", "pass", "weak", "inconclusive"] {
        assert!(out.contains(verdict), "verdict {verdict} missing:\n{out}");
    }
    // Seqs are cut after eight, and only the first three evidence items are shown.
    assert!(out.contains("seq 501, 502, 503"), "{out}");
    assert!(out.contains("(20 in all)"), "{out}");
    assert!(out.contains("… and 2 more in report.json"), "{out}");
    assert!(out.contains("key order-7f3a"), "{out}");
    assert!(
        !out.contains("16000 ms"),
        "fourth and later evidence must be folded:\n{out}"
    );
}

#[test]
fn shows_the_figures() {
    let out = render_terminal(&common::sample(), false);
    for header in ["p50", "p90", "p99", "p99.9", "max"] {
        assert!(out.contains(header), "{header} missing:\n{out}");
    }
    assert!(out.contains("1520"), "p99 value missing:\n{out}");
    assert!(
        out.contains("2500 sent (2000 retries), 2450 answered, 50 not answered"),
        "{out}"
    );
    // Each failure figure by its name, with what it counts; no operations known, none shown.
    let flat = squeeze(&out);
    assert!(
        flat.contains("request failures 90% 2250 of 2500 requests answered 5xx or not at all"),
        "{out}"
    );
    assert!(
        flat.contains(
            "transport errors 2% 50 of 2500 requests not answered: closed 30, timeout 20"
        ),
        "{out}"
    );
    assert!(!out.contains("operation failures"), "{out}");
    let mut known = common::sample();
    known.requests.operations = Some(500);
    known.requests.failed_operations = Some(3);
    let out = render_terminal(&known, false);
    assert!(
        squeeze(&out)
            .contains("operation failures 0.6% 3 of 500 operations failed after their retries"),
        "{out}"
    );
    assert!(out.contains("77.8 req/s"), "{out}");
    assert!(out.contains("503") && out.contains("2200"), "{out}");
    assert!(out.contains("timeout") && out.contains("closed"), "{out}");
    assert!(
        out.contains("incident") && out.contains("retry-storm"),
        "{out}"
    );
    assert!(
        out.contains("retry-storm (from its scheduled time)"),
        "{out}"
    );
    assert!(out.contains("coordinated omission"), "{out}");
    assert!(out.contains("incident: release_skew_us_max = 180"), "{out}");
}

#[test]
fn no_ansi_without_color() {
    let out = render_terminal(&common::sample(), false);
    assert!(
        !out.contains('\u{1b}'),
        "ANSI escape in uncoloured output:\n{out}"
    );
}

#[test]
fn color_marks_verdicts() {
    let out = render_terminal(&common::sample(), true);
    assert!(out.contains("\u{1b}[1;31mFAILED\u{1b}[0m"), "{out:?}");
    // comfy-table colours the fail verdict cell red (SGR 38;5;9 or 31 depending on the backend).
    assert!(out.matches('\u{1b}').count() > 10, "{out:?}");
}

#[test]
fn empty_report_says_so() {
    let out = render_terminal(&common::empty(), false);
    assert!(out.starts_with("PASSED"), "{out}");
    assert!(out.contains("no checks ran"), "{out}");
    assert!(out.contains("no completed requests"), "{out}");
}

#[test]
fn text_from_requests_cannot_drive_the_terminal() {
    let mut r = common::sample();
    r.checks[0].evidence[0].key = Some("k\u{1b}[2J\u{1b}]0;owned\u{7}\r\n".into());
    r.checks[0].summary = "right-to-left \u{202e}gpj.exe".into();
    r.scenario = "name\u{9b}31m".into();
    for color in [false, true] {
        let out = render_terminal(&r, color);
        assert!(!out.contains("\u{1b}[2J"), "{out}");
        assert!(!out.contains('\u{7}') && !out.contains('\r') && !out.contains('\u{9b}'));
        assert!(!out.contains('\u{202e}'), "{out}");
        assert!(out.contains("\\u{1b}[2J"), "shown escaped: {out}");
        assert!(out.contains("\\u{202e}"), "{out}");
    }
}

/// A run that made gRPC calls shows their statuses by name, and counts a failing status as an
/// error though its HTTP status was 200.
#[test]
fn grpc_statuses_are_shown_by_name_and_failing_ones_count_as_errors() {
    let mut r = common::sample();
    r.requests.by_status = [("200".to_string(), r.requests.sent)].into();
    r.requests.errors = 0;
    r.errors_by_kind.clear();
    r.requests.by_grpc_status =
        [("OK".to_string(), 2_000), ("UNAVAILABLE".to_string(), 500)].into();
    let text = render_terminal(&r, false);
    assert!(text.contains("gRPC statuses"), "{text}");
    assert!(text.contains("UNAVAILABLE"), "{text}");
    assert!(
        squeeze(&text)
            .contains("request failures 20% 500 of 2500 requests answered 5xx or not at all"),
        "{text}"
    );
    let md = reports::to_markdown(&r);
    assert!(md.contains("| grpc: UNAVAILABLE | 500 |"), "{md}");
}

#[test]
fn counts_tcp_connections_beside_the_requests() {
    let out = render_terminal(&common::with_connections(), false);
    assert!(out.contains("TCP connections"), "{out}");
    let row = out
        .lines()
        .find(|l| l.contains("redis"))
        .expect("a row for the redis proxy");
    for cell in [
        "7",
        "closed 5, timed_out 2",
        "14000",
        "latency_downstream 7",
    ] {
        assert!(row.contains(cell), "{cell} in {row}");
    }
    assert!(!render_terminal(&common::sample(), false).contains("TCP connections"));
}

#[test]
fn counts_protocol_statements_beside_the_requests() {
    let out = render_terminal(&common::with_statements(), false);
    assert!(out.contains("Statements and commands"), "{out}");
    let row = out
        .lines()
        .find(|l| l.contains("postgres"))
        .expect("a row for the PostgreSQL proxy");
    // A narrow terminal wraps the longer cells: their first words are on the row's first line.
    for cell in ["40", "drop 2", "dropped 2", "40001 3", "9", "2"] {
        assert!(row.contains(cell), "{cell} in {row}");
    }
    assert!(out.contains("LOADING 4"), "{out}");
    assert!(!render_terminal(&common::sample(), false).contains("Statements and commands"));
}

/// `text` with every run of whitespace made one space: figures aligned in columns, compared as
/// words.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
