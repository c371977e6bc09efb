//! `reset_peer`: when data next arrives, it is dropped, and `timeout` ms later (at once for 0)
//! the connection is reset (RST to both sides: "connection reset by peer"), as Toxiproxy does.

use std::time::{Duration, Instant};

use super::{AttrError, Attrs, Cx, Piece, MAX_MS};

/// The wait before the reset, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetPeer {
    /// ms from the first data to the reset.
    pub timeout: u64,
}

impl ResetPeer {
    pub(crate) fn parse(a: &mut Attrs<'_>) -> Result<ResetPeer, AttrError> {
        Ok(ResetPeer {
            timeout: a.int("timeout", MAX_MS, "milliseconds")?,
        })
    }
}

/// A `reset_peer` on one direction: armed by the first data it sees.
#[derive(Debug, Default)]
pub struct Run {
    reset_at: Option<Instant>,
}

impl Run {
    pub(super) fn data(&mut self, t: &ResetPeer, p: Piece, cx: &mut Cx<'_>) {
        cx.dropped += p.data.len() as u64;
        if self.reset_at.is_none() {
            self.reset_at = Some(p.due + Duration::from_millis(t.timeout));
        }
    }

    pub(super) fn armed(&self) -> bool {
        self.reset_at.is_some()
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        self.reset_at
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::attrs;
    use super::super::{Cut, Cx, Item, Piece, ToxicKind};

    #[test]
    fn the_first_data_arms_the_reset_and_is_dropped() {
        let t = ToxicKind::parse("reset_peer", &attrs(r#"{"timeout": 50}"#)).unwrap();
        let now = std::time::Instant::now();
        let mut r = t.start(now);
        assert_eq!(r.deadline(), None, "idle: nothing happens");
        let mut cx = Cx {
            seed: 1,
            toxic: "p/t",
            subject: "1",
            index: 0,
            dropped: 0,
        };
        let mut out = Vec::new();
        let p = Piece {
            data: bytes::Bytes::from_static(b"PING\r\n"),
            due: now,
        };
        r.push(&t, Item::Data(p), &mut out, &mut cx);
        assert!(out.is_empty());
        assert_eq!(cx.dropped, 6);
        assert_eq!(
            r.deadline(),
            Some((now + std::time::Duration::from_millis(50), Cut::Reset))
        );
    }
}
