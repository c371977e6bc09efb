//! Messages from `.proto` files at run time: the files compiled by `protox` (no `protoc`), a
//! method looked up by `pkg.Service/Method`, and its messages turned from JSON into protobuf and
//! back by `prost-reflect`, by the proto3 JSON mapping.
//!
//! Why at run time: a load test names a service the harness was never built against (`--proto
//! FILE --call pkg.Service/Method -d '{json}'`, as grpcurl and ghz take it), so the messages are
//! dynamic. A JSON error names the field's path (`items[2].sku`), since the JSON is typed by hand.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor};

/// A `.proto` file set that cannot be used, or a method or message that does not fit it.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// protox refused the files.
    #[error("cannot compile {files}: {message}")]
    Compile {
        /// The files as given.
        files: String,
        /// protox's message (file, line and what is wrong).
        message: String,
    },
    /// A descriptor set (from server reflection) is inconsistent.
    #[error("invalid descriptors: {0}")]
    Descriptors(String),
    /// The method name is not `pkg.Service/Method`.
    #[error("{0:?} is not a method name: expected PKG.SERVICE/METHOD (or /PKG.SERVICE/METHOD)")]
    MethodSyntax(String),
    /// No such service.
    #[error("no service {service:?} in the given .proto files; services: {known}")]
    NoService {
        /// The service asked for.
        service: String,
        /// The services there are.
        known: String,
    },
    /// The service has no such method.
    #[error("service {service} has no method {method:?}; its methods: {known}")]
    NoMethod {
        /// The service.
        service: String,
        /// The method asked for.
        method: String,
        /// Its methods.
        known: String,
    },
    /// The JSON does not fit the message.
    #[error("the JSON does not fit {message} at {path}: {reason}")]
    Json {
        /// The message type.
        message: String,
        /// Where in the JSON (`.` for the top).
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The bytes are not a protobuf encoding of the message.
    #[error("cannot decode {message}: {reason}")]
    Decode {
        /// The message type.
        message: String,
        /// Why.
        reason: String,
    },
}

/// The compiled `.proto` files: every message and service they define, imports and the
/// well-known types (`google/protobuf/*.proto`) included.
#[derive(Debug, Clone)]
pub struct Schema {
    pool: DescriptorPool,
}

