//! What a system of record says, asked after the load: resources (or effects) stored per key —
//! an Idempotency-Key, a webhook event's id — and the state a subject ended in.

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

/// The state each subject ended in, read from the system of record after the load.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreStates {
    /// Where the states come from, for messages: `GET /state/{subject}`, an SQL query.
    pub source: String,
    /// The state of each subject asked about, or why the store could not be asked at all.
    pub states: Result<Vec<KeyState>, String>,
}

/// The state of one subject, or why it could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyState {
    /// The subject (an invoice's id, say).
    pub key: String,
    /// Its state (`None`: the store has none for it), or why the answer could not be read.
    pub state: Result<Option<String>, String>,
}
