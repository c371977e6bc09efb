//! The fault server's configuration file: YAML, read in two steps, each in one place.
//!
//! Reading is serde's. Every section's types derive their `Deserialize` and their `JsonSchema`
//! side by side, or, where the YAML has shorthands (`fault: drop`, `status: 503`, `delay: 200ms`,
//! `upstream: URL`, `tls: self-signed`), write both by hand beside each other, so that the schema
//! says what the reader takes. Unknown fields are errors everywhere: a typo in a rule must not
//! silently disable a fault. Then [`Config::validate`] holds every value to its bounds and checks
//! what needs more than one value (unique rule ids, a window's end after its start, `forward`
//! with an upstream). Its error names the field, and `ConfigError::located` finds that field's
//! line and column in the text, so an error found after reading points where one found while
//! reading does.
//!
//! One file per area, each with its types, their reading, and their checks and bounds:
//! `rules.rs` the schedule's rules (and a schedule on its own, as `PUT /__harness/schedule` takes
//! it), `matcher.rs` when a rule applies, `faults.rs` what it does, `orders.rs` the built-in
//! resource, its database and where the schedule's counters live, `upstream.rs` proxy mode,
//! `limits.rs` what one client may cost, `tls.rs` the certificate, `grpc.rs` the gRPC services
//! served. The TCP proxies' section (`proxies:`) is read and checked in `crate::tcp::config`,
//! beside the proxies, and the count language (`3`, `"1-5"`, `"every 4"`) the rules and the
//! proxies share is `crate::counts`. This file holds the whole (`Config`), its loading, and the
//! checks across areas.

mod faults;
mod grpc;
mod limits;
mod matcher;
mod orders;
mod rules;
mod tls;
mod upstream;

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use yaml_config::{from_yaml_str, ConfigError, Dur};

pub use crate::counts::{parse_count_spec, CountSpec, Counts};
pub use faults::{
    DelayFault, DelaySpec, DelayWhen, FaultConfig, GrpcAfterHeadersFault, GrpcFault, H2ErrorCode,
    HangFault, MalformedFault, MalformedKind, ResetFault, StatusCode, StatusFault,
};
pub use grpc::{validate_grpc, GrpcConfig};
pub use limits::{validate_limits, LimitsConfig};
pub use matcher::{GrpcMethodPattern, MatchConfig, OneOrMany, PathPattern, Probability};
pub use orders::{
    validate_orders, Database, IdempotencyImpl, OrdersConfig, PayImpl, PostgresUrl, StateMode,
};
pub use rules::{forwarding_rule, rule_id, validate_rules, RuleConfig, ScheduleConfig};
pub use tls::TlsConfig;
pub use upstream::{validate_upstream, CreatedFrom, UpstreamConfig, UpstreamUrl};

/// Everything a fault server needs to know besides where to listen.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Seed for every random decision; `--seed` overrides it.
    #[serde(default)]
    pub seed: Option<u64>,
    /// How long a `hang` holds a connection when the rule gives no cap of its own.
    #[serde(default)]
    pub hang_cap: Option<Dur>,
    /// Request headers copied into the journal, besides the default set.
    #[serde(default)]
    pub capture_headers: Vec<String>,
    /// Response headers copied into the journal (`response_headers`), besides Retry-After,
    /// Location and Idempotent-Replayed.
    #[serde(default)]
    pub capture_response_headers: Vec<String>,
    /// The built-in orders resource.
    #[serde(default)]
    pub orders: OrdersConfig,
    /// Where the schedule's counters live: `local` (in this process, the default) or `shared`
    /// (in the orders' PostgreSQL database, so that several replicas count together).
    #[serde(default)]
    pub state: StateMode,
    /// Serve `https://`: `self-signed` (a certificate for 127.0.0.1 and localhost made at start)
    /// or `{ cert: FILE, key: FILE }` (PEM).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// What one client may cost the server: body size, time to send a head, connections.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Proxy mode: a request that no rule answers is forwarded to this real dependency and its
    /// answer relayed. `upstream: http://host:port` or a map with `url` and options.
    #[serde(default)]
    pub upstream: Option<UpstreamConfig>,
    /// gRPC: the services served beside the built-in `orders.v1.Orders`, from `.proto` files
    /// (`protos`, `import_paths`), with a canned answer per method (`responses`), and the largest
    /// message a call may carry.
    #[serde(default)]
    pub grpc: GrpcConfig,
    /// The fault schedule: rules evaluated in order, first match wins.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// TCP fault proxies: each listens and forwards every connection to an upstream (a
    /// database, a cache) through Toxiproxy's toxics; every connection is a journal entry.
    #[serde(default)]
    pub proxies: Vec<crate::tcp::ProxyConfig>,
}

