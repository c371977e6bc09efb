//! A programmable fault-injecting HTTP server.
//!
//! It answers with 503s, delays, hangs, dropped responses, TCP resets and broken responses on a
//! reproducible schedule ([`schedule`]), serves an orders resource with Idempotency-Key semantics on
//! a real database ([`orders`]), and keeps a complete journal of every request ([`journal`]).
//! In proxy mode ([`upstream`]) it stands in front of a real dependency instead: what no fault
//! answers is forwarded, and the journal records what the dependency did.
//! The harness embeds it through [`FaultServer`]; the `fault-server` binary runs it on its own.

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
pub mod upstream;

pub use config::Config;
pub use server::{FaultServer, ServerOptions, StartError};
