//! A running fault server: where it listens, how it starts, and what a program embedding it can
//! ask of it (its URL, its journal, its store; replace the schedule, reset, settle, shut down).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http::HeaderName;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{Config, RuleConfig, StateMode, TlsConfig};
use crate::conn::accept_loop;
use crate::journal::{self, Clock, Journal, Sequencer};
use crate::lanes::Lanes;
use crate::orders::{Orders, StoreError};
use crate::schedule::Schedule;
use crate::state::{
    KeyAttempts, Limits, Routes, State, CONTROL_RESERVE, DEFAULT_CAPTURED_HEADERS, DEFAULT_HANG_CAP,
};
use crate::tls::{ServerTls, TlsError};
use crate::upstream::{Upstream, UpstreamError};

/// Where and how to run.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Address to listen on; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Overrides the config's seed.
    pub seed: Option<u64>,
    /// Stream the journal to this file (JSON lines).
    pub journal_file: Option<PathBuf>,
    /// Serve TLS with this configuration (overrides the config's `tls`).
    pub tls: Option<ServerTls>,
    /// The control API's token: required when `bind` is not a loopback address.
    pub control_token: Option<String>,
    /// This replica's name, written in every journal entry (`replica`).
    pub replica_id: Option<String>,
    /// Serve connections on this many threads of their own, each connection start to end on one
    /// (the `fault-server` binary: one per core); `None` serves them on the runtime that starts
    /// the server.
    pub threads: Option<usize>,
    /// Serve Toxiproxy's REST API on this address (`--toxiproxy-api`); beyond loopback it
    /// needs the control token, unless `toxiproxy_api_open`.
    pub toxiproxy_api: Option<SocketAddr>,
    /// Serve Toxiproxy's API beyond loopback without the token, as Toxiproxy does: for an
    /// address only the tests reach (a container's port).
    pub toxiproxy_api_open: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            seed: None,
            journal_file: None,
            tls: None,
            control_token: None,
            replica_id: None,
            threads: None,
            toxiproxy_api: None,
            toxiproxy_api_open: false,
        }
    }
}

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address is in use or not available.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The orders database could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The journal file could not be opened.
    #[error(transparent)]
    Journal(#[from] journal::JournalFileError),
    /// The TLS certificate could not be made or read.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The upstream's TLS settings are unusable.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The threads that serve connections could not be started.
    #[error("cannot start the threads that serve connections: {0}")]
    Threads(io::Error),
    /// The config's `.proto` files or canned gRPC answers are unusable (the config's
    /// validation says so first).
    #[error("grpc: {0}")]
    Grpc(#[from] crate::grpc::ServicesError),
    /// `state: shared` needs the orders on PostgreSQL (the config's validation says so first).
    #[error("`state: shared` keeps the schedule's counters in the orders' database, which must be PostgreSQL (`orders.database: postgres://…`)")]
    SharedNeedsPostgres,
    /// A TCP proxy could not start (its listen address is in use, say).
    #[error(transparent)]
    Proxy(#[from] crate::tcp::ProxyError),
    /// Toxiproxy's API could not listen.
    #[error("cannot serve Toxiproxy's API on {addr}: {source}")]
    ToxiproxyApi {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// Listening beyond loopback without a control token would let anyone reset the journal.
    #[error("listening on {addr}, beyond loopback, needs a control token (--control-token or FAULT_SERVER_CONTROL_TOKEN): otherwise anyone who can reach it can reset the journal and replace the schedule")]
    NoControlToken {
        /// The address.
        addr: SocketAddr,
    },
}

/// Reads a server's journal counters (see [`FaultServer::stats_handle`]).
#[derive(Clone)]
pub struct StatsHandle(Arc<State>);

impl StatsHandle {
    /// A copy of the counters now.
    pub fn stats(&self) -> crate::journal::Stats {
        self.0.journal.stats()
    }
}

impl std::fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatsHandle")
    }
}

/// A running fault server.
pub struct FaultServer {
    state: Arc<State>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    /// The accept loop; taken by [`FaultServer::shutdown`].
    task: Option<tokio::task::JoinHandle<()>>,
    /// Where Toxiproxy's API listens, when it does.
    toxiproxy_api: Option<SocketAddr>,
}

/// Dropped (or shut down), the server stops serving, and its temporary journal file, when it
/// has one, is removed at once: connections served on threads of their own may hold the
/// journal until after the process has exited, and a file left behind per server in the
/// temporary directory is a leak a test suite repeats on every run.
impl Drop for FaultServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.state.tcp.cancel();
        self.state.journal.remove_temp_file();
    }
}

