//! The lock protocol, interpreted once: events in, typed synchronization
//! steps out.
//!
//! Every analysis that needs to know which thread holds which lock, when a
//! condition wait gives its mutex up and takes it back, what a failed
//! trylock or a timed-out wait means, or how long a thread computed
//! between two synchronization calls consumes [`Step`]s from here: the
//! timing model and the hang tracker (`lockscope-report`), the spinlock
//! finder's lockset and the detailed-mode view (`lockscope-detailed`,
//! which feeds ulcp, lockset and occ) and the replay (`lockscope-replay`).
//! No other module looks at a lock call's [`phase`] bits or pairs a BEGIN
//! with its completion. See `docs/sync-layer.md`.
//!
//! # What a step is
//! [`SyncInterp::event`] takes one event (events must arrive in global
//! time order, as [`crate::input::Merge`] delivers them; within a thread
//! in file order) and calls back once per step: normally one step per
//! event, preceded by an [`StepKind::Abandoned`] step when the event
//! proves that the thread's pending call never completed, and followed by
//! [`StepKind::HoldDropped`] steps for other threads when a release proves
//! their releases were lost. [`SyncInterp::finish`] closes every thread
//! ([`StepKind::End`], then [`StepKind::HeldAtExit`] for locks still
//! held, then [`StepKind::StillWaiting`] for a call still blocked).
//!
//! Each step carries the [`Segment`] that ends at it: the thread's time
//! since its previous step, classified (computing, blocked on what,
//! inside an unlock, unknown) and shortened by the recorder's cost of the
//! event that ends it (PinCS §2.2): `acquire_ns` for an uncontended lock
//! call, `release_ns` for a release, `event_ns` for anything else; a
//! contended wait is shortened by `(k + 2) * O` where `k` is the number of
//! threads holding or queued on the lock when the wait began and `O` the
//! mean of `acquire_ns` and `release_ns`. `Step::clock` is the thread's
//! corrected clock after the step, so waits and holds measured on it are
//! consistent with the segments.
//!
//! # Protocol rules (the decisions, in one place)
//! - An acquisition that waited is BEGIN then DONE|CONTENDED (or FAIL);
//!   an uncontended one is a single DONE. A failed trylock or timed lock
//!   is FAIL with the errno in `arg`.
//! - A release is DONE; an END follows when the unlock entered the kernel
//!   (the time between is [`SegKind::Unlocking`]).
//! - `pthread_cond_wait` BEGIN releases the mutex named in `arg`; its
//!   DONE, and its FAIL (timeout: `arg` is then the errno, not the mutex),
//!   re-acquire the mutex of the BEGIN.
//! - A thread blocked in a call can only produce that call's completion;
//!   anything else means events were lost: the call is abandoned and the
//!   interval is unknown.
//! - An exclusive hold is dropped (its release was lost) when another
//!   thread goes through a whole exclusive section of the same lock that
//!   began after it.

use std::collections::HashMap;
use std::path::Path;

use lockscope_format::{phase, Event, Op, Overhead, Record, Trace};

use crate::input::{Merge, Meta};
use crate::AnalysisError;
use crate::FastMap;

/// Timed-call errno for a timeout.
pub const ETIMEDOUT: u64 = 110;

/// Kind of a synchronization object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// pthread mutex.
    Mutex,
    /// pthread reader-writer lock.
    Rwlock,
    /// pthread spinlock.
    Spin,
    /// A raw futex word (locks that bypass pthreads): only waits are seen.
    Futex,
    /// Condition variable.
    Cond,
    /// Barrier.
    Barrier,
    /// Semaphore.
    Semaphore,
    /// A semaphore used as a lock: over the whole trace its count stayed
    /// in {0, 1} and every post came from the thread that last acquired
    /// it (CPython's `threading.Lock`, a `sem_t` mutex in C). Its waits
    /// and posts are interpreted as acquisitions and releases; see
    /// [`SemLockFinder`].
    SemLock,
}

impl Kind {
    /// Stable lower-case name used in every output.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Rwlock => "rwlock",
            Kind::Spin => "spin",
            Kind::Futex => "futex",
            Kind::Cond => "cond",
            Kind::Barrier => "barrier",
            Kind::Semaphore => "semaphore",
            Kind::SemLock => "semaphore-lock",
        }
    }
    /// The kind of object an op works on.
    pub fn of(op: Op) -> Option<Kind> {
        use Op::*;
        Some(match op {
            MutexLock | MutexTrylock | MutexTimedlock | MutexUnlock => Kind::Mutex,
            RwRdlock | RwWrlock | RwTryRdlock | RwTryWrlock | RwTimedRdlock | RwTimedWrlock
            | RwUnlock => Kind::Rwlock,
            SpinLock | SpinTrylock | SpinUnlock => Kind::Spin,
            FutexWait | FutexWake => Kind::Futex,
            CondWait | CondTimedwait | CondSignal | CondBroadcast => Kind::Cond,
            BarrierWait => Kind::Barrier,
            SemWait | SemTrywait | SemTimedwait | SemPost => Kind::Semaphore,
            _ => return None,
        })
    }
    /// Objects keyed apart even at the same address (a futex word may be a
    /// pthread object's first field). Locks of every kind share class 0.
    pub fn class(self) -> u8 {
        match self {
            // A semaphore-lock is keyed with the locks: the held-set
            // queries ([`SyncInterp::holders`]) and the model's release
            // path look locks up in class 0 whatever their kind.
            Kind::Mutex | Kind::Rwlock | Kind::Spin | Kind::SemLock => 0,
            Kind::Futex => 1,
            Kind::Cond => 2,
            Kind::Barrier => 3,
            Kind::Semaphore => 4,
        }
    }
}

/// A synchronization object: its process and address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjId {
    /// Process trace id.
    pub process: u32,
    /// Address.
    pub addr: u64,
}

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Shared (a reader-writer lock taken for reading).
    Read,
    /// A reader-writer lock taken for writing.
    Write,
    /// A mutex or spinlock.
    Exclusive,
}

/// Which call opened a critical section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// A blocking lock call.
    Lock,
    /// A trylock that succeeded.
    Trylock,
    /// A timed lock call that succeeded.
    Timedlock,
    /// A condition wait re-acquiring its mutex (after a signal or a timeout).
    CondWait,
}

/// One critical section as the protocol sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section {
    /// The lock.
    pub lock: ObjId,
    /// Mode.
    pub mode: Mode,
    /// Call site of the acquisition (for a condition wait: the wait's).
    pub site: u64,
    /// Call path id of the acquisition, 0 if none.
    pub stack: u32,
    /// When the acquisition was attempted (raw ns; the BEGIN if it waited).
    pub attempt_ns: u64,
    /// When it was acquired (raw ns).
    pub begin_ns: u64,
    /// The thread's corrected clock when it was acquired.
    pub begin_clock: u64,
    /// The call that opened it.
    pub via: Via,
    obj: u32,
}

impl Section {
    /// Held in shared mode.
    pub fn shared(&self) -> bool {
        self.mode == Mode::Read
    }
}

/// What a thread is blocked on during a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockedOn {
    /// A lock acquisition or a raw futex wait.
    Lock,
    /// A condition wait.
    Cond,
    /// A barrier.
    Barrier,
    /// A semaphore wait.
    Sem,
    /// A join.
    Join,
    /// A CPU call that waits for the GPU (`GpuSync`: device, stream or
    /// event synchronize, a blocking copy, `cudaFree`).
    Gpu,
}

/// Class of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegKind {
    /// Running (not in a synchronization call).
    Compute,
    /// In a call that blocked.
    Blocked(BlockedOn),
    /// Inside an unlock that entered the kernel.
    Unlocking,
    /// Cannot be classified (clock stepped back, events lost, protocol broken).
    Unknown,
}

/// A thread's time since its previous step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// What the thread was doing.
    pub kind: SegKind,
    /// At least one lock was held during it.
    pub holding: bool,
    /// Length on the recorded clock, ns.
    pub raw_ns: u64,
    /// Recorder overhead subtracted, ns (0 without correction).
    pub cost_ns: u64,
    /// `raw_ns - cost_ns`.
    pub corrected_ns: u64,
}

impl Segment {
    const NONE: Segment = Segment {
        kind: SegKind::Compute,
        holding: false,
        raw_ns: 0,
        cost_ns: 0,
        corrected_ns: 0,
    };
}

