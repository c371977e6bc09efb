//! A statement's text as rules match it and the journal keeps it, and what it does to its
//! transaction.
//!
//! Normalized: comments dropped (`-- …` and nested `/* … */`), every run of whitespace outside
//! quotes made one space, no leading or trailing space, no trailing `;`. Quoted text — `'…'`
//! (with `''`), `E'…'` (with backslash escapes), `"…"` identifiers and `$tag$…$tag$` — is kept as
//! it is. The result is cut at a bound (on a character boundary); the work is bounded by the
//! message, which the reader bounded.

use history::TxControl;

/// A statement's normalized text, and whether it was cut at `max` bytes.
pub fn normalize(text: &[u8], max: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(text);
    let mut out = String::with_capacity(text.len().min(max));
    let mut truncated = false;
    let mut space = false;
    let mut chars = text.char_indices().peekable();
    let push = |out: &mut String, s: &str, space: &mut bool| -> bool {
        if *space && !out.is_empty() {
            if out.len() + 1 > max {
                return false;
            }
            out.push(' ');
        }
        *space = false;
        if out.len() + s.len() > max {
            // Whole characters only.
            for c in s.chars() {
                if out.len() + c.len_utf8() > max {
                    break;
                }
                out.push(c);
            }
            return false;
        }
        out.push_str(s);
        true
    };
    let src: &str = &text;
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|(_, c)| *c);
        let piece: &str = match c {
            '-' if next == Some('-') => {
                for (_, c) in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                space = true;
                continue;
            }
            '/' if next == Some('*') => {
                chars.next();
                let mut depth = 1usize;
                while depth > 0 {
                    match chars.next() {
                        Some((_, '*')) if chars.peek().map(|p| p.1) == Some('/') => {
                            chars.next();
                            depth -= 1;
                        }
                        Some((_, '/')) if chars.peek().map(|p| p.1) == Some('*') => {
                            chars.next();
                            depth += 1;
                        }
                        Some(_) => {}
                        None => break,
                    }
                }
                space = true;
                continue;
            }
            c if c.is_whitespace() => {
                space = true;
                continue;
            }
            '\'' | '"' => {
                let escapes = c == '\''
                    && i > 0
                    && matches!(src.as_bytes()[i - 1], b'E' | b'e')
                    && (i < 2 || !src.as_bytes()[i - 2].is_ascii_alphanumeric());
                let end = quoted_end(src, i, c, escapes);
                while chars.peek().is_some_and(|(j, _)| *j < end) {
                    chars.next();
                }
                &src[i..end]
            }
            '$' => match dollar_tag(src, i) {
                Some(tag) => {
                    let body = i + tag.len();
                    let end = src[body..]
                        .find(tag)
                        .map_or(src.len(), |k| body + k + tag.len());
                    while chars.peek().is_some_and(|(j, _)| *j < end) {
                        chars.next();
                    }
                    &src[i..end]
                }
                None => &src[i..i + 1],
            },
            _ => &src[i..i + c.len_utf8()],
        };
        if !push(&mut out, piece, &mut space) {
            truncated = true;
            break;
        }
    }
    while out.ends_with(';') || out.ends_with(' ') {
        out.pop();
    }
    (out, truncated)
}

