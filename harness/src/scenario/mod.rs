//! Scenario files: YAML as the user writes it ([`ScenarioFile`]), parsed once, validated, and
//! resolved into a [`Plan`] (see [`crate::plan`]) that the rest of the harness trusts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{HeaderName, Method};
use serde::Deserialize;
use yaml_config::{from_yaml_str, ConfigError, Dur};

mod burst;
mod clients;
pub mod deliver;
mod fleet;
pub(crate) mod grpc;
mod policy;
mod rate;

pub use burst::BurstFile;
pub use clients::ClientsFile;
pub use deliver::DeliverFile;
pub use fleet::FleetFile;
pub use grpc::GrpcFile;
use policy::merge_policy;
pub use policy::{resolve_policy, BackoffFile, BreakerFile, BudgetFile, PolicyFile, RetryOnFile};
pub use rate::{RateFile, StageFile};

use crate::http::Connect;
use crate::plan::{PhaseKind, PhasePlan, Plan, TierSpec, RELAY_TIER_HEADER};
use crate::template::{RequestTemplate, Text};
use crate::tls::TlsOptions;
use checks::ChecksConfig;

/// A scenario as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Name in reports; the file stem when absent.
    #[serde(default)]
    pub name: Option<String>,
    /// What the scenario demonstrates (shown in reports).
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    /// Seed of every random choice; `--seed` overrides.
    pub seed: Option<u64>,
    /// Multiplies every duration; `--time-scale` overrides.
    #[serde(default)]
    #[schemars(range(min = bounds::TIME_SCALE.0, max = bounds::TIME_SCALE.1))]
    pub time_scale: Option<f64>,
    /// An embedded fault server, configured inline (the fault server's config format).
    #[serde(default)]
    pub server: Option<fault_server::Config>,
    /// An embedded fault server configured by a file (relative to the scenario).
    #[serde(default)]
    pub server_config: Option<PathBuf>,
    /// Where load goes: a URL; the embedded server when absent. `--target` overrides.
    #[serde(default)]
    pub target: Option<String>,
    /// A chain of in-process relay tiers between the load and the embedded server: the load calls
    /// the top tier, each tier calls the next with its own retry policy, the last calls the server.
    #[serde(default)]
    pub relay: Option<RelayFile>,
    /// The client policy every phase starts from.
    #[serde(default)]
    pub client: PolicyFile,
    /// Load phases, run in order (`harness exec` may have none: the command is the load).
    #[serde(default)]
    pub phases: Vec<PhaseFile>,
    /// Checks run after the load, with their thresholds.
    #[serde(default)]
    pub checks: ChecksConfig,
    /// Report settings.
    #[serde(default)]
    pub report: ReportFile,
    /// TLS settings for an `https://` target: `{ ca, insecure, cert, key }`.
    #[serde(default)]
    pub tls: Option<TlsOptions>,
    /// The protocol: `{ version: 2, streams: 100 }` for HTTP/2 (default 1.1).
    #[serde(default)]
    pub http: Option<HttpFile>,
    /// gRPC: the `.proto` files calls are encoded with, `{ protos: […], import_paths: […] }`
    /// (`orders.v1.Orders` is built in).
    #[serde(default)]
    pub grpc: Option<GrpcFile>,
}

/// The protocol as written.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpFile {
    /// `1.1` (default) or `2`.
    #[serde(default)]
    pub version: Option<f64>,
    /// HTTP/2: concurrent streams (workers) per connection (default 100).
    #[serde(default)]
    pub streams: Option<u32>,
    /// Largest header list an answer's head (or trailers) may have, in RFC 7541 §4.1 sizes
    /// (default 64KiB, 1KiB to 16MiB): advertised as HTTP/2's SETTINGS_MAX_HEADER_LIST_SIZE and
    /// held to on HTTP/1.1 too. A larger answer fails its attempt as `protocol`.
    #[serde(default)]
    pub max_header_list: Option<yaml_config::Size>,
}

/// Relay tiers as written, top first.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelayFile {
    /// The tiers, top first.
    pub tiers: Vec<TierFile>,
}

/// One relay tier as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TierFile {
    /// The tier's name.
    pub name: String,
    /// How this tier calls the one below (same fields as `client`, defaults as `client`'s).
    #[serde(default)]
    pub client: PolicyFile,
}

/// Report settings.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportFile {
    /// Width of a window in the requests-over-time chart (scenario time; scaled).
    #[serde(default)]
    pub window: Option<Dur>,
}

/// A phase as written: a name, exactly one executor, a request, an optional policy override.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    { "required": ["burst"] },
    { "required": ["rate"] },
    { "required": ["clients"] },
    { "required": ["fleet"] },
    { "required": ["deliver"] }
]))]
pub struct PhaseFile {
    /// Name in reports.
    pub name: String,
    #[serde(default)]
    /// N requests released together.
    pub burst: Option<BurstFile>,
    #[serde(default)]
    /// An open model.
    pub rate: Option<RateFile>,
    #[serde(default)]
    /// A closed model.
    pub clients: Option<ClientsFile>,
    #[serde(default)]
    /// Clients that start together.
    pub fleet: Option<FleetFile>,
    #[serde(default)]
    /// A webhook provider delivering at least once to the consumer at the target.
    pub deliver: Option<DeliverFile>,
    /// The request each operation sends.
    pub request: RequestFile,
    /// Overrides fields of the scenario's `client` policy for this phase.
    #[serde(default)]
    pub client: Option<PolicyFile>,
    /// Values to keep from this phase's last successful JSON response, for later phases'
    /// `{{var.NAME}}`: `{ NAME: field }` (a top-level field, or a dotted path like `order.sku`).
    #[serde(default)]
    pub capture: BTreeMap<String, String>,
}

