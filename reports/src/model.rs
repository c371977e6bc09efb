//! The report model: one run, as every renderer sees it.
//!
//! The harness builds a [`Report`]; the renderers (terminal, JSON, JUnit, HTML, Markdown) are siblings
//! that only read it. `report.json` is this model serialized, so field names here are a public,
//! versioned contract: add fields freely, never rename or remove one without bumping
//! [`SCHEMA_VERSION`].

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use verdict::{CheckResult, Evidence, Latency, Verdict};

/// Version of the `report.json` layout. Bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// One run of a scenario (or of `load`, `idempotency`, `analyze`, `exec`).
///
/// Whether it passed is derived from its outcome ([`Report::passed`]), so the two cannot
/// disagree; `report.json` still carries `passed` beside `outcome` for its readers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(remote = "Self")]
pub struct Report {
    /// Layout version of this document; see [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Scenario name (or the command, e.g. `load http://127.0.0.1:8080/`).
    pub scenario: String,
    /// How the run came out: `passed`, `failed`, `no_verdict` or `interrupted`; decided by the
    /// harness's `ReportBuilder`. A report written before this field existed is read with it
    /// derived from its `passed`. `None` (not decided) reads as failed, or interrupted.
    #[serde(default)]
    pub outcome: Option<Outcome>,
    /// True when Ctrl-C or SIGTERM stopped the run: the report covers only what was done.
    #[serde(default)]
    pub interrupted: bool,
    /// Wall-clock start, milliseconds since the Unix epoch.
    #[serde(default)]
    pub started_unix_ms: u64,
    /// How long the run took, in milliseconds; for a report on journals alone (`analyze`,
    /// `from_journal`), the journals' span: first request received to last answered.
    pub duration_ms: u64,
    /// True when the report judges journals a fault server wrote (`harness analyze`), with no
    /// run of its own: its `duration_ms` is the journals' span.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_journal: bool,
    /// The URL the load was aimed at, when there was one.
    #[serde(default)]
    pub target: Option<String>,
    /// Seed that makes the run's random choices reproducible.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Factor every scenario duration was multiplied by.
    #[serde(default = "one")]
    pub time_scale: f64,
    /// Request counts.
    pub requests: Requests,
    /// Latency percentiles over every completed request, in milliseconds.
    pub latency_ms: Latency,
    /// Completed requests per second over the run.
    #[serde(default)]
    pub throughput_rps: f64,
    /// Failed requests by kind: `connect`, `timeout`, `reset`, `closed`, `malformed`, `other`.
    #[serde(default)]
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Per-phase figures, in the order the phases ran.
    #[serde(default)]
    pub phases: Vec<Phase>,
    /// The verdicts.
    pub checks: Vec<CheckResult>,
    /// Requests per time window, for the "requests over time" chart.
    #[serde(default)]
    pub timeline: Option<Timeline>,
    /// Retry delays grouped by attempt index, for the jitter chart: per attempt a fixed-size
    /// summary, however many retries there were (see [`AttemptDelays`]).
    #[serde(default)]
    pub retry_delays: Vec<AttemptDelays>,
    /// What `harness exec` ran, when it did.
    #[serde(default)]
    pub exec: Option<Exec>,
    /// The part of a run split into shards this report covers (absent for a whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// What a report needs to be merged with others exactly: histograms, the driver's counts,
    /// the checks' configuration (absent where the run had no load driver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mergeable: Option<Mergeable>,
    /// Things the reader must know to trust the figures (e.g. the clock assumption of a
    /// journal merged from several servers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// `harness audit`: one row per unsafe operation of the API, in the order they were probed
    /// (absent for every other command).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<AuditedOperation>,
    /// Connections through the fault server's TCP proxies, one row per proxy (absent when no
    /// connection went through one). Not in `requests`: a connection is no HTTP request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<ProxyConnections>,
    /// Statements (PostgreSQL) and commands (Redis) the fault server's protocol-aware proxies
    /// read, one row per proxy (absent when none did). Not in `requests` either.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statements: Vec<ProxyStatements>,
    /// `harness conform`: the scorecard of a retrying client, one row per rule of the suite
    /// (absent for every other command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conformance: Option<Conformance>,
}

