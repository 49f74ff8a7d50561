//! The timing model: replays every thread's synchronization events in
//! global time order and accumulates per-lock, per-site, per-call-path,
//! per-thread and blame figures.
//!
//! # Per-thread state machine
//! Each thread is, between two of its events, in exactly one state:
//! waiting for a lock (an acquisition BEGIN not yet completed, or a raw
//! futex wait), inside an unlock (a release DONE followed by its END),
//! holding at least one lock, or free; a condition, barrier, semaphore or
//! join wait is *free* (or *hold* if another lock is still held) and is
//! also counted apart. An interval is classified when the event that ends
//! it arrives, from the state before that event. Intervals that cannot be
//! trusted (clock stepped back, events lost, protocol broken) are
//! *unknown* and counted. The five categories therefore sum to the
//! thread's lifetime exactly, by construction.
//!
//! # Overhead correction (PinCS §2.2)
//! Each interval is shortened by the recorder's cost of the event that
//! ends it (clamped at the interval's length): `acquire_ns` for an
//! uncontended lock call, `release_ns` for a release, `event_ns` for
//! anything else; a contended wait is shortened by `(k + 2) * O` where `k`
//! is the number of threads holding or queued on the lock when the wait
//! began and `O` is the mean of `acquire_ns` and `release_ns`. Every
//! duration (waits, holds, breakdown, lifetime) is measured on this
//! corrected per-thread clock, so they stay consistent with each other.
//!
//! # Cross-thread state
//! Per lock, the current holders and waiters. Whenever either set changes,
//! the time since the last change is charged: to the lock's held time,
//! to its waiter integral (for the average number of waiters), and, for
//! each waiter, to the critical section (thread, site, call path) of each
//! holder (split evenly among shared holders). Time a waiter waits while
//! nobody holds the lock is charged to "no holder" (hand-off latency).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use lockscope_format::{phase, Event, Op, Overhead};

use crate::hist::Histogram;

/// A small multiplicative hasher: keys here are integers, and SipHash
/// costs more than the rest of the per-event work.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// HashMap with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// Time categories of the per-thread breakdown (HaLock Fig. 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cat {
    /// Not in a lock call and not holding a lock.
    Free = 0,
    /// Waiting in a lock acquisition (attempt to acquired or failed).
    Lock = 1,
    /// Inside an unlock that entered the kernel (DONE to END).
    Unlock = 2,
    /// Holding at least one lock, not waiting, not unlocking.
    Hold = 3,
    /// Cannot be classified (clock trouble, lost events, broken protocol).
    Unknown = 4,
}

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
        }
    }
    fn of(op: Op) -> Option<Kind> {
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
    /// pthread object's first field).
    fn class(self) -> u8 {
        match self {
            Kind::Mutex | Kind::Rwlock | Kind::Spin => 0,
            Kind::Futex => 1,
            Kind::Cond => 2,
            Kind::Barrier => 3,
            Kind::Semaphore => 4,
        }
    }
}

/// Timed-call errno for a timeout.
const ETIMEDOUT: u64 = 110;

/// Who a wait is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Culprit {
    /// Thread index of the holder, or `u32::MAX` for "no holder".
    pub thread: u32,
    /// Site index of the holder's acquisition (or waker's call).
    pub site: u32,
    /// Call path id of the holder's acquisition, 0 if none.
    pub stack: u32,
}

impl Culprit {
    /// The "nobody held the lock" culprit (hand-off or wake-up latency).
    pub const NONE: Culprit = Culprit {
        thread: u32::MAX,
        site: u32::MAX,
        stack: 0,
    };
}

/// Per (lock, thread) counters.
#[derive(Clone, Debug, Default)]
pub struct LockThread {
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Of which had to wait.
    pub contended: u64,
    /// Trylock calls that failed.
    pub trylock_failures: u64,
    /// Timed calls that timed out.
    pub timeouts: u64,
    /// Wait time, ns.
    pub wait_ns: u64,
    /// Longest wait, ns.
    pub max_wait_ns: u64,
    /// Hold time, ns.
    pub hold_ns: u64,
}

/// Per (lock, site) or (lock, call path) counters.
#[derive(Clone, Debug, Default)]
pub struct SiteStats {
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Of which had to wait.
    pub contended: u64,
    /// Trylock failures.
    pub trylock_failures: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// Wait time, ns.
    pub wait_ns: u64,
    /// Longest wait, ns.
    pub max_wait_ns: u64,
    /// Hold time of sections entered here, ns.
    pub hold_ns: u64,
}

#[derive(Clone, Debug)]
struct Holder {
    thread: u32,
    culprit: Culprit,
    shared: bool,
    /// Raw time of the acquisition.
    since: u64,
}

#[derive(Clone, Debug)]
struct Waiter {
    thread: u32,
    /// Raw time the wait began.
    since: u64,
    charges: Vec<(Culprit, u64)>,
}

