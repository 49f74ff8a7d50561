//! The writer thread: decodes raw ring slots into trace events (ticks to
//! ns, call paths to stack ids, first sightings of locks, lock counters for
//! the summary), buffers them per thread, encodes and writes them.
//!
//! Decoding lives here rather than in the drain because the drain must
//! free the rings as fast as possible: a bulk copy of the slots costs ~3 ns
//! per event, decoding and converting another ~10, encoding ~15. With the
//! copy alone on the drain thread, a ring is emptied several times faster
//! than if the drain decoded (measured in `lockscope-bench-capture`).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockscope_capture::raw::{Head, Slot, MAX_FRAMES, OP_CODE_NAME, OP_THREAD_NAME, XF_ARGS};
use lockscope_format::codec::Encoder;
use lockscope_format::{
    phase, CodeName, Event, EventChunk, FormatError, LockInfo, Loss, LossReason, Op, ProcessEnd,
    Record, StackTrace, ThreadEnd, ThreadName, TraceWriter,
};

use crate::drain::{ClockConv, Msg};
use crate::slotbuf::SlotBuf;
use crate::LockSummary;

/// Events buffered per thread before a chunk is encoded: large chunks
/// amortize the record framing and warm the encoder's caches (the
/// format's own maximum chunk size).
const CHUNK_EVENTS: usize = 1 << 16;
/// Events buffered (encoded, ~4 bytes each) across all threads before
/// everything is flushed: bounds memory with hundreds of threads.
const MAX_BUFFERED: usize = 1 << 23;
/// How often buffered events are written out anyway, so that a recorder
/// that is itself killed leaves a useful (footer-less) trace.
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

#[derive(Default)]
struct LockStat {
    kind: u8,
    acquisitions: u64,
    contended: u64,
    wait_ns: u64,
}

