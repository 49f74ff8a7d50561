//! Single-producer single-consumer ring of [`Slot`]s in shared memory.
//!
//! The producer is one thread of the recorded program; the consumer is
//! the recorder process. Protocol:
//! - the producer writes the event's slots at `write..write+n` (indices
//!   modulo capacity), then publishes with `write.store(write+n, Release)`;
//! - the consumer loads `write` with Acquire, copies and decodes the slots
//!   up to it, then frees them with `read.store(.., Release)`;
//! - the producer checks for room against a cached copy of `read` and
//!   reloads it (Acquire) only when the cache says the ring is full, so the
//!   common case touches no cache line the consumer writes.
//!
//! A full ring drops the event and counts it in `lost`: the program is
//! never blocked by a slow recorder. While the ring stays full, the
//! producer backs off exponentially (after 16 immediate retries: 2, 4 ...
//! [`MAX_BACKOFF`] pushes)
//! before reloading `read` again: reloading on every push cost a
//! cross-core cache miss per dropped event (the consumer keeps writing
//! that line), which made the program slowest exactly when the recorder
//! was already behind. `lost` sits on the producer's own line and only
//! the producer writes it, so counting a drop is a plain add, no locked
//! instruction.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::raw::{
    Head, LastPath, RawEvent, Slot, MAX_FRAMES, OP_RING_HANDOFF, OP_THREAD_NAME, SLOT_BYTES,
    XF_ARGS, XF_PATH_TAIL,
};
use crate::session::{
    RingHeader, SessionWake, HEADER_BYTES, POOL_CLOSED, POOL_OPEN, POOL_POOLED, RING_MAGIC,
};

/// Most pushes a producer drops after a failed reload of `read` before it
/// looks again. At ~100 ns per cross-core miss this caps the cost of the
/// check at ~1 ns per dropped event; at worst 256 events are dropped that
/// a reload would have let in (a few microseconds of a fast producer).
pub const MAX_BACKOFF: u32 = 256;

/// Failed reloads of one overflow that are retried at once, before the
/// producer starts backing off.
const EAGER_RELOADS: u32 = 16;

/// Longest single sleep of a producer waiting for room, ns: bounds the
/// cost of a lost wake-up.
const WAIT_SLICE_NS: i64 = 10_000_000;
/// Sleeps without any progress of the consumer after which a waiting
/// producer gives up for good (~2 s: the recorder is gone or stuck; a
/// dead recorder must never hang the program).
const WAIT_GIVE_UP: u32 = 200;

/// Fill (slots published and not consumed) at which a producer wakes a
/// sleeping drain: a quarter of the ring, the fill at which the drain,
/// once awake, goes again without sleeping. Why a quarter: three
/// quarters of the ring stay for the time the drain takes to wake and
/// copy (on a loaded 2-CPU machine, milliseconds) before the thread has
/// to grow its ring or wait; a lower mark would wake the drain more often
/// for the same events.
#[inline(always)]
pub const fn wake_mark(capacity: u64) -> u64 {
    capacity / 4
}

/// A private, anonymous, pre-faulted mapping of `len` bytes (zeroed by
/// the kernel) for a ring that no consumer reads: the start-up cost
/// measurements write into one. `None` if the kernel refuses. The caller
/// unmaps it (`munmap(ptr, len)`).
pub fn scratch_map(len: usize) -> Option<*mut u8> {
    // SAFETY: a new anonymous mapping; no existing memory is touched.
    let m = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    };
    (m != libc::MAP_FAILED).then_some(m as *mut u8)
}

/// Bytes a ring file of `capacity` slots needs.
#[inline]
pub fn file_bytes(capacity: u64) -> usize {
    HEADER_BYTES + capacity as usize * SLOT_BYTES
}

/// Largest power of two number of slots that fits in `kib` KiB of slots
/// (at least 64).
pub fn capacity_for_kib(kib: u64) -> u64 {
    let slots = (kib.saturating_mul(1024) / SLOT_BYTES as u64).max(64);
    1u64 << (63 - slots.leading_zeros())
}

/// Who owns a ring: written into its header at creation.
#[derive(Clone, Copy, Debug, Default)]
pub struct RingIdentity {
    /// OS process id.
    pub pid: u32,
    /// OS thread id.
    pub tid: u32,
    /// Exec generation of the process image.
    pub exec_generation: u32,
    /// tid of the creating thread (0: main thread or unknown).
    pub parent_tid: u32,
    /// TSC at thread start.
    pub start_tsc: u64,
    /// Thread name, NUL-padded.
    pub name: [u8; 16],
}

/// A ring the producer is attached to: its header and its slot area,
/// in a mapping that stays valid for as long as this handle is used.
///
/// The invariant every use of a producer's ring relies on is established
/// once, by the `unsafe` [`Attached::new`] (called only by
/// [`Producer::init`] and [`Producer::resume`], whose callers promise the
/// mapping); after it, reaching the header is safe
/// ([`Attached::header`]). What stays `unsafe` is what the protocol, not
/// the mapping, makes sound: writing a slot, which is the producer's only
/// between `write` and `read + capacity`, and only until published.
///
/// Why a copyable handle with no lifetime and not a `&'a RingHeader`: a
/// producer lives in initial-exec TLS (all-zero bytes are "no ring",
/// [`Producer::EMPTY`]: `Option<Attached>` is null there), and the
/// mapping's lifetime is managed by hand, by the thread that unmaps the
/// ring once it is done with its producer (`munmap` is `unsafe`, and its
/// caller answers for it), which no borrow can express.
#[derive(Clone, Copy, Debug)]
struct Attached {
    /// The ring header, at the start of the mapping.
    hdr: NonNull<RingHeader>,
    /// The slot area, [`HEADER_BYTES`] into the mapping: `capacity` slots
    /// (the header's `capacity`, a power of two).
    slots: NonNull<Slot>,
}

impl Attached {
    /// The ring whose mapping starts at `base`.
    ///
    /// # Safety
    /// `base` is the start of a live mapping, readable and writable,
    /// aligned to a page, of [`file_bytes`]`(capacity)` bytes or more,
    /// where `capacity` is the slot count the producer masks its indices
    /// with; that mapping stays mapped, and its header is not moved or
    /// reinterpreted, for as long as the returned handle or any copy of
    /// it (a [`Producer`] holding it) is used. The header's non-atomic
    /// fields are written only before the handle is made
    /// ([`Producer::init`]).
    #[inline(always)]
    unsafe fn new(base: NonNull<u8>) -> Attached {
        Attached {
            hdr: base.cast(),
            // SAFETY: the mapping is longer than the header page (the
            // contract), so `base + HEADER_BYTES` lies inside it and is
            // not null.
            slots: unsafe { base.add(HEADER_BYTES) }.cast(),
        }
    }

    /// The ring header.
    #[inline(always)]
    fn header(&self) -> &RingHeader {
        // SAFETY: the header page is mapped for as long as this handle is
        // used (`Attached::new`'s contract); everything in it that the
        // consumer writes is atomic.
        unsafe { self.hdr.as_ref() }
    }

    /// The first slot: slot `i < capacity` is at `slots().add(i)`.
    #[inline(always)]
    fn slots(&self) -> *mut Slot {
        self.slots.as_ptr()
    }
}

/// The producer side. Plain data with a `const` empty value, so that it
/// can live in initial-exec TLS with no constructor and no destructor.
#[derive(Debug)]
pub struct Producer {
    /// The ring (`None`: no ring; every push fails).
    ring: Option<Attached>,
    mask: u64,
    write: u64,
    read_cache: u64,
    /// Pushes still to drop without reloading `read`.
    skip: u32,
    /// Consecutive failed reloads (0 once there was room again).
    backoff: u32,
    /// Wait for the consumer instead of dropping when full (the default;
    /// `lockscope record --on-full drop` turns it off).
    wait_full: bool,
    /// Head-room checks to skip after one found the ring nearly full but
    /// could not wait (the thread held a lock): bounds the cross-core
    /// reloads of `read` while the recorder catches up.
    headroom_skip: u32,
    /// Fill level (write - read) above which [`Producer::low_on_room`]
    /// says so: capacity minus the reserve, precomputed (the check runs
    /// at every hooked call). 0 with no ring: `write` and `read_cache`
    /// stay 0 then, so it is never low (and the all-zero TLS state is
    /// [`Producer::EMPTY`]).
    low_mark: u64,
    /// An event is waiting in the header's deferred line
    /// ([`Producer::defer`]).
    deferred: bool,
    /// The session's wake page (null: nobody to wake, e.g. a scratch
    /// ring or a recorder that did not create one).
    wake: *const SessionWake,
    /// `write` at which the producer next looks whether the fill crossed
    /// [`wake_mark`] ([`Producer::crossed`]): one compare per push
    /// against a value of its own, no shared line. `u64::MAX` on a ring
    /// until [`Producer::set_wake`] gives it a page: with nobody to wake,
    /// the look (a load of the consumer's line) is never due.
    wake_at: u64,
    /// Clock ticks this producer spent waiting for room
    /// (`Producer::wait_for_room`) that its owner has not collected yet
    /// ([`Producer::take_waited`]).
    waited: u64,
}

impl Producer {
    /// A producer with no ring: every push fails (and is not counted here;
    /// the caller counts "no ring" losses).
    pub const EMPTY: Producer = Producer {
        ring: None,
        mask: 0,
        write: 0,
        read_cache: 0,
        skip: 0,
        backoff: 0,
        wait_full: false,
        headroom_skip: 0,
        low_mark: 0,
        deferred: false,
        wake: core::ptr::null(),
        // All-zero bytes: thread state lives in zero-initialised TLS. A
        // producer without a ring never pushes, so the look is never due.
        wake_at: 0,
        waited: 0,
    };

    /// True if this producer has a ring.
    #[inline]
    pub fn is_attached(&self) -> bool {
        self.ring.is_some()
    }

