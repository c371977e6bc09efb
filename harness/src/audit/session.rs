//! Sending the requests the `openapi` crate built, and making the resources they need.
//!
//! A request whose path names a resource (`DELETE /orders/{id}`) gets a resource made for it
//! just before, by the operations the link plan names as its producers (each sent once, with a
//! fresh key when it takes one); the value is filled in from their answers by the plan, which
//! validates it. A producer that does not answer 2xx means no valid request could be made.
//!
//! A path value that no resource made for the request gave — the parameter's example standing in
//! for a creation whose answer named nothing, or, without any creation, the document's example or
//! a generated value — is named in the row, with where it came from: a verdict is then on a
//! resource the audit did not make, and an API's 404 on it is a request that could not be made,
//! never a verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use checks::exchange::Exchange;
use history::{Entry, ErrorKind, Outcome};
use http::{HeaderMap, HeaderName, HeaderValue};
use openapi::{Api, LinkPlan, Operation, Recorded, Request, RequestBuilder, Source};
use reports::model::AuditedOperation;

use super::config::{AuditConfig, AuditError};
use super::row::{evidence, COULD_NOT_BUILD};
use crate::http::{Conn, Connect, Outgoing, Target};
use crate::metrics::Recorder;
use crate::probe::record::{unanswered, Answer};

/// Producers followed at most this deep (an order needs a customer needs an account…).
const MAX_CHAIN: usize = 6;

/// One exchange of the audit: its journal entry from the client's side (as `harness
/// idempotency` records its own, `probe/record.rs`), beside its answer or why none came.
pub(crate) struct Journaled {
    pub(crate) entry: Entry,
    pub(crate) answer: Result<Answer, String>,
}

impl Journaled {
    /// The exchange as the checks read it.
    pub(crate) fn exchange(&self) -> Exchange<'_> {
        Exchange {
            entry: &self.entry,
            said: match &self.answer {
                Ok(a) => &a.text,
                Err(e) => e,
            },
        }
    }
}

/// The connection settings every request of an audit shares, and the count of what was sent.
pub(crate) struct Session {
    pub(crate) target: Arc<Target>,
    /// `-H` headers: sent with every request.
    pub(crate) extra: Vec<(HeaderName, HeaderValue)>,
    pub(crate) timeout: Duration,
    pub(crate) recorder: Recorder,
    /// When the audit began: the journal's times count from it.
    started: Instant,
    started_unix_ms: u64,
    /// Exchanges numbered so far (the journal's `seq`).
    sent: u64,
}

