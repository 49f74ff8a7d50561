//! Barriers: load imbalance blamed on the last arriver, and redundant
//! barrier instances (Chabbi's thesis, ch. 3).
//!
//! A barrier instance is one round of one `pthread_barrier_t` (the sync
//! layer numbers a thread's k-th wait on a barrier round k). For each
//! instance: every participant's arrival, departure and wait; the last
//! arriver (whose lateness every other participant waited for) with the
//! call path of its barrier call.
//!
//! # Redundancy
//! Each thread's accesses are cut into epochs by its barrier crossings
//! (any barrier). An instance is *needed* when there is a dependence
//! through memory across it between two different participants: thread t
//! wrote, in its epoch before the instance, bytes that another
//! participant u reads or writes in its epoch after it (write-read,
//! write-write), or t read bytes before that u writes after (read-write:
//! without the barrier u could overwrite them before t read them). With
//! no such dependence the instance was *redundant*: removing that one
//! barrier call would not have changed what any thread read. This is the
//! thesis' definition (§3.2: no data dependence edge from before the
//! barrier on one task to after it on another). Atomic accesses count
//! like plain ones. Threads that do not take part in the barrier are not
//! ordered by it and are ignored.
//!
//! As in ch. 3, redundancy is reported per calling context of the
//! barrier call: a barrier that is always redundant when reached through
//! one call path can be elided there, even when it is needed elsewhere.
//!
//! # Hand-made barriers (a mutex, a condition variable and a counter)
//! Many programs (PARSEC's `parsec_barrier`, most textbooks) build a
//! barrier from a mutex `m`, a condition variable `c` and a counter: each
//! arriving thread locks `m` and counts itself; all but the last wait on
//! `c`; the last one broadcasts `c`. They are recognised from the sync
//! layer's steps (`recognise_hand_made`): a condition variable is a
//! barrier when
//! - it is only ever broadcast (never `pthread_cond_signal`led), always
//!   waited on with the same mutex, and no wait on it times out;
//! - the broadcasts that release the most waiting threads (`n - 1`) are
//!   the instances: each made while holding the mutex; its participants
//!   are the broadcaster (the last arriver) and the threads it released,
//!   each of which returns from that wait. A thread's arrival is the
//!   start of its first wait since it last left; a wake-up by no
//!   broadcast (spurious) or by a broadcast that releases fewer (PARSEC's
//!   departure-phase broadcast, which wakes a thread that came back
//!   early) does not end it;
//! - broadcasts releasing fewer, but some, threads are not more numerous
//!   than the instances (else it is a work queue, not a barrier).
//!
//! The barrier's own bookkeeping (the counter, the generation) is read and
//! written under its mutex by every participant on both sides of every
//! instance: accesses made while holding a recognised barrier's mutex are
//! left out of the epochs, or every instance would depend on the previous
//! one through the counter. The calling context of a hand-made barrier
//! call is the first caller outside the function that waits or
//! broadcasts (the caller of `barrier_wait`), taken from the call path of
//! the wait, or of the broadcaster's last access under the mutex.
//!
//! Redundancy needs every access: a trace recorded without
//! `LOCKSCOPE_ALL_ACCESSES=1` holds only those inside critical sections,
//! so the report leaves redundancy undecided and says why.

use std::collections::{BTreeMap, HashMap, HashSet};

use lockscope_format::{barrier, Op, Trace};
use serde::Serialize;

use crate::deadwrites::context_of;
use crate::detailed::{hex, Detailed};
use lockscope_trace::sync::{for_each_trace_step, ObjId, StepKind};

/// JSON schema identifier.
pub const SCHEMA: &str = "lockscope.barriers/1";

/// Most instances listed per barrier.
const MAX_INSTANCES: usize = 64;

/// Byte ranges [lo, hi), sorted and merged once the epoch is closed.
#[derive(Default, Clone)]
struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    fn push(&mut self, lo: u64, hi: u64) {
        if let Some(last) = self.0.last_mut() {
            if last.0 <= lo && lo <= last.1 {
                last.1 = last.1.max(hi);
                return;
            }
        }
        self.0.push((lo, hi));
    }

    fn normalize(&mut self) {
        self.0.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(self.0.len());
        for &(lo, hi) in &self.0 {
            match out.last_mut() {
                Some(l) if lo <= l.1 => l.1 = l.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        self.0 = out;
    }

    /// The first byte both hold, if any (both normalized).
    fn overlap(&self, other: &Ranges) -> Option<u64> {
        let (a, b) = (&self.0, &other.0);
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let lo = a[i].0.max(b[j].0);
            let hi = a[i].1.min(b[j].1);
            if lo < hi {
                return Some(lo);
            }
            if a[i].1 <= b[j].1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        None
    }
}

#[derive(Default, Clone)]
struct Epoch {
    reads: Ranges,
    writes: Ranges,
}

struct Crossing {
    thread: u32,
    process: u32,
    arrive: u64,
    wait_ns: u64,
    site: u64,
    stack: u32,
    /// Index of the thread's epoch before the crossing (after: + 1).
    epoch: usize,
    /// The end of an OpenMP parallel region ([`barrier::REGION_END`]).
    region_end: bool,
}

/// One thread's wait at one instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Wait {
    /// Trace thread id.
    pub thread: u32,
    /// Waited (corrected ns).
    pub wait_ns: u64,
}

/// One barrier instance (one round).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Instance {
    /// Round (0-based).
    pub round: u64,
    /// The last arriver's trace thread id.
    pub last_arriver: u32,
    /// `function (file:line)` of the last arriver's barrier call.
    pub last_arriver_site: String,
    /// Waits of the participants.
    pub waits: Vec<Wait>,
    /// Sum of the waits (ns).
    pub wait_ns: u64,
    /// No dependence across it (None: undecided, accesses missing).
    pub redundant: Option<bool>,
    /// For a needed instance: a dependence that needed it
    /// (`thread 2 wrote in+0x8 before, thread 3 reads it after`).
    pub dependence: Option<String>,
}

