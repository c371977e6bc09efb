//! gRPC in a scenario — the YAML and its resolution: the `.proto` files the client encodes with
//! (`grpc: { protos, import_paths }`; the built-in `orders.v1.Orders` without them), a phase's
//! call (`request: { grpc: pkg.Service/Method, message: {…}, metadata: {…} }`), and the client's
//! gRFC A6 policy (`client: { grpc_service_config: FILE }`, or the same `retryPolicy`,
//! `hedgingPolicy` and `retryThrottling` in YAML, and `grpc_conduct` for a broken client).
//!
//! Why the call is a request template like any other: its metadata and its message (as JSON,
//! by the proto3 JSON mapping) take the same placeholders as an HTTP request, so a burst shares
//! its round's `{{key}}` through metadata `idempotency-key` exactly as it does through a header.
//! The message is encoded when each attempt is rendered; here it is encoded once with sample
//! values, so that a field the message does not have is refused when the file is loaded.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use grpc::service_config::{MethodConfigFile, NameFile, ServiceConfigFile};
use grpc::{Schema, ServiceConfig};
use http::{HeaderName, Method};
use retry_policy::grpc::{GrpcPolicy, Strategy};
use serde::Deserialize;
use yaml_config::ConfigError;

use super::{invalid, PolicyFile, RequestFile, Scale};
use crate::plan::GrpcPlan;
use crate::template::{RequestTemplate, Text, Vars};

/// The `.proto` files a scenario's gRPC calls are encoded with.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcFile {
    /// `.proto` files (relative to the scenario); `orders.v1.Orders` is built in besides.
    #[serde(default)]
    pub protos: Vec<PathBuf>,
    /// Where their imports are found (protoc's `-I`), relative to the scenario.
    #[serde(default)]
    pub import_paths: Vec<PathBuf>,
}

/// The schemas a scenario's calls are looked up in: its own files first, then the built-in
/// orders service.
pub(crate) struct Schemas {
    own: Option<Schema>,
    builtin: Option<Schema>,
}

impl Schemas {
    /// Compiles the scenario's `.proto` files (paths relative to `dir`).
    pub(crate) fn load(
        f: Option<&GrpcFile>,
        dir: &Path,
        origin: &str,
    ) -> Result<Schemas, ConfigError> {
        let own = match f {
            Some(g) if !g.protos.is_empty() => {
                let files: Vec<PathBuf> = g.protos.iter().map(|p| dir.join(p)).collect();
                let imports: Vec<PathBuf> = g.import_paths.iter().map(|p| dir.join(p)).collect();
                Some(
                    Schema::compile(&files, &imports)
                        .map_err(|e| invalid(origin, "grpc.protos", e.to_string()))?,
                )
            }
            Some(g) if !g.import_paths.is_empty() => {
                return Err(invalid(
                    origin,
                    "grpc.protos",
                    "import paths without a .proto file: name the files in `protos`",
                ))
            }
            _ => None,
        };
        Ok(Schemas { own, builtin: None })
    }

    /// A schema a target's server reflection gave, in place of files.
    pub(crate) fn reflected(schema: Schema) -> Schemas {
        Schemas {
            own: Some(schema),
            builtin: None,
        }
    }

    /// `pkg.Service/Method`, from the scenario's files or the built-in orders service.
    pub(crate) fn method(&mut self, name: &str) -> Result<grpc::Method, String> {
        let own_error = match &self.own {
            Some(s) => match s.method(name) {
                Ok(m) => return Ok(m),
                Err(e) => Some(e.to_string()),
            },
            None => None,
        };
        if self.builtin.is_none() {
            self.builtin = Some(grpc::orders::schema().map_err(|e| e.to_string())?);
        }
        let builtin = self.builtin.as_ref().ok_or("no schema")?;
        builtin.method(name).map_err(|e| match own_error {
            Some(own) => own,
            None => {
                format!("{e}; name the .proto file that defines it in `grpc: {{ protos: [FILE] }}`")
            }
        })
    }
}

/// Compiles a phase's gRPC call: the template (`POST /pkg.Service/Method`, the metadata as
/// headers, the message as its JSON text) and the method it is encoded for.
pub(super) fn compile_call(
    r: &RequestFile,
    name: &str,
    schemas: &mut Schemas,
    origin: &str,
    at: &str,
) -> Result<(RequestTemplate, grpc::Method), ConfigError> {
    if r.method.is_some()
        || !r.path.is_empty()
        || r.json.is_some()
        || r.body.is_some()
        || !r.headers.is_empty()
    {
        return Err(invalid(
            origin,
            at,
            "a gRPC call has `grpc`, `message` and `metadata`; `method`, `path`, `headers`, `json` and `body` are for HTTP",
        ));
    }
    let method = schemas
        .method(name)
        .map_err(|e| invalid(origin, format!("{at}.grpc"), e))?;
    if !method.is_unary() {
        return Err(invalid(
            origin,
            format!("{at}.grpc"),
            format!("{name} streams; the load calls unary methods only"),
        ));
    }
    let json = r
        .message
        .clone()
        .unwrap_or_else(|| serde_json::Value::Object(Default::default()))
        .to_string();
    let message = Text::parse(&json).map_err(|e| invalid(origin, format!("{at}.message"), e))?;
    let sample = sample(&message);
    method
        .encode_request(&sample)
        .map_err(|e| invalid(origin, format!("{at}.message"), e.to_string()))?;
    let mut headers = Vec::new();
    for (k, v) in &r.metadata {
        let name = HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes())
            .ok()
            .filter(|n| !n.as_str().starts_with("grpc-") && !n.as_str().starts_with(':'))
            .ok_or_else(|| {
                invalid(
                    origin,
                    format!("{at}.metadata"),
                    format!("{k:?} is not a metadata key a client may send (grpc-* is reserved)"),
                )
            })?;
        if let Some(c) = v.chars().find(|c| c.is_control() || !c.is_ascii()) {
            return Err(invalid(
                origin,
                format!("{at}.metadata.{k}"),
                format!("the value holds {c:?}; ASCII metadata is printable (binary goes base64 under a -bin key)"),
            ));
        }
        let value = Text::parse(v).map_err(|e| invalid(origin, format!("{at}.metadata.{k}"), e))?;
        headers.push((name, value));
    }
    let template = RequestTemplate {
        method: Method::POST,
        path: Text::parse(&method.path()).map_err(|e| invalid(origin, format!("{at}.grpc"), e))?,
        headers,
        body: Some((message, false)),
    };
    Ok((template, method))
}

