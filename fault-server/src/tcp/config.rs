//! The TCP proxies' configuration: `proxies:` in the config file, `--proxy NAME=LISTEN,UPSTREAM`
//! on the command line, and the toxics as Toxiproxy's API writes them (`name`, `type`,
//! `stream`, `toxicity`, `attributes`), plus `match`: which connections a toxic acts on, in the
//! schedule's language (the Nth connection, a time window, client addresses), its `toxicity`
//! being a seeded probability.

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use yaml_config::{ConfigError, Dur, Size};

use wire_faults::config::{PgFault, PostgresConfig, ProtocolName, RedisConfig, RedisFault};

use super::toxics::ToxicKind;
use crate::counts::{CountSpec, Counts};

/// One TCP fault proxy: a listener that forwards every connection to an upstream, through the
/// toxics of each direction.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The proxy's name: in the journal (`tcp.proxy`), the Toxiproxy API's paths, and
    /// `harness exec`'s `HARNESS_PROXY_<NAME>_ADDR`.
    pub name: String,
    /// Where it listens, `host:port`; port 0 picks a free one (the API and the harness say
    /// which).
    pub listen: String,
    /// Where it forwards, `host:port`, resolved at each connection.
    pub upstream: String,
    /// A disabled proxy does not listen: a client's connection is refused, as when the service
    /// is down (Toxiproxy's `enabled: false`).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The toxics, each on one direction of every connection it matches.
    #[serde(default)]
    pub toxics: Vec<ToxicConfig>,
    /// Most connections open at once; one more is accepted, journaled `rejected` and closed.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Most bytes one direction of one connection holds while its toxics delay it: past it the
    /// proxy stops reading from the sender, so a client that never reads cannot grow the proxy's
    /// memory.
    #[serde(default = "default_buffer")]
    pub buffer: Size,
    /// Longest wait for the upstream's connection; past it the client's connection is closed and
    /// journaled `refused`.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Dur,
    /// What the proxy reads of the bytes: `tcp` (the default: nothing, bytes only), `postgres`
    /// (PostgreSQL's protocol 3: faults per statement and transaction, by its `postgres:`
    /// rules) or `redis` (RESP2 and RESP3: faults per command, by its `redis:` rules). A
    /// protocol proxy journals every statement or command beside the connection.
    #[serde(default)]
    pub protocol: ProtocolName,
    /// `protocol: postgres`: its bounds and rules (none when absent: every statement is
    /// journaled, none is faulted).
    #[serde(default)]
    pub postgres: Option<PostgresConfig>,
    /// `protocol: redis`: its bounds and rules (none when absent).
    #[serde(default)]
    pub redis: Option<RedisConfig>,
}

fn yes() -> bool {
    true
}
fn default_max_connections() -> u32 {
    1024
}
fn default_buffer() -> Size {
    Size(64 << 10)
}
fn default_connect_timeout() -> Dur {
    Dur(Duration::from_secs(5))
}

impl ProxyConfig {
    /// A proxy with no toxics and every limit at its default.
    pub fn new(
        name: impl Into<String>,
        listen: impl Into<String>,
        upstream: impl Into<String>,
    ) -> ProxyConfig {
        ProxyConfig {
            name: name.into(),
            listen: listen.into(),
            upstream: upstream.into(),
            enabled: true,
            toxics: Vec::new(),
            max_connections: default_max_connections(),
            buffer: default_buffer(),
            connect_timeout: default_connect_timeout(),
            protocol: ProtocolName::Tcp,
            postgres: None,
            redis: None,
        }
    }

    /// With this toxic too.
    pub fn toxic(mut self, toxic: ToxicConfig) -> ProxyConfig {
        self.toxics.push(toxic);
        self
    }