/// Redundancy of one calling context of the barrier call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContextStat {
    /// Function containing the barrier call.
    pub function: String,
    /// `function (file:line)` of the call.
    pub site: String,
    /// Call path, innermost first.
    pub path: Vec<String>,
    /// Instances some participant reached through this context.
    pub instances: u64,
    /// Of those, redundant ones.
    pub redundant: u64,
    /// `redundant / instances`.
    pub redundant_fraction: f64,
    /// Waiting at these instances (ns, all participants).
    pub wait_ns: u64,
    /// The barrier at the end of an OpenMP parallel region (the team's
    /// join): never to be elided, however redundant.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub region_end: bool,
}

/// A last arriver: a thread and where it arrived from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LastArriver {
    /// Trace thread id.
    pub thread: u32,
    /// Thread name.
    pub name: String,
    /// `function (file:line)` of its barrier call.
    pub site: String,
    /// Instances it arrived last at.
    pub instances: u64,
    /// Waiting of the others at those instances (ns): the imbalance its
    /// lateness cost.
    pub wait_caused_ns: u64,
    /// It arrived last at the end of an OpenMP parallel region: the
    /// imbalance is the region's work.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub region_end: bool,
}

/// One barrier object.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Barrier {
    /// Its name (symbol, heap context or address).
    pub barrier: String,
    /// Address, hex (a hand-made barrier: its mutex's).
    pub address: String,
    /// `pthread_barrier`, `mutex+condvar` for a recognised hand-made
    /// barrier, or `openmp` for an OpenMP parallel region's barriers
    /// (its end and its `#pragma omp barrier`s, recorded by the libgomp
    /// hooks).
    pub kind: &'static str,
    /// False when whether an instance was redundant could not be
    /// decided: accesses outside critical sections were not recorded, or
    /// some crossings of this hand-made barrier cannot be seen (a note
    /// says why); its `redundant` counts are then 0.
    pub redundancy_decided: bool,
    /// Instances (rounds) seen.
    pub instances: u64,
    /// Most participants of an instance.
    pub participants: u64,
    /// Total waiting (ns).
    pub wait_ns: u64,
    /// Redundant instances (0 when undecided).
    pub redundant: u64,
    /// `redundant / instances`.
    pub redundant_fraction: f64,
    /// Per calling context of the barrier call.
    pub contexts: Vec<ContextStat>,
    /// Who arrived last, by waiting caused.
    pub last_arrivers: Vec<LastArriver>,
    /// The instances (at most 64, in round order).
    pub instance_list: Vec<Instance>,
}

/// The barrier report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BarriersReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Whether accesses outside critical sections were recorded (needed
    /// to decide redundancy).
    pub all_accesses: bool,
    /// Barrier instances in the trace.
    pub instances: u64,
    /// Redundant ones.
    pub redundant: u64,
    /// Per barrier object, by waiting.
    pub barriers: Vec<Barrier>,
    /// Caveats.
    pub notes: Vec<String>,
}

/// (function, `function (file:line)`, call path) of a code context.
type Named = (String, String, Vec<String>);

fn size_of(flags: u8, arg2: u64) -> u64 {
    if flags == 0 {
        arg2
    } else {
        u64::from(flags)
    }
}

/// One wait of a thread on a candidate condition variable.
struct Episode {
    begin: u64,
    /// When the wait returned (None: still waiting at the end).
    end: Option<u64>,
    wait_ns: u64,
    site: u64,
    stack: u32,
    /// The broadcast (index into `CondState::releases`) that released it.
    by: Option<usize>,
}

/// One broadcast of a candidate condition variable.
struct Release {
    /// The broadcaster: thread, time, site, call path.
    by: (u32, u64, u64, u32),
    /// The broadcaster held the condition's mutex.
    holds: bool,
    /// Threads it released.
    released: usize,
}

#[derive(Default)]
struct CondState {
    mutex: Option<u64>,
    /// Disqualified: signalled, a timed-out wait, two mutexes.
    not_barrier: bool,
    /// Per thread, its waits in order.
    episodes: HashMap<u32, Vec<Episode>>,
    /// Per thread, the index of its wait in progress.
    waiting: HashMap<u32, usize>,
    releases: Vec<Release>,
}

/// A released thread leaving an instance: (thread, arrival, wait, site,
/// call path, departure time).
type Departure = (u32, u64, u64, u64, u32, u64);

/// A crossing of a hand-made barrier, found by [`recognise_hand_made`].
#[derive(Clone, Copy)]
struct HandCrossing {
    cond: u64,
    round: u64,
    arrive: u64,
    wait_ns: u64,
    site: u64,
    stack: u32,
}

/// The hand-made barriers of a trace.
#[derive(Default)]
struct HandMade {
    /// (thread, time of its releasing step) -> crossing: a released
    /// thread's wait end, the broadcaster's broadcast.
    crossings: HashMap<(u32, u64), HandCrossing>,
    /// Barrier mutexes, (process, address).
    mutexes: HashSet<(u32, u64)>,
    /// (process, condition variable) -> its mutex.
    conds: HashMap<(u32, u64), u64>,
    /// (process, condition variable) -> why some of its crossings cannot
    /// be seen: its instances are only those seen, and its redundancy is
    /// left undecided.
    uncertain: HashMap<(u32, u64), String>,
}

/// The call site of a barrier function's caller: the first frame of the
/// call path that is not in the function making the condition call
/// (`site`); `site` itself when the path has none.
fn caller_site(d: &mut Detailed, process: u32, site: u64, stack: u32) -> u64 {
    let Some(frames) = d.stacks.get(&stack).cloned() else {
        return site;
    };
    let inner = d.function(process, site);
    for pc in frames {
        if pc != site && d.function(process, pc) != inner {
            return pc;
        }
    }
    site
}

