//! TCP fault proxies: below HTTP, the faults a service's own dependencies give it.
//!
//! A service's resilience is mostly decided by what it does when its database stalls, its cache
//! answers slowly or a link is cut mid-answer. A proxy here stands between the service and such
//! a dependency (`proxies:` in the config, `--proxy NAME=LISTEN,UPSTREAM`): it listens, opens a
//! connection to the upstream for every client, and passes the bytes of each direction through
//! a chain of toxics — Toxiproxy's (`latency`, `bandwidth`, `slow_close`, `timeout`,
//! `reset_peer`, `slicer`, `limit_data`) and two more (`blackhole`, `close_after`), each a small
//! transformer in [`toxics`]. Toxiproxy's REST API drives them ([`api`],
//! `--toxiproxy-api ADDR`), so a test written for Toxiproxy runs unchanged.
//!
//! What it adds to Toxiproxy: which connections a toxic acts on is decided as the fault schedule
//! decides (the Nth connection, a window of time, client addresses, and `toxicity` as a seeded
//! draw per connection: the same connections get the same toxics in every run with the same
//! seed), and every connection is one entry of the server's journal ([`history::TcpConnection`]:
//! the client, whether the upstream was reached, the bytes each way, the toxics that acted, how
//! and by whom it ended), beside the HTTP requests, so one report covers both.
//!
//! The rooms: [`config`] (what a file or the API says), [`toxics`] (the transformers),
//! `pipe.rs` (one connection: its two directions in one loop), `timer.rs` (due times kept to
//! the microsecond, where the runtime's timer rounds to the millisecond), `proxy.rs` (a listener
//! and the connections it accepts), `record.rs` (a connection's journal entry), [`api`]
//! (Toxiproxy's API), and here the proxies a server runs, by name.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::journal::{Clock, Emitter, Sequencer};

pub mod api;
pub mod config;
mod pipe;
mod protocol;
mod proxy;
mod record;
mod timer;
pub mod toxics;

pub use config::{ConnMatch, ProxyConfig, Stream, ToxicConfig, ToxicSpec};

/// Where the proxies' connections are journaled, and what their draws are made of.
pub(crate) struct Sink {
    pub(crate) emitter: Arc<Emitter>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) seq: Arc<Sequencer>,
    pub(crate) conn_ids: Arc<AtomicU64>,
    pub(crate) replica: Option<String>,
    pub(crate) seed: u64,
    /// The threads that serve connections, when the server has them (the binary): a proxied
    /// connection is served start to end on one, as an HTTP one is. Weak: they stop with the
    /// server's accept loop, and a connection accepted after is served on the runtime.
    pub(crate) lanes: Option<std::sync::Weak<crate::lanes::Lanes>>,
}

/// A toxic as a proxy holds it: checked, and when it was installed (its window counts from
/// then).
#[derive(Debug)]
pub(crate) struct Installed {
    pub(crate) spec: ToxicSpec,
    pub(crate) installed: Instant,
    /// `proxy/toxic`: what the toxic's draws are keyed on.
    pub(crate) key: String,
}

/// A proxy's toxics, both directions, in the order they were added; replaced whole on a change,
/// which every open connection of the proxy sees.
#[derive(Debug, Default)]
pub(crate) struct ToxicSet {
    pub(crate) toxics: Vec<Arc<Installed>>,
}

/// What a proxy's connections share with it.
pub(crate) struct ProxyShared {
    pub(crate) name: String,
    upstream: RwLock<String>,
    pub(crate) toxics: watch::Sender<Arc<ToxicSet>>,
    /// Connections accepted (since start or the last reset): the next one's number is this + 1.
    pub(crate) numbers: AtomicU64,
    /// Connections open now.
    pub(crate) open: AtomicUsize,
    pub(crate) max_connections: usize,
    pub(crate) buffer: usize,
    pub(crate) connect_timeout: Duration,
    /// A protocol proxy's rules and shared counts (`protocol: postgres|redis`); none for `tcp`.
    wire: RwLock<Option<protocol::WireProxy>>,
    /// What `wire` is built from, again on a reset (its counts start over).
    wire_cfg: Option<ProxyConfig>,
}

