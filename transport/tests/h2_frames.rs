//! The HTTP/2 client against a scripted peer that writes exactly the frames each test names: what
//! RFC 9113 and RFC 7541 let a server do is read as it should be, and what they forbid fails the
//! request it concerns as `protocol` — at once, never as a timeout, never as a panic.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use history::ErrorKind;
use http::Method;
use support::*;
use transport::http2::{Burst, H2Conn, Slot};
use transport::{AttemptError, Conn, Connect, Outgoing, Reply};

async fn send(target: &Arc<transport::Target>, req: Outgoing) -> Result<Reply, AttemptError> {
    Conn::new(target.clone()).send(req, LONG).await
}

fn fails(r: Result<Reply, AttemptError>, kind: ErrorKind, says: &str) -> AttemptError {
    let e = r.expect_err("the request fails");
    assert_eq!(e.kind, kind, "{e}");
    assert!(e.message.contains(says), "{e} does not say {says:?}");
    e
}

/// Answers each request on a connection with a plain 200 and "ok".
async fn ok_after(peer: &mut Peer) {
    while let Some(id) = peer.request().await {
        let mut b = status(200);
        b.extend(content_length(2));
        peer.send(&headers(id, false, &b)).await;
        peer.send(&data(id, true, b"ok")).await;
    }
}

#[tokio::test]
async fn continuation_and_padding_make_one_answer() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let id = peer.request().await.expect("a request");
        let mut block = status(200);
        block.extend(lit("x-long", &"y".repeat(40_000)));
        block.extend(content_length(5));
        peer.send(&headers_split(id, false, &block, 16_384)).await;
        // Padded DATA: the pad length, the data, then that much padding.
        let mut padded = vec![4u8];
        padded.extend_from_slice(b"hel");
        padded.extend_from_slice(&[0; 4]);
        peer.send(&frame(DATA, PADDED, id, &padded)).await;
        peer.send(&frame(DATA, PADDED | END_STREAM, id, &[0, b'l', b'o']))
            .await;
        peer.rest().await;
    })
    .await;
    let r = send(&s.target(1), get("/")).await.expect("an answer");
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["x-long"].len(), 40_000);
    assert_eq!(&r.body[..], b"hello");
    s.join().await;
}

#[tokio::test]
async fn trailers_are_kept_on_the_reply() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let id = peer.request().await.expect("a request");
        peer.send(&headers(id, false, &status(200))).await;
        peer.send(&data(id, false, b"body")).await;
        let mut t = lit("grpc-status", "0");
        t.extend(lit("grpc-message", "fine"));
        peer.send(&headers(id, true, &t)).await;
        peer.rest().await;
    })
    .await;
    let r = send(&s.target(1), get("/")).await.expect("an answer");
    assert_eq!(&r.body[..], b"body");
    let t = r.trailers.expect("trailers");
    assert_eq!(t["grpc-status"], "0");
    assert_eq!(t["grpc-message"], "fine");
    assert!(!r.headers.contains_key("grpc-status"));
    s.join().await;
}

#[tokio::test]
async fn informational_answers_103_included_are_skipped() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let id = peer.request().await.expect("a request");
        peer.send(&headers(id, false, &status(100))).await;
        let mut hints = status(103);
        hints.extend(lit("link", "</style.css>; rel=preload"));
        peer.send(&headers(id, false, &hints)).await;
        let mut b = status(201);
        b.extend(lit("x-final", "yes"));
        peer.send(&headers(id, true, &b)).await;
        peer.rest().await;
    })
    .await;
    let r = send(&s.target(1), get("/")).await.expect("an answer");
    assert_eq!(r.status, 201);
    assert_eq!(r.headers["x-final"], "yes");
    assert!(
        !r.headers.contains_key("link"),
        "the 103's fields are not the answer's"
    );
    s.join().await;
}

