//! `jitter`: do clients that failed together retry together?
//!
//! Why missing jitter is dangerous: exponential backoff spaces one client's retries (1, 2, 4, 8,
//! 16 s) but keeps every client on the same clock. When an incident fails 500 clients at once,
//! all 500 retry at t = 1, 3, 7, 15 and 31 s: every retry wave is as tall as the first failure and
//! hits a service that is trying to recover (seed exercise 1: 500 requests in one 250 ms window
//! without jitter, 193 with full jitter). The regular sawtooth after an incident is its signature.
//!
//! How it is detected:
//! 1. Operations whose first failures arrive within `together_ms` of the cluster's first failure
//!    form a cluster: they failed together, so without jitter they retry together. A steady
//!    trickle of failures makes only small clusters, which `min_samples` leaves unjudged: fixed
//!    delays after failures that were spread out anyway do not make a herd.
//! 2. Per cluster and attempt number, the group of retries is judged by [`group`]: read in the
//!    order of their failures, the jitter is the width of the delays that the order does not
//!    explain, as ± a fraction of the delay the client chose. A client handling its failures one
//!    after another keeps their order, however much that spreads the delays; a random wait
//!    shuffles it. Jitter of at least `pass_jitter` passes (full ±100 %, decorrelated, equal
//!    ±33 %, p-retry's ×U(1, 2) ±33 %); narrower jitter above `min_jitter` is weak (gRPC's ±20 %);
//!    less, or a width under the machine's timing noise, is no jitter. Where the data cannot
//!    decide — a client held up that sent everything due at once, a client paced by its own
//!    handling, a width within the noise — the group is undecided and says why.
//! 3. Across a cluster's attempt groups: short delays (median under `window_ms`) that do not
//!    grow from attempt to attempt and start near zero are the pace of handling responses, not a
//!    backoff (a fleet with no wait at all whose handling happens to look random): no backoff.
//!    The worst judged group decides; every finding names the reading that decided it.
//! 4. The effect is reported too: the fraction of a group's retries in its densest `window_ms`
//!    window, and the peak-to-mean ratio of the cluster's retries binned by `window_ms`.
//!
//! A group needs `min_samples` retries, else the answer is Inconclusive ("not enough data"), never
//! a guess; a check whose every group is undecided is inconclusive with the groups' reasons.
//! `noise_floor_ms` and `immediate_ms` are real time, the machine's and the client's: a strong
//! `--time-scale` does not scale them.
//!
//! Memory: the retries of a cluster are kept until no member operation has been active for the
//! horizon; then the cluster is judged and only its verdicts remain.
//!
//! Metrics: `groups` (the worst `max_evidence` of the judged cluster/attempt groups, worst
//! first), `groups_analyzed`, `groups_undecided`, `groups_cut_off`, `retries_analyzed`,
//! `lowest_jitter`, `highest_densest_window_fraction`, `highest_peak_to_mean`, and the jitter
//! family the delays read as ([`family`]): `family` (`none` for a fail, `proportional` for a
//! weak verdict, else `proportional`, `equal`, `full` or `decorrelated`; absent when
//! inconclusive), `family_alternative` (a family the readings cannot rule out, when there is
//! one), `first_retries_spread` and `spread_widening`, the readings it rests on.

pub mod family;
pub mod group;

use history::Facts;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::json;
use verdict::{CheckResult, Verdict};

use self::group::{Finding, Judgement, NoJitterWhy, Retry, SmallWhy, UndecidedWhy};
use super::evidence::{attach, Findings};
use super::spec::{non_negative, scale_ms, About, CheckSpec, Invalid};
use super::stats::{densest_window, peak_to_mean};
use super::{Attempt, Check, Context};

/// Configuration of the `jitter` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct JitterConfig {
    /// Narrowest jitter, as ± a fraction of the delay the client chose, that counts as jitter.
    pub min_jitter: f64,
    /// Jitter at least this wide (± a fraction of the delay) passes; narrower jitter is weak.
    pub pass_jitter: f64,
    /// Width (ms, of a uniform draw) under which a spread is the machine's timing noise: under
    /// half of it a group shows no jitter, between half and all of it the group is undecided.
    pub noise_floor_ms: f64,
    /// A chosen delay below this (ms), with no jitter, is an immediate retry: no backoff at all.
    pub immediate_ms: f64,
    /// Retries one attempt group needs before it is judged.
    pub min_samples: usize,
    /// First failures within this time (ms) of a cluster's first one count as failing together.
    pub together_ms: u64,
    /// Window (ms) for the arrival-clustering figures, and the longest median delay the
    /// no-backoff rule reads as the pace of handling.
    pub window_ms: u64,
}

impl Default for JitterConfig {
    fn default() -> Self {
        JitterConfig {
            // ±10 %: below it, the simulated busy machine's timing noise on a 30 ms delay, and
            // no common library's jitter (calibration/RESULTS.md; the rates per family are in
            // the checks reference).
            min_jitter: 0.08,
            // Equal jitter is ±33 %, p-retry's ×U(1, 2) too; gRPC's ±20 % is weak.
            pass_jitter: 0.22,
            noise_floor_ms: 7.0,
            immediate_ms: 5.0,
            min_samples: 20,
            together_ms: 250,
            window_ms: 250,
        }
    }
}

/// The retries before one attempt number, within one cluster.
#[derive(Debug, Default)]
struct Group {
    retries: Vec<Retry>,
}

/// Operations whose first failures came together.
#[derive(Debug)]
struct Cluster {
    start_us: u64,
    end_us: u64,
    /// Latest activity of any member operation: once idle past the horizon, the cluster can get
    /// no more retries and is judged.
    last_us: u64,
    members: usize,
    groups: BTreeMap<u32, Group>,
    /// Member operations whose latest attempt failed, with when it ended: each will be
    /// retried, has given up, or was cut off by the end of the run.
    failing: HashMap<u64, u64>,
}

/// Attempt groups whose slow retries (90th percentile of the delays) wait less than this factor
/// longer at the last attempt than at the first do not back off (an exponential backoff doubles;
/// handling delays stay put or shrink).
const GROWTH: f64 = 1.5;

/// A group whose 10th percentile delay is under this fraction of its median starts near zero, as
/// handling delays do; a wait the client chose (proportional jitter, a fixed delay) does not.
const HANDLING_FLOOR: f64 = 0.5;

