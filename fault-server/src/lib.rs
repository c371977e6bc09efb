//! A programmable fault-injecting HTTP server.
//!
//! It answers with 503s, delays, hangs, dropped responses, TCP resets and broken responses on a
//! reproducible schedule, serves an orders resource with Idempotency-Key semantics on a real
//! database, and keeps a complete journal of every request. In a test, start one on a free
//! loopback port, point your client at it, and read what it saw:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use fault_server::{FaultServer, Outcome, RuleConfig, StatusFault};
//!
//! let server = FaultServer::builder()
//!     .rule(RuleConfig::new(StatusFault::new(503).retry_after(1)).path("/inventory").requests(1))
//!     .start()
//!     .await?;
//! let first = reqwest::get(format!("{}/inventory", server.url())).await?;
//! assert_eq!(first.status(), 503);
//! assert_eq!(first.headers()["retry-after"], "1");
//! let journal = server.wait_for(1).await?;
//! assert_eq!((journal[0].rule.as_deref(), journal[0].outcome), (Some("rule-1"), Outcome::Responded));
//! # Ok(())
//! # }
//! ```
//!
//! The schedule is a list of rules, the first match wins: a [`RuleConfig`] matches on method,
//! path (exact or glob), headers, a time window since start, the Nth request, the Nth hit of the
//! rule, the Nth attempt of an Idempotency-Key, or a probability, and applies a [`FaultConfig`]:
//! a status (with headers, body, `Retry-After`), a delay, a hang, a drop, a reset, a malformed
//! response, an HTTP/2 GOAWAY. [`ServerBuilder`] puts a configuration together in Rust and
//! starts a [`TestServer`]; [`Config::from_yaml`] reads the same configuration from YAML, for
//! the `fault-server` binary and scenario files (the two are equal values, `==`). The `checks`
//! crate judges the journal ([`TestServer::journal`]), and `harness::workload` drives load at it.
//!
//! In proxy mode ([`upstream`], `upstream: URL` in the config) it stands in front of a real
//! dependency instead: what no fault answers is forwarded, and the journal records what the
//! dependency did (`forwarded`, `upstream_status`, `upstream_us`, the resource it created).
//!
//! Below HTTP, TCP fault proxies ([`tcp`], `proxies:` in the config) stand in front of a
//! service's database or cache with Toxiproxy's toxics, driven by Toxiproxy's own REST API, each
//! connection one journal entry beside the requests.
//!
//! The rooms: the schedule ([`schedule`]), the orders resource ([`orders`]), the journal
//! ([`journal`]), the configuration ([`config`]), the upstream ([`upstream`]), the TCP proxies
//! ([`tcp`]); [`FaultServer`]
//! is the server a program embeds (the harness does) with every option ([`ServerOptions`]).

#![warn(missing_docs)]

mod access;
mod body;
pub mod builder;
pub mod config;
mod conn;
mod control;
mod counts;
mod dispatch;
pub mod draw;
pub mod grpc;
mod http2;
pub mod journal;
mod lanes;
pub mod metrics;
pub mod orders;
mod reply;
pub mod schedule;
pub mod server;
mod socket;
mod state;
pub mod tcp;
pub mod tls;
pub mod upstream;
mod wire;

pub use builder::{BuildError, ServerBuilder, TestServer, WaitError};
pub use config::{
    Config, Counts, CreatedFrom, DelayFault, DelaySpec, DelayWhen, FaultConfig,
    GrpcAfterHeadersFault, GrpcConfig, GrpcFault, H2ErrorCode, HangFault, IdempotencyImpl,
    LimitsConfig, MalformedFault, MalformedKind, OrdersConfig, PayImpl, ResetFault, RuleConfig,
    StatusFault, UpstreamConfig, UpstreamUrl,
};
pub use history::{Entry, GrpcCode, Outcome};
pub use server::{FaultServer, ServerOptions, StartError, StatsHandle};
pub use tcp::{ProxyConfig, Stream, ToxicConfig};