#[tokio::test]
async fn an_informational_answer_with_end_stream_fails_at_once() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let id = peer.request().await.expect("a request");
        peer.send(&headers(id, true, &status(103))).await;
        let rst = peer.next(RST_STREAM).await.expect("the stream reset");
        assert_eq!((rst.id, rst.code()), (id, PROTOCOL_ERROR));
        peer.rest().await;
    })
    .await;
    fails(
        send(&s.target(1), get("/")).await,
        ErrorKind::Protocol,
        "informational answer with END_STREAM",
    );
    s.join().await;
}

#[tokio::test]
async fn refused_stream_is_refused_and_another_reset_is_reset() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let first = peer.request().await.expect("a request");
        peer.send(&rst(first, REFUSED_STREAM)).await;
        let second = peer.request().await.expect("a request");
        peer.send(&rst(second, 0x2)).await;
        ok_after(&mut peer).await;
    })
    .await;
    let mut conn = Conn::new(s.target(1));
    fails(
        conn.send(get("/"), LONG).await,
        ErrorKind::Refused,
        "REFUSED_STREAM",
    );
    fails(
        conn.send(get("/"), LONG).await,
        ErrorKind::Reset,
        "INTERNAL_ERROR",
    );
    let r = conn
        .send(get("/"), LONG)
        .await
        .expect("the connection goes on");
    assert_eq!(&r.body[..], b"ok");
    assert_eq!(s.accepted(), 1);
    drop(conn);
    s.join().await;
}

/// GOAWAY with last stream 1 while streams 1 and 3 are open: 1 is answered, 3 was provably not
/// processed (`refused`), and the next request opens a new connection.
#[tokio::test]
async fn a_partial_goaway_refuses_the_streams_above_its_last() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        if peer.index > 0 {
            return ok_after(&mut peer).await;
        }
        let a = peer.request().await.expect("a request");
        let b = peer.request().await.expect("a request");
        assert_eq!((a, b), (1, 3));
        peer.send(&goaway(1, 0)).await;
        let mut block = status(200);
        block.extend(content_length(4));
        peer.send(&headers(1, false, &block)).await;
        peer.send(&data(1, true, b"done")).await;
        peer.rest().await;
    })
    .await;
    let slot = Arc::new(Slot::new(s.target(2)));
    let (mut w1, mut w2) = (H2Conn::on(slot.clone()), H2Conn::on(slot.clone()));
    let (r1, r2) = tokio::join!(w1.send(get("/a"), LONG), async {
        // Stream 3 after stream 1: the second worker waits until the first has opened its own.
        tokio::task::yield_now().await;
        w2.send(get("/b"), LONG).await
    });
    let (answered, refused) = match (r1, r2) {
        (Ok(a), Err(b)) | (Err(b), Ok(a)) => (a, b),
        other => panic!("one answered, one refused: {other:?}"),
    };
    assert_eq!(&answered.body[..], b"done");
    assert_eq!(refused.kind, ErrorKind::Refused, "{refused}");
    assert!(refused.message.contains("GOAWAY"), "{refused}");
    let r = w1.send(get("/c"), LONG).await.expect("a new connection");
    assert_eq!(&r.body[..], b"ok");
    assert_eq!(s.accepted(), 2);
    drop((w1, w2, slot));
    s.join().await;
}

/// A request body through windows that the server opens a little at a time, with its initial
/// window changed by SETTINGS in the middle of the stream: every byte arrives, once.
#[tokio::test]
async fn a_body_follows_windows_changed_mid_stream() {
    const LEN: usize = 100_000;
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[(0x4, 1000)])).await;
        let mut got = 0usize;
        let mut id = 0;
        let mut step = 0u32;
        while let Some(f) = peer.frame().await {
            match f.kind {
                HEADERS => id = f.id,
                DATA if f.id == id => {
                    let n = f.payload.len() as u32;
                    got += n as usize;
                    if f.flags & END_STREAM != 0 {
                        break;
                    }
                    step += 1;
                    // The stream's initial window changed once by SETTINGS, mid-stream; what was
                    // read given back in pieces, so that the client waits on it again and again.
                    if step == 1 {
                        peer.send(&settings(&[(0x4, 20_000)])).await;
                    }
                    if n > 0 {
                        peer.send(&window_update(id, n)).await;
                        peer.send(&window_update(0, n)).await;
                    }
                }
                _ => {}
            }
        }
        assert_eq!(got, LEN);
        let mut b = status(200);
        b.extend(content_length(got.to_string().len()));
        peer.send(&headers(id, false, &b)).await;
        peer.send(&data(id, true, got.to_string().as_bytes())).await;
        peer.rest().await;
    })
    .await;
    let req = Outgoing {
        method: Method::POST,
        body: Bytes::from(vec![b'x'; LEN]),
        ..get("/orders")
    };
    let r = send(&s.target(1), req).await.expect("an answer");
    assert_eq!(&r.body[..], LEN.to_string().as_bytes());
    s.join().await;
}