#[derive(Debug)]
struct Analysis {
    cluster_start_us: u64,
    /// Members of its cluster.
    members: usize,
    attempt: u32,
    judged: Judgement,
    densest_fraction: f64,
    /// Largest fraction of the delays within one `window_ms`: the retries that came back
    /// together, counted from their own failures.
    wave_fraction: f64,
    densest_seqs: Vec<u64>,
    peak_to_mean: Option<f64>,
}

impl Analysis {
    fn finding(&self) -> Finding {
        self.judged.finding
    }
    fn n(&self) -> usize {
        self.judged.measure.n
    }
    /// Whether the group counts towards the verdict.
    fn decided(&self) -> bool {
        !matches!(self.finding(), Finding::Undecided(_))
    }
}

/// The `jitter` check.
pub(crate) struct JitterCheck {
    cfg: JitterConfig,
    max_evidence: usize,
    horizon_us: u64,
    now_us: u64,
    last_sweep_us: u64,
    clusters: BTreeMap<u64, Cluster>,
    /// Start of the cluster new first failures may still join.
    open: Option<u64>,
    /// Size of the largest group seen, judged or not.
    largest: usize,
    /// Groups judged so far (their samples are gone).
    analyses: Vec<Analysis>,
    /// Groups left out because the end of the run may have cut their slower retries off (see
    /// [`JitterCheck::no_backoff`]).
    censored: usize,
}

