//! A scenario run: start the embedded fault server, drive the phases against the target, collect
//! the journal, run the checks, and build the report.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fault_server::{FaultServer, ServerOptions};
use history::{ClientFigures, Entry, Facts};
use reports::model::{Phase, Report, Timeline};

use crate::driver::{self, Keys, PhaseCtx};
use crate::http::Target;
use crate::metrics::Recorder;
use crate::plan::{PhaseKind, Plan};
use crate::progress::Progress;
use crate::reach::{ensure_reachable, RunError};
use crate::report::ReportBuilder;
use crate::tally::JournalTally;
use tokio_util::sync::CancellationToken;

/// Everything a run produced, before rendering. The embedded server's journal is not in it: it
/// was read as a stream from the server's journal file, and memory did not hold it.
pub struct RunOutcome {
    /// The report.
    pub report: Report,
}

/// Runs a plan. `stop` is cancelled on Ctrl-C or SIGTERM: the load stops, what is in flight is
/// cancelled, and the checks still run on what was done; the report says it was interrupted.
pub async fn run_plan(
    plan: &Plan,
    stop: CancellationToken,
    progress: bool,
    live: Option<Arc<crate::live::Board>>,
) -> Result<RunOutcome, RunError> {
    let mut session = Session::start(plan).await?;
    // `abort_on_fail`: the thresholds, judged once a second on the figures so far, may stop the
    // phases (a token of their own: Ctrl-C still reads as an interruption).
    let abort = plan
        .checks
        .thresholds
        .as_ref()
        .filter(|t| t.abort_on_fail && !t.rules.is_empty());
    let phases_stop = stop.child_token();
    let live = match (live, abort) {
        (None, Some(_)) => Some(crate::live::Board::headless(&plan.name)),
        (live, _) => live,
    };
    if let (Some(board), Some(t)) = (&live, abort) {
        board.abort_on_fail(Duration::from_millis(t.abort_after_ms), phases_stop.clone());
    }
    session.watch(live.clone(), plan);
    session
        .drive(plan, phases_stop, progress, Duration::ZERO)
        .await?;
    if let Some(a) = live.as_ref().and_then(|b| b.aborted()) {
        session.aborted(a, stop.is_cancelled());
    }
    let outcome = session.finish(plan, None).await;
    if let Some(board) = live {
        board.finish(&outcome.report).await;
    }
    Ok(outcome)
}

/// A run in progress: the embedded server (if any) and what the phases measured so far.
pub struct Session {
    /// How the target is reached (the plan's, trusting the embedded server's certificate).
    connect: crate::http::Connect,
    server: Option<FaultServer>,
    chain: Option<crate::relay::Chain>,
    started_unix_ms: u64,
    run_start: Instant,
    /// The embedded server's journal time at `run_start`.
    time_origin_us: u64,
    target_url: Option<String>,
    total: Recorder,
    phases: Vec<Phase>,
    /// Idempotency-Keys the driver used (one per operation), for the duplicates verify step.
    keys_used: Vec<String>,
    /// Ctrl-C or SIGTERM cut the run short.
    interrupted: bool,
    /// Why and when the thresholds stopped the phases.
    aborted: Option<crate::live::Aborted>,
    /// Each phase's histograms, for the report's mergeable part.
    phase_hdrs: Vec<reports::model::PhaseHistograms>,
    /// How late the first phase started after the run's common start.
    late: Duration,
    /// What the deliver phases sent: their journals and the ids the verify step asks about.
    deliveries: Deliveries,
    /// The live dashboard the phases report to (`--dashboard`).
    live: Option<Arc<crate::live::Board>>,
}

/// The deliver phases' journals (judged as the run's journal, with the embedded server's when
/// there is one) and the ids, forgeries' ids and subjects the verify step asks about.
#[derive(Debug, Default)]
struct Deliveries {
    journals: Vec<tempfile::NamedTempFile>,
    entries: u64,
    events: Vec<String>,
    forged: Vec<String>,
    subjects: Vec<String>,
}

impl Deliveries {
    fn absorb(&mut self, d: crate::driver::Delivered) {
        use crate::driver::VERIFY_MAX;
        self.entries += d.entries;
        if let Some(j) = d.journal {
            self.journals.push(j);
        }
        for (into, from) in [
            (&mut self.events, d.events),
            (&mut self.forged, d.forged),
            (&mut self.subjects, d.subjects),
        ] {
            let room = VERIFY_MAX.saturating_sub(into.len());
            into.extend(from.into_iter().take(room));
        }
    }

    fn is_empty(&self) -> bool {
        self.journals.is_empty()
    }
}

/// Most keys the verify step asks the system of record about.
pub const VERIFY_MAX_KEYS: usize = 2000;

