//! Which operation's answer feeds which parameter, in which order to call the operations, and how
//! to look at a resource after an operation touched it.
//!
//! A path parameter that names a resource (`/orders/{id}`) cannot be generated: an id made up
//! here names nothing on the server. It is bound to the operation that makes such resources, and
//! its value is read, in this order, from:
//! 1. the document's own OpenAPI `links` (any parameter, any runtime expression);
//! 2. for a `POST` on the collection (`POST /orders` for `/orders/{id}`, path parameters before
//!    it compared by position, not by name), the creation's `Location` header, the segment at the
//!    parameter's place (what the server says the new resource's URL is);
//! 3. the creation's JSON answer: the field the success response's schema declares under a name
//!    like the parameter's (one level of wrapping such as `data` allowed), then, whatever the
//!    schema says (a framework's `{}`), the answer's own fields matched by name as Schemathesis
//!    infers links — the parameter's name (`account_id`, `accountId`), the resource's
//!    `{name}_id`, `id`, `uuid` — compared without case or separators;
//! 4. the field of the POST's own request body named like it (a name the client chose);
//!    or, for a `PUT` on the resource itself (`PUT /things/{name}`, the client names it), the
//!    value the PUT was sent with;
//! 5. last, the parameter's own `example`, `examples` and its schema's `example`, `examples`
//!    and `default`. Such a value names whatever the document's author had in mind, not a
//!    resource made for the request: the filled value says so ([`Source::Declared`]), so a
//!    caller can tell a verdict on a made resource from a probe of one that may not exist.
//!
//! An operation gets no value only when none of these yields one; the error lists where it
//! looked, in that order.
//!
//! The plan is data; [`LinkPlan::fill`] applies one binding to a built request from what the
//! caller recorded of the producer's answer, and validates the value it puts in.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::operation::{Expression, LinkTarget, Location, Method, Operation};
use crate::pointer::{self, RefTarget};
use crate::request::{Request, RequestBuilder, Source};
use crate::Api;

/// Where a bound parameter's value is read from, in a producer's recorded exchange.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueSource {
    /// An OpenAPI link of the producer's response `status`.
    Link {
        /// The link's name.
        name: String,
        /// The response status key the link is declared under.
        status: String,
        /// Its expression for this parameter.
        expression: Expression,
    },
    /// A field of the producer's JSON answer that its schema declares, by pointer (`/id`,
    /// `/data/id`).
    BodyField(String),
    /// A field of the producer's JSON answer found by name in the answer itself, whatever its
    /// schema says: the first of `names` (compared without case, `_` or `-`) holding a string or
    /// a number at the top level, else under one of `wrappers` (`data`, `item`, `account`, …).
    AnswerField {
        /// The names, most specific first.
        names: Vec<String>,
        /// The wrapping objects looked into, in order.
        wrappers: Vec<String>,
    },
    /// The `Location` header: its path matched against `template`, the resource's path template,
    /// and the segment at the parameter's place taken.
    Location {
        /// The resource's path template, ending with the parameter: `/orders/{id}`.
        template: String,
    },
    /// The same path parameter of the producer's own request.
    RequestPath(String),
    /// A field of the producer's own JSON request body (a name the client chose, such as a
    /// user's `username`).
    RequestBodyField(String),
    /// The consumer parameter's own example or default, from the document: tried last, as it
    /// names no resource the producer made.
    Declared {
        /// `the parameter's example`, `its schema's default`, …
        what: String,
        /// Where the document writes it.
        pointer: String,
        /// The value.
        value: Value,
    },
}

impl ValueSource {
    /// Whether the value comes from the document rather than from the producer's exchange.
    pub fn is_declared(&self) -> bool {
        matches!(self, ValueSource::Declared { .. })
    }
}

impl std::fmt::Display for ValueSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueSource::Link {
                name, expression, ..
            } => write!(f, "link `{name}` ({expression:?})"),
            ValueSource::BodyField(p) => write!(f, "body field {p}"),
            ValueSource::AnswerField { names, .. } => {
                write!(f, "JSON answer field {}", names.join(", "))
            }
            ValueSource::Location { .. } => f.write_str("Location header"),
            ValueSource::RequestPath(n) => write!(f, "the request's path parameter `{n}`"),
            ValueSource::RequestBodyField(p) => write!(f, "the request's body field {p}"),
            ValueSource::Declared { what, .. } => f.write_str(what),
        }
    }
}

/// One parameter of one operation fed by another operation's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The operation whose parameter is filled.
    pub consumer: String,
    /// Where the parameter goes.
    pub location: Location,
    /// Its name.
    pub parameter: String,
    /// The operation whose answer gives the value.
    pub producer: String,
    /// Where the value is read, tried in order.
    pub sources: Vec<ValueSource>,
}

/// What the caller recorded of one exchange with a producer.
#[derive(Debug, Clone, Copy)]
pub struct Recorded<'r> {
    /// The request that was sent (for `$request.…` expressions and a PUT's own id).
    pub request: Option<&'r Request>,
    /// The answer's status code.
    pub status: u16,
    /// The answer's headers.
    pub headers: &'r [(String, String)],
    /// The answer's body, when it was JSON.
    pub body: Option<&'r Value>,
}

