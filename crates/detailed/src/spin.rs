//! Hand-written spinlocks found from memory traces alone (the
//! OS-independent spinlock profiler, §III), with the statistics and
//! warnings a lock API would give.
//!
//! # Detection
//! A *candidate* is a location written by an atomic read-modify-write
//! (exchange, fetch-op, compare-exchange; `A<width>` rows of an imported
//! hardware trace). It is kept as a spinlock only if
//! 1. every value it ever holds is one of two: the value it had first is
//!    *free*, the other *busy* (when the first value is unknown, as in a
//!    hardware trace that starts with a write, free is the value that
//!    was not written first);
//! 2. only the thread that set it busy sets it free again;
//! 3. it is set free at least once (a flag set once and never reset is
//!    not a lock).
//!
//! Rejected candidates are listed with the reason; an atomic counter and a
//! ticket lock (its two words count up) are recognised by name.
//!
//! # Order
//! An atomic's recorded time is taken just after the operation, so two
//! threads' operations on one word a few nanoseconds apart can appear in
//! the wrong order (a waiter's successful exchange stamped before the
//! holder's release). Where the trace gives the value each operation
//! found (detailed mode records old and new values of every atomic), the
//! value changes are ordered the only way a lock allows: while the word is
//! busy, the next change must be its owner's release; while it is free,
//! the earliest pending acquisition goes next. Each thread's own
//! operations are never reordered. Where the found value is not recorded
//! (plain accesses of a hardware trace), it is the last value written in
//! time order, which is exact for a hardware trace's completion stamps.
//!
//! # Statistics
//! Acquisition = the write that changes the word from free to busy;
//! release = the write that changes it back. Attempts = the thread's
//! atomic operations and loads of the word since its previous release;
//! an attempt that found the word busy is a failed attempt. Waiting time
//! runs from the first attempt to the acquisition, holding time from the
//! acquisition to the release; an acquisition at the first try is one
//! whose attempts all found the word free.
//!
//! Protected data (§III-C) is Eraser's lockset over plain accesses, with
//! the spinlocks (and any pthread locks) held at each access. Detailed
//! mode records accesses outside pthread critical sections only with
//! `LOCKSCOPE_ALL_ACCESSES=1`; without them nothing can be said about
//! what a spinlock protects, and the report says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lockscope_format::{phase, Event, Op, Trace};
use serde::Serialize;

use crate::detailed::{hex, Detailed};

/// JSON schema identifier.
pub const SCHEMA: &str = "lockscope.spin/1";

/// Header key (value `1`) set by importers whose plain `Read`/`Write`
/// events carry the value read or written in `arg`, valid where `arg2` is
/// 1 (a hardware trace sees the values; `arg2` is free because `flags`
/// holds the size).
pub const ACCESS_VALUES_KEY: &str = "access_values";

/// A hold this many times the lock's median hold (and at least
/// [`OUTLIER_MIN_NS`]) is reported as a holder that was descheduled.
const OUTLIER_FACTOR: u64 = 100;
/// Smallest hold reported as an outlier: below this, scheduling noise.
const OUTLIER_MIN_NS: u64 = 100_000;
/// Mean hold above which spinning is the wrong way to wait.
const LONG_HOLD_NS: u64 = 50_000;

/// What an operation did to the word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Load,
    Store,
    Rmw,
}

/// One operation on one location, from either source.
#[derive(Clone, Copy, Debug)]
struct MemOp {
    time: u64,
    thread: u32,
    /// Index in the thread's events.
    idx: usize,
    kind: Kind,
    /// Value found (loads: the value read), when known.
    before: Option<u64>,
    /// Value written (stores, read-modify-writes), when known.
    after: Option<u64>,
    site: u64,
    /// Identical repeats of this operation that follow it, recorded as
    /// one `AccessRepeat` (`LOCKSCOPE_COALESCE`): same thread, address,
    /// kind and (loads) value, nothing else of the thread's recorded in
    /// between. Each repeat is one more attempt that found what this one
    /// found.
    repeats: u64,
    /// Time of the thread's previous event (any kind; 0 for its first):
    /// the operation ran after it.
    prev_time: u64,
}

/// One acquisition and its release, for the tests and the lockset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    /// Trace thread id.
    pub thread: u32,
    /// First attempt (ns).
    pub attempt: u64,
    /// Acquisition (ns).
    pub acquired: u64,
    /// Release (ns), `None` if still held at the end of the trace.
    pub released: Option<u64>,
    /// Attempts that found the word busy.
    pub failed: u64,
    /// Of which atomic read-modify-writes (the rest are loads).
    pub failed_rmw: u64,
    /// pc of the acquiring write.
    pub site: u64,
    /// Index of the first attempt's event in its thread.
    attempt_idx: usize,
    /// Index of the acquiring event in its thread.
    acq_idx: usize,
    /// Index of the releasing event in its thread.
    rel_idx: Option<usize>,
    /// The acquisition was preceded by a load of the word (a test before
    /// the test-and-set).
    tested: bool,
}

/// Per-thread statistics of one spinlock.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ThreadStat {
    /// Trace thread id.
    pub thread: u32,
    /// OS thread id (or the hardware trace's thread id).
    pub tid: u32,
    /// Thread name.
    pub name: String,
    /// Acquisitions.
    pub acquisitions: u64,
    /// Releases.
    pub releases: u64,
    /// Attempts that found the lock held by another thread.
    pub failed_attempts: u64,
    /// Of those, atomic read-modify-writes (test-and-set spinning).
    pub failed_rmw: u64,
    /// Of those, loads (the test of test-test-and-set).
    pub busy_reads: u64,
    /// Acquisitions at the first attempt / acquisitions.
    pub first_try_ratio: f64,
    /// Total waiting time, first attempt to acquisition (ns).
    pub wait_ns: u64,
    /// Total holding time, acquisition to release (ns).
    pub hold_ns: u64,
    /// Longest single wait (ns).
    pub max_wait_ns: u64,
    /// Longest single hold (ns).
    pub max_hold_ns: u64,
}

/// Per-site statistics of one spinlock (site = pc of the acquiring write).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SiteStat {
    /// `function (file:line)` or the address.
    pub site: String,
    /// pc.
    pub pc: String,
    /// Acquisitions.
    pub acquisitions: u64,
    /// Failed attempts before these acquisitions.
    pub failed_attempts: u64,
    /// Acquisitions at the first attempt / acquisitions.
    pub first_try_ratio: f64,
    /// Total waiting time (ns).
    pub wait_ns: u64,
    /// Total holding time (ns).
    pub hold_ns: u64,
}

/// A warning with its evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// Stable identifier: `tas-spinning`, `holder-descheduled`,
    /// `long-hold`, `nesting`, `oversubscribed`.
    pub kind: &'static str,
    /// What is wrong and what to do.
    pub message: String,
    /// The observations behind it.
    pub evidence: Vec<String>,
}

/// One detected spinlock.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spinlock {
    /// Address of the lock word.
    pub address: String,
    /// Its symbol, heap allocation context, or address.
    pub symbol: String,
    /// `tas`, `ttas` or `unknown`.
    pub kind: &'static str,
    /// Acquisitions.
    pub acquisitions: u64,
    /// Releases.
    pub releases: u64,
    /// Attempts that found the lock held by another thread.
    pub failed_attempts: u64,
    /// Acquisitions at the first attempt / acquisitions.
    pub first_try_ratio: f64,
    /// Total waiting time (ns).
    pub wait_ns: u64,
    /// Total holding time (ns).
    pub hold_ns: u64,
    /// Per thread, by trace thread id.
    pub threads: Vec<ThreadStat>,
    /// Per acquisition site, most acquisitions first.
    pub sites: Vec<SiteStat>,
    /// Data objects always accessed with this lock held (lockset).
    pub protects: Vec<String>,
    /// Inefficient use, with evidence.
    pub warnings: Vec<Warning>,
    /// Every acquisition, in time order (not serialized).
    #[serde(skip)]
    pub holds: Vec<Hold>,
    /// The lock word's address (not serialized: `address` has it).
    #[serde(skip)]
    pub addr: u64,
}

/// A candidate that is not a two-valued spinlock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rejected {
    /// Address.
    pub address: String,
    /// Symbol or address.
    pub symbol: String,
    /// Why (and what it is instead, when recognised).
    pub reason: String,
}

/// Shared data accessed with no lock held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unprotected {
    /// Data object.
    pub data: String,
    /// Threads that accessed it.
    pub threads: usize,
    /// Some of the sites of unprotected accesses.
    pub sites: Vec<String>,
}

/// The `lockscope spin` result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpinReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Spinlocks found, by address.
    pub spinlocks: Vec<Spinlock>,
    /// Candidates rejected, by address.
    pub rejected: Vec<Rejected>,
    /// Shared data written and accessed with no lock held.
    pub unprotected: Vec<Unprotected>,
    /// Caveats.
    pub notes: Vec<String>,
}

