//! The document's schemas put in the terms of one JSON Schema draft, as a request sees them.
//!
//! An OpenAPI 3.0 Schema Object is draft 4 (boolean `exclusiveMinimum`, siblings of `$ref`
//! ignored) plus a few words of its own; 3.1's is JSON Schema 2020-12. A validator speaks a draft,
//! so before anything is generated or validated, each Schema Object of the document is rewritten
//! in place, once, into what its draft means by it:
//!
//! - 3.0 `nullable: true` adds `"null"` to `type` (and to `enum`, when there is one), and only
//!   where `type` is given, as 3.0.3 says;
//! - `format: int32` bounds `minimum`/`maximum` to 32 bits (the format registry's meaning, which a
//!   validator's format check leaves out, as it checks formats of strings only);
//! - a `readOnly` property is not `required` of a request (OpenAPI: "the required will take
//!   effect on the response only"), so the generator leaves it out and the validator does not ask
//!   for it.
//!
//! Every rewrite is idempotent, so a schema reached twice (inline, and again through a `$ref` into
//! its middle) comes out the same. Schemas are found where OpenAPI puts them (every `schema` of a
//! parameter, a header or a media type, and `components/schemas`) and then by following every
//! `$ref` inside a schema, so a schema in a bundled file or at an unusual pointer is rewritten too.
//! Nothing moves: every pointer into the document names the same node before and after.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::load::{child_ctx, Ctx, Version};
use crate::pointer::{self, RefTarget};

const INT32_MIN: i64 = i32::MIN as i64;
const INT32_MAX: i64 = i32::MAX as i64;

/// Rewrites every Schema Object of `json` as the module doc says.
pub(crate) fn normalize(json: &mut Value, version: Version) {
    let mut roots = Vec::new();
    let mut path = String::new();
    find_schema_roots(json, Ctx::Keywords, &mut path, &mut roots);
    let mut done: HashSet<String> = HashSet::new();
    let mut refs = Vec::new();
    let mut work = roots;
    while let Some(root) = work.pop() {
        if covered(&done, &root) {
            continue;
        }
        if let Some(node) = json.pointer_mut(&root) {
            let mut path = root.clone();
            translate(node, version, &mut path, &mut refs);
        }
        done.insert(root);
        work.append(&mut refs);
    }
}

/// Whether `p` or one of its ancestors was already rewritten.
fn covered(done: &HashSet<String>, p: &str) -> bool {
    if done.contains(p) {
        return true;
    }
    p.match_indices('/').any(|(i, _)| done.contains(&p[..i]))
}

fn find_schema_roots(value: &Value, ctx: Ctx, path: &mut String, out: &mut Vec<String>) {
    let Value::Object(map) = value else {
        if let Value::Array(items) = value {
            for (i, child) in items.iter().enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                find_schema_roots(child, Ctx::Keywords, path, out);
                path.truncate(len);
            }
        }
        return;
    };
    let in_components = path.ends_with("/components") || path == "/components";
    for (key, child) in map {
        if !child.is_object() && !child.is_array() {
            continue;
        }
        let len = path.len();
        path.push('/');
        path.push_str(&pointer::escape(key));
        if ctx == Ctx::Keywords && key == "schema" {
            out.push(path.clone());
        } else if ctx == Ctx::Keywords && in_components && key == "schemas" {
            if let Value::Object(schemas) = child {
                for name in schemas.keys() {
                    out.push(pointer::push(path, name));
                }
            }
        } else if let Some(c) = child_ctx(ctx, key, child) {
            find_schema_roots(child, c, path, out);
        }
        path.truncate(len);
    }
}

/// Keywords whose value is one schema.
const ONE: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "contentSchema",
];
/// Keywords whose value is a list of schemas.
const LIST: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];
/// Keywords whose value maps names to schemas.
const MAP: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

fn translate(node: &mut Value, version: Version, path: &mut String, refs: &mut Vec<String>) {
    let Value::Object(map) = node else {
        return;
    };
    if let Some(Value::String(r)) = map.get("$ref") {
        if let RefTarget::Internal(p) = pointer::parse_ref(r) {
            refs.push(p);
        }
    }
    if let Some(Value::Object(mapping)) = map.get("discriminator").and_then(|d| d.get("mapping")) {
        for target in mapping.values().filter_map(Value::as_str) {
            if let RefTarget::Internal(p) = pointer::parse_ref(target) {
                if target.starts_with('#') {
                    refs.push(p);
                }
            }
        }
    }
    if version == Version::V3_0 {
        nullable(map);
    }
    int32_bounds(map);
    read_only_not_required(map);
    for (key, child) in map.iter_mut() {
        let len = path.len();
        path.push('/');
        path.push_str(&pointer::escape(key));
        let k = key.as_str();
        if ONE.contains(&k) || (k == "items" && child.is_object()) {
            translate(child, version, path, refs);
        } else if LIST.contains(&k) || (k == "items" && child.is_array()) {
            if let Value::Array(items) = child {
                for (i, item) in items.iter_mut().enumerate() {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&i.to_string());
                    translate(item, version, path, refs);
                    path.truncate(len);
                }
            }
        } else if MAP.contains(&k) || k == "dependencies" {
            if let Value::Object(entries) = child {
                for (name, item) in entries.iter_mut() {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&pointer::escape(name));
                    translate(item, version, path, refs);
                    path.truncate(len);
                }
            }
        }
        path.truncate(len);
    }
}

