//! The timing model: consumes every thread's synchronization steps
//! ([`lockscope_trace::sync`], which interprets the lock protocol and classifies
//! and corrects the time between steps) in global time order and
//! accumulates per-lock, per-site, per-call-path, per-thread and blame
//! figures.
//!
//! # Per-thread breakdown
//! Each step's segment goes to one category: waiting for a lock (an
//! acquisition or a raw futex wait), inside an unlock, holding at least
//! one lock, free, or unknown; a condition, barrier, semaphore or join
//! wait is *free* (or *hold* if another lock is still held) and is also
//! counted apart. The five categories therefore sum to the thread's
//! lifetime exactly, by construction. Every duration (waits, holds,
//! breakdown, lifetime) is measured on the corrected per-thread clock of
//! [`lockscope_trace::sync`] (PinCS §2.2 overhead correction), so they stay
//! consistent with each other.
//!
//! # Cross-thread state
//! Per lock, the current holders and waiters. Whenever either set changes,
//! the time since the last change is charged: to the lock's held time,
//! to its waiter integral (for the average number of waiters), and, for
//! each waiter, to the critical section (thread, site, call path) of each
//! holder (split evenly among shared holders). Time a waiter waits while
//! nobody holds the lock is charged to "no holder" (hand-off latency).
//!
//! # Layout
//! This file holds the types and the entry points ([`Model::build`],
//! [`Model::build_observed`]); `step.rs` is the state machine (one
//! [`Step`] at a time), `blame.rs` charges waiting time to holders and
//! hands ownership over, `index.rs` maps threads, sites and objects to
//! dense indices. The overhead correction is not here: it is applied by
//! [`lockscope_trace::sync`] to the segments before they arrive.

use std::path::Path;

use lockscope_format::{Op, Overhead};

use crate::hist::Histogram;
use lockscope_trace::input::Meta;
pub use lockscope_trace::sync::{Anomalies, Kind};
use lockscope_trace::sync::{BlockedOn, Section, SegKind, Step, StepKind, ETIMEDOUT};
use lockscope_trace::AnalysisError;

mod blame;
mod index;
mod step;

pub use lockscope_trace::FastMap;

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

/// Key of [`Model::blame`]: (object, waiter thread, waiter site, waiter's
/// call path id or 0, culprit).
pub type BlameKey = (u32, u32, u32, u32, Culprit);

/// Per (lock, thread) counters: the same counters as per site
/// (`hold_ns`: the thread's hold time of the lock).
pub type LockThread = SiteStats;

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
    /// Waits still blocked when their thread ended (their wait so far is
    /// in `wait_ns`).
    pub still_waiting: u64,
    /// Wait time, ns.
    pub wait_ns: u64,
    /// Longest wait, ns.
    pub max_wait_ns: u64,
    /// Hold time of sections entered here, ns.
    pub hold_ns: u64,
}

impl SiteStats {
    /// Adds one attempt's wait (total and longest).
    #[inline]
    pub(crate) fn add_wait(&mut self, ns: u64) {
        self.wait_ns += ns;
        self.max_wait_ns = self.max_wait_ns.max(ns);
    }
}

#[derive(Clone, Debug)]
struct Holder {
    thread: u32,
    culprit: Culprit,
    shared: bool,
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
    /// Acquisitions (or futex waits) still blocked when their thread
    /// ended: a deadlock, or a program killed while it waited. Their wait
    /// so far is in `wait`, as a failed call's is.
    pub still_waiting: u64,
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
            still_waiting: 0,
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
    /// Blocked in cond / barrier / sem / join / GPU waits (part of Free or
    /// Hold).
    pub blocked: [u64; 5],
    /// The part of `blocked` counted as Free (waits while holding no
    /// lock): the THREADS table shows it apart from the running time, so
    /// that a thread asleep in `pthread_cond_wait` is not called free.
    pub blocked_free: u64,
    /// Recorder overhead subtracted from this thread, ns.
    pub overhead_ns: u64,
    /// Events of this thread.
    pub events: u64,
    /// Events lost on this thread: the larger of its Loss records and its
    /// in-stream Lost annotations (both may count the same drops).
    pub lost: u64,
    lost_annotated: u64,
    lost_recorded: u64,
    started: bool,
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
    /// Blame: (object, waiter thread, waiter site, waiter's call path id
    /// or 0, culprit) -> (ns, waits). The path names the waiter's own
    /// frame when its site is runtime code (an out-of-line
    /// `std::mutex::lock()` at -O0 is the site of every caller).
    pub blame: FastMap<BlameKey, (u64, u64)>,
    /// Barrier / cond / sem / futex waits per (object, thread): (waits, ns).
    pub obj_waits: FastMap<(u32, u32), (u64, u64)>,
    /// Barrier blame: (barrier object, last-arriver thread) -> ns.
    pub barrier_blame: FastMap<(u32, u32), u64>,
    /// Protocol anomalies.
    pub anomalies: Anomalies,
    /// Recorder overhead per process as recorded.
    pub overhead: Vec<Overhead>,
}

