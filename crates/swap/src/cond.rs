//! Condition variables with replaced mutexes.
//!
//! glibc's `pthread_cond_wait` releases and re-acquires the mutex through
//! internal calls that an LD_PRELOAD library cannot intercept, and it would
//! read our lock state as a glibc mutex. So the condvar hooks never hand
//! one of our mutexes to glibc. Choices considered:
//!
//! - LiTL's approach: every replaced lock also carries a real pthread mutex,
//!   taken (uncontended) after the algorithm's lock on every acquisition,
//!   and the real condvar waits on that. Correct, but it adds a second
//!   atomic lock/unlock to every critical section of the program, which
//!   distorts exactly what `lockscope run` is meant to measure.
//! - Replacing condvars by our own futex sequence counter: cheap, but a
//!   late waiter can steal a signal meant for an earlier one, and it drops
//!   glibc's clock and process-shared attributes.
//! - What we do: keep glibc's condvar and its exact semantics, and wait on
//!   it with an internal real mutex taken from a small striped table
//!   (hashed by condvar address). The waiter takes the stripe mutex, then
//!   releases our lock, then calls the real wait (which atomically releases
//!   the stripe mutex); `signal`/`broadcast` take the same stripe mutex
//!   around the real call. A signal sent after the waiter released our
//!   lock therefore cannot run before the waiter is registered in the
//!   condvar: no lost wake-up. After waking, the waiter drops the stripe
//!   mutex before re-acquiring our lock, so nobody ever blocks on our lock
//!   while holding a stripe mutex (no lock-order cycle). Only condvar
//!   operations pay (one uncontended real lock), mutex operations pay
//!   nothing.
//!
//! Cancellation is disabled while a thread waits this way: a cancelled
//! wait would unwind with the stripe mutex held. A thread cancelled there is
//! cancelled at its next cancellation point instead.

use crate::real;

// The condvar functions are versioned in glibc (GLIBC_2.3.2, the current
// ABI). A hook exported without a version answers ordinary calls and
// dlsym, but not dlvsym(RTLD_NEXT, name, "GLIBC_2.3.2"), which another
// preloaded library in front of us (lockscope record's) uses to find the
// next condvar function: it would then skip us and hand one of our mutexes
// to glibc. So each hook is exported as `name@@GLIBC_2.3.2` (the version
// node comes from swap.map, passed to the linker by build.rs).
#[cfg(not(test))]
std::arch::global_asm!(
    ".symver lockscope_swap_pthread_cond_wait, pthread_cond_wait@@GLIBC_2.3.2",
    ".symver lockscope_swap_pthread_cond_timedwait, pthread_cond_timedwait@@GLIBC_2.3.2",
    ".symver lockscope_swap_pthread_cond_signal, pthread_cond_signal@@GLIBC_2.3.2",
    ".symver lockscope_swap_pthread_cond_broadcast, pthread_cond_broadcast@@GLIBC_2.3.2",
);
use libc::{c_int, clockid_t, pthread_cond_t, pthread_mutex_t, timespec};
use std::cell::UnsafeCell;

const STRIPES: usize = 64;

// Not in the libc crate; values from glibc's <pthread.h>.
const PTHREAD_CANCEL_DISABLE: c_int = 1;
extern "C" {
    fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
}

#[repr(align(64))]
struct Stripe(UnsafeCell<pthread_mutex_t>);
// SAFETY: pthread mutexes are made to be shared; only real functions touch
// these.
unsafe impl Sync for Stripe {}

#[allow(clippy::declare_interior_mutable_const)]
const STRIPE_INIT: Stripe = Stripe(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));
static STRIPE_TABLE: [Stripe; STRIPES] = [STRIPE_INIT; STRIPES];

fn stripe(c: *mut pthread_cond_t) -> *mut pthread_mutex_t {
    let h = (c as usize >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
    STRIPE_TABLE[h % STRIPES].0.get()
}

/// Waits on `c` for one of our mutexes: `wait` is the real wait call on the
/// stripe mutex.
///
/// # Safety
/// C contract of `pthread_cond_wait` for `c` and `m` (the calling thread
/// holds `m`); `m` holds a lock of `o`'s algorithm; `wait` calls a real
/// condvar wait on `c` with the mutex it is given.
unsafe fn wait_ours(
    o: &'static lockscope_locks::dynlock::LockOps,
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    wait: impl FnOnce(*mut pthread_mutex_t) -> c_int,
) -> c_int {
    let r = real::get();
    let s = stripe(c);
    // SAFETY: `s` is a static, initialised glibc mutex that only this
    // module takes, always in the order stripe -> (real condvar) and never
    // while waiting for one of our locks (see the module documentation);
    // `m` is held by the caller (the contract), released here and taken
    // again below, as pthread_cond_wait does.
    unsafe {
        (r.mutex_lock)(s);
        crate::unlock_any(m);
        let mut old: c_int = 0;
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old);
        let ret = wait(s);
        pthread_setcancelstate(old, std::ptr::null_mut());
        (r.mutex_unlock)(s);
        crate::relock_ours(o, m);
        ret
    }
}

