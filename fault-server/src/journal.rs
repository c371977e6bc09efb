//! The journal: one entry per request the server saw, in arrival order.
//!
//! The journal is the single timeline every check reads (Jepsen's history). Entries are completed
//! out of order — a hung request finishes long after the ones that arrived behind it — so the writer
//! holds a reorder buffer and emits strictly by `seq`.
//!
//! The buffer keeps at most [`MEM_PENDING`] entries ([`MEM_PENDING_BYTES`]) in memory. Behind a
//! request that takes long (a
//! `hang`, a slow upload, a slow upstream), later entries keep finishing at the full request rate;
//! past that many they are serialized to a temporary spill file with 8 bytes of index each, and
//! read back in order once the slow one ends. So memory stays bounded by what is in flight, not
//! by how long one request takes.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use history::{Entry, Outcome};

// ---------------------------------------------------------------------------------------------
// Writing the journal.

/// Monotonic time since server start, shared by every request.
#[derive(Debug)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock starting now.
    pub fn new() -> Clock {
        Clock {
            start: Instant::now(),
        }
    }
    /// Microseconds since start.
    pub fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }
    /// Microseconds from start to `t`.
    pub fn us_at(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.start).as_micros() as u64
    }
    /// Microseconds since start of a wall-clock moment (nanoseconds since the Unix epoch, as the
    /// kernel stamps packets), through the offset between the two clocks now; never later than
    /// now.
    pub fn us_at_unix_ns(&self, unix_ns: u64) -> u64 {
        let now_us = self.now_us();
        let now_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        now_us.saturating_sub(now_unix_ns.saturating_sub(unix_ns) / 1000)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// Hands out arrival numbers. A reset starts a new epoch whose numbers start again at 1; entries of
/// an older epoch still in flight at the reset are discarded by the writer.
#[derive(Debug, Default)]
pub struct Sequencer {
    // High 16 bits: epoch. Low 48 bits: the last seq handed out. One atomic op per request.
    word: AtomicU64,
}

const SEQ_BITS: u32 = 48;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

impl Sequencer {
    /// The next (epoch, seq).
    pub fn next(&self) -> (u16, u64) {
        let w = self.word.fetch_add(1, Ordering::Relaxed) + 1;
        ((w >> SEQ_BITS) as u16, w & SEQ_MASK)
    }
    /// (epoch, how many seqs it has handed out).
    pub fn current(&self) -> (u16, u64) {
        let w = self.word.load(Ordering::Relaxed);
        ((w >> SEQ_BITS) as u16, w & SEQ_MASK)
    }
    /// Starts a new epoch and returns it.
    pub fn reset(&self) -> u16 {
        let (epoch, _) = self.current();
        let next = epoch.wrapping_add(1);
        self.word
            .store(u64::from(next) << SEQ_BITS, Ordering::Relaxed);
        next
    }
}

/// Entries that may wait in the channel for the writer. When the writer falls behind (a slow
/// disk), a request that finishes waits for room rather than the backlog growing without bound:
/// the server slows to the pace its journal can keep, and loses nothing.
const CHANNEL_BOUND: usize = 2048;

/// How often the writer looks for new entries when it found none.
const POLL_INTERVAL: Duration = Duration::from_millis(1);

enum Msg {
    Entry(u16, Box<Entry>),
    Reset(u16, mpsc::Sender<()>),
    Flush(mpsc::Sender<()>),
    /// The journal is dropped: write what came, then stop, though senders remain (a proxied
    /// connection's task may outlive its server by a moment).
    Stop,
}

/// Counts kept by the writer, served by `GET /__harness/stats`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Stats {
    /// Entries written.
    pub requests: u64,
    /// Entries by the rule that fired.
    pub by_rule: HashMap<String, u64>,
    /// Entries by fault kind.
    pub by_fault: HashMap<String, u64>,
    /// Entries by status sent (`none` when none was).
    pub by_status: HashMap<String, u64>,
    /// Entries by outcome.
    pub by_outcome: HashMap<String, u64>,
    /// Entries by rule, fault, status and outcome together (what `/__harness/metrics` exports).
    #[serde(skip)]
    pub by_request: Vec<RequestCount>,
    /// Proxied TCP connections journaled (not counted in `requests`), by proxy.
    pub connections: BTreeMap<String, ConnectionCounts>,
    /// Statements and commands the protocol proxies journaled (not counted in `requests`), by
    /// proxy.
    pub statements: BTreeMap<String, StatementCounts>,
}

/// A protocol proxy's journaled statements (PostgreSQL) or commands (Redis).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatementCounts {
    /// Statements or commands journaled (violations included).
    pub statements: u64,
    /// By the fault a rule gave them (`error`, `delay`, `drop`, `reset`); the rest are not here.
    pub by_fault: BTreeMap<String, u64>,
    /// By outcome (`responded`, `dropped`, `reset`, `client_closed`, `upstream_error`,
    /// `rejected` for a protocol violation).
    pub by_outcome: BTreeMap<String, u64>,
}