impl JitterCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &JitterConfig, ctx: Context) -> Self {
        JitterCheck {
            cfg: cfg.clone(),
            max_evidence: ctx.max_evidence,
            horizon_us: ctx.horizon_us,
            now_us: 0,
            last_sweep_us: 0,
            clusters: BTreeMap::new(),
            open: None,
            largest: 0,
            analyses: Vec::new(),
            censored: 0,
        }
    }

    /// Judges a cluster that can get no more retries, keeping only the verdicts.
    fn settle(&mut self, start: u64) {
        let Some(c) = self.clusters.remove(&start) else {
            return;
        };
        let mut judged = Vec::new();
        for (&attempt, g) in &c.groups {
            self.largest = self.largest.max(g.retries.len());
            if let Some(a) = self.analyse(&c, attempt, g) {
                judged.push(a);
            }
        }
        let last_failing = c.failing.values().max().copied();
        self.no_backoff(&mut judged, last_failing);
        self.analyses.extend(judged);
    }

    /// What jitter is for is spreading, in time, retries that a failure synchronized. Delays
    /// shorter than one window that stay the same from attempt to attempt, and start near zero,
    /// are the time the client takes to handle a response — a fleet on one event loop handles 50
    /// failures one after another — not a backoff, whatever their spread.
    ///
    /// The comparison needs the last group whole. When the run ended while a member operation
    /// had failed and not been retried, and a retry backing off from the first group's (its slow
    /// retries' wait, `GROWTH` times) would have come after the end, the slower retries of the
    /// last group may be the ones cut off: its delays look shorter than the client's. Then the
    /// groups this criterion would decide are left out, counted in `censored`, rather than
    /// judged on what the end of the run kept.
    fn no_backoff(&mut self, groups: &mut Vec<Analysis>, last_failing_us: Option<u64>) {
        let window = self.cfg.window_ms as f64;
        let judged: Vec<&Analysis> = groups.iter().filter(|a| a.decided()).collect();
        if judged.len() < 2 || judged.iter().any(|a| a.judged.measure.median_ms >= window) {
            return;
        }
        let by_attempt = |a: &&&Analysis| a.attempt;
        let (Some(first), Some(last)) = (
            judged.iter().min_by_key(by_attempt),
            judged.iter().max_by_key(by_attempt),
        ) else {
            return;
        };
        let (first_p90, last_p90) = (first.judged.measure.p90_ms, last.judged.measure.p90_ms);
        if last_p90 >= first_p90 * GROWTH {
            return;
        }
        let handling = |a: &Analysis| {
            let m = &a.judged.measure;
            m.p10_ms < HANDLING_FLOOR * m.median_ms
        };
        let applies = |a: &Analysis| match a.finding() {
            Finding::Jittered | Finding::Small(_) => handling(a),
            Finding::NoJitter(_) => true,
            _ => false,
        };
        let backing_off_us = (first_p90 * GROWTH * 1000.0) as u64;
        if last_failing_us.is_some_and(|t| t.saturating_add(backing_off_us) > self.now_us) {
            let before = groups.len();
            groups.retain(|a| {
                !(matches!(a.finding(), Finding::Jittered | Finding::Small(_)) && applies(a))
            });
            self.censored += before - groups.len();
            return;
        }
        for a in groups.iter_mut() {
            if applies(a) {
                a.judged.finding = Finding::NoBackoff;
            }
        }
    }

    /// Settles every cluster idle for longer than the horizon (at most once a second).
    fn sweep(&mut self) {
        if self.now_us < self.last_sweep_us.saturating_add(1_000_000) {
            return;
        }
        self.last_sweep_us = self.now_us;
        let idle: Vec<u64> = self
            .clusters
            .values()
            .filter(|c| {
                Some(c.start_us) != self.open
                    && c.last_us.saturating_add(self.horizon_us) < self.now_us
            })
            .map(|c| c.start_us)
            .collect();
        for start in idle {
            self.settle(start);
        }
    }

    /// A cluster no first failure can join any more: dropped when too small to ever be judged.
    fn seal(&mut self, start: u64) {
        let members = self.clusters.get(&start).map_or(0, |c| c.members);
        if members < self.cfg.min_samples {
            self.largest = self.largest.max(members);
            self.clusters.remove(&start);
        }
    }

    fn join(&mut self, t_us: u64) {
        let together = self.cfg.together_ms.saturating_mul(1000);
        if let Some(c) = self.open.and_then(|s| self.clusters.get_mut(&s)) {
            if t_us <= c.start_us.saturating_add(together) {
                c.end_us = c.end_us.max(t_us);
                c.last_us = c.last_us.max(t_us);
                c.members += 1;
                return;
            }
        }
        if let Some(s) = self.open {
            self.seal(s);
        }
        let start = match self.clusters.range(..=t_us).next_back() {
            // Same start as a cluster kept before: extend it rather than replace it.
            Some((&s, _)) if s == t_us => s,
            _ => t_us,
        };
        let c = self.clusters.entry(start).or_insert(Cluster {
            start_us: t_us,
            end_us: t_us,
            last_us: t_us,
            members: 0,
            groups: BTreeMap::new(),
            failing: HashMap::new(),
        });
        c.members += 1;
        self.open = Some(start);
    }

    fn analyse(&self, c: &Cluster, attempt: u32, g: &Group) -> Option<Analysis> {
        let n = g.retries.len();
        if n < self.cfg.min_samples.max(1) {
            return None;
        }
        let judged = group::judge(&g.retries, &self.cfg)?;
        let mut arrivals: Vec<(u64, u64)> =
            g.retries.iter().map(|r| (r.arrived_us, r.seq)).collect();
        arrivals.sort_unstable();
        let times: Vec<u64> = arrivals.iter().map(|(t, _)| *t).collect();
        let window_us = self.cfg.window_ms.max(1).saturating_mul(1000);
        let (dense, from) = densest_window(&times, window_us);
        let densest_seqs = arrivals
            .iter()
            .skip(from)
            .take(dense.min(10))
            .map(|(_, s)| *s)
            .collect();
        let all: Vec<u64> = c
            .groups
            .values()
            .flat_map(|g| g.retries.iter().map(|r| r.arrived_us))
            .collect();
        // One wave relative to the failures that synchronized them: the delays, not the
        // arrivals, since failures spread by the client's own pace spread retries that all
        // waited the same.
        let mut delays: Vec<u64> = g.retries.iter().map(Retry::delay_us).collect();
        delays.sort_unstable();
        let wave_fraction = densest_window(&delays, window_us).0 as f64 / n as f64;
        Some(Analysis {
            cluster_start_us: c.start_us,
            members: c.members,
            attempt,
            judged,
            densest_fraction: dense as f64 / n as f64,
            wave_fraction,
            densest_seqs,
            peak_to_mean: peak_to_mean(&all, c.start_us, window_us),
        })
    }

    /// One line on an attempt group, naming the reading that decided it; times are seconds
    /// since the run started (`facts`). Every comparison it states holds as printed
    /// ([`cmp`]).
    fn describe(&self, a: &Analysis, facts: &Facts) -> String {
        let at = facts.run_ms(a.cluster_start_us) / 1000.0;
        let cfg = &self.cfg;
        let m = &a.judged.measure;
        let k = a.attempt;
        let who = format!("{} operations that failed together at {at:.3} s", m.n);
        let jitter = |op: Op, bound: f64, name: &str| {
            let (v, b) = cmp(100.0 * m.jitter, op, 100.0 * bound);
            format!("±{v} % {} {name} ±{b} %", op.word())
        };
        let width = |op: Op, bound: f64, name: &str| {
            let (v, b) = cmp(m.width_ms, op, bound);
            format!("width {v} ms {} {name} {b} ms", op.word())
        };
        let around = format!(
            "±{} % around {}",
            cmp(100.0 * m.jitter, Op::Eq, 0.0).0,
            fmt_ms(m.chosen_ms)
        );
        let slope = m.slope.unwrap_or(f64::NAN);
        match a.finding() {
            Finding::Jittered => format!(
                "{around} before attempt {k}: jittered ({}, {}; {who})",
                jitter(Op::Ge, cfg.pass_jitter, "pass_jitter"),
                width(Op::Ge, cfg.noise_floor_ms, "noise_floor_ms"),
            ),
            Finding::Small(SmallWhy::Narrow) => format!(
                "{around} before attempt {k}: proportional jitter, weaker than equal jitter ({}; \
                 {who})",
                jitter(Op::Lt, cfg.pass_jitter, "pass_jitter"),
            ),
            Finding::Small(SmallWhy::Shuffled) => {
                let (r, b) = cmp(m.order_corr, Op::Lt, group::SHUFFLED);
                format!(
                    "jitter too small to spread them: {who} came back before attempt {k} in an \
                     order their failures did not give (rank correlation of failure order and \
                     retry order {r} < {b}), but only {around} ({})",
                    jitter(Op::Lt, cfg.min_jitter, "min_jitter"),
                )
            }
            Finding::Undecided(UndecidedWhy::Noise) => format!(
                "undecided: {who} came back {around} before attempt {k} ({}), but narrower than \
                 the machine's timing noise ({}): on a delay this short a jitter and the noise \
                 look the same",
                jitter(Op::Ge, cfg.min_jitter, "min_jitter"),
                width(Op::Lt, cfg.noise_floor_ms, "noise_floor_ms"),
            ),
            Finding::Undecided(UndecidedWhy::Held) => {
                let (sv, sb) = cmp(slope, Op::Lt, group::HELD);
                format!(
                    "undecided: the retries of {who} arrived together whatever their failure \
                     times before attempt {k} (slope of arrival against failure time {sv} < {sb}; \
                     failures spread over {}, arrivals over {}): the client was held up and sent \
                     what fell due at once, so the spread it drew cannot be seen",
                    fmt_ms(m.failure_spread_ms),
                    fmt_ms(m.arrival_spread_ms),
                )
            }
            Finding::Undecided(UndecidedWhy::Paced) => {
                let (sv, sb) = cmp(slope, Op::Ge, group::PACED);
                format!(
                    "undecided: the client fell behind {who} (slope of arrival against failure \
                     time {sv} ≥ {sb}): its own pace spread the retries before attempt {k} over \
                     {}, and a jitter {} wide could hide in it",
                    fmt_ms(m.arrival_spread_ms),
                    fmt_ms(m.width_ms),
                )
            }
            Finding::Undecided(UndecidedWhy::Short) => {
                let (pw, floor) = cmp(
                    group::protected_width_ms(group::reference_ms(m), cfg),
                    Op::Lt,
                    cfg.noise_floor_ms,
                );
                format!(
                    "undecided: {who} waited {} before attempt {k}, spread {}: a jitter of \
                     ±{} % on so short a delay would be {pw} ms wide, < noise_floor_ms {floor} \
                     ms, and no less was measured than could hide it",
                    fmt_ms(group::reference_ms(m)),
                    fmt_ms(m.width_ms),
                    cmp(250.0 * cfg.min_jitter, Op::Eq, 0.0).0,
                )
            }
            Finding::NoJitter(NoJitterWhy::Ordered) => format!(
                "no jitter: {who} came back spread over {} before attempt {k}, but in the order of \
                 their failures (rank correlation of failure order and retry order {}); what the \
                 order does not explain is {around} ({}): the pace of handling responses, not a \
                 random wait",
                fmt_ms(m.p90_ms - m.p10_ms),
                format_args!("{:.2}", m.order_corr),
                jitter(Op::Lt, cfg.min_jitter, "min_jitter"),
            ),
            Finding::NoJitter(NoJitterWhy::Narrow) => format!(
                "no jitter: {who} all waited {} before attempt {k}, within {} (width {}); {:.0} % \
                 of those retries arrived within one {} ms window",
                fmt_ms(m.chosen_ms),
                jitter(Op::Lt, cfg.min_jitter, "min_jitter"),
                fmt_ms(m.width_ms),
                a.densest_fraction * 100.0,
                cfg.window_ms
            ),
            Finding::NoBackoff => format!(
                "no backoff: {who} came back {} (median) after each failure before attempt {k}, no \
                 later than before earlier attempts and from near zero: the pace of handling \
                 responses, not a backoff",
                fmt_ms(m.median_ms),
            ),
            Finding::Immediate => {
                let (c, b) = cmp(
                    m.chosen_ms.min(group::reference_ms(m)),
                    Op::Lt,
                    cfg.immediate_ms,
                );
                format!(
                    "immediate retries with no backoff: {who} waited {c} ms (the first failures' \
                     median, or the shortest wait of a client behind its failures) < immediate_ms \
                     {b} before attempt {k}, spread {}",
                    fmt_ms(m.width_ms),
                )
            }
        }
    }
}