impl ProxyShared {
    pub(crate) fn upstream(&self) -> String {
        self.upstream
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The protocol part a new connection reads with, if the proxy reads one.
    pub(crate) fn wire(&self) -> Option<protocol::WireProxy> {
        self.wire.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The protocol the proxy reads: `tcp`, `postgres` or `redis`.
    fn protocol(&self) -> &'static str {
        self.wire_cfg
            .as_ref()
            .map_or("tcp", |c| config::protocol_str(c.protocol))
    }
}

/// A proxy that is listening.
struct Listening {
    addr: SocketAddr,
    stop: CancellationToken,
}

/// One proxy: its settings, what its connections share, and its listener when enabled.
struct Proxy {
    /// The listen address: as configured until it is first bound, then the bound one (so a
    /// proxy disabled and enabled again gets its port back).
    listen: String,
    shared: Arc<ProxyShared>,
    listening: Option<Listening>,
}

/// Why an operation on the proxies failed; the API answers each with Toxiproxy's status.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// No proxy has that name (404).
    #[error("proxy not found")]
    NotFound,
    /// A proxy has that name already (409).
    #[error("proxy already exists")]
    Exists,
    /// The proxy has no toxic of that name (404).
    #[error("toxic not found")]
    ToxicNotFound,
    /// The proxy has a toxic of that name already (409).
    #[error("toxic already exists")]
    ToxicExists,
    /// The listen address could not be bound (500, as Toxiproxy answers).
    #[error("proxy {name}: cannot listen on {listen}: {source}")]
    Bind {
        /// The proxy.
        name: String,
        /// The address.
        listen: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A field is missing or wrong (400).
    #[error("{field}: {message}")]
    Invalid {
        /// The field.
        field: String,
        /// What was wrong and what is expected.
        message: String,
    },
}

/// The proxies of one server, by name.
pub struct Proxies {
    map: Mutex<BTreeMap<String, Proxy>>,
    sink: Arc<Sink>,
    /// Stops every proxy (the server's shutdown).
    root: CancellationToken,
}

impl Proxies {
    pub(crate) fn new(sink: Sink) -> Proxies {
        timer::start();
        Proxies {
            map: Mutex::new(BTreeMap::new()),
            sink: Arc::new(sink),
            root: CancellationToken::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Proxy>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a proxy (checked) and starts it when enabled: what the config and `POST /proxies`
    /// do. Its JSON as the API shows it.
    pub fn create(&self, cfg: &ProxyConfig) -> Result<Value, ProxyError> {
        let specs = cfg
            .validate()
            .map_err(|(field, message)| ProxyError::Invalid { field, message })?;
        let mut map = self.lock();
        if map.contains_key(&cfg.name) {
            return Err(ProxyError::Exists);
        }
        let mut p = self.make(cfg, specs);
        if cfg.enabled {
            self.start(&cfg.name, &mut p)?;
        }
        let view = view(&cfg.name, &p);
        map.insert(cfg.name.clone(), p);
        Ok(view)
    }

    fn make(&self, cfg: &ProxyConfig, specs: Vec<ToxicSpec>) -> Proxy {
        let now = Instant::now();
        let toxics = specs
            .into_iter()
            .map(|spec| installed(&cfg.name, spec, now))
            .collect();
        let (tx, _) = watch::channel(Arc::new(ToxicSet { toxics }));
        let wire = protocol::WireProxy::build(cfg, self.sink.seed);
        Proxy {
            listen: cfg.listen.clone(),
            shared: Arc::new(ProxyShared {
                name: cfg.name.clone(),
                upstream: RwLock::new(cfg.upstream_addr()),
                toxics: tx,
                numbers: AtomicU64::new(0),
                open: AtomicUsize::new(0),
                max_connections: cfg.max_connections as usize,
                buffer: usize::try_from(cfg.buffer.0).unwrap_or(usize::MAX),
                connect_timeout: cfg.connect_timeout.0,
                wire_cfg: wire.is_some().then(|| cfg.clone()),
                wire: RwLock::new(wire),
            }),
            listening: None,
        }
    }

    /// Binds the proxy's listen address and starts accepting.
    fn start(&self, name: &str, p: &mut Proxy) -> Result<(), ProxyError> {
        if p.listening.is_some() {
            return Ok(());
        }
        let bind_err = |source| ProxyError::Bind {
            name: name.to_string(),
            listen: p.listen.clone(),
            source,
        };
        let listener = bind(&p.listen).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(bind_err)?;
        let stop = self.root.child_token();
        tokio::spawn(proxy::accept_loop(
            listener,
            p.shared.clone(),
            self.sink.clone(),
            stop.clone(),
        ));
        p.listen = addr.to_string();
        p.listening = Some(Listening { addr, stop });
        Ok(())
    }

    /// Stops listening and ends every open connection of the proxy (journaled `shutdown`).
    fn stop(p: &mut Proxy) {
        if let Some(l) = p.listening.take() {
            l.stop.cancel();
        }
    }

    /// Every proxy, as `GET /proxies` shows them (by name).
    pub fn list(&self) -> Map<String, Value> {
        self.lock()
            .iter()
            .map(|(name, p)| (name.clone(), view(name, p)))
            .collect()
    }

    /// One proxy, as `GET /proxies/{name}` shows it.
    pub fn get(&self, name: &str) -> Result<Value, ProxyError> {
        self.lock()
            .get(name)
            .map(|p| view(name, p))
            .ok_or(ProxyError::NotFound)
    }

    /// Changes a proxy's `listen`, `upstream` or `enabled` (`POST`/`PATCH /proxies/{name}`): a
    /// new address restarts it, dropping its connections, as Toxiproxy does.
    pub fn update(
        &self,
        name: &str,
        listen: Option<String>,
        upstream: Option<String>,
        enabled: Option<bool>,
    ) -> Result<Value, ProxyError> {
        let mut map = self.lock();
        let p = map.get_mut(name).ok_or(ProxyError::NotFound)?;
        let invalid = |field: &str, message: String| ProxyError::Invalid {
            field: field.to_string(),
            message,
        };
        if let Some(l) = &listen {
            config::split_host_port(l, true).map_err(|m| invalid("listen", m))?;
        }
        if let Some(u) = &upstream {
            config::split_host_port(u, false).map_err(|m| invalid("upstream", m))?;
        }
        let was = p.listening.is_some();
        let moved = listen.as_ref().is_some_and(|l| !same_listen(l, &p.listen));
        let rerouted = upstream.as_ref().is_some_and(|u| *u != p.shared.upstream());
        if moved || rerouted {
            Self::stop(p);
            if let Some(l) = listen {
                p.listen = l;
            }
            if let Some(u) = upstream {
                *p.shared.upstream.write().unwrap_or_else(|e| e.into_inner()) = u;
            }
        }
        match enabled.unwrap_or(was) {
            true => self.start(name, p)?,
            false => Self::stop(p),
        }
        Ok(view(name, p))
    }

    /// Removes a proxy, ending its connections.
    pub fn remove(&self, name: &str) -> Result<(), ProxyError> {
        let mut p = self.lock().remove(name).ok_or(ProxyError::NotFound)?;
        Self::stop(&mut p);
        Ok(())
    }

    /// Creates each proxy, or leaves one of the same name alone when its listen address and
    /// upstream are the same, or replaces it (`POST /populate`). What was made, and the error
    /// that stopped it, if any.
    pub fn populate(&self, cfgs: &[ProxyConfig]) -> (Vec<Value>, Option<ProxyError>) {
        let mut out = Vec::new();
        for cfg in cfgs {
            let existing = {
                let map = self.lock();
                map.get(&cfg.name).map(|p| {
                    same_listen(&cfg.listen, &p.listen)
                        && p.shared.upstream() == cfg.upstream_addr()
                        && p.shared.protocol() == config::protocol_str(cfg.protocol)
                })
            };
            match existing {
                Some(true) => {
                    if let Ok(v) = self.get(&cfg.name) {
                        out.push(v);
                    }
                    continue;
                }
                Some(false) => {
                    let _ = self.remove(&cfg.name);
                }
                None => {}
            }
            match self.create(cfg) {
                Ok(v) => out.push(v),
                Err(e) => return (out, Some(e)),
            }
        }
        (out, None)
    }

    /// A proxy's toxics, as `GET /proxies/{name}/toxics` shows them.
    pub fn toxics(&self, name: &str) -> Result<Vec<Value>, ProxyError> {
        let map = self.lock();
        let p = map.get(name).ok_or(ProxyError::NotFound)?;
        let set = p.shared.toxics.borrow().clone();
        Ok(set.toxics.iter().map(|t| toxic_view(&t.spec)).collect())
    }

    /// One toxic.
    pub fn toxic(&self, name: &str, toxic: &str) -> Result<Value, ProxyError> {
        let map = self.lock();
        let p = map.get(name).ok_or(ProxyError::NotFound)?;
        let set = p.shared.toxics.borrow().clone();
        set.toxics
            .iter()
            .find(|t| t.spec.name == toxic)
            .map(|t| toxic_view(&t.spec))
            .ok_or(ProxyError::ToxicNotFound)
    }

    /// Adds a toxic; every open connection of the proxy it matches gets it at once.
    pub fn add_toxic(&self, name: &str, spec: ToxicSpec) -> Result<Value, ProxyError> {
        let map = self.lock();
        let p = map.get(name).ok_or(ProxyError::NotFound)?;
        let mut err = None;
        p.shared.toxics.send_if_modified(|set| {
            if set.toxics.iter().any(|t| t.spec.name == spec.name) {
                err = Some(ProxyError::ToxicExists);
                return false;
            }
            let mut toxics = set.toxics.clone();
            toxics.push(installed(name, spec.clone(), Instant::now()));
            *set = Arc::new(ToxicSet { toxics });
            true
        });
        match err {
            Some(e) => Err(e),
            None => Ok(toxic_view(&spec)),
        }
    }

    /// Changes a toxic: `change` is given its spec and returns the new one (the API merges the
    /// attributes and toxicity given). Its window keeps counting from its installation.
    pub fn update_toxic(
        &self,
        name: &str,
        toxic: &str,
        change: impl FnOnce(&ToxicSpec) -> Result<ToxicSpec, ProxyError>,
    ) -> Result<Value, ProxyError> {
        let map = self.lock();
        let p = map.get(name).ok_or(ProxyError::NotFound)?;
        let set = p.shared.toxics.borrow().clone();
        let i = set
            .toxics
            .iter()
            .position(|t| t.spec.name == toxic)
            .ok_or(ProxyError::ToxicNotFound)?;
        let spec = change(&set.toxics[i].spec)?;
        let mut toxics = set.toxics.clone();
        toxics[i] = Arc::new(Installed {
            spec: spec.clone(),
            installed: set.toxics[i].installed,
            key: set.toxics[i].key.clone(),
        });
        p.shared.toxics.send_replace(Arc::new(ToxicSet { toxics }));
        Ok(toxic_view(&spec))
    }

    /// Removes a toxic from the proxy and its open connections.
    pub fn remove_toxic(&self, name: &str, toxic: &str) -> Result<(), ProxyError> {
        let map = self.lock();
        let p = map.get(name).ok_or(ProxyError::NotFound)?;
        let mut found = false;
        p.shared.toxics.send_if_modified(|set| {
            let toxics: Vec<_> = set
                .toxics
                .iter()
                .filter(|t| t.spec.name != toxic)
                .cloned()
                .collect();
            found = toxics.len() != set.toxics.len();
            if found {
                *set = Arc::new(ToxicSet { toxics });
            }
            found
        });
        if found {
            Ok(())
        } else {
            Err(ProxyError::ToxicNotFound)
        }
    }

    /// Toxiproxy's `POST /reset`: every proxy enabled, every toxic removed. A proxy that cannot
    /// listen again says so.
    pub fn reset_toxiproxy(&self) -> Result<(), ProxyError> {
        let mut map = self.lock();
        let mut first_err = None;
        for (name, p) in map.iter_mut() {
            p.shared.toxics.send_replace(Arc::new(ToxicSet::default()));
            if let Err(e) = self.start(name, p) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The server's reset: connections are numbered from 1 again, and the toxics' windows
    /// count from now.
    pub(crate) fn restart_counts(&self) {
        let now = Instant::now();
        for p in self.lock().values() {
            p.shared.numbers.store(0, Ordering::Relaxed);
            if let Some(cfg) = &p.shared.wire_cfg {
                *p.shared.wire.write().unwrap_or_else(|e| e.into_inner()) =
                    protocol::WireProxy::build(cfg, self.sink.seed);
            }
            let set = p.shared.toxics.borrow().clone();
            let toxics = set
                .toxics
                .iter()
                .map(|t| {
                    Arc::new(Installed {
                        spec: t.spec.clone(),
                        installed: now,
                        key: t.key.clone(),
                    })
                })
                .collect();
            p.shared.toxics.send_replace(Arc::new(ToxicSet { toxics }));
        }
    }

    /// Each proxy's name and where it listens (`None` while disabled).
    pub fn addresses(&self) -> Vec<(String, Option<SocketAddr>)> {
        self.lock()
            .iter()
            .map(|(n, p)| (n.clone(), p.listening.as_ref().map(|l| l.addr)))
            .collect()
    }

    /// Each proxy's name and its open connections.
    pub fn open_connections(&self) -> Vec<(String, usize)> {
        self.lock()
            .iter()
            .map(|(n, p)| (n.clone(), p.shared.open.load(Ordering::Relaxed)))
            .collect()
    }

    /// Stops every proxy; waits (at most `wait`) until their connections are journaled.
    pub(crate) async fn shutdown(&self, wait: Duration) {
        self.root.cancel();
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline && self.open_connections().iter().any(|(_, n)| *n > 0) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Resolves once the proxies are stopped (the server's shutdown or drop).
    pub(crate) async fn stopped(&self) {
        self.root.cancelled().await;
    }

    /// Stops every proxy now, without waiting (the server dropped).
    pub(crate) fn cancel(&self) {
        self.root.cancel();
    }
}

fn installed(proxy: &str, spec: ToxicSpec, now: Instant) -> Arc<Installed> {
    Arc::new(Installed {
        key: format!("{proxy}/{}", spec.name),
        spec,
        installed: now,
    })
}

/// Whether two listen addresses name the same place (`localhost:80` and `127.0.0.1:80` are not
/// compared through DNS: as written, or the port-0 request against the bound address).
fn same_listen(a: &str, b: &str) -> bool {
    a == b
        || matches!(
            (config::split_host_port(a, true), config::split_host_port(b, true)),
            (Ok((ha, 0)), Ok((hb, _))) if ha == hb
        )
}

/// Binds `listen` (`host:port`; no host: every address), as Toxiproxy's `net.Listen` would.
fn bind(listen: &str) -> std::io::Result<std::net::TcpListener> {
    let (host, port) = config::split_host_port(listen, true)
        .map_err(|m| std::io::Error::new(std::io::ErrorKind::InvalidInput, m))?;
    let host = if host.is_empty() {
        "0.0.0.0".to_string()
    } else {
        host
    };
    let mut last = None;
    for addr in (host.as_str(), port).to_socket_addrs()? {
        match std::net::TcpListener::bind(addr) {
            Ok(l) => {
                l.set_nonblocking(true)?;
                return Ok(l);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            format!("{host} resolves to no address"),
        )
    }))
}

/// A proxy as Toxiproxy's API shows it.
fn view(name: &str, p: &Proxy) -> Value {
    let set = p.shared.toxics.borrow().clone();
    let mut v = json!({
        "name": name,
        "listen": p.listen,
        "upstream": p.shared.upstream(),
        "enabled": p.listening.is_some(),
        "toxics": set.toxics.iter().map(|t| toxic_view(&t.spec)).collect::<Vec<_>>(),
    });
    // Only a protocol proxy shows its protocol: a plain one looks as Toxiproxy's do.
    if let (Some(cfg), Some(obj)) = (&p.shared.wire_cfg, v.as_object_mut()) {
        obj.insert("protocol".into(), config::protocol_str(cfg.protocol).into());
    }
    v
}

/// A toxic as Toxiproxy's API shows it, with `match` when it does not match every connection.
pub(crate) fn toxic_view(t: &ToxicSpec) -> Value {
    let mut v = json!({
        "name": t.name,
        "type": t.kind.type_name(),
        "stream": t.stream.as_str(),
        "toxicity": t.toxicity,
        "attributes": t.kind.attributes(),
    });
    if let (Some(m), Some(obj)) = (t.when.to_json(), v.as_object_mut()) {
        obj.insert("match".into(), m);
    }
    v
}
