//! `deliver`: the harness plays a webhook provider against the consumer at the target.
//!
//! What to send comes from the `webhooks` crate — the events, their signatures and forgeries, the
//! chaos drawn over them, when a failed delivery is due again; this module does what that crate
//! may not: it owns the sockets, the clock and the journal. Workers take subjects one at a time
//! and deliver each subject's events in the plan's order (last first for a reversed subject):
//! for each event a forged delivery first when the chaos says so (an event of its own, never
//! redelivered), then its genuine copies: those the chaos sends together, in one burst released
//! as the phase's `sync` says (`release`, `last-byte` over HTTP/1.1, `single-packet` over HTTP/2:
//! the same release points as a `burst` phase), then the others one after another, each once the
//! one before it was answered (and `spacing` later, when it is a gap) — as a provider redelivers
//! an event whose acknowledgement it lost. By default a duplicated event's copies go both ways
//! ([`webhooks::Spacing::Mixed`]), so that one run holds races and redeliveries of processed
//! events; the phase's figures count them (`copies_together`, `copies_after_ack`). A copy whose
//! acknowledgement is to be lost is sent whole and its answer dropped unread (the connection
//! closed, or the HTTP/2 stream reset): the consumer had the whole request, the provider saw a
//! timeout.
//!
//! Every attempt that does not end in a 2xx goes to the provider's redelivery decision
//! ([`webhooks::Delivering`]); a redelivery due later waits in a queue ordered by its time, and
//! the workers take due redeliveries before new subjects. So a failed event's redelivery
//! overtakes the events after it, as providers' do, and a worker never sleeps through a
//! schedule while others wait. The phase ends when every subject was delivered and every
//! redelivery made or given up — bounded by the events, their copies and the schedule's attempts
//! — or when it is stopped (Ctrl-C): pending redeliveries are then dropped, counted.
//!
//! Every attempt is one journal entry from the sender's side (as `harness idempotency` records
//! its exchanges): the event's id as its `idempotency_key`, its subject as its `resource`, its
//! type and place (`event_type`, `event_seq`), the forgery (`forged`), the attempt
//! (`delivery_attempt`), a dropped answer (`answer_dropped`), the status and the times. The
//! entries go to a file as the attempts end (memory does not grow with the deliveries), and the
//! run judges that file with the same checks as any journal.
//!
//! Event ids are unique per run (drawn from the run's keys, as every key against a live service
//! is), so a second run against the same consumer's database sends events it has not seen; the
//! chaos — which events are duplicated, forged, reversed — is drawn from the scenario's seed and
//! the events' numbers, the same in every run of that seed.

use std::collections::{BTreeMap, BinaryHeap};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use history::{Entry, ErrorKind, HttpVersion, Outcome as EntryOutcome};
use http::{HeaderName, HeaderValue};
use tokio::sync::Notify;
use webhooks::{Decision, Event, Forgery, Outcome, Plan, Spacing};

use super::phase::{Delivered, PhaseCtx, PhaseRun, VERIFY_MAX};
use crate::http::http2::{Burst, H2Conn};
use crate::http::release::Release;
use crate::http::{AttemptError, Conn, Outgoing, Reply, Target};
use crate::metrics::{Recorder, Sink};
use crate::plan::{DeliverPlan, PhasePlan, SyncMode};
use crate::template::Vars;

/// Most release skews kept for the phase's figures.
const SKEWS_KEPT: usize = 10_000;

/// A redelivery waiting for its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    at: Instant,
    /// Tie-break, so the queue's order is total.
    order: u64,
    event: u64,
    first: Instant,
    attempt: u32,
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // The earliest first: a max-heap of reversed times.
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The work the workers share: the subjects not yet taken, the redeliveries not yet due, and
/// how many workers are in the middle of something (which may queue more).
#[derive(Debug, Default)]
struct Queue {
    next_subject: u64,
    pending: BinaryHeap<Pending>,
    busy: u32,
    order: u64,
}

enum Job {
    Subject(u64),
    Redeliver(Pending),
}

