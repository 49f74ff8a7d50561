//! `liblockscope_swap.so`: run an unmodified program with its pthread
//! mutexes replaced by a lock algorithm of `lockscope-locks`.
//!
//! Purpose: `lockscope run --lock ALGORITHM -- PROGRAM` preloads this
//! library (LD_PRELOAD) so that a recommended lock can be tried in one
//! command and measured, alone or under `lockscope record`.
//!
//! Entry points (all `extern "C"`, interposed by the dynamic linker):
//! `pthread_mutex_{init,destroy,lock,trylock,timedlock,clocklock,unlock}`
//! and `pthread_cond_{wait,timedwait,clockwait,signal,broadcast}` (the
//! condvar ones exported as `@@GLIBC_2.3.2`, like glibc's, so that a
//! preload in front of us that looks them up with `dlvsym` finds ours).
//! Configuration comes from the environment, set by the CLI:
//! `LOCKSCOPE_LOCK` (algorithm name or `pthread`), `LOCKSCOPE_WAIT`
//! (`spin` | `spin-then-park`), `LOCKSCOPE_HIERARCHY` (hand-given HMCS
//! hierarchy, e.g. `2x2x2:8,4,2`), `LOCKSCOPE_VERBOSE=1` (print a summary
//! line to stderr at exit).
//!
//! Design constraints:
//! - The lock lives inside the program's `pthread_mutex_t` (40 bytes): every
//!   algorithm's state fits in its first 16 bytes and is valid when all
//!   zero, so `PTHREAD_MUTEX_INITIALIZER` mutexes work on first use without
//!   any init call and no side table is needed. Byte 16 (`__kind`) is left
//!   untouched and tells our mutexes (kind normal/adaptive: 0 or 3) from
//!   those we leave to glibc.
//! - Mutexes whose type or attributes we do not implement (recursive,
//!   error-checking, robust, process-shared, priority protocols) are left to
//!   the real glibc functions, whole: they never see our code, so their
//!   semantics (and deadlock-freedom on recursion) are glibc's. They are
//!   counted and reported.
//! - Real functions are resolved lazily with `dlsym(RTLD_NEXT)` in every
//!   hook (hooks may run before this library's constructor). Configuration
//!   is read on first use by a path that takes no pthread mutex.
//! - No allocation on the lock/unlock path: queue nodes come from a
//!   per-thread pool; an HMCS tree is allocated once per mutex, on first use.
//! - Every hook runs inside `catch_unwind`: a bug must not unwind into C.
//! - Condition variables: see [`cond`] for the approach and why.

#![deny(missing_docs)]

pub mod cond;
mod real;
mod stats;

use libc::{c_int, clockid_t, pthread_mutex_t, pthread_mutexattr_t, timespec};
use lockscope_locks::dynlock::{ops, LockOps};
use lockscope_locks::{Algorithm, Hierarchy, WaitPolicy};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU8, Ordering};

/// Offset of glibc's `__kind` in `pthread_mutex_t` (x86-64 and aarch64).
const KIND_OFFSET: usize = 16;
/// Offset of our "already counted" flag, in the part of the mutex glibc
/// uses only for robust mutexes (which are never ours).
const FLAGS_OFFSET: usize = 24;
/// glibc's elision hints, which do not change a mutex's semantics.
const KIND_ELISION_BITS: c_int = 256 | 512;
const KIND_NORMAL: c_int = 0;
const KIND_ADAPTIVE: c_int = 3;

const _: () = assert!(std::mem::size_of::<pthread_mutex_t>() >= 40);
const _: () = assert!(lockscope_locks::dynlock::STATE_BYTES <= KIND_OFFSET);

// ------------------------------------------------------------ configuration

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const READY: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// The lock in use; null means `--lock pthread` (everything forwarded).
static OPS: AtomicPtr<LockOps> = AtomicPtr::new(std::ptr::null_mut());

