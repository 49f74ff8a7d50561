//! Reading a trace for analysis: one indexing pass, then a time-ordered
//! merge of all threads' events in bounded memory.
//!
//! The file stores each thread's events in chunks, in the order the
//! recorder drained them, so chunks of different threads are not globally
//! time-ordered (a thread blocked for seconds writes nothing meanwhile).
//! Cross-thread metrics (owner changes, blame, waiters) need events in
//! global time order. Two ways to get it were considered:
//!
//! - buffer decoded events until every thread has moved past a time
//!   (a watermark merge): one pass, but a thread that blocks for a long
//!   time holds the watermark back and the buffer grows to the whole trace;
//! - index the chunks in a first pass (offset, thread), then merge with one
//!   cursor per thread that reads its chunks back from the file: two passes
//!   over the bytes (the second from the page cache), but memory is bounded
//!   by one decoded chunk per thread whatever the interleaving.
//!
//! The second is what this module does.

use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use lockscope_format::{
    Event, FormatError, Header, LockInfo, Loss, MapEntry, Overhead, Process, ProcessEnd, Record,
    StackTrace, Thread, TraceReader,
};

use crate::AnalysisError;

/// Where one event chunk lives in the file.
#[derive(Clone, Copy, Debug)]
struct ChunkRef {
    offset: u64,
    len: u64,
    count: u32,
}

/// Everything in a trace except the events, plus the chunk index.
#[derive(Debug, Default)]
pub struct Meta {
    /// The header.
    pub header: Header,
    /// Processes by trace id.
    pub processes: HashMap<u32, Process>,
    /// Process ends by process trace id.
    pub process_ends: HashMap<u32, ProcessEnd>,
    /// Threads by trace id.
    pub threads: HashMap<u32, Thread>,
    /// Last name of each thread (from `ThreadName` records).
    pub thread_names: HashMap<u32, String>,
    /// End time of each thread.
    pub thread_ends: HashMap<u32, u64>,
    /// Memory maps per process.
    pub maps: HashMap<u32, Vec<MapEntry>>,
    /// Interned strings.
    pub strings: HashMap<u32, String>,
    /// Interned call paths by id.
    pub stacks: HashMap<u32, StackTrace>,
    /// First sightings of locks.
    pub locks: Vec<LockInfo>,
    /// Recorder overhead per process.
    pub overhead: HashMap<u32, Overhead>,
    /// Loss records.
    pub losses: Vec<Loss>,
    /// Footer, if the trace is complete.
    pub footer: Option<lockscope_format::Footer>,
    /// Set when the file ended early: (offset, message). The analysis goes
    /// on with what was read and the report says so.
    pub truncated: Option<String>,
    /// Events in the index.
    pub events: u64,
    /// File size in bytes.
    pub file_bytes: u64,
    chunks: HashMap<u32, Vec<ChunkRef>>,
    prefix: Vec<u8>,
}

