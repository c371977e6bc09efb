//! JSON pointers (RFC 6901) and the `$ref` strings that carry them.
//!
//! Every node this crate reports on is named by its pointer into the loaded document, so an
//! error, a schema to validate against and an operation all point at the same place a reader can
//! find with `jq` or an editor's JSON path search.

use percent_encoding::percent_decode_str;

/// One reference token escaped for a pointer: `~` as `~0`, `/` as `~1`.
pub fn escape(token: &str) -> String {
    if !token.contains(['~', '/']) {
        return token.to_string();
    }
    token.replace('~', "~0").replace('/', "~1")
}

/// `base` extended by one token.
pub fn push(base: &str, token: &str) -> String {
    let mut out = String::with_capacity(base.len() + token.len() + 1);
    out.push_str(base);
    out.push('/');
    out.push_str(&escape(token));
    out
}

/// What a `$ref` string names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefTarget {
    /// A node of this document, by its pointer (`""` is the root).
    Internal(String),
    /// A `$anchor`/plain-name fragment (`#name`), which names no position.
    Anchor(String),
    /// Another document: a relative or absolute file path, or a URL, and the pointer in it.
    External {
        /// The part before `#`.
        document: String,
        /// The pointer after `#` (`""` when absent).
        pointer: String,
    },
}

/// Splits a `$ref` string into the document it names and the pointer in it; the fragment is
/// percent-decoded, as a pointer in a URI fragment is percent-encoded.
pub fn parse_ref(reference: &str) -> RefTarget {
    let (document, fragment) = match reference.split_once('#') {
        Some((d, f)) => (d, f),
        None => (reference, ""),
    };
    let fragment = percent_decode_str(fragment)
        .decode_utf8_lossy()
        .into_owned();
    if document.is_empty() {
        if fragment.is_empty() || fragment.starts_with('/') {
            RefTarget::Internal(fragment)
        } else {
            RefTarget::Anchor(fragment)
        }
    } else {
        RefTarget::External {
            document: document.to_string(),
            pointer: fragment,
        }
    }
}

/// The `$ref` string that names `pointer` in this document.
pub fn to_ref(pointer: &str) -> String {
    let mut out = String::with_capacity(pointer.len() + 1);
    out.push('#');
    for c in pointer.chars() {
        // A fragment may not hold these; `{` and `}` of path templates are the common case.
        match c {
            '%' | '{' | '}' | ' ' | '"' | '<' | '>' | '\\' | '^' | '`' | '|' | '#' => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Whether a `$ref`'s document part is a URL (has a scheme) rather than a file path.
pub fn is_url(document: &str) -> bool {
    match document.split_once(':') {
        // A one-letter "scheme" is a Windows drive.
        Some((scheme, _)) => {
            scheme.len() > 1
                && scheme
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_escaped_and_refs_round_trip() {
        assert_eq!(escape("a/b~c"), "a~1b~0c");
        assert_eq!(push("/paths", "/orders/{id}"), "/paths/~1orders~1{id}");
        let p = push(&push("/paths", "/orders/{id}"), "get");
        let r = to_ref(&p);
        assert_eq!(r, "#/paths/~1orders~1%7Bid%7D/get");
        assert_eq!(parse_ref(&r), RefTarget::Internal(p));
    }

    #[test]
    fn refs_are_classified() {
        assert_eq!(
            parse_ref("#/components/schemas/Pet"),
            RefTarget::Internal("/components/schemas/Pet".into())
        );
        assert_eq!(parse_ref("#"), RefTarget::Internal(String::new()));
        assert_eq!(parse_ref("#node"), RefTarget::Anchor("node".into()));
        assert_eq!(
            parse_ref("pet.yaml#/Pet"),
            RefTarget::External {
                document: "pet.yaml".into(),
                pointer: "/Pet".into()
            }
        );
        assert!(is_url("https://example.com/a.yaml"));
        assert!(is_url("urn:x:y"));
        assert!(!is_url("schemas/pet.yaml"));
        assert!(!is_url("C:/specs/pet.yaml"));
    }
}