fn nullable(map: &mut Map<String, Value>) {
    if map.get("nullable") != Some(&Value::Bool(true)) {
        return;
    }
    let null = Value::String("null".into());
    match map.get_mut("type") {
        Some(Value::String(t)) => {
            let t = std::mem::take(t);
            map.insert("type".into(), Value::Array(vec![Value::String(t), null]));
        }
        Some(Value::Array(types)) => {
            if !types.contains(&null) {
                types.push(null);
            }
        }
        _ => return,
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        if !values.contains(&Value::Null) {
            values.push(Value::Null);
        }
    }
}

fn int32_bounds(map: &mut Map<String, Value>) {
    if map.get("format").and_then(Value::as_str) != Some("int32") {
        return;
    }
    let integer = match map.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
        _ => false,
    };
    if !integer {
        return;
    }
    let low = map.get("minimum").and_then(Value::as_f64);
    if low.is_none_or(|m| m < INT32_MIN as f64) {
        map.insert("minimum".into(), INT32_MIN.into());
        if map.get("exclusiveMinimum").is_some_and(Value::is_boolean) {
            map.remove("exclusiveMinimum");
        }
    }
    let high = map.get("maximum").and_then(Value::as_f64);
    if high.is_none_or(|m| m > INT32_MAX as f64) {
        map.insert("maximum".into(), INT32_MAX.into());
        if map.get("exclusiveMaximum").is_some_and(Value::is_boolean) {
            map.remove("exclusiveMaximum");
        }
    }
}

fn read_only_not_required(map: &mut Map<String, Value>) {
    let read_only: Vec<String> = match map.get("properties") {
        Some(Value::Object(props)) => props
            .iter()
            .filter(|(_, s)| s.get("readOnly") == Some(&Value::Bool(true)))
            .map(|(name, _)| name.clone())
            .collect(),
        _ => return,
    };
    if read_only.is_empty() {
        return;
    }
    if let Some(Value::Array(required)) = map.get_mut("required") {
        required.retain(|r| !r.as_str().is_some_and(|r| read_only.iter().any(|n| n == r)));
        if required.is_empty() {
            // Draft 4 requires `required` to have at least one element.
            map.remove("required");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(schemas: Value) -> Value {
        json!({"openapi": "3.0.3", "paths": {}, "components": {"schemas": schemas}})
    }

    #[test]
    fn nullable_adds_null_to_type_and_enum_where_type_is_given() {
        let mut d = doc(json!({
            "A": {"type": "string", "nullable": true, "enum": ["x"]},
            "B": {"nullable": true, "allOf": [{"$ref": "#/components/schemas/A"}]},
            "C": {"type": "object", "properties": {"n": {"type": "integer", "nullable": true}}}
        }));
        normalize(&mut d, Version::V3_0);
        let s = &d["components"]["schemas"];
        assert_eq!(s["A"]["type"], json!(["string", "null"]));
        assert_eq!(s["A"]["enum"], json!(["x", null]));
        assert_eq!(s["B"].get("type"), None, "3.0.3: no effect without type");
        assert_eq!(
            s["C"]["properties"]["n"]["type"],
            json!(["integer", "null"])
        );
        // Idempotent.
        let once = d.clone();
        normalize(&mut d, Version::V3_0);
        assert_eq!(d, once);
    }

    #[test]
    fn nullable_means_nothing_in_3_1() {
        let mut d = doc(json!({"A": {"type": "string", "nullable": true}}));
        normalize(&mut d, Version::V3_1);
        assert_eq!(d["components"]["schemas"]["A"]["type"], "string");
    }

    #[test]
    fn int32_is_bounded_and_read_only_is_not_required() {
        let mut d = doc(json!({
            "A": {"type": "integer", "format": "int32", "minimum": 5},
            "B": {"type": "object", "required": ["id", "name"], "properties": {
                "id": {"type": "string", "readOnly": true}, "name": {"type": "string"}}},
            "C": {"type": "object", "required": ["id"], "properties": {
                "id": {"type": "string", "readOnly": true}}}
        }));
        normalize(&mut d, Version::V3_0);
        let s = &d["components"]["schemas"];
        assert_eq!(s["A"]["minimum"], 5);
        assert_eq!(s["A"]["maximum"], INT32_MAX);
        assert_eq!(s["B"]["required"], json!(["name"]));
        assert_eq!(s["C"].get("required"), None);
    }

    #[test]
    fn schemas_are_found_through_parameters_media_types_and_refs() {
        let mut d = json!({
            "openapi": "3.0.3",
            "paths": {"/a": {"post": {
                "parameters": [{"name": "q", "in": "query", "schema": {"type": "string", "nullable": true}}],
                "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/x-elsewhere/S"}}}}
            }}},
            "x-elsewhere": {"S": {"type": "object", "properties": {"p": {"type": "string", "nullable": true}}}}
        });
        normalize(&mut d, Version::V3_0);
        assert_eq!(
            d["paths"]["/a"]["post"]["parameters"][0]["schema"]["type"],
            json!(["string", "null"])
        );
        assert_eq!(
            d["x-elsewhere"]["S"]["properties"]["p"]["type"],
            json!(["string", "null"])
        );
    }
}