/// `pthread_cond_wait` and its timed variants: `wait(c, mutex)` is the real
/// call (on the stripe mutex for ours, on `m` for glibc's). The whole
/// operation is its own plain version: nothing here is bookkeeping.
///
/// # Safety
/// C contract of `pthread_cond_wait` for `c` and `m`, both not null;
/// `wait` calls a real condvar wait.
unsafe fn wait_any(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    wait: impl FnOnce(*mut pthread_mutex_t) -> c_int,
) -> c_int {
    // SAFETY: the caller's contract; `o` is the table of the algorithm
    // whose state `m` holds.
    unsafe {
        match crate::ours_for_cond(m) {
            Some(o) => wait_ours(o, c, m, wait),
            None => wait(m),
        }
    }
}

/// Interposed `pthread_cond_wait`.
///
/// # Safety
/// C contract of `pthread_cond_wait`.
#[cfg_attr(not(test), export_name = "lockscope_swap_pthread_cond_wait")]
pub unsafe extern "C" fn pthread_cond_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
) -> c_int {
    if c.is_null() || m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract, which the real function has too.
    let w = |s| unsafe { (real::get().cond_wait)(c, s) };
    crate::guard(
        // SAFETY: the caller's contract, with `w` a real wait.
        || unsafe { wait_any(c, m, w) },
        // SAFETY: as above.
        || unsafe { wait_any(c, m, w) },
    )
}

/// Interposed `pthread_cond_timedwait`.
///
/// # Safety
/// C contract of `pthread_cond_timedwait`.
#[cfg_attr(not(test), export_name = "lockscope_swap_pthread_cond_timedwait")]
pub unsafe extern "C" fn pthread_cond_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    abstime: *const timespec,
) -> c_int {
    if c.is_null() || m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract, which the real function has too.
    let w = |s| unsafe { (real::get().cond_timedwait)(c, s, abstime) };
    crate::guard(
        // SAFETY: the caller's contract, with `w` a real wait.
        || unsafe { wait_any(c, m, w) },
        // SAFETY: as above.
        || unsafe { wait_any(c, m, w) },
    )
}

/// Interposed `pthread_cond_clockwait` (glibc 2.30+; used by C++
/// `condition_variable::wait_until` with the steady clock).
///
/// # Safety
/// C contract of `pthread_cond_clockwait`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_cond_clockwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    if c.is_null() || m.is_null() {
        return libc::EINVAL;
    }
    let Some(f) = real::get().cond_clockwait else {
        return libc::ENOSYS;
    };
    // SAFETY: the caller's contract, which the real function has too.
    let w = |s| unsafe { f(c, s, clock, abstime) };
    crate::guard(
        // SAFETY: the caller's contract, with `w` a real wait.
        || unsafe { wait_any(c, m, w) },
        // SAFETY: as above.
        || unsafe { wait_any(c, m, w) },
    )
}

/// Signals or broadcasts `c` (`f` is the real function).
///
/// # Safety
/// C contract of `f`, `c` not null.
unsafe fn notify(
    c: *mut pthread_cond_t,
    f: unsafe extern "C" fn(*mut pthread_cond_t) -> c_int,
) -> c_int {
    let r = real::get();
    if crate::current_ops().is_none() {
        // SAFETY: the caller's contract.
        return unsafe { f(c) };
    }
    let s = stripe(c);
    // SAFETY: `s` is a static, initialised glibc mutex (see wait_ours);
    // `f` has the caller's contract.
    unsafe {
        (r.mutex_lock)(s);
        let ret = f(c);
        (r.mutex_unlock)(s);
        ret
    }
}

/// Interposed `pthread_cond_signal`.
///
/// # Safety
/// C contract of `pthread_cond_signal`.
#[cfg_attr(not(test), export_name = "lockscope_swap_pthread_cond_signal")]
pub unsafe extern "C" fn pthread_cond_signal(c: *mut pthread_cond_t) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    // A second signal after a panic is harmless (waiters must allow
    // spurious wake-ups); a lost one is not.
    crate::guard(
        // SAFETY: the caller's contract.
        || unsafe { notify(c, real::get().cond_signal) },
        // SAFETY: as above.
        || unsafe { notify(c, real::get().cond_signal) },
    )
}

/// Interposed `pthread_cond_broadcast`.
///
/// # Safety
/// C contract of `pthread_cond_broadcast`.
#[cfg_attr(not(test), export_name = "lockscope_swap_pthread_cond_broadcast")]
pub unsafe extern "C" fn pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    crate::guard(
        // SAFETY: the caller's contract.
        || unsafe { notify(c, real::get().cond_broadcast) },
        // SAFETY: as above.
        || unsafe { notify(c, real::get().cond_broadcast) },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_spread_neighbouring_condvars() {
        let base = 0x7f00_0000_1000usize;
        let set: std::collections::HashSet<usize> = (0..64)
            .map(|i| stripe((base + i * 48) as *mut pthread_cond_t) as usize)
            .collect();
        assert!(set.len() > 16, "only {} stripes used", set.len());
    }
}