/// Reads the configuration once. Takes no pthread mutex (getenv, parsing,
/// a futex-based OnceLock in lockscope-locks), so it cannot re-enter a hook.
#[cold]
fn init_slow() {
    if STATE
        .compare_exchange(UNINIT, INITIALIZING, Ordering::Acquire, Ordering::Acquire)
        .is_err()
    {
        // Another thread is reading the configuration: it takes no lock,
        // so this wait is short.
        while STATE.load(Ordering::Acquire) != READY {
            std::hint::spin_loop();
        }
        return;
    }
    let cfg = read_config();
    stats::set_verbose(env("LOCKSCOPE_VERBOSE").is_some_and(|v| v != "0" && !v.is_empty()));
    match cfg {
        Ok(Some(o)) => OPS.store(o as *const LockOps as *mut LockOps, Ordering::Release),
        Ok(None) => {}
        Err(msg) => stats::warn(&format!(
            "lockscope-swap: {msg}; running with the original pthread mutexes\n"
        )),
    }
    stats::register_exit_report();
    STATE.store(READY, Ordering::Release);
}

fn env(name: &str) -> Option<String> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getenv with a valid C string; the result is copied at once.
    let p = unsafe { libc::getenv(c.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: getenv returns a NUL-terminated string.
    Some(
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned(),
    )
}

fn read_config() -> Result<Option<&'static LockOps>, String> {
    let lock = env("LOCKSCOPE_LOCK").unwrap_or_else(|| "pthread".into());
    if lock.trim() == "pthread" {
        return Ok(None);
    }
    let alg: Algorithm = lock
        .parse()
        .map_err(|e: lockscope_locks::Error| e.to_string())?;
    let wait: WaitPolicy = match env("LOCKSCOPE_WAIT") {
        Some(w) => w
            .parse()
            .map_err(|e: lockscope_locks::Error| e.to_string())?,
        None => WaitPolicy::SpinThenPark,
    };
    if let Some(spec) = env("LOCKSCOPE_HIERARCHY").filter(|s| !s.trim().is_empty()) {
        let h = Hierarchy::parse(&spec).map_err(|e| e.to_string())?;
        // Only fails if set before, which cannot happen: we run once.
        let _ = lockscope_locks::set_default_hierarchy(h);
    }
    Ok(Some(ops(alg, wait)))
}

#[inline(always)]
fn current_ops() -> Option<&'static LockOps> {
    if STATE.load(Ordering::Acquire) != READY {
        init_slow();
    }
    let p = OPS.load(Ordering::Relaxed);
    // SAFETY: OPS only ever holds null or a &'static LockOps.
    unsafe { p.as_ref() }
}

/// Which implementation a mutex uses.
#[inline(always)]
unsafe fn ours(m: *mut pthread_mutex_t) -> Option<&'static LockOps> {
    let o = current_ops()?;
    let kind = std::ptr::read_volatile((m as *const u8).add(KIND_OFFSET) as *const c_int)
        & !KIND_ELISION_BITS;
    if kind == KIND_NORMAL || kind == KIND_ADAPTIVE {
        Some(o)
    } else {
        None
    }
}

#[inline(always)]
unsafe fn flags<'a>(m: *mut pthread_mutex_t) -> &'a AtomicU32 {
    &*((m as *const u8).add(FLAGS_OFFSET) as *const AtomicU32)
}

/// Counts a mutex the first time we see it (static initialisers have no
/// init call).
#[inline(always)]
unsafe fn note_use(m: *mut pthread_mutex_t) {
    let f = flags(m);
    if f.load(Ordering::Relaxed) == 0 && f.swap(1, Ordering::Relaxed) == 0 {
        stats::replaced();
    }
}

/// Runs a hook body, turning a panic into `err` instead of unwinding into C.
#[inline(always)]
fn guard(err: c_int, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => err,
    }
}

// ------------------------------------------------------------ mutex hooks

