//! Text both sides show a result in: evidence as lines, and text from requests made printable.

use std::borrow::Cow;

use crate::Evidence;

/// Journal sequence numbers, shortened after `limit` so one piece of evidence stays one line.
pub fn seqs(seqs: &[u64], limit: usize) -> String {
    let shown: Vec<String> = seqs.iter().take(limit).map(u64::to_string).collect();
    let mut out = shown.join(", ");
    if seqs.len() > limit {
        out.push_str(&format!(", … ({} in all)", seqs.len()));
    }
    out
}

/// One piece of evidence as plain text: the detail, then the key and the journal seqs it cites.
pub fn evidence_line(e: &Evidence, seq_limit: usize) -> String {
    let mut out = e.detail.clone();
    let mut refs = Vec::new();
    if let Some(k) = &e.key {
        refs.push(format!("key {k}"));
    }
    if !e.seqs.is_empty() {
        refs.push(format!("seq {}", seqs(&e.seqs, seq_limit)));
    }
    if !refs.is_empty() {
        out.push_str(&format!(" [{}]", refs.join("; ")));
    }
    out
}

/// Evidence items shown per check where space is short (the terminal, a result's `Display`); the
/// rest are counted.
pub const EVIDENCE_SHOWN: usize = 3;
/// Journal seqs shown per evidence item there.
pub const SEQS_SHOWN: usize = 8;

/// A check's first [`EVIDENCE_SHOWN`] pieces of evidence as bulleted lines, and how many more
/// there are, and where (`rest`).
pub fn evidence_lines(evidence: &[Evidence], rest: &str) -> Vec<String> {
    let mut lines: Vec<String> = evidence
        .iter()
        .take(EVIDENCE_SHOWN)
        .map(|e| format!("• {}", evidence_line(e, SEQS_SHOWN)))
        .collect();
    if evidence.len() > EVIDENCE_SHOWN {
        lines.push(format!(
            "… and {} more {rest}",
            evidence.len() - EVIDENCE_SHOWN
        ));
    }
    lines
}

/// Whether `c` must not reach a reader as it is: control characters (C0, DEL, C1) move the
/// cursor, clear the screen or end a line, and the bidirectional overrides reorder what is shown.
pub fn hidden(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Writes a [`hidden`] character as a visible `\u{..}` escape.
pub fn push_visible(out: &mut String, c: char) {
    out.push_str(&format!("\\u{{{:x}}}", c as u32));
}

/// `s` safe to print on a terminal: every [`hidden`] character written as a `\u{..}` escape, so
/// text that came from a request (a key, a path) cannot move the cursor, clear the screen or
/// disguise itself.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) {
            push_visible(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_seq_lists_are_cut() {
        assert_eq!(seqs(&[1, 2, 3], 5), "1, 2, 3");
        assert_eq!(seqs(&[1, 2, 3, 4], 2), "1, 2, … (4 in all)");
    }

    #[test]
    fn evidence_line_names_key_and_seqs() {
        let e = Evidence {
            detail: "7 orders for one key".into(),
            key: Some("k-1".into()),
            seqs: vec![4, 9],
        };
        assert_eq!(
            evidence_line(&e, 8),
            "7 orders for one key [key k-1; seq 4, 9]"
        );
    }
}