    /// Initializes a ring in the `len` bytes at `base` (a fresh, zeroed,
    /// shared mapping) and returns its producer.
    ///
    /// # Safety
    /// `base` must be valid for reads and writes of `len` bytes for as long
    /// as the producer is used, aligned to a page, and zero-filled.
    pub unsafe fn init(base: *mut u8, len: usize, id: &RingIdentity) -> Option<Producer> {
        // SAFETY: `base` is valid for reads and writes of `len` bytes,
        // page-aligned and zeroed (the contract); `len` holds the header
        // page plus at least 64 slots (checked first), so `hdr` (aligned:
        // a page start) and every header field written lies inside it, and
        // `base + HEADER_BYTES` is the slot area. Plain stores: no consumer
        // reads the header before `magic`, written last with a volatile
        // store after a Release fence, and no other producer has the
        // mapping yet. `base` stays mapped for as long as the producer is
        // used (the contract), which is what `Attached::new` requires of it
        // (non-null: a mapping's start).
        unsafe {
            if len < HEADER_BYTES + 64 * SLOT_BYTES {
                return None;
            }
            let cap = {
                let slots = ((len - HEADER_BYTES) / SLOT_BYTES) as u64;
                1u64 << (63 - slots.leading_zeros())
            };
            let hdr = base as *mut RingHeader;
            // Plain writes: the consumer validates `magic` last (see below).
            // Version 2: events may carry `XF_PATH_TAIL` (a version-1
            // reader would count their slots wrong, and refuses the ring).
            (*hdr).version = 2;
            (*hdr).slot_bytes = SLOT_BYTES as u32;
            (*hdr).capacity = cap;
            (*hdr).pid = id.pid;
            (*hdr).tid = id.tid;
            (*hdr).exec_generation = id.exec_generation;
            (*hdr).parent_tid = id.parent_tid;
            (*hdr).start_tsc = id.start_tsc;
            (*hdr).name = id.name;
            // Publish the header: a consumer that sees the magic sees the rest.
            core::sync::atomic::fence(Ordering::Release);
            core::ptr::write_volatile(&mut (*hdr).magic, RING_MAGIC);
            Some(Producer {
                ring: Some(Attached::new(NonNull::new_unchecked(base))),
                mask: cap - 1,
                write: 0,
                read_cache: 0,
                skip: 0,
                backoff: 0,
                wait_full: false,
                headroom_skip: 0,
                low_mark: cap - cap / 4,
                deferred: false,
                wake: core::ptr::null(),
                wake_at: u64::MAX,
                waited: 0,
            })
        }
    }

    /// Takes over the ring at `base` for a new thread (ring recycling):
    /// the producer state is rebuilt from the header, where the
    /// previous producer published everything it wrote. Call
    /// [`Producer::hand_over`] before any other push. `None` if the header
    /// does not describe a ring (never expected: the ring came from this
    /// process's own free list).
    ///
    /// # Safety
    /// `base` must be the start of a live mapping of a whole ring file
    /// that [`Producer::init`] initialised, valid for reads and writes for
    /// as long as the producer is used, and its previous producer must be
    /// gone for good, its writes ordered before this call (its thread was
    /// joined, and the ring reached us through the free list's atomics), so
    /// that this producer is the ring's only writer.
    pub unsafe fn resume(base: *mut u8) -> Option<Producer> {
        let hdr = base as *mut RingHeader;
        // SAFETY: `base` starts a live ring mapping (the caller's
        // contract), so `hdr` points to its initialised header page; the
        // fields read here are never written again (capacity) or written
        // only by the producer, which is now us (write), or are atomics.
        let (cap, write, read) = unsafe {
            (
                (*hdr).capacity,
                (*hdr).write.load(Ordering::Relaxed),
                (*hdr).read.load(Ordering::Acquire),
            )
        };
        if !cap.is_power_of_two() || write.wrapping_sub(read) > cap {
            return None;
        }
        Some(Producer {
            // SAFETY: `base` starts a live mapping of a whole ring file
            // (file_bytes(cap) long: `init` made it), valid for as long as
            // the producer is used (the caller's contract), whose header
            // `init` wrote before any producer had it.
            ring: Some(unsafe { Attached::new(NonNull::new_unchecked(base)) }),
            mask: cap - 1,
            write,
            read_cache: read,
            skip: 0,
            backoff: 0,
            wait_full: false,
            headroom_skip: 0,
            low_mark: cap - cap / 4,
            deferred: false,
            wake: core::ptr::null(),
            wake_at: u64::MAX,
            waited: 0,
        })
    }

    /// Gives the producer the session's wake page, through which it wakes
    /// the drain when its ring crosses [`wake_mark`], when its thread
    /// ends, and before it waits for room.
    ///
    /// # Safety
    /// `wake` is null or points to a [`SessionWake`] that stays mapped for
    /// as long as the producer is used.
    pub unsafe fn set_wake(&mut self, wake: *const SessionWake) {
        self.wake = wake;
        // The first look is due a mark past what the consumer had read
        // when this producer last knew it (0 for a new ring, the header's
        // `read` for a recycled one).
        self.wake_at = if wake.is_null() || self.ring.is_none() {
            u64::MAX
        } else {
            self.read_cache + wake_mark(self.mask + 1)
        };
    }

    /// The fill reached `wake_at`: looks at the real fill (one load of
    /// `read`, once per quarter ring at most) and wakes the drain if it
    /// crossed [`wake_mark`] and the drain sleeps. The next look is due a
    /// mark after `read` (fill below the mark), or a sixteenth of the ring
    /// on (above it: the drain is awake or was just woken, and this
    /// bounds the wakes a drain that is slow to copy receives).
    ///
    /// Why here and not in the drain: a drain that polls the rings costs
    /// CPU while the program takes no locks at all (6 % of a vCPU with a
    /// 0.5 ms period); this costs the program one compare per event and
    /// a system call only when a sleeping drain has work.
    #[cold]
    #[inline(never)]
    fn crossed(&mut self) {
        let Some(ring) = self.ring else {
            return;
        };
        let h = ring.header();
        self.read_cache = h.read.load(Ordering::Acquire);
        let mark = wake_mark(self.mask + 1);
        if self.write - self.read_cache >= mark {
            self.wake_drain();
            self.wake_at = self.write + (mark / 4).max(1);
        } else {
            self.wake_at = self.read_cache + mark;
        }
    }

    /// Wakes the drain if it sleeps (see [`wake_drain`]): for a thread's
    /// end, a fill past the mark, a wait for room. Call it after the
    /// store that publishes what the drain should see.
    #[inline]
    pub fn wake_drain(&self) {
        // SAFETY: set_wake's contract: null or a live wake page.
        if let Some(w) = unsafe { self.wake.as_ref() } {
            wake_drain(w);
        }
    }

    /// First event of a new owner of a recycled ring ([`Producer::resume`]):
    /// an [`OP_RING_HANDOFF`] event carrying the new thread's identity and
    /// what the recorder needs to end the previous owner (its exit stamp,
    /// the ring's loss count now); then the ring is the new thread's
    /// (`end_tsc` cleared, [`RingHeader::pool`] back to open). Returns
    /// false if there was no room (the caller then gives the ring back).
    pub fn hand_over(&mut self, id: &RingIdentity) -> bool {
        let Some(ring) = self.ring else {
            return false;
        };
        let h = ring.header();
        // The previous owner's last path is not this thread's, and its
        // reader starts with none (a new thread's state).
        h.path_len.store(0, Ordering::Relaxed);
        let head = Head {
            tsc: id.start_tsc,
            addr: h.end_tsc.load(Ordering::Acquire),
            site: h.lost.load(Ordering::Relaxed),
            op: OP_RING_HANDOFF,
            aux: id.tid,
            ..Head::default()
        };
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        lo.copy_from_slice(&id.name[..8]);
        hi.copy_from_slice(&id.name[8..]);
        let name = [u64::from_le_bytes(lo), u64::from_le_bytes(hi)];
        // Where the event goes, before it is published (the consumer
        // copies the previous owner's events only up to it). Release on
        // the `write` store below orders this store before it.
        let before = h.handoff.load(Ordering::Relaxed);
        h.handoff.store(self.write + 1, Ordering::Relaxed);
        if !self.try_push(head, Some((u64::from(id.parent_tid), 0)), &name) {
            // Not published: a consumer that saw the value above found it
            // beyond `write` and ignored it.
            h.handoff.store(before, Ordering::Relaxed);
            return false;
        }
        h.end_tsc.store(0, Ordering::Relaxed);
        // Release: a recorder that sees the ring open again (its close
        // attempt succeeds) also sees the hand-over event and backs off.
        h.pool.store(POOL_OPEN, Ordering::Release);
        true
    }

    /// The ring header (for the thread-exit stamp and loss counter), or
    /// `None` without a ring. Its address is the start of the ring's
    /// mapping.
    #[inline]
    pub fn header(&self) -> Option<&RingHeader> {
        self.ring.as_ref().map(Attached::header)
    }

    /// Appends one event. Returns false (and counts a loss) if the ring is
    /// full or not attached. `frames` beyond [`MAX_FRAMES`] are cut.
    ///
    /// Hot path: no allocation, no syscall, no lock; in the common case one
    /// comparison, 1-3 slot stores and one release store.
    #[inline]
    pub fn push(&mut self, head: Head, args: Option<(u64, u64)>, frames: &[u64]) -> bool {
        self.push_with(head, args, frames, true)
    }

    /// Like [`Producer::push`], but a full ring returns false at once:
    /// no waiting, nothing counted (the caller may grow the ring and
    /// retry, then fall back to [`Producer::push`]).
    #[inline]
    pub fn try_push(&mut self, head: Head, args: Option<(u64, u64)>, frames: &[u64]) -> bool {
        self.push_with(head, args, frames, false)
    }

