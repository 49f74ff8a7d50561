//! The timestamp counter.
//!
//! rdtsc costs ~7 ns on this kind of machine against ~25 ns for
//! clock_gettime (measured on the development VM), and the TSC is invariant and shared by
//! all cores on modern x86-64, which gives HaLock's "global clock" for free.
//! The recorder converts ticks to nanoseconds with a calibration against
//! CLOCK_MONOTONIC (see [`calibrate`]). On other architectures we fall back
//! to CLOCK_MONOTONIC in nanoseconds (then ticks == ns).

use core::sync::atomic::{AtomicBool, Ordering};

/// Environment variable naming the clock the program's events are stamped
/// with (`tsc` or `monotonic`), chosen by the recorder at start-up
/// ([`choose`]) and passed to the program, so both sides read the same
/// clock.
pub const ENV_CLOCK: &str = "LOCKSCOPE_CLOCK";

/// True when [`now`] reads CLOCK_MONOTONIC instead of the TSC (a VM that
/// traps or slows `rdtsc` more than the vDSO clock costs). Set once at
/// start-up, before recording is switched on; read-only afterwards.
static USE_MONOTONIC: AtomicBool = AtomicBool::new(false);

/// Makes [`now`] read CLOCK_MONOTONIC (`true`) or the TSC (`false`).
/// Call before any event is stamped.
pub fn use_monotonic(on: bool) {
    USE_MONOTONIC.store(on, Ordering::Relaxed);
}

/// True when [`now`] reads CLOCK_MONOTONIC.
pub fn is_monotonic() -> bool {
    USE_MONOTONIC.load(Ordering::Relaxed)
}

/// Measured cost of one read of each clock, in ns.
#[derive(Clone, Copy, Debug)]
pub struct ClockCosts {
    /// One `rdtsc` (on other architectures: CLOCK_MONOTONIC again).
    pub tsc_ns: f64,
    /// One `clock_gettime(CLOCK_MONOTONIC)`.
    pub monotonic_ns: f64,
}

/// Measures both clocks (best of 5 rounds of 2,000 reads each; a few
/// hundred microseconds) and returns the cheaper one's name (`"tsc"` or
/// `"monotonic"`) with the costs. The TSC wins ties: it is the finer
/// clock. In a VM that traps `rdtsc` the TSC read costs microseconds and
/// the vDSO clock wins (21-23 ns for `rdtsc` in one VM, 6-7 ns
/// in another: the cost must be measured, not assumed).
pub fn choose() -> (&'static str, ClockCosts) {
    fn per_read(f: &dyn Fn() -> u64) -> f64 {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t0 = std::time::Instant::now();
            let mut acc = 0u64;
            for _ in 0..2000 {
                acc = acc.wrapping_add(f());
            }
            std::hint::black_box(acc);
            best = best.min(t0.elapsed().as_nanos() as f64 / 2000.0);
        }
        best
    }
    let costs = ClockCosts {
        tsc_ns: per_read(&raw_tsc),
        monotonic_ns: per_read(&monotonic_ns),
    };
    let name = if costs.tsc_ns <= costs.monotonic_ns || !cfg!(target_arch = "x86_64") {
        "tsc"
    } else {
        "monotonic"
    };
    (name, costs)
}

/// Reads the timestamp counter (or CLOCK_MONOTONIC when chosen so at
/// start-up: see [`choose`]).
#[inline(always)]
pub fn now() -> u64 {
    // One relaxed load of a read-only byte: far cheaper than either clock.
    if USE_MONOTONIC.load(Ordering::Relaxed) {
        return monotonic_ns();
    }
    raw_tsc()
}

/// Reads the clock once every earlier instruction has executed: the
/// stamp of an acquisition, taken after the real lock returned. A plain
/// `rdtsc` may execute before the lock's locked instruction completes,
/// and that instruction can wait ~100 ns for the cache line the previous
/// owner released: the acquisition was then stamped before the release
/// it followed (sections nested by up to ~85 ns).
/// `lfence; rdtsc` waits for them (lfence is dispatch-serializing on
/// Intel, and on AMD under Linux, which enables that since Spectre v1).
/// `rdtscp` would do the same in one instruction but is missing on some
/// virtual CPUs, where it would kill the program with SIGILL.
#[inline(always)]
pub fn now_after() -> u64 {
    if USE_MONOTONIC.load(Ordering::Relaxed) {
        return monotonic_ns();
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: lfence (SSE2, part of x86-64) and rdtsc have no memory
        // effects and exist on every x86-64 CPU.
        unsafe {
            core::arch::x86_64::_mm_lfence();
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

#[inline(always)]
fn raw_tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no memory effects and is available on every
        // x86-64 CPU. Not serializing on purpose: a fence would cost more
        // than the read and the events are ordered by their ring anyway.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A (ticks, monotonic ns) pair taken as close together as possible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockPair {
    /// TSC ticks.
    pub tsc: u64,
    /// CLOCK_MONOTONIC ns.
    pub mono_ns: u64,
}

/// Takes a [`ClockPair`]: the TSC read is bracketed by two clock reads and
/// the tightest of a few tries wins, so the pair is accurate to well under
/// a microsecond.
pub fn pair() -> ClockPair {
    let mut best = (u64::MAX, ClockPair { tsc: 0, mono_ns: 0 });
    for _ in 0..5 {
        let a = monotonic_ns();
        let t = now();
        let b = monotonic_ns();
        if b - a < best.0 {
            best = (
                b - a,
                ClockPair {
                    tsc: t,
                    mono_ns: a + (b - a) / 2,
                },
            );
        }
    }
    best.1
}

/// Ticks per second from two pairs taken some time apart.
pub fn hz_between(a: ClockPair, b: ClockPair) -> f64 {
    let dt = b.mono_ns.saturating_sub(a.mono_ns);
    if dt == 0 || b.tsc <= a.tsc {
        return 1e9;
    }
    (b.tsc - a.tsc) as f64 * 1e9 / dt as f64
}

/// Measures ticks per second over `ms` milliseconds (the recorder does this
/// at start and refines it with a second pair at the end).
pub fn calibrate(ms: u64) -> f64 {
    let a = pair();
    std::thread::sleep(std::time::Duration::from_millis(ms));
    hz_between(a, pair())
}
