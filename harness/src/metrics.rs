//! Measurements: HDR histograms of latency, status and error counts, retries — one recorder per
//! worker (no shared lock on the hot path), merged at the end of a phase.
//!
//! Why workers buffer their latency samples instead of owning histograms: a histogram of 1 µs to
//! 1 h at three significant digits is about 190 KB, so 10,000 connections would hold close to 4 GB
//! and the end-of-phase merge would walk every bucket of every one. A worker keeps at most
//! [`BATCH`] raw samples and folds them into the phase's [`Sink`] (a mutex taken once per batch);
//! merging a worker's recorder brings over its leftovers and whatever the sink has gathered.
//!
//! What a report shows of single attempts — the waits before retries, and attempts over time for a
//! run whose server keeps no journal the harness reads — goes the same way into an
//! [`AttemptSummary`] of bounded size, so a run of a hundred million requests does not keep one
//! record per attempt (a test can still ask for those: `keep_attempts`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;

use std::time::Instant;

use history::{ClientAttempt, ErrorKind, GrpcCode};
use retry_policy::{AttemptOutcome, Call, OpEnd};

use crate::operation::{Observer, OpResult};

/// Which operation of which phase and client an attempt belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptIds {
    /// Index of the phase.
    pub phase: u16,
    /// Operation number within the phase, from 1.
    pub op: u64,
    /// The worker.
    pub client: u32,
}

/// Samples a worker buffers before folding them into its phase's [`Sink`]: the sink's mutex is
/// taken once per 32 requests, and the buffers of hundreds of workers sharing a thread stay
/// small enough for its caches (at 256, 400 HTTP/2 workers' buffers came to 4 MB, and writing
/// to them was a twentieth of the client's time).
pub const BATCH: usize = 32;

/// What the workers of a phase share: the histograms and attempt summary (see the module doc),
/// and the phase's stop as they check it.
#[derive(Debug)]
pub struct Sink {
    hist: Mutex<(Histogram<u64>, Histogram<u64>)>,
    attempts: Mutex<AttemptSummary>,
    /// Operations started and not yet ended, whichever way they end.
    in_flight: AtomicU64,
    /// Operations that ended failed (after their retries), as the workers end them.
    failed_operations: AtomicU64,
    /// gRPC attempts answered with a status other than OK (or given one by the client).
    grpc_failed: AtomicU64,
    /// Fired when the phase stops (see [`crate::stop`]).
    pub stop: Arc<crate::stop::StopSignal>,
}

impl Sink {
    /// An empty sink.
    pub fn new() -> Arc<Sink> {
        Arc::new(Sink {
            hist: Mutex::new((histogram(), histogram())),
            attempts: Mutex::new(AttemptSummary::default()),
            in_flight: AtomicU64::new(0),
            failed_operations: AtomicU64::new(0),
            grpc_failed: AtomicU64::new(0),
            stop: Arc::default(),
        })
    }

    /// Operations started and not yet ended, now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts `n` operations in flight until the returned guard is dropped (however the work
    /// ends: done, failed, or cut short by the phase's stop).
    pub fn flight(self: &Arc<Self>, n: u64) -> Flight {
        self.in_flight.fetch_add(n, Ordering::Relaxed);
        Flight {
            sink: self.clone(),
            n,
        }
    }

    /// What the workers have folded in so far (each holds back at most [`BATCH`] samples), with
    /// the attempts that started in each second of `seconds` from the run's start: a live view
    /// of the phase, read under the sink's locks for the time it takes to copy a few counts.
    pub fn view(&self, seconds: std::ops::Range<u64>) -> SinkView {
        let histogram = {
            let h = self.hist.lock().unwrap_or_else(|p| p.into_inner());
            h.0.clone()
        };
        let a = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let mut v = a.view(latency_ms(&histogram), seconds);
        v.histogram = Some(histogram);
        v.failed_operations = self.failed_operations.load(Ordering::Relaxed);
        v.grpc_failed = self.grpc_failed.load(Ordering::Relaxed);
        v
    }
}

/// Operations counted in flight in a [`Sink`] while it lives.
pub struct Flight {
    sink: Arc<Sink>,
    n: u64,
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.sink.in_flight.fetch_sub(self.n, Ordering::Relaxed);
    }
}

/// A phase's figures as its workers have folded them into the [`Sink`] so far.
#[derive(Debug, Clone, Default)]
pub struct SinkView {
    /// Per-attempt latency from the send.
    pub latency: reports::model::Latency,
    /// Attempts by how they ended: a status (`"503"`), `error:KIND` or `unknown`.
    pub by_outcome: BTreeMap<String, u64>,
    /// The seconds asked for, from the run's start.
    pub seconds: std::ops::Range<u64>,
    /// Attempts that started in each of those seconds (in the second their window began, when
    /// a long run has made the windows wider than a second).
    pub per_second: Vec<u64>,
    /// Retries (attempts past the first) by attempt index.
    pub retries_by_attempt: BTreeMap<u32, u64>,
    /// The latency HDR histogram behind `latency` (µs), to merge phases by.
    pub histogram: Option<Histogram<u64>>,
    /// Operations that ended failed, after their retries.
    pub failed_operations: u64,
    /// gRPC attempts with a status other than OK.
    pub grpc_failed: u64,
}

/// Windows of the attempts-over-time counts before they are made twice as wide.
const MAX_BINS: usize = 1 << 18;

/// One attempt as the summary counts it.
#[derive(Debug, Clone, Copy)]
struct AttemptPoint {
    /// Start, µs from the run's start.
    t_start_us: u64,
    label: AttemptLabel,
    /// The attempt's index and the wait before it (µs), for a retry.
    wait: Option<(u32, u64)>,
}

/// How an attempt ended, as the timeline labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum AttemptLabel {
    Status(u16),
    Error(ErrorKind),
    Unknown,
}

impl AttemptLabel {
    fn name(self) -> String {
        match self {
            AttemptLabel::Status(s) => s.to_string(),
            AttemptLabel::Error(e) => format!("error:{e}"),
            AttemptLabel::Unknown => "unknown".to_string(),
        }
    }
}

/// The clients' attempts in bounded memory: a sample of the waits before retries per attempt
/// index, and attempts per window of time by how they ended.
#[derive(Debug, Clone)]
pub struct AttemptSummary {
    waits: RetryDelays,
    /// Width of a window of `bins`, µs: 1 ms, doubled whenever the run outgrows [`MAX_BINS`].
    width_us: u64,
    bins: BTreeMap<AttemptLabel, Vec<u64>>,
}

