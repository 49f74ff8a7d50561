//! Condition variables that pass a token: the evidence behind
//! "condition variable X is used as a lock" ([`crate::advice::cond_is_lock`]).
//!
//! A lock built from a flag, a mutex and a condition variable (CPython's
//! GIL, `gil_like.c`) is taken under the mutex (after a wait on the
//! condition variable if the flag was set), *held* after the mutex is
//! released, and given up by clearing the flag and signalling the next
//! waiter. Such a holding is a *token interval* of the condition variable
//! for one thread: it starts when a wait on it returns, or, for a thread
//! that did not wait, at its first acquisition of the condition
//! variable's mutex after its previous signal. It is given up by the
//! thread's next signal (or broadcast), provided that the thread released
//! the mutex in between. Waiting on it again ends an interval with no
//! hand-off (the thread gave nothing up). The mutex release is what tells
//! a token from a queue's hand-off: a consumer that signals inside the
//! critical section in which its wait returned held nothing outside the
//! mutex.
//!
//! The interval *ends* at the start of the critical section that gives
//! the token up: the thread's last acquisition of the mutex before the
//! signal, or the signal itself when it did not take the mutex again.
//! The flag is cleared under the mutex, so the next holder (whose wait
//! returns, or who takes the mutex, only after that section) cannot start
//! before this end: a lock's intervals never overlap, however the
//! scheduler runs its threads. Not taken: ending at the signal. A holder
//! preempted between releasing the mutex and signalling (`gil_like.c`'s
//! drop: clear, unlock, signal) then overlapped the next holder's whole
//! turn; on a loaded 2-CPU machine one recording in about ten measured
//! 1.12 holders at once on that fixture, and the rule fell silent.
//!
//! The scan reads the raw events in time order (the report's own pass
//! hands them over, as to [`crate::hangs::Scan`]) and keeps, per thread,
//! one entry per condition variable it used.

use std::collections::HashMap;

use lockscope_trace::FastMap;

use lockscope_format::{phase, Event, Op};

/// A thread's interval on one condition variable, open.
#[derive(Clone, Copy, Debug)]
struct Open {
    cond: u64,
    /// Start: the wait's return or the first acquisition of the mutex
    /// after a signal (None: not acquired yet).
    since: Option<u64>,
    /// The thread released the mutex since `since`.
    released: bool,
    /// Its latest acquisition of the mutex after such a release: the
    /// start of the critical section that may give the token up, and so
    /// the end of the interval if a signal follows.
    retaken: Option<u64>,
}

/// The token intervals of one condition variable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Completed intervals (wait returned ... same thread signalled,
    /// the mutex released in between).
    pub intervals: u64,
    /// Their lengths summed, ns.
    pub held_ns: u64,
    /// The time during which at least one thread held it (the union of
    /// the intervals), ns. `held_ns / union_ns` is the mean number of
    /// threads holding it while anyone did: 1 for a lock.
    pub union_ns: u64,
}

impl Tokens {
    /// Mean number of threads holding the token while any did (0 when
    /// none ever did).
    pub fn holders_at_once(&self) -> f64 {
        if self.union_ns == 0 {
            0.0
        } else {
            self.held_ns as f64 / self.union_ns as f64
        }
    }
}

/// Collects token intervals from time-ordered events.
#[derive(Debug, Default)]
///
/// Its maps are looked up at every event of the trace (the thread's
/// process, its open intervals): Fx-hashed, not SipHash. With std's
/// hasher they were 7.5 % of `lockscope report`'s CPU on a 20M-event
/// one-thread trace (perf).
pub struct TokenScan {
    process_of: FastMap<u32, u32>,
    /// (process, cond) -> its mutex, from the waits on it.
    mutex_of: FastMap<(u32, u64), u64>,
    open: FastMap<u32, Vec<Open>>,
    /// (process, cond) -> its holdings so far.
    done: FastMap<(u32, u64), Acc>,
}

/// The holdings of one condition variable, summed as they close: memory
/// stays bounded however many there are (a GIL passes on millions of
/// times).
#[derive(Debug, Default)]
struct Acc {
    /// Counts and the union of the segments already final.
    tokens: Tokens,
    /// The union of the rest, as disjoint segments in time order: a
    /// holding still open may start before the latest ones end.
    segs: Vec<(u64, u64)>,
}

