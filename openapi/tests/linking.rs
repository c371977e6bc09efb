//! The link plan: which answer feeds which parameter, the order of calls, filling a request from
//! a recorded answer, and the requests that look at a resource afterwards.

use std::path::Path;

use openapi::{
    Api, Binding, Config, FillError, LinkPlan, Location, Recorded, RequestBuilder, Source,
    ValueSource, VerifyFrom,
};
use serde_json::{json, Value};

fn load(name: &str) -> Api {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    Api::from_file(&path, &Config::default()).unwrap()
}

fn summary(b: &Binding) -> (String, String, String, Vec<String>) {
    (
        b.consumer.clone(),
        b.parameter.clone(),
        b.producer.clone(),
        b.sources.iter().map(|s| s.to_string()).collect(),
    )
}

#[test]
fn resource_parameters_are_bound_to_their_creators() {
    let api = load("orders-3.0.yaml");
    let plan = LinkPlan::new(&api);
    let got: Vec<_> = plan.bindings().iter().map(summary).collect();
    let s = |x: &str| x.to_string();
    assert_eq!(
        got,
        [
            (
                s("getOrder"),
                s("orderId"),
                s("createOrder"),
                vec![
                    s("link `GetCreated` (ResponseBody(\"/id\"))"),
                    s("Location header"),
                    s("body field /id"),
                    s("JSON answer field orderId, id, uuid")
                ]
            ),
            (
                s("deleteOrder"),
                s("orderId"),
                s("createOrder"),
                vec![
                    s("Location header"),
                    s("body field /id"),
                    s("JSON answer field orderId, id, uuid")
                ]
            ),
            (
                s("post_orders_orderid_pay"),
                s("orderId"),
                s("createOrder"),
                vec![
                    s("Location header"),
                    s("body field /id"),
                    s("JSON answer field orderId, id, uuid")
                ]
            ),
            (
                s("getWidget"),
                s("name"),
                s("putWidget"),
                vec![s("the request's path parameter `name`")]
            ),
        ]
    );
    assert_eq!(
        plan.bindings()[1].sources[0],
        ValueSource::Location {
            template: "/orders/{orderId}".into()
        }
    );
    assert_eq!(plan.producers_of("getOrder"), ["createOrder"]);
    assert!(plan.producers_of("listOrders").is_empty());
}

#[test]
fn creations_come_first_and_deletes_last() {
    let api = load("orders-3.0.yaml");
    let plan = LinkPlan::new(&api);
    assert_eq!(
        plan.order(),
        [
            "createOrder",
            "putWidget",
            "impossible",
            "listOrders",
            "getOrder",
            "post_orders_orderid_pay",
            "getWidget",
            "deleteOrder"
        ]
    );
    assert!(plan.notes().is_empty(), "{:?}", plan.notes());
}

fn created(id: &str) -> Value {
    json!({"id": id, "sku": "ABC-123", "quantity": 2, "status": "pending"})
}

#[test]
fn a_request_is_filled_from_the_recorded_answer() {
    let api = load("orders-3.0.yaml");
    let plan = LinkPlan::new(&api);
    let mut builder = RequestBuilder::new(&api, 1).unwrap();
    let create = builder
        .build(api.operation("createOrder").unwrap())
        .unwrap();
    let id = "8d4f3a0e-51b8-4c43-9a6e-7d1e4b2f6c10";
    let body = created(id);
    let headers = vec![(
        "location".to_string(),
        format!("https://api.example.com/v1/orders/{id}"),
    )];
    let recorded = Recorded {
        request: Some(&create),
        status: 201,
        headers: &headers,
        body: Some(&body),
    };
    // Through the document's link.
    let mut get = builder.build(api.operation("getOrder").unwrap()).unwrap();
    assert_ne!(get.target(), format!("/orders/{id}"));
    assert_eq!(
        plan.fill(&mut builder, &mut get, "createOrder", &recorded)
            .unwrap(),
        ["orderId"]
    );
    assert_eq!(get.target(), format!("/orders/{id}"));
    assert_eq!(
        get.param(Location::Path, "orderId").unwrap().source,
        Source::Linked {
            operation_id: "createOrder".into(),
            how: "link `GetCreated` (ResponseBody(\"/id\"))".into()
        }
    );
    // Through the Location header, when the body has no id.
    let no_id = json!({"status": "pending"});
    let by_location = Recorded {
        body: Some(&no_id),
        ..recorded
    };
    let mut delete = builder
        .build(api.operation("deleteOrder").unwrap())
        .unwrap();
    plan.fill(&mut builder, &mut delete, "createOrder", &by_location)
        .unwrap();
    assert_eq!(delete.target(), format!("/orders/{id}"));
    assert!(matches!(
        &delete.param(Location::Path, "orderId").unwrap().source,
        Source::Linked { how, .. } if how == "Location header"
    ));
    // A PUT's own path value feeds the GET of the same resource.
    let put = builder.build(api.operation("putWidget").unwrap()).unwrap();
    let mut get_widget = builder.build(api.operation("getWidget").unwrap()).unwrap();
    let put_recorded = Recorded {
        request: Some(&put),
        status: 200,
        headers: &[],
        body: None,
    };
    plan.fill(&mut builder, &mut get_widget, "putWidget", &put_recorded)
        .unwrap();
    assert_eq!(
        get_widget.param(Location::Path, "name").unwrap().value,
        put.param(Location::Path, "name").unwrap().value
    );
}

