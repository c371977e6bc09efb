//! One proxied Redis connection as a state machine: fed the client's commands and the server's
//! reply pieces in order, it says what to do with each and journals every command once its
//! reply is known.
//!
//! Redis answers commands in order, one reply each (a SUBSCRIBE one per channel), with RESP3
//! push frames (`>`) out of band. So the commands in flight wait in a queue, and each reply
//! answers the one at its head. A command a fault answers with an error is not forwarded: its
//! error takes its place in the queue and goes to the client right after the reply before it,
//! so a pipelining client reads its replies in the order it sent the commands.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use history::{Entry, Outcome, Protocol, RedisCommand};
use sha2::{Digest, Sha256};

use super::answer;
use super::reader::{Command, ReplyPiece};
use super::rules::{CommandFacts, Decision, RedisProxy};
use crate::config::{OnViolation, RedisFault, When};
use crate::error::WireError;
use crate::journal::{blank, bounded, Host};
use crate::step::{Outgoing, Relay, Side, ToClient, ToServer};

/// A proxied Redis connection.
pub struct RedisSession {
    proxy: Arc<RedisProxy>,
    conn_id: u64,
    connection: u64,
    commands: u64,
    queue: VecDeque<InFlight>,
    /// The reply being relayed is out of band (a RESP3 push) or answers nothing in flight.
    unsolicited: bool,
    swallowing: bool,
    passive: bool,
    journal: Vec<Entry>,
}

impl std::fmt::Debug for RedisSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSession")
            .field("conn_id", &self.conn_id)
            .field("in_flight", &self.queue.len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Action {
    None,
    Drop,
    After(Duration),
}

struct InFlight {
    entry: Entry,
    rec: RedisCommand,
    /// The error a fault answers with in place of the server's reply.
    answered: Option<Bytes>,
    action: Action,
    /// Replies still due (a SUBSCRIBE gets one per channel).
    replies: u32,
    t_forward_us: u64,
    /// Its reply is held (`delay: after`) until then.
    held_until_us: u64,
}

/// Commands that name no key (the rest name one first, or after a count).
const KEYLESS: &[&str] = &[
    "PING",
    "ECHO",
    "HELLO",
    "AUTH",
    "SELECT",
    "INFO",
    "CLIENT",
    "CONFIG",
    "MULTI",
    "EXEC",
    "DISCARD",
    "FLUSHALL",
    "FLUSHDB",
    "DBSIZE",
    "SCAN",
    "KEYS",
    "QUIT",
    "RESET",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PSUBSCRIBE",
    "PUNSUBSCRIBE",
    "SSUBSCRIBE",
    "SUNSUBSCRIBE",
    "PUBLISH",
    "SPUBLISH",
    "PUBSUB",
    "COMMAND",
    "TIME",
    "LASTSAVE",
    "SAVE",
    "BGSAVE",
    "BGREWRITEAOF",
    "SHUTDOWN",
    "MONITOR",
    "SLOWLOG",
    "SCRIPT",
    "FUNCTION",
    "CLUSTER",
    "READONLY",
    "READWRITE",
    "WAIT",
    "ROLE",
    "REPLICAOF",
    "SLAVEOF",
    "SWAPDB",
    "LATENCY",
    "MEMORY",
    "MODULE",
    "ACL",
    "DEBUG",
    "OBJECT",
    "RANDOMKEY",
    "UNWATCH",
];

/// The first key of a command, by its name's conventions.
fn first_key<'a>(name: &str, args: &'a [Bytes]) -> Option<&'a Bytes> {
    match name {
        n if KEYLESS.contains(&n) => None,
        // EVAL script numkeys key …, FCALL function numkeys key …
        "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FCALL_RO" => {
            let n: u64 = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
            (n > 0).then(|| args.get(3)).flatten()
        }
        "XREAD" | "XREADGROUP" => {
            let i = args
                .iter()
                .position(|a| a.eq_ignore_ascii_case(b"STREAMS"))?;
            args.get(i + 1)
        }
        _ => args.get(1),
    }
}

impl RedisSession {
    /// The session of a new connection of `proxy`; `conn_id` is the journal's id of the
    /// connection.
    pub fn new(proxy: &Arc<RedisProxy>, conn_id: u64) -> RedisSession {
        RedisSession {
            connection: proxy.next_connection(),
            proxy: Arc::clone(proxy),
            conn_id,
            commands: 0,
            queue: VecDeque::new(),
            unsolicited: false,
            swallowing: false,
            passive: false,
            journal: Vec::new(),
        }
    }

