//! A programmable fault-injecting HTTP server.
//!
//! It answers with 503s, delays, hangs, dropped responses, TCP resets and broken responses on a
//! reproducible schedule ([`schedule`]), serves an orders resource with Idempotency-Key semantics on
//! a real database ([`orders`]), and keeps a complete journal of every request ([`journal`]).
//! The harness embeds it through [`FaultServer`]; the `fault-server` binary runs it on its own.

pub mod builder;
pub mod config;
mod conn;
mod control;
mod dispatch;
pub mod draw;
pub mod journal;
pub mod orders;
mod reply;
pub mod schedule;
pub mod server;
mod socket;
mod state;
pub mod tls;

pub use builder::{BuildError, ServerBuilder, TestServer, WaitError};
pub use config::{
    Config, Counts, DelaySpec, FaultConfig, HangFault, IdempotencyImpl, LimitsConfig,
    MalformedFault, MalformedKind, OrdersConfig, PayImpl, ResetFault, RuleConfig, StatusFault,
};
pub use history::{Entry, Outcome};
pub use server::{FaultServer, ServerOptions, StartError};