/// What [`Shared::take`] found.
enum Take {
    Job(Job),
    Done,
    Wait(Option<Instant>),
}

/// Counters the workers add to.
#[derive(Debug, Default)]
struct Stats {
    events: AtomicU64,
    copies: AtomicU64,
    duplicated: AtomicU64,
    /// Copies beyond the first sent together with it.
    together: AtomicU64,
    /// Copies sent after the one before them was answered.
    after_ack: AtomicU64,
    forged: AtomicU64,
    reversed: AtomicU64,
    redeliveries: AtomicU64,
    dropped: AtomicU64,
    acknowledged: AtomicU64,
    gave_up: AtomicU64,
    abandoned: AtomicU64,
}

/// The ids the verify step asks about.
#[derive(Debug, Default)]
struct Ids {
    events: Vec<String>,
    forged: Vec<String>,
    subjects: Vec<String>,
}

/// The deliveries' journal file, written as attempts end.
struct JournalFile {
    out: std::io::BufWriter<std::fs::File>,
    seq: u64,
    line: Vec<u8>,
    error: Option<String>,
}

impl JournalFile {
    fn append(&mut self, mut e: Entry) {
        if self.error.is_some() {
            return;
        }
        self.seq += 1;
        e.seq = self.seq;
        e.conn_id = e.conn_id.max(1);
        self.line.clear();
        e.write_json(&mut self.line);
        self.line.push(b'\n');
        if let Err(err) = self.out.write_all(&self.line) {
            self.error = Some(err.to_string());
        }
    }
}

/// Everything the workers share.
struct Shared {
    plan: Plan,
    /// The phase's request: the path and the user's headers (the body is the event's).
    template: crate::template::RequestTemplate,
    target: Arc<Target>,
    timeout: Duration,
    sync: SyncMode,
    subjects: u64,
    queue: Mutex<Queue>,
    notify: Notify,
    journal: Mutex<JournalFile>,
    ids: Mutex<Ids>,
    stats: Stats,
    skews: Mutex<Vec<u64>>,
    run_start: Instant,
    run_start_unix_us: u64,
    http2: bool,
    tls: bool,
    stop: tokio_util::sync::CancellationToken,
    done: Arc<AtomicU64>,
    conns: AtomicU64,
}

