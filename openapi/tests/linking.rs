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
                vec![s("link `GetCreated` (ResponseBody(\"/id\"))")]
            ),
            (
                s("deleteOrder"),
                s("orderId"),
                s("createOrder"),
                vec![s("body field /id"), s("Location header")]
            ),
            (
                s("post_orders_orderid_pay"),
                s("orderId"),
                s("createOrder"),
                vec![s("body field /id"), s("Location header")]
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
        plan.bindings()[1].sources[1],
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
        "createOrder's answer has no value for `orderId` (looked at: body field /id, Location header)"
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
        matches!(from, VerifyFrom::Response(ref s) if s[0] == ValueSource::BodyField("/id".into()))
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
