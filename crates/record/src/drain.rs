//! The drain: discovers session files, empties the rings, converts raw
//! events into trace events and records, and hands them to the writer.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtOrd};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockscope_format::{
    Loss, LossReason, MapEntry, Overhead, Process, Record, StringEntry, Thread,
};
use lockscope_ring::raw::Slot;
use lockscope_ring::ring::{Consumer, Handoff, RingError};
use lockscope_ring::session::{
    parse_file_name, ProcessHeader, SessionFile, HEADER_BYTES, PROC_MAGIC,
};
use lockscope_ring::tsc::{self, ClockPair};

use crate::convert::Out;
use crate::maps::{parse_complete, MapLine};
use crate::slotbuf::SlotBuf;

/// What the drain sends to a converter worker, in order.
pub(crate) enum Msg {
    /// A record for the output (a Thread record also sets up the worker's
    /// state for that thread).
    Rec(Record),
    /// A new tick conversion segment, sent to every worker before any
    /// batch copied with it (each worker must know every segment to
    /// convert ticks by the same function; see `ClockSegs`).
    Clock(ClockConv),
    /// Raw slots copied out of the rings of one drain pass: `segs` say
    /// which thread each run of slots belongs to (whole events only).
    Raw {
        /// The slots, shared with the other workers that have runs in
        /// them.
        slots: Arc<SlotBuf>,
        /// This worker's runs, in copy order.
        segs: Vec<Seg>,
    },
    /// The thread's ring is closed: write its losses and its end.
    ThreadEnd {
        /// Trace thread id.
        thread: u32,
        /// Exit stamp (0: not stamped; the last event's time is used).
        end_tsc: u64,
        /// Events the producer dropped over the thread's life.
        lost: u64,
        /// Conversion to ns.
        clock: ClockConv,
    },
    /// A process image ended.
    ProcessEnd {
        /// Trace process id.
        process: u32,
        /// End time if known (else the time of its last event).
        end_ns: Option<u64>,
        /// Shell-style status, -1 unknown.
        status: i32,
    },
    /// Durability mark `epoch`: write everything converted so far, then
    /// pass the mark on to the output (see [`Drainer::mark`]).
    Mark(u64),
    /// The end: flush everything, send the lock counters, stop.
    Finish,
}

/// One thread's run of slots in a [`Msg::Raw`] batch.
pub(crate) struct Seg {
    /// Trace thread id.
    pub thread: u32,
    /// First slot of the run in the batch.
    pub start: usize,
    /// Slots in the run.
    pub len: usize,
    /// Slots the ring reported corrupt.
    pub corrupt: u64,
    /// Events the producer dropped since the previous copy.
    pub lost: u64,
    /// Conversion to ns at the time of the copy.
    pub clock: ClockConv,
}

/// The drain's batch being filled.
struct Batch {
    buf: SlotBuf,
    segs: Vec<Seg>,
    used: usize,
    /// When it was opened.
    since: Instant,
}

/// A copying thread's state: its open batch, spare buffers, counters.
/// The drain thread keeps one; each helper of a heavy pass has its own
/// (merged back with [`CopyState::absorb`]).
#[derive(Default)]
struct CopyState {
    batch: Option<Batch>,
    /// Batch buffers (2 MiB) back from the pool or never sent.
    spares: Vec<SlotBuf>,
    /// Small buffers ([`SMALL_COPY_SLOTS`]) back from the pool.
    smalls: Vec<SlotBuf>,
    /// Batch buffers this thread mapped.
    big_mapped: u64,
    /// Most bytes queued at once, seen when sending.
    queue_peak: usize,
    /// Ring copies put off because the queue was full.
    full_skips: u64,
    /// A worker is gone (its error is reported when it is joined): keep
    /// draining, drop what cannot be sent.
    send_failed: bool,
}

impl CopyState {
    fn absorb(&mut self, o: CopyState) {
        debug_assert!(o.batch.is_none(), "helpers send their batches");
        self.queue_peak = self.queue_peak.max(o.queue_peak);
        self.full_skips += o.full_skips;
        self.send_failed |= o.send_failed;
        self.big_mapped += o.big_mapped;
        self.spares.extend(o.spares);
        self.smalls.extend(o.smalls);
        self.smalls.truncate(MAX_SMALL_SPARES);
    }

    /// A buffer of the batch size (`small`: false) or of
    /// [`SMALL_COPY_SLOTS`]: a spare, else one back from the workers, else
    /// a new one (`None`: out of memory).
    fn take_buf(&mut self, pool: &Mutex<Receiver<SlotBuf>>, small: bool) -> Option<SlotBuf> {
        if self.stash(small).is_empty() {
            let rx = pool
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            while let Ok(b) = rx.try_recv() {
                if b.capacity() >= SMALL_BUF_SLOTS {
                    self.spares.push(b);
                } else if self.smalls.len() < MAX_SMALL_SPARES {
                    self.smalls.push(b);
                }
            }
        }
        if let Some(b) = self.stash(small).pop() {
            return Some(b);
        }
        let b = SlotBuf::new(if small {
            SMALL_COPY_SLOTS
        } else {
            SMALL_BUF_SLOTS
        })?;
        self.big_mapped += u64::from(!small);
        Some(b)
    }

    /// The spare buffers of one size.
    fn stash(&mut self, small: bool) -> &mut Vec<SlotBuf> {
        if small {
            &mut self.smalls
        } else {
            &mut self.spares
        }
    }
}

/// A batch of at most this many slots (128 KiB) is sent in a buffer of
/// its own size, copied out of the 2 MiB one, which the drain keeps.
/// Why: every message that must follow the events before it (a thread
/// started or ended, a name, a clock segment) closes the open batch, and
/// a program that starts threads one after another closed one per
/// thread: each took a 2 MiB buffer to the workers, the drain mapped a
/// new one while they were busy, and zeroing fresh huge pages was 60 %
/// of the recorder's CPU time for 1000 short threads (`perf`, 24 fresh
/// buffers in a 70 ms run; first touches cost 1-4 ms per 2 MiB on the
/// development VM). Copying up to 128 KiB costs ~10 us.
const SMALL_COPY_SLOTS: usize = 4096;

/// Small buffers kept for reuse (8 MiB); the rest are unmapped.
const MAX_SMALL_SPARES: usize = 64;

/// What copying needs from the drain, shareable by the helper threads of
/// a heavy pass.
struct CopyCtx<'a> {
    tx: &'a [Sender<Msg>],
    worker_of: &'a HashMap<u32, (usize, usize)>,
    pool: &'a Mutex<Receiver<SlotBuf>>,
    queued: &'a AtomicUsize,
    budget: usize,
    clock: ClockConv,
}

/// The [`CopyCtx`] of a [`Drainer`], from its fields (a macro, not a
/// method: the callers hold other fields mutably at the same time).
macro_rules! copy_ctx {
    ($d:expr) => {
        CopyCtx {
            tx: &$d.tx,
            worker_of: &$d.worker_of,
            pool: &$d.pool,
            queued: &$d.queued,
            budget: $d.queue_budget,
            clock: $d.clock.conv(),
        }
    };
}

