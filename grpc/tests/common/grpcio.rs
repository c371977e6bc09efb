//! A grpcio server (Python, pinned in calibration/python/requirements.txt and installed by
//! `calibration/install.sh` into `.cache/calibration/venv`) on 127.0.0.1, for the tests that need
//! a gRPC server this project did not write. `grpc/tests/interop.rs` uses it, and so does
//! `harness/tests/grpc.rs` (which includes this file).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The server, stopped when dropped.
pub struct Grpcio {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Grpcio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Compiles `proto` (a path under `include`, protoc's `-I`) with grpcio-tools into a temporary
/// directory, then runs `server`: Python that finds the generated modules on `sys.argv[1]`, binds
/// 127.0.0.1:0, prints the port and serves until its stdin closes. `None` (the caller skips) when
/// the venv lacks grpcio, unless `HARNESS_REQUIRE_TOOLS=1`.
pub fn start(include: &Path, proto: &str, server: &str) -> Option<Grpcio> {
    let py = root().join(".cache/calibration/venv/bin/python");
    let ready = Command::new(&py)
        .args(["-c", "import grpc, grpc_tools.protoc, grpc_reflection"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        assert!(
            std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "grpcio is not installed in .cache/calibration/venv, and HARNESS_REQUIRE_TOOLS=1: \
             run `bash calibration/install.sh`"
        );
        eprintln!("skipping: run `bash calibration/install.sh` for grpcio");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let gen = Command::new(&py)
        .current_dir(include)
        .args(["-m", "grpc_tools.protoc", "-I", "."])
        .arg(format!("--python_out={}", dir.path().display()))
        .arg(format!("--grpc_python_out={}", dir.path().display()))
        .arg(proto)
        .output()
        .unwrap();
    assert!(
        gen.status.success(),
        "{}",
        String::from_utf8_lossy(&gen.stderr)
    );
    let mut child = Command::new(&py)
        .args(["-c", server])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("the grpcio server did not print its port: {line:?}")
    });
    Some(Grpcio {
        child,
        port,
        _dir: dir,
    })
}
