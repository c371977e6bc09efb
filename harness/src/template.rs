//! Request templates with per-request values: `{{uuid}}`, `{{seq}}`, `{{client}}`, `{{key}}`,
//! `{{round}}`, and `{{var.NAME}}` for a value an earlier phase captured. The syntax is
//! `primitives::template`'s, shared with the webhook payload template; compiled once when the
//! scenario is resolved, rendering is a walk over literal and variable parts.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use primitives::template::{pieces, Piece};

use crate::http::{Outgoing, Target};

/// A placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// A fresh UUID per operation.
    Uuid,
    /// The operation's number in its phase, from 1.
    Seq,
    /// The client (worker) index, from 0.
    Client,
    /// The operation's Idempotency-Key (shared by a burst; per attempt when the policy says so).
    Key,
    /// The burst round, from 1 (0 outside bursts).
    Round,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Lit(String),
    Var(Var),
    /// `{{var.NAME}}`: a value an earlier phase captured from a response.
    Named(String),
}

/// A string with placeholders.
#[derive(Debug, Clone, PartialEq)]
pub struct Text(Vec<Part>);

impl Text {
    /// Compiles `s`, rejecting unknown placeholders.
    pub fn parse(s: &str) -> Result<Text, String> {
        let mut parts = Vec::new();
        for piece in pieces(s) {
            let name = match piece {
                Ok(Piece::Text(t)) => {
                    parts.push(Part::Lit(t.to_string()));
                    continue;
                }
                Ok(Piece::Name(name)) => name,
                Err(_) => return Err(format!("unclosed placeholder in {s:?}: missing }}}}")),
            };
            if let Some(captured) = name.strip_prefix("var.") {
                if captured.is_empty() {
                    return Err(format!(
                        "empty variable name in {s:?}: write {{{{var.NAME}}}}"
                    ));
                }
                parts.push(Part::Named(captured.to_string()));
                continue;
            }
            let var = match name {
                "uuid" => Var::Uuid,
                "seq" => Var::Seq,
                "client" => Var::Client,
                "key" => Var::Key,
                "round" => Var::Round,
                other => {
                    return Err(format!(
                        "unknown placeholder {{{{{other}}}}} (expected uuid, seq, client, key, round or var.NAME)"
                    ))
                }
            };
            parts.push(Part::Var(var));
        }
        Ok(Text(parts))
    }

    /// Whether the text uses `v`.
    pub fn uses(&self, v: Var) -> bool {
        self.0.contains(&Part::Var(v))
    }

    /// The text itself when it has no placeholder, the same for every request.
    pub fn literal(&self) -> Option<String> {
        self.0
            .iter()
            .map(|p| match p {
                Part::Lit(s) => Some(s.as_str()),
                Part::Var(_) | Part::Named(_) => None,
            })
            .collect()
    }

    /// The captured variables (`{{var.NAME}}`) the text refers to.
    pub fn named(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|p| match p {
            Part::Named(n) => Some(n.as_str()),
            _ => None,
        })
    }

    fn render_into(&self, out: &mut String, vars: &Vars<'_>) {
        for p in &self.0 {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Var(Var::Uuid) => out.push_str(vars.uuid),
                Part::Var(Var::Seq) => out.push_str(itoa::Buffer::new().format(vars.seq)),
                Part::Var(Var::Client) => out.push_str(itoa::Buffer::new().format(vars.client)),
                Part::Var(Var::Key) => out.push_str(vars.key),
                Part::Var(Var::Round) => out.push_str(itoa::Buffer::new().format(vars.round)),
                Part::Named(n) => {
                    if let Some(v) = vars.captured.and_then(|c| c.get(n)) {
                        out.push_str(v);
                    }
                }
            }
        }
    }

    /// About how long a rendering is: its literal parts, and room for a number or a key.
    fn len_hint(&self) -> usize {
        self.0
            .iter()
            .map(|p| match p {
                Part::Lit(s) => s.len(),
                _ => 32,
            })
            .sum()
    }

    /// Renders with `vars`.
    pub fn render(&self, vars: &Vars<'_>) -> String {
        let mut s = String::new();
        self.render_into(&mut s, vars);
        s
    }
}