    /// The connection's number among the proxy's (from 1).
    pub fn connection(&self) -> u64 {
        self.connection
    }

    /// The journal entries whose commands' replies are known.
    pub fn take_journal(&mut self) -> Vec<Entry> {
        std::mem::take(&mut self.journal)
    }

    /// What to do with a command from the client, which arrived at `now_us`.
    pub fn on_command(&mut self, cmd: &Command, now_us: u64, host: &mut dyn Host) -> ToServer {
        if self.passive {
            return ToServer::forward();
        }
        if self.queue.len() >= self.proxy.max_pipeline {
            let e = WireError::Malformed {
                protocol: "RESP",
                detail: format!(
                    "more than {} commands pipelined ahead of their replies",
                    self.proxy.max_pipeline
                ),
            };
            return match self.on_violation(Side::Client, &e, now_us, host) {
                OnViolation::Close => ToServer::close(),
                OnViolation::Forward => ToServer::forward(),
            };
        }
        self.commands += 1;
        let name = cmd.name();
        let key = first_key(&name, &cmd.args);
        let key_text = key.map(|k| {
            let k = &k[..k.len().min(self.proxy.max_key)];
            String::from_utf8_lossy(k).into_owned()
        });
        let subject = self.proxy.needs_subjects().then(|| {
            let mut h = Sha256::new();
            for a in &cmd.args {
                h.update((a.len() as u64).to_le_bytes());
                h.update(a);
            }
            let d = h.finalize();
            let s: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
            let attempt = self.proxy.attempts.bump(&s);
            (s, attempt)
        });
        let decision = self.proxy.decide(&CommandFacts {
            name: &name,
            key: key_text.as_deref(),
            connection: self.connection,
            command: self.commands,
            subject: subject.as_ref().map(|(s, a)| (s.as_str(), *a)),
        });
        let mut entry = blank(host.next_seq(), now_us, host.unix_us(now_us), self.conn_id);
        entry.forwarded = true;
        if let Some(d) = &decision {
            entry.rule = Some(d.rule.clone());
            entry.fault = Some(fault_name(&d.fault).to_string());
            entry.draw = d.draw;
        }
        let replies = match name.as_str() {
            "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" | "UNSUBSCRIBE" | "PUNSUBSCRIBE"
            | "SUNSUBSCRIBE" => u32::try_from(cmd.args.len().saturating_sub(1))
                .unwrap_or(u32::MAX)
                .max(1),
            _ => 1,
        };
        let mut f = InFlight {
            entry,
            rec: RedisCommand {
                proxy: self.proxy.name.clone(),
                command: name,
                key: key_text,
                args: u32::try_from(cmd.args.len().saturating_sub(1)).unwrap_or(u32::MAX),
                inline: cmd.inline,
                ..RedisCommand::default()
            },
            answered: None,
            action: Action::None,
            replies,
            t_forward_us: now_us,
            held_until_us: 0,
        };
        let mut step = ToServer::forward();
        match decision.map(|d: Decision| d.fault) {
            None => {}
            Some(RedisFault::Error(e)) => {
                let bytes = answer::error_reply(&e, key.map(|k| &k[..]));
                f.entry.forwarded = false;
                f.rec.reply = Some("error".into());
                f.rec.error = Some(e.code.clone());
                step.send = Outgoing::Nothing;
                if self.queue.is_empty() {
                    self.emit(f, now_us);
                    step.answer = Some(bytes);
                    return step;
                }
                f.answered = Some(bytes);
            }
            Some(RedisFault::Delay(d)) => match d.when {
                When::Before => {
                    step.delay = d.duration;
                    f.t_forward_us = now_us + d.duration.as_micros() as u64;
                }
                When::After => f.action = Action::After(d.duration),
            },
            Some(RedisFault::Drop) => f.action = Action::Drop,
            Some(RedisFault::Reset) => {
                f.entry.forwarded = false;
                f.entry.outcome = Outcome::Reset;
                self.emit(f, now_us);
                self.close_all(Side::Client, now_us);
                return ToServer::close();
            }
        }
        self.queue.push_back(f);
        step
    }

