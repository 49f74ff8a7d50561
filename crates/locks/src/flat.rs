//! Flat (non-hierarchical) locks: test-and-set, test-test-and-set with
//! exponential backoff, ticket, MCS and CLH.

use crate::node::{self, QNode};
use crate::sync::{futex_wait, futex_wake, spin_hint, AtomicPtr, AtomicU32, Ordering};
use crate::wait::{wait_while_eq, wake, Backoff, Wait};
use crate::{Algorithm, RawLock, Spin};
use std::marker::PhantomData;
use std::ptr::null_mut;

type Policy<W> = PhantomData<fn() -> W>;

// Lock word values of the word locks. 2 means "held, and someone may sleep
// in the kernel": only ever written under the SpinThenPark policy, so that
// unlock knows when a futex wake is needed (the classic three-state futex
// mutex). With Spin the word is only 0 or 1.
const FREE: u32 = 0;
const HELD: u32 = 1;
const HELD_SLEEPERS: u32 = 2;

/// Waits for a word lock in the kernel. Called once a parking waiter has
/// spun long enough; returns holding the lock.
#[inline(never)]
fn park_word_lock(word: &AtomicU32) {
    // Marking the word "sleepers" before sleeping (and every time we wake)
    // keeps the invariant that a sleeper exists only if the word says 2, so
    // each unlock that sees 2 wakes one sleeper, who re-marks it.
    while word.swap(HELD_SLEEPERS, Ordering::Acquire) != FREE {
        futex_wait(word, HELD_SLEEPERS);
    }
}

#[inline]
fn unlock_word_lock<W: Wait>(word: &AtomicU32) {
    if W::PARKS {
        if word.swap(FREE, Ordering::Release) == HELD_SLEEPERS {
            futex_wake(word, 1);
        }
    } else {
        word.store(FREE, Ordering::Release);
    }
}

/// Test-and-set spinlock: every waiter hammers the lock word with atomic
/// exchanges, so the cache line ping-pongs between waiters.
pub struct Tas<W = Spin> {
    word: AtomicU32,
    _w: Policy<W>,
}

/// Test-test-and-set spinlock with exponential backoff: waiters read the
/// word (a shared cache line, no traffic while it does not change) and only
/// try the exchange when it looks free; after a failed exchange they back
/// off for a doubling delay.
pub struct Ttas<W = Spin> {
    word: AtomicU32,
    _w: Policy<W>,
}

/// Ticket lock: FIFO by taking a number and waiting for it to be served.
/// All waiters read the same `serving` word.
pub struct Ticket<W = Spin> {
    next: AtomicU32,
    /// Low 31 bits: the ticket being served. Top bit: some waiter may be
    /// asleep in the kernel (SpinThenPark only).
    serving: AtomicU32,
    _w: Policy<W>,
}

/// MCS queue lock: FIFO, each waiter spins on its own node.
pub struct Mcs<W = Spin> {
    tail: AtomicPtr<QNode>,
    holder: AtomicPtr<QNode>,
    _w: Policy<W>,
}

/// CLH queue lock: FIFO, each waiter spins on its predecessor's node.
///
/// Variant: a releaser with no successor swings the tail back to null (as
/// MCS does) instead of leaving its node there; so an unlocked, idle lock is
/// all zeroes (static initialisers work) and `try_lock` is a single
/// compare-and-swap on null, which cannot suffer ABA on recycled nodes.
pub struct Clh<W = Spin> {
    tail: AtomicPtr<QNode>,
    holder: AtomicPtr<QNode>,
    _w: Policy<W>,
}

macro_rules! ctor {
    ($t:ident { $($f:ident : $v:expr),* }) => {
        impl<W: Wait> $t<W> {
            /// A new, unlocked lock (all zero bytes).
            #[cfg(not(loom))]
            pub const fn new() -> Self {
                $t { $($f: $v,)* _w: PhantomData }
            }
            /// A new, unlocked lock (all zero bytes).
            #[cfg(loom)]
            pub fn new() -> Self {
                $t { $($f: $v,)* _w: PhantomData }
            }
        }
        impl<W: Wait> Default for $t<W> {
            fn default() -> Self {
                Self::new()
            }
        }
    };
}
ctor!(Tas {
    word: AtomicU32::new(FREE)
});
ctor!(Ttas {
    word: AtomicU32::new(FREE)
});
ctor!(Ticket {
    next: AtomicU32::new(0),
    serving: AtomicU32::new(0)
});
ctor!(Mcs {
    tail: AtomicPtr::new(null_mut()),
    holder: AtomicPtr::new(null_mut())
});
ctor!(Clh {
    tail: AtomicPtr::new(null_mut()),
    holder: AtomicPtr::new(null_mut())
});

