//! `harness merge`: the reports of a run's shards, and the journals of the fault-server replicas
//! they loaded, made into one report with one verdict.
//!
//! Exact, not estimated: every shard report carries its latency histograms and its retry delays'
//! (see [`reports::model::Mergeable`]), so the merged percentiles are those of every sample of
//! every shard together, and merging costs the size of a histogram per shard, not of its samples
//! or its retries.
//! Counts are summed. The thresholds are judged on the merged figures, and every other check on
//! the union of the replicas' journals, with the checks' configuration the shards ran with.
//!
//! Journals of several servers are merged by wall clock: each replica's entries keep their own
//! order, and a replica's monotonic times are placed on the wall clock by its first entry's
//! `unix_us`. The merged order across replicas is as good as the replicas' clocks agree (NTP keeps
//! machines within a millisecond or so; loopback replicas share one clock): the report says so.

use std::collections::{BTreeMap, BinaryHeap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hdrhistogram::Histogram;
use history::{ClientFigures, Entry};
use reports::model::{Latency, Mergeable, Phase, PhaseHistograms, Requests, ShardInfo, Timeline};
use reports::Report;

use crate::analyze::AnalyzeError;
use crate::metrics::{decode_hdr, encode_hdr, latency_ms};
use crate::report::ReportBuilder;

/// Why reports or journals cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The inputs do not belong together, or one is not what it should be (exit 2).
    #[error("{0}")]
    Input(String),
    /// A journal could not be read or parsed (exit 2).
    #[error(transparent)]
    Journal(#[from] AnalyzeError),
    /// A replica could not be asked for its journal, or the output not written (exit 3).
    #[error("{0}")]
    Run(String),
}

/// What the shard reports add up to.
#[derive(Debug)]
pub struct Merged {
    /// The merged report without the checks' verdicts (see [`judge`]).
    pub report: Report,
    /// The driver's figures over every shard, for the thresholds.
    pub client: ClientFigures,
    /// The checks the shards ran with.
    pub checks: checks::ChecksConfig,
}

/// Adds up shard reports; `reports` are (name for messages, report).
pub fn merge_reports(reports: &[(String, Report)]) -> Result<Merged, MergeError> {
    let input = |m: String| MergeError::Input(m);
    let Some((first_name, first)) = reports.first() else {
        return Err(input("give at least one report to merge".into()));
    };
    let mut mergeables = Vec::with_capacity(reports.len());
    for (name, r) in reports {
        let m = r.mergeable.as_ref().ok_or_else(|| {
            input(format!(
                "{name}: carries no histograms (`mergeable`): only reports of `harness run` with load phases can be merged"
            ))
        })?;
        if r.scenario != first.scenario {
            return Err(input(format!(
                "{name}: scenario {:?}, but {first_name} is {:?}: these are not shards of one run",
                r.scenario, first.scenario
            )));
        }
        let kinds = |r: &Report| -> Vec<(String, String)> {
            r.phases
                .iter()
                .map(|p| (p.name.clone(), p.kind.clone()))
                .collect()
        };
        if kinds(r) != kinds(first) || m.phases.len() != r.phases.len() {
            return Err(input(format!(
                "{name}: its phases differ from {first_name}'s: these are not shards of one run"
            )));
        }
        mergeables.push(m);
    }
    let shard_info = check_shards(reports)?;
    let hist = |text: &str, name: &str, what: &str| {
        decode_hdr(text).map_err(|e| input(format!("{name}: {what}: {e}")))
    };

    // Overall figures.
    let mut latency = crate::metrics::histogram();
    let mut requests = Requests::default();
    let mut errors_by_kind: BTreeMap<String, u64> = BTreeMap::new();
    let (mut operations, mut failed_operations) = (0u64, 0u64);
    let mut retry_delays = crate::metrics::RetryDelays::new();
    let mut interrupted = false;
    let started = reports
        .iter()
        .map(|(_, r)| r.started_unix_ms)
        .min()
        .unwrap_or(0);
    let ended = reports
        .iter()
        .map(|(_, r)| r.started_unix_ms.saturating_add(r.duration_ms))
        .max()
        .unwrap_or(0);
    for ((name, r), m) in reports.iter().zip(&mergeables) {
        let h = hist(&m.latency_hdr, name, "latency_hdr")?;
        // One latency sample per response: a histogram that disagrees with the counts beside it
        // was not written by a run (an edited report would otherwise merge to a verdict).
        if h.len() != r.requests.completed {
            return Err(input(format!(
                "{name}: its latency histogram holds {} samples but it says {} requests completed; \
                 a report a run wrote has one sample per completed request",
                h.len(),
                r.requests.completed
            )));
        }
        if m.failed_operations > m.operations {
            return Err(input(format!(
                "{name}: {} failed operations of {} operations",
                m.failed_operations, m.operations
            )));
        }
        add_hist(&mut latency, &h);
        add_requests(&mut requests, &r.requests).map_err(|f| input(format!("{name}: {f}")))?;
        for (k, v) in &r.errors_by_kind {
            let sum = errors_by_kind.entry(k.clone()).or_default();
            *sum = add(*sum, *v, &format!("errors_by_kind.{k}"))
                .map_err(|f| input(format!("{name}: {f}")))?;
        }
        operations = add(operations, m.operations, "mergeable.operations")
            .map_err(|f| input(format!("{name}: {f}")))?;
        failed_operations = add(
            failed_operations,
            m.failed_operations,
            "mergeable.failed_operations",
        )
        .map_err(|f| input(format!("{name}: {f}")))?;
        retry_delays
            .add_report(&r.retry_delays, &m.retry_delays, name)
            .map_err(input)?;
        interrupted |= r.interrupted;
    }
    let duration = Duration::from_millis(ended.saturating_sub(started));

    // Phases, index by index.
    let mut phases = Vec::with_capacity(first.phases.len());
    let mut phase_hdrs = Vec::with_capacity(first.phases.len());
    for (i, p0) in first.phases.iter().enumerate() {
        let mut lat = crate::metrics::histogram();
        let mut intended: Option<Histogram<u64>> = None;
        let mut q = Requests::default();
        let mut metrics: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        let mut duration_ms = 0u64;
        for ((name, r), m) in reports.iter().zip(&mergeables) {
            let (p, h) = (&r.phases[i], &m.phases[i]);
            let ph = hist(&h.latency_hdr, name, "phase latency_hdr")?;
            if ph.len() != p.requests.completed {
                return Err(input(format!(
                    "{name}: phase {:?}'s latency histogram holds {} samples but it says {} \
                     requests completed",
                    p.name,
                    ph.len(),
                    p.requests.completed
                )));
            }
            add_hist(&mut lat, &ph);
            if let Some(text) = &h.intended_hdr {
                let h = hist(text, name, "phase intended_hdr")?;
                add_hist(intended.get_or_insert_with(crate::metrics::histogram), &h);
            }
            add_requests(&mut q, &p.requests)
                .map_err(|f| input(format!("{name}: phase {:?}: {f}", p.name)))?;
            duration_ms = duration_ms.max(p.duration_ms);
            merge_metrics(&mut metrics, &p.metrics);
        }
        let throughput_rps = q.completed as f64 / (duration_ms as f64 / 1000.0).max(1e-9);
        phases.push(Phase {
            name: p0.name.clone(),
            kind: p0.kind.clone(),
            duration_ms,
            requests: q,
            latency_ms: latency_ms(&lat),
            latency_intended_ms: intended.as_ref().map(latency_ms),
            throughput_rps,
            metrics,
        });
        phase_hdrs.push(PhaseHistograms {
            latency_hdr: encode_hdr(&lat),
            intended_hdr: intended.as_ref().map(encode_hdr),
        });
    }

    let checks: checks::ChecksConfig = serde_json::from_value(mergeables[0].checks.clone())
        .map_err(|e| {
            input(format!(
                "{first_name}: the checks' configuration cannot be read back: {e}"
            ))
        })?;
    for ((name, _), m) in reports.iter().zip(&mergeables).skip(1) {
        if m.checks != mergeables[0].checks {
            return Err(input(format!(
                "{name}: its checks differ from {first_name}'s: these are not shards of one run"
            )));
        }
    }

    let client = ClientFigures {
        operations,
        failed_operations,
        sent: requests.sent,
        completed: requests.completed,
        failed_attempts: requests.request_failures(),
        transport_errors: requests.errors,
        latency: latency.clone(),
        duration,
    };
    let throughput = requests.completed as f64 / duration.as_secs_f64().max(1e-9);
    let report = ReportBuilder::new(first.scenario.clone())
        .started_unix_ms(started)
        .duration(duration)
        .target(first.target.clone())
        .scenario_settings(first.seed.unwrap_or_default(), first.time_scale)
        .requests(requests)
        .latency(latency_ms(&latency), throughput)
        .errors_by_kind(errors_by_kind)
        .phases(phases)
        .timeline(sum_timelines(reports))
        .retry_delays(retry_delays.shown())
        .interrupted(interrupted)
        .shard(Some(shard_info))
        .mergeable(Some(Mergeable {
            latency_hdr: encode_hdr(&latency),
            phases: phase_hdrs,
            operations,
            failed_operations,
            checks: mergeables[0].checks.clone(),
            retry_delays: retry_delays.histograms(),
        }))
        .build();
    Ok(Merged {
        report,
        client,
        checks,
    })
}

/// The shards the reports are: one report per index of one count, none missing. Reports of
/// whole runs (no `shard`) are merged as they are.
fn check_shards(reports: &[(String, Report)]) -> Result<ShardInfo, MergeError> {
    let input = |m: String| MergeError::Input(m);
    let with: Vec<(&String, &ShardInfo)> = reports
        .iter()
        .filter_map(|(n, r)| r.shard.as_ref().map(|s| (n, s)))
        .collect();
    if with.is_empty() {
        return Ok(ShardInfo {
            index: 0,
            count: reports.len() as u32,
            merged: (0..reports.len() as u32).collect(),
            ..ShardInfo::default()
        });
    }
    if with.len() != reports.len() {
        return Err(input(
            "some reports are shards of a run and some are not: merge the shards of one run".into(),
        ));
    }
    let (name0, s0) = with[0];
    let mut seen: BTreeMap<u32, &String> = BTreeMap::new();
    let mut late_ms: f64 = 0.0;
    for (name, s) in &with {
        if s.count != s0.count || s.start_at_unix_ms != s0.start_at_unix_ms {
            return Err(input(format!(
                "{name}: shard {}/{} starting at {:?}, but {name0} is of {} shards starting at {:?}: not one run",
                s.index, s.count, s.start_at_unix_ms, s0.count, s0.start_at_unix_ms
            )));
        }
        let indices: Vec<u32> = if s.merged.is_empty() {
            vec![s.index]
        } else {
            s.merged.clone()
        };
        for i in indices {
            if let Some(other) = seen.insert(i, name) {
                return Err(input(format!(
                    "{name} and {other} are both shard {i}: give each shard's report once"
                )));
            }
        }
        late_ms = late_ms.max(s.late_ms);
    }
    let missing: Vec<String> = (0..s0.count)
        .filter(|i| !seen.contains_key(i))
        .map(|i| i.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(input(format!(
            "shard {} of {} missing: a verdict on part of a run would not be the run's",
            missing.join(", "),
            s0.count
        )));
    }
    Ok(ShardInfo {
        index: 0,
        count: s0.count,
        start_at_unix_ms: s0.start_at_unix_ms,
        late_ms,
        merged: seen.into_keys().collect(),
    })
}

fn add_hist(into: &mut Histogram<u64>, h: &Histogram<u64>) {
    // Both have the recorder's bounds (decode_hdr makes sure), so this cannot fail.
    if let Err(e) = into.add(h) {
        tracing::error!("cannot add histograms: {e:?}");
    }
}

/// `a + b`, or what overflowed, in words: counts from report files are input, and a sum past
/// 2^64 − 1 is bad input, never a wrapped number.
fn add(a: u64, b: u64, what: &str) -> Result<u64, String> {
    a.checked_add(b).ok_or_else(|| {
        format!(
            "{what}: the reports' counts add up to more than {} (2^64 − 1)",
            u64::MAX
        )
    })
}

fn add_requests(into: &mut Requests, r: &Requests) -> Result<(), String> {
    into.sent = add(into.sent, r.sent, "requests.sent")?;
    into.completed = add(into.completed, r.completed, "requests.completed")?;
    into.errors = add(into.errors, r.errors, "requests.errors")?;
    into.retries = add(into.retries, r.retries, "requests.retries")?;
    into.late_starts = add(into.late_starts, r.late_starts, "requests.late_starts")?;
    into.cancelled = add(into.cancelled, r.cancelled, "requests.cancelled")?;
    into.not_started = add(into.not_started, r.not_started, "requests.not_started")?;
    into.abandoned = add(into.abandoned, r.abandoned, "requests.abandoned")?;
    for (k, v) in &r.by_status {
        let sum = into.by_status.entry(k.clone()).or_default();
        *sum = add(*sum, *v, &format!("requests.by_status.{k}"))?;
    }
    for (k, v) in &r.by_grpc_status {
        let sum = into.by_grpc_status.entry(k.clone()).or_default();
        *sum = add(*sum, *v, &format!("requests.by_grpc_status.{k}"))?;
    }
    for (into, n, field) in [
        (&mut into.operations, r.operations, "requests.operations"),
        (
            &mut into.failed_operations,
            r.failed_operations,
            "requests.failed_operations",
        ),
    ] {
        if let Some(n) = n {
            *into = Some(add(into.unwrap_or(0), n, field)?);
        }
    }
    Ok(())
}

/// A phase's extra figures across shards: counts add up, maxima take the largest, a shard's
/// percentile (which cannot be combined) is left out, and the rest (the sync mode, say) are the
/// same on every shard.
fn merge_metrics(
    into: &mut BTreeMap<String, serde_json::Value>,
    m: &BTreeMap<String, serde_json::Value>,
) {
    let percentile = |k: &str| {
        k.rsplit_once("_p")
            .is_some_and(|(_, q)| !q.is_empty() && q.bytes().all(|b| b.is_ascii_digit()))
    };
    for (k, v) in m {
        if percentile(k) {
            continue;
        }
        let merged = match (into.get(k), v.as_u64()) {
            (None, _) => v.clone(),
            (Some(old), Some(n)) if k.ends_with("_max") => {
                serde_json::json!(old.as_u64().unwrap_or(0).max(n))
            }
            (Some(old), Some(n)) => serde_json::json!(old.as_u64().unwrap_or(0).saturating_add(n)),
            (Some(old), None) => old.clone(),
        };
        into.insert(k.clone(), merged);
    }
}

/// The shards' timelines added window by window (when they agree on the window); the merged
/// journal's timeline replaces it when journals are given.
fn sum_timelines(reports: &[(String, Report)]) -> Option<Timeline> {
    let mut out: Option<Timeline> = None;
    for (_, r) in reports {
        let t = r.timeline.as_ref()?;
        let o = out.get_or_insert_with(|| Timeline {
            window_ms: t.window_ms,
            series: Vec::new(),
        });
        if (o.window_ms - t.window_ms).abs() > 1e-9 {
            return None;
        }
        for s in &t.series {
            match o.series.iter_mut().find(|x| x.label == s.label) {
                Some(x) => {
                    if x.counts.len() < s.counts.len() {
                        x.counts.resize(s.counts.len(), 0);
                    }
                    for (a, b) in x.counts.iter_mut().zip(&s.counts) {
                        *a = a.saturating_add(*b);
                    }
                }
                None => o.series.push(s.clone()),
            }
        }
    }
    if let Some(o) = &mut out {
        let len = o.series.iter().map(|s| s.counts.len()).max().unwrap_or(0);
        o.series.iter_mut().for_each(|s| s.counts.resize(len, 0));
        o.series.sort_by(|a, b| a.label.cmp(&b.label));
    }
    out
}

/// What merging journals did.
#[derive(Debug, Clone, Default)]
pub struct JournalUnion {
    /// Entries written.
    pub entries: u64,
    /// The wall clock (µs since the Unix epoch) at merged time 0.
    pub base_unix_us: u64,
    /// Replicas named in the journals.
    pub replicas: Vec<String>,
}

/// The clock assumption a merged journal rests on, for the report's notes.
pub fn clock_note(u: &JournalUnion, sources: usize) -> String {
    format!(
        "{} entries from {sources} journals ({} replicas: {}) merged in wall-clock order: the order across replicas is as exact as their clocks agree (on one machine, exactly; across machines, within NTP's error, typically about a millisecond)",
        u.entries,
        u.replicas.len(),
        if u.replicas.is_empty() {
            "unnamed".to_string()
        } else {
            u.replicas.join(", ")
        }
    )
}

/// One journal being read.
struct Source {
    lines: crate::analyze::JournalLines<std::fs::File>,
    /// Added to the journal's own times: its clock's offset to the wall clock, minus the base.
    offset: i128,
}

/// An entry's arrival on the wall clock, µs (older journals have only `unix_ms`).
fn wall_us(e: &Entry) -> u64 {
    if e.unix_us > 0 {
        e.unix_us
    } else {
        e.unix_ms.saturating_mul(1000)
    }
}

fn shift(t: u64, offset: i128) -> u64 {
    u64::try_from((i128::from(t) + offset).max(0)).unwrap_or(u64::MAX)
}

/// Merges journal files into `out`: entries in wall-clock order, times (`t_*_us`) on one clock
/// counted from the earliest arrival (or `base_unix_us`, if earlier), `seq` renumbered from 1, and
/// connection ids kept apart per journal. Streams: memory holds one entry per journal.
pub fn merge_journals(
    paths: &[PathBuf],
    out: &Path,
    base_unix_us: Option<u64>,
) -> Result<JournalUnion, MergeError> {
    let mut sources = Vec::with_capacity(paths.len());
    let mut heads = Vec::with_capacity(paths.len());
    for p in paths {
        let shown = p.display().to_string();
        let file = std::fs::File::open(p).map_err(|source| AnalyzeError::Read {
            path: shown.clone(),
            source,
        })?;
        let mut s = Source {
            lines: crate::analyze::JournalLines::new(file, &shown),
            offset: 0,
        };
        let head = s.lines.next_entry()?;
        heads.push(head);
        sources.push(s);
    }
    // Each journal's clock to the wall clock, by its first entry.
    let base = heads
        .iter()
        .flatten()
        .map(wall_us)
        .chain(base_unix_us)
        .min()
        .unwrap_or(0);
    for (s, h) in sources.iter_mut().zip(&heads) {
        if let Some(e) = h {
            s.offset = i128::from(wall_us(e)) - i128::from(e.t_recv_us) - i128::from(base);
        }
    }
    let n = sources.len() as u64;
    let file = std::fs::File::create(out)
        .map_err(|e| MergeError::Run(format!("{}: cannot write: {e}", out.display())))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut heap = BinaryHeap::new();
    for (i, h) in heads.iter().enumerate() {
        if let Some(e) = h {
            heap.push(std::cmp::Reverse((
                shift(e.t_recv_us, sources[i].offset),
                i,
            )));
        }
    }
    let mut union = JournalUnion {
        base_unix_us: base,
        ..JournalUnion::default()
    };
    let mut replicas = std::collections::BTreeSet::new();
    let mut line = Vec::with_capacity(1024);
    while let Some(std::cmp::Reverse((_, i))) = heap.pop() {
        let Some(mut e) = heads[i].take() else {
            continue;
        };
        let off = sources[i].offset;
        union.entries += 1;
        e.seq = union.entries;
        e.t_recv_us = shift(e.t_recv_us, off);
        e.t_done_us = shift(e.t_done_us, off);
        e.t_body_us = e.t_body_us.map(|t| shift(t, off));
        e.t_wire_us = e.t_wire_us.map(|t| shift(t, off));
        e.conn_id = e.conn_id.saturating_mul(n).saturating_add(i as u64);
        if let Some(r) = &e.replica {
            if !replicas.contains(r) {
                replicas.insert(r.clone());
            }
        }
        line.clear();
        e.write_json(&mut line);
        line.push(b'\n');
        w.write_all(&line)
            .map_err(|e| MergeError::Run(format!("{}: cannot write: {e}", out.display())))?;
        if let Some(next) = sources[i].lines.next_entry()? {
            heap.push(std::cmp::Reverse((shift(next.t_recv_us, off), i)));
            heads[i] = Some(next);
        }
    }
    w.flush()
        .map_err(|e| MergeError::Run(format!("{}: cannot write: {e}", out.display())))?;
    union.replicas = replicas.into_iter().collect();
    Ok(union)
}

/// Runs the checks on the merged journal at `journal` with the merged driver figures, and puts
/// the verdicts, the journal's timeline and the clock note into the merged report.
pub fn judge(
    merged: Merged,
    journal: Option<(&Path, &JournalUnion, usize)>,
) -> Result<Report, MergeError> {
    let Merged {
        report,
        client,
        checks,
    } = merged;
    let mut b = rebuild(report);
    match journal {
        Some((path, union, sources)) => {
            let file = std::fs::File::open(path).map_err(|source| AnalyzeError::Read {
                path: path.display().to_string(),
                source,
            })?;
            // Merged time 0 is `base_unix_us`; the run started at the earliest shard's start.
            let started_us = b.start_unix_ms().saturating_mul(1000);
            let origin = started_us.saturating_sub(union.base_unix_us);
            let judged = crate::analyze::analyze_with(
                file,
                &path.display().to_string(),
                &checks,
                Some((client, origin)),
            )?;
            b = b
                .checks(judged.checks)
                .timeline(judged.timeline)
                .note(clock_note(union, sources));
        }
        None => {
            // Without journals only the driver's figures can be judged.
            let facts = history::Facts {
                client: Some(client),
                time_origin_us: 0,
                ..history::Facts::default()
            };
            let no_entries: [Entry; 0] = [];
            b = b.checks(checks::judge(&checks, no_entries.iter(), &facts)).note(
                "no journal was given (--journal or --fault-url): the checks that read the servers' journals had nothing to judge",
            );
        }
    }
    Ok(b.build())
}

fn rebuild(r: Report) -> ReportBuilder {
    ReportBuilder::from_report(r)
}

/// Latency figures of a decoded histogram (for tests that check a merge against the union).
pub fn latency_of(text: &str) -> Result<Latency, String> {
    decode_hdr(text).map(|h| latency_ms(&h))
}

/// Fetches a replica's journal (`GET URL/__harness/journal`) into `dest`.
pub async fn fetch_journal(
    url: &str,
    token: Option<&str>,
    how: &crate::http::Connect,
    dest: &Path,
) -> Result<(), String> {
    let base = url.trim_end_matches('/');
    let target =
        crate::http::Target::with(base, how).map_err(|e| format!("--fault-url {url}: {e}"))?;
    let mut headers = http::HeaderMap::new();
    if let Some(t) = token {
        let v = http::HeaderValue::from_str(&format!("Bearer {t}"))
            .map_err(|_| "--control-token: not a valid header value".to_string())?;
        headers.insert(http::header::AUTHORIZATION, v);
    }
    let req = crate::http::Outgoing {
        method: http::Method::GET,
        uri: target.path("/__harness/journal"),
        headers,
        body: bytes::Bytes::new(),
    };
    let mut conn = crate::http::Conn::new(std::sync::Arc::new(target));
    let reply = conn
        .send(req, Duration::from_secs(300))
        .await
        .map_err(|e| format!("{base}/__harness/journal: {e}"))?;
    if !reply.status.is_success() {
        let why = String::from_utf8_lossy(&reply.body[..reply.body.len().min(300)]).to_string();
        return Err(format!(
            "{base}/__harness/journal answered {}: {}",
            reply.status,
            why.trim()
        ));
    }
    std::fs::write(dest, &reply.body).map_err(|e| format!("{}: cannot write: {e}", dest.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Recorder;
    use history::sample::entry;

    /// A shard's report: `samples` (µs) as its one rate phase's latencies.
    fn shard_report(index: u32, count: u32, samples: &[u64]) -> Report {
        let mut rec = Recorder::new(false);
        for &us in samples {
            rec.latency(Duration::from_micros(us));
            rec.result(Some(200), None);
        }
        rec.operations = samples.len() as u64;
        let phase = crate::report::phase(
            "steady",
            "rate",
            &rec,
            Duration::from_secs(2),
            true,
            BTreeMap::from([
                ("operations".to_string(), serde_json::json!(samples.len())),
                (
                    "release_skew_us_max".to_string(),
                    serde_json::json!(index * 10),
                ),
                ("release_skew_us_p50".to_string(), serde_json::json!(index)),
                ("sync".to_string(), serde_json::json!("release")),
            ]),
        );
        ReportBuilder::new("proof")
            .started_unix_ms(1_000_000 + u64::from(index))
            .duration(Duration::from_secs(2))
            .measured(&rec, Duration::from_secs(2))
            .phases(vec![phase])
            .shard(Some(ShardInfo {
                index,
                count,
                start_at_unix_ms: Some(1_000_000),
                late_ms: f64::from(index),
                merged: Vec::new(),
            }))
            .mergeable(Some(Mergeable {
                latency_hdr: encode_hdr(&rec.latency),
                phases: vec![PhaseHistograms {
                    latency_hdr: encode_hdr(&rec.latency),
                    intended_hdr: Some(encode_hdr(&rec.latency)),
                }],
                operations: rec.operations,
                failed_operations: 0,
                checks: serde_json::to_value(checks::ChecksConfig::none()).unwrap(),
                retry_delays: Vec::new(),
            }))
            .build()
    }

    /// `r` with these retry delays (attempt, µs), as a shard reports them.
    fn with_delays(mut r: Report, delays: &[(u32, u64)]) -> Report {
        let mut d = crate::metrics::RetryDelays::new();
        for &(attempt, us) in delays {
            d.record(attempt, us);
        }
        r.retry_delays = d.shown();
        r.mergeable.as_mut().unwrap().retry_delays = d.histograms();
        r
    }

    #[test]
    fn retry_delays_merge_exactly_in_a_size_that_does_not_grow_with_the_retries() {
        // Full jitter before attempt 2 (up to 1 s) and attempt 3 (up to 2 s), thousands of
        // retries per shard; a handful before attempt 4.
        let delays: Vec<Vec<(u32, u64)>> = (0..3u64)
            .map(|shard| {
                let mut x = shard + 100;
                let mut d = Vec::new();
                for i in 0..(5_000 + shard * 311) {
                    x = primitives::draw::splitmix64(x);
                    d.push((2, x % 1_000_000));
                    if i % 2 == 0 {
                        d.push((3, x % 2_000_000));
                    }
                }
                d.push((4, 4_000_000 + shard * 1_500));
                d
            })
            .collect();
        let reports: Vec<(String, Report)> = delays
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let r = shard_report(i as u32, 3, &[1000, 2000]);
                (format!("s{i}"), with_delays(r, d))
            })
            .collect();
        let merged = merge_reports(&reports).unwrap();
        // The same figures as one report of every shard's retries.
        let union = with_delays(shard_report(0, 1, &[1000]), &delays.concat());
        assert_eq!(merged.report.retry_delays, union.retry_delays);
        assert_eq!(
            merged.report.mergeable.as_ref().unwrap().retry_delays,
            union.mergeable.as_ref().unwrap().retry_delays
        );
        let by = |a: u32| {
            merged
                .report
                .retry_delays
                .iter()
                .find(|d| d.attempt == a)
                .unwrap()
        };
        let total: u64 = delays.iter().map(|d| d.len() as u64).sum();
        assert_eq!(
            by(2).count.unwrap() + by(3).count.unwrap() + by(4).count.unwrap(),
            total
        );
        // Beyond 101 retries: one delay per percentile, the extremes exact.
        let all2: Vec<u64> = delays
            .concat()
            .into_iter()
            .filter(|(a, _)| *a == 2)
            .map(|(_, us)| us)
            .collect();
        let (lo, hi) = (*all2.iter().min().unwrap(), *all2.iter().max().unwrap());
        assert_eq!(by(2).delays_ms.len(), reports::model::DELAY_POINTS);
        assert!(!by(2).lists_every_delay());
        assert_eq!(by(2).min_ms, Some(lo as f64 / 1000.0));
        assert_eq!(by(2).delays_ms[0], lo as f64 / 1000.0);
        assert_eq!(by(2).max_ms, Some(hi as f64 / 1000.0));
        assert_eq!(by(2).delays_ms[100], hi as f64 / 1000.0);
        // The median within the histogram's precision (three significant digits).
        let mut sorted = all2.clone();
        sorted.sort_unstable();
        let median = sorted[(sorted.len() - 1) / 2] as f64 / 1000.0;
        let shown = by(2).delays_ms[50];
        assert!(
            (shown - median).abs() <= median * 1e-3,
            "{shown} vs {median}"
        );
        // Few retries: every delay, exactly.
        assert_eq!(by(4).delays_ms, vec![4_000.0, 4_001.5, 4_003.0]);
        assert!(by(4).lists_every_delay());
        // A merged report merges again to the same figures.
        let again = merge_reports(&[("m".to_string(), merged.report.clone())]).unwrap();
        assert_eq!(again.report.retry_delays, merged.report.retry_delays);
        // The report's size does not depend on the number of retries.
        let size = |r: &Report| serde_json::to_string(&r.retry_delays).unwrap().len();
        assert!(size(&merged.report) < 8_000, "{}", size(&merged.report));
    }

    #[test]
    fn retry_delays_of_reports_without_their_histograms_are_merged_from_the_list() {
        // A report written before reports carried the delays' histograms lists every delay.
        let old = |i: u32, d: &[f64]| {
            let mut r = shard_report(i, 2, &[1000]);
            r.retry_delays = vec![reports::model::AttemptDelays {
                attempt: 2,
                delays_ms: d.to_vec(),
                ..Default::default()
            }];
            (format!("old{i}"), r)
        };
        let merged = merge_reports(&[old(0, &[5.0, 1.5]), old(1, &[3.25])]).unwrap();
        let d = &merged.report.retry_delays[0];
        assert_eq!(d.delays_ms, vec![1.5, 3.25, 5.0]);
        assert_eq!(
            (d.count, d.min_ms, d.max_ms),
            (Some(3), Some(1.5), Some(5.0))
        );
        // A summary without its histogram cannot be merged exactly: refused.
        let (name, mut r) = old(1, &[3.0]);
        r.retry_delays[0].count = Some(500);
        let e = merge_reports(&[old(0, &[1.0]), (name, r)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("carries no histogram"), "{e}");
        // A summary whose extremes are swapped (edited by hand) merges without a panic.
        let many: Vec<(u32, u64)> = (0..500).map(|i| (2, i * 1000)).collect();
        let mut r = with_delays(shard_report(0, 1, &[1000]), &many);
        r.retry_delays[0].min_ms = Some(400.0);
        r.retry_delays[0].max_ms = Some(100.0);
        let merged = merge_reports(&[("edited".to_string(), r)]).unwrap();
        assert_eq!(merged.report.retry_delays[0].count, Some(500));
    }

    fn samples(seed: u64, n: usize) -> Vec<u64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = primitives::draw::splitmix64(x);
                // A long tail: most fast, some slow.
                let u = (x % 1_000_000) as f64 / 1e6;
                (200.0 + 50_000.0 * u.powi(8)) as u64
            })
            .collect()
    }

    #[test]
    fn merged_percentiles_are_those_of_every_sample_together() {
        let parts: Vec<Vec<u64>> = (0..3)
            .map(|i| samples(i, 10_000 + i as usize * 777))
            .collect();
        let reports: Vec<(String, Report)> = parts
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("s{i}"), shard_report(i as u32, 3, s)))
            .collect();
        let merged = merge_reports(&reports).unwrap();
        let mut union = Recorder::new(false);
        parts
            .iter()
            .flatten()
            .for_each(|&us| union.latency(Duration::from_micros(us)));
        let expected = latency_ms(&union.latency);
        assert_eq!(merged.report.latency_ms, expected);
        assert_eq!(merged.report.phases[0].latency_ms, expected);
        assert_eq!(
            merged.report.phases[0].latency_intended_ms.as_ref(),
            Some(&expected)
        );
        // Not the average of the shards' percentiles: those differ from the union's.
        let total: u64 = parts.iter().map(|p| p.len() as u64).sum();
        assert_eq!(merged.report.requests.sent, total);
        assert_eq!(merged.report.requests.by_status["200"], total);
        assert_eq!(merged.client.operations, total);
        assert_eq!(merged.client.latency.len(), total);
        let m = &merged.report.phases[0].metrics;
        assert_eq!(m["operations"], serde_json::json!(total));
        assert_eq!(m["release_skew_us_max"], serde_json::json!(20));
        assert!(!m.contains_key("release_skew_us_p50"), "{m:?}");
        assert_eq!(m["sync"], serde_json::json!("release"));
        let s = merged.report.shard.as_ref().unwrap();
        assert_eq!(s.merged, vec![0, 1, 2]);
        assert_eq!(s.late_ms, 2.0);
        // The merged report merges again, exactly.
        let again = merge_reports(&[("m".to_string(), merged.report.clone())]).unwrap();
        assert_eq!(again.report.latency_ms, expected);
    }

    #[test]
    fn shards_that_are_not_one_run_are_refused_with_the_reason() {
        let r = |i, n| shard_report(i, n, &[1000, 2000]);
        let named = |rs: Vec<Report>| -> Vec<(String, Report)> {
            rs.into_iter()
                .enumerate()
                .map(|(i, r)| (format!("r{i}.json"), r))
                .collect()
        };
        let err = |rs| merge_reports(&named(rs)).unwrap_err().to_string();
        assert!(err(vec![r(0, 3), r(1, 3)]).contains("shard 2 of 3 missing"));
        assert!(err(vec![r(0, 2), r(0, 2)]).contains("both shard 0"));
        assert!(err(vec![r(0, 2), r(1, 3)]).contains("not one run"));
        let mut other = r(1, 2);
        other.scenario = "other".into();
        assert!(err(vec![r(0, 2), other]).contains("not shards of one run"));
        let mut bare = r(1, 2);
        bare.mergeable = None;
        assert!(err(vec![r(0, 2), bare]).contains("carries no histograms"));
        let mut corrupt = r(1, 2);
        corrupt.mergeable.as_mut().unwrap().latency_hdr = "!!".into();
        assert!(err(vec![r(0, 2), corrupt]).contains("not base64"));
        assert!(merge_reports(&[]).is_err());
        assert!(merge_reports(&named(vec![r(1, 2), r(0, 2)])).is_ok());
    }

    #[test]
    fn journals_merge_in_wall_clock_order_on_one_clock() {
        let dir = tempfile::tempdir().unwrap();
        // Replica a started long before replica b: its monotonic times are larger, but its
        // requests interleave with b's on the wall clock.
        let write = |name: &str, replica: &str, entries: Vec<Entry>| {
            let p = dir.path().join(name);
            let mut text = String::new();
            for mut e in entries {
                e.replica = Some(replica.into());
                text.push_str(&serde_json::to_string(&e).unwrap());
                text.push('\n');
            }
            std::fs::write(&p, text).unwrap();
            p
        };
        let at = |seq, mono_ms: f64, wall_ms: u64| {
            let mut e = entry(seq, mono_ms).key(&format!("k{seq}")).build();
            e.unix_us = wall_ms * 1000;
            e.unix_ms = wall_ms;
            e.conn_id = 1;
            e
        };
        let a = write(
            "a.jsonl",
            "a",
            vec![
                at(1, 90_000.0, 5_000),
                at(2, 90_010.0, 5_010),
                at(3, 90_030.0, 5_030),
            ],
        );
        let b = write("b.jsonl", "b", vec![at(1, 5.0, 5_005), at(2, 25.0, 5_025)]);
        let out = dir.path().join("merged.jsonl");
        let u = merge_journals(&[a, b], &out, None).unwrap();
        assert_eq!(u.entries, 5);
        assert_eq!(u.replicas, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(u.base_unix_us, 5_000_000);
        let merged: Vec<Entry> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let order: Vec<(u64, &str, u64)> = merged
            .iter()
            .map(|e| (e.seq, e.replica.as_deref().unwrap(), e.t_recv_us))
            .collect();
        assert_eq!(
            order,
            vec![
                (1, "a", 0),
                (2, "b", 5_000),
                (3, "a", 10_000),
                (4, "b", 25_000),
                (5, "a", 30_000)
            ]
        );
        // Durations are kept; connections of different replicas stay apart.
        assert!(merged.iter().all(|e| e.t_done_us - e.t_recv_us == 1000));
        assert_ne!(merged[0].conn_id, merged[1].conn_id);
        // A bad line names its journal and line.
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "{\"seq\": 1}\nnot json\n").unwrap();
        let e = merge_journals(&[bad], &out, None).unwrap_err().to_string();
        assert!(e.contains("bad.jsonl:1:"), "{e}");
    }
}
