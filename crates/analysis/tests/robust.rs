//! Arbitrary event sequences (protocol violations, clock steps, unknown
//! ops) never panic the model, and every thread's breakdown still sums
//! to its lifetime exactly.

mod common;
use common::*;
use lockscope_format::Op;
use proptest::prelude::*;

const OPS: &[Op] = &[
    Op::MutexLock,
    Op::MutexTrylock,
    Op::MutexTimedlock,
    Op::MutexUnlock,
    Op::RwRdlock,
    Op::RwWrlock,
    Op::RwUnlock,
    Op::SpinLock,
    Op::SpinUnlock,
    Op::CondWait,
    Op::CondTimedwait,
    Op::CondSignal,
    Op::BarrierWait,
    Op::SemWait,
    Op::SemTrywait,
    Op::SemPost,
    Op::FutexWait,
    Op::FutexWake,
    Op::ThreadJoin,
    Op::ThreadExit,
    Op::Lost,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn any_sequence_is_survived(
        evs in proptest::collection::vec(
            (1u32..4, 0usize..OPS.len(), 0u8..8, 0u64..4, 0i64..2000, 0u64..3), 0..300),
        overhead in 0.0f64..50.0,
    ) {
        let mut tb = Tb::new();
        tb.chunk = 5;
        for t in 1..4 {
            tb.thread(t, "t", 0, 500_000);
        }
        tb.overhead(overhead, overhead, overhead);
        let mut now = [1000i64; 4];
        for (t, op, flags, a, dt, arg) in evs {
            // Mostly forward, sometimes back (dt < 100 means a step back).
            now[t as usize] += dt - 100;
            let time = now[t as usize].max(0) as u64;
            tb.ev_full(t, time, OPS[op], flags, 0x1000 * (a + 1), 0x40 + a, 0x1000 * (arg + 1), 0);
        }
        let r = report(&tb);
        assert_sums(&r);
        for l in &r.locks {
            prop_assert!(l.contended <= l.acquisitions || l.kind == "futex");
            prop_assert!(l.wait_ns.p99 <= l.wait_ns.max);
        }
        let blamed: u64 = r.blame.iter().map(|b| b.wait_ns).sum();
        let waited: u64 = r.locks.iter().map(|l| l.wait_ns.total).sum();
        prop_assert!(blamed <= waited, "blame {} > wait {}", blamed, waited);
    }
}
