//! Recommendations on synthetic traces whose behaviour is known by
//! construction (every figure in the comments is computed from the events).

mod common;
use common::*;
use lockscope_format::Op;
use lockscope_report::advice::{AdviceKind, Recommendation};
use lockscope_report::report::Report;

const HOT: u64 = 0x5000;
const PRIV: u64 = 0x9000;

fn of(r: &Report, addr: u64) -> Vec<&Recommendation> {
    let a = format!("{addr:#x}");
    r.recommendations
        .iter()
        .filter(|x| x.address == a)
        .collect()
}

fn kinds(r: &Report, addr: u64) -> Vec<AdviceKind> {
    of(r, addr).iter().map(|x| x.kind).collect()
}

/// Two threads, 100 rounds of 1000 ns: thread 1 holds HOT for 100 ns;
/// thread 2 asks 20 ns in, gets it 20 ns after the release (hand-off) and
/// holds it 100 ns. 50 % contended, mean hold 100 ns, 0.4 mean waiters.
/// Each thread also takes its own private lock, never contended.
fn hot_short(cpus: u32, extra: &[(&str, &str)]) -> Tb {
    hot_short_until(cpus, extra, 100_000)
}

fn hot_short_until(cpus: u32, extra: &[(&str, &str)], end: u64) -> Tb {
    let mut tb = Tb::new();
    tb.header.cpus = cpus;
    for (k, v) in extra {
        tb.header.extra.push((k.to_string(), v.to_string()));
    }
    tb.thread(1, "a", 0, end).thread(2, "b", 0, end);
    for k in 0..100u64 {
        let b = k * 1000;
        tb.section(1, b, b + 100, HOT, 0x10);
        tb.waited_section(2, b + 20, b + 120, b + 220, HOT, 0x20);
        tb.section(1, b + 500, b + 600, PRIV, 0x30);
        tb.section(2, b + 500, b + 600, PRIV + 0x40, 0x40);
    }
    tb
}

#[test]
fn hot_lock_with_short_holds_gets_a_queue_lock() {
    let r = report(&hot_short(8, &[]));
    let l = lock(&r, HOT);
    assert_eq!((l.acquisitions, l.contended), (200, 100));
    assert_eq!(l.hold_ns.mean, 100.0);
    assert!((l.avg_waiters - 0.4).abs() < 1e-9, "{}", l.avg_waiters);
    let a = of(&r, HOT);
    assert_eq!(a.len(), 1, "{a:?}");
    let a = a[0];
    assert_eq!(a.kind, AdviceKind::QueueLock);
    assert_eq!(
        a.command.as_deref(),
        Some("lockscope run --lock mcs -- ./synthetic")
    );
    assert_eq!(a.evidence.get("contended"), Some(100.0));
    assert_eq!(a.evidence.get("contended_ratio"), Some(0.5));
    assert_eq!(a.evidence.get("mean_hold_ns"), Some(100.0));
    assert_eq!(a.evidence.get("mean_contended_wait_ns"), Some(100.0));
    assert_eq!(a.evidence.get("cpus"), Some(8.0));
    assert_eq!(a.wait_addressed_ns, 10_000);
    assert!(
        a.evidence_text
            .contains("contended 50.0% of 200 acquisitions"),
        "{}",
        a.evidence_text
    );
    // No NUMA facts in the header: HMCS is not considered, and it says so.
    assert!(
        a.advice.contains("NUMA topology not recorded"),
        "{}",
        a.advice
    );
    // 80 % of the wait is charged to thread 1's section, but it is 100 ns
    // long: a hand-off problem, not a long section, so no reduce_hold.
    assert!(!kinds(&r, HOT).contains(&AdviceKind::ReduceHold));
}

#[test]
fn private_uncontended_locks_get_no_advice() {
    let r = report(&hot_short(8, &[]));
    assert_eq!(lock(&r, PRIV).contended, 0);
    assert!(of(&r, PRIV).is_empty());
    assert!(of(&r, PRIV + 0x40).is_empty());
    // A trace with only private locks: nothing at all.
    let mut tb = Tb::new();
    tb.thread(1, "a", 0, 100_000).thread(2, "b", 0, 100_000);
    for k in 0..100u64 {
        tb.section(1, k * 1000, k * 1000 + 500, PRIV, 0x30);
        tb.section(2, k * 1000, k * 1000 + 500, PRIV + 0x40, 0x40);
    }
    assert!(report(&tb).recommendations.is_empty());
}

