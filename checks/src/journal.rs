//! The journal as the checks read it: an [`Entry`] plus fields a server may add later.
//!
//! Why a separate record: the journal format grows (the contract says readers ignore fields they
//! do not know), and [`Entry`] belongs to the fault server. A check that can use a newer field
//! reads it through [`JournalItem`] and falls back to its configuration when the field is absent.
//! Today that is `retry_after_s`, the Retry-After the server sent, which the fault server's journal
//! does not record yet: the `retry_after` check takes it from its configuration instead.

use history::Entry;
use serde::Deserialize;

/// Anything the checks can read as one journal entry.
pub trait JournalItem {
    /// The entry itself.
    fn entry(&self) -> &Entry;
    /// The Retry-After (seconds) sent with this entry's response, when the journal recorded it.
    fn retry_after_s(&self) -> Option<f64> {
        None
    }
}

impl JournalItem for Entry {
    fn entry(&self) -> &Entry {
        self
    }
}

impl<T: JournalItem + ?Sized> JournalItem for &T {
    fn entry(&self) -> &Entry {
        (**self).entry()
    }
    fn retry_after_s(&self) -> Option<f64> {
        (**self).retry_after_s()
    }
}

/// One journal line with the optional fields the checks understand beyond [`Entry`].
///
/// Deserialize journal lines into this type (instead of [`Entry`]) to let the checks use them;
/// unknown fields are ignored either way.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JournalRecord {
    /// The entry as the fault server defines it.
    #[serde(flatten)]
    pub entry: Entry,
    /// Retry-After sent with the response, in seconds (absent from today's fault server).
    #[serde(default)]
    pub retry_after_s: Option<f64>,
}

impl JournalItem for JournalRecord {
    fn entry(&self) -> &Entry {
        &self.entry
    }
    fn retry_after_s(&self) -> Option<f64> {
        self.retry_after_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_retry_after_and_ignores_unknown_fields() {
        let line = r#"{"seq":1,"t_recv_us":0,"t_done_us":5,"unix_ms":1,"method":"POST",
            "path":"/orders","outcome":"responded","status":503,"retry_after_s":2.5,"new_field":1}"#;
        let r: JournalRecord = serde_json::from_str(line).expect("valid test line");
        assert_eq!(r.retry_after_s(), Some(2.5));
        assert_eq!(r.entry().status, Some(503));
        let plain: JournalRecord =
            serde_json::from_str(&line.replace(r#""retry_after_s":2.5,"#, ""))
                .expect("valid test line");
        assert_eq!(plain.retry_after_s(), None);
    }
}
