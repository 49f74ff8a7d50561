//! Hangs and deadlocks, from the same time-ordered events as the timing
//! model but independent of it:
//!
//! - waits still open when the trace ends (a thread blocked on a lock, a
//!   condition variable, a join... until exit, SIGKILL or Ctrl-C) and
//!   locks still held then;
//! - a **deadlock**: a cycle in the wait-for graph at the end of the trace
//!   (thread A waits for a lock B holds while B waits for one A holds, or
//!   joins A). A deadlock never resolves by itself, so the end of the
//!   trace shows every one that happened (a timed lock that gave up broke
//!   its cycle, and is not one);
//! - **potential deadlocks** (lock-order inversions, as the Linux lockdep
//!   and Helgrind report them): a thread acquired B while holding A, and
//!   (another or the same) thread acquired A while holding B. Two threads
//!   doing that at the same time deadlock; this run they did not. An
//!   inversion whose two acquisitions were both made under one common
//!   third lock (a gate lock) cannot deadlock and is not reported.
//!   Trylocks never block, so they add no order.
//!
//! Locks are identified per process (after fork the copies are apart).
//!
//! The tracker reads the steps of the synchronization layer
//! ([`lockscope_trace::sync`]), which decides which locks a thread holds (a
//! condition wait gives its mutex up and takes it back, even when it
//! timed out) and which calls were still blocked at the end; it never
//! interprets raw events itself.

use std::collections::{BTreeMap, HashMap};

use lockscope_trace::sync::{BlockedOn, Kind, Section, Step, StepKind, SyncInterp, Via};

/// What a thread was blocked in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// Acquiring a mutex, rwlock or spinlock.
    Lock,
    /// `pthread_cond_wait`.
    Cond,
    /// `pthread_join`.
    Join,
    /// `sem_wait`.
    Semaphore,
    /// `pthread_barrier_wait`.
    Barrier,
    /// FUTEX_WAIT.
    Futex,
}

impl WaitKind {
    /// Name used in every output.
    pub fn name(self) -> &'static str {
        match self {
            WaitKind::Lock => "lock",
            WaitKind::Cond => "condition variable",
            WaitKind::Join => "join",
            WaitKind::Semaphore => "semaphore",
            WaitKind::Barrier => "barrier",
            WaitKind::Futex => "futex",
        }
    }
}

/// A wait that began and had not ended when the trace did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenWait {
    /// Trace thread id.
    pub thread: u32,
    /// What it waited in.
    pub kind: WaitKind,
    /// The object (lock, cond, futex word...); for a join, the joined tid.
    pub addr: u64,
    /// Raw trace time the wait began, ns.
    pub since: u64,
    /// Call site (return address).
    pub site: u64,
    /// Call path id, 0 if none.
    pub stack: u32,
}

/// A lock held (one acquisition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The lock.
    pub addr: u64,
    /// Raw trace time it was acquired, ns.
    pub since: u64,
    /// Acquisition site.
    pub site: u64,
    /// Acquisition call path id, 0 if none.
    pub stack: u32,
}

/// One acquisition witnessing the order `held` before `acquired`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderWitness {
    /// Trace thread id.
    pub thread: u32,
    /// Site where the held lock was taken.
    pub held_site: u64,
    /// Site where the second lock was taken while holding it.
    pub acquire_site: u64,
    /// Call path of the second acquisition, 0 if none.
    pub stack: u32,
    /// Other locks held at that moment (gate-lock check).
    others: Vec<u64>,
}

/// A lock-order inversion: `a` taken before `b` somewhere, `b` before
/// `a` elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inversion {
    /// Process trace id.
    pub process: u32,
    /// First lock (the lower address).
    pub a: u64,
    /// Second lock.
    pub b: u64,
    /// `a` held while taking `b`.
    pub a_then_b: OrderWitness,
    /// `b` held while taking `a`.
    pub b_then_a: OrderWitness,
}

