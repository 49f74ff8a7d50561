//! `--on-full wait`: a thread whose buffer is full waits for the recorder,
//! so even a tight lock loop into a tiny buffer loses nothing.

use crate::record_util;

use std::process::Command;

use lockscope_format::Op;
use record_util::*;

#[test]
fn on_full_wait_loses_nothing_with_a_tiny_buffer() {
    let dir = temp("on-full-wait");
    let bin = dir.join("uncontended");
    let st = Command::new("gcc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&bin)
        .arg(workspace().join("tests/programs/bench/uncontended.c"))
        .status()
        .expect("gcc must be installed to build the fixtures");
    assert!(st.success());
    // 5 rounds of 400,000 pairs: 4M events through a 64 KiB ring (2,048
    // slots), i.e. the ring fills about 2,000 times over.
    let pairs = 400_000u64;
    let run = record(
        &dir,
        &["--buffer-kb", "64", "--on-full", "wait"],
        &bin,
        &[&pairs.to_string()],
        b"",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("LOST"), "{}", run.stderr);
    let trace = run.trace();
    assert_eq!(trace.footer.as_ref().unwrap().lost, 0);
    assert_eq!(trace.header.get("on_full"), Some("wait"));
    let count = |op: Op| {
        trace
            .events
            .values()
            .flatten()
            .filter(|e| e.op() == Some(op))
            .count() as u64
    };
    assert_eq!(count(Op::MutexLock), 5 * pairs);
    assert_eq!(count(Op::MutexUnlock), 5 * pairs);
}
