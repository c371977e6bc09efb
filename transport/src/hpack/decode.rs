//! HPACK decoding (RFC 7541) of the header blocks an HTTP/2 server answers with.
//!
//! The representations, the static and dynamic tables and the integer and string encodings are
//! here; the Huffman code's decoding is `loona-hpack`'s, behind a small cache: a server answers a
//! load driver with the same few coded strings over and over (a content type, a date that changes
//! once a second), and that decoder walks the code bit by bit through hash maps, so each distinct
//! string is decoded once.

use std::collections::{HashMap, VecDeque};
use std::sync::OnceLock;

use http::{HeaderName, HeaderValue};

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
/// Values of fields sent without indexing (a length, say) remembered as sent, and the longest.
const LITERALS: usize = 8;
const LITERAL_LONGEST: usize = 64;

/// One decoded field: its name and value as sent, and, when it is a valid regular field (no
/// pseudo-header), the same as HTTP types — made once per table entry and cloned after, so that
/// a field the server indexed costs the reader no allocation.
pub(crate) struct Field<'a> {
    pub(crate) name: &'a [u8],
    pub(crate) value: &'a [u8],
    pub(crate) typed: Option<(HeaderName, HeaderValue)>,
}

/// A table entry.
struct Entry {
    name: Vec<u8>,
    value: Vec<u8>,
    typed: Option<(HeaderName, HeaderValue)>,
}

impl Entry {
    fn new(name: Vec<u8>, value: Vec<u8>) -> Entry {
        let typed = typed(&name, &value);
        Entry { name, value, typed }
    }

    /// Its size as the table counts it (RFC 7541 §4.1).
    fn size(&self) -> usize {
        self.name.len() + self.value.len() + 32
    }

    fn field(&self) -> Field<'_> {
        Field {
            name: &self.name,
            value: &self.value,
            typed: self.typed.clone(),
        }
    }
}

/// `name: value` as HTTP types, unless it is a pseudo-header or not a field HTTP/2 allows.
fn typed(name: &[u8], value: &[u8]) -> Option<(HeaderName, HeaderValue)> {
    Some((field_name(name)?, field_value(value)?))
}

/// `name` as a regular field's name, when RFC 9113 §8.2 allows it in an answer: a token in
/// lowercase (`HeaderName` would quietly lowercase it), and none of the connection-specific
/// fields HTTP/2 forbids (§8.2.2). Checked once per table entry, so that an indexed field costs
/// no check.
pub(crate) fn field_name(name: &[u8]) -> Option<HeaderName> {
    if name.first() == Some(&b':') || name.iter().any(u8::is_ascii_uppercase) {
        return None;
    }
    let n = HeaderName::from_bytes(name).ok()?;
    let forbidden = [
        http::header::CONNECTION,
        http::header::TRANSFER_ENCODING,
        http::header::UPGRADE,
    ];
    if forbidden.contains(&n) || n == "keep-alive" || n == "proxy-connection" {
        return None;
    }
    Some(n)
}

/// `value` as a field value, when RFC 9113 §8.2.1 allows it: no NUL, CR, LF or other control
/// character, and no whitespace at either end.
pub(crate) fn field_value(value: &[u8]) -> Option<HeaderValue> {
    if matches!(value.first(), Some(b' ' | b'\t')) || matches!(value.last(), Some(b' ' | b'\t')) {
        return None;
    }
    HeaderValue::from_bytes(value).ok()
}

