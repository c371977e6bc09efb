//! What the tests of the real `harness` binary share (`cli.rs`, `interface.rs`): the command,
//! paths in the repository, its output as text, files in a scratch directory, and a fault server
//! in a background runtime journaling to a file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use assert_cmd::cargo::CommandCargoExt;

pub fn harness() -> Command {
    Command::cargo_bin("harness").unwrap()
}

pub fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

pub fn write(dir: &tempfile::TempDir, name: &str, body: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// A fault server in a background runtime, for commands that need a target URL, journaling
/// to a file.
pub struct Server {
    pub url: String,
    pub journal: PathBuf,
    _rt: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

pub fn server(yaml: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let cfg = fault_server::Config::from_yaml(yaml, "test").unwrap();
    let opts = fault_server::ServerOptions {
        journal_file: Some(journal.clone()),
        ..Default::default()
    };
    let s = rt
        .block_on(fault_server::FaultServer::start(cfg, opts))
        .unwrap();
    let url = s.url();
    // Leak the handle into the runtime: it serves until the runtime is dropped with the struct.
    rt.spawn(async move {
        let _keep = s;
        std::future::pending::<()>().await
    });
    Server {
        url,
        journal,
        _rt: rt,
        _dir: dir,
    }
}