impl Session {
    /// Checks the `-H` headers once.
    pub(crate) fn new(
        target: Arc<Target>,
        headers: &[(String, String)],
        key_header: &str,
        timeout: Duration,
    ) -> Result<Session, String> {
        let mut extra = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{name:?} is not a header name"))?;
            if n.as_str().eq_ignore_ascii_case(key_header) {
                return Err(format!(
                    "{name} is the key header; the audit sets it per request"
                ));
            }
            if n == http::header::HOST || n == http::header::CONTENT_LENGTH {
                return Err(format!("{name} is set by the audit"));
            }
            let v = HeaderValue::from_str(value)
                .map_err(|_| format!("the value of {name} is not a valid header value"))?;
            extra.push((n, v));
        }
        Ok(Session {
            target,
            extra,
            timeout,
            recorder: Recorder::new(false),
            started: Instant::now(),
            started_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            sent: 0,
        })
    }

    /// A TCP connection to the API can be made (else nothing can be audited).
    pub(crate) async fn reachable(&self) -> Result<(), AuditError> {
        let unreachable = |reason: String| AuditError::Unreachable {
            url: self.target.url.clone(),
            reason,
        };
        match tokio::time::timeout(self.timeout, self.target.connect_tcp()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(unreachable(e.to_string())),
            Err(_) => Err(unreachable(format!(
                "connect timed out after {:?}",
                self.timeout
            ))),
        }
    }

    /// The headers of `req` as sent: its own (its key header, if any, left out), the `-H` ones,
    /// and `key` under `key_name` when given.
    pub(crate) fn headers(
        &self,
        req: &Request,
        key_name: Option<&HeaderName>,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        let mut out = Vec::new();
        for (n, v) in req.headers() {
            let name = HeaderName::from_bytes(n.as_bytes())
                .map_err(|_| format!("{n:?} is not a header name"))?;
            let declared_key = req
                .key_header
                .as_deref()
                .is_some_and(|k| k.eq_ignore_ascii_case(name.as_str()));
            if declared_key || key_name == Some(&name) {
                continue;
            }
            let value = HeaderValue::from_str(&v)
                .map_err(|_| format!("the value of {n} cannot be sent as a header"))?;
            out.push((name, value));
        }
        for (n, v) in &self.extra {
            out.retain(|(o, _)| o != n);
            out.push((n.clone(), v.clone()));
        }
        Ok(out)
    }

    /// `req` ready to send, with `key` in `key_name` when given.
    pub(crate) fn outgoing(
        &self,
        req: &Request,
        key_name: Option<&HeaderName>,
        key: Option<&str>,
    ) -> Result<Outgoing, String> {
        let mut headers = HeaderMap::new();
        for (n, v) in self.headers(req, key_name)? {
            headers.insert(n, v);
        }
        if let (Some(n), Some(k)) = (key_name, key) {
            let v =
                HeaderValue::from_str(k).map_err(|_| format!("key {k:?} is not a header value"))?;
            headers.insert(n.clone(), v);
        }
        Ok(Outgoing {
            method: http::Method::from_bytes(req.method.as_str().as_bytes())
                .map_err(|e| e.to_string())?,
            uri: self.target.path(&req.target()),
            headers,
            body: req
                .body
                .as_ref()
                .map(|b| Bytes::from(b.bytes.clone()))
                .unwrap_or_default(),
        })
    }

    /// Sends one request on its own connection; the answer, or what happened instead.
    pub(crate) async fn send(&mut self, out: Outgoing) -> Result<Answer, String> {
        self.exchange(out, None).await.answer
    }

    /// Sends one request on its own connection and records the exchange as a journal entry,
    /// the resource its answer names read as the operation at `names` reads it.
    pub(crate) async fn exchange(&mut self, out: Outgoing, names: Option<&str>) -> Journaled {
        self.sent += 1;
        let mut entry = Entry::blank(self.sent);
        entry.method = out.method.to_string();
        entry.path = out.uri.split('?').next().unwrap_or(&out.uri).to_string();
        entry.query = out.uri.split_once('?').map(|(_, q)| q.to_string());
        entry.conn_id = entry.seq;
        let mut conn = Conn::new(self.target.clone());
        let t0 = Instant::now();
        let r = conn.send(out, self.timeout).await;
        entry.t_recv_us = t0.saturating_duration_since(self.started).as_micros() as u64;
        entry.t_done_us = self.started.elapsed().as_micros() as u64;
        entry.unix_ms = self.started_unix_ms + entry.t_recv_us / 1000;
        let answer = match r {
            Ok(reply) => {
                self.recorder.latency(t0.elapsed());
                self.recorder.result(Some(reply.status.as_u16()), None);
                let answer = Answer::of(&reply);
                entry.status = Some(answer.status);
                entry.outcome = Outcome::Responded;
                entry.replayed = answer.headers.iter().any(|(n, v)| {
                    n.eq_ignore_ascii_case("idempotent-replayed") && v.trim() == "true"
                });
                entry.resource = names.and_then(|path| named(path, &answer));
                if (200..300).contains(&answer.status) && !entry.replayed {
                    entry.created = entry.resource.clone();
                }
                Ok(answer)
            }
            Err(e) => {
                self.recorder.result(None, Some(e.kind));
                unanswered(&mut entry, e.kind);
                Err(format!("no answer ({}): {}", e.kind.as_str(), e.message))
            }
        };
        Journaled { entry, answer }
    }

    /// Microseconds from the audit's start to `t`: where the journal's time of an exchange
    /// recorded elsewhere (a burst's, from its own start) begins.
    pub(crate) fn since_start(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.started).as_micros() as u64
    }

    /// The next number of the audit's journal, for an exchange sent elsewhere (a burst's).
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.sent += 1;
        self.sent
    }

    /// Counts what a probe sent through its own connections.
    pub(crate) fn absorb(&mut self, exchanges: &[Entry], latency_ms: &[f64]) {
        for e in exchanges {
            let error = match e.outcome {
                _ if e.status.is_some() => None,
                Outcome::Hung => Some(ErrorKind::Timeout),
                Outcome::Reset => Some(ErrorKind::Reset),
                Outcome::Rejected => Some(ErrorKind::Refused),
                Outcome::Dropped => Some(ErrorKind::Closed),
                _ => Some(ErrorKind::Other),
            };
            self.recorder.result(e.status, error);
        }
        for ms in latency_ms {
            self.recorder.latency(Duration::from_secs_f64(ms / 1000.0));
        }
    }
}

