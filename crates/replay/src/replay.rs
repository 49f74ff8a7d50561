//! Deterministic discrete-event replay of a recorded run (PerfPlay §5),
//! and the what-if scenarios built on it.
//!
//! # Model
//! The trace's synchronization steps ([`lockscope_trace::sync`]) become, per
//! thread, a program of actions:
//! - compute segments take their recorded, overhead-corrected durations
//!   and need a CPU; a machine of `cpus` CPUs runs at most that many at
//!   once, the others queue first come, first served (ties: lower thread
//!   id);
//! - every lock is granted in the recorded order (ELSC, PerfPlay §5.2):
//!   the k-th recorded acquisition of a lock waits until the k-1 before it
//!   were granted and the lock is free (readers of a reader-writer lock
//!   share it), whatever the replayed timing;
//! - a condition wait that was signalled waits for the signal recorded
//!   last before its return; a semaphore wait for the last post; a futex
//!   wait for the last wake by another thread; a barrier departure for
//!   the round's last arrival; a join for the joined thread's end; a
//!   thread starts when its creator reaches `pthread_create` (at the
//!   recorded offset into that call);
//! - a wait with no recorded cause (a timed-out wait, a wake from outside
//!   the trace) lasts as long as it was recorded.
//!
//! Everything is integer arithmetic on an event queue ordered by (time,
//! sequence number): the same trace and options give the same result,
//! run after run. A replay that would deadlock (a release lost by the
//! recorder) grants the oldest blocked acquisition and counts it.
//!
//! # Memory
//! [`build`] streams the trace's steps once and spills each thread's
//! actions to an unlinked temporary file (`store`); a simulation reads
//! them back through one cursor per thread. What stays in memory grows
//! with the number of threads, locks, call sites and objects, plus one bit
//! per lock acquisition and one per signal: not with the trace's events.
//! [`build_in_memory`] keeps the actions in memory instead (the reference
//! the spilled replay is tested against, and small traces).

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::io;
use std::path::Path;

use rustc_hash::FxHashMap;

use lockscope_trace::input::Meta;
use lockscope_trace::sync::{for_each_step, BlockedOn, ObjId, SegKind, Step, StepKind};
use lockscope_trace::AnalysisError;

mod store;

/// Phase timings of a replay on stderr when `LOCKSCOPE_REPLAY_TIMINGS`
/// is set (where the time of a 100 M-event replay goes). An
/// environment variable rather than a command-line option: a profiling
/// aid, not part of the interface.
mod timings {
    use std::time::Instant;

    fn on() -> bool {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| std::env::var_os("LOCKSCOPE_REPLAY_TIMINGS").is_some())
    }

    /// User + system CPU seconds of the process so far (all threads),
    /// from `/proc/self/stat` (0 where it cannot be read): on a shared
    /// machine the wall time of a phase says little.
    fn cpu() -> f64 {
        let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        // The fields after the command name (which may hold spaces):
        // utime and stime are the 12th and 13th, in clock ticks (100/s).
        let rest = s.rsplit_once(')').map_or("", |x| x.1);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        (ticks(11) + ticks(12)) / 100.0
    }

    /// The start of a phase (`None` when timings are off).
    pub(super) fn start() -> Option<(Instant, f64)> {
        on().then(|| (Instant::now(), cpu()))
    }

    /// Prints what `what` says, when timings are on.
    pub(super) fn note(what: impl FnOnce() -> String) {
        if on() {
            eprintln!("replay timing: {}", what());
        }
    }

    /// Prints how long the phase started at `t` took.
    pub(super) fn phase(t: Option<(Instant, f64)>, what: &str) {
        if let Some((t, c)) = t {
            eprintln!(
                "replay timing: {what}: {:.3} s wall, {:.2} s CPU",
                t.elapsed().as_secs_f64(),
                cpu() - c
            );
        }
    }
}

/// JSON schema name of [`ReplayReport`].
pub const SCHEMA: &str = "lockscope.replay/1";

/// One action of a thread's program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run for `ns` on a CPU; `cs` is the innermost critical section
    /// (index in [`Program::sections`]) the work is done in, `u32::MAX`
    /// outside any.
    Compute {
        /// CPU work, ns (the recorded duration times the CPU share the
        /// thread had while it ran, see [`build`]).
        ns: u64,
        /// Innermost enclosing section key, or `u32::MAX`.
        cs: u32,
        /// Recorder overhead removed from it, ns (added back when
        /// replaying the run as recorded, [`Scenario::keep_overhead`]).
        oh: u32,
        /// It ended at a recorded memory access (detailed mode): its
        /// recorder cost is the one estimated from the trace
        /// ([`Program::access_ns`]), not the lock hooks' `event_ns`.
        access: bool,
        /// Time the thread was preempted in it, ns, measured from its
        /// run-queue delay samples (`Builder::preempted`); folded into `ns`
        /// and `oh` with the CPU share (`apply_share`), 0 afterwards.
        pre: u32,
    },
    /// Run for `ns` on a CPU inside an unlock that entered the kernel to
    /// wake a waiter of `lock` (only when the replayed release did wake
    /// somebody: gone when the lock is removed or nobody waits).
    UnlockWork {
        /// Lock index.
        lock: u32,
        /// CPU work, ns.
        ns: u64,
    },
    /// Wait `ns` without a CPU (a wait with no recorded cause).
    Sleep(u64),
    /// Take a lock: the `seq`-th recorded acquisition of it.
    Acquire {
        /// Lock index.
        lock: u32,
        /// Position in the lock's recorded order.
        seq: u64,
        /// Shared (reader) mode.
        shared: bool,
        /// Section key ([`Program::sections`]).
        cs: u32,
        /// Recorded hand-off latency (release to acquisition), applied
        /// when the replayed acquisition has to wait.
        handoff: u64,
    },
    /// Release a lock.
    Release {
        /// Lock index.
        lock: u32,
    },
    /// Something other threads may wait for happens now.
    Signal(u32),
    /// Wait until signal `id` has happened; `latency` (the recorded
    /// wake-up time) is added when the wait blocks.
    WaitFor {
        /// Signal id.
        id: u32,
        /// Recorded wake-up latency, ns.
        latency: u64,
    },
    /// Start thread `child` after `offset` ns.
    Spawn {
        /// Thread index.
        child: u32,
        /// Delay, ns.
        offset: u64,
    },
}

/// Most distinct call paths kept per section ([`Program::section_stacks`]):
/// enough to see whether the callers of one runtime return address agree.
pub const SECTION_STACKS: usize = 32;

/// A section key: the lock and the call site that opened the section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SectionKey {
    /// Lock index.
    pub lock: u32,
    /// Call site (pc).
    pub site: u64,
}

/// One thread's program.
#[derive(Clone, Debug, Default)]
pub struct ThreadProgram {
    /// Trace thread id.
    pub id: u32,
    /// Process trace id.
    pub process: u32,
    /// OS tid.
    pub tid: u32,
    /// Name.
    pub name: String,
    /// Recorded start (raw ns since trace start).
    pub start: u64,
    /// Recorded end (raw ns).
    pub end: u64,
    /// Started by a `Spawn` of its creator (else at its recorded start).
    pub spawned: bool,
}

/// Where a program's actions are.
#[derive(Debug)]
enum Store {
    Mem(Vec<Vec<Action>>),
    Spill(Spilled),
}

/// A program's actions in temporary files: per thread, the actions
/// without their work, and the work of its `Compute` and `UnlockWork`
/// actions, in the same order (see `store`).
#[derive(Debug)]
struct Spilled {
    actions: store::Stored,
    work: store::Stored,
    /// Signal ids counted from [`SIGNAL_BIT`] by the builder are
    /// remapped when read ([`remap_signal`]): the base is only known once
    /// the trace is read, and remapping as they are decoded costs less
    /// than rewriting the actions.
    base: u32,
}

impl Default for Store {
    fn default() -> Self {
        Store::Mem(Vec::new())
    }
}

/// One thread's actions, in program order ([`Program::actions`]).
pub struct Actions<'a>(ActionsInner<'a>);

enum ActionsInner<'a> {
    Mem(std::slice::Iter<'a, Action>),
    Spill {
        actions: store::Reader<'a>,
        work: store::Reader<'a>,
        base: u32,
    },
}

impl Iterator for Actions<'_> {
    type Item = Action;
    // Inlined, with the decoding: an action returned from a call is
    // written to memory field by field and read back whole by the
    // simulation, which then waits for the writes (see `store::decode`).
    #[inline(always)]
    fn next(&mut self) -> Option<Action> {
        match &mut self.0 {
            ActionsInner::Mem(it) => it.next().copied(),
            ActionsInner::Spill {
                actions,
                work,
                base,
            } => {
                let (buf, pos) = actions.data()?;
                store::decode(buf, pos, work, *base)
            }
        }
    }
}

/// A whole replayable run.
#[derive(Debug, Default)]
pub struct Program {
    /// Threads, densely indexed.
    pub threads: Vec<ThreadProgram>,
    /// Locks by index.
    pub locks: Vec<ObjId>,
    /// Section keys by index.
    pub sections: Vec<SectionKey>,
    /// Per section: the distinct (thread index, call path) pairs recorded
    /// at its acquisitions (at most [`SECTION_STACKS`]; empty: none was
    /// recorded). Only for
    /// naming the section in the user's code where its return address is
    /// runtime code (an out-of-line `std::mutex::lock()` is one return
    /// address for all its callers); kept apart from [`SectionKey`] so
    /// that the replay's sections do not depend on which acquisitions had
    /// their call path recorded.
    pub section_stacks: Vec<Vec<(u32, u32)>>,
    /// Number of signal ids (thread ends are `0..threads.len()`).
    pub signals: u32,
    /// Recording machine's CPUs (0 if unknown).
    pub cpus: u32,
    /// Recorder overhead removed from the compute segments, ns.
    pub overhead_ns: u64,
    /// The threads' work as replayed (compute segments after the
    /// overhead was removed, blocked time excluded), ns.
    pub work_ns: u64,
    /// Time the threads were preempted inside compute segments beyond
    /// what the CPU-share model explains, ns: measured from their
    /// run-queue delay samples and left out of the predictions
    /// (`apply_share`).
    pub preempted_ns: u64,
    /// Estimated cost of recording one memory access in a detailed-mode
    /// trace, ns (0: no estimate, fewer than [`ACCESS_SAMPLES`] back-to-back
    /// accesses): the median of the dense intervals between two
    /// consecutive accesses of a thread (`access_cost`). The recorder measures the cost of
    /// its lock hooks (`event_ns`, what the synchronization layer removes
    /// per event) but not of the access hooks, which cost several times
    /// more: without this, every access inside a critical section made it
    /// look longer than it is in the uninstrumented program, and
    /// `--ulcp-free` predicted gains that a fixed program did not have.
    pub access_ns: u64,
    /// The largest of the recorder's calibrated costs per event (an
    /// acquisition's, a release's, another event's), ns, over the trace's
    /// processes; 0 without a calibration. The part of a compute
    /// segment's `oh` that is calibrated cost is at most this (the rest is
    /// preemption taken out), which [`Grant::recorder_cost_pct`] scales.
    pub calibrated_max_ns: u64,
    /// Per lock: recorded acquisitions (turns).
    pub turns: Vec<u64>,
    /// The recorded hand-off latency (release to the woken waiter's
    /// acquisition) as a function of how long the waiter had waited: per
    /// power of two of the wait (entry `b`: waits of 2^(b-1) to 2^b ns),
    /// the median latency of the recorded hand-offs after such waits, ns
    /// (buckets without any take their nearest neighbour's; all 0 when
    /// nothing was handed over). A waiter that waited long has gone to
    /// sleep and takes a full wake-up to run; one that waited briefly was
    /// still on its way into the kernel: on 2 CPUs most recorded hand-offs
    /// take 0.1-1 us and those after long waits 10-50 us. What a what-if
    /// gives a waiter that it wakes ([`Scenario::arrival`],
    /// [`Program::wake_after`]).
    pub wake_by_wait: Vec<u64>,
    /// The median CPU time of a recorded unlock that entered the kernel to
    /// wake a waiter, ns: what a release that wakes somebody in a what-if,
    /// but woke nobody in the recording, costs its thread
    /// ([`Scenario::arrival`]).
    pub unlock_wake_ns: u64,
    /// The recording machine's wake-up latency of a sleeping waiter, ns
    /// (the trace header's `sleeping_wake_ns`, measured by the recorder
    /// before the program started; 0: not in the trace, recorded before
    /// format 1.2). What a waiter of a lock that a what-if turns into a
    /// reader-writer lock pays at least when woken ([`Scenario::arrival`]):
    /// [`Program::wake_by_wait`] only knows the recorded lock's hand-offs.
    pub sleeping_wake_ns: u64,
    /// Per lock: a bit per turn, set when it was a shared (reader)
    /// acquisition.
    shared_turns: Vec<Vec<u64>>,
    actions: Store,
}

