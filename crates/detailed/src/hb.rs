//! Happens-before between threads from the steps of the sync layer:
//! vector clocks advanced by thread creation, join and barrier crossings.
//!
//! Used by the lockset analysis (data handed from one thread to another
//! through `pthread_create`, `pthread_join` or a barrier is not shared
//! concurrently, so it needs no lock) and by the barrier analysis.
//! Locks, condition variables and semaphores are deliberately *not*
//! happens-before edges here: lockset checks locking discipline, and an
//! edge through a lock would hide exactly the accesses it is meant to
//! check (Helgrind and ThreadSanitizer's hybrid mode make the same
//! choice for locks).
//!
//! # Edges
//! - `pthread_create`: the child starts with the parent's clock as it was
//!   when the call was made. The child's first step may come before the
//!   parent's `ThreadCreate` step (the call returns after the child has
//!   begun): the parent is then still inside the call, so its current
//!   clock is the one to inherit. The parent is known from the child's
//!   thread record, or from the tid the create step names.
//! - `pthread_join`: the joiner takes the joined thread's final clock.
//! - A barrier round: every participant leaves with the join of every
//!   participant's clock at arrival. Participants are found in a first
//!   pass; one whose arrival has not been seen yet when another leaves
//!   (the last arriver records a single event when it returns, which may
//!   come after the others' departures) is still inside the call, so its
//!   current clock is its arrival clock.
//!
//! Each thread's own component is advanced after it sends (creates a
//! thread, leaves a barrier), so that what it does afterwards is not
//! ordered before the receiver.

use std::collections::{BTreeMap, HashMap, HashSet};

use lockscope_format::{Record, Trace};

use lockscope_trace::sync::{for_each_trace_step, Step, StepKind};

/// A vector clock: thread trace id -> that thread's clock.
pub type Clock = BTreeMap<u32, u64>;

/// Joins `b` into `a` (component-wise maximum).
pub fn join(a: &mut Clock, b: &Clock) {
    for (&t, &c) in b {
        let e = a.entry(t).or_insert(0);
        *e = (*e).max(c);
    }
}

/// Key of a barrier round: (process, barrier address, round).
type RoundKey = (u32, u64, u64);

/// Vector clocks of every thread, advanced step by step.
#[derive(Default)]
pub struct HbClocks {
    clocks: HashMap<u32, Clock>,
    /// Thread trace id -> parent trace id (from the thread records).
    parent: HashMap<u32, u32>,
    /// (process, OS tid) -> [(start ns, trace id)].
    by_tid: HashMap<(u32, u64), Vec<(u64, u32)>>,
    /// Clock a child inherits, left by its parent's create step.
    create_snap: HashMap<u32, Clock>,
    /// (process, `pthread_t` handle) -> the thread it was created as (a
    /// join names the handle; its tid argument may be 0).
    handles: HashMap<(u32, u64), u32>,
    started: HashSet<u32>,
    /// Threads that have their creator's clock.
    inherited: HashSet<u32>,
    /// Participants of each barrier round (first pass).
    members: HashMap<RoundKey, Vec<u32>>,
    /// Arrival clocks of each barrier round.
    arrivals: HashMap<RoundKey, HashMap<u32, Clock>>,
    /// Departures still to come per round (to free its arrivals).
    pending: HashMap<RoundKey, usize>,
    /// Bumped every time any clock changes (lets callers intern clocks).
    version: HashMap<u32, u64>,
}

impl HbClocks {
    /// Prepares the clocks of a trace: reads its thread records and finds
    /// the participants of every barrier round (one pass over its steps).
    pub fn new(t: &Trace) -> HbClocks {
        let mut h = HbClocks::default();
        for r in &t.records {
            if let Record::Thread(th) = r {
                if th.parent != 0 {
                    h.parent.insert(th.id, th.parent);
                }
                h.by_tid
                    .entry((th.process, u64::from(th.tid)))
                    .or_default()
                    .push((th.start_ns, th.id));
            }
        }
        for v in h.by_tid.values_mut() {
            v.sort_unstable();
        }
        // The first pass is only needed for barrier rounds.
        let barrier = lockscope_format::Op::BarrierWait as u8;
        if !t.events.values().any(|v| v.iter().any(|e| e.op == barrier)) {
            return h;
        }
        for_each_trace_step(t, false, |st, _| {
            if let StepKind::BarrierDepart { barrier, round, .. } = st.kind {
                let key = (barrier.process, barrier.addr, round);
                h.members.entry(key).or_default().push(st.thread);
                *h.pending.entry(key).or_insert(0) += 1;
            }
        });
        h
    }

