//! The decoded event: one point in time on one thread.

/// Phase of an operation, stored in the low two bits of [`Event::flags`]
/// for synchronization operations.
///
/// An acquisition that succeeded at once is a single [`phase::DONE`]
/// event (attempt time == acquired time). One that had to wait is a
/// [`phase::BEGIN`] at the attempt followed by a [`phase::DONE`] (or
/// [`phase::FAIL`]) when the call returned, with [`phase::CONTENDED`] set on
/// the second. Releases, signals and wakes are single [`phase::DONE`]
/// events; [`phase::END`] marks the return of a release that entered the
/// kernel (so that time spent inside unlock is visible).
pub mod phase {
    /// The call completed (acquired, released, woken, posted).
    pub const DONE: u8 = 0;
    /// The call started and is about to block (contended attempt).
    pub const BEGIN: u8 = 1;
    /// The call failed (trylock busy, timeout, error); `arg` holds the errno.
    pub const FAIL: u8 = 2;
    /// A release call returned after entering the kernel.
    pub const END: u8 = 3;
    /// Mask of the phase bits in `flags`.
    pub const MASK: u8 = 0b11;
    /// Set on the completing event of an acquisition that had to wait.
    pub const CONTENDED: u8 = 0b100;
    /// Extracts the phase from a flags byte.
    pub fn of(flags: u8) -> u8 {
        flags & MASK
    }
}