#[test]
fn a_lock_whose_waiting_is_negligible_is_not_advised_on() {
    // hot_short's pattern (which gets a queue lock above), but in threads
    // that live 10 ms: 10 us of waiting in 20 ms of thread time is 0.05 %,
    // under the 1 % floor.
    let r = report(&hot_short_until(8, &[], 10_000_000));
    let l = lock(&r, HOT);
    assert_eq!((l.contended, l.wait_ns.total), (100, 10_000));
    assert!(r.recommendations.is_empty(), "{:?}", r.recommendations);
    // At 500 us of lifetime, 1 % of the thread time: advised again.
    let r = report(&hot_short_until(8, &[], 500_000));
    assert_eq!(kinds(&r, HOT), vec![AdviceKind::QueueLock]);
}

/// Four threads, 100 rounds of 1000 ns on a 2-CPU machine: thread 1 holds
/// HOT for 100 ns, threads 2-4 ask 10 ns in and get it one after the other
/// for 100 ns each. Waiters while held: 3 x 90 + 2 x 100 + 1 x 100 = 570
/// over 400 ns held = 1.425, plus the holder 2.425 > 2 CPUs.
fn convoy(cpus: u32) -> Tb {
    let mut tb = Tb::new();
    tb.header.cpus = cpus;
    for t in 1..=4 {
        tb.thread(t, "w", 0, 100_000);
    }
    for k in 0..100u64 {
        let b = k * 1000;
        tb.section(1, b, b + 100, HOT, 0x10);
        for t in 2..=4u32 {
            let got = b + 100 * u64::from(t - 1);
            tb.waited_section(t, b + 10, got, got + 100, HOT, 0x10 * u64::from(t));
        }
    }
    tb
}

#[test]
fn more_waiters_than_cpus_gets_spin_then_park() {
    let r = report(&convoy(2));
    let l = lock(&r, HOT);
    assert!((l.avg_waiters - 1.425).abs() < 1e-9, "{}", l.avg_waiters);
    let a = of(&r, HOT);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].kind, AdviceKind::SpinThenPark);
    assert_eq!(
        a[0].command.as_deref(),
        Some("lockscope run --lock ttas --wait spin-then-park -- ./synthetic")
    );
    assert!(a[0].evidence_text.contains("exceed the 2 CPUs"));
    // The same trace recorded on 4 CPUs: no oversubscription, and the
    // waits are what the queue explains, so a queue lock.
    let r = report(&convoy(4));
    assert_eq!(kinds(&r, HOT), vec![AdviceKind::QueueLock]);
}

#[test]
fn preempted_holders_get_spin_then_park() {
    // 100 ns sections, but each of the 50 waits lasts 20 us: the holder's
    // release is followed by 19.9 us of nobody holding (the waiter was
    // asleep / not scheduled). (0.5 waiters + 1) x 100 ns explains 150 ns.
    let mut tb = Tb::new();
    tb.header.cpus = 8;
    tb.thread(1, "a", 0, 2_000_000).thread(2, "b", 0, 2_000_000);
    for k in 0..50u64 {
        let b = k * 40_000;
        tb.section(1, b, b + 100, HOT, 0x10);
        tb.waited_section(2, b + 50, b + 20_050, b + 20_150, HOT, 0x20);
    }
    let r = report(&tb);
    let a = of(&r, HOT);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].kind, AdviceKind::SpinThenPark);
    assert!(a[0].evidence.get("wait_over_queue").unwrap() > 10.0);
    assert!(a[0].evidence.get("no_holder_share").unwrap() > 0.99);
}

