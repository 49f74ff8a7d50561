//! Run-time settings, read once from the environment.
//!
//! - `LOCKSCOPE_ALL_ACCESSES=1`: record accesses outside critical sections
//!   too (site only, no call path), for `lockscope lockset`.
//! - `LOCKSCOPE_ACCESS_FRAMES=N`: call-path depth attached to each access
//!   inside a critical section (default 16, at most 64, 0 = pc only).
//! - `LOCKSCOPE_OUTSIDE_FRAMES=N`: call-path depth attached to each
//!   access outside critical sections (with `LOCKSCOPE_ALL_ACCESSES=1`;
//!   default 0 = pc only, which halves the volume; `lockscope deadwrites`
//!   and `barriers` name call paths with it).
//! - `LOCKSCOPE_COALESCE` (default on; `0` or empty turns it off): record
//!   a run of identical accesses (same address, size, kind, locks held
//!   and, for reads, value, with nothing else recorded in between) once,
//!   plus one `AccessRepeat` event with the count (see docs/detailed.md).
//! - `LOCKSCOPE_EVENT_FRAMES=N`: call-path depth of atomics and heap
//!   allocations (default 32, at most 64).
//!
//! Read with `getenv` (no allocation) on first use, which may come before
//! `__tsan_init`: clang runs its constructor from `.init_array.0`, but an
//! earlier constructor of another library may already call into us.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use lockscope_ring::raw::MAX_FRAMES;

static INIT: AtomicBool = AtomicBool::new(false);
static ALL: AtomicBool = AtomicBool::new(false);
static ACCESS_FRAMES: AtomicUsize = AtomicUsize::new(16);
static EVENT_FRAMES: AtomicUsize = AtomicUsize::new(32);
static OUTSIDE_FRAMES: AtomicUsize = AtomicUsize::new(0);
/// On by default: every analysis reads the repeat counts (spin adds them to
/// the attempts they repeat, deadwrites counts repeated stores; the others
/// need sets, which repeats do not change: docs/detailed.md), and a spin
/// loop or a streaming loop over one location otherwise costs one event
/// per iteration.
static COALESCE: AtomicBool = AtomicBool::new(true);

/// Environment variable: record every access, not only those inside
/// critical sections.
pub const ENV_ALL_ACCESSES: &str = "LOCKSCOPE_ALL_ACCESSES";

fn env(name: &core::ffi::CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv returns a NUL-terminated string owned by the
    // environment, valid until it is modified (we read it once, at start).
    unsafe {
        let p = libc::getenv(name.as_ptr());
        if p.is_null() {
            None
        } else {
            Some(core::ffi::CStr::from_ptr(p).to_bytes())
        }
    }
}

fn number(v: &[u8]) -> Option<usize> {
    core::str::from_utf8(v).ok()?.trim().parse().ok()
}

/// Reads the settings (idempotent).
pub fn init() {
    if INIT.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Some(v) = env(c"LOCKSCOPE_ALL_ACCESSES") {
        ALL.store(!v.is_empty() && v != b"0", Ordering::Relaxed);
    }
    if let Some(n) = env(c"LOCKSCOPE_ACCESS_FRAMES").and_then(number) {
        ACCESS_FRAMES.store(n.min(MAX_FRAMES), Ordering::Relaxed);
    }
    if let Some(v) = env(c"LOCKSCOPE_COALESCE") {
        COALESCE.store(!v.is_empty() && v != b"0", Ordering::Relaxed);
    }
    if let Some(n) = env(c"LOCKSCOPE_OUTSIDE_FRAMES").and_then(number) {
        OUTSIDE_FRAMES.store(n.min(MAX_FRAMES), Ordering::Relaxed);
    }
    if let Some(n) = env(c"LOCKSCOPE_EVENT_FRAMES").and_then(number) {
        EVENT_FRAMES.store(n.min(MAX_FRAMES), Ordering::Relaxed);
    }
}

/// Record accesses outside critical sections too.
pub fn all_accesses() -> bool {
    init();
    ALL.load(Ordering::Relaxed)
}

/// Call-path depth for accesses inside critical sections.
#[inline]
pub fn access_frames() -> usize {
    ACCESS_FRAMES.load(Ordering::Relaxed)
}

/// Coalesce runs of identical accesses.
#[inline]
pub fn coalesce() -> bool {
    COALESCE.load(Ordering::Relaxed)
}

/// Call-path depth for accesses outside critical sections.
#[inline]
pub fn outside_frames() -> usize {
    OUTSIDE_FRAMES.load(Ordering::Relaxed)
}

/// Call-path depth for atomics and allocations.
#[inline]
pub fn event_frames() -> usize {
    EVENT_FRAMES.load(Ordering::Relaxed)
}
