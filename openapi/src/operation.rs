//! The operations of a document, each with everything needed to call it: its parameters (path
//! level and operation level merged), its request body's media types, its responses with their
//! headers and `links`, the credentials it asks for, and whether it takes an idempotency key.
//!
//! Each piece keeps the JSON pointer of the node it was read from (after `$ref`s were followed),
//! and a schema is kept as the pointer of its Schema Object: the generator and the validator both
//! start from that pointer, so they read the same node.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::document::Document;
use crate::error::LoadError;
pub use crate::parameter::{Example, Location, Parameter, Style};
use crate::pointer;
use crate::security::{self, Security};

/// An HTTP method an OpenAPI path item can describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    /// GET
    Get,
    /// PUT
    Put,
    /// POST
    Post,
    /// DELETE
    Delete,
    /// OPTIONS
    Options,
    /// HEAD
    Head,
    /// PATCH
    Patch,
    /// TRACE
    Trace,
}

impl Method {
    /// The methods in the order a path item lists them.
    pub const ALL: [Method; 8] = [
        Method::Get,
        Method::Put,
        Method::Post,
        Method::Delete,
        Method::Options,
        Method::Head,
        Method::Patch,
        Method::Trace,
    ];

    /// The method's name as sent: `POST`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Head => "HEAD",
            Method::Patch => "PATCH",
            Method::Trace => "TRACE",
        }
    }

    /// The path item's key for it: `post`.
    pub fn key(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Put => "put",
            Method::Post => "post",
            Method::Delete => "delete",
            Method::Options => "options",
            Method::Head => "head",
            Method::Patch => "patch",
            Method::Trace => "trace",
        }
    }

    /// POST, PUT, PATCH, DELETE: a method that changes state, whose repetition the audit probes.
    pub fn is_unsafe(self) -> bool {
        !self.is_safe()
    }

    /// GET, HEAD, OPTIONS, TRACE: safe by RFC 9110, used only to look at state.
    pub fn is_safe(self) -> bool {
        matches!(
            self,
            Method::Get | Method::Head | Method::Options | Method::Trace
        )
    }

    /// PUT and DELETE (and the safe methods): idempotent by RFC 9110 whatever the server.
    pub fn is_idempotent(self) -> bool {
        !matches!(self, Method::Post | Method::Patch)
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One media type of a request body or a response.
#[derive(Debug, Clone)]
pub struct MediaType {
    /// `application/json`, …
    pub name: String,
    /// Pointer of its Schema Object.
    pub schema: Option<String>,
    /// Its examples, `example` first.
    pub examples: Vec<Example>,
    /// Where it is declared.
    pub pointer: String,
}

impl MediaType {
    /// Whether the media type is JSON (`application/json`, `application/*+json`, `*/*json`).
    pub fn is_json(&self) -> bool {
        is_json(&self.name)
    }
}

/// Whether a media type names JSON.
pub fn is_json(media_type: &str) -> bool {
    let essence = media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json") || essence.ends_with("/json")
}

/// The body an operation takes.
#[derive(Debug, Clone)]
pub struct RequestBody {
    /// Whether a body is required.
    pub required: bool,
    /// Its media types, in order of preference: JSON first.
    pub media_types: Vec<MediaType>,
    /// Where it is declared.
    pub pointer: String,
}

impl RequestBody {
    /// The media type a request is built in: JSON when there is one.
    pub fn preferred(&self) -> Option<&MediaType> {
        self.media_types.first()
    }
}

/// A runtime expression of a link (OpenAPI "Runtime Expressions"), or a constant.
#[derive(Debug, Clone, PartialEq)]
pub enum Expression {
    /// `$url`
    Url,
    /// `$method`
    Method,
    /// `$statusCode`
    StatusCode,
    /// `$request.path.NAME`
    RequestPath(String),
    /// `$request.query.NAME`
    RequestQuery(String),
    /// `$request.header.NAME`
    RequestHeader(String),
    /// `$request.body#POINTER`
    RequestBody(String),
    /// `$response.header.NAME`
    ResponseHeader(String),
    /// `$response.body#POINTER`
    ResponseBody(String),
    /// Anything else: a value used as it is.
    Constant(Value),
}

impl Expression {
    /// Reads a link parameter's value.
    pub fn parse(value: &Value) -> Expression {
        let Some(s) = value.as_str() else {
            return Expression::Constant(value.clone());
        };
        let s = s.trim();
        // `{$response.body#/id}` embedded alone in braces means the same.
        let s = s
            .strip_prefix('{')
            .and_then(|x| x.strip_suffix('}'))
            .filter(|x| x.starts_with('$'))
            .unwrap_or(s);
        let body = |rest: &str| {
            let p = rest.strip_prefix('#').unwrap_or(rest);
            percent_encoding::percent_decode_str(p)
                .decode_utf8_lossy()
                .into_owned()
        };
        match s {
            "$url" => Expression::Url,
            "$method" => Expression::Method,
            "$statusCode" => Expression::StatusCode,
            "$request.body" => Expression::RequestBody(String::new()),
            "$response.body" => Expression::ResponseBody(String::new()),
            _ => {
                if let Some(n) = s.strip_prefix("$request.path.") {
                    Expression::RequestPath(n.to_string())
                } else if let Some(n) = s.strip_prefix("$request.query.") {
                    Expression::RequestQuery(n.to_string())
                } else if let Some(n) = s.strip_prefix("$request.header.") {
                    Expression::RequestHeader(n.to_string())
                } else if let Some(r) = s.strip_prefix("$request.body#") {
                    Expression::RequestBody(body(r))
                } else if let Some(n) = s.strip_prefix("$response.header.") {
                    Expression::ResponseHeader(n.to_string())
                } else if let Some(r) = s.strip_prefix("$response.body#") {
                    Expression::ResponseBody(body(r))
                } else {
                    Expression::Constant(value.clone())
                }
            }
        }
    }
}

/// The operation a link leads to.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkTarget {
    /// By `operationId`.
    OperationId(String),
    /// By `operationRef`: the pointer of the operation object.
    OperationRef(String),
}

