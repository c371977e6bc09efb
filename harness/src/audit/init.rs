//! `harness init --from-openapi SPEC`: a commented scenario file per unsafe operation, for a team
//! that wants one operation's probe kept in CI as an ordinary `harness run`.
//!
//! Why scenarios, and why these: an audit is a look at a whole API today; a scenario is a file a
//! team reviews, edits and runs on every change. Each file runs the audit's probe of its
//! operation through the machinery every scenario has. The embedded fault server stands in
//! front of the API as a proxy (`server.upstream`): it forwards each request, and journals the
//! resource each answer made (`created_from`), so `duplicates` counts the API's own resources;
//! a `drop` rule forwards a request and then loses the answer, which is the lost response of the
//! retry probe. The requests are the audit's (the same builder and seed: examples first, else
//! values generated from the schemas and validated against them). A resource a path names is
//! made by an earlier phase whose answer is captured (`capture`, then `{{var.NAME}}`), as the
//! audit makes one just before the request. Every file is read back through the scenario
//! loader before it is written, so a file that is written is one `harness run` accepts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use openapi::{Api, LinkPlan, Location, Method, Operation, Request, RequestBuilder, ValueSource};
use reports::model::ProbeKind;
use serde_json::Value;

use super::session::chain;
use super::{kind, load, selected, AuditConfig, AuditError, Selector};

/// Marks an unkeyed request and its retry as one operation, so `duplicates` can count what the
/// two made together; the API has no reason to read it.
const OPERATION_HEADER: &str = "X-Harness-Operation";

/// Where the API is assumed to listen when neither `--base` nor the document says.
const PLACEHOLDER_BASE: &str = "http://127.0.0.1:8080";

/// One scenario file written.
#[derive(Debug, Clone)]
pub struct Written {
    /// The file.
    pub path: PathBuf,
    /// `POST /orders (createOrder)`.
    pub label: String,
    /// The probe the file runs.
    pub probe: ProbeKind,
}

/// What `init` did: the files written, and the operations it could not write, with why.
#[derive(Debug, Default)]
pub struct InitOutcome {
    /// The files, in the link plan's order.
    pub written: Vec<Written>,
    /// `(operation, why)` for each unsafe operation that got no file.
    pub skipped: Vec<(String, String)>,
    /// The upstream URL written into every file.
    pub upstream: String,
}