/// One thread of a deadlock cycle: it waits (`wait`) for a lock that the
/// next thread of the cycle holds (or joins it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlockStep {
    /// The waiting thread.
    pub wait: OpenWait,
    /// The thread it waits for.
    pub holder: u32,
    /// The holder's acquisition of the lock waited for (None for a join).
    pub held: Option<Held>,
}

#[derive(Default)]
struct ThreadState {
    process: u32,
    tid: u32,
    /// The call still blocked at the thread's end.
    pending: Option<OpenWait>,
    /// The locks held at the thread's end.
    held: Vec<Held>,
    exited: bool,
    /// The condition wait in progress: (raw BEGIN time, site, call path).
    cond_begin: Option<(u64, u64, u32)>,
}

/// (process, cond, waiter thread, waiter site, waiter's call path id or
/// 0, signaller (thread, site)).
pub type CondBlameKey = (u32, u64, u32, u64, u32, Option<(u32, u64)>);

/// The tracker: feed every event in time order, then [`Tracker::finish`].
#[derive(Default)]
pub struct Tracker {
    threads: BTreeMap<u32, ThreadState>,
    /// (process, held, acquired) -> first witness.
    order: HashMap<(u32, u64, u64), OrderWitness>,
    /// (process, cond) -> last signal or broadcast: (thread, site, time).
    last_signal: HashMap<(u32, u64), (u32, u64, u64)>,
    /// Completed condition waits charged to the signal that ended them.
    cond_blame: HashMap<CondBlameKey, (u64, u64)>,
}

/// What the end of the trace showed.
#[derive(Clone, Debug, Default)]
pub struct Findings {
    /// Waits still open, by thread.
    pub open_waits: Vec<OpenWait>,
    /// Locks still held at the end: (thread, acquisition).
    pub open_holds: Vec<(u32, Held)>,
    /// Wait-for cycles.
    pub deadlocks: Vec<Vec<DeadlockStep>>,
    /// Lock-order inversions (potential deadlocks).
    pub inversions: Vec<Inversion>,
    /// Condition waits charged to the thread (and site) whose signal or
    /// broadcast ended them (None: no signal during the wait: a timeout
    /// or a spurious wake-up): key -> (wait ns, waits). Sorted by key.
    pub cond_blame: Vec<(CondBlameKey, (u64, u64))>,
}

/// What a blocked call waits in, as this module names it (GPU waits are
/// not hangs of the program's synchronization).
fn wait_kind(on: BlockedOn, obj: Option<(lockscope_trace::sync::ObjId, Kind)>) -> Option<WaitKind> {
    Some(match on {
        BlockedOn::Lock if obj.is_some_and(|(_, k)| k == Kind::Futex) => WaitKind::Futex,
        BlockedOn::Lock => WaitKind::Lock,
        BlockedOn::Cond => WaitKind::Cond,
        BlockedOn::Join => WaitKind::Join,
        BlockedOn::Sem => WaitKind::Semaphore,
        BlockedOn::Barrier => WaitKind::Barrier,
        BlockedOn::Gpu => return None,
    })
}

fn held_of(s: &Section) -> Held {
    Held {
        addr: s.lock.addr,
        since: s.begin_ns,
        site: s.site,
        stack: s.stack,
    }
}

impl Tracker {
    /// A tracker knowing each trace thread's process and OS tid.
    pub fn new(threads: impl IntoIterator<Item = (u32, u32, u32)>) -> Tracker {
        let mut t = Tracker::default();
        for (id, process, tid) in threads {
            t.threads.insert(
                id,
                ThreadState {
                    process,
                    tid,
                    ..ThreadState::default()
                },
            );
        }
        t
    }