/// One synchronization object and everything measured about it.
#[derive(Clone, Debug)]
pub struct Obj {
    /// Process trace id.
    pub process: u32,
    /// Address.
    pub addr: u64,
    /// Kind (from the first op seen on it).
    pub kind: Kind,
    /// Site index of the first use.
    pub first_site: u32,
    /// Time of first use (raw trace ns).
    pub first_ns: u64,
    /// Successful acquisitions (lock, trylock and timed calls). For futex
    /// words: completed waits. For semaphores: successful waits.
    pub acquisitions: u64,
    /// Acquisitions that had to wait.
    pub contended: u64,
    /// Of the acquisitions, shared ones (reader-writer locks: read locks).
    pub shared_acquisitions: u64,
    /// Acquisitions that succeeded at the first attempt (no wait, no
    /// failed try/timed call on this lock by this thread since its last
    /// acquisition of it).
    pub first_attempt: u64,
    /// Failed trylock (or sem_trywait) calls.
    pub trylock_failures: u64,
    /// Timed calls that timed out (lock, cond, sem).
    pub timeouts: u64,
    /// Other failed calls (errno other than busy / timed out).
    pub errors: u64,
    /// Acquisitions by a thread other than the previous acquirer.
    pub owner_changes: u64,
    /// Wait per attempt that completed (acquired or failed), ns.
    pub wait: Histogram,
    /// Hold per critical section, ns.
    pub hold: Histogram,
    /// Time with at least one holder (raw ns).
    pub held_ns: u64,
    /// Integral of the number of waiters over held time (raw ns x waiters).
    pub waiter_ns: u128,
    /// Releases that entered the kernel (had an END).
    pub slow_unlocks: u64,
    /// Time inside unlock, ns.
    pub unlock_ns: u64,
    /// Condition variables: signals; semaphores: posts; futex: wakes.
    pub signals: u64,
    /// Condition variables: broadcasts.
    pub broadcasts: u64,
    /// Barriers: completed rounds.
    pub rounds: u64,
    /// Per thread: thread index -> index in [`Model::lock_threads`].
    pub per_thread: FastMap<u32, u32>,
    holders: Vec<Holder>,
    waiters: Vec<Waiter>,
    last_settle: u64,
    last_owner: u32,
    /// Futex: last wake (culprit, time).
    last_wake: Option<(Culprit, u64)>,
    barrier: Option<Box<BarrierState>>,
}

/// Rounds of a barrier. A thread's k-th wait belongs to round k (every
/// participant waits once per round), so the last arriver of round k is
/// the k-th arrival with the latest time. All arrivals of a round precede
/// its departures, so it is known when the first departure is replayed.
/// The alternative, cutting rounds at the first departure after arrivals,
/// breaks as soon as a fast thread arrives for round k+1 before a slow
/// one has left round k.
#[derive(Clone, Debug, Default)]
struct BarrierState {
    /// Per thread: (rounds it arrived at, arrival time of the open one).
    threads: FastMap<u32, (u64, u64)>,
    /// Round -> (latest arrival time, thread).
    last: FastMap<u64, (u64, u32)>,
}

impl Obj {
    fn new(process: u32, addr: u64, kind: Kind, first_site: u32, first_ns: u64) -> Self {
        Obj {
            process,
            addr,
            kind,
            first_site,
            first_ns,
            acquisitions: 0,
            contended: 0,
            shared_acquisitions: 0,
            first_attempt: 0,
            trylock_failures: 0,
            timeouts: 0,
            errors: 0,
            owner_changes: 0,
            wait: Histogram::new(),
            hold: Histogram::new(),
            held_ns: 0,
            waiter_ns: 0,
            slow_unlocks: 0,
            unlock_ns: 0,
            signals: 0,
            broadcasts: 0,
            rounds: 0,
            per_thread: FastMap::default(),
            holders: Vec::new(),
            waiters: Vec::new(),
            last_settle: first_ns,
            last_owner: u32::MAX,
            last_wake: None,
            barrier: None,
        }
    }

    /// Average number of waiters while the lock was held.
    pub fn avg_waiters(&self) -> f64 {
        if self.held_ns == 0 {
            0.0
        } else {
            self.waiter_ns as f64 / self.held_ns as f64
        }
    }

    /// Charges the time since the last change to holders and waiters.
    fn settle(&mut self, t: u64) {
        if t <= self.last_settle {
            return;
        }
        let dt = t - self.last_settle;
        self.last_settle = t;
        if !self.holders.is_empty() {
            self.held_ns += dt;
            self.waiter_ns += u128::from(dt) * self.waiters.len() as u128;
        }
        if self.waiters.is_empty() {
            return;
        }
        let n = self.holders.len() as u64;
        for w in &mut self.waiters {
            if n == 0 {
                add_charge(&mut w.charges, Culprit::NONE, dt);
                continue;
            }
            let share = dt / n;
            for (k, h) in self.holders.iter().enumerate() {
                let extra = if k == 0 { dt - share * n } else { 0 };
                add_charge(&mut w.charges, h.culprit, share + extra);
            }
        }
    }

    fn take_waiter(&mut self, thread: u32) -> Option<Waiter> {
        let i = self.waiters.iter().position(|w| w.thread == thread)?;
        Some(self.waiters.swap_remove(i))
    }
}

fn add_charge(v: &mut Vec<(Culprit, u64)>, c: Culprit, dt: u64) {
    if dt == 0 {
        return;
    }
    match v.iter_mut().find(|(k, _)| *k == c) {
        Some(e) => e.1 += dt,
        None => v.push((c, dt)),
    }
}

#[derive(Clone, Copy, Debug)]
struct Held {
    obj: u32,
    /// Indexes of the (object, site) and (object, thread) statistics.
    ss: u32,
    lt: u32,
    stack: u32,
    /// Corrected clock at acquisition.
    at: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blocked {
    Cond,
    Barrier,
    Sem,
    Join,
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
        /// Threads holding or queued when the wait began (PinCS w).
        ahead: u32,
    },
    /// A release DONE that may be followed by its END.
    Unlock { obj: u32, at: u64 },
    /// Condition, barrier, semaphore or join wait.
    Wait {
        what: Blocked,
        obj: u32,
        /// The mutex released by a condition wait.
        mutex: u32,
        site: u32,
        at: u64,
    },
}

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

/// Per-thread result.
#[derive(Clone, Debug, Default)]
pub struct ThreadModel {
    /// Trace id.
    pub id: u32,
    /// Process trace id.
    pub process: u32,
    /// OS tid.
    pub tid: u32,
    /// Last name.
    pub name: String,
    /// Start, raw ns.
    pub start: u64,
    /// End, raw ns.
    pub end: u64,
    /// Breakdown by [`Cat`], corrected ns.
    pub cats: [u64; 5],
    /// Blocked in cond / barrier / sem / join waits (part of Free or Hold).
    pub blocked: [u64; 4],
    /// Recorder overhead subtracted from this thread, ns.
    pub overhead_ns: u64,
    /// Events of this thread.
    pub events: u64,
    /// Events lost on this thread: the larger of its Loss records and its
    /// in-stream Lost annotations (both may count the same drops).
    pub lost: u64,
    lost_annotated: u64,
    lost_recorded: u64,
    last_t: u64,
    corr: u64,
    started: bool,
    unknown_next: bool,
    held: Vec<Held>,
    pending: Pending,
    failed: Vec<u32>,
    cost: Cost,
    cache: Vec<Resolved>,
}

