//! Hooks for mutexes, reader-writer locks, spinlocks, condition variables,
//! barriers and semaphores.
//!
//! Acquisitions call the real function the program called, nothing else
//! (an earlier trylock-then-lock was visible to interposers
//! loaded after us: a user's lock shim saw 2 of 128,000 lock calls).
//! Contention is read from the lock word just before the call: held by
//! another thread means the call is about to wait, so BEGIN is emitted at
//! the attempt and DONE|CONTENDED at the return. The alternative, timing
//! every call and guessing contention from its duration, cannot tell a
//! short wait from a slow uncontended call.
//!
//! Calls that are cancellation points (`pthread_cond_*wait`, `sem_wait`,
//! `sem_timedwait`) release the recorder guard before calling the real
//! function and hold no value with a destructor across it: a cancelled
//! thread unwinds through the hook (`extern "C-unwind"`) with nothing to
//! clean up.

use libc::{c_int, clockid_t, pthread_barrier_t, pthread_cond_t, pthread_mutex_t};
use libc::{pthread_rwlock_t, pthread_spinlock_t, sem_t, timespec};
use lockscope_capture::process;
use lockscope_capture::thread::{self, Guard};
use lockscope_format::{phase, Op};
use lockscope_ring::tsc;

use crate::common::{emit, emit_opening, errno, guarded, set_errno, tramp};
use crate::real::real;

real!(pub(crate) real_mutex_lock = "pthread_mutex_lock": fn(m: *mut pthread_mutex_t) -> c_int);
real!(real_mutex_trylock = "pthread_mutex_trylock": fn(m: *mut pthread_mutex_t) -> c_int);
real!(real_mutex_timedlock = "pthread_mutex_timedlock": fn(m: *mut pthread_mutex_t, t: *const timespec) -> c_int);
real!(real_mutex_clocklock = "pthread_mutex_clocklock": fn(m: *mut pthread_mutex_t, c: clockid_t, t: *const timespec) -> c_int);
real!(pub(crate) real_mutex_unlock = "pthread_mutex_unlock": fn(m: *mut pthread_mutex_t) -> c_int);
real!(real_rdlock = "pthread_rwlock_rdlock": fn(l: *mut pthread_rwlock_t) -> c_int);
real!(real_wrlock = "pthread_rwlock_wrlock": fn(l: *mut pthread_rwlock_t) -> c_int);
real!(real_tryrdlock = "pthread_rwlock_tryrdlock": fn(l: *mut pthread_rwlock_t) -> c_int);
real!(real_trywrlock = "pthread_rwlock_trywrlock": fn(l: *mut pthread_rwlock_t) -> c_int);
real!(real_timedrdlock = "pthread_rwlock_timedrdlock": fn(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int);
real!(real_timedwrlock = "pthread_rwlock_timedwrlock": fn(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int);
real!(real_clockrdlock = "pthread_rwlock_clockrdlock": fn(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec) -> c_int);
real!(real_clockwrlock = "pthread_rwlock_clockwrlock": fn(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec) -> c_int);
real!(real_rwunlock = "pthread_rwlock_unlock": fn(l: *mut pthread_rwlock_t) -> c_int);
real!(real_spin_lock = "pthread_spin_lock": fn(l: *mut pthread_spinlock_t) -> c_int);
real!(real_spin_trylock = "pthread_spin_trylock": fn(l: *mut pthread_spinlock_t) -> c_int);
real!(real_spin_unlock = "pthread_spin_unlock": fn(l: *mut pthread_spinlock_t) -> c_int);
// The condition-variable functions have two versions in glibc; programs
// linked since glibc 2.3.2 use the new one, which is what we forward to.
real!(real_cond_wait = "pthread_cond_wait" @ "GLIBC_2.3.2": fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) -> c_int);
real!(real_cond_timedwait = "pthread_cond_timedwait" @ "GLIBC_2.3.2": fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, t: *const timespec) -> c_int);
real!(real_cond_clockwait = "pthread_cond_clockwait": fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, k: clockid_t, t: *const timespec) -> c_int);
real!(real_cond_signal = "pthread_cond_signal" @ "GLIBC_2.3.2": fn(c: *mut pthread_cond_t) -> c_int);
real!(real_cond_broadcast = "pthread_cond_broadcast" @ "GLIBC_2.3.2": fn(c: *mut pthread_cond_t) -> c_int);
real!(real_barrier_wait = "pthread_barrier_wait": fn(b: *mut pthread_barrier_t) -> c_int);
real!(real_sem_wait = "sem_wait": fn(s: *mut sem_t) -> c_int);
real!(real_sem_trywait = "sem_trywait": fn(s: *mut sem_t) -> c_int);
real!(real_sem_timedwait = "sem_timedwait": fn(s: *mut sem_t, t: *const timespec) -> c_int);
// glibc 2.30+; CPython 3.11 uses it for `threading.Lock.acquire(timeout=...)`.
real!(real_sem_clockwait = "sem_clockwait": fn(s: *mut sem_t, c: clockid_t, t: *const timespec) -> c_int);
real!(real_sem_post = "sem_post": fn(s: *mut sem_t) -> c_int);

/// An acquisition succeeded: 0, or EOWNERDEAD (a robust mutex whose owner
/// died: the caller now owns it).
#[inline(always)]
fn got(rc: c_int) -> bool {
    rc == 0 || rc == libc::EOWNERDEAD
}