impl Program {
    /// The actions of thread `t` (index in [`Program::threads`]), read
    /// back from the spill file when the program was built by [`build`].
    /// A read error ends the sequence early and is reported by
    /// [`Program::take_error`].
    pub fn actions(&self, t: usize) -> Actions<'_> {
        Actions(match &self.actions {
            Store::Mem(v) => ActionsInner::Mem(v.get(t).map_or(&[][..], |a| &a[..]).iter()),
            Store::Spill(st) => ActionsInner::Spill {
                actions: st.actions.reader(t),
                work: st.work.reader(t),
                base: st.base,
            },
        })
    }

    /// Number of actions of all threads.
    pub fn action_count(&self) -> u64 {
        match &self.actions {
            Store::Mem(v) => v.iter().map(|a| a.len() as u64).sum(),
            Store::Spill(st) => (0..self.threads.len()).map(|t| st.actions.count(t)).sum(),
        }
    }

    /// Bytes of the spill files (0 for an in-memory program).
    pub fn spilled_bytes(&self) -> u64 {
        match &self.actions {
            Store::Mem(_) => 0,
            Store::Spill(st) => st.actions.bytes() + st.work.bytes(),
        }
    }

    /// The first error reading the spill file back since the last call:
    /// a simulation that met one ended threads early, its result is void.
    pub fn take_error(&self) -> Option<io::Error> {
        match &self.actions {
            Store::Mem(_) => None,
            Store::Spill(st) => st.actions.take_error().or_else(|| st.work.take_error()),
        }
    }

    /// `Err` if reading the spill file back failed since the last check
    /// (the simulations since then are void).
    pub fn check(&self) -> Result<(), AnalysisError> {
        match self.take_error() {
            Some(e) => Err(spill_error(e)),
            None => Ok(()),
        }
    }

    /// The wake-up latency of a waiter woken after waiting `waited` ns
    /// ([`Program::wake_by_wait`]).
    pub fn wake_after(&self, waited: u64) -> u64 {
        self.wake_by_wait
            .get(wait_bucket(waited))
            .copied()
            .unwrap_or(0)
    }

    /// Whether lock `l` was taken shared (as a reader) in the recording.
    pub fn has_readers(&self, l: u32) -> bool {
        self.shared_turns
            .get(l as usize)
            .is_some_and(|v| v.iter().any(|&w| w != 0))
    }

    /// Recorded wall time: first start to last end.
    pub fn recorded_wall(&self) -> u64 {
        let start = self.threads.iter().map(|t| t.start).min().unwrap_or(0);
        let end = self.threads.iter().map(|t| t.end).max().unwrap_or(0);
        end.saturating_sub(start)
    }
}

/// Where the builder puts actions and compute intervals.
enum Sink {
    Mem {
        actions: Vec<Vec<Action>>,
        /// Recorded compute intervals: (start, end, thread, action index).
        ivs: Vec<(u64, u64, u32, u32)>,
    },
    Spill {
        /// Per thread: the actions, without their work.
        actions: store::Streams,
        /// Per thread, per `Compute` or `UnlockWork` action: its recorded
        /// interval and work, varints: start (see [`iv_start_delta`]),
        /// length, `ns`, then `oh << 2 | access << 1 | is UnlockWork`.
        ivs: store::Streams,
        /// Per thread: the end of its last interval in `ivs`.
        ivs_end: Vec<u64>,
        error: Option<io::Error>,
    },
}

impl Default for Sink {
    fn default() -> Self {
        Sink::Mem {
            actions: Vec::new(),
            ivs: Vec::new(),
        }
    }
}

#[derive(Default)]
struct Builder {
    p: Program,
    sink: Sink,
    thread_ix: FxHashMap<u32, u32>,
    tid_ix: FxHashMap<(u32, u32), u32>,
    lock_ix: FxHashMap<ObjId, u32>,
    section_ix: FxHashMap<SectionKey, u32>,
    /// Per thread: stack of open sections (lock, section key).
    open: Vec<Vec<(u32, u32)>>,
    started: Vec<bool>,
    /// Last signal per (class, object): (id, time, thread).
    last_signal: FxHashMap<(u8, ObjId), (u32, u64, u32)>,
    /// Barrier arrivals: (barrier, round, thread) -> (signal id, time).
    arrivals: BTreeMap<(ObjId, u64, u32), (u32, u64)>,
    /// Per thread: its last step was a memory access.
    last_mem: Vec<bool>,
    /// Histogram (1 ns buckets) of the intervals between two consecutive
    /// memory accesses of a thread ([`Program::access_ns`]).
    access_hist: Vec<u64>,
    /// Upper bound of [`Program::access_ns`] ([`access_cost`]), from the
    /// recorder's calibrated cost per event; `None` without one.
    access_cap: Option<u64>,
    /// Last release per lock: (raw time, thread).
    last_release: Vec<(u64, u32)>,
    /// Per thread: its last run-queue delay sample, ns.
    delay: Vec<Option<u64>>,
    /// Per power of two of the wait before it: histogram of the
    /// nonzero hand-off latencies ([`Program::wake_by_wait`]).
    handoffs: Vec<LatencyHist>,
    /// Histogram of the unlocks that entered the kernel
    /// ([`Program::unlock_wake_ns`]).
    unlocks: LatencyHist,
}

impl Builder {
    fn new(meta: &Meta, sink: Sink) -> Self {
        let mut b = Builder {
            sink,
            ..Builder::default()
        };
        let mut threads: Vec<_> = meta.threads.values().collect();
        threads.sort_by_key(|t| t.id);
        for t in threads {
            let name = meta
                .thread_names
                .get(&t.id)
                .cloned()
                .unwrap_or_else(|| t.name.clone());
            let i = b.thread(t.id, t.process, t.tid, name);
            b.p.threads[i as usize].start = t.start_ns;
        }
        b.p.cpus = meta.header.cpus;
        b.p.sleeping_wake_ns = meta.header.sleeping_wake_ns;
        b.access_cap = meta
            .overhead
            .values()
            .map(|o| o.event_ns)
            .filter(|e| e.is_finite() && *e > 0.0)
            .reduce(f64::max)
            .map(|e| (e * IN_SITU_COST_FACTOR).round() as u64);
        b.p.calibrated_max_ns = meta
            .overhead
            .values()
            .flat_map(|o| [o.acquire_ns, o.release_ns, o.event_ns])
            .filter(|e| e.is_finite() && *e > 0.0)
            .fold(0.0f64, f64::max)
            .round() as u64;
        b
    }

    fn thread(&mut self, id: u32, process: u32, tid: u32, name: String) -> u32 {
        if let Some(&i) = self.thread_ix.get(&id) {
            return i;
        }
        let i = self.p.threads.len() as u32;
        self.thread_ix.insert(id, i);
        if tid != 0 {
            self.tid_ix.insert((process, tid), i);
        }
        self.p.threads.push(ThreadProgram {
            id,
            process,
            tid,
            name,
            ..ThreadProgram::default()
        });
        self.open.push(Vec::new());
        self.started.push(false);
        i
    }

    fn lock(&mut self, id: ObjId) -> u32 {
        let n = self.p.locks.len() as u32;
        *self.lock_ix.entry(id).or_insert_with(|| {
            self.p.locks.push(id);
            self.p.turns.push(0);
            self.p.shared_turns.push(Vec::new());
            self.last_release.push((0, u32::MAX));
            n
        })
    }

    /// The next turn of lock `l` (its position in the recorded order).
    fn turn(&mut self, l: u32, shared: bool) -> u64 {
        let seq = self.p.turns[l as usize];
        self.p.turns[l as usize] += 1;
        if shared {
            set_bit(&mut self.p.shared_turns[l as usize], seq);
        }
        seq
    }

    fn section(&mut self, key: SectionKey) -> u32 {
        let n = self.p.sections.len() as u32;
        *self.section_ix.entry(key).or_insert_with(|| {
            self.p.sections.push(key);
            self.p.section_stacks.push(Vec::new());
            n
        })
    }

    /// Remembers thread `ti`'s call path `stack` for section `cs`.
    fn section_stack(&mut self, cs: u32, ti: u32, stack: u32) {
        if stack == 0 {
            return;
        }
        if let Some(v) = self.p.section_stacks.get_mut(cs as usize) {
            if v.len() < SECTION_STACKS && !v.contains(&(ti, stack)) {
                v.push((ti, stack));
            }
        }
    }

    fn signal_id(&mut self) -> u32 {
        // Ids 0..threads are the thread ends; they are assigned at the
        // end (threads may still appear), so signals count from a base
        // fixed there: keep a plain counter here and offset later.
        let id = self.p.signals;
        self.p.signals += 1;
        id | SIGNAL_BIT
    }

    fn acquire(&mut self, ti: u32, s: &Step<'_>, lock: ObjId, site: u64, shared: bool) {
        let l = self.lock(lock);
        let seq = self.turn(l, shared);
        let cs = self.section(SectionKey { lock: l, site });
        self.section_stack(cs, ti, s.event.stack);
        self.open[ti as usize].push((l, cs));
        // A woken waiter takes a while to run: the time from the release
        // that let it in to its acquisition, as recorded.
        let (rel, by) = self.last_release[l as usize];
        let handoff = if matches!(s.segment.kind, SegKind::Blocked(BlockedOn::Lock))
            && by != ti
            && by != u32::MAX
            && rel >= s.time.saturating_sub(s.segment.raw_ns)
        {
            (s.time - rel.min(s.time)).min(s.segment.corrected_ns)
        } else {
            0
        };
        if handoff > 0 {
            let b = wait_bucket(s.segment.corrected_ns);
            if self.handoffs.len() <= b {
                self.handoffs.resize_with(b + 1, LatencyHist::default);
            }
            self.handoffs[b].add(handoff);
        }
        self.push(
            ti,
            Action::Acquire {
                lock: l,
                seq,
                shared,
                cs,
                handoff,
            },
        );
    }

    fn release(&mut self, ti: u32, lock: ObjId, t: u64) {
        let l = self.lock(lock);
        self.last_release[l as usize] = (t, ti);
        let open = &mut self.open[ti as usize];
        if let Some(i) = open.iter().rposition(|o| o.0 == l) {
            open.remove(i);
        }
        self.push(ti, Action::Release { lock: l });
    }

    fn push(&mut self, ti: u32, a: Action) {
        match &mut self.sink {
            Sink::Mem { actions, .. } => {
                if actions.len() <= ti as usize {
                    actions.resize_with(ti as usize + 1, Vec::new);
                }
                actions[ti as usize].push(a);
            }
            Sink::Spill { actions, error, .. } => {
                if let Err(e) = actions.push(ti as usize, |b| store::encode(&a, b)) {
                    error.get_or_insert(e);
                }
            }
        }
    }

    /// Pushes a `Compute` or `UnlockWork` action whose recorded interval
    /// was `start..end` (its work is scaled by the CPU share the thread
    /// had then, see [`Builder::cpu_shares`]).
    fn push_work(&mut self, ti: u32, start: u64, end: u64, a: Action) {
        match &mut self.sink {
            Sink::Mem { .. } => {
                self.interval(ti, start, end);
                self.push(ti, a);
            }
            Sink::Spill {
                actions,
                ivs,
                ivs_end,
                error,
            } => {
                if ivs_end.len() <= ti as usize {
                    ivs_end.resize(ti as usize + 1, 0);
                }
                let delta = iv_start_delta(ivs_end[ti as usize], start);
                ivs_end[ti as usize] = end;
                let (ns, flags, pre) = match a {
                    Action::Compute {
                        ns,
                        oh,
                        access,
                        pre,
                        ..
                    } => (ns, u64::from(oh) << 2 | u64::from(access) << 1, pre),
                    Action::UnlockWork { ns, .. } => (ns, 1, 0),
                    _ => (0, 0, 0),
                };
                let r = actions
                    .push(ti as usize, |b| store::encode(&a, b))
                    .and_then(|_| {
                        ivs.push(ti as usize, |b| {
                            store::put(b, delta);
                            store::put(b, end.saturating_sub(start));
                            store::put(b, ns);
                            store::put(b, flags);
                            store::put(b, u64::from(pre));
                        })
                    });
                if let Err(e) = r {
                    error.get_or_insert(e);
                }
            }
        }
    }

    /// Actions of thread `ti` so far.
    fn action_count(&self, ti: u32) -> u32 {
        match &self.sink {
            Sink::Mem { actions, .. } => actions.get(ti as usize).map_or(0, |a| a.len() as u32),
            Sink::Spill { actions, .. } => actions.count(ti as usize) as u32,
        }
    }

    /// A recorded compute interval of thread `ti` whose work is its
    /// next action, in memory (see [`Builder::cpu_shares`]).
    fn interval(&mut self, ti: u32, start: u64, end: u64) {
        let at = self.action_count(ti);
        if let Sink::Mem { ivs, .. } = &mut self.sink {
            ivs.push((start, end, ti, at));
        }
    }

    /// A wait that ended at `s`: on `cause` (signal id, time, thread) if
    /// it happened after the wait began, else as long as it was recorded.
    fn wait(&mut self, ti: u32, s: &Step<'_>, cause: Option<(u32, u64, u32)>, me_ok: bool) {
        // A call that did not block (a `sem_trywait`, a `sem_wait` that
        // found the semaphore posted) ends a compute segment, already
        // pushed as work by `step`: nothing to wait for. Replaying it as
        // a Sleep too counted that work twice (python3's GIL program, whose
        // main thread makes thousands of `sem_trywait` calls, replayed
        // 36-59 % long).
        if !matches!(s.segment.kind, SegKind::Blocked(_)) {
            return;
        }
        let begin = s.time.saturating_sub(s.segment.raw_ns);
        match cause {
            Some((id, t, by)) if t >= begin && (me_ok || by != ti) => {
                let latency = s.time.saturating_sub(t).min(s.segment.corrected_ns);
                self.push(ti, Action::WaitFor { id, latency })
            }
            _ => {
                if s.segment.corrected_ns > 0 {
                    self.push(ti, Action::Sleep(s.segment.corrected_ns));
                }
            }
        }
    }