/// A TCP proxy's connections in a journal: how many, how they ended, their bytes, the toxics
/// that acted on them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProxyConnections {
    /// The proxy's name.
    pub proxy: String,
    /// Connections journaled.
    pub connections: u64,
    /// Connections whose upstream could not be reached.
    pub upstream_unreached: u64,
    /// By how they ended: `closed`, `reset`, `timed_out`, `cut`, `refused`, `rejected`,
    /// `shutdown`.
    pub by_end: BTreeMap<String, u64>,
    /// Bytes delivered from the clients to the upstream.
    pub bytes_up: u64,
    /// Bytes delivered from the upstream to the clients.
    pub bytes_down: u64,
    /// Connections each toxic acted on, by toxic name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_toxic: BTreeMap<String, u64>,
}

/// A protocol-aware proxy's statements (PostgreSQL) or commands (Redis) in a journal: how many,
/// which faults its rules gave them, how their answers went, and what became of the
/// transactions they ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProxyStatements {
    /// The proxy's name.
    pub proxy: String,
    /// `postgres` or `redis`.
    pub protocol: String,
    /// Statements or commands journaled (a connection's refused startup and a protocol
    /// violation included).
    pub statements: u64,
    /// By the fault a rule gave them: `error`, `delay`, `drop`, `reset`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_fault: BTreeMap<String, u64>,
    /// By outcome: `responded`, `dropped` (the answer withheld), `reset`, `client_closed`,
    /// `upstream_error`, `rejected` (a protocol violation).
    pub by_outcome: BTreeMap<String, u64>,
    /// Answers that were errors, by SQLSTATE (PostgreSQL) or error code (Redis), the
    /// database's own and those a rule put in their place.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_error: BTreeMap<String, u64>,
    /// PostgreSQL: transactions the database committed (by the statement that ended each).
    #[serde(default)]
    pub committed: u64,
    /// PostgreSQL: transactions that ended without committing (rolled back, failed, or their
    /// connection lost).
    #[serde(default)]
    pub not_committed: u64,
    /// Transactions the database committed whose answer never reached the client: the
    /// ambiguous commits.
    #[serde(default)]
    pub committed_unanswered: u64,
}

/// Which shard of a run a report covers, and when it started.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ShardInfo {
    /// From 0.
    pub index: u32,
    /// Shards of the run.
    pub count: u32,
    /// The run's common start (`--start-at`), ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at_unix_ms: Option<u64>,
    /// How late this shard's first phase started after the common start, in milliseconds (0
    /// when on time; without a common start, 0).
    #[serde(default)]
    pub late_ms: f64,
    /// Reports merged into this one (a merged report: every shard's index).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<u32>,
}

/// The lossless part of a report: histograms serialized in the HdrHistogram V2 format with
/// DEFLATE, base64-encoded, in microseconds; and the driver's counts. Merging reports sums the
/// counts and adds the histograms, so merged percentiles are those of every sample together.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Mergeable {
    /// Latency of every attempt from its send, µs.
    pub latency_hdr: String,
    /// Per phase, in order: latency from the send, and from the intended start (rate phases).
    pub phases: Vec<PhaseHistograms>,
    /// Logical operations the driver ran (cancelled ones excluded).
    pub operations: u64,
    /// Operations that did not end in a response below 500.
    pub failed_operations: u64,
    /// The checks as the run judged with them (durations already scaled), so a merge judges
    /// the same way.
    #[serde(default)]
    pub checks: serde_json::Value,
    /// The retry delays' histograms, one per attempt index of [`Report::retry_delays`] (absent
    /// in reports written before them, whose `delays_ms` hold every delay).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_delays: Vec<DelayHistogram>,
}

