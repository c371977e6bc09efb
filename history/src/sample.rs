//! Hand-written histories, for tests of the checks (ours and yours).
//!
//! `entry(seq, t_recv_ms)` starts a responded `POST /orders` that took 1 ms and answered 200; the
//! builder's methods change what a test is about. Times are milliseconds since server start.
//!
//! ```
//! use history::sample::entry;
//! let first = entry(1, 0).key("k1").client("c1").status(503).build();
//! let retry = entry(2, 250).key("k1").client("c1").created("order-1").build();
//! assert_eq!(retry.status, Some(201));
//! assert_eq!(first.idempotency_key, retry.idempotency_key);
//! ```

use std::collections::BTreeMap;

use crate::{Entry, GrpcCode, Outcome, PgStatement, Protocol, RedisCommand, TxControl};

/// Wall clock of server start in the test journals.
pub const EPOCH_MS: u64 = 1_700_000_000_000;

/// Builds one journal entry.
#[derive(Debug, Clone)]
pub struct EntryBuilder(Entry);

/// A responded `POST /orders` (status 200, 1 ms) received at `t_recv_ms`.
pub fn entry(seq: u64, t_recv_ms: impl Into<f64>) -> EntryBuilder {
    let t_recv_us = (t_recv_ms.into() * 1000.0).round() as u64;
    EntryBuilder(Entry {
        seq,
        t_recv_us,
        t_done_us: t_recv_us + 1000,
        t_body_us: None,
        t_wire_us: None,
        unix_ms: EPOCH_MS + t_recv_us / 1000,
        unix_us: EPOCH_MS * 1000 + t_recv_us,
        replica: None,
        method: "POST".to_string(),
        path: "/orders".to_string(),
        query: None,
        headers: BTreeMap::new(),
        idempotency_key: None,
        client_id: None,
        body_sha256: None,
        body_len: 0,
        http_version: Some(crate::HttpVersion::Http11),
        tls: false,
        conn_id: seq,
        rule: None,
        fault: None,
        status: Some(200),
        outcome: Outcome::Responded,
        created: None,
        key_attempt: None,
        transition: None,
        resource: None,
        replayed: false,
        draw: None,
        rejected: None,
        forwarded: false,
        upstream_status: None,
        upstream_us: None,
        response_headers: None,
        response_bytes: None,
        response_trailers: None,
        grpc_method: None,
        grpc_status: None,
        grpc_message: None,
        grpc_previous_attempts: None,
        grpc_timeout_ms: None,
        pushback_ms: None,
        committed: None,
        event_type: None,
        event_seq: None,
        forged: None,
        delivery_attempt: None,
        answer_dropped: false,
        tcp: None,
        protocol: None,
    })
}

impl EntryBuilder {
    /// Response written `ms` after the request arrived.
    pub fn took(mut self, ms: impl Into<f64>) -> Self {
        self.0.t_done_us = self.0.t_recv_us + (ms.into() * 1000.0).round() as u64;
        self
    }

    /// Answered with `status`.
    pub fn status(mut self, status: u16) -> Self {
        self.0.status = Some(status);
        self.0.outcome = Outcome::Responded;
        self
    }

    /// No response: dropped, reset, hung or client closed.
    pub fn no_response(mut self, outcome: Outcome) -> Self {
        self.0.status = None;
        self.0.outcome = outcome;
        // Nor any gRPC status (a call stays uncommitted unless said otherwise).
        self.0.grpc_status = None;
        self.0.grpc_message = None;
        self.0.pushback_ms = None;
        if self.0.is_grpc() {
            self.0.committed = Some(false);
        }
        self
    }

    /// Carries an Idempotency-Key.
    pub fn key(mut self, key: &str) -> Self {
        self.0.idempotency_key = Some(key.to_string());
        self.0
            .headers
            .insert("idempotency-key".to_string(), key.to_string());
        self
    }

    /// Sent by client `id` (x-client-id).
    pub fn client(mut self, id: &str) -> Self {
        self.0.client_id = Some(id.to_string());
        self.0
            .headers
            .insert("x-client-id".to_string(), id.to_string());
        self
    }

    /// Body fingerprint (stands for the hex SHA-256).
    pub fn body(mut self, fingerprint: &str) -> Self {
        self.0.body_sha256 = Some(fingerprint.to_string());
        self.0.body_len = fingerprint.len() as u64;
        self
    }

