//! The clock is chosen at start-up by measuring it, and
//! the choice is recorded in the trace header.

use crate::record_util;
use record_util::*;

use std::process::Command;

#[test]
fn clock_choice_and_wake_up_latency_are_recorded_in_the_trace_header() {
    let dir = temp("clock_default");
    let bin = build_c("mutex", &dir);
    let run = record(&dir, &["--quiet"], &bin, &[], b"");
    assert_eq!(run.code, 3, "mutex.c exits with 3: {}", run.stderr);
    let t = run.trace();
    let clock = t.header.get("clock").expect("clock in the header extras");
    assert!(clock == "tsc" || clock == "monotonic", "clock = {clock}");
    for key in ["clock_tsc_ns", "clock_monotonic_ns"] {
        let v: f64 = t
            .header
            .get(key)
            .unwrap_or_else(|| panic!("{key} missing"))
            .parse()
            .unwrap();
        assert!(v > 0.0 && v < 1e6, "{key} = {v}");
    }
    // The machine's wake-up latency of a sleeping waiter (format 1.2),
    // measured before the program started: more than a clock read, less
    // than the 2 ms after which a waiter of the measurement stops waiting.
    let wake = t.header.sleeping_wake_ns;
    assert!(wake > 100 && wake < 2_000_000, "sleeping_wake_ns = {wake}");
    let ix = Index::new(t);
    check_integrity(&ix);
    check_truth(&ix, &truths(&run.stdout), Some(&bin));
}

#[test]
fn forced_monotonic_clock_is_recorded_and_events_stay_exact() {
    let dir = temp("clock_mono");
    let bin = build_c("mutex", &dir);
    let trace_path = dir.join("trace.lstrace");
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .env("LOCKSCOPE_CLOCK", "monotonic")
        .args(["record", "--quiet", "-o"])
        .arg(&trace_path)
        .arg("--")
        .arg(&bin)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "mutex.c exits with 3: {stderr}");
    let t = lockscope_format::Trace::open(&trace_path).unwrap();
    assert_eq!(t.header.get("clock"), Some("monotonic"));
    // Ticks are nanoseconds then: the calibration must say so.
    assert!(
        (t.header.tsc_hz - 1e9).abs() < 1e7,
        "tsc_hz = {}",
        t.header.tsc_hz
    );
    assert_eq!(t.footer.as_ref().unwrap().lost, 0, "{stderr}");
    let ix = Index::new(t);
    check_integrity(&ix);
    // The program stamped with the same clock the recorder converts with:
    // every event lies within the (seconds-long at most) recording. TSC
    // ticks converted as nanoseconds would land far outside it.
    for &th in ix.thread_proc.keys() {
        for e in ix.events(th) {
            assert!(e.time < 120_000_000_000, "event at {} ns", e.time);
        }
    }
    check_truth(
        &ix,
        &truths(&String::from_utf8_lossy(&out.stdout)),
        Some(&bin),
    );
}