    #[inline(always)]
    fn push_with(
        &mut self,
        mut head: Head,
        args: Option<(u64, u64)>,
        frames: &[u64],
        on_full: bool,
    ) -> bool {
        let Some(ring) = self.ring else {
            return false;
        };
        let frames = &frames[..frames.len().min(MAX_FRAMES)];
        head.nframes = frames.len() as u8;
        head.xflags = if args.is_some() {
            head.xflags | XF_ARGS
        } else {
            head.xflags & !XF_ARGS
        } & !XF_PATH_TAIL;
        // A call path whose frames after the site are those of the last
        // path written in full is not written again (`XF_PATH_TAIL`); a
        // path written in full becomes the last one, once it is in the
        // ring (a dropped event must not be referred to).
        let mut learn = false;
        let frames = if frames.is_empty() || head.op >= OP_THREAD_NAME {
            frames
        } else if frames[0] == head.site && (frames.len() == 1 || same_tail(ring.header(), frames))
        {
            head.xflags |= XF_PATH_TAIL;
            &[]
        } else {
            learn = true;
            frames
        };
        let n = head.slots() as u64;
        let cap = self.mask + 1;
        if self.write - self.read_cache + n > cap {
            if on_full {
                if !self.room_after_reload(n) {
                    return false;
                }
            } else if !self.reload_has_room(n) {
                return false;
            }
        }
        let slots = ring.slots();
        let mut w = self.write;
        // SAFETY: every index is masked into the ring's `capacity` slots,
        // which the mapping holds whole for as long as the producer is used
        // (`Attached`). The slots from `write` up to `read + capacity`
        // (room checked above, against a `read` at most as new as the
        // consumer's) belong to the producer until the `write` store
        // below publishes them: the consumer reads no slot at or past
        // the `write` it loaded, so these plain stores race with nothing.
        unsafe {
            // Four 8-byte stores of values in registers: writing the head
            // as a struct went through a copy on the stack, whose 16-byte
            // reload spanned the byte stores of op/flags (a store-forwarding
            // stall on every event).
            slots.add((w & self.mask) as usize).write(head.pack());
            w += 1;
            if let Some((a, b)) = args {
                slots
                    .add((w & self.mask) as usize)
                    .write(Slot([a, b, 0, 0]));
                w += 1;
            }
            // Whole slots first, then the zero-padded tail: a
            // variable-length `copy_from_slice` per chunk compiled to a
            // memset and a memcpy call per slot (a tenth of a
            // detailed-mode access's cost).
            let mut whole = frames.chunks_exact(4);
            for c in whole.by_ref() {
                let s = Slot([c[0], c[1], c[2], c[3]]);
                slots.add((w & self.mask) as usize).write(s);
                w += 1;
            }
            let tail = whole.remainder();
            if !tail.is_empty() {
                let at = |i: usize| tail.get(i).copied().unwrap_or(0);
                let s = Slot([at(0), at(1), at(2), 0]);
                slots.add((w & self.mask) as usize).write(s);
                w += 1;
            }
        }
        self.write = w;
        // Publishes the event: a consumer that loads this `write`
        // (Acquire) sees every slot stored above.
        ring.header().write.store(w, Ordering::Release);
        if self.write >= self.wake_at {
            self.crossed();
        }
        if learn {
            learn_path(ring.header(), frames);
        }
        true
    }

    /// Holds a one-slot event (no args, no frames: `head`'s are cleared)
    /// back instead of publishing it: its slot goes to the header's
    /// deferred line ([`RingHeader::deferred`]), which only this producer
    /// writes and the consumer reads only after the program is gone, so
    /// the store stays in this core's cache. Why: an acquisition is
    /// recorded inside the critical section it opens, and a store to a
    /// ring line the consumer has read must first take the line back from
    /// the consumer's core; deferring it to the next event (the release,
    /// recorded after the real unlock) keeps that out of the section.
    /// Measured on `contended.c` (2 threads, 2 CPUs): the program's own
    /// count of acquisitions that found the mutex taken was 5.4 % alone,
    /// 1.4 % recorded with the acquisition written in the section, 3.8 %
    /// with it written after.
    ///
    /// The caller publishes it before anything else this producer writes
    /// ([`Producer::take_deferred`], then a push), so the ring keeps the
    /// thread's order. Returns false (nothing deferred) without a ring or
    /// while another event is deferred.
    #[inline]
    pub fn defer(&mut self, mut head: Head) -> bool {
        let Some(ring) = self.ring else {
            return false;
        };
        if self.deferred {
            return false;
        }
        head.nframes = 0;
        head.xflags &= !(XF_ARGS | XF_PATH_TAIL);
        let s = head.pack();
        // The slot words first, then the mark (Release): a consumer that
        // sees the mark sees the slot.
        let h = ring.header();
        for (d, v) in h.deferred.iter().zip(s.0) {
            d.store(v, Ordering::Relaxed);
        }
        h.deferred_at.store(self.write + 1, Ordering::Release);
        self.deferred = true;
        true
    }

    /// True while an event is deferred ([`Producer::defer`]).
    #[inline(always)]
    pub fn has_deferred(&self) -> bool {
        self.deferred
    }

    /// Publishes the deferred event where it stands: its slot, packed by
    /// [`Producer::defer`], is copied from the header into the ring as it
    /// is. Returns false, and leaves it deferred, when nothing is deferred
    /// or the ring has no room for it (the caller then takes it back with
    /// [`Producer::take_deferred`] and pushes it the slow way: growing or
    /// waiting). Why not `take_deferred` and a push: that unpacked the
    /// slot into a head and packed it again, and asked a head with no
    /// args and no frames how many slots it takes: half of the 52
    /// instructions the release of an uncontended pair spent publishing
    /// its acquisition (callgrind).
    #[inline(always)]
    pub fn publish_deferred(&mut self) -> bool {
        if !self.deferred {
            return false;
        }
        let Some(ring) = self.ring else {
            return false;
        };
        if self.write - self.read_cache + 1 > self.mask + 1 && !self.reload_has_room(1) {
            return false;
        }
        let h = ring.header();
        let s = h.deferred_slot();
        // The mark is cleared before the slot is published, as
        // `take_deferred` does: the consumer never publishes it a second
        // time.
        h.deferred_at.store(0, Ordering::Relaxed);
        self.deferred = false;
        // SAFETY: the index is masked into the ring's `capacity` slots,
        // which the mapping holds whole (`Attached`); the slot at `write`
        // is the producer's until the store below publishes it (room
        // checked above), so the plain store races with no reader.
        unsafe {
            ring.slots().add((self.write & self.mask) as usize).write(s);
        }
        self.write += 1;
        h.write.store(self.write, Ordering::Release);
        true
    }

    /// Takes the deferred event back, to push it (or to carry it to a
    /// larger ring), and clears the header's mark so that the consumer
    /// never publishes it too.
    pub fn take_deferred(&mut self) -> Option<Head> {
        if !self.deferred {
            return None;
        }
        let ring = self.ring?;
        let h = ring.header();
        self.deferred = false;
        h.deferred_at.store(0, Ordering::Relaxed);
        Some(Head::from_slot(&h.deferred_slot()))
    }

    /// Makes a full ring wait for the consumer instead of dropping events
    /// (see `Producer::wait_for_room`). On by default in the preload
    /// library: a trace that silently lacks a sixth of the locks of a
    /// lock-heavy program cannot be trusted, and a wait is counted and
    /// reported as perturbation (`RingHeader::full_waits`).
    pub fn set_wait_when_full(&mut self, on: bool) {
        self.wait_full = on;
    }

    /// Slots kept free for a thread that holds locks: below this much
    /// room a thread that holds no lock waits for the recorder *before*
    /// its next operation ([`Producer::make_headroom`]), so that the wait
    /// falls outside every critical section; a thread inside one goes on
    /// into the reserve. A quarter of the ring: at ~10M events/s per
    /// thread that is milliseconds of events, more than one drain pass.
    #[inline(always)]
    fn reserve(&self) -> u64 {
        (self.mask + 1) / 4
    }

    /// True when the cached view says less than `Self::reserve` slots
    /// are free: the caller then looks closer
    /// ([`Producer::headroom_slow`]). One subtraction and one compare
    /// against the cached `read`, no shared cache line touched: this runs
    /// at the start of every hooked call.
    #[inline(always)]
    pub fn low_on_room(&self) -> bool {
        // == write - read_cache + reserve > capacity (low_mark is
        // capacity - reserve), one compare on the hot path.
        self.write - self.read_cache > self.low_mark
    }

    /// The slow half of the head-room check, called when
    /// [`Producer::low_on_room`]: reloads `read`; if less than the reserve
    /// is really free, asks `grow` for a larger ring (which replaces this
    /// producer: the caller's business), else, when `may_wait` (the
    /// thread holds no lock, so no other thread can be waiting on it) and
    /// the ring waits when full, waits for the consumer *before* the hooked
    /// call: back-pressure outside critical sections instead of inflated
    /// hold times. Returns true if the caller should grow the ring.
    #[cold]
    #[inline(never)]
    pub fn headroom_slow(&mut self, may_wait: bool, can_grow: bool) -> bool {
        if self.headroom_skip > 0 {
            self.headroom_skip -= 1;
            return false;
        }
        let Some(ring) = self.ring else {
            return false;
        };
        self.read_cache = ring.header().read.load(Ordering::Acquire);
        let need = self.reserve();
        if self.write - self.read_cache + need <= self.mask + 1 {
            return false;
        }
        if may_wait && can_grow {
            return true;
        }
        if may_wait && self.wait_full {
            self.wait_for_room(need);
        } else {
            // Bounds the cross-core reloads of `read` while the thread
            // stays inside critical sections and the recorder catches up.
            self.headroom_skip = 32;
        }
        false
    }

    /// Clock ticks spent waiting for the consumer to make room since the
    /// last call, and starts counting again from 0. Only [`Producer::push`]
    /// and [`Producer::headroom_slow`] ever wait: their caller collects the
    /// wait into the thread's own total (which its run-queue delay
    /// samples include). Why not a call into the thread's state from the
    /// wait itself: the ring protocol knows no thread state (the recorder
    /// links it too), and a hook through a global function pointer would
    /// hide where the figure goes.
    #[inline]
    pub fn take_waited(&mut self) -> u64 {
        core::mem::take(&mut self.waited)
    }

    /// Capacity in slots.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// True if a full ring makes this producer wait (see
    /// [`Producer::set_wait_when_full`]).
    #[inline]
    pub fn waits_when_full(&self) -> bool {
        self.wait_full
    }

