//! The one place that names atomics, spin hints, thread-locals and futexes.
//!
//! Every algorithm goes through this module so that the same code runs under
//! loom (`RUSTFLAGS="--cfg loom"`), where atomics are loom's model-checked
//! ones, a spin iteration is a loom yield, and a futex is modelled as a
//! possibly spurious return (which every waiting loop here must tolerate).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU32};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU32};

pub(crate) use std::sync::atomic::Ordering;

/// One iteration of a busy-wait loop.
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Gives the CPU away: spinning waiters call this every few hundred polls so
/// that a lock holder that was preempted (threads > cores) can run.
#[inline]
pub(crate) fn yield_cpu() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Sleeps while `*word == expected` (may return spuriously).
#[inline]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    #[cfg(loom)]
    {
        let _ = (word, expected);
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    // SAFETY: FUTEX_WAIT reads the aligned u32 behind a live reference;
    // the timeout is null (no timeout).
    unsafe {
        futex(
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
        );
    }
}

/// Wakes up to `n` threads sleeping on `word`.
#[inline]
pub(crate) fn futex_wake(word: &AtomicU32, n: i32) {
    #[cfg(loom)]
    let _ = (word, n);
    #[cfg(not(loom))]
    // SAFETY: FUTEX_WAKE only uses the address as a key.
    unsafe {
        futex(
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n as u32,
        );
    }
}

/// The futex system call with a null timeout, made with the `syscall`
/// instruction itself rather than through libc's `syscall` function.
///
/// Why: `lockscope record` interposes libc's `syscall` to see the futex
/// sleeps of locks it cannot otherwise see (Rust std). Under `lockscope
/// run --lock ALG`, recorded, these locks replace the program's pthread
/// mutexes, and the recorder already records each mutex call from its
/// attempt to its return, spinning and sleeping included. Through libc,
/// every sleep was recorded a second time as a separate `futex` lock (a
/// second row per mutex, named after this function), and every wake, made
/// inside the recorder's unlock hook, reached its `syscall` hook while the
/// recorder was busy and was counted as an event lost "from a signal
/// handler" (7,500-9,800 per run). The alternative, teaching the recorder
/// to ignore calls from this library's address range, would keep both
/// libraries coupled through their stacking order for no gain: these
/// sleeps belong to the mutex call, never to the program.
///
/// # Safety
/// `addr` is an aligned `u32` that stays live during the call; `op` is a
/// FUTEX_WAIT or FUTEX_WAKE operation (the fourth argument is null).
#[cfg(not(loom))]
#[inline]
unsafe fn futex(addr: *mut u32, op: i32, val: u32) {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
    // SAFETY: the Linux x86-64 system call convention: number in rax,
    // arguments in rdi, rsi, rdx, r10; the kernel clobbers rcx and r11
    // and returns in rax. The caller's contract makes the arguments valid
    // for futex(2); no stack is used.
    unsafe {
        let _ret: isize;
        core::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_futex as isize => _ret,
            in("rdi") addr,
            in("rsi") op as isize,
            in("rdx") val as usize,
            in("r10") 0usize,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri))))]
    // SAFETY: the caller's contract. The recorder's preload (the reason
    // for the raw call above) exists only on x86-64, and Miri runs no
    // inline assembly but models libc's futex call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            addr,
            op,
            val,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Per-thread CPU bookkeeping.
struct CpuState {
    /// Virtual CPU set by `set_thread_cpu`, or -1.
    forced: std::cell::Cell<i32>,
    /// Last CPU number read from the kernel, reused for a while.
    cached: std::cell::Cell<u32>,
    /// Calls left before the cached CPU is read again.
    left: std::cell::Cell<u32>,
    /// Sequence number of the thread (-1 until first needed).
    seq: std::cell::Cell<i32>,
}

/// Calls between two `sched_getcpu`: the CPU is only a locality hint for
/// picking a leaf (a stale one is still correct), and asking on every
/// acquisition costs as much as an uncontended MCS lock.
const CPU_REFRESH: u32 = 64;

#[cfg(not(loom))]
std::thread_local! {
    static CPU: CpuState = const {
        CpuState {
            forced: std::cell::Cell::new(-1),
            cached: std::cell::Cell::new(0),
            left: std::cell::Cell::new(0),
            seq: std::cell::Cell::new(-1),
        }
    };
}
#[cfg(loom)]
loom::thread_local! {
    static CPU: CpuState = CpuState {
        forced: std::cell::Cell::new(-1),
        cached: std::cell::Cell::new(0),
        left: std::cell::Cell::new(0),
        seq: std::cell::Cell::new(-1),
    };
}

/// Pins the calling thread to a virtual CPU as far as hierarchical locks are
/// concerned (`None` goes back to the real CPU). Tests and benchmarks use it
/// to exercise deep hierarchies on a small machine.
pub fn set_thread_cpu(cpu: Option<usize>) {
    CPU.with(|c| c.forced.set(cpu.map_or(-1, |v| v as i32)));
}

/// The CPU the calling thread runs on (read at most every CPU_REFRESH
/// calls), or its virtual CPU if one was set.
#[inline]
pub(crate) fn current_cpu() -> usize {
    CPU.with(|c| {
        let o = c.forced.get();
        if o >= 0 {
            return o as usize;
        }
        let left = c.left.get();
        if left > 0 {
            c.left.set(left - 1);
            return c.cached.get() as usize;
        }
        #[cfg(loom)]
        let cpu = 0u32;
        #[cfg(not(loom))]
        // SAFETY: plain libc call.
        let cpu = unsafe { libc::sched_getcpu() }.max(0) as u32;
        c.cached.set(cpu);
        c.left.set(CPU_REFRESH);
        cpu as usize
    })
}

/// A small number unique to the calling thread (0, 1, 2, ... in order of
/// first call), used as a virtual CPU for hand-given hierarchies.
#[inline]
pub(crate) fn thread_seq() -> usize {
    CPU.with(|c| {
        let o = c.forced.get();
        if o >= 0 {
            return o as usize;
        }
        let v = c.seq.get();
        if v >= 0 {
            return v as usize;
        }
        static NEXT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed) & 0x3fff_ffff;
        c.seq.set(n);
        n as usize
    })
}
