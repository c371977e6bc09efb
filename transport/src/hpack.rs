//! HPACK decoding (RFC 7541) of the header blocks an HTTP/2 server answers with.
//!
//! The representations, the static and dynamic tables and the integer and string encodings are
//! here; the Huffman code's decoding is `loona-hpack`'s, behind a small cache: a server answers a
//! load driver with the same few coded strings over and over (a content type, a date that changes
//! once a second), and that decoder walks the code bit by bit through hash maps, so each distinct
//! string is decoded once.

use std::collections::{HashMap, VecDeque};

use loona_hpack::huffman::HuffmanDecoder;

/// The static table, RFC 7541 Appendix A (index 1 first).
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The dynamic table's size this side allows (SETTINGS_HEADER_TABLE_SIZE, left at its default).
pub(crate) const TABLE_SIZE: usize = 4096;
/// Distinct Huffman-coded strings remembered, and the longest one remembered.
const CACHE_ENTRIES: usize = 512;
const CACHE_LONGEST: usize = 256;

/// A connection's decoding context.
pub(crate) struct Decoder {
    /// Newest first: index 62 is the front.
    dynamic: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max: usize,
    huffman: HuffmanDecoder,
    decoded: HashMap<Vec<u8>, Vec<u8>>,
    /// Scratch for the fields that are not indexed.
    name: Vec<u8>,
    value: Vec<u8>,
}

