//! `grpc:` — the gRPC services served beside the built-in `orders.v1.Orders`: `.proto` files
//! compiled at start, a canned answer per method, the largest message; checked by building them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use yaml_config::{ConfigError, Size};

/// The gRPC services a fault server serves besides the built-in `orders.v1.Orders` (which is
/// always served, on the orders store).
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcConfig {
    /// `.proto` files whose services are served (compiled at start, no protoc needed).
    pub protos: Vec<PathBuf>,
    /// Directories imports are looked up in (protoc's `-I`); a proto's own directory is added
    /// when it lies outside all of them.
    pub import_paths: Vec<PathBuf>,
    /// A canned answer per method, `pkg.Service/Method: { …proto3 JSON… }`; a method without one
    /// answers its response type's default message (every field at its default). A canned
    /// answer for a built-in method (`orders.v1.Orders/GetOrder`) replaces the store's.
    pub responses: BTreeMap<String, serde_json::Value>,
    /// Largest message a call may send or be sent (gRPC's default 4 MiB); a larger request
    /// message is answered RESOURCE_EXHAUSTED, as gRPC servers do.
    pub max_message: Size,
}

impl GrpcConfig {
    /// The services this section describes, built: the `.proto` files compiled, the canned
    /// answers encoded.
    pub fn services(&self) -> Result<crate::grpc::Services, crate::grpc::ServicesError> {
        crate::grpc::Services::new(
            &self.protos,
            &self.import_paths,
            &self.responses,
            self.max_message.0,
        )
    }
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            protos: Vec::new(),
            import_paths: Vec::new(),
            responses: BTreeMap::new(),
            max_message: Size(4 << 20),
        }
    }
}