impl Recorded<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A bound value that could not be filled in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FillError {
    /// The producer's answer is not a success.
    #[error("{producer} answered {status}: no resource to take `{parameter}` from")]
    NotCreated {
        /// The producer.
        producer: String,
        /// The parameter.
        parameter: String,
        /// The status it answered.
        status: u16,
    },
    /// None of the sources gave a value.
    #[error("{producer}'s answer has no value for `{parameter}` (looked at: {looked})")]
    NoValue {
        /// The producer.
        producer: String,
        /// The parameter.
        parameter: String,
        /// The sources tried.
        looked: String,
    },
    /// The value found is not valid for the parameter.
    #[error("`{parameter}` = {value} (from {producer}'s {source_name}) is not valid: {reason}")]
    Invalid {
        /// The producer.
        producer: String,
        /// The parameter.
        parameter: String,
        /// The value found.
        value: String,
        /// The source that gave it.
        source_name: String,
        /// The validator's words.
        reason: String,
    },
}

/// How the value of a verification's GET parameter is obtained.
#[derive(Debug, Clone, PartialEq)]
pub enum VerifyFrom {
    /// From the operation's answer (a creation): these sources.
    Response(Vec<ValueSource>),
    /// From the operation's own request: its path parameter at the same position.
    SamePath,
}

/// How to look at what an operation did, with the document's own safe operations.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Verification {
    /// The GET of the resource: its operation id, the parameter naming the resource, and how
    /// that parameter's value is obtained.
    pub get: Option<(String, String, VerifyFrom)>,
    /// The GET of the collection the resource belongs to.
    pub list: Option<String>,
}

/// The bindings of a document and the order to call its operations in.
#[derive(Debug, Clone)]
pub struct LinkPlan {
    bindings: Vec<Binding>,
    order: Vec<String>,
    verifications: BTreeMap<String, Verification>,
    notes: Vec<String>,
}

/// A template's segments with parameter names erased: `/orders/{id}` and `/orders/{orderId}` are
/// the same shape.
fn shape(template: &str) -> Vec<String> {
    template
        .trim_end_matches('/')
        .split('/')
        .map(|s| {
            if is_param(s) {
                "{}".to_string()
            } else {
                s.to_string()
            }
        })
        .collect()
}

fn is_param(segment: &str) -> bool {
    segment.starts_with('{') && segment.ends_with('}') && segment.len() > 2
}

fn singular(word: &str) -> String {
    let w = word.to_ascii_lowercase();
    if let Some(stem) = w.strip_suffix("ies") {
        format!("{stem}y")
    } else if w.ends_with("sses")
        || w.ends_with("xes")
        || w.ends_with("ches")
        || w.ends_with("shes")
    {
        w[..w.len() - 2].to_string()
    } else if let Some(stem) = w
        .strip_suffix('s')
        .filter(|s| !s.ends_with('s') && !s.ends_with('u') && !s.ends_with('i'))
    {
        stem.to_string()
    } else {
        w
    }
}

/// Field names that may carry the value of path parameter `param` that follows the collection
/// segment `collection`, most specific first.
fn candidate_fields(param: &str, collection: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |s: String| {
        if !s.is_empty() && !out.contains(&s) {
            out.push(s);
        }
    };
    add(param.to_string());
    let snake = to_snake(param);
    add(snake.clone());
    add(to_camel(&snake));
    add(snake.replace('_', "-"));
    let one = singular(collection).replace('-', "_");
    if let Some(rest) = snake.strip_prefix(&format!("{one}_")) {
        add(rest.to_string());
        add(to_camel(rest));
    }
    let lower = snake.as_str();
    let id_like = lower == "id"
        || lower.ends_with("_id")
        || lower == one
        || ["key", "uuid", "slug", "number", "name", "code"]
            .iter()
            .any(|w| lower == *w || lower.ends_with(&format!("_{w}")));
    if id_like {
        add("id".to_string());
        add(format!("{one}_id"));
        add(to_camel(&format!("{one}_id")));
        add("uuid".to_string());
    }
    out
}

fn to_snake(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c == '-' {
            out.push('_');
        } else {
            out.push(c);
        }
    }
    out
}