impl Default for AttemptSummary {
    fn default() -> Self {
        AttemptSummary {
            waits: RetryDelays::new(),
            width_us: 1000,
            bins: BTreeMap::new(),
        }
    }
}

impl AttemptSummary {
    fn add(&mut self, p: AttemptPoint) {
        if let Some((attempt, us)) = p.wait {
            self.waits.record(attempt, us);
        }
        self.count(p.label, p.t_start_us / self.width_us, 1);
    }

    /// Adds `n` attempts in window `bin` (of the current width), widening the windows first
    /// when `bin` lies beyond [`MAX_BINS`].
    fn count(&mut self, label: AttemptLabel, mut bin: u64, n: u64) {
        while bin >= MAX_BINS as u64 {
            self.widen();
            bin /= 2;
        }
        let counts = self.bins.entry(label).or_default();
        let bin = bin as usize;
        if counts.len() <= bin {
            counts.resize(bin + 1, 0);
        }
        counts[bin] += n;
    }

    fn widen(&mut self) {
        self.width_us *= 2;
        for counts in self.bins.values_mut() {
            *counts = counts.chunks(2).map(|c| c.iter().sum()).collect();
        }
    }

    fn merge(&mut self, o: &AttemptSummary) {
        self.waits.merge(&o.waits);
        while self.width_us < o.width_us {
            self.widen();
        }
        let ratio = self.width_us / o.width_us;
        for (label, counts) in &o.bins {
            for (bin, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
                self.count(*label, bin as u64 / ratio, *n);
            }
        }
    }

    /// The observed waits before each retry, grouped by attempt index, in a size that does not
    /// grow with the retries.
    pub fn retry_delays(&self) -> &RetryDelays {
        &self.waits
    }

    /// Attempts per `window` from the run's start, by status or error kind; windows are at least
    /// as wide as those counted (1 ms, wider for a run of more than four minutes).
    pub fn timeline(&self, window: Duration) -> reports::model::Timeline {
        let w = (window.as_micros() as u64).max(self.width_us);
        let mut series: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let len = self
            .bins
            .values()
            .map(|c| (c.len() as u64 * self.width_us).div_ceil(w) as usize)
            .max()
            .unwrap_or(0);
        for (label, counts) in &self.bins {
            let mut out = vec![0; len];
            for (bin, n) in counts.iter().enumerate() {
                out[(bin as u64 * self.width_us / w) as usize] += n;
            }
            series.insert(label.name(), out);
        }
        reports::model::Timeline {
            window_ms: w as f64 / 1000.0,
            series: series
                .into_iter()
                .map(|(label, counts)| reports::model::Series { label, counts })
                .collect(),
        }
    }

    /// Whether no attempt was counted.
    pub fn is_empty(&self) -> bool {
        self.bins.is_empty()
    }

    /// These counts as a [`SinkView`] with `latency`, and the attempts per second of `seconds`.
    fn view(&self, latency: reports::model::Latency, seconds: std::ops::Range<u64>) -> SinkView {
        let mut by_outcome = BTreeMap::new();
        let mut per_second = vec![0; (seconds.end.saturating_sub(seconds.start)) as usize];
        let first = seconds.start * 1_000_000 / self.width_us;
        let last = (seconds.end * 1_000_000).div_ceil(self.width_us);
        for (label, counts) in &self.bins {
            by_outcome.insert(label.name(), counts.iter().sum::<u64>());
            let end = (last as usize).min(counts.len());
            let start = (first as usize).min(end);
            for (bin, n) in counts[start..end].iter().enumerate() {
                let second = (start + bin) as u64 * self.width_us / 1_000_000;
                if let Some(slot) = second
                    .checked_sub(seconds.start)
                    .and_then(|i| per_second.get_mut(i as usize))
                {
                    *slot += n;
                }
            }
        }
        SinkView {
            latency,
            by_outcome,
            seconds,
            per_second,
            retries_by_attempt: self.waits.counts(),
            histogram: None,
            failed_operations: 0,
            grpc_failed: 0,
        }
    }
}

/// A worker's measurements.
///
/// Laid out in the order written (`repr(C)`), the fields every attempt touches first: a worker's
/// recorder is touched once per call, and hundreds of workers take turns, so what a call touches
/// is read from memory each time; together, it is two cache lines rather than seven.
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Recorder {
    /// A worker's recorder: samples wait in the buffers below, then go to the sink.
    sink: Option<Arc<Sink>>,
    /// Attempts sent.
    pub sent: u64,
    /// Operations started.
    pub operations: u64,
    /// Latency samples waiting for the sink.
    buf_latency: Vec<u64>,
    /// Attempts waiting for the sink's summary.
    buf_attempts: Vec<AttemptPoint>,
    /// One record per attempt, when kept.
    pub attempts: Option<Vec<ClientAttempt>>,
    /// Responses per status code: a handful of codes, so a short list beats a map.
    by_status: Vec<(u16, u64)>,
    /// gRPC attempts by status, indexed by the code's number.
    by_grpc_status: [u64; GrpcCode::ALL.len()],
    /// Per-attempt latency from the actual send, µs.
    pub latency: Histogram<u64>,
    /// Per-operation latency from the intended start (rate phases), µs.
    pub intended: Histogram<u64>,
    /// Attempts without a usable response, by [`ErrorKind::index`].
    pub errors: [u64; ErrorKind::ALL.len()],
    /// Attempts beyond the first of their operation.
    pub retries: u64,
    /// Operations of an open model that started more than [`crate::driver::LATE_THRESHOLD`] late.
    pub late_starts: u64,
    /// Operations answered by a breaker's fallback without a call.
    pub fallbacks: u64,
    /// Retries refused by the budget.
    pub budget_refusals: u64,
    /// Operations that gave up because the total timeout would be exceeded.
    pub deadline_exceeded: u64,
    /// Operations that did not end in a response below 500 (no response, 5xx, or a fallback).
    pub failed_operations: u64,
    /// Operations given up because the server's Retry-After exceeded `retry_after_max`.
    pub wait_too_long: u64,
    /// Operations in flight when the run was interrupted or a hard stop came: cut short, so
    /// neither a response nor an error.
    pub cancelled: u64,
    /// Requests of an open-model phase that were due but found no free connection before the
    /// phase ended: never sent.
    pub not_started: u64,
    /// Attempts sent that their own call gave up before an answer or an error came: a hedge
    /// (or the first attempt) still out when another attempt's answer ended the call. In
    /// `sent`, neither completed nor errors.
    pub abandoned: u64,
    /// Workers of the phase that died (a panic), each with its message; the first
    /// [`WORKER_FAILURES_KEPT`] are kept, `worker_failures_total` counts them all. A run with one
    /// is an error of the run, never a pass: what the dead worker measured is lost.
    pub worker_failures: Vec<String>,
    /// Workers that died, in all.
    pub worker_failures_total: u64,
    /// What the report shows of single attempts, in bounded memory.
    pub summary: AttemptSummary,
    /// Intended-start latency samples waiting for the sink.
    buf_intended: Vec<u64>,
}

