//! `harness merge REPORT…`: a sharded run's reports merged, the checks judged on the union of
//! the replicas' journals.

use std::path::PathBuf;

use reports::Outcome;

use super::args::{Output, TlsArgs};
use super::exit::CliError;
use super::output::{emit, read_report};

pub(super) fn merge_error(e: crate::merge::MergeError) -> CliError {
    match e {
        crate::merge::MergeError::Input(m) => CliError::Input(m),
        crate::merge::MergeError::Journal(e) => CliError::Input(e.to_string()),
        crate::merge::MergeError::Run(m) => CliError::Run(m),
    }
}

pub(super) async fn merge(
    paths: &[PathBuf],
    journals: &[PathBuf],
    fault_urls: &[String],
    token: Option<&str>,
    tls: &TlsArgs,
    output: &Output,
) -> Result<Outcome, CliError> {
    let mut reports = Vec::with_capacity(paths.len());
    for p in paths {
        reports.push((p.display().to_string(), read_report(p)?));
    }
    let merged = crate::merge::merge_reports(&reports).map_err(merge_error)?;
    drop(reports);
    // Fetched journals go to files of their own first: one replica's journal in memory at a time.
    let fetched_dir = tempfile::tempdir()
        .map_err(|e| CliError::Run(format!("cannot create a temporary directory: {e}")))?;
    let mut sources: Vec<PathBuf> = journals.to_vec();
    if !fault_urls.is_empty() {
        let how = tls.connect();
        for (i, url) in fault_urls.iter().enumerate() {
            let dest = fetched_dir.path().join(format!("replica-{i}.jsonl"));
            crate::merge::fetch_journal(url, token, &how, &dest)
                .await
                .map_err(CliError::Run)?;
            sources.push(dest);
        }
    }
    let report = if sources.is_empty() {
        crate::merge::judge(merged, None).map_err(merge_error)?
    } else {
        let (out, _keep) = match &output.report_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| CliError::Run(format!("{}: cannot create: {e}", dir.display())))?;
                (dir.join("journal.jsonl"), None)
            }
            None => {
                let tmp = tempfile::NamedTempFile::new()
                    .map_err(|e| CliError::Run(format!("cannot create a temporary file: {e}")))?;
                (tmp.path().to_path_buf(), Some(tmp))
            }
        };
        let base = merged.report.started_unix_ms.saturating_mul(1000);
        let union =
            crate::merge::merge_journals(&sources, &out, Some(base)).map_err(merge_error)?;
        crate::merge::judge(merged, Some((&out, &union, sources.len()))).map_err(merge_error)?
    };
    emit(&report, output)
}
