//! `harness audit` against a real FastAPI service (`calibration/openapi/accounts.py`, uvicorn on
//! 127.0.0.1:0, SQLite), its document read from the service's own `/openapi.json`: FastAPI
//! documents every answer as `schema: {}` and sends no `Location`, so each resource's id must be
//! read from the answers themselves — `id` for an account, `transfer_id` for a transfer — and a
//! webhook, whose creation answers 202 and names nothing, only from the parameter's example. The
//! real `harness` binary runs the audit; every row whose path parameter has a value is judged, a
//! value from an example says so (and a 404 on it is no verdict), and the one operation that gets
//! no value says where it looked, in order.
//!
//! FastAPI and uvicorn are installed, pinned, by `calibration/openapi/install.sh` (which
//! `calibration/install.sh`, and so `.ci/run`, runs) into `.cache/calibration/openapi/venv`.
//! Without them this test says that it skips, unless `HARNESS_REQUIRE_TOOLS=1` (CI), where a
//! missing install is a failure.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv's Python, or None (said) when it is not installed and CI does not require it.
fn python() -> Option<PathBuf> {
    let python = root().join(".cache/calibration/openapi/venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "FastAPI is not installed and HARNESS_REQUIRE_TOOLS=1: run `bash \
         calibration/openapi/install.sh`"
    );
    eprintln!(
        "skipping the FastAPI audit: run `bash calibration/openapi/install.sh` first (.ci/run does)"
    );
    None
}

/// The running service; killed when dropped.
struct Service {
    child: Child,
    url: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn service(python: &Path) -> Service {
    let mut child = Command::new(python)
        .arg(root().join("calibration/openapi/accounts.py"))
        .args(["--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the FastAPI service starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut line)
        .expect("the service prints its address");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    Service { child, url }
}

#[test]
fn every_path_parameter_with_a_value_gets_a_verdict_and_the_rest_say_where_they_looked() {
    let Some(python) = python() else { return };
    let s = service(&python);
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("harness")
        .expect("the harness binary")
        .args(["audit", "--openapi"])
        .arg(format!("{}/openapi.json", s.url))
        .args(["--base", &s.url, "--rounds", "2", "--seed", "3"])
        .arg("--report-dir")
        .arg(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("harness runs");
    let shown = format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // createAccount is a plain INSERT: its retry makes a second account.
    assert_eq!(out.status.code(), Some(1), "{shown}");
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("report.json")).expect("report.json"),
    )
    .expect("report.json is JSON");
    let rows = report["operations"].as_array().expect("operations");
    let row = |id: &str| -> &Value {
        rows.iter()
            .find(|r| r["operation_id"] == id)
            .unwrap_or_else(|| panic!("no row {id}\n{shown}"))
    };
    let text = |id: &str, field: &str| row(id)[field].as_str().unwrap_or("").to_string();
    let evidence = |id: &str| -> String {
        row(id)["evidence"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["detail"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };

    let expected = [
        ("createAccount", "fail"),
        ("createTransfer", "pass"),
        ("createWebhook", "inconclusive"),
        ("updateAccount", "pass"),
        ("replaceAccount", "pass"),
        ("deleteAccount", "pass"),
        ("cancelTransfer", "pass"),
        ("updateWebhook", "pass"),
        ("deleteWebhook", "pass"),
        ("pingWebhook", "inconclusive"),
        ("rotateWebhookSecret", "inconclusive"),
    ];
    assert_eq!(rows.len(), expected.len(), "{shown}");
    for (id, verdict) in expected {
        assert_eq!(
            row(id)["verdict"],
            verdict,
            "{id}: {}\n{}",
            text(id, "summary"),
            evidence(id)
        );
    }

    // The account's id is the creation's JSON `id` (no Location), not the PATCH's example.
    for id in ["updateAccount", "replaceAccount", "deleteAccount"] {
        let request = text(id, "request");
        assert!(
            request.contains(" /accounts/acc-") && !request.contains("acc-demo"),
            "{id}: {request}"
        );
        assert!(
            !text(id, "summary").contains("not a resource made"),
            "{id}: {}",
            text(id, "summary")
        );
    }
    assert!(
        text("updateAccount", "summary").contains("with the same resource acc-"),
        "{}",
        text("updateAccount", "summary")
    );
    // The transfer's is its `transfer_id`.
    assert!(
        text("cancelTransfer", "request").starts_with("DELETE /transfers/tr-"),
        "{}",
        text("cancelTransfer", "request")
    );
    assert!(
        text("createTransfer", "summary").contains("same resource tr-"),
        "{}",
        text("createTransfer", "summary")
    );
    // What stays undecided about the creation of webhooks is its answers, not a parameter.
    assert!(
        text("createWebhook", "summary").contains("name no resource"),
        "{}",
        text("createWebhook", "summary")
    );

    // A webhook only an example names: judged on that resource, and the row says so.
    let looked = "createWebhook's answer has no value for `webhook_id` (looked at: Location \
                  header, JSON answer field webhook_id, id, uuid";
    let update = text("updateWebhook", "summary");
    assert!(
        update.contains(
            "`webhook_id` = \"wh-default\" is its schema's examples[0], not a resource made \
             for this request"
        ) && update.contains(looked),
        "{update}"
    );
    let delete = text("deleteWebhook", "summary");
    assert!(
        delete.contains("concurrent ones were not sent")
            && delete.contains("`webhook_id` = \"wh-old\" is its schema's examples[0]"),
        "{delete}"
    );
    assert!(
        evidence("deleteWebhook").contains("no fresh resource for the concurrent DELETEs"),
        "{}",
        evidence("deleteWebhook")
    );
    // An example naming nothing: the API's 404 is no verdict.
    let ping = text("pingWebhook", "summary");
    assert!(
        ping.starts_with(
            "could not build a valid request: the API answered the baseline POST \
             /webhooks/{webhook_id}/pings with 404"
        ) && ping.contains("`webhook_id` = \"wh-retired\" is its schema's examples[0]"),
        "{ping}"
    );

    // No value anywhere: inconclusive, with every place looked at, in order.
    assert_eq!(
        text("rotateWebhookSecret", "summary"),
        format!(
            "could not build a valid request: {looked}; the parameter declares no example, \
             examples or default)"
        )
    );
    // And no other row went without a request.
    for r in rows {
        let summary = r["summary"].as_str().unwrap_or("");
        if r["verdict"] == "inconclusive" && summary.starts_with("could not build") {
            assert!(
                ["pingWebhook", "rotateWebhookSecret"]
                    .contains(&r["operation_id"].as_str().unwrap_or("")),
                "{}: {summary}",
                r["operation_id"]
            );
        }
    }
}
