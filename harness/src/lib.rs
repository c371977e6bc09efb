//! The harness: scenarios, the load driver, client retry policies and the checks.

pub mod checks;
pub mod probe;
pub mod simulate;
