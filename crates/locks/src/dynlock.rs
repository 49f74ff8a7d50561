//! Locks chosen at run time.
//!
//! [`LockOps`] is a table of functions for one (algorithm, policy) pair
//! acting on [`STATE_BYTES`] bytes of caller-provided memory, which is how
//! the preload library keeps a lock inside each `pthread_mutex_t`.
//! [`DynLock`] owns such memory on its own cache line.

use crate::{
    Ahmcs, Algorithm, Clh, Cmcs, Hmcs, Mcs, RawLock, Spin, SpinThenPark, Tas, Ticket, Ttas,
    WaitPolicy,
};

/// Bytes of lock state every algorithm fits in (all zero = unlocked).
pub const STATE_BYTES: usize = 16;
/// Alignment the state needs.
pub const STATE_ALIGN: usize = 8;

/// Operations of one lock algorithm and waiting policy on raw state.
///
/// Every function takes a pointer to [`STATE_BYTES`] bytes aligned to
/// [`STATE_ALIGN`] that hold a lock of this algorithm (all zero bytes is an
/// unlocked lock).
#[derive(Debug)]
pub struct LockOps {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The waiting policy.
    pub wait: WaitPolicy,
    /// Acquires.
    pub lock: unsafe fn(*const u8),
    /// Acquires if free now.
    pub try_lock: unsafe fn(*const u8) -> bool,
    /// Acquires unless the deadline passes first.
    pub try_lock_until: unsafe fn(*const u8, std::time::Instant) -> bool,
    /// Releases.
    pub unlock: unsafe fn(*const u8),
    /// Whether an acquisition now would wait ([`RawLock::is_locked`]).
    pub is_locked: unsafe fn(*const u8) -> bool,
    /// Frees what the lock allocated (HMCS trees) and leaves all zeroes, a
    /// fresh unlocked lock. The lock must be unlocked and unused.
    pub reset: unsafe fn(*mut u8),
}

/// # Safety
/// `p` points to a live `L` (the contract of [`LockOps`]).
unsafe fn op_lock<L: RawLock>(p: *const u8) {
    // SAFETY: `p` points to a live lock of type `L` (STATE_BYTES, STATE_ALIGN: checked
    // against L's size and alignment in `table`), the caller's contract.
    unsafe { (*(p as *const L)).lock() }
}
/// # Safety
/// As `op_lock`.
unsafe fn op_try_lock<L: RawLock>(p: *const u8) -> bool {
    // SAFETY: `p` points to a live lock of type `L` (STATE_BYTES, STATE_ALIGN: checked
    // against L's size and alignment in `table`), the caller's contract.
    unsafe { (*(p as *const L)).try_lock() }
}
/// # Safety
/// As `op_lock`.
unsafe fn op_try_lock_until<L: RawLock>(p: *const u8, d: std::time::Instant) -> bool {
    // SAFETY: `p` points to a live lock of type `L` (STATE_BYTES, STATE_ALIGN: checked
    // against L's size and alignment in `table`), the caller's contract.
    unsafe { (*(p as *const L)).try_lock_until(d) }
}
/// # Safety
/// As `op_lock`, and the lock is held.
unsafe fn op_unlock<L: RawLock>(p: *const u8) {
    // SAFETY: `p` points to a live lock of type `L` (STATE_BYTES, STATE_ALIGN: checked
    // against L's size and alignment in `table`), the caller's contract.
    // The lock is held (the contract of `unlock`).
    unsafe { (*(p as *const L)).unlock() }
}
/// # Safety
/// As `op_lock`.
unsafe fn op_is_locked<L: RawLock>(p: *const u8) -> bool {
    // SAFETY: `p` points to a live lock of type `L` (STATE_BYTES, STATE_ALIGN: checked
    // against L's size and alignment in `table`), the caller's contract.
    unsafe { (*(p as *const L)).is_locked() }
}
/// # Safety
/// As `op_lock`, and the lock is unlocked and unused.
unsafe fn op_reset<L: RawLock>(p: *mut u8) {
    // SAFETY: `p` points to a live lock of type `L` (STATE_BYTES, STATE_ALIGN: checked
    // against L's size and alignment in `table`), the caller's contract.
    // It is unlocked and unused (the contract of `reset`), so dropping it in
    // place and zeroing its bytes leaves a fresh unlocked lock (all zero is
    // unlocked: the RawLock contract).
    unsafe {
        std::ptr::drop_in_place(p as *mut L);
        std::ptr::write_bytes(p, 0, std::mem::size_of::<L>());
    }
}

