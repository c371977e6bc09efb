//! Reading a document: bytes to a JSON tree, the version, the `$ref`s checked and, for a document
//! read from a file, the files it references bundled in.
//!
//! JSON is parsed by `serde_json`, YAML by `serde_norway` (the workspace's YAML reader), both into
//! one `serde_json::Value`, so everything after this module sees one tree whatever the syntax was;
//! the parsers' line and column reach the error. Both parsers stop at 128 levels of nesting, and the
//! text is refused above [`MAX_DOCUMENT_BYTES`] before either reads it.
//!
//! External references are followed only when they are plain relative or absolute file paths
//! and the document itself came from a file: each referenced file is read once, its own `$ref`s
//! rewritten to point into it, and it is stored under [`BUNDLE_KEY`] at the root, so every
//! `$ref` of the loaded tree is internal and names a JSON pointer. A URL reference, or a relative
//! one in a document that was fetched from a URL, is refused with the node's pointer: following
//! it would mean fetching from the network on the caller's behalf.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::LoadError;
use crate::pointer::{self, RefTarget};

/// Largest document accepted, in bytes (all bundled files together).
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024 * 1024;
/// Most files one document may reference, itself included.
pub const MAX_FILES: usize = 256;
/// The root key under which referenced files are stored after bundling.
pub const BUNDLE_KEY: &str = "x-openapi-bundled-files";

/// The OpenAPI version a document declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// 3.0.x: Schema Objects are an extended subset of JSON Schema draft 4/5 (`nullable`,
    /// boolean `exclusiveMinimum`, siblings of `$ref` ignored).
    V3_0,
    /// 3.1.x: Schema Objects are JSON Schema 2020-12.
    V3_1,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Version::V3_0 => "3.0",
            Version::V3_1 => "3.1",
        })
    }
}

/// A document parsed, its version known, its external references bundled and every `$ref`
/// checked to point at a node.
pub(crate) struct Loaded {
    pub json: Value,
    pub version: Version,
}

/// Reads the document at `path` and the files it references.
pub(crate) fn from_file(path: &Path) -> Result<Loaded, LoadError> {
    let origin = path.display().to_string();
    let bytes = read_file(path, &origin, 0)?;
    let json = parse(&bytes, &origin)?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    finish(json, &origin, Some((base, bytes.len())))
}

/// Reads a document from bytes the caller obtained (typically fetched from `origin`, a URL):
/// references to other documents are refused.
pub(crate) fn from_bytes(bytes: &[u8], origin: &str) -> Result<Loaded, LoadError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(LoadError::TooLarge {
            origin: origin.to_string(),
            limit: MAX_DOCUMENT_BYTES,
        });
    }
    let json = parse(bytes, origin)?;
    finish(json, origin, None)
}

fn finish(
    mut json: Value,
    origin: &str,
    file: Option<(PathBuf, usize)>,
) -> Result<Loaded, LoadError> {
    let version = version(&json, origin)?;
    let mut bundler = Bundler {
        files: Vec::new(),
        index: HashMap::new(),
        bytes: file.as_ref().map_or(0, |f| f.1),
    };
    let base = file.map(|f| f.0);
    let mut path = String::new();
    walk_refs(&mut json, Ctx::Keywords, &mut path, &mut |r, at| {
        bundler.rewrite(r, origin, at, base.as_deref(), None)
    })?;
    // Files may reference further files: rewrite each as it is added.
    let mut next = 0;
    while next < bundler.files.len() {
        let (dir, mut tree) = {
            let (p, v) = &mut bundler.files[next];
            (p.parent().map(Path::to_path_buf), std::mem::take(v))
        };
        let mut path = String::new();
        let file_origin = bundler.files[next].0.display().to_string();
        let result = walk_refs(&mut tree, Ctx::Keywords, &mut path, &mut |r, at| {
            bundler.rewrite(r, &file_origin, at, dir.as_deref(), Some(next))
        });
        bundler.files[next].1 = tree;
        result?;
        next += 1;
    }
    if !bundler.files.is_empty() {
        let files = bundler.files.into_iter().map(|(_, v)| v).collect();
        if let Value::Object(root) = &mut json {
            root.insert(BUNDLE_KEY.to_string(), Value::Array(files));
        }
    }
    check_refs(&json, origin)?;
    Ok(Loaded { json, version })
}