/// The acquisition protocol shared by every blocking lock. It calls the
/// real function the program called (never a trylock in its place: a
/// user's own interposer under ours must see the calls the program made),
/// and tells contention from the lock word read just before
/// the call (`held`: another thread holds it, see the `*_held` probes).
/// `ret` receives the real result as soon as there is one, so that a
/// panic in the recording code after it never changes what the program
/// sees. The guard is released around the real call, which may block:
/// a signal handler running meanwhile records its own events.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn acquire(
    g: &mut Guard,
    ret: &mut Option<c_int>,
    op: Op,
    addr: u64,
    site: u64,
    fp: u64,
    held: bool,
    block: impl FnOnce() -> c_int,
    waited: impl FnOnce() -> bool,
) {
    // The attempt's stamp, taken before the call on both paths: the
    // BEGIN of a call about to wait, or the start of one that looked free
    // (below). The run-delay sample comes first, outside any section this
    // call opens (not at releases, where its system calls would lengthen
    // a hold); they are not part of the lock call: stamp again after them.
    let mut t0 = tsc::now();
    let sampled_at_start = g.sample_run_delay(t0);
    if sampled_at_start {
        t0 = tsc::now();
    }
    if held {
        // Held by another thread when we looked: the call is about to
        // wait. BEGIN at the attempt, DONE|CONTENDED when it returns.
        // The BEGIN carries the call path as a blocked call's (under
        // `--stacks contended` too): if the wait never ends (a deadlock,
        // a program killed while it waited), it is the only event of the
        // call. Walked again for the DONE rather than kept for it: this is
        // the contended path, and the DONE's path is what the report
        // attributes the acquisition to, as before.
        emit(g, op, phase::BEGIN, t0, addr, site, fp, 0, 0, true);
    }
    let rc = g.unguarded(block);
    *ret = Some(rc);
    // Stamp after the call, not before: an acquisition's time must follow
    // the previous owner's release (stamped before its real unlock), so
    // that ordering critical sections by time gives the real hand-off
    // order. Fenced so that it does not run ahead of the lock's own
    // instruction.
    let mut t = tsc::now_after();
    // A call that looked free can still have waited: another thread can
    // take the lock between our look and the real call's own attempt.
    // Measured on ulcp_table (2 threads, 500,000 acquisitions), 7,322 such
    // waits (19.5 ms, a third of all waiting) were recorded as the
    // caller's own work. A call that took longer than any uncontended one
    // can ([`lockscope_capture::process::slow_call_ticks`]: a futex sleep)
    // *and* left the lock word saying so (`waited`: a mutex "locked,
    // waiters", glibc's slow path; the words of rwlocks and spinlocks
    // cannot tell) is recorded as the contended acquisition it was, from
    // `t0`. The duration alone is not enough: a preemption or an
    // interrupt inside the call makes one too (537 of 2M acquisitions of a
    // one-thread program, with the recorder's threads sharing its 2 CPUs).
    let mut slow = !held && t.wrapping_sub(t0) > process::slow_call_ticks() && got(rc) && waited();
    // Slow, and the word says waiters, but the thread may have been
    // preempted inside the call instead (just after taking the lock, while
    // another thread queued): then its run-queue delay grew by most of the
    // call, and the call is recorded as the uncontended acquisition it
    // was, after a run-queue sample that makes its time preempted work
    // (Guard::preempted_in_call). Stamped again after that sample's
    // system calls.
    if slow && g.preempted_in_call(t.wrapping_sub(t0), sampled_at_start) {
        slow = false;
        t = tsc::now_after();
    }
    if slow {
        emit(g, op, phase::BEGIN, t0, addr, site, fp, 0, 0, false);
    }
    let waited_here = held || slow;
    let contended = if waited_here { phase::CONTENDED } else { 0 };
    if got(rc) {
        let flags = phase::DONE | contended;
        // Opens a critical section: written after it when it can be.
        emit_opening(g, op, flags, t, addr, site, fp, rc as u64, waited_here);
        g.acquired();
    } else {
        let flags = phase::FAIL | contended;
        emit(g, op, flags, t, addr, site, fp, rc as u64, 0, waited_here);
    }
}

/// True if another thread holds the glibc (x86-64) mutex: the lock word
/// (`int __lock` at 0) is non-zero and the owner (`int __owner` at 8, set
/// by glibc for every kind) is not the caller. A recursive or
/// error-checking mutex the caller already holds does not wait.
/// A mutex that `lockscope run` replaced has its algorithm's words
/// instead: the swap library answers for it.
#[inline(always)]
unsafe fn mutex_held(m: *mut pthread_mutex_t, me: u32) -> bool {
    // SAFETY: the caller passes the program's mutex.
    if let Some(busy) = unsafe { crate::swap::mutex_busy(m) } {
        return busy;
    }
    let p = m as *const core::sync::atomic::AtomicI32;
    // SAFETY: the caller passes the program's mutex, at least 40 bytes.
    let (lock, owner) = unsafe {
        (
            (*p).load(core::sync::atomic::Ordering::Relaxed),
            (*p.add(2)).load(core::sync::atomic::Ordering::Relaxed),
        )
    };
    lock != 0 && owner as u32 != me
}

