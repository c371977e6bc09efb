//! What a report shows of a journal, counted entry by entry: the request totals, the
//! requests-over-time chart, the server-side latency and the span the journal covers.
//!
//! Why one tally: a run judges its embedded server's journal, `harness analyze` a journal file,
//! and `harness idempotency` the exchanges it recorded as entries — three readers of the same
//! kind of history, which must count a request the same way: answered with a status, or an error;
//! a retry when its key's attempt is past the first; charted by status, or by how it ended when
//! no status was sent ([`TimelineLabel`]). Counted here once, entry by entry, so a journal read
//! as a stream never has to be held whole.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use history::{Entry, Outcome, Protocol};
use reports::model::{ProxyConnections, ProxyStatements, Requests, Series, Timeline};

/// How a request ended, as the timeline labels it: its status when it was answered, else how it
/// ended (`malformed` for a response that came without a status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimelineLabel {
    Status(u16),
    Malformed,
    Outcome(&'static str),
}

impl TimelineLabel {
    pub(crate) fn of(e: &Entry) -> TimelineLabel {
        match (e.outcome, e.status) {
            (_, Some(s)) if e.answered() => TimelineLabel::Status(s),
            (Outcome::Responded, None) => TimelineLabel::Malformed,
            (o, _) => TimelineLabel::Outcome(o.as_str()),
        }
    }

    pub(crate) fn name(self) -> String {
        match self {
            TimelineLabel::Status(s) => s.to_string(),
            TimelineLabel::Malformed => "malformed".to_string(),
            TimelineLabel::Outcome(o) => o.to_string(),
        }
    }
}

/// Most proxies (and toxics per proxy) counted by name; the rest are counted together.
const MAX_NAMES: usize = 256;

/// Where the proxies or toxics beyond [`MAX_NAMES`] are counted.
const OTHERS: &str = "(others)";

/// Counts one of `name` in `m`, under [`OTHERS`] once [`MAX_NAMES`] names are counted.
fn count_name(m: &mut BTreeMap<String, u64>, name: &str) {
    let name = if m.len() < MAX_NAMES || m.contains_key(name) {
        name
    } else {
        OTHERS
    };
    *m.entry(name.to_string()).or_default() += 1;
}

/// A journal's counts, gathered one entry at a time in `seq` order.
///
/// Windows of the chart count from the origin given, or from the first request when it came
/// earlier (or when no origin is given); the chart keeps one count per window and label that
/// saw a request, so its memory follows the requests, never the time a journal claims to span.
#[derive(Debug, Clone)]
pub struct JournalTally {
    requests: Requests,
    /// Receive to done, per request, µs.
    latency: Histogram<u64>,
    window_us: u64,
    origin_us: Option<u64>,
    t0_us: Option<u64>,
    first_recv_us: Option<u64>,
    last_done_us: u64,
    bins: BTreeMap<(u64, TimelineLabel), u64>,
    /// Connections through the fault server's TCP proxies, by proxy: counted beside the
    /// requests, never as requests.
    connections: BTreeMap<String, ProxyConnections>,
    /// Statements and commands the protocol-aware proxies read, by proxy: counted beside the
    /// requests too.
    statements: BTreeMap<String, ProxyStatements>,
}

impl JournalTally {
    /// An empty tally charting windows of `window` from `origin_us` (journal µs; `None`: from
    /// the first request).
    pub fn new(window: Duration, origin_us: Option<u64>) -> JournalTally {
        JournalTally {
            requests: Requests::default(),
            latency: crate::metrics::histogram(),
            window_us: (window.as_micros() as u64).max(1),
            origin_us,
            t0_us: None,
            first_recv_us: None,
            last_done_us: 0,
            bins: BTreeMap::new(),
            connections: BTreeMap::new(),
            statements: BTreeMap::new(),
        }
    }

