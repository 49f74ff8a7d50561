//! Waiting policies: how a thread that cannot enter waits.
//!
//! The policy is a type parameter of every lock (`Mcs<Spin>`,
//! `Mcs<SpinThenPark>`), so the choice costs nothing at run time and each
//! algorithm keeps a single implementation.

use crate::sync::{futex_wait, futex_wake, spin_hint, yield_cpu, AtomicU32, Ordering};
use crate::WaitPolicy;

/// Polls between two `sched_yield` calls of a spinning waiter. Without the
/// yield, a waiter whose predecessor was preempted burns its whole time slice
/// (threads > cores); with it, spinning still shows its cost but progresses.
const SPINS_PER_YIELD: u32 = 256; // a power of two

/// Polls before a `SpinThenPark` waiter goes to sleep in the kernel: long
/// enough to cover a short critical section, short compared to a time slice.
#[cfg(not(loom))]
pub(crate) const SPINS_BEFORE_PARK: u32 = 200;
/// Under loom every poll is a scheduling point: park almost at once, so
/// that the parking protocol is what the model explores.
#[cfg(loom)]
pub(crate) const SPINS_BEFORE_PARK: u32 = 1;

/// A waiting policy. Implemented by [`Spin`] and [`SpinThenPark`].
pub trait Wait: Send + Sync + 'static {
    /// The policy as a value.
    const POLICY: WaitPolicy;
    /// Whether waiters may sleep in the kernel (so releasers must wake them).
    const PARKS: bool;
}

/// Busy-wait with a pause instruction, yielding the CPU every few hundred
/// polls.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spin;
/// Spin for a short while, then sleep on a futex until woken.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpinThenPark;

impl Wait for Spin {
    const POLICY: WaitPolicy = WaitPolicy::Spin;
    const PARKS: bool = false;
}
impl Wait for SpinThenPark {
    const POLICY: WaitPolicy = WaitPolicy::SpinThenPark;
    const PARKS: bool = true;
}

/// Counts polls of a waiting loop and decides when to yield.
pub(crate) struct Backoff {
    polls: u32,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff { polls: 0 }
    }
    /// One poll of a pure spinning loop.
    #[inline]
    pub(crate) fn spin(&mut self) {
        self.polls = self.polls.wrapping_add(1);
        if self.polls & (SPINS_PER_YIELD - 1) == 0 {
            yield_cpu();
        } else {
            spin_hint();
        }
    }
    /// True once a parking waiter has spun long enough.
    #[inline]
    pub(crate) fn should_park(&self) -> bool {
        self.polls >= SPINS_BEFORE_PARK
    }
}

/// Waits until `status` differs from `waiting`, returning the new value.
/// `sleeping` is the flag of the waiter's slot that tells a waker a futex
/// wake is needed; it is only touched by the `SpinThenPark` policy.
///
/// Parking protocol (a Dekker pair, hence SeqCst): the waiter stores
/// `sleeping = 1` then re-reads `status`; the waker stores `status` then
/// reads `sleeping`. At least one of them sees the other's store, so either
/// the waiter does not sleep or the waker wakes it.
#[inline]
pub(crate) fn wait_while_eq<W: Wait>(
    status: &AtomicU32,
    sleeping: &AtomicU32,
    waiting: u32,
) -> u32 {
    let mut b = Backoff::new();
    loop {
        let s = status.load(Ordering::Acquire);
        if s != waiting {
            return s;
        }
        if W::PARKS && b.should_park() {
            sleeping.store(1, Ordering::SeqCst);
            loop {
                let s = status.load(Ordering::SeqCst);
                if s != waiting {
                    sleeping.store(0, Ordering::Relaxed);
                    return s;
                }
                futex_wait(status, waiting);
            }
        }
        b.spin();
    }
}

/// Publishes `value` in a waiter's `status` and wakes it if it sleeps.
#[inline]
pub(crate) fn wake<W: Wait>(status: &AtomicU32, sleeping: &AtomicU32, value: u32) {
    if W::PARKS {
        status.store(value, Ordering::SeqCst);
        if sleeping.load(Ordering::SeqCst) != 0 {
            futex_wake(status, 1);
        }
    } else {
        status.store(value, Ordering::Release);
    }
}
