//! Globs: patterns where `*` stands for a run of characters, matched against the whole of a text.
//!
//! Two syntaxes share one matcher:
//! - [`Glob::path`], for request paths and gRPC methods (the fault server's rules, the audit's
//!   `--only /orders/*`): `*` any run of characters within one `/`-separated segment, `**` any
//!   run across segments; everything else, `?` included, is literal. A pattern with no `*` is an
//!   exact match.
//! - [`Glob::text`], for statements and keys (the protocol proxies' SQL and Redis rules): `*` any
//!   run of characters, `/` included, `?` exactly one character; everything else is literal, its
//!   ASCII letters compared with or without their case ([`Case`]).
//!
//! A pattern is compiled once into tokens; matching runs the pattern's automaton over the text
//! with every position it may be at held at once, so no input makes it backtrack: a match takes
//! at most (tokens + 1) × characters steps and (tokens + 1) × 2 booleans, whatever the pattern.

/// How a [`Glob::text`] pattern compares letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Exactly: `user:*` does not match `USER:1`.
    Sensitive,
    /// ASCII letters without their case (SQL's keywords): `COMMIT` matches `commit`. Other
    /// characters are compared exactly.
    FoldAscii,
}

/// A compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
    case: Case,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// This character.
    Char(char),
    /// Any one character.
    One,
    /// Any run of characters but `/` (a path's `*`).
    InSegment,
    /// Any run of characters (a path's `**`, a text's `*`).
    Any,
}

impl Glob {
    /// A path glob: `*` within one segment, `**` across segments, anything else literal and
    /// compared exactly. `/orders/*` matches `/orders/1` but not `/orders/1/pay`; `/api/**`
    /// matches both `/api/a` and `/api/a/b/c`.
    pub fn path(pattern: &str) -> Glob {
        let mut tokens = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '*' {
                if chars.peek() == Some(&'*') {
                    chars.next();
                    push_star(&mut tokens, Token::Any);
                } else {
                    push_star(&mut tokens, Token::InSegment);
                }
            } else {
                tokens.push(Token::Char(c));
            }
        }
        Glob {
            tokens,
            case: Case::Sensitive,
        }
    }

    /// A text glob: `*` any run of characters, `?` one, anything else literal, compared as
    /// `case` says. `insert into orders*` with [`Case::FoldAscii`] matches
    /// `INSERT INTO orders (sku) VALUES ($1)`.
    pub fn text(pattern: &str, case: Case) -> Glob {
        let mut tokens = Vec::new();
        for c in pattern.chars() {
            match c {
                '*' => push_star(&mut tokens, Token::Any),
                '?' => tokens.push(Token::One),
                c => tokens.push(Token::Char(c)),
            }
        }
        Glob { tokens, case }
    }

    /// Whether the whole of `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        let n = self.tokens.len();
        // `at[i]`: the pattern may be at token `i` (`n`: past its end) after the text read so far.
        let mut at = vec![false; n + 1];
        let mut next = vec![false; n + 1];
        at[0] = true;
        self.skip_stars(&mut at);
        for c in text.chars() {
            next.iter_mut().for_each(|b| *b = false);
            let mut any = false;
            for (i, token) in self.tokens.iter().enumerate() {
                if !at[i] {
                    continue;
                }
                let (stay, advance) = match *token {
                    Token::Char(p) => (false, self.same(p, c)),
                    Token::One => (false, true),
                    Token::InSegment => (c != '/', false),
                    Token::Any => (true, false),
                };
                next[i] |= stay;
                next[i + 1] |= advance;
                any |= stay || advance;
            }
            if !any {
                return false;
            }
            self.skip_stars(&mut next);
            std::mem::swap(&mut at, &mut next);
        }
        at[n]
    }

    /// A star may match nothing: wherever the pattern may be at a star, it may be past it.
    fn skip_stars(&self, at: &mut [bool]) {
        for (i, token) in self.tokens.iter().enumerate() {
            if at[i] && matches!(token, Token::InSegment | Token::Any) {
                at[i + 1] = true;
            }
        }
    }

    fn same(&self, pattern: char, text: char) -> bool {
        match self.case {
            Case::Sensitive => pattern == text,
            Case::FoldAscii => pattern.eq_ignore_ascii_case(&text),
        }
    }
}

/// Appends a star, merged with a star just before it: two stars in a row match what the wider
/// one matches (`*` then `**` is `**`), and one token keeps the automaton small.
fn push_star(tokens: &mut Vec<Token>, star: Token) {
    match tokens.last_mut() {
        Some(last @ (Token::InSegment | Token::Any)) => {
            if star == Token::Any {
                *last = Token::Any;
            }
        }
        _ => tokens.push(star),
    }
}

#[cfg(test)]
mod tests {
    use super::{Case, Glob};

