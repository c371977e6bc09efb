//! Shared by the integration tests: a second, test-side validation of a built request, so a
//! request the builder returned is checked by code that is not the builder's.

#![allow(dead_code)]

use std::collections::HashMap;

use openapi::{Api, Request};
use serde_json::{json, Value};

/// Validators built here, with `jsonschema`, over one document.
pub struct Checker<'a> {
    api: &'a Api,
    draft: jsonschema::Draft,
    registry: jsonschema::Registry<'a>,
    cache: HashMap<String, jsonschema::Validator>,
}

impl<'a> Checker<'a> {
    /// Registers `api`'s document once.
    pub fn new(api: &'a Api) -> Checker<'a> {
        let draft = match api.version() {
            openapi::Version::V3_0 => jsonschema::Draft::Draft4,
            openapi::Version::V3_1 => jsonschema::Draft::Draft202012,
        };
        let registry = jsonschema::Registry::new()
            .draft(draft)
            .add("https://test.invalid/doc.json", api.document().json())
            .and_then(|r| r.prepare())
            .expect("the document registers");
        Checker {
            api,
            draft,
            registry,
            cache: HashMap::new(),
        }
    }

    fn check(&mut self, schema: &str, value: &Value, what: &str) -> Result<(), String> {
        if !self.cache.contains_key(schema) {
            let fragment: String = schema
                .chars()
                .map(|c| match c {
                    '{' => "%7B".to_string(),
                    '}' => "%7D".to_string(),
                    c => c.to_string(),
                })
                .collect();
            let validator = jsonschema::options()
                .with_draft(self.draft)
                .with_registry(&self.registry)
                .should_validate_formats(true)
                .build(&json!({"$ref": format!("https://test.invalid/doc.json#{fragment}")}))
                .map_err(|e| format!("{what}: {e}"))?;
            self.cache.insert(schema.to_string(), validator);
        }
        let errors: Vec<String> = self.cache[schema]
            .iter_errors(value)
            .map(|e| e.to_string())
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("{what} = {value}: {}", errors.join("; ")))
        }
    }

    /// Checks every parameter value and the body of `request` against its schema, that every
    /// required parameter and a required body are there, and that a JSON body's bytes are its
    /// value.
    pub fn check_request(&mut self, request: &Request) -> Result<(), String> {
        let api = self.api;
        let op = api
            .operation(&request.operation_id)
            .ok_or_else(|| format!("no operation {}", request.operation_id))?;
        for p in &request.parameters {
            let declared = op
                .parameter(p.location, &p.name)
                .ok_or_else(|| format!("{}: parameter {} is not declared", op.id, p.name))?;
            if let Some(schema) = &declared.schema {
                self.check(schema, &p.value, &format!("{} parameter {}", op.id, p.name))?;
            }
        }
        for declared in op.parameters.iter().filter(|p| p.required) {
            if request.param(declared.location, &declared.name).is_none() {
                return Err(format!(
                    "{}: required parameter {} is missing",
                    op.id, declared.name
                ));
            }
        }
        if let Some(body) = &request.body {
            let media = op
                .body
                .as_ref()
                .and_then(|b| b.preferred())
                .ok_or("a body nobody asked for")?;
            if let Some(schema) = &media.schema {
                self.check(schema, &body.value, &format!("{} body", op.id))?;
            }
            if media.is_json() {
                let sent: Value = serde_json::from_slice(&body.bytes).map_err(|e| e.to_string())?;
                if sent != body.value {
                    return Err(format!("{}: the body bytes are not the body value", op.id));
                }
            }
        } else if op.body.as_ref().is_some_and(|b| b.required) {
            return Err(format!("{}: the required body is missing", op.id));
        }
        Ok(())
    }
}

/// One request checked by a fresh [`Checker`].
pub fn check_request(api: &Api, request: &Request) -> Result<(), String> {
    Checker::new(api).check_request(request)
}
