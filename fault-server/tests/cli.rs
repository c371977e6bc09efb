//! The real `fault-server` binary: readiness line, `--check`, bad input, port in use.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use assert_cmd::cargo::CommandCargoExt;

mod common;

fn bin() -> Command {
    Command::cargo_bin("fault-server").unwrap()
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `--check --config FILE`, which must refuse it with exit 2: its message.
fn refused_at_check(config: &std::path::Path) -> String {
    let out = bin()
        .args(["--check", "--config"])
        .arg(config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn check_accepts_the_example() {
    let out = bin()
        .args(["--check", "--config", "examples/all-faults.yaml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (7 rules)"));
}

#[test]
fn bad_config_exits_2_with_file_line_column_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "bad.yaml", "rules:\n  - id: a\n    match: { path: /x }\n    fault: { status: { code: 503, retry_afer: 1 } }\n");
    let err = refused_at_check(&p);
    assert!(err.contains(&format!("{}:4:", p.display())), "{err}");
    assert!(err.contains("rules[0].fault.status"), "{err}");
    assert!(err.contains("unknown field `retry_afer`"), "{err}");
    assert_eq!(err.lines().count(), 1, "one clear message: {err}");

    let out = bin()
        .args(["--config", "/nonexistent/x.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/x.yaml: cannot read"));

    let p = write(&dir, "syntax.yaml", "rules: [\n  - {\n");
    let out = bin().args(["--config"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));

    let out = bin().args(["--bind", "not-an-address"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_matcher_no_request_can_meet_is_refused_at_check_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "space.yaml",
        "rules:\n  - id: a\n    match: { path: \"/a b\" }\n    fault: drop\n",
    );
    let err = refused_at_check(&p);
    assert!(
        err.contains(&format!("{}:3:20: at `rules[0].match.path`", p.display())),
        "{err}"
    );
    assert!(err.contains("would never match"), "{err}");
    assert_eq!(err.lines().count(), 1, "one clear message: {err}");
}

#[test]
fn prints_the_listening_line_and_port_in_use_exits_3() {
    let mut child = bin()
        .args([
            "--bind",
            "127.0.0.1:0",
            "--config",
            "examples/all-faults.yaml",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening on http://127.0.0.1:"), "{line}");
    let addr = line
        .trim()
        .trim_start_matches("listening on http://")
        .to_string();

    let out = bin().args(["--bind", &addr]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on {addr}")) && err.to_lowercase().contains("in use"),
        "{err}"
    );
    common::binary::stop(child);
}

#[test]
fn shared_state_without_postgres_and_bad_database_urls_exit_2_with_position() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "shared.yaml",
        "seed: 1\nstate: shared\norders: { idempotency: unique }\n",
    );
    for check in [true, false] {
        let mut cmd = bin();
        if check {
            cmd.arg("--check");
        }
        let out = cmd
            .args(["--bind", "127.0.0.1:0", "--config"])
            .arg(&p)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{}:2:", p.display())), "{err}");
        assert!(err.contains("at `state`"), "{err}");
        assert!(err.contains("PostgreSQL"), "{err}");
        assert_eq!(err.lines().count(), 1, "one clear message: {err}");
    }

    let p = write(
        &dir,
        "url.yaml",
        "orders:\n  database: \"postgres://harness:s3cret@127.0.0.1:port/harness\"\n",
    );
    let err = refused_at_check(&p);
    assert!(err.contains(&format!("{}:2:", p.display())), "{err}");
    assert!(err.contains("orders.database"), "{err}");
    assert!(
        err.contains("invalid PostgreSQL URL postgres://harness@127.0.0.1:port/harness"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
}

#[test]
fn an_unreachable_database_exits_3_naming_it_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "down.yaml",
        "orders: { database: \"postgres://harness:s3cret@127.0.0.1:1/harness\" }\n",
    );
    let out = bin()
        .args(["--bind", "127.0.0.1:0", "--config"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "cannot connect to the orders database postgres://harness@127.0.0.1:1/harness"
        ),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
}

/// Starts the real binary on 127.0.0.1 with `args` and `replica_env` as
/// `FAULT_SERVER_REPLICA_ID` (removed when `None`), sends one request, and returns the `replica`
/// its journal entry names.
fn replica_of_a_request(args: &[&str], replica_env: Option<&str>) -> Option<String> {
    use std::io::{Read, Write};
    let mut cmd = bin();
    cmd.args(["--bind", "127.0.0.1:0"]).args(args);
    match replica_env {
        Some(v) => cmd.env("FAULT_SERVER_REPLICA_ID", v),
        None => cmd.env_remove("FAULT_SERVER_REPLICA_ID"),
    };
    let mut child = cmd
        .env_remove("FAULT_SERVER_CONTROL_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .trim_start_matches("listening on http://")
        .to_string();
    let get = |path: &str| {
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        text
    };
    assert!(get("/anything").starts_with("HTTP/1.1 200"));
    // The journal is written by a thread of its own: asked until the entry is there.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let entry = loop {
        let reply = get("/__harness/journal");
        let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        if let Some(l) = body.lines().find(|l| l.trim_start().starts_with('{')) {
            break serde_json::from_str::<serde_json::Value>(l).unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no journal entry: {reply}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    common::binary::stop(child);
    entry["replica"].as_str().map(str::to_string)
}

#[test]
fn the_replica_is_named_by_the_flag_the_environment_or_the_host_name() {
    // The host name as the system gives it (`uname -n`), independently of how the server reads it.
    let host = Command::new("uname")
        .arg("-n")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|h| !h.is_empty());
    let Some(host) = host else {
        eprintln!("skipping the host-name case: `uname -n` gives no host name");
        return;
    };
    assert_eq!(replica_of_a_request(&[], None), Some(host));
    assert_eq!(
        replica_of_a_request(&[], Some("from-env")).as_deref(),
        Some("from-env")
    );
    assert_eq!(
        replica_of_a_request(&["--replica-id", "from-flag"], Some("from-env")).as_deref(),
        Some("from-flag")
    );
}

#[test]
fn protos_given_on_the_command_line_are_checked_and_served() {
    let dir = tempfile::tempdir().unwrap();
    let proto = write(
        &dir,
        "shop.proto",
        "syntax = \"proto3\";\npackage shop.v1;\nservice Shop { rpc Buy(Req) returns (Req); }\nmessage Req { string sku = 1; }\n",
    );
    let out = bin()
        .arg("--check")
        .arg("--proto")
        .arg(&proto)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let broken = write(&dir, "broken.proto", "syntax = \"proto3\";\nmessage {\n");
    let out = bin()
        .arg("--check")
        .arg("--proto")
        .arg(&broken)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("grpc.protos") && err.contains("broken.proto"),
        "{err}"
    );

    let mut child = bin()
        .args(["--bind", "127.0.0.1:0", "--proto"])
        .arg(&proto)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: std::net::SocketAddr = line
        .trim()
        .trim_start_matches("listening on http://")
        .parse()
        .unwrap_or_else(|_| panic!("{line}"));
    let answered = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut c = common::grpc::Client::connect(addr).await;
        let (_, r) = c
            .call(
                "shop.v1.Shop/Buy",
                bytes::Bytes::from_static(b"\x0a\x01A"),
                &[],
                Default::default(),
            )
            .await
            .unwrap();
        r
    });
    common::binary::stop(child);
    assert_eq!(
        answered.status.code,
        fault_server::GrpcCode::Ok,
        "{:?}",
        answered.status
    );
    assert_eq!(answered.messages.len(), 1);
}

/// The book's page of these flags (`docs/src/reference/fault-server-cli.md`) is `--help` itself,
/// so it cannot drift from the binary; `UPDATE_DOCS=1 cargo test -p fault-server --test cli`
/// writes it again.
#[test]
fn the_books_flag_reference_is_the_binarys_help() {
    let out = bin()
        .arg("--help")
        .env_remove("FAULT_SERVER_CONTROL_TOKEN")
        .env_remove("FAULT_SERVER_REPLICA_ID")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).expect("help is UTF-8");
    assert!(help.contains("--tls-self-signed"), "{help}");
    let mut page = String::from(
        "# The fault server's command line\n\n\
         `fault-server --help`, as the binary prints it. This page is generated by\n\
         `fault-server/tests/cli.rs`, which fails when it is stale; `UPDATE_DOCS=1 cargo test -p\n\
         fault-server --test cli` writes it again. The config file's fields are on\n\
         [The fault server](fault-server.md) and in its [JSON Schema](schemas.md).\n\n```text\n",
    );
    for line in help.trim_end().lines() {
        page.push_str(line.trim_end());
        page.push('\n');
    }
    page.push_str("```\n");
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/src/reference/fault-server-cli.md"
    );
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(path, &page).expect("the page is writable");
        return;
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == page,
        "docs/src/reference/fault-server-cli.md is stale \
         (UPDATE_DOCS=1 cargo test -p fault-server --test cli writes it)"
    );
}