fn is_rmw(op: Op) -> bool {
    op == Op::AtomicRmw
        || op.is_atomic() && !matches!(op, Op::AtomicLoad | Op::AtomicStore | Op::AtomicFence)
}

/// The memory operation an event is, if any.
fn mem_op(thread: u32, idx: usize, e: &Event, values: bool) -> Option<(u64, MemOp)> {
    let op = e.op()?;
    let (kind, before, after) = match op {
        Op::AtomicLoad => (Kind::Load, Some(e.arg), None),
        Op::AtomicStore => (Kind::Store, Some(e.arg), Some(e.arg2)),
        Op::AtomicFence => return None,
        Op::AtomicRmw => (Kind::Rmw, None, Some(e.arg2)),
        op if is_rmw(op) => (Kind::Rmw, Some(e.arg), Some(e.arg2)),
        // Imported plain accesses carry their value in `arg`, valid when
        // `arg2` is 1 (see ACCESS_VALUES_KEY).
        Op::Read => (Kind::Load, (values && e.arg2 == 1).then_some(e.arg), None),
        Op::Write => (Kind::Store, None, (values && e.arg2 == 1).then_some(e.arg)),
        _ => return None,
    };
    Some((
        e.addr,
        MemOp {
            time: e.time,
            thread,
            idx,
            kind,
            before,
            after,
            site: e.site,
            repeats: 0,
            prev_time: 0,
        },
    ))
}

/// Outcome of the detection for one candidate.
enum Verdict {
    Lock {
        holds: Vec<Hold>,
        /// Attempts that precede no acquisition (the trace ended first).
        abandoned: BTreeMap<u32, (u64, u64)>,
    },
    Rejected(String),
}

fn values_of(ops: &[MemOp]) -> BTreeSet<u64> {
    ops.iter().filter_map(|o| o.after).collect()
}

/// True if every write adds one to the value before it (an atomic
/// counter, or one word of a ticket lock).
fn counts_up(ops: &[MemOp]) -> bool {
    // Three values at least: 0 -> 1 alone is a lock's busy value.
    let mut seen: BTreeSet<u64> = ops.iter().filter_map(|o| o.after).collect();
    seen.extend(ops.iter().filter_map(|o| o.before));
    if seen.len() < 3 {
        return false;
    }
    let mut cur: Option<u64> = None;
    let mut writes = 0;
    for o in ops {
        if let Some(a) = o.after {
            let b = o.before.or(cur);
            if let Some(b) = b {
                if a != b.wrapping_add(1) && a != b {
                    return false;
                }
            }
            writes += 1;
            cur = Some(a);
        } else if o.kind == Kind::Load {
            if let Some(v) = o.before {
                cur = Some(v);
            }
        }
    }
    writes >= 2
}

fn describe_values(v: &BTreeSet<u64>) -> String {
    let shown: Vec<String> = v.iter().take(4).map(|x| x.to_string()).collect();
    let more = if v.len() > 4 { ", ..." } else { "" };
    format!("{}{more}", shown.join(", "))
}

/// Runs the detection on one candidate's operations (time-ordered).
fn detect(ops: &[MemOp]) -> Verdict {
    let Some(first) = ops.first() else {
        return Verdict::Rejected("no operations".into());
    };
    let written = values_of(ops);
    let initial = first.before;
    let mut all = written.clone();
    if let Some(i) = initial {
        all.insert(i);
    }
    if all.len() > 2 {
        return Verdict::Rejected(format!(
            "takes {} distinct values ({}), not two",
            all.len(),
            describe_values(&all)
        ));
    }
    let first_written = ops.iter().find_map(|o| o.after);
    let (free, busy) = match (initial, first_written) {
        (_, None) => return Verdict::Rejected("never written with a known value".into()),
        (Some(i), Some(_)) => match all.iter().find(|&&v| v != i) {
            Some(&b) => (i, b),
            None => {
                return Verdict::Rejected(format!("always holds {i}: never set busy"));
            }
        },
        (None, Some(w)) => match all.iter().find(|&&v| v != w) {
            Some(&f) => (f, w),
            None => {
                return Verdict::Rejected(format!(
                    "set to {w} and never reset (a flag, not a lock)"
                ))
            }
        },
    };
    // Found values: recorded, else the last value written in time order.
    let mut cur = free;
    let mut found = Vec::with_capacity(ops.len());
    for o in ops {
        let b = o.before.unwrap_or(cur);
        found.push(b);
        if let Some(a) = o.after {
            cur = a;
        } else if o.kind == Kind::Store {
            // A plain store of an unknown value to a lock word frees it.
            cur = free;
        } else if let (Kind::Load, Some(v)) = (o.kind, o.before) {
            // A read value is the truth about the word at that time.
            cur = v;
        }
    }
    // Value changes, queued per thread in program order. A plain store
    // whose value is not recorded (detailed mode: `lock = 0;` seen with
    // LOCKSCOPE_ALL_ACCESSES=1) can only be a release: it counts as one
    // when the lock's owner makes it, and is ignored otherwise.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Change {
        Acq,
        Rel,
        PlainStore,
    }
    let mut queues: BTreeMap<u32, std::collections::VecDeque<(usize, Change)>> = BTreeMap::new();
    for (i, o) in ops.iter().enumerate() {
        let c = match o.after {
            None if o.kind == Kind::Store => Change::PlainStore,
            None => continue,
            Some(a) if found[i] == free && a == busy => Change::Acq,
            Some(a) if found[i] == busy && a == free => Change::Rel,
            Some(_) => continue,
        };
        queues.entry(o.thread).or_default().push_back((i, c));
    }
    for q in queues.values_mut() {
        q.make_contiguous().sort_by_key(|&(i, _)| ops[i].idx);
    }
    let unknown_writes = ops
        .iter()
        .filter(|o| o.kind == Kind::Store && o.after.is_none())
        .count();
    let not_recorded = "its release was not recorded (a plain store `lock = 0`? record with \
                        `lockscope record --all-accesses`, or release with an atomic store)";
    // Changes in the only order a lock allows (see the module doc).
    let mut owner: Option<(u32, usize)> = None;
    let mut changes: Vec<(usize, usize)> = Vec::new(); // (acq op, rel op)
    let mut open_acq: Option<usize> = None;
    loop {
        match owner {
            None => {
                // Plain stores while the lock is free change nothing.
                for q in queues.values_mut() {
                    while q.front().is_some_and(|x| x.1 == Change::PlainStore) {
                        q.pop_front();
                    }
                }
                let next = queues
                    .iter()
                    .filter_map(|(&t, q)| q.front().map(|&(i, c)| (t, i, c)))
                    .filter(|&(_, _, c)| c == Change::Acq)
                    .min_by_key(|&(t, i, _)| (ops[i].time, t, ops[i].idx));
                match next {
                    Some((t, i, _)) => {
                        queues.get_mut(&t).and_then(|q| q.pop_front());
                        owner = Some((t, i));
                        open_acq = Some(i);
                    }
                    None => {
                        if let Some((&t, q)) = queues.iter().find(|(_, q)| !q.is_empty()) {
                            let i = q.front().map_or(0, |x| x.0);
                            return Verdict::Rejected(format!(
                                "set free ({free}) at {} ns by thread {t}, which had not set it busy",
                                ops[i].time
                            ));
                        }
                        break;
                    }
                }
            }
            Some((o, acq)) => {
                let head = queues.get(&o).and_then(|q| q.front().copied());
                match head {
                    Some((i, Change::Rel | Change::PlainStore)) => {
                        queues.get_mut(&o).and_then(|q| q.pop_front());
                        changes.push((acq, i));
                        open_acq = None;
                        owner = None;
                    }
                    _ => {
                        // The earliest change nobody could make: a free
                        // by another thread, or a second acquisition
                        // whose release left no trace.
                        let first = queues
                            .iter()
                            .filter_map(|(&t, q)| {
                                q.iter()
                                    .find(|x| x.1 != Change::PlainStore)
                                    .map(|&x| (t, x))
                            })
                            .min_by_key(|&(t, (i, _))| (ops[i].time, t));
                        let Some((t, (i, c))) = first else { break };
                        return Verdict::Rejected(match c {
                            Change::Rel => format!(
                                "set free at {} ns by thread {t} while thread {o} held it \
                                 (set busy at {} ns): not only the owner sets it free",
                                ops[i].time, ops[acq].time
                            ),
                            _ if t == o => format!(
                                "set busy again at {} ns by thread {o}, which held it since {} \
                                 ns: {not_recorded}",
                                ops[i].time, ops[acq].time
                            ),
                            _ => format!(
                                "set busy at {} ns by thread {t} while thread {o} held it (set \
                                 busy at {} ns): {not_recorded}",
                                ops[i].time, ops[acq].time
                            ),
                        });
                    }
                }
            }
        }
    }
    if changes.is_empty() {
        if unknown_writes > 0 && open_acq.is_some() {
            return Verdict::Rejected(format!(
                "set busy, then written {unknown_writes} time(s) by other threads' plain stores \
                 whose values were not recorded"
            ));
        }
        return Verdict::Rejected(if open_acq.is_some() {
            format!("set to {busy} once and never reset (a flag, not a lock)")
        } else {
            "its value never changes".into()
        });
    }
    // Episodes per thread, in program order.
    let mut role: HashMap<usize, bool> = HashMap::new(); // op -> is acquisition
    let mut rel_of: HashMap<usize, usize> = HashMap::new();
    // When each release happened. Its stamp is taken after it ran and can
    // be late by as long as the thread was preempted in between (tens of
    // ms on a loaded machine); in the word's order (`changes`), it ran
    // before the next acquisition, which had run when that one was
    // stamped, and after the thread's previous event. The stamp is
    // clamped into that window, so a late stamp neither inflates the hold
    // nor makes it overlap the next owner's.
    let mut rel_time: HashMap<usize, u64> = HashMap::new();
    for (k, &(a, r)) in changes.iter().enumerate() {
        role.insert(a, true);
        role.insert(r, false);
        rel_of.insert(a, r);
        let next_acq = changes
            .get(k + 1)
            .map(|&(n, _)| n)
            .or(open_acq)
            .map_or(u64::MAX, |n| ops[n].time);
        let t = ops[r]
            .time
            .min(next_acq)
            .max(ops[r].prev_time)
            .max(ops[a].time);
        rel_time.insert(r, t);
    }
    if let Some(a) = open_acq {
        role.insert(a, true);
    }
    let mut by_thread: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, o) in ops.iter().enumerate() {
        by_thread.entry(o.thread).or_default().push(i);
    }
    let mut holds = Vec::new();
    let mut abandoned = BTreeMap::new();
    for (&t, list) in by_thread.iter_mut() {
        list.sort_by_key(|&i| ops[i].idx);
        let mut holding = false;
        let mut first: Option<(u64, usize)> = None;
        let mut failed = 0u64;
        let mut failed_rmw = 0u64;
        let mut last_attempt: Option<Kind> = None;
        for &i in list.iter() {
            let o = &ops[i];
            match role.get(&i) {
                Some(true) => {
                    let rel = rel_of.get(&i).copied();
                    holds.push(Hold {
                        thread: t,
                        attempt: first.map_or(o.time, |f| f.0).min(o.time),
                        attempt_idx: first.map_or(o.idx, |f| f.1),
                        acquired: o.time,
                        released: rel.map(|r| rel_time.get(&r).copied().unwrap_or(ops[r].time)),
                        failed,
                        failed_rmw,
                        site: o.site,
                        acq_idx: o.idx,
                        rel_idx: rel.map(|r| ops[r].idx),
                        tested: last_attempt == Some(Kind::Load),
                    });
                    holding = true;
                    first = None;
                    failed = 0;
                    failed_rmw = 0;
                    last_attempt = None;
                }
                Some(false) => holding = false,
                None if !holding && o.kind != Kind::Store => {
                    first.get_or_insert((o.time, o.idx));
                    last_attempt = Some(o.kind);
                    if found[i] == busy {
                        // Coalesced repeats found the same value (a load
                        // repeats only with an identical value read).
                        failed += 1 + o.repeats;
                        if o.kind == Kind::Rmw {
                            failed_rmw += 1 + o.repeats;
                        }
                    }
                }
                None => {}
            }
        }
        if failed > 0 {
            abandoned.insert(t, (failed, failed_rmw));
        }
    }
    holds.sort_by_key(|h| (h.acquired, h.thread, h.acq_idx));
    Verdict::Lock { holds, abandoned }
}