#[derive(Default)]
struct ProcConv {
    pid: u32,
    last_ns: u64,
    locks: FastSet<u64>,
    /// Call paths seen, by their frames. The address hasher, not SipHash:
    /// in detailed mode every recorded access carries a path, and SipHash
    /// plus a fresh `Vec` per event were a tenth of the writer's time
    /// (`perf` on the spinlock fixture). The frames come from our own
    /// rings: no hash-flooding to defend against.
    stacks: FastMap<Vec<u64>, u32>,
    stats: FastMap<u64, LockStat>,
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

fn loss_key(r: LossReason) -> u8 {
    match r {
        LossReason::BufferFull => 1,
        LossReason::ThreadLimit => 2,
        LossReason::TraceLimit => 3,
        LossReason::RecorderDisabled => 4,
        _ => 5,
    }
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
/// mutex (`issue8_no_critical_section_inside_another_on_the_same_mutex`,
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

struct Converter<W: Write> {
    tw: TraceWriter<W>,
    /// Conversion segments by tick.
    segs: ClockSegs,
    procs: FastMap<u32, ProcConv>,
    threads: FastMap<u32, ThreadConv>,
    next_stack: u32,
    classes: [u8; 256],
    buffered: usize,
    last_flush: Instant,
    losses: HashMap<u8, (LossReason, u64)>,
    lost: u64,
    side: Vec<Record>,
    /// Live threads by (trace process id, OS tid), for thread names set
    /// by another thread.
    by_tid: FastMap<(u32, u32), u32>,
    /// Names given to a thread whose ring the drain has not opened yet:
    /// (process, tid, time, name), written after its Thread record.
    pending_names: Vec<(u32, u32, u64, String)>,
}

/// Bound on names waiting for their thread: a name for a tid that never
/// records an event is dropped at the end; this keeps a program naming
/// thousands of such threads from growing the list without limit.
const MAX_PENDING_NAMES: usize = 4096;

pub(crate) fn writer_loop<W: Write>(
    rx: Receiver<Msg>,
    pool: Sender<SlotBuf>,
    queued: Arc<AtomicUsize>,
    w: W,
    header: lockscope_format::Header,
) -> Result<WriterResult, FormatError> {
    let mut c = Converter {
        tw: TraceWriter::new(w, &header)?,
        segs: ClockSegs::default(),
        procs: FastMap::default(),
        threads: FastMap::default(),
        next_stack: 1,
        classes: op_classes(),
        buffered: 0,
        last_flush: Instant::now(),
        losses: HashMap::new(),
        lost: 0,
        side: Vec::new(),
        by_tid: FastMap::default(),
        pending_names: Vec::new(),
    };
    while let Ok(m) = rx.recv() {
        match m {
            Msg::Rec(r) => c.record(r)?,
            Msg::Raw { mut slots, segs } => {
                for g in &segs {
                    let run = slots.get(g.start..g.start + g.len).unwrap_or(&[]);
                    c.convert(g.thread, run, g.corrupt, g.lost, g.clock)?;
                }
                queued.fetch_sub(slots.len() * std::mem::size_of::<Slot>(), Ordering::Relaxed);
                slots.set_len(0);
                let _ = pool.send(slots);
                if c.buffered > MAX_BUFFERED || c.last_flush.elapsed() > FLUSH_EVERY {
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
                let last = c.procs.get(&process).map_or(0, |p| p.last_ns);
                c.tw.write(&Record::ProcessEnd(ProcessEnd {
                    process,
                    end_ns: end_ns.map_or(last, |e| e.max(last)),
                    status,
                }))?;
            }
            Msg::Finish {
                duration_ns,
                exit_status,
            } => return c.finish(duration_ns, exit_status),
        }
    }
    Err(FormatError::Io(std::io::Error::other(
        "the drain stopped before the end of the trace",
    )))
}

impl<W: Write> Converter<W> {
    fn record(&mut self, r: Record) -> Result<(), FormatError> {
        match &r {
            Record::Process(p) => {
                self.procs.insert(
                    p.id,
                    ProcConv {
                        pid: p.pid,
                        last_ns: p.start_ns,
                        ..ProcConv::default()
                    },
                );
            }
            Record::Thread(t) => {
                self.threads.insert(
                    t.id,
                    ThreadConv {
                        process: t.process,
                        last_ns: t.start_ns,
                        tid: t.tid,
                        ..ThreadConv::default()
                    },
                );
                self.by_tid.insert((t.process, t.tid), t.id);
            }
            Record::Loss(l) => self.count_loss(l),
            _ => {}
        }
        self.tw.write(&r)?;
        if let Record::Thread(t) = &r {
            if !self.pending_names.is_empty() {
                let key = (t.process, t.tid);
                let mut i = 0;
                while i < self.pending_names.len() {
                    if (self.pending_names[i].0, self.pending_names[i].1) == key {
                        let (_, _, time, name) = self.pending_names.remove(i);
                        self.tw.write(&Record::ThreadName(ThreadName {
                            thread: t.id,
                            time,
                            name,
                        }))?;
                    } else {
                        i += 1;
                    }
                }
            }
        }
        Ok(())
    }

    fn count_loss(&mut self, l: &Loss) {
        self.lost += l.events;
        self.losses
            .entry(loss_key(l.reason))
            .or_insert((l.reason, 0))
            .1 += l.events;
    }

    fn write_loss(&mut self, l: Loss) -> Result<(), FormatError> {
        if l.events == 0 {
            return Ok(());
        }
        self.count_loss(&l);
        self.tw.write(&Record::Loss(l))
    }

    fn flush_thread(&mut self, thread: u32) -> Result<(), FormatError> {
        if let Some(t) = self.threads.get_mut(&thread) {
            let count = t.enc.count();
            if count > 0 {
                let chunk = EventChunk {
                    thread,
                    count,
                    data: std::mem::take(&mut t.data),
                    offset: 0,
                };
                t.enc = Encoder::new();
                self.buffered -= count as usize;
                let rec = Record::Events(chunk);
                self.tw.write(&rec)?;
                // Reuse the buffer for the thread's next chunk.
                if let Record::Events(c) = rec {
                    t.data = c.data;
                    t.data.clear();
                }
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
        let by_tid = &self.by_tid;
        let pending_names = &mut self.pending_names;
        let side = &mut self.side;
        let next_stack = &mut self.next_stack;
        t.corrupt += corrupt;
        let before = t.enc.count();
        let mut i = 0usize;
        while i < slots.len() {
            let h = Head::from_slot(&slots[i]);
            let k = h.slots();
            if usize::from(h.nframes) > MAX_FRAMES || i + k > slots.len() {
                // A head claiming more slots than were published: the
                // program scribbled on its ring. The rest is skipped and
                // counted (the same rule as `Consumer::drain`).
                t.corrupt += (slots.len() - i) as u64;
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
                } else if let Some(&target) = by_tid.get(&(process, tid)) {
                    side.push(Record::ThreadName(ThreadName {
                        thread: target,
                        time: ns,
                        name,
                    }));
                } else if tid != 0 && pending_names.len() < MAX_PENDING_NAMES {
                    // Its ring is not open yet (the drain lists the
                    // session directory every few ms).
                    pending_names.push((process, tid, ns, name));
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
            if h.nframes > 0 {
                // Looked up as a slice in a buffer on the stack; a `Vec`
                // is made only for a path not seen before.
                let mut buf = [0u64; MAX_FRAMES];
                let n = usize::from(h.nframes);
                for (d, v) in buf
                    .iter_mut()
                    .zip(slots[fstart..].iter().flat_map(|s| s.0))
                    .take(n)
                {
                    *d = v;
                }
                let frames = &buf[..n];
                stack = match proc.stacks.get(frames) {
                    Some(&s) => s,
                    None => {
                        let s = *next_stack;
                        *next_stack += 1;
                        side.push(Record::Stack(StackTrace {
                            id: s,
                            process,
                            frames: frames.to_vec(),
                        }));
                        proc.stacks.insert(frames.to_vec(), s);
                        s
                    }
                };
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
                        side.push(Record::Lock(LockInfo {
                            process,
                            addr: h.addr,
                            first_op: h.op,
                            first_ns: ns,
                            first_site: h.site,
                        }));
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
        // Table entries (stacks, locks) go out before the events that
        // refer to them: those are still in the buffer.
        for r in std::mem::take(&mut self.side) {
            self.tw.write(&r)?;
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
        // A later thread may reuse the tid.
        if self.by_tid.get(&(t.process, t.tid)) == Some(&thread) {
            self.by_tid.remove(&(t.process, t.tid));
        }
        if t.run_count > 0 {
            if let Some(p) = self.procs.get_mut(&t.process) {
                p.stats.entry(t.run_addr).or_default().acquisitions += t.run_count;
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
        let end_ns = if end_tsc != 0 {
            self.segs.ns(end_tsc).max(t.last_ns)
        } else {
            t.last_ns
        };
        self.tw
            .write(&Record::ThreadEnd(ThreadEnd { thread, end_ns }))
    }

    fn finish(mut self, duration_ns: u64, exit_status: i32) -> Result<WriterResult, FormatError> {
        self.flush_all()?;
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
        for p in self.procs.values() {
            for (&addr, s) in &p.stats {
                top.push(LockSummary {
                    pid: p.pid,
                    addr,
                    kind: Op::from_u8(s.kind).map_or("?", Op::name),
                    acquisitions: s.acquisitions,
                    contended: s.contended,
                    wait_ns: s.wait_ns,
                });
            }
        }
        top.sort_by(|a, b| {
            (b.contended, b.wait_ns, b.acquisitions, a.addr).cmp(&(
                a.contended,
                a.wait_ns,
                a.acquisitions,
                b.addr,
            ))
        });
        top.truncate(10);
        let mut losses: Vec<_> = self.losses.values().copied().collect();
        losses.sort_by_key(|(r, _)| loss_key(*r));
        Ok(WriterResult {
            events,
            lost: self.lost,
            losses,
            top_locks: top,
        })
    }
}