/// What a step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// A lock acquisition started waiting.
    AcquireBegin {
        /// The lock.
        lock: ObjId,
    },
    /// A lock was acquired: a critical section opens.
    Acquired {
        /// The section.
        section: Section,
        /// The call had to wait.
        waited: bool,
        /// Its BEGIN was seen (so the thread was queued on the lock).
        matched: bool,
        /// Wait on the corrected clock, ns.
        wait_ns: u64,
        /// No wait and no failed call on this lock since the thread's
        /// previous acquisition of it.
        first_attempt: bool,
    },
    /// A lock call failed (busy trylock, timeout, error).
    AcquireFailed {
        /// The lock.
        lock: ObjId,
        /// Its BEGIN was seen.
        matched: bool,
        /// Wait, ns.
        wait_ns: u64,
        /// errno.
        errno: u64,
        /// A trylock-style call.
        is_try: bool,
    },
    /// A critical section closed.
    Released(Section),
    /// A release of a lock the thread was not known to hold.
    UnmatchedRelease {
        /// The lock.
        lock: ObjId,
    },
    /// An unlock that entered the kernel returned.
    ReleaseEnd {
        /// The lock.
        lock: ObjId,
        /// Time inside the unlock, corrected ns.
        unlock_ns: u64,
    },
    /// Another thread's release proved this thread's release of the
    /// section was lost: the hold is dropped (its length is unknown).
    HoldDropped(Section),
    /// A section still open when its thread ended (closed at the end).
    HeldAtExit(Section),
    /// A condition wait began and gave up its mutex.
    CondWaitBegin {
        /// The condition variable.
        cond: ObjId,
        /// The mutex.
        mutex: ObjId,
        /// The section closed by giving the mutex up, if it was held.
        released: Option<Section>,
    },
    /// A condition wait returned (signalled or timed out) with the mutex.
    CondWaitEnd {
        /// The condition variable.
        cond: ObjId,
        /// Wait, corrected ns.
        wait_ns: u64,
        /// The wait timed out.
        timed_out: bool,
        /// The section re-opened on the mutex of the wait.
        section: Section,
    },
    /// `pthread_cond_signal` or `broadcast`.
    CondSignal {
        /// The condition variable.
        cond: ObjId,
        /// A broadcast.
        broadcast: bool,
    },
    /// A thread arrived at a barrier and waits.
    BarrierArrive {
        /// The barrier.
        barrier: ObjId,
        /// Round (the thread's k-th wait on it is round k).
        round: u64,
    },
    /// A thread left a barrier.
    BarrierDepart {
        /// The barrier.
        barrier: ObjId,
        /// Round.
        round: u64,
        /// Trace id of the round's last arriver so far (`u32::MAX`: unknown).
        last_arriver: u32,
        /// Wait, corrected ns.
        wait_ns: u64,
        /// No BEGIN: the thread arrived and left at once.
        arrived_now: bool,
    },
    /// A semaphore wait began blocking.
    SemWaitBegin {
        /// The semaphore.
        sem: ObjId,
    },
    /// A semaphore wait (or trywait) returned.
    SemWaitEnd {
        /// The semaphore.
        sem: ObjId,
        /// It blocked first.
        waited: bool,
        /// Wait, corrected ns.
        wait_ns: u64,
        /// errno if it failed.
        failed: Option<u64>,
        /// `sem_trywait`.
        is_try: bool,
    },
    /// `sem_post`.
    SemPost {
        /// The semaphore.
        sem: ObjId,
    },
    /// A raw futex wait began.
    FutexWaitBegin {
        /// The futex word.
        futex: ObjId,
    },
    /// A raw futex wait returned.
    FutexWaitEnd {
        /// The futex word.
        futex: ObjId,
        /// Wait, corrected ns.
        wait_ns: u64,
        /// errno if it failed (EAGAIN, timeout, EINTR).
        failed: Option<u64>,
    },
    /// A futex wake.
    FutexWake {
        /// The futex word.
        futex: ObjId,
        /// Threads woken.
        woken: u64,
    },
    /// `pthread_create` returned.
    ThreadCreate {
        /// The new thread's OS tid.
        tid: u64,
    },
    /// The thread's start routine is about to run.
    ThreadStart,
    /// The thread's start routine returned.
    ThreadExit,
    /// `pthread_join` began blocking.
    JoinBegin {
        /// Joined OS tid.
        tid: u64,
    },
    /// `pthread_join` returned.
    JoinEnd {
        /// Joined OS tid.
        tid: u64,
    },
    /// A CPU call began waiting for the GPU (`GpuSync` BEGIN).
    GpuWaitBegin {
        /// What it waits for (the analysis' `gpu::sync_kind`).
        what: u64,
    },
    /// A CPU wait for the GPU returned (`GpuSync` END); its segment is
    /// `Blocked(Gpu)`.
    GpuWaitEnd {
        /// What it waited for (the analysis' `gpu::sync_kind`).
        what: u64,
    },
    /// `fork` returned in the parent.
    Fork {
        /// Child pid.
        pid: u64,
    },
    /// An `exec` call.
    Exec,
    /// The thread's pending call never completed (events lost); emitted
    /// before the step of the event that proved it.
    Abandoned {
        /// The lock or futex it was queued on, if it was an acquisition.
        queued: Option<(ObjId, Kind)>,
    },
    /// A call still blocked when its thread ended (synthetic, from
    /// [`SyncInterp::finish`], after the thread's [`StepKind::End`] and
    /// [`StepKind::HeldAtExit`] steps): a deadlocked or hung thread, or
    /// one blocked when the program was killed. Its wait so far ends at
    /// the thread's end. Emitted for every blocking call, not only lock
    /// acquisitions; an acquisition's is followed by
    /// [`StepKind::Abandoned`] (it never got the lock).
    StillWaiting {
        /// What it was blocked on.
        on: BlockedOn,
        /// The lock, futex word, condition variable, barrier or semaphore
        /// (none for a join or a GPU wait).
        obj: Option<(ObjId, Kind)>,
        /// The BEGIN's `arg`: the joined OS tid for a join, the mutex
        /// for a condition wait.
        arg: u64,
        /// Raw time of the BEGIN, ns.
        since_ns: u64,
        /// Wait so far, on the corrected clock, ns.
        wait_ns: u64,
        /// Call site of the BEGIN.
        site: u64,
        /// Call path id of the BEGIN, 0 if none.
        stack: u32,
    },
    /// A completion with no matching start (names the object, if any).
    Unmatched {
        /// The object the completion names.
        obj: Option<(ObjId, Kind)>,
    },
    /// The recorder dropped events before this point.
    Lost {
        /// How many.
        count: u64,
    },
    /// A sample of the thread's run-queue delay (`Op::RunDelay`): see the
    /// replay's preemption correction.
    RunDelay {
        /// Time the thread had spent runnable without a CPU so far, ns.
        wait_ns: u64,
    },
    /// An op this build does not know.
    UnknownOp,
    /// A memory access or another non-synchronization op (detailed mode).
    Memory(Op),
    /// The thread ended (synthetic, from [`SyncInterp::finish`]).
    End,
}

impl StepKind {
    /// True for steps that do not correspond to an event of the thread
    /// (their segment is empty except for [`StepKind::End`]).
    pub fn is_synthetic(&self) -> bool {
        matches!(
            self,
            StepKind::Abandoned { .. }
                | StepKind::StillWaiting { .. }
                | StepKind::HoldDropped(_)
                | StepKind::HeldAtExit(_)
                | StepKind::End
        )
    }
}

/// One synchronization step of one thread.
#[derive(Clone, Copy, Debug)]
pub struct Step<'a> {
    /// Trace thread id.
    pub thread: u32,
    /// Process trace id of the thread.
    pub process: u32,
    /// Raw time, ns since the trace start.
    pub time: u64,
    /// The thread's corrected clock after this step.
    pub clock: u64,
    /// The time since the thread's previous step.
    pub segment: Segment,
    /// What happened.
    pub kind: StepKind,
    /// The event (a zeroed one for synthetic steps).
    pub event: &'a Event,
}

static NO_EVENT: Event = Event {
    time: 0,
    op: 0,
    flags: 0,
    addr: 0,
    site: 0,
    stack: 0,
    arg: 0,
    arg2: 0,
};

