//! The contract of the synchronization layer (`lockscope_trace::sync`):
//! event sequences as the recorder writes them, and the steps (with the
//! locks each thread holds after each step) every consumer gets from
//! them. One row per primitive and outcome; the waits are exact because
//! the overhead correction is off and every time is chosen.

use std::fmt::Write as _;

use lockscope_format::{phase, Event, Header, Op, Record, Thread, Trace};
use lockscope_trace::sync::{self, BlockedOn, Step, StepKind, SyncInterp};

const DONE: u8 = phase::DONE;
const BEGIN: u8 = phase::BEGIN;
const FAIL: u8 = phase::FAIL;
const END: u8 = phase::END;
const CONT: u8 = phase::DONE | phase::CONTENDED;
const CONT_FAIL: u8 = phase::FAIL | phase::CONTENDED;

const EBUSY: u64 = 16;
const EAGAIN: u64 = 11;
const EINTR: u64 = 4;
const EOWNERDEAD: u64 = 130;

const A: u64 = 0xa0;
const B: u64 = 0xb0;
const C: u64 = 0xc0;
const S: u64 = 0x50;
const F: u64 = 0xf0;
const BAR: u64 = 0xba;

fn ev(time: u64, op: Op, flags: u8, addr: u64, arg: u64, arg2: u64) -> Event {
    Event {
        time,
        op: op as u8,
        flags,
        addr,
        site: 0x1000 + time,
        stack: 0,
        arg,
        arg2,
    }
}

fn e(time: u64, op: Op, flags: u8, addr: u64) -> Event {
    ev(time, op, flags, addr, 0, 0)
}

/// The steps of threads 1..=n (events given per thread, in file order),
/// one line each: `thread kind | held: locks`.
fn steps(threads: Vec<Vec<Event>>) -> Vec<String> {
    let mut t = Trace {
        header: Header::default(),
        ..Trace::default()
    };
    for (i, evs) in threads.into_iter().enumerate() {
        let id = i as u32 + 1;
        t.records.push(Record::Thread(Thread {
            id,
            process: 1,
            tid: 100 + id,
            parent: 0,
            start_ns: 0,
            name: format!("t{id}"),
        }));
        t.events.insert(id, evs);
    }
    let mut out = Vec::new();
    sync::for_each_trace_step(&t, false, |s, si| out.push(line(s, si)));
    out
}

fn line(s: &Step<'_>, si: &SyncInterp) -> String {
    let mut l = format!("{} @{} {}", s.thread, s.time, kind(&s.kind));
    let held: Vec<String> = si
        .held(s.thread)
        .iter()
        .map(|h| format!("{:x}", h.lock.addr))
        .collect();
    if !held.is_empty() {
        let _ = write!(l, " | holds {}", held.join(" "));
    }
    l
}

