//! The timestamp counter.
//!
//! rdtsc costs ~7 ns on this kind of machine against ~25 ns for
//! clock_gettime (capture-facts.md), and the TSC is invariant and shared by
//! all cores on modern x86-64, which gives HaLock's "global clock" for free.
//! The recorder converts ticks to nanoseconds with a calibration against
//! CLOCK_MONOTONIC (see [`calibrate`]). On other architectures we fall back
//! to CLOCK_MONOTONIC in nanoseconds (then ticks == ns).

/// Reads the timestamp counter.
#[inline(always)]
pub fn now() -> u64 {
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
#[derive(Clone, Copy, Debug)]
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