/// glibc rwlock `__readers` bits: write phase, write-locked; readers
/// counted from bit 3.
const RW_WRPHASE: u32 = 1;
const RW_WRLOCKED: u32 = 2;
const RW_READER_SHIFT: u32 = 3;

/// True if a writer would wait: a writer holds the lock or readers do
/// (`unsigned __readers` at 0; `int __cur_writer` at 24 is the owner).
#[inline(always)]
unsafe fn rw_write_held(l: *mut pthread_rwlock_t, me: u32) -> bool {
    let p = l as *const core::sync::atomic::AtomicU32;
    // SAFETY: the caller passes the program's rwlock, 56 bytes.
    let (r, writer) = unsafe {
        (
            (*p).load(core::sync::atomic::Ordering::Relaxed),
            (*p.add(6)).load(core::sync::atomic::Ordering::Relaxed),
        )
    };
    (r & RW_WRLOCKED != 0 && writer != me) || r >> RW_READER_SHIFT != 0
}

/// True if a reader would wait: the lock is in its write phase.
#[inline(always)]
unsafe fn rw_read_held(l: *mut pthread_rwlock_t, me: u32) -> bool {
    let p = l as *const core::sync::atomic::AtomicU32;
    // SAFETY: as above.
    let (r, writer) = unsafe {
        (
            (*p).load(core::sync::atomic::Ordering::Relaxed),
            (*p.add(6)).load(core::sync::atomic::Ordering::Relaxed),
        )
    };
    r & RW_WRPHASE != 0 && writer != me
}

/// True if the spinlock (an int, 0 when free) is taken.
#[inline(always)]
unsafe fn spin_held(l: *mut pthread_spinlock_t, _me: u32) -> bool {
    // SAFETY: the caller passes the program's spinlock.
    unsafe {
        (*(l as *const core::sync::atomic::AtomicI32)).load(core::sync::atomic::Ordering::Relaxed)
            != 0
    }
}

/// A try-only acquisition: DONE, or FAIL with the error.
#[inline(always)]
pub(crate) fn try_acquire(
    g: &mut Guard,
    ret: &mut Option<c_int>,
    op: Op,
    addr: u64,
    site: u64,
    fp: u64,
    try_: impl FnOnce() -> c_int,
) {
    // After the try, as in `acquire`.
    let rc = try_();
    let t0 = tsc::now_after();
    *ret = Some(rc);
    if got(rc) {
        emit_opening(g, op, phase::DONE, t0, addr, site, fp, rc as u64, false);
        g.acquired();
    } else {
        emit(g, op, phase::FAIL, t0, addr, site, fp, rc as u64, 0, false);
    }
}

/// A release: one DONE at the call (FAIL with the error if the real call
/// refused). Recorded after the real call so that our store is not inside
/// the critical section.
#[inline(always)]
pub(crate) fn release(
    g: &mut Guard,
    ret: &mut Option<c_int>,
    op: Op,
    addr: u64,
    site: u64,
    fp: u64,
    unlock: impl FnOnce() -> c_int,
) -> u64 {
    let t0 = tsc::now();
    let rc = unlock();
    *ret = Some(rc);
    if rc == 0 {
        emit(g, op, phase::DONE, t0, addr, site, fp, 0, 0, false);
        g.released();
    } else {
        emit(g, op, phase::FAIL, t0, addr, site, fp, rc as u64, 0, false);
    }
    t0
}

/// Generates the hook body for a blocking acquisition.
macro_rules! acquire_hook {
    ($imp:ident ( $l:ident : $lt:ty $(, $a:ident : $t:ty)* ) $op:expr, held = $held:ident, block = $block:ident, waited = $waited:ident) => {
        unsafe extern "C-unwind" fn $imp($l: $lt, $($a: $t,)* site: u64, fp: u64) -> c_int {
            // SAFETY: the only unsafe calls are the real function (`$block`), with
            // the program's arguments unchanged (the interposed function's C
            // contract, upheld by the program), and `rec`, whose contract is the
            // same.
            unsafe {
            // Not recording: forward with no frame of our own (the
            // recording path below needs a large one).
            #[inline(never)]
            unsafe fn rec($l: $lt, $($a: $t,)* site: u64, fp: u64) -> c_int {
                // SAFETY: `$held` reads the lock word of `$l`, the program's initialised
                // lock object (the interposed function's contract: it must be valid for
                // the real call too), with relaxed atomic loads: racing with other
                // threads' lock operations is the point (a stale value only misjudges
                // contention). `$block` is the real function with the program's
                // arguments unchanged.
                unsafe {
                let Some(mut g) = thread::recorder() else {
                    return $block($l $(, $a)*);
                };
                let mut ret = None;
                let held = $held($l, g.tid());
                guarded(|| acquire(&mut g, &mut ret, $op, $l as u64, site, fp,
                    held, || $block($l $(, $a)*), || $waited($l)));
                match ret {
                    Some(rc) => rc,
                    None => $block($l $(, $a)*),
                }
            }}
            if !thread::is_recording() {
                return $block($l $(, $a)*);
            }
            rec($l, $($a,)* site, fp)
        }}
    };
}

