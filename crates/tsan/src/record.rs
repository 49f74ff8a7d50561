//! Turning runtime observations into trace events: atomics, heap blocks,
//! and the values of written locations at release.

use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use lockscope_format::{repeat, Op};
use lockscope_ring::raw::{Head, MAX_FRAMES};

use crate::atomic::{CAS_FAILED, CAS_WEAK};
use crate::{backend, config, tls};

/// 0 = not decided yet, 1 = accesses inside critical sections only,
/// 2 = every access (lockset on request), 3 = not recording.
static MODE: AtomicU8 = AtomicU8::new(0);

/// Recording mode accesses: only inside critical sections.
pub const MODE_CS: u8 = 1;
/// Recording mode: every access.
pub const MODE_ALL: u8 = 2;
/// Not recording (outside `lockscope record`): every callback only does
/// what the program asked for.
pub const MODE_OFF: u8 = 3;

/// Set while [`decide`] runs: the capture layer's initialization
/// allocates (pthread_getattr_np reads /proc/self/maps), and that malloc
/// comes back here.
static DECIDING: AtomicBool = AtomicBool::new(false);

#[cold]
fn decide() -> u8 {
    if DECIDING.swap(true, Ordering::Acquire) {
        // Re-entered from inside the capture layer's initialization (or
        // raced by another thread during it): not recording yet, and not
        // cached, so the next call decides for real.
        return MODE_OFF;
    }
    let m = if !backend::recording() {
        MODE_OFF
    } else if config::all_accesses() {
        MODE_ALL
    } else {
        MODE_CS
    };
    MODE.store(m, Ordering::Relaxed);
    DECIDING.store(false, Ordering::Release);
    m
}

/// The recording mode, decided on first use (the capture layer must be
/// able to tell whether a session exists, which it knows after its own
/// lazy initialization).
#[inline(always)]
pub fn mode() -> u8 {
    match MODE.load(Ordering::Relaxed) {
        0 => decide(),
        m => m,
    }
}

/// The recording mode if already decided, else [`MODE_OFF`]. Used by the
/// malloc hooks, which may run before any constructor (inside the dynamic
/// loader or another library's initialization), where starting the capture
/// layer is not safe.
#[inline(always)]
pub fn mode_if_decided() -> u8 {
    match MODE.load(Ordering::Relaxed) {
        0 => MODE_OFF,
        m => m,
    }
}

/// Emits `head` with the call path ending at `pc`, under the re-entry
/// guard (the capture layer may allocate while it attaches a ring).
#[inline]
fn emit_with_path(t: &tls::Tls, head: Head, args: Option<(u64, u64)>, limit: usize) {
    let mut fr = [MaybeUninit::<u64>::uninit(); MAX_FRAMES];
    let frames = tls::frames_into(t, head.site, &mut fr[..limit.min(MAX_FRAMES)]);
    t.guard.set(true);
    backend::emit(head, args, frames);
    t.guard.set(false);
}

/// Tries to fold an access into the thread's current run: true if it is
/// identical to the last one recorded (and counted as a repeat), false if
/// it must be recorded (the run is then flushed and this access starts
/// the next one). Only when coalescing (the default; not with
/// `LOCKSCOPE_COALESCE=0`).
#[inline]
pub fn fold(t: &tls::Tls, addr: u64, key: u64, value: u64, site: u64, held: u32) -> bool {
    let mut r = t.run.get();
    // The calling context is: two calls that store to one location in a
    // row (`init(); reset();`) are a dead write of the first call killed
    // by the second, not a repeat of the first. Its tag (shadow-stack
    // depth and innermost return address, hashed to 24 bits) goes in
    // the key's unused bits 40..64; `flush_run_in` reads bits 0..36.
    let key = key | context_tag(t) << 40;
    // The pc is not part of the identity: an unrolled loop makes the same
    // access from several pcs. The repeats are attributed to the first.
    if r.addr == addr && r.key == key && r.value == value && r.held == held {
        r.count += 1;
        r.last = lockscope_ring::tsc::now();
        t.run.set(r);
        return true;
    }
    // A run with no repeat has nothing to emit: it is only replaced (the
    // common case when accesses alternate between locations).
    if r.count != 0 {
        flush_run_in(t);
    }
    t.run.set(tls::Run {
        addr,
        key,
        value,
        site,
        held,
        count: 0,
        last: 0,
    });
    false
}

