//! The report of a run and its renderers.
//!
//! One model ([`model::Report`]), several sibling renderers that read it and never each other.

pub mod model;

pub use model::{CheckResult, Evidence, Report, Verdict};