/// Reads a trace's records (not its events) and indexes its event chunks.
/// `progress(done, total)` is called now and then with byte counts.
pub fn index(path: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<Meta, AnalysisError> {
    let io = |e| AnalysisError::Io {
        path: path.display().to_string(),
        source: e,
    };
    let f = File::open(path).map_err(io)?;
    let file_bytes = f.metadata().map_err(io)?.len();
    let mut tr = TraceReader::new(BufReader::with_capacity(1 << 20, f))?;
    let header_end = tr.offset();
    let mut prefix = vec![0u8; header_end as usize];
    File::open(path)
        .and_then(|f| f.read_exact_at(&mut prefix, 0))
        .map_err(io)?;
    let mut m = Meta {
        header: tr.header().clone(),
        file_bytes,
        prefix,
        ..Meta::default()
    };
    let mut last_progress = 0u64;
    loop {
        let at = tr.offset();
        if at - last_progress > 64 << 20 {
            progress(at, file_bytes);
            last_progress = at;
        }
        let rec = match tr.next() {
            Ok(Some(r)) => r,
            Ok(None) => break,
            // A recording cut short (crash, full disk) still deserves a
            // report of what it holds; corruption does not.
            Err(FormatError::Truncated { offset, what }) => {
                m.truncated = Some(format!(
                    "the trace ends early at byte {offset} (while reading {what}); \
                     the report covers what was recorded before"
                ));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        match rec {
            Record::Events(c) => {
                m.events += u64::from(c.count);
                m.chunks.entry(c.thread).or_default().push(ChunkRef {
                    offset: at,
                    len: tr.offset() - at,
                    count: c.count,
                });
            }
            Record::String(s) => {
                m.strings.insert(s.id, s.text);
            }
            Record::Process(p) => {
                m.processes.insert(p.id, p);
            }
            Record::ProcessEnd(p) => {
                m.process_ends.insert(p.process, p);
            }
            Record::Thread(t) => {
                m.threads.insert(t.id, t);
            }
            Record::ThreadName(t) => {
                m.thread_names.insert(t.thread, t.name);
            }
            Record::ThreadEnd(t) => {
                m.thread_ends.insert(t.thread, t.end_ns);
            }
            Record::Map(e) => m.maps.entry(e.process).or_default().push(e),
            Record::Stack(s) => {
                m.stacks.insert(s.id, s);
            }
            Record::Lock(l) => m.locks.push(l),
            Record::Loss(l) => m.losses.push(l),
            Record::Overhead(o) => {
                m.overhead.insert(o.process, o);
            }
            Record::Footer(f) => m.footer = Some(f),
            _ => {}
        }
    }
    progress(file_bytes, file_bytes);
    Ok(m)
}

impl Meta {
    /// Trace thread ids that have events, sorted.
    pub fn threads_with_events(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.chunks.keys().copied().collect();
        v.sort_unstable();
        v
    }
    /// Number of events of one thread.
    pub fn event_count(&self, thread: u32) -> u64 {
        self.chunks
            .get(&thread)
            .map_or(0, |v| v.iter().map(|c| u64::from(c.count)).sum())
    }
}

struct Cursor {
    thread: u32,
    chunks: Vec<ChunkRef>,
    next_chunk: usize,
    /// The decoded current chunk, shared with the consumer of runs.
    buf: Arc<Vec<Event>>,
    pos: usize,
}

/// All events of all threads in time order (ties: lower thread id first,
/// then file order). Within a thread the file order is kept even if its
/// clock stepped back, so the per-thread protocol is never reordered.
pub struct Merge<'a> {
    file: File,
    path: String,
    meta: &'a Meta,
    cursors: Vec<Cursor>,
    heap: BinaryHeap<std::cmp::Reverse<(u64, u32, usize)>>,
    /// Head key (time, thread) of each cursor, `(u64::MAX, u32::MAX)` when
    /// exhausted: a compact array for the linear scan, which would
    /// otherwise chase one buffer pointer per cursor per run.
    heads: Vec<(u64, u32)>,
    raw: Vec<u8>,
    /// Events handed out so far.
    pub delivered: u64,
}

impl<'a> Merge<'a> {
    /// Opens the file again for the merge.
    pub fn new(path: &Path, meta: &'a Meta) -> Result<Self, AnalysisError> {
        let file = File::open(path).map_err(|e| AnalysisError::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        let mut m = Merge {
            file,
            path: path.display().to_string(),
            meta,
            cursors: Vec::new(),
            heap: BinaryHeap::new(),
            heads: Vec::new(),
            raw: Vec::new(),
            delivered: 0,
        };
        for t in meta.threads_with_events() {
            m.cursors.push(Cursor {
                thread: t,
                chunks: meta.chunks[&t].clone(),
                next_chunk: 0,
                buf: Arc::new(Vec::new()),
                pos: 0,
            });
        }
        let linear = m.cursors.len() <= 16;
        for i in 0..m.cursors.len() {
            let has = m.refill(i)?;
            let c = &m.cursors[i];
            m.heads.push(if has {
                (c.buf[0].time, c.thread)
            } else {
                (u64::MAX, u32::MAX)
            });
            if has && !linear {
                m.heap.push(std::cmp::Reverse((c.buf[0].time, c.thread, i)));
            }
        }
        Ok(m)
    }

    /// Loads the next non-empty chunk of cursor `i`; false when exhausted.
    fn refill(&mut self, i: usize) -> Result<bool, AnalysisError> {
        loop {
            let c = &mut self.cursors[i];
            // Reuse the buffer unless a consumer still holds it.
            match Arc::get_mut(&mut c.buf) {
                Some(b) => b.clear(),
                None => c.buf = Arc::new(Vec::with_capacity(c.buf.len())),
            }
            c.pos = 0;
            let Some(&ch) = c.chunks.get(c.next_chunk) else {
                return Ok(false);
            };
            c.next_chunk += 1;
            self.raw.clear();
            self.raw.extend_from_slice(&self.meta.prefix);
            let plen = self.raw.len();
            self.raw.resize(plen + ch.len as usize, 0);
            self.file
                .read_exact_at(&mut self.raw[plen..], ch.offset)
                .map_err(|e| AnalysisError::Io {
                    path: self.path.clone(),
                    source: e,
                })?;
            // Re-framing through TraceReader (header prefix + this one
            // record) reuses the format crate's checks instead of
            // duplicating its framing code here.
            let mut tr = TraceReader::new(&self.raw[..])?;
            let Some(Record::Events(mut chunk)) = tr.next()? else {
                return Err(AnalysisError::Trace(FormatError::Corrupt {
                    offset: ch.offset,
                    what: "indexed event chunk changed since the first pass".into(),
                }));
            };
            // Error messages must name real file offsets.
            chunk.offset = chunk.offset - plen as u64 + ch.offset;
            let c = &mut self.cursors[i];
            let buf = Arc::get_mut(&mut c.buf).expect("fresh buffer is unshared");
            chunk.for_each(|e| buf.push(e))?;
            if !c.buf.is_empty() {
                return Ok(true);
            }
        }
    }

    /// Calls `f(thread trace id, event)` for every event in time order.
    pub fn run(
        &mut self,
        mut f: impl FnMut(u32, &Event),
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), AnalysisError> {
        self.run_runs(
            |t, buf, a, b| {
                for e in &buf[a..b] {
                    f(t, e);
                }
            },
            progress,
        )
    }

    /// Time order delivered as runs: `f(thread, chunk, start, end)` means
    /// events `chunk[start..end]` of that thread come next. Handing out
    /// runs of shared chunks instead of events saves a copy per event
    /// when the consumer is on another thread.
    pub fn run_runs(
        &mut self,
        mut f: impl FnMut(u32, &Arc<Vec<Event>>, usize, usize),
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), AnalysisError> {
        let total = self.meta.events;
        let mut next_progress = 1u64 << 22;
        // Few threads (the usual case): a linear scan for the two
        // earliest heads beats a binary heap, whose pops were 10 % of
        // the whole analysis on a 4-thread trace. Many threads: the heap.
        let linear = self.cursors.len() <= 16;
        loop {
            let (i, limit) = if linear {
                let mut best = (u64::MAX, u32::MAX);
                let mut bi = usize::MAX;
                let mut second = (u64::MAX, u32::MAX);
                for (k, &h) in self.heads.iter().enumerate() {
                    if h < best {
                        second = best;
                        best = h;
                        bi = k;
                    } else if h < second {
                        second = h;
                    }
                }
                if bi == usize::MAX {
                    break;
                }
                (bi, second)
            } else {
                let Some(std::cmp::Reverse((_, _, i))) = self.heap.pop() else {
                    break;
                };
                let limit = self
                    .heap
                    .peek()
                    .map_or((u64::MAX, u32::MAX), |r| (r.0 .0, r.0 .1));
                (i, limit)
            };
            // Run this thread while it is not later than the next thread:
            // one selection per run instead of per event.
            let mut first = true;
            loop {
                let c = &mut self.cursors[i];
                let thread = c.thread;
                let start = c.pos;
                let buf = &c.buf;
                let mut pos = c.pos;
                while pos < buf.len() {
                    let e = &buf[pos];
                    if !first && (e.time, thread) > limit {
                        break;
                    }
                    first = false;
                    pos += 1;
                }
                if pos > start {
                    f(thread, buf, start, pos);
                }
                c.pos = pos;
                self.delivered += (pos - start) as u64;
                if c.pos < c.buf.len() {
                    break;
                }
                if !self.refill(i)? {
                    break;
                }
            }
            if self.delivered >= next_progress {
                progress(self.delivered, total);
                next_progress = self.delivered + (1 << 22);
            }
            {
                let c = &self.cursors[i];
                self.heads[i] = match c.buf.get(c.pos) {
                    Some(e) => (e.time, c.thread),
                    None => (u64::MAX, u32::MAX),
                };
            }
            if !linear {
                let c = &self.cursors[i];
                if c.pos < c.buf.len() {
                    self.heap
                        .push(std::cmp::Reverse((c.buf[c.pos].time, c.thread, i)));
                }
            }
        }
        progress(total, total);
        Ok(())
    }
}

/// Reads a little of a file to tell whether it looks like a trace (used
/// by the CLI for a friendlier message).
pub fn looks_like_trace(path: &Path) -> bool {
    let mut b = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
        && b == lockscope_format::MAGIC
}