    fn step(&mut self, s: &Step<'_>) {
        let ti = match self.thread_ix.get(&s.thread) {
            Some(&i) => i,
            None => self.thread(s.thread, s.process, 0, format!("thread#{}", s.thread)),
        };
        let seg = s.segment;
        let is_mem = matches!(s.kind, StepKind::Memory(_));
        if is_mem {
            if self.last_mem.len() <= ti as usize {
                self.last_mem.resize(ti as usize + 1, false);
            }
            if self.last_mem[ti as usize] && seg.kind == SegKind::Compute {
                if self.access_hist.is_empty() {
                    self.access_hist = vec![0; ACCESS_HIST];
                }
                if let Some(c) = self.access_hist.get_mut(seg.raw_ns as usize) {
                    *c += 1;
                }
            }
        }
        if let Some(m) = self.last_mem.get_mut(ti as usize) {
            *m = is_mem;
        }
        if !self.started[ti as usize] {
            self.started[ti as usize] = true;
            self.p.threads[ti as usize].start = s.time.saturating_sub(seg.raw_ns);
        }
        self.p.overhead_ns += seg.cost_ns;
        let blocked = matches!(seg.kind, SegKind::Blocked(_));
        let preempted = self.preempted(ti, s);
        // The work before this step. A segment the recorder's cost used
        // up entirely still goes in (as 0 ns of work carrying its `oh`):
        // the as-recorded replay adds that cost back, and dropping it lost
        // 1-3 % of the recorded wall once the costs were measured on the
        // real hooks (a short hold is often shorter than a hook).
        if !blocked && (seg.corrected_ns > 0 || seg.cost_ns > 0) {
            self.p.work_ns += seg.corrected_ns;
            let cs = self.open[ti as usize].last().map_or(u32::MAX, |o| o.1);
            if let Some((child, Some(offset))) = self.spawn_point(s) {
                // The child started during this call, at the recorded
                // offset into it.
                self.push(ti, Action::Spawn { child, offset });
            }
            let a = if let (SegKind::Unlocking, StepKind::ReleaseEnd { lock, .. }) =
                (seg.kind, s.kind)
            {
                self.unlocks.add(seg.corrected_ns);
                Action::UnlockWork {
                    lock: self.lock(lock),
                    ns: seg.corrected_ns,
                }
            } else {
                Action::Compute {
                    ns: seg.corrected_ns,
                    cs,
                    oh: seg.cost_ns.min(u64::from(u32::MAX)) as u32,
                    access: is_mem,
                    pre: preempted.min(u64::from(u32::MAX)) as u32,
                }
            };
            self.push_work(ti, s.time.saturating_sub(seg.raw_ns), s.time, a);
        }
        match s.kind {
            StepKind::Acquired { section, .. } => {
                self.acquire(ti, s, section.lock, section.site, section.shared())
            }
            StepKind::Released(section)
            | StepKind::HeldAtExit(section)
            | StepKind::HoldDropped(section) => self.release(ti, section.lock, s.time),
            StepKind::CondWaitBegin {
                released: Some(section),
                ..
            } => self.release(ti, section.lock, s.time),
            StepKind::CondWaitEnd {
                cond,
                timed_out,
                section,
                ..
            } => {
                let cause = if timed_out {
                    None
                } else {
                    self.last_signal.get(&(0, cond)).copied()
                };
                self.wait(ti, s, cause, false);
                // The re-acquisition is in the mutex's recorded order; its
                // wait is part of the condition wait's segment.
                let l = self.lock(section.lock);
                let seq = self.turn(l, false);
                let cs = self.section(SectionKey {
                    lock: l,
                    site: section.site,
                });
                self.open[ti as usize].push((l, cs));
                self.push(
                    ti,
                    Action::Acquire {
                        lock: l,
                        seq,
                        shared: false,
                        cs,
                        handoff: 0,
                    },
                );
            }
            StepKind::CondSignal { cond, .. } => self.signal(ti, s, 0, cond),
            StepKind::SemPost { sem } => self.signal(ti, s, 1, sem),
            StepKind::FutexWake { futex, .. } => self.signal(ti, s, 2, futex),
            StepKind::SemWaitEnd { sem, waited, .. } => {
                let cause = if waited {
                    self.last_signal.get(&(1, sem)).copied()
                } else {
                    None
                };
                self.wait(ti, s, cause, true);
            }
            StepKind::FutexWaitEnd { futex, failed, .. } => {
                let cause = if failed.is_none() {
                    self.last_signal.get(&(2, futex)).copied()
                } else {
                    None
                };
                self.wait(ti, s, cause, false);
            }
            StepKind::BarrierArrive { barrier, round } => {
                let id = self.signal_id();
                self.arrivals.insert((barrier, round, ti), (id, s.time));
                self.push(ti, Action::Signal(id));
            }
            StepKind::BarrierDepart {
                barrier,
                round,
                last_arriver,
                arrived_now,
                ..
            } => {
                if arrived_now {
                    let id = self.signal_id();
                    self.arrivals.insert((barrier, round, ti), (id, s.time));
                    self.push(ti, Action::Signal(id));
                }
                let last = self.thread_ix.get(&last_arriver).copied();
                let cause = last
                    .filter(|&l| l != ti)
                    .and_then(|l| self.arrivals.get(&(barrier, round, l)))
                    .map(|&(id, t)| (id, t, u32::MAX));
                if arrived_now && cause.is_none() {
                    // It arrived last and left at once.
                } else {
                    self.wait(ti, s, cause, false);
                }
            }
            StepKind::JoinEnd { tid } => {
                let target = self.tid_ix.get(&(s.process, tid as u32)).copied();
                match target {
                    Some(t) if t != ti => {
                        let end = self.p.threads[t as usize].end;
                        let latency = if end > 0 {
                            s.time.saturating_sub(end).min(seg.corrected_ns)
                        } else {
                            0
                        };
                        self.push(ti, Action::WaitFor { id: t, latency })
                    }
                    _ => self.wait(ti, s, None, false),
                }
            }
            StepKind::ThreadExit => self.p.threads[ti as usize].end = s.time,
            StepKind::ThreadCreate { .. } => {
                if let Some((child, None)) = self.spawn_point(s) {
                    // The child started after the call returned: as long
                    // after as recorded (a busy machine can take a while
                    // to run a new thread).
                    let c = &mut self.p.threads[child as usize];
                    c.spawned = true;
                    let offset = c.start.saturating_sub(s.time);
                    self.push(ti, Action::Spawn { child, offset });
                }
            }
            StepKind::End => {
                self.p.threads[ti as usize].end = s.time;
                if blocked && seg.corrected_ns > 0 {
                    self.push(ti, Action::Sleep(seg.corrected_ns));
                }
            }
            _ => {
                // A blocked segment ending here without a replayable cause
                // (a timed lock that timed out, an abandoned wait).
                if blocked
                    && seg.corrected_ns > 0
                    && !matches!(
                        (seg.kind, s.kind),
                        (SegKind::Blocked(BlockedOn::Lock), StepKind::Acquired { .. })
                    )
                {
                    self.push(ti, Action::Sleep(seg.corrected_ns));
                }
            }
        }
    }

    /// The time thread `ti` was preempted in the compute segment before
    /// step `s`, from its run-queue delay samples: the growth of the
    /// delay since the thread's previous sample, all of it put on the
    /// segment that ends at the sample, up to its length. The preload
    /// samples after a long interval with no lock call (the way a
    /// preemption shows in the trace: one segment milliseconds long) and
    /// every 2 ms, so the part that happened in earlier, short segments is
    /// small, and is dropped rather than guessed. Not a compute segment:
    /// 0. The kernel's run-queue delay, not the thread's CPU time: a
    /// thread blocked in a call lockscope does not hook (a `read` from
    /// disk, `poll`) is off the CPU without being preempted, and wall
    /// minus CPU time took that for preemption (`git grep --threads=4`
    /// lost a quarter of its replayed run that way).
    fn preempted(&mut self, ti: u32, s: &Step<'_>) -> u64 {
        let seg = s.segment;
        let ti = ti as usize;
        if self.delay.len() <= ti {
            self.delay.resize(ti + 1, None);
        }
        let StepKind::RunDelay { wait_ns } = s.kind else {
            return 0;
        };
        let out = match self.delay[ti] {
            Some(prev) if seg.kind == SegKind::Compute => {
                wait_ns.saturating_sub(prev).min(seg.corrected_ns)
            }
            _ => 0,
        };
        self.delay[ti] = Some(wait_ns);
        out
    }

    /// For a `ThreadCreate` step: the child and, if it started during the
    /// call, its offset into the call (then marked spawned); `None` if it
    /// started after the call returned.
    fn spawn_point(&mut self, s: &Step<'_>) -> Option<(u32, Option<u64>)> {
        let StepKind::ThreadCreate { tid } = s.kind else {
            return None;
        };
        let child = *self.tid_ix.get(&(s.process, tid as u32))?;
        let c = &mut self.p.threads[child as usize];
        if c.spawned {
            return None;
        }
        let begin = s.time.saturating_sub(s.segment.raw_ns);
        if c.start >= s.time || s.segment.corrected_ns == 0 {
            return Some((child, None));
        }
        c.spawned = true;
        let offset = c.start.saturating_sub(begin).min(s.segment.corrected_ns);
        Some((child, Some(offset)))
    }

    fn signal(&mut self, ti: u32, s: &Step<'_>, class: u8, obj: ObjId) {
        let id = self.signal_id();
        self.last_signal.insert((class, obj), (id, s.time, ti));
        self.push(ti, Action::Signal(id));
    }

    fn finish(self) -> Result<Program, AnalysisError> {
        let (mut p, pass) = self.finish_deferred()?;
        if let Some(pass) = pass {
            let (removed, pre) = pass.run(&p);
            p.overhead_ns += removed;
            p.preempted_ns += pre;
            p.check()?;
        }
        Ok(p)
    }

    /// The program, and for a spilled one the pass that still has to
    /// write the work of its compute actions ([`SharePass::run`]): its
    /// simulations may start before the pass ends ([`build_and_report`]).
    fn finish_deferred(mut self) -> Result<(Program, Option<SharePass>), AnalysisError> {
        // Signal ids: thread ends first, then the others.
        let base = self.p.threads.len() as u32;
        self.p.signals += base;
        self.p.access_ns = access_cost(&self.access_hist, self.access_cap);
        let access_ns = self.p.access_ns;
        self.p.wake_by_wait = wake_by_wait(&self.handoffs);
        self.p.unlock_wake_ns = self.unlocks.median();
        let n = u64::from(self.p.cpus);
        match std::mem::take(&mut self.sink) {
            Sink::Mem {
                mut actions,
                mut ivs,
            } => {
                for a in actions.iter_mut().flatten() {
                    remap_signal(a, base);
                    self.p.overhead_ns += correct_access(a, access_ns);
                }
                if n > 0 {
                    self.p.preempted_ns += cpu_shares_sorted(n, &mut ivs, &mut actions);
                }
                // The actions given no share (an empty interval, or no
                // CPU count): their measured preemption alone. Idempotent
                // for the others.
                for a in actions.iter_mut().flatten() {
                    self.p.preempted_ns += apply_share(a, 1.0);
                }
                self.p.actions = Store::Mem(actions);
                Ok((self.p, None))
            }
            Sink::Spill {
                actions,
                ivs,
                error,
                ..
            } => {
                if let Some(e) = error {
                    return Err(spill_error(e));
                }
                let (spilled, ivs) = (|| {
                    let actions = actions.finish()?;
                    let ivs = ivs.finish()?;
                    let work = store::Stored::new()?;
                    Ok((
                        Spilled {
                            actions,
                            work,
                            base,
                        },
                        ivs,
                    ))
                })()
                .map_err(spill_error)?;
                self.p.actions = Store::Spill(spilled);
                let pass = SharePass {
                    n,
                    threads: self.p.threads.len(),
                    access_ns,
                    ivs,
                };
                Ok((self.p, Some(pass)))
            }
        }
    }
}

fn spill_error(e: io::Error) -> AnalysisError {
    AnalysisError::Io {
        path: "replay spill file".into(),
        source: e,
    }
}

/// Signal ids counted from [`SIGNAL_BIT`] while building come after the
/// `base` thread ends.
fn remap_signal(a: &mut Action, base: u32) {
    match a {
        Action::Signal(id) | Action::WaitFor { id, .. } if *id & SIGNAL_BIT != 0 => {
            *id = (*id & !SIGNAL_BIT) + base;
        }
        _ => {}
    }
}

/// Access intervals above this (ns) are not counted: not back-to-back.
const ACCESS_HIST: usize = 4096;

/// The power-of-two bucket of a wait, for [`Program::wake_by_wait`].
fn wait_bucket(ns: u64) -> usize {
    (64 - ns.leading_zeros() as usize).min(WAIT_BUCKETS - 1)
}

/// Buckets of [`Program::wake_by_wait`]: waits up to 2^47 ns.
const WAIT_BUCKETS: usize = 48;

/// [`Program::wake_by_wait`] from the per-bucket histograms: medians,
/// and for a bucket without hand-offs its nearest neighbour's (the lower
/// one on a tie: shorter latencies are the conservative choice for a
/// waiter, they make contention cheaper).
fn wake_by_wait(h: &[LatencyHist]) -> Vec<u64> {
    let med: Vec<Option<u64>> = (0..WAIT_BUCKETS)
        .map(|b| h.get(b).filter(|x| x.count() > 0).map(LatencyHist::median))
        .collect();
    (0..WAIT_BUCKETS)
        .map(|b| {
            (0..WAIT_BUCKETS)
                .flat_map(|d| [b.checked_sub(d), Some(b + d)])
                .flatten()
                .find_map(|i| med.get(i).copied().flatten())
                .unwrap_or(0)
        })
        .collect()
}

