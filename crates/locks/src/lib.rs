//! Lock algorithms to try in place of a program's mutexes.
//!
//! Purpose: give lockscope (and any Rust program) a set of classic and
//! NUMA-aware mutual-exclusion algorithms with one interface, so that a
//! lock recommended by the profiler can be tried and measured:
//!
//! | name | type | idea |
//! |---|---|---|
//! | `tas` | [`Tas`] | test-and-set: every waiter swaps the lock word |
//! | `ttas` | [`Ttas`] | test-test-and-set with exponential backoff |
//! | `ticket` | [`Ticket`] | FIFO by ticket number, one shared word |
//! | `mcs` | [`Mcs`] | FIFO queue, each waiter spins on its own node |
//! | `clh` | [`Clh`] | FIFO queue, each waiter spins on its predecessor's node |
//! | `cmcs` | [`Cmcs`] | two-level cohort MCS (NUMA node, machine) |
//! | `hmcs` | [`Hmcs`] | `HMCS<N>` over the machine's hierarchy (thesis ch. 4) |
//! | `ahmcs` | [`Ahmcs`] | adaptive HMCS: fast path and eager hysteresis (§4.9) |
//!
//! Entry points:
//! - each lock implements [`RawLock`] and, outside loom, `lock_api::RawMutex`
//!   (so `lock_api::Mutex<Mcs, T>` is a mutex guarding a `T`);
//! - the waiting policy is a type parameter: [`Spin`] or [`SpinThenPark`]
//!   (futex sleep after a short spin), because spinning waiters on an
//!   oversubscribed machine are the common failure of user-space locks;
//! - [`dynlock`] picks an algorithm and policy at run time (used by the
//!   preload library of `lockscope run` and by the benchmarks);
//! - [`topology`] reads or parses the hierarchy of HMCS trees;
//! - [`bench`](mod@bench) runs the thesis's microbenchmarks and returns plain results.
//!
//! Dependencies stay minimal (`lock_api`, `libc`; no serde) because this
//! crate is linked into `liblockscope_swap.so`, which runs inside other
//! people's programs: the CLI turns benchmark results into JSON itself.
//!
//! ```
//! use lockscope_locks::lock_api::RawMutex;
//! use lockscope_locks::{Hierarchy, Hmcs, Mcs, Mutex, SpinThenPark};
//!
//! static COUNTER: Mutex<Mcs<SpinThenPark>, u64> =
//!     Mutex::const_new(<Mcs<SpinThenPark> as RawMutex>::INIT, 0);
//! *COUNTER.lock() += 1;
//!
//! // `HMCS<3>` over a hand-given tree: 2 domains of 4 leaves.
//! let h = Hierarchy::parse("2x4:16,4").unwrap();
//! let m = Mutex::from_raw(Hmcs::<SpinThenPark>::with_hierarchy(&h), vec![1]);
//! m.lock().push(2);
//! assert_eq!(*m.lock(), vec![1, 2]);
//! ```
//!
//! Design constraints: every lock is at most 16 bytes, 8-aligned, and all
//! zero bytes is a valid unlocked lock (so it fits inside a
//! `pthread_mutex_t` and static initialisers work); lock and unlock never
//! allocate in steady state (queue nodes come from a per-thread pool, HMCS
//! trees are built on first use); a lock may be released by another thread
//! than the one that took it (as some C programs do). The same code is
//! model-checked with loom (`RUSTFLAGS="--cfg loom"`).

#![deny(missing_docs)]

mod flat;
mod hmcs;
mod node;
mod sync;
pub mod topology;
mod wait;

#[cfg(not(loom))]
pub mod bench;
#[cfg(not(loom))]
pub mod dynlock;

pub use flat::{Clh, Mcs, Tas, Ticket, Ttas};
pub use hmcs::{
    default_cohort_hierarchy, default_hierarchy, set_default_hierarchy, Ahmcs, AhmcsKind, Cmcs,
    CmcsKind, Hmcs, HmcsKind, Kind, TreeLock,
};
pub use sync::set_thread_cpu;
pub use topology::Hierarchy;
pub use wait::{Spin, SpinThenPark, Wait};

#[cfg(not(loom))]
pub use lock_api;

use std::fmt;

