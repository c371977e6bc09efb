//! The `fault-server` binary as a child process on a free loopback port, and raw HTTP/1.0 calls
//! to it: what the tests that measure the server's memory or limit its descriptors use.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The fault server as a child process, killed when dropped.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    log: std::sync::Arc<std::sync::Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary with `config`.
pub fn start(config: &str) -> Server {
    start_with(config, None)
}

/// Starts the binary with `config`, its open-files limit lowered to `files` when given.
pub fn start_with(config: &str, files: Option<u64>) -> Server {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cfg = dir.path().join("limits.yaml");
    std::fs::write(&cfg, config).expect("write the config");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fault-server"));
    cmd.args(["--bind", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        // In the test's directory: a killed server leaves no temporary journal behind.
        .arg("--journal")
        .arg(dir.path().join("journal.jsonl"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(files) = files {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: files,
                    rlim_max: files,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().expect("fault-server starts");
    let stderr = child.stderr.take().expect("piped");
    // Its log is kept (bounded) for a test to read, and drained so the server never blocks on it.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
                if l.len() < 1 << 20 {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
    }
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("the ready line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("ready line: {line:?}"))
        .parse()
        .expect("an address");
    Server {
        child,
        addr,
        log,
        _dir: dir,
    }
}

impl Server {
    /// Resident memory of the server, kB.
    pub fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// One request on a connection of its own; the raw response.
    pub fn request(&self, raw: &[u8]) -> String {
        let mut s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        s.write_all(raw).expect("send");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// An HTTP/1.0 GET: the answer is not chunked, its body runs to the close.
    pub fn get(&self, path: &str) -> String {
        self.request(format!("GET {path} HTTP/1.0\r\nhost: 127.0.0.1\r\n\r\n").as_bytes())
    }

    /// Health answers 200, trying a few times over a couple of seconds.
    pub fn healthy(&self) -> bool {
        (0..20).any(|_| {
            let ok = self.get("/__harness/health").starts_with("HTTP/1.0 200");
            if !ok {
                std::thread::sleep(Duration::from_millis(100));
            }
            ok
        })
    }

    pub fn journal(&self) -> Vec<serde_json::Value> {
        let raw = self.get("/__harness/journal");
        let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        // The body may be chunked: keep the lines that are JSON objects.
        body.lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).expect("a journal line"))
            .collect()
    }

    /// What the server logged to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn stats(&self) -> serde_json::Value {
        let raw = self.get("/__harness/stats");
        let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body.trim()).expect("stats JSON")
    }
}

impl Server {
    /// The journal's entries for `path`, once there are `n` of them (or after `limit`).
    pub fn entries_for(&self, path: &str, n: usize, limit: Duration) -> Vec<serde_json::Value> {
        let end = std::time::Instant::now() + limit;
        loop {
            let found: Vec<serde_json::Value> = self
                .journal()
                .into_iter()
                .filter(|e| e["path"] == path)
                .collect();
            if found.len() >= n || std::time::Instant::now() >= end {
                return found;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A config whose `/big` answers `len` bytes (a `status` fault with that body), with `limits`.
pub fn big_body_config(limits: &str, len: usize) -> String {
    format!(
        "limits: {{ {limits} }}\nrules:\n  - match: {{ path: /big }}\n    fault: {{ status: {{ code: 200, body: \"{}\" }} }}\n",
        "a".repeat(len)
    )
}

/// Stops a server the way a user does (SIGTERM), so that it cleans up after itself — its
/// temporary journal file among it — and waits for it; kills it if it is still there after 10 s.
pub fn stop(mut child: std::process::Child) {
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    // SAFETY: sends a signal to our own child, which has not been waited for (so the pid is
    // still its own).
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