impl Session {
    /// Starts the embedded fault server, if the plan has one.
    pub async fn start(plan: &Plan) -> Result<Session, RunError> {
        let server = match &plan.server {
            Some(cfg) => Some(
                FaultServer::start(
                    cfg.clone(),
                    ServerOptions {
                        seed: Some(plan.seed),
                        ..ServerOptions::default()
                    },
                )
                .await?,
            ),
            None => None,
        };
        // The embedded server's own certificate is trusted without a flag.
        let mut connect = plan.connect.clone();
        if let Some(pem) = server.as_ref().and_then(FaultServer::certificate_pem) {
            connect.tls.trusted_pem.push(pem.to_string());
        }
        let chain = match (&server, plan.relay.is_empty()) {
            (Some(s), false) => Some(
                crate::relay::start_chain(plan.relay.clone(), &s.url(), &connect, plan.seed)
                    .await?,
            ),
            _ => None,
        };
        let time_origin_us = server.as_ref().map_or(0, FaultServer::now_us);
        Ok(Session {
            connect,
            server,
            chain,
            started_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            run_start: Instant::now(),
            time_origin_us,
            target_url: None,
            total: Recorder::new(false),
            phases: Vec::new(),
            keys_used: Vec::new(),
            interrupted: false,
            aborted: None,
            phase_hdrs: Vec::new(),
            late: Duration::ZERO,
            deliveries: Deliveries::default(),
            live: None,
        })
    }

    /// The embedded server's certificate (PEM), when it serves TLS.
    pub fn certificate_pem(&self) -> Option<String> {
        self.server
            .as_ref()
            .and_then(FaultServer::certificate_pem)
            .map(str::to_string)
    }

    /// `HARNESS_PROXY_<NAME>_ADDR` for each of the embedded server's TCP proxies.
    pub fn proxy_env(&self) -> Vec<(String, String)> {
        self.server
            .as_ref()
            .map(crate::proxies::env)
            .unwrap_or_default()
    }

    /// The embedded server's URL.
    pub fn server_url(&self) -> Option<String> {
        self.server.as_ref().map(FaultServer::url)
    }

    /// Reports the phases to come, and the checks of `plan` that will judge them, to `live`
    /// (`--dashboard`).
    pub fn watch(&mut self, live: Option<Arc<crate::live::Board>>, plan: &Plan) {
        if let Some(board) = &live {
            let rules = plan
                .checks
                .thresholds
                .as_ref()
                .map(|t| t.rules.clone())
                .unwrap_or_default();
            let names = plan.checks.enabled_names();
            board.checks(names.into_iter().map(str::to_string).collect(), rules);
            if let Some(server) = &self.server {
                board.server(server.stats_handle());
            }
        }
        self.live = live;
    }

    /// Runs the phases against the target; waits up to `wait_for_target` for it to accept
    /// connections (a service that `harness exec` just started needs a moment).
    pub async fn drive(
        &mut self,
        plan: &Plan,
        stop: CancellationToken,
        progress: bool,
        wait_for_target: Duration,
    ) -> Result<(), RunError> {
        let r = self
            .drive_phases(plan, &stop, progress, wait_for_target)
            .await;
        self.interrupted |= stop.is_cancelled();
        r
    }

    /// Marks the run as interrupted (e.g. while `harness exec` waited for its command).
    pub fn interrupt(&mut self) {
        self.interrupted = true;
    }

    /// The thresholds stopped the phases (`abort_on_fail`): the run is not interrupted (unless
    /// `by_user` too), and it fails, saying which rule stopped it and when.
    pub fn aborted(&mut self, a: crate::live::Aborted, by_user: bool) {
        self.interrupted = by_user;
        self.aborted = Some(a);
    }

