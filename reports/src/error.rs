//! Errors of reading, rendering and writing reports.
//!
//! One enum for the crate so a caller (`harness report`, `--report-dir`) maps every failure to the
//! "bad input" or "could not carry out" exit code in one place, with a message that names the file
//! and the fix.

use std::path::PathBuf;

use thiserror::Error;

/// Everything that can go wrong while reading, rendering or writing a report.
#[derive(Debug, Error)]
pub enum ReportError {
    /// The text is not JSON, or not a report of a layout this build knows.
    #[error("not a valid report.json: {0}")]
    Json(#[from] serde_json::Error),

    /// The document has no `schema_version`, so it is not a report (or predates versioning).
    #[error(
        "not a report.json: the `schema_version` field is missing (this build reads version {supported})"
    )]
    MissingSchemaVersion {
        /// The version this build reads.
        supported: u32,
    },

    /// The document's `schema_version` is not one this build can read.
    #[error(
        "report.json has schema_version {found}, but this build reads only version {supported}; \
         render it with the harness version that wrote it, or a newer one"
    )]
    UnsupportedSchemaVersion {
        /// The version found in the document (as written, it may not even be a number).
        found: String,
        /// The version this build reads.
        supported: u32,
    },

    /// quick-junit could not serialize the JUnit document.
    #[error("could not build junit.xml: {0}")]
    Junit(#[from] quick_junit::SerializeError),

    /// A format name that [`crate::Format`] does not know.
    #[error("unknown report format `{0}`: expected one of table, json, junit, html, markdown")]
    UnknownFormat(String),

    /// Creating the report directory or writing a file in it failed.
    #[error("could not write {}: {source}", path.display())]
    Write {
        /// The file or directory that could not be written.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
}