/// Generates the hook body of a call that never blocks on the lock: a
/// try-only acquisition (`$proto` = `try_acquire`) or a release
/// (`$proto` = `release`). One macro for both: they differ only in the
/// protocol function that records around the real call.
macro_rules! plain_hook {
    ($imp:ident ( $l:ident : $lt:ty ) $op:expr, $real:ident, $proto:ident) => {
        unsafe extern "C-unwind" fn $imp($l: $lt, site: u64, fp: u64) -> c_int {
            // SAFETY: the only unsafe calls are the real function (`$real`), with
            // the program's lock pointer unchanged (the interposed function's C
            // contract, upheld by the program), and `rec`, whose contract is the
            // same.
            unsafe {
                // Not recording: forward with no frame of our own.
                #[inline(never)]
                unsafe fn rec($l: $lt, site: u64, fp: u64) -> c_int {
                    // SAFETY: `$real` is called with the program's lock
                    // pointer unchanged (the program upholds its contract);
                    // the recorder records the pointer as a number only.
                    unsafe {
                        let Some(mut g) = thread::recorder() else {
                            return $real($l);
                        };
                        let mut ret = None;
                        guarded(|| {
                            $proto(&mut g, &mut ret, $op, $l as u64, site, fp, || $real($l))
                        });
                        match ret {
                            Some(rc) => rc,
                            None => $real($l),
                        }
                    }
                }
                if !thread::is_recording() {
                    return $real($l);
                }
                rec($l, site, fp)
            }
        }
    };
}

// ---- mutexes ----

acquire_hook!(mutex_lock_impl(m: *mut pthread_mutex_t) Op::MutexLock,
    held = mutex_held, block = real_mutex_lock, waited = mutex_has_waiters);
plain_hook!(mutex_trylock_impl(m: *mut pthread_mutex_t) Op::MutexTrylock, real_mutex_trylock, try_acquire);
acquire_hook!(mutex_timedlock_impl(m: *mut pthread_mutex_t, t: *const timespec) Op::MutexTimedlock,
    held = mutex_held, block = real_mutex_timedlock, waited = mutex_has_waiters);
acquire_hook!(mutex_clocklock_impl(m: *mut pthread_mutex_t, c: clockid_t, t: *const timespec)
    Op::MutexTimedlock, held = mutex_held, block = real_mutex_clocklock, waited = mutex_has_waiters);

/// For locks whose word cannot tell whether an acquisition went through
/// a slow path (rwlocks, spinlocks): never.
#[inline(always)]
unsafe fn never_told<T>(_: *mut T) -> bool {
    false
}

/// True if the glibc (x86-64) mutex word says another thread waits, i.e.
/// the real unlock will enter the kernel to wake it. Layout of
/// `pthread_mutex_t`: `int __lock` at 0, `int __kind` at 16. Normal kinds:
/// 0 free, 1 locked, 2 locked with waiters. Robust and priority-inherit
/// kinds hold the owner's tid with FUTEX_WAITERS (bit 31) set when
/// contended. Priority-protect mutexes encode the ceiling there: never.
///
/// # Safety
/// `m` must point to an initialised glibc `pthread_mutex_t` (what the
/// program passes to `pthread_mutex_unlock`).
#[inline(always)]
unsafe fn mutex_has_waiters(m: *mut pthread_mutex_t) -> bool {
    // A mutex that `lockscope run` replaced: its algorithm's words do not
    // say whether a waiter sleeps, so never (like rwlocks and spinlocks).
    // SAFETY: the caller passes the program's initialised mutex.
    if unsafe { crate::swap::mutex_busy(m) }.is_some() {
        return false;
    }
    // SAFETY: `m` is the program's initialised glibc mutex (contract): its
    // `int __lock` at offset 0 and `int __kind` at 16 lie inside the 40-byte
    // object and are 4-aligned; read with relaxed atomic loads, since other
    // threads change them concurrently (a stale value only misjudges whether
    // the unlock will wake someone).
    unsafe {
        let p = m as *const core::sync::atomic::AtomicI32;
        let lock = (*p).load(core::sync::atomic::Ordering::Relaxed);
        let kind = (*p.add(4)).load(core::sync::atomic::Ordering::Relaxed);
        const ROBUST: i32 = 16;
        const PI: i32 = 32;
        const PP: i32 = 64;
        if kind & (ROBUST | PI) != 0 {
            lock as u32 & 0x8000_0000 != 0
        } else if kind & PP != 0 {
            false
        } else {
            lock > 1
        }
    }
}

unsafe extern "C-unwind" fn mutex_unlock_impl(
    m: *mut pthread_mutex_t,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: real_mutex_unlock and mutex_unlock_rec get the program's
    // mutex pointer unchanged: pthread_mutex_unlock's contract (an
    // initialised mutex) is the program's to uphold, and is all they need.
    unsafe {
        if !thread::is_recording() {
            return real_mutex_unlock(m);
        }
        mutex_unlock_rec(m, site, fp)
    }
}

