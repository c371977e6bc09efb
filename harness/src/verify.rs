//! The verify step: ask the system of record, after the load, what it holds per key.
//!
//! Why: the journal sees creations only when the server reports them (the fault server's `created`
//! field), and a webhook consumer's effects not at all: its answer to a duplicate is the same
//! `200` whether it charged twice or not. The truth is in the store. So after the load, before
//! any check runs, each key is looked up — a GET per key that answers JSON, or an SQL query
//! against SQLite or PostgreSQL — and the answers enter the history as facts: [`StoreCounts`]
//! (resources per Idempotency-Key for `duplicates`; effects per webhook event id for
//! `effects_once` and `forged_rejected`) and [`StoreStates`] (the state each webhook subject ended
//! in, for `ordering`). The checks judge them with the journal; nothing here decides a verdict.
//!
//! One lookup for all of them: a key goes where the URL or the query says `{key}`, `{event_id}`
//! or `{subject}` — percent-encoded into a URL, bound as the query's one parameter (never pasted
//! into SQL text).

use std::path::PathBuf;
use std::time::Duration;

use checks::duplicates::VerifyConfig;
use checks::StateConfig;
use history::{KeyCount, KeyState, StoreCounts, StoreStates};

use crate::http::{Conn, Connect, Outgoing, Target};

/// The placeholders a lookup's URL or query may use for the key.
pub const PLACEHOLDERS: [&str; 3] = ["{key}", "{event_id}", "{subject}"];

/// The longest one lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The verify step could not run.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("verify: give `url` (with {{key}}, {{event_id}} or {{subject}}), or `sqlite` or `postgres` with `query`")]
    /// Neither a URL nor a database with its query was given, or several were.
    Config,
    #[error("verify: {0}")]
    /// The URL is unusable.
    Target(#[from] crate::http::TargetError),
    #[error("verify: cannot open {path}: {source}")]
    /// The SQLite file could not be opened.
    Sqlite {
        /// The file.
        path: String,
        /// Why.
        source: rusqlite::Error,
    },
    #[error("verify: PostgreSQL at {url}: {message}")]
    /// PostgreSQL could not be reached, or refused the query.
    Postgres {
        /// The database URL, its password hidden.
        url: String,
        /// Why.
        message: String,
    },
}

/// Where a lookup asks, whatever it asks for.
struct Source<'a> {
    url: Option<&'a str>,
    sqlite: Option<&'a PathBuf>,
    postgres: Option<&'a str>,
    query: Option<&'a str>,
}