// ---------------------------------------------------------------- TAS

// SAFETY: the word is only ever changed by `lock`/`try_lock` (FREE to HELD or
// HELD_SLEEPERS, by one atomic swap or CAS that succeeds for one thread)
// and by `unlock` of the holder: mutual exclusion; all zero is FREE.
unsafe impl<W: Wait> RawLock for Tas<W> {
    const ALGORITHM: Algorithm = Algorithm::Tas;

    #[inline]
    fn lock(&self) {
        if self
            .word
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) != FREE
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.word
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        unlock_word_lock::<W>(&self.word);
    }
}

impl<W: Wait> Tas<W> {
    #[inline(never)]
    fn lock_slow(&self) {
        let mut b = Backoff::new();
        loop {
            if W::PARKS {
                if b.should_park() {
                    return park_word_lock(&self.word);
                }
                // A plain exchange to 1 could overwrite a 2 and lose a
                // sleeper's wake-up: take the lock only from FREE.
                if self.try_lock() {
                    return;
                }
            } else if test_and_set(&self.word) {
                return;
            }
            b.spin();
        }
    }
}

/// The atomic test-and-set of the spinning policy.
#[inline(always)]
fn test_and_set(word: &AtomicU32) -> bool {
    // Under loom, an exchange that writes HELD over HELD on every poll makes
    // the model's history grow without bound; a compare-and-swap from FREE
    // acquires in exactly the same cases and stores nothing when it fails.
    #[cfg(loom)]
    return word
        .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
        .is_ok();
    #[cfg(not(loom))]
    return word.swap(HELD, Ordering::Acquire) == FREE;
}

// ---------------------------------------------------------------- TTAS

#[cfg(not(loom))]
const BACKOFF_MIN: u32 = 4;
#[cfg(not(loom))]
const BACKOFF_MAX: u32 = 1024;
// Under loom every pause is a scheduling point: keep the delay at one.
#[cfg(loom)]
const BACKOFF_MIN: u32 = 1;
#[cfg(loom)]
const BACKOFF_MAX: u32 = 1;

// SAFETY: as for Tas (the same word protocol, with backoff).
unsafe impl<W: Wait> RawLock for Ttas<W> {
    const ALGORITHM: Algorithm = Algorithm::Ttas;

    #[inline]
    fn lock(&self) {
        if self
            .word
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) != FREE
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.word.load(Ordering::Relaxed) == FREE
            && self
                .word
                .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        unlock_word_lock::<W>(&self.word);
    }
}

impl<W: Wait> Ttas<W> {
    #[inline(never)]
    fn lock_slow(&self) {
        let mut b = Backoff::new();
        let mut delay = BACKOFF_MIN;
        loop {
            // Test: read-only polling while the lock is held.
            while self.word.load(Ordering::Relaxed) != FREE {
                if W::PARKS && b.should_park() {
                    return park_word_lock(&self.word);
                }
                b.spin();
            }
            // Test-and-set.
            let got = if W::PARKS {
                self.try_lock()
            } else {
                test_and_set(&self.word)
            };
            if got {
                return;
            }
            // Lost the race: others saw it free too. Back off so that the
            // next release is not followed by the same stampede.
            for _ in 0..delay {
                spin_hint();
            }
            delay = (delay * 2).min(BACKOFF_MAX);
            b.spin();
        }
    }
}

// ---------------------------------------------------------------- Ticket

const TICKET_MASK: u32 = 0x7fff_ffff;
const TICKET_SLEEPERS: u32 = 0x8000_0000;

// SAFETY: a thread enters only when `serving` equals its ticket, and tickets are
// unique (fetch_add); `unlock` advances `serving` by one; all zero is
// "nobody waiting, ticket 0 served".
unsafe impl<W: Wait> RawLock for Ticket<W> {
    const ALGORITHM: Algorithm = Algorithm::Ticket;