const fn table<L: RawLock>(wait: WaitPolicy) -> LockOps {
    assert!(std::mem::size_of::<L>() <= STATE_BYTES);
    assert!(std::mem::align_of::<L>() <= STATE_ALIGN);
    LockOps {
        algorithm: L::ALGORITHM,
        wait,
        lock: op_lock::<L>,
        try_lock: op_try_lock::<L>,
        try_lock_until: op_try_lock_until::<L>,
        unlock: op_unlock::<L>,
        is_locked: op_is_locked::<L>,
        reset: op_reset::<L>,
    }
}

macro_rules! tables {
    ($($alg:ident => $t:ident),*) => {
        /// The operations of `algorithm` with waiting policy `wait`.
        pub fn ops(algorithm: Algorithm, wait: WaitPolicy) -> &'static LockOps {
            match (algorithm, wait) {
                $(
                    (Algorithm::$alg, WaitPolicy::Spin) => {
                        static T: LockOps = table::<$t<Spin>>(WaitPolicy::Spin);
                        &T
                    }
                    (Algorithm::$alg, WaitPolicy::SpinThenPark) => {
                        static T: LockOps = table::<$t<SpinThenPark>>(WaitPolicy::SpinThenPark);
                        &T
                    }
                )*
            }
        }
    };
}
tables!(Tas => Tas, Ttas => Ttas, Ticket => Ticket, Mcs => Mcs, Clh => Clh, Cmcs => Cmcs, Hmcs => Hmcs, Ahmcs => Ahmcs);

/// The lock's bytes. In an `UnsafeCell`: the algorithms write their
/// state (atomics) through a pointer derived from `&self`, and a pointer
/// derived from a shared reference to plain `[u64; 8]` may only read
/// (Miri's Stacked Borrows rejected the plain array: a write through a
/// read-only tag).
#[repr(C, align(64))]
struct Line(std::cell::UnsafeCell<[u64; 8]>);

/// A lock whose algorithm and policy are chosen at run time, alone on its
/// cache line.
pub struct DynLock {
    ops: &'static LockOps,
    state: Box<Line>,
}

impl DynLock {
    /// A new unlocked lock.
    pub fn new(algorithm: Algorithm, wait: WaitPolicy) -> DynLock {
        DynLock {
            ops: ops(algorithm, wait),
            state: Box::new(Line(std::cell::UnsafeCell::new([0; 8]))),
        }
    }
    fn p(&self) -> *const u8 {
        self.state.0.get() as *const u8
    }
    /// The operations in use.
    pub fn ops(&self) -> &'static LockOps {
        self.ops
    }
    /// Acquires.
    #[inline]
    pub fn lock(&self) {
        // SAFETY: state is a valid lock of this algorithm.
        unsafe { (self.ops.lock)(self.p()) }
    }
    /// Acquires if free now.
    #[inline]
    pub fn try_lock(&self) -> bool {
        // SAFETY: as above.
        unsafe { (self.ops.try_lock)(self.p()) }
    }
    /// Whether an acquisition now would wait (a hint, see
    /// [`crate::RawLock::is_locked`]).
    #[inline]
    pub fn is_locked(&self) -> bool {
        // SAFETY: as above.
        unsafe { (self.ops.is_locked)(self.p()) }
    }
    /// Acquires unless `deadline` passes first.
    pub fn try_lock_until(&self, deadline: std::time::Instant) -> bool {
        // SAFETY: as above.
        unsafe { (self.ops.try_lock_until)(self.p(), deadline) }
    }
    /// Releases.
    ///
    /// # Safety
    /// The lock is held.
    #[inline]
    pub unsafe fn unlock(&self) {
        // SAFETY: state is a valid lock of this algorithm, held (the
        // caller's contract).
        unsafe { (self.ops.unlock)(self.p()) }
    }
}

impl Drop for DynLock {
    fn drop(&mut self) {
        // SAFETY: we own the lock; nobody holds it (we have &mut).
        unsafe { (self.ops.reset)(self.state.0.get() as *mut u8) }
    }
}

// SAFETY: the state is a RawLock (Send + Sync) that only the table's
// functions touch; the table is immutable and 'static.
unsafe impl Send for DynLock {}
// SAFETY: as for Send.
unsafe impl Sync for DynLock {}