/// Counts of things that did not follow the event protocol. Each is a
/// sign of lost events or clock trouble; none stops the analysis.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Anomalies {
    /// Events whose time is before the previous event of the same thread.
    pub clock_backwards: u64,
    /// Intervals classified Unknown.
    pub unknown_intervals: u64,
    /// Releases of a lock the thread was not known to hold.
    pub unmatched_releases: u64,
    /// Completions (DONE|CONTENDED, END, wait returns) with no matching start.
    pub unmatched_completions: u64,
    /// A thread blocked in a call produced an unrelated event.
    pub interrupted_waits: u64,
    /// Exclusive acquisitions while another thread was recorded holding
    /// the lock (clock skew between CPUs, or lost releases).
    pub overlapping_holds: u64,
    /// Locks still held when their thread ended (closed at its end).
    pub held_at_exit: u64,
    /// Exclusive holds dropped because another thread went through a
    /// whole critical section of the same lock meanwhile: their release
    /// was lost. Their duration is unknown and not counted.
    pub lost_releases: u64,
    /// Events with an op this build does not know.
    pub unknown_ops: u64,
    /// Events of threads with no thread record.
    pub orphan_events: u64,
}

impl Anomalies {
    /// The counts every printer lists as anomalies, by name (all but
    /// `overlapping_holds`, which the text report explains in a note).
    pub fn named(&self) -> [(&'static str, u64); 9] {
        [
            ("clock steps back", self.clock_backwards),
            ("unknown intervals", self.unknown_intervals),
            ("unmatched releases", self.unmatched_releases),
            ("unmatched completions", self.unmatched_completions),
            ("interrupted waits", self.interrupted_waits),
            ("held at exit", self.held_at_exit),
            ("lost releases", self.lost_releases),
            ("unknown ops", self.unknown_ops),
            ("events of unknown threads", self.orphan_events),
        ]
    }
}

/// Recorder costs of one process, ns.
#[derive(Clone, Copy, Debug, Default)]
struct Cost {
    acquire: f64,
    release: f64,
    /// The same rounded, for the per-event path.
    acquire_ns: u64,
    release_ns: u64,
    event_ns: u64,
}

#[derive(Clone, Copy, Debug, Default)]
enum Pending {
    #[default]
    None,
    /// Contended acquisition or futex wait in progress.
    Acquire {
        obj: u32,
        /// Corrected clock at BEGIN.
        at: u64,
        /// Raw time of the BEGIN.
        raw: u64,
        /// Threads holding or queued when the wait began (PinCS w).
        ahead: u32,
    },
    /// A release DONE that may be followed by its END.
    Unlock { obj: u32, at: u64 },
    /// Condition, barrier, semaphore or join wait.
    Wait {
        what: BlockedOn,
        /// The object (`u32::MAX` for a join).
        obj: u32,
        /// The mutex released by a condition wait.
        mutex: u32,
        /// Call site of the wait.
        site: u64,
        at: u64,
    },
}

#[derive(Clone, Debug)]
struct ThreadState {
    id: u32,
    process: u32,
    start: u64,
    end: u64,
    last_t: u64,
    corr: u64,
    started: bool,
    unknown_next: bool,
    held: Vec<Section>,
    pending: Pending,
    /// The last BEGIN: (raw time, site, call path, arg). Kept apart from
    /// `pending` (which every event reads) because only
    /// [`StepKind::StillWaiting`] needs it.
    began: (u64, u64, u32, u64),
    failed: Vec<u32>,
    cost: Cost,
    /// Per-thread lookup cache (class, addr) -> object: a thread uses
    /// few objects at a time, and this skips the hash lookup. Boxed
    /// array: one allocation, no bounds checks on the hot path.
    cache: Box<[(u64, u8, u32); CACHE]>,
}

impl ThreadState {
    fn now(&self) -> u64 {
        self.last_t - self.corr
    }
}

const CACHE: usize = 64;

#[derive(Clone, Copy, Debug)]
struct Holder {
    thread: u32,
    shared: bool,
    /// Latest time the object was touched when the hold began.
    since: u64,
}

#[derive(Clone, Debug, Default)]
struct BarrierState {
    /// Per thread index: (rounds it arrived at, arrival time of the open one).
    threads: FastMap<u32, (u64, u64)>,
    /// Round -> (latest arrival time, thread index).
    last: FastMap<u64, (u64, u32)>,
}

#[derive(Clone, Debug)]
struct ObjState {
    id: ObjId,
    kind: Kind,
    holders: Vec<Holder>,
    waiters: Vec<u32>,
    last: u64,
    barrier: Option<Box<BarrierState>>,
}

impl ObjState {
    #[inline(always)]
    fn touch(&mut self, t: u64) {
        self.last = self.last.max(t);
    }
}

/// The interpreter: per-thread protocol state and per-object holders and
/// waiters. Feed it with [`SyncInterp::event`] in time order.
pub struct SyncInterp {
    correct: bool,
    threads: Vec<ThreadState>,
    thread_index: FastMap<u32, u32>,
    thread_lookup: Vec<u32>,
    objs: Vec<ObjState>,
    obj_index: FastMap<(u32, u8, u64), u32>,
    costs: FastMap<u32, Cost>,
    /// Semaphores to interpret as locks (decided before, over the whole
    /// trace: [`SemLockFinder`]).
    sem_locks: FastMap<ObjId, ()>,
    /// Protocol anomalies so far.
    pub anomalies: Anomalies,
}

impl SyncInterp {
    /// An interpreter; `correct` subtracts the recorder's measured costs
    /// (`overhead`, per process).
    pub fn new(correct: bool, overhead: &[Overhead]) -> Self {
        let mut costs = FastMap::default();
        for o in overhead {
            let ok = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
            costs.insert(
                o.process,
                Cost {
                    acquire: ok(o.acquire_ns),
                    release: ok(o.release_ns),
                    acquire_ns: ok(o.acquire_ns).round() as u64,
                    release_ns: ok(o.release_ns).round() as u64,
                    event_ns: ok(o.event_ns).round() as u64,
                },
            );
        }
        SyncInterp {
            correct,
            threads: Vec::new(),
            thread_index: FastMap::default(),
            thread_lookup: Vec::new(),
            objs: Vec::new(),
            obj_index: FastMap::default(),
            costs,
            sem_locks: FastMap::default(),
            anomalies: Anomalies::default(),
        }
    }

    /// Semaphores whose waits and posts are to be interpreted as lock
    /// acquisitions and releases (kind [`Kind::SemLock`]); call before the
    /// first event and before [`SyncInterp::add_lock_info`].
    pub fn set_semaphore_locks(&mut self, locks: impl IntoIterator<Item = ObjId>) {
        self.sem_locks.extend(locks.into_iter().map(|l| (l, ())));
    }

    /// Is this semaphore interpreted as a lock?
    pub fn is_semaphore_lock(&self, sem: ObjId) -> bool {
        self.sem_locks.contains_key(&sem)
    }

    /// The lock op a semaphore-lock's op stands for; `op` itself for
    /// everything else. Translating the op here, once, is what makes a
    /// semaphore-lock a lock for every consumer of the steps (the model,
    /// the hang tracker, the timeline, the replay) without code of its
    /// own; the event itself is left as recorded (consumers that name its
    /// kind map a semaphore op in a lock step to [`Kind::SemLock`]).
    #[inline(always)]
    fn as_lock_op(&self, ti: usize, op: Op, e: &Event) -> Op {
        let lock_op = match op {
            Op::SemWait => Op::MutexLock,
            Op::SemTimedwait => Op::MutexTimedlock,
            Op::SemTrywait => Op::MutexTrylock,
            Op::SemPost => Op::MutexUnlock,
            _ => return op,
        };
        let id = ObjId {
            process: self.threads[ti].process,
            addr: e.addr,
        };
        if self.sem_locks.contains_key(&id) {
            lock_op
        } else {
            op
        }
    }

    /// Declares a thread (from its thread record), before its events.
    pub fn add_thread(&mut self, id: u32, process: u32, start: u64) {
        let idx = self.threads.len() as u32;
        self.thread_index.insert(id, idx);
        // Trace thread ids are small and dense: a vector lookup on the
        // per-event path instead of a hash lookup.
        if (id as usize) < (1 << 20) {
            if self.thread_lookup.len() <= id as usize {
                self.thread_lookup.resize(id as usize + 1, u32::MAX);
            }
            self.thread_lookup[id as usize] = idx;
        }
        let cost = self.costs.get(&process).copied().unwrap_or_default();
        self.threads.push(ThreadState {
            id,
            process,
            start,
            end: start,
            last_t: start,
            corr: 0,
            started: false,
            unknown_next: false,
            held: Vec::new(),
            pending: Pending::None,
            began: (0, 0, 0, 0),
            failed: Vec::new(),
            cost,
            cache: Box::new([(0, u8::MAX, 0); CACHE]),
        });
    }