    /// Counts one entry.
    pub fn observe(&mut self, e: &Entry) {
        if let Some(t) = &e.tcp {
            let c =
                match self.connections.get_mut(&t.proxy) {
                    Some(c) => c,
                    None => self.connections.entry(t.proxy.clone()).or_insert_with(|| {
                        ProxyConnections {
                            proxy: t.proxy.clone(),
                            ..ProxyConnections::default()
                        }
                    }),
                };
            c.connections += 1;
            c.upstream_unreached += u64::from(!t.connected);
            *c.by_end.entry(t.end.as_str().to_string()).or_default() += 1;
            c.bytes_up += t.bytes_up;
            c.bytes_down += t.bytes_down;
            for x in &t.toxics {
                let name = if c.by_toxic.len() < MAX_NAMES || c.by_toxic.contains_key(&x.name) {
                    x.name.as_str()
                } else {
                    OTHERS
                };
                *c.by_toxic.entry(name.to_string()).or_default() += 1;
            }
            return;
        }
        if let Some(p) = &e.protocol {
            self.statement(e, p);
            return;
        }
        let r = &mut self.requests;
        r.sent += 1;
        match e.status {
            Some(s) if e.answered() => {
                r.completed += 1;
                *r.by_status.entry(s.to_string()).or_default() += 1;
            }
            _ => r.errors += 1,
        }
        if e.key_attempt.is_some_and(|a| a > 1) {
            r.retries += 1;
        }
        // As the client's recorder does: the histogram's lowest value is 1 µs.
        self.latency
            .saturating_record(e.t_done_us.saturating_sub(e.t_recv_us).max(1));
        self.first_recv_us.get_or_insert(e.t_recv_us);
        self.last_done_us = self.last_done_us.max(e.t_done_us);
        let t0 = *self.t0_us.get_or_insert(
            self.origin_us
                .map_or(e.t_recv_us, |origin| origin.min(e.t_recv_us)),
        );
        let bin = e.t_recv_us.saturating_sub(t0) / self.window_us;
        *self.bins.entry((bin, TimelineLabel::of(e))).or_default() += 1;
    }

    /// Counts a statement or command of a protocol-aware proxy: its fault, how its answer went,
    /// its error code, and what became of the transaction it ended.
    fn statement(&mut self, e: &Entry, p: &Protocol) {
        let (proxy, protocol, error, committed) = match p {
            Protocol::Postgres(s) => (&s.proxy, "postgres", s.sqlstate.as_deref(), s.committed),
            Protocol::Redis(c) => (&c.proxy, "redis", c.error.as_deref(), None),
        };
        let proxy = if self.statements.len() < MAX_NAMES || self.statements.contains_key(proxy) {
            proxy.as_str()
        } else {
            OTHERS
        };
        let s = match self.statements.get_mut(proxy) {
            Some(s) => s,
            None => self
                .statements
                .entry(proxy.to_string())
                .or_insert_with(|| ProxyStatements {
                    proxy: proxy.to_string(),
                    protocol: protocol.to_string(),
                    ..ProxyStatements::default()
                }),
        };
        s.statements += 1;
        if let Some(f) = &e.fault {
            count_name(&mut s.by_fault, f);
        }
        *s.by_outcome
            .entry(e.outcome.as_str().to_string())
            .or_default() += 1;
        if let Some(code) = error {
            count_name(&mut s.by_error, code);
        }
        match committed {
            Some(true) => {
                s.committed += 1;
                // The database committed, and the client never heard so: an ambiguous commit.
                s.committed_unanswered += u64::from(e.outcome != Outcome::Responded);
            }
            Some(false) => s.not_committed += 1,
            None => {}
        }
    }

    /// Entries counted, connections, statements and commands included.
    pub fn entries(&self) -> u64 {
        self.requests.sent
            + self
                .connections
                .values()
                .map(|c| c.connections)
                .sum::<u64>()
            + self.statements.values().map(|s| s.statements).sum::<u64>()
    }

    /// The TCP proxies' connections, one row per proxy.
    pub fn connections(&self) -> Vec<ProxyConnections> {
        self.connections.values().cloned().collect()
    }

    /// The protocol-aware proxies' statements and commands, one row per proxy.
    pub fn statements(&self) -> Vec<ProxyStatements> {
        self.statements.values().cloned().collect()
    }

    /// The request totals: sent, answered (by status), errors, retries.
    pub fn requests(&self) -> &Requests {
        &self.requests
    }

    /// Receive-to-done latency per request, µs.
    pub fn latency(&self) -> &Histogram<u64> {
        &self.latency
    }

    /// When the first request arrived (journal µs), if one did.
    pub fn first_recv_us(&self) -> Option<u64> {
        self.first_recv_us
    }

    /// From the first request's arrival to the last one's end, µs (0 for no request).
    pub fn span_us(&self) -> u64 {
        self.first_recv_us
            .map_or(0, |first| self.last_done_us.saturating_sub(first))
    }

    /// Requests per window, by label, up to the window of the last request that arrived.
    pub fn timeline(&self) -> Timeline {
        let len = self.bins.keys().map(|(bin, _)| bin + 1).max().unwrap_or(0);
        self.grouped(1, len)
    }