    #[test]
    fn path_globs_keep_stars_within_a_segment() {
        let g = |p: &str, t: &str| Glob::path(p).matches(t);
        assert!(g("/orders", "/orders"));
        assert!(!g("/orders", "/orders/1"));
        assert!(!g("/orders", "/ORDERS"));
        assert!(g("/orders/*", "/orders/1"));
        assert!(g("/orders/*", "/orders/"));
        assert!(!g("/orders/*", "/orders/1/pay"));
        assert!(g("/orders/*/pay", "/orders/abc/pay"));
        assert!(!g("/orders/*/pay", "/orders/a/b/pay"));
        assert!(g("/api/**", "/api/a/b/c"));
        assert!(g("/**/pay", "/orders/x/pay"));
        assert!(g("/orders.v1.Orders/*", "/orders.v1.Orders/GetOrder"));
        assert!(g("/**", "/shop.v1.Shop/Buy"));
        assert!(g("/a/***", "/a/b/c"), "`*` after `**` adds nothing");
        assert!(g("/what?", "/what?"), "`?` is literal in a path");
        assert!(!g("/what?", "/whats"));
        assert!(g("/é/*", "/é/ü"));
        assert!(g("", ""));
        assert!(!g("", "/"));
    }

    #[test]
    fn text_globs_match_any_run_and_one_character() {
        let g = |p: &str, t: &str| Glob::text(p, Case::FoldAscii).matches(t);
        assert!(g("COMMIT", "commit"));
        assert!(!g("COMMIT", "COMMIT AND CHAIN"));
        assert!(g(
            "insert into orders*",
            "INSERT INTO orders (sku) VALUES ($1)"
        ));
        assert!(g("*orders*", "UPDATE orders SET x = 1"));
        assert!(g("SELECT ?", "select 1"));
        assert!(!g("SELECT ?", "select 10"));
        assert!(g("*", ""));
        assert!(g("a*", "a/b/c"), "a text's `*` crosses `/`");
        assert!(!Glob::text("user:*", Case::Sensitive).matches("USER:1"));
        assert!(Glob::text("user:*", Case::Sensitive).matches("user:é"));
        assert!(Glob::text("?", Case::Sensitive).matches("é"));
        assert!(!Glob::text("é", Case::FoldAscii).matches("É"), "ASCII only");
    }

    #[test]
    fn no_pattern_makes_matching_slow() {
        let long = "a".repeat(5000);
        assert!(!Glob::text("*a*a*a*a*a*b", Case::FoldAscii).matches(&long));
        let path = "/a".repeat(2500);
        assert!(!Glob::path("/**a**a**a**a**a**b").matches(&path));
        assert!(!Glob::path("/*a*a*a*a*a*b").matches(&long));
    }

    /// The matcher against the plain recursive definition of each syntax, on every pattern and
    /// text short enough to list.
    #[test]
    fn matches_the_definition_on_every_short_pattern_and_text() {
        /// One pattern character: literal, `?`, `*` within a segment, or `*` anywhere.
        fn reference(p: &[char], t: &[char], path: bool) -> bool {
            match p.split_first() {
                None => t.is_empty(),
                Some(('*', rest)) => {
                    let (across, rest) = match rest.split_first() {
                        Some(('*', r)) if path => (true, r),
                        _ => (!path, rest),
                    };
                    (0..=t.len())
                        .take_while(|i| across || !t[..*i].contains(&'/'))
                        .any(|i| reference(rest, &t[i..], path))
                }
                Some(('?', rest)) if !path => !t.is_empty() && reference(rest, &t[1..], path),
                Some((c, rest)) => t.first() == Some(c) && reference(rest, &t[1..], path),
            }
        }
        fn all(alphabet: &[char], max: usize) -> Vec<String> {
            let mut out = vec![String::new()];
            let mut last = vec![String::new()];
            for _ in 0..max {
                last = last
                    .iter()
                    .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                    .collect();
                out.extend(last.iter().cloned());
            }
            out
        }
        let patterns = all(&['a', '/', '*', '?'], 5);
        let texts = all(&['a', '/', '?'], 5);
        for p in &patterns {
            let pc: Vec<char> = p.chars().collect();
            let (path, text) = (Glob::path(p), Glob::text(p, Case::Sensitive));
            for t in &texts {
                let tc: Vec<char> = t.chars().collect();
                assert_eq!(
                    path.matches(t),
                    reference(&pc, &tc, true),
                    "path {p:?} {t:?}"
                );
                assert_eq!(
                    text.matches(t),
                    reference(&pc, &tc, false),
                    "text {p:?} {t:?}"
                );
            }
        }
        let fold = Glob::text("Ab?*", Case::FoldAscii);
        assert!(fold.matches("aBc") && fold.matches("ABCD") && !fold.matches("ab"));
    }
}
