//! `close_after`: the connection is cut `time` ms after the toxic began to act, or once `bytes`
//! bytes have gone through in its direction (cut at the limit), whichever comes first — with a
//! FIN, or with `reset: true` an RST. A link that drops a long-lived connection mid-answer; not in
//! Toxiproxy (its `limit_data` has no time and no reset).

use std::time::{Duration, Instant};

use super::limit_data::pass_limited;
use super::{AttrError, Attrs, Cut, Cx, Item, Piece, MAX_MS};

/// When and how the connection is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseAfter {
    /// ms after the toxic began to act; 0 for no time limit.
    pub time: u64,
    /// Bytes in its direction; 0 for no byte limit.
    pub bytes: u64,
    /// Reset (RST) instead of closing (FIN).
    pub reset: bool,
}

impl CloseAfter {
    pub(crate) fn parse(a: &mut Attrs<'_>) -> Result<CloseAfter, AttrError> {
        let c = CloseAfter {
            time: a.int("time", MAX_MS, "milliseconds")?,
            bytes: a.int("bytes", 1 << 50, "bytes")?,
            reset: a.bool("reset")?,
        };
        if c.time == 0 && c.bytes == 0 {
            return Err(AttrError {
                attribute: Some("time".into()),
                message: "give `time` (ms), `bytes`, or both: with neither it would never cut"
                    .into(),
            });
        }
        Ok(c)
    }

    fn cut(&self) -> Cut {
        if self.reset {
            Cut::Reset
        } else {
            Cut::Close
        }
    }
}

/// A `close_after` on one direction.
#[derive(Debug)]
pub struct Run {
    cut_at: Option<(Instant, Cut)>,
    passed: u64,
    done: bool,
}

impl Run {
    pub(super) fn new(t: &CloseAfter, now: Instant) -> Run {
        Run {
            cut_at: (t.time > 0).then(|| (now + Duration::from_millis(t.time), t.cut())),
            passed: 0,
            done: false,
        }
    }

    pub(super) fn data(&mut self, t: &CloseAfter, p: Piece, out: &mut Vec<Item>, cx: &mut Cx<'_>) {
        if t.bytes == 0 {
            out.push(Item::Data(p));
            return;
        }
        pass_limited(
            &mut self.passed,
            &mut self.done,
            t.bytes,
            t.cut(),
            p,
            out,
            cx,
        );
    }

    pub(super) fn deadline(&self) -> Option<(Instant, Cut)> {
        self.cut_at
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{attrs, run};
    use super::super::{Cut, ToxicKind};

    #[test]
    fn a_time_a_byte_count_or_both() {
        let t = ToxicKind::parse("close_after", &attrs(r#"{"bytes": 4, "reset": true}"#)).unwrap();
        let (out, dropped) = run(&t, &[(0, 3), (2, 3)], None);
        assert_eq!(
            out,
            [("3".into(), 0.0), ("1".into(), 2.0), ("reset".into(), 2.0)]
        );
        assert_eq!(dropped, 2);
        let now = std::time::Instant::now();
        let timed = ToxicKind::parse("close_after", &attrs(r#"{"time": 250}"#)).unwrap();
        assert_eq!(
            timed.start(now).deadline(),
            Some((now + std::time::Duration::from_millis(250), Cut::Close))
        );
        assert_eq!(run(&timed, &[(0, 100)], None).0, [("100".into(), 0.0)]);
        assert!(ToxicKind::parse("close_after", &attrs("{}")).is_err());
    }
}