/// The static table's entries, made once.
fn static_table() -> &'static [Entry] {
    static TABLE: OnceLock<Vec<Entry>> = OnceLock::new();
    TABLE.get_or_init(|| {
        STATIC
            .iter()
            .map(|(n, v)| Entry::new(n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    })
}

/// A value sent without indexing, as it came (Huffman-coded or not) and decoded.
struct Literal {
    huffman: bool,
    sent: Vec<u8>,
    value: Vec<u8>,
    typed: Option<HeaderValue>,
}

impl Literal {
    /// The empty string, sent plain: a true decoding, so an unused slot can match.
    fn empty() -> Literal {
        Literal {
            huffman: false,
            sent: Vec::new(),
            value: Vec::new(),
            typed: Some(HeaderValue::from_static("")),
        }
    }
}

/// A connection's decoding context.
pub(crate) struct Decoder {
    /// Newest first: index 62 is the front.
    dynamic: VecDeque<Entry>,
    size: usize,
    max: usize,
    huffman: HuffmanDecoder,
    decoded: HashMap<Vec<u8>, Vec<u8>>,
    /// The last values of fields sent without indexing: [`LITERALS`] short ones, replaced in
    /// turn, and the last long one.
    literals: Vec<Literal>,
    next_literal: usize,
    /// Scratch for names that are not indexed.
    name: Vec<u8>,
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
            literals: Vec::new(),
            next_literal: 0,
            name: Vec::new(),
        }
    }

    /// Decodes `block`, calling `field` with each field in order.
    pub(crate) fn decode(
        &mut self,
        mut block: &[u8],
        mut field: impl FnMut(Field<'_>),
    ) -> Result<(), DecodeError> {
        // Table size updates are allowed only before the block's first field (RFC 7541 §4.2).
        let mut at_start = true;
        while let Some(&first) = block.first() {
            if first & 0xe0 != 0x20 {
                at_start = false;
            }
            if first & 0x80 != 0 {
                let i = int(&mut block, 7)?;
                field(self.entry(i)?.field());
            } else if first & 0xc0 == 0x40 {
                let i = int(&mut block, 6)?;
                let name = if i == 0 {
                    self.string(&mut block)?
                } else {
                    self.entry(i)?.name.clone()
                };
                let value = self.string(&mut block)?;
                let e = Entry::new(name, value);
                field(e.field());
                self.insert(e);
            } else if first & 0xe0 == 0x20 {
                if !at_start {
                    return Err(DecodeError(
                        "a table size update after the block's first field",
                    ));
                }
                let max = int(&mut block, 5)?;
                if max > TABLE_SIZE {
                    return Err(DecodeError("a table size update over the allowed size"));
                }
                self.max = max;
                self.evict(0);
            } else {
                // Without indexing (0000) or never indexed (0001): the same to a reader, and the
                // common kind in answers (a length, a date). The name is read into a scratch
                // buffer, the value through the remembered literals: neither allocates when
                // the server repeats itself.
                let i = int(&mut block, 4)?;
                let mut scratch = std::mem::take(&mut self.name);
                let name_typed = if i == 0 {
                    self.string_into(&mut block, &mut scratch)?;
                    None
                } else {
                    Some(self.entry(i)?.typed.as_ref().map(|(n, _)| n.clone()))
                };
                let l = self.literal(&mut block)?;
                let lit = &self.literals[l];
                let (name, name_typed) = match name_typed {
                    Some(t) => (&self.entry_ref(i).name[..], t),
                    None => (&scratch[..], None),
                };
                let typed = match (name_typed, &lit.typed) {
                    (Some(n), Some(v)) => Some((n, v.clone())),
                    (None, Some(v)) => field_name(name).map(|n| (n, v.clone())),
                    _ => None,
                };
                field(Field {
                    name,
                    value: &lit.value,
                    typed,
                });
                self.name = scratch;
            }
        }
        Ok(())
    }

    /// Entry `i` of the static table, then of the dynamic one.
    fn entry(&self, i: usize) -> Result<&Entry, DecodeError> {
        match i {
            0 => Err(DecodeError("index 0")),
            1..=61 => Ok(&static_table()[i - 1]),
            _ => self
                .dynamic
                .get(i - 62)
                .ok_or(DecodeError("an index past the tables")),
        }
    }

    /// Entry `i`, known to exist.
    fn entry_ref(&self, i: usize) -> &Entry {
        match i {
            1..=61 => &static_table()[i - 1],
            _ => &self.dynamic[i - 62],
        }
    }

    /// A value sent without indexing, consumed from `block`: the index of its remembered
    /// literal, decoded now unless it was sent the same way lately.
    fn literal(&mut self, block: &mut &[u8]) -> Result<usize, DecodeError> {
        let huffman = block.first().is_some_and(|b| b & 0x80 != 0);
        let len = int(block, 7)?;
        if len > block.len() {
            return Err(DecodeError("a string longer than its block"));
        }
        let (sent, rest) = block.split_at(len);
        *block = rest;
        if let Some(i) = self
            .literals
            .iter()
            .position(|l| l.huffman == huffman && l.sent == sent)
        {
            return Ok(i);
        }
        let mut value = Vec::new();
        self.decode_raw(huffman, sent, &mut value)?;
        let lit = Literal {
            huffman,
            sent: sent.to_vec(),
            typed: field_value(&value),
            value,
        };
        // Short values take the remembered slots in turn; a long one the one slot kept for
        // it, so that what is remembered stays small.
        let i = if len > LITERAL_LONGEST {
            LITERALS
        } else {
            let i = self.next_literal;
            self.next_literal = (i + 1) % LITERALS;
            i
        };
        while self.literals.len() <= i {
            self.literals.push(Literal::empty());
        }
        self.literals[i] = lit;
        Ok(i)
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
        self.decode_raw(huffman, raw, out)
    }

    /// A string literal's bytes `raw`, Huffman-coded or not, decoded into `out`.
    fn decode_raw(
        &mut self,
        huffman: bool,
        raw: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), DecodeError> {
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

    fn insert(&mut self, e: Entry) {
        let size = e.size();
        if size > self.max {
            // An entry larger than the table empties it and is not added (RFC 7541 §4.4).
            self.dynamic.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.dynamic.push_front(e);
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some(e) = self.dynamic.pop_back() else {
                self.size = 0;
                return;
            };
            self.size -= e.size();
        }
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
        d.decode(block, |f| {
            let (n, v) = (
                String::from_utf8(f.name.to_vec()).unwrap(),
                String::from_utf8(f.value.to_vec()).unwrap(),
            );
            // The typed field, when there is one, says the same.
            if let Some((tn, tv)) = &f.typed {
                assert_eq!((tn.as_str(), tv.to_str().unwrap()), (&n[..], &v[..]));
            } else {
                assert!(n.starts_with(':'), "{n} has no typed field");
            }
            out.push((n, v))
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

    /// A field without indexing: `content-length` (static 28) with a plain `value`.
    fn length(value: &str) -> Vec<u8> {
        let mut b = vec![0x0f, 28 - 15, value.len() as u8];
        b.extend_from_slice(value.as_bytes());
        b
    }

    /// Values sent without indexing come out the same whether decoded or remembered, past the
    /// remembered ones' turns and the long one's slot; one that is not valid HTTP stays so.
    #[test]
    fn values_without_indexing_are_remembered_and_stay_right() {
        let mut d = Decoder::new();
        let long = "9".repeat(100);
        let mut values: Vec<String> = (0..20).map(|i| i.to_string()).collect();
        values.insert(3, long.clone());
        values.insert(12, long.clone());
        for round in 0..3 {
            for v in &values {
                assert_eq!(
                    all(&mut d, &length(v)),
                    pairs(&[("content-length", v)]),
                    "round {round}"
                );
            }
        }
        assert!(d.literals.len() <= LITERALS + 1);
        assert!(d.literals[..LITERALS]
            .iter()
            .all(|l| l.sent.len() <= LITERAL_LONGEST));
        // A new name (index 0), then a value no header can hold, twice: no typed field either time.
        let mut custom = vec![0x00, 3];
        custom.extend_from_slice(b"x-a");
        custom.extend_from_slice(&[2, b'a', b'\n']);
        for _ in 0..2 {
            let mut typed = Vec::new();
            d.decode(&custom, |f| {
                assert_eq!((f.name, f.value), (&b"x-a"[..], &b"a\n"[..]));
                typed.push(f.typed.is_some());
            })
            .unwrap();
            assert_eq!(typed, [false]);
        }
        // The same value under another name is that name's.
        let mut other = vec![0x00, 3];
        other.extend_from_slice(b"x-b");
        other.extend_from_slice(&[1, b'7']);
        assert_eq!(all(&mut d, &other), pairs(&[("x-b", "7")]));
        assert_eq!(all(&mut d, &length("7")), pairs(&[("content-length", "7")]));
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
            assert!(d.decode(bad, |_| {}).is_err(), "{bad:?}");
        }
    }

    /// A table size update is allowed before a block's first field (two in a row included), and
    /// nowhere else (RFC 7541 §4.2).
    #[test]
    fn a_table_size_update_only_at_the_start_of_a_block() {
        let mut d = Decoder::new();
        assert_eq!(
            all(&mut d, &[0x20, 0x3f, 0xe1, 0x1f, 0x88]),
            pairs(&[(":status", "200")])
        );
        assert_eq!(d.max, 4096);
        let e = d
            .decode(&[0x88, 0x20], |_| {})
            .expect_err("an update after a field");
        assert!(e.0.contains("after the block's first field"), "{}", e.0);
    }

    /// Fields HTTP/2 forbids in an answer have no typed form, whether indexed or literal: an
    /// uppercase name, a connection-specific field, a value with whitespace at an end or a
    /// control character.
    #[test]
    fn fields_http2_forbids_have_no_typed_form() {
        for (name, value) in [
            ("X-Upper", "v"),
            ("connection", "close"),
            ("keep-alive", "5"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-connection", "x"),
            ("x-pad", " v"),
            ("x-pad", "v\t"),
            ("x-nul", "a\0b"),
            ("bad name", "v"),
        ] {
            for first in [0x00u8, 0x40] {
                let mut block = vec![first, name.len() as u8];
                block.extend_from_slice(name.as_bytes());
                block.push(value.len() as u8);
                block.extend_from_slice(value.as_bytes());
                let mut d = Decoder::new();
                let mut seen = Vec::new();
                d.decode(&block, |f| seen.push((f.name.to_vec(), f.typed.is_some())))
                    .expect("a well-formed block");
                assert_eq!(
                    seen,
                    [(name.as_bytes().to_vec(), false)],
                    "{name}: {value:?}"
                );
            }
        }
        assert!(field_name(b"x-ok").is_some() && field_value(b"a b").is_some());
    }
}
