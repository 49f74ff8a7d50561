//! Model checking with loom: every interleaving (up to the preemption
//! bound) of a few threads is explored.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p lockscope-locks --test loom --release`
//! (each model has its own preemption bound; setting LOOM_MAX_PREEMPTIONS
//! overrides all of them, and the heaviest models then run for many minutes)
//!
//! Mutual exclusion is checked by loom itself: the protected counter is a
//! `loom::cell::UnsafeCell`, and two unsynchronised accesses to it fail the
//! model. FIFO order is checked for the queue locks (MCS, CLH, ticket) and
//! for HMCS threads of one leaf; bounded waiting across domains of HMCS is
//! checked by letting one domain pass the lock at most `threshold` times.
#![cfg(loom)]

use lockscope_locks::{
    set_thread_cpu, Ahmcs, Clh, Cmcs, Hierarchy, Hmcs, Mcs, RawLock, Spin, SpinThenPark, Tas,
    Ticket, Ttas,
};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// loom::model with the preemption bound from LOOM_MAX_PREEMPTIONS
/// (default 2, which keeps the suite to a few minutes) and room for the
/// polling loops of spin locks.
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    model_bounded(2, f)
}

/// As [`model`] with a default preemption bound of `bound`.
fn model_bounded<F: Fn() + Sync + Send + 'static>(bound: usize, f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    b.max_branches = 50_000;
    b.check(f);
}

struct Shared<L> {
    lock: L,
    count: UnsafeCell<usize>,
}

fn incr<L: RawLock>(s: &Shared<L>) {
    s.lock.lock();
    s.count.with_mut(|c| unsafe { *c += 1 });
    unsafe { s.lock.unlock() };
}

/// Two threads increment under the lock; a third only tries.
fn mutual_exclusion<L: RawLock + 'static>(make: fn() -> L) {
    model(move || {
        let s = Arc::new(Shared {
            lock: make(),
            count: UnsafeCell::new(0),
        });
        let s1 = s.clone();
        let t1 = thread::spawn(move || {
            set_thread_cpu(Some(1));
            incr(&s1);
        });
        set_thread_cpu(Some(0));
        incr(&s);
        if s.lock.try_lock() {
            s.count.with_mut(|c| unsafe { *c += 1 });
            unsafe { s.lock.unlock() };
        }
        t1.join().unwrap();
        let n = s.count.with(|c| unsafe { *c });
        assert!(n == 2 || n == 3, "count {n}");
    });
}

macro_rules! me_tests {
    ($($name:ident => $e:expr),*) => {$(
        #[test]
        fn $name() {
            mutual_exclusion($e);
        }
    )*};
}

fn two_leaves() -> Hierarchy {
    // Two leaves under a root, threshold 1: every hand-over inside a leaf
    // also exercises the ACQUIRE_PARENT path.
    Hierarchy::parse("2:1").unwrap()
}

me_tests!(
    me_tas_spin => Tas::<Spin>::new,
    me_tas_park => Tas::<SpinThenPark>::new,
    me_ttas_spin => Ttas::<Spin>::new,
    me_ttas_park => Ttas::<SpinThenPark>::new,
    me_ticket_spin => Ticket::<Spin>::new,
    me_ticket_park => Ticket::<SpinThenPark>::new,
    me_mcs_spin => Mcs::<Spin>::new,
    me_mcs_park => Mcs::<SpinThenPark>::new,
    me_clh_spin => Clh::<Spin>::new,
    me_clh_park => Clh::<SpinThenPark>::new,
    me_cmcs_spin => || Cmcs::<Spin>::with_hierarchy(&two_leaves()),
    me_hmcs_spin => || Hmcs::<Spin>::with_hierarchy(&two_leaves()),
    me_hmcs_park => || Hmcs::<SpinThenPark>::with_hierarchy(&two_leaves()),
    me_hmcs_one_leaf => || Hmcs::<Spin>::with_hierarchy(&Hierarchy::parse("1:1").unwrap()),
    me_ahmcs_spin => || Ahmcs::<Spin>::with_hierarchy(&two_leaves()),
    me_ahmcs_park => || Ahmcs::<SpinThenPark>::with_hierarchy(&two_leaves())
);

/// FIFO without polling (polling loops explode loom's state space): main
/// holds the lock while A and B queue up concurrently; each reports where
/// it queued (`key`) and in which order it entered. Whoever queued behind
/// the other must enter after it.
fn fifo<L: RawLock + 'static>(bound: usize, make: fn() -> L, traced: fn(&L) -> (usize, usize)) {
    model_bounded(bound, move || {
        let lock = Arc::new(make());
        let order = Arc::new(AtomicUsize::new(0));
        lock.lock();
        let spawn = || {
            let (lock, order) = (lock.clone(), order.clone());
            thread::spawn(move || {
                let (me, behind) = traced(&lock);
                let pos = order.fetch_add(1, Ordering::SeqCst);
                unsafe { lock.unlock() };
                (me, behind, pos)
            })
        };
        let a = spawn();
        let b = spawn();
        unsafe { lock.unlock() };
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        // For queue locks `behind` is the predecessor's node; for the ticket
        // lock (me, behind) = (ticket, ticket - 1).
        if b.1 == a.0 && b.1 != 0 {
            assert!(a.2 < b.2, "B queued behind A but entered first");
        }
        if a.1 == b.0 && a.1 != 0 {
            assert!(b.2 < a.2, "A queued behind B but entered first");
        }
    });
}