/// A TCP proxy's journaled connections: how they ended, their bytes, the toxics that acted.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConnectionCounts {
    /// Connections journaled.
    pub connections: u64,
    /// By how they ended (`closed`, `reset`, `timed_out`, `cut`, `refused`, `rejected`,
    /// `shutdown`).
    pub by_end: BTreeMap<String, u64>,
    /// Bytes delivered from clients to the upstream.
    pub bytes_up: u64,
    /// Bytes delivered from the upstream to clients.
    pub bytes_down: u64,
    /// Connections each toxic acted on, by toxic name.
    pub by_toxic: BTreeMap<String, u64>,
}

/// How many entries had this rule, fault, status and outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestCount {
    /// The rule that fired, if any.
    pub rule: Option<String>,
    /// Its fault kind, if any.
    pub fault: Option<String>,
    /// The status sent, if any.
    pub status: Option<u16>,
    /// The outcome.
    pub outcome: Outcome,
    /// The number of entries.
    pub count: u64,
}

/// The writer's running counts, kept in a form that costs no allocation per entry (statuses are
/// a handful of codes, outcomes a fixed set); turned into [`Stats`] when someone asks.
#[derive(Debug, Clone, Default)]
struct Counts {
    requests: u64,
    by_rule: HashMap<String, u64>,
    by_fault: HashMap<String, u64>,
    /// (status or none, count)
    by_status: Vec<(Option<u16>, u64)>,
    by_outcome: [u64; OUTCOMES.len()],
    /// Per rule ("" for none): (fault, status, outcome, count); a handful per rule, scanned.
    by_request: HashMap<String, Vec<Combo>>,
    /// Per proxy: its connections.
    connections: BTreeMap<String, ConnectionCounts>,
    /// Per protocol proxy: its statements or commands.
    statements: BTreeMap<String, StatementCounts>,
}

/// Fault, status, outcome and how many entries had them (under one rule).
type Combo = (Option<String>, Option<u16>, Outcome, u64);

const OUTCOMES: [Outcome; 8] = [
    Outcome::Responded,
    Outcome::Dropped,
    Outcome::Reset,
    Outcome::Hung,
    Outcome::ClientClosed,
    Outcome::Rejected,
    Outcome::UpstreamError,
    Outcome::SendTimeout,
];

impl Counts {
    fn record(&mut self, e: &Entry) {
        if let Some(t) = &e.tcp {
            let c = match self.connections.get_mut(&t.proxy) {
                Some(c) => c,
                None => self.connections.entry(t.proxy.clone()).or_default(),
            };
            c.connections += 1;
            *c.by_end.entry(t.end.as_str().to_string()).or_default() += 1;
            c.bytes_up += t.bytes_up;
            c.bytes_down += t.bytes_down;
            for x in &t.toxics {
                match c.by_toxic.get_mut(&x.name) {
                    Some(n) => *n += 1,
                    None => {
                        c.by_toxic.insert(x.name.clone(), 1);
                    }
                }
            }
            return;
        }
        if let Some(p) = &e.protocol {
            let proxy = match p {
                history::Protocol::Postgres(s) => &s.proxy,
                history::Protocol::Redis(c) => &c.proxy,
            };
            let c = match self.statements.get_mut(proxy) {
                Some(c) => c,
                None => self.statements.entry(proxy.clone()).or_default(),
            };
            c.statements += 1;
            if let Some(f) = &e.fault {
                *c.by_fault.entry(f.clone()).or_default() += 1;
            }
            *c.by_outcome
                .entry(e.outcome.as_str().to_string())
                .or_default() += 1;
            return;
        }
        self.requests += 1;
        if let Some(r) = &e.rule {
            bump(&mut self.by_rule, r);
        }
        if let Some(f) = &e.fault {
            bump(&mut self.by_fault, f);
        }
        match self.by_status.iter_mut().find(|(s, _)| *s == e.status) {
            Some((_, n)) => *n += 1,
            None => self.by_status.push((e.status, 1)),
        }
        self.by_outcome[e.outcome as usize] += 1;
        let rule = e.rule.as_deref().unwrap_or("");
        let combos = match self.by_request.get_mut(rule) {
            Some(c) => c,
            None => self.by_request.entry(rule.to_string()).or_default(),
        };
        match combos.iter_mut().find(|(f, s, o, _)| {
            f.as_deref() == e.fault.as_deref() && *s == e.status && *o == e.outcome
        }) {
            Some((_, _, _, n)) => *n += 1,
            None => combos.push((e.fault.clone(), e.status, e.outcome, 1)),
        }
    }