/// A comparison a summary states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Lt,
    Ge,
    /// No comparison: just the value, to three significant digits.
    Eq,
}

impl Op {
    fn word(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Ge => "≥",
            Op::Eq => "=",
        }
    }
}

/// `value` and `bound` printed with the fewest decimals (at least what three significant digits
/// of the value need, at most 6) at which the printed numbers still compare as `op` says — so
/// that "±19.96 % < ±20 %" is never printed "±20.0 % < ±20 %".
fn cmp(value: f64, op: Op, bound: f64) -> (String, String) {
    let sig = |x: f64| -> usize {
        let a = x.abs();
        if a >= 100.0 || a == 0.0 {
            0
        } else if a >= 10.0 {
            1
        } else if a >= 1.0 {
            2
        } else {
            3
        }
    };
    let shown = |x: f64, d: usize| -> String {
        let s = format!("{x:.d$}");
        // Trailing zeros after the point say nothing.
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    let start = sig(value);
    for d in start..=6 {
        let (v, b) = (shown(value, d), shown(bound, d));
        let (pv, pb) = (v.parse::<f64>(), b.parse::<f64>());
        let holds = match (op, pv, pb) {
            (Op::Eq, _, _) => true,
            (Op::Lt, Ok(x), Ok(y)) => x < y,
            (Op::Ge, Ok(x), Ok(y)) => x >= y,
            _ => false,
        };
        if holds {
            return (v, shown(bound, d.min(sig(bound).max(d))));
        }
    }
    (format!("{value}"), format!("{bound}"))
}

/// Milliseconds to three significant digits.
fn fmt_ms(ms: f64) -> String {
    if !ms.is_finite() {
        return format!("{ms} ms");
    }
    let a = ms.abs();
    if a >= 100.0 {
        format!("{ms:.0} ms")
    } else if a >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

fn finding_name(f: Finding) -> &'static str {
    match f {
        Finding::Jittered => "jittered",
        Finding::Small(_) => "small_jitter",
        Finding::Undecided(_) => "undecided",
        Finding::NoJitter(_) => "no_jitter",
        Finding::NoBackoff => "no_backoff",
        Finding::Immediate => "immediate",
    }
}

impl Check for JitterCheck {
    fn name(&self) -> &'static str {
        "jitter"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        self.now_us = self.now_us.max(e.t_recv_us);
        if a.step.is_first_failure {
            self.join(e.t_recv_us);
        }
        self.sweep();
        let Some(ff) = a.step.first_failure_us else {
            return;
        };
        let Some((_, c)) = self.clusters.range_mut(..=ff).next_back() else {
            return;
        };
        if ff > c.end_us {
            return;
        }
        c.last_us = c.last_us.max(e.t_recv_us.max(e.t_done_us));
        if a.step.failed {
            c.failing.insert(a.step.op, e.t_done_us);
        } else {
            c.failing.remove(&a.step.op);
        }
        let (true, Some(delay)) = (a.is_retry(), a.delay_us()) else {
            return;
        };
        let g = c.groups.entry(a.index()).or_default();
        g.retries.push(Retry {
            failed_us: e.t_recv_us.saturating_sub(delay),
            failed_seq: a.previous().map_or(e.seq, |p| p.seq),
            arrived_us: e.t_recv_us,
            seq: e.seq,
        });
    }

    fn finish(mut self: Box<Self>, facts: &Facts) -> CheckResult {
        if let Some(s) = self.open.take() {
            self.seal(s);
        }
        let starts: Vec<u64> = self.clusters.keys().copied().collect();
        for start in starts {
            self.settle(start);
        }
        let analyses = std::mem::take(&mut self.analyses);
        let largest = self.largest;
        let mut findings = Findings::new(self.max_evidence);
        let mut ranked: Vec<&Analysis> = analyses.iter().collect();
        // Worst first (undecided groups after every decided one); within a finding, the
        // biggest crowd first.
        ranked.sort_by(|a, b| {
            b.decided()
                .cmp(&a.decided())
                .then(b.finding().cmp(&a.finding()))
                .then(b.n().cmp(&a.n()))
        });
        for a in ranked.iter().filter(|a| a.finding() != Finding::Jittered) {
            findings.push(self.describe(a, facts), None, a.densest_seqs.clone());
        }
        let decided: Vec<&Analysis> = analyses.iter().filter(|a| a.decided()).collect();
        let undecided = analyses.len() - decided.len();
        let retries: usize = decided.iter().map(|a| a.n()).sum();
        let jittered: Vec<family::Group> = decided
            .iter()
            .filter(|a| matches!(a.finding(), Finding::Jittered | Finding::Small(_)))
            .map(|a| family::Group {
                cluster_us: a.cluster_start_us,
                members: a.members,
                attempt: a.attempt,
                measure: &a.judged.measure,
            })
            .collect();
        let reading = family::read(&jittered);
        let (verdict, summary) = match ranked.first() {
            None if self.censored > 0 => (
                Verdict::Inconclusive,
                format!(
                    "not enough data: the run ended while operations that failed together were \
                     still retrying, so their later retries may be cut off and cannot tell a \
                     backoff from the pace of handling responses ({} attempt groups left out)",
                    self.censored
                ),
            ),
            None => (
                Verdict::Inconclusive,
                format!(
                    "not enough data: jitter needs {} retries of one attempt among operations \
                     that failed together; the largest group had {largest}",
                    self.cfg.min_samples
                ),
            ),
            Some(worst) if !worst.decided() => (
                Verdict::Inconclusive,
                format!(
                    "{} (every one of {} attempt groups is undecided)",
                    self.describe(worst, facts),
                    analyses.len()
                ),
            ),
            Some(worst)
                if matches!(
                    worst.finding(),
                    Finding::NoJitter(_) | Finding::NoBackoff | Finding::Immediate
                ) =>
            {
                (Verdict::Fail, self.describe(worst, facts))
            }
            Some(worst) if matches!(worst.finding(), Finding::Small(_)) => {
                (Verdict::Weak, self.describe(worst, facts))
            }
            Some(_) => {
                let lo = decided
                    .iter()
                    .map(|a| a.judged.measure.jitter)
                    .fold(f64::MAX, f64::min);
                let hi = decided
                    .iter()
                    .map(|a| a.judged.measure.jitter)
                    .fold(0.0, f64::max);
                let left_out = if undecided > 0 {
                    format!("; {undecided} undecided left out")
                } else {
                    String::new()
                };
                let (lo_shown, pass) = cmp(lo * 100.0, Op::Ge, self.cfg.pass_jitter * 100.0);
                let named = reading
                    .as_ref()
                    .map_or(String::new(), |r| format!("; {}: {}", r.named(), r.why()));
                (
                    Verdict::Pass,
                    format!(
                        "retries are jittered: ±{lo_shown} % to ±{:.0} % of the chosen delay (≥ \
                         pass_jitter ±{pass} %) over {} attempt groups ({retries} \
                         retries{left_out}){named}",
                        hi * 100.0,
                        decided.len()
                    ),
                )
            }
        };
        let groups: Vec<serde_json::Value> = ranked
            .iter()
            .take(self.max_evidence)
            .map(|a| {
                let m = &a.judged.measure;
                json!({
                    "cluster_start_s": facts.run_ms(a.cluster_start_us) / 1000.0,
                    "attempt": a.attempt,
                    "retries": m.n,
                    "median_delay_ms": m.median_ms,
                    "chosen_delay_ms": m.chosen_ms,
                    "jitter": m.jitter,
                    "width_ms": m.width_ms,
                    "global_width_ms": m.global_width_ms,
                    "local_width_ms": m.local_width_ms,
                    "failure_spread_ms": m.failure_spread_ms,
                    "arrival_spread_ms": m.arrival_spread_ms,
                    "order_correlation": m.order_corr,
                    "slope": m.slope,
                    "densest_window_fraction": a.densest_fraction,
                    "delays_in_one_window": a.wave_fraction,
                    "cluster_peak_to_mean": a.peak_to_mean,
                    "finding": finding_name(a.finding()),
                })
            })
            .collect();
        // The family: none for a herd, proportional for narrow jitter, else as the delays'
        // shape reads (`family`); none named when the check could not decide.
        let named = match verdict {
            Verdict::Fail => Some(family::Family::None),
            Verdict::Weak => Some(family::Family::Proportional),
            Verdict::Pass => reading.as_ref().map(|r| r.family),
            Verdict::Inconclusive => None,
        };
        let mut result = CheckResult::new("jitter", verdict, summary)
            .metric("groups", groups)
            .metric("groups_analyzed", decided.len() as u64)
            .metric("groups_undecided", undecided as u64)
            .metric("groups_cut_off", self.censored as u64)
            .metric("retries_analyzed", retries as u64);
        if let Some(f) = named {
            result = result.metric("family", f.name());
        }
        if let Some(r) = &reading {
            result = result.metric("first_retries_spread", r.spread);
            if let Some(a) = r.alternative.filter(|_| verdict == Verdict::Pass) {
                result = result.metric("family_alternative", a.name());
            }
            if let Some((w, _)) = r.widening {
                result = result.metric("spread_widening", w);
            }
        }
        if !decided.is_empty() {
            let lowest = decided
                .iter()
                .map(|a| a.judged.measure.jitter)
                .fold(f64::MAX, f64::min);
            let densest = decided
                .iter()
                .map(|a| a.densest_fraction)
                .fold(0.0, f64::max);
            let ptm = decided
                .iter()
                .filter_map(|a| a.peak_to_mean)
                .fold(0.0, f64::max);
            result = result
                .metric("lowest_jitter", lowest)
                .metric("highest_densest_window_fraction", densest)
                .metric("highest_peak_to_mean", ptm);
        }
        attach(result, findings)
    }
}

