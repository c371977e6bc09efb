//! One HTTP/2 client connection, framed here (RFC 9113), its header blocks encoded and decoded by
//! [`crate::hpack`].
//!
//! A load driver asks little of HTTP/2 but asks it hundreds of thousands of times a second: open a
//! stream, send a request, read its answer whole. A general client keeps a state machine, a
//! flow-control account and a task handshake per stream; here a stream is a slot in a table under
//! the connection's lock, a request is its HEADERS (and DATA) appended to the connection's output
//! buffer, and the connection's driver — a future polled in the workers' own task — reads every
//! frame that arrived, completes the streams they answer, and writes whatever the workers queued
//! since, in one write.
//!
//! What the peer can do is handled: SETTINGS (concurrency, window and frame sizes) acknowledged,
//! PING answered, WINDOW_UPDATE for request bodies, the receive windows given back as answers are
//! read, RST_STREAM failing its stream (REFUSED_STREAM as `refused`), GOAWAY failing the streams it
//! did not take as `refused` and refusing new ones (the slot then opens a new connection),
//! CONTINUATION, padding, trailers (kept on the reply) and informational answers (skipped).
//!
//! Why strict: the client is the instrument a verdict is read from, and it faces whatever a server
//! sends. Every MUST of RFC 9113 and RFC 7541 that an answer can break is checked where its bytes
//! arrive, and each limit is counted before anything is kept: the decoded header list against
//! SETTINGS_MAX_HEADER_LIST_SIZE (RFC 7541 §4.1 sizes, field by field, before a `HeaderMap`
//! holds it), a body against its content-length, the receive windows against what was given. A
//! breach that concerns one stream fails that stream (RST_STREAM) as `protocol`; one that leaves
//! the connection's state unknown — a header block that cannot be decoded, a frame of the wrong
//! size, a flow-control window overrun — ends the connection (GOAWAY) and fails every stream on
//! it as `protocol`. A keep-alive PING finds a peer that went silent under open streams; an idle
//! connection is closed.
//!
//! The rooms, each below the ones that use it: `frame.rs` the wire format (frame heads, each
//! control frame's payload, the frames written), knowing no stream; `state.rs` the connection's
//! state under its lock (`ConnState`: the streams' slots, the windows, the
//! settings, the HPACK contexts) and the steps every handler takes on it; `receive.rs` one
//! handler per frame type and the header blocks' checks; `request.rs` a request's HEADERS;
//! `handle.rs` what a worker does with a connection; `driver.rs` the future that reads and
//! writes it.

mod driver;
mod frame;
mod handle;
mod receive;
mod request;
mod state;

pub(crate) use handle::{replay, start, Handle};
pub(crate) use request::Origin;
pub use state::StreamIdHasher;
pub(crate) use state::{Limits, OWN_STREAM_CAP};