impl Schema {
    /// Compiles `files` (`--proto`, repeatable) with `import_paths` (`--import-path`) as
    /// protoc's `-I`. A file outside every import path has its own directory added, so a lone
    /// `--proto dir/x.proto` works as it does with grpcurl.
    pub fn compile(
        files: &[impl AsRef<Path>],
        import_paths: &[impl AsRef<Path>],
    ) -> Result<Schema, SchemaError> {
        let mut includes: Vec<PathBuf> = import_paths
            .iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        for f in files {
            let f = f.as_ref();
            let inside = includes.iter().any(|i| f.starts_with(i))
                || (f.is_relative() && includes.iter().any(|i| i.join(f).is_file()));
            if !inside {
                let dir = match f.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                if !includes.contains(&dir) {
                    includes.push(dir);
                }
            }
        }
        let names = files
            .iter()
            .map(|f| f.as_ref().display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let failed = |e: protox::Error| SchemaError::Compile {
            files: names.clone(),
            message: e.to_string(),
        };
        if files.is_empty() {
            return Err(SchemaError::Compile {
                files: "nothing".into(),
                message: "no .proto file given".into(),
            });
        }
        let mut compiler = protox::Compiler::new(&includes).map_err(failed)?;
        compiler.include_imports(true).include_source_info(false);
        compiler.open_files(files).map_err(failed)?;
        Ok(Schema {
            pool: compiler.descriptor_pool(),
        })
    }

    /// Compiles one `.proto` file given as text, named `name` (as an import would name it); it
    /// may import the well-known types only.
    pub fn from_source(name: &str, source: &str) -> Result<Schema, SchemaError> {
        let failed = |e: protox::Error| SchemaError::Compile {
            files: name.to_string(),
            message: e.to_string(),
        };
        let file = protox::file::File::from_source(name, source).map_err(failed)?;
        let mut resolver = protox::file::ChainFileResolver::new();
        resolver.add(Single(file));
        resolver.add(protox::file::GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.include_imports(true).include_source_info(false);
        compiler.open_file(name).map_err(failed)?;
        Ok(Schema {
            pool: compiler.descriptor_pool(),
        })
    }

    /// A schema of the descriptors in `pool` (from server reflection, or built elsewhere).
    pub fn from_pool(pool: DescriptorPool) -> Schema {
        Schema { pool }
    }

    /// The descriptor pool.
    pub fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    /// Every service's full name, sorted.
    pub fn services(&self) -> Vec<String> {
        let mut s: Vec<String> = self
            .pool
            .services()
            .map(|s| s.full_name().to_string())
            .collect();
        s.sort();
        s
    }

    /// Every method of every service.
    pub fn methods(&self) -> Vec<Method> {
        self.pool
            .services()
            .flat_map(|s| s.methods().collect::<Vec<_>>())
            .map(|desc| Method { desc })
            .collect()
    }

    /// The method named `pkg.Service/Method` (a leading `/`, as in a `:path`, is accepted).
    pub fn method(&self, name: &str) -> Result<Method, SchemaError> {
        let trimmed = name.strip_prefix('/').unwrap_or(name);
        let (service, method) = trimmed
            .split_once('/')
            .filter(|(s, m)| !s.is_empty() && !m.is_empty() && !m.contains('/'))
            .ok_or_else(|| SchemaError::MethodSyntax(name.to_string()))?;
        let Some(svc) = self.pool.get_service_by_name(service) else {
            let known = self.services();
            return Err(SchemaError::NoService {
                service: service.to_string(),
                known: list_or_none(&known),
            });
        };
        let Some(m) = svc.methods().find(|m| m.name() == method) else {
            let known: Vec<String> = svc.methods().map(|m| m.name().to_string()).collect();
            return Err(SchemaError::NoMethod {
                service: service.to_string(),
                method: method.to_string(),
                known: list_or_none(&known),
            });
        };
        Ok(Method { desc: m })
    }

    /// The message type named `name` (`pkg.Message`), if there is one.
    pub fn message(&self, name: &str) -> Option<MessageDescriptor> {
        self.pool.get_message_by_name(name)
    }
}

/// A resolver that knows one file, given as text.
struct Single(protox::file::File);

impl protox::file::FileResolver for Single {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if name == self.0.name() {
            Ok(self.0.clone())
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

/// One method of a service: its path and its message types.
#[derive(Debug, Clone)]
pub struct Method {
    desc: MethodDescriptor,
}

impl Method {
    /// The HTTP/2 `:path`: `/pkg.Service/Method`.
    pub fn path(&self) -> String {
        format!(
            "/{}/{}",
            self.desc.parent_service().full_name(),
            self.desc.name()
        )
    }

    /// The request's message type.
    pub fn input(&self) -> MessageDescriptor {
        self.desc.input()
    }

    /// The response's message type.
    pub fn output(&self) -> MessageDescriptor {
        self.desc.output()
    }

    /// Neither side streams.
    pub fn is_unary(&self) -> bool {
        !self.desc.is_client_streaming() && !self.desc.is_server_streaming()
    }

    /// The descriptor itself.
    pub fn descriptor(&self) -> &MethodDescriptor {
        &self.desc
    }

    /// The request `json` (proto3 JSON mapping) encoded as protobuf.
    pub fn encode_request(&self, json: &str) -> Result<Bytes, SchemaError> {
        json_to_protobuf(&self.input(), json)
    }

    /// A response's protobuf bytes as proto3 JSON.
    pub fn decode_response(&self, bytes: &[u8]) -> Result<String, SchemaError> {
        protobuf_to_json(&self.output(), bytes)
    }
}

/// `json` as the message `desc`, encoded as protobuf. Unknown fields are refused, as a typo in
/// a hand-written request should be.
pub fn json_to_protobuf(desc: &MessageDescriptor, json: &str) -> Result<Bytes, SchemaError> {
    let mut de = serde_json::Deserializer::from_str(json);
    let mut track = serde_path_to_error::Track::new();
    let parsed = DynamicMessage::deserialize(
        desc.clone(),
        serde_path_to_error::Deserializer::new(&mut de, &mut track),
    )
    .and_then(|m| de.end().map(|()| m));
    match parsed {
        Ok(m) => Ok(Bytes::from(m.encode_to_vec())),
        Err(e) => Err(SchemaError::Json {
            message: desc.full_name().to_string(),
            path: track.path().to_string(),
            reason: e.to_string(),
        }),
    }
}

/// The protobuf `bytes` of the message `desc` as proto3 JSON (field names in lowerCamelCase,
/// 64-bit integers as strings, enums by name, default values left out).
pub fn protobuf_to_json(desc: &MessageDescriptor, bytes: &[u8]) -> Result<String, SchemaError> {
    let m = DynamicMessage::decode(desc.clone(), bytes).map_err(|e| SchemaError::Decode {
        message: desc.full_name().to_string(),
        reason: e.to_string(),
    })?;
    serde_json::to_string(&m).map_err(|e| SchemaError::Decode {
        message: desc.full_name().to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    const SHOP: &str = r#"
  syntax = "proto3";
  package shop.v1;
  import "google/protobuf/timestamp.proto";
  import "google/protobuf/duration.proto";
  import "common/money.proto";
  service Shop {
    rpc Buy(BuyRequest) returns (BuyReply);
    rpc Watch(BuyRequest) returns (stream BuyReply);
  }
  message Item { string sku = 1; int32 qty = 2; }
  message BuyRequest {
    repeated Item items = 1;
    common.Money total = 2;
    google.protobuf.Timestamp at = 3;
    google.protobuf.Duration within = 4;
    int64 big = 5;
    Kind kind = 6;
    bytes blob = 7;
    map<string, string> tags = 8;
  }
  enum Kind { KIND_UNSPECIFIED = 0; KIND_GIFT = 1; }
  message BuyReply { string order_id = 1; int64 cents = 2; }
"#;
    const MONEY: &str = r#"
  syntax = "proto3";
  package common;
  message Money { string currency = 1; int64 units = 2; }
"#;

    fn shop() -> (tempfile::TempDir, Schema) {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "shop/v1/shop.proto", SHOP);
        write(dir.path(), "common/money.proto", MONEY);
        let schema = Schema::compile(&[file], &[dir.path()]).unwrap();
        (dir, schema)
    }

    #[test]
    fn compiles_with_imports_and_well_known_types_and_finds_methods() {
        let (_dir, schema) = shop();
        assert_eq!(schema.services(), ["shop.v1.Shop"]);
        let m = schema.method("shop.v1.Shop/Buy").unwrap();
        assert_eq!(m.path(), "/shop.v1.Shop/Buy");
        assert_eq!(m.input().full_name(), "shop.v1.BuyRequest");
        assert_eq!(m.output().full_name(), "shop.v1.BuyReply");
        assert!(m.is_unary());
        assert!(!schema.method("/shop.v1.Shop/Watch").unwrap().is_unary());
        assert!(schema.message("google.protobuf.Timestamp").is_some());
    }

    #[test]
    fn an_unknown_service_or_method_names_what_exists() {
        let (_dir, schema) = shop();
        let e = schema.method("shop.v1.Shops/Buy").unwrap_err().to_string();
        assert!(
            e.contains("no service \"shop.v1.Shops\"") && e.contains("services: shop.v1.Shop"),
            "{e}"
        );
        let e = schema.method("shop.v1.Shop/Sell").unwrap_err().to_string();
        assert!(
            e.contains("no method \"Sell\"") && e.contains("its methods: Buy, Watch"),
            "{e}"
        );
        for bad in ["shop.v1.Shop", "/Buy", "shop.v1.Shop/", "a/b/c", ""] {
            let e = schema.method(bad).unwrap_err();
            assert!(matches!(e, SchemaError::MethodSyntax(_)), "{bad}: {e}");
        }
    }

    #[test]
    fn json_round_trips_through_protobuf_by_the_proto3_mapping() {
        let (_dir, schema) = shop();
        let m = schema.method("shop.v1.Shop/Buy").unwrap();
        let json = r#"{"items":[{"sku":"A-1","qty":2}],"total":{"currency":"EUR","units":"1999"},
            "at":"2024-01-02T03:04:05Z","within":"1.500s","big":"9007199254740993",
            "kind":"KIND_GIFT","blob":"AAEC","tags":{"a":"b"}}"#;
        let bytes = m.encode_request(json).unwrap();
        let back = protobuf_to_json(&m.input(), &bytes).unwrap();
        let v: serde_json::Value = serde_json::from_str(&back).unwrap();
        assert_eq!(v["items"][0]["sku"], "A-1");
        assert_eq!(v["total"]["units"], "1999", "64-bit integers as strings");
        assert_eq!(v["big"], "9007199254740993", "no precision lost");
        assert_eq!(v["at"], "2024-01-02T03:04:05Z");
        assert_eq!(v["within"], "1.500s");
        assert_eq!(v["kind"], "KIND_GIFT");
        assert_eq!(v["blob"], "AAEC");
        assert_eq!(v["tags"]["a"], "b");
        // proto field names are accepted too; the output uses lowerCamelCase.
        let reply = m.output();
        let b = json_to_protobuf(&reply, r#"{"order_id":"o1","cents":5}"#).unwrap();
        assert_eq!(
            m.decode_response(&b).unwrap(),
            r#"{"orderId":"o1","cents":"5"}"#
        );
        // The exact protobuf bytes: field 1 (len 2, "o1"), field 2 varint 5.
        assert_eq!(&b[..], b"\x0a\x02o1\x10\x05");
    }

    #[test]
    fn bad_json_is_refused_with_the_field_path() {
        let (_dir, schema) = shop();
        let m = schema.method("shop.v1.Shop/Buy").unwrap();
        let cases = [
            (r#"{"items":[{"sku":"a"},{"qty":"many"}]}"#, "items[1].qty"),
            (r#"{"total":{"units":1.5}}"#, "total.units"),
            (r#"{"kind":"KIND_NONE"}"#, "kind"),
            (r#"{"total":{"currency":"EUR","unit":"1"}}"#, "total"),
            (r#"{"at":"yesterday"}"#, "at"),
        ];
        for (json, path) in cases {
            let e = m.encode_request(json).unwrap_err();
            let SchemaError::Json { path: p, .. } = &e else {
                panic!("{json}: {e}");
            };
            assert_eq!(p, path, "{json}: {e}");
            assert!(e.to_string().contains("shop.v1.BuyRequest"), "{e}");
        }
        // An unknown field is named in the reason; the path is the object that has it.
        let e = m.encode_request(r#"{"itemz":[]}"#).unwrap_err().to_string();
        assert!(e.contains("'itemz'"), "{e}");
        for bad in ["", "{", "[]", r#"{"items":[]} trailing"#] {
            assert!(m.encode_request(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_bytes_are_refused() {
        let (_dir, schema) = shop();
        let m = schema.method("shop.v1.Shop/Buy").unwrap();
        let e = m.decode_response(b"\x0a\x09o1").unwrap_err().to_string();
        assert!(e.contains("cannot decode shop.v1.BuyReply"), "{e}");
    }

    #[test]
    fn a_lone_file_resolves_its_directory_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let money = write(dir.path(), "money.proto", MONEY);
        let none: [&Path; 0] = [];
        let schema = Schema::compile(&[&money], &none).unwrap();
        assert!(schema.message("common.Money").is_some());
        let broken = write(
            dir.path(),
            "broken.proto",
            "syntax = \"proto3\";\nmessage { }\n",
        );
        let e = Schema::compile(&[&broken], &none).unwrap_err().to_string();
        assert!(e.contains("broken.proto"), "{e}");
        let missing = dir.path().join("missing.proto");
        assert!(Schema::compile(&[&missing], &none).is_err());
        let imports = write(
            dir.path(),
            "imp.proto",
            "syntax = \"proto3\";\nimport \"nope.proto\";\n",
        );
        let e = Schema::compile(&[&imports], &none).unwrap_err().to_string();
        assert!(e.contains("nope.proto"), "{e}");
        let empty: [&Path; 0] = [];
        assert!(Schema::compile(&empty, &none).is_err());
    }
}
