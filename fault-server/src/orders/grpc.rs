//! `orders.v1.Orders` on the orders store: the same store, the same idempotency implementations
//! (`unique`, `check-then-insert`, `none`) and the same replies as `POST /orders` and
//! `GET /orders/{id}`, told in gRPC's status codes.
//!
//! The key is the metadata `idempotency-key`, else the request's `request_id`. What a reply of
//! the HTTP resource becomes:
//!
//! | HTTP | gRPC | why |
//! | --- | --- | --- |
//! | `201` created, `200` replayed | OK, the `Order` | a replayed create returns the same message |
//! | `409` + Retry-After (the key's first call still in flight) | ABORTED + `grpc-retry-pushback-ms` | `google.rpc.Code`: ABORTED is "a concurrency conflict", to be retried "at a higher level" — the call may succeed once the first completes, as Google's AIPs answer a duplicate request in progress |
//! | `422` (same key, a different request) | FAILED_PRECONDITION | "the system is not in a state required for the operation": the key is bound to another request, and retrying the same call can never succeed until the client uses a new key (not ALREADY_EXISTS: a replay is not an error, and INVALID_ARGUMENT would say the request itself is malformed whatever the state) |
//! | `400` (no key where one is required) | INVALID_ARGUMENT | the request itself lacks what it needs |
//! | `404` | NOT_FOUND | |
//! | `503` + Retry-After (the store did not answer) | UNAVAILABLE + `grpc-retry-pushback-ms` | transient; the call had no effect — unless the database stopped answering or dropped the connection mid-call, when whether it took effect is not known (journaled `responded`, not `rejected`) |
//! | anything else | INTERNAL | |
//!
//! A create's request is stored as its proto3 JSON with its keys in order (so one request is
//! one text, whatever order its map entries came in), its `requestId` set to the key it was
//! created under; the replay of a create is the `Order` made from what the store kept, so it is
//! the same message as the first answer.

use bytes::Bytes;
use grpc::Status;
use history::GrpcCode;
use prost::Message;
use prost_reflect::{DynamicMessage, MapKey, MessageDescriptor, ReflectMessage};
use serde_json::{json, Value};

use super::{Orders, ResourceReply};
use crate::grpc::{canonical_json, Decoded, GrpcReply, Target};

/// Serves a decoded call: on the store for the orders service, its canned answer otherwise.
/// The store's work runs in a task of its own, so a call is processed to the end even when its
/// client leaves (a claimed key must not stay in flight).
pub(crate) async fn serve(orders: &Orders, decoded: Decoded, key: Option<String>) -> GrpcReply {
    let output = decoded.output.clone();
    let (reply, key) = match decoded.target {
        Target::Canned(answer) => return GrpcReply::ok(answer),
        Target::CreateOrder => {
            let Some(request) = decoded.requests.into_iter().next() else {
                return GrpcReply::status(Status::new(GrpcCode::Internal, "no request message"));
            };
            let Ok(mut order) = serde_json::to_value(&request) else {
                return GrpcReply::status(Status::new(
                    GrpcCode::Internal,
                    "the request has no JSON form",
                ));
            };
            let key = key.or_else(|| {
                order
                    .get("requestId")
                    .and_then(Value::as_str)
                    .filter(|k| !k.is_empty())
                    .map(str::to_string)
            });
            let hash = crate::journal::sha256_hex(canonical_json(&order).as_bytes());
            if let (Some(k), Some(o)) = (&key, order.as_object_mut()) {
                o.insert("requestId".into(), Value::String(k.clone()));
            }
            let body = Bytes::from(canonical_json(&order));
            let store = orders.clone();
            let k = key.clone();
            let task = tokio::spawn(async move {
                // As the HTTP resource does: other connections' readable requests take their
                // arrival stamps before the database work wakes blocking threads.
                tokio::task::yield_now().await;
                store.create(k, body, hash).await
            });
            (task.await, key)
        }
        Target::GetOrder => {
            let id = decoded
                .requests
                .first()
                .and_then(|r| r.get_field_by_name("id"))
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let store = orders.clone();
            let task = tokio::spawn(async move { store.get(id).await });
            (task.await, None)
        }
    };
    match reply {
        Ok(reply) => from_resource(reply, &output, key.as_deref()),
        Err(e) => GrpcReply::status(Status::new(
            GrpcCode::Internal,
            format!("the store's task failed: {e}"),
        )),
    }
}

