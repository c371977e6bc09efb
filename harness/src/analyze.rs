//! `harness analyze JOURNAL`: the checks on a journal file, read as a stream.
//!
//! The file is read line by line and each entry is handed to the checks and forgotten, so memory
//! follows the number of open operations, not the size of the file.

use std::io::BufRead;
use std::path::Path;

use history::Entry;
use reports::model::Report;

use crate::metrics::latency_ms;
use crate::report::ReportBuilder;
use crate::tally::JournalTally;
use checks::operations::Step;
use checks::{Attempt, CheckSet, ChecksConfig, ChecksRunner, ClosedOperation, OperationTracker};

/// A journal that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("{path}: cannot read: {source}")]
    /// The journal file could not be read.
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: not a journal entry: {message}")]
    /// A line is not a journal entry.
    Entry {
        /// The file.
        path: String,
        /// The line, from 1.
        line: usize,
        /// The column, from 1.
        column: usize,
        /// What is wrong with it.
        message: String,
    },
}

/// Entries parsed per batch handed from the reader thread to the checks. Small on purpose: a
/// batch's memory crosses to the other core and back to be freed, and the reader's next
/// allocations reuse it; 64 entries (about 64 KB) are still in cache when that happens, 2048 were
/// not (about 25 % slower on a million entries).
const BATCH: usize = 64;
/// Longest journal line read (an entry is a few hundred bytes; captured headers add some).
pub const MAX_LINE: usize = 1 << 20;
/// Batches in flight between the two threads.
const BATCHES_IN_FLIGHT: usize = 8;

/// Reads `path` and runs the checks of `cfg` on it (see [`judge_stream`]).
pub fn analyze_file(path: &Path, cfg: &ChecksConfig) -> Result<Report, AnalyzeError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| AnalyzeError::Read {
        path: shown.clone(),
        source,
    })?;
    analyze_reader(file, &shown, cfg)
}

/// Runs the checks of `cfg` on a journal read from `file`; `shown` names it in messages.
pub fn analyze_reader<R: std::io::Read + Send + 'static>(
    file: R,
    shown: &str,
    cfg: &ChecksConfig,
) -> Result<Report, AnalyzeError> {
    analyze_with(file, shown, cfg, None)
}

/// [`analyze_reader`] with what a load driver measured (`harness merge`): the checks then judge
/// the thresholds on the driver's figures, and times count from `time_origin_us`.
pub fn analyze_with<R: std::io::Read + Send + 'static>(
    file: R,
    shown: &str,
    cfg: &ChecksConfig,
    driver: Option<(history::ClientFigures, u64)>,
) -> Result<Report, AnalyzeError> {
    // Counted in windows of 100 ms from the first request, charted in about 60 at the end.
    let mut tally = JournalTally::new(std::time::Duration::from_millis(100), None);
    let judged = judge_stream(file, shown, cfg, |e| tally.observe(e))?;
    let first_us = tally.first_recv_us();
    // The journal's first request is where the run began: evidence quotes times from there, as
    // the chart does.
    let facts = match driver {
        Some((client, origin)) => history::Facts {
            client: Some(client),
            time_origin_us: origin,
            ..history::Facts::default()
        },
        None => history::Facts {
            time_origin_us: first_us.unwrap_or(0),
            ..history::Facts::default()
        },
    };
    let checks = judged.finish(&facts);
    let span_us = tally.span_us();
    let requests = tally.requests().clone();
    let throughput = if span_us > 0 {
        requests.completed as f64 / (span_us as f64 / 1e6)
    } else {
        0.0
    };
    Ok(ReportBuilder::new(format!("analyze {shown}"))
        .started_unix_ms(0)
        .duration(std::time::Duration::from_micros(span_us))
        .from_journal(true)
        .requests(requests)
        .latency(latency_ms(tally.latency()), throughput)
        .checks(checks)
        .timeline(Some(tally.timeline_within(60)))
        .connections(tally.connections())
        .statements(tally.statements())
        .build())
}

/// A journal the checks have seen to its end, waiting for the facts gathered beside it.
pub(crate) struct Judged {
    checks: CheckSet,
    still_open: Vec<ClosedOperation>,
}

