//! The `{{name}}` template syntax: text with placeholders, split once into literal pieces and
//! placeholder names.
//!
//! The harness's request templates (`{{key}}`, `{{seq}}`, `{{var.NAME}}`, …) and the webhook
//! payload template (`{{event_id}}`, `{{subject}}`, …) are written the same way: a placeholder
//! opens with `{{`, closes with the first `}}` after it, and its name may have spaces around it
//! inside the braces. Here is only the syntax; which names exist, what they render to and how an
//! error is worded belong to each template's owner, which compiles the pieces into its own parts
//! once so that rendering is a walk with no parsing.

/// One piece of a template, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text written as it is (never empty).
    Text(&'a str),
    /// A placeholder's name, the spaces around it trimmed (may be empty: `{{ }}`).
    Name(&'a str),
}

/// A `{{` with no `}}` after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unclosed {
    /// The byte offset of the `{{` in the template.
    pub at: usize,
}

/// The pieces of `template`, in order; the first `{{` that is never closed ends them with
/// [`Unclosed`] (the text just before it is not returned: the template is refused). An iterator, so that a caller that refuses an unknown name refuses the first
/// fault in the text, whichever kind it is.
pub fn pieces(template: &str) -> Pieces<'_> {
    Pieces {
        template,
        at: 0,
        name_next: None,
    }
}

/// The iterator [`pieces`] returns.
#[derive(Debug, Clone)]
pub struct Pieces<'a> {
    template: &'a str,
    /// Where the part not yet read begins (the template's length once all is read, or after an
    /// unclosed placeholder).
    at: usize,
    /// A name found after the text just returned, and where the text after it begins.
    name_next: Option<(&'a str, usize)>,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = Result<Piece<'a>, Unclosed>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some((name, after)) = self.name_next.take() {
            self.at = after;
            return Some(Ok(Piece::Name(name)));
        }
        let rest = &self.template[self.at..];
        if rest.is_empty() {
            return None;
        }
        let Some(open) = rest.find("{{") else {
            self.at = self.template.len();
            return Some(Ok(Piece::Text(rest)));
        };
        let inside = &rest[open + 2..];
        let Some(close) = inside.find("}}") else {
            let at = self.at + open;
            self.at = self.template.len();
            return Some(Err(Unclosed { at }));
        };
        let name = inside[..close].trim();
        let after = self.at + open + 2 + close + 2;
        if open == 0 {
            self.at = after;
            return Some(Ok(Piece::Name(name)));
        }
        self.name_next = Some((name, after));
        Some(Ok(Piece::Text(&rest[..open])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(t: &str) -> Vec<Result<Piece<'_>, Unclosed>> {
        pieces(t).collect()
    }

    #[test]
    fn text_and_names_in_order() {
        assert_eq!(
            all("/orders/{{seq}}?k={{ key }}{{var.order}}"),
            [
                Ok(Piece::Text("/orders/")),
                Ok(Piece::Name("seq")),
                Ok(Piece::Text("?k=")),
                Ok(Piece::Name("key")),
                Ok(Piece::Name("var.order")),
            ]
        );
        assert_eq!(all(""), []);
        assert_eq!(all("plain"), [Ok(Piece::Text("plain"))]);
        assert_eq!(all("{{ }}x"), [Ok(Piece::Name("")), Ok(Piece::Text("x"))]);
        // A lone `}}` or `{` is text.
        assert_eq!(all("a}}{b"), [Ok(Piece::Text("a}}{b"))]);
        // A placeholder closes at the first `}}`.
        assert_eq!(all("{{a}}}"), [Ok(Piece::Name("a")), Ok(Piece::Text("}"))]);
    }

    #[test]
    fn an_unclosed_placeholder_ends_the_pieces_where_it_opens() {
        assert_eq!(all(r#"{"id":"{{event_id"}"#), [Err(Unclosed { at: 7 })]);
        assert_eq!(
            all("{{a}} {{b} {{c}}"),
            [
                Ok(Piece::Name("a")),
                Ok(Piece::Text(" ")),
                Ok(Piece::Name("b} {{c")),
            ]
        );
        assert_eq!(
            all("x{{y}}z{{"),
            [
                Ok(Piece::Text("x")),
                Ok(Piece::Name("y")),
                Err(Unclosed { at: 7 })
            ]
        );
        assert_eq!(all("{{"), [Err(Unclosed { at: 0 })]);
    }
}
