//! A protocol proxy's connection: the bytes of each direction read as PostgreSQL's protocol or
//! RESP, and what the connection's session decides for each message carried out on the pipe.
//!
//! A `protocol: postgres` or `protocol: redis` proxy is a TCP proxy whose pipe reads before it
//! forwards. The reading and the deciding are the `wire-faults` crate's (no socket, no clock):
//! per connection a session ([`PgSession`], [`RedisSession`]) and a reader per direction. This
//! room drives them as that crate's documentation says — each message, in the order its bytes
//! came, to the session, and its answer ([`ToServer`], [`ToClient`]) made into what the pipe
//! writes ([`Out`]): the message forwarded, or bytes in its place, bytes answered to the client
//! in the server's name (the `N` that refuses an SSLRequest, an ErrorResponse, a RESP error),
//! nothing (a withheld answer), the connection closed once that is written.
//!
//! Time is the pipe's virtual time: a delay is a due time, not a sleep. A message held for
//! 200 ms is written at its due time and what follows it in its direction waits behind it in the
//! direction's queue, while the other direction goes on — the session's "hold it and those
//! behind it", with no task blocked. The toxics of the proxy, if it has any, act on what the
//! protocol lets through, as on the bytes of a plain proxy.
//!
//! Every statement or command becomes a journal entry when its fate is known (the session's
//! `take_journal`), numbered when it arrived: the journal's writer waits for each `seq` taken,
//! so every one taken is given back, when the connection ends at the latest — and when the
//! connection's task is dropped without ending (the server stopped), by [`Wire`]'s `Drop`.
//!
//! Bytes that are not the protocol (a client speaking HTTP to a PostgreSQL proxy, a message
//! longer than `max_message`, one cut by the close): the session journals the violation, then
//! the connection is closed, or — `on_violation: forward` — forwarded unread from there on, the
//! readers' buffered bytes first.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use history::{Entry, Outcome};
use wire_faults::config::{OnViolation, ProtocolName};
use wire_faults::pg::{
    BackendItem, BackendReader, FrontendItem, FrontendReader, PgProxy, PgSession,
};
use wire_faults::resp::{RedisProxy, RedisSession, RespReader};
use wire_faults::{Draw, Host, Outgoing, Relay, Side, ToClient, ToServer, WireError};

use super::config::{ProxyConfig, Stream};
use super::toxics::Cut;
use super::Sink;

/// A protocol proxy's compiled rules and the counts its connections share (connections,
/// COMMITs, rule hits, each subject's attempts); rebuilt when the server resets its counts.
#[derive(Clone)]
pub(crate) enum WireProxy {
    /// `protocol: postgres`.
    Postgres(Arc<PgProxy>),
    /// `protocol: redis`.
    Redis(Arc<RedisProxy>),
}

/// The fault server's seeded draw, for a proxy's `probability` rules: one seed decides HTTP and
/// protocol faults alike; the proxy's name keeps two proxies' rules of one id apart.
struct SeededDraw {
    seed: u64,
    proxy: String,
}

impl Draw for SeededDraw {
    fn uniform(&self, rule: &str, subject: &str, attempt: u64) -> f64 {
        let rule = format!("{}/{rule}", self.proxy);
        crate::draw::uniform(self.seed, &rule, subject, attempt, 0)
    }
}

impl WireProxy {
    /// The proxy's protocol part, when it reads one (`cfg` validated).
    pub(crate) fn build(cfg: &ProxyConfig, seed: u64) -> Option<WireProxy> {
        let draw: Arc<dyn Draw> = Arc::new(SeededDraw {
            seed,
            proxy: cfg.name.clone(),
        });
        match cfg.protocol {
            ProtocolName::Tcp => None,
            ProtocolName::Postgres => {
                let pg = cfg.postgres.clone().unwrap_or_default();
                Some(WireProxy::Postgres(PgProxy::new(&cfg.name, &pg, draw)))
            }
            ProtocolName::Redis => {
                let r = cfg.redis.clone().unwrap_or_default();
                Some(WireProxy::Redis(RedisProxy::new(&cfg.name, &r, draw)))
            }
        }
    }