    /// Declares the first sighting of a lock (from a Lock record).
    pub fn add_lock_info(&mut self, process: u32, addr: u64, first_op: u8, first_ns: u64) {
        if let Some(mut kind) = Op::from_u8(first_op).and_then(Kind::of) {
            if kind == Kind::Semaphore && self.is_semaphore_lock(ObjId { process, addr }) {
                kind = Kind::SemLock;
            }
            self.obj_slow(process, kind, addr, first_ns);
        }
    }

    /// Sets a thread's end (from ThreadEnd / ProcessEnd / footer).
    pub fn set_thread_end(&mut self, id: u32, end: u64) {
        if let Some(&i) = self.thread_index.get(&id) {
            self.threads[i as usize].end = end;
        }
    }

    /// Raw time of a thread's last event (its start if none).
    pub fn last_time(&self, id: u32) -> Option<u64> {
        let i = *self.thread_index.get(&id)?;
        Some(self.threads[i as usize].last_t)
    }

    /// The critical sections a thread has open, outermost first.
    pub fn held(&self, id: u32) -> &[Section] {
        match self.thread_index.get(&id) {
            Some(&i) => &self.threads[i as usize].held,
            None => &[],
        }
    }

    /// Trace ids of the threads holding a lock now.
    pub fn holders(&self, lock: ObjId) -> impl Iterator<Item = u32> + '_ {
        self.obj_index
            .get(&(lock.process, 0, lock.addr))
            .into_iter()
            .flat_map(move |&o| self.objs[o as usize].holders.iter())
            .map(move |h| self.threads[h.thread as usize].id)
    }

    fn thread_idx(&mut self, id: u32, t: u64) -> usize {
        if let Some(&i) = self.thread_lookup.get(id as usize) {
            if i != u32::MAX {
                return i as usize;
            }
        }
        if let Some(&i) = self.thread_index.get(&id) {
            return i as usize;
        }
        self.anomalies.orphan_events += 1;
        self.add_thread(id, 0, t);
        self.threads.len() - 1
    }

    fn obj_slow(&mut self, process: u32, kind: Kind, addr: u64, t: u64) -> u32 {
        let n = self.objs.len() as u32;
        let key = (process, kind.class(), addr);
        if let Some(&i) = self.obj_index.get(&key) {
            return i;
        }
        self.obj_index.insert(key, n);
        self.objs.push(ObjState {
            id: ObjId { process, addr },
            kind,
            holders: Vec::new(),
            waiters: Vec::new(),
            last: t,
            barrier: None,
        });
        n
    }

    #[inline(always)]
    fn obj(&mut self, ti: usize, kind: Kind, addr: u64, t: u64) -> u32 {
        let class = kind.class();
        let slot = ((addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize ^ class as usize)
            & (CACHE - 1);
        let c = self.threads[ti].cache[slot];
        if c.0 == addr && c.1 == class {
            return c.2;
        }
        let process = self.threads[ti].process;
        let o = self.obj_slow(process, kind, addr, t);
        self.threads[ti].cache[slot] = (addr, class, o);
        o
    }

    fn obj_id(&mut self, ti: usize, kind: Kind, addr: u64, t: u64) -> ObjId {
        let o = self.obj(ti, kind, addr, t);
        self.objs[o as usize].id
    }

    /// Classifies the interval ending at time `t` on thread `ti` and
    /// applies the overhead correction `cost` (clamped to the interval).
    #[inline(always)]
    fn account(
        &mut self,
        ti: usize,
        t: u64,
        cost: u64,
        ends_pending: bool,
        is_unlock_end: bool,
    ) -> Segment {
        let th = &mut self.threads[ti];
        if !th.started {
            th.started = true;
            if t < th.start {
                // The thread record's start is later than its first event:
                // trust the event (the record is taken at a coarser point).
                th.start = t;
                th.last_t = t;
            }
        }
        let (dt, backwards) = if t >= th.last_t {
            (t - th.last_t, false)
        } else {
            (0, true)
        };
        let holding = !th.held.is_empty();
        let kind = if th.unknown_next || backwards {
            SegKind::Unknown
        } else {
            match th.pending {
                Pending::Acquire { .. } if ends_pending => SegKind::Blocked(BlockedOn::Lock),
                Pending::Acquire { .. } => SegKind::Unknown,
                Pending::Unlock { .. } if is_unlock_end => SegKind::Unlocking,
                Pending::Wait { .. } if !ends_pending => SegKind::Unknown,
                Pending::Wait { what, .. } => SegKind::Blocked(what),
                _ => SegKind::Compute,
            }
        };
        if backwards {
            self.anomalies.clock_backwards += 1;
        }
        th.unknown_next = backwards;
        let sub = if self.correct { cost.min(dt) } else { 0 };
        th.corr += sub;
        if kind == SegKind::Unknown {
            self.anomalies.unknown_intervals += 1;
        }
        th.last_t = th.last_t.max(t);
        Segment {
            kind,
            holding,
            raw_ns: dt,
            cost_ns: sub,
            corrected_ns: dt - sub,
        }
    }

    /// Does `e` complete the thread's pending call?
    #[inline(always)]
    fn completes_pending(&self, ti: usize, op: Op, e: &Event) -> bool {
        let ph = e.phase();
        if ph == phase::BEGIN {
            return false;
        }
        let th = &self.threads[ti];
        match th.pending {
            Pending::None => false,
            Pending::Unlock { obj, .. } => {
                op.is_release() && ph == phase::END && self.objs[obj as usize].id.addr == e.addr
            }
            Pending::Acquire { obj, .. } => {
                let o = &self.objs[obj as usize];
                o.id.addr == e.addr
                    && o.id.process == th.process
                    && (op.is_acquire() || (op == Op::FutexWait && o.kind == Kind::Futex))
            }
            Pending::Wait { what, obj, .. } => {
                let same = obj == u32::MAX || self.objs[obj as usize].id.addr == e.addr;
                same && match what {
                    BlockedOn::Cond => matches!(op, Op::CondWait | Op::CondTimedwait),
                    BlockedOn::Barrier => op == Op::BarrierWait,
                    BlockedOn::Sem => matches!(op, Op::SemWait | Op::SemTimedwait),
                    BlockedOn::Join => op == Op::ThreadJoin,
                    BlockedOn::Gpu => op == Op::GpuSync,
                    BlockedOn::Lock => false,
                }
            }
        }
    }

    /// Feeds one event of trace thread `thread`; calls `f` for each step.
    pub fn event<'e>(&mut self, thread: u32, e: &'e Event, f: &mut impl FnMut(&Step<'e>, &Self)) {
        let ti = self.thread_idx(thread, e.time);
        let Some(op) = e.op() else {
            self.anomalies.unknown_ops += 1;
            let seg = self.account(ti, e.time, self.threads[ti].cost.event_ns, false, false);
            self.emit(ti, e, seg, StepKind::UnknownOp, f);
            return;
        };
        let op = if self.sem_locks.is_empty() {
            op
        } else {
            self.as_lock_op(ti, op, e)
        };
        let ph = e.phase();
        if ph == phase::BEGIN {
            self.threads[ti].began = (e.time, e.site, e.stack, e.arg);
        }
        let completes = self.completes_pending(ti, op, e);
        if !completes
            && !matches!(
                self.threads[ti].pending,
                Pending::None | Pending::Unlock { .. }
            )
        {
            // A thread blocked in a call can only produce that call's
            // completion; anything else means events were lost.
            self.anomalies.interrupted_waits += 1;
            let th = &mut self.threads[ti];
            th.unknown_next = true;
            let p = std::mem::replace(&mut th.pending, Pending::None);
            let queued = match p {
                Pending::Acquire { obj, .. } => {
                    let o = &mut self.objs[obj as usize];
                    o.touch(e.time);
                    if let Some(i) = o.waiters.iter().position(|&w| w == ti as u32) {
                        o.waiters.swap_remove(i);
                    }
                    Some((o.id, o.kind))
                }
                _ => None,
            };
            self.emit(ti, e, Segment::NONE, StepKind::Abandoned { queued }, f);
        }
        let pending = self.threads[ti].pending;
        let is_unlock_end = completes && matches!(pending, Pending::Unlock { .. });
        if op == Op::Lost {
            // The events dropped were before this annotation: the interval
            // that ends here is the one we know nothing about.
            self.threads[ti].unknown_next = true;
        }
        let ends_pending = completes && !matches!(pending, Pending::Unlock { .. });
        // Cost of the event that ends this interval.
        let cost = &self.threads[ti].cost;
        let c = match pending {
            Pending::Acquire { ahead, .. } if ends_pending => {
                ((f64::from(ahead) + 2.0) * (cost.acquire + cost.release) / 2.0).round() as u64
            }
            _ if op.is_acquire() && ph != phase::BEGIN => cost.acquire_ns,
            _ if op.is_release() && ph == phase::DONE => cost.release_ns,
            _ if op.is_release() => 0,
            _ => cost.event_ns,
        };
        let seg = self.account(ti, e.time, c, ends_pending, is_unlock_end);
        if !is_unlock_end {
            if let Pending::Unlock { .. } = self.threads[ti].pending {
                self.threads[ti].pending = Pending::None;
            }
        }
        if op.is_acquire() {
            self.on_acquire(ti, op, e, seg, f);
        } else if op.is_release() {
            self.on_release(ti, e, seg, is_unlock_end, f);
        } else {
            let kind = match op {
                Op::CondWait | Op::CondTimedwait => self.on_cond_wait(ti, e),
                Op::CondSignal | Op::CondBroadcast => {
                    let cond = self.obj_id(ti, Kind::Cond, e.addr, e.time);
                    StepKind::CondSignal {
                        cond,
                        broadcast: op == Op::CondBroadcast,
                    }
                }
                Op::SemPost => StepKind::SemPost {
                    sem: self.obj_id(ti, Kind::Semaphore, e.addr, e.time),
                },
                Op::FutexWake => StepKind::FutexWake {
                    futex: self.obj_id(ti, Kind::Futex, e.addr, e.time),
                    woken: e.arg,
                },
                Op::BarrierWait => self.on_barrier(ti, e),
                Op::SemWait | Op::SemTimedwait | Op::SemTrywait => self.on_sem(ti, op, e),
                Op::FutexWait => self.on_futex_wait(ti, e),
                Op::ThreadJoin => {
                    let th = &mut self.threads[ti];
                    if ph == phase::BEGIN {
                        th.pending = Pending::Wait {
                            what: BlockedOn::Join,
                            obj: u32::MAX,
                            mutex: u32::MAX,
                            site: e.site,
                            at: th.now(),
                        };
                        StepKind::JoinBegin { tid: e.arg }
                    } else {
                        if let Pending::Wait {
                            what: BlockedOn::Join,
                            ..
                        } = th.pending
                        {
                            th.pending = Pending::None;
                        }
                        StepKind::JoinEnd { tid: e.arg }
                    }
                }
                Op::GpuSync => {
                    let th = &mut self.threads[ti];
                    if ph == phase::BEGIN {
                        th.pending = Pending::Wait {
                            what: BlockedOn::Gpu,
                            obj: u32::MAX,
                            mutex: u32::MAX,
                            site: e.site,
                            at: th.now(),
                        };
                        StepKind::GpuWaitBegin { what: e.arg }
                    } else {
                        if let Pending::Wait {
                            what: BlockedOn::Gpu,
                            ..
                        } = th.pending
                        {
                            th.pending = Pending::None;
                        }
                        StepKind::GpuWaitEnd { what: e.arg }
                    }
                }
                Op::ThreadExit => {
                    let th = &mut self.threads[ti];
                    th.end = th.end.max(e.time);
                    StepKind::ThreadExit
                }
                Op::ThreadStart => StepKind::ThreadStart,
                Op::ThreadCreate => StepKind::ThreadCreate { tid: e.arg },
                Op::Fork => StepKind::Fork { pid: e.arg },
                Op::RunDelay => StepKind::RunDelay { wait_ns: e.arg },
                Op::Exec => StepKind::Exec,
                Op::Lost => {
                    // Where the drops were relative to the annotation is
                    // not reliable: the interval after it is unknown too.
                    self.threads[ti].unknown_next = true;
                    StepKind::Lost { count: e.arg }
                }
                op => StepKind::Memory(op),
            };
            self.emit(ti, e, seg, kind, f);
        }
    }

    #[inline(always)]
    fn emit<'e>(
        &self,
        ti: usize,
        e: &'e Event,
        segment: Segment,
        kind: StepKind,
        f: &mut impl FnMut(&Step<'e>, &Self),
    ) {
        self.emit_at(ti, e.time, e, segment, kind, f);
    }

    #[inline(always)]
    fn emit_at<'e>(
        &self,
        ti: usize,
        time: u64,
        e: &'e Event,
        segment: Segment,
        kind: StepKind,
        f: &mut impl FnMut(&Step<'e>, &Self),
    ) {
        let th = &self.threads[ti];
        let step = Step {
            thread: th.id,
            process: th.process,
            time,
            clock: th.now(),
            segment,
            kind,
            event: e,
        };
        f(&step, self);
    }

    /// Opens a section of `oi` on thread `ti`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn take_ownership(
        &mut self,
        ti: usize,
        oi: u32,
        mode: Mode,
        via: Via,
        e: &Event,
        site: u64,
        attempt_ns: u64,
    ) -> Section {
        let shared = mode == Mode::Read;
        let o = &mut self.objs[oi as usize];
        if o.holders
            .iter()
            .any(|h| h.thread != ti as u32 && !(h.shared && shared))
        {
            self.anomalies.overlapping_holds += 1;
        }
        o.holders.push(Holder {
            thread: ti as u32,
            shared,
            since: o.last,
        });
        let th = &mut self.threads[ti];
        let s = Section {
            lock: o.id,
            mode,
            site,
            stack: e.stack,
            attempt_ns,
            begin_ns: e.time,
            begin_clock: th.now(),
            via,
            obj: oi,
        };
        th.held.push(s);
        s
    }