/// An OpenAPI `link` of a response: how its values feed another operation.
#[derive(Debug, Clone)]
pub struct Link {
    /// The link's name.
    pub name: String,
    /// The operation it leads to.
    pub target: LinkTarget,
    /// Parameter name (optionally qualified, `path.id`) → where its value comes from.
    pub parameters: Vec<(String, Expression)>,
    /// Where the target's body comes from, when the link says.
    pub request_body: Option<Expression>,
    /// Where it is declared.
    pub pointer: String,
}

/// One response an operation declares.
#[derive(Debug, Clone)]
pub struct Response {
    /// The key as written: `201`, `2XX`, `default`.
    pub status: String,
    /// Its media types, JSON first.
    pub media_types: Vec<MediaType>,
    /// Its headers: name → pointer of the header's schema.
    pub headers: Vec<(String, Option<String>)>,
    /// Its links.
    pub links: Vec<Link>,
    /// Where it is declared.
    pub pointer: String,
}

impl Response {
    /// Whether the status is a success (`2xx`, `2XX`).
    pub fn is_success(&self) -> bool {
        self.status.starts_with('2')
    }

    /// The schema of its JSON body, when it has one.
    pub fn json_schema(&self) -> Option<&str> {
        self.media_types
            .iter()
            .find(|m| m.is_json())
            .and_then(|m| m.schema.as_deref())
    }
}

/// The idempotency-key header an operation declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHeader {
    /// The name as the document writes it.
    pub name: String,
    /// Whether the operation requires it.
    pub required: bool,
}

