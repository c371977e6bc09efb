//! A valid request per operation: its required parameters (and the idempotency-key header, when
//! it declares one) and its body, each from the document's own examples when one validates, else
//! generated from the schema, and always validated before it is returned.
//!
//! Order of sources for one value: the parameter's or media type's `example`, then its
//! `examples` in order, then generation — first with the schemas' own `example`s and `default`s,
//! then without them, then with other seeds (`generate::strategy`), up to [`ATTEMPTS`]. A value the
//! validator refuses on every try makes the operation [`Unbuildable`], with the validator's words
//! and the reasons each document example was refused: never a request that is silently invalid.
//!
//! Reproducibility: each value draws from its own random stream, seeded from the builder's seed,
//! the operation id, the value's place (`query:limit`, `body`) and the attempt; a request does not
//! depend on which other operations were built before it, so `--only` and `--skip` leave it
//! byte-identical.

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;

use crate::generate::{strategy, Fallback, Generator};
use crate::operation::{is_json, Example, Location, Method, Operation, Style};
use crate::style;
use crate::validate::Validators;
use crate::{Api, LoadError};

/// Tries per value before it is given up.
pub const ATTEMPTS: usize = 10;

/// Where a value of a request came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A document example, by its pointer.
    Example(String),
    /// Generated from the schema on this attempt (see `generate::strategy`).
    Generated {
        /// 0-based attempt.
        attempt: usize,
    },
    /// The document gives no schema: a placeholder, which no validator could judge.
    Unconstrained,
    /// Taken from what another operation answered.
    Linked {
        /// The operation that answered.
        operation_id: String,
        /// What was read: `body /id`, `Location header`, a link's expression.
        how: String,
    },
    /// The parameter's own example or default, because the operation that makes the resource
    /// gave no value for it: the value names no resource made for this request, which may not
    /// exist.
    Declared {
        /// `the parameter's example`, `its schema's default`, …
        what: String,
        /// Where the document writes it.
        pointer: String,
        /// The operation whose answer gave no value.
        operation_id: String,
        /// Why its answer gave none: where the plan looked.
        why: String,
    },
}

/// One parameter's value in a request.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamValue {
    /// The parameter's name.
    pub name: String,
    /// Where it goes.
    pub location: Location,
    /// The value, as JSON (validated against the parameter's schema).
    pub value: Value,
    /// Where the value came from.
    pub source: Source,
    style: Style,
    explode: bool,
    allow_reserved: bool,
    json: bool,
}

impl ParamValue {
    /// The value as text in its style (for a `content`-described parameter, its JSON), before
    /// any percent-encoding.
    pub fn text(&self) -> String {
        if self.json {
            self.value.to_string()
        } else {
            style::scalar(&self.value)
        }
    }

    fn rendered_value(&self) -> Value {
        if self.json {
            Value::String(self.value.to_string())
        } else {
            self.value.clone()
        }
    }
}

/// A request body.
#[derive(Debug, Clone, PartialEq)]
pub struct Body {
    /// The `Content-Type` to send (with a multipart boundary when there is one).
    pub content_type: String,
    /// The value, as JSON (validated against the media type's schema).
    pub value: Value,
    /// The bytes to send.
    pub bytes: Vec<u8>,
    /// Where the value came from.
    pub source: Source,
}

/// A request for one operation, valid against its document.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The operation's id.
    pub operation_id: String,
    /// The method.
    pub method: Method,
    /// The path template it fills.
    pub path_template: String,
    /// The parameter values: every required one, and the idempotency-key header when declared.
    pub parameters: Vec<ParamValue>,
    /// The body, when the operation takes one.
    pub body: Option<Body>,
    /// The idempotency-key header's name, when the operation declares one.
    pub key_header: Option<String>,
}

impl Request {
    /// The path with its parameters and the query string, encoded, relative to the server URL:
    /// `/orders/42?expand=items`.
    pub fn target(&self) -> String {
        let mut path = String::new();
        let mut rest = self.path_template.as_str();
        while let Some(open) = rest.find('{') {
            let Some(len) = rest[open..].find('}') else {
                break;
            };
            path.push_str(&rest[..open]);
            let name = &rest[open + 1..open + len];
            match self.param(Location::Path, name) {
                Some(p) => {
                    path.push_str(&style::path(name, &p.rendered_value(), p.style, p.explode))
                }
                None => path.push_str(&rest[open..=open + len]),
            }
            rest = &rest[open + len + 1..];
        }
        path.push_str(rest);
        let query: Vec<String> = self
            .parameters
            .iter()
            .filter(|p| p.location == Location::Query)
            .flat_map(|p| {
                style::query(
                    &p.name,
                    &p.rendered_value(),
                    p.style,
                    p.explode,
                    p.allow_reserved,
                )
            })
            .collect();
        if !query.is_empty() {
            path.push('?');
            path.push_str(&query.join("&"));
        }
        path
    }