/// Recognises hand-made barriers (see the module doc for the rule).
fn recognise_hand_made(t: &Trace, d: &mut Detailed) -> HandMade {
    let mut conds: HashMap<ObjId, CondState> = HashMap::new();
    // thread -> (time, call path) of its last event with a call path
    let mut last_path: HashMap<u32, (u64, u32)> = HashMap::new();
    for_each_trace_step(t, false, |st, interp| {
        let e = st.event;
        match st.kind {
            StepKind::CondWaitBegin { cond, mutex, .. } => {
                let c = conds.entry(cond).or_default();
                if c.mutex.is_some_and(|m| m != mutex.addr) {
                    c.not_barrier = true;
                }
                c.mutex = Some(mutex.addr);
                let eps = c.episodes.entry(st.thread).or_default();
                eps.push(Episode {
                    begin: st.time,
                    end: None,
                    wait_ns: 0,
                    site: e.site,
                    stack: e.stack,
                    by: None,
                });
                c.waiting.insert(st.thread, eps.len() - 1);
            }
            StepKind::CondWaitEnd {
                cond,
                wait_ns,
                timed_out,
                ..
            } => {
                let c = conds.entry(cond).or_default();
                c.not_barrier |= timed_out;
                if let Some(i) = c.waiting.remove(&st.thread) {
                    if let Some(ep) = c.episodes.get_mut(&st.thread).and_then(|v| v.get_mut(i)) {
                        ep.end = Some(st.time);
                        ep.wait_ns = wait_ns;
                        if e.stack != 0 {
                            ep.stack = e.stack;
                        }
                    }
                }
            }
            StepKind::CondSignal { cond, broadcast } => {
                let c = conds.entry(cond).or_default();
                c.not_barrier |= !broadcast;
                let k = c.releases.len();
                let mut released = 0;
                for (th, &i) in &c.waiting {
                    if let Some(ep) = c.episodes.get_mut(th).and_then(|v| v.get_mut(i)) {
                        if ep.by.is_none() {
                            ep.by = Some(k);
                            released += 1;
                        }
                    }
                }
                let section = c.mutex.and_then(|m| {
                    interp
                        .held(st.thread)
                        .iter()
                        .find(|s| s.lock.addr == m && s.lock.process == cond.process)
                        .map(|s| s.begin_ns)
                });
                // The broadcaster's own path: the broadcast's, else that of
                // its last access since it took the mutex.
                let stack = if e.stack != 0 {
                    e.stack
                } else {
                    match (last_path.get(&st.thread), section) {
                        (Some(&(at, p)), Some(from)) if at >= from => p,
                        _ => 0,
                    }
                };
                c.releases.push(Release {
                    by: (st.thread, st.time, e.site, stack),
                    holds: section.is_some(),
                    released,
                });
            }
            _ => {}
        }
        if e.stack != 0 {
            last_path.insert(st.thread, (st.time, e.stack));
        }
    });
    let mut hm = HandMade::default();
    // One call path per caller site, so that the waiters' paths (from the
    // wait) and the broadcaster's (from an access) make one context.
    let mut canon: HashMap<(u32, u64), u32> = HashMap::new();
    let mut ids: Vec<ObjId> = conds.keys().copied().collect();
    ids.sort_by_key(|c| (c.process, c.addr));
    for cond in ids {
        let c = &conds[&cond];
        let Some(mutex) = c.mutex else { continue };
        // The instances: the broadcasts that release the most waiters
        // (the last arriver's). Broadcasts that release fewer (a
        // departure-phase broadcast, as in PARSEC's barrier) are not
        // instances, and the threads they wake have not left.
        let full = c.releases.iter().map(|r| r.released).max().unwrap_or(0);
        let instances: Vec<usize> = (0..c.releases.len())
            .filter(|&k| c.releases[k].released == full)
            .collect();
        let partial = c
            .releases
            .iter()
            .filter(|r| r.released > 0 && r.released < full)
            .count();
        if c.not_barrier
            || full == 0
            || partial > instances.len()
            || instances.iter().any(|&k| !c.releases[k].holds)
        {
            continue;
        }
        // Each thread's arrivals: from its first wait after its previous
        // departure to the end of the wait a full broadcast released.
        let round_of: HashMap<usize, u64> = instances
            .iter()
            .enumerate()
            .map(|(r, &k)| (k, r as u64))
            .collect();
        let mut departures: Vec<Vec<Departure>> = vec![Vec::new(); instances.len()];
        let mut complete = true;
        let mut threads: Vec<&u32> = c.episodes.keys().collect();
        threads.sort();
        for &th in threads {
            let mut arrival: Option<(u64, u64, u64, u32)> = None; // begin, wait, site, stack
            for ep in &c.episodes[&th] {
                let a = arrival.get_or_insert((ep.begin, 0, ep.site, ep.stack));
                a.1 += ep.wait_ns;
                if ep.stack != 0 {
                    a.3 = ep.stack;
                }
                if let Some(&round) = ep.by.and_then(|k| round_of.get(&k)) {
                    let Some(end) = ep.end else {
                        complete = false;
                        continue;
                    };
                    let (begin, wait, site, stack) = arrival.take().expect("set above");
                    departures[round as usize].push((th, begin, wait, site, stack, end));
                }
            }
        }
        if !complete || departures.iter().any(|v| v.len() != full) {
            continue;
        }
        hm.mutexes.insert((cond.process, mutex));
        hm.conds.insert((cond.process, cond.addr), mutex);
        // Crossings this model cannot see. A barrier that spins before it
        // waits (PARSEC's `parsec_barrier` as shipped, ENABLE_SPIN_BARRIER)
        // is mostly crossed without any wait: its broadcasts wake nobody,
        // the instances seen are the few where a thread fell back to the
        // condition variable, and the epochs between them are wrong (on
        // streamcluster a barrier was "always redundant" while one thread
        // wrote the total the other returned after it). With two
        // participants a departure-phase broadcast that wakes a thread
        // which came back early releases as many threads as an
        // arrival's: the two cannot be told apart when the barrier has a
        // departure phase at all (broadcasts that wake nobody).
        let empty = c.releases.iter().filter(|r| r.released == 0).count();
        if empty > 2 * instances.len() {
            hm.uncertain.insert(
                (cond.process, cond.addr),
                format!(
                    "{empty} of its broadcasts woke no thread, against {} instances seen: \
                     threads cross it without waiting (a barrier that spins first)",
                    instances.len()
                ),
            );
        } else if full == 1 && empty > 0 {
            hm.uncertain.insert(
                (cond.process, cond.addr),
                "two threads and a departure phase: a broadcast opening the next arrival \
                 phase cannot be told from the last arriver's"
                    .into(),
            );
        }
        for (round, (&k, left)) in instances.iter().zip(&departures).enumerate() {
            let round = round as u64;
            let (by, at, site, stack) = c.releases[k].by;
            let caller = caller_site(d, cond.process, site, stack);
            let stack = *canon.entry((cond.process, caller)).or_insert(stack);
            hm.crossings.insert(
                (by, at),
                HandCrossing {
                    cond: cond.addr,
                    round,
                    arrive: at,
                    wait_ns: 0,
                    site: caller,
                    stack,
                },
            );
            for &(thread, arrive, wait_ns, site, stack, left) in left {
                let caller = caller_site(d, cond.process, site, stack);
                let stack = *canon.entry((cond.process, caller)).or_insert(stack);
                hm.crossings.insert(
                    (thread, left),
                    HandCrossing {
                        cond: cond.addr,
                        round,
                        arrive,
                        wait_ns,
                        site: caller,
                        stack,
                    },
                );
            }
        }
    }
    hm
}

