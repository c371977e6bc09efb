//! `summary.md`: the report as a GitHub step summary (or any Markdown viewer).
//!
//! A step summary is read in the pull request's checks tab, so it leads with the verdict and the
//! failing checks' evidence, and stays small: GitHub truncates summaries past 1 MiB, and a full
//! journal dump belongs in `report.json`. Every string from the model is escaped, since a check
//! summary holding `|` would otherwise split a table cell and `<` could open an HTML tag.

use std::fmt::Write as _;

use crate::format;
use crate::model::{Outcome, Report, Verdict};

/// Evidence items listed per failed check.
const EVIDENCE_SHOWN: usize = 10;
/// Journal seqs listed per evidence item.
const SEQS_SHOWN: usize = 20;

/// The report as Markdown for a CI step summary.
pub fn to_markdown(r: &Report) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail, so the fmt::Results below carry no information.
    let _ = write_markdown(r, &mut out);
    out
}

fn write_markdown(r: &Report, out: &mut String) -> std::fmt::Result {
    let outcome = r.outcome();
    let icon = match outcome {
        Outcome::Passed => "✅",
        Outcome::Failed => "❌",
        Outcome::NoVerdict | Outcome::Interrupted => "⚠️",
    };
    writeln!(out, "## {icon} {}: {}", outcome.word(), escape(&r.scenario))?;
    writeln!(out)?;
    if !outcome.explanation().is_empty() {
        writeln!(out, "**{}**", outcome.explanation())?;
        writeln!(out)?;
    }
    let mut facts = vec![
        format!("duration {}", format::duration_ms(r.duration_ms)),
        format!("{} requests sent", r.requests.sent),
        format!("{} req/s", format::rate(r.throughput_rps)),
    ];
    if let Some(seed) = r.seed {
        facts.push(format!("seed {seed}"));
    }
    if (r.time_scale - 1.0).abs() > f64::EPSILON {
        facts.push(format!("time scale {}", r.time_scale));
    }
    if let Some(t) = &r.target {
        facts.push(format!("target {}", escape(t)));
    }
    writeln!(out, "{}", facts.join(" · "))?;
    if let Some(exec) = &r.exec {
        let code = exec.exit_code.map_or_else(
            || "killed by a signal".to_string(),
            |c| format!("exit code {c}"),
        );
        writeln!(out)?;
        writeln!(out, "Command: {} ({code})", escape(&exec.command.join(" ")))?;
    }
    if let Some(line) = crate::format::shard_line(r) {
        writeln!(out)?;
        writeln!(out, "{}", escape(&line))?;
    }
    for n in &r.notes {
        writeln!(out)?;
        writeln!(out, "> Note: {}", escape(n))?;
    }

    if !r.operations.is_empty() {
        write_operations(r, out)?;
    }
    if let Some(c) = &r.conformance {
        // A scorecard has no load of its own: each case's figures are in its own report.
        return write_scorecard(c, out);
    }

    writeln!(out)?;
    writeln!(out, "### Checks")?;
    writeln!(out)?;
    if !r.operations.is_empty() && r.checks.is_empty() {
        writeln!(
            out,
            "Each operation's checks are in its evidence and in report.json."
        )?;
    } else if r.checks.is_empty() {
        writeln!(out, "No checks ran.")?;
    } else {
        writeln!(out, "| | check | verdict | summary |")?;
        writeln!(out, "| --- | --- | --- | --- |")?;
        for c in &r.checks {
            writeln!(
                out,
                "| {} | {} | {} | {} |",
                verdict_icon(c.verdict),
                escape(&c.name),
                format::verdict_word(c.verdict),
                escape(&c.summary)
            )?;
        }
    }

    let failed: Vec<_> = r
        .checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .collect();
    if !failed.is_empty() {
        writeln!(out)?;
        writeln!(out, "### Evidence")?;
        for c in failed {
            writeln!(out)?;
            writeln!(out, "**❌ {}**: {}", escape(&c.name), escape(&c.summary))?;
            writeln!(out)?;
            if c.evidence.is_empty() {
                writeln!(out, "- (the check gave no evidence)")?;
            }
            for e in c.evidence.iter().take(EVIDENCE_SHOWN) {
                writeln!(out, "- {}", escape(&format::evidence_line(e, SEQS_SHOWN)))?;
            }
            let shown = c.evidence.len().min(EVIDENCE_SHOWN);
            if let Some(l) =
                format::more_findings(shown, c.evidence.len(), c.findings_total(), format::REST)
            {
                writeln!(out, "- {}", escape(&l))?;
            }
            if !c.metrics.is_empty() {
                let figures: Vec<String> = c
                    .metrics
                    .iter()
                    .map(|(k, v)| {
                        // Structured metrics (per-group tables) belong in report.json, not a summary.
                        let shown = format::metric_value(v);
                        if shown.len() > 60 {
                            format!("{k} = (see report.json)")
                        } else {
                            format!("{k} = {shown}")
                        }
                    })
                    .collect();
                writeln!(out)?;
                writeln!(out, "Metrics: {}", escape(&figures.join(", ")))?;
            }
        }
    }

    writeln!(out)?;
    writeln!(out, "### Latency (ms)")?;
    writeln!(out)?;
    if format::latency_is_empty(&r.latency_ms) {
        writeln!(out, "No completed requests.")?;
    } else {
        let names: Vec<&str> = format::percentiles(&r.latency_ms)
            .iter()
            .map(|(n, _)| *n)
            .collect();
        writeln!(out, "| | {} |", names.join(" | "))?;
        writeln!(out, "| --- |{}", " ---: |".repeat(names.len()))?;
        write_latency_row(out, "all", &r.latency_ms)?;
        for p in &r.phases {
            write_latency_row(out, &p.name, &p.latency_ms)?;
        }
    }

    writeln!(out)?;
    writeln!(out, "### Requests")?;
    writeln!(out)?;
    let q = &r.requests;
    writeln!(
        out,
        "{} sent ({} retries), {} answered, {} not answered{}.",
        q.sent,
        q.retries,
        q.completed,
        q.errors,
        format::extra_counts(q),
    )?;
    let figures = format::failure_figures(r);
    if !figures.is_empty() {
        writeln!(out)?;
        writeln!(out, "| figure | value | counts | threshold metric |")?;
        writeln!(out, "| --- | ---: | --- | --- |")?;
        for f in figures {
            writeln!(
                out,
                "| {} | {} | {} | `{}` |",
                f.name,
                format::percent(f.rate),
                escape(&f.counts),
                f.metric
            )?;
        }
    }
    if !q.by_status.is_empty() || !r.errors_by_kind.is_empty() || !q.by_grpc_status.is_empty() {
        writeln!(out)?;
        writeln!(out, "| status or error | count |")?;
        writeln!(out, "| --- | ---: |")?;
        for (status, n) in &q.by_status {
            writeln!(out, "| {} | {n} |", escape(status))?;
        }
        for (code, n) in &q.by_grpc_status {
            writeln!(out, "| grpc: {} | {n} |", escape(code))?;
        }
        for (kind, n) in &r.errors_by_kind {
            writeln!(out, "| error: {} | {n} |", escape(kind))?;
        }
    }

    if !r.connections.is_empty() {
        writeln!(out)?;
        writeln!(out, "### TCP connections")?;
        writeln!(out)?;
        writeln!(
            out,
            "| proxy | connections | unreached | ended | bytes up | bytes down | toxics |"
        )?;
        writeln!(out, "| --- | ---: | ---: | --- | ---: | ---: | --- |")?;
        for c in &r.connections {
            writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                escape(&c.proxy),
                c.connections,
                c.upstream_unreached,
                escape(&format::counts_text(&c.by_end)),
                c.bytes_up,
                c.bytes_down,
                escape(&format::counts_text(&c.by_toxic)),
            )?;
        }
    }

    if !r.statements.is_empty() {
        writeln!(out)?;
        writeln!(out, "### Statements and commands")?;
        writeln!(out)?;
        writeln!(
            out,
            "| proxy | protocol | statements | faults | outcomes | errors | committed | not committed | ambiguous |"
        )?;
        writeln!(
            out,
            "| --- | --- | ---: | --- | --- | --- | ---: | ---: | ---: |"
        )?;
        for s in &r.statements {
            writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
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
    }

    if !r.phases.is_empty() {
        writeln!(out)?;
        writeln!(out, "### Phases")?;
        writeln!(out)?;
        writeln!(
            out,
            "| phase | kind | duration | sent | not answered | retries | req/s |"
        )?;
        writeln!(out, "| --- | --- | ---: | ---: | ---: | ---: | ---: |")?;
        for p in &r.phases {
            writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                escape(&p.name),
                escape(&p.kind),
                format::duration_ms(p.duration_ms),
                p.requests.sent,
                p.requests.errors,
                p.requests.retries,
                format::rate(p.throughput_rps)
            )?;
        }
    }
    Ok(())
}