/// The retry delays before one attempt index, as a histogram; see [`Mergeable`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DelayHistogram {
    /// Attempt index: 2 is the first retry.
    pub attempt: u32,
    /// Every delay before this attempt, µs.
    pub delays_hdr: String,
}

/// A phase's histograms; see [`Mergeable`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseHistograms {
    /// Latency from the send, µs.
    pub latency_hdr: String,
    /// Latency from the intended start, µs (rate phases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intended_hdr: Option<String>,
}

impl Report {
    /// How the run came out.
    pub fn outcome(&self) -> Outcome {
        match self.outcome {
            Some(o) => o,
            None if self.interrupted => Outcome::Interrupted,
            None => Outcome::Failed,
        }
    }

    /// True when the run passed: its outcome is [`Outcome::Passed`].
    pub fn passed(&self) -> bool {
        self.outcome() == Outcome::Passed
    }
}

/// `report.json` writes the derived `passed` beside the report's fields.
impl Serialize for Report {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Json<'a> {
            passed: bool,
            #[serde(flatten, serialize_with = "fields")]
            report: &'a Report,
        }
        fn fields<S: Serializer>(r: &&Report, s: S) -> Result<S::Ok, S::Error> {
            Report::serialize(r, s)
        }
        Json {
            passed: self.passed(),
            report: self,
        }
        .serialize(s)
    }
}

/// Reading, `passed` only matters to a report without an `outcome` (written before it existed):
/// its outcome is derived from it (interrupted when it was, else passed or failed).
impl<'de> Deserialize<'de> for Report {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Report, D::Error> {
        #[derive(Deserialize)]
        struct Json {
            #[serde(default)]
            passed: bool,
            #[serde(flatten, deserialize_with = "Report::deserialize")]
            report: Report,
        }
        let Json { passed, mut report } = Json::deserialize(d)?;
        if report.outcome.is_none() {
            report.outcome = Some(if report.interrupted {
                Outcome::Interrupted
            } else if passed {
                Outcome::Passed
            } else {
                Outcome::Failed
            });
        }
        Ok(report)
    }
}

/// How a run as a whole came out (the command line gives each its exit code).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every check that judged passed.
    Passed,
    /// A check failed, or the command `harness exec` ran exited non-zero.
    Failed,
    /// Checks were asked for, and none reached pass or fail: all inconclusive, or none
    /// configured (a run that decided nothing does not pass).
    NoVerdict,
    /// Ctrl-C or SIGTERM stopped the run; what was done was still judged.
    Interrupted,
}

impl Outcome {
    /// The word a report leads with.
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Passed => "PASSED",
            Outcome::Failed => "FAILED",
            Outcome::NoVerdict => "NO VERDICT",
            Outcome::Interrupted => "INTERRUPTED",
        }
    }

    /// What the outcome means, in a sentence (empty for passed and failed, which say it).
    pub fn explanation(self) -> &'static str {
        match self {
            Outcome::Passed | Outcome::Failed => "",
            Outcome::NoVerdict => {
                "no check reached pass or fail: the run decided nothing, so it does not pass"
            }
            Outcome::Interrupted => {
                "the run was interrupted: the report covers only what was done before it stopped"
            }
        }
    }
}

fn one() -> f64 {
    1.0
}

