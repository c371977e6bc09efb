//! What credentials an operation asks for, said as the headers (or query parameters, or
//! cookies) a caller must supply: this crate never invents a credential, so a request it builds
//! for a protected operation needs the caller's `-H 'Authorization: …'`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::document::Document;
use crate::error::LoadError;
use crate::parameter::Location;
use crate::pointer;

/// A security scheme of `components/securitySchemes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scheme {
    ApiKey { name: String, location: Location },
    Http { scheme: String },
    Bearer,
    MutualTls,
}

/// Where a credential goes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Carrier {
    /// A request header of this name.
    Header(String),
    /// A query parameter of this name.
    Query(String),
    /// A cookie of this name.
    Cookie(String),
    /// A TLS client certificate.
    ClientCertificate,
}

/// One credential a requirement needs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Credential {
    /// The scheme's name in `components/securitySchemes`.
    pub scheme: String,
    /// Where it goes.
    pub carrier: Carrier,
    /// What its value looks like: `Bearer <token>`.
    pub hint: String,
}

impl Credential {
    /// How a user passes it on the command line: `-H 'Authorization: Bearer <token>'`.
    pub fn flag(&self) -> String {
        match &self.carrier {
            Carrier::Header(name) => format!("-H '{name}: {}'", self.hint),
            Carrier::Query(name) => format!("?{name}={} in the URL", self.hint),
            Carrier::Cookie(name) => format!("-H 'Cookie: {name}={}'", self.hint),
            Carrier::ClientCertificate => "--cert FILE --key FILE".to_string(),
        }
    }
}

/// The credentials an operation accepts: any one of `alternatives`, each needing all of its
/// credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// The alternatives; none means the operation asks for nothing, and an empty alternative
    /// means anonymous calls are accepted too.
    pub alternatives: Vec<Vec<Credential>>,
}

impl Security {
    /// Whether a call without any credential is refused by the document's word.
    pub fn is_required(&self) -> bool {
        !self.alternatives.is_empty() && self.alternatives.iter().all(|a| !a.is_empty())
    }

    /// The header names of the first alternative that header flags can satisfy (the one a user
    /// would pass with `-H`), or of the first alternative when none can.
    pub fn headers(&self) -> Vec<String> {
        let by_headers = |a: &&Vec<Credential>| {
            a.iter()
                .all(|c| matches!(c.carrier, Carrier::Header(_) | Carrier::Cookie(_)))
        };
        let Some(chosen) = self
            .alternatives
            .iter()
            .find(by_headers)
            .or(self.alternatives.first())
        else {
            return Vec::new();
        };
        let mut out: Vec<String> = chosen
            .iter()
            .filter_map(|c| match &c.carrier {
                Carrier::Header(n) => Some(n.clone()),
                Carrier::Cookie(_) => Some("Cookie".to_string()),
                _ => None,
            })
            .collect();
        out.dedup();
        out
    }

    /// One line for a user: what to pass, or `none`.
    pub fn describe(&self) -> String {
        if !self.is_required() {
            return "none".to_string();
        }
        self.alternatives
            .iter()
            .map(|a| {
                a.iter()
                    .map(|c| format!("{} ({})", c.flag(), c.scheme))
                    .collect::<Vec<_>>()
                    .join(" and ")
            })
            .collect::<Vec<_>>()
            .join(", or ")
    }
}

/// The document's security schemes by name.
pub(crate) fn read_schemes(doc: &Document) -> Result<BTreeMap<String, Scheme>, LoadError> {
    let mut out = BTreeMap::new();
    let Some(Value::Object(schemes)) = doc
        .json()
        .get("components")
        .and_then(|c| c.get("securitySchemes"))
    else {
        return Ok(out);
    };
    for (name, s) in schemes {
        let at = pointer::push("/components/securitySchemes", name);
        let (at, s) = doc.resolve(&at, s)?;
        let kind = s.get("type").and_then(Value::as_str).unwrap_or("");
        let scheme = match kind {
            "apiKey" => {
                let key = s
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| doc.invalid(&at, "an apiKey security scheme needs `name`"))?;
                let location = match s.get("in").and_then(Value::as_str) {
                    Some("header") => Location::Header,
                    Some("query") => Location::Query,
                    Some("cookie") => Location::Cookie,
                    _ => {
                        return Err(doc.invalid(
                            &at,
                            "an apiKey security scheme needs `in`: header, query or cookie",
                        ))
                    }
                };
                Scheme::ApiKey {
                    name: key.to_string(),
                    location,
                }
            }
            "http" => Scheme::Http {
                scheme: s
                    .get("scheme")
                    .and_then(Value::as_str)
                    .unwrap_or("bearer")
                    .to_ascii_lowercase(),
            },
            "oauth2" | "openIdConnect" => Scheme::Bearer,
            "mutualTLS" => Scheme::MutualTls,
            other => {
                return Err(doc.invalid(
                    &pointer::push(&at, "type"),
                    format!(
                        "security scheme type `{other}` is not one of apiKey, http, oauth2, \
                         openIdConnect, mutualTLS"
                    ),
                ))
            }
        };
        out.insert(name.clone(), scheme);
    }
    Ok(out)
}

