//! Toxics: what a proxy does to the bytes of one direction of a connection.
//!
//! As in Toxiproxy, a toxic is one small transformer in a chain per direction (`upstream`: client
//! to upstream; `downstream`: upstream to client), with its own attributes. Unlike Toxiproxy's
//! goroutine per toxic passing chunks through channels and sleeping, a toxic here is a pure
//! function of its input in *virtual time*: a piece of data carries the moment it is due to be
//! written, and a toxic only moves that moment (`latency` adds its delay, `bandwidth` spaces the
//! pieces by their size, `slicer` splits a piece and spaces the slices), holds data back, drops
//! it, or ends the stream. The connection's pipe reads, pushes each piece through the chain once,
//! and writes what is due when it is due. So the chain costs nothing while no toxic is active, a
//! toxic can be tested without a socket or a clock, and N toxics cost no N tasks.
//!
//! What flows: [`Item::Data`] and [`Item::End`] (the source's FIN, or a toxic's cut), each with
//! its due time; an end flows like data, so what comes before it is written first. A toxic may
//! also act on its own at a time ([`Running::deadline`]: `timeout` closes, `reset_peer` resets,
//! `close_after` cuts), or freeze its direction (`blackhole`: nothing is read or written, nothing
//! is closed).
//!
//! Random choices (`latency`'s jitter, `slicer`'s size variation) are seeded draws of the seed,
//! the proxy and toxic, the connection's number and the piece's number ([`crate::draw`]): the
//! same connection gets the same fate in every run with the same seed.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Map, Value};

pub mod bandwidth;
pub mod blackhole;
pub mod close_after;
pub mod latency;
pub mod limit_data;
pub mod reset_peer;
pub mod slicer;
pub mod slow_close;
pub mod timeout;

/// The toxic types, as the API and the config name them.
pub const TYPES: &[&str] = &[
    "latency",
    "bandwidth",
    "slow_close",
    "timeout",
    "reset_peer",
    "slicer",
    "limit_data",
    "blackhole",
    "close_after",
];

/// The longest time an attribute may give: one day, in milliseconds.
pub const MAX_MS: u64 = 86_400_000;

/// A toxic's type and its attributes, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToxicKind {
    /// Delay every piece by `latency` ± `jitter` ms.
    Latency(latency::Latency),
    /// At most `rate` KB/s.
    Bandwidth(bandwidth::Bandwidth),
    /// Delay the close by `delay` ms.
    SlowClose(slow_close::SlowClose),
    /// Let nothing through; close after `timeout` ms (never when 0).
    Timeout(timeout::Timeout),
    /// Reset the connection `timeout` ms after data arrives.
    ResetPeer(reset_peer::ResetPeer),
    /// Cut pieces into slices of about `average_size` bytes, `delay` µs apart.
    Slicer(slicer::Slicer),
    /// Close after `bytes` bytes.
    LimitData(limit_data::LimitData),
    /// The cable pulled: nothing passes, nothing closes.
    Blackhole,
    /// Cut the connection after `time` ms or `bytes` bytes.
    CloseAfter(close_after::CloseAfter),
}

/// A toxic that could not be made: its type is unknown, or an attribute is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrError {
    /// The attribute at fault; `None` when the type is.
    pub attribute: Option<String>,
    /// What was wrong and what is expected.
    pub message: String,
}

impl AttrError {
    /// The type is not one of [`TYPES`].
    pub fn is_unknown_type(&self) -> bool {
        self.attribute.is_none()
    }
}

impl std::fmt::Display for AttrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.attribute {
            Some(a) => write!(f, "attribute `{a}`: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl ToxicKind {
    /// The toxic of type `kind` with these attributes (absent ones are 0, as in Toxiproxy; an
    /// unknown one is an error: a typo must not silently leave a toxic without effect).
    pub fn parse(kind: &str, attributes: &Map<String, Value>) -> Result<ToxicKind, AttrError> {
        let mut a = Attrs::new(attributes);
        let t = match kind {
            "latency" => ToxicKind::Latency(latency::Latency::parse(&mut a)?),
            "bandwidth" => ToxicKind::Bandwidth(bandwidth::Bandwidth::parse(&mut a)?),
            "slow_close" => ToxicKind::SlowClose(slow_close::SlowClose::parse(&mut a)?),
            "timeout" => ToxicKind::Timeout(timeout::Timeout::parse(&mut a)?),
            "reset_peer" => ToxicKind::ResetPeer(reset_peer::ResetPeer::parse(&mut a)?),
            "slicer" => ToxicKind::Slicer(slicer::Slicer::parse(&mut a)?),
            "limit_data" => ToxicKind::LimitData(limit_data::LimitData::parse(&mut a)?),
            "blackhole" => ToxicKind::Blackhole,
            "close_after" => ToxicKind::CloseAfter(close_after::CloseAfter::parse(&mut a)?),
            other => {
                return Err(AttrError {
                    attribute: None,
                    message: format!(
                        "unknown toxic type {other:?}; the types are {}",
                        TYPES.join(", ")
                    ),
                })
            }
        };
        a.finish(kind)?;
        Ok(t)
    }

    /// The type's name.
    pub fn type_name(&self) -> &'static str {
        match self {
            ToxicKind::Latency(_) => "latency",
            ToxicKind::Bandwidth(_) => "bandwidth",
            ToxicKind::SlowClose(_) => "slow_close",
            ToxicKind::Timeout(_) => "timeout",
            ToxicKind::ResetPeer(_) => "reset_peer",
            ToxicKind::Slicer(_) => "slicer",
            ToxicKind::LimitData(_) => "limit_data",
            ToxicKind::Blackhole => "blackhole",
            ToxicKind::CloseAfter(_) => "close_after",
        }
    }