#[test]
fn fifo_ticket() {
    // Two waiters polling one shared word: with 2 preemptions the model
    // does not finish in minutes; 1 does in a second.
    fifo(1, Ticket::<SpinThenPark>::new, |l| {
        let t = l.debug_lock_traced() as usize;
        (t + 1, t)
    });
}

#[test]
fn fifo_mcs() {
    fifo(2, Mcs::<Spin>::new, |l| l.debug_lock_traced());
    fifo(2, Mcs::<SpinThenPark>::new, |l| l.debug_lock_traced());
}

#[test]
fn fifo_clh() {
    fifo(2, Clh::<Spin>::new, |l| l.debug_lock_traced());
    fifo(2, Clh::<SpinThenPark>::new, |l| l.debug_lock_traced());
}

/// Three threads, two of them on one leaf, threshold 1: local passing,
/// climbing with ACQUIRE_PARENT and passing at the root all interleave.
fn three_threads<L: RawLock + 'static>(bound: usize, make: fn() -> L, rounds: usize) {
    model_bounded(bound, move || {
        let s = Arc::new(Shared {
            lock: make(),
            count: UnsafeCell::new(0),
        });
        let hs: Vec<_> = [0usize, 1]
            .into_iter()
            .map(|cpu| {
                let s = s.clone();
                thread::spawn(move || {
                    set_thread_cpu(Some(cpu));
                    for _ in 0..rounds {
                        incr(&s);
                    }
                })
            })
            .collect();
        set_thread_cpu(Some(0));
        for _ in 0..rounds {
            incr(&s);
        }
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(s.count.with(|c| unsafe { *c }), 3 * rounds);
    });
}

#[test]
fn me_hmcs_three_threads_two_domains() {
    // Every path of HMCS goes through two levels: with 2 preemptions the
    // three-thread model does not finish in minutes.
    three_threads(1, || Hmcs::<SpinThenPark>::with_hierarchy(&two_leaves()), 1);
}

#[test]
fn me_ahmcs_three_threads_two_domains() {
    three_threads(2, || Ahmcs::<Spin>::with_hierarchy(&two_leaves()), 1);
}

#[test]
fn me_ahmcs_adapts_over_rounds() {
    // Two rounds per thread: the second starts at the level the
    // hysteresis chose after the first (fast path or leaf), over a
    // three-level tree.
    model(|| {
        let s = Arc::new(Shared {
            lock: Ahmcs::<SpinThenPark>::with_hierarchy(&Hierarchy::parse("2x1:1,1").unwrap()),
            count: UnsafeCell::new(0),
        });
        let s1 = s.clone();
        let t = thread::spawn(move || {
            set_thread_cpu(Some(1));
            incr(&s1);
            incr(&s1);
        });
        set_thread_cpu(Some(0));
        incr(&s);
        incr(&s);
        t.join().unwrap();
        assert_eq!(s.count.with(|c| unsafe { *c }), 4);
    });
}

#[test]
fn me_cmcs_park() {
    mutual_exclusion(|| Cmcs::<SpinThenPark>::with_hierarchy(&two_leaves()));
}

/// Bounded waiting (thesis §4.5.1.2) rests on each domain passing the lock
/// at most `threshold` times in a row before releasing the level above.
/// Three threads, two on leaf 0, threshold 1: no acquisition may ever be a
/// second local pass, in any interleaving.
#[test]
fn hmcs_never_passes_beyond_the_threshold() {
    model_bounded(1, || {
        let lock = Arc::new(Hmcs::<Spin>::with_hierarchy(&two_leaves()));
        let worst = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = [0usize, 1]
            .into_iter()
            .map(|cpu| {
                let (lock, worst) = (lock.clone(), worst.clone());
                thread::spawn(move || {
                    set_thread_cpu(Some(cpu));
                    lock.lock();
                    worst.fetch_max(lock.debug_holder_pass_count() as usize, Ordering::SeqCst);
                    unsafe { lock.unlock() };
                })
            })
            .collect();
        set_thread_cpu(Some(0));
        lock.lock();
        worst.fetch_max(lock.debug_holder_pass_count() as usize, Ordering::SeqCst);
        unsafe { lock.unlock() };
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(
            worst.load(Ordering::SeqCst),
            1,
            "a domain kept the lock beyond its threshold"
        );
    });
}
