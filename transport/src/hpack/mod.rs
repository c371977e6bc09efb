//! HPACK (RFC 7541), the header compression of HTTP/2, both ways: [`encode`] writes the requests'
//! header blocks through the connection's own encoding context, [`decode`] reads the answers'.
//!
//! The two sides share nothing but the format: each connection has one table per direction, the
//! server's decoder following what this side's encoder added (`encode.rs`), this side's decoder
//! following what the server's encoder added (`decode.rs`), so each is its own state machine.

pub(crate) mod decode;
pub(crate) mod encode;

pub(crate) use decode::{field_name, Decoder, Field};
pub(crate) use encode::Encoder;