    /// The headers to send: header parameters, `Cookie` for cookie parameters, and
    /// `Content-Type` when there is a body. Credentials are the caller's to add.
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .parameters
            .iter()
            .filter(|p| p.location == Location::Header)
            .filter_map(|p| {
                style::header(&p.rendered_value(), p.explode).map(|v| (p.name.clone(), v))
            })
            .collect();
        let cookies: Vec<String> = self
            .parameters
            .iter()
            .filter(|p| p.location == Location::Cookie)
            .filter_map(|p| style::cookie(&p.name, &p.rendered_value()))
            .collect();
        if !cookies.is_empty() {
            out.push(("Cookie".to_string(), cookies.join("; ")));
        }
        if let Some(b) = &self.body {
            out.push(("Content-Type".to_string(), b.content_type.clone()));
        }
        out
    }

    /// The value of parameter `name` in `location` (header names without case).
    pub fn param(&self, location: Location, name: &str) -> Option<&ParamValue> {
        self.parameters.iter().find(|p| {
            p.location == location
                && if location == Location::Header {
                    p.name.eq_ignore_ascii_case(name)
                } else {
                    p.name == name
                }
        })
    }

    /// Replaces the value of parameter `name` in `location`; false when the request has no such
    /// parameter.
    pub fn set_param(
        &mut self,
        location: Location,
        name: &str,
        value: Value,
        source: Source,
    ) -> bool {
        let found = self.parameters.iter_mut().find(|p| {
            p.location == location
                && if location == Location::Header {
                    p.name.eq_ignore_ascii_case(name)
                } else {
                    p.name == name
                }
        });
        match found {
            Some(p) => {
                p.value = value;
                p.source = source;
                true
            }
            None => false,
        }
    }

    /// The whole request as HTTP/1.1 text (for a report's evidence and for tests), without
    /// `Host` and credentials.
    pub fn to_http(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.target()).into_bytes();
        for (k, v) in self.headers() {
            out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
        }
        if let Some(b) = &self.body {
            out.extend_from_slice(format!("Content-Length: {}\r\n", b.bytes.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        if let Some(b) = &self.body {
            out.extend_from_slice(&b.bytes);
        }
        out
    }
}

/// An operation for which no valid request could be made, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{label} ({operation_id}): no valid request: {part}: {reason}")]
pub struct Unbuildable {
    /// The operation's id.
    pub operation_id: String,
    /// `POST /orders`.
    pub label: String,
    /// What could not be made: `body (application/json)`, `query parameter \`limit\``.
    pub part: String,
    /// Why: the validator's errors on the last try, and why each document example was refused.
    pub reason: String,
}

/// Builds requests for the operations of one document.
pub struct RequestBuilder<'a> {
    api: &'a Api,
    validators: Validators,
    seed: u64,
}

impl<'a> RequestBuilder<'a> {
    /// A builder drawing from `seed`.
    pub fn new(api: &'a Api, seed: u64) -> Result<RequestBuilder<'a>, LoadError> {
        let validators =
            Validators::new(api.document()).map_err(|m| api.document().invalid("", m))?;
        Ok(RequestBuilder {
            api,
            validators,
            seed,
        })
    }

    /// The document the requests are for.
    pub fn api(&self) -> &'a Api {
        self.api
    }

    /// Whether `value` is valid against the schema at `schema` (a pointer), by the validator every
    /// built value passes; when not, the validator's errors.
    pub fn check(&mut self, schema: &str, value: &Value) -> Result<(), String> {
        self.validators.check(schema, value)
    }

