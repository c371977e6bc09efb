//! One request as the side that observed it saw it: the journal's entry.
//!
//! The fault server writes one per request it receives; `harness idempotency` writes one per
//! exchange it makes, from the client's side. Either way the checks read the same record.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::protocol::{PgStatement, Protocol, RedisCommand};
use crate::{GrpcCode, TcpConnection};

/// What finally happened to a request's connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A complete response was written.
    #[default]
    Responded,
    /// The request was processed, then the connection was closed with no response.
    Dropped,
    /// The connection was reset (TCP RST).
    Reset,
    /// No response was sent; the server gave up holding the connection (the hang cap passed).
    Hung,
    /// The client went away before a response was written.
    ClientClosed,
    /// Refused before it was handled: a head that was too large, malformed or too slow, a body
    /// over the limit, the connection limit reached; the entry's `rejected` says which.
    Rejected,
    /// A proxied request whose upstream failed (refused, timed out, broken).
    UpstreamError,
    /// The response was being written when writing made no progress for the server's
    /// `send_timeout` (the client's flow-control window stayed closed, or its socket stayed
    /// full): the server ended the stream (HTTP/2) or the connection (HTTP/1.1) with the response
    /// unfinished; `response_bytes` says how much of it was written.
    SendTimeout,
}

impl Outcome {
    /// The name used in the journal and in stats.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Responded => "responded",
            Outcome::Dropped => "dropped",
            Outcome::Reset => "reset",
            Outcome::Hung => "hung",
            Outcome::ClientClosed => "client_closed",
            Outcome::Rejected => "rejected",
            Outcome::UpstreamError => "upstream_error",
            Outcome::SendTimeout => "send_timeout",
        }
    }
}

/// An HTTP version, as the journal spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HttpVersion {
    /// `1.0`.
    #[serde(rename = "1.0")]
    Http10,
    /// `1.1`.
    #[serde(rename = "1.1")]
    Http11,
    /// `2`.
    #[serde(rename = "2")]
    Http2,
}

