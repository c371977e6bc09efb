//! `slow_close`: the stream's end (the FIN) is passed on `delay` ms after it came; data passes
//! as it is.

use std::time::Instant;

use super::{not_before, AttrError, Attrs, Item, Piece, MAX_MS};

/// The delay, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowClose {
    /// How long the close is held back, ms.
    pub delay: u64,
}

impl SlowClose {
    pub(crate) fn parse(a: &mut Attrs<'_>) -> Result<SlowClose, AttrError> {
        Ok(SlowClose {
            delay: a.int("delay", MAX_MS, "milliseconds")?,
        })
    }
}

/// A `slow_close` on one direction.
#[derive(Debug, Default)]
pub struct Run {
    pub(super) last_out: Option<Instant>,
}

impl Run {
    pub(super) fn data(&mut self, p: Piece, out: &mut Vec<Item>) {
        self.last_out = Some(not_before(p.due, self.last_out));
        out.push(Item::Data(p));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{attrs, run};
    use super::super::ToxicKind;

    #[test]
    fn the_close_waits_and_data_does_not() {
        let t = ToxicKind::parse("slow_close", &attrs(r#"{"delay": 500}"#)).unwrap();
        let (out, _) = run(&t, &[(0, 10)], Some(20));
        assert_eq!(out, [("10".into(), 0.0), ("fin".into(), 520.0)]);
    }
}