    /// The trace id of the thread with OS tid `tid` in `process` nearest
    /// to `time` (`before`: the latest that started at or before it).
    fn thread_of(&self, process: u32, tid: u64, time: u64, before: bool) -> Option<u32> {
        let v = self.by_tid.get(&(process, tid))?;
        if before {
            v.iter()
                .rev()
                .find(|(s, _)| *s <= time)
                .or(v.first())
                .map(|x| x.1)
        } else {
            v.iter().min_by_key(|(s, _)| s.abs_diff(time)).map(|x| x.1)
        }
    }

    fn ensure(&mut self, thread: u32) {
        if self.started.insert(thread) {
            let mut c = Clock::new();
            c.insert(thread, 1);
            self.clocks.insert(thread, c);
            self.bump(thread);
            if self.create_snap.contains_key(&thread) {
                self.inherit(thread, u32::MAX);
            } else if let Some(p) = self.parent.get(&thread).copied() {
                self.inherit(thread, p);
            }
        }
    }

    /// Gives `child` its creator's clock as it was when the create call
    /// was made (once).
    fn inherit(&mut self, child: u32, parent: u32) {
        if child == parent || !self.inherited.insert(child) {
            return;
        }
        let snap = self
            .create_snap
            .remove(&child)
            .or_else(|| self.clocks.get(&parent).cloned());
        if let Some(s) = snap {
            self.ensure(child);
            join(self.clocks.get_mut(&child).expect("ensured"), &s);
            self.bump(child);
        }
    }

    fn bump(&mut self, thread: u32) {
        *self.version.entry(thread).or_insert(0) += 1;
    }

    fn tick(&mut self, thread: u32) {
        if let Some(c) = self.clocks.get_mut(&thread) {
            *c.entry(thread).or_insert(0) += 1;
        }
        self.bump(thread);
    }

    /// Advances the clocks by one step. Call it for every step, in order,
    /// before using [`HbClocks::clock`] for that step's thread.
    pub fn step(&mut self, st: &Step<'_>) {
        let me = st.thread;
        self.ensure(me);
        match st.kind {
            // The start event names the creator's tid; the creator is still
            // inside pthread_create if its create step has not been seen.
            // (Events of the thread's set-up, before this one, stay
            // unordered: the runtime's own allocations.)
            StepKind::ThreadStart => {
                let p = self
                    .parent
                    .get(&me)
                    .copied()
                    .or_else(|| self.thread_of(st.process, st.event.arg, st.time, true));
                if let Some(p) = p {
                    self.inherit(me, p);
                }
            }
            StepKind::ThreadCreate { tid } => {
                if let Some(child) = self.thread_of(st.process, tid, st.time, false) {
                    if st.event.addr != 0 {
                        self.handles.insert((st.process, st.event.addr), child);
                    }
                    if child != me {
                        if self.started.contains(&child) {
                            // Started already: everything the creator did
                            // before the call happens before the child.
                            self.inherit(child, me);
                        } else if !self.inherited.contains(&child) {
                            let c = self.clocks[&me].clone();
                            self.create_snap.insert(child, c);
                        }
                    }
                }
                self.tick(me);
            }
            StepKind::JoinEnd { tid } => {
                let by_handle = self.handles.get(&(st.process, st.event.addr)).copied();
                let by_tid = || match tid {
                    0 => None,
                    tid => self.thread_of(st.process, tid, st.time, true),
                };
                if let Some(child) = by_handle.or_else(by_tid) {
                    if child != me {
                        if let Some(cc) = self.clocks.get(&child).cloned() {
                            join(self.clocks.get_mut(&me).expect("ensured"), &cc);
                            self.bump(me);
                        }
                    }
                }
            }
            StepKind::BarrierArrive { barrier, round } => {
                let c = self.clocks[&me].clone();
                self.arrivals
                    .entry((barrier.process, barrier.addr, round))
                    .or_default()
                    .insert(me, c);
            }
            StepKind::BarrierDepart { barrier, round, .. } => {
                let key = (barrier.process, barrier.addr, round);
                let mine = self.clocks[&me].clone();
                let arr = self.arrivals.entry(key).or_default();
                arr.entry(me).or_insert(mine);
                let mut acc = Clock::new();
                for m in self.members.get(&key).map_or(&[][..], |v| v.as_slice()) {
                    match self.arrivals.get(&key).and_then(|a| a.get(m)) {
                        Some(c) => join(&mut acc, c),
                        // Not arrived as far as the trace shows: still in
                        // the call, so its current clock is its arrival.
                        None => {
                            if let Some(c) = self.clocks.get(m) {
                                join(&mut acc, c);
                            }
                        }
                    }
                }
                join(self.clocks.get_mut(&me).expect("ensured"), &acc);
                self.tick(me);
                if let Some(p) = self.pending.get_mut(&key) {
                    *p = p.saturating_sub(1);
                    if *p == 0 {
                        self.pending.remove(&key);
                        self.arrivals.remove(&key);
                    }
                }
            }
            _ => {}
        }
    }

