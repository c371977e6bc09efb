//! The exchanges of one probe, as a client recorded them: what the judges of a probe
//! ([`crate::lost_response`], [`crate::repeated_request`]) read.
//!
//! A probe that sends requests itself (`harness audit`'s, say) records each exchange as a
//! journal entry from the client's side — the method and path, the status or how it ended
//! without one, the resource the answer named, whether it was an idempotent replay — and keeps
//! beside it what a sentence about it quotes: the start of the answer's body, or why no answer
//! came. A judge is a pure function of those exchanges, grouped by the part each played in the
//! probe, so it can be proven on hand-written ones.

use std::collections::BTreeMap;

use history::Entry;
use verdict::Evidence;

/// One exchange: its journal entry, and what the client read of it beyond the entry.
#[derive(Debug, Clone, Copy)]
pub struct Exchange<'h> {
    /// The request and how it ended; `status` is `None` when no answer came.
    pub entry: &'h Entry,
    /// With an answer, the start of its body as text (empty for none); without, why none came
    /// (`no answer (timeout): …`).
    pub said: &'h str,
}

impl Exchange<'_> {
    /// The status, when an answer came.
    pub fn status(&self) -> Option<u16> {
        self.entry.status
    }

    /// `: "…"` with the start of the answer's body, or nothing when it had none: how a
    /// sentence quotes an answer after its status.
    pub fn quoted(&self) -> String {
        if self.said.is_empty() || self.entry.status.is_none() {
            String::new()
        } else {
            format!(": {:?}", self.said)
        }
    }

    /// The answer's status and its quoted body (`409: "duplicate"`), or why none came.
    pub fn answered(&self) -> String {
        match self.entry.status {
            Some(s) => format!("{s}{}", self.quoted()),
            None => self.said.to_string(),
        }
    }

    /// One line of evidence about this exchange.
    pub(crate) fn evidence(&self, detail: String) -> Evidence {
        Evidence {
            detail,
            key: None,
            seqs: vec![self.entry.seq],
        }
    }
}

/// The answers counted by status, in order of the statuses: `201×1, 409×9`, the exchanges that
/// got none counted as `no answer`.
pub fn statuses<'h>(exchanges: impl IntoIterator<Item = &'h Exchange<'h>>) -> String {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for x in exchanges {
        let k = match x.entry.status {
            Some(s) => s.to_string(),
            None => "no answer".to_string(),
        };
        *by.entry(k).or_insert(0) += 1;
    }
    by.iter()
        .map(|(k, n)| format!("{k}×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::sample::entry;
    use history::Outcome;

    #[test]
    fn an_answer_is_its_status_and_its_quoted_body_a_failure_its_reason() {
        let refused = entry(1, 0).status(409).build();
        let lost = entry(2, 1).no_response(Outcome::Reset).build();
        let empty = entry(3, 2).status(204).build();
        let x = |e, said| Exchange { entry: e, said };
        assert_eq!(x(&refused, "duplicate").answered(), "409: \"duplicate\"");
        assert_eq!(x(&empty, "").answered(), "204");
        assert_eq!(
            x(&lost, "no answer (reset): connection reset").answered(),
            "no answer (reset): connection reset"
        );
        assert_eq!(x(&lost, "no answer (reset)").quoted(), "");
        let all = [
            x(&refused, ""),
            x(&empty, ""),
            x(&lost, ""),
            x(&refused, ""),
        ];
        assert_eq!(statuses(&all), "204×1, 409×2, no answer×1");
        assert_eq!(statuses(&[] as &[Exchange]), "");
    }
}
