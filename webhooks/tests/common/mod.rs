//! What the consumer tests share: a consumer process started and stopped, and a small sender —
//! this crate's signer over real sockets (the real sender is the harness's `deliver` executor).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use webhooks::{Delivery, Event, Forgery, Plan, PlanSpec, Style};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Unix seconds now.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs()
}

/// A secret's text for `style`.
pub fn secret(style: Style) -> String {
    match style {
        Style::StandardWebhooks => {
            webhooks::Secret::standard_webhooks_text(b"consumer test key 24 by!")
        }
        Style::Stripe => "whsec_consumerTestSecret0123456789ab".into(),
        Style::Github => "consumer test secret".into(),
    }
}

/// A plan of `count` default events (invoices: created, then paid) for `style`.
pub fn plan(style: Style, count: u64, seed: u64) -> Plan {
    let mut spec = PlanSpec::new(style, secret(style));
    spec.seed = seed;
    spec.events.count = count;
    Plan::new(&spec).expect("a plan")
}

/// The example consumer's executable, built by cargo if needed (`cargo test --test consumer`
/// builds no example by itself); cargo names the executable wherever the target directory is.
pub fn example_exe() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
            "build",
            "--quiet",
            // The whole workspace, as `cargo test --workspace` resolves its features: then the
            // example that build made is fresh, where `-p` would build its crates again.
            "--workspace",
            "--example",
            "consumer",
            "--message-format=json",
        ]);
        if !cfg!(debug_assertions) {
            cmd.arg("--release");
        }
        without_crate_env(&mut cmd);
        let out = cmd.output().expect("cargo runs");
        assert!(
            out.status.success(),
            "building the example failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "consumer")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo reports the example's executable")
    })
    .clone()
}

/// A running consumer; killed when dropped.
pub struct Consumer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    client: reqwest::Client,
}

impl Consumer {
    /// Starts `cmd`, a program that prints `listening on URL` first.
    pub fn spawn(mut cmd: Command) -> Consumer {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the consumer starts");
        // Its log goes to the test's captured output, shown when a test fails.
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
            .expect("the consumer prints its address");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Consumer {
            child,
            url,
            client: reqwest::Client::new(),
        }
    }

    /// The example consumer in `mode` for `style`, with extra flags.
    pub fn example(style: Style, mode: &str, extra: &[&str]) -> Consumer {
        let mut cmd = Command::new(example_exe());
        cmd.args([
            "--style",
            style.name(),
            "--secret",
            &secret(style),
            "--mode",
            mode,
        ])
        .args(extra);
        Consumer::spawn(cmd)
    }

    /// Posts `d` to `/webhook`: the status.
    pub async fn send(&self, d: &Delivery) -> u16 {
        post(&self.client, &self.url, d).await
    }

    /// Posts `d` `copies` times at once, each on a task of its own: the statuses.
    pub async fn burst(&self, d: &Delivery, copies: usize) -> Vec<u16> {
        let tasks: Vec<_> = (0..copies)
            .map(|_| {
                let (client, url, d) = (self.client.clone(), self.url.clone(), d.clone());
                tokio::spawn(async move { post(&client, &url, &d).await })
            })
            .collect();
        let mut statuses = Vec::with_capacity(copies);
        for t in tasks {
            statuses.push(t.await.expect("the sending task"));
        }
        statuses
    }

    /// The genuine delivery of `e`, signed now.
    pub fn genuine(plan: &Plan, e: &Event) -> Delivery {
        plan.signer().sign(&e.message(), now()).expect("signed")
    }

    /// `e` forged as `f`, now.
    pub fn forged(plan: &Plan, e: &Event, f: Forgery) -> Delivery {
        plan.signer().forge(&e.message(), now(), f).expect("forged")
    }

    /// How many effects the event took, from the consumer's system of record.
    pub async fn effects(&self, event_id: &str) -> u64 {
        let v = self
            .get_json(&format!("/effects/{event_id}"))
            .await
            .expect("effects");
        v["count"].as_u64().expect("a count")
    }

    /// The subject's state type, if it has one.
    pub async fn state(&self, subject: &str) -> Option<String> {
        self.get_json(&format!("/state/{subject}"))
            .await
            .map(|v| v["type"].as_str().expect("a type").to_string())
    }

    async fn get_json(&self, path: &str) -> Option<serde_json::Value> {
        let r = self
            .client
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("the consumer answers");
        if r.status() == 404 {
            return None;
        }
        assert!(r.status().is_success(), "{path}: {}", r.status());
        let body = r.bytes().await.expect("a body");
        Some(serde_json::from_slice(&body).expect("JSON"))
    }
}

/// Posts `d` to `{url}/webhook`: the status.
async fn post(client: &reqwest::Client, url: &str, d: &Delivery) -> u16 {
    let mut req = client.post(format!("{url}/webhook")).body(d.body.clone());
    for (n, v) in &d.headers {
        req = req.header(n, v);
    }
    req.send()
        .await
        .expect("the consumer answers")
        .status()
        .as_u16()
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes what cargo sets for a crate it builds or tests (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`,
/// …) from the environment `cmd` inherits. Build scripts watch some of them (ring's, through
/// `rerun-if-env-changed`, watches `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME`): a cargo started
/// with a test's values would find ring stale, build it and all that depends on it again, and
/// leave it stale for the next plain cargo command.
fn without_crate_env(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let per_crate = name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
            || matches!(
                name,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_MANIFEST_LINKS"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
                    | "OUT_DIR"
            );
        if per_crate {
            cmd.env_remove(name);
        }
    }
}