/// Copies whatever the ring holds into `st`'s batch (opening one, or
/// sending a full one, as needed). Returns the slots copied.
fn copy_ring(r: &mut Ring, st: &mut CopyState, cx: &CopyCtx<'_>) -> u64 {
    if r.thread == 0 {
        // Vacant (see end_owner): nothing but a hand-over can come.
        return 0;
    }
    let pending = r.c.pending() as usize * std::mem::size_of::<Slot>();
    let queued = cx.queued.load(AtOrd::Relaxed);
    if pending > 0 && queued + pending > cx.budget {
        // The workers are a whole budget behind: leave the ring alone
        // (it fills; the program waits or counts the drops) rather than
        // grow without limit. Not blocking: the loop must still reap
        // children and forward signals.
        st.full_skips += 1;
        return 0;
    }
    // Read before the copy: events counted lost by now were dropped
    // while the ring was full, i.e. after everything copied now.
    let lost_now = r.c.lost();
    // Every buffer is 2 MiB (65,536 slots, one huge page) and is shared
    // by the rings of one pass (a batch: one message, one huge page,
    // for hundreds of quiet threads, where a buffer per ring cost 2 MB
    // of memory each); a large ring is emptied into several. Same-size
    // buffers are always recycled. (Sizing buffers by ring let mixed
    // sizes miss the recycling, and zeroing fresh memory then took half
    // of the drain's time: `perf`, fluid_like fixture.)
    if st
        .batch
        .as_ref()
        .is_some_and(|b| SMALL_BUF_SLOTS - b.used < BATCH_MIN_ROOM)
    {
        flush(st, cx);
    }
    if st.batch.is_none() {
        let Some(buf) = st.take_buf(cx.pool, false) else {
            // Out of memory: the ring fills and the program waits or
            // counts drops.
            return 0;
        };
        st.batch = Some(Batch {
            buf,
            segs: Vec::new(),
            used: 0,
            since: Instant::now(),
        });
    }
    let b = st.batch.as_mut().expect("set above");
    let used = b.used;
    let (n, corrupt) = r.c.copy_out_to(&mut b.buf.whole_mut()[used..]);
    let lost = lost_now.saturating_sub(r.lost_seen);
    r.lost_seen = r.lost_seen.max(lost_now);
    if n == 0 && corrupt == 0 && lost == 0 {
        return 0;
    }
    b.segs.push(Seg {
        thread: r.thread,
        start: used,
        len: n as usize,
        corrupt,
        lost,
        clock: cx.clock,
    });
    b.used += n as usize;
    n
}

/// The worker of `thread` (registered when its Thread record was sent;
/// `thread mod workers` for one never registered, which cannot happen).
fn route(worker_of: &HashMap<u32, (usize, usize)>, thread: u32, workers: usize) -> usize {
    worker_of
        .get(&thread)
        .map_or(thread as usize % workers.max(1), |&(w, _)| w)
}

/// Sends `st`'s batch (if any) to the workers, each its own runs.
fn flush(st: &mut CopyState, cx: &CopyCtx<'_>) {
    let Some(mut b) = st.batch.take() else {
        return;
    };
    if b.segs.is_empty() {
        st.spares.push(b.buf);
        return;
    }
    b.buf.set_len(b.used);
    if b.used <= SMALL_COPY_SLOTS {
        if let Some(mut small) = st.take_buf(cx.pool, true) {
            // Same offsets: the segments stay valid.
            small.whole_mut()[..b.used].copy_from_slice(&b.buf);
            small.set_len(b.used);
            st.spares.push(std::mem::replace(&mut b.buf, small));
        }
    }
    // Counted by length: what was written (a recycled buffer's unused
    // capacity is not counted, a fresh one's is not yet resident).
    let bytes = b.used * std::mem::size_of::<Slot>();
    let now = cx.queued.fetch_add(bytes, AtOrd::Relaxed) + bytes;
    st.queue_peak = st.queue_peak.max(now);
    // One buffer, each worker its own runs of it: splitting the copy
    // per worker instead would cost a second copy or a buffer per
    // worker per pass.
    let slots = Arc::new(b.buf);
    let k = cx.tx.len().max(1);
    let mut send = |w: usize, m: Msg| {
        if !st.send_failed && cx.tx[w].send(m).is_err() {
            st.send_failed = true;
        }
    };
    if k == 1 {
        send(
            0,
            Msg::Raw {
                slots,
                segs: b.segs,
            },
        );
        return;
    }
    let mut per: Vec<Vec<Seg>> = (0..k).map(|_| Vec::new()).collect();
    for g in b.segs {
        per[route(cx.worker_of, g.thread, k)].push(g);
    }
    for (w, segs) in per.into_iter().enumerate() {
        if !segs.is_empty() {
            send(
                w,
                Msg::Raw {
                    slots: slots.clone(),
                    segs,
                },
            );
        }
    }
}

/// A helper's share of a heavy pass: each ring copied as in a normal
/// pass (bounded rounds), then the batch sent.
fn copy_group(rings: Vec<&mut Ring>, st: &mut CopyState, cx: &CopyCtx<'_>) {
    for r in rings {
        let rounds = r.c.capacity() as usize / SMALL_BUF_SLOTS + 2;
        for _ in 0..rounds {
            let k = copy_ring(r, st, cx);
            r.copied += k;
            if k == 0 || r.c.pending() == 0 {
                break;
            }
        }
    }
    flush(st, cx);
}

/// A pass is copied by several threads only when at least two rings hold
/// this many slots each...
const PAR_MIN_RING_SLOTS: u64 = 8192;
/// ...and all rings this many together (2 MiB of slots: a pass that
/// copies less is over before helper threads would have started).
const PAR_MIN_SLOTS: u64 = 65_536;

/// Longest time copied events wait in an open batch before they go to
/// the writer.
const BATCH_MAX_AGE: Duration = Duration::from_millis(50);

/// A batch with less room than this is sent before the next ring is
/// copied (a nearly full buffer would split a busy ring's events into
/// tiny runs).
const BATCH_MIN_ROOM: usize = 4096;

/// A snapshot of the tick conversion, sent along with raw slots.
///
/// Fixed point (ns per tick scaled by 2^[`FIX_SHIFT`]) rather than `f64`:
/// the writer converts every event, and the unsigned int-to-float and
/// saturating float-to-int conversions were a third of its own per-event
/// time (`perf annotate`); one 64x64->128 multiply replaces them. With 40
/// fractional bits the error stays below 1 ns per hour of recording.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClockConv {
    /// Start of the current segment, in ticks...
    pub(crate) tsc0: u64,
    /// ...and in ns since the start of the trace.
    ns0: u64,
    mult: u64,
}

/// Fractional bits of [`ClockConv`]'s multiplier.
const FIX_SHIFT: u32 = 40;

impl ClockConv {
    fn new(tsc0: u64, ns0: u64, ns_per_tick: f64) -> ClockConv {
        ClockConv {
            tsc0,
            ns0,
            // ns_per_tick is within 1e-2..1e3 (Clock::set_hz): fits.
            mult: (ns_per_tick * (1u64 << FIX_SHIFT) as f64) as u64,
        }
    }

    #[inline]
    pub(crate) fn ns(&self, ticks: u64) -> u64 {
        let scale = |d: u64| {
            let v = (u128::from(d) * u128::from(self.mult)) >> FIX_SHIFT;
            v.min(u128::from(u64::MAX)) as u64
        };
        if ticks >= self.tsc0 {
            self.ns0.saturating_add(scale(ticks - self.tsc0))
        } else {
            // An event stamped before the segment began but drained after
            // it: extrapolate backwards with the current rate.
            self.ns0.saturating_sub(scale(self.tsc0 - ticks))
        }
    }
}

/// Ticks to nanoseconds since the start of the trace.
///
/// The frequency is re-estimated from the start pair to a fresh pair every
/// [`Clock::REFINE`] while recording (the longer the baseline, the better
/// the estimate), so that durations late in a long run are not off by the
/// error of the 1 ms calibration made before the program starts. The conversion is piecewise linear and
/// *continuous*: a new estimate starts a new segment at the moment of the
/// refinement, at the ns value the old segment gives that moment.
///
/// Why continuous: events of different threads are drained at different
/// moments. Re-anchoring every estimate at the start of the trace (the
/// first version) converted two events a few ns apart, drained before and
/// after a refinement, with rates differing by a few ppm over a whole
/// second of run: microseconds of error, enough to put a lock acquisition
/// before the release it waited for. With continuous segments an event
/// converted with the next segment is off only by its drain latency (a few
/// ms) times the change of rate: well under a ns. The alternative,
/// buffering raw ticks until the end, would need memory proportional to the
/// trace.
pub(crate) struct Clock {
    start: ClockPair,
    /// Current segment: starts at `seg_tsc` ticks = `seg_ns` ns.
    seg_tsc: u64,
    seg_ns: u64,
    ns_per_tick: f64,
    last_refine: Instant,
    /// Time until the next refinement: [`Clock::REFINE_FIRST`] after
    /// the start, whose estimate had a short baseline, then
    /// [`Clock::REFINE`].
    every: Duration,
}

