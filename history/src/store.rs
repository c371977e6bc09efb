//! What a system of record says: resources stored per Idempotency-Key, counted after the load.

/// Resources counted per key in the store, after the load.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreCounts {
    /// Where the counts come from, for messages: `GET /orders?idempotency_key={key}`, an SQL query.
    pub source: String,
    /// The count of each key asked about, or why the store could not be asked at all.
    pub counts: Result<Vec<KeyCount>, String>,
}

/// The count of one key, or why it could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyCount {
    /// The Idempotency-Key.
    pub key: String,
    /// Resources stored under it, or why the answer could not be read.
    pub count: Result<u64, String>,
}