    /// The attributes, every one written (as Toxiproxy's API shows them).
    pub fn attributes(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        match self {
            ToxicKind::Latency(t) => {
                put("latency", t.latency.into());
                put("jitter", t.jitter.into());
            }
            ToxicKind::Bandwidth(t) => put("rate", t.rate.into()),
            ToxicKind::SlowClose(t) => put("delay", t.delay.into()),
            ToxicKind::Timeout(t) => put("timeout", t.timeout.into()),
            ToxicKind::ResetPeer(t) => put("timeout", t.timeout.into()),
            ToxicKind::Slicer(t) => {
                put("average_size", t.average_size.into());
                put("size_variation", t.size_variation.into());
                put("delay", t.delay.into());
            }
            ToxicKind::LimitData(t) => put("bytes", t.bytes.into()),
            ToxicKind::Blackhole => {}
            ToxicKind::CloseAfter(t) => {
                put("time", t.time.into());
                put("bytes", t.bytes.into());
                put("reset", t.reset.into());
            }
        }
        m
    }

    /// A fresh state of this toxic for one direction of one connection.
    pub(crate) fn start(&self, now: Instant) -> Running {
        match self {
            ToxicKind::Latency(_) => Running::Latency(latency::Run::default()),
            ToxicKind::Bandwidth(_) => Running::Bandwidth(bandwidth::Run::default()),
            ToxicKind::SlowClose(_) => Running::SlowClose(slow_close::Run::default()),
            ToxicKind::Timeout(t) => Running::Timeout(timeout::Run::new(t, now)),
            ToxicKind::ResetPeer(_) => Running::ResetPeer(reset_peer::Run::default()),
            ToxicKind::Slicer(_) => Running::Slicer(slicer::Run::default()),
            ToxicKind::LimitData(_) => Running::LimitData(limit_data::Run::default()),
            ToxicKind::Blackhole => Running::Blackhole,
            ToxicKind::CloseAfter(t) => Running::CloseAfter(close_after::Run::new(t, now)),
        }
    }
}

/// Reads a toxic's attributes: integers in their bounds, booleans; remembers which were read,
/// so that one nobody reads is reported.
pub struct Attrs<'a> {
    map: &'a Map<String, Value>,
    read: Vec<&'static str>,
}

impl<'a> Attrs<'a> {
    fn new(map: &'a Map<String, Value>) -> Attrs<'a> {
        Attrs {
            map,
            read: Vec::new(),
        }
    }

    /// A whole number from 0 to `max` (0 when absent); `unit` names it in messages.
    pub fn int(&mut self, name: &'static str, max: u64, unit: &str) -> Result<u64, AttrError> {
        self.read.push(name);
        let bad = |message: String| AttrError {
            attribute: Some(name.to_string()),
            message,
        };
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(0),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if v <= max => Ok(v),
                _ => Err(bad(format!(
                    "{n} is out of range: give a whole number of {unit} from 0 to {max}"
                ))),
            },
            Some(other) => Err(bad(format!(
                "{other} is not a number: give a whole number of {unit} from 0 to {max}"
            ))),
        }
    }

    /// A boolean (false when absent).
    pub fn bool(&mut self, name: &'static str) -> Result<bool, AttrError> {
        self.read.push(name);
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(AttrError {
                attribute: Some(name.to_string()),
                message: format!("{other} is not true or false"),
            }),
        }
    }

    fn finish(self, kind: &str) -> Result<(), AttrError> {
        match self.map.keys().find(|k| !self.read.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(AttrError {
                attribute: Some(k.clone()),
                message: format!(
                    "`{kind}` has no attribute {k:?}; its attributes are {}",
                    if self.read.is_empty() {
                        "none".to_string()
                    } else {
                        self.read.join(", ")
                    }
                ),
            }),
        }
    }
}

