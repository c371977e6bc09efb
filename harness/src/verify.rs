//! The `duplicates` verify step: ask the system of record how many resources each key created.
//!
//! Why: the journal sees creations only when the server reports them (the fault server's `created`
//! field). Against your own service, or to double-check, the truth is in its store: a GET per key
//! that answers a count, or an SQL count against its SQLite database. This is the one part of a
//! check that is not a pure function of the journal, so it runs after the load, here, and its
//! findings are merged into the `duplicates` verdict.

use std::path::PathBuf;
use std::time::Duration;

use reports::{CheckResult, Evidence, Verdict};
use serde::{Deserialize, Serialize};

use crate::http::{Conn, Outgoing, Target};

/// Where to count resources per key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyConfig {
    /// A URL (or a path on the target) with `{key}`, answering JSON with a count, e.g. the fault
    /// server's `/orders?idempotency_key={key}`.
    #[serde(default)]
    pub url: Option<String>,
    /// The JSON field holding the count.
    #[serde(default = "count_field")]
    pub count_field: String,
    /// An SQLite database file to query instead.
    #[serde(default)]
    pub sqlite: Option<PathBuf>,
    /// The SQL returning the count for one key, which is bound to `?1`.
    #[serde(default)]
    pub query: Option<String>,
}

fn count_field() -> String {
    "count".to_string()
}

/// The verify step could not run.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("duplicates.verify: give `url` (with {{key}}) or `sqlite` with `query`")]
    Config,
    #[error("duplicates.verify: {0}")]
    Target(#[from] crate::http::TargetError),
    #[error("duplicates.verify: cannot open {path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
}

/// Counts per key, in the order given. A key whose count could not be read is reported as an
/// error string instead.
pub async fn counts(
    cfg: &VerifyConfig,
    keys: &[String],
    target: Option<&str>,
) -> Result<Vec<(String, Result<u64, String>)>, VerifyError> {
    match (&cfg.url, &cfg.sqlite, &cfg.query) {
        (Some(url), None, None) => by_url(url, &cfg.count_field, keys, target).await,
        (None, Some(db), Some(q)) => by_sql(db.clone(), q.clone(), keys.to_vec()).await,
        _ => Err(VerifyError::Config),
    }
}

async fn by_url(
    url: &str,
    field: &str,
    keys: &[String],
    target: Option<&str>,
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
    let target = std::sync::Arc::new(Target::parse(&origin)?);
    let path_template = absolute[origin.len()..].to_string();
    let mut conn = Conn::new(target);
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let req = Outgoing {
            method: http::Method::GET,
            uri: path_template.replace("{key}", &percent_encode(key)),
            headers: http::HeaderMap::new(),
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

/// Merges verified counts into the `duplicates` result: a key counted more than once fails it.
pub fn merge(mut result: CheckResult, counts: &[(String, Result<u64, String>)]) -> CheckResult {
    let bad: Vec<&(String, Result<u64, String>)> = counts
        .iter()
        .filter(|(_, c)| matches!(c, Ok(n) if *n > 1))
        .collect();
    let unreadable = counts.iter().filter(|(_, c)| c.is_err()).count();
    result
        .metrics
        .insert("verified_keys".into(), serde_json::json!(counts.len()));
    result.metrics.insert(
        "verified_duplicate_keys".into(),
        serde_json::json!(bad.len()),
    );
    for (key, c) in bad.iter().take(20) {
        if let Ok(n) = c {
            result.evidence.insert(
                0,
                Evidence {
                    detail: format!("verify: the store holds {n} resources for key {key}"),
                    key: Some(key.clone()),
                    seqs: Vec::new(),
                },
            );
        }
    }
    if !bad.is_empty() {
        result.passed = false;
        result.verdict = Verdict::Fail;
        result.summary = format!(
            "verify: {} of {} keys have more than one resource in the store; {}",
            bad.len(),
            counts.len(),
            result.summary
        );
    } else if unreadable > 0 && result.verdict == Verdict::Pass {
        result.verdict = Verdict::Weak;
        result.summary = format!(
            "{} (verify could not read {unreadable} of {} keys)",
            result.summary,
            counts.len()
        );
    } else if result.verdict != Verdict::Fail {
        if result.verdict == Verdict::Inconclusive && !counts.is_empty() && unreadable == 0 {
            result.verdict = Verdict::Pass;
            result.passed = true;
        }
        result.summary = format!(
            "{} (verified: {} keys, one resource each at most)",
            result.summary,
            counts.len()
        );
    }
    result
}
