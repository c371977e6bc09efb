//! `report.json`: round trip and the schema-version gate.

mod common;

use reports::{from_json, to_json_pretty, ReportError, SCHEMA_VERSION};

#[test]
fn round_trips() {
    for r in [common::sample(), common::empty(), common::hostile()] {
        let text = to_json_pretty(&r);
        let back = from_json(&text).unwrap();
        assert_eq!(back, r);
    }
}

#[test]
fn text_that_would_reorder_a_terminal_is_escaped_and_reads_back() {
    let r = common::hostile();
    let json = to_json_pretty(&r);
    for raw in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!json.contains(raw), "{raw:?} raw in {json}");
    }
    assert!(json.contains("\\u001b[31m\\u0007\\u202e"), "{json}");
    assert_eq!(from_json(&json).unwrap(), r);
}

#[test]
fn writes_the_contract_fields() {
    let v: serde_json::Value = serde_json::from_str(&to_json_pretty(&common::sample())).unwrap();
    for field in [
        "scenario",
        "passed",
        "duration_ms",
        "requests",
        "latency_ms",
        "checks",
    ] {
        assert!(v.get(field).is_some(), "{field} missing");
    }
    for field in ["sent", "completed", "errors", "retries", "by_status"] {
        assert!(
            v["requests"].get(field).is_some(),
            "requests.{field} missing"
        );
    }
    for field in ["p50", "p90", "p99", "p999", "max"] {
        assert!(
            v["latency_ms"].get(field).is_some(),
            "latency_ms.{field} missing"
        );
    }
    let check = &v["checks"][0];
    for field in ["name", "passed", "summary", "metrics", "evidence"] {
        assert!(check.get(field).is_some(), "checks[0].{field} missing");
    }
    assert_eq!(check["name"], "jitter");
    assert_eq!(check["passed"], false);
    assert_eq!(check["verdict"], "fail");
    assert_eq!(v["schema_version"], SCHEMA_VERSION);
}

#[test]
fn rejects_a_newer_schema_version() {
    let mut v: serde_json::Value =
        serde_json::from_str(&to_json_pretty(&common::sample())).unwrap();
    v["schema_version"] = (SCHEMA_VERSION + 1).into();
    let err = from_json(&v.to_string()).unwrap_err();
    assert!(
        matches!(err, ReportError::UnsupportedSchemaVersion { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("schema_version {}", SCHEMA_VERSION + 1)),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("reads only version {SCHEMA_VERSION}")),
        "{msg}"
    );
}

#[test]
fn rejects_unknown_and_missing_versions() {
    let text = to_json_pretty(&common::sample());
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();

    v["schema_version"] = 0.into();
    assert!(matches!(
        from_json(&v.to_string()),
        Err(ReportError::UnsupportedSchemaVersion { .. })
    ));
    v["schema_version"] = "1".into();
    assert!(matches!(
        from_json(&v.to_string()),
        Err(ReportError::UnsupportedSchemaVersion { .. })
    ));
    v.as_object_mut().unwrap().remove("schema_version");
    let err = from_json(&v.to_string()).unwrap_err();
    assert!(
        matches!(err, ReportError::MissingSchemaVersion { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("schema_version"), "{err}");
}

#[test]
fn reads_a_minimal_document_and_ignores_unknown_fields() {
    // What an older writer (or a hand-written fixture) holds: only the required fields, plus a field
    // a newer writer of the same version added.
    let text = r#"{
        "schema_version": 1,
        "scenario": "minimal",
        "passed": true,
        "duration_ms": 10,
        "requests": {"sent": 1, "completed": 1, "errors": 0, "retries": 0, "by_status": {"200": 1}},
        "latency_ms": {"p50": 1.0, "p90": 1.0, "p99": 1.0, "p999": 1.0, "max": 1.0},
        "checks": [{"name": "duplicates", "passed": true, "verdict": "pass", "summary": "ok",
                    "metrics": {}, "evidence": []}],
        "a_field_from_the_future": [1, 2, 3]
    }"#;
    let r = from_json(text).unwrap();
    assert_eq!(r.scenario, "minimal");
    assert_eq!(r.time_scale, 1.0);
    assert!(r.timeline.is_none());
    assert_eq!(r.checks.len(), 1);
}

#[test]
fn bad_json_is_an_error_with_a_position() {
    let err = from_json("{\"schema_version\": 1, \"scenario\": ").unwrap_err();
    assert!(matches!(err, ReportError::Json(_)), "{err:?}");
    assert!(err.to_string().contains("line 1"), "{err}");

    let err = from_json(r#"{"schema_version": 1, "scenario": "x"}"#).unwrap_err();
    assert!(err.to_string().contains("missing field"), "{err}");
}

#[test]
fn carries_tcp_connections_and_reads_them_back() {
    let r = common::with_connections();
    let text = serde_json::to_string(&r).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["connections"][1]["proxy"], "redis");
    assert_eq!(v["connections"][1]["by_end"]["timed_out"], 2);
    let back: reports::Report = serde_json::from_str(&text).unwrap();
    assert_eq!(back.connections, r.connections);
    let none = serde_json::to_value(common::sample()).unwrap();
    assert!(
        none.get("connections").is_none(),
        "absent when there are none"
    );
}

#[test]
fn carries_protocol_statements_and_reads_them_back() {
    let r = common::with_statements();
    let text = serde_json::to_string(&r).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["statements"][0]["protocol"], "postgres");
    assert_eq!(v["statements"][0]["by_error"]["40001"], 3);
    assert_eq!(v["statements"][0]["committed_unanswered"], 2);
    assert_eq!(v["statements"][1]["by_error"]["LOADING"], 4);
    let back: reports::Report = serde_json::from_str(&text).unwrap();
    assert_eq!(back.statements, r.statements);
    let none = serde_json::to_value(common::sample()).unwrap();
    assert!(
        none.get("statements").is_none(),
        "absent when there are none"
    );
}
