//! Per-thread state of the runtime: the shadow call stack, the re-entry
//! guard, the thread's own stack bounds and the write log of the current
//! critical section.
//!
//! Everything lives in one `thread_local!` with a `const` initializer and
//! no destructor: linked into an executable, that is a plain
//! `%fs`-relative access (no `__tls_get_addr`, no lazy registration), and
//! a thread that is being torn down can still run instrumented code (a
//! pthread key destructor locking a mutex) without touching a destroyed
//! value (a `thread_local!` with a destructor was tried and crashed such
//! programs at thread exit).

use core::cell::{Cell, UnsafeCell};
use core::mem::MaybeUninit;

/// Most shadow-stack entries kept. Deeper frames are counted in `depth`
/// but not stored, so that entry/exit stay balanced; call paths then show
/// the outermost `STACK_CAP` frames plus the innermost pc.
pub const STACK_CAP: usize = 256;

/// Most distinct locations whose value is reported at release, per
/// outermost critical section. More are counted as lost.
pub const WLOG_CAP: usize = 1024;
const WTAB: usize = 2048; // open-addressing table, load factor <= 0.5

/// The per-thread state.
pub struct Tls {
    /// Number of active instrumented frames (may exceed `STACK_CAP`).
    pub depth: Cell<u32>,
    /// Return addresses passed to `__tsan_func_entry`, outermost first.
    pub stack: UnsafeCell<[u64; STACK_CAP]>,
    /// Set while the runtime itself runs code that may call back into an
    /// interposed function (malloc from inside an emit, pthread_getattr_np).
    pub guard: Cell<bool>,
    /// `__tsan_ignore_thread_begin` nesting: accesses are not recorded.
    pub ignore: Cell<u32>,
    /// Own stack bounds [lo, hi); lo == hi == 0 while unknown.
    pub stack_lo: Cell<u64>,
    /// See `stack_lo`.
    pub stack_hi: Cell<u64>,
    /// Locations written in the current (outermost) critical section.
    pub wlog: UnsafeCell<WriteLog>,
    /// The last access recorded and its pending repeats
    /// (`LOCKSCOPE_COALESCE=1`).
    pub run: Cell<Run>,
}

/// The last recorded access of a thread and how often it has been
/// repeated since without being recorded (see [`crate::record::flush_run`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// Address; 0 = no run (the next access starts one).
    pub addr: u64,
    /// Size | kind << 32 (a `lockscope_format::repeat` code | order << 4
    /// for atomics).
    pub key: u64,
    /// Value read (reads and atomic loads; 0 for writes).
    pub value: u64,
    /// pc of the recorded access (not compared: the repeats of an
    /// unrolled loop come from several pcs).
    pub site: u64,
    /// Locks held.
    pub held: u32,
    /// Repeats not yet recorded.
    pub count: u64,
    /// tsc of the last repeat.
    pub last: u64,
}

impl Tls {
    const fn new() -> Tls {
        Tls {
            depth: Cell::new(0),
            stack: UnsafeCell::new([0; STACK_CAP]),
            guard: Cell::new(false),
            ignore: Cell::new(0),
            stack_lo: Cell::new(0),
            stack_hi: Cell::new(0),
            wlog: UnsafeCell::new(WriteLog::new()),
            run: Cell::new(Run {
                addr: 0,
                key: 0,
                value: 0,
                site: 0,
                held: 0,
                count: 0,
                last: 0,
            }),
        }
    }
}

thread_local! {
    static TLS: Tls = const { Tls::new() };
}

/// Runs `f` on this thread's state.
///
/// The state's address is taken first and `f` is called on it directly,
/// rather than through `LocalKey::with`: rustc emitted that generic as an
/// out-of-line function that reached the state through the key's accessor
/// pointer and every captured argument through the closure's environment
/// (a profile of the access path with callgrind: ~40 of its instructions).
/// With the address in hand, `f` is inlined into the caller.
#[inline(always)]
pub fn with<R>(f: impl FnOnce(&Tls) -> R) -> R {
    let p: *const Tls = TLS.with(|t| t as *const Tls);
    // SAFETY: the thread local has a `const` initializer and no destructor,
    // so it is valid for this thread's whole life, and only this thread
    // (or a signal handler running on it, which sees `guard`) touches it;
    // the reference does not outlive the call.
    f(unsafe { &*p })
}

/// Fills `out` with the call path, innermost first: `pc` (if non-zero),
/// then the return addresses of the active instrumented frames. Returns the
/// number of frames written.
#[inline]
pub fn frames(t: &Tls, pc: u64, out: &mut [u64]) -> usize {
    // SAFETY: `u64` and `MaybeUninit<u64>` have the same layout, and
    // `frames_into` only writes initialized values.
    let out = unsafe { &mut *(out as *mut [u64] as *mut [MaybeUninit<u64>]) };
    frames_into(t, pc, out).len()
}