/// A lock algorithm of this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Test-and-set.
    Tas,
    /// Test-test-and-set with exponential backoff.
    Ttas,
    /// Ticket lock.
    Ticket,
    /// MCS queue lock.
    Mcs,
    /// CLH queue lock.
    Clh,
    /// Two-level cohort MCS.
    Cmcs,
    /// Hierarchical MCS.
    Hmcs,
    /// Adaptive hierarchical MCS with fast path.
    Ahmcs,
}

impl Algorithm {
    /// Every algorithm, in the order of the documentation.
    pub const ALL: [Algorithm; 8] = [
        Algorithm::Tas,
        Algorithm::Ttas,
        Algorithm::Ticket,
        Algorithm::Mcs,
        Algorithm::Clh,
        Algorithm::Cmcs,
        Algorithm::Hmcs,
        Algorithm::Ahmcs,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Tas => "tas",
            Algorithm::Ttas => "ttas",
            Algorithm::Ticket => "ticket",
            Algorithm::Mcs => "mcs",
            Algorithm::Clh => "clh",
            Algorithm::Cmcs => "cmcs",
            Algorithm::Hmcs => "hmcs",
            Algorithm::Ahmcs => "ahmcs",
        }
    }

    /// One line saying what the algorithm does.
    pub fn summary(self) -> &'static str {
        match self {
            Algorithm::Tas => "test-and-set: waiters swap the lock word (cache-line ping-pong)",
            Algorithm::Ttas => "test-test-and-set with exponential backoff",
            Algorithm::Ticket => "ticket lock: FIFO, all waiters read one word",
            Algorithm::Mcs => "MCS queue lock: FIFO, each waiter spins on its own node",
            Algorithm::Clh => "CLH queue lock: FIFO, each waiter spins on its predecessor's node",
            Algorithm::Cmcs => "cohort MCS: per-NUMA-node MCS under a global MCS (HMCS<2>)",
            Algorithm::Hmcs => "HMCS<N>: tree of MCS locks over cores, packages, NUMA nodes",
            Algorithm::Ahmcs => {
                "adaptive HMCS: fast path when uncontended, hysteresis picks the level"
            }
        }
    }

    /// Whether the algorithm uses a hierarchy (tree of locks).
    pub fn is_hierarchical(self) -> bool {
        matches!(self, Algorithm::Cmcs | Algorithm::Hmcs | Algorithm::Ahmcs)
    }

    /// Comma-separated list of every name.
    pub fn names() -> String {
        Algorithm::ALL
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Algorithm {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| Error::UnknownAlgorithm {
                name: s.to_string(),
            })
    }
}

/// How a thread that cannot enter waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitPolicy {
    /// Busy-wait (yielding the CPU every few hundred polls).
    Spin,
    /// Spin briefly, then sleep on a futex.
    SpinThenPark,
}

impl WaitPolicy {
    /// Both policies.
    pub const ALL: [WaitPolicy; 2] = [WaitPolicy::Spin, WaitPolicy::SpinThenPark];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            WaitPolicy::Spin => "spin",
            WaitPolicy::SpinThenPark => "spin-then-park",
        }
    }
}

impl fmt::Display for WaitPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for WaitPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "spin" => Ok(WaitPolicy::Spin),
            "spin-then-park" | "park" => Ok(WaitPolicy::SpinThenPark),
            _ => Err(Error::UnknownWaitPolicy {
                name: s.to_string(),
            }),
        }
    }
}