impl Clock {
    const REFINE: Duration = Duration::from_millis(50);
    const REFINE_FIRST: Duration = Duration::from_millis(10);

    pub(crate) fn new(start: ClockPair, hz: f64) -> Clock {
        let mut c = Clock {
            start,
            seg_tsc: start.tsc,
            seg_ns: 0,
            ns_per_tick: 1.0,
            last_refine: Instant::now(),
            every: Self::REFINE_FIRST,
        };
        c.set_hz(hz);
        c
    }

    fn set_hz(&mut self, hz: f64) {
        // A frequency outside 1 MHz..100 GHz is a broken clock pair; keep
        // the previous estimate.
        if hz.is_finite() && (1e6..1e11).contains(&hz) {
            self.ns_per_tick = 1e9 / hz;
        }
    }

    /// Re-estimates the frequency if it is time to, starting a new segment
    /// where the current one is now (continuity, see [`Clock`]).
    pub(crate) fn maybe_refine(&mut self, force: bool) {
        if force || self.last_refine.elapsed() >= self.every {
            self.every = Self::REFINE;
            self.refine_at(tsc::pair());
            self.last_refine = Instant::now();
        }
    }

    fn refine_at(&mut self, now: ClockPair) {
        let here = self.ns(now.tsc);
        self.seg_tsc = now.tsc;
        self.seg_ns = here;
        self.set_hz(tsc::hz_between(self.start, now));
    }

    pub(crate) fn hz(&self) -> f64 {
        1e9 / self.ns_per_tick
    }

    /// The same conversion as the events' ([`ClockConv`]), so that
    /// thread and process times agree with their events' to the ns.
    #[inline]
    pub(crate) fn ns(&self, ticks: u64) -> u64 {
        self.conv().ns(ticks)
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.ns(tsc::now())
    }

    pub(crate) fn conv(&self) -> ClockConv {
        ClockConv::new(self.seg_tsc, self.seg_ns, self.ns_per_tick)
    }
}

/// The read-only mapping of a process file's header page.
struct ProcHdr {
    base: *mut libc::c_void,
}

