//! The real (next) implementations of the interposed functions, resolved
//! with `dlsym(RTLD_NEXT)` on first use from any hook: hooks can run before
//! this library's constructor, and glibc 2.36's dlsym takes no pthread
//! mutex and does not allocate.

use libc::{
    c_char, c_int, clockid_t, pthread_cond_t, pthread_mutex_t, pthread_mutexattr_t, timespec,
};
use std::sync::atomic::{AtomicPtr, Ordering};

type MutexFn = unsafe extern "C" fn(*mut pthread_mutex_t) -> c_int;
type InitFn = unsafe extern "C" fn(*mut pthread_mutex_t, *const pthread_mutexattr_t) -> c_int;
type TimedFn = unsafe extern "C" fn(*mut pthread_mutex_t, *const timespec) -> c_int;
type ClockFn = unsafe extern "C" fn(*mut pthread_mutex_t, clockid_t, *const timespec) -> c_int;
type CondWaitFn = unsafe extern "C" fn(*mut pthread_cond_t, *mut pthread_mutex_t) -> c_int;
type CondTimedFn =
    unsafe extern "C" fn(*mut pthread_cond_t, *mut pthread_mutex_t, *const timespec) -> c_int;
type CondClockFn = unsafe extern "C" fn(
    *mut pthread_cond_t,
    *mut pthread_mutex_t,
    clockid_t,
    *const timespec,
) -> c_int;
type CondFn = unsafe extern "C" fn(*mut pthread_cond_t) -> c_int;

/// Pointers to the next definitions of the interposed functions.
pub(crate) struct Real {
    pub(crate) mutex_init: InitFn,
    pub(crate) mutex_destroy: MutexFn,
    pub(crate) mutex_lock: MutexFn,
    pub(crate) mutex_trylock: MutexFn,
    pub(crate) mutex_timedlock: TimedFn,
    pub(crate) mutex_clocklock: Option<ClockFn>,
    pub(crate) mutex_unlock: MutexFn,
    pub(crate) cond_wait: CondWaitFn,
    pub(crate) cond_timedwait: CondTimedFn,
    pub(crate) cond_clockwait: Option<CondClockFn>,
    pub(crate) cond_signal: CondFn,
    pub(crate) cond_broadcast: CondFn,
}

static REAL: AtomicPtr<Real> = AtomicPtr::new(std::ptr::null_mut());

/// The real functions (resolved on first call).
#[inline(always)]
pub(crate) fn get() -> &'static Real {
    let p = REAL.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: REAL is only ever set to a leaked Box (resolve), never
        // freed or changed afterwards.
        return unsafe { &*p };
    }
    resolve()
}

/// Looks up the next definition of `name` (at `version` if it has one).
///
/// # Safety
/// `name` and `version` are NUL-terminated.
unsafe fn sym(name: &[u8], version: Option<&[u8]>) -> *mut libc::c_void {
    let n = name.as_ptr() as *const c_char;
    if let Some(v) = version {
        // The condvar functions exist in two versions; the program was
        // linked against the current one (GLIBC_2.3.2), so ask for it.
        // SAFETY: both strings are NUL-terminated (the caller's contract).
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, n, v.as_ptr() as *const c_char) };
        if !p.is_null() {
            return p;
        }
    }
    // SAFETY: `n` is NUL-terminated (the caller's contract).
    unsafe { libc::dlsym(libc::RTLD_NEXT, n) }
}

/// [`sym`], or abort with a message: without the real functions no hook
/// can do what the program asked.
///
/// # Safety
/// As [`sym`].
unsafe fn need(name: &[u8], version: Option<&[u8]>) -> *mut libc::c_void {
    // SAFETY: the caller's contract.
    let p = unsafe { sym(name, version) };
    if p.is_null() {
        crate::stats::die(
            "lockscope-swap: cannot find the real pthread functions (dlsym failed)\n",
        );
    }
    p
}

#[cold]
fn resolve() -> &'static Real {
    const V: Option<&[u8]> = Some(b"GLIBC_2.3.2\0");
    // SAFETY: every name is a NUL-terminated literal, and each symbol found
    // is the next definition of the C function it names, whose signature
    // is the one it is transmuted to (non-null: `need` aborts otherwise,
    // and the optional ones are checked).
    let r = unsafe {
        Real {
            mutex_init: std::mem::transmute::<*mut libc::c_void, InitFn>(need(
                b"pthread_mutex_init\0",
                None,
            )),
            mutex_destroy: std::mem::transmute::<*mut libc::c_void, MutexFn>(need(
                b"pthread_mutex_destroy\0",
                None,
            )),
            mutex_lock: std::mem::transmute::<*mut libc::c_void, MutexFn>(need(
                b"pthread_mutex_lock\0",
                None,
            )),
            mutex_trylock: std::mem::transmute::<*mut libc::c_void, MutexFn>(need(
                b"pthread_mutex_trylock\0",
                None,
            )),
            mutex_timedlock: std::mem::transmute::<*mut libc::c_void, TimedFn>(need(
                b"pthread_mutex_timedlock\0",
                None,
            )),
            mutex_clocklock: {
                let p = sym(b"pthread_mutex_clocklock\0", None);
                (!p.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, ClockFn>(p))
            },
            mutex_unlock: std::mem::transmute::<*mut libc::c_void, MutexFn>(need(
                b"pthread_mutex_unlock\0",
                None,
            )),
            cond_wait: std::mem::transmute::<*mut libc::c_void, CondWaitFn>(need(
                b"pthread_cond_wait\0",
                V,
            )),
            cond_timedwait: std::mem::transmute::<*mut libc::c_void, CondTimedFn>(need(
                b"pthread_cond_timedwait\0",
                V,
            )),
            cond_clockwait: {
                let p = sym(b"pthread_cond_clockwait\0", None);
                (!p.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, CondClockFn>(p))
            },
            cond_signal: std::mem::transmute::<*mut libc::c_void, CondFn>(need(
                b"pthread_cond_signal\0",
                V,
            )),
            cond_broadcast: std::mem::transmute::<*mut libc::c_void, CondFn>(need(
                b"pthread_cond_broadcast\0",
                V,
            )),
        }
    };
    let new = Box::into_raw(Box::new(r));
    match REAL.compare_exchange(
        std::ptr::null_mut(),
        new,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: `new` is a leaked Box, now published and never freed.
        Ok(_) => unsafe { &*new },
        Err(other) => {
            // SAFETY: `new` came from Box::into_raw and was never shared;
            // `other` is a published leaked Box, never freed.
            unsafe {
                drop(Box::from_raw(new));
                &*other
            }
        }
    }
}
