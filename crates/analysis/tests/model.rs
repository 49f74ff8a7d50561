//! The report against synthetic traces whose ground truth is known by
//! construction (every figure below is computed by hand from the events).

mod common;
use common::*;
use lockscope_format::Op;

const L: u64 = 0x5000;
const M: u64 = 0x6000;

#[test]
fn single_thread_lock_is_never_contended() {
    let mut tb = Tb::new();
    tb.thread(1, "main", 0, 1_000_000);
    for i in 0..100u64 {
        tb.section(1, 1000 + i * 5000, 1000 + i * 5000 + 1000, L, 0x10);
    }
    let r = report(&tb);
    let l = lock(&r, L);
    assert_eq!(l.acquisitions, 100);
    assert_eq!(l.contended, 0);
    assert_eq!(l.owner_changes, 0);
    assert_eq!(l.trylock_failures, 0);
    assert_eq!(l.first_attempt_ratio, 1.0);
    assert_eq!(l.wait_ns.total, 0);
    assert_eq!(l.hold_ns.total, 100_000);
    assert_eq!(l.hold_ns.max, 1000);
    assert_eq!(l.hold_ns.p99, 1000);
    assert!(r.blame.is_empty());
    let t = thread(&r, 1);
    assert_eq!(t.lifetime_ns, 1_000_000);
    assert_eq!(t.hold_ns, 100_000);
    assert_eq!(t.free_ns, 900_000);
    assert_sums(&r);
}

fn contention() -> Tb {
    let mut tb = Tb::new();
    tb.thread(1, "holder", 0, 100_000)
        .thread(2, "waiter", 0, 100_000);
    tb.section(1, 1000, 11_000, L, 0x10);
    tb.waited_section(2, 2000, 11_500, 12_000, L, 0x20);
    tb
}

#[test]
fn contended_wait_hold_blame_and_breakdown() {
    let r = report(&contention());
    let l = lock(&r, L);
    assert_eq!(l.kind, "mutex");
    assert_eq!(l.acquisitions, 2);
    assert_eq!(l.contended, 1);
    assert_eq!(l.contended_ratio, 0.5);
    assert_eq!(l.owner_changes, 1);
    assert_eq!(l.first_attempt_ratio, 0.5);
    assert_eq!(l.wait_ns.total, 9500);
    assert_eq!(l.wait_ns.max, 9500);
    // The mean is over the one wait that happened.
    assert_eq!(l.wait_ns.mean, 9500.0);
    assert_eq!(l.hold_ns.total, 10_500);
    assert!(
        (l.avg_waiters - 9000.0 / 10_500.0).abs() < 1e-9,
        "{}",
        l.avg_waiters
    );
    // Sites: the waiter's site has the wait.
    let s20 = l.sites.iter().find(|s| s.location == "?+0x20").unwrap();
    assert_eq!((s20.acquisitions, s20.contended, s20.wait_ns), (1, 1, 9500));
    let s10 = l.sites.iter().find(|s| s.location == "?+0x10").unwrap();
    assert_eq!(
        (s10.acquisitions, s10.contended, s10.hold_ns),
        (1, 0, 10_000)
    );
    // Blame: 9000 ns charged to thread 1's section at 0x10, the last
    // 500 ns (after the release, before the waiter got it) to nobody.
    assert_eq!(r.blame.len(), 2);
    let b = &r.blame[0];
    assert_eq!(
        (b.waiter_tid, b.holder_tid, b.wait_ns),
        (102, Some(101), 9000)
    );
    assert_eq!(b.holder_site, "?+0x10");
    assert_eq!(b.waiter_site, "?+0x20");
    assert_eq!((r.blame[1].holder_tid, r.blame[1].wait_ns), (None, 500));
    assert_eq!(r.blocking_sites[0].site, "?+0x10");
    assert_eq!(r.blocking_sites[0].wait_caused_ns, 9000);
    // Per thread.
    let t1 = thread(&r, 1);
    assert_eq!(
        (t1.free_ns, t1.lock_ns, t1.hold_ns, t1.unknown_ns),
        (90_000, 0, 10_000, 0)
    );
    let t2 = thread(&r, 2);
    assert_eq!((t2.free_ns, t2.lock_ns, t2.hold_ns), (90_000, 9500, 500));
    assert_sums(&r);
    let lt: Vec<_> = l
        .threads
        .iter()
        .map(|t| (t.tid, t.acquisitions, t.contended, t.wait_ns))
        .collect();
    assert_eq!(lt, vec![(102, 1, 1, 9500), (101, 1, 0, 0)]);
}

