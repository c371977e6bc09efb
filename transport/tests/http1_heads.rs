//! HTTP/1.1 heads and trailers under the header list's limit, and interim answers, against a
//! server that writes exactly the bytes a test names.

use std::sync::Arc;
use std::time::Duration;

use history::ErrorKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::{Conn, Connect, Outgoing, Reply, Target};

/// A server on 127.0.0.1:0 that answers every request on every connection with `answer`.
async fn answering(answer: Vec<u8>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}/", listener.local_addr().expect("its address"));
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                loop {
                    while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        got.drain(..end + 4);
                        if s.write_all(&answer).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    url
}

async fn get(url: &str, max_header_list: Option<usize>) -> Result<Reply, transport::AttemptError> {
    let how = Connect {
        max_header_list,
        ..Connect::default()
    };
    let target = Arc::new(Target::with(url, &how).expect("the URL"));
    let req = Outgoing {
        method: http::Method::GET,
        uri: "/".into(),
        headers: http::HeaderMap::new(),
        body: bytes::Bytes::new(),
    };
    Conn::new(target).send(req, Duration::from_secs(60)).await
}

/// A head of `n` distinct four-letter fields.
fn head_with(n: u32) -> Vec<u8> {
    let mut h = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n".to_vec();
    for i in 0..n {
        let name: String = (0..4)
            .map(|k| char::from(b'a' + (i / 26u32.pow(k) % 26) as u8))
            .collect();
        h.extend_from_slice(format!("{name}: v\r\n").as_bytes());
    }
    h.extend_from_slice(b"\r\nok");
    h
}

#[tokio::test]
async fn a_head_of_many_fields_within_the_limit_is_read() {
    // 500 fields, past the 64 parsed in place: 500 × 37 bytes, under 64 KiB.
    let url = answering(head_with(500)).await;
    let r = get(&url, None).await.expect("an answer");
    assert_eq!(r.headers.len(), 501);
    assert_eq!(&r.body[..], b"ok");
}

#[tokio::test]
async fn thirty_thousand_fields_are_over_the_limit_never_a_panic() {
    let url = answering(head_with(30_000)).await;
    let e = get(&url, None).await.expect_err("over the limit");
    assert_eq!(e.kind, ErrorKind::Protocol, "{e}");
    assert!(e.message.contains("over the limit of 65536 bytes"), "{e}");
    // With the limit raised, more distinct names than a header map holds: still an error.
    let e = get(&url, Some(transport::MAX_HEADER_LIST))
        .await
        .expect_err("too many names");
    assert_eq!(e.kind, ErrorKind::Protocol, "{e}");
    assert!(
        e.message.contains("more header fields than a header map"),
        "{e}"
    );
}

#[tokio::test]
async fn interim_answers_103_included_are_skipped() {
    let url = answering(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n\
          HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            .to_vec(),
    )
    .await;
    let r = get(&url, None).await.expect("an answer");
    assert_eq!(r.status, 200);
    assert!(!r.headers.contains_key("link"));
    assert_eq!(&r.body[..], b"ok");
}

#[tokio::test]
async fn a_chunked_bodys_trailers_are_kept_and_bounded() {
    let url = answering(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\
          grpc-status: 0\r\nx-checksum: abc\r\n\r\n"
            .to_vec(),
    )
    .await;
    let r = get(&url, None).await.expect("an answer");
    assert_eq!(&r.body[..], b"ok");
    let t = r.trailers.expect("trailers");
    assert_eq!(
        (&t["grpc-status"], &t["x-checksum"]),
        (
            &"0".parse::<http::HeaderValue>().unwrap(),
            &"abc".parse::<http::HeaderValue>().unwrap()
        )
    );
    // None when there are none.
    let url = answering(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n".to_vec(),
    )
    .await;
    assert!(get(&url, None).await.expect("an answer").trailers.is_none());
    // A trailer section over the limit.
    let mut big = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n".to_vec();
    for i in 0..2000 {
        big.extend_from_slice(format!("x-t{i}: {}\r\n", "v".repeat(20)).as_bytes());
    }
    big.extend_from_slice(b"\r\n");
    let url = answering(big).await;
    let e = get(&url, None).await.expect_err("over the limit");
    assert_eq!(e.kind, ErrorKind::Protocol, "{e}");
}