/// # Safety
/// `m` is what the program passed to `pthread_mutex_unlock`.
#[inline(never)]
unsafe fn mutex_unlock_rec(m: *mut pthread_mutex_t, site: u64, fp: u64) -> c_int {
    // SAFETY: `m` is the program's initialised mutex (the contract of the
    // pthread_mutex_unlock it interposes): mutex_has_waiters may read its
    // words, and the real unlock gets it unchanged.
    unsafe {
        let Some(mut g) = thread::recorder() else {
            return real_mutex_unlock(m);
        };
        let mut ret = None;
        guarded(|| {
            let waiters = mutex_has_waiters(m);
            release(
                &mut g,
                &mut ret,
                Op::MutexUnlock,
                m as u64,
                site,
                fp,
                || real_mutex_unlock(m),
            );
            if waiters && ret == Some(0) {
                // The unlock had to wake a waiter (a futex syscall): its end
                // makes the time spent inside unlock visible.
                g.event(
                    Op::MutexUnlock as u8,
                    phase::END,
                    tsc::now(),
                    m as u64,
                    site,
                    0,
                );
            }
        });
        match ret {
            Some(rc) => rc,
            None => real_mutex_unlock(m),
        }
    }
}

tramp!(pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int = mutex_lock_impl ["rsi", "rdx"]);
tramp!(pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int = mutex_trylock_impl ["rsi", "rdx"]);
tramp!(pthread_mutex_timedlock(m: *mut pthread_mutex_t, t: *const timespec) -> c_int
    = mutex_timedlock_impl ["rdx", "rcx"]);
tramp!(pthread_mutex_clocklock(m: *mut pthread_mutex_t, c: clockid_t, t: *const timespec) -> c_int
    = mutex_clocklock_impl ["rcx", "r8"]);
tramp!(pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int = mutex_unlock_impl ["rsi", "rdx"]);

// ---- reader-writer locks ----

acquire_hook!(rdlock_impl(l: *mut pthread_rwlock_t) Op::RwRdlock,
    held = rw_read_held, block = real_rdlock, waited = never_told);
acquire_hook!(wrlock_impl(l: *mut pthread_rwlock_t) Op::RwWrlock,
    held = rw_write_held, block = real_wrlock, waited = never_told);
plain_hook!(tryrdlock_impl(l: *mut pthread_rwlock_t) Op::RwTryRdlock, real_tryrdlock, try_acquire);
plain_hook!(trywrlock_impl(l: *mut pthread_rwlock_t) Op::RwTryWrlock, real_trywrlock, try_acquire);
acquire_hook!(timedrdlock_impl(l: *mut pthread_rwlock_t, t: *const timespec) Op::RwTimedRdlock,
    held = rw_read_held, block = real_timedrdlock, waited = never_told);
acquire_hook!(timedwrlock_impl(l: *mut pthread_rwlock_t, t: *const timespec) Op::RwTimedWrlock,
    held = rw_write_held, block = real_timedwrlock, waited = never_told);
acquire_hook!(clockrdlock_impl(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec)
    Op::RwTimedRdlock, held = rw_read_held, block = real_clockrdlock, waited = never_told);
acquire_hook!(clockwrlock_impl(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec)
    Op::RwTimedWrlock, held = rw_write_held, block = real_clockwrlock, waited = never_told);
plain_hook!(rwunlock_impl(l: *mut pthread_rwlock_t) Op::RwUnlock, real_rwunlock, release);