/// [`frames`] into an uninitialized buffer; returns the frames written.
/// The access path uses it so that its 64-entry buffer is not zeroed on
/// every access (a 512-byte memset was a seventh of an access's cost).
#[inline]
pub fn frames_into<'a>(t: &Tls, pc: u64, out: &'a mut [MaybeUninit<u64>]) -> &'a [u64] {
    let mut n = 0;
    if pc != 0 && !out.is_empty() {
        out[0].write(pc);
        n = 1;
    }
    let depth = (t.depth.get() as usize).min(STACK_CAP);
    // SAFETY: only this thread touches its stack array, and no reference
    // to it outlives this function.
    let stack = unsafe { &*t.stack.get() };
    let take = depth.min(out.len() - n);
    for (o, &f) in out[n..n + take]
        .iter_mut()
        .zip(stack[depth - take..depth].iter().rev())
    {
        o.write(f);
    }
    n += take;
    // SAFETY: the first `n` entries were written above.
    unsafe { core::slice::from_raw_parts(out.as_ptr().cast::<u64>(), n) }
}

/// The set of locations written since the outermost lock was acquired,
/// with their sizes, in first-write order. An open-addressing table with a
/// generation stamp per slot makes "clear" O(1) at every release, instead
/// of a 2048-entry memset per critical section.
pub struct WriteLog {
    gen: u32,
    slot_addr: [u64; WTAB],
    slot_gen: [u32; WTAB],
    slot_idx: [u16; WTAB],
    /// (address, size) in first-write order; size 0 = dropped (freed).
    pub entries: [(u64, u32); WLOG_CAP],
    /// Used entries.
    pub len: usize,
    /// Distinct locations that did not fit (reported as a loss).
    pub overflow: u64,
}

impl WriteLog {
    const fn new() -> WriteLog {
        WriteLog {
            gen: 1,
            slot_addr: [0; WTAB],
            slot_gen: [0; WTAB],
            slot_idx: [0; WTAB],
            entries: [(0, 0); WLOG_CAP],
            len: 0,
            overflow: 0,
        }
    }

    /// Notes a write of `size` bytes at `addr`.
    #[inline]
    pub fn insert(&mut self, addr: u64, size: u32) {
        let mut h = (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 53) as usize & (WTAB - 1);
        loop {
            if self.slot_gen[h] != self.gen {
                if self.len >= WLOG_CAP {
                    self.overflow += 1;
                    return;
                }
                self.slot_gen[h] = self.gen;
                self.slot_addr[h] = addr;
                self.slot_idx[h] = self.len as u16;
                self.entries[self.len] = (addr, size);
                self.len += 1;
                return;
            }
            if self.slot_addr[h] == addr {
                let e = &mut self.entries[self.slot_idx[h] as usize];
                e.1 = e.1.max(size);
                return;
            }
            h = (h + 1) & (WTAB - 1);
        }
    }

    /// Forgets locations inside [lo, hi) (a block freed inside the
    /// critical section must not be read at release).
    pub fn forget_range(&mut self, lo: u64, hi: u64) {
        for e in &mut self.entries[..self.len] {
            if e.0 >= lo && e.0 < hi {
                e.1 = 0;
            }
        }
    }

    /// Empties the log (outermost release).
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            // Wrapped: stale stamps could match again, so really clear.
            self.slot_gen = [0; WTAB];
            self.gen = 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_path_is_pc_then_innermost_frames_cut_at_the_buffer() {
        let t = Box::new(Tls::new());
        for f in [0x100u64, 0x200, 0x300] {
            // SAFETY: the test owns `t`.
            unsafe { (*t.stack.get())[t.depth.get() as usize] = f };
            t.depth.set(t.depth.get() + 1);
        }
        let mut buf = [MaybeUninit::<u64>::uninit(); 8];
        assert_eq!(
            frames_into(&t, 0x42, &mut buf),
            &[0x42, 0x300, 0x200, 0x100]
        );
        assert_eq!(frames_into(&t, 0, &mut buf), &[0x300, 0x200, 0x100]);
        assert_eq!(frames_into(&t, 0x42, &mut buf[..2]), &[0x42, 0x300]);
        assert_eq!(frames_into(&t, 0x42, &mut buf[..0]), &[] as &[u64]);
        let mut plain = [7u64; 3];
        assert_eq!(frames(&t, 0, &mut plain), 3);
        assert_eq!(plain, [0x300, 0x200, 0x100]);
        // Deeper than the shadow stack keeps: only the stored entries.
        t.depth.set(STACK_CAP as u32 + 10);
        assert_eq!(frames_into(&t, 0x42, &mut buf[..3]).len(), 3);
    }

    #[test]
    fn write_log_dedups_keeps_order_and_clears() {
        let mut w = Box::new(WriteLog::new());
        for a in [0x10u64, 0x20, 0x10, 0x30, 0x20] {
            w.insert(a, 4);
        }
        w.insert(0x10, 8);
        assert_eq!(&w.entries[..w.len], &[(0x10, 8), (0x20, 4), (0x30, 4)]);
        w.forget_range(0x20, 0x28);
        assert_eq!(w.entries[1], (0x20, 0));
        w.clear();
        assert_eq!(w.len, 0);
        w.insert(0x20, 2);
        assert_eq!(&w.entries[..w.len], &[(0x20, 2)]);
        for a in 0..(WLOG_CAP as u64 + 5) {
            w.insert(0x1000 + a * 8, 8);
        }
        assert_eq!(w.len, WLOG_CAP);
        assert_eq!(w.overflow, 6);
    }
}