/// Why a header block could not be decoded: the connection cannot go on (its table is lost).
#[derive(Debug)]
pub(crate) struct DecodeError(pub(crate) &'static str);

impl Decoder {
    pub(crate) fn new() -> Decoder {
        Decoder {
            dynamic: VecDeque::new(),
            size: 0,
            max: TABLE_SIZE,
            huffman: HuffmanDecoder::new(),
            decoded: HashMap::new(),
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// Decodes `block`, calling `field` with each name and value in order.
    pub(crate) fn decode(
        &mut self,
        mut block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), DecodeError> {
        while let Some(&first) = block.first() {
            if first & 0x80 != 0 {
                let i = int(&mut block, 7)?;
                let (n, v) = self.entry(i)?;
                field(n, v);
            } else if first & 0xc0 == 0x40 {
                let (n, v) = self.literal(&mut block, 6)?;
                field(&n, &v);
                self.insert(n, v);
            } else if first & 0xe0 == 0x20 {
                let max = int(&mut block, 5)?;
                if max > TABLE_SIZE {
                    return Err(DecodeError("a table size update over the allowed size"));
                }
                self.max = max;
                self.evict(0);
            } else {
                // Without indexing (0000) or never indexed (0001): the same to a reader, and the
                // common kind in answers (a length, a date); read into the scratch buffers, so
                // that it costs no allocation.
                let i = int(&mut block, 4)?;
                if i == 0 {
                    let mut name = std::mem::take(&mut self.name);
                    self.string_into(&mut block, &mut name)?;
                    self.name = name;
                }
                let mut value = std::mem::take(&mut self.value);
                self.string_into(&mut block, &mut value)?;
                self.value = value;
                let name = if i == 0 {
                    &self.name[..]
                } else {
                    entry(&self.dynamic, i)?.0
                };
                field(name, &self.value);
            }
        }
        Ok(())
    }

    /// Entry `i` of the static table, then of the dynamic one.
    fn entry(&self, i: usize) -> Result<(&[u8], &[u8]), DecodeError> {
        entry(&self.dynamic, i)
    }

    fn literal(
        &mut self,
        block: &mut &[u8],
        prefix: u32,
    ) -> Result<(Vec<u8>, Vec<u8>), DecodeError> {
        let i = int(block, prefix)?;
        let name = if i == 0 {
            self.string(block)?
        } else {
            self.entry(i)?.0.to_vec()
        };
        let value = self.string(block)?;
        Ok((name, value))
    }

    fn string(&mut self, block: &mut &[u8]) -> Result<Vec<u8>, DecodeError> {
        let mut s = Vec::new();
        self.string_into(block, &mut s)?;
        Ok(s)
    }

    /// A string literal, consumed from `block`, into `out` (cleared first).
    fn string_into(&mut self, block: &mut &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
        out.clear();
        let huffman = block.first().is_some_and(|b| b & 0x80 != 0);
        let len = int(block, 7)?;
        if len > block.len() {
            return Err(DecodeError("a string longer than its block"));
        }
        let (raw, rest) = block.split_at(len);
        *block = rest;
        if !huffman {
            out.extend_from_slice(raw);
            return Ok(());
        }
        if let Some(s) = self.decoded.get(raw) {
            out.extend_from_slice(s);
            return Ok(());
        }
        let s = self
            .huffman
            .decode(raw)
            .map_err(|_| DecodeError("an invalid Huffman code"))?;
        out.extend_from_slice(&s);
        if raw.len() <= CACHE_LONGEST {
            if self.decoded.len() >= CACHE_ENTRIES {
                self.decoded.clear();
            }
            self.decoded.insert(raw.to_vec(), s);
        }
        Ok(())
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + 32;
        if size > self.max {
            // An entry larger than the table empties it and is not added (RFC 7541 §4.4).
            self.dynamic.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.dynamic.push_front((name, value));
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some((n, v)) = self.dynamic.pop_back() else {
                self.size = 0;
                return;
            };
            self.size -= n.len() + v.len() + 32;
        }
    }
}

/// Entry `i` of the static table, then of `dynamic` (newest first).
fn entry(dynamic: &VecDeque<(Vec<u8>, Vec<u8>)>, i: usize) -> Result<(&[u8], &[u8]), DecodeError> {
    match i {
        0 => Err(DecodeError("index 0")),
        1..=61 => {
            let (n, v) = STATIC[i - 1];
            Ok((n.as_bytes(), v.as_bytes()))
        }
        _ => dynamic
            .get(i - 62)
            .map(|(n, v)| (&n[..], &v[..]))
            .ok_or(DecodeError("an index past the tables")),
    }
}

/// An integer with an `n`-bit prefix (RFC 7541 §5.1), consumed from `block`.
fn int(block: &mut &[u8], n: u32) -> Result<usize, DecodeError> {
    let (&first, mut rest) = block
        .split_first()
        .ok_or(DecodeError("a block ends mid-field"))?;
    let max = (1usize << n) - 1;
    let mut v = usize::from(first) & max;
    if v == max {
        let mut shift = 0;
        loop {
            let (&b, r) = rest
                .split_first()
                .ok_or(DecodeError("an integer ends mid-way"))?;
            rest = r;
            if shift > 21 {
                return Err(DecodeError("an integer over 2^28"));
            }
            v += usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
    }
    *block = rest;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(d: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        d.decode(block, |n, v| {
            out.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ))
        })
        .unwrap();
        out
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The first response of RFC 7541 C.5 and C.6.
    const FIRST_RESPONSE: [(&str, &str); 4] = [
        (":status", "302"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ];

    /// RFC 7541 C.5: three responses, no Huffman, a 256-byte table, entries evicted.
    #[test]
    fn the_rfc_response_examples_without_huffman() {
        let mut d = Decoder::new();
        d.max = 256;
        let r1 = hex(
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
             6c65 2e63 6f6d",
        );
        assert_eq!(all(&mut d, &r1), pairs(&FIRST_RESPONSE));
        assert_eq!(d.size, 222);
        let r2 = hex("4803 3330 37c1 c0bf");
        assert_eq!(
            all(&mut d, &r2),
            pairs(&[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ])
        );
        assert_eq!(d.size, 222);
        let r3 = hex(
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
             3d31",
        );
        assert_eq!(
            all(&mut d, &r3),
            pairs(&[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                ("location", "https://www.example.com"),
                ("content-encoding", "gzip"),
                (
                    "set-cookie",
                    "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
                ),
            ])
        );
        assert_eq!(d.size, 215);
    }

    /// RFC 7541 C.6: the same responses, Huffman-coded.
    #[test]
    fn the_rfc_response_examples_with_huffman() {
        let mut d = Decoder::new();
        d.max = 256;
        let r1 = hex(
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        );
        assert_eq!(all(&mut d, &r1), pairs(&FIRST_RESPONSE));
        // The same block again reads from the cache: the same fields.
        let mut again = Decoder::new();
        again.max = 256;
        all(&mut again, &r1);
        assert_eq!(all(&mut again, &hex("4883 640e ffc1 c0bf"))[0].1, "307");
    }

    #[test]
    fn malformed_blocks_are_errors_not_panics() {
        let mut d = Decoder::new();
        for bad in [
            &[0x80][..],                           // index 0
            &[0xbe],                               // past both tables
            &[0x7f],                               // an integer cut short
            &[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff], // too large
            &[0x40, 0x05, b'a'],                   // a string longer than the block
            &[0x3f, 0xe2, 0x1f],                   // a size update to 4097
        ] {
            assert!(d.decode(bad, |_, _| {}).is_err(), "{bad:?}");
        }
    }
}