/// The HTTP resource's reply told in gRPC (the table in the module's doc).
fn from_resource(reply: ResourceReply, output: &MessageDescriptor, key: Option<&str>) -> GrpcReply {
    let retry_after_ms = reply
        .headers
        .iter()
        .find(|(n, _)| *n == "retry-after")
        .and_then(|(_, v)| v.parse::<i64>().ok())
        .map(|s| s.saturating_mul(1000).min(i64::from(i32::MAX)));
    let body: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let code = match reply.status {
        200 | 201 => GrpcCode::Ok,
        400 => GrpcCode::InvalidArgument,
        404 => GrpcCode::NotFound,
        409 => GrpcCode::Aborted,
        422 => GrpcCode::FailedPrecondition,
        503 => GrpcCode::Unavailable,
        _ => GrpcCode::Internal,
    };
    let mut out = if code == GrpcCode::Ok {
        GrpcReply::ok(order_message(&body, output, key))
    } else {
        let mut message = body
            .get("detail")
            .or_else(|| body.get("title"))
            .and_then(Value::as_str)
            .unwrap_or("the store refused the call")
            .to_string();
        if reply.status == 400
            && body.get("type").and_then(Value::as_str)
                == Some("urn:fault-server:problem:idempotency-key-missing")
        {
            message = "CreateOrder needs an idempotency key: send metadata idempotency-key, or set the request's request_id".into();
        }
        GrpcReply::status(Status::new(code, message))
    };
    if matches!(code, GrpcCode::Aborted | GrpcCode::Unavailable) {
        out.pushback_ms = retry_after_ms;
    }
    out.created = reply.created;
    out.replayed = reply.replayed;
    out.resource = reply.resource;
    out.refused = reply.refused;
    out
}

/// The `Order` of what the store answers (`{"id", "status", "order": {…}}`): the fields the
/// stored request has with the right types; those it lacks (an order made over HTTP with other
/// fields) stay at their defaults.
fn order_message(body: &Value, output: &MessageDescriptor, key: Option<&str>) -> Bytes {
    let order = body.get("order").cloned().unwrap_or(Value::Null);
    let status = match body.get("status").and_then(Value::as_str) {
        Some("pending") => "ORDER_STATUS_PENDING",
        Some("paid") => "ORDER_STATUS_PAID",
        _ => "ORDER_STATUS_UNSPECIFIED",
    };
    let mut m = serde_json::Map::new();
    m.insert("id".into(), body.get("id").cloned().unwrap_or(json!("")));
    m.insert("status".into(), json!(status));
    let request_id = order
        .get("requestId")
        .and_then(Value::as_str)
        .or(key)
        .unwrap_or("");
    m.insert("requestId".into(), json!(request_id));
    if let Some(s) = order.get("sku").filter(|v| v.is_string()) {
        m.insert("sku".into(), s.clone());
    }
    if let Some(q) = order
        .get("qty")
        .and_then(Value::as_i64)
        .filter(|q| i32::try_from(*q).is_ok())
    {
        m.insert("qty".into(), json!(q));
    }
    let amount = match order.get("amount") {
        Some(Value::String(s)) if s.parse::<i64>().is_ok() => Some(json!(s)),
        Some(Value::Number(n)) if n.is_i64() => Some(json!(n.to_string())),
        _ => None,
    };
    if let Some(a) = amount {
        m.insert("amount".into(), a);
    }
    if let Some(attrs) = order.get("attributes").and_then(Value::as_object) {
        if attrs.values().all(Value::is_string) {
            m.insert("attributes".into(), Value::Object(attrs.clone()));
        }
    }
    let full = Value::Object(m);
    let bare = json!({ "id": full["id"], "status": status });
    DynamicMessage::deserialize(output.clone(), full)
        .or_else(|_| DynamicMessage::deserialize(output.clone(), bare))
        .map(|m| encode_in_order(&m))
        .unwrap_or_default()
}

