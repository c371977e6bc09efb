//! One proxied connection: two directions (links), each reading its source, pushing what it read
//! through its chain of toxics, and writing what is due to its destination.
//!
//! Both directions run in one task, one loop: a connection costs one small future and no buffer
//! while it is idle (a read lands in a buffer of the thread's, and what its destination takes at
//! once never leaves it), and a direction's toxics, its other direction and the proxy's changes
//! are all seen in one place. A direction holds at most `buffer` bytes waiting for their time or
//! for a slow reader; past that it stops reading its source, so the sender is held back by TCP
//! and no client can make the proxy's memory grow.
//!
//! The end of a direction (a FIN) is passed on as a half-close once everything before it was
//! written, so a client that half-closes still reads its answer; the connection ends when both
//! directions have ended, when a peer resets or fails, when a toxic cuts it, or when its proxy
//! stops. A reset is passed on as a reset.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, Bytes};
use history::{EndedBy, TcpEnd};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::config::Stream;
use super::protocol::{side_of, Out, Wire};
use super::record::Record;
use super::toxics::{Cut, Cx, End, Item, Piece, Running};
use super::{Installed, ToxicSet};

/// What a queued item costs besides its bytes (its slot, its `Bytes`): counted against the
/// buffer, so a toxic that cuts data into one-byte slices cannot hold a million of them.
const ITEM_COST: usize = 64;

/// The largest read.
const READ_SIZE: usize = 64 * 1024;

/// Reads in a row from one source before the loop looks at the rest.
const READS_PER_TURN: usize = 8;

thread_local! {
    /// Where reads land: one buffer per thread, not per connection, so an idle connection holds
    /// none. Borrowed only between a read and the write that follows it, with no await between.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_SIZE]);
}

/// What a connection needs from its proxy.
pub(crate) struct Setup {
    /// The proxy's toxics as they change.
    pub(crate) toxics: watch::Receiver<Arc<ToxicSet>>,
    /// Fires when the proxy stops.
    pub(crate) stop: CancellationToken,
    /// Bytes one direction may hold.
    pub(crate) buffer: usize,
    /// The seed of every draw.
    pub(crate) seed: u64,
    /// The connection's number at its proxy.
    pub(crate) number: u64,
    /// The client's address.
    pub(crate) client_ip: IpAddr,
    /// A protocol proxy's reading of the connection (`protocol: postgres|redis`).
    pub(crate) wire: Option<Wire>,
}

/// How a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Both directions closed in order; `by` closed first.
    Closed(EndedBy),
    /// A peer reset or failed.
    Reset(EndedBy),
    /// A toxic cut it.
    Cut(Cut, String),
    /// The proxy stopped.
    Shutdown,
}

impl Ending {
    /// The journal's words for it: who, how, which toxic.
    pub(crate) fn journal(self) -> (EndedBy, TcpEnd, Option<String>) {
        match self {
            Ending::Closed(by) => (by, TcpEnd::Closed, None),
            Ending::Reset(by) => (by, TcpEnd::Reset, None),
            Ending::Cut(Cut::Close, t) => (EndedBy::Proxy, TcpEnd::Cut, Some(t)),
            Ending::Cut(Cut::Reset, t) => (EndedBy::Proxy, TcpEnd::Reset, Some(t)),
            Ending::Cut(Cut::TimedOut, t) => (EndedBy::Proxy, TcpEnd::TimedOut, Some(t)),
            Ending::Shutdown => (EndedBy::Proxy, TcpEnd::Shutdown, None),
        }
    }
}

enum Queued {
    Data(Piece),
    Fin(Instant),
    Cut(Cut, Arc<str>, Instant),
}

struct Stage {
    toxic: Arc<Installed>,
    run: Running,
}