fn to_camel(snake: &str) -> String {
    let mut out = String::new();
    let mut up = false;
    for c in snake.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.push(c.to_ascii_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The properties of the schema at `at` (following `$ref`, `allOf` and the first branch of
/// `oneOf`/`anyOf`): name → pointer of the property's schema.
fn properties(doc: &Value, at: &str, depth: usize) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if depth > 16 {
        return out;
    }
    let Some(node) = doc.pointer(at) else {
        return out;
    };
    if let Some(RefTarget::Internal(p)) = node
        .get("$ref")
        .and_then(Value::as_str)
        .map(pointer::parse_ref)
    {
        out.extend(properties(doc, &p, depth + 1));
    }
    if let Some(Value::Object(props)) = node.get("properties") {
        for name in props.keys() {
            out.insert(
                name.clone(),
                pointer::push(&pointer::push(at, "properties"), name),
            );
        }
    }
    for key in ["allOf", "oneOf", "anyOf"] {
        if let Some(Value::Array(list)) = node.get(key) {
            let n = if key == "allOf" {
                list.len()
            } else {
                list.len().min(1)
            };
            for i in 0..n {
                out.extend(properties(
                    doc,
                    &pointer::push(&pointer::push(at, key), &i.to_string()),
                    depth + 1,
                ));
            }
        }
    }
    out
}

/// The objects an answer may wrap its resource in: `{"data": {"id": …}}`; only these, as the
/// `id` of any other object inside (a pet's `category`) names something else.
fn wrappers(collection: &str) -> Vec<String> {
    let mut w: Vec<String> = ["data", "item", "result", "resource", "object"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let one = singular(collection);
    if !w.contains(&one) {
        w.push(one);
    }
    w
}

/// The pointer of the field of the first of `schemas` that has one that carries `param`.
fn field_in<'s>(
    doc: &Value,
    schemas: impl Iterator<Item = &'s str>,
    param: &str,
    collection: &str,
    sent: bool,
) -> Option<String> {
    let candidates = candidate_fields(param, collection);
    // A request never carries a `readOnly` property: the server assigns it.
    let keep = |at: &String| {
        !sent || doc.pointer(at).and_then(|s| s.get("readOnly")) != Some(&Value::Bool(true))
    };
    for schema in schemas {
        let mut top = properties(doc, schema, 0);
        top.retain(|_, at| keep(at));
        for c in &candidates {
            if top.contains_key(c) {
                return Some(pointer::push("", c));
            }
        }
        // One level of wrapping: `{"data": {"id": …}}`; only a wrapper's fields, as the `id`
        // of any other object inside (a pet's `category`) names something else.
        let wrappers = wrappers(collection);
        for (name, inner) in top.iter().filter(|(n, _)| wrappers.contains(n)) {
            let mut nested = properties(doc, inner, 0);
            nested.retain(|_, at| keep(at));
            for c in &candidates {
                if nested.contains_key(c) {
                    return Some(pointer::push(&pointer::push("", name), c));
                }
            }
        }
    }
    None
}

/// The pointer of the field of `producer`'s success answer that carries `param`.
fn body_field(doc: &Value, producer: &Operation, param: &str, collection: &str) -> Option<String> {
    let responses = producer.success_responses();
    field_in(
        doc,
        responses.iter().filter_map(|r| r.json_schema()),
        param,
        collection,
        false,
    )
}

/// The pointer of the field of `producer`'s JSON request body that carries `param`.
fn request_field(
    doc: &Value,
    producer: &Operation,
    param: &str,
    collection: &str,
) -> Option<String> {
    let media = producer
        .body
        .as_ref()?
        .preferred()
        .filter(|m| m.is_json())?;
    field_in(
        doc,
        media.schema.as_deref().into_iter(),
        param,
        collection,
        true,
    )
}

/// A field name without case or separators: `accountId`, `account_id` and `Account-ID` are
/// one name.
fn normalized(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The names an answer's field carrying `param` may have, one spelling per normalized name, most
/// specific first: the parameter's own name (`account_id`), then, for an identifier, `id`, the
/// resource's `{name}_id` and `uuid` (`candidate_fields`' order).
fn answer_names(param: &str, collection: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    candidate_fields(param, collection)
        .into_iter()
        .filter(|n| seen.insert(normalized(n)))
        .collect()
}

/// The sources of a creation's exchange for `param`, in the order they are trusted: what the
/// server says the resource's URL is, then its answer's fields (declared, then found by name),
/// then the client's own name for it.
fn creation_sources(
    doc: &Value,
    producer: &Operation,
    param: &str,
    collection: &str,
    resource: &str,
) -> Vec<ValueSource> {
    let mut sources = vec![ValueSource::Location {
        template: resource.to_string(),
    }];
    if let Some(field) = body_field(doc, producer, param, collection) {
        sources.push(ValueSource::BodyField(field));
    }
    sources.push(ValueSource::AnswerField {
        names: answer_names(param, collection),
        wrappers: wrappers(collection),
    });
    if let Some(field) = request_field(doc, producer, param, collection) {
        sources.push(ValueSource::RequestBodyField(field));
    }
    sources
}

/// The examples and default the document gives for `consumer`'s path parameter `name`: the
/// parameter's `example` and `examples`, then its schema's `example`, `examples` and `default`
/// (through `$ref`s), each once.
fn declared_sources(doc: &Value, consumer: &Operation, name: &str) -> Vec<ValueSource> {
    let Some(param) = consumer.parameter(Location::Path, name) else {
        return Vec::new();
    };
    let mut out: Vec<ValueSource> = Vec::new();
    let mut push = |what: String, pointer: String, value: &Value| {
        let known = out
            .iter()
            .any(|s| matches!(s, ValueSource::Declared { value: v, .. } if v == value));
        if !known && !value.is_null() {
            out.push(ValueSource::Declared {
                what,
                pointer,
                value: value.clone(),
            });
        }
    };
    for ex in &param.examples {
        let what = if ex.name == "example" {
            "the parameter's example".to_string()
        } else {
            format!("the parameter's example `{}`", ex.name)
        };
        push(what, ex.pointer.clone(), &ex.value);
    }
    let mut at = param.schema.clone();
    for _ in 0..8 {
        let Some(ptr) = at.take() else { break };
        let Some(node) = doc.pointer(&ptr) else { break };
        if let Some(v) = node.get("example") {
            push(
                "its schema's example".into(),
                pointer::push(&ptr, "example"),
                v,
            );
        }
        if let Some(Value::Array(xs)) = node.get("examples") {
            for (i, v) in xs.iter().enumerate() {
                let ex_at = pointer::push(&pointer::push(&ptr, "examples"), &i.to_string());
                push(format!("its schema's examples[{i}]"), ex_at, v);
            }
        }
        if let Some(v) = node.get("default") {
            push(
                "its schema's default".into(),
                pointer::push(&ptr, "default"),
                v,
            );
        }
        at = match node
            .get("$ref")
            .and_then(Value::as_str)
            .map(pointer::parse_ref)
        {
            Some(RefTarget::Internal(p)) => Some(p),
            _ => None,
        };
    }
    out
}

impl LinkPlan {
    /// The plan for `api`'s operations.
    pub fn new(api: &Api) -> LinkPlan {
        let ops = api.operations();
        let doc = api.document().json();
        let shapes: Vec<Vec<String>> = ops.iter().map(|o| shape(&o.path)).collect();
        let mut notes = Vec::new();
        let mut bindings: Vec<Binding> = Vec::new();
        // 1. The document's links.
        for producer in ops {
            for response in &producer.responses {
                for link in &response.links {
                    let target = match &link.target {
                        LinkTarget::OperationId(id) => ops.iter().find(|o| &o.id == id),
                        LinkTarget::OperationRef(p) => ops.iter().find(|o| &o.pointer == p),
                    };
                    let Some(consumer) = target else {
                        notes.push(format!(
                            "{}: link `{}` leads to no operation of the document",
                            link.pointer, link.name
                        ));
                        continue;
                    };
                    for (name, expression) in &link.parameters {
                        let (location, bare) = match name.split_once('.') {
                            Some(("path", n)) => (Some(Location::Path), n),
                            Some(("query", n)) => (Some(Location::Query), n),
                            Some(("header", n)) => (Some(Location::Header), n),
                            Some(("cookie", n)) => (Some(Location::Cookie), n),
                            _ => (None, name.as_str()),
                        };
                        let Some(param) = consumer
                            .parameters
                            .iter()
                            .find(|p| location.is_none_or(|l| l == p.location) && p.name == bare)
                        else {
                            notes.push(format!(
                                "{}: link `{}` names parameter `{name}`, which {} does not have",
                                link.pointer,
                                link.name,
                                consumer.label()
                            ));
                            continue;
                        };
                        let source = ValueSource::Link {
                            name: link.name.clone(),
                            status: response.status.clone(),
                            expression: expression.clone(),
                        };
                        match bindings.iter_mut().find(|b| {
                            b.consumer == consumer.id
                                && b.producer == producer.id
                                && b.location == param.location
                                && b.parameter == param.name
                        }) {
                            Some(b) => b.sources.push(source),
                            None => bindings.push(Binding {
                                consumer: consumer.id.clone(),
                                location: param.location,
                                parameter: param.name.clone(),
                                producer: producer.id.clone(),
                                sources: vec![source],
                            }),
                        }
                    }
                }
            }
        }
        // 2 and 3. Creations on the collection, or a PUT on the resource.
        for consumer in ops {
            let segments: Vec<&str> = consumer.path.trim_end_matches('/').split('/').collect();
            for (i, segment) in segments.iter().enumerate() {
                if !is_param(segment) || i == 0 {
                    continue;
                }
                let name = &segment[1..segment.len() - 1];
                let collection = segments[..i].join("/");
                let resource = segments[..=i].join("/");
                let collection_shape = shape(&collection);
                let resource_shape = shape(&resource);
                let creator = ops.iter().zip(&shapes).find_map(|(o, s)| {
                    (o.method == Method::Post && *s == collection_shape && o.id != consumer.id)
                        .then_some(o)
                });
                let linked = |b: &Binding| {
                    b.consumer == consumer.id && b.location == Location::Path && b.parameter == name
                };
                if bindings.iter().any(linked) {
                    // A link from the creation itself: what its exchange says otherwise comes
                    // after the link's expression.
                    if let Some(p) = creator {
                        let more = creation_sources(doc, p, name, segments[i - 1], &resource);
                        if let Some(b) = bindings
                            .iter_mut()
                            .find(|b| linked(b) && b.producer == p.id)
                        {
                            for s in more {
                                if !b.sources.contains(&s) {
                                    b.sources.push(s);
                                }
                            }
                        }
                    }
                    continue;
                }
                if let Some(p) = creator {
                    let sources = creation_sources(doc, p, name, segments[i - 1], &resource);
                    bindings.push(Binding {
                        consumer: consumer.id.clone(),
                        location: Location::Path,
                        parameter: name.to_string(),
                        producer: p.id.clone(),
                        sources,
                    });
                    continue;
                }
                let putter = ops.iter().zip(&shapes).find_map(|(o, s)| {
                    (o.method == Method::Put && *s == resource_shape && o.id != consumer.id)
                        .then_some(o)
                });
                if let Some(p) = putter {
                    let own = p
                        .path
                        .trim_end_matches('/')
                        .split('/')
                        .nth(i)
                        .map(|s| s.trim_matches(|c| c == '{' || c == '}').to_string())
                        .unwrap_or_else(|| name.to_string());
                    bindings.push(Binding {
                        consumer: consumer.id.clone(),
                        location: Location::Path,
                        parameter: name.to_string(),
                        producer: p.id.clone(),
                        sources: vec![ValueSource::RequestPath(own)],
                    });
                }
            }
        }
        // 5. Last, for a path parameter, the document's own examples and default.
        for b in bindings.iter_mut().filter(|b| b.location == Location::Path) {
            if let Some(consumer) = ops.iter().find(|o| o.id == b.consumer) {
                b.sources
                    .extend(declared_sources(doc, consumer, &b.parameter));
            }
        }
        let order = order(ops, &bindings, &mut notes);
        let verifications = ops
            .iter()
            .filter(|o| o.is_unsafe())
            .map(|o| (o.id.clone(), verification(doc, ops, &shapes, o)))
            .collect();
        LinkPlan {
            bindings,
            order,
            verifications,
            notes,
        }
    }

    /// Every binding.
    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }

    /// The bindings of `consumer`'s parameters.
    pub fn bindings_for<'p>(&'p self, consumer: &'p str) -> impl Iterator<Item = &'p Binding> + 'p {
        self.bindings.iter().filter(move |b| b.consumer == consumer)
    }

    /// The operations whose answers `consumer` needs, each once, in plan order.
    pub fn producers_of(&self, consumer: &str) -> Vec<&str> {
        let wanted: BTreeSet<&str> = self
            .bindings_for(consumer)
            .map(|b| b.producer.as_str())
            .collect();
        self.order
            .iter()
            .map(String::as_str)
            .filter(|id| wanted.contains(id))
            .collect()
    }

    /// Every operation id, producers before their consumers, and of a resource's consumers the
    /// DELETEs last.
    pub fn order(&self) -> &[String] {
        &self.order
    }

    /// What the plan noticed: links to nothing, a cycle broken.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// How to look at what unsafe operation `id` did.
    pub fn verification(&self, id: &str) -> Option<&Verification> {
        self.verifications.get(id)
    }

    /// Fills the parameters of `request` that `producer` feeds, from what the caller recorded of
    /// `producer`'s exchange; each value is validated against its parameter's schema. Returns the
    /// names filled.
    pub fn fill(
        &self,
        builder: &mut RequestBuilder<'_>,
        request: &mut Request,
        producer: &str,
        recorded: &Recorded<'_>,
    ) -> Result<Vec<String>, FillError> {
        let mut filled = Vec::new();
        let bindings: Vec<&Binding> = self
            .bindings
            .iter()
            .filter(|b| b.consumer == request.operation_id && b.producer == producer)
            .collect();
        for b in bindings {
            self.apply(
                builder,
                request,
                b.location,
                &b.parameter,
                producer,
                &b.sources,
                recorded,
            )
            .map_err(|e| match e {
                // The last place a path parameter's value may come from, named even when empty,
                // so the reader knows what would have let the request be made.
                FillError::NoValue {
                    producer,
                    parameter,
                    mut looked,
                } if b.location == Location::Path && !b.sources.iter().any(|s| s.is_declared()) => {
                    looked.push_str("; the parameter declares no example, examples or default");
                    FillError::NoValue {
                        producer,
                        parameter,
                        looked,
                    }
                }
                e => e,
            })?;
            filled.push(b.parameter.clone());
        }
        Ok(filled)
    }

    /// A request that looks at the resource operation `sent` (already sent) touched, with the
    /// document's own GET, filled from `sent` or from its `recorded` answer; None when the document
    /// has no such GET.
    pub fn verification_request(
        &self,
        builder: &mut RequestBuilder<'_>,
        sent: &Request,
        recorded: &Recorded<'_>,
    ) -> Result<Option<Request>, VerificationError> {
        let Some(Verification {
            get: Some((get_id, param, from)),
            ..
        }) = self.verifications.get(&sent.operation_id)
        else {
            return Ok(None);
        };
        let api = builder.api();
        let Some(get) = api.operation(get_id) else {
            return Ok(None);
        };
        let mut request = builder.build(get).map_err(VerificationError::Build)?;
        match from {
            VerifyFrom::Response(sources) => {
                self.apply(
                    builder,
                    &mut request,
                    Location::Path,
                    param,
                    &sent.operation_id,
                    sources,
                    recorded,
                )
                .map_err(VerificationError::Fill)?;
            }
            VerifyFrom::SamePath => copy_path_params(&mut request, sent),
        }
        Ok(Some(request))
    }

    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        builder: &mut RequestBuilder<'_>,
        request: &mut Request,
        location: Location,
        parameter: &str,
        producer: &str,
        sources: &[ValueSource],
        recorded: &Recorded<'_>,
    ) -> Result<(), FillError> {
        if !(200..300).contains(&recorded.status) {
            return Err(FillError::NotCreated {
                producer: producer.to_string(),
                parameter: parameter.to_string(),
                status: recorded.status,
            });
        }
        let api = builder.api();
        let schema = api
            .operation(&request.operation_id)
            .and_then(|o| o.parameter(location, parameter))
            .and_then(|p| p.schema.clone());
        let template = request.path_template.clone();
        let mut last_invalid = None;
        let mut refused_declared: Vec<String> = Vec::new();
        for source in sources {
            if source.is_declared() {
                // Another producer's answer already named the resource: keep it.
                if matches!(
                    request.param(location, parameter).map(|p| &p.source),
                    Some(Source::Linked { .. })
                ) {
                    return Ok(());
                }
            }
            let Some((found, how)) = read(source, recorded, &template, parameter, location) else {
                continue;
            };
            let candidates = match (&found, &schema) {
                (Value::String(s), Some(_)) => {
                    let mut c = vec![found.clone()];
                    if let Ok(n) = serde_json::from_str::<serde_json::Number>(s) {
                        c.push(Value::Number(n));
                    }
                    c
                }
                (Value::Number(n), Some(_)) => vec![found.clone(), Value::String(n.to_string())],
                _ => vec![found.clone()],
            };
            let mut reason = String::new();
            for value in candidates {
                let verdict = match &schema {
                    Some(s) => builder.check(s, &value),
                    None => Ok(()),
                };
                match verdict {
                    Ok(()) => {
                        let from = match source {
                            ValueSource::Declared { what, pointer, .. } => Source::Declared {
                                what: what.clone(),
                                pointer: pointer.clone(),
                                operation_id: producer.to_string(),
                                why: unfilled(
                                    last_invalid.take(),
                                    producer,
                                    parameter,
                                    sources,
                                    &refused_declared,
                                )
                                .to_string(),
                            },
                            _ => Source::Linked {
                                operation_id: producer.to_string(),
                                how: how.clone(),
                            },
                        };
                        request.set_param(location, parameter, value, from);
                        return Ok(());
                    }
                    Err(e) => reason = e,
                }
            }
            if source.is_declared() {
                refused_declared.push(format!("{source} {found} (not valid: {reason})"));
            } else if last_invalid.is_none() {
                last_invalid = Some(FillError::Invalid {
                    producer: producer.to_string(),
                    parameter: parameter.to_string(),
                    value: found.to_string(),
                    source_name: how,
                    reason,
                });
            }
        }
        Err(unfilled(
            last_invalid,
            producer,
            parameter,
            sources,
            &refused_declared,
        ))
    }
}

