//! The instant a burst's members send together.
//!
//! Every member waits at one barrier. A member sending with `last-byte` (HTTP/1.1) has already
//! written all of its request but the final bytes, and instead of writing those itself when the
//! barrier opens, it hands them over beforehand — with a duplicate of its socket — and whoever
//! completes the barrier writes every member's final bytes, back to back, from one thread.
//!
//! Why not each member its own write: on two cores, ten woken tasks write one after another, each
//! after its own wake-up, and any of them can be delayed by whatever else the cores run; the
//! spread of the last bytes' arrival is then the length of that queue (tens to hundreds of
//! microseconds, with outliers near a millisecond). One thread writing ten short buffers in a
//! loop is bounded by the cost of ten `write`s.
//!
//! On Linux the writes are one `io_uring_enter`: a non-blocking send per member, all submitted
//! together, so the loop cannot be preempted between two of them by a thread the previous write
//! woke (the server's, on the same core) — which a `write` per member, each returning to user
//! space, can be, stretching the spread by a time slice. Where io_uring is unavailable (a
//! seccomp profile that forbids it, an old kernel), the release falls back to the loop of writes.
//!
//! Over TLS the final bytes handed over are the encrypted record of the request's last byte, taken
//! from the TLS session without being sent: the session has assigned its sequence number, so the
//! record is written to the TCP socket as it is.

use std::io::Write;
use std::net::TcpStream as StdTcpStream;
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::sync::{watch, Barrier};

use super::stream::Stream;

/// The release point of one burst round: `parties` arrivals open it.
pub struct Release {
    barrier: Barrier,
    parties: usize,
    /// Whether the final bytes may go through io_uring (the loop of writes otherwise).
    ring: bool,
    handed: Mutex<Handed>,
    written: watch::Sender<bool>,
}

#[derive(Default)]
struct Handed {
    /// The ring the final bytes are submitted through, set up at the first hand-over.
    #[cfg(target_os = "linux")]
    ring: Option<uring::Ring>,
    /// The final bytes of each member that handed them over, with a duplicate of its socket.
    pending: Vec<(StdTcpStream, Vec<u8>)>,
    /// How many of each member's bytes the release wrote (by hand-over order).
    written: Vec<usize>,
    /// When the release began writing.
    at: Option<Instant>,
    /// Whether the release wrote through io_uring.
    by_ring: bool,
}

/// A member's final bytes, handed over to a release (or kept, when its socket could not be
/// duplicated).
pub(crate) struct Handover {
    slot: Option<usize>,
    bytes: Vec<u8>,
}

impl Release {
    /// A release opened by the arrival of `parties`: every member of the round.
    pub fn new(parties: usize) -> Release {
        Release {
            barrier: Barrier::new(parties),
            parties,
            ring: true,
            handed: Mutex::new(Handed::default()),
            written: watch::channel(false).0,
        }
    }

    /// Arrives and waits until every party has; the last to arrive writes the final bytes handed
    /// over.
    pub async fn wait(&self) {
        if self.barrier.wait().await.is_leader() {
            self.write_handed();
        }
    }

    /// Hands over `bytes` (what goes on the wire as it is), to be written on `stream`'s socket
    /// when the release opens. When the socket cannot be duplicated, the member keeps its bytes
    /// and [`Release::finish`] writes them.
    pub(crate) fn hand_over(&self, stream: &Stream, bytes: Vec<u8>) -> Handover {
        let Ok(fd) = stream.tcp().as_fd().try_clone_to_owned() else {
            return Handover { slot: None, bytes };
        };
        let mut handed = self.handed.lock().unwrap_or_else(|e| e.into_inner());
        #[cfg(target_os = "linux")]
        if self.ring && handed.ring.is_none() {
            handed.ring = uring::Ring::new(self.parties);
        }
        handed.pending.push((StdTcpStream::from(fd), bytes.clone()));
        Handover {
            slot: Some(handed.pending.len() - 1),
            bytes,
        }
    }

