//! The replay's work must be the program's: a thread that runs
//! hot moves to a larger ring, and creating and pre-faulting it (tens of
//! ms for 64 MiB) is the recorder's time spent in the program's thread.
//! It is counted with the thread's waits for the recorder, which its
//! run-queue delay samples include, and a sample follows at once, so the
//! replay takes it out of the segment it fell in. Before, a growth to 16
//! MiB (41 ms) stayed in a detailed recording of `ulcp_table` as work,
//! with the other growths a twelfth of the replayed program.

use crate::record_util;
use record_util::*;

use lockscope_format::Op;

#[test]
fn time_spent_growing_a_ring_is_counted_as_waiting_for_the_recorder() {
    // Its gaps must be the recorder's or the scheduler's: beside another
    // CPU-heavy test of this binary a 6-8 ms stall with no run-queue
    // delay appeared in 2 of 9 full runs (none alone).
    let _cpus = crate::cpus();
    let dir = temp("growth");
    let bin = build_c("bench/uncontended", &dir);
    // One thread locking in a tight loop, starting from an 8 KiB ring
    // allowed to grow to 64 MiB: it grows several times, the last
    // growths taking milliseconds (pre-faulting thousands of pages).
    let run = record(
        &dir,
        &["--buffer-kb", "8", "--max-buffer-kb", "65536"],
        &bin,
        &["1000000"],
        b"",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let t = run.trace();
    assert_eq!(t.footer.as_ref().unwrap().lost, 0, "{}", run.stderr);
    // Every long gap of the thread (a growth, a wait for room, a
    // preemption) must be accounted for, mostly, by the next run-queue
    // delay sample (the one at or after the gap's end: a growth at a
    // release is sampled at the next acquisition). A growth's was not.
    let mut checked = Vec::new();
    for evs in t.events.values() {
        let samples: Vec<(usize, u64)> = evs
            .iter()
            .enumerate()
            .filter(|(_, e)| e.op == Op::RunDelay as u8)
            .map(|(i, e)| (i, e.arg))
            .collect();
        for (i, w) in evs.windows(2).enumerate() {
            let gap = w[1].time - w[0].time;
            if gap <= 3_000_000 {
                continue;
            }
            // The first sample at or after the gap's end, and the one
            // before it.
            let k = samples.partition_point(|&(j, _)| j < i + 1);
            let Some(&(_, after)) = samples.get(k) else {
                panic!("a {gap} ns gap with no run-queue delay sample after it");
            };
            let before = if k > 0 { samples[k - 1].1 } else { 0 };
            checked.push((gap, after.saturating_sub(before)));
        }
    }
    eprintln!("gaps over 3 ms (gap, delay growth), ns: {checked:?}");
    for &(gap, grew) in &checked {
        assert!(
            grew >= gap / 2,
            "a {:.1} ms gap was accounted for by only {:.1} ms of waiting/preemption",
            gap as f64 / 1e6,
            grew as f64 / 1e6
        );
    }
}