/// A lock whose busy value is its owner's id: every thread writes one
/// value of its own (different threads different ones) and the first
/// value back. Many-valued, so not a two-valued spinlock, but a lock.
fn owner_id_lock(ops: &[MemOp]) -> Option<String> {
    let free = ops.first()?.before?;
    let mut own: BTreeMap<u32, u64> = BTreeMap::new();
    for o in ops {
        let Some(a) = o.after else { continue };
        // A failed compare-exchange leaves the holder's value: not its own.
        if a == free || o.before == Some(a) {
            continue;
        }
        if *own.entry(o.thread).or_insert(a) != a {
            return None;
        }
    }
    let ids: BTreeSet<u64> = own.values().copied().collect();
    let frees = ops.iter().filter(|o| o.after == Some(free)).count();
    (own.len() >= 2 && ids.len() == own.len() && frees > 0).then(|| {
        format!(
            "owner-id lock (free = {free}, each of {} threads writes its own value): a lock, \
             but not a two-valued spinlock",
            own.len()
        )
    })
}

/// Names what a rejected many-valued word is, when it can tell.
fn recognise(addr: u64, ops: &[MemOp], all: &BTreeMap<u64, Vec<MemOp>>) -> Option<String> {
    if let Some(why) = owner_id_lock(ops) {
        return Some(why);
    }
    if !counts_up(ops) {
        return None;
    }
    // A ticket lock: two words of one cache line that both count up, one
    // taken by read-modify-writes (the next ticket), the other read by the
    // waiters (now serving).
    let line = addr & !63;
    for (&other, oops) in all.range(line..line + 64) {
        if other == addr || !counts_up(oops) {
            continue;
        }
        // The next-ticket word is the one taken with read-modify-writes;
        // where both are, the one the waiters read is now-serving.
        let count = |v: &[MemOp], k: Kind| v.iter().filter(|o| o.kind == k).count();
        let key = |v: &[MemOp]| (count(v, Kind::Rmw), std::cmp::Reverse(count(v, Kind::Load)));
        let (next, serving) = if key(ops) >= key(oops) {
            (addr, other)
        } else {
            (other, addr)
        };
        return Some(format!(
            "ticket lock (next ticket {}, now serving {}): its words count up, so it is not a \
             two-valued spinlock",
            hex(next),
            hex(serving)
        ));
    }
    let n = ops.iter().filter(|o| o.after.is_some()).count();
    Some(format!(
        "atomic counter ({n} increments by one), not a lock"
    ))
}

fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[v.len() / 2]
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        (a as f64 / b as f64 * 1e4).round() / 1e4
    }
}

/// Held-lock bookkeeping of one thread for the lockset.
#[derive(Default)]
struct Loc {
    first_thread: u32,
    threads: BTreeSet<u32>,
    shared: bool,
    cand: Option<Vec<u64>>,
    written: bool,
    unlocked_sites: BTreeSet<u64>,
    process: u32,
    time: u64,
    /// Time of the latest access (for hand-over at thread creation).
    last_time: u64,
}

/// True if any event is an atomic read-modify-write (a candidate).
pub fn has_candidates(t: &Trace) -> bool {
    t.events
        .values()
        .flatten()
        .any(|e| e.op().is_some_and(is_rmw))
}

/// Runs the analysis on a trace in memory.
pub fn analyze(t: &Trace, symbolize: bool) -> SpinReport {
    if !has_candidates(t) {
        // Most traces (pthread-only recordings) have no atomics at all:
        // skip building the detailed view.
        return SpinReport {
            schema: SCHEMA,
            spinlocks: Vec::new(),
            rejected: Vec::new(),
            unprotected: Vec::new(),
            notes: vec![
                "no atomic read-modify-write was recorded: spinlocks are found in traces of \
                 programs built with `lockscope cc`/`c++`, or imported hardware traces"
                    .into(),
            ],
        };
    }
    let mut d = Detailed::from_trace(t, symbolize);
    analyze_with(t, &mut d)
}