/// Writes a scenario per selected unsafe operation of `cfg.spec` into `out` (created when
/// missing). `cfg.base`, when not empty, is the API the scenarios put the fault server in front
/// of; else the document's first server. Refuses to replace a file unless `force`.
pub async fn init(cfg: &AuditConfig, out: &Path, force: bool) -> Result<InitOutcome, AuditError> {
    let invalid = |field, reason: String| AuditError::InvalidConfig { field, reason };
    if !(1..=super::MAX_ROUNDS).contains(&cfg.rounds) {
        return Err(invalid(
            "rounds",
            format!("give 1 to {}", super::MAX_ROUNDS),
        ));
    }
    if !(1..=super::MAX_CONCURRENCY).contains(&cfg.concurrency) {
        return Err(invalid(
            "concurrency",
            format!("give 1 to {}", super::MAX_CONCURRENCY),
        ));
    }
    let api = load(cfg).await?;
    let upstream = upstream(cfg, &api)?;
    let only: Vec<Selector> = cfg.only.iter().map(|s| Selector::parse(s)).collect();
    let skip: Vec<Selector> = cfg.skip.iter().map(|s| Selector::parse(s)).collect();
    let plan = LinkPlan::new(&api);
    let chosen: Vec<&Operation> = plan
        .order()
        .iter()
        .filter_map(|id| api.operation(id))
        .filter(|op| selected(op, &only, &skip))
        .collect();
    if chosen.is_empty() {
        return Err(invalid(
            "only",
            format!(
                "no operation to write: the document has {} unsafe operation(s) and --only/--skip \
                 left none",
                api.unsafe_operations().count()
            ),
        ));
    }
    std::fs::create_dir_all(out).map_err(|e| AuditError::Write {
        path: out.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut outcome = InitOutcome {
        upstream: upstream.clone(),
        ..InitOutcome::default()
    };
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for op in chosen {
        let writer = Writer {
            api: &api,
            plan: &plan,
            cfg,
            upstream: &upstream,
        };
        let text = match writer.scenario(op) {
            Ok(t) => t,
            Err(why) => {
                outcome.skipped.push((label(op), why));
                continue;
            }
        };
        let path = out.join(file_name(&op.id, &mut names));
        if let Err(e) =
            crate::scenario::load_str(&text, &path, &crate::scenario::Overrides::default())
        {
            outcome.skipped.push((
                label(op),
                format!("the scenario written for it does not load: {e}"),
            ));
            continue;
        }
        if path.exists() && !force {
            return Err(invalid(
                "out",
                format!(
                    "{} exists; remove it, choose another --out, or pass --force to replace it",
                    path.display()
                ),
            ));
        }
        std::fs::write(&path, text).map_err(|e| AuditError::Write {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        outcome.written.push(Written {
            path,
            label: label(op),
            probe: kind(op.method, cfg.key_of(op).is_some()),
        });
    }
    Ok(outcome)
}

/// `POST /orders (createOrder)`.
fn label(op: &Operation) -> String {
    format!("{} ({})", op.label(), op.id)
}

/// The API the scenarios forward to: `--base`, else the document's first server (a relative one
/// below [`PLACEHOLDER_BASE`]).
fn upstream(cfg: &AuditConfig, api: &Api) -> Result<String, AuditError> {
    let url = if !cfg.base.is_empty() {
        cfg.base.clone()
    } else {
        match api.servers().first() {
            Some(s) if s.starts_with("http://") || s.starts_with("https://") => s.clone(),
            Some(s) if s.starts_with('/') => format!("{PLACEHOLDER_BASE}{s}"),
            _ => PLACEHOLDER_BASE.to_string(),
        }
    };
    let url = url.trim_end_matches('/').to_string();
    fault_server::config::UpstreamUrl::parse(&url).map_err(|reason| AuditError::InvalidConfig {
        field: "base",
        reason: format!("{reason} (give the API's URL with --base)"),
    })?;
    Ok(url)
}

/// A file name for operation `id`: its characters that are safe in a file name, unique in `out`.
fn file_name(id: &str, taken: &mut BTreeMap<String, usize>) -> String {
    let mut stem: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if stem.is_empty() {
        stem = "operation".into();
    }
    let n = taken.entry(stem.clone()).or_insert(0);
    *n += 1;
    if *n > 1 {
        stem = format!("{stem}-{n}");
    }
    format!("{stem}.yaml")
}

/// Writes one operation's scenario.
struct Writer<'a> {
    api: &'a Api,
    plan: &'a LinkPlan,
    cfg: &'a AuditConfig,
    upstream: &'a str,
}

/// A request as a scenario phase writes it, its resource parameters already placeholders.
struct Phase {
    /// The operation a producer's phase runs (its answer is captured).
    producer: Option<String>,
    name: String,
    why: String,
    executor: String,
    request: String,
    capture: Vec<(String, String)>,
}

/// Stands in for a captured value while the request is rendered: letters and digits only, so
/// no encoding changes it, and then replaced by `{{var.NAME}}`.
fn sentinel(i: usize) -> String {
    format!("HARNESSVAR{i}X")
}

impl Writer<'_> {
    /// The scenario text for `op`, or why none can be written.
    fn scenario(&self, op: &Operation) -> Result<String, String> {
        let mut builder =
            RequestBuilder::new(self.api, self.cfg.seed).map_err(|e| e.to_string())?;
        let producers = chain(self.plan, &op.id)?;
        // Each producer's phase, and what later phases capture from it.
        let mut phases: Vec<Phase> = Vec::new();
        let mut built: BTreeMap<String, Request> = BTreeMap::new();
        let mut captures: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        let mut vars: Vec<String> = Vec::new();
        for id in &producers {
            let p = self
                .api
                .operation(id)
                .ok_or_else(|| format!("the plan names {id}, which the document lacks"))?;
            let (request, text) =
                self.request(&mut builder, p, &built, &mut captures, &mut vars)?;
            built.insert(id.clone(), request);
            phases.push(Phase {
                producer: Some(id.clone()),
                name: format!("make-{}", phase_name(id)),
                why: format!("makes the resource {} names ({})", op.id, p.label()),
                executor: "burst: { size: 1, rounds: 1 }".into(),
                request: text,
                capture: Vec::new(),
            });
        }
        let (_, text) = self.request(&mut builder, op, &built, &mut captures, &mut vars)?;
        for ph in &mut phases {
            if let Some(c) = ph.producer.as_ref().and_then(|id| captures.get(id)) {
                ph.capture = c.clone();
            }
        }
        let key = self.cfg.key_of(op);
        let probe = kind(op.method, key.is_some());
        let (c, r) = (self.cfg.concurrency, self.cfg.rounds);
        match probe {
            ProbeKind::Keyed => phases.push(Phase {
                producer: None,
                name: phase_name(&op.id),
                why: format!("{r} bursts of {c} requests, the requests of a burst sharing one key"),
                executor: format!("burst: {{ size: {c}, rounds: {r}, pause: 10ms }}"),
                request: text,
                capture: Vec::new(),
            }),
            ProbeKind::LostResponse => phases.push(Phase {
                producer: None,
                name: phase_name(&op.id),
                why: "one request; its answer is lost and the client retries it".into(),
                executor: "burst: { size: 1, rounds: 1 }".into(),
                request: text,
                capture: Vec::new(),
            }),
            _ => {
                phases.push(Phase {
                    producer: None,
                    name: format!("{}-repeated", phase_name(&op.id)),
                    why: "the request three times, one after the other".into(),
                    executor: "burst: { size: 1, rounds: 3 }".into(),
                    request: text.clone(),
                    capture: Vec::new(),
                });
                phases.push(Phase {
                    producer: None,
                    name: format!("{}-concurrent", phase_name(&op.id)),
                    why: format!("{c} copies of it at once"),
                    executor: format!("burst: {{ size: {c}, rounds: 1 }}"),
                    request: text,
                    capture: Vec::new(),
                });
            }
        }
        Ok(self.file(op, probe, key.as_ref(), &phases))
    }

    /// `op`'s request as a phase writes it: built as the audit builds it, the parameters its
    /// producers feed made placeholders (and the captures that fill them noted in `captures`).
    fn request(
        &self,
        builder: &mut RequestBuilder<'_>,
        op: &Operation,
        built: &BTreeMap<String, Request>,
        captures: &mut BTreeMap<String, Vec<(String, String)>>,
        vars: &mut Vec<String>,
    ) -> Result<(Request, String), String> {
        let mut request = builder.build(op).map_err(|u| u.to_string())?;
        let mut replace: Vec<(String, String)> = Vec::new();
        for b in self.plan.bindings_for(&op.id) {
            let Some(produced) = built.get(&b.producer) else {
                return Err(format!("{} needs {}'s answer", op.id, b.producer));
            };
            match source_of(&b.sources, produced) {
                Some(Fill::Capture(path)) => {
                    let name = var_name(&b.producer, &b.parameter, vars);
                    let s = sentinel(vars.len());
                    vars.push(name.clone());
                    request.set_param(
                        b.location,
                        &b.parameter,
                        Value::String(s.clone()),
                        openapi::Source::Linked {
                            operation_id: b.producer.clone(),
                            how: format!("captured as {name}"),
                        },
                    );
                    captures
                        .entry(b.producer.clone())
                        .or_default()
                        .push((name.clone(), path));
                    replace.push((s, format!("{{{{var.{name}}}}}")));
                }
                Some(Fill::Literal(v)) => {
                    request.set_param(
                        b.location,
                        &b.parameter,
                        v,
                        openapi::Source::Linked {
                            operation_id: b.producer.clone(),
                            how: "the producer's request".into(),
                        },
                    );
                }
                None => {
                    let looked: Vec<String> = b
                        .sources
                        .iter()
                        .filter(|s| !s.is_declared())
                        .map(|s| s.to_string())
                        .collect();
                    return Err(format!(
                        "its `{}` comes from {}'s {}, which a scenario cannot capture (it keeps \
                         a field the document names in a JSON answer)",
                        b.parameter,
                        b.producer,
                        looked.join(" or ")
                    ));
                }
            }
        }
        let text = self.request_text(op, &request, &replace)?;
        Ok((request, text))
    }

    /// The `request:` block, placeholders in place.
    fn request_text(
        &self,
        op: &Operation,
        request: &Request,
        replace: &[(String, String)],
    ) -> Result<String, String> {
        let key = self.cfg.key_of(op);
        let mut headers: Vec<(String, String)> = request
            .headers()
            .into_iter()
            .filter(|(k, _)| !key.as_ref().is_some_and(|(n, _)| n.eq_ignore_ascii_case(k)))
            .collect();
        let json_body = request
            .body
            .as_ref()
            .filter(|b| openapi::operation::is_json(&b.content_type));
        if json_body.is_some_and(|b| b.content_type.eq_ignore_ascii_case("application/json")) {
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case("content-type"));
        }
        let mut parts: Vec<String> = vec![request.target()];
        parts.extend(headers.iter().flat_map(|(k, v)| [k.clone(), v.clone()]));
        let body = match (&request.body, json_body) {
            (None, _) => None,
            (Some(_), Some(b)) => Some(format!("json: {}", flow(&b.value))),
            (Some(b), None) => {
                let text = std::str::from_utf8(&b.bytes).map_err(|_| {
                    format!(
                        "its {} body is not UTF-8 text, which a scenario's `body` is",
                        b.content_type
                    )
                })?;
                Some(format!("body: {}", quote(text)))
            }
        };
        if let Some(b) = &body {
            parts.push(b.clone());
        }
        if parts.iter().any(|p| p.contains("{{")) {
            return Err(
                "its request holds `{{`, which a scenario would read as a placeholder".into(),
            );
        }
        let mut out = String::new();
        let _ = writeln!(out, "      method: {}", request.method);
        let _ = writeln!(out, "      path: {}", quote(&request.target()));
        let mut hs: Vec<String> = Vec::new();
        if let Some((name, _)) = &key {
            hs.push(format!("{}: \"{{{{key}}}}\"", quote(name)));
        } else if matches!(op.method, Method::Post | Method::Patch) {
            hs.push(format!("{}: \"{{{{key}}}}\"", quote(OPERATION_HEADER)));
        }
        hs.extend(
            headers
                .iter()
                .map(|(k, v)| format!("{}: {}", quote(k), quote(v))),
        );
        if !hs.is_empty() {
            let _ = writeln!(out, "      headers: {{ {} }}", hs.join(", "));
        }
        if let Some(b) = body {
            let _ = writeln!(out, "      {b}");
        }
        for (s, placeholder) in replace {
            if !out.contains(s.as_str()) {
                return Err(format!(
                    "a resource parameter of it could not be written as {placeholder}"
                ));
            }
            out = out.replace(s.as_str(), placeholder);
        }
        Ok(out)
    }

    /// The whole file.
    fn file(
        &self,
        op: &Operation,
        probe: ProbeKind,
        key: Option<&(String, &'static str)>,
        phases: &[Phase],
    ) -> String {
        let mut f = String::new();
        let spec = &self.cfg.spec;
        let title = op.summary.as_deref().unwrap_or("").trim();
        let _ = writeln!(
            f,
            "# {} — {}{}",
            op.id,
            op.label(),
            if title.is_empty() {
                String::new()
            } else {
                format!(": {}", one_line(title))
            }
        );
        let _ = writeln!(f, "#");
        let _ = writeln!(
            f,
            "# Written by `harness init --from-openapi {spec}` (seed {}). The requests are the ones",
            self.cfg.seed
        );
        let _ = writeln!(
            f,
            "# `harness audit` builds from the document: its examples first, else values generated"
        );
        let _ = writeln!(
            f,
            "# from its schemas and checked against them. The embedded fault server forwards every"
        );
        let _ = writeln!(
            f,
            "# request to the API (`server.upstream`) and journals the resource each answer made"
        );
        let _ = writeln!(
            f,
            "# (`created_from`), so the checks judge the API's own resources."
        );
        let _ = writeln!(f, "#");
        let shows: &[&str] = match probe {
            ProbeKind::Keyed => &[
                "# Shows: the operation takes an idempotency key (`KEY`). Bursts of requests that",
                "# share one key are released together: each key must make one resource (`duplicates`)",
                "# and the answers must keep the key's promises (`idempotency_semantics`: one success,",
                "# the others 409 while it is in flight or its replay after).",
            ],
            ProbeKind::LostResponse => &[
                "# Shows: the operation takes no idempotency key. Its first request is forwarded and",
                "# processed, and then its answer is lost (`drop`); the client retries, as any client",
                "# does after a lost response. `duplicates` fails when the retry made a second",
                "# resource: the operation is not safe to retry.",
            ],
            _ => &[
                "# Shows: RFC 9110 makes PUT and DELETE idempotent. The request is repeated, then sent",
                "# concurrently; `thresholds` fails when any of them was answered 5xx or not at all (a",
                "# repeated DELETE may answer 404).",
            ],
        };
        for line in shows {
            let line = match key {
                Some((name, how)) => line.replace("KEY", &format!("{name}, {how}")),
                None => line.to_string(),
            };
            let _ = writeln!(f, "{line}");
        }
        let _ = writeln!(f, "#");
        let _ = writeln!(
            f,
            "# Run:      harness run {}.yaml --upstream {}",
            phase_stem(&op.id),
            self.upstream
        );
        let expected = match probe {
            ProbeKind::Keyed => "PASS (exit 0) when each key makes one resource; FAIL (exit 1) naming the keys that made more.",
            ProbeKind::LostResponse => "PASS (exit 0) when the retry makes no second resource; FAIL (exit 1) when it does.",
            _ => "PASS (exit 0) when no repeat is answered 5xx or left unanswered; FAIL (exit 1) otherwise.",
        };
        let _ = writeln!(f, "# Expected: {expected}");
        let auth = op.security.headers();
        if !auth.is_empty() {
            let _ = writeln!(
                f,
                "# The API asks for credentials ({}): add them to each request's `headers`.",
                auth.join(", ")
            );
        }
        let _ = writeln!(f, "name: {}", quote(&op.id));
        let _ = writeln!(f, "seed: {}", self.cfg.seed);
        let _ = writeln!(f, "server:");
        let _ = writeln!(f, "  upstream:");
        let _ = writeln!(f, "    url: {}", quote(self.upstream));
        let (statuses, pointer) = self.created_from(op);
        let _ = writeln!(
            f,
            "    # Answers with these statuses made the resource whose id is at `json`."
        );
        let _ = writeln!(
            f,
            "    created_from: {{ status: [{}], json: {} }}",
            statuses
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            quote(&pointer)
        );
        let glob = glob(&op.path);
        if probe == ProbeKind::LostResponse {
            let _ = writeln!(
                f,
                "  # {OPERATION_HEADER} marks the request and its retry as one operation."
            );
            let _ = writeln!(
                f,
                "  capture_headers: [{}]",
                OPERATION_HEADER.to_ascii_lowercase()
            );
            let _ = writeln!(f, "  rules:");
            let _ = writeln!(f, "    - id: lose-the-first-answer");
            let _ = writeln!(
                f,
                "      match: {{ method: {}, path: {}, requests: \"1\" }}",
                op.method,
                quote(&glob)
            );
            let _ = writeln!(f, "      fault: drop");
        }
        let _ = writeln!(f, "client:");
        match probe {
            ProbeKind::LostResponse => {
                let _ = writeln!(f, "  max_attempts: 2");
                let _ = writeln!(f, "  timeout: 10s");
                let _ = writeln!(f, "  backoff: {{ kind: fixed, base: 100ms }}");
            }
            _ => {
                let _ = writeln!(
                    f,
                    "  max_attempts: 1      # every answer is the API's first"
                );
                let _ = writeln!(f, "  timeout: 10s");
            }
        }
        let _ = writeln!(f, "phases:");
        for p in phases {
            let _ = writeln!(f, "  # {}", p.why);
            let _ = writeln!(f, "  - name: {}", quote(&p.name));
            let _ = writeln!(f, "    {}", p.executor);
            let _ = writeln!(f, "    request:");
            f.push_str(&p.request);
            if !p.capture.is_empty() {
                let c: Vec<String> = p
                    .capture
                    .iter()
                    .map(|(n, path)| format!("{n}: {}", quote(path)))
                    .collect();
                let _ = writeln!(f, "    capture: {{ {} }}", c.join(", "));
            }
        }
        let _ = writeln!(f, "checks:");
        match probe {
            ProbeKind::Keyed => {
                let custom = key
                    .filter(|(n, _)| !n.eq_ignore_ascii_case(openapi::DEFAULT_KEY_HEADER))
                    .map(|(n, _)| n.to_ascii_lowercase());
                match custom {
                    Some(n) => {
                        let _ = writeln!(f, "  grouping: {{ header: {} }}", quote(&n));
                        let _ = writeln!(f, "  duplicates: {{ key_header: {} }}", quote(&n));
                    }
                    None => {
                        let _ = writeln!(f, "  duplicates: {{}}");
                    }
                }
                let _ = writeln!(f, "  idempotency_semantics: {{}}");
            }
            ProbeKind::LostResponse => {
                let _ = writeln!(
                    f,
                    "  duplicates: {{ key_header: {} }}",
                    OPERATION_HEADER.to_ascii_lowercase()
                );
            }
            _ => {
                let _ = writeln!(f, "  thresholds: {{ rules: [\"error_rate < 0.1%\"] }}");
            }
        }
        f
    }

    /// Which answers of `op` made a resource, and where its id is: a 201 when the document
    /// declares one (a 200 is then a replay), else every declared 2xx; the id where the link
    /// plan reads it, else `/id`.
    fn created_from(&self, op: &Operation) -> (Vec<u16>, String) {
        let declared: Vec<u16> = op
            .responses
            .iter()
            .filter_map(|r| r.status.parse::<u16>().ok())
            .filter(|s| (200..300).contains(s))
            .collect();
        let statuses = if declared.contains(&201) {
            vec![201]
        } else if declared.is_empty() {
            vec![200, 201]
        } else {
            declared
        };
        let pointer = self
            .plan
            .bindings()
            .iter()
            .filter(|b| b.producer == op.id)
            .flat_map(|b| b.sources.iter())
            .find_map(|s| match s {
                ValueSource::BodyField(p) => Some(p.clone()),
                _ => None,
            })
            .unwrap_or_else(|| "/id".to_string());
        (statuses, pointer)
    }
}

/// How a bound parameter is written.
enum Fill {
    /// Captured from the producer's answer: the field's dotted path.
    Capture(String),
    /// Known when the file is written: the producer's own request says it.
    Literal(Value),
}

/// The first source a scenario can express: a field of the JSON answer (captured), or a value
/// of the producer's own request (written as it is).
fn source_of(sources: &[ValueSource], produced: &Request) -> Option<Fill> {
    sources.iter().find_map(|s| match s {
        ValueSource::BodyField(p) => dotted(p).map(Fill::Capture),
        ValueSource::Link { expression, .. } => match expression {
            openapi::operation::Expression::ResponseBody(p) => dotted(p).map(Fill::Capture),
            openapi::operation::Expression::RequestPath(n) => produced
                .param(Location::Path, n)
                .map(|v| Fill::Literal(v.value.clone())),
            openapi::operation::Expression::RequestBody(p) => produced
                .body
                .as_ref()
                .and_then(|b| b.value.pointer(p))
                .map(|v| Fill::Literal(v.clone())),
            openapi::operation::Expression::Constant(v) => Some(Fill::Literal(v.clone())),
            _ => None,
        },
        ValueSource::RequestPath(n) => produced
            .param(Location::Path, n)
            .map(|v| Fill::Literal(v.value.clone())),
        ValueSource::RequestBodyField(p) => produced
            .body
            .as_ref()
            .and_then(|b| b.value.pointer(p))
            .map(|v| Fill::Literal(v.clone())),
        // Which field holds the value is known only from an answer; the document's own example
        // names no resource the scenario made.
        ValueSource::Location { .. }
        | ValueSource::AnswerField { .. }
        | ValueSource::Declared { .. } => None,
    })
}

/// A JSON pointer as the dotted path `capture` reads (`/data/id` → `data.id`); None when a
/// segment is empty or holds a dot, which a dotted path cannot say.
fn dotted(pointer: &str) -> Option<String> {
    let rest = pointer.strip_prefix('/')?;
    let segs: Vec<String> = rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    if segs.iter().any(|s| s.is_empty() || s.contains('.')) {
        return None;
    }
    Some(segs.join("."))
}

/// A variable name for `producer`'s value of `parameter`, unique among `taken`.
fn var_name(producer: &str, parameter: &str, taken: &[String]) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    };
    let base = format!("{}_{}", clean(producer), clean(parameter));
    let mut name = base.clone();
    let mut n = 1;
    while taken.contains(&name) {
        n += 1;
        name = format!("{base}_{n}");
    }
    name
}