    /// A captured request header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.0.headers.insert(name.to_string(), value.to_string());
        self
    }

    /// Method and path.
    pub fn at(mut self, method: &str, path: &str) -> Self {
        self.0.method = method.to_string();
        self.0.path = path.to_string();
        self
    }

    /// Created resource `id` (and answered 201; a gRPC call, OK).
    pub fn created(mut self, id: &str) -> Self {
        self.0.created = Some(id.to_string());
        if self.0.outcome == Outcome::Responded && !self.0.is_grpc() {
            self.0.status = Some(201);
        }
        self
    }

    /// An idempotent replay answered 200.
    pub fn replayed(mut self) -> Self {
        self.0.replayed = true;
        self.0.status = Some(200);
        self
    }

    /// A response header (lower-case name), recorded.
    pub fn response_header(mut self, name: &str, value: &str) -> Self {
        self.0
            .response_headers
            .get_or_insert_with(BTreeMap::new)
            .insert(name.to_string(), value.to_string());
        self
    }

    /// Response headers were recorded (even if there were none).
    pub fn recorded_headers(mut self) -> Self {
        self.0.response_headers.get_or_insert_with(BTreeMap::new);
        self
    }

    /// The resource the response named (an id in its body, its `Location`).
    pub fn resource(mut self, id: &str) -> Self {
        self.0.resource = Some(id.to_string());
        self
    }

    /// The fault schedule's rule `id` fired with fault `kind`.
    pub fn fault(mut self, rule: &str, kind: &str) -> Self {
        self.0.rule = Some(rule.to_string());
        self.0.fault = Some(kind.to_string());
        self
    }

    /// Made `transition` (e.g. `pending->paid`) on `resource`.
    pub fn transition(mut self, resource: &str, transition: &str) -> Self {
        self.0.resource = Some(resource.to_string());
        self.0.transition = Some(transition.to_string());
        self
    }

    /// A webhook delivery of event `event_id`, the `seq`-th event (from 1) of `subject`, of type
    /// `event_type`: its first attempt, to `POST /webhook`, answered 200.
    pub fn delivery(mut self, event_id: &str, subject: &str, event_type: &str, seq: u32) -> Self {
        self.0.method = "POST".to_string();
        self.0.path = "/webhook".to_string();
        self.0.idempotency_key = Some(event_id.to_string());
        self.0.resource = Some(subject.to_string());
        self.0.event_type = Some(event_type.to_string());
        self.0.event_seq = Some(seq);
        self.0.delivery_attempt = Some(1);
        self
    }

    /// The delivery was forged on purpose, as `how` (`signature`, `stale`, …).
    pub fn forged(mut self, how: &str) -> Self {
        self.0.forged = Some(how.to_string());
        self
    }

    /// The delivery's attempt number (1 = first).
    pub fn attempt(mut self, n: u32) -> Self {
        self.0.delivery_attempt = Some(n);
        self
    }

    /// The sender sent the delivery whole and dropped its answer unread.
    pub fn answer_dropped(mut self) -> Self {
        self.0.answer_dropped = true;
        self.0.status = None;
        self.0.outcome = Outcome::ClientClosed;
        self
    }

    /// Wall-clock arrival, ms since the Unix epoch.
    pub fn unix_ms(mut self, unix_ms: u64) -> Self {
        self.0.unix_ms = unix_ms;
        self
    }

    /// A gRPC call of `method` (`pkg.Service/Method`) over HTTP/2, answered OK after its
    /// Response-Headers (committed).
    pub fn grpc(mut self, method: &str) -> Self {
        self.0.method = "POST".to_string();
        self.0.path = format!("/{method}");
        self.0.http_version = Some(crate::HttpVersion::Http2);
        self.0.grpc_method = Some(method.to_string());
        self.0.status = Some(200);
        self.0.outcome = Outcome::Responded;
        self.0.grpc_status = Some(GrpcCode::Ok);
        self.0.committed = Some(true);
        self
    }

    /// Answered with gRPC status `code`: OK after Response-Headers, any other code
    /// Trailers-Only (not committed), as a server that fails a call before answering does.
    pub fn grpc_status(mut self, code: GrpcCode) -> Self {
        self.0.status = Some(200);
        self.0.outcome = Outcome::Responded;
        self.0.grpc_status = Some(code);
        self.0.committed = Some(code == GrpcCode::Ok);
        self
    }

    /// The answer's Response-Headers went out before its status: the call was committed.
    pub fn committed(mut self) -> Self {
        self.0.committed = Some(true);
        self
    }

    /// Answered with `grpc-retry-pushback-ms: ms`.
    pub fn pushback(mut self, ms: i64) -> Self {
        self.0.pushback_ms = Some(ms);
        self
    }

    /// Carried `grpc-previous-rpc-attempts: n`.
    pub fn previous_attempts(mut self, n: u32) -> Self {
        self.0.grpc_previous_attempts = Some(n);
        self
    }

    /// Carried a `grpc-timeout` of `ms`.
    pub fn grpc_timeout(mut self, ms: u64) -> Self {
        self.0.grpc_timeout_ms = Some(ms);
        self
    }

    // Below HTTP: statements and commands a protocol-aware proxy journals.

    /// A PostgreSQL statement `text` of transaction `tx` on connection `conn`, read by proxy
    /// `db`, answered without error (no method, path or status: it is no HTTP request). Its
    /// transaction control (`BEGIN`, `COMMIT`, …) is read from the text's first word.
    pub fn statement(mut self, conn: u64, tx: u64, text: &str) -> Self {
        self.0.method = String::new();
        self.0.path = String::new();
        self.0.status = None;
        self.0.http_version = None;
        self.0.conn_id = conn;
        self.0.forwarded = true;
        let first = text
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        let control = match first.as_str() {
            "BEGIN" | "START" => Some(TxControl::Begin),
            "COMMIT" | "END" => Some(TxControl::Commit),
            "ROLLBACK" | "ABORT" => Some(TxControl::Rollback),
            _ => None,
        };
        self.0.protocol = Some(Protocol::Postgres(PgStatement {
            proxy: "db".to_string(),
            statement: Some(text.to_string()),
            control,
            tx,
            block: control.is_some(),
            tag: Some(first),
            ..PgStatement::default()
        }));
        self
    }

    fn pg(&mut self) -> &mut PgStatement {
        if !matches!(self.0.protocol, Some(Protocol::Postgres(_))) {
            self.0.protocol = Some(Protocol::Postgres(PgStatement::default()));
        }
        match &mut self.0.protocol {
            Some(Protocol::Postgres(s)) => s,
            _ => unreachable!("set just above"),
        }
    }

    /// The statement's parameters' digest.
    pub fn params(mut self, digest: &str) -> Self {
        self.pg().params = Some(digest.to_string());
        self
    }

    /// The statement was answered with an error of this SQLSTATE.
    pub fn sqlstate(mut self, code: &str) -> Self {
        let s = self.pg();
        s.sqlstate = Some(code.to_string());
        s.tag = None;
        self
    }

    /// The statement ended its transaction, which the database committed (or did not).
    pub fn tx_committed(mut self, committed: bool) -> Self {
        self.pg().committed = Some(committed);
        self
    }

    /// A Redis command `command` on `key` (none: a keyless command) on connection `conn`, read
    /// by proxy `cache`, answered with a bulk string.
    pub fn redis(mut self, conn: u64, command: &str, key: Option<&str>) -> Self {
        self.0.method = String::new();
        self.0.path = String::new();
        self.0.status = None;
        self.0.http_version = None;
        self.0.conn_id = conn;
        self.0.forwarded = true;
        self.0.protocol = Some(Protocol::Redis(RedisCommand {
            proxy: "cache".to_string(),
            command: command.to_string(),
            key: key.map(str::to_string),
            args: u32::from(key.is_some()),
            reply: Some("bulk".to_string()),
            ..RedisCommand::default()
        }));
        self
    }

    /// The Redis command was answered with an error of this code (`LOADING`).
    pub fn redis_error(mut self, code: &str) -> Self {
        if let Some(Protocol::Redis(c)) = &mut self.0.protocol {
            c.reply = Some("error".to_string());
            c.error = Some(code.to_string());
        }
        self
    }

    /// The entry.
    pub fn build(self) -> Entry {
        self.0
    }
}

/// A connection through the TCP proxy `proxy`, accepted at `t_recv_ms` and closed by the client
/// 10 ms later, 100 bytes each way: an entry that is no HTTP request.
pub fn connection(seq: u64, t_recv_ms: impl Into<f64>, proxy: &str) -> Entry {
    let mut e = entry(seq, t_recv_ms).build();
    e.t_done_us = e.t_recv_us + 10_000;
    e.method = String::new();
    e.path = String::new();
    e.http_version = None;
    e.status = None;
    e.outcome = Outcome::ClientClosed;
    e.tcp = Some(Box::new(crate::TcpConnection {
        proxy: proxy.to_string(),
        client: "127.0.0.1:50000".to_string(),
        upstream: "127.0.0.1:6379".to_string(),
        number: seq,
        connected: true,
        connect_us: Some(100),
        bytes_up: 100,
        bytes_down: 100,
        ..crate::TcpConnection::default()
    }));
    e
}

/// Renumbers `entries` by arrival time (seq order = arrival order, as in a real journal).
pub fn in_arrival_order(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_by_key(|e| (e.t_recv_us, e.seq));
    for (i, e) in entries.iter_mut().enumerate() {
        e.seq = i as u64 + 1;
    }
    entries
}
