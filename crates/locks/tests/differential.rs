//! Differential tests against `std::sync::Mutex`: the same operations,
//! performed under std's mutex and under each algorithm, must give the same
//! observable results.
#![cfg(not(loom))]

use lockscope_locks::dynlock::DynLock;
use lockscope_locks::{lock_api, Algorithm, Mcs, SpinThenPark, Ticket, WaitPolicy};
use std::cell::UnsafeCell;
use std::sync::Arc;

/// A small deterministic generator (xorshift) so each thread's operation
/// stream is the same under every lock.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const ACCOUNTS: usize = 8;
const THREADS: usize = 5;
const OPS: usize = 4_000;

/// Bank transfers: each thread moves random amounts between accounts and
/// checks at every entry that money is conserved (a torn update by a
/// concurrent holder would break it). Returns final balances and the
/// number of entries that saw a broken invariant.
fn bank<B: Fn() -> G + Send + Sync + 'static, G>(
    enter: B,
    state: Arc<Bank>,
) -> ([i64; ACCOUNTS], u64) {
    let enter = Arc::new(enter);
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let (enter, state) = (enter.clone(), state.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9 + t as u64 * 7919);
                let mut broken = 0;
                for _ in 0..OPS {
                    let (a, b, amt) = (
                        rng.next() as usize % ACCOUNTS,
                        rng.next() as usize % ACCOUNTS,
                        (rng.next() % 100) as i64,
                    );
                    let g = enter();
                    // SAFETY: under the lock represented by `g`.
                    let acc = unsafe { &mut *state.acc.get() };
                    if acc.iter().sum::<i64>() != 1_000 * ACCOUNTS as i64 {
                        broken += 1;
                    }
                    acc[a] -= amt;
                    std::hint::spin_loop();
                    acc[b] += amt;
                    drop(g);
                }
                broken
            })
        })
        .collect();
    let broken = hs.into_iter().map(|h| h.join().unwrap()).sum();
    // SAFETY: all threads joined.
    (unsafe { *state.acc.get() }, broken)
}

struct Bank {
    acc: UnsafeCell<[i64; ACCOUNTS]>,
}
// SAFETY: the accounts are touched only under the lock under test (or
// after every thread joined): the test checks that lock's exclusion.
unsafe impl Sync for Bank {}
// SAFETY: plain integers, no thread affinity.
unsafe impl Send for Bank {}
fn new_bank() -> Arc<Bank> {
    Arc::new(Bank {
        acc: UnsafeCell::new([1_000; ACCOUNTS]),
    })
}

struct DynGuard(Arc<DynLock>);
impl Drop for DynGuard {
    fn drop(&mut self) {
        // SAFETY: created only after a successful lock.
        unsafe { self.0.unlock() }
    }
}

#[test]
fn bank_transfers_match_std_mutex_under_every_algorithm() {
    static M: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let m = &M;
    let (expected, broken) = bank(move || m.lock().unwrap(), new_bank());
    assert_eq!(broken, 0);
    for alg in Algorithm::ALL {
        for w in WaitPolicy::ALL {
            let l = Arc::new(DynLock::new(alg, w));
            let (got, broken) = bank(
                move || {
                    l.lock();
                    DynGuard(l.clone())
                },
                new_bank(),
            );
            assert_eq!(broken, 0, "{alg} {w}: an entry saw a torn update");
            assert_eq!(
                got, expected,
                "{alg} {w}: final balances differ from std::sync::Mutex"
            );
        }
    }
}

#[test]
fn single_thread_try_lock_answers_match_std_mutex() {
    // A random script of lock / try_lock / unlock on one thread: try_lock
    // must succeed exactly when std's does (std's try_lock on a mutex held
    // by the same thread fails without deadlocking, like ours).
    for alg in Algorithm::ALL {
        for w in WaitPolicy::ALL {
            let ours = DynLock::new(alg, w);
            let std_m = std::sync::Mutex::new(());
            let mut std_guard = None;
            let mut held = false;
            let mut rng = Rng(42);
            for step in 0..2_000 {
                match rng.next() % 3 {
                    0 if !held => {
                        ours.lock();
                        std_guard = Some(std_m.lock().unwrap());
                        held = true;
                    }
                    1 => {
                        let a = ours.try_lock();
                        let b = std_m.try_lock();
                        assert_eq!(
                            a,
                            b.is_ok(),
                            "{alg} {w} step {step}: try_lock answers differ"
                        );
                        if let Ok(g) = b {
                            std_guard = Some(g);
                            held = true;
                        }
                    }
                    _ if held => {
                        // SAFETY: held.
                        unsafe { ours.unlock() };
                        std_guard = None;
                        held = false;
                    }
                    _ => {}
                }
            }
            if held {
                // SAFETY: held.
                unsafe { ours.unlock() };
            }
            drop(std_guard);
        }
    }
}

#[test]
fn lock_api_mutex_collects_the_same_values_as_std() {
    fn run<M: Send + Sync + 'static>(m: Arc<M>, push: fn(&M, u64)) {
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000 {
                        push(&m, t * 10_000 + i);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
    let s = Arc::new(std::sync::Mutex::new(Vec::new()));
    run(s.clone(), |m, v| m.lock().unwrap().push(v));
    let mut expected = s.lock().unwrap().clone();
    expected.sort_unstable();

    let a: Arc<lock_api::Mutex<Mcs<SpinThenPark>, Vec<u64>>> =
        Arc::new(lock_api::Mutex::new(Vec::new()));
    run(a.clone(), |m, v| m.lock().push(v));
    let mut got = a.lock().clone();
    got.sort_unstable();
    assert_eq!(got, expected);

    let b: Arc<lockscope_locks::Mutex<Ticket, Vec<u64>>> =
        Arc::new(lockscope_locks::Mutex::new(Vec::new()));
    run(b.clone(), |m, v| m.lock().push(v));
    let mut got = b.lock().clone();
    got.sort_unstable();
    assert_eq!(got, expected);
}

#[test]
fn is_locked_says_whether_the_lock_is_held_under_every_algorithm() {
    // `lockscope record` reads it to tell, before a swapped mutex's lock
    // call, that the call will wait: it must follow lock and unlock
    // exactly on one thread, and see a lock held by another thread.
    for alg in Algorithm::ALL {
        for w in WaitPolicy::ALL {
            let l = Arc::new(DynLock::new(alg, w));
            assert!(!l.is_locked(), "{alg} {w}: a fresh lock looks held");
            let mut rng = Rng(7);
            let mut held = false;
            for step in 0..500 {
                if held && rng.next() & 1 == 0 {
                    // SAFETY: held by this thread.
                    unsafe { l.unlock() };
                    held = false;
                } else if !held {
                    if rng.next() & 1 == 0 {
                        l.lock();
                    } else {
                        assert!(l.try_lock());
                    }
                    held = true;
                }
                assert_eq!(l.is_locked(), held, "{alg} {w} step {step}");
            }
            if held {
                // SAFETY: held by this thread.
                unsafe { l.unlock() };
            }
            let other = Arc::clone(&l);
            std::thread::spawn(move || other.lock()).join().unwrap();
            assert!(
                l.is_locked(),
                "{alg} {w}: held by another thread, looks free"
            );
            // SAFETY: the other thread's acquisition is released here
            // (every algorithm allows unlocking from another thread).
            unsafe { l.unlock() };
            assert!(!l.is_locked(), "{alg} {w}: released, looks held");
        }
    }
}