fn read_file(path: &Path, origin: &str, already: usize) -> Result<Vec<u8>, LoadError> {
    let meta = std::fs::metadata(path).map_err(|source| LoadError::Read {
        origin: origin.to_string(),
        source,
    })?;
    if meta.len() as usize > MAX_DOCUMENT_BYTES.saturating_sub(already) {
        return Err(LoadError::TooLarge {
            origin: origin.to_string(),
            limit: MAX_DOCUMENT_BYTES,
        });
    }
    std::fs::read(path).map_err(|source| LoadError::Read {
        origin: origin.to_string(),
        source,
    })
}

/// JSON when the first character is `{`, YAML otherwise (JSON is YAML too, but the JSON parser is
/// faster and its messages name JSON's terms).
fn parse(bytes: &[u8], origin: &str) -> Result<Value, LoadError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let (line, column) = line_column(bytes, e.valid_up_to());
        LoadError::Syntax {
            origin: origin.to_string(),
            line: Some(line),
            column: Some(column),
            message: "the document is not UTF-8 text".to_string(),
        }
    })?;
    let json = text.trim_start().starts_with('{');
    let value: Value = if json {
        serde_json::from_str(text).map_err(|e| LoadError::Syntax {
            origin: origin.to_string(),
            line: (e.line() > 0).then_some(e.line()),
            column: (e.column() > 0).then_some(e.column()),
            message: format!("invalid JSON: {}", strip_position(&e.to_string())),
        })?
    } else {
        serde_norway::from_str(text).map_err(|e| {
            let at = e.location();
            LoadError::Syntax {
                origin: origin.to_string(),
                line: at.as_ref().map(|l| l.line()),
                column: at.as_ref().map(|l| l.column()),
                message: format!("invalid YAML: {}", strip_position(&e.to_string())),
            }
        })?
    };
    if !value.is_object() {
        return Err(LoadError::Invalid {
            origin: origin.to_string(),
            pointer: String::new(),
            message:
                "the document is not an object (an OpenAPI document starts with `openapi: 3.x`)"
                    .to_string(),
        });
    }
    Ok(value)
}

/// The parsers append " at line L column C" to their messages; the error prints its own.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

fn line_column(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = &bytes[..offset.min(bytes.len())];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|b| **b != b'\n').count() + 1;
    (line, column)
}

fn version(json: &Value, origin: &str) -> Result<Version, LoadError> {
    let invalid = |pointer: &str, message: String| LoadError::Invalid {
        origin: origin.to_string(),
        pointer: pointer.to_string(),
        message,
    };
    if json.get("swagger").is_some() {
        return Err(invalid(
            "/swagger",
            "Swagger 2.0 is not supported: convert the document to OpenAPI 3 first \
             (for example with swagger2openapi)"
                .to_string(),
        ));
    }
    let Some(declared) = json.get("openapi") else {
        return Err(invalid(
            "",
            "no `openapi` field: this is not an OpenAPI document".to_string(),
        ));
    };
    let Some(declared) = declared.as_str() else {
        return Err(invalid(
            "/openapi",
            format!("`openapi` must be a string such as \"3.1.0\", found {declared}"),
        ));
    };
    if declared.starts_with("3.0.") || declared == "3.0" {
        Ok(Version::V3_0)
    } else if declared.starts_with("3.1.") || declared == "3.1" {
        Ok(Version::V3_1)
    } else {
        Err(invalid(
            "/openapi",
            format!("OpenAPI {declared} is not supported (3.0.x and 3.1.x are)"),
        ))
    }
}

/// Where a walk is in the document: what the keys of the current object are.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ctx {
    /// Keywords of an OpenAPI or JSON Schema object.
    Keywords,
    /// Names chosen by the author (`properties`, `paths`, `components/schemas`, …).
    Names,
    /// An OpenAPI `examples` map: names of Example objects.
    Examples,
    /// An Example object, whose `value` is literal data.
    Example,
}