tramp!(pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) -> c_int = rdlock_impl ["rsi", "rdx"]);
tramp!(pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) -> c_int = wrlock_impl ["rsi", "rdx"]);
tramp!(pthread_rwlock_tryrdlock(l: *mut pthread_rwlock_t) -> c_int = tryrdlock_impl ["rsi", "rdx"]);
tramp!(pthread_rwlock_trywrlock(l: *mut pthread_rwlock_t) -> c_int = trywrlock_impl ["rsi", "rdx"]);
tramp!(pthread_rwlock_timedrdlock(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int
    = timedrdlock_impl ["rdx", "rcx"]);
tramp!(pthread_rwlock_timedwrlock(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int
    = timedwrlock_impl ["rdx", "rcx"]);
tramp!(pthread_rwlock_clockrdlock(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec) -> c_int
    = clockrdlock_impl ["rcx", "r8"]);
tramp!(pthread_rwlock_clockwrlock(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec) -> c_int
    = clockwrlock_impl ["rcx", "r8"]);
tramp!(pthread_rwlock_unlock(l: *mut pthread_rwlock_t) -> c_int = rwunlock_impl ["rsi", "rdx"]);

// ---- spinlocks ----

acquire_hook!(spin_lock_impl(l: *mut pthread_spinlock_t) Op::SpinLock,
    held = spin_held, block = real_spin_lock, waited = never_told);
plain_hook!(spin_trylock_impl(l: *mut pthread_spinlock_t) Op::SpinTrylock, real_spin_trylock, try_acquire);
plain_hook!(spin_unlock_impl(l: *mut pthread_spinlock_t) Op::SpinUnlock, real_spin_unlock, release);

tramp!(pthread_spin_lock(l: *mut pthread_spinlock_t) -> c_int = spin_lock_impl ["rsi", "rdx"]);
tramp!(pthread_spin_trylock(l: *mut pthread_spinlock_t) -> c_int = spin_trylock_impl ["rsi", "rdx"]);
tramp!(pthread_spin_unlock(l: *mut pthread_spinlock_t) -> c_int = spin_unlock_impl ["rsi", "rdx"]);

// ---- condition variables ----

/// BEGIN (arg = mutex) at the call; after the real wait returns (mutex
/// re-acquired): DONE (arg = mutex) or FAIL (arg = error, arg2 = mutex).
/// The guard is not held across the wait (cancellation point).
#[inline(always)]
unsafe fn cond_wait_common(
    op: Op,
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    site: u64,
    fp: u64,
    wait: impl FnOnce() -> c_int,
) -> c_int {
    match thread::recorder() {
        None => return wait(),
        Some(mut g) => {
            let t0 = tsc::now();
            // A condition wait always blocks: its BEGIN keeps the call
            // path, as a contended lock's does (a wait that never returns
            // has no other event).
            guarded(|| {
                emit(
                    &mut g,
                    op,
                    phase::BEGIN,
                    t0,
                    c as u64,
                    site,
                    fp,
                    m as u64,
                    0,
                    true,
                )
            });
        }
    }
    let rc = wait();
    if let Some(mut g) = thread::recorder() {
        // Fenced like an acquisition's stamp: the wait returns holding the
        // mutex again, and that re-acquisition follows another's release.
        let t1 = tsc::now_after();
        guarded(|| {
            if rc == 0 {
                emit(
                    &mut g,
                    op,
                    phase::DONE,
                    t1,
                    c as u64,
                    site,
                    fp,
                    m as u64,
                    0,
                    true,
                )
            } else {
                emit(
                    &mut g,
                    op,
                    phase::FAIL,
                    t1,
                    c as u64,
                    site,
                    fp,
                    rc as u64,
                    m as u64,
                    true,
                )
            }
        });
    }
    rc
}

unsafe extern "C-unwind" fn cond_wait_impl(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here.
    unsafe { cond_wait_common(Op::CondWait, c, m, site, fp, || real_cond_wait(c, m)) }
}

unsafe extern "C-unwind" fn cond_timedwait_impl(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    t: *const timespec,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here.
    unsafe {
        cond_wait_common(Op::CondTimedwait, c, m, site, fp, || {
            real_cond_timedwait(c, m, t)
        })
    }
}

unsafe extern "C-unwind" fn cond_clockwait_impl(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    k: clockid_t,
    t: *const timespec,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here.
    unsafe {
        cond_wait_common(Op::CondTimedwait, c, m, site, fp, || {
            real_cond_clockwait(c, m, k, t)
        })
    }
}

/// A single-event call (signal, broadcast, post): DONE at the call time,
/// FAIL with the error.
#[inline(always)]
unsafe fn single(op: Op, addr: u64, site: u64, fp: u64, call: impl FnOnce() -> c_int) -> c_int {
    let Some(mut g) = thread::recorder() else {
        return call();
    };
    let t0 = tsc::now();
    let rc = call();
    guarded(|| {
        if rc == 0 {
            emit(&mut g, op, phase::DONE, t0, addr, site, fp, 0, 0, false)
        } else {
            emit(
                &mut g,
                op,
                phase::FAIL,
                t0,
                addr,
                site,
                fp,
                rc as u64,
                0,
                false,
            )
        }
    });
    rc
}

unsafe extern "C-unwind" fn cond_signal_impl(c: *mut pthread_cond_t, site: u64, fp: u64) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here.
    unsafe { single(Op::CondSignal, c as u64, site, fp, || real_cond_signal(c)) }
}

unsafe extern "C-unwind" fn cond_broadcast_impl(
    c: *mut pthread_cond_t,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here.
    unsafe {
        single(Op::CondBroadcast, c as u64, site, fp, || {
            real_cond_broadcast(c)
        })
    }
}

tramp!(pthread_cond_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) -> c_int
    = cond_wait_impl ["rdx", "rcx"]);
tramp!(pthread_cond_timedwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, t: *const timespec) -> c_int
    = cond_timedwait_impl ["rcx", "r8"]);
tramp!(pthread_cond_clockwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, k: clockid_t, t: *const timespec) -> c_int
    = cond_clockwait_impl ["r8", "r9"]);
tramp!(pthread_cond_signal(c: *mut pthread_cond_t) -> c_int = cond_signal_impl ["rsi", "rdx"]);
tramp!(pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int = cond_broadcast_impl ["rsi", "rdx"]);

// ---- barriers ----

/// BEGIN at the call, DONE at the return with arg = 1 for the serial
/// thread (PTHREAD_BARRIER_SERIAL_THREAD), FAIL with the error.
unsafe extern "C-unwind" fn barrier_wait_impl(
    b: *mut pthread_barrier_t,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here.
    unsafe {
        match thread::recorder() {
            None => return real_barrier_wait(b),
            Some(mut g) => {
                let t0 = tsc::now();
                guarded(|| {
                    emit(
                        &mut g,
                        Op::BarrierWait,
                        phase::BEGIN,
                        t0,
                        b as u64,
                        site,
                        fp,
                        0,
                        0,
                        false,
                    )
                });
            }
        }
        let rc = real_barrier_wait(b);
        if let Some(mut g) = thread::recorder() {
            let t1 = tsc::now_after();
            guarded(|| match rc {
                0 => emit(
                    &mut g,
                    Op::BarrierWait,
                    phase::DONE,
                    t1,
                    b as u64,
                    site,
                    fp,
                    0,
                    0,
                    true,
                ),
                libc::PTHREAD_BARRIER_SERIAL_THREAD => emit(
                    &mut g,
                    Op::BarrierWait,
                    phase::DONE,
                    t1,
                    b as u64,
                    site,
                    fp,
                    1,
                    0,
                    true,
                ),
                e => emit(
                    &mut g,
                    Op::BarrierWait,
                    phase::FAIL,
                    t1,
                    b as u64,
                    site,
                    fp,
                    e as u64,
                    0,
                    true,
                ),
            });
        }
        rc
    }
}