#[test]
fn trylock_failures_and_timeouts() {
    let mut tb = Tb::new();
    tb.thread(1, "a", 0, 50_000).thread(2, "b", 0, 50_000);
    tb.section(1, 1000, 20_000, L, 0x10);
    for i in 0..3 {
        tb.ev_full(2, 2000 + i * 100, Op::MutexTrylock, FAIL, L, 0x30, 16, 0);
    }
    // A timed lock that waits 1000 ns then times out (ETIMEDOUT = 110).
    tb.ev(2, 3000, Op::MutexTimedlock, BEGIN, L, 0x40);
    tb.ev_full(2, 4000, Op::MutexTimedlock, CONT_FAIL, L, 0x40, 110, 0);
    // Then a trylock that succeeds after the release: not first attempt.
    tb.ev(2, 21_000, Op::MutexTrylock, DONE, L, 0x30);
    tb.ev(2, 22_000, Op::MutexUnlock, DONE, L, 0x130);
    let r = report(&tb);
    let l = lock(&r, L);
    assert_eq!(l.acquisitions, 2);
    assert_eq!(l.trylock_failures, 3);
    assert_eq!(l.timeouts, 1);
    assert_eq!(l.contended, 0);
    assert_eq!(l.first_attempt_ratio, 0.5);
    assert_eq!(l.wait_ns.total, 1000);
    let s = l.sites.iter().find(|s| s.location == "?+0x30").unwrap();
    assert_eq!((s.acquisitions, s.trylock_failures), (1, 3));
    assert_eq!(thread(&r, 2).lock_ns, 1000);
    assert_sums(&r);
}

#[test]
fn rwlock_readers_share_and_writer_blame_is_split() {
    let mut tb = Tb::new();
    tb.thread(1, "r1", 0, 10_000)
        .thread(2, "r2", 0, 10_000)
        .thread(3, "w", 0, 10_000);
    tb.ev(1, 100, Op::RwRdlock, DONE, L, 0x10);
    tb.ev(2, 200, Op::RwRdlock, DONE, L, 0x20);
    tb.ev(3, 300, Op::RwWrlock, BEGIN, L, 0x30);
    tb.ev(1, 1300, Op::RwUnlock, DONE, L, 0x11);
    tb.ev(2, 2300, Op::RwUnlock, DONE, L, 0x21);
    tb.ev(3, 2300, Op::RwWrlock, CONT, L, 0x30);
    tb.ev(3, 3300, Op::RwUnlock, DONE, L, 0x31);
    let r = report(&tb);
    assert_eq!(r.anomalies.overlapping_holds, 0);
    let l = lock(&r, L);
    assert_eq!(l.kind, "rwlock");
    assert_eq!((l.acquisitions, l.contended), (3, 1));
    assert_eq!(l.wait_ns.total, 2000);
    // 300..1300 shared by two readers: 500 each; 1300..2300 reader 2 alone.
    let mut b: Vec<_> = r.blame.iter().map(|b| (b.holder_tid, b.wait_ns)).collect();
    b.sort();
    assert_eq!(b, vec![(Some(101), 500), (Some(102), 1500)]);
    assert_sums(&r);
}