impl Acc {
    fn add(&mut self, mut s: u64, mut e: u64) {
        self.tokens.intervals += 1;
        self.tokens.held_ns += e.saturating_sub(s);
        // Holdings close at their signals, in time order, but end at the
        // section before it: a new one may end before a segment added
        // earlier, so it is merged where it falls, not only at the back.
        // The segments are disjoint and sorted, by start and by end alike.
        let lo = self.segs.partition_point(|&(_, le)| le < s);
        let hi = self.segs.partition_point(|&(ls, _)| ls <= e);
        if lo < hi {
            s = s.min(self.segs[lo].0);
            e = e.max(self.segs[hi - 1].1);
        }
        self.segs.splice(lo..hi, [(s, e)]);
    }

    /// Sums up the segments that end before `horizon`, the earliest start
    /// of a holding still open on this variable: no later holding can
    /// reach back to them.
    fn settle(&mut self, horizon: u64) {
        let n = self.segs.partition_point(|&(_, e)| e < horizon);
        for (s, e) in self.segs.drain(..n) {
            self.tokens.union_ns += e - s;
        }
    }
}

/// Segments kept per variable before the final ones are summed up.
const SETTLE_EVERY: usize = 256;

impl TokenScan {
    /// A scan for the threads of `meta`.
    pub fn new(meta: &lockscope_trace::input::Meta) -> TokenScan {
        TokenScan {
            process_of: meta.threads.values().map(|t| (t.id, t.process)).collect(),
            ..TokenScan::default()
        }
    }

    /// A scan with an explicit thread -> process map (tests).
    pub fn with_threads(process_of: HashMap<u32, u32>) -> TokenScan {
        TokenScan {
            process_of: process_of.into_iter().collect(),
            ..TokenScan::default()
        }
    }

    /// Events of trace thread `thread`, in time order with every other
    /// thread's (the merge's runs).
    pub fn events(&mut self, thread: u32, events: &[Event]) {
        for e in events {
            self.event(thread, e);
        }
    }

    /// One event of trace thread `thread`, in time order with every
    /// other thread's (the report feeds it the event of each step of the
    /// synchronization layer).
    pub fn event(&mut self, thread: u32, e: &Event) {
        let Some(op) = Op::from_u8(e.op) else {
            return;
        };
        let ph = phase::of(e.flags);
        let p = self.process_of.get(&thread).copied().unwrap_or(0);
        match op {
            Op::CondWait | Op::CondTimedwait => {
                // A failed (timed-out) wait carries the error in `arg` and
                // the mutex in `arg2` (the recorder's encoding): the errno
                // is not a mutex.
                let mutex = if ph == phase::FAIL { e.arg2 } else { e.arg };
                self.mutex_of.insert((p, e.addr), mutex);
                let open = self.open.entry(thread).or_default();
                // Waiting again without having signalled: whatever it did
                // since, it passed nothing on.
                open.retain(|o| o.cond != e.addr);
                // Any return (signalled, timed out, spurious) gives the
                // mutex back and may take the token: CPython's take_gil
                // takes the GIL after a timed-out wait when it is free.
                if ph == phase::DONE || ph == phase::FAIL {
                    open.push(Open {
                        cond: e.addr,
                        since: Some(e.time),
                        released: false,
                        retaken: None,
                    });
                }
            }
            op if op.is_acquire() && ph == phase::DONE => {
                let Some(open) = self.open.get_mut(&thread) else {
                    return;
                };
                for o in open.iter_mut() {
                    if self.mutex_of.get(&(p, o.cond)) != Some(&e.addr) {
                        continue;
                    }
                    if o.since.is_none() {
                        o.since = Some(e.time);
                    } else if o.released {
                        o.retaken = Some(e.time);
                    }
                }
            }
            op if op.is_release() && ph != phase::END => {
                let Some(open) = self.open.get_mut(&thread) else {
                    return;
                };
                for o in open.iter_mut().filter(|o| o.since.is_some()) {
                    if self.mutex_of.get(&(p, o.cond)) == Some(&e.addr) {
                        o.released = true;
                    }
                }
            }
            Op::CondSignal | Op::CondBroadcast => {
                let open = self.open.entry(thread).or_default();
                // The next interval starts at its next acquisition of the
                // mutex (a take without waiting).
                let next = Open {
                    cond: e.addr,
                    since: None,
                    released: false,
                    retaken: None,
                };
                let o = match open.iter_mut().find(|o| o.cond == e.addr) {
                    Some(o) => std::mem::replace(o, next),
                    None => {
                        open.push(next);
                        return;
                    }
                };
                // Signalled before releasing the mutex: a hand-off inside
                // one critical section (a queue), not a token held outside
                // it.
                let (Some(since), true) = (o.since, o.released) else {
                    return;
                };
                let acc = self.done.entry((p, e.addr)).or_default();
                acc.add(since, o.retaken.unwrap_or(e.time));
                if acc.segs.len() >= SETTLE_EVERY {
                    let process_of = &self.process_of;
                    let horizon = self
                        .open
                        .iter()
                        .filter(|(t, _)| process_of.get(t).copied().unwrap_or(0) == p)
                        .flat_map(|(_, v)| v.iter())
                        .filter(|o| o.cond == e.addr)
                        .filter_map(|o| o.since)
                        .min()
                        .unwrap_or(e.time);
                    acc.settle(horizon);
                }
            }
            Op::ThreadExit => {
                self.open.remove(&thread);
            }
            _ => {}
        }
    }