fn kind(k: &StepKind) -> String {
    use StepKind::*;
    match *k {
        AcquireBegin { lock } => format!("begin {:x}", lock.addr),
        Acquired {
            section,
            waited,
            wait_ns,
            first_attempt,
            ..
        } => format!(
            "acquired {:x} {:?} via {:?}{}{}",
            section.lock.addr,
            section.mode,
            section.via,
            if waited {
                format!(" waited {wait_ns}")
            } else {
                String::new()
            },
            if first_attempt { " first" } else { "" }
        ),
        AcquireFailed {
            lock,
            errno,
            is_try,
            wait_ns,
            ..
        } => format!(
            "failed {:x} errno {errno}{} wait {wait_ns}",
            lock.addr,
            if is_try { " try" } else { "" }
        ),
        Released(s) => format!("released {:x}", s.lock.addr),
        UnmatchedRelease { lock } => format!("unmatched release {:x}", lock.addr),
        ReleaseEnd { lock, unlock_ns } => format!("unlock end {:x} {unlock_ns}", lock.addr),
        HoldDropped(s) => format!("dropped {:x}", s.lock.addr),
        HeldAtExit(s) => format!("held at exit {:x}", s.lock.addr),
        CondWaitBegin {
            cond,
            mutex,
            released,
        } => format!(
            "cond begin {:x} gives up {:x}{}",
            cond.addr,
            mutex.addr,
            if released.is_some() {
                ""
            } else {
                " (not held)"
            }
        ),
        CondWaitEnd {
            cond,
            wait_ns,
            timed_out,
            section,
        } => format!(
            "cond end {:x} wait {wait_ns}{} takes {:x} via {:?}",
            cond.addr,
            if timed_out { " timed out" } else { "" },
            section.lock.addr,
            section.via
        ),
        CondSignal { cond, broadcast } => format!(
            "{} {:x}",
            if broadcast { "broadcast" } else { "signal" },
            cond.addr
        ),
        BarrierArrive { barrier, round } => format!("arrive {:x} round {round}", barrier.addr),
        BarrierDepart {
            barrier,
            round,
            last_arriver,
            wait_ns,
            arrived_now,
        } => format!(
            "depart {:x} round {round} last {last_arriver} wait {wait_ns}{}",
            barrier.addr,
            if arrived_now { " at once" } else { "" }
        ),
        SemWaitBegin { sem } => format!("sem begin {:x}", sem.addr),
        SemWaitEnd {
            sem,
            waited,
            wait_ns,
            failed,
            is_try,
        } => format!(
            "sem end {:x}{}{}{}",
            sem.addr,
            if waited {
                format!(" waited {wait_ns}")
            } else {
                String::new()
            },
            failed.map_or(String::new(), |e| format!(" errno {e}")),
            if is_try { " try" } else { "" }
        ),
        SemPost { sem } => format!("post {:x}", sem.addr),
        FutexWaitBegin { futex } => format!("futex begin {:x}", futex.addr),
        FutexWaitEnd {
            futex,
            wait_ns,
            failed,
        } => format!(
            "futex end {:x} wait {wait_ns}{}",
            futex.addr,
            failed.map_or(String::new(), |e| format!(" errno {e}"))
        ),
        FutexWake { futex, woken } => format!("wake {:x} {woken}", futex.addr),
        ThreadCreate { tid } => format!("create {tid}"),
        ThreadStart => "start".into(),
        ThreadExit => "exit".into(),
        JoinBegin { tid } => format!("join begin {tid}"),
        JoinEnd { tid } => format!("join end {tid}"),
        Abandoned { queued } => match queued {
            Some((id, _)) => format!("abandoned {:x}", id.addr),
            None => "abandoned".into(),
        },
        StillWaiting {
            on,
            obj,
            arg,
            since_ns,
            wait_ns,
            ..
        } => format!(
            "still waiting {on:?}{} since {since_ns} wait {wait_ns}{}",
            obj.map_or(String::new(), |(id, _)| format!(" {:x}", id.addr)),
            if on == BlockedOn::Join {
                format!(" tid {arg}")
            } else {
                String::new()
            }
        ),
        Unmatched { obj } => match obj {
            Some((id, _)) => format!("unmatched {:x}", id.addr),
            None => "unmatched".into(),
        },
        Lost { count } => format!("lost {count}"),
        End => "end".into(),
        ref other => format!("{other:?}"),
    }
}

fn check(name: &str, threads: Vec<Vec<Event>>, want: &[&str]) {
    let got = steps(threads);
    assert_eq!(got, want, "{name}:\n{}", got.join("\n"));
}

#[test]
fn mutex_uncontended_and_contended() {
    check(
        "uncontended",
        vec![vec![
            e(10, Op::MutexLock, DONE, A),
            e(20, Op::MutexUnlock, DONE, A),
        ]],
        &[
            "1 @10 acquired a0 Exclusive via Lock first | holds a0",
            "1 @20 released a0",
            "1 @20 end",
        ],
    );
    // Thread 2 waits 20..35 for A; thread 1's unlock entered the kernel
    // (an END 5 ns after its DONE).
    check(
        "contended, slow unlock",
        vec![
            vec![
                e(10, Op::MutexLock, DONE, A),
                e(30, Op::MutexUnlock, DONE, A),
                e(35, Op::MutexUnlock, END, A),
            ],
            vec![
                e(20, Op::MutexLock, BEGIN, A),
                e(36, Op::MutexLock, CONT, A),
            ],
        ],
        &[
            "1 @10 acquired a0 Exclusive via Lock first | holds a0",
            "2 @20 begin a0",
            "1 @30 released a0",
            "1 @35 unlock end a0 5",
            "2 @36 acquired a0 Exclusive via Lock waited 16 | holds a0",
            "1 @36 end",
            "2 @36 end | holds a0",
            "2 @36 held at exit a0",
        ],
    );
}

#[test]
fn robust_mutex_owner_died_is_an_acquisition() {
    // EOWNERDEAD: the caller owns the mutex (the recorder writes DONE with
    // the return value in `arg`).
    check(
        "owner dead",
        vec![vec![
            ev(10, Op::MutexLock, DONE, A, EOWNERDEAD, 0),
            e(20, Op::MutexUnlock, DONE, A),
        ]],
        &[
            "1 @10 acquired a0 Exclusive via Lock first | holds a0",
            "1 @20 released a0",
            "1 @20 end",
        ],
    );
}