    /// Writes every handed-over member's bytes, each with one non-blocking `write`, then lets the
    /// members go on. A write that is short (a full send buffer) or fails leaves the rest to its
    /// member, whose own write then reports any error.
    fn write_handed(&self) {
        let mut handed = self.handed.lock().unwrap_or_else(|e| e.into_inner());
        let pending = std::mem::take(&mut handed.pending);
        handed.at = Some(Instant::now());
        // Whether the bytes and the sockets may be freed: not while a send may still use them.
        let mut settled = true;
        #[cfg(target_os = "linux")]
        let sent = handed.ring.as_mut().map(|ring| ring.send_all(&pending));
        #[cfg(not(target_os = "linux"))]
        let sent: Option<(Vec<usize>, bool)> = None;
        match sent {
            Some((written, all_known)) => {
                handed.by_ring = true;
                handed.written = written;
                if !all_known {
                    // The ring failed with sends possibly still in flight: their buffers and
                    // sockets must outlive them, so they are never freed, and a member whose
                    // send is unknown does not write again (a doubled byte would corrupt its
                    // request; a missing one shows as its timeout).
                    settled = false;
                    #[cfg(target_os = "linux")]
                    std::mem::forget(handed.ring.take());
                }
            }
            None => {
                handed.written = pending
                    .iter()
                    .map(|(socket, bytes)| (&*socket).write(bytes).unwrap_or(0))
                    .collect();
            }
        }
        drop(handed);
        self.written.send_replace(true);
        // The duplicates close here, after the members were let go; the connections stay open.
        if settled {
            drop(pending);
        } else {
            std::mem::forget(pending);
        }
    }

    /// After [`Release::wait`]: writes what the release did not of `handover`'s bytes, on the
    /// member's own socket. Returns when the bytes left: the release's instant if it wrote them.
    pub(crate) async fn finish(
        &self,
        handover: Handover,
        stream: &mut Stream,
    ) -> std::io::Result<Instant> {
        let (written, at) = match handover.slot {
            None => (0, None),
            Some(slot) => {
                let mut done = self.written.subscribe();
                let _ = done.wait_for(|w| *w).await;
                let handed = self.handed.lock().unwrap_or_else(|e| e.into_inner());
                (handed.written.get(slot).copied().unwrap_or(0), handed.at)
            }
        };
        if written >= handover.bytes.len() {
            return Ok(at.unwrap_or_else(Instant::now));
        }
        let leaving = Instant::now();
        let tcp = stream.tcp_mut();
        tcp.write_all(&handover.bytes[written..]).await?;
        Ok(leaving)
    }
}

/// The final bytes of a release, submitted through io_uring in one system call.
#[cfg(target_os = "linux")]
mod uring {
    use std::net::TcpStream;
    use std::os::fd::AsRawFd;

    use io_uring::{opcode, types, IoUring};

    /// Largest release submitted through a ring; a larger one writes in a loop.
    const MAX_ENTRIES: usize = 4096;

    pub(super) struct Ring(IoUring);

    impl Ring {
        /// A ring for `parties` sends; `None` when io_uring is unavailable here.
        pub(super) fn new(parties: usize) -> Option<Ring> {
            if parties > MAX_ENTRIES {
                return None;
            }
            let entries = u32::try_from(parties.max(1).next_power_of_two()).ok()?;
            IoUring::new(entries).ok().map(Ring)
        }