/// A log-linear histogram of latencies (4 sub-buckets per power of two:
/// a median within 19 %), for [`Program::wake_by_wait`]. 512 bytes, allocated
/// per power of two of the wait; exact medians would keep every sample
/// of a lock taken millions of times.
#[derive(Clone)]
struct LatencyHist([u32; 128]);

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist([0; 128])
    }
}

impl LatencyHist {
    fn bucket(v: u64) -> usize {
        if v < 4 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as usize; // >= 2
        let sub = ((v >> (e - 2)) & 3) as usize;
        (e * 4 + sub - 4).min(127)
    }
    /// The smallest value of bucket `b` (its representative: latencies
    /// are rounded down, never up).
    fn low(b: usize) -> u64 {
        if b < 4 {
            return b as u64;
        }
        let e = (b + 4) / 4;
        let sub = ((b + 4) % 4) as u64;
        (4 + sub) << (e - 2)
    }
    fn add(&mut self, v: u64) {
        let b = Self::bucket(v);
        self.0[b] = self.0[b].saturating_add(1);
    }
    fn count(&self) -> u64 {
        self.0.iter().map(|&c| u64::from(c)).sum()
    }
    fn median(&self) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let mut seen = 0u64;
        for (b, &c) in self.0.iter().enumerate() {
            seen += u64::from(c);
            if seen * 2 >= n {
                return Self::low(b);
            }
        }
        0
    }
}

/// Back-to-back access intervals needed for an estimate.
pub const ACCESS_SAMPLES: u64 = 1000;

/// The `num`/`den` quantile of a histogram with 1 ns buckets (`None`
/// when it is empty).
fn quantile(h: &[u64], num: u64, den: u64) -> Option<u64> {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return None;
    }
    let want = (total * num).div_ceil(den).max(1);
    let mut acc = 0;
    for (ns, &c) in h.iter().enumerate() {
        acc += c;
        if acc >= want {
            return Some(ns as u64);
        }
    }
    None
}

/// The in-situ cost of recording one memory access, from the histogram
/// of the intervals between two consecutive accesses of a thread (1 ns
/// buckets; 0 with fewer than [`ACCESS_SAMPLES`] samples), at most
/// `cap` ns when there is one.
///
/// An interval is the hook's cost plus the program's work between the
/// two accesses. The *dense* intervals, those at most twice the 10th
/// percentile, hold little work (a loop over an array); their median is
/// what a hook costs where the program runs, with the cache misses its
/// ring writes and the recorder's threads cause. The 10th percentile
/// alone (the first estimate) is the hook at its cheapest: on a table
/// scan (`rw_table`, 512 reads per lookup, ~0.8 ns each in the plain
/// build) the intervals were 30 ns at the 10th percentile, 50 ns at the
/// median and 61 ns on average, so a third of every access's cost stayed
/// in the replayed work: the replay without the recorder took 462 ms for
/// a program that runs in 10 ms alone, and `--rwlock` predicted 3.1x for
/// a fix measured at 2.0x. Not the mean of all intervals (the
/// alternative): it includes real work wherever accesses are sparse.
///
/// `cap`: a plausibility bound from the recorder's own calibration (a
/// few times its measured cost per event), so that a program whose
/// accesses are all far apart (every interval mostly work) does not have
/// that work taken for the hook's cost.
fn access_cost(h: &[u64], cap: Option<u64>) -> u64 {
    let total: u64 = h.iter().sum();
    if total < ACCESS_SAMPLES {
        return 0;
    }
    let p10 = quantile(h, 1, 10).unwrap_or(0);
    let dense = &h[..h.len().min(2 * p10 as usize + 1)];
    let median = quantile(dense, 1, 2).unwrap_or(p10).max(p10);
    match cap {
        Some(c) if c > 0 => median.min(c),
        _ => median,
    }
}

/// How many times its hot-cache calibration the recorder's cost per event
/// may be in a running program: measured at about 3 times (an access hook
/// in a table scan: 50 ns in situ against a calibrated 16.4 ns per event;
/// PARSEC fluidanimate's lock events: 0.69 s of extra CPU for 9.2 M events
/// against 0.22 s calibrated). The bound of `access_cost`, and the far
/// end of a prediction's range where the recorder's cost is a large share
/// of the work ([`Grant::recorder_cost_pct`]).
pub const IN_SITU_COST_FACTOR: f64 = 4.0;

/// Removes from a compute segment that ended at a memory access the part
/// of the access's recording cost the synchronization layer did not
/// (it removed `oh`); returns what it removed.
fn correct_access(a: &mut Action, access_ns: u64) -> u64 {
    match a {
        Action::Compute {
            ns,
            oh,
            access: true,
            ..
        } => {
            let extra = access_ns.saturating_sub(u64::from(*oh)).min(*ns);
            *ns -= extra;
            *oh = (u64::from(*oh) + extra).min(u64::from(u32::MAX)) as u32;
            extra
        }
        _ => 0,
    }
}

/// Scales a compute action by the CPU share its thread had, and takes
/// out the preemption its run-queue delay samples measured beyond that share.
/// Returns the preempted time taken out, ns.
///
/// Two estimates of the CPU work of a segment of `ns` wall time: the
/// share model's, `ns x share` (the machine's CPUs shared evenly among the
/// program's threads computing then), and the measured one, `ns - pre`.
/// The work is the smaller: the measurement catches what the model cannot
/// see (the recorder's own threads, or any other load, taking the CPUs),
/// and the model keeps the program's own oversubscription as the replay's
/// CPU model replays it. Taking the measurement alone broke that: with 4
/// threads on 2 CPUs every thread's work shrank to its CPU time while the
/// replay still shared the CPUs 4 ways and granted locks in the recorded
/// order, and threads that had been preempted reached their turns early:
/// `git grep --threads=4` replayed 47 ms of lock waits where 0.2 ms were
/// recorded. What is taken out goes to `oh`, which the as-recorded replay
/// adds back. `pre` is 0 afterwards, so a second call does nothing more.
fn apply_share(a: &mut Action, share: f64) -> u64 {
    match a {
        Action::Compute { ns, oh, pre, .. } => {
            let modelled = *ns as f64 * share;
            let measured = ns.saturating_sub(u64::from(*pre)) as f64;
            let work = modelled.min(measured);
            let taken = (modelled - work).round() as u64;
            *ns = work.round() as u64;
            *oh = ((f64::from(*oh) * share).round() as u64 + taken).min(u64::from(u32::MAX)) as u32;
            *pre = 0;
            taken
        }
        Action::UnlockWork { ns, .. } => {
            *ns = (*ns as f64 * share).round() as u64;
            0
        }
        _ => 0,
    }
}

/// The CPU share of a compute interval on `n` CPUs.
///
/// Recorded compute segments are wall time: while more threads were
/// runnable than the recording machine had CPUs, each ran only part of
/// the time. Each segment is converted to the CPU work it did, assuming
/// the CPUs were shared evenly (processor sharing) among the threads in a
/// compute segment at each moment; the replay shares its CPUs the same
/// way, so an unchanged run replays as recorded.
///
/// `acc` integrates the share `min(1, n / k)` over time, `k` the number
/// of intervals open; a segment's share is the integral over it divided
/// by its length. Two implementations: [`cpu_shares_sorted`] (in memory,
/// all interval ends sorted) and [`cpu_shares_merged`] (streaming, a
/// merge of the per-thread interval streams); both add the same terms in
/// the same order, so they give bit-identical shares (tested).
struct ShareCurve {
    n: u64,
    k: u64,
    acc: f64,
    last: Option<u64>,
}

impl ShareCurve {
    fn new(n: u64) -> Self {
        ShareCurve {
            n,
            k: 0,
            acc: 0.0,
            last: None,
        }
    }
    /// Advances to `t` (an interval end or start) and returns the
    /// integral up to it.
    fn at(&mut self, t: u64) -> f64 {
        let last = *self.last.get_or_insert(t);
        if t > last {
            let share = if self.k <= self.n {
                1.0
            } else {
                self.n as f64 / self.k as f64
            };
            self.acc += (t - last) as f64 * share;
            self.last = Some(t);
        }
        self.acc
    }
}

fn share_of(a: u64, b: u64, acc_a: f64, acc_b: f64) -> f64 {
    ((acc_b - acc_a) / (b - a) as f64).clamp(0.0, 1.0)
}

fn cpu_shares_sorted(n: u64, ivs: &mut [(u64, u64, u32, u32)], actions: &mut [Vec<Action>]) -> u64 {
    let mut pts: Vec<(u64, i64)> = Vec::with_capacity(ivs.len() * 2);
    for &(a, b, _, _) in ivs.iter() {
        if b > a {
            pts.push((a, 1));
            pts.push((b, -1));
        }
    }
    pts.sort_unstable();
    let mut curve: Vec<(u64, f64)> = Vec::new();
    let mut c = ShareCurve::new(n);
    for (t, d) in pts {
        let acc = c.at(t);
        if curve.last().is_none_or(|x| x.0 != t) {
            curve.push((t, acc));
        }
        c.k = (c.k as i64 + d) as u64;
    }
    let at = |t: u64| -> f64 {
        match curve.binary_search_by_key(&t, |c| c.0) {
            Ok(i) => curve[i].1,
            Err(_) => 0.0,
        }
    };
    let mut taken = 0;
    for &(a, b, ti, ai) in ivs.iter() {
        if b <= a {
            continue;
        }
        let share = share_of(a, b, at(a), at(b));
        if let Some(x) = actions
            .get_mut(ti as usize)
            .and_then(|v| v.get_mut(ai as usize))
        {
            taken += apply_share(x, share);
        }
    }
    taken
}

/// The pass that writes the work of a spilled program's compute actions
/// once the trace is read ([`cpu_shares_merged`]).
struct SharePass {
    n: u64,
    threads: usize,
    access_ns: u64,
    /// The recorded intervals and work ([`Sink::Spill`]).
    ivs: store::Stored,
}

impl SharePass {
    /// Writes the work into `p`'s store and completes it, whatever
    /// happens (an error is kept in the store: it voids the simulations,
    /// [`Program::check`]). Returns the recorder overhead it removed
    /// ([`correct_access`]) and the preempted time ([`apply_share`]).
    fn run(self, p: &Program) -> (u64, u64) {
        let Store::Spill(st) = &p.actions else {
            return (0, 0);
        };
        let _close = store::CloseOnDrop(&st.work);
        let mut removed = (0, 0);
        let r = cpu_shares_merged(
            self.n,
            self.threads,
            self.access_ns,
            &mut removed,
            &self.ivs,
            &st.work,
        );
        if let Err(e) = r {
            st.work.close(None, Some(e));
        }
        removed
    }
}