tramp!(pthread_barrier_wait(b: *mut pthread_barrier_t) -> c_int = barrier_wait_impl ["rsi", "rdx"]);

// ---- semaphores ----
// Like locks (trywait first), but errors come back in errno, which must
// look to the program exactly as without us: a failed trywait probe sets
// EAGAIN, so the caller's errno is put back before the real wait.

/// # Safety
/// `s` and `wait` carry what the program passed to the interposed wait.
unsafe fn sem_wait_common(
    op: Op,
    s: *mut sem_t,
    site: u64,
    fp: u64,
    wait: impl FnOnce() -> c_int,
) -> c_int {
    // SAFETY: `s` is the program's initialised semaphore (the contract of
    // the sem_wait/sem_timedwait it interposes): the real sem_trywait and
    // `wait` (the real blocking call with the program's arguments) get it
    // unchanged; the recorder records its address only.
    unsafe {
        let saved = errno();
        let t0;
        match thread::recorder() {
            None => return wait(),
            Some(mut g) => {
                // After the try, as in `acquire`: a sem_wait that succeeds
                // at once must be stamped after the sem_post it consumed.
                let rc = real_sem_trywait(s);
                t0 = tsc::now();
                if rc == 0 {
                    guarded(|| emit(&mut g, op, phase::DONE, t0, s as u64, site, fp, 0, 0, false));
                    return 0;
                }
                set_errno(saved);
                // About to block: the BEGIN keeps the call path, as the
                // lock's does (a wait that never returns has no other).
                guarded(|| emit(&mut g, op, phase::BEGIN, t0, s as u64, site, fp, 0, 0, true));
            }
        }
        let rc = wait();
        let e = errno();
        if let Some(mut g) = thread::recorder() {
            let t1 = tsc::now_after();
            let f = phase::CONTENDED | if rc == 0 { phase::DONE } else { phase::FAIL };
            let arg = if rc == 0 { 0 } else { e as u64 };
            guarded(|| emit(&mut g, op, f, t1, s as u64, site, fp, arg, 0, true));
        }
        set_errno(e);
        rc
    }
}

unsafe extern "C-unwind" fn sem_wait_impl(s: *mut sem_t, site: u64, fp: u64) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here.
    unsafe { sem_wait_common(Op::SemWait, s, site, fp, || real_sem_wait(s)) }
}

unsafe extern "C-unwind" fn sem_timedwait_impl(
    s: *mut sem_t,
    t: *const timespec,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here.
    unsafe { sem_wait_common(Op::SemTimedwait, s, site, fp, || real_sem_timedwait(s, t)) }
}

unsafe extern "C-unwind" fn sem_clockwait_impl(
    s: *mut sem_t,
    c: clockid_t,
    t: *const timespec,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here. Recorded as a timed wait: the
    // clock it measures its deadline on changes nothing the analysis reads.
    unsafe {
        sem_wait_common(Op::SemTimedwait, s, site, fp, || {
            real_sem_clockwait(s, c, t)
        })
    }
}

unsafe extern "C-unwind" fn sem_trywait_impl(s: *mut sem_t, site: u64, fp: u64) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here.
    unsafe {
        let Some(mut g) = thread::recorder() else {
            return real_sem_trywait(s);
        };
        let rc = real_sem_trywait(s);
        let e = errno();
        let t0 = tsc::now();
        guarded(|| {
            if rc == 0 {
                emit(
                    &mut g,
                    Op::SemTrywait,
                    phase::DONE,
                    t0,
                    s as u64,
                    site,
                    fp,
                    0,
                    0,
                    false,
                )
            } else {
                emit(
                    &mut g,
                    Op::SemTrywait,
                    phase::FAIL,
                    t0,
                    s as u64,
                    site,
                    fp,
                    e as u64,
                    0,
                    false,
                )
            }
        });
        set_errno(e);
        rc
    }
}

unsafe extern "C-unwind" fn sem_post_impl(s: *mut sem_t, site: u64, fp: u64) -> c_int {
    // SAFETY: the program's arguments reach the real function unchanged
    // (its contract, the interposed function's C contract, is the program's
    // to uphold); the recorder only records the object's address as a
    // number, never dereferencing it here.
    unsafe {
        let Some(mut g) = thread::recorder() else {
            return real_sem_post(s);
        };
        let t0 = tsc::now();
        let rc = real_sem_post(s);
        let e = errno();
        guarded(|| {
            if rc == 0 {
                emit(
                    &mut g,
                    Op::SemPost,
                    phase::DONE,
                    t0,
                    s as u64,
                    site,
                    fp,
                    0,
                    0,
                    false,
                )
            } else {
                emit(
                    &mut g,
                    Op::SemPost,
                    phase::FAIL,
                    t0,
                    s as u64,
                    site,
                    fp,
                    e as u64,
                    0,
                    false,
                )
            }
        });
        set_errno(e);
        rc
    }
}