    /// The current clock of `thread` (empty if it has had no step).
    pub fn clock(&self, thread: u32) -> Option<&Clock> {
        self.clocks.get(&thread)
    }

    /// A number that changes whenever `thread`'s clock changes.
    pub fn version(&self, thread: u32) -> u64 {
        self.version.get(&thread).copied().unwrap_or(0)
    }
}

/// True if the access of thread `t` made at its own clock value `c`
/// happens before a point whose clock is `now`.
pub fn ordered(t: u32, c: u64, now: &Clock) -> bool {
    now.get(&t).is_some_and(|&v| v >= c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detailed::testutil::*;
    use lockscope_format::{phase, Event, Op};

    fn ev(time: u64, op: Op, flags: u8, addr: u64, arg: u64) -> Event {
        Event {
            time,
            op: op as u8,
            flags,
            addr,
            arg,
            ..Event::default()
        }
    }

    /// Runs the clocks over a trace; returns each thread's clock at each
    /// of its write events (by time).
    fn clocks_at_writes(t: &Trace) -> Vec<(u64, u32, Clock)> {
        let mut h = HbClocks::new(t);
        let mut out = Vec::new();
        for_each_trace_step(t, false, |st, _| {
            h.step(st);
            if st.kind == StepKind::Memory(Op::Write) {
                out.push((st.time, st.thread, h.clock(st.thread).unwrap().clone()));
            }
        });
        out.sort_by_key(|x| x.0);
        out
    }

    #[test]
    fn create_join_and_barrier_order_accesses() {
        const B: u64 = 0xB0;
        // Thread ids: t1 = 101 (main), t2 = 102.
        let mut t = trace(vec![
            vec![
                wr(1, 0x10),
                ev(3, Op::ThreadCreate, phase::DONE, 0, 102),
                wr(4, 0x10),
                ev(5, Op::BarrierWait, phase::BEGIN, B, 0),
                ev(8, Op::BarrierWait, phase::DONE, B, 0),
                wr(9, 0x10),
                ev(20, Op::ThreadJoin, phase::DONE, 0, 102),
                wr(21, 0x10),
            ],
            vec![
                // Starts before the parent's create step is seen.
                wr(2, 0x20),
                ev(6, Op::BarrierWait, phase::DONE, B, 1),
                wr(7, 0x20),
                wr(10, 0x20),
            ],
        ]);
        if let Some(Record::Thread(th)) = t.records.get_mut(1) {
            th.parent = 1;
        }
        let w = clocks_at_writes(&t);
        let at = |time: u64| w.iter().find(|x| x.0 == time).unwrap().2.clone();
        // Main's write at 1 happens before the child's first write.
        assert!(ordered(1, at(1)[&1], &at(2)));
        // Main's write at 4 (after the create) does not.
        assert!(!ordered(1, at(4)[&1], &at(2)));
        assert!(!ordered(2, at(2)[&2], &at(4)));
        // Across the barrier: the child's write at 2 before main's at 9,
        // main's at 4 before the child's at 7 (the child is the last
        // arriver and left first).
        assert!(ordered(2, at(2)[&2], &at(9)));
        assert!(ordered(1, at(4)[&1], &at(7)));
        // After the barrier the two are concurrent again.
        assert!(!ordered(2, at(10)[&2], &at(9)));
        // The join orders everything the child did before main's last write.
        assert!(ordered(2, at(10)[&2], &at(21)));
    }
}