/// Runs the analysis with a [`Detailed`] view already built from `t` (for
/// names of data and code).
pub fn analyze_with(t: &Trace, d: &mut Detailed) -> SpinReport {
    // Threads are named after they start (pthread_setname_np): the last
    // name in time is the one a reader knows them by (the file may hold
    // a thread's names out of time order: see `input::Meta::thread_names`).
    let mut named_at: HashMap<u32, u64> = HashMap::new();
    for r in &t.records {
        if let lockscope_format::Record::ThreadName(n) = r {
            if named_at.get(&n.thread).is_some_and(|&at| n.time < at) {
                continue;
            }
            if let Some(s) = d.threads.get_mut(&n.thread) {
                named_at.insert(n.thread, n.time);
                s.name.clone_from(&n.name);
            }
        }
    }
    let values = t.header.get(ACCESS_VALUES_KEY) == Some("1");
    // Candidates: locations of atomic read-modify-writes.
    let mut cands: BTreeSet<u64> = BTreeSet::new();
    for evs in t.events.values() {
        for e in evs {
            if e.op().is_some_and(is_rmw) {
                cands.insert(e.addr);
            }
        }
    }
    // Every atomic location (ticket locks read one word and count up the
    // other) plus plain accesses of the candidates.
    let mut ops: BTreeMap<u64, Vec<MemOp>> = BTreeMap::new();
    for (&tid, evs) in &t.events {
        // The thread's last plain access, atomic load, exchange or
        // compare-exchange (the operations the runtime coalesces when they
        // repeat identically), and where it went in `ops`: an
        // `AccessRepeat` repeats it (any other access, atomic or
        // synchronization call of the thread ends a run first).
        let mut last: Option<(u64, Op, Option<usize>)> = None;
        for (i, e) in evs.iter().enumerate() {
            let op = e.op();
            if op == Some(Op::AccessRepeat) {
                if let Some((addr, kind, Some(pos))) = last {
                    if addr == e.addr && Op::repeated(e.arg2) == Some(kind) {
                        if let Some(m) = ops.get_mut(&addr).and_then(|v| v.get_mut(pos)) {
                            m.repeats = m.repeats.saturating_add(e.arg);
                        }
                    }
                }
                continue;
            }
            let repeatable = matches!(
                op,
                Some(Op::Read | Op::Write | Op::AtomicLoad | Op::AtomicExchange | Op::AtomicCas)
            );
            let plain = matches!(op, Some(Op::Read | Op::Write));
            if plain && !cands.contains(&e.addr) {
                last = op.map(|o| (e.addr, o, None));
                continue;
            }
            if let Some((a, mut m)) = mem_op(tid, i, e, values) {
                m.prev_time = i.checked_sub(1).map_or(0, |p| evs[p].time);
                let v = ops.entry(a).or_default();
                v.push(m);
                last = op
                    .filter(|_| repeatable)
                    .map(|o| (e.addr, o, Some(v.len() - 1)));
            } else if op.is_some_and(|o| o.is_atomic() || repeatable) {
                last = None;
            }
        }
    }
    for v in ops.values_mut() {
        v.sort_by_key(|o| (o.time, o.thread, o.idx));
    }
    let process_of =
        |d: &Detailed, th: u32| d.threads.get(&th).map_or(d.main_process, |s| s.process);
    let mut spinlocks = Vec::new();
    let mut rejected = Vec::new();
    for &addr in &cands {
        let Some(v) = ops.get(&addr) else { continue };
        let first = v.first().map_or(0, |o| o.time);
        let p = v
            .first()
            .map_or(d.main_process, |o| process_of(d, o.thread));
        let symbol = d.lock_name(p, addr, first);
        match detect(v) {
            Verdict::Rejected(mut reason) => {
                if let Some(what) = recognise(addr, v, &ops) {
                    reason = format!("{what}; {reason}");
                }
                rejected.push(Rejected {
                    address: hex(addr),
                    symbol,
                    reason,
                });
            }
            Verdict::Lock {
                holds, abandoned, ..
            } => spinlocks.push(build(addr, symbol, holds, &abandoned, d)),
        }
    }
    let mut notes = Vec::new();
    let unprotected = lockset(t, d, &mut spinlocks, &mut notes);
    warn(t, d, &mut spinlocks);
    SpinReport {
        schema: SCHEMA,
        spinlocks,
        rejected,
        unprotected,
        notes,
    }
}

fn build(
    addr: u64,
    symbol: String,
    holds: Vec<Hold>,
    abandoned: &BTreeMap<u32, (u64, u64)>,
    d: &mut Detailed,
) -> Spinlock {
    let mut threads: BTreeMap<u32, ThreadStat> = BTreeMap::new();
    let mut sites: BTreeMap<u64, (SiteStat, u64)> = BTreeMap::new();
    let mut firsts: BTreeMap<u32, u64> = BTreeMap::new();
    let (mut tested, mut untested) = (0u64, 0u64);
    for h in &holds {
        let ts = threads.entry(h.thread).or_default();
        let wait = h.acquired - h.attempt;
        let hold = h.released.map_or(0, |r| r.saturating_sub(h.acquired));
        ts.acquisitions += 1;
        ts.releases += u64::from(h.released.is_some());
        ts.failed_attempts += h.failed;
        ts.failed_rmw += h.failed_rmw;
        ts.busy_reads += h.failed - h.failed_rmw;
        ts.wait_ns += wait;
        ts.hold_ns += hold;
        ts.max_wait_ns = ts.max_wait_ns.max(wait);
        ts.max_hold_ns = ts.max_hold_ns.max(hold);
        *firsts.entry(h.thread).or_default() += u64::from(h.failed == 0);
        let (s, f) = sites.entry(h.site).or_default();
        s.acquisitions += 1;
        s.failed_attempts += h.failed;
        s.wait_ns += wait;
        s.hold_ns += hold;
        *f += u64::from(h.failed == 0);
        if h.tested {
            tested += 1;
        } else {
            untested += 1;
        }
    }
    for (&t, &(failed, rmw)) in abandoned {
        let ts = threads.entry(t).or_default();
        ts.failed_attempts += failed;
        ts.failed_rmw += rmw;
        ts.busy_reads += failed - rmw;
    }
    let mut lock = Spinlock {
        address: hex(addr),
        symbol,
        kind: if tested * 10 >= (tested + untested) * 9 {
            "ttas"
        } else if untested * 10 >= (tested + untested) * 9 {
            "tas"
        } else {
            "unknown"
        },
        acquisitions: holds.len() as u64,
        releases: 0,
        failed_attempts: 0,
        first_try_ratio: 0.0,
        wait_ns: 0,
        hold_ns: 0,
        threads: Vec::new(),
        sites: Vec::new(),
        protects: Vec::new(),
        warnings: Vec::new(),
        holds: Vec::new(),
        addr,
    };
    let mut first_total = 0;
    for (t, mut ts) in threads {
        let span = d.threads.get(&t).cloned().unwrap_or_default();
        ts.thread = t;
        ts.tid = span.tid;
        ts.name = span.name;
        let f = firsts.get(&t).copied().unwrap_or(0);
        first_total += f;
        ts.first_try_ratio = ratio(f, ts.acquisitions);
        lock.releases += ts.releases;
        lock.failed_attempts += ts.failed_attempts;
        lock.wait_ns += ts.wait_ns;
        lock.hold_ns += ts.hold_ns;
        lock.threads.push(ts);
    }
    lock.first_try_ratio = ratio(first_total, lock.acquisitions);
    let proc_of = |th: u32| d.threads.get(&th).map_or(d.main_process, |s| s.process);
    let site_proc: HashMap<u64, u32> = holds.iter().map(|h| (h.site, proc_of(h.thread))).collect();
    for (pc, (mut s, f)) in sites {
        s.first_try_ratio = ratio(f, s.acquisitions);
        s.pc = hex(pc);
        s.site = if pc == 0 {
            "(no site)".into()
        } else {
            let name = d.site(site_proc.get(&pc).copied().unwrap_or(d.main_process), pc);
            // No symbol table (an imported hardware trace): the address.
            if name.starts_with('?') {
                hex(pc)
            } else {
                name
            }
        };
        lock.sites.push(s);
    }
    lock.sites
        .sort_by(|a, b| b.acquisitions.cmp(&a.acquisitions).then(a.pc.cmp(&b.pc)));
    lock.holds = holds;
    lock
}

/// One plain access for the lockset, with the spinlocks held (an index
/// into the interned sets).
struct Acc {
    time: u64,
    thread: u32,
    idx: usize,
    addr: u64,
    write: bool,
    set: u32,
    unlocked: bool,
    site: u64,
    process: u32,
}

