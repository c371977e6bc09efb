//! The fault server over TLS and HTTP/2, with curl as the independent client: its own
//! certificate trusted by `--cacert`, ALPN `h2` and `http/1.1`, h2c by prior knowledge, and the
//! faults per HTTP/2 stream.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{journal, start};
use history::{HttpVersion, Outcome};

fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl is installed (Debian's curl; .ci/run installs it)")
}

fn write_ca(dir: &Path, pem: &str) -> String {
    let p = dir.join("ca.pem");
    std::fs::write(&p, pem).expect("write the CA");
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_https_with_its_own_certificate_over_http1_and_http2() {
    let s = start("tls: self-signed").await;
    assert!(s.url().starts_with("https://127.0.0.1:"), "{}", s.url());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca = write_ca(dir.path(), s.certificate_pem().expect("a certificate"));
    let url = format!("{}/hello", s.url());

    let h1 = curl(&["--cacert", &ca, "--http1.1", "-w", " %{http_version}", &url]);
    assert!(h1.status.success(), "{h1:?}");
    assert_eq!(String::from_utf8_lossy(&h1.stdout), "ok\n 1.1");
    let h2 = curl(&["--cacert", &ca, "--http2", "-w", " %{http_version}", &url]);
    assert!(h2.status.success(), "{h2:?}");
    assert_eq!(String::from_utf8_lossy(&h2.stdout), "ok\n 2");
    // Not trusted without the CA: curl's "peer certificate cannot be authenticated".
    let untrusted = curl(&[&url]);
    assert_eq!(untrusted.status.code(), Some(60), "{untrusted:?}");
    // "localhost" is in the certificate too.
    let port = s.addr().port();
    let by_name = curl(&[
        "--cacert",
        &ca,
        "--resolve",
        &format!("localhost:{port}:127.0.0.1"),
        &format!("https://localhost:{port}/"),
    ]);
    assert!(by_name.status.success(), "{by_name:?}");

    let j = journal(&s).await;
    assert_eq!(j.len(), 3, "the untrusted handshake never became a request");
    assert!(j.iter().all(|e| e.tls));
    assert_eq!(j[0].http_version, Some(HttpVersion::Http11));
    assert_eq!(j[1].http_version, Some(HttpVersion::Http2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_act_per_http2_stream() {
    let s = start(
        r#"
rules:
  - { match: { path: /unavailable }, fault: { status: { code: 503, retry_after: 2 } } }
  - { match: { path: /reset }, fault: reset }
  - { match: { path: /reset-too }, fault: reset }
  - { match: { path: /hang }, fault: { hang: { cap: 300ms } } }
  - { match: { path: /goaway }, fault: goaway }
  - { match: { path: /drop }, fault: drop }
"#,
    )
    .await;
    let url = |p: &str| format!("{}{p}", s.url());
    let h2c = |p: &str| {
        curl(&[
            "--http2-prior-knowledge",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &url(p),
        ])
    };

    let unavailable = h2c("/unavailable");
    assert_eq!(String::from_utf8_lossy(&unavailable.stdout), "503");
    // RST_STREAM: curl's "HTTP/2 stream was not closed cleanly" (92), or, when it gives up on
    // the connection with the stream, "error in the HTTP/2 framing layer" (16).
    for path in ["/reset", "/hang"] {
        let r = h2c(path);
        assert!(matches!(r.status.code(), Some(92 | 16)), "{path}: {r:?}");
    }
    let goaway = h2c("/goaway");
    assert!(!goaway.status.success(), "{goaway:?}");
    let dropped = h2c("/drop");
    assert!(!dropped.status.success(), "{dropped:?}");

    // Two streams on one connection (nghttp, nghttp2's client, multiplexes them): the one that
    // is reset does not take the other with it, and both carry the connection's id.
    Command::new("nghttp")
        .args(["-n", &url("/reset-too"), &url("/a")])
        .output()
        .expect("nghttp is installed (Debian's nghttp2-client; .ci/run installs it)");

    let j = journal(&s).await;
    let by_path = |p: &str| {
        j.iter()
            .find(|e| e.path == p)
            .unwrap_or_else(|| panic!("{p} journaled: {j:#?}"))
    };
    assert_eq!(by_path("/unavailable").status, Some(503));
    assert_eq!(by_path("/reset").outcome, Outcome::Reset);
    assert_eq!(by_path("/hang").outcome, Outcome::Hung);
    assert_eq!(by_path("/goaway").outcome, Outcome::Reset);
    assert_eq!(by_path("/goaway").fault.as_deref(), Some("goaway"));
    assert_eq!(by_path("/drop").outcome, Outcome::Dropped);
    assert!(j
        .iter()
        .all(|e| e.http_version == Some(HttpVersion::Http2) && !e.tls));
    assert_eq!(
        by_path("/a").status,
        Some(200),
        "answered beside a reset stream"
    );
    assert_eq!(by_path("/a").conn_id, by_path("/reset-too").conn_id);
    assert_eq!(by_path("/reset-too").outcome, Outcome::Reset);
    assert_ne!(by_path("/a").conn_id, by_path("/reset").conn_id);
}

#[test]
fn the_binary_writes_its_certificate_and_says_https() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca = dir.path().join("ca.pem");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fault-server"))
        .args(["--bind", "127.0.0.1:0", "--tls-self-signed"])
        .arg(&ca)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("fault-server starts");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
        .expect("the ready line");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("ready line: {line:?}"))
        .to_string();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let pem = std::fs::read_to_string(&ca).expect("the certificate was written");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    let ok = curl(&["--cacert", &ca.display().to_string(), &format!("{url}/")]);
    common::binary::stop(child);
    assert!(ok.status.success(), "{ok:?}");
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "ok\n");
}

#[test]
fn unusable_certificate_files_are_bad_input() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_fault-server"))
        .args(["--bind", "127.0.0.1:0", "--tls-cert"])
        .arg(&junk)
        .arg("--tls-key")
        .arg(&junk)
        .output()
        .expect("fault-server runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("junk.pem"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offer_of_only_unknown_protocols_gets_the_no_application_protocol_alert() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::sync::Arc;

    let s = start("tls: self-signed").await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        CertificateDer::pem_slice_iter(s.certificate_pem().expect("a certificate").as_bytes())
    {
        roots
            .add(cert.expect("a PEM certificate"))
            .expect("a usable root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Neither h2 nor http/1.1: RFC 7301 §3.2 says the server answers with a fatal alert.
    cfg.alpn_protocols = vec![b"spdy/3.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(s.addr())
        .await
        .expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("a server name");
    let err = match connector.connect(name, tcp).await {
        Ok(_) => panic!("a handshake without a common protocol succeeded"),
        Err(e) => e,
    };
    let tls = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    assert!(
        matches!(
            tls,
            Some(rustls::Error::AlertReceived(
                rustls::AlertDescription::NoApplicationProtocol
            ))
        ),
        "{err:?}"
    );
}