impl Config {
    /// The JSON Schema of a config file (`docs/schema/fault-server.schema.json`), from these
    /// types and their doc comments.
    pub fn schema() -> schemars::Schema {
        yaml_config::json_schema::<Config>("fault-server config")
    }

    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with(path, |_| {})
    }

    /// Reads a configuration file, lets `adjust` change it (command-line overrides), then
    /// validates it.
    pub fn load_with(path: &Path, adjust: impl FnOnce(&mut Config)) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_yaml_with(&text, &path.display().to_string(), adjust)
    }

    /// Parses and validates configuration text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        Self::from_yaml_with(text, origin, |_| {})
    }

    /// Parses configuration text, lets `adjust` change it, then validates it.
    pub fn from_yaml_with(
        text: &str,
        origin: &str,
        adjust: impl FnOnce(&mut Config),
    ) -> Result<Config, ConfigError> {
        let mut cfg: Config = from_yaml_str(text, origin)?;
        adjust(&mut cfg);
        cfg.validate(origin).map_err(|e| e.located(text))?;
        Ok(cfg)
    }

    /// Forwards to `url` (proxy mode), keeping the config's other upstream options if it has an
    /// upstream already: what `--upstream URL` does.
    pub fn set_upstream(&mut self, url: UpstreamUrl) {
        match &mut self.upstream {
            Some(u) => u.url = url,
            None => self.upstream = Some(UpstreamConfig::new(url)),
        }
    }
}

