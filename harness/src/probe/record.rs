//! The probe's record of its exchanges: one journal entry each, from the client's side.
//!
//! What the fault server writes for a request it saw, the probe writes for a request it sent:
//! the key, the body's hash, the status, how the exchange ended, the resource the answer named
//! (created, when the answer was a 2xx that is not flagged as a replay), and the response headers
//! the idempotency protocol speaks with (`Retry-After`, `Location`, `Idempotent-Replayed`).

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use history::{Entry, ErrorKind, Outcome};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use sha2::{Digest, Sha256};

use crate::http::{AttemptError, Reply};

/// Response headers kept in each entry.
const RESPONSE_HEADERS: [&str; 4] = [
    "retry-after",
    "location",
    "idempotent-replayed",
    "content-type",
];

/// The exchanges so far, and what the entries do not say of them (the client's error kinds,
/// the answers' latency); the requests are counted from the entries, as any journal's are.
pub(crate) struct Recording {
    pub(crate) started: Instant,
    started_unix_ms: u64,
    method: String,
    path: String,
    /// Headers sent with every request, as the journal captures them.
    headers: BTreeMap<String, String>,
    pub(crate) entries: Vec<Entry>,
    pub(crate) errors_by_kind: BTreeMap<String, u64>,
    pub(crate) latency_ms: Vec<f64>,
    /// Sending tasks that died (a panic): the probe is then an error, not a verdict.
    pub(crate) task_failures: Vec<String>,
    /// Each exchange's answer, in the order of `entries`, when asked for.
    pub(crate) answers: Option<Vec<Option<Answer>>>,
}

/// Largest answer body an [`Answer`] keeps: a resource's representation, not a download.
pub(crate) const ANSWER_BODY_MAX: usize = 64 * 1024;

/// What came back for one exchange, for a caller that reads the resource it names.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// The headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body, when it is JSON of at most [`ANSWER_BODY_MAX`] bytes.
    pub body: Option<serde_json::Value>,
    /// The body's first [`ANSWER_TEXT_MAX`] bytes as text, control characters replaced: what
    /// a report quotes of a refusal.
    pub text: String,
}

/// Largest part of an answer's body an [`Answer`] quotes.
pub(crate) const ANSWER_TEXT_MAX: usize = 300;

impl Answer {
    /// The answer as kept: headers that are text, a JSON body within the bound.
    pub(crate) fn of(reply: &Reply) -> Answer {
        Answer {
            status: reply.status.as_u16(),
            headers: reply
                .headers
                .iter()
                .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect(),
            body: (reply.body.len() <= ANSWER_BODY_MAX)
                .then(|| serde_json::from_slice(&reply.body).ok())
                .flatten(),
            text: quote(&reply.body),
        }
    }
}

impl Recording {
    /// An empty record of requests `method path` carrying `headers`.
    pub(crate) fn new(method: &Method, path: &str, headers: &[(HeaderName, HeaderValue)]) -> Self {
        Recording {
            started: Instant::now(),
            started_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            method: method.to_string(),
            path: path.to_string(),
            headers: headers
                .iter()
                .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect(),
            entries: Vec::new(),
            errors_by_kind: BTreeMap::new(),
            latency_ms: Vec::new(),
            task_failures: Vec::new(),
            answers: None,
        }
    }

    /// The requests so far, counted from their entries as any journal's are.
    pub(crate) fn requests(&self) -> reports::model::Requests {
        let mut tally = crate::tally::JournalTally::new(std::time::Duration::from_secs(1), None);
        self.entries.iter().for_each(|e| tally.observe(e));
        tally.requests().clone()
    }

    /// From now on, keeps each exchange's answer beside its entry.
    pub(crate) fn keep_answers(&mut self) {
        self.answers.get_or_insert_with(Vec::new);
    }