/// One direction of the connection.
struct Link {
    stream: Stream,
    /// Which side it reads: the client for `upstream`, the upstream for `downstream`.
    source: EndedBy,
    chain: Vec<Stage>,
    queue: VecDeque<Queued>,
    /// Bytes (and item costs) in `queue`.
    queued: usize,
    /// The source sent its FIN.
    eof_read: bool,
    /// The FIN was passed on.
    fin_sent: bool,
    /// The last write would have blocked: wait until the destination is writable.
    blocked: bool,
    read: u64,
    delivered: u64,
    /// Draw numbers handed out in this direction.
    subject: String,
}

impl Link {
    fn new(stream: Stream, number: u64) -> Link {
        Link {
            stream,
            source: match stream {
                Stream::Upstream => EndedBy::Client,
                Stream::Downstream => EndedBy::Upstream,
            },
            chain: Vec::new(),
            queue: VecDeque::new(),
            queued: 0,
            eof_read: false,
            fin_sent: false,
            blocked: false,
            read: 0,
            delivered: 0,
            subject: format!("{number}/{}", stream.as_str()),
        }
    }

    fn frozen(&self) -> bool {
        self.chain.iter().any(|s| s.run.freezes())
    }

    fn wants_read(&self, buffer: usize) -> bool {
        !self.eof_read && !self.frozen() && self.queued < buffer
    }

    /// How much the next read may take so that what it becomes stays within `buffer`: a
    /// `slicer` turns a byte into a slice that costs [`ITEM_COST`] more.
    fn read_room(&self, buffer: usize) -> usize {
        let room = buffer.saturating_sub(self.queued);
        let smallest = self
            .chain
            .iter()
            .filter_map(|s| match &s.toxic.spec.kind {
                super::toxics::ToxicKind::Slicer(t) => {
                    usize::try_from(t.average_size.saturating_sub(t.size_variation)).ok()
                }
                _ => None,
            })
            .min();
        let room = match smallest {
            Some(slice) => room / (1 + ITEM_COST / slice.max(1)),
            None => room,
        };
        room.clamp(1, READ_SIZE)
    }

    fn wants_write(&self) -> bool {
        self.blocked && !self.frozen()
    }