impl ProcHdr {
    /// Maps the header; `Ok(None)` while the program has not finished
    /// writing it (file too short, magic not yet there).
    fn open(path: &Path) -> std::io::Result<Option<(ProcHdr, File)>> {
        use std::os::unix::io::AsRawFd;
        let f = File::open(path)?;
        if (f.metadata()?.len() as usize) < HEADER_BYTES {
            return Ok(None);
        }
        // SAFETY: mapping one page of a regular file we opened, read-only.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                HEADER_BYTES,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let h = ProcHdr { base };
        // SAFETY: within the mapping.
        let magic = unsafe { std::ptr::read_volatile(&h.get().magic) };
        if magic != PROC_MAGIC {
            return Ok(None);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        Ok(Some((h, f)))
    }

    fn get(&self) -> &ProcessHeader {
        // SAFETY: one mapped page, at least size_of::<ProcessHeader>().
        unsafe { &*(self.base as *const ProcessHeader) }
    }

    fn load(&self, a: &std::sync::atomic::AtomicU64) -> u64 {
        a.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Drop for ProcHdr {
    fn drop(&mut self) {
        // SAFETY: unmapping what open mapped.
        unsafe { libc::munmap(self.base, HEADER_BYTES) };
    }
}

struct Proc {
    id: u32,
    pid: u32,
    gen: u32,
    hdr: ProcHdr,
    start_ns: u64,
    maps_seen: HashSet<MapLine>,
    maps_consumed: HashMap<u32, usize>,
}

struct Ring {
    name: String,
    path: PathBuf,
    c: Consumer,
    thread: u32,
    lost_seen: u64,
    end_seen: Option<Instant>,
    /// (pid, gen, tid) from the file name, to name successor rings.
    key: (u32, u32, u32),
    /// Events lost in the thread's earlier (outgrown) rings.
    lost_before: u64,
    /// The ring's `lost` count when the current owner took it over
    /// (recycled rings: earlier owners' losses are below it).
    lost_base: u64,
    /// Slots copied by the parallel part of this pass, not yet counted.
    copied: u64,
}

/// Totals the drain reports at the end.
#[derive(Default)]
pub(crate) struct DrainTotals {
    pub processes: u32,
    pub threads: u32,
    pub disabled: Vec<u32>,
    /// Most bytes of raw slots queued for the writer at once.
    pub queue_peak_bytes: u64,
    /// Ring copies put off because the queue was at its limit.
    pub queue_full_skips: u64,
    /// Passes copied by several threads.
    pub parallel_copies: u64,
    /// 2 MiB batch buffers mapped (each zeroed by the kernel when first
    /// touched).
    pub batch_buffers: u64,
    /// Times a thread of the program waited for room in its ring.
    pub full_waits: u64,
    /// Time those waits took, ns.
    pub full_wait_ns: u64,
    /// Ring files that could not be created or grown for lack of space.
    pub space_exhausted: u64,
    /// Threads that got no ring at all.
    pub threads_without_ring: u64,
    /// Rings grown because their thread ran hot.
    pub rings_grown: u64,
    /// Threads that took over the ring of a joined thread.
    pub rings_reused: u64,
    /// Rings of joined threads unmapped instead of kept for reuse.
    pub rings_not_pooled: u64,
    /// Thread starts that found only undrained rings in the free list.
    pub pool_not_ready: u64,
}

/// Slots of the standard drain buffer (2 MiB: one huge page).
const SMALL_BUF_SLOTS: usize = 65_536;

/// How long a ring whose thread has exited is kept before it is closed:
/// a thread's last events (TLS destructors) may be published just after
/// its exit stamp.
const END_GRACE: Duration = Duration::from_millis(20);
/// Most owner changes of one ring handled in one drain pass (each needs
/// the previous owner's events all consumed, so a ring changes hands at
/// most as fast as threads start; the bound keeps one ring from holding
/// the drain).
const MAX_HANDOFFS_PER_PASS: u32 = 64;
/// Upper bound of argv text accepted from a process file.
const MAX_ARGV_BYTES: u32 = 1 << 20;

pub(crate) struct Drainer {
    dir: PathBuf,
    pub(crate) clock: Clock,
    /// The converter workers.
    tx: Vec<Sender<Msg>>,
    /// The worker of each live thread with its weight, and how many live
    /// threads each worker has (see `send`).
    worker_of: HashMap<u32, (usize, usize)>,
    live: Vec<usize>,
    /// The output thread, for records that no worker needs to see.
    out: SyncSender<Out>,
    /// Start of the last conversion segment sent to the workers.
    clock_sent: Option<u64>,
    /// Recycled batch buffers (shared by the copy threads of a heavy pass).
    pool: Mutex<Receiver<SlotBuf>>,
    /// Bytes of raw slots sent and not yet converted by the writer.
    queued: Arc<AtomicUsize>,
    queue_budget: usize,
    /// The batch being filled and the copy counters.
    cs: CopyState,
    parallel_copies: u64,
    /// Back-pressure seen in closed rings: (waits, ticks).
    full_waits: u64,
    full_wait_ticks: u64,
    procs: Vec<Proc>,
    proc_index: HashMap<(u32, u32), usize>,
    rings: Vec<Ring>,
    open_rings: HashSet<String>,
    threads_by_tid: HashMap<(u32, u32, u32), u32>,
    strings: HashMap<String, u32>,
    build_ids: HashMap<String, Vec<u8>>,
    next_thread: u32,
    /// Thread starts and ends seen (new threads, exit stamps, ends
    /// written): see [`Drainer::lives`].
    lives: u64,
    /// Durability marks sent and not yet written by the output: the
    /// rings' read positions at each (see [`Drainer::mark`]).
    marks: std::collections::VecDeque<(u64, Vec<(PathBuf, u64)>)>,
    /// The latest mark the output has written to the file (set by it).
    durable: Arc<AtomicU64>,
    next_mark: u64,
    last_mark: Instant,
    /// Slots copied since the last mark.
    unmarked: u64,
    /// Ring files to remove once the mark with that number is written.
    unlink: Vec<(PathBuf, u64)>,
}

/// How often the drain sends a durability mark through the pipeline: the
/// events of a dead recorder that `lockscope recover` cannot find again
/// are at most those of the last period or two (unless the program
/// overwrote them since). The same period as the workers' and the
/// output's own flushes, which the marks make happen no more often.
pub(crate) const MARK_EVERY: Duration = Duration::from_secs(1);

/// How soon an idle drain looks again whether the output has written a
/// mark.
const MARK_POLL: Duration = Duration::from_millis(200);

impl Drainer {
    pub(crate) fn new(
        dir: &Path,
        clock: Clock,
        tx: Vec<Sender<Msg>>,
        out: SyncSender<Out>,
        pool: Receiver<SlotBuf>,
        queued: Arc<AtomicUsize>,
        queue_budget: usize,
    ) -> Drainer {
        let live = vec![0; tx.len().max(1)];
        let mut d = Drainer {
            dir: dir.to_path_buf(),
            clock,
            tx,
            worker_of: HashMap::new(),
            live,
            out,
            clock_sent: None,
            pool: Mutex::new(pool),
            queued,
            queue_budget,
            cs: CopyState::default(),
            parallel_copies: 0,
            full_waits: 0,
            full_wait_ticks: 0,
            procs: Vec::new(),
            proc_index: HashMap::new(),
            rings: Vec::new(),
            open_rings: HashSet::new(),
            threads_by_tid: HashMap::new(),
            strings: HashMap::new(),
            build_ids: HashMap::new(),
            next_thread: 1,
            lives: 0,
            marks: std::collections::VecDeque::new(),
            durable: Arc::new(AtomicU64::new(0)),
            next_mark: 1,
            last_mark: Instant::now(),
            unmarked: 0,
            unlink: Vec::new(),
        };
        d.send_clock();
        d
    }

    /// The output's count of written durability marks (see
    /// [`Drainer::mark`]), shared with it.
    pub(crate) fn with_durable(mut self, durable: Arc<AtomicU64>) -> Drainer {
        self.durable = durable;
        self
    }

    /// Re-estimates the tick rate if it is time to (see [`Clock`]), and
    /// tells every worker about a new segment before anything copied
    /// with it.
    pub(crate) fn refine_clock(&mut self, force: bool) {
        self.clock.maybe_refine(force);
        self.send_clock();
    }

    fn send_clock(&mut self) {
        let conv = self.clock.conv();
        if self.clock_sent != Some(conv.tsc0) {
            self.clock_sent = Some(conv.tsc0);
            self.broadcast(|| Msg::Clock(conv));
        }
    }

    /// Sends one message to every worker (after the events before it).
    fn broadcast(&mut self, m: impl Fn() -> Msg) {
        self.flush_batch();
        for i in 0..self.tx.len() {
            self.send_to(i, m());
        }
    }

    fn send_to(&mut self, w: usize, m: Msg) {
        // A worker only stops early when writing failed; its error is
        // reported when it is joined. Keep draining so the program is
        // never blocked, dropping what cannot be written.
        if !self.cs.send_failed && self.tx[w].send(m).is_err() {
            self.cs.send_failed = true;
        }
    }

    fn worker_of(&self, thread: u32) -> usize {
        route(&self.worker_of, thread, self.tx.len())
    }

    fn send(&mut self, m: Msg) {
        // Events copied so far go first: every other message (a thread's
        // end, a new thread...) must follow the events before it.
        self.flush_batch();
        match m {
            Msg::Rec(Record::Thread(t)) => {
                // A new thread goes to the worker with the fewest live
                // threads (the first on a tie), not counting the threads
                // that started their processes (often idle in a join).
                // Threads started together are spread over the workers;
                // a program that starts short threads one after another
                // keeps them, and the thread starting them, on one
                // worker, whose thread stays awake. (Spreading them by
                // id, `id mod N`, woke a sleeping worker for nearly every
                // message: 1000 threads started one at a time ran 10-15 %
                // slower with 4 workers than with 1, on 2 and on 16 CPUs;
                // 7 % with this rule. Putting the starting thread on a
                // worker of its own made it 24 %: two workers woken per
                // thread started.)
                let w = (0..self.live.len())
                    .min_by_key(|&w| self.live[w])
                    .unwrap_or(0);
                let weight = usize::from(t.parent != 0);
                self.live[w] += weight;
                self.worker_of.insert(t.id, (w, weight));
                self.send_to(w, Msg::Rec(Record::Thread(t)));
            }
            m @ Msg::ThreadEnd { thread, .. } => {
                let w = self.worker_of(thread);
                if let Some((_, weight)) = self.worker_of.remove(&thread) {
                    self.live[w] = self.live[w].saturating_sub(weight);
                }
                self.send_to(w, m);
            }
            // Process-wide records need no worker: straight to the output
            // (a Process record thus precedes its threads', which their
            // workers forward later).
            Msg::Rec(r) => self.send_out(Out::Rec(r)),
            Msg::ProcessEnd {
                process,
                end_ns,
                status,
            } => self.broadcast(|| Msg::ProcessEnd {
                process,
                end_ns,
                status,
            }),
            m @ (Msg::Clock(_) | Msg::Raw { .. } | Msg::Mark(_) | Msg::Finish) => {
                // Not sent through here (see send_clock, flush_batch,
                // send_finish); a Raw message would need splitting.
                debug_assert!(false, "routed elsewhere");
                drop(m);
            }
        }
    }

    fn loss(&mut self, process: u32, events: u64, reason: LossReason) {
        if events == 0 && reason != LossReason::RecorderDisabled {
            return;
        }
        self.send(Msg::Rec(Record::Loss(Loss {
            thread: 0,
            process,
            events,
            reason,
        })));
    }

    /// Lists the session directory and opens what is new.
    pub(crate) fn discover(&mut self, final_pass: bool) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut new_procs = Vec::new();
        let mut new_rings = Vec::new();
        let mut maps = Vec::new();
        for ent in rd.flatten() {
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            match parse_file_name(name) {
                Some(SessionFile::Proc { pid, gen })
                    if !self.proc_index.contains_key(&(pid, gen)) =>
                {
                    new_procs.push((pid, gen, ent.path()));
                }
                // A ring closed and waiting to be unlinked (see
                // `unlink_when_written`) is not a new thread.
                Some(SessionFile::Ring { pid, gen, tid })
                    if !self.open_rings.contains(name)
                        && !self.unlink.iter().any(|(p, _)| *p == ent.path()) =>
                {
                    new_rings.push((pid, gen, tid, name.to_string(), ent.path()));
                }
                Some(SessionFile::Maps { pid, gen, k }) => {
                    let len = ent.metadata().map(|m| m.len() as usize).unwrap_or(0);
                    maps.push((pid, gen, k, len, ent.path()));
                }
                _ => {}
            }
        }
        // Parents start before their children and an image before the one
        // that replaces it: registering in start order lets every process
        // find its parent already registered.
        let mut opened = Vec::new();
        for (pid, gen, path) in new_procs {
            if let Some((hdr, argv, exe)) = self.open_proc(&path, final_pass) {
                opened.push((pid, gen, hdr, argv, exe));
            }
        }
        opened.sort_by_key(|p| p.2.get().start_tsc);
        for (pid, gen, hdr, argv, exe) in opened {
            self.add_proc(pid, gen, hdr, argv, exe);
        }
        for (pid, gen, k, len, path) in maps {
            if let Some(&pi) = self.proc_index.get(&(pid, gen)) {
                if self.procs[pi].maps_consumed.get(&k).copied().unwrap_or(0) < len {
                    self.read_maps(pi, k, &path);
                }
            }
        }
        // Creating threads start before the threads they create: adding
        // rings in start order lets every thread find its parent.
        let mut ready = Vec::new();
        for (pid, gen, tid, name, path) in new_rings {
            let Some(&pi) = self.proc_index.get(&(pid, gen)) else {
                continue; // its process file is not readable yet
            };
            match Consumer::open(&path) {
                Ok(c) => ready.push((pi, tid, name, path, c)),
                // Still being created: retried at the next listing. After
                // the program is gone, a ring without a header never
                // published an event: nothing to count.
                Err(RingError::BadHeader(_)) | Err(RingError::Io(_)) => {}
                Err(_) => {}
            }
        }
        ready.sort_by_key(|r| r.4.header().start_tsc);
        for (pi, tid, name, path, c) in ready {
            self.add_ring(pi, tid, name, path, c);
        }
    }

    fn open_proc(
        &mut self,
        path: &Path,
        final_pass: bool,
    ) -> Option<(ProcHdr, Vec<String>, String)> {
        let (hdr, mut f) = ProcHdr::open(path).ok()??;
        let h = hdr.get();
        // SAFETY: plain field of the mapped header, written before magic.
        let want = unsafe { std::ptr::read_volatile(&h.argv_bytes) }.min(MAX_ARGV_BYTES) as usize;
        let mut text = Vec::new();
        let _ = f.seek(SeekFrom::Start(HEADER_BYTES as u64));
        let _ = (&mut f).take(want as u64).read_to_end(&mut text);
        if text.len() < want && !final_pass {
            return None; // argv still being written
        }
        let mut parts: Vec<String> = text
            .split(|&b| b == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        if parts.last().is_some_and(|s| s.is_empty()) {
            parts.pop();
        }
        let exe = if parts.is_empty() {
            String::new()
        } else {
            parts.remove(0)
        };
        Some((hdr, parts, exe))
    }

    /// Registers a process image. `pid` and `gen` come from the file
    /// name, which the program claimed with O_EXCL; the header's copies
    /// are not trusted over it.
    fn add_proc(&mut self, pid: u32, gen: u32, hdr: ProcHdr, argv: Vec<String>, exe: String) {
        let h = hdr.get();
        // SAFETY: plain fields of the mapped header, written before magic.
        let (ppid, pgen, start_tsc) = unsafe {
            (
                std::ptr::read_volatile(&h.ppid),
                std::ptr::read_volatile(&h.parent_generation),
                std::ptr::read_volatile(&h.start_tsc),
            )
        };
        if self.proc_index.contains_key(&(pid, gen)) {
            return;
        }
        // The image an exec replaced, else the fork parent (the child
        // records its parent's pid and image generation).
        let parent = if gen > 0 {
            self.proc_index.get(&(pid, gen - 1))
        } else {
            self.proc_index.get(&(ppid, pgen))
        }
        .map_or(0, |&i| self.procs[i].id);
        // SAFETY: a plain field of the mapped header, written before
        // magic like those above.
        let swapped = unsafe { std::ptr::read_volatile(&h.swapped_lock) };
        let n = swapped
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(swapped.len());
        let swapped_lock = String::from_utf8_lossy(&swapped[..n]).into_owned();
        let id = self.procs.len() as u32 + 1;
        let start_ns = self.clock.ns(start_tsc);
        self.send(Msg::Rec(Record::Process(Process {
            id,
            pid,
            parent,
            exec_generation: gen,
            start_ns,
            argv,
            exe,
            swapped_lock,
        })));
        self.proc_index.insert((pid, gen), self.procs.len());
        self.procs.push(Proc {
            id,
            pid,
            gen,
            hdr,
            start_ns,
            maps_seen: HashSet::new(),
            maps_consumed: HashMap::new(),
        });
    }

    fn read_maps(&mut self, pi: usize, k: u32, path: &Path) {
        let Ok(text) = std::fs::read(path) else {
            return;
        };
        let from = self.procs[pi].maps_consumed.get(&k).copied().unwrap_or(0);
        if from >= text.len() {
            return;
        }
        let (lines, used) = parse_complete(&text[from..]);
        self.procs[pi].maps_consumed.insert(k, from + used);
        for l in lines {
            if !self.procs[pi].maps_seen.insert(l.clone()) {
                continue;
            }
            let path_id = if l.path.is_empty() {
                0
            } else {
                self.intern(&l.path)
            };
            let build_id = self.build_id_of(&l.path);
            let process = self.procs[pi].id;
            self.send(Msg::Rec(Record::Map(MapEntry {
                process,
                start: l.start,
                end: l.end,
                offset: l.offset,
                path: path_id,
                build_id,
                perms: l.perms,
            })));
        }
    }

    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.strings.len() as u32 + 1;
        self.strings.insert(s.to_string(), id);
        self.send(Msg::Rec(Record::String(StringEntry {
            id,
            text: s.to_string(),
        })));
        id
    }

    fn build_id_of(&mut self, path: &str) -> Vec<u8> {
        if !path.starts_with('/') || path.ends_with(" (deleted)") {
            return Vec::new();
        }
        if let Some(b) = self.build_ids.get(path) {
            return b.clone();
        }
        let b = crate::elf::build_id(Path::new(path)).unwrap_or_default();
        self.build_ids.insert(path.to_string(), b.clone());
        b
    }

    fn add_ring(&mut self, pi: usize, tid: u32, name: String, path: PathBuf, c: Consumer) {
        let h = c.header();
        let (pid, gen) = (self.procs[pi].pid, self.procs[pi].gen);
        let id = self.new_thread(pi, tid, h.parent_tid, h.start_tsc, name_from(&h.name));
        self.open_rings.insert(name.clone());
        self.rings.push(Ring {
            name,
            path,
            c,
            thread: id,
            lost_seen: 0,
            end_seen: None,
            key: (pid, gen, tid),
            lost_before: 0,
            lost_base: 0,
            copied: 0,
        });
    }

    /// Registers a thread of process `pi` and writes its record; returns
    /// its trace id.
    fn new_thread(
        &mut self,
        pi: usize,
        tid: u32,
        parent_tid: u32,
        start_tsc: u64,
        tname: String,
    ) -> u32 {
        let (pid, gen) = (self.procs[pi].pid, self.procs[pi].gen);
        let parent = if parent_tid != 0 {
            self.threads_by_tid
                .get(&(pid, gen, parent_tid))
                .copied()
                .unwrap_or(0)
        } else {
            0
        };
        let start_ns = self.clock.ns(start_tsc);
        let id = self.next_thread;
        self.next_thread += 1;
        self.lives += 1;
        self.threads_by_tid.insert((pid, gen, tid), id);
        let process = self.procs[pi].id;
        self.send(Msg::Rec(Record::Thread(Thread {
            id,
            process,
            tid,
            parent,
            start_ns,
            name: tname,
        })));
        id
    }

    /// The ring changed owner (a recycled ring, see
    /// `lockscope_ring::ring::Producer::hand_over`): the previous
    /// owner ends here (unless already ended as vacated), the new one
    /// starts, and what follows in the ring is the new owner's.
    fn hand_over(&mut self, ri: usize, h: Handoff) {
        if self.rings[ri].thread != 0 {
            self.end_owner(ri, h.prev_end_tsc, h.lost_at);
        }
        let (pid, gen, _) = self.rings[ri].key;
        let Some(&pi) = self.proc_index.get(&(pid, gen)) else {
            return; // its process was registered with the ring: unreachable
        };
        let id = self.new_thread(pi, h.tid, h.parent_tid, h.start_tsc, name_from(&h.name));
        let r = &mut self.rings[ri];
        r.thread = id;
        r.key.2 = h.tid;
        r.lost_base = h.lost_at;
        r.lost_seen = r.lost_seen.max(h.lost_at);
        r.end_seen = None;
    }

    /// Ends the ring's current owner (its thread is gone: joined, every
    /// event consumed) with exit stamp `end_tsc`; `lost_cum` is the ring's
    /// loss count, every loss up to it the owner's. The ring stays open,
    /// vacant (thread 0), until a new owner's hand-over or its close.
    fn end_owner(&mut self, ri: usize, end_tsc: u64, lost_cum: u64) {
        self.lives += 1;
        let r = &mut self.rings[ri];
        let lost = r.lost_before + lost_cum.saturating_sub(r.lost_base);
        let thread = r.thread;
        r.thread = 0;
        r.lost_before = 0;
        r.lost_base = lost_cum;
        r.lost_seen = r.lost_seen.max(lost_cum);
        r.end_seen = None;
        let clock = self.clock.conv();
        self.send(Msg::ThreadEnd {
            thread,
            end_tsc,
            lost,
            clock,
        });
    }

    /// Drains every open ring once. Returns the slots copied and the
    /// fullest ring's fill fraction before the copy.
    pub(crate) fn drain_all(&mut self) -> (u64, f64) {
        let mut total = 0;
        let mut fullest = 0.0f64;
        // As many copy threads for a heavy pass as converter workers: both
        // scale with the busy threads of the program, one knob for both.
        if self.tx.len() > 1 {
            let (mut pending, mut busy) = (0u64, 0usize);
            for r in self.rings.iter().filter(|r| r.thread != 0) {
                let p = r.c.pending();
                pending += p;
                busy += usize::from(p >= PAR_MIN_RING_SLOTS);
            }
            if busy >= 2 && pending >= PAR_MIN_SLOTS {
                self.copy_parallel();
            }
        }
        let mut i = 0;
        while i < self.rings.len() {
            // A thread may have moved on to larger rings (several times
            // since the last pass): follow the chain to its current ring.
            // (What the parallel part copied counts for this pass.)
            let mut n = std::mem::take(&mut self.rings[i].copied);
            let mut handoffs = 0;
            loop {
                // Read before the copy: once `next_seq` is set the producer
                // has stopped writing this ring, so the copy below takes its
                // last events and the successor can take over.
                let next = self.rings[i]
                    .c
                    .header()
                    .next_seq
                    .load(std::sync::atomic::Ordering::Acquire);
                // A large ring takes several buffers; bounded, so that a
                // producer faster than the copy cannot hold the drain here.
                let rounds = self.rings[i].c.capacity() as usize / SMALL_BUF_SLOTS + 2;
                for _ in 0..rounds {
                    let k = self.drain_ring(i);
                    n += k;
                    if k == 0 || self.rings[i].c.pending() == 0 {
                        break;
                    }
                }
                if handoffs < MAX_HANDOFFS_PER_PASS {
                    if let Some(h) = self.rings[i].c.take_handoff() {
                        // A new thread took the ring over: its events
                        // follow (and it may have grown since: re-read
                        // `next_seq`, which is now its own).
                        handoffs += 1;
                        self.hand_over(i, h);
                        continue;
                    }
                }
                if next == 0 || self.rings[i].c.pending() != 0 || !self.switch_ring(i, next) {
                    break;
                }
            }
            if self.rings[i].thread != 0 {
                if let Some((end_tsc, lost)) = self.rings[i].c.vacated() {
                    // Joined and in the program's free list, every event
                    // consumed: the thread ends now, not at the next
                    // owner's hand-over (which may never come).
                    self.end_owner(i, end_tsc, lost);
                }
            }
            let cap = self.rings[i].c.capacity().max(1);
            fullest = fullest.max(n as f64 / cap as f64);
            total += n;
            if self.ring_done(i) {
                self.close_ring(i);
            } else {
                i += 1;
            }
        }
        // A batch stays open across passes until it is half full or old:
        // with hundreds of quiet threads and a writer that lags (a loaded
        // machine), flushing every pass queued thousands of nearly empty
        // 2 MiB buffers (569 MB peak RSS for 1000 short threads).
        if self
            .cs
            .batch
            .as_ref()
            .is_some_and(|b| b.used >= SMALL_BUF_SLOTS / 2 || b.since.elapsed() >= BATCH_MAX_AGE)
        {
            self.flush_batch();
        }
        self.unmarked += total;
        (total, fullest)
    }

    /// The drain's last look before it sleeps (after announcing the
    /// sleep, see `lockscope_ring::ring::drain_sleep`): true if a ring
    /// has reached the fill at which its producer wakes the drain, its
    /// thread ended (exit stamp not yet seen). Those are what the program
    /// wakes the drain for, so a wake-up that raced with this look is
    /// never lost. (A thread that moved to a larger ring left the old one
    /// past the mark: seen as such, and its new ring wakes the drain by
    /// itself.)
    pub(crate) fn has_work(&self) -> bool {
        let ord = std::sync::atomic::Ordering::Acquire;
        self.rings.iter().any(|r| {
            r.c.pending() >= lockscope_ring::ring::wake_mark(r.c.capacity())
                || (r.end_seen.is_none() && r.c.header().end_tsc.load(ord) != 0)
        })
    }

    /// How long the drain may sleep before a pass is due without any
    /// wake: the grace of an exited thread's ring ([`END_GRACE`], after
    /// which it is closed), or the age limit of the open batch
    /// ([`BATCH_MAX_AGE`]); `None`: nothing due.
    pub(crate) fn next_due(&self) -> Option<Duration> {
        // A ring past its grace that is still open waits for a new owner
        // (in the program's free list) or for its last events: nothing
        // due at a time.
        let grace = self
            .rings
            .iter()
            .filter_map(|r| r.end_seen)
            .filter_map(|t| END_GRACE.checked_sub(t.elapsed()));
        let batch = self
            .cs
            .batch
            .as_ref()
            .map(|b| BATCH_MAX_AGE.saturating_sub(b.since.elapsed()));
        // A mark to send (something copied since the last), or marks
        // whose positions to store once the output has written them.
        let mark = (self.unmarked > 0)
            .then(|| MARK_EVERY.saturating_sub(self.last_mark.elapsed()))
            .into_iter()
            .chain((!self.marks.is_empty()).then_some(MARK_POLL));
        grace.chain(batch).chain(mark).min()
    }

    /// Durability marks, after a pass. Every [`MARK_EVERY`] in which
    /// something was copied: the open batch goes to the workers, the
    /// rings' read positions are noted, and mark N follows the batch to
    /// every worker; each writes what it has converted and passes the mark
    /// on; once the output has it from every worker it writes its buffer
    /// to the file and publishes N. Then (at a later pass) each ring's
    /// [`lockscope_ring::session::RingHeader::durable`] gets its
    /// position at mark N: the events before it are in the file, and a
    /// recorder killed after that loses none of them. Costs a flush per
    /// period (the workers and the output flushed that often anyway) and
    /// one store per ring; nothing in the program.
    ///
    /// Not taken: leaving `read` where the file is (the program's room in
    /// its ring would shrink by a second of events, and a busy thread
    /// would wait for the recorder far more often).
    pub(crate) fn mark(&mut self) {
        let done = self.durable.load(AtOrd::Acquire);
        while self.marks.front().is_some_and(|m| m.0 <= done) {
            let (_, pos) = self.marks.pop_front().unwrap_or_default();
            // By file: a thread that outgrew its ring since the mark
            // continues in another file under the same name, whose
            // positions start again from 0.
            for (path, at) in pos {
                if let Some(r) = self.rings.iter().find(|r| r.path == path) {
                    r.c.mark_durable(at);
                }
            }
        }
        self.unlink.retain(|(path, n)| {
            let keep = *n > done;
            if !keep {
                let _ = std::fs::remove_file(path);
            }
            keep
        });
        if self.unmarked == 0 || self.last_mark.elapsed() < MARK_EVERY || self.marks.len() > 4 {
            return;
        }
        self.flush_batch();
        let pos = self
            .rings
            .iter()
            .map(|r| (r.path.clone(), r.c.read_pos()))
            .collect();
        let n = self.next_mark;
        self.next_mark += 1;
        self.broadcast(|| Msg::Mark(n));
        self.marks.push_back((n, pos));
        self.last_mark = Instant::now();
        self.unmarked = 0;
    }

    /// Thread starts and ends seen so far (a pass that saw one is a sign
    /// of a program whose threads come and go: see `pipeline::run`).
    pub(crate) fn lives(&self) -> u64 {
        self.lives
    }

    /// Ring copies put off so far because the queue was at its limit.
    pub(crate) fn full_skips(&self) -> u64 {
        self.cs.full_skips
    }

    /// Copies whatever the ring holds into the current batch.
    fn drain_ring(&mut self, ri: usize) -> u64 {
        let cx = copy_ctx!(self);
        copy_ring(&mut self.rings[ri], &mut self.cs, &cx)
    }

    /// Hands the current batch (if any) to the workers.
    fn flush_batch(&mut self) {
        let cx = copy_ctx!(self);
        flush(&mut self.cs, &cx);
    }

    /// The bulk of a heavy pass, copied by several threads: the rings
    /// with events are shared out by size among up to `self.tx.len()`
    /// threads (this one included), each filling and sending its own
    /// batches. What each ring gave is left in its `copied`, for the
    /// rest of the pass (hand-overs, growth, ends) on this thread.
    ///
    /// Why: on 16 cores one drain thread copying for 12-16 busy threads
    /// was the limit (the program waited for room while the queue behind
    /// the drain was far from full). Why threads per pass rather than
    /// drain threads that own rings: a ring's life (growth, hand-over to a
    /// new thread, end) stays on one thread, unchanged; starting a few
    /// scoped threads costs tens of us, paid only in passes that copy
    /// megabytes.
    fn copy_parallel(&mut self) {
        // Earlier events of these rings, in the open batch, go first.
        self.flush_batch();
        self.parallel_copies += 1;
        let k = self.tx.len().max(1);
        let mut groups: Vec<(u64, Vec<&mut Ring>)> = (0..k).map(|_| (0, Vec::new())).collect();
        let mut busy: Vec<&mut Ring> = self
            .rings
            .iter_mut()
            .filter(|r| r.thread != 0 && r.c.pending() > 0)
            .collect();
        // Largest first, each to the lightest group.
        busy.sort_by_key(|r| std::cmp::Reverse(r.c.pending()));
        for r in busy {
            let g = groups
                .iter_mut()
                .min_by_key(|g| g.0)
                .expect("at least one group");
            g.0 += r.c.pending();
            g.1.push(r);
        }
        let cx = copy_ctx!(self);
        let cx = &cx;
        let mut mine = groups.swap_remove(0).1;
        let cs = &mut self.cs;
        let states: Vec<CopyState> = std::thread::scope(|sc| {
            let handles: Vec<_> = groups
                .into_iter()
                .filter(|g| !g.1.is_empty())
                .map(|(_, rings)| {
                    sc.spawn(move || {
                        let mut st = CopyState::default();
                        copy_group(rings, &mut st, cx);
                        st
                    })
                })
                .collect();
            copy_group(std::mem::take(&mut mine), cs, cx);
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        for st in states {
            self.cs.absorb(st);
        }
    }

    /// The thread moved to a larger ring (`seq`): continue with it under
    /// the same trace thread, and remove the outgrown one. False if the
    /// successor cannot be opened (yet): retried at the next pass.
    fn switch_ring(&mut self, ri: usize, seq: u64) -> bool {
        let r = &self.rings[ri];
        let (pid, gen, tid) = r.key;
        let Ok(seq) = u32::try_from(seq) else {
            return false;
        };
        let name = lockscope_ring::session::ring_seq_file_name(pid, gen, tid, seq);
        let path = self.dir.join(&name);
        let Ok(c) = Consumer::open(&path) else {
            return false;
        };
        let r = &mut self.rings[ri];
        let h = r.c.header();
        self.full_waits += h.full_waits.load(std::sync::atomic::Ordering::Relaxed);
        self.full_wait_ticks += h.full_wait_ticks.load(std::sync::atomic::Ordering::Relaxed);
        r.lost_before += r.c.lost().saturating_sub(r.lost_base);
        r.lost_base = 0;
        r.lost_seen = 0;
        let old = std::mem::replace(&mut r.path, path);
        r.c = c;
        self.unlink_when_written(old);
        true
    }

    fn ring_done(&mut self, ri: usize) -> bool {
        let r = &mut self.rings[ri];
        let end =
            r.c.header()
                .end_tsc
                .load(std::sync::atomic::Ordering::Acquire);
        if end == 0 {
            // Running, or the stamp was cleared by a new owner of a
            // recycled ring: its own exit starts a new grace period.
            r.end_seen = None;
            return false;
        }
        match r.end_seen {
            None => {
                r.end_seen = Some(Instant::now());
                self.lives += 1;
                false
            }
            // Claimed for closing only if the program did not keep the
            // ring for a new thread (see Consumer::try_close).
            Some(t) => t.elapsed() >= END_GRACE && r.c.pending() == 0 && r.c.try_close(),
        }
    }

    /// Writes the end of a thread, frees its ring memory.
    fn close_ring(&mut self, ri: usize) {
        self.close_ring_or(ri, 0);
    }

    /// [`Self::close_ring`], with `fallback_tsc` as the thread's end when
    /// it never stamped one (0: none).
    fn close_ring_or(&mut self, ri: usize, fallback_tsc: u64) {
        let r = self.rings.swap_remove(ri);
        let h = r.c.header();
        let mut end_tsc = h.end_tsc.load(std::sync::atomic::Ordering::Acquire);
        if end_tsc == 0 {
            end_tsc = fallback_tsc;
        }
        // Slots still unread now (a ring the drain could not follow to
        // the end, e.g. a hand-over it could not decode) are counted as
        // lost: never a silent gap.
        let lost = r.lost_before + r.c.lost().saturating_sub(r.lost_base) + r.c.pending();
        self.full_waits += h.full_waits.load(std::sync::atomic::Ordering::Relaxed);
        self.full_wait_ticks += h.full_wait_ticks.load(std::sync::atomic::Ordering::Relaxed);
        let clock = self.clock.conv();
        if r.thread != 0 {
            self.lives += 1;
            // (A vacant recycled ring's last owner has ended already.)
            self.send(Msg::ThreadEnd {
                thread: r.thread,
                end_tsc,
                lost,
                clock,
            });
        }
        self.open_rings.remove(&r.name);
        drop(r.c);
        // Frees the tmpfs pages (4 MiB per thread by default); the program
        // never reopens a ring file.
        self.unlink_when_written(r.path);
    }

    /// Removes a ring file the drain is done with, once the events taken
    /// from it are in the trace file (the next durability mark written):
    /// until then a recorder killed meanwhile leaves them there for
    /// `lockscope recover`, with the ring's `durable` saying where the
    /// file stops. Holds its tmpfs pages a second or two longer.
    fn unlink_when_written(&mut self, path: PathBuf) {
        self.unlink.push((path, self.next_mark));
        // A mark must follow even if nothing more is copied.
        self.unmarked = self.unmarked.max(1);
    }

    /// After every process is gone: drain everything left and write the
    /// end of every process. `reaped`: raw wait statuses and reap times
    /// (ns) of the processes this recorder waited for.
    pub(crate) fn finish(&mut self, reaped: &HashMap<u32, (libc::c_int, u64)>) -> DrainTotals {
        self.refine_clock(true);
        self.discover(true);
        // Every process is gone. A thread whose process ended while it
        // was inside a critical section may have left the section's
        // acquisition deferred in its ring header (`Guard::defer`: it is
        // published with the thread's next event, which never came):
        // published now, after the ring's last event, so the trace still
        // says who held the lock (a hang ended by a kill, an exit with
        // threads inside sections). No room: counted as lost by the ring.
        for r in &mut self.rings {
            let _ = r.c.salvage_deferred();
        }
        self.drain_all();
        // A ring still open now belongs to a thread that never returned
        // nor called pthread_exit: it lived until its process ended (exit
        // with threads still running, a kill, a deadlock ended by a
        // signal). Its end is its process's exit stamp, else now (every
        // process is gone), not its last event: a thread blocked until
        // the end must show the whole wait.
        let now = tsc::now();
        while let Some(r) = self.rings.last() {
            let (pid, gen, _) = r.key;
            let fallback = self
                .proc_index
                .get(&(pid, gen))
                .map(|&i| {
                    let p = &self.procs[i];
                    p.hdr.load(&p.hdr.get().end_tsc)
                })
                .filter(|&t| t != 0)
                .unwrap_or(now);
            self.close_ring_or(self.rings.len() - 1, fallback);
        }
        let mut totals = DrainTotals {
            processes: self.procs.len() as u32,
            threads: self.next_thread - 1,
            queue_peak_bytes: self.cs.queue_peak as u64,
            queue_full_skips: self.cs.full_skips,
            parallel_copies: self.parallel_copies,
            batch_buffers: self.cs.big_mapped,
            full_waits: self.full_waits,
            full_wait_ns: (self.full_wait_ticks as f64 * 1e9 / self.clock.hz()) as u64,
            ..DrainTotals::default()
        };
        let procs = std::mem::take(&mut self.procs);
        let ns_per_tick = 1e9 / self.clock.hz();
        for p in &procs {
            let h = p.hdr.get();
            let successor = self
                .proc_index
                .get(&(p.pid, p.gen + 1))
                .map(|&i| procs[i].start_ns);
            let end_tsc = p.hdr.load(&h.end_tsc);
            let end_stamp = (end_tsc != 0).then(|| self.clock.ns(end_tsc));
            let (end_ns, status) = if let Some(s) = successor {
                // Replaced by exec: ends where the new image starts.
                (Some(s), -1)
            } else if let Some(&(raw, at)) = reaped.get(&p.pid) {
                (
                    Some(end_stamp.unwrap_or(at)),
                    crate::child::shell_status(raw).0,
                )
            } else if end_tsc != 0 {
                let code = h.exit_code.load(std::sync::atomic::Ordering::Acquire);
                (end_stamp, (code & 0xff) as i32)
            } else {
                (None, -1)
            };
            let acq = p.hdr.load(&h.acquire_cost_ticks) as f64 * ns_per_tick;
            let rel = p.hdr.load(&h.release_cost_ticks) as f64 * ns_per_tick;
            if acq > 0.0 || rel > 0.0 {
                // Releases are one ring push, acquisitions may be two: the
                // release cost is the best figure for "any other event".
                self.send(Msg::Rec(Record::Overhead(Overhead {
                    process: p.id,
                    acquire_ns: acq,
                    release_ns: rel,
                    event_ns: rel,
                })));
            }
            let ord = std::sync::atomic::Ordering::Acquire;
            totals.space_exhausted += u64::from(h.space_exhausted.load(ord));
            totals.threads_without_ring += u64::from(h.threads_without_ring.load(ord));
            totals.rings_grown += u64::from(h.rings_grown.load(ord));
            totals.rings_reused += u64::from(h.rings_reused.load(ord));
            totals.rings_not_pooled += u64::from(h.rings_not_pooled.load(ord));
            totals.pool_not_ready += u64::from(h.pool_not_ready.load(ord));
            let nested = p.hdr.load(&h.nested_skipped);
            self.loss(p.id, nested, LossReason::Nested);
            let no_ring = p.hdr.load(&h.lost_no_ring);
            self.loss(p.id, no_ring, LossReason::ThreadLimit);
            if h.disabled.load(std::sync::atomic::Ordering::Acquire) != 0 {
                self.loss(p.id, 0, LossReason::RecorderDisabled);
                totals.disabled.push(p.pid);
            }
            self.send(Msg::ProcessEnd {
                process: p.id,
                end_ns,
                status,
            });
        }
        self.procs = procs;
        totals
    }

    /// OS pids of every process image seen.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(|p| p.pid).collect()
    }

    /// Ends the workers, then asks the output for the footer.
    pub(crate) fn send_finish(&mut self, duration_ns: u64, exit_status: i32) {
        self.broadcast(|| Msg::Finish);
        self.send_out(Out::Finish {
            duration_ns,
            exit_status,
        });
    }

    /// Sends to the output thread (see `send_to` for a failed send).
    fn send_out(&mut self, o: Out) {
        if !self.cs.send_failed && self.out.send(o).is_err() {
            self.cs.send_failed = true;
        }
    }
}

pub(crate) fn name_from(b: &[u8; 16]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(16);
    String::from_utf8_lossy(&b[..n]).into_owned()
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[test]
    fn a_refinement_does_not_move_events_already_in_the_past() {
        let start = ClockPair {
            tsc: 1_000,
            mono_ns: 0,
        };
        let mut c = Clock::new(start, 1e9);
        let before = c.conv();
        // One second later the clock pair says the TSC runs 100 ppm slow.
        c.refine_at(ClockPair {
            tsc: 1_000_001_000,
            mono_ns: 1_000_100_000,
        });
        let after = c.conv();
        // Continuity at the switch, and an event stamped 1 us before it but
        // converted after it lands within a ns of where it was.
        assert_eq!(after.ns(1_000_001_000), before.ns(1_000_001_000));
        let (a, b) = (before.ns(1_000_000_000), after.ns(1_000_000_000));
        assert!(a.abs_diff(b) <= 1, "{a} vs {b}");
        // Later intervals use the refined rate.
        let d = after.ns(2_000_001_000) - after.ns(1_000_001_000);
        assert!((1_000_099_000..=1_000_101_000).contains(&d), "{d}");
        // Anchoring every estimate at the start instead would have moved
        // this event by ~100 us.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1000 short threads: batches closed early by the
    /// messages that must follow them travel in small copies, so that a
    /// converter that is behind does not make the drain map (and the
    /// kernel zero) a new 2 MiB buffer per batch. Here the converter never
    /// gives a buffer back.
    #[test]
    fn small_batches_do_not_take_the_batch_buffer_along() {
        let (tx, held) = std::sync::mpsc::channel::<Msg>();
        let (_pool_tx, pool_rx) = std::sync::mpsc::channel::<SlotBuf>();
        let tx = [tx];
        let worker_of = HashMap::new();
        let pool = Mutex::new(pool_rx);
        let queued = AtomicUsize::new(0);
        let cx = CopyCtx {
            tx: &tx,
            worker_of: &worker_of,
            pool: &pool,
            queued: &queued,
            budget: usize::MAX,
            clock: ClockConv::new(0, 0, 1.0),
        };
        let mut st = CopyState::default();
        for round in 0..100u64 {
            let mut buf = st.take_buf(&pool, false).expect("memory");
            let used = 10 + round as usize;
            for (i, s) in buf.whole_mut()[..used].iter_mut().enumerate() {
                s.0[0] = round * 1000 + i as u64;
            }
            st.batch = Some(Batch {
                buf,
                segs: vec![Seg {
                    thread: 1,
                    start: 0,
                    len: used,
                    corrupt: 0,
                    lost: 0,
                    clock: cx.clock,
                }],
                used,
                since: Instant::now(),
            });
            flush(&mut st, &cx);
        }
        assert_eq!(st.big_mapped, 1, "one 2 MiB buffer for 100 small batches");
        // What the converter got: every batch, whole, in order.
        let mut n = 0u64;
        for m in held.try_iter() {
            let Msg::Raw { slots, segs } = m else {
                panic!("only batches were sent");
            };
            assert_eq!(segs[0].len, slots.len());
            assert_eq!(slots.len(), 10 + n as usize);
            assert!(slots
                .iter()
                .enumerate()
                .all(|(i, s)| s.0[0] == n * 1000 + i as u64));
            n += 1;
        }
        assert_eq!(n, 100);
        // A batch larger than a small buffer goes in its own.
        let mut buf = st.take_buf(&pool, false).expect("memory");
        buf.whole_mut()[SMALL_COPY_SLOTS].0[0] = 9;
        st.batch = Some(Batch {
            buf,
            segs: vec![Seg {
                thread: 1,
                start: 0,
                len: SMALL_COPY_SLOTS + 1,
                corrupt: 0,
                lost: 0,
                clock: cx.clock,
            }],
            used: SMALL_COPY_SLOTS + 1,
            since: Instant::now(),
        });
        flush(&mut st, &cx);
        let Some(Msg::Raw { slots, .. }) = held.try_iter().next() else {
            panic!("the large batch was sent");
        };
        assert_eq!(slots.len(), SMALL_COPY_SLOTS + 1);
        assert!(slots.capacity() >= SMALL_BUF_SLOTS);
        assert_eq!(st.big_mapped, 1);
    }
}