/// Request counts of a run or a phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Requests {
    /// Requests (attempts) sent, retries included.
    pub sent: u64,
    /// Requests that got an HTTP response, whatever its status.
    pub completed: u64,
    /// Transport errors: requests that got no response (connect error, timeout, reset, closed,
    /// malformed), by kind in the report's `errors_by_kind`.
    pub errors: u64,
    /// Attempts beyond the first of a logical operation.
    pub retries: u64,
    /// Responses by status code (as a string, e.g. `"503"`).
    pub by_status: BTreeMap<String, u64>,
    /// gRPC attempts by status name (`"OK"`, `"UNAVAILABLE"`), a client's own status for an
    /// attempt that got no answer included; absent when no gRPC call was made.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_grpc_status: BTreeMap<String, u64>,
    /// Requests that could not be started at their intended time (open-model rate only).
    #[serde(default)]
    pub late_starts: u64,
    /// Operations cut short in flight by an interruption or a hard stop: neither answered nor
    /// failed, and not in `sent`.
    #[serde(default)]
    pub cancelled: u64,
    /// Requests of an open-model phase that were due but never sent before the phase ended
    /// (every connection busy: the target could not take the rate).
    #[serde(default)]
    pub not_started: u64,
    /// Attempts sent that their own call gave up before an answer or an error came: hedges
    /// still in flight when another attempt's answer ended the call (gRFC A6 cancels them). In
    /// `sent`, neither `completed` nor `errors`: `sent = completed + errors + abandoned`.
    #[serde(default)]
    pub abandoned: u64,
    /// Logical operations the load driver ended (each once, whatever its retries; cancelled
    /// ones left out); absent where no load driver ran (`analyze`, `exec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operations: Option<u64>,
    /// Operation failures: operations that failed after their retries (no answer, a 5xx, a
    /// failing gRPC status, a fallback); absent with `operations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_operations: Option<u64>,
}

impl Requests {
    /// Request failures: attempts answered with a 5xx or a failing gRPC status, or not answered
    /// at all (`errors`, the transport errors).
    pub fn request_failures(&self) -> u64 {
        let server_errors: u64 = self
            .by_status
            .iter()
            .filter(|(status, _)| status.starts_with('5'))
            .map(|(_, n)| *n)
            .sum();
        // A gRPC attempt answered with a failing status: over HTTP it was a 200. The client's
        // own status of an attempt that got no answer is already among the errors.
        let grpc_failures: u64 = self
            .by_grpc_status
            .iter()
            .filter(|(code, _)| code.as_str() != "OK")
            .map(|(_, n)| *n)
            .sum::<u64>()
            .saturating_sub(self.errors);
        self.errors + server_errors + grpc_failures
    }

    /// Request failures over attempts sent, as a fraction; `None` when nothing was sent.
    pub fn request_failure_rate(&self) -> Option<f64> {
        (self.sent > 0).then(|| self.request_failures() as f64 / self.sent as f64)
    }

    /// Transport errors over attempts sent, as a fraction; `None` when nothing was sent.
    pub fn transport_error_rate(&self) -> Option<f64> {
        (self.sent > 0).then(|| self.errors as f64 / self.sent as f64)
    }

    /// Operation failures over operations, as a fraction; `None` where operations are not
    /// known or there were none.
    pub fn operation_failure_rate(&self) -> Option<f64> {
        match (self.operations, self.failed_operations) {
            (Some(n), Some(f)) if n > 0 => Some(f as f64 / n as f64),
            _ => None,
        }
    }
}

/// One load phase's figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Phase {
    /// Name given in the scenario file.
    pub name: String,
    /// Executor kind: `burst`, `rate`, `clients`, `fleet`.
    pub kind: String,
    /// How long the phase ran, in milliseconds.
    pub duration_ms: u64,
    /// Request counts of this phase alone.
    pub requests: Requests,
    /// Latency from the actual send.
    pub latency_ms: Latency,
    /// Latency from the intended send time (coordinated omission corrected), rate phases only.
    #[serde(default)]
    pub latency_intended_ms: Option<Latency>,
    /// Completed requests per second over the phase.
    #[serde(default)]
    pub throughput_rps: f64,
    /// Free-form extra figures (e.g. `release_skew_us_max` for bursts).
    #[serde(default)]
    pub metrics: BTreeMap<String, serde_json::Value>,
}

/// Requests per fixed time window, split into labelled series (by status, fault or error kind).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timeline {
    /// Window width in milliseconds.
    pub window_ms: f64,
    /// One series per label (e.g. `201`, `503`, `fault:drop`, `error:timeout`); all the same length.
    pub series: Vec<Series>,
}

