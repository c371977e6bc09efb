//! Writes a synthetic fault-server journal for benchmarking `harness analyze`.
//!
//!   cargo run --release -p harness --example gen_journal -- OUT.jsonl [ENTRIES] [OPS_PER_S] [SEED]
//!
//! The journal is what a fault server running a retry scenario would write: 64 clients on their
//! own connections; `POST /orders` with an Idempotency-Key (some first attempts get an injected
//! 503, some responses are dropped after the order was created, and the client retries with
//! jittered exponential backoff until a 201 or a replayed 200), `GET /orders/{id}`, and
//! `POST /orders/{id}/pay` (a repeat is a no-op). Entries are numbered in arrival order, as the
//! server numbers them. Defaults: 1,000,000 entries at 1,000 operations per second (about 14
//! minutes of traffic, longer than the checks' idle horizon, so the analyzer's memory reaches its
//! steady state), seed 1.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io::{BufWriter, Write};

use history::Outcome;
use primitives::draw::{splitmix64_next, unit};

const CLIENTS: u64 = 64;
const MAX_ATTEMPTS: u32 = 4;

/// splitmix64: a tiny deterministic generator, enough for traffic shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        splitmix64_next(&mut self.0)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        unit(self.next())
    }
    fn hex(&mut self, bytes: usize) -> String {
        let mut s = String::with_capacity(bytes * 2);
        while s.len() < bytes * 2 {
            s.push_str(&format!("{:016x}", self.next()));
        }
        s.truncate(bytes * 2);
        s
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Create,
    Get,
    Pay,
}

/// One logical operation in flight: its next attempt is due at `due_us`.
struct Op {
    kind: Kind,
    client: u64,
    key: Option<String>,
    path: String,
    body_sha256: String,
    body_len: u64,
    attempt: u32,
    /// The order the operation created (a dropped response created it too).
    created: Option<String>,
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!("usage: gen_journal OUT.jsonl [ENTRIES] [OPS_PER_S] [SEED]");
        std::process::exit(2);
    };
    let entries: u64 = args
        .get(1)
        .map_or(1_000_000, |s| s.parse().expect("ENTRIES"));
    let ops_per_s: f64 = args
        .get(2)
        .map_or(1000.0, |s| s.parse().expect("OPS_PER_S"));
    let seed: u64 = args.get(3).map_or(1, |s| s.parse().expect("SEED"));
    let mut rng = Rng(seed);
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    let unix_start_ms: u64 = 1_767_225_600_000;
    let empty_sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".to_string();
    // Attempts due, by (time, tie-breaker); the next new operation starts at `next_op_us`.
    let mut due: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut ops: std::collections::HashMap<u64, Op> = std::collections::HashMap::new();
    // Orders created so far (a window of the latest), and those paid already.
    let mut orders: Vec<String> = Vec::new();
    let mut paid: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut next_op_us = 1_000u64;
    let mut op_id = 0u64;
    let mut seq = 0u64;
    let mean_gap_us = 1e6 / ops_per_s;
    while seq < entries {
        let take_new = due.peek().is_none_or(|Reverse((t, _))| *t > next_op_us);
        let (t_recv_us, id) = if take_new {
            op_id += 1;
            let client = rng.next() % CLIENTS;
            let r = rng.unit();
            let (kind, path) = if r < 0.7 || orders.is_empty() {
                (Kind::Create, "/orders".to_string())
            } else {
                let id = &orders[(rng.next() % orders.len() as u64) as usize];
                if r < 0.9 {
                    (Kind::Get, format!("/orders/{id}"))
                } else {
                    (Kind::Pay, format!("/orders/{id}/pay"))
                }
            };
            let (key, body_sha256, body_len) = match kind {
                Kind::Create => (Some(uuid(&mut rng)), rng.hex(32), 24 + rng.next() % 40),
                Kind::Pay => (Some(uuid(&mut rng)), empty_sha.clone(), 0),
                Kind::Get => (None, empty_sha.clone(), 0),
            };
            ops.insert(
                op_id,
                Op {
                    kind,
                    client,
                    key,
                    path,
                    body_sha256,
                    body_len,
                    attempt: 0,
                    created: None,
                },
            );
            let t = next_op_us;
            next_op_us += (-(1.0 - rng.unit()).ln() * mean_gap_us).max(1.0) as u64;
            (t, op_id)
        } else {
            let Some(Reverse((t, id))) = due.pop() else {
                unreachable!("peeked")
            };
            (t, id)
        };
        seq += 1;
        let op = ops.get_mut(&id).expect("open operation");
        op.attempt += 1;
        let service_us = 300 + (rng.unit() * rng.unit() * 4_000.0) as u64;
        let mut e = history::Entry::blank(seq);
        e.t_recv_us = t_recv_us;
        e.t_done_us = t_recv_us + service_us;
        e.unix_ms = unix_start_ms + t_recv_us / 1000;
        e.method = if op.kind == Kind::Get { "GET" } else { "POST" }.to_string();
        e.path = op.path.clone();
        let cid = format!("p0-c{}", op.client);
        let mut headers = BTreeMap::new();
        headers.insert("user-agent".to_string(), "orders-client/2.3".to_string());
        headers.insert("x-client-id".to_string(), cid.clone());
        if let Some(k) = &op.key {
            headers.insert("idempotency-key".to_string(), k.clone());
            e.key_attempt = Some(op.attempt);
        }
        e.headers = headers;
        e.idempotency_key = op.key.clone();
        e.client_id = Some(cid);
        e.body_sha256 = Some(op.body_sha256.clone());
        e.body_len = op.body_len;
        e.conn_id = op.client + 1;
        let r = rng.unit();
        let mut retry = false;
        match op.kind {
            Kind::Create if op.attempt == 1 && r < 0.15 => {
                e.rule = Some("outage".into());
                e.fault = Some("status".into());
                e.status = Some(503);
                retry = true;
            }
            Kind::Create if op.created.is_none() && r < 0.18 => {
                let id = uuid(&mut rng);
                e.rule = Some("lose-response".into());
                e.fault = Some("drop".into());
                e.outcome = Outcome::Dropped;
                e.created = Some(id.clone());
                op.created = Some(id.clone());
                orders.push(id);
                retry = true;
            }
            Kind::Create => {
                if let Some(id) = &op.created {
                    e.status = Some(200);
                    e.replayed = true;
                    e.resource = Some(id.clone());
                } else {
                    let id = uuid(&mut rng);
                    e.status = Some(201);
                    e.created = Some(id.clone());
                    orders.push(id);
                }
            }
            Kind::Get => e.status = Some(200),
            Kind::Pay => {
                e.status = Some(200);
                let id = op.path.split('/').nth(2).unwrap_or_default();
                e.resource = Some(id.to_string());
                // Pending to paid once; a repeat is a no-op.
                if paid.insert(id.to_string()) {
                    e.transition = Some("pending->paid".into());
                }
            }
        }
        if orders.len() > 100_000 {
            orders.drain(..50_000);
        }
        serde_json::to_writer(&mut w, &e)?;
        w.write_all(b"\n")?;
        if retry && op.attempt < MAX_ATTEMPTS {
            // Full jitter over exponential backoff from 50 ms.
            let cap = 50_000u64 << (op.attempt - 1);
            let wait = (rng.unit() * cap as f64) as u64;
            due.push(Reverse((e.t_done_us + wait, id)));
        } else {
            ops.remove(&id);
        }
    }
    w.flush()
}

fn uuid(rng: &mut Rng) -> String {
    harness::driver::uuid_from_hex(&rng.hex(16))
}