#[test]
fn a_value_that_cannot_be_filled_says_why() {
    let api = load("orders-3.0.yaml");
    let plan = LinkPlan::new(&api);
    let mut builder = RequestBuilder::new(&api, 1).unwrap();
    let mut delete = builder
        .build(api.operation("deleteOrder").unwrap())
        .unwrap();
    let before = delete.clone();
    let conflict = json!({"error": "busy"});
    let refused = Recorded {
        request: None,
        status: 409,
        headers: &[],
        body: Some(&conflict),
    };
    assert_eq!(
        plan.fill(&mut builder, &mut delete, "createOrder", &refused)
            .unwrap_err(),
        FillError::NotCreated {
            producer: "createOrder".into(),
            parameter: "orderId".into(),
            status: 409
        }
    );
    let nothing = Recorded {
        status: 201,
        ..refused
    };
    assert_eq!(
        plan.fill(&mut builder, &mut delete, "createOrder", &nothing)
            .unwrap_err()
            .to_string(),
        "createOrder's answer has no value for `orderId` (looked at: Location header, body field \
         /id, JSON answer field orderId, id, uuid; the parameter declares no example, examples or \
         default)"
    );
    let bad = created("not-a-uuid");
    let invalid = Recorded {
        body: Some(&bad),
        ..nothing
    };
    let e = plan
        .fill(&mut builder, &mut delete, "createOrder", &invalid)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "`orderId` = \"not-a-uuid\" (from createOrder's body field /id) is not valid:"
        ) && e.contains("uuid"),
        "{e}"
    );
    assert_eq!(delete, before, "nothing is changed by a failed fill");
}

#[test]
fn a_location_value_is_converted_to_the_parameter_type() {
    let api = load("orders-3.1.yaml");
    let plan = LinkPlan::new(&api);
    let mut builder = RequestBuilder::new(&api, 1).unwrap();
    let mut patch = builder.build(api.operation("patchOrder").unwrap()).unwrap();
    let headers = vec![("Location".to_string(), "/orders/17".to_string())];
    let recorded = Recorded {
        request: None,
        status: 201,
        headers: &headers,
        body: None,
    };
    plan.fill(&mut builder, &mut patch, "createOrder", &recorded)
        .unwrap();
    assert_eq!(patch.param(Location::Path, "id").unwrap().value, json!(17));
    assert_eq!(patch.target(), "/orders/17");
}

#[test]
fn verification_uses_the_documents_own_get_and_list() {
    let api = load("orders-3.0.yaml");
    let plan = LinkPlan::new(&api);
    let create = plan.verification("createOrder").unwrap();
    let (get, param, from) = create.get.clone().unwrap();
    assert_eq!((get.as_str(), param.as_str()), ("getOrder", "orderId"));
    assert!(
        matches!(from, VerifyFrom::Response(ref s) if s[1] == ValueSource::BodyField("/id".into())),
        "{from:?}"
    );
    assert_eq!(create.list.as_deref(), Some("listOrders"));
    for id in ["deleteOrder", "post_orders_orderid_pay"] {
        let v = plan.verification(id).unwrap();
        assert_eq!(
            v.get,
            Some(("getOrder".into(), "orderId".into(), VerifyFrom::SamePath)),
            "{id}"
        );
        assert_eq!(v.list.as_deref(), Some("listOrders"), "{id}");
    }
    let put = plan.verification("putWidget").unwrap();
    assert_eq!(
        put.get,
        Some(("getWidget".into(), "name".into(), VerifyFrom::SamePath))
    );
    assert_eq!(put.list, None);
    assert_eq!(plan.verification("impossible").unwrap().get, None);
    assert!(
        plan.verification("listOrders").is_none(),
        "safe operations are not verified"
    );

    let mut builder = RequestBuilder::new(&api, 2).unwrap();
    let sent = builder
        .build(api.operation("createOrder").unwrap())
        .unwrap();
    let id = "0f8fad5b-d9cb-469f-a165-70867728950e";
    let body = created(id);
    let recorded = Recorded {
        request: Some(&sent),
        status: 201,
        headers: &[],
        body: Some(&body),
    };
    let look = plan
        .verification_request(&mut builder, &sent, &recorded)
        .unwrap()
        .unwrap();
    assert_eq!(
        (look.method.as_str(), look.target()),
        ("GET", format!("/orders/{id}"))
    );
    let mut delete = builder
        .build(api.operation("deleteOrder").unwrap())
        .unwrap();
    plan.fill(&mut builder, &mut delete, "createOrder", &recorded)
        .unwrap();
    let gone = Recorded {
        request: Some(&delete),
        status: 204,
        headers: &[],
        body: None,
    };
    let look = plan
        .verification_request(&mut builder, &delete, &gone)
        .unwrap()
        .unwrap();
    assert_eq!(look.target(), format!("/orders/{id}"));
}