/// Fetches the document at `url` (a GET, the `-H` headers sent: a document behind auth).
pub(crate) async fn fetch(
    url: &str,
    connect: &Connect,
    headers: &[(String, String)],
    timeout: Duration,
) -> Result<Vec<u8>, AuditError> {
    let spec_error = |reason: String| AuditError::Spec(format!("{url}: {reason}"));
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| spec_error(e.to_string()))?;
    let origin = format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", |a| a.as_str())
    );
    let mut target = Target::with(&origin, connect).map_err(|e| spec_error(e.to_string()))?;
    target.max_body = openapi::MAX_DOCUMENT_BYTES as u64;
    let mut out_headers = HeaderMap::new();
    for (n, v) in headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            out_headers.insert(n, v);
        }
    }
    out_headers.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("application/json, application/yaml, */*"),
    );
    let out = Outgoing {
        method: http::Method::GET,
        uri: uri
            .path_and_query()
            .map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
        headers: out_headers,
        body: Bytes::new(),
    };
    let reply = Conn::new(Arc::new(target))
        .send(out, timeout)
        .await
        .map_err(|e| AuditError::Unreachable {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
    if !reply.status.is_success() {
        return Err(spec_error(format!("answered {}", reply.status.as_u16())));
    }
    Ok(reply.body.to_vec())
}

/// The audit's state while it goes through the operations.
pub(crate) struct Auditor<'a> {
    pub(crate) api: &'a Api,
    pub(crate) plan: &'a LinkPlan,
    pub(crate) builder: RequestBuilder<'a>,
    pub(crate) session: Session,
    pub(crate) cfg: &'a AuditConfig,
    pub(crate) nonce: u64,
    keys: u64,
}

/// A request made for an operation: what was built, and where its key goes.
pub(crate) struct Prepared {
    pub(crate) request: Request,
    /// The key header and where it comes from (`declared, required`, `declared`, `forced`).
    pub(crate) key: Option<(String, &'static str)>,
}

impl<'a> Auditor<'a> {
    pub(crate) fn new(
        api: &'a Api,
        plan: &'a LinkPlan,
        builder: RequestBuilder<'a>,
        session: Session,
        cfg: &'a AuditConfig,
        nonce: u64,
    ) -> Auditor<'a> {
        Auditor {
            api,
            plan,
            builder,
            session,
            cfg,
            nonce,
            keys: 0,
        }
    }

    /// What was sent, counted.
    pub(crate) fn into_recorder(self) -> Recorder {
        self.session.recorder
    }

    /// A key no request of this audit used before.
    pub(crate) fn fresh_key(&mut self) -> String {
        self.keys += 1;
        format!("audit-{:016x}-{}", self.nonce, self.keys)
    }

    /// A request for `op`, with the resources it names made for it first.
    pub(crate) async fn prepare(&mut self, op: &Operation) -> Result<Request, String> {
        let chain = chain(self.plan, &op.id)?;
        let mut made: BTreeMap<String, (Request, Answer)> = BTreeMap::new();
        for id in chain {
            let producer = self
                .api
                .operation(&id)
                .ok_or_else(|| format!("the plan names {id}, which the document lacks"))?;
            let request = self.build(producer, &made)?;
            let key = self.cfg.key_of(producer);
            let key_name = match &key {
                Some((n, _)) => Some(
                    HeaderName::from_bytes(n.as_bytes())
                        .map_err(|_| format!("{n:?} is not a header name"))?,
                ),
                None => None,
            };
            let k = self.fresh_key();
            let out = self
                .session
                .outgoing(&request, key_name.as_ref(), Some(&k))?;
            let label = producer.label();
            let answer = self
                .session
                .send(out)
                .await
                .map_err(|e| format!("{label}, to make the resource: {e}"))?;
            if !(200..300).contains(&answer.status) {
                return Err(format!(
                    "{label}, to make the resource, answered {}{}",
                    answer.status,
                    quoted(&answer)
                ));
            }
            made.insert(id, (request, answer));
        }
        self.build(op, &made)
    }

