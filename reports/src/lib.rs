//! The report of a run and its renderers.
//!
//! One model ([`model::Report`]), several sibling renderers that read it and never each other:
//! [`terminal`], [`json`], [`junit`], [`markdown`], [`html`]. [`compare()`] sets two reports side by
//! side. The harness builds a report once, and `--report-dir` or `harness report` only choose which
//! renderers run, so every view of a run shows the same figures.

#![warn(missing_docs)]

pub mod compare;
pub mod error;
mod format;
pub mod html;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod model;
pub mod terminal;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use compare::{compare, Comparison, Tolerances};
pub use error::ReportError;
pub use html::to_html;
pub use json::{from_json, to_json_pretty};
pub use junit::to_junit_xml;
pub use markdown::to_markdown;
pub use model::{CheckResult, Evidence, Outcome, Report, Verdict, SCHEMA_VERSION};
pub use terminal::render_terminal;

/// An output format of `harness report` and `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Tables for a terminal.
    Table,
    /// `report.json`.
    Json,
    /// JUnit XML for CI test reporters.
    Junit,
    /// The self-contained HTML page.
    Html,
    /// Markdown for a CI step summary.
    Markdown,
}

impl Format {
    /// Every format, in the order help texts list them.
    pub const ALL: [Format; 5] = [
        Format::Table,
        Format::Json,
        Format::Junit,
        Format::Html,
        Format::Markdown,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::Junit => "junit",
            Format::Html => "html",
            Format::Markdown => "markdown",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = ReportError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "table" | "terminal" | "text" => Ok(Format::Table),
            "json" => Ok(Format::Json),
            "junit" | "xml" => Ok(Format::Junit),
            "html" => Ok(Format::Html),
            "markdown" | "md" => Ok(Format::Markdown),
            _ => Err(ReportError::UnknownFormat(s.to_string())),
        }
    }
}

/// Renders `r` in `format`; `color` only affects [`Format::Table`].
pub fn render(r: &Report, format: Format, color: bool) -> Result<String, ReportError> {
    Ok(match format {
        Format::Table => render_terminal(r, color),
        Format::Json => to_json_pretty(r),
        Format::Junit => to_junit_xml(r)?,
        Format::Html => to_html(r),
        Format::Markdown => to_markdown(r),
    })
}

/// The files [`write_report_dir`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFiles {
    /// `report.json`.
    pub json: PathBuf,
    /// `junit.xml`.
    pub junit: PathBuf,
    /// `report.html`.
    pub html: PathBuf,
    /// `summary.md`.
    pub markdown: PathBuf,
}

impl WrittenFiles {
    /// All four paths, in the order they were written.
    pub fn all(&self) -> [&Path; 4] {
        [&self.json, &self.junit, &self.html, &self.markdown]
    }
}

/// Creates `dir` if needed and writes `report.json`, `junit.xml`, `report.html` and `summary.md`.
///
/// Everything is rendered before the first file is written, so a rendering error leaves the
/// directory as it was instead of half-updated.
pub fn write_report_dir(r: &Report, dir: &Path) -> Result<WrittenFiles, ReportError> {
    let json = to_json_pretty(r);
    let junit = to_junit_xml(r)?;
    let html = to_html(r);
    let markdown = to_markdown(r);

    std::fs::create_dir_all(dir).map_err(|source| ReportError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let files = WrittenFiles {
        json: dir.join("report.json"),
        junit: dir.join("junit.xml"),
        html: dir.join("report.html"),
        markdown: dir.join("summary.md"),
    };
    for (path, content) in [
        (&files.json, json),
        (&files.junit, junit),
        (&files.html, html),
        (&files.markdown, markdown),
    ] {
        std::fs::write(path, content).map_err(|source| ReportError::Write {
            path: path.clone(),
            source,
        })?;
    }
    Ok(files)
}
