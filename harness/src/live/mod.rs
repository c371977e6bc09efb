//! `--dashboard`: the run as it goes, served to a browser.
//!
//! A [`Board`] knows the phases that have started and reads each one's [`Sink`] (where the
//! workers fold their latencies and attempts) once a second into one JSON snapshot. It serves
//! that snapshot four ways on a loopback address of its own: `/` a self-contained page (no
//! script or style from elsewhere), `/events` Server-Sent Events (one `data:` line, the snapshot,
//! about once a second), `/snapshot` the latest one, `/metrics` the same as Prometheus metrics
//! ([`metrics`]). When the run ends the last snapshot carries
//! the final report and the state `done` (or `interrupted`), and the event stream ends after it.
//!
//! Bounded: the board keeps the latest snapshot and a window of [`SERIES_POINTS`] seconds of the
//! throughput chart, whatever the run's length; every reader gets the latest snapshot when it is
//! ready for one (a `watch` channel), so a browser that reads slowly skips snapshots, one that
//! never reads holds one, and one that reconnects starts from the latest.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::{Sink, SinkView};

pub mod metrics;

/// How often a snapshot is made.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Seconds of the throughput and latency chart a snapshot carries (the oldest are dropped).
pub const SERIES_POINTS: usize = 300;
/// Longest the end of a run waits for the open event streams to send the final snapshot.
const FINAL_FLUSH: Duration = Duration::from_secs(2);

/// One snapshot, as `/events` and `/snapshot` send it (the book's reference documents it).
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Snapshots made so far, counting this one.
    pub seq: u64,
    /// What runs: the report's scenario name.
    pub title: String,
    /// `running`, then `done` or `interrupted` in the last snapshot.
    pub state: &'static str,
    /// Seconds since the board started.
    pub elapsed_s: f64,
    /// Every phase that has started, in order.
    pub phases: Vec<PhaseSnapshot>,
    /// The embedded fault server's side (`run` and `exec` with a `server:`), from its journal's
    /// counters: none without one.
    pub server: Option<ServerSnapshot>,
    /// One point a second of the run, the last [`SERIES_POINTS`]: the attempts that started in
    /// that second and the latest phase's latency p99 so far at its end.
    pub series: Vec<SeriesPoint>,
    /// Each check the run will judge, in the report's order: its provisional state while the
    /// run goes (`thresholds` on the figures so far; the others `pending`, judged on the
    /// journal at the end), its verdict in the last snapshot.
    pub checks: Vec<CheckState>,
    /// The final report (as `--format json` prints it), in the last snapshot only.
    pub report: Option<serde_json::Value>,
}

/// A check in a snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct CheckState {
    /// Its name, as in the report.
    pub name: String,
    /// `pass`, `fail`, `inconclusive` (as the report's verdicts) or `pending`: not judged before
    /// the run ends.
    pub state: String,
    /// Why, in a sentence.
    pub summary: String,
}

/// The checks a run will judge, as the board knows them.
#[derive(Debug, Clone, Default)]
struct Judging {
    /// Their names, in the report's order.
    names: Vec<String>,
    /// The `thresholds` check's rules, evaluated on each snapshot's figures.
    rules: Vec<checks::threshold_rules::Rule>,
    /// `thresholds: { abort_on_fail: true }`: from this far into the run, a failing rule
    /// cancels this token.
    abort: Option<(Duration, tokio_util::sync::CancellationToken)>,
}

/// A run the thresholds stopped (`abort_on_fail`).
#[derive(Debug, Clone, PartialEq)]
pub struct Aborted {
    /// Seconds into the run.
    pub at_s: f64,
    /// What failed, as the `thresholds` check says it ("1 of 2 thresholds failed: …").
    pub why: String,
}

/// A phase in a snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseSnapshot {
    /// Its name in the scenario (`load` for `harness load`).
    pub name: String,
    /// Its kind: burst, rate, clients, fleet, deliver.
    pub kind: &'static str,
    /// `running` or `done`.
    pub state: &'static str,
    /// Seconds it has run.
    pub elapsed_s: f64,
    /// Operations finished (after their retries).
    pub operations_done: u64,
    /// Operations started and not yet ended (0 once the phase is done).
    pub in_flight: u64,
    /// Attempts counted so far, by how they ended: a status (`"503"`), `error:KIND`, `unknown`.
    pub by_outcome: BTreeMap<String, u64>,
    /// Attempts counted so far.
    pub attempts: u64,
    /// Attempts started in the last whole second of the run.
    pub attempts_per_s: u64,
    /// Per-attempt latency from the send, in milliseconds, from the phase's HDR histogram.
    pub latency_ms: reports::model::Latency,
    /// Retries by the index of the attempt they made (2 for the first retry).
    pub retries_by_attempt: BTreeMap<u32, u64>,
}

