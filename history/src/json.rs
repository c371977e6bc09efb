//! An entry as one line of JSON, written without serde's per-field machinery.
//!
//! The fault server writes one line per request it sees, so this runs once per request on the
//! server's own cores. Written through `serde_json`'s derive, most of an entry's cost was escaping
//! strings byte by byte, the field names among them. Here the names are written as literals and a
//! value is copied whole unless it has a byte JSON must escape. The output is byte for byte what
//! `serde_json::to_writer` makes of the same entry (field order, skipped fields, escapes, number
//! and float formatting); the tests hold it to that.

use std::collections::BTreeMap;

use crate::entry::{Entry, HttpVersion};

impl Entry {
    /// Appends the entry as JSON (no newline) to `out`: the same bytes as
    /// `serde_json::to_writer(out, self)`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let mut w = Writer { out };
        w.raw(b"{\"seq\":");
        w.uint(self.seq);
        w.raw(b",\"t_recv_us\":");
        w.uint(self.t_recv_us);
        w.raw(b",\"t_done_us\":");
        w.uint(self.t_done_us);
        w.some_uint(b",\"t_body_us\":", self.t_body_us);
        w.some_uint(b",\"t_wire_us\":", self.t_wire_us);
        w.raw(b",\"unix_ms\":");
        w.uint(self.unix_ms);
        if self.unix_us != 0 {
            w.raw(b",\"unix_us\":");
            w.uint(self.unix_us);
        }
        w.some_str(b",\"replica\":", self.replica.as_deref());
        w.raw(b",\"method\":");
        w.str(&self.method);
        w.raw(b",\"path\":");
        w.str(&self.path);
        w.raw(b",\"query\":");
        w.opt_str(self.query.as_deref());
        w.raw(b",\"headers\":");
        w.map(&self.headers);
        w.raw(b",\"idempotency_key\":");
        w.opt_str(self.idempotency_key.as_deref());
        w.raw(b",\"client_id\":");
        w.opt_str(self.client_id.as_deref());
        w.raw(b",\"body_sha256\":");
        w.opt_str(self.body_sha256.as_deref());
        w.raw(b",\"body_len\":");
        w.uint(self.body_len);
        if let Some(v) = self.http_version {
            w.raw(b",\"http_version\":");
            w.raw(match v {
                HttpVersion::Http10 => b"\"1.0\"",
                HttpVersion::Http11 => b"\"1.1\"",
                HttpVersion::Http2 => b"\"2\"",
            });
        }
        w.raw(if self.tls {
            b",\"tls\":true"
        } else {
            b",\"tls\":false"
        });
        w.raw(b",\"conn_id\":");
        w.uint(self.conn_id);
        w.raw(b",\"rule\":");
        w.opt_str(self.rule.as_deref());
        w.raw(b",\"fault\":");
        w.opt_str(self.fault.as_deref());
        w.raw(b",\"status\":");
        match self.status {
            Some(s) => w.uint(u64::from(s)),
            None => w.raw(b"null"),
        }
        w.raw(b",\"outcome\":\"");
        w.raw(self.outcome.as_str().as_bytes());
        w.raw(b"\",\"created\":");
        w.opt_str(self.created.as_deref());
        w.some_uint(b",\"key_attempt\":", self.key_attempt.map(u64::from));
        w.some_str(b",\"transition\":", self.transition.as_deref());
        w.some_str(b",\"resource\":", self.resource.as_deref());
        if self.replayed {
            w.raw(b",\"replayed\":true");
        }
        if let Some(v) = self.draw {
            w.raw(b",\"draw\":");
            w.float(v);
        }
        w.some_str(b",\"rejected\":", self.rejected.as_deref());
        if self.forwarded {
            w.raw(b",\"forwarded\":true");
        }
        w.some_uint(
            b",\"upstream_status\":",
            self.upstream_status.map(u64::from),
        );
        w.some_uint(b",\"upstream_us\":", self.upstream_us);
        if let Some(v) = &self.response_headers {
            w.raw(b",\"response_headers\":");
            w.map(v);
        }
        w.some_uint(b",\"response_bytes\":", self.response_bytes);
        if let Some(v) = &self.response_trailers {
            w.raw(b",\"response_trailers\":");
            w.map(v);
        }
        w.some_str(b",\"grpc_method\":", self.grpc_method.as_deref());
        w.some_str(b",\"grpc_status\":", self.grpc_status.map(|c| c.as_str()));
        w.some_str(b",\"grpc_message\":", self.grpc_message.as_deref());
        w.some_uint(
            b",\"grpc_previous_attempts\":",
            self.grpc_previous_attempts.map(u64::from),
        );
        w.some_uint(b",\"grpc_timeout_ms\":", self.grpc_timeout_ms);
        if let Some(v) = self.pushback_ms {
            w.raw(b",\"pushback_ms\":");
            w.int(v);
        }
        if let Some(v) = self.committed {
            w.raw(if v {
                b",\"committed\":true"
            } else {
                b",\"committed\":false"
            });
        }
        w.some_str(b",\"event_type\":", self.event_type.as_deref());
        w.some_uint(b",\"event_seq\":", self.event_seq.map(u64::from));
        w.some_str(b",\"forged\":", self.forged.as_deref());
        w.some_uint(
            b",\"delivery_attempt\":",
            self.delivery_attempt.map(u64::from),
        );
        if self.answer_dropped {
            w.raw(b",\"answer_dropped\":true");
        }
        if let Some(t) = &self.tcp {
            // One per connection, not per request: left to serde.
            w.raw(b",\"tcp\":");
            if serde_json::to_writer(&mut *w.out, t).is_err() {
                w.raw(b"null");
            }
        }
        if let Some(p) = &self.protocol {
            // Nested and varied: left to serde (the bytes it would write, by construction).
            w.raw(b",\"protocol\":");
            if serde_json::to_writer(&mut *w.out, p).is_err() {
                w.raw(b"null");
            }
        }
        w.raw(b"}");
    }
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    fn raw(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }

    fn uint(&mut self, v: u64) {
        self.raw(itoa::Buffer::new().format(v).as_bytes());
    }

    fn int(&mut self, v: i64) {
        self.raw(itoa::Buffer::new().format(v).as_bytes());
    }

    /// A float as `serde_json` writes it (NaN and the infinities as `null`): rare enough (a
    /// rule's draw) to be left to it.
    fn float(&mut self, v: f64) {
        if serde_json::to_writer(&mut *self.out, &v).is_err() {
            self.raw(b"null");
        }
    }

    /// `key` and the value when there is one; nothing when not (a skipped field).
    fn some_uint(&mut self, key: &[u8], v: Option<u64>) {
        if let Some(v) = v {
            self.raw(key);
            self.uint(v);
        }
    }

    fn some_str(&mut self, key: &[u8], v: Option<&str>) {
        if let Some(v) = v {
            self.raw(key);
            self.str(v);
        }
    }

    fn opt_str(&mut self, v: Option<&str>) {
        match v {
            Some(s) => self.str(s),
            None => self.raw(b"null"),
        }
    }

    fn map(&mut self, m: &BTreeMap<String, String>) {
        self.raw(b"{");
        for (i, (k, v)) in m.iter().enumerate() {
            if i > 0 {
                self.raw(b",");
            }
            self.str(k);
            self.raw(b":");
            self.str(v);
        }
        self.raw(b"}");
    }

    /// A JSON string: the runs that need no escape copied whole, `"` and `\` backslashed, the
    /// control characters as `serde_json` spells them (`\n`, `\t`, …, else `\u00XX`).
    fn str(&mut self, s: &str) {
        let bytes = s.as_bytes();
        self.out.reserve(bytes.len() + 2);
        self.out.push(b'"');
        let mut start = 0;
        let mut i = 0;
        while i < bytes.len() {
            // Eight bytes at a time while none of them needs escaping: the journal's strings
            // (paths, keys, hashes) rarely do, and this loop runs for every field of every entry.
            if let Some(chunk) = bytes.get(i..i + 8) {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                if !needs_escape(u64::from_le_bytes(word)) {
                    i += 8;
                    continue;
                }
            }
            let b = bytes[i];
            i += 1;
            if b >= 0x20 && b != b'"' && b != b'\\' {
                continue;
            }
            self.out.extend_from_slice(&bytes[start..i - 1]);
            match b {
                b'"' => self.raw(b"\\\""),
                b'\\' => self.raw(b"\\\\"),
                b'\n' => self.raw(b"\\n"),
                b'\r' => self.raw(b"\\r"),
                b'\t' => self.raw(b"\\t"),
                0x08 => self.raw(b"\\b"),
                0x0c => self.raw(b"\\f"),
                _ => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    self.raw(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(b >> 4)],
                        HEX[usize::from(b & 0xf)],
                    ]);
                }
            }
            start = i;
        }
        self.out.extend_from_slice(&bytes[start..]);
        self.out.push(b'"');
    }
}