#[test]
fn single_socket_never_gets_hmcs_and_multi_socket_does() {
    let r = report(&hot_short(8, &[("numa_nodes", "1")]));
    let a = of(&r, HOT);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].kind, AdviceKind::QueueLock);
    assert!(a[0].advice.contains("not applicable"), "{}", a[0].advice);
    assert!(r.recommendations.iter().all(|x| x.kind != AdviceKind::Hmcs));
    // The same behaviour on a 2-node machine: every acquisition changes
    // owner, so the hand-offs are the ones HMCS keeps within a node.
    let r = report(&hot_short(8, &[("sockets", "2")]));
    let a = of(&r, HOT);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].kind, AdviceKind::Hmcs);
    assert_eq!(
        a[0].command.as_deref(),
        Some("lockscope run --lock hmcs -- ./synthetic")
    );
    assert_eq!(a[0].evidence.get("numa_nodes"), Some(2.0));
}

#[test]
fn a_dominant_long_section_gets_reduce_hold() {
    // Thread 1 holds HOT for 1 ms at site 0x10; thread 2 waits 900 us of
    // it, then holds 1 us at 0x20. One wait: no algorithm advice.
    let mut tb = Tb::new();
    tb.thread(1, "a", 0, 2_000_000).thread(2, "b", 0, 2_000_000);
    tb.section(1, 1000, 1_001_000, HOT, 0x10);
    tb.waited_section(2, 101_000, 1_001_000, 1_002_000, HOT, 0x20);
    let r = report(&tb);
    let a = of(&r, HOT);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].kind, AdviceKind::ReduceHold);
    assert_eq!(a[0].command, None);
    assert_eq!(a[0].evidence.get("site_wait_ns"), Some(900_000.0));
    assert_eq!(a[0].evidence.get("site_share"), Some(1.0));
    assert_eq!(a[0].evidence.get("site_mean_hold_ns"), Some(1_000_000.0));
    assert!(a[0].evidence_text.contains("?+0x10"));
}

#[test]
fn read_mostly_rwlock_is_kept_and_write_only_gets_a_mutex() {
    // 20 rounds: reader 1 holds for 1 us, the writer (thread 3) waits for
    // it and writes for 100 ns; 19 more readers per round in the other
    // thread. Reads: 20 x 20 = 400 of 420 acquisitions.
    let mut tb = Tb::new();
    tb.thread(1, "r", 0, 400_000)
        .thread(2, "r2", 0, 400_000)
        .thread(3, "w", 0, 400_000);
    for k in 0..20u64 {
        let b = k * 20_000;
        tb.ev(1, b, Op::RwRdlock, DONE, HOT, 0x10);
        tb.ev(1, b + 1000, Op::RwUnlock, DONE, HOT, 0x11);
        tb.ev(3, b + 100, Op::RwWrlock, BEGIN, HOT, 0x30);
        tb.ev(3, b + 1000, Op::RwWrlock, CONT, HOT, 0x30);
        tb.ev(3, b + 1100, Op::RwUnlock, DONE, HOT, 0x31);
        for i in 0..19u64 {
            let t = b + 2000 + i * 500;
            tb.ev(2, t, Op::RwRdlock, DONE, HOT, 0x20);
            tb.ev(2, t + 100, Op::RwUnlock, DONE, HOT, 0x21);
        }
    }
    let r = report(&tb);
    let l = lock(&r, HOT);
    assert_eq!((l.acquisitions, l.read_acquisitions), (420, Some(400)));
    let a = of(&r, HOT);
    assert!(
        a.iter().any(|x| x.kind == AdviceKind::ReaderWriter),
        "{a:?}"
    );
    assert!(a.iter().all(|x| x.command.is_none()));
    assert!(a.iter().all(|x| x.kind != AdviceKind::QueueLock));

    // Writers only: a mutex would do.
    let mut tb = Tb::new();
    tb.thread(1, "w1", 0, 100_000).thread(2, "w2", 0, 100_000);
    for k in 0..50u64 {
        let b = k * 2000;
        tb.ev(1, b, Op::RwWrlock, DONE, HOT, 0x10);
        tb.ev(1, b + 100, Op::RwUnlock, DONE, HOT, 0x11);
        tb.ev(2, b + 50, Op::RwWrlock, BEGIN, HOT, 0x20);
        tb.ev(2, b + 100, Op::RwWrlock, CONT, HOT, 0x20);
        tb.ev(2, b + 200, Op::RwUnlock, DONE, HOT, 0x21);
    }
    let r = report(&tb);
    assert_eq!(lock(&r, HOT).read_acquisitions, Some(0));
    assert_eq!(kinds(&r, HOT), vec![AdviceKind::UseMutex]);
}