/// Bytes of one direction, due to be written at `due`.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// The bytes.
    pub data: Bytes,
    /// When they may be written.
    pub due: Instant,
}

/// `t`, or `last` when that is later: bytes leave in the order they came (TCP keeps order), so a
/// piece is never due before the one before it went out.
pub(crate) fn not_before(t: Instant, last: Option<Instant>) -> Instant {
    match last {
        Some(l) if l > t => l,
        _ => t,
    }
}

/// How a toxic ends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Both sides closed in order (FIN): `limit_data`, `close_after`.
    Close,
    /// Both sides reset (RST): `reset_peer`, `close_after` with `reset`.
    Reset,
    /// Both sides closed after data was held back: `timeout`.
    TimedOut,
}

/// The end of a direction's stream as it flows through the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The source closed its side: pass the FIN on.
    Fin,
    /// A toxic (its place in the chain) cuts the connection.
    Cut(Cut, usize),
}

/// What flows through a chain.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// Bytes.
    Data(Piece),
    /// The stream's end, due at a time.
    End(End, Instant),
}

/// What a toxic needs beside its input: the seed and names its draws are made of, and a tally
/// of the bytes it dropped.
#[derive(Debug)]
pub struct Cx<'a> {
    /// The seed in force.
    pub seed: u64,
    /// Names the toxic in draws: the proxy's name and the toxic's.
    pub toxic: &'a str,
    /// Names the connection and direction in draws.
    pub subject: &'a str,
    /// The toxic's place in the chain (what a cut it makes names).
    pub index: usize,
    /// Bytes the toxic swallowed.
    pub dropped: u64,
}

impl Cx<'_> {
    /// A seeded draw in [0, 1) for the `n`th decision of this toxic on this connection.
    pub fn draw(&self, n: u64, salt: u64) -> f64 {
        crate::draw::uniform(self.seed, self.toxic, self.subject, n, salt)
    }
}

/// One toxic's state on one direction of one connection.
#[derive(Debug)]
pub enum Running {
    /// See [`latency`].
    Latency(latency::Run),
    /// See [`bandwidth`].
    Bandwidth(bandwidth::Run),
    /// See [`slow_close`].
    SlowClose(slow_close::Run),
    /// See [`timeout`].
    Timeout(timeout::Run),
    /// See [`reset_peer`].
    ResetPeer(reset_peer::Run),
    /// See [`slicer`].
    Slicer(slicer::Run),
    /// See [`limit_data`].
    LimitData(limit_data::Run),
    /// See [`blackhole`].
    Blackhole,
    /// See [`close_after`].
    CloseAfter(close_after::Run),
}

impl Running {
    /// Passes one item through this toxic, appending what comes out to `out`.
    pub fn push(&mut self, kind: &ToxicKind, item: Item, out: &mut Vec<Item>, cx: &mut Cx<'_>) {
        match item {
            Item::Data(p) => self.data(kind, p, out, cx),
            Item::End(end, due) => {
                let due = self.end(kind, due);
                out.push(Item::End(end, due));
            }
        }
    }

    fn data(&mut self, kind: &ToxicKind, p: Piece, out: &mut Vec<Item>, cx: &mut Cx<'_>) {
        match (self, kind) {
            (Running::Latency(r), ToxicKind::Latency(t)) => r.data(t, p, out, cx),
            (Running::Bandwidth(r), ToxicKind::Bandwidth(t)) => r.data(t, p, out),
            (Running::SlowClose(r), ToxicKind::SlowClose(_)) => r.data(p, out),
            (Running::Timeout(_), ToxicKind::Timeout(_)) => cx.dropped += p.data.len() as u64,
            (Running::ResetPeer(r), ToxicKind::ResetPeer(t)) => r.data(t, p, cx),
            (Running::Slicer(r), ToxicKind::Slicer(t)) => r.data(t, p, out, cx),
            (Running::LimitData(r), ToxicKind::LimitData(t)) => r.data(t, p, out, cx),
            (Running::CloseAfter(r), ToxicKind::CloseAfter(t)) => r.data(t, p, out, cx),
            // A blackhole is never fed (its direction is frozen); a state that does not match
            // its kind (never made so) passes data on.
            (_, _) => out.push(Item::Data(p)),
        }
    }

    /// When the stream's end, arriving at `due`, leaves this toxic.
    fn end(&mut self, kind: &ToxicKind, due: Instant) -> Instant {
        match (self, kind) {
            (Running::Latency(r), _) => not_before(due, r.last_out),
            (Running::Bandwidth(r), _) => not_before(due, r.last_out),
            (Running::SlowClose(r), ToxicKind::SlowClose(t)) => {
                not_before(due, r.last_out) + Duration::from_millis(t.delay)
            }
            (Running::Slicer(r), _) => not_before(due, r.last_out),
            _ => due,
        }
    }

