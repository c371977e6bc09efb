//! A `protocol: redis` proxy between redis-py and a real Redis, over real sockets, in RESP2 and
//! RESP3: each RESP error a rule answers (`-LOADING`, `-BUSY`, `-READONLY`, `-TRYAGAIN`,
//! `-MOVED`, `-OOM`) as the client library raises it, and the command never run; a command or
//! its reply held; a command run and its reply lost (`drop`); a connection cut before the
//! command (`reset`); a pipeline's errors in their places; and bytes that are not RESP closed,
//! or forwarded unread, with a journal entry that says why.
//!
//! Needs a Redis (`FAULT_SERVER_TEST_REDIS_URL`: `bash .ci/redis` prints one) and redis-py (the
//! services' venv: `bash calibration/below/install.sh`); without them each test says it skips,
//! unless `HARNESS_REQUIRE_TOOLS=1`. Each test's keys carry a prefix of its own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fault_server::{Config, FaultServer, ServerOptions};
use history::{Entry, Outcome, TcpEnd};
use serde_json::Value;

fn skip(test: &str, why: &str) {
    assert!(
        std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "{test}: {why}, and HARNESS_REQUIRE_TOOLS=1 requires it"
    );
    eprintln!("{test}: skipped: {why}");
}

/// Redis's `host:port` and redis-py's Python, or `None` after saying which is missing.
fn tools(test: &str) -> Option<(String, PathBuf)> {
    let Ok(url) = std::env::var("FAULT_SERVER_TEST_REDIS_URL") else {
        skip(
            test,
            "FAULT_SERVER_TEST_REDIS_URL is not set (`bash .ci/redis` prints one)",
        );
        return None;
    };
    let python =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/calibration/below/venv/bin/python");
    if !python.exists() {
        skip(
            test,
            "redis-py is not installed (bash calibration/below/install.sh)",
        );
        return None;
    }
    let addr = url
        .trim()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_string();
    Some((addr, python))
}

/// A server whose proxy `cache` reads RESP in front of `redis`; `settings` is its `redis:` (YAML
/// indented under it).
async fn start(redis: &str, settings: &str) -> FaultServer {
    let yaml = format!(
        "proxies:\n  - name: cache\n    listen: 127.0.0.1:0\n    upstream: {redis}\n    protocol: redis\n    redis:\n{settings}\n"
    );
    let cfg = Config::from_yaml(&yaml, "test").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    FaultServer::start(cfg, ServerOptions::default())
        .await
        .expect("the server starts")
}

/// redis-py runs `commands` through `at` (one at a time, or as one pipeline), in RESP `protocol`
/// 2 or 3, with no retry of its own: per command `{"ok": …}` or `{"error": class, "message":
/// …}`, with `ms` the time it took.
const CLIENT: &str = r#"
import json, sys, time
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
host, port, protocol, pipeline, commands = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "pipeline", json.loads(sys.argv[5])
r = redis.Redis(host=host, port=port, protocol=protocol, socket_timeout=10, retry=Retry(NoBackoff(), 0), decode_responses=True)
def shown(v):
    if isinstance(v, Exception):
        return {"error": type(v).__name__, "message": str(v)}
    return {"ok": v if isinstance(v, (str, int, type(None))) else repr(v)}
out = []
if pipeline:
    p = r.pipeline(transaction=False)
    for c in commands:
        p.execute_command(*c)
    try:
        out = [shown(v) for v in p.execute(raise_on_error=False)]
    except Exception as e:
        out = [shown(e)]
else:
    for c in commands:
        t = time.monotonic()
        try:
            v = shown(r.execute_command(*c))
        except Exception as e:
            v = shown(e)
        v["ms"] = (time.monotonic() - t) * 1000
        out.append(v)
print(json.dumps(out))
"#;