/// The embedded fault server's counters, as `GET /__harness/stats` serves them.
#[derive(Debug, Clone, Serialize)]
pub struct ServerSnapshot {
    /// Requests journaled.
    pub requests: u64,
    /// Requests by the rule that fired (the faults injected, by rule).
    pub by_rule: BTreeMap<String, u64>,
    /// Requests by the fault injected.
    pub by_fault: BTreeMap<String, u64>,
    /// Requests by the status sent (`none` when none was).
    pub by_status: BTreeMap<String, u64>,
}

/// A second of the chart.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SeriesPoint {
    /// The end of the second, in seconds from the run's start.
    pub t_s: u64,
    /// Attempts that started in that second, over every phase.
    pub attempts_per_s: u64,
    /// The latest phase's latency p99 so far when that second ended, ms (0 before any sample).
    pub p99_ms: f64,
}

/// A phase the board reads.
struct Phase {
    name: String,
    kind: &'static str,
    started: Instant,
    ended: Option<Duration>,
    /// Its figures once it has ended (its workers' samples are then merged out of the sink),
    /// with its attempts per second over its last [`SERIES_POINTS`] seconds.
    last: Option<SinkView>,
    /// The latest view read from the sink: shown again when the sink has just been emptied
    /// into the phase's result and [`Board::phase_ended`] has not come yet.
    seen: Option<SinkView>,
    sink: Arc<Sink>,
    done: Arc<AtomicU64>,
    /// The instant the sink's attempt times count from: the run's start, the same for every
    /// phase of a run.
    origin: Instant,
}

#[derive(Default)]
struct State {
    phases: Vec<Phase>,
    judging: Judging,
    /// The latest phase's p99 at the end of each second of the run (the last [`SERIES_POINTS`]).
    p99: VecDeque<(u64, f64)>,
    seq: u64,
}

/// The live view of one run (see the module's doc).
pub struct Board {
    title: String,
    started: Instant,
    addr: SocketAddr,
    state: Mutex<State>,
    /// The embedded fault server, when the run has one.
    server: Mutex<Option<fault_server::StatsHandle>>,
    tx: watch::Sender<Arc<Published>>,
    /// Event streams open now.
    streams: AtomicUsize,
    /// Set once, when the thresholds stopped the run.
    aborted: Mutex<Option<Aborted>>,
}

/// A snapshot as served: its JSON, and whether it is the last.
#[derive(Debug)]
struct Published {
    json: Bytes,
    /// The same snapshot as Prometheus metrics (`/metrics`).
    metrics: Bytes,
    last: bool,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Board")
            .field("title", &self.title)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Board {
    /// Binds `addr` (port 0: one the OS picks), and serves the board there and makes a snapshot
    /// every [`INTERVAL`] until [`Board::finish`].
    pub async fn start(title: &str, addr: SocketAddr) -> std::io::Result<Arc<Board>> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let board = Board::ticking(title, addr);
        tokio::spawn(accept(listener, board.clone()));
        Ok(board)
    }

