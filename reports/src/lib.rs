//! The report of a run and its renderers.
//!
//! One model ([`model::Report`]), several sibling renderers that read it and never each other:
//! [`terminal`], [`json`], [`junit`], [`markdown`], [`html`]. [`compare`] sets two reports side by
//! side. The harness builds a report once, and `--report-dir` or `harness report` only choose which
//! renderers run, so every view of a run shows the same figures.

pub mod compare;
pub mod error;
mod format;
pub mod html;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod model;
pub mod terminal;

pub use compare::{compare, Comparison, Tolerances};
pub use error::ReportError;
pub use html::to_html;
pub use json::{from_json, to_json_pretty};
pub use junit::to_junit_xml;
pub use markdown::to_markdown;
pub use model::{CheckResult, Evidence, Report, Verdict, SCHEMA_VERSION};
pub use terminal::render_terminal;
