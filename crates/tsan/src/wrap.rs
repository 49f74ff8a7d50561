//! Release points and synchronization calls, seen through the linker: `lockscope cc` links with
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
//!
//! The other synchronization calls the capture layer records (lock
//! acquisitions, barriers, thread create and join, condition signals,
//! semaphores) are wrapped too, only to end the thread's run of coalesced
//! accesses (`LOCKSCOPE_COALESCE=1`) before the call is recorded: the
//! repeats then stay before it in the thread's stream, and a run never
//! spans a synchronization event.

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

/// Ends the calling thread's run of coalesced accesses (called from the
/// trampolines below, which keep the argument registers).
extern "C" fn lockscope_flush_run() {
    record::flush_run();
}

/// Defines `__wrap_NAME` as a trampoline that saves the argument
/// registers, calls [`lockscope_flush_run`], restores them and jumps to
/// the real function (`__real_NAME`, which `--wrap` resolves to NAME).
/// A jump, not a call: the hook behind it must see the program's return
/// address as the call site (a Rust wrapper would make every lock's site
/// this file).
macro_rules! flush_then_jump {
    ($name:literal) => {
        core::arch::global_asm!(
            ".pushsection .text.lockscope_tsan_wrap,\"ax\",@progbits",
            concat!(".globl __wrap_", $name),
            concat!(".type __wrap_", $name, ",@function"),
            ".p2align 4",
            concat!("__wrap_", $name, ":"),
            "    push rdi",
            "    push rsi",
            "    push rdx",
            "    push rcx",
            "    push r8",
            "    push r9",
            // Entry rsp is 8 mod 16; six pushes keep it so: align for the call.
            "    sub rsp, 8",
            "    call {flush}",
            "    add rsp, 8",
            "    pop r9",
            "    pop r8",
            "    pop rcx",
            "    pop rdx",
            "    pop rsi",
            "    pop rdi",
            concat!("    jmp __real_", $name, "@PLT"),
            concat!(".size __wrap_", $name, ", . - __wrap_", $name),
            ".popsection",
            flush = sym lockscope_flush_run,
        );
    };
}

flush_then_jump!("pthread_mutex_lock");
flush_then_jump!("pthread_mutex_trylock");
flush_then_jump!("pthread_mutex_timedlock");
flush_then_jump!("pthread_rwlock_rdlock");
flush_then_jump!("pthread_rwlock_wrlock");
flush_then_jump!("pthread_rwlock_tryrdlock");
flush_then_jump!("pthread_rwlock_trywrlock");
flush_then_jump!("pthread_spin_lock");
flush_then_jump!("pthread_spin_trylock");
flush_then_jump!("pthread_barrier_wait");
flush_then_jump!("pthread_create");
flush_then_jump!("pthread_join");
flush_then_jump!("pthread_cond_signal");
flush_then_jump!("pthread_cond_broadcast");
flush_then_jump!("sem_wait");
flush_then_jump!("sem_trywait");
flush_then_jump!("sem_timedwait");
flush_then_jump!("sem_post");
