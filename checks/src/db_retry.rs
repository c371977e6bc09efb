//! `db_retry`: how a service retries its own database transactions.
//!
//! Why: PostgreSQL tells a client when a transaction may simply be run again —
//! `40001` serialization_failure, `40P01` deadlock_detected, `57P01` admin_shutdown, a connection
//! lost before the transaction ended — and when running it again cannot help: `23505`
//! unique_violation, class `22` (data exceptions), class `42` (syntax and access). After a
//! transient error the database has rolled the whole transaction back, so a service that
//! re-runs only the statement that failed runs it without the ones before it (or in a failed
//! block, where it fails again); it must run the whole transaction again, after a backoff (a
//! deadlock retried at once meets the same deadlock). After a permanent error it must not retry
//! at all: the seed's rule, one layer down — retry deadlocks and throttling, never validation
//! errors.
//!
//! What the journal shows: the statements a PostgreSQL-aware proxy read, each with its
//! connection and transaction number, its text, a digest of its parameters, its SQLSTATE, and
//! whether its transaction committed. A transaction's *work* is its statements other than
//! `BEGIN`, `COMMIT`, `ROLLBACK` and savepoints. A later transaction (on any connection, within
//! `window_ms`) is a retry of a failed one when its work starts as the failed one's did, up to
//! the statement that failed (the same texts, with the same parameters unless
//! `match_parameters: false`): a whole retry. One whose work starts with the failed statement
//! alone, when other statements came before it, re-ran only the failed statement. When the
//! journal also holds the service's own HTTP requests (the fault server in front of it), the
//! request that held the failed transaction and its retry — the one request whose span contains
//! both — must have been answered with a success.
//!
//! Metrics: `transient_failures`, `permanent_failures`, `retried_whole`, `retried_partly`,
//! `not_retried`, `without_backoff`, `permanent_retried`, `client_failed`, `cut_off`.

use std::collections::{BTreeMap, VecDeque};

use history::{Entry, Facts, Outcome, TxControl};
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{scale_ms, About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// Configuration of the `db_retry` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DbRetryConfig {
    /// SQLSTATEs after which the whole transaction must be run again; `40*` is a class.
    pub transient: Vec<String>,
    /// SQLSTATEs after which the transaction must not be run again; `22*` is a class.
    pub permanent: Vec<String>,
    /// A connection lost before its transaction ended (its statement unanswered) is transient.
    pub connection_lost: bool,
    /// The shortest wait from a failure to its retry that counts as a backoff.
    pub min_backoff_ms: u64,
    /// How long after a failure a retry may begin; a transient failure with no retry by then
    /// was not retried (one the journal ends sooner after is `cut_off`, not judged).
    pub window_ms: u64,
    /// Compare the statements' parameters (their digests) as well as their texts, so that the
    /// same statement for another order is no retry.
    pub match_parameters: bool,
}

impl Default for DbRetryConfig {
    fn default() -> Self {
        DbRetryConfig {
            transient: vec!["40001".into(), "40P01".into(), "57P01".into()],
            permanent: vec!["23505".into(), "22*".into(), "42*".into()],
            connection_lost: true,
            min_backoff_ms: 10,
            window_ms: 10_000,
            match_parameters: true,
        }
    }
}

fn code_matches(patterns: &[String], code: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => code.starts_with(prefix),
        None => p == code,
    })
}

/// A statement as a retry compares it: text and, when asked, parameters.
type Work = (String, Option<String>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Transient,
    Permanent,
}

/// A transaction as the journal showed it so far.
#[derive(Debug, Clone)]
struct Tx {
    conn: u64,
    tx: u64,
    first_seq: u64,
    t_start_us: u64,
    t_end_us: u64,
    work: Vec<Work>,
    /// The first failure: its kind, where in the work it came (the work done up to it), its
    /// seq, when it was answered, and how (`40001`, `connection lost`).
    failure: Option<(Failure, usize, u64, u64, String)>,
    ended: bool,
}

/// A failed transaction waiting for its retry.
#[derive(Debug, Clone)]
struct Pending {
    tx: Tx,
}