    /// A board that serves nothing: it reads the phases once a second for what judges the run
    /// as it goes (`abort_on_fail`) when no `--dashboard` was asked for.
    pub fn headless(title: &str) -> Arc<Board> {
        Board::ticking(title, SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    fn ticking(title: &str, addr: SocketAddr) -> Arc<Board> {
        let (tx, _) = watch::channel(Arc::new(Published {
            json: Bytes::new(),
            metrics: Bytes::new(),
            last: false,
        }));
        let board = Arc::new(Board {
            title: title.to_string(),
            started: Instant::now(),
            addr,
            state: Mutex::new(State::default()),
            server: Mutex::new(None),
            tx,
            streams: AtomicUsize::new(0),
            aborted: Mutex::new(None),
        });
        board.publish(None, "running");
        let ticking = Arc::downgrade(&board);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(INTERVAL);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                every.tick().await;
                let Some(b) = ticking.upgrade() else { return };
                if b.tx.borrow().last {
                    return;
                }
                b.publish(None, "running");
            }
        });
        board
    }

    /// Where the page is.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The run's embedded fault server, whose counters each snapshot shows.
    pub fn server(&self, handle: fault_server::StatsHandle) {
        *self.server.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
    }

    /// The checks the run will judge (`names`, in the report's order) and the `thresholds`
    /// check's `rules`, which each snapshot evaluates on the figures so far.
    pub fn checks(&self, names: Vec<String>, rules: Vec<checks::threshold_rules::Rule>) {
        let mut st = self.lock();
        st.judging.names = names;
        st.judging.rules = rules;
    }

    /// From `after` into the run, the first snapshot whose `thresholds` fails cancels `stop`
    /// and says why in [`Board::aborted`].
    pub fn abort_on_fail(&self, after: Duration, stop: tokio_util::sync::CancellationToken) {
        self.lock().judging.abort = Some((after, stop));
    }

    /// Why and when the thresholds stopped the run, if they did.
    pub fn aborted(&self) -> Option<Aborted> {
        self.aborted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A phase has started: its workers fold into `sink`, finished operations count in `done`,
    /// and attempt times count from `origin`.
    pub fn phase_started(
        &self,
        name: &str,
        kind: &'static str,
        sink: &Arc<Sink>,
        done: &Arc<AtomicU64>,
        origin: Instant,
    ) {
        let mut st = self.lock();
        st.phases.push(Phase {
            name: name.to_string(),
            kind,
            started: Instant::now(),
            ended: None,
            last: None,
            seen: None,
            sink: sink.clone(),
            done: done.clone(),
            origin,
        });
    }

    /// The phase started last has ended with what `recorder` holds.
    pub fn phase_ended(&self, recorder: &crate::metrics::Recorder) {
        let mut st = self.lock();
        if let Some(p) = st.phases.iter_mut().rev().find(|p| p.ended.is_none()) {
            p.ended = Some(p.started.elapsed());
            let end = p.origin.elapsed().as_secs() + 1;
            p.last = Some(recorder.view(end.saturating_sub(SERIES_POINTS as u64)..end));
        }
    }

    /// The run has ended with `report` (its JSON): the last snapshot goes out with it, and the
    /// open event streams get up to [`FINAL_FLUSH`] to send it.
    pub async fn finish(&self, report: &reports::model::Report) {
        let state = if report.interrupted {
            "interrupted"
        } else {
            "done"
        };
        let json = serde_json::to_value(report).unwrap_or(serde_json::Value::Null);
        self.publish(Some(json), state);
        let until = Instant::now() + FINAL_FLUSH;
        while self.streams.load(Ordering::Acquire) > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `p`'s figures now, with its attempts per second over `seconds` of the run. The figures
    /// only grow: a sink with fewer attempts than the last view has been emptied into the
    /// phase's result, which [`Board::phase_ended`] brings next.
    fn view(p: &mut Phase, seconds: std::ops::Range<u64>) -> SinkView {
        if let Some(last) = &p.last {
            return last.clone();
        }
        let v = p.sink.view(seconds);
        let total = |v: &SinkView| v.by_outcome.values().sum::<u64>();
        match &p.seen {
            Some(seen) if total(&v) < total(seen) => seen.clone(),
            _ => {
                p.seen = Some(v.clone());
                v
            }
        }
    }

    /// Makes a snapshot and hands it to every reader.
    fn publish(&self, report: Option<serde_json::Value>, state: &'static str) {
        let now = Instant::now();
        // Under the state's lock from here to the send: a tick that reads the run as still
        // running cannot replace the last snapshot once it is out.
        let mut st = self.lock();
        if self.tx.borrow().last {
            return;
        }
        let snapshot = {
            st.seq += 1;
            // The chart's window: the whole seconds of the run so far, the last SERIES_POINTS.
            let run_s = st
                .phases
                .first()
                .map_or(0, |p| now.saturating_duration_since(p.origin).as_secs());
            let window = run_s.saturating_sub(SERIES_POINTS as u64)..run_s;
            let mut counts = vec![0u64; (window.end - window.start) as usize];
            let mut phases = Vec::with_capacity(st.phases.len());
            let mut latest_p99 = None;
            let mut so_far = Figures::default();
            for p in st.phases.iter_mut() {
                let v = Board::view(p, window.clone());
                so_far.add(&v, p.done.load(Ordering::Relaxed));
                for (second, n) in v.seconds.clone().zip(&v.per_second) {
                    if let Some(c) = second
                        .checked_sub(window.start)
                        .and_then(|i| counts.get_mut(i as usize))
                    {
                        *c += n;
                    }
                }
                latest_p99 = Some(v.latency.p99);
                let last_second = run_s
                    .checked_sub(1)
                    .and_then(|s| s.checked_sub(v.seconds.start))
                    .and_then(|i| v.per_second.get(i as usize))
                    .copied()
                    .unwrap_or(0);
                phases.push(PhaseSnapshot {
                    name: p.name.clone(),
                    kind: p.kind,
                    state: if p.ended.is_some() { "done" } else { "running" },
                    elapsed_s: round3(p.ended.unwrap_or_else(|| p.started.elapsed()).as_secs_f64()),
                    operations_done: p.done.load(Ordering::Relaxed),
                    in_flight: if p.ended.is_some() {
                        0
                    } else {
                        p.sink.in_flight()
                    },
                    attempts: v.by_outcome.values().sum(),
                    by_outcome: v.by_outcome,
                    attempts_per_s: last_second,
                    latency_ms: v.latency,
                    retries_by_attempt: v.retries_by_attempt,
                });
            }
            // The p99 as it was when each second ended: kept per second, as the chart's line.
            if let Some(p99) = latest_p99 {
                if st.p99.back().is_none_or(|(s, _)| *s < run_s) {
                    if st.p99.len() == SERIES_POINTS {
                        st.p99.pop_front();
                    }
                    st.p99.push_back((run_s, p99));
                }
            }
            let mut p99 = st.p99.iter().peekable();
            let mut line = 0.0;
            let series = window
                .clone()
                .zip(counts)
                .map(|(second, n)| {
                    let t_s = second + 1;
                    while let Some((_, v)) = p99.next_if(|(s, _)| *s <= t_s) {
                        line = *v;
                    }
                    SeriesPoint {
                        t_s,
                        attempts_per_s: n,
                        p99_ms: line,
                    }
                })
                .collect();
            let server = self
                .server
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|h| {
                    let s = h.stats();
                    ServerSnapshot {
                        requests: s.requests,
                        by_rule: s.by_rule.into_iter().collect(),
                        by_fault: s.by_fault.into_iter().collect(),
                        by_status: s.by_status.into_iter().collect(),
                    }
                });
            let run_secs = st.phases.first().map_or(0.0, |p| {
                now.saturating_duration_since(p.origin).as_secs_f64()
            });
            let checks = match &report {
                Some(r) => final_checks(r),
                None => so_far.provisional(&st.judging, run_secs),
            };
            if let (None, Some((after, stop))) = (&report, &st.judging.abort) {
                let failed = checks
                    .iter()
                    .find(|c| c.name == "thresholds" && c.state == "fail");
                if let (Some(c), true) = (failed, run_secs >= after.as_secs_f64()) {
                    let mut aborted = self.aborted.lock().unwrap_or_else(|p| p.into_inner());
                    if aborted.is_none() {
                        *aborted = Some(Aborted {
                            at_s: round3(run_secs),
                            why: c.summary.trim_start_matches("so far: ").to_string(),
                        });
                        stop.cancel();
                    }
                }
            }
            Snapshot {
                seq: st.seq,
                title: self.title.clone(),
                state,
                elapsed_s: round3(now.duration_since(self.started).as_secs_f64()),
                phases,
                server,
                series,
                checks,
                report,
            }
        };
        let json = serde_json::to_vec(&snapshot).unwrap_or_default();
        let metrics = metrics::encode(&snapshot);
        let last = state != "running";
        self.tx.send_replace(Arc::new(Published {
            json: Bytes::from(json),
            metrics: Bytes::from(metrics),
            last,
        }));
        drop(st);
    }
}

