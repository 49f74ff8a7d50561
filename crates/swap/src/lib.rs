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
//! - Every hook runs inside `catch_unwind`: a bug must not unwind into C,
//!   and a caught panic still performs the operation the program asked for
//!   (see `guard`): never an error the program would not have got.
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
    // A panic while reading the configuration (a bug of ours) must neither
    // leave the other threads spinning on INITIALIZING nor reach the
    // program: the mutexes then stay glibc's (OPS stays null), which is
    // consistent because no mutex has been ours yet.
    let configured = catch_unwind(|| {
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
    });
    if configured.is_err() {
        OPS.store(std::ptr::null_mut(), Ordering::Release);
        stats::panicked();
    }
    STATE.store(READY, Ordering::Release);
}

fn env(name: &str) -> Option<String> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getenv with a valid NUL-terminated C string; the result is
    // copied at once (nothing in this library calls setenv).
    let p = unsafe { libc::getenv(c.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: getenv returned a non-null pointer to a NUL-terminated
    // string that stays valid until the environment changes.
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
    // SAFETY: OPS only ever holds null or a pointer made from a
    // &'static LockOps (init_slow).
    unsafe { p.as_ref() }
}

/// Reads glibc's `__kind` of `m`, without the elision hints.
///
/// # Safety
/// `m` points to a readable `pthread_mutex_t`.
#[inline(always)]
unsafe fn kind_of(m: *const pthread_mutex_t) -> c_int {
    // SAFETY: the caller's contract: `m` is a readable pthread_mutex_t,
    // which is at least 40 bytes (checked at compile time above), so the
    // int at KIND_OFFSET is inside it and aligned (offset 16 of an
    // 8-aligned object). Volatile: another thread may be initialising it.
    let kind = unsafe { std::ptr::read_volatile(m.cast::<u8>().add(KIND_OFFSET).cast::<c_int>()) };
    kind & !KIND_ELISION_BITS
}

/// Which implementation a mutex uses.
///
/// # Safety
/// `m` points to a readable `pthread_mutex_t`.
#[inline(always)]
unsafe fn ours(m: *mut pthread_mutex_t) -> Option<&'static LockOps> {
    let o = current_ops()?;
    // SAFETY: the caller's contract.
    let kind = unsafe { kind_of(m) };
    if kind == KIND_NORMAL || kind == KIND_ADAPTIVE {
        Some(o)
    } else {
        None
    }
}

/// Our "already counted" flag inside `m`.
///
/// # Safety
/// `m` points to a live `pthread_mutex_t` that is one of ours (glibc uses
/// the flag's bytes only for robust mutexes, which are never ours), and
/// outlives `'a`.
#[inline(always)]
unsafe fn flags<'a>(m: *mut pthread_mutex_t) -> &'a AtomicU32 {
    // SAFETY: FLAGS_OFFSET + 4 <= 40 <= size_of::<pthread_mutex_t>() and
    // the offset is 4-aligned in an 8-aligned object, so this is an aligned
    // u32 inside the mutex; only this library touches it (see above), and
    // only atomically.
    unsafe { &*(m.cast::<u8>().add(FLAGS_OFFSET).cast::<AtomicU32>()) }
}

/// Counts a mutex the first time we see it (static initialisers have no
/// init call).
///
/// # Safety
/// As [`flags`].
#[inline(always)]
unsafe fn note_use(m: *mut pthread_mutex_t) {
    // SAFETY: the caller's contract.
    let f = unsafe { flags(m) };
    if f.load(Ordering::Relaxed) == 0 && f.swap(1, Ordering::Relaxed) == 0 {
        stats::replaced();
    }
}

/// Runs a hook. `body` is the operation with its bookkeeping; if it
/// panics (a bug of ours), the panic is counted and reported once, and
/// `plain` performs the operation the program asked for by the shortest
/// path, without the bookkeeping. Returning an error instead would be
/// wrong: a program whose `pthread_mutex_lock` fails with EINVAL usually
/// does not check, and would run its critical section unprotected.
///
/// Re-running the operation is safe because the operations themselves
/// (the algorithms of lockscope-locks, glibc's functions) do not panic:
/// they are atomics and futex calls, and allocation failure aborts. A
/// caught panic therefore comes from our code around them, before the
/// operation started; bookkeeping that runs after it goes through
/// [`after`] instead, so that a panic there cannot repeat an acquisition.
/// If `plain` panics too, the process aborts with a message: there is no
/// way left to do what the program asked.
#[inline(always)]
fn guard(body: impl FnOnce() -> c_int, plain: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(_) => {
            stats::panicked();
            match catch_unwind(AssertUnwindSafe(plain)) {
                Ok(r) => r,
                Err(_) => stats::die(
                    "lockscope-swap: internal error: a pthread operation cannot be performed; aborting\n",
                ),
            }
        }
    }
}