    fn stats(&self) -> Stats {
        Stats {
            requests: self.requests,
            by_rule: self.by_rule.clone(),
            by_fault: self.by_fault.clone(),
            by_status: self
                .by_status
                .iter()
                .map(|(s, n)| (s.map_or_else(|| "none".to_string(), |s| s.to_string()), *n))
                .collect(),
            by_outcome: OUTCOMES
                .iter()
                .filter(|o| self.by_outcome[**o as usize] > 0)
                .map(|o| (o.as_str().to_string(), self.by_outcome[*o as usize]))
                .collect(),
            by_request: self
                .by_request
                .iter()
                .flat_map(|(rule, combos)| {
                    combos
                        .iter()
                        .map(move |(fault, status, outcome, count)| RequestCount {
                            rule: (!rule.is_empty()).then(|| rule.clone()),
                            fault: fault.clone(),
                            status: *status,
                            outcome: *outcome,
                            count: *count,
                        })
                })
                .collect(),
            connections: self.connections.clone(),
            statements: self.statements.clone(),
        }
    }
}

fn bump(m: &mut HashMap<String, u64>, k: &str) {
    match m.get_mut(k) {
        Some(n) => *n += 1,
        None => {
            m.insert(k.to_string(), 1);
        }
    }
}

/// Every `SPARSE`-th line's file offset is remembered, so a read from any `seq` seeks to within
/// `SPARSE` lines of it: 8 bytes of memory per 1,024 entries.
const SPARSE: u64 = 1024;

/// What the writer thread has written, read by the control API and the harness.
struct Written {
    stats: Mutex<Counts>,
    written: AtomicU64,
    /// Bytes of the file that are flushed and hold whole lines.
    file_len: AtomicU64,
    /// File offset of lines 1, 1 + SPARSE, 1 + 2 × SPARSE, … of the current epoch.
    sparse: Mutex<Vec<u64>>,
}

/// The journal: a writer thread fed by a channel, so no request ever waits on journal I/O or holds
/// a lock across a write.
///
/// Every entry goes to a file — the `--journal` file, or a temporary one — and nowhere else: the
/// server's memory holds the counters and a sparse index into the file, not the history, so it
/// stays flat however long the server runs. Reads (`GET /__harness/journal?since=`, the harness
/// reading the journal of its embedded server) stream from the file.
pub struct Journal {
    tx: mpsc::SyncSender<Msg>,
    shared: Arc<Written>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    path: std::path::PathBuf,
    /// The temporary file, when no path was given; removed when the journal is dropped, or
    /// before, by [`Journal::remove_temp_file`].
    temp: Mutex<Option<tempfile::TempPath>>,
}

/// A journal file could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open journal file {path}: {source}")]
pub struct JournalFileError {
    /// The file.
    pub path: String,
    /// The OS error.
    pub source: std::io::Error,
}