/// What a lookup reads from each answer.
#[derive(Clone, Copy)]
enum Wanted<'a> {
    /// A count, in this JSON field (or the query's one column).
    Count(&'a str),
    /// A text, in this JSON field (or the query's one column); none for a 404 or no row.
    Text(&'a str),
}

/// One key's answer.
#[derive(Debug, Clone, PartialEq)]
enum Found {
    Count(u64),
    Text(Option<String>),
}

type Answers = Vec<(String, Result<Found, String>)>;

/// The store's count of each key, in the order given; a key whose count could not be read has
/// the reason instead, and a store that could not be asked at all says why.
pub async fn store_counts(
    cfg: &VerifyConfig,
    keys: &[String],
    target: Option<&str>,
) -> StoreCounts {
    store_counts_with(cfg, keys, target, &[], &Connect::default()).await
}

/// [`store_counts`], sending `headers` (e.g. `Authorization`) with every lookup, reaching the
/// store's URL as `how` says.
pub async fn store_counts_with(
    cfg: &VerifyConfig,
    keys: &[String],
    target: Option<&str>,
    headers: &[(http::HeaderName, http::HeaderValue)],
    how: &Connect,
) -> StoreCounts {
    let source = Source {
        url: cfg.url.as_deref(),
        sqlite: cfg.sqlite.as_ref(),
        postgres: cfg.postgres.as_deref(),
        query: cfg.query.as_deref(),
    };
    let wanted = Wanted::Count(&cfg.count_field);
    let (shown, answers) = lookup(&source, wanted, keys, target, headers, how).await;
    StoreCounts {
        source: shown,
        counts: answers
            .map(|a| {
                a.into_iter()
                    .map(|(key, found)| KeyCount {
                        key,
                        count: found.and_then(|f| match f {
                            Found::Count(n) => Ok(n),
                            Found::Text(_) => Err("not a count".to_string()),
                        }),
                    })
                    .collect()
            })
            .map_err(|e| e.to_string()),
    }
}

/// The state each subject ended in, in the order given, read as `cfg` says.
pub async fn store_states(
    cfg: &StateConfig,
    subjects: &[String],
    target: Option<&str>,
    how: &Connect,
) -> StoreStates {
    let source = Source {
        url: cfg.url.as_deref(),
        sqlite: cfg.sqlite.as_ref(),
        postgres: cfg.postgres.as_deref(),
        query: cfg.query.as_deref(),
    };
    let wanted = Wanted::Text(&cfg.field);
    let (shown, answers) = lookup(&source, wanted, subjects, target, &[], how).await;
    StoreStates {
        source: shown,
        states: answers
            .map(|a| {
                a.into_iter()
                    .map(|(key, found)| KeyState {
                        key,
                        state: found.map(|f| match f {
                            Found::Text(t) => t,
                            Found::Count(n) => Some(n.to_string()),
                        }),
                    })
                    .collect()
            })
            .map_err(|e| e.to_string()),
    }
}

/// Asks `source` about every key: how the source is named in messages, and the answers.
async fn lookup(
    source: &Source<'_>,
    wanted: Wanted<'_>,
    keys: &[String],
    target: Option<&str>,
    headers: &[(http::HeaderName, http::HeaderValue)],
    how: &Connect,
) -> (String, Result<Answers, VerifyError>) {
    match (source.url, source.sqlite, source.postgres, source.query) {
        (Some(url), None, None, None) => (
            format!("GET {url}"),
            by_url(url, wanted, keys, target, headers, how).await,
        ),
        (None, Some(db), None, Some(q)) => (
            format!("{q} on {}", db.display()),
            by_sqlite(db.clone(), bind(q, "?1"), wanted, keys.to_vec()).await,
        ),
        (None, None, Some(url), Some(q)) => (
            format!("{q} on {}", redacted(url)),
            // SQLite's spelling of the parameter, `?1`, is PostgreSQL's `$1`: one query serves both.
            by_postgres(url, &bind(q, "$1").replace("?1", "$1"), wanted, keys).await,
        ),
        _ => ("verify".to_string(), Err(VerifyError::Config)),
    }
}

/// `query` with its key placeholder (quoted or not) replaced by the parameter `param`.
fn bind(query: &str, param: &str) -> String {
    let mut q = query.to_string();
    for p in PLACEHOLDERS {
        for quoted in [format!("'{p}'"), format!("\"{p}\"")] {
            q = q.replace(&quoted, param);
        }
        q = q.replace(p, param);
    }
    q
}

/// A database URL as messages show it: without its password.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user_info = &url[scheme + 3..at];
            match user_info.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// `template` with every placeholder replaced by `key`, percent-encoded.
fn fill(template: &str, key: &str) -> String {
    let encoded = percent_encode(key);
    PLACEHOLDERS
        .iter()
        .fold(template.to_string(), |t, p| t.replace(p, &encoded))
}

async fn by_url(
    url: &str,
    wanted: Wanted<'_>,
    keys: &[String],
    target: Option<&str>,
    headers: &[(http::HeaderName, http::HeaderValue)],
    how: &Connect,
) -> Result<Answers, VerifyError> {
    let absolute = if url.starts_with("http://") || url.starts_with("https://") {
        url.to_string()
    } else {
        format!(
            "{}{}",
            target.unwrap_or_default().trim_end_matches('/'),
            url
        )
    };
    let base: http::Uri =
        absolute.parse().map_err(
            |e: http::uri::InvalidUri| crate::http::TargetError::Invalid {
                url: absolute.clone(),
                reason: e.to_string(),
            },
        )?;
    let origin = format!(
        "{}://{}",
        base.scheme_str().unwrap_or("http"),
        base.authority().map_or("", |a| a.as_str())
    );
    let target = std::sync::Arc::new(Target::with(&origin, how)?);
    let path_template = absolute[origin.len()..].to_string();
    let mut conn = Conn::new(target);
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let req = Outgoing {
            method: http::Method::GET,
            uri: fill(&path_template, key),
            headers: headers.iter().cloned().collect(),
            body: bytes::Bytes::new(),
        };
        let found = match (conn.send(req, LOOKUP_TIMEOUT).await, wanted) {
            (Ok(r), Wanted::Text(_)) if r.status == http::StatusCode::NOT_FOUND => {
                Ok(Found::Text(None))
            }
            (Ok(r), _) if r.status.is_success() => {
                let json = serde_json::from_slice::<serde_json::Value>(&r.body).ok();
                match wanted {
                    Wanted::Count(field) => json
                        .and_then(|v| v.get(field).and_then(serde_json::Value::as_u64))
                        .map(Found::Count)
                        .ok_or_else(|| format!("no numeric `{field}` in the answer")),
                    Wanted::Text(field) => match json.as_ref().and_then(|v| v.get(field)) {
                        Some(serde_json::Value::String(s)) => Ok(Found::Text(Some(s.clone()))),
                        Some(serde_json::Value::Null) => Ok(Found::Text(None)),
                        Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                            Ok(Found::Text(Some(v.to_string())))
                        }
                        _ => Err(format!("no `{field}` in the answer")),
                    },
                }
            }
            (Ok(r), _) => Err(format!("answered {}", r.status)),
            (Err(e), _) => Err(e.to_string()),
        };
        out.push((key.clone(), found));
    }
    Ok(out)
}