/// Bookkeeping after an operation has been performed: a panic in it is
/// counted and otherwise ignored (the operation must not run again).
#[inline(always)]
fn after(f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        stats::panicked();
    }
}

/// Test-only fault injection: makes the next hook body (or the
/// bookkeeping after the operation) of the calling thread panic.
#[cfg(test)]
mod fault {
    use std::cell::Cell;

    /// Where to panic.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub(crate) enum At {
        /// Nowhere.
        Nowhere,
        /// At the start of the hook body, before the operation.
        Body,
        /// In the bookkeeping after the operation.
        After,
    }

    std::thread_local! {
        static AT: Cell<At> = const { Cell::new(At::Nowhere) };
    }

    pub(crate) fn arm(at: At) {
        AT.with(|a| a.set(at));
    }

    pub(crate) fn point(here: At) {
        if AT.with(|a| a.get()) == here {
            AT.with(|a| a.set(At::Nowhere));
            panic!("injected fault ({here:?})");
        }
    }
}

// ------------------------------------------------------------ mutex hooks

/// `pthread_mutex_init` without bookkeeping: glibc's initialisation of a
/// normal or adaptive mutex leaves its first 16 bytes zero, which is an
/// unlocked lock of every algorithm, so the result is also a valid mutex
/// of ours.
///
/// # Safety
/// C contract of `pthread_mutex_init`.
unsafe fn init_plain(m: *mut pthread_mutex_t, attr: *const pthread_mutexattr_t) -> c_int {
    // SAFETY: the caller's contract is the real function's.
    unsafe { (real::get().mutex_init)(m, attr) }
}

/// Interposed `pthread_mutex_init`.
///
/// # Safety
/// C contract of `pthread_mutex_init`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_init(
    m: *mut pthread_mutex_t,
    attr: *const pthread_mutexattr_t,
) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    guard(
        // SAFETY: the caller's contract (C contract of
        // pthread_mutex_init, `m` not null).
        || unsafe {
            #[cfg(test)]
            fault::point(fault::At::Body);
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
                let kind = kind_of(&tmp);
                if kind != KIND_NORMAL && kind != KIND_ADAPTIVE {
                    stats::left_to_glibc();
                    return (real.mutex_init)(m, attr);
                }
            }
            std::ptr::write_bytes(m.cast::<u8>(), 0, std::mem::size_of::<pthread_mutex_t>());
            flags(m).store(1, Ordering::Relaxed);
            stats::replaced();
            0
        },
        // SAFETY: as above.
        || unsafe { init_plain(m, attr) },
    )
}

/// Interposed `pthread_mutex_destroy`.
///
/// # Safety
/// C contract of `pthread_mutex_destroy`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_destroy(m: *mut pthread_mutex_t) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    guard(
        // SAFETY: the caller's contract (C contract of
        // pthread_mutex_destroy, `m` not null); `o` is the table of the
        // algorithm whose state `m` holds.
        || unsafe {
            #[cfg(test)]
            fault::point(fault::At::Body);
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
        },
        // Without bookkeeping: one of ours is left as it is (an HMCS tree
        // leaks, which changes nothing the program computes; freeing it
        // after a failure half-way could free it twice).
        // SAFETY: the caller's contract.
        || unsafe {
            match ours(m) {
                Some(_) => 0,
                None => (real::get().mutex_destroy)(m),
            }
        },
    )
}

/// Acquires `m` by the shortest path.
///
/// # Safety
/// C contract of `pthread_mutex_lock`, `m` not null.
unsafe fn lock_plain(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: the caller's contract; `o` is the table of the algorithm
    // whose state `m` holds.
    unsafe {
        match ours(m) {
            Some(o) => {
                (o.lock)(m as *const u8);
                0
            }
            None => (real::get().mutex_lock)(m),
        }
    }
}