/// Runs the analysis over a trace (`d`, its detailed view, names things).
pub fn analyze(t: &Trace, d: &mut Detailed) -> BarriersReport {
    let hm = recognise_hand_made(t, d);
    let mut epochs: HashMap<u32, Vec<Epoch>> = HashMap::new();
    // (process, barrier, round) -> crossings
    let mut rounds: BTreeMap<(u32, u64, u64), Vec<Crossing>> = BTreeMap::new();
    // Pending arrivals: thread -> (time, site, stack, end of a region)
    let mut arrived: HashMap<u32, (u64, u64, u32, bool)> = HashMap::new();
    let mut outside = false;
    for_each_trace_step(t, false, |st, interp| {
        let e = st.event;
        let ep = epochs
            .entry(st.thread)
            .or_insert_with(|| vec![Epoch::default()]);
        let (rd, wr, size) = match st.kind {
            StepKind::Memory(Op::Read) => (true, false, size_of(e.flags, e.arg2)),
            StepKind::Memory(Op::Write) => (false, true, size_of(e.flags, e.arg2)),
            StepKind::Memory(op) if op.is_atomic() || op == Op::AtomicRmw => {
                let w = 1u64 << (e.flags & 7).min(4);
                match op {
                    Op::AtomicFence => return,
                    Op::AtomicLoad => (true, false, w),
                    Op::AtomicStore => (false, true, w),
                    Op::AtomicCas if e.flags & 0x40 != 0 => (true, false, w),
                    _ => (true, true, w),
                }
            }
            StepKind::BarrierArrive { .. } => {
                let end = e.arg & barrier::REGION_END != 0;
                arrived.insert(st.thread, (st.time, e.site, e.stack, end));
                return;
            }
            StepKind::CondWaitEnd { cond, .. } | StepKind::CondSignal { cond, .. } => {
                if let Some(h) = hm.crossings.get(&(st.thread, st.time)) {
                    if h.cond == cond.addr && hm.conds.contains_key(&(cond.process, cond.addr)) {
                        rounds
                            .entry((cond.process, h.cond, h.round))
                            .or_default()
                            .push(Crossing {
                                thread: st.thread,
                                process: st.process,
                                arrive: h.arrive,
                                wait_ns: h.wait_ns,
                                site: h.site,
                                stack: h.stack,
                                epoch: ep.len() - 1,
                                region_end: false,
                            });
                        ep.push(Epoch::default());
                    }
                }
                return;
            }
            StepKind::BarrierDepart {
                barrier,
                round,
                wait_ns,
                ..
            } => {
                let (arrive, site, stack, region_end) = arrived.remove(&st.thread).unwrap_or((
                    st.time,
                    e.site,
                    e.stack,
                    e.arg & barrier::REGION_END != 0,
                ));
                rounds
                    .entry((barrier.process, barrier.addr, round))
                    .or_default()
                    .push(Crossing {
                        thread: st.thread,
                        process: st.process,
                        arrive,
                        wait_ns,
                        site,
                        stack,
                        epoch: ep.len() - 1,
                        region_end,
                    });
                ep.push(Epoch::default());
                return;
            }
            _ => return,
        };
        let held = interp.held(st.thread);
        // Only a plain access proves that accesses outside critical
        // sections were recorded: atomics are recorded everywhere, in
        // every mode.
        if !outside && held.is_empty() && matches!(st.kind, StepKind::Memory(Op::Read | Op::Write))
        {
            outside = true;
        }
        // A hand-made barrier's own counter and generation, touched under
        // its mutex on both sides of every instance, are not data.
        if !hm.mutexes.is_empty()
            && held
                .iter()
                .any(|s| hm.mutexes.contains(&(s.lock.process, s.lock.addr)))
        {
            return;
        }
        let cur = ep.last_mut().expect("one epoch at least");
        let hi = e.addr.saturating_add(size.max(1));
        if rd {
            cur.reads.push(e.addr, hi);
        }
        if wr {
            cur.writes.push(e.addr, hi);
        }
    });
    for v in epochs.values_mut() {
        for e in v {
            e.reads.normalize();
            e.writes.normalize();
        }
    }
    let empty = Epoch::default();
    let epoch =
        |t: u32, i: usize| -> &Epoch { epochs.get(&t).and_then(|v| v.get(i)).unwrap_or(&empty) };

    struct Acc {
        process: u32,
        instances: u64,
        participants: u64,
        wait_ns: u64,
        redundant: u64,
        contexts: HashMap<Named, (u64, u64, u64, bool)>,
        last: HashMap<(u32, u64), (u64, u64, bool)>,
        list: Vec<Instance>,
    }
    let mut by_barrier: BTreeMap<(u32, u64), Acc> = BTreeMap::new();
    let (mut total, mut total_redundant) = (0u64, 0u64);
    let mut site_names: HashMap<(u32, u64, u32), Named> = HashMap::new();
    for (&(process, addr, round), cs) in &rounds {
        total += 1;
        let decided = outside && !hm.uncertain.contains_key(&(process, addr));
        let redundant = if decided {
            let mut dep: Option<String> = None;
            'outer: for a in cs {
                let before = epoch(a.thread, a.epoch);
                for b in cs {
                    if a.thread == b.thread {
                        continue;
                    }
                    let after = epoch(b.thread, b.epoch + 1);
                    let hit = before
                        .writes
                        .overlap(&after.reads)
                        .map(|x| (x, "wrote", "reads"))
                        .or_else(|| {
                            before
                                .writes
                                .overlap(&after.writes)
                                .map(|x| (x, "wrote", "writes"))
                        })
                        .or_else(|| {
                            before
                                .reads
                                .overlap(&after.writes)
                                .map(|x| (x, "read", "writes"))
                        });
                    if let Some((x, did, does)) = hit {
                        let obj = d.object(process, x, a.arrive);
                        dep = Some(format!(
                            "thread {} {did} {obj} before, thread {} {does} it after",
                            a.thread, b.thread
                        ));
                        break 'outer;
                    }
                }
            }
            Some(dep)
        } else {
            None
        };
        let last = cs
            .iter()
            .max_by_key(|c| (c.arrive, c.thread))
            .expect("a round has a crossing");
        let wait: u64 = cs.iter().map(|c| c.wait_ns).sum();
        let is_red = matches!(redundant, Some(None));
        if is_red {
            total_redundant += 1;
        }
        let acc = by_barrier.entry((process, addr)).or_insert_with(|| Acc {
            process,
            instances: 0,
            participants: 0,
            wait_ns: 0,
            redundant: 0,
            contexts: HashMap::new(),
            last: HashMap::new(),
            list: Vec::new(),
        });
        acc.instances += 1;
        acc.participants = acc.participants.max(cs.len() as u64);
        acc.wait_ns += wait;
        acc.redundant += u64::from(is_red);
        // Contexts as the reader sees them (function, site, call path):
        // two participants with the same call site, one with a recorded
        // path (it blocked) and one without (the last arriver), or the
        // same path under two stack ids, are one context, counted once
        // per instance.
        let mut seen: Vec<Named> = Vec::new();
        for c in cs {
            let named = site_names
                .entry((process, c.site, c.stack))
                .or_insert_with(|| context_of(d, process, c.site, c.stack))
                .clone();
            if !seen.contains(&named) {
                seen.push(named.clone());
                let e = acc.contexts.entry(named).or_insert((0, 0, 0, false));
                e.0 += 1;
                e.1 += u64::from(is_red);
                e.2 += wait;
                e.3 |= c.region_end;
            }
        }
        let l = acc
            .last
            .entry((last.thread, last.site))
            .or_insert((0, 0, false));
        l.0 += 1;
        l.1 += wait;
        l.2 |= last.region_end;
        if acc.list.len() < MAX_INSTANCES {
            let name = site_names
                .entry((last.process, last.site, 0))
                .or_insert_with(|| context_of(d, last.process, last.site, 0))
                .1
                .clone();
            acc.list.push(Instance {
                round,
                last_arriver: last.thread,
                last_arriver_site: name,
                waits: cs
                    .iter()
                    .map(|c| Wait {
                        thread: c.thread,
                        wait_ns: c.wait_ns,
                    })
                    .collect(),
                wait_ns: wait,
                redundant: redundant.as_ref().map(|x| x.is_none()),
                dependence: redundant.and_then(|x| x),
            });
        }
    }

    let mut barriers = Vec::new();
    let mut notes = Vec::new();
    for ((process, addr), acc) in by_barrier {
        let mut contexts: Vec<ContextStat> = acc
            .contexts
            .iter()
            .map(
                |((function, site, path), &(n, red, wait, region_end))| ContextStat {
                    function: function.clone(),
                    site: site.clone(),
                    path: path.clone(),
                    instances: n,
                    redundant: red,
                    redundant_fraction: red as f64 / n.max(1) as f64,
                    wait_ns: wait,
                    region_end,
                },
            )
            .collect();
        contexts.sort_by(|a, b| {
            b.instances
                .cmp(&a.instances)
                .then(a.site.cmp(&b.site))
                .then(a.path.cmp(&b.path))
        });
        let mut last_arrivers: Vec<LastArriver> = acc
            .last
            .iter()
            .map(|(&(thread, site), &(n, wait, region_end))| LastArriver {
                thread,
                name: d
                    .threads
                    .get(&thread)
                    .map_or_else(String::new, |t| t.name.clone()),
                site: site_names
                    .entry((acc.process, site, 0))
                    .or_insert_with(|| context_of(d, acc.process, site, 0))
                    .1
                    .clone(),
                instances: n,
                wait_caused_ns: wait,
                region_end,
            })
            .collect();
        last_arrivers.sort_by(|a, b| {
            b.wait_caused_ns
                .cmp(&a.wait_caused_ns)
                .then(a.thread.cmp(&b.thread))
        });
        let (name_addr, kind) = match hm.conds.get(&(process, addr)) {
            Some(&mutex) => (mutex, "mutex+condvar"),
            // An OpenMP region: some calling context is a region's end.
            None if acc.contexts.values().any(|c| c.3) => (addr, "openmp"),
            None => (addr, "pthread_barrier"),
        };
        let uncertain = hm.uncertain.get(&(process, addr));
        let barrier = d.object(process, name_addr, 0);
        if let Some(why) = uncertain {
            notes.push(format!(
                "{barrier} ({}): {why}; its instances and waiting are only those seen, and \
                 whether it was redundant is left undecided",
                hex(name_addr)
            ));
        }
        barriers.push(Barrier {
            barrier,
            redundancy_decided: outside && uncertain.is_none(),
            address: hex(name_addr),
            kind,
            instances: acc.instances,
            participants: acc.participants,
            wait_ns: acc.wait_ns,
            redundant: acc.redundant,
            redundant_fraction: acc.redundant as f64 / acc.instances.max(1) as f64,
            contexts,
            last_arrivers,
            instance_list: acc.list,
        });
    }
    barriers.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.address.cmp(&b.address)));
    if !outside && total > 0 {
        notes.push(
            "only accesses inside critical sections were recorded: whether a barrier was \
             redundant cannot be decided. Record with `lockscope record --all-accesses`."
                .into(),
        );
    }
    if d.lost > 0 {
        notes.push(format!(
            "{} events were lost while recording: a lost access can hide a dependence \
             (a needed barrier may be shown redundant)",
            d.lost
        ));
    }
    BarriersReport {
        schema: SCHEMA,
        all_accesses: outside,
        instances: total,
        redundant: total_redundant,
        barriers,
        notes,
    }
}

