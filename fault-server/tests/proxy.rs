//! Proxy mode against an independent upstream: a plain hyper server this test starts, which
//! counts its connections and records what reached it. Every fault keeps its meaning in front
//! of it, and the journal says what the upstream did.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{journal, start};
use fault_server::{Config, FaultServer, ServerOptions};
use history::{Entry, Outcome};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What reached the upstream.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path_and_query: String,
    headers: http::HeaderMap,
    body: Bytes,
}

/// An upstream on 127.0.0.1 that is not a fault server: `POST …/orders` creates `up-N`
/// (201, JSON id, Location); `…/slow` answers after 1.5 s; `…/busy` is a 503 with
/// `Retry-After: 7`; anything else echoes the body with `x-upstream: yes`.
struct Upstream {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let created = Arc::new(AtomicU64::new(0));
        let (c, s) = (connections.clone(), seen.clone());
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                c.fetch_add(1, Ordering::SeqCst);
                let (s, created) = (s.clone(), created.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (s, created) = (s.clone(), created.clone());
                        async move { Ok::<_, Infallible>(answer(req, &s, &created).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(sock), service)
                        .await;
                });
            }
        });
        Upstream {
            addr,
            connections,
            seen,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn answer(
    req: Request<Incoming>,
    seen: &Mutex<Vec<Seen>>,
    created: &AtomicU64,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or(String::new(), |p| p.to_string()),
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    let mut res = Response::builder();
    if path.ends_with("/slow") {
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    if path.ends_with("/orders") && parts.method == http::Method::POST {
        let n = created.fetch_add(1, Ordering::SeqCst) + 1;
        return res
            .status(201)
            .header("content-type", "application/json")
            .header("location", format!("/orders/up-{n}"))
            .body(Full::new(Bytes::from(format!(r#"{{"id":"up-{n}"}}"#))))
            .unwrap();
    }
    if path.ends_with("/busy") {
        res = res.status(503).header("retry-after", "7");
    }
    res.header("x-upstream", "yes")
        .body(Full::new(body))
        .unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn proxy(upstream: &str, rules: &str) -> FaultServer {
    start(&format!("upstream: {upstream}\nrules:\n{rules}")).await
}

fn only(j: &[Entry]) -> &Entry {
    assert_eq!(j.len(), 1, "{j:#?}");
    &j[0]
}

#[tokio::test]
async fn a_request_no_rule_answers_is_forwarded_and_its_answer_relayed() {
    let up = Upstream::start().await;
    let s = proxy(&format!("{}/api/", up.url()), "  []").await;
    let r = client()
        .put(format!("{}/things/1?x=1", s.url()))
        .header("idempotency-key", "k1")
        .header("x-custom", "kept")
        .header("connection", "keep-alive, x-custom-hop")
        .header("x-custom-hop", "for the proxy only")
        .body("hello upstream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-upstream"], "yes");
    assert_eq!(r.text().await.unwrap(), "hello upstream");

    let seen = up.seen();
    assert_eq!(seen.len(), 1);
    let got = &seen[0];
    assert_eq!(got.method, "PUT");
    assert_eq!(got.path_and_query, "/api/things/1?x=1", "under the prefix");
    assert_eq!(got.headers["x-custom"], "kept");
    assert_eq!(got.headers["idempotency-key"], "k1");
    assert_eq!(got.headers["host"], up.addr.to_string().as_str());
    assert_eq!(
        got.headers["x-forwarded-host"],
        s.addr().to_string().as_str()
    );
    assert!(
        !got.headers.contains_key("x-custom-hop"),
        "a header the client's Connection names stays with the proxy"
    );
    assert_ne!(
        got.headers.get("connection").map(|v| v.as_bytes()),
        Some(&b"keep-alive, x-custom-hop"[..])
    );
    assert_eq!(got.body, "hello upstream");

    let j = journal(&s).await;
    let e = only(&j);
    assert!(e.forwarded);
    assert_eq!(e.upstream_status, Some(200));
    assert_eq!(e.status, Some(200));
    assert!(e.upstream_us.is_some_and(|us| us > 0));
    assert_eq!(e.outcome, Outcome::Responded);
    assert_eq!(e.rule, None);
}

#[tokio::test]
async fn creations_and_response_headers_come_from_the_upstream() {
    let up = Upstream::start().await;
    let s = proxy(&up.url(), "  []").await;
    let c = client();
    for key in ["a", "b"] {
        let r = c
            .post(format!("{}/orders", s.url()))
            .header("idempotency-key", key)
            .body(r#"{"sku":"x"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let r = c.get(format!("{}/busy", s.url())).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let j = journal(&s).await;
    assert_eq!(j[0].created.as_deref(), Some("up-1"));
    assert_eq!(j[1].created.as_deref(), Some("up-2"));
    assert_eq!(j[1].response_header("location"), Some("/orders/up-2"));
    assert_eq!(j[2].created, None);
    assert_eq!(j[2].upstream_status, Some(503));
    assert_eq!(
        j[2].response_header("retry-after"),
        Some("7"),
        "the real value"
    );

    // `created_from` elsewhere: the Location header only.
    let s = start(&format!(
        "upstream: {{ url: {}, created_from: {{ status: [201], json: /nothing, location: true }} }}\n",
        up.url()
    ))
    .await;
    c.post(format!("{}/orders", s.url()))
        .body("{}")
        .send()
        .await
        .unwrap();
    let j = journal(&s).await;
    assert_eq!(only(&j).created.as_deref(), Some("/orders/up-3"));
}

#[tokio::test]
async fn faults_that_answer_never_reach_the_upstream() {
    let up = Upstream::start().await;
    let s = proxy(
        &up.url(),
        r#"
  - { id: s503, match: { path: /s503 }, fault: { status: { code: 503, retry_after: 2 } } }
  - { id: reset, match: { path: /reset }, fault: reset }
  - { id: hang, match: { path: /hang }, fault: { hang: { cap: 200ms } } }
  - { id: broken, match: { path: /broken }, fault: malformed }
"#,
    )
    .await;
    let c = client();
    let r = c.get(format!("{}/s503", s.url())).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().get("x-upstream").is_none());
    for path in ["/reset", "/hang", "/broken"] {
        let r = c.get(format!("{}{path}", s.url())).send().await;
        assert!(r.is_err(), "{path}: {r:?}");
    }
    assert!(up.seen().is_empty(), "{:?}", up.seen());
    let j = journal(&s).await;
    assert_eq!(j.len(), 4);
    for e in &j {
        assert!(!e.forwarded, "{e:?}");
        assert_eq!(e.upstream_status, None);
    }
    let outcomes: Vec<Outcome> = j.iter().map(|e| e.outcome).collect();
    assert_eq!(
        outcomes[..3],
        [Outcome::Responded, Outcome::Reset, Outcome::Hung],
        "{j:#?}"
    );
    assert_eq!(j[3].fault.as_deref(), Some("malformed"));
}

#[tokio::test]
async fn drop_forwards_then_loses_the_answer() {
    let up = Upstream::start().await;
    let s = proxy(
        &up.url(),
        "  - { id: lose, match: { method: POST }, fault: drop }\n",
    )
    .await;
    let r = client()
        .post(format!("{}/orders", s.url()))
        .header("idempotency-key", "k")
        .body("{}")
        .send()
        .await;
    assert!(r.is_err(), "the answer is lost: {r:?}");
    assert_eq!(up.seen().len(), 1, "the upstream processed it");
    let j = journal(&s).await;
    let e = only(&j);
    assert_eq!(e.outcome, Outcome::Dropped);
    assert!(e.forwarded);
    assert_eq!(e.upstream_status, Some(201));
    assert_eq!(e.created.as_deref(), Some("up-1"), "created, answer lost");
    assert_eq!(e.fault.as_deref(), Some("drop"));
}

#[tokio::test]
async fn a_delay_waits_before_or_after_the_upstream() {
    let up = Upstream::start().await;
    let s = proxy(
        &up.url(),
        r#"
  - { id: before, match: { path: /before }, fault: { delay: 400ms } }
  - { id: after, match: { path: /after }, fault: { delay: { fixed: 400ms, when: after } } }
"#,
    )
    .await;
    let c = client();
    for path in ["/before", "/after"] {
        let t0 = Instant::now();
        let r = c.get(format!("{}{path}", s.url())).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(t0.elapsed() >= Duration::from_millis(400), "{path}");
    }
    let j = journal(&s).await;
    // Before: the upstream is reached once the delay is over; after: at once, and its quick
    // answer then waits. The server's own clock says which.
    let (before, after) = (&j[0], &j[1]);
    assert!(before.forwarded && after.forwarded);
    let reached = |e: &Entry| e.t_done_us - e.t_recv_us - e.upstream_us.unwrap();
    assert!(reached(before) >= 400_000, "{before:?}");
    assert!(
        after.upstream_us.unwrap() < 400_000 && reached(after) >= 400_000,
        "{after:?}"
    );
}

#[tokio::test]
async fn a_forward_rule_mixes_proxied_and_mocked_paths() {
    let up = Upstream::start().await;
    let s = proxy(
        &up.url(),
        r#"
  - { id: real-payments, match: { path_prefix: /payments }, fault: forward }
  - { id: everything-else-down, fault: { status: 503 } }
"#,
    )
    .await;
    let c = client();
    let r = c
        .get(format!("{}/payments/1", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .get(format!("{}/inventory", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(up.seen().len(), 1);
    let j = journal(&s).await;
    assert_eq!(j[0].fault.as_deref(), Some("forward"));
    assert!(j[0].forwarded && !j[1].forwarded);
}

#[tokio::test]
async fn connections_to_the_upstream_are_kept_alive_and_pooled() {
    let up = Upstream::start().await;
    let s = proxy(&up.url(), "  []").await;
    kept_alive_and_pooled(&up, &s, 1).await;
}

/// The same with connections served on two threads of their own, each keeping its own idle
/// connections to the upstream.
#[tokio::test]
async fn connections_to_the_upstream_are_pooled_per_serving_thread() {
    let up = Upstream::start().await;
    let s = common::start_on_threads(&format!("upstream: {}\nrules: []", up.url()), 2).await;
    kept_alive_and_pooled(&up, &s, 2).await;
}

/// Sequential requests on `lanes` serving threads reuse at most two upstream connections per
/// thread; ten at once need at most ten more.
async fn kept_alive_and_pooled(up: &Upstream, s: &FaultServer, lanes: u64) {
    // Twenty clients one after another, each on its own connection to the proxy.
    for i in 0..20 {
        let c = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let r = c.get(format!("{}/n/{i}", s.url())).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(up.seen().len(), 20);
    let conns = up.connections.load(Ordering::SeqCst);
    assert!(
        conns <= 2 * lanes,
        "20 sequential requests took {conns} upstream connections"
    );
    // Ten at once need at most ten.
    let c = client();
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let (c, url) = (c.clone(), format!("{}/m/{i}", s.url()));
            tokio::spawn(async move { c.get(url).send().await.map(|r| r.status().as_u16()) })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), 200);
    }
    assert!(up.connections.load(Ordering::SeqCst) <= conns + 10);
}

#[tokio::test]
async fn an_upstream_that_is_down_is_a_502_journaled_as_upstream_error() {
    // A port nothing listens on: bound, then closed.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let s = proxy(&format!("http://{addr}"), "  []").await;
    let r = client()
        .post(format!("{}/orders", s.url()))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("could not be reached"),
        "{body}"
    );
    let j = journal(&s).await;
    let e = only(&j);
    assert_eq!(e.outcome, Outcome::UpstreamError);
    assert_eq!(e.status, Some(502));
    assert!(e.forwarded);
    assert_eq!(e.upstream_status, None);
    assert!(e.answered(), "the client did get an answer");
}

#[tokio::test]
async fn a_slow_upstream_against_the_timeouts() {
    let up = Upstream::start().await;
    // The proxy's own timeout: 504.
    let s = start(&format!(
        "upstream: {{ url: {}, timeout: 300ms }}\n",
        up.url()
    ))
    .await;
    let r = client()
        .get(format!("{}/slow", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    let j = journal(&s).await;
    let e = only(&j);
    assert_eq!(e.outcome, Outcome::UpstreamError);
    assert_eq!(e.status, Some(504));
    assert!(e.upstream_us.unwrap() >= 300_000);

    // The client's timeout, shorter than the upstream: the client gives up, and the forward is
    // cancelled with its request — the journal says it was forwarded, and that the client left
    // before any answer.
    let s = proxy(&up.url(), "  []").await;
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let r = quick
        .post(format!("{}/orders/slow", s.url()))
        .body("{}")
        .send()
        .await;
    assert!(r.unwrap_err().is_timeout());
    let j = journal_when(&s, |j| j.len() == 1).await;
    let e = &j[0];
    assert_eq!(e.outcome, Outcome::ClientClosed, "{e:?}");
    assert!(e.forwarded, "{e:?}");
    assert_eq!(
        e.upstream_status, None,
        "cancelled before the upstream answered"
    );
}

/// The journal once `ready` holds of it (within 10 s).
async fn journal_when(s: &FaultServer, ready: impl Fn(&[Entry]) -> bool) -> Vec<Entry> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let j = journal(s).await;
        if ready(&j) || Instant::now() > deadline {
            return j;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_https_upstream_is_reached_over_tls_with_its_ca() {
    // The upstream here is a fault server serving TLS with a certificate made for 127.0.0.1.
    let upstream = FaultServer::start(
        Config::from_yaml("tls: self-signed\n", "up").unwrap(),
        ServerOptions::default(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, upstream.certificate_pem().unwrap()).unwrap();
    let s = start(&format!(
        "upstream: {{ url: {}, ca: {} }}\n",
        upstream.url(),
        ca.display()
    ))
    .await;
    let r = client()
        .post(format!("{}/orders", s.url()))
        .header("idempotency-key", "tls-1")
        .body(r#"{"sku":"a"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let j = journal(&s).await;
    let e = only(&j);
    assert!(
        e.created
            .as_deref()
            .is_some_and(|id| id.starts_with("ord_")),
        "{e:?}"
    );
    let up = journal(&upstream).await;
    assert!(only(&up).tls);

    // Without the CA the certificate is unknown: a 502 that says why.
    let s = start(&format!("upstream: {}\n", upstream.url())).await;
    let r = client().get(format!("{}/x", s.url())).send().await.unwrap();
    assert_eq!(r.status(), 502);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("UnknownIssuer") || text.contains("unknown"),
        "{text}"
    );
}