    /// A valid request for `op`, or why none could be made.
    pub fn build(&mut self, op: &Operation) -> Result<Request, Unbuildable> {
        let unbuildable = |part: String, reason: String| Unbuildable {
            operation_id: op.id.clone(),
            label: op.label(),
            part,
            reason,
        };
        let mut parameters = Vec::new();
        for p in &op.parameters {
            let is_key = p.location == Location::Header
                && op
                    .key_header
                    .as_ref()
                    .is_some_and(|k| k.name.eq_ignore_ascii_case(&p.name));
            if !p.required && !is_key {
                continue;
            }
            let part = format!("{} parameter `{}`", p.location.as_str(), p.name);
            let json = p.content_type.as_deref().is_some_and(is_json);
            let fits = |v: &Value| -> Result<(), String> {
                let rendered = if json {
                    Value::String(v.to_string())
                } else {
                    v.clone()
                };
                match p.location {
                    Location::Header if style::header(&rendered, p.explode).is_none() => {
                        Err(format!("{} cannot be sent as a header value", short(v)))
                    }
                    Location::Cookie if style::cookie(&p.name, &rendered).is_none() => {
                        Err(format!("{} cannot be sent as a cookie value", short(v)))
                    }
                    _ => Ok(()),
                }
            };
            let key = format!("{}:{}", p.location.as_str(), p.name);
            let (value, source) = self
                .value(
                    op,
                    &key,
                    p.schema.as_deref(),
                    &p.examples,
                    Fallback::String,
                    &fits,
                )
                .map_err(|r| unbuildable(part, r))?;
            parameters.push(ParamValue {
                name: p.name.clone(),
                location: p.location,
                value,
                source,
                style: p.style,
                explode: p.explode,
                allow_reserved: p.allow_reserved,
                json,
            });
        }
        let body = match op.body.as_ref().and_then(|b| b.preferred()) {
            None => None,
            Some(media) => {
                let part = format!("body ({})", media.name);
                let form = media.name.starts_with("application/x-www-form-urlencoded")
                    || media.name.starts_with("multipart/form-data");
                let fits = |v: &Value| -> Result<(), String> {
                    if form && !v.is_object() {
                        return Err(format!("{} is not an object, as a form needs", short(v)));
                    }
                    Ok(())
                };
                let (value, source) = self
                    .value(
                        op,
                        "body",
                        media.schema.as_deref(),
                        &media.examples,
                        Fallback::Object,
                        &fits,
                    )
                    .map_err(|r| unbuildable(part.clone(), r))?;
                let mut rng = self.rng(&op.id, "body:boundary", 0);
                let (content_type, bytes) = encode_body(&media.name, &value, &mut rng);
                Some(Body {
                    content_type,
                    value,
                    bytes,
                    source,
                })
            }
        };
        Ok(Request {
            operation_id: op.id.clone(),
            method: op.method,
            path_template: op.path.clone(),
            parameters,
            body,
            key_header: op.key_header.as_ref().map(|k| k.name.clone()),
        })
    }

    /// A request for every operation, in document order.
    pub fn build_all(&mut self) -> Vec<Result<Request, Unbuildable>> {
        self.api
            .operations()
            .iter()
            .map(|op| self.build(op))
            .collect()
    }

    fn rng(&self, op: &str, key: &str, attempt: usize) -> ChaCha8Rng {
        // FNV-1a: a fixed function, so a seed means the same values on every platform and build.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |bytes: &[u8]| {
            for b in bytes {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            h ^= 0xff;
            h = h.wrapping_mul(0x0100_0000_01b3);
        };
        feed(&self.seed.to_le_bytes());
        feed(op.as_bytes());
        feed(key.as_bytes());
        feed(&(attempt as u64).to_le_bytes());
        ChaCha8Rng::seed_from_u64(h)
    }

