//! `summary.md`: the GitHub step summary.

mod common;

use reports::markdown::escape;
use reports::to_markdown;

/// Table cell separators in a row, not counting escaped `\|`.
fn unescaped_pipes(line: &str) -> usize {
    let mut count = 0;
    let mut prev_backslash = false;
    for ch in line.chars() {
        if ch == '|' && !prev_backslash {
            count += 1;
        }
        prev_backslash = ch == '\\' && !prev_backslash;
    }
    count
}

#[test]
fn verdict_header_and_checks_table() {
    let md = to_markdown(&common::sample());
    let first = md.lines().next().unwrap();
    assert_eq!(first, "## ❌ FAILED: thundering-herd-no-jitter");
    assert!(md.contains("| ❌ | jitter | fail |"), "{md}");
    assert!(md.contains("| ✅ | duplicates | pass |"), "{md}");
    assert!(md.contains("| ⚠️ | amplification | weak |"), "{md}");
    assert!(md.contains("| ⚠️ | retry\\_after | inconclusive |"), "{md}");

    let ok = to_markdown(&common::passing_sample());
    assert!(ok.starts_with("## ✅ PASSED"), "{ok}");
    assert!(!ok.contains("### Evidence"), "{ok}");
}

#[test]
fn figures_and_evidence_for_failures() {
    let md = to_markdown(&common::sample());
    assert!(md.contains("| | p50 | p90 | p99 | p99.9 | max |"), "{md}");
    assert!(
        md.contains("| all | 2.10 | 4.80 | 1520 | 2010 | 2950 |"),
        "{md}"
    );
    assert!(md.contains("| 503 | 2200 |"), "{md}");
    assert!(md.contains("| error: timeout | 20 |"), "{md}");
    assert!(md.contains("### Evidence"), "{md}");
    assert!(md.contains("**❌ jitter**"), "{md}");
    assert!(
        md.contains("- attempt 2: 500 retries, every delay exactly 1000 ms \\[seq 501, 502"),
        "{md}"
    );
    assert!(md.contains("key order-7f3a; seq 2044\\]"), "{md}");
    // Passing checks have no evidence block.
    assert!(!md.contains("**❌ duplicates**"), "{md}");
}

#[test]
fn every_table_row_keeps_its_columns() {
    let md = to_markdown(&common::hostile());
    let mut in_table = false;
    let mut columns = 0;
    for line in md.lines() {
        if line.starts_with('|') {
            let pipes = unescaped_pipes(line);
            if !in_table {
                columns = pipes;
                in_table = true;
            }
            assert_eq!(pipes, columns, "row splits its cells: {line}");
        } else {
            in_table = false;
        }
    }
    assert!(md.contains("a \\| b"), "{md}");
}

#[test]
fn model_text_cannot_inject_markup() {
    let md = to_markdown(&common::hostile());
    assert!(!md.contains("<script>"), "{md}");
    assert!(!md.contains("<b>"), "{md}");
    assert!(!md.contains("<iframe"), "{md}");
    assert!(md.contains("&lt;script&gt;"), "{md}");
    assert_eq!(escape("a|b\nc"), "a\\|b c");
    // A key from a request cannot clear a terminal that shows the file, or reorder its text.
    assert_eq!(
        escape("\u{1b}[2J\u{7}\u{202e}abc"),
        "\\u{1b}\\[2J\\u{7}\\u{202e}abc"
    );
    assert_eq!(
        escape("*x* _y_ `z` [l](u)"),
        "\\*x\\* \\_y\\_ \\`z\\` \\[l\\](u)"
    );
}

#[test]
fn empty_report_says_so() {
    let md = to_markdown(&common::empty());
    assert!(md.contains("No checks ran."), "{md}");
    assert!(md.contains("No completed requests."), "{md}");
}

#[test]
fn counts_tcp_connections_beside_the_requests() {
    let out = to_markdown(&common::with_connections());
    assert!(out.contains("### TCP connections"), "{out}");
    assert!(
        out.contains(r"| redis | 7 | 0 | closed 5, timed\_out 2 | 700 | 14000 | latency\_downstream 7, timeout\_upstream 2 |"),
        "{out}"
    );
    assert!(
        !out.contains("<b>pg</b>"),
        "a proxy's name is escaped: {out}"
    );
}

#[test]
fn counts_protocol_statements_beside_the_requests() {
    let out = to_markdown(&common::with_statements());
    assert!(out.contains("### Statements and commands"), "{out}");
    assert!(
        out.contains(
            "| postgres | 40 | drop 2, error 3 | dropped 2, responded 38 | 40001 3 | 9 | 3 | 2 |"
        ),
        "{out}"
    );
    assert!(
        out.contains("| cache | redis | 12 | error 4 | responded 12 | LOADING 4 | 0 | 0 | 0 |"),
        "{out}"
    );
    assert!(
        !out.contains("<b>db</b>"),
        "a proxy's name is escaped: {out}"
    );
}