/// One operation of the document.
#[derive(Debug, Clone)]
pub struct Operation {
    /// The method.
    pub method: Method,
    /// The path template: `/orders/{id}`.
    pub path: String,
    /// `operationId`, or one made from the method and the path when the document has none.
    pub id: String,
    /// Whether `id` was made up here (the document gives none).
    pub id_synthesized: bool,
    /// `summary`, when there is one.
    pub summary: Option<String>,
    /// Whether the document marks the operation deprecated.
    pub deprecated: bool,
    /// The parameters, path-level and operation-level merged (the operation's win).
    pub parameters: Vec<Parameter>,
    /// The request body, when the operation takes one.
    pub body: Option<RequestBody>,
    /// The declared responses, by status key.
    pub responses: Vec<Response>,
    /// The credentials it asks for.
    pub security: Security,
    /// The idempotency-key header it declares, if any.
    pub key_header: Option<KeyHeader>,
    /// Where the operation object is.
    pub pointer: String,
}

impl Operation {
    /// `POST /orders`, the way a table names it.
    pub fn label(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// POST, PUT, PATCH, DELETE.
    pub fn is_unsafe(&self) -> bool {
        self.method.is_unsafe()
    }

    /// GET, HEAD, OPTIONS (and TRACE).
    pub fn is_safe(&self) -> bool {
        self.method.is_safe()
    }

    /// The parameter `name` in `location` (header names without case).
    pub fn parameter(&self, location: Location, name: &str) -> Option<&Parameter> {
        self.parameters.iter().find(|p| {
            p.location == location
                && if location == Location::Header {
                    p.name.eq_ignore_ascii_case(name)
                } else {
                    p.name == name
                }
        })
    }

    /// The success responses, the ones a creation answers with first (201, then 200, 202, other
    /// 2xx, 2XX).
    pub fn success_responses(&self) -> Vec<&Response> {
        let rank = |s: &str| match s {
            "201" => 0,
            "200" => 1,
            "202" => 2,
            "2XX" | "2xx" => 4,
            _ => 3,
        };
        let mut out: Vec<&Response> = self.responses.iter().filter(|r| r.is_success()).collect();
        out.sort_by_key(|r| rank(&r.status));
        out
    }

    /// The path parameters' names in the order the template names them.
    pub fn path_parameter_names(&self) -> Vec<String> {
        template_names(&self.path)
    }
}

/// The `{name}`s of a path template, in order.
pub fn template_names(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        out.push(rest[open + 1..open + close].to_string());
        rest = &rest[open + close + 1..];
    }
    out
}

/// Header names a parameter may not use: OpenAPI says such a definition "SHALL be ignored", as
/// the body's media type and the security schemes set them.
const IGNORED_HEADERS: &[&str] = &["accept", "content-type", "authorization"];

/// Reads every operation of `doc` in its `paths`. `key_header` is the idempotency-key header's
/// name (compared without case). Problems that do not stop a request from being built are
/// returned as warnings.
pub(crate) fn read_operations(
    doc: &Document,
    key_header: &str,
) -> Result<(Vec<Operation>, Vec<String>), LoadError> {
    let mut warnings = Vec::new();
    let mut out = Vec::new();
    let Some(paths) = doc.json().get("paths") else {
        return Ok((out, warnings));
    };
    let Value::Object(paths) = paths else {
        return Err(doc.invalid("/paths", "`paths` must be an object"));
    };
    let schemes = security::read_schemes(doc)?;
    let global_security = match doc.json().get("security") {
        Some(s) => Some(security::read_requirements(
            doc,
            "/security",
            s,
            &schemes,
            &mut warnings,
        )?),
        None => None,
    };
    for (template, item) in paths {
        if !template.starts_with('/') {
            // `x-` extensions may sit among the paths.
            if !template.starts_with("x-") {
                warnings.push(format!(
                    "{}: path `{template}` does not start with `/`; skipped",
                    pointer::push("/paths", template)
                ));
            }
            continue;
        }
        let item_at = pointer::push("/paths", template);
        let (item_at, item) = doc.resolve(&item_at, item)?;
        let path_params = match item.get("parameters") {
            Some(p) => read_parameters(doc, &pointer::push(&item_at, "parameters"), p)?,
            None => Vec::new(),
        };
        for method in Method::ALL {
            let Some(op) = item.get(method.key()) else {
                continue;
            };
            let op_at = pointer::push(&item_at, method.key());
            let op = read_operation(
                doc,
                OperationSite {
                    method,
                    template,
                    at: &op_at,
                    path_params: &path_params,
                    key_header,
                    schemes: &schemes,
                    global_security: global_security.as_ref(),
                },
                op,
                &mut warnings,
            )?;
            out.push(op);
        }
    }
    dedupe_ids(&mut out, &mut warnings);
    Ok((out, warnings))
}

