//! A PostgreSQL connection's state machine, fed scripted conversations: the client's side as
//! `postgres-protocol` writes it (the bytes tokio-postgres sends), the server's as PostgreSQL
//! answers, both through the readers, in the order a proxy would see them.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use history::{Entry, Outcome, PgStatement, TxControl, TxStatus};
use postgres_protocol::message::frontend;
use wire_faults::config::PostgresConfig;
use wire_faults::pg::{
    answer, BackendItem, BackendReader, Frontend, FrontendItem, FrontendReader, PgProxy, PgSession,
};
use wire_faults::{Draw, Host, Outgoing, Relay, Side, ToClient, ToServer};

struct Clock {
    seq: u64,
}

impl Host for Clock {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
    fn unix_us(&self, t_us: u64) -> u64 {
        1_700_000_000_000_000 + t_us
    }
}

fn draw(seed: u64) -> Arc<dyn Draw> {
    Arc::new(move |rule: &str, subject: &str, attempt: u64| {
        use std::hash::{Hash, Hasher};
        // A stand-in for the fault server's draw: stable within a test run.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (seed, rule, subject, attempt).hash(&mut h);
        (h.finish() >> 11) as f64 / (1u64 << 53) as f64
    })
}

fn proxy(rules: &str) -> Arc<PgProxy> {
    let cfg = PostgresConfig::from_yaml(rules, "test").unwrap_or_else(|e| panic!("{e}"));
    PgProxy::new("db", &cfg, draw(7))
}

/// One proxied connection: bytes in from each side, the session's steps out.
struct Conn {
    session: PgSession,
    client: FrontendReader,
    server: BackendReader,
    host: Clock,
    now: u64,
    journal: Vec<Entry>,
}

impl Conn {
    fn new(proxy: &Arc<PgProxy>) -> Conn {
        Conn {
            session: PgSession::new(proxy, 1),
            client: FrontendReader::new(1 << 20),
            server: BackendReader::new(1 << 20),
            host: Clock { seq: 0 },
            now: 0,
            journal: Vec::new(),
        }
    }

    /// The client sends `bytes`: the step for each message, with its kind.
    fn client(&mut self, bytes: &[u8]) -> Vec<(Frontend, ToServer)> {
        self.now += 100;
        self.client.push(bytes);
        let mut out = Vec::new();
        while let Some(item) = self
            .client
            .next_item()
            .expect("the client's bytes are valid")
        {
            if let FrontendItem::Message(m) = item {
                let step = self.session.on_client(&m, self.now, &mut self.host);
                out.push((m.kind, step));
            }
        }
        self.journal.extend(self.session.take_journal());
        out
    }

    /// The server sends `bytes`: the step for each message.
    fn server(&mut self, bytes: &[u8]) -> Vec<ToClient> {
        self.now += 1000;
        self.server.push(bytes);
        let mut out = Vec::new();
        while let Some(item) = self
            .server
            .next_item()
            .expect("the server's bytes are valid")
        {
            let step = match item {
                BackendItem::Message(m) => self.session.on_server(&m, self.now),
                BackendItem::Piece(p) => self.session.on_server_piece(p.first),
            };
            out.push(step);
        }
        self.journal.extend(self.session.take_journal());
        out
    }

    fn statements(&self) -> Vec<&PgStatement> {
        self.journal.iter().filter_map(|e| e.postgres()).collect()
    }