    /// A new connection's session and readers; its entries go to `sink` under `conn_id` (the
    /// connection's own entry's).
    pub(crate) fn connection(&self, sink: Arc<Sink>, conn_id: u64) -> Wire {
        let (kind, name) = match self {
            WireProxy::Postgres(p) => (
                Kind::Pg {
                    session: PgSession::new(p, conn_id),
                    client: FrontendReader::new(p.max_message()),
                    server: BackendReader::new(p.max_message()),
                },
                "postgres",
            ),
            WireProxy::Redis(p) => (
                Kind::Redis {
                    session: RedisSession::new(p, conn_id),
                    client: RespReader::commands(p.max_message()),
                    server: RespReader::replies(),
                },
                "redis",
            ),
        };
        Wire {
            kind,
            sink,
            taken: VecDeque::new(),
            settled: Vec::new(),
            up: Vec::new(),
            down: Vec::new(),
            passive: false,
            closing: false,
            closed: false,
            name: Arc::from(name),
        }
    }
}

/// What the pipe writes in one direction, in order.
#[derive(Debug)]
pub(crate) enum Out {
    /// These bytes, not before this time.
    Data(Bytes, Instant),
    /// The connection ends here (both sides), once what is before it is written.
    Close(Cut, Instant),
}

enum Kind {
    Pg {
        session: PgSession,
        client: FrontendReader,
        server: BackendReader,
    },
    Redis {
        session: RedisSession,
        client: RespReader,
        server: RespReader,
    },
}

/// One connection's protocol: its session, its readers, and what they decided last.
pub(crate) struct Wire {
    kind: Kind,
    sink: Arc<Sink>,
    /// Each `seq` the session took and has not yet given back in an entry, with the journal's
    /// epoch it was taken in (a reset between the two must not misplace it).
    taken: VecDeque<(u64, u16)>,
    /// Entries settled by the last calls, not yet handed to the journal.
    settled: Vec<Entry>,
    /// What goes to the upstream, from the last feed.
    pub(crate) up: Vec<Out>,
    /// What goes to the client, from the last feed.
    pub(crate) down: Vec<Out>,
    /// After a violation with `on_violation: forward`: nothing is read any more.
    passive: bool,
    /// The session closed the connection: what comes after is not read.
    closing: bool,
    closed: bool,
    /// `postgres` or `redis`: what the connection's entry names as its cut, when the protocol
    /// ends it.
    name: Arc<str>,
}

/// The journal's numbering and clock, as a session needs them.
struct JournalHost<'a> {
    sink: &'a Sink,
    taken: &'a mut VecDeque<(u64, u16)>,
}

impl Host for JournalHost<'_> {
    fn next_seq(&mut self) -> u64 {
        let (epoch, seq) = self.sink.seq.next();
        self.taken.push_back((seq, epoch));
        seq
    }

    fn unix_us(&self, t_us: u64) -> u64 {
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        now_unix.saturating_sub(self.sink.clock.now_us().saturating_sub(t_us))
    }
}

/// What a step's output needs: the outputs of both directions and the time.
struct Outs<'a> {
    up: &'a mut Vec<Out>,
    down: &'a mut Vec<Out>,
    now: Instant,
}

impl Outs<'_> {
    /// Carries out a decision on a client's message (`raw`); whether the connection goes on.
    fn server_step(&mut self, step: ToServer, raw: Bytes, reset: bool) -> bool {
        let due = self.now + step.delay;
        match step.send {
            Outgoing::Forward => self.up.push(Out::Data(raw, due)),
            Outgoing::Replace(b) => self.up.push(Out::Data(b, due)),
            Outgoing::Nothing => {}
        }
        if let Some(a) = step.answer {
            self.down.push(Out::Data(a, due));
        }
        if step.close {
            // Toward the client: after the answer it was given, if any.
            let cut = if reset { Cut::Reset } else { Cut::Close };
            self.down.push(Out::Close(cut, due));
        }
        !step.close
    }

    /// Carries out a decision on a server's message or piece (`raw`).
    fn client_step(&mut self, step: ToClient, raw: Bytes) -> bool {
        let due = self.now + step.delay;
        match step.relay {
            Relay::Relay => self.down.push(Out::Data(raw, due)),
            Relay::Replace(b) => self.down.push(Out::Data(b, due)),
            Relay::Swallow => {}
        }
        if let Some(t) = step.then {
            self.down.push(Out::Data(t, due));
        }
        if step.close {
            self.down.push(Out::Close(Cut::Close, due));
        }
        !step.close
    }
}

