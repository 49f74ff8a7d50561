//! Time a thread was preempted (runnable, no CPU) is measured from
//! its run-queue delay samples (`Op::RunDelay`) and left out of the
//! replay's prediction of the unrecorded run, while the run as recorded
//! still replays to its recorded wall time. Ground truth by construction.

mod common;

use common::*;
use lockscope_format::Op;
use lockscope_replay::replay;
use lockscope_trace::input;

const A: u64 = 0xa000;
const MS: u64 = 1_000_000;

/// Thread 1: a first sample at 1 ms (0.9 ms of run-queue delay so far:
/// a baseline), a 0.1 ms section, then 10 ms of work during which its
/// delay grew by 8 ms (preempted), a second sample and a last section.
/// Thread 2: waits 0.5 ms for thread 1's first section between its two
/// samples, and its delay did not grow: a wait is not preemption.
fn trace() -> Tb {
    let mut tb = Tb::new();
    tb.thread(1, "worker", 0, 12 * MS)
        .thread(2, "waiter", 0, 2 * MS);
    tb.ev_full(1, MS, Op::RunDelay, DONE, 0, 0, 900_000, 0)
        .section(1, MS, MS + 100_000, A, 0x10)
        .ev_full(1, 11 * MS + 100_000, Op::RunDelay, DONE, 0, 0, 8_900_000, 0)
        .section(1, 11 * MS + 100_000, 11 * MS + 200_000, A, 0x10);
    tb.ev_full(2, 500_000, Op::RunDelay, DONE, 0, 0, 40_000, 0)
        .waited_section(2, 600_000, MS + 100_000, MS + 200_000, A, 0x20)
        .ev_full(2, MS + 300_000, Op::RunDelay, DONE, 0, 0, 40_000, 0);
    tb
}

#[test]
fn preempted_time_is_measured_and_left_out_of_the_unrecorded_prediction() {
    let tb = trace();
    let path = tb.write();
    let meta = input::index(&path, &mut |_, _| {}).unwrap();
    for p in [
        replay::build(&path, &meta).unwrap(),
        replay::build_in_memory(&path, &meta).unwrap(),
    ] {
        // Thread 1's 8 ms only: the waiter's blocked 0.5 ms is not
        // preemption, and a first sample only sets the baseline.
        assert_eq!(p.preempted_ns, 8 * MS);
        let r = replay::report(&p, 2).unwrap();
        assert_eq!(r.preempted_ns, 8 * MS);
        // As recorded: the preempted time is waited again.
        assert_eq!(r.replayed_wall_ns, r.recorded_wall_ns, "{r:?}");
        // Unrecorded: 8 ms shorter (nothing else to remove here).
        assert_eq!(r.unrecorded_wall_ns, r.replayed_wall_ns - 8 * MS, "{r:?}");
    }
}

#[test]
fn preemption_is_capped_by_the_segment_that_ends_at_the_sample() {
    // Thread 1's delay grew by 12 ms between samples 10.1 ms apart (an
    // inconsistent trace): at most the 10 ms segment before the sample is
    // preempted, not the section before it (its share is dropped, not
    // guessed).
    let mut tb = Tb::new();
    tb.thread(1, "worker", 0, 12 * MS);
    tb.ev_full(1, MS, Op::RunDelay, DONE, 0, 0, 900_000, 0)
        .section(1, MS, MS + 100_000, A, 0x10)
        .ev_full(
            1,
            11 * MS + 100_000,
            Op::RunDelay,
            DONE,
            0,
            0,
            12_900_000,
            0,
        )
        .section(1, 11 * MS + 100_000, 11 * MS + 200_000, A, 0x10);
    let path = tb.write();
    let meta = input::index(&path, &mut |_, _| {}).unwrap();
    let p = replay::build_in_memory(&path, &meta).unwrap();
    assert_eq!(p.preempted_ns, 10 * MS);
}