/// A request template as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestFile {
    #[serde(default)]
    /// The method (default GET).
    pub method: Option<String>,
    /// The path, from `/`; may hold placeholders.
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    /// Headers; values may hold placeholders.
    pub headers: BTreeMap<String, String>,
    /// A JSON body (strings may hold placeholders).
    #[serde(default)]
    pub json: Option<serde_json::Value>,
    /// A raw body.
    #[serde(default)]
    pub body: Option<String>,
    /// A gRPC call instead: `pkg.Service/Method`.
    #[serde(default)]
    pub grpc: Option<String>,
    /// The gRPC request message, as proto3 JSON (strings may hold placeholders).
    #[serde(default)]
    pub message: Option<serde_json::Value>,
    /// gRPC metadata; values may hold placeholders.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// Overrides from the command line.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--time-scale`.
    pub time_scale: Option<f64>,
    /// `--target`.
    pub target: Option<String>,
    /// `--cacert`, `--insecure`, `--cert`, `--key`: each replaces the scenario's when given.
    pub tls: TlsOptions,
    /// `--http2`.
    pub http2: bool,
    /// `--streams`.
    pub streams: Option<u32>,
    /// `--max-header-list`, bytes.
    pub max_header_list: Option<u64>,
    /// `--shard`, or an Indexed Job's environment.
    pub shard: crate::shard::Shard,
    /// `--start-at`, unix ms.
    pub start_at_unix_ms: Option<u64>,
    /// `--source-addr`.
    pub source: Option<std::net::IpAddr>,
    /// `--upstream`: the embedded fault server forwards to this dependency.
    pub upstream: Option<fault_server::config::UpstreamUrl>,
}

/// The bounds a scenario's numbers must keep: a value outside them is refused when the file is
/// loaded, with the bound in the message, instead of running until memory or patience runs out.
pub mod bounds {
    use std::time::Duration;
    /// `time_scale` and `--time-scale`.
    pub const TIME_SCALE: (f64, f64) = (1e-3, 1e3);
    /// Workers of a phase: `clients.concurrency`, `fleet.clients`, `rate.connections`,
    /// `burst.size`.
    pub const WORKERS: u32 = 100_000;
    /// Burst rounds.
    pub const ROUNDS: u32 = 1_000_000;
    /// Requests per second of an open-model phase.
    pub const RPS: f64 = 1_000_000.0;
    /// Operations one phase may start (requests × attempts are bounded by `max_attempts` too).
    pub const OPERATIONS: u64 = 100_000_000;
    /// Attempts per operation.
    pub const ATTEMPTS: u32 = 100;
    /// Longest a phase may run, and longest a pause in one (`think`, `burst.pause`,
    /// `burst.every`), as they run: after the time scale.
    pub const PHASE: Duration = Duration::from_secs(24 * 3600);
    /// Longest any other duration may be once scaled (timeouts, backoffs, the embedded server's
    /// windows and delays): what the file may say before scaling.
    pub const DURATION: Duration = yaml_config::MAX_DURATION;
    /// Shortest window of the requests-over-time chart.
    pub const MIN_WINDOW: Duration = Duration::from_millis(1);
    /// Most windows the requests-over-time chart may have over the phases' known length.
    pub const MAX_WINDOWS: u64 = 100_000;
    /// How the bounds on durations are named in messages.
    pub(crate) const PHASE_NAME: &str = "24h";
    pub(crate) const DURATION_NAME: &str = "366 days";
}

/// Default concurrent streams per HTTP/2 connection (`h2load -m` defaults to 1; browsers and
/// servers commonly allow 100).
pub const DEFAULT_STREAMS: u32 = 100;

fn invalid(origin: &str, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        origin: origin.to_string(),
        line: None,
        column: None,
        field: Some(field.into()),
        message: message.into(),
    }
}

/// What every phase's resolver needs: where its errors point, the time scale, how the target is
/// reached, and this process's shard of the run.
struct PhaseScope<'a> {
    /// The scenario file, as messages name it.
    origin: &'a str,
    /// The phase's index in `phases`.
    index: usize,
    /// The time scale.
    scaling: Scale<'a>,
    /// Whether the target is spoken to over HTTP/2.
    http2: bool,
    /// This process's part of the run.
    shard: crate::shard::Shard,
    /// The run's seed.
    seed: u64,
}

impl PhaseScope<'_> {
    /// `field` of this phase, as messages name it: `phases[2].burst.size`.
    fn at(&self, field: &str) -> String {
        format!("phases[{}].{field}", self.index)
    }

    /// `d` as it runs.
    fn scale(&self, d: Duration) -> Duration {
        self.scaling.of(d)
    }

    /// A phase's length or pause as it runs, refused above the bound of a phase.
    fn pause(&self, d: Duration, field: String) -> Result<Duration, ConfigError> {
        self.scaling
            .within(d, field, bounds::PHASE, bounds::PHASE_NAME)
    }
}

/// A scenario's durations multiplied by its time scale, each held to its bound as it will run:
/// a bound checked before scaling would let `--time-scale 1000` turn 24 h into 1,000 days.
#[derive(Clone, Copy)]
struct Scale<'a> {
    factor: f64,
    origin: &'a str,
}

impl Scale<'_> {
    fn of(self, d: Duration) -> Duration {
        d.mul_f64(self.factor)
    }

    /// `d` scaled, refused above `max` (named `max_name` in the message).
    fn within(
        self,
        d: Duration,
        field: impl Into<String>,
        max: Duration,
        max_name: &str,
    ) -> Result<Duration, ConfigError> {
        let scaled = self.of(d);
        if scaled > max {
            return Err(invalid(
                self.origin,
                field,
                format!("{}; give at most {max_name}", self.describe(d)),
            ));
        }
        Ok(scaled)
    }

    /// `d` as written, and as it runs when the time scale changes it.
    fn describe(self, d: Duration) -> String {
        if self.factor == 1.0 {
            human(d)
        } else {
            format!(
                "{} ({} × time scale {})",
                human(self.of(d)),
                human(d),
                self.factor
            )
        }
    }
}

/// A duration in its largest whole unit: `1.5s`, `25h`, `1000 days`.
fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    let (v, unit) = match s {
        s if s >= 2.0 * 86_400.0 => (s / 86_400.0, " days"),
        s if s >= 2.0 * 3600.0 => (s / 3600.0, "h"),
        s if s >= 600.0 => (s / 60.0, "m"),
        s if s >= 1.0 => (s, "s"),
        s => (s * 1000.0, "ms"),
    };
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{unit}")
}