/// 24-bit tag of the thread's current call: shadow-stack depth and the
/// return address of the innermost instrumented frame.
#[inline(always)]
fn context_tag(t: &tls::Tls) -> u64 {
    let depth = t.depth.get() as usize;
    let top = if depth == 0 || depth > tls::STACK_CAP {
        0
    } else {
        // SAFETY: only this thread touches its stack array; a plain read.
        unsafe { (*t.stack.get())[depth - 1] }
    };
    (top ^ (depth as u64).rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40
}

/// Emits the pending repeats of the thread's run, if any, as one
/// [`Op::AccessRepeat`] stamped with the last repeat's time, and ends the
/// run. Called before anything else the thread records: the runtime's own
/// events, and the synchronization calls wrapped in [`crate::wrap`], so
/// that the repeats stay before them in the thread's stream.
#[inline]
pub fn flush_run_in(t: &tls::Tls) {
    let r = t.run.get();
    if r.addr == 0 {
        return;
    }
    t.run.set(tls::Run::default());
    if r.count == 0 || t.guard.get() {
        return;
    }
    emit_repeats(t, r);
}

/// The [`Op::AccessRepeat`] of a run with repeats.
#[cold]
#[inline(never)]
fn emit_repeats(t: &tls::Tls, r: tls::Run) {
    let size = r.key & 0xffff_ffff;
    let head = Head {
        tsc: r.last,
        addr: r.addr,
        site: r.site,
        op: Op::AccessRepeat as u8,
        flags: if size <= 255 { size as u8 } else { 0 },
        ..Head::default()
    };
    t.guard.set(true);
    backend::emit(head, Some((r.count, r.key >> 32 & 0xf)), &[]);
    t.guard.set(false);
}

/// [`flush_run_in`] for the calling thread (no-op unless coalescing).
#[inline]
pub fn flush_run() {
    if config::coalesce() && mode() != MODE_OFF {
        tls::with(flush_run_in);
    }
}

/// Records one atomic operation (see [`crate::atomic`] for the flags).
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn atomic_event(
    op: Op,
    addr: u64,
    log2_width: u8,
    order: i32,
    extra: u8,
    old: u64,
    new: u64,
    pc: u64,
) {
    if mode() == MODE_OFF {
        return;
    }
    atomic_event_slow(op, addr, log2_width, order, extra, old, new, pc);
}

#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn atomic_event_slow(
    op: Op,
    addr: u64,
    log2_width: u8,
    order: i32,
    extra: u8,
    old: u64,
    new: u64,
    pc: u64,
) {
    tls::with(|t| {
        if t.guard.get() {
            return;
        }
        // gcc may or HLE hints into the order (bits 16+); C11 orders are 0..=5.
        let order = (order & 0xffff).clamp(0, 5) as u8;
        if config::coalesce() {
            // The operations that leave the word as they found it repeat
            // identically while a thread spins: a load of a taken lock
            // (test-and-test-and-set), an exchange that writes the value
            // already there (test-and-set: old == new), a failed
            // compare-exchange. Each repeat is one more attempt that found
            // the same value, which is all `spin` counts (docs/detailed.md).
            // Anything that changes the word (a store, an exchange or
            // compare-exchange that took the lock, a fetch-add) is a new
            // value for every reader: never folded.
            let kind = match op {
                Op::AtomicLoad => repeat::ATOMIC_LOAD,
                Op::AtomicExchange if old == new => repeat::XCHG_UNCHANGED,
                Op::AtomicCas if extra & CAS_FAILED != 0 => {
                    if extra & CAS_WEAK != 0 {
                        repeat::CAS_FAILED_WEAK
                    } else {
                        repeat::CAS_FAILED
                    }
                }
                _ => 0,
            };
            if kind != 0 {
                let key = (1u64 << log2_width) | (kind | u64::from(order) << 4) << 32;
                if fold(t, addr, key, old, pc, backend::held()) {
                    return;
                }
            } else {
                flush_run_in(t);
            }
        }
        let head = Head {
            // Fenced, as the preload library stamps acquisitions: the
            // operation has run (an exchange that took a spinlock waited
            // for the previous owner's releasing store), and a plain
            // `rdtsc` could read the clock before it completed, stamping
            // the acquisition ahead of that release and making the two
            // owners' critical sections overlap in the trace. The lfence
            // costs a few ns against the ~40 ns of recording an event.
            tsc: lockscope_ring::tsc::now_after(),
            addr,
            site: pc,
            op: op as u8,
            flags: log2_width | order << 3 | extra,
            ..Head::default()
        };
        emit_with_path(t, head, Some((old, new)), config::event_frames());
    })
}

