//! What the commands print and read back: a report written to the report directory and printed
//! in the chosen format, text on stdout (a closed pipe is no error), a saved report read within
//! its bound.

use std::io::{IsTerminal, Write};
use std::path::Path;

use reports::{Outcome, Report};

use super::args::{Format, Output};
use super::exit::CliError;

pub(super) fn print_out(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let r = out.write_all(text.as_bytes()).and_then(|_| {
        if text.ends_with('\n') {
            Ok(())
        } else {
            out.write_all(b"\n")
        }
    });
    match r {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::Run(format!("cannot write to stdout: {e}"))),
    }
}

/// Writes the report directory and prints the chosen format; returns the run's outcome.
pub(super) fn emit(report: &Report, output: &Output) -> Result<Outcome, CliError> {
    let written = match &output.report_dir {
        Some(dir) => {
            Some(reports::write_report_dir(report, dir).map_err(|e| CliError::Run(e.to_string()))?)
        }
        None => None,
    };
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let text = match output.format {
        Format::Table => reports::render(report, reports::Format::Table, color),
        Format::Json => reports::render(report, reports::Format::Json, false),
        Format::Markdown => reports::render(report, reports::Format::Markdown, false),
    }
    .map_err(|e| CliError::Run(e.to_string()))?;
    print_out(&text)?;
    // On stderr, so a JSON or Markdown report on stdout stays whole.
    if let Some(files) = written {
        eprintln!("reports written:");
        for path in [&files.json, &files.junit, &files.html, &files.markdown] {
            eprintln!("  {}", path.display());
        }
    }
    Ok(report.outcome())
}

/// Largest `report.json` read: a run's report is a few hundred KiB at most (nothing in it grows
/// with the requests), so a bigger file is not one, and is refused before it is read.
const REPORT_MAX_BYTES: u64 = 64 << 20;

/// A saved report, read within [`REPORT_MAX_BYTES`]; bad input (exit 2) in words otherwise.
pub(super) fn read_report(p: &Path) -> Result<Report, CliError> {
    use std::io::Read as _;
    let bad = |m: String| CliError::Input(format!("{}: {m}", p.display()));
    let file = std::fs::File::open(p).map_err(|e| bad(format!("cannot read: {e}")))?;
    let mut text = String::new();
    file.take(REPORT_MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| bad(format!("cannot read: {e}")))?;
    if text.len() as u64 > REPORT_MAX_BYTES {
        return Err(bad(format!(
            "more than {} MiB: not a report.json the harness wrote (a report holds histograms, \
             not samples)",
            REPORT_MAX_BYTES >> 20
        )));
    }
    reports::from_json(&text).map_err(|e| bad(e.to_string()))
}
