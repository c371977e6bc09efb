//! `report.json`: the model as JSON, and reading it back.
//!
//! Reading checks `schema_version` before anything else: a report written by a newer harness may mean
//! something different under the same field names, so it is refused with a message that says so
//! instead of being half-read into a misleading render.

use serde::Deserialize;

use crate::error::ReportError;
use crate::model::{Report, SCHEMA_VERSION};

/// The report as pretty-printed JSON, the content of `report.json`.
pub fn to_json_pretty(r: &Report) -> String {
    let mut out = Vec::with_capacity(16 * 1024);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Inert::default());
    // The model has only string map keys and derived impls, and the writer is in memory, so
    // serde_json has no way to fail here; a failure would be a bug in the model, not bad input.
    serde::Serialize::serialize(r, &mut ser).expect("the report model always serializes to JSON");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Pretty JSON in which the characters JSON may carry raw but a terminal must not see — the
/// bidirectional overrides that reorder what is shown — are written as `\u` escapes (four hex
/// digits) too, as control characters already are. The document reads back the same.
#[derive(Default)]
struct Inert(serde_json::ser::PrettyFormatter<'static>);

impl serde_json::ser::Formatter for Inert {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some((i, c)) = rest.char_indices().find(|(_, c)| crate::format::hidden(*c)) {
            w.write_all(&rest.as_bytes()[..i])?;
            write!(w, "\\u{:04x}", c as u32)?;
            rest = &rest[i + c.len_utf8()..];
        }
        w.write_all(rest.as_bytes())
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

/// Only the version, read first so an unknown layout is refused before its fields are interpreted.
#[derive(Deserialize)]
struct VersionProbe {
    #[serde(default)]
    schema_version: Option<serde_json::Value>,
}

/// Reads a `report.json`, refusing a missing, unknown or newer `schema_version`.
pub fn from_json(text: &str) -> Result<Report, ReportError> {
    let probe: VersionProbe = serde_json::from_str(text)?;
    match probe.schema_version {
        None | Some(serde_json::Value::Null) => {
            return Err(ReportError::MissingSchemaVersion {
                supported: SCHEMA_VERSION,
            })
        }
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(SCHEMA_VERSION)) => {}
        Some(other) => {
            return Err(ReportError::UnsupportedSchemaVersion {
                found: other.to_string(),
                supported: SCHEMA_VERSION,
            })
        }
    }
    Ok(serde_json::from_str(text)?)
}