/// Keywords whose value is a map of author-chosen names.
const NAME_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "definitions",
    "$defs",
    "dependentSchemas",
    "paths",
    "webhooks",
    "schemas",
    "responses",
    "parameters",
    "requestBodies",
    "headers",
    "securitySchemes",
    "links",
    "callbacks",
    "pathItems",
    "content",
    "encoding",
    "variables",
];

/// Keywords whose value is literal data, in which a `$ref` key means nothing.
const LITERALS: &[&str] = &["example", "default", "enum", "const"];

/// The context of `key`'s value in an object of context `ctx`, or None when the value is
/// literal data (an example, a default, an enum, an extension) that holds no reference.
pub(crate) fn child_ctx(ctx: Ctx, key: &str, child: &Value) -> Option<Ctx> {
    Some(match ctx {
        Ctx::Names => Ctx::Keywords,
        Ctx::Examples => Ctx::Example,
        Ctx::Example if key == "value" => return None,
        Ctx::Keywords | Ctx::Example => {
            if LITERALS.contains(&key) || key.starts_with("x-") {
                return None;
            }
            match (key, child) {
                ("examples", Value::Array(_)) => return None,
                ("examples", Value::Object(_)) => Ctx::Examples,
                (k, Value::Object(_)) if NAME_MAPS.contains(&k) => Ctx::Names,
                _ => Ctx::Keywords,
            }
        }
    })
}