impl CheckSpec for JitterConfig {
    const NAME: &'static str = "jitter";
    const ABOUT: About = About {
        catches: "the thundering herd",
        how: "operations whose first failures cluster in time; per attempt index the retries read in the order of their failures: the jitter is the spread of the delays that the order does not explain (consecutive delays' differences), as ± a fraction of the delay the client chose. Full, equal, decorrelated jitter pass (at least `pass_jitter`, ±22 %); narrower proportional jitter from `min_jitter` (±8 %) up, gRPC's ±20 % among it, is weak; a spread that follows the failure order (a fleet handling its failures one after another) or under the noise floor is no jitter; a chosen delay under `immediate_ms`, or short delays that do not grow from attempt to attempt and start near zero, fail as no backoff at all. Undecided, and said why: retries released together whatever their failure times (a client held up), a client paced by its own handling, a width within the timing noise",
        evidence: "`min_samples` retries of one attempt index among operations that failed together",
        limits: "needs `min_samples` retries per group, else inconclusive; a client held up through its whole retry window (starved of CPU) after failures that came within a millisecond of each other sends its retries at one instant and reads as a herd; delays of about 10 ms on a busy machine are often undecided (their jitter is as wide as the timing noise); when the run ends while operations that failed together are still retrying, the later retries a backoff would make are cut off, so that cluster is not judged for backoff (its groups are left out, `groups_cut_off`)",
    };

    fn scale(&mut self, f: f64) {
        scale_ms(&mut self.together_ms, f);
        scale_ms(&mut self.window_ms, f);
    }

