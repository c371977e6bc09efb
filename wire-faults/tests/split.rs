//! A stream reads the same however it is cut: whole, split at every byte boundary, or a byte at
//! a time — the messages and their bytes are the same, and so are their boundaries as an
//! independent decoder (`redis-protocol`) finds them.

use bytes::BytesMut;
use postgres_protocol::message::frontend;
use proptest::prelude::*;
use redis_protocol::resp2::encode::encode;
use redis_protocol::resp2::types::{OwnedFrame, Resp2Frame};
use wire_faults::pg::{answer, BackendItem, BackendReader, FrontendItem, FrontendReader};
use wire_faults::resp::RespReader;

/// What a reader made of a stream: each message's kind and bytes, in order (a passed-through
/// message's pieces joined).
type Read = Vec<(String, Vec<u8>)>;

fn read_frontend(chunks: &[&[u8]]) -> Read {
    let mut r = FrontendReader::new(1 << 20);
    let mut out: Read = Vec::new();
    let mut open = false;
    for c in chunks {
        r.push(c);
        while let Some(item) = r.next_item().expect("valid") {
            match item {
                FrontendItem::Message(m) => out.push((format!("{:?}", m.kind), m.raw.to_vec())),
                FrontendItem::Piece(p) => {
                    if p.first {
                        out.push((format!("piece {}", p.tag), Vec::new()));
                    }
                    assert!(open || p.first);
                    out.last_mut()
                        .expect("a piece's message")
                        .1
                        .extend_from_slice(&p.bytes);
                    open = !p.last;
                }
            }
        }
    }
    r.finish().expect("nothing left over");
    out
}

fn read_backend(chunks: &[&[u8]]) -> Read {
    let mut r = BackendReader::new(1 << 20);
    let mut out: Read = Vec::new();
    for c in chunks {
        r.push(c);
        while let Some(item) = r.next_item().expect("valid") {
            match item {
                BackendItem::Message(m) => out.push((format!("{:?}", m.kind), m.raw.to_vec())),
                BackendItem::Piece(p) => {
                    if p.first {
                        out.push((format!("piece {}", p.tag), Vec::new()));
                    }
                    out.last_mut()
                        .expect("a piece's message")
                        .1
                        .extend_from_slice(&p.bytes);
                }
            }
        }
    }
    r.finish().expect("nothing left over");
    out
}

fn read_commands(chunks: &[&[u8]]) -> Read {
    let mut r = RespReader::commands(1 << 20);
    let mut out = Vec::new();
    for c in chunks {
        r.push(c);
        while let Some(cmd) = r.next_command().expect("valid") {
            out.push((format!("{:?}", cmd.args), cmd.raw.to_vec()));
        }
    }
    r.finish().expect("nothing left over");
    out
}

fn read_replies(chunks: &[&[u8]]) -> Read {
    let mut r = RespReader::replies();
    let mut out: Read = Vec::new();
    let mut heads = Vec::new();
    for c in chunks {
        r.push(c);
        while let Some(p) = r.next_reply_piece().expect("valid") {
            if p.first {
                out.push((String::new(), Vec::new()));
            }
            let last = out.last_mut().expect("a reply");
            if let Some(h) = p.head {
                heads.push(h.clone());
                last.0 = format!("{h:?}");
            }
            last.1.extend_from_slice(&p.bytes);
        }
    }
    r.finish().expect("nothing left over");
    assert_eq!(heads.len(), out.len(), "one head per reply");
    out
}

/// The stream read whole, then cut at every boundary, then byte by byte: all the same.
fn same_however_cut(bytes: &[u8], read: fn(&[&[u8]]) -> Read) -> Result<Read, TestCaseError> {
    let whole = read(&[bytes]);
    for k in 0..=bytes.len() {
        let (a, b) = bytes.split_at(k);
        prop_assert_eq!(&read(&[a, b]), &whole, "cut at {}", k);
    }
    let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
    prop_assert_eq!(&read(&bytewise), &whole, "byte by byte");
    Ok(whole)
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 ,;'()$*]{0,40}"
}

/// One client message, as `postgres-protocol` writes it.
fn frontend_message() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        text().prop_map(|t| {
            let mut b = BytesMut::new();
            frontend::query(&t, &mut b).unwrap();
            b.to_vec()
        }),
        (text(), text()).prop_map(|(name, t)| {
            let mut b = BytesMut::new();
            frontend::parse(&name, &t, [23, 25], &mut b).unwrap();
            b.to_vec()
        }),
        proptest::collection::vec(proptest::option::of("[a-z0-9]{0,20}"), 0..4).prop_map(|vals| {
            let mut b = BytesMut::new();
            frontend::bind(
                "",
                "s1",
                [0],
                vals,
                |v, out| match v {
                    Some(v) => {
                        out.extend_from_slice(v.as_bytes());
                        Ok(postgres_protocol::IsNull::No)
                    }
                    None => Ok(postgres_protocol::IsNull::Yes),
                },
                [1],
                &mut b,
            )
            .map_err(|_| "bind")
            .unwrap();
            b.to_vec()
        }),
        Just({
            let mut b = BytesMut::new();
            frontend::describe(b'S', "s1", &mut b).unwrap();
            frontend::execute("", 10, &mut b).unwrap();
            frontend::close(b'P', "", &mut b).unwrap();
            b.to_vec()
        }),
        Just({
            let mut b = BytesMut::new();
            frontend::sync(&mut b);
            frontend::flush(&mut b);
            b.to_vec()
        }),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(|data| {
            let mut b = BytesMut::new();
            frontend::CopyData::new(&data[..]).unwrap().write(&mut b);
            frontend::copy_done(&mut b);
            b.to_vec()
        }),
    ]
}