    /// Closes thread `ti`'s most recent section of `oi`; with the raw time
    /// its hold began and whether it was shared.
    #[inline(always)]
    fn release_hold(&mut self, ti: usize, oi: u32, t: u64) -> Option<(Section, u64, bool)> {
        let th = &mut self.threads[ti];
        let i = th.held.iter().rposition(|h| h.obj == oi)?;
        let s = take_at(&mut th.held, i);
        let o = &mut self.objs[oi as usize];
        o.touch(t);
        let mut info = (t, false);
        if let Some(j) = o.holders.iter().rposition(|x| x.thread == ti as u32) {
            let x = take_at(&mut o.holders, j);
            info = (x.since, x.shared);
        }
        Some((s, info.0, info.1))
    }

    fn on_acquire<'e>(
        &mut self,
        ti: usize,
        op: Op,
        e: &'e Event,
        seg: Segment,
        f: &mut impl FnMut(&Step<'e>, &Self),
    ) {
        let kind = lock_kind(e.op());
        let oi = self.obj(ti, kind, e.addr, e.time);
        let t = e.time;
        let ph = e.phase();
        self.objs[oi as usize].touch(t);
        let lock = self.objs[oi as usize].id;
        if ph == phase::BEGIN {
            let o = &mut self.objs[oi as usize];
            let ahead =
                o.holders.iter().filter(|h| h.thread != ti as u32).count() + o.waiters.len();
            o.waiters.push(ti as u32);
            let th = &mut self.threads[ti];
            th.pending = Pending::Acquire {
                obj: oi,
                at: th.now(),
                raw: t,
                ahead: ahead as u32,
            };
            self.emit(ti, e, seg, StepKind::AcquireBegin { lock }, f);
            return;
        }
        let now = self.threads[ti].now();
        let contended = e.flags & phase::CONTENDED != 0;
        let (matched, waited, wait_ns, attempt) = match self.threads[ti].pending {
            Pending::Acquire { obj, at, raw, .. } if obj == oi => {
                self.threads[ti].pending = Pending::None;
                let o = &mut self.objs[oi as usize];
                if let Some(i) = o.waiters.iter().position(|&w| w == ti as u32) {
                    o.waiters.swap_remove(i);
                }
                (true, true, now.saturating_sub(at), raw)
            }
            _ => {
                if contended {
                    self.anomalies.unmatched_completions += 1;
                }
                (false, contended, 0, t)
            }
        };
        if ph == phase::FAIL {
            let th = &mut self.threads[ti];
            if !th.failed.contains(&oi) {
                th.failed.push(oi);
            }
            let kind = StepKind::AcquireFailed {
                lock,
                matched,
                wait_ns,
                errno: e.arg,
                is_try: op.is_try(),
            };
            self.emit(ti, e, seg, kind, f);
            return;
        }
        let th = &mut self.threads[ti];
        let had_failed = match th.failed.iter().position(|&x| x == oi) {
            Some(i) => {
                th.failed.swap_remove(i);
                true
            }
            None => false,
        };
        let mode = match op {
            Op::RwRdlock | Op::RwTryRdlock | Op::RwTimedRdlock => Mode::Read,
            Op::RwWrlock | Op::RwTryWrlock | Op::RwTimedWrlock => Mode::Write,
            _ => Mode::Exclusive,
        };
        let via = if op.is_try() {
            Via::Trylock
        } else if matches!(
            op,
            Op::MutexTimedlock | Op::RwTimedRdlock | Op::RwTimedWrlock
        ) {
            Via::Timedlock
        } else {
            Via::Lock
        };
        let section = self.take_ownership(ti, oi, mode, via, e, e.site, attempt);
        let kind = StepKind::Acquired {
            section,
            waited,
            matched,
            wait_ns,
            first_attempt: !waited && !had_failed,
        };
        self.emit(ti, e, seg, kind, f);
    }