#[test]
fn trylock_success_and_failure() {
    check(
        "trylock",
        vec![
            vec![
                e(10, Op::MutexLock, DONE, A),
                e(40, Op::MutexUnlock, DONE, A),
            ],
            vec![
                ev(20, Op::MutexTrylock, FAIL, A, EBUSY, 0),
                e(50, Op::MutexTrylock, DONE, A),
                e(60, Op::MutexUnlock, DONE, A),
            ],
        ],
        &[
            "1 @10 acquired a0 Exclusive via Lock first | holds a0",
            "2 @20 failed a0 errno 16 try wait 0",
            "1 @40 released a0",
            // Not a first attempt: the same thread failed on it before.
            "2 @50 acquired a0 Exclusive via Trylock | holds a0",
            "2 @60 released a0",
            "1 @60 end",
            "2 @60 end",
        ],
    );
}

#[test]
fn timed_lock_timeout_and_spinlock() {
    check(
        "timedlock",
        vec![
            vec![e(10, Op::SpinLock, DONE, B), e(15, Op::SpinUnlock, DONE, B)],
            vec![
                e(20, Op::MutexTimedlock, BEGIN, A),
                ev(70, Op::MutexTimedlock, CONT_FAIL, A, sync::ETIMEDOUT, 0),
            ],
        ],
        &[
            "1 @10 acquired b0 Exclusive via Lock first | holds b0",
            "1 @15 released b0",
            "2 @20 begin a0",
            "2 @70 failed a0 errno 110 wait 50",
            "1 @70 end",
            "2 @70 end",
        ],
    );
}

#[test]
fn rwlock_readers_share_and_a_writer_waits_for_both() {
    check(
        "rwlock",
        vec![
            vec![e(10, Op::RwRdlock, DONE, A), e(30, Op::RwUnlock, DONE, A)],
            vec![e(12, Op::RwRdlock, DONE, A), e(40, Op::RwUnlock, DONE, A)],
            vec![e(20, Op::RwWrlock, BEGIN, A), e(41, Op::RwWrlock, CONT, A)],
        ],
        &[
            "1 @10 acquired a0 Read via Lock first | holds a0",
            "2 @12 acquired a0 Read via Lock first | holds a0",
            "3 @20 begin a0",
            "1 @30 released a0",
            "2 @40 released a0",
            "3 @41 acquired a0 Write via Lock waited 21 | holds a0",
            "1 @41 end",
            "2 @41 end",
            "3 @41 end | holds a0",
            "3 @41 held at exit a0",
        ],
    );
}

#[test]
fn condvar_signalled_and_timed_out_waits_take_the_mutex_back() {
    check(
        "signalled",
        vec![
            vec![
                e(10, Op::MutexLock, DONE, A),
                ev(11, Op::CondWait, BEGIN, C, A, 0),
                ev(40, Op::CondWait, CONT, C, A, 0),
                e(41, Op::MutexUnlock, DONE, A),
            ],
            vec![e(30, Op::CondSignal, DONE, C)],
        ],
        &[
            "1 @10 acquired a0 Exclusive via Lock first | holds a0",
            "1 @11 cond begin c0 gives up a0",
            "2 @30 signal c0",
            "1 @40 cond end c0 wait 29 takes a0 via CondWait | holds a0",
            "1 @41 released a0",
            "1 @41 end",
            "2 @41 end",
        ],
    );
    // The recorder's timeout: FAIL with the errno in `arg`, the mutex in
    // `arg2`. The mutex of the BEGIN is held again; 0x6e never is.
    check(
        "timed out",
        vec![vec![
            e(10, Op::MutexLock, DONE, A),
            ev(11, Op::CondTimedwait, BEGIN, C, A, 0),
            ev(61, Op::CondTimedwait, FAIL, C, sync::ETIMEDOUT, A),
            e(62, Op::MutexLock, DONE, B),
        ]],
        &[
            "1 @10 acquired a0 Exclusive via Lock first | holds a0",
            "1 @11 cond begin c0 gives up a0",
            "1 @61 cond end c0 wait 50 timed out takes a0 via CondWait | holds a0",
            "1 @62 acquired b0 Exclusive via Lock first | holds a0 b0",
            "1 @62 end | holds a0 b0",
            "1 @62 held at exit b0 | holds a0",
            "1 @62 held at exit a0",
        ],
    );
}