/// Entries of the per-thread lookup cache (a power of two), used as
/// 2-way sets. 256 entries of 40 bytes (10 KiB per thread): a thread
/// using 16 locks from 2 sites each missed 32 % of its lookups with a
/// 64-entry direct-mapped cache (collisions), ~0 % with this one.
const CACHE: usize = 256;

/// A per-thread cache entry: (object class, address, call site) ->
/// indexes. A thread touches few locks from few sites at a time, so most
/// events skip the four hash lookups (object, site, site statistics,
/// thread statistics) that dominated the per-event cost.
#[derive(Clone, Copy, Debug, Default)]
struct Resolved {
    addr: u64,
    pc: u64,
    class: u8,
    valid: bool,
    obj: u32,
    site: u32,
    ss: u32,
    lt: u32,
}

impl ThreadModel {
    /// Corrected lifetime, ns (= sum of `cats`).
    pub fn lifetime(&self) -> u64 {
        self.cats.iter().sum()
    }
    fn now(&self) -> u64 {
        self.last_t - self.corr
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

/// Configuration of the model.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Subtract the recorder's measured overhead (PinCS §2.2).
    pub correct_overhead: bool,
}

/// The model being built, then the result.
pub struct Model {
    cfg: ModelConfig,
    /// Threads, indexed densely.
    pub threads: Vec<ThreadModel>,
    thread_index: FastMap<u32, u32>,
    thread_lookup: Vec<u32>,
    /// Objects, indexed densely.
    pub objs: Vec<Obj>,
    obj_index: FastMap<(u32, u8, u64), u32>,
    /// Sites: (process, pc), indexed densely.
    pub sites: Vec<(u32, u64)>,
    site_index: FastMap<(u32, u64), u32>,
    /// Per (object, site): index in [`Model::site_stats`].
    pub by_site: FastMap<(u32, u32), u32>,
    /// Site statistics, indexed from [`Model::by_site`].
    pub site_stats: Vec<SiteStats>,
    /// Per (object, thread) statistics, indexed from [`Obj::per_thread`].
    pub lock_threads: Vec<LockThread>,
    /// Per (object, call path id); path 0 = none recorded.
    pub by_path: FastMap<(u32, u32), SiteStats>,
    /// Blame: (object, waiter thread, waiter site, culprit) -> (ns, waits).
    pub blame: FastMap<(u32, u32, u32, Culprit), (u64, u64)>,
    /// Barrier / cond / sem / futex waits per (object, thread): (waits, ns).
    pub obj_waits: FastMap<(u32, u32), (u64, u64)>,
    /// Barrier blame: (barrier object, last-arriver thread) -> ns.
    pub barrier_blame: FastMap<(u32, u32), u64>,
    /// Protocol anomalies.
    pub anomalies: Anomalies,
    costs: FastMap<u32, Cost>,
    /// Recorder overhead per process as recorded.
    pub overhead: Vec<Overhead>,
}

impl Model {
    /// An empty model with the recorder's measured costs per process;
    /// threads are declared with [`Model::add_thread`] before events.
    pub fn new(cfg: ModelConfig, overhead: Vec<Overhead>) -> Self {
        let mut costs = FastMap::default();
        for o in &overhead {
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
        Model {
            cfg,
            threads: Vec::new(),
            thread_index: FastMap::default(),
            thread_lookup: Vec::new(),
            objs: Vec::new(),
            obj_index: FastMap::default(),
            sites: Vec::new(),
            site_index: FastMap::default(),
            by_site: FastMap::default(),
            site_stats: Vec::new(),
            lock_threads: Vec::new(),
            by_path: FastMap::default(),
            blame: FastMap::default(),
            obj_waits: FastMap::default(),
            barrier_blame: FastMap::default(),
            anomalies: Anomalies::default(),
            costs,
            overhead,
        }
    }

    /// Declares a thread (from its thread record).
    pub fn add_thread(&mut self, id: u32, process: u32, tid: u32, name: String, start: u64) {
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
        self.threads.push(ThreadModel {
            id,
            process,
            tid,
            name,
            start,
            end: start,
            last_t: start,
            pending: Pending::None,
            cost,
            cache: vec![Resolved::default(); CACHE],
            ..ThreadModel::default()
        });
    }

    /// Index of a thread, creating a placeholder for an undeclared one.
    fn thread_idx(&mut self, id: u32, t: u64) -> u32 {
        if let Some(&i) = self.thread_lookup.get(id as usize) {
            if i != u32::MAX {
                return i;
            }
        }
        if let Some(&i) = self.thread_index.get(&id) {
            return i;
        }
        self.anomalies.orphan_events += 1;
        self.add_thread(id, 0, 0, format!("thread#{id}"), t);
        self.threads.len() as u32 - 1
    }

    fn site(&mut self, process: u32, pc: u64) -> u32 {
        let n = self.sites.len() as u32;
        *self.site_index.entry((process, pc)).or_insert_with(|| {
            self.sites.push((process, pc));
            n
        })
    }

    fn obj(&mut self, process: u32, kind: Kind, addr: u64, site: u32, t: u64) -> u32 {
        let n = self.objs.len() as u32;
        let key = (process, kind.class(), addr);
        if let Some(&i) = self.obj_index.get(&key) {
            return i;
        }
        self.obj_index.insert(key, n);
        self.objs.push(Obj::new(process, addr, kind, site, t));
        n
    }

    /// (object, site, site statistics, thread statistics) of an event.
    fn resolve(
        &mut self,
        ti: usize,
        process: u32,
        kind: Kind,
        addr: u64,
        pc: u64,
        t: u64,
    ) -> Resolved {
        let class = kind.class();
        let set = ((addr ^ pc.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 57) as usize
            & (CACHE - 1)
            & !1;
        let cache = &self.threads[ti].cache;
        for slot in [set, set | 1] {
            let c = cache[slot];
            if c.valid && c.addr == addr && c.pc == pc && c.class == class {
                return c;
            }
        }
        // Replace an empty way, else the second way (the first keeps the
        // older entry: a cheap approximation of LRU for 2 ways).
        let slot = if !cache[set].valid { set } else { set | 1 };
        let site = self.site(process, pc);
        let obj = self.obj(process, kind, addr, site, t);
        let n = self.site_stats.len() as u32;
        let ss = *self.by_site.entry((obj, site)).or_insert(n);
        if ss == n {
            self.site_stats.push(SiteStats::default());
        }
        let lt = self.lt(obj, ti as u32);
        let r = Resolved {
            addr,
            pc,
            class,
            valid: true,
            obj,
            site,
            ss,
            lt,
        };
        self.threads[ti].cache[slot] = r;
        r
    }

    /// Index of the (object, thread) statistics.
    fn lt(&mut self, obj: u32, ti: u32) -> u32 {
        let n = self.lock_threads.len() as u32;
        let lt = *self.objs[obj as usize].per_thread.entry(ti).or_insert(n);
        if lt == n {
            self.lock_threads.push(LockThread::default());
        }
        lt
    }

    /// Index of the (object, site) statistics.
    fn ss(&mut self, obj: u32, site: u32) -> u32 {
        let n = self.site_stats.len() as u32;
        let ss = *self.by_site.entry((obj, site)).or_insert(n);
        if ss == n {
            self.site_stats.push(SiteStats::default());
        }
        ss
    }

    /// Declares the first sighting of a lock (from a Lock record), so its
    /// first use is known even before its events are replayed.
    pub fn add_lock_info(
        &mut self,
        process: u32,
        addr: u64,
        first_op: u8,
        first_ns: u64,
        site: u64,
    ) {
        if let Some(kind) = Op::from_u8(first_op).and_then(Kind::of) {
            let s = self.site(process, site);
            self.obj(process, kind, addr, s, first_ns);
        }
    }

    /// Sets a thread's end (from ThreadEnd / ProcessEnd / footer).
    pub fn set_thread_end(&mut self, id: u32, end: u64) {
        if let Some(&i) = self.thread_index.get(&id) {
            self.threads[i as usize].end = end;
        }
    }

    /// Adds lost-event counts to a thread.
    pub fn add_lost(&mut self, id: u32, n: u64) {
        if let Some(&i) = self.thread_index.get(&id) {
            let th = &mut self.threads[i as usize];
            th.lost_recorded += n;
            th.lost = th.lost_recorded.max(th.lost_annotated);
        }
    }

    /// Classifies the interval ending at `e` on thread `ti` and applies
    /// the overhead correction `cost` (ns, clamped to the interval).
    /// `ends_pending`: `e` completes the pending wait (an acquisition's is
    /// Lock time). `is_unlock_end`: `e` is the END of the pending unlock.
    fn account(
        &mut self,
        ti: usize,
        e: &Event,
        cost: u64,
        ends_pending: bool,
        is_unlock_end: bool,
    ) {
        let th = &mut self.threads[ti];
        th.events += 1;
        let t = e.time;
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
        let cat = if th.unknown_next || backwards {
            Cat::Unknown
        } else {
            match th.pending {
                Pending::Acquire { .. } if ends_pending => Cat::Lock,
                Pending::Acquire { .. } => Cat::Unknown,
                Pending::Unlock { .. } if is_unlock_end => Cat::Unlock,
                Pending::Wait { .. } if !ends_pending => Cat::Unknown,
                _ if th.held.is_empty() => Cat::Free,
                _ => Cat::Hold,
            }
        };
        if backwards {
            self.anomalies.clock_backwards += 1;
        }
        th.unknown_next = backwards;
        let sub = if self.cfg.correct_overhead {
            cost.min(dt)
        } else {
            0
        };
        th.corr += sub;
        th.overhead_ns += sub;
        th.cats[cat as usize] += dt - sub;
        if cat == Cat::Unknown {
            self.anomalies.unknown_intervals += 1;
        }
        if let Pending::Wait { what, .. } = th.pending {
            if ends_pending && cat != Cat::Unknown {
                th.blocked[what as usize] += dt - sub;
            }
        }
        th.last_t = th.last_t.max(t);
    }

    /// Feeds one event of trace thread `thread`.
    pub fn event(&mut self, thread: u32, e: &Event) {
        let ti = self.thread_idx(thread, e.time) as usize;
        let process = self.threads[ti].process;
        let cost = self.threads[ti].cost;
        let Some(op) = e.op() else {
            self.anomalies.unknown_ops += 1;
            self.account(ti, e, cost.event_ns, false, false);
            return;
        };
        let ph = e.phase();
        // A thread blocked in a call can only produce that call's
        // completion; anything else means events were lost.
        let completes = self.completes_pending(ti, op, e, process);
        if !completes
            && !matches!(
                self.threads[ti].pending,
                Pending::None | Pending::Unlock { .. }
            )
        {
            self.anomalies.interrupted_waits += 1;
            self.abandon_pending(ti, e.time);
        }
        let is_unlock_end = completes && matches!(self.threads[ti].pending, Pending::Unlock { .. });
        if op == Op::Lost {
            // The events dropped were before this annotation: the interval
            // that ends here is the one we know nothing about.
            self.threads[ti].unknown_next = true;
        }
        let ends_pending = completes && !matches!(self.threads[ti].pending, Pending::Unlock { .. });
        // Cost of the event that ends this interval.
        let c = if ends_pending && matches!(self.threads[ti].pending, Pending::Acquire { .. }) {
            let ahead = match self.threads[ti].pending {
                Pending::Acquire { ahead, .. } => f64::from(ahead),
                _ => 0.0,
            };
            ((ahead + 2.0) * (cost.acquire + cost.release) / 2.0).round() as u64
        } else if op.is_acquire() && ph != phase::BEGIN {
            cost.acquire_ns
        } else if op.is_release() && ph == phase::DONE {
            cost.release_ns
        } else if op.is_release() {
            0
        } else {
            cost.event_ns
        };
        self.account(ti, e, c, ends_pending, is_unlock_end);
        if !is_unlock_end {
            if let Pending::Unlock { .. } = self.threads[ti].pending {
                self.threads[ti].pending = Pending::None;
            }
        }
        if op.is_acquire() {
            self.on_acquire(ti, process, op, e);
        } else if op.is_release() {
            self.on_release(ti, process, op, e, is_unlock_end);
        } else {
            match op {
                Op::CondWait | Op::CondTimedwait => self.on_cond_wait(ti, process, e),
                Op::CondSignal | Op::CondBroadcast | Op::SemPost | Op::FutexWake => {
                    self.on_signal(ti, process, op, e)
                }
                Op::BarrierWait => self.on_barrier(ti, process, e),
                Op::SemWait | Op::SemTimedwait | Op::SemTrywait => self.on_sem(ti, process, op, e),
                Op::FutexWait => self.on_futex_wait(ti, process, e),
                Op::ThreadJoin => self.on_join(ti, e),
                Op::ThreadExit => {
                    let th = &mut self.threads[ti];
                    th.end = th.end.max(e.time);
                }
                Op::Lost => {
                    let th = &mut self.threads[ti];
                    th.lost_annotated += e.arg;
                    th.lost = th.lost_recorded.max(th.lost_annotated);
                    // Where the drops were relative to the annotation is
                    // not reliable: the interval after it is unknown too.
                    th.unknown_next = true;
                }
                _ => {}
            }
        }
    }

    /// Does `e` complete the thread's pending call?
    fn completes_pending(&mut self, ti: usize, op: Op, e: &Event, process: u32) -> bool {
        let ph = e.phase();
        if ph == phase::BEGIN {
            return false;
        }
        match self.threads[ti].pending {
            Pending::None => false,
            Pending::Unlock { obj, .. } => {
                op.is_release() && ph == phase::END && self.objs[obj as usize].addr == e.addr
            }
            Pending::Acquire { obj, .. } => {
                let o = &self.objs[obj as usize];
                o.addr == e.addr
                    && o.process == process
                    && (op.is_acquire() || (op == Op::FutexWait && o.kind == Kind::Futex))
            }
            Pending::Wait { what, obj, .. } => {
                let same = obj == u32::MAX || self.objs[obj as usize].addr == e.addr;
                same && match what {
                    Blocked::Cond => matches!(op, Op::CondWait | Op::CondTimedwait),
                    Blocked::Barrier => op == Op::BarrierWait,
                    Blocked::Sem => matches!(op, Op::SemWait | Op::SemTimedwait),
                    Blocked::Join => op == Op::ThreadJoin,
                }
            }
        }
    }

    /// Drops a pending call whose completion was never recorded.
    fn abandon_pending(&mut self, ti: usize, t: u64) {
        let th = &mut self.threads[ti];
        th.unknown_next = true;
        let p = std::mem::replace(&mut th.pending, Pending::None);
        if let Pending::Acquire { obj, .. } = p {
            let o = &mut self.objs[obj as usize];
            o.settle(t);
            o.take_waiter(ti as u32);
        }
    }

    fn on_acquire(&mut self, ti: usize, process: u32, op: Op, e: &Event) {
        let kind = Kind::of(op).unwrap_or(Kind::Mutex);
        let r = self.resolve(ti, process, kind, e.addr, e.site, e.time);
        let (oi, site) = (r.obj, r.site);
        let shared = matches!(op, Op::RwRdlock | Op::RwTryRdlock | Op::RwTimedRdlock);
        let t = e.time;
        let ph = e.phase();
        self.objs[oi as usize].settle(t);
        if ph == phase::BEGIN {
            let o = &mut self.objs[oi as usize];
            let ahead =
                o.holders.iter().filter(|h| h.thread != ti as u32).count() + o.waiters.len();
            o.waiters.push(Waiter {
                thread: ti as u32,
                since: e.time,
                charges: Vec::new(),
            });
            let th = &mut self.threads[ti];
            th.pending = Pending::Acquire {
                obj: oi,
                at: th.now(),
                ahead: ahead as u32,
            };
            return;
        }
        // DONE or FAIL: the call returned.
        let now = self.threads[ti].now();
        let (waited, wait_ns, charges) = match self.threads[ti].pending {
            Pending::Acquire { obj, at, .. } if obj == oi => {
                self.threads[ti].pending = Pending::None;
                let w = self.objs[oi as usize].take_waiter(ti as u32);
                (
                    true,
                    now.saturating_sub(at),
                    w.map(|w| w.charges).unwrap_or_default(),
                )
            }
            _ => {
                if e.flags & phase::CONTENDED != 0 {
                    self.anomalies.unmatched_completions += 1;
                }
                (e.flags & phase::CONTENDED != 0, 0, Vec::new())
            }
        };
        if waited {
            self.commit_blame(oi, ti as u32, site, wait_ns, &charges);
        }
        let o = &mut self.objs[oi as usize];
        o.wait.record(wait_ns);
        let ss = &mut self.site_stats[r.ss as usize];
        ss.wait_ns += wait_ns;
        ss.max_wait_ns = ss.max_wait_ns.max(wait_ns);
        // Uncontended acquisitions carry no call path: keep the path table
        // for real paths (the rest is the lock total minus them).
        let mut no_path = SiteStats::default();
        let ps = if e.stack != 0 {
            self.by_path.entry((oi, e.stack)).or_default()
        } else {
            &mut no_path
        };
        ps.wait_ns += wait_ns;
        ps.max_wait_ns = ps.max_wait_ns.max(wait_ns);
        let lt = &mut self.lock_threads[r.lt as usize];
        lt.wait_ns += wait_ns;
        lt.max_wait_ns = lt.max_wait_ns.max(wait_ns);
        if ph == phase::FAIL {
            let timeout = e.arg == ETIMEDOUT && !op.is_try();
            let (tf, to, er) = if op.is_try() {
                (1, 0, 0)
            } else if timeout {
                (0, 1, 0)
            } else {
                (0, 0, 1)
            };
            o.trylock_failures += tf;
            o.timeouts += to;
            o.errors += er;
            lt.trylock_failures += tf;
            lt.timeouts += to;
            ss.trylock_failures += tf;
            ss.timeouts += to;
            ps.trylock_failures += tf;
            ps.timeouts += to;
            let th = &mut self.threads[ti];
            if !th.failed.contains(&oi) {
                th.failed.push(oi);
            }
            return;
        }
        // Acquired.
        o.acquisitions += 1;
        o.shared_acquisitions += u64::from(shared);
        lt.acquisitions += 1;
        ss.acquisitions += 1;
        ps.acquisitions += 1;
        if waited {
            o.contended += 1;
            lt.contended += 1;
            ss.contended += 1;
            ps.contended += 1;
        }
        let th = &mut self.threads[ti];
        let had_failed = match th.failed.iter().position(|&x| x == oi) {
            Some(i) => {
                th.failed.swap_remove(i);
                true
            }
            None => false,
        };
        if !waited && !had_failed {
            o.first_attempt += 1;
        }
        self.take_ownership(oi, ti, site, e.stack, shared, now, r.ss, r.lt);
    }

    /// Records that thread `ti` now holds object `oi`.
    #[allow(clippy::too_many_arguments)]
    fn take_ownership(
        &mut self,
        oi: u32,
        ti: usize,
        site: u32,
        stack: u32,
        shared: bool,
        now: u64,
        ss: u32,
        lt: u32,
    ) {
        let o = &mut self.objs[oi as usize];
        if o.last_owner != u32::MAX && o.last_owner != ti as u32 {
            o.owner_changes += 1;
        }
        o.last_owner = ti as u32;
        if o.holders
            .iter()
            .any(|h| h.thread != ti as u32 && !(h.shared && shared))
        {
            self.anomalies.overlapping_holds += 1;
        }
        o.holders.push(Holder {
            thread: ti as u32,
            culprit: Culprit {
                thread: ti as u32,
                site,
                stack,
            },
            shared,
            since: o.last_settle,
        });
        self.threads[ti].held.push(Held {
            obj: oi,
            ss,
            lt,
            stack,
            at: now,
        });
    }

    fn commit_blame(
        &mut self,
        oi: u32,
        waiter: u32,
        waiter_site: u32,
        wait_ns: u64,
        charges: &[(Culprit, u64)],
    ) {
        // Charges are in raw ns; scale them to the corrected wait so blame
        // sums to the reported wait time.
        let raw: u64 = charges.iter().map(|c| c.1).sum();
        if raw == 0 {
            if wait_ns > 0 {
                let b = self
                    .blame
                    .entry((oi, waiter, waiter_site, Culprit::NONE))
                    .or_default();
                b.0 += wait_ns;
                b.1 += 1;
            }
            return;
        }
        let mut left = wait_ns;
        for (k, &(c, ns)) in charges.iter().enumerate() {
            let part = if k + 1 == charges.len() {
                left
            } else {
                ((u128::from(ns) * u128::from(wait_ns)) / u128::from(raw)) as u64
            };
            left -= part.min(left);
            let b = self.blame.entry((oi, waiter, waiter_site, c)).or_default();
            b.0 += part;
            b.1 += 1;
        }
    }

    /// A whole exclusive critical section of `oi` by thread `ti` (acquired
    /// at raw time `since`) has just ended while other threads are still
    /// recorded as holding it exclusively since before: impossible for a
    /// lock, so their releases were lost. Drop those holds (their length
    /// is unknown) and make the holders' current interval Unknown.
    /// Overlaps that end before such a proof (stamps taken at call entry,
    /// TSC skew) are left alone.
    fn evict_stale_holders(&mut self, oi: u32, ti: usize, since: u64) {
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
            if let Some(i) = th.held.iter().position(|h| h.obj == oi) {
                th.held.remove(i);
            }
            th.unknown_next = true;
        }
    }

    /// Releases thread `ti`'s most recent hold of `oi`; returns the raw
    /// acquisition time and whether the hold was shared, or None if the
    /// thread held none.
    fn release_hold(&mut self, ti: usize, oi: u32, t: u64) -> Option<(u64, bool)> {
        let th = &mut self.threads[ti];
        let i = th.held.iter().rposition(|h| h.obj == oi)?;
        let h = th.held.remove(i);
        let hold = th.now().saturating_sub(h.at);
        let o = &mut self.objs[oi as usize];
        o.settle(t);
        let mut info = (t, false);
        if let Some(j) = o.holders.iter().rposition(|x| x.thread == ti as u32) {
            let x = o.holders.remove(j);
            info = (x.since, x.shared);
        }
        o.hold.record(hold);
        self.lock_threads[h.lt as usize].hold_ns += hold;
        self.site_stats[h.ss as usize].hold_ns += hold;
        if h.stack != 0 {
            self.by_path.entry((oi, h.stack)).or_default().hold_ns += hold;
        }
        Some(info)
    }

    fn on_release(&mut self, ti: usize, process: u32, op: Op, e: &Event, is_end: bool) {
        let ph = e.phase();
        if ph == phase::END {
            match self.threads[ti].pending {
                Pending::Unlock { obj, at } if is_end => {
                    let now = self.threads[ti].now();
                    let o = &mut self.objs[obj as usize];
                    o.slow_unlocks += 1;
                    o.unlock_ns += now.saturating_sub(at);
                    self.threads[ti].pending = Pending::None;
                }
                _ => self.anomalies.unmatched_completions += 1,
            }
            return;
        }
        let kind = Kind::of(op).unwrap_or(Kind::Mutex);
        let oi = self.resolve(ti, process, kind, e.addr, e.site, e.time).obj;
        match self.release_hold(ti, oi, e.time) {
            Some((since, false)) => self.evict_stale_holders(oi, ti, since),
            Some(_) => {}
            None => {
                self.anomalies.unmatched_releases += 1;
                self.objs[oi as usize].settle(e.time);
            }
        }
        let th = &mut self.threads[ti];
        th.pending = Pending::Unlock {
            obj: oi,
            at: th.now(),
        };
    }

    fn on_cond_wait(&mut self, ti: usize, process: u32, e: &Event) {
        let site = self.site(process, e.site);
        let ci = self.obj(process, Kind::Cond, e.addr, site, e.time);
        let ph = e.phase();
        if ph == phase::BEGIN {
            // The mutex (arg) is released for the duration of the wait.
            let mi = self.obj(process, Kind::Mutex, e.arg, site, e.time);
            if self.release_hold(ti, mi, e.time).is_none() {
                self.anomalies.unmatched_releases += 1;
            }
            let th = &mut self.threads[ti];
            th.pending = Pending::Wait {
                what: Blocked::Cond,
                obj: ci,
                mutex: mi,
                site,
                at: th.now(),
            };
            return;
        }
        let Pending::Wait {
            what: Blocked::Cond,
            obj,
            mutex,
            site: wsite,
            at,
        } = self.threads[ti].pending
        else {
            self.anomalies.unmatched_completions += 1;
            return;
        };
        debug_assert_eq!(obj, ci);
        let now = self.threads[ti].now();
        self.threads[ti].pending = Pending::None;
        let wait = now.saturating_sub(at);
        let o = &mut self.objs[ci as usize];
        o.acquisitions += 1;
        o.wait.record(wait);
        if ph == phase::FAIL && e.arg == ETIMEDOUT {
            o.timeouts += 1;
        }
        let w = self.obj_waits.entry((ci, ti as u32)).or_default();
        w.0 += 1;
        w.1 += wait;
        // DONE and FAIL (timeout) both return with the mutex re-acquired:
        // a new critical section starts here, attributed to the wait's site.
        self.objs[mutex as usize].settle(e.time);
        let ss = self.ss(mutex, wsite);
        let lt = self.lt(mutex, ti as u32);
        self.take_ownership(mutex, ti, wsite, e.stack, false, now, ss, lt);
    }

    fn on_signal(&mut self, ti: usize, process: u32, op: Op, e: &Event) {
        let site = self.site(process, e.site);
        let kind = Kind::of(op).unwrap_or(Kind::Cond);
        let oi = self.obj(process, kind, e.addr, site, e.time);
        let o = &mut self.objs[oi as usize];
        if op == Op::CondBroadcast {
            o.broadcasts += 1;
        } else {
            o.signals += 1;
        }
        if op == Op::FutexWake {
            o.last_wake = Some((
                Culprit {
                    thread: ti as u32,
                    site,
                    stack: e.stack,
                },
                e.time,
            ));
        }
    }

    fn on_barrier(&mut self, ti: usize, process: u32, e: &Event) {
        let site = self.site(process, e.site);
        let bi = self.obj(process, Kind::Barrier, e.addr, site, e.time);
        let me = ti as u32;
        let begun = match self.threads[ti].pending {
            Pending::Wait {
                what: Blocked::Barrier,
                at,
                ..
            } => Some(at),
            _ => None,
        };
        if e.phase() == phase::BEGIN || begun.is_none() {
            // An arrival (a DONE without BEGIN arrived and left at once).
            let st = self.objs[bi as usize]
                .barrier
                .get_or_insert_with(Default::default);
            let r = st.threads.entry(me).or_insert((0, 0));
            let k = r.0;
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
                what: Blocked::Barrier,
                obj: bi,
                mutex: u32::MAX,
                site,
                at: th.now(),
            };
            return;
        }
        let now = self.threads[ti].now();
        let wait = begun.map_or(0, |at| now.saturating_sub(at));
        self.threads[ti].pending = Pending::None;
        let o = &mut self.objs[bi as usize];
        o.acquisitions += 1;
        o.wait.record(wait);
        let st = o.barrier.get_or_insert_with(Default::default);
        let k = st.threads.get(&me).map_or(0, |v| v.0.saturating_sub(1));
        let last = st.last.get(&k).map_or(u32::MAX, |v| v.1);
        o.rounds = o.rounds.max(k + 1);
        let w = self.obj_waits.entry((bi, me)).or_default();
        w.0 += 1;
        w.1 += wait;
        if wait > 0 {
            *self.barrier_blame.entry((bi, last)).or_default() += wait;
        }
    }