/// The service's own HTTP request, as far as telling its client's fate needs it.
#[derive(Debug, Clone)]
struct Request {
    seq: u64,
    t_recv_us: u64,
    t_done_us: u64,
    status: Option<u16>,
    answered: bool,
}

/// The `db_retry` check.
pub(crate) struct DbRetryCheck {
    cfg: DbRetryConfig,
    horizon_us: u64,
    open: BTreeMap<(u64, u64), Tx>,
    pending: VecDeque<Pending>,
    requests: VecDeque<Request>,
    judged_requests: VecDeque<u64>,
    last_us: u64,
    findings: Findings,
    transient_failures: u64,
    permanent_failures: u64,
    retried_whole: u64,
    retried_partly: u64,
    not_retried: u64,
    without_backoff: u64,
    permanent_retried: u64,
    client_failed: u64,
    cut_off: u64,
}

impl DbRetryCheck {
    fn observe_statement(&mut self, e: &Entry) {
        let Some(s) = e.postgres() else { return };
        if s.startup || s.violation.is_some() {
            return;
        }
        let key = (e.conn_id, s.tx);
        // A connection's next transaction ends its earlier ones.
        let earlier: Vec<(u64, u64)> = self
            .open
            .range((e.conn_id, 0)..(e.conn_id, s.tx))
            .map(|(k, _)| *k)
            .collect();
        for k in earlier {
            if let Some(t) = self.open.remove(&k) {
                self.close(t);
            }
        }
        let tx = self.open.entry(key).or_insert_with(|| Tx {
            conn: e.conn_id,
            tx: s.tx,
            first_seq: e.seq,
            t_start_us: e.t_recv_us,
            t_end_us: e.t_done_us,
            work: Vec::new(),
            failure: None,
            ended: false,
        });
        tx.t_end_us = tx.t_end_us.max(e.t_done_us);
        let control = s.control.is_some_and(|c| c != TxControl::Prepare);
        if !control {
            let params = if self.cfg.match_parameters {
                s.params.clone()
            } else {
                None
            };
            tx.work
                .push((s.statement.clone().unwrap_or_default(), params));
        }
        if tx.failure.is_none() {
            let lost = !matches!(e.outcome, Outcome::Responded);
            let failure = match s.sqlstate.as_deref() {
                Some(code) if code_matches(&self.cfg.transient, code) => {
                    Some((Failure::Transient, code.to_string()))
                }
                Some(code) if code_matches(&self.cfg.permanent, code) => {
                    Some((Failure::Permanent, code.to_string()))
                }
                _ if lost && self.cfg.connection_lost => Some((
                    Failure::Transient,
                    format!("connection lost ({})", e.outcome.as_str()),
                )),
                _ => None,
            };
            if let Some((kind, how)) = failure {
                let at = tx.work.len();
                tx.failure = Some((kind, at, e.seq, e.t_done_us, how));
            }
        }
        if s.committed.is_some() || !matches!(e.outcome, Outcome::Responded) {
            tx.ended = true;
        }
        if tx.ended {
            if let Some(t) = self.open.remove(&key) {
                self.close(t);
            }
        }
    }