#[test]
fn semaphore_wait_post_and_failed_trywait() {
    check(
        "semaphore",
        vec![
            vec![
                e(10, Op::SemWait, DONE, S),
                ev(11, Op::SemTrywait, FAIL, S, EAGAIN, 0),
                e(12, Op::SemWait, BEGIN, S),
                e(31, Op::SemWait, CONT, S),
            ],
            vec![e(30, Op::SemPost, DONE, S)],
        ],
        &[
            "1 @10 sem end 50",
            "1 @11 sem end 50 errno 11 try",
            "1 @12 sem begin 50",
            "2 @30 post 50",
            "1 @31 sem end 50 waited 19",
            "1 @31 end",
            "2 @31 end",
        ],
    );
}

// A semaphore whose count stays in {0, 1} and that its taker posts is a
// lock: its waits and posts become acquisitions and releases.
#[test]
fn a_semaphore_posted_by_its_taker_is_interpreted_as_a_lock() {
    check(
        "semaphore-lock",
        vec![
            vec![
                e(10, Op::SemWait, DONE, S),
                e(20, Op::SemPost, DONE, S),
                ev(31, Op::SemTrywait, FAIL, S, EAGAIN, 0),
                e(32, Op::SemTimedwait, BEGIN, S),
                e(41, Op::SemTimedwait, CONT, S),
                e(50, Op::SemPost, DONE, S),
            ],
            vec![e(30, Op::SemWait, DONE, S), e(40, Op::SemPost, DONE, S)],
        ],
        &[
            "1 @10 acquired 50 Exclusive via Lock first | holds 50",
            "1 @20 released 50",
            "2 @30 acquired 50 Exclusive via Lock first | holds 50",
            "1 @31 failed 50 errno 11 try wait 0",
            "1 @32 begin 50",
            "2 @40 released 50",
            "1 @41 acquired 50 Exclusive via Timedlock waited 9 | holds 50",
            "1 @50 released 50",
            "1 @50 end",
            "2 @50 end",
        ],
    );
}

// One post from a thread that did not take it (a hand-off) keeps a
// semaphore a semaphore for the whole trace, its earlier uses included.
#[test]
fn a_semaphore_posted_by_another_thread_stays_a_semaphore() {
    check(
        "semaphore-handoff",
        vec![
            vec![
                e(10, Op::SemWait, DONE, S),
                e(20, Op::SemPost, DONE, S),
                e(30, Op::SemWait, DONE, S),
            ],
            vec![e(40, Op::SemPost, DONE, S)],
        ],
        &[
            "1 @10 sem end 50",
            "1 @20 post 50",
            "1 @30 sem end 50",
            "2 @40 post 50",
            "1 @40 end",
            "2 @40 end",
        ],
    );
}

#[test]
fn barrier_round_names_its_last_arriver() {
    check(
        "barrier",
        vec![
            vec![
                e(10, Op::BarrierWait, BEGIN, BAR),
                e(21, Op::BarrierWait, DONE, BAR),
            ],
            // The last to arrive does not wait: a DONE without BEGIN.
            vec![e(20, Op::BarrierWait, DONE, BAR)],
        ],
        &[
            "1 @10 arrive ba round 0",
            "2 @20 depart ba round 0 last 2 wait 0 at once",
            "1 @21 depart ba round 0 last 2 wait 11",
            "1 @21 end",
            "2 @21 end",
        ],
    );
}

#[test]
fn futex_wait_woken_and_interrupted() {
    check(
        "futex",
        vec![
            vec![
                e(10, Op::FutexWait, BEGIN, F),
                e(30, Op::FutexWait, DONE, F),
                e(40, Op::FutexWait, BEGIN, F),
                ev(45, Op::FutexWait, FAIL, F, EINTR, 0),
            ],
            vec![ev(29, Op::FutexWake, DONE, F, 1, 0)],
        ],
        &[
            "1 @10 futex begin f0",
            "2 @29 wake f0 1",
            "1 @30 futex end f0 wait 20",
            "1 @40 futex begin f0",
            "1 @45 futex end f0 wait 5 errno 4",
            "1 @45 end",
            "2 @45 end",
        ],
    );
}

