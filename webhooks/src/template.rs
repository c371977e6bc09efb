//! The payload template: JSON text with `{{event_id}}`, `{{subject}}`, `{{type}}` and `{{seq}}`.
//!
//! The placeholders are written as the harness's request templates write theirs (`{{name}}`,
//! spaces inside the braces allowed: the syntax is `primitives::template`'s), an unknown name is
//! refused with the list of known ones, and the template is compiled once into literal and variable parts, so rendering an event is a walk with
//! no parsing. Values are put in as they are — ids, subjects and types are checked to need no
//! JSON escaping — so the template decides what is a string (`"{{subject}}"`) and what is a number
//! (`{{seq}}`). A template is accepted only if it renders to a JSON object: every provider's
//! payload is one, and Stripe's library refuses anything else.

use std::fmt::Write;

use primitives::template::{pieces, Piece};

/// The default payload: the event id as `id`, as Stripe's events and the Standard Webhooks
/// examples carry it, the type as `type`, and the subject and its sequence number under
/// `data.object`, where Stripe puts the object an event is about.
pub const DEFAULT_PAYLOAD: &str = r#"{"id":"{{event_id}}","object":"event","type":"{{type}}","data":{"object":{"id":"{{subject}}","seq":{{seq}}}}}"#;

/// The longest template accepted, in bytes: a payload is sent once per delivery, and a run may
/// make millions.
pub const MAX_TEMPLATE_LEN: usize = 64 * 1024;

/// A placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// `{{event_id}}`: the event's id.
    EventId,
    /// `{{subject}}`: the subject (the object the event is about).
    Subject,
    /// `{{type}}`: the event's type.
    Type,
    /// `{{seq}}`: the event's place in its subject's sequence, from 1.
    Seq,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Lit(String),
    Var(Var),
}

/// A compiled payload template.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    parts: Vec<Part>,
    len_hint: usize,
}

/// The values of one event's placeholders.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    /// `{{event_id}}`.
    pub event_id: &'a str,
    /// `{{subject}}`.
    pub subject: &'a str,
    /// `{{type}}`.
    pub event_type: &'a str,
    /// `{{seq}}`.
    pub seq: u32,
}

/// A template that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` with no `}}` after it.
    #[error("unclosed placeholder in the payload template at byte {0}: missing }}}}")]
    Unclosed(usize),
    /// A placeholder with a name this template does not know.
    #[error("unknown placeholder {{{{{0}}}}} in the payload template (expected event_id, subject, type or seq)")]
    Unknown(String),
    /// Longer than [`MAX_TEMPLATE_LEN`].
    #[error("the payload template is {0} bytes; at most {max} are accepted", max = MAX_TEMPLATE_LEN)]
    TooLong(usize),
    /// Rendered, it is not a JSON object.
    #[error("the payload template does not render to a JSON object: {0} (placeholders are put in as they are: write \"{{{{event_id}}}}\", \"{{{{subject}}}}\" and \"{{{{type}}}}\" inside quotes, {{{{seq}}}} is a number)")]
    NotJsonObject(String),
}

impl Payload {
    /// Compiles `text` and checks that it renders to a JSON object.
    pub fn parse(text: &str) -> Result<Payload, TemplateError> {
        if text.len() > MAX_TEMPLATE_LEN {
            return Err(TemplateError::TooLong(text.len()));
        }
        let mut parts = Vec::new();
        for piece in pieces(text) {
            match piece.map_err(|u| TemplateError::Unclosed(u.at))? {
                Piece::Text(t) => parts.push(Part::Lit(t.to_string())),
                Piece::Name(name) => parts.push(Part::Var(match name {
                    "event_id" => Var::EventId,
                    "subject" => Var::Subject,
                    "type" => Var::Type,
                    "seq" => Var::Seq,
                    other => return Err(TemplateError::Unknown(other.to_string())),
                })),
            }
        }
        let len_hint = parts
            .iter()
            .map(|p| match p {
                Part::Lit(s) => s.len(),
                Part::Var(_) => 40,
            })
            .sum();
        let payload = Payload { parts, len_hint };
        let sample = payload.render(&Vars {
            event_id: "evt_sample",
            subject: "sub_1",
            event_type: "sample.created",
            seq: 1,
        });
        match serde_json::from_str::<serde_json::Value>(&sample) {
            Ok(serde_json::Value::Object(_)) => Ok(payload),
            Ok(other) => Err(TemplateError::NotJsonObject(format!(
                "it is {}",
                match other {
                    serde_json::Value::Array(_) => "an array",
                    serde_json::Value::String(_) => "a string",
                    serde_json::Value::Number(_) => "a number",
                    serde_json::Value::Bool(_) => "a boolean",
                    _ => "null",
                }
            ))),
            Err(e) => Err(TemplateError::NotJsonObject(e.to_string())),
        }
    }