tramp!(sem_wait(s: *mut sem_t) -> c_int = sem_wait_impl ["rsi", "rdx"]);
tramp!(sem_trywait(s: *mut sem_t) -> c_int = sem_trywait_impl ["rsi", "rdx"]);
tramp!(sem_timedwait(s: *mut sem_t, t: *const timespec) -> c_int = sem_timedwait_impl ["rdx", "rcx"]);
tramp!(sem_clockwait(s: *mut sem_t, c: clockid_t, t: *const timespec) -> c_int
    = sem_clockwait_impl ["rcx", "r8"]);
tramp!(sem_post(s: *mut sem_t) -> c_int = sem_post_impl ["rsi", "rdx"]);

/// Measures what the lock hooks add to an acquisition and to a release,
/// and stores it in the process header (the analysis subtracts it from
/// the program's work, see `process::set_hook_costs`). Run once by
/// `process::init` when recording starts (the cost probe).
///
/// Why measure the hooks themselves: the first figure, a loop of bare
/// ring pushes, leaves out the guard, the lock-word look, the clock
/// reads before and after the call, the run-queue sample check and the call
/// through. It said 20 ns per pair where the benchmark measures 40-45 ns
/// on the same machine, so every replay and report kept half the
/// recorder's cost as the program's own work (5 ms of 26 in a one-thread
/// run of `ulcp_table`).
///
/// What is timed: the recording protocol of the hooks (`acquire` and
/// `release`, exactly as the interposed functions run them) around a
/// stand-in for the lock (one atomic swap, one store), against the
/// stand-in alone, 9 interleaved rounds of 128 pairs, medians. Not the
/// real `pthread_mutex_lock`: an interposer loaded after ours would see
/// calls the program never made (the test with a user's lock shim
/// caught exactly that). The trampoline's jump and the recording check
/// before it (a few instructions) are not in the figure, nor the cost the
/// recorder's drain adds by reading the program's ring lines from
/// another core. The events go to a scratch ring, never to the trace:
/// 2,304 of them plus a run-queue delay sample, within its 3,072 slots.
pub(crate) fn measure_hook_costs() {
    use core::sync::atomic::{AtomicU32, Ordering};
    const PAIRS: u64 = 128;
    const ROUNDS: usize = 9;
    let r = thread::with_scratch_ring(|| {
        // A stand-in mutex: glibc's word layout (lock word at 0, owner at
        // 8), so that the hooks' looks read what they read in a real one.
        // Error-checking, not normal: under `lockscope run` the swap
        // library would take a normal one for one of its own and read the
        // stand-in's word as its algorithm's state (an HMCS tree pointer
        // of 1: a crash); it leaves error-checking ones to glibc, so the
        // looks still ask it (the figure includes that call) and then read
        // glibc's words, which the kind does not change.
        let mut m: pthread_mutex_t = libc::PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
        let mp = &mut m as *mut pthread_mutex_t;
        // SAFETY: the lock word of the local mutex above, 4-aligned.
        let word = unsafe { &*(mp as *const AtomicU32) };
        let lock = || word.swap(1, Ordering::Acquire) as c_int;
        let unlock = || {
            word.store(0, Ordering::Release);
            0
        };
        let mut base = [0u64; ROUNDS];
        let mut acq = [0u64; ROUNDS];
        let mut rel = [0u64; ROUNDS];
        let (addr, site) = (mp as u64, measure_hook_costs as *const () as u64);
        for r in 0..ROUNDS {
            let t0 = tsc::now();
            for _ in 0..PAIRS {
                core::hint::black_box(lock());
                core::hint::black_box(unlock());
            }
            let t1 = tsc::now();
            for _ in 0..PAIRS {
                if let Some(mut g) = thread::recorder() {
                    let mut ret = None;
                    // SAFETY: `mp` is the live local mutex above.
                    let held = unsafe { mutex_held(mp, g.tid()) };
                    guarded(|| {
                        acquire(
                            &mut g,
                            &mut ret,
                            Op::MutexLock,
                            addr,
                            site,
                            0,
                            held,
                            lock,
                            || {
                                // SAFETY: as above.
                                unsafe { mutex_has_waiters(mp) }
                            },
                        )
                    });
                }
                core::hint::black_box(unlock());
            }
            let t2 = tsc::now();
            for _ in 0..PAIRS {
                core::hint::black_box(lock());
                if let Some(mut g) = thread::recorder() {
                    let mut ret = None;
                    // SAFETY: as above.
                    let _ = core::hint::black_box(unsafe { mutex_has_waiters(mp) });
                    guarded(|| release(&mut g, &mut ret, Op::MutexUnlock, addr, site, 0, unlock));
                }
            }
            let t3 = tsc::now();
            base[r] = t1.wrapping_sub(t0);
            acq[r] = t2.wrapping_sub(t1);
            rel[r] = t3.wrapping_sub(t2);
        }
        let med = |v: &mut [u64; ROUNDS]| {
            v.sort_unstable();
            v[ROUNDS / 2]
        };
        let b = med(&mut base);
        (
            med(&mut acq).saturating_sub(b) / PAIRS,
            med(&mut rel).saturating_sub(b) / PAIRS,
        )
    });
    if let Some((acq, rel)) = r {
        if acq > 0 && rel > 0 {
            process::set_hook_costs(acq, rel);
        }
    }
}
