//! The history of a run: what every check reads, and nothing else.
//!
//! Why one model: a run is observed from three sides — the fault server journals every request it
//! sees ([`Entry`]), the load driver records every attempt it makes ([`ClientAttempt`]) and its
//! totals ([`ClientFigures`]), and a system of record can be asked afterwards how many resources
//! each key created ([`StoreCounts`]). Like Jepsen's history, these are facts, gathered before
//! any verdict; the checks are pure functions of them, so each decides its verdict once and no
//! step after them rewrites it.
//!
//! This crate knows no transport, server or database: it is data, so the checks can be built and
//! tested without any of them.

#![warn(missing_docs)]

mod client;
mod entry;
mod grpc;
mod json;
mod protocol;
pub mod sample;
mod store;
mod tcp;

pub use client::{ClientAttempt, ClientFigures, ErrorKind};
pub use entry::{Entry, HttpVersion, Outcome};
pub use grpc::{GrpcCode, UnknownGrpcCode};
pub use protocol::{PgStatement, Protocol, RedisCommand, TxControl, TxStatus};
pub use store::{KeyCount, KeyState, StoreCounts, StoreStates};
pub use tcp::{AppliedToxic, EndedBy, TcpConnection, TcpEnd};

/// What a run knows besides its requests: the facts the checks read when they conclude.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The load driver's totals, when the harness drove the load.
    pub client: Option<ClientFigures>,
    /// The system of record's counts per key, when it was asked.
    pub store: Option<StoreCounts>,
    /// The consumer's effects per webhook event id (genuine and forged), when it was asked.
    pub effects: Option<StoreCounts>,
    /// The state each webhook subject ended in at the consumer, when it was asked.
    pub states: Option<StoreStates>,
    /// The journal time (µs since the server started) at which the run started: evidence quotes
    /// times from here, as the charts do.
    pub time_origin_us: u64,
}

impl Facts {
    /// `t` (journal µs) as milliseconds since the run started.
    pub fn run_ms(&self, t_us: u64) -> f64 {
        t_us.saturating_sub(self.time_origin_us) as f64 / 1000.0
    }
}
