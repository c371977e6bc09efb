//! A parameter of an operation: where its value goes ([`Location`]: the path, the query, a header,
//! a cookie), how it is written there ([`Style`]), and the examples the document gives. A security
//! scheme's API key goes to the same places, so `security.rs` reads [`Location`] from here, below
//! the operations that carry both.

use serde_json::Value;

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Location {
    /// A `{name}` of the path template.
    Path,
    /// The query string.
    Query,
    /// A request header.
    Header,
    /// A cookie of the `Cookie` header.
    Cookie,
}

impl Location {
    /// The `in` value: `path`, `query`, `header`, `cookie`.
    pub fn as_str(self) -> &'static str {
        match self {
            Location::Path => "path",
            Location::Query => "query",
            Location::Header => "header",
            Location::Cookie => "cookie",
        }
    }
}

/// How a parameter's value is written (OpenAPI `style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `;name=value`
    Matrix,
    /// `.value`
    Label,
    /// `name=value`, arrays as repeated names (explode) or commas
    Form,
    /// `value`, arrays and objects comma-separated
    Simple,
    /// arrays separated by spaces
    SpaceDelimited,
    /// arrays separated by `|`
    PipeDelimited,
    /// `name[key]=value`
    DeepObject,
}

/// A value the document gives as an example of a parameter or a media type.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// The key in `examples`, or `example` for the single one.
    pub name: String,
    /// The example's value.
    pub value: Value,
    /// Where it is written.
    pub pointer: String,
}

/// One parameter of an operation.
#[derive(Debug, Clone)]
pub struct Parameter {
    /// The name (case as declared; header names compare without case).
    pub name: String,
    /// Where it goes.
    pub location: Location,
    /// Whether the operation requires it (path parameters always are).
    pub required: bool,
    /// How its value is written.
    pub style: Style,
    /// Whether arrays and objects are exploded.
    pub explode: bool,
    /// Whether reserved characters go unescaped in a query value.
    pub allow_reserved: bool,
    /// Pointer of its Schema Object (`schema`, or the schema of its one `content` entry).
    pub schema: Option<String>,
    /// The media type of its `content`, when it is described that way (the value is then sent
    /// serialized in that media type).
    pub content_type: Option<String>,
    /// Its examples, `example` first.
    pub examples: Vec<Example>,
    /// Where it is declared (after `$ref`s).
    pub pointer: String,
}