/// A run split into `shard.count` shards needs every phase to give each shard a worker, and each
/// burst to know when it starts on every shard alike: the phases before it must have a length.
fn check_shardable(
    phases: &[PhasePlan],
    shard: crate::shard::Shard,
    origin: &str,
) -> Result<(), ConfigError> {
    if !shard.is_split() {
        return Ok(());
    }
    let n = shard.count;
    let mut known_start = true;
    for (i, p) in phases.iter().enumerate() {
        let (field, workers) = match &p.kind {
            PhaseKind::Burst { size, .. } => ("burst.size", *size),
            PhaseKind::Rate { connections, .. } => ("rate.connections", *connections),
            PhaseKind::Clients { concurrency, .. } => ("clients.concurrency", *concurrency),
            PhaseKind::Fleet { clients, .. } => ("fleet.clients", *clients),
            PhaseKind::Deliver(d) => ("deliver.concurrency", d.concurrency),
        };
        if workers < n {
            return Err(invalid(
                origin,
                format!("phases[{i}].{field}"),
                format!(
                    "{workers} cannot be split into {n} shards; give at least {n} (one per shard)"
                ),
            ));
        }
        if matches!(p.kind, PhaseKind::Burst { .. }) && !known_start {
            return Err(invalid(
                origin,
                format!("phases[{i}].burst"),
                "split into shards, a burst must start at the same instant on every shard, so every phase before it needs a length (a rate, clients with a duration, or a burst with `every`)",
            ));
        }
        known_start &= p.kind.length().is_some();
    }
    Ok(())
}

/// The JSON Schema of a scenario file (`docs/schema/scenario.schema.json`), from [`ScenarioFile`]
/// and its doc comments.
pub fn schema() -> schemars::Schema {
    yaml_config::json_schema::<ScenarioFile>("harness scenario")
}

/// Reads, validates and resolves a scenario file.
pub fn load(path: &Path, o: &Overrides) -> Result<Plan, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    load_str(&text, path, o)
}

/// Validates and resolves a scenario given as text; `path` is where it notionally lives (files it
/// names are found beside it, and messages name it).
pub fn load_str(text: &str, path: &Path, o: &Overrides) -> Result<Plan, ConfigError> {
    let origin = path.display().to_string();
    let file: ScenarioFile = from_yaml_str(text, &origin)?;
    resolve(file, path, o).map_err(|e| locate_in_scenario(e, text, &origin))
}

/// Places an error found after parsing in the scenario's text; one found in another file (a
/// `server_config`) was placed in that file already.
fn locate_in_scenario(e: ConfigError, text: &str, origin: &str) -> ConfigError {
    match &e {
        ConfigError::Invalid { origin: o, .. } if o != origin => e,
        _ => e.located(text),
    }
}

/// Resolves a parsed scenario.
pub fn resolve(f: ScenarioFile, path: &Path, o: &Overrides) -> Result<Plan, ConfigError> {
    let origin = path.display().to_string();
    let time_scale = o.time_scale.or(f.time_scale).unwrap_or(1.0);
    let (lo, hi) = bounds::TIME_SCALE;
    if !(time_scale.is_finite() && (lo..=hi).contains(&time_scale)) {
        let field = if o.time_scale.is_some() {
            "--time-scale"
        } else {
            "time_scale"
        };
        return Err(invalid(
            &origin,
            field,
            format!("{time_scale:e} is out of bounds; give {lo} to {hi}"),
        ));
    }
    let scaling = Scale {
        factor: time_scale,
        origin: &origin,
    };
    let mut connect = resolve_connect(&f, o, &origin)?;
    // gRPC is HTTP/2: a scenario that makes calls speaks it to its target, named `grpc://` or
    // `http://` alike.
    let has_grpc = f.phases.iter().any(|p| p.request.grpc.is_some());
    connect.http2 |= has_grpc;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut schemas = grpc::Schemas::load(f.grpc.as_ref(), dir, &origin)?;

    let mut server = resolve_server(f.server, f.server_config.as_deref(), path, o, scaling)?;
    let mut target = o.target.clone().or(f.target);
    if let Some(http) = target.as_deref().and_then(::grpc::target::http_url) {
        connect.http2 = true;
        target = Some(http);
    }
    let relay = resolve_relay(f.relay.as_ref(), server.as_mut(), target.is_some(), scaling)?;
    if server.is_none() && target.is_none() {
        return Err(invalid(
            &origin,
            "target",
            "no target: give `target: http://HOST:PORT`, `--target`, or an embedded `server`",
        ));
    }
    let seed = o.seed.or(f.seed).unwrap_or(1);
    // The scenario's client is checked even when no phase uses it as it is.
    resolve_policy(&f.client, time_scale, &origin, "client")?;
    let mut phases = Vec::new();
    let mut captured_so_far: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (i, p) in f.phases.iter().enumerate() {
        let at = |field: &str| format!("phases[{i}].{field}");
        let kinds = [
            p.burst.is_some(),
            p.rate.is_some(),
            p.clients.is_some(),
            p.fleet.is_some(),
            p.deliver.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(invalid(
                &origin,
                format!("phases[{i}]"),
                "a phase has exactly one of `burst`, `rate`, `clients`, `fleet`, `deliver`",
            ));
        }
        let scope = PhaseScope {
            origin: &origin,
            index: i,
            scaling,
            http2: connect.http2,
            shard: o.shard,
            seed,
        };
        let kind = if let Some(b) = &p.burst {
            burst::resolve(b, &scope)?
        } else if let Some(r) = &p.rate {
            rate::resolve(r, &scope)?
        } else if let Some(c) = &p.clients {
            clients::resolve(c, &scope)?
        } else if let Some(fl) = &p.fleet {
            fleet::resolve(fl, &scope)?
        } else if let Some(d) = &p.deliver {
            deliver::resolve(d, &scope)?
        } else {
            return Err(invalid(&origin, format!("phases[{i}]"), "missing executor"));
        };
        let merged = merge_policy(&f.client, p.client.as_ref());
        let (mut template, grpc_plan) = match &p.request.grpc {
            Some(name) => {
                if p.deliver.is_some() {
                    return Err(invalid(
                        &origin,
                        at("request.grpc"),
                        "a deliver phase sends webhooks over HTTP; it makes no gRPC call",
                    ));
                }
                let (template, method) =
                    grpc::compile_call(&p.request, name, &mut schemas, &origin, &at("request"))?;
                // A policy error points where the fields were written: the phase's override,
                // or the scenario's `client`.
                let policy_at = match &p.client {
                    Some(_) => at("client"),
                    None => "client".to_string(),
                };
                let g = grpc::plan(&merged, method, dir, scaling, &policy_at)?;
                (template, Some(g))
            }
            None => (compile_request(&p.request, &origin, &at("request"))?, None),
        };
        if p.deliver.is_some() {
            // A delivery's body is its event's payload, and a provider POSTs it.
            if p.request.json.is_some() || p.request.body.is_some() {
                return Err(invalid(
                    &origin,
                    at("request"),
                    "a deliver phase sends each event's payload: give `deliver.payload`, not a request body",
                ));
            }
            if p.request.method.is_none() {
                template.method = Method::POST;
            }
        }
        if let Some(missing) = template
            .named()
            .into_iter()
            .find(|n| !captured_so_far.contains(n))
        {
            return Err(invalid(
                &origin,
                at("request"),
                format!("{{{{var.{missing}}}}} is not captured by an earlier phase (add `capture: {{ {missing}: FIELD }}` to one)"),
            ));
        }
        captured_so_far.extend(p.capture.keys().map(String::as_str));
        let policy = resolve_policy(&merged, time_scale, &origin, &at("client"))?;
        phases.push(PhasePlan {
            name: p.name.clone(),
            kind,
            template,
            policy,
            client_id_header: merged.client_id_header.unwrap_or(true),
            capture: p
                .capture
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            grpc: grpc_plan,
        });
    }
    let name = f.name.unwrap_or_else(|| {
        path.file_stem()
            .map_or("scenario".into(), |s| s.to_string_lossy().into_owned())
    });
    let mut checks = f.checks;
    checks.validate(&origin, "checks")?;
    checks.scale(time_scale);
    // A provider's timeout is the deliver phase's, already scaled, unless the check names one.
    if let Some(a) = checks
        .ack_latency
        .as_mut()
        .filter(|a| a.timeout_ms.is_none())
    {
        a.timeout_ms = phases.iter().find_map(|p| match &p.kind {
            PhaseKind::Deliver(d) => d
                .spec
                .redelivery
                .as_ref()
                .map(|r| (r.timeout.as_millis() as u64).max(1)),
            _ => None,
        });
    }
    check_shardable(&phases, o.shard, &origin)?;
    let window = resolve_window(f.report.window, &phases, scaling)?;
    Ok(Plan {
        name,
        description: f.description,
        source: path.to_path_buf(),
        seed,
        time_scale,
        server,
        target,
        relay,
        phases,
        checks,
        window,
        connect,
        shard: o.shard,
        start_at_unix_ms: o.start_at_unix_ms,
    })
}

