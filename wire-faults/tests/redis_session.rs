//! A Redis connection's state machine, fed scripted conversations through the readers.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use history::{Entry, Outcome, RedisCommand};
use wire_faults::config::RedisConfig;
use wire_faults::resp::{RedisProxy, RedisSession, RespReader};
use wire_faults::{Draw, Host, Outgoing, Relay, Side, ToClient, ToServer};

struct Clock(u64);

impl Host for Clock {
    fn next_seq(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
    fn unix_us(&self, t_us: u64) -> u64 {
        t_us
    }
}

fn proxy(rules: &str) -> Arc<RedisProxy> {
    let cfg = RedisConfig::from_yaml(rules, "test").unwrap_or_else(|e| panic!("{e}"));
    let draw: Arc<dyn Draw> = Arc::new(|_: &str, subject: &str, _: u64| {
        // Half the subjects, by their first hex digit.
        if subject.as_bytes()[0] < b'8' {
            0.1
        } else {
            0.9
        }
    });
    RedisProxy::new("cache", &cfg, draw)
}

struct Conn {
    session: RedisSession,
    commands: RespReader,
    replies: RespReader,
    host: Clock,
    now: u64,
    journal: Vec<Entry>,
}

impl Conn {
    fn new(p: &Arc<RedisProxy>) -> Conn {
        Conn {
            session: RedisSession::new(p, 3),
            commands: RespReader::commands(1 << 20),
            replies: RespReader::replies(),
            host: Clock(0),
            now: 0,
            journal: Vec::new(),
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Vec<ToServer> {
        self.now += 10;
        self.commands.push(bytes);
        let mut out = Vec::new();
        while let Some(c) = self.commands.next_command().expect("valid commands") {
            out.push(self.session.on_command(&c, self.now, &mut self.host));
        }
        self.journal.extend(self.session.take_journal());
        out
    }

    fn reply(&mut self, bytes: &[u8]) -> Vec<ToClient> {
        self.now += 100;
        self.replies.push(bytes);
        let mut out = Vec::new();
        while let Some(p) = self.replies.next_reply_piece().expect("valid replies") {
            out.push(self.session.on_reply(&p, self.now));
        }
        self.journal.extend(self.session.take_journal());
        out
    }

    fn commands(&self) -> Vec<&RedisCommand> {
        self.journal.iter().filter_map(|e| e.redis()).collect()
    }
}

#[test]
fn loading_answers_a_get_in_its_place_in_a_pipeline() {
    let p = proxy("rules:\n  - { id: loading, match: { command: GET, key: \"session:*\" }, fault: { error: LOADING } }\n");
    let mut c = Conn::new(&p);
    let steps = c.send(
        b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$3\r\nGET\r\n$9\r\nsession:1\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n",
    );
    assert_eq!(steps[0], ToServer::forward());
    // The GET behind the SET is not forwarded; its error waits for the SET's reply.
    assert_eq!(steps[1].send, Outgoing::Nothing);
    assert_eq!(steps[1].answer, None);
    assert_eq!(steps[2], ToServer::forward());
    let replies = c.reply(b"+OK\r\n$1\r\n1\r\n");
    assert_eq!(
        replies[0].then,
        Some(Bytes::from_static(
            b"-LOADING Redis is loading the dataset in memory\r\n"
        ))
    );
    assert_eq!(replies[1], ToClient::relay());
    let cmds = c.commands();
    assert_eq!(cmds.len(), 3);
    assert_eq!(cmds[1].key.as_deref(), Some("session:1"));
    assert_eq!(cmds[1].error.as_deref(), Some("LOADING"));
    assert_eq!(c.journal[1].fault.as_deref(), Some("error"));
    assert!(!c.journal[1].forwarded);
    assert_eq!(cmds[2].reply.as_deref(), Some("bulk"));
    // With nothing in flight, the error goes at once.
    let steps = c.send(b"GET session:2\r\n");
    assert_eq!(
        steps[0].answer.as_deref(),
        Some(&b"-LOADING Redis is loading the dataset in memory\r\n"[..])
    );
    assert!(c.commands()[3].inline);
}

#[test]
fn forward_then_drop_closes_once_redis_replied() {
    let p = proxy("rules:\n  - { match: { command: [SET] }, fault: drop }\n");
    let mut c = Conn::new(&p);
    assert_eq!(c.send(b"SET k v\r\n")[0], ToServer::forward());
    let r = c.reply(b"+OK\r\n");
    assert_eq!(r[0].relay, Relay::Swallow);
    assert!(r[0].close);
    assert_eq!(c.journal[0].outcome, Outcome::Dropped);
    assert_eq!(c.commands()[0].reply.as_deref(), Some("simple"));
}

#[test]
fn moved_names_the_keys_slot_and_readonly_and_oom_read_as_redis_words_them() {
    let p = proxy(
        "rules:\n  - { match: { command: GET }, fault: { error: { code: MOVED, to: \"127.0.0.1:7002\" } } }\n  - { match: { command: SET }, fault: { error: READONLY } }\n  - { match: { command: LPUSH }, fault: { error: OOM } }\n  - { match: { command: EVAL }, fault: { error: BUSY } }\n  - { match: { command: MGET }, fault: { error: TRYAGAIN } }\n",
    );
    let mut c = Conn::new(&p);
    let answers: Vec<Bytes> = [
        &b"GET foo\r\n"[..],
        b"SET foo 1\r\n",
        b"LPUSH q 1\r\n",
        b"EVAL \"return 1\" 1 k\r\n",
        b"MGET a b\r\n",
    ]
    .iter()
    .map(|cmd| c.send(cmd).remove(0).answer.expect("answered"))
    .collect();
    assert_eq!(&answers[0][..], b"-MOVED 12182 127.0.0.1:7002\r\n");
    assert_eq!(
        &answers[1][..],
        b"-READONLY You can't write against a read only replica.\r\n"
    );
    assert!(answers[2].starts_with(b"-OOM command not allowed"));
    assert!(answers[3].starts_with(b"-BUSY "));
    assert!(answers[4].starts_with(b"-TRYAGAIN "));
    assert_eq!(
        c.commands()[3].key.as_deref(),
        Some("k"),
        "EVAL's key comes after its count"
    );
}

#[test]
fn resp3_push_frames_answer_no_command_and_delays_hold_replies() {
    let p = proxy("rules:\n  - { match: { commands: 2 }, fault: { delay: { duration: 50ms, when: after } } }\n  - { match: { command: PING }, fault: { delay: 20ms } }\n");
    let mut c = Conn::new(&p);
    c.send(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n");
    c.reply(b"%1\r\n+server\r\n+redis\r\n");
    c.send(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    let r = c.reply(b">3\r\n+message\r\n+ch\r\n+hi\r\n_\r\n");
    assert_eq!(r[0].delay, Duration::ZERO, "a push is not the GET's reply");
    assert_eq!(r[1].delay, Duration::from_millis(50));
    let ping = c.send(b"PING\r\n").remove(0);
    assert_eq!(ping.delay, Duration::from_millis(20));
    assert_eq!(ping.send, Outgoing::Forward);
    let cmds = c.commands();
    assert_eq!(cmds[0].reply.as_deref(), Some("map"));
    assert_eq!(cmds[1].reply.as_deref(), Some("null"));
}

#[test]
fn probability_draws_per_command_and_arguments() {
    let p = proxy(
        "rules:\n  - { id: coin, match: { command: GET, probability: 0.5 }, fault: reset }\n",
    );
    let mut cut = 0;
    for i in 0..40 {
        let mut c = Conn::new(&p);
        let step = c.send(format!("GET key-{i}\r\n").as_bytes()).remove(0);
        if step.close {
            cut += 1;
            assert_eq!(c.journal[0].outcome, Outcome::Reset);
            assert!(c.journal[0].draw.is_some());
        }
    }
    assert!((5..=35).contains(&cut), "{cut}");
}

#[test]
fn a_connection_lost_with_commands_in_flight_journals_them() {
    let p = proxy("{}");
    let mut c = Conn::new(&p);
    c.send(b"GET a\r\nGET b\r\n");
    c.reply(b"$-1\r\n");
    c.session.on_closed(Side::Server, c.now);
    c.journal.extend(c.session.take_journal());
    assert_eq!(c.journal.len(), 2);
    assert_eq!(c.journal[0].outcome, Outcome::Responded);
    assert_eq!(c.commands()[0].reply.as_deref(), Some("null"));
    assert_eq!(c.journal[1].outcome, Outcome::UpstreamError);
}
