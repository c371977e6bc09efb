//! `harness conform [--suite S] [--only RULE…] [--require RULE…] -- CMD`: the user's adapter
//! around their retrying client, run once per case of a built-in suite, judged rule by rule.

use std::time::Duration;

use clap::Args;
use reports::Outcome;

use super::args::{parse_duration, Output};
use super::exit::CliError;
use super::output::emit;
use super::signals::stop_on_signals;
use crate::conform::{self, Settings, Suite};

/// `harness conform`'s flags.
#[derive(Debug, Args)]
pub(super) struct ConformArgs {
    /// The suite: `http` (POST /orders with an Idempotency-Key), `grpc`
    /// (orders.v1.Orders/CreateOrder) or `all` (HARNESS_PROTOCOL tells the adapter which).
    #[arg(long, value_enum, default_value_t = Suite::Http)]
    suite: Suite,
    /// Judge only these rules (repeat, or separate with commas); `--list` shows them.
    #[arg(long, value_name = "RULE", value_delimiter = ',')]
    only: Vec<String>,
    /// An optional rule the client must keep (a breaker): not kept, it fails instead of reading
    /// "not present".
    #[arg(long, value_name = "RULE", value_delimiter = ',')]
    require: Vec<String>,
    /// List the rules and cases, then exit.
    #[arg(long)]
    list: bool,
    /// How long the adapter may take in one case before it is stopped.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    case_timeout: Duration,
    /// Timing-free cases run side by side, at most this many at once.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=16))]
    parallel: u16,
    /// Seed of every case's fault server (each case has its own by default).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    #[command(flatten)]
    output: Output,
    /// The adapter and its arguments: it makes HARNESS_CALLS calls to HARNESS_FAULT_URL,
    /// HARNESS_CONCURRENCY at once, and exits 0 whatever their outcome.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

pub(super) async fn conform(a: ConformArgs) -> Result<Outcome, CliError> {
    if a.list {
        super::output::print_out(&listing())?;
        return Ok(Outcome::Passed);
    }
    let rules = conform::suite::select(a.suite, &a.only).map_err(CliError::Input)?;
    conform::suite::known(&a.require, "--require").map_err(CliError::Input)?;
    if let Some(id) = a
        .require
        .iter()
        .find(|id| !rules.iter().any(|r| r.id == id.as_str()))
    {
        return Err(CliError::Input(format!(
            "--require {id:?}: the rule is not in the suite {} (with --only: not among the rules chosen)",
            a.suite.name()
        )));
    }
    if rules.is_empty() {
        return Err(CliError::Input(format!(
            "no rule of the suite {} is left to judge",
            a.suite.name()
        )));
    }
    if a.command.is_empty() {
        return Err(CliError::Input(
            "no adapter given: harness conform [OPTIONS] -- CMD [ARGS…] (the book's conform page has adapters to start from)".into(),
        ));
    }
    if let Some(program) = a.command.first() {
        if !runnable(program) {
            return Err(CliError::Input(format!(
                "cannot start the adapter {program:?}: no such executable (a path, or a name on PATH)"
            )));
        }
    }
    let settings = Settings {
        command: a.command.clone(),
        suite: a.suite,
        require: a.require.clone(),
        case_timeout: a.case_timeout,
        parallel: usize::from(a.parallel),
        seed: a.seed,
    };
    let stop = stop_on_signals();
    let started = std::time::Instant::now();
    let builder = crate::report::ReportBuilder::new(format!("conform {}", a.suite.name()));
    let card = conform::run(&rules, &settings, stop).await;
    if let Some(dir) = &a.output.report_dir {
        for (case, report) in &card.reports {
            reports::write_report_dir(report, &dir.join("cases").join(case))
                .map_err(|e| CliError::Run(e.to_string()))?;
        }
    }
    let report = builder
        .duration(started.elapsed())
        .interrupted(card.interrupted)
        .conformance(card.conformance)
        .build();
    emit(&report, &a.output)
}

/// Whether `program` names an executable file: as a path when it has a `/`, else on `PATH`.
fn runnable(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(std::path::Path::new(program));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))))
}

/// `--list`: every rule with its case, check and source.
fn listing() -> String {
    let mut out = String::from(
        "rules (suite, id, case → check; optional rules read \"not present\" unless --require):\n",
    );
    for r in conform::RULES {
        let case = conform::suite::case(r.case);
        let suite = case.map_or("?", |c| c.protocol.name());
        out.push_str(&format!(
            "  {suite:<4} {:<26} {} → {}{}\n       {}\n       source: {}\n",
            r.id,
            r.case,
            r.check,
            if r.optional { " (optional)" } else { "" },
            r.title,
            r.source
        ));
    }
    out.push_str("\ncases (calls; timing cases run alone):\n");
    for c in conform::CASES {
        out.push_str(&format!(
            "  {:<22} {:>3} calls{}  {}\n",
            c.name,
            c.calls,
            if c.timing { ", timing" } else { "" },
            c.about
        ));
    }
    out
}