    /// Writes what a protocol decided for this direction (`outs`, emptied): what is due while
    /// nothing waits before it goes at once, in one vectored write (a read's messages in one
    /// system call, as a plain proxy writes a read); the rest through the chain onto the queue.
    fn send(
        &mut self,
        dst: &TcpStream,
        dst_side: EndedBy,
        outs: &mut Vec<Out>,
        name: &Arc<str>,
        seed: u64,
        now: Instant,
    ) -> Result<(), Ending> {
        let mut start = 0;
        if self.chain.is_empty() && self.queue.is_empty() && !self.frozen() {
            loop {
                let mut slices = [IoSlice::new(&[]); 32];
                let mut k = 0;
                while k < slices.len() {
                    match outs.get(start + k) {
                        Some(Out::Data(b, due)) if *due <= now => {
                            slices[k] = IoSlice::new(b);
                            k += 1;
                        }
                        _ => break,
                    }
                }
                if k == 0 {
                    break;
                }
                let mut written = match dst.try_write_vectored(&slices[..k]) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                    Err(e) => return Err(peer_failed(&e, dst_side)),
                };
                self.delivered += written as u64;
                let mut whole = 0;
                while whole < k {
                    let len = match &outs[start + whole] {
                        Out::Data(b, _) => b.len(),
                        Out::Close(..) => 0,
                    };
                    if written < len {
                        break;
                    }
                    written -= len;
                    whole += 1;
                }
                start += whole;
                if whole < k {
                    // The socket took part: the rest waits for it, in order.
                    if let Some(Out::Data(b, _)) = outs.get_mut(start) {
                        b.advance(written);
                    }
                    self.blocked = true;
                    break;
                }
            }
        }
        for out in outs.drain(..).skip(start) {
            match out {
                Out::Data(data, due) => self.push(Item::Data(Piece { data, due }), seed),
                Out::Close(cut, due) => {
                    self.queue.push_back(Queued::Cut(cut, name.clone(), due));
                }
            }
        }
        Ok(())
    }

    /// Pushes an item through the chain onto the queue.
    fn push(&mut self, item: Item, seed: u64) {
        let mut items = vec![item];
        for (i, stage) in self.chain.iter_mut().enumerate() {
            let mut out = Vec::with_capacity(items.len());
            let mut cx = Cx {
                seed,
                toxic: &stage.toxic.key,
                subject: &self.subject,
                index: i,
                dropped: 0,
            };
            for it in items {
                stage
                    .run
                    .push(&stage.toxic.spec.kind, it, &mut out, &mut cx);
            }
            items = out;
        }
        for it in items {
            let q = match it {
                Item::Data(p) => {
                    self.queued += p.data.len() + ITEM_COST;
                    Queued::Data(p)
                }
                Item::End(End::Fin, due) => Queued::Fin(due),
                Item::End(End::Cut(cut, i), due) => {
                    let name: Arc<str> = self.chain.get(i).map_or_else(
                        || Arc::from("toxic"),
                        |s| Arc::from(s.toxic.spec.name.as_str()),
                    );
                    Queued::Cut(cut, name, due)
                }
            };
            self.queue.push_back(q);
        }
    }

    /// When the front of the queue is due, if it waits for its time.
    fn next_due(&self, now: Instant) -> Option<Instant> {
        if self.frozen() {
            return None;
        }
        let due = match self.queue.front()? {
            Queued::Data(p) => p.due,
            Queued::Fin(d) | Queued::Cut(_, _, d) => *d,
        };
        (due > now).then_some(due)
    }

    /// Writes what is due; the connection's end when writing ends it.
    fn flush(&mut self, dst: &TcpStream, dst_side: EndedBy, now: Instant) -> Result<(), Ending> {
        if self.frozen() {
            return Ok(());
        }
        self.blocked = false;
        while let Some(front) = self.queue.front_mut() {
            match front {
                Queued::Data(p) => {
                    if p.due > now {
                        break;
                    }
                    match dst.try_write(&p.data) {
                        Ok(n) => {
                            self.delivered += n as u64;
                            self.queued = self.queued.saturating_sub(n);
                            p.data.advance(n);
                            if p.data.is_empty() {
                                self.queued = self.queued.saturating_sub(ITEM_COST);
                                self.queue.pop_front();
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            self.blocked = true;
                            break;
                        }
                        Err(e) => return Err(peer_failed(&e, dst_side)),
                    }
                }
                Queued::Fin(due) => {
                    if *due > now {
                        break;
                    }
                    shutdown_write(dst);
                    self.fin_sent = true;
                    self.queue.pop_front();
                }
                Queued::Cut(cut, name, due) => {
                    if *due > now {
                        break;
                    }
                    return Err(Ending::Cut(*cut, name.to_string()));
                }
            }
        }
        Ok(())
    }
}

/// The end a failed read or write of `side`'s socket makes.
fn peer_failed(e: &io::Error, side: EndedBy) -> Ending {
    match e.kind() {
        io::ErrorKind::BrokenPipe => Ending::Closed(side),
        _ => Ending::Reset(side),
    }
}

/// Passes a FIN on: shuts the socket's sending side, keeps its receiving side.
fn shutdown_write(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    // SAFETY: `shutdown` on a socket this task holds; it touches no memory.
    unsafe { libc::shutdown(s.as_raw_fd(), libc::SHUT_WR) };
}

/// What one read did.
enum Read {
    Data,
    Eof,
    Failed(Ending),
}

/// What woke the connection.
enum Event {
    /// The proxy stopped.
    Stop,
    /// The proxy's toxics changed.
    Changed,
    /// Data came, a destination can take more, or a due time passed: look again.
    Progress,
    /// A read or a write ended the connection.
    End(Ending),
}

/// The proxy's side of a connection's wait: its stop, or a change of its toxics. Made once, and
/// again after each change, not at every wake-up: registering with the token and the channel
/// costs a lock each.
type Control = Pin<Box<dyn Future<Output = Event> + Send>>;