    /// `op`'s request built and filled from its producers' answers in `made`.
    fn build(
        &mut self,
        op: &Operation,
        made: &BTreeMap<String, (Request, Answer)>,
    ) -> Result<Request, String> {
        let plan = self.plan;
        let mut request = self.builder.build(op).map_err(|u| u.to_string())?;
        for producer in plan.producers_of(&op.id) {
            let Some((preq, answer)) = made.get(producer) else {
                return Err(format!("{} needs {producer}'s answer", op.id));
            };
            let recorded = recorded(Some(preq), answer);
            plan.fill(&mut self.builder, &mut request, producer, &recorded)
                .map_err(|e| e.to_string())?;
        }
        Ok(request)
    }

    /// The document's GET of the resource `sent` touched, as its `answer` names it; `Ok(None)`
    /// when the document has no such GET.
    pub(crate) async fn look(
        &mut self,
        sent: &Request,
        answer: &Answer,
    ) -> Result<Option<(String, Journaled)>, String> {
        let recorded = recorded(Some(sent), answer);
        let get = self
            .plan
            .verification_request(&mut self.builder, sent, &recorded)
            .map_err(|e| e.to_string())?;
        let Some(get) = get else {
            return Ok(None);
        };
        let label = format!("GET {}", get.target());
        let out = self.session.outgoing(&get, None, None)?;
        Ok(Some((label, self.session.exchange(out, None).await)))
    }

    /// The step every probe starts with: `request` shown in the row as it is sent, then sent
    /// once as it was built, with `key` under its header when the probe takes one (the
    /// baseline). The request as sent, its journal entry and its answer; or, when the request cannot be sent, gets
    /// no answer, is refused or fails, why nothing can be judged (the row is then left
    /// inconclusive with it).
    pub(crate) async fn baseline(
        &mut self,
        op: &Operation,
        row: &mut AuditedOperation,
        request: &Request,
        key: Option<(&HeaderName, &str)>,
    ) -> Result<(Outgoing, Entry, Answer), String> {
        row.request = Some(String::from_utf8_lossy(&request.to_http()).into_owned());
        let out = self
            .session
            .outgoing(request, key.map(|(n, _)| n), key.map(|(_, k)| k))
            .map_err(|e| format!("{COULD_NOT_BUILD}: {e}"))?;
        let Journaled { entry, answer } = self.session.exchange(out.clone(), Some(&op.path)).await;
        if let Some(why) = baseline_stops(&op.label(), &answer) {
            return Err(why);
        }
        answer.map(|a| (out, entry, a))
    }
}

/// The producers `id` needs, each once, every producer before what needs it.
pub(crate) fn chain(plan: &LinkPlan, id: &str) -> Result<Vec<String>, String> {
    fn visit(
        plan: &LinkPlan,
        id: &str,
        depth: usize,
        on_path: &mut BTreeSet<String>,
        out: &mut Vec<String>,
    ) -> Result<(), String> {
        if depth > MAX_CHAIN {
            return Err(format!(
                "{id} needs resources more than {MAX_CHAIN} creations deep"
            ));
        }
        for p in plan.producers_of(id) {
            if out.iter().any(|o| o == p) || on_path.contains(p) {
                continue;
            }
            on_path.insert(p.to_string());
            visit(plan, p, depth + 1, on_path, out)?;
            on_path.remove(p);
            out.push(p.to_string());
        }
        Ok(())
    }
    let mut out = Vec::new();
    let mut on_path = BTreeSet::from([id.to_string()]);
    visit(plan, id, 0, &mut on_path, &mut out)?;
    Ok(out)
}

/// A path value of a request that names no resource made for it.
pub(crate) struct Unmade {
    /// Where the value came from, as the row's summary says it.
    pub(crate) said: String,
    /// The same with where the document writes it and why no made resource gave it.
    pub(crate) detail: String,
    /// The document's example or default, used because the creation's answer named nothing:
    /// any verdict is on a resource this audit did not make.
    pub(crate) declared: bool,
}

