//! Strings drawn from a `pattern`, through `rand_regex` over `regex-syntax`'s parse of it.
//!
//! A JSON Schema pattern is an ECMA-262 regex, in which `\d`, `\w` and `\s` are ASCII classes;
//! `regex-syntax` reads them as Unicode classes. Every class is therefore narrowed to printable
//! ASCII where it has any printable ASCII member (`\d` becomes `[0-9]`, `.` becomes `[ -~]`), which
//! both restores ECMA's meaning for those escapes and keeps values fit for a header or a URL; a
//! class with no ASCII member (`\p{Greek}`) is kept as it is. Anchors (`^`, `$`) are dropped, as
//! rand_regex does not draw them: a string made of what they surround matches the anchored pattern.

use regex_syntax::hir::{
    Capture, Class, ClassBytes, ClassBytesRange, ClassUnicode, ClassUnicodeRange, Hir, HirKind,
    Repetition,
};

/// A generator of strings matching `pattern`, unbounded quantifiers cut at `max_repeat`.
pub(crate) fn compile(pattern: &str, max_repeat: u32) -> Result<rand_regex::Regex, String> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(&literal_braces(pattern))
        .map_err(|e| first_line(&e.to_string()))?;
    rand_regex::Regex::with_hir(printable(hir), max_repeat).map_err(|e| e.to_string())
}

/// Whether `text` matches `pattern` (unanchored, as JSON Schema means it); a pattern this crate
/// cannot read matches nothing.
pub(crate) fn is_match(pattern: &str, text: &str) -> bool {
    regex::Regex::new(&literal_braces(pattern)).is_ok_and(|r| r.is_match(text))
}

/// ECMA-262 reads a `{` that does not open a quantifier (`{4}`, `{2,}`, `{1,3}`) as a literal
/// brace, and a `}` that closes none likewise; the Rust syntax wants both escaped.
fn literal_braces(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut i = 0;
    let mut in_class = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                out.push(c);
                if let Some(next) = chars.get(i + 1) {
                    out.push(*next);
                }
                i += 2;
                continue;
            }
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '{' if !in_class => {
                let close = chars[i + 1..]
                    .iter()
                    .position(|c| *c == '}')
                    .map(|p| i + 1 + p);
                let quantifier = close.is_some_and(|end| {
                    let inner: String = chars[i + 1..end].iter().collect();
                    let mut parts = inner.splitn(2, ',');
                    let low = parts.next().unwrap_or("");
                    let high = parts.next();
                    !low.is_empty()
                        && low.chars().all(|c| c.is_ascii_digit())
                        && high.is_none_or(|h| h.chars().all(|c| c.is_ascii_digit()))
                });
                match (quantifier, close) {
                    (true, Some(end)) => {
                        out.extend(&chars[i..=end]);
                        i = end + 1;
                        continue;
                    }
                    _ => {
                        out.push_str("\\{");
                        i += 1;
                        continue;
                    }
                }
            }
            '}' if !in_class => {
                out.push_str("\\}");
                i += 1;
                continue;
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    out
}

fn first_line(message: &str) -> String {
    // regex-syntax's errors draw the pattern with a caret over several lines; keep the gist.
    message
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("error:"))
        .map(|l| l.trim().trim_start_matches("error:").trim().to_string())
        .unwrap_or_else(|| message.lines().next().unwrap_or("").to_string())
}

fn printable(hir: Hir) -> Hir {
    match hir.into_kind() {
        HirKind::Class(Class::Unicode(c)) => {
            let mut narrowed = c.clone();
            narrowed.intersect(&ClassUnicode::new([ClassUnicodeRange::new(' ', '~')]));
            Hir::class(Class::Unicode(if narrowed.ranges().is_empty() {
                c
            } else {
                narrowed
            }))
        }
        HirKind::Class(Class::Bytes(c)) => {
            let mut narrowed = c.clone();
            narrowed.intersect(&ClassBytes::new([ClassBytesRange::new(b' ', b'~')]));
            Hir::class(Class::Bytes(if narrowed.ranges().is_empty() {
                c
            } else {
                narrowed
            }))
        }
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            sub: Box::new(printable(*r.sub)),
            ..r
        }),
        HirKind::Capture(c) => Hir::capture(Capture {
            sub: Box::new(printable(*c.sub)),
            ..c
        }),
        HirKind::Concat(list) => Hir::concat(list.into_iter().map(printable).collect()),
        HirKind::Alternation(list) => Hir::alternation(list.into_iter().map(printable).collect()),
        HirKind::Literal(l) => Hir::literal(l.0),
        // rand_regex draws no anchors or boundaries; the string drawn from what they surround
        // satisfies `^…$` anyway, and the validator judges a word boundary.
        HirKind::Look(_) => Hir::empty(),
        HirKind::Empty => Hir::empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::ChaCha8Rng;
    use rand::{RngExt, SeedableRng};

    #[test]
    fn classes_are_ascii_and_strings_match() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for pattern in [
            r"^\d{3}-\w+$",
            r"^[A-Z]{2}\s.+$",
            r"^(ab|cd)*x?$",
            r"^\S+@\S+$",
        ] {
            let r = compile(pattern, 8).unwrap();
            let check = regex::Regex::new(pattern).unwrap();
            for _ in 0..50 {
                let s: String = rng.sample(&r);
                assert!(
                    s.chars().all(|c| (' '..='~').contains(&c)),
                    "{pattern}: {s:?}"
                );
                assert!(check.is_match(&s), "{pattern}: {s:?}");
            }
        }
    }

    #[test]
    fn ecma_literal_braces_are_read_as_literals() {
        assert_eq!(literal_braces(r"^{[0-9]{4}}$"), r"^\{[0-9]{4}\}$");
        assert_eq!(literal_braces(r"a{2,}b{1,3}[{}]\{"), r"a{2,}b{1,3}[{}]\{");
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let pattern =
            r"^(?:{[0-9a-fA-F]{4}(?:-?[0-9a-fA-F]{4}){7}}|[0-9a-fA-F]{4}(?:-?[0-9a-fA-F]{4}){7})$";
        let r = compile(pattern, 8).unwrap();
        for _ in 0..20 {
            let s: String = rng.sample(&r);
            assert!(is_match(pattern, &s), "{s}");
        }
    }

    #[test]
    fn an_unreadable_pattern_says_why() {
        let e = compile(r"^(?=a)b$", 8).unwrap_err();
        assert!(e.contains("look-around"), "{e}");
        assert!(!is_match(r"(?=a)", "a"));
    }
}