    /// One step of the synchronization layer, in the layer's order, with
    /// its interpreter (for the locks a thread holds).
    pub fn step(&mut self, s: &Step<'_>, si: &SyncInterp) {
        let thread = s.thread;
        let Some(th) = self.threads.get_mut(&thread) else {
            return;
        };
        match s.kind {
            StepKind::ThreadExit => th.exited = true,
            StepKind::CondSignal { cond, .. } => {
                self.last_signal
                    .insert((th.process, cond.addr), (thread, s.event.site, s.time));
            }
            StepKind::CondWaitBegin { .. } => {
                th.cond_begin = Some((s.time, s.event.site, s.event.stack));
            }
            StepKind::CondWaitEnd { cond, .. } => {
                let Some((since, site, stack)) = th.cond_begin.take() else {
                    return;
                };
                // Charged to the signal that ended it: the last one on
                // this cond since the wait began.
                let sig = self
                    .last_signal
                    .get(&(th.process, cond.addr))
                    .filter(|x| x.2 >= since && x.0 != thread)
                    .map(|x| (x.0, x.1));
                let c = self
                    .cond_blame
                    .entry((th.process, cond.addr, thread, site, stack, sig))
                    .or_default();
                c.0 += s.time.saturating_sub(since);
                c.1 += 1;
            }
            // Acquired: every lock held before is ordered before this one.
            // A trylock never blocks, so it cannot close a deadlock cycle.
            StepKind::Acquired { section, .. } if section.via != Via::Trylock => {
                // The layer has already opened the new section (the last).
                let held = si.held(thread);
                let before = &held[..held.len().saturating_sub(1)];
                let acquired = section.lock.addr;
                for h in before {
                    if h.lock.addr == acquired {
                        continue;
                    }
                    self.order
                        .entry((th.process, h.lock.addr, acquired))
                        .or_insert_with(|| OrderWitness {
                            thread,
                            held_site: h.site,
                            acquire_site: section.site,
                            stack: section.stack,
                            others: before
                                .iter()
                                .map(|x| x.lock.addr)
                                .filter(|&x| x != h.lock.addr && x != acquired)
                                .collect(),
                        });
                }
            }
            // The thread's end, before the layer closes its sections.
            StepKind::End => th.held = si.held(thread).iter().map(held_of).collect(),
            StepKind::StillWaiting {
                on,
                obj,
                arg,
                since_ns,
                site,
                stack,
                ..
            } => {
                if let Some(kind) = wait_kind(on, obj) {
                    th.pending = Some(OpenWait {
                        thread,
                        kind,
                        addr: match obj {
                            Some((id, _)) if kind != WaitKind::Join => id.addr,
                            _ => arg,
                        },
                        since: since_ns,
                        site,
                        stack,
                    });
                }
            }
            _ => {}
        }
    }

    /// What was left open at the end, the wait-for cycles among it, and
    /// the lock-order inversions seen over the whole trace.
    pub fn finish(self) -> Findings {
        let mut f = Findings {
            cond_blame: self.cond_blame.iter().map(|(k, v)| (*k, *v)).collect(),
            ..Findings::default()
        };
        f.cond_blame.sort_unstable();
        for th in self.threads.values() {
            if th.exited {
                continue;
            }
            if let Some(w) = &th.pending {
                f.open_waits.push(w.clone());
            }
        }
        for (&id, th) in &self.threads {
            for h in &th.held {
                f.open_holds.push((id, h.clone()));
            }
        }
        // Wait-for graph at the end: a waiter -> the threads it waits for
        // (every holder of the lock: a rwlock read-held by several threads
        // is released only when all of them let it go).
        let holders_of = |process: u32, addr: u64| -> Vec<(u32, Held)> {
            self.threads
                .iter()
                .filter(|(_, t)| t.process == process)
                .filter_map(|(&id, t)| {
                    t.held
                        .iter()
                        .find(|h| h.addr == addr)
                        .map(|h| (id, h.clone()))
                })
                .collect()
        };
        let mut next: BTreeMap<u32, Vec<DeadlockStep>> = BTreeMap::new();
        for w in &f.open_waits {
            let th = &self.threads[&w.thread];
            let steps: Vec<DeadlockStep> = match w.kind {
                WaitKind::Lock => holders_of(th.process, w.addr)
                    .into_iter()
                    .filter(|(h, _)| *h != w.thread)
                    .map(|(h, held)| DeadlockStep {
                        wait: w.clone(),
                        holder: h,
                        held: Some(held),
                    })
                    .collect(),
                WaitKind::Join => self
                    .threads
                    .iter()
                    .find(|(_, t)| t.process == th.process && u64::from(t.tid) == w.addr)
                    .filter(|(_, t)| !t.exited)
                    .map(|(&h, _)| DeadlockStep {
                        wait: w.clone(),
                        holder: h,
                        held: None,
                    })
                    .into_iter()
                    .collect(),
                _ => Vec::new(),
            };
            if !steps.is_empty() {
                next.insert(w.thread, steps);
            }
        }
        // A cycle is reported once, from its lowest thread id: a depth-first
        // walk from each thread through threads with higher ids only.
        for &start in next.keys() {
            if let Some(cycle) = cycle_from(&next, start) {
                f.deadlocks.push(cycle);
            }
        }
        // Lock-order inversions: pairs ordered both ways (cycles of two,
        // the ones that deadlock two threads).
        let mut keys: Vec<_> = self.order.keys().copied().collect();
        keys.sort_unstable();
        for (p, a, b) in keys {
            if a >= b {
                continue;
            }
            let (Some(ab), Some(ba)) = (self.order.get(&(p, a, b)), self.order.get(&(p, b, a)))
            else {
                continue;
            };
            let gated = ab.others.iter().any(|x| ba.others.contains(x));
            if !gated {
                f.inversions.push(Inversion {
                    process: p,
                    a,
                    b,
                    a_then_b: ab.clone(),
                    b_then_a: ba.clone(),
                });
            }
        }
        f
    }