/// Why the exchange gave no value: the first invalid value it gave, else every place looked
/// at, in order (the document's own values last, each with why it was refused).
fn unfilled(
    invalid: Option<FillError>,
    producer: &str,
    parameter: &str,
    sources: &[ValueSource],
    refused_declared: &[String],
) -> FillError {
    if let Some(e) = invalid {
        return e;
    }
    let mut looked: Vec<String> = sources
        .iter()
        .filter(|s| !s.is_declared())
        .map(ToString::to_string)
        .collect();
    looked.extend(refused_declared.iter().cloned());
    FillError::NoValue {
        producer: producer.to_string(),
        parameter: parameter.to_string(),
        looked: looked.join(", "),
    }
}

/// Why a verification request could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerificationError {
    /// The GET itself could not be built.
    #[error("{0}")]
    Build(crate::Unbuildable),
    /// Its resource parameter could not be filled.
    #[error("{0}")]
    Fill(FillError),
}

/// The value `source` gives in `recorded`, for parameter `parameter` of a request to `template`.
fn read(
    source: &ValueSource,
    recorded: &Recorded<'_>,
    template: &str,
    parameter: &str,
    location: Location,
) -> Option<(Value, String)> {
    let how = source.to_string();
    let v = match source {
        ValueSource::BodyField(p) => recorded.body?.pointer(p).filter(|v| !v.is_null()).cloned(),
        ValueSource::AnswerField { names, wrappers } => {
            let (at, v) = answer_field(recorded.body?, names, wrappers)?;
            return Some((v, format!("body field {at}")));
        }
        ValueSource::Declared { value, .. } => Some(value.clone()),
        ValueSource::Location { template } => {
            let header = recorded.header("location")?;
            location_segment(header, template, parameter).map(Value::String)
        }
        ValueSource::RequestPath(name) => recorded
            .request?
            .param(Location::Path, name)
            .map(|p| p.value.clone()),
        ValueSource::RequestBodyField(p) => recorded
            .request?
            .body
            .as_ref()?
            .value
            .pointer(p)
            .filter(|v| !v.is_null())
            .cloned(),
        ValueSource::Link { expression, .. } => {
            let v = match expression {
                Expression::ResponseBody(p) => recorded.body?.pointer(p).cloned(),
                Expression::ResponseHeader(name) => {
                    let h = recorded.header(name)?;
                    // A Location header for a path parameter: the resource's segment of it.
                    if location == Location::Path && name.eq_ignore_ascii_case("location") {
                        let resource = resource_template(template, parameter)?;
                        return location_segment(h, &resource, parameter)
                            .map(|v| (Value::String(v), how));
                    }
                    Some(Value::String(h.to_string()))
                }
                Expression::RequestPath(n) => recorded
                    .request?
                    .param(Location::Path, n)
                    .map(|p| p.value.clone()),
                Expression::RequestQuery(n) => recorded
                    .request?
                    .param(Location::Query, n)
                    .map(|p| p.value.clone()),
                Expression::RequestHeader(n) => recorded
                    .request?
                    .param(Location::Header, n)
                    .map(|p| p.value.clone()),
                Expression::RequestBody(p) => {
                    recorded.request?.body.as_ref()?.value.pointer(p).cloned()
                }
                Expression::StatusCode => Some(Value::from(recorded.status)),
                Expression::Method => recorded
                    .request
                    .map(|r| Value::String(r.method.to_string())),
                Expression::Url => recorded.request.map(|r| Value::String(r.target())),
                Expression::Constant(c) => Some(c.clone()),
            };
            v.filter(|v| !v.is_null())
        }
    };
    v.map(|v| (v, how))
}

