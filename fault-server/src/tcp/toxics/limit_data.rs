//! `limit_data`: the connection is closed once `bytes` bytes have gone through in this
//! direction (the piece that crosses the limit is cut at it). The count lasts the connection's
//! life, across changes to the toxic.

use super::{AttrError, Attrs, Cut, Cx, End, Item, Piece};

/// The bytes allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitData {
    /// Bytes that go through before the close.
    pub bytes: u64,
}

impl LimitData {
    pub(crate) fn parse(a: &mut Attrs<'_>) -> Result<LimitData, AttrError> {
        Ok(LimitData {
            bytes: a.int("bytes", 1 << 50, "bytes")?,
        })
    }
}

/// A `limit_data` on one direction: bytes passed so far.
#[derive(Debug, Default)]
pub struct Run {
    passed: u64,
    done: bool,
}

impl Run {
    pub(super) fn data(&mut self, t: &LimitData, p: Piece, out: &mut Vec<Item>, cx: &mut Cx<'_>) {
        pass_limited(
            &mut self.passed,
            &mut self.done,
            t.bytes,
            Cut::Close,
            p,
            out,
            cx,
        );
    }
}

/// Passes at most `limit - passed` bytes of `p`, then, the limit reached, the cut: what
/// `limit_data` and `close_after`'s `bytes` share.
pub(super) fn pass_limited(
    passed: &mut u64,
    done: &mut bool,
    limit: u64,
    cut: Cut,
    mut p: Piece,
    out: &mut Vec<Item>,
    cx: &mut Cx<'_>,
) {
    if *done {
        cx.dropped += p.data.len() as u64;
        return;
    }
    let left = usize::try_from(limit.saturating_sub(*passed)).unwrap_or(usize::MAX);
    if p.data.len() > left {
        cx.dropped += (p.data.len() - left) as u64;
        p.data.truncate(left);
    }
    *passed += p.data.len() as u64;
    let due = p.due;
    if !p.data.is_empty() {
        out.push(Item::Data(p));
    }
    if *passed >= limit {
        *done = true;
        out.push(Item::End(End::Cut(cut, cx.index), due));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{attrs, run};
    use super::super::ToxicKind;

    #[test]
    fn the_piece_that_crosses_the_limit_is_cut_and_the_connection_closed() {
        let t = ToxicKind::parse("limit_data", &attrs(r#"{"bytes": 15}"#)).unwrap();
        let (out, dropped) = run(&t, &[(0, 10), (1, 10), (2, 10)], None);
        assert_eq!(
            out,
            [("10".into(), 0.0), ("5".into(), 1.0), ("close".into(), 1.0)]
        );
        assert_eq!(dropped, 15);
    }
}
