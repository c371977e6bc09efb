//! `harness report REPORT`: a saved report rendered again, or two compared.

use std::io::IsTerminal;
use std::path::Path;

use clap::ValueEnum;
use reports::Outcome;

use super::exit::CliError;
use super::output::{print_out, read_report};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum ReportFormat {
    Table,
    Json,
    Junit,
    Html,
    Markdown,
}

/// How `report --compare` judges: its tolerances file and what it accepts.
pub(super) struct CompareFlags<'a> {
    pub(super) tolerances: Option<&'a Path>,
    pub(super) allow_missing: bool,
    pub(super) force: bool,
}

pub(super) fn report_cmd(
    path: &Path,
    compare: Option<&Path>,
    flags: CompareFlags<'_>,
    format: ReportFormat,
) -> Result<Outcome, CliError> {
    let tolerances = flags.tolerances;
    let base = read_report(path)?;
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    if let Some(new_path) = compare {
        let new = read_report(new_path)?;
        let tol = match tolerances {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| CliError::Input(format!("{}: cannot read: {e}", p.display())))?;
                yaml_config::from_yaml_str::<reports::compare::Tolerances>(
                    &text,
                    &p.display().to_string(),
                )
                .map_err(|e| CliError::Input(e.to_string()))?
            }
            None => reports::compare::Tolerances::default(),
        };
        let cmp =
            reports::compare::compare(&base, &new, &tol).allowing_missing(flags.allow_missing);
        if let (Some(why), false) = (&cmp.mismatch, flags.force) {
            return Err(CliError::Input(format!(
                "{} and {}: {why}; --force compares them anyway",
                path.display(),
                new_path.display()
            )));
        }
        let text = match format {
            ReportFormat::Json => cmp.to_json_pretty(),
            _ => cmp.render_terminal(color),
        };
        print_out(&text)?;
        return Ok(if cmp.is_regression() {
            Outcome::Failed
        } else {
            Outcome::Passed
        });
    }
    let fmt = match format {
        ReportFormat::Table => reports::Format::Table,
        ReportFormat::Json => reports::Format::Json,
        ReportFormat::Junit => reports::Format::Junit,
        ReportFormat::Html => reports::Format::Html,
        ReportFormat::Markdown => reports::Format::Markdown,
    };
    let text = reports::render(&base, fmt, color).map_err(|e| CliError::Run(e.to_string()))?;
    print_out(&text)?;
    Ok(base.outcome())
}
