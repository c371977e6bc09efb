//! The harness over TLS and HTTP/2, as a user runs it: the real `harness` binary against a fault
//! server with a certificate of its own — trusted with `--cacert`, with `--insecure`, or not at
//! all (exit 3 and the reason in one line) — HTTP/2 over TLS and h2c, and every burst sync mode
//! reporting the skew it achieved.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use assert_cmd::cargo::CommandCargoExt;

fn harness() -> Command {
    Command::cargo_bin("harness").expect("the harness binary")
}

/// A fault server in a background runtime, with its certificate (when it has one) in a file.
struct Server {
    url: String,
    ca: Option<PathBuf>,
    journal: PathBuf,
    server: std::sync::Arc<fault_server::FaultServer>,
    rt: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

fn server(yaml: &str) -> Server {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let journal = dir.path().join("journal.jsonl");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let cfg = fault_server::Config::from_yaml(yaml, "test").expect("a valid config");
    let opts = fault_server::ServerOptions {
        journal_file: Some(journal.clone()),
        ..Default::default()
    };
    let s = rt
        .block_on(fault_server::FaultServer::start(cfg, opts))
        .expect("the server starts");
    let ca = s.certificate_pem().map(|pem| {
        let p = dir.path().join("ca.pem");
        std::fs::write(&p, pem).expect("write the CA");
        p
    });
    let url = s.url();
    let server = std::sync::Arc::new(s);
    let keep = server.clone();
    rt.spawn(async move {
        let _keep = keep;
        std::future::pending::<()>().await
    });
    Server {
        url,
        ca,
        journal,
        server,
        rt,
        _dir: dir,
    }
}

fn run(cmd: &mut Command) -> (Output, serde_json::Value, String) {
    let out = cmd.output().expect("harness runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (out, json, stderr)
}

/// The journal, once every request the server received is in it: a client may read its last
/// answer before the server has journaled it.
fn journal(s: &Server) -> Vec<serde_json::Value> {
    assert!(
        s.rt.block_on(s.server.settle(std::time::Duration::from_secs(10))),
        "the journal did not settle"
    );
    s.server.journal().flush();
    std::fs::read_to_string(&s.journal)
        .expect("the journal file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a journal line"))
        .collect()
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn load_over_https_trusts_the_ca_or_insecure_and_refuses_otherwise() {
    let s = server("tls: self-signed");
    let ca = path(s.ca.as_ref().expect("a certificate"));
    let url = format!("{}/", s.url);
    for trust in [
        vec!["--cacert", ca.as_str()],
        vec!["--insecure"],
        vec!["-k"],
    ] {
        let (out, report, stderr) = run(harness()
            .args(["load", &url, "-c", "4", "-n", "200", "--format", "json"])
            .args(&trust));
        assert_eq!(out.status.code(), Some(0), "{trust:?}: {stderr}");
        assert_eq!(report["requests"]["completed"], 200, "{trust:?}");
        assert_eq!(report["requests"]["errors"], 0, "{trust:?}");
    }
    let (out, _, stderr) = run(harness().args(["load", &url, "-c", "2", "-n", "10"]));
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("unknown issuer"), "{stderr}");
    assert!(stderr.contains("--cacert"), "says what to do: {stderr}");
    assert!(journal(&s).iter().all(|e| e["tls"] == true));
}

/// A certificate for `names`, valid from `not_before` to `not_after` (unix seconds), signed by
/// itself; written as cert.pem and key.pem under `dir`.
fn certificate(dir: &Path, names: &[&str], not_before: i64, not_after: i64) -> (PathBuf, PathBuf) {
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .expect("certificate parameters");
    params.not_before = time::OffsetDateTime::from_unix_timestamp(not_before).expect("a timestamp");
    params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after).expect("a timestamp");
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = params.self_signed(&key).expect("a certificate");
    let (c, k) = (
        dir.join(format!("{}.pem", names[0])),
        dir.join(format!("{}.key", names[0])),
    );
    std::fs::write(&c, cert.pem()).expect("write the certificate");
    std::fs::write(&k, key.serialize_pem()).expect("write the key");
    (c, k)
}

