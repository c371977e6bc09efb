//! The `duplicates` verify step: ask the system of record how many resources each key created.
//!
//! Why: the journal sees creations only when the server reports them (the fault server's `created`
//! field). Against your own service, or to double-check, the truth is in its store: a GET per key
//! that answers a count, or an SQL count against its SQLite database. The counts are gathered
//! after the load, before any check runs, and enter the history as [`StoreCounts`]; the
//! `duplicates` check judges them with the journal.

use std::path::PathBuf;
use std::time::Duration;

use checks::duplicates::VerifyConfig;
use history::{KeyCount, StoreCounts};

use crate::http::{Conn, Connect, Outgoing, Target};

/// The verify step could not run.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("duplicates.verify: give `url` (with {{key}}) or `sqlite` with `query`")]
    /// Neither a URL nor an SQLite query was given.
    Config,
    #[error("duplicates.verify: {0}")]
    /// The URL is unusable.
    Target(#[from] crate::http::TargetError),
    #[error("duplicates.verify: cannot open {path}: {source}")]
    /// The SQLite file could not be opened.
    Sqlite {
        /// The file.
        path: String,
        /// Why.
        source: rusqlite::Error,
    },
}

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
    let (source, counts) = match (&cfg.url, &cfg.sqlite, &cfg.query) {
        (Some(url), None, None) => (
            format!("GET {url}"),
            by_url(url, &cfg.count_field, keys, target, headers, how).await,
        ),
        (None, Some(db), Some(q)) => (
            format!("{q} on {}", db.display()),
            by_sql(db.clone(), q.clone(), keys.to_vec()).await,
        ),
        _ => ("verify".to_string(), Err(VerifyError::Config)),
    };
    StoreCounts {
        source,
        counts: counts
            .map(|c| {
                c.into_iter()
                    .map(|(key, count)| KeyCount { key, count })
                    .collect()
            })
            .map_err(|e| e.to_string()),
    }
}

async fn by_url(
    url: &str,
    field: &str,
    keys: &[String],
    target: Option<&str>,
    headers: &[(http::HeaderName, http::HeaderValue)],
    how: &Connect,
) -> Result<Vec<(String, Result<u64, String>)>, VerifyError> {
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
            uri: path_template.replace("{key}", &percent_encode(key)),
            headers: headers.iter().cloned().collect(),
            body: bytes::Bytes::new(),
        };
        let count = match conn.send(req, Duration::from_secs(10)).await {
            Ok(r) if r.status.is_success() => serde_json::from_slice::<serde_json::Value>(&r.body)
                .ok()
                .and_then(|v| v.get(field).and_then(serde_json::Value::as_u64))
                .ok_or_else(|| format!("no numeric `{field}` in the answer")),
            Ok(r) => Err(format!("answered {}", r.status)),
            Err(e) => Err(e.to_string()),
        };
        out.push((key.clone(), count));
    }
    Ok(out)
}

async fn by_sql(
    db: PathBuf,
    query: String,
    keys: Vec<String>,
) -> Result<Vec<(String, Result<u64, String>)>, VerifyError> {
    let shown = db.display().to_string();
    tokio::task::spawn_blocking(move || {
        let conn =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .map_err(|source| VerifyError::Sqlite {
                    path: shown.clone(),
                    source,
                })?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let n = conn
                .query_row(&query, [&key], |r| r.get::<_, i64>(0))
                .map(|n| n.max(0) as u64)
                .map_err(|e| e.to_string());
            out.push((key, n));
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

    #[test]
    fn keys_are_percent_encoded_but_unreserved_characters() {
        assert_eq!(percent_encode("probe-ab_1.~"), "probe-ab_1.~");
        assert_eq!(percent_encode("a b&c/d"), "a%20b%26c%2Fd");
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
        let cfg = VerifyConfig {
            url: None,
            count_field: "count".into(),
            sqlite: Some(db.clone()),
            query: Some("SELECT COUNT(*) FROM orders WHERE idempotency_key = ?1".into()),
        };
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
            query: None,
        };
        let err = store_counts(&neither, &keys, None)
            .await
            .counts
            .expect_err("nothing to ask");
        assert!(err.contains("give `url`"), "{err}");
    }
}
