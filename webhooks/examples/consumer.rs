//! A webhook consumer with a real system of record, in the ways consumers get it right and wrong.
//!
//! Why it exists: a provider delivers at least once — twice at once, again after a lost answer,
//! out of order — and forgeries arrive at the same URL. What that does to a consumer shows in its
//! database, not in its answers. This consumer keeps a real SQLite database (a file, one
//! connection per request, so concurrent deliveries really are concurrent) and shows each classic
//! way of handling deliveries, selected with `--mode`:
//!
//! - `naive`: verifies the signature, then takes the effect of every delivery: a duplicate is
//!   charged twice, and the subject's state is whatever arrived last;
//! - `select-then-insert`: verifies, looks the event id up, waits `--delay-ms` (the work between
//!   the check and the write), then records the effect: sequential duplicates are caught, two
//!   copies delivered together both pass the check and are both charged; state as `naive`;
//! - `unique`: verifies, then records the event id under a real `UNIQUE` constraint in the same
//!   transaction as the effect: once per event whatever the concurrency, `200` to a duplicate
//!   (so the provider stops redelivering), and a subject's state moves only forward by `seq`, so
//!   reordered events end in the logically last state;
//! - `no-verify`: `unique` without the signature check: every forgery takes effect;
//! - `dup-500`: `unique`, but a duplicate is answered `500`: no second effect, yet the provider is
//!   told to redeliver, again and again.
//!
//! Endpoints: `POST /webhook` (a delivery: `400` when the signature or the timestamp is refused or
//! the body is not an event, `200` when processed, `200` or `500` to a duplicate as the mode says);
//! `GET /effects/{event_id}` → `{"event_id": …, "count": N}`, the number of effects the event
//! took (the system of record a `verify` URL reads); `GET /state/{subject}` → `{"subject": …,
//! "type": …, "seq": N}` (`404` for a subject never seen).
//!
//! The body must be an event as the default payload writes it: `id`, `type`, and
//! `data.object.id` (the subject) and `data.object.seq`.
//!
//! Flags: `--style standard-webhooks|stripe|github`, `--secret SECRET`, `--mode MODE` (default
//! `unique`), `--bind ADDR` (default `127.0.0.1:0`; prints `listening on http://ADDR` when ready),
//! `--db FILE` (default: a fresh file in a temporary directory), `--delay-ms N` (default 50),
//! `--tolerance SECS` (default: the style's; `none` checks no timestamp).
//!
//! ```sh
//! cargo run -p webhooks --example consumer -- --style stripe --secret whsec_test --mode naive
//! ```

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::{Parser, ValueEnum};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use serde::Deserialize;
use webhooks::{Secret, Style, Verifier};

/// How deliveries are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// An effect per delivery.
    Naive,
    /// SELECT, work, INSERT: racy.
    SelectThenInsert,
    /// A UNIQUE event id, in the effect's transaction.
    Unique,
    /// `unique` without verifying signatures.
    NoVerify,
    /// `unique`, answering 500 to a duplicate.
    #[value(name = "dup-500")]
    Dup500,
}

#[derive(Debug, Parser)]
#[command(about = "A webhook consumer with a real SQLite system of record, right and wrong")]
struct Args {
    /// The provider's style.
    #[arg(long)]
    style: String,
    /// The signing secret.
    #[arg(long)]
    secret: String,
    /// How deliveries are handled.
    #[arg(long, value_enum, default_value = "unique")]
    mode: Mode,
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:0")]
    bind: SocketAddr,
    /// The SQLite database file (default: a new one in a temporary directory).
    #[arg(long)]
    db: Option<PathBuf>,
    /// select-then-insert: the work between the SELECT and the INSERT, in milliseconds.
    #[arg(long, default_value_t = 50)]
    delay_ms: u64,
    /// The timestamp tolerance in seconds, or `none` (default: the style's).
    #[arg(long)]
    tolerance: Option<String>,
}

struct App {
    mode: Mode,
    verifier: Verifier,
    db: PathBuf,
    delay: Duration,
}

