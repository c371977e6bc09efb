//! A journal line reads back as the entry that was written, whatever the request carried: keys,
//! paths and header values with quotes, control characters, any Unicode.

use std::collections::BTreeMap;

use history::{
    AppliedToxic, EndedBy, Entry, GrpcCode, HttpVersion, Outcome, PgStatement, Protocol,
    RedisCommand, TcpConnection, TcpEnd, TxControl, TxStatus,
};
use proptest::prelude::*;

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Responded),
        Just(Outcome::Dropped),
        Just(Outcome::Reset),
        Just(Outcome::Hung),
        Just(Outcome::ClientClosed),
        Just(Outcome::Rejected),
        Just(Outcome::UpstreamError),
        Just(Outcome::SendTimeout),
    ]
}

fn text() -> impl Strategy<Value = String> {
    // Any Unicode scalar, controls and quotes included.
    "\\PC{0,12}|[\\x00-\\x1f\"\\\\\\u{7f}-\\u{9f}\\u{202e}]{0,8}"
}

prop_compose! {
    fn entry()(
        (seq, t_recv_us, t_done_us, unix_ms) in (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        method in text(),
        path in text(),
        query in proptest::option::of(text()),
        headers in proptest::collection::btree_map(text(), text(), 0..4),
        key in proptest::option::of(text()),
        client in proptest::option::of(text()),
        status in proptest::option::of(any::<u16>()),
        outcome in outcome(),
        version in proptest::option::of(prop_oneof![Just(HttpVersion::Http10), Just(HttpVersion::Http11), Just(HttpVersion::Http2)]),
        (tls, replayed, key_attempt) in (any::<bool>(), any::<bool>(), proptest::option::of(any::<u32>())),
        draw in proptest::option::of(0.0f64..1.0),
        rejected in proptest::option::of(text()),
        response_headers in proptest::option::of(proptest::collection::btree_map(text(), text(), 0..3)),
        (forwarded, upstream_status, upstream_us) in (any::<bool>(), proptest::option::of(any::<u16>()), proptest::option::of(any::<u64>())),
    ) -> Entry {
        Entry {
            seq, t_recv_us, t_done_us, unix_ms, method, path, query,
            headers: headers.into_iter().collect::<BTreeMap<_, _>>(),
            idempotency_key: key, client_id: client, status, outcome,
            http_version: version, tls, replayed, key_attempt, draw, rejected, response_headers,
            forwarded, upstream_status, upstream_us,
            ..Entry::default()
        }
    }
}

/// A statement or a command as a protocol-aware proxy journals it, every field drawn.
fn protocol() -> impl Strategy<Value = Protocol> {
    let pg = (
        (
            text(),
            proptest::option::of(text()),
            any::<bool>(),
            proptest::option::of(text()),
        ),
        (
            any::<u64>(),
            any::<bool>(),
            proptest::option::of(text()),
            proptest::option::of(text()),
        ),
        (
            proptest::option::of(text()),
            proptest::option::of(any::<bool>()),
            any::<bool>(),
            any::<bool>(),
        ),
        (
            proptest::option::of(prop_oneof![
                Just(TxStatus::Idle),
                Just(TxStatus::Transaction),
                Just(TxStatus::Failed)
            ]),
            proptest::option::of(prop_oneof![
                Just(TxControl::Begin),
                Just(TxControl::Commit),
                Just(TxControl::RollbackTo)
            ]),
            proptest::option::of(text()),
            proptest::option::of(text()),
        ),
    )
        .prop_map(
            |(
                (proxy, statement, truncated, params),
                (tx, block, sqlstate, message),
                (tag, committed, skipped, startup),
                (status, control, violation, _),
            )| {
                Protocol::Postgres(PgStatement {
                    proxy,
                    statement,
                    truncated,
                    control,
                    params,
                    tx,
                    block,
                    sqlstate,
                    message,
                    tag,
                    status,
                    committed,
                    skipped,
                    startup,
                    violation,
                })
            },
        );
    let redis = (
        (text(), text(), proptest::option::of(text()), any::<u32>()),
        (
            any::<bool>(),
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::of(text()),
        ),
    )
        .prop_map(
            |((proxy, command, key, args), (inline, reply, error, violation))| {
                Protocol::Redis(RedisCommand {
                    proxy,
                    command,
                    key,
                    args,
                    inline,
                    reply,
                    error,
                    violation,
                })
            },
        );
    prop_oneof![pg, redis]
}

prop_compose! {
    fn connection()(
        (proxy, client, upstream, connect_error) in (text(), text(), text(), proptest::option::of(text())),
        (number, connected, connect_us) in (any::<u64>(), any::<bool>(), proptest::option::of(any::<u64>())),
        (bytes_up, bytes_down, dropped_up, dropped_down) in (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        toxics in proptest::collection::vec((text(), text(), text(), proptest::option::of(0.0f64..1.0), any::<u64>()), 0..3),
        (ended_by, end, toxic) in (0usize..3, 0usize..7, proptest::option::of(text())),
    ) -> TcpConnection {
        TcpConnection {
            proxy, client, upstream, number, connected, connect_error, connect_us,
            bytes_up, bytes_down, dropped_up, dropped_down,
            toxics: toxics.into_iter().map(|(name, kind, stream, draw, t_us)| AppliedToxic { name, kind, stream, draw, t_us }).collect(),
            ended_by: [EndedBy::Client, EndedBy::Upstream, EndedBy::Proxy][ended_by],
            end: [TcpEnd::Closed, TcpEnd::Reset, TcpEnd::TimedOut, TcpEnd::Cut, TcpEnd::Refused, TcpEnd::Rejected, TcpEnd::Shutdown][end],
            toxic,
        }
    }
}

prop_compose! {
    /// An entry with every field drawn, the ones `entry` leaves at their defaults too.
    fn full_entry()(
        e in entry(),
        (t_body_us, t_wire_us, unix_us) in (proptest::option::of(any::<u64>()), proptest::option::of(any::<u64>()), any::<u64>()),
        (replica, body_sha256, rule, fault) in (proptest::option::of(text()), proptest::option::of(text()), proptest::option::of(text()), proptest::option::of(text())),
        (created, transition, resource) in (proptest::option::of(text()), proptest::option::of(text()), proptest::option::of(text())),
        (body_len, conn_id) in (any::<u64>(), any::<u64>()),
        draw in proptest::option::of(any::<f64>()),
        response_bytes in proptest::option::of(any::<u64>()),
        (grpc_method, grpc_status, grpc_message) in (proptest::option::of(text()), proptest::option::of(0u64..17), proptest::option::of(text())),
        (grpc_previous_attempts, grpc_timeout_ms, pushback_ms, committed) in (proptest::option::of(any::<u32>()), proptest::option::of(any::<u64>()), proptest::option::of(any::<i64>()), proptest::option::of(any::<bool>())),
        (event_type, event_seq, forged) in (proptest::option::of(text()), proptest::option::of(any::<u32>()), proptest::option::of(text())),
        (delivery_attempt, answer_dropped) in (proptest::option::of(any::<u32>()), any::<bool>()),
        tcp in proptest::option::of(connection().boxed()),
        protocol in proptest::option::of(protocol().boxed()),
    ) -> Entry {
        Entry {
            t_body_us, t_wire_us, unix_us, replica, body_sha256, rule, fault, created, transition,
            resource, body_len, conn_id, draw, response_bytes, grpc_method,
            grpc_status: grpc_status.and_then(GrpcCode::from_number), grpc_message,
            grpc_previous_attempts, grpc_timeout_ms, pushback_ms, committed,
            event_type, event_seq, forged, delivery_attempt, answer_dropped, protocol,
            tcp: tcp.map(Box::new),
            ..e
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The journal's own writer makes the bytes `serde_json` makes of the entry, field for field.
    #[test]
    fn the_journal_writer_writes_what_serde_writes(e in full_entry()) {
        let mut line = Vec::new();
        e.write_json(&mut line);
        let serde = serde_json::to_vec(&e).expect("an entry serializes");
        prop_assert_eq!(String::from_utf8_lossy(&line), String::from_utf8_lossy(&serde));
    }

    #[test]
    fn a_journal_line_reads_back_as_written(e in entry()) {
        let line = serde_json::to_string(&e).expect("an entry serializes");
        prop_assert!(!line.contains('\n'), "one entry, one line");
        let back: Entry = serde_json::from_str(&line).expect("and reads back");
        prop_assert_eq!(back, e);
    }
}
