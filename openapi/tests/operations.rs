//! The operations a document declares: parameters merged, bodies and responses, links, security,
//! the idempotency key, and which methods are probed.

use std::path::Path;

use openapi::operation::{Expression, LinkTarget, Style};
use openapi::security::Carrier;
use openapi::{Api, Config, Location, Method};

fn orders(config: &Config) -> Api {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/orders-3.0.yaml");
    Api::from_file(&path, config).unwrap()
}

#[test]
fn every_operation_is_read_with_its_method_path_and_id() {
    let api = orders(&Config::default());
    let ops: Vec<(Method, &str, &str, bool)> = api
        .operations()
        .iter()
        .map(|o| (o.method, o.path.as_str(), o.id.as_str(), o.id_synthesized))
        .collect();
    assert_eq!(
        ops,
        [
            (Method::Post, "/impossible", "impossible", false),
            (Method::Get, "/orders", "listOrders", false),
            (Method::Post, "/orders", "createOrder", false),
            (Method::Get, "/orders/{orderId}", "getOrder", false),
            (Method::Delete, "/orders/{orderId}", "deleteOrder", false),
            (
                Method::Post,
                "/orders/{orderId}/pay",
                "post_orders_orderid_pay",
                true
            ),
            (Method::Get, "/widgets/{name}", "getWidget", false),
            (Method::Put, "/widgets/{name}", "putWidget", false),
        ]
    );
    let unsafe_ids: Vec<&str> = api.unsafe_operations().map(|o| o.id.as_str()).collect();
    assert_eq!(
        unsafe_ids,
        [
            "impossible",
            "createOrder",
            "deleteOrder",
            "post_orders_orderid_pay",
            "putWidget"
        ]
    );
}

#[test]
fn path_level_parameters_are_merged_and_reserved_headers_ignored() {
    let api = orders(&Config::default());
    let create = api.operation("createOrder").unwrap();
    let names: Vec<(Location, &str)> = create
        .parameters
        .iter()
        .map(|p| (p.location, p.name.as_str()))
        .collect();
    // X-Request-Id from the path item (through a $ref), idempotency-key from the operation;
    // `Accept` is ignored, as OpenAPI says.
    assert_eq!(
        names,
        [
            (Location::Header, "X-Request-Id"),
            (Location::Header, "idempotency-key")
        ]
    );
    let request_id = &create.parameters[0];
    assert_eq!(request_id.pointer, "/components/parameters/RequestId");
    assert_eq!(request_id.examples.len(), 1);
    let list = api.operation("listOrders").unwrap();
    let status = list.parameter(Location::Query, "status").unwrap();
    assert_eq!(
        (status.style, status.explode, status.required),
        (Style::Form, true, false)
    );
    let widget = api.operation("getWidget").unwrap();
    assert_eq!(
        widget.parameter(Location::Query, "filter").unwrap().style,
        Style::DeepObject
    );
    let pay = api.operation("post_orders_orderid_pay").unwrap();
    assert!(pay.parameter(Location::Cookie, "session").unwrap().required);
}

#[test]
fn the_idempotency_key_is_found_without_case_and_by_the_configured_name() {
    let api = orders(&Config::default());
    let key = api
        .operation("createOrder")
        .unwrap()
        .key_header
        .clone()
        .unwrap();
    assert_eq!((key.name.as_str(), key.required), ("idempotency-key", true));
    assert!(api.operation("putWidget").unwrap().key_header.is_none());
    let custom = orders(&Config {
        key_header: "x-request-id".into(),
    });
    let key = custom
        .operation("createOrder")
        .unwrap()
        .key_header
        .clone()
        .unwrap();
    assert_eq!(key.name, "X-Request-Id");
    assert!(
        custom.operation("listOrders").unwrap().key_header.is_some(),
        "path-level header"
    );
    assert!(custom
        .operation("deleteOrder")
        .unwrap()
        .key_header
        .is_none());
}

#[test]
fn bodies_prefer_json_and_responses_keep_headers_and_links() {
    let api = orders(&Config::default());
    let create = api.operation("createOrder").unwrap();
    let body = create.body.as_ref().unwrap();
    assert!(body.required);
    let media: Vec<&str> = body.media_types.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(media, ["application/json", "application/xml"]);
    let json = body.preferred().unwrap();
    let examples: Vec<&str> = json.examples.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(examples, ["broken", "good"]);
    assert_eq!(
        json.examples[1].pointer,
        "/components/examples/GoodOrder/value"
    );
    let created = &create.responses[0];
    assert_eq!(created.status, "201");
    assert_eq!(created.headers[0].0, "Location");
    assert_eq!(
        created.json_schema(),
        Some("/paths/~1orders/post/responses/201/content/application~1json/schema")
    );
    let link = &created.links[0];
    assert_eq!(link.target, LinkTarget::OperationId("getOrder".into()));
    assert_eq!(
        link.parameters,
        [(
            "orderId".to_string(),
            Expression::ResponseBody("/id".into())
        )]
    );
}

#[test]
fn security_says_which_credentials_to_pass() {
    let api = orders(&Config::default());
    let create = api.operation("createOrder").unwrap();
    assert!(
        create.security.is_required(),
        "the document-level requirement applies"
    );
    assert_eq!(create.security.headers(), ["Authorization"]);
    let list = api.operation("listOrders").unwrap();
    assert!(!list.security.is_required(), "`security: []` lifts it");
    let impossible = api.operation("impossible").unwrap();
    assert_eq!(impossible.security.alternatives.len(), 2);
    assert_eq!(
        impossible.security.alternatives[0][0].carrier,
        Carrier::Header("X-API-Key".into())
    );
    assert_eq!(
        impossible.security.describe(),
        "-H 'X-API-Key: <key>' (apiKey), or -H 'X-API-Key: <key>' (apiKey) and -H \
         'Authorization: Bearer <token>' (bearer)"
    );
    assert_eq!(api.auth_headers(), ["Authorization", "X-API-Key"]);
}

#[test]
fn duplicate_ids_and_undeclared_path_parameters_are_warned_about() {
    let text = "openapi: 3.0.3\npaths:\n  /a/{x}:\n    get: {operationId: same, responses: {'200': {description: x}}}\n  \
                /b:\n    get: {operationId: same, responses: {'200': {description: x}}}\n";
    let api = Api::from_bytes(text.as_bytes(), "doc", &Config::default()).unwrap();
    let ids: Vec<&str> = api.operations().iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids, ["same", "same_2"]);
    assert_eq!(
        api.warnings(),
        [
            "/paths/~1a~1{x}/get: path parameter `x` of `/a/{x}` is not declared; a string is used",
            "/paths/~1b/get: operation id `same` is used twice; this one is `same_2`",
        ]
    );
}