/// The values placeholders take for one attempt.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    /// `{{seq}}`: the operation's number in its phase.
    pub seq: u64,
    /// `{{client}}`: the worker's index.
    pub client: u32,
    /// `{{uuid}}`: one per operation.
    pub uuid: &'a str,
    /// `{{key}}`: the operation's Idempotency-Key.
    pub key: &'a str,
    /// `{{round}}`: the burst round.
    pub round: u64,
    /// Values captured by earlier phases.
    pub captured: Option<&'a std::collections::HashMap<String, String>>,
}

/// A compiled request template.
#[derive(Debug, Clone)]
pub struct RequestTemplate {
    /// The method.
    pub method: Method,
    /// The path, with placeholders.
    pub path: Text,
    /// Headers, values with placeholders.
    pub headers: Vec<(HeaderName, Text)>,
    /// Body text (JSON already serialized) and whether it is JSON.
    pub body: Option<(Text, bool)>,
}

impl RequestTemplate {
    /// A `GET path` with no placeholders.
    pub fn get(path: &str) -> RequestTemplate {
        RequestTemplate {
            method: Method::GET,
            path: Text(vec![Part::Lit(path.to_string())]),
            headers: Vec::new(),
            body: None,
        }
    }

    /// The captured variables the template refers to.
    pub fn named(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.path.named().collect();
        for (_, t) in &self.headers {
            v.extend(t.named());
        }
        if let Some((t, _)) = &self.body {
            v.extend(t.named());
        }
        v
    }

    /// Whether no part has a placeholder: every rendering is the same request.
    pub fn is_literal(&self) -> bool {
        self.path.literal().is_some()
            && self.headers.iter().all(|(_, v)| v.literal().is_some())
            && self
                .body
                .as_ref()
                .is_none_or(|(t, _)| t.literal().is_some())
    }

    /// Whether any part uses `v`.
    pub fn uses(&self, v: Var) -> bool {
        self.path.uses(v)
            || self.headers.iter().any(|(_, t)| t.uses(v))
            || self.body.as_ref().is_some_and(|(t, _)| t.uses(v))
    }

    /// Renders one attempt.
    ///
    /// A header whose value, built from a captured variable, cannot be sent (a control character:
    /// CR and LF would split the request) makes the whole attempt unsendable rather than sent
    /// without it: its request target becomes one no transport sends, so the attempt fails as a
    /// path built from such a value does — an error of kind `other`, counted in the report — and
    /// the server sees nothing.
    pub fn render(
        &self,
        target: &Target,
        vars: &Vars<'_>,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Outgoing {
        self.render_with(target, vars, extra, true)
    }

    /// [`RequestTemplate::render`] without the body, for a caller that already has it (a gRPC
    /// call whose message is the same for every call): the request's body is left empty.
    pub fn render_head(
        &self,
        target: &Target,
        vars: &Vars<'_>,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Outgoing {
        self.render_with(target, vars, extra, false)
    }

