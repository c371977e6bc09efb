//! `tcp-rtt ADDR CONNS INTERVAL_MS SECS`: opens CONNS connections to ADDR (a Redis, or a proxy in
//! front of one), and on each sends `PING` every INTERVAL_MS (each connection at its own phase,
//! so the load is spread over time: an open, paced load, not a closed loop that would measure
//! the machine's saturation), reads `+PONG`, and records the round trip. Prints one line of JSON:
//! the round trips' count and percentiles in µs, and the connections that failed.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: tcp-rtt ADDR CONNS INTERVAL_MS SECS");
        std::process::exit(2);
    }
    let addr = args[1].clone();
    let conns: u64 = args[2].parse().expect("CONNS is a number");
    let interval = Duration::from_millis(args[3].parse().expect("INTERVAL_MS is a number"));
    let secs = Duration::from_secs(args[4].parse().expect("SECS is a number"));
    // Every connection is opened first; the measured window starts after.
    let mut streams = Vec::new();
    for _ in 0..conns {
        let s = TcpStream::connect(&addr).await.expect("connect");
        s.set_nodelay(true).expect("nodelay");
        streams.push(s);
    }
    let start = Instant::now() + Duration::from_millis(200);
    let end = start + secs;
    let mut tasks = Vec::new();
    for (i, mut s) in streams.into_iter().enumerate() {
        let phase = interval.mul_f64(i as f64 / conns as f64);
        tasks.push(tokio::spawn(async move {
            let mut rtts = Vec::new();
            let mut next = start + phase;
            let mut buf = [0u8; 64];
            while next < end {
                tokio::time::sleep_until(next.into()).await;
                let t = Instant::now();
                if s.write_all(b"PING\r\n").await.is_err() {
                    return (rtts, true);
                }
                let mut got = 0;
                while got < 7 {
                    match s.read(&mut buf[got..]).await {
                        Ok(0) | Err(_) => return (rtts, true),
                        Ok(n) => got += n,
                    }
                }
                rtts.push(t.elapsed().as_micros() as u64);
                next += interval;
            }
            (rtts, false)
        }));
    }
    let mut all = Vec::new();
    let mut failed = 0;
    for t in tasks {
        let (rtts, f) = t.await.expect("a connection's task");
        all.extend(rtts);
        failed += u64::from(f);
    }
    all.sort_unstable();
    println!(
        "{{\"n\":{},\"failed_connections\":{failed},\"p50_us\":{},\"p90_us\":{},\"p99_us\":{},\"max_us\":{}}}",
        all.len(),
        percentile(&all, 50.0),
        percentile(&all, 90.0),
        percentile(&all, 99.0),
        all.last().copied().unwrap_or(0)
    );
}