/// Worker failures kept with their message (the rest are counted).
pub const WORKER_FAILURES_KEPT: usize = 4;

pub(crate) fn histogram() -> Histogram<u64> {
    // 1 µs .. 1 hour at 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant histogram bounds are valid")
}

/// A histogram that records nothing and allocates almost nothing (a worker's placeholder).
fn placeholder() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 2, 1).expect("constant histogram bounds are valid")
}

impl Recorder {
    /// An empty recorder; `keep_attempts` keeps one record per attempt.
    pub fn new(keep_attempts: bool) -> Recorder {
        Recorder::with_histograms(keep_attempts, histogram(), None)
    }

    /// A worker's recorder: latency samples are buffered and folded into `sink` in batches.
    pub fn worker(keep_attempts: bool, sink: &Arc<Sink>) -> Recorder {
        Recorder::with_histograms(keep_attempts, placeholder(), Some(sink.clone()))
    }

    fn with_histograms(
        keep_attempts: bool,
        make: Histogram<u64>,
        sink: Option<Arc<Sink>>,
    ) -> Recorder {
        Recorder {
            latency: make.clone(),
            intended: make,
            by_status: Vec::new(),
            by_grpc_status: [0; GrpcCode::ALL.len()],
            errors: [0; ErrorKind::ALL.len()],
            sent: 0,
            retries: 0,
            operations: 0,
            late_starts: 0,
            fallbacks: 0,
            budget_refusals: 0,
            deadline_exceeded: 0,
            failed_operations: 0,
            wait_too_long: 0,
            cancelled: 0,
            not_started: 0,
            abandoned: 0,
            attempts: keep_attempts.then(Vec::new),
            worker_failures: Vec::new(),
            worker_failures_total: 0,
            summary: AttemptSummary::default(),
            sink,
            buf_latency: Vec::new(),
            buf_intended: Vec::new(),
            buf_attempts: Vec::new(),
        }
    }

    /// A finished phase's figures as the live view shows them, with the attempts per second of
    /// `seconds` from the run's start.
    pub fn view(&self, seconds: std::ops::Range<u64>) -> SinkView {
        let mut v = self.summary.view(latency_ms(&self.latency), seconds);
        v.histogram = Some(self.latency.clone());
        v.failed_operations = self.failed_operations;
        v.grpc_failed = self
            .by_grpc_status
            .iter()
            .enumerate()
            .filter(|(code, _)| *code != usize::from(GrpcCode::Ok.number()))
            .map(|(_, n)| n)
            .sum();
        v
    }

    /// Records a latency sample.
    pub fn latency(&mut self, d: Duration) {
        let buffered = self.sink.is_some();
        if record(&mut self.latency, &mut self.buf_latency, buffered, d) {
            self.flush();
        }
    }

    /// Records a CO-corrected operation latency.
    pub fn intended(&mut self, d: Duration) {
        let buffered = self.sink.is_some();
        if record(&mut self.intended, &mut self.buf_intended, buffered, d) {
            self.flush();
        }
    }

    /// Counts an attempt into the summary (through the sink, for a worker).
    fn attempt_point(&mut self, p: AttemptPoint) {
        if self.sink.is_none() {
            self.summary.add(p);
            return;
        }
        self.buf_attempts.push(p);
        if self.buf_attempts.len() >= BATCH {
            self.flush();
        }
    }

    /// Folds a worker's buffered samples into its sink.
    fn flush(&mut self) {
        let Some(sink) = &self.sink else {
            return;
        };
        if !self.buf_attempts.is_empty() {
            let mut a = sink.attempts.lock().unwrap_or_else(|p| p.into_inner());
            for p in self.buf_attempts.drain(..) {
                a.add(p);
            }
        }
        let mut h = sink.hist.lock().unwrap_or_else(|p| p.into_inner());
        for &us in &self.buf_latency {
            h.0.saturating_record(us);
        }
        for &us in &self.buf_intended {
            h.1.saturating_record(us);
        }
        drop(h);
        self.buf_latency.clear();
        self.buf_intended.clear();
    }

    /// Records an attempt's result.
    pub fn result(&mut self, status: Option<u16>, error: Option<ErrorKind>) {
        self.sent += 1;
        if let Some(s) = status {
            self.count_status(s, 1);
        }
        if let Some(e) = error {
            self.errors[e.index()] += 1;
        }
        if status.is_none() && error.is_none() {
            self.abandoned += 1;
        }
    }

    fn count_status(&mut self, status: u16, n: u64) {
        match self.by_status.iter_mut().find(|(s, _)| *s == status) {
            Some((_, c)) => *c += n,
            None => self.by_status.push((status, n)),
        }
    }

    /// Notes a gRPC attempt's status.
    pub fn grpc_status(&mut self, code: GrpcCode) {
        self.by_grpc_status[usize::from(code.number())] += 1;
    }

    /// gRPC attempts per status, by name, non-zero only.
    pub fn by_grpc_status(&self) -> BTreeMap<String, u64> {
        GrpcCode::ALL
            .iter()
            .filter(|c| self.by_grpc_status[usize::from(c.number())] > 0)
            .map(|c| {
                (
                    c.as_str().to_string(),
                    self.by_grpc_status[usize::from(c.number())],
                )
            })
            .collect()
    }

    /// Responses per status code, in code order.
    pub fn by_status(&self) -> BTreeMap<u16, u64> {
        self.by_status.iter().copied().collect()
    }