    /// Records one exchange: sent with `key` and `body` at `sent`, ended at `ended` so.
    pub(crate) fn exchange(
        &mut self,
        key: Option<&str>,
        body: &Bytes,
        sent: Instant,
        ended: Instant,
        result: &Result<Reply, AttemptError>,
    ) {
        let us = |t: Instant| t.saturating_duration_since(self.started).as_micros() as u64;
        let mut e = Entry::blank(self.entries.len() as u64 + 1);
        e.t_recv_us = us(sent);
        e.t_done_us = us(ended).max(e.t_recv_us);
        e.unix_ms = self.started_unix_ms + e.t_recv_us / 1000;
        e.method = self.method.clone();
        e.path = self.path.clone();
        e.headers = self.headers.clone();
        if let Some(k) = key {
            e.headers.insert("idempotency-key".into(), k.to_string());
            e.idempotency_key = Some(k.to_string());
        }
        e.client_id = e.headers.get("x-client-id").cloned();
        e.body_sha256 = Some(
            Sha256::digest(body)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        );
        e.body_len = body.len() as u64;
        e.conn_id = e.seq;
        match result {
            Ok(reply) => {
                let status = reply.status.as_u16();
                self.latency_ms.push((ended - sent).as_secs_f64() * 1000.0);
                e.status = Some(status);
                e.outcome = Outcome::Responded;
                e.response_headers = Some(
                    RESPONSE_HEADERS
                        .iter()
                        .filter_map(|h| {
                            Some((
                                h.to_string(),
                                reply.headers.get(*h)?.to_str().ok()?.to_string(),
                            ))
                        })
                        .collect(),
                );
                e.response_trailers = reply.trailers.as_ref().filter(|t| !t.is_empty()).map(|t| {
                    t.iter()
                        .map(|(k, v)| {
                            (
                                k.as_str().to_string(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            )
                        })
                        .collect()
                });
                e.replayed = reply
                    .headers
                    .get("idempotent-replayed")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
                if reply.status.is_success() {
                    e.resource = resource(&reply.headers, &reply.body);
                    if !e.replayed {
                        e.created = e.resource.clone();
                    }
                }
            }
            Err(err) => {
                *self
                    .errors_by_kind
                    .entry(err.kind.as_str().to_string())
                    .or_insert(0) += 1;
                unanswered(&mut e, err.kind);
            }
        }
        self.entries.push(e);
        if let Some(answers) = &mut self.answers {
            answers.push(result.as_ref().ok().map(Answer::of));
        }
    }
}

/// `e` as an exchange that got no answer, failed as `kind`: how the journal says it ended.
pub(crate) fn unanswered(e: &mut Entry, kind: ErrorKind) {
    e.status = None;
    e.outcome = match kind {
        ErrorKind::Timeout => Outcome::Hung,
        ErrorKind::Reset => Outcome::Reset,
        ErrorKind::Closed | ErrorKind::Malformed | ErrorKind::Protocol => Outcome::Dropped,
        // The server said it did not process the request (RFC 9113 §8.7).
        ErrorKind::Refused => {
            e.rejected = Some("refused-stream".to_string());
            Outcome::Rejected
        }
        // Nothing reached the server, or the client failed: nothing to judge.
        ErrorKind::Connect | ErrorKind::Tls | ErrorKind::Other => Outcome::ClientClosed,
    };
}

/// The start of `body` as one line of text.
fn quote(body: &[u8]) -> String {
    let cut = &body[..body.len().min(ANSWER_TEXT_MAX)];
    let mut out: String = String::from_utf8_lossy(cut)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if body.len() > ANSWER_TEXT_MAX {
        out.push('…');
    }
    out.trim().to_string()
}

/// The resource an answer names: the JSON body's top-level `id`, else its `Location`.
pub(crate) fn resource(headers: &HeaderMap, body: &[u8]) -> Option<String> {
    let id = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| match v.get("id")? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
    id.or_else(|| {
        headers
            .get(http::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    })
}