/// What a delivery did to the system of record.
enum Effect {
    Taken,
    Duplicate,
}

#[derive(Deserialize)]
struct EventBody {
    id: String,
    #[serde(rename = "type")]
    event_type: String,
    data: EventData,
}

#[derive(Deserialize)]
struct EventData {
    object: Subject,
}

#[derive(Deserialize)]
struct Subject {
    id: String,
    seq: i64,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("consumer: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let style: Style = args.style.parse()?;
    let secret = Secret::parse(style, &args.secret)?;
    let tolerance = match args.tolerance.as_deref() {
        None => style.tolerance(),
        Some("none") => None,
        Some(t) => Some(
            t.parse()
                .with_context(|| format!("--tolerance {t:?}: seconds, or none"))?,
        ),
    };
    // The temporary directory lives as long as the process.
    let mut _dir = None;
    let db = match args.db {
        Some(p) => p,
        None => {
            let d = tempfile::tempdir().context("creating a temporary directory")?;
            let p = d.path().join("consumer.sqlite");
            _dir = Some(d);
            p
        }
    };
    init(&db).with_context(|| format!("creating the database {}", db.display()))?;
    let app = Arc::new(App {
        mode: args.mode,
        verifier: Verifier::new(style, secret).with_tolerance(tolerance),
        db,
        delay: Duration::from_millis(args.delay_ms),
    });
    let router = Router::new()
        .route("/webhook", post(deliver))
        .route("/effects/{event_id}", get(effects))
        .route("/state/{subject}", get(state))
        .with_state(app);
    let rt = tokio::runtime::Runtime::new().context("starting the runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.bind)
            .await
            .with_context(|| format!("binding {}", args.bind))?;
        let addr = listener.local_addr()?;
        let mut out = std::io::stdout();
        writeln!(out, "listening on http://{addr}")?;
        out.flush()?;
        axum::serve(listener, router).await.context("serving")
    })
}

/// The schema: every effect a row (a charge, an email), the processed event ids under a real
/// UNIQUE constraint (used by the modes that deduplicate with it), and each subject's state.
fn init(db: &Path) -> rusqlite::Result<()> {
    let c = Connection::open(db)?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS effects (
             id INTEGER PRIMARY KEY,
             event_id TEXT NOT NULL,
             subject TEXT NOT NULL,
             type TEXT NOT NULL,
             seq INTEGER NOT NULL
         );
         CREATE INDEX IF NOT EXISTS effects_event ON effects (event_id);
         CREATE TABLE IF NOT EXISTS processed (event_id TEXT NOT NULL UNIQUE);
         CREATE TABLE IF NOT EXISTS state (
             subject TEXT PRIMARY KEY,
             type TEXT NOT NULL,
             seq INTEGER NOT NULL
         );",
    )
}

fn open(db: &Path) -> rusqlite::Result<Connection> {
    let c = Connection::open(db)?;
    // Concurrent deliveries wait for the write lock rather than fail.
    c.busy_timeout(Duration::from_secs(30))?;
    Ok(c)
}

async fn deliver(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    if app.mode != Mode::NoVerify {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if let Err(e) = app.verifier.verify(&headers, &body, now) {
            return (StatusCode::BAD_REQUEST, format!("refused: {e}\n")).into_response();
        }
    }
    let event: EventBody = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("not an event: {e}\n")).into_response(),
    };
    let work = app.clone();
    let done = tokio::task::spawn_blocking(move || record(&work, &event)).await;
    match done {
        Ok(Ok(Effect::Taken)) => (StatusCode::OK, "processed\n").into_response(),
        Ok(Ok(Effect::Duplicate)) if app.mode == Mode::Dup500 => {
            (StatusCode::INTERNAL_SERVER_ERROR, "duplicate\n").into_response()
        }
        Ok(Ok(Effect::Duplicate)) => (StatusCode::OK, "duplicate\n").into_response(),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("database: {e}\n"),
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("worker: {e}\n")).into_response(),
    }
}

