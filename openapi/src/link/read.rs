//! What a source gives in a recorded exchange: a field of the answer or of the request, the
//! resource's segment of a `Location` header, a link's runtime expression evaluated.

use serde_json::Value;

use super::binding::ValueSource;
use super::names::{answer_names, is_param, normalized, wrappers};
use crate::operation::{Expression, Location};
use crate::pointer;
use crate::request::Request;

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

/// The value `source` gives in `recorded`, for parameter `parameter` of a request to `template`.
pub(super) fn read(
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

#[cfg(test)]
mod tests {
    use super::*;

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