    #[inline]
    fn lock(&self) {
        self.lock_ticket();
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Tickets taken but not all served: held (the holder's is one).
        self.next.load(Ordering::Relaxed) & TICKET_MASK
            != self.serving.load(Ordering::Relaxed) & TICKET_MASK
    }

    #[inline]
    fn try_lock(&self) -> bool {
        let n = self.next.load(Ordering::Relaxed);
        // Acquire: the previous holder published its writes by releasing
        // `serving`, not `next`.
        let s = self.serving.load(Ordering::Acquire) & TICKET_MASK;
        n & TICKET_MASK == s
            && self
                .next
                .compare_exchange(n, n.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // Only the holder changes the counter bits, so the value swapped in
        // is exact; the swap (not a store) returns any sleeper bit a waiter
        // set meanwhile.
        let cur = self.serving.load(Ordering::Relaxed);
        let nxt = cur.wrapping_add(1) & TICKET_MASK;
        let prev = self.serving.swap(nxt, Ordering::Release);
        if W::PARKS && prev & TICKET_SLEEPERS != 0 {
            // Waiters wait for different tickets on one word: wake them all,
            // the one whose turn it is proceeds, the others sleep again.
            futex_wake(&self.serving, i32::MAX);
        }
    }
}

impl<W: Wait> Ticket<W> {
    #[inline(never)]
    fn wait_turn(&self, me: u32) {
        let mut b = Backoff::new();
        loop {
            let s = self.serving.load(Ordering::Acquire);
            if s & TICKET_MASK == me {
                return;
            }
            if W::PARKS && b.should_park() {
                let marked = s | TICKET_SLEEPERS;
                if s == marked
                    || self
                        .serving
                        .compare_exchange(s, marked, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    futex_wait(&self.serving, marked);
                }
                continue;
            }
            b.spin();
        }
    }
}

// ---------------------------------------------------------------- MCS

const MCS_WAIT: u32 = 1;
const MCS_GRANTED: u32 = 0;

// SAFETY: a thread enters only when the tail swap found no predecessor or its
// predecessor handed it the lock (status GRANTED), and `unlock` hands over
// to exactly one successor; all zero is an empty queue.
unsafe impl<W: Wait> RawLock for Mcs<W> {
    const ALGORITHM: Algorithm = Algorithm::Mcs;

    #[inline]
    fn lock(&self) {
        self.lock_pred();
    }

    #[inline]
    fn is_locked(&self) -> bool {
        !self.tail.load(Ordering::Relaxed).is_null()
    }

    #[inline]
    fn try_lock(&self) -> bool {
        let n = node::get();
        // SAFETY: as in lock; on failure `n` was never published.
        unsafe {
            (*n).next.store(null_mut(), Ordering::Relaxed);
            if self
                .tail
                .compare_exchange(null_mut(), n, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.holder.store(n, Ordering::Relaxed);
                true
            } else {
                node::put(n);
                false
            }
        }
    }

    #[inline]
    unsafe fn unlock(&self) {
        let n = self.holder.load(Ordering::Relaxed);
        // SAFETY: the lock is held (the caller's contract), so `holder` is
        // the holder's node, in this queue; once released, no queue
        // references it and it goes back to the pool.
        unsafe {
            mcs_release::<W>(&self.tail, n, MCS_GRANTED);
            node::put(n);
        }
    }
}

/// MCS release of `n` from the queue whose tail is `tail`: hands `value` to
/// the successor, or empties the queue. Returns whether there was a
/// successor.
/// # Safety
/// `n` is the node of the holder of the MCS lock whose tail is `tail`.
#[inline]
pub(crate) unsafe fn mcs_release<W: Wait>(
    tail: &AtomicPtr<QNode>,
    n: *mut QNode,
    value: u32,
) -> bool {
    // SAFETY: `n` is a live node (nodes are never freed) at the head of the queue
    // (the caller's contract); `succ`, once non-null, is the live node of the
    // successor that linked itself behind `n`.
    unsafe {
        let mut succ = (*n).next.load(Ordering::Acquire);
        if succ.is_null() {
            if tail
                .compare_exchange(n, null_mut(), Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return false;
            }
            // A successor swapped the tail but has not linked itself yet; it is
            // between two instructions, so spin (never park) for it.
            let mut b = Backoff::new();
            loop {
                succ = (*n).next.load(Ordering::Acquire);
                if !succ.is_null() {
                    break;
                }
                b.spin();
            }
        }
        wake::<W>(&(*succ).status, &(*succ).sleeping, value);
        true
    }
}

// ---------------------------------------------------------------- CLH

const CLH_LOCKED: u32 = 1;
const CLH_RELEASED: u32 = 0;

// SAFETY: a thread enters only when the tail swap found no predecessor or its
// predecessor's node was released, and each node is released once; all
// zero is an empty queue.
unsafe impl<W: Wait> RawLock for Clh<W> {
    const ALGORITHM: Algorithm = Algorithm::Clh;

    #[inline]
    fn lock(&self) {
        self.lock_pred();
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Idle is a null tail (this variant swings it back on release).
        !self.tail.load(Ordering::Relaxed).is_null()
    }

    #[inline]
    fn try_lock(&self) -> bool {
        let n = node::get();
        // SAFETY: on failure `n` was never published.
        unsafe {
            (*n).status.store(CLH_LOCKED, Ordering::Relaxed);
            if self
                .tail
                .compare_exchange(null_mut(), n, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.holder.store(n, Ordering::Relaxed);
                true
            } else {
                node::put(n);
                false
            }
        }
    }

    #[inline]
    unsafe fn unlock(&self) {
        let n = self.holder.load(Ordering::Relaxed);
        if self
            .tail
            .compare_exchange(n, null_mut(), Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            // Nobody queued behind us: the node is ours again.
            // SAFETY: the CAS removed `n` from the queue: nobody references
            // it any more.
            unsafe { node::put(n) };
        } else {
            // The successor spins on our node and will recycle it.
            // SAFETY: the lock is held (the caller's contract), so `n` is
            // the holder's live node (nodes are never freed).
            let n = unsafe { &*n };
            wake::<W>(&n.status, &n.sleeping, CLH_RELEASED);
        }
    }
}

impl<W: Wait> Ticket<W> {
    #[inline]
    fn lock_ticket(&self) -> u32 {
        let me = self.next.fetch_add(1, Ordering::Relaxed) & TICKET_MASK;
        let s = self.serving.load(Ordering::Acquire);
        if s & TICKET_MASK != me {
            self.wait_turn(me);
        }
        me
    }

    /// Test hook: acquires and returns the ticket number used.
    #[doc(hidden)]
    pub fn debug_lock_traced(&self) -> u32 {
        self.lock_ticket()
    }

    /// Test hook: tickets taken but not yet served (holder included).
    #[doc(hidden)]
    pub fn debug_queue_len(&self) -> u32 {
        let n = self.next.load(Ordering::SeqCst) & TICKET_MASK;
        let s = self.serving.load(Ordering::SeqCst) & TICKET_MASK;
        n.wrapping_sub(s) & TICKET_MASK
    }
}

impl<W: Wait> Mcs<W> {
    /// Acquires; returns (our node, the predecessor we queued behind).
    #[inline]
    fn lock_pred(&self) -> (*mut QNode, *mut QNode) {
        let n = node::get();
        // SAFETY: `n` is ours until we publish it in the queue.
        let pred = unsafe {
            (*n).next.store(null_mut(), Ordering::Relaxed);
            (*n).status.store(MCS_WAIT, Ordering::Relaxed);
            let pred = self.tail.swap(n, Ordering::AcqRel);
            if !pred.is_null() {
                (*pred).next.store(n, Ordering::Release);
                wait_while_eq::<W>(&(*n).status, &(*n).sleeping, MCS_WAIT);
            }
            pred
        };
        self.holder.store(n, Ordering::Relaxed);
        (n, pred)
    }

    /// Test hook: acquires and returns the addresses of our queue node and
    /// of the node we queued behind (0 if the queue was empty).
    #[doc(hidden)]
    pub fn debug_lock_traced(&self) -> (usize, usize) {
        let (n, p) = self.lock_pred();
        (n as usize, p as usize)
    }

    /// Test hook: address of the queue tail (0 when free).
    #[doc(hidden)]
    pub fn debug_tail(&self) -> usize {
        self.tail.load(Ordering::SeqCst) as usize
    }
}

impl<W: Wait> Clh<W> {
    /// Acquires; returns (our node, the predecessor we queued behind).
    #[inline]
    fn lock_pred(&self) -> (*mut QNode, *mut QNode) {
        let n = node::get();
        // SAFETY: `n` is ours until published; `pred` becomes ours once it
        // says released (its owner no longer touches it but to wake us).
        let pred = unsafe {
            (*n).status.store(CLH_LOCKED, Ordering::Relaxed);
            let pred = self.tail.swap(n, Ordering::AcqRel);
            if !pred.is_null() {
                wait_while_eq::<W>(&(*pred).status, &(*pred).sleeping, CLH_LOCKED);
                node::put(pred);
            }
            pred
        };
        self.holder.store(n, Ordering::Relaxed);
        (n, pred)
    }

    /// Test hook: acquires and returns the addresses of our queue node and
    /// of the node we queued behind (0 if the queue was empty).
    #[doc(hidden)]
    pub fn debug_lock_traced(&self) -> (usize, usize) {
        let (n, p) = self.lock_pred();
        (n as usize, p as usize)
    }

    /// Test hook: address of the queue tail (0 when free).
    #[doc(hidden)]
    pub fn debug_tail(&self) -> usize {
        self.tail.load(Ordering::SeqCst) as usize
    }
}