impl FaultServer {
    /// Binds, opens the store and the journal, and starts serving.
    pub async fn start(config: Config, opts: ServerOptions) -> Result<FaultServer, StartError> {
        if !opts.bind.ip().is_loopback() && opts.control_token.as_deref().is_none_or(str::is_empty)
        {
            return Err(StartError::NoControlToken { addr: opts.bind });
        }
        if let Some(api) = opts.toxiproxy_api {
            if !api.ip().is_loopback()
                && !opts.toxiproxy_api_open
                && opts.control_token.as_deref().is_none_or(str::is_empty)
            {
                return Err(StartError::NoControlToken { addr: api });
            }
        }
        let listener = TcpListener::bind(opts.bind)
            .await
            .map_err(|source| StartError::Bind {
                addr: opts.bind,
                source,
            })?;
        crate::socket::WireTime::enable(&listener);
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: opts.bind,
            source,
        })?;
        let tls = match (opts.tls, &config.tls) {
            (Some(t), _) => Some(t),
            (None, Some(TlsConfig::SelfSigned)) => Some(ServerTls::self_signed()?),
            (None, Some(TlsConfig::Files { cert, key })) => Some(ServerTls::from_files(cert, key)?),
            (None, None) => None,
        };
        let files = open_files_limit();
        let upstream = match &config.upstream {
            Some(u) => {
                let n = u
                    .max_connections
                    .map_or_else(|| default_upstream_connections(files), |n| n as usize);
                let memory = Arc::new(tokio::sync::Semaphore::new(
                    usize::try_from(config.limits.response_memory.0)
                        .unwrap_or(usize::MAX)
                        .min(tokio::sync::Semaphore::MAX_PERMITS),
                ));
                Some(Arc::new(Upstream::new(
                    u,
                    config.limits.max_body.0,
                    n,
                    memory,
                    opts.threads.unwrap_or(1),
                )?))
            }
            None => None,
        };
        let upstream_share = match (&config.upstream, upstream.is_some()) {
            (Some(u), true) => u
                .max_connections
                .map_or_else(|| default_upstream_connections(files), |n| n as usize),
            _ => 0,
        };
        let grpc = config.grpc.services()?;
        let orders = Orders::open(&config.orders).await?;
        let shared = match config.state {
            StateMode::Local => None,
            StateMode::Shared => Some(
                orders
                    .shared_counters()
                    .ok_or(StartError::SharedNeedsPostgres)?,
            ),
        };
        let journal = Journal::start(opts.journal_file.as_deref())?;
        let seed = opts.seed.or(config.seed).unwrap_or(0);
        let mut capture: Vec<HeaderName> = DEFAULT_CAPTURED_HEADERS
            .iter()
            .map(|h| HeaderName::from_static(h))
            .collect();
        for h in &config.capture_headers {
            if let Ok(name) = HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()) {
                if !capture.contains(&name) {
                    capture.push(name);
                }
            }
        }
        let mut response_capture: Vec<HeaderName> = crate::reply::RECORDED_RESPONSE_HEADERS
            .iter()
            .map(|h| HeaderName::from_static(h))
            .collect();
        for h in &config.capture_response_headers {
            if let Ok(name) = HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()) {
                if !response_capture.contains(&name) {
                    response_capture.push(name);
                }
            }
        }
        let schedule = Arc::new(Schedule::new(&config.rules, seed, Instant::now()));
        let (clock, seq, conn_ids) = (
            Arc::new(Clock::new()),
            Arc::new(Sequencer::default()),
            Arc::new(AtomicU64::new(0)),
        );
        let replica = opts.replica_id.clone().filter(|r| !r.is_empty());
        let lanes = match opts.threads {
            Some(n) => Some(Arc::new(Lanes::start(n).map_err(StartError::Threads)?)),
            None => None,
        };
        let tcp = Arc::new(crate::tcp::Proxies::new(crate::tcp::Sink {
            emitter: journal.emitter(clock.clone()),
            clock: clock.clone(),
            seq: seq.clone(),
            conn_ids: conn_ids.clone(),
            replica: replica.clone(),
            seed,
            lanes: lanes.as_ref().map(Arc::downgrade),
        }));
        for p in &config.proxies {
            if let Err(e) = tcp.create(p) {
                tcp.cancel();
                return Err(e.into());
            }
        }
        let api = match opts.toxiproxy_api {
            Some(addr) => {
                let listener = TcpListener::bind(addr)
                    .await
                    .map_err(|source| StartError::ToxiproxyApi { addr, source })?;
                let local = listener
                    .local_addr()
                    .map_err(|source| StartError::ToxiproxyApi { addr, source })?;
                let access = crate::tcp::api::Access {
                    token: (!addr.ip().is_loopback())
                        .then(|| opts.control_token.clone())
                        .flatten()
                        .filter(|t| !t.is_empty()),
                    open: opts.toxiproxy_api_open,
                };
                let router = crate::tcp::api::router(tcp.clone(), access);
                let tcp_for_stop = tcp.clone();
                tokio::spawn(async move {
                    let _ = axum::serve(listener, router)
                        .with_graceful_shutdown(async move { tcp_for_stop.stopped().await })
                        .await;
                });
                Some(local)
            }
            None => None,
        };
        let state = Arc::new(State {
            clock,
            seq,
            conn_ids,
            schedule: RwLock::new((schedule, Arc::new(config.rules.clone()))),
            schedule_gen: AtomicU64::new(0),
            attempts: Mutex::new(KeyAttempts::new(config.limits.tracked_keys as usize)),
            limits: Limits {
                max_body: config.limits.max_body.0,
                header_timeout: config.limits.header_timeout.0,
                body_timeout: config.limits.body_timeout.0,
                max_head: usize::try_from(config.limits.max_head.0).unwrap_or(usize::MAX),
                max_connections: config.limits.max_connections.map_or_else(
                    || default_max_connections(files, upstream_share),
                    |n| n as usize,
                ),
                send_timeout: config.limits.send_timeout.0,
                drain_bytes: config.limits.drain_bytes.0,
                drain_time: config.limits.drain_time.0,
            },
            body_budget: Arc::new(tokio::sync::Semaphore::new(
                usize::try_from(config.limits.body_memory.0)
                    .unwrap_or(usize::MAX)
                    .min(tokio::sync::Semaphore::MAX_PERMITS),
            )),
            http2: Arc::new(crate::state::Http2Counts::default()),
            active: AtomicUsize::new(0),
            control_token: opts.control_token.clone().filter(|t| !t.is_empty()),
            replica,
            journal,
            orders,
            shared,
            seed,
            hang_cap: config.hang_cap.map_or(DEFAULT_HANG_CAP, |d| d.0),
            capture,
            response_capture,
            empty_body_sha256: crate::journal::sha256_hex(b""),
            tls,
            upstream,
            grpc,
            tcp,
        });
        let routes = Arc::new(Routes {
            control: crate::control::router(state.clone()),
            resource: crate::orders::routes::router(state.orders.clone()),
        });
        let (shutdown, rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, state.clone(), routes, rx, lanes));
        Ok(FaultServer {
            state,
            addr,
            shutdown,
            task: Some(task),
            toxiproxy_api: api,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, or `https://ADDR` when it serves TLS.
    pub fn url(&self) -> String {
        let scheme = if self.state.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The certificate it serves, PEM, when it serves TLS: what a client trusts when it is
    /// self-signed.
    pub fn certificate_pem(&self) -> Option<&str> {
        self.state.tls.as_ref().map(ServerTls::certificate_pem)
    }

    /// The journal's clock: µs since the server started, as `t_recv_us` counts them.
    pub fn now_us(&self) -> u64 {
        self.state.clock.now_us()
    }

    /// The journal.
    pub fn journal(&self) -> &Journal {
        &self.state.journal
    }

    /// A handle that reads the journal's counters (`GET /__harness/stats`) from another task,
    /// for a live view of the run.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(self.state.clone())
    }

    /// The orders store (for verification).
    pub fn orders(&self) -> &Orders {
        &self.state.orders
    }

    /// The seed in force.
    pub fn seed(&self) -> u64 {
        self.state.seed
    }

    /// Replaces the schedule (already validated rules). With `state: shared` the rules' hit
    /// counts in the database are cleared too, in a task of its own: use
    /// [`FaultServer::install_schedule`] to wait for that.
    pub fn replace_schedule(&self, rules: Vec<RuleConfig>) {
        if let (Some(shared), Ok(rt)) = (
            self.state.shared.clone(),
            tokio::runtime::Handle::try_current(),
        ) {
            rt.spawn(async move {
                if let Err(e) = shared.clear_hits().await {
                    tracing::error!("clearing the shared hit counters failed: {e}");
                }
            });
        }
        self.state.replace_schedule(rules);
    }

    /// Replaces the schedule (already validated rules) once, with `state: shared`, the rules'
    /// hit counts in the database are cleared.
    pub async fn install_schedule(&self, rules: Vec<RuleConfig>) -> Result<(), StoreError> {
        self.state.install_schedule(rules).await
    }

    /// Clears the journal, counters and store.
    pub async fn reset(&self) -> Result<(), StoreError> {
        self.state.reset().await
    }

    /// Waits until every request received so far is in the journal, or `timeout` passes.
    /// Returns whether it settled.
    pub async fn settle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.state.journal.written() >= self.state.received() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The TCP proxies (`proxies:`, `--proxy`, Toxiproxy's API).
    pub fn proxies(&self) -> &crate::tcp::Proxies {
        &self.state.tcp
    }

    /// Where the TCP proxy `name` listens, when it exists and is enabled.
    pub fn proxy_addr(&self, name: &str) -> Option<SocketAddr> {
        self.state
            .tcp
            .addresses()
            .into_iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, a)| a)
    }

    /// Where Toxiproxy's API listens, when it is served.
    pub fn toxiproxy_api_addr(&self) -> Option<SocketAddr> {
        self.toxiproxy_api
    }

    /// Stops accepting, closes every connection and flushes the journal.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        self.state.tcp.shutdown(Duration::from_secs(2)).await;
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let state = self.state.clone();
        let _ = tokio::task::spawn_blocking(move || state.journal.flush()).await;
    }
}

/// The files this process may open (its soft limit).
fn open_files_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|n| n.parse::<usize>().ok())
        })
        .unwrap_or(1024)
}

/// 10,000 client connections, or fewer when the process may open fewer files: room is left for
/// the journal, the database, the listener, the control API's reserve and, in proxy mode, the
/// connections to the upstream (`upstream`).
fn default_max_connections(files: usize, upstream: usize) -> usize {
    files
        .saturating_sub(64 + CONTROL_RESERVE)
        .saturating_sub(upstream)
        .clamp(16, 10_000)
}

/// Proxy mode: a quarter of the files left after the fixed reserve, between 4 and 1,024.
fn default_upstream_connections(files: usize) -> usize {
    (files.saturating_sub(64 + CONTROL_RESERVE) / 4).clamp(4, 1024)
}
