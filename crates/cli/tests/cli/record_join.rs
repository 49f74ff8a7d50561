//! Joins of threads that had already exited name the joined thread.

use crate::record_util;
use record_util::*;

use lockscope_format::{phase, Op};

#[test]
fn join_of_an_exited_thread_records_its_tid() {
    let dir = temp("join_exited");
    let bin = build_c("join_exited", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut tids: Vec<u64> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("tid ")?.parse().ok())
        .collect();
    tids.sort_unstable();
    assert_eq!(tids.len(), 6, "{}", run.stdout);
    let t = run.trace();
    let mut joined: Vec<u64> = t
        .events
        .values()
        .flatten()
        .filter(|e| e.op == Op::ThreadJoin as u8 && e.phase() == phase::DONE)
        .map(|e| e.arg)
        .collect();
    joined.sort_unstable();
    assert_eq!(joined, tids, "every join names the thread it joined");
}