#[test]
fn a_certificate_for_another_name_or_out_of_date_is_named_as_such() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64;
    let year = 365 * 24 * 3600;
    let cases = [
        (vec!["example.com"], now - year, now + year, "name mismatch"),
        (vec!["127.0.0.1"], now - 2 * year, now - year, "expired"),
    ];
    for (names, from, until, reason) in cases {
        let (cert, key) = certificate(dir.path(), &names, from, until);
        let s = server(&format!(
            "tls: {{ cert: {}, key: {} }}",
            path(&cert),
            path(&key)
        ));
        let (out, _, stderr) = run(harness()
            .args(["load", &format!("{}/", s.url), "-n", "1", "--cacert"])
            .arg(&cert));
        assert_eq!(out.status.code(), Some(3), "{reason}: {stderr}");
        assert!(stderr.contains(reason), "{reason}: {stderr}");
    }
}

#[test]
fn http2_over_tls_and_over_h2c_with_streams_per_connection() {
    for yaml in ["tls: self-signed", "{}"] {
        let s = server(yaml);
        let mut cmd = harness();
        cmd.args(["load", &format!("{}/", s.url), "-c", "2", "--streams", "8"])
            .args(["-n", "400", "--http2", "--format", "json"]);
        if let Some(ca) = &s.ca {
            cmd.arg("--cacert").arg(ca);
        }
        let (out, report, stderr) = run(&mut cmd);
        assert_eq!(out.status.code(), Some(0), "{yaml}: {stderr}");
        assert_eq!(report["requests"]["completed"], 400, "{yaml}");
        let j = journal(&s);
        assert_eq!(j.len(), 400);
        assert!(j.iter().all(|e| e["http_version"] == "2"), "{yaml}");
        let conns: std::collections::BTreeSet<u64> =
            j.iter().filter_map(|e| e["conn_id"].as_u64()).collect();
        assert_eq!(conns.len(), 2, "{yaml}: -c 2 connections, 8 streams each");
    }
}

/// The connections are shared among as many driving tasks as the runtime has threads: every one
/// of them is opened and used, whatever the division, and `--threads` out of bounds is refused.
#[test]
fn http2_connections_are_divided_among_the_runtime_threads() {
    let s = server("{}");
    for threads in ["1", "3"] {
        let (out, report, stderr) = run(harness()
            .args(["--threads", threads, "load", &format!("{}/", s.url)])
            .args([
                "-c",
                "5",
                "--streams",
                "4",
                "-n",
                "500",
                "--http2",
                "--format",
                "json",
            ]));
        assert_eq!(out.status.code(), Some(0), "--threads {threads}: {stderr}");
        assert_eq!(report["requests"]["completed"], 500, "--threads {threads}");
    }
    let j = journal(&s);
    assert_eq!(j.len(), 1000);
    let conns: std::collections::BTreeSet<u64> =
        j.iter().filter_map(|e| e["conn_id"].as_u64()).collect();
    assert_eq!(conns.len(), 10, "5 connections per run");
    let (out, _, stderr) = run(harness().args(["load", &format!("{}/", s.url), "--threads", "0"]));
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'--threads <N>'") && stderr.contains("1..=1024"),
        "{stderr}"
    );
}

#[test]
fn every_sync_mode_reports_the_skew_it_achieved() {
    let s = server("tls: self-signed\norders: { idempotency: unique }");
    let ca = path(s.ca.as_ref().expect("a certificate"));
    let url = format!("{}/orders", s.url);
    for (mode, http2) in [
        ("release", false),
        ("last-byte", false),
        ("single-packet", true),
        ("release", true),
    ] {
        let mut cmd = harness();
        cmd.args([
            "idempotency",
            &url,
            "--rounds",
            "3",
            "--sync",
            mode,
            "--cacert",
            &ca,
        ])
        .args(["--format", "json"]);
        if http2 {
            cmd.arg("--http2");
        }
        let (out, report, stderr) = run(&mut cmd);
        assert_eq!(out.status.code(), Some(0), "{mode} http2={http2}: {stderr}");
        assert!(
            report["phases"][0]["metrics"]["release_skew_us_max"].is_u64(),
            "{mode}: the skew is reported: {report}"
        );
    }
    // A mode the protocol cannot do is refused before anything is sent.
    let (out, _, stderr) = run(harness().args([
        "idempotency",
        &url,
        "--sync",
        "single-packet",
        "--cacert",
        &ca,
    ]));
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("needs HTTP/2"), "{stderr}");
}

