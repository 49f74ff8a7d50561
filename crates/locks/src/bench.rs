//! The thesis's lock microbenchmarks (ch. 4): threads acquire and release
//! one lock in a loop for a fixed time, with an empty critical section or
//! one that updates a few shared cache lines; reported per run are the
//! throughput and each thread's share of the acquisitions (fairness).

use crate::dynlock::DynLock;
use crate::{Algorithm, WaitPolicy};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// What a critical section does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CriticalSection {
    /// Nothing: measures the lock hand-over alone.
    Empty,
    /// Increments [`SHARED_LINES`] shared cache lines: the lock hand-over
    /// also moves the protected data between caches.
    NonEmpty,
}

/// Cache lines written by a non-empty critical section.
pub const SHARED_LINES: usize = 4;

impl CriticalSection {
    /// Name used on the command line and in output.
    pub fn name(self) -> &'static str {
        match self {
            CriticalSection::Empty => "empty",
            CriticalSection::NonEmpty => "nonempty",
        }
    }
}

/// Which lock a run uses: one of ours, or the system's pthread mutex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// glibc's `pthread_mutex_t` (normal type): the baseline.
    Pthread,
    /// An algorithm of this crate.
    Lock(Algorithm, WaitPolicy),
}

impl Subject {
    /// Algorithm name ("pthread" for the baseline).
    pub fn algorithm_name(self) -> &'static str {
        match self {
            Subject::Pthread => "pthread",
            Subject::Lock(a, _) => a.name(),
        }
    }
    /// Waiting policy name ("futex" for the baseline, which spins briefly
    /// only for adaptive mutexes and otherwise sleeps at once).
    pub fn wait_name(self) -> &'static str {
        match self {
            Subject::Pthread => "futex",
            Subject::Lock(_, w) => w.name(),
        }
    }
}

/// A benchmark campaign.
#[derive(Debug, Clone)]
pub struct Config {
    /// Locks to measure.
    pub subjects: Vec<Subject>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Critical sections.
    pub critical_sections: Vec<CriticalSection>,
    /// Duration of each run.
    pub duration: Duration,
}

