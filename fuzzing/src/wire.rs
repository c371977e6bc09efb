//! The protocol-aware proxies' readers and state machines on arbitrary bytes: a client's and a
//! server's streams, cut into pieces of a size the input chooses and interleaved, through the
//! readers into a session that has rules of every kind.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use wire_faults::config::{PostgresConfig, RedisConfig};
use wire_faults::pg::{
    BackendItem, BackendReader, FrontendItem, FrontendReader, PgProxy, PgSession,
};
use wire_faults::resp::{RedisProxy, RedisSession, RespReader};
use wire_faults::{Host, Side};

const MAX_MESSAGE: usize = 4096;

/// Numbers seqs and remembers which it gave out.
struct Taken(BTreeSet<u64>);

impl Host for Taken {
    fn next_seq(&mut self) -> u64 {
        let n = self.0.len() as u64 + 1;
        self.0.insert(n);
        n
    }
    fn unix_us(&self, t_us: u64) -> u64 {
        t_us
    }
}

/// The input as (piece size, client bytes, server bytes).
fn split(data: &[u8]) -> Option<(usize, &[u8], &[u8])> {
    let (&[piece, ratio], rest) = data.split_first_chunk::<2>()?;
    let at = rest.len() * usize::from(ratio) / 255;
    let (client, server) = rest.split_at(at);
    Some((usize::from(piece % 64) + 1, client, server))
}

fn draw() -> Arc<dyn wire_faults::Draw> {
    Arc::new(|rule: &str, subject: &str, attempt: u64| {
        let h = rule.len() as u64 * 31 + subject.bytes().map(u64::from).sum::<u64>() + attempt;
        (h % 100) as f64 / 100.0
    })
}

/// Every seq a session took is in exactly one entry, and each entry is a protocol entry.
fn all_given_back(taken: &Taken, journal: &[wire_faults::Entry]) {
    let given: BTreeSet<u64> = journal.iter().map(|e| e.seq).collect();
    assert_eq!(given.len(), journal.len(), "a seq journaled twice");
    assert_eq!(
        given, taken.0,
        "a seq taken and never journaled, or the reverse"
    );
    assert!(journal.iter().all(|e| e.is_protocol()));
}

/// PostgreSQL: the first input byte sizes the pieces, the second splits the rest into the
/// client's and the server's streams (a valid startup is put before the client's when the
/// piece byte's top bit is set, to reach the typed messages sooner).
pub fn pg_wire(data: &[u8]) {
    let Some((piece, client, server)) = split(data) else {
        return;
    };
    // Parsed once (its regex compiled once); the proxy, with its counts, is new per input.
    static CONFIG: OnceLock<PostgresConfig> = OnceLock::new();
    let cfg = CONFIG.get_or_init(|| {
        PostgresConfig::from_yaml(
            r#"
max_message: 4KiB
max_statement: 64
max_pipeline: 8
rules:
  - { match: { statement: "COMMIT*" }, fault: drop }
  - { match: { statement_regex: "(?i)^insert" }, fault: { error: "40001" } }
  - { match: { transactions: 3 }, fault: { delay: { duration: 1ms, when: after } } }
  - { match: { connection_commits: 2 }, fault: reset }
  - { match: { startup: true, probability: 0.3 }, fault: { error: "53300" } }
  - { match: { probability: 0.2 }, fault: { error: { sqlstate: 57P01 } } }
"#,
            "fuzz",
        )
        .expect("the fuzz rules are valid")
    });
    let proxy = PgProxy::new("db", cfg, draw());
    let mut session = PgSession::new(&proxy, 1);
    let mut host = Taken(BTreeSet::new());
    let mut journal = Vec::new();
    let mut front = FrontendReader::new(MAX_MESSAGE);
    let mut back = BackendReader::new(MAX_MESSAGE);
    if data[0] & 0x80 != 0 {
        front.push(&[
            0, 0, 0, 16, 0, 3, 0, 0, b'u', b's', b'e', b'r', 0, b'u', 0, 0,
        ]);
    }
    let (mut c, mut s) = (client.chunks(piece), server.chunks(piece));
    let mut now = 0;
    let mut closed = false;
    while !closed {
        let (a, b) = (c.next(), s.next());
        if a.is_none() && b.is_none() {
            break;
        }
        now += 10;
        if let Some(a) = a {
            front.push(a);
            loop {
                match front.next_item() {
                    Ok(Some(FrontendItem::Message(m))) => {
                        closed |= session.on_client(&m, now, &mut host).close;
                    }
                    Ok(Some(FrontendItem::Piece(_))) => {}
                    Ok(None) => break,
                    Err(e) => {
                        session.on_violation(Side::Client, &e, now, &mut host);
                        closed = true;
                        break;
                    }
                }
                assert!(front.buffered() <= MAX_MESSAGE + piece + 16);
            }
        }
        if let Some(b) = b {
            back.push(b);
            loop {
                match back.next_item() {
                    Ok(Some(BackendItem::Message(m))) => {
                        closed |= session.on_server(&m, now).close;
                    }
                    Ok(Some(BackendItem::Piece(p))) => {
                        closed |= session.on_server_piece(p.first).close;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        session.on_violation(Side::Server, &e, now, &mut host);
                        closed = true;
                        break;
                    }
                }
                assert!(back.buffered() <= MAX_MESSAGE + piece);
            }
        }
        journal.extend(session.take_journal());
    }
    if let Err(e) = front.finish() {
        assert!(!e.to_string().is_empty());
    }
    session.on_closed(Side::Client, now + 1);
    journal.extend(session.take_journal());
    all_given_back(&host, &journal);
    for e in &journal {
        if let Some(s) = e.postgres().and_then(|p| p.statement.as_ref()) {
            assert!(s.len() <= 64, "a statement over the journal's bound");
        }
    }
}

