//! Issue 8: timestamps order events truly. In a lossless trace no
//! critical section lies inside another thread's critical section on the
//! same mutex: a mutex is held by one thread at a time, an acquisition is
//! stamped after the real lock returned and a release before the real
//! unlock, so the recorded intervals lie inside the true, disjoint, holds.

mod record_util;

use std::collections::HashMap;
use std::process::Command;

use lockscope_format::{phase, Op};
use record_util::*;

/// Critical sections (acquired, released) per (mutex, thread), in order.
fn sections(t: &lockscope_format::Trace) -> HashMap<u64, Vec<(u64, u64, u32)>> {
    let mut out: HashMap<u64, Vec<(u64, u64, u32)>> = HashMap::new();
    for (&th, evs) in &t.events {
        let mut open: HashMap<u64, u64> = HashMap::new();
        for e in evs {
            if phase::of(e.flags) != phase::DONE {
                continue;
            }
            match e.op() {
                Some(Op::MutexLock) => {
                    open.insert(e.addr, e.time);
                }
                Some(Op::MutexUnlock) => {
                    if let Some(a) = open.remove(&e.addr) {
                        out.entry(e.addr).or_default().push((a, e.time, th));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[test]
fn issue8_no_critical_section_inside_another_on_the_same_mutex() {
    let dir = temp("order");
    let bin = dir.join("contended");
    let st = Command::new("gcc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&bin)
        .arg(workspace().join("tests/programs/bench/contended.c"))
        .status()
        .expect("gcc must be installed to build the fixtures");
    assert!(st.success());
    let mut checked = 0usize;
    let mut worst = (0u64, String::new());
    for (threads, ops) in [
        ("2", "100000"),
        ("4", "50000"),
        ("8", "20000"),
        ("2", "100000"),
    ] {
        let run = record(&dir, &[], &bin, &[threads, ops], b"");
        assert_eq!(run.code, 0, "{}", run.stderr);
        let t = run.trace();
        assert_eq!(
            t.footer.as_ref().unwrap().lost,
            0,
            "lossless: {}",
            run.stderr
        );
        for (addr, mut cs) in sections(&t) {
            cs.sort_unstable();
            // Sorted by acquisition: a section inside another one starts
            // after it and ends before the furthest end seen so far. Its
            // depth is the shift that would put it outside.
            let mut cover: Option<(u64, u64, u32)> = None;
            for &(a, r, th) in &cs {
                if let Some((a0, r0, th0)) = cover {
                    if r < r0 && th != th0 {
                        let depth = (a - a0).min(r0 - r);
                        if depth > worst.0 {
                            worst = (
                                depth,
                                format!(
                                    "{threads} threads: section [{a}, {r}] of thread {th} lies \
                                     inside [{a0}, {r0}] of thread {th0} on mutex {addr:#x}"
                                ),
                            );
                        }
                    }
                }
                if !matches!(cover, Some((_, r0, _)) if r <= r0) {
                    cover = Some((a, r, th));
                }
                checked += 1;
            }
        }
    }
    // The hardware bound: TSCs of two CPUs agree within ~100 ticks
    // (measured on the development VM, docs/figures.md; ~40 ns here) and
    // `rdtsc` is not ordered with the locked instruction next to it (a
    // few ns). Before issue 8 the recorder's own error reached microseconds
    // (conversion segments chosen by copy time instead of by tick). A
    // residual remains that is not explained yet: 60-85 ns on a quiet
    // machine, 195-311 ns seen now and then (issue 8 item 6 stays open,
    // docs/recorder.md). The bound below catches the gross errors without
    // failing on that residual; the deepest nesting is printed.
    eprintln!("deepest nesting: {} ns {}", worst.0, worst.1);
    assert!(worst.0 <= 1_000, "nested by {} ns: {}", worst.0, worst.1);
    assert!(checked > 300_000, "{checked} sections checked");
}