    fn startup(&mut self) {
        let mut b = BytesMut::new();
        frontend::startup_message([("user", "app"), ("database", "shop")], &mut b).unwrap();
        let steps = self.client(&b);
        assert_eq!(steps[0].1, ToServer::forward());
        let mut s = BytesMut::new();
        s.extend_from_slice(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
        s.extend_from_slice(&answer::ready_for_query(TxStatus::Idle));
        for step in self.server(&s) {
            assert_eq!(step, ToClient::relay());
        }
    }
}

fn query(text: &str) -> BytesMut {
    let mut b = BytesMut::new();
    frontend::query(text, &mut b).unwrap();
    b
}

/// Parse, Bind (one text parameter), Describe, Execute: one statement of a pipeline.
fn extended(b: &mut BytesMut, text: &str, value: &str) {
    frontend::parse("", text, [], b).unwrap();
    frontend::bind(
        "",
        "",
        [0],
        [value],
        |v, out| {
            out.extend_from_slice(v.as_bytes());
            Ok(postgres_protocol::IsNull::No)
        },
        [],
        b,
    )
    .map_err(|_| "bind")
    .unwrap();
    frontend::describe(b'P', "", b).unwrap();
    frontend::execute("", 0, b).unwrap();
}

fn sync(b: &mut BytesMut) {
    frontend::sync(b);
}

/// The server's answer to one statement of a pipeline that succeeded.
fn ok_answer(tag: &str) -> Vec<u8> {
    let mut v = vec![b'1', 0, 0, 0, 4, b'2', 0, 0, 0, 4, b'n', 0, 0, 0, 4];
    v.extend_from_slice(&answer::command_complete(tag));
    v
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn an_ssl_request_is_refused_so_the_client_goes_on_in_plaintext() {
    let p = proxy("{}");
    let mut c = Conn::new(&p);
    let mut b = BytesMut::new();
    frontend::ssl_request(&mut b);
    let steps = c.client(&b);
    assert_eq!(steps[0].0, Frontend::SslRequest);
    assert_eq!(steps[0].1, ToServer::answer(Bytes::from_static(b"N")));
    c.startup();
    assert!(c.journal.is_empty(), "a plain startup is no statement");
}

#[test]
fn transactions_are_numbered_and_their_commits_journaled() {
    let p = proxy("{}");
    let mut c = Conn::new(&p);
    c.startup();
    // Autocommit: a statement is its own transaction.
    c.client(&query("INSERT INTO t VALUES (1)"));
    c.server(&cat(&[
        &answer::command_complete("INSERT 0 1"),
        &answer::ready_for_query(TxStatus::Idle),
    ]));
    // A block over three simple queries.
    for (q, tag, status) in [
        ("BEGIN", "BEGIN", TxStatus::Transaction),
        ("UPDATE t SET a = 2", "UPDATE 1", TxStatus::Transaction),
        ("COMMIT", "COMMIT", TxStatus::Idle),
    ] {
        c.client(&query(q));
        c.server(&cat(&[
            &answer::command_complete(tag),
            &answer::ready_for_query(status),
        ]));
    }
    let s = c.statements();
    assert_eq!(s.len(), 4);
    assert_eq!(
        (s[0].tx, s[0].block, s[0].committed),
        (1, false, Some(true))
    );
    assert_eq!(s[1].control, Some(TxControl::Begin));
    assert!(s[1..].iter().all(|x| x.tx == 2 && x.block), "{s:?}");
    assert_eq!((s[1].committed, s[2].committed), (None, None));
    assert_eq!(s[3].control, Some(TxControl::Commit));
    assert_eq!(
        (s[3].tag.as_deref(), s[3].committed),
        (Some("COMMIT"), Some(true))
    );
    assert_eq!(s[3].status, Some(TxStatus::Idle));
    // Journal order is arrival order; times and seqs are the ones taken at arrival.
    let seqs: Vec<u64> = c.journal.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert!(c
        .journal
        .iter()
        .all(|e| e.t_done_us > e.t_recv_us && e.forwarded));
    assert!(c.journal.iter().all(|e| e.upstream_us.is_some()));
}

#[test]
fn a_serialization_failure_is_answered_in_the_statements_place_and_the_block_fails() {
    let p = proxy("rules:\n  - id: serialize\n    match: { statement: \"INSERT INTO orders*\" }\n    fault: { error: \"40001\" }\n");
    let mut c = Conn::new(&p);
    c.startup();
    c.client(&query("BEGIN"));
    c.server(&cat(&[
        &answer::command_complete("BEGIN"),
        &answer::ready_for_query(TxStatus::Transaction),
    ]));
    let mut b = BytesMut::new();
    extended(&mut b, "INSERT INTO orders (sku) VALUES ($1)", "sku-1");
    sync(&mut b);
    let steps = c.client(&b);
    // Parse, Bind, Describe go on; the Execute is replaced by a statement the server refuses.
    assert_eq!(steps.len(), 5);
    assert!(steps[..3].iter().all(|(_, s)| *s == ToServer::forward()));
    assert_eq!(steps[3].1.send, Outgoing::Replace(answer::refused_parse()));
    assert_eq!(steps[4].1, ToServer::forward());
    // The server refuses it (syntax error), skips to the Sync, and its block is now failed.
    let refused = answer::error_response("ERROR", "42601", "syntax error at or near \"INJECTED\"");
    let replies = c.server(&cat(&[
        &[b'1', 0, 0, 0, 4, b'2', 0, 0, 0, 4, b'n', 0, 0, 0, 4],
        &refused,
        &answer::ready_for_query(TxStatus::Failed),
    ]));
    assert_eq!(replies.len(), 5);
    assert_eq!(
        replies[3].relay,
        Relay::Replace(answer::error_response(
            "ERROR",
            "40001",
            "could not serialize access due to concurrent update"
        ))
    );
    assert!(!replies[3].close);
    assert_eq!(replies[4], ToClient::relay());
    c.client(&query("ROLLBACK"));
    c.server(&cat(&[
        &answer::command_complete("ROLLBACK"),
        &answer::ready_for_query(TxStatus::Idle),
    ]));
    let s = c.statements();
    assert_eq!(s[1].sqlstate.as_deref(), Some("40001"));
    assert_eq!(s[1].status, Some(TxStatus::Failed));
    assert!(
        s[1].params.as_ref().is_some_and(|p| p.len() == 16),
        "a digest, not the value"
    );
    assert_eq!(c.journal[1].rule.as_deref(), Some("serialize"));
    assert_eq!(c.journal[1].fault.as_deref(), Some("error"));
    assert!(!c.journal[1].forwarded);
    assert_eq!(
        (s[2].control, s[2].committed),
        (Some(TxControl::Rollback), Some(false))
    );
    assert_eq!(s[2].tx, s[1].tx);
}

#[test]
fn a_dropped_commit_reaches_the_database_and_its_answer_does_not_reach_the_client() {
    let p = proxy("rules:\n  - { id: lose-commit, match: { statement: COMMIT }, fault: drop }\n");
    let mut c = Conn::new(&p);
    c.startup();
    c.client(&query("BEGIN"));
    c.server(&cat(&[
        &answer::command_complete("BEGIN"),
        &answer::ready_for_query(TxStatus::Transaction),
    ]));
    let steps = c.client(&query("COMMIT"));
    assert_eq!(
        steps[0].1,
        ToServer::forward(),
        "the COMMIT goes to the database"
    );
    let replies = c.server(&cat(&[
        &answer::command_complete("COMMIT"),
        &answer::ready_for_query(TxStatus::Idle),
    ]));
    assert!(replies.iter().all(|r| r.relay == Relay::Swallow));
    assert!(
        !replies[0].close && replies[1].close,
        "closed once the outcome is known"
    );
    c.session.on_closed(Side::Client, c.now);
    c.journal.extend(c.session.take_journal());
    let commit = &c.journal[1];
    assert_eq!(commit.outcome, Outcome::Dropped);
    assert_eq!(commit.fault.as_deref(), Some("drop"));
    let s = commit.postgres().expect("a statement");
    assert_eq!(
        (s.tag.as_deref(), s.committed),
        (Some("COMMIT"), Some(true))
    );
}

#[test]
fn after_an_error_in_a_pipeline_the_rest_up_to_sync_is_skipped() {
    let p = proxy("{}");
    let mut c = Conn::new(&p);
    c.startup();
    let mut b = BytesMut::new();
    extended(&mut b, "INSERT INTO a VALUES ($1)", "1");
    extended(&mut b, "INSERT INTO b VALUES ($1)", "2");
    extended(&mut b, "INSERT INTO c VALUES ($1)", "3");
    sync(&mut b);
    c.client(&b);
    c.server(&cat(&[
        &ok_answer("INSERT 0 1"),
        &[b'1', 0, 0, 0, 4, b'2', 0, 0, 0, 4, b'n', 0, 0, 0, 4],
        &answer::error_response("ERROR", "23505", "duplicate key value"),
        &answer::ready_for_query(TxStatus::Idle),
    ]));
    let s = c.statements();
    assert_eq!(s.len(), 3);
    assert!(
        s.iter().all(|x| x.tx == 1),
        "one implicit transaction up to the Sync"
    );
    assert_eq!(s[0].tag.as_deref(), Some("INSERT 0 1"));
    assert_eq!(s[1].sqlstate.as_deref(), Some("23505"));
    assert!(s[2].skipped && s[2].tag.is_none());
    assert_eq!(
        s[2].committed,
        Some(false),
        "the implicit transaction was rolled back"
    );
    // The next pipeline is the next transaction.
    let mut b = BytesMut::new();
    extended(&mut b, "SELECT $1", "x");
    sync(&mut b);
    c.client(&b);
    c.server(&cat(&[
        &ok_answer("SELECT 1"),
        &answer::ready_for_query(TxStatus::Idle),
    ]));
    let s = c.statements();
    assert_eq!((s[3].tx, s[3].committed), (2, Some(true)));
}

#[test]
fn commits_are_counted_per_connection_and_over_the_proxy() {
    let p = proxy(
        "rules:\n  - { id: first-two, match: { connection_commits: \"1-2\" }, fault: { delay: 5ms } }\n  - { id: fifth, match: { commits: 5 }, fault: reset }\n",
    );
    let run_block = |c: &mut Conn| -> ToServer {
        c.client(&query("BEGIN"));
        c.server(&cat(&[
            &answer::command_complete("BEGIN"),
            &answer::ready_for_query(TxStatus::Transaction),
        ]));
        let step = c.client(&query("COMMIT")).remove(0).1;
        if step.close {
            return step;
        }
        c.server(&cat(&[
            &answer::command_complete("COMMIT"),
            &answer::ready_for_query(TxStatus::Idle),
        ]));
        step
    };
    let mut a = Conn::new(&p);
    a.startup();
    let mut b = Conn::new(&p);
    b.startup();
    let delayed = |s: &ToServer| s.delay == Duration::from_millis(5);
    // Connection a: COMMITs 1, 2 (delayed: its first two), 3 (not).
    assert!(delayed(&run_block(&mut a)));
    assert!(delayed(&run_block(&mut a)));
    assert!(!delayed(&run_block(&mut a)));
    // Connection b: its first COMMIT is the proxy's 4th (delayed: b's first), its second the
    // 5th (b's second, but the first rule matches first).
    assert!(delayed(&run_block(&mut b)));
    assert!(delayed(&run_block(&mut b)));
    // The 6th overall is b's third: nothing.
    let s = run_block(&mut b);
    assert!(!s.close && !delayed(&s));
    // A fresh proxy where b's second COMMIT is the 5th and no longer delayed: reset.
    let p = proxy("rules:\n  - { id: fifth, match: { commits: 5 }, fault: reset }\n");
    let mut c = Conn::new(&p);
    c.startup();
    for _ in 0..4 {
        assert!(!run_block(&mut c).close);
    }
    let s = run_block(&mut c);
    assert!(s.close, "the fifth COMMIT is cut before it is forwarded");
    c.journal.extend(c.session.take_journal());
    let cut = c.journal.last().expect("journaled");
    assert_eq!(cut.outcome, Outcome::Reset);
    assert_eq!(cut.postgres().and_then(|s| s.committed), Some(false));
}

#[test]
fn the_nth_transaction_of_a_connection_matches_every_statement_in_it() {
    let p = proxy("rules:\n  - { id: second, match: { transactions: 2, in_block: true }, fault: { delay: { duration: 1s, when: after } } }\n");
    let mut c = Conn::new(&p);
    c.startup();
    c.client(&query("SELECT 1"));
    c.server(&cat(&[
        &answer::command_complete("SELECT 1"),
        &answer::ready_for_query(TxStatus::Idle),
    ]));
    c.client(&query("BEGIN"));
    let replies = c.server(&cat(&[
        &answer::command_complete("BEGIN"),
        &answer::ready_for_query(TxStatus::Transaction),
    ]));
    assert_eq!(
        replies[0].delay,
        Duration::from_secs(1),
        "the answer is held"
    );
    assert_eq!(replies[1].delay, Duration::ZERO, "once per statement");
    assert_eq!(c.journal[1].rule.as_deref(), Some("second"));
    assert_eq!(c.journal[0].rule, None);
}

#[test]
fn probabilities_replay_whatever_the_order_of_connections() {
    let rules = "rules:\n  - { id: coin, match: { statement: \"INSERT*\", probability: 0.5 }, fault: { error: \"40P01\" } }\n";
    let faulted = |order: &[usize]| -> Vec<bool> {
        let p = proxy(rules);
        let mut out = vec![false; order.len()];
        for &i in order {
            let mut c = Conn::new(&p);
            c.startup();
            let mut b = BytesMut::new();
            extended(
                &mut b,
                "INSERT INTO orders VALUES ($1)",
                &format!("order-{i}"),
            );
            sync(&mut b);
            let steps = c.client(&b);
            out[i] = matches!(steps[3].1.send, Outgoing::Replace(_));
        }
        out
    };
    let forward: Vec<usize> = (0..64).collect();
    let backward: Vec<usize> = (0..64).rev().collect();
    let a = faulted(&forward);
    assert_eq!(
        a,
        faulted(&backward),
        "the same statements, whatever the order"
    );
    let n = a.iter().filter(|x| **x).count();
    assert!((16..=48).contains(&n), "{n} of 64");
}

#[test]
fn a_retry_of_the_same_transaction_draws_again() {
    // With probability 0.5, some transaction fails on its first attempt and passes on a later
    // one: the attempt is part of the draw, so a retry is not doomed to the first one's fate.
    let p = proxy(
        "rules:\n  - { id: coin, match: { probability: 0.5 }, fault: { error: \"40001\" } }\n",
    );
    let mut outcomes = Vec::new();
    for _ in 0..20 {
        let mut c = Conn::new(&p);
        c.startup();
        let steps = c.client(&query("INSERT INTO t VALUES ('same')"));
        outcomes.push(matches!(steps[0].1.send, Outgoing::Replace(_)));
    }
    assert!(
        outcomes.iter().any(|x| *x) && outcomes.iter().any(|x| !*x),
        "{outcomes:?}"
    );
}

#[test]
fn a_startup_rule_refuses_a_connection_as_postgresql_does() {
    let p = proxy("rules:\n  - { id: full, match: { startup: true, connections: 2 }, fault: { error: \"53300\" } }\n");
    let mut first = Conn::new(&p);
    first.startup();
    let mut second = Conn::new(&p);
    let mut b = BytesMut::new();
    frontend::startup_message([("user", "app")], &mut b).unwrap();
    let step = second.client(&b).remove(0).1;
    assert_eq!(step.send, Outgoing::Nothing);
    assert!(step.close);
    assert_eq!(
        step.answer,
        Some(answer::error_response(
            "FATAL",
            "53300",
            "sorry, too many clients already"
        ))
    );
    let e = &second.journal[0];
    let s = e.postgres().expect("journaled");
    assert!(s.startup && s.sqlstate.as_deref() == Some("53300"));
}

#[test]
fn a_fatal_error_closes_after_it_and_a_lost_connection_rolls_back() {
    let p = proxy("rules:\n  - { match: { statement: \"UPDATE*\" }, fault: { error: 57P01 } }\n");
    let mut c = Conn::new(&p);
    c.startup();
    c.client(&query("BEGIN"));
    c.server(&cat(&[
        &answer::command_complete("BEGIN"),
        &answer::ready_for_query(TxStatus::Transaction),
    ]));
    let step = c.client(&query("UPDATE t SET a = 1")).remove(0).1;
    assert_eq!(step.send, Outgoing::Replace(answer::refused_query()));
    let replies = c.server(&answer::error_response("ERROR", "42601", "syntax error"));
    assert!(replies[0].close);
    assert!(matches!(&replies[0].relay, Relay::Replace(b) if b.windows(5).any(|w| w == b"FATAL")));
    c.session.on_closed(Side::Server, c.now);
    c.journal.extend(c.session.take_journal());
    let s = c.statements();
    assert_eq!(s[1].sqlstate.as_deref(), Some("57P01"));
    assert_eq!(
        s[1].committed,
        Some(false),
        "the block died with its connection"
    );
}

#[test]
fn a_client_that_breaks_the_protocol_is_journaled_and_the_proxy_told() {
    let p = proxy("{}");
    let mut c = Conn::new(&p);
    c.client.push(b"GET / HTTP/1.1\r\n\r\n");
    let e = c.client.next_item().expect_err("not PostgreSQL");
    let verdict = c.session.on_violation(Side::Client, &e, 5, &mut c.host);
    assert_eq!(verdict, wire_faults::config::OnViolation::Close);
    let j = c.session.take_journal();
    assert_eq!(j[0].outcome, Outcome::Rejected);
    assert_eq!(j[0].rejected.as_deref(), Some("client-protocol"));
    let v = j[0]
        .postgres()
        .and_then(|s| s.violation.clone())
        .expect("said");
    assert!(v.contains("HTTP"), "{v}");
}

#[test]
fn a_data_row_passes_in_pieces_and_a_dropped_answer_withholds_them() {
    let p = proxy("rules:\n  - { match: { statement: \"SELECT*\" }, fault: drop }\n");
    let mut c = Conn::new(&p);
    c.startup();
    c.client(&query("SELECT big FROM t"));
    let mut row = vec![b'D'];
    row.extend_from_slice(&(4 + 2 + 4 + 5000u32).to_be_bytes());
    row.extend_from_slice(&1u16.to_be_bytes());
    row.extend_from_slice(&5000u32.to_be_bytes());
    row.extend_from_slice(&[b'x'; 5000]);
    let replies = c.server(&row[..3000]);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].relay, Relay::Swallow);
    let replies = c.server(&cat(&[
        &row[3000..],
        &answer::command_complete("SELECT 1"),
        &answer::ready_for_query(TxStatus::Idle),
    ]));
    assert!(replies.iter().all(|r| r.relay == Relay::Swallow));
    assert!(replies.last().is_some_and(|r| r.close));
}

#[test]
fn a_pipeline_deeper_than_the_bound_is_a_violation_and_nothing_grows() {
    let p = proxy("max_pipeline: 4\n");
    let mut c = Conn::new(&p);
    c.startup();
    let mut b = BytesMut::new();
    for _ in 0..3 {
        frontend::sync(&mut b);
    }
    frontend::query("SELECT 1", &mut b).unwrap();
    frontend::sync(&mut b);
    let steps = c.client(&b);
    assert!(steps[..4].iter().all(|(_, s)| !s.close));
    assert!(steps[4].1.close, "the fifth unit ahead of the answers");
    let v = c
        .journal
        .last()
        .and_then(|e| e.postgres())
        .and_then(|s| s.violation.clone());
    assert!(v.is_some_and(|v| v.contains("more than 4")));
    // The statement in flight is settled, not left behind.
    assert!(c
        .statements()
        .iter()
        .any(|s| s.statement.as_deref() == Some("SELECT 1")));
}