impl Journal {
    /// Starts the writer, writing to `file` (truncated first), or to a temporary file.
    pub fn start(file: Option<&Path>) -> Result<Journal, JournalFileError> {
        let (handle, path, temp) = match file {
            Some(p) => (
                File::create(p).map_err(|source| JournalFileError {
                    path: p.display().to_string(),
                    source,
                })?,
                p.to_path_buf(),
                None,
            ),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("fault-server-journal")
                    .suffix(".jsonl")
                    .tempfile()
                    .map_err(|source| JournalFileError {
                        path: std::env::temp_dir().display().to_string(),
                        source,
                    })?;
                let (f, p) = t.into_parts();
                (f, p.to_path_buf(), Some(p))
            }
        };
        let shared = Arc::new(Written {
            stats: Mutex::new(Counts::default()),
            written: AtomicU64::new(0),
            file_len: AtomicU64::new(0),
            sparse: Mutex::new(Vec::new()),
        });
        let (tx, rx) = mpsc::sync_channel(CHANNEL_BOUND);
        let writer = Writer {
            rx,
            shared: shared.clone(),
            file: BufWriter::with_capacity(256 * 1024, handle),
            offset: 0,
            epoch: 0,
            next: 1,
            pending: std::collections::BTreeMap::new(),
            pending_bytes: 0,
            spill: Spill::default(),
            line: Vec::with_capacity(1024),
            last_recv_us: 0,
        };
        let thread = std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer.run())
            .map_err(|source| JournalFileError {
                path: "<journal thread>".into(),
                source,
            })?;
        Ok(Journal {
            tx,
            shared,
            thread: Mutex::new(Some(thread)),
            path,
            temp: Mutex::new(temp),
        })
    }

    /// The file every entry is written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn send(&self, m: Msg) {
        // The writer only stops when the journal is dropped; a send can then fail harmlessly.
        let _ = self.tx.send(m);
    }

    /// Entries written so far in the current epoch.
    pub fn written(&self) -> u64 {
        self.shared.written.load(Ordering::Acquire)
    }

    /// Where the JSON lines of the entries with `seq > since` are in the file, as written so far:
    /// the file, and the byte range to read. Entries written later are not included.
    pub fn range_since(&self, since: u64) -> std::io::Result<(File, u64, u64)> {
        let end = self.shared.file_len.load(Ordering::Acquire);
        let from = since.saturating_add(1);
        let (mut offset, mut seq) = {
            let sparse = self.shared.sparse.lock().unwrap_or_else(|p| p.into_inner());
            let k = ((from - 1) / SPARSE) as usize;
            match sparse.get(k).or(sparse.last()) {
                Some(o) => {
                    let k = if k < sparse.len() {
                        k
                    } else {
                        sparse.len() - 1
                    };
                    (*o, k as u64 * SPARSE + 1)
                }
                None => (0, 1),
            }
        };
        let mut file = File::open(&self.path)?;
        if seq < from && offset < end {
            // Skip the lines between the indexed one and the first wanted.
            file.seek(std::io::SeekFrom::Start(offset))?;
            let mut reader = std::io::BufReader::new(&mut file);
            let mut line = Vec::new();
            while seq < from && offset < end {
                line.clear();
                let n = std::io::BufRead::read_until(&mut reader, b'\n', &mut line)?;
                if n == 0 {
                    break;
                }
                offset += n as u64;
                seq += 1;
            }
        }
        let offset = offset.min(end);
        file.seek(std::io::SeekFrom::Start(offset))?;
        Ok((file, offset, end))
    }

    /// The JSON lines of entries with `seq > since`, read from the file into memory (for small
    /// reads; the control API streams instead).
    pub fn lines_since(&self, since: u64) -> Vec<u8> {
        let Ok((file, from, to)) = self.range_since(since) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(usize::try_from(to - from).unwrap_or(0));
        let _ = std::io::Read::read_to_end(&mut std::io::Read::take(file, to - from), &mut out);
        out
    }

    /// Every entry written so far in the current epoch, parsed back from the file.
    pub fn entries(&self) -> Vec<Entry> {
        let bytes = self.lines_since(0);
        serde_json::Deserializer::from_slice(&bytes)
            .into_iter::<Entry>()
            .filter_map(Result::ok)
            .collect()
    }

    /// A copy of the counters.
    pub fn stats(&self) -> Stats {
        self.shared
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stats()
    }

    /// Clears the journal (memory, file, counters) for `epoch`, and waits until that is done.
    pub fn reset(&self, epoch: u16) {
        let (ack, done) = mpsc::channel();
        self.send(Msg::Reset(epoch, ack));
        let _ = done.recv_timeout(Duration::from_secs(5));
    }

    /// Waits until everything queued so far is written and the file flushed.
    pub fn flush(&self) {
        let (ack, done) = mpsc::channel();
        self.send(Msg::Flush(ack));
        let _ = done.recv_timeout(Duration::from_secs(5));
    }

    fn sender(&self) -> mpsc::SyncSender<Msg> {
        self.tx.clone()
    }

    /// Removes the temporary journal file now, if the journal has one: its server is going
    /// away, and the threads still holding the journal may outlive the process's last chance to
    /// drop it. What writes to it goes on writing to the unlinked file.
    pub(crate) fn remove_temp_file(&self) {
        let temp = self.temp.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = temp {
            let _ = t.close();
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.flush();
        self.send(Msg::Stop);
        // Closing the channel ends the writer; replace our sender with a dead one to drop it.
        let (dead, _) = mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.tx, dead));
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

struct Writer {
    rx: mpsc::Receiver<Msg>,
    shared: Arc<Written>,
    file: BufWriter<File>,
    /// Bytes written to the file in this epoch.
    offset: u64,
    epoch: u16,
    next: u64,
    pending: std::collections::BTreeMap<(u16, u64), Box<Entry>>,
    /// About how much memory the entries in `pending` hold.
    pending_bytes: usize,
    /// Entries of the current epoch waiting beyond [`MEM_PENDING`].
    spill: Spill,
    line: Vec<u8>,
    /// `t_recv_us` of the last entry written: arrival times never go back in `seq` order.
    last_recv_us: u64,
}

/// Finished entries kept in memory while an earlier one is still in progress; more go to the
/// spill file.
pub(crate) const MEM_PENDING: usize = 8192;

/// About how many bytes those entries may hold (an entry carries its captured headers, so a few
/// large heads weigh as much as thousands of small ones).
pub(crate) const MEM_PENDING_BYTES: usize = 8 << 20;

/// About how much memory an entry holds: its struct and the text it owns.
fn weight(e: &Entry) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    std::mem::size_of::<Entry>()
        + e.method.len()
        + e.path.len()
        + text(&e.query)
        + text(&e.idempotency_key)
        + text(&e.client_id)
        + text(&e.body_sha256)
        + e.headers
            .iter()
            .map(|(k, v)| k.len() + v.len() + 48)
            .sum::<usize>()
        + e.response_headers
            .as_ref()
            .map_or(0, |h| h.iter().map(|(k, v)| k.len() + v.len() + 48).sum())
}

