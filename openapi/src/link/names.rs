//! The naming conventions the plan finds resources by: a path template's shape, the field names
//! that may carry a path parameter's value (`orderId`, `order_id`, `id`, …), and the objects an
//! answer may wrap its resource in.

use std::collections::BTreeSet;

/// A template's segments with parameter names erased: `/orders/{id}` and `/orders/{orderId}` are
/// the same shape.
pub(super) fn shape(template: &str) -> Vec<String> {
    template
        .trim_end_matches('/')
        .split('/')
        .map(|s| {
            if is_param(s) {
                "{}".to_string()
            } else {
                s.to_string()
            }
        })
        .collect()
}

pub(super) fn is_param(segment: &str) -> bool {
    segment.starts_with('{') && segment.ends_with('}') && segment.len() > 2
}

pub(super) fn singular(word: &str) -> String {
    let w = word.to_ascii_lowercase();
    if let Some(stem) = w.strip_suffix("ies") {
        format!("{stem}y")
    } else if w.ends_with("sses")
        || w.ends_with("xes")
        || w.ends_with("ches")
        || w.ends_with("shes")
    {
        w[..w.len() - 2].to_string()
    } else if let Some(stem) = w
        .strip_suffix('s')
        .filter(|s| !s.ends_with('s') && !s.ends_with('u') && !s.ends_with('i'))
    {
        stem.to_string()
    } else {
        w
    }
}

/// Field names that may carry the value of path parameter `param` that follows the collection
/// segment `collection`, most specific first.
pub(super) fn candidate_fields(param: &str, collection: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |s: String| {
        if !s.is_empty() && !out.contains(&s) {
            out.push(s);
        }
    };
    add(param.to_string());
    let snake = to_snake(param);
    add(snake.clone());
    add(to_camel(&snake));
    add(snake.replace('_', "-"));
    let one = singular(collection).replace('-', "_");
    if let Some(rest) = snake.strip_prefix(&format!("{one}_")) {
        add(rest.to_string());
        add(to_camel(rest));
    }
    let lower = snake.as_str();
    let id_like = lower == "id"
        || lower.ends_with("_id")
        || lower == one
        || ["key", "uuid", "slug", "number", "name", "code"]
            .iter()
            .any(|w| lower == *w || lower.ends_with(&format!("_{w}")));
    if id_like {
        add("id".to_string());
        add(format!("{one}_id"));
        add(to_camel(&format!("{one}_id")));
        add("uuid".to_string());
    }
    out
}

fn to_snake(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c == '-' {
            out.push('_');
        } else {
            out.push(c);
        }
    }
    out
}

fn to_camel(snake: &str) -> String {
    let mut out = String::new();
    let mut up = false;
    for c in snake.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.push(c.to_ascii_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The objects an answer may wrap its resource in: `{"data": {"id": …}}`; only these, as the
/// `id` of any other object inside (a pet's `category`) names something else.
pub(super) fn wrappers(collection: &str) -> Vec<String> {
    let mut w: Vec<String> = ["data", "item", "result", "resource", "object"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let one = singular(collection);
    if !w.contains(&one) {
        w.push(one);
    }
    w
}

/// A field name without case or separators: `accountId`, `account_id` and `Account-ID` are
/// one name.
pub(super) fn normalized(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The names an answer's field carrying `param` may have, one spelling per normalized name, most
/// specific first: the parameter's own name (`account_id`), then, for an identifier, `id`, the
/// resource's `{name}_id` and `uuid` (`candidate_fields`' order).
pub(super) fn answer_names(param: &str, collection: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    candidate_fields(param, collection)
        .into_iter()
        .filter(|n| seen.insert(normalized(n)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_candidates_follow_the_naming_conventions() {
        let c = candidate_fields("orderId", "orders");
        assert_eq!(c[..4], ["orderId", "order_id", "order-id", "id"]);
        let c = candidate_fields("issue_number", "issues");
        assert!(c.contains(&"number".to_string()), "{c:?}");
        assert_eq!(singular("categories"), "category");
        assert_eq!(singular("addresses"), "address");
        assert_eq!(singular("status"), "status");
        assert_eq!(singular("orders"), "order");
    }
}
