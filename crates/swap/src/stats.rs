//! Counters behind `lockscope run --verbose` and the report printed at exit.
//!
//! Acquisitions are counted only when verbose, in per-thread stripes (a
//! single shared counter would add a contended cache line to every
//! acquisition and distort the lock being measured).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

static VERBOSE: AtomicBool = AtomicBool::new(false);
static REPLACED: AtomicU64 = AtomicU64::new(0);
static LEFT_TO_GLIBC: AtomicU64 = AtomicU64::new(0);
/// Panics caught in hooks (bugs of ours; the operations were performed
/// anyway).
static PANICS: AtomicU64 = AtomicU64::new(0);

const STRIPES: usize = 64;

#[repr(align(128))]
struct Stripe {
    ops: [AtomicU64; 3],
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Stripe = Stripe {
    ops: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
};
static COUNTS: [Stripe; STRIPES] = [EMPTY; STRIPES];
static NEXT_STRIPE: AtomicU32 = AtomicU32::new(0);

std::thread_local! {
    // No destructor: hooks run during thread teardown too.
    static MY_STRIPE: Cell<u32> = const { Cell::new(u32::MAX) };
}

/// Kind of acquisition.
#[derive(Clone, Copy)]
pub(crate) enum Op {
    Lock = 0,
    Trylock = 1,
    Timedlock = 2,
}

pub(crate) fn set_verbose(v: bool) {
    VERBOSE.store(v, Ordering::Relaxed);
}

pub(crate) fn replaced() {
    REPLACED.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn left_to_glibc() {
    LEFT_TO_GLIBC.fetch_add(1, Ordering::Relaxed);
}

#[inline(always)]
pub(crate) fn acquired(op: Op) {
    if !VERBOSE.load(Ordering::Relaxed) {
        return;
    }
    let s = MY_STRIPE
        .try_with(|c| {
            let mut s = c.get();
            if s == u32::MAX {
                s = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES as u32;
                c.set(s);
            }
            s
        })
        .unwrap_or(0);
    COUNTS[s as usize].ops[op as usize].fetch_add(1, Ordering::Relaxed);
}

/// Counts a panic caught in a hook, and says so on stderr the first time
/// (fails loud: the program goes on, but the user learns that the swapped
/// library hit a bug).
#[cold]
pub(crate) fn panicked() {
    if PANICS.fetch_add(1, Ordering::Relaxed) == 0 {
        warn("lockscope-swap: internal error (panic) in a pthread hook; the operation was performed without lockscope-swap's bookkeeping\n");
    }
}

/// Panics caught so far.
pub(crate) fn panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// Says why on stderr and aborts (no unwinding, no allocation).
#[cold]
pub(crate) fn die(msg: &str) -> ! {
    warn(msg);
    std::process::abort()
}

/// Writes a message to stderr with one write(2) and no lock.
pub(crate) fn warn(msg: &str) {
    // SAFETY: `msg` is a valid buffer of `msg.len()` bytes for the whole
    // call; a failed write to fd 2 only loses the message.
    unsafe { libc::write(2, msg.as_ptr() as *const libc::c_void, msg.len()) };
}

pub(crate) fn register_exit_report() {
    if VERBOSE.load(Ordering::Relaxed) {
        // SAFETY: `report` is an extern "C" fn with no arguments that
        // lives as long as the process (this library is never unloaded:
        // it is preloaded).
        unsafe { libc::atexit(report) };
    }
}

/// The line printed at exit with `--verbose`.
pub(crate) fn summary_line() -> String {
    let mut per = [0u64; 3];
    for s in &COUNTS {
        for (i, p) in per.iter_mut().enumerate() {
            *p += s.ops[i].load(Ordering::Relaxed);
        }
    }
    let total: u64 = per.iter().sum();
    let lock = match crate::current_ops() {
        Some(o) => format!("lock {} (wait {})", o.algorithm, o.wait),
        None => "lock pthread (original glibc mutexes)".to_string(),
    };
    let left = LEFT_TO_GLIBC.load(Ordering::Relaxed);
    let panics = match panics() {
        0 => String::new(),
        n => format!("; {n} internal errors (panics) caught, operations performed anyway"),
    };
    format!(
        "lockscope-swap: {lock}: replaced {} mutexes, {total} acquisitions ({} lock, {} trylock, {} timedlock); \
         {left} mutexes left to glibc (recursive, error-checking, robust, process-shared or priority attributes){panics}\n",
        REPLACED.load(Ordering::Relaxed),
        per[0],
        per[1],
        per[2],
    )
}

extern "C" fn report() {
    let _ = std::panic::catch_unwind(|| warn(&summary_line()));
}