    /// Waits until the consumer has freed room for `n` slots. Spins
    /// briefly, then sleeps 20 us at a time (on a machine with fewer cores
    /// than runnable threads the recorder needs this thread's CPU to make
    /// room; a yield-only loop can starve it). Gives up after 25,000 sleeps
    /// (0.5-2 s) without progress, i.e. when the recorder is gone or stuck,
    /// and then stops waiting for good: a dead recorder must never hang
    /// the program.
    #[cold]
    fn wait_for_room(&mut self, n: u64) -> bool {
        let Some(ring) = self.ring else {
            return false;
        };
        let h = ring.header();
        let t0 = crate::tsc::now();
        let ok = self.wait_for_room_inner(h, n);
        // Every wait is perturbation of the program's timing: counted in
        // the header (single writer: load + store) and reported.
        let t = crate::tsc::now().saturating_sub(t0);
        h.full_waits
            .store(h.full_waits.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        h.full_wait_ticks.store(
            h.full_wait_ticks.load(Ordering::Relaxed) + t,
            Ordering::Relaxed,
        );
        self.waited = self.waited.wrapping_add(t);
        ok
    }

    fn wait_for_room_inner(&mut self, h: &RingHeader, n: u64) -> bool {
        let cap = self.mask + 1;
        let mut last_read = self.read_cache;
        let mut idle = 0u32;
        loop {
            self.read_cache = h.read.load(Ordering::Acquire);
            if self.write - self.read_cache + n <= cap {
                return true;
            }
            if self.read_cache != last_read {
                last_read = self.read_cache;
                idle = 0;
            }
            idle += 1;
            if idle < 64 {
                core::hint::spin_loop();
                continue;
            }
            if idle > 64 + WAIT_GIVE_UP {
                self.wait_full = false;
                return false;
            }
            // Sleep on the header's futex word until the consumer frees
            // slots and wakes us. Polling with short sleeps (the first
            // version: 20 us nanosleeps) cost a syscall and a context switch
            // every 20 us per waiting thread, CPU the recorder needed to
            // make room. SeqCst on both sides: either the consumer sees
            // `waiting` after its `read` store and wakes us, or we see its
            // new `read` here before sleeping. The timeout bounds a lost
            // wake-up and detects a recorder that is gone.
            // The drain may be asleep (a ring that filled between its
            // passes without the wake at the mark reaching it, e.g. the
            // producer waited inside the reserve): waiting for room must
            // never wait for a drain that sleeps.
            self.wake_drain();
            h.waiting.store(1, Ordering::SeqCst);
            if self.write - h.read.load(Ordering::SeqCst) + n <= cap {
                h.waiting.store(0, Ordering::Relaxed);
                continue;
            }
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: WAIT_SLICE_NS,
            };
            // SAFETY: FUTEX_WAIT on a u32 in a live shared mapping, with a
            // valid relative timeout; EINTR/EAGAIN/ETIMEDOUT just loop.
            unsafe {
                futex(
                    h.waiting.as_ptr(),
                    libc::FUTEX_WAIT,
                    1,
                    &ts as *const libc::timespec as usize,
                );
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn reload_has_room(&mut self, n: u64) -> bool {
        let Some(ring) = self.ring else {
            return false;
        };
        self.read_cache = ring.header().read.load(Ordering::Acquire);
        self.write - self.read_cache + n <= self.mask + 1
    }

    /// The cached `read` says the ring is full: reload it (unless backing
    /// off) and count a drop if there is still no room for `n` slots.
    #[cold]
    #[inline(never)]
    fn room_after_reload(&mut self, n: u64) -> bool {
        let Some(ring) = self.ring else {
            return false;
        };
        if self.wait_full && self.wait_for_room(n) {
            return true;
        }
        if self.skip == 0 {
            self.read_cache = ring.header().read.load(Ordering::Acquire);
            if self.write - self.read_cache + n <= self.mask + 1 {
                self.backoff = 0;
                return true;
            }
            // The first few failures of an overflow reload every time (a
            // burst slightly too big recovers at once); a longer one backs
            // off exponentially.
            // Dropping: a drain that sleeps must come (it was woken at the
            // mark, unless that wake was lost to a race with its sleep).
            self.wake_drain();
            self.backoff = self.backoff.saturating_add(1);
            self.skip = if self.backoff <= EAGER_RELOADS {
                0
            } else {
                1u32.checked_shl(self.backoff - EAGER_RELOADS)
                    .map_or(MAX_BACKOFF, |s| s.min(MAX_BACKOFF))
            };
        } else {
            self.skip -= 1;
        }
        // Single writer (this thread; re-entrant hooks are excluded by the
        // caller's guard): load + store instead of a locked add. The
        // consumer reads it with a relaxed load.
        let lost = &ring.header().lost;
        lost.store(lost.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        false
    }
}

/// True if `frames` (not empty, at most [`MAX_FRAMES`]) has the length
/// of the last path written in full to the ring of `h` and the same
/// frames after the first. Producer-only header lines: no other core
/// writes them.
#[inline(always)]
fn same_tail(h: &RingHeader, frames: &[u64]) -> bool {
    if h.path_len.load(Ordering::Relaxed) != frames.len() as u64 {
        return false;
    }
    // Innermost first: a path that changed usually changed there.
    frames[1..]
        .iter()
        .zip(&h.path[1..])
        .all(|(&f, p)| p.load(Ordering::Relaxed) == f)
}

/// Makes `frames` (at most [`MAX_FRAMES`]) the last path written in
/// full to the ring of `h`.
#[inline(always)]
fn learn_path(h: &RingHeader, frames: &[u64]) {
    for (p, &f) in h.path.iter().zip(frames) {
        p.store(f, Ordering::Relaxed);
    }
    h.path_len.store(frames.len() as u64, Ordering::Relaxed);
}

/// The futex system call, made directly: the preload library interposes
/// `syscall(3)` (futex-level capture), and the recorder's own waits must
/// not go through its hooks (they would be counted as skipped nested
/// events).
///
/// # Safety
/// `uaddr` must point to a live u32; `timeout` is 0 or the address of a
/// valid `timespec` (FUTEX_WAIT).
unsafe fn futex(uaddr: *mut u32, op: i32, val: u32, timeout: usize) -> i64 {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let ret: i64;
        // SAFETY: the x86-64 Linux system-call convention (rax = number,
        // rdi, rsi, rdx, r10 = arguments; rcx and r11 are clobbered); the
        // caller guarantees the pointers.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") libc::SYS_futex => ret,
                in("rdi") uaddr,
                in("rsi") op as i64,
                in("rdx") val as u64,
                in("r10") timeout,
                in("r8") 0usize,
                in("r9") 0usize,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        // SAFETY: as above.
        unsafe { libc::syscall(libc::SYS_futex, uaddr, op, val, timeout, 0usize, 0u32) as i64 }
    }
}

/// Waits while `word` holds `val`: returns at once if it does not, and
/// may return spuriously or at the timeout (the caller re-checks). Made
/// with the raw system call, as the recorder's own waits are, so that no
/// hook of ours sees it. For hooks that must wait for other threads of
/// the program (the OpenMP region barrier), at most `timeout_ms`.
pub fn futex_wait_private(word: &AtomicU32, val: u32, timeout_ms: u32) {
    let ts = libc::timespec {
        tv_sec: (timeout_ms / 1000) as libc::time_t,
        tv_nsec: (timeout_ms % 1000) as libc::c_long * 1_000_000,
    };
    // SAFETY: FUTEX_WAIT on a live u32 the caller borrows, with a
    // relative timeout in a timespec that lives across the call.
    unsafe {
        futex(
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            val,
            &ts as *const libc::timespec as usize,
        );
    }
}

/// Wakes every thread in [`futex_wait_private`] on `word`.
pub fn futex_wake_all_private(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live u32 the caller borrows.
    unsafe {
        futex(
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX as u32,
            0,
        );
    }
}

/// Wakes the drain if it sleeps ([`drain_sleep`]); the program's side.
/// The common case is a fence and one load of a line that changes only
/// when the drain goes to sleep or wakes. Only the waker that clears
/// `sleeping` makes the system call.
pub fn wake_drain(w: &SessionWake) {
    // Orders the caller's publishing store (a ring's `write`, a thread's
    // `end_tsc`) before the load of `sleeping`: either the drain's last
    // look before sleeping sees that store, or this load sees it sleeping.
    core::sync::atomic::fence(Ordering::SeqCst);
    if w.sleeping.load(Ordering::SeqCst) != 0 && w.sleeping.swap(0, Ordering::SeqCst) != 0 {
        wake_drain_now(w);
    }
}

/// Wakes the drain whether or not it announced its sleep: for a signal
/// handler of the recorder (a child ended, a signal to forward), whose
/// news the drain's last look does not see. Async-signal-safe.
pub fn wake_drain_now(w: &SessionWake) {
    w.seq.fetch_add(1, Ordering::SeqCst);
    // SAFETY: FUTEX_WAKE on a u32 inside a live mapping (the caller's
    // reference); not private: the drain is another process.
    unsafe {
        futex(w.seq.as_ptr(), libc::FUTEX_WAKE, 1, 0);
    }
}

/// The drain's sleep: announces it in `w.sleeping`, then calls `busy`
/// (which looks once more at the rings and anything else that wakes the
/// drain) and sleeps only if it says there is nothing to do, until a
/// [`wake_drain`], or `timeout`. Returns true if it was woken (or did
/// not sleep because `busy`).
pub fn drain_sleep(
    w: &SessionWake,
    timeout: core::time::Duration,
    busy: impl FnOnce() -> bool,
) -> bool {
    let s = w.seq.load(Ordering::SeqCst);
    w.sleeping.store(1, Ordering::SeqCst);
    core::sync::atomic::fence(Ordering::SeqCst);
    let woken = if busy() {
        true
    } else {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a u32 in a live shared mapping with a
        // valid relative timeout; a change of `seq` since `s` (a wake
        // that came first) returns at once.
        unsafe {
            futex(
                w.seq.as_ptr(),
                libc::FUTEX_WAIT,
                s,
                &ts as *const libc::timespec as usize,
            );
        }
        w.seq.load(Ordering::SeqCst) != s
    };
    w.sleeping.store(0, Ordering::SeqCst);
    woken
}

/// Wakes the ring's producer if it sleeps waiting for room (call after
/// storing a new `read`). The common case is one load of a line nobody
/// writes.
fn wake_producer(h: &RingHeader) {
    core::sync::atomic::fence(Ordering::SeqCst);
    if h.waiting.load(Ordering::SeqCst) != 0 {
        h.waiting.store(0, Ordering::SeqCst);
        // SAFETY: FUTEX_WAKE on a u32 inside the live mapping.
        unsafe {
            futex(h.waiting.as_ptr(), libc::FUTEX_WAKE, i32::MAX as u32, 0);
        }
    }
}

/// The consumer side, over a mapped ring file.
pub struct Consumer {
    base: *mut u8,
    len: usize,
    cap: u64,
    /// The last call path [`Consumer::drain`] read in full (boxed: 520
    /// bytes that only `drain`'s users need).
    last: Box<LastPath>,
}

// SAFETY: the consumer only touches the shared mapping through atomics and
// volatile-equivalent copies; it may move between recorder threads.
unsafe impl Send for Consumer {}

/// Why a ring could not be opened.
#[derive(Debug)]
#[non_exhaustive]
pub enum RingError {
    /// Opening or mapping the file failed.
    Io(std::io::Error),
    /// The header is not (yet) valid: wrong magic, version or size.
    BadHeader(&'static str),
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RingError::Io(e) => write!(f, "{e}"),
            RingError::BadHeader(w) => write!(f, "bad ring header: {w}"),
        }
    }
}

impl std::error::Error for RingError {}

impl Consumer {
    /// Maps a ring file read-write (the consumer writes `read`).
    /// Returns `BadHeader` while the producer has not finished creating it;
    /// the caller retries later.
    pub fn open(path: &std::path::Path) -> Result<Consumer, RingError> {
        use std::os::unix::io::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(RingError::Io)?;
        let len = f.metadata().map_err(RingError::Io)?.len() as usize;
        if len < HEADER_BYTES + 64 * SLOT_BYTES {
            return Err(RingError::BadHeader("file smaller than a ring"));
        }
        // SAFETY: mapping a regular file we opened; checked length.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(RingError::Io(std::io::Error::last_os_error()));
        }
        // From here on `c` owns the mapping: every early return unmaps it.
        let mut c = Consumer {
            base: base as *mut u8,
            len,
            cap: 0,
            last: Box::default(),
        };
        let h = c.header();
        // SAFETY: within the mapping.
        let magic = unsafe { core::ptr::read_volatile(&h.magic) };
        if magic != RING_MAGIC {
            return Err(RingError::BadHeader("magic not yet written"));
        }
        core::sync::atomic::fence(Ordering::Acquire);
        if !(1..=2).contains(&h.version) || h.slot_bytes as usize != SLOT_BYTES {
            return Err(RingError::BadHeader("unknown version or slot size"));
        }
        let cap = h.capacity;
        if !cap.is_power_of_two() || file_bytes(cap) > len {
            return Err(RingError::BadHeader(
                "capacity does not match the file size",
            ));
        }
        c.cap = cap;
        Ok(c)
    }

    /// The header.
    pub fn header(&self) -> &RingHeader {
        // SAFETY: the mapping is at least HEADER_BYTES long and lives as
        // long as self.
        unsafe { &*(self.base as *const RingHeader) }
    }

    /// Capacity in slots, as validated against the file size at open
    /// (the header's copy may be scribbled on later by the program).
    pub fn capacity(&self) -> u64 {
        self.cap
    }

    /// Events dropped by the producer so far.
    pub fn lost(&self) -> u64 {
        self.header().lost.load(Ordering::Relaxed)
    }

    /// Publishes the event the producer deferred and never published
    /// ([`Producer::defer`]): call only once its process is gone (the
    /// recorder does, for every ring still open, after the last process
    /// ended). `Some(true)`: published after the ring's last event;
    /// `Some(false)`: no room, counted in the ring's `lost`; `None`:
    /// nothing was deferred.
    pub fn salvage_deferred(&mut self) -> Option<bool> {
        let h = self.header();
        let write = h.write.load(Ordering::Acquire);
        if h.deferred_at.load(Ordering::Acquire) != write.wrapping_add(1) {
            return None;
        }
        let slot = h.deferred_slot();
        h.deferred_at.store(0, Ordering::Relaxed);
        let read = h.read.load(Ordering::Relaxed);
        if write.wrapping_sub(read) >= self.cap {
            h.lost.fetch_add(1, Ordering::Relaxed);
            return Some(false);
        }
        // SAFETY: the slot index is masked into the ring, which the
        // mapping holds whole (validated at open); the producer is gone, so
        // nothing else writes the slot or `write`.
        unsafe {
            let slots = self.base.add(HEADER_BYTES) as *mut Slot;
            slots
                .add((write & (self.cap - 1)) as usize)
                .write_volatile(slot);
        }
        h.write.store(write + 1, Ordering::Release);
        Some(true)
    }

    /// Slots consumed so far (`read`): after a copy, an event boundary.
    pub fn read_pos(&self) -> u64 {
        self.header().read.load(Ordering::Relaxed)
    }

    /// Records that the events of the slots before `pos` (a position
    /// [`Consumer::read_pos`] returned) are in the trace file
    /// ([`RingHeader::durable`]). Only ever moves forward.
    pub fn mark_durable(&self, pos: u64) {
        self.header().durable.fetch_max(pos, Ordering::Release);
    }

    /// For a recovery, once the ring's consumer died: moves `read` back
    /// to [`RingHeader::durable`], so that the events the dead consumer
    /// took and did not write are read again. Returns the slots to read
    /// again and the slots that cannot be (the producer overwrote them
    /// since: `write` is more than a capacity past `durable`; then `read`
    /// stays, an event boundary, and those slots are lost). Never before
    /// the ring's latest hand-over: what precedes it belongs to an
    /// earlier owner (counted as lost when not durable).
    pub fn rewind_to_durable(&mut self) -> (u64, u64) {
        let h = self.header();
        let write = h.write.load(Ordering::Acquire);
        let read = h.read.load(Ordering::Relaxed);
        let durable = h.durable.load(Ordering::Acquire).min(read);
        let handoff = h.handoff.load(Ordering::Acquire).saturating_sub(1);
        let target = durable.max(handoff.min(read));
        let lost_before_handoff = target - durable;
        if write.saturating_sub(target) > self.cap {
            return (0, read - durable);
        }
        h.read.store(target, Ordering::Release);
        (read - target, lost_before_handoff)
    }

    /// Slots published but not yet consumed.
    pub fn pending(&self) -> u64 {
        let h = self.header();
        h.write
            .load(Ordering::Acquire)
            .saturating_sub(h.read.load(Ordering::Relaxed))
    }

    /// Decodes every published event, calls `f` on each, and frees the
    /// slots. Returns (events decoded, slots found corrupt). A head that
    /// claims more slots than were published means a scribbled ring: the
    /// rest of the published region is skipped and counted as corrupt.
    pub fn drain(&mut self, mut f: impl FnMut(RawEvent)) -> (u64, u64) {
        // SAFETY: as in `header`: the mapping is at least HEADER_BYTES
        // long and lives as long as self. Not through `header()`, whose
        // borrow of all of self would forbid updating `self.last` below.
        let h = unsafe { &*(self.base as *const RingHeader) };
        let write = h.write.load(Ordering::Acquire);
        let mut read = h.read.load(Ordering::Relaxed);
        let mask = self.cap - 1;
        // SAFETY: slots follow the header page inside the mapping.
        let slots = unsafe { self.base.add(HEADER_BYTES) as *const Slot };
        let (mut n, mut corrupt) = (0u64, 0u64);
        if write.wrapping_sub(read) > self.cap {
            // The producer cannot get more than `cap` ahead: corrupt header.
            corrupt = write.wrapping_sub(read);
            read = write;
            self.last.clear();
        }
        // Up to a pending hand-over only (see Consumer::take_handoff).
        let write = self.copy_limit(read, write);
        let mut buf = [Slot::default(); 1 + 1 + MAX_FRAMES / 4];
        while read < write {
            // SAFETY: masked index within the ring; slot memory is plain data.
            let head = Head::from_slot(unsafe { &*slots.add((read & mask) as usize) });
            let k = head.slots() as u64;
            if head.nframes as usize > MAX_FRAMES || read + k > write {
                corrupt += write - read;
                read = write;
                // The skipped events may hold the path the next ones refer to.
                self.last.clear();
                break;
            }
            for i in 0..k {
                // SAFETY: masked index inside the ring; slot memory is plain data.
                buf[i as usize] = unsafe { *slots.add(((read + i) & mask) as usize) };
            }
            if let Some(ev) = RawEvent::decode_with(&buf[..k as usize], &mut self.last) {
                f(ev);
                n += 1;
            }
            read += k;
        }
        h.read.store(read, Ordering::Release);
        wake_producer(h);
        (n, corrupt)
    }
}

impl Consumer {
    /// Appends every published slot to `out` with one bulk copy (two at
    /// the wrap-around) and frees them in the ring. Returns (slots copied,
    /// slots found corrupt).
    ///
    /// For a consumer that decodes elsewhere (the recorder decodes on
    /// another thread): [`Consumer::drain`] costs ~20 ns per event in
    /// per-event decoding, a bulk copy ~3, and the ring is freed sooner.
    /// The copied region always ends at an event boundary, because the
    /// producer publishes whole events; decode it with
    /// [`Head::slots`] / [`RawEvent::decode`], treating a head that claims
    /// more slots than remain as corruption.
    pub fn copy_out(&mut self, out: &mut Vec<Slot>) -> (u64, u64) {
        let h = self.header();
        let write = h.write.load(Ordering::Acquire);
        let read = h.read.load(Ordering::Relaxed);
        let n = write.wrapping_sub(read);
        if n == 0 {
            return (0, 0);
        }
        if n > self.cap {
            // The producer cannot get more than `cap` ahead: corrupt header.
            h.read.store(write, Ordering::Release);
            return (0, n);
        }
        // Up to a pending hand-over only (see Consumer::take_handoff).
        let write = self.copy_limit(read, write);
        let n = write - read;
        if n == 0 {
            return (0, 0);
        }
        // SAFETY: slots follow the header page inside the mapping; the
        // region [read, write) is published and not written by the producer
        // until `read` moves past it.
        let slots = unsafe { self.base.add(HEADER_BYTES) as *const Slot };
        let mask = self.cap - 1;
        let start = (read & mask) as usize;
        let first = (n as usize).min(self.cap as usize - start);
        out.reserve(n as usize);
        // SAFETY: [start, start+first) and [0, n-first) lie inside the ring;
        // that region is published and not written by the producer until
        // `read` moves past it.
        unsafe {
            out.extend_from_slice(core::slice::from_raw_parts(slots.add(start), first));
            out.extend_from_slice(core::slice::from_raw_parts(slots, n as usize - first));
        }
        h.read.store(write, Ordering::Release);
        wake_producer(h);
        (n, 0)
    }
}

impl Consumer {
    /// [`Consumer::copy_out`] into caller-provided memory: copies every
    /// published slot to the start of `dst` and frees them in the ring.
    /// Returns (slots copied, slots found corrupt). A `dst` shorter than
    /// what is published gets the events that fit whole (the rest stays
    /// in the ring for the next call).
    ///
    /// For a consumer that manages its own buffers (the recorder backs
    /// them with huge pages, which a `Vec` cannot ask for).
    pub fn copy_out_to(&mut self, dst: &mut [Slot]) -> (u64, u64) {
        let h = self.header();
        let write = h.write.load(Ordering::Acquire);
        let read = h.read.load(Ordering::Relaxed);
        let n = write.wrapping_sub(read);
        if n == 0 {
            return (0, 0);
        }
        if n > self.cap {
            h.read.store(write, Ordering::Release);
            return (0, n);
        }
        // Up to a pending hand-over only (see Consumer::take_handoff).
        let n = self.copy_limit(read, write) - read;
        if n == 0 {
            return (0, 0);
        }
        // SAFETY: the slots follow the header page inside the mapping.
        let slots = unsafe { self.base.add(HEADER_BYTES) as *const Slot };
        let mask = self.cap - 1;
        let n = if n > dst.len() as u64 {
            // Only what fits, cut at an event boundary: walk the heads
            // (most events are one slot). A head claiming more slots than
            // an event can have means a scribbled ring: stop there and let
            // the next call report it.
            let mut k = 0u64;
            let room = dst.len() as u64;
            while k < n {
                // SAFETY: masked index inside the ring.
                let slot = unsafe { &*slots.add(((read + k) & mask) as usize) };
                // Most events are one slot: no frames and no extension
                // flags (`Head::nframes` and `Head::xflags`, bytes 26-27,
                // bits 16-31 of the last word). One load and compare for
                // them, instead of decoding the head: this walk ran over
                // every event a busy thread wrote (a batch holds fewer
                // slots than its ring), 20 instructions an event.
                if (slot.0[3] >> 16) & 0xffff == 0 {
                    if k + 1 > room {
                        break;
                    }
                    k += 1;
                    continue;
                }
                let head = Head::from_slot(slot);
                let len = head.slots() as u64;
                if head.nframes as usize > MAX_FRAMES || k + len > room {
                    break;
                }
                k += len;
            }
            if k == 0 {
                return (0, 0);
            }
            k
        } else {
            n
        };
        let write = read + n;
        let start = (read & mask) as usize;
        let first = (n as usize).min(self.cap as usize - start);
        // SAFETY: as in copy_out; `dst` holds at least `n` slots.
        unsafe {
            core::ptr::copy_nonoverlapping(slots.add(start), dst.as_mut_ptr(), first);
            core::ptr::copy_nonoverlapping(slots, dst.as_mut_ptr().add(first), n as usize - first);
        }
        h.read.store(write, Ordering::Release);
        wake_producer(h);
        (n, 0)
    }
}

/// A ring's change of owner, as the recorder reads it from an
/// [`OP_RING_HANDOFF`] event (see [`Producer::hand_over`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handoff {
    /// The new owner's OS thread id.
    pub tid: u32,
    /// The thread that created it.
    pub parent_tid: u32,
    /// When it started (ticks).
    pub start_tsc: u64,
    /// Its initial name, NUL-padded.
    pub name: [u8; 16],
    /// The previous owner's exit stamp (0: none).
    pub prev_end_tsc: u64,
    /// The ring's `lost` count at the hand-over: every loss up to it is
    /// the previous owners'.
    pub lost_at: u64,
}