#[test]
fn cond_wait_releases_and_reacquires_the_mutex() {
    let mut tb = Tb::new();
    tb.thread(1, "consumer", 0, 20_000)
        .thread(2, "producer", 0, 20_000);
    const C: u64 = 0x7000;
    tb.ev(1, 1000, Op::MutexLock, DONE, M, 0x10);
    tb.ev_full(1, 2000, Op::CondWait, BEGIN, C, 0x11, M, 0);
    // The producer gets the mutex uncontended because it was released.
    tb.section(2, 3000, 4000, M, 0x20);
    tb.ev(2, 3500, Op::CondSignal, DONE, C, 0x21);
    tb.ev(1, 5000, Op::CondWait, DONE, C, 0x11);
    tb.ev(1, 6000, Op::MutexUnlock, DONE, M, 0x12);
    let mut tb2 = tb;
    // Events of thread 2 must be time-sorted.
    tb2.events.get_mut(&2).unwrap().sort_by_key(|e| e.time);
    let r = report(&tb2);
    assert_eq!(r.anomalies.overlapping_holds, 0);
    assert_eq!(r.anomalies.unmatched_releases, 0);
    let m = lock(&r, M);
    assert_eq!(
        m.acquisitions, 2,
        "cond re-acquisition is not an acquisition call"
    );
    assert_eq!(m.contended, 0);
    // Holds: 1000..2000, 3000..4000, 5000..6000.
    assert_eq!(m.hold_ns.total, 3000);
    let c = &r.conds[0];
    assert_eq!((c.waits, c.signals, c.wait_ns.total), (1, 1, 3000));
    let t1 = thread(&r, 1);
    assert_eq!(t1.cond_wait_ns, 3000);
    assert_eq!(t1.hold_ns, 2000);
    assert_eq!(t1.free_ns, 20_000 - 2000);
    assert_sums(&r);
}

#[test]
fn futex_wait_is_blamed_on_the_waker() {
    let mut tb = Tb::new();
    tb.thread(1, "w", 0, 5000).thread(2, "k", 0, 5000);
    const F: u64 = 0x8000;
    tb.ev(1, 100, Op::FutexWait, BEGIN, F, 0x10);
    // arg: threads woken.
    tb.ev_full(2, 500, Op::FutexWake, DONE, F, 0x20, 1, 0);
    tb.ev(1, 600, Op::FutexWait, DONE, F, 0x10);
    let r = report(&tb);
    let l = lock(&r, F);
    assert_eq!(l.kind, "futex");
    assert_eq!((l.acquisitions, l.contended, l.wait_ns.total), (1, 1, 500));
    assert_eq!(r.blame.len(), 1);
    assert_eq!(
        (r.blame[0].holder_tid, r.blame[0].wait_ns),
        (Some(102), 500)
    );
    assert_eq!(r.blame[0].holder_site, "?+0x20");
    assert_eq!(thread(&r, 1).lock_ns, 500);
    assert_sums(&r);
}

// A wake that found no sleeper (thread 3's, between the wake that woke
// thread 1 and thread 1's return) did not end the sleep: the blame stays
// with the wake that did.
#[test]
fn a_futex_wake_that_woke_nobody_takes_no_blame() {
    let mut tb = Tb::new();
    tb.thread(1, "w", 0, 5000)
        .thread(2, "k", 0, 5000)
        .thread(3, "n", 0, 5000);
    const F: u64 = 0x8000;
    tb.ev(1, 100, Op::FutexWait, BEGIN, F, 0x10);
    tb.ev_full(2, 500, Op::FutexWake, DONE, F, 0x20, 1, 0);
    tb.ev_full(3, 550, Op::FutexWake, DONE, F, 0x30, 0, 0);
    tb.ev(1, 600, Op::FutexWait, DONE, F, 0x10);
    let r = report(&tb);
    assert_eq!(r.blame.len(), 1, "{:?}", r.blame);
    assert_eq!(r.blame[0].holder_tid, Some(102));
    assert_eq!(r.blame[0].holder_site, "?+0x20");
    assert_eq!(lock(&r, F).wakes, 2);
}

#[test]
fn nesting_counts_hold_once_and_unlock_end_is_unlock_time() {
    let mut tb = Tb::new();
    tb.thread(1, "n", 0, 10_000);
    tb.ev(1, 1000, Op::MutexLock, DONE, L, 0x10);
    tb.ev(1, 2000, Op::MutexLock, DONE, M, 0x20);
    tb.ev(1, 3000, Op::MutexUnlock, DONE, M, 0x21);
    tb.ev(1, 3400, Op::MutexUnlock, END, M, 0x21);
    tb.ev(1, 5000, Op::MutexUnlock, DONE, L, 0x11);
    let r = report(&tb);
    let t = thread(&r, 1);
    // Hold: 1000..3000 and 3400..5000 (the unlock of M is Unlock time).
    assert_eq!((t.hold_ns, t.unlock_ns, t.free_ns), (3600, 400, 6000));
    assert_eq!(lock(&r, L).hold_ns.total, 4000);
    assert_eq!(lock(&r, M).hold_ns.total, 1000);
    assert_eq!(lock(&r, M).unlock_ns, 400);
    assert_sums(&r);
}

