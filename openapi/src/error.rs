//! The errors of loading a document. Each names where: the file or URL, and the line and column
//! the parser gave, or the JSON pointer of the node that is wrong.

/// A document that could not be read, parsed or understood.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{origin}: cannot read: {source}")]
    Read {
        /// The file.
        origin: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The document (with the files it references) is larger than the limit.
    #[error("{origin}: larger than {limit} bytes, the most a document may have")]
    TooLarge {
        /// The file or URL.
        origin: String,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The text is not JSON or YAML.
    #[error("{}", render_syntax(.origin, .line, .column, .message))]
    Syntax {
        /// The file or URL.
        origin: String,
        /// 1-based line, when the parser knows it.
        line: Option<usize>,
        /// 1-based column, when the parser knows it.
        column: Option<usize>,
        /// What the parser found.
        message: String,
    },
    /// The document parsed but a node is not what OpenAPI allows, or cannot be followed.
    #[error("{origin}: at {}: {message}", render_pointer(.pointer))]
    Invalid {
        /// The file or URL.
        origin: String,
        /// The JSON pointer of the node (`""` is the root).
        pointer: String,
        /// What is wrong, and what was expected.
        message: String,
    },
}

fn render_syntax(
    origin: &str,
    line: &Option<usize>,
    column: &Option<usize>,
    message: &str,
) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!("{origin}:{l}:{c}: {message}"),
        (Some(l), None) => format!("{origin}:{l}: {message}"),
        _ => format!("{origin}: {message}"),
    }
}

fn render_pointer(pointer: &str) -> String {
    if pointer.is_empty() {
        "the root".to_string()
    } else {
        format!("`{pointer}`")
    }
}