/// Errors of this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A lock algorithm name that does not exist.
    UnknownAlgorithm {
        /// The name given.
        name: String,
    },
    /// A waiting policy name that does not exist.
    UnknownWaitPolicy {
        /// The name given.
        name: String,
    },
    /// A hand-given hierarchy that cannot be parsed or does not nest.
    BadHierarchy {
        /// The text given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The machine's topology could not be read.
    Topology {
        /// What failed.
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownAlgorithm { name } => {
                write!(f, "unknown lock algorithm {name:?}; valid names: {}", Algorithm::names())
            }
            Error::UnknownWaitPolicy { name } => {
                write!(f, "unknown waiting policy {name:?}; valid names: spin, spin-then-park")
            }
            Error::BadHierarchy { spec, reason } => write!(
                f,
                "bad lock hierarchy {spec:?}: {reason} (expected fan-outs from the root down, e.g. \"2x4\" or \"2x2x2:16,8,4\")"
            ),
            Error::Topology { reason } => write!(f, "cannot read the machine topology: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

/// A raw mutual-exclusion lock (the `lock_api::RawMutex` contract, usable
/// under loom too).
///
/// # Safety
/// Implementations must guarantee mutual exclusion between a successful
/// `lock`/`try_lock` and the matching `unlock`, and that all zero bytes is a
/// valid unlocked value of the type.
pub unsafe trait RawLock: Send + Sync + Default {
    /// Which algorithm this is.
    const ALGORITHM: Algorithm;

    /// Acquires the lock, waiting as long as needed.
    fn lock(&self);

    /// Acquires the lock if it is free right now; never waits for a holder.
    fn try_lock(&self) -> bool;

    /// Releases the lock.
    ///
    /// # Safety
    /// The lock is held (by this thread or one that handed it over).
    unsafe fn unlock(&self);

    /// Whether an acquisition now would wait: the lock is held (or, for
    /// queue locks, has a queue). A relaxed snapshot, stale as soon as it
    /// is read: a hint, never a synchronization. `lockscope record` reads
    /// it (through the swap library) to tell, before a swapped mutex's
    /// lock call, that the call is about to wait, as it reads a glibc
    /// mutex's word.
    fn is_locked(&self) -> bool;

    /// Acquires the lock unless `deadline` passes first. Queue locks cannot
    /// leave their queue once in it, so a timed acquisition polls
    /// `try_lock` with growing sleeps (up to 1 ms) instead of queueing: it
    /// is correct for every algorithm but does not get FIFO order.
    #[cfg(not(loom))]
    fn try_lock_until(&self, deadline: std::time::Instant) -> bool {
        let mut pause = std::time::Duration::from_micros(1);
        loop {
            for _ in 0..64 {
                if self.try_lock() {
                    return true;
                }
                std::hint::spin_loop();
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(std::time::Duration::from_millis(1));
        }
    }
}

#[cfg(not(loom))]
macro_rules! impl_lock_api {
    ($($t:ty),*) => {$(
        // SAFETY: RawLock has the same contract; INIT is the unlocked value.
        unsafe impl<W: Wait> lock_api::RawMutex for $t {
            #[allow(clippy::declare_interior_mutable_const)]
            const INIT: Self = <$t>::new();
            // Unlocking from another thread is supported (node ownership
            // travels with the lock).
            type GuardMarker = lock_api::GuardSend;
            #[inline]
            fn lock(&self) {
                RawLock::lock(self)
            }
            #[inline]
            fn try_lock(&self) -> bool {
                RawLock::try_lock(self)
            }
            #[inline]
            unsafe fn unlock(&self) {
                // SAFETY: the lock is held (lock_api's contract, which is
                // RawLock's).
                unsafe { RawLock::unlock(self) }
            }
        }
        // SAFETY: as above.
        unsafe impl<W: Wait> lock_api::RawMutexTimed for $t {
            type Duration = std::time::Duration;
            type Instant = std::time::Instant;
            fn try_lock_for(&self, timeout: std::time::Duration) -> bool {
                RawLock::try_lock_until(self, std::time::Instant::now() + timeout)
            }
            fn try_lock_until(&self, deadline: std::time::Instant) -> bool {
                RawLock::try_lock_until(self, deadline)
            }
        }
    )*};
}
#[cfg(not(loom))]
impl_lock_api!(Tas<W>, Ttas<W>, Ticket<W>, Mcs<W>, Clh<W>);

#[cfg(not(loom))]
// SAFETY: as for the flat locks.
unsafe impl<K: Kind, W: Wait> lock_api::RawMutex for TreeLock<K, W> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = TreeLock::new();
    type GuardMarker = lock_api::GuardSend;
    #[inline]
    fn lock(&self) {
        RawLock::lock(self)
    }
    #[inline]
    fn try_lock(&self) -> bool {
        RawLock::try_lock(self)
    }
    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: the lock is held (lock_api's contract, which is RawLock's).
        unsafe { RawLock::unlock(self) }
    }
}

/// A mutex guarding a `T` with lock algorithm `L`, e.g. `Mutex<Mcs, u64>`.
#[cfg(not(loom))]
pub type Mutex<L, T> = lock_api::Mutex<L, T>;
/// The guard of a [`Mutex`].
#[cfg(not(loom))]
pub type MutexGuard<'a, L, T> = lock_api::MutexGuard<'a, L, T>;