/// The gRPC services can be built: the `.proto` files compile, every canned answer names one of
/// their methods and fits its response type; the message limit is in its bounds.
pub fn validate_grpc(g: &GrpcConfig, origin: &str) -> Result<(), ConfigError> {
    if g.max_message.0 < 1024 || g.max_message.0 > (1 << 30) {
        return Err(ConfigError::at(
            origin,
            "grpc.max_message",
            format!("{} bytes; give 1KiB to 1GiB", g.max_message.0),
        ));
    }
    match g.services() {
        Ok(_) => Ok(()),
        Err(crate::grpc::ServicesError::Schema(e)) => {
            Err(ConfigError::at(origin, "grpc.protos", e.to_string()))
        }
        Err(crate::grpc::ServicesError::Response { method, message }) => Err(ConfigError::at(
            origin,
            format!("grpc.responses.{method}"),
            message,
        )),
        Err(e @ crate::grpc::ServicesError::NoProtos(_)) => {
            Err(ConfigError::at(origin, "grpc.responses", e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::*;

    #[test]
    fn grpc_faults_matchers_and_services_are_read_and_checked_where_they_are() {
        let cfg = Config::from_yaml(
            r#"
grpc: { max_message: 64KiB }
rules:
  - { match: { grpc_method: /orders.v1.Orders/CreateOrder, grpc_attempts: "1-2" }, fault: { grpc: UNAVAILABLE } }
  - fault: { grpc: { code: 8, message: slow down, pushback_ms: -1 } }
  - fault: { grpc_after_headers: { code: internal, process: true } }
  - fault: { reset: { code: refused_stream } }
"#,
            "cfg",
        )
        .unwrap();
        assert_eq!(cfg.grpc.max_message, Size(64 << 10));
        let m = &cfg.rules[0].matcher;
        assert_eq!(
            m.grpc_method,
            Some(GrpcMethodPattern("orders.v1.Orders/CreateOrder".into()))
        );
        assert!(m
            .grpc_attempts
            .as_ref()
            .is_some_and(|c| c.contains(2) && !c.contains(3)));
        assert_eq!(
            cfg.rules[0].fault,
            FaultConfig::Grpc(history::GrpcCode::Unavailable.into())
        );
        assert_eq!(
            cfg.rules[1].fault,
            FaultConfig::Grpc(GrpcFault {
                code: history::GrpcCode::ResourceExhausted,
                message: Some("slow down".into()),
                pushback_ms: Some(-1),
            })
        );
        assert_eq!(cfg.rules[2].fault.kind(), "grpc_after_headers");
        assert!(matches!(
            &cfg.rules[2].fault,
            FaultConfig::GrpcAfterHeaders(g) if g.process && g.code == history::GrpcCode::Internal
        ));
        assert!(matches!(
            &cfg.rules[3].fault,
            FaultConfig::Reset(r) if r.code == Some(H2ErrorCode::RefusedStream)
        ));

        let cases = [
            (
                "rules:\n  - fault: { grpc: UNAVAILABLY }\n",
                "cfg:2:",
                "not a gRPC status code",
            ),
            (
                "rules:\n  - fault: { grpc: 17 }\n",
                "cfg:2:",
                "not a gRPC status code",
            ),
            ("rules:\n  - fault: grpc\n", "cfg:2:", "needs options"),
            (
                "rules:\n  - fault: { grpc: { code: 14, pushback_ms: 3000000000 } }\n",
                "cfg:2:",
                "signed 32-bit",
            ),
            (
                "rules:\n  - fault: { grpc: { code: 14, retry: 1 } }\n",
                "cfg:2:",
                "unknown field `retry`",
            ),
            (
                "rules:\n  - match: { grpc_method: Orders }\n    fault: drop\n",
                "cfg:2:",
                "pkg.Service/Method",
            ),
            (
                "rules:\n  - match: { grpc_attempts: 0 }\n    fault: drop\n",
                "cfg:2:",
                "invalid count",
            ),
            (
                "rules:\n  - fault: { reset: { code: nope } }\n",
                "cfg:2:",
                "unknown variant `nope`",
            ),
            (
                "grpc: { max_message: 10 }\n",
                "cfg:1:22: at `grpc.max_message`",
                "1KiB to 1GiB",
            ),
            (
                "grpc: { protos: [/nonexistent/x.proto] }\n",
                "cfg:1:",
                "x.proto",
            ),
            (
                "grpc: { responses: { a.B/C: {} } }\n",
                "cfg:1:",
                "not a built-in method, and no .proto file is given",
            ),
        ];
        for (text, at, what) in cases {
            let err = Config::from_yaml(text, "cfg").unwrap_err().to_string();
            assert!(err.starts_with(at), "{text:?} → {err}");
            assert!(err.contains(what), "{text:?} → {err}");
        }
        assert_eq!(
            UpstreamUrl::parse("grpcs://h:9").map(|u| (u.tls, u.http2, u.to_string())),
            Ok((true, true, "grpcs://h:9".to_string()))
        );
        assert!(UpstreamUrl::parse("grpc://h:9").is_ok_and(|u| u.http2 && !u.tls));
    }

    #[test]
    fn canned_answers_must_fit_a_method_of_the_protos() {
        let dir = tempfile::tempdir().unwrap();
        let proto = dir.path().join("s.proto");
        std::fs::write(
            &proto,
            "syntax = \"proto3\";\npackage s.v1;\nservice S { rpc Get(R) returns (R); }\nmessage R { int32 n = 1; }\n",
        )
        .unwrap();
        let text = |responses: &str| {
            format!(
                "grpc:\n  protos: [{}]\n  responses:\n{responses}",
                proto.display()
            )
        };
        assert!(Config::from_yaml(&text("    s.v1.S/Get: { n: 3 }\n"), "cfg").is_ok());
        for (responses, at, what) in [
            (
                "    s.v1.S/Put: {}\n",
                "grpc.responses.s.v1.S/Put",
                "no method \"Put\"",
            ),
            (
                "    s.v1.S/Get: { n: x }\n",
                "grpc.responses.s.v1.S/Get",
                "n",
            ),
            (
                "    s.v1.S/Get: { m: 1 }\n",
                "grpc.responses.s.v1.S/Get",
                "m",
            ),
        ] {
            let err = Config::from_yaml(&text(responses), "cfg")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(at) && err.contains(what),
                "{responses:?} → {err}"
            );
        }
        // Scaling a scenario's time scales a pushback, and leaves a refusal alone.
        let mut cfg = Config::from_yaml(
            "rules:\n  - fault: { grpc: { code: 14, pushback_ms: 1000 } }\n  - fault: { grpc: { code: 14, pushback_ms: -1 } }\n",
            "cfg",
        )
        .unwrap();
        cfg.scale_durations(0.05);
        let pushbacks: Vec<_> = cfg
            .rules
            .iter()
            .map(|r| match &r.fault {
                FaultConfig::Grpc(g) => g.pushback_ms,
                _ => None,
            })
            .collect();
        assert_eq!(pushbacks, [Some(50), Some(-1)]);
    }
}