    fn render_with(
        &self,
        target: &Target,
        vars: &Vars<'_>,
        extra: &[(HeaderName, HeaderValue)],
        with_body: bool,
    ) -> Outgoing {
        let json = self.body.as_ref().is_some_and(|(_, json)| *json);
        // Sized to what goes in: a request without headers allocates no map.
        let mut headers =
            HeaderMap::with_capacity(self.headers.len() + extra.len() + usize::from(json));
        let mut unsendable = None;
        for (name, value) in &self.headers {
            // The rendered text becomes the value's bytes, not copied again.
            match HeaderValue::from_maybe_shared(Bytes::from(value.render(vars))) {
                Ok(v) => {
                    headers.insert(name.clone(), v);
                }
                Err(_) => unsendable = Some(name),
            }
        }
        for (name, value) in extra {
            headers.insert(name.clone(), value.clone());
        }
        let body = match &self.body {
            Some(_) if !with_body => Bytes::new(),
            Some((t, json)) => {
                if *json && !headers.contains_key(http::header::CONTENT_TYPE) {
                    headers.insert(
                        http::header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                }
                Bytes::from(t.render(vars))
            }
            None => Bytes::new(),
        };
        let uri = match unsendable {
            None => {
                // The target's base path and the rendered path in one string, allocated once.
                let mut uri = String::with_capacity(target.base_path.len() + self.path.len_hint());
                uri.push_str(&target.base_path);
                self.path.render_into(&mut uri, vars);
                uri
            }
            Some(name) => format!("{UNSENDABLE} {name}"),
        };
        Outgoing {
            method: self.method.clone(),
            uri,
            headers,
            body,
        }
    }
}

/// How the request target of an attempt that cannot be sent begins: with a space after it, no
/// HTTP/1.1 request line nor HTTP/2 `:path` can carry it.
const UNSENDABLE: &str = "<unsendable: a control character in the value of header>";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_text_without_placeholders_is_literal() {
        let lit = r#"{"id":"ord-1"}"#;
        assert_eq!(Text::parse(lit).unwrap().literal().as_deref(), Some(lit));
        assert_eq!(Text::parse("").unwrap().literal().as_deref(), Some(""));
        for t in [r#"{"id":"{{key}}"}"#, "{{var.order}}", "a{{seq}}b"] {
            assert_eq!(Text::parse(t).unwrap().literal(), None, "{t}");
        }
    }

    #[test]
    fn renders_placeholders() {
        let t = Text::parse("/orders/{{seq}}?c={{client}}&k={{ key }}").unwrap();
        let captured: std::collections::HashMap<String, String> =
            [("order".to_string(), "ord_1".to_string())].into();
        let v = Vars {
            seq: 7,
            client: 2,
            uuid: "u",
            key: "K",
            round: 1,
            captured: Some(&captured),
        };
        assert_eq!(t.render(&v), "/orders/7?c=2&k=K");
        let p = Text::parse("/orders/{{var.order}}/pay").unwrap();
        assert_eq!(p.render(&v), "/orders/ord_1/pay");
        assert_eq!(p.named().collect::<Vec<_>>(), ["order"]);
        assert!(t.uses(Var::Key) && !t.uses(Var::Uuid));
        assert!(Text::parse("{{nope}}")
            .unwrap_err()
            .contains("unknown placeholder {{nope}}"));
        assert!(Text::parse("{{seq").is_err());
    }

    #[test]
    fn a_header_built_with_a_line_break_makes_the_attempt_unsendable() {
        let t = RequestTemplate {
            headers: vec![(
                HeaderName::from_static("x-sku"),
                Text::parse("{{var.sku}}").unwrap(),
            )],
            ..RequestTemplate::get("/orders")
        };
        let target = Target::with("http://127.0.0.1:9", &crate::http::Connect::default()).unwrap();
        let vars = |captured| Vars {
            seq: 1,
            client: 0,
            uuid: "u",
            key: "k",
            round: 0,
            captured: Some(captured),
        };
        let fine = [("sku".to_string(), "a-1".to_string())].into();
        let out = t.render(&target, &vars(&fine), &[]);
        assert_eq!(
            (out.uri.as_str(), out.headers["x-sku"].as_bytes()),
            ("/orders", &b"a-1"[..])
        );
        let split = [("sku".to_string(), "a\r\nx-injected: 1".to_string())].into();
        let out = t.render(&target, &vars(&split), &[]);
        assert!(out.headers.is_empty(), "{:?}", out.headers);
        // Not a request target any transport sends (a space, no leading `/`), naming the header.
        assert!(
            !out.uri.starts_with('/') && out.uri.contains(' ') && out.uri.ends_with("x-sku"),
            "{}",
            out.uri
        );
    }
}