impl Consumer {
    /// Where a copy from `read` must stop: `write`, or the slot of a
    /// pending hand-over event between them ([`RingHeader::handoff`]):
    /// what precedes it is the previous owner's, and its owner change must
    /// be handled ([`Consumer::take_handoff`]) before anything after it is
    /// copied. Loaded after `write` (Acquire), the field is at least as new
    /// as the event published; a value at or beyond `write` belongs to an
    /// event not yet published (or never: a failed hand-over) and is
    /// ignored. At most one hand-over is pending: a ring is handed on only
    /// once the consumer is past the previous one.
    fn copy_limit(&self, read: u64, write: u64) -> u64 {
        let at = self.header().handoff.load(Ordering::Acquire);
        if at != 0 && read < at && at - 1 < write {
            at - 1
        } else {
            write
        }
    }

    /// Consumes the hand-over event at the front of the ring, if there
    /// is one: what follows belongs to the new owner it names.
    pub fn take_handoff(&mut self) -> Option<Handoff> {
        let h = self.header();
        let write = h.write.load(Ordering::Acquire);
        let read = h.read.load(Ordering::Relaxed);
        let at = h.handoff.load(Ordering::Acquire);
        if at == 0 || read != at - 1 || write.wrapping_sub(read) > self.cap || read + 3 > write {
            return None;
        }
        let mask = self.cap - 1;
        // SAFETY: the slots follow the header page inside the mapping.
        let slots = unsafe { self.base.add(HEADER_BYTES) as *const Slot };
        // SAFETY: masked index of a published slot (read + 3 <= write).
        let head = Head::from_slot(unsafe { &*slots.add((read & mask) as usize) });
        let k = head.slots() as u64;
        if head.op != OP_RING_HANDOFF || k != 3 || head.nframes != 2 || head.xflags & XF_ARGS == 0 {
            // Not what hand_over writes: a scribbled ring. Leave it to the
            // copy, which counts it as corrupt.
            return None;
        }
        // SAFETY: masked indices of published slots (read + 3 <= write).
        let (args, frames) = unsafe {
            (
                *slots.add(((read + 1) & mask) as usize),
                *slots.add(((read + 2) & mask) as usize),
            )
        };
        let mut name = [0u8; 16];
        name[..8].copy_from_slice(&frames.0[0].to_le_bytes());
        name[8..].copy_from_slice(&frames.0[1].to_le_bytes());
        h.read.store(read + k, Ordering::Release);
        wake_producer(h);
        // What follows is the new owner's, whose producer starts with no
        // last path (`Producer::hand_over`).
        self.last.clear();
        Some(Handoff {
            tid: head.aux,
            parent_tid: args.0[0] as u32,
            start_tsc: head.tsc,
            name,
            prev_end_tsc: head.addr,
            lost_at: head.site,
        })
    }

