//! A statement's or command's journal entry, as the fault server's journal takes it.

use history::{Entry, Outcome};

/// What a session needs of the proxy that drives it: the journal's numbering and clock.
pub trait Host {
    /// The next journal `seq`. A session takes one when a statement or command arrives, and
    /// every `seq` it takes ends up in an entry it gives out (the journal waits for each).
    fn next_seq(&mut self) -> u64;
    /// Microseconds since the Unix epoch at `t_us` (the journal's µs since the server started).
    fn unix_us(&self, t_us: u64) -> u64;
}

/// A blank protocol entry: numbered, timed and on its connection.
pub(crate) fn blank(seq: u64, t_recv_us: u64, unix_us: u64, conn_id: u64) -> Entry {
    Entry {
        seq,
        t_recv_us,
        t_done_us: t_recv_us,
        unix_ms: unix_us / 1000,
        unix_us,
        conn_id,
        status: None,
        outcome: Outcome::Responded,
        ..Entry::default()
    }
}

/// `s` cut to at most `max` bytes on a character boundary.
pub(crate) fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}
