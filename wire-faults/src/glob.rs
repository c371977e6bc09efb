//! Globs over statements and keys: `*` any run of characters, `?` one, anything else literal.

/// A compiled glob.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    pattern: Vec<char>,
    fold_case: bool,
}

impl Glob {
    /// `fold_case`: compare ASCII letters without their case (SQL's keywords).
    pub(crate) fn new(pattern: &str, fold_case: bool) -> Glob {
        let pattern = if fold_case {
            pattern.to_ascii_uppercase()
        } else {
            pattern.to_string()
        };
        Glob {
            pattern: pattern.chars().collect(),
            fold_case,
        }
    }

    /// Whether the whole of `text` matches. Linear backtracking on the last `*`: no input makes
    /// it take more than pattern length × text length steps.
    pub(crate) fn matches(&self, text: &str) -> bool {
        let t: Vec<char> = if self.fold_case {
            text.chars().map(|c| c.to_ascii_uppercase()).collect()
        } else {
            text.chars().collect()
        };
        let p = &self.pattern;
        let (mut pi, mut ti) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
                pi += 1;
                ti += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some((pi, ti));
                pi += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|c| *c == '*')
    }
}

#[cfg(test)]
mod tests {
    use super::Glob;

    #[test]
    fn globs() {
        let g = |p: &str, t: &str| Glob::new(p, true).matches(t);
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
        assert!(!Glob::new("user:*", false).matches("USER:1"));
        assert!(Glob::new("user:*", false).matches("user:é"));
        let long = "a".repeat(5000);
        assert!(!g("*a*a*a*a*a*b", &long));
    }
}
