//! `latency`: every piece of data waits `latency` ms, plus or minus up to `jitter` ms, counted
//! from when the proxy read it.
//!
//! Counted from the read, not from when the piece reached this toxic, so the delay does not add
//! up over a stream: pieces read 1 ms apart leave 1 ms apart, each `latency` late (Toxiproxy's
//! `delay - time.Since(c.Timestamp)`). Order is kept: a piece drawn a shorter delay than the one
//! before it leaves right after that one. The stream's end leaves after the last piece, not
//! delayed itself.

use std::time::{Duration, Instant};

use super::{not_before, AttrError, Attrs, Cx, Item, Piece, MAX_MS};

/// `latency` ± `jitter`, both in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    /// The delay, ms.
    pub latency: u64,
    /// The most the delay varies either way, ms; each piece draws its own.
    pub jitter: u64,
}

impl Latency {
    pub(crate) fn parse(a: &mut Attrs<'_>) -> Result<Latency, AttrError> {
        Ok(Latency {
            latency: a.int("latency", MAX_MS, "milliseconds")?,
            jitter: a.int("jitter", MAX_MS, "milliseconds")?,
        })
    }

    /// The `n`th piece's delay: `latency + (draw in [-jitter, jitter))`, at least 0.
    fn delay(&self, n: u64, cx: &Cx<'_>) -> Duration {
        let mut ms = self.latency as i128;
        if self.jitter > 0 {
            let span = 2 * self.jitter as i128;
            ms += (cx.draw(n, 0) * span as f64) as i128 - self.jitter as i128;
        }
        Duration::from_millis(u64::try_from(ms.max(0)).unwrap_or(0))
    }
}

/// A `latency` on one direction: when its last piece leaves, how many it has seen.
#[derive(Debug, Default)]
pub struct Run {
    pub(super) last_out: Option<Instant>,
    pieces: u64,
}

impl Run {
    pub(super) fn data(&mut self, t: &Latency, mut p: Piece, out: &mut Vec<Item>, cx: &Cx<'_>) {
        self.pieces += 1;
        p.due = not_before(p.due + t.delay(self.pieces, cx), self.last_out);
        self.last_out = Some(p.due);
        out.push(Item::Data(p));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{attrs, run};
    use super::super::ToxicKind;

    #[test]
    fn each_piece_waits_from_its_own_read_and_order_is_kept() {
        let t = ToxicKind::parse("latency", &attrs(r#"{"latency": 100}"#)).unwrap();
        let (out, dropped) = run(&t, &[(0, 10), (1, 10), (50, 5)], Some(60));
        assert_eq!(
            out,
            [
                ("10".into(), 100.0),
                ("10".into(), 101.0),
                ("5".into(), 150.0),
                ("fin".into(), 150.0)
            ]
        );
        assert_eq!(dropped, 0);
    }

    #[test]
    fn jitter_is_drawn_within_its_bounds_and_the_same_for_the_same_seed() {
        let t = ToxicKind::parse("latency", &attrs(r#"{"latency": 100, "jitter": 20}"#)).unwrap();
        let input: Vec<(u64, usize)> = (0..200).map(|i| (i * 1000, 1)).collect();
        let (out, _) = run(&t, &input, None);
        let delays: Vec<f64> = out
            .iter()
            .zip(&input)
            .map(|((_, due), (at, _))| due - *at as f64)
            .collect();
        assert!(
            delays.iter().all(|d| (80.0..120.0).contains(d)),
            "{delays:?}"
        );
        assert!(delays.iter().any(|d| *d < 95.0) && delays.iter().any(|d| *d > 105.0));
        assert_eq!(run(&t, &input, None).0, out, "seeded: the same draws again");
    }
}