    /// Trace process of a thread.
    pub fn process_of(&self, thread: u32) -> Option<u32> {
        self.threads.get(&thread).map(|t| t.process)
    }
}

/// A wait-for cycle through `start` and threads with higher ids only, as
/// the steps taken (first found; the graph holds only threads blocked at
/// the end, so it is small).
fn cycle_from(next: &BTreeMap<u32, Vec<DeadlockStep>>, start: u32) -> Option<Vec<DeadlockStep>> {
    // Iterative DFS: the path's steps and, per depth, the next edge to try.
    let mut path: Vec<DeadlockStep> = Vec::new();
    let mut cursor: Vec<usize> = vec![0];
    let mut on_path: Vec<u32> = vec![start];
    let mut dead: std::collections::BTreeSet<u32> = Default::default();
    while let Some(&i) = cursor.last() {
        let at = *on_path.last()?;
        let edges = next.get(&at).map_or(&[][..], Vec::as_slice);
        let Some(step) = edges.get(i) else {
            // Every edge of `at` tried: no cycle through it from here.
            dead.insert(at);
            cursor.pop();
            on_path.pop();
            path.pop();
            continue;
        };
        *cursor.last_mut()? += 1;
        let h = step.holder;
        if h == start {
            path.push(step.clone());
            return Some(path);
        }
        if h < start || on_path.contains(&h) || dead.contains(&h) {
            continue;
        }
        path.push(step.clone());
        on_path.push(h);
        cursor.push(0);
    }
    None
}

/// The tracker fed with a trace's steps, with the time of the last event.
pub struct Scan {
    tracker: Tracker,
    last: u64,
}

impl Scan {
    /// A tracker that knows the trace's threads.
    pub fn new(meta: &lockscope_trace::input::Meta) -> Scan {
        Scan {
            tracker: Tracker::new(meta.threads.values().map(|t| (t.id, t.process, t.tid))),
            last: 0,
        }
    }

    /// The next step of the synchronization layer.
    pub fn step(&mut self, s: &Step<'_>, si: &SyncInterp) {
        if !s.kind.is_synthetic() {
            self.last = self.last.max(s.time);
        }
        self.tracker.step(s, si);
    }

    /// The findings and the time of the last event.
    pub fn finish(self) -> (Findings, u64) {
        (self.tracker.finish(), self.last)
    }
}

