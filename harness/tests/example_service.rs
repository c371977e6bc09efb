//! The `orders_service` example end to end: the real binary, its payment dependency a real fault
//! server — or a real payment API (`payments_service`) behind the fault server as a proxy — and
//! the verdict read from the fault server's journal: what a CI gate under `harness exec` sees.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use checks::{run_checks, ChecksConfig};
use fault_server::{Config, FaultServer, ServerOptions};
use harness::http::{Conn, Outgoing, Reply, Target};
use history::Entry;
use http::{HeaderMap, HeaderValue, Method};

/// The payment API: a declined card (`x-client-id: blocked`) is 400 on every attempt; otherwise
/// the first attempt of each Idempotency-Key is 503 and a retry with the same key succeeds.
const PAYMENTS: &str = r#"
rules:
  - id: declined
    match: { method: POST, path: /orders, headers: { x-client-id: blocked } }
    fault: { status: { code: 400, body: "card declined" } }
  - id: first-attempt-fails
    match: { method: POST, path: /orders, attempts: 1 }
    fault: { status: 503 }
"#;

mod support;

/// The example's executable.
fn example_exe() -> PathBuf {
    support::example_exe("orders_service")
}

/// The payment API of record that `scenarios/proxy-example.yaml` proxies to.
fn payments_exe() -> PathBuf {
    support::example_exe("payments_service")
}

/// The running example; killed when dropped.
struct Service {
    child: Child,
    url: String,
}

impl Service {
    fn start(mode: &str, payments_url: &str) -> Service {
        let mut cmd = Command::new(example_exe());
        cmd.args(["--mode", mode, "--payments-url", payments_url])
            .args(["--bind", "127.0.0.1:0", "--seed", "3"]);
        Service::spawn(cmd)
    }

    /// Starts `cmd`, a program that prints `listening on URL` first.
    fn spawn(mut cmd: Command) -> Service {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the example starts");
        // Its per-order log lines go to the test's captured output (shown when a test fails).
        if let Some(mut err) = child.stderr.take() {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = err.read_to_string(&mut s);
                eprint!("{s}");
            });
        }
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout is piped");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the example prints its address");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Service { child, url }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn payments() -> FaultServer {
    let cfg = Config::from_yaml(PAYMENTS, "test").expect("test config is valid");
    FaultServer::start(cfg, ServerOptions::default())
        .await
        .expect("fault server starts")
}

/// One incoming order: `x-request-id: id` (forwarded, so the journal groups attempts by it).
async fn order(url: &str, id: &str, client: &str, key: Option<&str>) -> Reply {
    let mut conn = Conn::new(Arc::new(Target::parse(url).expect("service URL parses")));
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("x-request-id", HeaderValue::from_str(id).expect("value"));
    headers.insert("x-client-id", HeaderValue::from_str(client).expect("value"));
    if let Some(k) = key {
        headers.insert("idempotency-key", HeaderValue::from_str(k).expect("value"));
    }
    let req = Outgoing {
        method: Method::POST,
        uri: "/orders".to_string(),
        headers,
        body: Bytes::from(format!("{{\"sku\":\"{id}\",\"qty\":1}}")),
    };
    conn.send(req, Duration::from_secs(20))
        .await
        .expect("the service answers")
}

/// The payment calls made for the incoming request `id`.
fn calls<'a>(journal: &'a [Entry], id: &str) -> Vec<&'a Entry> {
    journal
        .iter()
        .filter(|e| e.headers.get("x-request-id").map(String::as_str) == Some(id))
        .collect()
}

fn keys(calls: &[&Entry]) -> Vec<String> {
    calls
        .iter()
        .map(|e| e.idempotency_key.clone().unwrap_or_default())
        .collect()
}

fn statuses(calls: &[&Entry]) -> Vec<Option<u16>> {
    calls.iter().map(|e| e.status).collect()
}

/// The gate's verdicts on the journal: (`key_stability` passed, `retry_on_4xx` passed).
fn gate(journal: &[Entry]) -> (bool, bool) {
    let cfg = ChecksConfig::from_yaml("key_stability: {}\nretry_on_4xx: {}\n").expect("config");
    let results = run_checks(&cfg, journal.iter());
    for c in &results {
        eprintln!("{}: {:?}: {}", c.name, c.verdict, c.summary);
    }
    let passed = |name: &str| {
        results
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} check in {results:?}"))
            .passed()
    };
    (passed("key_stability"), passed("retry_on_4xx"))
}