    /// The chart in about `windows` windows or fewer, each a whole number of the tally's, over
    /// the time from the start of the first window to the end of the last request.
    pub fn timeline_within(&self, windows: u64) -> Timeline {
        let span = self
            .t0_us
            .map_or(0, |t0| self.last_done_us.saturating_sub(t0))
            / self.window_us;
        let per = (span / windows.max(1)).max(1);
        self.grouped(per, span / per + 1)
    }

    /// The chart with `per` of the tally's windows in each and `len` windows (a later request
    /// counts in the last).
    fn grouped(&self, per: u64, len: u64) -> Timeline {
        let len = len as usize;
        let mut series: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for ((bin, label), n) in &self.bins {
            let counts = series.entry(label.name()).or_insert_with(|| vec![0; len]);
            counts[((bin / per) as usize).min(len.saturating_sub(1))] += n;
        }
        Timeline {
            window_ms: (self.window_us * per) as f64 / 1000.0,
            series: series
                .into_iter()
                .map(|(label, counts)| Series { label, counts })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::sample::entry;

    /// A journal with each way a request can end, retries, and a gap in time.
    fn journal() -> Vec<Entry> {
        (0..300u64)
            .map(|i| {
                let t = 40.0 + i as f64 * 3.0 + if i > 200 { 500.0 } else { 0.0 };
                let e = entry(i + 1, t).key(&format!("k{}", i % 30));
                match i % 6 {
                    0 => e.status(503).build(),
                    1 => e.no_response(Outcome::Dropped).build(),
                    2 => e.no_response(Outcome::Reset).build(),
                    3 => Entry {
                        key_attempt: Some(2),
                        ..e.status(409).took(2).build()
                    },
                    _ => e.created(&format!("o{i}")).build(),
                }
            })
            .collect()
    }

    #[test]
    fn connections_are_counted_beside_the_requests_not_as_requests() {
        let mut t = JournalTally::new(Duration::from_millis(100), None);
        t.observe(&entry(1, 0.0).status(200).build());
        let mut refused = history::sample::connection(2, 1.0, "redis");
        if let Some(c) = refused.tcp.as_deref_mut() {
            c.connected = false;
            c.end = history::TcpEnd::Refused;
            c.bytes_up = 0;
            c.bytes_down = 0;
        }
        t.observe(&history::sample::connection(3, 2.0, "redis"));
        t.observe(&refused);
        t.observe(&history::sample::connection(4, 3.0, "pg"));
        assert_eq!((t.requests().sent, t.requests().errors), (1, 0));
        assert_eq!(t.entries(), 4);
        let c = t.connections();
        assert_eq!(c.len(), 2);
        let redis = &c[1];
        assert_eq!(
            (
                redis.proxy.as_str(),
                redis.connections,
                redis.upstream_unreached,
                redis.bytes_up
            ),
            ("redis", 2, 1, 100)
        );
        assert_eq!(redis.by_end.get("refused"), Some(&1));
        assert_eq!(
            t.timeline()
                .series
                .iter()
                .map(|s| s.counts.iter().sum::<u64>())
                .sum::<u64>(),
            1
        );
    }

    #[test]
    fn statements_and_commands_are_counted_per_proxy_not_as_requests() {
        let mut t = JournalTally::new(Duration::from_millis(100), None);
        t.observe(&entry(1, 0.0).status(201).build());
        // Two transactions that committed, one of whose COMMIT's answer was dropped, one that
        // rolled back, and a statement answered with a serialization failure by a rule.
        let s = |seq: u64, text: &str| entry(seq, seq as f64).statement(1, seq, text);
        t.observe(&s(2, "COMMIT").tx_committed(true).build());
        t.observe(&Entry {
            outcome: Outcome::Dropped,
            fault: Some("drop".into()),
            ..s(3, "COMMIT").tx_committed(true).build()
        });
        t.observe(&s(4, "ROLLBACK").tx_committed(false).build());
        t.observe(&Entry {
            fault: Some("error".into()),
            ..s(5, "UPDATE t SET n = 1").sqlstate("40001").build()
        });
        t.observe(
            &entry(6, 6.0)
                .redis(7, "GET", Some("k"))
                .redis_error("LOADING")
                .build(),
        );
        assert_eq!((t.requests().sent, t.entries()), (1, 6));
        let rows = t.statements();
        assert_eq!(rows.len(), 2);
        let (cache, db) = (&rows[0], &rows[1]);
        assert_eq!(
            (db.proxy.as_str(), db.protocol.as_str()),
            ("db", "postgres")
        );
        assert_eq!(db.statements, 4);
        assert_eq!(
            (db.committed, db.not_committed, db.committed_unanswered),
            (2, 1, 1)
        );
        assert_eq!(db.by_fault.get("drop"), Some(&1));
        assert_eq!(db.by_fault.get("error"), Some(&1));
        assert_eq!(db.by_outcome.get("dropped"), Some(&1));
        assert_eq!(db.by_outcome.get("responded"), Some(&3));
        assert_eq!(db.by_error.get("40001"), Some(&1));
        assert_eq!((cache.protocol.as_str(), cache.statements), ("redis", 1));
        assert_eq!(cache.by_error.get("LOADING"), Some(&1));
        assert_eq!(cache.committed + cache.not_committed, 0);
        assert_eq!(
            t.latency().len(),
            1,
            "only the request's latency is charted"
        );
    }

    #[test]
    fn a_request_is_answered_or_an_error_and_charted_by_how_it_ended() {
        let j = journal();
        let mut t = JournalTally::new(Duration::from_millis(100), Some(0));
        j.iter().for_each(|e| t.observe(e));
        let r = t.requests();
        assert_eq!(r.sent, 300);
        assert_eq!(r.completed + r.errors, r.sent);
        assert_eq!(r.errors, 100, "dropped and reset: no status was sent");
        assert_eq!(r.by_status["201"], 100);
        assert_eq!(r.by_status["503"], 50);
        assert_eq!(r.by_status["409"], 50);
        assert_eq!(r.retries, 50, "a key's second attempt is a retry");
        let chart = t.timeline();
        let total: u64 = chart.series.iter().flat_map(|s| s.counts.iter()).sum();
        assert_eq!(total, 300, "every request is in one window");
        assert_eq!(chart.counts("dropped").iter().sum::<u64>(), 50);
        assert_eq!(chart.counts("reset").iter().sum::<u64>(), 50);
        // From journal time 0: the first window holds the requests before 100 ms (40 + 3·i),
        // and the last request (40 + 299·3 + 500 ms) is in window 14.
        let first: u64 = chart.series.iter().map(|s| s.counts[0]).sum();
        assert_eq!(first, 20);
        assert!(chart.series.iter().all(|s| s.counts.len() == 15));
        // From the first arrival to the end of the last request (1 ms after it arrived).
        assert_eq!(t.span_us(), (299 * 3 + 500) * 1000 + 1000);
        assert_eq!(t.latency().len(), 300);
    }

    #[test]
    fn windows_count_from_the_origin_or_from_an_earlier_first_request() {
        let j = [
            entry(1, 100.0).status(503).build(),
            entry(2, 150.0).created("o1").build(),
            entry(3, 260.0).status(503).build(),
        ];
        let chart = |origin| {
            let mut t = JournalTally::new(Duration::from_millis(100), origin);
            j.iter().for_each(|e| t.observe(e));
            t.timeline()
        };
        assert_eq!(chart(Some(50_000)).counts("503"), [1, 0, 1]);
        assert_eq!(chart(Some(50_000)).counts("201"), [0, 1, 0]);
        // An origin after the first request, or none: the first request opens the first window.
        assert_eq!(chart(None).counts("503"), [1, 1]);
        assert_eq!(chart(None).counts("201"), [1, 0]);
        assert_eq!(chart(Some(120_000)), chart(None));
    }

    #[test]
    fn a_long_journal_is_charted_in_about_as_many_windows_as_asked() {
        let j: Vec<Entry> = (0..1000u64)
            .map(|i| entry(i + 1, i as f64 * 30.0).status(200).build())
            .collect();
        let mut t = JournalTally::new(Duration::from_millis(100), None);
        j.iter().for_each(|e| t.observe(e));
        let chart = t.timeline_within(60);
        assert_eq!(chart.window_ms, 400.0, "299 windows of 100 ms, by 4");
        assert_eq!(chart.counts("200").len(), 75);
        assert_eq!(chart.counts("200").iter().sum::<u64>(), 1000);
        // A journal that says it spans a year is charted from its requests, in the same bound.
        let mut far = JournalTally::new(Duration::from_millis(100), None);
        far.observe(&entry(1, 0.0).status(200).build());
        far.observe(&entry(2, 365.0 * 86_400_000.0).status(200).build());
        assert!(far.timeline_within(60).counts("200").len() <= 61);
    }
}