/// Recommendations for a report section: one line per barrier call that
/// was redundant every time it ran ("elide"), and per barrier whose
/// waiting is mostly one late thread ("balance").
pub fn advice(r: &BarriersReport) -> Vec<String> {
    let mut out = Vec::new();
    for b in &r.barriers {
        if r.all_accesses && b.redundancy_decided {
            // The end of an OpenMP parallel region is the team's join:
            // there is no call to elide, whatever crossed it.
            for c in b.contexts.iter().filter(|c| !c.region_end) {
                if c.instances > 0 && c.redundant == c.instances {
                    out.push(format!(
                        "elide the barrier call at {} ({} on {}): redundant in all {} instance(s), \
                         {} of waiting",
                        c.site,
                        c.function,
                        b.barrier,
                        c.instances,
                        ms(c.wait_ns)
                    ));
                }
            }
        }
        if let Some(l) = b.last_arrivers.first() {
            if b.wait_ns > 0 && l.wait_caused_ns * 2 > b.wait_ns && l.region_end {
                out.push(format!(
                    "balance the work of the parallel region started at {}: thread {} \
                     finished last {} time(s), {} of the {} waited at its end or its barriers",
                    l.site,
                    l.thread,
                    l.instances,
                    ms(l.wait_caused_ns),
                    ms(b.wait_ns)
                ));
            } else if b.wait_ns > 0 && l.wait_caused_ns * 2 > b.wait_ns {
                out.push(format!(
                    "balance the work before {}: thread {} arrived last {} time(s), \
                     {} of the {} waited there",
                    l.site,
                    l.thread,
                    l.instances,
                    ms(l.wait_caused_ns),
                    ms(b.wait_ns)
                ));
            }
        }
    }
    out
}