/// The embedded fault server of a scenario: `server` (inline) or `server_config` (a file beside
/// the scenario), the `--upstream` override applied, validated, and its durations scaled and
/// held to their bounds.
fn resolve_server(
    inline: Option<fault_server::Config>,
    file: Option<&Path>,
    path: &Path,
    o: &Overrides,
    scaling: Scale<'_>,
) -> Result<Option<fault_server::Config>, ConfigError> {
    let mut server = match (inline, file) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                scaling.origin,
                "server_config",
                "give `server` (inline) or `server_config` (a file), not both",
            ))
        }
        (Some(mut s), None) => {
            if let Some(url) = &o.upstream {
                s.set_upstream(url.clone());
            }
            s.validate(scaling.origin).map_err(|e| e.within("server"))?;
            Some(s)
        }
        (None, Some(p)) => {
            let p = path.parent().unwrap_or(Path::new(".")).join(p);
            Some(fault_server::Config::load_with(&p, |s| {
                if let Some(url) = &o.upstream {
                    s.set_upstream(url.clone());
                }
            })?)
        }
        (None, None) => {
            if o.upstream.is_some() {
                return Err(invalid(
                    scaling.origin,
                    "server",
                    "--upstream puts the embedded fault server in front of a dependency, and this scenario has no `server`",
                ));
            }
            None
        }
    };
    if let Some(s) = &mut server {
        s.scale_durations(scaling.factor);
        let too_long = s
            .durations()
            .into_iter()
            .find(|(_, d)| **d > bounds::DURATION)
            .map(|(field, d)| (field, d.div_f64(scaling.factor)));
        if let Some((field, written)) = too_long {
            let message = format!(
                "{}; give at most {}",
                scaling.describe(written),
                bounds::DURATION_NAME
            );
            return Err(match file {
                None => invalid(scaling.origin, format!("server.{field}"), message),
                // Placed in the file that says it.
                Some(p) => {
                    let p = path.parent().unwrap_or(Path::new(".")).join(p);
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    invalid(&p.display().to_string(), field, message).located(&text)
                }
            });
        }
    }
    Ok(server)
}

/// The relay tiers between the load and the embedded server, each with its own client policy;
/// the bottom server is told to capture the header that says which tier sent a request.
fn resolve_relay(
    relay_file: Option<&RelayFile>,
    server: Option<&mut fault_server::Config>,
    has_target: bool,
    scaling: Scale<'_>,
) -> Result<Vec<TierSpec>, ConfigError> {
    let mut relay = Vec::new();
    if let Some(r) = relay_file {
        if server.is_none() {
            return Err(invalid(
                scaling.origin,
                "relay",
                "relay tiers need an embedded `server` at the bottom",
            ));
        }
        if has_target {
            return Err(invalid(
                scaling.origin,
                "relay",
                "with relay tiers the load goes to the top tier; remove `target`",
            ));
        }
        if r.tiers.is_empty() {
            return Err(invalid(
                scaling.origin,
                "relay.tiers",
                "give at least one tier",
            ));
        }
        for (i, t) in r.tiers.iter().enumerate() {
            let policy = resolve_policy(
                &t.client,
                scaling.factor,
                scaling.origin,
                &format!("relay.tiers[{i}].client"),
            )?;
            relay.push(TierSpec {
                name: t.name.clone(),
                policy,
            });
        }
        // The bottom's journal tells which tier sent each request.
        if let Some(s) = server {
            let h = RELAY_TIER_HEADER.to_string();
            if !s.capture_headers.contains(&h) {
                s.capture_headers.push(h);
            }
        }
    }
    Ok(relay)
}

