//! The events a run delivers: how many, about which subjects, of which types, with which payload.
//!
//! Events come in per-subject sequences, because ordering bugs live there: an invoice is
//! `invoice.created` and then `invoice.paid`, and a consumer that applies them in arrival order
//! ends with the wrong state when they arrive reversed. Event `n` (from 0) belongs to subject
//! `n / types` and is the `n % types`-th type of the sequence; the last subject's sequence is cut
//! short when the count is not a multiple. Every event is computed from its number when asked for
//! — nothing is stored per event — so a run of millions holds no list of them.

use std::ops::Range;

use bytes::Bytes;

use crate::sign::Message;
use crate::template::{Payload, TemplateError, Vars};
use crate::Style;

/// The most events one run may deliver.
pub const MAX_EVENTS: u64 = 10_000_000;
/// The longest per-subject sequence of types.
pub const MAX_TYPES: usize = 64;
/// The longest event type or subject prefix, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// What events to deliver, as a scenario or the command line says it.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    /// How many events.
    pub count: u64,
    /// The types of each subject's events, in their logical order.
    pub types: Vec<String>,
    /// What subject names start with; a subject is this and its number, from 1.
    pub subject_prefix: String,
    /// The payload template; `None` for [`crate::DEFAULT_PAYLOAD`].
    pub payload: Option<String>,
}

impl Default for EventSpec {
    /// 100 events about invoices (`in_1`, `in_2`, …), each `invoice.created` then `invoice.paid`,
    /// with the default payload.
    fn default() -> EventSpec {
        EventSpec {
            count: 100,
            types: vec!["invoice.created".into(), "invoice.paid".into()],
            subject_prefix: "in_".into(),
            payload: None,
        }
    }
}

/// An event specification that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The count is 0 or above [`MAX_EVENTS`].
    #[error("events must be in 1..={max}, got {0}", max = MAX_EVENTS)]
    Count(u64),
    /// No types, or more than [`MAX_TYPES`].
    #[error("types must list 1..={max} event types, got {0}", max = MAX_TYPES)]
    Types(usize),
    /// A type or the subject prefix has characters a header or a JSON string cannot carry as
    /// they are, or is too long.
    #[error("{what} {value:?} must be at most {max} characters among letters, digits and . _ - :{empty}", max = MAX_NAME_LEN, empty = if *.allows_empty { "" } else { ", and not empty" })]
    Name {
        /// `type` or `subject prefix`.
        what: &'static str,
        /// The value.
        value: String,
        /// Whether it may be empty.
        allows_empty: bool,
    },
    /// The same type twice in the sequence: its place, and so the final state, would be
    /// ambiguous.
    #[error("type {0:?} appears twice in types; each subject's sequence names each type once")]
    RepeatedType(String),
    /// The payload template.
    #[error(transparent)]
    Payload(#[from] TemplateError),
}

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Its number in the run, from 0.
    pub number: u64,
    /// Its id, in the style's form.
    pub id: String,
    /// Its subject's number, from 0.
    pub subject_index: u64,
    /// Its subject's name.
    pub subject: String,
    /// Its type.
    pub event_type: String,
    /// Its place in its subject's sequence, from 1.
    pub seq: u32,
    /// Its payload.
    pub body: Bytes,
}

impl Event {
    /// What the signer signs.
    pub fn message(&self) -> Message<'_> {
        Message {
            id: &self.id,
            event_type: &self.event_type,
            body: &self.body,
        }
    }
}

/// The events of one run, each computed from its number.
#[derive(Debug, Clone)]
pub struct Events {
    style: Style,
    seed: u64,
    count: u64,
    types: Vec<String>,
    prefix: String,
    payload: Payload,
}