/// The load's figures so far, over every phase, as the `thresholds` check reads a driver's.
#[derive(Default)]
struct Figures {
    latency: Option<hdrhistogram::Histogram<u64>>,
    operations: u64,
    failed_operations: u64,
    sent: u64,
    completed: u64,
    server_errors: u64,
    transport_errors: u64,
    grpc_failed: u64,
}

impl Figures {
    /// Adds a phase's view, with the operations it has ended.
    fn add(&mut self, v: &SinkView, done: u64) {
        if let Some(h) = &v.histogram {
            match &mut self.latency {
                Some(all) => {
                    // Histograms of one shape: adding cannot fail but for a sample out of range,
                    // which the workers' recording already clamped.
                    let _ = all.add(h);
                }
                None => self.latency = Some(h.clone()),
            }
        }
        self.operations += done;
        self.failed_operations += v.failed_operations;
        self.grpc_failed += v.grpc_failed;
        for (outcome, n) in &v.by_outcome {
            self.sent += n;
            if outcome.starts_with("error:") {
                self.transport_errors += n;
            } else if outcome != "unknown" {
                self.completed += n;
                if outcome.starts_with('5') {
                    self.server_errors += n;
                }
            }
        }
    }

    /// Each check's state so far: `thresholds` evaluated on these figures over `run_secs`, as
    /// the check evaluates a driver's figures at the end; the others pending.
    fn provisional(&self, judging: &Judging, run_secs: f64) -> Vec<CheckState> {
        judging
            .names
            .iter()
            .map(|name| {
                if name == "thresholds" {
                    let r = checks::thresholds::evaluate(&judging.rules, &self.measured(run_secs));
                    CheckState {
                        name: name.clone(),
                        state: verdict_name(r.verdict),
                        summary: format!("so far: {}", r.summary),
                    }
                } else {
                    CheckState {
                        name: name.clone(),
                        state: "pending".into(),
                        summary: "judged on the journal when the run ends".into(),
                    }
                }
            })
            .collect()
    }