/// The connection between `client` and `upstream`, until it ends.
pub(crate) struct Pipe {
    client: TcpStream,
    upstream: TcpStream,
    setup: Setup,
    up: Link,
    down: Link,
    /// The next moment a toxic's window opens or closes for this connection.
    boundary: Option<Instant>,
    /// Which side sent its FIN first.
    first_fin: Option<EndedBy>,
    /// A protocol proxy's reading of the connection.
    wire: Option<Wire>,
}

impl Pipe {
    pub(crate) fn new(client: TcpStream, upstream: TcpStream, mut setup: Setup) -> Pipe {
        let number = setup.number;
        let wire = setup.wire.take();
        Pipe {
            client,
            upstream,
            setup,
            up: Link::new(Stream::Upstream, number),
            down: Link::new(Stream::Downstream, number),
            boundary: None,
            first_fin: None,
            wire,
        }
    }

    /// The connection ended as `end` says: a protocol proxy journals what was still in flight.
    pub(crate) fn end_wire(&mut self, end: &Ending) {
        if let Some(w) = self.wire.as_mut() {
            let by = match end {
                Ending::Closed(by) | Ending::Reset(by) => *by,
                Ending::Cut(..) | Ending::Shutdown => EndedBy::Proxy,
            };
            w.close(side_of(by));
        }
    }

    /// The two sockets, to close as the end says.
    pub(crate) fn into_streams(self) -> (TcpStream, TcpStream) {
        (self.client, self.upstream)
    }

    /// Bytes delivered (up, down) and read but not delivered (up, down).
    pub(crate) fn bytes(&self) -> (u64, u64, u64, u64) {
        (
            self.up.delivered,
            self.down.delivered,
            self.up.read.saturating_sub(self.up.delivered),
            self.down.read.saturating_sub(self.down.delivered),
        )
    }

    fn control(&self) -> Control {
        let stop = self.setup.stop.clone();
        let mut toxics = self.setup.toxics.clone();
        Box::pin(async move {
            tokio::select! {
                biased;
                () = stop.cancelled() => Event::Stop,
                r = toxics.changed() => match r {
                    Ok(()) => Event::Changed,
                    // The proxy is gone: its stop follows.
                    Err(_) => {
                        stop.cancelled().await;
                        Event::Stop
                    }
                },
            }
        })
    }

    /// Runs the connection to its end.
    pub(crate) async fn run(&mut self, record: &mut Record) -> Ending {
        let set = self.setup.toxics.borrow_and_update().clone();
        if let Err(end) = self.rebuild(&set, Instant::now(), record) {
            return end;
        }
        let mut control = self.control();
        let mut sleep = super::timer::Sleep::new();
        loop {
            let now = Instant::now();
            if self.boundary.is_some_and(|b| b <= now) {
                let set = self.setup.toxics.borrow().clone();
                if let Err(end) = self.rebuild(&set, now, record) {
                    return end;
                }
            }
            if let Some(end) = self.deadline_passed(now) {
                return end;
            }
            if let Err(end) = self.up.flush(&self.upstream, EndedBy::Upstream, now) {
                return end;
            }
            if let Err(end) = self.down.flush(&self.client, EndedBy::Client, now) {
                return end;
            }
            if let Some(end) = self.ended() {
                return end;
            }
            let wake = self.next_wake(now);
            sleep.reset(wake);
            let event = std::future::poll_fn(|cx| {
                self.poll_event(cx, &mut control, &mut sleep, wake.is_some())
            })
            .await;
            match event {
                Event::Stop => return Ending::Shutdown,
                Event::Changed => {
                    let set = self.setup.toxics.borrow_and_update().clone();
                    if let Err(end) = self.rebuild(&set, Instant::now(), record) {
                        return end;
                    }
                    control = self.control();
                }
                Event::Progress => {}
                Event::End(end) => return end,
            }
        }
    }