    fn on_release<'e>(
        &mut self,
        ti: usize,
        e: &'e Event,
        seg: Segment,
        is_end: bool,
        f: &mut impl FnMut(&Step<'e>, &Self),
    ) {
        if e.phase() == phase::END {
            let kind = match self.threads[ti].pending {
                Pending::Unlock { obj, at } if is_end => {
                    let now = self.threads[ti].now();
                    self.threads[ti].pending = Pending::None;
                    StepKind::ReleaseEnd {
                        lock: self.objs[obj as usize].id,
                        unlock_ns: now.saturating_sub(at),
                    }
                }
                _ => {
                    self.anomalies.unmatched_completions += 1;
                    StepKind::Unmatched { obj: None }
                }
            };
            self.emit(ti, e, seg, kind, f);
            return;
        }
        let kind = lock_kind(e.op());
        let oi = self.obj(ti, kind, e.addr, e.time);
        let released = self.release_hold(ti, oi, e.time);
        let th = &mut self.threads[ti];
        th.pending = Pending::Unlock {
            obj: oi,
            at: th.now(),
        };
        match released {
            Some((s, since, shared)) => {
                self.emit(ti, e, seg, StepKind::Released(s), f);
                // Rare: only when another thread still holds the lock
                // exclusively since before this section.
                if !shared
                    && self.objs[oi as usize]
                        .holders
                        .iter()
                        .any(|h| h.thread != ti as u32 && !h.shared && h.since < since)
                {
                    self.evict_stale_holders(oi, ti, since, e, f);
                }
            }
            None => {
                self.anomalies.unmatched_releases += 1;
                self.objs[oi as usize].touch(e.time);
                let lock = self.objs[oi as usize].id;
                self.emit(ti, e, seg, StepKind::UnmatchedRelease { lock }, f);
            }
        }
    }

    /// A whole exclusive critical section of `oi` by thread `ti` (its hold
    /// began at raw time `since`) has just ended while other threads are
    /// still recorded as holding it exclusively since before: impossible
    /// for a lock, so their releases were lost. Drop those holds (their
    /// length is unknown) and make the holders' current interval Unknown.
    /// Overlaps that end before such a proof (stamps taken at call entry,
    /// TSC skew) are left alone.
    #[inline(never)]
    fn evict_stale_holders<'e>(
        &mut self,
        oi: u32,
        ti: usize,
        since: u64,
        e: &'e Event,
        f: &mut impl FnMut(&Step<'e>, &Self),
    ) {
        let o = &mut self.objs[oi as usize];
        let mut stale: Vec<u32> = Vec::new();
        o.holders.retain(|h| {
            let old = h.thread != ti as u32 && !h.shared && h.since < since;
            if old {
                stale.push(h.thread);
            }
            !old
        });
        for a in stale {
            self.anomalies.lost_releases += 1;
            let th = &mut self.threads[a as usize];
            th.unknown_next = true;
            if let Some(i) = th.held.iter().position(|h| h.obj == oi) {
                let s = th.held.remove(i);
                let step = Step {
                    thread: th.id,
                    process: th.process,
                    time: e.time,
                    clock: th.now(),
                    segment: Segment::NONE,
                    kind: StepKind::HoldDropped(s),
                    event: e,
                };
                f(&step, self);
            }
        }
    }

    fn on_cond_wait(&mut self, ti: usize, e: &Event) -> StepKind {
        let ci = self.obj(ti, Kind::Cond, e.addr, e.time);
        let cond = self.objs[ci as usize].id;
        if e.phase() == phase::BEGIN {
            // The mutex (arg) is released for the duration of the wait.
            let mi = self.obj(ti, Kind::Mutex, e.arg, e.time);
            let released = self.release_hold(ti, mi, e.time).map(|r| r.0);
            if released.is_none() {
                self.anomalies.unmatched_releases += 1;
            }
            let th = &mut self.threads[ti];
            th.pending = Pending::Wait {
                what: BlockedOn::Cond,
                obj: ci,
                mutex: mi,
                site: e.site,
                at: th.now(),
            };
            return StepKind::CondWaitBegin {
                cond,
                mutex: self.objs[mi as usize].id,
                released,
            };
        }
        let Pending::Wait {
            what: BlockedOn::Cond,
            mutex,
            site,
            at,
            ..
        } = self.threads[ti].pending
        else {
            self.anomalies.unmatched_completions += 1;
            return StepKind::Unmatched {
                obj: Some((cond, Kind::Cond)),
            };
        };
        let now = self.threads[ti].now();
        self.threads[ti].pending = Pending::None;
        // DONE and FAIL (timeout) both return with the mutex of the BEGIN
        // re-acquired (on FAIL, `arg` is the errno): a new critical
        // section starts here, attributed to the wait's site.
        self.objs[mutex as usize].touch(e.time);
        let section =
            self.take_ownership(ti, mutex, Mode::Exclusive, Via::CondWait, e, site, e.time);
        StepKind::CondWaitEnd {
            cond,
            wait_ns: now.saturating_sub(at),
            timed_out: e.phase() == phase::FAIL && e.arg == ETIMEDOUT,
            section,
        }
    }

    /// Rounds of a barrier. A thread's k-th wait belongs to round k (every
    /// participant waits once per round), so the last arriver of round k
    /// is the k-th arrival with the latest time. All arrivals of a round
    /// precede its departures, so it is known at the first departure.
    /// The alternative, cutting rounds at the first departure after
    /// arrivals, breaks as soon as a fast thread arrives for round k+1
    /// before a slow one has left round k.
    fn on_barrier(&mut self, ti: usize, e: &Event) -> StepKind {
        let bi = self.obj(ti, Kind::Barrier, e.addr, e.time);
        let barrier = self.objs[bi as usize].id;
        let me = ti as u32;
        let begun = match self.threads[ti].pending {
            Pending::Wait {
                what: BlockedOn::Barrier,
                at,
                ..
            } => Some(at),
            _ => None,
        };
        let mut round = 0;
        if e.phase() == phase::BEGIN || begun.is_none() {
            // An arrival (a DONE without BEGIN arrived and left at once).
            let st = self.objs[bi as usize]
                .barrier
                .get_or_insert_with(Default::default);
            let r = st.threads.entry(me).or_insert((0, 0));
            let k = r.0;
            round = k;
            r.0 += 1;
            r.1 = e.time;
            let last = st.last.entry(k).or_insert((e.time, me));
            if e.time >= last.0 {
                *last = (e.time, me);
            }
            // Forget rounds every participant has moved past.
            if st.last.len() > 64 {
                let min = st.threads.values().map(|v| v.0).min().unwrap_or(0);
                st.last.retain(|&k, _| k + 1 >= min);
            }
        }
        if e.phase() == phase::BEGIN {
            let th = &mut self.threads[ti];
            th.pending = Pending::Wait {
                what: BlockedOn::Barrier,
                obj: bi,
                mutex: u32::MAX,
                site: e.site,
                at: th.now(),
            };
            return StepKind::BarrierArrive { barrier, round };
        }
        let now = self.threads[ti].now();
        let wait = begun.map_or(0, |at| now.saturating_sub(at));
        self.threads[ti].pending = Pending::None;
        let st = self.objs[bi as usize]
            .barrier
            .get_or_insert_with(Default::default);
        let k = st.threads.get(&me).map_or(0, |v| v.0.saturating_sub(1));
        let last = st.last.get(&k).map_or(u32::MAX, |v| v.1);
        StepKind::BarrierDepart {
            barrier,
            round: k,
            last_arriver: if last == u32::MAX {
                u32::MAX
            } else {
                self.threads[last as usize].id
            },
            wait_ns: wait,
            arrived_now: begun.is_none(),
        }
    }