    /// The holdings of each (process trace id, condition variable).
    pub fn finish(self) -> HashMap<(u32, u64), Tokens> {
        self.done
            .into_iter()
            .map(|(k, mut acc)| {
                acc.settle(u64::MAX);
                (k, acc.tokens)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: u64 = 0xc0;
    const M: u64 = 0x40;

    fn ev(time: u64, op: Op, flags: u8, addr: u64, arg: u64) -> Event {
        Event {
            time,
            op: op as u8,
            flags,
            addr,
            site: 0,
            stack: 0,
            arg,
            arg2: 0,
        }
    }

    fn scan(evs: &[(u32, Event)]) -> Tokens {
        let mut s = TokenScan::with_threads([(1, 1), (2, 1), (3, 1)].into_iter().collect());
        for (t, e) in evs {
            s.events(*t, std::slice::from_ref(e));
        }
        s.finish().remove(&(1, C)).unwrap_or_default()
    }

    #[test]
    fn a_token_passed_around_is_held_by_one_thread_at_a_time() {
        // Thread 1 returns from its wait at 10, releases the mutex,
        // signals at 100; thread 2's wait returns at 110, signals at 200.
        let t = scan(&[
            (1, ev(10, Op::CondWait, phase::DONE, C, M)),
            (1, ev(11, Op::MutexUnlock, phase::DONE, M, 0)),
            (1, ev(100, Op::CondSignal, phase::DONE, C, 0)),
            (2, ev(110, Op::CondWait, phase::DONE, C, M)),
            (2, ev(111, Op::MutexUnlock, phase::DONE, M, 0)),
            (2, ev(200, Op::CondSignal, phase::DONE, C, 0)),
            // Thread 2 takes it again without waiting: from its first
            // acquisition of the mutex after its signal, to the start of
            // the section that gives it up (its last acquisition of the
            // mutex before its next signal).
            (2, ev(210, Op::MutexLock, phase::DONE, M, 0)),
            (2, ev(211, Op::MutexUnlock, phase::DONE, M, 0)),
            (2, ev(250, Op::MutexLock, phase::DONE, M, 0)),
            (2, ev(251, Op::MutexUnlock, phase::DONE, M, 0)),
            (2, ev(260, Op::CondSignal, phase::DONE, C, 0)),
        ]);
        assert_eq!((t.intervals, t.held_ns, t.union_ns), (3, 220, 220));
        assert_eq!(t.holders_at_once(), 1.0);
    }

    #[test]
    fn many_holdings_are_summed_in_bounded_memory() {
        // 10,000 rounds of two threads: thread 1 holds [10k, 10k+6],
        // thread 2 [10k+4, 10k+9] (2 ns of overlap): 11 ns held in 9.
        let mut s = TokenScan::with_threads([(1, 1), (2, 1)].into_iter().collect());
        for k in 0..10_000u64 {
            let b = k * 10;
            for (t, e) in [
                (1, ev(b, Op::CondWait, phase::DONE, C, M)),
                (1, ev(b + 1, Op::MutexUnlock, phase::DONE, M, 0)),
                (2, ev(b + 4, Op::CondWait, phase::DONE, C, M)),
                (2, ev(b + 5, Op::MutexUnlock, phase::DONE, M, 0)),
                (1, ev(b + 6, Op::CondSignal, phase::DONE, C, 0)),
                (2, ev(b + 9, Op::CondSignal, phase::DONE, C, 0)),
            ] {
                s.events(t, std::slice::from_ref(&e));
            }
            assert!(s.done[&(1, C)].segs.len() <= SETTLE_EVERY);
        }
        let t = s.finish().remove(&(1, C)).unwrap();
        assert_eq!(
            (t.intervals, t.held_ns, t.union_ns),
            (20_000, 110_000, 90_000)
        );
    }

    #[test]
    fn overlapping_holders_and_in_section_signals() {
        // Two threads hold [0, 100] and [50, 150]: 200 ns held over 150.
        // Thread 3 signals before releasing the mutex: no interval; and a
        // wait begun again before any signal drops its open interval.
        let t = scan(&[
            (1, ev(0, Op::CondWait, phase::DONE, C, M)),
            (2, ev(50, Op::CondWait, phase::DONE, C, M)),
            (1, ev(51, Op::MutexUnlock, phase::DONE, M, 0)),
            (2, ev(52, Op::MutexUnlock, phase::DONE, M, 0)),
            (3, ev(60, Op::CondWait, phase::DONE, C, M)),
            (3, ev(61, Op::CondSignal, phase::DONE, C, 0)),
            (3, ev(62, Op::MutexUnlock, phase::DONE, M, 0)),
            (1, ev(100, Op::CondSignal, phase::DONE, C, 0)),
            (2, ev(150, Op::CondBroadcast, phase::DONE, C, 0)),
            (3, ev(160, Op::CondWait, phase::DONE, C, M)),
            (3, ev(161, Op::MutexUnlock, phase::DONE, M, 0)),
            (3, ev(170, Op::CondWait, phase::BEGIN, C, M)),
            (3, ev(180, Op::CondSignal, phase::DONE, C, 0)),
        ]);
        assert_eq!((t.intervals, t.held_ns, t.union_ns), (2, 200, 150));
        assert!((t.holders_at_once() - 200.0 / 150.0).abs() < 1e-12);
    }

    #[test]
    fn a_holder_preempted_between_unlock_and_signal_holds_nothing_after_its_unlock() {
        // gil_like.c's drop: lock, clear the flag, unlock, signal. Thread
        // 1 is descheduled between its unlock (101) and its signal (400);
        // meanwhile thread 2 takes the mutex (102), finds the flag clear,
        // holds it and gives it up (lock 200, unlock 201, signal 202).
        // Thread 1 gave the token up in its section at 100: one holder
        // at a time.
        let t = scan(&[
            (1, ev(10, Op::CondWait, phase::DONE, C, M)),
            (1, ev(11, Op::MutexUnlock, phase::DONE, M, 0)),
            (1, ev(100, Op::MutexLock, phase::DONE, M, 0)),
            (1, ev(101, Op::MutexUnlock, phase::DONE, M, 0)),
            (2, ev(20, Op::CondSignal, phase::DONE, C, 0)),
            (2, ev(102, Op::MutexLock, phase::DONE, M, 0)),
            (2, ev(103, Op::MutexUnlock, phase::DONE, M, 0)),
            (2, ev(200, Op::MutexLock, phase::DONE, M, 0)),
            (2, ev(201, Op::MutexUnlock, phase::DONE, M, 0)),
            (2, ev(202, Op::CondSignal, phase::DONE, C, 0)),
            (1, ev(400, Op::CondSignal, phase::DONE, C, 0)),
        ]);
        // [10, 100] and [102, 200]; thread 1's closes last but ends first.
        assert_eq!((t.intervals, t.held_ns, t.union_ns), (2, 188, 188));
        assert_eq!(t.holders_at_once(), 1.0);
    }

    #[test]
    fn a_holding_that_closes_late_merges_only_with_what_it_overlaps() {
        let mut a = Acc::default();
        a.add(0, 10);
        a.add(20, 30);
        a.add(12, 15);
        assert_eq!(a.segs, [(0, 10), (12, 15), (20, 30)]);
        a.add(9, 21);
        assert_eq!(a.segs, [(0, 30)]);
        a.add(40, 50);
        a.add(35, 36);
        a.settle(u64::MAX);
        assert_eq!(
            (a.tokens.intervals, a.tokens.held_ns),
            (6, 10 + 10 + 3 + 12 + 10 + 1)
        );
        assert_eq!(a.tokens.union_ns, 30 + 10 + 1);
    }
}
