//! A binding: one parameter of one operation fed by another's answer, and the places its value
//! may be read, in the order they are trusted.

use serde_json::Value;

use crate::operation::{Expression, Location};

/// Where a bound parameter's value is read from, in a producer's recorded exchange.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueSource {
    /// An OpenAPI link of the producer's response `status`.
    Link {
        /// The link's name.
        name: String,
        /// The response status key the link is declared under.
        status: String,
        /// Its expression for this parameter.
        expression: Expression,
    },
    /// A field of the producer's JSON answer that its schema declares, by pointer (`/id`,
    /// `/data/id`).
    BodyField(String),
    /// A field of the producer's JSON answer found by name in the answer itself, whatever its
    /// schema says: the first of `names` (compared without case, `_` or `-`) holding a string or
    /// a number at the top level, else under one of `wrappers` (`data`, `item`, `account`, …).
    AnswerField {
        /// The names, most specific first.
        names: Vec<String>,
        /// The wrapping objects looked into, in order.
        wrappers: Vec<String>,
    },
    /// The `Location` header: its path matched against `template`, the resource's path template,
    /// and the segment at the parameter's place taken.
    Location {
        /// The resource's path template, ending with the parameter: `/orders/{id}`.
        template: String,
    },
    /// The same path parameter of the producer's own request.
    RequestPath(String),
    /// A field of the producer's own JSON request body (a name the client chose, such as a
    /// user's `username`).
    RequestBodyField(String),
    /// The consumer parameter's own example or default, from the document: tried last, as it
    /// names no resource the producer made.
    Declared {
        /// `the parameter's example`, `its schema's default`, …
        what: String,
        /// Where the document writes it.
        pointer: String,
        /// The value.
        value: Value,
    },
}

impl ValueSource {
    /// Whether the value comes from the document rather than from the producer's exchange.
    pub fn is_declared(&self) -> bool {
        matches!(self, ValueSource::Declared { .. })
    }
}

impl std::fmt::Display for ValueSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueSource::Link {
                name, expression, ..
            } => write!(f, "link `{name}` ({expression:?})"),
            ValueSource::BodyField(p) => write!(f, "body field {p}"),
            ValueSource::AnswerField { names, .. } => {
                write!(f, "JSON answer field {}", names.join(", "))
            }
            ValueSource::Location { .. } => f.write_str("Location header"),
            ValueSource::RequestPath(n) => write!(f, "the request's path parameter `{n}`"),
            ValueSource::RequestBodyField(p) => write!(f, "the request's body field {p}"),
            ValueSource::Declared { what, .. } => f.write_str(what),
        }
    }
}

/// One parameter of one operation fed by another operation's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The operation whose parameter is filled.
    pub consumer: String,
    /// Where the parameter goes.
    pub location: Location,
    /// Its name.
    pub parameter: String,
    /// The operation whose answer gives the value.
    pub producer: String,
    /// Where the value is read, tried in order.
    pub sources: Vec<ValueSource>,
}
