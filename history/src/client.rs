//! What the client saw: each attempt it made, how attempts failed, and its totals.

use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Why an attempt got no usable response.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The TCP connection could not be made.
    Connect,
    /// No response within the attempt's timeout.
    Timeout,
    /// The connection was reset (RST).
    Reset,
    /// The connection closed before a complete response.
    Closed,
    /// The server provably did not process the request: HTTP/2 RST_STREAM(REFUSED_STREAM), or a
    /// stream above the last stream id of the server's GOAWAY (RFC 9113 §8.7). Safe to retry
    /// whatever the method.
    Refused,
    /// The peer broke a rule of HTTP/1.1, HTTP/2 or HPACK that the RFCs make a MUST, or exceeded
    /// one of the client's limits (the header list size, a body longer than its content-length).
    Protocol,
    /// The response could not be parsed.
    Malformed,
    /// Anything else.
    Other,
    /// The TLS handshake failed: the certificate was not trusted, did not name the host, had
    /// expired, or the peers share no protocol.
    Tls,
}

impl ErrorKind {
    /// Every kind, in report order.
    pub const ALL: [ErrorKind; 9] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Reset,
        ErrorKind::Closed,
        ErrorKind::Refused,
        ErrorKind::Protocol,
        ErrorKind::Malformed,
        ErrorKind::Other,
        ErrorKind::Tls,
    ];

    /// The name used in reports and scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::Closed => "closed",
            ErrorKind::Refused => "refused",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Other => "other",
            ErrorKind::Tls => "tls",
        }
    }

    /// Index into per-kind counters.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt as the load driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientAttempt {
    /// Index of the phase in the scenario.
    pub phase: u16,
    /// The logical operation, numbered from 1 within its phase.
    pub op: u64,
    /// 1 for the first attempt of the operation.
    pub attempt: u32,
    /// The worker that made it.
    pub client: u32,
    /// µs since the run started, when the attempt was sent.
    pub t_start_us: u64,
    /// µs since the run started, when its response (or failure) came.
    pub t_end_us: u64,
    /// The response's status, when there was one.
    pub status: Option<u16>,
    /// Why there was no response.
    pub error: Option<ErrorKind>,
}

/// The client's totals over a run: what the users of the system under test experienced.
#[derive(Debug, Clone)]
pub struct ClientFigures {
    /// Logical operations started (each counts once, whatever its retries).
    pub operations: u64,
    /// Operations that did not end in a response below 500 (no response, a 5xx, a fallback).
    pub failed_operations: u64,
    /// Attempts sent, retries included.
    pub sent: u64,
    /// Attempts that got a response.
    pub completed: u64,
    /// Request failures: attempts answered with a 5xx or a failing gRPC status, or not at all.
    pub failed_attempts: u64,
    /// Transport errors: attempts that got no answer at all.
    pub transport_errors: u64,
    /// Latency of each attempt that got a response, µs.
    pub latency: Histogram<u64>,
    /// How long the load ran.
    pub duration: Duration,
}