impl Judged {
    /// The verdicts, given the facts.
    pub(crate) fn finish(self, facts: &history::Facts) -> Vec<reports::model::CheckResult> {
        self.checks.finish(self.still_open, facts)
    }
}

/// Streams the journal in `file` through the checks of `cfg`, handing each entry to `observe`
/// too (on this thread, in `seq` order) before it is forgotten.
///
/// Why two threads: parsing a line and placing it in its operation cost about as much as judging
/// it. A reader thread parses batches of entries and groups them into operations while this one
/// feeds them to the checks, so the two halves overlap.
pub(crate) fn judge_stream<R: std::io::Read + Send + 'static>(
    file: R,
    shown: &str,
    cfg: &ChecksConfig,
    mut observe: impl FnMut(&Entry),
) -> Result<Judged, AnalyzeError> {
    let shown = shown.to_string();
    let (tx, rx) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
    // Judged batches go back to the reader, which frees them: memory is cheapest to free on the
    // thread that allocated it.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let reader_shown = shown.clone();
    let (mut tracker, mut checks) = ChecksRunner::split(cfg);
    let reader = std::thread::Builder::new()
        .name("journal-reader".into())
        .spawn(move || {
            read_batches(file, &reader_shown, &mut tracker, &tx, &done_rx)?;
            Ok(tracker.finish())
        })
        .map_err(|source| AnalyzeError::Read {
            path: shown.clone(),
            source,
        })?;
    for batch in rx.iter() {
        for t in &batch {
            observe(&t.entry);
            if let Some(step) = &t.step {
                checks.observe(&Attempt {
                    entry: &t.entry,
                    retry_after_s: checks::journal::recorded_retry_after_s(&t.entry),
                    step,
                });
            }
            checks.close(&t.closed);
        }
        // The reader may have finished already; then the batch is freed here.
        let _ = done_tx.send(batch);
    }
    // The channel ended: the reader is done, with an error if the file was bad.
    match reader.join() {
        Ok(Ok(still_open)) => Ok(Judged { checks, still_open }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(AnalyzeError::Read {
            path: shown,
            source: std::io::Error::other("the journal reader stopped unexpectedly"),
        }),
    }
}

/// A journal entry placed in its operation, with the operations that closed on the way.
struct Tracked {
    entry: Entry,
    /// Its place in its operation; none for a proxied TCP connection, which no check judges.
    step: Option<Step>,
    closed: Vec<ClosedOperation>,
}

/// A journal read entry by entry: lines bounded to [`MAX_LINE`], blank lines skipped, a line that
/// is not an entry an error naming the file, line and column.
pub(crate) struct JournalLines<R> {
    shown: String,
    reader: std::io::BufReader<R>,
    line: usize,
    buf: Vec<u8>,
}

impl<R: std::io::Read> JournalLines<R> {
    pub(crate) fn new(file: R, shown: &str) -> Self {
        JournalLines {
            shown: shown.to_string(),
            reader: std::io::BufReader::with_capacity(1 << 20, file),
            line: 0,
            buf: Vec::with_capacity(1024),
        }
    }

    /// The next entry, `None` at the end.
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry>, AnalyzeError> {
        loop {
            self.buf.clear();
            let n = std::io::Read::take(&mut self.reader, MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut self.buf)
                .map_err(|source| AnalyzeError::Read {
                    path: self.shown.clone(),
                    source,
                })?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            if self.buf.len() > MAX_LINE {
                return Err(AnalyzeError::Entry {
                    path: self.shown.clone(),
                    line: self.line,
                    column: 1,
                    message: format!(
                        "a journal line is at most {MAX_LINE} bytes; this one is longer"
                    ),
                });
            }
            if self.buf.trim_ascii().is_empty() {
                continue;
            }
            return serde_json::from_slice(&self.buf).map(Some).map_err(|err| {
                AnalyzeError::Entry {
                    path: self.shown.clone(),
                    line: self.line,
                    column: err.column(),
                    message: err
                        .to_string()
                        .split(" at line ")
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                }
            });
        }
    }
}

/// Parses the journal, places each entry in its operation and sends them to `tx` in batches of
/// [`BATCH`]; stops at the first line that is not an entry, or when the receiver is gone.
fn read_batches(
    file: impl std::io::Read,
    shown: &str,
    tracker: &mut OperationTracker,
    tx: &std::sync::mpsc::SyncSender<Vec<Tracked>>,
    done: &std::sync::mpsc::Receiver<Vec<Tracked>>,
) -> Result<(), AnalyzeError> {
    let next_batch = || match done.try_recv() {
        Ok(mut old) => {
            old.clear();
            old
        }
        Err(_) => Vec::with_capacity(BATCH),
    };
    let mut lines = JournalLines::new(file, shown);
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(e) = lines.next_entry()? {
        let step = (!e.is_connection())
            .then(|| tracker.observe(&e, checks::journal::recorded_retry_after_s(&e)));
        batch.push(Tracked {
            entry: e,
            step,
            closed: tracker.take_closed(),
        });
        if batch.len() == BATCH {
            let full = std::mem::replace(&mut batch, next_batch());
            if tx.send(full).is_err() {
                return Ok(());
            }
        }
    }
    if !batch.is_empty() {
        let _ = tx.send(batch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use history::sample::entry;

    /// A journal spanning several batches: 8,000 operations, every 7th retried after a 503 under
    /// a regenerated key (same client and body), every 500th key creating two orders.
    fn journal() -> Vec<Entry> {
        let mut out = Vec::new();
        for i in 0..8_000u64 {
            let t = i as f64 * 2.0;
            let key = format!("k{i}");
            let client = format!("c{}", i % 40);
            let first = entry(0, t).key(&key).client(&client).body(&key);
            if i % 7 == 0 {
                out.push(first.status(503).build());
                out.push(
                    entry(0, t + 1.0)
                        .key(&format!("{key}-again"))
                        .client(&client)
                        .body(&key)
                        .created(&format!("o{i}"))
                        .build(),
                );
            } else if i % 500 == 0 {
                out.push(first.clone().created(&format!("o{i}")).build());
                out.push(first.took(1).created(&format!("o{i}-b")).build());
            } else {
                out.push(first.created(&format!("o{i}")).build());
            }
        }
        for (n, e) in out.iter_mut().enumerate() {
            e.seq = n as u64 + 1;
        }
        out
    }

    fn write_journal(entries: &[Entry], extra: &[(usize, &str)]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        for (n, e) in entries.iter().enumerate() {
            for (at, line) in extra {
                if *at == n {
                    writeln!(f, "{line}").expect("write");
                }
            }
            writeln!(f, "{}", serde_json::to_string(e).expect("serialize")).expect("write");
        }
        f
    }

    #[test]
    fn the_pipeline_judges_as_the_checks_do_on_one_thread() {
        let entries = journal();
        assert!(entries.len() > 3 * BATCH, "several batches");
        let cfg = ChecksConfig::default();
        let expected = checks::run_checks(&cfg, &entries);
        // A blank line is skipped, not judged.
        let f = write_journal(&entries, &[(10, "")]);
        let report = analyze_file(f.path(), &cfg).expect("a valid journal");
        assert_eq!(report.checks, expected);
        let dup = report
            .checks
            .iter()
            .find(|c| c.name == "duplicates")
            .expect("duplicates runs");
        assert!(!dup.passed(), "{}", dup.summary);
        assert_eq!(report.requests.sent, entries.len() as u64);
        assert_eq!(report.requests.completed, entries.len() as u64);
    }

    #[test]
    fn a_bad_line_deep_in_the_file_is_named_by_its_number() {
        let entries = journal();
        let f = write_journal(&entries, &[(2 * BATCH + 5, "{\"seq\": 1, \"method\": 7}")]);
        match analyze_file(f.path(), &ChecksConfig::default()) {
            Err(AnalyzeError::Entry { line, column, .. }) => {
                assert_eq!(line, 2 * BATCH + 6);
                assert!(column > 0);
            }
            other => panic!("expected an entry error, got {other:?}"),
        }
    }
}
