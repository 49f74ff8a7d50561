//! A synthetic hardware trace with exactly known acquisitions, waits and
//! holds per thread, imported and analysed by `spin`.

use std::fmt::Write;

use lockscope_detailed::spin;
use lockscope_hwtrace::{import, parse, write_trace, ImportOptions};

const LOCK: u64 = 0x7000_0030;
const DATA: u64 = 0x7000_0100;
const HZ: u64 = 200_000_000; // 5 ns per cycle

#[derive(Default, Debug, PartialEq)]
struct Truth {
    acquisitions: u64,
    failed: u64,
    first_try: u64,
    wait_cycles: u64,
    hold_cycles: u64,
}

/// Thread 14 on CPU0 takes the test-and-set lock at once; thread 200 on
/// CPU1 spins on it with atomic swaps every 4 cycles until 14 releases,
/// then takes it. In round PREEMPT, thread 15 runs on CPU0 for 10 cycles
/// while 14 holds the lock.
fn generate(rounds: u64) -> (String, Truth, Truth) {
    const PREEMPT: u64 = 25;
    let mut s = String::from(
        "# synthetic: two threads, one test-and-set lock\n#! clock_hz=200000000\n\
         index\ttime\topoint\torigin\taddress\toperation\tvalue\n",
    );
    let mut n = 0;
    let mut row = |s: &mut String, t: u64, core: &str, addr: u64, op: &str, v: &str| {
        n += 1;
        writeln!(s, "{n}\t{t}\tCPU1\t{core}\t{addr:#x}\t{op}\t{v}").unwrap();
    };
    row(&mut s, 1, "CPU0", 14, "THREAD", "eth service");
    row(&mut s, 1, "CPU1", 200, "THREAD", "udp test");
    let (mut a, mut b) = (Truth::default(), Truth::default());
    let mut time = 100;
    for k in 0..rounds {
        let a_acq = time;
        row(&mut s, a_acq - 1, "CPU0", 0x8000_0A48, "IP", "-");
        row(&mut s, a_acq, "CPU0", LOCK, "A32", "0x1");
        row(&mut s, a_acq + 1, "CPU0", DATA, "W32", &k.to_string());
        let hold_a = 20 + (k % 7) * 3;
        let a_rel = a_acq + hold_a;
        if k == PREEMPT {
            row(&mut s, a_acq + 5, "CPU0", 15, "THREAD", "irq");
            row(&mut s, a_acq + 15, "CPU0", 14, "THREAD", "-");
        }
        let b_first = a_acq + 2;
        let mut t = b_first;
        let mut fails = 0;
        while t < a_rel {
            row(&mut s, t, "CPU1", LOCK, "A32", "1");
            fails += 1;
            t += 4;
        }
        row(&mut s, a_rel, "CPU0", LOCK, "W32", "0");
        let b_acq = t.max(a_rel + 1);
        row(&mut s, b_acq, "CPU1", LOCK, "A32", "1");
        row(&mut s, b_acq + 2, "CPU1", DATA, "R32", &k.to_string());
        let hold_b = 10 + k % 5;
        row(&mut s, b_acq + hold_b, "CPU1", LOCK, "W32", "0");
        a.acquisitions += 1;
        a.first_try += 1;
        a.hold_cycles += hold_a;
        b.acquisitions += 1;
        b.failed += fails;
        b.wait_cycles += b_acq - b_first;
        b.hold_cycles += hold_b;
        time = b_acq + hold_b + 5;
    }
    (s, a, b)
}

#[test]
fn synthetic_hardware_trace_gives_exact_statistics() {
    let (text, ta, tb) = generate(50);
    let p = parse("synthetic.tsv", text.as_bytes()).unwrap();
    let t = import(&[p], &ImportOptions::default()).unwrap();
    // Through the file format and back, as `lockscope import` does.
    let bytes = write_trace(&t, Vec::new()).unwrap();
    let t = lockscope_format::Trace::read(&bytes[..]).unwrap();
    assert_eq!(t.header.tsc_hz, HZ as f64);
    let r = spin::analyze(&t, false);
    assert_eq!(r.spinlocks.len(), 1, "{r:#?}");
    assert!(r.rejected.is_empty(), "{r:#?}");
    let l = &r.spinlocks[0];
    assert_eq!(l.address, "0x70000030");
    assert_eq!(l.kind, "tas");
    let ns = 1_000_000_000 / HZ;
    for (truth, tid, name) in [(&ta, 14, "eth service"), (&tb, 200, "udp test")] {
        let th = l.threads.iter().find(|x| x.tid == tid).expect("thread");
        assert_eq!(th.name, name);
        assert_eq!(th.acquisitions, truth.acquisitions, "{tid}");
        assert_eq!(th.releases, truth.acquisitions, "{tid}");
        assert_eq!(th.failed_attempts, truth.failed, "{tid}");
        assert_eq!(th.failed_rmw, truth.failed, "{tid}");
        assert_eq!(th.wait_ns, truth.wait_cycles * ns, "{tid}");
        assert_eq!(th.hold_ns, truth.hold_cycles * ns, "{tid}");
        assert_eq!(
            th.first_try_ratio,
            truth.first_try as f64 / truth.acquisitions as f64
        );
    }
    assert_eq!(l.acquisitions, 100);
    assert_eq!(l.protects, vec!["0x70000100".to_string()]);
    assert!(l.warnings.iter().any(|w| w.kind == "tas-spinning"));
    let pre = l
        .warnings
        .iter()
        .find(|w| w.kind == "holder-descheduled")
        .expect("preemption warning");
    assert_eq!(pre.evidence.len(), 1, "{pre:?}");
    assert!(
        pre.evidence[0].starts_with("eth service (tid 14) left core 0"),
        "{pre:?}"
    );
}

