//! `report.html`: one self-contained page with the checks and the charts, drawn as inline SVG.
//!
//! The file is opened from CI artifacts, mail attachments and air-gapped machines, so it carries
//! everything it needs: inline CSS, inline SVG, no script, no font, no request to anywhere (a
//! Content-Security-Policy in the page forbids them, so a slip would show as a broken page in a test
//! rather than a silent fetch). The charts are drawn here rather than by a plotting library because
//! they are simple and must stay readable without JavaScript.
//!
//! The requests-over-time chart is the one that matters most: after an incident, clients that retry
//! without jitter come back together, and the stacked bars then show a regular sawtooth of waves at
//! 1, 3, 7, 15, 31 s. Bars are drawn per time window at full resolution up to a limit, and windows
//! are merged only when there are too many to see, so the waves keep their shape.
//!
//! Every string taken from the model goes through [`escape`]: scenario names, check summaries and
//! evidence may carry request data, and the page must not run what a request sent.
//!
//! This file writes the page and its tables; `charts.rs` draws the charts.

mod charts;

use std::fmt::Write as _;

use crate::format;
use crate::model::{CheckResult, Outcome, Report, Verdict};
use charts::{write_latency, write_retry_delays, write_timeline};

/// Evidence items shown before the rest is folded away.
const EVIDENCE_OPEN: usize = 5;
/// Evidence items listed at all; `report.json` has every one.
const EVIDENCE_MAX: usize = 100;
/// Journal seqs listed per evidence item.
const SEQS_SHOWN: usize = 30;

/// The report as one self-contained HTML page.
pub fn to_html(r: &Report) -> String {
    let mut out = String::with_capacity(64 * 1024);
    // Writing to a String cannot fail, so the fmt::Results below carry no information.
    let _ = write_page(r, &mut out);
    out
}

/// Makes text safe in HTML element content and in quoted attribute values; control characters
/// (but newline and tab) and bidirectional overrides are written as `\u{..}`, as on a terminal.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if crate::format::hidden(c) && !matches!(c, '\n' | '\t') => {
                crate::format::push_visible(&mut out, c)
            }
            _ => out.push(ch),
        }
    }
    out
}