    /// The default payload ([`DEFAULT_PAYLOAD`]).
    pub fn default_payload() -> Payload {
        // The constant is valid; the fallback (an empty template) is never taken.
        Payload::parse(DEFAULT_PAYLOAD).unwrap_or(Payload {
            parts: Vec::new(),
            len_hint: 0,
        })
    }

    /// Whether the template uses `v`.
    pub fn uses(&self, v: Var) -> bool {
        self.parts.contains(&Part::Var(v))
    }

    /// The payload of one event.
    pub fn render(&self, vars: &Vars<'_>) -> String {
        let mut out = String::with_capacity(self.len_hint);
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Var(Var::EventId) => out.push_str(vars.event_id),
                Part::Var(Var::Subject) => out.push_str(vars.subject),
                Part::Var(Var::Type) => out.push_str(vars.event_type),
                Part::Var(Var::Seq) => {
                    let _ = write!(out, "{}", vars.seq);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars<'static> {
        Vars {
            event_id: "evt_1",
            subject: "in_7",
            event_type: "invoice.paid",
            seq: 2,
        }
    }

    #[test]
    fn the_default_payload_carries_the_event_id_as_id() {
        let p = Payload::default_payload();
        let v: serde_json::Value = serde_json::from_str(&p.render(&vars())).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "id": "evt_1",
                "object": "event",
                "type": "invoice.paid",
                "data": {"object": {"id": "in_7", "seq": 2}}
            })
        );
        for var in [Var::EventId, Var::Subject, Var::Type, Var::Seq] {
            assert!(p.uses(var));
        }
    }

    #[test]
    fn placeholders_may_have_spaces_and_repeat() {
        let p = Payload::parse(r#"{"a":"{{ event_id }}","b":"{{event_id}}-{{seq}}"}"#).unwrap();
        assert_eq!(p.render(&vars()), r#"{"a":"evt_1","b":"evt_1-2"}"#);
        assert!(!p.uses(Var::Subject));
    }

    #[test]
    fn bad_templates_get_one_clear_message() {
        let cases = [
            (r#"{"id":"{{key}}"}"#, "unknown placeholder {{key}} in the payload template (expected event_id, subject, type or seq)"),
            (r#"{"id":"{{event_id"}"#, "unclosed placeholder in the payload template at byte 7: missing }}"),
            (r#"{"id":{{event_id}}}"#, "the payload template does not render to a JSON object: expected value at line 1 column 7 (placeholders are put in as they are: write \"{{event_id}}\", \"{{subject}}\" and \"{{type}}\" inside quotes, {{seq}} is a number)"),
            ("[{{seq}}]", "does not render to a JSON object: it is an array"),
            ("", "does not render to a JSON object: EOF while parsing"),
        ];
        for (text, message) in cases {
            let e = Payload::parse(text).unwrap_err().to_string();
            assert!(e.contains(message), "{text}: {e}");
        }
        let long = format!(r#"{{"x":"{}"}}"#, "a".repeat(MAX_TEMPLATE_LEN));
        assert_eq!(
            Payload::parse(&long).unwrap_err(),
            TemplateError::TooLong(long.len())
        );
    }
}