/// The field of a JSON answer of the operation at `path` that names the resource it made or
/// touched, found by name as the plan finds a path value in an answer: `id`, `transfer_id` or
/// `uuid` for `POST /transfers`; `account_id`, `id` or `uuid` for `PATCH /accounts/{account_id}`
/// (at the top level or in a wrapper such as `data`). Its pointer and value (a non-empty string
/// or a number).
pub fn resource_field(path: &str, body: &Value) -> Option<(String, Value)> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let last = segments.last()?;
    let collection_of = |skip: usize| {
        segments
            .iter()
            .rev()
            .skip(skip)
            .find(|s| !is_param(s))
            .copied()
            .unwrap_or("")
    };
    let (param, collection) = if is_param(last) {
        (&last[1..last.len() - 1], collection_of(1))
    } else {
        ("id", *last)
    };
    answer_field(
        body,
        &answer_names(param, collection),
        &wrappers(collection),
    )
}

/// The first field of `body` named like one of `names` (without case or separators) that holds
/// a string or a number: at the top level, else inside one of `wrappers`. Its pointer and value.
fn answer_field(body: &Value, names: &[String], wrappers: &[String]) -> Option<(String, Value)> {
    let scalar = |v: &Value| matches!(v, Value::String(s) if !s.is_empty()) || v.is_number();
    let find = |obj: &serde_json::Map<String, Value>| -> Option<(String, Value)> {
        names.iter().find_map(|n| {
            let want = normalized(n);
            obj.iter()
                .find(|(k, v)| normalized(k) == want && scalar(v))
                .map(|(k, v)| (k.clone(), v.clone()))
        })
    };
    let top = body.as_object()?;
    if let Some((k, v)) = find(top) {
        return Some((pointer::push("", &k), v));
    }
    for w in wrappers {
        if let Some(Value::Object(inner)) = top.get(w) {
            if let Some((k, v)) = find(inner) {
                return Some((pointer::push(&pointer::push("", w), &k), v));
            }
        }
    }
    None
}