/// Most entries written in one go: a slow request's end can release a million spilled ones.
const EMIT_BATCH: usize = 4096;

/// Finished entries waiting behind an unfinished one, in a temporary file: each a 4-byte length
/// and its JSON, found through a dense index of file offsets by `seq`.
#[derive(Default)]
struct Spill {
    file: Option<File>,
    /// Bytes of the file in use.
    len: u64,
    /// The `seq` of `index[0]`.
    base: u64,
    /// Offset + 1 of each `seq`'s record from `base` on; 0 for a `seq` not spilled.
    index: std::collections::VecDeque<u64>,
    /// Records in the index.
    count: usize,
}

impl Spill {
    fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Writes `e` (whose `seq` is at least `next`, the first not yet written) to the file.
    fn put(&mut self, next: u64, e: &Entry, line: &mut Vec<u8>) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.file.is_none() {
            self.file = Some(tempfile::tempfile()?);
        }
        let Some(file) = self.file.as_ref() else {
            return Ok(());
        };
        if self.index.is_empty() {
            self.base = next;
        }
        line.clear();
        line.extend_from_slice(&[0; 4]);
        e.write_json(line);
        let n = u32::try_from(line.len() - 4).map_err(std::io::Error::other)?;
        line[..4].copy_from_slice(&n.to_le_bytes());
        file.write_all_at(line, self.len)?;
        let i = usize::try_from(e.seq - self.base).map_err(std::io::Error::other)?;
        if self.index.len() <= i {
            self.index.resize(i + 1, 0);
        }
        self.index[i] = self.len + 1;
        self.len += line.len() as u64;
        self.count += 1;
        Ok(())
    }

    /// The entry `seq` (the first not yet written), when it was spilled.
    fn take(&mut self, seq: u64) -> Option<Box<Entry>> {
        use std::os::unix::fs::FileExt;
        if self.count == 0 || seq < self.base {
            return None;
        }
        // Entries before `seq` were written from memory: their slots are empty.
        while self.base < seq && self.index.pop_front().is_some() {
            self.base += 1;
        }
        let at = *self.index.front()?;
        if at == 0 {
            return None;
        }
        self.index.pop_front();
        self.base += 1;
        self.count -= 1;
        let file = self.file.as_ref()?;
        let read = (|| {
            let mut n = [0u8; 4];
            file.read_exact_at(&mut n, at - 1)?;
            let mut json = vec![0u8; u32::from_le_bytes(n) as usize];
            file.read_exact_at(&mut json, at + 3)?;
            serde_json::from_slice::<Entry>(&json).map_err(std::io::Error::other)
        })();
        if self.count == 0 {
            self.clear();
        }
        match read {
            Ok(e) => Some(Box::new(e)),
            Err(err) => {
                tracing::error!("journal spill file read failed: {err}");
                // A hole must not shift the numbering: the entry is written as what is known.
                Some(Box::new(Entry::blank(seq)))
            }
        }
    }

    /// Forgets every record and gives the file's space back.
    fn clear(&mut self) {
        self.index.clear();
        self.count = 0;
        self.len = 0;
        if let Some(f) = &self.file {
            if let Err(e) = f.set_len(0) {
                tracing::error!("journal spill file truncation failed: {e}");
            }
        }
    }
}