/// Runs a deliver phase to its end: every subject delivered, every redelivery made or given
/// up, or `ctx.stop`. The workers fold their latencies into the phase's `sink`, as the other
/// phases' workers do.
pub(super) async fn deliver(run: PhaseRun<'_>, d: &DeliverPlan) -> (Recorder, Delivered) {
    let (phase, ctx, sink): (&PhasePlan, &PhaseCtx, &Arc<Sink>) = (run.plan, run.ctx, run.sink);
    let mut failed = Recorder::new(false);
    let journal = match tempfile::Builder::new()
        .prefix("harness-deliveries")
        .suffix(".jsonl")
        .tempfile()
    {
        Ok(f) => f,
        Err(e) => {
            return (
                journal_failure(failed, &e.to_string()),
                Delivered::empty(None),
            )
        }
    };
    let file = match journal.reopen() {
        Ok(f) => f,
        Err(e) => {
            return (
                journal_failure(failed, &e.to_string()),
                Delivered::empty(Some(journal)),
            )
        }
    };
    let spec = webhooks::PlanSpec {
        ids: Some(ctx.keys.derive(u64::from(ctx.index))),
        ..d.spec.clone()
    };
    let plan = match Plan::new(&spec) {
        Ok(p) => p,
        // Checked when the scenario was resolved: not reached.
        Err(e) => {
            failed.worker_failures_total += 1;
            failed
                .worker_failures
                .push(format!("the delivery plan: {e}"));
            return (failed, Delivered::empty(Some(journal)));
        }
    };
    let now_unix_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |t| t.as_micros() as u64);
    let shared = Arc::new(Shared {
        subjects: plan.events().subjects(),
        plan,
        template: phase.template.clone(),
        target: ctx.target.clone(),
        timeout: d
            .spec
            .redelivery
            .as_ref()
            .map_or_else(|| d.spec.style.ack_timeout(), |r| r.timeout),
        sync: d.sync,
        queue: Mutex::new(Queue::default()),
        notify: Notify::new(),
        journal: Mutex::new(JournalFile {
            out: std::io::BufWriter::with_capacity(256 << 10, file),
            seq: 0,
            line: Vec::with_capacity(1024),
            error: None,
        }),
        ids: Mutex::new(Ids::default()),
        stats: Stats::default(),
        skews: Mutex::new(Vec::new()),
        run_start: ctx.run_start,
        run_start_unix_us: now_unix_us.saturating_sub(ctx.run_start.elapsed().as_micros() as u64),
        http2: ctx.target.http2.is_some(),
        tls: ctx.target.tls.is_some(),
        stop: ctx.stop.clone(),
        done: ctx.done.clone(),
        conns: AtomicU64::new(0),
    });
    let workers: Vec<_> = (0..d.concurrency)
        .map(|_| {
            let (shared, sink) = (shared.clone(), sink.clone());
            tokio::spawn(async move { Worker::new(shared, &sink).run().await })
        })
        .collect();
    let mut rec = Recorder::new(false);
    for w in workers {
        match w.await {
            Ok(r) => rec.merge(&r),
            Err(e) => rec.worker_died("a delivery worker", e),
        }
    }
    let abandoned = {
        let q = lock(&shared.queue);
        q.pending.len() as u64
    };
    shared.stats.abandoned.store(abandoned, Ordering::Relaxed);
    let (entries, error) = {
        let mut j = lock(&shared.journal);
        if let Err(e) = j.out.flush() {
            j.error.get_or_insert(e.to_string());
        }
        (j.seq, j.error.clone())
    };
    if let Some(e) = error {
        rec = journal_failure(rec, &e);
    }
    let ids = std::mem::take(&mut *lock(&shared.ids));
    let metrics = shared.metrics(rec.sent);
    (
        rec,
        Delivered {
            journal: Some(journal),
            entries,
            events: ids.events,
            forged: ids.forged,
            subjects: ids.subjects,
            metrics,
        },
    )
}

/// A recorder that says the deliveries' journal failed: the run is an error, never a verdict.
fn journal_failure(mut rec: Recorder, why: &str) -> Recorder {
    rec.worker_failures_total += 1;
    rec.worker_failures.push(format!(
        "the deliveries' journal could not be written: {why}"
    ));
    rec
}