/// Where an operation sits and what it inherits.
struct OperationSite<'a> {
    method: Method,
    template: &'a str,
    at: &'a str,
    path_params: &'a [Parameter],
    key_header: &'a str,
    schemes: &'a BTreeMap<String, security::Scheme>,
    global_security: Option<&'a Security>,
}

fn read_operation(
    doc: &Document,
    site: OperationSite<'_>,
    op: &Value,
    warnings: &mut Vec<String>,
) -> Result<Operation, LoadError> {
    let at = site.at;
    if !op.is_object() {
        return Err(doc.invalid(at, "an operation must be an object"));
    }
    let mut parameters: Vec<Parameter> = site.path_params.to_vec();
    if let Some(p) = op.get("parameters") {
        for param in read_parameters(doc, &pointer::push(at, "parameters"), p)? {
            parameters.retain(|q| !(q.location == param.location && same_name(q, &param)));
            parameters.push(param);
        }
    }
    let key_header = parameters
        .iter()
        .find(|p| p.location == Location::Header && p.name.eq_ignore_ascii_case(site.key_header))
        .map(|p| KeyHeader {
            name: p.name.clone(),
            required: p.required,
        });
    parameters.retain(|p| {
        !(p.location == Location::Header
            && IGNORED_HEADERS.contains(&p.name.to_ascii_lowercase().as_str()))
    });
    // Every `{name}` of the template needs a value; one the document forgot to declare is
    // generated as a string, and said.
    for name in template_names(site.template) {
        if !parameters
            .iter()
            .any(|p| p.location == Location::Path && p.name == name)
        {
            warnings.push(format!(
                "{at}: path parameter `{name}` of `{}` is not declared; a string is used",
                site.template
            ));
            parameters.push(Parameter {
                name,
                location: Location::Path,
                required: true,
                style: Style::Simple,
                explode: false,
                allow_reserved: false,
                schema: None,
                content_type: None,
                examples: Vec::new(),
                pointer: at.to_string(),
            });
        }
    }
    let body = match op.get("requestBody") {
        Some(b) => Some(read_body(doc, &pointer::push(at, "requestBody"), b)?),
        None => None,
    };
    let mut responses = Vec::new();
    if let Some(Value::Object(rs)) = op.get("responses") {
        for (status, r) in rs {
            if status.starts_with("x-") {
                continue;
            }
            let r_at = pointer::push(&pointer::push(at, "responses"), status);
            responses.push(read_response(doc, status, &r_at, r)?);
        }
    }
    let security = match op.get("security") {
        Some(s) => security::read_requirements(
            doc,
            &pointer::push(at, "security"),
            s,
            site.schemes,
            warnings,
        )?,
        None => site.global_security.cloned().unwrap_or_default(),
    };
    let declared = op.get("operationId").and_then(Value::as_str);
    Ok(Operation {
        method: site.method,
        path: site.template.to_string(),
        id: declared
            .map(str::to_string)
            .unwrap_or_else(|| synthesized_id(site.method, site.template)),
        id_synthesized: declared.is_none(),
        summary: op
            .get("summary")
            .and_then(Value::as_str)
            .map(str::to_string),
        deprecated: op.get("deprecated") == Some(&Value::Bool(true)),
        parameters,
        body,
        responses,
        security,
        key_header,
        pointer: at.to_string(),
    })
}