/// A `security` list: its alternatives, each scheme turned into the credential it needs. A
/// requirement naming a scheme the document does not define is a document error, but it does
/// not stop a request from being built: it is dropped with a warning.
pub(crate) fn read_requirements(
    doc: &Document,
    at: &str,
    list: &Value,
    schemes: &BTreeMap<String, Scheme>,
    warnings: &mut Vec<String>,
) -> Result<Security, LoadError> {
    let Value::Array(items) = list else {
        return Err(doc.invalid(at, "`security` must be a list of requirement objects"));
    };
    let mut alternatives = Vec::new();
    for (i, req) in items.iter().enumerate() {
        let Value::Object(req) = req else {
            return Err(doc.invalid(
                &pointer::push(at, &i.to_string()),
                "a security requirement must be an object",
            ));
        };
        let mut all = Vec::new();
        let mut unknown = false;
        for name in req.keys() {
            let Some(scheme) = schemes.get(name) else {
                warnings.push(format!(
                    "{}: security scheme `{name}` is not in components/securitySchemes; this \
                     requirement is ignored",
                    pointer::push(&pointer::push(at, &i.to_string()), name)
                ));
                unknown = true;
                continue;
            };
            let (carrier, hint) = match scheme {
                Scheme::ApiKey { name, location } => (
                    match location {
                        Location::Query => Carrier::Query(name.clone()),
                        Location::Cookie => Carrier::Cookie(name.clone()),
                        _ => Carrier::Header(name.clone()),
                    },
                    "<key>".to_string(),
                ),
                Scheme::Http { scheme } => (
                    Carrier::Header("Authorization".into()),
                    match scheme.as_str() {
                        "basic" => "Basic <base64 of user:password>".to_string(),
                        "bearer" => "Bearer <token>".to_string(),
                        other => format!("{other} <credentials>"),
                    },
                ),
                Scheme::Bearer => (
                    Carrier::Header("Authorization".into()),
                    "Bearer <token>".to_string(),
                ),
                Scheme::MutualTls => (Carrier::ClientCertificate, String::new()),
            };
            all.push(Credential {
                scheme: name.clone(),
                carrier,
                hint,
            });
        }
        if !unknown {
            alternatives.push(all);
        }
    }
    Ok(Security { alternatives })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Version;
    use serde_json::json;

    fn doc() -> Document {
        Document::new(
            json!({"components": {"securitySchemes": {
                "key": {"type": "apiKey", "name": "X-API-Key", "in": "header"},
                "q": {"type": "apiKey", "name": "api_key", "in": "query"},
                "bearer": {"type": "http", "scheme": "bearer"},
                "oauth": {"type": "oauth2", "flows": {}}
            }}}),
            Version::V3_1,
            "doc".into(),
        )
    }

    #[test]
    fn requirements_become_headers() {
        let d = doc();
        let schemes = read_schemes(&d).unwrap();
        let w = &mut Vec::new();
        let s = read_requirements(
            &d,
            "/security",
            &json!([{"q": []}, {"bearer": []}]),
            &schemes,
            w,
        )
        .unwrap();
        assert!(s.is_required());
        assert_eq!(
            s.headers(),
            ["Authorization"],
            "the header-only alternative"
        );
        assert_eq!(
            s.describe(),
            "?api_key=<key> in the URL (q), or -H 'Authorization: Bearer <token>' (bearer)"
        );
        let both = read_requirements(
            &d,
            "/security",
            &json!([{"key": [], "oauth": []}]),
            &schemes,
            w,
        )
        .unwrap();
        assert_eq!(both.headers(), ["X-API-Key", "Authorization"]);
        let optional =
            read_requirements(&d, "/security", &json!([{}, {"key": []}]), &schemes, w).unwrap();
        assert!(!optional.is_required());
        assert_eq!(optional.describe(), "none");
        assert!(w.is_empty());
    }

    #[test]
    fn an_unknown_scheme_is_a_warning_and_its_requirement_dropped() {
        let d = doc();
        let schemes = read_schemes(&d).unwrap();
        let mut w = Vec::new();
        let s = read_requirements(
            &d,
            "/security",
            &json!([{"nope": []}, {"key": []}]),
            &schemes,
            &mut w,
        )
        .unwrap();
        assert_eq!(s.headers(), ["X-API-Key"]);
        assert_eq!(
            w,
            ["/security/0/nope: security scheme `nope` is not in components/securitySchemes; this \
              requirement is ignored"]
        );
    }
}