fn run(
    python: &Path,
    at: SocketAddr,
    protocol: u8,
    pipeline: bool,
    commands: &[&[&str]],
) -> Vec<Value> {
    let out = Command::new(python)
        .args(["-c", CLIENT])
        .arg(at.ip().to_string())
        .arg(at.port().to_string())
        .arg(protocol.to_string())
        .arg(if pipeline { "pipeline" } else { "each" })
        .arg(serde_json::to_string(commands).unwrap())
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// A command straight to Redis (RESP2), bypassing the proxy: its raw reply.
fn direct(redis: &str, args: &[&str]) -> String {
    let mut s = TcpStream::connect(redis).expect("Redis");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The journal once `connections` proxied connections have ended (within 10 s).
async fn journal(s: &FaultServer, connections: usize) -> Vec<Entry> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        s.settle(Duration::from_secs(2)).await;
        let j = s.journal().entries();
        let n = j.iter().filter(|e| e.tcp.is_some()).count();
        if n >= connections || Instant::now() > deadline {
            assert!(n >= connections, "{n} of {connections} connections: {j:#?}");
            return j;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn commands(j: &[Entry]) -> Vec<&Entry> {
    j.iter().filter(|e| e.redis().is_some()).collect()
}

fn prefix(test: &str) -> String {
    format!("{test}:{}:", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_resp_error_reaches_redis_py_as_redis_sends_it_and_the_command_never_runs() {
    const T: &str = "resp_errors";
    let Some((redis, python)) = tools(T) else {
        return;
    };
    let p = prefix(T);
    let rules = format!(
        r#"      rules:
        - {{ id: loading, match: {{ key: "{p}loading" }}, fault: {{ error: LOADING }} }}
        - {{ id: busy, match: {{ key: "{p}busy" }}, fault: {{ error: BUSY }} }}
        - {{ id: readonly, match: {{ command: SET, key: "{p}ro*" }}, fault: {{ error: READONLY }} }}
        - {{ id: tryagain, match: {{ key: "{p}tryagain" }}, fault: {{ error: TRYAGAIN }} }}
        - {{ id: moved, match: {{ key: "{p}moved" }}, fault: {{ error: {{ code: MOVED, to: "127.0.0.1:7001" }} }} }}
        - {{ id: oom, match: {{ command: SET, key: "{p}oom" }}, fault: {{ error: OOM }} }}"#
    );
    let server = start(&redis, &rules).await;
    let at = server.proxy_addr("cache").unwrap();
    for protocol in [2u8, 3] {
        let k = |s: &str| format!("{p}{s}");
        let (loading, busy, ro, tryagain, moved, oom, fine) = (
            k("loading"),
            k("busy"),
            k("ro1"),
            k("tryagain"),
            k("moved"),
            k("oom"),
            k("fine"),
        );
        let out = tokio::task::block_in_place(|| {
            run(
                &python,
                at,
                protocol,
                false,
                &[
                    &["GET", &loading],
                    &["GET", &busy],
                    &["SET", &ro, "x"],
                    &["GET", &tryagain],
                    &["GET", &moved],
                    &["SET", &oom, "x"],
                    &["SET", &fine, "x"],
                    &["GET", &fine],
                ],
            )
        });
        let got: Vec<(String, String)> = out
            .iter()
            .map(|v| {
                (
                    v["error"].as_str().unwrap_or("ok").to_string(),
                    v["message"]
                        .as_str()
                        .map_or_else(|| v["ok"].to_string(), str::to_string),
                )
            })
            .collect();
        let expected = [
            ("BusyLoadingError", "Redis is loading the dataset in memory"),
            ("ResponseError", "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."),
            ("ReadOnlyError", "You can't write against a read only replica."),
            ("TryAgainError", "Multiple keys request during rehashing of slot"),
            ("MovedError", ""),
            ("OutOfMemoryError", "command not allowed when used memory > 'maxmemory'."),
        ];
        for (i, (class, message)) in expected.iter().enumerate() {
            assert_eq!(got[i].0, *class, "RESP{protocol} command {i}: {got:?}");
            assert!(
                got[i].1.starts_with(message),
                "RESP{protocol} command {i}: {got:?}"
            );
        }
        // MOVED names the key's slot and where it is served now.
        let (slot, to) = got[4].1.split_once(' ').unwrap();
        assert!(
            slot.parse::<u16>().is_ok_and(|s| s < 16384) && to == "127.0.0.1:7001",
            "{got:?}"
        );
        assert_eq!(got[6], ("ok".to_string(), "true".to_string()), "{got:?}");
        assert_eq!(got[7].1, "\"x\"", "{got:?}");
        // What a rule answered never reached Redis.
        for key in [&ro, &oom] {
            assert_eq!(direct(&redis, &["EXISTS", key]), ":0\r\n", "{key}");
        }
        direct(&redis, &["DEL", &fine]);
    }
    let j = journal(&server, 2).await;
    let errors: Vec<Option<&str>> = commands(&j)
        .iter()
        .filter(|e| e.fault.is_some())
        .map(|e| e.redis().unwrap().error.as_deref())
        .collect();
    let one_run = [
        Some("LOADING"),
        Some("BUSY"),
        Some("READONLY"),
        Some("TRYAGAIN"),
        Some("MOVED"),
        Some("OOM"),
    ];
    assert_eq!(errors, [one_run, one_run].concat());
    assert!(
        commands(&j)
            .iter()
            .any(|e| e.redis().unwrap().command == "HELLO"),
        "RESP3's HELLO"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_holds_a_command_or_its_reply() {
    const T: &str = "resp_delay";
    let Some((redis, python)) = tools(T) else {
        return;
    };
    let p = prefix(T);
    let rules = format!(
        r#"      rules:
        - {{ id: before, match: {{ command: SET, key: "{p}*" }}, fault: {{ delay: 300ms }} }}
        - {{ id: after, match: {{ command: GET, key: "{p}*" }}, fault: {{ delay: {{ duration: 300ms, when: after }} }} }}"#
    );
    let server = start(&redis, &rules).await;
    let at = server.proxy_addr("cache").unwrap();
    let key = format!("{p}k");
    let out = tokio::task::block_in_place(|| {
        run(
            &python,
            at,
            2,
            false,
            &[&["SET", &key, "v"], &["GET", &key], &["PING"]],
        )
    });
    let ms: Vec<f64> = out.iter().map(|v| v["ms"].as_f64().unwrap()).collect();
    assert!(ms[0] >= 300.0 && ms[1] >= 300.0, "{out:?}");
    assert!(ms[2] < 250.0, "the next command is not held: {out:?}");
    assert_eq!(out[1]["ok"], "v");
    direct(&redis, &["DEL", &key]);
    let j = journal(&server, 1).await;
    for e in commands(&j).iter().filter(|e| e.fault.is_some()) {
        assert!(e.t_done_us - e.t_recv_us >= 300_000, "{e:#?}");
        assert!(
            e.upstream_us.is_some_and(|u| u < 250_000),
            "Redis's own time: {e:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_reply_leaves_the_command_done_and_a_reset_leaves_it_undone() {
    const T: &str = "resp_drop";
    let Some((redis, python)) = tools(T) else {
        return;
    };
    let p = prefix(T);
    let rules = format!(
        r#"      rules:
        - {{ id: lose, match: {{ command: INCR, key: "{p}*" }}, fault: drop }}
        - {{ id: cut, match: {{ command: SET, key: "{p}*" }}, fault: reset }}"#
    );
    let server = start(&redis, &rules).await;
    let at = server.proxy_addr("cache").unwrap();
    let (n, s) = (format!("{p}n"), format!("{p}s"));
    let out = tokio::task::block_in_place(|| run(&python, at, 2, false, &[&["INCR", &n]]));
    assert_eq!(out[0]["error"], "ConnectionError", "{out:?}");
    // Redis ran it: the client cannot know.
    assert_eq!(direct(&redis, &["GET", &n]), "$1\r\n1\r\n");
    let out = tokio::task::block_in_place(|| run(&python, at, 2, false, &[&["SET", &s, "x"]]));
    assert_eq!(out[0]["error"], "ConnectionError", "{out:?}");
    assert!(
        out[0]["message"].as_str().unwrap().contains("reset"),
        "a TCP reset: {out:?}"
    );
    assert_eq!(direct(&redis, &["EXISTS", &s]), ":0\r\n");
    direct(&redis, &["DEL", &n]);
    let j = journal(&server, 2).await;
    // redis-py's own commands on connecting (CLIENT SETINFO) aside.
    let c: Vec<&Entry> = commands(&j)
        .into_iter()
        .filter(|e| {
            e.redis()
                .unwrap()
                .key
                .as_deref()
                .is_some_and(|k| k.starts_with(&p))
        })
        .collect();
    assert_eq!(
        (c[0].outcome, c[0].redis().unwrap().reply.as_deref()),
        (Outcome::Dropped, Some("integer")),
        "the reply Redis sent, withheld"
    );
    assert_eq!((c[1].outcome, c[1].forwarded), (Outcome::Reset, false));
    let ends: Vec<TcpEnd> = j
        .iter()
        .filter_map(|e| e.tcp.as_ref().map(|t| t.end))
        .collect();
    assert_eq!(ends, [TcpEnd::Cut, TcpEnd::Reset]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_gets_each_error_in_the_place_of_its_command() {
    const T: &str = "resp_pipeline";
    let Some((redis, python)) = tools(T) else {
        return;
    };
    let p = prefix(T);
    let rules = format!(
        r#"      rules:
        - {{ id: rehashing, match: {{ command: GET, key: "{p}cold*" }}, fault: {{ error: TRYAGAIN }} }}"#
    );
    let server = start(&redis, &rules).await;
    let at = server.proxy_addr("cache").unwrap();
    let (a, cold, b) = (format!("{p}a"), format!("{p}cold"), format!("{p}b"));
    direct(&redis, &["SET", &a, "1"]);
    direct(&redis, &["SET", &b, "2"]);
    for protocol in [2u8, 3] {
        let out = tokio::task::block_in_place(|| {
            run(
                &python,
                at,
                protocol,
                true,
                &[&["GET", &a], &["GET", &cold], &["GET", &b], &["GET", &cold]],
            )
        });
        let shown: Vec<String> = out
            .iter()
            .map(|v| {
                v["ok"]
                    .as_str()
                    .map_or_else(|| v["error"].to_string(), str::to_string)
            })
            .collect();
        assert_eq!(
            shown,
            ["1", "\"TryAgainError\"", "2", "\"TryAgainError\""],
            "RESP{protocol}"
        );
    }
    direct(&redis, &["DEL", &a, &b]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_resp_or_too_large_are_closed_or_forwarded_as_configured() {
    const T: &str = "resp_bad";
    let Some((redis, _)) = tools(T) else { return };
    // Not RESP: an array whose count is not a number.
    let server = start(&redis, "      rules: []").await;
    let at = server.proxy_addr("cache").unwrap();
    let mut s = TcpStream::connect(at).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut pong = [0u8; 7];
    s.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
    s.write_all(b"*zz\r\n").unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(got.is_empty(), "closed with nothing sent: {got:?}");
    let j = journal(&server, 1).await;
    let v = commands(&j)
        .into_iter()
        .find(|e| e.outcome == Outcome::Rejected)
        .expect("a violation entry");
    assert_eq!(v.rejected.as_deref(), Some("client-protocol"));
    assert!(v.redis().unwrap().violation.is_some(), "{v:#?}");

    // Too large: closed, or forwarded unread.
    let p = prefix(T);
    let key = format!("{p}big");
    let big = "x".repeat(4000);
    for (mode, forwarded) in [("close", false), ("forward", true)] {
        let server = start(
            &redis,
            &format!("      max_message: 1KiB\n      on_violation: {mode}\n      rules: []"),
        )
        .await;
        let at = server.proxy_addr("cache").unwrap();
        let mut s = TcpStream::connect(at).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let cmd = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{big}\r\n",
            key.len(),
            big.len()
        );
        s.write_all(cmd.as_bytes()).unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        assert_eq!(
            &buf[..n] == b"+OK\r\n",
            forwarded,
            "{mode}: {:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        drop(s);
        let j = journal(&server, 1).await;
        let v = commands(&j)[0].redis().unwrap();
        assert!(
            v.violation
                .as_deref()
                .is_some_and(|v| v.contains("larger than the limit of 1024 bytes")),
            "{mode}: {v:#?}"
        );
        direct(&redis, &["DEL", &key]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_is_journaled_when_its_reply_comes_while_its_connection_stays_open() {
    let Some((redis, _)) = tools("open") else {
        return;
    };
    let s = start(&redis, "      rules: []").await;
    let at = s.proxy_addr("cache").expect("the proxy listens");
    let mut c = TcpStream::connect(at).expect("the proxy");
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = c.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"+PONG\r\n");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        s.settle(Duration::from_secs(1)).await;
        let j = s.journal().entries();
        if let Some(e) = commands(&j).first() {
            assert_eq!(e.redis().unwrap().command, "PING");
            assert_eq!(e.redis().unwrap().reply.as_deref(), Some("simple"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the PING answered on an open connection is not journaled: {j:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_over_the_bound_is_cut_in_the_journal_and_a_command_cut_by_the_close_is_journaled() {
    const T: &str = "resp_cut";
    let Some((redis, _)) = tools(T) else { return };
    let server = start(&redis, "      max_key: 8B\n      rules: []").await;
    let at = server.proxy_addr("cache").unwrap();
    let key = format!("{}a-key-longer-than-eight-bytes", prefix(T));
    let mut s = TcpStream::connect(at).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let set = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nv\r\n", key.len());
    s.write_all(set.as_bytes()).unwrap();
    let mut ok = [0u8; 5];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n", "the command ran whatever its key's length");
    // A GET whose key is cut by the close: half of its bulk string came.
    s.write_all(b"*2\r\n$3\r\nGET\r\n$10\r\nabc").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "nothing answered to half a command: {rest:?}"
    );
    let j = journal(&server, 1).await;
    let c = commands(&j);
    let set = c[0].redis().unwrap();
    assert_eq!(set.command, "SET");
    assert_eq!(set.key.as_deref(), Some(&key[..8]), "{set:#?}");
    let cut = c
        .iter()
        .find(|e| e.outcome == Outcome::Rejected)
        .expect("the cut command journaled");
    assert!(
        cut.redis()
            .unwrap()
            .violation
            .as_deref()
            .is_some_and(|v| v.contains("closed in the middle")),
        "{cut:#?}"
    );
    assert_eq!(direct(&redis, &["GET", &key]), "$1\r\nv\r\n");
    direct(&redis, &["DEL", &key]);
}
