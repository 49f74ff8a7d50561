//! Random access to a trace's event chunks and a time-ordered merge of
//! all threads' events in bounded memory.
//!
//! The file stores each thread's events in chunks, in the order the
//! recorder drained them, so chunks of different threads are not globally
//! time-ordered (a thread blocked for seconds writes nothing meanwhile).
//! Cross-thread analyses (owner changes, blame, replay) need events in
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
//! The second is what this module does: [`TraceIndex`] is the first pass
//! (built by [`TraceIndex::build`], or entry by entry by a reader that
//! also wants the other records), [`ChunkReader`] reads one indexed chunk
//! back, and [`Merge`] is the k-way merge by timestamp.

use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::wire::Cursor;
use crate::{Event, EventChunk, FormatError, Record, TraceReader};

/// Where one event chunk lives in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkEntry {
    /// Byte offset of the record (its kind byte).
    pub offset: u64,
    /// Length of the whole record (framing included).
    pub len: u64,
    /// Trace thread id.
    pub thread: u32,
    /// Number of events.
    pub count: u32,
    /// Time of the chunk's first event (ns; 0 for an empty chunk). Read
    /// without decoding the chunk: every chunk starts from time base 0.
    pub first_ns: u64,
}

/// The chunk index of one trace file.
#[derive(Clone, Debug, Default)]
pub struct TraceIndex {
    /// File bytes before the first record after the header: a chunk is
    /// read back by re-framing it behind them, which reuses the reader's
    /// checks (magic, version, checksum) instead of duplicating them.
    prefix: Vec<u8>,
    chunks: Vec<ChunkEntry>,
    by_thread: BTreeMap<u32, Vec<u32>>,
    events: u64,
}

/// Time of the first event of an encoded chunk (`op ctl dt...`: the
/// first `dt` is absolute, chunks start at time 0).
fn first_time(c: &EventChunk) -> u64 {
    if c.count == 0 || c.data.len() < 3 {
        return 0;
    }
    let mut cur = Cursor::new(&c.data[2..], c.offset + 2);
    match cur.varint("event time") {
        Ok(dt) if c.data[1] & 0x40 == 0 => dt,
        _ => 0,
    }
}

impl TraceIndex {
    /// An empty index for a file whose first `prefix.len()` bytes
    /// (magic, version and header record) are `prefix`.
    pub fn new(prefix: Vec<u8>) -> Self {
        TraceIndex {
            prefix,
            ..TraceIndex::default()
        }
    }

    /// Adds a chunk read at `offset` by a [`TraceReader`] whose offset is
    /// now `end`.
    pub fn add(&mut self, chunk: &EventChunk, offset: u64, end: u64) {
        let i = self.chunks.len() as u32;
        self.events += u64::from(chunk.count);
        self.chunks.push(ChunkEntry {
            offset,
            len: end - offset,
            thread: chunk.thread,
            count: chunk.count,
            first_ns: first_time(chunk),
        });
        self.by_thread.entry(chunk.thread).or_default().push(i);
    }

    /// Reads the prefix (magic, version, header) of `path` up to `header_end`.
    pub fn read_prefix(path: &Path, header_end: u64) -> Result<Vec<u8>, FormatError> {
        let mut prefix = vec![0u8; header_end as usize];
        File::open(path)?.read_exact_at(&mut prefix, 0)?;
        Ok(prefix)
    }

    /// Indexes a whole file (every record is read once; events are not
    /// decoded). A file cut short is indexed up to the cut.
    pub fn build(path: &Path) -> Result<TraceIndex, FormatError> {
        let f = File::open(path)?;
        let mut tr = TraceReader::new(BufReader::with_capacity(1 << 20, f))?;
        let mut ix = TraceIndex::new(Self::read_prefix(path, tr.offset())?);
        loop {
            let at = tr.offset();
            match tr.next() {
                Ok(Some(Record::Events(c))) => ix.add(&c, at, tr.offset()),
                Ok(Some(_)) => {}
                Ok(None) | Err(FormatError::Truncated { .. }) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(ix)
    }

    /// Every chunk, in file order.
    pub fn chunks(&self) -> &[ChunkEntry] {
        &self.chunks
    }

    /// The chunks of one thread, in file order.
    pub fn thread_chunks(&self, thread: u32) -> impl Iterator<Item = &ChunkEntry> + '_ {
        self.by_thread
            .get(&thread)
            .into_iter()
            .flatten()
            .map(|&i| &self.chunks[i as usize])
    }

    /// Trace thread ids that have events, sorted.
    pub fn threads(&self) -> Vec<u32> {
        self.by_thread.keys().copied().collect()
    }

    /// Events in the index.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Events of one thread.
    pub fn event_count(&self, thread: u32) -> u64 {
        self.thread_chunks(thread).map(|c| u64::from(c.count)).sum()
    }
}

/// Reads indexed chunks back from the file, one at a time.
pub struct ChunkReader {
    file: File,
    prefix: Vec<u8>,
    raw: Vec<u8>,
}

impl ChunkReader {
    /// Opens the file of `index` again.
    pub fn open(path: &Path, index: &TraceIndex) -> Result<Self, FormatError> {
        Ok(ChunkReader {
            file: File::open(path)?,
            prefix: index.prefix.clone(),
            raw: Vec::new(),
        })
    }