/// `m` encoded with its map entries in key order: prost-reflect keeps a map in a hash map, whose
/// order changes from one message to the next, and a replayed create must be the same bytes as
/// the first answer. (Entries of a map field may come in any order and in any number of runs on
/// the wire; a decoder merges them.)
fn encode_in_order(m: &DynamicMessage) -> Bytes {
    let mut rest = m.clone();
    let maps: Vec<_> = m
        .descriptor()
        .fields()
        .filter(|f| f.is_map() && m.has_field(f))
        .collect();
    for f in &maps {
        rest.clear_field(f);
    }
    let mut out = rest.encode_to_vec();
    for f in &maps {
        let Some(entries) = m.get_field(f).as_map().cloned() else {
            continue;
        };
        let mut keys: Vec<&MapKey> = entries.keys().collect();
        keys.sort();
        for k in keys {
            let mut one = DynamicMessage::new(m.descriptor());
            let single = std::collections::HashMap::from([(k.clone(), entries[k].clone())]);
            one.set_field(f, prost_reflect::Value::Map(single));
            out.extend_from_slice(&one.encode_to_vec());
        }
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order_type() -> MessageDescriptor {
        grpc::orders::schema()
            .unwrap()
            .method(grpc::orders::GET_ORDER)
            .unwrap()
            .output()
    }

    fn as_json(bytes: &[u8]) -> Value {
        serde_json::from_str(&grpc::schema::protobuf_to_json(&order_type(), bytes).unwrap())
            .unwrap()
    }

    #[test]
    fn an_order_is_made_of_what_the_store_kept() {
        let body = json!({"id": "ord_1", "status": "paid", "order": {
            "requestId": "k-1", "sku": "A", "qty": 2, "amount": "1999", "attributes": {"gift": "yes"}
        }});
        let m = as_json(&order_message(&body, &order_type(), None));
        assert_eq!(
            m,
            json!({"id": "ord_1", "status": "ORDER_STATUS_PAID", "requestId": "k-1", "sku": "A",
                   "qty": 2, "amount": "1999", "attributes": {"gift": "yes"}})
        );
        // An order made over HTTP, with other fields and types: what fits is kept.
        let body = json!({"id": "ord_2", "status": "pending", "order": {
            "sku": 7, "qty": 1.5, "amount": 250, "note": "x", "attributes": {"n": 1}
        }});
        let m = as_json(&order_message(&body, &order_type(), Some("k-2")));
        assert_eq!(
            m,
            json!({"id": "ord_2", "status": "ORDER_STATUS_PENDING", "requestId": "k-2", "amount": "250"})
        );
    }

    #[test]
    fn an_order_with_a_map_is_the_same_bytes_every_time() {
        let attrs: serde_json::Map<String, Value> = (0..32)
            .map(|i| (format!("k{i}"), json!(format!("v{i}"))))
            .collect();
        let body = json!({"id": "ord_1", "status": "pending", "order": {"attributes": attrs}});
        let first = order_message(&body, &order_type(), Some("k"));
        for _ in 0..20 {
            assert_eq!(order_message(&body, &order_type(), Some("k")), first);
        }
        assert_eq!(as_json(&first)["attributes"]["k17"], "v17");
        assert_eq!(as_json(&first)["attributes"].as_object().unwrap().len(), 32);
    }

    #[test]
    fn the_resources_replies_become_grpc_statuses() {
        let problem = |status: u16, kind: &str| {
            ResourceReply::problem(status, kind, "title", format!("detail of {kind}"))
        };
        let cases = [
            (problem(409, "request-in-progress"), GrpcCode::Aborted),
            (
                problem(422, "idempotency-key-reused"),
                GrpcCode::FailedPrecondition,
            ),
            (problem(404, "not-found"), GrpcCode::NotFound),
            (problem(500, "store-error"), GrpcCode::Internal),
            (
                problem(400, "idempotency-key-missing"),
                GrpcCode::InvalidArgument,
            ),
        ];
        for (reply, code) in cases {
            let g = from_resource(reply, &order_type(), None);
            assert_eq!(g.code, code);
            assert!(g.response.is_none());
        }
        let mut busy = problem(409, "request-in-progress");
        busy.headers.push(("retry-after", "2".into()));
        assert_eq!(
            from_resource(busy, &order_type(), None).pushback_ms,
            Some(2000)
        );
        let missing = from_resource(problem(400, "idempotency-key-missing"), &order_type(), None);
        assert!(
            missing.message.contains("request_id"),
            "{}",
            missing.message
        );
        let detail = from_resource(problem(404, "not-found"), &order_type(), None);
        assert_eq!(detail.message, "detail of not-found");
    }
}
