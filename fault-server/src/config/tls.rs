//! `tls:` — where the server's certificate comes from: `self-signed`, or PEM files.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsConfig {
    /// Made at start for 127.0.0.1, ::1 and localhost.
    SelfSigned,
    /// PEM files.
    Files {
        /// The certificate (chain).
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
    },
}

/// `tls: { cert, key }`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TlsFiles {
    /// The certificate (chain), PEM.
    cert: PathBuf,
    /// Its private key, PEM.
    key: PathBuf,
}

impl JsonSchema for TlsConfig {
    fn schema_name() -> Cow<'static, str> {
        "TlsConfig".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Serve https://: `self-signed` (a certificate for 127.0.0.1 and localhost made at start) or `{ cert: FILE, key: FILE }` (PEM).",
            "anyOf": [
                { "type": "string", "enum": ["self-signed"] },
                generator.subschema_for::<TlsFiles>()
            ]
        })
    }
}

impl<'de> Deserialize<'de> for TlsConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TlsConfig;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`self-signed` or `{ cert: FILE, key: FILE }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TlsConfig, E> {
                match v {
                    "self-signed" => Ok(TlsConfig::SelfSigned),
                    other => Err(E::custom(format!(
                        "unknown TLS setting {other:?}: use `self-signed` or `{{ cert: FILE, key: FILE }}`"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TlsConfig, A::Error> {
                let f = TlsFiles::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(TlsConfig::Files {
                    cert: f.cert,
                    key: f.key,
                })
            }
        }
        d.deserialize_any(V)
    }
}