/// One request as the server saw it. Readers must ignore fields they do not know.
///
/// The journal writes it with [`Entry::write_json`], not serde's derive: a field added here is
/// added there too, in the same place (the property test in `tests/properties.rs` compares the
/// two, and the `full_entry` strategy there draws every field).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Arrival order, from 1.
    pub seq: u64,
    /// Microseconds since server start (monotonic) when the request head was received.
    pub t_recv_us: u64,
    /// Microseconds since server start when the response was written or the connection was
    /// dropped, reset or given up.
    pub t_done_us: u64,
    /// Microseconds since server start when the request's body had fully arrived; absent for a
    /// request without a body (its head was all of it). A burst's release skew is measured on
    /// this: with last-byte or single-packet sync the heads arrive early, the ends together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_body_us: Option<u64>,
    /// Microseconds since server start when the request's last bytes reached the server's host:
    /// the kernel's receive timestamp of the read that completed it (Linux), before the server
    /// was scheduled to read them; absent where the kernel gives none. `t_body_us` (or
    /// `t_recv_us`) minus this is the server's own delay in getting to the request. Over HTTP/2,
    /// where streams share reads, it is the connection's last read before the stream was whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_wire_us: Option<u64>,
    /// Wall-clock arrival, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// Wall-clock arrival, microseconds since the Unix epoch: what orders the entries of several
    /// replicas in one history (their clocks are assumed synchronized, e.g. by NTP).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unix_us: u64,
    /// The fault-server replica that saw the request (`--replica-id`; absent for a lone server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// Request method.
    pub method: String,
    /// Request path, without the query.
    pub path: String,
    /// Query string, without the `?`.
    #[serde(default)]
    pub query: Option<String>,
    /// Captured request headers, lower-case names.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// From the `Idempotency-Key` header.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// From the `x-client-id` header.
    #[serde(default)]
    pub client_id: Option<String>,
    /// Hex SHA-256 of the request body.
    #[serde(default)]
    pub body_sha256: Option<String>,
    /// Length of the request body, bytes.
    #[serde(default)]
    pub body_len: u64,
    /// The protocol the request came in: `1.1`, `2` (`1.0` for an old client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_version: Option<HttpVersion>,
    /// The request came over TLS.
    #[serde(default)]
    pub tls: bool,
    /// Identifies the TCP connection the request came on (the streams of one HTTP/2 connection
    /// share it).
    #[serde(default)]
    pub conn_id: u64,
    /// Id of the schedule rule that fired, if any.
    #[serde(default)]
    pub rule: Option<String>,
    /// Kind of fault applied: `status`, `delay`, `hang`, `drop`, `reset`, `malformed`, `goaway`,
    /// `forward`.
    #[serde(default)]
    pub fault: Option<String>,
    /// Status code sent, or null when none was.
    #[serde(default)]
    pub status: Option<u16>,
    /// What finally happened to the request's connection.
    pub outcome: Outcome,
    /// Id of a resource this request created.
    #[serde(default)]
    pub created: Option<String>,
    /// Which attempt of its Idempotency-Key this request was (1 = first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_attempt: Option<u32>,
    /// A state transition this request made, e.g. `pending->paid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition: Option<String>,
    /// The resource a request acted on (e.g. the order id of a pay request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// True when the response was an idempotent replay.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// The uniform draw in [0, 1) behind a probabilistic rule or a random delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw: Option<f64>,
    /// Why the request was refused before it was handled (outcome `rejected`): `header-timeout`,
    /// `head-too-large`, `bad-request`, `body-too-large`, `bad-body`, `connection-limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    /// The request was forwarded to the fault server's upstream (proxy mode).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forwarded: bool,
    /// The status the upstream answered a forwarded request with; null when it did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    /// How long the upstream took, from forwarding the request to its whole answer (or its
    /// failure), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_us: Option<u64>,
    /// Response headers the observer recorded (lower-case names: `retry-after`, `location`,
    /// `idempotent-replayed`, …); absent when it recorded none, so a reader can tell "no
    /// Retry-After was sent" from "headers were not recorded".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_headers: Option<BTreeMap<String, String>>,
    /// Bytes of the response written to the connection (before TLS): on HTTP/1.1 its status
    /// line, header fields and body as framed; on HTTP/2 its HEADERS, CONTINUATION and DATA
    /// frames, frame headers included. For a `responded` entry, the whole response; for one the
    /// client left (`client_closed`) or stopped reading (`send_timeout`), what got out before.
    /// Absent where the observer did not count (no response was begun, or an older journal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_bytes: Option<u64>,
    /// The response's trailer fields (lower-case names), when it had any: an HTTP/2 trailing
    /// HEADERS block or a chunked HTTP/1.1 body's trailer section (`grpc-status`, say). Absent
    /// when there were none or the observer did not record them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_trailers: Option<BTreeMap<String, String>>,
    /// gRPC: the method the call named, `pkg.Service/Method` (its `:path` without the leading
    /// `/`); absent for a request that is not a gRPC call (`content-type: application/grpc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_method: Option<String>,
    /// gRPC: the status the call was answered with, by name (`UNAVAILABLE`), in the trailers or
    /// a Trailers-Only answer; absent when none was sent (a reset, a drop, a hang, an HTTP
    /// status fault).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<GrpcCode>,
    /// gRPC: the `grpc-message` sent with the status, decoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_message: Option<String>,
    /// gRPC: the call's `grpc-previous-rpc-attempts` (gRFC A6: how many attempts of the same
    /// call came before this one); absent when the request did not carry it (a first attempt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_previous_attempts: Option<u32>,
    /// gRPC: the call's `grpc-timeout`, in milliseconds (rounded up): what was left of its
    /// deadline when the attempt was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_timeout_ms: Option<u64>,
    /// gRPC: the `grpc-retry-pushback-ms` the answer carried, as gRFC A6 reads it: a delay the
    /// client must wait before its next attempt, or a negative number (an unparseable value
    /// counts as -1) asking it not to retry at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushback_ms: Option<i64>,
    /// gRPC: the answer's Response-Headers were sent before its status, so the call was
    /// committed (gRFC A6: no retry after that); false for a Trailers-Only answer or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed: Option<bool>,
    /// A webhook delivery: the type of the event it carried (`invoice.paid`). The event's id is
    /// the entry's `idempotency_key` and its subject the entry's `resource`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// A webhook delivery: the event's place in its subject's sequence, from 1 (what the
    /// subject's final state must follow, whatever order the events arrived in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_seq: Option<u32>,
    /// A webhook delivery forged on purpose, and how: `signature`, `missing`, `tampered`,
    /// `stale`, `replayed`. A correct consumer refuses it (4xx) and takes no effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forged: Option<String>,
    /// A webhook delivery: which attempt of its delivery this was (1 = first; a redelivery after
    /// a timeout, a non-2xx or a lost answer is 2, …). Copies of a duplicated event count their
    /// attempts each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_attempt: Option<u32>,
    /// The sender dropped the answer on purpose (`lost_ack`): the request was sent whole, then
    /// the connection (or HTTP/2 stream) was closed before the answer was read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answer_dropped: bool,
    /// A proxied TCP connection (the fault server's `proxies`), not an HTTP request: its proxy,
    /// ends, bytes, toxics and end. Such an entry has no method, path or status, and is
    /// journaled when the connection ends (see [`TcpConnection`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<Box<TcpConnection>>,

    // Below HTTP: what a protocol-aware proxy read (kept apart from the fields above).
    /// A statement or command that a PostgreSQL- or Redis-aware proxy read (see
    /// [`Protocol`]); absent on every other entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Entry {
    /// Whether the client got a complete response: a status written by the handler, by the server
    /// refusing the request (`rejected`), or for an upstream's failure (`upstream_error`).
    pub fn answered(&self) -> bool {
        self.status.is_some()
            && matches!(
                self.outcome,
                Outcome::Responded | Outcome::Rejected | Outcome::UpstreamError
            )
    }

    /// When the whole request had arrived: the end of its body, else its head.
    pub fn t_complete_us(&self) -> u64 {
        self.t_body_us.unwrap_or(self.t_recv_us)
    }

    /// When the whole request had reached the server's host: the kernel's receive time where
    /// there is one, else when the server had read it ([`Entry::t_complete_us`]).
    pub fn t_arrived_us(&self) -> u64 {
        self.t_wire_us.unwrap_or_else(|| self.t_complete_us())
    }

    /// A blank entry for `seq`, to be filled in.
    pub fn blank(seq: u64) -> Entry {
        Entry {
            seq,
            ..Entry::default()
        }
    }

    /// Whether the request was a gRPC call.
    pub fn is_grpc(&self) -> bool {
        self.grpc_method.is_some()
    }

    /// The value of a captured request header (lower-case name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// Whether this entry is a proxied TCP connection rather than an HTTP request.
    pub fn is_connection(&self) -> bool {
        self.tcp.is_some()
    }

    /// Whether this entry is a webhook delivery (a genuine or a forged one).
    pub fn is_delivery(&self) -> bool {
        self.event_type.is_some()
    }

    /// Whether this entry is a genuine webhook delivery: a delivery that was not forged.
    pub fn is_genuine_delivery(&self) -> bool {
        self.event_type.is_some() && self.forged.is_none()
    }

    /// Whether this entry is a statement or command a protocol-aware proxy read, not a request.
    pub fn is_protocol(&self) -> bool {
        self.protocol.is_some()
    }

    /// The PostgreSQL statement this entry journals, if it is one.
    pub fn postgres(&self) -> Option<&PgStatement> {
        match &self.protocol {
            Some(Protocol::Postgres(s)) => Some(s),
            _ => None,
        }
    }

    /// The Redis command this entry journals, if it is one.
    pub fn redis(&self) -> Option<&RedisCommand> {
        match &self.protocol {
            Some(Protocol::Redis(c)) => Some(c),
            _ => None,
        }
    }

    /// The value of a recorded response header (lower-case name): `None` when the response had
    /// none, or when response headers were not recorded at all ([`Entry::response_headers`]).
    pub fn response_header(&self, name: &str) -> Option<&str> {
        self.response_headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(String::as_str)
    }
}