    /// `NAME=LISTEN,UPSTREAM[,PROTOCOL]`, as `--proxy` takes it: PROTOCOL is `tcp` (the
    /// default), `postgres` or `redis` (a protocol proxy without rules: it journals every
    /// statement or command and faults none).
    pub fn parse_flag(s: &str) -> Result<ProxyConfig, String> {
        let usage = || {
            format!("{s:?}: give NAME=LISTEN,UPSTREAM[,PROTOCOL], e.g. redis=127.0.0.1:26379,127.0.0.1:6379 or db=127.0.0.1:6432,127.0.0.1:5432,postgres")
        };
        let (name, addrs) = s.split_once('=').ok_or_else(usage)?;
        let (listen, rest) = addrs.split_once(',').ok_or_else(usage)?;
        let (upstream, protocol) = match rest.split_once(',') {
            Some((u, p)) => (u, Some(p.trim())),
            None => (rest, None),
        };
        let mut p = ProxyConfig::new(name.trim(), listen.trim(), upstream.trim());
        p.protocol = match protocol {
            None | Some("tcp") => ProtocolName::Tcp,
            Some("postgres") => ProtocolName::Postgres,
            Some("redis") => ProtocolName::Redis,
            Some(other) => {
                return Err(format!(
                    "{s:?}: the protocol {other:?} is not one of tcp, postgres, redis"
                ))
            }
        };
        p.check().map_err(|(field, m)| format!("{field}: {m}"))?;
        Ok(p)
    }

    /// The proxy's own checks (not its toxics'): the failing field and why.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, m: String| Err((f.to_string(), m));
        if let Err(m) = check_name(&self.name) {
            return bad("name", m);
        }
        if let Err(m) = split_host_port(&self.listen, true) {
            return bad("listen", m);
        }
        if let Err(m) = resolve_upstream(&self.upstream) {
            return bad("upstream", m);
        }
        if self.max_connections == 0 || self.max_connections > 1_000_000 {
            return bad(
                "max_connections",
                format!("{}; give 1 to 1000000", self.max_connections),
            );
        }
        if self.buffer.0 < 1024 || self.buffer.0 > (64 << 20) {
            return bad(
                "buffer",
                format!("{} bytes; give 1KiB to 64MiB", self.buffer.0),
            );
        }
        let t = self.connect_timeout.0;
        if t < Duration::from_millis(1) || t > Duration::from_secs(3600) {
            return bad("connect_timeout", format!("{t:?}; give 1ms to 1h"));
        }
        self.check_protocol()
    }

    /// The protocol's settings: given for the protocol the proxy reads, and valid.
    fn check_protocol(&self) -> Result<(), (String, String)> {
        let stray = match self.protocol {
            ProtocolName::Tcp => [
                ("postgres", self.postgres.is_some()),
                ("redis", self.redis.is_some()),
            ]
            .into_iter()
            .find(|(_, set)| *set),
            ProtocolName::Postgres => self.redis.is_some().then_some(("redis", true)),
            ProtocolName::Redis => self.postgres.is_some().then_some(("postgres", true)),
        };
        if let Some((field, _)) = stray {
            return Err((
                field.to_string(),
                format!(
                    "`{field}:` settings on a proxy whose protocol is {}: set `protocol: {field}`, or leave them out",
                    protocol_str(self.protocol)
                ),
            ));
        }
        if let Some(pg) = &self.postgres {
            pg.validate()
                .map_err(|e| (format!("postgres.{}", e.field), e.message))?;
        }
        if let Some(r) = &self.redis {
            r.validate()
                .map_err(|e| (format!("redis.{}", e.field), e.message))?;
        }
        Ok(())
    }

    /// The upstream as the proxy connects to it: an environment reference resolved, a URL made
    /// `host:port` (see [`resolve_upstream`]).
    pub fn upstream_addr(&self) -> String {
        resolve_upstream(&self.upstream).unwrap_or_else(|_| self.upstream.clone())
    }

    /// The proxy and its toxics checked: the failing field (below the proxy) and why.
    pub fn validate(&self) -> Result<Vec<ToxicSpec>, (String, String)> {
        self.check()?;
        let mut names = HashSet::new();
        let mut specs = Vec::with_capacity(self.toxics.len());
        for (i, t) in self.toxics.iter().enumerate() {
            let spec = t.spec().map_err(|(f, m)| {
                (
                    format!("toxics[{i}]{}{f}", if f.is_empty() { "" } else { "." }),
                    m,
                )
            })?;
            if !names.insert(spec.name.clone()) {
                return Err((
                    format!("toxics[{i}].name"),
                    format!(
                        "a toxic named {:?} is already on this proxy; names are unique (the default is TYPE_STREAM)",
                        spec.name
                    ),
                ));
            }
            specs.push(spec);
        }
        Ok(specs)
    }
}

