//! Release points, seen through the linker: `lockscope cc` links with
//! `-Wl,--wrap=pthread_mutex_unlock` (and the other release functions), so
//! the program's calls come here first; `__real_*` then reaches the capture
//! layer's pthread hook linked into the same executable, and from there
//! libc.
//!
//! Why: the value of each location written in a critical section must be
//! read while the lock is still held (afterwards another thread may
//! overwrite it), i.e. just before the real unlock, and the pthread hooks
//! belong to the capture layer. Wrapping at link time keeps that hook
//! point inside this runtime. Releases made from inside shared libraries
//! are not wrapped; their critical sections simply have no release values
//! (the ULCP analysis then never calls them benign).

// The wrappers are called only by the program, with the arguments of the
// pthread function they stand for; their contract is that function's.
#![allow(clippy::missing_safety_doc)]

use core::ffi::c_void;

use crate::{backend, record};

extern "C" {
    fn __real_pthread_mutex_unlock(m: *mut c_void) -> i32;
    fn __real_pthread_rwlock_unlock(l: *mut c_void) -> i32;
    fn __real_pthread_spin_unlock(l: *mut c_void) -> i32;
    fn __real_pthread_cond_wait(c: *mut c_void, m: *mut c_void) -> i32;
    fn __real_pthread_cond_timedwait(c: *mut c_void, m: *mut c_void, t: *const c_void) -> i32;
    fn __real_pthread_cond_clockwait(
        c: *mut c_void,
        m: *mut c_void,
        clock: i32,
        t: *const c_void,
    ) -> i32;
}

#[inline(always)]
fn before_release() {
    record::release_values(backend::held().saturating_sub(1));
}

/// `pthread_mutex_unlock`, wrapped.
#[no_mangle]
pub unsafe extern "C" fn __wrap_pthread_mutex_unlock(m: *mut c_void) -> i32 {
    // SAFETY: the arguments are the program's, passed on unchanged to the real
    // function, whose contract the caller has.
    unsafe {
        before_release();
        __real_pthread_mutex_unlock(m)
    }
}

/// `pthread_rwlock_unlock`, wrapped.
#[no_mangle]
pub unsafe extern "C" fn __wrap_pthread_rwlock_unlock(l: *mut c_void) -> i32 {
    // SAFETY: the arguments are the program's, passed on unchanged to the real
    // function, whose contract the caller has.
    unsafe {
        before_release();
        __real_pthread_rwlock_unlock(l)
    }
}

/// `pthread_spin_unlock`, wrapped.
#[no_mangle]
pub unsafe extern "C" fn __wrap_pthread_spin_unlock(l: *mut c_void) -> i32 {
    // SAFETY: the arguments are the program's, passed on unchanged to the real
    // function, whose contract the caller has.
    unsafe {
        before_release();
        __real_pthread_spin_unlock(l)
    }
}

/// `pthread_cond_wait` releases the mutex while it waits: a release point.
#[no_mangle]
pub unsafe extern "C" fn __wrap_pthread_cond_wait(c: *mut c_void, m: *mut c_void) -> i32 {
    // SAFETY: the arguments are the program's, passed on unchanged to the real
    // function, whose contract the caller has.
    unsafe {
        before_release();
        __real_pthread_cond_wait(c, m)
    }
}

/// `pthread_cond_timedwait`, wrapped (see [`__wrap_pthread_cond_wait`]).
#[no_mangle]
pub unsafe extern "C" fn __wrap_pthread_cond_timedwait(
    c: *mut c_void,
    m: *mut c_void,
    t: *const c_void,
) -> i32 {
    // SAFETY: the arguments are the program's, passed on unchanged to the real
    // function, whose contract the caller has.
    unsafe {
        before_release();
        __real_pthread_cond_timedwait(c, m, t)
    }
}

/// `pthread_cond_clockwait`, wrapped (see [`__wrap_pthread_cond_wait`]).
#[no_mangle]
pub unsafe extern "C" fn __wrap_pthread_cond_clockwait(
    c: *mut c_void,
    m: *mut c_void,
    clock: i32,
    t: *const c_void,
) -> i32 {
    // SAFETY: the arguments are the program's, passed on unchanged to the real
    // function, whose contract the caller has.
    unsafe {
        before_release();
        __real_pthread_cond_clockwait(c, m, clock, t)
    }
}