    /// Adds another recorder's figures. A worker's recorder brings its buffered samples and, the
    /// first time one of a sink's workers is merged, everything the sink gathered.
    pub fn merge(&mut self, o: &Recorder) {
        let _ = self.latency.add(&o.latency);
        let _ = self.intended.add(&o.intended);
        for &us in &o.buf_latency {
            self.latency.saturating_record(us);
        }
        for &us in &o.buf_intended {
            self.intended.saturating_record(us);
        }
        for p in &o.buf_attempts {
            self.summary.add(*p);
        }
        self.summary.merge(&o.summary);
        if let Some(sink) = &o.sink {
            let mut a = sink.attempts.lock().unwrap_or_else(|p| p.into_inner());
            if !a.is_empty() || !a.waits.is_empty() {
                self.summary.merge(&std::mem::take(&mut *a));
            }
            drop(a);
            let mut h = sink.hist.lock().unwrap_or_else(|p| p.into_inner());
            if !h.0.is_empty() {
                let _ = self.latency.add(&h.0);
                h.0.reset();
            }
            if !h.1.is_empty() {
                let _ = self.intended.add(&h.1);
                h.1.reset();
            }
        }
        for &(s, n) in &o.by_status {
            self.count_status(s, n);
        }
        for (a, b) in self.by_grpc_status.iter_mut().zip(o.by_grpc_status) {
            *a += b;
        }
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
        self.sent += o.sent;
        self.retries += o.retries;
        self.operations += o.operations;
        self.late_starts += o.late_starts;
        self.fallbacks += o.fallbacks;
        self.budget_refusals += o.budget_refusals;
        self.deadline_exceeded += o.deadline_exceeded;
        self.failed_operations += o.failed_operations;
        self.wait_too_long += o.wait_too_long;
        self.cancelled += o.cancelled;
        self.not_started += o.not_started;
        self.abandoned += o.abandoned;
        if let (Some(a), Some(b)) = (&mut self.attempts, &o.attempts) {
            a.extend_from_slice(b);
        }
        self.worker_failures_total += o.worker_failures_total;
        for f in &o.worker_failures {
            if self.worker_failures.len() < WORKER_FAILURES_KEPT {
                self.worker_failures.push(f.clone());
            }
        }
    }

    /// Notes that a worker died: `what` (the worker) failed with the task's error.
    pub fn worker_died(&mut self, what: &str, e: tokio::task::JoinError) {
        let why = if e.is_panic() {
            let p = e.into_panic();
            match p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
            {
                Some(m) => format!("{what} panicked: {m}"),
                None => format!("{what} panicked"),
            }
        } else {
            format!("{what} was cancelled")
        };
        tracing::error!("{why}");
        self.worker_failures_total += 1;
        if self.worker_failures.len() < WORKER_FAILURES_KEPT {
            self.worker_failures.push(why);
        }
    }

    /// Responses received.
    pub fn completed(&self) -> u64 {
        self.by_status.iter().map(|(_, n)| n).sum()
    }

    /// Attempts that got no response.
    pub fn error_count(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// The report's request counts.
    pub fn requests(&self) -> reports::model::Requests {
        reports::model::Requests {
            sent: self.sent,
            completed: self.completed(),
            errors: self.error_count(),
            retries: self.retries,
            by_status: self
                .by_status()
                .into_iter()
                .map(|(s, n)| (s.to_string(), n))
                .collect(),
            by_grpc_status: self.by_grpc_status(),
            late_starts: self.late_starts,
            cancelled: self.cancelled,
            not_started: self.not_started,
            abandoned: self.abandoned,
            // Cancelled operations ended neither way: they are not judged.
            operations: Some(self.operations.saturating_sub(self.cancelled)),
            failed_operations: Some(self.failed_operations),
        }
    }

    /// Errors by kind, non-zero only.
    pub fn errors_by_kind(&self) -> BTreeMap<String, u64> {
        ErrorKind::ALL
            .iter()
            .filter(|k| self.errors[k.index()] > 0)
            .map(|k| (k.as_str().to_string(), self.errors[k.index()]))
            .collect()
    }
}

impl Recorder {
    /// An observer that records one operation's attempts here.
    pub fn operation(&mut self, ids: AttemptIds, run_start: Instant) -> OperationLog<'_> {
        OperationLog {
            rec: self,
            ids,
            run_start,
            last_end: None,
            flying: false,
        }
    }

    /// Counts `n` operations of a worker in flight in its phase's sink while the guard lives;
    /// `None` for a recorder with no sink.
    pub fn flight(&self, n: u64) -> Option<Flight> {
        self.sink.as_ref().map(|s| s.flight(n))
    }
}

/// Records one operation's attempts into a [`Recorder`]: counts, latency, retries, and (for
/// scenario runs) one [`ClientAttempt`] per attempt, timed from the run's start.
pub struct OperationLog<'a> {
    rec: &'a mut Recorder,
    ids: AttemptIds,
    run_start: Instant,
    /// When the operation's previous attempt ended.
    last_end: Option<Instant>,
    /// Counted in flight in the sink (from `started` until this log is dropped).
    flying: bool,
}