/// `template` cut after the segment `{parameter}`.
fn resource_template(template: &str, parameter: &str) -> Option<String> {
    let segments: Vec<&str> = template.split('/').collect();
    let i = segments
        .iter()
        .position(|s| *s == format!("{{{parameter}}}"))?;
    Some(segments[..=i].join("/"))
}

/// The segment of a `Location` value at `{parameter}`'s place in `template`, aligned from the end
/// (a base path before it is allowed): `/v1/orders/42` against `/orders/{id}` gives `42`.
fn location_segment(location: &str, template: &str, parameter: &str) -> Option<String> {
    let path = match location.find("://") {
        Some(i) => {
            let rest = &location[i + 3..];
            rest.find('/').map_or("/", |j| &rest[j..])
        }
        None => location,
    };
    let path = path
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .trim_matches('/');
    let got: Vec<&str> = path.split('/').collect();
    let want: Vec<&str> = template.trim_matches('/').split('/').collect();
    if got.len() < want.len() {
        return None;
    }
    let got = &got[got.len() - want.len()..];
    let mut value = None;
    for (g, w) in got.iter().zip(&want) {
        if is_param(w) {
            if w[1..w.len() - 1] == *parameter {
                value = Some(
                    percent_encoding::percent_decode_str(g)
                        .decode_utf8_lossy()
                        .into_owned(),
                );
            }
        } else if g != w {
            return None;
        }
    }
    value.filter(|v| !v.is_empty())
}