impl Events {
    /// Checks `spec` and resolves it for `style`, with ids drawn from `seed`.
    pub fn new(spec: &EventSpec, style: Style, seed: u64) -> Result<Events, EventError> {
        if !(1..=MAX_EVENTS).contains(&spec.count) {
            return Err(EventError::Count(spec.count));
        }
        if !(1..=MAX_TYPES).contains(&spec.types.len()) {
            return Err(EventError::Types(spec.types.len()));
        }
        for (i, t) in spec.types.iter().enumerate() {
            check_name("type", t, false)?;
            if spec.types[..i].contains(t) {
                return Err(EventError::RepeatedType(t.clone()));
            }
        }
        check_name("subject prefix", &spec.subject_prefix, true)?;
        let payload = match &spec.payload {
            Some(text) => Payload::parse(text)?,
            None => Payload::default_payload(),
        };
        Ok(Events {
            style,
            seed,
            count: spec.count,
            types: spec.types.clone(),
            prefix: spec.subject_prefix.clone(),
            payload,
        })
    }

    /// How many events.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether there are none (never, once checked: kept for the convention).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The types of a subject's sequence.
    pub fn types(&self) -> &[String] {
        &self.types
    }

    /// How many subjects.
    pub fn subjects(&self) -> u64 {
        self.count.div_ceil(self.types.len() as u64)
    }

    /// The name of subject `index` (from 0): the prefix and `index + 1`.
    pub fn subject_name(&self, index: u64) -> String {
        format!("{}{}", self.prefix, index + 1)
    }

    /// The numbers of subject `index`'s events, in their logical order (empty past the last).
    pub fn subject_events(&self, index: u64) -> Range<u64> {
        let per = self.types.len() as u64;
        let start = index.saturating_mul(per).min(self.count);
        start..start.saturating_add(per).min(self.count)
    }

    /// The type of subject `index`'s logically last event: the state a consumer should end in,
    /// whatever order the events arrived in.
    pub fn final_type(&self, index: u64) -> Option<&str> {
        let r = self.subject_events(index);
        (!r.is_empty()).then(|| self.types[(r.end - 1 - r.start) as usize].as_str())
    }

    /// Event `number`, if the run has it.
    pub fn get(&self, number: u64) -> Option<Event> {
        if number >= self.count {
            return None;
        }
        let per = self.types.len() as u64;
        let subject_index = number / per;
        let place = (number % per) as usize;
        let id = self.style.event_id(self.seed, number);
        let subject = self.subject_name(subject_index);
        let event_type = self.types[place].clone();
        let seq = place as u32 + 1;
        let body = Bytes::from(self.payload.render(&Vars {
            event_id: &id,
            subject: &subject,
            event_type: &event_type,
            seq,
        }));
        Some(Event {
            number,
            id,
            subject_index,
            subject,
            event_type,
            seq,
            body,
        })
    }
}

