//! The recorder scales with cores: several converter workers
//! (`--writers N`) each convert their share of the program's threads.
//! The trace must be the one a single worker writes: exact counts, one
//! Lock record per lock and one id per call path whichever worker met it
//! first, thread names given across workers, process ends after all of a
//! process's events, timestamps that still order critical sections.

use crate::record_util;
use record_util::*;

use std::collections::{HashMap, HashSet};

use lockscope_format::{phase, Op, Record};

/// Tables written once, whatever the number of workers.
fn check_tables_once(ix: &Index) {
    let mut locks = HashSet::new();
    let mut stack_ids = HashSet::new();
    let mut paths: HashMap<(u32, Vec<u64>), u32> = HashMap::new();
    for r in &ix.trace.records {
        match r {
            Record::Lock(l) => assert!(
                locks.insert((l.process, l.addr)),
                "two Lock records for {:#x}",
                l.addr
            ),
            Record::Stack(s) => {
                assert!(stack_ids.insert(s.id), "stack id {} written twice", s.id);
                if let Some(other) = paths.insert((s.process, s.frames.clone()), s.id) {
                    panic!("one call path under two ids: {other} and {}", s.id);
                }
            }
            _ => {}
        }
    }
    assert!(!locks.is_empty(), "the fixture takes locks");
}

fn record_checked(name: &str, opts: &[&str], args: &[&str]) -> (TempDir, Run, Index) {
    let dir = temp(name);
    let bin = build_c(name, &dir);
    let run = record(&dir, opts, &bin, args, b"");
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    check_tables_once(&ix);
    assert_eq!(
        ix.trace.footer.as_ref().unwrap().lost,
        0,
        "events were lost; stderr:\n{}",
        run.stderr
    );
    (dir, run, ix)
}

#[test]
fn three_converter_workers_record_exact_counts_and_one_table_entry_each() {
    // --stacks all: every acquisition carries a path, and the four worker
    // threads of the fixture share their call paths across workers.
    let (dir, run, ix) = record_checked(
        "mutex",
        &["--writers", "3", "--stacks", "all", "--buffer-kb", "16384"],
        &[],
    );
    assert_eq!(run.code, 3, "{}", run.stderr);
    let truth = truths(&run.stdout);
    check_truth(&ix, &truth, Some(&dir.join("mutex")));
    let stacks = ix
        .trace
        .records
        .iter()
        .filter(|r| matches!(r, Record::Stack(_)))
        .count();
    assert!(stacks > 0, "--stacks all records call paths");
}

#[test]
fn names_given_across_threads_are_kept_with_two_workers() {
    // Two workers (the fixture's two threads share the first: a thread
    // goes to the worker with the fewest live threads, and the main
    // thread is not counted; names across workers are tested with
    // hand-made rings in crates/record/tests/drain_rings.rs).
    let (_dir, run, ix) = record_checked("thread_name", &["--writers", "2", "--quiet"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let want: HashSet<(u32, String)> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("name "))
        .map(|l| {
            let kv = kv(l);
            (kv["tid"].parse().unwrap(), kv["name"].clone())
        })
        .collect();
    assert_eq!(want.len(), 3, "{}", run.stdout);
    let got: HashSet<(u32, String)> = thread_names(&ix.trace)
        .into_iter()
        .map(|(tid, _, name)| (tid, name))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn with_several_workers_process_ends_follow_every_event_of_their_process() {
    // fork + exec: three process images, their threads spread over the
    // workers; each ProcessEnd is written after all of its events.
    let (_dir, run, ix) = record_checked("fork_exec", &["--writers", "3"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    check_truth(&ix, &truths(&run.stdout), None);
    let mut thread_proc = HashMap::new();
    let mut ended = HashSet::new();
    for r in &ix.trace.records {
        match r {
            Record::Thread(t) => {
                thread_proc.insert(t.id, t.process);
            }
            Record::Events(c) => assert!(
                !ended.contains(&thread_proc[&c.thread]),
                "events of process {} after its end",
                thread_proc[&c.thread]
            ),
            Record::ProcessEnd(e) => {
                ended.insert(e.process);
                // Its end is no earlier than its last event.
                for (th, evs) in &ix.trace.events {
                    if thread_proc.get(th) == Some(&e.process) {
                        if let Some(last) = evs.last() {
                            assert!(e.end_ns >= last.time, "process ends before its events");
                        }
                    }
                }
            }
            _ => {}
        }
    }
    assert!(ended.len() >= 2, "fork_exec has several process images");
}

#[test]
fn with_several_workers_no_critical_section_lies_inside_another() {
    let dir = temp("writers_order");
    let bin = build_c("bench/contended", &dir);
    let run = record(&dir, &["--writers", "4"], &bin, &["4", "50000"], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    check_tables_once(&ix);
    assert_eq!(ix.trace.footer.as_ref().unwrap().lost, 0, "{}", run.stderr);
    let acquisitions = ix
        .trace
        .events
        .values()
        .flatten()
        .filter(|e| e.op() == Some(Op::MutexLock) && phase::of(e.flags) == phase::DONE)
        .count();
    assert_eq!(acquisitions, 4 * 50_000, "every acquisition, exactly");
    // Sections per mutex, from every thread (each converted by its own
    // worker with the same tick conversion).
    for (addr, mut v) in mutex_sections(&ix.trace) {
        v.sort_unstable();
        let mut cover: Option<(u64, u64, u32)> = None;
        for &(a, r, th) in &v {
            if let Some((a0, r0, th0)) = cover {
                assert!(
                    !(r < r0 && th != th0),
                    "mutex {addr:#x}: section [{a}, {r}] of thread {th} inside [{a0}, {r0}] of thread {th0}"
                );
            }
            if cover.is_none_or(|c| r > c.1) {
                cover = Some((a, r, th));
            }
        }
    }
}