impl Delivered {
    fn empty(journal: Option<tempfile::NamedTempFile>) -> Delivered {
        Delivered {
            journal,
            entries: 0,
            events: Vec::new(),
            forged: Vec::new(),
            subjects: Vec::new(),
            metrics: BTreeMap::new(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// The phase's figures.
    fn metrics(&self, sent: u64) -> BTreeMap<String, serde_json::Value> {
        let s = &self.stats;
        let mut m = BTreeMap::new();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (name, v) in [
            ("events", get(&s.events)),
            ("deliveries", sent),
            ("genuine_copies", get(&s.copies)),
            ("duplicated_events", get(&s.duplicated)),
            ("copies_together", get(&s.together)),
            ("copies_after_ack", get(&s.after_ack)),
            ("forged_deliveries", get(&s.forged)),
            ("reversed_subjects", get(&s.reversed)),
            ("redeliveries", get(&s.redeliveries)),
            ("answers_dropped", get(&s.dropped)),
            ("acknowledged_copies", get(&s.acknowledged)),
            ("given_up_copies", get(&s.gave_up)),
            ("redeliveries_abandoned", get(&s.abandoned)),
        ] {
            m.insert(name.to_string(), serde_json::json!(v));
        }
        m.insert("style".into(), serde_json::json!(self.plan.style().name()));
        m.insert("sync".into(), serde_json::json!(self.sync.name()));
        m.insert(
            "spacing".into(),
            serde_json::json!(spacing_name(self.plan.chaos().spec().spacing)),
        );
        let mut skews = lock(&self.skews).clone();
        if !skews.is_empty() {
            skews.sort_unstable();
            m.insert(
                "duplicate_skew_us_max".into(),
                serde_json::json!(skews[skews.len() - 1]),
            );
            m.insert(
                "duplicate_skew_us_p50".into(),
                serde_json::json!(skews[skews.len() / 2]),
            );
        }
        m
    }

    /// The next job, waiting for one while other workers may still queue redeliveries; `None`
    /// when there is nothing left to do (or the phase was stopped). `stop` is the worker's own
    /// token (a child of the phase's), so that waiting on it contends with no other worker.
    async fn next_job(&self, stop: &tokio_util::sync::CancellationToken) -> Option<Job> {
        // The common case, a subject or a redelivery at hand, takes the queue's lock once and
        // registers no waiter.
        match self.take() {
            Take::Job(j) => return Some(j),
            Take::Done => return None,
            Take::Wait(_) => {}
        }
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Again, now that a job queued meanwhile wakes this worker.
            let wake_at = match self.take() {
                Take::Job(j) => return Some(j),
                Take::Done => return None,
                Take::Wait(at) => at,
            };
            let until = async {
                match wake_at {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut notified => {}
                () = until => {}
                () = stop.cancelled() => return None,
            }
        }
    }

    /// A job if one is due, the end when nothing is left, or when to look again (`None`: when
    /// another worker finishes a job).
    fn take(&self) -> Take {
        let mut q = lock(&self.queue);
        if self.stop.is_cancelled() {
            return Take::Done;
        }
        if q.pending.peek().is_some_and(|p| p.at <= Instant::now()) {
            if let Some(p) = q.pending.pop() {
                q.busy += 1;
                return Take::Job(Job::Redeliver(p));
            }
        }
        if q.next_subject < self.subjects {
            let s = q.next_subject;
            q.next_subject += 1;
            q.busy += 1;
            return Take::Job(Job::Subject(s));
        }
        if q.pending.is_empty() && q.busy == 0 {
            drop(q);
            // Everyone else may be waiting for a redelivery that will never be queued.
            self.notify.notify_waiters();
            return Take::Done;
        }
        Take::Wait(q.pending.peek().map(|p| p.at))
    }

    /// A job is done; `more` are the redeliveries it made due.
    fn job_done(&self, more: Vec<(Instant, u64, Instant, u32)>) {
        let mut q = lock(&self.queue);
        q.busy = q.busy.saturating_sub(1);
        // Workers wait only once the subjects are handed out: for a redelivery, or for the end.
        let wake = !more.is_empty() || q.next_subject >= self.subjects;
        for (at, event, first, attempt) in more {
            q.order += 1;
            let order = q.order;
            q.pending.push(Pending {
                at,
                order,
                event,
                first,
                attempt,
            });
        }
        drop(q);
        if wake {
            self.notify.notify_waiters();
        }
    }

    fn us(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.run_start).as_micros() as u64
    }

    /// The request that carries `delivery` of `event`.
    fn request(&self, event: &Event, delivery: &webhooks::Delivery) -> Outgoing {
        let vars = Vars {
            seq: event.number + 1,
            client: 0,
            uuid: "",
            key: &event.id,
            round: 0,
            captured: None,
        };
        let extra: &[(HeaderName, HeaderValue)] = &delivery.headers;
        let mut req = self.template.render(&self.target, &vars, extra);
        req.body = delivery.body.clone();
        req
    }

    /// One attempt as a journal entry.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        event: &Event,
        forged: Option<Forgery>,
        attempt: u32,
        conn: u64,
        req: &Outgoing,
        (sent, ended): (Instant, Instant),
        result: &Result<Option<Reply>, AttemptError>,
    ) {
        let mut e = Entry::blank(0);
        e.t_recv_us = self.us(sent);
        e.t_done_us = self.us(ended).max(e.t_recv_us);
        e.unix_us = self.run_start_unix_us + e.t_recv_us;
        e.unix_ms = e.unix_us / 1000;
        e.method = req.method.as_str().to_string();
        e.path = req.uri.split('?').next().unwrap_or_default().to_string();
        e.query = req.uri.split_once('?').map(|(_, q)| q.to_string());
        for name in [
            "webhook-id",
            "x-github-delivery",
            "x-github-event",
            "user-agent",
        ] {
            if let Some(v) = req.headers.get(name).and_then(|v| v.to_str().ok()) {
                e.headers.insert(name.to_string(), v.to_string());
            }
        }
        e.idempotency_key = Some(event.id.clone());
        e.body_len = req.body.len() as u64;
        e.http_version = Some(if self.http2 {
            HttpVersion::Http2
        } else {
            HttpVersion::Http11
        });
        e.tls = self.tls;
        e.conn_id = conn;
        e.resource = Some(event.subject.clone());
        e.event_type = Some(event.event_type.clone());
        e.event_seq = Some(event.seq);
        e.forged = forged.map(|f| f.name().to_string());
        e.delivery_attempt = Some(attempt);
        match result {
            Ok(Some(reply)) => {
                e.status = Some(reply.status.as_u16());
                e.outcome = EntryOutcome::Responded;
            }
            Ok(None) => {
                e.answer_dropped = true;
                e.outcome = EntryOutcome::ClientClosed;
            }
            Err(err) => {
                e.outcome = match err.kind {
                    ErrorKind::Timeout => EntryOutcome::Hung,
                    ErrorKind::Reset => EntryOutcome::Reset,
                    ErrorKind::Closed | ErrorKind::Malformed | ErrorKind::Protocol => {
                        EntryOutcome::Dropped
                    }
                    ErrorKind::Refused => {
                        e.rejected = Some("refused-stream".to_string());
                        EntryOutcome::Rejected
                    }
                    // Nothing reached the consumer.
                    ErrorKind::Connect | ErrorKind::Tls | ErrorKind::Other => {
                        EntryOutcome::ClientClosed
                    }
                };
            }
        }
        lock(&self.journal).append(e);
    }
}

/// A spacing as a scenario writes it.
fn spacing_name(s: Spacing) -> String {
    match s {
        Spacing::Mixed => "mixed".into(),
        Spacing::Burst => "together".into(),
        Spacing::Spaced(gap) => format!("{gap:?}"),
    }
}

/// The provider's view of an attempt's result.
fn outcome_of(result: &Result<Option<Reply>, AttemptError>) -> Outcome {
    match result {
        Ok(Some(r)) => Outcome::Status(r.status.as_u16()),
        Ok(None) => Outcome::AnswerDropped,
        Err(e) if e.kind == ErrorKind::Timeout => Outcome::TimedOut,
        Err(_) => Outcome::ConnectionFailed,
    }
}

fn now_unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One genuine copy to send: its request, and whether its answer is to be dropped.
struct Copy {
    req: Outgoing,
    drop: bool,
}

/// The result of one sent copy: when it left, when it ended, how.
type Sent = (Instant, Instant, Result<Option<Reply>, AttemptError>);

/// One worker: its connections and measurements.
struct Worker {
    shared: Arc<Shared>,
    conn: Conn,
    conn_id: u64,
    /// A burst's connections over HTTP/1.1 (or HTTP/2 with `release`), kept between events.
    copies: Vec<(Conn, u64)>,
    /// HTTP/2: the burst's own connections.
    burst: Option<Arc<Burst>>,
    rec: Recorder,
    /// Redeliveries this job made due: (at, event, first attempt, attempt).
    due: Vec<(Instant, u64, Instant, u32)>,
}

impl Worker {
    fn new(shared: Arc<Shared>, sink: &Arc<Sink>) -> Worker {
        let conn = Conn::new(shared.target.clone());
        let conn_id = shared.conns.fetch_add(1, Ordering::Relaxed) + 1;
        Worker {
            shared,
            conn,
            conn_id,
            copies: Vec::new(),
            burst: None,
            rec: Recorder::worker(false, sink),
            due: Vec::new(),
        }
    }