/// Copies `sent`'s path parameters into `request`'s, by position in their templates.
fn copy_path_params(request: &mut Request, sent: &Request) {
    let names = |t: &str| -> Vec<(usize, String)> {
        t.split('/')
            .enumerate()
            .filter(|(_, s)| is_param(s))
            .map(|(i, s)| (i, s[1..s.len() - 1].to_string()))
            .collect()
    };
    let from = names(&sent.path_template);
    for (i, name) in names(&request.path_template.clone()) {
        if let Some((_, sent_name)) = from.iter().find(|(j, _)| *j == i) {
            if let Some(v) = sent.param(Location::Path, sent_name) {
                let value = v.value.clone();
                request.set_param(
                    Location::Path,
                    &name,
                    value,
                    Source::Linked {
                        operation_id: sent.operation_id.clone(),
                        how: format!("the request's path parameter `{sent_name}`"),
                    },
                );
            }
        }
    }
}

/// Producers before consumers (Kahn's algorithm); among the ready, creations first, DELETEs last,
/// then document order. A cycle (links both ways) is broken at its earliest operation, and noted.
fn order(ops: &[Operation], bindings: &[Binding], notes: &mut Vec<String>) -> Vec<String> {
    let index: BTreeMap<&str, usize> = ops
        .iter()
        .enumerate()
        .map(|(i, o)| (o.id.as_str(), i))
        .collect();
    let mut edges: BTreeSet<(usize, usize)> = BTreeSet::new();
    for b in bindings {
        if let (Some(&p), Some(&c)) = (
            index.get(b.producer.as_str()),
            index.get(b.consumer.as_str()),
        ) {
            if p != c {
                edges.insert((p, c));
            }
        }
    }
    // Producers by their bindings, before the ordering edges below are added.
    let producers: BTreeSet<usize> = edges.iter().map(|(p, _)| *p).collect();
    // Of one producer's consumers, the others before the DELETEs.
    let mut by_producer: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (p, c) in &edges {
        by_producer.entry(*p).or_default().push(*c);
    }
    for consumers in by_producer.values() {
        for a in consumers {
            for d in consumers {
                if ops[*d].method == Method::Delete && ops[*a].method != Method::Delete {
                    edges.insert((*a, *d));
                }
            }
        }
    }
    let phase = |i: usize| {
        if ops[i].method == Method::Delete {
            2
        } else if producers.contains(&i) {
            0
        } else {
            1
        }
    };
    let mut indegree = vec![0usize; ops.len()];
    for (_, c) in &edges {
        indegree[*c] += 1;
    }
    let mut done = vec![false; ops.len()];
    let mut out = Vec::with_capacity(ops.len());
    while out.len() < ops.len() {
        let ready = (0..ops.len())
            .filter(|i| !done[*i] && indegree[*i] == 0)
            .min_by_key(|i| (phase(*i), *i));
        let next = match ready {
            Some(i) => i,
            None => {
                let i = (0..ops.len())
                    .filter(|i| !done[*i])
                    .min_by_key(|i| (phase(*i), *i))
                    .unwrap_or(0);
                notes.push(format!(
                    "{} feeds and is fed by others in a cycle; it is called first",
                    ops[i].label()
                ));
                i
            }
        };
        done[next] = true;
        out.push(ops[next].id.clone());
        for (p, c) in &edges {
            if *p == next && !done[*c] {
                indegree[*c] = indegree[*c].saturating_sub(1);
            }
        }
    }
    out
}