/// The path values of `request` that no resource made for it gave: the document's example used
/// when the creation's answer named nothing, or a value the builder took from the document or
/// generated because no operation makes the resource.
pub(crate) fn unmade(request: &Request) -> Vec<Unmade> {
    request
        .parameters
        .iter()
        .filter(|p| p.location == openapi::Location::Path)
        .filter_map(|p| {
            let value = p.value.to_string();
            let name = &p.name;
            let not_made = "not a resource made for this request";
            Some(match &p.source {
                Source::Linked { .. } => return None,
                Source::Declared {
                    what, pointer, why, ..
                } => {
                    let said = format!("`{name}` = {value} is {what}, {not_made}");
                    Unmade {
                        detail: format!("{said} (the document's value at {pointer}; {why})"),
                        said: format!("{said}: {why}"),
                        declared: true,
                    }
                }
                Source::Example(pointer) => {
                    let said = format!("`{name}` = {value} is the document's example, {not_made}");
                    Unmade {
                        detail: format!("{said} (at {pointer})"),
                        said,
                        declared: false,
                    }
                }
                Source::Generated { .. } => {
                    let said =
                        format!("`{name}` = {value} was generated from its schema, {not_made}");
                    Unmade {
                        detail: said.clone(),
                        said,
                        declared: false,
                    }
                }
                Source::Unconstrained => {
                    let said = format!(
                        "`{name}` = {value} is a placeholder (the document gives it no schema), \
                         {not_made}"
                    );
                    Unmade {
                        detail: said.clone(),
                        said,
                        declared: false,
                    }
                }
            })
        })
        .collect()
}

/// `row` with where its path values came from, when a resource made for it did not give them:
/// every such value when no valid request could be made (a 404 on an example's id is the
/// document's example, not a verdict), the document's examples that stood in for a creation's
/// answer on any other row.
pub(crate) fn said_where_from(mut row: AuditedOperation, origins: &[Unmade]) -> AuditedOperation {
    let refused = row.summary.starts_with(COULD_NOT_BUILD);
    let told: Vec<&Unmade> = origins.iter().filter(|u| refused || u.declared).collect();
    if told.is_empty() {
        return row;
    }
    let said: Vec<&str> = told.iter().map(|u| u.said.as_str()).collect();
    row.summary = format!("{} ({})", row.summary, said.join("; "));
    for u in told {
        row.evidence.push(evidence(u.detail.clone()));
    }
    row
}

/// What was recorded of an exchange, as the link plan reads it.
pub(crate) fn recorded<'r>(request: Option<&'r Request>, answer: &'r Answer) -> Recorded<'r> {
    Recorded {
        request,
        status: answer.status,
        headers: &answer.headers,
        body: answer.body.as_ref(),
    }
}

/// `: "…"` with the start of the answer's body, or nothing when it had none.
pub(crate) fn quoted(answer: &Answer) -> String {
    if answer.text.is_empty() {
        String::new()
    } else {
        format!(": {:?}", answer.text)
    }
}

/// The resource an answer of the operation at `path` names: its JSON field named as the plan
/// reads a created resource's (`id`, `{name}_id`, the path parameter's name; `data.id`), else
/// its `Location`.
pub(crate) fn named(path: &str, answer: &Answer) -> Option<String> {
    let id = answer
        .body
        .as_ref()
        .and_then(|b| openapi::resource_field(path, b))
        .map(|(_, v)| match v {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        });
    id.or_else(|| {
        answer
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("location"))
            .map(|(_, v)| v.clone())
    })
}

