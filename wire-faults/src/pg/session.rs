//! One proxied PostgreSQL connection as a state machine: fed the client's and the server's
//! messages in the order they arrive, it says what to do with each ([`ToServer`],
//! [`ToClient`]) and journals every statement once its fate is known.
//!
//! What it tracks, and why:
//! - **Transactions, predicted from the client's side.** A fault is decided when a statement
//!   arrives, before the database has seen it, and a pipelined client sends many statements
//!   before the first answer — so the session numbers transactions from what the client sends
//!   (`BEGIN` opens a block, `COMMIT`/`ROLLBACK` closes it, a statement outside a block is a
//!   transaction of its own up to its `Sync` or the end of its Query) and corrects the
//!   prediction from each ReadyForQuery's status once nothing is in flight.
//! - **What each answer answers.** Statements in flight wait in a queue with the `Sync`s between
//!   them; a CommandComplete or an ErrorResponse answers the statement at its head, a
//!   ReadyForQuery ends a simple Query or a pipeline, and after an error in a pipeline the
//!   database skips every statement up to the `Sync` (they are journaled `skipped`).
//! - **Whether the database committed.** A COMMIT's tag says it (`COMMIT`, or `ROLLBACK` for a
//!   failed block); a statement outside a block committed when its pipeline ended idle without an
//!   error. Entries are held until the ReadyForQuery that ends their transaction's part, so that
//!   the journal says it even when the client never saw the answer.
//!
//! How a fault is carried out:
//! - `error`: the statement is not run. In its place the database is sent a statement it refuses
//!   ([`answer::REFUSED_STATEMENT`]), so that its own transaction fails exactly as it would have
//!   (a block becomes failed, an implicit transaction is rolled back, the rest of the pipeline is
//!   skipped); the ErrorResponse that comes back is replaced by the fault's, in its place in the
//!   stream. A FATAL error closes the connection after it.
//! - `delay`: the statement is held before it is forwarded, or its answer before it is relayed.
//! - `drop`: the statement is forwarded and answered; everything from its answer on is withheld,
//!   and the connection is closed at the ReadyForQuery that ends its part — by then the journal
//!   knows whether the database committed.
//! - `reset`: the connection is closed before the statement is forwarded.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use history::{Entry, Outcome, PgStatement, Protocol, TxControl, TxStatus};
use sha2::{Digest, Sha256};

use super::answer;
use super::backend::{Backend, BackendMessage};
use super::frontend::{Frontend, FrontendMessage};
use super::rules::{Decision, PgProxy, StatementFacts};
use super::sql;
use crate::config::{OnViolation, PgFault, Severity, When};
use crate::error::WireError;
use crate::journal::{blank, bounded, Host};
use crate::step::{Outgoing, Relay, Side, ToClient, ToServer};

/// Most prepared statements and portals remembered per connection (by name); past it, the
/// oldest name is forgotten and an Execute of it is journaled without its text.
const MAX_NAMES: usize = 10_000;

/// Longest error message journaled.
const MAX_MESSAGE: usize = 500;

/// A proxied PostgreSQL connection.
pub struct PgSession {
    proxy: Arc<PgProxy>,
    conn_id: u64,
    connection: u64,
    tx: u64,
    in_tx: bool,
    block: bool,
    tx_digest: Option<Sha256>,
    commits: u64,
    prepared: Names<Prepared>,
    portals: Names<Portal>,
    queue: VecDeque<Unit>,
    held: Vec<Stmt>,
    swallowing: bool,
    passive: bool,
    journal: Vec<Entry>,
    /// The latest time a message was fed in (a piece of a row comes without one).
    clock_us: u64,
}

