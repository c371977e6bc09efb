//! TLS against certificates made by the real `openssl` binary: the usual self-signed pair given
//! with `--cacert` is trusted as curl trusts it, and a refused certificate is named in one
//! sentence with its remedy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use history::ErrorKind;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::tls::TlsOptions;
use transport::{Conn, Connect, Outgoing, Target};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl binary runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh directory under the target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("transport-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// An HTTPS server on 127.0.0.1:0 with `cert`/`key` that answers every request `200 ok`.
async fn https(cert: &Path, key: &Path) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("the certificate file")
        .collect::<Result<_, _>>()
        .expect("PEM certificates");
    let key = PrivateKeyDer::from_pem_file(key).expect("the key");
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("a server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("its address").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
                let _ = s.shutdown().await;
            });
        }
    });
    format!("https://127.0.0.1:{port}/")
}

async fn get(url: &str, ca: Option<&Path>) -> Result<transport::Reply, transport::AttemptError> {
    let how = Connect {
        tls: TlsOptions {
            ca: ca.map(Path::to_path_buf),
            ..TlsOptions::default()
        },
        ..Connect::default()
    };
    let target = Arc::new(Target::with(url, &how).expect("the URL"));
    let req = Outgoing {
        method: http::Method::GET,
        uri: "/".into(),
        headers: http::HeaderMap::new(),
        body: bytes::Bytes::new(),
    };
    Conn::new(target).send(req, Duration::from_secs(30)).await
}

/// The pair `openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -addext
/// subjectAltName=IP:127.0.0.1` makes (marked CA:TRUE), given with `--cacert`, as curl takes it;
/// without it, the issuer is unknown; by a name it does not have, a mismatch.
#[tokio::test]
async fn the_usual_self_signed_pair_given_with_cacert_is_trusted() {
    let dir = scratch("self-signed");
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
            "-days",
            "2",
        ],
    );
    let url = https(&dir.join("cert.pem"), &dir.join("key.pem")).await;
    let r = get(&url, Some(&dir.join("cert.pem")))
        .await
        .expect("trusted as given");
    assert_eq!(&r.body[..], b"ok");
    // Without it: refused, and the message says what to give.
    let e = get(&url, None).await.expect_err("not trusted without it");
    assert_eq!(e.kind, ErrorKind::Tls);
    assert!(e.message.contains("basicConstraints CA:TRUE"), "{e}");
    assert!(e.message.contains("--cacert"), "{e}");
    // The same certificate by a name it does not have: its name is still checked.
    let by_name = url.replace("127.0.0.1", "localhost");
    let e = get(&by_name, Some(&dir.join("cert.pem")))
        .await
        .expect_err("a name it does not have");
    assert!(e.message.starts_with("name mismatch"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server certificate marked CA:TRUE, signed by a CA given with `--cacert` (so not itself
/// given): refused, in words.
#[tokio::test]
async fn a_ca_certificate_as_the_servers_is_named_in_words() {
    let dir = scratch("ca-as-leaf");
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=Test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
        ],
    );
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "key.pem",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "basicConstraints=critical,CA:TRUE\nsubjectAltName=IP:127.0.0.1\n",
    )
    .expect("the extensions file");
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "cert.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    let url = https(&dir.join("cert.pem"), &dir.join("key.pem")).await;
    let e = get(&url, Some(&dir.join("ca.pem")))
        .await
        .expect_err("a CA certificate as the server's");
    assert_eq!(e.kind, ErrorKind::Tls);
    assert!(
        e.message
            .contains("the server's certificate is a CA certificate (basicConstraints CA:TRUE)"),
        "{e}"
    );
    assert!(!e.message.contains("Other("), "a debug print: {e}");
    let _ = std::fs::remove_dir_all(&dir);
}