async fn run(mode: &str) -> (Vec<Entry>, [Reply; 3]) {
    let server = payments().await;
    let service = Service::start(mode, &server.url());
    let a = order(&service.url, "req-a", "c1", Some("order-a")).await;
    let b = order(&service.url, "req-b", "c2", None).await;
    let declined = order(&service.url, "req-c", "blocked", Some("order-c")).await;
    drop(service);
    assert!(server.settle(Duration::from_secs(10)).await);
    let journal = server.journal().entries();
    server.shutdown().await;
    (journal, [a, b, declined])
}

#[tokio::test]
async fn naive_mode_changes_the_key_on_every_retry_and_retries_a_400() {
    let (journal, [a, b, declined]) = run("naive").await;

    // A new key on every attempt: each attempt is the "first" of its key, so each gets the 503
    // and the payment never goes through, though a retry with a stable key would have.
    for (id, reply) in [("req-a", &a), ("req-b", &b)] {
        let c = calls(&journal, id);
        let mut distinct = keys(&c);
        distinct.sort();
        distinct.dedup();
        eprintln!(
            "naive {id}: {} calls, {} keys, {:?}",
            c.len(),
            distinct.len(),
            statuses(&c)
        );
        assert_eq!(c.len(), 5, "{id}: five attempts");
        assert_eq!(
            distinct.len(),
            5,
            "{id}: a new key per attempt: {distinct:?}"
        );
        assert!(statuses(&c).iter().all(|s| *s == Some(503)));
        assert_eq!(reply.status.as_u16(), 503);
    }
    assert!(
        !keys(&calls(&journal, "req-a")).contains(&"order-a".to_string()),
        "the caller's key is not forwarded"
    );

    // A declined card is retried four times: the same 400 every time.
    let c = calls(&journal, "req-c");
    assert_eq!(statuses(&c), vec![Some(400); 5], "retries after a 400");
    assert_eq!(declined.status.as_u16(), 502);

    // The gate catches the unstable key. It does not flag the 400 retries: the checks group
    // attempts by Idempotency-Key before anything else, so five keys look like five operations.
    // The journal assertions above are what prove the retries after a 400.
    let (key_stability, _) = gate(&journal);
    assert!(!key_stability, "the gate fails key_stability");
}

#[tokio::test]
async fn resilient_mode_keeps_one_key_per_order_and_never_retries_a_400() {
    let (journal, [a, b, declined]) = run("resilient").await;

    // The caller's key is forwarded and reused: the retry is recognised and succeeds.
    let c = calls(&journal, "req-a");
    eprintln!("resilient req-a: {:?} {:?}", keys(&c), statuses(&c));
    assert_eq!(keys(&c), ["order-a", "order-a"]);
    assert_eq!(statuses(&c), [Some(503), Some(201)]);
    assert_eq!(a.status.as_u16(), 201);
    let body: serde_json::Value = serde_json::from_slice(&a.body).expect("JSON answer");
    assert_eq!(
        body["id"].as_str(),
        c[1].created.as_deref(),
        "the answer carries the payment's id"
    );

    // No key from the caller: one is made for the order and kept across its attempts.
    let c = calls(&journal, "req-b");
    let k = keys(&c);
    assert_eq!(c.len(), 2);
    assert!(!k[0].is_empty() && k[0] == k[1], "one derived key: {k:?}");
    assert_eq!(b.status.as_u16(), 201);

    // A declined card is not retried.
    let c = calls(&journal, "req-c");
    assert_eq!(statuses(&c), [Some(400)], "a 400 is final");
    assert_eq!(declined.status.as_u16(), 502);

    assert_eq!(
        gate(&journal),
        (true, true),
        "the gate passes key_stability and retry_on_4xx"
    );
}

