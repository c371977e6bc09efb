//! A gRPC client for the tests: the `grpc` crate's unary call (its request, its reading of the
//! answer) over the `h2` crate's client on a real connection, h2c or TLS with ALPN `h2`.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use grpc::call::{AttemptHeaders, CallRequest, CallResponse, HttpAnswer};
use grpc::frame::DEFAULT_MAX_MESSAGE;
use grpc::metadata::Metadata;
use h2::client::SendRequest;

/// One HTTP/2 connection to a server.
pub struct Client {
    send: SendRequest<Bytes>,
    base: String,
}

/// How long any one call may take here: far beyond what a loopback answer needs.
pub const CALL: Duration = Duration::from_secs(20);

impl Client {
    /// An h2c connection (HTTP/2 with prior knowledge).
    pub async fn connect(addr: SocketAddr) -> Client {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        let (send, conn) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
        tokio::spawn(conn);
        Client {
            send,
            base: format!("http://{addr}"),
        }
    }

    /// A TLS connection that trusts `pem` and agrees on `h2`.
    pub async fn connect_tls(addr: SocketAddr, pem: &str) -> Client {
        let opts = transport::tls::TlsOptions {
            trusted_pem: vec![pem.to_string()],
            ..Default::default()
        };
        let tls = transport::tls::ClientTls::new(&opts, true).expect("TLS settings");
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        let (stream, h2) = tls
            .handshake("127.0.0.1", tcp)
            .await
            .expect("TLS handshake");
        assert!(h2, "the server agreed to h2");
        let (send, conn) = h2::client::handshake(stream)
            .await
            .expect("HTTP/2 handshake");
        tokio::spawn(conn);
        Client {
            send,
            base: format!("https://{addr}"),
        }
    }

    /// The answer to `req` as it came, trailers included; the h2 error when the stream or the
    /// connection failed.
    pub async fn exchange(&mut self, req: transport::Outgoing) -> Result<HttpAnswer, h2::Error> {
        let mut builder = http::Request::builder()
            .method(req.method)
            .uri(format!("{}{}", self.base, req.uri));
        for (k, v) in &req.headers {
            builder = builder.header(k, v);
        }
        let request = builder.body(()).expect("a valid request");
        let mut send = self.send.clone().ready().await?;
        let end = req.body.is_empty();
        let (response, mut body) = send.send_request(request, end)?;
        if !end {
            body.send_data(req.body, true)?;
        }
        let (parts, mut recv) = response.await?.into_parts();
        let ended_with_headers = recv.is_end_stream();
        let mut data = BytesMut::new();
        while let Some(chunk) = recv.data().await {
            let chunk = chunk?;
            let _ = recv.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = if ended_with_headers {
            None
        } else {
            recv.trailers().await?
        };
        Ok(HttpAnswer {
            status: parts.status,
            headers: parts.headers,
            body: data.freeze(),
            trailers,
        })
    }

    /// A unary call of `method` (`pkg.Service/Method`) with this encoded message and metadata.
    pub async fn call(
        &mut self,
        method: &str,
        message: Bytes,
        metadata: &[(&str, &str)],
        headers: AttemptHeaders,
    ) -> Result<(HttpAnswer, CallResponse), h2::Error> {
        let mut md = Metadata::new();
        for (k, v) in metadata {
            md.insert(k, v).expect("valid metadata");
        }
        let req = CallRequest {
            path: format!("/{method}"),
            message,
            metadata: md,
            encoding: None,
            user_agent: Some("fault-server-tests".into()),
        };
        let answer = tokio::time::timeout(CALL, self.exchange(req.outgoing(headers)))
            .await
            .expect("the call ended in time")?;
        let read = CallResponse::read(answer.clone(), DEFAULT_MAX_MESSAGE);
        Ok((answer, read))
    }
}

/// The built-in orders service's method `name` (`CreateOrder`, `GetOrder`).
pub fn orders_method(name: &str) -> grpc::Method {
    grpc::orders::schema()
        .expect("the built-in orders.proto")
        .method(&format!("orders.v1.Orders/{name}"))
        .expect("a method of orders.v1.Orders")
}

/// `json` encoded as the request of orders method `name`.
pub fn orders_request(name: &str, json: &str) -> Bytes {
    orders_method(name)
        .encode_request(json)
        .expect("the request fits its message")
}

/// An Order answer as proto3 JSON.
pub fn order_json(message: &[u8]) -> serde_json::Value {
    let json = orders_method("GetOrder")
        .decode_response(message)
        .expect("an Order");
    serde_json::from_str(&json).expect("JSON")
}