/// Takes (or not) the event's effect, as the mode does.
fn record(app: &App, e: &EventBody) -> rusqlite::Result<Effect> {
    let mut c = open(&app.db)?;
    let subject = &e.data.object;
    match app.mode {
        Mode::Naive => {
            effect(&c, e)?;
            last_write_wins(&c, e)?;
            Ok(Effect::Taken)
        }
        Mode::SelectThenInsert => {
            let seen: i64 = c.query_row(
                "SELECT COUNT(*) FROM effects WHERE event_id = ?1",
                params![e.id],
                |r| r.get(0),
            )?;
            if seen > 0 {
                return Ok(Effect::Duplicate);
            }
            // The work between the check and the write: the window a concurrent copy races in.
            std::thread::sleep(app.delay);
            effect(&c, e)?;
            last_write_wins(&c, e)?;
            Ok(Effect::Taken)
        }
        Mode::Unique | Mode::NoVerify | Mode::Dup500 => {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            match tx.execute(
                "INSERT INTO processed (event_id) VALUES (?1)",
                params![e.id],
            ) {
                Err(rusqlite::Error::SqliteFailure(f, _))
                    if f.code == ErrorCode::ConstraintViolation =>
                {
                    return Ok(Effect::Duplicate);
                }
                other => other?,
            };
            effect(&tx, e)?;
            // A subject's state moves forward only: a reordered older event changes nothing.
            tx.execute(
                "INSERT INTO state (subject, type, seq) VALUES (?1, ?2, ?3)
                 ON CONFLICT (subject) DO UPDATE SET type = excluded.type, seq = excluded.seq
                 WHERE excluded.seq > state.seq",
                params![subject.id, e.event_type, subject.seq],
            )?;
            tx.commit()?;
            Ok(Effect::Taken)
        }
    }
}

fn effect(c: &Connection, e: &EventBody) -> rusqlite::Result<()> {
    c.execute(
        "INSERT INTO effects (event_id, subject, type, seq) VALUES (?1, ?2, ?3, ?4)",
        params![e.id, e.data.object.id, e.event_type, e.data.object.seq],
    )?;
    Ok(())
}

fn last_write_wins(c: &Connection, e: &EventBody) -> rusqlite::Result<()> {
    c.execute(
        "INSERT INTO state (subject, type, seq) VALUES (?1, ?2, ?3)
         ON CONFLICT (subject) DO UPDATE SET type = excluded.type, seq = excluded.seq",
        params![e.data.object.id, e.event_type, e.data.object.seq],
    )?;
    Ok(())
}

async fn effects(State(app): State<Arc<App>>, UrlPath(event_id): UrlPath<String>) -> Response {
    let db = app.db.clone();
    let id = event_id.clone();
    let count = tokio::task::spawn_blocking(move || {
        open(&db)?.query_row(
            "SELECT COUNT(*) FROM effects WHERE event_id = ?1",
            params![id],
            |r| r.get::<_, i64>(0),
        )
    })
    .await;
    match count {
        Ok(Ok(n)) => Json(serde_json::json!({"event_id": event_id, "count": n})).into_response(),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("database: {e}\n"),
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("worker: {e}\n")).into_response(),
    }
}

async fn state(State(app): State<Arc<App>>, UrlPath(subject): UrlPath<String>) -> Response {
    let db = app.db.clone();
    let s = subject.clone();
    let row = tokio::task::spawn_blocking(move || {
        open(&db)?
            .query_row(
                "SELECT type, seq FROM state WHERE subject = ?1",
                params![s],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
            )
            .optional()
    })
    .await;
    match row {
        Ok(Ok(Some((t, seq)))) => {
            Json(serde_json::json!({"subject": subject, "type": t, "seq": seq})).into_response()
        }
        Ok(Ok(None)) => (StatusCode::NOT_FOUND, "no such subject\n").into_response(),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("database: {e}\n"),
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("worker: {e}\n")).into_response(),
    }
}
