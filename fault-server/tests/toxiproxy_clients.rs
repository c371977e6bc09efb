//! Toxiproxy's published client libraries, unchanged, against this server's Toxiproxy API:
//! `toxiproxy-python` and `toxiproxy-node-client` make proxies in front of a real Redis and a
//! real PostgreSQL, add each toxic, and a real client of each (redis-py and psycopg; ioredis and
//! pg) sees it on its connection (`calibration/toxiproxy/clients.py`, `clients.mjs`). Then the
//! journal holds every connection they made, with the toxics that acted on it.
//!
//! The libraries are installed, pinned, by `calibration/toxiproxy/install.sh` (which
//! `calibration/install.sh`, and so `.ci/run`, calls) into `.cache/toxiproxy/`; Redis and
//! PostgreSQL are `bash .ci/redis` and `bash .ci/postgres`, whose URLs this reads from
//! `FAULT_SERVER_TEST_REDIS_URL` and `FAULT_SERVER_TEST_DATABASE_URL`. Without them it says that
//! it skips, unless `HARNESS_REQUIRE_TOOLS=1` (CI), where a missing one is a failure.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fault_server::{Config, FaultServer, ServerOptions};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What the clients need, or why the test cannot run.
struct Tools {
    python: PathBuf,
    node_dir: PathBuf,
    redis: String,
    postgres: String,
}

fn tools() -> Result<Tools, String> {
    let cache = root().join(".cache/toxiproxy");
    let python = cache.join("venv/bin/python");
    let node_dir = cache.join("node");
    if !python.exists() || !node_dir.join("node_modules/toxiproxy-node-client").exists() {
        return Err(
            "Toxiproxy's clients are not installed: run `bash calibration/install.sh` (.ci/run does)"
                .into(),
        );
    }
    let redis = std::env::var("FAULT_SERVER_TEST_REDIS_URL").map_err(|_| {
        "no Redis: export FAULT_SERVER_TEST_REDIS_URL=\"$(bash .ci/redis)\"".to_string()
    })?;
    let postgres = std::env::var("FAULT_SERVER_TEST_DATABASE_URL").map_err(|_| {
        "no PostgreSQL: export FAULT_SERVER_TEST_DATABASE_URL=\"$(bash .ci/postgres)\"".to_string()
    })?;
    let redis = redis
        .strip_prefix("redis://")
        .unwrap_or(&redis)
        .trim_end_matches('/')
        .to_string();
    Ok(Tools {
        python,
        node_dir,
        redis,
        postgres,
    })
}

/// The tools, or `None` after saying why this test skips (a failure under
/// `HARNESS_REQUIRE_TOOLS=1`).
fn tools_or_skip() -> Option<Tools> {
    match tools() {
        Ok(t) => Some(t),
        Err(why) => {
            assert!(
                std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
                "{why}"
            );
            eprintln!("skipping Toxiproxy's client libraries: {why}");
            None
        }
    }
}

async fn start() -> (FaultServer, SocketAddr) {
    let server = FaultServer::start(
        Config::default(),
        ServerOptions {
            toxiproxy_api: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            ..ServerOptions::default()
        },
    )
    .await
    .expect("server starts");
    let api = server.toxiproxy_api_addr().expect("the API listens");
    (server, api)
}

/// Runs a client script to its end; panics with its output when a case failed.
async fn run(mut cmd: Command, what: &str) {
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("the script's thread")
        .unwrap_or_else(|e| panic!("{what} cannot start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{what}:\n{stdout}");
    assert!(
        out.status.success() && stdout.contains("all passed"),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The journal's connections through `proxy`, with the toxic types that acted on them.
async fn journaled(server: &FaultServer, proxy: &str) -> Vec<Vec<String>> {
    server.settle(Duration::from_secs(5)).await;
    server
        .journal()
        .entries()
        .into_iter()
        .filter_map(|e| e.tcp)
        .filter(|t| t.proxy == proxy)
        .map(|t| t.toxics.into_iter().map(|x| x.kind).collect())
        .collect()
}

fn assert_journaled(conns: &[Vec<String>], proxy: &str, kinds: &[&str]) {
    assert!(!conns.is_empty(), "{proxy}: no connection journaled");
    for kind in kinds {
        assert!(
            conns.iter().any(|c| c.iter().any(|k| k == kind)),
            "{proxy}: no connection journaled with a {kind} toxic: {conns:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toxiproxy_python_drives_the_api_and_its_toxics_reach_redis_and_postgres() {
    let Some(t) = tools_or_skip() else { return };
    let (server, api) = start().await;
    let mut cmd = Command::new(&t.python);
    cmd.arg(root().join("calibration/toxiproxy/clients.py"))
        .env("TOXIPROXY_HOST", api.ip().to_string())
        .env("TOXIPROXY_PORT", api.port().to_string())
        .env("REDIS_ADDR", &t.redis)
        .env("PG_URL", &t.postgres);
    run(cmd, "toxiproxy-python").await;
    let redis = journaled(&server, "py_redis").await;
    assert_journaled(
        &redis,
        "py_redis",
        &[
            "latency",
            "bandwidth",
            "slicer",
            "timeout",
            "reset_peer",
            "limit_data",
            "slow_close",
        ],
    );
    assert_journaled(
        &journaled(&server, "py_pg").await,
        "py_pg",
        &["latency", "reset_peer", "timeout"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toxiproxy_node_client_drives_the_api_and_its_toxics_reach_redis_and_postgres() {
    let Some(t) = tools_or_skip() else { return };
    let (server, api) = start().await;
    let mut cmd = Command::new("node");
    cmd.arg(root().join("calibration/toxiproxy/clients.mjs"))
        .env("TOXIPROXY_URL", format!("http://{api}"))
        .env("CLIENTS_NODE_DIR", &t.node_dir)
        .env("REDIS_ADDR", &t.redis)
        .env("PG_URL", &t.postgres);
    run(cmd, "toxiproxy-node-client").await;
    assert_journaled(
        &journaled(&server, "node_redis").await,
        "node_redis",
        &[
            "latency",
            "bandwidth",
            "slicer",
            "timeout",
            "reset_peer",
            "limit_data",
            "slow_close",
        ],
    );
    assert_journaled(
        &journaled(&server, "node_pg").await,
        "node_pg",
        &["latency", "reset_peer", "timeout"],
    );
}
