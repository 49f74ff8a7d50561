//! Queue nodes and the per-thread pool they come from.
//!
//! Queue locks (MCS, CLH, HMCS) need one node per waiting thread per lock.
//! A `lock_api`-style interface has no place for the caller to pass one, so
//! each thread keeps a free list of nodes: `lock` takes one, the lock records
//! it as its holder's node, and `unlock` gives it back. A node is allocated
//! only when a thread holds (or waits for) more locks at once than ever
//! before, so steady-state lock/unlock never allocates. Nodes are never
//! freed: a releaser may still read a node's `sleeping` flag just after the
//! node changed hands, and that read must stay a read of live memory. A
//! thread that exits leaves its few pooled nodes behind (64 bytes each, one
//! per lock it ever held at the same time).

use crate::sync::{AtomicPtr, AtomicU32, Ordering};
use std::cell::Cell;
use std::ptr::null_mut;

/// A queue node. One cache line, so that spinning on one node does not
/// disturb its neighbours.
#[repr(C, align(64))]
pub(crate) struct QNode {
    /// Successor in an MCS-style queue.
    pub(crate) next: AtomicPtr<QNode>,
    /// What the waiter spins on (meaning depends on the algorithm).
    pub(crate) status: AtomicU32,
    /// Set by a parked waiter: the waker must issue a futex wake.
    pub(crate) sleeping: AtomicU32,
    /// HMCS: the tree node where the holder's acquisition started (so release
    /// starts there too); null for flat locks.
    pub(crate) start: AtomicPtr<u8>,
    /// Link in the owning thread's free list.
    pool_next: AtomicPtr<QNode>,
}

impl QNode {
    pub(crate) fn new() -> Self {
        QNode {
            next: AtomicPtr::new(null_mut()),
            status: AtomicU32::new(0),
            sleeping: AtomicU32::new(0),
            start: AtomicPtr::new(null_mut()),
            pool_next: AtomicPtr::new(null_mut()),
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    // No destructor on purpose: hooks may run during thread teardown, after
    // destructible thread-locals are gone.
    static FREE: Cell<*mut QNode> = const { Cell::new(null_mut()) };
}
#[cfg(loom)]
loom::thread_local! {
    static FREE: Cell<*mut QNode> = Cell::new(null_mut());
}

/// Takes a node from the calling thread's pool (allocating only if empty).
#[inline]
pub(crate) fn get() -> *mut QNode {
    let n = FREE.with(|f| {
        let head = f.get();
        if !head.is_null() {
            // SAFETY: nodes in the free list are live and owned by this thread.
            f.set(unsafe { (*head).pool_next.load(Ordering::Relaxed) });
        }
        head
    });
    if n.is_null() {
        Box::into_raw(Box::new(QNode::new()))
    } else {
        n
    }
}

/// Gives a node back to the calling thread's pool.
///
/// # Safety
/// `n` came from [`get`] and no queue references it any more.
#[inline]
pub(crate) unsafe fn put(n: *mut QNode) {
    FREE.with(|f| {
        // SAFETY: `n` is a live node (nodes are never freed) that no queue
        // references any more (the caller's contract), so this thread may
        // link it into its own free list.
        unsafe { (*n).pool_next.store(f.get(), Ordering::Relaxed) };
        f.set(n);
    });
}