async fn by_sqlite(
    db: PathBuf,
    query: String,
    wanted: Wanted<'_>,
    keys: Vec<String>,
) -> Result<Answers, VerifyError> {
    let shown = db.display().to_string();
    let text = matches!(wanted, Wanted::Text(_));
    tokio::task::spawn_blocking(move || {
        let conn =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .map_err(|source| VerifyError::Sqlite {
                    path: shown.clone(),
                    source,
                })?;
        // A consumer writing while it is read waits its turn rather than failing the lookup.
        let _ = conn.busy_timeout(LOOKUP_TIMEOUT);
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let found = if text {
                use rusqlite::OptionalExtension;
                conn.query_row(&query, [&key], |r| r.get::<_, rusqlite::types::Value>(0))
                    .optional()
                    .map(|v| Found::Text(v.and_then(sql_text)))
            } else {
                conn.query_row(&query, [&key], |r| r.get::<_, i64>(0))
                    .map(|n| Found::Count(n.max(0) as u64))
            };
            out.push((key, found.map_err(|e| e.to_string())));
        }
        Ok(out)
    })
    .await
    .unwrap_or_else(|e| {
        Err(VerifyError::Sqlite {
            path: "<task>".into(),
            source: rusqlite::Error::InvalidParameterName(e.to_string()),
        })
    })
}

/// An SQLite value as the state it names; NULL is no state.
fn sql_text(v: rusqlite::types::Value) -> Option<String> {
    use rusqlite::types::Value;
    match v {
        Value::Null => None,
        Value::Integer(i) => Some(i.to_string()),
        Value::Real(f) => Some(f.to_string()),
        Value::Text(s) => Some(s),
        Value::Blob(b) => Some(String::from_utf8_lossy(&b).into_owned()),
    }
}