    fn on_sem(&mut self, ti: usize, process: u32, op: Op, e: &Event) {
        let site = self.site(process, e.site);
        let si = self.obj(process, Kind::Semaphore, e.addr, site, e.time);
        let ph = e.phase();
        if ph == phase::BEGIN {
            let th = &mut self.threads[ti];
            th.pending = Pending::Wait {
                what: Blocked::Sem,
                obj: si,
                mutex: u32::MAX,
                site,
                at: th.now(),
            };
            return;
        }
        let now = self.threads[ti].now();
        let (waited, wait) = match self.threads[ti].pending {
            Pending::Wait {
                what: Blocked::Sem,
                at,
                ..
            } => {
                self.threads[ti].pending = Pending::None;
                (true, now.saturating_sub(at))
            }
            _ => (false, 0),
        };
        let o = &mut self.objs[si as usize];
        o.wait.record(wait);
        if ph == phase::FAIL {
            if op == Op::SemTrywait {
                o.trylock_failures += 1;
            } else if e.arg == ETIMEDOUT {
                o.timeouts += 1;
            } else {
                o.errors += 1;
            }
        } else {
            o.acquisitions += 1;
            if waited {
                o.contended += 1;
            }
        }
        let w = self.obj_waits.entry((si, ti as u32)).or_default();
        w.0 += 1;
        w.1 += wait;
    }