/// The audit's table, then the evidence of every operation that did not pass.
fn write_scorecard(c: &crate::model::Conformance, out: &mut String) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out, "### Scorecard")?;
    writeln!(out)?;
    writeln!(
        out,
        "{} (suite {}, adapter `{}`).",
        escape(&format::rules_line(&c.rules)),
        escape(&c.suite),
        escape(&c.command.join(" "))
    )?;
    writeln!(out)?;
    writeln!(out, "| | rule | verdict | measured | source | case |")?;
    writeln!(out, "| --- | --- | --- | --- | --- | --- |")?;
    for rule in &c.rules {
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            verdict_icon(rule.verdict.as_verdict()),
            escape(&format!("{}: {}", rule.id, rule.title)),
            rule.verdict.word(),
            escape(&rule.figure),
            escape(&rule.source),
            escape(&rule.case),
        )?;
    }
    let problems: Vec<_> = c.cases.iter().filter(|k| k.problem.is_some()).collect();
    if !problems.is_empty() {
        writeln!(out)?;
        for case in problems {
            writeln!(out, "> Case {}", escape(&format::case_line(case)))?;
        }
    }
    Ok(())
}

fn write_operations(r: &Report, out: &mut String) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out, "### Operations")?;
    writeln!(out)?;
    writeln!(out, "{}.", escape(&format::operations_line(&r.operations)))?;
    writeln!(out)?;
    writeln!(
        out,
        "| | method | path | operation | key | creations per key | replay | mismatch | missing key | verdict | summary |"
    )?;
    writeln!(
        out,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )?;
    for o in &r.operations {
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            verdict_icon(o.verdict.as_verdict()),
            escape(&o.method),
            escape(&o.path),
            escape(&o.operation_id),
            escape(&format::key_cell(o)),
            escape(format::or_dash(&o.creations)),
            escape(format::or_dash(&o.replay)),
            escape(format::or_dash(&o.mismatch)),
            escape(format::or_dash(&o.missing_key)),
            o.verdict.word(),
            escape(&o.summary)
        )?;
    }
    let shown: Vec<_> = r
        .operations
        .iter()
        .filter(|o| o.verdict != crate::model::OperationVerdict::Pass && !o.evidence.is_empty())
        .collect();
    if !shown.is_empty() {
        writeln!(out)?;
        writeln!(out, "#### Operation evidence")?;
        for o in shown {
            writeln!(out)?;
            writeln!(
                out,
                "**{} {}** ({}): {}",
                verdict_icon(o.verdict.as_verdict()),
                escape(&o.label()),
                escape(&o.operation_id),
                escape(&o.summary)
            )?;
            writeln!(out)?;
            for e in o.evidence.iter().take(EVIDENCE_SHOWN) {
                writeln!(out, "- {}", escape(&format::evidence_line(e, SEQS_SHOWN)))?;
            }
            let shown = o.evidence.len().min(EVIDENCE_SHOWN);
            if let Some(l) = format::more_findings(
                shown,
                o.evidence.len(),
                o.evidence.len() as u64,
                format::REST,
            ) {
                writeln!(out, "- {}", escape(&l))?;
            }
        }
    }
    Ok(())
}

