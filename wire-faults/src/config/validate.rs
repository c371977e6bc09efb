//! What is checked of a whole document rather than of one value (bounds together, rule ids), and
//! the error that names the field at fault.

/// A value that parsed but makes no sense with the rest: the field (relative to the proxy's
/// `postgres:` or `redis:`) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at `{field}`: {message}")]
pub struct Invalid {
    /// `rules[2].match.startup`, `max_statement`.
    pub field: String,
    /// What is wrong and what is expected.
    pub message: String,
}

pub(super) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        message: message.into(),
    }
}

pub(super) fn check_bounds(max_message: u64, max_pipeline: u32) -> Result<(), Invalid> {
    if !(1024..=1 << 30).contains(&max_message) {
        return Err(invalid(
            "max_message",
            format!("{max_message} bytes: expected 1KiB to 1GiB"),
        ));
    }
    if !(1..=1_000_000).contains(&max_pipeline) {
        return Err(invalid(
            "max_pipeline",
            format!("{max_pipeline}: expected 1 to 1000000"),
        ));
    }
    Ok(())
}

pub(super) fn check_ids<'a>(ids: impl Iterator<Item = Option<&'a String>>) -> Result<(), Invalid> {
    let mut seen = std::collections::HashSet::new();
    for (i, id) in ids.enumerate() {
        if let Some(id) = id {
            if id.is_empty() {
                return Err(invalid(format!("rules[{i}].id"), "an empty id"));
            }
            if !seen.insert(id.clone()) {
                return Err(invalid(
                    format!("rules[{i}].id"),
                    format!("the id {id:?} is used by an earlier rule"),
                ));
            }
        }
    }
    Ok(())
}

/// A rule's id: its own, or `rule-N` (1-based position).
pub(crate) fn rule_id(id: Option<&String>, i: usize) -> String {
    id.cloned().unwrap_or_else(|| format!("rule-{}", i + 1))
}