/// Writes the final work of every spilled `Compute` and `UnlockWork`
/// action: the recorded work less the access cost
/// ([`correct_access`]), scaled by its CPU share. The shares come from a
/// merge, in time order, of every thread's interval stream (each is
/// time-ordered: a thread's intervals follow each other), holding one
/// interval per thread: what [`cpu_shares_sorted`] computes with a sort of
/// every interval end. Only the work is written, not the actions: a
/// rewrite of every action here took as long as reading and interpreting
/// the trace.
fn cpu_shares_merged(
    n: u64,
    threads: usize,
    access_ns: u64,
    removed: &mut (u64, u64),
    ivs: &store::Stored,
    work: &store::Stored,
) -> io::Result<()> {
    let mut out = store::Writer::default();
    // Per thread: a cursor over its intervals, and the end of the last
    // one read ([`iv_start_delta`]).
    let mut readers: Vec<(store::Reader<'_>, u64)> =
        (0..threads).map(|t| (ivs.reader(t), 0)).collect();
    // Per thread: the interval being merged (start, end, its action),
    // and the integral at its start.
    let mut cur: Vec<Option<(u64, u64, Action)>> = vec![None; threads];
    let mut acc_a = vec![0f64; threads];
    let mut fin = |out: &mut store::Writer, t: usize, a: Action, share: Option<f64>| {
        let (access, pre) = put_final_work(out, work, t, a, share, access_ns)?;
        removed.0 += access;
        removed.1 += pre;
        Ok::<(), io::Error>(())
    };
    if n > 0 {
        // (point time, thread, is end); the order of points at one
        // instant does not change the integral.
        let mut heap: BinaryHeap<Reverse<(u64, u32, bool)>> = BinaryHeap::new();
        for (t, c) in cur.iter_mut().enumerate() {
            *c = next_interval(&mut readers[t], n, &mut |a| fin(&mut out, t, a, None))?;
            if let Some((a, _, _)) = *c {
                heap.push(Reverse((a, t as u32, false)));
            }
        }
        let mut curve = ShareCurve::new(n);
        // The next point of a thread replaces its last one at the top of
        // the heap (one sift instead of a pop and a push: the heap was
        // most of this pass). Every key has its own thread, so the order
        // the points come out in is the keys' order, however the heap
        // gets there.
        while let Some(mut top) = heap.peek_mut() {
            let Reverse((p, t, is_end)) = *top;
            let acc = curve.at(p);
            let t = t as usize;
            let Some((a, b, act)) = cur[t] else {
                PeekMut::pop(top);
                continue;
            };
            if !is_end {
                acc_a[t] = acc;
                curve.k += 1;
                *top = Reverse((b, t as u32, true));
                continue;
            }
            curve.k -= 1;
            fin(&mut out, t, act, Some(share_of(a, b, acc_a[t], acc)))?;
            cur[t] = next_interval(&mut readers[t], n, &mut |a| fin(&mut out, t, a, None))?;
            match cur[t] {
                Some((a, _, _)) => *top = Reverse((a, t as u32, false)),
                None => {
                    PeekMut::pop(top);
                }
            }
        }
    }
    // Without CPU shares (n = 0), or what the merge left (nothing).
    for (t, r) in readers.iter_mut().enumerate() {
        while let Some((_, _, a)) = next_interval(r, n, &mut |a| fin(&mut out, t, a, None))? {
            fin(&mut out, t, a, None)?;
        }
    }
    if let Some(e) = ivs.take_error() {
        return Err(e);
    }
    out.finish(work)
}

/// The next interval of a thread's interval stream that gets a CPU share
/// (start, end, its action with the recorded work), handing the actions
/// of the intervals before it that get none (empty, or `n` = 0) to
/// `none`.
fn next_interval(
    (r, last_end): &mut (store::Reader<'_>, u64),
    n: u64,
    none: &mut dyn FnMut(Action) -> io::Result<()>,
) -> io::Result<Option<(u64, u64, Action)>> {
    while let Some((buf, pos)) = r.data() {
        let start = iv_start(*last_end, store::get(buf, pos));
        let len = store::get(buf, pos);
        *last_end = start.wrapping_add(len);
        let ns = store::get(buf, pos);
        let flags = store::get(buf, pos);
        let pre = store::get(buf, pos) as u32;
        let a = if flags & 1 != 0 {
            Action::UnlockWork { lock: 0, ns }
        } else {
            Action::Compute {
                ns,
                cs: u32::MAX,
                oh: (flags >> 2) as u32,
                access: flags & 2 != 0,
                pre,
            }
        };
        if len > 0 && n > 0 {
            return Ok(Some((start, start.saturating_add(len), a)));
        }
        none(a)?;
    }
    Ok(None)
}

/// An interval's start as written: the distance from the end of the
/// thread's interval before (its work between two steps), a varint of 1-2
/// bytes instead of the 5 of an absolute time in ns, zigzag-encoded in
/// case an interval starts before the previous one ended (timestamps are
/// the recorder's; nothing here assumes they are consistent).
fn iv_start_delta(last_end: u64, start: u64) -> u64 {
    let d = start.wrapping_sub(last_end) as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

/// The inverse of [`iv_start_delta`].
fn iv_start(last_end: u64, z: u64) -> u64 {
    let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
    last_end.wrapping_add(d as u64)
}

/// Writes the final work of action `a` to thread `t`'s work stream:
/// [`correct_access`], then the CPU share (1 when it gets none), as the
/// in-memory build does. Returns what [`correct_access`] and
/// [`apply_share`] took out (overhead, preemption).
fn put_final_work(
    out: &mut store::Writer,
    work: &store::Stored,
    t: usize,
    mut a: Action,
    share: Option<f64>,
    access_ns: u64,
) -> io::Result<(u64, u64)> {
    let removed = correct_access(&mut a, access_ns);
    let pre = apply_share(&mut a, share.unwrap_or(1.0));
    out.push(work, t, |b| store::put_work(&a, b))?;
    Ok((removed, pre))
}

fn bit(v: &[u64], k: u64) -> bool {
    v.get((k / 64) as usize)
        .is_some_and(|w| w >> (k % 64) & 1 != 0)
}

fn set_bit(v: &mut Vec<u64>, k: u64) {
    let i = (k / 64) as usize;
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    v[i] |= 1 << (k % 64);
}

const SIGNAL_BIT: u32 = 1 << 31;

/// Builds the replayable program of a trace file, streaming its steps and
/// spilling the actions to a temporary file (bounded memory, see the
/// module doc).
pub fn build(path: &Path, meta: &Meta) -> Result<Program, AnalysisError> {
    let mut b = Builder::new(meta, spill_sink()?);
    let t = timings::start();
    for_each_step(path, meta, true, |s, _| b.step(s))?;
    timings::phase(t, "build: read, interpret, spill");
    let t = timings::start();
    let p = b.finish();
    timings::phase(t, "build: CPU shares");
    p
}

fn spill_sink() -> Result<Sink, AnalysisError> {
    Ok(Sink::Spill {
        actions: store::Streams::new().map_err(spill_error)?,
        ivs: store::Streams::new().map_err(spill_error)?,
        ivs_end: Vec::new(),
        error: None,
    })
}

/// [`build`] with the actions held in memory (about 32 bytes per action).
pub fn build_in_memory(path: &Path, meta: &Meta) -> Result<Program, AnalysisError> {
    let mut b = Builder::new(meta, Sink::default());
    for_each_step(path, meta, true, |s, _| b.step(s))?;
    b.finish()
}

/// A change to the recorded run.
#[derive(Clone, Debug, Default)]
pub struct Scenario {
    /// Locks whose acquisitions and releases are removed.
    pub remove_locks: Vec<u32>,
    /// Section keys whose work is scaled: (section key, percent kept).
    pub shrink: Vec<(u32, u32)>,
    /// Section keys that only read: they take their lock shared (as if it
    /// were a reader-writer lock and they its readers).
    pub readers: Vec<u32>,
    /// Per lock, turns (positions in its recorded order) that take it
    /// shared: `--rwlock`, from the read sets of a detailed-mode trace.
    pub reader_turns: Vec<(u32, Vec<u64>)>,
    /// Add the recorder's overhead back to the work (replay the run as
    /// it was recorded, to compare with the recorded wall time).
    pub keep_overhead: bool,
    /// PerfPlay's ULCP-free transformation (§4): the sections of the locks
    /// named here exclude only the sections of their conflict class
    /// ([`UlcpFree::classes`]; with [`Scenario::arrival`]).
    pub ulcp_free: Option<UlcpFree>,
    /// Record when every acquisition was attempted and released
    /// ([`SimResult::section_times`]).
    pub record_sections: bool,
    /// Grant every lock in the order the threads reach it in this replay,
    /// with the waiting policy of the real lock ([`Grant`]), instead of in
    /// the recorded order. What-if scenarios use it: a change that moves
    /// threads in time changes who gets a lock next, and the recorded
    /// order would make threads wait for turns that no longer come first
    /// (see docs/replay.md, "Locks stay locks"). Dependencies that carry
    /// data (signals, semaphores, barriers, joins, futex wakes) keep their
    /// recorded pairing either way.
    pub arrival: Option<Grant>,
}

/// How locks are granted in arrival order ([`Scenario::arrival`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// A release hands the lock to the first waiter (FIFO hand-off: the
    /// lock stays reserved while the waiter wakes up), instead of freeing
    /// it for whoever comes first, the woken waiter retrying after its
    /// wake-up latency (barging: glibc's mutexes and most others).
    pub handoff: bool,
    /// Reader-writer locks prefer writers (glibc's
    /// `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`: a reader waits while
    /// a writer waits) instead of readers (glibc's default: a reader
    /// enters whenever no writer holds the lock, and writers can starve).
    pub prefer_writers: bool,
    /// Wake-up latency of a waiter, in percent of the recorded one
    /// ([`Program::wake_after`]): the range of a prediction varies it.
    pub latency_pct: u32,
    /// The recorder's cost per lock event where the program ran, in
    /// percent of its calibration (100: as calibrated). Above 100 each
    /// compute segment that ended at a lock event loses that much more
    /// of the calibrated cost ([`Program::calibrated_max_ns`] at most per
    /// segment, from its removed `oh`): the range of a prediction whose
    /// trace the recorder's cost dominates spans it, because in a running
    /// program the hooks cost several times their hot-cache calibration
    /// ([`IN_SITU_COST_FACTOR`]) and the sections they lengthened made
    /// convoys the program alone does not have. Segments that ended at a
    /// memory access are left alone: their cost is estimated from the
    /// trace itself ([`Program::access_ns`]).
    pub recorder_cost_pct: u32,
}

impl Default for Grant {
    fn default() -> Self {
        Grant {
            handoff: false,
            prefer_writers: false,
            latency_pct: 100,
            recorder_cost_pct: 100,
        }
    }
}

/// Per lock turned ULCP-free: the conflict class of each recorded
/// acquisition (by its position in the lock's recorded order).
#[derive(Clone, Debug, Default)]
pub struct UlcpFree {
    /// Lock index -> per turn, its conflict class ([`FREE`]: it conflicts
    /// with no section of another thread and takes no lock). With
    /// [`Scenario::arrival`] (needed: without it the classes are ignored),
    /// the sections of one class exclude each other through a lock of
    /// their own, granted in arrival order: the finer lock a programmer
    /// would write (one lock for the data that really is shared), where
    /// PerfPlay's per-pair dependencies in recorded order kept the
    /// convoy of the recorded run.
    pub classes: HashMap<u32, Vec<u32>>,
}

/// [`UlcpFree::classes`]: a section that needs no lock.
pub const FREE: u32 = u32::MAX;

/// Result of one simulation.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SimResult {
    /// Replayed wall time (first start to last end), ns.
    pub wall_ns: u64,
    /// Per thread (in [`Program::threads`] order): replayed end, ns since
    /// the first start.
    pub ends: Vec<u64>,
    /// Per thread: time spent waiting for locks in the replay, ns.
    pub lock_wait: Vec<u64>,
    /// Per lock ([`Program::locks`]): time threads waited for it, ns.
    pub lock_wait_by_lock: Vec<u64>,
    /// Per lock: CPU time its unlocks spent waking waiters, ns.
    pub unlock_work_by_lock: Vec<u64>,
    /// Acquisitions granted out of order, or signals assumed, to break
    /// a deadlock.
    pub forced: u64,
    /// Per lock, per recorded turn: (attempted, released), ns since the
    /// first start (`u64::MAX` if it never happened); empty unless
    /// [`Scenario::record_sections`].
    #[serde(skip)]
    pub section_times: Vec<Vec<(u64, u64)>>,
}

/// The state index of a lock taken outside arrival order (or of a section
/// that takes no lock).
const NO_STATE: u32 = u32::MAX;

/// Why a thread runs its pending acquisition again (arrival order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wake {
    /// First attempt.
    None,
    /// Woken by a release: it tries again and may lose to a thread that
    /// came meanwhile (barging).
    Retry,
    /// The lock was handed to it ([`Grant::handoff`]): it has it.
    Granted,
}

/// A lock granted in arrival order ([`Scenario::arrival`]). A mutex is a
/// reader-writer lock that never has readers.
#[derive(Default)]
struct ALock {
    writer: bool,
    readers: u32,
    /// Threads waiting for it, in the order they queued: (thread, shared,
    /// waiting since).
    queue: std::collections::VecDeque<(u32, bool, u64)>,
    /// Writers in `queue`.
    queued_writers: u32,
    /// Writers woken that have not retried yet (for writer preference,
    /// they still wait).
    woken_writers: u32,
    /// The least wake-up latency of a woken waiter, ns (before
    /// [`Grant::latency_pct`]): the machine's wake-up of a sleeping waiter
    /// for a mutex that the scenario turns into a reader-writer lock, 0
    /// for the others.
    sleeps_ns: u64,
}

impl ALock {
    fn can_enter(&self, shared: bool, prefer_writers: bool) -> bool {
        if shared {
            !self.writer && (!prefer_writers || self.queued_writers + self.woken_writers == 0)
        } else {
            !self.writer && self.readers == 0
        }
    }
    fn enter(&mut self, shared: bool) {
        if shared {
            self.readers += 1;
        } else {
            self.writer = true;
        }
    }
    fn leave(&mut self) {
        if self.writer {
            self.writer = false;
        } else {
            self.readers = self.readers.saturating_sub(1);
        }
    }
    /// After a release: wakes the waiters the lock's policy lets in (all
    /// waiting readers, or the first writer), or, with a FIFO hand-off,
    /// grants it to them at once. Returns whether it woke anybody (the
    /// unlock entered the kernel).
    /// A woken waiter runs after the wake-up latency the recording shows
    /// for waits as long as its own ([`Program::wake_after`]).
    fn wake(&mut self, g: Grant, p: &Program, sim: &mut Sim, state: &mut [Wake]) -> bool {
        if self.writer || self.readers > 0 || self.queue.is_empty() {
            return false;
        }
        // glibc's reader-preferring rwlock wakes every waiting reader when
        // a writer leaves; the writer-preferring one a waiting writer
        // first. A mutex has writers only.
        let readers_first = if g.prefer_writers {
            self.queued_writers == 0
        } else {
            self.queue.iter().any(|w| w.1)
        };
        let mut woken: Vec<(u32, bool, u64)> = Vec::new();
        if readers_first {
            self.queue.retain(|&w| {
                if w.1 {
                    woken.push(w);
                }
                !w.1
            });
        } else if let Some(i) = self.queue.iter().position(|w| !w.1) {
            woken.extend(self.queue.remove(i));
        }
        for &(t, shared, since) in &woken {
            // A reader-writer lock made by the scenario: glibc's rwlock
            // waiters block in the kernel at once (it does not spin), so
            // each one woken pays a full wake-up of a sleeping thread,
            // however briefly it waited. The recorded mutex's hand-off
            // after a wait as long (the alternative, and the model before
            // the latency was measured) mostly went to waiters that had
            // not fallen asleep yet: 0.3-0.5 us where the rwlock's took
            // 33 us, and gains predicted for a fix that was 0.2-0.9x as
            // fast. The larger of the two: a recorded hand-off that took
            // longer (the program's load) still stands.
            let lat = p
                .wake_after(sim.now.saturating_sub(since))
                .max(self.sleeps_ns)
                * u64::from(g.latency_pct)
                / 100;
            if !shared {
                self.queued_writers = self.queued_writers.saturating_sub(1);
            }
            if g.handoff {
                self.enter(shared);
                state[t as usize] = Wake::Granted;
            } else {
                if !shared {
                    self.woken_writers += 1;
                }
                state[t as usize] = Wake::Retry;
            }
            sim.at(sim.now + lat, t);
            sim.woke(t);
        }
        !woken.is_empty()
    }
}