impl Drop for OperationLog<'_> {
    fn drop(&mut self) {
        if let (true, Some(sink)) = (self.flying, &self.rec.sink) {
            sink.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Observer for OperationLog<'_> {
    fn started(&mut self) {
        self.rec.operations += 1;
        if let (false, Some(sink)) = (self.flying, &self.rec.sink) {
            sink.in_flight.fetch_add(1, Ordering::Relaxed);
            self.flying = true;
        }
    }

    fn grpc_status(&mut self, code: GrpcCode) {
        self.rec.grpc_status(code);
        if let (false, Some(sink)) = (code == GrpcCode::Ok, &self.rec.sink) {
            sink.grpc_failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn attempt(&mut self, call: &Call, sent: Instant, ended: Instant, o: &AttemptOutcome) {
        let rec = &mut *self.rec;
        rec.result(o.status, o.error);
        if o.status.is_some() {
            rec.latency(ended - sent);
        }
        if call.attempt > 1 {
            rec.retries += 1;
        }
        let us = |t: Instant| t.saturating_duration_since(self.run_start).as_micros() as u64;
        let wait = self.last_end.filter(|_| call.attempt > 1).map(|end| {
            let gap = sent.saturating_duration_since(end).as_micros() as u64;
            (call.attempt, gap)
        });
        self.last_end = Some(ended);
        rec.attempt_point(AttemptPoint {
            t_start_us: us(sent),
            label: match (o.status, o.error) {
                (Some(s), _) => AttemptLabel::Status(s),
                (None, Some(e)) => AttemptLabel::Error(e),
                (None, None) => AttemptLabel::Unknown,
            },
            wait,
        });
        if let Some(a) = &mut rec.attempts {
            a.push(ClientAttempt {
                phase: self.ids.phase,
                op: self.ids.op,
                attempt: call.attempt,
                client: self.ids.client,
                t_start_us: us(sent),
                t_end_us: us(ended),
                status: o.status,
                error: o.error,
            });
        }
    }

    fn ended(&mut self, r: &OpResult) {
        let rec = &mut *self.rec;
        match r.end {
            OpEnd::Fallback => rec.fallbacks += 1,
            OpEnd::BudgetRefused => rec.budget_refusals += 1,
            OpEnd::DeadlineExceeded => rec.deadline_exceeded += 1,
            OpEnd::WaitTooLong => rec.wait_too_long += 1,
            OpEnd::Done | OpEnd::Exhausted => {}
        }
        if !r.succeeded() {
            rec.failed_operations += 1;
            if let Some(sink) = &rec.sink {
                sink.failed_operations.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Percentiles of a µs histogram, in ms.
pub fn latency_ms(h: &Histogram<u64>) -> reports::model::Latency {
    if h.is_empty() {
        return reports::model::Latency::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    reports::model::Latency {
        p50: ms(h.value_at_quantile(0.50)),
        p90: ms(h.value_at_quantile(0.90)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        max: ms(h.max()),
        mean: h.mean() / 1000.0,
        count: h.len(),
    }
}

/// Records `d` (µs, at least 1) into `hist`, or into `buf` when the samples are `buffered` for a
/// sink; true when the buffer is full and due for a flush.
fn record(hist: &mut Histogram<u64>, buf: &mut Vec<u64>, buffered: bool, d: Duration) -> bool {
    let us = (d.as_micros() as u64).max(1);
    if !buffered {
        hist.saturating_record(us);
        return false;
    }
    buf.push(us);
    buf.len() >= BATCH
}

/// A histogram in the HdrHistogram V2 format with DEFLATE, base64-encoded: what a report carries
/// so that reports can be merged exactly (see [`reports::model::Mergeable`]).
pub fn encode_hdr(h: &Histogram<u64>) -> String {
    use base64::Engine as _;
    let mut bytes = Vec::new();
    // Serializing to memory fails only on an internal inconsistency of the histogram.
    use hdrhistogram::serialization::Serializer as _;
    if let Err(e) = hdrhistogram::serialization::V2DeflateSerializer::new().serialize(h, &mut bytes)
    {
        tracing::error!("cannot serialize a histogram: {e:?}");
        bytes.clear();
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Longest base64 text [`decode_hdr`] reads: a recorder's histogram at 3 significant digits over
/// 1 µs .. 1 h is a few KiB compressed even when every bucket holds counts.
pub const HDR_MAX_TEXT: usize = 4 << 20;
/// Most bytes a compressed histogram may inflate to (every bucket of the widest histogram the
/// format allows, at 9 bytes a count).
const HDR_MAX_INFLATED: u64 = 32 << 20;
/// The V2 format's cookies (HdrHistogram's serialization spec, with the counter-width bits the
/// `hdrhistogram` crate writes) and its header: cookie, payload length, normalizing offset,
/// significant digits, lowest, highest, integer-to-double ratio.
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
const V2_HEADER: usize = 40;

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(u32::from_be_bytes)
}

/// The V2 bytes of a histogram, inflated when compressed, each length its header claims held
/// against the bytes that are really there: a header cannot make the reader allocate what the
/// input does not hold.
fn hdr_v2_bytes(bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let v2 = match be_u32(&bytes, 0) {
        Some(V2_COOKIE) => bytes,
        Some(V2_COMPRESSED_COOKIE) => {
            let claimed = be_u32(&bytes, 4).ok_or("cut short after its cookie")? as usize;
            let held = bytes.len() - 8;
            if claimed != held {
                return Err(format!(
                    "its header says {claimed} compressed bytes follow, but {held} do"
                ));
            }
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(&bytes[8..])
                .take(HDR_MAX_INFLATED + 1)
                .read_to_end(&mut out)
                .map_err(|e| format!("its compressed payload does not inflate: {e}"))?;
            if out.len() as u64 > HDR_MAX_INFLATED {
                return Err(format!(
                    "it inflates to more than {} MiB, more than any histogram of the format",
                    HDR_MAX_INFLATED >> 20
                ));
            }
            out
        }
        _ => return Err("it does not start with an HdrHistogram V2 cookie".into()),
    };
    if be_u32(&v2, 0) != Some(V2_COOKIE) {
        return Err("its compressed payload is not an HdrHistogram V2 histogram".into());
    }
    let claimed = be_u32(&v2, 4).ok_or("cut short in its header")? as usize;
    let held = v2.len().saturating_sub(V2_HEADER);
    if v2.len() < V2_HEADER || claimed > held {
        return Err(format!(
            "its header says {claimed} bytes of counts follow, but {held} do"
        ));
    }
    Ok(v2)
}

/// Reads back what [`encode_hdr`] wrote (or any V2 histogram, compressed or not), into a
/// histogram with the recorder's bounds, so histograms of several reports can be added. The
/// text comes from a report file a user may have edited: every length in it is checked against
/// the bytes that hold it before anything is allocated for it, and errors are in words.
pub fn decode_hdr(text: &str) -> Result<Histogram<u64>, String> {
    use base64::Engine as _;
    if text.is_empty() {
        return Ok(histogram());
    }
    if text.len() > HDR_MAX_TEXT {
        return Err(format!(
            "{} characters; a histogram is at most {} MiB of base64",
            text.len(),
            HDR_MAX_TEXT >> 20
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    let v2 = hdr_v2_bytes(bytes).map_err(|e| format!("not a usable HdrHistogram: {e}"))?;
    let h: Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut v2.as_slice())
        .map_err(|e| format!("not a usable HdrHistogram: {e}"))?;
    let mut out = histogram();
    out.add(&h).map_err(|_| {
        "a histogram with values beyond 1 hour of microseconds, which no recorder writes"
            .to_string()
    })?;
    Ok(out)
}

/// Retry delays by attempt index, in a size that does not grow with the retries: per attempt a
/// histogram (µs), the exact count, shortest and longest, and the delays themselves while there
/// are at most [`reports::model::DELAY_POINTS`]. What a report carries instead of one number per
/// retry ([`RetryDelays::shown`], [`RetryDelays::histograms`]), and what `harness merge` adds up
/// exactly ([`RetryDelays::add_report`]).
///
/// Nothing judges these: the `jitter` check reads the delays from the servers' journals. They
/// are the report's jitter chart, which draws a dot per delay, or one per percentile beyond
/// [`reports::model::DELAY_POINTS`] retries.
#[derive(Debug, Clone, Default)]
pub struct RetryDelays {
    by_attempt: BTreeMap<u32, AttemptStats>,
}

#[derive(Debug, Clone)]
struct AttemptStats {
    hist: Histogram<u64>,
    count: u64,
    min_us: u64,
    max_us: u64,
    /// Every delay while there are at most `DELAY_POINTS`, µs.
    few: Option<Vec<u64>>,
}

impl AttemptStats {
    fn new() -> AttemptStats {
        AttemptStats {
            hist: histogram(),
            count: 0,
            min_us: u64::MAX,
            max_us: 0,
            few: Some(Vec::new()),
        }
    }

    /// Counts `n` delays from `min_us` to `max_us`, and lists `few` while every delay is known.
    fn tally(
        &mut self,
        n: u64,
        min_us: u64,
        max_us: u64,
        few: Option<&[u64]>,
    ) -> Result<(), String> {
        self.count = self
            .count
            .checked_add(n)
            .ok_or("the retry delays' counts add up to more than 2^64 − 1")?;
        self.min_us = self.min_us.min(min_us);
        self.max_us = self.max_us.max(max_us);
        self.few = match (self.few.take(), few) {
            (Some(mut mine), Some(more))
                if mine.len() + more.len() <= reports::model::DELAY_POINTS =>
            {
                mine.extend_from_slice(more);
                Some(mine)
            }
            _ => None,
        };
        Ok(())
    }

    /// The delays to list: every one while there are few, else the delay at each percentile,
    /// from the histogram, with the exact shortest and longest at the ends.
    fn listed_ms(&self) -> Vec<f64> {
        let ms = |us: u64| us as f64 / 1000.0;
        if let Some(few) = &self.few {
            let mut few = few.clone();
            few.sort_unstable();
            return few.into_iter().map(ms).collect();
        }
        let last = reports::model::DELAY_POINTS - 1;
        let n = self.hist.len();
        if n == 0 {
            return Vec::new();
        }
        // Rank of percentile i among the n delays (from 0), as `quantile` in the HTML chart.
        let rank = |i: usize| ((n - 1) as f64 * i as f64 / last as f64).round() as u64;
        let mut out = Vec::with_capacity(last + 1);
        let mut seen = 0u64;
        let mut i = 0;
        for v in self.hist.iter_recorded() {
            seen += v.count_at_value();
            while i <= last && rank(i) < seen {
                let us = self
                    .hist
                    .median_equivalent(v.value_iterated_to())
                    // Not `clamp`: a hand-edited report may give a shortest above the longest.
                    .max(self.min_us)
                    .min(self.max_us);
                out.push(ms(us));
                i += 1;
            }
        }
        if let Some(first) = out.first_mut() {
            *first = ms(self.min_us);
        }
        if let Some(last) = out.last_mut() {
            *last = ms(self.max_us);
        }
        out
    }
}

impl RetryDelays {
    /// No delays.
    pub fn new() -> RetryDelays {
        RetryDelays::default()
    }

    /// No delay recorded.
    pub fn is_empty(&self) -> bool {
        self.by_attempt.values().all(|s| s.count == 0)
    }

    /// Waits recorded per attempt index.
    pub fn counts(&self) -> BTreeMap<u32, u64> {
        self.by_attempt.iter().map(|(k, s)| (*k, s.count)).collect()
    }

    /// One retry's wait before attempt `attempt`.
    pub fn record(&mut self, attempt: u32, delay_us: u64) {
        let s = self
            .by_attempt
            .entry(attempt)
            .or_insert_with(AttemptStats::new);
        s.hist.saturating_record(delay_us);
        // Counting this process's own retries one by one cannot pass 2^64 − 1.
        let _ = s.tally(1, delay_us, delay_us, Some(&[delay_us]));
    }

    /// Adds a report's retry delays: its histograms, or, for a report written before it carried
    /// them, the delays it lists (then every one). `name` is for messages.
    pub fn add_report(
        &mut self,
        shown: &[reports::model::AttemptDelays],
        histograms: &[reports::model::DelayHistogram],
        name: &str,
    ) -> Result<(), String> {
        let us = |ms: f64| (ms * 1000.0).round().max(0.0) as u64;
        for a in shown {
            let listed: Vec<u64> = a
                .delays_ms
                .iter()
                .filter(|v| v.is_finite() && **v >= 0.0)
                .map(|&v| us(v))
                .collect();
            let Some((lo, hi)) = a.range_ms() else {
                continue;
            };
            let s = self
                .by_attempt
                .entry(a.attempt)
                .or_insert_with(AttemptStats::new);
            match histograms.iter().find(|h| h.attempt == a.attempt) {
                Some(h) => {
                    let h = decode_hdr(&h.delays_hdr).map_err(|e| {
                        format!("{name}: the retry delays before attempt {}: {e}", a.attempt)
                    })?;
                    s.hist
                        .add(&h)
                        .map_err(|_| {
                            format!(
                                "{name}: the retry delays before attempt {}: values beyond 1 hour",
                                a.attempt
                            )
                        })?;
                }
                None if a.lists_every_delay() => {
                    for &d in &listed {
                        s.hist.saturating_record(d);
                    }
                }
                None => {
                    return Err(format!(
                        "{name}: lists {} of {} retry delays before attempt {} but carries no histogram of them",
                        a.delays_ms.len(),
                        a.count(),
                        a.attempt
                    ))
                }
            }
            let (n, every) = if a.lists_every_delay() {
                (listed.len() as u64, Some(listed.as_slice()))
            } else {
                (a.count(), None)
            };
            s.tally(n, us(lo), us(hi), every)
                .map_err(|e| format!("{name}: {e}"))?;
        }
        Ok(())
    }

    /// What the report shows, per attempt index in order.
    pub fn shown(&self) -> Vec<reports::model::AttemptDelays> {
        self.by_attempt
            .iter()
            .filter(|(_, s)| s.count > 0)
            .map(|(&attempt, s)| reports::model::AttemptDelays {
                attempt,
                delays_ms: s.listed_ms(),
                count: Some(s.count),
                min_ms: Some(s.min_us as f64 / 1000.0),
                max_ms: Some(s.max_us as f64 / 1000.0),
            })
            .collect()
    }

    /// The histograms a mergeable report carries, per attempt index in order.
    pub fn histograms(&self) -> Vec<reports::model::DelayHistogram> {
        self.by_attempt
            .iter()
            .filter(|(_, s)| s.count > 0)
            .map(|(&attempt, s)| reports::model::DelayHistogram {
                attempt,
                delays_hdr: encode_hdr(&s.hist),
            })
            .collect()
    }

    /// Adds `o`'s delays: histograms added, counts and extremes combined.
    pub fn merge(&mut self, o: &RetryDelays) {
        for (&attempt, theirs) in &o.by_attempt {
            let s = self
                .by_attempt
                .entry(attempt)
                .or_insert_with(AttemptStats::new);
            let _ = s.hist.add(&theirs.hist);
            // Recorders of this process: their counts are its own retries, far below 2^64 − 1.
            let _ = s.tally(
                theirs.count,
                theirs.min_us,
                theirs.max_us,
                theirs.few.as_deref(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_live_view_counts_each_second_and_each_outcome() {
        let mut a = AttemptSummary::default();
        let at = |t_start_us: u64, label: AttemptLabel, wait: Option<(u32, u64)>| AttemptPoint {
            t_start_us,
            label,
            wait,
        };
        // Second 0: two 200s; second 1: a 503, then its retry answered 200 in second 2.
        a.add(at(100, AttemptLabel::Status(200), None));
        a.add(at(999_999, AttemptLabel::Status(200), None));
        a.add(at(1_000_000, AttemptLabel::Status(503), None));
        a.add(at(
            2_500_000,
            AttemptLabel::Status(200),
            Some((2, 1_400_000)),
        ));
        a.add(at(2_600_000, AttemptLabel::Error(ErrorKind::Timeout), None));
        let v = a.view(reports::model::Latency::default(), 0..3);
        assert_eq!(v.per_second, [2, 1, 2]);
        assert_eq!(v.by_outcome["200"], 3);
        assert_eq!(v.by_outcome["503"], 1);
        assert_eq!(v.by_outcome["error:timeout"], 1);
        assert_eq!(v.retries_by_attempt, BTreeMap::from([(2, 1)]));
        // A window that starts later counts from its own first second.
        assert_eq!(
            a.view(reports::model::Latency::default(), 1..3).per_second,
            [1, 2]
        );
        assert_eq!(
            a.view(reports::model::Latency::default(), 5..7).per_second,
            [0, 0]
        );
        // Windows made wider than a second by a long run land in the second they began.
        a.widen();
        a.widen();
        assert_eq!(a.width_us, 4000);
        assert_eq!(
            a.view(reports::model::Latency::default(), 0..3).per_second,
            [2, 1, 2]
        );
    }

    use super::*;

    /// An operation is in flight from its start until its log is gone, however it ends; a
    /// delivery's copies while their guard lives.
    #[test]
    fn operations_are_in_flight_from_their_start_to_their_end() {
        use crate::operation::Observer as _;
        let sink = Sink::new();
        let mut rec = Recorder::worker(false, &sink);
        let ids = AttemptIds {
            phase: 0,
            op: 1,
            client: 0,
        };
        let mut log = rec.operation(ids, Instant::now());
        assert_eq!(sink.in_flight(), 0, "not before it starts");
        log.started();
        log.started();
        assert_eq!(sink.in_flight(), 1, "once per operation");
        drop(log);
        assert_eq!(sink.in_flight(), 0);
        // One that never started (cut short before it did) was never counted.
        drop(rec.operation(ids, Instant::now()));
        assert_eq!(sink.in_flight(), 0);
        let copies = rec.flight(3);
        assert_eq!(sink.in_flight(), 3);
        drop(copies);
        assert_eq!(sink.in_flight(), 0);
        assert!(
            Recorder::new(false).flight(1).is_none(),
            "no sink, no count"
        );
    }

    fn b64(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// A report edited by hand whose histogram header claims gigabytes that are not there is
    /// refused with a sentence, before anything is allocated for it.
    #[test]
    fn a_histogram_header_cannot_claim_bytes_it_does_not_hold() {
        // Compressed: a 4 GB compressed payload claimed, 40 bytes held.
        let mut compressed = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        compressed.extend(0xffff_fff0u32.to_be_bytes());
        compressed.extend([0u8; 32]);
        let e = decode_hdr(&b64(&compressed)).expect_err("refused");
        assert!(
            e.contains("4294967280 compressed bytes follow, but 32 do"),
            "{e}"
        );
        // Uncompressed: 4 GB of counts claimed after a well-formed header.
        let mut plain = V2_COOKIE.to_be_bytes().to_vec();
        plain.extend(0xffff_fff0u32.to_be_bytes());
        plain.extend(0u32.to_be_bytes());
        plain.extend(3u32.to_be_bytes());
        plain.extend(1u64.to_be_bytes());
        plain.extend(3_600_000_000u64.to_be_bytes());
        plain.extend(1.0f64.to_be_bytes());
        assert_eq!(plain.len(), V2_HEADER);
        let e = decode_hdr(&b64(&plain)).expect_err("refused");
        assert!(
            e.contains("4294967280 bytes of counts follow, but 0 do"),
            "{e}"
        );
        assert!(!e.contains("Error {"), "no debug print: {e}");
        // Not a histogram at all, and too long a text.
        let e = decode_hdr(&b64(b"hello, world")).expect_err("refused");
        assert!(e.contains("V2 cookie"), "{e}");
        let e = decode_hdr(&"A".repeat(HDR_MAX_TEXT + 4)).expect_err("refused");
        assert!(e.contains("at most 4 MiB"), "{e}");
        // What the recorder writes still reads back.
        let mut h = histogram();
        for v in [1, 250, 3_000, 1_000_000] {
            h.record(v).expect("in range");
        }
        let back = decode_hdr(&encode_hdr(&h)).expect("round trip");
        assert_eq!(back.len(), 4);
        assert_eq!(back.max(), h.max());
    }

    /// The reference the summary is checked against: the same figures computed from one record
    /// per attempt, as a run that keeps its attempts has them.
    mod reference {
        use std::time::Duration;

        use history::ClientAttempt;
        use reports::model::Timeline;

        use crate::metrics::RetryDelays;

        /// Requests per window by status or error kind, from the client's view; windows count from the
        /// run's start, as the attempts' times do ([`ClientAttempt::t_start_us`]) and as the journal's
        /// timeline does.
        pub(super) fn timeline_from_attempts(
            attempts: &[ClientAttempt],
            window: Duration,
        ) -> Timeline {
            let w = (window.as_micros() as u64).max(1);
            crate::run::build_timeline(
                attempts.iter().map(|a| {
                    let label = match (a.status, a.error) {
                        (Some(s), _) => s.to_string(),
                        (None, Some(e)) => format!("error:{e}"),
                        (None, None) => "unknown".to_string(),
                    };
                    (a.t_start_us / w, label)
                }),
                window,
            )
        }

        /// Observed waits before each retry, grouped by attempt index, from the driver's records.
        pub(super) fn retry_delays(attempts: &[ClientAttempt]) -> RetryDelays {
            let mut sorted: Vec<&ClientAttempt> = attempts.iter().collect();
            sorted.sort_by_key(|a| (a.phase, a.op, a.client, a.attempt));
            let mut delays = RetryDelays::new();
            for pair in sorted.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if a.phase == b.phase
                    && a.op == b.op
                    && a.client == b.client
                    && b.attempt == a.attempt + 1
                {
                    delays.record(b.attempt, b.t_start_us.saturating_sub(a.t_end_us));
                }
            }
            delays
        }
    }

    /// Operations of `attempts` attempts each, every attempt 1 ms long and `gap_ms × attempt`
    /// after the previous, recorded through the operation log as the driver records them.
    fn record(rec: &mut Recorder, start: Instant, ops: u64, attempts: u32, gap_ms: u64) {
        for op in 0..ops {
            let ids = AttemptIds {
                phase: 0,
                op: op + 1,
                client: (op % 7) as u32,
            };
            let mut log = rec.operation(ids, start);
            let mut t = start + Duration::from_millis(op * 3);
            for attempt in 1..=attempts {
                let call = Call {
                    attempt,
                    timeout: Duration::from_secs(1),
                    fresh_key: None,
                };
                let outcome = AttemptOutcome {
                    status: Some(if attempt == attempts { 201 } else { 503 }),
                    error: None,
                    retry_after: None,
                };
                let ended = t + Duration::from_millis(1);
                log.attempt(&call, t, ended, &outcome);
                t = ended + Duration::from_millis(gap_ms * u64::from(attempt));
            }
        }
    }

    #[test]
    fn every_attempt_sent_is_completed_an_error_or_abandoned() {
        let mut rec = Recorder::new(false);
        rec.result(Some(200), None);
        rec.result(Some(503), None);
        rec.result(None, Some(ErrorKind::Reset));
        rec.result(None, None);
        rec.result(None, None);
        let q = rec.requests();
        assert_eq!((q.sent, q.completed, q.errors, q.abandoned), (5, 2, 1, 2));
        assert_eq!(q.sent, q.completed + q.errors + q.abandoned);
    }

    #[test]
    fn the_summary_shows_what_one_record_per_attempt_shows() {
        let start = Instant::now();
        let mut rec = Recorder::new(true);
        record(&mut rec, start, 500, 3, 20);
        let attempts = rec.attempts.take().unwrap();
        let sorted = |d: Vec<reports::model::AttemptDelays>| {
            d.into_iter()
                .map(|mut a| {
                    a.delays_ms.sort_by(f64::total_cmp);
                    a
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            sorted(rec.summary.retry_delays().shown()),
            sorted(reference::retry_delays(&attempts).shown())
        );
        let window = Duration::from_millis(100);
        assert_eq!(
            rec.summary.timeline(window),
            reference::timeline_from_attempts(&attempts, window)
        );
    }

    #[test]
    fn a_workers_summary_goes_through_the_sink_and_stays_bounded() {
        let start = Instant::now();
        let sink = Sink::new();
        let mut worker = Recorder::worker(false, &sink);
        // Five minutes of retries: more waits than are kept, more milliseconds than windows.
        record(&mut worker, start, 100_000, 2, 1);
        let mut total = Recorder::new(false);
        total.merge(&worker);
        let s = &total.summary;
        let delays = s.retry_delays().shown();
        assert_eq!(delays.len(), 1);
        assert!(
            delays[0].delays_ms.len() <= reports::model::DELAY_POINTS,
            "{}",
            delays[0].delays_ms.len()
        );
        assert_eq!(delays[0].count, Some(100_000), "every wait counted");
        // Each wait is about 1 ms (the histogram's resolution is 0.1 %).
        assert!(
            delays[0].delays_ms.iter().all(|d| (*d - 1.0).abs() < 0.01),
            "{:?}",
            delays[0]
        );
        assert!(s.width_us > 1000, "windows widened");
        assert!(s.bins.values().all(|c| c.len() <= MAX_BINS));
        let t = s.timeline(Duration::from_secs(5));
        let counted: u64 = t.series.iter().flat_map(|s| s.counts.iter()).sum();
        assert_eq!(counted, 200_000, "every attempt counted once");
        assert_eq!(t.window_ms, 5000.0);
    }

    #[test]
    fn retry_delays_are_grouped_by_attempt_per_operation() {
        let a = |op: u64, attempt: u32, start: u64, end: u64| ClientAttempt {
            phase: 0,
            op,
            attempt,
            client: 0,
            t_start_us: start,
            t_end_us: end,
            status: Some(503),
            error: None,
        };
        let attempts = vec![
            a(1, 1, 0, 1_000),
            a(2, 1, 0, 2_000),
            a(1, 2, 101_000, 102_000),
            a(2, 2, 52_000, 53_000),
            a(1, 3, 302_000, 303_000),
        ];
        let d = reference::retry_delays(&attempts).shown();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].attempt, 2);
        assert_eq!(d[0].delays_ms, vec![50.0, 100.0]);
        assert_eq!(
            (d[0].count, d[0].min_ms, d[0].max_ms),
            (Some(2), Some(50.0), Some(100.0))
        );
        assert_eq!(d[1].delays_ms, vec![200.0]);
    }

    #[test]
    fn the_client_timeline_counts_from_the_runs_start_too() {
        let a = |t_start_us, status, error| ClientAttempt {
            phase: 0,
            op: 1,
            attempt: 1,
            client: 0,
            t_start_us,
            t_end_us: t_start_us + 1_000,
            status,
            error,
        };
        // Nothing was sent in the run's first 200 ms; windows of 100 ms.
        let attempts = vec![
            a(210_000, Some(503), None),
            a(250_000, None, Some(history::ErrorKind::Timeout)),
            a(420_000, Some(201), None),
        ];
        let t = reference::timeline_from_attempts(&attempts, Duration::from_millis(100));
        let count = |label: &str| t.counts(label).to_vec();
        assert_eq!(count("503"), vec![0, 0, 1, 0, 0]);
        assert_eq!(count("error:timeout"), vec![0, 0, 1, 0, 0]);
        assert_eq!(count("201"), vec![0, 0, 0, 0, 1]);
    }
}