fn same_name(a: &Parameter, b: &Parameter) -> bool {
    if a.location == Location::Header {
        a.name.eq_ignore_ascii_case(&b.name)
    } else {
        a.name == b.name
    }
}

/// `post_orders_id_pay` for `POST /orders/{id}/pay`: stable, made of the method and the path only.
pub fn synthesized_id(method: Method, template: &str) -> String {
    let mut id = method.key().to_string();
    let mut last_sep = false;
    id.push('_');
    for c in template.trim_start_matches('/').chars() {
        if c.is_ascii_alphanumeric() {
            id.push(c.to_ascii_lowercase());
            last_sep = false;
        } else if c != '{' && c != '}' && !last_sep {
            id.push('_');
            last_sep = true;
        }
    }
    while id.ends_with('_') {
        id.pop();
    }
    id
}

/// Two operations with one id (a document error, or a made-up id equal to a declared one): the
/// later ones get `_2`, `_3`, … and a warning, so ids stay unique and stable.
fn dedupe_ids(ops: &mut [Operation], warnings: &mut Vec<String>) {
    let mut seen: BTreeSet<String> = ops
        .iter()
        .filter(|o| !o.id_synthesized)
        .map(|o| o.id.clone())
        .collect();
    let mut declared: BTreeSet<String> = BTreeSet::new();
    for op in ops.iter_mut() {
        let clash = if op.id_synthesized {
            seen.contains(&op.id)
        } else {
            !declared.insert(op.id.clone())
        };
        if clash {
            let mut n = 2;
            while seen.contains(&format!("{}_{n}", op.id)) {
                n += 1;
            }
            let new = format!("{}_{n}", op.id);
            warnings.push(format!(
                "{}: operation id `{}` is used twice; this one is `{new}`",
                op.pointer, op.id
            ));
            op.id = new;
        }
        seen.insert(op.id.clone());
    }
}

fn read_parameters(doc: &Document, at: &str, list: &Value) -> Result<Vec<Parameter>, LoadError> {
    let Value::Array(items) = list else {
        return Err(doc.invalid(at, "`parameters` must be a list"));
    };
    let mut out = Vec::new();
    for (i, p) in items.iter().enumerate() {
        let p_at = pointer::push(at, &i.to_string());
        let (p_at, p) = doc.resolve(&p_at, p)?;
        out.push(read_parameter(doc, &p_at, p)?);
    }
    Ok(out)
}