    fn validate(&self) -> Result<(), Invalid> {
        non_negative("min_jitter", self.min_jitter)?;
        non_negative("noise_floor_ms", self.noise_floor_ms)?;
        non_negative("immediate_ms", self.immediate_ms)?;
        if self.pass_jitter < self.min_jitter || !self.pass_jitter.is_finite() {
            return Err(Invalid::new(
                "pass_jitter",
                format!(
                    "{}; give a fraction at least min_jitter ({})",
                    self.pass_jitter, self.min_jitter
                ),
            ));
        }
        Ok(())
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(JitterCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::Entry;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    use verdict::{CheckResult, Verdict};

    use super::{cmp, Op};
    use crate::testutil::{entry, in_arrival_order, run_one};

    /// `clients` operations failing together at t≈0 (one 503 each, 2 µs apart plus up to 1 ms),
    /// each retrying `retries` times with `delay(rng, k, prev)` ms before retry k (1-based) — a
    /// draw of its own, as parallel clients' waits are; every attempt fails but the last, which
    /// creates the order. Timing noise of 0.1–2 ms is added to every wait.
    fn herd(
        clients: u32,
        retries: u32,
        seed: u64,
        mut delay: impl FnMut(&mut StdRng, u32, f64) -> f64,
    ) -> Vec<Entry> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut j = Vec::new();
        for c in 0..clients {
            let key = format!("k{c}");
            let mut t = c as f64 * 0.002 + rng.random::<f64>();
            let mut prev = 0.0;
            for k in 0..=retries {
                let e = entry(0, t).key(&key).took(1);
                let e = if k == retries {
                    e.created(&format!("o{c}"))
                } else {
                    e.status(503)
                };
                j.push(e.build());
                let d = delay(&mut rng, k + 1, prev);
                prev = d;
                let noise = 0.1 + rng.random::<f64>() * 1.9;
                t += 1.0 + d + noise;
            }
        }
        in_arrival_order(j)
    }

    /// `clients` operations on one event loop: their failures are handled one after another
    /// (`handling` ms each), in the order they ended, and each is retried `wait(rng, k)` ms after
    /// it was handled, up to `retries` times; the last attempt creates the order.
    fn event_loop(
        clients: u32,
        retries: u32,
        seed: u64,
        handling: f64,
        mut wait: impl FnMut(&mut StdRng, u32) -> f64,
    ) -> Vec<Entry> {
        let mut rng = StdRng::seed_from_u64(seed);
        // Each operation's attempts: (arrival, took).
        let mut arrivals: Vec<f64> = (0..clients).map(|c| c as f64 * 0.05).collect();
        let mut j = Vec::new();
        for k in 0..=retries {
            let mut order: Vec<usize> = (0..clients as usize).collect();
            order.sort_by(|&a, &b| arrivals[a].total_cmp(&arrivals[b]));
            let mut handled = f64::NEG_INFINITY;
            let mut next = arrivals.clone();
            for i in order {
                let key = format!("k{i}");
                let e = entry(0, arrivals[i]).key(&key).took(1);
                let e = if k == retries {
                    e.created(&format!("o{i}"))
                } else {
                    e.status(503)
                };
                j.push(e.build());
                let failed = arrivals[i] + 1.0;
                handled = failed.max(handled) + handling * (0.5 + rng.random::<f64>());
                next[i] = handled + wait(&mut rng, k + 1);
            }
            arrivals = next;
        }
        in_arrival_order(j)
    }

    fn backoff(k: u32) -> f64 {
        1000.0 * f64::powi(2.0, k as i32 - 1)
    }

    fn lowest_jitter(r: &CheckResult) -> f64 {
        r.metrics["lowest_jitter"].as_f64().unwrap_or(f64::NAN)
    }

    #[test]
    fn fails_plain_exponential_backoff() {
        let j = herd(100, 4, 1, |_, k, _| backoff(k));
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.starts_with("no jitter"), "{}", r.summary);
        assert_eq!(r.metrics["family"], "none");
        assert!(lowest_jitter(&r) < 0.01, "{}", lowest_jitter(&r));
        assert!(r.metrics["highest_densest_window_fraction"].as_f64() >= Some(0.99));
        assert_eq!(r.evidence[0].seqs.len(), 10);
    }

    #[test]
    fn fails_immediate_retries_with_its_own_message() {
        let j = herd(50, 3, 2, |_, _, _| 0.0);
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(r.summary.starts_with("immediate retries"), "{}", r.summary);
        assert!(r.summary.contains("< immediate_ms 5"), "{}", r.summary);
    }