#[test]
fn a_cancelled_wait_is_abandoned_and_a_join_completes() {
    // Thread 2 is cancelled inside its condition wait: the next event is
    // its exit, which proves the wait never returned.
    check(
        "cancelled",
        vec![
            vec![
                ev(5, Op::ThreadCreate, DONE, 0, 102, 0),
                ev(6, Op::ThreadJoin, BEGIN, 0, 102, 0),
                ev(31, Op::ThreadJoin, DONE, 0, 102, 0),
            ],
            vec![
                e(10, Op::MutexLock, DONE, A),
                ev(11, Op::CondWait, BEGIN, C, A, 0),
                e(30, Op::ThreadExit, DONE, 0),
            ],
        ],
        &[
            "1 @5 create 102",
            "1 @6 join begin 102",
            "2 @10 acquired a0 Exclusive via Lock first | holds a0",
            "2 @11 cond begin c0 gives up a0",
            "2 @30 abandoned",
            "2 @30 exit",
            "1 @31 join end 102",
            "1 @31 end",
            // Without a ThreadEnd record a thread lives to the trace's end.
            "2 @31 end",
        ],
    );
}

#[test]
fn waits_still_open_at_the_end_are_reported_with_their_wait() {
    // A two-lock deadlock, and a thread still joining one of them.
    check(
        "deadlock",
        vec![
            vec![
                e(10, Op::MutexLock, DONE, A),
                e(20, Op::MutexLock, BEGIN, B),
            ],
            vec![
                e(11, Op::MutexLock, DONE, B),
                e(21, Op::MutexLock, BEGIN, A),
            ],
            vec![
                ev(12, Op::ThreadJoin, BEGIN, 0, 101, 0),
                e(100, Op::SemPost, DONE, S),
            ],
        ],
        &[
            "1 @10 acquired a0 Exclusive via Lock first | holds a0",
            "2 @11 acquired b0 Exclusive via Lock first | holds b0",
            // An event of a thread blocked in a join: the join was not
            // what it did last (events were lost).
            "3 @12 join begin 101",
            "1 @20 begin b0 | holds a0",
            "2 @21 begin a0 | holds b0",
            "3 @100 abandoned",
            "3 @100 post 50",
            "1 @100 end | holds a0",
            "1 @100 held at exit a0",
            "1 @100 still waiting Lock b0 since 20 wait 80",
            "1 @100 abandoned b0",
            "2 @100 end | holds b0",
            "2 @100 held at exit b0",
            "2 @100 still waiting Lock a0 since 21 wait 79",
            "2 @100 abandoned a0",
            "3 @100 end",
        ],
    );
    check(
        "join and condition wait",
        vec![
            vec![ev(10, Op::ThreadJoin, BEGIN, 0, 102, 0)],
            vec![
                e(11, Op::MutexLock, DONE, A),
                ev(12, Op::CondWait, BEGIN, C, A, 0),
            ],
            vec![e(50, Op::SemPost, DONE, S)],
        ],
        &[
            "1 @10 join begin 102",
            "2 @11 acquired a0 Exclusive via Lock first | holds a0",
            "2 @12 cond begin c0 gives up a0",
            "3 @50 post 50",
            "1 @50 end",
            "1 @50 still waiting Join since 10 wait 40 tid 102",
            "2 @50 end",
            "2 @50 still waiting Cond c0 since 12 wait 38",
            "3 @50 end",
        ],
    );
}

#[test]
fn releases_and_completions_without_a_start() {
    check(
        "unmatched",
        vec![vec![
            e(10, Op::MutexUnlock, DONE, A),
            e(20, Op::MutexLock, CONT, B),
            ev(30, Op::CondWait, CONT, C, A, 0),
            e(40, Op::MutexUnlock, DONE, B),
        ]],
        &[
            "1 @10 unmatched release a0",
            "1 @20 acquired b0 Exclusive via Lock waited 0 | holds b0",
            "1 @30 unmatched c0 | holds b0",
            "1 @40 released b0",
            "1 @40 end",
        ],
    );
}

#[test]
fn a_lost_release_is_dropped_when_another_thread_goes_through_the_lock() {
    check(
        "lost release",
        vec![
            vec![e(10, Op::MutexLock, DONE, A)],
            vec![
                e(20, Op::MutexLock, DONE, A),
                e(30, Op::MutexUnlock, DONE, A),
            ],
        ],
        &[
            "1 @10 acquired a0 Exclusive via Lock first | holds a0",
            "2 @20 acquired a0 Exclusive via Lock first | holds a0",
            "2 @30 released a0",
            "1 @30 dropped a0",
            "1 @30 end",
            "2 @30 end",
        ],
    );
}