#[test]
fn sorted_by_addressable_wait_and_rendered() {
    // HOT as in hot_short (10 us of wait, 3.6 % of the 280 us of thread
    // time) plus a second lock with a 29 us wait behind a 30 us section.
    let mut tb = hot_short_until(8, &[], 140_000);
    const M: u64 = 0x7000;
    tb.section(1, 100_000, 130_000, M, 0x50);
    tb.waited_section(2, 101_000, 130_000, 130_100, M, 0x60);
    let r = report(&tb);
    let order: Vec<_> = r
        .recommendations
        .iter()
        .map(|x| (x.address.clone(), x.kind))
        .collect();
    assert_eq!(
        order,
        vec![
            ("0x7000".to_string(), AdviceKind::ReduceHold),
            ("0x5000".to_string(), AdviceKind::QueueLock)
        ]
    );
    let text = lockscope_report::render::text(&r, &Default::default());
    let sec = text.split("\nRECOMMENDATIONS").nth(1).expect("section");
    assert!(sec.contains("1. reduce the hold time: 0x7000\n"), "{sec}");
    assert!(sec.contains("2. use a queue lock: 0x5000\n"), "{sec}");
    assert!(sec.contains("try: lockscope run --lock mcs -- ./synthetic"));
    let v = serde_json::to_value(&r).unwrap();
    let j = &v["recommendations"][1];
    assert_eq!(j["kind"], "queue_lock");
    assert_eq!(j["title"], "use a queue lock");
    assert_eq!(j["lock"], "0x5000");
    assert_eq!(j["evidence"]["contended"], 100);
    assert_eq!(j["evidence"]["contended_ratio"], 0.5);
    assert_eq!(j["command"], "lockscope run --lock mcs -- ./synthetic");
    assert!(v["recommendations"][0]["command"].is_null());
    // Not asked for: no section.
    let o = lockscope_report::render::TextOptions {
        advice: false,
        ..Default::default()
    };
    assert!(!lockscope_report::render::text(&r, &o).contains("RECOMMENDATIONS"));
}

const BAR: u64 = 0x7000;

/// `threads` threads cross BAR `rounds` times, one round every `period`
/// ns on a machine of `cpus` CPUs; thread t (from 1) arrives
/// `arrive(k, t)` ns into round k (a BarrierWait BEGIN) and every thread
/// departs (DONE) 1 ns after the last arrival, as recorded: a departure
/// never has the last arrival's own timestamp. The last to arrive is the
/// serial thread.
fn barrier_trace(
    cpus: u32,
    threads: u32,
    rounds: u64,
    period: u64,
    arrive: impl Fn(u64, u32) -> u64,
) -> Tb {
    let mut tb = Tb::new();
    tb.header.cpus = cpus;
    for t in 1..=threads {
        tb.thread(t, "w", 0, rounds * period);
    }
    for k in 0..rounds {
        let b = k * period;
        let last = (1..=threads).max_by_key(|&t| (arrive(k, t), t)).unwrap();
        let go = b + arrive(k, last) + 1;
        for t in 1..=threads {
            tb.ev(t, b + arrive(k, t), Op::BarrierWait, BEGIN, BAR, 0x50);
            tb.ev_full(
                t,
                go,
                Op::BarrierWait,
                DONE,
                BAR,
                0x50,
                u64::from(t == last),
                0,
            );
        }
    }
    tb
}

/// Three threads cross a barrier 10 times, one round per 10 µs. `late`:
/// the thread that arrives last each round and how late (ns after the
/// first two, which arrive together at the round's start).
fn barrier_rounds(late: impl Fn(u64) -> (u32, u64)) -> Tb {
    barrier_trace(4, 3, 10, 10_000, |k, t| {
        let (who, lateness) = late(k);
        if t == who {
            lateness
        } else {
            0
        }
    })
}