    #[test]
    fn passes_full_equal_and_decorrelated_jitter() {
        let full = herd(200, 4, 3, |rng, k, _| rng.random::<f64>() * backoff(k));
        let r = run_one("jitter", "{}", &full);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert!(lowest_jitter(&r) > 0.6, "full {}", lowest_jitter(&r));
        assert_eq!(r.metrics["family"], "full", "{}", r.summary);
        assert!(r.summary.contains("; full jitter: "), "{}", r.summary);

        let equal = herd(200, 4, 4, |rng, k, _| {
            backoff(k) / 2.0 + rng.random::<f64>() * backoff(k) / 2.0
        });
        let r = run_one("jitter", "{}", &equal);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert!(lowest_jitter(&r) >= 0.25, "equal {}", lowest_jitter(&r));
        assert_eq!(r.metrics["family"], "equal", "{}", r.summary);

        // min(cap, U(base, prev * 3)), with a cap most late delays hit.
        let decorrelated = herd(200, 5, 5, |rng, _, prev| {
            let prev = prev.max(1000.0);
            (1000.0 + rng.random::<f64>() * (prev * 3.0 - 1000.0)).min(4000.0)
        });
        let r = run_one("jitter", "{}", &decorrelated);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        // Capped that low, its floor and ceiling no longer part: named by the first draw's width.
        assert_eq!(r.metrics["family"], "proportional", "{}", r.summary);
        // With a cap out of reach, the ceiling grows from the floor: decorrelated.
        let decorrelated = herd(200, 3, 5, |rng, _, prev| {
            let prev = prev.max(1000.0);
            (1000.0 + rng.random::<f64>() * (prev * 3.0 - 1000.0)).min(60_000.0)
        });
        let r = run_one("jitter", "{}", &decorrelated);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["family"], "decorrelated", "{}", r.summary);
        assert!(
            r.summary.contains("; decorrelated jitter: "),
            "{}",
            r.summary
        );
    }

    /// gRPC's own jitter: grpcio and grpc-js wait the backoff × U(0.8, 1.2). That is jitter,
    /// narrower than equal jitter: weak, never no jitter, at any of the initial backoffs gRPC's
    /// guides use, and the summary says what was measured.
    #[test]
    fn grpc_proportional_jitter_is_weak_never_no_jitter() {
        for (i, base) in [100.0, 200.0, 500.0, 1000.0].into_iter().enumerate() {
            for seed in 0..25 {
                let j = herd(20, 2, 1000 + 100 * i as u64 + seed, |rng, k, _| {
                    base * f64::powi(2.0, k as i32 - 1) * (0.8 + 0.4 * rng.random::<f64>())
                });
                let r = run_one("jitter", "{}", &j);
                assert_ne!(
                    r.verdict,
                    Verdict::Fail,
                    "{base} ms, seed {seed}: {}",
                    r.summary
                );
                if r.verdict == Verdict::Weak {
                    assert!(
                        r.summary
                            .contains("proportional jitter, weaker than equal jitter"),
                        "{}",
                        r.summary
                    );
                }
            }
        }
        let j = herd(20, 2, 7, |rng, k, _| {
            100.0 * f64::powi(2.0, k as i32 - 1) * (0.8 + 0.4 * rng.random::<f64>())
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        assert!(r.summary.contains(" around 1"), "{}", r.summary);
        assert!(r.summary.contains("< pass_jitter ±22 %"), "{}", r.summary);
        assert_eq!(r.metrics["family"], "proportional");
    }

    #[test]
    fn small_additive_jitter_is_weak_and_shrinks_to_none_as_the_backoff_grows() {
        // 0–600 ms added to a 1 s doubling backoff: ±23 % around 1.3 s, ±13 % around 2.3 s.
        let j = herd(100, 2, 6, |rng, k, _| {
            backoff(k) + rng.random::<f64>() * 600.0
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        assert!(r.passed());
        assert!(
            r.summary.contains("weaker than equal jitter"),
            "{}",
            r.summary
        );
        // The thresholds are configurable: a noise floor above the spread calls it no jitter,
        // a narrower pass_jitter lets it pass.
        let r = run_one(
            "jitter",
            "{ noise_floor_ms: 2000, min_jitter: 0.3, pass_jitter: 0.3 }",
            &j,
        );
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        let r = run_one("jitter", "{ pass_jitter: 0.1 }", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        // The same 0–600 ms on the 4 s wait before attempt 4 is ±7 % of it: no jitter.
        let j = herd(100, 3, 6, |rng, k, _| {
            backoff(k) + rng.random::<f64>() * 600.0
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("before attempt 4"), "{}", r.summary);
    }

    /// A fleet on one event loop that waits a fixed 50 ms: each failure is handled after the
    /// responses before it, so the retries come back spread over a hundred milliseconds — as
    /// wide as full jitter on so short a delay — but in the order of their failures: no jitter.
    /// With no wait at all, its first retries came back within a few milliseconds: immediate.
    #[test]
    fn a_fleet_retrying_at_the_pace_of_its_event_loop_is_no_jitter() {
        for seed in 0..20 {
            let j = event_loop(50, 1, 100 + seed, 3.0, |_, _| 50.0);
            let r = run_one("jitter", "{}", &j);
            assert_eq!(r.verdict, Verdict::Fail, "seed {seed}: {}", r.summary);
            assert!(
                r.summary.contains("in the order of their failures"),
                "{}",
                r.summary
            );
            let g = &r.metrics["groups"][0];
            assert!(g["global_width_ms"].as_f64() > Some(50.0), "{g}");
            assert!(g["order_correlation"].as_f64() > Some(0.9), "{g}");
            let j = event_loop(50, 1, 100 + seed, 3.0, |_, _| 0.0);
            let r = run_one("jitter", "{}", &j);
            assert_eq!(r.verdict, Verdict::Fail, "seed {seed}: {}", r.summary);
            assert!(r.summary.starts_with("immediate retries"), "{}", r.summary);
        }
        // The same loop waiting a fixed 300 ms: no jitter either.
        let r = run_one("jitter", "{}", &event_loop(50, 2, 7, 0.8, |_, _| 300.0));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        // And with a real jitter drawn per retry, the same loop passes.
        let r = run_one(
            "jitter",
            "{}",
            &event_loop(50, 2, 8, 0.8, |rng, k| rng.random::<f64>() * backoff(k)),
        );
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    /// Random-looking short delays that do not grow from attempt to attempt and start near zero
    /// (a fleet whose handling happens to look random) are no backoff; jitter that grows with
    /// the attempts is a backoff, however short its base.
    #[test]
    fn short_delays_that_do_not_grow_are_no_backoff() {
        let j = herd(50, 3, 10, |rng, _, _| rng.random::<f64>() * 50.0);
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.starts_with("no backoff"), "{}", r.summary);
        assert_eq!(r.metrics["groups"][0]["finding"], "no_backoff");
        // Shrinking as the crowd thins: no backoff either.
        let j = herd(50, 3, 14, |rng, k, _| {
            rng.random::<f64>() * (150.0 - 45.0 * k as f64)
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.starts_with("no backoff"), "{}", r.summary);
        // Growing: a backoff.
        let j = herd(50, 3, 11, |rng, k, _| {
            rng.random::<f64>() * 100.0 * f64::powi(2.0, k as i32 - 1)
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        // A fixed wait the client chose with a proportional jitter does not start near zero: it
        // is a backoff, if a flat one, and its jitter is judged as jitter.
        let j = herd(40, 3, 12, |rng, _, _| {
            100.0 * (0.8 + 0.4 * rng.random::<f64>())
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
    }

    /// The end of the run cuts a backing-off client's last retries short: those still to come
    /// are the slow ones, and the ones kept look like the pace of handling. That is no evidence
    /// either way: the groups are left out, not failed as no backoff — and a fleet that does
    /// not back off, cut the same way, is not passed either.
    #[test]
    fn retries_cut_off_by_the_end_of_the_run_are_not_judged_for_backoff() {
        let cut = |j: Vec<Entry>, ms: u64| -> Vec<Entry> {
            j.into_iter().filter(|e| e.t_recv_us < ms * 1000).collect()
        };
        let backing_off = herd(50, 3, 11, |rng, k, _| {
            rng.random::<f64>() * 100.0 * f64::powi(2.0, k as i32 - 1)
        });
        let r = run_one("jitter", "{}", &backing_off);
        assert_eq!(r.verdict, Verdict::Pass, "whole: {}", r.summary);
        // Retries 1 to 3 wait up to 100, 200 and 400 ms.
        let r = run_one("jitter", "{}", &cut(backing_off, 150));
        assert_ne!(r.verdict, Verdict::Fail, "cut: {}", r.summary);
        assert!(
            r.metrics["groups_cut_off"].as_u64() > Some(0),
            "{:?}",
            r.metrics
        );

        let fleet = herd(50, 3, 10, |rng, _, _| rng.random::<f64>() * 50.0);
        let r = run_one("jitter", "{}", &cut(fleet, 95));
        assert_ne!(r.verdict, Verdict::Pass, "cut: {}", r.summary);
    }

    /// Full jitter on a small base spreads the retries over 0–100 ms: all within one window,
    /// and a spread a fleet's handling could make, but drawn per retry, not in the order of the
    /// failures: jittered.
    #[test]
    fn full_jitter_on_a_small_base_passes() {
        for seed in 0..20 {
            let j = herd(50, 1, 200 + seed, |rng, _, _| {
                rng.random::<f64>() * 100.0 + 2.0 + rng.random::<f64>() * 10.0
            });
            let r = run_one("jitter", "{}", &j);
            assert_eq!(r.verdict, Verdict::Pass, "seed {seed}: {}", r.summary);
            assert_eq!(r.metrics["highest_densest_window_fraction"], 1.0);
        }
    }

    /// A client held up (starved of CPU) sends every retry that fell due meanwhile at once:
    /// whatever it drew, they arrive together, whatever their failure times. Undecided, not a
    /// herd — while the same release after failures a millisecond apart cannot be told from a
    /// herd at all.
    #[test]
    fn retries_released_together_after_a_stall_are_undecided() {
        // 40 failures 1 ms apart, full jitter on 100 ms drawn, all sent at t = 300 ms.
        let mut j = Vec::new();
        for c in 0..40u32 {
            let key = format!("k{c}");
            j.push(entry(0, c as f64).key(&key).took(1).status(503).build());
            j.push(
                entry(0, 300.0 + c as f64 * 0.01)
                    .key(&key)
                    .took(1)
                    .created(&format!("o{c}"))
                    .build(),
            );
        }
        let r = run_one("jitter", "{}", &in_arrival_order(j));
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert!(r.summary.contains("held up"), "{}", r.summary);
        assert_eq!(r.metrics["groups_undecided"], 1);
    }

    /// Delays so short that the narrowest jitter the check must not fail would be narrower than
    /// the timing noise are undecided, and say so.
    #[test]
    fn a_jitter_under_the_noise_floor_is_undecided() {
        // ±20 % on 10 ms: 8–12 ms.
        let j = herd(40, 1, 21, |rng, _, _| 8.0 + 4.0 * rng.random::<f64>());
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert!(r.summary.starts_with("undecided"), "{}", r.summary);
        assert!(r.summary.contains("noise"), "{}", r.summary);
    }

    /// Each finding names the reading that decided it, and every comparison it states holds as
    /// printed.
    #[test]
    fn findings_name_the_reading_that_decided_and_state_true_comparisons() {
        let r = run_one("jitter", "{}", &herd(50, 1, 18, |_, _, _| 0.0));
        assert!(r.summary.contains("< immediate_ms 5"), "{}", r.summary);
        let r = run_one("jitter", "{}", &herd(50, 1, 17, |_, _, _| 1000.0));
        assert!(r.summary.contains("< min_jitter ±8 %"), "{}", r.summary);
        let r = run_one("jitter", "{}", &event_loop(50, 1, 19, 3.0, |_, _| 50.0));
        assert!(r.summary.contains("rank correlation"), "{}", r.summary);
        // The printed comparisons hold: values at a bound are printed with the decimals that
        // keep them on their side of it.
        assert_eq!(cmp(19.96, Op::Lt, 20.0), ("19.96".into(), "20".into()));
        assert_eq!(cmp(22.0, Op::Ge, 22.0), ("22".into(), "22".into()));
        assert_eq!(cmp(7.999, Op::Lt, 8.0), ("7.999".into(), "8".into()));
        assert_eq!(cmp(0.4999, Op::Lt, 0.5), ("0.4999".into(), "0.5".into()));
        for seed in 0..40u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let (v, b) = (rng.random::<f64>() * 40.0, rng.random::<f64>() * 40.0);
            let op = if v < b { Op::Lt } else { Op::Ge };
            let (sv, sb) = cmp(v, op, b);
            let (pv, pb): (f64, f64) = (sv.parse().expect("v"), sb.parse().expect("b"));
            assert!(
                if op == Op::Lt { pv < pb } else { pv >= pb },
                "{v} {b}: {sv} {sb}"
            );
        }
    }

    #[test]
    fn too_few_retries_is_inconclusive() {
        let j = herd(10, 3, 7, |_, k, _| backoff(k));
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert!(r.summary.contains("not enough data"), "{}", r.summary);
        assert!(r.summary.contains("had 10"), "{}", r.summary);
        // Enough with a lower bar.
        assert_eq!(
            run_one("jitter", "{ min_samples: 5 }", &j).verdict,
            Verdict::Fail
        );
    }

    #[test]
    fn incidents_far_apart_are_judged_as_the_journal_streams() {
        // Two incidents 100 s apart; with a 20 s horizon the first is judged (and its samples
        // dropped) long before the second. The worst decides: the jittered one does not hide
        // the unjittered one.
        let first = herd(50, 4, 8, |_, k, _| backoff(k));
        let mut second = herd(50, 4, 9, |rng, k, _| rng.random::<f64>() * backoff(k));
        for e in &mut second {
            e.t_recv_us += 100_000_000;
            e.t_done_us += 100_000_000;
        }
        let j = in_arrival_order(first.into_iter().chain(second).collect());
        let cfg = crate::ChecksConfig::from_yaml("grouping: { horizon_ms: 20000 }\njitter: {}")
            .expect("valid");
        let r = crate::run_checks(&cfg, &j).remove(0);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["groups_analyzed"], 8);
        assert_eq!(r.metrics["groups"][0]["finding"], "no_jitter");
    }

    #[test]
    fn borderline_a_trickle_of_failures_is_not_a_herd() {
        // Fixed 1 s retries after failures 20 ms apart: at most 13 first failures share any
        // 250 ms, under the 20 a group needs, so no cluster is judged. 2 ms apart, they are a herd.
        let trickle = |gap_ms: f64| {
            let mut j = Vec::new();
            for c in 0..100u32 {
                let t = c as f64 * gap_ms;
                j.push(entry(0, t).key(&format!("k{c}")).status(503).build());
                j.push(entry(0, t + 1001.0).key(&format!("k{c}")).build());
            }
            in_arrival_order(j)
        };
        let r = run_one("jitter", "{}", &trickle(20.0));
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        let r = run_one("jitter", "{}", &trickle(2.0));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
    }
}