/// The limit drops to 0 (read by the client before the answer that follows it): the next
/// request fails at once as `refused`, and is never written.
#[tokio::test]
async fn zero_concurrent_streams_fail_at_once_as_refused() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let id = peer.request().await.expect("a request");
        peer.send(&settings(&[(0x3, 0)])).await;
        peer.send(&headers(id, true, &status(204))).await;
        let sent = peer.rest().await;
        assert!(
            sent.iter().all(|f| f.kind != HEADERS),
            "a request was written: {sent:?}"
        );
    })
    .await;
    let mut conn = Conn::new(s.target(1));
    assert_eq!(conn.send(get("/"), LONG).await.expect("first").status, 204);
    fails(
        conn.send(get("/"), LONG).await,
        ErrorKind::Refused,
        "SETTINGS_MAX_CONCURRENT_STREAMS = 0",
    );
    drop(conn);
    s.join().await;
}

/// A limit of one stream with two workers on the connection: the second request is written only
/// once the first is answered (a PING's round trip stands for "the client has written all it
/// meant to"). A first request, alone, lets the client read the limit first: before the
/// server's SETTINGS, a client may open up to 100 (RFC 9113 §6.5.2).
#[tokio::test]
async fn one_concurrent_stream_is_one_at_a_time() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[(0x3, 1)])).await;
        let id = peer.request().await.expect("the first request");
        peer.send(&headers(id, true, &status(204))).await;
        for _ in 0..2 {
            let id = peer.request().await.expect("a request");
            peer.send(&frame(PING, 0, 0, b"barrier!")).await;
            loop {
                let f = peer.frame().await.expect("the PING's answer");
                assert_ne!(f.kind, HEADERS, "a second stream under a limit of one");
                if f.kind == PING && f.flags & ACK != 0 {
                    break;
                }
            }
            peer.send(&headers(id, true, &status(204))).await;
        }
        peer.rest().await;
    })
    .await;
    let slot = Arc::new(Slot::new(s.target(2)));
    let (mut w1, mut w2) = (H2Conn::on(slot.clone()), H2Conn::on(slot.clone()));
    assert_eq!(w1.send(get("/"), LONG).await.expect("first").status, 204);
    let (r1, r2) = tokio::join!(w1.send(get("/a"), LONG), w2.send(get("/b"), LONG));
    assert_eq!(r1.expect("answered").status, 204);
    assert_eq!(r2.expect("answered").status, 204);
    drop((w1, w2, slot));
    s.join().await;
}

/// A server that sets no limit allows any number of streams (RFC 9113 §6.5.2): 150 requests at
/// once on one connection, all open before the server answers any.
#[tokio::test]
async fn no_concurrency_setting_means_no_limit_but_our_own() {
    const N: usize = 150;
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let mut ids = Vec::new();
        while ids.len() < N {
            ids.push(peer.request().await.expect("a request"));
        }
        for id in ids {
            peer.send(&headers(id, true, &status(204))).await;
        }
        peer.rest().await;
    })
    .await;
    let slot = Arc::new(Slot::new(s.target(N as u32)));
    let workers: Vec<_> = (0..N)
        .map(|_| {
            let mut w = H2Conn::on(slot.clone());
            async move { w.send(get("/"), LONG).await }
        })
        .collect();
    for r in transport::http2::drive(workers).await {
        assert_eq!(r.expect("answered").status, 204);
    }
    assert_eq!(s.accepted(), 1);
    drop(slot);
    s.join().await;
}

