//! What counts as a failure, seen from the server's side of the journal.
//!
//! Why three notions: a client retries after anything that did not succeed (`failed`); a latency
//! threshold counts errors the way load tools do (no response or 5xx: `is_error`); a circuit breaker
//! counts only failures that say the dependency is unwell (`is_transient`), never a 404 that proves
//! it is up and answering.

use history::Entry;

/// True when no complete response was written (dropped, reset, hung, client gone).
pub fn no_response(e: &Entry) -> bool {
    !e.answered()
}

/// True when the client saw anything but a success: no response or a status of 400 or more.
pub fn failed(e: &Entry) -> bool {
    no_response(e) || e.status.is_some_and(|s| s >= 400)
}

/// True for an error as load tools count them: no response or a 5xx.
pub fn is_error(e: &Entry) -> bool {
    no_response(e) || e.status.is_some_and(|s| s >= 500)
}

/// True for a failure worth retrying or opening a breaker on: no response, 5xx, 408 or 429.
pub fn is_transient(e: &Entry) -> bool {
    no_response(e) || e.status.is_some_and(|s| s >= 500 || s == 408 || s == 429)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::entry;
    use history::Outcome;

    #[test]
    fn classifies_statuses_and_outcomes() {
        let ok = entry(1, 0).status(201).build();
        let not_found = entry(2, 0).status(404).build();
        let throttled = entry(3, 0).status(429).build();
        let unavailable = entry(4, 0).status(503).build();
        let dropped = entry(5, 0).no_response(Outcome::Dropped).build();
        assert!(!failed(&ok) && !is_error(&ok) && !is_transient(&ok));
        assert!(failed(&not_found) && !is_error(&not_found) && !is_transient(&not_found));
        assert!(failed(&throttled) && !is_error(&throttled) && is_transient(&throttled));
        assert!(failed(&unavailable) && is_error(&unavailable) && is_transient(&unavailable));
        assert!(failed(&dropped) && is_error(&dropped) && is_transient(&dropped));
    }
}