impl Writer {
    fn run(mut self) {
        // Poll rather than block: a blocked receiver makes every sender pay a futex wake-up (a
        // syscall and a context switch per request). Polling every millisecond costs nothing
        // measurable when idle and lets senders run syscall-free under load.
        let mut closed = false;
        while !closed {
            let mut batch = Vec::new();
            loop {
                match self.rx.try_recv() {
                    Ok(m) => {
                        batch.push(m);
                        if batch.len() >= 4096 {
                            break;
                        }
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            if batch.is_empty() {
                if !closed {
                    std::thread::sleep(POLL_INTERVAL);
                }
                continue;
            }
            let mut acks = Vec::new();
            let mut ready = Vec::with_capacity(batch.len());
            for m in batch {
                match m {
                    Msg::Entry(epoch, e) => {
                        if epoch == self.epoch && e.seq == self.next {
                            // In order (the common case): no trip through the reorder buffer.
                            ready.push(e);
                            self.next += 1;
                            self.take_contiguous(&mut ready);
                        } else if epoch == self.epoch
                            && (self.pending.len() >= MEM_PENDING
                                || self.pending_bytes >= MEM_PENDING_BYTES)
                        {
                            self.spill_one(e);
                        } else if epoch == self.epoch || is_newer(epoch, self.epoch) {
                            self.hold(e, epoch);
                        }
                    }
                    Msg::Reset(epoch, ack) => {
                        self.emit(std::mem::take(&mut ready));
                        self.do_reset(epoch);
                        self.take_contiguous(&mut ready);
                        acks.push(ack);
                    }
                    Msg::Flush(ack) => acks.push(ack),
                    Msg::Stop => closed = true,
                }
            }
            self.take_contiguous(&mut ready);
            self.emit(ready);
            self.publish();
            for a in acks {
                let _ = a.send(());
            }
        }
        let _ = self.file.flush();
    }

    /// Flushes the file, then makes what it holds visible to readers: they read whole lines only,
    /// and never an entry the counters do not include yet.
    fn publish(&mut self) {
        if let Err(e) = self.file.flush() {
            tracing::error!("journal file write failed: {e}");
        }
        self.shared.file_len.store(self.offset, Ordering::Release);
        self.shared
            .written
            .store(self.next.saturating_sub(1), Ordering::Release);
    }

    fn do_reset(&mut self, epoch: u16) {
        self.epoch = epoch;
        self.next = 1;
        self.pending
            .retain(|(e, _), _| *e == epoch || is_newer(*e, epoch));
        self.pending_bytes = self.pending.values().map(|e| weight(e)).sum();
        self.spill.clear();
        *self.shared.stats.lock().unwrap_or_else(|p| p.into_inner()) = Counts::default();
        self.shared
            .sparse
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.shared.written.store(0, Ordering::Release);
        self.shared.file_len.store(0, Ordering::Release);
        self.offset = 0;
        self.last_recv_us = 0;
        let f = &mut self.file;
        let r = f
            .flush()
            .and_then(|_| f.get_mut().set_len(0))
            .and_then(|_| f.get_mut().rewind());
        if let Err(e) = r {
            tracing::error!("journal file reset failed: {e}");
        }
    }

    /// Moves the entries that continue the contiguous run from `next` out of the reorder buffer.
    // The entries stay in the boxes they came through the channel in: unboxing would copy each.
    #[allow(clippy::vec_box)]
    fn take_contiguous(&mut self, ready: &mut Vec<Box<Entry>>) {
        if self.pending.is_empty() && self.spill.is_empty() {
            return;
        }
        loop {
            let e = match self.pending.remove(&(self.epoch, self.next)) {
                Some(e) => {
                    self.pending_bytes = self.pending_bytes.saturating_sub(weight(&e));
                    e
                }
                None => match self.spill.take(self.next) {
                    Some(e) => e,
                    None => return,
                },
            };
            ready.push(e);
            self.next += 1;
            if ready.len() >= EMIT_BATCH {
                self.emit(std::mem::take(ready));
                self.publish();
            }
        }
    }

    /// Keeps `e` in memory until the entries before it are written.
    fn hold(&mut self, e: Box<Entry>, epoch: u16) {
        self.pending_bytes += weight(&e);
        self.pending.insert((epoch, e.seq), e);
    }

    /// Sends `e` to the spill file; if that fails, it stays in memory.
    #[allow(clippy::boxed_local)]
    fn spill_one(&mut self, e: Box<Entry>) {
        if let Err(err) = self.spill.put(self.next, &e, &mut self.line) {
            tracing::error!("journal spill file write failed: {err}");
            let epoch = self.epoch;
            self.hold(e, epoch);
        }
    }

    /// Writes `ready` (consecutive entries of the current epoch) to the file and the counts;
    /// [`Writer::publish`] makes them visible.
    #[allow(clippy::vec_box)]
    fn emit(&mut self, mut ready: Vec<Box<Entry>>) {
        if ready.is_empty() {
            return;
        }
        let mut stats = self.shared.stats.lock().unwrap_or_else(|p| p.into_inner());
        for e in &mut ready {
            // A request's seq and its arrival time are taken one after the other, so a thread
            // preempted between the two can stamp its arrival after a later seq's. Arrival order
            // is seq order: such a time is raised to the one before it (and the request's later
            // times with it), so `t_recv_us` never goes back in the journal. A proxied
            // connection is numbered when it ends: its `t_recv_us` (its accept) stays, and
            // does not move the requests' bound.
            if e.tcp.is_none() {
                if e.t_recv_us < self.last_recv_us {
                    let t = self.last_recv_us;
                    e.t_recv_us = t;
                    e.t_done_us = e.t_done_us.max(t);
                    e.t_body_us = e.t_body_us.map(|b| b.max(t));
                    e.t_wire_us = e.t_wire_us.map(|w| w.max(t));
                }
                self.last_recv_us = e.t_recv_us;
            }
            self.line.clear();
            e.write_json(&mut self.line);
            self.line.push(b'\n');
            if (e.seq - 1).is_multiple_of(SPARSE) {
                self.shared
                    .sparse
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(self.offset);
            }
            stats.record(e);
            if let Err(err) = self.file.write_all(&self.line) {
                tracing::error!("journal file write failed: {err}");
            }
            self.offset += self.line.len() as u64;
        }
    }
}

/// Epochs wrap around; "newer" means within half the range ahead.
fn is_newer(a: u16, b: u16) -> bool {
    a != b && a.wrapping_sub(b) < 0x8000
}

/// A request's entry while the request is in progress. It is emitted exactly once: by
/// [`Pending::finish`], or, if the request is abandoned (its future dropped because the client went
/// away), by `Drop` with the outcome `client_closed`.
pub struct Pending {
    entry: Option<Box<Entry>>,
    epoch: u16,
    emitter: Arc<Emitter>,
}

/// What a [`Pending`] needs to hand its entry to the writer: the channel and the clock.
///
/// Why a handle of its own: cloning the channel's sender and the clock for every request bumps
/// counters that every connection shares, and on two cores those cache lines bounce between them
/// on each request. A server makes one emitter per connection; its requests share that.
pub struct Emitter {
    tx: mpsc::SyncSender<Msg>,
    clock: Arc<Clock>,
}

impl Journal {
    /// An emitter for entries stamped with `clock`.
    pub fn emitter(&self, clock: Arc<Clock>) -> Arc<Emitter> {
        Arc::new(Emitter {
            tx: self.sender(),
            clock,
        })
    }
}

impl Emitter {
    /// Hands a finished entry of `epoch` to the writer, as it is: a proxied connection's, which
    /// is numbered when it ends.
    pub(crate) fn send_finished(&self, epoch: u16, entry: Box<Entry>) {
        let _ = self.tx.send(Msg::Entry(epoch, entry));
    }
}

impl Pending {
    /// Starts an entry for a request of `epoch`.
    pub fn new(journal: &Journal, clock: Arc<Clock>, epoch: u16, entry: Entry) -> Pending {
        Pending::with_emitter(journal.emitter(clock), epoch, Box::new(entry))
    }

    /// Starts an entry for a request of `epoch` that `emitter` will hand to the writer. The
    /// entry comes boxed, so that a request's can be filled in where it stays rather than built
    /// on the stack and copied.
    pub fn with_emitter(emitter: Arc<Emitter>, epoch: u16, entry: Box<Entry>) -> Pending {
        Pending {
            entry: Some(entry),
            epoch,
            emitter,
        }
    }

    /// The entry, to fill in while the request is handled.
    pub fn entry(&mut self) -> &mut Entry {
        // `entry` is only taken by `finish`/`drop`, which consume `self`.
        self.entry.get_or_insert_with(Box::default)
    }

    /// Completes the entry with its outcome, stamped now.
    pub fn finish(mut self, outcome: Outcome) {
        self.emit(outcome, None);
    }

    /// Completes the entry with its outcome, done at `t_done_us` (its clock's time, when the
    /// answer's last byte was written), not later than now nor before the request came.
    pub fn finish_at(mut self, outcome: Outcome, t_done_us: u64) {
        self.emit(outcome, Some(t_done_us));
    }

    fn emit(&mut self, outcome: Outcome, done: Option<u64>) {
        if let Some(mut e) = self.entry.take() {
            let now = self.emitter.clock.now_us();
            e.t_done_us = done.map_or(now, |t| t.clamp(e.t_recv_us.min(now), now));
            e.outcome = outcome;
            if !matches!(
                outcome,
                Outcome::Responded | Outcome::Rejected | Outcome::UpstreamError
            ) && e.fault.as_deref() != Some("malformed")
            {
                e.status = None;
            }
            if e.grpc_method.is_some() {
                if !matches!(
                    outcome,
                    Outcome::Responded | Outcome::Rejected | Outcome::UpstreamError
                ) {
                    // No status reached the client.
                    e.grpc_status = None;
                    e.grpc_message = None;
                    e.pushback_ms = None;
                }
                // A call no answer began for was not committed.
                e.committed.get_or_insert(false);
            }
            let _ = self.emitter.tx.send(Msg::Entry(self.epoch, e));
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.emit(Outcome::ClientClosed, None);
    }
}

/// A body's SHA-256 in lowercase hex, as the journal records it. `hex::encode` goes through an
/// iterator of chars, which showed in the profile of every request; this fills a buffer.
pub(crate) fn sha256_hex(body: &[u8]) -> String {
    use sha2::Digest;
    let mut out = [0u8; 64];
    // 32 bytes into 64: the lengths always agree.
    let _ = hex::encode_to_slice(sha2::Sha256::digest(body), &mut out);
    String::from_utf8(out.to_vec()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bodys_sha256_is_its_lowercase_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(b""),
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b""))
        );
    }

    fn entry(seq: u64) -> Entry {
        Entry {
            method: "GET".into(),
            path: "/".into(),
            status: Some(200),
            ..Entry::blank(seq)
        }
    }

    #[test]
    fn writes_in_arrival_order_whatever_the_completion_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let j = Journal::start(Some(&path)).unwrap();
        let clock = Arc::new(Clock::new());
        let p: Vec<Pending> = (1..=5)
            .map(|s| Pending::new(&j, clock.clone(), 0, entry(s)))
            .collect();
        let mut p: Vec<Option<Pending>> = p.into_iter().map(Some).collect();
        for i in [4, 2, 0, 3] {
            p[i].take().unwrap().finish(Outcome::Responded);
        }
        j.flush();
        assert_eq!(
            j.written(),
            1,
            "seq 2 is still in flight, so only seq 1 is out"
        );
        drop(p[1].take()); // abandoned → client_closed
        j.flush();
        let seqs: Vec<u64> = j.entries().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5]);
        assert_eq!(j.entries()[1].outcome, Outcome::ClientClosed);
        assert_eq!(j.entries()[1].status, None);
        let file = std::fs::read_to_string(&path).unwrap();
        assert_eq!(file.lines().count(), 5);
        assert_eq!(
            String::from_utf8(j.lines_since(3)).unwrap().lines().count(),
            2
        );
        assert_eq!(j.stats().by_outcome.get("client_closed"), Some(&1));
    }

    #[test]
    fn an_entry_finished_late_keeps_the_time_its_answer_was_written() {
        let j = Journal::start(None).unwrap();
        let clock = Arc::new(Clock::new());
        let mut a = entry(1);
        a.t_recv_us = clock.now_us();
        let written = a.t_recv_us + 1;
        std::thread::sleep(std::time::Duration::from_millis(20));
        Pending::new(&j, clock.clone(), 0, a).finish_at(Outcome::Responded, written);
        // A time from a clock ahead of the entry's own is brought back to now.
        let mut b = entry(2);
        b.t_recv_us = clock.now_us();
        Pending::new(&j, clock.clone(), 0, b).finish_at(Outcome::Responded, u64::MAX);
        let after = clock.now_us();
        j.flush();
        let entries = j.entries();
        assert_eq!(entries[0].t_done_us, written);
        assert!(entries[1].t_done_us <= after, "{:?}", entries[1]);
        assert!(entries[1].t_done_us >= entries[1].t_recv_us);
    }

    #[test]
    fn entries_behind_a_slow_one_spill_and_come_back_in_order() {
        let j = Journal::start(None).unwrap();
        let clock = Arc::new(Clock::new());
        let slow = Pending::new(&j, clock.clone(), 0, entry(1));
        let n = 3 * MEM_PENDING as u64;
        for s in 2..=n + 1 {
            let mut e = entry(s);
            e.idempotency_key = Some(format!("k{s}"));
            Pending::new(&j, clock.clone(), 0, e).finish(Outcome::Responded);
        }
        j.flush();
        assert_eq!(j.written(), 0, "seq 1 holds every later entry back");
        slow.finish(Outcome::Hung);
        j.flush();
        let entries = j.entries();
        assert_eq!(entries.len() as u64, n + 1);
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e.seq, i as u64 + 1);
        }
        assert_eq!(entries[0].outcome, Outcome::Hung);
        let last = entries.last().unwrap();
        assert_eq!(
            last.idempotency_key.as_deref(),
            Some(format!("k{}", n + 1).as_str())
        );
        assert_eq!(j.stats().requests, n + 1);
    }

    #[test]
    fn the_spill_returns_what_it_holds_by_seq_and_skips_what_memory_wrote() {
        let mut spill = Spill::default();
        let mut line = Vec::new();
        for s in [5, 3, 9] {
            spill.put(2, &entry(s), &mut line).unwrap();
        }
        assert!(spill.take(2).is_none(), "2 was never spilled");
        assert_eq!(spill.take(3).unwrap().seq, 3);
        assert!(spill.take(4).is_none());
        assert_eq!(spill.take(5).unwrap().seq, 5);
        assert!(spill.take(6).is_none());
        assert_eq!(spill.take(9).unwrap().seq, 9);
        assert!(spill.is_empty());
        assert_eq!(spill.len, 0, "the file is given back once empty");
        spill.put(10, &entry(12), &mut line).unwrap();
        assert_eq!(spill.take(12).unwrap().seq, 12);
    }

    #[test]
    fn reset_discards_the_old_epoch() {
        let j = Journal::start(None).unwrap();
        let clock = Arc::new(Clock::new());
        let seq = Sequencer::default();
        let (e, s) = seq.next();
        Pending::new(&j, clock.clone(), e, entry(s)).finish(Outcome::Responded);
        let (e, s) = seq.next();
        let straggler = Pending::new(&j, clock.clone(), e, entry(s));
        let epoch = seq.reset();
        j.reset(epoch);
        straggler.finish(Outcome::Responded);
        let (e, s) = seq.next();
        assert_eq!((e, s), (epoch, 1));
        Pending::new(&j, clock, e, entry(s)).finish(Outcome::Responded);
        j.flush();
        assert_eq!(j.entries().len(), 1);
        assert_eq!(j.stats().requests, 1);
    }
}
