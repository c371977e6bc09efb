//! Parameter values written as OpenAPI's `style` and `explode` say (the "Style Examples" table of
//! the specification), and percent-encoded for the place they go: each value is encoded, the
//! style's separators are not.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;

use crate::parameter::Style;

/// Everything but RFC 3986's unreserved characters.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `allowReserved`: RFC 3986's reserved characters are left as they are.
const RESERVED_ALLOWED: &AsciiSet = &COMPONENT
    .remove(b':')
    .remove(b'/')
    .remove(b'?')
    .remove(b'#')
    .remove(b'[')
    .remove(b']')
    .remove(b'@')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=');

/// A scalar's text: a string as it is, anything else as JSON (`null` as the empty string).
pub fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn enc(s: &str, allow_reserved: bool) -> String {
    let set = if allow_reserved {
        RESERVED_ALLOWED
    } else {
        COMPONENT
    };
    utf8_percent_encode(s, set).to_string()
}

/// The entries of an object value, or None.
fn entries(v: &Value) -> Option<Vec<(&String, String)>> {
    v.as_object()
        .map(|m| m.iter().map(|(k, v)| (k, scalar(v))).collect())
}

fn items(v: &Value) -> Option<Vec<String>> {
    v.as_array().map(|a| a.iter().map(scalar).collect())
}

/// The text that replaces `{name}` in the path (simple, label or matrix style), encoded.
pub fn path(name: &str, value: &Value, style: Style, explode: bool) -> String {
    let e = |s: &str| enc(s, false);
    let n = e(name);
    let list = |sep: &str, v: &Value| -> String {
        if let Some(items) = items(v) {
            items.iter().map(|s| e(s)).collect::<Vec<_>>().join(sep)
        } else if let Some(entries) = entries(v) {
            if explode {
                entries
                    .iter()
                    .map(|(k, v)| format!("{}={}", e(k), e(v)))
                    .collect::<Vec<_>>()
                    .join(sep)
            } else {
                entries
                    .iter()
                    .flat_map(|(k, v)| [e(k), e(v)])
                    .collect::<Vec<_>>()
                    .join(",")
            }
        } else {
            e(&scalar(v))
        }
    };
    match style {
        Style::Label => {
            let sep = if explode { "." } else { "," };
            format!(".{}", list(sep, value))
        }
        Style::Matrix => {
            if let (true, Some(items)) = (explode, items(value)) {
                items.iter().map(|s| format!(";{n}={}", e(s))).collect()
            } else if let (true, Some(entries)) = (explode, entries(value)) {
                entries
                    .iter()
                    .map(|(k, v)| format!(";{}={}", e(k), e(v)))
                    .collect()
            } else {
                format!(";{n}={}", list(",", value))
            }
        }
        _ => list(",", value),
    }
}

/// The `name=value` pairs a query parameter adds, encoded.
pub fn query(
    name: &str,
    value: &Value,
    style: Style,
    explode: bool,
    allow_reserved: bool,
) -> Vec<String> {
    let e = |s: &str| enc(s, allow_reserved);
    let n = enc(name, false);
    if let Some(entries) = entries(value) {
        return match (style, explode) {
            (Style::DeepObject, _) => entries
                .iter()
                .map(|(k, v)| format!("{n}%5B{}%5D={}", enc(k, false), e(v)))
                .collect(),
            (_, true) => entries
                .iter()
                .map(|(k, v)| format!("{}={}", enc(k, false), e(v)))
                .collect(),
            (_, false) => vec![format!(
                "{n}={}",
                entries
                    .iter()
                    .flat_map(|(k, v)| [e(k), e(v)])
                    .collect::<Vec<_>>()
                    .join(",")
            )],
        };
    }
    if let Some(items) = items(value) {
        let sep = match style {
            Style::SpaceDelimited => "%20",
            Style::PipeDelimited => "%7C",
            _ => ",",
        };
        if explode && style == Style::Form {
            return items.iter().map(|s| format!("{n}={}", e(s))).collect();
        }
        return vec![format!(
            "{n}={}",
            items.iter().map(|s| e(s)).collect::<Vec<_>>().join(sep)
        )];
    }
    vec![format!("{n}={}", e(&scalar(value)))]
}

