//! Where a bound value may be read, found in the document: the fields of a creation's answer and
//! request body its schemas declare, and the examples and default a parameter declares.

use std::collections::BTreeMap;

use serde_json::Value;

use super::binding::ValueSource;
use super::names::{answer_names, candidate_fields, wrappers};
use crate::operation::{Location, Operation};
use crate::pointer::{self, RefTarget};

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

/// The sources of a creation's exchange for `param`, in the order they are trusted: what the
/// server says the resource's URL is, then its answer's fields (declared, then found by name),
/// then the client's own name for it.
pub(super) fn creation_sources(
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
pub(super) fn declared_sources(doc: &Value, consumer: &Operation, name: &str) -> Vec<ValueSource> {
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