    /// One look at everything the connection waits for: the proxy, the timer, both sources
    /// (read at once, a few times over, when they have data), and the destinations a write
    /// waits on.
    fn poll_event(
        &mut self,
        cx: &mut Context<'_>,
        control: &mut Control,
        sleep: &mut super::timer::Sleep,
        timed: bool,
    ) -> Poll<Event> {
        if let Poll::Ready(e) = control.as_mut().poll(cx) {
            return Poll::Ready(e);
        }
        if timed && Pin::new(&mut *sleep).poll(cx).is_ready() {
            return Poll::Ready(Event::Progress);
        }
        let mut progressed = false;
        let buffer = self.setup.buffer;
        for stream in [Stream::Upstream, Stream::Downstream] {
            for _ in 0..READS_PER_TURN {
                if !self.link(stream).wants_read(buffer) {
                    break;
                }
                match self.poll_read_once(cx, stream) {
                    Poll::Pending => break,
                    Poll::Ready(Read::Data) => progressed = true,
                    Poll::Ready(Read::Eof) => {
                        let link = self.link(stream);
                        link.eof_read = true;
                        let side = link.source;
                        self.first_fin.get_or_insert(side);
                        progressed = true;
                        break;
                    }
                    Poll::Ready(Read::Failed(end)) => return Poll::Ready(Event::End(end)),
                }
            }
        }
        if progressed {
            return Poll::Ready(Event::Progress);
        }
        if self.up.wants_write() {
            match self.upstream.poll_write_ready(cx) {
                Poll::Ready(Ok(())) => return Poll::Ready(Event::Progress),
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Event::End(peer_failed(&e, EndedBy::Upstream)))
                }
                Poll::Pending => {}
            }
        }
        if self.down.wants_write() {
            match self.client.poll_write_ready(cx) {
                Poll::Ready(Ok(())) => return Poll::Ready(Event::Progress),
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Event::End(peer_failed(&e, EndedBy::Client)))
                }
                Poll::Pending => {}
            }
        }
        Poll::Pending
    }

    /// Whether the connection is over without a cut: both FINs passed on, or one direction
    /// frozen while the side it would write to has left.
    fn ended(&self) -> Option<Ending> {
        if self.up.fin_sent && self.down.fin_sent {
            return Some(Ending::Closed(self.first_fin.unwrap_or(EndedBy::Client)));
        }
        if self.down.frozen() && self.up.eof_read {
            return Some(Ending::Closed(EndedBy::Client));
        }
        if self.up.frozen() && self.down.eof_read {
            return Some(Ending::Closed(EndedBy::Upstream));
        }
        None
    }

    fn deadline_passed(&self, now: Instant) -> Option<Ending> {
        for link in [&self.up, &self.down] {
            for s in &link.chain {
                if let Some((at, cut)) = s.run.deadline() {
                    if at <= now {
                        return Some(Ending::Cut(cut, s.toxic.spec.name.clone()));
                    }
                }
            }
        }
        None
    }

    fn next_wake(&self, now: Instant) -> Option<Instant> {
        let deadlines = [&self.up, &self.down]
            .into_iter()
            .flat_map(|l| l.chain.iter())
            .filter_map(|s| s.run.deadline().map(|(t, _)| t));
        [
            self.up.next_due(now),
            self.down.next_due(now),
            self.boundary,
        ]
        .into_iter()
        .flatten()
        .chain(deadlines)
        .min()
    }

    fn link(&mut self, stream: Stream) -> &mut Link {
        match stream {
            Stream::Upstream => &mut self.up,
            Stream::Downstream => &mut self.down,
        }
    }

    /// Reads the direction's source once, if it has data (a short read tells the runtime the
    /// socket is drained, so no read is spent on learning it), and passes what came on.
    fn poll_read_once(&mut self, cx: &mut Context<'_>, stream: Stream) -> Poll<Read> {
        if self.wire.as_ref().is_some_and(|w| !w.passive()) {
            return self.poll_read_wire(cx, stream);
        }
        let seed = self.setup.seed;
        let buffer = self.setup.buffer;
        let (src, dst, src_side, dst_side, link) = match stream {
            Stream::Upstream => (
                &mut self.client,
                &self.upstream,
                EndedBy::Client,
                EndedBy::Upstream,
                &mut self.up,
            ),
            Stream::Downstream => (
                &mut self.upstream,
                &self.client,
                EndedBy::Upstream,
                EndedBy::Client,
                &mut self.down,
            ),
        };
        let room = link.read_room(buffer);
        SCRATCH.with_borrow_mut(|buf| {
            let mut rb = ReadBuf::new(&mut buf[..room]);
            match Pin::new(src).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Read::Failed(peer_failed(&e, src_side))),
                Poll::Ready(Ok(())) => {}
            }
            let data = rb.filled();
            let n = data.len();
            if n == 0 {
                link.push(Item::End(End::Fin, Instant::now()), seed);
                return Poll::Ready(Read::Eof);
            }
            link.read += n as u64;
            if link.chain.is_empty() && link.queue.is_empty() {
                // Nothing to wait for: straight through, copied only if the destination
                // does not take it all.
                let written = match dst.try_write(data) {
                    Ok(w) => w,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                    Err(e) => return Poll::Ready(Read::Failed(peer_failed(&e, dst_side))),
                };
                link.delivered += written as u64;
                if written < n {
                    link.blocked = true;
                    link.queued += n - written + ITEM_COST;
                    link.queue.push_back(Queued::Data(Piece {
                        data: Bytes::copy_from_slice(&data[written..]),
                        due: Instant::now(),
                    }));
                }
            } else {
                let piece = Piece {
                    data: Bytes::copy_from_slice(data),
                    due: Instant::now(),
                };
                link.push(Item::Data(piece), seed);
            }
            Poll::Ready(Read::Data)
        })
    }

    /// [`Pipe::poll_read_once`] for a protocol proxy: what was read goes to the protocol's
    /// reader, and what its session decided to each direction's destination.
    fn poll_read_wire(&mut self, cx: &mut Context<'_>, stream: Stream) -> Poll<Read> {
        let (seed, buffer) = (self.setup.seed, self.setup.buffer);
        let room = self.link(stream).read_room(buffer);
        let Pipe {
            client,
            upstream,
            up,
            down,
            wire,
            ..
        } = self;
        let Some(wire) = wire.as_mut() else {
            return Poll::Pending;
        };
        let src_side = match stream {
            Stream::Upstream => EndedBy::Client,
            Stream::Downstream => EndedBy::Upstream,
        };
        SCRATCH.with_borrow_mut(|buf| {
            let mut rb = ReadBuf::new(&mut buf[..room]);
            let polled = match stream {
                Stream::Upstream => Pin::new(&mut *client).poll_read(cx, &mut rb),
                Stream::Downstream => Pin::new(&mut *upstream).poll_read(cx, &mut rb),
            };
            match polled {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Read::Failed(peer_failed(&e, src_side))),
                Poll::Ready(Ok(())) => {}
            }
            let data = rb.filled();
            let now = Instant::now();
            let eof = data.is_empty();
            if eof {
                wire.finish(stream, now);
            } else {
                match stream {
                    Stream::Upstream => up.read += data.len() as u64,
                    Stream::Downstream => down.read += data.len() as u64,
                }
                wire.feed(stream, data, now);
            }
            let name = wire.name().clone();
            if let Err(end) = up.send(upstream, EndedBy::Upstream, &mut wire.up, &name, seed, now) {
                return Poll::Ready(Read::Failed(end));
            }
            if let Err(end) = down.send(client, EndedBy::Client, &mut wire.down, &name, seed, now) {
                return Poll::Ready(Read::Failed(end));
            }
            if eof {
                let link = match stream {
                    Stream::Upstream => up,
                    Stream::Downstream => down,
                };
                link.push(Item::End(End::Fin, now), seed);
                return Poll::Ready(Read::Eof);
            }
            Poll::Ready(Read::Data)
        })
    }

    /// Puts each direction's chain in line with the proxy's toxics at `now`: which of them act
    /// on this connection, keeping the state of those that stay. A removed toxic may end the
    /// connection (a `timeout`).
    fn rebuild(&mut self, set: &ToxicSet, now: Instant, record: &mut Record) -> Result<(), Ending> {
        let (seed, number, ip) = (self.setup.seed, self.setup.number, self.setup.client_ip);
        let mut boundary: Option<Instant> = None;
        for link in [&mut self.up, &mut self.down] {
            let mut old: Vec<Stage> = std::mem::take(&mut link.chain);
            for t in set.toxics.iter().filter(|t| t.spec.stream == link.stream) {
                let when = &t.spec.when;
                if !when.selects(number, ip) {
                    continue;
                }
                let (acts, draw) = toxicity(t, seed, number);
                if !acts {
                    continue;
                }
                let elapsed = now.saturating_duration_since(t.installed);
                if let Some(b) = when.next_boundary(elapsed) {
                    let at = t.installed + b;
                    boundary = Some(boundary.map_or(at, |x| x.min(at)));
                }
                if !when.in_window(elapsed) {
                    continue;
                }
                let kept = old
                    .iter()
                    .position(|s| Arc::ptr_eq(&s.toxic, t))
                    .or_else(|| {
                        // An updated toxic keeps what it counted (Toxiproxy's stateful toxics).
                        old.iter().position(|s| {
                            s.toxic.spec.name == t.spec.name
                                && matches!(
                                    (&s.run, &t.spec.kind),
                                    (
                                        Running::LimitData(_),
                                        super::toxics::ToxicKind::LimitData(_)
                                    )
                                )
                        })
                    });
                let run = match kept {
                    Some(i) => old.remove(i).run,
                    None => {
                        record.applied(
                            &t.spec.name,
                            t.spec.kind.type_name(),
                            t.spec.stream.as_str(),
                            draw,
                        );
                        t.spec.kind.start(now)
                    }
                };
                link.chain.push(Stage {
                    toxic: t.clone(),
                    run,
                });
            }
            for gone in &old {
                // An update replaces a toxic without removing it.
                let replaced = link
                    .chain
                    .iter()
                    .any(|s| s.toxic.spec.name == gone.toxic.spec.name);
                if let (false, Some(cut)) = (replaced, gone.run.on_removal()) {
                    return Err(Ending::Cut(cut, gone.toxic.spec.name.clone()));
                }
            }
        }
        self.boundary = boundary;
        Ok(())
    }
}

/// Whether a toxic acts on connection `number`: its `toxicity` held against a seeded draw (none
/// drawn at 0 or 1).
pub(crate) fn toxicity(t: &Installed, seed: u64, number: u64) -> (bool, Option<f64>) {
    let p = t.spec.toxicity;
    if p >= 1.0 {
        return (true, None);
    }
    if p <= 0.0 {
        return (false, None);
    }
    let u = crate::draw::uniform(seed, &t.key, &number.to_string(), 0, 0);
    (u < p, Some(u))
}

/// Closes both sockets as the end says: a reset is passed on as a reset.
pub(crate) fn close(client: TcpStream, upstream: TcpStream, end: &Ending) {
    let (reset_client, reset_upstream) = match end {
        Ending::Reset(EndedBy::Client) => (false, true),
        Ending::Reset(EndedBy::Upstream) => (true, false),
        Ending::Cut(Cut::Reset, _) | Ending::Reset(EndedBy::Proxy) => (true, true),
        _ => (false, false),
    };
    if reset_client {
        let _ = client.set_zero_linger();
    }
    if reset_upstream {
        let _ = upstream.set_zero_linger();
    }
    drop(client);
    drop(upstream);
}