#[test]
fn each_core_is_a_thread_without_a_schedule() {
    let text = "time,origin,address,operation,value\n\
                10,CPU0,0x10,A8,1\n20,CPU1,0x10,A8,1\n30,CPU0,0x10,W8,0\n\
                31,CPU1,0x10,A8,1\n40,CPU1,0x10,W8,0\n";
    let t = import(
        &[parse("x", text.as_bytes()).unwrap()],
        &ImportOptions::default(),
    )
    .unwrap();
    assert_eq!(t.events.len(), 2);
    let r = spin::analyze(&t, false);
    let l = &r.spinlocks[0];
    assert_eq!(
        (l.acquisitions, l.failed_attempts, l.wait_ns, l.hold_ns),
        (2, 1, 11, 29)
    );
    assert_eq!(l.threads[1].name, "CPU1");
}

#[test]
fn an_access_on_an_unscheduled_core_names_its_line() {
    let text = "time,origin,address,operation,value\n\
                1,CPU0,7,THREAD,-\n5,CPU1,0x10,A8,1\n";
    let e = import(
        &[parse("x.csv", text.as_bytes()).unwrap()],
        &ImportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "x.csv:3:3: core CPU1 runs no thread at cycle 5: a THREAD row must say which thread \
         runs there first"
    );
}

#[test]
fn coalesced_repeats_export_one_row_each_and_spin_agrees() {
    use lockscope_format::{Event, Op, Trace};
    let ev = |time: u64, op: Op, flags: u8, arg: u64, arg2: u64| Event {
        time,
        op: op as u8,
        flags,
        addr: LOCK,
        site: 0x401000,
        arg,
        arg2,
        ..Event::default()
    };
    // Thread 1 holds a test-test-and-set lock from 10 to 100 ns; thread 2
    // reads it busy at 20 ns and 40 more times up to 60 ns (one load and
    // one `AccessRepeat` of 40, as `LOCKSCOPE_COALESCE` records them),
    // then takes it.
    let xchg = |t, old, new| ev(t, Op::AtomicExchange, 2, old, new);
    let store = |t, old, new| ev(t, Op::AtomicStore, 2, old, new);
    let mut t = Trace::default();
    t.events.insert(
        1,
        vec![
            ev(9, Op::AtomicLoad, 2, 0, 0),
            xchg(10, 0, 1),
            store(100, 1, 0),
        ],
    );
    t.events.insert(
        2,
        vec![
            ev(20, Op::AtomicLoad, 2, 1, 1),
            ev(60, Op::AccessRepeat, 4, 40, 3),
            ev(101, Op::AtomicLoad, 2, 0, 0),
            xchg(102, 0, 1),
            store(110, 1, 0),
        ],
    );
    let mut out = Vec::new();
    let sum = lockscope_hwtrace::export(&t, &lockscope_hwtrace::ExportOptions::default(), &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let loads: Vec<&str> = text.lines().filter(|l| l.contains(",R32,0x1")).collect();
    assert_eq!(loads.len(), 41, "{text}");
    assert!(loads[0].starts_with("20,"), "{}", loads[0]);
    assert!(loads[40].starts_with("60,"), "{}", loads[40]);
    assert_eq!(sum.truncated, 0);
    let back = import(
        &[parse("x", text.as_bytes()).unwrap()],
        &ImportOptions::default(),
    )
    .unwrap();
    for tr in [&t, &back] {
        let r = spin::analyze(tr, false);
        let l = &r.spinlocks[0];
        assert_eq!(l.kind, "ttas");
        assert_eq!((l.acquisitions, l.failed_attempts), (2, 41));
        assert_eq!(l.threads[1].busy_reads, 41);
        assert_eq!(l.wait_ns, (102 - 20) + (10 - 9));
    }
}