/// A header's value (simple style); None when the text cannot be a header value (a control
/// character, a non-ASCII character, or whitespace at either end).
pub fn header(value: &Value, explode: bool) -> Option<String> {
    let text = if let Some(items) = items(value) {
        items.join(",")
    } else if let Some(entries) = entries(value) {
        entries
            .iter()
            .map(|(k, v)| {
                if explode {
                    format!("{k}={v}")
                } else {
                    format!("{k},{v}")
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    } else {
        scalar(value)
    };
    let fits = text.chars().all(|c| c == '\t' || (' '..='~').contains(&c)) && text.trim() == text;
    fits.then_some(text)
}

/// A cookie's `name=value` (form style); None when the value holds a character a cookie may not.
pub fn cookie(name: &str, value: &Value) -> Option<String> {
    let text = if let Some(items) = items(value) {
        items.join(",")
    } else if let Some(entries) = entries(value) {
        entries
            .iter()
            .flat_map(|(k, v)| [k.to_string(), v.clone()])
            .collect::<Vec<_>>()
            .join(",")
    } else {
        scalar(value)
    };
    // RFC 6265 cookie-octet.
    let fits = text
        .bytes()
        .all(|b| matches!(b, 0x21 | 0x23..=0x2B | 0x2D..=0x3A | 0x3C..=0x5B | 0x5D..=0x7E));
    fits.then(|| format!("{name}={text}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The specification's style table, for `color` = "blue", ["blue","black","brown"] and
    /// {"R":100,"G":200,"B":150} (objects here in key order: B, G, R).
    #[test]
    fn the_specification_style_table() {
        let s = json!("blue");
        let a = json!(["blue", "black", "brown"]);
        let o = json!({"R": 100, "G": 200, "B": 150});
        assert_eq!(path("color", &s, Style::Simple, false), "blue");
        assert_eq!(path("color", &a, Style::Simple, false), "blue,black,brown");
        assert_eq!(path("color", &o, Style::Simple, false), "B,150,G,200,R,100");
        assert_eq!(path("color", &o, Style::Simple, true), "B=150,G=200,R=100");
        assert_eq!(path("color", &a, Style::Label, false), ".blue,black,brown");
        assert_eq!(path("color", &a, Style::Label, true), ".blue.black.brown");
        assert_eq!(path("color", &s, Style::Matrix, false), ";color=blue");
        assert_eq!(
            path("color", &a, Style::Matrix, true),
            ";color=blue;color=black;color=brown"
        );
        assert_eq!(path("color", &o, Style::Matrix, true), ";B=150;G=200;R=100");
        assert_eq!(
            query("color", &a, Style::Form, true, false),
            ["color=blue", "color=black", "color=brown"]
        );
        assert_eq!(
            query("color", &a, Style::Form, false, false),
            ["color=blue,black,brown"]
        );
        assert_eq!(
            query("color", &o, Style::Form, true, false),
            ["B=150", "G=200", "R=100"]
        );
        assert_eq!(
            query("color", &a, Style::SpaceDelimited, false, false),
            ["color=blue%20black%20brown"]
        );
        assert_eq!(
            query("color", &a, Style::PipeDelimited, false, false),
            ["color=blue%7Cblack%7Cbrown"]
        );
        assert_eq!(
            query("color", &o, Style::DeepObject, true, false),
            ["color%5BB%5D=150", "color%5BG%5D=200", "color%5BR%5D=100"]
        );
    }

    #[test]
    fn values_are_encoded_and_unfit_headers_refused() {
        assert_eq!(
            path("id", &json!("a/b c"), Style::Simple, false),
            "a%2Fb%20c"
        );
        assert_eq!(
            query("q", &json!("a&b=c"), Style::Form, true, false),
            ["q=a%26b%3Dc"]
        );
        assert_eq!(
            query("q", &json!("a/b"), Style::Form, true, true),
            ["q=a/b"]
        );
        assert_eq!(header(&json!("tok en"), false).as_deref(), Some("tok en"));
        assert_eq!(header(&json!("a\nb"), false), None);
        assert_eq!(header(&json!("é"), false), None);
        assert_eq!(cookie("s", &json!("abc")).as_deref(), Some("s=abc"));
        assert_eq!(cookie("s", &json!("a;b")), None);
    }
}