impl Timeline {
    /// The counts of the series labelled `label`; none when the timeline has no such series.
    pub fn counts(&self, label: &str) -> &[u64] {
        self.series
            .iter()
            .find(|s| s.label == label)
            .map_or(&[], |s| s.counts.as_slice())
    }
}

/// One labelled series of a [`Timeline`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Series {
    /// What is counted: a status (`503`), a fault (`fault:drop`) or an error kind (`error:timeout`).
    pub label: String,
    /// Requests per window, from the start of the run.
    pub counts: Vec<u64>,
}

/// Most delays an [`AttemptDelays`] lists: beyond this many retries it lists the delay at each
/// percentile, 0 to 100.
pub const DELAY_POINTS: usize = 101;

/// Observed retry delays (milliseconds) before attempt `attempt` (2 = first retry), in a size that
/// does not grow with the retries: their count, the exact shortest and longest, and at most
/// [`DELAY_POINTS`] delays for the chart. A mergeable report carries their histogram too
/// ([`Mergeable::retry_delays`]), from which a merge computes the merged run's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AttemptDelays {
    /// Attempt index: 2 is the first retry.
    pub attempt: u32,
    /// Delays at evenly spaced ranks, shortest first, in milliseconds: every delay when there
    /// are at most [`DELAY_POINTS`]; else the delay at each percentile from 0 (the shortest) to
    /// 100 (the longest), read from the histogram (three significant digits). In reports written
    /// before `count` existed, every delay.
    pub delays_ms: Vec<f64>,
    /// Retries that waited before this attempt (absent in older reports: `delays_ms.len()`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// The shortest delay, exact (absent in older reports: the least of `delays_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ms: Option<f64>,
    /// The longest delay, exact (absent in older reports: the greatest of `delays_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
}

impl AttemptDelays {
    /// Retries that waited before this attempt.
    pub fn count(&self) -> u64 {
        self.count.unwrap_or(self.delays_ms.len() as u64)
    }

    /// True when `delays_ms` is every delay, not a delay per percentile.
    pub fn lists_every_delay(&self) -> bool {
        self.count() == self.delays_ms.len() as u64
    }

    /// The shortest and the longest delay (ms), when there was one; non-finite or negative
    /// figures are ignored.
    pub fn range_ms(&self) -> Option<(f64, f64)> {
        let listed = self
            .delays_ms
            .iter()
            .copied()
            .filter(|v| v.is_finite() && *v >= 0.0);
        let lo = self.min_ms.or_else(|| listed.clone().reduce(f64::min))?;
        let hi = self.max_ms.or_else(|| listed.reduce(f64::max))?;
        Some((lo, hi))
    }
}

/// The command `harness exec` ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Exec {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Its exit code; `None` when it was killed by a signal.
    pub exit_code: Option<i32>,
}

/// An audited operation's verdict: `pass`, `fail`, or `inconclusive` (the audit could not judge
/// it — no valid request, the API refused the baseline, nothing to observe).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum OperationVerdict {
    /// The operation behaved as its method and key promise.
    Pass,
    /// It did not: a duplicate, a 5xx on a repeat, a retry that creates twice.
    Fail,
    /// Not judged; the summary says why.
    Inconclusive,
}

impl OperationVerdict {
    /// The word a table shows: `PASS`, `FAIL`, `INCONCLUSIVE`.
    pub fn word(self) -> &'static str {
        match self {
            OperationVerdict::Pass => "PASS",
            OperationVerdict::Fail => "FAIL",
            OperationVerdict::Inconclusive => "INCONCLUSIVE",
        }
    }

    /// The check verdict of the same meaning (for colours and icons shared with the checks).
    pub fn as_verdict(self) -> Verdict {
        match self {
            OperationVerdict::Pass => Verdict::Pass,
            OperationVerdict::Fail => Verdict::Fail,
            OperationVerdict::Inconclusive => Verdict::Inconclusive,
        }
    }
}