    fn on_sem(&mut self, ti: usize, op: Op, e: &Event) -> StepKind {
        let si = self.obj(ti, Kind::Semaphore, e.addr, e.time);
        let sem = self.objs[si as usize].id;
        let ph = e.phase();
        if ph == phase::BEGIN {
            let th = &mut self.threads[ti];
            th.pending = Pending::Wait {
                what: BlockedOn::Sem,
                obj: si,
                mutex: u32::MAX,
                site: e.site,
                at: th.now(),
            };
            return StepKind::SemWaitBegin { sem };
        }
        let now = self.threads[ti].now();
        let (waited, wait_ns) = match self.threads[ti].pending {
            Pending::Wait {
                what: BlockedOn::Sem,
                at,
                ..
            } => {
                self.threads[ti].pending = Pending::None;
                (true, now.saturating_sub(at))
            }
            _ => (false, 0),
        };
        StepKind::SemWaitEnd {
            sem,
            waited,
            wait_ns,
            failed: (ph == phase::FAIL).then_some(e.arg),
            is_try: op == Op::SemTrywait,
        }
    }

    fn on_futex_wait(&mut self, ti: usize, e: &Event) -> StepKind {
        let fi = self.obj(ti, Kind::Futex, e.addr, e.time);
        let futex = self.objs[fi as usize].id;
        if e.phase() == phase::BEGIN {
            let o = &mut self.objs[fi as usize];
            o.touch(e.time);
            let ahead = o.waiters.len() as u32;
            o.waiters.push(ti as u32);
            let th = &mut self.threads[ti];
            th.pending = Pending::Acquire {
                obj: fi,
                at: th.now(),
                raw: e.time,
                ahead,
            };
            return StepKind::FutexWaitBegin { futex };
        }
        let now = self.threads[ti].now();
        let Pending::Acquire { at, .. } = self.threads[ti].pending else {
            self.anomalies.unmatched_completions += 1;
            return StepKind::Unmatched {
                obj: Some((futex, Kind::Futex)),
            };
        };
        self.threads[ti].pending = Pending::None;
        let o = &mut self.objs[fi as usize];
        o.touch(e.time);
        if let Some(i) = o.waiters.iter().position(|&w| w == ti as u32) {
            o.waiters.swap_remove(i);
        }
        StepKind::FutexWaitEnd {
            futex,
            wait_ns: now.saturating_sub(at),
            failed: (e.phase() == phase::FAIL).then_some(e.arg),
        }
    }

    /// Closes every thread at its end (`default_end` for threads with no
    /// known end) and every section still open: per thread, in the order
    /// threads were declared, an [`StepKind::End`] step, then
    /// [`StepKind::HeldAtExit`] for each open section (innermost first),
    /// then [`StepKind::StillWaiting`] if it was blocked in a call, then
    /// [`StepKind::Abandoned`] if it was queued on a lock.
    pub fn finish<'e>(&mut self, default_end: u64, f: &mut impl FnMut(&Step<'e>, &Self)) {
        for ti in 0..self.threads.len() {
            let th = &mut self.threads[ti];
            if th.end <= th.start {
                th.end = default_end;
            }
            let end = th.end.max(th.last_t);
            th.end = end;
            let ev: &'e Event = &NO_EVENT;
            // The last interval, up to the thread's end, in the state the
            // thread was left in (still waiting: blocked; holding: hold).
            let waiting = matches!(th.pending, Pending::Acquire { .. } | Pending::Wait { .. });
            let seg = self.account(ti, end, 0, waiting, false);
            self.emit_at(ti, end, ev, seg, StepKind::End, f);
            let held: Vec<Section> = self.threads[ti].held.clone();
            for s in held.iter().rev() {
                self.anomalies.held_at_exit += 1;
                if let Some((s, _, _)) = self.release_hold(ti, s.obj, end) {
                    self.emit_at(ti, end, ev, Segment::NONE, StepKind::HeldAtExit(s), f);
                }
            }
            let still = match self.threads[ti].pending {
                Pending::Acquire { obj, at, .. } => {
                    let o = &self.objs[obj as usize];
                    Some((BlockedOn::Lock, Some((o.id, o.kind)), at))
                }
                Pending::Wait { what, obj, at, .. } => {
                    let o = (obj != u32::MAX).then(|| {
                        let o = &self.objs[obj as usize];
                        (o.id, o.kind)
                    });
                    Some((what, o, at))
                }
                _ => None,
            };
            if let Some((on, obj, at)) = still {
                let th = &self.threads[ti];
                let (since_ns, site, stack, arg) = th.began;
                let kind = StepKind::StillWaiting {
                    on,
                    obj,
                    arg,
                    since_ns,
                    wait_ns: th.now().saturating_sub(at),
                    site,
                    stack,
                };
                self.emit_at(ti, end, ev, Segment::NONE, kind, f);
            }
            if let Pending::Acquire { obj, .. } = self.threads[ti].pending {
                let o = &mut self.objs[obj as usize];
                o.touch(end);
                if let Some(i) = o.waiters.iter().position(|&w| w == ti as u32) {
                    o.waiters.swap_remove(i);
                }
                let queued = Some((o.id, o.kind));
                self.emit_at(
                    ti,
                    end,
                    ev,
                    Segment::NONE,
                    StepKind::Abandoned { queued },
                    f,
                );
            }
            self.threads[ti].pending = Pending::None;
        }
    }
}

