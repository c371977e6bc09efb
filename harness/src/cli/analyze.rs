//! `harness analyze JOURNAL…`: the checks on journals a fault server wrote (several: merged by
//! wall clock).

use std::path::{Path, PathBuf};

use reports::Outcome;

use super::args::Output;
use super::exit::CliError;
use super::merge::merge_error;
use super::output::emit;

pub(super) fn analyze(
    journals: &[PathBuf],
    checks: Option<&Path>,
    output: &Output,
) -> Result<Outcome, CliError> {
    let cfg = match checks {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| CliError::Input(format!("{}: cannot read: {e}", p.display())))?;
            checks::ChecksConfig::parse(&text, &p.display().to_string())
                .map_err(|e| CliError::Input(e.to_string()))?
        }
        None => checks::ChecksConfig::default(),
    };
    let report = match journals {
        [one] => {
            crate::analyze::analyze_file(one, &cfg).map_err(|e| CliError::Input(e.to_string()))?
        }
        several => {
            // Merged by wall clock into a file of their own, then read as one journal.
            let tmp = tempfile::NamedTempFile::new()
                .map_err(|e| CliError::Run(format!("cannot create a temporary file: {e}")))?;
            let union =
                crate::merge::merge_journals(several, tmp.path(), None).map_err(merge_error)?;
            let mut r = crate::analyze::analyze_file(tmp.path(), &cfg)
                .map_err(|e| CliError::Input(e.to_string()))?;
            let names: Vec<String> = several.iter().map(|p| p.display().to_string()).collect();
            r.scenario = format!("analyze {}", names.join(" "));
            r.notes
                .push(crate::merge::clock_note(&union, several.len()));
            r
        }
    };
    emit(&report, output)
}
