//! Every value this crate hands out is first checked by `jsonschema`, a validator that shares no
//! code with the generator, against the schema it was made for.
//!
//! The whole normalized document is registered once as one resource (in the draft of its version:
//! 4 for 3.0, 2020-12 for 3.1) and each schema is compiled as `{"$ref": "<document>#<pointer>"}`,
//! the pattern jsonschema documents for validating against one definition of an API schema: a
//! `$ref` inside resolves in the document as the author wrote it, recursion included, and nothing
//! is copied. Compiled validators are kept per pointer, as many parameters share one schema.
//! Formats are asserted, not just annotated, and 3.0's `uuid` (a 2019-09 format that draft 4 does
//! not know) is checked as well. No retriever is configured: nothing is ever fetched.

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::{Draft, Registry, Validator};
use serde_json::{json, Value};

use crate::document::Document;
use crate::load::Version;
use crate::pointer;

/// The URI the document is registered under (`.invalid` is reserved: it can never be fetched).
const BASE: &str = "https://document.openapi.invalid/openapi.json";
/// Errors reported per rejected value.
const MAX_ERRORS: usize = 3;

/// The validators of one document's schemas.
pub(crate) struct Validators {
    registry: Registry<'static>,
    draft: Draft,
    cache: HashMap<String, Result<Arc<Validator>, String>>,
}

impl Validators {
    /// Registers `doc` once.
    pub(crate) fn new(doc: &Document) -> Result<Validators, String> {
        let draft = match doc.version() {
            Version::V3_0 => Draft::Draft4,
            Version::V3_1 => Draft::Draft202012,
        };
        let registry = Registry::new()
            .draft(draft)
            .add(BASE, doc.shared())
            .and_then(|r| r.prepare())
            .map_err(|e| format!("the document cannot be registered for validation: {e}"))?;
        Ok(Validators {
            registry,
            draft,
            cache: HashMap::new(),
        })
    }

    /// Whether `value` is valid against the schema at `schema`; when not, why (the first few
    /// errors, each with the place in the value).
    pub(crate) fn check(&mut self, schema: &str, value: &Value) -> Result<(), String> {
        let validator = self.validator(schema)?;
        let errors: Vec<String> = validator
            .iter_errors(value)
            .take(MAX_ERRORS)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("at {at}: {e}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    fn validator(&mut self, schema: &str) -> Result<Arc<Validator>, String> {
        if let Some(v) = self.cache.get(schema) {
            return v.clone();
        }
        let wrapper = json!({ "$ref": format!("{BASE}{}", pointer::to_ref(schema)) });
        let mut options = jsonschema::options()
            .with_draft(self.draft)
            .with_registry(&self.registry)
            .should_validate_formats(true);
        if self.draft == Draft::Draft4 {
            options = options.with_format("uuid", |s: &str| uuid::Uuid::try_parse(s).is_ok());
        }
        let built = options
            .build(&wrapper)
            .map(Arc::new)
            .map_err(|e| format!("the schema at `{schema}` cannot be compiled: {e}"));
        self.cache.insert(schema.to_string(), built.clone());
        built
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(version: Version, schemas: Value) -> Document {
        let openapi = if version == Version::V3_0 {
            "3.0.3"
        } else {
            "3.1.0"
        };
        Document::new(
            json!({"openapi": openapi, "paths": {}, "components": {"schemas": schemas}}),
            version,
            "doc".into(),
        )
    }

    #[test]
    fn refs_formats_and_draft_semantics_are_the_validators() {
        let d = doc(
            Version::V3_0,
            json!({
                "Id": {"type": "string", "format": "uuid"},
                "Order": {"type": "object", "required": ["id", "n"], "properties": {
                    "id": {"$ref": "#/components/schemas/Id"},
                    "n": {"type": "integer", "minimum": 1, "exclusiveMinimum": true}}}
            }),
        );
        let mut v = Validators::new(&d).unwrap();
        let s = "/components/schemas/Order";
        assert!(v
            .check(
                s,
                &json!({"id": "0b4d6a43-6f0b-4e3f-9a59-2f3c1b0c8e6a", "n": 2})
            )
            .is_ok());
        let e = v.check(s, &json!({"id": "nope", "n": 1})).unwrap_err();
        assert!(e.contains("at /id") && e.contains("uuid"), "{e}");
        assert!(
            e.contains("at /n"),
            "draft 4's boolean exclusiveMinimum: {e}"
        );
    }

    #[test]
    fn a_3_1_document_is_2020_12() {
        let d = doc(
            Version::V3_1,
            json!({"N": {"type": ["integer", "null"], "exclusiveMinimum": 1}}),
        );
        let mut v = Validators::new(&d).unwrap();
        assert!(v.check("/components/schemas/N", &json!(null)).is_ok());
        assert!(v.check("/components/schemas/N", &json!(2)).is_ok());
        assert!(v.check("/components/schemas/N", &json!(1)).is_err());
    }
}