impl std::fmt::Debug for PgSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSession")
            .field("conn_id", &self.conn_id)
            .field("tx", &self.tx)
            .field("in_flight", &self.queue.len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct Prepared {
    text: Option<Arc<str>>,
    truncated: bool,
    control: Option<TxControl>,
}

#[derive(Debug, Clone)]
struct Portal {
    prepared: Prepared,
    params: String,
}

enum Unit {
    Stmt(Box<Stmt>),
    Sync,
}

#[derive(Debug, Clone, PartialEq)]
enum Action {
    None,
    /// Replace the database's error with this one (closing after it when fatal).
    Replace {
        bytes: Bytes,
        sqlstate: String,
        message: String,
        fatal: bool,
    },
    /// Withhold the answer and close at the end of its part.
    Drop,
    /// Hold the answer this long before relaying it.
    After(Duration),
}

struct Stmt {
    entry: Entry,
    pg: PgStatement,
    simple: bool,
    action: Action,
    t_forward_us: u64,
    t_done_us: Option<u64>,
    /// Its answer is held (`delay: after`) until then: it reaches the client no sooner.
    held_until_us: u64,
    failed: bool,
}

/// Names of prepared statements or portals, bounded.
struct Names<T> {
    map: HashMap<Bytes, T>,
    order: VecDeque<Bytes>,
}

impl<T> Names<T> {
    fn new() -> Self {
        Names {
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn insert(&mut self, name: Bytes, v: T) {
        if self.map.insert(name.clone(), v).is_none() {
            self.order.push_back(name);
            while self.map.len() > MAX_NAMES {
                match self.order.pop_front() {
                    Some(old) => {
                        self.map.remove(&old);
                    }
                    None => break,
                }
            }
        }
        if self.order.len() > 2 * MAX_NAMES {
            let map = &self.map;
            self.order.retain(|n| map.contains_key(n));
        }
    }

    fn get(&self, name: &[u8]) -> Option<&T> {
        self.map.get(name)
    }

    fn remove(&mut self, name: &[u8]) {
        self.map.remove(name);
    }
}

impl PgSession {
    /// The session of a new connection of `proxy`; `conn_id` is the journal's id of the
    /// connection.
    pub fn new(proxy: &Arc<PgProxy>, conn_id: u64) -> PgSession {
        PgSession {
            connection: proxy.next_connection(),
            proxy: Arc::clone(proxy),
            conn_id,
            tx: 0,
            in_tx: false,
            block: false,
            tx_digest: None,
            commits: 0,
            prepared: Names::new(),
            portals: Names::new(),
            queue: VecDeque::new(),
            held: Vec::new(),
            swallowing: false,
            passive: false,
            journal: Vec::new(),
            clock_us: 0,
        }
    }

    /// The connection's number among the proxy's (from 1).
    pub fn connection(&self) -> u64 {
        self.connection
    }

    /// The journal entries whose statements' fates are known, in the order they were settled
    /// (the journal orders them by `seq`).
    pub fn take_journal(&mut self) -> Vec<Entry> {
        std::mem::take(&mut self.journal)
    }

    /// What to do with a message from the client, which arrived at `now_us`.
    pub fn on_client(
        &mut self,
        msg: &FrontendMessage,
        now_us: u64,
        host: &mut dyn Host,
    ) -> ToServer {
        if self.passive {
            return ToServer::forward();
        }
        self.clock_us = self.clock_us.max(now_us);
        match &msg.kind {
            Frontend::SslRequest | Frontend::GssEncRequest => {
                ToServer::answer(Bytes::from_static(answer::REFUSE_ENCRYPTION))
            }
            Frontend::Startup { user, database, .. } => {
                self.startup(user.as_deref(), database.as_deref(), now_us, host)
            }
            Frontend::Query { text } => {
                let p = self.prepare(text);
                self.statement(p, None, true, now_us, host)
            }
            Frontend::Parse { name, text } => {
                let p = self.prepare(text);
                self.prepared.insert(name.clone(), p);
                ToServer::forward()
            }
            Frontend::Bind {
                portal,
                statement,
                params,
            } => {
                let prepared = self.prepared.get(statement).cloned().unwrap_or(Prepared {
                    text: None,
                    truncated: false,
                    control: None,
                });
                self.portals.insert(
                    portal.clone(),
                    Portal {
                        prepared,
                        params: params.clone(),
                    },
                );
                ToServer::forward()
            }
            Frontend::Execute { portal, .. } => {
                let (p, params) = match self.portals.get(portal) {
                    Some(p) => (p.prepared.clone(), Some(p.params.clone())),
                    None => (
                        Prepared {
                            text: None,
                            truncated: false,
                            control: None,
                        },
                        None,
                    ),
                };
                self.statement(p, params, false, now_us, host)
            }
            Frontend::Sync => {
                if let Some(step) = self.over_pipeline(now_us, host) {
                    return step;
                }
                self.queue.push_back(Unit::Sync);
                if !self.block {
                    self.end_tx();
                }
                ToServer::forward()
            }
            Frontend::Close { target, name } => {
                if *target == b'S' {
                    self.prepared.remove(name);
                } else {
                    self.portals.remove(name);
                }
                ToServer::forward()
            }
            _ => ToServer::forward(),
        }
    }

    fn prepare(&self, text: &Bytes) -> Prepared {
        let (t, truncated) = sql::normalize(text, self.proxy.max_statement);
        Prepared {
            control: sql::control(&t),
            text: Some(Arc::from(t)),
            truncated,
        }
    }

    fn end_tx(&mut self) {
        self.in_tx = false;
        self.tx_digest = None;
    }

    fn startup(
        &mut self,
        user: Option<&str>,
        database: Option<&str>,
        now_us: u64,
        host: &mut dyn Host,
    ) -> ToServer {
        let subject = format!(
            "startup {} {}",
            user.unwrap_or(""),
            database.or(user).unwrap_or("")
        );
        let attempt = self.proxy.attempts.bump(&subject);
        let Some(d) = self
            .proxy
            .decide_startup(self.connection, (&subject, attempt))
        else {
            return ToServer::forward();
        };
        let mut entry = self.entry(now_us, host, &d);
        let mut pg = PgStatement {
            proxy: self.proxy.name.clone(),
            startup: true,
            ..PgStatement::default()
        };
        let step = match &d.fault {
            PgFault::Error(e) => {
                // PostgreSQL refuses a connection only with FATAL.
                pg.sqlstate = Some(e.sqlstate.clone());
                pg.message = Some(e.message().to_string());
                let mut s =
                    ToServer::answer(answer::error_response("FATAL", &e.sqlstate, e.message()));
                s.close = true;
                s
            }
            PgFault::Delay(delay) => {
                entry.forwarded = true;
                entry.t_done_us = now_us + delay.duration.as_micros() as u64;
                ToServer {
                    delay: delay.duration,
                    ..ToServer::forward()
                }
            }
            PgFault::Drop | PgFault::Reset => {
                entry.outcome = Outcome::Reset;
                ToServer::close()
            }
        };
        entry.protocol = Some(Protocol::Postgres(pg));
        self.journal.push(entry);
        step
    }

    fn entry(&self, now_us: u64, host: &mut dyn Host, d: &Decision) -> Entry {
        let mut e = blank(host.next_seq(), now_us, host.unix_us(now_us), self.conn_id);
        e.rule = Some(d.rule.clone());
        e.fault = Some(fault_name(&d.fault).to_string());
        e.draw = d.draw;
        e
    }

    fn statement(
        &mut self,
        p: Prepared,
        params: Option<String>,
        simple: bool,
        now_us: u64,
        host: &mut dyn Host,
    ) -> ToServer {
        if let Some(step) = self.over_pipeline(now_us, host) {
            return step;
        }
        if !self.in_tx {
            self.tx += 1;
            self.in_tx = true;
            self.tx_digest = None;
        }
        if p.control == Some(TxControl::Begin) {
            self.block = true;
        }
        let commit = (p.control == Some(TxControl::Commit)).then(|| {
            self.commits += 1;
            (self.proxy.next_commit(), self.commits)
        });
        let text = p.text.as_deref().unwrap_or("");
        let subject = self.proxy.needs_subjects().then(|| {
            let digest = self.tx_digest.get_or_insert_with(Sha256::new);
            digest.update(text.as_bytes());
            digest.update([0]);
            digest.update(params.as_deref().unwrap_or("").as_bytes());
            digest.update([0]);
            let d = digest.clone().finalize();
            let subject: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
            let attempt = self.proxy.attempts.bump(&subject);
            (subject, attempt)
        });
        let facts = StatementFacts {
            text,
            block: self.block,
            connection: self.connection,
            transaction: self.tx,
            commit,
            subject: subject.as_ref().map(|(s, a)| (s.as_str(), *a)),
        };
        let decision = self.proxy.decide(&facts);
        let mut entry = match &decision {
            Some(d) => self.entry(now_us, host, d),
            None => blank(host.next_seq(), now_us, host.unix_us(now_us), self.conn_id),
        };
        entry.forwarded = true;
        let pg = PgStatement {
            proxy: self.proxy.name.clone(),
            statement: p.text.as_deref().map(str::to_string),
            truncated: p.truncated,
            control: p.control,
            params,
            tx: self.tx,
            block: self.block,
            ..PgStatement::default()
        };
        // What the statement does to the transaction, for the statements behind it.
        if matches!(
            p.control,
            Some(TxControl::Commit | TxControl::Rollback | TxControl::Prepare)
        ) {
            self.block = false;
            self.end_tx();
        } else if simple && !self.block {
            self.end_tx();
        }
        let mut stmt = Box::new(Stmt {
            entry,
            pg,
            simple,
            action: Action::None,
            t_forward_us: now_us,
            t_done_us: None,
            held_until_us: 0,
            failed: false,
        });
        let mut step = ToServer::forward();
        if let Some(d) = decision {
            match d.fault {
                PgFault::Error(e) => {
                    let fatal = e.severity() == Severity::Fatal;
                    let severity = if fatal { "FATAL" } else { "ERROR" };
                    stmt.action = Action::Replace {
                        bytes: answer::error_response(severity, &e.sqlstate, e.message()),
                        sqlstate: e.sqlstate.clone(),
                        message: e.message().to_string(),
                        fatal,
                    };
                    stmt.entry.forwarded = false;
                    step.send = Outgoing::Replace(if simple {
                        answer::refused_query()
                    } else {
                        answer::refused_parse()
                    });
                }
                PgFault::Delay(delay) => match delay.when {
                    When::Before => {
                        step.delay = delay.duration;
                        stmt.t_forward_us = now_us + delay.duration.as_micros() as u64;
                    }
                    When::After => stmt.action = Action::After(delay.duration),
                },
                PgFault::Drop => stmt.action = Action::Drop,
                PgFault::Reset => {
                    stmt.entry.forwarded = false;
                    stmt.entry.outcome = Outcome::Reset;
                    stmt.pg.committed = Some(false);
                    stmt.t_done_us = Some(now_us);
                    self.emit(*stmt, now_us);
                    self.close_all(Side::Client, now_us);
                    return ToServer::close();
                }
            }
        }
        self.queue.push_back(Unit::Stmt(stmt));
        step
    }

    /// A client that sent more than the bound ahead of the answers (statements and Syncs):
    /// a violation, so that what the session holds for it stays bounded.
    fn over_pipeline(&mut self, now_us: u64, host: &mut dyn Host) -> Option<ToServer> {
        if self.queue.len() + self.held.len() < self.proxy.max_pipeline {
            return None;
        }
        let e = WireError::Malformed {
            protocol: "PostgreSQL",
            detail: format!(
                "more than {} statements and Syncs pipelined ahead of their answers",
                self.proxy.max_pipeline
            ),
        };
        Some(match self.on_violation(Side::Client, &e, now_us, host) {
            OnViolation::Close => ToServer::close(),
            OnViolation::Forward => ToServer::forward(),
        })
    }

    /// What to do with a message from the server, which arrived at `now_us`.
    pub fn on_server(&mut self, msg: &BackendMessage, now_us: u64) -> ToClient {
        if self.passive {
            return ToClient::relay();
        }
        self.clock_us = self.clock_us.max(now_us);
        if let Backend::Async { .. } = msg.kind {
            return if self.swallowing {
                ToClient::swallow()
            } else {
                ToClient::relay()
            };
        }
        let mut out = self.front_answered();
        match &msg.kind {
            Backend::Error(f) => {
                if let Some(Unit::Stmt(s)) = self.queue.front_mut() {
                    s.failed = true;
                    s.t_done_us = Some(now_us);
                    if let Action::Replace {
                        bytes,
                        sqlstate,
                        message,
                        fatal,
                    } = &s.action
                    {
                        out.relay = Relay::Replace(bytes.clone());
                        out.close = *fatal;
                        s.pg.sqlstate = Some(sqlstate.clone());
                        s.pg.message = Some(message.clone());
                    } else {
                        s.pg.sqlstate = Some(f.sqlstate.clone());
                        s.pg.message = Some(bounded(&f.message, MAX_MESSAGE));
                    }
                    if !s.simple {
                        // The database skips the rest of the pipeline up to its Sync.
                        self.pop_front_to_held();
                        while let Some(Unit::Stmt(_)) = self.queue.front() {
                            if let Some(Unit::Stmt(mut s)) = self.queue.pop_front() {
                                s.pg.skipped = true;
                                s.t_done_us = Some(now_us);
                                self.held.push(*s);
                            }
                        }
                    }
                }
            }
            Backend::CommandComplete { .. } | Backend::EmptyQuery | Backend::PortalSuspended => {
                if let Some(Unit::Stmt(s)) = self.queue.front_mut() {
                    if let Backend::CommandComplete { tag } = &msg.kind {
                        s.pg.tag = Some(bounded(tag, 100));
                    }
                    s.t_done_us = Some(now_us);
                    if !s.simple {
                        self.pop_front_to_held();
                    }
                }
            }
            Backend::ReadyForQuery { status } => {
                while let Some(Unit::Stmt(mut s)) = self.queue.pop_front() {
                    let simple = s.simple;
                    if s.t_done_us.is_none() {
                        // A pipelined statement that got no answer of its own.
                        s.pg.skipped = !simple;
                    }
                    s.t_done_us = Some(now_us);
                    self.held.push(*s);
                    if simple {
                        break;
                    }
                }
                self.settle(*status, now_us);
                if self.queue.is_empty() {
                    self.block = *status != TxStatus::Idle;
                    if !self.block {
                        self.end_tx();
                    } else {
                        self.in_tx = true;
                    }
                }
                if self.swallowing {
                    out.close = true;
                }
            }
            Backend::Async { .. } | Backend::Other { .. } => {}
        }
        if self.swallowing {
            out.relay = Relay::Swallow;
        }
        out
    }

    /// What to do with a piece of a DataRow or CopyData from the server (`first`: the first of
    /// its message).
    pub fn on_server_piece(&mut self, first: bool) -> ToClient {
        if self.passive {
            return ToClient::relay();
        }
        let mut out = if first {
            self.front_answered()
        } else {
            ToClient::relay()
        };
        if self.swallowing {
            out.relay = Relay::Swallow;
        }
        out
    }

    /// The statement at the head of the queue is being answered: its `drop` starts withholding,
    /// its `delay: after` holds this first message of its answer.
    fn front_answered(&mut self) -> ToClient {
        let mut out = ToClient::relay();
        if let Some(Unit::Stmt(s)) = self.queue.front_mut() {
            match s.action {
                Action::Drop => {
                    self.swallowing = true;
                    s.entry.outcome = Outcome::Dropped;
                }
                Action::After(d) => {
                    out.delay = d;
                    s.held_until_us = self.clock_us + d.as_micros() as u64;
                    s.action = Action::None;
                }
                _ => {}
            }
        }
        out
    }

    fn pop_front_to_held(&mut self) {
        if let Some(Unit::Stmt(s)) = self.queue.pop_front() {
            self.held.push(*s);
        }
    }

    /// The statements answered up to a ReadyForQuery: which transaction ended, and whether it
    /// committed; then their entries.
    fn settle(&mut self, status: TxStatus, now_us: u64) {
        let mut stmts = std::mem::take(&mut self.held);
        for s in stmts.iter_mut() {
            s.pg.status = Some(status);
            match s.pg.control {
                Some(TxControl::Commit) if !s.pg.skipped => {
                    s.pg.committed = Some(
                        !s.failed && s.pg.tag.as_deref().is_some_and(|t| t.starts_with("COMMIT")),
                    );
                }
                Some(TxControl::Rollback) if !s.pg.skipped => s.pg.committed = Some(false),
                _ => {}
            }
        }
        // A transaction outside a block ends with the pipeline (or Query) that ran it.
        if status == TxStatus::Idle {
            if let Some(last) = stmts.last() {
                let tx = last.pg.tx;
                if last.pg.committed.is_none() && last.pg.control != Some(TxControl::Prepare) {
                    let failed = stmts
                        .iter()
                        .filter(|s| s.pg.tx == tx)
                        .any(|s| s.failed || s.pg.skipped);
                    let rolled_back = last.pg.tag.as_deref() == Some("ROLLBACK");
                    if let Some(last) = stmts.last_mut() {
                        last.pg.committed = Some(!failed && !rolled_back);
                    }
                }
            }
        }
        for s in stmts {
            self.emit(s, now_us);
        }
    }

    fn emit(&mut self, s: Stmt, now_us: u64) {
        let Stmt {
            mut entry,
            pg,
            t_forward_us,
            t_done_us,
            held_until_us,
            ..
        } = s;
        let done = t_done_us.unwrap_or(now_us);
        entry.t_done_us = if entry.outcome == Outcome::Dropped {
            now_us
        } else {
            // An answer held by `delay: after` was relayed when the hold ended.
            done.max(held_until_us)
        };
        if entry.forwarded && t_done_us.is_some() {
            entry.upstream_us = Some(done.saturating_sub(t_forward_us));
        }
        entry.protocol = Some(Protocol::Postgres(pg));
        self.journal.push(entry);
    }

    /// Every statement still in flight is journaled with how the connection ended.
    fn close_all(&mut self, by: Side, now_us: u64) {
        let mut stmts = std::mem::take(&mut self.held);
        while let Some(u) = self.queue.pop_front() {
            if let Unit::Stmt(s) = u {
                stmts.push(*s);
            }
        }
        let n = stmts.len();
        for (i, mut s) in stmts.into_iter().enumerate() {
            if s.entry.outcome == Outcome::Responded {
                s.entry.outcome = if self.swallowing {
                    Outcome::Dropped
                } else {
                    match by {
                        Side::Client => Outcome::ClientClosed,
                        Side::Server => Outcome::UpstreamError,
                    }
                };
            }
            // The last statement of a transaction the connection took down with it: rolled
            // back, unless it was the COMMIT itself, which may have reached the database.
            if i + 1 == n && s.pg.committed.is_none() && s.pg.control != Some(TxControl::Commit) {
                s.pg.committed = Some(false);
            }
            self.emit(s, now_us);
        }
        self.end_tx();
        self.block = false;
    }

    /// The connection ended (`by` closed it, or the proxy did on a `ToServer`/`ToClient` that
    /// said `close`): what was in flight is journaled.
    pub fn on_closed(&mut self, by: Side, now_us: u64) {
        self.close_all(by, now_us);
    }

    /// A reader refused `from`'s bytes: the violation is journaled, what was in flight is
    /// settled, and the proxy is told what to do with the connection (its configuration's
    /// `on_violation`); after `forward` the session lets everything through unread.
    pub fn on_violation(
        &mut self,
        from: Side,
        e: &WireError,
        now_us: u64,
        host: &mut dyn Host,
    ) -> OnViolation {
        let mut entry = blank(host.next_seq(), now_us, host.unix_us(now_us), self.conn_id);
        entry.outcome = Outcome::Rejected;
        entry.rejected = Some(match from {
            Side::Client => "client-protocol".to_string(),
            Side::Server => "server-protocol".to_string(),
        });
        entry.protocol = Some(Protocol::Postgres(PgStatement {
            proxy: self.proxy.name.clone(),
            tx: self.tx,
            violation: Some(bounded(&e.to_string(), MAX_MESSAGE)),
            ..PgStatement::default()
        }));
        self.close_all(from, now_us);
        self.journal.push(entry);
        self.passive = true;
        self.proxy.on_violation
    }
}

fn fault_name(f: &PgFault) -> &'static str {
    match f {
        PgFault::Error(_) => "error",
        PgFault::Delay(_) => "delay",
        PgFault::Drop => "drop",
        PgFault::Reset => "reset",
    }
}