    /// If the ring's thread was joined and the ring sits in the program's
    /// free list with every event consumed: (its exit stamp, the ring's
    /// loss count, all of it the finished owner's). The recorder then ends that thread
    /// without waiting for a new owner.
    pub fn vacated(&self) -> Option<(u64, u64)> {
        let h = self.header();
        // Order matters: pooled (the owner is gone), then its final loss
        // count and exit stamp, then nothing pending (no new owner has
        // written yet: its hand-over is its first write, and it clears
        // the stamp only after it, so both values are the old owner's).
        if h.pool.load(Ordering::Acquire) != POOL_POOLED {
            return None;
        }
        let lost = h.lost.load(Ordering::Acquire);
        let end = h.end_tsc.load(Ordering::Acquire);
        (self.pending() == 0).then_some((end, lost))
    }

    /// Claims an exited thread's ring for closing: succeeds only if the
    /// program has not put it in its free list, and from then on it never
    /// will (the joiner sees it closed and unmaps it). A new owner that
    /// took the ring over just before is seen (its hand-over event is
    /// pending, or its `end_tsc` is clear) and the claim is undone.
    pub fn try_close(&self) -> bool {
        let h = self.header();
        if h.pool
            .compare_exchange(POOL_OPEN, POOL_CLOSED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        if self.pending() == 0 && h.end_tsc.load(Ordering::Acquire) != 0 {
            return true;
        }
        h.pool.store(POOL_OPEN, Ordering::Release);
        false
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // SAFETY: unmapping what `open` mapped.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh ring of `kib` KiB with its producer: the file, its mapping
    /// (never unmapped: it outlives the producer) and the producer.
    fn fresh_ring(kib: u64) -> (std::path::PathBuf, *mut u8, Producer) {
        let (path, base, len) = temp_ring(kib);
        // SAFETY: `base` is a fresh, zero-filled mapping of `len` bytes
        // (temp_ring) that is never unmapped.
        let p = unsafe { Producer::init(base, len, &RingIdentity::default()) }.unwrap();
        (path, base, p)
    }

    fn temp_ring(kib: u64) -> (std::path::PathBuf, *mut u8, usize) {
        use std::os::unix::io::AsRawFd;
        let path = std::env::temp_dir().join(format!(
            "lsring-test-{}-{kib}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let len = file_bytes(capacity_for_kib(kib));
        f.set_len(len as u64).unwrap();
        // SAFETY: mapping a file we just created and sized to `len`.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        (path, p as *mut u8, len)
    }

    #[test]
    fn events_cross_processes_in_order_with_args_and_frames() {
        let (path, base, len) = temp_ring(64);
        let id = RingIdentity {
            pid: 1,
            tid: 2,
            start_tsc: 5,
            ..Default::default()
        };
        // SAFETY: `base` is a fresh, zero-filled mapping of `len` bytes (temp_ring) that outlives `p`.
        let mut p = unsafe { Producer::init(base, len, &id) }.unwrap();
        let mut c = Consumer::open(&path).unwrap();
        let mut got = Vec::new();
        for i in 0..10_000u64 {
            let head = Head {
                tsc: i,
                addr: 0x1000 + i % 3,
                site: 7,
                op: 1,
                ..Head::default()
            };
            let frames: Vec<u64> = (0..(i % 9)).collect();
            let args = i.is_multiple_of(2).then_some((i, !i));
            assert!(p.push(head, args, &frames));
            if i % 97 == 0 {
                c.drain(|e| got.push(e));
            }
        }
        c.drain(|e| got.push(e));
        assert_eq!(got.len(), 10_000);
        for (i, e) in got.iter().enumerate() {
            let i = i as u64;
            assert_eq!(e.head.tsc, i);
            assert_eq!(e.frames.len() as u64, i % 9);
            // Whole slots and the padded tail carry the frames in order.
            assert!(e.frames.iter().copied().eq(0..i % 9), "frames of event {i}");
            if i.is_multiple_of(2) {
                assert_eq!((e.arg, e.arg2), (i, !i));
            }
        }
        assert_eq!(c.lost(), 0);
        std::fs::remove_file(path).unwrap();
    }

    /// A deferred event: taken back it is the same event and the header
    /// no longer offers it; left behind by a producer that is gone, the
    /// consumer publishes it after the ring's last event, once; with the
    /// ring full it is counted as lost, never silently dropped.
    #[test]
    fn a_deferred_event_is_taken_back_or_salvaged_once() {
        let (path, _, mut p) = fresh_ring(2);
        let mut c = Consumer::open(&path).unwrap();
        let ev = |tsc: u64| Head {
            tsc,
            addr: 0x40,
            site: 9,
            op: 3,
            flags: 2,
            aux: 7,
            ..Head::default()
        };
        assert_eq!(c.salvage_deferred(), None, "nothing deferred yet");
        assert!(p.push(ev(1), None, &[]));
        assert!(p.defer(ev(2)));
        assert!(p.has_deferred());
        assert!(!p.defer(ev(3)), "one deferred event at a time");
        let back = p.take_deferred().unwrap();
        assert_eq!(
            (back.tsc, back.addr, back.site, back.op, back.flags, back.aux),
            (2, 0x40, 9, 3, 2, 7)
        );
        assert!(!p.has_deferred());
        assert_eq!(
            c.salvage_deferred(),
            None,
            "taken back: not the consumer's to publish"
        );
        assert!(p.push(back, None, &[]));
        // Published where it stands: the same slot, once.
        assert!(!p.publish_deferred(), "nothing deferred");
        assert!(p.defer(ev(4)));
        assert!(p.publish_deferred());
        assert!(!p.has_deferred());
        assert_eq!(c.salvage_deferred(), None, "published: not the consumer's");
        // Deferred and never published: the producer is gone.
        assert!(p.defer(ev(3)));
        assert_eq!(c.salvage_deferred(), Some(true));
        assert_eq!(c.salvage_deferred(), None, "published once");
        let mut got = Vec::new();
        c.drain(|e| {
            got.push((
                e.head.tsc,
                e.head.addr,
                e.head.site,
                e.head.op,
                e.head.flags,
                e.arg,
            ))
        });
        let want = |t| (t, 0x40, 9, 3, 2, 7);
        assert_eq!(got, [want(1), want(2), want(4), want(3)]);
        std::fs::remove_file(path).unwrap();
        // A full ring: counted as lost.
        let (path, _, mut p) = fresh_ring(4);
        let mut c = Consumer::open(&path).unwrap();
        for i in 0..c.capacity() {
            assert!(p.try_push(ev(10 + i), None, &[]));
        }
        assert!(p.defer(ev(99)));
        assert!(!p.publish_deferred(), "no room: left deferred");
        assert!(p.has_deferred());
        assert_eq!(c.lost(), 0);
        assert_eq!(c.salvage_deferred(), Some(false));
        assert_eq!(c.lost(), 1);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn copy_out_across_the_wrap_matches_drain() {
        let (path, _, mut p) = fresh_ring(2);
        let mut c = Consumer::open(&path).unwrap();
        let mut slots = Vec::new();
        let mut next = 0u64;
        for round in 0..50u64 {
            for _ in 0..(round % 7) * 2 {
                let head = Head {
                    tsc: next,
                    ..Head::default()
                };
                let frames: Vec<u64> = (0..next % 6).collect();
                assert!(p.push(head, next.is_multiple_of(3).then_some((next, 1)), &frames));
                next += 1;
            }
            c.copy_out(&mut slots);
        }
        let mut i = 0;
        let mut want = 0;
        while i < slots.len() {
            let e = RawEvent::decode(&slots[i..]).unwrap();
            assert_eq!(e.head.tsc, want);
            assert_eq!(e.frames.len() as u64, want % 6);
            i += e.head.slots();
            want += 1;
        }
        assert_eq!(want, next);
        // copy_out_to gives the same slots as copy_out, and refuses a
        // buffer smaller than the ring.
        let cap = c.capacity() as usize;
        for i in 0..cap as u64 + 5 {
            if !p.push(
                Head {
                    tsc: i,
                    ..Head::default()
                },
                None,
                &[],
            ) {
                let mut v = Vec::new();
                c.copy_out(&mut v);
                assert!(p.push(
                    Head {
                        tsc: i,
                        ..Head::default()
                    },
                    None,
                    &[]
                ));
            }
        }
        let pending = c.pending();
        assert!(pending > 1);
        let mut small = vec![Slot::default(); pending as usize - 1];
        assert_eq!(c.copy_out_to(&mut small), (pending - 1, 0));
        assert_eq!(c.pending(), 1);
        let mut one = [Slot::default()];
        assert_eq!(c.copy_out_to(&mut one), (1, 0));
        let first_part = Head::from_slot(&small[0]).tsc;
        for i in 0..pending {
            assert!(p.push(
                Head {
                    tsc: first_part + pending + i,
                    ..Head::default()
                },
                None,
                &[]
            ));
        }
        let mut big = vec![Slot::default(); cap];
        assert_eq!(c.copy_out_to(&mut big), (pending, 0));
        assert_eq!(c.pending(), 0);
        let tscs: Vec<u64> = big[..pending as usize]
            .iter()
            .map(|s| Head::from_slot(s).tsc)
            .collect();
        let first = tscs[0];
        assert_eq!(tscs, (first..first + pending).collect::<Vec<_>>());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn copy_out_to_a_short_buffer_cuts_at_an_event_boundary() {
        let (path, _, mut p) = fresh_ring(64);
        let mut c = Consumer::open(&path).unwrap();
        // Events of 1, 2 and 3 slots (0, 4 and 8 frames).
        for i in 0..30u64 {
            let frames: Vec<u64> = (0..(i % 3) * 4).collect();
            let head = Head {
                tsc: i,
                ..Head::default()
            };
            assert!(p.push(head, None, &frames));
        }
        let mut got = Vec::new();
        let mut buf = [Slot::default(); 4];
        loop {
            let (n, corrupt) = c.copy_out_to(&mut buf);
            assert_eq!(corrupt, 0);
            if n == 0 {
                break;
            }
            let mut i = 0;
            while i < n as usize {
                let e = RawEvent::decode(&buf[i..n as usize]).expect("whole events only");
                i += e.head.slots();
                got.push(e.head.tsc);
            }
        }
        assert_eq!(got, (0..30).collect::<Vec<_>>());
        assert_eq!(c.pending(), 0);
        std::fs::remove_file(path).unwrap();
    }

    /// Call paths that repeat after their site are written once
    /// (`XF_PATH_TAIL`) and read back whole, in every case the producer
    /// meets: a new site under the same tail, another tail, a path whose
    /// first frame is not the site, a one-frame path, a pseudo-op whose
    /// "frames" are a payload, args or none, and events dropped by a full
    /// ring (a tail never refers to a path that was not written).
    #[test]
    fn a_repeated_path_is_written_once_and_read_back_whole() {
        let (path, _, mut p) = fresh_ring(4);
        let mut c = Consumer::open(&path).unwrap();
        let tails: [&[u64]; 4] = [
            &[0xa, 0xb, 0xc],
            &[0xa, 0xb],
            &[0x1, 0x2, 0x3, 0x4, 0x5, 0x6],
            &[],
        ];
        let (mut want, mut got) = (Vec::new(), Vec::new());
        // What the producer last wrote in full, as the model sees it.
        let mut last: Option<Vec<u64>> = None;
        let (mut tail_events, mut slots_model) = (0u64, 0u64);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let site = 0x100 + x % 3;
            let tail = tails[(x >> 8) as usize % if x.is_multiple_of(11) { 4 } else { 2 }];
            let first = if x.is_multiple_of(13) { 0x999 } else { site };
            let frames: Vec<u64> = core::iter::once(first)
                .chain(tail.iter().copied())
                .collect();
            let op = if x.is_multiple_of(17) {
                OP_THREAD_NAME
            } else {
                1
            };
            let args = x.is_multiple_of(5).then_some((i, !i));
            let head = Head {
                tsc: i,
                site,
                op,
                ..Head::default()
            };
            // The room check before the push: a drop must leave `last`.
            let fold = op < OP_THREAD_NAME
                && first == site
                && (frames.len() == 1
                    || last
                        .as_deref()
                        .is_some_and(|l| l.len() == frames.len() && l[1..] == frames[1..]));
            let k = 1
                + u64::from(args.is_some())
                + if fold {
                    0
                } else {
                    frames.len().div_ceil(4) as u64
                };
            if p.push(head, args, &frames) {
                want.push((i, frames.clone(), args));
                slots_model += k;
                if fold {
                    tail_events += 1;
                } else if op < OP_THREAD_NAME {
                    last = Some(frames);
                }
            }
            // Drained now and then: about one pass in three finds the
            // 128-slot ring full.
            if x.is_multiple_of(83) {
                c.drain(|e| got.push(e));
            }
        }
        c.drain(|e| got.push(e));
        assert!(
            c.lost() > 0,
            "the ring never filled: the drop case was not met"
        );
        assert!(tail_events > 2_000, "only {tail_events} tails");
        assert_eq!(published(&p), slots_model);
        assert_eq!(got.len(), want.len());
        for (e, (i, frames, args)) in got.iter().zip(&want) {
            assert_eq!(e.head.tsc, *i);
            assert_eq!(&e.frames, frames, "path of event {i}");
            if let Some(a) = args {
                assert_eq!((e.arg, e.arg2), *a);
            }
        }
        std::fs::remove_file(path).unwrap();
    }

    /// Events skipped as corrupt may hold the path a later tail refers
    /// to: the reader forgets its last path and leaves such a tail
    /// without one, never with the path before the gap.
    #[test]
    fn a_tail_after_corrupt_slots_gets_no_path_not_a_wrong_one() {
        let (path, base, mut p) = fresh_ring(4);
        let mut c = Consumer::open(&path).unwrap();
        let head = |site| Head {
            site,
            op: 1,
            ..Head::default()
        };
        assert!(p.push(head(0xa), None, &[0xa, 1, 2]));
        let mut got = Vec::new();
        c.drain(|e| got.push(e.frames));
        // Written in full (another tail), then scribbled on by the
        // program: its head claims more frames than an event can have.
        assert!(p.push(head(0xb), None, &[0xb, 3, 4]));
        // SAFETY: slot 2 (after the first event's head and frame slot)
        // lies inside the mapping's slot area; nothing else writes it now.
        unsafe {
            let slot = base.add(HEADER_BYTES + 2 * SLOT_BYTES) as *mut Slot;
            let mut h = Head::from_slot(&*slot);
            h.nframes = 200;
            slot.write(h.pack());
        }
        let (_, corrupt) = c.drain(|e| got.push(e.frames));
        assert!(corrupt > 0);
        // The producer knows [0xb, 3, 4] as its last path: a tail.
        assert!(p.push(head(0xc), None, &[0xc, 3, 4]));
        assert_eq!(published(&p), 2 + 2 + 1);
        c.drain(|e| got.push(e.frames));
        assert_eq!(got, vec![vec![0xa, 1, 2], vec![]]);
        std::fs::remove_file(path).unwrap();
    }

    /// A program that scribbles on its ring cannot make the reader panic
    /// or read outside the published slots: random words (heads with
    /// random frame counts, args and path-tail flags among them) are
    /// decoded or counted as corrupt, every published slot accounted for.
    #[test]
    fn random_slots_are_decoded_or_counted_never_a_panic() {
        let (path, base, mut p) = fresh_ring(4);
        let mut c = Consumer::open(&path).unwrap();
        let cap = c.capacity();
        let mut x = 0x853c_49e6_748f_ea9bu64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2_000u64 {
            let n = 1 + next() % (cap / 2);
            let w = published(&p);
            for k in 0..n {
                let mut s = Slot([next(), next(), next(), next()]);
                // Plausible heads often enough to reach the decoder:
                // small frame counts, known flags.
                if next() % 2 == 0 {
                    let mut h = Head::from_slot(&s);
                    h.nframes = (next() % 12) as u8;
                    h.xflags = (next() % 4) as u8;
                    h.op = (next() % 4) as u8;
                    s = h.pack();
                }
                // SAFETY: a masked index inside the ring's slot area; the
                // test is the only writer.
                unsafe {
                    let at = base.add(HEADER_BYTES + ((w + k) % cap) as usize * SLOT_BYTES);
                    (at as *mut Slot).write(s);
                }
            }
            p.header()
                .expect("attached")
                .write
                .store(w + n, Ordering::Release);
            p = if round % 2 == 0 {
                let (events, corrupt) = c.drain(|e| assert!(e.frames.len() <= MAX_FRAMES));
                assert!(
                    events + corrupt <= n,
                    "round {round}: {events} + {corrupt} > {n}"
                );
                // SAFETY: as above; the next round writes after what was read.
                unsafe { Producer::resume(base) }.unwrap()
            } else {
                let mut v = Vec::new();
                let (copied, corrupt) = c.copy_out(&mut v);
                assert_eq!(copied + corrupt, n);
                // SAFETY: as above.
                unsafe { Producer::resume(base) }.unwrap()
            };
            assert_eq!(
                c.pending(),
                0,
                "round {round}: everything published was consumed"
            );
        }
        std::fs::remove_file(path).unwrap();
    }

    /// A recycled ring's new owner writes its first path in full: the
    /// previous owner's last path is not its own, and the recorder reads
    /// the new owner's events with no last path.
    #[test]
    fn a_new_owner_of_a_ring_writes_its_first_path_in_full() {
        let (path, _, mut p) = fresh_ring(4);
        let head = Head {
            site: 0x10,
            op: 1,
            ..Head::default()
        };
        let frames = [0x10, 0x20, 0x30];
        assert!(p.push(head, None, &frames));
        assert!(p.push(head, None, &frames));
        assert_eq!(published(&p), 2 + 1, "the second path is its tail");
        assert!(p.hand_over(&RingIdentity::default()));
        let before = published(&p);
        assert!(p.push(head, None, &frames));
        assert_eq!(published(&p) - before, 2, "a head and its path in full");
        std::fs::remove_file(path).unwrap();
    }

    /// Slots `p` has published (its header's `write`).
    fn published(p: &Producer) -> u64 {
        p.header().expect("attached").write.load(Ordering::Relaxed)
    }

    #[test]
    fn full_ring_drops_and_counts_never_blocks() {
        let (path, _, mut p) = fresh_ring(2);
        let cap = capacity_for_kib(2);
        let mut ok = 0;
        for i in 0..cap + 10 {
            if p.push(
                Head {
                    tsc: i,
                    ..Head::default()
                },
                None,
                &[],
            ) {
                ok += 1;
            }
        }
        assert_eq!(ok, cap);
        let mut c = Consumer::open(&path).unwrap();
        assert_eq!(c.lost(), 10);
        let (n, corrupt) = c.drain(|_| {});
        assert_eq!((n, corrupt), (cap, 0));
        assert!(
            p.push(Head::default(), None, &[]),
            "room again after the drain"
        );
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn long_overflow_backs_off_counts_every_drop_and_recovers() {
        let (path, _, mut p) = fresh_ring(2);
        let cap = capacity_for_kib(2);
        let mut failed = 0u64;
        for _ in 0..cap + 100_000 {
            if !p.push(Head::default(), None, &[]) {
                failed += 1;
            }
        }
        assert_eq!(failed, 100_000);
        let mut c = Consumer::open(&path).unwrap();
        assert_eq!(c.lost(), failed, "every drop counted, backing off or not");
        assert!(
            p.skip > 0 && p.skip <= MAX_BACKOFF,
            "backing off: {}",
            p.skip
        );
        assert_eq!(c.drain(|_| {}), (cap, 0));
        // Room again: the producer sees it within one back-off period.
        let mut tries = 0u32;
        while !p.push(Head::default(), None, &[]) {
            tries += 1;
            assert!(tries <= MAX_BACKOFF, "never looked at `read` again");
        }
        assert_eq!(c.lost(), failed + u64::from(tries));
        // After a success the next overflow starts with eager reloads.
        assert_eq!((p.skip, p.backoff), (0, 0));
        std::fs::remove_file(path).unwrap();
    }

    /// A push that waited for the consumer hands the wait to its owner
    /// once (the thread state adds it to the time its run-queue delay
    /// samples report), the same ticks the header counts.
    #[test]
    fn a_wait_for_room_is_handed_to_the_owner_once() {
        let (path, _, mut p) = fresh_ring(2);
        p.set_wait_when_full(true);
        let cap = p.capacity();
        for i in 0..cap {
            assert!(p.push(
                Head {
                    tsc: i,
                    ..Head::default()
                },
                None,
                &[]
            ));
        }
        assert_eq!(p.take_waited(), 0, "no wait while there was room");
        let mut c = Consumer::open(&path).unwrap();
        std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(30));
                assert_eq!(c.drain(|_| {}), (cap, 0));
            });
            assert!(p.push(Head::default(), None, &[]), "waited, not dropped");
        });
        let h = p.header().expect("attached");
        assert_eq!(h.full_waits.load(Ordering::Relaxed), 1);
        let ticks = h.full_wait_ticks.load(Ordering::Relaxed);
        assert!(ticks > 0);
        assert_eq!(p.take_waited(), ticks, "the header's count, handed over");
        assert_eq!(p.take_waited(), 0, "handed over once");
        std::fs::remove_file(path).unwrap();
    }

    /// The drain sleeps until a ring reaches a quarter full: events below
    /// the mark leave it asleep, the event that reaches it wakes it, and
    /// the producer looks at the consumer's `read` only at its marks.
    #[test]
    fn a_ring_reaching_a_quarter_wakes_the_sleeping_drain_and_not_before() {
        use std::sync::atomic::Ordering::SeqCst;
        let (path, _, mut p) = fresh_ring(64);
        let w = SessionWake {
            seq: AtomicU32::new(0),
            sleeping: AtomicU32::new(0),
        };
        // SAFETY: `w` outlives the producer's use below.
        unsafe { p.set_wake(&w) };
        let mark = wake_mark(p.capacity());
        let ev = |tsc: u64| Head {
            tsc,
            op: 3,
            ..Head::default()
        };
        std::thread::scope(|s| {
            let drain = s.spawn(|| {
                let t = std::time::Instant::now();
                let woken = drain_sleep(&w, std::time::Duration::from_secs(60), || false);
                (woken, t.elapsed())
            });
            while w.sleeping.load(SeqCst) == 0 {
                std::thread::yield_now();
            }
            for i in 0..mark - 1 {
                assert!(p.push(ev(i), None, &[]));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert_eq!(w.seq.load(SeqCst), 0, "below the mark nobody was woken");
            assert_eq!(w.sleeping.load(SeqCst), 1, "the drain still sleeps");
            assert!(p.push(ev(mark), None, &[]));
            let (woken, took) = drain.join().unwrap();
            assert!(woken, "woken by the producer, not the timeout");
            assert!(took < std::time::Duration::from_secs(30), "{took:?}");
        });
        assert_eq!(w.seq.load(SeqCst), 1, "one wake");
        // The drain is awake now: more events make no system call.
        for i in 0..mark {
            assert!(p.push(ev(i), None, &[]));
        }
        assert_eq!(w.seq.load(SeqCst), 1);
        std::fs::remove_file(path).unwrap();
    }
}