const CSS: &str = r#"
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #1d2329; background: #f6f7f9; }
main { max-width: 1180px; margin: 0 auto; }
h1 { margin: 0; font-size: 26px; letter-spacing: .02em; }
h2 { font-size: 18px; margin: 0 0 4px; }
p.note { margin: 0 0 12px; color: #59636e; }
.verdict { border-radius: 8px; padding: 16px 20px; color: #fff; margin-bottom: 16px; }
.verdict.pass { background: #1f8a45; }
.verdict.fail { background: #c62828; }
.verdict.undecided { background: #a15c00; }
.verdict .facts { margin: 6px 0 0; opacity: .95; }
section { background: #fff; border: 1px solid #dde1e6; border-radius: 8px; padding: 16px 20px; margin: 0 0 16px; }
section.tiles { background: none; border: 0; padding: 0; }
.tiles { display: flex; flex-wrap: wrap; gap: 12px; }
.tile { flex: 1 1 130px; background: #fff; border: 1px solid #dde1e6; border-radius: 8px; padding: 10px 14px; }
.tile .v { font-size: 22px; font-weight: 600; }
.tile .k { color: #59636e; font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.tile .n { color: #59636e; font-size: 12px; margin-top: 2px; }
.tile.fail .v { color: #b42318; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 6px 8px; border-bottom: 1px solid #e6e9ed; }
th { font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: #59636e; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600; color: #fff; }
.badge.pass { background: #1f8a45; }
.badge.fail { background: #c62828; }
.badge.weak, .badge.inconclusive { background: #b26a00; }
tr.fail td { background: #fff5f5; }
ul.evidence { margin: 0; padding-left: 18px; }
ul.evidence li { margin: 2px 0; }
.ref { color: #59636e; font-size: 12px; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f0f2f4; padding: 0 3px; border-radius: 3px; }
ul.metrics { list-style: none; margin: 0; padding: 0; font-size: 12px; color: #3b444d; }
table.checks { table-layout: fixed; }
table.checks td { overflow-wrap: anywhere; }
table.checks col.name { width: 13%; } table.checks col.verdict { width: 8%; }
table.checks col.summary { width: 29%; } table.checks col.evidence { width: 30%; }
table.operations td { overflow-wrap: anywhere; font-size: 13px; }
details.operation { margin: 8px 0; } details.operation pre.request { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f7f9; padding: 8px; font-size: 12px; }
details.metric pre { white-space: pre-wrap; overflow-wrap: anywhere; max-height: 240px; overflow: auto; margin: 4px 0; font-size: 11px; }
svg.chart { width: 100%; height: auto; display: block; }
svg.chart text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: #3b444d; }
svg.chart .axis { stroke: #8a939c; stroke-width: 1; }
svg.chart .grid { stroke: #e6e9ed; stroke-width: 1; }
svg.chart text.title { font-size: 12px; fill: #59636e; }
ul.legend { list-style: none; padding: 0; margin: 8px 0 0; display: flex; flex-wrap: wrap; gap: 6px 16px; font-size: 13px; }
ul.legend .swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 6px; vertical-align: -1px; }
.no-data { color: #59636e; font-style: italic; padding: 24px; text-align: center; background: #f6f7f9; border-radius: 6px; }
.stats { margin: 8px 0 0; color: #3b444d; }
footer { color: #8a939c; font-size: 12px; text-align: center; }
"#;

fn write_page(r: &Report, out: &mut String) -> std::fmt::Result {
    let word = r.outcome().word();
    writeln!(out, "<!DOCTYPE html>")?;
    writeln!(out, "<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">")?;
    // The policy is the guarantee behind "self-contained": nothing may load or run, even by mistake.
    writeln!(
        out,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
    )?;
    writeln!(
        out,
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    )?;
    writeln!(
        out,
        "<title>{word}: {} — harness report</title>",
        escape(&r.scenario)
    )?;
    writeln!(out, "<style>{CSS}</style>\n</head>\n<body>\n<main>")?;

    write_header(r, out)?;
    if r.conformance.is_none() {
        write_tiles(r, out)?;
    }
    if !r.operations.is_empty() {
        write_operations(r, out)?;
    }
    if let Some(c) = &r.conformance {
        // A scorecard has no load of its own: each case's figures are in its own report.
        write_scorecard(c, out)?;
        return writeln!(
            out,
            "<footer>report.json schema version {} · written by harness</footer>\n</main>\n</body>\n</html>",
            r.schema_version
        );
    }
    write_checks(r, out)?;

    writeln!(
        out,
        "<section id=\"timeline\">\n<h2>Requests over time</h2>"
    )?;
    write_timeline(r.timeline.as_ref(), out)?;
    writeln!(out, "</section>")?;

    writeln!(
        out,
        "<section id=\"latency\">\n<h2>Latency percentiles</h2>"
    )?;
    write_latency(r, out)?;
    writeln!(out, "</section>")?;

    writeln!(
        out,
        "<section id=\"retry-delays\">\n<h2>Retry delays by attempt</h2>"
    )?;
    write_retry_delays(&r.retry_delays, out)?;
    writeln!(out, "</section>")?;

    write_requests(r, out)?;

    writeln!(
        out,
        "<footer>report.json schema version {} · written by harness</footer>",
        r.schema_version
    )?;
    writeln!(out, "</main>\n</body>\n</html>")
}

fn write_header(r: &Report, out: &mut String) -> std::fmt::Result {
    let outcome = r.outcome();
    let word = outcome.word();
    let class = match outcome {
        Outcome::Passed => "pass",
        Outcome::Failed => "fail",
        Outcome::NoVerdict | Outcome::Interrupted => "undecided",
    };
    let failed = r
        .checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .count();
    let mut facts = vec![format!("ran {}", format::duration_ms(r.duration_ms))];
    if let Some(c) = &r.conformance {
        facts.push(format::rules_line(&c.rules));
    } else if r.operations.is_empty() {
        facts.push(format!("{failed} of {} checks failed", r.checks.len()));
    } else {
        facts.push(format::operations_line(&r.operations));
    }
    if r.started_unix_ms > 0 {
        facts.push(format!(
            "started {}",
            format::utc_timestamp(r.started_unix_ms)
        ));
    }
    if let Some(seed) = r.seed {
        facts.push(format!("seed {seed}"));
    }
    if (r.time_scale - 1.0).abs() > f64::EPSILON {
        facts.push(format!("time scale {}", r.time_scale));
    }
    if let Some(t) = &r.target {
        facts.push(format!("target {t}"));
    }
    writeln!(out, "<header class=\"verdict {class}\">")?;
    writeln!(out, "<h1>{word}: {}</h1>", escape(&r.scenario))?;
    writeln!(out, "<p class=\"facts\">{}</p>", escape(&facts.join(" · ")))?;
    if !outcome.explanation().is_empty() {
        writeln!(
            out,
            "<p class=\"facts\" id=\"outcome\">{}</p>",
            escape(outcome.explanation())
        )?;
    }
    if let Some(exec) = &r.exec {
        let code = exec.exit_code.map_or_else(
            || "killed by a signal".to_string(),
            |c| format!("exit code {c}"),
        );
        writeln!(
            out,
            "<p class=\"facts\">command <code>{}</code> ({code})</p>",
            escape(&exec.command.join(" "))
        )?;
    }
    if let Some(line) = crate::format::shard_line(r) {
        writeln!(out, "<p class=\"facts\" id=\"shard\">{}</p>", escape(&line))?;
    }
    for n in &r.notes {
        writeln!(out, "<p class=\"facts note\">Note: {}</p>", escape(n))?;
    }
    writeln!(out, "</header>")
}

fn write_tiles(r: &Report, out: &mut String) -> std::fmt::Result {
    let q = &r.requests;
    // The figures the verdict rests on first: the checks, then each failure figure with what it
    // counts (the same names as the terminal's and the thresholds' metrics).
    let failed = r
        .checks
        .iter()
        .filter(|c| c.verdict == crate::model::Verdict::Fail)
        .count();
    let mut tiles: Vec<(String, &str, String, bool)> = Vec::new();
    if !r.checks.is_empty() {
        tiles.push((
            format!("{failed} of {}", r.checks.len()),
            "checks failed",
            "the verdict".to_string(),
            failed > 0,
        ));
    }
    for f in format::failure_figures(r) {
        tiles.push((
            format::percent(f.rate),
            f.name,
            format!("{} ({})", f.counts, f.metric),
            false,
        ));
    }
    tiles.push((
        q.sent.to_string(),
        "requests sent",
        format!("{} retries, {} answered", q.retries, q.completed),
        false,
    ));
    tiles.push((
        format::rate(r.throughput_rps),
        "req/s answered",
        "answered requests per second".to_string(),
        false,
    ));
    tiles.push((
        format::ms(r.latency_ms.p99),
        "p99 ms",
        "latency of answered requests".to_string(),
        false,
    ));
    writeln!(out, "<section class=\"tiles\" id=\"summary\">")?;
    for (v, k, n, bad) in tiles {
        writeln!(
            out,
            "<div class=\"tile{}\"><div class=\"v\">{}</div><div class=\"k\">{}</div><div class=\"n\">{}</div></div>",
            if bad { " fail" } else { "" },
            escape(&v),
            escape(k),
            escape(&n)
        )?;
    }
    writeln!(out, "</section>")
}

/// The audit's table, each row linking to its evidence below it: what was sent, what came back,
/// and the checks that judged it.
fn write_scorecard(c: &crate::model::Conformance, out: &mut String) -> std::fmt::Result {
    writeln!(out, "<section id=\"scorecard\">\n<h2>Scorecard</h2>")?;
    writeln!(
        out,
        "<p>{} — suite <code>{}</code>, adapter <code>{}</code></p>",
        escape(&format::rules_line(&c.rules)),
        escape(&c.suite),
        escape(&c.command.join(" "))
    )?;
    writeln!(
        out,
        "<table class=\"operations\">\n<thead><tr><th>rule</th><th>verdict</th><th>measured</th><th>source</th><th>case</th></tr></thead>\n<tbody>"
    )?;
    for rule in &c.rules {
        let v = format::verdict_word(rule.verdict.as_verdict());
        writeln!(
            out,
            "<tr class=\"{v}\" id=\"rule-{}\"><td><code>{}</code> {}</td><td><span class=\"badge {v}\">{}</span></td><td>{}</td><td>{}</td><td><code>{}</code> ({})</td></tr>",
            escape(&rule.id),
            escape(&rule.id),
            escape(&rule.title),
            rule.verdict.word(),
            escape(&rule.figure),
            escape(&rule.source),
            escape(&rule.case),
            escape(&rule.check),
        )?;
    }
    writeln!(out, "</tbody>\n</table>")?;
    for rule in c.rules.iter().filter(|r| !r.evidence.is_empty()) {
        writeln!(
            out,
            "<details class=\"operation\"{}><summary><code>{}</code>: evidence</summary>\n<ul class=\"evidence\">",
            if rule.verdict == crate::model::RuleVerdict::Fail {
                " open"
            } else {
                ""
            },
            escape(&rule.id)
        )?;
        for e in rule.evidence.iter().take(EVIDENCE_MAX) {
            writeln!(out, "<li>{}</li>", escape(&format::evidence_line(e, 20)))?;
        }
        writeln!(out, "</ul>\n</details>")?;
    }
    writeln!(out, "<ul>")?;
    for case in &c.cases {
        writeln!(out, "<li>case {}</li>", escape(&format::case_line(case)))?;
    }
    writeln!(out, "</ul>\n</section>")
}

fn write_operations(r: &Report, out: &mut String) -> std::fmt::Result {
    writeln!(out, "<section id=\"operations\">\n<h2>Operations</h2>")?;
    writeln!(
        out,
        "<table class=\"operations\">\n<thead><tr><th>method</th><th>path</th><th>operation</th><th>key</th><th>creations per key</th><th>replay</th><th>mismatch</th><th>missing key</th><th>verdict</th><th>evidence</th></tr></thead>\n<tbody>"
    )?;
    for o in &r.operations {
        let v = format::verdict_word(o.verdict.as_verdict());
        writeln!(
            out,
            "<tr class=\"{v}\"><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><span class=\"badge {v}\">{}</span></td><td><a href=\"#{}\">{}</a></td></tr>",
            escape(&o.method),
            escape(&o.path),
            escape(&o.operation_id),
            escape(&format::key_cell(o)),
            escape(format::or_dash(&o.creations)),
            escape(format::or_dash(&o.replay)),
            escape(format::or_dash(&o.mismatch)),
            escape(format::or_dash(&o.missing_key)),
            o.verdict.word(),
            escape(&o.anchor()),
            escape(&o.summary),
        )?;
    }
    writeln!(out, "</tbody>\n</table>")?;
    for o in &r.operations {
        writeln!(
            out,
            "<details class=\"operation\" id=\"{}\"{}><summary><code>{}</code> ({}): {}</summary>",
            escape(&o.anchor()),
            if o.verdict == crate::model::OperationVerdict::Fail {
                " open"
            } else {
                ""
            },
            escape(&o.label()),
            escape(&o.operation_id),
            escape(&o.summary)
        )?;
        writeln!(out, "<p>probe: {}</p>", escape(o.probe.describe()))?;
        if !o.evidence.is_empty() {
            writeln!(out, "<ul class=\"evidence\">")?;
            for e in o.evidence.iter().take(EVIDENCE_MAX) {
                writeln!(
                    out,
                    "<li>{}</li>",
                    escape(&format::evidence_line(e, SEQS_SHOWN))
                )?;
            }
            writeln!(out, "</ul>")?;
        }
        if !o.checks.is_empty() {
            writeln!(out, "<table class=\"checks\">\n<tbody>")?;
            for c in &o.checks {
                write_check_row(c, out)?;
            }
            writeln!(out, "</tbody>\n</table>")?;
        }
        if let Some(req) = &o.request {
            writeln!(out, "<pre class=\"request\">{}</pre>", escape(req))?;
        }
        writeln!(out, "</details>")?;
    }
    writeln!(out, "</section>")
}

fn write_checks(r: &Report, out: &mut String) -> std::fmt::Result {
    writeln!(out, "<section id=\"checks\">\n<h2>Checks</h2>")?;
    if r.checks.is_empty() {
        writeln!(out, "<p class=\"no-data\">No checks ran.</p>\n</section>")?;
        return Ok(());
    }
    writeln!(
        out,
        "<table class=\"checks\">\n<colgroup><col class=\"name\"><col class=\"verdict\"><col class=\"summary\"><col class=\"evidence\"><col class=\"metrics\"></colgroup>\n<thead><tr><th>check</th><th>verdict</th><th>summary</th><th>evidence</th><th>metrics</th></tr></thead>\n<tbody>"
    )?;
    for c in &r.checks {
        write_check_row(c, out)?;
    }
    writeln!(out, "</tbody>\n</table>\n</section>")
}

fn write_check_row(c: &CheckResult, out: &mut String) -> std::fmt::Result {
    let v = format::verdict_word(c.verdict);
    writeln!(
        out,
        "<tr class=\"{v}\"><td><code>{}</code></td><td><span class=\"badge {v}\">{v}</span></td><td>{}</td><td>",
        escape(&c.name),
        escape(&c.summary)
    )?;
    if !c.evidence.is_empty() {
        let item = |e: &crate::model::Evidence| {
            let mut li = format!("<li>{}", escape(&e.detail));
            let mut refs = Vec::new();
            if let Some(k) = &e.key {
                refs.push(format!("key <code>{}</code>", escape(k)));
            }
            if !e.seqs.is_empty() {
                refs.push(format!(
                    "seq {}",
                    escape(&format::seqs(&e.seqs, SEQS_SHOWN))
                ));
            }
            if !refs.is_empty() {
                li.push_str(&format!(" <span class=\"ref\">{}</span>", refs.join(" · ")));
            }
            li.push_str("</li>");
            li
        };
        writeln!(out, "<ul class=\"evidence\">")?;
        for e in c.evidence.iter().take(EVIDENCE_OPEN) {
            writeln!(out, "{}", item(e))?;
        }
        writeln!(out, "</ul>")?;
        if c.evidence.len() > EVIDENCE_OPEN {
            let rest = &c.evidence[EVIDENCE_OPEN..c.evidence.len().min(EVIDENCE_MAX)];
            writeln!(
                out,
                "<details><summary>{} more</summary><ul class=\"evidence\">",
                c.evidence.len() - EVIDENCE_OPEN
            )?;
            for e in rest {
                writeln!(out, "{}", item(e))?;
            }
            if let Some(l) = format::more_findings(
                c.evidence.len().min(EVIDENCE_MAX),
                c.evidence.len(),
                c.findings_total(),
                format::REST,
            ) {
                writeln!(out, "<li>{}</li>", escape(&l))?;
            }
            writeln!(out, "</ul></details>")?;
        } else if let Some(l) = format::more_findings(
            c.evidence.len(),
            c.evidence.len(),
            c.findings_total(),
            format::REST,
        ) {
            writeln!(out, "<p class=\"more\">{}</p>", escape(&l))?;
        }
    }
    write!(out, "</td><td>")?;
    if !c.metrics.is_empty() {
        write!(out, "<ul class=\"metrics\">")?;
        for (k, val) in &c.metrics {
            let shown = format::metric_value(val);
            // Structured metrics (lists of groups, per-rule objects) would swamp the table: fold
            // them, pretty-printed, behind their name.
            if shown.len() > METRIC_INLINE_MAX {
                let pretty = serde_json::to_string_pretty(val).unwrap_or(shown);
                write!(
                    out,
                    "<li><details class=\"metric\"><summary>{}</summary><pre>{}</pre></details></li>",
                    escape(k),
                    escape(&pretty)
                )?;
            } else {
                write!(out, "<li>{} = <b>{}</b></li>", escape(k), escape(&shown))?;
            }
        }
        write!(out, "</ul>")?;
    }
    writeln!(out, "</td></tr>")
}

/// Longest metric value shown inline in the checks table; longer ones fold into a `<details>`.
const METRIC_INLINE_MAX: usize = 60;

fn write_requests(r: &Report, out: &mut String) -> std::fmt::Result {
    writeln!(out, "<section id=\"requests\">\n<h2>Requests</h2>")?;
    let q = &r.requests;
    writeln!(
        out,
        "<p>{} sent, {} completed, {} errors, {} retries{}.</p>",
        q.sent,
        q.completed,
        q.errors,
        q.retries,
        format::extra_counts(q)
    )?;
    if !q.by_status.is_empty() || !r.errors_by_kind.is_empty() || !q.by_grpc_status.is_empty() {
        writeln!(
            out,
            "<table class=\"statuses\"><thead><tr><th>status or error</th><th class=\"num\">count</th></tr></thead><tbody>"
        )?;
        for (status, c) in &q.by_status {
            writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{c}</td></tr>",
                escape(status)
            )?;
        }
        for (code, c) in &q.by_grpc_status {
            writeln!(
                out,
                "<tr><td>grpc: {}</td><td class=\"num\">{c}</td></tr>",
                escape(code)
            )?;
        }
        for (kind, c) in &r.errors_by_kind {
            writeln!(
                out,
                "<tr><td>error: {}</td><td class=\"num\">{c}</td></tr>",
                escape(kind)
            )?;
        }
        writeln!(out, "</tbody></table>")?;
    }
    if !r.connections.is_empty() {
        writeln!(out, "<h2 style=\"margin-top:16px\">TCP connections</h2>")?;
        writeln!(
            out,
            "<table class=\"connections\"><thead><tr><th>proxy</th><th class=\"num\">connections</th><th class=\"num\">unreached</th><th>ended</th><th class=\"num\">bytes up</th><th class=\"num\">bytes down</th><th>toxics</th></tr></thead><tbody>"
        )?;
        for c in &r.connections {
            writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                escape(&c.proxy),
                c.connections,
                c.upstream_unreached,
                escape(&format::counts_text(&c.by_end)),
                c.bytes_up,
                c.bytes_down,
                escape(&format::counts_text(&c.by_toxic)),
            )?;
        }
        writeln!(out, "</tbody></table>")?;
    }
    if !r.statements.is_empty() {
        writeln!(
            out,
            "<h2 style=\"margin-top:16px\">Statements and commands</h2>"
        )?;
        writeln!(
            out,
            "<table class=\"statements\"><thead><tr><th>proxy</th><th>protocol</th><th class=\"num\">statements</th><th>faults</th><th>outcomes</th><th>errors</th><th class=\"num\">committed</th><th class=\"num\">not committed</th><th class=\"num\">ambiguous</th></tr></thead><tbody>"
        )?;
        for s in &r.statements {
            writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                escape(&s.proxy),
                escape(&s.protocol),
                s.statements,
                escape(&format::counts_text(&s.by_fault)),
                escape(&format::counts_text(&s.by_outcome)),
                escape(&format::counts_text(&s.by_error)),
                s.committed,
                s.not_committed,
                s.committed_unanswered,
            )?;
        }
        writeln!(out, "</tbody></table>")?;
    }
    if !r.phases.is_empty() {
        writeln!(out, "<h2 style=\"margin-top:16px\">Phases</h2>")?;
        writeln!(
            out,
            "<table class=\"phases\"><thead><tr><th>phase</th><th>kind</th><th class=\"num\">duration</th><th class=\"num\">sent</th><th class=\"num\">errors</th><th class=\"num\">retries</th><th class=\"num\">req/s</th><th class=\"num\">p50 ms</th><th class=\"num\">p99 ms</th><th class=\"num\">max ms</th><th>figures</th></tr></thead><tbody>"
        )?;
        for p in &r.phases {
            let figures: Vec<String> = p
                .metrics
                .iter()
                .map(|(k, v)| format!("{k} = {}", format::metric_value(v)))
                .collect();
            writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                escape(&p.name),
                escape(&p.kind),
                format::duration_ms(p.duration_ms),
                p.requests.sent,
                p.requests.errors,
                p.requests.retries,
                format::rate(p.throughput_rps),
                format::ms(p.latency_ms.p50),
                format::ms(p.latency_ms.p99),
                format::ms(p.latency_ms.max),
                escape(&figures.join(", "))
            )?;
        }
        writeln!(out, "</tbody></table>")?;
    }
    writeln!(out, "</section>")
}
