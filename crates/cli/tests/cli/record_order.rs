//! Timestamps order events truly. In a lossless trace no
//! critical section lies inside another thread's critical section on the
//! same mutex: a mutex is held by one thread at a time, an acquisition is
//! stamped after the real lock returned and a release before the real
//! unlock, so the recorded intervals lie inside the true, disjoint, holds.
//! And the trace's contended acquisitions are the ones the program itself
//! found taken.

use crate::record_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use lockscope_format::{phase, Op};
use record_util::*;

/// tests/programs/bench/contended.c, built in `dir`.
fn contended(dir: &Path) -> PathBuf {
    let bin = dir.join("contended");
    let st = Command::new("gcc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&bin)
        .arg(workspace().join("tests/programs/bench/contended.c"))
        .status()
        .expect("gcc must be installed to build the fixtures");
    assert!(st.success());
    bin
}

/// The contention the trace reports is the contention the program met
/// (this answers an open question: is the trace's low contended fraction
/// on 2 CPUs the recorder misjudging contention, or the program really
/// meeting less of it while recorded?). `contended.c`
/// counts, itself, the acquisitions that found the mutex taken (a relaxed
/// load of the lock word just before each lock call); the trace must
/// count the same ones. Measured on the development VM: 1.04-1.09 times
/// the program's count in 9 of 9 runs at 2, 4 and 8 threads (the hook
/// looks a few ns later than the program, and also catches the waits
/// that began after its look). A recorder that missed waits, or took
/// preemptions for waits, would leave this band.
#[test]
fn the_trace_counts_the_contention_the_program_itself_saw() {
    // Its threads must run at once: beside another CPU-heavy test of this
    // binary the hook's look (a few ns after the program's) found the lock
    // taken 690 times against the program's 402 (2 threads), a
    // preemption between the two looks.
    let _cpus = crate::cpus();
    let dir = temp("own-contention");
    let bin = contended(&dir);
    let mut seen = Vec::new();
    for (threads, ops) in [("2", "200000"), ("4", "100000"), ("8", "50000")] {
        let run = record(&dir, &[], &bin, &[threads, ops], b"");
        assert_eq!(run.code, 0, "{}", run.stderr);
        let own: u64 = kv(&run.stdout)
            .get("own_contended")
            .unwrap_or_else(|| panic!("no own_contended in {:?}", run.stdout))
            .parse()
            .unwrap();
        let t = run.trace();
        assert_eq!(t.footer.as_ref().unwrap().lost, 0, "{}", run.stderr);
        let (mut acq, mut cont) = (0u64, 0u64);
        for evs in t.events.values() {
            for e in evs {
                if e.op() == Some(Op::MutexLock) && phase::of(e.flags) == phase::DONE {
                    acq += 1;
                    cont += u64::from(e.flags & phase::CONTENDED != 0);
                }
            }
        }
        assert_eq!(
            acq, 400_000,
            "{threads} threads: every acquisition recorded"
        );
        seen.push(format!("{threads} threads: trace {cont}, program {own}"));
        // A band, not equality: the hook's own look comes a few ns after
        // the program's. With the hook's look disabled (the hidden-wait
        // detection alone), 4 and 8 threads gave 176 for 280 and 117 for
        // 282: outside it.
        let (lo, hi) = ((own * 3 / 4).saturating_sub(20), own * 3 / 2 + 50);
        assert!(
            (lo..=hi).contains(&cont),
            "{threads} threads: the trace counts {cont} contended acquisitions, the program \
             itself saw the mutex taken {own} times: {seen:?}"
        );
    }
    eprintln!("{seen:?}");
}

#[test]
fn no_critical_section_inside_another_on_the_same_mutex() {
    let dir = temp("order");
    let bin = contended(&dir);
    let mut checked = 0usize;
    let mut worst = (0u64, String::new());
    for (threads, ops) in [
        ("2", "100000"),
        ("4", "50000"),
        ("8", "20000"),
        ("2", "100000"),
        ("2", "100000"),
        ("4", "50000"),
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
        for (addr, mut cs) in mutex_sections(&t) {
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
    // Acquisitions are stamped with a fenced read (`tsc::now_after`):
    // before, a plain `rdtsc` after the lock could run ahead of the lock's
    // locked instruction while it waited for the previous owner's cache
    // line, and sections nested by 20-145 ns in every run (8 runs of this
    // test on the development VM; 0 ns in 11 runs with the fence). The
    // bound allows only for the TSCs of two CPUs disagreeing by a few
    // ticks; the deepest nesting is printed.
    eprintln!("deepest nesting: {} ns {}", worst.0, worst.1);
    assert!(worst.0 <= 20, "nested by {} ns: {}", worst.0, worst.1);
    assert!(checked > 300_000, "{checked} sections checked");
}