/// `consumer`'s request filled from `producer`'s answer (`status`, `location`, `body`).
fn filled(
    api: &Api,
    consumer: &str,
    producer: &str,
    status: u16,
    location: Option<&str>,
    body: Value,
) -> (Result<Vec<String>, FillError>, openapi::Request) {
    let plan = LinkPlan::new(api);
    let mut builder = RequestBuilder::new(api, 1).unwrap();
    let mut request = builder.build(api.operation(consumer).unwrap()).unwrap();
    let headers: Vec<(String, String)> = location
        .map(|l| vec![("Location".to_string(), l.to_string())])
        .unwrap_or_default();
    let recorded = Recorded {
        request: None,
        status,
        headers: &headers,
        body: Some(&body),
    };
    let got = plan.fill(&mut builder, &mut request, producer, &recorded);
    (got, request)
}

fn how(request: &openapi::Request, name: &str) -> (Value, String) {
    let p = request.param(Location::Path, name).unwrap();
    let how = match &p.source {
        Source::Linked { how, .. } => how.clone(),
        Source::Declared { what, .. } => format!("declared: {what}"),
        other => format!("{other:?}"),
    };
    (p.value.clone(), how)
}

#[test]
fn a_path_value_is_looked_for_in_the_link_the_location_the_answer_then_the_example() {
    let api = load("resources-3.1.yaml");
    let plan = LinkPlan::new(&api);
    let sources = |consumer: &str| -> Vec<String> {
        let b: Vec<&Binding> = plan.bindings_for(consumer).collect();
        assert_eq!(b.len(), 1, "{consumer}: {b:?}");
        b[0].sources.iter().map(ToString::to_string).collect()
    };
    assert_eq!(
        sources("updateCard"),
        [
            "link `UpdateCard` (ResponseBody(\"/card/number\"))",
            "Location header",
            "JSON answer field card_id, id, uuid"
        ]
    );
    assert_eq!(
        sources("updateAccount"),
        [
            "Location header",
            "JSON answer field account_id, id, uuid",
            "its schema's examples[0]"
        ]
    );
    assert_eq!(
        sources("cancelTransfer"),
        ["Location header", "JSON answer field id, transfer_id, uuid"]
    );
    assert_eq!(
        sources("updateWebhook"),
        [
            "Location header",
            "JSON answer field webhook_id, id, uuid",
            "the parameter's example",
            "the parameter's example `seeded`",
            "its schema's examples[0]",
            "its schema's default"
        ]
    );
    assert_eq!(
        sources("replaceWebhook").last().map(String::as_str),
        Some("its schema's default"),
        "a default behind a $ref"
    );
    assert_eq!(
        sources("deleteWebhook"),
        ["Location header", "JSON answer field webhook_id, id, uuid"]
    );
}

#[test]
fn a_link_comes_first_and_the_location_when_the_link_finds_nothing() {
    let api = load("resources-3.1.yaml");
    let body = json!({"card": {"number": "4242"}, "id": "c-1"});
    let (got, req) = filled(
        &api,
        "updateCard",
        "createCard",
        201,
        Some("/cards/c-9"),
        body,
    );
    assert_eq!(got.unwrap(), ["card_id"]);
    assert_eq!(
        how(&req, "card_id"),
        (
            json!("4242"),
            "link `UpdateCard` (ResponseBody(\"/card/number\"))".into()
        )
    );
    let (_, req) = filled(
        &api,
        "updateCard",
        "createCard",
        201,
        Some("/cards/c-9"),
        json!({"id": "c-1"}),
    );
    assert_eq!(
        how(&req, "card_id"),
        (json!("c-9"), "Location header".into())
    );
    let (_, req) = filled(
        &api,
        "updateCard",
        "createCard",
        201,
        None,
        json!({"id": "c-1"}),
    );
    assert_eq!(
        how(&req, "card_id"),
        (json!("c-1"), "body field /id".into())
    );
}