    /// A transaction is over: it answers the failures waiting for a retry, and waits for one
    /// itself when it failed.
    fn close(&mut self, t: Tx) {
        if t.work.is_empty() {
            return;
        }
        let mut resolved = Vec::new();
        let mut spans = Vec::new();
        for (i, p) in self.pending.iter().enumerate() {
            let f = &p.tx;
            let Some((kind, at, seq, t_fail, how)) = &f.failure else {
                continue;
            };
            if t.t_start_us < *t_fail || (f.conn, f.tx) == (t.conn, t.tx) {
                continue;
            }
            let failed_part = &f.work[..(*at).min(f.work.len())];
            let Some(failed_stmt) = failed_part.last() else {
                continue;
            };
            let n = failed_part.len().min(t.work.len());
            let whole = t.work[..n] == failed_part[..n] && t.work[0] == failed_part[0];
            let partly = !whole && failed_part.len() > 1 && t.work[0] == *failed_stmt;
            if !(whole || partly) {
                continue;
            }
            let gap_us = t.t_start_us.saturating_sub(*t_fail);
            let what = |t: &Tx| format!("transaction {} of connection {}", t.tx, t.conn);
            match kind {
                Failure::Permanent => {
                    self.permanent_retried += 1;
                    self.findings.push(
                        format!(
                            "{} failed with {how} (seq {seq}), which retrying cannot fix, and was run again as {} (seq {})",
                            what(f),
                            what(&t),
                            t.first_seq
                        ),
                        None,
                        vec![*seq, t.first_seq],
                    );
                }
                Failure::Transient if partly => {
                    self.retried_partly += 1;
                    self.findings.push(
                        format!(
                            "{} failed with {how} (seq {seq}) after {} statements; only the failed statement was run again, in {} (seq {}), without the ones before it",
                            what(f),
                            failed_part.len() - 1,
                            what(&t),
                            t.first_seq
                        ),
                        None,
                        vec![*seq, t.first_seq],
                    );
                }
                Failure::Transient => {
                    self.retried_whole += 1;
                    if gap_us < self.cfg.min_backoff_ms.saturating_mul(1000) {
                        self.without_backoff += 1;
                        self.findings.push(
                            format!(
                                "{} failed with {how} (seq {seq}) and was run again {:.1} ms later (seq {}): no backoff (at least {} ms)",
                                what(f),
                                gap_us as f64 / 1000.0,
                                t.first_seq,
                                self.cfg.min_backoff_ms
                            ),
                            None,
                            vec![*seq, t.first_seq],
                        );
                    }
                }
            }
            spans.push((f.t_start_us, t.t_end_us, *seq));
            resolved.push(i);
        }
        for (from, to, seq) in spans {
            self.judge_client(from, to, seq);
        }
        for i in resolved.into_iter().rev() {
            self.pending.remove(i);
        }
        if let Some((kind, ..)) = &t.failure {
            match kind {
                Failure::Transient => self.transient_failures += 1,
                Failure::Permanent => self.permanent_failures += 1,
            }
            self.pending.push_back(Pending { tx: t });
        }
    }

    /// The service's request that held a failed transaction and its retry: its client must have
    /// got a success. Judged once per request, and only when exactly one request spans both.
    fn judge_client(&mut self, from_us: u64, to_us: u64, failed_seq: u64) {
        let mut spanning = self
            .requests
            .iter()
            .filter(|r| r.t_recv_us <= from_us && r.t_done_us >= to_us);
        let (Some(r), None) = (spanning.next(), spanning.next()) else {
            return;
        };
        if self.judged_requests.contains(&r.seq) {
            return;
        }
        self.judged_requests.push_back(r.seq);
        if self.judged_requests.len() > 10_000 {
            self.judged_requests.pop_front();
        }
        let ok = r.answered && r.status.is_some_and(|s| s < 400);
        if !ok {
            self.client_failed += 1;
            let got = r
                .status
                .map_or_else(|| "no answer".to_string(), |s| format!("{s}"));
            self.findings.push(
                format!(
                    "the service's request (seq {}) that held the failed transaction (seq {failed_seq}) and its retry answered its client {got}",
                    r.seq
                ),
                None,
                vec![failed_seq, r.seq],
            );
        }
    }

    /// Failures whose window passed with no retry; requests and transactions gone idle.
    fn expire(&mut self, now_us: u64) {
        let window_us = self.cfg.window_ms.saturating_mul(1000);
        while let Some(p) = self.pending.front() {
            let Some((kind, _, seq, t_fail, how)) = &p.tx.failure else {
                self.pending.pop_front();
                continue;
            };
            if now_us < t_fail.saturating_add(window_us) {
                break;
            }
            if *kind == Failure::Transient {
                self.not_retried += 1;
                self.findings.push(
                    format!(
                        "transaction {} of connection {} failed with {how} (seq {seq}) and was not run again within {} ms",
                        p.tx.tx, p.tx.conn, self.cfg.window_ms
                    ),
                    None,
                    vec![*seq],
                );
            }
            self.pending.pop_front();
        }
        let horizon = self.horizon_us.max(window_us);
        while self
            .requests
            .front()
            .is_some_and(|r| r.t_done_us.saturating_add(horizon) < now_us)
        {
            self.requests.pop_front();
        }
        let idle: Vec<(u64, u64)> = self
            .open
            .iter()
            .filter(|(_, t)| t.t_end_us.saturating_add(horizon) < now_us)
            .map(|(k, _)| *k)
            .collect();
        for k in idle {
            if let Some(t) = self.open.remove(&k) {
                self.close(t);
            }
        }
    }
}

