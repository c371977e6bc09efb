//! What counts as a failure, seen from the server's side of the journal.
//!
//! Why three notions: a client retries after anything that did not succeed (`failed`); a latency
//! threshold counts errors the way load tools do (no response or 5xx: `is_error`); a circuit breaker
//! counts only failures that say the dependency is unwell (`is_transient`), never a 404 that proves
//! it is up and answering.

use history::{Entry, GrpcCode};

/// True when no complete response was written (dropped, reset, hung, client gone).
pub fn no_response(e: &Entry) -> bool {
    !e.answered()
}

/// The status the client saw, as HTTP tells it: a gRPC call's status by the HTTP status
/// `google/rpc/code.proto` maps it to (UNAVAILABLE is 503, INVALID_ARGUMENT 400, OK 200), since a
/// gRPC failure comes with HTTP 200; else the HTTP status (a gRPC call answered by a status
/// fault has no gRPC status, and its client maps the HTTP one).
pub fn status(e: &Entry) -> Option<u16> {
    match e.grpc_status {
        Some(code) => Some(code.http_equivalent()),
        None => e.status,
    }
}

/// True when the client saw anything but a success: no response, a status of 400 or more, or a
/// gRPC status other than OK.
pub fn failed(e: &Entry) -> bool {
    no_response(e) || status(e).is_some_and(|s| s >= 400)
}

/// True for an error as load tools count them: no response, a 5xx, or a gRPC status that
/// stands for one (UNKNOWN, INTERNAL, UNIMPLEMENTED, UNAVAILABLE, DEADLINE_EXCEEDED, DATA_LOSS).
pub fn is_error(e: &Entry) -> bool {
    no_response(e) || status(e).is_some_and(|s| s >= 500)
}

/// True for a failure worth retrying or opening a breaker on: no response, 5xx, 408 or 429 —
/// for a gRPC call UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL, UNKNOWN or
/// DATA_LOSS, never UNIMPLEMENTED (the service is up and says the method is not there).
pub fn is_transient(e: &Entry) -> bool {
    if e.grpc_status == Some(GrpcCode::Unimplemented) {
        return false;
    }
    no_response(e) || status(e).is_some_and(|s| s >= 500 || s == 408 || s == 429)
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

    #[test]
    fn a_grpc_failure_is_its_status_even_with_http_200() {
        let call = |code| entry(1, 0).grpc("a.B/C").grpc_status(code).build();
        let ok = call(GrpcCode::Ok);
        assert!(!failed(&ok) && !is_error(&ok) && !is_transient(&ok));
        assert_eq!(ok.status, Some(200));
        for code in [
            GrpcCode::Unavailable,
            GrpcCode::DeadlineExceeded,
            GrpcCode::ResourceExhausted,
        ] {
            let e = call(code);
            assert!(failed(&e) && is_transient(&e), "{code}");
        }
        for code in [
            GrpcCode::InvalidArgument,
            GrpcCode::NotFound,
            GrpcCode::FailedPrecondition,
        ] {
            let e = call(code);
            assert!(failed(&e) && !is_error(&e) && !is_transient(&e), "{code}");
        }
        let unimplemented = call(GrpcCode::Unimplemented);
        assert!(failed(&unimplemented) && is_error(&unimplemented));
        assert!(!is_transient(&unimplemented), "the service is up");
        // A gRPC call answered by an HTTP status fault: its client maps the HTTP status.
        let http = entry(2, 0).grpc("a.B/C").status(503).build();
        let http = history::Entry {
            grpc_status: None,
            ..http
        };
        assert!(failed(&http) && is_transient(&http));
        let reset = entry(3, 0)
            .grpc("a.B/C")
            .no_response(Outcome::Reset)
            .build();
        assert!(failed(&reset) && is_transient(&reset));
    }
}