/// Eraser over plain accesses with spinlocks and pthread locks as locks;
/// fills `protects` and returns the unprotected shared data.
fn lockset(
    t: &Trace,
    d: &mut Detailed,
    locks: &mut [Spinlock],
    notes: &mut Vec<String>,
) -> Vec<Unprotected> {
    // Where each thread's holds start and end, by event index.
    let mut marks: HashMap<u32, BTreeMap<usize, Vec<(u64, bool)>>> = HashMap::new();
    let mut lock_addrs: BTreeSet<u64> = BTreeSet::new();
    for l in locks.iter() {
        let addr = l.addr;
        lock_addrs.insert(addr);
        for h in &l.holds {
            let m = marks.entry(h.thread).or_default();
            m.entry(h.acq_idx).or_default().push((addr, true));
            if let Some(r) = h.rel_idx {
                m.entry(r).or_default().push((addr, false));
            }
        }
    }
    // Whether the thread held a pthread lock at each of its events, from
    // the synchronization layer (one non-synthetic step per event, in each
    // thread's file order): it decides what a condition wait gives up and
    // takes back, even after a timeout (whose FAIL carries the errno, not
    // the mutex, in `arg`).
    let mut pthread_held: HashMap<u32, Vec<bool>> = HashMap::new();
    lockscope_trace::sync::for_each_trace_step(t, false, |s, si| {
        if !s.kind.is_synthetic() {
            pthread_held
                .entry(s.thread)
                .or_default()
                .push(!si.held(s.thread).is_empty());
        }
    });
    let mut locs: BTreeMap<u64, Loc> = BTreeMap::new();
    let mut any_plain = false;
    let mut accesses: Vec<Acc> = Vec::new();
    let mut sets: Vec<Vec<u64>> = Vec::new();
    let mut set_ids: HashMap<Vec<u64>, u32> = HashMap::new();
    for (&tid, evs) in &t.events {
        let process = d.threads.get(&tid).map_or(d.main_process, |s| s.process);
        let m = marks.get(&tid);
        let mut spin: Vec<u64> = Vec::new();
        let pthread = pthread_held.get(&tid).map_or(&[][..], Vec::as_slice);
        for (i, e) in evs.iter().enumerate() {
            if let Some(ch) = m.and_then(|m| m.get(&i)) {
                for &(a, acq) in ch {
                    if acq {
                        spin.push(a);
                    } else if let Some(p) = spin.iter().rposition(|&x| x == a) {
                        spin.remove(p);
                    }
                }
                continue;
            }
            let Some(op) = e.op() else { continue };
            match op {
                Op::Read | Op::Write if !lock_addrs.contains(&e.addr) => {
                    any_plain = true;
                    let mut held = spin.clone();
                    held.sort_unstable();
                    let next = sets.len() as u32;
                    let set = *set_ids.entry(held.clone()).or_insert_with(|| {
                        sets.push(held);
                        next
                    });
                    accesses.push(Acc {
                        time: e.time,
                        thread: tid,
                        idx: i,
                        addr: e.addr,
                        write: op == Op::Write,
                        set,
                        unlocked: spin.is_empty() && !pthread.get(i).copied().unwrap_or(false),
                        site: e.site,
                        process,
                    });
                }
                _ => {}
            }
        }
    }
    let starts: HashMap<u32, u64> = t
        .records
        .iter()
        .filter_map(|r| match r {
            lockscope_format::Record::Thread(th) => Some((th.id, th.start_ns)),
            _ => None,
        })
        .collect();
    // Eraser in time order: a location's first thread may initialise it
    // without locks; from the second thread on, the locks held at every
    // access are intersected.
    accesses.sort_unstable_by_key(|a| (a.time, a.thread, a.idx));
    for a in &accesses {
        let l = locs.entry(a.addr).or_insert_with(|| Loc {
            first_thread: a.thread,
            process: a.process,
            time: a.time,
            ..Loc::default()
        });
        l.threads.insert(a.thread);
        l.written |= a.write;
        if a.thread != l.first_thread && !l.shared {
            // Ownership handed over by thread creation: the owner's last
            // access came before this thread started (data filled before
            // a thread is created, a `std::thread` state block). Eraser
            // has no happens-before; thread start times give this much.
            let handed = starts.get(&a.thread).is_some_and(|&st| l.last_time < st);
            if handed {
                l.first_thread = a.thread;
            } else {
                l.shared = true;
            }
        }
        l.last_time = a.time;
        if !l.shared {
            continue;
        }
        let held = &sets[a.set as usize];
        match &mut l.cand {
            None => l.cand = Some(held.clone()),
            Some(c) => c.retain(|x| held.binary_search(x).is_ok()),
        }
        if a.unlocked && l.unlocked_sites.len() < 8 {
            l.unlocked_sites.insert(a.site);
        }
    }
    let mut protects: HashMap<u64, BTreeSet<String>> = HashMap::new();
    let mut unprotected: BTreeMap<String, (BTreeSet<u32>, BTreeSet<String>)> = BTreeMap::new();
    for (&addr, l) in &locs {
        if !l.shared {
            continue;
        }
        let name = d.object_base(l.process, addr, l.time);
        for &lk in l.cand.iter().flatten() {
            protects.entry(lk).or_default().insert(name.clone());
        }
        if l.written && !l.unlocked_sites.is_empty() {
            let u = unprotected.entry(name).or_default();
            u.0.extend(l.threads.iter().copied());
            for &s in &l.unlocked_sites {
                if u.1.len() < 8 {
                    u.1.insert(d.site(l.process, s));
                }
            }
        }
    }
    for l in locks.iter_mut() {
        let addr = l.addr;
        l.protects = protects
            .remove(&addr)
            .map(|s| s.into_iter().collect())
            .unwrap_or_default();
    }
    if !locks.is_empty() && !any_plain {
        notes.push(
            "no plain accesses were recorded, so what the spinlocks protect is unknown: detailed \
             mode records accesses outside pthread critical sections only with \
             `lockscope record --all-accesses`"
                .into(),
        );
    }
    unprotected
        .into_iter()
        .map(|(data, (th, sites))| Unprotected {
            data,
            threads: th.len(),
            sites: sites.into_iter().collect(),
        })
        .collect()
}

/// Descheduling seen in the trace (imported hardware traces): per thread,
/// the times it left its core.
fn cpu_outs(t: &Trace) -> HashMap<u32, Vec<(u64, u64)>> {
    let mut m: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    for (&tid, evs) in &t.events {
        for e in evs {
            if e.op() == Some(Op::CpuOut) {
                m.entry(tid).or_default().push((e.time, e.arg));
            }
        }
    }
    m
}

fn warn(t: &Trace, d: &Detailed, locks: &mut [Spinlock]) {
    let outs = cpu_outs(t);
    // Nesting: which other spinlocks each acquisition happened inside,
    // by a sweep over each thread's holds in acquisition order (the set
    // of holds still open is as deep as the nesting).
    let mut by_thread: HashMap<u32, Vec<(u64, u64, usize)>> = HashMap::new();
    for (li, l) in locks.iter().enumerate() {
        for h in &l.holds {
            by_thread.entry(h.thread).or_default().push((
                h.acquired,
                h.released.unwrap_or(u64::MAX),
                li,
            ));
        }
    }
    let mut nested: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); locks.len()];
    for v in by_thread.values_mut() {
        v.sort_unstable();
        let mut open: Vec<(u64, usize)> = Vec::new();
        for &(a, r, li) in v.iter() {
            open.retain(|&(end, _)| end > a);
            for &(_, outer) in &open {
                if outer != li {
                    *nested[li].entry(locks[outer].symbol.clone()).or_default() += 1;
                }
            }
            open.push((r, li));
        }
    }
    let cpus = t.header.cpus;
    let name = |th: u32| {
        d.threads.get(&th).map_or_else(
            || format!("thread {th}"),
            |s| format!("{} (tid {})", s.name, s.tid),
        )
    };
    for (li, l) in locks.iter_mut().enumerate() {
        let mut w = Vec::new();
        let failed_rmw: u64 = l.threads.iter().map(|t| t.failed_rmw).sum();
        if l.kind == "tas" && failed_rmw > 0 {
            w.push(Warning {
                kind: "tas-spinning",
                message: "waiters spin with atomic read-modify-writes (test-and-set): every \
                          failed attempt takes the cache line exclusive and slows the holder. \
                          Spin on a plain load first and back off (test-test-and-set), or use \
                          a queue lock; lockscope-locks has ttas, ticket, mcs and clh \
                          (`lockscope locks --list`, compare with `lockscope locks bench`)"
                    .into(),
                evidence: vec![format!(
                    "{failed_rmw} failed atomic attempts over {} acquisitions",
                    l.acquisitions
                )],
            });
        }
        let mut holds: Vec<u64> = l
            .holds
            .iter()
            .filter_map(|h| h.released.map(|r| r - h.acquired))
            .collect();
        let med = median(&mut holds);
        let mut ev = Vec::new();
        for h in &l.holds {
            let Some(r) = h.released else { continue };
            let hold = r - h.acquired;
            if let Some(o) = outs
                .get(&h.thread)
                .and_then(|v| v.iter().find(|&&(time, _)| time >= h.acquired && time < r))
            {
                ev.push(format!(
                    "{} left core {} at {} ns while holding it (acquired at {} ns, held {} ns)",
                    name(h.thread),
                    o.1,
                    o.0,
                    h.acquired,
                    hold
                ));
            } else if hold >= OUTLIER_MIN_NS && hold >= med.saturating_mul(OUTLIER_FACTOR) {
                ev.push(format!(
                    "{} held it {hold} ns from {} ns; the median hold is {med} ns",
                    name(h.thread),
                    h.acquired
                ));
            }
        }
        if !ev.is_empty() {
            let n = ev.len();
            ev.truncate(8);
            w.push(Warning {
                kind: "holder-descheduled",
                message: format!(
                    "{n} hold(s) where the holder was preempted or descheduled while holding \
                     the lock: every waiter spins until it runs again. Keep the critical \
                     section free of blocking calls, or disable preemption (interrupts) inside \
                     it"
                ),
                evidence: ev,
            });
        }
        if !holds.is_empty() {
            let mean = holds.iter().sum::<u64>() / holds.len() as u64;
            if mean >= LONG_HOLD_NS {
                w.push(Warning {
                    kind: "long-hold",
                    message: "critical sections are long for a spinlock: waiters burn a CPU \
                              for the whole hold. Shorten them or use a blocking lock"
                        .into(),
                    evidence: vec![format!(
                        "mean hold {mean} ns over {} releases (longest {} ns)",
                        holds.len(),
                        holds.last().copied().unwrap_or(0)
                    )],
                });
            }
        }
        let nested = std::mem::take(&mut nested[li]);
        if !nested.is_empty() {
            w.push(Warning {
                kind: "nesting",
                message: "acquired while holding another spinlock: a waiter for the inner \
                          lock keeps the outer one held while it spins; take them in one fixed \
                          order"
                    .into(),
                evidence: nested
                    .into_iter()
                    .map(|(s, n)| format!("{n} acquisition(s) while holding {s}"))
                    .collect(),
            });
        }
        if cpus > 0 && l.threads.len() > cpus as usize {
            w.push(Warning {
                kind: "oversubscribed",
                message: "more threads use this spinlock than there are CPUs: a waiter can \
                          spin on the CPU the holder needs. Use a blocking lock"
                    .into(),
                evidence: vec![format!("{} threads, {cpus} CPUs", l.threads.len())],
            });
        }
        l.warnings = w;
    }
}