/// How an audited operation was probed, from its method and whether it takes a key.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    /// POST or PATCH with an idempotency key: same-key bursts, replay, mismatch, missing key.
    Keyed,
    /// POST or PATCH without a key: one request repeated after its response was lost.
    LostResponse,
    /// PUT or DELETE: repeated and concurrent, the resulting state compared.
    Repeat,
    /// No probe ran: no valid request could be built, or the baseline was refused.
    None,
}

impl ProbeKind {
    /// What the probe was, in a few words for a table.
    pub fn describe(self) -> &'static str {
        match self {
            ProbeKind::Keyed => "same-key bursts",
            ProbeKind::LostResponse => "retry after a lost response",
            ProbeKind::Repeat => "repeated and concurrent",
            ProbeKind::None => "not probed",
        }
    }
}

/// One unsafe operation of an audited API: its row in the table, and why it has its verdict.
///
/// The columns a table shows are text the audit wrote (`replay: "200, same resource"`): the
/// audit knows what each probe means, the renderers only lay them out.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditedOperation {
    /// `POST`, `PUT`, `PATCH`, `DELETE`.
    pub method: String,
    /// The path template: `/orders/{id}`.
    pub path: String,
    /// The document's `operationId` (or one made from the method and the path).
    pub operation_id: String,
    /// The idempotency-key header the operation was probed with, when it was.
    #[serde(default)]
    pub key_header: Option<String>,
    /// Where the key comes from: `declared, required`, `declared`, `forced`, or `none`.
    #[serde(default)]
    pub key_support: String,
    /// How it was probed.
    pub probe: ProbeKind,
    /// The verdict.
    pub verdict: OperationVerdict,
    /// The verdict in a sentence.
    pub summary: String,
    /// Resources created per key under a burst (keyed), or by a request and its retry
    /// (lost response): `1`, `max 7 (3 of 20 keys)`; empty where it does not apply.
    #[serde(default)]
    pub creations: String,
    /// What a replay of a completed request answered.
    #[serde(default)]
    pub replay: String,
    /// What the same key with a different body answered.
    #[serde(default)]
    pub mismatch: String,
    /// What a request without the key answered.
    #[serde(default)]
    pub missing_key: String,
    /// The exchanges that prove the verdict (or, inconclusive, the answer that stopped it).
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// The checks that judged a keyed probe (`duplicates`, `idempotency_semantics`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
    /// The baseline request as HTTP/1.1 text, credentials left out (what `harness init
    /// --from-openapi` would write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Requests this operation's probe sent (its producers and verifications included).
    #[serde(default)]
    pub requests_sent: u64,
}

impl AuditedOperation {
    /// `POST /orders`.
    pub fn label(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// An anchor naming the row, for a link from the table to its evidence.
    pub fn anchor(&self) -> String {
        let id: String = self
            .operation_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        format!("op-{id}")
    }
}

/// `harness conform`'s scorecard: the client's adapter run once per case of a suite, each rule
/// judged on its case's journal by one check.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Conformance {
    /// The suite run: `http`, `grpc` or `all`.
    pub suite: String,
    /// The adapter and its arguments.
    pub command: Vec<String>,
    /// One row per rule, in the suite's order.
    pub rules: Vec<ConformRule>,
    /// One row per case the adapter was run in.
    pub cases: Vec<ConformCase>,
}

/// One rule of a conformance suite and how the client did on it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ConformRule {
    /// Stable identifier: `transient-retried`, `no-retry-4xx`, `jitter`, …
    pub id: String,
    /// The rule in a sentence: "a transient failure is retried".
    pub title: String,
    /// Where the rule comes from: an RFC section, a draft, a gRFC, the seed's checklist.
    pub source: String,
    /// The case (fault schedule) it was judged on.
    pub case: String,
    /// The check that judged it.
    pub check: String,
    /// Whether `--require` made an optional rule (a breaker) one the client must meet.
    #[serde(default)]
    pub required: bool,
    /// The verdict.
    pub verdict: RuleVerdict,
    /// What was measured, in a sentence (the check's summary, or why nothing was).
    pub figure: String,
    /// The requests that prove it (journal `seq`s of its case).
    #[serde(default)]
    pub evidence: Vec<Evidence>,
}