impl Check for DbRetryCheck {
    fn name(&self) -> &'static str {
        DbRetryConfig::NAME
    }

    fn reads_protocol(&self) -> bool {
        true
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        self.last_us = self.last_us.max(e.t_recv_us);
        if e.postgres().is_some() {
            self.observe_statement(e);
        } else if !e.is_protocol() {
            self.requests.push_back(Request {
                seq: e.seq,
                t_recv_us: e.t_recv_us,
                t_done_us: e.t_done_us,
                status: e.status,
                answered: e.answered(),
            });
        }
        self.expire(e.t_recv_us);
    }

    fn finish(mut self: Box<Self>, _facts: &Facts) -> CheckResult {
        let open: Vec<Tx> = std::mem::take(&mut self.open).into_values().collect();
        for t in open {
            self.close(t);
        }
        self.expire(self.last_us);
        self.cut_off = self
            .pending
            .iter()
            .filter(|p| matches!(p.tx.failure, Some((Failure::Transient, ..))))
            .count() as u64;
        let failures = self.transient_failures + self.permanent_failures;
        let judged = failures - self.cut_off;
        let (verdict, summary) = if let Some(first) = self.findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} wrong retries of {failures} failed transactions; first: {first}",
                    self.findings.total()
                ),
            )
        } else if failures == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no journaled transaction failed with a transient or a permanent error".to_string(),
            )
        } else if judged == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: {} transient failures came less than {} ms before the journal ended",
                    self.cut_off, self.cfg.window_ms
                ),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "{} transient failures were run again whole after a backoff, {} permanent ones were not retried",
                    self.retried_whole, self.permanent_failures
                ),
            )
        };
        let result = CheckResult::new(DbRetryConfig::NAME, verdict, summary)
            .metric("transient_failures", self.transient_failures)
            .metric("permanent_failures", self.permanent_failures)
            .metric("retried_whole", self.retried_whole)
            .metric("retried_partly", self.retried_partly)
            .metric("not_retried", self.not_retried)
            .metric("without_backoff", self.without_backoff)
            .metric("permanent_retried", self.permanent_retried)
            .metric("client_failed", self.client_failed)
            .metric("cut_off", self.cut_off);
        attach(result, self.findings)
    }
}

impl CheckSpec for DbRetryConfig {
    const NAME: &'static str = "db_retry";
    const ABOUT: About = About {
        catches: "a service that retries a database transaction wrongly: only the failed statement, at once, not at all, or after an error retrying cannot fix",
        how: "from the statements a PostgreSQL-aware proxy journaled: after a transient failure (`transient`: 40001, 40P01, 57P01; a connection lost before the transaction ended) a later transaction must start with the failed one's statements up to the failure (same texts and parameter digests) after `min_backoff_ms`, within `window_ms`; one that starts with the failed statement alone re-ran only it; after a permanent one (`permanent`: 23505, class 22, class 42) no such transaction may follow; where the journal holds the service's own HTTP request spanning both, it must have answered 2xx or 3xx",
        evidence: "a journaled transaction failed with a listed SQLSTATE or lost its connection, at least `window_ms` before the journal ended",
        limits: "a retry is recognized by its statements' texts and parameter digests: a service that draws new values per attempt (a fresh UUID) needs `match_parameters: false`, and then concurrent transactions of the same shape can pass for retries; the client's answer is judged only where exactly one of the service's requests spans the failure and its retry",
    };

    fn scale(&mut self, f: f64) {
        scale_ms(&mut self.window_ms, f);
    }