fn check_name(what: &'static str, value: &str, allows_empty: bool) -> Result<(), EventError> {
    let ok = value.len() <= MAX_NAME_LEN
        && (allows_empty || !value.is_empty())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(EventError::Name {
            what,
            value: value.to_string(),
            allows_empty,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(count: u64) -> EventSpec {
        EventSpec {
            count,
            ..EventSpec::default()
        }
    }

    #[test]
    fn events_come_in_per_subject_sequences() {
        let ev = Events::new(&spec(5), Style::Stripe, 1).unwrap();
        assert_eq!((ev.len(), ev.subjects()), (5, 3));
        let all: Vec<Event> = (0..5).map(|n| ev.get(n).unwrap()).collect();
        let summary: Vec<(&str, &str, u32)> = all
            .iter()
            .map(|e| (e.subject.as_str(), e.event_type.as_str(), e.seq))
            .collect();
        assert_eq!(
            summary,
            [
                ("in_1", "invoice.created", 1),
                ("in_1", "invoice.paid", 2),
                ("in_2", "invoice.created", 1),
                ("in_2", "invoice.paid", 2),
                ("in_3", "invoice.created", 1),
            ]
        );
        assert_eq!(ev.get(5), None);
        assert_eq!(ev.subject_events(1), 2..4);
        assert_eq!(ev.subject_events(2), 4..5);
        assert_eq!(ev.subject_events(3), 5..5);
        assert_eq!(ev.final_type(0), Some("invoice.paid"));
        // The last subject's sequence was cut short: its final state is its last event's.
        assert_eq!(ev.final_type(2), Some("invoice.created"));
        assert_eq!(ev.final_type(3), None);
    }

    #[test]
    fn the_payload_is_rendered_per_event_with_its_id() {
        let ev = Events::new(&spec(2), Style::StandardWebhooks, 7).unwrap();
        let e = ev.get(1).unwrap();
        assert_eq!(e.id, Style::StandardWebhooks.event_id(7, 1));
        let v: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
        assert_eq!(v["id"], e.id.as_str());
        assert_eq!(v["type"], "invoice.paid");
        assert_eq!(v["data"]["object"]["id"], "in_1");
        assert_eq!(v["data"]["object"]["seq"], 2);
        let m = e.message();
        assert_eq!(
            (m.id, m.event_type, m.body),
            (e.id.as_str(), "invoice.paid", &e.body)
        );
        // Computed, not stored: asking again gives the same event.
        assert_eq!(ev.get(1), Some(e));
    }

    #[test]
    fn a_custom_sequence_and_payload() {
        let s = EventSpec {
            count: 6,
            types: vec!["order.placed".into(), "order.shipped".into(), "order.delivered".into()],
            subject_prefix: "ord-".into(),
            payload: Some(r#"{"event":"{{event_id}}","order":"{{subject}}","status":"{{type}}","step":{{seq}}}"#.into()),
        };
        let ev = Events::new(&s, Style::Github, 3).unwrap();
        let e = ev.get(5).unwrap();
        assert_eq!(
            std::str::from_utf8(&e.body).unwrap(),
            format!(
                r#"{{"event":"{}","order":"ord-2","status":"order.delivered","step":3}}"#,
                e.id
            )
        );
        assert_eq!(ev.final_type(1), Some("order.delivered"));
    }

    #[test]
    fn bad_specs_get_one_clear_message() {
        let cases = [
            (spec(0), "events must be in 1..=10000000, got 0"),
            (spec(MAX_EVENTS + 1), "events must be in 1..=10000000, got 10000001"),
            (EventSpec { types: vec![], ..spec(1) }, "types must list 1..=64 event types, got 0"),
            (
                EventSpec { types: vec!["invoice paid".into()], ..spec(1) },
                "type \"invoice paid\" must be at most 128 characters among letters, digits and . _ - :, and not empty",
            ),
            (
                EventSpec { types: vec!["a\"b".into()], ..spec(1) },
                "type \"a\\\"b\" must be at most",
            ),
            (
                EventSpec { types: vec!["a".into(), "b".into(), "a".into()], ..spec(1) },
                "type \"a\" appears twice in types",
            ),
            (
                EventSpec { subject_prefix: "in/".into(), ..spec(1) },
                "subject prefix \"in/\" must be at most 128 characters among letters, digits and . _ - :",
            ),
            (
                EventSpec { payload: Some("{{nope}}".into()), ..spec(1) },
                "unknown placeholder {{nope}}",
            ),
        ];
        for (s, message) in cases {
            let e = Events::new(&s, Style::Stripe, 0).unwrap_err().to_string();
            assert!(e.contains(message), "{e}");
        }
        // An empty prefix is fine: subjects are then plain numbers.
        let ev = Events::new(
            &EventSpec {
                subject_prefix: String::new(),
                ..spec(1)
            },
            Style::Stripe,
            0,
        )
        .unwrap();
        assert_eq!(ev.subject_name(0), "1");
    }

    #[test]
    fn a_large_run_holds_no_list_of_events() {
        let ev = Events::new(&spec(MAX_EVENTS), Style::Stripe, 0).unwrap();
        let last = ev.get(MAX_EVENTS - 1).unwrap();
        assert_eq!(last.subject, "in_5000000");
        assert_eq!(ev.subjects(), 5_000_000);
    }
}