impl Config {
    /// Every algorithm with both policies, plus pthread.
    pub fn all_subjects() -> Vec<Subject> {
        let mut v = vec![Subject::Pthread];
        for a in Algorithm::ALL {
            for w in WaitPolicy::ALL {
                v.push(Subject::Lock(a, w));
            }
        }
        v
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Algorithm name ("pthread" for glibc's mutex).
    pub algorithm: String,
    /// Waiting policy name.
    pub wait: String,
    /// Critical section kind.
    pub critical_section: CriticalSection,
    /// Threads.
    pub threads: usize,
    /// Measured wall time in seconds.
    pub seconds: f64,
    /// Acquisitions by all threads.
    pub acquisitions: u64,
    /// Million acquisitions per second.
    pub mops: f64,
    /// Acquisitions of each thread.
    pub per_thread: Vec<u64>,
    /// Each thread's share of the acquisitions (sums to 1).
    pub shares: Vec<f64>,
    /// Smallest share times the thread count (1 = perfectly fair, 0 = some
    /// thread starved).
    pub min_share_ratio: f64,
    /// Largest share times the thread count.
    pub max_share_ratio: f64,
    /// Jain's fairness index of the per-thread counts (1 = equal, 1/n = one
    /// thread got everything).
    pub jain: f64,
    /// Whether the protected counters matched the acquisitions (a mutual
    /// exclusion check that runs alongside the measurement).
    pub consistent: bool,
}

#[repr(C, align(64))]
struct Line(std::cell::UnsafeCell<u64>);

struct Shared {
    lines: [Line; SHARED_LINES],
}
// SAFETY: the lines are only written under the lock being measured.
unsafe impl Sync for Shared {}

trait BenchLock: Send + Sync {
    fn acquire(&self);
    fn release(&self);
}

impl BenchLock for DynLock {
    #[inline]
    fn acquire(&self) {
        self.lock()
    }
    #[inline]
    fn release(&self) {
        // SAFETY: called right after acquire by the same thread.
        unsafe { self.unlock() }
    }
}

#[repr(C, align(64))]
struct PthreadLock(std::cell::UnsafeCell<libc::pthread_mutex_t>);
// SAFETY: pthread mutexes are made to be shared between threads.
unsafe impl Sync for PthreadLock {}
// SAFETY: a normal pthread mutex is not tied to the thread that created it.
unsafe impl Send for PthreadLock {}
impl BenchLock for PthreadLock {
    #[inline]
    fn acquire(&self) {
        // SAFETY: statically initialised mutex that never moves.
        unsafe { libc::pthread_mutex_lock(self.0.get()) };
    }
    #[inline]
    fn release(&self) {
        // SAFETY: held by this thread.
        unsafe { libc::pthread_mutex_unlock(self.0.get()) };
    }
}

/// Runs one measurement.
pub fn run_one(
    subject: Subject,
    cs: CriticalSection,
    threads: usize,
    duration: Duration,
) -> RunResult {
    let lock: Arc<dyn BenchLock> = match subject {
        Subject::Pthread => Arc::new(PthreadLock(std::cell::UnsafeCell::new(
            libc::PTHREAD_MUTEX_INITIALIZER,
        ))),
        Subject::Lock(a, w) => Arc::new(DynLock::new(a, w)),
    };
    let threads = threads.max(1);
    let shared = Arc::new(Shared {
        lines: std::array::from_fn(|_| Line(std::cell::UnsafeCell::new(0))),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(threads + 1));
    let counts: Arc<Vec<AtomicU64>> = Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
    let mut handles = Vec::new();
    for t in 0..threads {
        let (lock, shared, stop, start, counts) = (
            lock.clone(),
            shared.clone(),
            stop.clone(),
            start.clone(),
            counts.clone(),
        );
        handles.push(std::thread::spawn(move || {
            start.wait();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                lock.acquire();
                if cs == CriticalSection::NonEmpty {
                    for l in &shared.lines {
                        // SAFETY: under the lock.
                        unsafe { *l.0.get() += 1 };
                    }
                } else {
                    // SAFETY: under the lock; one line counts acquisitions.
                    unsafe { *shared.lines[0].0.get() += 1 };
                }
                lock.release();
                n += 1;
            }
            counts[t].store(n, Ordering::Relaxed);
        }));
    }
    start.wait();
    let t0 = Instant::now();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let seconds = t0.elapsed().as_secs_f64();
    let per_thread: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let total: u64 = per_thread.iter().sum();
    // SAFETY: all threads joined.
    let protected: Vec<u64> = shared.lines.iter().map(|l| unsafe { *l.0.get() }).collect();
    let consistent = match cs {
        CriticalSection::NonEmpty => protected.iter().all(|&v| v == total),
        CriticalSection::Empty => protected[0] == total,
    };
    summarize(subject, cs, seconds, per_thread, consistent)
}

fn summarize(
    subject: Subject,
    cs: CriticalSection,
    seconds: f64,
    per_thread: Vec<u64>,
    consistent: bool,
) -> RunResult {
    let n = per_thread.len().max(1) as f64;
    let total: u64 = per_thread.iter().sum();
    let shares: Vec<f64> = per_thread
        .iter()
        .map(|&c| {
            if total == 0 {
                0.0
            } else {
                c as f64 / total as f64
            }
        })
        .collect();
    let sum: f64 = per_thread.iter().map(|&c| c as f64).sum();
    let sumsq: f64 = per_thread.iter().map(|&c| (c as f64) * (c as f64)).sum();
    let jain = if sumsq == 0.0 {
        0.0
    } else {
        sum * sum / (n * sumsq)
    };
    let min = shares.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = shares.iter().cloned().fold(0.0, f64::max);
    RunResult {
        algorithm: subject.algorithm_name().to_string(),
        wait: subject.wait_name().to_string(),
        critical_section: cs,
        threads: per_thread.len(),
        seconds,
        acquisitions: total,
        mops: if seconds > 0.0 {
            total as f64 / seconds / 1e6
        } else {
            0.0
        },
        min_share_ratio: if min.is_finite() { min * n } else { 0.0 },
        max_share_ratio: max * n,
        per_thread,
        shares,
        jain,
        consistent,
    }
}

/// Runs the whole campaign, calling `progress` after each run.
pub fn run(config: &Config, mut progress: impl FnMut(&RunResult)) -> Vec<RunResult> {
    let mut out = Vec::new();
    for &cs in &config.critical_sections {
        for &s in &config.subjects {
            for &t in &config.threads {
                let r = run_one(s, cs, t, config.duration);
                progress(&r);
                out.push(r);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fairness_figures_are_computed_from_counts() {
        let r = summarize(
            Subject::Pthread,
            CriticalSection::Empty,
            1.0,
            vec![30, 10],
            true,
        );
        assert_eq!(r.acquisitions, 40);
        assert!((r.shares[0] - 0.75).abs() < 1e-9);
        assert!((r.min_share_ratio - 0.5).abs() < 1e-9);
        assert!((r.max_share_ratio - 1.5).abs() < 1e-9);
        assert!((r.jain - 0.8).abs() < 1e-9);
        assert!((r.mops - 40e-6).abs() < 1e-12);
    }

    #[test]
    fn a_short_run_counts_every_acquisition_under_each_lock() {
        for s in [
            Subject::Pthread,
            Subject::Lock(Algorithm::Mcs, WaitPolicy::SpinThenPark),
        ] {
            let r = run_one(s, CriticalSection::NonEmpty, 3, Duration::from_millis(30));
            assert!(r.consistent, "{r:?}");
            assert!(r.acquisitions > 0);
            assert_eq!(r.per_thread.len(), 3);
        }
    }
}