/// A proxy's name: what a path segment and an environment variable can carry.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 128 {
        return Err(format!("{name:?}: give a name of 1 to 128 characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || *c == '/')
    {
        return Err(format!(
            "{name:?} holds {c:?}: a name is one path segment of the API, without spaces"
        ));
    }
    Ok(())
}

/// The protocol's name, as the config writes it.
pub fn protocol_str(p: ProtocolName) -> &'static str {
    match p {
        ProtocolName::Tcp => "tcp",
        ProtocolName::Postgres => "postgres",
        ProtocolName::Redis => "redis",
    }
}

/// An upstream as written in a config file, made `host:port`.
///
/// Why more than `host:port`: a database's or a cache's address is usually known as a URL in an
/// environment variable (`DATABASE_URL`, `REDIS_URL`), and a scenario file should run
/// unchanged on every machine. So the whole value may be `$NAME` or `${NAME}`, read from the
/// environment when the config is read; and the value (written, or read) may be a URL,
/// `postgres://user:password@host:port/db` or `redis://host:port/0`, of which the host and port
/// are taken (the port, when absent, the scheme's: 5432 for `postgres`/`postgresql`, 6379 for
/// `redis`).
pub fn resolve_upstream(s: &str) -> Result<String, String> {
    let value = match env_reference(s) {
        Some(name) => std::env::var(name).map_err(|_| {
            format!("{s:?} names the environment variable {name}, which is not set (e.g. export {name}=\"$(bash .ci/postgres)\")")
        })?,
        None if s.contains('$') => {
            return Err(format!(
                "{s:?}: an environment reference is the whole value, `$NAME` or `${{NAME}}`"
            ))
        }
        None => s.to_string(),
    };
    let value = value.trim();
    let hostport = match value.split_once("://") {
        Some((scheme, rest)) => {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            let default = match scheme.to_ascii_lowercase().as_str() {
                "postgres" | "postgresql" => 5432,
                "redis" => 6379,
                other => {
                    return Err(format!(
                        "{value:?}: a URL upstream is postgres://, postgresql:// or redis://, not {other}://"
                    ))
                }
            };
            let has_port = hostport
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.ends_with(':') && !p.contains(']') && !p.is_empty());
            if has_port {
                hostport.to_string()
            } else {
                format!("{hostport}:{default}")
            }
        }
        None => value.to_string(),
    };
    split_host_port(&hostport, false).map_err(|m| {
        if hostport == s {
            m
        } else {
            format!("{s:?} is {hostport:?}: {m}")
        }
    })?;
    Ok(hostport)
}

/// `$NAME` or `${NAME}` (the whole value), as an environment variable's name.
fn env_reference(s: &str) -> Option<&str> {
    let name = s.strip_prefix('$')?;
    let name = match name.strip_prefix('{') {
        Some(n) => n.strip_suffix('}')?,
        None => name,
    };
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then_some(name)
}

/// Every delay of a proxy's protocol rules, with its field path, so that a scenario's time scale
/// scales them as it scales the toxics' windows.
pub fn protocol_durations<'a>(
    i: usize,
    postgres: &'a mut Option<PostgresConfig>,
    redis: &'a mut Option<RedisConfig>,
) -> Vec<(String, &'a mut Duration)> {
    let mut out = Vec::new();
    if let Some(pg) = postgres {
        for (j, r) in pg.rules.iter_mut().enumerate() {
            if let PgFault::Delay(d) = &mut r.fault {
                out.push((
                    format!("proxies[{i}].postgres.rules[{j}].fault.delay"),
                    &mut d.duration,
                ));
            }
        }
    }
    if let Some(redis) = redis {
        for (j, r) in redis.rules.iter_mut().enumerate() {
            if let RedisFault::Delay(d) = &mut r.fault {
                out.push((
                    format!("proxies[{i}].redis.rules[{j}].fault.delay"),
                    &mut d.duration,
                ));
            }
        }
    }
    out
}

