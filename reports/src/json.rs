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
    // The model has only string map keys and derived impls, and the writer is in memory, so
    // serde_json has no way to fail here; a failure would be a bug in the model, not bad input.
    serde_json::to_string_pretty(r).expect("the report model always serializes to JSON")
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
