//! Properties of HMCS proved in thesis §4.5.1, checked on scripted
//! scenarios with real threads (the scheduling points that loom would
//! explore are awaited here by polling what the lock shows): FIFO order
//! inside one leaf domain, and bounded waiting across domains (a domain hands the lock over
//! locally at most `threshold` times while another domain waits).
#![cfg(not(loom))]

use lockscope_locks::{set_thread_cpu, Hierarchy, Hmcs, RawLock, Spin, SpinThenPark, Wait};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn wait_for(what: &str, cond: impl Fn() -> bool) {
    lockscope_test_support::poll_until(what, lockscope_test_support::DEFAULT_DEADLINE, cond)
}

fn spawn_locker<W: Wait>(
    lock: &Arc<Hmcs<W>>,
    order: &Arc<AtomicUsize>,
    cpu: usize,
) -> std::thread::JoinHandle<usize> {
    let (lock, order) = (lock.clone(), order.clone());
    std::thread::spawn(move || {
        set_thread_cpu(Some(cpu));
        lock.lock();
        let pos = order.fetch_add(1, Ordering::SeqCst);
        // SAFETY: acquired just above.
        unsafe { lock.unlock() };
        pos
    })
}

/// Main (leaf 0) holds; B (leaf 1) gets its domain queued at the root; A
/// (leaf 0) queues behind main. Returns (position of A, position of B).
fn cross_domain_scenario<W: Wait>(spec: &str) -> (usize, usize) {
    let lock = Arc::new(Hmcs::<W>::with_hierarchy(&Hierarchy::parse(spec).unwrap()));
    let order = Arc::new(AtomicUsize::new(0));
    set_thread_cpu(Some(0));
    lock.lock();
    let root_tail = lock.debug_root_tail();
    let b = spawn_locker(&lock, &order, 1);
    wait_for("leaf 1 to queue at the root", || {
        lock.debug_root_tail() != root_tail
    });
    let a = spawn_locker(&lock, &order, 0);
    wait_for("A to queue at leaf 0", || {
        lock.debug_leaf_tail(0) != lock.debug_holder_node()
    });
    // SAFETY: held by this thread.
    unsafe { lock.unlock() };
    set_thread_cpu(None);
    (a.join().unwrap(), b.join().unwrap())
}

#[test]
fn threshold_one_hands_over_to_the_waiting_domain() {
    // Leaf 0 has used its quota of 1: the lock must go to leaf 1 first.
    assert_eq!(cross_domain_scenario::<Spin>("2:1"), (1, 0));
    assert_eq!(cross_domain_scenario::<SpinThenPark>("2:1"), (1, 0));
}

#[test]
fn threshold_above_one_passes_locally_first() {
    // Leaf 0 may pass once more inside the domain: A enters before B.
    assert_eq!(cross_domain_scenario::<Spin>("2:2"), (0, 1));
    assert_eq!(cross_domain_scenario::<SpinThenPark>("2:64"), (0, 1));
}

#[test]
fn deep_tree_climbs_to_the_first_level_with_a_waiter() {
    // HMCS<3> "2x2:1,1": leaves 0,1 share a level-2 domain; leaf 2 is in
    // the other. Main on leaf 0 holds; a thread on leaf 2 waits at the
    // root; with thresholds of 1 it must get the lock first.
    let lock = Arc::new(Hmcs::<Spin>::with_hierarchy(
        &Hierarchy::parse("2x2:1,1").unwrap(),
    ));
    let order = Arc::new(AtomicUsize::new(0));
    set_thread_cpu(Some(0));
    lock.lock();
    let root_tail = lock.debug_root_tail();
    let far = spawn_locker(&lock, &order, 2);
    wait_for("the far domain at the root", || {
        lock.debug_root_tail() != root_tail
    });
    let near = spawn_locker(&lock, &order, 0);
    wait_for("a local waiter", || {
        lock.debug_leaf_tail(0) != lock.debug_holder_node()
    });
    // SAFETY: held by this thread.
    unsafe { lock.unlock() };
    set_thread_cpu(None);
    assert_eq!((far.join().unwrap(), near.join().unwrap()), (0, 1));
}

#[test]
fn fifo_inside_one_leaf() {
    for _ in 0..5 {
        let lock = Arc::new(Hmcs::<SpinThenPark>::with_hierarchy(
            &Hierarchy::parse("2:100").unwrap(),
        ));
        let order = Arc::new(AtomicUsize::new(0));
        set_thread_cpu(Some(0));
        lock.lock();
        let mut tail = lock.debug_leaf_tail(0);
        let mut hs = Vec::new();
        for _ in 0..4 {
            hs.push(spawn_locker(&lock, &order, 0));
            wait_for("the next waiter to queue", || {
                lock.debug_leaf_tail(0) != tail
            });
            tail = lock.debug_leaf_tail(0);
        }
        // SAFETY: held by this thread.
        unsafe { lock.unlock() };
        set_thread_cpu(None);
        let got: Vec<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(got, vec![0, 1, 2, 3]);
    }
}