/// Header key set on a trace written by [`annotate`].
pub const ANNOTATED_KEY: &str = "spin_annotated";

/// A copy of `t` in which every acquisition and release of the spinlocks
/// of `r` (the result of [`analyze`] on `t`) is also a pthread-spinlock
/// event, so that the lock report, the replay and every other analysis of
/// lock calls see the hand-written spinlocks as locks: `SpinLock` (one
/// `DONE` after the acquiring write; for an acquisition that found the
/// lock busy first, a `BEGIN` at the first attempt and a contended `DONE`
/// at the acquisition) and `SpinUnlock` after the releasing write.
///
/// A thread waiting in a lock call records nothing else, so the spinning
/// itself (the thread's accesses to the lock word between its first
/// attempt and the acquiring write) is left out of the copy; where the
/// thread did anything else meanwhile, the acquisition is written as
/// uncontended instead.
pub fn annotate(t: &Trace, r: &SpinReport) -> Trace {
    #[derive(Default)]
    struct Edits {
        drop: std::collections::HashSet<usize>,
        before: HashMap<usize, Vec<Event>>,
        after: HashMap<usize, Vec<Event>>,
    }
    let mut edits: HashMap<u32, Edits> = HashMap::new();
    for l in &r.spinlocks {
        for h in &l.holds {
            let Some(evs) = t.events.get(&h.thread) else {
                continue;
            };
            let at = |i: usize| evs.get(i).copied().unwrap_or_default();
            let acq = at(h.acq_idx);
            let mk = |time: u64, op: Op, flags: u8, src: &Event| Event {
                time,
                op: op as u8,
                flags,
                addr: l.addr,
                site: src.site,
                stack: src.stack,
                arg: 0,
                arg2: 0,
            };
            let ed = edits.entry(h.thread).or_default();
            let window = h.attempt_idx.min(h.acq_idx)..h.acq_idx;
            let spinning_only = evs.get(window.clone()).is_some_and(|w| {
                w.iter().all(|e| {
                    e.addr == l.addr
                        && e.op().is_some_and(|o| {
                            o.is_atomic() || matches!(o, Op::Read | Op::Write | Op::AccessRepeat)
                        })
                })
            });
            if h.failed > 0 && spinning_only {
                ed.drop.extend(window);
                let v = ed.before.entry(h.acq_idx).or_default();
                v.push(mk(
                    h.attempt,
                    Op::SpinLock,
                    phase::BEGIN,
                    &at(h.attempt_idx),
                ));
                v.push(mk(
                    h.acquired,
                    Op::SpinLock,
                    phase::DONE | phase::CONTENDED,
                    &acq,
                ));
            } else {
                ed.after.entry(h.acq_idx).or_default().push(mk(
                    h.acquired,
                    Op::SpinLock,
                    phase::DONE,
                    &acq,
                ));
            }
            if let (Some(ri), Some(rt)) = (h.rel_idx, h.released) {
                // Before the releasing store: `rt` may be earlier than its
                // stamp (see `detect`), never earlier than the event
                // before it, so the thread's times stay in order.
                ed.before
                    .entry(ri)
                    .or_default()
                    .push(mk(rt, Op::SpinUnlock, phase::DONE, &at(ri)));
            }
        }
    }
    let mut out = Trace {
        header: t.header.clone(),
        records: t.records.clone(),
        events: t.events.clone(),
        footer: t.footer.clone(),
        // An annotated trace is written whole: what the source skipped
        // is not damage in the new file.
        skipped: Vec::new(),
    };
    out.header
        .extra
        .push((ANNOTATED_KEY.to_string(), "1".to_string()));
    for (tid, ed) in edits {
        let Some(evs) = out.events.get_mut(&tid) else {
            continue;
        };
        let mut merged = Vec::with_capacity(evs.len());
        for (i, e) in evs.iter().enumerate() {
            if let Some(v) = ed.before.get(&i) {
                merged.extend_from_slice(v);
            }
            if !ed.drop.contains(&i) {
                merged.push(*e);
            }
            if let Some(v) = ed.after.get(&i) {
                merged.extend_from_slice(v);
            }
        }
        *evs = merged;
    }
    if let Some(f) = &mut out.footer {
        f.events = out.events.values().map(|v| v.len() as u64).sum();
    }
    out
}