/// Redis: as [`pg_wire`], with commands and replies.
pub fn resp_wire(data: &[u8]) {
    let Some((piece, client, server)) = split(data) else {
        return;
    };
    static CONFIG: OnceLock<RedisConfig> = OnceLock::new();
    let cfg = CONFIG.get_or_init(|| {
        RedisConfig::from_yaml(
            r#"
max_message: 4KiB
max_key: 16
max_pipeline: 8
rules:
  - { match: { command: GET, key: "s*" }, fault: { error: LOADING } }
  - { match: { command: [SET, DEL] }, fault: drop }
  - { match: { commands: "every 3" }, fault: { error: { code: MOVED, to: "127.0.0.1:7000" } } }
  - { match: { command: PING }, fault: reset }
  - { match: { probability: 0.3 }, fault: { delay: { duration: 1ms, when: after } } }
"#,
            "fuzz",
        )
        .expect("the fuzz rules are valid")
    });
    let proxy = RedisProxy::new("cache", cfg, draw());
    let mut session = RedisSession::new(&proxy, 1);
    let mut host = Taken(BTreeSet::new());
    let mut journal = Vec::new();
    let mut commands = RespReader::commands(MAX_MESSAGE);
    let mut replies = RespReader::replies();
    let (mut c, mut s) = (client.chunks(piece), server.chunks(piece));
    let mut now = 0;
    let mut closed = false;
    while !closed {
        let (a, b) = (c.next(), s.next());
        if a.is_none() && b.is_none() {
            break;
        }
        now += 10;
        if let Some(a) = a {
            commands.push(a);
            loop {
                match commands.next_command() {
                    Ok(Some(cmd)) => closed |= session.on_command(&cmd, now, &mut host).close,
                    Ok(None) => break,
                    Err(e) => {
                        session.on_violation(Side::Client, &e, now, &mut host);
                        closed = true;
                        break;
                    }
                }
            }
            assert!(commands.buffered() <= MAX_MESSAGE + piece + wire_faults::resp::MAX_LINE);
        }
        if let Some(b) = b {
            replies.push(b);
            loop {
                match replies.next_reply_piece() {
                    Ok(Some(p)) => closed |= session.on_reply(&p, now).close,
                    Ok(None) => break,
                    Err(e) => {
                        session.on_violation(Side::Server, &e, now, &mut host);
                        closed = true;
                        break;
                    }
                }
            }
            assert!(replies.buffered() <= piece + wire_faults::resp::MAX_LINE);
        }
        journal.extend(session.take_journal());
    }
    session.on_closed(Side::Server, now + 1);
    journal.extend(session.take_journal());
    all_given_back(&host, &journal);
    for e in &journal {
        if let Some(k) = e.redis().and_then(|r| r.key.as_ref()) {
            // Lossy UTF-8 may grow a cut byte into a three-byte replacement character.
            assert!(k.len() <= 16 * 3, "a key over the journal's bound");
        }
    }
}