/// Where a quoted run that starts at `start` with `quote` ends (after its closing quote, or at
/// the end of the text).
fn quoted_end(src: &str, start: usize, quote: char, backslash: bool) -> usize {
    let b = src.as_bytes();
    let q = quote as u8;
    let mut i = start + 1;
    while i < b.len() {
        if backslash && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == q {
            if b.get(i + 1) == Some(&q) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    src.len()
}

/// The `$tag$` that opens a dollar-quoted string at `start`, if one does (`$1` is a parameter).
fn dollar_tag(src: &str, start: usize) -> Option<&str> {
    let rest = &src[start + 1..];
    let end = rest.find('$')?;
    let tag = &rest[..end];
    let ok = tag
        .chars()
        .enumerate()
        .all(|(k, c)| c == '_' || c.is_alphabetic() || (k > 0 && c.is_ascii_digit()));
    ok.then(|| &src[start..start + end + 2])
}

/// What a (normalized) statement does to its transaction, when it is a transaction control
/// statement. Only the first statement of a multi-statement text is read.
pub fn control(normalized: &str) -> Option<TxControl> {
    let mut words = normalized
        .split(|c: char| c.is_whitespace() || c == ';')
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_uppercase());
    let first = words.next()?;
    let second = words.next();
    let second = second.as_deref();
    match first.as_str() {
        "BEGIN" => Some(TxControl::Begin),
        "START" if second == Some("TRANSACTION") => Some(TxControl::Begin),
        "COMMIT" | "END" if second != Some("PREPARED") => Some(TxControl::Commit),
        "ROLLBACK" | "ABORT" => match second {
            Some("TO") => Some(TxControl::RollbackTo),
            Some("PREPARED") => None,
            Some("WORK" | "TRANSACTION") if words.next().as_deref() == Some("TO") => {
                Some(TxControl::RollbackTo)
            }
            _ => Some(TxControl::Rollback),
        },
        "SAVEPOINT" => Some(TxControl::Savepoint),
        "RELEASE" => Some(TxControl::Release),
        "PREPARE" if second == Some("TRANSACTION") => Some(TxControl::Prepare),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> String {
        normalize(s.as_bytes(), 1000).0
    }

    #[test]
    fn comments_and_whitespace_go_quotes_stay() {
        assert_eq!(
            n("  INSERT  INTO t\n\t(a) -- the row\nVALUES ('a  b', \"C  d\") ;  "),
            "INSERT INTO t (a) VALUES ('a  b', \"C  d\")"
        );
        assert_eq!(n("/* x /* nested */ y */SELECT 1;"), "SELECT 1");
        assert_eq!(
            n("SELECT 'it''s  -- not a comment'"),
            "SELECT 'it''s  -- not a comment'"
        );
        assert_eq!(n("SELECT E'a\\'  b'  ,  2"), "SELECT E'a\\'  b' , 2");
        assert_eq!(n("SELECT $f$ a  ; b $f$,  $1"), "SELECT $f$ a  ; b $f$, $1");
        assert_eq!(n("SELECT 'unterminated  x"), "SELECT 'unterminated  x");
    }

    #[test]
    fn cut_on_a_character_boundary_and_said_so() {
        let (s, cut) = normalize("SELECT 'ééééé'".as_bytes(), 10);
        assert!(cut);
        assert!(s.len() <= 10 && s.starts_with("SELECT '"), "{s}");
        assert_eq!(normalize(b"SELECT 1", 8), ("SELECT 1".to_string(), false));
    }

    #[test]
    fn transaction_control() {
        for (s, c) in [
            ("BEGIN", Some(TxControl::Begin)),
            ("begin isolation level serializable", Some(TxControl::Begin)),
            ("START TRANSACTION", Some(TxControl::Begin)),
            ("COMMIT", Some(TxControl::Commit)),
            ("end", Some(TxControl::Commit)),
            ("COMMIT PREPARED 'x'", None),
            ("ROLLBACK", Some(TxControl::Rollback)),
            ("ABORT", Some(TxControl::Rollback)),
            ("ROLLBACK TO SAVEPOINT a", Some(TxControl::RollbackTo)),
            ("ROLLBACK WORK TO a", Some(TxControl::RollbackTo)),
            ("SAVEPOINT a", Some(TxControl::Savepoint)),
            ("RELEASE SAVEPOINT a", Some(TxControl::Release)),
            ("PREPARE TRANSACTION 'x'", Some(TxControl::Prepare)),
            (
                "BEGIN; INSERT INTO t VALUES (1); COMMIT",
                Some(TxControl::Begin),
            ),
            ("INSERT INTO t VALUES (1)", None),
            ("", None),
        ] {
            assert_eq!(control(s), c, "{s}");
        }
    }
}