fn read_parameter(doc: &Document, at: &str, p: &Value) -> Result<Parameter, LoadError> {
    let name = p
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| doc.invalid(at, "a parameter needs a `name` (a string)"))?;
    let location = match p.get("in").and_then(Value::as_str) {
        Some("path") => Location::Path,
        Some("query") => Location::Query,
        Some("header") => Location::Header,
        Some("cookie") => Location::Cookie,
        Some(other) => {
            return Err(doc.invalid(
                &pointer::push(at, "in"),
                format!("`in: {other}` is not one of path, query, header, cookie"),
            ))
        }
        None => {
            return Err(doc.invalid(
                at,
                format!("parameter `{name}` needs `in` (path, query, header or cookie)"),
            ))
        }
    };
    let default_style = match location {
        Location::Query | Location::Cookie => Style::Form,
        Location::Path | Location::Header => Style::Simple,
    };
    let style = match p.get("style").and_then(Value::as_str) {
        None => default_style,
        Some("matrix") => Style::Matrix,
        Some("label") => Style::Label,
        Some("form") => Style::Form,
        Some("simple") => Style::Simple,
        Some("spaceDelimited") => Style::SpaceDelimited,
        Some("pipeDelimited") => Style::PipeDelimited,
        Some("deepObject") => Style::DeepObject,
        Some(other) => {
            return Err(doc.invalid(
                &pointer::push(at, "style"),
                format!("`style: {other}` is not an OpenAPI parameter style"),
            ))
        }
    };
    let explode = p
        .get("explode")
        .and_then(Value::as_bool)
        .unwrap_or(style == Style::Form);
    let (schema, content_type, mut examples) = if p.get("schema").is_some() {
        (Some(pointer::push(at, "schema")), None, Vec::new())
    } else if let Some(Value::Object(content)) = p.get("content") {
        match content.iter().next() {
            Some((media, m)) => {
                let m_at = pointer::push(&pointer::push(at, "content"), media);
                let mt = read_media_type(doc, media, &m_at, m)?;
                (mt.schema, Some(media.clone()), mt.examples)
            }
            None => (None, None, Vec::new()),
        }
    } else {
        (None, None, Vec::new())
    };
    let mut own = read_examples(doc, at, p)?;
    own.append(&mut examples);
    Ok(Parameter {
        name: name.to_string(),
        location,
        required: location == Location::Path
            || p.get("required").and_then(Value::as_bool).unwrap_or(false),
        style,
        explode,
        allow_reserved: p
            .get("allowReserved")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        schema,
        content_type,
        examples: own,
        pointer: at.to_string(),
    })
}

/// `example`, then the values of `examples` (a `$ref` followed; `externalValue` is not fetched).
fn read_examples(doc: &Document, at: &str, node: &Value) -> Result<Vec<Example>, LoadError> {
    let mut out = Vec::new();
    if let Some(v) = node.get("example") {
        out.push(Example {
            name: "example".into(),
            value: v.clone(),
            pointer: pointer::push(at, "example"),
        });
    }
    if let Some(Value::Object(examples)) = node.get("examples") {
        for (name, e) in examples {
            let e_at = pointer::push(&pointer::push(at, "examples"), name);
            let (e_at, e) = doc.resolve(&e_at, e)?;
            if let Some(v) = e.get("value") {
                out.push(Example {
                    name: name.clone(),
                    value: v.clone(),
                    pointer: pointer::push(&e_at, "value"),
                });
            }
        }
    }
    Ok(out)
}

fn read_media_type(
    doc: &Document,
    name: &str,
    at: &str,
    m: &Value,
) -> Result<MediaType, LoadError> {
    Ok(MediaType {
        name: name.to_string(),
        schema: m.get("schema").map(|_| pointer::push(at, "schema")),
        examples: read_examples(doc, at, m)?,
        pointer: at.to_string(),
    })
}

fn read_content(doc: &Document, at: &str, node: &Value) -> Result<Vec<MediaType>, LoadError> {
    let mut out = Vec::new();
    if let Some(Value::Object(content)) = node.get("content") {
        let c_at = pointer::push(at, "content");
        for (name, m) in content {
            out.push(read_media_type(doc, name, &pointer::push(&c_at, name), m)?);
        }
    }
    out.sort_by_key(|m| media_rank(&m.name));
    Ok(out)
}

/// Preference among a body's media types: JSON first, then forms, text, anything.
fn media_rank(name: &str) -> u8 {
    let n = name.to_ascii_lowercase();
    if n.starts_with("application/json") {
        0
    } else if is_json(&n) {
        1
    } else if n.starts_with("application/x-www-form-urlencoded") {
        2
    } else if n.starts_with("multipart/form-data") {
        3
    } else if n.starts_with("text/plain") {
        4
    } else if n == "*/*" || n == "application/*" {
        5
    } else {
        6
    }
}

fn read_body(doc: &Document, at: &str, b: &Value) -> Result<RequestBody, LoadError> {
    let (at, b) = doc.resolve(at, b)?;
    Ok(RequestBody {
        required: b.get("required").and_then(Value::as_bool).unwrap_or(false),
        media_types: read_content(doc, &at, b)?,
        pointer: at,
    })
}