    /// What to do with a piece of a reply from the server, which arrived at `now_us`.
    pub fn on_reply(&mut self, piece: &ReplyPiece, now_us: u64) -> ToClient {
        if self.passive {
            return ToClient::relay();
        }
        let mut out = ToClient::relay();
        let push = piece.head.as_ref().is_some_and(|h| h.kind == "push");
        if piece.first {
            // Out of band (a RESP3 push), or nothing in flight to answer.
            self.unsolicited = push || self.queue.front().is_none_or(|f| f.answered.is_some());
            if let Some(f) = self.queue.front_mut().filter(|_| !self.unsolicited) {
                match f.action {
                    Action::Drop => {
                        self.swallowing = true;
                        f.entry.outcome = Outcome::Dropped;
                    }
                    Action::After(d) => {
                        out.delay = d;
                        f.held_until_us = now_us + d.as_micros() as u64;
                        f.action = Action::None;
                    }
                    Action::None => {}
                }
            }
        }
        if let Some(head) = &piece.head {
            if push {
                self.unsolicited = true;
            } else if !self.unsolicited {
                if let Some(f) = self.queue.front_mut() {
                    f.rec.reply = Some(head.kind.to_string());
                    f.rec.error = head.error.clone();
                }
            }
        }
        if self.swallowing {
            out.relay = Relay::Swallow;
        }
        if piece.last && !self.unsolicited {
            let done = self.queue.front_mut().is_some_and(|f| {
                f.replies = f.replies.saturating_sub(1);
                f.replies == 0
            });
            if done {
                if let Some(f) = self.queue.pop_front() {
                    let dropped = f.action == Action::Drop;
                    self.emit(f, now_us);
                    if dropped || self.swallowing {
                        out.close = true;
                        self.close_all(Side::Client, now_us);
                        return out;
                    }
                }
                out.then = self.flush_answered(now_us);
            }
        }
        out
    }

    /// The errors answered in place of the commands now at the head of the queue.
    fn flush_answered(&mut self, now_us: u64) -> Option<Bytes> {
        let mut bytes = BytesMut::new();
        while self.queue.front().is_some_and(|f| f.answered.is_some()) {
            if let Some(mut f) = self.queue.pop_front() {
                if let Some(b) = f.answered.take() {
                    bytes.extend_from_slice(&b);
                }
                self.emit(f, now_us);
            }
        }
        (!bytes.is_empty()).then(|| bytes.freeze())
    }

    fn emit(&mut self, f: InFlight, now_us: u64) {
        let InFlight {
            mut entry,
            rec,
            t_forward_us,
            held_until_us,
            ..
        } = f;
        // A reply held by `delay: after` was relayed when the hold ended.
        entry.t_done_us = now_us.max(held_until_us);
        if entry.forwarded && entry.outcome == Outcome::Responded {
            entry.upstream_us = Some(now_us.saturating_sub(t_forward_us));
        }
        entry.protocol = Some(Protocol::Redis(rec));
        self.journal.push(entry);
    }

    fn close_all(&mut self, by: Side, now_us: u64) {
        while let Some(mut f) = self.queue.pop_front() {
            if f.entry.outcome == Outcome::Responded {
                f.entry.outcome = if self.swallowing {
                    Outcome::Dropped
                } else if f.answered.is_some() {
                    // Its answer was due after a reply that never came.
                    Outcome::ClientClosed
                } else {
                    match by {
                        Side::Client => Outcome::ClientClosed,
                        Side::Server => Outcome::UpstreamError,
                    }
                };
            }
            self.emit(f, now_us);
        }
    }

    /// The connection ended: what was in flight is journaled.
    pub fn on_closed(&mut self, by: Side, now_us: u64) {
        self.close_all(by, now_us);
    }

    /// A reader refused `from`'s bytes: journaled, what was in flight settled, and the proxy told
    /// what to do (the configuration's `on_violation`); after `forward` everything passes unread.
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
        entry.protocol = Some(Protocol::Redis(RedisCommand {
            proxy: self.proxy.name.clone(),
            violation: Some(bounded(&e.to_string(), 500)),
            ..RedisCommand::default()
        }));
        self.close_all(from, now_us);
        self.journal.push(entry);
        self.passive = true;
        self.proxy.on_violation
    }
}

fn fault_name(f: &RedisFault) -> &'static str {
    match f {
        RedisFault::Error(_) => "error",
        RedisFault::Delay(_) => "delay",
        RedisFault::Drop => "drop",
        RedisFault::Reset => "reset",
    }
}