#[test]
fn clock_step_back_goes_to_unknown_and_is_counted() {
    let mut tb = Tb::new();
    tb.thread(1, "c", 0, 10_000);
    tb.ev(1, 3000, Op::MutexLock, DONE, L, 0x10);
    tb.ev(1, 2500, Op::MutexUnlock, DONE, L, 0x11); // before the lock
    tb.ev(1, 4000, Op::MutexLock, DONE, L, 0x10);
    tb.ev(1, 5000, Op::MutexUnlock, DONE, L, 0x11);
    let r = report(&tb);
    assert_eq!(r.anomalies.clock_backwards, 1);
    let t = thread(&r, 1);
    // 3000..4000 follows the step back: Unknown. 4000..5000 Hold.
    assert_eq!(t.unknown_ns, 1000);
    assert_eq!(t.hold_ns, 1000);
    assert_eq!(t.lifetime_ns, 10_000);
    assert_sums(&r);
}

#[test]
fn overhead_is_subtracted_from_waits_and_lifetimes() {
    let mut tb = contention();
    tb.overhead(10.0, 20.0, 5.0);
    let r = report(&tb);
    // O = (10 + 20) / 2 = 15; the waiter had 1 thread ahead: (1 + 2) * 15.
    let l = lock(&r, L);
    assert_eq!(l.wait_ns.total, 9500 - 45);
    // Thread 1: lock DONE -10, unlock DONE -20.
    let t1 = thread(&r, 1);
    assert_eq!(t1.overhead_ns, 30);
    assert_eq!(t1.lifetime_ns, 100_000 - 30);
    // Thread 2: BEGIN is an event (-5), wait -45, unlock -20.
    let t2 = thread(&r, 2);
    assert_eq!(t2.overhead_ns, 70);
    assert_eq!(t2.lock_ns, 9500 - 45);
    assert!(r.overhead.subtracted);
    assert_eq!(r.overhead.total_ns, 100);
    // Blame is scaled to the corrected wait.
    assert_eq!(r.blame.iter().map(|b| b.wait_ns).sum::<u64>(), 9500 - 45);
    assert_sums(&r);
    let text = lockscope_report::render::text(&r, &Default::default());
    assert!(
        text.contains("recorder overhead subtracted: 10.0 ns per acquisition"),
        "{text}"
    );
}

#[test]
fn barrier_waits_are_blamed_on_the_last_arriver() {
    let mut tb = Tb::new();
    tb.thread(1, "early", 0, 10_000)
        .thread(2, "late", 0, 10_000);
    const B: u64 = 0x9000;
    tb.ev(1, 1000, Op::BarrierWait, BEGIN, B, 0x10);
    tb.ev(2, 4000, Op::BarrierWait, DONE, B, 0x20);
    tb.ev(1, 4100, Op::BarrierWait, DONE, B, 0x10);
    let r = report(&tb);
    let b = &r.barriers[0];
    assert_eq!((b.rounds, b.waits, b.wait_ns.total), (1, 2, 3100));
    assert_eq!(b.blamed_on.len(), 1);
    assert_eq!((b.blamed_on[0].tid, b.blamed_on[0].wait_ns), (102, 3100));
    assert_eq!(thread(&r, 1).barrier_wait_ns, 3100);
    assert_sums(&r);
}

#[test]
fn semaphores_are_counted() {
    let mut tb = Tb::new();
    tb.thread(1, "a", 0, 10_000).thread(2, "b", 0, 10_000);
    const S: u64 = 0xa000;
    tb.ev_full(1, 500, Op::SemTrywait, FAIL, S, 0x10, 11, 0);
    tb.ev(1, 1000, Op::SemWait, BEGIN, S, 0x11);
    tb.ev(2, 2000, Op::SemPost, DONE, S, 0x20);
    tb.ev(1, 2100, Op::SemWait, DONE, S, 0x11);
    let r = report(&tb);
    let s = &r.semaphores[0];
    assert_eq!(
        (s.waits, s.contended, s.trywait_failures, s.posts),
        (1, 1, 1, 1)
    );
    assert_eq!(s.wait_ns.total, 1100);
    assert_eq!(thread(&r, 1).sem_wait_ns, 1100);
    assert_sums(&r);
}

