//! A proxied TCP connection as the fault server's TCP proxy saw it: the `tcp` object of a
//! connection's journal entry.
//!
//! Below HTTP the unit of the history is the connection, not the request: a database driver or a
//! cache client keeps one open for many commands, and what a fault does to it — a delay on every
//! answer, a cut after so many bytes, a reset, a cable pulled — is a property of the connection.
//! A connection's entry carries no method, path or status; its `tcp` says which proxy it came
//! through, whether the upstream was reached, how many bytes went each way, which toxics acted on
//! it and how it ended. It is journaled when it ends (a pooled connection may stay open for the
//! whole run, and nothing journaled after it should wait for it), so its `seq` is its place among
//! endings, and its `t_recv_us` — when it was accepted — may be earlier than the entry before it.

use serde::{Deserialize, Serialize};

/// A proxied TCP connection: its proxy, its two ends, its bytes, its toxics and its end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpConnection {
    /// The proxy's name.
    pub proxy: String,
    /// The client's address, `ip:port`.
    pub client: String,
    /// The upstream the proxy forwards to, as configured (`host:port`).
    pub upstream: String,
    /// The connection's number at its proxy, from 1 (since start or the last reset): what a
    /// toxic's `match.connections` counts.
    pub number: u64,
    /// The upstream was reached (its connection opened).
    pub connected: bool,
    /// Why the upstream was not reached: `connection refused`, `timed out after 5s`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_error: Option<String>,
    /// How long opening the upstream connection took (or failing to), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_us: Option<u64>,
    /// Bytes from the client delivered to the upstream.
    pub bytes_up: u64,
    /// Bytes from the upstream delivered to the client.
    pub bytes_down: u64,
    /// Bytes read from the client that never reached the upstream: swallowed by a toxic
    /// (`timeout`, `limit_data`) or in flight when the connection ended.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_up: u64,
    /// Bytes read from the upstream that never reached the client.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_down: u64,
    /// The toxics that acted on this connection, in the order they began to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub toxics: Vec<AppliedToxic>,
    /// Which side ended the connection.
    pub ended_by: EndedBy,
    /// How it ended.
    pub end: TcpEnd,
    /// The toxic that ended it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toxic: Option<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A toxic that acted on a connection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AppliedToxic {
    /// Its name.
    pub name: String,
    /// Its type: `latency`, `bandwidth`, `slow_close`, `timeout`, `reset_peer`, `slicer`,
    /// `limit_data`, `blackhole`, `close_after`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The direction it acted on: `upstream` (client to upstream) or `downstream`.
    pub stream: String,
    /// The seeded draw in [0, 1) its `toxicity` was held against, when it was below 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw: Option<f64>,
    /// When it began to act on the connection, µs since server start.
    pub t_us: u64,
}

/// Which side ended a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    /// The client closed or reset it.
    #[default]
    Client,
    /// The upstream closed or reset it (or never answered).
    Upstream,
    /// The proxy: a toxic, the connection limit, or the proxy being stopped.
    Proxy,
}

impl EndedBy {
    /// The name the journal uses.
    pub fn as_str(self) -> &'static str {
        match self {
            EndedBy::Client => "client",
            EndedBy::Upstream => "upstream",
            EndedBy::Proxy => "proxy",
        }
    }
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpEnd {
    /// Closed in order (FIN), each side's data delivered.
    #[default]
    Closed,
    /// Reset (RST): by a peer, or by a `reset_peer` toxic or `close_after` with `reset`.
    Reset,
    /// A `timeout` toxic closed it after holding its data back.
    TimedOut,
    /// A toxic cut it: `limit_data` after its bytes, `close_after` after its time or bytes.
    Cut,
    /// The upstream could not be reached: refused, unreachable, or too slow to answer the
    /// connect (`connect_error` says which); the client's connection was closed.
    Refused,
    /// The proxy's connection limit was reached: closed at once.
    Rejected,
    /// The proxy stopped while it was open: disabled, deleted, changed, or the server shut down.
    Shutdown,
}

impl TcpEnd {
    /// The name the journal uses.
    pub fn as_str(self) -> &'static str {
        match self {
            TcpEnd::Closed => "closed",
            TcpEnd::Reset => "reset",
            TcpEnd::TimedOut => "timed_out",
            TcpEnd::Cut => "cut",
            TcpEnd::Refused => "refused",
            TcpEnd::Rejected => "rejected",
            TcpEnd::Shutdown => "shutdown",
        }
    }
}