macro_rules! ops {
    ($( $(#[doc = $doc:literal])* $name:ident = $val:literal, )*) => {
        /// What an event records. The numeric values are part of the file
        /// format: never renumber, only append.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        #[non_exhaustive]
        pub enum Op {
            $( $(#[doc = $doc])* $name = $val, )*
        }
        impl Op {
            /// Decodes an op byte; `None` for values this build does not know.
            pub fn from_u8(v: u8) -> Option<Op> {
                match v {
                    $( $val => Some(Op::$name), )*
                    _ => None,
                }
            }
            /// A short stable name (used in JSON and CSV output).
            pub fn name(self) -> &'static str {
                match self {
                    $( Op::$name => stringify!($name), )*
                }
            }
        }
    };
}

ops! {
    // ---- mutexes: addr = mutex, site = call site ----
    /// `pthread_mutex_lock`.
    MutexLock = 1,
    /// `pthread_mutex_trylock`; FAIL phase when busy.
    MutexTrylock = 2,
    /// `pthread_mutex_timedlock` / `pthread_mutex_clocklock`; FAIL on timeout.
    MutexTimedlock = 3,
    /// `pthread_mutex_unlock`.
    MutexUnlock = 4,
    // ---- reader-writer locks: addr = rwlock ----
    /// `pthread_rwlock_rdlock`.
    RwRdlock = 5,
    /// `pthread_rwlock_wrlock`.
    RwWrlock = 6,
    /// `pthread_rwlock_tryrdlock`.
    RwTryRdlock = 7,
    /// `pthread_rwlock_trywrlock`.
    RwTryWrlock = 8,
    /// `pthread_rwlock_timedrdlock` / `clockrdlock`.
    RwTimedRdlock = 9,
    /// `pthread_rwlock_timedwrlock` / `clockwrlock`.
    RwTimedWrlock = 10,
    /// `pthread_rwlock_unlock`.
    RwUnlock = 11,
    // ---- pthread spinlocks ----
    /// `pthread_spin_lock`.
    SpinLock = 12,
    /// `pthread_spin_trylock`.
    SpinTrylock = 13,
    /// `pthread_spin_unlock`.
    SpinUnlock = 14,
    // ---- condition variables: addr = cond, arg = mutex ----
    /// `pthread_cond_wait`: BEGIN releases the mutex, DONE has re-acquired it.
    CondWait = 15,
    /// `pthread_cond_timedwait` / `clockwait`: FAIL (ETIMEDOUT) still re-acquires.
    CondTimedwait = 16,
    /// `pthread_cond_signal`.
    CondSignal = 17,
    /// `pthread_cond_broadcast`.
    CondBroadcast = 18,
    // ---- barriers: addr = barrier ----
    /// `pthread_barrier_wait`; DONE with arg = 1 for the serial thread.
    /// Also OpenMP barriers (libgomp): `#pragma omp barrier`, and the
    /// barrier at the end of a parallel region, whose `arg` has
    /// [`barrier::REGION_END`] set on BEGIN and DONE (see [`barrier`]).
    BarrierWait = 19,
    // ---- semaphores: addr = sem ----
    /// `sem_wait`.
    SemWait = 20,
    /// `sem_trywait`.
    SemTrywait = 21,
    /// `sem_timedwait` and `sem_clockwait`.
    SemTimedwait = 22,
    /// `sem_post`.
    SemPost = 23,
    // ---- raw futexes (libc `syscall`): addr = futex word ----
    /// FUTEX_WAIT / WAIT_BITSET: BEGIN at the call, DONE/FAIL at return;
    /// arg = expected value (BEGIN) or errno (FAIL).
    FutexWait = 24,
    /// FUTEX_WAKE / WAKE_BITSET: arg = threads woken (return value).
    FutexWake = 25,
    // ---- threads and processes ----
    /// `pthread_create` returned in the parent: arg = new thread's tid.
    ThreadCreate = 26,
    /// `pthread_join`: BEGIN at the call, DONE at return; arg = joined tid.
    ThreadJoin = 27,
    /// First event of a thread (its start routine is about to run).
    ThreadStart = 28,
    /// Last event of a thread (start routine returned or pthread_exit).
    ThreadExit = 29,
    /// `fork` returned in the parent: arg = child pid.
    Fork = 30,
    /// `execve` family is about to replace the image (arg = 0), or failed
    /// (FAIL, arg = errno).
    Exec = 31,
    // ---- detailed mode: memory accesses, addr = location, site = pc ----
    /// Plain read; flags = size in bytes (0: size in arg2). In a trace
    /// whose header has `access_values=1` (an imported hardware trace),
    /// arg = the value read, valid where arg2 = 1.
    Read = 40,
    /// Plain write; flags = size in bytes (0: size in arg2). With
    /// `access_values=1`: arg = the value written, valid where arg2 = 1.
    Write = 41,
    /// Atomic load; flags = log2(width) | order << 3 (order: 0 relaxed,
    /// 1 consume, 2 acquire, 3 release, 4 acq_rel, 5 seq_cst); arg = value read.
    AtomicLoad = 42,
    /// Atomic store; arg = previous value, arg2 = value stored.
    AtomicStore = 43,
    /// Atomic exchange; arg = old, arg2 = new.
    AtomicExchange = 44,
    /// Atomic fetch_add; arg = old, arg2 = new.
    AtomicFetchAdd = 45,
    /// Atomic fetch_sub; arg = old, arg2 = new.
    AtomicFetchSub = 46,
    /// Atomic fetch_and; arg = old, arg2 = new.
    AtomicFetchAnd = 47,
    /// Atomic fetch_or; arg = old, arg2 = new.
    AtomicFetchOr = 48,
    /// Atomic fetch_xor; arg = old, arg2 = new.
    AtomicFetchXor = 49,
    /// Atomic fetch_nand; arg = old, arg2 = new.
    AtomicFetchNand = 50,
    /// Atomic compare-exchange: flags as for the other atomics (bits 0-2
    /// log2(width), bits 3-5 memory order), plus bit 6 (0x40) set when the
    /// exchange failed and bit 7 (0x80) for the weak form; arg = old value
    /// seen, arg2 = value after. (Atomics do not use the [`phase`] bits:
    /// their low bits hold the width.)
    AtomicCas = 51,
    /// Atomic thread fence; flags = order << 3.
    AtomicFence = 52,
    /// Heap allocation: addr = block, arg = size, stack = allocation path.
    Alloc = 60,
    /// Heap free: addr = block.
    Free = 61,
    /// Value of a written location when the enclosing critical section was
    /// released: addr = location, flags = size, arg = value.
    ReleaseValue = 62,
    /// The thread's previous access event (same address, size, kind, locks
    /// held, call and, for reads, value; the pc may differ, as in an unrolled
    /// loop, and is the first one's) was repeated `arg` more times
    /// with nothing else recorded on the thread in between; `time` is the
    /// last repeat's. flags = size (0: more than 255 bytes), arg2 = kind
    /// (1 plain read, 2 plain write, 3 atomic load). Emitted by default;
    /// not when the program ran with `LOCKSCOPE_COALESCE=0` (see
    /// docs/detailed.md).
    AccessRepeat = 63,
    // ---- scheduling seen by a hardware trace (`lockscope import`) ----
    /// The thread starts running on core `arg` (a core-to-thread schedule
    /// entry of an imported hardware trace).
    CpuIn = 80,
    /// The thread stops running on core `arg` (another thread was
    /// scheduled there, the core went idle, or the thread moved).
    CpuOut = 81,
    /// An atomic read-modify-write whose value before is not known (an
    /// `A<width>` row of an imported hardware trace): flags = log2(width),
    /// arg2 = value after.
    AtomicRmw = 82,
    /// Time the thread has spent so far unable to run for reasons that
    /// are not the program's, arg = ns: runnable but waiting for a CPU
    /// (the kernel's run-queue delay, `/proc/thread-self/schedstat`; 0
    /// where the kernel keeps none) plus waiting for the recorder to make
    /// room in its ring. The preload library takes one before a lock call that
    /// follows a long interval with no lock call of the thread (over
    /// 500 us) and every 2 ms; never inside a blocking call. Between two
    /// samples, the difference is time the thread was preempted. The
    /// replay removes it.
    RunDelay = 83,
    /// The CPU launched work on a GPU (kernel, copy or memset; CUDA
    /// runtime or driver call), event DONE at the call: addr = stream
    /// handle (0 = the default stream), arg = correlation id (matches the
    /// [`Op::GpuActivity`] that executed it), arg2 = the kernel's host
    /// function address when known (symbolizes to the kernel name), else 0.
    GpuLaunch = 70,
    /// A CPU call that waits for the GPU (device, stream or event
    /// synchronize, a blocking copy, `cudaFree`...): BEGIN at entry, END
    /// at return. addr = stream handle (0 = waits for the whole device),
    /// arg = what kind of wait (see `gpu::sync_kind` in the analysis:
    /// 0 device, 1 stream, 2 event, 3 blocking copy, 4 other), arg2 =
    /// correlation id of the call.
    GpuSync = 71,
    /// Work that ran on a GPU, reported after the fact (CUPTI activity
    /// buffer), emitted on the thread that delivered it; `time` is the
    /// delivery time so each thread's events stay in time order. addr =
    /// start on the GPU and arg = end, both in trace nanoseconds; arg2 =
    /// correlation id (low 32 bits) | bytes moved, saturated at 2^32-1
    /// (high 32 bits); site = stream id (low 32) | device (high 32);
    /// flags = kind (0 kernel, 1 copy host-to-device, 2 device-to-host,
    /// 3 device-to-device, 4 memset, 5 other copy).
    GpuActivity = 72,
    /// Recorder annotation: arg = count of events dropped before this point
    /// on this thread (buffer full).
    Lost = 100,
}

impl Op {
    /// True for operations that acquire a lock (mutex, rwlock, spinlock).
    pub fn is_acquire(self) -> bool {
        matches!(
            self,
            Op::MutexLock
                | Op::MutexTrylock
                | Op::MutexTimedlock
                | Op::RwRdlock
                | Op::RwWrlock
                | Op::RwTryRdlock
                | Op::RwTryWrlock
                | Op::RwTimedRdlock
                | Op::RwTimedWrlock
                | Op::SpinLock
                | Op::SpinTrylock
        )
    }
    /// True for operations that release a lock.
    pub fn is_release(self) -> bool {
        matches!(self, Op::MutexUnlock | Op::RwUnlock | Op::SpinUnlock)
    }
    /// True for trylock-style calls (never wait; may fail with EBUSY).
    pub fn is_try(self) -> bool {
        matches!(
            self,
            Op::MutexTrylock | Op::RwTryRdlock | Op::RwTryWrlock | Op::SpinTrylock | Op::SemTrywait
        )
    }
    /// True for atomic memory operations (detailed mode).
    pub fn is_atomic(self) -> bool {
        (Op::AtomicLoad as u8..=Op::AtomicFence as u8).contains(&(self as u8))
    }
    /// The operation an [`Op::AccessRepeat`] repeats, from its `arg2`
    /// (one of the [`repeat`] codes, docs/detailed.md). `None` for any
    /// other code.
    pub fn repeated(kind: u64) -> Option<Op> {
        match kind {
            repeat::READ => Some(Op::Read),
            repeat::WRITE => Some(Op::Write),
            repeat::ATOMIC_LOAD => Some(Op::AtomicLoad),
            repeat::XCHG_UNCHANGED => Some(Op::AtomicExchange),
            repeat::CAS_FAILED | repeat::CAS_FAILED_WEAK => Some(Op::AtomicCas),
            _ => None,
        }
    }
}

/// What an [`Op::AccessRepeat`] repeats: the codes of its `arg2`, written
/// by the ThreadSanitizer-ABI runtime and read by the analyses (through
/// [`Op::repeated`] where only the operation matters).
pub mod repeat {
    /// A plain read.
    pub const READ: u64 = 1;
    /// A plain write.
    pub const WRITE: u64 = 2;
    /// An atomic load.
    pub const ATOMIC_LOAD: u64 = 3;
    /// An atomic exchange that wrote the value it found (a test-and-set
    /// on a taken lock): the word did not change.
    pub const XCHG_UNCHANGED: u64 = 4;
    /// A failed strong compare-exchange.
    pub const CAS_FAILED: u64 = 5;
    /// A failed weak compare-exchange.
    pub const CAS_FAILED_WEAK: u64 = 6;
}

/// Bits of a [`Op::BarrierWait`] event's `arg`.
pub mod barrier {
    /// On DONE: this thread was the serial one
    /// (`PTHREAD_BARRIER_SERIAL_THREAD`; for an OpenMP region's end, the
    /// last to arrive).
    pub const SERIAL: u64 = 1;
    /// On BEGIN and DONE: the barrier at the end of an OpenMP parallel
    /// region. The team's join: it can never be removed, however
    /// redundant it is.
    pub const REGION_END: u64 = 2;
    /// On a region end's DONE: the thread stopped waiting in lockscope's
    /// barrier at its time limit (`LOCKSCOPE_OMP_WAIT_MS`, default 10 s)
    /// before the team's last thread arrived, and went on into libgomp's
    /// own barrier; its wait was longer than recorded.
    pub const GAVE_UP: u64 = 4;
}

/// One event of one thread, as stored in a trace.
///
/// The meaning of `addr`, `arg` and `arg2` depends on [`Op`] (see each
/// variant's doc). Unused fields are 0 and cost nothing on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// Nanoseconds since the start of the trace ([`crate::Header`]).
    pub time: u64,
    /// What happened.
    pub op: u8,
    /// Op-specific bits; for synchronization ops, see [`phase`].
    pub flags: u8,
    /// The object: lock, condition variable, futex word, memory location.
    pub addr: u64,
    /// Return address of the call (the call site), or the PC of an access.
    pub site: u64,
    /// Interned call path ([`crate::StackTrace`]), 0 for none.
    pub stack: u32,
    /// Op-specific argument.
    pub arg: u64,
    /// Second op-specific argument.
    pub arg2: u64,
}

impl Event {
    /// The op, if this build knows it.
    pub fn op(&self) -> Option<Op> {
        Op::from_u8(self.op)
    }
    /// The phase bits of `flags` (see [`phase`]).
    pub fn phase(&self) -> u8 {
        phase::of(self.flags)
    }
}