    async fn drive_phases(
        &mut self,
        plan: &Plan,
        stop: &CancellationToken,
        progress: bool,
        wait_for_target: Duration,
    ) -> Result<(), RunError> {
        if plan.phases.is_empty() {
            return Ok(());
        }
        let url = match (&plan.target, self.server_url()) {
            (Some(t), _) => t.clone(),
            (None, Some(_)) if self.chain.is_some() => self
                .chain
                .as_ref()
                .map(crate::relay::Chain::url)
                .unwrap_or_default(),
            (None, Some(s)) => s,
            (None, None) => {
                return Err(RunError::Target(crate::http::TargetError::Invalid {
                    url: String::new(),
                    reason: "the scenario has neither a target nor an embedded server".into(),
                }))
            }
        };
        // The relay tiers serve plain HTTP/1.1; anything else is reached as the plan says.
        let how = if self.chain.is_some() && plan.target.is_none() {
            crate::http::Connect::default()
        } else {
            self.connect.clone()
        };
        let target = Arc::new(Target::with(&url, &how)?);
        let give_up = Instant::now() + wait_for_target;
        loop {
            match ensure_reachable(&target).await {
                Ok(()) => break,
                Err(e) if Instant::now() >= give_up || stop.is_cancelled() => return Err(e),
                Err(_) => tokio::select! {
                    () = stop.cancelled() => {}
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                },
            }
        }
        self.target_url = Some(url);
        // A common start: every shard waits for it, and schedules its phases from it.
        let base = plan.start_at_unix_ms.map(instant_of_unix_ms);
        if let Some(at) = base {
            wait_until(at, stop).await;
            self.late = Instant::now().saturating_duration_since(at);
        }
        self.run_start = Instant::now();
        self.started_unix_ms = crate::shard::now_unix_ms();
        self.time_origin_us = self.server.as_ref().map_or(0, FaultServer::now_us);
        // Keys are reproducible against the fresh embedded server; unique against a live service;
        // the same on every shard of a run (from its common start).
        let keys = match plan.start_at_unix_ms {
            Some(at) => Keys::shared(plan.seed, at),
            None => Keys::new(plan.seed, plan.target.is_some()),
        };
        // When each phase is due from the common start: known while every phase before it has a
        // length of its own.
        let mut due = base.map(|b| (b, Duration::ZERO));
        let mut captured: Arc<std::collections::HashMap<String, String>> = Arc::default();
        for (i, p) in plan.phases.iter().enumerate() {
            if stop.is_cancelled() {
                break;
            }
            let scheduled = due.map(|(b, offset)| b + offset);
            if let Some(at) = scheduled.filter(|_| i > 0) {
                wait_until(at, stop).await;
                if stop.is_cancelled() {
                    break;
                }
            }
            due = match (due, p.kind.length()) {
                (Some((b, offset)), Some(len)) => Some((b, offset + len)),
                _ => None,
            };
            let done = Arc::new(AtomicU64::new(0));
            let bar = Progress::start(
                progress,
                &p.name,
                driver::expected_operations_of(p, plan.shard),
                done.clone(),
            );
            let ctx = PhaseCtx {
                index: i as u16,
                target: target.clone(),
                keys,
                run_start: self.run_start,
                stop: stop.clone(),
                hard_stop: false,
                done,
                // What the report shows of single attempts is in the recorder's bounded summary.
                keep_attempts: false,
                captured: captured.clone(),
                capture_sink: None,
                shard: plan.shard,
                scheduled,
                once: None,
                live: self.live.clone(),
            };
            let journal_before = self.server.as_ref().map_or(0, |s| s.journal().written());
            let mut out = driver::run_phase(Arc::new(p.clone()), ctx).await;
            if let Some(e) = RunError::worker_died(&p.name, &out.recorder) {
                bar.finish();
                return Err(e);
            }
            if p.template.uses(crate::template::Var::Key)
                && p.policy.key == retry_policy::KeyMode::PerOperation
            {
                if matches!(p.kind, PhaseKind::Burst { .. }) {
                    self.keys_used.extend(out.round_keys.iter().cloned());
                } else {
                    let room = VERIFY_MAX_KEYS.saturating_sub(self.keys_used.len()) as u64;
                    self.keys_used.extend(
                        (1..=out.recorder.operations.min(room)).map(|n| keys.key(i as u16, n)),
                    );
                }
            }
            if !out.captured.is_empty() {
                let mut next = (*captured).clone();
                next.extend(out.captured.clone());
                captured = Arc::new(next);
            }
            bar.finish();
            let mut metrics = BTreeMap::new();
            if let Some(d) = out.delivered.take() {
                metrics.extend(d.metrics.clone());
                self.deliveries.absorb(d);
            }
            if let PhaseKind::Burst { sync, .. } = &p.kind {
                metrics.insert("sync".into(), serde_json::json!(sync.name()));
            }
            if let (PhaseKind::Burst { size, .. }, Some(s)) = (&p.kind, &self.server) {
                s.settle(Duration::from_secs(10)).await;
                let mut skews =
                    phase_release_skews(s, journal_before, out.round_keys.clone(), *size).await;
                if let Some(max) = skews.iter().max().copied() {
                    skews.sort_unstable();
                    metrics.insert("release_skew_us_max".into(), serde_json::json!(max));
                    metrics.insert(
                        "release_skew_us_p50".into(),
                        serde_json::json!(skews[skews.len() / 2]),
                    );
                }
            }
            let r = &out.recorder;
            let rate = matches!(p.kind, PhaseKind::Rate { .. });
            self.phase_hdrs.push(reports::model::PhaseHistograms {
                latency_hdr: crate::metrics::encode_hdr(&r.latency),
                intended_hdr: rate.then(|| crate::metrics::encode_hdr(&r.intended)),
            });
            for (name, v) in [
                ("operations", r.operations),
                ("failed_operations", r.failed_operations),
                ("fallbacks", r.fallbacks),
                ("budget_refusals", r.budget_refusals),
                ("deadline_exceeded", r.deadline_exceeded),
                ("wait_too_long", r.wait_too_long),
                ("cancelled", r.cancelled),
                ("not_started", r.not_started),
            ] {
                if v > 0 || name == "operations" {
                    metrics.insert(name.into(), serde_json::json!(v));
                }
            }
            self.phases.push(crate::report::phase(
                &p.name,
                p.kind.name(),
                r,
                out.duration,
                rate,
                metrics,
            ));
            self.total.merge(&out.recorder);
        }
        Ok(())
    }