/// A conformance rule's verdict.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RuleVerdict {
    /// The client keeps the rule.
    Pass,
    /// It keeps it weakly (jitter narrower than equal jitter, some transient failures not
    /// retried); does not fail the scorecard.
    Weak,
    /// It breaks the rule.
    Fail,
    /// An optional rule (a breaker, hedging) the client does not claim; does not fail the
    /// scorecard unless `--require`d.
    NotPresent,
    /// The case could not decide; the figure says why.
    Inconclusive,
}

impl RuleVerdict {
    /// The word a table shows: `PASS`, `WEAK`, `FAIL`, `NOT PRESENT`, `INCONCLUSIVE`.
    pub fn word(self) -> &'static str {
        match self {
            RuleVerdict::Pass => "PASS",
            RuleVerdict::Weak => "WEAK",
            RuleVerdict::Fail => "FAIL",
            RuleVerdict::NotPresent => "NOT PRESENT",
            RuleVerdict::Inconclusive => "INCONCLUSIVE",
        }
    }

    /// The check verdict of the nearest meaning (for colours and icons shared with the checks):
    /// not present reads as inconclusive.
    pub fn as_verdict(self) -> Verdict {
        match self {
            RuleVerdict::Pass => Verdict::Pass,
            RuleVerdict::Weak => Verdict::Weak,
            RuleVerdict::Fail => Verdict::Fail,
            RuleVerdict::NotPresent | RuleVerdict::Inconclusive => Verdict::Inconclusive,
        }
    }
}

/// One run of the adapter against one case's fault schedule.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ConformCase {
    /// The case: `first-two-503`, `first-400`, …
    pub name: String,
    /// What its fault server does, in a sentence.
    pub about: String,
    /// The calls the adapter was asked to make (`HARNESS_CALLS`).
    pub calls: u32,
    /// Requests the fault server saw.
    pub requests: u64,
    /// The adapter's exit code (`None`: killed by a signal or by the case's time limit).
    pub exit_code: Option<i32>,
    /// How long the case took, in milliseconds.
    pub duration_ms: u64,
    /// Why the case decided nothing, when it did not run as it should (the adapter failed,
    /// timed out, made no call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> CheckResult {
        let mut r = CheckResult::new(
            "duplicates",
            Verdict::Fail,
            "1 of 1 keys created more than one resource",
        );
        for i in 0..5 {
            r = r.evidence(Evidence {
                detail: format!("key k-{i} created 2 resources"),
                key: Some(format!("k-{i}\u{1b}[2J")),
                seqs: vec![1, 2],
            });
        }
        r
    }

    #[test]
    fn a_result_displays_as_the_terminal_shows_it() {
        assert_eq!(
            failed().to_string(),
            "duplicates: FAIL: 1 of 1 keys created more than one resource\n  \
             • key k-0 created 2 resources [key k-0\\u{1b}[2J; seq 1, 2]\n  \
             • key k-1 created 2 resources [key k-1\\u{1b}[2J; seq 1, 2]\n  \
             • key k-2 created 2 resources [key k-2\\u{1b}[2J; seq 1, 2]\n  \
             … and 2 more in `evidence`"
        );
        let passed = CheckResult::new("jitter", Verdict::Weak, "jitter too small to matter");
        assert_eq!(
            passed.to_string(),
            "jitter: WEAK: jitter too small to matter"
        );
        passed.assert_passes();
        failed().assert_fails();
    }

    #[test]
    #[should_panic(expected = "check `duplicates` was expected to pass:\nduplicates: FAIL: 1 of 1")]
    fn a_failed_assertion_says_why() {
        failed().assert_passes();
    }

    #[test]
    #[should_panic(expected = "expected to reach `pass`:\njitter: WEAK")]
    fn a_weak_verdict_is_not_a_pass_verdict() {
        CheckResult::new("jitter", Verdict::Weak, "jitter too small to matter")
            .assert_pass_verdict();
    }
}