/// Breaks a deadlock in arrival order: a lock whose holder never
/// releases it (a release the recorder lost) is freed for its waiters.
fn force_arrival(
    alocks: &mut [ALock],
    g: Option<Grant>,
    p: &Program,
    sim: &mut Sim,
    state: &mut [Wake],
    res: &mut SimResult,
) -> bool {
    let Some(g) = g else {
        return false;
    };
    for al in alocks.iter_mut() {
        if !al.queue.is_empty() {
            al.writer = false;
            al.readers = 0;
            res.forced += 1;
            return al.wake(g, p, sim, state);
        }
    }
    false
}

struct LockState {
    /// Lowest turn not granted yet.
    next: u64,
    exclusive: bool,
    readers: u32,
    waiting: BTreeMap<u64, (u32, bool)>,
    /// Turns above `next` already granted (readers that went ahead).
    granted: std::collections::BTreeSet<u64>,
    /// A bit per turn: shared (reader) acquisition.
    shared: Vec<u64>,
    /// Number of turns.
    turns: u64,
    /// (from, lowest exclusive turn at or after it): the last answer of
    /// [`LockState::next_writer`], asked again and again while a run of
    /// readers waits.
    nw_cache: std::cell::Cell<(u64, u64)>,
}

impl LockState {
    /// Readers need no order among themselves: a reader may go as soon
    /// as every writer before it in the recorded order has; a writer
    /// waits for its turn and an empty lock.
    fn can_grant(&self, k: u64, shared: bool) -> bool {
        if self.exclusive || k < self.next {
            return false;
        }
        if shared {
            let w = self.next_writer(self.next);
            k < w || k == self.next
        } else {
            k == self.next && self.readers == 0
        }
    }

    /// The lowest exclusive turn at or after `from` (`u64::MAX` if none).
    fn next_writer(&self, from: u64) -> u64 {
        // The last answer `w` for `f` holds for every `from` in [f, w]:
        // no exclusive turn lies between. Asked with a `from` that moves
        // up by one with each reader granted, an exact-match cache missed
        // every time and rescanned the whole run of readers: quadratic in
        // the run's length (node's OpenSSL rwlock, 184,000 read locks and
        // hardly a write: 4.2 s of a 5.6 s report).
        let (f, w) = self.nw_cache.get();
        if f <= from && from <= w {
            return w;
        }
        let mut i = (from / 64) as usize;
        let mut mask = !0u64 << (from % 64);
        let w = loop {
            if (i as u64) * 64 >= self.turns {
                break u64::MAX;
            }
            let excl = !self.shared.get(i).copied().unwrap_or(0) & mask;
            if excl != 0 {
                let k = i as u64 * 64 + u64::from(excl.trailing_zeros());
                break if k < self.turns { k } else { u64::MAX };
            }
            i += 1;
            mask = !0;
        };
        self.nw_cache.set((from, w));
        w
    }
}

/// Runs the program on a machine of `cpus` CPUs under `sc`.
///
/// The CPUs are shared evenly among the threads that compute
/// (processor sharing): with `k` of them on `cpus` CPUs each progresses
/// at `min(1, cpus / k)`. A virtual work clock makes that cheap: a
/// compute started when the clock read `v` with `w` ns of work ends when
/// it reads `v + w`, whatever happens meanwhile.
pub fn simulate(p: &Program, cpus: u32, sc: &Scenario) -> SimResult {
    simulate_logged(p, cpus, sc, false).0
}

/// Who let whom run, for the critical path ([`simulate_logged`]).
#[derive(Clone, Debug, Default)]
pub struct PathLog {
    /// Per thread: (time woken, waker thread), in time order. A thread is
    /// woken when the lock it waits for is granted to it, or the signal
    /// (condition, semaphore, futex, barrier arrival, thread end) it
    /// waits for happens.
    pub wakes: Vec<Vec<(u64, u32)>>,
    /// Per thread: (start time, creator) if started by a creator.
    pub spawns: Vec<Option<(u64, u32)>>,
    /// Per thread: first time it ran.
    pub starts: Vec<u64>,
    /// Per thread: critical sections (start, end, section key), by end.
    pub holds: Vec<Vec<(u64, u64, u32)>>,
    /// Per thread: waits with no recorded cause (start, end), in time
    /// order.
    pub sleeps: Vec<Vec<(u64, u64)>>,
}

/// [`simulate`], also logging the wake-ups and sections when `log`.
pub fn simulate_logged(
    p: &Program,
    cpus: u32,
    sc: &Scenario,
    log: bool,
) -> (SimResult, Option<PathLog>) {
    let n = p.threads.len();
    let mut sim = Sim {
        cpus: f64::from(cpus.max(1)),
        timed: BinaryHeap::new(),
        running: BinaryHeap::new(),
        vclock: 0.0,
        vlast: 0,
        seq: 0,
        now: 0,
        cur: 0,
        log: log.then(|| PathLog {
            wakes: vec![Vec::new(); n],
            spawns: vec![None; n],
            starts: vec![u64::MAX; n],
            holds: vec![Vec::new(); n],
            sleeps: vec![Vec::new(); n],
        }),
    };
    let mut open: Vec<Vec<(u32, u32, u64)>> = vec![Vec::new(); if log { n } else { 0 }];
    // Per thread: its actions, the next one first.
    let mut pc: Vec<std::iter::Peekable<Actions<'_>>> =
        (0..n).map(|t| p.actions(t).peekable()).collect();
    // A bit per signal id: it happened.
    let mut done: Vec<u64> = vec![0; (p.signals as usize).div_ceil(64)];
    let mut sig_waiters: FxHashMap<u32, Vec<(u32, u64)>> = FxHashMap::default();
    let mut lock_blocked: Vec<Option<u64>> = vec![None; n];
    let mut unlock_woke = vec![false; n];
    let mut res = SimResult {
        ends: vec![0; n],
        lock_wait: vec![0; n],
        lock_wait_by_lock: vec![0; p.locks.len()],
        unlock_work_by_lock: vec![0; p.locks.len()],
        ..SimResult::default()
    };
    let mut finished = vec![false; n];
    let removed: Vec<bool> = (0..p.locks.len())
        .map(|l| sc.remove_locks.contains(&(l as u32)))
        .collect();
    // The recorder's in-situ cost variant (Grant::recorder_cost_pct).
    let extra_pct = sc
        .arrival
        .map_or(0, |g| u64::from(g.recorder_cost_pct.saturating_sub(100)));
    let cal_max = p.calibrated_max_ns;
    let mut scale: Vec<u32> = vec![100; p.sections.len()];
    for &(cs, pct) in &sc.shrink {
        if let Some(s) = scale.get_mut(cs as usize) {
            *s = pct;
        }
    }
    let mut reader = vec![false; p.sections.len()];
    for &cs in &sc.readers {
        if let Some(r) = reader.get_mut(cs as usize) {
            *r = true;
        }
    }
    // Per lock, a bit per turn: shared. As recorded, plus the sections
    // the scenario makes readers (found by reading the actions once).
    let mut modes: Vec<Vec<u64>> = p.shared_turns.clone();
    if !sc.readers.is_empty() {
        for t in 0..n {
            for a in p.actions(t) {
                if let Action::Acquire { lock, seq, cs, .. } = a {
                    if reader.get(cs as usize).copied().unwrap_or(false) {
                        set_bit(&mut modes[lock as usize], seq);
                    }
                }
            }
        }
    }
    let mut rw_changed = vec![false; p.locks.len()];
    for &cs in &sc.readers {
        if let Some(k) = p.sections.get(cs as usize) {
            rw_changed[k.lock as usize] = true;
        }
    }
    for (l, turns) in &sc.reader_turns {
        if let Some(m) = modes.get_mut(*l as usize) {
            for &k in turns {
                set_bit(m, k);
            }
            rw_changed[*l as usize] = true;
        }
    }
    if sc.record_sections {
        res.section_times = p
            .turns
            .iter()
            .map(|&m| vec![(u64::MAX, u64::MAX); m as usize])
            .collect();
    }
    // Per thread: turns held, innermost last (lock, turn).
    let mut held: Vec<Vec<(u32, u64, u32)>> = vec![Vec::new(); n];
    // Arrival order: one state per lock, then one per conflict class of
    // the locks turned ULCP-free (`class_base[l]`: the first).
    let mut class_base: Vec<u32> = vec![u32::MAX; p.locks.len()];
    let mut alocks: Vec<ALock> = Vec::new();
    let mut wake_state: Vec<Wake> = vec![Wake::None; n];
    // Per thread: its running compute is work the scenario added, not
    // one of its actions (a release that wakes a waiter it did not wake
    // in the recording pays for entering the kernel).
    let mut synthetic = vec![false; n];
    if sc.arrival.is_some() {
        alocks.resize_with(p.locks.len(), ALock::default);
        // Before the ULCP-free classes below mark their locks changed:
        // those stay mutexes.
        for (al, _) in alocks.iter_mut().zip(&rw_changed).filter(|x| *x.1) {
            al.sleeps_ns = p.sleeping_wake_ns;
        }
        if let Some(u) = &sc.ulcp_free {
            let mut ls: Vec<_> = u.classes.iter().collect();
            ls.sort_by_key(|x| *x.0);
            for (&l, cl) in ls {
                let k = cl
                    .iter()
                    .filter(|&&c| c != FREE)
                    .max()
                    .map_or(0, |&c| c + 1);
                if let Some(b) = class_base.get_mut(l as usize) {
                    *b = alocks.len() as u32;
                    alocks.resize_with(alocks.len() + k as usize, ALock::default);
                    rw_changed[l as usize] = true;
                }
            }
        }
    }
    let mut locks: Vec<LockState> = modes
        .into_iter()
        .zip(&p.turns)
        .map(|(shared, &turns)| LockState {
            next: 0,
            exclusive: false,
            readers: 0,
            waiting: BTreeMap::new(),
            granted: Default::default(),
            shared,
            turns,
            nw_cache: std::cell::Cell::new((u64::MAX, u64::MAX)),
        })
        .collect();
    let t0 = p.threads.iter().map(|t| t.start).min().unwrap_or(0);
    for (i, t) in p.threads.iter().enumerate() {
        if !t.spawned {
            sim.at(t.start - t0, i as u32);
        }
    }
    let mut left = n;
    loop {
        let Some((ti, computed)) = sim.next() else {
            if left == 0 {
                break;
            }
            // Deadlock: grant the lock whose waited-for turn is closest,
            // or else assume the lowest signal waited for.
            if !force_arrival(
                &mut alocks,
                sc.arrival,
                p,
                &mut sim,
                &mut wake_state,
                &mut res,
            ) && !force_progress(&mut locks, &mut sim, &mut res)
            {
                let Some(&id) = sig_waiters.keys().min() else {
                    break;
                };
                res.forced += 1;
                signal(id, &mut done, &mut sig_waiters, &mut sim);
            }
            continue;
        };
        let now = sim.now;
        let ti_us = ti as usize;
        sim.cur = ti;
        if let Some(lg) = &mut sim.log {
            lg.starts[ti_us] = lg.starts[ti_us].min(now);
        }
        if computed && !std::mem::take(&mut synthetic[ti_us]) {
            pc[ti_us].next();
        }
        // Run the thread until it has to wait.
        loop {
            let Some(&a) = pc[ti_us].peek() else {
                if !finished[ti_us] {
                    finished[ti_us] = true;
                    left -= 1;
                    res.ends[ti_us] = now;
                    signal(ti, &mut done, &mut sig_waiters, &mut sim);
                }
                break;
            };
            match a {
                Action::Compute { .. } | Action::UnlockWork { .. } => {
                    let ns = match a {
                        // Kept as recorded unless the scenario changes the
                        // lock: removed, or made a reader-writer lock (then
                        // only when the replayed release woke somebody).
                        Action::UnlockWork { lock, ns }
                            if !removed[lock as usize]
                                && ((!rw_changed[lock as usize] && sc.arrival.is_none())
                                    || unlock_woke[ti_us]) =>
                        {
                            ns
                        }
                        Action::UnlockWork { .. } => 0,
                        _ => compute_ns(&a, &scale, sc.keep_overhead, extra_pct, cal_max),
                    };
                    if ns == 0 {
                        pc[ti_us].next();
                        continue;
                    }
                    if let Action::UnlockWork { lock, .. } = a {
                        res.unlock_work_by_lock[lock as usize] += ns;
                    }
                    sim.compute(ti, ns);
                    break;
                }
                Action::Sleep(ns) => {
                    pc[ti_us].next();
                    if let Some(lg) = &mut sim.log {
                        lg.sleeps[ti_us].push((now, now + ns));
                    }
                    sim.at(now + ns, ti);
                    break;
                }
                Action::Acquire {
                    lock,
                    seq: k,
                    shared,
                    handoff,
                    cs,
                } => {
                    // As recorded, or made a reader by the scenario.
                    let shared = shared
                        || reader.get(cs as usize).copied().unwrap_or(false)
                        || bit(&locks[lock as usize].shared, k);
                    if removed[lock as usize] {
                        pc[ti_us].next();
                        continue;
                    }
                    if let Some(t) = res
                        .section_times
                        .get_mut(lock as usize)
                        .and_then(|v| v.get_mut(k as usize))
                    {
                        t.0 = t.0.min(now);
                    }
                    if let Some(g) = sc.arrival {
                        let class = sc
                            .ulcp_free
                            .as_ref()
                            .and_then(|u| u.classes.get(&lock))
                            .map(|c| c.get(k as usize).copied().unwrap_or(FREE));
                        let st = match class {
                            None => lock,
                            Some(FREE) => NO_STATE,
                            Some(c) => class_base[lock as usize].saturating_add(c),
                        };
                        let Some(al) = alocks.get_mut(st as usize) else {
                            // A section that conflicts with no other
                            // thread's: it takes no lock at all.
                            pc[ti_us].next();
                            held[ti_us].push((lock, k, NO_STATE));
                            if log {
                                open[ti_us].push((lock, cs, now));
                            }
                            continue;
                        };
                        let retry = std::mem::replace(&mut wake_state[ti_us], Wake::None);
                        if retry == Wake::Retry && !shared {
                            al.woken_writers = al.woken_writers.saturating_sub(1);
                        }
                        if retry == Wake::Granted || al.can_enter(shared, g.prefer_writers) {
                            if retry != Wake::Granted {
                                al.enter(shared);
                            }
                            pc[ti_us].next();
                            held[ti_us].push((lock, k, st));
                            if log {
                                open[ti_us].push((lock, cs, now));
                            }
                            if let Some(since) = lock_blocked[ti_us].take() {
                                res.lock_wait[ti_us] += now - since;
                                res.lock_wait_by_lock[lock as usize] += now - since;
                            }
                            continue;
                        }
                        // Waits: queued behind those that came first (a
                        // woken waiter that lost the race to a barging
                        // thread goes to the back, as on a futex queue).
                        let since = *lock_blocked[ti_us].get_or_insert(now);
                        al.queue.push_back((ti, shared, since));
                        if !shared {
                            al.queued_writers += 1;
                        }
                        break;
                    }
                    let l = &mut locks[lock as usize];
                    if l.can_grant(k, shared) {
                        grant(l, k, shared);
                        pc[ti_us].next();
                        held[ti_us].push((lock, k, NO_STATE));
                        if log {
                            if let Action::Acquire { cs, .. } = a {
                                open[ti_us].push((lock, cs, now));
                            }
                        }
                        // The next in order may be a reader that can share.
                        let _ = wake_next(l, &mut sim);
                        if let Some(since) = lock_blocked[ti_us].take() {
                            res.lock_wait[ti_us] += now - since + handoff;
                            res.lock_wait_by_lock[lock as usize] += now - since + handoff;
                            if handoff > 0 {
                                sim.at(now + handoff, ti);
                                break;
                            }
                        }
                        continue;
                    }
                    l.waiting.insert(k, (ti, shared));
                    if lock_blocked[ti_us].is_none() {
                        lock_blocked[ti_us] = Some(now);
                    }
                    break;
                }
                Action::Release { lock } => {
                    pc[ti_us].next();
                    if removed[lock as usize] {
                        continue;
                    }
                    if log {
                        if let Some(i) = open[ti_us].iter().rposition(|o| o.0 == lock) {
                            let (_, cs, start) = open[ti_us].remove(i);
                            if let Some(lg) = &mut sim.log {
                                lg.holds[ti_us].push((start, now, cs));
                            }
                        }
                    }
                    let entry = held[ti_us]
                        .iter()
                        .rposition(|h| h.0 == lock)
                        .map(|i| held[ti_us].remove(i));
                    let turn = entry.map(|e| e.1);
                    if let (Some(k), Some(v)) = (turn, res.section_times.get_mut(lock as usize)) {
                        if let Some(t) = v.get_mut(k as usize) {
                            t.1 = now;
                        }
                    }
                    if let Some(g) = sc.arrival {
                        let st = entry.map_or(lock, |e| e.2);
                        unlock_woke[ti_us] = match alocks.get_mut(st as usize) {
                            Some(al) => {
                                al.leave();
                                al.wake(g, p, &mut sim, &mut wake_state)
                            }
                            None => false,
                        };
                        let recorded_wake =
                            matches!(pc[ti_us].peek(), Some(Action::UnlockWork { .. }));
                        if unlock_woke[ti_us] && !recorded_wake && p.unlock_wake_ns > 0 {
                            synthetic[ti_us] = true;
                            sim.compute(ti, p.unlock_wake_ns);
                            break;
                        }
                        continue;
                    }
                    let l = &mut locks[lock as usize];
                    if l.exclusive {
                        l.exclusive = false;
                    } else {
                        l.readers = l.readers.saturating_sub(1);
                    }
                    // An unlock enters the kernel only to wake a waiter.
                    unlock_woke[ti_us] = wake_next(l, &mut sim);
                }
                Action::Signal(id) => {
                    pc[ti_us].next();
                    signal(id, &mut done, &mut sig_waiters, &mut sim);
                }
                Action::WaitFor { id, latency } => {
                    pc[ti_us].next();
                    if bit(&done, u64::from(id)) {
                        continue;
                    }
                    sig_waiters.entry(id).or_default().push((ti, latency));
                    break;
                }
                Action::Spawn { child, offset } => {
                    pc[ti_us].next();
                    sim.at(now + offset, child);
                    if let Some(lg) = &mut sim.log {
                        lg.spawns[child as usize] = Some((now + offset, ti));
                    }
                }
            }
        }
    }
    res.wall_ns = res.ends.iter().copied().max().unwrap_or(0);
    (res, sim.log)
}