    /// One value: a document example that validates, else a generated one that does.
    fn value(
        &mut self,
        op: &Operation,
        key: &str,
        schema: Option<&str>,
        examples: &[Example],
        fallback: Fallback,
        fits: &dyn Fn(&Value) -> Result<(), String>,
    ) -> Result<(Value, Source), String> {
        let mut refused = Vec::new();
        for ex in examples {
            let verdict = match schema {
                Some(s) => self.validators.check(s, &ex.value),
                None => Ok(()),
            }
            .and_then(|()| fits(&ex.value));
            match verdict {
                Ok(()) => return Ok((ex.value.clone(), Source::Example(ex.pointer.clone()))),
                Err(e) => {
                    refused.push(format!("the example at `{}` is not valid: {e}", ex.pointer))
                }
            }
        }
        let Some(schema) = schema else {
            let v = match fallback {
                Fallback::Object => Value::Object(Default::default()),
                Fallback::String => Value::String("1".into()),
            };
            return Ok((v, Source::Unconstrained));
        };
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            let rng = self.rng(&op.id, key, attempt);
            let doc = self.api.document();
            let mut generator = Generator::new(doc.json(), doc.version(), rng, strategy(attempt));
            match generator.value(schema, fallback) {
                Ok(v) => match self.validators.check(schema, &v).and_then(|()| fits(&v)) {
                    Ok(()) => return Ok((v, Source::Generated { attempt })),
                    Err(e) => last = format!("the generated {} is not valid: {e}", short(&v)),
                },
                Err(e) => last = e,
            }
        }
        refused.insert(0, format!("after {ATTEMPTS} tries, {last}"));
        Err(refused.join("; "))
    }
}

/// A value in a message, cut to a readable length.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 160 {
        format!("{}…", s.chars().take(160).collect::<String>())
    } else {
        s
    }
}

/// The `Content-Type` and bytes of a body of media type `media`.
fn encode_body(media: &str, value: &Value, rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let essence = media
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence == "application/x-www-form-urlencoded" {
        let pairs: Vec<String> = value
            .as_object()
            .into_iter()
            .flatten()
            .flat_map(|(k, v)| style::query(k, &form_field(v), Style::Form, true, false))
            .collect();
        return (media.to_string(), pairs.join("&").into_bytes());
    }
    if essence == "multipart/form-data" {
        let boundary = format!("openapi-{:016x}", rng.random::<u64>());
        let mut out = Vec::new();
        for (k, v) in value.as_object().into_iter().flatten() {
            out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            let (ct, bytes) = match v {
                Value::String(s) => ("text/plain", s.clone().into_bytes()),
                other => ("application/json", other.to_string().into_bytes()),
            };
            out.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{}\"\r\nContent-Type: {ct}\r\n\r\n",
                    k.replace(['"', '\r', '\n'], "_")
                )
                .as_bytes(),
            );
            out.extend_from_slice(&bytes);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        return (format!("multipart/form-data; boundary={boundary}"), out);
    }
    let wildcard = essence.contains('*');
    match value {
        Value::String(s) if !is_json(&essence) => (
            if wildcard {
                "text/plain".to_string()
            } else {
                media.to_string()
            },
            s.clone().into_bytes(),
        ),
        other => (
            if wildcard {
                "application/json".to_string()
            } else {
                media.to_string()
            },
            serde_json::to_vec(other).unwrap_or_default(),
        ),
    }
}

/// A form field: scalars as they are, arrays of scalars repeated, anything nested as JSON text.
fn form_field(v: &Value) -> Value {
    match v {
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => v.clone(),
        Value::Array(_) | Value::Object(_) => Value::String(v.to_string()),
        _ => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use serde_json::json;

    #[test]
    fn bodies_are_encoded_by_media_type() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let v = json!({"a": "x y", "n": 2, "tags": ["p", "q"], "o": {"k": 1}});
        let (ct, b) = encode_body("application/x-www-form-urlencoded", &v, &mut rng);
        assert_eq!(ct, "application/x-www-form-urlencoded");
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "a=x%20y&n=2&o=%7B%22k%22%3A1%7D&tags=p&tags=q"
        );
        let (ct, b) = encode_body("multipart/form-data", &json!({"name": "rex"}), &mut rng);
        let boundary = ct.strip_prefix("multipart/form-data; boundary=").unwrap();
        assert_eq!(
            String::from_utf8(b).unwrap(),
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\nContent-Type: \
                 text/plain\r\n\r\nrex\r\n--{boundary}--\r\n"
            )
        );
        let (ct, b) = encode_body("application/merge-patch+json", &json!({"a": 1}), &mut rng);
        assert_eq!(
            (ct.as_str(), b.as_slice()),
            ("application/merge-patch+json", &b"{\"a\":1}"[..])
        );
        let (ct, b) = encode_body("text/plain", &json!("hi"), &mut rng);
        assert_eq!((ct.as_str(), b.as_slice()), ("text/plain", &b"hi"[..]));
        let (ct, _) = encode_body("*/*", &json!({"a": 1}), &mut rng);
        assert_eq!(ct, "application/json");
    }
}
