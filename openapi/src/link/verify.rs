//! How to look at what an operation did: the document's own GET of the resource it touched, and
//! of the collection.

use serde_json::Value;

use super::binding::ValueSource;
use super::names::{is_param, shape};
use super::sources::creation_sources;
use crate::operation::{Method, Operation};

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

/// How to look at what `op` did: the GET of its resource and of its collection.
pub(super) fn verification(
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