#[test]
fn a_barrier_waiting_for_one_late_thread_gets_balance_work() {
    // Thread 3 (tid 103) is 5 µs late every round: the two others wait
    // 5,001 ns a round and thread 3 itself 1 ns, 100,030 ns in all, all of
    // it charged to thread 3 (a third of the threads' 300 µs).
    let r = report(&barrier_rounds(|_| (3, 5_000)));
    let a = of(&r, BAR);
    assert_eq!(a.len(), 1, "{:?}", r.recommendations);
    let a = a[0];
    assert_eq!(a.kind, AdviceKind::BalanceWork);
    assert_eq!(a.evidence.get("wait_ns"), Some(100_030.0));
    assert_eq!(a.evidence.get("rounds"), Some(10.0));
    assert_eq!(a.evidence.get("latecomer_tid"), Some(103.0));
    assert_eq!(a.evidence.get("latecomer_share"), Some(1.0));
    assert_eq!(a.wait_addressed_ns, 100_030);
    assert!(a.advice.contains("balance the work"), "{}", a.advice);
    assert!(a.command.is_none());
    // The verdict names the barrier and the thread it waits for.
    assert!(
        r.verdict.text.ends_with(
            "; most barrier waiting at 0x7000, 100% of it for thread 103, the last to arrive"
        ),
        "{}",
        r.verdict.text
    );
}

#[test]
fn a_barrier_whose_latecomer_changes_every_round_gets_no_advice() {
    // The late thread rotates: each is blamed for a third of the waiting,
    // under the rule's half; nor does negligible waiting (1 ns late).
    let r = report(&barrier_rounds(|k| ((k % 3) as u32 + 1, 5_000)));
    assert!(kinds(&r, BAR).is_empty(), "{:?}", r.recommendations);
    let r = report(&barrier_rounds(|_| (3, 1)));
    assert!(kinds(&r, BAR).is_empty(), "{:?}", r.recommendations);
}

/// Ten threads at one barrier, thread t arriving t µs into each of 5
/// rounds, all leaving 1 ns after thread 10.
fn ten_at_a_barrier() -> Tb {
    barrier_trace(16, 10, 5, 20_000, |_, t| u64::from(t) * 1_000)
}