#[test]
fn lost_events_make_unknown_time() {
    let mut tb = Tb::new();
    tb.thread(1, "l", 0, 10_000);
    tb.ev(1, 1000, Op::MutexLock, DONE, L, 0x10);
    tb.ev_full(1, 3000, Op::Lost, DONE, 0, 0, 42, 0);
    tb.ev(1, 4000, Op::MutexUnlock, DONE, L, 0x11);
    let r = report(&tb);
    assert_eq!(r.lost_events, 42);
    // Where the drops were relative to the annotation is not known: both
    // the interval before it (1000..3000) and after it (3000..4000).
    let t = thread(&r, 1);
    assert_eq!(t.unknown_ns, 3000);
    assert_eq!(t.hold_ns, 0);
    assert_eq!(t.free_ns, 7000);
    assert_sums(&r);
}

#[test]
fn merge_is_exact_whatever_the_chunk_order() {
    // Many threads, many small chunks written in reverse thread order:
    // owner changes need the global order to come out right.
    for reverse in [false, true] {
        let mut tb = Tb::new();
        tb.reverse = reverse;
        tb.chunk = 2;
        for t in 1..=4u32 {
            tb.thread(t, "w", 0, 1_000_000);
        }
        // Round robin: thread (i % 4) + 1 takes L at 1000 * i.
        for i in 0..200u64 {
            let t = (i % 4) as u32 + 1;
            tb.section(t, 1000 * i + 1, 1000 * i + 500, L, 0x10 * u64::from(t));
        }
        let r = report(&tb);
        let l = lock(&r, L);
        assert_eq!(l.acquisitions, 200);
        assert_eq!(l.owner_changes, 199);
        assert_eq!(r.anomalies.overlapping_holds, 0);
        assert_eq!(l.hold_ns.total, 200 * 499);
        assert_eq!(l.sites.len(), 4);
        assert_sums(&r);
    }
}

#[test]
fn truncated_trace_still_reports_what_it_holds() {
    let mut tb = contention();
    tb.truncate_by = 7;
    let r = report(&tb);
    assert!(r.truncated.is_some());
    assert_eq!(lock(&r, L).acquisitions, 2);
}

#[test]
fn corrupt_trace_is_an_error_naming_the_offset() {
    let tb = contention();
    let p = tb.write();
    let mut bytes = std::fs::read(&p).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    std::fs::write(&p, &bytes).unwrap();
    let err = lockscope_report::analyze(&p, &cfg(), &mut |_, _, _| {}).unwrap_err();
    assert!(err.to_string().contains("byte offset"), "{err}");
}

#[test]
fn filters_sort_and_top() {
    let mut tb = contention();
    tb.section(1, 50_000, 50_100, M, 0x50);
    let r = report(&tb);
    assert_eq!(r.locks.len(), 2);
    assert_eq!(r.locks[0].address, format!("{L:#x}"), "sorted by wait");
    let mut c = cfg();
    c.sort = lockscope_report::SortKey::Name;
    c.top = Some(1);
    let r = report_with(&tb, &c);
    assert_eq!(r.locks.len(), 1);
    let mut c = cfg();
    c.min_wait_ns = 1;
    let r = report_with(&tb, &c);
    assert_eq!(r.locks.len(), 1);
    let mut c = cfg();
    c.lock_filter = Some("0x6000".into());
    let r = report_with(&tb, &c);
    assert_eq!(r.locks.len(), 1);
    assert!(r.blame.is_empty());
    let mut c = cfg();
    c.thread_filter = Some("waiter".into());
    let r = report_with(&tb, &c);
    assert_eq!(r.threads.len(), 1);
    assert_eq!(r.locks.len(), 1);
    assert_eq!(r.locks[0].threads.len(), 1);
}