/// A session's closing of the connection was a `reset` (the statement or command not
/// forwarded, the connection cut): the entries just settled say so.
fn was_reset(settled: &[Entry], from: usize) -> bool {
    settled[from..]
        .iter()
        .any(|e| e.outcome == Outcome::Reset && e.fault.as_deref() == Some("reset"))
}

impl Wire {
    /// Whether the connection is forwarded unread from here on.
    pub(crate) fn passive(&self) -> bool {
        self.passive
    }

    /// What the connection's entry names when the protocol cut it.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Reads `data`, which came from `from`'s source at `now`, and decides: [`Wire::up`] and
    /// [`Wire::down`] hold what to write.
    pub(crate) fn feed(&mut self, from: Stream, data: &[u8], now: Instant) {
        if self.closing || self.closed {
            return;
        }
        if self.passive {
            let out = Out::Data(Bytes::copy_from_slice(data), now);
            match from {
                Stream::Upstream => self.up.push(out),
                Stream::Downstream => self.down.push(out),
            }
            return;
        }
        let now_us = self.sink.clock.us_at(now);
        let mut host = JournalHost {
            sink: &self.sink,
            taken: &mut self.taken,
        };
        let mut outs = Outs {
            up: &mut self.up,
            down: &mut self.down,
            now,
        };
        let settled = &mut self.settled;
        let failed = match &mut self.kind {
            Kind::Pg {
                session,
                client,
                server,
            } => match from {
                Stream::Upstream => {
                    client.push(data);
                    loop {
                        match client.next_item() {
                            Ok(Some(FrontendItem::Message(m))) => {
                                let step = session.on_client(&m, now_us, &mut host);
                                let from = settled.len();
                                settled.extend(session.take_journal());
                                let reset = step.close && was_reset(settled, from);
                                if !outs.server_step(step, m.raw, reset) {
                                    self.closing = true;
                                    break None;
                                }
                            }
                            Ok(Some(FrontendItem::Piece(p))) => {
                                outs.up.push(Out::Data(p.bytes, now));
                            }
                            Ok(None) => break None,
                            Err(e) => break Some((Side::Client, e)),
                        }
                    }
                }
                Stream::Downstream => {
                    server.push(data);
                    loop {
                        let (step, raw) = match server.next_item() {
                            Ok(Some(BackendItem::Message(m))) => {
                                (session.on_server(&m, now_us), m.raw)
                            }
                            Ok(Some(BackendItem::Piece(p))) => {
                                (session.on_server_piece(p.first), p.bytes)
                            }
                            Ok(None) => break None,
                            Err(e) => break Some((Side::Server, e)),
                        };
                        // An answer settles the statements it ends (a ReadyForQuery: their
                        // transaction's fate): journaled now, not at the client's next message.
                        settled.extend(session.take_journal());
                        if !outs.client_step(step, raw) {
                            self.closing = true;
                            break None;
                        }
                    }
                }
            },
            Kind::Redis {
                session,
                client,
                server,
            } => match from {
                Stream::Upstream => {
                    client.push(data);
                    loop {
                        match client.next_command() {
                            Ok(Some(c)) => {
                                let step = session.on_command(&c, now_us, &mut host);
                                let from = settled.len();
                                settled.extend(session.take_journal());
                                let reset = step.close && was_reset(settled, from);
                                if !outs.server_step(step, c.raw, reset) {
                                    self.closing = true;
                                    break None;
                                }
                            }
                            Ok(None) => break None,
                            Err(e) => break Some((Side::Client, e)),
                        }
                    }
                }
                Stream::Downstream => {
                    server.push(data);
                    loop {
                        match server.next_reply_piece() {
                            Ok(Some(p)) => {
                                let step = session.on_reply(&p, now_us);
                                settled.extend(session.take_journal());
                                if !outs.client_step(step, p.bytes) {
                                    self.closing = true;
                                    break None;
                                }
                            }
                            Ok(None) => break None,
                            Err(e) => break Some((Side::Server, e)),
                        }
                    }
                }
            },
        };
        if let Some((side, e)) = failed {
            self.violation(side, &e, now);
        }
        self.journal();
    }