async fn by_postgres(
    url: &str,
    query: &str,
    wanted: Wanted<'_>,
    keys: &[String],
) -> Result<Answers, VerifyError> {
    let failed = |message: String| VerifyError::Postgres {
        url: redacted(url),
        message,
    };
    let connecting = tokio_postgres::connect(url, tokio_postgres::NoTls);
    let (client, connection) = tokio::time::timeout(LOOKUP_TIMEOUT, connecting)
        .await
        .map_err(|_| failed(format!("no connection within {LOOKUP_TIMEOUT:?}")))?
        .map_err(|e| failed(e.to_string()))?;
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!("verify: the PostgreSQL connection ended: {e}");
        }
    });
    let answers = async {
        let statement = client
            .prepare(query)
            .await
            .map_err(|e| failed(format!("cannot prepare {query:?}: {e}")))?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let row = tokio::time::timeout(LOOKUP_TIMEOUT, client.query_opt(&statement, &[key]))
                .await
                .map_err(|_| format!("no answer within {LOOKUP_TIMEOUT:?}"))
                .and_then(|r| r.map_err(|e| e.to_string()));
            let found = row.and_then(|row| match wanted {
                Wanted::Count(_) => {
                    let row = row.ok_or("the query returned no row")?;
                    pg_count(&row).map(Found::Count)
                }
                Wanted::Text(_) => match row {
                    None => Ok(Found::Text(None)),
                    Some(row) => pg_text(&row).map(Found::Text),
                },
            });
            out.push((key.clone(), found));
        }
        Ok(out)
    }
    .await;
    drop(client);
    let _ = driver.await;
    answers
}

/// The first column of `row` as a count, whichever integer type the query returned.
fn pg_count(row: &tokio_postgres::Row) -> Result<u64, String> {
    if let Ok(n) = row.try_get::<_, i64>(0) {
        return Ok(n.max(0) as u64);
    }
    if let Ok(n) = row.try_get::<_, i32>(0) {
        return Ok(n.max(0) as u64);
    }
    row.try_get::<_, i16>(0)
        .map(|n| n.max(0) as u64)
        .map_err(|e| format!("the query's first column is not a count: {e}"))
}