    async fn run(mut self) -> Recorder {
        let stop = self.shared.stop.child_token();
        while let Some(job) = self.shared.next_job(&stop).await {
            let work = async {
                match job {
                    Job::Subject(s) => self.subject(s).await,
                    Job::Redeliver(p) => self.redeliver(p).await,
                }
            };
            // Stopped mid-job: what is in flight is cut short; the connections' state is
            // unknown, so they are not reused.
            let cut = tokio::select! {
                biased;
                () = stop.cancelled() => true,
                () = work => false,
            };
            if cut {
                self.rec.cancelled += 1;
                self.conn = Conn::new(self.shared.target.clone());
                self.copies.clear();
            }
            let due = std::mem::take(&mut self.due);
            self.shared.job_done(due);
        }
        self.rec
    }

    /// Delivers subject `index`'s events in the plan's order.
    async fn subject(&mut self, index: u64) {
        let shared = self.shared.clone();
        let Some(subject) = shared.plan.subject(index) else {
            return;
        };
        if subject.reversed && subject.events.end - subject.events.start > 1 {
            shared.stats.reversed.fetch_add(1, Ordering::Relaxed);
            let mut ids = lock(&shared.ids);
            if ids.subjects.len() < VERIFY_MAX {
                ids.subjects.push(subject.name.clone());
            }
        }
        for n in subject.order() {
            if shared.stop.is_cancelled() {
                return;
            }
            if let Some(event) = shared.plan.events().get(n) {
                self.event(&event).await;
            }
            shared.done.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One event: its forgery, then its genuine copies' first attempts.
    async fn event(&mut self, event: &Event) {
        let shared = self.shared.clone();
        let chaos = shared.plan.event_chaos(event);
        shared.stats.events.fetch_add(1, Ordering::Relaxed);
        {
            let mut ids = lock(&shared.ids);
            if ids.events.len() < VERIFY_MAX {
                ids.events.push(event.id.clone());
            }
        }
        if let Some(f) = chaos.forged {
            self.forge(event, f).await;
        }
        let copies = chaos.copies.max(1);
        shared
            .stats
            .copies
            .fetch_add(u64::from(copies), Ordering::Relaxed);
        self.rec.operations += u64::from(copies);
        let _flight = self.rec.flight(u64::from(copies));
        let together = chaos.together.clamp(1, copies);
        if chaos.duplicated() {
            shared.stats.duplicated.fetch_add(1, Ordering::Relaxed);
            shared
                .stats
                .together
                .fetch_add(u64::from(together - 1), Ordering::Relaxed);
            shared
                .stats
                .after_ack
                .fetch_add(u64::from(copies - together), Ordering::Relaxed);
        }
        let first = Instant::now();
        if together == 1 {
            let sent = self.single(event, chaos.loses_ack(0)).await;
            self.settle(event, 1, first, self.conn_id, sent);
        } else {
            let burst: Vec<Copy> = (0..together)
                .map(|c| {
                    let d = self.sign(event);
                    Copy {
                        req: shared.request(event, &d),
                        drop: chaos.loses_ack(c),
                    }
                })
                .collect();
            let results = self.together(burst).await;
            for (conn, sent) in results {
                self.settle(event, 1, first, conn, sent);
            }
        }
        // The later copies, as a provider's redeliveries after a lost or late acknowledgement:
        // each leaves once the one before it was answered (the consumer has processed it,
        // if it acknowledges after processing).
        for c in together..copies {
            if !chaos.gap.is_zero() {
                tokio::time::sleep(chaos.gap).await;
            }
            let sent = self.single(event, chaos.loses_ack(c)).await;
            self.settle(event, 1, Instant::now(), self.conn_id, sent);
        }
    }

    /// `event` signed now.
    fn sign(&self, event: &Event) -> webhooks::Delivery {
        match self
            .shared
            .plan
            .signer()
            .sign(&event.message(), now_unix_s())
        {
            Ok(d) => d,
            // The plan's ids and types were checked to fit a header: not reached. A delivery
            // without a signature is then what goes, and the consumer refuses it.
            Err(_) => webhooks::Delivery {
                headers: Vec::new(),
                body: event.body.clone(),
                timestamp: None,
                signed_at: None,
                forged: None,
            },
        }
    }

    /// One copy on the worker's connection, its answer dropped when `drop`.
    async fn single(&mut self, event: &Event, drop: bool) -> (Outgoing, Sent) {
        let d = self.sign(event);
        let req = self.shared.request(event, &d);
        let timeout = self.shared.timeout;
        let sent = Instant::now();
        let result = if drop {
            let r = self.conn.send_unanswered(&req, timeout, None, false).await;
            // The connection was closed on purpose: the next request opens another.
            self.next_conn_id();
            r.map(|()| None)
        } else {
            let r = self.conn.send_ref(&req, timeout).await.map(Some);
            if r.is_err() {
                self.next_conn_id();
            }
            r
        };
        (req, (sent, Instant::now(), result))
    }

    fn next_conn_id(&mut self) {
        self.conn_id = self.shared.conns.fetch_add(1, Ordering::Relaxed) + 1;
    }

    /// The copies released together, as the phase's `sync` says; each with its connection's id.
    async fn together(&mut self, copies: Vec<Copy>) -> Vec<(u64, (Outgoing, Sent))> {
        let shared = self.shared.clone();
        let k = copies.len();
        let timeout = shared.timeout;
        if shared.sync == SyncMode::SinglePacket {
            let burst = self
                .burst
                .get_or_insert_with(|| Arc::new(Burst::new(shared.target.clone())))
                .clone();
            let drops: Vec<bool> = copies.iter().map(|c| c.drop).collect();
            let reqs: Vec<Outgoing> = copies.iter().map(|c| c.req.clone()).collect();
            let t0 = Instant::now();
            let (replies, released) = burst.single_packet_dropping(reqs, &drops, timeout).await;
            let ended = Instant::now();
            // One write per connection carries every final frame: nothing to spread.
            lock(&shared.skews).push(0);
            return copies
                .into_iter()
                .zip(replies)
                .map(|(c, r)| (self.conn_id, (c.req, (released.max(t0), ended, r))))
                .collect();
        }
        // Connections first, so the release is not spread by handshakes.
        if shared.http2 {
            let burst = self
                .burst
                .get_or_insert_with(|| Arc::new(Burst::new(shared.target.clone())))
                .clone();
            let streams = shared.target.http2.as_ref().map_or(1, |p| p.streams());
            if let Err(e) = burst.open(k, streams, timeout).await {
                tracing::warn!("duplicate burst connections: {e}");
            }
            if self.copies.len() < k {
                self.copies = (0..k)
                    .map(|i| {
                        let id = shared.conns.fetch_add(1, Ordering::Relaxed) + 1;
                        (Conn::H2(H2Conn::on(burst.slot(i))), id)
                    })
                    .collect();
            }
        }
        while self.copies.len() < k {
            let id = shared.conns.fetch_add(1, Ordering::Relaxed) + 1;
            self.copies.push((Conn::new(shared.target.clone()), id));
        }
        for (c, _) in &mut self.copies[..k] {
            if let Err(e) = c.open().await {
                tracing::warn!("duplicate burst connection failed: {e}");
            }
        }
        let barrier = Release::new(k);
        let last_byte = shared.sync == SyncMode::LastByte;
        let sends = self.copies[..k]
            .iter_mut()
            .zip(copies)
            .map(|((conn, id), copy)| {
                let barrier = &barrier;
                async move {
                    let started = Instant::now();
                    let result = if copy.drop {
                        conn.send_unanswered(&copy.req, timeout, Some(barrier), last_byte)
                            .await
                            .map(|()| None)
                    } else {
                        conn.send_released(copy.req.clone(), timeout, Some(barrier), last_byte)
                            .await
                            .map(Some)
                    };
                    let left = conn
                        .released_at()
                        .filter(|t| *t >= started)
                        .unwrap_or(started);
                    (*id, (copy.req, (left, Instant::now(), result)))
                }
            });
        let results = futures_util::future::join_all(sends).await;
        let left: Vec<Instant> = results.iter().map(|(_, (_, (t, _, _)))| *t).collect();
        if let (Some(lo), Some(hi)) = (left.iter().min(), left.iter().max()) {
            let mut skews = lock(&shared.skews);
            if skews.len() < SKEWS_KEPT {
                skews.push((*hi - *lo).as_micros() as u64);
            }
        }
        // A copy whose answer was dropped closed its connection; one that failed, too.
        for (i, (_, (_, (_, _, r)))) in results.iter().enumerate() {
            if !matches!(r, Ok(Some(_))) {
                self.copies[i].1 = shared.conns.fetch_add(1, Ordering::Relaxed) + 1;
            }
        }
        results
    }

    /// A forged delivery of `event`: an event of its own, forged as `how`, sent once.
    async fn forge(&mut self, event: &Event, how: Forgery) {
        let shared = self.shared.clone();
        let fake = shared.plan.forgery_of(event);
        let Ok(d) = shared
            .plan
            .signer()
            .forge(&fake.message(), now_unix_s(), how)
        else {
            return;
        };
        shared.stats.forged.fetch_add(1, Ordering::Relaxed);
        {
            let mut ids = lock(&shared.ids);
            if ids.forged.len() < VERIFY_MAX {
                ids.forged.push(fake.id.clone());
            }
        }
        let req = shared.request(&fake, &d);
        let sent = Instant::now();
        let result = self.conn.send(req.clone(), shared.timeout).await.map(Some);
        let ended = Instant::now();
        self.count(&result, sent, ended, false);
        shared.record(
            &fake,
            Some(how),
            1,
            self.conn_id,
            &req,
            (sent, ended),
            &result,
        );
        if result.is_err() {
            self.next_conn_id();
        }
    }

    /// A genuine attempt ended: counted, journaled, and its redelivery decided.
    fn settle(
        &mut self,
        event: &Event,
        attempt: u32,
        first: Instant,
        conn: u64,
        (req, (sent, ended, result)): (Outgoing, Sent),
    ) {
        let shared = self.shared.clone();
        self.count(&result, sent, ended, attempt > 1);
        shared.record(event, None, attempt, conn, &req, (sent, ended), &result);
        let now = Instant::now();
        let decision = shared
            .plan
            .redelivery()
            .resume(first, attempt)
            .on_outcome(outcome_of(&result), now);
        match decision {
            Decision::Acknowledged => {
                shared.stats.acknowledged.fetch_add(1, Ordering::Relaxed);
            }
            Decision::Redeliver { attempt, at } => {
                self.due.push((at, event.number, first, attempt));
            }
            Decision::GiveUp(_) => {
                shared.stats.gave_up.fetch_add(1, Ordering::Relaxed);
                self.rec.failed_operations += 1;
            }
        }
    }

    /// Counts an attempt into the recorder.
    fn count(
        &mut self,
        result: &Result<Option<Reply>, AttemptError>,
        sent: Instant,
        ended: Instant,
        retry: bool,
    ) {
        if retry {
            self.rec.retries += 1;
        }
        match result {
            Ok(Some(r)) => {
                self.rec.result(Some(r.status.as_u16()), None);
                self.rec.latency(ended - sent);
            }
            Ok(None) => {
                self.shared.stats.dropped.fetch_add(1, Ordering::Relaxed);
                self.rec.result(None, None);
            }
            Err(e) => self.rec.result(None, Some(e.kind)),
        }
    }

    /// A redelivery that came due: the event signed again, now, and sent on the worker's
    /// connection; its answer is never dropped (only a copy's first attempt loses it).
    async fn redeliver(&mut self, p: Pending) {
        let shared = self.shared.clone();
        let Some(event) = shared.plan.events().get(p.event) else {
            return;
        };
        shared.stats.redeliveries.fetch_add(1, Ordering::Relaxed);
        let sent = self.single(&event, false).await;
        self.settle(&event, p.attempt, p.first, self.conn_id, sent);
    }
}
