//! The report as a terminal prints it: verdict first, then the checks with their evidence, then the
//! figures.
//!
//! The reader of a terminal report is deciding "did it pass, and if not where do I look", so the
//! failing checks and the journal seqs that prove them come before any latency table. Colour is an
//! argument, not a guess: the caller knows whether stdout is a terminal and whether `NO_COLOR` or
//! `CI` is set; this module never looks.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, CellAlignment, Color, ContentArrangement, Table};

use crate::format;
use crate::model::{Conformance, OperationVerdict, Outcome, Report, RuleVerdict, Verdict};

/// Width the tables wrap to: the caller decides colour, not layout, and 120 columns fit CI logs.
const WIDTH: u16 = 120;

/// The whole report as text for a terminal, with ANSI colour only when `color` is true.
pub fn render_terminal(r: &Report, color: bool) -> String {
    let paint = Paint(color);
    let mut out = String::new();
    // Keys, paths and names come from requests: nothing in them reaches the terminal raw.
    let r = &format::printable_report(r);

    out.push_str(&verdict_line(r, paint));
    out.push('\n');
    let why = r.outcome().explanation();
    if !why.is_empty() {
        out.push_str(why);
        out.push('\n');
    }
    if let Some(exec) = &r.exec {
        let code = exec.exit_code.map_or_else(
            || "killed by a signal".to_string(),
            |c| format!("exit code {c}"),
        );
        out.push_str(&format!("command: {} ({code})\n", exec.command.join(" ")));
    }
    if let Some(line) = format::shard_line(r) {
        out.push_str(&line);
        out.push('\n');
    }
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }

    if !r.operations.is_empty() {
        out.push_str("\nOperations\n");
        out.push_str(&operations_table(r, paint));
    }
    if let Some(c) = &r.conformance {
        // A scorecard has no load of its own: each case's figures are in its own report.
        out.push_str("\nScorecard\n");
        out.push_str(&scorecard(c, paint));
        return out;
    }

    out.push_str("\nChecks\n");
    if !r.operations.is_empty() && r.checks.is_empty() {
        out.push_str("  each operation's checks are in its row's evidence and in report.json\n");
    } else if r.checks.is_empty() {
        out.push_str("  no checks ran\n");
    } else {
        out.push_str(&checks_table(r, paint).to_string());
        out.push('\n');
    }

    out.push_str("\nRequests\n");
    out.push_str(&requests_line(r));
    out.push('\n');

    out.push_str("\nLatency (ms)\n");
    if format::latency_is_empty(&r.latency_ms) {
        out.push_str("  no completed requests\n");
    } else {
        out.push_str(&latency_table(r).to_string());
        out.push('\n');
        if r.phases.iter().any(|p| p.latency_intended_ms.is_some()) {
            out.push_str(format::FROM_SCHEDULED);
            out.push('\n');
        }
    }

    if !r.requests.by_status.is_empty() {
        out.push_str("\nStatuses\n");
        out.push_str(&status_table(r, paint).to_string());
        out.push('\n');
    }

    if !r.requests.by_grpc_status.is_empty() {
        out.push_str("\ngRPC statuses\n");
        let mut t = table(paint);
        t.set_header(vec!["grpc status", "count"]);
        for (code, n) in &r.requests.by_grpc_status {
            let color = if code == "OK" {
                Color::Green
            } else {
                Color::Red
            };
            t.add_row(vec![
                paint.cell(code, color),
                Cell::new(n).set_alignment(CellAlignment::Right),
            ]);
        }
        out.push_str(&t.to_string());
        out.push('\n');
    }

    if !r.errors_by_kind.is_empty() {
        out.push_str("\nErrors by kind\n");
        let mut t = table(paint);
        t.set_header(vec!["kind", "count"]);
        for (kind, n) in &r.errors_by_kind {
            t.add_row(vec![
                paint.cell(kind, Color::Red),
                Cell::new(n).set_alignment(CellAlignment::Right),
            ]);
        }
        out.push_str(&t.to_string());
        out.push('\n');
    }

    if !r.connections.is_empty() {
        out.push_str("\nTCP connections\n");
        let mut t = table(paint);
        t.set_header(vec![
            "proxy",
            "connections",
            "unreached",
            "ended",
            "bytes up",
            "bytes down",
            "toxics",
        ]);
        for c in &r.connections {
            let right = |n: u64| Cell::new(n).set_alignment(CellAlignment::Right);
            t.add_row(vec![
                Cell::new(&c.proxy),
                right(c.connections),
                right(c.upstream_unreached),
                Cell::new(format::counts_text(&c.by_end)),
                right(c.bytes_up),
                right(c.bytes_down),
                Cell::new(format::counts_text(&c.by_toxic)),
            ]);
        }
        out.push_str(&t.to_string());
        out.push('\n');
    }

    if !r.statements.is_empty() {
        out.push_str("\nStatements and commands\n");
        let mut t = table(paint);
        t.set_header(vec![
            "proxy",
            "protocol",
            "statements",
            "faults",
            "outcomes",
            "errors",
            "committed",
            "not committed",
            "ambiguous",
        ]);
        for s in &r.statements {
            let right = |n: u64| Cell::new(n).set_alignment(CellAlignment::Right);
            let ambiguous = if s.committed_unanswered > 0 {
                paint.cell(s.committed_unanswered, Color::Yellow)
            } else {
                Cell::new(0)
            }
            .set_alignment(CellAlignment::Right);
            t.add_row(vec![
                Cell::new(&s.proxy),
                Cell::new(&s.protocol),
                right(s.statements),
                Cell::new(format::counts_text(&s.by_fault)),
                Cell::new(format::counts_text(&s.by_outcome)),
                Cell::new(format::counts_text(&s.by_error)),
                right(s.committed),
                right(s.not_committed),
                ambiguous,
            ]);
        }
        out.push_str(&t.to_string());
        out.push('\n');
    }

    if !r.phases.is_empty() {
        out.push_str("\nPhases\n");
        out.push_str(&phases_table(r, paint).to_string());
        out.push('\n');
        for p in r.phases.iter().filter(|p| !p.metrics.is_empty()) {
            let figures: Vec<String> = p
                .metrics
                .iter()
                .map(|(k, v)| format!("{k} = {}", format::metric_value(v)))
                .collect();
            out.push_str(&format!("  {}: {}\n", p.name, figures.join(", ")));
        }
    }
    out
}