/// 30,000 distinct four-letter names (240 KB of block, under the block cap): over the header
/// list's limit, a stream error; with the limit raised, more names than a header map holds —
/// also a stream error, never a panic. The connection goes on either way.
#[tokio::test]
async fn thirty_thousand_header_names_are_a_stream_error() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let id = peer.request().await.expect("a request");
        let mut block = status(200);
        for i in 0..30_000u32 {
            let name: String = (0..4)
                .map(|k| char::from(b'a' + (i / 26u32.pow(k) % 26) as u8))
                .collect();
            block.extend(lit(&name, "v"));
        }
        peer.send(&headers_split(id, true, &block, 16_384)).await;
        ok_after(&mut peer).await;
    })
    .await;
    for (limit, says) in [
        (None, "over the limit of 65536 bytes"),
        (
            Some(transport::MAX_HEADER_LIST),
            "more header fields than a header map",
        ),
    ] {
        let mut conn = Conn::new(s.target_with(Connect {
            http2: true,
            max_header_list: limit,
            ..Connect::default()
        }));
        fails(conn.send(get("/"), LONG).await, ErrorKind::Protocol, says);
        let r = conn
            .send(get("/"), LONG)
            .await
            .expect("the connection goes on");
        assert_eq!(&r.body[..], b"ok");
    }
    s.join().await;
}

/// One 4 KB table entry referenced 60,000 times (one byte each: 60 KB on the wire, 245 MB
/// decoded): stopped at the header list's limit, and the table stays in step for the next answer.
#[tokio::test]
async fn hpack_amplification_stops_at_the_limit() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let id = peer.request().await.expect("a request");
        let mut block = status(200);
        block.extend(indexed_lit("x-big", &"z".repeat(4000)));
        block.extend(std::iter::repeat_n(0xbe, 60_000));
        peer.send(&headers_split(id, true, &block, 16_384)).await;
        let id = peer.request().await.expect("a request");
        // The entry is still index 62: the client's table followed.
        let mut b = status(200);
        b.push(0xbe);
        peer.send(&headers(id, true, &b)).await;
        peer.rest().await;
    })
    .await;
    let mut conn = Conn::new(s.target(1));
    fails(
        conn.send(get("/"), LONG).await,
        ErrorKind::Protocol,
        "over the limit",
    );
    let r = conn.send(get("/"), LONG).await.expect("the next answer");
    assert_eq!(r.headers["x-big"].len(), 4000);
    drop(conn);
    s.join().await;
}

#[tokio::test]
async fn bodies_shorter_or_longer_than_their_content_length() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let cases: [(usize, &[u8], bool); 4] = [
            (10, b"short", true),
            (3, b"longer", false),
            (5, b"", true),
            (4, b"", false),
        ];
        for (len, body, end_in_data) in cases {
            let id = peer.request().await.expect("a request");
            let mut b = status(200);
            b.extend(content_length(len));
            if body.is_empty() && !end_in_data {
                // Trailers end the stream before any DATA.
                peer.send(&headers(id, false, &b)).await;
                peer.send(&headers(id, true, &lit("x-t", "1"))).await;
            } else if body.is_empty() {
                peer.send(&headers(id, true, &b)).await;
            } else {
                peer.send(&headers(id, false, &b)).await;
                peer.send(&data(id, true, body)).await;
            }
        }
        ok_after(&mut peer).await;
    })
    .await;
    let mut conn = Conn::new(s.target(1));
    for says in [
        "after 5 of its content-length of 10",
        "longer than the content-length of 3",
        "after 0 of its content-length of 5",
        "after 0 of its content-length of 4",
    ] {
        fails(conn.send(get("/"), LONG).await, ErrorKind::Protocol, says);
    }
    assert_eq!(
        &conn.send(get("/"), LONG).await.expect("ok").body[..],
        b"ok"
    );
    drop(conn);
    s.join().await;
}

