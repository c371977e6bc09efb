//! `bandwidth`: at most `rate` KB/s (bytes per millisecond); 0 is no limit, as in Toxiproxy.
//!
//! A piece leaves when the pieces before it have had their time at the rate; one larger than a
//! tenth of a second's worth leaves in slices of that size, a tenth of a second apart, so a slow
//! link trickles rather than stalls and bursts.

use std::time::{Duration, Instant};

use super::{not_before, AttrError, Attrs, Item, Piece};

/// The rate, KB/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bandwidth {
    /// Kilobytes (1,000 bytes) per second; 0 for no limit.
    pub rate: u64,
}

impl Bandwidth {
    pub(crate) fn parse(a: &mut Attrs<'_>) -> Result<Bandwidth, AttrError> {
        Ok(Bandwidth {
            rate: a.int("rate", 1 << 40, "KB/s")?,
        })
    }
}

/// A `bandwidth` on one direction: when its last byte's time ends.
#[derive(Debug, Default)]
pub struct Run {
    pub(super) last_out: Option<Instant>,
}

impl Run {
    pub(super) fn data(&mut self, t: &Bandwidth, p: Piece, out: &mut Vec<Item>) {
        if t.rate == 0 {
            let due = not_before(p.due, self.last_out);
            self.last_out = Some(due);
            out.push(Item::Data(Piece { due, ..p }));
            return;
        }
        let mut at = not_before(p.due, self.last_out);
        let slice = usize::try_from(t.rate.saturating_mul(100)).unwrap_or(usize::MAX);
        let mut data = p.data;
        while !data.is_empty() {
            let n = data.len().min(slice);
            let part = data.split_to(n);
            // n bytes at `rate` bytes per ms.
            at += Duration::from_nanos(
                u64::try_from(n as u128 * 1_000_000 / u128::from(t.rate)).unwrap_or(u64::MAX),
            );
            out.push(Item::Data(Piece {
                data: part,
                due: at,
            }));
        }
        self.last_out = Some(at);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{attrs, run};
    use super::super::ToxicKind;

    #[test]
    fn bytes_leave_at_the_rate_in_tenth_of_a_second_slices() {
        // 10 KB/s: 1,000 bytes per 100 ms.
        let t = ToxicKind::parse("bandwidth", &attrs(r#"{"rate": 10}"#)).unwrap();
        let (out, _) = run(&t, &[(0, 2500), (0, 500)], Some(0));
        assert_eq!(
            out,
            [
                ("1000".into(), 100.0),
                ("1000".into(), 200.0),
                ("500".into(), 250.0),
                ("500".into(), 300.0),
                ("fin".into(), 300.0),
            ]
        );
        let unlimited = ToxicKind::parse("bandwidth", &attrs(r#"{"rate": 0}"#)).unwrap();
        assert_eq!(
            run(&unlimited, &[(5, 100_000)], None).0,
            [("100000".into(), 5.0)]
        );
    }
}