/// Whether to emit ANSI sequences; carried around instead of a bare bool so no call site forgets it.
#[derive(Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn cell(self, text: impl ToString, c: Color) -> Cell {
        let cell = Cell::new(text);
        if self.0 {
            cell.fg(c)
        } else {
            cell
        }
    }

    fn bold(self, text: &str, code: &str) -> String {
        if self.0 {
            format!("\x1b[1;{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

fn table(paint: Paint) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(WIDTH)
        // The table must not look at the real stdout: the caller already decided about colour.
        .force_no_tty();
    if paint.0 {
        t.enforce_styling();
    }
    t
}

fn verdict_line(r: &Report, paint: Paint) -> String {
    let outcome = r.outcome();
    let word = paint.bold(
        outcome.word(),
        match outcome {
            Outcome::Passed => "32",
            Outcome::Failed => "31",
            Outcome::NoVerdict | Outcome::Interrupted => "33",
        },
    );
    let failed = r
        .checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .count();
    let mut parts = vec![if r.from_journal {
        format!(
            "{}, journals spanning {}",
            r.scenario,
            format::duration_ms(r.duration_ms)
        )
    } else {
        format!("{} in {}", r.scenario, format::duration_ms(r.duration_ms))
    }];
    if let Some(c) = &r.conformance {
        parts.push(format::rules_line(&c.rules));
    } else if r.operations.is_empty() {
        parts.push(format!("{} of {} checks failed", failed, r.checks.len()));
    } else {
        parts.push(format::operations_line(&r.operations));
    }
    if let Some(seed) = r.seed {
        parts.push(format!("seed {seed}"));
    }
    if (r.time_scale - 1.0).abs() > f64::EPSILON {
        parts.push(format!("time scale {}", r.time_scale));
    }
    if let Some(t) = &r.target {
        parts.push(format!("target {t}"));
    }
    format!("{word}  {}", parts.join(", "))
}

fn verdict_cell(v: Verdict, paint: Paint) -> Cell {
    let color = match v {
        Verdict::Pass => Color::Green,
        Verdict::Fail => Color::Red,
        Verdict::Weak | Verdict::Inconclusive => Color::Yellow,
    };
    paint.cell(format::verdict_word(v), color)
}

fn checks_table(r: &Report, paint: Paint) -> Table {
    let mut t = table(paint);
    t.set_header(vec!["check", "verdict", "summary", "evidence"]);
    for c in &r.checks {
        let lines = format::evidence_lines(&c.evidence, c.findings_total(), format::REST);
        t.add_row(vec![
            Cell::new(&c.name),
            verdict_cell(c.verdict, paint),
            Cell::new(&c.summary),
            Cell::new(lines.join("\n")),
        ]);
    }
    t
}

/// The audit's table: one row per operation, narrow enough for a CI log; each row's summary and
/// evidence follow it as a list, where long text does not squeeze the columns.
fn operations_table(r: &Report, paint: Paint) -> String {
    let mut t = table(paint);
    t.set_header(vec![
        "operation",
        "key",
        "creations per key",
        "replay",
        "mismatch",
        "missing key",
        "verdict",
    ]);
    for o in &r.operations {
        t.add_row(vec![
            Cell::new(o.label()),
            Cell::new(format::key_cell(o)),
            Cell::new(format::or_dash(&o.creations)),
            Cell::new(format::or_dash(&o.replay)),
            Cell::new(format::or_dash(&o.mismatch)),
            Cell::new(format::or_dash(&o.missing_key)),
            paint.cell(
                o.verdict.word(),
                match o.verdict {
                    OperationVerdict::Pass => Color::Green,
                    OperationVerdict::Fail => Color::Red,
                    OperationVerdict::Inconclusive => Color::Yellow,
                },
            ),
        ]);
    }
    let mut out = t.to_string();
    out.push('\n');
    for o in &r.operations {
        out.push_str(&format!(
            "{} {} ({}): {}\n",
            o.verdict.word(),
            o.label(),
            o.operation_id,
            o.summary
        ));
        for line in format::evidence_lines(&o.evidence, o.evidence.len() as u64, format::REST) {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

fn scorecard(c: &Conformance, paint: Paint) -> String {
    let mut t = table(paint);
    t.set_header(vec!["rule", "verdict", "case", "measured"]);
    for rule in &c.rules {
        t.add_row(vec![
            Cell::new(&rule.id),
            paint.cell(
                rule.verdict.word(),
                match rule.verdict {
                    RuleVerdict::Pass => Color::Green,
                    RuleVerdict::Weak => Color::Yellow,
                    RuleVerdict::Fail => Color::Red,
                    RuleVerdict::NotPresent => Color::Grey,
                    RuleVerdict::Inconclusive => Color::Yellow,
                },
            ),
            Cell::new(&rule.case),
            Cell::new(&rule.figure),
        ]);
    }
    let mut out = t.to_string();
    out.push('\n');
    out.push_str(&format!("  {}\n", format::rules_line(&c.rules)));
    for rule in c.rules.iter().filter(|r| r.verdict == RuleVerdict::Fail) {
        out.push_str(&format!(
            "FAIL {} — {} ({}; judged by {})\n",
            rule.id, rule.title, rule.source, rule.check
        ));
        for line in format::evidence_lines(&rule.evidence, rule.evidence.len() as u64, format::REST)
        {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push_str(&format!("adapter: {}\n", c.command.join(" ")));
    for case in &c.cases {
        out.push_str(&format!("  case {}\n", format::case_line(case)));
    }
    out
}

fn requests_line(r: &Report) -> String {
    let q = &r.requests;
    let mut s = format!(
        "  {} sent ({} retries), {} answered, {} not answered; {} req/s answered",
        q.sent,
        q.retries,
        q.completed,
        q.errors,
        format::rate(r.throughput_rps)
    );
    s.push_str(&format::extra_counts(q));
    let figures = format::failure_figures(r);
    let width = figures.iter().map(|f| f.name.len()).max().unwrap_or(0);
    for f in figures {
        s.push_str(&format!(
            "\n  {:<width$}  {:>6}  {}",
            f.name,
            format::percent(f.rate),
            f.counts
        ));
    }
    s
}

fn latency_table(r: &Report) -> Table {
    let mut t = table(Paint(false));
    let mut header = vec!["".to_string()];
    header.extend(
        format::percentiles(&r.latency_ms)
            .iter()
            .map(|(n, _)| n.to_string()),
    );
    header.extend(["mean".to_string(), "samples".to_string()]);
    t.set_header(header);
    let row = |name: &str, l: &crate::model::Latency| {
        let mut cells = vec![Cell::new(name)];
        cells.extend(
            format::percentiles(l)
                .iter()
                .map(|(_, v)| Cell::new(format::ms(*v)).set_alignment(CellAlignment::Right)),
        );
        cells.push(Cell::new(format::ms(l.mean)).set_alignment(CellAlignment::Right));
        cells.push(Cell::new(l.count).set_alignment(CellAlignment::Right));
        cells
    };
    t.add_row(row("all", &r.latency_ms));
    for p in &r.phases {
        t.add_row(row(&p.name, &p.latency_ms));
        if let Some(intended) = &p.latency_intended_ms {
            t.add_row(row(
                &format!("{} (from its scheduled time)", p.name),
                intended,
            ));
        }
    }
    t
}

fn status_color(status: &str) -> Color {
    match status.as_bytes().first() {
        Some(b'2') => Color::Green,
        Some(b'3') => Color::Cyan,
        Some(b'4') => Color::Yellow,
        Some(b'5') => Color::Red,
        _ => Color::Magenta,
    }
}

fn status_table(r: &Report, paint: Paint) -> Table {
    let mut t = table(paint);
    t.set_header(vec!["status", "count", "share"]);
    let total: u64 = r.requests.by_status.values().sum();
    for (status, n) in &r.requests.by_status {
        let share = if total == 0 {
            0.0
        } else {
            *n as f64 * 100.0 / total as f64
        };
        t.add_row(vec![
            paint.cell(status, status_color(status)),
            Cell::new(n).set_alignment(CellAlignment::Right),
            Cell::new(format!("{share:.1}%")).set_alignment(CellAlignment::Right),
        ]);
    }
    t
}

fn phases_table(r: &Report, paint: Paint) -> Table {
    let mut t = table(paint);
    t.set_header(vec![
        "phase",
        "kind",
        "duration",
        "sent",
        "answered",
        "not answered",
        "retries",
        "req/s",
        "p50 ms",
        "p99 ms",
        "max ms",
    ]);
    for p in &r.phases {
        let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
        let errors = if p.requests.errors > 0 {
            paint.cell(p.requests.errors, Color::Red)
        } else {
            Cell::new(0)
        };
        t.add_row(vec![
            Cell::new(&p.name),
            Cell::new(&p.kind),
            right(format::duration_ms(p.duration_ms)),
            right(p.requests.sent.to_string()),
            right(p.requests.completed.to_string()),
            errors.set_alignment(CellAlignment::Right),
            right(p.requests.retries.to_string()),
            right(format::rate(p.throughput_rps)),
            right(format::ms(p.latency_ms.p50)),
            right(format::ms(p.latency_ms.p99)),
            right(format::ms(p.latency_ms.max)),
        ]);
    }
    t
}
