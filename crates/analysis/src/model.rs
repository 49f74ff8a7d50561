//! The timing model: consumes every thread's synchronization steps
//! ([`crate::sync`], which interprets the lock protocol and classifies
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
//! [`crate::sync`] (PinCS §2.2 overhead correction), so they stay
//! consistent with each other.
//!
//! # Cross-thread state
//! Per lock, the current holders and waiters. Whenever either set changes,
//! the time since the last change is charged: to the lock's held time,
//! to its waiter integral (for the average number of waiters), and, for
//! each waiter, to the critical section (thread, site, call path) of each
//! holder (split evenly among shared holders). Time a waiter waits while
//! nobody holds the lock is charged to "no holder" (hand-off latency).

use std::path::Path;

use lockscope_format::{Op, Overhead};

use crate::hist::Histogram;
use crate::input::Meta;
pub use crate::sync::{Anomalies, Kind};
use crate::sync::{BlockedOn, Section, SegKind, Step, StepKind, ETIMEDOUT};
use crate::AnalysisError;

/// HashMap with rustc's Fx hasher: keys here are integers, and SipHash
/// costs more than the rest of the per-event work (a maintained crate
/// replaces the hand-written multiplicative hasher this used to be).
pub type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;

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
        // Counted as an anomaly by the interpreter.
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

    /// Runs the model over a trace file: declares its threads and locks,
    /// streams its steps ([`crate::sync::for_each_step`]) and closes every
    /// thread. `progress(done, total)` counts events.
    pub fn build(
        path: &Path,
        meta: &Meta,
        cfg: ModelConfig,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Model, AnalysisError> {
        Model::build_tapped(path, meta, cfg, progress, &mut |_, _| {})
    }

    /// [`Model::build`], handing the raw events to `tap` as they are read
    /// ([`crate::sync::for_each_step_tapped`]).
    pub fn build_tapped(
        path: &Path,
        meta: &Meta,
        cfg: ModelConfig,
        progress: &mut dyn FnMut(u64, u64),
        tap: &mut (dyn FnMut(u32, &[lockscope_format::Event]) + Send),
    ) -> Result<Model, AnalysisError> {
        Model::build_observed(path, meta, cfg, progress, tap, |_| {})
    }

    /// [`Model::build_tapped`], also handing every step to `observe` after
    /// the model took it (on the interpreter's thread): for a consumer of
    /// the same steps (the HTML report's timeline) that would otherwise
    /// read, decode and interpret the whole trace a second time. Generic,
    /// not `dyn`, so that the plain build pays nothing for it.
    pub fn build_observed(
        path: &Path,
        meta: &Meta,
        cfg: ModelConfig,
        progress: &mut dyn FnMut(u64, u64),
        tap: &mut (dyn FnMut(u32, &[lockscope_format::Event]) + Send),
        mut observe: impl FnMut(&crate::sync::Step<'_>),
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
            model.add_lock_info(l.process, l.addr, l.first_op, l.first_ns, l.first_site);
        }
        let si = crate::sync::for_each_step_tapped(path, meta, correct, progress, tap, |s, _| {
            model.step(s);
            observe(s);
        })?;
        model.anomalies = si.anomalies;
        for l in &meta.losses {
            model.add_lost(l.thread, l.events);
        }
        Ok(model)
    }

    /// Index of an object that must exist (named by a step).
    fn known_obj(&mut self, process: u32, kind: Kind, addr: u64, t: u64) -> u32 {
        match self.obj_index.get(&(process, kind.class(), addr)) {
            Some(&i) => i,
            None => {
                let site = self.site(process, 0);
                self.obj(process, kind, addr, site, t)
            }
        }
    }

    /// Feeds one step (from [`crate::sync::SyncInterp`], in time order).
    pub fn step(&mut self, s: &Step<'_>) {
        let ti = self.thread_idx(s.thread, s.time) as usize;
        let process = self.threads[ti].process;
        let e = s.event;
        {
            let th = &mut self.threads[ti];
            if !th.started {
                th.started = true;
                if s.time < th.start {
                    // The thread record's start is later than its first
                    // event: trust the event.
                    th.start = s.time;
                }
            }
            if !s.kind.is_synthetic() {
                th.events += 1;
            }
            let seg = s.segment;
            th.overhead_ns += seg.cost_ns;
            let cat = match seg.kind {
                SegKind::Unknown => Cat::Unknown,
                SegKind::Unlocking => Cat::Unlock,
                SegKind::Blocked(BlockedOn::Lock) => Cat::Lock,
                _ if seg.holding => Cat::Hold,
                _ => Cat::Free,
            };
            th.cats[cat as usize] += seg.corrected_ns;
            let blocked = match seg.kind {
                SegKind::Blocked(BlockedOn::Cond) => Some(0),
                SegKind::Blocked(BlockedOn::Barrier) => Some(1),
                SegKind::Blocked(BlockedOn::Sem) => Some(2),
                SegKind::Blocked(BlockedOn::Join) => Some(3),
                SegKind::Blocked(BlockedOn::Gpu) => Some(4),
                _ => None,
            };
            if let Some(b) = blocked {
                th.blocked[b] += seg.corrected_ns;
            }
        }
        let op = e.op();
        match s.kind {
            StepKind::Abandoned {
                queued: Some((id, kind)),
            } => {
                let oi = self.known_obj(id.process, kind, id.addr, s.time);
                let o = &mut self.objs[oi as usize];
                o.settle(s.time);
                o.take_waiter(ti as u32);
            }
            StepKind::AcquireBegin { .. } => {
                let kind = op.and_then(Kind::of).unwrap_or(Kind::Mutex);
                let r = self.resolve(ti, process, kind, e.addr, e.site, e.time);
                let o = &mut self.objs[r.obj as usize];
                o.settle(e.time);
                o.waiters.push(Waiter {
                    thread: ti as u32,
                    since: e.time,
                    charges: Vec::new(),
                });
            }
            StepKind::Acquired {
                section,
                waited,
                matched,
                wait_ns,
                first_attempt,
            } => self.on_acquired(
                ti,
                process,
                s,
                section.shared(),
                waited,
                matched,
                wait_ns,
                first_attempt,
            ),
            StepKind::AcquireFailed {
                matched,
                wait_ns,
                errno,
                is_try,
                ..
            } => self.on_acquire_failed(ti, process, s, matched, wait_ns, errno, is_try),
            StepKind::Released(section) => {
                // Resolved as at an unlock call, so that a lock first seen
                // here is named after this call site.
                let kind = op.and_then(Kind::of).unwrap_or(Kind::Mutex);
                self.resolve(ti, process, kind, e.addr, e.site, e.time);
                self.release_hold(ti, process, &section, e.time, s.clock);
            }
            StepKind::UnmatchedRelease { .. } => {
                let kind = op.and_then(Kind::of).unwrap_or(Kind::Mutex);
                let oi = self.resolve(ti, process, kind, e.addr, e.site, e.time).obj;
                self.objs[oi as usize].settle(e.time);
            }
            StepKind::ReleaseEnd { lock, unlock_ns } => {
                let kind = op.and_then(Kind::of).unwrap_or(Kind::Mutex);
                let oi = self.known_obj(lock.process, kind, lock.addr, s.time);
                let o = &mut self.objs[oi as usize];
                o.slow_unlocks += 1;
                o.unlock_ns += unlock_ns;
            }
            StepKind::HoldDropped(section) => {
                // Its release was lost: drop the hold uncounted.
                let oi = self.known_obj(process, Kind::Mutex, section.lock.addr, s.time);
                let o = &mut self.objs[oi as usize];
                if let Some(i) = o
                    .holders
                    .iter()
                    .position(|h| h.thread == ti as u32 && !h.shared)
                {
                    o.holders.remove(i);
                }
            }
            StepKind::HeldAtExit(section) => {
                self.release_hold(ti, process, &section, s.time, s.clock);
            }
            StepKind::CondWaitBegin { released, .. } => {
                let site = self.site(process, e.site);
                self.obj(process, Kind::Cond, e.addr, site, e.time);
                self.obj(process, Kind::Mutex, e.arg, site, e.time);
                if let Some(section) = released {
                    self.release_hold(ti, process, &section, e.time, s.clock);
                }
            }
            StepKind::CondWaitEnd {
                wait_ns,
                timed_out,
                section,
                ..
            } => {
                let site = self.site(process, e.site);
                let ci = self.obj(process, Kind::Cond, e.addr, site, e.time);
                let o = &mut self.objs[ci as usize];
                o.acquisitions += 1;
                o.wait.record(wait_ns);
                if timed_out {
                    o.timeouts += 1;
                }
                let w = self.obj_waits.entry((ci, ti as u32)).or_default();
                w.0 += 1;
                w.1 += wait_ns;
                // A new critical section of the wait's mutex starts here,
                // attributed to the wait's site.
                let wsite = self.site(process, section.site);
                let mutex = self.known_obj(process, Kind::Mutex, section.lock.addr, e.time);
                self.objs[mutex as usize].settle(e.time);
                self.ss(mutex, wsite);
                self.lt(mutex, ti as u32);
                self.take_ownership(mutex, ti, wsite, e.stack, false);
            }
            StepKind::Unmatched {
                obj: Some((id, kind)),
            } => {
                let site = self.site(process, e.site);
                self.obj(process, kind, id.addr, site, e.time);
            }
            StepKind::CondSignal { .. } | StepKind::SemPost { .. } | StepKind::FutexWake { .. } => {
                if let Some(op) = op {
                    self.on_signal(ti, process, op, e);
                }
            }
            StepKind::BarrierArrive { .. } | StepKind::SemWaitBegin { .. } => {
                let kind = op.and_then(Kind::of).unwrap_or(Kind::Barrier);
                let site = self.site(process, e.site);
                self.obj(process, kind, e.addr, site, e.time);
            }
            StepKind::BarrierDepart {
                round,
                last_arriver,
                wait_ns,
                ..
            } => {
                let site = self.site(process, e.site);
                let bi = self.obj(process, Kind::Barrier, e.addr, site, e.time);
                let last = if last_arriver == u32::MAX {
                    u32::MAX
                } else {
                    self.thread_index
                        .get(&last_arriver)
                        .copied()
                        .unwrap_or(u32::MAX)
                };
                let o = &mut self.objs[bi as usize];
                o.acquisitions += 1;
                o.wait.record(wait_ns);
                o.rounds = o.rounds.max(round + 1);
                let w = self.obj_waits.entry((bi, ti as u32)).or_default();
                w.0 += 1;
                w.1 += wait_ns;
                if wait_ns > 0 {
                    *self.barrier_blame.entry((bi, last)).or_default() += wait_ns;
                }
            }
            StepKind::SemWaitEnd {
                waited,
                wait_ns,
                failed,
                is_try,
                ..
            } => {
                let site = self.site(process, e.site);
                let si = self.obj(process, Kind::Semaphore, e.addr, site, e.time);
                let o = &mut self.objs[si as usize];
                o.wait.record(wait_ns);
                match failed {
                    Some(_) if is_try => o.trylock_failures += 1,
                    Some(ETIMEDOUT) => o.timeouts += 1,
                    Some(_) => o.errors += 1,
                    None => {
                        o.acquisitions += 1;
                        if waited {
                            o.contended += 1;
                        }
                    }
                }
                let w = self.obj_waits.entry((si, ti as u32)).or_default();
                w.0 += 1;
                w.1 += wait_ns;
            }
            StepKind::FutexWaitBegin { .. } => {
                let site = self.site(process, e.site);
                let fi = self.obj(process, Kind::Futex, e.addr, site, e.time);
                let o = &mut self.objs[fi as usize];
                o.settle(e.time);
                o.waiters.push(Waiter {
                    thread: ti as u32,
                    since: e.time,
                    charges: Vec::new(),
                });
            }
            StepKind::FutexWaitEnd {
                wait_ns, failed, ..
            } => self.on_futex_wait_end(ti, process, e, wait_ns, failed),
            StepKind::ThreadExit => {
                let th = &mut self.threads[ti];
                th.end = th.end.max(e.time);
            }
            StepKind::Lost { count } => {
                let th = &mut self.threads[ti];
                th.lost_annotated += count;
                th.lost = th.lost_recorded.max(th.lost_annotated);
            }
            StepKind::End => self.threads[ti].end = s.time,
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_acquired(
        &mut self,
        ti: usize,
        process: u32,
        s: &Step<'_>,
        shared: bool,
        waited: bool,
        matched: bool,
        wait_ns: u64,
        first_attempt: bool,
    ) {
        let e = s.event;
        let kind = e.op().and_then(Kind::of).unwrap_or(Kind::Mutex);
        let r = self.resolve(ti, process, kind, e.addr, e.site, e.time);
        let (oi, site) = (r.obj, r.site);
        self.objs[oi as usize].settle(e.time);
        let charges = if matched {
            self.objs[oi as usize]
                .take_waiter(ti as u32)
                .map(|w| w.charges)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        if waited {
            self.commit_blame(oi, ti as u32, (site, e.stack), wait_ns, &charges);
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
        if first_attempt {
            o.first_attempt += 1;
        }
        self.take_ownership(oi, ti, site, e.stack, shared);
    }

    #[allow(clippy::too_many_arguments)]
    fn on_acquire_failed(
        &mut self,
        ti: usize,
        process: u32,
        s: &Step<'_>,
        matched: bool,
        wait_ns: u64,
        errno: u64,
        is_try: bool,
    ) {
        let e = s.event;
        let kind = e.op().and_then(Kind::of).unwrap_or(Kind::Mutex);
        let r = self.resolve(ti, process, kind, e.addr, e.site, e.time);
        let (oi, site) = (r.obj, r.site);
        self.objs[oi as usize].settle(e.time);
        if matched {
            let charges = self.objs[oi as usize]
                .take_waiter(ti as u32)
                .map(|w| w.charges)
                .unwrap_or_default();
            self.commit_blame(oi, ti as u32, (site, e.stack), wait_ns, &charges);
        }
        let o = &mut self.objs[oi as usize];
        o.wait.record(wait_ns);
        let ss = &mut self.site_stats[r.ss as usize];
        ss.wait_ns += wait_ns;
        ss.max_wait_ns = ss.max_wait_ns.max(wait_ns);
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
        let timeout = errno == ETIMEDOUT && !is_try;
        let (tf, to, er) = if is_try {
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
    }

    /// Records that thread `ti` now holds object `oi` (the section's
    /// statistics are found again from the section at its release).
    fn take_ownership(&mut self, oi: u32, ti: usize, site: u32, stack: u32, shared: bool) {
        let o = &mut self.objs[oi as usize];
        if o.last_owner != u32::MAX && o.last_owner != ti as u32 {
            o.owner_changes += 1;
        }
        o.last_owner = ti as u32;
        o.holders.push(Holder {
            thread: ti as u32,
            culprit: Culprit {
                thread: ti as u32,
                site,
                stack,
            },
            shared,
        });
    }

    fn commit_blame(
        &mut self,
        oi: u32,
        waiter: u32,
        (waiter_site, waiter_stack): (u32, u32),
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
                    .entry((oi, waiter, waiter_site, waiter_stack, Culprit::NONE))
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
            let b = self
                .blame
                .entry((oi, waiter, waiter_site, waiter_stack, c))
                .or_default();
            b.0 += part;
            b.1 += 1;
        }
    }

    /// Closes thread `ti`'s section `sec` at raw time `t`, corrected
    /// clock `now`.
    fn release_hold(&mut self, ti: usize, process: u32, sec: &Section, t: u64, now: u64) {
        let r = self.resolve(ti, process, Kind::Mutex, sec.lock.addr, sec.site, t);
        let oi = r.obj;
        let hold = now.saturating_sub(sec.begin_clock);
        let o = &mut self.objs[oi as usize];
        o.settle(t);
        if let Some(j) = o.holders.iter().rposition(|x| x.thread == ti as u32) {
            crate::sync::take_at(&mut o.holders, j);
        }
        o.hold.record(hold);
        self.lock_threads[r.lt as usize].hold_ns += hold;
        self.site_stats[r.ss as usize].hold_ns += hold;
        if sec.stack != 0 {
            self.by_path.entry((oi, sec.stack)).or_default().hold_ns += hold;
        }
    }

    fn on_signal(&mut self, ti: usize, process: u32, op: Op, e: &lockscope_format::Event) {
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

    fn on_futex_wait_end(
        &mut self,
        ti: usize,
        process: u32,
        e: &lockscope_format::Event,
        wait: u64,
        failed: Option<u64>,
    ) {
        let site = self.site(process, e.site);
        let fi = self.obj(process, Kind::Futex, e.addr, site, e.time);
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
        self.commit_blame(
            fi,
            ti as u32,
            (site, e.stack),
            wait,
            &[(culprit, wait.max(1))],
        );
        let lti = self.lt(fi, ti as u32);
        let ssi = self.ss(fi, site);
        let o = &mut self.objs[fi as usize];
        o.wait.record(wait);
        let lt = &mut self.lock_threads[lti as usize];
        lt.wait_ns += wait;
        lt.max_wait_ns = lt.max_wait_ns.max(wait);
        let timed_out = failed == Some(ETIMEDOUT);
        if timed_out {
            o.timeouts += 1;
            lt.timeouts += 1;
        } else if failed.is_some() {
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
        if failed.is_none() {
            ss.acquisitions += 1;
            ss.contended += 1;
        } else if !timed_out {
            ss.trylock_failures += 1;
        }
        ss.wait_ns += wait;
        ss.max_wait_ns = ss.max_wait_ns.max(wait);
        if e.stack != 0 && failed.is_none() {
            let ps = self.by_path.entry((fi, e.stack)).or_default();
            ps.acquisitions += 1;
            ps.contended += 1;
            ps.wait_ns += wait;
            ps.max_wait_ns = ps.max_wait_ns.max(wait);
        }
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