/// Records a heap allocation (`addr` = block, `size` bytes).
pub fn alloc_event(addr: u64, size: u64, pc: u64) {
    if mode_if_decided() == MODE_OFF {
        return;
    }
    tls::with(|t| {
        if t.guard.get() {
            return;
        }
        if config::coalesce() {
            flush_run_in(t);
        }
        let head = Head {
            tsc: lockscope_ring::tsc::now(),
            addr,
            site: pc,
            op: Op::Alloc as u8,
            ..Head::default()
        };
        emit_with_path(t, head, Some((size, 0)), config::event_frames());
    })
}

/// Records that a heap block is about to be freed. `usable` is its usable
/// size: locations inside it are dropped from the critical section's write
/// log so that the release does not read freed (maybe unmapped) memory.
pub fn free_event(addr: u64, usable: u64, pc: u64) {
    if mode_if_decided() == MODE_OFF {
        return;
    }
    tls::with(|t| {
        if t.guard.get() {
            return;
        }
        if config::coalesce() {
            flush_run_in(t);
        }
        // SAFETY: this thread's own log.
        unsafe { (*t.wlog.get()).forget_range(addr, addr.saturating_add(usable)) };
        let head = Head {
            tsc: lockscope_ring::tsc::now(),
            addr,
            site: pc,
            op: Op::Free as u8,
            ..Head::default()
        };
        t.guard.set(true);
        backend::emit(head, None, &[]);
        t.guard.set(false);
    })
}

/// Reads the value of a written location for [`Op::ReleaseValue`]: the
/// value itself for 1/2/4/8 bytes, a 64-bit FNV-1a hash of the bytes for
/// other sizes (struct copies, ranges), which is enough to tell "same
/// value written" from "different value".
///
/// # Safety
/// `addr..addr+size` must be readable.
unsafe fn value_of(addr: u64, size: u32) -> u64 {
    // SAFETY: `addr..addr+size` is readable (the caller's contract); the reads
    // are unaligned or byte-wise, so any address is fine.
    unsafe {
        let p = addr as *const u8;
        match size {
            1 => u64::from(p.read_volatile()),
            2 => u64::from((p as *const u16).read_unaligned()),
            4 => u64::from((p as *const u32).read_unaligned()),
            8 => (p as *const u64).read_unaligned(),
            n => {
                let mut h: u64 = 0xcbf2_9ce4_8422_2325;
                for i in 0..n as usize {
                    h ^= u64::from(p.add(i).read_volatile());
                    h = h.wrapping_mul(0x0000_0100_0000_01b3);
                }
                h
            }
        }
    }
}

/// Called by the capture layer just before a lock is really released,
/// while the thread still holds it: emits one [`Op::ReleaseValue`] per
/// location written since the outermost acquisition, and empties the log
/// when `remaining` (locks still held after this release) is 0.
///
/// Reported at every release, nested ones included; the analysis keeps
/// the locations each critical section instance wrote itself.
pub fn release_values(remaining: u32) {
    if mode() == MODE_OFF {
        return;
    }
    tls::with(|t| {
        if config::coalesce() {
            flush_run_in(t);
        }
        // SAFETY: this thread's own log; `emit` never touches it.
        let log = unsafe { &mut *t.wlog.get() };
        if !t.guard.get() && (log.len > 0 || log.overflow > 0) {
            t.guard.set(true);
            let now = lockscope_ring::tsc::now();
            backend::with_recorder(|g| emit_release_values(g, log, now));
            t.guard.set(false);
        }
        if remaining == 0 {
            log.clear();
            log.overflow = 0;
        }
    })
}

/// The [`Op::ReleaseValue`] events of [`release_values`], under one entry
/// into the recorder.
fn emit_release_values(g: &mut lockscope_capture::thread::Guard, log: &tls::WriteLog, now: u64) {
    for &(addr, size) in &log.entries[..log.len] {
        if size == 0 {
            continue;
        }
        // SAFETY: the program wrote these bytes inside this
        // critical section and has not freed them (free_event
        // drops freed blocks); the thread's own stack is never
        // logged.
        let v = unsafe { value_of(addr, size) };
        let (flags, arg2) = if size <= 255 {
            (size as u8, 0)
        } else {
            (0, u64::from(size))
        };
        let mut head = Head {
            tsc: now,
            addr,
            op: Op::ReleaseValue as u8,
            flags,
            ..Head::default()
        };
        // A value that fits the head's 32-bit `aux` needs no args
        // slot: half the ring traffic for the common small values.
        let args = match u32::try_from(v) {
            Ok(small) if arg2 == 0 => {
                head.aux = small;
                None
            }
            _ => Some((v, arg2)),
        };
        g.emit(head, args, &[]);
    }
    if log.overflow > 0 {
        let head = Head {
            tsc: now,
            op: Op::Lost as u8,
            ..Head::default()
        };
        g.emit(head, Some((log.overflow, 0)), &[]);
    }
}