/// Calls `f` with every `$ref` string of `value` that is a reference (not literal data in an
/// example, a default or an enum) and the pointer of the object holding it; `f` may rewrite it.
pub(crate) fn walk_refs<E>(
    value: &mut Value,
    ctx: Ctx,
    path: &mut String,
    f: &mut dyn FnMut(&mut String, &str) -> Result<(), E>,
) -> Result<(), E> {
    match value {
        Value::Object(map) => {
            if ctx != Ctx::Names {
                if let Some(Value::String(r)) = map.get_mut("$ref") {
                    f(r, path)?;
                }
            }
            for (key, child) in map.iter_mut() {
                if !child.is_object() && !child.is_array() {
                    continue;
                }
                let Some(child_ctx) = child_ctx(ctx, key, child) else {
                    continue;
                };
                let len = path.len();
                path.push('/');
                path.push_str(&pointer::escape(key));
                let r = walk_refs(child, child_ctx, path, f);
                path.truncate(len);
                r?;
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter_mut().enumerate() {
                if !child.is_object() && !child.is_array() {
                    continue;
                }
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                let r = walk_refs(child, Ctx::Keywords, path, f);
                path.truncate(len);
                r?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Calls `f` with every `$ref` of `value` (as [`walk_refs`] finds them) and the pointer of the
/// object holding it, without changing anything.
pub(crate) fn for_each_ref(
    value: &Value,
    ctx: Ctx,
    path: &mut String,
    f: &mut dyn FnMut(&str, &str) -> bool,
) -> bool {
    match value {
        Value::Object(map) => {
            if ctx != Ctx::Names {
                if let Some(Value::String(r)) = map.get("$ref") {
                    if !f(r, path) {
                        return false;
                    }
                }
            }
            for (key, child) in map {
                if !child.is_object() && !child.is_array() {
                    continue;
                }
                let Some(child_ctx) = child_ctx(ctx, key, child) else {
                    continue;
                };
                let len = path.len();
                path.push('/');
                path.push_str(&pointer::escape(key));
                let go_on = for_each_ref(child, child_ctx, path, f);
                path.truncate(len);
                if !go_on {
                    return false;
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                if !child.is_object() && !child.is_array() {
                    continue;
                }
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                let go_on = for_each_ref(child, Ctx::Keywords, path, f);
                path.truncate(len);
                if !go_on {
                    return false;
                }
            }
        }
        _ => {}
    }
    true
}

struct Bundler {
    files: Vec<(PathBuf, Value)>,
    index: HashMap<PathBuf, usize>,
    bytes: usize,
}

impl Bundler {
    /// Rewrites one `$ref` found at `at` in the root document (`file` None) or in bundled file
    /// `file` (read from `origin`), reading the file it names if it is not bundled yet.
    fn rewrite(
        &mut self,
        reference: &mut String,
        origin: &str,
        at: &str,
        dir: Option<&Path>,
        file: Option<usize>,
    ) -> Result<(), LoadError> {
        let invalid = |message: String| LoadError::Invalid {
            origin: origin.to_string(),
            pointer: format!("{at}/$ref"),
            message,
        };
        let (document, fragment) = match pointer::parse_ref(reference) {
            RefTarget::Internal(p) => match file {
                None => return Ok(()),
                Some(_) => (None, p),
            },
            RefTarget::Anchor(a) => {
                return Err(invalid(format!(
                    "`$ref: {reference}` names the anchor `{a}`; only JSON-pointer references \
                     (`#/components/…`) are supported"
                )))
            }
            RefTarget::External { document, pointer } => (Some(document), pointer),
        };
        let index = match document {
            None => file.unwrap_or(0),
            Some(document) => {
                if pointer::is_url(&document) {
                    return Err(invalid(format!(
                        "external reference `{reference}` is not supported: bundle the document \
                         into one file first (for example `redocly bundle`), or save the \
                         referenced documents beside it and reference them by relative path"
                    )));
                }
                let Some(dir) = dir else {
                    return Err(invalid(format!(
                        "reference `{reference}` names another file, and a document read from \
                         a URL has no directory to find it in: bundle the document into one file \
                         first (for example `redocly bundle`)"
                    )));
                };
                let path = dir.join(&document);
                let canonical = path.canonicalize().map_err(|e| {
                    invalid(format!(
                        "reference `{reference}`: cannot read {}: {e}",
                        path.display()
                    ))
                })?;
                match self.index.get(&canonical) {
                    Some(i) => *i,
                    None => {
                        if self.files.len() + 1 >= MAX_FILES {
                            return Err(invalid(format!(
                                "more than {MAX_FILES} files are referenced"
                            )));
                        }
                        let origin = canonical.display().to_string();
                        let bytes = read_file(&canonical, &origin, self.bytes)?;
                        self.bytes += bytes.len();
                        let tree = parse_any(&bytes, &origin)?;
                        let i = self.files.len();
                        self.files.push((canonical.clone(), tree));
                        self.index.insert(canonical, i);
                        i
                    }
                }
            }
        };
        *reference = pointer::to_ref(&format!("/{BUNDLE_KEY}/{index}{fragment}"));
        Ok(())
    }
}

/// A referenced file may hold any JSON value (a lone schema, say), not only a document.
fn parse_any(bytes: &[u8], origin: &str) -> Result<Value, LoadError> {
    let text = std::str::from_utf8(bytes).map_err(|_| LoadError::Syntax {
        origin: origin.to_string(),
        line: None,
        column: None,
        message: "the file is not UTF-8 text".to_string(),
    })?;
    if text.trim_start().starts_with(['{', '[']) {
        serde_json::from_str(text).map_err(|e| LoadError::Syntax {
            origin: origin.to_string(),
            line: Some(e.line()),
            column: Some(e.column()),
            message: format!("invalid JSON: {}", strip_position(&e.to_string())),
        })
    } else {
        serde_norway::from_str(text).map_err(|e| {
            let at = e.location();
            LoadError::Syntax {
                origin: origin.to_string(),
                line: at.as_ref().map(|l| l.line()),
                column: at.as_ref().map(|l| l.column()),
                message: format!("invalid YAML: {}", strip_position(&e.to_string())),
            }
        })
    }
}

/// Every `$ref` names a node that exists.
fn check_refs(json: &Value, origin: &str) -> Result<(), LoadError> {
    let mut missing: Option<(String, String)> = None;
    let mut path = String::new();
    for_each_ref(json, Ctx::Keywords, &mut path, &mut |r, at| {
        if let RefTarget::Internal(p) = pointer::parse_ref(r) {
            if json.pointer(&p).is_none() {
                missing = Some((r.to_string(), at.to_string()));
                return false;
            }
        }
        true
    });
    match missing {
        None => Ok(()),
        Some((r, at)) => Err(LoadError::Invalid {
            origin: origin.to_string(),
            pointer: format!("{at}/$ref"),
            message: format!("`$ref: {r}` points to nothing in the document"),
        }),
    }
}