/// Interposed `pthread_mutex_init`.
///
/// # Safety
/// C contract of `pthread_mutex_init`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_init(
    m: *mut pthread_mutex_t,
    attr: *const pthread_mutexattr_t,
) -> c_int {
    guard(libc::EINVAL, || {
        if m.is_null() {
            return libc::EINVAL;
        }
        let real = real::get();
        if current_ops().is_none() {
            return (real.mutex_init)(m, attr);
        }
        if !attr.is_null() {
            // Let glibc interpret the attributes on a scratch mutex, then
            // look at the kind it chose.
            let mut tmp: pthread_mutex_t = std::mem::zeroed();
            let r = (real.mutex_init)(&mut tmp, attr);
            if r != 0 {
                return r;
            }
            let kind =
                std::ptr::read((&tmp as *const _ as *const u8).add(KIND_OFFSET) as *const c_int)
                    & !KIND_ELISION_BITS;
            if kind != KIND_NORMAL && kind != KIND_ADAPTIVE {
                stats::left_to_glibc();
                return (real.mutex_init)(m, attr);
            }
        }
        std::ptr::write_bytes(m as *mut u8, 0, std::mem::size_of::<pthread_mutex_t>());
        flags(m).store(1, Ordering::Relaxed);
        stats::replaced();
        0
    })
}

/// Interposed `pthread_mutex_destroy`.
///
/// # Safety
/// C contract of `pthread_mutex_destroy`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_destroy(m: *mut pthread_mutex_t) -> c_int {
    guard(libc::EINVAL, || {
        if m.is_null() {
            return libc::EINVAL;
        }
        match ours(m) {
            Some(o) => {
                // Like glibc: destroying a held mutex is refused (and must
                // not free an HMCS tree that a holder still walks).
                if !(o.try_lock)(m as *const u8) {
                    return libc::EBUSY;
                }
                (o.unlock)(m as *const u8);
                (o.reset)(m as *mut u8);
                flags(m).store(0, Ordering::Relaxed);
                0
            }
            None => (real::get().mutex_destroy)(m),
        }
    })
}

/// Interposed `pthread_mutex_lock`.
///
/// # Safety
/// C contract of `pthread_mutex_lock`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int {
    guard(libc::EINVAL, || {
        if m.is_null() {
            return libc::EINVAL;
        }
        match ours(m) {
            Some(o) => {
                note_use(m);
                (o.lock)(m as *const u8);
                stats::acquired(stats::Op::Lock);
                0
            }
            None => {
                let r = (real::get().mutex_lock)(m);
                if r == 0 {
                    stats::acquired(stats::Op::Lock);
                }
                r
            }
        }
    })
}

/// Interposed `pthread_mutex_trylock`.
///
/// # Safety
/// C contract of `pthread_mutex_trylock`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int {
    guard(libc::EINVAL, || {
        if m.is_null() {
            return libc::EINVAL;
        }
        let r = match ours(m) {
            Some(o) => {
                note_use(m);
                if (o.try_lock)(m as *const u8) {
                    0
                } else {
                    libc::EBUSY
                }
            }
            None => (real::get().mutex_trylock)(m),
        };
        if r == 0 {
            stats::acquired(stats::Op::Trylock);
        }
        r
    })
}

/// Converts an absolute time on `clock` to an `Instant` deadline; None if
/// the time is invalid (EINVAL).
unsafe fn deadline(clock: clockid_t, abstime: *const timespec) -> Option<std::time::Instant> {
    if abstime.is_null() {
        return None;
    }
    let t = &*abstime;
    if t.tv_nsec < 0 || t.tv_nsec >= 1_000_000_000 {
        return None;
    }
    let mut now: timespec = std::mem::zeroed();
    if libc::clock_gettime(clock, &mut now) != 0 {
        return None;
    }
    let to_ns = |s: &timespec| s.tv_sec as i128 * 1_000_000_000 + s.tv_nsec as i128;
    let left = (to_ns(t) - to_ns(&now)).max(0);
    let left = std::time::Duration::from_nanos(left.min(u64::MAX as i128 / 2) as u64);
    Some(
        std::time::Instant::now()
            .checked_add(left)
            .unwrap_or_else(|| std::time::Instant::now() + std::time::Duration::from_secs(1 << 32)),
    )
}