/// One server message, as PostgreSQL writes it.
fn backend_message() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        text().prop_map(|t| answer::command_complete(&t).to_vec()),
        ("[0-9A-Z]{5}", text()).prop_map(|(s, m)| answer::error_response("ERROR", &s, &m).to_vec()),
        prop_oneof![
            Just(history::TxStatus::Idle),
            Just(history::TxStatus::Transaction),
            Just(history::TxStatus::Failed)
        ]
        .prop_map(|s| answer::ready_for_query(s).to_vec()),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(|v| {
            let mut m = vec![b'D'];
            m.extend_from_slice(&(4 + 2 + 4 + v.len() as u32).to_be_bytes());
            m.extend_from_slice(&1u16.to_be_bytes());
            m.extend_from_slice(&(v.len() as u32).to_be_bytes());
            m.extend_from_slice(&v);
            m
        }),
        Just(vec![
            b'1', 0, 0, 0, 4, b'2', 0, 0, 0, 4, b'n', 0, 0, 0, 4, b'I', 0, 0, 0, 4
        ]),
        text().prop_map(|t| {
            let mut body = b"application_name\0".to_vec();
            body.extend_from_slice(t.as_bytes());
            body.push(0);
            let mut m = vec![b'S'];
            m.extend_from_slice(&(4 + body.len() as u32).to_be_bytes());
            m.extend_from_slice(&body);
            m
        }),
    ]
}

/// A RESP2 frame, nested.
fn frame() -> impl Strategy<Value = OwnedFrame> {
    let leaf = prop_oneof![
        "[a-zA-Z ]{0,12}".prop_map(|s| OwnedFrame::SimpleString(s.into_bytes())),
        "[A-Z]{1,8} [a-z ]{0,12}".prop_map(OwnedFrame::Error),
        any::<i64>().prop_map(OwnedFrame::Integer),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(OwnedFrame::BulkString),
        Just(OwnedFrame::Null),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        proptest::collection::vec(inner, 0..5).prop_map(OwnedFrame::Array)
    })
}

fn encoded(f: &OwnedFrame) -> Vec<u8> {
    let mut buf = vec![0u8; f.encode_len(false)];
    let n = encode(&mut buf, f, false).expect("encodes");
    buf.truncate(n);
    buf
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_client_stream_reads_the_same_however_cut(msgs in proptest::collection::vec(frontend_message(), 1..5)) {
        let mut bytes = BytesMut::new();
        frontend::ssl_request(&mut bytes);
        frontend::startup_message([("user", "u"), ("database", "d")], &mut bytes).unwrap();
        for m in &msgs {
            bytes.extend_from_slice(m);
        }
        let whole = same_however_cut(&bytes, read_frontend)?;
        prop_assert_eq!(whole.iter().map(|(_, b)| b.len()).sum::<usize>(), bytes.len());
    }

    #[test]
    fn a_server_stream_reads_the_same_however_cut(msgs in proptest::collection::vec(backend_message(), 1..6)) {
        let bytes = msgs.concat();
        let whole = same_however_cut(&bytes, read_backend)?;
        prop_assert_eq!(whole.iter().map(|(_, b)| b.len()).sum::<usize>(), bytes.len());
    }

    #[test]
    fn commands_read_the_same_however_cut(cmds in proptest::collection::vec(
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 1..5), 1..4),
        inline in "[a-z]{1,6}( [a-z0-9]{1,6}){0,3}",
    ) {
        let mut bytes = Vec::new();
        for args in &cmds {
            bytes.extend(encoded(&OwnedFrame::Array(args.iter().cloned().map(OwnedFrame::BulkString).collect())));
        }
        bytes.extend_from_slice(inline.as_bytes());
        bytes.extend_from_slice(b"\r\n");
        let whole = same_however_cut(&bytes, read_commands)?;
        prop_assert_eq!(whole.len(), cmds.len() + 1);
        for (read, args) in whole.iter().zip(&cmds) {
            let want: Vec<bytes::Bytes> = args.iter().cloned().map(bytes::Bytes::from).collect();
            prop_assert_eq!(&read.0, &format!("{want:?}"));
        }
    }

    #[test]
    fn replies_read_the_same_however_cut_and_end_where_redis_protocol_says(frames in proptest::collection::vec(frame(), 1..4)) {
        let parts: Vec<Vec<u8>> = frames.iter().map(encoded).collect();
        let bytes = parts.concat();
        let whole = same_however_cut(&bytes, read_replies)?;
        // Each reply ends where the independent decoder ends it.
        let mut at = 0;
        for (read, part) in whole.iter().zip(&parts) {
            let (_, n) = redis_protocol::resp2::decode::decode(&bytes[at..])
                .expect("valid")
                .expect("whole");
            prop_assert_eq!(n, part.len());
            prop_assert_eq!(&read.1, part);
            at += n;
        }
        prop_assert_eq!(whole.len(), parts.len());
    }
}

#[test]
fn resp3_replies_read_the_same_however_cut() {
    let bytes = b"%2\r\n+a\r\n:1\r\n+b\r\n~2\r\n,3.5\r\n#t\r\n|1\r\n+ttl\r\n:3\r\n$2\r\nhi\r\n>2\r\n+pubsub\r\n(12345678901234567890\r\n=15\r\ntxt:Some string\r\n_\r\n!10\r\nERR broken\r\n";
    let whole = same_however_cut(bytes, read_replies).expect("the same");
    let kinds: Vec<&str> = whole
        .iter()
        .map(|(h, _)| h.split('"').nth(1).unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        ["map", "attribute", "push", "verbatim", "null", "error"]
    );
}