    /// When this toxic acts on its own, whatever the data: its cut then.
    pub fn deadline(&self) -> Option<(Instant, Cut)> {
        match self {
            Running::Timeout(r) => r.deadline().map(|t| (t, Cut::TimedOut)),
            Running::ResetPeer(r) => r.deadline().map(|t| (t, Cut::Reset)),
            Running::CloseAfter(r) => r.deadline(),
            _ => None,
        }
    }

    /// Whether it freezes its direction: nothing read, written or closed while it acts.
    pub fn freezes(&self) -> bool {
        matches!(self, Running::Blackhole)
    }

    /// Whether, while it acts, the connection's data is being swallowed (its direction reads and
    /// drops): a `timeout`, or a `reset_peer` that saw data.
    pub fn swallows(&self) -> bool {
        matches!(self, Running::Timeout(_)) || matches!(self, Running::ResetPeer(r) if r.armed())
    }

    /// What removing it does to the connection: a `timeout` removed closes it (its data was
    /// dropped, so the stream cannot go on), as Toxiproxy's does.
    pub fn on_removal(&self) -> Option<Cut> {
        match self {
            Running::Timeout(_) => Some(Cut::TimedOut),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Running a chain by hand, in virtual time, for the toxics' own tests.
    use super::*;

    /// Pushes pieces of `sizes` bytes, due at `t0 + at_ms`, through one toxic; returns the
    /// items out, with their due times in ms after `t0`.
    pub(crate) fn run(
        kind: &ToxicKind,
        input: &[(u64, usize)],
        end_at_ms: Option<u64>,
    ) -> (Vec<(String, f64)>, u64) {
        let t0 = Instant::now();
        let mut r = kind.start(t0);
        let mut cx = Cx {
            seed: 7,
            toxic: "p/t",
            subject: "1/up",
            index: 0,
            dropped: 0,
        };
        let mut out = Vec::new();
        for (at, n) in input {
            let p = Piece {
                data: Bytes::from(vec![b'x'; *n]),
                due: t0 + Duration::from_millis(*at),
            };
            r.push(kind, Item::Data(p), &mut out, &mut cx);
        }
        if let Some(at) = end_at_ms {
            r.push(
                kind,
                Item::End(End::Fin, t0 + Duration::from_millis(at)),
                &mut out,
                &mut cx,
            );
        }
        let ms = |t: Instant| t.duration_since(t0).as_secs_f64() * 1000.0;
        let items = out
            .into_iter()
            .map(|i| match i {
                Item::Data(p) => (format!("{}", p.data.len()), ms(p.due)),
                Item::End(End::Fin, t) => ("fin".to_string(), ms(t)),
                Item::End(End::Cut(c, _), t) => (format!("{c:?}").to_lowercase(), ms(t)),
            })
            .collect();
        (items, cx.dropped)
    }

    pub(crate) fn attrs(json: &str) -> Map<String, Value> {
        serde_json::from_str(json).expect("test attributes are JSON")
    }
}

#[cfg(test)]
mod tests {
    use super::testing::attrs;
    use super::*;

    #[test]
    fn unknown_types_and_attributes_and_out_of_range_values_are_refused_with_a_reason() {
        let e = ToxicKind::parse("latencyy", &attrs("{}")).unwrap_err();
        assert!(
            e.is_unknown_type() && e.message.contains("latency, bandwidth"),
            "{e}"
        );
        let e = ToxicKind::parse("latency", &attrs(r#"{"latncy": 5}"#)).unwrap_err();
        assert_eq!(e.attribute.as_deref(), Some("latncy"), "{e}");
        assert!(e.message.contains("latency, jitter"), "{e}");
        let e = ToxicKind::parse("latency", &attrs(r#"{"latency": -5}"#)).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        let e = ToxicKind::parse("bandwidth", &attrs(r#"{"rate": "fast"}"#)).unwrap_err();
        assert!(e.to_string().contains("not a number"), "{e}");
        let e = ToxicKind::parse("latency", &attrs(r#"{"latency": 1.5}"#)).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        assert_eq!(
            ToxicKind::parse("latency", &attrs(r#"{"latency": 10}"#)).unwrap(),
            ToxicKind::Latency(latency::Latency {
                latency: 10,
                jitter: 0
            })
        );
        for t in TYPES {
            let made = ToxicKind::parse(
                t,
                &attrs(match *t {
                    "slicer" => r#"{"average_size": 10}"#,
                    "close_after" => r#"{"time": 10}"#,
                    _ => "{}",
                }),
            )
            .unwrap_or_else(|e| panic!("{t}: {e}"));
            assert_eq!(made.type_name(), *t);
            assert_eq!(
                ToxicKind::parse(t, &made.attributes()).as_ref(),
                Ok(&made),
                "{t}: the attributes shown read back as the same toxic"
            );
        }
    }
}
