//! The fault forms both protocols share: a fault is written `drop`, `reset`, `{ error: … }`
//! (each protocol its own error) or `{ delay: … }`, and a delay waits before the forwarding or
//! after the answer.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use yaml_config::Dur;

/// A fault written `drop` or `{ error: … }`: one kind, with its value when it has one.
pub(super) enum FaultForm<E> {
    Error(E),
    Delay(Delay),
    Drop,
    Reset,
}

const FAULT_KINDS: &str = "`error`, `delay`, `drop` or `reset`";

impl<'de, E: Deserialize<'de>> Deserialize<'de> for FaultForm<E> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<E>(std::marker::PhantomData<E>);
        impl<'de, E: Deserialize<'de>> Visitor<'de> for V<E> {
            type Value = FaultForm<E>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a fault: {FAULT_KINDS}")
            }
            fn visit_str<Er: de::Error>(self, v: &str) -> Result<FaultForm<E>, Er> {
                match v {
                    "drop" => Ok(FaultForm::Drop),
                    "reset" => Ok(FaultForm::Reset),
                    "error" | "delay" => Err(Er::custom(format!(
                        "`{v}` needs its value: `{v}: …` (e.g. `error: \"40001\"`, `delay: 200ms`)"
                    ))),
                    other => Err(Er::custom(format!(
                        "unknown fault `{other}`, expected {FAULT_KINDS}"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FaultForm<E>, A::Error> {
                let Some(kind) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(format!(
                        "an empty fault: expected {FAULT_KINDS}"
                    )));
                };
                let fault = match kind.as_str() {
                    "error" => FaultForm::Error(map.next_value()?),
                    "delay" => FaultForm::Delay(map.next_value()?),
                    "drop" | "reset" => {
                        let _: de::IgnoredAny = map.next_value()?;
                        if kind == "drop" {
                            FaultForm::Drop
                        } else {
                            FaultForm::Reset
                        }
                    }
                    other => {
                        return Err(de::Error::custom(format!(
                            "unknown fault `{other}`, expected {FAULT_KINDS}"
                        )))
                    }
                };
                if let Some(more) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "a fault is one of {FAULT_KINDS}; `{kind}` and `{more}` are given"
                    )));
                }
                Ok(fault)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A delay: how long, and on which side of the forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delay {
    /// How long.
    pub duration: Duration,
    /// Before the message is forwarded, or after its answer came, before it is relayed.
    pub when: When,
}

/// Which side of the forwarding a delay waits on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// The statement or command waits, then is forwarded.
    #[default]
    Before,
    /// The database answers at once; its answer waits, then is relayed (a client that gives up
    /// first does not know what happened).
    After,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DelayMap {
    /// How long: `200ms`, `1.5s`.
    duration: Dur,
    /// `before` (default) or `after`.
    #[serde(default)]
    when: When,
}

impl JsonSchema for Delay {
    fn schema_name() -> Cow<'static, str> {
        "WireDelay".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A delay: a duration (`200ms`), or `{ duration: 200ms, when: before | after }`.",
            "anyOf": [
                generator.subschema_for::<Dur>(),
                generator.subschema_for::<DelayMap>()
            ]
        })
    }
}

impl<'de> Deserialize<'de> for Delay {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Delay;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration (\"200ms\"), or a map with `duration` and optional `when: before | after`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Delay, E> {
                let d = Dur::deserialize(de::value::StrDeserializer::<E>::new(v))?;
                Ok(Delay {
                    duration: d.0,
                    when: When::Before,
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Delay, E> {
                let d = Dur::deserialize(de::value::U64Deserializer::<E>::new(v))?;
                Ok(Delay {
                    duration: d.0,
                    when: When::Before,
                })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Delay, E> {
                let d = Dur::deserialize(de::value::F64Deserializer::<E>::new(v))?;
                Ok(Delay {
                    duration: d.0,
                    when: When::Before,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Delay, A::Error> {
                let m = DelayMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Delay {
                    duration: m.duration.0,
                    when: m.when,
                })
            }
        }
        d.deserialize_any(V)
    }
}
