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
//! variable's mutex after its previous signal; it ends at the thread's
//! next signal (or broadcast), provided that the thread released the
//! mutex in between. Waiting on it again ends an interval with no
//! hand-off (the thread gave nothing up). The mutex release is what tells
//! a token from a queue's hand-off: a consumer that signals inside the
//! critical section in which its wait returned held nothing outside the
//! mutex.
//!
//! The scan reads the raw events in time order (the report's own pass
//! hands them over, as to [`crate::hangs::Scan`]) and keeps, per thread,
//! one entry per condition variable it used.

use std::collections::HashMap;

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
pub struct TokenScan {
    process_of: HashMap<u32, u32>,
    /// (process, cond) -> its mutex, from the waits on it.
    mutex_of: HashMap<(u32, u64), u64>,
    open: HashMap<u32, Vec<Open>>,
    /// (process, cond) -> intervals (start, end).
    done: HashMap<(u32, u64), Vec<(u64, u64)>>,
}

impl TokenScan {
    /// A scan for the threads of `meta`.
    pub fn new(meta: &crate::input::Meta) -> TokenScan {
        TokenScan {
            process_of: meta.threads.values().map(|t| (t.id, t.process)).collect(),
            ..TokenScan::default()
        }
    }

    /// A scan with an explicit thread -> process map (tests).
    pub fn with_threads(process_of: HashMap<u32, u32>) -> TokenScan {
        TokenScan {
            process_of,
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

    fn event(&mut self, thread: u32, e: &Event) {
        let Some(op) = Op::from_u8(e.op) else {
            return;
        };
        let ph = phase::of(e.flags);
        let p = self.process_of.get(&thread).copied().unwrap_or(0);
        match op {
            Op::CondWait | Op::CondTimedwait => {
                self.mutex_of.insert((p, e.addr), e.arg);
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
                    });
                }
            }
            op if op.is_acquire() && ph == phase::DONE => {
                let Some(open) = self.open.get_mut(&thread) else {
                    return;
                };
                for o in open.iter_mut().filter(|o| o.since.is_none()) {
                    if self.mutex_of.get(&(p, o.cond)) == Some(&e.addr) {
                        o.since = Some(e.time);
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
                let i = match open.iter().position(|o| o.cond == e.addr) {
                    Some(i) => i,
                    None => {
                        open.push(Open {
                            cond: e.addr,
                            since: None,
                            released: false,
                        });
                        open.len() - 1
                    }
                };
                let o = open[i];
                // Signalled before releasing the mutex: a hand-off inside
                // one critical section (a queue), not a token held outside
                // it.
                if let (Some(since), true) = (o.since, o.released) {
                    self.done
                        .entry((p, e.addr))
                        .or_default()
                        .push((since, e.time));
                }
                // The next interval starts at its next acquisition of the
                // mutex (a take without waiting).
                open[i] = Open {
                    cond: e.addr,
                    since: None,
                    released: false,
                };
            }
            Op::ThreadExit => {
                self.open.remove(&thread);
            }
            _ => {}
        }
    }

    /// The intervals of each (process trace id, condition variable).
    pub fn finish(self) -> HashMap<(u32, u64), Tokens> {
        self.done
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_unstable();
                let mut t = Tokens::default();
                let (mut cur_s, mut cur_e) = (0u64, 0u64);
                let mut any = false;
                for (s, e) in v {
                    t.intervals += 1;
                    t.held_ns += e - s;
                    if any && s <= cur_e {
                        cur_e = cur_e.max(e);
                    } else {
                        if any {
                            t.union_ns += cur_e - cur_s;
                        }
                        (cur_s, cur_e, any) = (s, e, true);
                    }
                }
                if any {
                    t.union_ns += cur_e - cur_s;
                }
                (k, t)
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
            // acquisition of the mutex after its signal, to its next
            // signal (its own section there included).
            (2, ev(210, Op::MutexLock, phase::DONE, M, 0)),
            (2, ev(211, Op::MutexUnlock, phase::DONE, M, 0)),
            (2, ev(250, Op::MutexLock, phase::DONE, M, 0)),
            (2, ev(251, Op::MutexUnlock, phase::DONE, M, 0)),
            (2, ev(260, Op::CondSignal, phase::DONE, C, 0)),
        ]);
        assert_eq!((t.intervals, t.held_ns, t.union_ns), (3, 230, 230));
        assert_eq!(t.holders_at_once(), 1.0);
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
}
