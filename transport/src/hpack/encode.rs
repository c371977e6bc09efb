//! HPACK encoding (RFC 7541) of the requests' header blocks, through one connection's context.
//!
//! A load driver sends the same few fields in every request (a content type, a method's path) and
//! some that never repeat (an idempotency key). The encoder adds a field to the server's table
//! only the second time it sees it, so a field that repeats becomes one byte per request and one
//! that does not never takes room there; credentials are never added (RFC 7541 §7.1.3). Strings
//! go as they are, not Huffman-coded.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderName, HeaderValue};

/// The largest dynamic table this side fills in the server's decoder: the protocol's default,
/// or less when the server's SETTINGS_HEADER_TABLE_SIZE says so.
const ENCODER_TABLE: usize = 4096;
/// Fields sent without indexing that are remembered, so that the second time one is sent it is
/// added to the table: a field that repeats (a content type, a method's path) is then one byte
/// per request, and one that does not (an idempotency key) never takes room in the table.
const ENCODER_SEEN: usize = 16;

/// This side's HPACK encoding context (RFC 7541 §2.3.2, §4): the entries it added to the server's
/// dynamic table, newest first, sized as the server counts them. Every header block of the
/// connection is encoded through it in the order the blocks are written, under the connection's
/// lock, so that the server's table and this copy agree.
#[derive(Default)]
pub(crate) struct Encoder {
    /// `(name, value)`, newest first: index 62 is the front.
    table: VecDeque<(Bytes, Bytes)>,
    size: usize,
    /// The table's size in use: `None` for the protocol's default ([`ENCODER_TABLE`]), until
    /// the server asks for less.
    max: Option<usize>,
    /// A smaller size to announce at the start of the next block.
    update: Option<usize>,
    /// The last fields sent without indexing.
    seen: VecDeque<(HeaderName, HeaderValue)>,
    /// The last `:path` sent without indexing.
    seen_path: Vec<u8>,
    /// Where the last look-up found its field. The table holds each field once, so the order a
    /// look-up tries places in changes nothing but its cost; a load's requests send the same
    /// fields in the same order, and entries are added newest first in the order they were
    /// sent, so the next field is most often one place nearer the front (after the front, the
    /// back).
    hint: usize,
}

impl Encoder {
    fn max(&self) -> usize {
        self.max.unwrap_or(ENCODER_TABLE)
    }

    /// The server's SETTINGS_HEADER_TABLE_SIZE: a table smaller than the one in use is
    /// announced at the start of the next block, and what no longer fits is evicted now.
    pub(crate) fn set_limit(&mut self, limit: usize) {
        let new = limit.min(ENCODER_TABLE);
        if new < self.max() {
            self.max = Some(new);
            self.update = Some(self.update.map_or(new, |u| u.min(new)));
            self.evict(0);
        }
    }

    /// Begins a block: the table size update owed, if any (RFC 7541 §4.2: first in the block).
    pub(crate) fn start_block(&mut self, b: &mut BytesMut) {
        if let Some(u) = self.update.take() {
            int(b, 0x20, 5, u);
            if u != self.max() {
                int(b, 0x20, 5, self.max());
            }
        }
    }

    /// `:path` (static name 4).
    pub(crate) fn path(&mut self, b: &mut BytesMut, value: &[u8]) {
        if let Some(i) = self.find(b":path", value) {
            int(b, 0x80, 7, i);
        } else if self.seen_path == value && self.fits(5, value.len()) {
            int(b, 0x40, 6, 4);
            string(b, value);
            self.add(Bytes::from_static(b":path"), Bytes::copy_from_slice(value));
        } else {
            int(b, 0x00, 4, 4);
            string(b, value);
            self.seen_path.clear();
            self.seen_path.extend_from_slice(value);
        }
    }

    /// A regular field. Credentials are never indexed (RFC 7541 §7.1.3).
    pub(crate) fn field(&mut self, b: &mut BytesMut, name: &HeaderName, value: &HeaderValue) {
        let (n, v) = (name.as_str().as_bytes(), value.as_bytes());
        if matches!(
            name.as_str(),
            "authorization" | "proxy-authorization" | "cookie"
        ) || value.is_sensitive()
        {
            b.put_u8(0x10);
            string(b, n);
            string(b, v);
            return;
        }
        if let Some(i) = self.find(n, v) {
            int(b, 0x80, 7, i);
            return;
        }
        let seen = self
            .seen
            .iter()
            .position(|(sn, sv)| sv.as_bytes() == v && sn == name);
        if let (Some(at), true) = (seen, self.fits(n.len(), v.len())) {
            self.seen.remove(at);
            b.put_u8(0x40);
            string(b, n);
            string(b, v);
            self.add(Bytes::copy_from_slice(n), Bytes::copy_from_slice(v));
            return;
        }
        b.put_u8(0x00);
        string(b, n);
        string(b, v);
        if seen.is_none() {
            if self.seen.len() == ENCODER_SEEN {
                self.seen.pop_back();
            }
            self.seen.push_front((name.clone(), value.clone()));
        }
    }

    /// The index of `name: value` in the dynamic table.
    fn find(&mut self, name: &[u8], value: &[u8]) -> Option<usize> {
        let same = |(n, v): &(Bytes, Bytes)| {
            v.len() == value.len() && n.len() == name.len() && v[..] == *value && n[..] == *name
        };
        let guess = match self.hint {
            0 => self.table.len().checked_sub(1)?,
            h => h - 1,
        };
        let at = if self.table.get(guess).is_some_and(same) {
            guess
        } else {
            self.table.iter().position(same)?
        };
        self.hint = at;
        Some(62 + at)
    }

    /// Whether an entry this size is worth a place: at most a quarter of the table, so that a
    /// few long values cannot push out the many short ones.
    fn fits(&self, name: usize, value: usize) -> bool {
        name + value + 32 <= self.max() / 4
    }

    fn add(&mut self, name: Bytes, value: Bytes) {
        let size = name.len() + value.len() + 32;
        self.evict(size);
        self.table.push_front((name, value));
        self.size += size;
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max() {
            let Some((n, v)) = self.table.pop_back() else {
                break;
            };
            self.size -= n.len() + v.len() + 32;
        }
    }
}

/// An HPACK integer with an `n`-bit prefix under `first`'s high bits (RFC 7541 §5.1).
pub(crate) fn int(b: &mut BytesMut, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        b.put_u8(first | v as u8);
        return;
    }
    b.put_u8(first | max as u8);
    v -= max;
    while v >= 128 {
        b.put_u8((v % 128) as u8 | 0x80);
        v /= 128;
    }
    b.put_u8(v as u8);
}

/// An HPACK string literal, not Huffman-coded.
pub(crate) fn string(b: &mut BytesMut, s: &[u8]) {
    int(b, 0x00, 7, s.len());
    b.extend_from_slice(s);
}

#[cfg(test)]
impl Encoder {
    /// Whether the encoder's copy of the server's table is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty() && self.size == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_past_their_prefix_continue_in_seven_bit_groups() {
        // RFC 7541 C.1.2: 1337 with a 5-bit prefix.
        let mut b = BytesMut::new();
        int(&mut b, 0x00, 5, 1337);
        assert_eq!(&b[..], &[31, 154, 10]);
        let mut b = BytesMut::new();
        int(&mut b, 0x00, 5, 10);
        assert_eq!(&b[..], &[10]);
    }
}
