//! The metrics `GET /__harness/metrics` exports: their names, kinds and help, in one place for the
//! handler that registers them (`control.rs`) and for what reads them by name (the Grafana
//! dashboard under `deploy/grafana/`, whose test checks it against [`ALL`]).
//!
//! A family with no sample yet (no proxy, no HTTP/2 refusal) is left out of a scrape, so a scrape
//! alone does not say which metrics there are; this list does.

/// The prefix of every name.
pub const PREFIX: &str = "fault_server";

pub use primitives::metric::{Kind, Metric};

/// `requests`.
pub const REQUESTS: Metric = Metric {
    prefix: PREFIX,
    name: "requests",
    kind: Kind::Counter,
    help: "Requests journaled (since start or the last reset), by the rule that fired, its fault, the status sent and the outcome",
    always: true,
};

/// `journal_entries`.
pub const JOURNAL_ENTRIES: Metric = Metric {
    prefix: PREFIX,
    name: "journal_entries",
    kind: Kind::Gauge,
    help: "Journal entries written (since start or the last reset)",
    always: true,
};

/// `received_requests`.
pub const RECEIVED_REQUESTS: Metric = Metric {
    prefix: PREFIX,
    name: "received_requests",
    kind: Kind::Gauge,
    help: "Requests received (since start or the last reset), journaled or not yet",
    always: true,
};

/// `open_connections`.
pub const OPEN_CONNECTIONS: Metric = Metric {
    prefix: PREFIX,
    name: "open_connections",
    kind: Kind::Gauge,
    help: "Client connections being served",
    always: true,
};

/// `database_connections`.
pub const DATABASE_CONNECTIONS: Metric = Metric {
    prefix: PREFIX,
    name: "database_connections",
    kind: Kind::Gauge,
    help: "Open connections of the PostgreSQL pool",
    always: false,
};

/// `http2_refused_streams`.
pub const HTTP2_REFUSED_STREAMS: Metric = Metric {
    prefix: PREFIX,
    name: "http2_refused_streams",
    kind: Kind::Counter,
    help: "HTTP/2 streams the protocol layer refused before any handler saw them (since start or the last reset), by reason: not journaled",
    always: true,
};

/// `http2_connection_errors`.
pub const HTTP2_CONNECTION_ERRORS: Metric = Metric {
    prefix: PREFIX,
    name: "http2_connection_errors",
    kind: Kind::Counter,
    help: "HTTP/2 connections the server ended with a GOAWAY carrying an error (since start or the last reset), by error code",
    always: true,
};

/// `proxy_connections`.
pub const PROXY_CONNECTIONS: Metric = Metric {
    prefix: PREFIX,
    name: "proxy_connections",
    kind: Kind::Counter,
    help: "Connections through the TCP proxies journaled (since start or the last reset), by proxy and how they ended",
    always: true,
};

/// `proxy_bytes`.
pub const PROXY_BYTES: Metric = Metric {
    prefix: PREFIX,
    name: "proxy_bytes",
    kind: Kind::Counter,
    help: "Bytes the TCP proxies delivered (journaled connections), by proxy and direction",
    always: true,
};

/// `proxy_toxic_connections`.
pub const PROXY_TOXIC_CONNECTIONS: Metric = Metric {
    prefix: PREFIX,
    name: "proxy_toxic_connections",
    kind: Kind::Counter,
    help: "Journaled connections each toxic acted on, by proxy and toxic",
    always: true,
};

/// `proxy_open_connections`.
pub const PROXY_OPEN_CONNECTIONS: Metric = Metric {
    prefix: PREFIX,
    name: "proxy_open_connections",
    kind: Kind::Gauge,
    help: "Connections open through each TCP proxy now",
    always: true,
};

/// `proxy_statements`.
pub const PROXY_STATEMENTS: Metric = Metric {
    prefix: PREFIX,
    name: "proxy_statements",
    kind: Kind::Counter,
    help: "Statements (PostgreSQL) and commands (Redis) the protocol proxies journaled (since start or the last reset), by proxy and outcome",
    always: true,
};

/// `proxy_statement_faults`.
pub const PROXY_STATEMENT_FAULTS: Metric = Metric {
    prefix: PREFIX,
    name: "proxy_statement_faults",
    kind: Kind::Counter,
    help: "Statements and commands a protocol proxy's rule faulted, by proxy and fault",
    always: true,
};

/// Every metric, in the order of the reference (docs/src/reference/control-api.md).
pub const ALL: &[Metric] = &[
    REQUESTS,
    JOURNAL_ENTRIES,
    RECEIVED_REQUESTS,
    OPEN_CONNECTIONS,
    DATABASE_CONNECTIONS,
    HTTP2_REFUSED_STREAMS,
    HTTP2_CONNECTION_ERRORS,
    PROXY_CONNECTIONS,
    PROXY_BYTES,
    PROXY_TOXIC_CONNECTIONS,
    PROXY_OPEN_CONNECTIONS,
    PROXY_STATEMENTS,
    PROXY_STATEMENT_FAULTS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_series_as_prometheus_names_them() {
        let mut names: Vec<_> = ALL.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert_eq!(REQUESTS.series(), "fault_server_requests_total");
        assert_eq!(OPEN_CONNECTIONS.series(), "fault_server_open_connections");
    }
}
