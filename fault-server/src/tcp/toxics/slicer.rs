//! `slicer`: each piece is cut into slices of about `average_size` bytes (± `size_variation`),
//! written `delay` µs apart: a peer that assumes one read is one message breaks on it.
//!
//! The cut is Toxiproxy's: a piece more than `size_variation` bytes over `average_size` is
//! halved, the middle moved by a draw within `size_variation`, and each half cut again.

use std::time::{Duration, Instant};

use super::{not_before, AttrError, Attrs, Cx, Item, Piece, MAX_MS};

/// The slices' size and spacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slicer {
    /// The slices' average size, bytes (at least 1).
    pub average_size: u64,
    /// How far a slice's size may be from the average, bytes (less than `average_size`).
    pub size_variation: u64,
    /// The time between slices, µs.
    pub delay: u64,
}

impl Slicer {
    pub(crate) fn parse(a: &mut Attrs<'_>) -> Result<Slicer, AttrError> {
        let s = Slicer {
            average_size: a.int("average_size", 1 << 20, "bytes")?,
            size_variation: a.int("size_variation", 1 << 20, "bytes")?,
            delay: a.int("delay", MAX_MS * 1000, "microseconds")?,
        };
        if s.average_size == 0 {
            return Err(AttrError {
                attribute: Some("average_size".into()),
                message: "0 would cut a piece into nothing: give 1 byte or more".into(),
            });
        }
        if s.size_variation >= s.average_size {
            return Err(AttrError {
                attribute: Some("size_variation".into()),
                message: format!(
                    "{} is not smaller than average_size ({}): give less",
                    s.size_variation, s.average_size
                ),
            });
        }
        Ok(s)
    }

    /// Where `len` bytes are cut: the slices' ends, in order.
    fn cuts(&self, len: usize, draws: &mut u64, cx: &Cx<'_>) -> Vec<usize> {
        let avg = usize::try_from(self.average_size).unwrap_or(usize::MAX);
        let var = usize::try_from(self.size_variation).unwrap_or(0);
        let mut ends = Vec::new();
        // Segments still to cut, the leftmost on top.
        let mut todo = vec![(0usize, len)];
        while let Some((start, end)) = todo.pop() {
            if (end - start).saturating_sub(avg) <= var || end - start < 2 {
                ends.push(end);
                continue;
            }
            let mut mid = start + (end - start) / 2;
            if var > 0 {
                *draws += 1;
                let shift = (cx.draw(*draws, 1) * (2 * var) as f64) as usize;
                mid = (mid + shift).saturating_sub(var);
            }
            let mid = mid.clamp(start + 1, end - 1);
            todo.push((mid, end));
            todo.push((start, mid));
        }
        ends
    }
}

/// A `slicer` on one direction.
#[derive(Debug, Default)]
pub struct Run {
    pub(super) last_out: Option<Instant>,
    draws: u64,
}

impl Run {
    pub(super) fn data(&mut self, t: &Slicer, p: Piece, out: &mut Vec<Item>, cx: &Cx<'_>) {
        let gap = Duration::from_micros(t.delay);
        let mut at = not_before(p.due, self.last_out);
        let mut from = 0;
        for end in t.cuts(p.data.len(), &mut self.draws, cx) {
            out.push(Item::Data(Piece {
                data: p.data.slice(from..end),
                due: at,
            }));
            from = end;
            at += gap;
        }
        self.last_out = Some(at);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{attrs, run};
    use super::super::ToxicKind;

    #[test]
    fn a_piece_is_cut_into_slices_spaced_by_the_delay() {
        let t =
            ToxicKind::parse("slicer", &attrs(r#"{"average_size": 4, "delay": 1000}"#)).unwrap();
        let (out, _) = run(&t, &[(0, 16)], None);
        assert_eq!(
            out,
            [
                ("4".into(), 0.0),
                ("4".into(), 1.0),
                ("4".into(), 2.0),
                ("4".into(), 3.0)
            ]
        );
        let varied = ToxicKind::parse(
            "slicer",
            &attrs(r#"{"average_size": 10, "size_variation": 5, "delay": 0}"#),
        )
        .unwrap();
        let (out, _) = run(&varied, &[(0, 1000)], None);
        let sizes: Vec<usize> = out.iter().map(|(n, _)| n.parse().unwrap()).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 1000, "nothing lost");
        assert!(sizes.len() > 50, "{sizes:?}");
        assert!(sizes.iter().all(|n| (1..=15).contains(n)), "{sizes:?}");
        assert_eq!(run(&varied, &[(0, 1000)], None).0, out, "seeded");
    }

    #[test]
    fn bounds_that_would_never_end_are_refused() {
        assert!(ToxicKind::parse("slicer", &attrs(r#"{"average_size": 0}"#)).is_err());
        let e = ToxicKind::parse(
            "slicer",
            &attrs(r#"{"average_size": 4, "size_variation": 4}"#),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("not smaller than average_size"),
            "{e}"
        );
    }
}