    /// `from`'s source ended (its FIN) at `now`: a message it left unfinished is a violation.
    pub(crate) fn finish(&mut self, from: Stream, now: Instant) {
        if self.passive || self.closing || self.closed {
            return;
        }
        let r = match (&mut self.kind, from) {
            (Kind::Pg { client, .. }, Stream::Upstream) => client.finish(),
            (Kind::Pg { server, .. }, Stream::Downstream) => server.finish(),
            (Kind::Redis { client, .. }, Stream::Upstream) => client.finish(),
            (Kind::Redis { server, .. }, Stream::Downstream) => server.finish(),
        };
        if let Err(e) = r {
            let side = match from {
                Stream::Upstream => Side::Client,
                Stream::Downstream => Side::Server,
            };
            self.violation(side, &e, now);
            self.journal();
        }
    }

    /// A reader refused `side`'s bytes: journaled by the session; the connection closed, or let
    /// through unread from here on, the bytes both readers hold first.
    fn violation(&mut self, side: Side, e: &WireError, now: Instant) {
        let now_us = self.sink.clock.us_at(now);
        let mut host = JournalHost {
            sink: &self.sink,
            taken: &mut self.taken,
        };
        let (action, unread_up, unread_down) = match &mut self.kind {
            Kind::Pg {
                session,
                client,
                server,
            } => {
                let a = session.on_violation(side, e, now_us, &mut host);
                self.settled.extend(session.take_journal());
                (a, client.take_unread(), server.take_unread())
            }
            Kind::Redis {
                session,
                client,
                server,
            } => {
                let a = session.on_violation(side, e, now_us, &mut host);
                self.settled.extend(session.take_journal());
                (a, client.take_unread(), server.take_unread())
            }
        };
        match action {
            OnViolation::Close => {
                self.down.push(Out::Close(Cut::Close, now));
                self.closing = true;
            }
            OnViolation::Forward => {
                self.passive = true;
                if !unread_up.is_empty() {
                    self.up.push(Out::Data(unread_up, now));
                }
                if !unread_down.is_empty() {
                    self.down.push(Out::Data(unread_down, now));
                }
            }
        }
    }

    /// The connection ended, `by` the client or the server's side: what was in flight is
    /// journaled with how it ended.
    pub(crate) fn close(&mut self, by: Side) {
        if self.closed {
            return;
        }
        self.closed = true;
        let now_us = self.sink.clock.now_us();
        match &mut self.kind {
            Kind::Pg { session, .. } => {
                session.on_closed(by, now_us);
                self.settled.extend(session.take_journal());
            }
            Kind::Redis { session, .. } => {
                session.on_closed(by, now_us);
                self.settled.extend(session.take_journal());
            }
        }
        self.journal();
    }

    /// Hands the settled entries to the journal, each in the epoch its `seq` was taken in.
    fn journal(&mut self) {
        for mut e in self.settled.drain(..) {
            let epoch = match self.taken.iter().position(|(s, _)| *s == e.seq) {
                Some(i) => self.taken.remove(i).map_or(0, |(_, ep)| ep),
                None => self.sink.seq.current().0,
            };
            e.replica.clone_from(&self.sink.replica);
            self.sink.emitter.send_finished(epoch, Box::new(e));
        }
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        // A connection's task dropped before its end (the server stopping): every `seq` taken is
        // still given back, so the journal waits for none.
        self.close(Side::Server);
    }
}

/// The session's side for the party that ended a connection.
pub(crate) fn side_of(by: history::EndedBy) -> Side {
    match by {
        history::EndedBy::Client => Side::Client,
        _ => Side::Server,
    }
}
