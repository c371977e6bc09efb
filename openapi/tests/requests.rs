//! Requests built for the fixtures' operations: examples first, generated values that keep every
//! constraint, serialization by style, reproducibility, and a stated reason where no valid request
//! exists.

mod common;

use std::path::Path;

use openapi::{Api, Config, Location, RequestBuilder, Source};
use serde_json::json;

fn load(name: &str) -> Api {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    Api::from_file(&path, &Config::default()).unwrap()
}

#[test]
fn every_fixture_operation_gets_a_valid_request_or_a_stated_reason() {
    for name in ["orders-3.0.yaml", "orders-3.1.yaml", "split/openapi.yaml"] {
        let api = load(name);
        for seed in 0..20 {
            let mut builder = RequestBuilder::new(&api, seed).unwrap();
            for op in api.operations() {
                match builder.build(op) {
                    Ok(request) => {
                        if let Err(e) = common::check_request(&api, &request) {
                            panic!("{name} seed {seed}: {e}");
                        }
                    }
                    Err(why) => assert_eq!(op.id, "impossible", "{name} seed {seed}: {why}"),
                }
            }
        }
    }
}

#[test]
fn a_request_that_cannot_be_made_valid_is_a_stated_reason() {
    let api = load("orders-3.0.yaml");
    let mut builder = RequestBuilder::new(&api, 1).unwrap();
    let why = builder
        .build(api.operation("impossible").unwrap())
        .unwrap_err();
    assert_eq!(why.label, "POST /impossible");
    assert_eq!(why.part, "body (application/json)");
    assert!(
        why.reason.starts_with("after 10 tries, ")
            && why.reason.contains("no integer lies between its bounds"),
        "{}",
        why.reason
    );
    // A header whose schema admits only text a header cannot carry.
    let text = "openapi: 3.1.0\npaths:\n  /a:\n    post:\n      parameters:\n        - {name: X-Name, in: header, \
                required: true, schema: {type: string, pattern: '^\\u00e9+$'}}\n      responses: {'200': {description: x}}\n";
    let api = Api::from_bytes(text.as_bytes(), "doc", &Config::default()).unwrap();
    let mut builder = RequestBuilder::new(&api, 1).unwrap();
    let why = builder.build(&api.operations()[0]).unwrap_err();
    assert_eq!(why.part, "header parameter `X-Name`");
    assert!(
        why.reason.contains("cannot be sent as a header value"),
        "{}",
        why.reason
    );
}

#[test]
fn document_examples_come_first_and_invalid_ones_are_passed_over() {
    let api = load("orders-3.0.yaml");
    let mut builder = RequestBuilder::new(&api, 3).unwrap();
    let request = builder
        .build(api.operation("createOrder").unwrap())
        .unwrap();
    let body = request.body.as_ref().unwrap();
    // `broken` (sku is a number) is refused; `good` is used as written.
    assert_eq!(
        body.value,
        json!({"sku": "ABC-123", "quantity": 2, "note": null})
    );
    assert_eq!(
        body.source,
        Source::Example("/components/examples/GoodOrder/value".into())
    );
    assert_eq!(body.content_type, "application/json");
    let request_id = request.param(Location::Header, "x-request-id").unwrap();
    assert_eq!(
        request_id.value,
        json!("5c1f5b2e-2c7e-4d0b-9a52-0b1f3c3f6a11")
    );
    let key = request.param(Location::Header, "Idempotency-Key").unwrap();
    assert!(matches!(key.source, Source::Generated { .. }));
    assert!(
        uuid::Uuid::try_parse(key.value.as_str().unwrap()).is_ok(),
        "{}",
        key.value
    );
    assert_eq!(request.key_header.as_deref(), Some("idempotency-key"));
    assert!(request.param(Location::Header, "Accept").is_none());
}

#[test]
fn generated_values_keep_the_schema_and_are_written_in_their_style() {
    let api = load("orders-3.0.yaml");
    let sku = regex::Regex::new(r"^[A-Z]{3}-[0-9]{3}$").unwrap();
    let name = regex::Regex::new(r"^w-[a-z0-9]+$").unwrap();
    let session = regex::Regex::new("^session=[a-z]{8}$").unwrap();
    for seed in 0..30 {
        let mut builder = RequestBuilder::new(&api, seed).unwrap();
        let put = builder.build(api.operation("putWidget").unwrap()).unwrap();
        let n = put
            .param(Location::Path, "name")
            .unwrap()
            .value
            .as_str()
            .unwrap()
            .to_string();
        assert!(name.is_match(&n) && (3..=10).contains(&n.len()), "{n}");
        assert!(put.target().starts_with("/widgets/w-"), "{}", put.target());
        let body = put.body.as_ref().unwrap();
        assert_eq!(body.content_type, "application/x-www-form-urlencoded");
        let form = String::from_utf8(body.bytes.clone()).unwrap();
        assert!(
            form.starts_with("colour=red") || form.starts_with("colour=blue"),
            "{form}"
        );
        if let Some(size) = body.value.get("size") {
            assert!([10, 15, 20].contains(&size.as_i64().unwrap()), "{size}");
        }
        let get = builder.build(api.operation("getWidget").unwrap()).unwrap();
        assert!(
            get.target().ends_with("?filter%5Bcolour%5D=red"),
            "{}",
            get.target()
        );
        let list = builder.build(api.operation("listOrders").unwrap()).unwrap();
        let limit = list
            .param(Location::Query, "limit")
            .unwrap()
            .value
            .as_i64()
            .unwrap();
        assert!((1..=100).contains(&limit));
        assert_eq!(list.target(), format!("/orders?limit={limit}"));
        let pay = builder
            .build(api.operation("post_orders_orderid_pay").unwrap())
            .unwrap();
        let cookie = pay
            .headers()
            .into_iter()
            .find(|(k, _)| k == "Cookie")
            .unwrap()
            .1;
        assert!(session.is_match(&cookie), "{cookie}");
    }
    // Without examples, the body is generated: pattern, bounds, the discriminator.
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/orders-3.0.yaml"),
    )
    .unwrap()
    .replace("            examples:\n              broken: {value: {sku: 12}}\n              good: {$ref: \"#/components/examples/GoodOrder\"}\n", "");
    let api = Api::from_bytes(text.as_bytes(), "no-examples", &Config::default()).unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for seed in 0..30 {
        let mut builder = RequestBuilder::new(&api, seed).unwrap();
        let r = builder
            .build(api.operation("createOrder").unwrap())
            .unwrap();
        let v = &r.body.as_ref().unwrap().value;
        assert!(sku.is_match(v["sku"].as_str().unwrap()), "{v}");
        let q = v["quantity"].as_i64().unwrap();
        assert!((1..=50).contains(&q), "{v}");
        if let Some(d) = v.get("delivery") {
            let kind = d["kind"].as_str().unwrap();
            assert!(
                kind == "pickup" && d.get("store").is_some()
                    || kind == "courier" && d.get("address").is_some(),
                "{v}"
            );
            kinds.insert(kind.to_string());
        }
        assert!(v.get("id").is_none(), "readOnly `id` is not sent: {v}");
        common::check_request(&api, &r).unwrap();
    }
    assert_eq!(
        kinds.len(),
        2,
        "both branches of the oneOf are drawn: {kinds:?}"
    );
}

