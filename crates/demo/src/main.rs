//! `lockscope-demo`: a program worth profiling, in one second.
//!
//! Four threads share a work queue behind one pthread mutex (the hot lock:
//! every item goes through it twice), update shared statistics behind a
//! second pthread mutex now and then (rarely contended), and fold results
//! into a `std::sync::Mutex` held for a long stretch (contended; Rust's
//! std mutex reaches the recorder only through the futex system call).
//!
//! The pthread mutexes are used through `libc` directly, not through a
//! Rust wrapper, so that the preload library interposes exactly the calls
//! a C program would make. Usage: `lockscope-demo [SECONDS]` (default 1).

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const THREADS: usize = 4;

/// A pthread mutex guarding a value, the way C code does it.
struct PMutex<T> {
    m: UnsafeCell<libc::pthread_mutex_t>,
    v: UnsafeCell<T>,
}

// SAFETY: `v` is only touched between lock and unlock of `m`.
unsafe impl<T: Send> Sync for PMutex<T> {}

impl<T> PMutex<T> {
    fn new(v: T) -> Self {
        PMutex {
            m: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
            v: UnsafeCell::new(v),
        }
    }
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: the mutex is initialized and never moved (it lives in a
        // Box or a static for the whole run).
        unsafe {
            libc::pthread_mutex_lock(self.m.get());
            let r = f(&mut *self.v.get());
            libc::pthread_mutex_unlock(self.m.get());
            r
        }
    }
}

#[derive(Default)]
struct Stats {
    batches: u64,
    items: u64,
}

/// Some work outside any lock, so the program is not only locking.
fn work(x: u64) -> u64 {
    let mut h = x;
    for _ in 0..3000 {
        h = h
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
    }
    h
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| *s > 0.0 && *s < 3600.0)
        .unwrap_or(1.0);
    let queue = Box::new(PMutex::new(VecDeque::<u64>::with_capacity(1024)));
    let stats = Box::new(PMutex::new(Stats::default()));
    let results = Mutex::new(Vec::<u64>::new());
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let per_thread: Vec<(u64, u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (queue, stats, results, stop) = (&*queue, &*stats, &results, &stop);
                s.spawn(move || {
                    let (mut ops, mut folds, mut acc) = (0u64, 0u64, t as u64);
                    while !stop.load(Ordering::Relaxed) {
                        // The hot lock: push one item, pop one item.
                        queue.with(|q| q.push_back(acc));
                        let item = queue.with(|q| q.pop_front()).unwrap_or(0);
                        acc = work(item ^ acc);
                        ops += 2;
                        if ops % 256 == 0 {
                            // The rarely contended lock.
                            stats.with(|st| {
                                st.batches += 1;
                                st.items += 128;
                            });
                        }
                        if ops % 4096 == 0 {
                            // A long critical section on a std Mutex: the
                            // others queue up behind it in the kernel.
                            let mut r = results.lock().unwrap();
                            let mut x = acc;
                            for _ in 0..20 {
                                x = work(x);
                            }
                            r.push(x);
                            folds += 1;
                        }
                    }
                    (ops, folds, acc)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = start.elapsed();
    let ops: u64 = per_thread.iter().map(|p| p.0).sum();
    let folds: u64 = per_thread.iter().map(|p| p.1).sum();
    let st = stats.with(|s| (s.batches, s.items));
    println!(
        "lockscope-demo: {THREADS} threads ran for {:.2} s",
        elapsed.as_secs_f64()
    );
    println!("  queue lock (pthread mutex, hot):      {ops} lock/unlock pairs");
    println!("  stats lock (pthread mutex, rare):     {} updates", st.0);
    println!("  results lock (std::sync::Mutex, long): {folds} sections");
    println!(
        "  checksum {:016x}",
        per_thread.iter().fold(0u64, |a, p| a.wrapping_add(p.2))
    );
}
