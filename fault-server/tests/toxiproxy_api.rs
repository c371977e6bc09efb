//! Toxiproxy's REST API as its clients see it: the routes, the JSON shapes, the status codes
//! (201 on a proxy's creation, 409 on a name that exists, 400 on a bad body, an unknown toxic
//! type or stream, an attribute out of range, 404 on an unknown proxy or toxic, 204 on delete and
//! reset, 500 on an address that cannot be listened on), every error a JSON body; a toxic made
//! through it acts on a real connection and is journaled; and who may call it.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::tcp::{connections, tcp, Behaviour, Upstream};
use fault_server::{Config, FaultServer, ServerOptions, StartError};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start() -> (FaultServer, String) {
    let server = FaultServer::start(
        Config::default(),
        ServerOptions {
            toxiproxy_api: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap();
    let api = format!("http://{}", server.toxiproxy_api_addr().unwrap());
    (server, api)
}

async fn call(method: &str, url: &str, body: Option<Value>) -> (StatusCode, Value) {
    let c = reqwest::Client::new();
    let mut r = c.request(method.parse().unwrap(), url);
    if let Some(b) = body {
        r = r.body(b.to_string());
    }
    let resp = r.send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A Toxiproxy error body with this status.
fn is_error(status: StatusCode, body: &Value, want: u16) {
    assert_eq!(status.as_u16(), want, "{body}");
    assert_eq!(body["status"], want, "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn proxies_are_created_shown_changed_and_deleted_with_toxiproxys_codes() {
    let up = Upstream::start(Behaviour::Echo).await;
    let (_server, api) = start().await;
    let (s, v) = call("GET", &format!("{api}/version"), None).await;
    assert_eq!(
        (s, v["version"].as_str().unwrap().starts_with("2.")),
        (StatusCode::OK, true)
    );

    let body = json!({ "name": "redis", "listen": "127.0.0.1:0", "upstream": up.addr.to_string() });
    let (s, p) = call("POST", &format!("{api}/proxies"), Some(body.clone())).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    assert_eq!(
        (p["name"].clone(), p["enabled"].clone(), p["toxics"].clone()),
        (json!("redis"), json!(true), json!([]))
    );
    let listen: SocketAddr = p["listen"].as_str().unwrap().parse().unwrap();
    assert_ne!(listen.port(), 0, "the bound port is shown");

    let (s, e) = call("POST", &format!("{api}/proxies"), Some(body)).await;
    is_error(s, &e, 409);
    let (s, e) = call(
        "POST",
        &format!("{api}/proxies"),
        Some(json!({ "name": "x" })),
    )
    .await;
    is_error(s, &e, 400);
    assert!(e["error"].as_str().unwrap().contains("upstream"), "{e}");
    let (s, e) = call("POST", &format!("{api}/proxies"), None).await;
    is_error(s, &e, 400);

    let (s, all) = call("GET", &format!("{api}/proxies"), None).await;
    assert_eq!(
        (s, all["redis"]["listen"].clone()),
        (StatusCode::OK, json!(listen.to_string()))
    );
    let (s, e) = call("GET", &format!("{api}/proxies/nope"), None).await;
    is_error(s, &e, 404);

    let (s, p) = call(
        "POST",
        &format!("{api}/proxies/redis"),
        Some(json!({ "enabled": false })),
    )
    .await;
    assert_eq!((s, p["enabled"].clone()), (StatusCode::OK, json!(false)));
    assert!(
        TcpStream::connect(listen).await.is_err(),
        "disabled: refused"
    );
    let (s, p) = call(
        "PATCH",
        &format!("{api}/proxies/redis"),
        Some(json!({ "enabled": true })),
    )
    .await;
    assert_eq!(
        (s, p["enabled"].clone(), p["listen"].clone()),
        (StatusCode::OK, json!(true), json!(listen.to_string()))
    );
    assert!(
        TcpStream::connect(listen).await.is_ok(),
        "enabled again, on its port"
    );

    let (s, _) = call("DELETE", &format!("{api}/proxies/redis"), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, e) = call("DELETE", &format!("{api}/proxies/redis"), None).await;
    is_error(s, &e, 404);
}

#[tokio::test]
async fn toxics_take_toxiproxys_defaults_shapes_and_codes_and_act_on_a_real_connection() {
    let up = Upstream::start(Behaviour::Echo).await;
    let (server, api) = start().await;
    let (_, p) = call(
        "POST",
        &format!("{api}/proxies"),
        Some(json!({ "name": "db", "listen": "127.0.0.1:0", "upstream": up.addr.to_string() })),
    )
    .await;
    let listen: SocketAddr = p["listen"].as_str().unwrap().parse().unwrap();
    let mut c = TcpStream::connect(listen).await.unwrap();

    let toxics = format!("{api}/proxies/db/toxics");
    let (s, t) = call(
        "POST",
        &toxics,
        Some(json!({ "type": "latency", "attributes": { "latency": 300 } })),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(
        t,
        json!({ "name": "latency_downstream", "type": "latency", "stream": "downstream", "toxicity": 1.0, "attributes": { "latency": 300, "jitter": 0 } })
    );
    // It acts on the connection opened before it.
    let t0 = Instant::now();
    c.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    c.read_exact(&mut buf).await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t0.elapsed()
    );

    let (s, e) = call("POST", &toxics, Some(json!({ "type": "latency" }))).await;
    is_error(s, &e, 409);
    let (s, e) = call("POST", &toxics, Some(json!({ "type": "latencyy" }))).await;
    is_error(s, &e, 400);
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .starts_with("invalid toxic type"),
        "{e}"
    );
    let (s, e) = call(
        "POST",
        &toxics,
        Some(json!({ "type": "latency", "name": "x", "stream": "sideways" })),
    )
    .await;
    is_error(s, &e, 400);
    assert_eq!(
        e["error"],
        "stream was invalid, can be either upstream or downstream"
    );
    let (s, e) = call(
        "POST",
        &toxics,
        Some(json!({ "type": "latency", "name": "y", "attributes": { "latency": -1 } })),
    )
    .await;
    is_error(s, &e, 400);
    assert!(
        e["error"].as_str().unwrap().contains("attributes.latency"),
        "{e}"
    );
    let (s, e) = call(
        "POST",
        &format!("{api}/proxies/nope/toxics"),
        Some(json!({ "type": "latency" })),
    )
    .await;
    is_error(s, &e, 404);

    // An update merges: the attribute given changes, the other stays.
    let one = format!("{toxics}/latency_downstream");
    let (s, t) = call(
        "PATCH",
        &one,
        Some(json!({ "attributes": { "jitter": 5 }, "toxicity": 0.5 })),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(
        (t["attributes"].clone(), t["toxicity"].clone()),
        (json!({ "latency": 300, "jitter": 5 }), json!(0.5))
    );
    let (s, e) = call(
        "PATCH",
        &format!("{toxics}/nope"),
        Some(json!({ "toxicity": 1 })),
    )
    .await;
    is_error(s, &e, 404);
    let (s, list) = call("GET", &toxics, None).await;
    assert_eq!(
        (s, list.as_array().map(Vec::len)),
        (StatusCode::OK, Some(1))
    );
    let (s, shown) = call("GET", &one, None).await;
    assert_eq!((s, shown["toxicity"].clone()), (StatusCode::OK, json!(0.5)));

    let (s, _) = call("DELETE", &one, None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, e) = call("GET", &one, None).await;
    is_error(s, &e, 404);
    drop(c);
    let j = connections(&server, 1).await;
    assert_eq!(
        tcp(&j[0]).toxics[0].name,
        "latency_downstream",
        "made through the API, journaled"
    );
}

#[tokio::test]
async fn reset_populate_and_a_proxy_made_with_its_toxics() {
    let up = Upstream::start(Behaviour::SendThenClose(100)).await;
    let (_server, api) = start().await;
    let populate = json!([
        { "name": "a", "listen": "127.0.0.1:0", "upstream": up.addr.to_string() },
        { "name": "b", "listen": "127.0.0.1:0", "upstream": up.addr.to_string(), "enabled": false,
          "toxics": [{ "type": "limit_data", "attributes": { "bytes": 10 } }] },
    ]);
    let (s, v) = call("POST", &format!("{api}/populate"), Some(populate.clone())).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["proxies"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        v["proxies"][1]["toxics"][0]["name"],
        "limit_data_downstream"
    );
    // Again: the same proxies are left as they are.
    let (s, again) = call(
        "POST",
        &format!("{api}/populate"),
        Some(json!([populate[0].clone()])),
    )
    .await;
    assert_eq!(
        (s, again["proxies"][0]["listen"].clone()),
        (StatusCode::CREATED, v["proxies"][0]["listen"].clone())
    );

    let (s, _) = call("POST", &format!("{api}/reset"), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, b) = call("GET", &format!("{api}/proxies/b"), None).await;
    assert_eq!(
        (b["enabled"].clone(), b["toxics"].clone()),
        (json!(true), json!([])),
        "{b}"
    );
    let mut c = TcpStream::connect(b["listen"].as_str().unwrap())
        .await
        .unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).await.unwrap();
    assert_eq!(got.len(), 100, "the toxic is gone");
}

#[tokio::test]
async fn an_address_in_use_is_toxiproxys_500_with_a_json_error() {
    let up = Upstream::start(Behaviour::Echo).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap();
    let (server, api) = start().await;
    let (s, e) = call(
        "POST",
        &format!("{api}/proxies"),
        Some(json!({ "name": "x", "listen": at.to_string(), "upstream": up.addr.to_string() })),
    )
    .await;
    is_error(s, &e, 500);
    assert!(
        e["error"].as_str().unwrap().contains(&at.to_string()),
        "{e}"
    );
    // Nothing else disturbed.
    assert!(server.proxies().list().is_empty());
    let (s, _) = call("GET", &format!("{api}/version"), None).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn browsers_foreign_hosts_and_tokenless_calls_beyond_loopback_are_refused() {
    let (_server, api) = start().await;
    let c = reqwest::Client::new();
    let r = c
        .get(format!("{api}/proxies"))
        .header("user-agent", "Mozilla/5.0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = c
        .get(format!("{api}/proxies"))
        .header("host", "evil.example:8474")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = c
        .get(format!("{api}/proxies"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // Beyond loopback, without a token: the server does not start.
    let err = FaultServer::start(
        Config::default(),
        ServerOptions {
            toxiproxy_api: Some("0.0.0.0:0".parse().unwrap()),
            ..ServerOptions::default()
        },
    )
    .await
    .err()
    .expect("no token, no public API");
    assert!(matches!(err, StartError::NoControlToken { .. }), "{err:?}");
}
