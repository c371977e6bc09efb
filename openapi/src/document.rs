//! The loaded document: one JSON tree, every `$ref` in it internal, its schemas in their draft's
//! terms (see `dialect`), and the following of references between OpenAPI objects.

use std::sync::Arc;

use serde_json::Value;

use crate::error::LoadError;
use crate::load::Version;
use crate::pointer::{self, RefTarget};

/// Longest chain of `$ref` to `$ref` followed before giving up.
pub const MAX_REF_CHAIN: usize = 64;

/// A loaded OpenAPI document.
#[derive(Debug, Clone)]
pub struct Document {
    json: Arc<Value>,
    version: Version,
    origin: String,
}

impl Document {
    pub(crate) fn new(json: Value, version: Version, origin: String) -> Document {
        Document {
            json: Arc::new(json),
            version,
            origin,
        }
    }

    /// The tree, with referenced files bundled in and 3.0 schemas in draft 4 terms.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// The tree, shared (for a validator's registry, which keeps it).
    pub(crate) fn shared(&self) -> Arc<Value> {
        Arc::clone(&self.json)
    }

    /// The OpenAPI version the document declares.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Where the document came from: its file or URL, as given.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The node at `pointer`.
    pub fn at(&self, pointer: &str) -> Option<&Value> {
        self.json.pointer(pointer)
    }

    /// An error about the node at `pointer`.
    pub(crate) fn invalid(&self, pointer: &str, message: impl Into<String>) -> LoadError {
        LoadError::Invalid {
            origin: self.origin.clone(),
            pointer: pointer.to_string(),
            message: message.into(),
        }
    }

    /// `node` (found at `at`) with its `$ref`s followed to the object they name: the object and
    /// its pointer. A chain that comes back to itself is an error naming the chain.
    pub(crate) fn resolve<'a>(
        &'a self,
        at: &str,
        node: &'a Value,
    ) -> Result<(String, &'a Value), LoadError> {
        let mut here = at.to_string();
        let mut node = node;
        let mut chain: Vec<String> = Vec::new();
        while let Some(r) = node.get("$ref").and_then(Value::as_str) {
            let RefTarget::Internal(target) = pointer::parse_ref(r) else {
                return Err(self.invalid(
                    &pointer::push(&here, "$ref"),
                    format!("`$ref: {r}` is not a reference into this document"),
                ));
            };
            if chain.contains(&target) || chain.len() >= MAX_REF_CHAIN {
                chain.push(target);
                return Err(self.invalid(at, format!("circular `$ref`: {}", chain.join(" → "))));
            }
            chain.push(target.clone());
            node = self.json.pointer(&target).ok_or_else(|| {
                self.invalid(
                    &pointer::push(&here, "$ref"),
                    format!("`$ref: {r}` points to nothing in the document"),
                )
            })?;
            here = target;
        }
        Ok((here, node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chains_are_followed_and_cycles_named() {
        let d = Document::new(
            json!({
                "components": {"parameters": {
                    "A": {"$ref": "#/components/parameters/B"},
                    "B": {"name": "b", "in": "query"},
                    "X": {"$ref": "#/components/parameters/Y"},
                    "Y": {"$ref": "#/components/parameters/X"}
                }}
            }),
            Version::V3_0,
            "doc.yaml".into(),
        );
        let a = d.at("/components/parameters/A").unwrap();
        let (p, v) = d.resolve("/components/parameters/A", a).unwrap();
        assert_eq!(p, "/components/parameters/B");
        assert_eq!(v["name"], "b");
        let x = d.at("/components/parameters/X").unwrap();
        let e = d
            .resolve("/components/parameters/X", x)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "doc.yaml: at `/components/parameters/X`: circular `$ref`: /components/parameters/Y → \
             /components/parameters/X → /components/parameters/Y"
        );
    }
}