/// `host:port` split; `listen` may leave the host out (`:8666`, every address) and give port 0.
pub fn split_host_port(s: &str, listen: bool) -> Result<(String, u16), String> {
    let what = if listen { "listen" } else { "upstream" };
    let bad = || {
        format!(
            "{s:?} is not host:port (e.g. 127.0.0.1:{}, localhost:6379, [::1]:5432)",
            if listen { "26379" } else { "6379" }
        )
    };
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() && !listen {
        return Err(format!("{s:?}: an {what} names its host"));
    }
    if port == 0 && !listen {
        return Err(format!("{s:?}: an {what}'s port is not 0"));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '/')
    {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

/// A direction of a connection, as Toxiproxy names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// From the client to the upstream (requests).
    Upstream,
    /// From the upstream to the client (answers); the default, as in Toxiproxy.
    #[default]
    Downstream,
}

impl Stream {
    /// `upstream` or `downstream`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        }
    }

    /// `upstream` or `downstream`, as the API's `stream` gives it.
    pub fn parse(s: &str) -> Option<Stream> {
        match s {
            "upstream" => Some(Stream::Upstream),
            "downstream" => Some(Stream::Downstream),
            _ => None,
        }
    }
}

/// A toxic as Toxiproxy's API writes it, and which connections it acts on.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToxicConfig {
    /// Its name, unique on its proxy; `TYPE_STREAM` (`latency_downstream`) when absent.
    #[serde(default)]
    pub name: Option<String>,
    /// `latency`, `bandwidth`, `slow_close`, `timeout`, `reset_peer`, `slicer`, `limit_data`,
    /// `blackhole` or `close_after`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The direction it acts on: `downstream` (answers, the default) or `upstream` (requests).
    #[serde(default)]
    pub stream: Stream,
    /// The probability that it acts on a connection, from 0 (never) to 1 (always, the
    /// default): a seeded draw per connection, the same in every run with the same seed.
    #[serde(default = "one")]
    pub toxicity: f64,
    /// The type's attributes, as Toxiproxy names them (`latency: 100`, `rate: 10`, …); an
    /// absent one is 0.
    #[serde(default)]
    pub attributes: Map<String, Value>,
    /// Which connections it acts on, and when; every connection, always, when absent.
    #[serde(default, rename = "match")]
    pub when: ConnMatch,
}

fn one() -> f64 {
    1.0
}

impl ToxicConfig {
    /// A toxic of `kind` on `stream`, acting on every connection, with no attributes yet.
    pub fn new(kind: impl Into<String>, stream: Stream) -> ToxicConfig {
        ToxicConfig {
            name: None,
            kind: kind.into(),
            stream,
            toxicity: 1.0,
            attributes: Map::new(),
            when: ConnMatch::default(),
        }
    }

    /// With this attribute.
    pub fn attribute(mut self, name: &str, value: impl Into<Value>) -> ToxicConfig {
        self.attributes.insert(name.to_string(), value.into());
        self
    }

    /// Named so.
    pub fn named(mut self, name: impl Into<String>) -> ToxicConfig {
        self.name = Some(name.into());
        self
    }

    /// The toxic checked: the failing field (below the toxic) and why.
    pub fn spec(&self) -> Result<ToxicSpec, (String, String)> {
        let kind =
            ToxicKind::parse(&self.kind, &self.attributes).map_err(|e| match e.attribute {
                Some(a) => (format!("attributes.{a}"), e.message),
                None => ("type".to_string(), e.message),
            })?;
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| format!("{}_{}", self.kind, self.stream.as_str()));
        check_name(&name).map_err(|m| ("name".to_string(), m))?;
        check_toxicity(self.toxicity).map_err(|m| ("toxicity".to_string(), m))?;
        let when = self
            .when
            .compile()
            .map_err(|(f, m)| (format!("match.{f}"), m))?;
        Ok(ToxicSpec {
            name,
            stream: self.stream,
            toxicity: self.toxicity,
            kind,
            when,
        })
    }
}

/// A toxicity in [0, 1].
pub fn check_toxicity(t: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&t) {
        Ok(())
    } else {
        Err(format!(
            "{t} is out of range: give a probability from 0 to 1"
        ))
    }
}