/// How to look at what `op` did: the GET of its resource and of its collection.
fn verification(
    doc: &Value,
    ops: &[Operation],
    shapes: &[Vec<String>],
    op: &Operation,
) -> Verification {
    let segments: Vec<&str> = op.path.trim_end_matches('/').split('/').collect();
    let get_of = |template_shape: &[String]| {
        ops.iter()
            .zip(shapes)
            .find_map(|(o, s)| (o.method == Method::Get && s == template_shape).then_some(o))
    };
    let mut v = Verification::default();
    // A creation on a collection: the GET of one member, fed by the answer.
    if op.method == Method::Post {
        let mut member = shape(&op.path);
        member.push("{}".into());
        if let Some(get) = get_of(&member) {
            let last = get
                .path
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("");
            let param = last.trim_matches(|c| c == '{' || c == '}').to_string();
            let collection = segments.last().copied().unwrap_or("");
            let sources = creation_sources(doc, op, &param, collection, &get.path);
            v.get = Some((get.id.clone(), param, VerifyFrom::Response(sources)));
            v.list = get_of(&shape(&op.path)).map(|g| g.id.clone());
            return v;
        }
    }
    // Otherwise the resource is the path up to its last parameter.
    if let Some(last) = segments.iter().rposition(|s| is_param(s)) {
        let resource = segments[..=last].join("/");
        if let Some(get) = get_of(&shape(&resource)) {
            let param = segments[last].trim_matches(|c| c == '{' || c == '}');
            let get_param = get
                .path
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or(param)
                .trim_matches(|c| c == '{' || c == '}')
                .to_string();
            v.get = Some((get.id.clone(), get_param, VerifyFrom::SamePath));
        }
        v.list = get_of(&shape(&segments[..last].join("/"))).map(|g| g.id.clone());
    } else {
        v.list = get_of(&shape(&op.path)).map(|g| g.id.clone());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_candidates_follow_the_naming_conventions() {
        let c = candidate_fields("orderId", "orders");
        assert_eq!(c[..4], ["orderId", "order_id", "order-id", "id"]);
        let c = candidate_fields("issue_number", "issues");
        assert!(c.contains(&"number".to_string()), "{c:?}");
        assert_eq!(singular("categories"), "category");
        assert_eq!(singular("addresses"), "address");
        assert_eq!(singular("status"), "status");
        assert_eq!(singular("orders"), "order");
    }

    #[test]
    fn an_answer_names_its_resource_by_the_names_of_its_path() {
        let body = serde_json::json!({"id": "o-1", "account_id": "acc-1", "data": {"id": "d"}});
        let id = |path: &str| resource_field(path, &body).map(|(at, v)| (at, v.to_string()));
        assert_eq!(id("/orders"), Some(("/id".into(), "\"o-1\"".into())));
        assert_eq!(
            id("/orders/{id}/pay"),
            Some(("/id".into(), "\"o-1\"".into()))
        );
        assert_eq!(
            id("/accounts/{accountId}"),
            Some(("/account_id".into(), "\"acc-1\"".into()))
        );
        let wrapped = serde_json::json!({"data": {"ticketNumber": 7}, "id": null});
        assert_eq!(
            resource_field("/tickets/{ticket_number}", &wrapped),
            Some(("/data/ticketNumber".into(), serde_json::json!(7)))
        );
        assert_eq!(resource_field("/", &body), None);
        assert_eq!(resource_field("/orders", &serde_json::json!([1])), None);
    }

    #[test]
    fn location_values_are_aligned_from_the_end() {
        assert_eq!(
            location_segment(
                "https://api.example.com/v1/orders/42?x=1",
                "/orders/{id}",
                "id"
            )
            .as_deref(),
            Some("42")
        );
        assert_eq!(
            location_segment("/orders/a%20b", "/orders/{id}", "id").as_deref(),
            Some("a b")
        );
        assert_eq!(location_segment("/users/42", "/orders/{id}", "id"), None);
        assert_eq!(location_segment("42", "/orders/{id}", "id"), None);
    }
}