/// HEAD's answer, and 204's, may announce a length with no DATA (RFC 9113 §8.1.1).
#[tokio::test]
async fn head_and_204_may_announce_a_length_without_data() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        for code in [200, 204] {
            let id = peer.request().await.expect("a request");
            let mut b = status(code);
            b.extend(content_length(1234));
            peer.send(&headers(id, true, &b)).await;
        }
        let id = peer.request().await.expect("a request");
        peer.send(&headers(id, false, &status(200))).await;
        peer.send(&data(id, true, b"body")).await;
        peer.rest().await;
    })
    .await;
    let mut conn = Conn::new(s.target(1));
    let head = Outgoing {
        method: Method::HEAD,
        ..get("/")
    };
    assert_eq!(conn.send(head, LONG).await.expect("HEAD").status, 200);
    assert_eq!(conn.send(get("/"), LONG).await.expect("204").status, 204);
    // Content in an answer to HEAD is a breach.
    let head = Outgoing {
        method: Method::HEAD,
        ..get("/")
    };
    fails(
        conn.send(head, LONG).await,
        ErrorKind::Protocol,
        "has no content",
    );
    drop(conn);
    s.join().await;
}

#[tokio::test]
async fn window_update_of_zero_or_past_the_maximum() {
    // On a stream: that stream fails (RST_STREAM), the connection goes on.
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        for (inc, code) in [(0, PROTOCOL_ERROR), (0x7fff_ffff, FLOW_CONTROL_ERROR)] {
            let id = peer.request().await.expect("a request");
            peer.send(&window_update(id, inc)).await;
            let r = peer.next(RST_STREAM).await.expect("a reset");
            assert_eq!((r.id, r.code()), (id, code));
        }
        ok_after(&mut peer).await;
    })
    .await;
    let mut conn = Conn::new(s.target(1));
    fails(
        conn.send(get("/"), LONG).await,
        ErrorKind::Protocol,
        "WINDOW_UPDATE of 0",
    );
    fails(
        conn.send(get("/"), LONG).await,
        ErrorKind::Protocol,
        "past 2^31-1",
    );
    assert!(conn.send(get("/"), LONG).await.is_ok());
    drop(conn);
    s.join().await;
    // On the connection: the connection ends (GOAWAY) and its streams fail.
    for (inc, code, says) in [
        (0, PROTOCOL_ERROR, "WINDOW_UPDATE of 0 on the connection"),
        (
            0x7fff_ffff,
            FLOW_CONTROL_ERROR,
            "past 2^31-1 on the connection",
        ),
    ] {
        let s = serve(move |mut peer| async move {
            peer.send(&settings(&[])).await;
            peer.request().await.expect("a request");
            peer.send(&window_update(0, inc)).await;
            let g = peer.next(GOAWAY).await.expect("a GOAWAY");
            assert_eq!(g.code(), code);
        })
        .await;
        fails(
            send(&s.target(1), get("/")).await,
            ErrorKind::Protocol,
            says,
        );
        s.join().await;
    }
}