/// The body shared by the interposed `pthread_mutex_lock` and
/// `pthread_mutex_trylock`: `plain` acquires by the shortest path (ours
/// or glibc's); a panic in the bookkeeping still performs it (see
/// `guard`), and a success is counted as `op`.
///
/// # Safety
/// C contract of the interposed function.
unsafe fn acquire_hooked(
    m: *mut pthread_mutex_t,
    plain: unsafe fn(*mut pthread_mutex_t) -> c_int,
    op: stats::Op,
) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    let r = guard(
        // SAFETY: the caller's contract, `m` not null.
        || unsafe {
            #[cfg(test)]
            fault::point(fault::At::Body);
            if ours(m).is_some() {
                note_use(m);
            }
            plain(m)
        },
        // SAFETY: as above.
        || unsafe { plain(m) },
    );
    if r == 0 {
        after(|| {
            #[cfg(test)]
            fault::point(fault::At::After);
            stats::acquired(op)
        });
    }
    r
}

/// Interposed `pthread_mutex_lock`.
///
/// # Safety
/// C contract of `pthread_mutex_lock`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { acquire_hooked(m, lock_plain, stats::Op::Lock) }
}

/// Tries to acquire `m` by the shortest path.
///
/// # Safety
/// C contract of `pthread_mutex_trylock`, `m` not null.
unsafe fn trylock_plain(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: the caller's contract; `o` is the table of the algorithm
    // whose state `m` holds.
    unsafe {
        match ours(m) {
            Some(o) => {
                if (o.try_lock)(m as *const u8) {
                    0
                } else {
                    libc::EBUSY
                }
            }
            None => (real::get().mutex_trylock)(m),
        }
    }
}

/// Interposed `pthread_mutex_trylock`.
///
/// # Safety
/// C contract of `pthread_mutex_trylock`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { acquire_hooked(m, trylock_plain, stats::Op::Trylock) }
}

/// Converts an absolute time on `clock` to an `Instant` deadline; None if
/// the time is invalid (EINVAL).
///
/// # Safety
/// `abstime` is null or points to a readable `timespec`.
unsafe fn deadline(clock: clockid_t, abstime: *const timespec) -> Option<std::time::Instant> {
    // SAFETY: the caller's contract.
    let t = unsafe { abstime.as_ref() }?;
    if t.tv_nsec < 0 || t.tv_nsec >= 1_000_000_000 {
        return None;
    }
    let mut now = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write; an unknown clock is
    // reported as an error, not undefined behaviour.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
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

/// A timed acquisition of one of ours.
///
/// # Safety
/// `m` holds a lock of `o`'s algorithm; `abstime` as in [`deadline`].
unsafe fn timed(
    o: &LockOps,
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    // POSIX: the time is only checked if the lock is not free right now.
    // SAFETY: the caller's contract.
    if unsafe { (o.try_lock)(m as *const u8) } {
        return 0;
    }
    // SAFETY: the caller's contract.
    match unsafe { deadline(clock, abstime) } {
        None => libc::EINVAL,
        Some(d) => {
            // SAFETY: the caller's contract.
            if unsafe { (o.try_lock_until)(m as *const u8, d) } {
                0
            } else {
                libc::ETIMEDOUT
            }
        }
    }
}

/// `pthread_mutex_timedlock` by the shortest path.
///
/// # Safety
/// C contract of `pthread_mutex_timedlock`, `m` not null.
unsafe fn timedlock_plain(m: *mut pthread_mutex_t, abstime: *const timespec) -> c_int {
    // SAFETY: the caller's contract; `o` is the table of the algorithm
    // whose state `m` holds.
    unsafe {
        match ours(m) {
            Some(o) => timed(o, m, libc::CLOCK_REALTIME, abstime),
            None => (real::get().mutex_timedlock)(m, abstime),
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
    if m.is_null() {
        return libc::EINVAL;
    }
    let r = guard(
        // SAFETY: the caller's contract, `m` not null.
        || unsafe {
            #[cfg(test)]
            fault::point(fault::At::Body);
            if ours(m).is_some() {
                note_use(m);
            }
            timedlock_plain(m, abstime)
        },
        // SAFETY: as above.
        || unsafe { timedlock_plain(m, abstime) },
    );
    if r == 0 {
        after(|| stats::acquired(stats::Op::Timedlock));
    }
    r
}

/// `pthread_mutex_clocklock` by the shortest path.
///
/// # Safety
/// C contract of `pthread_mutex_clocklock`, `m` not null.
unsafe fn clocklock_plain(
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    // SAFETY: the caller's contract; `o` is the table of the algorithm
    // whose state `m` holds.
    unsafe {
        match ours(m) {
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
        }
    }
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
    if m.is_null() {
        return libc::EINVAL;
    }
    let r = guard(
        // SAFETY: the caller's contract, `m` not null.
        || unsafe {
            #[cfg(test)]
            fault::point(fault::At::Body);
            if ours(m).is_some() {
                note_use(m);
            }
            clocklock_plain(m, clock, abstime)
        },
        // SAFETY: as above.
        || unsafe { clocklock_plain(m, clock, abstime) },
    );
    if r == 0 {
        after(|| stats::acquired(stats::Op::Timedlock));
    }
    r
}

/// Releases `m` (the plain operation: an unlock has no bookkeeping).
///
/// # Safety
/// C contract of `pthread_mutex_unlock`, `m` not null.
unsafe fn unlock_plain(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: the caller's contract; `o` is the table of the algorithm
    // whose state `m` holds.
    unsafe {
        match ours(m) {
            Some(o) => {
                (o.unlock)(m as *const u8);
                0
            }
            None => (real::get().mutex_unlock)(m),
        }
    }
}

/// Interposed `pthread_mutex_unlock`.
///
/// # Safety
/// C contract of `pthread_mutex_unlock`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    guard(
        // SAFETY: the caller's contract, `m` not null.
        || unsafe {
            #[cfg(test)]
            fault::point(fault::At::Body);
            unlock_plain(m)
        },
        // SAFETY: as above.
        || unsafe { unlock_plain(m) },
    )
}

/// Releases a mutex for the condvar code, whichever implementation it uses.
///
/// # Safety
/// C contract of `pthread_mutex_unlock`.
pub(crate) unsafe fn unlock_any(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { pthread_mutex_unlock(m) }
}

/// Acquires a mutex for the condvar code without counting an acquisition.
///
/// # Safety
/// `m` holds a lock of `o`'s algorithm.
pub(crate) unsafe fn relock_ours(o: &LockOps, m: *mut pthread_mutex_t) {
    // SAFETY: the caller's contract.
    unsafe { (o.lock)(m as *const u8) }
}

/// Whether `m` is one of ours, and with which operations.
///
/// # Safety
/// `m` points to a readable `pthread_mutex_t`.
pub(crate) unsafe fn ours_for_cond(m: *mut pthread_mutex_t) -> Option<&'static LockOps> {
    // SAFETY: the caller's contract.
    unsafe { ours(m) }
}

