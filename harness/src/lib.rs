//! The harness: scenarios, the load driver, client retry policies and the checks — and, for
//! Rust tests, the fault server, the checks and the load driver as a library.
//!
//! # In `cargo test`
//!
//! Start a fault server with a schedule, run your own client against it, and assert a check's
//! verdict; a failing assertion prints the check's summary and evidence, as `harness run`
//! would:
//!
//! ```
//! use harness::checks::{CheckSpec, RetryOn4xxConfig};
//! use harness::fault_server::{FaultServer, RuleConfig, StatusFault};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // #[tokio::test] async fn my_client_does_not_retry_a_400() -> Result<(), Box<dyn Error>> {
//! let server = FaultServer::builder()
//!     .rule(RuleConfig::new(StatusFault::new(400)).method("POST").path("/orders"))
//!     .start().await?;
//! let my_client = reqwest::Client::new(); // your client, with its retry policy
//! let reply = my_client.post(format!("{}/orders", server.url())).send().await?;
//! assert_eq!(reply.status(), 400);
//! RetryOn4xxConfig::default().judge(&server.journal().await).assert_passes();
//! # Ok(())
//! # }
//! ```
//!
//! - [`fault_server`] (re-exported): [`fault_server::FaultServer::builder`] configures the
//!   schedule in Rust — rules from matchers (method, path, glob, headers, time window, Nth
//!   request, hits, key attempt, probability) and faults (status with headers and Retry-After,
//!   delay, hang, drop, reset, malformed, GOAWAY) — and the orders resource;
//!   [`fault_server::TestServer`] gives its URL, its journal (`journal().await`,
//!   `wait_for(n)`) and `reset()`.
//! - [`checks`] (re-exported): each check's configuration judges a journal
//!   ([`checks::CheckSpec::judge`]); the result's `Display` is the report's line and evidence,
//!   and `assert_passes` / `assert_fails` panic with it.
//! - [`workload`]: load from the test, through the same executors as `harness run` — a burst of
//!   N same-key requests, a rate, a pool of clients, a fleet under a retry policy — returning
//!   the clients' figures and attempts.
//!
//! The examples (`cargo run -p harness --example …`, run by `cargo test` too) show a
//! hand-written retry loop failing the jitter check (`retry_loop_jitter`) and the orders
//! resource passing same-key bursts (`idempotent_orders`).
//!
//! # The pipeline
//!
//! Data flows one way: scenario file → [`scenario`] → [`plan::Plan`] → (fault server +
//! [`driver`]) → history (journal + client figures + store counts) → `checks` → report →
//! renderers.

#![warn(missing_docs)]

pub mod analyze;
pub mod audit;
pub mod cli;
pub mod conform;
pub mod driver;
pub mod failure;
pub mod live;
pub mod load;
pub mod merge;
pub mod metrics;
pub mod operation;
pub mod plan;
pub mod probe;
pub mod progress;
pub mod proxies;
pub mod reach;
pub mod relay;
pub mod report;
pub mod run;
pub mod scenario;
pub mod shard;
pub mod simulate;
pub mod stop;
pub mod tally;
pub mod template;
pub mod verify;
pub mod workload;

pub use checks;
pub use fault_server;
pub use history;
/// The client transport (HTTP/1.1 and HTTP/2 over TCP or TLS), as `harness::http`.
pub use transport as http;
pub use transport::tls;