fn read_response(doc: &Document, status: &str, at: &str, r: &Value) -> Result<Response, LoadError> {
    let (at, r) = doc.resolve(at, r)?;
    let mut headers = Vec::new();
    if let Some(Value::Object(hs)) = r.get("headers") {
        for (name, h) in hs {
            let h_at = pointer::push(&pointer::push(&at, "headers"), name);
            let (h_at, h) = doc.resolve(&h_at, h)?;
            headers.push((
                name.clone(),
                h.get("schema").map(|_| pointer::push(&h_at, "schema")),
            ));
        }
    }
    let mut links = Vec::new();
    if let Some(Value::Object(ls)) = r.get("links") {
        for (name, l) in ls {
            let l_at = pointer::push(&pointer::push(&at, "links"), name);
            let (l_at, l) = doc.resolve(&l_at, l)?;
            let target = if let Some(id) = l.get("operationId").and_then(Value::as_str) {
                LinkTarget::OperationId(id.to_string())
            } else if let Some(r) = l.get("operationRef").and_then(Value::as_str) {
                match pointer::parse_ref(r) {
                    pointer::RefTarget::Internal(p) => LinkTarget::OperationRef(p),
                    _ => {
                        return Err(doc.invalid(
                            &pointer::push(&l_at, "operationRef"),
                            format!("`operationRef: {r}` is not a reference into this document"),
                        ))
                    }
                }
            } else {
                return Err(doc.invalid(&l_at, "a link needs `operationId` or `operationRef`"));
            };
            let parameters = match l.get("parameters") {
                Some(Value::Object(ps)) => ps
                    .iter()
                    .map(|(k, v)| (k.clone(), Expression::parse(v)))
                    .collect(),
                _ => Vec::new(),
            };
            links.push(Link {
                name: name.clone(),
                target,
                parameters,
                request_body: l.get("requestBody").map(Expression::parse),
                pointer: l_at,
            });
        }
    }
    Ok(Response {
        status: status.to_string(),
        media_types: read_content(doc, &at, r)?,
        headers,
        links,
        pointer: at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_are_synthesized_from_method_and_path() {
        assert_eq!(
            synthesized_id(Method::Post, "/orders/{id}/pay"),
            "post_orders_id_pay"
        );
        assert_eq!(synthesized_id(Method::Get, "/"), "get");
        assert_eq!(synthesized_id(Method::Get, "/a.b/{c-d}/x"), "get_a_b_c_d_x");
    }

    #[test]
    fn runtime_expressions_are_parsed() {
        assert_eq!(
            Expression::parse(&json!("$response.body#/id")),
            Expression::ResponseBody("/id".into())
        );
        assert_eq!(
            Expression::parse(&json!("{$response.header.Location}")),
            Expression::ResponseHeader("Location".into())
        );
        assert_eq!(
            Expression::parse(&json!("$request.path.orderId")),
            Expression::RequestPath("orderId".into())
        );
        assert_eq!(Expression::parse(&json!(7)), Expression::Constant(json!(7)));
        assert_eq!(
            Expression::parse(&json!("plain")),
            Expression::Constant(json!("plain"))
        );
    }

    #[test]
    fn template_names_are_in_order() {
        assert_eq!(
            template_names("/repos/{owner}/{repo}/issues/{issue_number}"),
            ["owner", "repo", "issue_number"]
        );
    }

    #[test]
    fn methods_are_classified() {
        for m in [Method::Post, Method::Put, Method::Patch, Method::Delete] {
            assert!(m.is_unsafe() && !m.is_safe(), "{m}");
        }
        for m in [Method::Get, Method::Head, Method::Options] {
            assert!(m.is_safe() && !m.is_unsafe(), "{m}");
        }
        assert!(Method::Put.is_idempotent() && !Method::Post.is_idempotent());
    }
}