/// `scenarios/ci-gate-example.yaml` end to end, as CI would run it: `harness exec` starts the
/// fault server, runs the service with its dependency pointed there, drives checkout traffic at
/// the service, and gates on what the service did. The naive service fails the gate, the resilient
/// one passes.
fn ci_gate(mode: &str) -> (Option<i32>, serde_json::Value) {
    exec_gate("ci-gate-example.yaml", &[], &[], mode)
}

/// `harness exec SCENARIO` with `harness_args`, running the example service (on a free port,
/// its payments at the scenario's fault server, `service_args` and `--mode MODE`): the exit code
/// and the JSON report.
fn exec_gate(
    scenario: &str,
    harness_args: &[&str],
    service_args: &[&str],
    mode: &str,
) -> (Option<i32>, serde_json::Value) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let scenario = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(scenario);
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("exec")
        .arg(&scenario)
        .args(["--target", &format!("http://{addr}")])
        .args(harness_args)
        .args(["--format", "json", "--"])
        .arg(example_exe())
        .args(["--bind", &addr, "--payments-url", "$HARNESS_FAULT_URL"])
        .args(service_args)
        .args(["--mode", mode])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{mode}: {e}\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    // The census: an inconclusive check, in either mode, is one the header says is.
    let header = std::fs::read_to_string(&scenario).expect("the scenario");
    if let Err(e) = support::inconclusive_census(&format!("{mode} service"), &header, &report) {
        panic!("{e}");
    }
    (out.status.code(), report)
}

fn verdicts(report: &serde_json::Value) -> Vec<(String, bool)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["passed"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn ci_gate_fails_the_naive_service() {
    let (code, report) = ci_gate("naive");
    let v = verdicts(&report);
    assert_eq!(code, Some(1), "{v:?}");
    for name in ["duplicates", "key_stability", "retry_on_4xx", "jitter"] {
        assert!(
            v.contains(&(name.to_string(), false)),
            "`{name}` should fail: {v:?}"
        );
    }
    assert!(
        report["requests"]["sent"].as_u64().unwrap() > 50,
        "the harness drove load at the service"
    );
}

#[test]
fn ci_gate_passes_the_resilient_service() {
    let (code, report) = ci_gate("resilient");
    let v = verdicts(&report);
    assert_eq!(code, Some(0), "{v:?}\n{}", report["checks"]);
    assert!(v.iter().all(|(_, passed)| *passed));
    assert_eq!(
        report["exec"]["exit_code"], 0,
        "the service was stopped after the load"
    );
}

/// `scenarios/proxy-example.yaml` end to end: the payment API of record (`payments_service`, its
/// own process and SQLite database) behind the scenario's fault server as a proxy, the orders
/// service under `harness exec` calling it through the proxy.
fn proxy_gate(mode: &str) -> (Option<i32>, serde_json::Value) {
    let mut cmd = Command::new(payments_exe());
    cmd.args(["--bind", "127.0.0.1:0"]);
    let payments = Service::spawn(cmd);
    exec_gate(
        "proxy-example.yaml",
        &["--upstream", &payments.url],
        &["--payments-path", "/payments"],
        mode,
    )
}

#[test]
fn proxy_gate_fails_the_naive_service_on_the_real_payments() {
    let (code, report) = proxy_gate("naive");
    let v = verdicts(&report);
    assert_eq!(code, Some(1), "{v:?}");
    for name in ["duplicates", "key_stability", "retry_on_4xx", "jitter"] {
        assert!(
            v.contains(&(name.to_string(), false)),
            "`{name}` should fail: {v:?}\n{}",
            report["checks"]
        );
    }
    // The duplicates are real payments, named by the payment API itself.
    let dup = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "duplicates")
        .unwrap();
    assert!(
        dup["summary"].as_str().unwrap().contains("pay_"),
        "{}",
        dup["summary"]
    );
}

#[test]
fn proxy_gate_passes_the_resilient_service() {
    let (code, report) = proxy_gate("resilient");
    let v = verdicts(&report);
    assert_eq!(code, Some(0), "{v:?}\n{}", report["checks"]);
    assert!(v.iter().all(|(_, passed)| *passed));
    assert!(
        report["requests"]["sent"].as_u64().unwrap() > 50,
        "the harness drove load at the service"
    );
}