#[test]
fn a_scenario_with_an_embedded_tls_server_needs_no_flag_and_reports_its_sync() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let scenario = dir.path().join("h2.yaml");
    std::fs::write(
        &scenario,
        r#"
name: h2-burst
server:
  tls: self-signed
  orders: { idempotency: unique }
http: { version: 2 }
phases:
  - name: bursts
    burst: { size: 10, rounds: 3, sync: single-packet }
    request: { method: POST, path: /orders, headers: { Idempotency-Key: "{{key}}" }, json: { sku: a } }
  - name: h1-style
    burst: { size: 5, rounds: 2, sync: release }
    request: { method: POST, path: /orders, headers: { Idempotency-Key: "{{key}}" }, json: { sku: b } }
checks:
  duplicates: {}
  idempotency_semantics: {}
"#,
    )
    .expect("write the scenario");
    let (out, report, stderr) = run(harness()
        .arg("run")
        .arg(&scenario)
        .args(["--format", "json"]));
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{report}");
    assert_eq!(report["phases"][0]["metrics"]["sync"], "single-packet");
    assert_eq!(report["phases"][1]["metrics"]["sync"], "release");
    for p in 0..2 {
        assert!(
            report["phases"][p]["metrics"]["release_skew_us_max"].is_u64(),
            "phase {p}: {report}"
        );
    }
    let _ = &dir;
}

/// nginx, serving h2c (HTTP/2 with prior knowledge) on a free loopback port from a
/// configuration of its own; stopped when dropped. `None` when nginx is not installed (a
/// failure instead under `HARNESS_REQUIRE_TOOLS=1`).
struct Nginx {
    url: String,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    /// SIGTERM, so that the master stops its worker (a SIGKILL to the master would leave the
    /// worker running); SIGKILL only if it is not gone within five seconds.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_h2c() -> Option<Nginx> {
    let bin = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(bin) = bin else {
        assert!(
            std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "nginx is not installed, and HARNESS_REQUIRE_TOOLS=1 requires the test against it"
        );
        eprintln!("skipping: nginx is not installed");
        return None;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let conf = dir.path().join("nginx.conf");
    let d = path(dir.path());
    std::fs::write(
        &conf,
        format!(
            "daemon off;\nworker_processes 1;\nerror_log {d}/error.log;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d};\n\
             server {{\n    listen 127.0.0.1:{port} http2;\n\
             location / {{\n      if ($host = \"\") {{ return 421; }}\n      return 200 \"ok\\n\";\n    }}\n  }}\n}}\n"
        ),
    )
    .expect("write nginx.conf");
    let mut nginx = Nginx {
        url: String::new(),
        child: Command::new(bin)
            .args([
                "-c",
                &path(&conf),
                "-p",
                &d,
                "-e",
                &format!("{d}/error.log"),
            ])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nginx starts"),
        _dir: dir,
    };
    let addr = format!("127.0.0.1:{port}");
    for _ in 0..100 {
        if std::net::TcpStream::connect(&addr).is_ok() {
            nginx.url = format!("http://{addr}");
            return Some(nginx);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("nginx did not listen on {addr}");
}

/// A server this project did not write accepts the harness's HTTP/2 requests: nginx refuses one
/// without `:scheme` (400), and this one answers 421 when `:authority` is missing, so every
/// request must carry both.
#[test]
fn http2_requests_carry_scheme_and_authority_that_nginx_accepts() {
    let Some(nginx) = nginx_h2c() else { return };
    let (out, report, stderr) = run(harness()
        .args(["load", &format!("{}/", nginx.url), "--http2", "-c", "2"])
        .args(["--streams", "4", "-n", "40", "--format", "json"]));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(report["requests"]["by_status"]["200"], 40, "{report}");
}