impl Config {
    /// The checks serde cannot make: unique rule ids, sane windows, the limits' bounds, the pool.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        validate_rules(&self.rules, origin)?;
        crate::tcp::config::validate_proxies(&self.proxies, origin)?;
        validate_limits(&self.limits, origin)?;
        validate_grpc(&self.grpc, origin)?;
        match &self.upstream {
            None => {
                if let Some(i) = forwarding_rule(&self.rules) {
                    return Err(ConfigError::at(
                        origin,
                        format!("rules[{i}].fault"),
                        "`forward` needs an upstream: set `upstream: http://host:port` (or run with `--upstream URL`)",
                    ));
                }
            }
            Some(u) => validate_upstream(u, origin)?,
        }
        validate_orders(&self.orders, origin)?;
        for (field, names) in [
            ("capture_headers", &self.capture_headers),
            ("capture_response_headers", &self.capture_response_headers),
        ] {
            for (i, n) in names.iter().enumerate() {
                if http::HeaderName::from_bytes(n.to_ascii_lowercase().as_bytes()).is_err() {
                    return Err(ConfigError::at(
                        origin,
                        format!("{field}[{i}]"),
                        format!("{n:?} is not a header name (letters, digits and -_!#$%&'*+.^`|~)"),
                    ));
                }
            }
        }
        let on_postgres = self
            .orders
            .database
            .as_ref()
            .is_some_and(|d| d.postgres().is_some());
        if self.state == StateMode::Shared && !on_postgres {
            return Err(ConfigError::at(
                origin,
                "state",
                "`shared` keeps the schedule's counters in the orders' database, which must be PostgreSQL: set `orders: { database: \"postgres://user:password@host:port/dbname\" }`, or use `state: local`",
            ));
        }
        Ok(())
    }

    /// Multiplies every time-like setting of the schedule (windows, delays, hang caps) by `f`, so a
    /// scenario can run its experiment faster. `Retry-After` seconds are integers on the wire and
    /// stay as they are; clients scale their wait instead.
    pub fn scale_durations(&mut self, f: f64) {
        for (_, d) in self.durations() {
            *d = d.mul_f64(f);
        }
        // A gRPC pushback is a wait in milliseconds, so it scales too (a negative one is a
        // refusal, not a time).
        for r in &mut self.rules {
            let pushback = match &mut r.fault {
                FaultConfig::Grpc(g) => &mut g.pushback_ms,
                FaultConfig::GrpcAfterHeaders(g) => &mut g.pushback_ms,
                _ => continue,
            };
            if let Some(ms) = pushback.as_mut().filter(|ms| **ms > 0) {
                *ms = ((*ms as f64) * f).round().clamp(0.0, f64::from(i32::MAX)) as i64;
            }
        }
    }

    /// Every time-like setting of the schedule that [`Config::scale_durations`] scales, with its
    /// field path (`rules[2].fault.hang.cap`), so a scaled value can be held to a bound.
    pub fn durations(&mut self) -> Vec<(String, &mut Duration)> {
        let mut out = Vec::new();
        if let Some(c) = &mut self.hang_cap {
            out.push(("hang_cap".to_string(), &mut c.0));
        }
        for (i, p) in self.proxies.iter_mut().enumerate() {
            for (j, t) in p.toxics.iter_mut().enumerate() {
                let at = |f: &str| format!("proxies[{i}].toxics[{j}].match.{f}");
                if let Some(w) = &mut t.when.from {
                    out.push((at("from"), &mut w.0));
                }
                if let Some(w) = &mut t.when.until {
                    out.push((at("until"), &mut w.0));
                }
            }
            out.extend(crate::tcp::config::protocol_durations(
                i,
                &mut p.postgres,
                &mut p.redis,
            ));
        }
        for (i, r) in self.rules.iter_mut().enumerate() {
            let at = |field: &str| format!("rules[{i}].{field}");
            let m = &mut r.matcher;
            if let Some(w) = &mut m.from {
                out.push((at("match.from"), &mut w.0));
            }
            if let Some(w) = &mut m.until {
                out.push((at("match.until"), &mut w.0));
            }
            match &mut r.fault {
                FaultConfig::Delay(d) => match &mut d.spec {
                    DelaySpec::Fixed(d) => out.push((at("fault.delay"), d)),
                    DelaySpec::Uniform(a, b) => {
                        out.push((at("fault.delay"), a));
                        out.push((at("fault.delay"), b));
                    }
                    DelaySpec::Lognormal { median, .. } => {
                        out.push((at("fault.delay.median"), median));
                    }
                },
                FaultConfig::Hang(h) => {
                    if let Some(c) = &mut h.cap {
                        out.push((at("fault.hang.cap"), &mut c.0));
                    }
                }
                FaultConfig::Status(s) => {
                    if let Some(d) = &mut s.retry_after_date {
                        out.push((at("fault.status.retry_after_date"), &mut d.0));
                    }
                }
                FaultConfig::Drop
                | FaultConfig::Forward
                | FaultConfig::GoAway
                | FaultConfig::Reset(_)
                | FaultConfig::Malformed(_)
                | FaultConfig::Grpc(_)
                | FaultConfig::GrpcAfterHeaders(_) => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_names_line_column_and_path() {
        let err = Config::from_yaml(
            "rules:\n  - id: a\n    match:\n      methd: POST\n    fault: drop\n",
            "cfg.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("cfg.yaml:4:7: at `rules[0].match"), "{err}");
        assert!(err.contains("unknown field `methd`"), "{err}");
    }

    #[test]
    fn bad_values_are_rejected_with_position() {
        let cases = [
            (
                "rules:\n  - fault: { status: 700 }\n",
                "cfg:2:",
                "out of range",
            ),
            (
                "rules:\n  - match: { probability: 1.5 }\n    fault: drop\n",
                "cfg:2:",
                "probability",
            ),
            (
                "rules:\n  - match: { requests: \"5-2\" }\n    fault: drop\n",
                "cfg:2:",
                "invalid count",
            ),
            (
                "rules:\n  - fault: explode\n",
                "cfg:2:",
                "unknown variant `explode`",
            ),
            (
                "rules:\n  - fault: { delay: 3 parsecs }\n",
                "cfg:2:",
                "invalid duration",
            ),
            (
                "orders: { idempotency: maybe }\n",
                "cfg:1:",
                "unknown variant `maybe`",
            ),
            (
                "orders:\n  key_ttl: 1h\n  claim_lease: 2h\n",
                "cfg:3:16: at `orders.claim_lease`",
                "at most key_ttl (3600s",
            ),
            (
                "orders: { work_delay: 2s, claim_lease: 2s }\n",
                "cfg:1:40: at `orders.claim_lease`",
                "more than work_delay (2s",
            ),
            (
                "rules:\n  - match: { path: \"/a b\" }\n    fault: drop\n",
                "cfg:2:20: at `rules[0].match.path`",
                "would never match",
            ),
            (
                "rules:\n  - match: { path_prefix: \"/a\\tb\" }\n    fault: drop\n",
                "cfg:2:27: at `rules[0].match.path_prefix`",
                "would never match",
            ),
            (
                "rules:\n  - match: { headers: { x-a: \"1\\r\\n\" } }\n    fault: drop\n",
                "cfg:2:30: at `rules[0].match.headers.x-a`",
                "would never match",
            ),
        ];
        for (text, at, what) in cases {
            let err = Config::from_yaml(text, "cfg").unwrap_err().to_string();
            assert!(err.starts_with(at), "{text:?} → {err}");
            assert!(err.contains(what), "{text:?} → {err}");
        }
    }

    #[test]
    fn list_level_validation_names_the_field() {
        let err = Config::from_yaml(
            "rules:\n  - { id: x, fault: drop }\n  - { id: x, fault: reset }\n",
            "cfg",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "cfg:3:11: at `rules[1].id`: duplicate rule id \"x\"; ids must be unique"
        );
    }
}