/// Which connections a toxic acts on: all given conditions hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnMatch {
    /// The Nth connection of the proxy (1-based, since start or the last reset): `3`, `"1-5"`,
    /// `"10-"`, `"every 4"`, or a list of them.
    #[serde(default)]
    pub connections: Option<Counts>,
    /// Only from this long after the toxic was installed (at start, or by the API): a
    /// connection open then is affected from then on.
    #[serde(default)]
    pub from: Option<Dur>,
    /// Only until this long after the toxic was installed; then it stops acting, as if
    /// removed.
    #[serde(default)]
    pub until: Option<Dur>,
    /// Only connections from these client addresses: an IP or a CIDR block (`127.0.0.2`,
    /// `10.0.0.0/8`), or a list of them.
    #[serde(default)]
    pub clients: Option<Clients>,
}

/// One client address block, or a list of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clients(pub Vec<String>);

impl JsonSchema for Clients {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Clients".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An IP address or CIDR block, or a list of them.",
            "anyOf": [
                { "type": "string" },
                { "type": "array", "items": { "type": "string" } }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for Clients {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Clients;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "an IP address or CIDR block (127.0.0.2, 10.0.0.0/8), or a list of them",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Clients, E> {
                Ok(Clients(vec![v.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Clients, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<String>()? {
                    out.push(v);
                }
                Ok(Clients(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A toxic, checked: what a proxy runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ToxicSpec {
    /// Its name, unique on its proxy.
    pub name: String,
    /// The direction it acts on.
    pub stream: Stream,
    /// The probability it acts on a connection.
    pub toxicity: f64,
    /// Its type and attributes.
    pub kind: ToxicKind,
    /// Which connections, when.
    pub when: When,
}

/// [`ConnMatch`] checked: the client blocks parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct When {
    /// The connections' numbers.
    pub connections: Option<Counts>,
    /// The window's start, after the toxic was installed.
    pub from: Option<Duration>,
    /// The window's end.
    pub until: Option<Duration>,
    /// Client address blocks: (network, prefix length).
    pub clients: Vec<(IpAddr, u8)>,
}

impl ConnMatch {
    fn compile(&self) -> Result<When, (String, String)> {
        if let (Some(f), Some(u)) = (self.from, self.until) {
            if u <= f {
                return Err((
                    "until".into(),
                    format!("`until` ({:?}) must be later than `from` ({:?})", u.0, f.0),
                ));
            }
        }
        if let Some(Counts(c)) = &self.connections {
            if c.is_empty() {
                return Err((
                    "connections".into(),
                    "an empty list of counts never matches".into(),
                ));
            }
        }
        let mut clients = Vec::new();
        for (i, c) in self.clients.iter().flat_map(|c| c.0.iter()).enumerate() {
            clients.push(parse_block(c).map_err(|m| (format!("clients[{i}]"), m))?);
        }
        Ok(When {
            connections: self.connections.clone(),
            from: self.from.map(|d| d.0),
            until: self.until.map(|d| d.0),
            clients,
        })
    }
}

impl When {
    /// Whether a connection numbered `n` from `client` is one of its connections.
    pub fn selects(&self, n: u64, client: IpAddr) -> bool {
        self.connections.as_ref().is_none_or(|c| c.contains(n))
            && (self.clients.is_empty()
                || self
                    .clients
                    .iter()
                    .any(|(net, len)| in_block(client, *net, *len)))
    }

    /// Whether `elapsed` since the toxic was installed is in its window.
    pub fn in_window(&self, elapsed: Duration) -> bool {
        self.from.is_none_or(|f| elapsed >= f) && self.until.is_none_or(|u| elapsed < u)
    }

    /// The window's bounds that are still ahead, `elapsed` after installation.
    pub fn next_boundary(&self, elapsed: Duration) -> Option<Duration> {
        [self.from, self.until]
            .into_iter()
            .flatten()
            .filter(|b| *b > elapsed)
            .min()
    }

    /// As the API shows it (`match`), or `None` when it selects everything.
    pub fn to_json(&self) -> Option<Value> {
        let mut m = Map::new();
        if let Some(Counts(c)) = &self.connections {
            let text: Vec<Value> = c
                .iter()
                .map(|s| {
                    Value::from(match *s {
                        CountSpec::Range { lo, hi: Some(h) } if h == lo => lo.to_string(),
                        CountSpec::Range { lo, hi: Some(h) } => format!("{lo}-{h}"),
                        CountSpec::Range { lo, hi: None } => format!("{lo}-"),
                        CountSpec::Every(k) => format!("every {k}"),
                    })
                })
                .collect();
            m.insert("connections".into(), Value::Array(text));
        }
        let ms = |d: Duration| Value::from(format!("{}ms", d.as_millis()));
        if let Some(f) = self.from {
            m.insert("from".into(), ms(f));
        }
        if let Some(u) = self.until {
            m.insert("until".into(), ms(u));
        }
        if !self.clients.is_empty() {
            m.insert(
                "clients".into(),
                self.clients
                    .iter()
                    .map(|(ip, len)| Value::from(format!("{ip}/{len}")))
                    .collect(),
            );
        }
        (!m.is_empty()).then_some(Value::Object(m))
    }
}

/// `10.0.0.0/8`, `::1/128`, or a lone address (the whole length).
fn parse_block(s: &str) -> Result<(IpAddr, u8), String> {
    let bad = || format!("{s:?} is not an IP address or a CIDR block (127.0.0.1, 10.0.0.0/8)");
    let (ip, len) = match s.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (s, None),
    };
    let ip: IpAddr = ip.trim().parse().map_err(|_| bad())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(bad)?,
        None => max,
    };
    Ok((ip, len))
}

/// Whether `ip` is in the block; an IPv4 client seen as IPv6 (`::ffff:a.b.c.d`) counts as IPv4.
fn in_block(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

/// Every proxy checked, and what needs them all: unique names, no two on one fixed address.
pub fn validate_proxies(proxies: &[ProxyConfig], origin: &str) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    let mut listens = HashSet::new();
    for (i, p) in proxies.iter().enumerate() {
        p.validate()
            .map_err(|(f, m)| ConfigError::at(origin, format!("proxies[{i}].{f}"), m))?;
        if !names.insert(p.name.as_str()) {
            return Err(ConfigError::at(
                origin,
                format!("proxies[{i}].name"),
                format!(
                    "a proxy named {:?} is already configured; names are unique",
                    p.name
                ),
            ));
        }
        if let Ok((host, port)) = split_host_port(&p.listen, true) {
            if port != 0 && !listens.insert((host, port)) {
                return Err(ConfigError::at(
                    origin,
                    format!("proxies[{i}].listen"),
                    format!("{} is another proxy's listen address too", p.listen),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_and_its_mistakes() {
        let p = ProxyConfig::parse_flag("redis=127.0.0.1:0,127.0.0.1:6379").unwrap();
        assert_eq!(
            (p.name.as_str(), p.listen.as_str()),
            ("redis", "127.0.0.1:0")
        );
        for bad in [
            "redis",
            "redis=127.0.0.1:0",
            "=127.0.0.1:0,127.0.0.1:1",
            "r=127.0.0.1,127.0.0.1:1",
            "r=127.0.0.1:0,127.0.0.1:0",
            "r=127.0.0.1:0,:6379",
        ] {
            assert!(ProxyConfig::parse_flag(bad).is_err(), "{bad}");
        }
        assert!(ProxyConfig::parse_flag("pg=:15432,[::1]:5432").is_ok());
    }

    #[test]
    fn the_flag_names_a_protocol() {
        let p = ProxyConfig::parse_flag("db=127.0.0.1:0,127.0.0.1:5432,postgres").unwrap();
        assert_eq!(
            (p.protocol, p.upstream.as_str()),
            (ProtocolName::Postgres, "127.0.0.1:5432")
        );
        let p = ProxyConfig::parse_flag("c=127.0.0.1:0,127.0.0.1:6379,redis").unwrap();
        assert_eq!(p.protocol, ProtocolName::Redis);
        let p = ProxyConfig::parse_flag("t=127.0.0.1:0,127.0.0.1:6379,tcp").unwrap();
        assert_eq!(p.protocol, ProtocolName::Tcp);
        let e = ProxyConfig::parse_flag("m=127.0.0.1:0,127.0.0.1:3306,mysql").unwrap_err();
        assert!(
            e.contains("\"mysql\" is not one of tcp, postgres, redis"),
            "{e}"
        );
    }

    #[test]
    fn an_upstream_may_be_a_url_or_an_environment_reference() {
        let r = |s: &str| resolve_upstream(s);
        assert_eq!(r("127.0.0.1:5432").as_deref(), Ok("127.0.0.1:5432"));
        assert_eq!(
            r("postgres://harness:harness@127.0.0.1:5433/harness?sslmode=disable").as_deref(),
            Ok("127.0.0.1:5433")
        );
        assert_eq!(r("postgresql://db.local/x").as_deref(), Ok("db.local:5432"));
        assert_eq!(r("redis://127.0.0.1/0").as_deref(), Ok("127.0.0.1:6379"));
        assert_eq!(r("redis://u:p@[::1]:6390").as_deref(), Ok("[::1]:6390"));
        assert!(r("http://127.0.0.1:80")
            .unwrap_err()
            .contains("not http://"));
        std::env::set_var("TCP_CONFIG_TEST_UPSTREAM", "postgres://u@127.0.0.1:6543/d");
        assert_eq!(
            r("$TCP_CONFIG_TEST_UPSTREAM").as_deref(),
            Ok("127.0.0.1:6543")
        );
        assert_eq!(
            r("${TCP_CONFIG_TEST_UPSTREAM}").as_deref(),
            Ok("127.0.0.1:6543")
        );
        let e = r("$TCP_CONFIG_TEST_UNSET").unwrap_err();
        assert!(e.contains("TCP_CONFIG_TEST_UNSET, which is not set"), "{e}");
        // Only the whole value refers: anything else is an address, and a bad one.
        assert!(r("${TCP_CONFIG_TEST_UPSTREAM}:1").is_err());
    }

    #[test]
    fn protocol_settings_belong_to_their_protocol() {
        let mut p = ProxyConfig::new("db", "127.0.0.1:0", "127.0.0.1:5432");
        p.postgres = Some(PostgresConfig::default());
        let (field, m) = p.check().unwrap_err();
        assert_eq!(field, "postgres");
        assert!(m.contains("protocol is tcp"), "{m}");
        p.protocol = ProtocolName::Postgres;
        assert!(p.check().is_ok());
        p.redis = Some(RedisConfig::default());
        assert_eq!(p.check().unwrap_err().0, "redis");
        p.redis = None;
        p.postgres = Some(PostgresConfig {
            max_statement: Size(4),
            ..PostgresConfig::default()
        });
        let (field, _) = p.check().unwrap_err();
        assert_eq!(field, "postgres.max_statement");
    }

    #[test]
    fn client_blocks_and_windows() {
        let w = ConnMatch {
            clients: Some(Clients(vec!["127.0.0.2".into(), "10.0.0.0/8".into()])),
            connections: Some(Counts(vec![CountSpec::Range { lo: 2, hi: None }])),
            from: Some(Dur(Duration::from_secs(1))),
            until: Some(Dur(Duration::from_secs(2))),
        }
        .compile()
        .unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(w.selects(2, ip("127.0.0.2")));
        assert!(w.selects(3, ip("10.1.2.3")));
        assert!(w.selects(3, ip("::ffff:10.1.2.3")));
        assert!(!w.selects(1, ip("127.0.0.2")), "the first connection");
        assert!(!w.selects(2, ip("127.0.0.1")));
        assert!(!w.in_window(Duration::from_millis(999)));
        assert!(w.in_window(Duration::from_secs(1)));
        assert!(!w.in_window(Duration::from_secs(2)));
        assert_eq!(
            w.next_boundary(Duration::ZERO),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            w.next_boundary(Duration::from_secs(1)),
            Some(Duration::from_secs(2))
        );
        assert_eq!(w.next_boundary(Duration::from_secs(3)), None);
        assert!(parse_block("10.0.0.0/33").is_err());
        assert!(parse_block("nope").is_err());
    }
}