#[test]
fn the_barriers_table_fits_a_narrow_terminal_by_hiding_columns() {
    // At 80 columns the headers alone were wider than the line and the
    // rows came out word-wrapped, their columns collapsed. Now columns
    // are hidden, said so, and the rest stays aligned within the width.
    let r = report(&ten_at_a_barrier());
    let o = lockscope_report::render::TextOptions {
        width: Some(80),
        ..Default::default()
    };
    let text = lockscope_report::render::text(&r, &o);
    let section: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("BARRIERS"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(section.len() >= 3, "{text}");
    for l in &section {
        assert!(l.chars().count() <= 80, "{l}");
    }
    let head = section[0];
    assert!(head.starts_with("  barrier  "), "{head}");
    assert!(head.contains("  rounds  "), "{head}");
    assert!(section[1].contains("0x7000"), "{text}");
    // The note may wrap; its start names the hidden columns.
    assert!(
        section
            .iter()
            .any(|l| l.contains("(hidden to fit the terminal: waits, max, per thread")),
        "{text}"
    );
}

#[test]
fn the_barriers_table_lists_the_threads_that_waited_most_and_counts_the_rest() {
    // The cell lists six threads, those that waited most (1, 2, ...),
    // and "+4 more"; the JSON keeps all ten.
    let tb = ten_at_a_barrier();
    let r = report(&tb);
    assert_eq!(r.barriers[0].threads.len(), 10);
    let text = lockscope_report::render::text(&r, &Default::default());
    let row = text
        .lines()
        .find(|l| l.contains(", +4 more"))
        .unwrap_or_else(|| panic!("{text}"));
    // The six that waited most, most first: threads 1-6 (tids 101-106),
    // 9 µs down to 4 µs a round (+1 ns); then the last arriver's cell:
    // thread 10, blamed for all of it.
    assert!(
        row.contains(
            "101: 45.005 us, 102: 40.005 us, 103: 35.005 us, 104: 30.005 us, \
             105: 25.005 us, 106: 20.005 us, +4 more  110: 225.050 us"
        ),
        "{row}"
    );
}

const COND: u64 = 0x6000;
const CMX: u64 = 0x6100;

/// Two threads, 20 rounds of 1000 ns, pass a flag guarded by CMX through
/// COND. Thread 1's wait returns at 0 (it has the flag), it signals
/// thread 2 at 390; thread 2's wait returns at 400 and it signals thread
/// 1 at 990, which returns at 1000. Holdings: thread 1 [0, 390], thread 2
/// [400, 990] (a wait's return to the same thread's signal, the mutex
/// released in between). `keeps_working`: thread 1 goes on after its
/// signal, takes the mutex at 395 and signals again at 800 before it
/// waits (a worker that handed work on and keeps working): its second
/// holding [395, 800] overlaps thread 2's.
fn turns(keeps_working: bool) -> Tb {
    let mut tb = Tb::new();
    tb.thread(1, "a", 0, 20_000).thread(2, "b", 0, 20_000);
    let (a, b) = (1u32, 2u32);
    for r in 0..20u64 {
        let t = r * 1000;
        let last = r == 19;
        if r == 0 {
            tb.ev(a, t, Op::MutexLock, DONE, CMX, 0x10);
            tb.ev(b, t + 297, Op::MutexLock, DONE, CMX, 0x20);
            tb.ev_full(b, t + 300, Op::CondWait, BEGIN, COND, 0x21, CMX, 0);
        } else {
            tb.ev_full(a, t, Op::CondWait, DONE, COND, 0x11, CMX, 0);
        }
        tb.ev(a, t + 1, Op::MutexUnlock, DONE, CMX, 0x12);
        tb.ev(a, t + 389, Op::MutexLock, DONE, CMX, 0x13);
        tb.ev(a, t + 390, Op::CondSignal, DONE, COND, 0x14);
        tb.ev(a, t + 391, Op::MutexUnlock, DONE, CMX, 0x15);
        let wait_at = if keeps_working {
            tb.ev(a, t + 395, Op::MutexLock, DONE, CMX, 0x16);
            tb.ev(a, t + 396, Op::MutexUnlock, DONE, CMX, 0x17);
            tb.ev(a, t + 799, Op::MutexLock, DONE, CMX, 0x18);
            tb.ev(a, t + 800, Op::CondSignal, DONE, COND, 0x19);
            tb.ev(a, t + 801, Op::MutexUnlock, DONE, CMX, 0x1a);
            t + 803
        } else {
            t + 392
        };
        if !last {
            tb.ev(a, wait_at, Op::MutexLock, DONE, CMX, 0x1b);
            tb.ev_full(a, wait_at + 2, Op::CondWait, BEGIN, COND, 0x11, CMX, 0);
        }
        tb.ev_full(b, t + 400, Op::CondWait, DONE, COND, 0x21, CMX, 0);
        tb.ev(b, t + 401, Op::MutexUnlock, DONE, CMX, 0x22);
        tb.ev(b, t + 989, Op::MutexLock, DONE, CMX, 0x23);
        tb.ev(b, t + 990, Op::CondSignal, DONE, COND, 0x24);
        tb.ev(b, t + 991, Op::MutexUnlock, DONE, CMX, 0x25);
        if !last {
            tb.ev(b, t + 993, Op::MutexLock, DONE, CMX, 0x26);
            tb.ev_full(b, t + 995, Op::CondWait, BEGIN, COND, 0x21, CMX, 0);
        }
    }
    tb
}

#[test]
fn a_condition_variable_whose_waiters_take_turns_is_a_lock() {
    let r = report(&turns(false));
    assert_eq!(r.cond_locks.len(), 1, "{:?}", r.conds);
    let c = &r.cond_locks[0];
    assert_eq!(c.address, "0x6000");
    // 19 waits of thread 1 (from the second turn on) and 20 of thread 2,
    // every one ended by the other's signal.
    assert_eq!((c.waits, c.handoffs), (39, 39));
    // Thread 1's holdings [t, t+390] from the second turn on (in the first
    // it took the mutex with no wait or signal before: no holding),
    // thread 2's [t+400, t+990] in all 20: never two at once.
    assert_eq!(c.holdings, 39);
    assert_eq!(c.holders_at_once, 1.0);
    assert!(
        r.verdict
            .text
            .contains("condition variable 0x6000 is used as a lock"),
        "{}",
        r.verdict.text
    );
    let text = lockscope_report::render::text(&r, &Default::default());
    assert!(
        text.contains("39 passed on between its waiters, held by 1.00 threads at a time"),
        "{text}"
    );
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["cond_locks"][0]["handoffs"], 39);
    assert_eq!(v["cond_locks"][0]["holders_at_once"], 1.0);
}

