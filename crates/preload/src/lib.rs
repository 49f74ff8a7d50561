//! `liblockscope_preload.so`: the LD_PRELOAD half of lockscope's timing
//! mode. It interposes the POSIX synchronization calls, thread and process
//! lifecycle calls, and the libc `syscall` entry (futex), and writes one
//! compact event per call into the calling thread's ring
//! (`lockscope_capture`, over the rings of `lockscope_ring`), which
//! `lockscope record` drains.
//!
//! # Entry points
//! - The interposed symbols themselves (`pthread_mutex_lock`, ...): each
//!   is a two-instruction naked trampoline that passes the call site and
//!   the caller's frame pointer to a Rust hook.
//! - The library constructor (`.init_array`) calls
//!   [`lockscope_capture::process::init`]; without `LOCKSCOPE_SESSION`
//!   nothing is recorded and every hook just forwards.
//! - As an rlib, the detailed (TSan-ABI) runtime links the same hooks into
//!   its staticlib; it must call `process::init` itself (an archive
//!   member's `.init_array` entry is not guaranteed to be linked in).
//!
//! # Design constraints
//! - Never change what the program computes: return values and errno are
//!   the real function's; a panic in recording code is caught, disables
//!   the recorder (`ProcessHeader::disabled`), and the call still
//!   happens.
//! - No locks, no allocation, no syscalls on the event path (see
//!   `lockscope_capture::thread`); re-entrant calls (a hook reached from
//!   inside the recorder) forward without recording.
//! - Real functions are resolved lazily in every hook (hooks can run
//!   before our constructor).
//! - x86-64 Linux with glibc only: the trampolines are x86-64 assembly
//!   and the mutex waiter check reads glibc's mutex layout.
#![deny(missing_docs)]
#![allow(clippy::missing_safety_doc)]

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod common;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod futex;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod gpu;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod locks;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod omp;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod procs;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod real;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod swap;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod threads;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use futex::syscall;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use locks::*;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use omp::*;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use procs::*;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use threads::*;

/// Library constructor: start recording if `LOCKSCOPE_SESSION` is set.
extern "C" fn constructor() {
    if detailed_runtime_present() {
        return;
    }
    // A panic here must not take the program down: recording simply
    // stays off.
    lockscope_capture::process::set_cost_probe(probe_costs);
    find_swap();
    let _ = std::panic::catch_unwind(lockscope_capture::process::init);
}

/// Finds `lockscope run`'s swap library, if loaded, and has the process
/// header name its lock (see `swap`).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn find_swap() {
    swap::find();
    lockscope_capture::process::set_lock_namer(swap::lock_name);
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn find_swap() {}

/// The cost probe `process::init` runs once recording is on; a panic in
/// it leaves the first (lower) cost figures in place.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn probe_costs() {
    let _ = std::panic::catch_unwind(locks::measure_hook_costs);
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn probe_costs() {}

// ---- added by the detailed-mode helper (crates/tsan) ----
/// True when the executable carries lockscope's detailed-mode runtime
/// (built with `lockscope cc`, which exports `lockscope_tsan_runtime`).
/// That executable has these same hooks linked in and records through
/// them; this preloaded copy must stay passive (its hooks then only
/// forward), or every process would be recorded twice, into clashing
/// ring files, and its start-up allocations would re-enter the runtime.
fn detailed_runtime_present() -> bool {
    // SAFETY: dlsym with a NUL-terminated name; glibc 2.36's dlsym does not
    // allocate.
    !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"lockscope_tsan_runtime".as_ptr()) }.is_null()
}
// ---- end of the detailed-mode addition ----

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

/// Starts recording (idempotent); for runtimes that link these hooks
/// statically and cannot rely on the constructor being linked in.
pub fn init() -> bool {
    lockscope_capture::process::set_cost_probe(probe_costs);
    find_swap();
    lockscope_capture::process::init()
}
