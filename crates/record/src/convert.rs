//! The writer: converter workers decode raw ring slots into trace events
//! (ticks to ns, call paths to stack ids, first sightings of locks, lock
//! counters for the summary) and encode them per thread; one output
//! thread writes what they produce.
//!
//! Decoding lives here rather than in the drain because the drain must
//! free the rings as fast as possible: a bulk copy of the slots costs ~3 ns
//! per event, decoding and converting another ~10, encoding ~15. With the
//! copy alone on the drain thread, a ring is emptied several times faster
//! than if the drain decoded (measured in `lockscope-bench-capture`).
//!
//! Several workers (the recorder must scale with cores). On a
//! 16-core machine one converting thread was the bottleneck: 16 threads
//! each locking a private mutex offer ~200M events/s, and the single
//! writer's ~25 ns per event filled the 1 GiB queue and made the program
//! wait. Each program thread belongs to one worker (chosen by the drain
//! when the thread appears: the one with the fewest live threads),
//! so everything per thread (its encoder's deltas, its open critical
//! section, its run-length counts) stays in one place without locking;
//! what is per process and shared by threads in different workers (the
//! call-path and lock tables, thread ids by tid) sits behind one mutex
//! that a worker takes only on a miss of its own cache of those tables.
//! The alternative, workers per batch instead of per thread, would have
//! needed every thread's state handed between workers in order.
//!
//! Order in the file: a table entry (call path, lock) is sent to the
//! output under the tables' lock, so any worker that finds it there sends
//! its referring events later; a thread's events follow its Thread record
//! (both come from its worker); a process's end is written once every
//! worker has sent everything it had of that process.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockscope_format::codec::Encoder;
use lockscope_format::{
    phase, CodeName, Event, EventChunk, FormatError, LockInfo, Loss, LossReason, Op, ProcessEnd,
    Record, StackTrace, ThreadEnd, ThreadName, TraceWriter,
};
use lockscope_ring::raw::{
    Head, LastPath, Slot, MAX_FRAMES, OP_CODE_NAME, OP_THREAD_NAME, XF_ARGS, XF_PATH_TAIL,
};

use crate::drain::{ClockConv, Msg};
use crate::slotbuf::SlotBuf;
use crate::LockSummary;