// ------------------------------------------------------ for the recorder

/// The lock that replaces the pthread mutexes, as a NUL-terminated name
/// (`ttas`, or `ttas, spin` with the busy-waiting policy), or null when
/// they are glibc's (`--lock pthread`, or a configuration that could not
/// be read). `lockscope record`'s preload library, loaded in front of
/// this one, asks it (`dlsym`) to name the mutexes it records with their
/// algorithm.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn lockscope_swap_lock_name() -> *const libc::c_char {
    macro_rules! names {
        ($($alg:ident => $name:literal),*) => {
            match current_ops().map(|o| (o.algorithm, o.wait)) {
                None => std::ptr::null(),
                $(
                    Some((Algorithm::$alg, WaitPolicy::SpinThenPark)) => concat!($name, "\0").as_ptr().cast(),
                    Some((Algorithm::$alg, WaitPolicy::Spin)) => concat!($name, ", spin\0").as_ptr().cast(),
                )*
            }
        };
    }
    // Spelled out rather than formatted: no allocation, and a string that
    // lives as long as the library.
    names!(Tas => "tas", Ttas => "ttas", Ticket => "ticket", Mcs => "mcs", Clh => "clh",
        Cmcs => "cmcs", Hmcs => "hmcs", Ahmcs => "ahmcs")
}