    /// Stops the server, runs the checks on its journal, builds the report.
    pub async fn finish(mut self, plan: &Plan, exec: Option<reports::model::Exec>) -> RunOutcome {
        let duration = self.run_start.elapsed();
        if let Some(chain) = self.chain.take() {
            let tiers = chain.stats();
            if let Some(last) = self.phases.last_mut() {
                last.metrics.insert(
                    "relay_tiers".into(),
                    serde_json::to_value(&tiers).unwrap_or_default(),
                );
            }
            chain.shutdown().await;
        }
        // The server stays up until the verify step has asked it; its requests come after the
        // journal was read, so they are not judged.
        let server = self.server.take();
        let (window, widened) = bounded_window(plan.window, duration);
        if let Some(s) = &server {
            if !s.settle(Duration::from_secs(10)).await {
                tracing::warn!("some requests were still in flight when the journal was read");
            }
        }
        let deliveries: Vec<std::path::PathBuf> = self
            .deliveries
            .journals
            .iter()
            .map(|j| j.path().to_path_buf())
            .collect();
        let read = match (&server, deliveries.as_slice()) {
            (Some(s), []) => Some(read_journal(s, &plan.checks, window, self.time_origin_us).await),
            (None, []) => None,
            // The deliveries' entries count from the run's start.
            (None, [one]) => {
                self.time_origin_us = 0;
                Some(read_file(one.clone(), &plan.checks, window, 0).await)
            }
            (server, files) => {
                // Several journals: one timeline, by wall clock, from the run's start.
                self.time_origin_us = 0;
                let mut all: Vec<std::path::PathBuf> = server
                    .iter()
                    .map(|s| s.journal().path().to_path_buf())
                    .collect();
                all.extend(files.iter().cloned());
                Some(
                    read_union(
                        all,
                        self.started_unix_ms.saturating_mul(1000),
                        &plan.checks,
                        window,
                    )
                    .await,
                )
            }
        };
        let mut notes: Vec<String> = widened.into_iter().collect();
        let (judged, summary) = match read {
            Some(Ok((judged, summary))) => (Some(judged), summary),
            Some(Err(e)) => {
                notes.push(format!(
                    "the embedded server's journal could not be read ({e}): the checks judged no request"
                ));
                (None, JournalSummary::new(window, self.time_origin_us))
            }
            None => {
                if plan
                    .checks
                    .enabled_names()
                    .iter()
                    .any(|&n| n != "thresholds")
                {
                    notes.push(
                        "no journal: the target is not this run's embedded fault server, so the checks \
                         that read one judged no request; judge them on the server's journal with \
                         `harness merge REPORT --fault-url URL` or `harness analyze JOURNAL`"
                            .to_string(),
                    );
                }
                (None, JournalSummary::new(window, self.time_origin_us))
            }
        };
        let facts = Facts {
            client: (!self.phases.is_empty()).then(|| ClientFigures {
                // Cancelled operations ended neither way: they are not judged.
                operations: self.total.operations.saturating_sub(self.total.cancelled),
                failed_operations: self.total.failed_operations,
                sent: self.total.sent,
                completed: self.total.completed(),
                failed_attempts: self.total.requests().request_failures(),
                transport_errors: self.total.error_count(),
                latency: self.total.latency.clone(),
                duration,
            }),
            store: match plan
                .checks
                .duplicates
                .as_ref()
                .and_then(|d| d.verify.as_ref())
            {
                Some(v) => {
                    let base = server
                        .as_ref()
                        .map(FaultServer::url)
                        .or_else(|| self.target_url.clone());
                    let keys = self.verify_keys(&summary);
                    Some(
                        crate::verify::store_counts_with(
                            v,
                            &keys,
                            base.as_deref(),
                            &[],
                            &self.connect,
                        )
                        .await,
                    )
                }
                None => None,
            },
            effects: match plan
                .checks
                .effects_once
                .as_ref()
                .and_then(|c| c.verify.as_ref())
            {
                Some(v) if !self.deliveries.is_empty() => {
                    let keys: Vec<String> = self
                        .deliveries
                        .events
                        .iter()
                        .chain(&self.deliveries.forged)
                        .cloned()
                        .collect();
                    let base = self
                        .target_url
                        .clone()
                        .or_else(|| server.as_ref().map(FaultServer::url));
                    Some(
                        crate::verify::store_counts_with(
                            v,
                            &keys,
                            base.as_deref(),
                            &[],
                            &self.connect,
                        )
                        .await,
                    )
                }
                _ => None,
            },
            states: match plan
                .checks
                .ordering
                .as_ref()
                .and_then(|c| c.verify_state.as_ref())
            {
                Some(v) if !self.deliveries.subjects.is_empty() => {
                    let base = self
                        .target_url
                        .clone()
                        .or_else(|| server.as_ref().map(FaultServer::url));
                    Some(
                        crate::verify::store_states(
                            v,
                            &self.deliveries.subjects,
                            base.as_deref(),
                            &self.connect,
                        )
                        .await,
                    )
                }
                _ => None,
            },
            time_origin_us: self.time_origin_us,
        };
        let mut checks = match judged {
            Some(j) => j.finish(&facts),
            None => checks::judge(&plan.checks, std::iter::empty::<Entry>(), &facts),
        };
        if let Some(a) = &self.aborted {
            let stopped = format!(
                "the thresholds stopped the run at {:.1} s (abort_on_fail): {}",
                a.at_s, a.why
            );
            // Whatever the figures at the end say, a run stopped for failing does not pass.
            if let Some(t) = checks.iter_mut().find(|c| c.name == "thresholds") {
                t.verdict = reports::model::Verdict::Fail;
                t.summary = format!("{stopped}; at the end: {}", t.summary);
            }
            notes.push(stopped);
        }
        if let Some(s) = server {
            s.shutdown().await;
        }
        let timeline = if summary.is_empty() {
            self.total.summary.timeline(window)
        } else {
            summary.tally.timeline()
        };
        let had_phases = !self.phases.is_empty();
        let delays = self.total.summary.retry_delays();
        let mut report = ReportBuilder::new(&plan.name)
            .started_unix_ms(self.started_unix_ms)
            .duration(duration)
            .target(self.target_url.clone())
            .scenario_settings(plan.seed, plan.time_scale)
            .measured(&self.total, duration)
            // A shard may rightly have no share of a small phase; the merge judges the whole.
            .load_expected(!plan.phases.is_empty() && !plan.shard.is_split());
        if !summary.is_empty() && self.phases.is_empty() {
            // `exec` with no phases: the command was the load, and the server counted it.
            report = report.requests(summary.tally.requests().clone());
        }
        for n in notes {
            report = report.note(n);
        }
        let report = report
            .phases(self.phases)
            .connections(summary.tally.connections())
            .statements(summary.tally.statements())
            .checks(checks)
            .timeline(Some(timeline))
            .retry_delays(delays.shown())
            .exec(exec)
            .interrupted(self.interrupted)
            .shard(
                (plan.shard.is_split() || plan.start_at_unix_ms.is_some()).then(|| {
                    reports::model::ShardInfo {
                        index: plan.shard.index,
                        count: plan.shard.count,
                        start_at_unix_ms: plan.start_at_unix_ms,
                        late_ms: self.late.as_secs_f64() * 1000.0,
                        merged: Vec::new(),
                    }
                }),
            )
            .mergeable(had_phases.then(|| reports::model::Mergeable {
                latency_hdr: crate::metrics::encode_hdr(&self.total.latency),
                phases: std::mem::take(&mut self.phase_hdrs),
                operations: self.total.operations.saturating_sub(self.total.cancelled),
                failed_operations: self.total.failed_operations,
                checks: serde_json::to_value(&plan.checks).unwrap_or_default(),
                retry_delays: delays.histograms(),
            }))
            .build();
        RunOutcome { report }
    }
}

