//! Text both sides show a result in: evidence as lines, and text from requests made printable.

use std::borrow::Cow;

use crate::Evidence;

/// A number to three significant digits, trailing zeros dropped: `9.42`, `100`, `0.0123`, `1230`.
pub fn sig3(v: f64) -> String {
    if !v.is_finite() {
        return "–".to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).max(0) as usize;
    let factor = 10f64.powi(2 - magnitude);
    let rounded = (v * factor).round() / factor;
    let s = format!("{rounded:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A fraction as a percentage to three significant digits: `9.42%`, `100%`, `0%`, `0.0123%`.
pub fn percent(fraction: f64) -> String {
    format!("{}%", sig3(fraction * 100.0))
}

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
/// findings there are (`total`, the kept evidence and those past the bound) and where the kept
/// ones are (`rest`, e.g. `in report.json`).
pub fn evidence_lines(evidence: &[Evidence], total: u64, rest: &str) -> Vec<String> {
    let mut lines: Vec<String> = evidence
        .iter()
        .take(EVIDENCE_SHOWN)
        .map(|e| format!("• {}", evidence_line(e, SEQS_SHOWN)))
        .collect();
    lines.extend(more_findings(lines.len(), evidence.len(), total, rest));
    lines
}

/// The line that follows the `shown` pieces of evidence a reader sees: how many more findings
/// there are (of `total`, `kept` of them in the evidence) and where the kept ones are (`rest`);
/// `None` when there are no more.
pub fn more_findings(shown: usize, kept: usize, total: u64, rest: &str) -> Option<String> {
    let (shown, kept) = (shown as u64, kept as u64);
    let total = total.max(kept);
    if total <= shown {
        return None;
    }
    let more = total - shown;
    Some(if kept == total {
        format!("… and {more} more {rest}")
    } else if kept > shown {
        format!(
            "… and {more} more: {} of them {rest} (the first {kept} of {total} findings are \
             kept; checks.max_evidence keeps more)",
            kept - shown
        )
    } else {
        format!("… and {more} more findings, not kept (checks.max_evidence keeps more than {kept})")
    })
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