/// The event queue and the shared CPUs.
struct Sim {
    cpus: f64,
    /// Threads to resume at a time: (time, seq, thread).
    // The thread is a u64 in these keys, though a u32 would do: with a
    // u32 and 4 bytes of padding, the heap wrote an entry as fields and
    // read it back as words at once, a store-forwarding stall on every
    // push (a tenth of a simulation's time).
    timed: BinaryHeap<Reverse<(u64, u64, u64)>>,
    /// Threads computing: (virtual end as f64 bits, seq, thread).
    running: BinaryHeap<Reverse<(u64, u64, u64)>>,
    /// Work done by each computing thread so far (virtual clock), ns.
    vclock: f64,
    /// Time the virtual clock was last advanced to.
    vlast: u64,
    seq: u64,
    now: u64,
    /// The thread running now (the waker of whoever it wakes).
    cur: u32,
    log: Option<PathLog>,
}

impl Sim {
    fn woke(&mut self, t: u32) {
        let (now, cur) = (self.now, self.cur);
        if let Some(lg) = &mut self.log {
            lg.wakes[t as usize].push((now, cur));
        }
    }
    fn rate(&self) -> f64 {
        let k = self.running.len() as f64;
        if k <= self.cpus {
            1.0
        } else {
            self.cpus / k
        }
    }
    fn advance(&mut self, t: u64) {
        if t > self.vlast {
            self.vclock += (t - self.vlast) as f64 * self.rate();
            self.vlast = t;
        }
    }
    fn at(&mut self, t: u64, th: u32) {
        self.timed.push(Reverse((t, self.seq, u64::from(th))));
        self.seq += 1;
    }
    fn compute(&mut self, th: u32, ns: u64) {
        self.advance(self.now);
        let end = self.vclock + ns as f64;
        self.running
            .push(Reverse((end.to_bits(), self.seq, u64::from(th))));
        self.seq += 1;
    }
    /// The next thread to run and whether it finished a compute.
    fn next(&mut self) -> Option<(u32, bool)> {
        let ps = self.running.peek().map(|r| {
            let v = f64::from_bits(r.0 .0);
            let dt = ((v - self.vclock).max(0.0) / self.rate()).ceil() as u64;
            self.vlast.max(self.now) + dt
        });
        let tt = self.timed.peek().map(|r| r.0 .0);
        match (ps, tt) {
            (None, None) => None,
            (Some(p), t) if t.is_none_or(|t| p <= t) => {
                self.advance(p);
                self.now = p.max(self.now);
                let Reverse((_, _, th)) = self.running.pop().expect("peeked");
                Some((th as u32, true))
            }
            _ => {
                let Reverse((t, _, th)) = self.timed.pop().expect("peeked");
                let th = th as u32;
                self.advance(t);
                self.now = t.max(self.now);
                Some((th, false))
            }
        }
    }
}

/// The work of a compute action in a scenario: `keep_overhead` adds the
/// recorder's removed cost back; `extra_pct` (with `cal_max`, see
/// [`Grant::recorder_cost_pct`]) removes that percentage more of the
/// calibrated part of it.
fn compute_ns(a: &Action, scale: &[u32], keep_overhead: bool, extra_pct: u64, cal_max: u64) -> u64 {
    match *a {
        Action::Compute {
            ns, cs, oh, access, ..
        } => {
            let ns = if keep_overhead {
                ns + u64::from(oh)
            } else if extra_pct > 0 && !access {
                ns.saturating_sub(u64::from(oh).min(cal_max) * extra_pct / 100)
            } else {
                ns
            };
            match scale.get(cs as usize) {
                Some(&pct) if pct != 100 => ns * u64::from(pct) / 100,
                _ => ns,
            }
        }
        _ => 0,
    }
}

fn grant(l: &mut LockState, k: u64, shared: bool) {
    if k == l.next {
        l.next += 1;
        while l.granted.remove(&l.next) {
            l.next += 1;
        }
    } else {
        l.granted.insert(k);
    }
    if shared {
        l.readers += 1;
    } else {
        l.exclusive = true;
    }
}

/// If the acquisition whose turn it is waits and can be granted, wake
/// its thread (which re-executes its Acquire and gets the lock; nobody
/// else can take that turn meanwhile).
/// Returns whether it woke anybody.
fn wake_next(l: &mut LockState, sim: &mut Sim) -> bool {
    let mut wake = Vec::new();
    for (&k, &(t, shared)) in l.waiting.range(l.next..) {
        if !l.can_grant(k, shared) {
            break;
        }
        wake.push((k, t));
        if !shared {
            break;
        }
    }
    let woke = !wake.is_empty();
    for (k, t) in wake {
        l.waiting.remove(&k);
        sim.at(sim.now, t);
        sim.woke(t);
    }
    woke
}

fn signal(id: u32, done: &mut [u64], waiters: &mut FxHashMap<u32, Vec<(u32, u64)>>, sim: &mut Sim) {
    if let Some(w) = done.get_mut((id / 64) as usize) {
        *w |= 1 << (id % 64);
    }
    if let Some(ws) = waiters.remove(&id) {
        for (w, latency) in ws {
            sim.at(sim.now + latency, w);
            sim.woke(w);
        }
    }
}

/// Breaks a deadlock: the lock with the lowest waited-for turn skips
/// ahead to it (the acquisitions before it never come: their thread is
/// blocked elsewhere, typically behind a release the recorder lost).
fn force_progress(locks: &mut [LockState], sim: &mut Sim, res: &mut SimResult) -> bool {
    let mut best: Option<(u64, usize)> = None;
    for (i, l) in locks.iter().enumerate() {
        if let Some((&k, _)) = l.waiting.iter().next() {
            let lag = k - l.next.min(k);
            if best.is_none_or(|b| lag < b.0) {
                best = Some((lag, i));
            }
        }
    }
    let Some((_, i)) = best else {
        return false;
    };
    let l = &mut locks[i];
    let (&k, &(t, _)) = l.waiting.iter().next().expect("non-empty");
    l.waiting.remove(&k);
    l.next = k;
    l.granted.retain(|&g| g > k);
    l.exclusive = false;
    l.readers = 0;
    res.forced += 1;
    sim.at(sim.now, t);
    true
}

/// Per-thread line of a replay report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ThreadLine {
    /// Trace thread id.
    pub id: u32,
    /// OS tid.
    pub tid: u32,
    /// Name.
    pub name: String,
    /// Recorded end, ns since the first start.
    pub recorded_end_ns: u64,
    /// Replayed end, ns since the first start.
    pub replayed_end_ns: u64,
}

/// `lockscope replay` result (schema [`SCHEMA`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReplayReport {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// CPUs of the replayed machine.
    pub cpus: u32,
    /// Recorded wall time, ns.
    pub recorded_wall_ns: u64,
    /// Replayed wall time of the run as recorded (recorder overhead
    /// included), ns.
    pub replayed_wall_ns: u64,
    /// `replayed_wall / recorded_wall - 1`: the replay's fidelity.
    pub error: f64,
    /// Replayed wall time without the recorder's overhead: the prediction
    /// for the program running unrecorded, ns.
    pub unrecorded_wall_ns: u64,
    /// The same estimate with the locks granted in the order the threads
    /// reach them ([`Scenario::arrival`], the what-if model) instead of
    /// the recorded order, ns: a recording slows the program, its convoys
    /// are longer than the program's own, and the recorded order keeps
    /// them.
    pub unrecorded_arrival_wall_ns: u64,
    /// Why the run without the recorder cannot be predicted within 5 %,
    /// when it cannot: the two orders disagree by more than that, or the
    /// time subtracted for the recorder is more than 5 % of the threads'
    /// time (its unmeasured costs grow with it).
    pub unrecorded_uncertain: Option<String>,
    /// Recorder overhead in the recorded work, ns.
    pub overhead_ns: u64,
    /// Time the threads were preempted in the recorded work (measured
    /// from their run-queue delay samples; 0 for traces without them), ns: left
    /// out of `unrecorded_wall_ns` like the overhead.
    pub preempted_ns: u64,
    /// Acquisitions granted out of the recorded order to break a deadlock.
    pub forced_grants: u64,
    /// Actions replayed.
    pub actions: u64,
    /// Per thread.
    pub threads: Vec<ThreadLine>,
}