    fn on_futex_wait(&mut self, ti: usize, process: u32, e: &Event) {
        let site = self.site(process, e.site);
        let fi = self.obj(process, Kind::Futex, e.addr, site, e.time);
        if e.phase() == phase::BEGIN {
            let o = &mut self.objs[fi as usize];
            o.settle(e.time);
            let ahead = o.waiters.len() as u32;
            o.waiters.push(Waiter {
                thread: ti as u32,
                since: e.time,
                charges: Vec::new(),
            });
            let th = &mut self.threads[ti];
            th.pending = Pending::Acquire {
                obj: fi,
                at: th.now(),
                ahead,
            };
            return;
        }
        let now = self.threads[ti].now();
        let Pending::Acquire { at, .. } = self.threads[ti].pending else {
            self.anomalies.unmatched_completions += 1;
            return;
        };
        self.threads[ti].pending = Pending::None;
        let wait = now.saturating_sub(at);
        let raw_begin;
        {
            let o = &mut self.objs[fi as usize];
            o.settle(e.time);
            raw_begin = o.take_waiter(ti as u32).map_or(e.time, |w| w.since);
        }
        // Futex words have no visible holder: the wait is charged to the
        // thread whose wake ended it (its last wake after the wait began).
        let o = &self.objs[fi as usize];
        let culprit = match o.last_wake {
            Some((c, t)) if t >= raw_begin && c.thread != ti as u32 => c,
            _ => Culprit::NONE,
        };
        self.commit_blame(fi, ti as u32, site, wait, &[(culprit, wait.max(1))]);
        let lti = self.lt(fi, ti as u32);
        let ssi = self.ss(fi, site);
        let o = &mut self.objs[fi as usize];
        o.wait.record(wait);
        let lt = &mut self.lock_threads[lti as usize];
        lt.wait_ns += wait;
        lt.max_wait_ns = lt.max_wait_ns.max(wait);
        let failed = e.phase() == phase::FAIL;
        if failed && e.arg == ETIMEDOUT {
            o.timeouts += 1;
            lt.timeouts += 1;
        } else if failed {
            // EAGAIN (the word changed before the thread could sleep) or
            // EINTR: a wait that did not get the lock, like a failed
            // trylock.
            o.trylock_failures += 1;
            lt.trylock_failures += 1;
        } else {
            o.acquisitions += 1;
            o.contended += 1;
            lt.acquisitions += 1;
            lt.contended += 1;
            if o.last_owner != u32::MAX && o.last_owner != ti as u32 {
                o.owner_changes += 1;
            }
            o.last_owner = ti as u32;
        }
        let ss = &mut self.site_stats[ssi as usize];
        if !failed {
            ss.acquisitions += 1;
            ss.contended += 1;
        } else if e.arg != ETIMEDOUT {
            ss.trylock_failures += 1;
        }
        ss.wait_ns += wait;
        ss.max_wait_ns = ss.max_wait_ns.max(wait);
        if e.stack != 0 && !failed {
            let ps = self.by_path.entry((fi, e.stack)).or_default();
            ps.acquisitions += 1;
            ps.contended += 1;
            ps.wait_ns += wait;
            ps.max_wait_ns = ps.max_wait_ns.max(wait);
        }
    }