#[test]
fn json_schema_2020_12_keywords_are_kept_in_3_1() {
    let api = load("orders-3.1.yaml");
    for seed in 0..30 {
        let mut builder = RequestBuilder::new(&api, seed).unwrap();
        let r = builder
            .build(api.operation("createOrder").unwrap())
            .unwrap();
        let v = &r.body.as_ref().unwrap().value;
        let q = v["quantity"].as_i64().unwrap();
        assert!(q == 1 || q == 2, "exclusive bounds 0 and 3: {v}");
        let point = v["point"].as_array().unwrap();
        assert_eq!(point.len(), 2, "{v}");
        assert!(
            point[0].as_f64().unwrap().abs() <= 90.0 && point[1].as_f64().unwrap().abs() <= 180.0
        );
        if let Some(c) = v.get("channel") {
            assert_eq!(c, "web");
        }
        if let Some(tags) = v.get("tags") {
            assert!(
                tags.as_object()
                    .unwrap()
                    .values()
                    .all(|t| t.as_i64().unwrap() >= 0),
                "{v}"
            );
        }
        let key = r.param(Location::Header, "idempotency-key").unwrap();
        assert!((8..=64).contains(&key.value.as_str().unwrap().len()));
        let patch = builder.build(api.operation("patchOrder").unwrap()).unwrap();
        let p = &patch.body.as_ref().unwrap();
        assert!(
            p.value["note"].is_string(),
            "a `$ref` sibling `required` counts in 3.1: {}",
            p.value
        );
        assert_eq!(p.content_type, "application/merge-patch+json");
        let id = patch
            .param(Location::Path, "id")
            .unwrap()
            .value
            .as_i64()
            .unwrap();
        assert!(id > 0);
    }
}

#[test]
fn the_same_seed_gives_byte_identical_requests_whatever_else_is_built() {
    let api = load("orders-3.0.yaml");
    let all = |seed: u64| -> Vec<Vec<u8>> {
        let mut builder = RequestBuilder::new(&api, seed).unwrap();
        builder
            .build_all()
            .into_iter()
            .map(|r| {
                r.map(|r| r.to_http())
                    .unwrap_or_else(|e| e.to_string().into_bytes())
            })
            .collect()
    };
    let first = all(5);
    assert_eq!(first, all(5));
    assert_ne!(first, all(6));
    // One operation alone, as `--only` would build it, is the same bytes.
    let index = api
        .operations()
        .iter()
        .position(|o| o.id == "putWidget")
        .unwrap();
    let mut alone = RequestBuilder::new(&api, 5).unwrap();
    let one = alone.build(&api.operations()[index]).unwrap().to_http();
    assert_eq!(one, first[index]);
}

/// The test-side check is not a formality: a value changed after building fails it.
#[test]
fn a_tampered_request_fails_the_independent_check() {
    let api = load("orders-3.0.yaml");
    let mut builder = RequestBuilder::new(&api, 1).unwrap();
    let mut list = builder.build(api.operation("listOrders").unwrap()).unwrap();
    common::check_request(&api, &list).unwrap();
    list.set_param(Location::Query, "limit", json!(1000), Source::Unconstrained);
    let e = common::check_request(&api, &list).unwrap_err();
    assert!(e.contains("parameter limit = 1000"), "{e}");
    let mut create = builder
        .build(api.operation("createOrder").unwrap())
        .unwrap();
    create.body.as_mut().unwrap().value["quantity"] = json!(0);
    assert!(common::check_request(&api, &create).is_err());
    // And the builder's own validator says the same.
    let schema = api
        .operation("listOrders")
        .unwrap()
        .parameter(Location::Query, "limit")
        .unwrap()
        .schema
        .clone()
        .unwrap();
    assert!(builder.check(&schema, &json!(1000)).is_err());
    assert!(builder.check(&schema, &json!(100)).is_ok());
}