/// Events buffered per thread before a chunk is encoded: large chunks
/// amortize the record framing and warm the encoder's caches (the
/// format's own maximum chunk size).
const CHUNK_EVENTS: usize = 1 << 16;
/// Events buffered (encoded, ~4 bytes each) across all threads before
/// everything is flushed: bounds memory with hundreds of threads. Shared
/// out among the workers.
const MAX_BUFFERED: usize = 1 << 23;
/// How often buffered events are written out anyway, by the workers and
/// then by the writer to the file, also while the program is idle, so
/// that a recorder that is itself killed (SIGKILL, the OOM killer) leaves
/// a trace holding all but about the last two of these periods (readable,
/// without a footer). Before, an idle program's events stayed in a
/// worker's buffer and the writer's 1 MiB buffer for as long as it was
/// idle, and a killed recorder left 0 bytes.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Multiplicative hash for addresses: the default SipHash costs ~20 ns per
/// lookup, too much at tens of millions of events per second, and the
/// keys (lock addresses from our own rings) need no DoS resistance.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Eight bytes at a time: a call path (`[u64]`) arrives here as
        // one slice of its bytes, and a round per byte made hashing a
        // 12-frame path 96 rounds.
        let mut chunks = bytes.chunks_exact(8);
        for c in chunks.by_ref() {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
        for &b in chunks.remainder() {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;
type FastSet<K> = HashSet<K, BuildHasherDefault<AddrHasher>>;

#[derive(Default, Clone, Copy)]
pub(crate) struct LockStat {
    kind: u8,
    acquisitions: u64,
    contended: u64,
    wait_ns: u64,
    /// Acquisitions (or futex waits) whose BEGIN had no completion when
    /// their thread ended (the drain ends every thread, a killed
    /// process's at its end): a deadlock, or a program killed while it
    /// waited. Their wait up to the thread's end is in `wait_ns`.
    still_waiting: u64,
}

/// A worker's view of one process: its own cache of the shared tables,
/// and its threads' lock counters (summed at the end).
#[derive(Default)]
struct ProcConv {
    last_ns: u64,
    /// Locks this worker has seen (a subset of [`Tables::locks`]).
    locks: FastSet<u64>,
    /// Call paths seen, by their frames (a subset of [`Tables::stacks`]).
    /// The address hasher, not SipHash: in detailed mode every recorded
    /// access carries a path, and SipHash plus a fresh `Vec` per event
    /// were a tenth of the writer's time (`perf` on the spinlock
    /// fixture). The frames come from our own rings: no hash-flooding to
    /// defend against.
    stacks: FastMap<Vec<u64>, u32>,
    stats: FastMap<u64, LockStat>,
}

/// What is shared by the workers: the trace's tables, which must have one
/// id per call path and one entry per lock whichever thread met it first.
/// Taken only on a miss of a worker's own cache (a path or lock that
/// worker has not seen), so its cost does not grow with the event rate.
pub(crate) struct Tables {
    /// Call path ids by process and frames.
    stacks: FastMap<u32, FastMap<Vec<u64>, u32>>,
    next_stack: u32,
    /// Locks whose first sighting was written, by (process, address).
    locks: FastSet<(u32, u64)>,
    /// Threads by (trace process id, OS tid), for thread names set by
    /// another thread: every thread that had the tid, as (start, trace
    /// id), oldest first. Kept after a thread ends: the worker converting
    /// the naming thread may be behind the named thread's own, which can
    /// have ended by then (a name was lost that way, one run in a few,
    /// `names_given_across_threads_are_kept_with_two_workers`);
    /// a reused tid is told apart by the name's time.
    by_tid: FastMap<(u32, u32), Vec<(u64, u32)>>,
    /// Names given to a thread whose ring the drain has not opened yet:
    /// (process, tid, time, name), written after its Thread record.
    pending_names: Vec<(u32, u32, u64, String)>,
    /// End of each thread that has ended (trace id -> ns), so that a name
    /// given to a reused tid after its previous owner ended does not go
    /// to that owner (see [`name_target`]).
    ended: FastMap<u32, u64>,
    /// Workers that have finished: the last one writes the names still
    /// parked (see `Msg::Finish` in [`worker_loop`]).
    finished: usize,
}

/// Where a name given to OS thread `tid` of `process` at `ns` goes:
/// `Some(Some(id))` to that trace thread, `Some(None)` to the next thread
/// to get the tid (parked until its ring is opened), `None` nowhere
/// known (no thread ever had the tid: parked too, if it can be).
///
/// The thread that had the tid at `ns`: the latest to start before it.
/// Unless that one is known to have ended before `ns`: the tid was
/// reused, and the name, given to the new thread just after its
/// `pthread_create` and before its first stamp (which is its start),
/// belongs to the next one: the first to start after `ns`, or the next
/// to appear. A name set before any thread with the tid started goes to
/// the oldest.
fn name_target(tb: &Tables, process: u32, tid: u32, ns: u64) -> Option<Option<u32>> {
    let v = tb.by_tid.get(&(process, tid))?;
    let i = holder(v, ns)?;
    let (start, id) = v[i];
    match tb.ended.get(&id) {
        Some(&end) if start <= ns && end < ns => Some(v.get(i + 1).map(|&(_, next)| next)),
        _ => Some(Some(id)),
    }
}

/// Index in `v` (threads that had one tid, as (start, trace id), oldest
/// first) of the one that had it at `ns`: the latest to start before it,
/// else the oldest (a name set just before its thread's first stamp).
fn holder(v: &[(u64, u32)], ns: u64) -> Option<usize> {
    v.iter()
        .rposition(|&(start, _)| start <= ns)
        .or((!v.is_empty()).then_some(0))
}

impl Tables {
    pub(crate) fn new() -> Tables {
        Tables {
            stacks: FastMap::default(),
            next_stack: 1,
            locks: FastSet::default(),
            by_tid: FastMap::default(),
            pending_names: Vec::new(),
            ended: FastMap::default(),
            finished: 0,
        }
    }
}

/// What a worker sends to the output thread.
pub(crate) enum Out {
    /// A record, written as is.
    Rec(Record),
    /// The worker has sent everything it had of `process`, whose latest
    /// event it converted at `last_ns` (0: none).
    ProcessEnd {
        /// Trace process id.
        process: u32,
        /// End time if known.
        end_ns: Option<u64>,
        /// Shell-style status, -1 unknown.
        status: i32,
        /// The worker's latest event time of that process.
        last_ns: u64,
    },
    /// The worker has flushed everything and stops; its lock counters by
    /// (process, address).
    Done(Vec<(u32, u64, LockStat)>),
    /// A worker has sent everything before durability mark N (see
    /// `Drainer::mark`).
    Mark(u64),
    /// From the drain, after its last message to the workers: write the
    /// footer once every worker is done.
    Finish {
        /// Recording duration.
        duration_ns: u64,
        /// Exit status of the program.
        exit_status: i32,
    },
}

/// Per-thread conversion state. Events are encoded as soon as they are
/// decoded, into the thread's open chunk (`enc` + `data`), instead of
/// being collected as 48-byte [`Event`]s and encoded later: one pass over
/// each event and ~4 bytes of buffer per event instead of 48.
#[derive(Default)]
struct ThreadConv {
    process: u32,
    last_ns: u64,
    last_lock: u64,
    prev_lock: u64,
    run_addr: u64,
    run_count: u64,
    begin: Option<(u64, u64)>,
    corrupt: u64,
    tid: u32,
    enc: Encoder,
    data: Vec<u8>,
    /// The thread's last call path written in full, which resolves the
    /// paths written as a tail of it (`XF_PATH_TAIL`).
    last_path: Box<LastPath>,
    /// Ids of the paths met as tails of `last_path`: (site, frames, id);
    /// frames 0 is an empty entry. A spin loop's or a lock pair's events
    /// alternate between a few sites under one tail: each is looked up
    /// here instead of hashing its frames again. Emptied when the last
    /// path changes. Eight, replaced in turn: the spinlock fixture's loop
    /// has five sites, and with four entries every lookup missed.
    tails: [(u64, u8, u32); 8],
    /// Entry of `tails` to replace next.
    tails_next: u8,
}

/// Classification of op bytes, one table lookup per event instead of a
/// `match` chain.
const C_SYNC: u8 = 1;
const C_ACQUIRE: u8 = 2;
const C_FUTEX_WAIT: u8 = 4;

fn op_classes() -> [u8; 256] {
    let mut t = [0u8; 256];
    for v in 0..=255u8 {
        if let Some(op) = Op::from_u8(v) {
            if v >= Op::MutexLock as u8 && v <= Op::FutexWake as u8 {
                t[v as usize] |= C_SYNC;
            }
            if op.is_acquire() {
                t[v as usize] |= C_ACQUIRE;
            }
            if op == Op::FutexWait {
                t[v as usize] |= C_FUTEX_WAIT;
            }
        }
    }
    t
}

/// What the writer reports at the end.
pub(crate) struct WriterResult {
    pub events: u64,
    pub lost: u64,
    pub losses: Vec<(LossReason, u64)>,
    pub top_locks: Vec<LockSummary>,
}

/// Every conversion segment the writer has seen, in tick order: ticks are
/// converted by the segment their own value falls in, not by the one
/// current when they were copied.
///
/// Why: the drain refines the tick rate every 50 ms and stamps each copy
/// with the segment current at the copy. Two threads' events stamped
/// before a refinement but copied on either side of it were converted
/// with two slightly different rates, which moved them by up to
/// (drain latency x rate change): hundreds of ns on a loaded machine, and
/// a 20 ns critical section came out inside another thread's on the same
/// mutex (`no_critical_section_inside_another_on_the_same_mutex`,
/// release build). Picking the segment by tick makes the conversion one
/// monotone function for all threads. Every segment that covers an event
/// is known before that event is converted: an event stamped after a
/// refinement was copied after it, so its batch carries that segment.
#[derive(Default)]
struct ClockSegs {
    v: Vec<ClockConv>,
}

impl ClockSegs {
    fn learn(&mut self, c: ClockConv) {
        if !matches!(self.v.last(), Some(l) if c.tsc0 <= l.tsc0) {
            self.v.push(c);
        }
    }

    #[inline]
    fn ns(&self, t: u64) -> u64 {
        // Most events fall in the newest segment: walk from the end.
        for s in self.v.iter().rev() {
            if t >= s.tsc0 {
                return s.ns(t);
            }
        }
        self.v.first().map_or(0, |s| s.ns(t))
    }
}

/// Bound on names waiting for their thread: a name for a tid that never
/// records an event is dropped at the end; this keeps a program naming
/// thousands of such threads from growing the list without limit.
const MAX_PENDING_NAMES: usize = 4096;

/// One converter worker: the threads the drain gave it.
struct Worker {
    out: SyncSender<Out>,
    tables: Arc<Mutex<Tables>>,
    /// Conversion segments by tick (every segment: the drain sends each
    /// new one to every worker).
    segs: ClockSegs,
    procs: FastMap<u32, ProcConv>,
    threads: FastMap<u32, ThreadConv>,
    classes: [u8; 256],
    buffered: usize,
    max_buffered: usize,
    last_flush: Instant,
    side: Vec<Record>,
}

/// The tables' lock. A worker that panicked while holding it left them
/// consistent (every change is one insert), so a poisoned lock is used
/// as is.
fn lock(t: &Mutex<Tables>) -> std::sync::MutexGuard<'_, Tables> {
    t.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a converter worker says when the writer thread is gone: the
/// writer's own error is the cause (see [`is_gone`]).
const GONE: &str = "the trace's output thread stopped";

fn gone() -> FormatError {
    FormatError::Io(std::io::Error::other(GONE))
}

/// Whether `e` is a worker's [`gone`]: the consequence of the writer's
/// failure, not a cause of its own.
pub(crate) fn is_gone(e: &FormatError) -> bool {
    matches!(e, FormatError::Io(io) if io.kind() == std::io::ErrorKind::Other && io.to_string() == GONE)
}

/// A converter worker's loop: messages from the drain in, records out.
/// `workers`: how many there are (for its share of the buffering bound).
pub(crate) fn worker_loop(
    rx: Receiver<Msg>,
    pool: Sender<SlotBuf>,
    queued: Arc<AtomicUsize>,
    out: SyncSender<Out>,
    tables: Arc<Mutex<Tables>>,
    workers: usize,
) -> Result<(), FormatError> {
    let mut c = Worker {
        out,
        tables,
        segs: ClockSegs::default(),
        procs: FastMap::default(),
        threads: FastMap::default(),
        classes: op_classes(),
        buffered: 0,
        max_buffered: MAX_BUFFERED / workers.max(1),
        last_flush: Instant::now(),
        side: Vec::new(),
    };
    loop {
        let m = match rx.recv_timeout(FLUSH_EVERY) {
            Ok(m) => m,
            // Idle: what is buffered goes out now (see FLUSH_EVERY).
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if c.buffered > 0 {
                    c.flush_all()?;
                }
                c.last_flush = Instant::now();
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match m {
            Msg::Rec(r) => c.record(r)?,
            Msg::Clock(conv) => c.segs.learn(conv),
            Msg::Raw { slots, segs } => {
                let mut n = 0;
                for g in &segs {
                    let run = slots.get(g.start..g.start + g.len).unwrap_or(&[]);
                    n += g.len;
                    c.convert(g.thread, run, g.corrupt, g.lost, g.clock)?;
                }
                queued.fetch_sub(n * std::mem::size_of::<Slot>(), Ordering::Relaxed);
                // The batch may be shared with other workers: the last to
                // let go returns it for reuse (`into_inner` gives it to
                // exactly one of them).
                if let Some(mut slots) = Arc::into_inner(slots) {
                    slots.set_len(0);
                    let _ = pool.send(slots);
                }
                if c.buffered > c.max_buffered || c.last_flush.elapsed() > FLUSH_EVERY {
                    c.flush_all()?;
                    c.last_flush = Instant::now();
                }
            }
            Msg::ThreadEnd {
                thread,
                end_tsc,
                lost,
                clock,
            } => c.thread_end(thread, end_tsc, lost, clock)?,
            Msg::ProcessEnd {
                process,
                end_ns,
                status,
            } => {
                c.flush_all()?;
                let last_ns = c.procs.get(&process).map_or(0, |p| p.last_ns);
                c.send(Out::ProcessEnd {
                    process,
                    end_ns,
                    status,
                    last_ns,
                })?;
            }
            Msg::Mark(n) => {
                // Everything converted before the mark goes out before it.
                c.flush_all()?;
                c.last_flush = Instant::now();
                c.send(Out::Mark(n))?;
            }
            Msg::Finish => {
                c.flush_all()?;
                c.names_never_claimed(workers)?;
                let mut stats = Vec::new();
                for (&process, p) in &c.procs {
                    for (&addr, &s) in &p.stats {
                        stats.push((process, addr, s));
                    }
                }
                return c.send(Out::Done(stats));
            }
        }
    }
    Err(FormatError::Io(std::io::Error::other(
        "the drain stopped before the end of the trace",
    )))
}

/// The id of call path `frames` of `process`: from the worker's own
/// cache, else from the shared table (another worker met it first), else
/// a new one, whose record is sent under the tables' lock (see the module
/// doc: order in the file).
fn intern_path(
    proc: &mut ProcConv,
    tables: &Mutex<Tables>,
    out: &SyncSender<Out>,
    process: u32,
    frames: &[u64],
) -> Result<u32, FormatError> {
    if let Some(&s) = proc.stacks.get(frames) {
        return Ok(s);
    }
    let mut tb = lock(tables);
    let tb = &mut *tb;
    let known = tb.stacks.entry(process).or_default();
    let s = match known.get(frames) {
        Some(&s) => s,
        None => {
            let s = tb.next_stack;
            tb.next_stack += 1;
            known.insert(frames.to_vec(), s);
            out.send(Out::Rec(Record::Stack(StackTrace {
                id: s,
                process,
                frames: frames.to_vec(),
            })))
            .map_err(|_| gone())?;
            s
        }
    };
    proc.stacks.insert(frames.to_vec(), s);
    Ok(s)
}

impl Worker {
    fn send(&self, o: Out) -> Result<(), FormatError> {
        self.out.send(o).map_err(|_| gone())
    }

    fn write(&self, r: Record) -> Result<(), FormatError> {
        self.send(Out::Rec(r))
    }

    fn record(&mut self, r: Record) -> Result<(), FormatError> {
        let Record::Thread(t) = &r else {
            return self.write(r);
        };
        self.threads.insert(
            t.id,
            ThreadConv {
                process: t.process,
                last_ns: t.start_ns,
                tid: t.tid,
                ..ThreadConv::default()
            },
        );
        self.procs.entry(t.process).or_default();
        let (id, process, tid, start) = (t.id, t.process, t.tid, t.start_ns);
        // Under the tables' lock: another worker that finds the thread in
        // `by_tid` sends its name for it after this record.
        let mut tb = lock(&self.tables);
        self.write(r)?;
        tb.by_tid
            .entry((process, tid))
            .or_default()
            .push((start, id));
        let mut i = 0;
        while i < tb.pending_names.len() {
            if (tb.pending_names[i].0, tb.pending_names[i].1) == (process, tid) {
                let (_, _, time, name) = tb.pending_names.remove(i);
                self.write(Record::ThreadName(ThreadName {
                    thread: id,
                    time,
                    name,
                }))?;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// At the last worker's finish, when every thread has been
    /// registered: a name parked for the next thread to get a reused tid
    /// that no thread claimed goes to the thread that had the tid
    /// before (the latest to start before the name), as it would have
    /// without the reuse rule of [`name_target`]; a name for a tid no
    /// thread ever had is dropped, as before.
    fn names_never_claimed(&mut self, workers: usize) -> Result<(), FormatError> {
        let mut tb = lock(&self.tables);
        tb.finished += 1;
        if tb.finished < workers {
            return Ok(());
        }
        for (process, tid, time, name) in std::mem::take(&mut tb.pending_names) {
            let target = tb
                .by_tid
                .get(&(process, tid))
                .and_then(|v| holder(v, time).map(|i| v[i].1));
            if let Some(thread) = target {
                self.write(Record::ThreadName(ThreadName { thread, time, name }))?;
            }
        }
        Ok(())
    }

    fn write_loss(&mut self, l: Loss) -> Result<(), FormatError> {
        if l.events == 0 {
            return Ok(());
        }
        self.write(Record::Loss(l))
    }

    fn flush_thread(&mut self, thread: u32) -> Result<(), FormatError> {
        if let Some(t) = self.threads.get_mut(&thread) {
            let count = t.enc.count();
            if count > 0 {
                // The buffer goes to the output thread; the next chunk
                // grows a new one (one allocation per 64K events at most,
                // and a quiet thread keeps no large buffer).
                let chunk = EventChunk {
                    thread,
                    count,
                    data: std::mem::take(&mut t.data),
                    offset: 0,
                };
                t.enc = Encoder::new();
                self.buffered -= count as usize;
                self.write(Record::Events(chunk))?;
            }
        }
        Ok(())
    }

    fn flush_all(&mut self) -> Result<(), FormatError> {
        let mut ids: Vec<u32> = self
            .threads
            .iter()
            .filter(|(_, t)| t.enc.count() > 0)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            self.flush_thread(id)?;
        }
        Ok(())
    }

    /// Decodes and converts one batch of slots of `thread`.
    fn convert(
        &mut self,
        thread: u32,
        slots: &[Slot],
        corrupt: u64,
        lost: u64,
        clock: ClockConv,
    ) -> Result<(), FormatError> {
        self.segs.learn(clock);
        let segs = &self.segs;
        let Some(t) = self.threads.get_mut(&thread) else {
            return Ok(()); // cannot happen: Thread records come first
        };
        let Some(proc) = self.procs.get_mut(&t.process) else {
            return Ok(());
        };
        let process = t.process;
        let classes = &self.classes;
        let tables = &self.tables;
        let out = &self.out;
        let side = &mut self.side;
        t.corrupt += corrupt;
        if corrupt > 0 {
            // Slots the drain skipped may hold the path later events
            // refer to: no path rather than a wrong one.
            t.last_path.clear();
            t.tails = Default::default();
        }
        let before = t.enc.count();
        let mut i = 0usize;
        while i < slots.len() {
            let h = Head::from_slot(&slots[i]);
            let k = h.slots();
            if usize::from(h.nframes) > MAX_FRAMES || i + k > slots.len() {
                // A head claiming more slots than were published: the
                // program scribbled on its ring. The rest is skipped and
                // counted (the same rule as `Consumer::drain`), and so is
                // the path later events may refer to.
                t.corrupt += (slots.len() - i) as u64;
                t.last_path.clear();
                t.tails = Default::default();
                break;
            }
            let (arg, arg2, fstart) = if h.xflags & XF_ARGS != 0 {
                (slots[i + 1].0[0], slots[i + 1].0[1], i + 2)
            } else {
                (u64::from(h.aux), 0, i + 1)
            };
            i += k;
            let mut ns = segs.ns(h.tsc);
            // Per-thread times never go backwards, whatever the clock
            // estimate did between two batches.
            if ns < t.last_ns {
                ns = t.last_ns;
            }
            t.last_ns = ns;
            if h.op == OP_THREAD_NAME {
                // `addr` is the tid of the thread that was named, which is
                // not always the one whose ring this is: a thread may name
                // another (pthread_setname_np(worker, ...)). 0: the preload
                // library could not tell which thread; the name is dropped
                // rather than given to the wrong one.
                let tid = h.addr as u32;
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&arg.to_le_bytes());
                b[8..].copy_from_slice(&arg2.to_le_bytes());
                let name = crate::drain::name_from(&b);
                if tid == t.tid {
                    side.push(Record::ThreadName(ThreadName {
                        thread,
                        time: ns,
                        name,
                    }));
                    continue;
                }
                // Another thread, perhaps another worker's: looked up and
                // parked under the tables' lock, so that its worker either
                // has written its Thread record already or will find the
                // name when it does.
                let mut tb = lock(tables);
                let target = name_target(&tb, process, tid, ns).flatten();
                if let Some(target) = target {
                    out.send(Out::Rec(Record::ThreadName(ThreadName {
                        thread: target,
                        time: ns,
                        name,
                    })))
                    .map_err(|_| gone())?;
                } else if tid != 0 && tb.pending_names.len() < MAX_PENDING_NAMES {
                    // Its ring is not open yet (the drain lists the
                    // session directory every few ms).
                    tb.pending_names.push((process, tid, ns, name));
                }
                continue;
            }
            if h.op == OP_CODE_NAME {
                let bytes: Vec<u8> = slots[fstart..]
                    .iter()
                    .flat_map(|s| s.0)
                    .take(usize::from(h.nframes))
                    .flat_map(u64::to_le_bytes)
                    .take_while(|&b| b != 0)
                    .collect();
                if !bytes.is_empty() {
                    side.push(Record::CodeName(CodeName {
                        process,
                        addr: h.addr,
                        name: String::from_utf8_lossy(&bytes).into_owned(),
                    }));
                }
                continue;
            }
            let mut stack = 0;
            let tail = h.xflags & XF_PATH_TAIL != 0;
            let cached = if tail && h.nframes > 0 {
                t.tails
                    .iter()
                    .find(|e| e.0 == h.site && e.1 == h.nframes)
                    .map(|e| e.2)
            } else {
                None
            };
            if let Some(s) = cached {
                stack = s;
            } else if h.nframes > 0 {
                // Looked up as a slice of the batch itself (a copy into a
                // zeroed 64-frame buffer cost a 512-byte memset per
                // event: a tenth of the converter's instructions in
                // detailed mode), or of the last full path for a tail;
                // a `Vec` is made only for a path not seen before. The
                // event's slots were checked to be there.
                let words = lockscope_ring::raw::slot_words(&slots[fstart..]);
                if !tail {
                    t.tails = Default::default();
                }
                // None: a pseudo-op's payload (not here: handled above),
                // or a tail of a path that was never read (the events
                // before it were corrupt, and counted): the event is kept
                // without a path rather than given a wrong one.
                if let Some(frames) = t.last_path.resolve(&h, words) {
                    stack = intern_path(proc, tables, out, process, frames)?;
                    if tail {
                        let at = usize::from(t.tails_next) % t.tails.len();
                        t.tails[at] = (h.site, h.nframes, stack);
                        t.tails_next = t.tails_next.wrapping_add(1);
                    }
                }
            }
            let class = classes[h.op as usize];
            if class & C_SYNC != 0 {
                // Two most recent objects of the thread: a pair of nested
                // locks (or a cond var and its mutex) alternates between
                // two addresses and would otherwise cost a hash lookup
                // per event.
                if h.addr != t.last_lock && h.addr != t.prev_lock {
                    t.prev_lock = t.last_lock;
                    t.last_lock = h.addr;
                    if proc.locks.insert(h.addr) {
                        // New to this worker; written once for the trace,
                        // by whichever worker meets the lock first.
                        if lock(tables).locks.insert((process, h.addr)) {
                            out.send(Out::Rec(Record::Lock(LockInfo {
                                process,
                                addr: h.addr,
                                first_op: h.op,
                                first_ns: ns,
                                first_site: h.site,
                            })))
                            .map_err(|_| gone())?;
                        }
                        proc.stats.insert(
                            h.addr,
                            LockStat {
                                kind: h.op,
                                ..LockStat::default()
                            },
                        );
                    }
                }
                let ph = phase::of(h.flags);
                if class & (C_ACQUIRE | C_FUTEX_WAIT) != 0 {
                    if ph == phase::BEGIN {
                        t.begin = Some((h.addr, ns));
                    } else if ph == phase::DONE || ph == phase::FAIL {
                        let waited = match t.begin.take() {
                            Some((a, b)) if a == h.addr => Some(ns - b),
                            _ => None,
                        };
                        let is_acq = class & C_ACQUIRE != 0 && ph == phase::DONE;
                        if is_acq {
                            // Run-length counting: a thread usually hammers
                            // one lock, so the map is touched once per run.
                            if h.addr == t.run_addr {
                                t.run_count += 1;
                            } else {
                                if t.run_count > 0 {
                                    proc.stats.entry(t.run_addr).or_default().acquisitions +=
                                        t.run_count;
                                }
                                t.run_addr = h.addr;
                                t.run_count = 1;
                            }
                        }
                        let contended = if class & C_FUTEX_WAIT != 0 {
                            waited.is_some()
                        } else {
                            is_acq && h.flags & phase::CONTENDED != 0
                        };
                        if contended {
                            let s = proc.stats.entry(h.addr).or_default();
                            s.contended += 1;
                            s.wait_ns += waited.unwrap_or(0);
                        }
                    }
                }
            }
            // A GPU activity carries its start and end on the GPU as TSC
            // ticks (the preload library converted CUPTI's clock): they
            // become trace nanoseconds like every timestamp.
            let (addr, arg) = if h.op == Op::GpuActivity as u8 {
                (clock.ns(h.addr), clock.ns(arg))
            } else {
                (h.addr, arg)
            };
            let e = Event {
                time: ns,
                op: h.op,
                flags: h.flags,
                addr,
                site: h.site,
                stack,
                arg,
                arg2,
            };
            t.enc.encode(&e, &mut t.data);
        }
        if t.last_ns > proc.last_ns {
            proc.last_ns = t.last_ns;
        }
        // Events the producer counted as lost were dropped while the ring
        // was full, i.e. after everything in this batch: the annotation
        // goes at its end.
        if lost > 0 {
            let e = Event {
                time: t.last_ns,
                op: Op::Lost as u8,
                arg: lost,
                ..Event::default()
            };
            t.enc.encode(&e, &mut t.data);
        }
        self.buffered += (t.enc.count() - before) as usize;
        let full = t.enc.count() as usize >= CHUNK_EVENTS;
        // Names go out before the events after them: those are still in
        // the buffer.
        for r in std::mem::take(&mut self.side) {
            self.write(r)?;
        }
        if full {
            self.flush_thread(thread)?;
        }
        Ok(())
    }

    fn thread_end(
        &mut self,
        thread: u32,
        end_tsc: u64,
        lost: u64,
        clock: ClockConv,
    ) -> Result<(), FormatError> {
        self.segs.learn(clock);
        self.flush_thread(thread)?;
        let Some(t) = self.threads.remove(&thread) else {
            return Ok(());
        };
        let end_ns = if end_tsc != 0 {
            self.segs.ns(end_tsc).max(t.last_ns)
        } else {
            t.last_ns
        };
        if let Some(p) = self.procs.get_mut(&t.process) {
            if t.run_count > 0 {
                p.stats.entry(t.run_addr).or_default().acquisitions += t.run_count;
            }
            // A call still blocked when its thread ended: its wait so far
            // counts, so that a deadlock's locks are in the summary.
            if let Some((addr, since)) = t.begin {
                let s = p.stats.entry(addr).or_default();
                s.still_waiting += 1;
                s.wait_ns += end_ns.saturating_sub(since);
            }
        }
        self.write_loss(Loss {
            thread,
            process: t.process,
            events: lost,
            reason: LossReason::BufferFull,
        })?;
        self.write_loss(Loss {
            thread,
            process: t.process,
            events: t.corrupt,
            reason: LossReason::CorruptBuffer,
        })?;
        lock(&self.tables).ended.insert(thread, end_ns);
        self.write(Record::ThreadEnd(ThreadEnd { thread, end_ns }))
    }
}

/// The output thread's state: the one writer of the file.
struct Output<W: Write> {
    tw: TraceWriter<W>,
    workers: usize,
    losses: HashMap<u8, (LossReason, u64)>,
    lost: u64,
    /// (pid, start) of each process, for the summary and process ends.
    procs: FastMap<u32, (u32, u64)>,
    /// Process ends waiting for the other workers: (workers heard from,
    /// latest event, end, status).
    ends: FastMap<u32, (usize, u64, Option<u64>, i32)>,
    stats: FastMap<(u32, u64), LockStat>,
    done: usize,
    finish: Option<(u64, i32)>,
}

/// The output thread's loop: writes what the drain and the workers send,
/// and the footer once every worker is done (after `Msg::Finish`).
pub(crate) fn output_loop<W: Write>(
    rx: Receiver<Out>,
    w: W,
    header: lockscope_format::Header,
    workers: usize,
    durable: Arc<std::sync::atomic::AtomicU64>,
) -> Result<WriterResult, FormatError> {
    let mut o = Output {
        tw: TraceWriter::new(w, &header)?,
        workers: workers.max(1),
        losses: HashMap::new(),
        lost: 0,
        procs: FastMap::default(),
        ends: FastMap::default(),
        stats: FastMap::default(),
        done: 0,
        finish: None,
    };
    let mut last_flush = Instant::now();
    // Marks seen, by number, until every worker has sent it.
    let mut marks: FastMap<u64, usize> = FastMap::default();
    loop {
        // The file gets what was written at least every FLUSH_EVERY, busy
        // or idle (the buffer's own writes happen only when it is full).
        if last_flush.elapsed() >= FLUSH_EVERY {
            o.tw.flush()?;
            last_flush = Instant::now();
        }
        let m = match rx.recv_timeout(FLUSH_EVERY) {
            Ok(m) => m,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match m {
            Out::Rec(r) => {
                match &r {
                    Record::Process(p) => {
                        o.procs.insert(p.id, (p.pid, p.start_ns));
                    }
                    Record::Loss(l) => {
                        o.lost += l.events;
                        o.losses.entry(l.reason.code()).or_insert((l.reason, 0)).1 += l.events;
                    }
                    _ => {}
                }
                o.tw.write(&r)?;
            }
            Out::ProcessEnd {
                process,
                end_ns,
                status,
                last_ns,
            } => {
                let e = o.ends.entry(process).or_insert((0, 0, end_ns, status));
                e.0 += 1;
                e.1 = e.1.max(last_ns);
                if e.0 == o.workers {
                    let (_, last, end_ns, status) = *e;
                    o.ends.remove(&process);
                    let last = last.max(o.procs.get(&process).map_or(0, |p| p.1));
                    o.tw.write(&Record::ProcessEnd(ProcessEnd {
                        process,
                        end_ns: end_ns.map_or(last, |e| e.max(last)),
                        status,
                    }))?;
                }
            }
            Out::Done(stats) => {
                for (process, addr, s) in stats {
                    let m = o.stats.entry((process, addr)).or_default();
                    if m.kind == 0 {
                        m.kind = s.kind;
                    }
                    m.acquisitions += s.acquisitions;
                    m.contended += s.contended;
                    m.wait_ns += s.wait_ns;
                    m.still_waiting += s.still_waiting;
                }
                o.done += 1;
            }
            Out::Mark(n) => {
                let seen = marks.entry(n).or_default();
                *seen += 1;
                if *seen == o.workers {
                    marks.remove(&n);
                    // In the kernel's hands: a killed recorder no longer
                    // loses it (no fsync: the machine's crash is not what
                    // this guards against).
                    o.tw.flush()?;
                    last_flush = Instant::now();
                    durable.fetch_max(n, Ordering::Release);
                }
            }
            Out::Finish {
                duration_ns,
                exit_status,
            } => o.finish = Some((duration_ns, exit_status)),
        }
        // The drain's request usually comes before the workers are done.
        if let (true, Some((duration_ns, exit_status))) = (o.done == o.workers, o.finish) {
            return o.finish(duration_ns, exit_status);
        }
    }
    Err(FormatError::Io(std::io::Error::other(
        "a converter worker stopped before the end of the trace",
    )))
}

impl<W: Write> Output<W> {
    fn finish(self, duration_ns: u64, exit_status: i32) -> Result<WriterResult, FormatError> {
        let events = self.tw.events_written();
        let footer = lockscope_format::Footer {
            duration_ns,
            events,
            lost: self.lost,
            exit_status,
        };
        let mut w = self.tw.finish(&footer)?;
        w.flush()?;
        let mut top = Vec::new();
        for (&(process, addr), s) in &self.stats {
            top.push(LockSummary {
                pid: self.procs.get(&process).map_or(0, |p| p.0),
                addr,
                kind: Op::from_u8(s.kind).map_or("?", Op::name),
                acquisitions: s.acquisitions,
                contended: s.contended,
                wait_ns: s.wait_ns,
                still_waiting: s.still_waiting,
            });
        }
        // A lock a thread was still waiting for counts as contended here:
        // a deadlock's locks are the ones to show.
        top.sort_by(|a, b| {
            (
                b.contended + b.still_waiting,
                b.wait_ns,
                b.acquisitions,
                a.addr,
            )
                .cmp(&(
                    a.contended + a.still_waiting,
                    a.wait_ns,
                    a.acquisitions,
                    b.addr,
                ))
        });
        top.truncate(10);
        let mut losses: Vec<_> = self.losses.values().copied().collect();
        losses.sort_by_key(|(r, _)| r.code());
        Ok(WriterResult {
            events,
            lost: self.lost,
            losses,
            top_locks: top,
        })
    }
}