/// Why a baseline answer stops the probe before any verdict: no answer, a refusal (the request
/// was not valid for this API), or a failure of the API on a valid request.
pub(crate) fn baseline_stops(label: &str, answer: &Result<Answer, String>) -> Option<String> {
    match answer {
        Err(e) => Some(format!("the baseline {label} got {e}")),
        Ok(a) if (400..500).contains(&a.status) => Some(format!(
            "{COULD_NOT_BUILD}: the API answered the baseline {label} with {}{}",
            a.status,
            quoted(a)
        )),
        Ok(a) if !(200..300).contains(&a.status) => Some(format!(
            "the API answered the baseline {label} with {}{}: nothing to judge its repeats against",
            a.status,
            quoted(a)
        )),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::row::{inconclusive, row};
    use reports::model::ProbeKind;

    fn answer(status: u16, body: &str, headers: &[(&str, &str)]) -> Answer {
        Answer {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: serde_json::from_str(body).ok(),
            text: body.to_string(),
        }
    }

    #[test]
    fn the_resource_is_the_id_then_data_id_then_the_location() {
        let named = |a: &Answer| named("/orders", a);
        assert_eq!(
            named(&answer(201, r#"{"id":"o1"}"#, &[])).as_deref(),
            Some("o1")
        );
        assert_eq!(
            named(&answer(201, r#"{"id":7}"#, &[])).as_deref(),
            Some("7")
        );
        assert_eq!(
            named(&answer(201, r#"{"data":{"id":"d"}}"#, &[])).as_deref(),
            Some("d")
        );
        assert_eq!(
            named(&answer(201, "", &[("Location", "/orders/9")])).as_deref(),
            Some("/orders/9")
        );
        assert_eq!(named(&answer(204, "", &[])), None);
    }

    #[test]
    fn the_resource_is_read_by_the_names_of_its_path() {
        let transfer = answer(201, r#"{"transfer_id":"tr-1","status":"pending"}"#, &[]);
        assert_eq!(named("/transfers", &transfer).as_deref(), Some("tr-1"));
        let account = answer(200, r#"{"id":"acc-2","accountId":"acc-1"}"#, &[]);
        assert_eq!(
            named("/accounts/{account_id}", &account).as_deref(),
            Some("acc-1"),
            "the path parameter's own name before a bare id"
        );
        assert_eq!(named("/accounts", &account).as_deref(), Some("acc-2"));
    }

    #[test]
    fn a_refused_baseline_is_a_request_that_could_not_be_built_never_a_verdict() {
        let refused = baseline_stops("POST /orders", &Ok(answer(400, "sku is required", &[])))
            .expect("stops");
        assert!(refused.starts_with(COULD_NOT_BUILD), "{refused}");
        assert!(
            refused.contains("400") && refused.contains("sku is required"),
            "{refused}"
        );
        let failed = baseline_stops("POST /orders", &Ok(answer(503, "", &[]))).expect("stops");
        assert!(!failed.starts_with(COULD_NOT_BUILD), "{failed}");
        assert!(baseline_stops("x", &Err("no answer (reset)".into())).is_some());
        assert_eq!(baseline_stops("x", &Ok(answer(201, "{}", &[]))), None);
    }

    #[test]
    fn a_row_names_the_values_no_made_resource_gave() {
        let origins = [
            Unmade {
                said: "`id` = \"wh-1\" is the parameter's example".into(),
                detail: "at /paths/…".into(),
                declared: true,
            },
            Unmade {
                said: "`n` = \"x\" was generated from its schema".into(),
                detail: "generated".into(),
                declared: false,
            },
        ];
        let op = openapi::Api::from_bytes(
            br#"{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/w/{id}":{
              "delete":{"operationId":"d","parameters":[{"name":"id","in":"path","required":true,
              "schema":{"type":"string"}}],"responses":{"204":{"description":"ok"}}}}}}"#,
            "t",
            &openapi::Config::default(),
        )
        .unwrap();
        let op = op.operation("d").unwrap();
        let mut judged = row(op, ProbeKind::Repeat, None);
        judged.summary = "a repeated DELETE answered 404×2".into();
        let judged = said_where_from(judged, &origins);
        assert_eq!(
            judged.summary,
            "a repeated DELETE answered 404×2 (`id` = \"wh-1\" is the parameter's example)",
            "a verdict names the example it was given on, not a generated value a PUT may name"
        );
        assert_eq!(judged.evidence.len(), 1);
        let refused = inconclusive(
            row(op, ProbeKind::Repeat, None),
            format!("{COULD_NOT_BUILD}: the API answered the baseline DELETE /w/{{id}} with 404"),
        );
        let refused = said_where_from(refused, &origins);
        assert!(
            refused.summary.ends_with(
                "with 404 (`id` = \"wh-1\" is the parameter's example; `n` = \"x\" was \
                 generated from its schema)"
            ),
            "{}",
            refused.summary
        );
    }
}