    fn validate(&self) -> Result<(), Invalid> {
        if self.window_ms == 0 {
            return Err(Invalid::new("window_ms", "expected a window above 0 ms"));
        }
        for (field, codes) in [
            ("transient", &self.transient),
            ("permanent", &self.permanent),
        ] {
            for (i, c) in codes.iter().enumerate() {
                let body = c.strip_suffix('*').unwrap_or(c);
                let ok = (c.ends_with('*') && !body.is_empty() && body.len() < 5
                    || body.len() == 5)
                    && body
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase());
                if !ok {
                    return Err(Invalid::new(
                        format!("{field}[{i}]"),
                        format!("{c:?} is not a SQLSTATE (\"40001\") or a class (\"40*\")"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(DbRetryCheck {
            cfg: self.clone(),
            horizon_us: ctx.horizon_us,
            open: BTreeMap::new(),
            pending: VecDeque::new(),
            requests: VecDeque::new(),
            judged_requests: VecDeque::new(),
            last_us: 0,
            findings: Findings::new(ctx.max_evidence),
            transient_failures: 0,
            permanent_failures: 0,
            retried_whole: 0,
            retried_partly: 0,
            not_retried: 0,
            without_backoff: 0,
            permanent_retried: 0,
            client_failed: 0,
            cut_off: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use history::sample::EntryBuilder;
    use history::Outcome;
    use verdict::Verdict;

    use crate::testutil::{entry, in_arrival_order, run_one};

    const NAME: &str = "db_retry";

    /// One transaction of an orders service on connection `conn`: BEGIN, INSERT the order (its
    /// values `order`), UPDATE the stock, COMMIT; `fail` gives the statement (1 INSERT, 2 UPDATE,
    /// 3 COMMIT) that failed and its SQLSTATE. Starts at `t_ms`, a statement per ms.
    fn order_tx(
        conn: u64,
        tx: u64,
        t_ms: f64,
        order: &str,
        fail: Option<(usize, &str)>,
    ) -> Vec<history::Entry> {
        let texts = [
            "BEGIN",
            "INSERT INTO orders (sku, qty) VALUES ($1, $2)",
            "UPDATE stock SET qty = qty - $1 WHERE sku = $2",
            "COMMIT",
        ];
        let mut out = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            let mut b: EntryBuilder = entry(0, t_ms + i as f64).statement(conn, tx, text);
            if (1..3).contains(&i) {
                b = b.params(&format!("{order}-{i}"));
            }
            match fail {
                Some((at, code)) if at == i => {
                    out.push(b.sqlstate(code).build());
                    // The service rolls back the failed block.
                    out.push(
                        entry(0, t_ms + i as f64 + 0.5)
                            .statement(conn, tx, "ROLLBACK")
                            .tx_committed(false)
                            .build(),
                    );
                    return out;
                }
                _ => {}
            }
            if i == 3 {
                b = b.tx_committed(true);
            }
            out.push(b.build());
        }
        out
    }

    fn journal(parts: Vec<Vec<history::Entry>>) -> Vec<history::Entry> {
        in_arrival_order(parts.into_iter().flatten().collect())
    }

    #[test]
    fn passes_a_service_that_runs_the_whole_transaction_again_after_a_backoff() {
        let j = journal(vec![
            order_tx(1, 1, 0.0, "o1", Some((2, "40001"))),
            // Another order meanwhile: not a retry.
            order_tx(2, 1, 5.0, "o2", None),
            order_tx(1, 2, 60.0, "o1", None),
            // A unique violation not retried: right.
            order_tx(2, 2, 100.0, "o3", Some((1, "23505"))),
            // Something long after, so the windows have passed.
            order_tx(3, 1, 20_000.0, "o4", None),
        ]);
        let r = run_one(NAME, "{}", &j);
        r.assert_passes();
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["retried_whole"], 1);
        assert_eq!(r.metrics["permanent_failures"], 1);
    }

    #[test]
    fn fails_a_service_that_reruns_only_the_failed_statement() {
        let mut partial = vec![entry(0, 60.0)
            .statement(1, 2, "UPDATE stock SET qty = qty - $1 WHERE sku = $2")
            .params("o1-2")
            .tx_committed(true)
            .build()];
        partial[0].seq = 0;
        let j = journal(vec![
            order_tx(1, 1, 0.0, "o1", Some((2, "40P01"))),
            partial,
            order_tx(3, 1, 20_000.0, "o4", None),
        ]);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(
            r.summary.contains("only the failed statement"),
            "{}",
            r.summary
        );
        assert_eq!(r.metrics["retried_partly"], 1);
        assert_eq!(r.evidence[0].seqs.len(), 2);
    }

    #[test]
    fn fails_a_retry_without_backoff_a_missing_retry_and_a_retried_unique_violation() {
        let at_once = journal(vec![
            order_tx(1, 1, 0.0, "o1", Some((1, "40001"))),
            order_tx(1, 2, 2.0, "o1", None),
            order_tx(3, 1, 20_000.0, "o4", None),
        ]);
        let r = run_one(NAME, "{}", &at_once);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("no backoff"), "{}", r.summary);

        let never = journal(vec![
            order_tx(1, 1, 0.0, "o1", Some((3, "40001"))),
            order_tx(3, 1, 20_000.0, "o4", None),
        ]);
        let r = run_one(NAME, "{}", &never);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("not run again"), "{}", r.summary);

        let dup = journal(vec![
            order_tx(1, 1, 0.0, "o1", Some((1, "23505"))),
            order_tx(1, 2, 50.0, "o1", None),
            order_tx(3, 1, 20_000.0, "o4", None),
        ]);
        let r = run_one(NAME, "{}", &dup);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("retrying cannot fix"), "{}", r.summary);
        assert_eq!(r.metrics["permanent_retried"], 1);
    }

    #[test]
    fn a_lost_connection_is_transient_and_judges_the_services_own_answer() {
        // The ambiguous commit: the COMMIT's answer was dropped; the service ran it again and
        // its client got a 500 anyway (the HTTP request spans both transactions).
        let mut lost = order_tx(1, 1, 10.0, "o1", None);
        let commit = lost.last_mut().expect("a commit");
        commit.outcome = Outcome::Dropped;
        let http = entry(0, 0.0)
            .at("POST", "/orders")
            .took(200.0)
            .status(500)
            .build();
        let j = journal(vec![
            vec![http],
            lost,
            order_tx(2, 1, 80.0, "o1", None),
            order_tx(3, 1, 20_000.0, "o4", None),
        ]);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(
            r.summary.contains("answered its client 500"),
            "{}",
            r.summary
        );
        assert_eq!(r.metrics["retried_whole"], 1);
        // Answered 201, the same journal passes.
        let j: Vec<history::Entry> = j
            .into_iter()
            .map(|mut e| {
                if e.status == Some(500) {
                    e.status = Some(201);
                }
                e
            })
            .collect();
        run_one(NAME, "{}", &j).assert_passes();
    }

    #[test]
    fn nothing_failed_is_inconclusive_and_a_failure_at_the_end_is_cut_off() {
        let ok = journal(vec![order_tx(1, 1, 0.0, "o1", None)]);
        let r = run_one(NAME, "{}", &ok);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        let late = journal(vec![order_tx(1, 1, 0.0, "o1", Some((1, "40001")))]);
        let r = run_one(NAME, "{}", &late);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert_eq!(r.metrics["cut_off"], 1);
    }

    #[test]
    fn new_values_per_attempt_need_match_parameters_off() {
        let retry = order_tx(1, 2, 60.0, "o1-new-uuid", None);
        let j = journal(vec![
            order_tx(1, 1, 0.0, "o1", Some((2, "40001"))),
            retry,
            order_tx(3, 1, 20_000.0, "o4", None),
        ]);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        run_one(NAME, "{ match_parameters: false }", &j).assert_passes();
    }

    #[test]
    fn bad_codes_are_refused_with_their_field() {
        let e = crate::ChecksConfig::from_yaml("db_retry: { transient: [\"4001\"] }")
            .expect_err("not a SQLSTATE");
        assert!(e.to_string().contains("db_retry.transient[0]"), "{e}");
    }
}