/// Each block breaks one rule of RFC 9113 §8.2–8.3 or RFC 7541; a field rule fails the stream
/// alone, a decoding rule the connection (COMPRESSION_ERROR).
#[tokio::test]
async fn field_rules_fail_the_stream_and_hpack_rules_the_connection() {
    let mut upper = status(200);
    upper.extend(lit("X-Upper", "v"));
    let mut after = lit("x-first", "v");
    after.extend(status(200));
    let mut twice = status(200);
    twice.extend(status(204));
    let mut conn_specific = status(200);
    conn_specific.extend(lit("connection", "keep-alive"));
    let mut request_pseudo = status(200);
    request_pseudo.extend(lit(":path", "/"));
    let mut spaced = status(200);
    spaced.extend(lit("x-v", "trailing "));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (upper, "uppercase"),
        (after, "pseudo-header :status after a regular field"),
        (twice, "a second :status"),
        (conn_specific, "connection-specific field connection"),
        (request_pseudo, "pseudo-header :path in an answer"),
        (spaced, "invalid value of x-v"),
        (lit("x-no-status", "v"), "without :status"),
        (status(99), ":status \"99\""),
    ];
    let blocks: Vec<Vec<u8>> = cases.iter().map(|c| c.0.clone()).collect();
    let s = serve(move |mut peer| {
        let blocks = blocks.clone();
        async move {
            peer.send(&settings(&[])).await;
            for b in blocks {
                let id = peer.request().await.expect("a request");
                peer.send(&headers(id, true, &b)).await;
                let r = peer.next(RST_STREAM).await.expect("a reset");
                assert_eq!((r.id, r.code()), (id, PROTOCOL_ERROR));
            }
            ok_after(&mut peer).await;
        }
    })
    .await;
    let mut conn = Conn::new(s.target(1));
    for (_, says) in &cases {
        fails(conn.send(get("/"), LONG).await, ErrorKind::Protocol, says);
    }
    assert!(conn.send(get("/"), LONG).await.is_ok());
    assert_eq!(s.accepted(), 1);
    drop(conn);
    s.join().await;
    // A table size update after a field: the table can no longer be trusted.
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        let id = peer.request().await.expect("a request");
        let mut b = status(200);
        b.push(0x20);
        peer.send(&headers(id, true, &b)).await;
        let g = peer.next(GOAWAY).await.expect("a GOAWAY");
        assert_eq!(g.code(), COMPRESSION_ERROR);
    })
    .await;
    fails(
        send(&s.target(1), get("/")).await,
        ErrorKind::Protocol,
        "table size update after the block's first field",
    );
    s.join().await;
}

/// The server's SETTINGS out of their bounds, or a first frame that is not SETTINGS, end the
/// connection.
#[tokio::test]
async fn settings_out_of_bounds_and_a_missing_preface() {
    let cases: [(Vec<u8>, &str); 4] = [
        (settings(&[(0x2, 1)]), "SETTINGS_ENABLE_PUSH 1"),
        (settings(&[(0x5, 100)]), "SETTINGS_MAX_FRAME_SIZE 100"),
        (settings(&[(0x4, 1 << 31)]), "SETTINGS_INITIAL_WINDOW_SIZE"),
        (
            frame(PING, 0, 0, b"12345678"),
            "first frame is not SETTINGS",
        ),
    ];
    for (first, says) in cases {
        let s = serve(move |mut peer| {
            let first = first.clone();
            async move {
                peer.send(&first).await;
                peer.rest().await;
            }
        })
        .await;
        fails(
            send(&s.target(1), get("/")).await,
            ErrorKind::Protocol,
            says,
        );
        s.join().await;
    }
}

/// A peer that stops answering, PING included, under an open stream is found dead by the
/// keep-alive, long before the request's own timeout.
#[tokio::test]
async fn a_silent_peer_is_found_by_the_keepalive_ping() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        peer.request().await.expect("a request");
        // Reads on, answers nothing, PINGs included.
        peer.deaf();
        let rest = peer.rest().await;
        assert!(rest.iter().any(|f| f.kind == PING && f.flags & ACK == 0));
    })
    .await;
    let target = s.target_with(Connect {
        http2: true,
        keepalive: Some(Duration::from_millis(100)),
        ..Connect::default()
    });
    fails(send(&target, get("/")).await, ErrorKind::Closed, "PING");
    s.join().await;
}

/// A connection left without streams past its idle timeout says GOAWAY and closes; the next
/// request opens another.
#[tokio::test]
async fn an_idle_connection_is_closed_and_replaced() {
    let closed = Arc::new(tokio::sync::Notify::new());
    let seen = closed.clone();
    let s = serve(move |mut peer| {
        let seen = seen.clone();
        async move {
            peer.send(&settings(&[])).await;
            let id = peer.request().await.expect("a request");
            peer.send(&headers(id, true, &status(204))).await;
            if peer.index == 0 {
                let g = peer.next(GOAWAY).await.expect("a GOAWAY when idle");
                assert_eq!(g.code(), 0);
                assert!(peer.rest().await.is_empty(), "nothing after the GOAWAY");
                seen.notify_one();
            } else {
                peer.rest().await;
            }
        }
    })
    .await;
    let target = s.target_with(Connect {
        http2: true,
        keepalive: Some(Duration::from_millis(20)),
        idle_timeout: Some(Duration::from_millis(60)),
        ..Connect::default()
    });
    let mut conn = Conn::new(target);
    assert_eq!(conn.send(get("/"), LONG).await.expect("first").status, 204);
    closed.notified().await;
    assert_eq!(conn.send(get("/"), LONG).await.expect("next").status, 204);
    assert_eq!(s.accepted(), 2);
    drop(conn);
    s.join().await;
}

