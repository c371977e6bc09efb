//! A payment API of record: the real dependency that `scenarios/proxy-example.yaml` puts the
//! fault server in front of.
//!
//! It is deliberately not the fault server: its own process, its own SQLite database with a real
//! `UNIQUE` constraint on the Idempotency-Key, its own answers. The fault server, as a proxy,
//! forwards the orders service's payment calls to it — or fails them, or forwards them and loses
//! the answer — and journals what it did, so the checks can tell whether the orders service paid
//! twice.
//!
//! - `POST /payments` (any body; `Idempotency-Key` required, else `400`): the first request of a
//!   key makes a payment — `201 {"id": "pay_N", "status": "paid"}` with
//!   `Location: /payments/pay_N`; a repeat with the same body replays it (`200`,
//!   `Idempotent-Replayed: true`); with another body, `422`.
//! - `GET /payments/{id}`: the payment, or `404`. Any other path: `404`.
//!
//! Flags: `--bind ADDR` (default `127.0.0.1:0`; prints `listening on http://ADDR` when ready),
//! `--database FILE` (default: in memory).
//!
//! ```sh
//! cargo run -p harness --example payments_service -- --bind 127.0.0.1:18711
//! ```

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use clap::Parser;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

#[derive(Debug, Parser)]
#[command(about = "A payment API of record on SQLite, with Idempotency-Key semantics")]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    bind: SocketAddr,
    /// SQLite database file; in memory when absent.
    #[arg(long, value_name = "FILE")]
    database: Option<PathBuf>,
}

/// Largest request body read.
const MAX_BODY: usize = 1 << 20;

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let db = match open(args.database.as_deref()) {
        Ok(c) => Arc::new(Mutex::new(c)),
        Err(e) => {
            eprintln!("payments_service: database: {e}");
            return ExitCode::from(3);
        }
    };
    let listener = match TcpListener::bind(args.bind).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("payments_service: cannot listen on {}: {e}", args.bind);
            return ExitCode::from(3);
        }
    };
    let Ok(addr) = listener.local_addr() else {
        return ExitCode::from(3);
    };
    let mut out = std::io::stdout().lock();
    if writeln!(out, "listening on http://{addr}")
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::from(3);
    }
    drop(out);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let db = db.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(db.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn open(path: Option<&std::path::Path>) -> rusqlite::Result<Connection> {
    let c = match path {
        Some(p) => Connection::open(p)?,
        None => Connection::open_in_memory()?,
    };
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS payments (
             n INTEGER PRIMARY KEY AUTOINCREMENT,
             idempotency_key TEXT NOT NULL UNIQUE,
             body_sha256 TEXT NOT NULL
         );",
    )?;
    Ok(c)
}

async fn handle(
    db: Arc<Mutex<Connection>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let key = parts
        .headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(text(StatusCode::PAYLOAD_TOO_LARGE, "body too large\n")),
    };
    let answer = match (&parts.method, path.as_str()) {
        (&Method::POST, "/payments") => match key {
            None => text(StatusCode::BAD_REQUEST, "Idempotency-Key is required\n"),
            Some(key) => {
                let sha = hex(&Sha256::digest(&body));
                let db = db.clone();
                tokio::task::spawn_blocking(move || pay(&db, &key, &sha))
                    .await
                    .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "failed\n"))
            }
        },
        (&Method::GET, p) if p.starts_with("/payments/") => {
            let id = p.trim_start_matches("/payments/").to_string();
            let found = id
                .strip_prefix("pay_")
                .and_then(|n| n.parse::<i64>().ok())
                .and_then(|n| {
                    let c = db.lock().unwrap_or_else(|p| p.into_inner());
                    c.query_row("SELECT n FROM payments WHERE n = ?1", [n], |r| {
                        r.get::<_, i64>(0)
                    })
                    .optional()
                    .ok()
                    .flatten()
                });
            match found {
                Some(n) => json(StatusCode::OK, n, &[]),
                None => text(StatusCode::NOT_FOUND, "no such payment\n"),
            }
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    };
    Ok(answer)
}

/// The first request of `key` makes a payment; the UNIQUE constraint decides a race.
fn pay(db: &Mutex<Connection>, key: &str, sha: &str) -> Response<Full<Bytes>> {
    let c = db.lock().unwrap_or_else(|p| p.into_inner());
    let inserted = c.execute(
        "INSERT INTO payments (idempotency_key, body_sha256) VALUES (?1, ?2)
         ON CONFLICT (idempotency_key) DO NOTHING",
        params![key, sha],
    );
    match inserted {
        Ok(1) => json(StatusCode::CREATED, c.last_insert_rowid(), &[]),
        Ok(_) => {
            let stored: rusqlite::Result<(i64, String)> = c.query_row(
                "SELECT n, body_sha256 FROM payments WHERE idempotency_key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            );
            match stored {
                Ok((n, s)) if s == sha => {
                    json(StatusCode::OK, n, &[("idempotent-replayed", "true")])
                }
                Ok(_) => text(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "this Idempotency-Key was used with another body\n",
                ),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
            }
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
    }
}

fn json(status: StatusCode, n: i64, extra: &[(&str, &str)]) -> Response<Full<Bytes>> {
    let id = format!("pay_{n}");
    let mut b = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("location", format!("/payments/{id}"));
    for (k, v) in extra {
        b = b.header(*k, *v);
    }
    b.body(Full::new(Bytes::from(
        serde_json::json!({ "id": id, "status": "paid" }).to_string(),
    )))
    .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