unsafe fn timed(
    o: &LockOps,
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    note_use(m);
    // POSIX: the time is only checked if the lock is not free right now.
    if (o.try_lock)(m as *const u8) {
        return 0;
    }
    match deadline(clock, abstime) {
        None => libc::EINVAL,
        Some(d) => {
            if (o.try_lock_until)(m as *const u8, d) {
                0
            } else {
                libc::ETIMEDOUT
            }
        }
    }
}

/// Interposed `pthread_mutex_timedlock` (absolute CLOCK_REALTIME time).
///
/// # Safety
/// C contract of `pthread_mutex_timedlock`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_timedlock(
    m: *mut pthread_mutex_t,
    abstime: *const timespec,
) -> c_int {
    guard(libc::EINVAL, || {
        if m.is_null() {
            return libc::EINVAL;
        }
        let r = match ours(m) {
            Some(o) => timed(o, m, libc::CLOCK_REALTIME, abstime),
            None => (real::get().mutex_timedlock)(m, abstime),
        };
        if r == 0 {
            stats::acquired(stats::Op::Timedlock);
        }
        r
    })
}

/// Interposed `pthread_mutex_clocklock` (glibc 2.30+).
///
/// # Safety
/// C contract of `pthread_mutex_clocklock`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_clocklock(
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    guard(libc::EINVAL, || {
        if m.is_null() {
            return libc::EINVAL;
        }
        let r = match ours(m) {
            Some(o) => {
                if clock != libc::CLOCK_REALTIME && clock != libc::CLOCK_MONOTONIC {
                    return libc::EINVAL;
                }
                timed(o, m, clock, abstime)
            }
            None => match real::get().mutex_clocklock {
                Some(f) => f(m, clock, abstime),
                None => libc::ENOSYS,
            },
        };
        if r == 0 {
            stats::acquired(stats::Op::Timedlock);
        }
        r
    })
}

/// Interposed `pthread_mutex_unlock`.
///
/// # Safety
/// C contract of `pthread_mutex_unlock`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int {
    guard(libc::EINVAL, || {
        if m.is_null() {
            return libc::EINVAL;
        }
        match ours(m) {
            Some(o) => {
                (o.unlock)(m as *const u8);
                0
            }
            None => (real::get().mutex_unlock)(m),
        }
    })
}

/// Releases a mutex for the condvar code, whichever implementation it uses.
pub(crate) unsafe fn unlock_any(m: *mut pthread_mutex_t) -> c_int {
    pthread_mutex_unlock(m)
}

/// Acquires a mutex for the condvar code without counting an acquisition.
pub(crate) unsafe fn relock_ours(o: &LockOps, m: *mut pthread_mutex_t) {
    (o.lock)(m as *const u8)
}

/// Whether `m` is one of ours, and with which operations.
pub(crate) unsafe fn ours_for_cond(m: *mut pthread_mutex_t) -> Option<&'static LockOps> {
    ours(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_initialisers_are_ours_and_recursive_ones_are_not() {
        // Without LOCKSCOPE_LOCK set the library forwards everything, so
        // check the classification on raw bytes instead.
        let normal: pthread_mutex_t = libc::PTHREAD_MUTEX_INITIALIZER;
        let rec: pthread_mutex_t = libc::PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
        let kind = |m: &pthread_mutex_t| unsafe {
            std::ptr::read((m as *const _ as *const u8).add(KIND_OFFSET) as *const c_int)
                & !KIND_ELISION_BITS
        };
        assert_eq!(kind(&normal), KIND_NORMAL);
        assert_eq!(kind(&rec), 1);
        let adaptive: pthread_mutex_t = libc::PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
        assert_eq!(kind(&adaptive), KIND_ADAPTIVE);
    }

    #[test]
    fn deadline_rejects_bad_times() {
        unsafe {
            assert!(deadline(libc::CLOCK_REALTIME, std::ptr::null()).is_none());
            let bad = timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000_000,
            };
            assert!(deadline(libc::CLOCK_REALTIME, &bad).is_none());
            let past = timespec {
                tv_sec: 1,
                tv_nsec: 0,
            };
            let d = deadline(libc::CLOCK_REALTIME, &past).unwrap();
            assert!(d <= std::time::Instant::now());
        }
    }
}