    /// Decodes chunk `ch`, appending its events to `out`.
    pub fn read_into(&mut self, ch: &ChunkEntry, out: &mut Vec<Event>) -> Result<(), FormatError> {
        self.raw.clear();
        self.raw.extend_from_slice(&self.prefix);
        let plen = self.raw.len();
        self.raw.resize(plen + ch.len as usize, 0);
        self.file.read_exact_at(&mut self.raw[plen..], ch.offset)?;
        let mut tr = TraceReader::new(&self.raw[..])?;
        let Some(Record::Events(mut chunk)) = tr.next()? else {
            return Err(FormatError::Corrupt {
                offset: ch.offset,
                what: "indexed event chunk changed since the first pass".into(),
            });
        };
        // Error messages must name real file offsets.
        chunk.offset = chunk.offset - plen as u64 + ch.offset;
        chunk.for_each(|e| out.push(e))
    }

    /// Decodes chunk `ch` into a new vector.
    pub fn read(&mut self, ch: &ChunkEntry) -> Result<Vec<Event>, FormatError> {
        let mut v = Vec::with_capacity(ch.count.min(1 << 20) as usize);
        self.read_into(ch, &mut v)?;
        Ok(v)
    }
}

struct Stream {
    thread: u32,
    chunks: Vec<ChunkEntry>,
    next_chunk: usize,
    /// The decoded current chunk, shared with the consumer of runs.
    buf: Arc<Vec<Event>>,
    pos: usize,
}

/// All events of all threads in time order (ties: lower thread id first,
/// then file order). Within a thread the file order is kept even if its
/// clock stepped back, so the per-thread protocol is never reordered.
pub struct Merge {
    reader: ChunkReader,
    streams: Vec<Stream>,
    heap: BinaryHeap<std::cmp::Reverse<(u64, u32, usize)>>,
    /// Head key (time, thread) of each stream, `(u64::MAX, u32::MAX)` when
    /// exhausted: a compact array for the linear scan, which would
    /// otherwise chase one buffer pointer per stream per run.
    heads: Vec<(u64, u32)>,
    total: u64,
    /// Events handed out so far.
    pub delivered: u64,
}

impl Merge {
    /// Opens the file again for the merge.
    pub fn new(path: &Path, index: &TraceIndex) -> Result<Self, FormatError> {
        let mut m = Merge {
            reader: ChunkReader::open(path, index)?,
            streams: Vec::new(),
            heap: BinaryHeap::new(),
            heads: Vec::new(),
            total: index.events,
            delivered: 0,
        };
        for t in index.threads() {
            m.streams.push(Stream {
                thread: t,
                chunks: index.thread_chunks(t).copied().collect(),
                next_chunk: 0,
                buf: Arc::new(Vec::new()),
                pos: 0,
            });
        }
        let linear = m.linear();
        for i in 0..m.streams.len() {
            let has = m.refill(i)?;
            let c = &m.streams[i];
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

    /// Few threads (the usual case): a linear scan for the two earliest
    /// heads beats a binary heap, whose pops were 10 % of the whole
    /// analysis on a 4-thread trace. Many threads: the heap.
    fn linear(&self) -> bool {
        self.streams.len() <= 16
    }

    /// Loads the next non-empty chunk of stream `i`; false when exhausted.
    fn refill(&mut self, i: usize) -> Result<bool, FormatError> {
        loop {
            let c = &mut self.streams[i];
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
            let buf = Arc::get_mut(&mut c.buf).expect("fresh buffer is unshared");
            self.reader.read_into(&ch, buf)?;
            if !buf.is_empty() {
                return Ok(true);
            }
        }
    }

    /// Calls `f(thread trace id, event)` for every event in time order.
    pub fn run(
        &mut self,
        mut f: impl FnMut(u32, &Event),
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), FormatError> {
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
    ) -> Result<(), FormatError> {
        let total = self.total;
        let mut next_progress = 1u64 << 22;
        let linear = self.linear();
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
                let c = &mut self.streams[i];
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
                let c = &self.streams[i];
                self.heads[i] = match c.buf.get(c.pos) {
                    Some(e) => (e.time, c.thread),
                    None => (u64::MAX, u32::MAX),
                };
            }
            if !linear {
                let c = &self.streams[i];
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Header, Op, Thread, TraceWriter};

    fn ev(time: u64) -> Event {
        Event {
            time,
            op: Op::MutexLock as u8,
            addr: 0x10,
            ..Event::default()
        }
    }

    #[test]
    fn index_reader_and_merge_agree_with_the_file() {
        let dir = std::env::temp_dir().join(format!("lockscope-index-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.lstrace");
        {
            let f = std::fs::File::create(&path).unwrap();
            let mut w = TraceWriter::new(f, &Header::default()).unwrap();
            for id in 1..=2 {
                w.write(&Record::Thread(Thread {
                    id,
                    process: 1,
                    ..Thread::default()
                }))
                .unwrap();
            }
            // Thread 2's chunk comes first in the file but is later in time.
            w.write_events(2, &[ev(50), ev(70)]).unwrap();
            w.write_events(1, &[ev(10), ev(60)]).unwrap();
            w.write_events(1, &[ev(80)]).unwrap();
            w.finish(&crate::Footer::default()).unwrap();
        }
        let ix = TraceIndex::build(&path).unwrap();
        assert_eq!(ix.events(), 5);
        assert_eq!(ix.threads(), vec![1, 2]);
        assert_eq!(ix.event_count(1), 3);
        let firsts: Vec<u64> = ix.chunks().iter().map(|c| c.first_ns).collect();
        assert_eq!(firsts, vec![50, 10, 80]);
        let mut r = ChunkReader::open(&path, &ix).unwrap();
        let second = ix.thread_chunks(1).nth(1).copied().unwrap();
        assert_eq!(r.read(&second).unwrap(), vec![ev(80)]);
        let mut m = Merge::new(&path, &ix).unwrap();
        let mut got = Vec::new();
        m.run(|t, e| got.push((t, e.time)), &mut |_, _| {}).unwrap();
        assert_eq!(got, vec![(1, 10), (2, 50), (1, 60), (2, 70), (1, 80)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
