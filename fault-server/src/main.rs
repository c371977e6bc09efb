//! `fault-server`: run the fault-injecting server on its own.
//!
//! Exit codes: 0 after a clean shutdown (Ctrl-C) or a successful `--check`; 2 for bad input (an
//! unreadable or invalid config, an unusable certificate); 3 when the server cannot run (address
//! in use, database unreachable).

/// Why mimalloc: every request allocates its journal entry's strings on a request worker and the
/// journal's writer thread frees them; glibc's allocator pays for each such cross-thread free
/// with its arena's lock (malloc and free were over a tenth of a proxied request's CPU).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fault_server::config::UpstreamUrl;
use fault_server::tls::{ServerTls, TlsError};
use fault_server::{Config, FaultServer, ProxyConfig, ServerOptions, StartError};

/// A programmable fault-injecting HTTP server with an idempotent orders resource and a journal.
#[derive(Debug, Parser)]
#[command(name = "fault-server", version, about)]
struct Args {
    /// YAML config: the fault schedule and the orders resource settings. Without it, no faults.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// Seed for every random decision (overrides the config's `seed`).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Also write the journal to this file, one JSON object per line.
    #[arg(long, value_name = "FILE")]
    journal: Option<PathBuf>,
    /// Validate the config and exit.
    #[arg(long)]
    check: bool,
    /// Token the control API requires (`Authorization: Bearer TOKEN`); needed when --bind is not
    /// a loopback address. Also read from FAULT_SERVER_CONTROL_TOKEN.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "FAULT_SERVER_CONTROL_TOKEN",
        hide_env_values = true
    )]
    control_token: Option<String>,
    /// This replica's name in every journal entry (`replica`), when several fault servers share
    /// one database; default: the host name.
    #[arg(long, value_name = "ID", env = "FAULT_SERVER_REPLICA_ID")]
    replica_id: Option<String>,
    /// Serve TLS with this PEM certificate (chain); needs --tls-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "tls_self_signed"
    )]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve TLS with a certificate made at start for 127.0.0.1 and localhost, written to FILE
    /// (PEM) for clients' --cacert.
    #[arg(long, value_name = "FILE")]
    tls_self_signed: Option<PathBuf>,
    /// Proxy mode: forward every request no rule answers to this real dependency
    /// (`http://host:port` or `https://…`, with an optional path prefix); overrides the
    /// config's `upstream` URL and keeps its other upstream options.
    #[arg(long, value_name = "URL", value_parser = UpstreamUrl::parse)]
    upstream: Option<UpstreamUrl>,
    /// Serve the gRPC services of this `.proto` file (repeatable), besides the built-in
    /// orders.v1.Orders; added to the config's `grpc.protos`.
    #[arg(long, value_name = "FILE")]
    proto: Vec<PathBuf>,
    /// A directory `.proto` imports are looked up in (repeatable), as protoc's -I; added to the
    /// config's `grpc.import_paths`.
    #[arg(long, value_name = "DIR")]
    import_path: Vec<PathBuf>,
    /// A TCP fault proxy NAME listening on LISTEN (`host:port`, port 0 picks one) and forwarding
    /// to UPSTREAM (repeatable); PROTOCOL `postgres` or `redis` reads that protocol and journals
    /// every statement or command; added to the config's `proxies`.
    #[arg(long, value_name = "NAME=LISTEN,UPSTREAM[,PROTOCOL]", value_parser = ProxyConfig::parse_flag)]
    proxy: Vec<ProxyConfig>,
    /// Serve Toxiproxy's REST API on ADDR (`127.0.0.1:8474`, or a port alone for loopback);
    /// beyond loopback it needs --control-token, or --toxiproxy-api-open.
    #[arg(long, value_name = "ADDR", value_parser = api_addr)]
    toxiproxy_api: Option<SocketAddr>,
    /// Serve Toxiproxy's API beyond loopback without the control token, as Toxiproxy does: only
    /// where nothing but the tests can reach it (a container's published port).
    #[arg(long, requires = "toxiproxy_api")]
    toxiproxy_api_open: bool,
    /// Threads that serve connections, each connection start to end on one [default: one per
    /// core]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();

    let upstream = args.upstream.clone();
    let (protos, import_paths) = (args.proto.clone(), args.import_path.clone());
    let proxies = args.proxy.clone();
    let adjust = |c: &mut Config| {
        if let Some(url) = upstream {
            c.set_upstream(url);
        }
        c.grpc.protos.extend(protos);
        c.grpc.import_paths.extend(import_paths);
        c.proxies.extend(proxies);
    };
    let config = match &args.config {
        Some(path) => match Config::load_with(path, adjust) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        None => {
            let mut c = Config::default();
            adjust(&mut c);
            if let Err(e) = c.validate("the command line") {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            c
        }
    };
    if args.check {
        println!(
            "{}: ok ({} rule{}{}{})",
            args.config
                .as_ref()
                .map_or("<defaults>".into(), |p| p.display().to_string()),
            config.rules.len(),
            if config.rules.len() == 1 { "" } else { "s" },
            config
                .upstream
                .as_ref()
                .map_or(String::new(), |u| format!(", forwarding to {}", u.url)),
            match config.proxies.len() {
                0 => String::new(),
                1 => ", 1 TCP proxy".to_string(),
                n => format!(", {n} TCP proxies"),
            }
        );
        return ExitCode::SUCCESS;
    }

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(3);
        }
    };
    let tls = match (&args.tls_cert, &args.tls_key, &args.tls_self_signed) {
        (Some(cert), Some(key), _) => match ServerTls::from_files(cert, key) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        (_, _, Some(out)) => {
            let made = match ServerTls::self_signed() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(3);
                }
            };
            if let Err(e) = std::fs::write(out, made.certificate_pem()) {
                eprintln!(
                    "error: --tls-self-signed {}: cannot write the certificate: {e}",
                    out.display()
                );
                return ExitCode::from(3);
            }
            Some(made)
        }
        _ => None,
    };
    runtime.block_on(async move {
        let opts = ServerOptions {
            bind: args.bind,
            seed: args.seed,
            journal_file: args.journal,
            tls,
            control_token: args.control_token,
            replica_id: args.replica_id.or_else(host_name),
            threads: Some(args.threads.map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()),
                usize::from,
            )),
            toxiproxy_api: args.toxiproxy_api,
            toxiproxy_api_open: args.toxiproxy_api_open,
        };
        let server = match FaultServer::start(config, opts).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return match e {
                    // A certificate file named in the config that cannot be used is bad input;
                    // so is a public address without a control token.
                    StartError::Tls(TlsError::Read { .. } | TlsError::Pem { .. })
                    | StartError::NoControlToken { .. }
                    | StartError::SharedNeedsPostgres
                    | StartError::Grpc(_)
                    | StartError::Proxy(fault_server::tcp::ProxyError::Invalid { .. })
                    | StartError::Upstream(_) => ExitCode::from(2),
                    StartError::Bind { .. }
                    | StartError::Proxy(_)
                    | StartError::ToxiproxyApi { .. }
                    | StartError::Store(_)
                    | StartError::Journal(_)
                    | StartError::Threads(_)
                    | StartError::Tls(_) => ExitCode::from(3),
                };
            }
        };
        let mut out = std::io::stdout();
        let _ = writeln!(out, "listening on {}", server.url());
        let _ = out.flush();
        // Where the proxies and Toxiproxy's API are, on stderr: stdout's one line stays the
        // contract.
        for (name, addr) in server.proxies().addresses() {
            match addr {
                Some(a) => eprintln!("proxy {name} listening on {a}"),
                None => eprintln!("proxy {name} disabled"),
            }
        }
        if let Some(a) = server.toxiproxy_api_addr() {
            eprintln!("Toxiproxy API on http://{a}");
        }
        wait_for_signal().await;
        server.shutdown().await;
        ExitCode::SUCCESS
    })
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// `--toxiproxy-api`: an address, or a port alone on loopback.
fn api_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse()
        .map_err(|_| format!("{s:?}: give an address (127.0.0.1:8474) or a port (8474)"))
}

/// The machine's host name (a pod's name on Kubernetes), when it can be read.
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}