/// The chart's window, scaled: at least [`bounds::MIN_WINDOW`], and wide enough that the phases'
/// known length holds at most [`bounds::MAX_WINDOWS`] of them (a 1 ms window over a day would be
/// 86 million counts per status in every report).
fn resolve_window(
    window: Option<Dur>,
    phases: &[PhasePlan],
    scaling: Scale<'_>,
) -> Result<Option<Duration>, ConfigError> {
    let Some(written) = window else {
        return Ok(None);
    };
    let w = scaling.of(written.0);
    if w < bounds::MIN_WINDOW {
        return Err(invalid(
            scaling.origin,
            "report.window",
            format!("{}; a window is at least 1ms", scaling.describe(written.0)),
        ));
    }
    let known: Duration = phases.iter().filter_map(|p| p.kind.length()).sum();
    let windows = known.as_nanos() / w.as_nanos();
    if windows > u128::from(bounds::MAX_WINDOWS) {
        return Err(invalid(
            scaling.origin,
            "report.window",
            format!(
                "{} over the phases' {} makes {windows} windows; at most {} (give a window of at least {}ms)",
                scaling.describe(written.0),
                human(known),
                bounds::MAX_WINDOWS,
                least_ms(known, scaling.factor),
            ),
        ));
    }
    Ok(Some(w))
}

/// The narrowest window, as written (in whole ms), that keeps `known` within the bound.
fn least_ms(known: Duration, factor: f64) -> u64 {
    let least = known.as_secs_f64() / bounds::MAX_WINDOWS as f64 / factor;
    (least * 1000.0).ceil().max(1.0) as u64
}

/// TLS and protocol settings: the scenario's, each replaced by its flag when given.
fn resolve_connect(f: &ScenarioFile, o: &Overrides, origin: &str) -> Result<Connect, ConfigError> {
    let file = f.tls.clone().unwrap_or_default();
    let tls = TlsOptions {
        ca: o.tls.ca.clone().or(file.ca),
        insecure: o.tls.insecure || file.insecure,
        cert: o.tls.cert.clone().or(file.cert),
        key: o.tls.key.clone().or(file.key),
        trusted_pem: Vec::new(),
    };
    if tls.cert.is_some() != tls.key.is_some() {
        return Err(invalid(
            origin,
            "tls",
            "mutual TLS needs both `cert` and `key`",
        ));
    }
    let http = f.http.clone().unwrap_or_default();
    let http2 = o.http2
        || match http.version {
            None => false,
            Some(2.0) => true,
            Some(v) if v == 1.1 || v == 1.0 => false,
            Some(v) => {
                return Err(invalid(
                    origin,
                    "http.version",
                    format!("{v} is not an HTTP version this harness speaks; give 1.1 or 2"),
                ))
            }
        };
    let streams = o.streams.or(http.streams).unwrap_or(DEFAULT_STREAMS);
    if streams == 0 || streams > 10_000 {
        return Err(invalid(
            origin,
            "http.streams",
            format!("{streams} streams per connection; give 1 to 10000"),
        ));
    }
    let max_header_list = o
        .max_header_list
        .or(http.max_header_list.map(|s| s.0))
        .map(|n| check_header_list(n).map_err(|m| invalid(origin, "http.max_header_list", m)))
        .transpose()?;
    Ok(Connect {
        tls,
        http2,
        streams,
        source: o.source,
        max_header_list,
        ..Connect::default()
    })
}

/// A header-list limit within the transport's bounds (1 KiB to its cap), in bytes.
pub fn check_header_list(n: u64) -> Result<usize, String> {
    let cap = transport::MAX_HEADER_LIST;
    match usize::try_from(n) {
        Ok(n) if (1024..=cap).contains(&n) => Ok(n),
        _ => Err(format!(
            "a header list limit of {n} bytes; give 1KiB to {}MiB",
            cap >> 20
        )),
    }
}

