//! An uncontended acquisition is written after its critical
//! section, with the thread's next event (`Guard::defer`), so that
//! recording does not lengthen the section. An acquisition that has no
//! next event, because its process ended while the thread held the lock,
//! must still be in the trace: the recorder publishes what the thread left
//! in its ring header.

use crate::record_util;

use lockscope_format::{phase, Op};
use record_util::*;

/// `held_at_exit MODE`: the worker takes `m` then `n` and waits inside
/// both until main ends the process (`exit(0)` or `raise(SIGKILL)`). The
/// trace must hold both acquisitions, by the same thread, in order, and
/// no release: the ground truth the fixture states.
#[test]
fn acquisitions_still_held_when_the_process_ends_are_in_the_trace() {
    let dir = temp("held-at-exit");
    let bin = build_c("held_at_exit", &dir);
    for (mode, code) in [("exit", 0), ("kill", 128 + 9)] {
        let run = record(&dir, &[], &bin, &[mode], b"");
        assert_eq!(run.code, code, "{mode}: {}", run.stderr);
        let truth = kv(run.stdout.trim());
        let m = hex(&truth["m"]);
        let n = hex(&truth["n"]);
        let t = run.trace();
        let mut seen = Vec::new();
        for (&th, evs) in &t.events {
            for e in evs {
                if e.addr != m && e.addr != n {
                    continue;
                }
                match e.op() {
                    Some(Op::MutexLock) if phase::of(e.flags) == phase::DONE => {
                        seen.push((th, e.addr, e.time, "acquired"))
                    }
                    Some(Op::MutexUnlock) => seen.push((th, e.addr, e.time, "released")),
                    _ => {}
                }
            }
        }
        seen.sort_by_key(|s| s.2);
        let what: Vec<(u64, &str)> = seen.iter().map(|s| (s.1, s.3)).collect();
        assert_eq!(
            what,
            [(m, "acquired"), (n, "acquired")],
            "{mode}: {seen:?}\n{}",
            run.stderr
        );
        assert_eq!(seen[0].0, seen[1].0, "{mode}: one thread took both");
    }
}