fn write_latency_row(out: &mut String, name: &str, l: &crate::model::Latency) -> std::fmt::Result {
    let cells: Vec<String> = format::percentiles(l)
        .iter()
        .map(|(_, v)| format::ms(*v))
        .collect();
    writeln!(out, "| {} | {} |", escape(name), cells.join(" | "))
}

/// ✅ for pass, ❌ for fail, ⚠️ for a verdict that passes but deserves a look.
pub fn verdict_icon(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "✅",
        Verdict::Fail => "❌",
        Verdict::Weak | Verdict::Inconclusive => "⚠️",
    }
}

/// Makes model text inert in Markdown, in and out of table cells.
///
/// `|` would end a table cell, `<` could start raw HTML, `*`, `_`, `` ` ``, `[` and `\` would start
/// emphasis, code, links or escapes, and a newline would end a table row; all are neutralised.
/// Control and bidirectional-override characters are written as `\u{..}`, as on a terminal: the
/// file is read in terminals (`cat`, CI logs) as often as rendered.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '|' | '\\' | '`' | '*' | '_' | '[' | ']' | '#' | '~' => {
                out.push('\\');
                out.push(ch);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\r' => {}
            '\n' => out.push(' '),
            c if format::hidden(c) => format::push_visible(&mut out, c),
            _ => out.push(ch),
        }
    }
    out
}