/// The first column of `row` as a state (text); NULL is no state.
fn pg_text(row: &tokio_postgres::Row) -> Result<Option<String>, String> {
    row.try_get::<_, Option<String>>(0)
        .or_else(|_| {
            row.try_get::<_, Option<i64>>(0)
                .map(|n| n.map(|n| n.to_string()))
        })
        .map_err(|e| format!("the query's first column is not a text: {e}"))
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn keys_are_percent_encoded_but_unreserved_characters() {
        assert_eq!(percent_encode("probe-ab_1.~"), "probe-ab_1.~");
        assert_eq!(percent_encode("a b&c/d"), "a%20b%26c%2Fd");
        assert_eq!(
            fill("/effects/{event_id}?k={key}", "a b"),
            "/effects/a%20b?k=a%20b"
        );
    }

    #[test]
    fn placeholders_become_the_querys_parameter_never_its_text() {
        assert_eq!(
            bind(
                "SELECT COUNT(*) FROM effects WHERE event_id = {event_id}",
                "$1"
            ),
            "SELECT COUNT(*) FROM effects WHERE event_id = $1"
        );
        assert_eq!(
            bind("SELECT type FROM state WHERE subject = '{subject}'", "?1"),
            "SELECT type FROM state WHERE subject = ?1"
        );
        assert_eq!(bind("SELECT 1 WHERE x = ?1", "?1"), "SELECT 1 WHERE x = ?1");
        assert_eq!(
            redacted("postgres://app:s3cret@127.0.0.1:5432/db"),
            "postgres://app:***@127.0.0.1:5432/db"
        );
        assert_eq!(
            redacted("postgres://127.0.0.1/db"),
            "postgres://127.0.0.1/db"
        );
    }

    fn sqlite_cfg(db: &std::path::Path, query: &str) -> VerifyConfig {
        VerifyConfig {
            url: None,
            count_field: "count".into(),
            sqlite: Some(db.to_path_buf()),
            postgres: None,
            query: Some(query.into()),
        }
    }

    #[tokio::test]
    async fn counts_come_from_an_sqlite_store_by_key() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("store.db");
        let conn = rusqlite::Connection::open(&db).expect("a database");
        conn.execute_batch(
            "CREATE TABLE orders (id TEXT, idempotency_key TEXT);
             INSERT INTO orders VALUES ('o1', 'k1'), ('o2', 'k2'), ('o3', 'k2');",
        )
        .expect("a table");
        drop(conn);
        let cfg = sqlite_cfg(
            &db,
            "SELECT COUNT(*) FROM orders WHERE idempotency_key = ?1",
        );
        let keys = vec!["k1".to_string(), "k2".to_string(), "k3".to_string()];
        let got = store_counts(&cfg, &keys, None).await;
        let counts: Vec<(String, Result<u64, String>)> = got
            .counts
            .expect("the store answered")
            .into_iter()
            .map(|k| (k.key, k.count))
            .collect();
        assert_eq!(
            counts,
            vec![
                ("k1".into(), Ok(1)),
                ("k2".into(), Ok(2)),
                ("k3".into(), Ok(0))
            ]
        );
        // The webhook spelling of the same lookup.
        let by_event = sqlite_cfg(
            &db,
            "SELECT COUNT(*) FROM orders WHERE idempotency_key = '{event_id}'",
        );
        let got = store_counts(&by_event, &keys[1..2], None).await;
        assert_eq!(got.counts.expect("answered")[0].count, Ok(2));
        // A query that does not run is reported per key; a missing database, for the store.
        let bad = VerifyConfig {
            query: Some("SELECT nope FROM nowhere WHERE x = ?1".into()),
            ..cfg.clone()
        };
        let got = store_counts(&bad, &keys[..1], None).await;
        assert!(got.counts.expect("opened")[0].count.is_err());
        let missing = VerifyConfig {
            sqlite: Some(dir.path().join("absent.db")),
            ..cfg
        };
        assert!(store_counts(&missing, &keys, None).await.counts.is_err());
        let neither = VerifyConfig {
            url: None,
            count_field: "count".into(),
            sqlite: None,
            postgres: None,
            query: None,
        };
        let err = store_counts(&neither, &keys, None)
            .await
            .counts
            .expect_err("nothing to ask");
        assert!(err.contains("give `url`"), "{err}");
    }

    #[tokio::test]
    async fn states_come_from_an_sqlite_store_by_subject() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("state.db");
        let conn = rusqlite::Connection::open(&db).expect("a database");
        conn.execute_batch(
            "CREATE TABLE state (subject TEXT PRIMARY KEY, type TEXT);
             INSERT INTO state VALUES ('in_1', 'invoice.paid'), ('in_2', NULL);",
        )
        .expect("a table");
        drop(conn);
        let cfg = StateConfig {
            url: None,
            field: "type".into(),
            sqlite: Some(db),
            postgres: None,
            query: Some("SELECT type FROM state WHERE subject = {subject}".into()),
        };
        let subjects: Vec<String> = ["in_1", "in_2", "in_3"].map(String::from).to_vec();
        let got = store_states(&cfg, &subjects, None, &Connect::default()).await;
        let states: Vec<Result<Option<String>, String>> = got
            .states
            .expect("answered")
            .into_iter()
            .map(|k| k.state)
            .collect();
        assert_eq!(
            states,
            vec![Ok(Some("invoice.paid".into())), Ok(None), Ok(None)]
        );
    }

    /// The test PostgreSQL server's URL (`bash .ci/postgres` prints one), or `None` after saying
    /// the test is skipped; with `HARNESS_REQUIRE_TOOLS=1` a missing server fails the test.
    fn postgres_url(test: &str) -> Option<String> {
        match std::env::var("FAULT_SERVER_TEST_DATABASE_URL") {
            Ok(u) if !u.trim().is_empty() => Some(u.trim().to_string()),
            _ => {
                assert!(
                    std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
                    "{test}: FAULT_SERVER_TEST_DATABASE_URL is not set and HARNESS_REQUIRE_TOOLS=1"
                );
                eprintln!("{test}: skipped: FAULT_SERVER_TEST_DATABASE_URL is not set");
                None
            }
        }
    }

    /// A schema of the test's own, dropped at the end.
    async fn postgres_schema(url: &str, setup: &str) -> (tokio_postgres::Client, String) {
        let (admin, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("the test PostgreSQL server");
        tokio::spawn(conn);
        let schema = format!(
            "verify_{}_{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        admin
            .batch_execute(&format!(
                "CREATE SCHEMA {schema}; SET search_path TO {schema}; {setup}"
            ))
            .await
            .expect("the test's tables");
        (admin, schema)
    }

    #[tokio::test]
    async fn counts_come_from_a_postgres_store_by_key_and_by_event_id() {
        let Some(url) = postgres_url("counts_come_from_a_postgres_store") else {
            return;
        };
        let (admin, schema) = postgres_schema(
            &url,
            "CREATE TABLE effects (id SERIAL PRIMARY KEY, event_id TEXT NOT NULL);
             INSERT INTO effects (event_id) VALUES ('evt_1'), ('evt_2'), ('evt_2');",
        )
        .await;
        let keys: Vec<String> = ["evt_1", "evt_2", "evt_3"].map(String::from).to_vec();
        let cfg = |query: String| VerifyConfig {
            url: None,
            count_field: "count".into(),
            sqlite: None,
            postgres: Some(url.clone()),
            query: Some(query),
        };
        // Every spelling of the parameter the reference names: `{event_id}` (quoted or not),
        // PostgreSQL's `$1` and SQLite's `?1`. COUNT(*) is a bigint, COUNT(*)::int an integer.
        for query in [
            format!("SELECT COUNT(*) FROM {schema}.effects WHERE event_id = {{event_id}}"),
            format!("SELECT COUNT(*) FROM {schema}.effects WHERE event_id = '{{event_id}}'"),
            format!("SELECT COUNT(*)::int FROM {schema}.effects WHERE event_id = $1"),
            format!("SELECT COUNT(*) FROM {schema}.effects WHERE event_id = ?1"),
        ] {
            let got = store_counts(&cfg(query.clone()), &keys, None).await;
            let counts: Vec<(String, Result<u64, String>)> = got
                .counts
                .unwrap_or_else(|e| panic!("{query}: {e}"))
                .into_iter()
                .map(|k| (k.key, k.count))
                .collect();
            assert_eq!(
                counts,
                vec![
                    ("evt_1".into(), Ok(1)),
                    ("evt_2".into(), Ok(2)),
                    ("evt_3".into(), Ok(0))
                ],
                "{query}"
            );
        }
        // A column that is no count is said per key; a query that does not prepare, and a
        // server that refuses the login, for the store (without the password).
        let text = store_counts(
            &cfg(format!(
                "SELECT event_id FROM {schema}.effects WHERE event_id = $1"
            )),
            &keys[..1],
            None,
        )
        .await;
        let err = text.counts.expect("prepared")[0]
            .count
            .clone()
            .expect_err("a text is no count");
        assert!(err.contains("not a count"), "{err}");
        let bad = store_counts(
            &cfg("SELECT nope FROM nowhere WHERE x = $1".into()),
            &keys,
            None,
        )
        .await
        .counts
        .expect_err("no such table");
        assert!(bad.contains("cannot prepare"), "{bad}");
        let wrong = VerifyConfig {
            postgres: Some("postgres://nobody:s3cret@127.0.0.1:1/db".into()),
            ..cfg("SELECT 1 WHERE $1 = ''".into())
        };
        let refused = store_counts(&wrong, &keys, None)
            .await
            .counts
            .expect_err("nothing listens on port 1");
        assert!(!refused.contains("s3cret"), "{refused}");
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .expect("dropped");
    }

    #[tokio::test]
    async fn states_come_from_a_postgres_store_by_subject() {
        let Some(url) = postgres_url("states_come_from_a_postgres_store_by_subject") else {
            return;
        };
        let (admin, schema) = postgres_schema(
            &url,
            "CREATE TABLE state (subject TEXT PRIMARY KEY, type TEXT);
             INSERT INTO state VALUES ('in_1', 'invoice.paid'), ('in_2', NULL);",
        )
        .await;
        let cfg = StateConfig {
            url: None,
            field: "type".into(),
            sqlite: None,
            postgres: Some(url.clone()),
            query: Some(format!(
                "SELECT type FROM {schema}.state WHERE subject = {{subject}}"
            )),
        };
        let subjects: Vec<String> = ["in_1", "in_2", "in_3"].map(String::from).to_vec();
        let got = store_states(&cfg, &subjects, None, &Connect::default()).await;
        let states: Vec<Result<Option<String>, String>> = got
            .states
            .expect("answered")
            .into_iter()
            .map(|k| k.state)
            .collect();
        assert_eq!(
            states,
            vec![Ok(Some("invoice.paid".into())), Ok(None), Ok(None)]
        );
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .expect("dropped");
    }
}