/// Runs the binary with `args`, reads its ready line and its stderr's first lines (where the
/// proxies and Toxiproxy's API say where they listen); the child, to stop.
fn started(args: &[&str]) -> (std::process::Child, Vec<String>) {
    let mut child = bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening on http://127.0.0.1:"), "{line}");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = Vec::new();
    for _ in 0..args
        .iter()
        .filter(|a| a.starts_with("--proxy") || **a == "--toxiproxy-api")
        .count()
    {
        let mut l = String::new();
        err.read_line(&mut l).unwrap();
        said.push(l.trim().to_string());
    }
    (child, said)
}

#[test]
fn proxies_from_flags_and_toxiproxys_api_open_as_the_image_runs_them() {
    // What the book tells a Testcontainers Toxiproxy module to run in the image.
    let (child, said) = started(&[
        "--bind",
        "127.0.0.1:0",
        "--proxy",
        "cache=127.0.0.1:0,127.0.0.1:6379",
        "--toxiproxy-api",
        "0.0.0.0:0",
        "--toxiproxy-api-open",
    ]);
    assert!(
        said[0].starts_with("proxy cache listening on 127.0.0.1:"),
        "{said:?}"
    );
    let api = said[1]
        .strip_prefix("Toxiproxy API on http://0.0.0.0:")
        .unwrap_or_else(|| panic!("{said:?}"));
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{api}")).unwrap();
    std::io::Write::write_all(
        &mut s,
        b"GET /proxies HTTP/1.1\r\nhost: 172.17.0.2:8474\r\nconnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"cache\""), "{answer}");
    common::binary::stop(child);
}

#[test]
fn bad_proxy_flags_and_a_public_api_without_a_token_exit_2_with_one_message() {
    let out = bin()
        .args(["--proxy", "cache=127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NAME=LISTEN,UPSTREAM"), "{err}");

    let out = bin()
        .args(["--bind", "127.0.0.1:0", "--toxiproxy-api", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a control token"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        &dir,
        "p.yaml",
        "proxies:\n  - name: db\n    listen: 127.0.0.1:0\n    upstream: 127.0.0.1:5432\n    toxics:\n      - { type: latency, attributes: { latency: 10, jiter: 2 } }\n",
    );
    let err = refused_at_check(&cfg);
    assert!(
        err.contains(":6:") && err.contains("proxies[0].toxics[0].attributes.jiter"),
        "{err}"
    );
}

#[test]
fn a_proxy_whose_address_is_in_use_exits_3_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let out = bin()
        .args(["--bind", "127.0.0.1:0", "--proxy"])
        .arg(format!("db={at},127.0.0.1:5432"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("proxy db: cannot listen on {at}"))
            && err.to_lowercase().contains("in use"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one message: {err}");
}
