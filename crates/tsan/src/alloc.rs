//! Heap tracking: `malloc`, `calloc`, `realloc`, `free` and the aligned
//! allocators, defined in the executable so that every allocation of the
//! process (the program's, libstdc++'s `operator new`, libc's own) comes
//! here first. Each forwards to glibc's `__libc_*` entry points (exported
//! for exactly this purpose), which needs no `dlsym` and therefore works
//! from the very first allocation, before any constructor ran.
//!
//! The alternative, `-Wl,--wrap=malloc`, would only see calls from the
//! program's own objects and miss `operator new` inside libstdc++.
//!
//! Allocations made while the runtime or the capture layer is working (the
//! re-entry guard is set) are forwarded without being recorded.

use core::ffi::c_void;

use crate::abi::trampoline;
use crate::record;

extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
}

#[inline]
fn on_alloc(p: *mut c_void, size: usize, pc: u64) {
    if !p.is_null() {
        record::alloc_event(p as u64, size as u64, pc);
    }
}

#[inline]
fn on_free(p: *mut c_void, pc: u64) {
    if !p.is_null() && record::mode_if_decided() != record::MODE_OFF {
        // SAFETY: `p` is a live block the program is about to free.
        let usable = unsafe { libc::malloc_usable_size(p) };
        record::free_event(p as u64, usable as u64, pc);
    }
}

unsafe extern "C" fn malloc_imp(size: usize, pc: u64) -> *mut c_void {
    // SAFETY: glibc's own allocator entry points, called with the arguments the
    // program passed to the standard function (whose contract the caller
    // has); the block sizes are read only from blocks that are live.
    unsafe {
        let p = __libc_malloc(size);
        on_alloc(p, size, pc);
        p
    }
}
trampoline!("malloc", "rsi", malloc_imp);

unsafe extern "C" fn calloc_imp(n: usize, size: usize, pc: u64) -> *mut c_void {
    // SAFETY: glibc's own allocator entry points, called with the arguments the
    // program passed to the standard function (whose contract the caller
    // has); the block sizes are read only from blocks that are live.
    unsafe {
        let p = __libc_calloc(n, size);
        on_alloc(p, n.saturating_mul(size), pc);
        p
    }
}
trampoline!("calloc", "rdx", calloc_imp);

unsafe extern "C" fn realloc_imp(old: *mut c_void, size: usize, pc: u64) -> *mut c_void {
    // SAFETY: glibc's own allocator entry points, called with the arguments the
    // program passed to the standard function (whose contract the caller
    // has); the block sizes are read only from blocks that are live.
    unsafe {
        if old.is_null() {
            let p = __libc_realloc(old, size);
            on_alloc(p, size, pc);
            return p;
        }
        // Record the free before the call: afterwards the old block may belong
        // to another thread's allocation already.
        on_free(old, pc);
        let p = __libc_realloc(old, size);
        if p.is_null() && size != 0 {
            // Failed: the old block is still live; record it again.
            on_alloc(old, libc::malloc_usable_size(old), pc);
        } else {
            on_alloc(p, size, pc);
        }
        p
    }
}
trampoline!("realloc", "rdx", realloc_imp);

unsafe extern "C" fn free_imp(p: *mut c_void, pc: u64) {
    // SAFETY: glibc's own allocator entry points, called with the arguments the
    // program passed to the standard function (whose contract the caller
    // has); the block sizes are read only from blocks that are live.
    unsafe {
        on_free(p, pc);
        __libc_free(p);
    }
}
trampoline!("free", "rsi", free_imp);

unsafe extern "C" fn memalign_imp(align: usize, size: usize, pc: u64) -> *mut c_void {
    // SAFETY: glibc's own allocator entry points, called with the arguments the
    // program passed to the standard function (whose contract the caller
    // has); the block sizes are read only from blocks that are live.
    unsafe {
        let p = __libc_memalign(align, size);
        on_alloc(p, size, pc);
        p
    }
}
trampoline!("memalign", "rdx", memalign_imp);
trampoline!("aligned_alloc", "rdx", memalign_imp);

unsafe extern "C" fn posix_memalign_imp(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    pc: u64,
) -> i32 {
    // SAFETY: glibc's own allocator entry points, called with the arguments the
    // program passed to the standard function (whose contract the caller
    // has); the block sizes are read only from blocks that are live.
    // `out` is writable (posix_memalign's contract).
    unsafe {
        if !align.is_power_of_two() || !align.is_multiple_of(core::mem::size_of::<*mut c_void>()) {
            return libc::EINVAL;
        }
        let p = __libc_memalign(align, size);
        if p.is_null() {
            return libc::ENOMEM;
        }
        on_alloc(p, size, pc);
        *out = p;
        0
    }
}
trampoline!("posix_memalign", "rcx", posix_memalign_imp);