    fn measured(&self, run_secs: f64) -> checks::thresholds::Measured {
        use checks::thresholds::{LatencyFigures, Measured};
        let per_attempt = |n: u64| (self.sent > 0).then(|| n as f64 / self.sent as f64);
        // A gRPC attempt that got no answer also has the client's own status.
        let failed_attempts = self.transport_errors
            + self.server_errors
            + self.grpc_failed.saturating_sub(self.transport_errors);
        Measured {
            latency: self
                .latency
                .clone()
                .filter(|h| !h.is_empty())
                .map(LatencyFigures::Histogram),
            error_rate: (self.operations > 0)
                .then(|| self.failed_operations as f64 / self.operations as f64),
            request_failure_rate: per_attempt(failed_attempts),
            transport_error_rate: per_attempt(self.transport_errors),
            throughput_rps: (run_secs > 0.0).then(|| self.completed as f64 / run_secs),
            requests: self.sent,
        }
    }
}

/// A verdict as the report names it (`pass`, `fail`, `inconclusive`).
fn verdict_name(v: reports::model::Verdict) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The final report's checks, as the last snapshot gives them.
fn final_checks(report: &serde_json::Value) -> Vec<CheckState> {
    report["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| CheckState {
            name: c["name"].as_str().unwrap_or_default().to_string(),
            state: c["verdict"].as_str().unwrap_or_default().to_string(),
            summary: c["summary"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

async fn accept(listener: TcpListener, board: Arc<Board>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let board = board.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| serve(board.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
            Err(e) => {
                tracing::warn!("dashboard: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

async fn serve(board: Arc<Board>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let res = match (req.method() == http::Method::GET, req.uri().path()) {
        (true, "/") => full(StatusCode::OK, "text/html; charset=utf-8", PAGE.into()),
        (true, "/snapshot") => {
            let json = board.tx.borrow().json.clone();
            full(StatusCode::OK, "application/json", json)
        }
        (true, "/events") => events(&board),
        (true, "/metrics") => {
            let text = board.tx.borrow().metrics.clone();
            full(StatusCode::OK, metrics::CONTENT_TYPE, text)
        }
        (false, _) => full(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "the dashboard takes GET\n".into(),
        ),
        _ => full(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "the dashboard serves /, /events, /snapshot and /metrics\n".into(),
        ),
    };
    Ok(res)
}

fn full(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Body> {
    let mut res = Response::new(Full::new(body).boxed_unsync());
    *res.status_mut() = status;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    res.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    res
}

/// Counts an open event stream while it lives.
struct Open(Arc<Board>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The event stream: the latest snapshot now, then each new one, and nothing after the last.
fn events(board: &Arc<Board>) -> Response<Body> {
    board.streams.fetch_add(1, Ordering::AcqRel);
    let mut rx = board.tx.subscribe();
    rx.mark_changed();
    let open = Open(board.clone());
    let stream =
        futures_util::stream::unfold((rx, open, false), |(mut rx, open, ended)| async move {
            // The poll after the last snapshot (hyper asks once that one is written) ends the stream
            // and, with `open`, counts it closed; so does a board that is gone.
            if ended || rx.changed().await.is_err() {
                drop(open);
                return None;
            }
            let p = rx.borrow_and_update().clone();
            let mut event = Vec::with_capacity(p.json.len() + 16);
            event.extend_from_slice(b"data: ");
            event.extend_from_slice(&p.json);
            event.extend_from_slice(b"\n\n");
            let frame: Result<Frame<Bytes>, Infallible> = Ok(Frame::data(Bytes::from(event)));
            Some((frame, (rx, open, p.last)))
        });
    let mut res = Response::new(StreamBody::new(stream).boxed_unsync());
    let h = res.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    res
}

/// The page: figures and a chart drawn from each snapshot, the final report's verdict at the end.
const PAGE: &str = include_str!("page.html");