use lockscope_text::units::ms;

/// Text rendering.
pub fn render_text(r: &BarriersReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let undecided: u64 = r
        .barriers
        .iter()
        .filter(|b| !b.redundancy_decided)
        .map(|b| b.instances)
        .sum();
    if r.all_accesses && undecided == 0 {
        writeln!(
            out,
            "Barriers: {} instance(s), {} redundant (no dependence through memory across them)",
            r.instances, r.redundant
        )?;
    } else if r.all_accesses {
        writeln!(
            out,
            "Barriers: {} instance(s), {} redundant of the {} decided (no dependence through \
             memory across them; {undecided} undecided, see the notes)",
            r.instances,
            r.redundant,
            r.instances - undecided
        )?;
    } else {
        writeln!(
            out,
            "Barriers: {} instance(s) (redundancy undecided)",
            r.instances
        )?;
    }
    if r.barriers.is_empty() {
        writeln!(
            out,
            "  (no pthread_barrier_wait, no OpenMP barrier and no hand-made barrier in the trace)"
        )?;
    }
    // Undecided (a default-mode trace): no redundancy counts at all. A
    // "0 redundant (0%)" on every line read as "every barrier is needed"
    // on PARSEC fluidanimate's trace, which the analysis did not find.
    // The same for one barrier whose crossings cannot all be seen.
    for b in &r.barriers {
        let redundant = |n: u64, f: f64, w: usize| {
            if b.redundancy_decided {
                format!(", {n:>w$} redundant ({:>3.0}%)", f * 100.0)
            } else {
                String::new()
            }
        };
        writeln!(
            out,
            "\n{} ({}{}): {} instance(s), up to {} threads, {} waiting{}{}",
            b.barrier,
            b.address,
            if b.kind == "mutex+condvar" {
                ", mutex + condition variable"
            } else {
                ""
            },
            b.instances,
            b.participants,
            ms(b.wait_ns),
            redundant(b.redundant, b.redundant_fraction, 0),
            if r.all_accesses && !b.redundancy_decided {
                ", redundancy undecided (see the note)"
            } else {
                ""
            },
        )?;
        writeln!(out, "  by calling context of the barrier call:")?;
        for c in &b.contexts {
            let path = if c.path.len() > 1 {
                format!(" [{}]", c.path.join(" <- "))
            } else {
                String::new()
            };
            writeln!(
                out,
                "    {:>5} instance(s){}, {} waiting  {}{}{}",
                c.instances,
                redundant(c.redundant, c.redundant_fraction, 5),
                ms(c.wait_ns),
                c.site,
                path,
                if c.region_end {
                    "  <- the end of an OpenMP parallel region (its join): not removable"
                } else if b.redundancy_decided && c.redundant == c.instances {
                    "  <- always redundant here: elide this call"
                } else {
                    ""
                }
            )?;
        }
        writeln!(out, "  imbalance, blamed on the last arriver:")?;
        for l in &b.last_arrivers {
            writeln!(
                out,
                "    thread {} ({}) arrived last {} time(s), others waited {}  at {}",
                l.thread,
                l.name,
                l.instances,
                ms(l.wait_caused_ns),
                l.site
            )?;
        }
    }
    lockscope_text::text::advice_and_notes(out, &advice(r), &r.notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detailed::testutil::*;
    use lockscope_format::{phase, Event};

    fn bar(time: u64, flags: u8, site: u64) -> Event {
        Event {
            time,
            op: Op::BarrierWait as u8,
            flags,
            addr: 0xB0,
            site,
            ..Event::default()
        }
    }

    #[test]
    fn needed_then_redundant() {
        // Two threads; first barrier (site 0x10) orders t1's write of 0x100
        // before t2's read: needed. Second (0x20): t1 writes 0x200 only
        // before, t2 reads 0x300 only after, nobody touches the other's:
        // redundant.
        let t = trace(vec![
            vec![
                wr(1, 0x100),
                bar(2, phase::BEGIN, 0x10),
                bar(5, phase::DONE, 0x10),
                wr(6, 0x200),
                bar(7, phase::BEGIN, 0x20),
                bar(10, phase::DONE, 0x20),
                rd(11, 0x400),
            ],
            vec![
                bar(4, phase::DONE, 0x10),
                rd(5, 0x100),
                wr(6, 0x300),
                bar(9, phase::DONE, 0x20),
                rd(11, 0x300),
            ],
        ]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&t, &mut d);
        assert_eq!((r.instances, r.redundant), (2, 1), "{r:#?}");
        let b = &r.barriers[0];
        let red: Vec<Option<bool>> = b.instance_list.iter().map(|i| i.redundant).collect();
        assert_eq!(red, vec![Some(false), Some(true)]);
        assert!(b.instance_list[0]
            .dependence
            .as_deref()
            .unwrap()
            .contains("thread 1 wrote 0x100 before, thread 2 reads it after"));
        // t2 arrived last both times (no BEGIN), from two call sites.
        let last: Vec<(u32, u64)> = b
            .last_arrivers
            .iter()
            .map(|l| (l.thread, l.instances))
            .collect();
        assert_eq!(last, vec![(2, 1), (2, 1)]);
        let ctx: Vec<(String, u64, u64)> = b
            .contexts
            .iter()
            .map(|c| (c.site.clone(), c.instances, c.redundant))
            .collect();
        assert_eq!(
            ctx,
            vec![("?+0x10".to_string(), 1, 0), ("?+0x20".to_string(), 1, 1)]
        );
        let adv = advice(&r);
        assert!(
            adv[0].starts_with("elide the barrier call at ?+0x20"),
            "{adv:?}"
        );
    }

    const M: u64 = 0xA0;
    const C: u64 = 0xC0;
    const CNT: u64 = 0xD0;

    fn cond(time: u64, op: Op, flags: u8) -> Event {
        Event {
            time,
            op: op as u8,
            flags,
            addr: C,
            arg: M,
            site: 0x30 + op as u64,
            ..Event::default()
        }
    }

    /// Two threads meet once at a hand-made barrier (mutex M, condition C,
    /// counter CNT): t1 waits (with a spurious wake-up in between), t2
    /// arrives last and releases it. t1 wrote 0x100 before; t2 reads
    /// `after` after. `release` is the releasing call.
    fn hand_made(after: u64, release: Op) -> Trace {
        trace(vec![
            vec![
                wr(10, 0x100),
                lock(20, M),
                wr(21, CNT),
                cond(22, Op::CondWait, phase::BEGIN),
                cond(30, Op::CondWait, phase::DONE),
                rd(31, CNT),
                cond(32, Op::CondWait, phase::BEGIN),
                cond(50, Op::CondWait, phase::DONE),
                rd(51, CNT),
                unlock(52, M),
            ],
            vec![
                lock(40, M),
                wr(41, CNT),
                cond(42, release, phase::DONE),
                unlock(43, M),
                rd(60, after),
            ],
        ])
    }

    #[test]
    fn hand_made_barrier_one_instance_across_a_spurious_wake_up() {
        let t = hand_made(0x100, Op::CondBroadcast);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&t, &mut d);
        assert_eq!((r.instances, r.redundant), (1, 0), "{r:#?}");
        let b = &r.barriers[0];
        assert_eq!((b.kind, b.participants), ("mutex+condvar", 2));
        assert_eq!(b.address, "0xa0");
        let i = &b.instance_list[0];
        assert_eq!(i.last_arriver, 2);
        // t1 arrived at its first wait (22), not at the spurious re-wait.
        let w1 = i.waits.iter().find(|w| w.thread == 1).unwrap();
        assert!(w1.wait_ns > 0, "{i:#?}");
        assert!(
            i.dependence
                .as_deref()
                .unwrap()
                .contains("thread 1 wrote 0x100 before, thread 2 reads it after"),
            "{i:#?}"
        );
    }

    #[test]
    fn hand_made_barrier_counter_is_not_a_dependence() {
        // t2 wrote CNT before, t1 reads it after, under the barrier's
        // mutex: the barrier's own bookkeeping. Nothing else crosses.
        let t = hand_made(0x300, Op::CondBroadcast);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&t, &mut d);
        assert_eq!((r.instances, r.redundant), (1, 1), "{r:#?}");
    }

    /// PARSEC's barrier shape: after the last arriver's broadcast, the
    /// last thread to leave broadcasts again to open the next arrival
    /// phase, waking a fast thread that already came back and waits for
    /// it. Three threads, two instances; the departure broadcasts are not
    /// instances, and the woken thread's arrival goes on.
    #[test]
    fn hand_made_barrier_with_a_departure_phase_broadcast() {
        let b = |time| cond(time, Op::CondBroadcast, phase::DONE);
        let wb = |time| cond(time, Op::CondWait, phase::BEGIN);
        let we = |time| cond(time, Op::CondWait, phase::DONE);
        let t = trace(vec![
            vec![
                wr(5, 0x100),
                lock(10, M),
                wb(11),
                we(40),
                unlock(41, M),
                lock(80, M),
                wb(81),
                we(102),
                unlock(103, M),
            ],
            vec![
                lock(12, M),
                wb(13),
                we(50),
                b(51), // departure phase: wakes t3, waiting to arrive
                unlock(52, M),
                lock(90, M),
                b(91), // last arriver of the second instance
                unlock(92, M),
            ],
            vec![
                lock(30, M),
                b(31), // last arriver of the first instance
                unlock(32, M),
                rd(35, 0x100),
                lock(42, M),
                wb(43),
                we(60),
                wb(61),
                we(100),
                unlock(101, M),
            ],
        ]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&t, &mut d);
        assert_eq!((r.instances, r.redundant), (2, 1), "{r:#?}");
        let bar = &r.barriers[0];
        assert_eq!((bar.kind, bar.participants), ("mutex+condvar", 3));
        let last: Vec<u32> = bar.instance_list.iter().map(|i| i.last_arriver).collect();
        assert_eq!(last, vec![3, 2]);
        assert!(bar.instance_list[0]
            .dependence
            .as_deref()
            .unwrap()
            .contains("thread 1 wrote 0x100 before, thread 3 reads it after"));
        // t3's second arrival spans both of its waits (43..60, 61..100).
        let w3 = bar.instance_list[1]
            .waits
            .iter()
            .find(|w| w.thread == 3)
            .unwrap();
        assert_eq!(w3.wait_ns, 17 + 39, "{:#?}", bar.instance_list[1]);
    }

    /// `hand_made` with more events: `t1` and `t2` are appended to the
    /// first and second threads.
    fn hand_made_with(t1: Vec<Event>, t2: Vec<Event>) -> Trace {
        let mut threads: Vec<Vec<Event>> = hand_made(0x100, Op::CondBroadcast)
            .events
            .into_values()
            .collect();
        threads.sort_by_key(|v| v[0].time);
        threads[0].extend(t1);
        threads[1].extend(t2);
        trace(threads)
    }

    /// A barrier that spins before it waits (PARSEC's, as shipped) is
    /// mostly crossed with no wait at all: its broadcasts wake nobody and
    /// the one instance seen cannot stand for the crossings. Its
    /// redundancy is undecided, never "elide", with a note saying why.
    #[test]
    fn a_barrier_crossed_without_waiting_is_undecided_not_redundant() {
        let b = |time| cond(time, Op::CondBroadcast, phase::DONE);
        let t = hand_made_with(
            vec![lock(80, M), b(81), unlock(82, M)],
            vec![
                lock(70, M),
                b(71),
                unlock(72, M),
                lock(73, M),
                b(74),
                unlock(75, M),
            ],
        );
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&t, &mut d);
        assert!(r.all_accesses);
        let bar = &r.barriers[0];
        assert_eq!((bar.instances, bar.redundant), (1, 0), "{r:#?}");
        assert!(!bar.redundancy_decided, "{r:#?}");
        assert_eq!(bar.instance_list[0].redundant, None);
        assert!(
            r.notes.iter().any(|n| n.contains("woke no thread")),
            "{:?}",
            r.notes
        );
        assert!(advice(&r).iter().all(|a| !a.starts_with("elide")));
        let mut text = Vec::new();
        render_text(&r, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("redundancy undecided"), "{text}");
        assert!(!text.contains("elide this call"), "{text}");
    }

    /// Two threads and a departure phase (the last to leave broadcasts
    /// again): such a broadcast that wakes a thread which came back early
    /// releases as many as the last arriver's. Undecided.
    #[test]
    fn a_two_thread_barrier_with_a_departure_phase_is_undecided() {
        let b = |time| cond(time, Op::CondBroadcast, phase::DONE);
        let t = hand_made_with(vec![lock(60, M), b(61), unlock(62, M)], vec![]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&t, &mut d);
        let bar = &r.barriers[0];
        assert!(!bar.redundancy_decided, "{r:#?}");
        assert!(
            r.notes.iter().any(|n| n.contains("departure phase")),
            "{:?}",
            r.notes
        );
        // Without the departure broadcast it is decided (needed).
        let t = hand_made(0x100, Op::CondBroadcast);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&t, &mut d);
        assert!(r.barriers[0].redundancy_decided, "{r:#?}");
    }

    #[test]
    fn signalled_condition_is_not_a_barrier() {
        let t = hand_made(0x100, Op::CondSignal);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&t, &mut d);
        assert_eq!(r.instances, 0, "{r:#?}");
        assert!(r.barriers.is_empty());
    }

    /// Default detailed mode records atomics everywhere but plain accesses
    /// only inside critical sections: an atomic outside one must not make
    /// redundancy look decidable (it did: every instance came out
    /// redundant).
    #[test]
    fn atomics_outside_sections_leave_redundancy_undecided() {
        let rmw = |time| Event {
            time,
            op: Op::AtomicRmw as u8,
            flags: 2,
            addr: 0x500,
            site: 0x40,
            ..Event::default()
        };
        let t = trace(vec![
            vec![
                rmw(1),
                bar(2, phase::BEGIN, 0x10),
                bar(5, phase::DONE, 0x10),
            ],
            vec![bar(4, phase::DONE, 0x10), rmw(6)],
        ]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&t, &mut d);
        assert!(!r.all_accesses, "{r:#?}");
        assert_eq!((r.instances, r.redundant), (1, 0));
        assert_eq!(r.barriers[0].instance_list[0].redundant, None);
        // The text says undecided, and gives no redundancy count that
        // would read as "needed".
        let mut text = Vec::new();
        render_text(&r, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("(redundancy undecided)"), "{text}");
        assert!(!text.contains("redundant ("), "{text}");
        let dw = crate::deadwrites::analyze(&t, &mut d);
        assert!(!dw.all_accesses, "{dw:#?}");
    }

    #[test]
    fn read_then_overwrite_is_a_dependence() {
        let t = trace(vec![
            vec![
                rd(1, 0x100),
                bar(2, phase::BEGIN, 0x10),
                bar(5, phase::DONE, 0x10),
            ],
            vec![bar(4, phase::DONE, 0x10), wr(6, 0x102)],
        ]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&t, &mut d);
        assert_eq!(r.redundant, 0);
    }
}