/// A phase name from an operation id.
fn phase_name(id: &str) -> String {
    phase_stem(id)
}

fn phase_stem(id: &str) -> String {
    let mut taken = BTreeMap::new();
    file_name(id, &mut taken)
        .trim_end_matches(".yaml")
        .to_string()
}

/// The path template as a rule's glob: each `{parameter}` segment any one segment.
fn glob(template: &str) -> String {
    template
        .split('/')
        .map(|seg| if seg.contains('{') { "*" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}

/// `s` as a YAML double-quoted scalar (JSON's escapes are YAML's).
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// `v` in YAML flow style (JSON is).
fn flow(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// `s` on one line, for a comment.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_become_dotted_paths_where_they_can() {
        assert_eq!(dotted("/id").as_deref(), Some("id"));
        assert_eq!(dotted("/data/id").as_deref(), Some("data.id"));
        assert_eq!(dotted("/a~1b").as_deref(), Some("a/b"));
        assert_eq!(dotted("/a.b"), None);
        assert_eq!(dotted(""), None);
        assert_eq!(dotted("/"), None);
    }

    #[test]
    fn paths_become_globs_and_ids_file_names() {
        assert_eq!(glob("/orders/{id}/pay"), "/orders/*/pay");
        assert_eq!(glob("/orders"), "/orders");
        let mut taken = BTreeMap::new();
        assert_eq!(file_name("createOrder", &mut taken), "createOrder.yaml");
        assert_eq!(file_name("post /a b", &mut taken), "post__a_b.yaml");
        assert_eq!(file_name("post_/a_b", &mut taken), "post__a_b-2.yaml");
        assert_eq!(file_name("", &mut taken), "operation.yaml");
    }
}