/// A single-packet round larger than the server's stream limit is spread over as many
/// connections as it needs, none over the limit, every request answered.
#[tokio::test]
async fn a_burst_round_over_the_stream_limit_spreads_over_connections() {
    const LIMIT: u32 = 4;
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[(0x3, LIMIT)])).await;
        let mut open = Vec::new();
        while let Some(f) = peer.frame().await {
            if f.kind == HEADERS {
                open.push(f.id);
                assert!(open.len() <= LIMIT as usize, "more streams than the limit");
            }
            // A request is whole with its END_STREAM, the round's final frame: answered.
            if (f.kind == DATA || f.kind == HEADERS) && f.flags & END_STREAM != 0 {
                open.retain(|&id| id != f.id);
                peer.send(&headers(f.id, true, &status(201))).await;
            }
        }
    })
    .await;
    let burst = Burst::new(s.target(1));
    let reqs: Vec<Outgoing> = (0..10)
        .map(|_| Outgoing {
            method: Method::POST,
            body: Bytes::from_static(b"{}"),
            ..get("/orders")
        })
        .collect();
    let (replies, _) = burst.single_packet(reqs, LONG).await;
    for r in replies {
        assert_eq!(r.expect("answered").status, 201);
    }
    assert_eq!(s.accepted(), 3);
    drop(burst);
    s.join().await;
}

#[tokio::test]
async fn a_burst_that_cannot_be_spread_is_refused_before_anything_is_sent() {
    // A limit of 0: at once, as refused.
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[(0x3, 0)])).await;
        assert!(peer.rest().await.iter().all(|f| f.kind != HEADERS));
    })
    .await;
    let (replies, _) = Burst::new(s.target(1))
        .single_packet(vec![get("/"); 3], LONG)
        .await;
    for r in replies {
        fails(r, ErrorKind::Refused, "SETTINGS_MAX_CONCURRENT_STREAMS = 0");
    }
    s.join().await;
    // A limit of 1 and a round of 1,001: more connections than a burst opens.
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[(0x3, 1)])).await;
        assert!(peer.rest().await.iter().all(|f| f.kind != HEADERS));
    })
    .await;
    let burst = Burst::new(s.target(1));
    let (replies, _) = burst.single_packet(vec![get("/"); 1001], LONG).await;
    for r in replies {
        fails(
            r,
            ErrorKind::Other,
            "needs 1001 HTTP/2 connections at 1 concurrent streams",
        );
    }
    drop(burst);
    assert_eq!(s.accepted(), 1);
    s.join().await;
}

#[tokio::test]
async fn a_target_dropped_takes_its_pool_and_connections_with_it() {
    let s = serve(|mut peer| async move {
        peer.send(&settings(&[])).await;
        ok_after(&mut peer).await;
    })
    .await;
    // Neither the keep-alive nor the idle timer may be what closes the connection here.
    let target = s.target_with(Connect {
        http2: true,
        streams: 2,
        keepalive: Some(Duration::from_secs(3600)),
        idle_timeout: Some(Duration::from_secs(3600)),
        ..Connect::default()
    });
    let pool = Arc::downgrade(target.http2.as_ref().expect("an HTTP/2 target"));
    let r = send(&target, get("/")).await.expect("an answer");
    assert_eq!(r.status, 200);
    drop(target);
    assert!(
        pool.upgrade().is_none(),
        "the pool (and its connections) outlived the last handle on its target"
    );
    // The server sees the connection end: its script returns.
    tokio::time::timeout(Duration::from_secs(60), s.join())
        .await
        .expect("the connection was closed once nothing could use it");
}