/// Renders the report as text.
pub fn render_text(r: &SpinReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "Spinlocks found from memory accesses: {} (candidates rejected: {})",
        r.spinlocks.len(),
        r.rejected.len()
    )?;
    for l in &r.spinlocks {
        writeln!(out, "\n{} ({}), {}", l.symbol, l.address, l.kind)?;
        writeln!(
            out,
            "  {} acquisitions, {} releases, {} failed attempts, first-try ratio {:.2}",
            l.acquisitions, l.releases, l.failed_attempts, l.first_try_ratio
        )?;
        writeln!(
            out,
            "  wait {} ns, hold {} ns in total",
            l.wait_ns, l.hold_ns
        )?;
        writeln!(
            out,
            "  {:<24} {:>8} {:>8} {:>8} {:>12} {:>12}",
            "thread", "acq", "failed", "1st-try", "wait ns", "hold ns"
        )?;
        for t in &l.threads {
            writeln!(
                out,
                "  {:<24} {:>8} {:>8} {:>8.2} {:>12} {:>12}",
                format!("{} ({})", t.name, t.tid),
                t.acquisitions,
                t.failed_attempts,
                t.first_try_ratio,
                t.wait_ns,
                t.hold_ns
            )?;
        }
        writeln!(out, "  sites:")?;
        for s in &l.sites {
            writeln!(
                out,
                "    {} acquisitions at {} ({})",
                s.acquisitions, s.site, s.pc
            )?;
        }
        if !l.protects.is_empty() {
            writeln!(out, "  protects: {}", l.protects.join(", "))?;
        }
        for w in &l.warnings {
            writeln!(out, "  warning [{}]: {}", w.kind, w.message)?;
            for e in &w.evidence {
                writeln!(out, "    - {e}")?;
            }
        }
    }
    if !r.rejected.is_empty() {
        writeln!(out, "\nnot spinlocks:")?;
        for x in &r.rejected {
            writeln!(out, "  {} ({}): {}", x.symbol, x.address, x.reason)?;
        }
    }
    if !r.unprotected.is_empty() {
        writeln!(out, "\nshared data written with no lock held:")?;
        for u in &r.unprotected {
            writeln!(
                out,
                "  {} ({} threads) at {}",
                u.data,
                u.threads,
                u.sites.join(", ")
            )?;
        }
    }
    for n in &r.notes {
        writeln!(out, "\nnote: {n}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detailed::testutil::trace;
    use lockscope_format::Header;

    const L: u64 = 0x1000;

    fn at(time: u64, op: Op, flags: u8, addr: u64, arg: u64, arg2: u64) -> Event {
        Event {
            time,
            op: op as u8,
            flags,
            addr,
            site: 0x400000 + time,
            arg,
            arg2,
            ..Event::default()
        }
    }
    fn xchg(time: u64, a: u64, old: u64, new: u64) -> Event {
        at(time, Op::AtomicExchange, 2 | 5 << 3, a, old, new)
    }
    fn store(time: u64, a: u64, old: u64, new: u64) -> Event {
        at(time, Op::AtomicStore, 2 | 3 << 3, a, old, new)
    }
    fn load(time: u64, a: u64, v: u64) -> Event {
        at(time, Op::AtomicLoad, 2, a, v, v)
    }
    fn fadd(time: u64, a: u64, old: u64) -> Event {
        at(time, Op::AtomicFetchAdd, 2, a, old, old + 1)
    }
    fn cas_fail(time: u64, a: u64, seen: u64) -> Event {
        at(time, Op::AtomicCas, 2 | 0x40, a, seen, seen)
    }

    fn run(threads: Vec<Vec<Event>>) -> SpinReport {
        analyze(&trace(threads), false)
    }

    fn one(r: &SpinReport) -> &Spinlock {
        assert_eq!(r.spinlocks.len(), 1, "{r:#?}");
        &r.spinlocks[0]
    }

    #[test]
    fn test_and_set_counts_waits_holds_exactly() {
        let r = run(vec![
            vec![xchg(10, L, 0, 1), store(20, L, 1, 0)],
            vec![
                xchg(12, L, 1, 1),
                xchg(15, L, 1, 1),
                xchg(21, L, 0, 1),
                store(30, L, 1, 0),
                xchg(40, L, 0, 1),
                store(45, L, 1, 0),
            ],
        ]);
        let l = one(&r);
        assert_eq!(l.kind, "tas");
        assert_eq!((l.acquisitions, l.releases, l.failed_attempts), (3, 3, 2));
        assert_eq!(l.wait_ns, 9);
        assert_eq!(l.hold_ns, 10 + 9 + 5);
        assert!((l.first_try_ratio - 2.0 / 3.0).abs() < 1e-3);
        let t2 = &l.threads[1];
        assert_eq!(
            (t2.acquisitions, t2.failed_rmw, t2.wait_ns, t2.hold_ns),
            (2, 2, 9, 14)
        );
        assert_eq!(t2.first_try_ratio, 0.5);
        assert_eq!(l.threads[0].first_try_ratio, 1.0);
        assert_eq!(
            l.holds
                .iter()
                .map(|h| (h.thread, h.attempt, h.acquired, h.released))
                .collect::<Vec<_>>(),
            vec![
                (1, 10, 10, Some(20)),
                (2, 12, 21, Some(30)),
                (2, 40, 40, Some(45))
            ]
        );
        assert!(l.warnings.iter().any(|w| w.kind == "tas-spinning"));
        assert!(r.rejected.is_empty());
    }

    #[test]
    fn test_test_and_set_is_recognised_and_busy_reads_count() {
        let r = run(vec![
            vec![load(5, L, 0), xchg(6, L, 0, 1), store(16, L, 1, 0)],
            vec![
                load(8, L, 1),
                load(10, L, 1),
                load(17, L, 0),
                xchg(18, L, 0, 1),
                store(25, L, 1, 0),
            ],
        ]);
        let l = one(&r);
        assert_eq!(l.kind, "ttas");
        assert_eq!((l.acquisitions, l.releases, l.failed_attempts), (2, 2, 2));
        assert_eq!(l.threads[1].busy_reads, 2);
        assert_eq!(l.threads[1].failed_rmw, 0);
        assert_eq!((l.wait_ns, l.hold_ns), (1 + 10, 10 + 7));
        assert!(!l.warnings.iter().any(|w| w.kind == "tas-spinning"));
    }

    #[test]
    fn stamps_out_of_order_across_threads_are_put_in_lock_order() {
        // The waiter's exchange found the word free (old 0) but is stamped
        // one ns before the holder's release.
        let r = run(vec![
            vec![xchg(10, L, 0, 1), store(20, L, 1, 0)],
            vec![xchg(12, L, 1, 1), xchg(19, L, 0, 1), store(30, L, 1, 0)],
        ]);
        let l = one(&r);
        assert_eq!((l.acquisitions, l.releases, l.failed_attempts), (2, 2, 1));
        assert_eq!(l.holds[1].acquired, 19);
    }

    #[test]
    fn atomic_flag_release_stamped_after_the_next_hold_is_ordered() {
        // `atomic_flag::clear` of thread 1 (an atomic store, recorded with
        // the value it found) is stamped after thread 2 acquired and
        // released and thread 3 acquired: the found values still give
        // the only lock order, with exact counts, and the release is put
        // no later than thread 2's acquisition, which followed it.
        let r = run(vec![
            vec![xchg(10, L, 0, 1), store(40, L, 1, 0)],
            vec![xchg(12, L, 1, 1), xchg(15, L, 0, 1), store(20, L, 1, 0)],
            vec![xchg(14, L, 1, 1), xchg(22, L, 0, 1), store(30, L, 1, 0)],
        ]);
        let l = one(&r);
        assert!(r.rejected.is_empty(), "{r:#?}");
        assert_eq!((l.acquisitions, l.releases, l.failed_attempts), (3, 3, 2));
        assert_eq!(
            l.holds
                .iter()
                .map(|h| (h.thread, h.acquired, h.released))
                .collect::<Vec<_>>(),
            vec![(1, 10, Some(15)), (2, 15, Some(20)), (3, 22, Some(30))]
        );
    }

    /// `AccessRepeat` of `n` repeats of an access of `kind` (1 read,
    /// 2 write, 3 atomic load), stamped with the last repeat's time.
    fn repeat(time: u64, a: u64, n: u64, kind: u64) -> Event {
        at(time, Op::AccessRepeat, 4, a, n, kind)
    }

    #[test]
    fn coalesced_busy_loads_count_every_repeat() {
        // The same test-test-and-set run as above, coalesced: thread 2's
        // two busy loads are one load and one repeat; a repeat of another
        // location's read in between counts nothing.
        let other = 0x2000;
        let r = run(vec![
            vec![load(5, L, 0), xchg(6, L, 0, 1), store(16, L, 1, 0)],
            vec![
                load(8, L, 1),
                repeat(10, L, 1, 3),
                at(11, Op::Read, 4, other, 0, 0),
                repeat(12, other, 500, 1),
                load(13, L, 1),
                repeat(15, L, 40, 3),
                load(17, L, 0),
                xchg(18, L, 0, 1),
                store(25, L, 1, 0),
            ],
        ]);
        let l = one(&r);
        assert_eq!(l.kind, "ttas");
        assert_eq!(
            (l.acquisitions, l.releases, l.failed_attempts),
            (2, 2, 2 + 1 + 40)
        );
        assert_eq!(l.threads[1].busy_reads, 43);
        assert_eq!(l.threads[1].failed_rmw, 0);
        // Waiting still runs from the first load.
        assert_eq!(l.holds[1].attempt, 8);
        // A repeat whose kind is not the last access's is not counted.
        let r = run(vec![
            vec![xchg(1, L, 0, 1), store(9, L, 1, 0)],
            vec![
                load(3, L, 1),
                repeat(4, L, 7, 1),
                xchg(10, L, 0, 1),
                store(12, L, 1, 0),
            ],
        ]);
        assert_eq!(one(&r).failed_attempts, 1);
    }

    #[test]
    fn failed_compare_exchange_is_a_failed_attempt() {
        let cas_ok = |t| at(t, Op::AtomicCas, 2, L, 0, 1);
        let r = run(vec![
            vec![cas_ok(1), store(9, L, 1, 0)],
            vec![
                cas_fail(3, L, 1),
                cas_fail(5, L, 1),
                cas_ok(10),
                store(12, L, 1, 0),
            ],
        ]);
        let l = one(&r);
        assert_eq!((l.acquisitions, l.failed_attempts, l.kind), (2, 2, "tas"));
    }

    #[test]
    fn decoys_are_rejected_with_reasons() {
        let counter = 0x2000;
        let flag = 0x3000;
        let (next, serving) = (0x4000, 0x4004);
        let r = run(vec![
            vec![
                fadd(1, counter, 0),
                fadd(3, counter, 2),
                xchg(4, flag, 0, 1),
                // ticket lock: take ticket 0, served at once, release.
                fadd(10, next, 0),
                load(11, serving, 0),
                store(12, serving, 0, 1),
            ],
            vec![
                fadd(2, counter, 1),
                load(5, flag, 1),
                fadd(13, next, 1),
                load(14, serving, 1),
                store(15, serving, 1, 2),
                fadd(16, next, 2),
                load(17, serving, 2),
                store(18, serving, 2, 3),
            ],
        ]);
        assert!(r.spinlocks.is_empty(), "{r:#?}");
        let reason = |a: u64| {
            r.rejected
                .iter()
                .find(|x| x.address == hex(a))
                .map(|x| x.reason.clone())
                .unwrap_or_default()
        };
        assert!(reason(counter).starts_with("atomic counter"), "{r:#?}");
        assert!(reason(flag).contains("never reset"), "{r:#?}");
        assert!(reason(next).starts_with("ticket lock"), "{r:#?}");
        assert_eq!(r.rejected.len(), 3);
    }

    #[test]
    fn owner_id_lock_is_named_but_not_reported_as_a_spinlock() {
        let cas = |t, old, new| at(t, Op::AtomicCas, 2, L, old, new);
        let r = run(vec![
            vec![
                cas(1, 0, 101),
                store(5, L, 101, 0),
                cas(20, 0, 101),
                store(22, L, 101, 0),
            ],
            vec![cas(3, 101, 101), cas(6, 0, 102), store(9, L, 102, 0)],
        ]);
        assert!(r.spinlocks.is_empty());
        assert!(
            r.rejected[0]
                .reason
                .starts_with("owner-id lock (free = 0, each of 2 threads"),
            "{r:#?}"
        );
    }

    #[test]
    fn freed_by_another_thread_is_not_a_lock() {
        let r = run(vec![
            vec![xchg(1, L, 0, 1), xchg(20, L, 0, 1)],
            vec![store(10, L, 1, 0), store(30, L, 1, 0)],
        ]);
        assert!(r.spinlocks.is_empty());
        assert!(
            r.rejected[0].reason.contains("not only the owner"),
            "{r:#?}"
        );
    }

    #[test]
    fn hardware_values_without_old_values_follow_time_order() {
        // An imported hardware trace: atomics know only the value written,
        // plain accesses carry theirs (arg2 = 1).
        let rmw = |t, v| at(t, Op::AtomicRmw, 2, L, 0, v);
        let rd = |t, v| at(t, Op::Read, 4, L, v, 1);
        let wr = |t, v| at(t, Op::Write, 4, L, v, 1);
        let mut t = trace(vec![
            vec![rd(19, 0), rmw(21, 1), wr(37, 0)],
            vec![rd(25, 1), rd(30, 1), rd(38, 0), rmw(40, 1), wr(50, 0)],
        ]);
        t.header = Header {
            extra: vec![(ACCESS_VALUES_KEY.into(), "1".into())],
            ..t.header
        };
        let r = analyze(&t, false);
        let l = one(&r);
        assert_eq!(l.kind, "ttas");
        assert_eq!((l.acquisitions, l.releases, l.failed_attempts), (2, 2, 2));
        assert_eq!((l.wait_ns, l.hold_ns), (2 + 15, 16 + 10));
    }

    #[test]
    fn descheduled_holder_and_long_outlier_hold_are_warned() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for i in 0..20u64 {
            a.push(xchg(i * 1000, L, 0, 1));
            a.push(store(i * 1000 + 10, L, 1, 0));
        }
        b.push(xchg(100_000, L, 0, 1));
        b.push(store(100_000 + 5_000_000, L, 1, 0));
        let r = run(vec![a, b]);
        let l = one(&r);
        let w = l
            .warnings
            .iter()
            .find(|w| w.kind == "holder-descheduled")
            .expect("warning");
        assert_eq!(w.evidence.len(), 1);
        assert!(w.evidence[0].contains("5000000 ns"), "{w:?}");
    }

    #[test]
    fn lockset_names_protected_and_unprotected_data() {
        let rd = |t, a| at(t, Op::Read, 4, a, 0, 0);
        let wr = |t, a| at(t, Op::Write, 4, a, 0, 0);
        let r = run(vec![
            vec![
                xchg(1, L, 0, 1),
                wr(2, 0x500),
                store(3, L, 1, 0),
                wr(4, 0x600),
            ],
            vec![
                xchg(10, L, 0, 1),
                rd(11, 0x500),
                store(12, L, 1, 0),
                wr(13, 0x600),
            ],
        ]);
        let l = one(&r);
        assert_eq!(l.protects, vec!["0x500".to_string()]);
        assert_eq!(r.unprotected.len(), 1);
        assert_eq!(r.unprotected[0].data, "0x600");
    }

    // See issue 29: the errno of a timed-out condition wait (0x6e) was
    // taken for a held pthread lock, and every later access of the thread
    // counted as protected.
    #[test]
    fn an_access_after_a_timed_out_cond_wait_and_its_unlock_is_unprotected() {
        let (m, c) = (0x700, 0x800);
        let wr = |t, a| at(t, Op::Write, 4, a, 0, 0);
        // The recorder's encoding: BEGIN names the mutex in `arg`; the
        // timeout's FAIL carries the errno in `arg`, the mutex in `arg2`.
        let begin = at(51, Op::CondTimedwait, phase::BEGIN, c, m, 0);
        let timeout = at(
            60,
            Op::CondTimedwait,
            phase::FAIL,
            c,
            lockscope_trace::sync::ETIMEDOUT,
            m,
        );
        let r = run(vec![
            vec![
                xchg(40, L, 0, 1),
                store(41, L, 1, 0),
                at(50, Op::MutexLock, phase::DONE, m, 0, 0),
                begin,
                timeout,
                at(61, Op::MutexUnlock, phase::DONE, m, 0, 0),
                wr(62, 0x600),
            ],
            vec![wr(5, 0x600), xchg(70, L, 0, 1), store(71, L, 1, 0)],
        ]);
        one(&r);
        assert_eq!(r.unprotected.len(), 1, "{:?}", r.unprotected);
        assert_eq!(r.unprotected[0].data, "0x600");
        assert_eq!(r.unprotected[0].sites.len(), 1);
    }

    #[test]
    fn plain_store_release_counts_when_the_owner_makes_it() {
        // `lock = 0;` recorded (LOCKSCOPE_ALL_ACCESSES=1) without its value.
        let plain = |t| at(t, Op::Write, 4, L, 0, 0);
        let r = run(vec![
            vec![xchg(1, L, 0, 1), plain(5), xchg(20, L, 0, 1), plain(22)],
            vec![xchg(3, L, 1, 1), xchg(6, L, 0, 1), plain(9)],
        ]);
        let l = one(&r);
        assert_eq!((l.acquisitions, l.releases, l.failed_attempts), (3, 3, 1));
        assert_eq!(l.hold_ns, 4 + 2 + 3);
    }

    #[test]
    fn unrecorded_release_is_named_as_the_reason() {
        // The plain stores that released it were not recorded at all.
        let r = run(vec![vec![xchg(1, L, 0, 1)], vec![xchg(6, L, 0, 1)]]);
        assert!(r.spinlocks.is_empty());
        assert!(
            r.rejected[0]
                .reason
                .contains("lockscope record --all-accesses"),
            "{r:#?}"
        );
        let r = run(vec![vec![xchg(1, L, 0, 1), xchg(9, L, 0, 1)]]);
        assert!(r.rejected[0].reason.starts_with("set busy again"), "{r:#?}");
    }

    #[test]
    fn annotate_turns_acquisitions_into_spinlock_calls() {
        let t = trace(vec![
            vec![xchg(10, L, 0, 1), store(20, L, 1, 0)],
            vec![
                xchg(12, L, 1, 1),
                xchg(15, L, 1, 1),
                xchg(21, L, 0, 1),
                store(30, L, 1, 0),
            ],
        ]);
        let r = analyze(&t, false);
        let a = annotate(&t, &r);
        let ops = |id: u32| -> Vec<(u64, Op, u8)> {
            a.events[&id]
                .iter()
                .map(|e| (e.time, e.op().unwrap(), e.flags))
                .collect()
        };
        let x = 2 | 5 << 3;
        let s = 2 | 3 << 3;
        assert_eq!(
            ops(1),
            vec![
                (10, Op::AtomicExchange, x),
                (10, Op::SpinLock, phase::DONE),
                (20, Op::SpinUnlock, phase::DONE),
                (20, Op::AtomicStore, s),
            ]
        );
        // The spinning is left out: a thread in a lock call records
        // nothing until it returns.
        assert_eq!(
            ops(2),
            vec![
                (12, Op::SpinLock, phase::BEGIN),
                (21, Op::SpinLock, phase::DONE | phase::CONTENDED),
                (21, Op::AtomicExchange, x),
                (30, Op::SpinUnlock, phase::DONE),
                (30, Op::AtomicStore, s),
            ]
        );
        assert_eq!(a.header.get(ANNOTATED_KEY), Some("1"));
        assert!(a.events[&2]
            .iter()
            .all(|e| e.op() != Some(Op::SpinLock) || e.addr == L));
    }

    #[test]
    fn lockset_follows_time_not_thread_order() {
        // Thread 2 initialises the data before anyone else touches it
        // (Eraser's exclusive phase), then both use it under the lock.
        let wr = |t, a| at(t, Op::Write, 4, a, 0, 0);
        let r = run(vec![
            vec![xchg(10, L, 0, 1), wr(11, 0x500), store(12, L, 1, 0)],
            vec![
                wr(1, 0x500),
                xchg(20, L, 0, 1),
                wr(21, 0x500),
                store(22, L, 1, 0),
            ],
        ]);
        assert_eq!(one(&r).protects, vec!["0x500".to_string()]);
        assert!(r.unprotected.is_empty(), "{r:#?}");
    }

    #[test]
    fn nesting_is_warned_on_the_inner_lock() {
        let m = 0x1100;
        let r = run(vec![vec![
            xchg(1, L, 0, 1),
            xchg(2, m, 0, 1),
            store(3, m, 1, 0),
            store(4, L, 1, 0),
        ]]);
        assert_eq!(r.spinlocks.len(), 2);
        let inner = r.spinlocks.iter().find(|s| s.address == hex(m)).unwrap();
        assert!(inner.warnings.iter().any(|w| w.kind == "nesting"));
        let outer = r.spinlocks.iter().find(|s| s.address == hex(L)).unwrap();
        assert!(!outer.warnings.iter().any(|w| w.kind == "nesting"));
    }
}