#[test]
fn the_location_comes_before_the_answer_and_the_answer_is_read_by_name() {
    let api = load("resources-3.1.yaml");
    let fill = |location: Option<&str>, body: Value| {
        let (got, req) = filled(&api, "updateAccount", "createAccount", 201, location, body);
        got.unwrap();
        how(&req, "account_id")
    };
    let body = json!({"id": "acc-body", "owner": "ada"});
    assert_eq!(
        fill(Some("/accounts/acc-loc"), body.clone()),
        (json!("acc-loc"), "Location header".into())
    );
    // No Location, as FastAPI answers by default: the answer's `id`.
    assert_eq!(
        fill(None, body.clone()),
        (json!("acc-body"), "body field /id".into())
    );
    // A Location the parameter's schema refuses: the next place.
    assert_eq!(
        fill(Some("/accounts/zzz"), body),
        (json!("acc-body"), "body field /id".into())
    );
    // A field named like the parameter before a bare `id`; any spelling of it.
    assert_eq!(
        fill(None, json!({"id": "acc-other", "accountId": "acc-named"})),
        (json!("acc-named"), "body field /accountId".into())
    );
    // Wrapped, and what is no scalar (or empty) passed over.
    assert_eq!(
        fill(
            None,
            json!({"account_id": "", "id": {"v": 1}, "data": {"ID": "acc-wrapped"}})
        ),
        (json!("acc-wrapped"), "body field /data/ID".into())
    );
}

#[test]
fn the_resources_own_name_id_is_read_for_a_bare_id() {
    let api = load("resources-3.1.yaml");
    let (got, req) = filled(
        &api,
        "cancelTransfer",
        "createTransfer",
        201,
        None,
        json!({"transfer_id": "tr-1", "status": "pending"}),
    );
    got.unwrap();
    assert_eq!(
        how(&req, "id"),
        (json!("tr-1"), "body field /transfer_id".into())
    );
    assert_eq!(req.target(), "/transfers/tr-1");
}

#[test]
fn the_example_is_used_last_and_says_it_names_no_made_resource() {
    let api = load("resources-3.1.yaml");
    let queued = json!({"status": "queued"});
    let (got, req) = filled(
        &api,
        "updateWebhook",
        "createWebhook",
        202,
        None,
        queued.clone(),
    );
    assert_eq!(got.unwrap(), ["webhook_id"]);
    let p = req.param(Location::Path, "webhook_id").unwrap();
    assert_eq!(
        p.value,
        json!("wh-seeded"),
        "the invalid `example: 42` passed over"
    );
    let Source::Declared {
        what,
        pointer,
        operation_id,
        why,
    } = &p.source
    else {
        panic!("{:?}", p.source)
    };
    assert_eq!(what, "the parameter's example `seeded`");
    assert_eq!(
        pointer,
        "/paths/~1webhooks~1{webhook_id}/patch/parameters/0/examples/seeded/value"
    );
    assert_eq!(operation_id, "createWebhook");
    assert!(
        why.starts_with(
            "createWebhook's answer has no value for `webhook_id` (looked at: Location header, \
             JSON answer field webhook_id, id, uuid, the parameter's example 42 (not valid:"
        ),
        "{why}"
    );
    // The schema's default, through a $ref.
    let (_, req) = filled(
        &api,
        "replaceWebhook",
        "createWebhook",
        202,
        None,
        queued.clone(),
    );
    assert_eq!(
        how(&req, "webhook_id"),
        (json!("wh-default"), "declared: its schema's default".into())
    );
    // A creation whose answer names the resource wins over the example.
    let (_, req) = filled(
        &api,
        "updateWebhook",
        "createWebhook",
        202,
        None,
        json!({"webhook_id": "wh-made"}),
    );
    assert_eq!(
        how(&req, "webhook_id"),
        (json!("wh-made"), "body field /webhook_id".into())
    );
    // The answer named nothing and the document declares nothing: no request, and where the
    // plan looked, in order.
    let (got, req) = filled(&api, "deleteWebhook", "createWebhook", 202, None, queued);
    assert_eq!(
        got.unwrap_err().to_string(),
        "createWebhook's answer has no value for `webhook_id` (looked at: Location header, JSON \
         answer field webhook_id, id, uuid; the parameter declares no example, examples or \
         default)"
    );
    assert!(!matches!(
        req.param(Location::Path, "webhook_id").unwrap().source,
        Source::Linked { .. } | Source::Declared { .. }
    ));
}