        /// Sends each member's bytes on its socket, without waiting for room in a send buffer
        /// (a send that would block completes short, and its member writes the rest). Returns
        /// the bytes each send wrote, and whether every send is known to have completed (when
        /// the ring fails, those unaccounted for are reported as fully written).
        pub(super) fn send_all(&mut self, pending: &[(TcpStream, Vec<u8>)]) -> (Vec<usize>, bool) {
            let mut written: Vec<Option<usize>> = vec![None; pending.len()];
            let mut queued = 0;
            {
                let mut sq = self.0.submission();
                for (i, (socket, bytes)) in pending.iter().enumerate() {
                    let Ok(len) = u32::try_from(bytes.len()) else {
                        written[i] = Some(0);
                        continue;
                    };
                    let send =
                        opcode::Send::new(types::Fd(socket.as_raw_fd()), bytes.as_ptr(), len)
                            .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
                            .build()
                            .user_data(i as u64);
                    // SAFETY: the socket and the buffer outlive the send: this function returns
                    // only once every queued send has completed, or reports them unknown, in
                    // which case the caller never frees them.
                    if unsafe { sq.push(&send) }.is_err() {
                        written[i] = Some(0);
                        continue;
                    }
                    queued += 1;
                }
            }
            let mut done = 0;
            let mut failed = false;
            while done < queued {
                match self.0.submit_and_wait(queued - done) {
                    Ok(_) => {}
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                    Err(_) => failed = true,
                }
                for cqe in self.0.completion() {
                    if let Some(w) = usize::try_from(cqe.user_data())
                        .ok()
                        .and_then(|i| written.get_mut(i))
                    {
                        *w = Some(usize::try_from(cqe.result()).unwrap_or(0));
                        done += 1;
                    }
                }
                if failed {
                    break;
                }
            }
            let written = written
                .iter()
                .zip(pending)
                .map(|(w, (_, bytes))| w.unwrap_or(bytes.len()))
                .collect();
            (written, done == queued)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use http::{HeaderMap, Method};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::Release;
    use crate::http1::H1Conn;
    use crate::{Outgoing, Target};

    /// A server that reads each connection's request whole (a head and a 2-byte body, so 'ends
    /// with the body' is exact), answers it, and reports the bytes it received per connection.
    async fn server() -> (Arc<Target>, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !got.ends_with(b"\r\n\r\n{}") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                    let _ = tx.send(got);
                    let _ = s.read(&mut buf).await;
                });
            }
        });
        let target = Target::parse(&format!("http://{addr}/")).expect("a target");
        (Arc::new(target), rx)
    }

    fn request() -> Outgoing {
        Outgoing {
            method: Method::POST,
            uri: "/orders".into(),
            headers: HeaderMap::new(),
            body: Bytes::from_static(b"{}"),
        }
    }

    async fn round(release: Release, members: usize) -> Arc<Release> {
        let (target, mut received) = server().await;
        let release = Arc::new(release);
        let mut tasks = Vec::new();
        for _ in 0..members {
            let (target, release) = (target.clone(), release.clone());
            tasks.push(tokio::spawn(async move {
                let mut conn = H1Conn::new(target);
                conn.open().await.expect("connect");
                let reply = conn
                    .send_released(request(), Duration::from_secs(30), Some(&release), true)
                    .await;
                (reply, conn.released_at())
            }));
        }
        for t in tasks {
            let (reply, released_at) = t.await.expect("a member");
            let reply = reply.expect("every member's request completes");
            assert_eq!(reply.status, 200);
            assert!(released_at.is_some(), "the release instant is kept");
        }
        let mut one = Vec::new();
        for _ in 0..members {
            let got = received.recv().await.expect("a request per connection");
            one = got.clone();
            assert!(
                got.ends_with(b"\r\n\r\n{}") && got.starts_with(b"POST /orders HTTP/1.1\r\n"),
                "every request arrives whole, its last byte exactly once: {:?}",
                String::from_utf8_lossy(&got)
            );
        }
        assert_eq!(one.iter().filter(|&&b| b == b'}').count(), 1);
        let handed = release.handed.lock().expect("not poisoned");
        assert_eq!(
            handed.written,
            vec![1; members],
            "the release wrote every last byte"
        );
        drop(handed);
        release
    }

    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_members_last_byte_is_written_once_by_the_release() {
        let release = round(Release::new(10), 10).await;
        let ring_here = io_uring::IoUring::new(2).is_ok();
        let by_ring = release.handed.lock().expect("not poisoned").by_ring;
        assert_eq!(
            by_ring, ring_here,
            "io_uring is used wherever it is available"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_io_uring_the_release_writes_the_last_bytes_in_a_loop() {
        let mut release = Release::new(10);
        release.ring = false;
        let release = round(release, 10).await;
        assert!(!release.handed.lock().expect("not poisoned").by_ring);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_that_cannot_connect_still_arrives_so_the_others_are_released() {
        let (target, _received) = server().await;
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = l.local_addr().expect("address");
            drop(l);
            Arc::new(Target::parse(&format!("http://{addr}/")).expect("a target"))
        };
        let release = Arc::new(Release::new(2));
        let timeout = Duration::from_secs(30);
        let good = {
            let release = release.clone();
            tokio::spawn(async move {
                let mut conn = H1Conn::new(target);
                conn.open().await.expect("connect");
                conn.send_released(request(), timeout, Some(&release), true)
                    .await
            })
        };
        let mut conn = H1Conn::new(dead);
        let failed = conn
            .send_released(request(), timeout, Some(&release), true)
            .await;
        assert!(failed.is_err(), "nothing listens there");
        let reply = good
            .await
            .expect("the member")
            .expect("released, not timed out");
        assert_eq!(reply.status, 200);
    }
}