/// Streams the steps of a trace file in time order: `f(step, interp)` is
/// called for every step, the thread ends included; returns the
/// interpreter (its anomalies). Memory is bounded (one decoded chunk per
/// thread plus a few batches in flight).
pub fn for_each_step(
    path: &Path,
    meta: &Meta,
    correct: bool,
    f: impl FnMut(&Step<'_>, &SyncInterp),
) -> Result<SyncInterp, AnalysisError> {
    for_each_step_progress(path, meta, correct, &mut |_, _| {}, f)
}

/// [`for_each_step`] with `progress(events done, total)` now and then.
pub fn for_each_step_progress(
    path: &Path,
    meta: &Meta,
    correct: bool,
    progress: &mut dyn FnMut(u64, u64),
    mut f: impl FnMut(&Step<'_>, &SyncInterp),
) -> Result<SyncInterp, AnalysisError> {
    let mut overhead: Vec<_> = meta.overhead.values().cloned().collect();
    overhead.sort_by_key(|o| o.process);
    let mut si = SyncInterp::new(correct, &overhead);
    si.set_semaphore_locks(meta.semaphore_locks.iter().copied());
    let mut threads: Vec<_> = meta.threads.values().collect();
    threads.sort_by_key(|t| t.id);
    for t in &threads {
        si.add_thread(t.id, t.process, t.start_ns);
    }
    for l in &meta.locks {
        si.add_lock_info(l.process, l.addr, l.first_op, l.first_ns);
    }
    // Two stages on two threads: reading, decoding and merging the
    // chunks on one, the interpreter and its consumer on the other (each
    // is about half of the work). Batches of events go through a bounded
    // channel and come back empty for reuse, so memory stays bounded.
    // Up to 8 batches of 16 Ki events (7 MiB) in flight: enough to ride
    // out a few ms of one stage not being scheduled on a busy machine.
    // Events are copied into the batches: sharing the decoded chunks
    // (Arc) instead cost more, as the reference counts bounced between
    // the two cores on every short run.
    type Batch = Vec<(u32, Event)>;
    const BATCH: usize = 16384;
    let mut last = 0u64;
    std::thread::scope(|s| -> Result<(), AnalysisError> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Batch, AnalysisError>>(8);
        let (back_tx, back_rx) = std::sync::mpsc::channel::<Batch>();
        s.spawn(move || {
            let run = || -> Result<(), AnalysisError> {
                let mut merge = Merge::new(path, &meta.index)?;
                let mut batch: Batch = Vec::with_capacity(BATCH + 64);
                let mut gone = false;
                merge.run_runs(
                    |thread, buf, a, b| {
                        batch.extend(buf[a..b].iter().map(|e| (thread, *e)));
                        if batch.len() >= BATCH && !gone {
                            let next = back_rx
                                .try_recv()
                                .unwrap_or_else(|_| Vec::with_capacity(BATCH + 64));
                            gone = tx.send(Ok(std::mem::replace(&mut batch, next))).is_err();
                        } else if gone {
                            batch.clear();
                        }
                    },
                    &mut |_, _| {},
                )?;
                let _ = tx.send(Ok(batch));
                Ok(())
            };
            if let Err(e) = run() {
                let _ = tx.send(Err(e));
            }
        });
        let total = meta.events;
        let mut done = 0u64;
        let mut next_progress = 0u64;
        for batch in rx {
            let mut b = batch?;
            for (thread, e) in &b {
                last = last.max(e.time);
                si.event(*thread, e, &mut f);
            }
            done += b.len() as u64;
            if done >= next_progress {
                progress(done, total);
                next_progress = done + (1 << 22);
            }
            b.clear();
            let _ = back_tx.send(b);
        }
        progress(total, total);
        Ok(())
    })?;
    let trace_end = meta
        .footer
        .as_ref()
        .map_or(last, |f| f.duration_ns.max(last));
    for t in &threads {
        let end = meta
            .thread_ends
            .get(&t.id)
            .copied()
            .or_else(|| meta.process_ends.get(&t.process).map(|p| p.end_ns))
            .unwrap_or(trace_end);
        si.set_thread_end(t.id, end);
    }
    si.finish(trace_end, &mut f);
    Ok(si)
}

/// The steps of an in-memory trace, in the same order as
/// [`for_each_step`] gives them, through `f`; returns the interpreter.
pub fn for_each_trace_step<'t>(
    t: &'t Trace,
    correct: bool,
    mut f: impl FnMut(&Step<'t>, &SyncInterp),
) -> SyncInterp {
    let mut overhead = Vec::new();
    let mut threads = Vec::new();
    let mut ends: HashMap<u32, u64> = HashMap::new();
    let mut process_ends: HashMap<u32, u64> = HashMap::new();
    let mut locks = Vec::new();
    for r in &t.records {
        match r {
            Record::Overhead(o) => overhead.push(o.clone()),
            Record::Thread(th) => threads.push(th),
            Record::ThreadEnd(e) => {
                ends.insert(e.thread, e.end_ns);
            }
            Record::ProcessEnd(p) => {
                process_ends.insert(p.process, p.end_ns);
            }
            Record::Lock(l) => locks.push(l),
            _ => {}
        }
    }
    overhead.sort_by_key(|o| o.process);
    threads.sort_by_key(|t| t.id);
    let mut si = SyncInterp::new(correct, &overhead);
    si.set_semaphore_locks(semaphore_locks_of_trace(t));
    for th in &threads {
        si.add_thread(th.id, th.process, th.start_ns);
    }
    for l in locks {
        si.add_lock_info(l.process, l.addr, l.first_op, l.first_ns);
    }
    let mut last = 0u64;
    trace_order(t, |id, e| {
        last = last.max(e.time);
        si.event(id, e, &mut f);
    });
    let trace_end = t.footer.as_ref().map_or(last, |f| f.duration_ns.max(last));
    for th in &threads {
        let end = ends
            .get(&th.id)
            .copied()
            .or_else(|| process_ends.get(&th.process).copied())
            .unwrap_or(trace_end);
        si.set_thread_end(th.id, end);
    }
    si.finish(trace_end, &mut f);
    si
}

/// Every step of an in-memory trace, in time order. Synthetic steps
/// ([`StepKind::is_synthetic`]) point to a zeroed event, except
/// [`StepKind::HoldDropped`] and [`StepKind::Abandoned`], which point to
/// the event that proved them.
pub fn trace_steps(t: &Trace, correct: bool) -> Vec<Step<'_>> {
    let mut v = Vec::new();
    for_each_trace_step(t, correct, |s, _| v.push(*s));
    v
}

/// An in-memory trace's events in the file merge's order: earliest
/// (time, thread) head first, each thread's events in file order.
fn trace_order<'t>(t: &'t Trace, mut f: impl FnMut(u32, &'t Event)) {
    let streams: Vec<(u32, &'t [Event])> = t.events.iter().map(|(&k, v)| (k, &v[..])).collect();
    let mut pos = vec![0usize; streams.len()];
    loop {
        let mut best: Option<(u64, u32, usize)> = None;
        for (k, (id, evs)) in streams.iter().enumerate() {
            if let Some(e) = evs.get(pos[k]) {
                if best.is_none_or(|b| (e.time, *id) < (b.0, b.1)) {
                    best = Some((e.time, *id, k));
                }
            }
        }
        let Some((_, id, k)) = best else { break };
        let e = &streams[k].1[pos[k]];
        pos[k] += 1;
        f(id, e);
    }
}

/// The semaphores of an in-memory trace used as locks ([`SemLockFinder`]).
pub fn semaphore_locks_of_trace(t: &Trace) -> Vec<ObjId> {
    let process: HashMap<u32, u32> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Thread(th) => Some((th.id, th.process)),
            _ => None,
        })
        .collect();
    let mut finder = SemLockFinder::default();
    trace_order(t, |id, e| {
        finder.event(process.get(&id).copied().unwrap_or(0), id, e)
    });
    finder.finish()
}

/// Decides which semaphores are used as locks, from the whole trace in
/// time order, before the interpretation (which needs the answer at a
/// semaphore's first wait, when its later use is not known yet).
///
/// A semaphore is a lock when, starting with its count at 1, every
/// successful wait finds it free and takes it, and every post comes from
/// the thread that took it last: its count stays in {0, 1} and it is
/// released by its holder. Failed trywaits, timed-out waits and the
/// BEGIN of a blocking wait change nothing. A post that finds it free
/// (a signal: producer-consumer, a completion, a count above 1), from
/// another thread (a hand-off) or a wait that finds it taken (a count
/// above 1) breaks the pattern; more than 1 % of breaks per acquisition
/// make it a semaphore for the whole trace (reporting the same object as
/// a lock in one part of the trace and a semaphore in another would
/// split its numbers). A signalling semaphore breaks it at nearly every
/// post; a lock only where two threads' stamps crossed (a recording
/// under heavy load: one such break in 12,801 acquisitions made a sem_t
/// mutex a semaphore when any break did) or a post was lost. The
/// initial count is not recorded: a counting semaphore whose users
/// never overlapped is indistinguishable from a lock, and is one in
/// effect.
#[derive(Debug, Default)]
pub struct SemLockFinder {
    sems: FastMap<ObjId, SemUse>,
}

#[derive(Clone, Copy, Debug, Default)]
struct SemUse {
    /// Thread that took it last, while taken.
    holder: Option<u32>,
    acquisitions: u64,
    breaks: u64,
}

impl SemLockFinder {
    /// Feeds one event of trace thread `thread` of process `process`, in
    /// global time order (as [`crate::input::Merge`] delivers them).
    #[inline]
    pub fn event(&mut self, process: u32, thread: u32, e: &Event) {
        let acquire = match Op::from_u8(e.op) {
            Some(Op::SemWait | Op::SemTimedwait | Op::SemTrywait) => true,
            Some(Op::SemPost) => false,
            _ => return,
        };
        let u = self
            .sems
            .entry(ObjId {
                process,
                addr: e.addr,
            })
            .or_default();
        if e.phase() != phase::DONE {
            return;
        }
        match (acquire, u.holder) {
            (true, None) => {
                u.holder = Some(thread);
                u.acquisitions += 1;
            }
            (false, Some(h)) if h == thread => u.holder = None,
            // A break: count it and follow what happened.
            (true, Some(_)) => {
                u.breaks += 1;
                u.holder = Some(thread);
                u.acquisitions += 1;
            }
            (false, _) => {
                u.breaks += 1;
                u.holder = None;
            }
        }
    }

    /// The semaphores used as locks (sorted).
    pub fn finish(self) -> Vec<ObjId> {
        let mut v: Vec<ObjId> = self
            .sems
            .into_iter()
            .filter(|(_, u)| u.acquisitions > 0 && u.breaks * 100 <= u.acquisitions)
            .map(|(id, _)| id)
            .collect();
        v.sort_unstable();
        v
    }
}

/// The kind of the lock a lock step (acquisition, release) of an event
/// with op `recorded` is about: a semaphore op in a lock step is a
/// semaphore-lock's (the interpreter only makes lock steps of a
/// semaphore's events when it is one).
#[inline(always)]
pub fn lock_kind(recorded: Option<Op>) -> Kind {
    match recorded.and_then(Kind::of) {
        Some(Kind::Semaphore) => Kind::SemLock,
        Some(k) => k,
        None => Kind::Mutex,
    }
}

/// `v.remove(i)`, without the call when `i` is the last element (the
/// usual case: the innermost hold is released first; `Vec::remove` is
/// not inlined and was 3 % of the report's instructions).
#[inline(always)]
pub fn take_at<T>(v: &mut Vec<T>, i: usize) -> T {
    if i + 1 == v.len() {
        v.pop().expect("i is in bounds")
    } else {
        v.remove(i)
    }
}
