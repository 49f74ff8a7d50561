//! Thread names: a name set by one thread for another
//! (`pthread_setname_np(worker, ...)`) belongs to the thread named, not to
//! the one that called it.

use crate::record_util;
use record_util::*;

use lockscope_format::Record;

#[test]
fn record_names_go_to_the_thread_named() {
    let dir = temp("thread_name");
    let bin = build_c("thread_name", &dir);
    let run = record(&dir, &["--quiet"], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Ground truth: (tid, name) in the order the names were set per thread.
    let want: Vec<(u32, String)> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("name "))
        .map(|l| {
            let kv = kv(l);
            (kv["tid"].parse().unwrap(), kv["name"].clone())
        })
        .collect();
    assert_eq!(want.len(), 3, "{}", run.stdout);
    let trace = run.trace();
    let got = thread_names(&trace);
    let threads = trace
        .records
        .iter()
        .filter(|r| matches!(r, Record::Thread(_)))
        .count();
    assert_eq!(threads, 2, "main + worker");
    // Names of different threads may be drained in either order, and a
    // name given by another thread may be written before or after the
    // thread's own (several converter workers); per thread, their times
    // give the order they were set.
    let mut got_sorted = got.clone();
    got_sorted.sort_by_key(|&(tid, time, _)| (tid, time));
    let got_sorted: Vec<(u32, String)> =
        got_sorted.into_iter().map(|(tid, _, n)| (tid, n)).collect();
    let mut want_sorted = want.clone();
    want_sorted.sort_by_key(|(tid, _)| *tid);
    assert_eq!(got_sorted, want_sorted, "names in the trace: {got:?}");
}
