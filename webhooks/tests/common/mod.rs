//! What the consumer tests share: a consumer process started and stopped, and a small sender —
//! this crate's signer over real sockets (the real sender is the harness's `deliver` executor).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use webhooks::{Delivery, Event, Forgery, Plan, PlanSpec, Style};

/// The workspace's examples, built and found as the harness's integration tests do.
#[path = "../../../harness/tests/support/mod.rs"]
mod examples;

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
/// builds no example by itself), as the harness's tests find theirs.
pub fn example_exe() -> PathBuf {
    examples::example_exe("consumer")
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
