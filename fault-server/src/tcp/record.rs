//! A proxied connection's journal entry: what the pipe learns as it goes, written once, when the
//! connection ends.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use history::{AppliedToxic, EndedBy, Entry, Outcome, TcpConnection, TcpEnd};

use super::Sink;

/// Most toxics a connection's entry lists (a connection alive while an API client adds and
/// removes toxics in a loop would otherwise grow its entry without end).
pub(crate) const MAX_TOXICS_LISTED: usize = 32;

/// A connection's entry while it is open.
pub(crate) struct Record {
    sink: Arc<Sink>,
    entry: Box<Entry>,
}

impl Record {
    /// A connection `number` of `proxy` from `client`, accepted now.
    pub(crate) fn open(
        sink: Arc<Sink>,
        proxy: &str,
        upstream: &str,
        client: SocketAddr,
        number: u64,
    ) -> Record {
        let mut entry = Box::new(Entry::blank(0));
        entry.t_recv_us = sink.clock.now_us();
        let us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        entry.unix_us = us;
        entry.unix_ms = us / 1000;
        entry.replica.clone_from(&sink.replica);
        entry.conn_id = sink.conn_ids.fetch_add(1, Ordering::Relaxed) + 1;
        entry.tcp = Some(Box::new(TcpConnection {
            proxy: proxy.to_string(),
            client: client.to_string(),
            upstream: upstream.to_string(),
            number,
            ..TcpConnection::default()
        }));
        Record { sink, entry }
    }

    /// The connection's id in the journal: its statements' and commands' entries carry it.
    pub(crate) fn conn_id(&self) -> u64 {
        self.entry.conn_id
    }

    /// Where the connection's entries go.
    pub(crate) fn sink(&self) -> &Arc<Sink> {
        &self.sink
    }

    pub(crate) fn tcp(&mut self) -> &mut TcpConnection {
        self.entry.tcp.get_or_insert_with(Box::default)
    }

    /// Journal µs now.
    pub(crate) fn now_us(&self) -> u64 {
        self.sink.clock.now_us()
    }

    /// Notes a toxic that began to act, once per name and direction.
    pub(crate) fn applied(&mut self, name: &str, kind: &str, stream: &str, draw: Option<f64>) {
        let t_us = self.now_us();
        let tcp = self.tcp();
        if tcp.toxics.len() >= MAX_TOXICS_LISTED
            || tcp
                .toxics
                .iter()
                .any(|t| t.name == name && t.stream == stream)
        {
            return;
        }
        tcp.toxics.push(AppliedToxic {
            name: name.to_string(),
            kind: kind.to_string(),
            stream: stream.to_string(),
            draw,
            t_us,
        });
    }

    /// Numbers the entry and hands it to the journal: the connection ended `end`, by `by`.
    pub(crate) fn finish(mut self, by: EndedBy, end: TcpEnd, toxic: Option<String>) {
        let now = self.now_us();
        let e = &mut self.entry;
        e.t_done_us = now.max(e.t_recv_us);
        e.outcome = match (end, by) {
            (TcpEnd::Closed, EndedBy::Upstream) => Outcome::Responded,
            (TcpEnd::Closed, _) => Outcome::ClientClosed,
            (TcpEnd::Reset, _) => Outcome::Reset,
            (TcpEnd::TimedOut, _) => Outcome::Hung,
            (TcpEnd::Cut | TcpEnd::Shutdown, _) => Outcome::Dropped,
            (TcpEnd::Refused, _) => Outcome::UpstreamError,
            (TcpEnd::Rejected, _) => Outcome::Rejected,
        };
        if end == TcpEnd::Rejected {
            e.rejected = Some("connection-limit".to_string());
        }
        let tcp = e.tcp.get_or_insert_with(Box::default);
        tcp.ended_by = by;
        tcp.end = end;
        tcp.toxic = toxic;
        let (epoch, seq) = self.sink.seq.next();
        e.seq = seq;
        self.sink
            .emitter
            .send_finished(epoch, std::mem::take(&mut self.entry));
    }
}