/// The message rendered with sample values, to be encoded once when the file is loaded.
pub(crate) fn sample(message: &Text) -> String {
    let captured = std::collections::HashMap::new();
    let vars = Vars {
        seq: 1,
        client: 0,
        uuid: "00000000-0000-4000-a000-000000000000",
        key: "00000000-0000-0000-0000-000000000000",
        round: 1,
        captured: Some(&captured),
    };
    message.render(&vars)
}

/// Resolves the client's A6 policy for `method`: the service config (from its file, or from the
/// YAML fields, not both) validated by the `grpc` crate, its durations scaled; the call's
/// deadline from the method's `timeout`, else `client.total_timeout`.
pub(super) fn resolve_policy(
    p: &PolicyFile,
    method: &grpc::Method,
    dir: &Path,
    scaling: Scale<'_>,
    at: &str,
) -> Result<GrpcPlan, ConfigError> {
    let origin = scaling.origin;
    let g = p;
    let inline =
        g.retry_policy.is_some() || g.hedging_policy.is_some() || g.retry_throttling.is_some();
    let config = match (&g.grpc_service_config, inline) {
        (Some(_), true) => {
            return Err(invalid(
                origin,
                format!("{at}.grpc_service_config"),
                "give a service config file or `retryPolicy`/`hedgingPolicy`/`retryThrottling`, not both",
            ))
        }
        (Some(file), false) => {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                path: path.display().to_string(),
                source,
            })?;
            ServiceConfig::from_json(&text).map_err(|e| {
                invalid(origin, format!("{at}.grpc_service_config"), format!("{}: {e}", path.display()))
            })?
        }
        (None, _) => ServiceConfigFile {
            method_config: vec![MethodConfigFile {
                name: vec![NameFile::default()],
                retry_policy: g.retry_policy.clone(),
                hedging_policy: g.hedging_policy.clone(),
                timeout: None,
            }],
            retry_throttling: g.retry_throttling.clone(),
        }
        .resolve()
        .map_err(|e| {
            // The fields were written under `client:`, not in a methodConfig entry.
            let field = e.path.strip_prefix("methodConfig[0].").unwrap_or(&e.path);
            invalid(origin, format!("{at}.{field}"), e.message)
        })?,
    };
    let mc = config.for_path(&method.path());
    let strategy = match mc.strategy {
        Strategy::Single => Strategy::Single,
        Strategy::Retry(mut r) => {
            r.initial_backoff = scaling.of(r.initial_backoff);
            r.max_backoff = scaling.of(r.max_backoff);
            Strategy::Retry(r)
        }
        Strategy::Hedging(mut h) => {
            h.hedging_delay = scaling.of(h.hedging_delay);
            Strategy::Hedging(h)
        }
    };
    let deadline = match (mc.timeout, p.total_timeout) {
        (Some(t), _) => Some(scaling.of(t)),
        (None, Some(t)) => Some(scaling.of(t.0)),
        (None, None) => None,
    };
    if deadline.is_some_and(|d| d.is_zero() || d > super::bounds::DURATION) {
        return Err(invalid(
            origin,
            format!("{at}.total_timeout"),
            "a call's deadline is more than 0 and at most 366 days",
        ));
    }
    Ok(GrpcPlan {
        method: method.clone(),
        policy: GrpcPolicy {
            strategy,
            conduct: g.grpc_conduct.unwrap_or_default(),
        },
        throttle: config.throttling,
        deadline,
    })
}

/// The policy of `harness load grpc://…`: one attempt per call, `--deadline` as its deadline.
pub fn single_call(method: grpc::Method, deadline: Option<Duration>) -> GrpcPlan {
    GrpcPlan {
        method,
        policy: GrpcPolicy::default(),
        throttle: None,
        deadline,
    }
}

/// A phase's gRPC call with its policy, for [`crate::plan::PhasePlan::grpc`].
pub(super) fn plan(
    policy: &PolicyFile,
    method: grpc::Method,
    dir: &Path,
    scaling: Scale<'_>,
    at: &str,
) -> Result<Arc<GrpcPlan>, ConfigError> {
    resolve_policy(policy, &method, dir, scaling, at).map(Arc::new)
}