impl Model {
    /// An empty model with the recorder's measured costs per process;
    /// threads are declared with [`Model::add_thread`] before events.
    pub fn new(cfg: ModelConfig, overhead: Vec<Overhead>) -> Self {
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
        self.threads.push(ThreadModel {
            id,
            process,
            tid,
            name,
            start,
            end: start,
            cache: vec![Resolved::default(); CACHE],
            ..ThreadModel::default()
        });
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
            self.declare(process, kind, addr, first_ns, site);
        }
    }

    fn declare(&mut self, process: u32, kind: Kind, addr: u64, first_ns: u64, site: u64) {
        let s = self.site(process, site);
        self.obj(process, kind, addr, s, first_ns);
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

    /// Runs the model over a trace file: declares its threads and locks,
    /// streams its steps ([`lockscope_trace::sync::for_each_step`]) and closes every
    /// thread. `progress(done, total)` counts events.
    pub fn build(
        path: &Path,
        meta: &Meta,
        cfg: ModelConfig,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Model, AnalysisError> {
        Model::build_observed(path, meta, cfg, progress, |_, _| {})
    }

    /// [`Model::build`], also handing every step to `observe` after the
    /// model took it (on the interpreter's thread, with the interpreter
    /// for its queries such as [`lockscope_trace::sync::SyncInterp::held`]): for
    /// the consumers of the same steps (the hang tracker, the HTML
    /// report's timeline) that would otherwise read, decode and interpret
    /// the whole trace a second time. Generic, not `dyn`, so that the
    /// plain build pays nothing for it.
    pub fn build_observed(
        path: &Path,
        meta: &Meta,
        cfg: ModelConfig,
        progress: &mut dyn FnMut(u64, u64),
        mut observe: impl FnMut(&lockscope_trace::sync::Step<'_>, &lockscope_trace::sync::SyncInterp),
    ) -> Result<Model, AnalysisError> {
        let mut overhead: Vec<_> = meta.overhead.values().cloned().collect();
        overhead.sort_by_key(|o| o.process);
        let correct = cfg.correct_overhead;
        let mut model = Model::new(cfg, overhead);
        let mut threads: Vec<_> = meta.threads.values().collect();
        threads.sort_by_key(|t| t.id);
        for t in &threads {
            let name = meta
                .thread_names
                .get(&t.id)
                .cloned()
                .unwrap_or_else(|| t.name.clone());
            model.add_thread(t.id, t.process, t.tid, name, t.start_ns);
        }
        for l in &meta.locks {
            let id = lockscope_trace::sync::ObjId {
                process: l.process,
                addr: l.addr,
            };
            if meta.semaphore_locks.binary_search(&id).is_ok() {
                // Declared as the lock the interpreter makes of it, not as
                // a semaphore: an empty row in the semaphores table else.
                model.declare(l.process, Kind::SemLock, l.addr, l.first_ns, l.first_site);
            } else {
                model.add_lock_info(l.process, l.addr, l.first_op, l.first_ns, l.first_site);
            }
        }
        let si = lockscope_trace::sync::for_each_step_progress(
            path,
            meta,
            correct,
            progress,
            |s, si| {
                model.step(s);
                observe(s, si);
            },
        )?;
        model.anomalies = si.anomalies;
        for l in &meta.losses {
            model.add_lost(l.thread, l.events);
        }
        Ok(model)
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
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
