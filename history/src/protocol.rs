//! One statement or command as a protocol-aware proxy read it: the journal's record below HTTP.
//!
//! A proxy that speaks PostgreSQL or Redis journals each statement (PostgreSQL) or command
//! (Redis) that crossed it as an ordinary [`Entry`](crate::Entry) whose `protocol` field holds
//! one of these. The entry's own fields keep their meaning: `seq`, `t_recv_us` (the client's
//! message arrived), `t_done_us` (its answer was relayed, or the connection ended), `conn_id`,
//! `rule`, `fault`, `draw`, `outcome` (`responded`, or `dropped` when the answer was withheld,
//! `reset` when the connection was cut before the statement was forwarded), `forwarded` and
//! `upstream_us` (forwarding to the database's answer). `method` and `path` are empty.
//!
//! What is never journaled: a statement's parameters. A statement's text is journaled up to the
//! proxy's bound, normalized (comments dropped, whitespace collapsed); the parameters of an
//! extended-protocol statement are known only by a digest, so that a check can tell a retry of
//! the same statement with the same values from another one without reading the values.

use serde::{Deserialize, Serialize};

/// What a protocol-aware proxy read of one statement or command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// A PostgreSQL statement (a simple Query, or an Execute of the extended protocol).
    Postgres(PgStatement),
    /// A Redis command.
    Redis(RedisCommand),
}

/// A PostgreSQL statement, its transaction and its answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgStatement {
    /// The proxy that read it.
    pub proxy: String,
    /// The statement's text, normalized (comments dropped, whitespace collapsed, no trailing
    /// `;`), up to the proxy's bound; absent for a connection's startup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    /// The text was longer than the bound and was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// What the statement does to its transaction, when it is a transaction control statement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<TxControl>,
    /// A digest of the values bound to an extended-protocol statement (16 hex digits): equal
    /// digests, equal values; the values themselves are never journaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
    /// The transaction's number on its connection, from 1: a statement outside a `BEGIN` block
    /// is a transaction of its own (with the statements pipelined with it before a `Sync`).
    #[serde(default)]
    pub tx: u64,
    /// The statement ran inside an explicit `BEGIN` … `COMMIT` block.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub block: bool,
    /// The SQLSTATE of the error the statement was answered with (the database's, or the one a
    /// fault put in its place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqlstate: Option<String>,
    /// The error's message, up to the proxy's bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The CommandComplete tag the database answered (`INSERT 0 1`, `COMMIT`, `ROLLBACK`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The transaction status the database reported after it (ReadyForQuery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TxStatus>,
    /// On the statement that ended a transaction: whether the database committed it. Known from
    /// the database's answer even when the client never saw it (a `drop` fault: the ambiguous
    /// commit); false when the connection was lost before the transaction ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed: Option<bool>,
    /// Not executed: an earlier statement of its pipeline failed, and the database skipped the
    /// rest up to the next `Sync`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    /// The connection's startup (its first message), not a statement.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub startup: bool,
    /// The client or the database broke the protocol here: what was wrong. The connection was
    /// closed, or forwarded unread from here on, as the proxy is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub violation: Option<String>,
}

/// A statement that begins or ends a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxControl {
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `COMMIT`, `END`.
    Commit,
    /// `ROLLBACK`, `ABORT`.
    Rollback,
    /// `SAVEPOINT name`.
    Savepoint,
    /// `RELEASE [SAVEPOINT] name`.
    Release,
    /// `ROLLBACK TO [SAVEPOINT] name`.
    RollbackTo,
    /// `PREPARE TRANSACTION 'id'`: the transaction leaves the connection, neither committed nor
    /// rolled back yet.
    Prepare,
}

/// The transaction status of a ReadyForQuery message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxStatus {
    /// `I`: not in a transaction block.
    Idle,
    /// `T`: in a transaction block.
    Transaction,
    /// `E`: in a failed transaction block (statements are refused until it ends).
    Failed,
}

impl TxStatus {
    /// The status of a ReadyForQuery byte (`I`, `T`, `E`).
    pub fn from_byte(b: u8) -> Option<TxStatus> {
        match b {
            b'I' => Some(TxStatus::Idle),
            b'T' => Some(TxStatus::Transaction),
            b'E' => Some(TxStatus::Failed),
            _ => None,
        }
    }
}

/// A Redis command and its reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisCommand {
    /// The proxy that read it.
    pub proxy: String,
    /// The command's name, upper-case (`GET`, `SET`, `HELLO`); empty for a violation that
    /// came before a command could be read.
    pub command: String,
    /// Its first key, up to the proxy's bound (lossy UTF-8), for the commands that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// How many arguments followed the name.
    #[serde(default)]
    pub args: u32,
    /// Sent as an inline command (a line of words), not an array.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline: bool,
    /// The reply's type: `simple`, `error`, `integer`, `bulk`, `null`, `array`, `map`, `set`,
    /// `push`, `double`, `boolean`, `big_number`, `verbatim`, `attribute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// For an error reply, its code: the first word (`LOADING`, `MOVED`, `ERR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The client or the server broke the protocol here: what was wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub violation: Option<String>,
}