#[test]
fn json_has_the_documented_keys() {
    let r = report(&contention());
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["schema"], "lockscope.report/1");
    for k in ["duration_ns", "lost_events", "locks", "threads", "blame"] {
        assert!(v.get(k).is_some(), "{k}");
    }
    let l = &v["locks"][0];
    for k in [
        "address",
        "kind",
        "name",
        "acquisitions",
        "contended",
        "trylock_failures",
        "owner_changes",
        "wait_ns",
        "hold_ns",
        "sites",
    ] {
        assert!(l.get(k).is_some(), "{k}");
    }
    for k in ["total", "mean", "max", "p99"] {
        assert!(l["wait_ns"].get(k).is_some(), "{k}");
    }
    for k in [
        "function",
        "file",
        "line",
        "acquisitions",
        "contended",
        "wait_ns",
    ] {
        assert!(l["sites"][0].get(k).is_some(), "{k}");
    }
    for k in [
        "tid",
        "name",
        "lifetime_ns",
        "free_ns",
        "lock_ns",
        "unlock_ns",
        "hold_ns",
        "unknown_ns",
    ] {
        assert!(v["threads"][0].get(k).is_some(), "{k}");
    }
}

#[test]
fn merge_with_many_threads_uses_the_heap_and_stays_exact() {
    let mut tb = Tb::new();
    tb.chunk = 3;
    let n = 20u32;
    for t in 1..=n {
        tb.thread(t, "w", 0, 10_000_000);
    }
    for i in 0..400u64 {
        let t = (i % u64::from(n)) as u32 + 1;
        tb.section(t, 1000 * i + 1, 1000 * i + 700, L, 0x10);
    }
    let r = report(&tb);
    let l = lock(&r, L);
    assert_eq!((l.acquisitions, l.owner_changes), (400, 399));
    assert_eq!(r.anomalies.overlapping_holds, 0);
    assert_eq!(l.hold_ns.total, 400 * 699);
}

#[test]
fn futex_eagain_is_a_failed_wait_not_an_acquisition() {
    let mut tb = Tb::new();
    tb.thread(1, "w", 0, 5000);
    const F: u64 = 0x8000;
    for i in 0..5u64 {
        tb.ev(1, 100 + i * 100, Op::FutexWait, BEGIN, F, 0x10);
        tb.ev_full(1, 120 + i * 100, Op::FutexWait, FAIL, F, 0x10, 11, 0);
    }
    tb.ev_full(1, 900, Op::FutexWake, DONE, F, 0x20, 0, 0);
    let r = report(&tb);
    let l = lock(&r, F);
    assert_eq!((l.acquisitions, l.trylock_failures, l.wakes), (0, 5, 1));
    assert_eq!(l.wait_ns.total, 100);
}

#[test]
fn a_hold_whose_release_was_lost_is_dropped_not_stretched() {
    // Thread 1 acquires L, then its release is lost; thread 2 then goes
    // through a whole critical section of L: thread 1 cannot still hold it.
    let mut tb = Tb::new();
    tb.thread(1, "a", 0, 100_000).thread(2, "b", 0, 100_000);
    tb.ev(1, 1000, Op::MutexLock, DONE, L, 0x10);
    tb.section(2, 5000, 6000, L, 0x20);
    tb.ev(1, 90_000, Op::MutexLock, DONE, M, 0x30);
    tb.ev(1, 91_000, Op::MutexUnlock, DONE, M, 0x31);
    let r = report(&tb);
    assert_eq!(r.anomalies.lost_releases, 1);
    let l = lock(&r, L);
    assert_eq!(l.hold_ns.total, 1000, "only thread 2's known section");
    assert_eq!(l.owner_changes, 1);
    let t1 = thread(&r, 1);
    // 1000..90000 is unknown (the lost release is somewhere in it).
    assert_eq!(t1.unknown_ns, 89_000);
    assert_eq!(t1.hold_ns, 1000);
    assert_sums(&r);
}

#[test]
fn empty_and_orphan_traces_do_not_panic() {
    // No threads, no events.
    let r = report(&Tb::new());
    assert!(r.locks.is_empty() && r.threads.is_empty());
    // Events of a thread that has no thread record.
    let mut tb = Tb::new();
    tb.section(7, 100, 200, L, 0x10);
    let r = report(&tb);
    assert_eq!(r.anomalies.orphan_events, 1);
    assert_eq!(lock(&r, L).acquisitions, 1);
    assert_sums(&r);
    // Unknown op codes are counted and skipped.
    let mut tb = Tb::new();
    tb.thread(1, "x", 0, 1000);
    tb.events
        .entry(1)
        .or_default()
        .push(lockscope_format::Event {
            time: 10,
            op: 250,
            ..Default::default()
        });
    let r = report(&tb);
    assert_eq!(r.anomalies.unknown_ops, 1);
    assert_sums(&r);
}