/// Runs the tracker over a whole trace in a pass of its own. Returns the
/// findings and the time of the last event. (The report feeds a [`Scan`]
/// from the timing model's pass instead.)
pub fn scan(
    path: &std::path::Path,
    meta: &lockscope_trace::input::Meta,
) -> Result<(Findings, u64), lockscope_trace::AnalysisError> {
    let mut s = Scan::new(meta);
    lockscope_trace::sync::for_each_step(path, meta, false, |step, si| s.step(step, si))?;
    Ok(s.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_format::{phase, Event, Op};

    /// The tracker behind the synchronization layer, fed events in time
    /// order as the report feeds it.
    struct Feed {
        si: SyncInterp,
        t: Tracker,
        last: u64,
    }

    impl Feed {
        fn event(&mut self, thread: u32, e: &Event) {
            self.last = self.last.max(e.time);
            let t = &mut self.t;
            self.si.event(thread, e, &mut |s, si| t.step(s, si));
        }

        fn finish(mut self) -> Findings {
            let t = &mut self.t;
            self.si.finish(self.last, &mut |s, si| t.step(s, si));
            self.t.finish()
        }
    }

    fn ev(time: u64, op: Op, flags: u8, addr: u64, site: u64) -> Event {
        Event {
            time,
            op: op as u8,
            flags,
            addr,
            site,
            stack: 0,
            arg: 0,
            arg2: 0,
        }
    }
    const A: u64 = 0xa0;
    const B: u64 = 0xb0;
    const G: u64 = 0x90;

    fn tracker() -> Feed {
        let threads = [(1, 1, 101), (2, 1, 102), (3, 1, 103)];
        let mut si = SyncInterp::new(false, &[]);
        for (id, process, _) in threads {
            si.add_thread(id, process, 0);
        }
        Feed {
            si,
            t: Tracker::new(threads),
            last: 0,
        }
    }

    /// The classic: 1 holds A and waits for B, 2 holds B and waits for A.
    #[test]
    fn two_lock_deadlock_is_a_cycle() {
        let mut t = tracker();
        t.event(1, &ev(10, Op::MutexLock, phase::DONE, A, 0x11));
        t.event(2, &ev(11, Op::MutexLock, phase::DONE, B, 0x21));
        t.event(1, &ev(20, Op::MutexLock, phase::BEGIN, B, 0x12));
        t.event(2, &ev(21, Op::MutexLock, phase::BEGIN, A, 0x22));
        let f = t.finish();
        assert_eq!(f.open_waits.len(), 2);
        assert_eq!(f.open_holds.len(), 2);
        assert_eq!(f.deadlocks.len(), 1);
        let d = &f.deadlocks[0];
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].wait.thread, d[0].wait.addr, d[0].holder), (1, B, 2));
        assert_eq!(d[0].held.as_ref().unwrap().site, 0x21);
        assert_eq!((d[1].wait.thread, d[1].wait.addr, d[1].holder), (2, A, 1));
        // The order A->B by 1 never completed (1 is still waiting), so
        // no inversion was *seen*: the deadlock is the report.
        assert!(f.inversions.is_empty());
    }

    /// 1 takes A then B; later 2 takes B then A: no overlap, no deadlock
    /// this time, but an inversion.
    #[test]
    fn inversion_without_deadlock() {
        let mut t = tracker();
        for (th, first, second, t0) in [(1, A, B, 10), (2, B, A, 100)] {
            t.event(
                th,
                &ev(t0, Op::MutexLock, phase::DONE, first, 0x10 + th as u64),
            );
            t.event(
                th,
                &ev(t0 + 1, Op::MutexLock, phase::DONE, second, 0x20 + th as u64),
            );
            t.event(th, &ev(t0 + 2, Op::MutexUnlock, phase::DONE, second, 0));
            t.event(th, &ev(t0 + 3, Op::MutexUnlock, phase::DONE, first, 0));
        }
        let f = t.finish();
        assert!(f.deadlocks.is_empty() && f.open_waits.is_empty() && f.open_holds.is_empty());
        assert_eq!(f.inversions.len(), 1);
        let i = &f.inversions[0];
        assert_eq!((i.a, i.b), (A, B));
        assert_eq!((i.a_then_b.thread, i.a_then_b.acquire_site), (1, 0x21));
        assert_eq!((i.b_then_a.thread, i.b_then_a.acquire_site), (2, 0x22));
    }

    /// The same inversion under a common gate lock G cannot deadlock.
    #[test]
    fn gate_lock_and_trylock_make_no_inversion() {
        let mut t = tracker();
        for (th, first, second, t0) in [(1, A, B, 10), (2, B, A, 100)] {
            t.event(th, &ev(t0, Op::MutexLock, phase::DONE, G, 0x1));
            t.event(th, &ev(t0 + 1, Op::MutexLock, phase::DONE, first, 0x2));
            t.event(th, &ev(t0 + 2, Op::MutexLock, phase::DONE, second, 0x3));
            for l in [second, first, G] {
                t.event(th, &ev(t0 + 3, Op::MutexUnlock, phase::DONE, l, 0));
            }
        }
        assert!(t.finish().inversions.is_empty());
        let mut t = tracker();
        t.event(1, &ev(1, Op::MutexLock, phase::DONE, A, 0x1));
        t.event(1, &ev(2, Op::MutexLock, phase::DONE, B, 0x2));
        t.event(1, &ev(3, Op::MutexUnlock, phase::DONE, B, 0));
        t.event(1, &ev(4, Op::MutexUnlock, phase::DONE, A, 0));
        t.event(2, &ev(5, Op::MutexLock, phase::DONE, B, 0x3));
        t.event(2, &ev(6, Op::MutexTrylock, phase::DONE, A, 0x4));
        assert!(t.finish().inversions.is_empty(), "trylock cannot block");
    }

    /// A thread blocked on a lock held by a thread that joins it.
    #[test]
    fn join_closes_a_cycle_and_cond_wait_releases_its_mutex() {
        let mut t = tracker();
        t.event(1, &ev(1, Op::MutexLock, phase::DONE, A, 0x1));
        t.event(2, &ev(2, Op::MutexLock, phase::BEGIN, A, 0x2));
        let mut join = ev(3, Op::ThreadJoin, phase::BEGIN, 0, 0x3);
        join.arg = 102;
        t.event(1, &join);
        let f = t.finish();
        assert_eq!(f.deadlocks.len(), 1);
        assert_eq!(f.deadlocks[0][0].wait.kind, WaitKind::Join);

        let mut t = tracker();
        t.event(1, &ev(1, Op::MutexLock, phase::DONE, A, 0x1));
        let mut cw = ev(2, Op::CondWait, phase::BEGIN, 0xc0, 0x2);
        cw.arg = A;
        t.event(1, &cw);
        let f = t.finish();
        assert!(f.open_holds.is_empty(), "the cond wait gave A up");
        assert_eq!(f.open_waits[0].kind, WaitKind::Cond);
        assert!(f.deadlocks.is_empty());
    }

    /// A rwlock read-held by two threads: the writer waiting for it
    /// waits for both, and the cycle runs through the reader that waits
    /// for the writer's mutex, whichever reader the lock's holders list
    /// first.
    #[test]
    fn rwlock_readers_close_a_cycle_through_any_of_them() {
        let rw = 0xd0;
        for (r1, r2) in [(2, 3), (3, 2)] {
            let mut t = tracker();
            t.event(1, &ev(1, Op::MutexLock, phase::DONE, A, 0x1));
            t.event(r1, &ev(2, Op::RwRdlock, phase::DONE, rw, 0x2));
            t.event(r2, &ev(3, Op::RwRdlock, phase::DONE, rw, 0x3));
            t.event(1, &ev(4, Op::RwWrlock, phase::BEGIN, rw, 0x4));
            t.event(r2, &ev(5, Op::MutexLock, phase::BEGIN, A, 0x5));
            let f = t.finish();
            assert_eq!(f.deadlocks.len(), 1, "readers {r1} {r2}");
            let d = &f.deadlocks[0];
            let steps: Vec<(u32, u64, u32)> = d
                .iter()
                .map(|s| (s.wait.thread, s.wait.addr, s.holder))
                .collect();
            assert_eq!(steps, [(1, rw, r2), (r2, A, 1)]);
        }
    }

    /// A condition wait is charged to the thread whose signal ended it;
    /// one that timed out with no signal, to nobody.
    #[test]
    fn cond_waits_blamed_on_the_signaller() {
        let c = 0xc0;
        let mut t = tracker();
        t.event(1, &ev(1, Op::MutexLock, phase::DONE, A, 0x1));
        let mut w = ev(2, Op::CondWait, phase::BEGIN, c, 0x2);
        w.arg = A;
        t.event(1, &w);
        t.event(2, &ev(50, Op::CondSignal, phase::DONE, c, 0x5));
        w.time = 60;
        w.flags = phase::DONE | phase::CONTENDED;
        t.event(1, &w);
        let mut w2 = ev(70, Op::CondTimedwait, phase::BEGIN, c, 0x3);
        w2.arg = A;
        t.event(1, &w2);
        // The recorder's encoding of a timeout: the errno, then the mutex.
        w2.time = 100;
        w2.flags = phase::FAIL;
        w2.arg = lockscope_trace::sync::ETIMEDOUT;
        w2.arg2 = A;
        t.event(1, &w2);
        let f = t.finish();
        assert_eq!(
            f.cond_blame,
            vec![
                ((1, c, 1, 0x2, 0, Some((2, 0x5))), (58, 1)),
                ((1, c, 1, 0x3, 0, None), (30, 1)),
            ]
        );
    }

    /// A timed-out condition wait as the recorder encodes it: BEGIN with
    /// the mutex in `arg`, FAIL with the errno in `arg` and the mutex in
    /// `arg2`.
    fn timed_out_wait(t: &mut Feed, th: u32, at: u64, cond: u64, mutex: u64) {
        let mut w = ev(at, Op::CondTimedwait, phase::BEGIN, cond, 0x30);
        w.arg = mutex;
        t.event(th, &w);
        w.time = at + 5;
        w.flags = phase::FAIL;
        w.arg = lockscope_trace::sync::ETIMEDOUT;
        w.arg2 = mutex;
        t.event(th, &w);
    }

    // See issue 29: the errno of a timed-out wait (0x6e) was taken for the
    // re-acquired mutex.
    #[test]
    fn inversion_witnessed_after_condvar_timeouts_is_reported_and_errno_is_never_a_lock() {
        let c = 0xc0;
        let mut t = tracker();
        for (th, first, second, t0) in [(1, A, B, 10), (2, B, A, 100)] {
            t.event(th, &ev(t0, Op::MutexLock, phase::DONE, first, 0x10));
            timed_out_wait(&mut t, th, t0 + 1, c, first);
            // Taken while holding `first` again, after the timeout.
            t.event(
                th,
                &ev(
                    t0 + 10,
                    Op::MutexLock,
                    phase::DONE,
                    second,
                    0x20 + th as u64,
                ),
            );
            t.event(th, &ev(t0 + 11, Op::MutexUnlock, phase::DONE, second, 0));
            t.event(th, &ev(t0 + 12, Op::MutexUnlock, phase::DONE, first, 0));
        }
        // Thread 3 is left holding G after a timed-out wait on it.
        t.event(3, &ev(200, Op::MutexLock, phase::DONE, G, 0x40));
        timed_out_wait(&mut t, 3, 201, c, G);
        let f = t.finish();
        assert_eq!(f.inversions.len(), 1, "{:?}", f.inversions);
        let i = &f.inversions[0];
        assert_eq!((i.a, i.b), (A, B));
        assert_eq!((i.a_then_b.thread, i.a_then_b.acquire_site), (1, 0x21));
        assert_eq!((i.b_then_a.thread, i.b_then_a.acquire_site), (2, 0x22));
        let held: Vec<(u32, u64)> = f.open_holds.iter().map(|(t, h)| (*t, h.addr)).collect();
        assert_eq!(
            held,
            [(3, G)],
            "the mutex of the wait is held again, not the errno"
        );
        let errno = lockscope_trace::sync::ETIMEDOUT;
        assert!(f.inversions.iter().all(|i| i.a != errno && i.b != errno));
    }
}