/// Whether any of the eight bytes of `w` is a control character, `"` or `\\` — what a JSON
/// string escapes. (A byte of 0x80 or more, part of a UTF-8 sequence, never is.) The classic
/// word-at-a-time tests: `(x - 0x01…01·n) & !x & 0x80…80` is non-zero exactly when some byte of
/// `x` is below `n`, for `n` ≤ 0x80.
const fn needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    let q = w ^ (ONES * b'"' as u64);
    let quote = q.wrapping_sub(ONES) & !q;
    let b = w ^ (ONES * b'\\' as u64);
    let backslash = b.wrapping_sub(ONES) & !b;
    (control | quote | backslash) & HIGH != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time scan escapes exactly what serde_json escapes, whatever the position of
    /// the byte that needs it and whatever surrounds it.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut cases: Vec<String> = vec![
            String::new(),
            "a".into(),
            "plain ascii text of some length".into(),
            "ünïcödé → ✓ 𝄞".into(),
        ];
        for special in (0u8..0x20).chain([b'"', b'\\', 0x7f, b' ', b'~']) {
            for at in 0..20 {
                for len in [at + 1, at + 3, 24] {
                    let mut v: Vec<u8> = (0..len.max(at + 1))
                        .map(|i| b'a' + (i % 26) as u8)
                        .collect();
                    v[at] = special;
                    cases.push(String::from_utf8(v).unwrap());
                }
            }
        }
        cases.push("é\"\\\u{1}é".repeat(5));
        for s in cases {
            let mut out = Vec::new();
            Writer { out: &mut out }.str(&s);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&s).unwrap(),
                "{s:?}"
            );
        }
    }
    use crate::entry::Outcome;

    fn same_as_serde(e: &Entry) {
        let mut ours = Vec::new();
        e.write_json(&mut ours);
        let theirs = serde_json::to_vec(e).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
    }

    #[test]
    fn a_blank_entry_and_a_full_one_are_written_as_serde_writes_them() {
        same_as_serde(&Entry::blank(1));
        let mut headers = BTreeMap::new();
        headers.insert(
            "x-tenant".to_string(),
            "a \"b\" \\ c\u{1}\u{7f}é".to_string(),
        );
        headers.insert("authorization".to_string(), "Bearer\tx\r\n".to_string());
        let full = Entry {
            seq: u64::MAX,
            t_recv_us: 1,
            t_done_us: 2,
            t_body_us: Some(3),
            t_wire_us: Some(0),
            unix_ms: 1_796_216_400_945,
            unix_us: 1_796_216_400_945_314,
            replica: Some("replica-0".into()),
            method: "POST".into(),
            path: "/orders/\u{8}\u{c}\u{1f}".into(),
            query: Some("a=1&b=\"2\"".into()),
            headers: headers.clone(),
            idempotency_key: Some("k-ü-☃".into()),
            client_id: Some("client-7".into()),
            body_sha256: Some("e3b0".into()),
            body_len: 42,
            http_version: Some(HttpVersion::Http2),
            tls: true,
            conn_id: 9,
            rule: Some("r1".into()),
            fault: Some("status".into()),
            status: Some(503),
            outcome: Outcome::UpstreamError,
            created: Some("ord_1".into()),
            key_attempt: Some(u32::MAX),
            transition: Some("pending->paid".into()),
            resource: Some("ord_1".into()),
            replayed: true,
            draw: Some(0.123_456_789_012_345_68),
            rejected: Some("bad-request".into()),
            forwarded: true,
            upstream_status: Some(201),
            upstream_us: Some(717),
            response_headers: Some(headers.clone()),
            response_bytes: Some(1_048_576),
            response_trailers: Some(headers),
            grpc_method: Some("orders.v1.Orders/CreateOrder".into()),
            grpc_status: Some(crate::GrpcCode::Unavailable),
            grpc_message: Some("back \"end\"\n down".into()),
            grpc_previous_attempts: Some(u32::MAX),
            grpc_timeout_ms: Some(u64::MAX),
            pushback_ms: Some(i64::MIN),
            committed: Some(false),
            event_type: Some("invoice.paid".into()),
            event_seq: Some(u32::MAX),
            forged: Some("tampered\n".into()),
            delivery_attempt: Some(3),
            answer_dropped: true,
            tcp: Some(Box::new(crate::TcpConnection {
                proxy: "redis \"main\"".into(),
                connect_error: Some("connection refused".into()),
                dropped_up: 7,
                toxics: vec![crate::AppliedToxic {
                    name: "latency_downstream".into(),
                    kind: "latency".into(),
                    stream: "downstream".into(),
                    draw: Some(0.25),
                    t_us: 12,
                }],
                toxic: Some("timeout".into()),
                ..crate::TcpConnection::default()
            })),
            protocol: Some(crate::Protocol::Postgres(crate::PgStatement {
                proxy: "db".into(),
                statement: Some("COMMIT \"x\"\n".into()),
                control: Some(crate::TxControl::Commit),
                tx: 3,
                committed: Some(true),
                ..Default::default()
            })),
        };
        same_as_serde(&full);
        for draw in [0.0, -0.0, 1e-300, 0.5, 1e21, f64::NAN, f64::INFINITY] {
            same_as_serde(&Entry {
                draw: Some(draw),
                http_version: Some(HttpVersion::Http10),
                ..full.clone()
            });
        }
    }
}
