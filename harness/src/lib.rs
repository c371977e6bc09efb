//! The harness: scenarios, the load driver, client retry policies and the checks.
//!
//! Data flows one way: scenario file → [`scenario`] → [`plan::Plan`] → (fault server + [`driver`]) → history
//! (journal + client figures + store counts) → `checks` → report → renderers.

pub mod analyze;
pub mod cli;
pub mod driver;
pub mod http;
pub mod load;
pub mod merge;
pub mod metrics;
pub mod operation;
pub mod plan;
pub mod probe;
pub mod progress;
pub mod relay;
pub mod report;
pub mod run;
pub mod scenario;
pub mod shard;
pub mod simulate;
pub mod template;
pub mod tls;
pub mod verify;
pub mod workload;

pub use checks;
pub use fault_server;
pub use history;