    fn on_join(&mut self, ti: usize, e: &Event) {
        let th = &mut self.threads[ti];
        if e.phase() == phase::BEGIN {
            th.pending = Pending::Wait {
                what: Blocked::Join,
                obj: u32::MAX,
                mutex: u32::MAX,
                site: u32::MAX,
                at: th.now(),
            };
        } else if let Pending::Wait {
            what: Blocked::Join,
            ..
        } = th.pending
        {
            th.pending = Pending::None;
        }
    }

    /// Closes every thread at its end time and every lock at the end of
    /// the trace. `default_end` is used for threads with no known end.
    pub fn finish(&mut self, default_end: u64) {
        for ti in 0..self.threads.len() {
            let th = &mut self.threads[ti];
            if th.end <= th.start {
                th.end = default_end;
            }
            let end = th.end.max(th.last_t);
            th.end = end;
            // The last interval, up to the thread's end, in the state the
            // thread was left in (still waiting: Lock; holding: Hold).
            let e = Event {
                time: end,
                ..Event::default()
            };
            let waiting = matches!(th.pending, Pending::Acquire { .. } | Pending::Wait { .. });
            self.account(ti, &e, 0, waiting, false);
            self.threads[ti].events -= 1;
            let held: Vec<Held> = self.threads[ti].held.clone();
            for h in held.iter().rev() {
                self.anomalies.held_at_exit += 1;
                self.release_hold(ti, h.obj, end);
            }
            if let Pending::Acquire { obj, .. } = self.threads[ti].pending {
                let o = &mut self.objs[obj as usize];
                o.settle(end);
                o.take_waiter(ti as u32);
            }
            self.threads[ti].pending = Pending::None;
        }
    }

    /// Total overhead subtracted, ns.
    pub fn overhead_total(&self) -> u64 {
        self.threads.iter().map(|t| t.overhead_ns).sum()
    }

    /// A thread by its dense index (as in [`Culprit::thread`]).
    pub fn thread(&self, idx: u32) -> Option<&ThreadModel> {
        self.threads.get(idx as usize)
    }
}