#[test]
fn workers_handing_work_to_each_other_through_a_condition_variable_are_not_a_lock() {
    // The same waits and hand-offs, but thread 1 keeps working after it
    // signalled: thread 1 holds [t, t+390] and [t+395, t+800], thread 2
    // [t+400, t+990]; 1,385 ns held in 990 every round but the first.
    let r = report(&turns(true));
    let c = &r.conds[0];
    assert_eq!(c.waits, 39);
    assert!(r.cond_locks.is_empty(), "{:?}", r.cond_locks);
    assert!(
        !r.verdict.text.contains("used as a lock"),
        "{}",
        r.verdict.text
    );
}

// See issue 28: a lock held across a 20 ms sleep got "spin then park"
// first and "reduce hold" second.
#[test]
fn a_lock_held_across_a_long_sleep_gets_reduce_hold_first() {
    // 25 rounds on a 2-CPU machine: thread 1 holds HOT for 20 ms at
    // 0x10; threads 2 and 3 ask 100 ns in and get it after it, for 1 us
    // each. Waiters plus holder exceed the CPUs (spin-then-park fires),
    // but nearly all of the wait is thread 1's section.
    const MS: u64 = 1_000_000;
    let mut tb = Tb::new();
    tb.header.cpus = 2;
    for t in 1..=3 {
        tb.thread(t, "w", 0, 25 * 21 * MS);
    }
    for k in 0..25u64 {
        let b = k * 21 * MS;
        tb.section(1, b, b + 20 * MS, HOT, 0x10);
        tb.waited_section(2, b + 100, b + 20 * MS, b + 20 * MS + 1000, HOT, 0x20);
        tb.waited_section(
            3,
            b + 100,
            b + 20 * MS + 1000,
            b + 20 * MS + 2000,
            HOT,
            0x30,
        );
    }
    let r = report(&tb);
    let a = of(&r, HOT);
    assert_eq!(
        a.iter().map(|x| x.kind).collect::<Vec<_>>(),
        vec![AdviceKind::ReduceHold, AdviceKind::SpinThenPark],
        "{a:?}"
    );
    // Each round: 19,999,900 + 19,999,900 ns charged to the section at
    // 0x10, and thread 3's last 1,000 ns to thread 2's section.
    let section = 25 * 2 * 19_999_900;
    assert_eq!(a[0].wait_addressed_ns, section);
    assert_eq!(a[1].wait_addressed_ns, 25 * 1000);
    assert_eq!(
        a[1].evidence.get("wait_in_long_section_ns"),
        Some(section as f64)
    );
    assert!(
        a[1].evidence_text
            .contains("which no lock algorithm shortens"),
        "{}",
        a[1].evidence_text
    );
    // The same order in the text report.
    let text = lockscope_report::render::text(&r, &Default::default());
    let sec = text.split("\nRECOMMENDATIONS").nth(1).expect("section");
    assert!(sec.contains("1. reduce the hold time: 0x5000\n"), "{sec}");
    assert!(sec.contains("2. spin, then park: 0x5000\n"), "{sec}");
}