/// Whether a lock call on `m` now would wait: 1 if `m` is one of our
/// mutexes and is held (or has a queue), 0 if it is ours and free, -1 if
/// it is not ours (glibc's: its own words tell). The recorder reads it
/// before each mutex lock call, as it reads a glibc mutex's lock word:
/// our algorithms keep other state there (a queue tail, tickets), which
/// read as glibc's would say "held" for every acquisition of a ticket or
/// CLH lock.
///
/// # Safety
/// `m` points to a readable `pthread_mutex_t` (the one the program passes
/// to `pthread_mutex_lock`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn lockscope_swap_mutex_busy(m: *mut pthread_mutex_t) -> c_int {
    if m.is_null() {
        return -1;
    }
    // SAFETY: the caller's contract; `o` is the table of the algorithm
    // whose state `m` holds, and is_locked only loads its atomics.
    unsafe {
        match ours(m) {
            Some(o) => c_int::from((o.is_locked)(m as *const u8)),
            None => -1,
        }
    }
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
        // SAFETY: a valid mutex.
        let kind = |m: &pthread_mutex_t| unsafe { kind_of(m) };
        assert_eq!(kind(&normal), KIND_NORMAL);
        assert_eq!(kind(&rec), 1);
        let adaptive: pthread_mutex_t = libc::PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
        assert_eq!(kind(&adaptive), KIND_ADAPTIVE);
    }

    #[test]
    fn deadline_rejects_bad_times() {
        // SAFETY: null or valid timespecs.
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

    /// Makes this library use MCS for its mutexes, as `LOCKSCOPE_LOCK=mcs`
    /// would (idempotent: every test that needs it sets the same).
    fn use_mcs() {
        let o = ops(Algorithm::Mcs, WaitPolicy::SpinThenPark);
        OPS.store(o as *const LockOps as *mut LockOps, Ordering::Release);
        STATE.store(READY, Ordering::Release);
    }

    /// What a trylock of `m` from another thread returns (the calling
    /// thread's own trylock would say nothing about ownership).
    fn trylock_elsewhere(m: *mut pthread_mutex_t) -> c_int {
        let addr = m as usize;
        std::thread::spawn(move || {
            let m = addr as *mut pthread_mutex_t;
            // SAFETY: `m` outlives this thread (joined below).
            let r = unsafe { pthread_mutex_trylock(m) };
            if r == 0 {
                // SAFETY: just acquired by this thread.
                unsafe { pthread_mutex_unlock(m) };
            }
            r
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_panic_in_a_hook_still_takes_the_lock() {
        use_mcs();
        for mut m in [
            // Ours (MCS) ...
            libc::PTHREAD_MUTEX_INITIALIZER,
            // ... and one left to glibc.
            libc::PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP,
        ] {
            let m = &mut m as *mut pthread_mutex_t;
            let before = stats::panics();
            fault::arm(fault::At::Body);
            // SAFETY: a valid, unlocked mutex.
            assert_eq!(unsafe { pthread_mutex_lock(m) }, 0);
            assert!(
                stats::panics() > before,
                "the injected panic was not caught"
            );
            assert_eq!(trylock_elsewhere(m), libc::EBUSY, "the lock was not taken");
            fault::arm(fault::At::Body);
            // SAFETY: held by this thread.
            assert_eq!(unsafe { pthread_mutex_unlock(m) }, 0);
            assert_eq!(trylock_elsewhere(m), 0, "the lock was not released");
            fault::arm(fault::At::Body);
            // SAFETY: a valid, unlocked mutex.
            assert_eq!(unsafe { pthread_mutex_trylock(m) }, 0);
            assert_eq!(trylock_elsewhere(m), libc::EBUSY);
            // SAFETY: held by this thread.
            assert_eq!(unsafe { pthread_mutex_unlock(m) }, 0);
        }
    }

    #[test]
    fn a_panic_after_the_acquisition_does_not_acquire_twice() {
        use_mcs();
        let mut m = libc::PTHREAD_MUTEX_INITIALIZER;
        let m = &mut m as *mut pthread_mutex_t;
        let before = stats::panics();
        fault::arm(fault::At::After);
        // SAFETY: a valid, unlocked mutex. Acquiring twice would deadlock
        // this (non-recursive) lock, so returning at all is the check.
        assert_eq!(unsafe { pthread_mutex_lock(m) }, 0);
        assert!(stats::panics() > before);
        assert_eq!(trylock_elsewhere(m), libc::EBUSY);
        // SAFETY: held once by this thread.
        assert_eq!(unsafe { pthread_mutex_unlock(m) }, 0);
        assert_eq!(trylock_elsewhere(m), 0);
    }

    #[test]
    fn a_panic_in_a_condvar_wait_still_waits_and_relocks() {
        use_mcs();
        let mut m = libc::PTHREAD_MUTEX_INITIALIZER;
        let mut c = libc::PTHREAD_COND_INITIALIZER;
        let m = &mut m as *mut pthread_mutex_t;
        let c = &mut c as *mut libc::pthread_cond_t;
        let abs = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid mutex and condvar; the mutex is held around the
        // wait, which times out at once (the deadline is in the past).
        unsafe {
            assert_eq!(pthread_mutex_lock(m), 0);
            fault::arm(fault::At::Body);
            // The injected panic fires in the first mutex hook the wait
            // calls (the unlock), and the wait still happens.
            assert_eq!(cond::pthread_cond_timedwait(c, m, &abs), libc::ETIMEDOUT);
        }
        assert_eq!(trylock_elsewhere(m), libc::EBUSY, "not relocked");
        // SAFETY: held by this thread.
        assert_eq!(unsafe { pthread_mutex_unlock(m) }, 0);
    }
}