impl Session {
    /// The keys to ask the system of record about: every key in the journal, or, against a
    /// service whose journal the harness does not see, the keys the driver used; at most
    /// [`VERIFY_MAX_KEYS`].
    fn verify_keys(&self, journal: &JournalSummary) -> Vec<String> {
        let mut keys: Vec<String> = if journal.is_empty() {
            self.keys_used.clone()
        } else {
            journal.keys.clone()
        };
        keys.truncate(VERIFY_MAX_KEYS);
        keys
    }
}

/// The embedded server's journal file from entry `since` on, as it is written now.
fn journal_file(s: &FaultServer, since: u64) -> std::io::Result<std::io::Take<std::fs::File>> {
    let (file, from, to) = s.journal().range_since(since)?;
    Ok(std::io::Read::take(file, to - from))
}

/// Streams the embedded server's journal through the checks, gathering on the way what the
/// report and the verify step need of it — so the run's memory does not grow with its requests.
async fn read_journal(
    s: &FaultServer,
    cfg: &checks::ChecksConfig,
    window: Duration,
    origin_us: u64,
) -> Result<(crate::analyze::Judged, JournalSummary), String> {
    let file = journal_file(s, 0).map_err(|e| e.to_string())?;
    let shown = s.journal().path().display().to_string();
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || {
        let mut summary = JournalSummary::new(window, origin_us);
        crate::analyze::judge_stream(file, &shown, &cfg, |e| summary.observe(e))
            .map(|judged| (judged, summary))
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Streams the journal file at `path` (a deliver phase's) through the checks, as
/// [`read_journal`] does the embedded server's.
async fn read_file(
    path: std::path::PathBuf,
    cfg: &checks::ChecksConfig,
    window: Duration,
    origin_us: u64,
) -> Result<(crate::analyze::Judged, JournalSummary), String> {
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || {
        let shown = path.display().to_string();
        let file = std::fs::File::open(&path).map_err(|e| format!("{shown}: {e}"))?;
        let mut summary = JournalSummary::new(window, origin_us);
        crate::analyze::judge_stream(file, &shown, &cfg, |e| summary.observe(e))
            .map(|judged| (judged, summary))
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Merges `paths` (the embedded server's journal, the deliver phases') by wall clock into one
/// timeline from `base_unix_us` (the run's start), and streams it through the checks.
async fn read_union(
    paths: Vec<std::path::PathBuf>,
    base_unix_us: u64,
    cfg: &checks::ChecksConfig,
    window: Duration,
) -> Result<(crate::analyze::Judged, JournalSummary), String> {
    let union = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    let out = union.path().to_path_buf();
    let merged = tokio::task::spawn_blocking(move || {
        crate::merge::merge_journals(&paths, &out, Some(base_unix_us))
            .map(drop)
            .map_err(|e| match e {
                crate::merge::MergeError::Input(m) | crate::merge::MergeError::Run(m) => m,
                crate::merge::MergeError::Journal(e) => e.to_string(),
            })
    })
    .await
    .map_err(|e| e.to_string())?;
    merged?;
    let judged = read_file(union.path().to_path_buf(), cfg, window, 0).await;
    drop(union);
    judged
}

/// What the report and the verify step take from the journal, gathered entry by entry: the
/// tally (request counts, the requests-over-time chart) and the first [`VERIFY_MAX_KEYS`] keys.
struct JournalSummary {
    tally: JournalTally,
    keys: Vec<String>,
    seen_keys: std::collections::HashSet<String>,
}

impl JournalSummary {
    /// Windows of `window` counted from the run's start, `origin_us` in journal time, or from
    /// the first request if one came earlier.
    fn new(window: Duration, origin_us: u64) -> JournalSummary {
        JournalSummary {
            tally: JournalTally::new(window, Some(origin_us)),
            keys: Vec::new(),
            seen_keys: std::collections::HashSet::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.tally.entries() == 0
    }

    fn observe(&mut self, e: &Entry) {
        self.tally.observe(e);
        if let Some(k) = &e.idempotency_key {
            if self.keys.len() < VERIFY_MAX_KEYS && !self.seen_keys.contains(k) {
                self.seen_keys.insert(k.clone());
                self.keys.push(k.clone());
            }
        }
    }
}

/// The chart's window for a run of length `run`: the scenario's, or about 60 over the run; wider
/// when the run holds more than [`crate::scenario::bounds::MAX_WINDOWS`] of the scenario's (its
/// phases' length was not known when it was loaded), with a note saying so.
fn bounded_window(window: Option<Duration>, run: Duration) -> (Duration, Option<String>) {
    let max = crate::scenario::bounds::MAX_WINDOWS;
    match window {
        None => (auto_window(run), None),
        Some(w) if run.as_nanos() / w.as_nanos().max(1) <= u128::from(max) => (w, None),
        Some(w) => {
            let wide = Duration::from_millis(
                (run.as_secs_f64() * 1000.0 / max as f64).ceil().max(1.0) as u64,
            );
            (
                wide,
                Some(format!(
                    "report.window widened from {w:?} to {wide:?}: the run lasted {run:?}, more than {max} windows of {w:?}"
                )),
            )
        }
    }
}

/// The release skews of a burst phase's rounds, from the journal entries written since
/// `since` (the phase's), read as a stream.
async fn phase_release_skews(
    s: &FaultServer,
    since: u64,
    round_keys: Vec<String>,
    size: u32,
) -> Vec<u64> {
    let Ok(file) = journal_file(s, since) else {
        return Vec::new();
    };
    let shown = s.journal().path().display().to_string();
    tokio::task::spawn_blocking(move || {
        let mut lines = crate::analyze::JournalLines::new(file, &shown);
        let entries = std::iter::from_fn(|| lines.next_entry().ok().flatten());
        release_skews(entries, &round_keys, size as usize)
    })
    .await
    .unwrap_or_default()
}

/// The monotonic instant of a wall-clock time (ms since the Unix epoch), as this machine's clock
/// reads it now.
pub fn instant_of_unix_ms(ms: u64) -> Instant {
    let now = Instant::now();
    let now_ms = crate::shard::now_unix_ms();
    if ms >= now_ms {
        now + Duration::from_millis(ms - now_ms)
    } else {
        now.checked_sub(Duration::from_millis(now_ms - ms))
            .unwrap_or(now)
    }
}

/// Waits until `at` (on a thread sleeping on the OS's fine timer), or until `stop`.
async fn wait_until(at: Instant, stop: &CancellationToken) {
    if at <= Instant::now() {
        return;
    }
    let stop = stop.clone();
    let _ = tokio::task::spawn_blocking(move || {
        while !stop.is_cancelled() {
            let now = Instant::now();
            if now >= at {
                break;
            }
            std::thread::sleep((at - now).min(Duration::from_millis(10)));
        }
    })
    .await;
}

/// Request counts as the server saw them (for `exec` and `analyze`, where the harness sent
/// nothing), as [`JournalTally`] counts them.
pub fn requests_from_journal(journal: &[Entry]) -> reports::model::Requests {
    let mut tally = JournalTally::new(Duration::from_secs(1), None);
    journal.iter().for_each(|e| tally.observe(e));
    tally.requests().clone()
}

/// Spread of the moments each burst round's first `size` requests had arrived at the server
/// (the kernel's receive time of their last bytes where the journal has it, else when the server
/// had read them): what the release achieved, without the server's own wake-ups.
pub fn release_skews<E: std::borrow::Borrow<Entry>>(
    journal: impl IntoIterator<Item = E>,
    round_keys: &[String],
    size: usize,
) -> Vec<u64> {
    // Per round: how many of its first arrivals were seen, the earliest and the latest.
    let mut by_key: std::collections::HashMap<&str, (usize, u64, u64)> = round_keys
        .iter()
        .map(|k| (k.as_str(), (0, u64::MAX, 0)))
        .collect();
    for e in journal {
        let e = e.borrow();
        if let Some(r) = e.idempotency_key.as_deref().and_then(|k| by_key.get_mut(k)) {
            if r.0 < size {
                let t = e.t_arrived_us();
                *r = (r.0 + 1, r.1.min(t), r.2.max(t));
            }
        }
    }
    round_keys
        .iter()
        .filter_map(|k| by_key.get(k.as_str()))
        .filter(|r| r.0 > 0)
        .map(|r| r.2 - r.1)
        .collect()
}

/// About 60 windows over the run, at least 1 ms.
pub fn auto_window(d: Duration) -> Duration {
    (d / 60).max(Duration::from_millis(1))
}

/// Requests per window by status (or outcome when no status was sent), from the server's view;
/// windows count from `origin_us` (journal time), the run's start.
pub fn timeline_from_journal(journal: &[Entry], window: Duration, origin_us: u64) -> Timeline {
    // From the earliest request whatever its place in the journal, not only the first's.
    let earliest = journal.iter().map(|e| e.t_recv_us).min();
    let mut tally = JournalTally::new(
        window,
        Some(earliest.map_or(origin_us, |t| t.min(origin_us))),
    );
    journal.iter().for_each(|e| tally.observe(e));
    tally.timeline()
}

/// Requests per window by label, from `(window, label)` points: the chart counted the plain way,
/// which the tests hold the client's streamed chart against.
#[cfg(test)]
pub(crate) fn build_timeline(
    points: impl Iterator<Item = (u64, String)>,
    window: Duration,
) -> Timeline {
    let mut by_label: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut len = 0usize;
    for (bin, label) in points {
        let bin = bin as usize;
        len = len.max(bin + 1);
        let counts = by_label.entry(label).or_default();
        if counts.len() <= bin {
            counts.resize(bin + 1, 0);
        }
        counts[bin] += 1;
    }
    let series = by_label
        .into_iter()
        .map(|(label, mut counts)| {
            counts.resize(len, 0);
            reports::model::Series { label, counts }
        })
        .collect();
    Timeline {
        window_ms: window.as_secs_f64() * 1000.0,
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::sample::entry;

    #[test]
    fn a_bursts_skew_is_the_spread_of_its_first_arrivals_per_round() {
        let j = vec![
            entry(1, 0.0).key("r1").build(),
            entry(2, 0.3).key("r1").build(),
            entry(3, 0.1).key("r1").build(),
            // A retry of round 1 long after: beyond the round's size, not part of its release.
            entry(4, 90.0).key("r1").build(),
            entry(5, 10.0).key("r2").build(),
            entry(6, 11.0).key("r2").build(),
            entry(7, 10.2).key("r2").build(),
        ];
        let skews = release_skews(&j, &["r1".into(), "r2".into(), "r3".into()], 3);
        assert_eq!(skews, vec![300, 1000]);
    }

    #[test]
    fn the_streamed_summary_counts_the_journal_as_the_whole_journal_does() {
        let j: Vec<Entry> = (0..500u64)
            .map(|i| {
                let e = entry(i + 1, 40.0 + i as f64 * 3.0).key(&format!("k{}", i % 40));
                match i % 5 {
                    0 => e.status(503).build(),
                    1 => e.no_response(history::Outcome::Dropped).build(),
                    _ => e.created(&format!("o{i}")).build(),
                }
            })
            .collect();
        let window = Duration::from_millis(100);
        let mut s = JournalSummary::new(window, 50_000);
        j.iter().for_each(|e| s.observe(e));
        assert_eq!(
            s.tally.timeline(),
            timeline_from_journal(&j, window, 50_000)
        );
        assert_eq!(s.tally.requests(), &requests_from_journal(&j));
        assert_eq!(s.keys.len(), 40);
    }

    /// The four readers of a journal — a run streaming its server's, `harness analyze` a file,
    /// the whole journal in memory, the probe its own exchanges — count one journal alike.
    #[tokio::test]
    async fn the_run_analyze_the_whole_journal_and_the_probe_count_a_journal_alike() {
        use std::io::Write;

        use bytes::Bytes;
        use http::{HeaderMap, Method, StatusCode};

        use crate::http::{AttemptError, Reply};

        let mut rec = crate::probe::Recording::new(&Method::POST, "/orders", &[]);
        let start = rec.started;
        let reply = |status, body: String| Reply {
            status,
            headers: HeaderMap::new(),
            body: Bytes::from(body),
            trailers: None,
        };
        for i in 0..120u64 {
            let sent = start + Duration::from_millis(i * 7);
            let result = match i % 4 {
                0 => Err(AttemptError {
                    kind: history::ErrorKind::Reset,
                    message: "connection reset".to_string(),
                }),
                1 => Ok(reply(StatusCode::CONFLICT, String::new())),
                _ => Ok(reply(StatusCode::CREATED, format!("{{\"id\":\"o{i}\"}}"))),
            };
            let key = format!("k{}", i % 10);
            let body = Bytes::from_static(b"{}");
            rec.exchange(
                Some(&key),
                &body,
                sent,
                sent + Duration::from_millis(2),
                &result,
            );
        }
        let journal = rec.entries.clone();
        let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
        for e in &journal {
            writeln!(file, "{}", serde_json::to_string(e).expect("an entry")).expect("written");
        }
        let cfg = checks::ChecksConfig::default();
        let window = Duration::from_millis(100);

        let whole = requests_from_journal(&journal);
        assert_eq!((whole.sent, whole.completed, whole.errors), (120, 90, 30));
        assert_eq!(whole.by_status["201"], 60);
        assert_eq!(whole.by_status["409"], 30);
        let (_, run) = read_file(file.path().to_path_buf(), &cfg, window, 0)
            .await
            .expect("the run reads the journal");
        assert_eq!(run.tally.requests(), &whole);
        let analyzed = crate::analyze::analyze_file(file.path(), &cfg).expect("a journal");
        assert_eq!(analyzed.requests, whole);
        assert_eq!(rec.requests(), whole);

        let chart = timeline_from_journal(&journal, window, 0);
        assert_eq!(chart.counts("reset").iter().sum::<u64>(), 30);
        assert_eq!(
            chart.counts("201").len(),
            9,
            "the last request arrived at 833 ms"
        );
        assert_eq!(run.tally.timeline(), chart);
        // `analyze` charts from the first request, here at 0 ms, in windows of 100 ms.
        assert_eq!(analyzed.timeline, Some(chart));
    }

    #[test]
    fn a_window_too_narrow_for_the_run_is_widened_with_a_note() {
        let ms = Duration::from_millis;
        assert_eq!(
            bounded_window(Some(ms(250)), Duration::from_secs(10)),
            (ms(250), None)
        );
        assert_eq!(
            bounded_window(None, Duration::from_secs(6)),
            (ms(100), None)
        );
        let (w, note) = bounded_window(Some(ms(1)), Duration::from_secs(250));
        assert_eq!(w, ms(3));
        assert!(note.is_some_and(|n| n.contains("widened from 1ms to 3ms")));
    }

    #[test]
    fn the_timeline_counts_from_the_runs_start() {
        let j = vec![
            entry(1, 100.0).status(503).build(),
            entry(2, 150.0).created("o1").build(),
            entry(3, 260.0).status(503).build(),
        ];
        // The run started at 50 ms of journal time; windows of 100 ms.
        let t = timeline_from_journal(&j, Duration::from_millis(100), 50_000);
        let count = |label: &str| t.counts(label).to_vec();
        assert_eq!(count("503"), vec![1, 0, 1]);
        assert_eq!(count("201"), vec![0, 1, 0]);
        assert_eq!(
            auto_window(Duration::from_secs(6)),
            Duration::from_millis(100)
        );
        assert_eq!(auto_window(Duration::ZERO), Duration::from_millis(1));
    }
}
