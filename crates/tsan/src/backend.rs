//! The seam between the ABI runtime and the capture layer
//! (`lockscope_capture::thread` and `::process`, whose state the pthread
//! hooks of `lockscope-preload`, linked into the same executable, keep up
//! to date).
//!
//! Everything the runtime needs from capture goes through these functions:
//! - [`recording`]: is this process being recorded (initializes the
//!   capture layer on first use: clang may call us before any constructor);
//! - [`held`]: how many locks the calling thread holds ("inside a critical
//!   section" is `held() > 0`);
//! - [`emit`]: append one event to the calling thread's ring
//!   ([`with_recorder`] for a batch);
//! - [`install`]: register the shadow stack as the call-path provider of
//!   the pthread hooks.

use lockscope_capture::thread;
use lockscope_ring::raw::Head;

/// True when a recording session is active for this process.
pub fn recording() -> bool {
    // Through the preload crate (same as `process::init`): this use is
    // also what makes rustc link its pthread hooks into the staticlib.
    // Unit-test binaries call capture directly, so that the preload crate,
    // and with it `pthread_mutex_lock` and the rest, is not linked into
    // them (it would interpose the test harness's own locks).
    #[cfg(not(test))]
    lockscope_preload::init();
    #[cfg(test)]
    lockscope_capture::process::init();
    install();
    thread::is_recording()
}

/// Locks the calling thread holds.
#[inline(always)]
pub fn held() -> u32 {
    thread::locks_held()
}

/// Appends an event to the calling thread's ring. Returns false if it was
/// dropped (counted by the capture layer) or if the thread is already
/// inside the recorder (an allocation made while its ring is created).
#[inline]
pub fn emit(head: Head, args: Option<(u64, u64)>, frames: &[u64]) -> bool {
    match thread::recorder() {
        Some(mut g) => g.emit(head, args, frames),
        None => false,
    }
}

/// [`emit`] for a memory access: first records the thread's run-queue
/// delay when a sample is due (`Guard::sample_run_delay`: 500 us since its last
/// lock call or access, or 2 ms since its last sample), then stamps the
/// access again after that system call. Why at accesses too: in a
/// detailed-mode trace a preemption lands between two accesses, and a
/// sample taken only at the next lock call, after thousands of short
/// access segments, cannot say which segment held it: the replay kept
/// 110 ms per thread of preempted time as work on `ulcp_table`.
#[inline]
pub fn emit_sampled(mut head: Head, args: Option<(u64, u64)>, frames: &[u64]) -> bool {
    match thread::recorder() {
        Some(mut g) => {
            if g.sample_run_delay(head.tsc) {
                head.tsc = lockscope_ring::tsc::now();
            }
            g.emit(head, args, frames)
        }
        None => false,
    }
}

/// Runs `f` with the calling thread's recorder, entered once for a batch
/// of events (the release values of a critical section): entering it per
/// event was ~40 instructions each. `None` when [`emit`] would drop.
#[inline]
pub fn with_recorder<R>(f: impl FnOnce(&mut thread::Guard) -> R) -> Option<R> {
    thread::recorder().map(|mut g| f(&mut g))
}

/// The call-path provider: the shadow stack, innermost first.
fn shadow_path(out: &mut [u64]) -> usize {
    crate::tls::with(|t| crate::tls::frames(t, 0, out))
}

/// Registers the shadow stack as the call-path provider (idempotent), so
/// that lock events carry full calling contexts without unwinding.
pub fn install() {
    thread::set_path_provider(Some(shadow_path));
}