fn compile_request(
    r: &RequestFile,
    origin: &str,
    at: &str,
) -> Result<RequestTemplate, ConfigError> {
    if r.message.is_some() || !r.metadata.is_empty() {
        return Err(invalid(
            origin,
            at,
            "`message` and `metadata` belong to a gRPC call: add `grpc: pkg.Service/Method`, or send `json` and `headers`",
        ));
    }
    if r.path.is_empty() {
        return Err(invalid(
            origin,
            format!("{at}.path"),
            "missing: give the `path` of an HTTP request, or `grpc: pkg.Service/Method` for a gRPC call",
        ));
    }
    let method_name = r.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    let method = Method::from_bytes(method_name.as_bytes()).map_err(|_| {
        invalid(
            origin,
            format!("{at}.method"),
            format!("{method_name:?} is not an HTTP method"),
        )
    })?;
    if !r.path.starts_with('/') {
        return Err(invalid(
            origin,
            format!("{at}.path"),
            format!("{:?} must start with '/'", r.path),
        ));
    }
    if let Some(c) = r.path.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            origin,
            format!("{at}.path"),
            format!(
                "{:?} holds {c:?}, which cannot be sent in a request line; percent-encode it (%20 for a space)",
                r.path
            ),
        ));
    }
    let path = Text::parse(&r.path).map_err(|e| invalid(origin, format!("{at}.path"), e))?;
    let mut headers = Vec::new();
    for (k, v) in &r.headers {
        let name = HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).map_err(|_| {
            invalid(
                origin,
                format!("{at}.headers"),
                format!("{k:?} is not a header name"),
            )
        })?;
        if let Some(c) = v
            .chars()
            .find(|c| (c.is_control() && *c != '\t') || *c == '\u{7f}')
        {
            return Err(invalid(
                origin,
                format!("{at}.headers.{k}"),
                format!("the value holds {c:?}; a header value cannot hold control characters (CR and LF would split the request)"),
            ));
        }
        let value = Text::parse(v).map_err(|e| invalid(origin, format!("{at}.headers.{k}"), e))?;
        headers.push((name, value));
    }
    let body = match (&r.json, &r.body) {
        (Some(_), Some(_)) => return Err(invalid(origin, at, "give `json` or `body`, not both")),
        (Some(j), None) => Some((
            Text::parse(&j.to_string()).map_err(|e| invalid(origin, format!("{at}.json"), e))?,
            true,
        )),
        (None, Some(b)) => Some((
            Text::parse(b).map_err(|e| invalid(origin, format!("{at}.body"), e))?,
            false,
        )),
        (None, None) => None,
    };
    Ok(RequestTemplate {
        method,
        path,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use retry_policy::Jitter;

    fn resolve_text(text: &str, o: &Overrides) -> Result<Plan, ConfigError> {
        let file: ScenarioFile = from_yaml_str(text, "s.yaml")?;
        resolve(file, Path::new("s.yaml"), o).map_err(|e| locate_in_scenario(e, text, "s.yaml"))
    }

    const BASE: &str = "server: {}\nphases:\n  - name: p\n    clients: { concurrency: 2, requests: 4 }\n    request: { path: / }\n";

    #[test]
    fn durations_are_scaled_once_and_the_overrides_win() {
        let text = format!(
            "{BASE}client: {{ max_attempts: 3, timeout: 2s, backoff: {{ base: 1s }} }}\nchecks: {{ jitter: {{ window_ms: 1000 }} }}\ntime_scale: 0.5\nseed: 9\n"
        );
        let plan = resolve_text(&text, &Overrides::default()).expect("valid");
        assert_eq!(plan.seed, 9);
        let p = &plan.phases[0].policy;
        assert_eq!(p.max_attempts, 3);
        assert_eq!(p.timeout, Duration::from_secs(1));
        assert_eq!(p.backoff.base, Duration::from_millis(500));
        assert_eq!(plan.checks.jitter.as_ref().map(|j| j.window_ms), Some(500));
        let plan = resolve_text(
            &text,
            &Overrides {
                seed: Some(1),
                time_scale: Some(0.1),
                ..Overrides::default()
            },
        )
        .expect("valid");
        assert_eq!(plan.seed, 1);
        assert_eq!(plan.phases[0].policy.timeout, Duration::from_millis(200));
    }

    const GRPC: &str = "server: {}\nphases:\n  - name: p\n    clients: { concurrency: 1, requests: 1 }\n    request:\n      grpc: orders.v1.Orders/CreateOrder\n      metadata: { idempotency-key: \"{{key}}\" }\n      message: { requestId: \"{{seq}}\", qty: 2 }\n";

    #[test]
    fn a_grpc_call_resolves_with_its_policy_scaled_and_speaks_http2() {
        use retry_policy::grpc::Strategy;
        let text = format!("{GRPC}time_scale: 0.5\nclient:\n  total_timeout: 4s\n  retryPolicy: {{ maxAttempts: 3, initialBackoff: 0.2s, maxBackoff: 1s, backoffMultiplier: 2, retryableStatusCodes: [UNAVAILABLE] }}\n  retryThrottling: {{ maxTokens: 10, tokenRatio: 0.1 }}\n  grpc_conduct: {{ pushback: ignore }}\n");
        let plan = resolve_text(&text, &Overrides::default()).expect("valid");
        assert!(plan.connect.http2, "gRPC is HTTP/2");
        let p = &plan.phases[0];
        assert_eq!(p.template.method, Method::POST);
        let g = p.grpc.as_ref().expect("a gRPC call");
        assert_eq!(g.method.path(), "/orders.v1.Orders/CreateOrder");
        assert_eq!(g.deadline, Some(Duration::from_secs(2)));
        let Strategy::Retry(r) = &g.policy.strategy else {
            panic!("{:?}", g.policy.strategy)
        };
        assert_eq!(
            (r.max_attempts, r.initial_backoff),
            (3, Duration::from_millis(100))
        );
        assert_eq!(r.max_backoff, Duration::from_millis(500));
        assert!(g.throttle.is_some());
        assert_eq!(
            g.policy.conduct.pushback,
            retry_policy::grpc::PushbackConduct::Ignore
        );
        // A grpc:// target is HTTP/2 to that address.
        let plan = resolve_text(
            &GRPC.replace("server: {}", "target: grpc://127.0.0.1:9"),
            &Overrides::default(),
        )
        .expect("valid");
        assert_eq!(plan.target.as_deref(), Some("http://127.0.0.1:9"));
    }

    #[test]
    fn bad_grpc_calls_and_policies_name_their_field() {
        let cases = [
            (GRPC.replace("CreateOrder", "Nope"), "phases[0].request.grpc"),
            (GRPC.replace("qty: 2", "qty: two"), "phases[0].request.message"),
            (GRPC.replace("requestId", "request_idd"), "phases[0].request.message"),
            (GRPC.replace("idempotency-key", "grpc-timeout"), "phases[0].request.metadata"),
            (
                GRPC.replace("metadata:", "path: /x\n      metadata:"),
                "phases[0].request",
            ),
            (
                format!("{GRPC}client: {{ retryPolicy: {{ maxAttempts: 1, initialBackoff: 1s, maxBackoff: 1s, backoffMultiplier: 2, retryableStatusCodes: [UNAVAILABLE] }} }}\n"),
                "client.retryPolicy.maxAttempts",
            ),
            (
                format!("{GRPC}client: {{ grpc_service_config: x.json, retryThrottling: {{ maxTokens: 1, tokenRatio: 1 }} }}\n"),
                "client.grpc_service_config",
            ),
            (
                format!("{GRPC}client: {{ grpc_conduct: {{ pushback: maybe }} }}\n"),
                "pushback",
            ),
        ];
        for (text, field) in cases {
            let e = resolve_text(&text, &Overrides::default())
                .expect_err(&text)
                .to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
        let e = resolve_text(
            "server: {}\nphases:\n  - name: p\n    clients: { concurrency: 1, requests: 1 }\n    request: { message: {} }\n",
            &Overrides::default(),
        )
        .expect_err("a message without a method")
        .to_string();
        assert!(e.contains("grpc: pkg.Service/Method"), "{e}");
    }

    #[test]
    fn a_phase_overrides_fields_of_the_scenarios_client() {
        let text = "server: {}\nclient: { max_attempts: 5, jitter: none }\nphases:\n  - name: p\n    clients: { concurrency: 1, requests: 1 }\n    request: { path: / }\n    client: { max_attempts: 2 }\n";
        let plan = resolve_text(text, &Overrides::default()).expect("valid");
        let p = &plan.phases[0].policy;
        assert_eq!(p.max_attempts, 2);
        assert_eq!(p.jitter, Jitter::None, "kept from the scenario's client");
    }

    #[test]
    fn errors_found_after_parsing_name_their_line_column_and_field() {
        let cases = [
            (
                "server: {}\nphases:\n  - name: p\n    clients: { concurrency: 0, requests: 1 }\n    request: { path: / }\n",
                "s.yaml:4:",
                "phases[0].clients.concurrency",
            ),
            (
                "server: {}\nphases:\n  - name: p\n    rate: { rps: 10 }\n    request: { path: / }\n",
                "s.yaml:4:",
                "phases[0].rate.duration",
            ),
            (
                "server: {}\nphases:\n  - name: p\n    clients: { concurrency: 1, requests: 1 }\n    request: { path: \"/{{var.id}}\" }\n",
                "s.yaml:5:",
                "phases[0].request",
            ),
            (
                "server: {}\nclient: { max_attempts: 0 }\nphases: []\n",
                "s.yaml:2:",
                "client.max_attempts",
            ),
            (
                "server: {}\nphases:\n  - name: p\n    clients: { concurrency: 10000000, requests: 1 }\n    request: { path: / }\n",
                "s.yaml:4:",
                "give 1 to 100000",
            ),
            (
                "server: {}\nphases:\n  - name: p\n    burst: { size: 10000000 }\n    request: { path: / }\n",
                "s.yaml:4:",
                "phases[0].burst.size",
            ),
            (
                "server: {}\nphases:\n  - name: p\n    rate: { rps: 1e12, duration: 1s }\n    request: { path: / }\n",
                "s.yaml:4:",
                "phases[0].rate.rps",
            ),
            (
                "server: {}\nphases:\n  - name: p\n    rate: { rps: 0, duration: 1s }\n    request: { path: / }\n",
                "s.yaml:4:",
                "phases[0].rate.rps",
            ),
            (
                "server: {}\nphases:\n  - name: p\n    rate: { rps: 10, duration: 1s, connections: 0 }\n    request: { path: / }\n",
                "s.yaml:4:",
                "phases[0].rate.connections",
            ),
            (
                "server: {}\nclient: { timeout: 0ms }\nphases: []\n",
                "s.yaml:2:",
                "client.timeout",
            ),
            (
                "server: {}\nreport: { window: 0ms }\nphases: []\n",
                "s.yaml:2:",
                "report.window",
            ),
            (
                "server: {}\ntime_scale: 1e300\nphases: []\n",
                "s.yaml:2:",
                "time_scale",
            ),
            (
                "server: {}\nphases:\n  - name: p\n    clients: { concurrency: 1, requests: 1 }\n    request: { path: \"/a b\" }\n",
                "s.yaml:5:",
                "phases[0].request.path",
            ),
            (
                "server: {}\nphases:\n  - name: p\n    clients: { concurrency: 1, requests: 1 }\n    request: { path: /, headers: { x-a: \"1\\r\\nx-b: 2\" } }\n",
                "s.yaml:5:",
                "phases[0].request.headers",
            ),
            (
                "server:\n  rules:\n    - id: a\n      fault: drop\n    - id: a\n      fault: drop\nphases: []\n",
                "s.yaml:5:11: at `server.rules[1].id`",
                "duplicate rule id",
            ),
            (
                "server: { capture_headers: [\"x a\"] }\nphases: []\n",
                "s.yaml:1:29: at `server.capture_headers[0]`",
                "not a header name",
            ),
        ];
        for (text, at, field) in cases {
            let err = resolve_text(text, &Overrides::default())
                .expect_err("invalid")
                .to_string();
            assert!(err.starts_with(at), "{text}\n→ {err}");
            assert!(err.contains(field), "{text}\n→ {err}");
        }
    }

    #[test]
    fn a_burst_is_held_to_the_operations_of_a_phase() {
        let text = "server: {}\nphases:\n  - name: p\n    burst: { size: 1000, rounds: 1000000 }\n    request: { path: / }\n";
        let err = resolve_text(text, &Overrides::default())
            .expect_err("a billion requests")
            .to_string();
        assert!(
            err.starts_with("s.yaml:4:34: at `phases[0].burst.rounds`")
                && err.contains("1000000000 requests")
                && err.contains("at most 100000000"),
            "{err}"
        );
        let fits = text.replace("1000000", "100000");
        assert!(resolve_text(&fits, &Overrides::default()).is_ok());
    }

    #[test]
    fn the_chart_window_is_held_to_the_most_windows_over_the_phases() {
        let text = |window: &str| {
            format!("server: {{}}\nreport: {{ window: {window} }}\nphases:\n  - name: a\n    rate: {{ rps: 1, duration: 150s }}\n    request: {{ path: / }}\n  - name: b\n    clients: {{ concurrency: 1, duration: 50s }}\n    request: {{ path: / }}\n")
        };
        let err = resolve_text(&text("1ms"), &Overrides::default())
            .expect_err("200,000 windows")
            .to_string();
        assert!(
            err.starts_with("s.yaml:2:19: at `report.window`")
                && err.contains("200000 windows; at most 100000")
                && err.contains("at least 2ms"),
            "{err}"
        );
        assert!(resolve_text(&text("2ms"), &Overrides::default()).is_ok());
        // The window and the phases scale alike: the count of windows stays, and the message
        // says the time scale.
        let slow = Overrides {
            time_scale: Some(10.0),
            ..Overrides::default()
        };
        let err = resolve_text(&text("1ms"), &slow)
            .expect_err("200,000 windows still")
            .to_string();
        assert!(
            err.contains(
                "10ms (1ms × time scale 10) over the phases' 33.333m makes 200000 windows"
            ),
            "{err}"
        );
    }

    #[test]
    fn durations_are_held_to_their_bounds_as_they_run_after_the_time_scale() {
        let slow = Overrides {
            time_scale: Some(1000.0),
            ..Overrides::default()
        };
        let phase = |body: &str| {
            format!("server: {{}}\nphases:\n  - name: p\n    {body}\n    request: {{ path: / }}\n")
        };
        for (text, field, says) in [
            (
                phase("clients: { concurrency: 1, duration: 2h }"),
                "phases[0].clients.duration",
                "83.333 days (2h × time scale 1000); give at most 24h",
            ),
            (
                phase("clients: { concurrency: 1, requests: 5, think: 100s }"),
                "phases[0].clients.think",
                "give at most 24h",
            ),
            (
                phase("burst: { size: 2, rounds: 2, pause: 100s }"),
                "phases[0].burst.pause",
                "give at most 24h",
            ),
            (
                phase("burst: { size: 2, rounds: 2, every: 100s }"),
                "phases[0].burst.every",
                "give at most 24h",
            ),
            (
                phase("rate: { rps: 1, duration: 100s }"),
                "phases[0].rate.duration",
                "at most 24h",
            ),
            (
                "server: {}\nclient: { timeout: 1d }\nphases: []\n".to_string(),
                "client.timeout",
                "1000 days (24h × time scale 1000); give at most 366 days",
            ),
            (
                "server: {}\nclient: { backoff: { base: 1s, cap: 1d } }\nphases: []\n".to_string(),
                "client.backoff.cap",
                "give at most 366 days",
            ),
            (
                "server:\n  rules:\n    - { fault: { hang: { cap: 1d } } }\nphases: []\n"
                    .to_string(),
                "server.rules[0].fault.hang.cap",
                "give at most 366 days",
            ),
        ] {
            assert!(
                resolve_text(&text, &Overrides::default()).is_ok(),
                "within bounds unscaled: {text}"
            );
            let err = resolve_text(&text, &slow)
                .expect_err("out of bounds once scaled")
                .to_string();
            assert!(
                err.starts_with("s.yaml:") && err.contains(&format!("at `{field}`")),
                "{text}\n→ {err}"
            );
            assert!(err.contains(says), "{text}\n→ {err}");
        }
    }

    #[test]
    fn a_scenario_needs_somewhere_to_send_its_load() {
        let err = resolve_text("phases: []\n", &Overrides::default())
            .expect_err("no target")
            .to_string();
        assert!(err.contains("no target"), "{err}");
        let plan = resolve_text(
            "phases: []\n",
            &Overrides {
                target: Some("http://127.0.0.1:9".into()),
                ..Overrides::default()
            },
        )
        .expect("a target from the command line");
        assert_eq!(plan.target.as_deref(), Some("http://127.0.0.1:9"));
        let err = resolve_text(
            "relay: { tiers: [ { name: a } ] }\ntarget: http://127.0.0.1:9\n",
            &Overrides::default(),
        )
        .expect_err("relay needs a server")
        .to_string();
        assert!(err.contains("relay"), "{err}");
    }

    #[test]
    fn a_run_split_into_shards_gives_every_shard_a_worker_and_times_its_bursts() {
        let three = Overrides {
            shard: crate::shard::Shard::new(1, 3).unwrap(),
            start_at_unix_ms: Some(1),
            ..Overrides::default()
        };
        let phase = |body: &str| {
            format!("server: {{}}\nphases:\n  - name: p\n    {body}\n    request: {{ path: / }}\n")
        };
        // Bursts go on the clock: a second by default, scaled.
        let plan = resolve_text(
            &format!(
                "time_scale: 0.5\n{}",
                phase("burst: { size: 10, rounds: 2 }")
            ),
            &three,
        )
        .expect("valid");
        assert!(matches!(
            plan.phases[0].kind,
            PhaseKind::Burst { every: Some(e), .. } if e == Duration::from_millis(500)
        ));
        assert_eq!(plan.shard, three.shard);
        let whole = resolve_text(
            &phase("burst: { size: 10, rounds: 2 }"),
            &Overrides::default(),
        )
        .expect("valid");
        assert!(matches!(
            whole.phases[0].kind,
            PhaseKind::Burst { every: None, .. }
        ));
        let err = |text: &str| resolve_text(text, &three).expect_err("refused").to_string();
        for (body, field, says) in [
            ("burst: { size: 2 }", "phases[0].burst.size", "at least 3"),
            (
                "clients: { concurrency: 2, requests: 9 }",
                "phases[0].clients.concurrency",
                "at least 3",
            ),
            (
                "fleet: { clients: 1, operations: 1 }",
                "phases[0].fleet.clients",
                "at least 3",
            ),
            (
                "rate: { rps: 10, duration: 1s, connections: 2 }",
                "phases[0].rate.connections",
                "at least 3",
            ),
            (
                "burst: { size: 9, pause: 1s }",
                "phases[0].burst.pause",
                "replace `pause` with `every`",
            ),
            (
                "burst: { size: 9, pause: 1s, every: 1s }",
                "phases[0].burst.every",
                "not both",
            ),
        ] {
            let e = err(&phase(body));
            assert!(e.starts_with("s.yaml:4:"), "{body} → {e}");
            assert!(e.contains(field) && e.contains(says), "{body} → {e}");
        }
        // A burst after a phase of unknown length cannot start together on every shard.
        let e = err("server: {}\nphases:\n  - name: a\n    clients: { concurrency: 3, requests: 9 }\n    request: { path: / }\n  - name: b\n    burst: { size: 9 }\n    request: { path: / }\n");
        assert!(
            e.contains("phases[1].burst") && e.contains("needs a length"),
            "{e}"
        );
        assert!(resolve_text(
            "server: {}\nphases:\n  - name: a\n    rate: { rps: 10, duration: 1s, connections: 3 }\n    request: { path: / }\n  - name: b\n    burst: { size: 9 }\n    request: { path: / }\n",
            &three
        )
        .is_ok());
    }
}