/// Replays a program on `cpus` CPUs (0: the recording machine's) as
/// recorded.
pub fn report(p: &Program, cpus: u32) -> Result<ReplayReport, AnalysisError> {
    let cpus = effective_cpus(p, cpus);
    let t = timings::start();
    let (r, unrecorded) = simulate_pair(p, cpus)?;
    timings::phase(t, "two simulations");
    p.check()?;
    Ok(assemble(p, cpus, &r, &unrecorded))
}

/// [`build`] then [`report`], with the pass that computes the work of the
/// compute actions from their CPU shares running beside the two
/// simulations instead of before them: they read the work as the pass
/// publishes it, block by block (the pass was a fifth of a replay's
/// time, on one core, with the other idle). Same result as [`build`]
/// then [`report`]. Returns the program too.
pub fn build_and_report(
    path: &Path,
    meta: &Meta,
    cpus: u32,
) -> Result<(Program, ReplayReport), AnalysisError> {
    let mut b = Builder::new(meta, spill_sink()?);
    let t = timings::start();
    for_each_step(path, meta, true, |s, _| b.step(s))?;
    timings::phase(t, "build: read, interpret, spill");
    let (mut p, pass) = b.finish_deferred()?;
    timings::note(|| {
        format!(
            "spilled {:.1} MB of actions, {:.1} MB of compute intervals",
            p.spilled_bytes() as f64 / 1e6,
            pass.as_ref().map_or(0, |x| x.ivs.bytes()) as f64 / 1e6
        )
    });
    let cpus = effective_cpus(&p, cpus);
    let t = timings::start();
    let (removed, sims) = std::thread::scope(|sc| {
        let p = &p;
        let pass = pass.map(|pass| sc.spawn(move || pass.run(p)));
        let sims = simulate_pair(p, cpus);
        (pass.map(|h| h.join()), sims)
    });
    timings::phase(t, "CPU shares beside the two simulations");
    let (removed, pre) = removed
        .unwrap_or(Ok((0, 0)))
        .map_err(|_| AnalysisError::Config("the replay's CPU-share pass failed".into()))?;
    let (r, unrecorded) = sims?;
    p.overhead_ns += removed;
    p.preempted_ns += pre;
    p.check()?;
    let report = assemble(&p, cpus, &r, &unrecorded);
    Ok((p, report))
}

/// The two simulations of a report: as recorded (recorder overhead kept)
/// and without the recorder.
fn simulate_pair(
    p: &Program,
    cpus: u32,
) -> Result<(SimResult, (SimResult, SimResult)), AnalysisError> {
    // The simulations are independent: run them side by side (each reads
    // the spill file through its own cursors).
    let (r, unrecorded) = std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            simulate(
                p,
                cpus,
                &Scenario {
                    keep_overhead: true,
                    ..Scenario::default()
                },
            )
        });
        let unrecorded = simulate(p, cpus, &Scenario::default());
        let arrival = simulate(
            p,
            cpus,
            &Scenario {
                arrival: Some(Grant::default()),
                ..Scenario::default()
            },
        );
        (h.join(), (unrecorded, arrival))
    });
    let r = r.map_err(|_| AnalysisError::Config("the replay's simulation thread failed".into()))?;
    Ok((r, unrecorded))
}

/// Share of the threads' work above which the recorder's calibrated cost
/// makes a prediction uncertain: the 5 % accuracy the replay claims (see
/// `assemble`).
pub const RECORDER_SHARE: f64 = 0.05;

/// The recorder's calibrated cost in the threads' work, ns, and its share
/// of that work (the work as recorded: the replayed work plus the cost).
/// Preemption is left out: it is measured, not calibrated, so its error
/// does not grow with it; what grows with the calibrated cost is what the
/// calibration misses (cache lines the recorder's writes evict, its
/// drain's CPU on a busy machine).
pub fn recorder_share(p: &Program) -> (u64, f64) {
    let all = p.work_ns + p.overhead_ns;
    let share = if all == 0 {
        0.0
    } else {
        p.overhead_ns as f64 / all as f64
    };
    (p.overhead_ns, share)
}

/// The report of the two simulations of [`simulate_pair`].
fn assemble(
    p: &Program,
    cpus: u32,
    r: &SimResult,
    (unrecorded, arrival): &(SimResult, SimResult),
) -> ReplayReport {
    let t0 = p.threads.iter().map(|t| t.start).min().unwrap_or(0);
    let recorded = p.recorded_wall();
    let (a, b) = (unrecorded.wall_ns as f64, arrival.wall_ns as f64);
    let spread = if a.min(b) > 0.0 {
        a.max(b) / a.min(b) - 1.0
    } else {
        0.0
    };
    // The time subtracted for the recorder (its calibrated cost per event
    // and the preemption it caused) against the threads' time: the
    // calibration is measured with hot caches, while a program taking
    // millions of locks also pays for the cache lines the recorder's
    // writes evict and for its drain's CPU, which nothing measures. When
    // the correction alone exceeds the 5 % the figure claims, its own
    // error can too (PARSEC's fluidanimate: 9 M events in 0.4 s, 28 %
    // subtracted, the replay still 39 % long); say so rather than print
    // a figure that looks exact. Not a guessed factor: the threshold is
    // the accuracy the replay promises.
    let (subtracted, share) = recorder_share(p);
    let mut why = Vec::new();
    if spread > 0.05 {
        why.push(format!(
            "granting the locks in the recorded order and in arrival order gives runs {:.0}% \
             apart: the program alone takes somewhere between",
            spread * 100.0
        ));
    }
    if share > RECORDER_SHARE {
        why.push(format!(
            "the recorder's calibrated cost ({}) is {:.0}% of the threads' work: its \
             unmeasured costs (cache lines its writes evict, its drain's CPU) grow with it, and \
             the program alone may be faster still",
            ms(subtracted),
            share * 100.0
        ));
    }
    let unrecorded_uncertain =
        (!why.is_empty()).then(|| format!("{}; the replay cannot tell closer", why.join("; ")));
    ReplayReport {
        schema: SCHEMA,
        cpus,
        recorded_wall_ns: recorded,
        replayed_wall_ns: r.wall_ns,
        error: if recorded == 0 {
            0.0
        } else {
            r.wall_ns as f64 / recorded as f64 - 1.0
        },
        unrecorded_wall_ns: unrecorded.wall_ns,
        unrecorded_arrival_wall_ns: arrival.wall_ns,
        unrecorded_uncertain,
        overhead_ns: p.overhead_ns,
        preempted_ns: p.preempted_ns,
        forced_grants: r.forced,
        actions: p.action_count(),
        threads: p
            .threads
            .iter()
            .zip(&r.ends)
            .map(|(t, &e)| ThreadLine {
                id: t.id,
                tid: t.tid,
                name: t.name.clone(),
                recorded_end_ns: t.end.saturating_sub(t0),
                replayed_end_ns: e,
            })
            .collect(),
    }
}

/// `cpus`, or the recording machine's when 0 (or, unknown, the number of
/// threads: nobody queues).
pub fn effective_cpus(p: &Program, cpus: u32) -> u32 {
    if cpus > 0 {
        cpus
    } else if p.cpus > 0 {
        p.cpus
    } else {
        p.threads.len().max(1) as u32
    }
}

use lockscope_text::units::ms;

/// Renders a replay report as text.
pub fn render_text(r: &ReplayReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "replay on {} CPU(s), locks granted in recorded order",
        r.cpus
    )?;
    writeln!(out, "  recorded wall  {}", ms(r.recorded_wall_ns))?;
    writeln!(
        out,
        "  replayed wall  {}  ({:+.1} %)",
        ms(r.replayed_wall_ns),
        r.error * 100.0
    )?;
    if r.preempted_ns > 0 {
        writeln!(
            out,
            "  without the recorder's overhead ({}) and the time threads were preempted or waited for the recorder ({}): {}",
            ms(r.overhead_ns),
            ms(r.preempted_ns),
            ms(r.unrecorded_wall_ns)
        )?;
    } else {
        writeln!(
            out,
            "  without the recorder's overhead ({}): {}",
            ms(r.overhead_ns),
            ms(r.unrecorded_wall_ns)
        )?;
    }
    writeln!(
        out,
        "  the same with the locks granted in arrival order (as what-if predictions do): {}",
        ms(r.unrecorded_arrival_wall_ns)
    )?;
    if let Some(why) = &r.unrecorded_uncertain {
        writeln!(out, "  uncertain: {why}")?;
    }
    if r.forced_grants > 0 {
        writeln!(
            out,
            "  {} acquisition(s) granted out of order (releases lost by the recorder)",
            r.forced_grants
        )?;
    }
    writeln!(
        out,
        "\n  {:>8}  {:<16} {:>14} {:>14}",
        "tid", "thread", "recorded end", "replayed end"
    )?;
    for t in &r.threads {
        writeln!(
            out,
            "  {:>8}  {:<16} {:>14} {:>14}",
            t.tid,
            t.name,
            ms(t.recorded_end_ns),
            ms(t.replayed_end_ns)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next writer after any turn, asked in the order a replay asks
    /// (rising one by one through runs of readers) and out of order,
    /// equals a brute-force scan of the turns.
    #[test]
    fn next_writer_matches_a_scan_whatever_the_order_of_questions() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for turns in [0u64, 1, 63, 64, 65, 200, 1000] {
            let mut shared = Vec::new();
            for k in 0..turns {
                // Long runs of readers, a writer now and then.
                if next() % 50 != 0 {
                    set_bit(&mut shared, k);
                }
            }
            let scan = |from: u64| {
                (from..turns)
                    .find(|&k| !bit(&shared, k))
                    .unwrap_or(u64::MAX)
            };
            let l = LockState {
                next: 0,
                exclusive: false,
                readers: 0,
                waiting: BTreeMap::new(),
                granted: Default::default(),
                shared: shared.clone(),
                turns,
                nw_cache: std::cell::Cell::new((u64::MAX, u64::MAX)),
            };
            for from in 0..turns + 2 {
                assert_eq!(
                    l.next_writer(from),
                    scan(from),
                    "turns {turns}, from {from}"
                );
            }
            for _ in 0..500 {
                let from = next() % (turns + 2);
                assert_eq!(
                    l.next_writer(from),
                    scan(from),
                    "turns {turns}, from {from}"
                );
            }
        }
    }

    fn hist(samples: &[(u64, u64)]) -> Vec<u64> {
        let mut h = vec![0; ACCESS_HIST];
        for &(ns, n) in samples {
            h[ns as usize] += n;
        }
        h
    }

    /// A table scan: intervals of 20-70 ns (the hook, where it runs),
    /// and now and then a long one (work between two lookups). The cost
    /// is what a typical access costs, not its cheapest case.
    #[test]
    fn the_access_cost_is_the_typical_dense_interval_not_the_cheapest() {
        let h = hist(&[
            (20, 500),
            (30, 1500),
            (40, 2000),
            (50, 4000),
            (60, 1500),
            (70, 400),
            (1500, 100),
        ]);
        assert_eq!(quantile(&h, 1, 10), Some(30));
        assert_eq!(access_cost(&h, None), 50);
        assert_eq!(access_cost(&h, Some(66)), 50);
    }

    /// Accesses that are all far apart: the intervals are mostly the
    /// program's work, and the recorder's calibration bounds the part
    /// taken for the hook.
    #[test]
    fn sparse_accesses_are_charged_at_most_the_calibrated_bound() {
        let h = hist(&[(230, 3000), (250, 3000)]);
        assert_eq!(access_cost(&h, None), 230);
        assert_eq!(access_cost(&h, Some(66)), 66);
    }

    #[test]
    fn too_few_intervals_give_no_access_cost() {
        let h = hist(&[(40, ACCESS_SAMPLES - 1)]);
        assert_eq!(access_cost(&h, None), 0);
        assert_eq!(quantile(&[0; 8], 1, 2), None);
    }

    /// The in-situ variant takes more of a lock event's calibrated cost
    /// out of its segment, never the preemption folded into `oh`, never
    /// from a segment that ended at a memory access, and nothing when
    /// the recorder's cost is kept.
    #[test]
    fn the_in_situ_cost_variant_scales_only_the_calibrated_part() {
        let c = |ns, oh, access| Action::Compute {
            ns,
            cs: u32::MAX,
            oh,
            access,
            pre: 0,
        };
        // 40 ns calibrated, 300 % more of it: 120 ns.
        assert_eq!(compute_ns(&c(1000, 40, false), &[], false, 300, 40), 880);
        // 2 ms of preemption in `oh`: still at most 3 x 40 ns.
        assert_eq!(
            compute_ns(&c(1000, 2_000_040, false), &[], false, 300, 40),
            880
        );
        // Never below zero.
        assert_eq!(compute_ns(&c(100, 40, false), &[], false, 300, 40), 0);
        assert_eq!(compute_ns(&c(1000, 40, true), &[], false, 300, 40), 1000);
        assert_eq!(compute_ns(&c(1000, 40, false), &[], true, 300, 40), 1040);
        assert_eq!(compute_ns(&c(1000, 40, false), &[], false, 0, 40), 1000);
    }

    #[test]
    fn interval_starts_round_trip_whatever_their_order() {
        for (last, start) in [
            (0, 0),
            (100, 100),
            (100, 150),
            (150, 100),
            (0, u64::MAX),
            (u64::MAX, 0),
            (1 << 40, (1 << 40) + 3),
        ] {
            let z = iv_start_delta(last, start);
            assert_eq!(iv_start(last, z), start, "{last} {start}");
        }
        // Consecutive intervals: a small varint.
        assert_eq!(iv_start_delta(1 << 40, (1 << 40) + 3), 6);
    }
}
