//! One entry point per parser that faces outside input: the scenario loader, the fault server's
//! config and schedule, a journal, a saved report (`harness merge`/`report`), the client's response
//! parser, the server's request handling and its decoding of a gRPC call, the client's HTTP/2 frame reader and its HPACK decoder (the latter differential: against the
//! `hpack` crate, an independent decoder, field for field), and the protocol-aware proxies'
//! PostgreSQL and RESP readers with their per-connection state machines.
//!
//! Each takes arbitrary bytes and must return — no panic, no hang, no unbounded memory — and
//! checks what the parser promises where it promises something. The cargo-fuzz targets in `fuzz/`
//! call these; `tests/corpus.rs` replays the saved corpus and every past crash through them on the
//! stable toolchain, so a crash once found stays fixed.

#[cfg(feature = "app")]
mod app;
#[cfg(feature = "app")]
pub use app::*;
mod wire;
pub use wire::{pg_wire, resp_wire};

/// A target: arbitrary bytes in, a return (or a panic that is a finding).
pub type Target = fn(&[u8]);

/// The targets, by the name their corpus directory has.
#[cfg(feature = "app")]
pub const TARGETS: [(&str, Target); 12] = [
    ("scenario", scenario),
    ("fault_config", fault_config),
    ("schedule", schedule),
    ("journal", journal),
    ("response", response),
    ("request", request),
    ("h2_frames", h2_frames),
    ("hpack", hpack),
    ("report", report),
    ("grpc_request", grpc_request),
    ("pg_wire", pg_wire),
    ("resp_wire", resp_wire),
];

/// The targets, by the name their corpus directory has.
#[cfg(not(feature = "app"))]
pub const TARGETS: [(&str, Target); 4] = [
    ("h2_frames", h2_frames),
    ("hpack", hpack),
    ("pg_wire", pg_wire),
    ("resp_wire", resp_wire),
];

/// The client's HTTP/2 frame reader: five streams open (see `transport::fuzz::h2_frames`), the
/// input read as the server's bytes, in pieces of a size its first byte says. Whatever came, every
/// answer that is whole keeps within the client's limits, no interim answer is taken for the
/// final one, and what the client wrote is whole frames.
pub fn h2_frames(data: &[u8]) {
    let Some((&piece, server)) = data.split_first() else {
        return;
    };
    let r = transport::fuzz::h2_frames(server, usize::from(piece) * 7 + 1);
    let list = |h: &http::HeaderMap| -> usize {
        h.iter().map(|(n, v)| n.as_str().len() + v.len() + 32).sum()
    };
    for (i, answer) in r.answers.iter().enumerate() {
        match answer {
            Ok(reply) => {
                assert!(
                    !reply.status.is_informational(),
                    "stream {i}: an interim answer kept"
                );
                assert!(reply.body.len() as u64 <= transport::fuzz::MAX_BODY);
                assert!(list(&reply.headers) <= transport::fuzz::MAX_HEADER_LIST);
                if let Some(t) = &reply.trailers {
                    assert!(list(t) <= transport::fuzz::MAX_HEADER_LIST);
                }
                if i == 1 {
                    assert!(reply.body.is_empty(), "a body in the answer to HEAD");
                }
                for (name, _) in &reply.headers {
                    assert!(
                        !name.as_str().bytes().any(|b| b.is_ascii_uppercase()),
                        "an uppercase name kept"
                    );
                }
            }
            Err(e) => assert!(!e.message.is_empty(), "an error without a message"),
        }
    }
    let mut w = &r.written[..];
    while !w.is_empty() {
        assert!(w.len() >= 9, "a partial frame head written");
        // Up to the server's SETTINGS_MAX_FRAME_SIZE, which it may have raised: whole frames.
        let len = (usize::from(w[0]) << 16) | (usize::from(w[1]) << 8) | usize::from(w[2]);
        assert!(w.len() >= 9 + len, "a partial frame written");
        w = &w[9 + len..];
    }
}

/// Header blocks (the input cut where two length bytes say) decoded with the client's HPACK
/// decoder and with the `hpack` crate's, block after block on one table each: where both decode
/// a block, they agree field for field. The client's may refuse what RFC 7541 forbids and the
/// other takes (a table size update after a field, or over the size this side allows); it
/// may not accept what the other refuses. The `hpack` crate's static table names entry 15
/// `accept-` where RFC 7541 says `accept-charset`; that one name is read as the RFC's.
pub fn hpack(data: &[u8]) {
    let mut blocks = Vec::new();
    let mut rest = data;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])) % 4096;
        let block = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[2 + block.len()..];
        blocks.push(block);
    }
    let ours = transport::fuzz::hpack_blocks(blocks.iter().copied());
    // The other decoder panics on some inputs (a size update cut short): those are not compared,
    // and its panic is not the fuzzer's finding (whose hook aborts on any), so it is silenced
    // for that call alone.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let theirs = std::panic::catch_unwind(|| {
        let mut d = hpack::Decoder::new();
        let mut out = Vec::new();
        for block in &blocks {
            match d.decode(block) {
                Ok(fields) => out.push(Ok(fields)),
                Err(e) => {
                    out.push(Err(format!("{e:?}")));
                    break;
                }
            }
        }
        out
    });
    std::panic::set_hook(hook);
    let Ok(theirs) = theirs else {
        return;
    };
    let rfc = |fields: &Vec<(Vec<u8>, Vec<u8>)>| -> Vec<(Vec<u8>, Vec<u8>)> {
        fields
            .iter()
            .map(|(n, v)| match &n[..] {
                b"accept-" => (b"accept-charset".to_vec(), v.clone()),
                _ => (n.clone(), v.clone()),
            })
            .collect()
    };
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        match (a, b) {
            (Ok(a), Ok(b)) => assert_eq!(rfc(a), rfc(b), "block {i}: the decoders disagree"),
            (Err(a), Ok(_)) => assert!(
                a.contains("table size update"),
                "block {i}: refused ({a}), which the other decoder takes"
            ),
            (Ok(_), Err(b)) => panic!("block {i}: accepted, which the other decoder refuses: {b}"),
            (Err(_), Err(_)) => {}
        }
        if a.is_err() || b.is_err() {
            break;
        }
    }
}
